/* check.c — the public decode check (wds/decode.h: wds_decode_check), for
 * `wds verify --decode`.
 *
 * A checker wraps one wds__decoder (TurboJPEG handle and buffers reused
 * from field to field; a field's result never depends on the fields
 * checked before it, decode.h) and a small output buffer. Images are
 * decoded into a CHECK_SIDE x CHECK_SIDE RGB center crop: the decoders
 * read every byte of the entropy-coded data whatever the output size (a
 * JPEG at its smallest DCT scale, a PNG fully with its CRCs), so
 * truncation and corrupt data are found while resampling stays negligible.
 * Nothing is printed. */
#include <stdlib.h>
#include <string.h>

#include "decode.h"

#define CHECK_SIDE 16

struct wds_decode_checker {
  wds__decoder *dec;
  uint8_t out[CHECK_SIDE * CHECK_SIDE * 3];
};

wds_decode wds_decode_for_ext(const char *ext) {
  static const char *const images[] = {"jpg", "jpeg", "png", NULL};
  static const char *const ints[] = {"cls", "cls2", "index", "inx", "id", NULL};
  if (!ext)
    return WDS_DECODE_BYTES;
  for (const char *const *p = images; *p; p++)
    if (strcmp(ext, *p) == 0)
      return WDS_DECODE_IMAGE;
  if (strcmp(ext, "npy") == 0)
    return WDS_DECODE_NPY;
  for (const char *const *p = ints; *p; p++)
    if (strcmp(ext, *p) == 0)
      return WDS_DECODE_INT;
  return WDS_DECODE_BYTES;
}

int wds_decode_checker_open(wds_decode_checker **out) {
  if (!out)
    return WDS_ERR_INVALID;
  *out = NULL;
  wds_decode_checker *c = calloc(1, sizeof *c);
  if (!c)
    return WDS_ERR_NOMEM;
  if (!(c->dec = wds__decoder_new())) {
    free(c);
    return WDS_ERR_NOMEM;
  }
  *out = c;
  return WDS_OK;
}

void wds_decode_checker_close(wds_decode_checker *c) {
  if (!c)
    return;
  wds__decoder_free(c->dec);
  free(c);
}

int wds_decode_check(wds_decode_checker *c, const char *ext, const void *data,
                     size_t size, char *err, size_t err_size) {
  wds_decode_checker *own = NULL;
  wds__err e;
  int rc = WDS_OK;
  e.msg[0] = '\0';
  if (err && err_size)
    err[0] = '\0';
  if (!ext || (!data && size)) {
    rc = wds__fail(&e, WDS_ERR_INVALID, "wds_decode_check: NULL argument");
    goto done;
  }
  wds_decode kind = wds_decode_for_ext(ext);
  if (kind == WDS_DECODE_BYTES)
    goto done;
  if (!c) {
    if ((rc = wds_decode_checker_open(&own)) != WDS_OK) {
      rc = wds__fail(&e, rc, "out of memory");
      goto done;
    }
    c = own;
  }
  const uint8_t *d = size ? data : (const uint8_t *)"";
  if (kind == WDS_DECODE_IMAGE) {
    wds__image_opts o;
    memset(&o, 0, sizeof o);
    o.width = o.height = CHECK_SIDE;
    o.channels = 3;
    o.crop = WDS_CROP_CENTER;
    rc = wds__decode_image(c->dec, d, size, &o, c->out, &e);
  } else if (kind == WDS_DECODE_NPY) {
    wds__npy a;
    rc = wds__npy_parse(d, size, &a, &e);
  } else {
    int64_t v;
    rc = wds__decode_int(d, size, &v, &e);
  }
done:
  if (rc != WDS_OK && err && err_size)
    wds__copy_msg(err, err_size, e.msg);
  wds_decode_checker_close(own);
  return rc;
}
