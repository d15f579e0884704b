/* test_jpeg_gpu.c — JPEG fields decoded on a GPU, without a GPU.
 *
 * Planning: under jpeg_decode = GPU the workers put each JPEG with its crop
 * plan into the slot; batches (keys, URLs, valid flags, order, modes,
 * padding, resume) must be those of the CPU path, and every plan the one
 * the CPU decode used for that sample (pipeline/decode.h's plan hook, which
 * both paths' planner calls, records the CPU run's). */
#include <math.h>
#include <png.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "loader/jpeg_gpu.h"
#include "pipeline/decode.h"
#include "pipeline/gpu_plan.h"
#include "pipeline/resize.h"
#include "shards/tarw.h"
#include "test.h"
#include "wds/loader.h"
#include "wds/reader.h"

static char tmpdir[256];

static uint64_t fnv(const void *p, size_t n) {
  const uint8_t *s = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

/* ---- fixtures: photo-like JPEGs of many sizes, a PNG, a CMYK JPEG, a
 * corrupt header, a JPEG cut short; keys "s<k>/<i>" ---- */

enum { NSHARDS = 3, PER_SHARD = 9 };
enum { PNG_ID = 4, CMYK_ID = 7, BAD_HEADER_ID = 13, CUT_ID = 22 };

typedef struct fixture {
  char *urls[NSHARDS];
  char keys[NSHARDS * PER_SHARD][32];
  uint64_t hash[NSHARDS * PER_SHARD]; /* of its image file's bytes */
} fixture;

static fixture fx;

static uint8_t *make_rgb(int W, int H, int seed) {
  uint8_t *rgb = malloc((size_t)W * H * 3);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      uint8_t *p = rgb + ((size_t)y * W + x) * 3;
      p[0] = (uint8_t)(x * 255 / W);
      p[1] = (uint8_t)(y * 255 / H);
      /* smooth, as photos mostly are */
      p[2] = (uint8_t)(128 + 100 * sin((x + seed * 13) / 9.0) * cos(y / 7.0));
    }
  return rgb;
}

static unsigned char *png_bytes(const uint8_t *rgb, int W, int H,
                                size_t *size) {
  /* a PNG in memory through a temporary file */
  char path[512];
  snprintf(path, sizeof path, "%s/tmp.png", tmpdir);
  FILE *f = fopen(path, "wb");
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < H; y++)
    png_write_row(png, (png_bytep)(rgb + (size_t)y * W * 3));
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  fclose(f);
  f = fopen(path, "rb");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n);
  *size = fread(b, 1, (size_t)n, f);
  fclose(f);
  unlink(path);
  return b;
}

static int make_fixture(void) {
  tjhandle tj = tjInitCompress();
  for (int k = 0; k < NSHARDS; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/gpu-%d.tar", tmpdir, k);
    fx.urls[k] = strdup(path);
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    wds__tarw *w;
    wds__err e;
    if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK)
      return -1;
    for (int i = 0; i < PER_SHARD; i++) {
      int id = k * PER_SHARD + i;
      int W = 60 + 23 * ((id * 7) % 11), H = 50 + 19 * ((id * 5) % 13);
      snprintf(fx.keys[id], sizeof fx.keys[id], "s%d/%d", k, i);
      uint8_t *rgb = make_rgb(W, H, id);
      unsigned char *img = NULL;
      unsigned long jsize = 0;
      size_t size = 0;
      const char *ext = "jpg";
      if (id == PNG_ID) { /* in the jpg;png field: decoded on the CPU */
        img = png_bytes(rgb, W, H, &size);
        ext = "png";
      } else if (id == CMYK_ID) { /* nvJPEG refuses it: the CPU decodes */
        uint8_t *cmyk = malloc((size_t)W * H * 4);
        for (size_t p = 0; p < (size_t)W * H; p++) {
          cmyk[4 * p] = rgb[3 * p];
          cmyk[4 * p + 1] = rgb[3 * p + 1];
          cmyk[4 * p + 2] = rgb[3 * p + 2];
          cmyk[4 * p + 3] = 200;
        }
        if (tjCompress2(tj, cmyk, W, 0, H, TJPF_CMYK, &img, &jsize, TJSAMP_444,
                        85, 0) != 0)
          return -1;
        free(cmyk);
        size = jsize;
      } else if (id == BAD_HEADER_ID) { /* the worker's error */
        img = malloc(16);
        memcpy(img, "\xff\xd8\xff\xe0garbage-garbage", 16);
        size = 16;
      } else {
        int samp = id % 3 == 0   ? TJSAMP_444
                   : id % 3 == 1 ? TJSAMP_420
                                 : TJSAMP_422;
        /* one progressive JPEG, from a compressor of its own: TurboJPEG
         * 2.1 keeps the progressive scan script in a handle, and the
         * baseline images it made after one came out corrupt */
        tjhandle tjc = id == 20 ? tjInitCompress() : tj;
        int cr = tjCompress2(tjc, rgb, W, 0, H, TJPF_RGB, &img, &jsize, samp,
                             85, id == 20 ? TJFLAG_PROGRESSIVE : 0);
        if (tjc != tj)
          tjDestroy(tjc);
        if (cr != 0)
          return -1;
        size = jsize;
        if (id == CUT_ID) { /* the headers whole, no scan data: found when
                               decoded */
          size_t at = 2;
          while (at + 4 < size && !(img[at] == 0xFF && img[at + 1] == 0xDA))
            at += 2 + ((size_t)img[at + 2] << 8 | img[at + 3]);
          size = at + 2 + ((size_t)img[at + 2] << 8 | img[at + 3]);
        }
      }
      fx.hash[id] = fnv(img, size);
      char name[64], val[16];
      snprintf(name, sizeof name, "%s.%s", fx.keys[id], ext);
      wds__tarw_add(w, name, img, size, &e);
      snprintf(name, sizeof name, "%s.cls", fx.keys[id]);
      snprintf(val, sizeof val, "%d", id);
      wds__tarw_add(w, name, val, strlen(val), &e);
      if (jsize)
        tjFree(img);
      else
        free(img);
      free(rgb);
    }
    if (wds__tarw_finish(w, &e) != WDS_OK)
      return -1;
    wds__tarw_close(w);
  }
  tjDestroy(tj);
  return 0;
}

static int key_id(const char *key) {
  for (int i = 0; i < NSHARDS * PER_SHARD; i++)
    if (strcmp(fx.keys[i], key) == 0)
      return i;
  return -1;
}

/* ---- the CPU run's plans, recorded by the hook ---- */

typedef struct plan_rec {
  uint64_t hash;
  int src_w, src_h;
  wds__crop_plan p;
  int used;
} plan_rec;

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static plan_rec recs[4096];
static size_t nrecs;

static void record_plan(const uint8_t *data, size_t size, int src_w, int src_h,
                        const wds__crop_plan *p) {
  pthread_mutex_lock(&rec_mu);
  if (nrecs < sizeof recs / sizeof *recs) {
    plan_rec *r = &recs[nrecs++];
    r->hash = fnv(data, size);
    r->src_w = src_w;
    r->src_h = src_h;
    r->p = *p;
    r->used = 0;
  }
  pthread_mutex_unlock(&rec_mu);
}

static int same_plan(const plan_rec *r, const wds__gpu_row *h) {
  return r->src_w == h->src_w && r->src_h == h->src_h && r->p.x0 == h->x0 &&
         r->p.x1 == h->x1 && r->p.y0 == h->y0 && r->p.y1 == h->y1 &&
         r->p.total_w == h->total_w && r->p.total_h == h->total_h &&
         r->p.off_x == h->off_x && r->p.off_y == h->off_y &&
         r->p.flip == h->flip;
}

/* A batch as the test keeps it. */
typedef struct kept {
  size_t rows;
  char keys[64][32];
  char urls[64][512];
  uint8_t valid[64];
  uint32_t sources[64];
  uint8_t *img; /* the CPU path's pixels */
  size_t img_bytes;
} kept;

