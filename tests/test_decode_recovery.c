/* test_decode_recovery.c — bad images do not spoil the good ones after them
 * in the loader's workers.
 *
 * Each worker thread keeps one decoder for all its samples. A shard set is
 * written (public writer) with good JPEGs and PNGs from the fuzz corpus and
 * one generated here, corrupt copies of them (cut in the headers, as in the
 * report, or in the data; a changed byte) every few samples, and JPEGs
 * without their DHT or DQT segments (libjpeg keeps tables from image to
 * image). The loader runs it under WDS_ON_ERROR_SKIP with 1 and 2 workers
 * and a center crop (no per-worker randomness), and every row is compared
 * with what a fresh decoder makes of its sample alone: exactly the samples
 * a fresh decoder rejects are invalid rows, and every valid row has a fresh
 * decoder's bytes. */
#include <stdint.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "pipeline/decode.h"
#include "test.h"
#include "test_files.h"
#include "wds/loader.h"
#include "wds/writer.h"

enum { OUT_W = 24, OUT_H = 16, OUT_CH = 3, SAMPLES = 1000, PER_SHARD = 100 };

typedef struct sample {
  char key[32];
  const char *ext;
  uint8_t *data;
  size_t size;
  int ok;       /* a fresh decoder decodes it */
  uint8_t *ref; /* and makes these bytes of it */
  int seen;
} sample;

static uint8_t *copy_of(const uint8_t *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  memcpy(c, p, n);
  return c;
}

/* p (a JPEG) without its segments of marker m before the first scan. */
static uint8_t *jpeg_without(const uint8_t *p, size_t n, uint8_t m,
                             size_t *out_n) {
  uint8_t *o = malloc(n);
  size_t i = 2, k = 2;
  memcpy(o, p, 2);
  while (i + 4 <= n && p[i] == 0xFF && p[i + 1] != 0xDA) {
    size_t len = 2 + ((size_t)p[i + 2] << 8 | p[i + 3]);
    if (p[i + 1] != m) {
      memcpy(o + k, p + i, len);
      k += len;
    }
    i += len;
  }
  memcpy(o + k, p + i, n - i);
  *out_n = k + n - i;
  return o;
}

static uint8_t *generated_jpeg(size_t *n) {
  enum { W = 80, H = 60 };
  uint8_t *pix = malloc(W * H * 3);
  for (int i = 0; i < W * H * 3; i++)
    pix[i] = (uint8_t)(i * 7 + i / (W * 3) * 5);
  tjhandle tj = tjInitCompress();
  unsigned char *jpg = NULL;
  unsigned long jn = 0;
  tjCompress2(tj, pix, W, 0, H, TJPF_RGB, &jpg, &jn, TJSAMP_420, 85, 0);
  uint8_t *out = copy_of(jpg, jn);
  *n = jn;
  tjFree(jpg);
  tjDestroy(tj);
  free(pix);
  return out;
}

typedef struct goods {
  uint8_t *data[8];
  size_t size[8];
  const char *ext[8];
  size_t n;
} goods;

static int load_goods(goods *g) {
  static const char *const names[] = {
      "tiny420.jpg",    "tiny444-progressive.jpg",
      "tiny-gray.jpg",  "tiny-cmyk.jpg",
      "tiny-rgb.png",   "tiny-interlaced16.png",
      "tiny-p-trns.png"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/decode/%s",
             WDS_SOURCE_DIR, names[i]);
    g->data[g->n] = test_read_file(path, &g->size[g->n]);
    g->ext[g->n] = strstr(names[i], ".png") ? "png" : "jpg";
    if (!g->data[g->n++])
      return -1;
  }
  g->ext[g->n] = "jpg";
  g->data[g->n] = generated_jpeg(&g->size[g->n]);
  g->n++;
  return 0;
}

/* Sample i: mostly good images in turn; every tenth a corrupt copy of one
 * (100 of 1000, each good image in turn, cut or changed in turn), and a few
 * table-less JPEGs. */
static void make_sample(const goods *g, int i, sample *s) {
  size_t gi = (size_t)(i % 10 == 3 ? i / 10 : i) % g->n, n = g->size[gi];
  const uint8_t *p = g->data[gi];
  snprintf(s->key, sizeof s->key, "k%05d", i);
  s->ext = g->ext[gi];
  if (i % 10 == 3) {
    int how = i / 10 % 4;
    s->data = copy_of(p, n);
    if (how == 0 && gi == 0) {
      s->size = 492; /* the report: tiny420.jpg cut inside its headers */
    } else if (how <= 1) {
      s->size = (size_t)(i * 7919) % (n / 2); /* headers, mostly */
    } else if (how == 2) {
      s->size = n / 2 + (size_t)(i * 131) % (n / 2 - 2); /* the data */
    } else {
      s->size = n; /* a byte changed: may still decode */
      s->data[(size_t)(i * 104729) % n] ^= 0x5A;
    }
  } else if (i % 50 == 21) {
    s->ext = "jpg";
    s->data = jpeg_without(g->data[0], g->size[0], i % 100 == 21 ? 0xC4 : 0xDB,
                           &s->size);
  } else {
    s->data = copy_of(p, n);
    s->size = n;
  }
}

static void reference(sample *s) {
  wds__decoder *d = wds__decoder_new();
  wds__image_opts o = {.width = OUT_W,
                       .height = OUT_H,
                       .channels = OUT_CH,
                       .crop = WDS_CROP_CENTER,
                       .scale_min = 0.08,
                       .scale_max = 1.0};
  wds__err e;
  s->ref = malloc(OUT_W * OUT_H * OUT_CH);
  s->ok = wds__decode_image(d, s->data, s->size, &o, s->ref, &e) == WDS_OK;
  wds__decoder_free(d);
}

