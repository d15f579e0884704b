/* tar.c — wds's own streaming tar parser.
 *
 * Reads the (decompressed) stream in large blocks into one window and parses
 * headers in place; member data is handed out as views into the window, never
 * copied, except when the window is compacted (the held bytes of the current
 * sample move to the front, at most once per half-window of input).
 *
 * Formats: v7, ustar (prefix field), GNU (long names 'L', long link names
 * 'K', base-256 numbers), POSIX pax (local 'x' and global 'g' headers: path,
 * size). Header checksums are verified (unsigned and signed sums, as GNU tar
 * and Python's tarfile accept). Which members are regular files, and how
 * names are formed, follows Python's tarfile, which WebDataset uses: '0',
 * '\0' and '7' are regular ('\0' with a trailing '/' is a directory); link,
 * device, directory and fifo entries carry no data; unknown types are skipped
 * over their size; the outermost extension header wins when several name one
 * member. GNU sparse members are refused.
 *
 * Unlike tarfile, the parser never treats damage as the end of the archive:
 * a stream must end with the end-of-archive zero block, and anything cut or
 * corrupt is an error naming the member and offset. */
#include "tar.h"

#include "base/assert.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

#include "sniff.h"
#include "tarfmt.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HEADER_SUM_AVX2 1
#endif

#define PAX_MAX_BYTES ((uint64_t)16 << 20)
/* Longest member name accepted (pax path, GNU long name): names are copied
 * per field, so this bounds the memory of a sample's names. */
#define NAME_MAX_BYTES ((size_t)64 << 10)
#define SMALL_SKIP_BYTES ((uint64_t)64 << 10)
/* wds__tar_read_into: a member at least this large turns on short window
 * fills (DIRECT_FILL_BYTES past what is needed) for the next DIRECT_MEMBERS
 * smaller members. */
#define DIRECT_MIN_BYTES ((uint64_t)64 << 10)
#define DIRECT_FILL_BYTES ((size_t)8 << 10)
#define DIRECT_MEMBERS 8
/* wds__tar_read_into: the first piece of the caller's buffer populated
 * ahead of the reads (the pieces then double). */
#define READ_POPULATE_MIN ((size_t)1 << 20)
/* wds__tar_skip_unread: a member at least this large turns them on too. */
#define SKIP_DIRECT_BYTES ((uint64_t)16 << 10)

struct wds__tar {
  wds__stream *stream;
  uint8_t *buf;
  size_t cap;
  size_t max_cap;
  uint64_t base;     /* virtual offset of buf[0] */
  size_t len;        /* bytes held: virtual [base, base + len) */
  uint64_t keep;     /* virtual offset: bytes before it may go */
  uint64_t hold_end; /* bytes in [hold_end, pos) are not held either */
  uint64_t pos;      /* virtual offset of the next header */
  /* The member last returned: its data and padding are skipped by the next
   * wds__tar_next() unless they were loaded. */
  int skip_pending;
  uint64_t skip_target; /* virtual offset after its padding */
  uint64_t last_hoff, last_data_off, last_size;
  uint64_t dropped; /* stream offset - virtual offset at pos */
  int stream_eof;
  int seen_header;
  /* Members were lately read straight into callers' buffers
   * (wds__tar_read_into): window fills read only a little past what they
   * need, so that the next large member is mostly still in the stream. */
  int direct;

  /* Extension state for the next member. */
  char *name; /* final name of the member being returned */
  size_t name_cap;
  /* Extension names are kept with their length: a NUL byte inside one is
   * reported (for a regular member), not silently cut at. */
  char *ext_name; /* from 'x' path or 'L' (outermost wins) */
  size_t ext_name_cap, ext_name_len;
  int has_ext_name;
  int ext_name_gnu; /* it came from a GNU long name ('L') */
  int has_ext_size;
  uint64_t ext_size;
  int ext_sparse;
  uint64_t ext_start; /* stream offset of the first extension header */
  int has_ext_start;
  char *glob_name; /* from 'g' path */
  size_t glob_name_cap, glob_name_len;
  int has_glob_name;
};

#ifdef HEADER_SUM_AVX2
/* wds__tarfmt_sum with 32-byte sums: half its instructions, on every
 * member header (chosen at run time, like the resize kernels). */
