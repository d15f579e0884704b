/* tarfmt.h — the tar header block: its size, its number fields and its
 * checksum, as both the parser (tar.c) and the writer (tarw.c) read and
 * write them, and as the compression sniff (stream.c) recognises a plain
 * tar. Internal to wds.
 *
 * Header-only and inline: the parser sums and reads every member header, so
 * these sit on its hot path. Nothing here depends on a stream or a parser,
 * so stream.c and tar.c both build on it without depending on each other. */
#ifndef WDS_SHARDS_TARFMT_H
#define WDS_SHARDS_TARFMT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

#define WDS__TAR_BLOCK 512

/* Header field offsets (ustar). */
#define WDS__TAR_OFF_CHKSUM 148
#define WDS__TAR_CHKSUM_LEN 8
#define WDS__TAR_CHKSUM_END (WDS__TAR_OFF_CHKSUM + WDS__TAR_CHKSUM_LEN)

static inline int wds__tarfmt_is_space(uint8_t c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Python tarfile's nti(): base-256 when the first byte is 0x80 (0xff is
 * negative, refused here), else octal text up to the first NUL with
 * surrounding whitespace ignored; empty means 0. One pass: this runs twice
 * per member. */
static inline int wds__tarfmt_number(const uint8_t *f, size_t n,
                                     uint64_t *out) {
  if (f[0] == 0x80 || f[0] == 0xff) {
    if (f[0] == 0xff)
      return -1;
    uint64_t v = 0;
    for (size_t i = 1; i < n; i++) {
      if (v >> 55)
        return -1;
      v = (v << 8) | f[i];
    }
    *out = v;
    return 0;
  }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (n == 12) {
    /* The size field as every common writer fills it, "%011o\0", read
     * at once: eight digits as below, then the last three. */
    uint64_t a, b;
    memcpy(&a, f, 8);
    memcpy(&b, f + 4, 8);
    a ^= 0x3030303030303030ull;
    b ^= 0x0030303030303030ull; /* bytes 4..10 digits, byte 11 NUL */
    if (((a & 0xF8F8F8F8F8F8F8F8ull) | (b & 0xFFF8F8F8F8F8F8F8ull)) == 0) {
      a = ((a & 0x0007000700070007ull) << 3) |
          ((a >> 8) & 0x0007000700070007ull);
      a = ((a & 0x0000003F0000003Full) << 6) |
          ((a >> 16) & 0x0000003F0000003Full);
      a = ((a & 0xFFFull) << 12) | ((a >> 32) & 0xFFFull);
      b >>= 32; /* digits 8, 9, 10 */
      *out = (a << 9) | ((b & 7) << 6) | ((b >> 8 & 7) << 3) | (b >> 16 & 7);
      return 0;
    }
  }
#endif
  size_t i = 0;
  while (i < n && wds__tarfmt_is_space(f[i]))
    i++;
  uint64_t v = 0; /* fields are at most 12 bytes: 36 bits, no overflow */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (i + 8 <= n) {
    /* Eight octal digits at once (the common case: sizes are 11 digits). */
    uint64_t w;
    memcpy(&w, f + i, 8);
    uint64_t x = w ^ 0x3030303030303030ull; /* '0'..'7' -> 0..7 */
    if ((x & 0xF8F8F8F8F8F8F8F8ull) == 0) {
      /* Little-endian load: the first (most significant) digit is the low
       * byte. Merge neighbours into 6-, 12- and 24-bit groups. */
      x = ((x & 0x0007000700070007ull) << 3) |
          ((x >> 8) & 0x0007000700070007ull);
      x = ((x & 0x0000003F0000003Full) << 6) |
          ((x >> 16) & 0x0000003F0000003Full);
      v = ((x & 0xFFFull) << 12) | ((x >> 32) & 0xFFFull);
      i += 8;
    }
  }
#endif
  for (; i < n && (uint8_t)(f[i] - '0') < 8; i++)
    v = v * 8 + (uint64_t)(f[i] - '0');
  while (i < n && wds__tarfmt_is_space(f[i]))
    i++;
  if (i < n && f[i] != 0)
    return -1;
  *out = v;
  return 0;
}

/* Sum of the 512 bytes: every member header is summed once, so this is on
 * the hot path. SSE2 (x86-64's baseline) sums 16 bytes per instruction;
 * the portable version sums 16-bit lanes of 64-bit words, which cannot
 * overflow (64 words x 2 x 255 < 65536). */
