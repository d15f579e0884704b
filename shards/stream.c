/* stream.c — compression detection and decompression for one shard.
 *
 * open() reads the first block of the source (up to 512 bytes, more if a
 * pipe delivers more) and decides:
 *   - a valid tar header or a zero block -> no codec, bytes pass through;
 *   - the zstd magic (or a skippable frame) -> libzstd streaming, writing
 *     straight into the caller's buffer;
 *   - anything else -> libarchive with every decompression filter and the
 *     "raw" format; if libarchive finds no filter either, the stream is
 *     neither a tar nor compressed and open() fails with WDS_ERR_FORMAT.
 * The peeked bytes are replayed before the rest of the source, so nothing
 * ever seeks. Compressed framing is checked to its end: a stream that stops
 * inside a zstd frame or gzip member is WDS_ERR_TRUNCATED. */
#include "stream.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "source.h"
#include "tar.h"

enum codec { CODEC_NONE, CODEC_ZSTD, CODEC_ARCHIVE };

#define PEEK_BYTES 512
#define ARCHIVE_BLOCK (128 * 1024)

struct wds__stream {
  wds__source *src;
  enum codec codec;
  uint8_t peek[PEEK_BYTES];
  size_t peek_len, peek_pos;
  int src_eof;
  uint64_t compressed_bytes;  /* read from the source so far */

  /* zstd */
  ZSTD_DCtx *zd;
  uint8_t *zin;
  size_t zin_cap;
  ZSTD_inBuffer in;
  size_t zlast;  /* last ZSTD_decompressStream() hint; 0 = frame complete */

  /* libarchive */
  struct archive *ar;
  uint8_t *abuf;
  wds__err src_err;  /* a source error seen inside a libarchive callback */
  int src_failed;
  int src_status;
  char filter_name[32];
};

/* Source reads, replaying the peeked bytes first. */
static ssize_t raw_read(wds__stream *s, void *dst, size_t cap, wds__err *err) {
  if (s->peek_pos < s->peek_len) {
    size_t n = s->peek_len - s->peek_pos;
    if (n > cap)
      n = cap;
    memcpy(dst, s->peek + s->peek_pos, n);
    s->peek_pos += n;
    return (ssize_t)n;
  }
  if (s->src_eof)
    return 0;
  ssize_t n = wds__source_read(s->src, dst, cap, err);
  if (n == 0)
    s->src_eof = 1;
  if (n > 0)
    s->compressed_bytes += (uint64_t)n;
  return n;
}

static ssize_t archive_read_cb(struct archive *a, void *ctx,
                               const void **buf) {
  wds__stream *s = ctx;
  *buf = s->abuf;
  ssize_t n = raw_read(s, s->abuf, ARCHIVE_BLOCK, &s->src_err);
  if (n < 0) {
    s->src_failed = 1;
    s->src_status = (int)n;
    archive_set_error(a, EIO, "%s", s->src_err.msg);
    return -1;
  }
  return n;
}

static int is_zstd_magic(const uint8_t *p, size_t n) {
  if (n < 4)
    return 0;
  uint32_t m = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
  return m == 0xFD2FB528u || (m & 0xFFFFFFF0u) == 0x184D2A50u;
}

static int is_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return 0;
  return 1;
}

static int open_zstd(wds__stream *s, wds__err *err) {
  s->zd = ZSTD_createDCtx();
  s->zin_cap = ZSTD_DStreamInSize();
  s->zin = malloc(s->zin_cap);
  if (!s->zd || !s->zin)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (zstd)");
  s->in.src = s->zin;
  s->in.size = 0;
  s->in.pos = 0;
  s->zlast = 1;
  return WDS_OK;
}

/* Compression formats named by their magic, for messages when libarchive
 * cannot even start decoding (a stream cut inside its first header). */
static const char *magic_name(const uint8_t *p, size_t n) {
  static const struct {
    const char *name;
    const char *magic;
    size_t len;
  } table[] = {{"gzip", "\x1f\x8b", 2},          {"bzip2", "BZh", 3},
               {"xz", "\xfd" "7zXZ\x00", 6},       {"lz4", "\x04\x22\x4d\x18", 4},
               {"lzip", "LZIP", 4},                {"compress", "\x1f\x9d", 2},
               {"lzop", "\x89LZO\x00", 5}};
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (n >= table[i].len && memcmp(p, table[i].magic, table[i].len) == 0)
      return table[i].name;
  return NULL;
}