__attribute__((target("avx2"))) static uint32_t
header_sum_avx2(const uint8_t *h) {
  const __m256i zero = _mm256_setzero_si256();
  __m256i a0 = zero, a1 = zero;
  for (int i = 0; i < WDS__TAR_BLOCK; i += 128) {
    const __m256i *p = (const __m256i *)(const void *)(h + i);
    a0 = _mm256_add_epi64(a0, _mm256_sad_epu8(_mm256_loadu_si256(p), zero));
    a1 = _mm256_add_epi64(a1, _mm256_sad_epu8(_mm256_loadu_si256(p + 1), zero));
    a0 = _mm256_add_epi64(a0, _mm256_sad_epu8(_mm256_loadu_si256(p + 2), zero));
    a1 = _mm256_add_epi64(a1, _mm256_sad_epu8(_mm256_loadu_si256(p + 3), zero));
  }
  __m256i a = _mm256_add_epi64(a0, a1);
  __m128i s =
      _mm_add_epi64(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  return (uint32_t)(_mm_cvtsi128_si64(s) +
                    _mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s)));
}
#endif

static inline uint32_t header_sum(const uint8_t *h) {
#ifdef HEADER_SUM_AVX2
  if (__builtin_cpu_supports("avx2"))
    return header_sum_avx2(h);
#endif
  return wds__tarfmt_sum(h);
}

static uint64_t round_block(uint64_t n) {
  return (n + WDS__TAR_BLOCK - 1) & ~(uint64_t)(WDS__TAR_BLOCK - 1);
}

static int set_str(char **dst, size_t *cap, const char *src, size_t n) {
  char *p = wds__grow(*dst, cap, n + 1, 1, 256);
  if (!p)
    return WDS_ERR_NOMEM;
  *dst = p;
  memcpy(*dst, src, n);
  (*dst)[n] = '\0';
  return WDS_OK;
}

int wds__tar_open(wds__stream *stream, size_t block_bytes,
                  size_t max_window_bytes, wds__tar **out, wds__err *err) {
  *out = NULL;
  wds__tar *t = calloc(1, sizeof *t);
  if (!t)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  if (block_bytes < 64 * 1024)
    block_bytes = 64 * 1024;
  if (max_window_bytes < 2 * block_bytes)
    max_window_bytes = 2 * block_bytes;
  t->stream = stream;
  t->cap = block_bytes;
  t->max_cap = max_window_bytes;
  t->buf = malloc(t->cap);
  if (!t->buf) {
    free(t);
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (%zu-byte read buffer)",
                     block_bytes);
  }
  *out = t;
  return WDS_OK;
}

void wds__tar_close(wds__tar *t) {
  if (!t)
    return;
  free(t->buf);
  free(t->name);
  free(t->ext_name);
  free(t->glob_name);
  free(t);
}

void wds__tar_keep_from(wds__tar *t, uint64_t voff) {
  if (voff > t->keep)
    t->keep = voff;
  if (t->hold_end < t->keep)
    t->hold_end = t->keep;
}

void wds__tar_hold_to(wds__tar *t, uint64_t voff) {
  if (voff > t->hold_end)
    t->hold_end = voff;
}

/* Drops the unheld bytes between hold_end and pos (skipped headers and
 * members) by moving what was read after pos down onto hold_end. Nothing
 * outside the tar refers to offsets at or after pos at this point, so only
 * pos and the stream-offset correction move. */
static void drop_gap(wds__tar *t) {
  uint64_t from = t->hold_end > t->keep ? t->hold_end : t->keep;
  if (from < t->base)
    from = t->base;
  if (t->pos <= from || t->pos > t->base + t->len)
    return;
  /* Worth it when the gap is large, or when the next header would not fit
   * in the window beside the held bytes (which would grow the window). */
  if (t->pos - from < t->cap / 4 && t->pos + WDS__TAR_BLOCK - t->keep <= t->cap)
    return;
  size_t gap = (size_t)(t->pos - from);
  size_t at = (size_t)(from - t->base);
  WDS__ASSERT(at + gap <= t->len); /* the gap is in the window */
  memmove(t->buf + at, t->buf + at + gap, t->len - at - gap);
  t->len -= gap;
  t->dropped += gap;
  t->pos = from;
}

const uint8_t *wds__tar_view(const wds__tar *t, uint64_t voff) {
  WDS__ASSERT(voff >= t->base && voff - t->base <= t->len); /* held */
  return t->buf + (voff - t->base);
}

uint64_t wds__tar_offset(const wds__tar *t) {
  return (t->skip_pending ? t->skip_target : t->pos) + t->dropped;
}

