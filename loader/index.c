/* index.c — reads the shard-set index (format in index.h).
 *
 * A small strict JSON parser, written for this one format: recursive descent
 * over a byte buffer with an explicit length (no NUL terminator needed),
 * nesting limited to WDS__JSON_MAX_DEPTH so the stack is bounded whatever the
 * input. Strict means RFC 8259: no comments, trailing commas, leading zeros,
 * BOM, raw control characters or invalid UTF-8 in strings. Strings decode all
 * escapes; \uXXXX surrogate pairs become UTF-8, and a lone \udc80..\udcff
 * becomes the raw byte 0x80..0xff (Python's surrogateescape, which is how
 * `wds` tools write names that are not UTF-8); other lone surrogates are
 * errors. Values the index does not use are validated and skipped, whatever
 * their type, without allocating.
 *
 * Every error is WDS_ERR_FORMAT with "offset N: what" (N counted in bytes
 * from the start of the text); wds__index_load prefixes the file name.
 *
 * Lookups binary-search two sorted permutations of the entries (by url and
 * by resolved path), so opening a loader on n shards costs O(n log n).
 *
 * Counts are untrusted (see index.h): an entry whose nsamples, "samples"
 * list and tar_bytes contradict each other is an error naming it, and
 * wds__index_check_count() bounds a count by the shard file's size.
 *
 * The per-sample detail ("samples": keys, [offset, size] per extension) is
 * kept only with WDS__INDEX_SAMPLES (tools: `wds ls --summary --index`);
 * the loader skips it, so its memory stays O(shards). The public handle
 * (wds/index.h) at the end of this file wraps the same reader. */
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"
#include "shards/tar.h"

#define WDS__JSON_MAX_DEPTH 64
#define WDS__INDEX_MAX_BYTES ((size_t)1 << 31) /* 2 GiB of JSON */

typedef struct jp {
  const unsigned char *s;
  size_t n, pos;
  wds__err *e;
  unsigned flags; /* WDS__INDEX_SAMPLES: keep the sample detail */
} jp;

static int jfail(jp *p, size_t at, const char *what) {
  return wds__fail(p->e, WDS_ERR_FORMAT, "offset %zu: %s", at, what);
}

static void skip_ws(jp *p) {
  while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                           p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
    p->pos++;
}

/* The next byte, or -1 at the end. */
static int peek(const jp *p) { return p->pos < p->n ? p->s[p->pos] : -1; }

/* Expects byte c (after blanks). */
static int expect(jp *p, int c, const char *what) {
  skip_ws(p);
  if (peek(p) != c)
    return jfail(p, p->pos, p->pos < p->n ? what : "unexpected end of input");
  p->pos++;
  return WDS_OK;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0], cp, min;
  size_t len;
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (len > n)
    return 0;
  cp = c & (0xFFu >> (len + 1));
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
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
  if (cp < 0x80) {
    put(out, cap, len, cp);
  } else if (cp < 0x800) {
    put(out, cap, len, 0xC0 | cp >> 6);
    put(out, cap, len, 0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    put(out, cap, len, 0xE0 | cp >> 12);
    put(out, cap, len, 0x80 | (cp >> 6 & 0x3F));
    put(out, cap, len, 0x80 | (cp & 0x3F));
  } else {
    put(out, cap, len, 0xF0 | cp >> 18);
    put(out, cap, len, 0x80 | (cp >> 12 & 0x3F));
    put(out, cap, len, 0x80 | (cp >> 6 & 0x3F));
    put(out, cap, len, 0x80 | (cp & 0x3F));
  }
}

/* Parses the string at p->pos (blanks skipped first), validating all of it;
 * writes up to cap decoded bytes to out (may be NULL) and the full decoded
 * length to *len. Does not NUL-terminate. */
static int parse_string(jp *p, char *out, size_t cap, size_t *len) {
  *len = 0;
  skip_ws(p);
  if (peek(p) != '"')
    return jfail(p, p->pos,
                 p->pos < p->n ? "expected a string"
                               : "unexpected end of input");
  size_t start = p->pos++;
  for (;;) {
    if (p->pos >= p->n)
      return jfail(p, start, "unterminated string");
    unsigned c = p->s[p->pos];
    if (c == '"') {
      p->pos++;
      return WDS_OK;
    }
    if (c < 0x20)
      return jfail(p, p->pos, "control character in a string");
    if (c != '\\') {
      size_t l = utf8_len(p->s + p->pos, p->n - p->pos);
      if (l == 0)
        return jfail(p, p->pos, "invalid UTF-8 in a string");
      for (size_t i = 0; i < l; i++)
        put(out, cap, len, p->s[p->pos + i]);
      p->pos += l;
      continue;
    }
    size_t esc = p->pos;
    if (p->pos + 1 >= p->n)
      return jfail(p, start, "unterminated string");
    c = p->s[p->pos + 1];
    p->pos += 2;
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
      return jfail(p, esc, "invalid escape in a string");
    }
    unsigned cp, lo;
    if (p->pos + 4 > p->n || hex4(p->s + p->pos, &cp) != 0)
      return jfail(p, esc, "invalid \\u escape (4 hex digits needed)");
    p->pos += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (p->pos + 6 <= p->n && p->s[p->pos] == '\\' &&
          p->s[p->pos + 1] == 'u' && hex4(p->s + p->pos + 2, &lo) == 0 &&
          lo >= 0xDC00 && lo <= 0xDFFF) {
        p->pos += 6;
        put_utf8(out, cap, len,
                 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
        continue;
      }
      return jfail(p, esc, "unpaired surrogate in a \\u escape");
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      if (cp < 0xDC80 || cp > 0xDCFF)
        return jfail(p, esc, "unpaired surrogate in a \\u escape");
      put(out, cap, len, cp & 0xFF); /* surrogateescape: a raw byte */
      continue;
    }
    put_utf8(out, cap, len, cp);
  }
}

