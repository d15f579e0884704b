/* test_corrupt.c — the corruption run (issue 34): random bit flips in
 * shards, read through the loader, and no altered sample delivered as a
 * valid row.
 *
 * One shard of random samples is written as a plain tar, then compressed
 * five ways: zstd as one frame and as many frames (content checksums on),
 * gzip as one member and as many members, and left plain. Each iteration
 * (seeded, reproducible) takes one of them, flips one to three bits at a
 * place of one kind (anywhere in the data, in a tar header, around a
 * frame or member boundary, in a frame's checksum or a member's trailer)
 * and reads the shard with the loader four ways: on_error skip and stop,
 * plain mode without an index and exact mode with one. Every row marked
 * valid must be a sample of the clean shard, byte for byte.
 *
 * A plain tar carries no check over member data (only over headers): its
 * flips go to headers (and the end-of-archive blocks) alone.
 *
 *   test_corrupt [ITERATIONS [SEED]]   (default 200, seed 34; also
 *                                       WDS_CORRUPT_ITERATIONS)
 * scripts/corrupt-run.sh runs 1,000. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/err.h"
#include "shards/tarw.h"
#include "test.h"
#include "wds/loader.h"
#include "wds/reader.h"

#define NSAMPLES 48
#define FRAME_TAR_BYTES (24 * 1024)

static char tmpdir[256];

typedef struct sample {
  char key[16];
  uint8_t *bin;
  size_t bin_len;
  uint8_t *dat;
  size_t dat_len;
} sample;
static sample clean[NSAMPLES];

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf;
static void put(buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

/* Each format: the file's bytes and where its frames or members start. */
enum { F_PLAIN, F_ZST1, F_ZSTN, F_GZ1, F_GZN, NFORMATS };
static const char *const fmt_name[] = {"tar", "zst1", "zstN", "gz1", "gzN"};
static const char *const fmt_ext[] = {"tar", "tar.zst", "tar.zst", "tar.gz",
                                      "tar.gz"};
static buf shard[NFORMATS];
static size_t frame_at[NFORMATS][256]; /* frame starts, then the end */
static size_t nframes[NFORMATS];
static size_t tar_headers[NSAMPLES * 2 + 2]; /* header offsets in the tar */
static size_t ntar_headers;

static int zstd_checksum = 1;

static void zstd_piece(buf *out, const uint8_t *p, size_t n) {
  ZSTD_CCtx *c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, zstd_checksum);
  size_t cap = ZSTD_compressBound(n);
  uint8_t *tmp = malloc(cap);
  size_t k = ZSTD_compress2(c, tmp, cap, p, n);
  put(out, tmp, k);
  free(tmp);
  ZSTD_freeCCtx(c);
}

static void gzip_piece(buf *out, const uint8_t *p, size_t n) {
  z_stream z;
  memset(&z, 0, sizeof z);
  deflateInit2(&z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY);
  size_t cap = deflateBound(&z, (uLong)n) + 64;
  uint8_t *tmp = malloc(cap);
  z.next_in = (uint8_t *)p;
  z.avail_in = (uInt)n;
  z.next_out = tmp;
  z.avail_out = (uInt)cap;
  deflate(&z, Z_FINISH);
  put(out, tmp, cap - z.avail_out);
  deflateEnd(&z);
  free(tmp);
}

/* Compresses tar in pieces that end on member boundaries (bounds[]). */
static void compress_shard(int f, const buf *tar, const size_t *bounds,
                           size_t nbounds) {
  buf *out = &shard[f];
  size_t start = 0;
  nframes[f] = 0;
  for (size_t i = 0; i <= nbounds; i++) {
    size_t end = i == nbounds ? tar->n : bounds[i];
    if (end <= start)
      continue;
    frame_at[f][nframes[f]++] = out->n;
    if (f == F_ZST1 || f == F_ZSTN)
      zstd_piece(out, tar->p + start, end - start);
    else
      gzip_piece(out, tar->p + start, end - start);
    start = end;
  }
  frame_at[f][nframes[f]] = out->n;
}

