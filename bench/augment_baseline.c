/* augment_baseline.c — what the built-in augmentation costs per image, on
 * one thread (scripts/bench-augment.sh; docs/performance.md).
 *
 *   wds_augment_baseline [--size S] [--repeat R] FILE...
 *
 * Every JPEG (or PNG) is read into memory first; then, with the loader's
 * own decoder (pipeline/decode.h) and a new augmentation key per image:
 *   crop     decode + RandomResizedCrop (scale (0.08, 1), ratio (3/4, 4/3))
 *            + flip 1/2 to S x S uint8 RGB
 *   jitter   ColorJitter(0.4, 0.4, 0.4, 0.1) alone on those S x S pixels
 *            (draw and apply: pipeline/augment.h)
 *   pipe     the loader's row of the whole pipeline: decode + the crop +
 *            flip + the jitter + Normalize (ImageNet's mean and std) into
 *            S x S x 3 float32 CHW (wds__decode_image_rows and its write)
 * each timed in the thread's CPU time (CLOCK_THREAD_CPUTIME_ID: other
 * processes on a loaded machine do not count), R passes over the files.
 * Prints one JSON line: {"images", "crop_ms", "jitter_ms", "pipe_ms"}, ms
 * per image. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/augment.h"
#include "pipeline/decode.h"

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *alloc_cb(void *ctx, size_t n) {
  (void)ctx;
  return malloc(n);
}

int main(int argc, char **argv) {
  int size = 224, repeat = 3, first = 1;
  while (first < argc && strncmp(argv[first], "--", 2) == 0) {
    if (first + 1 < argc && !strcmp(argv[first], "--size"))
      size = atoi(argv[++first]);
    else if (first + 1 < argc && !strcmp(argv[first], "--repeat"))
      repeat = atoi(argv[++first]);
    else {
      fprintf(stderr, "usage: wds_augment_baseline [--size S] [--repeat R] "
                      "FILE...\n");
      return 2;
    }
    first++;
  }
  int n = argc - first;
  if (n <= 0 || size <= 0 || repeat <= 0) {
    fprintf(stderr, "wds_augment_baseline: no files\n");
    return 2;
  }
  uint8_t **data = calloc((size_t)n, sizeof *data);
  size_t *sizes = calloc((size_t)n, sizeof *sizes);
  for (int i = 0; i < n; i++) {
    FILE *f = fopen(argv[first + i], "rb");
    if (!f) {
      perror(argv[first + i]);
      return 1;
    }
    fseek(f, 0, SEEK_END);
    sizes[i] = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    data[i] = malloc(sizes[i]);
    if (fread(data[i], 1, sizes[i], f) != sizes[i]) {
      perror(argv[first + i]);
      return 1;
    }
    fclose(f);
  }
  wds__augment aug = {
      .ratio_min = 3.0 / 4.0,
      .ratio_max = 4.0 / 3.0,
      .flip_prob = 0.5,
      .jitter = {{0.6, 1.4}, {0.6, 1.4}, {0.6, 1.4}, {-0.1, 0.1}},
      .dtype = WDS_IMAGE_FLOAT32,
      .mean = {0.485, 0.456, 0.406},
      .std = {0.229, 0.224, 0.225}};
  wds__augment crop_only = aug;
  crop_only.jitter = (wds__jitter){{1, 1}, {1, 1}, {1, 1}, {0, 0}};
  crop_only.dtype = WDS_IMAGE_UINT8;
  crop_only.mean[0] = crop_only.mean[1] = crop_only.mean[2] = 0;
  crop_only.std[0] = crop_only.std[1] = crop_only.std[2] = 1;
  wds__image_opts o = {.width = size,
                       .height = size,
                       .channels = 3,
                       .crop = WDS_CROP_RANDOM,
                       .scale_min = 0.08,
                       .scale_max = 1.0};
  size_t px = (size_t)size * (size_t)size * 3;
  uint8_t *u8 = malloc(px);
  uint8_t *work = malloc(px);
  float *row = malloc(px * sizeof(float));
  wds__decoder *d = wds__decoder_new();
  wds__err e;
  double t_crop = 0, t_jit = 0, t_pipe = 0;
  uint64_t key = 1;
  for (int r = 0; r < repeat; r++) {
    for (int i = 0; i < n; i++, key++) {
      o.rng_key = key * 0x9E3779B97F4A7C15ull;
      o.aug = &crop_only;
      double t0 = cpu_now();
      if (wds__decode_image(d, data[i], sizes[i], &o, u8, &e) != WDS_OK) {
        fprintf(stderr, "%s: %s\n", argv[first + i], e.msg);
        return 1;
      }
      double t1 = cpu_now();
      memcpy(work, u8, px);
      double t2 = cpu_now();
      wds__jitter_params jp;
      wds__jitter_draw(&aug.jitter, o.rng_key, &jp);
      wds__jitter_apply(work, (size_t)size * (size_t)size, 3, &jp);
      double t3 = cpu_now();
      o.aug = &aug;
      void *blk = NULL;
      void (*write)(const void *, void *) = NULL;
      if (wds__decode_image_rows(d, data[i], sizes[i], &o, alloc_cb, NULL, &blk,
                                 &write, &e) != WDS_OK) {
        fprintf(stderr, "%s: %s\n", argv[first + i], e.msg);
        return 1;
      }
      write(blk, row);
      double t4 = cpu_now();
      free(blk);
      t_crop += t1 - t0;
      t_jit += t3 - t2;
      t_pipe += t4 - t3;
    }
  }
  double k = 1e3 / ((double)n * repeat);
  printf("{\"images\": %d, \"crop_ms\": %.4f, \"jitter_ms\": %.4f, "
         "\"pipe_ms\": %.4f}\n",
         n * repeat, t_crop * k, t_jit * k, t_pipe * k);
  wds__decoder_free(d);
  for (int i = 0; i < n; i++)
    free(data[i]);
  free(data);
  free(sizes);
  free(u8);
  free(work);
  free(row);
  return 0;
}
