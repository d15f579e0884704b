/* decoders.h — the table of field decoders. Internal.
 *
 * One row per decoder (decoders.c) says everything the rest of wds needs
 * to know about it: its name in a field spec ("image"), the extensions
 * WDS_DECODE_AUTO gives it, whether it takes the image options, the shape
 * and dtype of its rows and how a batch lays them out, the function that
 * decodes a field into a row, and the one `wds verify --decode` runs. The
 * field-spec parser, wds_decode_check and the loader
 * (open, workers, collation) read the table; none of them switches on a
 * decoder.
 *
 * Adding a decoder: a value in wds_decode (wds/decode.h), one file with
 * its functions (declared below), one row in decoders.c.
 *
 * Decode functions are reentrant: per-thread state lives in the
 * wds__decoder of the call (decode.h). Failures return a negative status
 * with what was wrong in e; the caller adds sample, shard and field. */
#ifndef WDS_PIPELINE_DECODERS_H
#define WDS_PIPELINE_DECODERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "pipeline/decode.h"
#include "wds/decode.h"

/* How a batch holds a field's rows. */
typedef enum wds__row_layout {
  WDS__ROW_FIXED,   /* every row has the shape the options give (image, int):
                       batch memory is sized when the loader opens */
  WDS__ROW_FIRST,   /* the batch's first valid row sets dtype and shape;
                       later rows must match (npy) */
  WDS__ROW_VARIABLE /* rows of any size: data + offsets (bytes) */
} wds__row_layout;

/* A field's options, defaults applied: what decoders read. */
typedef struct wds__field_opts {
  int width, height, channels; /* images */
  wds_crop crop;
  double scale_min, scale_max; /* WDS_CROP_RANDOM's area range */
  wds__augment aug;            /* images: ratio, flip, jitter, dtype */
} wds__field_opts;

/* A row as the options describe it, before any data. FIRST: the shape a
 * batch shows until a valid row sets it. */
typedef struct wds__row_shape {
  wds_dtype dtype;
  int ndim; /* without the batch dimension */
  int64_t shape[7];
  size_t row_bytes; /* FIXED: bytes per row; FIRST, VARIABLE: 0 */
} wds__row_shape;

/* One decoded field: a row of a batch. */
typedef struct wds__field_value {
  void *data; /* a block from the call's alloc (owned), the input
                 (VARIABLE rows that copy nothing) or `local`; with
                 write, what write reads */
  size_t size;
  wds_dtype dtype;
  int ndim;
  int64_t shape[7];
  int owned; /* data came from the call's alloc: the caller frees it */
  /* A deferred write (FIXED rows): when set, the row's size bytes are not
   * at data; the batch copy calls write(data, dst) to write them at dst,
   * straight into the row (the image decoder's last resampling pass).
   * write only reads data, cannot fail (the decode did all that can) and
   * may run on any thread, and at once for different values. */
  void (*write)(const void *data, void *dst);
  /* A deferred read (the loader's, VARIABLE rows of passthrough decoders;
   * not a decoder's): the row's size bytes are still in the shard file;
   * this is the loader's raw field (loader/internal.h wds__raw_field: handle,
   * offset, size) and the batch copy reads them with pread straight into
   * the row. Unlike write, that read can fail (loader/collate.c). */
  const void *defer;
  union {
    int64_t i64;
    double f64;
    unsigned char bytes[8];
  } local; /* a row of at most 8 bytes, held in place */
} wds__field_value;

/* What a decode call gets besides the field's bytes. */
typedef struct wds__decode_call {
  wds__decoder *dec; /* the calling thread's decoder state */
  uint64_t rng_key;  /* random augmentation (decoders marked random): a
                        pure function of the sample and field (the loader
                        derives it) */
  void *(*alloc)(void *ctx, size_t size_bytes); /* a row's memory; NULL:
                                                   out of memory */
  void *alloc_ctx;
} wds__decode_call;

