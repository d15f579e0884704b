/* utf8.h — the one UTF-8 validator and encoder. Internal.
 *
 * Valid means RFC 3629: shortest form, no surrogates (U+D800..U+DFFF), at
 * most U+10FFFF. Its users are base/json.c (the JSON reader and writer:
 * the index and the tools' JSON outputs go through them) and base/text.c
 * (names escaped for a terminal), so what one accepts the others accept. */
#ifndef WDS_BASE_UTF8_H
#define WDS_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the valid UTF-8 sequence at s (at most n bytes, n > 0),
 * 0 if it is invalid or cut short. */
size_t wds__utf8_len(const unsigned char *s, size_t n);

/* 1 if s[0..n) is all valid UTF-8, else 0; *bad (when not NULL) gets the
 * offset of the first invalid byte (n when valid). */
int wds__utf8_valid(const void *s, size_t n, size_t *bad);

/* Encodes code point cp (at most U+10FFFF) into out; returns its length
 * (1..4). Surrogates are encoded as they are (callers exclude them). */
size_t wds__utf8_encode(uint32_t cp, unsigned char out[4]);

#endif