static int make_shards(void) {
  wds__err e;
  char path[512];
  snprintf(path, sizeof path, "%s/clean.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK)
    return -1;
  for (int i = 0; i < NSAMPLES; i++) {
    sample *s = &clean[i];
    snprintf(s->key, sizeof s->key, "s%04d", i);
    s->bin_len = 100 + rnd() % 30000;
    s->dat_len = 1 + rnd() % 300;
    s->bin = malloc(s->bin_len);
    s->dat = malloc(s->dat_len);
    for (size_t k = 0; k < s->bin_len; k++)
      s->bin[k] = (uint8_t)(rnd() % 7); /* compressible */
    for (size_t k = 0; k < s->dat_len; k++)
      s->dat[k] = (uint8_t)rnd();
    char name[64];
    snprintf(name, sizeof name, "%.15s.bin", s->key);
    if (wds__tarw_add(w, name, s->bin, s->bin_len, &e) != WDS_OK)
      return -1;
    snprintf(name, sizeof name, "%.15s.dat", s->key);
    if (wds__tarw_add(w, name, s->dat, s->dat_len, &e) != WDS_OK)
      return -1;
  }
  if (wds__tarw_finish(w, &e) != WDS_OK)
    return -1;
  wds__tarw_close(w);
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  buf tar = {0};
  uint8_t tmp[65536];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
    put(&tar, tmp, n);
  fclose(f);
  /* Member boundaries (headers), and frame bounds every ~24 KiB on them. */
  size_t bounds[256], nb = 0, last = 0;
  for (size_t off = 0; off + 512 <= tar.n;) {
    const uint8_t *h = tar.p + off;
    if (h[0] == 0) {
      tar_headers[ntar_headers++] = off; /* the end-of-archive blocks */
      break;
    }
    tar_headers[ntar_headers++] = off;
    if (off - last >= FRAME_TAR_BYTES && nb < 255) {
      bounds[nb++] = off;
      last = off;
    }
    size_t size = strtoul((const char *)h + 124, NULL, 8);
    off += 512 + (size + 511) / 512 * 512;
  }
  shard[F_PLAIN] = tar;
  nframes[F_PLAIN] = 1;
  frame_at[F_PLAIN][1] = tar.n;
  compress_shard(F_ZST1, &tar, NULL, 0);
  compress_shard(F_ZSTN, &tar, bounds, nb);
  compress_shard(F_GZ1, &tar, NULL, 0);
  compress_shard(F_GZN, &tar, bounds, nb);
  return 0;
}

/* A region of one kind in format f's bytes: [*lo, *hi). */
enum { K_DATA, K_HEADER, K_BOUNDARY, K_CHECKSUM, NKINDS };
static const char *const kind_name[] = {"data", "header", "boundary",
                                        "checksum"};
static void pick_region(int f, int kind, size_t *lo, size_t *hi) {
  size_t n = shard[f].n;
  if (f == F_PLAIN) { /* a header block: a plain tar's data has no check */
    size_t h = tar_headers[rnd() % ntar_headers];
    *lo = h;
    *hi = h + 512 < n ? h + 512 : n;
    return;
  }
  size_t fr = rnd() % nframes[f];
  size_t start = frame_at[f][fr], end = frame_at[f][fr + 1];
  switch (kind) {
  case K_HEADER: /* the frame's or member's header */
    *lo = start;
    *hi = start + 18;
    break;
  case K_BOUNDARY: /* a few bytes either side of a frame start */
    *lo = start >= 8 ? start - 8 : 0;
    *hi = start + 8;
    break;
  case K_CHECKSUM: /* zstd: the 4-byte checksum; gzip: CRC-32, ISIZE */
    *lo = end - ((f == F_ZST1 || f == F_ZSTN) ? 4 : 8);
    *hi = end;
    break;
  default: /* anywhere, the flips within 64 bytes */
    *lo = rnd() % n;
    *hi = *lo + 64 < n ? *lo + 64 : n;
  }
}

typedef struct run_result {
  int rc;
  uint64_t valid, altered;
  char first[256];
} run_result;

static const sample *find(const char *key) {
  if (strncmp(key, "s", 1) != 0)
    return NULL;
  char *end;
  long i = strtol(key + 1, &end, 10);
  if (*end || i < 0 || i >= NSAMPLES || strcmp(clean[i].key, key) != 0)
    return NULL;
  return &clean[i];
}

static uint64_t max_unverified; /* 0: the default */
static wds_loader_stats last_stats;

static void run_loader(const char *path, const char *index, int skip,
                       run_result *out) {
  memset(out, 0, sizeof *out);
  wds_field_spec fs[2] = {{"bin", WDS_DECODE_BYTES, 0, 0, 0},
                          {"dat", WDS_DECODE_BYTES, 0, 0, 0}};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.spec = path;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = fs;
  c.field_count = 2;
  c.batch_size = 8;
  c.on_error = skip ? WDS_ON_ERROR_SKIP : WDS_ON_ERROR_STOP;
  c.max_unverified_bytes = max_unverified;
  if (index) {
    c.mode = WDS_MODE_EXACT;
    c.index_path = index;
  }
  wds_loader *l;
  int rc = wds_loader_open(&c, &l);
  if (rc != WDS_OK) {
    out->rc = rc;
    return;
  }
  const wds_batch *b;
  while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
    for (size_t r = 0; r < b->rows; r++) {
      if (!b->valid[r])
        continue;
      out->valid++;
      const sample *s = find(b->keys[r]);
      const wds_batch_field *fb = &b->fields[0], *fd = &b->fields[1];
      size_t bl = (size_t)(fb->offsets[r + 1] - fb->offsets[r]);
      size_t dl = (size_t)(fd->offsets[r + 1] - fd->offsets[r]);
      const uint8_t *bp = (const uint8_t *)fb->data + fb->offsets[r];
      const uint8_t *dp = (const uint8_t *)fd->data + fd->offsets[r];
      if (!s || bl != s->bin_len || dl != s->dat_len ||
          memcmp(bp, s->bin, bl) != 0 || memcmp(dp, s->dat, dl) != 0) {
        if (!out->altered++)
          snprintf(out->first, sizeof out->first, "row \"%s\"", b->keys[r]);
      }
    }
    wds_loader_release(l, b);
  }
  out->rc = rc == WDS_EOF ? WDS_OK : rc;
  wds_loader_stats_get(l, &last_stats);
  wds_loader_close(l);
}