static void keep(kept *k, const wds_batch *b) {
  k->rows = b->rows;
  for (size_t r = 0; r < b->rows && r < 64; r++) {
    snprintf(k->keys[r], sizeof k->keys[r], "%s", b->keys[r]);
    snprintf(k->urls[r], sizeof k->urls[r], "%s", b->urls[r]);
    k->valid[r] = b->valid[r];
    k->sources[r] = b->sources[r];
  }
  k->img = NULL;
  if (b->fields[0].dtype == WDS_DTYPE_U8) {
    k->img_bytes = b->fields[0].size_bytes;
    k->img = malloc(k->img_bytes);
    memcpy(k->img, b->fields[0].data, k->img_bytes);
  }
}

typedef struct run_cfg {
  const char *name;
  wds_mode mode;
  int rank, world, workers;
  size_t batch;
  wds_crop crop;
  wds_last_batch last;
  uint64_t samples_per_epoch;
  uint64_t resume;
} run_cfg;

static wds_field_spec fields[2] = {{"jpg;png", WDS_DECODE_AUTO, 3, 40, 32},
                                   {"cls", WDS_DECODE_AUTO, 0, 0, 0}};

/* Set: config() gives a mix of two sources (shard 0, weight 1 or repeat 1;
 * shards 1 and 2, weight 2 or repeat 2) instead of the three shards. */
static int mix_sources;

static void config(wds_loader_config *c, const run_cfg *rc) {
  wds_loader_config d = WDS_LOADER_CONFIG_INIT;
  static char spec1[1100];
  static wds_source_config src[2];
  *c = d;
  c->urls = (const char *const *)fx.urls;
  c->url_count = NSHARDS;
  if (mix_sources) {
    int exact = rc->mode == WDS_MODE_EXACT;
    snprintf(spec1, sizeof spec1, "%s::%s", fx.urls[1], fx.urls[2]);
    memset(src, 0, sizeof src);
    src[0].spec = fx.urls[0];
    src[1].spec = spec1;
    src[0].weight = exact ? 0 : 1;
    src[1].weight = exact ? 0 : 2;
    src[0].repeat = exact ? 1 : 0;
    src[1].repeat = exact ? 2 : 0;
    c->urls = NULL;
    c->url_count = 0;
    c->sources = src;
    c->source_count = 2;
  }
  c->rank = rc->rank;
  c->world_size = rc->world;
  c->workers = rc->workers;
  c->mode = rc->mode;
  c->samples_per_epoch = rc->samples_per_epoch;
  c->batch_size = rc->batch;
  c->last_batch = rc->last;
  c->crop = rc->crop;
  c->shuffle_buffer = 5;
  c->seed = 7;
  c->fields = fields;
  c->field_count = 2;
  c->on_error = WDS_ON_ERROR_SKIP;
}

/* Two epochs of the CPU path (plans recorded), then the GPU-planned path
 * (resumed at rc->resume batches of the first epoch when set): the same
 * batches row for row, and each JPEG row's plan is one the CPU decode made
 * for the same bytes in that epoch (each CPU plan claimed once). */
static void check_planned_equals_cpu(const run_cfg *rc) {
  enum { EPOCHS = 2, MAXB = 64 };
  static kept cpu[EPOCHS][MAXB];
  size_t ncpu[EPOCHS] = {0, 0};
  size_t epoch_rec[EPOCHS + 1];
  wds_loader_config c;
  config(&c, rc);
  wds_loader *l;
  nrecs = 0;
  wds__image_plan_hook = record_plan;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  for (int ep = 0; ep < EPOCHS; ep++) {
    epoch_rec[ep] = nrecs;
    const wds_batch *b;
    int st;
    while ((st = wds_loader_next(l, &b)) == WDS_OK) {
      ASSERT_TRUE(ncpu[ep] < MAXB);
      keep(&cpu[ep][ncpu[ep]++], b);
      wds_loader_release(l, b);
    }
    ASSERT_EQ_INT(st, WDS_EOF);
  }
  /* plans made while an epoch ran belong to it (no eager next epoch) */
  epoch_rec[EPOCHS] = nrecs;
  wds_loader_close(l);
  wds__image_plan_hook = NULL;
  ASSERT_TRUE(nrecs > 10);

  c.jpeg_decode = WDS_JPEG_DECODE_GPU;
  c.resume_batches = rc->resume;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  size_t jpeg_rows = 0, png_rows = 0;
  int seen_source[2] = {0, 0};
  for (int ep = 0; ep < EPOCHS; ep++) {
    const wds_batch *b;
    int st;
    size_t n = ep == 0 ? rc->resume : 0;
    while ((st = wds_loader_next(l, &b)) == WDS_OK) {
      ASSERT_TRUE(n < ncpu[ep]);
      const kept *k = &cpu[ep][n++];
      ASSERT_EQ_U64(b->rows, k->rows);
      const wds_batch_field *f = &b->fields[0];
      ASSERT_EQ_INT(f->dtype, WDS_DTYPE_BYTES);
      size_t row_bytes = (size_t)40 * 32 * 3;
      for (size_t r = 0; r < b->rows; r++) {
        ASSERT_STREQ(b->keys[r], k->keys[r]);
        ASSERT_STREQ(b->urls[r], k->urls[r]);
        ASSERT_EQ_INT(b->sources[r], k->sources[r]);
        seen_source[b->sources[r] & 1] = 1;
        /* the JPEG cut short fails only when it is decoded (a padding
         * row of it is invalid either way): decode_equals_cpu checks the
         * flags after decoding */
        if (!(key_id(b->keys[r]) == CUT_ID && k->valid[r] == 0))
          ASSERT_EQ_INT(b->valid[r], k->valid[r]);
        size_t len = (size_t)(f->offsets[r + 1] - f->offsets[r]);
        const uint8_t *p = (const uint8_t *)f->data + f->offsets[r];
        wds__gpu_row h;
        wds__err e;
        if (!b->valid[r]) {
          /* a failed sample: empty; a padding row: its sample's data. A
           * last_batch=pad row is a copy of the row it repeats (its plan
           * made once); a row the rank split pads with (a repeat, invalid
           * too) was planned by the CPU path as its own row, so it claims
           * that plan when there is one unclaimed. */
          if (len > 0) {
            ASSERT_EQ_INT(wds__gpu_row_read(p, len, &h, &e), WDS_OK);
            if (h.kind == WDS__GPU_ROW_JPEG) {
              uint64_t hh = fnv(p + WDS__GPU_ROW_HEAD, (size_t)h.payload);
              ASSERT_EQ_U64(hh, fx.hash[key_id(b->keys[r])]);
              for (size_t i = epoch_rec[ep]; i < epoch_rec[ep + 1]; i++)
                if (!recs[i].used && recs[i].hash == hh &&
                    same_plan(&recs[i], &h)) {
                  recs[i].used = 1;
                  break;
                }
            }
          }
          continue;
        }
        ASSERT_EQ_INT(wds__gpu_row_read(p, len, &h, &e), WDS_OK);
        ASSERT_EQ_INT(h.out_w, 40);
        ASSERT_EQ_INT(h.out_h, 32);
        ASSERT_EQ_INT(h.channels, 3);
        int id = key_id(b->keys[r]);
        ASSERT_TRUE(id >= 0);
        if (h.kind == WDS__GPU_ROW_PIXELS) {
          /* decoded on the CPU: the CPU path's very bytes */
          ASSERT_EQ_INT(id, 4);
          ASSERT_TRUE(memcmp(p + WDS__GPU_ROW_HEAD, k->img + r * row_bytes,
                             row_bytes) == 0);
          png_rows++;
          continue;
        }
        ASSERT_EQ_INT(h.kind, WDS__GPU_ROW_JPEG);
        ASSERT_EQ_U64(fnv(p + WDS__GPU_ROW_HEAD, (size_t)h.payload),
                      fx.hash[id]);
        int found = 0;
        for (size_t i = epoch_rec[ep]; i < epoch_rec[ep + 1] && !found; i++)
          if (!recs[i].used && recs[i].hash == fx.hash[id] &&
              same_plan(&recs[i], &h))
            found = 1, recs[i].used = 1;
        if (!found)
          TEST_FAIL_("%s: epoch %d row %zu (%s): plan x [%g, %g) y [%g, %g) "
                     "flip %d is not the CPU path's",
                     rc->name, ep, r, b->keys[r], h.x0, h.x1, h.y0, h.y1,
                     h.flip);
        if (!found)
          return;
        jpeg_rows++;
      }
      wds_loader_release(l, b);
    }
    ASSERT_EQ_INT(st, WDS_EOF);
    ASSERT_EQ_U64(n, ncpu[ep]);
  }
  wds_loader_close(l);
  ASSERT_TRUE(jpeg_rows > 10);
  if (mix_sources) /* rows of both sources */
    ASSERT_TRUE(seen_source[0] && seen_source[1]);
  if (rc->resume == 0) {
    /* every CPU plan was claimed by a GPU row: the same crops, no more */
    for (size_t i = 0; i < nrecs; i++)
      ASSERT_TRUE(recs[i].used);
  }
  for (int ep = 0; ep < EPOCHS; ep++)
    for (size_t i = 0; i < ncpu[ep]; i++)
      free(cpu[ep][i].img);
  (void)png_rows;
}

