/* fuzz_json.c — libFuzzer target for the strict JSON reader (base/json.c)
 * and its string writer. The input is parsed from an exact-size buffer that
 * is not NUL-terminated. Besides the sanitizers it checks the contract:
 * skipping a value and walking it (decoding every string) agree on what is
 * valid; a failure leaves a message naming an offset; the walk's canonical
 * text (strings re-written by wds__json_write_string) parses again to
 * itself, surrogateescape bytes included; and without the surrogateescape
 * flag the reader accepts no more than with it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes the string at the cursor, decoded and re-encoded, to out. */
static int canon_string(wds__json *j, FILE *out) {
  size_t at, len;
  wds__json_ws(j);
  at = j->pos;
  int rc = wds__json_string(j, NULL, 0, &len);
  if (rc != WDS_OK)
    return rc;
  char *buf = malloc(len ? len : 1);
  if (!buf)
    abort();
  j->pos = at;
  size_t len2;
  if (wds__json_string(j, buf, len, &len2) != WDS_OK || len2 != len)
    abort(); /* the second pass must agree with the first */
  wds__json_write_string(out, buf, len);
  free(buf);
  return WDS_OK;
}

/* Walks one value, writing its canonical text (no blanks) to out. */
static int canon(wds__json *j, FILE *out, int depth) {
  int c = wds__json_peek(j), rc, more = 1;
  if (c == '"')
    return canon_string(j, out);
  if (c != '{' && c != '[') {
    size_t at = j->pos;
    if ((rc = wds__json_skip(j, depth)) != WDS_OK)
      return rc;
    fwrite(j->s + at, 1, j->pos - at, out);
    return WDS_OK;
  }
  int close = c == '{' ? '}' : ']';
  if (depth > WDS__JSON_MAX_DEPTH)
    return wds__json_fail(j, j->pos, "too deep");
  j->pos++;
  putc(c, out);
  if (wds__json_peek(j) == close) {
    j->pos++;
    putc(close, out);
    return WDS_OK;
  }
  while (more) {
    if (close == '}') {
      if ((rc = canon_string(j, out)) != WDS_OK ||
          (rc = wds__json_expect(j, ':', "expected ':'")) != WDS_OK)
        return rc;
      putc(':', out);
    }
    if ((rc = canon(j, out, depth + 1)) != WDS_OK ||
        (rc = wds__json_next(j, close, &more)) != WDS_OK)
      return rc;
    if (more)
      putc(',', out);
  }
  putc(close, out);
  return WDS_OK;
}

/* Parses text[0..n) as one value both ways; returns the status, and the
 * canonical text (malloc'd) when valid. */
static int check(const char *text, size_t n, unsigned flags, char **canon_out,
                 size_t *canon_len) {
  wds__err e1 = {""}, e2 = {""};
  wds__json j;
  wds__json_init(&j, text, n, flags, &e1);
  int rc1 = wds__json_skip(&j, 1);
  if (rc1 == WDS_OK)
    rc1 = wds__json_end(&j, "the value");
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (!out)
    abort();
  wds__json_init(&j, text, n, flags, &e2);
  int rc2 = canon(&j, out, 1);
  if (rc2 == WDS_OK)
    rc2 = wds__json_end(&j, "the value");
  fclose(out);
  if (rc1 != rc2)
    abort();
  if (rc1 != WDS_OK && (strncmp(e1.msg, "offset ", 7) != 0 ||
                        strncmp(e2.msg, "offset ", 7) != 0))
    abort();
  if (rc1 != WDS_OK) {
    free(buf);
    buf = NULL;
  }
  *canon_out = buf;
  *canon_len = len;
  return rc1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size copy, so reading past the end is caught by ASan. */
  char *text = malloc(size ? size : 1);
  if (!text)
    return 0;
  if (size)
    memcpy(text, data, size);
  char *c1 = NULL, *c2 = NULL, *c3 = NULL;
  size_t n1 = 0, n2 = 0, n3 = 0;
  int esc = check(text, size, WDS__JSON_SURROGATEESCAPE, &c1, &n1);
  int strict = check(text, size, 0, &c3, &n3);
  if (strict == WDS_OK && esc != WDS_OK)
    abort();
  if (esc == WDS_OK) {
    /* The canonical text is valid, and canonical. */
    if (check(c1, n1, WDS__JSON_SURROGATEESCAPE, &c2, &n2) != WDS_OK ||
        n2 != n1 || memcmp(c1, c2, n1) != 0)
      abort();
  }
  free(c1);
  free(c2);
  free(c3);
  free(text);
  return 0;
}
