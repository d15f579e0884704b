/* decode.c — the image decoder (JPEG, PNG) and its row in the decoder table
 * (npy lives in npy.c, int in int.c).
 *
 * One wds__decoder per worker thread holds everything reused from image to
 * image: the TurboJPEG handle, the decoded-image buffer, the intermediate
 * of the horizontal resampling pass and the cached filter taps (unchanged
 * between images of one size, the common case; keyed by every argument).
 * Buffers only grow; wds__decoder_free releases them. Nothing reused may show
 * in a result (decode.h): buffers are written in full before they are read, and
 * the TurboJPEG handle, which keeps libjpeg state, is replaced after a failure
 * and before an image that could see an earlier one's tables (decode_jpeg).
 *
 * An image is decoded in three steps: the header gives the source size; the
 * crop plan (resize.c) says which source span maps to the output; the pixels
 * are decoded — a JPEG at the smallest TurboJPEG scale M/8 that still leaves
 * the span at least as large as the output (DCT-domain downscaling is much
 * cheaper than decoding everything and filtering it away), a PNG at full
 * size — and the span is resampled into the caller's buffer; or, for the
 * loader (wds__decode_image_rows), the horizontal pass runs into a block
 * and the vertical pass later, into the batch slot's row.
 *
 * Errors never print: TurboJPEG keeps its messages on the handle, libpng's
 * go through our handlers (error: longjmp back with the text; warning:
 * ignored). A JPEG that ends early ("Premature end of JPEG file") is an
 * error; other libjpeg warnings (extraneous bytes, corrupt-data warnings
 * that Pillow also accepts) are not. */
#include "decode.h"
#include "decoders.h"

#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "base/mem.h"
#include "resize.h"

#define WDS__MAX_PIXELS ((uint64_t)1 << 28)
#define JMSG_LENGTH_MAX_ 200 /* libjpeg's JMSG_LENGTH_MAX */

struct wds__decoder {
  tjhandle tj;
  uint8_t *img; /* decoded source image */
  size_t img_cap;
  uint8_t *tmp; /* horizontal pass output */
  size_t tmp_cap;
  png_bytep *rows;
  size_t rows_cap;
  wds__taps tx, ty;
  uint64_t max_pixels;
  uint64_t mem_limit; /* the image memory budget, bytes */
};

wds__decoder *wds__decoder_new(void) {
  wds__decoder *d = calloc(1, sizeof *d);
  if (d) {
    d->max_pixels = WDS__MAX_PIXELS;
    d->mem_limit = WDS_IMAGE_MEMORY_LIMIT_DEFAULT;
  }
  return d;
}

void wds__decoder_free(wds__decoder *d) {
  if (!d)
    return;
  if (d->tj)
    tjDestroy(d->tj);
  free(d->img);
  free(d->tmp);
  free(d->rows);
  wds__taps_free(&d->tx);
  wds__taps_free(&d->ty);
  free(d);
}

void wds__decoder_set_max_pixels(wds__decoder *d, uint64_t max_pixels) {
  d->max_pixels = max_pixels ? max_pixels : WDS__MAX_PIXELS;
}

void wds__decoder_set_memory_limit(wds__decoder *d, uint64_t bytes) {
  d->mem_limit = bytes ? bytes : WDS_IMAGE_MEMORY_LIMIT_DEFAULT;
}

/* A byte count for messages: "775.0 MB" (decimal units, as sizes are
 * printed elsewhere) with the exact count. */
static void mem_str(char *b, size_t n, uint64_t bytes) {
  if (bytes >= 1000000)
    snprintf(b, n, "%.1f MB (%llu bytes)", bytes / 1e6,
             (unsigned long long)bytes);
  else
    snprintf(b, n, "%llu bytes", (unsigned long long)bytes);
}

/* The budget check: WDS_OK, or WDS_ERR_LIMIT naming the image (what, w x
 * h), what its decode needs (need bytes; how, e.g. "decoded at 2000x2000
 * RGB") and the limit. */
static int over_budget(const wds__decoder *d, wds__err *e, const char *what,
                       uint64_t w, uint64_t h, uint64_t need, const char *how) {
  if (need <= d->mem_limit)
    return WDS_OK;
  char nb[64], lb[64];
  mem_str(nb, sizeof nb, need);
  mem_str(lb, sizeof lb, d->mem_limit);
  return wds__fail(e, WDS_ERR_LIMIT,
                   "%s: %llux%llu image needs %s to decode (%s), over the "
                   "image memory limit of %s (image_memory_limit)",
                   what, (unsigned long long)w, (unsigned long long)h, nb, how,
                   lb);
}

static int grow_bytes(uint8_t **buf, size_t *cap, size_t need) {
  void *p = wds__grow(*buf, cap, need, 1, 4096);
  if (!p)
    return -1;
  *buf = p;
  return 0;
}

/* ---- pixel conversions (Pillow's, so that results match convert()) ---- */