TEST(planned_rows_are_the_cpu_paths) {
  static const run_cfg cases[] = {
      {"plain random", WDS_MODE_PLAIN, 0, 1, 2, 4, WDS_CROP_RANDOM,
       WDS_LAST_KEEP, 0, 0},
      {"plain center", WDS_MODE_PLAIN, 0, 1, 1, 5, WDS_CROP_CENTER,
       WDS_LAST_PAD, 0, 0},
      {"exact rank 1 of 2, padded", WDS_MODE_EXACT, 1, 2, 2, 4, WDS_CROP_RANDOM,
       WDS_LAST_PAD, 0, 0},
      {"resampled", WDS_MODE_RESAMPLED, 0, 1, 3, 6, WDS_CROP_RANDOM,
       WDS_LAST_KEEP, 30, 0},
      {"exact resumed", WDS_MODE_EXACT, 0, 1, 2, 4, WDS_CROP_RANDOM,
       WDS_LAST_KEEP, 0, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    check_planned_equals_cpu(&cases[i]);
    if (test_cur_failed_) {
      printf("  case: %s\n", cases[i].name);
      return;
    }
  }
  /* mixing: two sources, exact (repeats) and resampled (weights) */
  static const run_cfg mixed[] = {
      {"mix exact", WDS_MODE_EXACT, 0, 2, 2, 4, WDS_CROP_RANDOM, WDS_LAST_PAD,
       0, 0},
      {"mix resampled", WDS_MODE_RESAMPLED, 0, 1, 2, 5, WDS_CROP_RANDOM,
       WDS_LAST_KEEP, 25, 0},
  };
  mix_sources = 1;
  for (size_t i = 0; i < sizeof mixed / sizeof *mixed; i++) {
    check_planned_equals_cpu(&mixed[i]);
    if (test_cur_failed_) {
      printf("  case: %s\n", mixed[i].name);
      break;
    }
  }
  mix_sources = 0;
}

/* The option is checked at open: a value out of range, and GPU decoding
 * without a field that takes JPEGs, name what is wrong. */
TEST(jpeg_decode_option_is_checked) {
  wds_loader_config c;
  run_cfg rc = {
      "x", WDS_MODE_PLAIN, 0, 1, 1, 4, WDS_CROP_CENTER, WDS_LAST_KEEP, 0, 0};
  config(&c, &rc);
  wds_loader *l = NULL;
  c.jpeg_decode = (wds_jpeg_decode)7;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "jpeg_decode");
  wds_field_spec only_png[1] = {{"png", WDS_DECODE_AUTO, 3, 40, 32}};
  c.jpeg_decode = WDS_JPEG_DECODE_GPU;
  c.fields = only_png;
  c.field_count = 1;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "no image field takes jpg");
  /* a "jpeg" field takes "jpg" files too: planned */
  wds_field_spec jpeg[1] = {{"jpeg", WDS_DECODE_AUTO, 3, 40, 32}};
  c.fields = jpeg;
  c.on_error = WDS_ON_ERROR_SKIP;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *b;
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
  ASSERT_EQ_INT(b->fields[0].dtype, WDS_DTYPE_BYTES);
  ASSERT_EQ_INT(b->valid[0], 1);
  wds_loader_release(l, b);
  wds_loader_close(l);
}

/* ---- a fake nvJPEG: the seam's other side, on the CPU ----
 *
 * decode: TurboJPEG decodes the whole image (as nvJPEG does: no DCT
 * scaling) and the CPU resampler applies the row's plan, as the kernel
 * does; CMYK is refused (as nvJPEG's GPU backends do), data TurboJPEG
 * stops on fails; a batch call with fail_batch set fails as a whole (a CUDA
 * error). "Device" memory is host memory. Counts what it was asked.
 *
 * Like nvJPEG's backend it sizes its arena with wds__jg_arena_need (grown,
 * never shrunk: device_bytes is the arena and the buffer), and runs every
 * batch through a batched state (wds__jg_batched_run) whose decode stays
 * "in flight" until its event has been queried `latency` times: an
 * initialize of the state while its decode runs is the race nvJPEG's
 * batched API forbids, counted in `raced`, and so is a fill of its arrays
 * (`refilled`). Calls that overlap (two
 * threads in the decoder at once) are counted in `overlapped`. */
typedef struct fake_state {
  int inflight;    /* queries left before the last decode is done */
  int latency;     /* queries a decode takes */
  int hang;        /* the event never completes */
  int fail_record; /* the event record fails */
  int raced;       /* initialized while a decode ran */
  int refilled;    /* its arrays filled while a decode read them */
  int inits, fills, queries;
} fake_state;

static int fs_init(void *ctx, int n, int channels) {
  fake_state *s = ctx;
  (void)n, (void)channels;
  s->inits++;
  if (s->inflight > 0)
    s->raced++;
  return 0;
}

static int fs_fill(void *ctx, void *arg) {
  fake_state *s = ctx;
  (void)arg;
  s->fills++;
  if (s->inflight > 0)
    s->refilled++;
  return 0;
}

static int fs_decode(void *ctx, void *stream) {
  (void)stream;
  ((fake_state *)ctx)->inflight = ((fake_state *)ctx)->latency;
  return 0;
}

static int fs_record(void *ctx, void *stream, wds__err *e) {
  (void)stream;
  if (((fake_state *)ctx)->fail_record) {
    ((fake_state *)ctx)->inflight = 0; /* the stream waited for */
    return wds__fail(e, WDS_ERR_IO, "fake: cudaEventRecord failed");
  }
  return WDS_OK;
}

static int fs_query(void *ctx, wds__err *e) {
  fake_state *s = ctx;
  (void)e;
  s->queries++;
  if (s->hang)
    return 0;
  if (s->inflight > 0)
    s->inflight--;
  return s->inflight == 0;
}

typedef struct fake {
  tjhandle tj;
  int hw;          /* a hardware backend that takes every whole baseline JPEG */
  int route[1024]; /* per image of the call (wds__jg_route) */
  int fail_batch;
  size_t calls, images, max_n;
  void *buf;
  size_t buf_cap;
  size_t arena_cap;
  fake_state st;
  wds__jg_batched batched;
  int timeout_ms;
  int slow_us; /* each call lasts at least this long */
  int inside, overlapped;
} fake;

static void fake_init(fake *f) {
  memset(f, 0, sizeof *f);
  f->tj = tjInitDecompress();
  f->st.latency = 3;
  wds__jg_batched b = {&f->st,    fs_init,  fs_fill, fs_decode,
                       fs_record, fs_query, 0};
  f->batched = b;
}