/* Makes the window hold virtual [keep, end). Returns WDS_OK, WDS_EOF when the
 * stream ended first (the window then holds what there was), or an error.
 * Called twice per member, almost always for bytes the window holds: that
 * test is inline (fill_to), the rest is not. */
static int fill_more(wds__tar *t, uint64_t end, wds__err *err) {
  uint64_t keep = t->keep < t->base ? t->base : t->keep;
  /* The window: virtual [base, base + len) in buf[0, len), len <= cap <=
   * max_cap; what is kept starts inside it. */
  WDS__ASSERT(t->len <= t->cap && t->cap <= t->max_cap);
  WDS__ASSERT(keep - t->base <= t->len && end > t->base + t->len);
  uint64_t need = end - keep;
  if (need > t->max_cap)
    return wds__fail(err, WDS_ERR_LIMIT,
                     "the read window needs %llu bytes, over its limit of %zu "
                     "bytes (max_sample_bytes plus room for headers and "
                     "skipped entries)",
                     (unsigned long long)need, t->max_cap);
  if (need > t->cap) {
    size_t c = t->cap;
    while (c < need)
      c = c > t->max_cap / 2 ? t->max_cap : c * 2;
    /* Compact into the new buffer instead of realloc + memmove. */
    uint8_t *nb = malloc(c);
    if (!nb)
      return wds__fail(err, WDS_ERR_NOMEM,
                       "out of memory (growing the read window to %zu bytes)",
                       c);
    size_t held = t->len - (size_t)(keep - t->base);
    memcpy(nb, t->buf + (keep - t->base), held);
    free(t->buf);
    t->buf = nb;
    t->cap = c;
    t->len = held;
    t->base = keep;
    WDS__ASSERT(need <= t->cap && t->cap <= t->max_cap);
  } else if (keep > t->base &&
             (end > t->base + t->cap || t->cap - t->len < t->cap / 2)) {
    size_t shift = (size_t)(keep - t->base);
    memmove(t->buf, t->buf + shift, t->len - shift);
    t->len -= shift;
    t->base = keep;
  }
  while (t->base + t->len < end) {
    if (t->stream_eof)
      return WDS_EOF;
    size_t want = t->cap - t->len;
    if (t->direct) {
      uint64_t short_fill = end - (t->base + t->len) + DIRECT_FILL_BYTES;
      if (short_fill < want)
        want = (size_t)short_fill;
    }
    ssize_t n = wds__stream_read(t->stream, t->buf + t->len, want, err);
    if (n < 0)
      return (int)n;
    if (n == 0) {
      t->stream_eof = 1;
      return WDS_EOF;
    }
    t->len += (size_t)n;
    WDS__ASSERT(t->len <= t->cap);
  }
  return WDS_OK;
}

static inline int fill_to(wds__tar *t, uint64_t end, wds__err *err) {
  return end <= t->base + t->len ? WDS_OK : fill_more(t, end, err);
}

/* wds__tar_settle: the window reads ahead at most this much at a time. */
#define SETTLE_FILL_BYTES ((uint64_t)256 << 10)

int wds__tar_settle(wds__tar *t, uint64_t end, uint64_t max_open_bytes,
                    int *settled, wds__err *err) {
  /* Stream bytes read ahead go to the window's end, where the next stream
   * byte belongs whatever was skipped or read straight into a caller's
   * buffer before (their offsets stay right: see wds__tar_read_into). */
  while (wds__stream_final(t->stream) < end && !t->stream_eof) {
    uint64_t open = wds__stream_out(t->stream) - wds__stream_final(t->stream);
    uint64_t keep = t->keep < t->base ? t->base : t->keep;
    uint64_t wend = t->base + t->len;
    /* Fills grow with what is held (the window doubles, its compactions
     * amortised), so holding a large frame costs a copy of it, not one
     * per fill. */
    uint64_t fill =
        wend - keep > SETTLE_FILL_BYTES ? wend - keep : SETTLE_FILL_BYTES;
    if (open >= max_open_bytes)
      break; /* the frame is larger than the bound: not held */
    if (fill > max_open_bytes - open)
      fill = max_open_bytes - open;
    if (wend + fill - keep > t->max_cap)
      break; /* the window cannot hold more */
    int rc = fill_more(t, wend + fill, err);
    if (rc == WDS_EOF)
      break;
    if (rc != WDS_OK)
      return rc;
  }
  *settled = wds__stream_final(t->stream) >= end;
  return WDS_OK;
}