static inline uint8_t luma(unsigned r, unsigned g, unsigned b) {
  /* Pillow's L24: ITU-R 601-2 luma in 16-bit fixed point, rounded */
  return (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

static inline uint8_t muldiv255(unsigned a, unsigned b) {
  unsigned t = a * b + 128;
  return (uint8_t)(((t >> 8) + t) >> 8);
}

/* In place: n pixels of in_ch channels (1 gray, 2 gray+alpha, 3 RGB,
 * 4 RGBA or, with cmyk, Adobe-inverted CMYK) to out_ch (1 or 3); alpha is
 * dropped, not composited. The buffer holds n * max(in_ch, out_ch) bytes;
 * expanding conversions run backwards so nothing is overwritten early. */
static void convert_pixels(uint8_t *p, size_t n, int in_ch, int cmyk,
                           int out_ch) {
  if (cmyk) {
    for (size_t i = 0; i < n; i++) {
      const uint8_t *s = p + 4 * i;
      unsigned nk = s[3]; /* stored inverted: 255 - K */
      uint8_t r = (uint8_t)(nk - muldiv255(255u - s[0], nk));
      uint8_t g = (uint8_t)(nk - muldiv255(255u - s[1], nk));
      uint8_t b = (uint8_t)(nk - muldiv255(255u - s[2], nk));
      if (out_ch == 3) {
        p[3 * i] = r;
        p[3 * i + 1] = g;
        p[3 * i + 2] = b;
      } else {
        p[i] = luma(r, g, b);
      }
    }
    return;
  }
  if (in_ch == out_ch)
    return;
  if (out_ch == 3 && in_ch < 3) { /* gray (+alpha) to RGB: backwards */
    for (size_t i = n; i-- > 0;) {
      uint8_t v = p[(size_t)in_ch * i];
      p[3 * i] = p[3 * i + 1] = p[3 * i + 2] = v;
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const uint8_t *s = p + (size_t)in_ch * i;
    if (out_ch == 3) { /* RGBA to RGB */
      uint8_t r = s[0], g = s[1], b = s[2];
      p[3 * i] = r;
      p[3 * i + 1] = g;
      p[3 * i + 2] = b;
    } else {
      p[i] = in_ch >= 3 ? luma(s[0], s[1], s[2]) : s[0];
    }
  }
}

/* ---- PNG ---- */

typedef struct png_ctx {
  const uint8_t *data;
  size_t size, off;
  int truncated;
  char msg[200];
} png_ctx;

static void png_read_cb(png_structp png, png_bytep out, size_t n) {
  png_ctx *c = png_get_io_ptr(png);
  if (n > c->size - c->off) {
    c->truncated = 1;
    png_error(png, "truncated data");
  }
  memcpy(out, c->data + c->off, n);
  c->off += n;
}

static void png_error_cb(png_structp png, png_const_charp msg) {
  png_ctx *c = png_get_error_ptr(png);
  snprintf(c->msg, sizeof c->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_warning_cb(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

/* Decodes into d->img as w x h x channels (converted). */
static int decode_png(wds__decoder *d, const uint8_t *data, size_t size,
                      int channels, int *w_out, int *h_out, wds__err *e) {
  png_ctx ctx = {.data = data, .size = size};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx,
                                           png_error_cb, png_warning_cb);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  /* written between setjmp and longjmp, read after: volatile */
  volatile int rc = WDS_OK;
  if (!info) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "PNG: out of memory");
    goto cleanup;
  }
  if (setjmp(png_jmpbuf(png))) {
    if (ctx.truncated)
      rc = wds__fail(e, WDS_ERR_TRUNCATED, "PNG: truncated data");
    else
      rc = wds__fail(e, WDS_ERR_FORMAT, "PNG: %s", ctx.msg);
    goto cleanup;
  }
  png_set_read_fn(png, &ctx, png_read_cb);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info);
  png_uint_32 h = png_get_image_height(png, info);
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  if ((uint64_t)w * h > d->max_pixels) {
    rc = wds__fail(e, WDS_ERR_LIMIT,
                   "PNG: %ux%u image is over the limit of %llu pixels",
                   (unsigned)w, (unsigned)h, (unsigned long long)d->max_pixels);
    goto cleanup;
  }
  if (color == PNG_COLOR_TYPE_PALETTE)
    png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8)
    png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16)
    png_set_strip_16(png); /* the high byte, as Pillow unpacks 16-bit */
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int in_ch = png_get_channels(png, info);
  size_t rowbytes = png_get_rowbytes(png, info);
  if (in_ch < 1 || in_ch > 4 || rowbytes != (size_t)w * (size_t)in_ch) {
    rc = wds__fail(e, WDS_ERR_FORMAT, "PNG: unexpected row layout");
    goto cleanup;
  }
  int max_ch = in_ch > channels ? in_ch : channels;
  {
    char how[96];
    snprintf(how, sizeof how, "decoded whole, %d bytes a pixel", max_ch);
    rc = over_budget(d, e, "PNG", w, h,
                     (uint64_t)w * h * (uint64_t)max_ch +
                         (uint64_t)h * sizeof *d->rows,
                     how);
    if (rc != WDS_OK)
      goto cleanup;
  }
  if (grow_bytes(&d->img, &d->img_cap, (size_t)w * h * (size_t)max_ch)) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "PNG: out of memory");
    goto cleanup;
  }
  void *rows = wds__grow(d->rows, &d->rows_cap, h, sizeof *d->rows, 64);
  if (!rows) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "PNG: out of memory");
    goto cleanup;
  }
  d->rows = rows;
  for (png_uint_32 y = 0; y < h; y++)
    d->rows[y] = d->img + (size_t)y * rowbytes;
  png_read_image(png, d->rows);
  convert_pixels(d->img, (size_t)w * h, in_ch, 0, channels);
  *w_out = (int)w;
  *h_out = (int)h;
