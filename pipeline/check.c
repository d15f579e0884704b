/* check.c — the public decode check (wds/decode.h: wds_decode_check), for
 * `wds verify --decode`.
 *
 * A checker wraps one wds__decoder (TurboJPEG handle and buffers reused
 * from field to field; a field's result never depends on the fields
 * checked before it, decode.h). The decoder table (decoders.h) says which
 * decoder an extension gets and how that decoder checks a field: images
 * are decoded in full into a small thumbnail, npy headers and sizes
 * parsed, integers read; bytes have nothing to check. Nothing is
 * printed. */
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "decoders.h"

struct wds_decode_checker {
  wds__decoder *dec;
};

int wds_decode_checker_open(wds_decode_checker **out) {
  if (!out)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_decode_checker_open: out is NULL");
  *out = NULL;
  wds_decode_checker *c = calloc(1, sizeof *c);
  if (!c)
    return wds__last_fail(WDS_ERR_NOMEM, "wds_decode_checker_open: out of "
                                         "memory");
  if (!(c->dec = wds__decoder_new())) {
    free(c);
    return wds__last_fail(WDS_ERR_NOMEM, "wds_decode_checker_open: out of "
                                         "memory");
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

void wds_decode_checker_set_image_memory_limit(wds_decode_checker *c,
                                               uint64_t bytes) {
  if (c)
    wds__decoder_set_memory_limit(c->dec, bytes);
}

int wds_decode_check(wds_decode_checker *c, const char *ext, const void *data,
                     size_t size) {
  wds_decode_checker *own = NULL;
  wds__err e;
  int rc = WDS_OK;
  e.msg[0] = '\0';
  if (!ext || (!data && size)) {
    rc = wds__fail(&e, WDS_ERR_INVALID, "wds_decode_check: NULL argument");
    goto done;
  }
  const wds__decoder_def *def = wds__decoder_for_ext(ext);
  if (!def->check)
    goto done;
  if (!c) {
    if ((rc = wds_decode_checker_open(&own)) != WDS_OK) {
      rc = wds__fail(&e, rc, "out of memory");
      goto done;
    }
    c = own;
  }
  rc = def->check(c->dec, size ? data : (const uint8_t *)"", size, &e);
done:
  wds_decode_checker_close(own);
  return wds__last_set(rc, e.msg);
}
