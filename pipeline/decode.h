/* decode.h — field decoders used by the loader's worker threads. Internal.
 *
 * Every function is reentrant; per-thread scratch (TurboJPEG handle, row
 * buffers) lives in a wds__decoder that one thread owns. What a decoder
 * decoded before never shows in a result: after any failure, and whatever
 * the earlier inputs were, it decodes an input exactly as a new decoder
 * would (the loader's rows must not depend on which worker decoded what,
 * nor `wds verify` on the order of fields). Failures return a
 * negative status with a message in the wds__err (what was wrong: "not a
 * JPEG", "PNG: CRC error", "npy: unsupported dtype '<c8'"); the caller adds
 * the sample, shard and field. Nothing here prints or aborts. */
#ifndef WDS_PIPELINE_DECODE_H
#define WDS_PIPELINE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "pipeline/augment.h"
#include "wds/decode.h"

typedef struct wds__decoder wds__decoder;

wds__decoder *wds__decoder_new(void);
void wds__decoder_free(wds__decoder *d); /* NULL is a no-op */

/* Largest source image accepted, in pixels (width * height, checked from
 * the header before anything is allocated; larger is WDS_ERR_LIMIT).
 * Default and 0: 2^28. The fuzz target lowers it. */
void wds__decoder_set_max_pixels(wds__decoder *d, uint64_t max_pixels);

/* The memory one image's decode may take, in bytes (the image memory
 * budget, wds_loader_config.image_memory_limit): the decoded image (a JPEG
 * at the DCT scale its output needs, a PNG whole, at the channels it is
 * decoded into) and, for a JPEG whose decoder buffers the whole image's
 * DCT coefficients (progressive, or several scans), those at 2 bytes each.
 * Checked from the headers before the decode allocates; over it is
 * WDS_ERR_LIMIT naming the image's size, what it needs and the limit.
 * 0: WDS_IMAGE_MEMORY_LIMIT_DEFAULT. */
void wds__decoder_set_memory_limit(wds__decoder *d, uint64_t bytes);

/* Image output: exactly width x height x channels uint8 (HWC, RGB or L). */
typedef struct wds__image_opts {
  int width, height;
  int channels; /* 3 (RGB) or 1 (L) */
  wds_crop crop;
  /* WDS_CROP_RANDOM: torchvision RandomResizedCrop semantics — area scale in
   * [scale_min, scale_max], aspect ratio log-uniform in [3/4, 4/3], 10
   * attempts then a center crop fallback — and a horizontal flip with
   * probability 1/2. All draws come from rng_key (a counter-based key), so
   * the result is a pure function of (data, opts). */
  double scale_min, scale_max;
  uint64_t rng_key;
  /* NULL: the defaults (augment.h). Else its crop ratio and flip
   * probability replace RANDOM's, and wds__decode_image and
   * wds__decode_image_rows apply its jitter (drawn from rng_key) to the
   * resized pixels; wds__decode_image_rows also writes its dtype (float
   * CHW, normalized), while wds__decode_image's output stays uint8 HWC. */
  const struct wds__augment *aug;
} wds__image_opts;

/* Decodes a JPEG (TurboJPEG; decoded at the smallest DCT scale M/8 that
 * still leaves the cropped span at least as large as the output, so never
 * upsampled because of it) or PNG (libpng; 16-bit reduced to 8, palette and
 * gray expanded, alpha dropped, all interlace modes) chosen by the first
 * bytes, then resizes and crops into out (width * height * channels bytes).
 * CENTER: resize so the shorter side equals the output's matching side
 * (keeping the aspect ratio), center crop: torchvision's Resize(size) +
 * CenterCrop(size) — the other side int(out * long / short), offsets
 * round((resized - out) / 2) with Python's ties-to-even. The resize filters
 * like Pillow's Image.resize(BILINEAR) with its antialiasing when shrinking
 * (the same fixed-point arithmetic: a PNG gives Pillow's bytes).
 * RANDOM: the crop box is resized to the output (Pillow's resize with
 * box=, filter support reaching outside the box where the image has
 * pixels).
 * Color: alpha is dropped (Pillow's convert, not composited); L from RGB is
 * Pillow's L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, except for YCbCr
 * JPEGs, whose Y plane is decoded directly (within 1-2 of it). CMYK JPEGs
 * are read with Adobe's inverted convention, as Pillow does. 16-bit PNG
 * samples keep their high byte.
 * Errors: WDS_ERR_FORMAT (not an image, corrupt data), WDS_ERR_TRUNCATED
 * (data ends early), WDS_ERR_LIMIT (too many pixels), WDS_ERR_INVALID
 * (bad opts), WDS_ERR_NOMEM. */
