/* jpeg_baseline.c — the bare JPEG decode loop: the ceiling the loader's
 * image pipeline is compared with (docs/performance.md).
 *
 *   wds_jpeg_baseline [--threads N] [--size S] [--repeat R] [--dct-only]
 *                     [--json] FILE... | --list LISTFILE
 *
 * Every file is read into memory first; then N threads (the files split
 * evenly, thread t takes files t, t + N, ...) decode each one R times with
 * the loader's own decoder (pipeline/decode.h: TurboJPEG at the chosen DCT
 * scale, Pillow-style BILINEAR resize, center crop to S x S RGB) into one
 * output buffer per thread. No reading, batching or copying is timed: it is
 * what a perfect loader would cost per image. Prints images/s and MB/s of
 * compressed input.
 *
 * --dct-only: TurboJPEG's DCT-scaled decode alone, no resize or crop: each
 * file's decoded size is the one the loader's decoder picks for an S x S
 * center crop (wds__decode_jpeg_scaled, found before the clock starts), and
 * the timed loop is tjDecompress2 to that size into one RGB buffer per
 * thread with the decoder's flags: the floor of the JPEG path (the
 * target: the loader >= 0.85 of it). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

#include "pipeline/decode.h"

typedef struct blob {
  uint8_t *data;
  size_t size;
  int dct_w, dct_h; /* --dct-only: the decoded size */
} blob;

typedef struct job {
  const blob *files;
  size_t count, first, step;
  int size, repeat, dct_only;
  size_t dct_max; /* largest dct_w * dct_h */
  uint64_t images, bytes, failed;
  char error[WDS__ERR_SIZE];
} job;

static void *run_dct(job *j) {
  tjhandle tj = tjInitDecompress();
  uint8_t *out = malloc(j->dct_max * 3 + 1);
  if (!tj || !out) {
    snprintf(j->error, sizeof j->error, "out of memory");
    j->failed++;
    goto cleanup;
  }
  for (int r = 0; r < j->repeat; r++) {
    for (size_t i = j->first; i < j->count; i += j->step) {
      const blob *b = &j->files[i];
      if (tjDecompress2(tj, b->data, (unsigned long)b->size, out, b->dct_w, 0,
                        b->dct_h, TJPF_RGB, TJFLAG_STOPONWARNING) != 0) {
        j->failed++;
        snprintf(j->error, sizeof j->error, "%s", tjGetErrorStr2(tj));
        continue;
      }
      j->images++;
      j->bytes += b->size;
    }
  }
cleanup:
  free(out);
  if (tj)
    tjDestroy(tj);
  return NULL;
}

static void *run_job(void *arg) {
  job *j = arg;
  if (j->dct_only)
    return run_dct(j);
  wds__decoder *d = wds__decoder_new();
  uint8_t *out = malloc((size_t)j->size * (size_t)j->size * 3);
  if (!d || !out) {
    snprintf(j->error, sizeof j->error, "out of memory");
    j->failed++;
    goto cleanup;
  }
  wds__image_opts o = {.width = j->size,
                       .height = j->size,
                       .channels = 3,
                       .crop = WDS_CROP_CENTER};
  for (int r = 0; r < j->repeat; r++) {
    for (size_t i = j->first; i < j->count; i += j->step) {
      wds__err e;
      if (wds__decode_image(d, j->files[i].data, j->files[i].size, &o, out,
                            &e) != WDS_OK) {
        j->failed++;
        snprintf(j->error, sizeof j->error, "%s", e.msg);
        continue;
      }
      j->images++;
      j->bytes += j->files[i].size;
    }
  }
cleanup:
  free(out);
  wds__decoder_free(d);
  return NULL;
}

static int load(const char *path, blob *b) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  size_t cap = 1 << 16;
  b->data = malloc(cap);
  b->size = 0;
  size_t n;
  while (b->data && (n = fread(b->data + b->size, 1, cap - b->size, f)) > 0) {
    b->size += n;
    if (b->size == cap) {
      uint8_t *p = realloc(b->data, cap *= 2);
      if (!p) {
        free(b->data);
        b->data = NULL;
      }
      b->data = p;
    }
  }
  fclose(f);
  return b->data ? 0 : -1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void) {
  fprintf(stderr, "usage: wds_jpeg_baseline [--threads N] [--size S] "
                  "[--repeat R] [--dct-only] [--json] FILE... | --list "
                  "LISTFILE\n");
}