static int archive_status(wds__stream *s, wds__err *err, const char *what) {
  if (s->src_failed) {
    memcpy(err->msg, s->src_err.msg, sizeof err->msg);
    return s->src_status;
  }
  const char *msg = archive_error_string(s->ar);
  if (!msg)
    msg = "unknown error";
  /* libarchive has no distinct code for a cut stream; its filters say so
   * in words ("truncated gzip input", xz's "No progress is possible"). */
  int truncated = strstr(msg, "runcated") != NULL ||
                  strstr(msg, "remature") != NULL ||
                  strstr(msg, "nexpected end") != NULL ||
                  strstr(msg, "No progress is possible") != NULL;
  return wds__fail(err, truncated ? WDS_ERR_TRUNCATED : WDS_ERR_DECOMPRESS,
                   "%s%s (%s data, after %llu compressed bytes): %s",
                   truncated ? "truncated: " : "", what, s->filter_name,
                   (unsigned long long)s->compressed_bytes, msg);
}

static int not_tar(const wds__stream *s, wds__err *err) {
  return wds__fail(err, WDS_ERR_FORMAT,
                   "not a tar archive: no valid tar header at offset 0 and "
                   "no known compression (first bytes %02x %02x %02x %02x)",
                   s->peek_len > 0 ? s->peek[0] : 0,
                   s->peek_len > 1 ? s->peek[1] : 0,
                   s->peek_len > 2 ? s->peek[2] : 0,
                   s->peek_len > 3 ? s->peek[3] : 0);
}

static int open_archive(wds__stream *s, wds__err *err) {
  s->abuf = malloc(ARCHIVE_BLOCK);
  s->ar = archive_read_new();
  if (!s->abuf || !s->ar)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (libarchive)");
  const char *magic = magic_name(s->peek, s->peek_len);
  snprintf(s->filter_name, sizeof s->filter_name, "%s",
           magic ? magic : "compressed");
  if (archive_read_support_filter_all(s->ar) < ARCHIVE_WARN ||
      archive_read_support_format_raw(s->ar) != ARCHIVE_OK)
    return wds__fail(err, WDS_ERR_FORMAT, "libarchive setup failed: %s",
                     archive_error_string(s->ar));
  if (archive_read_open(s->ar, s, NULL, archive_read_cb, NULL) != ARCHIVE_OK) {
    if (s->src_failed || magic)
      return archive_status(s, err, "cannot decompress");
    return not_tar(s, err);
  }
  if (archive_filter_count(s->ar) <= 1 ||
      archive_filter_code(s->ar, 0) == ARCHIVE_FILTER_NONE) {
    if (magic) /* the filter could not even read its own header */
      return wds__fail(err, WDS_ERR_TRUNCATED,
                       "truncated: %s data ends inside its header (%llu "
                       "compressed bytes)",
                       magic, (unsigned long long)s->compressed_bytes);
    return not_tar(s, err);
  }
  const char *fname = archive_filter_name(s->ar, 0);
  if (fname)
    snprintf(s->filter_name, sizeof s->filter_name, "%s", fname);
  struct archive_entry *e;
  int r = archive_read_next_header(s->ar, &e);
  if (r == ARCHIVE_EOF)
    return WDS_OK; /* empty payload: the tar parser reports it */
  if (r < ARCHIVE_WARN)
    return archive_status(s, err, "cannot decompress");
  return WDS_OK;
}

