/* test_stream.c — the decompressed stream (shards/stream.c) with and without
 * its reading thread: for every codec and for damaged input (a cut inside a
 * frame, a corrupt frame in the middle, many small frames, frames larger
 * than the ring, skippable frames, a window over the limit, a drain), the
 * thread delivers the same bytes, then the same status and message, as the
 * caller's own reads do; and a cancel, a read timeout or a close while the
 * thread is blocked in a stalled pipe or FIFO, or waits for ring space, ends
 * at once with the thread joined (ASan and TSan run this test too). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "shards/stream.h"
#include "test.h"
#include "test_files.h"

static char dir[256];

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* n bytes that compress somewhat (runs and noise), from seed. */
static uint8_t *make_data(size_t n, unsigned seed) {
  uint8_t *d = malloc(n ? n : 1);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    d[i] = (i / 64) % 3 == 0 ? (uint8_t)(i / 64) : (uint8_t)x;
  }
  return d;
}

static char *save(const char *name, const void *p, size_t n) {
  char *path = malloc(512);
  snprintf(path, 512, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(p, 1, n, f);
    fclose(f);
  }
  return path;
}

/* One zstd frame of data (level 3, with a checksum). */
static size_t zframe(uint8_t *out, size_t cap, const uint8_t *d, size_t n) {
  ZSTD_CCtx *c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
  size_t r = ZSTD_compress2(c, out, cap, d, n);
  ZSTD_freeCCtx(c);
  return ZSTD_isError(r) ? 0 : r;
}

/* What one run of a stream gave: the bytes, then the status and message. */
typedef struct run {
  uint8_t *bytes;
  size_t n;
  int open_rc, rc; /* rc: 0 clean end, or the error */
  char err[WDS__ERR_SIZE];
} run;

/* Reads url in pieces of step bytes (with the thread when thread > 0) to
 * its end, or until drain_after bytes (> 0) came out: then it drains. */
static void read_all(const char *url, int thread, size_t step,
                     size_t drain_after, run *out) {
  memset(out, 0, sizeof *out);
  wds__io_opts io = {.read_thread = thread};
  wds__err err = {{0}};
  wds__stream *s;
  out->open_rc = wds__stream_open(url, &io, &s, &err);
  if (out->open_rc != WDS_OK) {
    snprintf(out->err, sizeof out->err, "%s", err.msg);
    return;
  }
  size_t cap = 1 << 16;
  out->bytes = malloc(cap);
  uint8_t *buf = malloc(step);
  for (;;) {
    ssize_t k = wds__stream_read(s, buf, step, &err);
    if (k < 0) {
      out->rc = (int)k;
      snprintf(out->err, sizeof out->err, "%s", err.msg);
      break;
    }
    if (k == 0)
      break;
    while (out->n + (size_t)k > cap)
      out->bytes = realloc(out->bytes, cap *= 2);
    memcpy(out->bytes + out->n, buf, (size_t)k);
    out->n += (size_t)k;
    if (drain_after && out->n >= drain_after) {
      out->rc = wds__stream_drain(s, &err);
      if (out->rc != WDS_OK)
        snprintf(out->err, sizeof out->err, "%s", err.msg);
      break;
    }
  }
  free(buf);
  wds__stream_close(s);
}

/* A message with its numbers as '#': "within the first N compressed bytes"
 * of a corrupt stream counts what was read so far, which depends on how
 * the source was read. Every other message must match exactly. */
static void numbers_out(const char *in, char *out, size_t n) {
  int exact = strstr(in, "within the first") == NULL;
  size_t o = 0;
  for (size_t i = 0; in[i] && o + 1 < n; i++) {
    if (!exact && in[i] >= '0' && in[i] <= '9') {
      if (o == 0 || out[o - 1] != '#')
        out[o++] = '#';
    } else {
      out[o++] = in[i];
    }
  }
  out[o] = '\0';
}

/* The thread changes nothing a caller sees: bytes, status, message; with
 * several read sizes. Returns 0 when they match (else fails the test). */
