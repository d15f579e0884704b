/* npy.c — the .npy format: parsing (versions 1.0, 2.0, 3.0), copying to
 * host-order C-order arrays, writing (version 1.0), dtype names, and the
 * npy decoder's row in the decoder table.
 *
 * The header is a Python dict literal; it is parsed as numpy writes it and
 * as a hand-written one may look: keys 'descr', 'fortran_order', 'shape' in
 * any order, either quote, spaces anywhere, trailing commas, "()" for a
 * scalar and "(3,)" for one dimension. Any other key, a structured dtype
 * or a missing key is an error naming it. The data must hold at least
 * count * itemsize bytes; bytes after the array are ignored, as np.load
 * ignores them. Nothing is copied at parse time: wds__npy points into the
 * input. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decode.h"
#include "decoders.h"
#include "shards/outfile_internal.h"

static const struct {
  const char *name;
  size_t size;
} dtype_info[] = {
    [WDS_DTYPE_BYTES] = {"|u1", 1}, /* raw bytes, saved as uint8 */
    [WDS_DTYPE_BOOL] = {"|b1", 1},  [WDS_DTYPE_U8] = {"|u1", 1},
    [WDS_DTYPE_I8] = {"|i1", 1},    [WDS_DTYPE_U16] = {"<u2", 2},
    [WDS_DTYPE_I16] = {"<i2", 2},   [WDS_DTYPE_U32] = {"<u4", 4},
    [WDS_DTYPE_I32] = {"<i4", 4},   [WDS_DTYPE_U64] = {"<u8", 8},
    [WDS_DTYPE_I64] = {"<i8", 8},   [WDS_DTYPE_F16] = {"<f2", 2},
    [WDS_DTYPE_F32] = {"<f4", 4},   [WDS_DTYPE_F64] = {"<f8", 8},
};

size_t wds_dtype_size(wds_dtype t) {
  return (unsigned)t <= WDS_DTYPE_F64 ? dtype_info[t].size : 0;
}

const char *wds_dtype_name(wds_dtype t) {
  return (unsigned)t <= WDS_DTYPE_F64 ? dtype_info[t].name : "?";
}

static int host_is_little(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

/* ---- header parsing ---- */

typedef struct cursor {
  const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
  while (c->p < c->end &&
         (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    c->p++;
}

static int accept(cursor *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

static int accept_word(cursor *c, const char *w) {
  skip_ws(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
    c->p += n;
    return 1;
  }
  return 0;
}

/* A quoted string without escapes into buf. */
static int parse_string(cursor *c, char *buf, size_t cap) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
    return -1;
  char q = *c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || n + 1 >= cap)
      return -1;
    buf[n++] = *c->p++;
  }
  if (c->p >= c->end)
    return -1;
  c->p++;
  buf[n] = '\0';
  return 0;
}

static int parse_descr(const char *s, wds__npy *out, wds__err *e) {
  static const struct {
    const char *code;
    wds_dtype t;
  } codes[] = {
      {"b1", WDS_DTYPE_BOOL}, {"i1", WDS_DTYPE_I8},  {"u1", WDS_DTYPE_U8},
      {"i2", WDS_DTYPE_I16},  {"u2", WDS_DTYPE_U16}, {"i4", WDS_DTYPE_I32},
      {"u4", WDS_DTYPE_U32},  {"i8", WDS_DTYPE_I64}, {"u8", WDS_DTYPE_U64},
      {"f2", WDS_DTYPE_F16},  {"f4", WDS_DTYPE_F32}, {"f8", WDS_DTYPE_F64}};
  char order = '=';
  const char *code = s;
  if (*code == '<' || *code == '>' || *code == '|' || *code == '=')
    order = *code++;
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    if (strcmp(code, codes[i].code) != 0)
      continue;
    out->dtype = codes[i].t;
    int little =
        order == '<' || ((order == '=' || order == '|') && host_is_little());
    out->swap = wds_dtype_size(out->dtype) > 1 && little != host_is_little();
    return WDS_OK;
  }
  return wds__fail(e, WDS_ERR_FORMAT, "npy: unsupported dtype '%s'", s);
}

