/* spec.c — shard specs: "::" parts, @FILE lists, ${NAME} substitution and
 * brace expansion giving the results of Python's braceexpand 0.1.7.
 *
 * A pattern is parsed once into a tree that mirrors braceexpand's generators:
 * a product (PAT) of items, each a literal (LIT), a number or letter range
 * (RANGE) or a comma sequence (SEQ, a chain of patterns). The scanners are
 * ports of parse_pattern / parse_sequence / parse_expression with their
 * quirks kept: a '}' seen at depth 0 takes the depth negative (so "}{" is
 * literal text), "{}", "{a}" and "{1..a}" stay literal, the range regexes'
 * "$" also matches before one final newline. Escapes follow _flatten():
 * every product (each parse_pattern() call) joins its parts, which are
 * already flattened, and removes escape backslashes from the result with
 * re.sub(r'\\(.)', r'\1') ('.' is any byte but '\n'). So text inside k
 * nested products is unescaped k times: "{x\\\\y,b}" gives "x\y". A node
 * keeps how many such passes apply to its output (strips).
 *
 * Invariants: every node has count >= 1 alternatives; a node with a single
 * alternative is folded into a literal and adjacent literals are merged, so
 * a product of N URLs has at most log2(N) varying items. The URL count is
 * computed from the tree with saturating arithmetic and checked against the
 * limit before any URL is allocated; then an odometer over the tree (the
 * rightmost item varies fastest, as in itertools.product) renders the URLs
 * one at a time into a buffer of the tree's maximum URL length.
 *
 * Bounds on arbitrary input: braces nest at most WDS__BRACE_MAX_DEPTH deep
 * (a linear pre-scan refuses deeper input before the recursive parser runs);
 * range numbers are decimal big numbers of at most 4300 digits (beyond that
 * Python 3.11's int() raises ValueError, so braceexpand fails too); ${}
 * results and @FILE lines are at most 1 MiB; one expansion reads at most
 * 65536 @FILEs and 1 GiB from them.
 *
 * An s3:// URL that names a listing (a glob or a prefix ending in '/',
 * s3.h) is replaced by the objects listed, after brace expansion.
 *
 * Known differences from Python: offsets are in bytes and \d, \w are ASCII
 * classes (Python also takes other Unicode digits and letters); empty "::"
 * parts are skipped (WebDataset would yield an empty URL). */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/url.h"
#include "s3.h"
#include "source.h"
#include "spec_io.h"
#include "wds/spec.h"

#define WDS__BRACE_MAX_DEPTH 64
#define WDS__MAX_DIGITS 4300
#define WDS__MAX_PATTERN_BYTES ((size_t)1 << 20)
#define WDS__MAX_FILES 65536
#define WDS__MAX_FILE_BYTES ((uint64_t)1 << 30)
#define WDS__ENV_PASSES 10
#define WDS__QUOTE_CHARS 200

/* The pattern s[0..n) as a message quotes it: its secrets hidden first
 * (wds__url_redact: a password, a token, a signature; before the cut, so
 * no part of one is shown), then cut to WDS__QUOTE_CHARS and "...". buf
 * holds WDS__QUOTE_BUF bytes. */
#define WDS__QUOTE_BUF (WDS__QUOTE_CHARS + 4)
static const char *quote_spec(const char *s, size_t n, char *buf) {
  char red[WDS__URL_REDACT_MAX], *copy = strndup(s, n);
  const char *r = copy ? wds__url_redact(copy, red, sizeof red) : "...";
  size_t rn = strlen(r);
  if (rn > WDS__QUOTE_CHARS) {
    memcpy(buf, r, WDS__QUOTE_CHARS);
    memcpy(buf + WDS__QUOTE_CHARS, "...", 4);
  } else {
    memcpy(buf, r, rn + 1);
  }
  free(copy);
  return buf;
}

/* Quoted pattern for messages: the arguments of "%.*s%s" (quote_spec,
 * into a buffer that lives until the end of the enclosing block). */
#define QUOTE_ARGS(s, n)                                                       \
  WDS__QUOTE_BUF, quote_spec((s), (n), (char[WDS__QUOTE_BUF]){0}), ""

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/* ---- decimal big numbers --------------------------------------------- */

/* Magnitude in little-endian decimal digits (values 0..9); len is the number
 * of significant digits, 0 for zero, which is never negative. */
typedef struct num {
  unsigned char *d;
  size_t len;
  int neg;
} num;

static void num_normalize(num *x) {
  while (x->len > 0 && x->d[x->len - 1] == 0)
    x->len--;
  if (x->len == 0)
    x->neg = 0;
}

/* s is "-?[0-9]*"; store holds at least n bytes. */
static void num_parse(num *x, unsigned char *store, const char *s, size_t n) {
  size_t i = 0;
  x->neg = 0;
  if (i < n && s[i] == '-') {
    x->neg = 1;
    i++;
  }
  while (i < n && s[i] == '0')
    i++;
  x->d = store;
  x->len = n - i;
  for (size_t j = 0; j < x->len; j++)
    store[j] = (unsigned char)(s[n - 1 - j] - '0');
  num_normalize(x);
}

static int mag_cmp(const num *a, const num *b) {
  if (a->len != b->len)
    return a->len < b->len ? -1 : 1;
  for (size_t i = a->len; i-- > 0;)
    if (a->d[i] != b->d[i])
      return a->d[i] < b->d[i] ? -1 : 1;
  return 0;
}

/* dst = |a| + |b|; dst may be a; dst->d holds max(len) + 1 digits. */
static void mag_add(num *dst, const num *a, const num *b) {
  size_t n = a->len > b->len ? a->len : b->len;
  unsigned carry = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned s =
        carry + (i < a->len ? a->d[i] : 0u) + (i < b->len ? b->d[i] : 0u);
    dst->d[i] = (unsigned char)(s % 10);
    carry = s / 10;
  }
  if (carry)
    dst->d[n++] = (unsigned char)carry;
  dst->len = n;
}

/* dst = |a| - |b| for |a| >= |b|; dst may be a or b. Keeps dst->neg. */
static void mag_sub(num *dst, const num *a, const num *b) {
  int borrow = 0;
  size_t n = a->len;
  for (size_t i = 0; i < n; i++) {
    int s = (int)a->d[i] - (i < b->len ? (int)b->d[i] : 0) - borrow;
    borrow = s < 0;
    dst->d[i] = (unsigned char)(borrow ? s + 10 : s);
  }
  dst->len = n;
  num_normalize(dst);
}