/* Parses a number; *is_uint is set when it is a non-negative integer
 * without fraction or exponent, and *val to its value (UINT64_MAX when it
 * does not fit: *is_uint is then 2). */
static int parse_number(jp *p, int *is_uint, uint64_t *val) {
  size_t start = p->pos;
  int neg = 0, integral = 1, fits = 1;
  uint64_t v = 0;
  *is_uint = 0;
  if (peek(p) == '-') {
    neg = 1;
    p->pos++;
  }
  int c = peek(p);
  if (c == '0') {
    p->pos++;
    c = peek(p);
    if (c >= '0' && c <= '9')
      return jfail(p, start, "number with a leading zero");
  } else if (c >= '1' && c <= '9') {
    while ((c = peek(p)) >= '0' && c <= '9') {
      unsigned d = (unsigned)(c - '0');
      if (v > (UINT64_MAX - d) / 10)
        fits = 0;
      else
        v = v * 10 + d;
      p->pos++;
    }
  } else {
    return jfail(p, start, "invalid number");
  }
  if (peek(p) == '.') {
    integral = 0;
    p->pos++;
    if (!((c = peek(p)) >= '0' && c <= '9'))
      return jfail(p, start, "invalid number (digits must follow '.')");
    while ((c = peek(p)) >= '0' && c <= '9')
      p->pos++;
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    integral = 0;
    p->pos++;
    if (peek(p) == '+' || peek(p) == '-')
      p->pos++;
    if (!((c = peek(p)) >= '0' && c <= '9'))
      return jfail(p, start, "invalid number (digits must follow 'e')");
    while ((c = peek(p)) >= '0' && c <= '9')
      p->pos++;
  }
  if (!neg && integral) {
    *is_uint = fits ? 1 : 2;
    *val = fits ? v : UINT64_MAX;
  }
  return WDS_OK;
}

static int skip_value(jp *p, int depth);

/* Skips an array or object; the opening byte is at p->pos. */
static int skip_container(jp *p, int depth) {
  size_t open_at = p->pos;
  int close = p->s[p->pos] == '[' ? ']' : '}';
  if (depth > WDS__JSON_MAX_DEPTH)
    return jfail(p, open_at, "nesting deeper than 64 levels");
  p->pos++;
  skip_ws(p);
  if (peek(p) == close) {
    p->pos++;
    return WDS_OK;
  }
  for (;;) {
    int rc;
    size_t len;
    if (close == '}') {
      if ((rc = parse_string(p, NULL, 0, &len)) != WDS_OK ||
          (rc = expect(p, ':', "expected ':' after an object key")) != WDS_OK)
        return rc;
    }
    if ((rc = skip_value(p, depth + 1)) != WDS_OK)
      return rc;
    skip_ws(p);
    if (peek(p) == ',') {
      p->pos++;
      continue;
    }
    if (peek(p) == close) {
      p->pos++;
      return WDS_OK;
    }
    return jfail(p, p->pos,
                 p->pos >= p->n ? "unexpected end of input"
                 : close == ']' ? "expected ',' or ']' in an array"
                                : "expected ',' or '}' in an object");
  }
}