cleanup:
  if (png)
    png_destroy_read_struct(&png, info ? &info : NULL, NULL);
  return rc;
}

/* ---- JPEG ---- */

/* What a JPEG's marker segments before its first scan say. */
typedef struct jpeg_headers {
  int w, h; /* from the frame header (SOFn) */
  /* The image defines every table its decode reads, so tables an earlier
   * image left in a decompressor cannot change it (see decode_jpeg). Only
   * ever 1 for a sequential Huffman frame (SOF0, SOF1) coded in one scan
   * (the first scan names every component), with the quantization tables
   * of its components and the Huffman tables of its scan defined before
   * the scan, and nothing unusual in the segments before it. 0 is always
   * safe: it costs a new decompressor. */
  int self_contained;
  /* For the memory budget: the frame marker (0xC0..0xCF), its component
   * count and sampling factors (0 where not read), and the components of
   * the first scan (0: not seen). */
  int sof, nf, scan_comps;
  int hs[4], vs[4];
} jpeg_headers;

/* The tables a DQT segment's payload defines (bit t: table t), read as
 * libjpeg reads it; -1 for anything unusual. */
static int dqt_tables(const uint8_t *s, size_t n) {
  int mask = 0;
  while (n > 0) {
    size_t need = 1 + 64 * (size_t)((s[0] >> 4) + 1);
    if ((s[0] >> 4) > 1 || (s[0] & 15) > 3 || n < need)
      return -1;
    mask |= 1 << (s[0] & 15);
    s += need;
    n -= need;
  }
  return mask;
}

/* The tables a DHT segment's payload defines (bit t: DC table t, bit
 * 4 + t: AC table t), read as libjpeg reads it; -1 for anything unusual. */
static int dht_tables(const uint8_t *s, size_t n) {
  int mask = 0;
  while (n > 0) {
    if (n < 17 || (s[0] & ~0x13) != 0)
      return -1;
    size_t count = 0;
    for (int i = 1; i <= 16; i++)
      count += s[i];
    if (count > 256 || count > n - 17)
      return -1;
    mask |= 1 << ((s[0] >> 4) * 4 + (s[0] & 3));
    s += 17 + count;
    n -= 17 + count;
  }
  return mask;
}

/* Walks the marker segments up to the first scan (SOS): the image size from
 * the frame header, checked against TurboJPEG's (2.1 reports success with
 * stale or zero dimensions for some truncated headers), and whether the
 * image is self-contained. Errors only before the frame header; after it,
 * whatever is wrong is left to libjpeg to report. */
static int jpeg_scan_headers(const uint8_t *p, size_t n, jpeg_headers *hd,
                             wds__err *e) {
  unsigned qdef = 0, hdef = 0, qused = 0, hused = 0;
  int nf = 0, sof = 0, odd = 0;
  size_t i = 2;
  hd->self_contained = 0;
  for (;;) {
    while (i < n && p[i] == 0xFF && i + 1 < n && p[i + 1] == 0xFF)
      i++; /* fill bytes */
    if (i + 4 > n)
      return sof ? WDS_OK
                 : wds__fail(e, WDS_ERR_TRUNCATED,
                             "JPEG: data ends before the frame header");
    if (p[i] != 0xFF)
      return sof ? WDS_OK
                 : wds__fail(e, WDS_ERR_FORMAT,
                             "JPEG: no marker at byte %zu (0x%02x)", i, p[i]);
    uint8_t m = p[i + 1];
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
      odd = 1;
      i += 2;
      continue;
    }
    if (m == 0xD9 && !sof)
      return wds__fail(e, WDS_ERR_FORMAT,
                       "JPEG: no frame header before marker 0x%02x", m);
    size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
    const uint8_t *s = p + i + 4;
    size_t sn = len >= 2 && len <= n - i - 2 ? len - 2 : 0;
    if (m == 0xDA || m == 0xD9) {
      if (!sof)
        return wds__fail(e, WDS_ERR_FORMAT,
                         "JPEG: no frame header before marker 0x%02x", m);
      if (m == 0xDA && sn >= 1)
        hd->scan_comps = s[0];
      /* one scan over all nf components, naming defined tables */
      if (m == 0xDA && !odd && sn >= 1 && s[0] == nf &&
          sn == 4 + 2 * (size_t)nf) {
        int ok = 1;
        for (int k = 0; k < nf; k++) {
          unsigned dc = s[2 + 2 * k] >> 4, ac = s[2 + 2 * k] & 15;
          ok = ok && dc <= 3 && ac <= 3;
          hused |= 1u << (dc & 3) | 1u << (4 + (ac & 3));
        }
        hd->self_contained = ok && (qused & ~qdef) == 0 && (hused & ~hdef) == 0;
      }
      return WDS_OK;
    }
    if (len < 2)
      return sof ? WDS_OK
                 : wds__fail(e, WDS_ERR_FORMAT, "JPEG: bad segment length");
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      if (sof)
        return WDS_OK; /* a second frame header: libjpeg's error */
      if (i + 9 > n)
        return wds__fail(e, WDS_ERR_TRUNCATED,
                         "JPEG: data ends in the frame header");
      hd->h = p[i + 5] << 8 | p[i + 6];
      hd->w = p[i + 7] << 8 | p[i + 8];
      sof = m;
      nf = sn >= 6 ? s[5] : 0;
      hd->sof = m;
      if (nf >= 1 && nf <= 4 && sn == 6 + 3 * (size_t)nf) {
        hd->nf = nf;
        for (int k = 0; k < nf; k++) {
          hd->hs[k] = s[7 + 3 * k] >> 4;
          hd->vs[k] = s[7 + 3 * k] & 15;
        }
      }
      if ((m != 0xC0 && m != 0xC1) || nf < 1 || nf > 4 ||
          sn != 6 + 3 * (size_t)nf)
        return WDS_OK;
      for (int k = 0; k < nf; k++) {
        if (s[8 + 3 * k] > 3)
          return WDS_OK;
        qused |= 1u << s[8 + 3 * k];
      }
    } else if (m == 0xDB || m == 0xC4) {
      int t = sn + 2 != len ? -1
              : m == 0xDB   ? dqt_tables(s, sn)
                            : dht_tables(s, sn);
      if (t < 0)
        odd = 1;
      else if (m == 0xDB)
        qdef |= (unsigned)t;
      else
        hdef |= (unsigned)t;
    } else if (!(m == 0xDD || m == 0xFE || (m >= 0xE0 && m <= 0xEF))) {
      odd = 1; /* DRI, COM and APPn are all a table-complete image has */
    }
    if (odd && sof)
      return WDS_OK;
    i += 2 + len;
  }
}