/* floor(|a| / |k|) for k != 0, saturating at UINT64_MAX. Both have at most
 * WDS__MAX_DIGITS + 1 digits; only the last <= 21 quotient digits need work,
 * so this is O(len). */
static uint64_t mag_div_sat(const num *a, const num *k) {
  unsigned char rbuf[WDS__MAX_DIGITS + 3];
  num r = {rbuf, 0, 0};
  uint64_t q = 0;
  if (mag_cmp(a, k) < 0)
    return 0;
  if (a->len - k->len > 20) /* quotient >= 10^20 */
    return UINT64_MAX;
  /* The top k->len - 1 digits of a are below k. */
  r.len = k->len - 1;
  for (size_t i = 0; i < r.len; i++)
    rbuf[i] = a->d[a->len - k->len + 1 + i];
  num_normalize(&r);
  for (size_t j = a->len - k->len + 1; j-- > 0;) {
    memmove(rbuf + 1, rbuf, r.len);
    rbuf[0] = a->d[j];
    r.len++;
    num_normalize(&r);
    unsigned qd = 0;
    while (mag_cmp(&r, k) >= 0) {
      mag_sub(&r, &r, k);
      qd++;
    }
    if (q > (UINT64_MAX - qd) / 10)
      return UINT64_MAX;
    q = q * 10 + qd;
  }
  return q;
}

/* ---- the pattern tree ------------------------------------------------ */

enum node_kind { NODE_LIT, NODE_RANGE, NODE_CHARS, NODE_SEQ, NODE_PAT };

typedef struct node node;
struct node {
  enum node_kind kind;
  uint64_t count; /* alternatives, saturating at UINT64_MAX */
  size_t max_len; /* longest alternative, bytes */
  int strips;     /* unescaping passes applied to the output */
  /* NODE_LIT */
  char *text;
  size_t len, cap;
  /* NODE_SEQ (alternatives, one active) and NODE_PAT (product) */
  node **kids;
  size_t nkids, kids_cap, active;
  /* NODE_RANGE and NODE_CHARS: value i is start + dir * i * step */
  int dir;
  uint64_t idx;
  size_t width;         /* zero padding, 0 for none */
  num start, step, cur; /* NODE_RANGE; digits in one block (digits) */
  unsigned char *digits;
  int c_start, c_step, c_cur; /* NODE_CHARS: indices into alphabet */
};

static void node_free(node *x) {
  if (!x)
    return;
  for (size_t i = 0; i < x->nkids; i++)
    node_free(x->kids[i]);
  free(x->kids);
  free(x->text);
  free(x->digits);
  free(x);
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a)
    return UINT64_MAX;
  return a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static size_t size_add_sat(size_t a, size_t b) {
  return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static void node_reset(node *x) {
  switch (x->kind) {
  case NODE_RANGE:
    x->idx = 0;
    memcpy(x->cur.d, x->start.d, x->start.len);
    x->cur.len = x->start.len;
    x->cur.neg = x->start.neg;
    break;
  case NODE_CHARS:
    x->idx = 0;
    x->c_cur = x->c_start;
    break;
  case NODE_SEQ:
    x->active = 0;
    node_reset(x->kids[0]);
    break;
  case NODE_PAT:
    for (size_t i = 0; i < x->nkids; i++)
      node_reset(x->kids[i]);
    break;
  case NODE_LIT:
    break;
  }
}

/* cur += dir * step, staying within the range (the caller checked idx). */
static void range_step(node *x) {
  num *c = &x->cur;
  if (c->len == 0) {
    memcpy(c->d, x->step.d, x->step.len);
    c->len = x->step.len;
    c->neg = x->dir < 0;
  } else if (c->neg == (x->dir < 0)) {
    mag_add(c, c, &x->step);
  } else {
    int cmp = mag_cmp(c, &x->step);
    if (cmp >= 0) {
      mag_sub(c, c, &x->step);
    } else {
      mag_sub(c, &x->step, c);
      c->neg = !c->neg;
    }
  }
}

/* Moves to the next alternative; returns 1 when it wrapped to the first. */
static int node_advance(node *x) {
  switch (x->kind) {
  case NODE_RANGE:
  case NODE_CHARS:
    if (x->idx + 1 < x->count) {
      x->idx++;
      if (x->kind == NODE_RANGE)
        range_step(x);
      else
        x->c_cur += x->dir * x->c_step;
      return 0;
    }
    node_reset(x);
    return 1;
  case NODE_SEQ:
    if (!node_advance(x->kids[x->active]))
      return 0;
    if (++x->active < x->nkids) {
      node_reset(x->kids[x->active]);
      return 0;
    }
    node_reset(x);
    return 1;
  case NODE_PAT:
    for (size_t i = x->nkids; i-- > 0;)
      if (!node_advance(x->kids[i]))
        return 0;
    return 1;
  case NODE_LIT:
    break;
  }
  return 1;
}

/* re.sub(r'\\(.)', r'\1', s) in place; returns the new length. */
static size_t unescape(char *s, size_t n) {
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\' && i + 1 < n && s[i + 1] != '\n')
      i++;
    s[w++] = s[i];
  }
  return w;
}

static int node_render_raw(const node *x, char *buf, size_t cap, size_t *pos);

/* Appends the current alternative to buf[*pos..cap); returns 0, or -1 if it
 * does not fit (max_len is computed so that it always does). */
static int node_render(const node *x, char *buf, size_t cap, size_t *pos) {
  size_t start = *pos;
  if (node_render_raw(x, buf, cap, pos) != 0)
    return -1;
  for (int i = 0; i < x->strips; i++)
    *pos = start + unescape(buf + start, *pos - start);
  return 0;
}