static long iterations = 200;
static uint64_t seed = 34;

/* Reads each clean shard: every sample, valid and unaltered (the check
 * itself works). */
TEST(clean_reads) {
  char path[512], index[512];
  for (int f = 0; f < NFORMATS; f++) {
    snprintf(path, sizeof path, "%s/clean-%s.%s", tmpdir, fmt_name[f],
             fmt_ext[f]);
    FILE *fp = fopen(path, "wb");
    ASSERT_TRUE(fp != NULL);
    fwrite(shard[f].p, 1, shard[f].n, fp);
    fclose(fp);
    snprintf(index, sizeof index, "%s/clean-%s.json", tmpdir, fmt_name[f]);
    fp = fopen(index, "w");
    ASSERT_TRUE(fp != NULL);
    fprintf(fp,
            "{\"wids_version\": 1, \"shardlist\": [{\"url\": \"%s\", "
            "\"nsamples\": %d}]}\n",
            path, NSAMPLES);
    fclose(fp);
    for (int v = 0; v < 4; v++) {
      run_result r;
      run_loader(path, v & 2 ? index : NULL, v & 1, &r);
      if (r.rc != WDS_OK)
        printf("  %s: %s\n", fmt_name[f], wds_last_error());
      ASSERT_EQ_INT(r.rc, WDS_OK);
      ASSERT_EQ_U64(r.valid, NSAMPLES);
      ASSERT_EQ_U64(r.altered, 0);
    }
  }
}