static int parse_shape(cursor *c, wds__npy *out, wds__err *e) {
  if (!accept(c, '('))
    return wds__fail(e, WDS_ERR_FORMAT, "npy: shape is not a tuple");
  out->ndim = 0;
  for (;;) {
    if (accept(c, ')'))
      return WDS_OK;
    skip_ws(c);
    int64_t v = 0;
    int digits = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
      if (v > (INT64_MAX - 9) / 10)
        return wds__fail(e, WDS_ERR_LIMIT, "npy: shape value too large");
      v = v * 10 + (*c->p++ - '0');
      digits++;
    }
    (void)accept_word(c, "L"); /* Python 2 longs: "(3L, 4L)" */
    if (!digits)
      return wds__fail(e, WDS_ERR_FORMAT, "npy: bad shape value");
    if (out->ndim == 7)
      return wds__fail(e, WDS_ERR_LIMIT, "npy: more than 7 dimensions");
    out->shape[out->ndim++] = v;
    if (accept(c, ')'))
      return WDS_OK;
    if (!accept(c, ','))
      return wds__fail(e, WDS_ERR_FORMAT, "npy: bad shape tuple");
  }
}

static int parse_dict(const char *text, size_t len, wds__npy *out,
                      wds__err *e) {
  cursor c = {text, text + len};
  int have_descr = 0, have_order = 0, have_shape = 0, rc;
  if (!accept(&c, '{'))
    return wds__fail(e, WDS_ERR_FORMAT, "npy: header is not a dict");
  while (!accept(&c, '}')) {
    char key[32], val[64];
    if (parse_string(&c, key, sizeof key) || !accept(&c, ':'))
      return wds__fail(e, WDS_ERR_FORMAT, "npy: bad header dict");
    if (strcmp(key, "descr") == 0) {
      skip_ws(&c);
      if (c.p < c.end && *c.p == '[')
        return wds__fail(e, WDS_ERR_FORMAT,
                         "npy: unsupported dtype (structured)");
      if (parse_string(&c, val, sizeof val))
        return wds__fail(e, WDS_ERR_FORMAT, "npy: bad descr");
      if ((rc = parse_descr(val, out, e)) != WDS_OK)
        return rc;
      have_descr = 1;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (accept_word(&c, "True"))
        out->fortran_order = 1;
      else if (accept_word(&c, "False"))
        out->fortran_order = 0;
      else
        return wds__fail(e, WDS_ERR_FORMAT, "npy: bad fortran_order");
      have_order = 1;
    } else if (strcmp(key, "shape") == 0) {
      if ((rc = parse_shape(&c, out, e)) != WDS_OK)
        return rc;
      have_shape = 1;
    } else {
      return wds__fail(e, WDS_ERR_FORMAT, "npy: unexpected header key '%s'",
                       key);
    }
    if (!accept(&c, ',')) {
      if (!accept(&c, '}'))
        return wds__fail(e, WDS_ERR_FORMAT, "npy: bad header dict");
      break;
    }
  }
  skip_ws(&c);
  if (c.p != c.end)
    return wds__fail(e, WDS_ERR_FORMAT, "npy: text after the header dict");
  if (!have_descr || !have_order || !have_shape)
    return wds__fail(e, WDS_ERR_FORMAT, "npy: header lacks '%s'",
                     !have_descr   ? "descr"
                     : !have_order ? "fortran_order"
                                   : "shape");
  return WDS_OK;
}