/* Moves pos to virtual target; stream bytes in between are not kept. The
 * common case, a target the window holds, is inline (skip_to). */
static int skip_more(wds__tar *t, uint64_t target, wds__err *err) {
  uint64_t held_end = t->base + t->len;
  if (target - held_end <= (t->direct ? DIRECT_FILL_BYTES : SMALL_SKIP_BYTES)) {
    int rc = fill_to(t, target, err);
    if (rc != WDS_OK)
      return rc;
    t->pos = target;
    return WDS_OK;
  }
  /* Large skip: drop the held part of the region and skip the rest in the
   * stream (a seek in a plain file, else reads into a scratch buffer), never
   * more than the region, so nothing after it is lost. The skipped bytes
   * then have no virtual offsets at all. */
  uint64_t remaining = target - held_end;
  WDS__ASSERT(t->pos >= t->base && t->pos - t->base <= t->len);
  t->len = (size_t)(t->pos - t->base);
  t->dropped += target - t->pos;
  uint8_t scratch[16384];
  while (remaining > 0) {
    ssize_t n =
        wds__stream_skip(t->stream, remaining, scratch, sizeof scratch, err);
    if (n < 0)
      return (int)n;
    if (n == 0) {
      t->stream_eof = 1;
      t->dropped -= remaining; /* report the offset where it really ended */
      return WDS_EOF;
    }
    remaining -= (uint64_t)n;
  }
  return WDS_OK;
}

static inline int skip_to(wds__tar *t, uint64_t target, wds__err *err) {
  if (target <= t->base + t->len) {
    t->pos = target;
    return WDS_OK;
  }
  return skip_more(t, target, err);
}

static size_t field_len(const uint8_t *f, size_t n) {
  const uint8_t *z = memchr(f, 0, n);
  return z ? (size_t)(z - f) : n;
}

/* Parses pax records "LEN key=value\n" in [p, p + n). */
static int parse_pax(wds__tar *t, const uint8_t *p, size_t n, int global,
                     uint64_t hoff, wds__err *err) {
  const char *path = NULL;
  size_t path_len = 0;
  int has_size = 0;
  uint64_t size = 0;
  size_t i = 0;
  while (i < n) {
    if (p[i] == 0) /* some writers pad with NULs */
      break;
    size_t j = i;
    uint64_t reclen = 0;
    while (j < n && p[j] >= '0' && p[j] <= '9' && reclen < (uint64_t)1 << 40)
      reclen = reclen * 10 + (uint64_t)(p[j++] - '0');
    if (j == i || j >= n || p[j] != ' ' || reclen < (uint64_t)(j - i + 3) ||
        reclen > n - i || p[i + reclen - 1] != '\n')
      return wds__fail(err, WDS_ERR_CORRUPT,
                       "malformed pax header record at offset %llu",
                       (unsigned long long)(hoff + WDS__TAR_BLOCK + i));
    const uint8_t *kv = p + j + 1;
    size_t kvlen = (size_t)(i + reclen - 1 - (j + 1));
    const uint8_t *eq = memchr(kv, '=', kvlen);
    if (!eq)
      return wds__fail(err, WDS_ERR_CORRUPT,
                       "malformed pax header record (no '=') at offset %llu",
                       (unsigned long long)(hoff + WDS__TAR_BLOCK + i));
    size_t klen = (size_t)(eq - kv);
    const char *val = (const char *)eq + 1;
    size_t vlen = kvlen - klen - 1;
    if (klen == 4 && memcmp(kv, "path", 4) == 0) {
      /* tarfile: the last record of a header wins, with trailing '/'
       * removed. */
      while (vlen > 0 && val[vlen - 1] == '/')
        vlen--;
      if (vlen > NAME_MAX_BYTES)
        return wds__fail(err, WDS_ERR_LIMIT,
                         "pax path at offset %llu is longer than %zu bytes",
                         (unsigned long long)hoff, NAME_MAX_BYTES);
      path = val;
      path_len = vlen;
    } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
      uint64_t v = 0;
      int ok = vlen > 0;
      for (size_t k = 0; ok && k < vlen; k++) {
        if (val[k] < '0' || val[k] > '9' || v > (UINT64_MAX >> 1) / 10)
          ok = 0;
        else
          v = v * 10 + (uint64_t)(val[k] - '0');
      }
      if (!ok)
        return wds__fail(err, WDS_ERR_CORRUPT,
                         "invalid size in the pax header at offset %llu",
                         (unsigned long long)hoff);
      has_size = 1;
      size = v;
    } else if (klen > 11 && memcmp(kv, "GNU.sparse.", 11) == 0) {
      if (!global)
        t->ext_sparse = 1;
    }
    i += (size_t)reclen;
  }
  /* Across headers the outermost wins (tarfile applies the inner one
   * first). A global size is not applied: tarfile ignores it when finding
   * the next header, so honouring it would only desynchronise. */
  if (path && global) {
    if (set_str(&t->glob_name, &t->glob_name_cap, path, path_len) != WDS_OK)
      return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
    t->glob_name_len = path_len;
    t->has_glob_name = 1;
  } else if (path && !t->has_ext_name) {
    if (set_str(&t->ext_name, &t->ext_name_cap, path, path_len) != WDS_OK)
      return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
    t->ext_name_len = path_len;
    t->ext_name_gnu = 0;
    t->has_ext_name = 1;
  }
  if (has_size && !global && !t->has_ext_size) {
    t->has_ext_size = 1;
    t->ext_size = size;
  }
  return WDS_OK;
}