/* tjDecompress2 failed (returned -1). TurboJPEG 2.1 returns -1 for
 * warnings too, and its error code stays "warning" when a fatal error
 * follows a warning; so the decode is first run with TJFLAG_STOPONWARNING
 * (any warning stops it), and only a warning other than the data ending
 * early is retried without the flag, accepted if nothing but that same
 * warning comes back. The retry gets a new decompressor: the stopped run
 * may have read tables from later in the file. */
static int jpeg_decompress(wds__decoder *d, const uint8_t *data, size_t size,
                           uint8_t *dst, int w, int h, int pf, wds__err *e) {
  int pitch = w * tjPixelSize[pf];
  if (tjDecompress2(d->tj, data, (unsigned long)size, dst, w, pitch, h, pf,
                    TJFLAG_STOPONWARNING) == 0)
    return WDS_OK;
  char first[JMSG_LENGTH_MAX_];
  snprintf(first, sizeof first, "%s", tjGetErrorStr2(d->tj));
  if (strstr(first, "Premature end"))
    return wds__fail(e, WDS_ERR_TRUNCATED, "JPEG: %s", first);
  if (tjGetErrorCode(d->tj) != TJERR_WARNING)
    return wds__fail(e, WDS_ERR_FORMAT, "JPEG: %s", first);
  tjDestroy(d->tj);
  if (!(d->tj = tjInitDecompress()))
    return wds__fail(e, WDS_ERR_NOMEM, "JPEG: cannot create a decompressor");
  if (tjDecompress2(d->tj, data, (unsigned long)size, dst, w, pitch, h, pf,
                    0) == 0 ||
      strcmp(tjGetErrorStr2(d->tj), first) == 0)
    return WDS_OK;
  const char *msg = tjGetErrorStr2(d->tj);
  return wds__fail(
      e, strstr(msg, "Premature end") ? WDS_ERR_TRUNCATED : WDS_ERR_FORMAT,
      "JPEG: %s", msg);
}

/* The source span of p, per axis, at decoded size dec / src: still at
 * least as many pixels as the output? */
static int span_fits(const wds__crop_plan *p, int src_w, int src_h, int dec_w,
                     int dec_h, int out_w, int out_h) {
  double sw = (p->x1 - p->x0) * dec_w / src_w * out_w / p->total_w;
  double sh = (p->y1 - p->y0) * dec_h / src_h * out_h / p->total_h;
  return sw >= out_w - 1e-9 && sh >= out_h - 1e-9;
}

/* The bytes of DCT coefficients libjpeg keeps for the whole image when it
 * decodes from a buffer of them (a progressive frame, or a sequential one
 * whose first scan does not hold every component: several scans), else 0.
 * Per component, its blocks rounded up to whole MCUs (jdcoefct.c's
 * virtual arrays), 64 coefficients of 2 bytes each; components whose
 * sampling factors were not read count at full size (and 3 of them when
 * the count was not read either). */
static uint64_t jpeg_coef_bytes(const jpeg_headers *hd, uint64_t w,
                                uint64_t h) {
  int sequential = hd->sof == 0xC0 || hd->sof == 0xC1 || hd->sof == 0xC3 ||
                   hd->sof == 0xC5 || hd->sof == 0xC9 || hd->sof == 0xCB ||
                   hd->sof == 0xCD;
  int progressive =
      hd->sof == 0xC2 || hd->sof == 0xC6 || hd->sof == 0xCA || hd->sof == 0xCE;
  if (sequential && hd->nf > 0 && hd->scan_comps == hd->nf)
    return 0;
  if (!sequential && !progressive && hd->sof != 0)
    return 0; /* not a frame libjpeg decodes: it fails, nothing buffered */
  int hmax = 1, vmax = 1, known = hd->nf > 0;
  for (int k = 0; k < hd->nf; k++) {
    if (hd->hs[k] < 1 || hd->hs[k] > 4 || hd->vs[k] < 1 || hd->vs[k] > 4)
      known = 0;
    if (hd->hs[k] > hmax)
      hmax = hd->hs[k];
    if (hd->vs[k] > vmax)
      vmax = hd->vs[k];
  }
  uint64_t total = 0;
  int n = hd->nf > 0 ? hd->nf : 3;
  for (int k = 0; k < n; k++) {
    uint64_t hk = known ? (uint64_t)hd->hs[k] : 1,
             vk = known ? (uint64_t)hd->vs[k] : 1;
    uint64_t hm = known ? (uint64_t)hmax : 1, vm = known ? (uint64_t)vmax : 1;
    uint64_t bw = (w * hk + hm * 8 - 1) / (hm * 8);
    uint64_t bh = (h * vk + vm * 8 - 1) / (vm * 8);
    bw = (bw + hk - 1) / hk * hk;
    bh = (bh + vk - 1) / vk * vk;
    total += bw * bh * 64 * 2;
  }
  return total;
}