int wds__npy_parse(const uint8_t *data, size_t size, wds__npy *out,
                   wds__err *e) {
  memset(out, 0, sizeof *out);
  if (size < 10 || memcmp(data, "\x93NUMPY", 6) != 0)
    return wds__fail(e, WDS_ERR_FORMAT, "npy: no \\x93NUMPY magic");
  int major = data[6], minor = data[7];
  size_t start, hlen;
  if (major == 1) {
    start = 10;
    hlen = (size_t)data[8] | (size_t)data[9] << 8;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return wds__fail(e, WDS_ERR_TRUNCATED, "npy: truncated header");
    start = 12;
    hlen = (size_t)data[8] | (size_t)data[9] << 8 | (size_t)data[10] << 16 |
           (size_t)data[11] << 24;
  } else {
    return wds__fail(e, WDS_ERR_FORMAT, "npy: unsupported version %d.%d", major,
                     minor);
  }
  if (minor != 0)
    return wds__fail(e, WDS_ERR_FORMAT, "npy: unsupported version %d.%d", major,
                     minor);
  if (hlen > size - start)
    return wds__fail(e, WDS_ERR_TRUNCATED,
                     "npy: header of %zu bytes, %zu available", hlen,
                     size - start);
  int rc = parse_dict((const char *)data + start, hlen, out, e);
  if (rc != WDS_OK)
    return rc;
  size_t item = wds_dtype_size(out->dtype), count = 1;
  for (int i = 0; i < out->ndim; i++) {
    uint64_t dim = (uint64_t)out->shape[i];
    if (dim != 0 && count > SIZE_MAX / item / dim)
      return wds__fail(e, WDS_ERR_LIMIT, "npy: array size overflows");
    count *= (size_t)dim;
  }
  size_t avail = size - start - hlen;
  if (count > avail / item)
    return wds__fail(e, WDS_ERR_TRUNCATED,
                     "npy: %zu elements of %zu bytes need %zu bytes of data, "
                     "%zu available",
                     count, item, count * item, avail);
  out->count = count;
  out->data = data + start + hlen;
  out->data_bytes = count * item;
  return WDS_OK;
}

static void copy_item(uint8_t *dst, const uint8_t *src, size_t item, int swap) {
  if (!swap) {
    memcpy(dst, src, item);
    return;
  }
  for (size_t b = 0; b < item; b++)
    dst[b] = src[item - 1 - b];
}

void wds__npy_copy(const wds__npy *a, void *dst_v) {
  uint8_t *dst = dst_v;
  size_t item = wds_dtype_size(a->dtype);
  if (!a->fortran_order || a->ndim < 2) {
    if (!a->swap) {
      if (a->data_bytes)
        memcpy(dst, a->data, a->data_bytes);
      return;
    }
    for (size_t i = 0; i < a->count; i++)
      copy_item(dst + i * item, a->data + i * item, item, 1);
    return;
  }
  /* dst in C order; the Fortran index of (i0..in-1) is sum(ik * fstride_k)
   * with fstride_0 = 1 */
  size_t fstride[7], idx[7] = {0};
  int n = a->ndim;
  fstride[0] = 1;
  for (int k = 1; k < n; k++)
    fstride[k] = fstride[k - 1] * (size_t)a->shape[k - 1];
  size_t src = 0;
  for (size_t i = 0; i < a->count; i++) {
    copy_item(dst + i * item, a->data + src * item, item, a->swap);
    for (int k = n - 1; k >= 0; k--) {
      if (++idx[k] < (size_t)a->shape[k]) {
        src += fstride[k];
        break;
      }
      src -= (idx[k] - 1) * fstride[k];
      idx[k] = 0;
    }
  }
}

/* ---- the npy decoder's row in the table (decoders.h) ---- */

/* Until a valid row says otherwise, a batch's npy field is (rows, 0) u8. */
void wds__npy_row_shape(const wds__field_opts *o, wds__row_shape *out) {
  (void)o;
  memset(out, 0, sizeof *out);
  out->dtype = WDS_DTYPE_U8;
  out->ndim = 1;
}

int wds__npy_decode(const wds__field_opts *o, const wds__decode_call *call,
                    const uint8_t *data, size_t size, wds__field_value *out,
                    wds__err *e) {
  (void)o;
  wds__npy a;
  int rc = wds__npy_parse(data, size, &a, e);
  if (rc != WDS_OK)
    return rc;
  out->data = call->alloc(call->alloc_ctx, a.data_bytes ? a.data_bytes : 1);
  if (!out->data)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  out->owned = 1;
  wds__npy_copy(&a, out->data);
  out->size = a.data_bytes;
  out->dtype = a.dtype;
  out->ndim = a.ndim;
  memcpy(out->shape, a.shape, sizeof out->shape);
  return WDS_OK;
}

