/* json.c — the strict JSON reader and writer helpers (see json.h).
 *
 * Recursive descent over a byte buffer with an explicit length; only
 * wds__json_skip recurses, and it stops at WDS__JSON_MAX_DEPTH. Errors carry
 * the offset of what is wrong (the start of the token, or of the string for
 * an unterminated one). */
#include "base/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

void wds__json_init(wds__json *j, const void *text, size_t n, unsigned flags,
                    wds__err *e) {
  j->s = text;
  j->n = n;
  j->pos = 0;
  j->e = e;
  j->flags = flags;
  j->line = 0;
}

int wds__json_fail(const wds__json *j, size_t at, const char *what) {
  if (j->line)
    return wds__fail(j->e, WDS_ERR_FORMAT, "line %zu, column %zu: %s", j->line,
                     at + 1, what);
  return wds__fail(j->e, WDS_ERR_FORMAT, "offset %zu: %s", at, what);
}

void wds__json_ws(wds__json *j) {
  while (j->pos < j->n && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' ||
                           j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
    j->pos++;
}

/* The next byte, or -1 at the end (blanks not skipped). */
static int at(const wds__json *j) { return j->pos < j->n ? j->s[j->pos] : -1; }

int wds__json_peek(wds__json *j) {
  wds__json_ws(j);
  return at(j);
}

int wds__json_expect(wds__json *j, int c, const char *what) {
  wds__json_ws(j);
  if (at(j) != c)
    return wds__json_fail(j, j->pos,
                          j->pos < j->n ? what : "unexpected end of input");
  j->pos++;
  return WDS_OK;
}

int wds__json_open(wds__json *j, int open, const char *what, int *more) {
  wds__json_ws(j);
  if (at(j) != open)
    return wds__json_fail(j, j->pos, what);
  j->pos++;
  wds__json_ws(j);
  *more = at(j) != (open == '[' ? ']' : '}');
  if (!*more)
    j->pos++;
  return WDS_OK;
}

int wds__json_next(wds__json *j, int close, int *more) {
  wds__json_ws(j);
  if (at(j) == ',') {
    j->pos++;
    *more = 1;
    return WDS_OK;
  }
  *more = 0;
  return wds__json_expect(j, close,
                          close == ']' ? "expected ',' or ']' in an array"
                                       : "expected ',' or '}' in an object");
}

static int hex4(const unsigned char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = s[i], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return -1;
    v = v << 4 | d;
  }
  *out = v;
  return 0;
}

/* Appends byte c to out[0..cap) at *len (counting past cap too). */
static void put(char *out, size_t cap, size_t *len, unsigned c) {
  if (out && *len < cap)
    out[*len] = (char)c;
  (*len)++;
}

static void put_utf8(char *out, size_t cap, size_t *len, unsigned cp) {
  unsigned char b[4];
  size_t n = wds__utf8_encode(cp, b);
  for (size_t i = 0; i < n; i++)
    put(out, cap, len, b[i]);
}