/* The bound: a frame larger than max_unverified_bytes is not held. Its
 * samples are delivered as they come and counted; a flip in its last
 * samples' data is then caught only at the frame's end (the gap
 * docs/loader.md states); under the bound, nothing is delivered. */
TEST(bound_policy) {
  char path[512];
  snprintf(path, sizeof path, "%s/clean-zst1.tar.zst", tmpdir);
  run_result r;
  run_loader(path, NULL, 0, &r);
  ASSERT_EQ_INT(r.rc, WDS_OK);
  ASSERT_EQ_U64(last_stats.unverified_samples, 0);
  max_unverified = 64 << 10; /* the one frame is ~700 KiB of tar */
  run_loader(path, NULL, 0, &r);
  max_unverified = 0;
  ASSERT_EQ_INT(r.rc, WDS_OK);
  ASSERT_EQ_U64(r.valid, NSAMPLES);
  ASSERT_TRUE(last_stats.unverified_samples > 0);
  ASSERT_TRUE(last_stats.unverified_samples < NSAMPLES); /* the last ones
                                                            are held */
  /* Many small frames: every sample held, none unverified. */
  snprintf(path, sizeof path, "%s/clean-zstN.tar.zst", tmpdir);
  max_unverified = 64 << 10;
  run_loader(path, NULL, 0, &r);
  max_unverified = 0;
  ASSERT_EQ_INT(r.rc, WDS_OK);
  ASSERT_EQ_U64(r.valid, NSAMPLES);
  ASSERT_EQ_U64(last_stats.unverified_samples, 0);
  /* A flip in the data of the first sample of the one large frame: under
   * the bound it is an error before any row... */
  buf *sh = &shard[F_ZST1];
  uint8_t *bad = malloc(sh->n);
  memcpy(bad, sh->p, sh->n);
  bad[sh->n / 2] ^= 0x10;
  snprintf(path, sizeof path, "%s/bound.tar.zst", tmpdir);
  FILE *fp = fopen(path, "wb");
  ASSERT_TRUE(fp != NULL);
  fwrite(bad, 1, sh->n, fp);
  fclose(fp);
  free(bad);
  run_loader(path, NULL, 1, &r);
  ASSERT_EQ_U64(r.valid, 0);
  ASSERT_EQ_U64(r.altered, 0);
  ASSERT_EQ_U64(last_stats.skipped, 1);
  /* The reader says which sample, and why: the frame's checksum. */
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  const char *urls[1] = {path};
  rc.urls = urls;
  rc.url_count = 1;
  wds_reader *rd;
  ASSERT_EQ_INT(wds_reader_open(&rc, &rd), WDS_OK);
  const wds_sample *smp;
  int st = wds_reader_next(rd, &smp);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", wds_last_error());
  wds_reader_close(rd);
  ASSERT_EQ_INT(st, WDS_ERR_DECOMPRESS);
  ASSERT_CONTAINS(msg, "sample \"s0000\"");
  ASSERT_CONTAINS(msg, "the rest of the shard not delivered");
  ASSERT_CONTAINS(msg, "checksum");
  /* zstd frames without a checksum carry nothing to check: not held, and
   * every sample counted as unverified. */
  buf nocheck = {0};
  zstd_checksum = 0;
  buf *tar = &shard[F_PLAIN];
  zstd_piece(&nocheck, tar->p, tar->n / 2);
  zstd_piece(&nocheck, tar->p + tar->n / 2, tar->n - tar->n / 2);
  zstd_checksum = 1;
  snprintf(path, sizeof path, "%s/nocheck.tar.zst", tmpdir);
  fp = fopen(path, "wb");
  ASSERT_TRUE(fp != NULL);
  fwrite(nocheck.p, 1, nocheck.n, fp);
  fclose(fp);
  free(nocheck.p);
  run_loader(path, NULL, 0, &r);
  ASSERT_EQ_INT(r.rc, WDS_OK);
  ASSERT_EQ_U64(r.valid, NSAMPLES);
  ASSERT_EQ_U64(last_stats.unverified_samples, NSAMPLES);
}