void (*wds__image_plan_hook)(const uint8_t *data, size_t size, int src_w,
                             int src_h, const wds__crop_plan *plan);

/* The crop plan of a w x h source for o: center, or random with o's
 * augmentation (or the defaults). */
static void plan_crop(const wds__image_opts *o, int w, int h,
                      wds__crop_plan *plan) {
  if (o->crop != WDS_CROP_RANDOM)
    wds__plan_center(w, h, o->width, o->height, plan);
  else if (o->aug)
    wds__plan_rrc(w, h, o->width, o->height, o->scale_min, o->scale_max,
                  o->aug->ratio_min, o->aug->ratio_max, o->aug->flip_prob,
                  o->rng_key, plan);
  else
    wds__plan_random(w, h, o->width, o->height, o->scale_min, o->scale_max,
                     o->rng_key, plan);
}

/* A JPEG's header through d->tj, its size checked, and the crop plan in
 * source pixels: the one planner of both JPEG paths, the CPU decode
 * (jpeg_read) and the rows planned for a GPU (wds__image_plan_jpeg). */
static int jpeg_plan(wds__decoder *d, const uint8_t *data, size_t size,
                     const jpeg_headers *hd, const wds__image_opts *o,
                     wds__crop_plan *plan, int *w_out, int *h_out, int *cs_out,
                     wds__err *e) {
  int w = 0, h = 0, subsamp, cs;
  if (tjDecompressHeader3(d->tj, data, (unsigned long)size, &w, &h, &subsamp,
                          &cs) != 0)
    return wds__fail(e, WDS_ERR_FORMAT, "JPEG: %s", tjGetErrorStr2(d->tj));
  if (w != hd->w || h != hd->h || w <= 0 || h <= 0)
    return wds__fail(e, WDS_ERR_FORMAT, "JPEG: bad frame header (%dx%d)", hd->w,
                     hd->h);
  if ((uint64_t)w * (uint64_t)h > d->max_pixels)
    return wds__fail(e, WDS_ERR_LIMIT,
                     "JPEG: %dx%d image is over the limit of %llu pixels", w, h,
                     (unsigned long long)d->max_pixels);
  plan_crop(o, w, h, plan);
  if (wds__image_plan_hook)
    wds__image_plan_hook(data, size, w, h, plan);
  *w_out = w;
  *h_out = h;
  *cs_out = cs;
  return WDS_OK;
}

/* Decodes with d->tj into d->img at the smallest scale that serves o. */
static int jpeg_read(wds__decoder *d, const uint8_t *data, size_t size,
                     const jpeg_headers *hd, const wds__image_opts *o,
                     wds__crop_plan *plan, int *w_out, int *h_out,
                     wds__err *e) {
  int w = 0, h = 0, cs, rc;
  if ((rc = jpeg_plan(d, data, size, hd, o, plan, &w, &h, &cs, e)) != WDS_OK)
    return rc;

  /* the smallest scale (factors <= 1) that leaves the span large enough */
  int nsf = 0;
  tjscalingfactor *sf = tjGetScalingFactors(&nsf);
  int dec_w = w, dec_h = h;
  for (int i = 0; sf && i < nsf; i++) {
    if (sf[i].num > sf[i].denom)
      continue;
    int sw = TJSCALED(w, sf[i]), sh = TJSCALED(h, sf[i]);
    if ((int64_t)sw * sh < (int64_t)dec_w * dec_h &&
        span_fits(plan, w, h, sw, sh, o->width, o->height)) {
      dec_w = sw;
      dec_h = sh;
    }
  }
  int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  int pf = cmyk ? TJPF_CMYK : o->channels == 1 ? TJPF_GRAY : TJPF_RGB;
  int ps = tjPixelSize[pf];
  uint64_t coef = jpeg_coef_bytes(hd, (uint64_t)w, (uint64_t)h);
  char how[160];
  snprintf(how, sizeof how, "decoded at %dx%d, %d bytes a pixel%s", dec_w,
           dec_h, ps,
           coef ? ", with the whole image's DCT coefficients buffered "
                  "(progressive or multi-scan)"
                : "");
  if ((rc = over_budget(d, e, "JPEG", (uint64_t)w, (uint64_t)h,
                        (uint64_t)dec_w * (uint64_t)dec_h * (uint64_t)ps + coef,
                        how)) != WDS_OK)
    return rc;
  if (grow_bytes(&d->img, &d->img_cap, (size_t)dec_w * dec_h * (size_t)ps))
    return wds__fail(e, WDS_ERR_NOMEM, "JPEG: out of memory");
  if ((rc = jpeg_decompress(d, data, size, d->img, dec_w, dec_h, pf, e)) !=
      WDS_OK)
    return rc;
  if (cmyk)
    convert_pixels(d->img, (size_t)dec_w * dec_h, 4, 1, o->channels);
  /* the plan in decoded pixels */
  double fx = (double)dec_w / w, fy = (double)dec_h / h;
  plan->x0 *= fx;
  plan->x1 *= fx;
  plan->y0 *= fy;
  plan->y1 *= fy;
  *w_out = dec_w;
  *h_out = dec_h;
  return WDS_OK;
}

