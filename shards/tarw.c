/* tarw.c — streaming tar writer (see tarw.h).
 *
 * Everything the archive holds goes through emit(): small pieces (headers,
 * padding, small members) are gathered in one staging buffer of
 * buffer_bytes and handed to the sink a buffer at a time; pieces at least as
 * large as the buffer go to the sink directly, after what is staged. The sink
 * is write(2) for plain output, or ZSTD_compressStream2() / deflate() into an
 * output buffer of the same size that is written whenever it fills. So the file
 * sees large writes only, and big members are never copied (plain) or copied
 * only by zstd itself.
 *
 * Headers are ustar, formatted byte for byte the way Python's tarfile does
 * it (zero-padded octal fields ending in NUL, a 6-digit checksum followed by
 * NUL and space, empty devmajor/devminor, pax headers named "././@PaxHeader"
 * with mode and mtime 0). A name longer than 100 bytes is split at a '/'
 * into prefix (<= 155) and name (<= 100) when possible; otherwise it goes
 * into a pax 'x' header as a "path" record, as does a size of 8 GiB or more
 * ("size" record, the ustar field then 0). tarfile's USTAR_FORMAT splits the
 * same way; its PAX_FORMAT would use pax for every long or non-ASCII name.
 *
 * zstd output is a sequence of independent frames, each with a content
 * checksum: a frame ends at the first member boundary after FRAME_TAR_BYTES
 * of tar, or inside a member's data at FRAME_MAX_TAR_BYTES, so a reader
 * can verify a frame's samples before it hands them out (wds's reader holds
 * them until then: shards/stream.c, pipeline/reader.c) and never holds
 * much; every zstd decoder reads the frames as one stream. No seek table:
 * nothing in wds seeks inside a compressed shard. gzip stays one member:
 * Python's tarfile in stream mode ("r|gz", which WebDataset uses) stops
 * silently at the end of the first member, losing the rest of the shard,
 * so a gzip shard's samples are verified only at its end (the reader holds
 * up to max_unverified_bytes of it).
 *
 * Every member has mode 0444, WebDataset TarWriter's default (and what
 * wds/writer.h promises). gzip output is one deflate stream with a header
 * set by hand (deflateSetHeader): no name, mtime 0, OS byte 3, so it does
 * not depend on the machine or the time.
 *
 * Invariant: w->status is WDS_OK until a call fails; after that every call
 * returns it unchanged (a half-written member cannot be completed). */
#include "tarw.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "outfile_internal.h" /* temporary name, sync, rename */
#include "tarfmt.h"

#define BLOCK WDS__TAR_BLOCK
#define RECORD_BYTES 10240
#define DEFAULT_BUFFER_BYTES ((size_t)1 << 20)
#define MIN_BUFFER_BYTES ((size_t)64 << 10)
#define MAX_NAME_BYTES 65535
#define OCTAL11_LIMIT ((uint64_t)1 << 33) /* 8^11: 11 octal digits */
#define MEMBER_MODE 0444u
#define GZIP_OS_UNIX 3
/* zstd frames (see the top of the file): about 1 MiB of tar each. */
#define FRAME_TAR_BYTES ((uint64_t)1 << 20)
#define FRAME_MAX_TAR_BYTES (4 * FRAME_TAR_BYTES)

struct wds__tarw {
  int fd;
  wds_outfile *of; /* path mode: the file (fd is its descriptor) */
  char *path;      /* final name (path mode) */
  int opts_fsync;
  int64_t mtime;

  uint8_t *stage; /* uncompressed tar bytes not yet sunk */
  size_t stage_len, stage_cap;
  ZSTD_CCtx *zc; /* NULL unless zstd */
  z_stream *gz;  /* NULL unless gzip */
  gz_header gzh; /* must live as long as gz */
  uint8_t *zout; /* compressed output (zstd or gzip) */
  size_t zout_len, zout_cap;
  uint64_t frame_tar; /* zstd: tar bytes in the current frame, sunk */

  uint8_t *hdr; /* WDS__TARW_HEADER_MAX bytes */
  int in_member;
  uint64_t member_size, member_written;

