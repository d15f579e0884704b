/* gpu_plan.h — image rows planned on the CPU and decoded on a GPU
 * (wds_loader_config.jpeg_decode = WDS_JPEG_DECODE_GPU). Internal.
 *
 * For such a field the worker does not decode a JPEG: it reads its header,
 * makes the crop plan with the planner and the RNG key of the CPU path
 * (wds__image_plan_jpeg: same function, same key, so the same crop and flip)
 * and writes a row of a VARIABLE (bytes) field: a wds__gpu_row header and
 * then the JPEG's bytes. An image that is not a JPEG (a PNG in a "jpg;png"
 * field) is decoded on the CPU as before and its row holds the header and
 * the finished pixels (out_h x out_w x channels). The GPU decoder
 * (loader/jpeg_gpu.h) turns the rows into the NHWC uint8 batch the CPU path
 * would give. Rows are laid end to end in the slot: read a header with
 * memcpy (it may be unaligned). */
#ifndef WDS_PIPELINE_GPU_PLAN_H
#define WDS_PIPELINE_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/decoders.h"

#define WDS__GPU_ROW_MAGIC 0x314a4757u /* "WGJ1" little-endian */

enum {
  WDS__GPU_ROW_JPEG = 1,  /* the payload is the JPEG, to decode */
  WDS__GPU_ROW_PIXELS = 2 /* the payload is the decoded row (CPU) */
};

typedef struct wds__gpu_row {
  uint32_t magic; /* WDS__GPU_ROW_MAGIC */
  uint32_t kind;
  int32_t src_w, src_h; /* JPEG: the source size from its header */
  int32_t out_w, out_h, channels;
  int32_t crop; /* wds_crop */
  /* JPEG: the plan (pipeline/resize.h wds__crop_plan), source pixels: a
   * resize of [x0, x1) x [y0, y1) to total_w x total_h, of which outputs
   * off_x .. off_x + out_w - 1 (and the same in y) are kept, reversed in x
   * when flip. */
  double x0, x1, y0, y1;
  int32_t total_w, total_h, off_x, off_y;
  int32_t flip, cmyk;
  double scale_min, scale_max; /* the field's random-crop range */
  uint64_t rng_key;            /* the key the CPU path draws from */
  uint64_t payload;            /* bytes after the header */
  double ratio_min, ratio_max; /* the field's random-crop ratio range */
  double flip_prob;            /* and flip probability */
} wds__gpu_row;

#define WDS__GPU_ROW_HEAD sizeof(wds__gpu_row)

/* The decoder row the loader gives a GPU-decoded image field: VARIABLE
 * rows as above. Not in the table (no name, no extension): the loader
 * swaps it in for the image decoder (fields.c). */
extern const wds__decoder_def wds__image_gpu_plan_def;

/* The header of row bytes [p, p + n): WDS_OK, or WDS_ERR_FORMAT when it is
 * not a row of this layout (too short, bad magic or kind, payload size). */
int wds__gpu_row_read(const uint8_t *p, size_t n, wds__gpu_row *out,
                      wds__err *e);

#endif
