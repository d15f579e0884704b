/* test_memory.c — memory follows the bytes read and a stated per-image
 * budget, never what input claims.
 *
 * Each case runs in a child process and is measured, not timed: the
 * child's peak resident size (wait4's ru_maxrss) against a generous bound
 * that the old behaviour breaks several times over (a tar member claiming
 * 1 GB made ~980 MB resident per worker; a 16000x16000 PNG ~743 MB, a
 * progressive JPEG of that size ~505 MB, whatever the output size). The
 * child reports its status and error text through a pipe. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <turbojpeg.h>
#include <zlib.h>

#include "base/mem.h"
#include "test.h"
#include "test_files.h"
#include "wds/loader.h"

static char tmpdir[256];

/* Peak RSS bounds, KiB. Sanitizers add their own shadow memory and keep
 * freed memory in quarantine, so they get more room. AddressSanitizer's
 * allocator also writes the shadow of every block it hands out, an eighth
 * of its size, though the block is not touched: a block of a member's
 * claim (1 GB, reserved, never populated) costs it ~125 MB per worker;
 * the old behaviour (the claim populated) was ~4.5 GB there, still far
 * above. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_BOUND_KIB (800L << 10)
#elif defined(__SANITIZE_THREAD__)
#define RSS_BOUND_KIB (400L << 10)
#else
#define RSS_BOUND_KIB (200L << 10)
#endif

/* ---- a child's run, measured ---- */

typedef struct child_out {
  int status;     /* the loader's status */
  long maxrss;    /* KiB */
  char err[2048]; /* the loader's error text */
} child_out;

typedef int (*child_fn)(const void *arg, char *err, size_t err_size);

/* Runs fn(arg) in a child process; its peak RSS and result into o. 0, or
 * -1 if the child could not be run or died. */
static int run_child(child_fn fn, const void *arg, child_out *o) {
  memset(o, 0, sizeof *o);
  int p[2];
  if (pipe(p) != 0)
    return -1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    close(p[0]);
    child_out c;
    memset(&c, 0, sizeof c);
    c.status = fn(arg, c.err, sizeof c.err);
    ssize_t n = write(p[1], &c, sizeof c);
    _exit(n == (ssize_t)sizeof c ? 0 : 3);
  }
  close(p[1]);
  size_t got = 0;
  while (got < sizeof *o) {
    ssize_t n = read(p[0], (char *)o + got, sizeof *o - got);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  close(p[0]);
  int st = 0;
  struct rusage ru;
  if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) ||
      WEXITSTATUS(st) != 0 || got != sizeof *o) {
    printf("  child failed (status 0x%x, %zu bytes reported)\n", st, got);
    return -1;
  }
  o->maxrss = ru.ru_maxrss;
  return 0;
}

/* Runs one epoch of the loader c; the first error's status and text. */
static int run_loader(const wds_loader_config *c, char *err, size_t err_size) {
  wds_loader *l;
  int rc = wds_loader_open(c, &l);
  if (rc != WDS_OK) {
    snprintf(err, err_size, "%s", wds_last_error());
    return rc;
  }
  const wds_batch *b;
  while ((rc = wds_loader_next(l, &b)) == WDS_OK)
    wds_loader_release(l, b);
  snprintf(err, err_size, "%s", rc == WDS_EOF ? "" : wds_last_error());
  wds_loader_close(l);
  return rc == WDS_EOF ? WDS_OK : rc;
}

/* ---- tar members made by hand ---- */

/* A ustar header for a regular member of `size` bytes (which the data that
 * follows need not have). */
static void tar_header(uint8_t h[512], const char *name, uint64_t size) {
  memset(h, 0, 512);
  snprintf((char *)h, 100, "%s", name);
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  char num[16];
  snprintf(num, sizeof num, "%011llo", (unsigned long long)size);
  memcpy(h + 124, num, 12);
  memcpy(h + 136, "00000000000", 12);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++)
    sum += h[i];
  snprintf(num, sizeof num, "%06o", sum);
  memcpy(h + 148, num, 7);
}

