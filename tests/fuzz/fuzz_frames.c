/* fuzz_frames.c — libFuzzer target for the reader's checked frames (issue
 * 34): a differential check that no damaged sample comes out as valid.
 *
 * The input chooses a shard and its damage: samples whose data are slices
 * of the input, written as a plain tar by wds's tar writer, compressed as
 * many small zstd frames (content checksums on) or gzip members, cut at
 * member boundaries every few KiB; then bits flipped at places the input
 * names. The reader (at a max_unverified_bytes the input picks, sometimes
 * below a frame) reads it on past errors, as a skipping loader would.
 * Every sample it returns must be one of the clean shard's, byte for byte,
 * unless the reader counted it as unverified (its frame was over the
 * bound); anything else traps.
 *
 * Input: byte 0: bit 0 gzip (else zstd), bits 1-2 the bound (64 MiB,
 * 1 KiB, 8 KiB, 32 KiB), bits 3-5 the frame size in KiB (1..8); byte 1:
 * the number of flips (0..7); then per flip 4 bytes (a position, taken
 * modulo the compressed size, and a bit); the rest is sample data, cut
 * into samples of lengths taken from its own bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/err.h"
#include "shards/tarw.h"
#include "wds/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SAMPLES 64

typedef struct out_buf {
  uint8_t *p;
  size_t n, cap;
} out_buf;

static int put(out_buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t c = (b->n + n) * 2;
    uint8_t *q = realloc(b->p, c);
    if (!q)
      return -1;
    b->p = q;
    b->cap = c;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  return 0;
}

static int piece(out_buf *out, int gzip, const uint8_t *p, size_t n) {
  if (!gzip) {
    ZSTD_CCtx *c = ZSTD_createCCtx();
    size_t cap = ZSTD_compressBound(n);
    uint8_t *tmp = malloc(cap);
    int rc = -1;
    if (c && tmp) {
      ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
      ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 1);
      size_t k = ZSTD_compress2(c, tmp, cap, p, n);
      rc = ZSTD_isError(k) ? -1 : put(out, tmp, k);
    }
    free(tmp);
    ZSTD_freeCCtx(c);
    return rc;
  }
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 1, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  size_t cap = deflateBound(&z, (uLong)n) + 64;
  uint8_t *tmp = malloc(cap);
  int rc = -1;
  if (tmp) {
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    z.next_out = tmp;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) == Z_STREAM_END)
      rc = put(out, tmp, cap - z.avail_out);
  }
  deflateEnd(&z);
  free(tmp);
  return rc;
}

static int memfd_with(const uint8_t *p, size_t n) {
  int fd = memfd_create("wds-fuzz-frames", MFD_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t off = 0;
  while (off < n) {
    ssize_t k = write(fd, p + off, n - off);
    if (k <= 0) {
      close(fd);
      return -1;
    }
    off += (size_t)k;
  }
  return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  int gzip = data[0] & 1;
  static const uint64_t bounds[4] = {0, 1024, 8192, 32768};
  uint64_t bound = bounds[(data[0] >> 1) & 3];
  size_t frame_bytes = (size_t)(1 + ((data[0] >> 3) & 7)) << 10;
  size_t nflips = data[1] & 7;
  if (size < 2 + 4 * nflips)
    return 0;
  const uint8_t *flips = data + 2;
  const uint8_t *rest = flips + 4 * nflips;
  size_t rest_n = size - 2 - 4 * nflips;

  /* The clean shard: samples s00..s63, one "bin" field each. */
  const uint8_t *sample_at[MAX_SAMPLES];
  size_t sample_len[MAX_SAMPLES], nsamples = 0, at = 0;
  while (at < rest_n && nsamples < MAX_SAMPLES) {
    size_t len = (size_t)rest[at] * 23 % 4000;
    at++;
    if (len > rest_n - at)
      len = rest_n - at;
    sample_at[nsamples] = rest + at;
    sample_len[nsamples++] = len;
    at += len;
  }
  int tfd = memfd_create("wds-fuzz-tar", MFD_CLOEXEC);
  if (tfd < 0)
    return 0;
  wds__tarw *w;
  wds__err e;
  size_t bound_at[MAX_SAMPLES + 1], nb = 0;
  if (wds__tarw_open_fd(tfd, NULL, &w, &e) != WDS_OK) {
    close(tfd);
    return 0;
  }
  for (size_t i = 0; i < nsamples; i++) {
    char name[32];
    snprintf(name, sizeof name, "s%02zu.bin", i);
    wds__tarw_stats st;
    wds__tarw_stats_get(w, &st);
    bound_at[nb++] = (size_t)st.tar_bytes;
    if (wds__tarw_add(w, name, sample_at[i], sample_len[i], &e) != WDS_OK)
      break;
  }
  int ok = wds__tarw_finish(w, &e) == WDS_OK;
  wds__tarw_close(w);
  off_t tar_n = lseek(tfd, 0, SEEK_END);
  uint8_t *tar = ok && tar_n > 0 ? malloc((size_t)tar_n) : NULL;
  if (!tar || pread(tfd, tar, (size_t)tar_n, 0) != tar_n) {
    free(tar);
    close(tfd);
    return 0;
  }
  close(tfd);

  /* Frames of about frame_bytes, cut at member boundaries. */
  out_buf z = {0};
  size_t start = 0;
  for (size_t i = 1; i <= nb; i++) {
    size_t end = i == nb ? (size_t)tar_n : bound_at[i];
    if (end - start < frame_bytes && i < nb)
      continue;
    if (piece(&z, gzip, tar + start, end - start) != 0) {
      free(tar);
      free(z.p);
      return 0;
    }
    start = end;
  }
  free(tar);
  for (size_t k = 0; k < nflips && z.n; k++) {
    uint32_t v = (uint32_t)flips[4 * k] | (uint32_t)flips[4 * k + 1] << 8 |
                 (uint32_t)flips[4 * k + 2] << 16;
    z.p[v % z.n] ^= (uint8_t)(1u << (flips[4 * k + 3] & 7));
  }
  int fd = memfd_with(z.p, z.n);
  free(z.p);
  if (fd < 0)
    return 0;
  char url[64];
  snprintf(url, sizeof url, "/proc/self/fd/%d", fd);
  const char *urls[] = {url};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 1;
  cfg.buffer_size_bytes = 65536;
  cfg.max_sample_bytes = 8 << 20;
  cfg.max_unverified_bytes = bound;
  wds_reader *r;
  if (wds_reader_open(&cfg, &r) == WDS_OK) {
    const wds_sample *s;
    uint64_t unverified = 0;
    for (int i = 0; i < 1000; i++) {
      int rc = wds_reader_next(r, &s);
      if (rc == WDS_EOF)
        break;
      if (rc != WDS_OK)
        continue;
      wds_reader_stats st;
      wds_reader_stats_get(r, &st);
      int counted = st.unverified_samples > unverified;
      unverified = st.unverified_samples;
      /* A clean sample: its key names one, and its one field is that
       * sample's bytes. */
      char *end;
      long k = s->key[0] == 's' ? strtol(s->key + 1, &end, 10) : -1;
      int same = k >= 0 && (size_t)k < nsamples && *end == '\0' &&
                 s->field_count == 1 &&
                 strcmp(s->fields[0].name + strlen(s->key), ".bin") == 0 &&
                 s->fields[0].size_bytes == sample_len[k] &&
                 (sample_len[k] == 0 ||
                  memcmp(s->fields[0].data, sample_at[k], sample_len[k]) == 0);
      if (!same && !counted)
        __builtin_trap(); /* a damaged sample delivered as checked */
    }
    wds_reader_close(r);
  }
  close(fd);
  return 0;
}