static int node_render_raw(const node *x, char *buf, size_t cap, size_t *pos) {
  switch (x->kind) {
  case NODE_LIT:
    if (cap - *pos < x->len)
      return -1;
    if (x->len > 0)
      memcpy(buf + *pos, x->text, x->len);
    *pos += x->len;
    return 0;
  case NODE_CHARS:
    if (cap - *pos < 1)
      return -1;
    buf[(*pos)++] = alphabet[x->c_cur];
    return 0;
  case NODE_RANGE: {
    size_t ndig = x->cur.len ? x->cur.len : 1;
    size_t body = ndig + (size_t)x->cur.neg;
    size_t pad = x->width > body ? x->width - body : 0;
    if (cap - *pos < body + pad)
      return -1;
    if (x->cur.neg)
      buf[(*pos)++] = '-';
    memset(buf + *pos, '0', pad);
    *pos += pad;
    if (x->cur.len == 0)
      buf[(*pos)++] = '0';
    for (size_t i = x->cur.len; i-- > 0;)
      buf[(*pos)++] = (char)('0' + x->cur.d[i]);
    return 0;
  }
  case NODE_SEQ:
    return node_render(x->kids[x->active], buf, cap, pos);
  case NODE_PAT:
    for (size_t i = 0; i < x->nkids; i++)
      if (node_render(x->kids[i], buf, cap, pos) != 0)
        return -1;
    return 0;
  }
  return -1;
}

static node *node_new(enum node_kind kind) {
  node *x = calloc(1, sizeof *x);
  if (x) {
    x->kind = kind;
    x->count = 1;
  }
  return x;
}

/* Appends n bytes to a literal. */
static int lit_append(node *x, const char *s, size_t n) {
  if (n > SIZE_MAX - x->len)
    return WDS_ERR_NOMEM;
  char *t = wds__grow(x->text, &x->cap, x->len + n, 1, 16);
  if (!t)
    return WDS_ERR_NOMEM;
  x->text = t;
  memcpy(x->text + x->len, s, n);
  x->len += n;
  x->max_len = x->len;
  return WDS_OK;
}

static int lit_new(const char *s, size_t n, node **out) {
  node *x = node_new(NODE_LIT);
  *out = NULL;
  if (!x)
    return WDS_ERR_NOMEM;
  if (n > 0 && lit_append(x, s, n) != WDS_OK) {
    node_free(x);
    return WDS_ERR_NOMEM;
  }
  *out = x;
  return WDS_OK;
}

/* Replaces a node of one alternative by its literal text. */
static int node_fold(node **px) {
  node *x = *px, *lit = NULL;
  char *buf = NULL;
  size_t pos = 0;
  int rc = WDS_ERR_NOMEM;
  if (x->kind == NODE_LIT && x->strips == 0)
    return WDS_OK;
  buf = malloc(x->max_len + 1);
  if (!buf)
    goto done;
  node_reset(x);
  if (node_render(x, buf, x->max_len, &pos) != 0) {
    rc = WDS_ERR_INVALID;
    goto done;
  }
  rc = lit_new(buf, pos, &lit);
  if (rc != WDS_OK)
    goto done;
  node_free(x);
  *px = lit;
done:
  free(buf);
  return rc;
}

static int kids_push(node *parent, node *kid) {
  node **k = wds__grow(parent->kids, &parent->kids_cap, parent->nkids + 1,
                       sizeof(node *), 4);
  if (!k)
    return WDS_ERR_NOMEM;
  parent->kids = k;
  parent->kids[parent->nkids++] = kid;
  return WDS_OK;
}

/* Adds an item to a product, taking ownership of kid in every case. Items
 * of one alternative become literal text joined to their neighbours. */
static int pat_add(node *pat, node *kid) {
  int rc = WDS_OK;
  if (kid->count == 1 && (rc = node_fold(&kid)) != WDS_OK)
    goto fail;
  if (kid->kind == NODE_LIT && kid->strips == 0) {
    node *last = pat->nkids ? pat->kids[pat->nkids - 1] : NULL;
    if (kid->len == 0) {
      node_free(kid);
      return WDS_OK;
    }
    if (last && last->kind == NODE_LIT && last->strips == 0) {
      rc = lit_append(last, kid->text, kid->len);
      node_free(kid);
      return rc;
    }
  }
  if ((rc = kids_push(pat, kid)) != WDS_OK)
    goto fail;
  return WDS_OK;
fail:
  node_free(kid);
  return rc;
}

static int pat_add_lit(node *pat, const char *s, size_t n) {
  node *lit;
  if (n == 0)
    return WDS_OK;
  int rc = lit_new(s, n, &lit);
  return rc != WDS_OK ? rc : pat_add(pat, lit);
}

/* Turns a finished product into its simplest equivalent node, which keeps
 * the product's unescaping pass. */
static int pat_finish(node **px) {
  node *x = *px;
  if (x->nkids == 0) {
    x->kind = NODE_LIT; /* the empty string */
    return WDS_OK;
  }
  if (x->nkids == 1) {
    node *kid = x->kids[0];
    if (kid->kind == NODE_LIT && kid->strips == 0)
      kid->max_len = kid->len = unescape(kid->text, kid->len);
    else
      kid->strips++;
    x->nkids = 0;
    node_free(x);
    *px = kid;
    return WDS_OK;
  }
  x->strips = 1;
  x->count = 1;
  x->max_len = 0;
  for (size_t i = 0; i < x->nkids; i++) {
    x->count = mul_sat(x->count, x->kids[i]->count);
    x->max_len = size_add_sat(x->max_len, x->kids[i]->max_len);
  }
  return WDS_OK;
}

/* ---- the parser ------------------------------------------------------ */

typedef struct parser {
  const char *pat; /* the whole pattern, for messages */
  size_t pat_len;
  wds__err *e;
} parser;