/* Appends a whole member (data padded to 512). */
static int tar_member(FILE *f, const char *name, const void *data,
                      size_t size) {
  uint8_t h[512], pad[512] = {0};
  tar_header(h, name, size);
  return fwrite(h, 1, 512, f) == 512 &&
                 (size == 0 || fwrite(data, 1, size, f) == size) &&
                 fwrite(pad, 1, (512 - size % 512) % 512, f) ==
                     (512 - size % 512) % 512
             ? 0
             : -1;
}

/* A shard of `good` ordinary samples, then sample "big" whose .bin claims
 * `claim` bytes and has `have` (the file ends there). */
static int write_claim_shard(const char *path, int good, uint64_t claim,
                             size_t have) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  int rc = 0;
  uint8_t small[100];
  memset(small, 'a', sizeof small);
  for (int i = 0; i < good && rc == 0; i++) {
    char name[64];
    snprintf(name, sizeof name, "s%03d.bin", i);
    rc = tar_member(f, name, small, sizeof small);
  }
  uint8_t h[512];
  tar_header(h, "big.bin", claim);
  uint8_t *data = calloc(1, have ? have : 1);
  if (rc == 0 && (!data || fwrite(h, 1, 512, f) != 512 ||
                  fwrite(data, 1, have, f) != have))
    rc = -1;
  free(data);
  return fclose(f) == 0 ? rc : -1;
}

static const wds_field_spec bin_field[] = {{"bin", WDS_DECODE_BYTES, 0, 0, 0}};

typedef struct claim_case {
  const char *const *urls;
  size_t n;
  int workers;
  wds_defer_reads defer;
} claim_case;

static int claim_child(const void *arg, char *err, size_t err_size) {
  const claim_case *k = arg;
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = k->urls;
  c.url_count = k->n;
  c.rank = 0;
  c.world_size = 1;
  c.workers = k->workers;
  c.fields = bin_field;
  c.field_count = 1;
  c.batch_size = 4;
  c.defer_reads = k->defer;
  return run_loader(&c, err, err_size);
}

/* Four 10 KB shards whose last member claims 1,000,000,000 bytes, read by
 * 4 workers: each truncated member is an error naming its shard and
 * member, and the peak RSS follows the bytes read (it was ~980 MB per
 * worker: the block of the claimed size was populated before any data
 * came). With deferred reads ON too: the claim past the file's end is not
 * deferred (a pread into a block of the claim), the stream finds out. */
TEST(a_member_claiming_a_gigabyte_costs_its_bytes) {
  char paths[4][300];
  const char *urls[4];
  for (int i = 0; i < 4; i++) {
    snprintf(paths[i], sizeof paths[i], "%s/claim-%d.tar", tmpdir, i);
    ASSERT_EQ_INT(write_claim_shard(paths[i], 4, 1000000000, 10000), 0);
    urls[i] = paths[i];
  }
  struct stat st;
  ASSERT_EQ_INT(stat(paths[0], &st), 0);
  ASSERT_TRUE(st.st_size < 16000);
  const wds_defer_reads modes[] = {WDS_DEFER_AUTO, WDS_DEFER_ON, WDS_DEFER_OFF};
  const int workers[] = {4, 2, 4};
  for (int m = 0; m < 3; m++) {
    claim_case k = {urls, 4, workers[m], modes[m]};
    child_out o;
    ASSERT_EQ_INT(run_child(claim_child, &k, &o), 0);
    printf("  defer mode %d, %d workers: peak RSS %ld KiB; %s\n", (int)modes[m],
           workers[m], o.maxrss, o.err);
    ASSERT_EQ_INT(o.status, WDS_ERR_TRUNCATED);
    ASSERT_CONTAINS(o.err, "claim-");
    ASSERT_CONTAINS(o.err, ".tar");
    ASSERT_CONTAINS(o.err, "big.bin");
    ASSERT_CONTAINS(o.err, "1000000000");
    ASSERT_TRUE(o.maxrss < RSS_BOUND_KIB);
  }
}