int wds__json_string(wds__json *j, char *out, size_t cap, size_t *len) {
  *len = 0;
  wds__json_ws(j);
  if (at(j) != '"')
    return wds__json_fail(j, j->pos,
                          j->pos < j->n ? "expected a string"
                                        : "unexpected end of input");
  size_t start = j->pos++;
  for (;;) {
    if (j->pos >= j->n)
      return wds__json_fail(j, start, "unterminated string");
    unsigned c = j->s[j->pos];
    if (c == '"') {
      j->pos++;
      return WDS_OK;
    }
    if (c < 0x20)
      return wds__json_fail(j, j->pos, "control character in a string");
    if (c != '\\') {
      size_t l = c < 0x80 ? 1 : wds__utf8_len(j->s + j->pos, j->n - j->pos);
      if (l == 0)
        return wds__json_fail(j, j->pos, "invalid UTF-8 in a string");
      for (size_t i = 0; i < l; i++)
        put(out, cap, len, j->s[j->pos + i]);
      j->pos += l;
      continue;
    }
    size_t esc = j->pos;
    if (j->pos + 1 >= j->n)
      return wds__json_fail(j, start, "unterminated string");
    c = j->s[j->pos + 1];
    j->pos += 2;
    switch (c) {
    case '"':
    case '\\':
    case '/':
      put(out, cap, len, c);
      continue;
    case 'b':
      put(out, cap, len, '\b');
      continue;
    case 'f':
      put(out, cap, len, '\f');
      continue;
    case 'n':
      put(out, cap, len, '\n');
      continue;
    case 'r':
      put(out, cap, len, '\r');
      continue;
    case 't':
      put(out, cap, len, '\t');
      continue;
    case 'u':
      break;
    default:
      return wds__json_fail(j, esc, "invalid escape in a string");
    }
    unsigned cp, lo;
    if (j->pos + 4 > j->n || hex4(j->s + j->pos, &cp) != 0)
      return wds__json_fail(j, esc, "invalid \\u escape (4 hex digits needed)");
    j->pos += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (j->pos + 6 <= j->n && j->s[j->pos] == '\\' &&
          j->s[j->pos + 1] == 'u' && hex4(j->s + j->pos + 2, &lo) == 0 &&
          lo >= 0xDC00 && lo <= 0xDFFF) {
        j->pos += 6;
        put_utf8(out, cap, len,
                 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
        continue;
      }
      return wds__json_fail(j, esc, "unpaired surrogate in a \\u escape");
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      if (!(j->flags & WDS__JSON_SURROGATEESCAPE) || cp < 0xDC80 || cp > 0xDCFF)
        return wds__json_fail(j, esc, "unpaired surrogate in a \\u escape");
      put(out, cap, len, cp & 0xFF); /* surrogateescape: a raw byte */
      continue;
    }
    put_utf8(out, cap, len, cp);
  }
}

int wds__json_string_dup(wds__json *j, const char *what, char **out,
                         size_t *len_out) {
  char msg[160];
  size_t len, start;
  int rc;
  *out = NULL;
  wds__json_ws(j);
  start = j->pos;
  if ((rc = wds__json_string(j, NULL, 0, &len)) != WDS_OK)
    return rc;
  char *s = malloc(len + 1);
  if (!s)
    return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
  j->pos = start;
  if ((rc = wds__json_string(j, s, len, &len)) != WDS_OK) {
    free(s);
    return rc;
  }
  s[len] = '\0';
  if (strlen(s) != len) {
    free(s);
    snprintf(msg, sizeof msg, "%s contains a NUL character", what);
    return wds__json_fail(j, start, msg);
  }
  *out = s;
  if (len_out)
    *len_out = len;
  return WDS_OK;
}

int wds__json_key(wds__json *j, char *key, size_t cap) {
  size_t len;
  int rc = wds__json_string(j, key, cap - 1, &len);
  if (rc != WDS_OK)
    return rc;
  key[len < cap - 1 ? len : cap - 1] = '\0';
  if (len >= cap - 1 || memchr(key, '\0', len))
    key[0] = '\0'; /* matches nothing */
  return wds__json_expect(j, ':', "expected ':' after an object key");
}

int wds__json_number(wds__json *j, int *is_uint, uint64_t *val) {
  size_t start = j->pos;
  int neg = 0, integral = 1, fits = 1, c;
  uint64_t v = 0;
  *is_uint = 0;
  if (at(j) == '-') {
    neg = 1;
    j->pos++;
  }
  c = at(j);
  if (c == '0') {
    j->pos++;
    c = at(j);
    if (c >= '0' && c <= '9')
      return wds__json_fail(j, start, "number with a leading zero");
  } else if (c >= '1' && c <= '9') {
    while ((c = at(j)) >= '0' && c <= '9') {
      unsigned d = (unsigned)(c - '0');
      if (v > (UINT64_MAX - d) / 10)
        fits = 0;
      else
        v = v * 10 + d;
      j->pos++;
    }
  } else {
    return wds__json_fail(j, start, "invalid number");
  }
  if (at(j) == '.') {
    integral = 0;
    j->pos++;
    if (!((c = at(j)) >= '0' && c <= '9'))
      return wds__json_fail(j, start,
                            "invalid number (digits must follow '.')");
    while ((c = at(j)) >= '0' && c <= '9')
      j->pos++;
  }
  if (at(j) == 'e' || at(j) == 'E') {
    integral = 0;
    j->pos++;
    if (at(j) == '+' || at(j) == '-')
      j->pos++;
    if (!((c = at(j)) >= '0' && c <= '9'))
      return wds__json_fail(j, start,
                            "invalid number (digits must follow 'e')");
    while ((c = at(j)) >= '0' && c <= '9')
      j->pos++;
  }
  if (!neg && integral) {
    *is_uint = fits ? 1 : 2;
    *val = fits ? v : UINT64_MAX;
  }
  return WDS_OK;
}

