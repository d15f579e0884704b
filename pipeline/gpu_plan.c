/* gpu_plan.c — image rows planned on the CPU for a GPU decode
 * (gpu_plan.h). */
#include "pipeline/gpu_plan.h"

#include <string.h>

#include "pipeline/decode.h"
#include "pipeline/resize.h"

_Static_assert(sizeof(wds__gpu_row) % 16 == 0, "row header size");

static int is_jpeg(const uint8_t *p, size_t n) {
  return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

static void row_shape(const wds__field_opts *o, wds__row_shape *out) {
  (void)o;
  memset(out, 0, sizeof *out);
  out->dtype = WDS_DTYPE_BYTES;
  out->ndim = 0;
}

static int gpu_plan_decode(const wds__field_opts *o,
                           const wds__decode_call *call, const uint8_t *data,
                           size_t size, wds__field_value *out, wds__err *e) {
  wds__image_opts io = {o->width,     o->height,    o->channels,   o->crop,
                        o->scale_min, o->scale_max, call->rng_key, &o->aug};
  wds__gpu_row h;
  memset(&h, 0, sizeof h);
  h.magic = WDS__GPU_ROW_MAGIC;
  h.out_w = o->width;
  h.out_h = o->height;
  h.channels = o->channels;
  h.crop = (int32_t)o->crop;
  h.scale_min = o->scale_min;
  h.scale_max = o->scale_max;
  h.rng_key = call->rng_key;
  h.ratio_min = o->aug.ratio_min;
  h.ratio_max = o->aug.ratio_max;
  h.flip_prob = o->aug.flip_prob;
  size_t out_bytes = (size_t)o->width * (size_t)o->height * (size_t)o->channels;
  uint8_t *blk;
  int rc;
  out->dtype = WDS_DTYPE_BYTES;
  if (is_jpeg(data, size)) {
    wds__crop_plan p;
    int w = 0, hh = 0, cmyk = 0;
    rc =
        wds__image_plan_jpeg(call->dec, data, size, &io, &w, &hh, &cmyk, &p, e);
    if (rc != WDS_OK)
      return rc;
    if (!(blk = call->alloc(call->alloc_ctx, WDS__GPU_ROW_HEAD + size)))
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    h.kind = WDS__GPU_ROW_JPEG;
    h.src_w = w;
    h.src_h = hh;
    h.x0 = p.x0;
    h.x1 = p.x1;
    h.y0 = p.y0;
    h.y1 = p.y1;
    h.total_w = p.total_w;
    h.total_h = p.total_h;
    h.off_x = p.off_x;
    h.off_y = p.off_y;
    h.flip = p.flip;
    h.cmyk = cmyk;
    h.payload = size;
    memcpy(blk + WDS__GPU_ROW_HEAD, data, size);
  } else {
    if (!(blk = call->alloc(call->alloc_ctx, WDS__GPU_ROW_HEAD + out_bytes)))
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    out->data = blk;
    out->owned = 1;
    rc = wds__decode_image(call->dec, data, size, &io, blk + WDS__GPU_ROW_HEAD,
                           e);
    if (rc != WDS_OK)
      return rc;
    h.kind = WDS__GPU_ROW_PIXELS;
    h.payload = out_bytes;
  }
  memcpy(blk, &h, sizeof h);
  out->data = blk;
  out->owned = 1;
  out->size = WDS__GPU_ROW_HEAD + (size_t)h.payload;
  out->ndim = 0;
  return WDS_OK;
}

const wds__decoder_def wds__image_gpu_plan_def = {.id = WDS_DECODE_IMAGE,
                                                  .name = "image",
                                                  .layout = WDS__ROW_VARIABLE,
                                                  .image_opts = 1,
                                                  .random = 1,
                                                  .check_opts =
                                                      wds__image_check_opts,
                                                  .row_shape = row_shape,
                                                  .decode = gpu_plan_decode,
                                                  .check = wds__image_check};

int wds__gpu_row_read(const uint8_t *p, size_t n, wds__gpu_row *out,
                      wds__err *e) {
  if (n < WDS__GPU_ROW_HEAD)
    return wds__fail(e, WDS_ERR_FORMAT,
                     "a GPU image row of %zu bytes (its header is %zu)", n,
                     (size_t)WDS__GPU_ROW_HEAD);
  memcpy(out, p, sizeof *out);
  if (out->magic != WDS__GPU_ROW_MAGIC ||
      (out->kind != WDS__GPU_ROW_JPEG && out->kind != WDS__GPU_ROW_PIXELS) ||
      out->payload != n - WDS__GPU_ROW_HEAD || out->out_w < 1 ||
      out->out_h < 1 || (out->channels != 1 && out->channels != 3))
    return wds__fail(e, WDS_ERR_FORMAT,
                     "not a GPU image row (magic %08x, kind %u, %zu bytes)",
                     out->magic, out->kind, n);
  if (out->kind == WDS__GPU_ROW_PIXELS &&
      out->payload !=
          (uint64_t)out->out_w * (uint64_t)out->out_h * (uint64_t)out->channels)
    return wds__fail(e, WDS_ERR_FORMAT, "a GPU image row of the wrong size");
  return WDS_OK;
}