static void jpeg_drop(wds__decoder *d) {
  if (d->tj)
    tjDestroy(d->tj);
  d->tj = NULL;
}

/* The decompressor is kept from image to image, and what it keeps must
 * never show in an image: a decoder decodes every image as a new one
 * would, whatever it decoded before (a worker's images depend on the
 * worker count; `wds verify` uses a fresh-from-start checker).
 * - After a failure it is dropped. TurboJPEG 2.1's tjDecompressHeader3
 *   returns from a libjpeg error without aborting the decompression, so
 *   libjpeg stays mid-header and reads the next image's markers as the
 *   rest of the broken one's ("bad frame header", "two SOF markers" on
 *   good JPEGs after a truncated one); tjDecompress2 aborts, but
 *   keeps the tables the broken image defined. A new one costs ~0.2 us,
 *   and only failures pay it.
 * - libjpeg keeps quantization and Huffman tables from image to image (for
 *   abbreviated datastreams): an image that uses a table it does not define
 *   would read an earlier image's instead of failing (no DQT) or getting
 *   the standard ones (no DHT). Only an image known to define all it uses
 *   (jpeg_headers.self_contained: nearly every baseline JPEG) keeps the
 *   decompressor; others (progressive, multi-scan, table-less) get a new
 *   one. */
/* What decoding and planning a JPEG both start with: its headers scanned
 * into *hd, a decompressor ready (a new one after a JPEG whose tables are
 * not its own). */
static int jpeg_begin(wds__decoder *d, const uint8_t *data, size_t size,
                      jpeg_headers *hd, wds__err *e) {
  memset(hd, 0, sizeof *hd);
  int rc;
  if (size > ULONG_MAX)
    return wds__fail(e, WDS_ERR_LIMIT, "JPEG: too large");
  if ((rc = jpeg_scan_headers(data, size, hd, e)) != WDS_OK)
    return rc;
  if (!hd->self_contained)
    jpeg_drop(d);
  if (!d->tj && !(d->tj = tjInitDecompress()))
    return wds__fail(e, WDS_ERR_NOMEM, "JPEG: cannot create a decompressor");
  return WDS_OK;
}

static int decode_jpeg(wds__decoder *d, const uint8_t *data, size_t size,
                       const wds__image_opts *o, wds__crop_plan *plan,
                       int *w_out, int *h_out, wds__err *e) {
  jpeg_headers hd;
  int rc = jpeg_begin(d, data, size, &hd, e);
  if (rc != WDS_OK)
    return rc;
  if ((rc = jpeg_read(d, data, size, &hd, o, plan, w_out, h_out, e)) != WDS_OK)
    jpeg_drop(d);
  return rc;
}

int wds__image_plan_jpeg(wds__decoder *d, const uint8_t *data, size_t size,
                         const wds__image_opts *o, int *src_w, int *src_h,
                         int *cmyk, wds__crop_plan *plan, wds__err *e) {
  jpeg_headers hd;
  int rc, cs = 0;
  if (size <= ULONG_MAX &&
      !(size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF))
    return wds__fail(e, WDS_ERR_FORMAT, "not a JPEG (%zu bytes)", size);
  if ((rc = jpeg_begin(d, data, size, &hd, e)) != WDS_OK)
    return rc;
  if ((rc = jpeg_plan(d, data, size, &hd, o, plan, src_w, src_h, &cs, e)) !=
      WDS_OK)
    jpeg_drop(d);
  *cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  return rc;
}

/* The output size, channels and random-crop scales an image decode
 * accepts. */
static int check_image_opts(const wds__image_opts *o, wds__err *e) {
  if (o->width <= 0 || o->height <= 0 ||
      (o->channels != 1 && o->channels != 3) ||
      (uint64_t)o->width * (uint64_t)o->height > WDS__MAX_PIXELS)
    return wds__fail(e, WDS_ERR_INVALID, "image: bad output %dx%dx%d", o->width,
                     o->height, o->channels);
  if (o->crop == WDS_CROP_RANDOM &&
      !(o->scale_min > 0 && o->scale_min <= o->scale_max && o->scale_max <= 1))
    return wds__fail(e, WDS_ERR_INVALID, "image: bad crop scale [%g, %g]",
                     o->scale_min, o->scale_max);
  return o->aug ? wds__augment_check(o->aug, o->channels, e) : WDS_OK;
}

int wds__decode_jpeg_scaled(wds__decoder *d, const uint8_t *data, size_t size,
                            const wds__image_opts *o, int *w, int *h,
                            wds__err *e) {
  wds__crop_plan plan;
  int rc = check_image_opts(o, e);
  if (rc != WDS_OK)
    return rc;
  if (!(size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF))
    return wds__fail(e, WDS_ERR_FORMAT, "not a JPEG (%zu bytes)", size);
  return decode_jpeg(d, data, size, o, &plan, w, h, e);
}