int wds__json_literal(wds__json *j, const char *word) {
  size_t n = strlen(word);
  if (j->n - j->pos < n || memcmp(j->s + j->pos, word, n) != 0)
    return wds__json_fail(j, j->pos, "invalid value");
  j->pos += n;
  return WDS_OK;
}

/* Skips an array or object; the opening byte is at j->pos. */
static int skip_container(wds__json *j, int depth) {
  int open = j->s[j->pos], close = open == '[' ? ']' : '}', more, rc;
  if (depth > WDS__JSON_MAX_DEPTH)
    return wds__json_fail(j, j->pos, "nesting deeper than 64 levels");
  if ((rc = wds__json_open(j, open, "", &more)) != WDS_OK)
    return rc;
  while (more) {
    size_t len;
    if (close == '}') {
      if ((rc = wds__json_string(j, NULL, 0, &len)) != WDS_OK ||
          (rc = wds__json_expect(j, ':', "expected ':' after an object key")) !=
              WDS_OK)
        return rc;
    }
    if ((rc = wds__json_skip(j, depth + 1)) != WDS_OK ||
        (rc = wds__json_next(j, close, &more)) != WDS_OK)
      return rc;
  }
  return WDS_OK;
}

int wds__json_skip(wds__json *j, int depth) {
  int c = wds__json_peek(j), is_uint;
  uint64_t v;
  size_t len;
  switch (c) {
  case -1:
    return wds__json_fail(j, j->pos, "unexpected end of input");
  case '{':
  case '[':
    return skip_container(j, depth);
  case '"':
    return wds__json_string(j, NULL, 0, &len);
  case 't':
    return wds__json_literal(j, "true");
  case 'f':
    return wds__json_literal(j, "false");
  case 'n':
    return wds__json_literal(j, "null");
  default:
    if (c == '-' || (c >= '0' && c <= '9'))
      return wds__json_number(j, &is_uint, &v);
    return wds__json_fail(j, j->pos, "invalid value");
  }
}

int wds__json_end(wds__json *j, const char *what) {
  char msg[160];
  wds__json_ws(j);
  if (j->pos >= j->n)
    return WDS_OK;
  snprintf(msg, sizeof msg, "unexpected data after %s", what);
  return wds__json_fail(j, j->pos, msg);
}

/* ---- writing ---- */

void wds__json_write_string(FILE *f, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  putc('"', f);
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    if (c == '"' || c == '\\') {
      putc('\\', f);
      putc((int)c, f);
      i++;
    } else if (c < 0x20) {
      switch (c) {
      case '\n':
        fputs("\\n", f);
        break;
      case '\t':
        fputs("\\t", f);
        break;
      case '\r':
        fputs("\\r", f);
        break;
      default:
        fprintf(f, "\\u%04x", c);
      }
      i++;
    } else {
      size_t l = wds__utf8_len(s + i, n - i);
      if (l == 0) {
        fprintf(f, "\\udc%02x", c);
        i++;
      } else {
        fwrite(s + i, 1, l, f);
        i += l;
      }
    }
  }
  putc('"', f);
}

void wds__json_write_double(FILE *f, const char *fmt, double v) {
  if (isfinite(v))
    fprintf(f, fmt, v);
  else
    fputs("null", f);
}

void wds__json_write_i64_or_null(FILE *f, int64_t v) {
  if (v >= 0)
    fprintf(f, "%" PRId64, v);
  else
    fputs("null", f);
}