typedef struct wds__decoder_def {
  wds_decode id;
  const char *name;        /* its field-spec option, lower-case */
  const char *const *exts; /* what WDS_DECODE_AUTO gives it (NULL-terminated;
                              NULL for none) */
  wds__row_layout layout;
  int image_opts;       /* takes the image options (rgb, l, size) */
  int passthrough;      /* the row is the input: no decoding time */
  int random;           /* draws from the call's rng_key (augmentation);
                           others get no key */
  const char *row_noun; /* FIRST: what a row is, in the message when rows
                           of one batch differ ("npy array") */
  /* Checks resolved options when the loader opens: WDS_ERR_INVALID with
   * what is wrong in e (the caller names the field). NULL: any. */
  int (*check_opts)(const wds__field_opts *o, wds__err *e);
  void (*row_shape)(const wds__field_opts *o, wds__row_shape *out);
  /* Decodes one field into *out (zeroed by the caller). A failure may
   * leave an owned block in out->data (the caller frees it); a failed
   * alloc returns WDS_ERR_NOMEM at once. */
  int (*decode)(const wds__field_opts *o, const wds__decode_call *call,
                const uint8_t *data, size_t size, wds__field_value *out,
                wds__err *e);
  /* wds_decode_check: decodes to find errors, keeping nothing. NULL:
   * nothing to check. */
  int (*check)(wds__decoder *dec, const uint8_t *data, size_t size,
               wds__err *e);
} wds__decoder_def;

/* The row for a decoder; NULL for WDS_DECODE_AUTO and unknown values. */
const wds__decoder_def *wds__decoder_get(wds_decode id);

/* The row WDS_DECODE_AUTO picks for an extension (lower-case): the first
 * whose exts has it, else bytes. ext NULL: bytes. */
const wds__decoder_def *wds__decoder_for_ext(const char *ext);

/* The other spelling of the extension s[0..n) (ASCII case-insensitive),
 * or NULL: "jpeg" for "jpg" and "jpg" for "jpeg". JPEG files are named
 * .jpg, .jpeg, .JPG or .JPEG (ImageNet: .JPEG), and extensions are read
 * lower-cased; webdataset's decoders take jpg and jpeg as one image type.
 * A field spec's or `verify --require`'s name matches its alias too, after
 * the names it lists (the loader, cmd_verify). */
const char *wds__ext_alias(const char *s, size_t n);

/* The row named s[0..n) (ASCII case-insensitive), or NULL. */
const wds__decoder_def *wds__decoder_named(const char *s, size_t n);

/* The names in table order, ", "-separated, into buf (truncated to n):
 * "image, npy, int, bytes". */
void wds__decoder_names(char *buf, size_t n);

/* The decoders' functions, one file each. */
int wds__image_check_opts(const wds__field_opts *o, wds__err *e); /* decode.c */
void wds__image_row_shape(const wds__field_opts *o, wds__row_shape *out);
int wds__image_decode(const wds__field_opts *o, const wds__decode_call *call,
                      const uint8_t *data, size_t size, wds__field_value *out,
                      wds__err *e);
int wds__image_check(wds__decoder *dec, const uint8_t *data, size_t size,
                     wds__err *e);

void wds__npy_row_shape(const wds__field_opts *o,
                        wds__row_shape *out); /* npy.c */
int wds__npy_decode(const wds__field_opts *o, const wds__decode_call *call,
                    const uint8_t *data, size_t size, wds__field_value *out,
                    wds__err *e);
int wds__npy_check(wds__decoder *dec, const uint8_t *data, size_t size,
                   wds__err *e);

void wds__int_row_shape(const wds__field_opts *o,
                        wds__row_shape *out); /* int.c */
int wds__int_decode(const wds__field_opts *o, const wds__decode_call *call,
                    const uint8_t *data, size_t size, wds__field_value *out,
                    wds__err *e);
int wds__int_check(wds__decoder *dec, const uint8_t *data, size_t size,
                   wds__err *e);

void wds__bytes_row_shape(const wds__field_opts *o,
                          wds__row_shape *out); /* decoders.c */
int wds__bytes_decode(const wds__field_opts *o, const wds__decode_call *call,
                      const uint8_t *data, size_t size, wds__field_value *out,
                      wds__err *e);

#endif