static int fake_decode(void *ctx, wds__jg_img *imgs, size_t n, void *out,
                       size_t row_bytes, void *stream, wds__err *e) {
  fake *f = ctx;
  (void)stream;
  if (__atomic_add_fetch(&f->inside, 1, __ATOMIC_SEQ_CST) > 1)
    f->overlapped++;
  if (f->slow_us)
    usleep((useconds_t)f->slow_us);
  __atomic_sub_fetch(&f->inside, 1, __ATOMIC_SEQ_CST);
  f->calls++;
  if (n > f->max_n)
    f->max_n = n;
  if (f->fail_batch)
    return wds__fail(e, WDS_ERR_IO, "fake: the device is gone");
  for (size_t i = 0; i < n; i++) /* what nvJPEG's routing refuses */
    imgs[i].status = imgs[i].h.cmyk ? WDS__JG_REFUSED : WDS__JG_OK;
  size_t need = wds__jg_arena_need(imgs, n);
  if (need > f->arena_cap)
    f->arena_cap = need;
  int brc = wds__jg_batched_run(&f->batched, NULL, (int)n, imgs[0].h.channels,
                                stream, f->timeout_ms, e);
  if (brc != WDS_OK && brc != WDS__JG_BATCH_FAILED)
    return brc;
  /* nvJPEG's routing (wds__jg_route), and what each route reports: the
   * batched calls have no per-image status, and the hybrid one does
   * Huffman on the GPU above 50 images; there (and in the hardware's) a
   * JPEG whose data ends early decodes without an error, into whatever
   * the missing data leaves */
  size_t hybrid = 0;
  if (n > sizeof f->route / sizeof *f->route)
    return wds__fail(e, WDS_ERR_INVALID, "fake: more than 1024 images");
  for (size_t i = 0; i < n; i++) {
    f->route[i] =
        wds__jg_route(0, wds__jg_jpeg_whole(imgs[i].data, imgs[i].size), f->hw);
    hybrid += !imgs[i].h.cmyk && f->route[i] == WDS__JG_ROUTE_HYBRID;
  }
  for (size_t i = 0; i < n; i++) {
    wds__jg_img *im = &imgs[i];
    f->images++;
    if (im->h.cmyk) {
      im->status = WDS__JG_REFUSED;
      continue;
    }
    int silent = f->route[i] == WDS__JG_ROUTE_HW ||
                 (f->route[i] == WDS__JG_ROUTE_HYBRID && hybrid > 50);
    int w = im->h.src_w, h = im->h.src_h, ch = im->h.channels;
    uint8_t *full = malloc((size_t)w * h * ch);
    /* what libjpeg only warns about decodes (nvJPEG is no stricter),
     * except data that ends early where a status is reported; a fatal
     * error fails */
    if (tjDecompress2(f->tj, im->data, (unsigned long)im->size, full, w, 0, h,
                      ch == 1 ? TJPF_GRAY : TJPF_RGB, 0) != 0 &&
        (tjGetErrorCode(f->tj) == TJERR_FATAL ||
         (!silent && strstr(tjGetErrorStr2(f->tj), "Premature end")))) {
      im->status = WDS__JG_FAILED;
      tjDestroy(f->tj);
      f->tj = tjInitDecompress();
      free(full);
      continue;
    }
    wds__taps tx, ty;
    memset(&tx, 0, sizeof tx);
    memset(&ty, 0, sizeof ty);
    int first = 0, last = 0;
    if (wds__taps_prepare(&tx, w, im->h.x0, im->h.x1, im->h.total_w,
                          im->h.off_x, im->h.out_w, im->h.flip) ||
        wds__taps_prepare(&ty, h, im->h.y0, im->h.y1, im->h.total_h,
                          im->h.off_y, im->h.out_h, 0))
      return wds__fail(e, WDS_ERR_NOMEM, "fake: out of memory");
    wds__taps_span(&ty, &first, &last);
    uint8_t *tmp = malloc((size_t)(last - first + 1) * im->h.out_w * ch);
    wds__resample(full, (size_t)w * ch, ch, &tx, &ty, tmp,
                  (uint8_t *)out + im->row * row_bytes);
    free(tmp);
    free(full);
    wds__taps_free(&tx);
    wds__taps_free(&ty);
    im->status = WDS__JG_OK;
  }
  return WDS_OK;
}

static int fake_upload(void *ctx, void *dst, const void *src, size_t n,
                       void *stream, wds__err *e) {
  (void)ctx, (void)stream, (void)e;
  memcpy(dst, src, n);
  return WDS_OK;
}

static int fake_zero(void *ctx, void *dst, size_t n, void *stream,
                     wds__err *e) {
  (void)ctx, (void)stream, (void)e;
  memset(dst, 0, n);
  return WDS_OK;
}

static int fake_sync(void *ctx, void *stream, wds__err *e) {
  (void)ctx, (void)stream, (void)e;
  return WDS_OK;
}

static void fake_destroy(void *ctx) {
  fake *f = ctx;
  tjDestroy(f->tj);
  free(f->buf);
}

static void fake_stats(void *ctx, wds_gpu_jpeg_stats *st) {
  fake *f = ctx;
  st->arena_bytes = f->arena_cap + f->buf_cap;
  st->nvjpeg_bytes = 0;
  st->device_bytes = st->arena_bytes + st->nvjpeg_bytes;
}

static void fake_set_timeout(void *ctx, int timeout_ms) {
  ((fake *)ctx)->timeout_ms = timeout_ms;
}

static void *fake_buffer(void *ctx, size_t bytes) {
  fake *f = ctx;
  if (bytes > f->buf_cap) {
    free(f->buf);
    f->buf = malloc(bytes);
    f->buf_cap = f->buf ? bytes : 0;
  }
  return f->buf;
}

static int fake_download(void *ctx, void *host, const void *dev, size_t n,
                         void *stream, wds__err *e) {
  (void)ctx, (void)stream, (void)e;
  memcpy(host, dev, n);
  return WDS_OK;
}

static const wds__jg_ops fake_ops = {
    fake_decode,  fake_upload, fake_zero,     fake_sync,       fake_stats,
    fake_destroy, fake_buffer, fake_download, fake_set_timeout};

/* Mean and largest absolute difference of two rows. */
static void row_diff(const uint8_t *a, const uint8_t *b, size_t n, double *mad,
                     int *maxd) {
  uint64_t sum = 0;
  *maxd = 0;
  for (size_t i = 0; i < n; i++) {
    int d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
    sum += (uint64_t)d;
    if (d > *maxd)
      *maxd = d;
  }
  *mad = (double)sum / (double)n;
}

/* The GPU path over the fake backend against the CPU path, two epochs
 * with random crops, two workers, padding, under skip: the same keys and
 * valid flags after decoding (the JPEG cut short is found by the decoder:
 * invalid, counted as skipped, its error naming shard, sample and field);
 * PNG and CMYK rows (decoded on the CPU: the workers', the fallback's) are
 * the CPU path's very bytes; the other JPEGs differ only by the full-size
 * decode against the CPU path's DCT-scaled one; invalid rows are zeros or,
 * padding, the rows they repeat. (The mean absolute difference per row, in
 * 0..255, at most 6 for any row and 2.5 over all.) Fallbacks and failures are
 * counted. */
/* `test_jpeg_gpu --device` (ctest test_jpeg_gpu_device, label gpu): the
 * decode tests run on the real decoder (nvJPEG on GPU 0) instead of the
 * fake; without one the binary exits 77 (skipped), saying why. */
static wds_gpu_jpeg *real;