/* A regular member whose extension name holds a NUL byte. A C string (and
 * so a wds key) cannot hold it, and dropping the member (its name cut at
 * the NUL has no extension, or names another member) would lose data
 * silently: Python's tarfile keeps a pax path whole. Links, directories
 * and the like carry no data and are skipped as usual. The name is shown
 * with the NULs as \0. */
static int name_nul_error(const char *name, size_t len, const char *origin,
                          uint64_t off, wds__err *err) {
  char shown[256];
  size_t o = 0, i = 0;
  size_t at = (size_t)((const char *)memchr(name, 0, len) - name);
  for (; i < len && o + 3 < sizeof shown; i++) {
    if (name[i] == 0) {
      shown[o++] = '\\';
      shown[o++] = '0';
    } else {
      shown[o++] = name[i];
    }
  }
  shown[o] = '\0';
  int gnu = origin[0] == 'G';
  return wds__fail(err, gnu ? WDS_ERR_CORRUPT : WDS_ERR_FORMAT,
                   "member \"%s%s\" at offset %llu: its name (%s record) has "
                   "a NUL byte at position %zu%s",
                   shown, i < len ? "..." : "", (unsigned long long)off, origin,
                   at,
                   gnu ? " followed by more name bytes (tar would cut the "
                         "name there)"
                       : ", which wds cannot represent in a name (Python's "
                         "tarfile keeps it)");
}

static void clear_ext(wds__tar *t) {
  t->has_ext_name = 0;
  t->has_ext_size = 0;
  t->ext_sparse = 0;
  t->has_ext_start = 0;
}

/* Error for a stream that ended at stream offset `at` while reading the
 * header that starts at virtual offset hv. */
static int header_eof(wds__tar *t, uint64_t hv, wds__err *err) {
  uint64_t have = t->base + t->len > hv ? t->base + t->len - hv : 0;
  uint64_t at = hv + t->dropped;
  if (at == 0 && !t->seen_header) {
    /* Less than one block in all: empty, or something that is not a tar
     * (an error page) rather than a tar cut inside its first header, when
     * it is something known or came out of a compressed stream. */
    const char *codec = wds__stream_codec(t->stream);
    const uint8_t *p = have ? wds__tar_view(t, hv) : NULL;
    if (have == 0 || strcmp(codec, "none") != 0 || wds__sniff(p, (size_t)have))
      return wds__not_tar(err, codec, p, (size_t)have);
  }
  /* The messages say "truncated" inside the sentence: a caller that labels
   * the error by its code (wds verify: "truncated: ...") does not double
   * a leading "truncated: ". */
  if (have == 0)
    return wds__fail(err, WDS_ERR_TRUNCATED,
                     "stream truncated at offset %llu: it ends without the "
                     "end-of-archive marker",
                     (unsigned long long)at);
  return wds__fail(err, WDS_ERR_TRUNCATED,
                   "stream truncated inside the tar header at offset %llu "
                   "(%llu of 512 bytes)",
                   (unsigned long long)at, (unsigned long long)have);
}

/* Error for a stream that ended inside a member's data (or padding), which
 * starts at stream offset data_start. */