/* ---- images ---- */

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* Everything of wds__decode_image up to the resampling: the image decoded
 * into d->img (*w x *h), d->tx and d->ty prepared, [*first, *last) the
 * source rows the vertical taps read. */
static int image_prepare(wds__decoder *d, const uint8_t *data, size_t size,
                         const wds__image_opts *o, int *w, int *h, int *first,
                         int *last, wds__err *e) {
  int rc = check_image_opts(o, e);
  if (rc != WDS_OK)
    return rc;
  wds__crop_plan plan;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    rc = decode_jpeg(d, data, size, o, &plan, w, h, e);
  } else if (size >= 8 && memcmp(data, png_sig, 8) == 0) {
    rc = decode_png(d, data, size, o->channels, w, h, e);
    if (rc == WDS_OK)
      plan_crop(o, *w, *h, &plan);
  } else {
    char hex[3 * 8 + 1] = "";
    int at = 0;
    for (size_t i = 0; i < size && i < 8; i++)
      at += snprintf(hex + at, sizeof hex - (size_t)at, "%s%02x", i ? " " : "",
                     data[i]);
    return wds__fail(e, WDS_ERR_FORMAT,
                     "not a JPEG or PNG image (%zu bytes, first bytes %s)",
                     size, size ? hex : "none");
  }
  if (rc != WDS_OK)
    return rc;
  if (wds__taps_prepare(&d->tx, *w, plan.x0, plan.x1, plan.total_w, plan.off_x,
                        o->width, plan.flip) ||
      wds__taps_prepare(&d->ty, *h, plan.y0, plan.y1, plan.total_h, plan.off_y,
                        o->height, 0))
    return wds__fail(e, WDS_ERR_NOMEM, "image: out of memory");
  wds__taps_span(&d->ty, first, last);
  return WDS_OK;
}

int wds__decode_image(wds__decoder *d, const uint8_t *data, size_t size,
                      const wds__image_opts *o, uint8_t *out, wds__err *e) {
  int w = 0, h = 0, first, last;
  int rc = image_prepare(d, data, size, o, &w, &h, &first, &last, e);
  if (rc != WDS_OK)
    return rc;
  size_t row = (size_t)o->width * (size_t)o->channels;
  if (grow_bytes(&d->tmp, &d->tmp_cap, (size_t)(last - first) * row + 1))
    return wds__fail(e, WDS_ERR_NOMEM, "image: out of memory");
  wds__resample(d->img, (size_t)w * (size_t)o->channels, o->channels, &d->tx,
                &d->ty, d->tmp, out);
  if (o->aug && wds__jitter_active(&o->aug->jitter)) {
    wds__jitter_params jp;
    wds__jitter_draw(&o->aug->jitter, o->rng_key, &jp);
    wds__jitter_apply(out, (size_t)o->width * (size_t)o->height, o->channels,
                      &jp);
  }
  return WDS_OK;
}

/* ---- an augmented image: pixels in the block, the output written later
 *
 * With a jitter or a float dtype the worker runs both resampling passes
 * into the block and the jitter over the result (the contrast needs the
 * whole image's mean), and the slot copy converts the pixels into the row:
 * normalized float CHW, or the bytes as they are. */
typedef struct image_aug {
  int w, h, channels;
  wds_image_dtype dtype;
  double mean[3], std[3];
  uint8_t *px; /* into this block: w * h * channels bytes, HWC */
} image_aug;

#define IMAGE_AUG_HEAD ((sizeof(image_aug) + 15) & ~(size_t)15)

static void image_aug_write(const void *block, void *dst) {
  const image_aug *a = block;
  if (a->dtype == WDS_IMAGE_UINT8)
    memcpy(dst, a->px, (size_t)a->w * (size_t)a->h * (size_t)a->channels);
  else
    wds__normalize_chw(a->px, a->w, a->h, a->channels, a->mean, a->std,
                       a->dtype == WDS_IMAGE_FLOAT16, dst);
}

static int decode_image_aug(wds__decoder *d, const uint8_t *data, size_t size,
                            const wds__image_opts *o,
                            void *(*alloc)(void *ctx, size_t size_bytes),
                            void *alloc_ctx, void **block,
                            void (**write)(const void *block, void *dst),
                            wds__err *e) {
  size_t n = (size_t)o->width * (size_t)o->height * (size_t)o->channels;
  image_aug *a = alloc(alloc_ctx, IMAGE_AUG_HEAD + n);
  if (!a)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  *block = a;
  a->w = o->width;
  a->h = o->height;
  a->channels = o->channels;
  a->dtype = o->aug->dtype;
  for (int c = 0; c < 3; c++) {
    a->mean[c] = o->aug->mean[c];
    a->std[c] = o->aug->std[c];
  }
  a->px = (uint8_t *)a + IMAGE_AUG_HEAD;
  int rc = wds__decode_image(d, data, size, o, a->px, e);
  if (rc == WDS_OK)
    *write = image_aug_write;
  return rc;
}

/* ---- an image whose last pass is deferred ----
 *
 * The loader's image rows: the worker decodes and runs the horizontal pass
 * into a block (this header, a copy of the vertical taps, the intermediate
 * rows); the slot copy then runs the vertical pass straight into the
 * batch's row (wds__field_value.write), so the output is written once, in
 * place, instead of into a block that is then copied. Everything that can
 * fail (the decode, the taps, the block) happens in the worker. */