static int skip_literal(jp *p, const char *word) {
  size_t n = strlen(word);
  if (p->n - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
    return jfail(p, p->pos, "invalid value");
  p->pos += n;
  return WDS_OK;
}

/* Validates and skips one value of any type at nesting depth `depth`. */
static int skip_value(jp *p, int depth) {
  skip_ws(p);
  int c = peek(p), is_uint;
  uint64_t v;
  size_t len;
  switch (c) {
  case -1:
    return jfail(p, p->pos, "unexpected end of input");
  case '{':
  case '[':
    return skip_container(p, depth);
  case '"':
    return parse_string(p, NULL, 0, &len);
  case 't':
    return skip_literal(p, "true");
  case 'f':
    return skip_literal(p, "false");
  case 'n':
    return skip_literal(p, "null");
  default:
    if (c == '-' || (c >= '0' && c <= '9'))
      return parse_number(p, &is_uint, &v);
    return jfail(p, p->pos, "invalid value");
  }
}

/* Parses an object key into key[0..cap) (NUL-terminated; a longer key is
 * cut, which no known key is) and the ':' after it. */
static int parse_key(jp *p, char *key, size_t cap) {
  size_t len;
  int rc = parse_string(p, key, cap - 1, &len);
  if (rc != WDS_OK)
    return rc;
  key[len < cap - 1 ? len : cap - 1] = '\0';
  if (len >= cap - 1 || memchr(key, '\0', len))
    key[0] = '\0'; /* matches nothing */
  return expect(p, ':', "expected ':' after an object key");
}

/* Parses a non-negative integer value no larger than max; with allow_null,
 * `null` is accepted and sets *is_null. */
static int parse_count(jp *p, const char *name, uint64_t max, int allow_null,
                       uint64_t *out, int *is_null) {
  char msg[96];
  skip_ws(p);
  size_t at = p->pos;
  *is_null = 0;
  if (allow_null && peek(p) == 'n') {
    *is_null = 1;
    *out = 0;
    return skip_literal(p, "null");
  }
  int is_uint = 0, c = peek(p);
  uint64_t v = 0;
  if (c == '-' || (c >= '0' && c <= '9')) {
    int rc = parse_number(p, &is_uint, &v);
    if (rc != WDS_OK)
      return rc;
  }
  if (is_uint != 1 || v > max) {
    snprintf(msg, sizeof msg, "\"%s\" must be a non-negative integer%s", name,
             is_uint ? " (too large)" : "");
    return jfail(p, at, msg);
  }
  *out = v;
  return WDS_OK;
}

/* Returns a pointer to the local path a URL names (after file://), or NULL
 * when it is not a local path: "-", pipe:, any scheme://. */
static const char *local_path(const char *url) {
  if (strcmp(url, "-") == 0 || strncmp(url, "pipe:", 5) == 0)
    return NULL;
  if (strncmp(url, "file://", 7) == 0) {
    const char *p = url + 7;
    if (strncmp(p, "localhost/", 10) == 0)
      p += 9;
    return p;
  }
  const char *p = url;
  while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
         (*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.')
    p++;
  if (p > url && strncmp(p, "://", 3) == 0)
    return NULL;
  return url;
}

/* dir + "/" + path, lexically normalised: repeated '/' and "." components
 * removed ("..": kept, as it depends on symlinks). Malloc'd. */
static char *join_normalize(const char *dir, const char *path) {
  size_t dn = dir ? strlen(dir) : 0, pn = strlen(path);
  char *in = malloc(dn + pn + 2), *out = malloc(dn + pn + 3);
  if (!in || !out) {
    free(in);
    free(out);
    return NULL;
  }
  size_t n = 0;
  if (dn && path[0] != '/') {
    memcpy(in, dir, dn);
    in[dn] = '/';
    n = dn + 1;
  }
  memcpy(in + n, path, pn + 1);
  size_t o = 0;
  if (in[0] == '/')
    out[o++] = '/';
  for (size_t i = 0; in[i];) {
    while (in[i] == '/')
      i++;
    size_t j = i;
    while (in[j] && in[j] != '/')
      j++;
    if (j == i)
      break;
    if (!(j - i == 1 && in[i] == '.')) {
      if (o && out[o - 1] != '/')
        out[o++] = '/';
      memcpy(out + o, in + i, j - i);
      o += j - i;
    }
    i = j;
  }
  if (o == 0)
    out[o++] = '.';
  out[o] = '\0';
  free(in);
  return out;
}

/* The resolved path of an entry url: local relative paths joined to dir. */
static char *resolve(const char *dir, const char *url) {
  const char *lp = local_path(url);
  if (!lp) {
    char *s = strdup(url);
    return s;
  }
  return join_normalize(lp == url ? dir : NULL, lp);
}

/* Parses a string value into a new NUL-terminated copy (*out, malloc'd);
 * a NUL inside is an error naming `what`. */
static int parse_new_string(jp *p, const char *what, char **out) {
  char msg[96];
  size_t len, at;
  int rc;
  *out = NULL;
  skip_ws(p);
  at = p->pos;
  if ((rc = parse_string(p, NULL, 0, &len)) != WDS_OK)
    return rc;
  char *s = malloc(len + 1);
  if (!s)
    return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
  p->pos = at;
  if ((rc = parse_string(p, s, len, &len)) != WDS_OK) {
    free(s);
    return rc;
  }
  s[len] = '\0';
  if (strlen(s) != len) {
    free(s);
    snprintf(msg, sizeof msg, "%s contains a NUL character", what);
    return jfail(p, at, msg);
  }
  *out = s;
  return WDS_OK;
}

/* Parses one [OFFSET, SIZE] pair. */
static int parse_pair(jp *p, wds_index_field *f) {
  int rc, is_null;
  skip_ws(p);
  size_t at = p->pos;
  if (peek(p) != '[')
    return jfail(p, at, "a field must be [offset, size]");
  p->pos++;
  if ((rc = parse_count(p, "offset", UINT64_MAX, 0, &f->offset, &is_null)) !=
          WDS_OK ||
      (rc = expect(p, ',', "a field must be [offset, size]")) != WDS_OK ||
      (rc = parse_count(p, "size", UINT64_MAX, 0, &f->size_bytes, &is_null)) !=
          WDS_OK ||
      (rc = expect(p, ']', "a field must be [offset, size]")) != WDS_OK)
    return rc;
  return WDS_OK;
}

static void free_sample(wds_index_sample *s) {
  for (size_t i = 0; i < s->field_count; i++)
    free((char *)s->fields[i].ext);
  free((wds_index_field *)s->fields);
  free((char *)s->key);
}

/* Parses {"EXT": [OFFSET, SIZE], ...} into s->fields; an extension listed
 * twice is an error. */
static int parse_fields(jp *p, wds_index_sample *s) {
  size_t cap = 0;
  int rc;
  skip_ws(p);
  if (peek(p) != '{')
    return jfail(p, p->pos, "\"fields\" must be an object");
  p->pos++;
  skip_ws(p);
  if (peek(p) == '}') {
    p->pos++;
    return WDS_OK;
  }
  for (;;) {
    wds_index_field *grown = wds__grow((wds_index_field *)s->fields, &cap,
                                       s->field_count + 1, sizeof *grown, 4);
    if (!grown)
      return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
    s->fields = grown;
    wds_index_field *f = &grown[s->field_count];
    char *ext;
    skip_ws(p);
    size_t at = p->pos;
    if ((rc = parse_new_string(p, "an extension", &ext)) != WDS_OK)
      return rc;
    f->ext = ext;
    s->field_count++;
    for (size_t i = 0; i + 1 < s->field_count; i++)
      if (strcmp(grown[i].ext, ext) == 0)
        return jfail(p, at, "extension listed twice in a sample");
    if ((rc = expect(p, ':', "expected ':' after an object key")) != WDS_OK ||
        (rc = parse_pair(p, f)) != WDS_OK)
      return rc;
    skip_ws(p);
    if (peek(p) == ',') {
      p->pos++;
      continue;
    }
    return expect(p, '}', "expected ',' or '}' in an object");
  }
}

/* Parses {"key": K, "fields": {...}} (other keys skipped). */
static int parse_sample(jp *p, wds_index_sample *s, int depth) {
  char key[16];
  size_t obj_at = p->pos;
  int rc, have_key = 0, have_fields = 0;
  if ((rc = expect(p, '{', "samples must be objects")) != WDS_OK)
    return rc;
  skip_ws(p);
  if (peek(p) == '}')
    p->pos++;
  else
    for (;;) {
      skip_ws(p);
      size_t key_at = p->pos;
      if ((rc = parse_key(p, key, sizeof key)) != WDS_OK)
        return rc;
      int *seen = strcmp(key, "key") == 0      ? &have_key
                  : strcmp(key, "fields") == 0 ? &have_fields
                                               : NULL;
      if (seen && *seen)
        return jfail(p, key_at, "duplicate key in a sample");
      if (seen)
        *seen = 1;
      if (seen == &have_key) {
        char *k;
        if ((rc = parse_new_string(p, "\"key\"", &k)) != WDS_OK)
          return rc;
        s->key = k;
      } else if (seen == &have_fields) {
        if ((rc = parse_fields(p, s)) != WDS_OK)
          return rc;
      } else if ((rc = skip_value(p, depth + 1)) != WDS_OK) {
        return rc;
      }
      skip_ws(p);
      if (peek(p) == ',') {
        p->pos++;
        continue;
      }
      if ((rc = expect(p, '}', "expected ',' or '}' in an object")) != WDS_OK)
        return rc;
      break;
    }
  if (!have_key || !have_fields)
    return jfail(p, obj_at,
                 have_key ? "a sample has no \"fields\""
                          : "a sample has no \"key\"");
  return WDS_OK;
}

/* Parses the "samples" array of an entry into ent->samples. */
static int parse_samples(jp *p, wds__index_entry *ent, int depth) {
  size_t cap = 0;
  int rc;
  skip_ws(p);
  if (peek(p) != '[')
    return jfail(p, p->pos, "\"samples\" must be an array");
  p->pos++;
  ent->has_samples = 1;
  skip_ws(p);
  if (peek(p) == ']') {
    p->pos++;
    return WDS_OK;
  }
  for (;;) {
    wds_index_sample *grown =
        wds__grow(ent->samples, &cap, ent->sample_count + 1, sizeof *grown, 64);
    if (!grown)
      return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
    ent->samples = grown;
    wds_index_sample *s = &ent->samples[ent->sample_count++];
    memset(s, 0, sizeof *s);
    skip_ws(p);
    if ((rc = parse_sample(p, s, depth + 1)) != WDS_OK)
      return rc;
    skip_ws(p);
    if (peek(p) == ',') {
      p->pos++;
      continue;
    }
    return expect(p, ']', "expected ',' or ']' in an array");
  }
}

/* Validates the "samples" array at p->pos and counts its entries (each a
 * JSON value; parse_samples checks their shape when they are kept). */
static int count_samples(jp *p, size_t *count, int depth) {
  int rc;
  *count = 0;
  skip_ws(p);
  if (peek(p) != '[')
    return jfail(p, p->pos, "\"samples\" must be an array");
  p->pos++;
  skip_ws(p);
  if (peek(p) == ']') {
    p->pos++;
    return WDS_OK;
  }
  for (;;) {
    if ((rc = skip_value(p, depth + 1)) != WDS_OK)
      return rc;
    (*count)++;
    skip_ws(p);
    if (peek(p) == ',') {
      p->pos++;
      continue;
    }
    return expect(p, ']', "expected ',' or ']' in an array");
  }
}

/* What an entry's tar_bytes (the decompressed tar stream's length, up to
 * and including its end-of-archive block) can hold: every sample starts
 * with a 512-byte header, so at most tar_bytes / 512 - 1 samples, and a
 * member's data (padded to 512 bytes) lies between its header at OFFSET
 * and that last block. */
static int check_tar_bytes(jp *p, size_t i, const wds__index_entry *ent,
                           size_t at) {
  char msg[900];
  if (ent->tar_bytes < 0)
    return WDS_OK;
  uint64_t tb = (uint64_t)ent->tar_bytes;
  uint64_t most = tb >= 1024 ? tb / 512 - 1 : 0;
  if (ent->nsamples > most) {
    snprintf(msg, sizeof msg,
             "shardlist[%zu] (\"%.200s\"): \"nsamples\" %llu is more than "
             "its \"tar_bytes\" %llu can hold (at most %llu: a sample takes "
             "a 512-byte header, and the stream ends with a 512-byte block)",
             i, ent->url, (unsigned long long)ent->nsamples,
             (unsigned long long)tb, (unsigned long long)most);
    return jfail(p, at, msg);
  }
  for (size_t j = 0; j < ent->sample_count; j++) {
    const wds_index_sample *s = &ent->samples[j];
    for (size_t k = 0; k < s->field_count; k++) {
      const wds_index_field *f = &s->fields[k];
      uint64_t padded = (f->size_bytes + 511) & ~(uint64_t)511;
      if (tb < 1024 || f->offset > tb - 1024 || f->size_bytes > tb ||
          padded > tb - 1024 - f->offset) {
        snprintf(msg, sizeof msg,
                 "shardlist[%zu] (\"%.200s\"): sample \"%.200s\" field "
                 "\"%.40s\" [%llu, %llu] does not fit in its \"tar_bytes\" "
                 "%llu",
                 i, ent->url, s->key, f->ext, (unsigned long long)f->offset,
                 (unsigned long long)f->size_bytes, (unsigned long long)tb);
        return jfail(p, at, msg);
      }
    }
  }
  return WDS_OK;
}

/* Parses one shardlist entry (an object at p->pos) into *ent. */
static int parse_entry(jp *p, size_t i, const char *dir, wds__index_entry *ent,
                       int depth) {
  char msg[320], key[16];
  size_t obj_at = p->pos;
  int rc = WDS_OK, have_url = 0, have_n = 0, have_size = 0, have_tar = 0,
      have_samples = 0;
  size_t samples_at = 0, listed = 0;
  ent->filesize = -1;
  ent->tar_bytes = -1;
  if (depth > WDS__JSON_MAX_DEPTH)
    return jfail(p, obj_at, "nesting deeper than 64 levels");
  if ((rc = expect(p, '{', "shardlist entries must be objects")) != WDS_OK)
    return rc;
  skip_ws(p);
  if (peek(p) == '}')
    p->pos++;
  else
    for (;;) {
      skip_ws(p);
      size_t key_at = p->pos;
      if ((rc = parse_key(p, key, sizeof key)) != WDS_OK)
        return rc;
      int *seen =
          strcmp(key, "url") == 0         ? &have_url
          : strcmp(key, "nsamples") == 0  ? &have_n
          : strcmp(key, "filesize") == 0  ? &have_size
          : strcmp(key, "tar_bytes") == 0 ? &have_tar
          : strcmp(key, "samples") == 0 &&
                  (p->flags & (WDS__INDEX_SAMPLES | WDS__INDEX_COUNT_SAMPLES))
              ? &have_samples
              : NULL;
      if (seen && *seen) {
        snprintf(msg, sizeof msg, "duplicate key \"%s\"", key);
        return jfail(p, key_at, msg);
      }
      if (seen)
        *seen = 1;
      if (seen == &have_url) {
        skip_ws(p);
        size_t at = p->pos, len;
        if ((rc = parse_string(p, NULL, 0, &len)) != WDS_OK)
          return rc;
        if (len == 0)
          return jfail(p, at, "\"url\" is empty");
        ent->url = malloc(len + 1);
        if (!ent->url)
          return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
        p->pos = at;
        if ((rc = parse_string(p, ent->url, len, &len)) != WDS_OK)
          return rc;
        ent->url[len] = '\0';
        if (strlen(ent->url) != len)
          return jfail(p, at, "\"url\" contains a NUL character");
        ent->path = resolve(dir, ent->url);
        if (!ent->path)
          return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
      } else if (seen == &have_n) {
        int is_null;
        if ((rc = parse_count(p, "nsamples", UINT64_MAX, 0, &ent->nsamples,
                              &is_null)) != WDS_OK)
          return rc;
      } else if (seen == &have_size) {
        uint64_t v;
        int is_null;
        if ((rc = parse_count(p, "filesize", INT64_MAX, 1, &v, &is_null)) !=
            WDS_OK)
          return rc;
        ent->filesize = is_null ? -1 : (int64_t)v; /* null: unknown */
      } else if (seen == &have_tar) {
        uint64_t v;
        int is_null;
        if ((rc = parse_count(p, "tar_bytes", INT64_MAX, 1, &v, &is_null)) !=
            WDS_OK)
          return rc;
        ent->tar_bytes = is_null ? -1 : (int64_t)v;
      } else if (seen == &have_samples) {
        skip_ws(p);
        samples_at = p->pos;
        if (p->flags & WDS__INDEX_SAMPLES)
          rc = parse_samples(p, ent, depth + 1);
        else
          rc = count_samples(p, &listed, depth + 1);
        if (rc != WDS_OK)
          return rc;
        if (p->flags & WDS__INDEX_SAMPLES)
          listed = ent->sample_count;
      } else if ((rc = skip_value(p, depth + 1)) != WDS_OK) {
        return rc;
      }
      skip_ws(p);
      if (peek(p) == ',') {
        p->pos++;
        continue;
      }
      if ((rc = expect(p, '}', "expected ',' or '}' in an object")) != WDS_OK)
        return rc;
      break;
    }
  if (!have_url || !have_n) {
    snprintf(msg, sizeof msg, "shardlist[%zu] has no \"%s\"", i,
             have_url ? "nsamples" : "url");
    return jfail(p, obj_at, msg);
  }
  if (have_samples && listed != ent->nsamples) {
    snprintf(msg, sizeof msg,
             "shardlist[%zu] (\"%.200s\") lists %zu samples but "
             "\"nsamples\" is %llu",
             i, ent->url, listed, (unsigned long long)ent->nsamples);
    return jfail(p, samples_at, msg);
  }
  return check_tar_bytes(p, i, ent, obj_at);
}

static int parse_shardlist(jp *p, const char *dir, wds__index *ix) {
  size_t cap = 0;
  int rc;
  skip_ws(p);
  if (peek(p) != '[')
    return jfail(p, p->pos, "\"shardlist\" must be an array");
  p->pos++;
  skip_ws(p);
  if (peek(p) == ']') {
    p->pos++;
    return WDS_OK;
  }
  for (;;) {
    wds__index_entry *grown =
        wds__grow(ix->shards, &cap, ix->count + 1, sizeof *grown, 64);
    if (!grown)
      return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
    ix->shards = grown;
    wds__index_entry *ent = &ix->shards[ix->count++];
    memset(ent, 0, sizeof *ent);
    skip_ws(p);
    if ((rc = parse_entry(p, ix->count - 1, dir, ent, 3)) != WDS_OK)
      return rc;
    skip_ws(p);
    if (peek(p) == ',') {
      p->pos++;
      continue;
    }
    return expect(p, ']', "expected ',' or ']' in an array");
  }
}

/* (key, entry) pairs: qsort has no context argument, and a global would not
 * be thread-safe. Ties break by entry number so the order is total. */
typedef struct keyed {
  const char *key;
  size_t index;
} keyed;

static int keyed_cmp(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c)
    return c;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Sorts entries by url (field 0) or path (field 1) into *perm; a repeated
 * key is an error naming both entries. */
static int sort_entries(wds__index *ix, int by_path, size_t **perm,
                        wds__err *e) {
  int rc = WDS_OK;
  keyed *k = malloc((ix->count ? ix->count : 1) * sizeof *k);
  *perm = malloc((ix->count ? ix->count : 1) * sizeof **perm);
  if (!k || !*perm) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < ix->count; i++) {
    k[i].key = by_path ? ix->shards[i].path : ix->shards[i].url;
    k[i].index = i;
  }
  qsort(k, ix->count, sizeof *k, keyed_cmp);
  for (size_t i = 0; i < ix->count; i++) {
    (*perm)[i] = k[i].index;
    if (i && strcmp(k[i].key, k[i - 1].key) == 0) {
      const wds__index_entry *a = &ix->shards[k[i - 1].index],
                             *b = &ix->shards[k[i].index];
      if (by_path)
        rc = wds__fail(e, WDS_ERR_FORMAT,
                       "shardlist[%zu] (\"%s\") and shardlist[%zu] (\"%s\") "
                       "are the same file \"%s\"",
                       k[i - 1].index, a->url, k[i].index, b->url, a->path);
      else
        rc = wds__fail(e, WDS_ERR_FORMAT,
                       "duplicate url \"%s\" in shardlist[%zu] and "
                       "shardlist[%zu]",
                       a->url, k[i - 1].index, k[i].index);
      goto done;
    }
  }
done:
  free(k);
  return rc;
}

int wds__index_parse(const char *text, size_t size, const char *dir,
                     wds__index *out, wds__err *e) {
  return wds__index_parse_flags(text, size, dir, 0, out, e);
}

int wds__index_parse_flags(const char *text, size_t size, const char *dir,
                           unsigned flags, wds__index *out, wds__err *e) {
  wds__index ix = {0};
  jp p = {(const unsigned char *)text, size, 0, e, flags};
  int rc = WDS_OK, have_list = 0;
  char key[16];
  memset(out, 0, sizeof *out);
  if (!text && size)
    return wds__fail(e, WDS_ERR_INVALID, "NULL index text");
  if (!dir)
    dir = "";
  if ((rc = expect(&p, '{', "the index must be a JSON object")) != WDS_OK)
    goto done;
  skip_ws(&p);
  if (peek(&p) == '}')
    p.pos++;
  else
    for (;;) {
      skip_ws(&p);
      size_t key_at = p.pos;
      if ((rc = parse_key(&p, key, sizeof key)) != WDS_OK)
        goto done;
      if (strcmp(key, "shardlist") == 0) {
        if (have_list) {
          rc = jfail(&p, key_at, "duplicate key \"shardlist\"");
          goto done;
        }
        have_list = 1;
        rc = parse_shardlist(&p, dir, &ix);
      } else {
        rc = skip_value(&p, 2);
      }
      if (rc != WDS_OK)
        goto done;
      skip_ws(&p);
      if (peek(&p) == ',') {
        p.pos++;
        continue;
      }
      if ((rc = expect(&p, '}', "expected ',' or '}' in an object")) != WDS_OK)
        goto done;
      break;
    }
  skip_ws(&p);
  if (p.pos < p.n) {
    rc = jfail(&p, p.pos, "unexpected data after the index object");
    goto done;
  }
  if (!have_list) {
    rc = wds__fail(e, WDS_ERR_FORMAT, "no \"shardlist\" in the index");
    goto done;
  }
  if ((rc = sort_entries(&ix, 0, &ix.by_url_, e)) != WDS_OK ||
      (rc = sort_entries(&ix, 1, &ix.by_path_, e)) != WDS_OK)
    goto done;
  *out = ix;
  return WDS_OK;
done:
  wds__index_free(&ix);
  return rc;
}

int wds__index_load(const char *path, wds__index *out, wds__err *e) {
  return wds__index_load_flags(path, 0, out, e);
}

int wds__index_load_flags(const char *path, unsigned flags, wds__index *out,
                          wds__err *e) {
  int rc = WDS_OK, fd = -1;
  char *text = NULL, *dir = NULL;
  memset(out, 0, sizeof *out);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    rc = wds__fail(e, WDS_ERR_OPEN, "%s: cannot open the index: %s", path,
                   strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    rc =
        wds__fail(e, WDS_ERR_OPEN, "%s: the index is not a regular file", path);
    goto done;
  }
  if ((uint64_t)st.st_size > WDS__INDEX_MAX_BYTES) {
    rc = wds__fail(e, WDS_ERR_LIMIT, "%s: the index is over %zu bytes", path,
                   WDS__INDEX_MAX_BYTES);
    goto done;
  }
  size_t size = (size_t)st.st_size, got = 0;
  text = malloc(size ? size : 1);
  const char *slash = strrchr(path, '/');
  size_t dn = slash ? (size_t)(slash - path) : 0;
  dir = malloc(dn + 2);
  if (!text || !dir) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  memcpy(dir, path, dn);
  if (slash && dn == 0)
    dir[dn++] = '/'; /* "/index.json" */
  dir[dn] = '\0';
  while (got < size) {
    ssize_t n = read(fd, text + got, size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      rc = wds__fail(e, WDS_ERR_IO, "%s: cannot read the index: %s", path,
                     strerror(errno));
      goto done;
    }
    if (n == 0)
      break; /* shrank while reading: parse what is there */
    got += (size_t)n;
  }
  rc = wds__index_parse_flags(text, got, dir, flags, out, e);
  if (rc != WDS_OK)
    wds__err_prefix(e, "%s", path);
  else
    out->dir_real_ = realpath(dir[0] ? dir : ".", NULL); /* NULL: unused */
done:
  if (fd >= 0)
    close(fd);
  free(text);
  free(dir);
  return rc;
}

/* The path of target relative to directory dir, both canonical (from
 * realpath): "a.tar", "sub/a.tar", "../a.tar". Malloc'd; NULL when out of
 * memory. The inverse of resolving a url against the index's directory,
 * and what `wds index -o` writes. */
static char *relative_to(const char *dir, const char *target) {
  size_t common = 0;
  for (size_t i = 0;; i++) {
    int dend = dir[i] == '\0' || dir[i] == '/';
    int tend = target[i] == '\0' || target[i] == '/';
    if (dend && tend)
      common = i;
    if (dir[i] != target[i] || dir[i] == '\0')
      break;
  }
  if (strcmp(dir, "/") == 0)
    common = 0;
  size_t ups = 0;
  for (const char *p = dir + common; *p; p++)
    if (*p == '/' && p[1] != '\0')
      ups++;
  const char *rest = target + common;
  while (*rest == '/')
    rest++;
  char *out = malloc(ups * 3 + strlen(rest) + 2);
  if (!out)
    return NULL;
  for (size_t k = 0; k < ups; k++)
    memcpy(out + 3 * k, "../", 3);
  strcpy(out + 3 * ups, rest);
  if (out[0] == '\0')
    strcpy(out, ".");
  return out;
}

const char *wds_index_local_path(const char *url) { return local_path(url); }

char *wds_index_url_for(const char *url, const char *index_dir_real) {
  const char *lp = local_path(url);
  if (!index_dir_real || !lp)
    return strdup(url);
  char *real = realpath(lp, NULL);
  if (!real)
    return strdup(url); /* reported when the shard is read */
  char *rel = relative_to(index_dir_real, real);
  free(real);
  return rel;
}

/* Binary search of perm (sorted by url or path) for key; -1 if absent. */
static long find(const wds__index *ix, const size_t *perm, int by_path,
                 const char *key) {
  size_t lo = 0, hi = ix->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const wds__index_entry *m = &ix->shards[perm[mid]];
    int c = strcmp(key, by_path ? m->path : m->url);
    if (c == 0)
      return (long)perm[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return -1;
}

int wds__index_lookup(const wds__index *ix, const char *url, uint64_t *nsamples,
                      wds__err *e) {
  size_t i;
  int rc = wds__index_find(ix, url, &i, e);
  if (rc == WDS_OK)
    *nsamples = ix->shards[i].nsamples;
  return rc;
}

int wds__index_find(const wds__index *ix, const char *url, size_t *entry,
                    wds__err *e) {
  long i = -1;
  if (!ix || !url)
    return wds__fail(e, WDS_ERR_INVALID, "NULL index or url");
  if (ix->count && ix->by_url_)
    i = find(ix, ix->by_url_, 0, url);
  if (i < 0 && ix->count && ix->by_path_) {
    char *norm = resolve(NULL, url);
    if (!norm)
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    i = find(ix, ix->by_path_, 1, norm);
    free(norm);
  }
  if (i < 0 && ix->count && ix->by_url_ && ix->dir_real_ && local_path(url)) {
    /* what `wds index -o` recorded for this file */
    char *rel = wds_index_url_for(url, ix->dir_real_);
    if (rel)
      i = find(ix, ix->by_url_, 0, rel);
    free(rel);
  }
  if (i < 0)
    return wds__fail(e, WDS_ERR_INVALID, "%s: not in the index", url);
  const wds__index_entry *ent = &ix->shards[i];
  const char *lp = local_path(url);
  struct stat st;
  /* A file that cannot be stat'ed is reported when the loader opens it. */
  if (ent->filesize >= 0 && lp && stat(lp, &st) == 0 && S_ISREG(st.st_mode) &&
      (int64_t)st.st_size != ent->filesize)
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "%s: stale index: the shard was %" PRId64
                     " bytes, is %" PRId64 " (re-run wds index)",
                     url, ent->filesize, (int64_t)st.st_size);
  *entry = (size_t)i;
  return WDS_OK;
}

/* How the reader will decode a file, from its first bytes, as
 * shards/stream.c decides it: a plain tar starts with a valid header (or
 * the end-of-archive block). */
enum shard_kind { KIND_OTHER, KIND_PLAIN, KIND_ZSTD, KIND_GZIP };

static enum shard_kind shard_kind(const char *path) {
  uint8_t h[512];
  size_t n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return KIND_OTHER;
  while (n < sizeof h) {
    ssize_t k = read(fd, h + n, sizeof h - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    n += (size_t)k;
  }
  close(fd);
  int zero = 1;
  for (size_t i = 0; i < n && zero; i++)
    zero = h[i] == 0;
  if (n == sizeof h && (zero || wds__tarfmt_is_header(h)))
    return KIND_PLAIN;
  if (n >= 4) {
    uint32_t m = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                 (uint32_t)h[3] << 24;
    if (m == 0xFD2FB528u || (m & 0xFFFFFFF0u) == 0x184D2A50u)
      return KIND_ZSTD;
  }
  if (n >= 2 && h[0] == 0x1f && h[1] == 0x8b)
    return KIND_GZIP;
  /* xz, bzip2 and the rest; or bytes the reader will refuse. */
  return KIND_OTHER;
}

int wds__index_check_count(const char *url, uint64_t nsamples, wds__err *e) {
  const char *lp = local_path(url);
  struct stat st;
  /* A file that is missing or not regular is reported when it is read;
   * a remote one has no size to go by. */
  if (!lp || stat(lp, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (nsamples <= WDS__INDEX_MAX_SAMPLES - 1)
      return WDS_OK;
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "%s: the index gives %llu samples, more than any shard "
                     "can hold (%llu: a sample takes at least 512 bytes of a "
                     "tar stream whose offsets are 64-bit)",
                     url, (unsigned long long)nsamples,
                     (unsigned long long)(WDS__INDEX_MAX_SAMPLES - 1));
  }
  uint64_t size = (uint64_t)st.st_size;
  if (nsamples <= (size >= 1024 ? size / 512 - 1 : 0))
    return WDS_OK; /* fits even as a plain tar: no need to read the file */
  enum shard_kind kind = shard_kind(lp);
  uint64_t ratio = kind == KIND_PLAIN  ? 1
                   : kind == KIND_ZSTD ? 32768
                   : kind == KIND_GZIP ? 1032
                                       : 0;
  uint64_t tar = ratio == 0                  ? UINT64_MAX
                 : size > UINT64_MAX / ratio ? UINT64_MAX
                                             : size * ratio;
  uint64_t most = tar >= 1024 ? tar / 512 - 1 : 0;
  if (nsamples <= most)
    return WDS_OK;
  return wds__fail(
      e, WDS_ERR_CORRUPT,
      "%s: the index gives %llu samples, more than the shard's %llu bytes "
      "can hold (at most %llu %s; re-run wds index)",
      url, (unsigned long long)nsamples, (unsigned long long)size,
      (unsigned long long)most,
      kind == KIND_PLAIN
          ? "in a plain tar: a sample takes a 512-byte header, and the "
            "archive ends with a 512-byte block"
      : kind == KIND_ZSTD
          ? "in zstd data, which decompresses to at most 32768 times its "
            "size, at 512 bytes of tar per sample"
      : kind == KIND_GZIP
          ? "in gzip data, which decompresses to at most 1032 times its "
            "size, at 512 bytes of tar per sample"
          : "in any tar stream, whose offsets are 64-bit, at 512 bytes per "
            "sample");
}

void wds__index_free(wds__index *ix) {
  if (!ix)
    return;
  for (size_t i = 0; i < ix->count; i++) {
    free(ix->shards[i].url);
    free(ix->shards[i].path);
    for (size_t j = 0; j < ix->shards[i].sample_count; j++)
      free_sample(&ix->shards[i].samples[j]);
    free(ix->shards[i].samples);
  }
  free(ix->shards);
  free(ix->by_url_);
  free(ix->by_path_);
  free(ix->dir_real_);
  memset(ix, 0, sizeof *ix);
}

/* ---- the public API (wds/index.h): a handle around wds__index ---------- */

struct wds_index {
  wds__index ix;
  wds__err err;
};

int wds_index_load(const char *path, unsigned flags, wds_index **out) {
  wds__err e;
  int rc;
  if (!out)
    return wds__open_fail(WDS_ERR_INVALID, "wds_index_load: out is NULL");
  *out = NULL;
  if (!path)
    return wds__open_fail(WDS_ERR_INVALID, "wds_index_load: path is NULL");
  if (flags & ~WDS_INDEX_SAMPLES)
    return wds__open_fail(WDS_ERR_INVALID, "wds_index_load: unknown flags 0x%x",
                          flags);
  wds_index *h = calloc(1, sizeof *h);
  if (!h)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  e.msg[0] = '\0';
  if ((rc = wds__index_load_flags(path, flags, &h->ix, &e)) != WDS_OK) {
    free(h);
    return wds__open_fail(rc, "%s", e.msg);
  }
  wds__open_error_clear();
  *out = h;
  return WDS_OK;
}

size_t wds_index_shard_count(const wds_index *ix) {
  return ix ? ix->ix.count : 0;
}

int wds_index_shard_info(const wds_index *ix, size_t i, wds_index_shard *out) {
  if (!ix || !out || i >= ix->ix.count)
    return WDS_ERR_INVALID;
  const wds__index_entry *ent = &ix->ix.shards[i];
  out->url = ent->url;
  out->path = ent->path;
  out->nsamples = ent->nsamples;
  out->filesize = ent->filesize;
  out->tar_bytes = ent->tar_bytes;
  out->has_samples = ent->has_samples;
  out->sample_count = ent->sample_count;
  out->samples = ent->has_samples ? ent->samples : NULL;
  return WDS_OK;
}

int wds_index_lookup(wds_index *ix, const char *url, size_t *shard) {
  if (!ix)
    return WDS_ERR_INVALID;
  ix->err.msg[0] = '\0';
  if (!shard)
    return wds__fail(&ix->err, WDS_ERR_INVALID, "wds_index_lookup: NULL shard");
  return wds__index_find(&ix->ix, url, shard, &ix->err);
}

const char *wds_index_error(const wds_index *ix) {
  return ix ? ix->err.msg : "";
}

void wds_index_close(wds_index *ix) {
  if (!ix)
    return;
  wds__index_free(&ix->ix);
  free(ix);
}