int wds__stream_open(const char *url, wds__stream **out, wds__err *err) {
  int rc;
  *out = NULL;
  wds__stream *s = calloc(1, sizeof *s);
  if (!s)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  rc = wds__source_open(url, &s->src, err);
  if (rc != WDS_OK)
    goto done;
  /* Peek: pipes may deliver the first block in pieces. */
  while (s->peek_len < PEEK_BYTES) {
    ssize_t n = wds__source_read(s->src, s->peek + s->peek_len,
                                 PEEK_BYTES - s->peek_len, err);
    if (n < 0) {
      rc = (int)n;
      goto done;
    }
    if (n == 0) {
      s->src_eof = 1;
      break;
    }
    s->peek_len += (size_t)n;
    s->compressed_bytes += (uint64_t)n;
  }
  if (s->peek_len == PEEK_BYTES &&
      (wds__tar_block_is_header(s->peek) || is_zero(s->peek, PEEK_BYTES))) {
    s->codec = CODEC_NONE;
  } else if (is_zstd_magic(s->peek, s->peek_len)) {
    s->codec = CODEC_ZSTD;
    rc = open_zstd(s, err);
  } else if (s->peek_len == 0) {
    s->codec = CODEC_NONE; /* the tar parser reports the empty stream */
  } else {
    s->codec = CODEC_ARCHIVE;
    rc = open_archive(s, err);
  }
done:
  if (rc != WDS_OK) {
    wds__stream_close(s);
    return rc;
  }
  *out = s;
  return WDS_OK;
}

static ssize_t zstd_read(wds__stream *s, void *dst, size_t cap,
                         wds__err *err) {
  for (;;) {
    if (s->in.pos == s->in.size && !s->src_eof) {
      ssize_t n = raw_read(s, s->zin, s->zin_cap, err);
      if (n < 0)
        return n;
      s->in.size = (size_t)n;
      s->in.pos = 0;
    }
    if (s->in.pos == s->in.size && s->src_eof) {
      if (s->zlast != 0)
        return wds__fail(err, WDS_ERR_TRUNCATED,
                         "truncated: zstd stream ends inside a frame (after "
                         "%llu compressed bytes)",
                         (unsigned long long)s->compressed_bytes);
      return 0;
    }
    ZSTD_outBuffer o = {dst, cap, 0};
    size_t r = ZSTD_decompressStream(s->zd, &o, &s->in);
    if (ZSTD_isError(r))
      return wds__fail(err, WDS_ERR_DECOMPRESS,
                       "corrupt zstd data (within the first %llu compressed "
                       "bytes): %s",
                       (unsigned long long)s->compressed_bytes,
                       ZSTD_getErrorName(r));
    s->zlast = r;
    if (o.pos > 0)
      return (ssize_t)o.pos;
  }
}

ssize_t wds__stream_read(wds__stream *s, void *dst, size_t cap,
                         wds__err *err) {
  if (cap == 0)
    return 0;
  switch (s->codec) {
  case CODEC_NONE:
    return raw_read(s, dst, cap, err);
  case CODEC_ZSTD:
    return zstd_read(s, dst, cap, err);
  case CODEC_ARCHIVE: {
    la_ssize_t n = archive_read_data(s->ar, dst, cap);
    if (n < 0)
      return archive_status(s, err, "cannot decompress");
    return (ssize_t)n;
  }
  }
  return wds__fail(err, WDS_ERR_INVALID, "bad codec");
}

ssize_t wds__stream_skip(wds__stream *s, uint64_t n, void *scratch,
                         size_t scratch_size, wds__err *err) {
  if (s->codec == CODEC_NONE && s->peek_pos == s->peek_len && !s->src_eof) {
    ssize_t k = wds__source_skip(s->src, n, scratch, scratch_size, err);
    if (k == 0)
      s->src_eof = 1;
    if (k > 0)
      s->compressed_bytes += (uint64_t)k;
    return k;
  }
  return wds__stream_read(s, scratch,
                          n < scratch_size ? (size_t)n : scratch_size, err);
}

int wds__stream_drain(wds__stream *s, wds__err *err) {
  uint8_t tmp[16384];
  for (;;) {
    ssize_t n = wds__stream_read(s, tmp, sizeof tmp, err);
    if (n < 0)
      return (int)n;
    if (n == 0)
      return WDS_OK;
  }
}

const char *wds__stream_codec(const wds__stream *s) {
  switch (s->codec) {
  case CODEC_NONE:
    return "none";
  case CODEC_ZSTD:
    return "zstd";
  case CODEC_ARCHIVE:
    return s->filter_name;
  }
  return "?";
}

void wds__stream_close(wds__stream *s) {
  if (!s)
    return;
  if (s->ar)
    archive_read_free(s->ar);
  free(s->abuf);
  ZSTD_freeDCtx(s->zd);
  free(s->zin);
  wds__source_close(s->src);
  free(s);
}