typedef struct image_rows {
  wds__taps ty; /* views into this block */
  uint8_t *tmp; /* into this block: (last - first) rows of row bytes */
  size_t row;   /* bytes per output row */
  int first;    /* the source row of tmp's first */
  int isa;      /* the kernels (wds__resize_isa_best) */
} image_rows;

#define IMAGE_ROWS_HEAD ((sizeof(image_rows) + 15) & ~(size_t)15)

static void image_rows_write(const void *block, void *dst) {
  const image_rows *r = block;
  wds__resample_cols_isa(r->isa, r->tmp, r->row, r->first, &r->ty, dst);
}

int wds__decode_image_rows(wds__decoder *d, const uint8_t *data, size_t size,
                           const wds__image_opts *o,
                           void *(*alloc)(void *ctx, size_t size_bytes),
                           void *alloc_ctx, void **block,
                           void (**write)(const void *block, void *dst),
                           wds__err *e) {
  int w = 0, h = 0, first, last;
  *block = NULL;
  if (o->aug &&
      (wds__jitter_active(&o->aug->jitter) || o->aug->dtype != WDS_IMAGE_UINT8))
    return decode_image_aug(d, data, size, o, alloc, alloc_ctx, block, write,
                            e);
  int rc = image_prepare(d, data, size, o, &w, &h, &first, &last, e);
  if (rc != WDS_OK)
    return rc;
  size_t row = (size_t)o->width * (size_t)o->channels;
  size_t taps = (wds__taps_copy_size(&d->ty) + 15) & ~(size_t)15;
  image_rows *r =
      alloc(alloc_ctx, IMAGE_ROWS_HEAD + taps + (size_t)(last - first) * row);
  if (!r)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  *block = r;
  uint8_t *mem = (uint8_t *)r + IMAGE_ROWS_HEAD;
  wds__taps_copy(&d->ty, mem, &r->ty);
  r->tmp = mem + taps;
  r->row = row;
  r->first = first;
  r->isa = wds__resize_isa_best();
  wds__resample_rows_isa(r->isa, d->img, (size_t)w * (size_t)o->channels,
                         o->channels, &d->tx, first, last, r->tmp);
  *write = image_rows_write;
  return WDS_OK;
}

/* ---- the image decoder's row in the table (decoders.h) ---- */

/* wds_decode_check decodes images into a CHECK_SIDE x CHECK_SIDE RGB
 * center crop: the decoders read every byte of the entropy-coded data
 * whatever the output size (a JPEG at its smallest DCT scale, a PNG fully
 * with its CRCs), so truncation and corrupt data are found while
 * resampling stays negligible. */
#define CHECK_SIDE 16

int wds__image_check_opts(const wds__field_opts *o, wds__err *e) {
  if ((o->channels != 1 && o->channels != 3) || o->width < 1 || o->height < 1 ||
      o->width > 65536 || o->height > 65536 ||
      (uint64_t)o->width * (uint64_t)o->height > (1u << 28))
    return wds__fail(e, WDS_ERR_INVALID,
                     "image %dx%d with %d channels (sizes 1..65536, 1 or 3 "
                     "channels)",
                     o->width, o->height, o->channels);
  return WDS_OK;
}

void wds__image_row_shape(const wds__field_opts *o, wds__row_shape *out) {
  memset(out, 0, sizeof *out);
  out->ndim = 3;
  if (o->aug.dtype == WDS_IMAGE_UINT8) { /* HWC */
    out->dtype = WDS_DTYPE_U8;
    out->shape[0] = o->height;
    out->shape[1] = o->width;
    out->shape[2] = o->channels;
  } else { /* CHW, normalized */
    out->dtype =
        o->aug.dtype == WDS_IMAGE_FLOAT16 ? WDS_DTYPE_F16 : WDS_DTYPE_F32;
    out->shape[0] = o->channels;
    out->shape[1] = o->height;
    out->shape[2] = o->width;
  }
  out->row_bytes = (size_t)o->width * (size_t)o->height * (size_t)o->channels *
                   wds_dtype_size(out->dtype);
}

int wds__image_decode(const wds__field_opts *o, const wds__decode_call *call,
                      const uint8_t *data, size_t size, wds__field_value *out,
                      wds__err *e) {
  wds__row_shape rs;
  wds__image_row_shape(o, &rs);
  out->dtype = rs.dtype;
  out->size = rs.row_bytes;
  out->ndim = rs.ndim;
  memcpy(out->shape, rs.shape, sizeof out->shape);
  wds__image_opts io = {o->width,     o->height,    o->channels,   o->crop,
                        o->scale_min, o->scale_max, call->rng_key, &o->aug};
  int rc = wds__decode_image_rows(call->dec, data, size, &io, call->alloc,
                                  call->alloc_ctx, &out->data, &out->write, e);
  out->owned = out->data != NULL;
  return rc;
}

int wds__image_check(wds__decoder *dec, const uint8_t *data, size_t size,
                     wds__err *e) {
  uint8_t out[CHECK_SIDE * CHECK_SIDE * 3];
  wds__image_opts o;
  memset(&o, 0, sizeof o);
  o.width = o.height = CHECK_SIDE;
  o.channels = 3;
  o.crop = WDS_CROP_CENTER;
  return wds__decode_image(dec, data, size, &o, out, e);
}