static int same_with_thread(const char *url, run *ref_out) {
  static const size_t steps[] = {1 << 20, 4096, 511};
  run a, b;
  read_all(url, -1, 1 << 20, 0, &a);
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
    read_all(url, 1, steps[i], 0, &b);
    char ea[WDS__ERR_SIZE], eb[WDS__ERR_SIZE];
    numbers_out(a.err, ea, sizeof ea);
    numbers_out(b.err, eb, sizeof eb);
    int same = a.open_rc == b.open_rc && a.rc == b.rc && a.n == b.n &&
               (a.n == 0 || memcmp(a.bytes, b.bytes, a.n) == 0) &&
               strcmp(ea, eb) == 0;
    if (!same) {
      TEST_FAIL_("%s (step %zu): without the thread %d/%d, %zu bytes, "
                 "\"%s\"; with it %d/%d, %zu bytes, \"%s\"",
                 url, steps[i], a.open_rc, a.rc, a.n, a.err, b.open_rc, b.rc,
                 b.n, b.err);
      free(a.bytes);
      free(b.bytes);
      return -1;
    }
    free(b.bytes);
  }
  if (ref_out)
    *ref_out = a;
  else
    free(a.bytes);
  return 0;
}

TEST(every_codec_reads_the_same_with_the_thread) {
  size_t n = 1300000; /* the ring wraps in the tests below */
  uint8_t *d = make_data(n, 1);
  char *plain = save("plain.bin", d, n);
  const char *tools[] = {"gzip", "xz", "xz --format=lzma", "bzip2", "zstd -q"};
  const char *ext[] = {"gz", "xz", "lzma", "bz2", "zst"};
  for (size_t i = 0; i < sizeof tools / sizeof *tools; i++) {
    char cmd[2600], url[1200];
    snprintf(url, sizeof url, "%s.%s", plain, ext[i]);
    snprintf(cmd, sizeof cmd, "%s -c %s > %s", tools[i], plain, url);
    ASSERT_EQ_INT(system(cmd), 0);
    run r;
    if (same_with_thread(url, &r) != 0)
      break;
    if (r.rc != 0 || r.n != n || memcmp(r.bytes, d, n) != 0) {
      TEST_FAIL_("%s: rc %d, %zu bytes (%s)", url, r.rc, r.n, r.err);
      free(r.bytes);
      break;
    }
    free(r.bytes);
    /* Through a pipe: the thread reads the command's output. */
    char purl[1300];
    snprintf(purl, sizeof purl, "pipe:cat %s", url);
    if (same_with_thread(purl, NULL) != 0)
      break;
  }
  free(plain);
  free(d);
}

TEST(a_cut_inside_a_frame_delivers_every_byte_before_it) {
  size_t n = 3 << 20;
  uint8_t *d = make_data(n, 2);
  size_t cap = ZSTD_compressBound(n);
  uint8_t *z = malloc(cap);
  size_t zn = zframe(z, cap, d, n);
  ASSERT_TRUE(zn > 0);
  const size_t cuts[] = {600, zn / 3, zn / 2 + 7, zn - 5, zn - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
    char *p = save("cut.zst", z, cuts[i]);
    run r;
    int rc = same_with_thread(p, &r);
    free(p);
    if (rc != 0)
      break;
    /* Everything decodable before the cut came out, and it is the data. */
    if (r.rc != WDS_ERR_TRUNCATED ||
        !strstr(r.err, "truncated inside a frame") || r.n > n ||
        memcmp(r.bytes, d, r.n) != 0 || (cuts[i] > zn / 2 && r.n < n / 4)) {
      TEST_FAIL_("cut at %zu of %zu: rc %d, %zu bytes, \"%s\"", cuts[i], zn,
                 r.rc, r.n, r.err);
      free(r.bytes);
      break;
    }
    free(r.bytes);
  }
  free(z);
  free(d);
}

TEST(a_corrupt_frame_in_the_middle) {
  /* Three frames; the second has a byte flipped in its compressed data.
   * The first frame comes out whole, then what the damaged frame decodes
   * to before its checksum (or a decoding error) stops it, then the error:
   * the same bytes for every read size, with or without the thread. */
  size_t n = 1 << 20;
  uint8_t *d = make_data(n, 3);
  size_t cap = 3 * ZSTD_compressBound(n);
  uint8_t *z = malloc(cap);
  size_t a = zframe(z, cap, d, n);
  size_t b = zframe(z + a, cap - a, d, n);
  size_t c = zframe(z + a + b, cap - a - b, d, n);
  ASSERT_TRUE(a && b && c);
  z[a + b / 2] ^= 0x55;
  char *p = save("corrupt.zst", z, a + b + c);
  free(z);
  for (int thread = -1; thread <= 1; thread += 2) {
    run r;
    read_all(p, thread, 4096, 0, &r);
    if (r.rc != WDS_ERR_DECOMPRESS || !strstr(r.err, "corrupt zstd data") ||
        r.n < n || r.n > 2 * n || memcmp(r.bytes, d, n) != 0) {
      TEST_FAIL_("thread %d: rc %d, %zu bytes, \"%s\"", thread, r.rc, r.n,
                 r.err);
      free(r.bytes);
      break;
    }
    free(r.bytes);
  }
  ASSERT_EQ_INT(same_with_thread(p, NULL), 0);
  free(p);
  free(d);
}

