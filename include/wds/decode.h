/* wds/decode.h — the decode vocabulary: how a sample's field becomes an
 * array, below the loader.
 *
 *   wds_decode     the decoders a field spec names (image, npy, int, bytes)
 *                  and the extensions WDS_DECODE_AUTO maps to them
 *   wds_crop       how images are fitted to the output size
 *   wds_dtype      element types of the arrays decoders make
 *   checker        decoding fields to check them (`wds verify --decode`)
 *   wds_npy_save   writing an array as a .npy file (`wds batches --save`)
 *
 * wds/loader.h includes this header; a program that only checks or saves
 * fields needs nothing else. */
#ifndef WDS_DECODE_H
#define WDS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "wds/api.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a field is turned into a batch array. */
typedef enum wds_decode {
  WDS_DECODE_AUTO = 0, /* by extension: jpg/jpeg/png -> image, npy -> npy,
                          cls/cls2/index/inx/id -> int, else bytes */
  WDS_DECODE_IMAGE = 1,
  WDS_DECODE_NPY = 2,
  WDS_DECODE_INT = 3, /* decimal text (whitespace around it allowed) */
  WDS_DECODE_BYTES = 4
} wds_decode;

typedef enum wds_crop {
  WDS_CROP_CENTER = 0, /* resize the shorter side, center crop (evaluation) */
  WDS_CROP_RANDOM = 1  /* random resized crop + horizontal flip (training) */
} wds_crop;

/* An image field's element type and layout. UINT8: height x width x
 * channels bytes (HWC), the decoded pixels. FLOAT32, FLOAT16: channels x
 * height x width (CHW), normalized: (x / 255 - mean[c]) / std[c]
 * (torchvision's ToDtype(scale=True) then Normalize), ready for a model. */
typedef enum wds_image_dtype {
  WDS_IMAGE_UINT8 = 0,
  WDS_IMAGE_FLOAT32 = 1,
  WDS_IMAGE_FLOAT16 = 2
} wds_image_dtype;

/* Element types of batch arrays (numpy's names in wds_dtype_name). */
typedef enum wds_dtype {
  WDS_DTYPE_BYTES = 0, /* variable-size bytes: data + offsets */
  WDS_DTYPE_BOOL,
  WDS_DTYPE_U8,
  WDS_DTYPE_I8,
  WDS_DTYPE_U16,
  WDS_DTYPE_I16,
  WDS_DTYPE_U32,
  WDS_DTYPE_I32,
  WDS_DTYPE_U64,
  WDS_DTYPE_I64,
  WDS_DTYPE_F16,
  WDS_DTYPE_F32,
  WDS_DTYPE_F64
} wds_dtype;

WDS_API size_t wds_dtype_size(wds_dtype t); /* bytes per element; BYTES: 1 */
WDS_API const char *
wds_dtype_name(wds_dtype t); /* numpy descr, e.g. "<u1", "|b1" */

/* The default per-image memory budget of image decodes, in bytes
 * (wds_loader_config.image_memory_limit, wds_decode_checker_set_image_
 * memory_limit): what one image's decode may take, counted from its headers
 * before anything is allocated: the decoded pixels (a JPEG at the DCT
 * scale its output needs, a PNG whole) and, for a JPEG decoded from
 * buffered coefficients (progressive or multi-scan: libjpeg keeps the
 * whole image's, 2 bytes each, whatever the scale), those. 256 MiB: an
 * 8192x8192 RGB PNG (192 MiB) passes; a 16000x16000 one (768 MB) and a
 * progressive JPEG of that size do not. Images over 2^28 pixels are
 * refused whatever the budget. */
#define WDS_IMAGE_MEMORY_LIMIT_DEFAULT ((uint64_t)256 << 20)

/* Checking that fields decode (`wds verify --decode`). A checker holds the
 * decoder state reused from field to field (one thread at a time). */
typedef struct wds_decode_checker wds_decode_checker;

WDS_API int
wds_decode_checker_open(wds_decode_checker **out); /* WDS_ERR_NOMEM */
WDS_API void wds_decode_checker_close(wds_decode_checker *c); /* NULL: no-op */
/* The checker's per-image memory budget in bytes (0: the default,
 * WDS_IMAGE_MEMORY_LIMIT_DEFAULT): an image whose decode needs more fails
 * wds_decode_check with WDS_ERR_LIMIT. */
WDS_API void wds_decode_checker_set_image_memory_limit(wds_decode_checker *c,
                                                       uint64_t bytes);

/* Decodes one field as the loader would with WDS_DECODE_AUTO for ext:
 * images fully (every scan decoded; the output is a small RGB thumbnail,
 * so a truncated or corrupt image is found at little cost), .npy header
 * and data size, integers as decimal text. Returns WDS_OK (also for BYTES
 * extensions: nothing to check) or the decoder's status with its message
 * ("JPEG: Premature end of JPEG file", "npy: ...") in wds_last_error(). c
 * may be NULL: a temporary checker is used. */
WDS_API int wds_decode_check(wds_decode_checker *c, const char *ext,
                             const void *data, size_t size);

/* Writes a .npy file (format 1.0, little-endian, C order) holding an array
 * of the given dtype (not BYTES) and shape: `wds batches --save` uses it.
 * Written under a temporary name and renamed. Returns WDS_OK or
 * WDS_ERR_IO / WDS_ERR_INVALID with a message in wds_last_error(). */
WDS_API int wds_npy_save(const char *path, wds_dtype dtype, int ndim,
                         const int64_t *shape, const void *data);

#ifdef __cplusplus
}
#endif
#endif /* WDS_DECODE_H */