/* ---- the steady state: recycled blocks are not populated again ---- */

/* A shard of n samples, each one .bin of size bytes (byte i of sample k:
 * k + i). */
static int write_bin_shard(const char *path, int n, size_t size) {
  FILE *f = fopen(path, "wb");
  uint8_t *d = malloc(size);
  int rc = f && d ? 0 : -1;
  for (int k = 0; k < n && rc == 0; k++) {
    for (size_t i = 0; i < size; i++)
      d[i] = (uint8_t)(k + i);
    char name[32];
    snprintf(name, sizeof name, "s%03d.bin", k);
    rc = tar_member(f, name, d, size);
  }
  free(d);
  uint8_t end[1024] = {0};
  if (f && rc == 0 && fwrite(end, 1, sizeof end, f) != sizeof end)
    rc = -1;
  if (f && fclose(f) != 0)
    rc = -1;
  return rc;
}

/* The batches of one epoch: WDS_OK at its end; each field checked against
 * write_bin_shard's bytes (its first byte names the sample). */
static int run_epoch(wds_loader *l, size_t size, int *samples) {
  const wds_batch *b;
  int rc;
  while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
    const wds_batch_field *f = &b->fields[0];
    for (size_t r = 0; r < b->rows; r++) {
      const uint8_t *d = (const uint8_t *)f->data + f->offsets[r];
      if (f->offsets[r + 1] - f->offsets[r] != size)
        rc = WDS_ERR_CORRUPT;
      for (size_t i = 0; i < size && rc == WDS_OK; i += 4099)
        if (d[i] != (uint8_t)(d[0] + i))
          rc = WDS_ERR_CORRUPT;
    }
    *samples += (int)b->rows;
    wds_loader_release(l, b);
    if (rc != WDS_OK)
      return rc;
  }
  return rc == WDS_EOF ? WDS_OK : rc;
}

/* Fields read straight into recycled blocks (defer_reads OFF, 100 KB each)
 * make their pages once, when a block is fresh: the blocks of later epochs
 * are recycled, and populating them again (MADV_POPULATE_WRITE per sample:
 * 16,019 madvise calls against 4,019 in bench-defer-steady.sh's run, a
 * third more system time) is what a read into a block did after the fix
 * that made a block's pages follow the bytes read (the test above). */
TEST(recycled_blocks_are_not_populated_again) {
#ifndef MADV_POPULATE_WRITE
  SKIP("no MADV_POPULATE_WRITE");
#endif
  enum { N = 48, EPOCHS = 4 };
  const size_t size = 100 << 10;
  char path[300];
  snprintf(path, sizeof path, "%s/steady.tar", tmpdir);
  ASSERT_EQ_INT(write_bin_shard(path, N, size), 0);
  const char *url = path;
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = &url;
  c.url_count = 1;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = bin_field;
  c.field_count = 1;
  c.batch_size = 8;
  c.shuffle_buffer = 16;
  c.defer_reads = WDS_DEFER_OFF;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  size_t calls[EPOCHS + 1];
  calls[0] = atomic_load(&wds__populate_calls);
  int samples = 0;
  for (int e = 0; e < EPOCHS; e++) {
    int rc = run_epoch(l, size, &samples);
    if (rc != WDS_OK)
      printf("  epoch %d: %s\n", e, wds_last_error());
    ASSERT_EQ_INT(rc, WDS_OK);
    calls[e + 1] = atomic_load(&wds__populate_calls);
  }
  wds_loader_close(l);
  ASSERT_EQ_INT(samples, EPOCHS * N);
  size_t later = calls[EPOCHS] - calls[1];
  printf("  populate calls: first epoch %zu, the %d after it %zu (%d "
         "samples each)\n",
         calls[1] - calls[0], EPOCHS - 1, later, N);
  /* The first epoch makes its blocks (one call each, at most); the later
   * ones recycle them: a few fresh blocks at most, never one per sample
   * (3 x 48 = 144 before). */
  ASSERT_TRUE(calls[1] - calls[0] >= 1);
  ASSERT_TRUE(later < N / 2);
}