/* wds__stream_final: the output is final only once its frame or member
 * passed its check. Three zstd frames (the middle one without a checksum:
 * final as it comes), then two gzip members, read in small pieces with and
 * without the thread: final stays at the previous frame's end inside a
 * checked frame, reaches its end exactly when the frame does, and equals
 * the output at the end. A damaged frame: nothing of it is ever final. */
TEST(final_output_follows_the_checks) {
  size_t n = 300000;
  uint8_t *d = make_data(n, 9);
  size_t cap = 3 * ZSTD_compressBound(n) + 64;
  uint8_t *z = malloc(cap);
  size_t a = zframe(z, cap, d, n);
  ZSTD_CCtx *c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0);
  size_t b = ZSTD_compress2(c, z + a, cap - a, d, n);
  ZSTD_freeCCtx(c);
  ASSERT_TRUE(!ZSTD_isError(b));
  size_t e = zframe(z + a + b, cap - a - b, d, n);
  ASSERT_TRUE(a && e);
  char *zp = save("final.zst", z, a + b + e);
  z[a + b + e / 2] ^= 0x20; /* the third frame damaged */
  char *bad = save("final-bad.zst", z, a + b + e);
  /* gzip: two members */
  size_t gn = 0;
  for (int m = 0; m < 2; m++) {
    z_stream g;
    memset(&g, 0, sizeof g);
    ASSERT_EQ_INT(
        deflateInit2(&g, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    g.next_in = d;
    g.avail_in = (uInt)n;
    g.next_out = z + gn;
    g.avail_out = (uInt)(cap - gn);
    ASSERT_EQ_INT(deflate(&g, Z_FINISH), Z_STREAM_END);
    gn = cap - g.avail_out;
    deflateEnd(&g);
  }
  char *gp = save("final.gz", z, gn);
  free(z);
  const char *urls[3] = {zp, gp, bad};
  for (int thread = -1; thread <= 1; thread += 2) {
    for (int u = 0; u < 3; u++) {
      wds__stream_read_thread = thread;
      wds__stream *s;
      wds__err err;
      ASSERT_EQ_INT(wds__stream_open(urls[u], NULL, &s, &err), WDS_OK);
      uint8_t buf[3000];
      ssize_t k;
      uint64_t out = 0;
      int ok = 1;
      while ((k = wds__stream_read(s, buf, sizeof buf, &err)) > 0) {
        out += (uint64_t)k;
        uint64_t f = wds__stream_final(s);
        /* [lo, hi]: at a frame's last byte its check may be still to
         * come (it is read with the next call). */
        uint64_t lo, hi;
        if (u == 1) { /* gzip: each member at its end */
          lo = out <= n ? 0 : n;
          hi = out < n ? 0 : out <= n ? n : out < 2 * n ? n : 2 * n;
        } else if (out <= n) { /* zstd: checked, unchecked, checked */
          lo = 0;
          hi = out < n ? 0 : n;
        } else if (out <= 2 * n) {
          lo = hi = out;
        } else {
          lo = 2 * n;
          hi = out < 3 * n ? 2 * n : 3 * n;
        }
        if (wds__stream_out(s) != out || f < lo || f > hi) {
          TEST_FAIL_("url %d, thread %d: after %llu bytes final %llu, want "
                     "%llu..%llu",
                     u, thread, (unsigned long long)out, (unsigned long long)f,
                     (unsigned long long)lo, (unsigned long long)hi);
          ok = 0;
          break;
        }
      }
      if (ok && u < 2 && (k != 0 || wds__stream_final(s) != out))
        TEST_FAIL_("url %d: end %zd, final %llu of %llu", u, k,
                   (unsigned long long)wds__stream_final(s),
                   (unsigned long long)out);
      if (ok && u == 2 &&
          (k != WDS_ERR_DECOMPRESS || wds__stream_final(s) != 2 * n))
        TEST_FAIL_("damaged: end %zd, final %llu", k,
                   (unsigned long long)wds__stream_final(s));
      if (u == 0 && wds__stream_unchecked_frames(s) != 1)
        TEST_FAIL_("unchecked frames %llu",
                   (unsigned long long)wds__stream_unchecked_frames(s));
      wds__stream_close(s);
    }
  }
  wds__stream_read_thread = 0;
  free(zp);
  free(gp);
  free(bad);
  free(d);
}

/* A gzip member whose trailer CRC is flipped, or whose data has a flipped
 * byte; an xz stream and a zstd frame with a flipped byte: larger than the
 * ring, so the thread lends the decoder up to 1 MiB at a time where the
 * caller's reads give 128 KiB. A decoder's call that produces bytes and then
 * fails returns the bytes first: the error comes at the same byte of the
 * output, with the same message (compared exactly: it names no count that
 * depends on the reads), with and without the thread and for every read
 * size. */
TEST(damage_is_reported_at_the_same_byte_with_the_thread) {
  size_t n = 2600000;
  uint8_t *d = make_data(n, 6);
  char *plain = save("damage.bin", d, n);
  const char *tools[] = {"gzip -n", "gzip -n", "xz", "zstd -q"};
  const char *ext[] = {"gz", "gz", "xz", "zst"};
  for (size_t i = 0; i < sizeof tools / sizeof *tools; i++) {
    char cmd[1400], url[1200];
    snprintf(url, sizeof url, "%s.%zu.%s", plain, i, ext[i]);
    snprintf(cmd, sizeof cmd, "%s -c %s > %s", tools[i], plain, url);
    ASSERT_EQ_INT(system(cmd), 0);
    FILE *f = fopen(url, "r+b");
    ASSERT_TRUE(f != NULL);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    /* Case 0: the gzip trailer's CRC-32; else a byte two thirds in. */
    long at = i == 0 ? size - 8 : size * 2 / 3;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x55, f);
    fclose(f);
    run r;
    if (same_with_thread(url, &r) != 0)
      break;
    /* The bytes before the damage come out, and they are the data (a
     * flipped byte may be decoded into wrong bytes before a check fails). */
    int ok = r.rc == WDS_ERR_DECOMPRESS && r.n <= n && r.n >= n / 2 &&
             memcmp(r.bytes, d, n / 2) == 0;
    if (i == 0) /* the CRC is checked after the member's last byte */
      ok = ok && r.n == n && memcmp(r.bytes, d, n) == 0 &&
           strstr(r.err, "incorrect data check");
    if (!ok) {
      TEST_FAIL_("%s: rc %d, %zu of %zu bytes, \"%s\"", url, r.rc, r.n, n,
                 r.err);
      free(r.bytes);
      break;
    }
    printf("  %s: %zu bytes, then \"%s\"\n", ext[i], r.n, r.err);
    free(r.bytes);
  }
  free(plain);
  free(d);
}