/* Runs the loader over urls with `workers` threads; 0 if every row is as
 * described at the top. */
static int check_loader(char **urls, size_t nurls, sample *s, int workers,
                        uint64_t corrupt) {
  wds_field_spec fs[2] = {{"jpg;png", WDS_DECODE_AUTO, OUT_CH, OUT_W, OUT_H},
                          {"cls", WDS_DECODE_AUTO, 0, 0, 0}};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = (const char *const *)urls;
  c.url_count = nurls;
  c.rank = 0;
  c.world_size = 1;
  c.workers = workers;
  c.fields = fs;
  c.field_count = 2;
  c.batch_size = 32;
  c.crop = WDS_CROP_CENTER;
  c.on_error = WDS_ON_ERROR_SKIP;
  wds_loader *l;
  if (wds_loader_open(&c, &l) != WDS_OK) {
    printf("  open: %s\n", wds_last_error());
    return 1;
  }
  for (int i = 0; i < SAMPLES; i++)
    s[i].seen = 0;
  const wds_batch *b;
  int rc, bad = 0;
  uint64_t invalid = 0, rows = 0;
  while (!bad && (rc = wds_loader_next(l, &b)) == WDS_OK) {
    const uint8_t *px = b->fields[0].data;
    const int64_t *cls = b->fields[1].data;
    for (size_t r = 0; r < b->rows && !bad; r++, rows++) {
      int i = atoi(b->keys[r] + 1);
      const uint8_t *row = px + r * b->fields[0].row_bytes;
      invalid += !b->valid[r];
      if (i < 0 || i >= SAMPLES || strcmp(b->keys[r], s[i].key) != 0 ||
          s[i].seen++) {
        printf("  workers %d: unexpected row \"%s\"\n", workers, b->keys[r]);
        bad = 1;
      } else if (b->valid[r] != s[i].ok) {
        printf("  workers %d: %s (%s, %zu bytes) is %s, a fresh decoder %s "
               "it (last error: %s)\n",
               workers, s[i].key, s[i].ext, s[i].size,
               b->valid[r] ? "valid" : "invalid",
               s[i].ok ? "decodes" : "rejects", wds_last_error());
        bad = 1;
      } else if (b->valid[r] &&
                 (cls[r] != i ||
                  memcmp(row, s[i].ref, OUT_W * OUT_H * OUT_CH) != 0)) {
        printf("  workers %d: %s differs from a fresh decoder's\n", workers,
               s[i].key);
        bad = 1;
      }
    }
    wds_loader_release(l, b);
  }
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  if (!bad && (rc != WDS_EOF || rows != SAMPLES || invalid != corrupt ||
               st.skipped != corrupt)) {
    printf("  workers %d: rc %d, %llu rows, %llu invalid, %llu skipped; "
           "want %d rows, %llu invalid\n",
           workers, rc, (unsigned long long)rows, (unsigned long long)invalid,
           (unsigned long long)st.skipped, SAMPLES,
           (unsigned long long)corrupt);
    bad = 1;
  }
  wds_loader_close(l);
  return bad;
}

TEST(loader_workers_recover) {
  char dir[] = "/tmp/wds-test-decode-recovery-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  goods g;
  memset(&g, 0, sizeof g);
  ASSERT_EQ_INT(load_goods(&g), 0);
  sample *s = calloc(SAMPLES, sizeof *s);
  uint64_t corrupt = 0, tricky_ok = 0;
  for (int i = 0; i < SAMPLES; i++) {
    make_sample(&g, i, &s[i]);
    reference(&s[i]);
    corrupt += !s[i].ok;
    tricky_ok += s[i].ok && i % 10 == 3;
  }

  char pattern[256];
  snprintf(pattern, sizeof pattern, "%s/s-%%04d.tar", dir);
  wds_writer_config wc = WDS_WRITER_CONFIG_INIT;
  wc.pattern = pattern;
  wc.max_count = PER_SHARD;
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&wc, &w), WDS_OK);
  for (int i = 0; i < SAMPLES; i++) {
    char cls[16];
    snprintf(cls, sizeof cls, "%d", i);
    wds_writer_field f[2] = {{"cls", cls, strlen(cls)},
                             {s[i].ext, s[i].data, s[i].size}};
    ASSERT_EQ_INT(wds_writer_write_sample(w, s[i].key, f, 2), WDS_OK);
  }
  ASSERT_EQ_INT(wds_writer_close(w), WDS_OK);
  char *urls[SAMPLES / PER_SHARD];
  size_t nurls = SAMPLES / PER_SHARD;
  for (size_t k = 0; k < nurls; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/s-%04zu.tar", dir, k);
    urls[k] = strdup(path);
  }

  int failed[2];
  for (int workers = 1; workers <= 2; workers++)
    failed[workers - 1] = check_loader(urls, nurls, s, workers, corrupt);

  for (size_t k = 0; k < nurls; k++)
    free(urls[k]);
  for (int i = 0; i < SAMPLES; i++) {
    free(s[i].data);
    free(s[i].ref);
  }
  free(s);
  for (size_t k = 0; k < g.n; k++)
    free(g.data[k]);
  test_remove_tree(dir);
  ASSERT_EQ_INT(failed[0], 0);
  ASSERT_EQ_INT(failed[1], 0);
  /* the fixture is what it says: 100 corrupt copies, of which a changed
   * byte or a PNG cut after its image data may still decode (23 do), and
   * 10 JPEGs without DQT that cannot */
  ASSERT_TRUE(corrupt >= 70 && corrupt <= 110);
  ASSERT_TRUE(tricky_ok <= 30);
}

int main(void) {
  RUN(loader_workers_recover);
  return test_summary();
}