TEST(decode_equals_cpu_over_a_fake_backend) {
  run_cfg rc = {"fake",          WDS_MODE_EXACT, 0, 1, 2, 4,
                WDS_CROP_RANDOM, WDS_LAST_PAD,   0, 0};
  enum { EPOCHS = 2, MAXB = 64 };
  static kept cpu[EPOCHS][MAXB];
  size_t ncpu[EPOCHS] = {0, 0};
  wds_loader_config c;
  config(&c, &rc);
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  for (int ep = 0; ep < EPOCHS; ep++) {
    const wds_batch *b;
    while (wds_loader_next(l, &b) == WDS_OK) {
      keep(&cpu[ep][ncpu[ep]++], b);
      wds_loader_release(l, b);
    }
  }
  wds_loader_close(l);

  static fake fk;
  fake_init(&fk);
  wds_gpu_jpeg *g = real ? real : wds__gpu_jpeg_new(&fake_ops, &fk, "fake");
  ASSERT_TRUE(g != NULL);
  if (!real)
    ASSERT_STREQ(wds_gpu_jpeg_library(g), "fake");
  /* device memory after each batch, and each batch's decoded images' bytes
   * (its JPEG rows but CMYK's, which every backend refuses) */
  static uint64_t mem[EPOCHS * MAXB], arena[EPOCHS * MAXB], nvj[EPOCHS * MAXB],
      need[EPOCHS * MAXB];
  size_t nb = 0;
  c.jpeg_decode = WDS_JPEG_DECODE_GPU;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  int64_t shape[3];
  ASSERT_EQ_INT(wds_gpu_jpeg_shape(l, 0, shape), WDS_OK);
  ASSERT_EQ_INT(shape[0], 32);
  ASSERT_EQ_INT(shape[1], 40);
  ASSERT_EQ_INT(shape[2], 3);
  ASSERT_EQ_INT(wds_gpu_jpeg_shape(l, 1, shape), WDS_ERR_INVALID);
  size_t row_bytes = 32 * 40 * 3;
  /* the decoder's own "device" buffer, read back with download */
  uint8_t *dev = wds_gpu_jpeg_buffer(g, 66 * row_bytes);
  uint8_t *host = malloc(64 * row_bytes), *part = malloc(2 * row_bytes);
  uint8_t *dev_part = dev + 64 * row_bytes;
  ASSERT_TRUE(dev != NULL);
  size_t cmyk_rows = 0, cut_rows = 0, png_rows = 0, jpeg_rows = 0;
  double worst = 0, total = 0;
  int worst_max = 0;
  for (int ep = 0; ep < EPOCHS; ep++) {
    const wds_batch *b;
    size_t n = 0;
    while (wds_loader_next(l, &b) == WDS_OK) {
      const kept *k = &cpu[ep][n++];
      if (!real) /* every byte is written */
        memset(dev, 0xAB, b->rows * row_bytes);
      ASSERT_EQ_INT(wds_gpu_jpeg_decode(g, l, b, 0, dev, NULL), WDS_OK);
      ASSERT_EQ_INT(wds_gpu_jpeg_sync(g, NULL), WDS_OK);
      {
        wds_gpu_jpeg_stats ms;
        wds_gpu_jpeg_stats_get(g, &ms);
        wds__jg_img im[64];
        size_t ni = 0;
        const wds_batch_field *f0 = &b->fields[0];
        for (size_t r = 0; r < b->rows && ni < 64; r++) {
          size_t len = (size_t)(f0->offsets[r + 1] - f0->offsets[r]);
          wds__err e;
          if (len &&
              wds__gpu_row_read((const uint8_t *)f0->data + f0->offsets[r], len,
                                &im[ni].h, &e) == WDS_OK &&
              im[ni].h.kind != WDS__GPU_ROW_PIXELS && !im[ni].h.cmyk) {
            im[ni].status = WDS__JG_OK;
            ni++;
          }
        }
        ASSERT_TRUE(nb < EPOCHS * MAXB);
        need[nb] = wds__jg_arena_need(im, ni);
        ASSERT_EQ_U64(ms.device_bytes, ms.arena_bytes + ms.nvjpeg_bytes);
        arena[nb] = ms.arena_bytes;
        nvj[nb] = ms.nvjpeg_bytes;
        mem[nb++] = ms.device_bytes;
      }
      memset(host, 0xCD, b->rows * row_bytes);
      ASSERT_EQ_INT(
          wds_gpu_jpeg_download(g, host, dev, b->rows * row_bytes, NULL),
          WDS_OK);
      ASSERT_EQ_U64(b->rows, k->rows);
      /* a rank's rows alone: the same bytes */
      if (b->rows >= 3) {
        ASSERT_EQ_INT(
            wds_gpu_jpeg_decode_rows(g, l, b, 0, 1, 2, dev_part, NULL), WDS_OK);
        ASSERT_EQ_INT(
            wds_gpu_jpeg_download(g, part, dev_part, 2 * row_bytes, NULL),
            WDS_OK);
        ASSERT_TRUE(memcmp(part, host + row_bytes, 2 * row_bytes) == 0);
      }
      for (size_t r = 0; r < b->rows; r++) {
        int id = key_id(b->keys[r]);
        ASSERT_STREQ(b->keys[r], k->keys[r]);
        ASSERT_EQ_INT(b->valid[r], k->valid[r]);
        const uint8_t *got = host + r * row_bytes,
                      *want = k->img + r * row_bytes;
        double mad;
        int maxd;
        row_diff(got, want, row_bytes, &mad, &maxd);
        if (maxd > worst_max)
          worst_max = maxd;
        if (getenv("WDS_TEST_VERBOSE"))
          printf("  %s: mean %.3f max %d\n", b->keys[r], mad, maxd);
        if (id == PNG_ID || id == CMYK_ID || id == CUT_ID ||
            id == BAD_HEADER_ID) {
          if (memcmp(got, want, row_bytes) != 0)
            TEST_FAIL_("row %s (id %d) differs from the CPU path's "
                       "(mean %.2f, max %d)",
                       b->keys[r], id, mad, maxd);
          if (test_cur_failed_)
            return;
          cmyk_rows += id == CMYK_ID && b->valid[r];
          cut_rows += id == CUT_ID && b->valid[r] == 0;
          png_rows += id == PNG_ID;
        } else {
          if (mad > worst)
            worst = mad;
          total += mad;
          if (mad > 6.0)
            TEST_FAIL_("row %s: mean absolute difference %.2f > 6 (max %d)",
                       b->keys[r], mad, maxd);
          if (test_cur_failed_)
            return;
          jpeg_rows++;
        }
      }
      wds_loader_release(l, b);
    }
    ASSERT_EQ_U64(n, ncpu[ep]);
  }
  /* Device memory is bounded by the largest batch and does not grow after
   * it (the arena grows to the largest batch seen, never shrinks; two
   * epochs shuffle differently, so the second may hold the largest): it
   * never shrinks, replaying batches it has seen grows nothing, and (the
   * fake: nvJPEG's own buffers may grow for another batch than the one
   * whose images take the most) from the batch of the largest need on it
   * stays the same, exactly that batch's arena and the buffer. */
  size_t largest = 0;
  /* the same batches again (both epochs replayed): nothing grows, real
   * nvJPEG's own buffers included */
  ASSERT_EQ_INT(wds_loader_set_epoch(l, 0), WDS_OK);
  for (int ep = 0; ep < EPOCHS; ep++) {
    const wds_batch *b;
    while (wds_loader_next(l, &b) == WDS_OK) {
      ASSERT_EQ_INT(wds_gpu_jpeg_decode(g, l, b, 0, dev, NULL), WDS_OK);
      wds_loader_release(l, b);
    }
  }
  ASSERT_EQ_INT(wds_gpu_jpeg_sync(g, NULL), WDS_OK);
  {
    wds_gpu_jpeg_stats ms;
    wds_gpu_jpeg_stats_get(g, &ms);
    ASSERT_EQ_U64(ms.arena_bytes, arena[nb - 1]);
    if (!real) /* nvJPEG's own may shrink and regrow; the fake has none */
      ASSERT_EQ_U64(ms.device_bytes, mem[nb - 1]);
  }
  /* the decoder's own memory (exactly): never shrinks, grown to the
   * largest batch and not after it. nvJPEG's share (stream-ordered buffers
   * it may free and allocate again): bounded loosely, by its handles'
   * fixed buffers plus a few times the largest batch's images */
  uint64_t nvj_max = 0;
  for (size_t k = 1; k < nb; k++) {
    if (arena[k] < arena[k - 1])
      TEST_FAIL_("the decoder's device memory shrank (batch %zu: %llu bytes, "
                 "%llu before)",
                 k, (unsigned long long)arena[k],
                 (unsigned long long)arena[k - 1]);
    if (need[k] > need[largest])
      largest = k;
  }
  for (size_t k = 0; k < nb; k++)
    nvj_max = nvj[k] > nvj_max ? nvj[k] : nvj_max;
  for (size_t k = largest; k < nb; k++)
    if (arena[k] != arena[largest])
      TEST_FAIL_("device memory grew after the largest batch (batch %zu of "
                 "%zu: %llu bytes, %llu after batch %zu)",
                 k, nb, (unsigned long long)arena[k],
                 (unsigned long long)arena[largest], largest);
  if (test_cur_failed_)
    return;
  if (!real) {
    ASSERT_EQ_U64(mem[nb - 1], need[largest] + 66 * row_bytes);
    ASSERT_EQ_U64(nvj_max, 0);
  } else {
    ASSERT_TRUE(nvj_max <= (256ull << 20) + 16 * need[largest]);
  }
  printf("  device memory: %llu bytes, the decoder's %llu (largest batch's "
         "images: %llu), nvJPEG's at most %llu\n",
         (unsigned long long)mem[nb - 1], (unsigned long long)arena[nb - 1],
         (unsigned long long)need[largest], (unsigned long long)nvj_max);
  /* measured: 1.79 on average, 4.52 at worst (these synthetic images have
   * more fine detail than photos) */
  /* printed for the GPU run (test_jpeg_gpu_device), which sets the bound
   * from nvJPEG's figures */
  printf("  mean absolute difference of JPEG rows: %.3f on average, %.3f at "
         "worst (largest byte difference %d)%s\n",
         total / (double)jpeg_rows, worst, worst_max,
         real ? " [nvJPEG against the CPU path]" : " [fake]");
  ASSERT_TRUE(total / (double)jpeg_rows <= 2.5);
  ASSERT_TRUE(jpeg_rows > 20 && cmyk_rows > 0 && cut_rows > 0 && png_rows > 0);
  wds_gpu_jpeg_stats st;
  wds_gpu_jpeg_stats_get(g, &st);
  /* pad rows repeat rows, so the counts are at least the distinct ones */
  ASSERT_TRUE(st.cpu_fallback >= cmyk_rows);
  ASSERT_TRUE(st.failed >= 1); /* decode_rows decodes some twice */
  ASSERT_TRUE(st.gpu_images >= jpeg_rows);
  ASSERT_TRUE(st.cpu_rows >= png_rows);
  ASSERT_TRUE(st.batches > 0);
  ASSERT_TRUE(real || fk.max_n > 1); /* batched, not one by one */
  /* every batch's state initialized after its previous decode was done */
  ASSERT_TRUE(real ||
              (fk.st.inits > 2 && fk.st.raced == 0 && fk.st.refilled == 0));
  wds_loader_stats ls;
  wds_loader_stats_get(l, &ls);
  ASSERT_TRUE(ls.skipped >= 2); /* the bad header (workers), the cut one */
  wds_loader_close(l);
  if (!real)
    wds_gpu_jpeg_close(g);
  free(host);
  free(part);
  for (int ep = 0; ep < EPOCHS; ep++)
    for (size_t i = 0; i < ncpu[ep]; i++)
      free(cpu[ep][i].img);
}

