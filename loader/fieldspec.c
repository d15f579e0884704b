/* fieldspec.c — parses the field list of `--decode` ("jpg;png:rgb:224,cls")
 * into wds_field_spec records.
 *
 * Grammar: FIELD (',' FIELD)*, FIELD = NAME (':' OPTION)*, NAME = EXT
 * (';' EXT)*. Blanks around fields, names and options are ignored. OPTION is
 * one of: rgb | l (channels), N | WxH (image size, 1..65536), a decoder's
 * name from the decoder table (pipeline/decoders.h: image | npy | int |
 * bytes); options are case-insensitive and each kind may be
 * given once. Names are stored lower-case (the loader matches extensions
 * lower-case) and must be unique.
 *
 * Memory: two allocations, both released by the caller with free():
 *   *specs    the array of *count records;
 *   *storage  one block holding every name, NUL-terminated, that the
 *             records' .name point into.
 * On failure both are NULL, *count is 0 and wds_last_error() says which
 * field (by its 1-based position and text) and which option is wrong. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "pipeline/decoders.h"
#include "wds/loader.h"

#define FIELD_MAX_SIZE 65536

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Trims blanks from both ends of s[*b..*e). */
static void trim(const char *s, size_t *b, size_t *e) {
  while (*b < *e && is_blank(s[*b]))
    (*b)++;
  while (*e > *b && is_blank(s[*e - 1]))
    (*e)--;
}

static int token_is(const char *s, size_t n, const char *word) {
  size_t m = strlen(word);
  if (n != m)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (tolower((unsigned char)s[i]) != word[i])
      return 0;
  return 1;
}

/* Decimal 1..FIELD_MAX_SIZE from s[0..n); -1 if not. */
static long parse_dim(const char *s, size_t n) {
  if (n == 0 || n > 9)
    return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= FIELD_MAX_SIZE ? v : -1;
}

static int starts_with_digit(const char *s, size_t n) {
  return n > 0 && s[0] >= '0' && s[0] <= '9';
}

/* Applies one option s[0..n) to f. `field` and `flen` name the field in
 * messages; seen tracks which kinds were given (1 channels, 2 size, 4
 * decoder). */
static int apply_option(wds_field_spec *f, unsigned *seen, const char *s,
                        size_t n, size_t index, const char *field, int flen,
                        wds__err *er) {
  int olen = n > 64 ? 64 : (int)n;
  if (n == 0)
    return wds__fail(er, WDS_ERR_INVALID, "field %zu (\"%.*s\"): empty option",
                     index, flen, field);
  unsigned kind = 0;
  if (token_is(s, n, "rgb") || token_is(s, n, "l")) {
    kind = 1;
    if (!(*seen & kind))
      f->channels = token_is(s, n, "rgb") ? 3 : 1;
  } else if (starts_with_digit(s, n)) {
    kind = 2;
    const char *x = memchr(s, 'x', n);
    if (!x)
      x = memchr(s, 'X', n);
    long w, h;
    if (x) {
      w = parse_dim(s, (size_t)(x - s));
      h = parse_dim(x + 1, n - (size_t)(x - s) - 1);
    } else {
      w = h = parse_dim(s, n);
    }
    if (w < 0 || h < 0)
      return wds__fail(
          er, WDS_ERR_INVALID,
          "field %zu (\"%.*s\"): bad image size \"%.*s\" (N or WxH, "
          "each 1..%d)",
          index, flen, field, olen, s, FIELD_MAX_SIZE);
    if (!(*seen & kind)) {
      f->width = (int)w;
      f->height = (int)h;
    }
  } else {
    const wds__decoder_def *d = wds__decoder_named(s, n);
    if (d) {
      kind = 4;
      if (!(*seen & kind))
        f->decode = d->id;
    }
    if (!kind) {
      char names[128];
      wds__decoder_names(names, sizeof names);
      return wds__fail(
          er, WDS_ERR_INVALID,
          "field %zu (\"%.*s\"): unknown option \"%.*s\" (expected "
          "rgb, l, N or WxH, %s)",
          index, flen, field, olen, s, names);
    }
  }
  if (*seen & kind)
    return wds__fail(er, WDS_ERR_INVALID,
                     "field %zu (\"%.*s\"): duplicate %s option \"%.*s\"",
                     index, flen, field,
                     kind == 1   ? "channel"
                     : kind == 2 ? "size"
                                 : "decoder",
                     olen, s);
  *seen |= kind;
  return WDS_OK;
}

/* Checks the NAME s[0..n): ';'-separated non-empty extensions without
 * blanks, control characters or '/' (names become file names with --save). */