static int data_eof(wds__tar *t, const char *name, uint64_t hoff,
                    uint64_t data_start, uint64_t size, wds__err *err) {
  uint64_t end = t->base + t->len + t->dropped;
  uint64_t got = end > data_start ? end - data_start : 0;
  if (got > size)
    got = size;
  return wds__fail(err, WDS_ERR_TRUNCATED,
                   "member \"%s\" at offset %llu: stream truncated after %llu "
                   "of %llu data bytes",
                   name, (unsigned long long)hoff, (unsigned long long)got,
                   (unsigned long long)size);
}

int wds__tar_next(wds__tar *t, wds__tar_member *m, wds__err *err) {
  clear_ext(t);
  if (t->skip_pending) {
    t->skip_pending = 0;
    int rc = skip_to(t, t->skip_target, err);
    if (rc == WDS_EOF)
      return data_eof(t, t->name, t->last_hoff, t->last_data_off, t->last_size,
                      err);
    if (rc != WDS_OK) {
      wds__err_prefix(err, "member \"%s\" at offset %llu", t->name,
                      (unsigned long long)t->last_hoff);
      return rc;
    }
  }
  for (;;) {
    drop_gap(t);
    uint64_t hv = t->pos;
    int rc = fill_to(t, hv + WDS__TAR_BLOCK, err);
    if (rc == WDS_EOF)
      return header_eof(t, hv, err);
    if (rc != WDS_OK) {
      wds__err_prefix(err, "tar header at offset %llu",
                      (unsigned long long)(hv + t->dropped));
      return rc;
    }
    const uint8_t *h = wds__tar_view(t, hv);
    uint64_t hoff = hv + t->dropped;
    uint32_t sum = header_sum(h);
    if (sum == 0) { /* a zero block: the end-of-archive marker */
      t->pos = hv + WDS__TAR_BLOCK;
      if (t->has_ext_start)
        return wds__fail(err, WDS_ERR_CORRUPT,
                         "extension header at offset %llu is followed by the "
                         "end-of-archive marker instead of a member",
                         (unsigned long long)t->ext_start);
      return WDS_EOF;
    }
    if (!wds__tarfmt_checksum_ok(h, sum)) {
      if (!t->seen_header)
        return wds__not_tar(err, wds__stream_codec(t->stream), h,
                            WDS__TAR_BLOCK);
      return wds__fail(err, WDS_ERR_CORRUPT,
                       "bad tar header checksum at offset %llu",
                       (unsigned long long)hoff);
    }
    t->seen_header = 1;
    if (!t->has_ext_start) {
      t->has_ext_start = 1;
      t->ext_start = hoff;
    }
    char type = (char)h[156];
    size_t nlen = field_len(h, 100);
    uint64_t hsize;
    if (wds__tarfmt_number(h + 124, 12, &hsize) != 0)
      return wds__fail(err, WDS_ERR_CORRUPT,
                       "member \"%.*s\" at offset %llu: invalid size field in "
                       "the tar header",
                       (int)nlen, (const char *)h, (unsigned long long)hoff);
    uint64_t data_v = hv + WDS__TAR_BLOCK;
    uint64_t padded = round_block(hsize);
    if (padded < hsize)
      return wds__fail(err, WDS_ERR_CORRUPT,
                       "member at offset %llu: invalid size field in the tar "
                       "header",
                       (unsigned long long)hoff);

    if (type == 'x' || type == 'g' || type == 'X' || type == 'L') {
      uint64_t limit = type == 'L' ? NAME_MAX_BYTES + 1 : PAX_MAX_BYTES;
      if (hsize > limit)
        return wds__fail(err, WDS_ERR_CORRUPT,
                         "%s header at offset %llu has an implausible size "
                         "(%llu bytes)",
                         type == 'L' ? "GNU long name" : "pax",
                         (unsigned long long)hoff, (unsigned long long)hsize);
      rc = fill_to(t, data_v + hsize, err);
      if (rc == WDS_EOF)
        return data_eof(t, type == 'L' ? "././@LongLink" : "pax header", hoff,
                        data_v + t->dropped, hsize, err);
      if (rc != WDS_OK) {
        wds__err_prefix(err, "extension header at offset %llu",
                        (unsigned long long)hoff);
        return rc;
      }
      const uint8_t *d = wds__tar_view(t, data_v);
      if (type == 'L') {
        if (!t->has_ext_name) {
          /* The name and its terminating NUL (writers may pad with more).
           * Anything after the first NUL is kept, and reported below if
           * this names a regular member: tar and tarfile would cut the
           * name there, so a member "a\0b.jpg" would vanish unseen. */
          size_t len = (size_t)hsize;
          while (len > 0 && d[len - 1] == 0)
            len--;
          if (set_str(&t->ext_name, &t->ext_name_cap, (const char *)d, len) !=
              WDS_OK)
            return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
          t->ext_name_len = len;
          t->ext_name_gnu = 1;
          t->has_ext_name = 1;
        }
      } else {
        rc = parse_pax(t, d, (size_t)hsize, type == 'g', hoff, err);
        if (rc != WDS_OK)
          return rc;
        if (type == 'g')
          t->has_ext_start = 0; /* a global header belongs to no member */
      }
      uint64_t data_off = data_v + t->dropped;
      rc = skip_to(t, data_v + padded, err);
      if (rc == WDS_EOF)
        return data_eof(t, "extension header", hoff, data_off, hsize, err);
      if (rc != WDS_OK) {
        wds__err_prefix(err, "extension header at offset %llu",
                        (unsigned long long)hoff);
        return rc;
      }
      continue;
    }

    /* The member's final name: outermost extension, then global pax path,
     * then the header (ustar prefix + name unless a GNU type). */
    const char *nm;
    size_t nml;
    const char *origin = NULL; /* the record an extension name came from */
    if (t->has_ext_name) {
      nm = t->ext_name;
      nml = t->ext_name_len;
      origin = t->ext_name_gnu ? "GNU long name" : "pax path";
    } else if (t->has_glob_name) {
      nm = t->glob_name;
      nml = t->glob_name_len;
      origin = "global pax path";
    } else if (h[345] == 0 || type == 'K' || type == 'S') {
      if (set_str(&t->name, &t->name_cap, (const char *)h, nlen) != WDS_OK)
        return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
      nm = t->name;
      nml = nlen;
    } else {
      size_t plen = field_len(h + 345, 155);
      char tmp[155 + 1 + 100];
      memcpy(tmp, h + 345, plen);
      tmp[plen] = '/';
      memcpy(tmp + plen + 1, h, nlen);
      nml = plen + 1 + nlen;
      if (set_str(&t->name, &t->name_cap, tmp, nml) != WDS_OK)
        return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
      nm = t->name;
    }
    if (nm != t->name) {
      if (set_str(&t->name, &t->name_cap, nm, nml) != WDS_OK)
        return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
    }
    uint64_t size = t->has_ext_size ? t->ext_size : hsize;
    uint64_t first_off = t->ext_start;

    int regular = type == '0' || type == '7' ||
                  (type == '\0' && !(nlen > 0 && h[nlen - 1] == '/'));
    if (regular && origin && memchr(t->name, 0, nml))
      return name_nul_error(t->name, nml, origin, first_off, err);
    if (type == 'S' || (regular && t->ext_sparse))
      return wds__fail(err, WDS_ERR_FORMAT,
                       "member \"%s\" at offset %llu: GNU sparse files are not "
                       "supported",
                       t->name, (unsigned long long)first_off);
    if (!regular) {
      /* Links, devices, directories and fifos carry no data (as in
       * tarfile); other types are skipped over their size. */
      int no_data = (type >= '1' && type <= '6') || type == '\0';
      /* A long link name ('K') is read by its own size, like 'L'; a pax
       * size belongs to the member after it. */
      uint64_t dsize = type == 'K' ? hsize : size;
      uint64_t skip = no_data ? 0 : round_block(dsize);
      if (!no_data && skip < dsize)
        return wds__fail(err, WDS_ERR_CORRUPT,
                         "member \"%s\" at offset %llu: invalid size", t->name,
                         (unsigned long long)first_off);
      uint64_t data_off = data_v + t->dropped;
      rc = skip_to(t, data_v + skip, err);
      if (rc == WDS_EOF)
        return data_eof(t, t->name, first_off, data_off, dsize, err);
      if (rc != WDS_OK) {
        wds__err_prefix(err, "member \"%s\" at offset %llu", t->name,
                        (unsigned long long)first_off);
        return rc;
      }
      if (type != 'K') /* a long link name leaves a pending long name */
        clear_ext(t);
      continue;
    }
    if (round_block(size) < size)
      return wds__fail(err, WDS_ERR_CORRUPT,
                       "member \"%s\" at offset %llu: invalid size", t->name,
                       (unsigned long long)first_off);
    m->name = t->name;
    m->name_len = nml;
    m->size = size;
    m->header_offset = first_off;
    m->data_offset = data_v + t->dropped;
    m->data_voff = data_v;
    /* The next header follows the padded data, loaded or not. */
    t->skip_pending = 1;
    t->skip_target = data_v + round_block(size);
    /* The next header is read soon, after the caller has handled this
     * member: start fetching it now if it is already in the window. */
    if (t->skip_target + WDS__TAR_BLOCK <= t->base + t->len) {
      const uint8_t *nh = t->buf + (t->skip_target - t->base);
      for (int i = 0; i < WDS__TAR_BLOCK; i += 64)
        __builtin_prefetch(nh + i);
    }
    t->last_hoff = first_off;
    t->last_data_off = m->data_offset;
    t->last_size = size;
    t->pos = data_v;
    return WDS_OK;
  }
}