TEST(many_small_frames_skippable_frames_and_large_frames) {
  /* 3000 frames of 1 to 700 bytes, skippable frames between some, then one
   * frame of 5 MiB (over twice the ring) and a last small one. */
  size_t big = 5 << 20;
  uint8_t *d = make_data(big, 4);
  size_t cap = ZSTD_compressBound(big) + 3000 * 800 + 4096;
  uint8_t *z = malloc(cap);
  size_t zn = 0, total = 0;
  for (int i = 0; i < 3000; i++) {
    size_t k = 1 + (size_t)(i * 37) % 700;
    zn += zframe(z + zn, cap - zn, d + total, k);
    total += k;
    if (i % 97 == 0) { /* a skippable frame of i % 50 bytes */
      uint32_t len = (uint32_t)(i % 50);
      memcpy(z + zn, "\x5a\x2a\x4d\x18", 4);
      memcpy(z + zn + 4, &len, 4);
      memset(z + zn + 8, 0xEE, len);
      zn += 8 + len;
    }
  }
  size_t before_big = total;
  zn += zframe(z + zn, cap - zn, d, big);
  zn += zframe(z + zn, cap - zn, d + 9, 9);
  char *p = save("frames.zst", z, zn);
  run r;
  int rc = same_with_thread(p, &r);
  ASSERT_EQ_INT(rc, 0);
  ASSERT_EQ_INT(r.rc, 0);
  ASSERT_EQ_U64(r.n, before_big + big + 9);
  ASSERT_TRUE(memcmp(r.bytes, d, before_big) == 0);
  ASSERT_TRUE(memcmp(r.bytes + before_big, d, big) == 0);
  free(r.bytes);
  /* Cut inside the large frame, and at every frame boundary near it. */
  for (size_t cut = zn - 40; cut < zn; cut += 13) {
    char *q = save("frames-cut.zst", z, cut);
    rc = same_with_thread(q, NULL);
    free(q);
    if (rc != 0)
      break;
  }
  free(p);
  free(z);
  free(d);
}