/* ---- images over the budget ---- */

typedef struct bytes {
  uint8_t *d;
  size_t n;
} bytes;

static void put_be32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (24 - 8 * i));
}

/* A PNG chunk appended to b (room reserved by the caller). */
static void png_chunk(bytes *b, const char *type, const uint8_t *data,
                      size_t n) {
  put_be32(b->d + b->n, (uint32_t)n);
  memcpy(b->d + b->n + 4, type, 4);
  if (n)
    memcpy(b->d + b->n + 8, data, n);
  uLong crc = crc32(0, b->d + b->n + 4, (uInt)(n + 4));
  put_be32(b->d + b->n + 8 + n, (uint32_t)crc);
  b->n += 12 + n;
}

/* A w x h 8-bit gray PNG of one colour: its rows deflated a row at a time
 * (a 16000x16000 one is ~250 KB, made without holding its pixels). */
static bytes make_flat_png(uint32_t w, uint32_t h) {
  bytes b = {0};
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit(&z, 1) != Z_OK)
    return b;
  size_t zcap = 1 << 20, zn = 0;
  uint8_t *zd = malloc(zcap), *row = calloc(1, w + 1);
  int zrc = Z_OK;
  for (uint32_t y = 0; zd && row && zrc != Z_STREAM_END && y <= h; y++) {
    z.next_in = row;
    z.avail_in = y < h ? w + 1 : 0;
    int flush = y < h ? Z_NO_FLUSH : Z_FINISH;
    for (;;) {
      if (zcap - zn < 65536) {
        uint8_t *nz = realloc(zd, zcap *= 2);
        if (!nz) {
          free(zd);
          zd = NULL;
          break;
        }
        zd = nz;
      }
      z.next_out = zd + zn;
      z.avail_out = (uInt)(zcap - zn);
      zrc = deflate(&z, flush);
      zn = zcap - z.avail_out;
      if (zrc == Z_STREAM_ERROR || zrc == Z_STREAM_END ||
          (flush == Z_NO_FLUSH && z.avail_in == 0 && z.avail_out > 0))
        break;
    }
  }
  deflateEnd(&z);
  free(row);
  if (!zd || zrc != Z_STREAM_END) {
    free(zd);
    return b;
  }
  b.d = malloc(8 + 25 + 12 + zn + 12);
  memcpy(b.d, "\x89PNG\r\n\x1a\n", 8);
  b.n = 8;
  uint8_t ihdr[13] = {0};
  put_be32(ihdr, w);
  put_be32(ihdr + 4, h);
  ihdr[8] = 8; /* depth */
  ihdr[9] = 0; /* gray */
  png_chunk(&b, "IHDR", ihdr, 13);
  png_chunk(&b, "IDAT", zd, zn);
  png_chunk(&b, "IEND", NULL, 0);
  free(zd);
  return b;
}

/* A w x h gray JPEG (progressive or baseline) of a gradient. */
static bytes make_jpeg(int w, int h, int progressive) {
  bytes b = {0};
  uint8_t *pix = malloc((size_t)w * (size_t)h);
  if (!pix)
    return b;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      pix[(size_t)y * (size_t)w + (size_t)x] = (uint8_t)((x + y) & 0xff);
  tjhandle tj = tjInitCompress();
  unsigned char *jpg = NULL;
  unsigned long n = 0;
  if (tjCompress2(tj, pix, w, 0, h, TJPF_GRAY, &jpg, &n, TJSAMP_GRAY, 90,
                  progressive ? TJFLAG_PROGRESSIVE : 0) == 0) {
    b.d = malloc(n);
    memcpy(b.d, jpg, n);
    b.n = n;
  }
  tjFree(jpg);
  tjDestroy(tj);
  free(pix);
  return b;
}