int wds__decode_image(wds__decoder *d, const uint8_t *data, size_t size,
                      const wds__image_opts *opts, uint8_t *out, wds__err *e);

/* wds__decode_image with its last pass deferred (the loader's image rows):
 * everything that can fail — the decode, the crop plan, the taps, a block
 * from alloc — and the horizontal pass happen here, into *block (from
 * alloc; set, and the caller's to free, whenever alloc gave it, even on a
 * failure); later (*write)(*block, out) writes the output's width * height
 * * channels bytes at out, the same bytes wds__decode_image gives. *write
 * only reads the block and cannot fail; it may run on any thread, and
 * several at once on different blocks. */
int wds__decode_image_rows(wds__decoder *d, const uint8_t *data, size_t size,
                           const wds__image_opts *opts,
                           void *(*alloc)(void *ctx, size_t size_bytes),
                           void *alloc_ctx, void **block,
                           void (**write)(const void *block, void *dst),
                           wds__err *e);

/* The first steps of wds__decode_image on a JPEG alone: the header, the
 * crop plan and TurboJPEG's decode at the DCT scale wds__decode_image
 * chooses for opts, into the decoder's own buffer; no resampling. *w, *h:
 * the decoded size (bench/jpeg_baseline.c times TurboJPEG at that size). */
int wds__decode_jpeg_scaled(wds__decoder *d, const uint8_t *data, size_t size,
                            const wds__image_opts *opts, int *w, int *h,
                            wds__err *e);

/* The crop plan of a JPEG without decoding it, for a row decoded later on a
 * GPU (pipeline/gpu_plan.h): the header (TurboJPEG's, checked as
 * wds__decode_image checks it: size, frame header, the pixel limit) and the
 * plan of the same planner, from the same opts (rng_key included), that
 * wds__decode_image uses, in source pixels. *cmyk: the image is CMYK or
 * YCCK. Errors as wds__decode_image's for a bad header. */
struct wds__crop_plan;
int wds__image_plan_jpeg(wds__decoder *d, const uint8_t *data, size_t size,
                         const wds__image_opts *o, int *src_w, int *src_h,
                         int *cmyk, struct wds__crop_plan *plan, wds__err *e);

/* Tests only: when set, called with every JPEG's plan in source pixels as
 * it is made (by the CPU decode and by wds__image_plan_jpeg), from the
 * thread that plans. */
extern void (*wds__image_plan_hook)(const uint8_t *data, size_t size, int src_w,
                                    int src_h,
                                    const struct wds__crop_plan *plan);

/* Parsed .npy (format versions 1, 2 and 3). */
typedef struct wds__npy {
  wds_dtype dtype;
  int ndim; /* 0..7 */
  int64_t shape[7];
  size_t count;        /* elements */
  const uint8_t *data; /* into the input buffer */
  size_t data_bytes;   /* count * dtype size */
  int swap;            /* stored byte order differs from the host's */
  int fortran_order;
} wds__npy;

/* Parses the header and checks the data size. Supported dtypes: b1, i1, u1,
 * i2, u2, i4, u4, i8, u8, f2, f4, f8 in either byte order ('<', '>', '|',
 * '='). Anything else is WDS_ERR_FORMAT naming the dtype. */
int wds__npy_parse(const uint8_t *data, size_t size, wds__npy *out,
                   wds__err *e);

/* Copies the array to dst (data_bytes bytes) in host byte order and C
 * order (Fortran-order arrays are transposed). */
void wds__npy_copy(const wds__npy *a, void *dst);

/* Decimal integer text, optional sign, ASCII whitespace around it
 * (Python's int(text) for ASCII input, underscores excepted). */
int wds__decode_int(const uint8_t *data, size_t size, int64_t *out,
                    wds__err *e);

#endif