TEST(window_limit_and_drain_are_unchanged) {
  /* A frame whose window is over a 1 KiB limit: the same message. */
  size_t n = 1 << 18;
  uint8_t *d = make_data(n, 5);
  size_t cap = ZSTD_compressBound(n) + 64;
  uint8_t *z = malloc(cap + (8 << 20));
  size_t zn = zframe(z, cap, d, n);
  char *p = save("window.zst", z, zn);
  run a, b;
  wds__io_opts io = {.read_thread = 1, .max_window_bytes = 1024};
  wds__stream *s;
  wds__err err = {{0}};
  ASSERT_EQ_INT(wds__stream_open(p, &io, &s, &err), WDS_OK);
  uint8_t buf[4096];
  ssize_t k = wds__stream_read(s, buf, sizeof buf, &err);
  wds__stream_close(s);
  ASSERT_EQ_INT(k, WDS_ERR_LIMIT);
  ASSERT_CONTAINS(err.msg, "over the limit of 1 KiB");
  /* A pipe command that fails after a whole stream: said at its end. */
  char url[1024];
  snprintf(url, sizeof url, "pipe:cat %s; exit 3", p);
  read_all(url, 1, 1 << 16, 0, &b);
  ASSERT_EQ_INT(b.rc, WDS_ERR_COMMAND);
  ASSERT_CONTAINS(b.err, "exit status 3");
  ASSERT_EQ_U64(b.n, n);
  free(b.bytes);
  /* Drained after the data: 8 MiB of skippable frames follow, and the
   * drain stops within its budget (4 MiB of source), with or without the
   * thread; then a corrupt tail, which the drain reports. */
  for (int i = 0; i < 8; i++) {
    uint8_t *f = z + zn + (size_t)i * ((1 << 20) + 8);
    uint32_t len = 1 << 20;
    memcpy(f, "\x50\x2a\x4d\x18", 4);
    memcpy(f + 4, &len, 4);
    memset(f + 8, 0xAB, len);
  }
  free(p);
  p = save("tail.zst", z, zn + 8 * ((1 << 20) + 8));
  for (int pass = 0; pass < 2; pass++) {
    read_all(p, -1, 1 << 16, n, &a);
    read_all(p, 1, 1 << 16, n, &b);
    ASSERT_EQ_INT(a.rc, pass == 0 ? WDS_OK : WDS_ERR_DECOMPRESS);
    ASSERT_EQ_INT(a.rc, b.rc);
    char ea[WDS__ERR_SIZE], eb[WDS__ERR_SIZE];
    numbers_out(a.err, ea, sizeof ea);
    numbers_out(b.err, eb, sizeof eb);
    ASSERT_STREQ(ea, eb);
    ASSERT_EQ_U64(a.n, n);
    ASSERT_EQ_U64(b.n, n);
    free(a.bytes);
    free(b.bytes);
    free(p);
    memset(z + zn, 0x77, 4096); /* not a frame */
    p = save("tail-bad.zst", z, zn + 4096);
  }
  free(p);
  free(z);
  free(d);
}

/* ---- stalls ---- */

typedef struct canceller {
  wds__cancel *c;
  long after_ms;
} canceller;

static void *cancel_later(void *arg) {
  canceller *k = arg;
  pause_ms(k->after_ms);
  wds__cancel_set(k->c);
  return NULL;
}

/* A zstd stream of 2 MiB, cut short, then the command stalls: the thread
 * blocks reading the pipe once it has delivered what there is. */