/* Under stop, a JPEG neither the backend nor the CPU decodes is decode's
 * error, naming shard, sample and field (also the loader's error); the
 * batch's other rows are decoded all the same, and later batches decode.
 * A backend failure (the whole call) is an I/O error saying so, and the
 * next batch decodes again. A field that was not planned is refused. */
TEST(errors_name_the_sample_and_spoil_nothing) {
  run_cfg rc = {"stop",          WDS_MODE_PLAIN, 0, 1, 1, 4,
                WDS_CROP_CENTER, WDS_LAST_KEEP,  0, 0};
  wds_loader_config c;
  config(&c, &rc);
  c.on_error = WDS_ON_ERROR_STOP;
  c.shuffle_buffer = 0;
  c.shard_shuffle = 0;
  c.urls = (const char *const *)&fx.urls[2]; /* ids 18..26: CUT_ID, no
                                                bad header */
  c.url_count = 1;
  c.jpeg_decode = WDS_JPEG_DECODE_GPU;
  static fake fk;
  fake_init(&fk);
  wds_gpu_jpeg *g = real ? real : wds__gpu_jpeg_new(&fake_ops, &fk, "fake");
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  size_t row_bytes = 32 * 40 * 3;
  uint8_t *dev = wds_gpu_jpeg_buffer(g, 4 * row_bytes);
  uint8_t *host = malloc(4 * row_bytes);
  const wds_batch *b;
  int saw_error = 0, after = 0;
  while (wds_loader_next(l, &b) == WDS_OK) {
    int cut = -1;
    for (size_t r = 0; r < b->rows; r++)
      if (key_id(b->keys[r]) == CUT_ID)
        cut = (int)r;
    if (!real)
      memset(dev, 0xAB, 4 * row_bytes);
    int st = wds_gpu_jpeg_decode(g, l, b, 0, dev, NULL);
    ASSERT_EQ_INT(wds_gpu_jpeg_download(g, host, dev, 4 * row_bytes, NULL),
                  WDS_OK);
    if (cut >= 0) {
      ASSERT_EQ_INT(st, WDS_ERR_TRUNCATED);
      ASSERT_CONTAINS(wds_last_error(), "gpu-2.tar");
      ASSERT_CONTAINS(wds_last_error(), "sample \"s2/4\"");
      ASSERT_CONTAINS(wds_last_error(), "field 'jpg;png'");
      ASSERT_CONTAINS(wds_last_error(), "JPEG");
      ASSERT_CONTAINS(wds_last_error(), "s2/4");
      /* the other rows are decoded: none is left as the fill pattern
       * (the fake's host memory) or zeros */
      for (size_t r = 0; r < b->rows; r++) {
        if ((int)r == cut)
          continue;
        size_t fill = 0, zero = 0;
        for (size_t i = 0; i < row_bytes; i++) {
          fill += host[r * row_bytes + i] == 0xAB;
          zero += host[r * row_bytes + i] == 0;
        }
        ASSERT_TRUE(fill < row_bytes / 4 && zero < row_bytes / 4);
      }
      saw_error = 1;
    } else {
      ASSERT_EQ_INT(st, WDS_OK);
      after += saw_error;
    }
    wds_loader_release(l, b);
  }
  ASSERT_TRUE(saw_error && after > 0);
  /* a failure of the backend itself (the fake's) */
  ASSERT_EQ_INT(wds_loader_set_epoch(l, 1), WDS_OK);
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
  if (!real) {
    fk.fail_batch = 1;
    ASSERT_EQ_INT(wds_gpu_jpeg_decode(g, l, b, 0, dev, NULL), WDS_ERR_IO);
    ASSERT_CONTAINS(wds_last_error(), "the device is gone");
    fk.fail_batch = 0;
  }
  ASSERT_EQ_INT(wds_gpu_jpeg_decode(g, l, b, 0, dev, NULL), WDS_OK);
  /* not a planned field */
  ASSERT_EQ_INT(wds_gpu_jpeg_decode(g, l, b, 1, dev, NULL), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "not a JPEG field planned");
  wds_loader_release(l, b);
  wds_loader_close(l);
  if (!real)
    wds_gpu_jpeg_close(g);
  free(host);
}

/* nvJPEG's batched state is reused batch after batch while the previous
 * batch may still run on the device: wds__jg_batched_run (the nvJPEG
 * backend's and the fake's) waits, polling the state's event, before it
 * initializes the state again. A fake state whose decode stays in flight
 * for `latency` polls counts an initialize while it runs (the race). */
TEST(batched_state_waits_for_its_last_decode) {
  fake_state st = {0};
  st.latency = 5;
  wds__jg_batched b = {&st,       fs_init,  fs_fill, fs_decode,
                       fs_record, fs_query, 0};
  wds__err e;
  for (int k = 0; k < 4; k++)
    ASSERT_EQ_INT(wds__jg_batched_run(&b, NULL, 8, 3, NULL, 0, &e), WDS_OK);
  ASSERT_EQ_INT(st.inits, 4);
  ASSERT_EQ_INT(st.raced, 0);
  /* the state's host arrays (images, sizes, destinations) are filled only
   * once its previous decode is done: nvJPEG reads them until then */
  ASSERT_EQ_INT(st.fills, 4);
  ASSERT_EQ_INT(st.refilled, 0);
  ASSERT_TRUE(st.queries >= 3 * 5); /* it waited on every reuse */
  ASSERT_EQ_INT(b.pending, 1);
  ASSERT_EQ_INT(wds__jg_batched_wait(&b, 0, &e), WDS_OK);
  ASSERT_EQ_INT(b.pending, 0);
  /* a record that fails is the call's error (else the next wait would not
   * wait) */
  st.fail_record = 1;
  ASSERT_EQ_INT(wds__jg_batched_run(&b, NULL, 8, 3, NULL, 0, &e), WDS_ERR_IO);
  ASSERT_CONTAINS(e.msg, "cudaEventRecord");
  st.fail_record = 0;
  /* an event that never completes (work behind a hung peer): the wait
   * polls until the timeout, then fails naming what it waited for */
  ASSERT_EQ_INT(wds__jg_batched_run(&b, NULL, 8, 3, NULL, 0, &e), WDS_OK);
  st.hang = 1;
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds__jg_batched_run(&b, NULL, 8, 3, NULL, 100, &e),
                WDS_ERR_TIMEOUT);
  double took = test_now_s() - t0;
  ASSERT_TRUE(took >= 0.09 && took < 5.0);
  ASSERT_CONTAINS(e.msg, "previous batched decode");
  ASSERT_CONTAINS(e.msg, "not done after");
  ASSERT_EQ_INT(st.raced, 0);
}

