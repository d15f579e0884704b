/* decoders.c — the table of field decoders (decoders.h), its look-ups and
 * the bytes decoder (the fallback: a row is the field's bytes as they are).
 *
 * The table is indexed by wds_decode; the public enum values never change.
 * Its order is the order of names in messages and of extension look-ups
 * (the extension lists do not overlap). */
#include "pipeline/decoders.h"

#include <stdio.h>
#include <string.h>

static const char *const image_exts[] = {"jpg", "jpeg", "png", NULL};
static const char *const npy_exts[] = {"npy", NULL};
static const char *const int_exts[] = {"cls", "cls2", "index",
                                       "inx", "id",   NULL};

static const wds__decoder_def table[] = {
    [WDS_DECODE_IMAGE] = {.id = WDS_DECODE_IMAGE,
                          .name = "image",
                          .exts = image_exts,
                          .layout = WDS__ROW_FIXED,
                          .image_opts = 1,
                          .random = 1,
                          .check_opts = wds__image_check_opts,
                          .row_shape = wds__image_row_shape,
                          .decode = wds__image_decode,
                          .check = wds__image_check},
    [WDS_DECODE_NPY] = {.id = WDS_DECODE_NPY,
                        .name = "npy",
                        .exts = npy_exts,
                        .layout = WDS__ROW_FIRST,
                        .row_noun = "npy array",
                        .row_shape = wds__npy_row_shape,
                        .decode = wds__npy_decode,
                        .check = wds__npy_check},
    [WDS_DECODE_INT] = {.id = WDS_DECODE_INT,
                        .name = "int",
                        .exts = int_exts,
                        .layout = WDS__ROW_FIXED,
                        .row_shape = wds__int_row_shape,
                        .decode = wds__int_decode,
                        .check = wds__int_check},
    [WDS_DECODE_BYTES] = {.id = WDS_DECODE_BYTES,
                          .name = "bytes",
                          .layout = WDS__ROW_VARIABLE,
                          .passthrough = 1,
                          .row_shape = wds__bytes_row_shape,
                          .decode = wds__bytes_decode},
};

#define FIRST WDS_DECODE_IMAGE
#define END (sizeof table / sizeof *table)

const wds__decoder_def *wds__decoder_get(wds_decode id) {
  return (unsigned)id >= FIRST && (unsigned)id < END ? &table[id] : NULL;
}

const wds__decoder_def *wds__decoder_for_ext(const char *ext) {
  if (ext)
    for (size_t i = FIRST; i < END; i++)
      for (const char *const *p = table[i].exts; p && *p; p++)
        if (strcmp(ext, *p) == 0)
          return &table[i];
  return &table[WDS_DECODE_BYTES];
}

static int same_lower(const char *s, size_t n, const char *word) {
  if (strlen(word) != n)
    return 0;
  for (size_t k = 0; k < n; k++) {
    char c = s[k] >= 'A' && s[k] <= 'Z' ? (char)(s[k] - 'A' + 'a') : s[k];
    if (c != word[k])
      return 0;
  }
  return 1;
}

const char *wds__ext_alias(const char *s, size_t n) {
  static const char *const pairs[][2] = {{"jpg", "jpeg"}, {"jpeg", "jpg"}};
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++)
    if (same_lower(s, n, pairs[i][0]))
      return pairs[i][1];
  return NULL;
}

const wds__decoder_def *wds__decoder_named(const char *s, size_t n) {
  for (size_t i = FIRST; i < END; i++)
    if (same_lower(s, n, table[i].name))
      return &table[i];
  return NULL;
}

void wds__decoder_names(char *buf, size_t n) {
  size_t at = 0;
  if (n == 0)
    return;
  buf[0] = '\0';
  for (size_t i = FIRST; i < END && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%s", i == FIRST ? "" : ", ",
                           table[i].name);
}

/* ---- bytes ---- */

void wds__bytes_row_shape(const wds__field_opts *o, wds__row_shape *out) {
  (void)o;
  memset(out, 0, sizeof *out);
  out->dtype = WDS_DTYPE_BYTES;
}

int wds__bytes_decode(const wds__field_opts *o, const wds__decode_call *call,
                      const uint8_t *data, size_t size, wds__field_value *out,
                      wds__err *e) {
  (void)o;
  (void)call;
  (void)e;
  out->dtype = WDS_DTYPE_BYTES;
  out->data = (void *)data; /* the row points into the sample */
  out->size = size;
  return WDS_OK;
}