static char *stalled_url(const char *zpath, const char *tag) {
  char *u = malloc(1024);
  snprintf(u, 1024, "pipe:head -c 300000 %s; exec sleep 30 # %s", zpath, tag);
  return u;
}

static char *big_zst(void) {
  size_t n = 2 << 20;
  uint8_t *d = make_data(n, 6);
  size_t cap = ZSTD_compressBound(n);
  uint8_t *z = malloc(cap);
  size_t zn = zframe(z, cap, d, n);
  char *p = save("big.zst", z, zn);
  free(z);
  free(d);
  return p;
}

/* Reads until a read fails (or the stream ends): returns that status. */
static ssize_t read_to_stall(wds__stream *s, wds__err *err) {
  uint8_t buf[65536];
  for (;;) {
    ssize_t k = wds__stream_read(s, buf, sizeof buf, err);
    if (k <= 0)
      return k;
  }
}

TEST(cancel_while_the_thread_waits_on_a_stalled_pipe) {
  char *p = big_zst();
  char *url = stalled_url(p, "cancel");
  wds__cancel c;
  wds__cancel_init(&c);
  wds__io_opts io = {.read_thread = 1, .cancel = &c};
  wds__stream *s;
  wds__err err = {{0}};
  ASSERT_EQ_INT(wds__stream_open(url, &io, &s, &err), WDS_OK);
  canceller k = {&c, 300};
  pthread_t t;
  pthread_create(&t, NULL, cancel_later, &k);
  double t0 = test_now_s();
  ssize_t rc = read_to_stall(s, &err);
  double waited = test_now_s() - t0;
  pthread_join(t, NULL);
  ASSERT_EQ_INT(rc, WDS_ERR_CANCELLED);
  ASSERT_STREQ(err.msg, "cancelled");
  ASSERT_TRUE(waited < 5);
  /* Later reads say so again, at once. */
  ASSERT_EQ_INT(wds__stream_read(s, (uint8_t[16]){0}, 16, &err),
                WDS_ERR_CANCELLED);
  t0 = test_now_s();
  wds__stream_close(s);
  ASSERT_TRUE(test_now_s() - t0 < 3);
  wds__cancel_destroy(&c);
  free(url);
  free(p);
}

TEST(read_timeout_on_a_stalled_pipe) {
  char *p = big_zst();
  char *url = stalled_url(p, "timeout");
  wds__io_opts io = {.read_thread = 1, .read_timeout_ms = 300};
  wds__stream *s;
  wds__err err = {{0}};
  ASSERT_EQ_INT(wds__stream_open(url, &io, &s, &err), WDS_OK);
  double t0 = test_now_s();
  ssize_t rc = read_to_stall(s, &err);
  ASSERT_EQ_INT(rc, WDS_ERR_TIMEOUT);
  ASSERT_CONTAINS(err.msg, "no data for 0.3 s");
  ASSERT_TRUE(test_now_s() - t0 < 5);
  wds__stream_close(s);
  free(url);
  free(p);
}