static int check_name(const char *s, size_t n, size_t index, const char *field,
                      int flen, wds__err *er) {
  if (n == 0)
    return wds__fail(er, WDS_ERR_INVALID, "field %zu (\"%.*s\"): empty name",
                     index, flen, field);
  size_t ext_start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == ';') {
      if (i == ext_start)
        return wds__fail(er, WDS_ERR_INVALID,
                         "field %zu (\"%.*s\"): empty extension in the name",
                         index, flen, field);
      ext_start = i + 1;
      continue;
    }
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f || c == '/' || is_blank(s[i]))
      return wds__fail(er, WDS_ERR_INVALID,
                       "field %zu (\"%.*s\"): the name may not contain blanks, "
                       "control characters or '/'",
                       index, flen, field);
  }
  return WDS_OK;
}

static int parse(const char *text, wds_field_spec **specs, size_t *count,
                 char **storage, wds__err *er) {
  int rc = WDS_OK;
  wds_field_spec *out = NULL;
  char *names = NULL;
  size_t nfields = 1, k = 0, used = 0;
  if (specs)
    *specs = NULL;
  if (count)
    *count = 0;
  if (storage)
    *storage = NULL;
  if (!text || !specs || !count || !storage)
    return wds__fail(er, WDS_ERR_INVALID, "field spec: NULL argument");
  size_t len = strlen(text);
  {
    size_t b = 0, e = len;
    trim(text, &b, &e);
    if (b == e)
      return wds__fail(er, WDS_ERR_INVALID,
                       "field spec is empty (e.g. \"jpg:rgb,cls\")");
  }
  for (size_t i = 0; i < len; i++)
    nfields += text[i] == ',';
  out = calloc(nfields, sizeof *out);
  names = malloc(len + 1); /* names are substrings: they fit */
  if (!out || !names) {
    rc = wds__fail(er, WDS_ERR_INVALID, "out of memory");
    goto done;
  }
  for (size_t start = 0; k < nfields; k++) {
    const char *comma = memchr(text + start, ',', len - start);
    size_t end = comma ? (size_t)(comma - text) : len;
    size_t fb = start, fe = end;
    trim(text, &fb, &fe);
    const char *field = text + fb;
    int flen = fe - fb > 200 ? 200 : (int)(fe - fb);
    size_t index = k + 1;
    /* Name: up to the first ':'. */
    const char *colon = memchr(field, ':', fe - fb);
    size_t nb = fb, ne = colon ? (size_t)(colon - text) : fe;
    trim(text, &nb, &ne);
    rc = check_name(text + nb, ne - nb, index, field, flen, er);
    if (rc != WDS_OK)
      goto done;
    wds_field_spec *f = &out[k];
    f->name = names + used;
    for (size_t i = nb; i < ne; i++)
      names[used++] = (char)tolower((unsigned char)text[i]);
    names[used++] = '\0';
    for (size_t j = 0; j < k; j++)
      if (strcmp(out[j].name, f->name) == 0) {
        rc = wds__fail(er, WDS_ERR_INVALID,
                       "field %zu (\"%.*s\"): duplicate field \"%s\"", index,
                       flen, field, f->name);
        goto done;
      }
    f->decode = WDS_DECODE_AUTO;
    unsigned seen = 0;
    for (size_t ob = colon ? (size_t)(colon - text) + 1 : fe; colon;) {
      const char *next = memchr(text + ob, ':', fe - ob);
      size_t oe = next ? (size_t)(next - text) : fe;
      size_t b = ob, e = oe;
      trim(text, &b, &e);
      rc = apply_option(f, &seen, text + b, e - b, index, field, flen, er);
      if (rc != WDS_OK)
        goto done;
      if (!next)
        break;
      ob = oe + 1;
    }
    if ((seen & 3) && f->decode != WDS_DECODE_AUTO &&
        !wds__decoder_get(f->decode)->image_opts) {
      rc = wds__fail(
          er, WDS_ERR_INVALID,
          "field %zu (\"%.*s\"): image options (rgb, l, size) need the "
          "image decoder",
          index, flen, field);
      goto done;
    }
    start = end + 1;
  }
  *specs = out;
  *count = nfields;
  *storage = names;
  out = NULL;
  names = NULL;
done:
  free(names);
  free(out);
  return rc;
}

int wds_field_specs_parse(const char *text, wds_field_spec **specs,
                          size_t *count, char **storage) {
  wds__err er;
  return wds__last_set(parse(text, specs, count, storage, &er), er.msg);
}