int main(int argc, char **argv) {
  int threads = 1, size = 224, repeat = 1, json = 0, dct_only = 0, status = 1;
  const char *list = NULL;
  char **paths = NULL;
  size_t npaths = 0, cap = 0;
  blob *files = NULL;
  job *jobs = NULL;
  pthread_t *tids = NULL;
  size_t loaded = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(a, "--size") && i + 1 < argc)
      size = atoi(argv[++i]);
    else if (!strcmp(a, "--repeat") && i + 1 < argc)
      repeat = atoi(argv[++i]);
    else if (!strcmp(a, "--json"))
      json = 1;
    else if (!strcmp(a, "--dct-only"))
      dct_only = 1;
    else if (!strcmp(a, "--list") && i + 1 < argc)
      list = argv[++i];
    else if (a[0] == '-') {
      usage();
      goto cleanup;
    } else {
      if (npaths == cap) {
        cap = cap ? 2 * cap : 256;
        char **p = realloc(paths, cap * sizeof *paths);
        if (!p)
          goto cleanup;
        paths = p;
      }
      paths[npaths++] = strdup(a);
    }
  }
  if (list) {
    FILE *f = fopen(list, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
      line[strcspn(line, "\r\n")] = '\0';
      if (!line[0])
        continue;
      if (npaths == cap) {
        cap = cap ? 2 * cap : 256;
        char **p = realloc(paths, cap * sizeof *paths);
        if (!p)
          goto cleanup;
        paths = p;
      }
      paths[npaths++] = strdup(line);
    }
    if (f)
      fclose(f);
    else
      fprintf(stderr, "wds_jpeg_baseline: cannot open %s\n", list);
  }
  if (threads < 1 || size < 1 || repeat < 1 || npaths == 0) {
    usage();
    goto cleanup;
  }
  files = calloc(npaths, sizeof *files);
  jobs = calloc((size_t)threads, sizeof *jobs);
  tids = calloc((size_t)threads, sizeof *tids);
  if (!files || !jobs || !tids)
    goto cleanup;
  uint64_t total_bytes = 0;
  for (; loaded < npaths; loaded++) {
    if (load(paths[loaded], &files[loaded]) != 0) {
      fprintf(stderr, "wds_jpeg_baseline: cannot read %s\n", paths[loaded]);
      goto cleanup;
    }
    total_bytes += files[loaded].size;
  }
  size_t dct_max = 0;
  if (dct_only) { /* the loader decoder's DCT scale per file, untimed */
    wds__decoder *d = wds__decoder_new();
    wds__image_opts o = {
        .width = size, .height = size, .channels = 3, .crop = WDS_CROP_CENTER};
    for (size_t i = 0; d && i < npaths; i++) {
      wds__err e;
      if (wds__decode_jpeg_scaled(d, files[i].data, files[i].size, &o,
                                  &files[i].dct_w, &files[i].dct_h,
                                  &e) != WDS_OK) {
        fprintf(stderr, "wds_jpeg_baseline: %s: %s\n", paths[i], e.msg);
        wds__decoder_free(d);
        goto cleanup;
      }
      size_t px = (size_t)files[i].dct_w * (size_t)files[i].dct_h;
      if (px > dct_max)
        dct_max = px;
    }
    if (!d)
      goto cleanup;
    wds__decoder_free(d);
  }
  double t0 = now_s();
  for (int t = 0; t < threads; t++) {
    jobs[t] = (job){.files = files,
                    .count = npaths,
                    .first = (size_t)t,
                    .step = (size_t)threads,
                    .size = size,
                    .repeat = repeat,
                    .dct_only = dct_only,
                    .dct_max = dct_max};
    if (pthread_create(&tids[t], NULL, run_job, &jobs[t]) != 0) {
      fprintf(stderr, "wds_jpeg_baseline: cannot start threads\n");
      for (int k = 0; k < t; k++)
        pthread_join(tids[k], NULL);
      goto cleanup;
    }
  }
  uint64_t images = 0, bytes = 0, failed = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(tids[t], NULL);
    images += jobs[t].images;
    bytes += jobs[t].bytes;
    failed += jobs[t].failed;
    if (jobs[t].failed)
      fprintf(stderr, "wds_jpeg_baseline: %llu failed, e.g. %s\n",
              (unsigned long long)jobs[t].failed, jobs[t].error);
  }
  double secs = now_s() - t0;
  double ips = images / secs, mbs = bytes / secs / 1e6;
  if (json)
    printf("{\"files\": %zu, \"input_bytes\": %llu, \"threads\": %d, "
           "\"size\": %d, \"repeat\": %d, \"dct_only\": %s, \"images\": %llu, "
           "\"failed\": "
           "%llu, \"seconds\": %.4f, \"images_per_s\": %.1f, "
           "\"mb_per_s\": %.2f}\n",
           npaths, (unsigned long long)total_bytes, threads, size, repeat,
           dct_only ? "true" : "false", (unsigned long long)images,
           (unsigned long long)failed, secs, ips, mbs);
  else
    printf("%zu files (%.1f MB), %d thread(s), %s %dx%d: "
           "%llu images in %.3f s = %.1f images/s, %.2f MB/s%s\n",
           npaths, total_bytes / 1e6, threads,
           dct_only ? "DCT-scaled decode only, for" : "RGB center crop", size,
           size, (unsigned long long)images, secs, ips, mbs,
           failed ? " (with failures)" : "");
  status = failed ? 1 : 0;
cleanup:
  for (size_t i = 0; i < loaded; i++)
    free(files[i].data);
  for (size_t i = 0; i < npaths; i++)
    free(paths[i]);
  free(paths);
  free(files);
  free(jobs);
  free(tids);
  return status;
}