/* A JPEG cut short is told from a whole one before it reaches nvJPEG's
 * hardware backend, which may not report it. */
TEST(jpegs_cut_short_are_found) {
  wds_reader_config rcfg = WDS_READER_CONFIG_INIT;
  rcfg.urls = (const char *const *)fx.urls;
  rcfg.url_count = NSHARDS;
  wds_reader *r;
  ASSERT_EQ_INT(wds_reader_open(&rcfg, &r), WDS_OK);
  const wds_sample *sm;
  int st;
  size_t seen = 0, cut = 0;
  while ((st = wds_reader_next(r, &sm)) == WDS_OK) {
    int id = key_id(sm->key);
    for (size_t i = 0; i < sm->field_count; i++) {
      const wds_field *f = &sm->fields[i];
      if (strcmp(f->ext, "jpg") != 0)
        continue;
      int whole = wds__jg_jpeg_whole(f->data, f->size_bytes);
      ASSERT_EQ_INT(whole, id != CUT_ID && id != BAD_HEADER_ID);
      cut += id == CUT_ID;
      seen++;
    }
  }
  ASSERT_EQ_INT(st, WDS_EOF);
  ASSERT_TRUE(seen > 20 && cut == 1);
  wds_reader_close(r);
  static const uint8_t padded[] = {0xFF, 0xD8, 0xFF, 0xD9, 0, 0, '\n'};
  ASSERT_EQ_INT(wds__jg_jpeg_whole(padded, sizeof padded), 1);
  ASSERT_EQ_INT(wds__jg_jpeg_whole(padded, 3), 0);
  ASSERT_EQ_INT(wds__jg_jpeg_whole(padded, 0), 0);
}

/* A JPEG cut short in a batch of more than 50 (where GPU_HYBRID's batched
 * call does Huffman on the GPU, with no per-image status, as the hardware's
 * has none) is never a valid row: it is decoded alone, where its error is
 * reported, and is the decode's error naming the sample. It went to the
 * batched call and came out a valid row of garbage. */
TEST(a_cut_jpeg_in_a_large_batch_is_never_valid) {
  enum { N = 60, CUT = 37 };
  char path[512];
  snprintf(path, sizeof path, "%s/big.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  tjhandle tj = tjInitCompress();
  for (int i = 0; i < N; i++) {
    int W = 64 + i, H = 48 + (i % 7);
    uint8_t *rgb = make_rgb(W, H, 100 + i);
    unsigned char *img = NULL;
    unsigned long jsize = 0;
    ASSERT_EQ_INT(tjCompress2(tj, rgb, W, 0, H, TJPF_RGB, &img, &jsize,
                              TJSAMP_420, 85, 0),
                  0);
    size_t size = jsize;
    if (i == CUT) { /* half of the scan data: libjpeg only warns */
      size_t at = 2;
      while (at + 4 < size && !(img[at] == 0xFF && img[at + 1] == 0xDA))
        at += 2 + ((size_t)img[at + 2] << 8 | img[at + 3]);
      size_t scan = at + 2 + ((size_t)img[at + 2] << 8 | img[at + 3]);
      size = scan + (size - scan) / 2;
      ASSERT_EQ_INT(wds__jg_jpeg_whole(img, size), 0);
    }
    char name[64], val[16];
    snprintf(name, sizeof name, "b/%02d.jpg", i);
    ASSERT_EQ_INT(wds__tarw_add(w, name, img, size, &e), WDS_OK);
    snprintf(name, sizeof name, "b/%02d.cls", i);
    snprintf(val, sizeof val, "%d", i);
    ASSERT_EQ_INT(wds__tarw_add(w, name, val, strlen(val), &e), WDS_OK);
    tjFree(img);
    free(rgb);
  }
  tjDestroy(tj);
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);

  for (int hw = 0; hw <= 1; hw++) {
    if (real && hw)
      break; /* the real decoder has what it has */
    wds_loader_config c = WDS_LOADER_CONFIG_INIT;
    const char *url = path;
    c.urls = &url;
    c.url_count = 1;
    c.workers = 1;
    c.mode = WDS_MODE_PLAIN;
    c.batch_size = 64;
    c.last_batch = WDS_LAST_KEEP;
    c.fields = fields;
    c.field_count = 2;
    c.on_error = WDS_ON_ERROR_STOP;
    c.shuffle_buffer = 0;
    c.shard_shuffle = 0;
    c.jpeg_decode = WDS_JPEG_DECODE_GPU;
    static fake fk;
    fake_init(&fk);
    fk.hw = hw;
    wds_gpu_jpeg *g = real ? real : wds__gpu_jpeg_new(&fake_ops, &fk, "fake");
    wds_loader *l;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    size_t row_bytes = 32 * 40 * 3;
    uint8_t *dev = wds_gpu_jpeg_buffer(g, 64 * row_bytes);
    const wds_batch *b;
    ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
    ASSERT_EQ_INT(b->rows, N);
    int st = wds_gpu_jpeg_decode(g, l, b, 0, dev, NULL);
    if (st == WDS_OK)
      printf("  %s: the cut JPEG b/%d came out a valid row\n",
             hw ? "hardware" : "hybrid", CUT);
    ASSERT_EQ_INT(st, WDS_ERR_TRUNCATED);
    ASSERT_CONTAINS(wds_last_error(), "big.tar");
    ASSERT_CONTAINS(wds_last_error(), "sample \"b/37\"");
    if (!real)
      ASSERT_TRUE(fk.max_n == N); /* one call for the batch */
    wds_loader_release(l, b);
    wds_loader_close(l);
    if (!real)
      wds_gpu_jpeg_close(g);
  }
}

/* The decoder's waits poll (never block in the device's own wait) and
 * fail when the device reports an error. */
static int q_fail(void *arg, wds__err *e) {
  (void)arg;
  wds__fail(e, WDS_ERR_IO, "CUDA: waiting for the stream: an illegal address");
  return -1;
}

static int q_after(void *arg, wds__err *e) {
  (void)e;
  return --*(int *)arg <= 0;
}

TEST(waits_poll_under_the_timeout) {
  wds__err e;
  int left = 200;
  ASSERT_EQ_INT(wds__jg_poll(q_after, &left, "the stream", 10000, &e), WDS_OK);
  ASSERT_EQ_INT(left, 0);
  ASSERT_EQ_INT(wds__jg_poll(q_fail, NULL, "the stream", 0, &e), WDS_ERR_IO);
  ASSERT_CONTAINS(e.msg, "illegal address");
  /* the decoder's timeout reaches the backend's waits */
  static fake fk;
  fake_init(&fk);
  wds_gpu_jpeg *g = wds__gpu_jpeg_new(&fake_ops, &fk, "fake");
  ASSERT_EQ_INT(wds_gpu_jpeg_set_timeout(g, 250), WDS_OK);
  ASSERT_EQ_INT(fk.timeout_ms, 250);
  ASSERT_EQ_INT(wds_gpu_jpeg_set_timeout(g, -1), WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds_gpu_jpeg_set_timeout(NULL, 5), WDS_ERR_INVALID);
  wds_gpu_jpeg_close(g);
}