/* The JPEG's frame header says w x h (its data stays that of the image it
 * was made from: the decode fails later, but the budget is checked from
 * the header before anything is allocated). */
static int jpeg_claim_size(bytes *b, int w, int h) {
  for (size_t i = 2; i + 9 < b->n; i++)
    if (b->d[i] == 0xFF && (b->d[i + 1] == 0xC0 || b->d[i + 1] == 0xC2)) {
      b->d[i + 5] = (uint8_t)(h >> 8);
      b->d[i + 6] = (uint8_t)h;
      b->d[i + 7] = (uint8_t)(w >> 8);
      b->d[i + 8] = (uint8_t)w;
      return 0;
    }
  return -1;
}

/* A shard of one sample "img" with the image as img.EXT and img.cls. */
static int write_image_shard(const char *path, const char *ext,
                             const bytes *img) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  char name[32];
  snprintf(name, sizeof name, "img.%s", ext);
  int rc = tar_member(f, "img.cls", "7", 1);
  if (rc == 0)
    rc = tar_member(f, name, img->d, img->n);
  uint8_t end[1024] = {0};
  if (rc == 0 && fwrite(end, 1, sizeof end, f) != sizeof end)
    rc = -1;
  return fclose(f) == 0 ? rc : -1;
}

static const wds_field_spec img_field[] = {
    {"jpg;png", WDS_DECODE_IMAGE, 3, 8, 8}};

typedef struct image_case {
  const char *url;
  uint64_t limit; /* image_memory_limit */
} image_case;

static int image_child(const void *arg, char *err, size_t err_size) {
  const image_case *k = arg;
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = &k->url;
  c.url_count = 1;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = img_field;
  c.field_count = 1;
  c.image_memory_limit = k->limit;
  return run_loader(&c, err, err_size);
}

/* Runs the image shard at url under limit; its result and peak RSS. */
static int run_image(const char *url, uint64_t limit, child_out *o) {
  image_case k = {url, limit};
  int rc = run_child(image_child, &k, o);
  printf("  %s, limit %llu: status %d, peak RSS %ld KiB%s%s\n",
         strrchr(url, '/') + 1, (unsigned long long)limit, o->status, o->maxrss,
         o->err[0] ? "; " : "", o->err);
  return rc;
}

/* The named error: shard, sample, field, the image's size, the limit. */
#define ASSERT_BUDGET_ERROR(o, path, dims)                                     \
  do {                                                                         \
    ASSERT_EQ_INT((o).status, WDS_ERR_LIMIT);                                  \
    ASSERT_CONTAINS((o).err, path);                                            \
    ASSERT_CONTAINS((o).err, "sample \"img\"");                                \
    ASSERT_CONTAINS((o).err, "field '");                                       \
    ASSERT_CONTAINS((o).err, dims);                                            \
    ASSERT_CONTAINS((o).err, "image_memory_limit");                            \
  } while (0)

/* A 16000x16000 PNG of one colour (~250 KB) decoded to 8x8: refused under
 * the default budget before its 768 MB are allocated (it cost ~743 MB per
 * worker); a 4096x4096 one (48 MiB decoded as RGB) is refused under a 32
 * MiB budget and decodes under the default. */
