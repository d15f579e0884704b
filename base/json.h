/* json.h — the strict JSON reader, and the writer helpers. Internal.
 *
 * The reader is a cursor over a byte buffer with an explicit length (no NUL
 * terminator needed): callers walk the grammar they expect with the calls
 * below (recursive descent), and skip what they do not use. Strict means
 * RFC 8259: no comments, trailing commas, leading zeros, BOM, raw control
 * characters or invalid UTF-8 in strings. Strings decode all escapes;
 * \uXXXX surrogate pairs become UTF-8; lone surrogates are errors, except
 * that with WDS__JSON_SURROGATEESCAPE a lone \udc80..\udcff becomes the raw
 * byte 0x80..0xff (Python's surrogateescape: how the writer below, and so
 * the `wds` tools, write bytes that are not UTF-8). Nesting is limited to
 * WDS__JSON_MAX_DEPTH, so the stack is bounded whatever the input, and
 * skipping a value never allocates.
 *
 * Every error is WDS_ERR_FORMAT with "offset N: what" (N in bytes from the
 * start of the text), or "line L, column C: what" when the cursor has a
 * line number (JSON lines, one cursor per line). Fuzzed by
 * tests/fuzz/fuzz_json.c and, through the index, fuzz_index.c. */
#ifndef WDS_BASE_JSON_H
#define WDS_BASE_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

#define WDS__JSON_MAX_DEPTH 64
/* The largest JSON text a wds reader loads (2 GiB). */
#define WDS__JSON_MAX_BYTES ((size_t)1 << 31)

enum {
  WDS__JSON_SURROGATEESCAPE = 1 /* lone \udc80..\udcff: a raw byte */
};

typedef struct wds__json {
  const unsigned char *s;
  size_t n, pos;
  wds__err *e;
  unsigned flags; /* WDS__JSON_* */
  size_t line;    /* 0: errors name the offset; else this line number */
} wds__json;

/* A cursor at the start of text[0..n). e may be NULL. */
void wds__json_init(wds__json *j, const void *text, size_t n, unsigned flags,
                    wds__err *e);

/* Writes "offset AT: what" (or "line L, column C: what") into j's error and
 * returns WDS_ERR_FORMAT. */
int wds__json_fail(const wds__json *j, size_t at, const char *what);

/* Skips blanks (space, tab, CR, LF). */
void wds__json_ws(wds__json *j);

/* Skips blanks; returns the next byte, or -1 at the end of the text. */
int wds__json_peek(wds__json *j);

/* Expects byte c after blanks and consumes it; else fails with `what` (or
 * "unexpected end of input"). */
int wds__json_expect(wds__json *j, int c, const char *what);

/* Opens an array (open '[') or object ('{') after blanks; anything else
 * fails with `what`. *more = 0 when it is empty (its closing bracket is
 * consumed too), else 1: read an element, then wds__json_next(). */
int wds__json_open(wds__json *j, int open, const char *what, int *more);

/* After an element of an array (close ']') or object ('}'): consumes ','
 * (*more = 1) or the closing bracket (*more = 0); anything else fails. */
int wds__json_next(wds__json *j, int close, int *more);

/* Parses a string (blanks skipped first), validating all of it; writes up
 * to cap decoded bytes to out (may be NULL: validate and measure) and the
 * full decoded length to *len. Does not NUL-terminate. */
int wds__json_string(wds__json *j, char *out, size_t cap, size_t *len);

/* Parses a string into a new NUL-terminated malloc'd copy (*out), its
 * length to *len (may be NULL); a NUL inside is an error naming `what`
 * ("WHAT contains a NUL character"). */
int wds__json_string_dup(wds__json *j, const char *what, char **out,
                         size_t *len);

/* Parses an object key into key[0..cap) (NUL-terminated; a key that does
 * not fit, or holds a NUL, becomes "", which matches nothing) and the ':'
 * after it. */
int wds__json_key(wds__json *j, char *key, size_t cap);

/* Parses a number at the cursor (no blanks skipped). *is_uint: 1 for a
 * non-negative integer without fraction or exponent that fits in 64 bits
 * (*val its value), 2 for one too large (*val = UINT64_MAX), else 0. */
int wds__json_number(wds__json *j, int *is_uint, uint64_t *val);

/* Consumes the literal word ("true", "false", "null") at the cursor. */
int wds__json_literal(wds__json *j, const char *word);

/* Validates and skips one value of any type (blanks first) at nesting
 * depth `depth` (the top-level value is depth 1). */
int wds__json_skip(wds__json *j, int depth);

/* Fails unless only blanks remain ("unexpected data after WHAT"). */
int wds__json_end(wds__json *j, const char *what);

/* ---- writing ---- */

/* Writes s[0..n) as a JSON string (quotes included). Valid UTF-8 passes
 * through; '"', '\\' and control characters are escaped; bytes that are
 * not UTF-8 are written as \udcXX, as Python's surrogateescape +
 * json.dumps does (the reader's WDS__JSON_SURROGATEESCAPE reads them
 * back). */
void wds__json_write_string(FILE *f, const char *s, size_t n);

/* Writes v, or null when v is negative. */
void wds__json_write_i64_or_null(FILE *f, int64_t v);

/* Writes v with the printf format fmt (one double conversion: "%.6f",
 * "%.17g"), or null when v is not finite: JSON has no NaN or infinity
 * (printf would write "nan", "-nan" or "inf"). */
void wds__json_write_double(FILE *f, const char *fmt, double v);

#endif