  int status;     /* first failure, sticky */
  wds__err saved; /* its message, repeated by later calls */
  int finished;
  wds__tarw_stats stats;
  char label[40]; /* "output fd N" in fd mode */
};

static const uint8_t zero_block[BLOCK];

/* Records a failure: every later call returns it. */
static int fail(wds__tarw *w, wds__err *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(wds__tarw *w, wds__err *err, int status, const char *fmt, ...) {
  char msg[WDS__ERR_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (w->status == WDS_OK) {
    w->status = status;
    wds__fail(&w->saved, status, "%s", msg);
  }
  return wds__fail(err, status, "%s", msg);
}

/* Returns the sticky status (with its message) or WDS_OK. */
static int check(const wds__tarw *w, wds__err *err) {
  if (w->status == WDS_OK)
    return WDS_OK;
  return wds__fail(err, w->status, "%s", w->saved.msg);
}

static const char *target_name(const wds__tarw *w) {
  return w->path ? w->path : w->label;
}

static int write_all(wds__tarw *w, const uint8_t *p, size_t n, wds__err *err) {
  while (n > 0) {
    ssize_t k = write(w->fd, p, n);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return fail(w, err, WDS_ERR_IO, "cannot write %s: %s", target_name(w),
                  strerror(errno));
    }
    if (k == 0)
      return fail(w, err, WDS_ERR_IO, "cannot write %s: no progress",
                  target_name(w));
    p += k;
    n -= (size_t)k;
    w->stats.out_bytes += (uint64_t)k;
  }
  return WDS_OK;
}

/* Compresses in[0..n) (mode ZSTD_e_continue) or ends the frame (ZSTD_e_end),
 * writing the output buffer whenever it fills. */
static int zstd_sink(wds__tarw *w, const uint8_t *p, size_t n,
                     ZSTD_EndDirective mode, wds__err *err) {
  ZSTD_inBuffer in = {p, n, 0};
  for (;;) {
    ZSTD_outBuffer out = {w->zout, w->zout_cap, w->zout_len};
    size_t r = ZSTD_compressStream2(w->zc, &out, &in, mode);
    w->zout_len = out.pos;
    if (ZSTD_isError(r))
      return fail(w, err, WDS_ERR_IO, "zstd compression of %s failed: %s",
                  target_name(w), ZSTD_getErrorName(r));
    if (w->zout_len == w->zout_cap) {
      int rc = write_all(w, w->zout, w->zout_len, err);
      if (rc != WDS_OK)
        return rc;
      w->zout_len = 0;
    }
    if (mode == ZSTD_e_continue ? in.pos == in.size : r == 0)
      break;
  }
  if (mode == ZSTD_e_end && w->zout_len > 0) {
    int rc = write_all(w, w->zout, w->zout_len, err);
    if (rc != WDS_OK)
      return rc;
    w->zout_len = 0;
  }
  return WDS_OK;
}

/* Deflates in[0..n) (Z_NO_FLUSH) or ends the stream (Z_FINISH), writing
 * the output buffer whenever it fills. avail_in is 32-bit: fed in slices. */
static int gzip_sink(wds__tarw *w, const uint8_t *p, size_t n, int flush,
                     wds__err *err) {
  z_stream *z = w->gz;
  for (;;) {
    size_t slice = n > (1u << 30) ? (1u << 30) : n;
    z->next_in = (Bytef *)(uintptr_t)p;
    z->avail_in = (uInt)slice;
    int last = flush == Z_FINISH && slice == n;
    for (;;) {
      z->next_out = w->zout + w->zout_len;
      z->avail_out = (uInt)(w->zout_cap - w->zout_len);
      int r = deflate(z, last ? Z_FINISH : Z_NO_FLUSH);
      w->zout_len = w->zout_cap - z->avail_out;
      if (r == Z_STREAM_ERROR)
        return fail(w, err, WDS_ERR_IO, "gzip compression of %s failed: %s",
                    target_name(w), z->msg ? z->msg : "stream error");
      if (w->zout_len == w->zout_cap) {
        int rc = write_all(w, w->zout, w->zout_len, err);
        if (rc != WDS_OK)
          return rc;
        w->zout_len = 0;
        continue; /* more output may be pending */
      }
      if (last ? r == Z_STREAM_END : z->avail_in == 0)
        break;
    }
    p += slice;
    n -= slice;
    if (n == 0)
      break;
  }
  if (flush == Z_FINISH && w->zout_len > 0) {
    int rc = write_all(w, w->zout, w->zout_len, err);
    if (rc != WDS_OK)
      return rc;
    w->zout_len = 0;
  }
  return WDS_OK;
}

/* Ends the current zstd frame (its checksum written): the next bytes
 * start a new one. */
static int end_frame(wds__tarw *w, wds__err *err) {
  int rc = zstd_sink(w, NULL, 0, ZSTD_e_end, err);
  if (rc == WDS_OK) {
    w->frame_tar = 0;
    w->stats.frames++;
  }
  return rc;
}

static int sink(wds__tarw *w, const uint8_t *p, size_t n, wds__err *err) {
  if (n == 0)
    return WDS_OK;
  while (w->zc && n > 0) { /* a frame ends inside a member's data past
                              FRAME_MAX_TAR_BYTES */
    uint64_t room = FRAME_MAX_TAR_BYTES - w->frame_tar;
    size_t k = n < room ? n : (size_t)room;
    int rc = zstd_sink(w, p, k, ZSTD_e_continue, err);
    if (rc != WDS_OK)
      return rc;
    w->frame_tar += k;
    p += k;
    n -= k;
    if (w->frame_tar >= FRAME_MAX_TAR_BYTES && (rc = end_frame(w, err)) != 0)
      return rc;
  }
  if (w->zc)
    return WDS_OK;
  if (w->gz)
    return gzip_sink(w, p, n, Z_NO_FLUSH, err);
  return write_all(w, p, n, err);
}

static int flush_stage(wds__tarw *w, wds__err *err) {
  int rc = sink(w, w->stage, w->stage_len, err);
  w->stage_len = 0;
  return rc;
}

/* Appends n bytes of tar stream. */
static int emit(wds__tarw *w, const void *data, size_t n, wds__err *err) {
  const uint8_t *p = data;
  w->stats.tar_bytes += n;
  if (n >= w->stage_cap) {
    int rc = flush_stage(w, err);
    return rc != WDS_OK ? rc : sink(w, p, n, err);
  }
  while (n > 0) {
    size_t k = w->stage_cap - w->stage_len;
    if (k > n)
      k = n;
    memcpy(w->stage + w->stage_len, p, k);
    w->stage_len += k;
    p += k;
    n -= k;
    if (w->stage_len == w->stage_cap) {
      int rc = flush_stage(w, err);
      if (rc != WDS_OK)
        return rc;
    }
  }
  return WDS_OK;
}

/* Appends n zero bytes (padding). */
static int emit_zeros(wds__tarw *w, size_t n, wds__err *err) {
  while (n > 0) {
    size_t k = n < BLOCK ? n : BLOCK;
    int rc = emit(w, zero_block, k, err);
    if (rc != WDS_OK)
      return rc;
    n -= k;
  }
  return WDS_OK;
}

/* One ustar header block for name/prefix (already split to fit). */
static void ustar_block(uint8_t *h, const char *prefix, size_t plen,
                        const char *name, size_t nlen, unsigned mode,
                        uint64_t size, int64_t mtime, char type) {
  memset(h, 0, BLOCK);
  memcpy(h, name, nlen);
  wds__tarfmt_put_octal(h + 100, 8, mode);
  wds__tarfmt_put_octal(h + 108, 8, 0);
  wds__tarfmt_put_octal(h + 116, 8, 0);
  wds__tarfmt_put_octal(h + 124, 12, size);
  wds__tarfmt_put_octal(h + 136, 12, (uint64_t)mtime);
  h[156] = (uint8_t)type;
  memcpy(h + 257, "ustar", 6); /* with its NUL */
  memcpy(h + 263, "00", 2);
  /* devmajor/devminor stay empty: not a device (as tarfile writes them) */
  memcpy(h + 345, prefix, plen);
  wds__tarfmt_seal(h);
}

/* Length of a pax record "LEN key=value\n", LEN counting itself. */
static size_t pax_record_len(size_t klen, size_t vlen) {
  size_t body = 1 + klen + 1 + vlen + 1; /* " key=value\n" */
  size_t len = body + 1;
  for (;;) {
    size_t digits = 1;
    for (size_t v = len; v >= 10; v /= 10)
      digits++;
    if (body + digits == len)
      return len;
    len = body + digits;
  }
}

static size_t pax_record(uint8_t *out, const char *key, const char *val,
                         size_t vlen) {
  size_t klen = strlen(key);
  size_t len = pax_record_len(klen, vlen);
  int d = snprintf((char *)out, 24, "%zu ", len);
  size_t o = (size_t)d;
  memcpy(out + o, key, klen);
  o += klen;
  out[o++] = '=';
  memcpy(out + o, val, vlen);
  o += vlen;
  out[o++] = '\n';
  return o;
}

/* Splits a name of more than 100 bytes at a '/' into prefix and name; the
 * longest prefix that fits leaves the shortest name, so if it fails, every
 * split does. Returns the prefix length, or 0 when no split fits. */
static size_t split_prefix(const char *name, size_t len) {
  size_t i = len - 1 < 155 ? len - 1 : 155;
  for (; i > 0; i--)
    if (name[i] == '/')
      break;
  if (i == 0 || len - i - 1 > 100 || len - i - 1 == 0)
    return 0;
  return i;
}

int wds__tarw_format_header(const char *name, uint64_t size, int64_t mtime,
                            uint8_t *out, size_t cap, size_t *len_out,
                            wds__err *err) {
  *len_out = 0;
  size_t len = name ? strlen(name) : 0;
  if (len == 0)
    return wds__fail(err, WDS_ERR_INVALID, "empty member name");
  if (len > MAX_NAME_BYTES)
    return wds__fail(err, WDS_ERR_INVALID,
                     "member name of %zu bytes is longer than %d bytes", len,
                     MAX_NAME_BYTES);
  if (mtime < 0 || (uint64_t)mtime >= OCTAL11_LIMIT)
    return wds__fail(err, WDS_ERR_INVALID, "mtime %lld out of range",
                     (long long)mtime);
  size_t plen = 0;
  int pax_path = 0;
  if (len > 100) {
    plen = split_prefix(name, len);
    pax_path = plen == 0;
  }
  int pax_size = size >= OCTAL11_LIMIT;
  size_t o = 0;
  if (pax_path || pax_size) {
    char sizebuf[24];
    int slen =
        snprintf(sizebuf, sizeof sizebuf, "%llu", (unsigned long long)size);
    size_t plen_rec = (pax_path ? pax_record_len(4, len) : 0) +
                      (pax_size ? pax_record_len(4, (size_t)slen) : 0);
    size_t padded = (plen_rec + BLOCK - 1) / BLOCK * BLOCK;
    if (cap < 2 * BLOCK + padded)
      return wds__fail(err, WDS_ERR_LIMIT, "header buffer too small");
    /* The extension header itself: tarfile's fields (mode and mtime 0). */
    ustar_block(out, "", 0, "././@PaxHeader", 14, 0, plen_rec, 0, 'x');
    o = BLOCK;
    memset(out + o, 0, padded);
    size_t r = 0;
    if (pax_path)
      r += pax_record(out + o + r, "path", name, len);
    if (pax_size)
      r += pax_record(out + o + r, "size", sizebuf, (size_t)slen);
    o += padded;
  } else if (cap < BLOCK) {
    return wds__fail(err, WDS_ERR_LIMIT, "header buffer too small");
  }
  /* The ustar header: with a pax path, its name field keeps the first 100
   * bytes for readers that ignore pax (tarfile does the same). */
  if (plen > 0)
    ustar_block(out + o, name, plen, name + plen + 1, len - plen - 1,
                MEMBER_MODE, pax_size ? 0 : size, mtime, '0');
  else
    ustar_block(out + o, "", 0, name, len > 100 ? 100 : len, MEMBER_MODE,
                pax_size ? 0 : size, mtime, '0');
  *len_out = o + BLOCK;
  return WDS_OK;
}

static int open_common(wds__tarw *w, const wds__tarw_options *opts,
                       wds__err *err) {
  wds__tarw_options def = WDS__TARW_OPTIONS_INIT;
  if (!opts)
    opts = &def;
  if (opts->mtime < 0 || (uint64_t)opts->mtime >= OCTAL11_LIMIT)
    return wds__fail(err, WDS_ERR_INVALID, "mtime %lld out of range",
                     (long long)opts->mtime);
  if (opts->compression != WDS__TARW_NONE &&
      opts->compression != WDS__TARW_ZSTD &&
      opts->compression != WDS__TARW_GZIP)
    return wds__fail(err, WDS_ERR_INVALID, "unknown compression %d",
                     opts->compression);
  w->mtime = opts->mtime;
  w->opts_fsync = opts->fsync;
  w->stage_cap = opts->buffer_bytes ? opts->buffer_bytes : DEFAULT_BUFFER_BYTES;
  if (w->stage_cap < MIN_BUFFER_BYTES)
    w->stage_cap = MIN_BUFFER_BYTES;
  w->stage = malloc(w->stage_cap);
  w->hdr = malloc(WDS__TARW_HEADER_MAX);
  if (!w->stage || !w->hdr)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (write buffer)");
  if (opts->compression == WDS__TARW_ZSTD) {
    int level = opts->zstd_level ? opts->zstd_level : ZSTD_CLEVEL_DEFAULT;
    if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
      return wds__fail(err, WDS_ERR_INVALID, "zstd level %d is outside %d..%d",
                       level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    w->zc = ZSTD_createCCtx();
    w->zout_cap = w->stage_cap;
    w->zout = malloc(w->zout_cap);
    if (!w->zc || !w->zout)
      return wds__fail(err, WDS_ERR_NOMEM, "out of memory (zstd)");
    size_t r = ZSTD_CCtx_setParameter(w->zc, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r))
      r = ZSTD_CCtx_setParameter(w->zc, ZSTD_c_checksumFlag, 1);
    if (ZSTD_isError(r))
      return wds__fail(err, WDS_ERR_INVALID, "zstd setup failed: %s",
                       ZSTD_getErrorName(r));
  }
  if (opts->compression == WDS__TARW_GZIP) {
    int level = opts->gzip_level ? opts->gzip_level : 6;
    if (level < 1 || level > 9)
      return wds__fail(err, WDS_ERR_INVALID, "gzip level %d is outside 1..9",
                       level);
    w->gz = calloc(1, sizeof *w->gz);
    w->zout_cap = w->stage_cap;
    w->zout = malloc(w->zout_cap);
    if (!w->gz || !w->zout) {
      free(w->gz);
      w->gz = NULL;
      return wds__fail(err, WDS_ERR_NOMEM, "out of memory (gzip)");
    }
    /* 15 + 16: a gzip wrapper around a 32 KiB-window deflate stream. */
    if (deflateInit2(w->gz, level, Z_DEFLATED, 15 + 16, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
      free(w->gz);
      w->gz = NULL;
      return wds__fail(err, WDS_ERR_NOMEM, "gzip setup failed");
    }
    memset(&w->gzh, 0, sizeof w->gzh);
    w->gzh.os = GZIP_OS_UNIX;
    if (deflateSetHeader(w->gz, &w->gzh) != Z_OK)
      return wds__fail(err, WDS_ERR_INVALID, "gzip header setup failed");
  }
  return WDS_OK;
}

int wds__tarw_open_fd(int fd, const wds__tarw_options *opts, wds__tarw **out,
                      wds__err *err) {
  int rc;
  *out = NULL;
  if (fd < 0)
    return wds__fail(err, WDS_ERR_INVALID, "invalid file descriptor %d", fd);
  wds__tarw *w = calloc(1, sizeof *w);
  if (!w)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  w->fd = fd;
  snprintf(w->label, sizeof w->label, "output fd %d", fd);
  rc = open_common(w, opts, err);
  if (rc != WDS_OK) {
    wds__tarw_close(w);
    return rc;
  }
  *out = w;
  return WDS_OK;
}

int wds__tarw_open_path(const char *path, const wds__tarw_options *opts,
                        wds__tarw **out, wds__err *err) {
  int rc;
  *out = NULL;
  if (!path || !*path)
    return wds__fail(err, WDS_ERR_INVALID, "empty output path");
  wds__tarw *w = calloc(1, sizeof *w);
  if (!w)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  w->fd = -1;
  rc = open_common(w, opts, err);
  if (rc != WDS_OK)
    goto done;
  w->path = strdup(path);
  if (!w->path) {
    rc = wds__fail(err, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  wds__err oe;
  rc = wds__outfile_open(path, w->opts_fsync ? 0 : WDS_OUTFILE_NO_SYNC, &w->of,
                         &oe);
  if (rc != WDS_OK) {
    rc = wds__fail(err, rc, "%s", oe.msg);
    goto done;
  }
  w->fd = wds_outfile_fd(w->of);
done:
  if (rc != WDS_OK) {
    wds__tarw_close(w);
    return rc;
  }
  *out = w;
  return WDS_OK;
}

int wds__tarw_begin(wds__tarw *w, const char *name, uint64_t size,
                    wds__err *err) {
  int rc = check(w, err);
  if (rc != WDS_OK)
    return rc;
  if (w->finished || w->in_member)
    return fail(w, err, WDS_ERR_INVALID, "%s: member \"%s\" begun while %s",
                target_name(w), name ? name : "(null)",
                w->finished ? "the archive is finished"
                            : "another member is unfinished");
  size_t hlen;
  wds__err ferr;
  rc = wds__tarw_format_header(name, size, w->mtime, w->hdr,
                               WDS__TARW_HEADER_MAX, &hlen, &ferr);
  if (rc != WDS_OK) {
    /* A bad name leaves the archive intact: not sticky. */
    return wds__fail(err, rc, "%s: member \"%.200s\": %s", target_name(w),
                     name ? name : "(null)", ferr.msg);
  }
  rc = emit(w, w->hdr, hlen, err);
  if (rc != WDS_OK)
    return rc;
  w->in_member = 1;
  w->member_size = size;
  w->member_written = 0;
  return WDS_OK;
}

int wds__tarw_write(wds__tarw *w, const void *data, size_t n, wds__err *err) {
  int rc = check(w, err);
  if (rc != WDS_OK)
    return rc;
  if (!w->in_member)
    return fail(w, err, WDS_ERR_INVALID, "%s: data written outside a member",
                target_name(w));
  if (n > w->member_size - w->member_written)
    return fail(w, err, WDS_ERR_INVALID,
                "%s: %zu more bytes written than the member's declared size "
                "of %llu",
                target_name(w),
                n - (size_t)(w->member_size - w->member_written),
                (unsigned long long)w->member_size);
  rc = emit(w, data, n, err);
  if (rc != WDS_OK)
    return rc;
  w->member_written += n;
  return WDS_OK;
}

int wds__tarw_end(wds__tarw *w, wds__err *err) {
  int rc = check(w, err);
  if (rc != WDS_OK)
    return rc;
  if (!w->in_member)
    return fail(w, err, WDS_ERR_INVALID, "%s: no member to end",
                target_name(w));
  if (w->member_written != w->member_size)
    return fail(w, err, WDS_ERR_INVALID,
                "%s: member ended after %llu of its %llu declared bytes",
                target_name(w), (unsigned long long)w->member_written,
                (unsigned long long)w->member_size);
  size_t pad = (size_t)((BLOCK - w->member_size % BLOCK) % BLOCK);
  rc = emit_zeros(w, pad, err);
  if (rc != WDS_OK)
    return rc;
  w->in_member = 0;
  w->stats.members++;
  /* A member boundary: the zstd frame ends here once it holds enough. */
  if (w->zc && w->frame_tar + w->stage_len >= FRAME_TAR_BYTES) {
    rc = flush_stage(w, err);
    if (rc == WDS_OK)
      rc = end_frame(w, err);
  }
  return rc;
}

int wds__tarw_add(wds__tarw *w, const char *name, const void *data,
                  uint64_t size, wds__err *err) {
  if (size > SIZE_MAX)
    return wds__fail(err, WDS_ERR_INVALID, "member too large for memory");
  if (!data && size > 0)
    return wds__fail(err, WDS_ERR_INVALID, "member \"%s\": no data",
                     name ? name : "(null)");
  int rc = wds__tarw_begin(w, name, size, err);
  if (rc == WDS_OK && size > 0)
    rc = wds__tarw_write(w, data, (size_t)size, err);
  if (rc == WDS_OK)
    rc = wds__tarw_end(w, err);
  return rc;
}

int wds__tarw_finish(wds__tarw *w, wds__err *err) {
  int rc = check(w, err);
  if (rc != WDS_OK)
    return rc;
  if (w->finished)
    return WDS_OK;
  if (w->in_member)
    return fail(w, err, WDS_ERR_INVALID,
                "%s: finished inside a member (%llu of %llu bytes written)",
                target_name(w), (unsigned long long)w->member_written,
                (unsigned long long)w->member_size);
  /* Two zero blocks, then zeros up to a whole record. */
  uint64_t end = w->stats.tar_bytes + 2 * BLOCK;
  uint64_t padded = (end + RECORD_BYTES - 1) / RECORD_BYTES * RECORD_BYTES;
  rc = emit_zeros(w, (size_t)(padded - w->stats.tar_bytes), err);
  if (rc == WDS_OK)
    rc = flush_stage(w, err);
  if (rc == WDS_OK && w->zc)
    rc = end_frame(w, err);
  if (rc == WDS_OK && w->gz)
    rc = gzip_sink(w, NULL, 0, Z_FINISH, err);
  if (rc != WDS_OK)
    return rc;
  if (w->of) {
    wds__err oe;
    w->fd = -1; /* the outfile's, closed by commit */
    rc = wds__outfile_commit(w->of, &oe);
    if (rc != WDS_OK)
      return fail(w, err, rc, "%s", oe.msg);
  }
  w->finished = 1;
  return WDS_OK;
}

void wds__tarw_stats_get(const wds__tarw *w, wds__tarw_stats *out) {
  *out = w->stats;
}

void wds__tarw_close(wds__tarw *w) {
  if (!w)
    return;
  wds_outfile_close(w->of); /* removes an uncommitted temporary file */
  ZSTD_freeCCtx(w->zc);
  if (w->gz) {
    deflateEnd(w->gz);
    free(w->gz);
  }
  free(w->zout);
  free(w->stage);
  free(w->hdr);
  free(w->path);
  free(w);
}

uint64_t wds__tarw_member_bytes(size_t name_len, const char *name,
                                uint64_t size) {
  if (name_len == 0 || name_len > MAX_NAME_BYTES)
    return 0;
  uint64_t header = BLOCK;
  int pax_path = name_len > 100 && split_prefix(name, name_len) == 0;
  int pax_size = size >= OCTAL11_LIMIT;
  if (pax_path || pax_size) {
    size_t rec = 0;
    if (pax_path)
      rec += pax_record_len(4, name_len);
    if (pax_size) {
      size_t digits = 1;
      for (uint64_t v = size; v >= 10; v /= 10)
        digits++;
      rec += pax_record_len(4, digits);
    }
    header += BLOCK + (rec + BLOCK - 1) / BLOCK * BLOCK;
  }
  return header + (size + BLOCK - 1) / BLOCK * BLOCK;
}

uint64_t wds__tarw_finished_bytes(uint64_t tar_bytes) {
  uint64_t end = tar_bytes + 2 * BLOCK;
  return (end + RECORD_BYTES - 1) / RECORD_BYTES * RECORD_BYTES;
}