int wds__tar_load(wds__tar *t, const wds__tar_member *m, wds__err *err) {
  int rc = fill_to(t, m->data_voff + m->size, err);
  if (rc == WDS_EOF)
    return data_eof(t, m->name, m->header_offset, m->data_offset, m->size, err);
  if (rc != WDS_OK) /* decompression, I/O, limits: say where */
    wds__err_prefix(err, "member \"%s\" at offset %llu (%llu bytes)", m->name,
                    (unsigned long long)m->header_offset,
                    (unsigned long long)m->size);
  return rc;
}

void wds__tar_skip_unread(wds__tar *t, const wds__tar_member *m) {
  if (m->size >= SKIP_DIRECT_BYTES)
    t->direct = DIRECT_MEMBERS;
}

int wds__tar_read_into(wds__tar *t, const wds__tar_member *m, void *dst,
                       uint64_t made_bytes, wds__err *err) {
  uint64_t end = t->base + t->len;
  uint64_t have = end > m->data_voff ? end - m->data_voff : 0;
  if (have > m->size)
    have = m->size;
  WDS__ASSERT(have == 0 || m->data_voff >= t->base); /* data not dropped */
  if (m->size >= DIRECT_MIN_BYTES)
    t->direct = DIRECT_MEMBERS;
  else if (t->direct)
    t->direct--;
  if (have)
    memcpy(dst, wds__tar_view(t, m->data_voff), (size_t)have);
  if (have == m->size)
    return WDS_OK; /* all of it was in the window, which keeps it */
  /* The window ends inside the data: the rest comes straight from the
   * stream. Those bytes get no virtual offsets (like a large skip), so the
   * padding after them is at the window's end. */
  uint8_t *p = (uint8_t *)dst + have;
  uint64_t left = m->size - have;
  /* dst's size is the header's claim, not what the stream holds: its pages
   * past the made_bytes already resident are made (populated) a piece at a
   * time ahead of the reads, pieces growing with the bytes read (at least
   * READ_POPULATE_MIN, at most as many as read so far), so a member that
   * claims a gigabyte in a short stream costs the bytes it has, not the
   * claim. A recycled buffer (made_bytes m->size) is never populated
   * again: that was one madvise per sample in the steady state. */
  uint8_t *made = p; /* dst's pages are made up to here */
  if (made_bytes > have)
    made =
        (uint8_t *)dst + (size_t)(made_bytes < m->size ? made_bytes : m->size);
  while (left > 0) {
    size_t want = left > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)left;
    if (p == made) {
      size_t done = (size_t)(p - (uint8_t *)dst);
      size_t piece = done > READ_POPULATE_MIN ? done : READ_POPULATE_MIN;
      if (piece > want)
        piece = want;
      wds__populate_write(made, piece);
      made += piece;
    }
    if (want > (size_t)(made - p))
      want = (size_t)(made - p);
    ssize_t n = t->stream_eof ? 0 : wds__stream_read(t->stream, p, want, err);
    if (n < 0) {
      wds__err_prefix(err, "member \"%s\" at offset %llu (%llu bytes)", m->name,
                      (unsigned long long)m->header_offset,
                      (unsigned long long)m->size);
      return (int)n;
    }
    if (n == 0) {
      t->stream_eof = 1;
      uint64_t got = m->size - left;
      return wds__fail(err, WDS_ERR_TRUNCATED,
                       "member \"%s\" at offset %llu: stream truncated "
                       "after %llu of %llu data bytes",
                       m->name, (unsigned long long)m->header_offset,
                       (unsigned long long)got, (unsigned long long)m->size);
    }
    p += n;
    left -= (uint64_t)n;
  }
  t->dropped += m->size - have;
  t->skip_target = end + (round_block(m->size) - m->size);
  return WDS_OK;
}