/* Two loaders on one GPU (two threads) share one decoder (Python keeps one
 * per device): its calls are serialised, each thread's batches decode
 * intact. */
typedef struct share_arg {
  wds_gpu_jpeg *g;
  const run_cfg *rc;
  size_t batches;
  int failures;
} share_arg;

static void *share_thread(void *p) {
  share_arg *a = p;
  wds_loader_config c;
  config(&c, a->rc);
  c.jpeg_decode = WDS_JPEG_DECODE_GPU;
  wds_loader *l;
  if (wds_loader_open(&c, &l) != WDS_OK) {
    a->failures++;
    return NULL;
  }
  size_t row_bytes = 32 * 40 * 3;
  uint8_t *dev = malloc(8 * row_bytes);
  const wds_batch *b;
  while (wds_loader_next(l, &b) == WDS_OK) {
    if (wds_gpu_jpeg_decode(a->g, l, b, 0, dev, NULL) != WDS_OK)
      a->failures++;
    /* every JPEG row decoded: none left as the fill or zeros */
    for (size_t r = 0; r < b->rows; r++) {
      size_t zero = 0;
      for (size_t i = 0; i < row_bytes; i++)
        zero += dev[r * row_bytes + i] == 0;
      if (b->valid[r] && zero == row_bytes)
        a->failures++;
    }
    memset(dev, 0, 8 * row_bytes);
    a->batches++;
    wds_loader_release(l, b);
  }
  wds_loader_close(l);
  free(dev);
  return NULL;
}

TEST(two_threads_share_one_decoder) {
  run_cfg rc = {"share",         WDS_MODE_PLAIN, 0, 1, 1, 8,
                WDS_CROP_CENTER, WDS_LAST_KEEP,  0, 0};
  static fake fk;
  fake_init(&fk);
  fk.slow_us = 3000; /* widens the window two unserialised calls share */
  wds_gpu_jpeg *g = wds__gpu_jpeg_new(&fake_ops, &fk, "fake");
  ASSERT_TRUE(g != NULL);
  share_arg a[2] = {{g, &rc, 0, 0}, {g, &rc, 0, 0}};
  pthread_t t[2];
  for (int k = 0; k < 2; k++)
    ASSERT_EQ_INT(pthread_create(&t[k], NULL, share_thread, &a[k]), 0);
  for (int k = 0; k < 2; k++)
    pthread_join(t[k], NULL);
  ASSERT_TRUE(a[0].batches > 1 && a[1].batches > 1);
  ASSERT_EQ_INT(a[0].failures + a[1].failures, 0);
  ASSERT_EQ_INT(fk.overlapped, 0);
  ASSERT_EQ_INT(fk.st.raced, 0);
  wds_gpu_jpeg_close(g);
}

/* On the GPU (--device): one call with more images than a grid's y may
 * count (65,535): the resize kernel strides over them. Every row is the
 * TurboJPEG decode of the same small JPEG (nearly: nvJPEG's decoder), none
 * left as the poison. */
TEST(more_images_in_one_call_than_a_grid_has_rows) {
  const wds__jg_ops *ops;
  void *ctx;
  char lib[512];
  wds__err e;
  if (wds__jg_cuda_open(0, &ops, &ctx, lib, sizeof lib, &e) != WDS_OK)
    SKIP("%.900s", e.msg);
  enum { N = 70000, W = 16, H = 8 };
  size_t row_bytes = (size_t)W * H * 3;
  uint8_t *rgb = make_rgb(W, H, 3), *ref = malloc(row_bytes);
  unsigned char *jpg = NULL;
  unsigned long js = 0;
  tjhandle tj = tjInitCompress(), tjd = tjInitDecompress();
  ASSERT_EQ_INT(
      tjCompress2(tj, rgb, W, 0, H, TJPF_RGB, &jpg, &js, TJSAMP_444, 90, 0), 0);
  ASSERT_EQ_INT(
      tjDecompress2(tjd, jpg, js, ref, W, 0, H, TJPF_RGB, TJFLAG_ACCURATEDCT),
      0);
  wds__jg_img *imgs = calloc(N, sizeof *imgs);
  uint8_t *host = malloc(N * row_bytes);
  ASSERT_TRUE(imgs && host);
  for (size_t i = 0; i < N; i++) {
    wds__gpu_row *h = &imgs[i].h;
    imgs[i].data = jpg;
    imgs[i].size = js;
    imgs[i].row = imgs[i].batch_row = i;
    h->magic = WDS__GPU_ROW_MAGIC;
    h->kind = WDS__GPU_ROW_JPEG;
    h->src_w = h->out_w = h->total_w = W;
    h->src_h = h->out_h = h->total_h = H;
    h->channels = 3;
    h->x1 = W;
    h->y1 = H;
  }
  void *dev = ops->buffer(ctx, N * row_bytes);
  ASSERT_TRUE(dev != NULL);
  memset(host, 0xAB, N * row_bytes);
  ASSERT_EQ_INT(ops->upload(ctx, dev, host, N * row_bytes, NULL, &e), WDS_OK);
  int rc = ops->decode(ctx, imgs, N, dev, row_bytes, NULL, &e);
  if (rc != WDS_OK)
    TEST_FAIL_("decode of %d images: %s", N, e.msg);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_INT(ops->download(ctx, host, dev, N * row_bytes, NULL, &e), WDS_OK);
  double mad;
  int maxd;
  row_diff(host, ref, row_bytes, &mad, &maxd);
  printf("  %d images of %dx%d: against TurboJPEG mean %.3f, max %d\n", N, W, H,
         mad, maxd);
  ASSERT_TRUE(mad < 3.0);
  size_t bad = 0;
  for (size_t i = 0; i < N; i++)
    bad += imgs[i].status != WDS__JG_OK ||
           memcmp(host + i * row_bytes, host, row_bytes) != 0;
  ASSERT_EQ_U64(bad, 0);
  ops->destroy(ctx);
  tjFree(jpg);
  tjDestroy(tj);
  tjDestroy(tjd);
  free(imgs);
  free(host);
  free(rgb);
  free(ref);
}

/* Asking for the real decoder where there is none (no GPU here, or a
 * build without nvJPEG) is an error that says why, never a decoder. On a
 * GPU machine with libnvjpeg it opens and names the library it loaded. */
TEST(create_says_why_it_cannot) {
  wds_gpu_jpeg *g = (wds_gpu_jpeg *)1;
  int rc = wds_gpu_jpeg_open(0, &g);
  if (rc == WDS_OK) {
    ASSERT_CONTAINS(wds_gpu_jpeg_library(g), "nvjpeg");
    printf("  loaded %s\n", wds_gpu_jpeg_library(g));
    wds_gpu_jpeg_close(g);
    return;
  }
  ASSERT_EQ_INT(rc, WDS_ERR_OPEN);
  ASSERT_TRUE(g == NULL);
  ASSERT_CONTAINS(wds_last_error(), "GPU JPEG decoding: ");
  printf("  %s\n", wds_last_error());
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--device") == 0) {
    if (wds_gpu_jpeg_open(0, &real) != WDS_OK) {
      printf("skipped: %s\n", wds_last_error());
      return 77;
    }
    printf("decoder: %s\n", wds_gpu_jpeg_library(real));
  }
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-jpeg-gpu-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  if (make_fixture() != 0) {
    printf("cannot write the fixture\n");
    return 1;
  }
  if (!real) {
    RUN(planned_rows_are_the_cpu_paths);
    RUN(jpeg_decode_option_is_checked);
  }
  RUN(decode_equals_cpu_over_a_fake_backend);
  RUN(errors_name_the_sample_and_spoil_nothing);
  RUN(a_cut_jpeg_in_a_large_batch_is_never_valid);
  if (!real) {
    RUN(batched_state_waits_for_its_last_decode);
    RUN(waits_poll_under_the_timeout);
    RUN(jpegs_cut_short_are_found);
    RUN(two_threads_share_one_decoder);
  }
  RUN(create_says_why_it_cannot);
  if (real)
    RUN(more_images_in_one_call_than_a_grid_has_rows);
  wds_gpu_jpeg_close(real);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    printf("cannot remove %s\n", tmpdir);
  return test_summary();
}