int wds__npy_check(wds__decoder *dec, const uint8_t *data, size_t size,
                   wds__err *e) {
  wds__npy a;
  (void)dec;
  return wds__npy_parse(data, size, &a, e);
}

/* ---- writing ---- */

static int write_all(FILE *f, const void *p, size_t n) {
  return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1;
}

int wds_npy_save(const char *path, wds_dtype dtype, int ndim,
                 const int64_t *shape, const void *data) {
  wds__err e = {{0}}, oe;
  int rc = WDS_OK;
  FILE *f = NULL;
  wds_outfile *of = NULL;
  if (!path || dtype <= WDS_DTYPE_BYTES || dtype > WDS_DTYPE_F64 || ndim < 0 ||
      ndim > 8 || (ndim > 0 && !shape)) {
    rc = wds__fail(&e, WDS_ERR_INVALID,
                   "npy save: bad arguments (dtype %d, ndim %d)", (int)dtype,
                   ndim);
    goto done;
  }
  size_t item = wds_dtype_size(dtype), count = 1;
  char header[512];
  int n = snprintf(header, sizeof header,
                   "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   wds_dtype_name(dtype));
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 ||
        (shape[i] && count > SIZE_MAX / item / (uint64_t)shape[i])) {
      rc = wds__fail(&e, WDS_ERR_INVALID, "npy save: bad shape");
      goto done;
    }
    count *= (size_t)shape[i];
    n += snprintf(header + n, sizeof header - (size_t)n, "%s%lld",
                  i ? ", " : "", (long long)shape[i]);
  }
  n += snprintf(header + n, sizeof header - (size_t)n, "%s), }",
                ndim == 1 ? "," : "");
  /* pad with spaces so that magic + length + header + '\n' is a multiple
   * of 64, as numpy does */
  while ((10 + n + 1) % 64 != 0)
    header[n++] = ' ';
  header[n++] = '\n';
  if (count && !data) {
    rc = wds__fail(&e, WDS_ERR_INVALID, "npy save: no data");
    goto done;
  }
  /* A temporary renamed when complete (/dev/null or a FIFO in place, never
   * replaced); not synced: saved batches are for inspection. stdio on a
   * copy of the descriptor, which commit closes. */
  if (wds__outfile_open(path, WDS_OUTFILE_NO_SYNC, &of, &oe) != WDS_OK) {
    rc = wds__fail(&e, WDS_ERR_IO, "npy save: %s", oe.msg);
    goto done;
  }
  int fd = dup(wds_outfile_fd(of));
  if (fd < 0 || !(f = fdopen(fd, "wb"))) {
    if (fd >= 0)
      close(fd);
    rc = wds__fail(&e, WDS_ERR_IO, "npy save: %s: %s", path, strerror(errno));
    goto done;
  }
  uint8_t pre[10] = {0x93, 'N', 'U', 'M',        'P',
                     'Y',  1,   0,   (uint8_t)n, (uint8_t)(n >> 8)};
  int bad = write_all(f, pre, sizeof pre) || write_all(f, header, (size_t)n);
  if (!bad && (host_is_little() || item == 1)) {
    bad = write_all(f, data, count * item);
  } else if (!bad) {
    uint8_t buf[4096];
    const uint8_t *src = data;
    for (size_t i = 0; i < count && !bad; i += sizeof buf / item) {
      size_t m = count - i < sizeof buf / item ? count - i : sizeof buf / item;
      for (size_t k = 0; k < m; k++)
        copy_item(buf + k * item, src + (i + k) * item, item, 1);
      bad = write_all(f, buf, m * item);
    }
  }
  if (fclose(f) != 0)
    bad = 1;
  f = NULL;
  if (bad) {
    rc = wds__fail(&e, WDS_ERR_IO, "npy save: write error on %s", path);
    goto done;
  }
  if (wds__outfile_commit(of, &oe) != WDS_OK)
    rc = wds__fail(&e, WDS_ERR_IO, "npy save: %s", oe.msg);
done:
  if (f)
    fclose(f);
  wds_outfile_close(of); /* removes the temporary file after an error */
  return wds__last_set(rc, e.msg);
}