TEST(close_while_the_thread_is_blocked_or_waits_for_space) {
  char *p = big_zst();
  /* Blocked in a stalled pipe's read. */
  char *url = stalled_url(p, "close");
  wds__io_opts io = {.read_thread = 1};
  wds__stream *s;
  wds__err err = {{0}};
  ASSERT_EQ_INT(wds__stream_open(url, &io, &s, &err), WDS_OK);
  uint8_t buf[4096];
  ASSERT_TRUE(wds__stream_read(s, buf, sizeof buf, &err) > 0);
  pause_ms(200); /* the thread reads what there is, then blocks */
  double t0 = test_now_s();
  wds__stream_close(s);
  ASSERT_TRUE(test_now_s() - t0 < 3);
  free(url);

  /* A FIFO whose writer stalls after the first bytes. */
  char fifo[600];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  ASSERT_EQ_INT(mkfifo(fifo, 0600), 0);
  size_t zlen;
  uint8_t *z = test_read_file(p, &zlen);
  ASSERT_TRUE(z != NULL);
  pid_t child = fork();
  if (child == 0) {
    int fd = open(fifo, O_WRONLY);
    ssize_t w = write(fd, z, 200000);
    (void)w;
    pause_ms(30000);
    _exit(0);
  }
  ASSERT_EQ_INT(wds__stream_open(fifo, &io, &s, &err), WDS_OK);
  ASSERT_TRUE(wds__stream_read(s, buf, sizeof buf, &err) > 0);
  pause_ms(200);
  t0 = test_now_s();
  wds__stream_close(s);
  ASSERT_TRUE(test_now_s() - t0 < 3);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  free(z);

  /* A file larger than the ring, barely read: the thread waits for space;
   * close, and a cancel, end that wait too. */
  size_t n = 16 << 20;
  uint8_t *d = make_data(n, 7);
  size_t cap = ZSTD_compressBound(n);
  uint8_t *zz = malloc(cap);
  size_t zn = zframe(zz, cap, d, n);
  char *big = save("bigger.zst", zz, zn);
  free(zz);
  free(d);
  ASSERT_EQ_INT(wds__stream_open(big, &io, &s, &err), WDS_OK);
  ASSERT_TRUE(wds__stream_read(s, buf, 1, &err) == 1);
  pause_ms(100);
  wds__stream_close(s); /* joined: ASan/TSan see no leak, no race */
  wds__cancel c;
  wds__cancel_init(&c);
  io.cancel = &c;
  ASSERT_EQ_INT(wds__stream_open(big, &io, &s, &err), WDS_OK);
  ASSERT_TRUE(wds__stream_read(s, buf, sizeof buf, &err) > 0);
  pause_ms(100);
  wds__cancel_set(&c);
  /* As without the thread, a cancel is seen at the next source read: here
   * the next take from the ring, once the input in hand is decoded. */
  ssize_t k;
  size_t after = 0;
  while ((k = wds__stream_read(s, buf, sizeof buf, &err)) > 0)
    after += (size_t)k;
  ASSERT_EQ_INT(k, WDS_ERR_CANCELLED);
  ASSERT_TRUE(after < n / 2);
  wds__stream_close(s);
  wds__cancel_destroy(&c);
  /* Opened and closed without a read. */
  io.cancel = NULL;
  ASSERT_EQ_INT(wds__stream_open(big, &io, &s, &err), WDS_OK);
  wds__stream_close(s);
  free(big);
  free(p);
}

TEST(a_forked_child_closes_what_its_parent_opened) {
  /* The child has no reading thread: its reads fail with a message, its
   * close frees without joining; the parent's stream is untouched. */
  char *p = big_zst();
  wds__io_opts io = {.read_thread = 1};
  wds__stream *s;
  wds__err err = {{0}};
  ASSERT_EQ_INT(wds__stream_open(p, &io, &s, &err), WDS_OK);
  uint8_t buf[4096];
  ssize_t first = wds__stream_read(s, buf, sizeof buf, &err);
  ASSERT_TRUE(first > 0);
  pid_t child = fork();
  if (child == 0) {
    ssize_t k;
    while ((k = wds__stream_read(s, buf, sizeof buf, &err)) > 0) {
    }
    int ok = k == WDS_ERR_IO && strstr(err.msg, "fork") != NULL;
    wds__stream_close(s);
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  ASSERT_EQ_INT(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ssize_t k;
  size_t total = (size_t)first;
  while ((k = wds__stream_read(s, buf, sizeof buf, &err)) > 0)
    total += (size_t)k;
  ASSERT_EQ_INT(k, 0);
  ASSERT_EQ_U64(total, (size_t)2 << 20);
  wds__stream_close(s);
  free(p);
}

int main(void) {
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/wds-test-stream-XXXXXX", t ? t : "/tmp");
  if (!mkdtemp(dir)) {
    printf("cannot make a temporary directory\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  RUN(every_codec_reads_the_same_with_the_thread);
  RUN(a_cut_inside_a_frame_delivers_every_byte_before_it);
  RUN(a_corrupt_frame_in_the_middle);
  RUN(final_output_follows_the_checks);
  RUN(damage_is_reported_at_the_same_byte_with_the_thread);
  RUN(many_small_frames_skippable_frames_and_large_frames);
  RUN(window_limit_and_drain_are_unchanged);
  RUN(cancel_while_the_thread_waits_on_a_stalled_pipe);
  RUN(read_timeout_on_a_stalled_pipe);
  RUN(close_while_the_thread_is_blocked_or_waits_for_space);
  RUN(a_forked_child_closes_what_its_parent_opened);
  test_remove_tree(dir);
  return test_summary();
}