static inline uint32_t wds__tarfmt_sum(const uint8_t *h) {
#if defined(__SSE2__) && defined(__x86_64__)
  const __m128i zero = _mm_setzero_si128();
  __m128i a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  for (int i = 0; i < WDS__TAR_BLOCK; i += 64) {
    const __m128i *p = (const __m128i *)(const void *)(h + i);
    a0 = _mm_add_epi64(a0, _mm_sad_epu8(_mm_loadu_si128(p), zero));
    a1 = _mm_add_epi64(a1, _mm_sad_epu8(_mm_loadu_si128(p + 1), zero));
    a2 = _mm_add_epi64(a2, _mm_sad_epu8(_mm_loadu_si128(p + 2), zero));
    a3 = _mm_add_epi64(a3, _mm_sad_epu8(_mm_loadu_si128(p + 3), zero));
  }
  __m128i acc = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  return (uint32_t)(_mm_cvtsi128_si64(acc) +
                    _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#else
  const uint64_t lo = 0x00FF00FF00FF00FFull;
  uint64_t acc = 0;
  for (int i = 0; i < WDS__TAR_BLOCK; i += 8) {
    uint64_t w;
    memcpy(&w, h + i, 8);
    acc += (w & lo) + ((w >> 8) & lo);
  }
  acc = (acc & 0x0000FFFF0000FFFFull) + ((acc >> 16) & 0x0000FFFF0000FFFFull);
  return (uint32_t)((acc & 0xFFFFFFFFull) + (acc >> 32));
#endif
}

/* Checks the header checksum given the plain sum of the block. */
static inline int wds__tarfmt_checksum_ok(const uint8_t *h, uint32_t sum) {
  uint64_t stored, w;
  memcpy(&w, h + WDS__TAR_OFF_CHKSUM, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  /* The form every common writer uses, "%06o\0 ", read at once (the same
   * value wds__tarfmt_number gives it); anything else goes through it. */
  uint64_t x = w ^ 0x2000303030303030ull;
  if ((x & 0xFFFFF8F8F8F8F8F8ull) == 0) {
    x <<= 16; /* "00dddddd": eight digits, merged as in wds__tarfmt_number */
    x = ((x & 0x0007000700070007ull) << 3) | ((x >> 8) & 0x0007000700070007ull);
    x = ((x & 0x0000003F0000003Full) << 6) |
        ((x >> 16) & 0x0000003F0000003Full);
    stored = ((x & 0xFFFull) << 12) | ((x >> 32) & 0xFFFull);
  } else
#endif
      if (wds__tarfmt_number(h + WDS__TAR_OFF_CHKSUM, WDS__TAR_CHKSUM_LEN,
                             &stored) != 0)
    return 0;
  /* The sum with the field counted as spaces: less the field's 8 bytes,
   * summed in 16-bit lanes of one word (no lane passes 4 x 255). */
  w = (w & 0x00FF00FF00FF00FFull) + ((w >> 8) & 0x00FF00FF00FF00FFull);
  uint32_t field = (uint32_t)((w * 0x0001000100010001ull) >> 48);
  uint32_t usum = sum + 8 * ' ' - field;
  if (stored == usum)
    return 1;
  int32_t ssum = 8 * ' ';
  for (int i = 0; i < WDS__TAR_BLOCK; i++)
    ssum += (i >= WDS__TAR_OFF_CHKSUM && i < WDS__TAR_CHKSUM_END)
                ? 0
                : (int8_t)h[i];
  return (int64_t)stored == (int64_t)ssum;
}

static inline int wds__tarfmt_is_header(const uint8_t *h) {
  return wds__tarfmt_checksum_ok(h, wds__tarfmt_sum(h));
}

/* Zero-padded octal in a field of n bytes: n - 1 digits and a NUL. The value
 * must fit (callers check). */
static inline void wds__tarfmt_put_octal(uint8_t *f, size_t n, uint64_t v) {
  f[n - 1] = '\0';
  for (size_t i = n - 1; i > 0; i--) {
    f[i - 1] = (uint8_t)('0' + (v & 7));
    v >>= 3;
  }
}

/* Writes the checksum of a header whose other fields are final, the way
 * Python's tarfile does: the field counts as eight spaces while summing,
 * then holds "%06o\0" and its eighth byte stays ' '. */
static inline void wds__tarfmt_seal(uint8_t *h) {
  memset(h + WDS__TAR_OFF_CHKSUM, ' ', WDS__TAR_CHKSUM_LEN);
  wds__tarfmt_put_octal(h + WDS__TAR_OFF_CHKSUM, 7, wds__tarfmt_sum(h));
}

#endif