static int parse_pattern(parser *p, const char *s, size_t n, int depth,
                         node **out);

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_alpha(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* Matches "-?\d+" (neg_ok) or "\d+" at s[*i..n); returns its length. */
static size_t match_int(const char *s, size_t n, size_t *i, int neg_ok) {
  size_t b = *i, j = *i;
  if (neg_ok && j < n && s[j] == '-')
    j++;
  size_t d = j;
  while (j < n && is_digit(s[j]))
    j++;
  if (j == d)
    return 0;
  *i = j;
  return j - b;
}

static int match_dots(const char *s, size_t n, size_t *i) {
  if (*i + 1 < n && s[*i] == '.' && s[*i + 1] == '.') {
    *i += 2;
    return 1;
  }
  return 0;
}

typedef struct span {
  const char *s;
  size_t n;
} span;

/* The regexes' "$" matches at the end or before a final newline. */
static size_t regex_body_len(const char *s, size_t n) {
  return n > 0 && s[n - 1] == '\n' ? n - 1 : n;
}

/* The optional step both range regexes end with, (?:\.\.-?(\d+))?$, from
 * s[i]; step is empty when there is none. */
static int match_step(const char *s, size_t n, size_t i, span *step) {
  step->s = NULL;
  step->n = 0;
  if (i == n)
    return 1;
  if (!match_dots(s, n, &i))
    return 0;
  if (i < n && s[i] == '-')
    i++;
  step->s = s + i;
  step->n = match_int(s, n, &i, 0);
  return step->n > 0 && i == n;
}

/* ^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$ */
static int match_int_range(const char *s, size_t n, span *a, span *b,
                           span *step) {
  size_t i = 0;
  n = regex_body_len(s, n);
  a->s = s;
  if ((a->n = match_int(s, n, &i, 1)) == 0 || !match_dots(s, n, &i))
    return 0;
  b->s = s + i;
  if ((b->n = match_int(s, n, &i, 1)) == 0)
    return 0;
  return match_step(s, n, i, step);
}

/* ^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$ */
static int match_char_range(const char *s, size_t n, span *step) {
  size_t i = 4;
  n = regex_body_len(s, n);
  step->s = NULL;
  step->n = 0;
  if (n < 4 || !is_alpha(s[0]) || s[1] != '.' || s[2] != '.' || !is_alpha(s[3]))
    return 0;
  return match_step(s, n, i, step);
}

static int check_digits(parser *p, span x, const char *where) {
  size_t digits = x.n - (x.n > 0 && x.s[0] == '-');
  if (digits <= WDS__MAX_DIGITS)
    return WDS_OK;
  return wds__fail(
      p->e, WDS_ERR_SPEC,
      "number with more than %d digits at position %zu in \"%.*s%s\"",
      WDS__MAX_DIGITS, (size_t)(where - p->pat),
      QUOTE_ARGS(p->pat, p->pat_len));
}

static int has_padding(span x) {
  /* s.startswith(('0', '-0')) for s not in ('0', '-0') */
  if ((x.n == 1 && x.s[0] == '0') ||
      (x.n == 2 && x.s[0] == '-' && x.s[1] == '0'))
    return 0;
  return x.s[0] == '0' || (x.n >= 2 && x.s[0] == '-' && x.s[1] == '0');
}

/* make_int_range(): count = |end - start| // step + 1. */
static int make_int_range(parser *p, span a, span b, span step, node **out) {
  unsigned char dbuf[WDS__MAX_DIGITS + 2];
  num s, e, k, d = {dbuf, 0, 0};
  node *x = NULL;
  int rc;
  *out = NULL;
  if ((rc = check_digits(p, a, a.s)) != WDS_OK ||
      (rc = check_digits(p, b, b.s)) != WDS_OK ||
      (step.s && (rc = check_digits(p, step, step.s)) != WDS_OK))
    return rc;
  x = node_new(NODE_RANGE);
  if (!x)
    return WDS_ERR_NOMEM;
  /* One block: start, end, step (at least one digit) and the current value,
   * whose magnitude never exceeds max(|start|, |end|) but whose arithmetic
   * briefly writes max(len) + 1 digits. */
  size_t k_n = step.n ? step.n : 1;
  size_t cur_cap = (a.n > b.n ? a.n : b.n);
  if (k_n > cur_cap)
    cur_cap = k_n;
  cur_cap += 2;
  x->digits = malloc(a.n + b.n + k_n + cur_cap);
  if (!x->digits) {
    node_free(x);
    return WDS_ERR_NOMEM;
  }
  unsigned char *k_store = x->digits + a.n + b.n;
  num_parse(&s, x->digits, a.s, a.n);
  num_parse(&e, x->digits + a.n, b.s, b.n);
  k.len = 0;
  k.neg = 0;
  k.d = k_store;
  if (step.s)
    num_parse(&k, k_store, step.s, step.n);
  if (k.len == 0) { /* (int(step) or 1) if step else 1 */
    k_store[0] = 1;
    k.len = 1;
  }
  /* d = |e - s|, dir = +1 when s < e. */
  if (s.neg != e.neg) {
    mag_add(&d, &s, &e);
    x->dir = s.neg ? 1 : -1;
  } else {
    int cmp = mag_cmp(&s, &e);
    if (cmp <= 0)
      mag_sub(&d, &e, &s);
    else
      mag_sub(&d, &s, &e);
    x->dir = (cmp < 0) != s.neg ? 1 : -1;
  }
  x->count = add_sat(mag_div_sat(&d, &k), 1);
  x->width = has_padding(a) || has_padding(b) ? (a.n > b.n ? a.n : b.n) : 0;
  size_t maxdig = s.len > e.len ? s.len : e.len;
  x->max_len = maxdig + 2 > x->width ? maxdig + 2 : x->width;
  x->start = s;
  x->step = k;
  x->cur.d = k_store + k_n;
  node_reset(x);
  *out = x;
  return WDS_OK;
}

static int alpha_index(char c) { return c <= 'Z' ? c - 'A' : 26 + (c - 'a'); }

/* make_char_range(): slices of A..Za..z, same counting as numbers. */
static int make_char_range(parser *p, const char *s, span step, node **out) {
  int rc;
  uint64_t k = 1;
  *out = NULL;
  if (step.s && (rc = check_digits(p, step, step.s)) != WDS_OK)
    return rc;
  if (step.s) {
    size_t i = 0;
    while (i < step.n && step.s[i] == '0')
      i++;
    if (step.n - i > 3) {
      k = 1000; /* more than the 51 any range spans */
    } else {
      k = 0;
      for (; i < step.n; i++)
        k = k * 10 + (uint64_t)(step.s[i] - '0');
      if (k == 0)
        k = 1;
    }
  }
  node *x = node_new(NODE_CHARS);
  if (!x)
    return WDS_ERR_NOMEM;
  int a = alpha_index(s[0]), b = alpha_index(s[3]);
  x->dir = a < b ? 1 : -1;
  x->count = (uint64_t)(a < b ? b - a : a - b) / k + 1;
  x->c_start = a;
  x->c_step = (int)(k > 51 ? 51 : k);
  x->max_len = 1;
  node_reset(x);
  *out = x;
  return WDS_OK;
}

/* parse_sequence(): *out is NULL when expr has no top-level comma. */
static int parse_sequence(parser *p, const char *s, size_t n, int depth,
                          node **out) {
  node *seq = NULL, *kid = NULL;
  long long bd = 0;
  size_t pos, start = 0;
  int commas = 0, rc = WDS_OK;
  *out = NULL;
  for (pos = 0; pos < n; pos++) {
    if (s[pos] == '\\')
      pos++;
    else if (s[pos] == '{')
      bd++;
    else if (s[pos] == '}')
      bd--;
    else if (s[pos] == ',' && bd == 0)
      commas = 1;
  }
  if (bd != 0 || !commas)
    return WDS_OK;
  if (!(seq = node_new(NODE_SEQ)))
    return WDS_ERR_NOMEM;
  seq->count = 0;
  bd = 0;
  for (pos = 0;; pos++) {
    if (pos < n) {
      if (s[pos] == '\\') {
        pos++;
        continue;
      }
      if (s[pos] == '{')
        bd++;
      else if (s[pos] == '}')
        bd--;
      if (s[pos] != ',' || bd != 0)
        continue;
    }
    size_t end = pos < n ? pos : n;
    if ((rc = parse_pattern(p, s + start, end - start, depth, &kid)) != WDS_OK)
      goto fail;
    if ((rc = kids_push(seq, kid)) != WDS_OK) {
      node_free(kid);
      goto fail;
    }
    seq->count = add_sat(seq->count, kid->count);
    if (kid->max_len > seq->max_len)
      seq->max_len = kid->max_len;
    if (pos >= n)
      break;
    start = pos + 1;
  }
  node_reset(seq);
  *out = seq;
  return WDS_OK;
fail:
  node_free(seq);
  return rc;
}

/* parse_expression(): a range, a sequence, or NULL for literal braces. */
static int parse_expression(parser *p, const char *s, size_t n, int depth,
                            node **out) {
  span a, b, step;
  *out = NULL;
  if (match_int_range(s, n, &a, &b, &step))
    return make_int_range(p, a, b, step, out);
  if (match_char_range(s, n, &step))
    return make_char_range(p, s, step, out);
  return parse_sequence(p, s, n, depth, out);
}

/* parse_pattern(): the product of literals and brace expressions. */
static int parse_pattern(parser *p, const char *s, size_t n, int depth,
                         node **out) {
  node *pat = NULL, *item = NULL;
  long long bd = 0;
  size_t pos, start = 0;
  int rc = WDS_OK;
  *out = NULL;
  if (depth > WDS__BRACE_MAX_DEPTH + 1)
    return wds__fail(p->e, WDS_ERR_SPEC, "braces nested too deep in \"%.*s%s\"",
                     QUOTE_ARGS(p->pat, p->pat_len));
  if (!(pat = node_new(NODE_PAT)))
    return WDS_ERR_NOMEM;
  for (pos = 0; pos < n; pos++) {
    if (s[pos] == '\\') {
      pos++;
    } else if (s[pos] == '{') {
      if (bd == 0 && pos > start) {
        if ((rc = pat_add_lit(pat, s + start, pos - start)) != WDS_OK)
          goto fail;
        start = pos;
      }
      bd++;
    } else if (s[pos] == '}' && --bd == 0) {
      const char *expr = s + start + 1;
      size_t expr_n = pos - start - 1;
      if ((rc = parse_expression(p, expr, expr_n, depth + 1, &item)) != WDS_OK)
        goto fail;
      if (item) {
        rc = pat_add(pat, item);
      } else if ((rc = pat_add_lit(pat, "{", 1)) == WDS_OK &&
                 (rc = parse_pattern(p, expr, expr_n, depth + 1, &item)) ==
                     WDS_OK &&
                 (rc = pat_add(pat, item)) == WDS_OK) {
        rc = pat_add_lit(pat, "}", 1);
      }
      item = NULL;
      if (rc != WDS_OK)
        goto fail;
      start = pos + 1;
    }
  }
  if (bd != 0) { /* the pre-scan rejects this; kept for safety */
    rc = wds__fail(p->e, WDS_ERR_SPEC, "unbalanced braces in \"%.*s%s\"",
                   QUOTE_ARGS(p->pat, p->pat_len));
    goto fail;
  }
  if (start < n && (rc = pat_add_lit(pat, s + start, n - start)) != WDS_OK)
    goto fail;
  if ((rc = pat_finish(&pat)) != WDS_OK)
    goto fail;
  if (pat->kind == NODE_PAT)
    node_reset(pat);
  *out = pat;
  return WDS_OK;
fail:
  node_free(pat);
  return rc;
}

/* The top-level scan of parse_pattern(), without recursion: unbalanced
 * braces (what Python raises) and too deep nesting (what we refuse). */
static int prescan(parser *p) {
  long long bd = 0;
  size_t last_open = 0, last_close = 0, deep_at = 0;
  int deep = 0;
  for (size_t pos = 0; pos < p->pat_len; pos++) {
    char c = p->pat[pos];
    if (c == '\\') {
      pos++;
    } else if (c == '{') {
      if (bd == 0)
        last_open = pos;
      if (++bd > WDS__BRACE_MAX_DEPTH && !deep) {
        deep = 1;
        deep_at = pos;
      }
    } else if (c == '}') {
      if (bd == 0)
        last_close = pos;
      bd--;
    }
  }
  if (bd != 0)
    return wds__fail(
        p->e, WDS_ERR_SPEC, "unbalanced brace at position %zu in \"%.*s%s\"",
        bd > 0 ? last_open : last_close, QUOTE_ARGS(p->pat, p->pat_len));
  if (deep)
    return wds__fail(p->e, WDS_ERR_SPEC,
                     "braces nested more than %d deep at position %zu in "
                     "\"%.*s%s\"",
                     WDS__BRACE_MAX_DEPTH, deep_at,
                     QUOTE_ARGS(p->pat, p->pat_len));
  return WDS_OK;
}

/* ---- expansion into a URL list --------------------------------------- */

typedef struct expander {
  wds_url_list list;
  size_t cap;
  size_t max_urls;
  size_t files;
  uint64_t file_bytes;
  uint64_t url_bytes;     /* upper bound of the bytes of the URLs so far */
  unsigned flags;         /* WDS_SPEC_* */
  const wds__io_opts *io; /* for s3:// listings; NULL: the defaults */
  wds__err *e;
} expander;

static int list_reserve(expander *x, size_t need) {
  if (need <= x->cap)
    return WDS_OK;
  size_t cap = x->cap > SIZE_MAX / 2 ? SIZE_MAX : x->cap * 2;
  if (cap < 16)
    cap = 16;
  if (cap > x->max_urls)
    cap = x->max_urls;
  if (cap < need)
    cap = need;
  if (cap > SIZE_MAX / sizeof(char *))
    return wds__fail(x->e, WDS_ERR_NOMEM, "out of memory for %zu URLs", need);
  char **urls = realloc(x->list.urls, cap * sizeof(char *));
  if (!urls)
    return wds__fail(x->e, WDS_ERR_NOMEM, "out of memory for %zu URLs", need);
  x->list.urls = urls;
  x->cap = cap;
  return WDS_OK;
}

/* Appends one URL of an s3:// listing (s3.h), within the same limits. */
static int add_listed(void *ud, const char *url) {
  expander *x = ud;
  size_t len = strlen(url);
  uint64_t per_url = (uint64_t)len + 1 + sizeof(char *);
  if (x->list.count >= x->max_urls)
    return wds__fail(x->e, WDS_ERR_LIMIT,
                     "the listing makes more than %zu URLs, over the limit",
                     x->max_urls);
  if (per_url > WDS_SPEC_MAX_URL_BYTES - x->url_bytes)
    return wds__fail(x->e, WDS_ERR_LIMIT,
                     "the listing makes more than %llu bytes of URLs, over the "
                     "limit",
                     (unsigned long long)WDS_SPEC_MAX_URL_BYTES);
  int rc = list_reserve(x, x->list.count + 1);
  if (rc != WDS_OK)
    return rc;
  char *u = strdup(url);
  if (!u)
    return wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
  x->url_bytes += per_url;
  x->list.urls[x->list.count++] = u;
  return WDS_OK;
}

/* Brace-expands s[0..n) and appends the URLs; an s3:// URL naming a
 * listing (s3.h) becomes the objects it lists. */
static int expand_pattern(expander *x, const char *s, size_t n) {
  parser p = {s, n, x->e};
  node *root = NULL;
  char *buf = NULL;
  int rc;
  if ((rc = prescan(&p)) != WDS_OK)
    goto done;
  if ((rc = parse_pattern(&p, s, n, 0, &root)) != WDS_OK) {
    if (rc == WDS_ERR_NOMEM)
      wds__fail(x->e, rc, "out of memory parsing \"%.*s%s\"", QUOTE_ARGS(s, n));
    goto done;
  }
  uint64_t count = root->count;
  size_t have = x->list.count;
  if (count > (uint64_t)(x->max_urls - have)) {
    const char *least = count == UINT64_MAX ? "at least " : "";
    if (have == 0)
      rc = wds__fail(x->e, WDS_ERR_LIMIT,
                     "\"%.*s%s\" would make %s%" PRIu64
                     " URLs, over the limit of %zu",
                     QUOTE_ARGS(s, n), least, count, x->max_urls);
    else
      rc = wds__fail(x->e, WDS_ERR_LIMIT,
                     "\"%.*s%s\" would make %s%" PRIu64
                     " URLs after %zu others, over the limit of %zu",
                     QUOTE_ARGS(s, n), least, count, have, x->max_urls);
    goto done;
  }
  /* Bytes too: a long pattern times many URLs must not exhaust memory.
   * max_len bounds every URL, so this is checked before allocating. */
  uint64_t per_url = (uint64_t)root->max_len + 1 + sizeof(char *);
  if (count > (WDS_SPEC_MAX_URL_BYTES - x->url_bytes) / per_url) {
    rc = wds__fail(x->e, WDS_ERR_LIMIT,
                   "\"%.*s%s\" would make %" PRIu64 " URLs of up to %zu bytes, "
                   "over the limit of %llu bytes of URLs",
                   QUOTE_ARGS(s, n), count, root->max_len,
                   (unsigned long long)WDS_SPEC_MAX_URL_BYTES);
    goto done;
  }
  x->url_bytes += count * per_url;
  if ((rc = list_reserve(x, have + (size_t)count)) != WDS_OK)
    goto done;
  if (!(buf = malloc(root->max_len + 1))) {
    rc = wds__fail(x->e, WDS_ERR_NOMEM, "out of memory expanding \"%.*s%s\"",
                   QUOTE_ARGS(s, n));
    goto done;
  }
  node_reset(root);
  for (uint64_t i = 0; i < count; i++) {
    size_t len = 0;
    if (node_render(root, buf, root->max_len, &len) != 0) {
      rc = wds__fail(x->e, WDS_ERR_INVALID,
                     "internal error: URL longer than expected from \"%.*s%s\"",
                     QUOTE_ARGS(s, n));
      goto done;
    }
    char *url = malloc(len + 1);
    if (!url) {
      rc = wds__fail(x->e, WDS_ERR_NOMEM, "out of memory expanding \"%.*s%s\"",
                     QUOTE_ARGS(s, n));
      goto done;
    }
    memcpy(url, buf, len);
    url[len] = '\0';
    if (wds__s3_is_listing(url)) {
      /* Replaced by the objects it lists, which may be many more. */
      x->url_bytes -= per_url;
      wds__s3_room room = {x->max_urls - x->list.count,
                           WDS_SPEC_MAX_URL_BYTES - x->url_bytes, x->max_urls,
                           WDS_SPEC_MAX_URL_BYTES};
      rc = wds__s3_list(url, x->io, &room, add_listed, x, x->e);
      if (rc == WDS_ERR_LIMIT) {
        char red[WDS__URL_REDACT_MAX];
        wds__err_prefix(x->e, "%.300s", wds__url_redact(url, red, sizeof red));
      }
      free(url);
      if (rc != WDS_OK)
        goto done;
      node_advance(root);
      continue;
    }
    if (x->list.count >= x->max_urls) { /* after a listing */
      free(url);
      rc = wds__fail(x->e, WDS_ERR_LIMIT,
                     "\"%.*s%s\" makes more than %zu URLs with its listings",
                     QUOTE_ARGS(s, n), x->max_urls);
      goto done;
    }
    if ((rc = list_reserve(x, x->list.count + 1)) != WDS_OK) {
      free(url);
      goto done;
    }
    x->list.urls[x->list.count++] = url;
    node_advance(root);
  }
  rc = WDS_OK;
done:
  free(buf);
  node_free(root);
  return rc;
}

static int is_word(char c) { return is_alpha(c) || is_digit(c) || c == '_'; }

/* One pass of re.sub(r"\$\{(\w+)\}", envlookup, s). */
static int env_pass(expander *x, const char *s, size_t n, char **out,
                    size_t *out_n) {
  char *r = NULL, *key = NULL;
  size_t rn = 0, rcap = 0;
  int rc = WDS_OK;
  for (size_t i = 0; i < n;) {
    const char *piece = s + i;
    size_t piece_n = 1, j = i + 2;
    if (s[i] == '$' && i + 1 < n && s[i + 1] == '{') {
      while (j < n && is_word(s[j]))
        j++;
    }
    if (j > i + 2 && j < n && s[j] == '}') {
      size_t name_n = j - i - 2;
      free(key);
      if (!(key = malloc(name_n + 5))) {
        rc = wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
        goto done;
      }
      memcpy(key, "WDS_", 4);
      memcpy(key + 4, s + i + 2, name_n);
      key[name_n + 4] = '\0';
      piece = getenv(key);
      if (!piece) {
        rc = wds__fail(x->e, WDS_ERR_SPEC,
                       "missing environment variable %.200s for \"${%.200s}\" "
                       "in \"%.*s%s\"",
                       key, key + 4, QUOTE_ARGS(s, n));
        goto done;
      }
      piece_n = strlen(piece);
      i = j + 1;
    } else {
      i++;
    }
    if (piece_n > WDS__MAX_PATTERN_BYTES - rn) {
      rc = wds__fail(x->e, WDS_ERR_LIMIT,
                     "substituting ${} makes \"%.*s%s\" longer than %zu bytes",
                     QUOTE_ARGS(s, n), WDS__MAX_PATTERN_BYTES);
      goto done;
    }
    char *t = wds__grow(r, &rcap, rn + piece_n + 1, 1, 64);
    if (!t) {
      rc = wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
    r = t;
    memcpy(r + rn, piece, piece_n);
    rn += piece_n;
  }
  if (!r && !(r = malloc(1))) {
    rc = wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  r[rn] = '\0';
  *out = r;
  *out_n = rn;
  r = NULL;
done:
  free(key);
  free(r);
  return rc;
}

/* expand_urls(): envsubst up to 10 times until stable, then braceexpand. */
static int expand_part(expander *x, const char *s, size_t n) {
  char *cur = NULL, *next = NULL;
  size_t cur_n = n, next_n = 0;
  int rc;
  if (!(cur = malloc(n + 1)))
    return wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
  memcpy(cur, s, n);
  cur[n] = '\0';
  for (int pass = 0; pass < WDS__ENV_PASSES; pass++) {
    if ((rc = env_pass(x, cur, cur_n, &next, &next_n)) != WDS_OK)
      goto done;
    if (next_n == cur_n && memcmp(next, cur, cur_n) == 0)
      break;
    free(cur);
    cur = next;
    cur_n = next_n;
    next = NULL;
  }
  rc = expand_pattern(x, cur, cur_n);
done:
  free(next);
  free(cur);
  return rc;
}

static int expand_spec(expander *x, const char *s, size_t n, int depth);

static int is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
         c == '\f';
}

static int expand_line(expander *x, const char *path, size_t lineno,
                       const char *line, size_t n, int depth) {
  int rc;
  while (n > 0 && is_blank(*line)) {
    line++;
    n--;
  }
  while (n > 0 && is_blank(line[n - 1]))
    n--;
  if (n == 0 || line[0] == '#')
    return WDS_OK;
  size_t before = x->list.count;
  if (memchr(line, '\0', n))
    rc = wds__fail(x->e, WDS_ERR_SPEC, "NUL byte in the line");
  else
    rc = expand_spec(x, line, n, depth);
  /* A file may come from anywhere (a download): its pipe: commands are not
   * run unless the user allows it. */
  for (size_t i = before; rc == WDS_OK && i < x->list.count; i++)
    if (!(x->flags & WDS_SPEC_ALLOW_PIPE_FROM_FILES) &&
        strncmp(x->list.urls[i], "pipe:", 5) == 0)
      rc = wds__fail(x->e, WDS_ERR_SPEC, WDS__PIPE_FROM_FILE_REFUSED,
                     wds__url_redact(x->list.urls[i], (char[300]){0}, 300));
  if (rc != WDS_OK)
    wds__err_prefix(x->e, "%.300s line %zu", path, lineno);
  return rc;
}

/* @FILE: one spec per line, read in chunks so that no line or file size is
 * trusted. */
static int expand_file(expander *x, const char *path, int depth) {
  enum { CHUNK = 65536 };
  FILE *f = NULL;
  char *chunk = NULL, *line = NULL;
  size_t line_n = 0, line_cap = 0, lineno = 0;
  int rc = WDS_OK;
  if (depth >= WDS_SPEC_MAX_DEPTH)
    return wds__fail(x->e, WDS_ERR_SPEC,
                     "@FILE lists nested more than %d deep at \"%.300s\"",
                     WDS_SPEC_MAX_DEPTH, path);
  if (path[0] == '\0')
    return wds__fail(x->e, WDS_ERR_SPEC, "missing file name after '@'");
  if (++x->files > WDS__MAX_FILES)
    return wds__fail(x->e, WDS_ERR_LIMIT,
                     "more than %d @FILE lists read for one spec at \"%.300s\"",
                     WDS__MAX_FILES, path);
  int fd;
  if ((rc = wds__open_local(path, x->io, 1, &fd, x->e)) != WDS_OK) {
    wds__err_prefix(x->e, "cannot open @FILE \"%.300s\"", path);
    return rc;
  }
  if (!(f = fdopen(fd, "rb"))) {
    close(fd);
    return wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
  }
  if (!(chunk = malloc(CHUNK))) {
    rc = wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (;;) {
    size_t got = fread(chunk, 1, CHUNK, f);
    if (got == 0) {
      if (ferror(f)) {
        rc = wds__fail(x->e, WDS_ERR_OPEN, "cannot read @FILE \"%.300s\": %s",
                       path, strerror(errno));
        goto done;
      }
      break;
    }
    x->file_bytes += got;
    if (x->file_bytes > WDS__MAX_FILE_BYTES) {
      rc = wds__fail(x->e, WDS_ERR_LIMIT,
                     "@FILE lists of one spec larger than %" PRIu64
                     " bytes at \"%.300s\"",
                     WDS__MAX_FILE_BYTES, path);
      goto done;
    }
    for (size_t i = 0; i < got;) {
      char *nl = memchr(chunk + i, '\n', got - i);
      size_t take = nl ? (size_t)(nl - (chunk + i)) : got - i;
      if (take > WDS__MAX_PATTERN_BYTES - line_n) {
        rc = wds__fail(x->e, WDS_ERR_LIMIT,
                       "line %zu of @FILE \"%.300s\" is longer than %zu bytes",
                       lineno + 1, path, WDS__MAX_PATTERN_BYTES);
        goto done;
      }
      char *t = wds__grow(line, &line_cap, line_n + take, 1, 256);
      if (!t) {
        rc = wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
        goto done;
      }
      line = t;
      if (take > 0)
        memcpy(line + line_n, chunk + i, take);
      line_n += take;
      i += take;
      if (nl) {
        i++;
        if ((rc = expand_line(x, path, ++lineno, line, line_n, depth + 1)) !=
            WDS_OK)
          goto done;
        line_n = 0;
      }
    }
  }
  if (line_n > 0)
    rc = expand_line(x, path, ++lineno, line, line_n, depth + 1);
done:
  free(line);
  free(chunk);
  fclose(f);
  return rc;
}

/* Splits s[0..n) on "::" as str.split("::") does, skipping empty parts. */
static int expand_spec(expander *x, const char *s, size_t n, int depth) {
  size_t start = 0, i = 0;
  int rc = WDS_OK;
  for (;;) {
    size_t end;
    if (i + 1 < n && s[i] == ':' && s[i + 1] == ':')
      end = i;
    else if (i >= n)
      end = n;
    else {
      i++;
      continue;
    }
    if (end > start) {
      const char *part = s + start;
      size_t part_n = end - start;
      if (part[0] == '@') {
        char *path = malloc(part_n);
        if (!path)
          return wds__fail(x->e, WDS_ERR_NOMEM, "out of memory");
        memcpy(path, part + 1, part_n - 1);
        path[part_n - 1] = '\0';
        rc = expand_file(x, path, depth);
        free(path);
      } else {
        rc = expand_part(x, part, part_n);
      }
      if (rc != WDS_OK)
        return rc;
    }
    if (end == n)
      return WDS_OK;
    i = start = end + 2;
  }
}

/* ---- public API ------------------------------------------------------ */

/* Expands what[0..n) in turn into one list (full: as specs, else as brace
 * patterns), sharing one expander: one limit on URLs, bytes and @FILEs. A
 * failure's text goes into e. */
static int expand_entry(const char *const *what, size_t n, int full,
                        size_t max_urls, unsigned flags, const wds__io_opts *io,
                        wds_url_list *out, wds__err *e) {
  expander x;
  int rc;
  e->msg[0] = '\0';
  memset(&x, 0, sizeof x);
  x.max_urls = max_urls ? max_urls : WDS_DEFAULT_MAX_URLS;
  x.flags = flags;
  x.io = io;
  x.e = e;
  if (out) {
    out->urls = NULL;
    out->count = 0;
  }
  rc = WDS_OK;
  for (size_t i = 0; i < n && rc == WDS_OK; i++)
    if (!what || !what[i])
      rc = wds__fail(e, WDS_ERR_INVALID, "spec is NULL");
  if (rc == WDS_OK && !out)
    rc = wds__fail(e, WDS_ERR_INVALID, "out is NULL");
  for (size_t i = 0; i < n && rc == WDS_OK; i++) {
    if (full)
      rc = expand_spec(&x, what[i], strlen(what[i]), 0);
    else
      rc = expand_pattern(&x, what[i], strlen(what[i]));
  }
  if (rc == WDS_OK) {
    *out = x.list;
    if (out->count == 0) {
      free(out->urls);
      out->urls = NULL;
    }
    x.list.urls = NULL;
    x.list.count = 0;
  } else if (e->msg[0] == '\0') {
    wds__fail(e, rc, "%s", wds_strerror(rc));
  }
  wds_url_list_free(&x.list);
  if (rc == WDS_OK)
    e->msg[0] = '\0';
  return rc;
}

/* A public expansion: the failure's text into the thread's last error. */
static int expand_public(const char *const *what, size_t n, int full,
                         size_t max_urls, unsigned flags, wds_url_list *out) {
  wds__err e;
  int rc = expand_entry(what, n, full, max_urls, flags, NULL, out, &e);
  return wds__last_set(rc, e.msg);
}

int wds_spec_expand(const char *spec, size_t max_urls, wds_url_list *out) {
  return expand_public(&spec, 1, 1, max_urls, 0, out);
}

int wds_spec_expand_list(const char *const *specs, size_t nspecs,
                         size_t max_urls, wds_url_list *out) {
  return expand_public(specs, specs ? nspecs : 1, 1, max_urls, 0, out);
}

int wds_spec_expand_flags(const char *const *specs, size_t nspecs,
                          size_t max_urls, unsigned flags, wds_url_list *out) {
  return expand_public(specs, specs ? nspecs : 1, 1, max_urls, flags, out);
}

int wds__spec_expand_io(const char *const *specs, size_t nspecs,
                        size_t max_urls, unsigned flags, const wds__io_opts *io,
                        wds_url_list *out, wds__err *e) {
  return expand_entry(specs, specs ? nspecs : 1, 1, max_urls, flags, io, out,
                      e);
}

int wds_brace_expand(const char *pattern, size_t max_urls, wds_url_list *out) {
  return expand_public(&pattern, 1, 0, max_urls, 0, out);
}

void wds_url_list_free(wds_url_list *list) {
  if (!list)
    return;
  for (size_t i = 0; i < list->count; i++)
    free(list->urls[i]);
  free(list->urls);
  list->urls = NULL;
  list->count = 0;
}