TEST(corruption_run) {
  char path[512], index[512];
  uint64_t altered_runs = 0, runs = 0, errors = 0, by_fmt[NFORMATS] = {0};
  uint64_t valid_rows = 0;
  rng_state = seed * 0x100000001B3ull;
  for (long it = 0; it < iterations; it++) {
    int f = (int)(rnd() % NFORMATS);
    int kind = (int)(rnd() % NKINDS);
    buf *sh = &shard[f];
    uint8_t *bad = malloc(sh->n);
    memcpy(bad, sh->p, sh->n);
    /* A tar header's checksum is a sum: two flips can cancel out, so a
     * plain tar gets one. */
    int flips = f == F_PLAIN ? 1 : 1 + (int)(rnd() % 3);
    size_t lo, hi, at = 0;
    pick_region(f, kind, &lo, &hi);
    for (int k = 0; k < flips; k++) {
      at = lo + rnd() % (hi - lo);
      bad[at] ^= (uint8_t)(1u << (rnd() % 8));
    }
    snprintf(path, sizeof path, "%s/bad-%ld.%s", tmpdir, it, fmt_ext[f]);
    FILE *fp = fopen(path, "wb");
    ASSERT_TRUE(fp != NULL);
    fwrite(bad, 1, sh->n, fp);
    fclose(fp);
    free(bad);
    snprintf(index, sizeof index, "%s/bad-%ld.json", tmpdir, it);
    fp = fopen(index, "w");
    ASSERT_TRUE(fp != NULL);
    fprintf(fp,
            "{\"wids_version\": 1, \"shardlist\": [{\"url\": \"%s\", "
            "\"nsamples\": %d}]}\n",
            path, NSAMPLES);
    fclose(fp);
    for (int v = 0; v < 4; v++) {
      run_result r;
      run_loader(path, v & 2 ? index : NULL, v & 1, &r);
      runs++;
      valid_rows += r.valid;
      errors += r.rc != WDS_OK;
      if (r.altered) {
        altered_runs++;
        by_fmt[f]++;
        printf(
            "  iteration %ld (%s, %s, %d flip(s) in bytes %zu..%zu), %s, %s: "
            "%llu altered valid row(s), first %s\n",
            it, fmt_name[f], kind_name[kind], flips, lo, hi - 1,
            v & 1 ? "skip" : "stop", v & 2 ? "index" : "no index",
            (unsigned long long)r.altered, r.first);
      }
    }
    unlink(path);
    unlink(index);
  }
  printf("  %ld iterations (seed %llu), %llu loader runs, %llu ended in an "
         "error, %llu valid rows checked: %llu runs delivered altered rows "
         "(tar %llu, zst1 %llu, zstN %llu, gz1 %llu, gzN %llu)\n",
         iterations, (unsigned long long)seed, (unsigned long long)runs,
         (unsigned long long)errors, (unsigned long long)valid_rows,
         (unsigned long long)altered_runs, (unsigned long long)by_fmt[0],
         (unsigned long long)by_fmt[1], (unsigned long long)by_fmt[2],
         (unsigned long long)by_fmt[3], (unsigned long long)by_fmt[4]);
  ASSERT_EQ_U64(altered_runs, 0);
}

static void remove_tmpdir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", tmpdir);
}

int main(int argc, char **argv) {
  const char *env = getenv("WDS_CORRUPT_ITERATIONS");
  if (argc > 1)
    iterations = strtol(argv[1], NULL, 10);
  else if (env && *env)
    iterations = strtol(env, NULL, 10);
  if (argc > 2)
    seed = strtoull(argv[2], NULL, 10);
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/wds-corrupt-XXXXXX",
           t && *t ? t : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  rng_state = 1234;
  if (make_shards() != 0) {
    printf("cannot make the shards\n");
    remove_tmpdir();
    return 1;
  }
  RUN(clean_reads);
  RUN(bound_policy);
  RUN(corruption_run);
  remove_tmpdir();
  return test_summary();
}