TEST(a_huge_png_is_refused_by_the_image_budget) {
  char big[300], mid[300];
  snprintf(big, sizeof big, "%s/png-16000.tar", tmpdir);
  snprintf(mid, sizeof mid, "%s/png-4096.tar", tmpdir);
  bytes b = make_flat_png(16000, 16000);
  ASSERT_TRUE(b.d != NULL);
  printf("  16000x16000 PNG: %zu bytes\n", b.n);
  ASSERT_EQ_INT(write_image_shard(big, "png", &b), 0);
  free(b.d);
  b = make_flat_png(4096, 4096);
  ASSERT_TRUE(b.d != NULL);
  ASSERT_EQ_INT(write_image_shard(mid, "png", &b), 0);
  free(b.d);
  child_out o;
  ASSERT_EQ_INT(run_image(big, 0, &o), 0);
  ASSERT_BUDGET_ERROR(o, big, "16000x16000");
  ASSERT_TRUE(o.maxrss < RSS_BOUND_KIB);
  ASSERT_EQ_INT(run_image(mid, (uint64_t)32 << 20, &o), 0);
  ASSERT_BUDGET_ERROR(o, mid, "4096x4096");
  ASSERT_EQ_INT(run_image(mid, 0, &o), 0);
  ASSERT_EQ_INT(o.status, WDS_OK);
}

/* Progressive JPEGs: libjpeg buffers the whole image's coefficients (2
 * bytes each) whatever the DCT scale, so the budget counts them. A frame
 * header of 16000x16000 is refused under the default budget (it cost
 * ~505 MB per worker decoded to 8x8). A real 4096x4096 progressive one
 * (32 MiB of coefficients, 1/8 scale output 512x512) is refused under 16
 * MiB and decodes under the default; the baseline one, decoded at 1/8
 * without buffering, passes under 16 MiB: the budget counts the scale
 * actually decoded. */
TEST(a_huge_progressive_jpeg_is_refused_by_the_image_budget) {
  char big[300], prog[300], base[300];
  snprintf(big, sizeof big, "%s/jpeg-16000.tar", tmpdir);
  snprintf(prog, sizeof prog, "%s/jpeg-4096-progressive.tar", tmpdir);
  snprintf(base, sizeof base, "%s/jpeg-4096-baseline.tar", tmpdir);
  bytes b = make_jpeg(64, 64, 1);
  ASSERT_TRUE(b.d != NULL);
  ASSERT_EQ_INT(jpeg_claim_size(&b, 16000, 16000), 0);
  ASSERT_EQ_INT(write_image_shard(big, "jpg", &b), 0);
  free(b.d);
  b = make_jpeg(4096, 4096, 1);
  ASSERT_TRUE(b.d != NULL);
  ASSERT_EQ_INT(write_image_shard(prog, "jpg", &b), 0);
  free(b.d);
  b = make_jpeg(4096, 4096, 0);
  ASSERT_TRUE(b.d != NULL);
  ASSERT_EQ_INT(write_image_shard(base, "jpg", &b), 0);
  free(b.d);
  child_out o;
  ASSERT_EQ_INT(run_image(big, 0, &o), 0);
  ASSERT_BUDGET_ERROR(o, big, "16000x16000");
  ASSERT_CONTAINS(o.err, "coefficients");
  ASSERT_TRUE(o.maxrss < RSS_BOUND_KIB);
  ASSERT_EQ_INT(run_image(prog, (uint64_t)16 << 20, &o), 0);
  ASSERT_BUDGET_ERROR(o, prog, "4096x4096");
  ASSERT_EQ_INT(run_image(prog, 0, &o), 0);
  ASSERT_EQ_INT(o.status, WDS_OK);
  ASSERT_EQ_INT(run_image(base, (uint64_t)16 << 20, &o), 0);
  ASSERT_EQ_INT(o.status, WDS_OK);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds_test_memory_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(a_member_claiming_a_gigabyte_costs_its_bytes);
  RUN(recycled_blocks_are_not_populated_again);
  RUN(a_huge_png_is_refused_by_the_image_budget);
  RUN(a_huge_progressive_jpeg_is_refused_by_the_image_budget);
  test_remove_tree(tmpdir);
  return test_summary();
}
