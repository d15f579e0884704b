/* stream.c — compression detection and decompression for one shard.
 *
 * open() reads the first block of the source (up to 512 bytes, more if a
 * pipe delivers them in pieces) and decides:
 *   - a valid tar header or a zero block -> no codec, bytes pass through;
 *   - zstd magic (or a skippable frame) -> libzstd, with a window limit
 *     (128 MiB unless the caller raises it: `zstd --long=31` frames need
 *     2 GiB); a frame over it is WDS_ERR_LIMIT naming its window and the
 *     option, not "corrupt data", so each frame's header is kept;
 *   - gzip magic -> zlib, concatenated members, CRC-32 and length checked
 *     (libarchive's gzip reader skips both);
 *   - xz, or lzma-alone headers -> liblzma with a memory limit (libarchive
 *     lets liblzma allocate whatever a 24-byte header asks for);
 *   - anything else -> libarchive's in-process filters (bzip2, lz4, lzip,
 *     compress) with the "raw" format. Filters that run external programs
 *     (lrzip, lzop, grzip, ...) are never enabled: shard bytes must not choose
 *     what gets executed. If no filter matches, the stream is neither a tar
 *     nor compressed and open() fails with WDS_ERR_FORMAT.
 * The peeked bytes are replayed before the rest of the source, so nothing
 * seeks. Compressed framing is checked: a stream that stops inside a zstd
 * frame, gzip member or xz block is WDS_ERR_TRUNCATED.
 *
 * The reading thread. A compressed stream may read its source on a thread
 * of its own (wds__io_opts.read_thread; by default when the process has
 * a spare CPU: at least twice as many CPUs in its affinity mask as
 * compressed streams open, or as the environment's WDS_READ_THREAD says,
 * 0 or 1, for benchmarks), into a ring of RING_BYTES, while the caller's
 * thread decompresses and parses. zstd, zlib and liblzma decode straight
 * out of the ring (refill() lends them the ring's next contiguous bytes),
 * so the thread costs no copy; libarchive's filters get copies. Measured
 * on a page-cache .tar.zst, the source's read (the kernel's copy) is about
 * a quarter of the work and overlaps the rest (docs/performance.md); a
 * thread that also decompressed would leave the caller too little to
 * overlap and cost one more copy of every decompressed byte.
 *
 * The thread only calls wds__source_read; everything else stays on the
 * caller's thread, so decoding, framing checks, messages and the drain
 * budget are what they are without it. The source's status (its end, a
 * failed command, a timeout, a cancel) reaches the caller in order, after
 * every byte before it. The ring's counters, flags and that status are
 * shared under ring.mu; the bytes in [head, tail) are the caller's to read,
 * the rest the thread's to fill. The caller's cancellation token is
 * honoured by both sides (the thread's source reads, and every take from
 * the ring, as a source read would); closing the stream sets the ring's
 * stop flag and a second token (wds__io_opts.stop) that the source's reads
 * also poll, so a thread blocked in a stalled pipe or waiting for space
 * ends at once and is joined. Each side sleeps on the condition variable
 * until a quarter of the ring is filled or freed (or the end), so a
 * page-cache stream costs a few hundred wake-ups; for sources that may
 * stall (pipes, http) a waiting caller is woken by every read, so bytes
 * are never held back. */
#include "stream.h"

#include <errno.h>
#include <lzma.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
/* ZSTD_getFrameHeader and ZSTD_DCtx_setMaxWindowSize: in libzstd's
 * "experimental" section, exported by the shared library and unchanged
 * since 1.3. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include "archive_dl.h" /* libarchive's functions, loaded on first use */
#include "sniff.h"
#include "source.h"
#include "tarfmt.h"

enum codec { CODEC_NONE, CODEC_ZSTD, CODEC_GZIP, CODEC_XZ, CODEC_ARCHIVE };

#define PEEK_BYTES 512
#define ARCHIVE_BLOCK (128 * 1024)
#define INPUT_BLOCK (128 * 1024)
#define XZ_MEMLIMIT_BYTES ((uint64_t)256 << 20)
/* After the end-of-archive marker, at most this much of the stream is read
 * (record padding, framing and a command's exit status are checked within
 * it); the rest is ignored, as tar and WebDataset do, so a decompression
 * bomb behind the marker costs nothing. */
#define DRAIN_MAX_BYTES ((uint64_t)4 << 20)
/* The reading thread's ring of compressed bytes (one per stream that has
 * the thread): bounded memory, see docs/architecture.md. */
#define RING_BYTES ((size_t)1 << 20)
/* Each side waits for a quarter of the ring (filled, or free). */
#define RING_WAKE_BYTES (RING_BYTES / 4)
/* The thread's reads: at most this much at once. */
#define RING_READ_BYTES ((size_t)256 << 10)

/* Compressed streams open in this process, for the default rule. */
static atomic_int open_compressed;

/* The reading thread and its ring (see the top of the file). */
typedef struct ring {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint8_t *buf;
  /* Under mu: bytes read and taken since open (the ring holds [head,
   * tail)); the source ended (done) with status and err; the caller asked
   * the thread to end (stop); who sleeps, for how many bytes. */
  uint64_t head, tail;
  int done, stop;
  int status;
  wds__err err;
  int producer_waits, consumer_waits;
  size_t consumer_want;
  int eager; /* the source may stall: wake the caller at once */
  pid_t pid; /* the process the thread runs in (not a fork()ed child) */
} ring;

struct wds__stream {
  wds__source *src;
  enum codec codec;
  wds__io_opts io;      /* the source's options, stop token included */
  wds__cancel stop_tok; /* io.stop when set: ends the thread's reads */
  int counted;          /* in open_compressed */
  ring *ring;           /* the reading thread (joined at close) */
  size_t lent;          /* bytes of the ring lent as the input (s->in) */
  uint8_t peek[PEEK_BYTES];
  size_t peek_len, peek_pos;
  int src_eof;
  uint64_t compressed_bytes; /* read from the source so far */
  uint64_t drain_stop; /* draining: stop reading at this many source bytes */
  int drain_cut;       /* the drain budget ran out before the source did */

  /* Compressed input for zstd, zlib and liblzma: in_buf, or bytes lent
   * from the ring. */
  uint8_t *in, *in_buf;
  size_t in_cap, in_pos, in_len;

  /* zstd */
  ZSTD_DCtx *zd;
  size_t zlast; /* last ZSTD_decompressStream() hint; 0 = frame complete */
  int zfull;    /* the last call filled the output: decoded bytes may wait */
  uint64_t zmax_window; /* the window limit given to libzstd */
  int zframe_start;     /* the next input byte starts a frame */
  uint8_t zhdr[ZSTD_FRAMEHEADERSIZE_MAX]; /* the current frame's header */
  size_t zhdr_len;
  uint64_t zframe_off; /* compressed offset of the current frame */

  /* gzip (zlib) */
  z_stream gz;
  int gz_init;
  int gz_member_done;     /* between members: more input starts a new one */
  uint64_t gz_member_off; /* compressed offset of the current member */

  /* xz / lzma-alone (liblzma) */
  lzma_stream xz;
  int xz_init;
  int xz_done;

  /* libarchive */
  struct archive *ar;
  uint8_t *abuf;
  wds__err src_err; /* a source error seen inside a libarchive callback */
  int src_failed;
  int src_status;
  char filter_name[32];

  /* A decoder that failed in a call that also produced bytes: the bytes
   * were returned, the error is returned by every read after them. */
  int pending;
  wds__err pending_err;

  /* Checked output (wds__stream_final): decompressed bytes returned so
   * far (out_bytes), and how many of them are final (final_bytes): the
   * frames, members or streams they lie in ended and passed their checks,
   * or carry no check. zchecked: the current zstd frame has a content
   * checksum (or is yet to be parsed); unchecked_frames counts zstd frames
   * without one. */
  uint64_t out_bytes, final_bytes;
  int zchecked;
  uint64_t unchecked_frames;
};

/* ---- the reading thread (see the top of the file) ---- */

static void *read_main(void *arg) {
  wds__stream *s = arg;
  ring *r = s->ring;
  wds__err err;
  err.msg[0] = '\0';
  for (;;) {
    pthread_mutex_lock(&r->mu);
    while (!r->stop && RING_BYTES - (r->tail - r->head) < RING_WAKE_BYTES) {
      r->producer_waits = 1;
      pthread_cond_wait(&r->cv, &r->mu);
      r->producer_waits = 0;
    }
    if (r->stop) {
      pthread_mutex_unlock(&r->mu);
      break;
    }
    size_t off = (size_t)(r->tail % RING_BYTES);
    size_t cap = RING_BYTES - (size_t)(r->tail - r->head);
    if (cap > RING_BYTES - off)
      cap = RING_BYTES - off;
    if (cap > RING_READ_BYTES)
      cap = RING_READ_BYTES;
    pthread_mutex_unlock(&r->mu);
    /* [tail, tail + cap) is ours: the caller reads only below tail. */
    ssize_t n = wds__source_read(s->src, r->buf + off, cap, &err);
    pthread_mutex_lock(&r->mu);
    if (n > 0) {
      r->tail += (uint64_t)n;
    } else {
      r->done = 1;
      r->status = (int)n;
      r->err = err;
    }
    if (r->consumer_waits &&
        (r->done || r->eager || r->tail - r->head >= r->consumer_want))
      pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (n <= 0)
      break;
  }
  return NULL;
}

/* Stops the thread (when it has not ended) and joins it. */
static void ring_stop(wds__stream *s) {
  ring *r = s->ring;
  if (r->pid != getpid()) {
    /* A fork()ed child closing what its parent opened: the thread (and
     * whoever held the mutex) is not in this process. */
    free(r->buf);
    free(r);
    s->ring = NULL;
    return;
  }
  pthread_mutex_lock(&r->mu);
  r->stop = 1;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  wds__cancel_set(&s->stop_tok); /* a source read blocked in the thread */
  pthread_join(r->thread, NULL);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  free(r->buf);
  free(r);
  s->ring = NULL;
}

/* CPUs this process may run on. */
int wds__cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return 1;
  return CPU_COUNT(&set);
}

/* Starts the thread when it was wanted at open and can be had; otherwise
 * the caller's thread reads, as without it. */
static void ring_start(wds__stream *s) {
  if (!s->io.stop)
    return;
  ring *r = calloc(1, sizeof *r);
  if (!r)
    return;
  r->buf = malloc(RING_BYTES);
  if (!r->buf || pthread_mutex_init(&r->mu, NULL) != 0) {
    free(r->buf);
    free(r);
    return;
  }
  if (pthread_cond_init(&r->cv, NULL) != 0) {
    pthread_mutex_destroy(&r->mu);
    free(r->buf);
    free(r);
    return;
  }
  r->eager = !wds__source_is_regular(s->src);
  r->pid = getpid();
  s->ring = r;
  /* Signals go to the program's threads, never this one. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&r->thread, NULL, read_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->buf);
    free(r);
    s->ring = NULL;
  }
}

/* Waits until the ring holds bytes (> 0: how many lie contiguous from
 * head, at most cap) or the source has ended (its status: 0 or an error,
 * with its message). Under no lock on return. */
static ssize_t ring_wait(wds__stream *s, size_t cap, wds__err *err) {
  ring *r = s->ring;
  /* The thread reads ahead: a cancel is noticed here too, at once, as the
   * source's read would. */
  if (wds__cancelled(s->io.cancel))
    return wds__fail(err, WDS_ERR_CANCELLED, "cancelled");
  if (r->pid != getpid())
    return wds__fail(err, WDS_ERR_IO,
                     "read in a fork()ed child: the stream's reading thread "
                     "runs in the parent (open shards after forking)");
  const wds__cancel *c = s->io.cancel;
  uint64_t start = wds__now_ms();
  pthread_mutex_lock(&r->mu);
  while (r->tail == r->head && !r->done) {
    r->consumer_want = cap < RING_WAKE_BYTES ? cap : RING_WAKE_BYTES;
    r->consumer_waits = 1;
    if (!c || !c->interrupt) {
      pthread_cond_wait(&r->cv, &r->mu);
      r->consumer_waits = 0;
      continue;
    }
    /* The caller's interrupt check is asked from this thread, which
     * waits, in slices, and never under the ring's lock. */
    struct timespec until;
    wds__deadline_ms(&until, WDS__INTERRUPT_POLL_MS);
    pthread_cond_timedwait(&r->cv, &r->mu, &until);
    r->consumer_waits = 0;
    if (r->tail == r->head && !r->done &&
        wds__now_ms() - start >= WDS__INTERRUPT_POLL_MS) {
      pthread_mutex_unlock(&r->mu);
      if (wds__cancel_interrupted(c))
        return wds__fail(err, WDS_ERR_CANCELLED, "interrupted");
      pthread_mutex_lock(&r->mu);
    }
  }
  uint64_t avail = r->tail - r->head;
  size_t off = (size_t)(r->head % RING_BYTES);
  int status = r->status;
  if (avail == 0 && status < 0 && err)
    *err = r->err;
  pthread_mutex_unlock(&r->mu);
  if (avail == 0)
    return status;
  size_t n = RING_BYTES - off;
  if (n > avail)
    n = (size_t)avail;
  return (ssize_t)(n < cap ? n : cap);
}

/* The caller is done with n bytes at head: the thread may fill them. */
static void ring_release(wds__stream *s, size_t n) {
  ring *r = s->ring;
  if (r->pid != getpid()) { /* a fork()ed child: no thread to tell */
    r->head += n;
    return;
  }
  pthread_mutex_lock(&r->mu);
  r->head += n;
  if (r->producer_waits && RING_BYTES - (r->tail - r->head) >= RING_WAKE_BYTES)
    pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* A source read served from the ring: a copy. */
static ssize_t ring_take(wds__stream *s, void *dst, size_t cap, wds__err *err) {
  if (s->lent) {
    /* Only drain's reads past a decoder that ended before its source get
     * here with input lent: what the decoder left is ignored, as it is in
     * in_buf without the thread. */
    ring_release(s, s->lent);
    s->lent = 0;
    s->in = s->in_buf;
    s->in_pos = s->in_len = 0;
  }
  ssize_t n = ring_wait(s, cap, err);
  if (n <= 0)
    return n;
  memcpy(dst, s->ring->buf + (size_t)(s->ring->head % RING_BYTES), (size_t)n);
  ring_release(s, (size_t)n);
  return n;
}

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
  /* Decoders can consume input without producing output (zero padding,
   * empty gzip members, skippable zstd frames), so the drain budget is
   * counted in source bytes, here, below every decoder. */
  if (s->drain_stop && s->compressed_bytes >= s->drain_stop) {
    s->drain_cut = 1;
    return 0;
  }
  if (s->drain_stop && cap > s->drain_stop - s->compressed_bytes)
    cap = (size_t)(s->drain_stop - s->compressed_bytes);
  ssize_t n = s->ring ? ring_take(s, dst, cap, err)
                      : wds__source_read(s->src, dst, cap, err);
  if (n == 0)
    s->src_eof = 1;
  if (n > 0)
    s->compressed_bytes += (uint64_t)n;
  return n;
}

static int raw_done(const wds__stream *s) {
  return s->src_eof && s->peek_pos == s->peek_len;
}

/* Compressed bytes the decoder has consumed: what was read from the source
 * (peeked bytes included), less what waits to be replayed or decoded. The
 * same however the source was cut into reads. */
static uint64_t consumed(const wds__stream *s) {
  return s->compressed_bytes - (s->peek_len - s->peek_pos) -
         (s->in_len - s->in_pos);
}

/* A decoder failed (rc, message in err) in a call that had produced bytes
 * first: those bytes are returned now and the error by the next read. How
 * much one call decodes depends on how the input was cut (128 KiB reads,
 * or up to 1 MiB lent from the reading thread's ring), so returning the
 * error at once would drop a different tail each way; deferred, the error
 * comes at the same place in the output either way (a gzip trailer's CRC:
 * after every byte of its member). */
static ssize_t fail_after(wds__stream *s, size_t produced, int rc,
                          wds__err *err) {
  if (produced == 0)
    return rc;
  s->pending = rc;
  if (err)
    s->pending_err = *err;
  else
    s->pending_err.msg[0] = '\0';
  return (ssize_t)produced;
}

/* Gives back the ring's bytes lent as the input; the input is in_buf
 * again, holding what was not consumed yet. */
static void unlend(wds__stream *s) {
  if (!s->lent)
    return;
  size_t left = s->in_len - s->in_pos;
  memcpy(s->in_buf, s->in + s->in_pos, left); /* under a header's size */
  ring_release(s, s->lent);
  s->lent = 0;
  s->in = s->in_buf;
  s->in_pos = 0;
  s->in_len = left;
}

/* Refills the input buffer when it is empty: > 0 bytes, 0 at the end. */
static ssize_t refill(wds__stream *s, wds__err *err) {
  if (s->in_pos < s->in_len)
    return (ssize_t)(s->in_len - s->in_pos);
  if (s->lent) { /* consumed: back to the thread */
    ring_release(s, s->lent);
    s->lent = 0;
    s->in = s->in_buf;
    s->in_pos = s->in_len = 0;
  }
  if (raw_done(s))
    return 0;
  if (s->ring && s->peek_pos == s->peek_len && !s->drain_stop) {
    /* The ring's next contiguous bytes, lent as they lie: no copy. */
    ssize_t n = ring_wait(s, RING_BYTES, err);
    if (n < 0)
      return n;
    if (n == 0) {
      s->src_eof = 1;
      return 0;
    }
    s->in = s->ring->buf + (size_t)(s->ring->head % RING_BYTES);
    s->lent = (size_t)n;
    s->in_pos = 0;
    s->in_len = (size_t)n;
    s->compressed_bytes += (uint64_t)n;
    return n;
  }
  ssize_t n = raw_read(s, s->in, s->in_cap, err);
  if (n < 0)
    return n;
  s->in_pos = 0;
  s->in_len = (size_t)n;
  return n;
}

static ssize_t archive_read_cb(struct archive *a, void *ctx, const void **buf) {
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

static int alloc_input(wds__stream *s, wds__err *err) {
  s->in_cap = INPUT_BLOCK;
  s->in = s->in_buf = malloc(s->in_cap);
  if (!s->in)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (input buffer)");
  return WDS_OK;
}

int wds__stream_read_thread;

static int open_zstd(wds__stream *s, const wds__io_opts *opts, wds__err *err) {
  s->zd = ZSTD_createDCtx();
  if (!s->zd)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (zstd)");
  s->zlast = 1;
  s->zframe_start = 1;
  s->zchecked = 1;
  /* libzstd takes 1 KiB .. 2 GiB (64-bit): no frame needs less than the
   * minimum, and none it can decode needs more than the maximum. The exact
   * size, not a power of two (ZSTD_d_windowLogMax), so that the limit the
   * message names is the one applied. */
  uint64_t limit = opts && opts->max_window_bytes
                       ? opts->max_window_bytes
                       : WDS__DEFAULT_MAX_WINDOW_BYTES;
  ZSTD_bounds b = ZSTD_dParam_getBounds(ZSTD_d_windowLogMax);
  uint64_t lo = (uint64_t)1 << b.lowerBound, hi = (uint64_t)1 << b.upperBound;
  s->zmax_window = limit < lo ? lo : limit > hi ? hi : limit;
  size_t r = ZSTD_DCtx_setMaxWindowSize(s->zd, (size_t)s->zmax_window);
  if (ZSTD_isError(r))
    return wds__fail(err, WDS_ERR_INVALID, "zstd window limit %llu: %s",
                     (unsigned long long)s->zmax_window, ZSTD_getErrorName(r));
  return alloc_input(s, err);
}

static int open_gzip(wds__stream *s, wds__err *err) {
  /* 16 + MAX_WBITS: gzip wrapper only, so the trailer is checked. */
  if (inflateInit2(&s->gz, 16 + MAX_WBITS) != Z_OK)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (zlib)");
  s->gz_init = 1;
  return alloc_input(s, err);
}

static int is_xz_magic(const uint8_t *p, size_t n) {
  return n >= 6 && memcmp(p,
                          "\xfd"
                          "7zXZ\x00",
                          6) == 0;
}

/* The legacy .lzma header has no magic: properties byte (lc/lp/pb, 0x5d for
 * every preset), a 32-bit dictionary size and a 64-bit size (all ones when
 * unknown). Accept only the common shapes, as xz's own detection does. */
static int is_lzma_alone(const uint8_t *p, size_t n) {
  if (n < 13 || p[0] != 0x5d)
    return 0;
  int unknown = 1;
  for (int i = 5; i < 13; i++)
    unknown &= p[i] == 0xff;
  return unknown || p[12] == 0; /* known size below 2^56 */
}

static int open_xz(wds__stream *s, int alone, wds__err *err) {
  lzma_stream init = LZMA_STREAM_INIT;
  s->xz = init;
  lzma_ret r =
      alone ? lzma_alone_decoder(&s->xz, XZ_MEMLIMIT_BYTES)
            : lzma_stream_decoder(&s->xz, XZ_MEMLIMIT_BYTES, LZMA_CONCATENATED);
  if (r != LZMA_OK)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (liblzma)");
  s->xz_init = 1;
  snprintf(s->filter_name, sizeof s->filter_name, "%s", alone ? "lzma" : "xz");
  return alloc_input(s, err);
}

/* Compression formats named by their magic, for messages when libarchive
 * cannot even start decoding (a stream cut inside its first header). */
static const char *magic_name(const uint8_t *p, size_t n) {
  static const struct {
    const char *name;
    const char *magic;
    size_t len;
  } table[] = {{"gzip", "\x1f\x8b", 2},
               {"bzip2", "BZh", 3},
               {"xz",
                "\xfd"
                "7zXZ\x00",
                6},
               {"lz4", "\x04\x22\x4d\x18", 4},
               {"lz4", "\x02\x21\x4c\x18", 4}, /* the legacy format */
               {"lzip", "LZIP", 4},
               {"compress", "\x1f\x9d", 2},
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
                   "%s (%s data%s, after %llu compressed bytes): %s", what,
                   s->filter_name, truncated ? " truncated" : "",
                   (unsigned long long)s->compressed_bytes, msg);
}

/* Not compressed and not a tar: an HTML page, a zip archive... (sniff.h). */
static int not_tar(const wds__stream *s, wds__err *err) {
  return wds__not_tar(err, "none", s->peek, s->peek_len);
}

static int open_archive(wds__stream *s, wds__err *err) {
  const char *magic = magic_name(s->peek, s->peek_len);
  /* Each filter enabled below bids only on its magic (in magic_name): the
   * rest is not a tar, and needs no libarchive to say so. */
  if (!magic)
    return not_tar(s, err);
  s->abuf = malloc(ARCHIVE_BLOCK);
  s->ar = archive_read_new();
  if (!s->ar && *wds__archive_dl_error())
    return wds__fail(err, WDS_ERR_OPEN, "%s data needs libarchive: %s", magic,
                     wds__archive_dl_error());
  if (!s->abuf || !s->ar)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory (libarchive)");
  snprintf(s->filter_name, sizeof s->filter_name, "%s",
           magic ? magic : "compressed");
  /* In-process filters only (see the top of the file). A filter whose
   * library is missing would fall back to a program: ARCHIVE_WARN. */
  if (archive_read_support_filter_bzip2(s->ar) != ARCHIVE_OK ||
      archive_read_support_filter_lz4(s->ar) != ARCHIVE_OK ||
      archive_read_support_filter_lzip(s->ar) != ARCHIVE_OK ||
      archive_read_support_filter_compress(s->ar) != ARCHIVE_OK ||
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
                       "%s data truncated inside its header (%llu "
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

int wds__stream_open(const char *url, const wds__io_opts *opts,
                     wds__stream **out, wds__err *err) {
  int rc;
  *out = NULL;
  wds__stream *s = calloc(1, sizeof *s);
  if (!s)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  if (opts)
    s->io = *opts;
  s->io.stop = NULL;
  /* The thread's stop token must be in the source's options, so the choice
   * is made before the codec is known (a plain tar leaves it unused). */
  int want =
      wds__stream_read_thread ? wds__stream_read_thread : s->io.read_thread;
  const char *env = want == 0 ? getenv("WDS_READ_THREAD") : NULL;
  if (env && *env) /* benchmarks: "0" never, anything else always */
    want = strcmp(env, "0") == 0 ? -1 : 1;
  if (want > 0 || (want == 0 && wds__cpu_count() >=
                                    2 * (atomic_load(&open_compressed) + 1))) {
    if (wds__cancel_init(&s->stop_tok) == 0)
      s->io.stop = &s->stop_tok;
    else /* no eventfd: a close could wait up to WDS__CANCEL_POLL_MS */
      wds__cancel_destroy(&s->stop_tok);
  }
  rc = wds__source_open(url, &s->io, &s->src, err);
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
      (wds__tarfmt_is_header(s->peek) || is_zero(s->peek, PEEK_BYTES))) {
    s->codec = CODEC_NONE;
  } else if (is_zstd_magic(s->peek, s->peek_len)) {
    s->codec = CODEC_ZSTD;
    rc = open_zstd(s, &s->io, err);
  } else if (s->peek_len >= 2 && s->peek[0] == 0x1f && s->peek[1] == 0x8b) {
    s->codec = CODEC_GZIP;
    snprintf(s->filter_name, sizeof s->filter_name, "gzip");
    rc = open_gzip(s, err);
  } else if (is_xz_magic(s->peek, s->peek_len) ||
             is_lzma_alone(s->peek, s->peek_len)) {
    s->codec = CODEC_XZ;
    rc = open_xz(s, !is_xz_magic(s->peek, s->peek_len), err);
  } else if (s->peek_len < PEEK_BYTES && !magic_name(s->peek, s->peek_len)) {
    /* Shorter than one block and not compressed: a tar cut inside its first
     * header (or empty); the tar parser says so, with the offset. */
    s->codec = CODEC_NONE;
  } else {
    s->codec = CODEC_ARCHIVE;
    rc = open_archive(s, err);
  }
  if (rc == WDS_OK && s->codec != CODEC_NONE) {
    atomic_fetch_add(&open_compressed, 1);
    s->counted = 1;
    ring_start(s);
  }
  if (!s->ring && s->io.stop) /* unused: the source polls a closed token */
    wds__cancel_destroy(&s->stop_tok);
done:
  if (rc != WDS_OK) {
    wds__stream_close(s);
    return rc;
  }
  *out = s;
  return WDS_OK;
}

/* v as "2 GiB" (unit " GiB") or "2G" (unit "G"), in the largest unit that
 * divides it; plain bytes otherwise. */
static void size_text(char *out, size_t n, uint64_t v, int short_units) {
  static const char *const units[] = {" GiB", " MiB", " KiB"};
  for (int i = 0; i < 3; i++) {
    int shift = 30 - 10 * i;
    if (v >= ((uint64_t)1 << shift) && v % ((uint64_t)1 << shift) == 0) {
      snprintf(out, n, "%llu%.*s", (unsigned long long)(v >> shift),
               short_units ? 1 : 4, units[i] + short_units);
      return;
    }
  }
  snprintf(out, n, short_units ? "%llu" : "%llu bytes", (unsigned long long)v);
}

/* At the start of a frame: keeps a copy of its header (the decoder does not
 * say what window a frame it refuses asked for), first moving the unread
 * input down and reading more if the header may straddle two reads. */
static int zstd_frame_start(wds__stream *s, wds__err *err) {
  size_t avail = s->in_len - s->in_pos;
  if (avail < sizeof s->zhdr && !raw_done(s)) {
    unlend(s); /* the header is joined in in_buf */
    memmove(s->in, s->in + s->in_pos, avail);
    s->in_pos = 0;
    s->in_len = avail;
    while (s->in_len < sizeof s->zhdr) {
      ssize_t n = raw_read(s, s->in + s->in_len, s->in_cap - s->in_len, err);
      if (n < 0)
        return (int)n;
      if (n == 0)
        break;
      s->in_len += (size_t)n;
    }
    avail = s->in_len;
  }
  if (avail == 0)
    return WDS_OK; /* the end, or nothing yet: no frame starts here */
  s->zhdr_len = avail < sizeof s->zhdr ? avail : sizeof s->zhdr;
  memcpy(s->zhdr, s->in + s->in_pos, s->zhdr_len);
  /* A frame without a content checksum (zstd --no-check) carries nothing
   * to check: its bytes are final as they come. One whose header does not
   * parse fails in the decoder. */
  ZSTD_frameHeader fh;
  s->zchecked = 1;
  if (ZSTD_getFrameHeader(&fh, s->zhdr, s->zhdr_len) == 0 &&
      fh.frameType == ZSTD_frame && !fh.checksumFlag) {
    s->zchecked = 0;
    s->unchecked_frames++;
  }
  /* compressed_bytes counts what was read from the source, peeked bytes
   * included; some of those are not consumed yet. */
  s->zframe_off = s->compressed_bytes - (s->peek_len - s->peek_pos) - avail;
  s->zframe_start = 0;
  return WDS_OK;
}

static int zstd_window_error(const wds__stream *s, wds__err *err) {
  char limit[32], need[32], opt[32], long_n[40] = "";
  ZSTD_frameHeader fh;
  size_text(limit, sizeof limit, s->zmax_window, 0);
  if (ZSTD_getFrameHeader(&fh, s->zhdr, s->zhdr_len) != 0)
    return wds__fail(err, WDS_ERR_LIMIT,
                     "the zstd frame at compressed offset %llu needs a window "
                     "over the limit of %s: raise the limit with --max-window "
                     "(max_window_bytes in the C API)",
                     (unsigned long long)s->zframe_off, limit);
  size_text(need, sizeof need, fh.windowSize, 0);
  size_text(opt, sizeof opt, fh.windowSize, 1);
  if ((fh.windowSize & (fh.windowSize - 1)) == 0)
    snprintf(long_n, sizeof long_n, " (as zstd --long=%d writes)",
             __builtin_ctzll(fh.windowSize));
  return wds__fail(err, WDS_ERR_LIMIT,
                   "the zstd frame at compressed offset %llu needs a %s "
                   "window%s, over the limit of %s: raise the limit with "
                   "--max-window %s (max_window_bytes in the C API); the "
                   "decoder holds the whole window in memory",
                   (unsigned long long)s->zframe_off, need, long_n, limit, opt);
}

static int zstd_error(wds__stream *s, size_t r, wds__err *err) {
  if (ZSTD_getErrorCode(r) == ZSTD_error_frameParameter_windowTooLarge)
    return zstd_window_error(s, err);
  return wds__fail(err, WDS_ERR_DECOMPRESS,
                   "corrupt zstd data in the frame at compressed offset %llu: "
                   "%s",
                   (unsigned long long)s->zframe_off, ZSTD_getErrorName(r));
}

/* libzstd does not count the bytes it wrote in a call that then fails (a
 * frame's checksum is checked in the call after its last block, which
 * first flushes what that block left). So that an error comes at the same
 * byte of the output however the input was cut into reads, a call that
 * filled the output is followed by one without input, which only flushes,
 * and the decoder is fed at most what it asked for (its hint: the rest of
 * the current block and the next block's header), so a call never decodes
 * past the block it completes. The hint also keeps libzstd off its
 * one-call path for a frame that lies whole in the input, which reports
 * nothing it wrote when the frame's checksum fails. */
static ssize_t zstd_read(wds__stream *s, void *dst, size_t cap, wds__err *err) {
  for (;;) {
    if (s->zfull) {
      ZSTD_inBuffer none = {s->in, s->in_pos, s->in_pos};
      ZSTD_outBuffer o = {dst, cap, 0};
      size_t r = ZSTD_decompressStream(s->zd, &o, &none);
      if (ZSTD_isError(r))
        return fail_after(s, o.pos, zstd_error(s, r, err), err);
      s->zfull = o.pos == cap;
      if (o.pos > 0) {
        s->zlast = r;
        if (r == 0) {
          s->zframe_start = 1;
          s->final_bytes = s->out_bytes + o.pos; /* checksum verified */
        }
        return (ssize_t)o.pos;
      }
      if (r == 0) /* the frame ended with the last call's bytes */
        s->final_bytes = s->out_bytes;
    }
    if (s->zframe_start) {
      int rc = zstd_frame_start(s, err);
      if (rc != WDS_OK)
        return rc;
    }
    ssize_t avail = refill(s, err);
    if (avail < 0)
      return avail;
    if (avail == 0) {
      if (s->zlast != 0)
        return wds__fail(err, WDS_ERR_TRUNCATED,
                         "zstd stream truncated inside a frame (after "
                         "%llu compressed bytes)",
                         (unsigned long long)s->compressed_bytes);
      return 0;
    }
    size_t hint = s->zlast ? s->zlast : 1; /* a frame starts: its header */
    ZSTD_inBuffer in = {s->in, s->in_len, s->in_pos};
    if (in.size - in.pos > hint)
      in.size = in.pos + hint;
    ZSTD_outBuffer o = {dst, cap, 0};
    size_t r = ZSTD_decompressStream(s->zd, &o, &in);
    s->in_pos = in.pos;
    if (ZSTD_isError(r))
      return fail_after(s, o.pos, zstd_error(s, r, err), err);
    s->zfull = o.pos == cap;
    s->zlast = r;
    if (r == 0) { /* a frame ended: the decoder stops at its last byte */
      s->zframe_start = 1;
      s->final_bytes = s->out_bytes + o.pos; /* checksum verified */
    }
    if (o.pos > 0)
      return (ssize_t)o.pos;
  }
}

static ssize_t gzip_read(wds__stream *s, void *dst, size_t cap, wds__err *err) {
  for (;;) {
    ssize_t avail = refill(s, err);
    if (avail < 0)
      return avail;
    if (s->gz_member_done) {
      /* Between members: another member, zero padding, or the end. */
      if (avail == 0)
        return 0;
      /* Zero padding between or after members is skipped, across reads,
       * as Python's gzip does; anything else must start a new member. */
      while (s->in_pos < s->in_len && s->in[s->in_pos] == 0)
        s->in_pos++;
      if (s->in_pos == s->in_len)
        continue;
      if (inflateReset(&s->gz) != Z_OK)
        return wds__fail(err, WDS_ERR_DECOMPRESS, "zlib reset failed");
      s->gz_member_done = 0;
      s->gz_member_off = consumed(s);
    }
    if (avail == 0)
      return wds__fail(err, WDS_ERR_TRUNCATED,
                       "gzip stream truncated inside a member (after "
                       "%llu compressed bytes)",
                       (unsigned long long)s->compressed_bytes);
    s->gz.next_in = s->in + s->in_pos;
    s->gz.avail_in = (uInt)(s->in_len - s->in_pos);
    s->gz.next_out = dst;
    s->gz.avail_out = cap > UINT32_MAX ? UINT32_MAX : (uInt)cap;
    int r = inflate(&s->gz, Z_NO_FLUSH);
    s->in_pos = s->in_len - s->gz.avail_in;
    size_t produced = (size_t)((uint8_t *)s->gz.next_out - (uint8_t *)dst);
    if (r == Z_STREAM_END) { /* CRC-32 and length verified */
      s->gz_member_done = 1;
      s->final_bytes = s->out_bytes + produced;
    } else if (r != Z_OK && r != Z_BUF_ERROR)
      return fail_after(
          s, produced,
          wds__fail(err, WDS_ERR_DECOMPRESS,
                    "corrupt gzip data in the member at compressed offset "
                    "%llu, after %llu bytes of its output: %s",
                    (unsigned long long)s->gz_member_off,
                    (unsigned long long)s->gz.total_out,
                    s->gz.msg ? s->gz.msg : "inflate error"),
          err);
    if (produced > 0)
      return (ssize_t)produced;
  }
}

static ssize_t xz_read(wds__stream *s, void *dst, size_t cap, wds__err *err) {
  if (s->xz_done)
    return 0;
  for (;;) {
    ssize_t avail = refill(s, err);
    if (avail < 0)
      return avail;
    s->xz.next_in = s->in + s->in_pos;
    s->xz.avail_in = (size_t)avail;
    s->xz.next_out = dst;
    s->xz.avail_out = cap;
    lzma_ret r = lzma_code(&s->xz, avail == 0 ? LZMA_FINISH : LZMA_RUN);
    s->in_pos = s->in_len - s->xz.avail_in;
    size_t produced = (size_t)((uint8_t *)s->xz.next_out - (uint8_t *)dst);
    if (r == LZMA_STREAM_END) { /* the streams' checks verified */
      s->xz_done = 1;
      s->final_bytes = s->out_bytes + produced;
      return (ssize_t)produced;
    }
    if (r == LZMA_MEMLIMIT_ERROR)
      return fail_after(
          s, produced,
          wds__fail(err, WDS_ERR_LIMIT,
                    "%s data needs more than %llu MiB to "
                    "decompress",
                    s->filter_name,
                    (unsigned long long)(XZ_MEMLIMIT_BYTES >> 20)),
          err);
    if (r == LZMA_BUF_ERROR && avail == 0)
      return wds__fail(err, WDS_ERR_TRUNCATED,
                       "%s stream truncated inside a block (after %llu "
                       "compressed bytes)",
                       s->filter_name, (unsigned long long)s->compressed_bytes);
    if (r != LZMA_OK && r != LZMA_BUF_ERROR)
      return fail_after(s, produced,
                        wds__fail(err, WDS_ERR_DECOMPRESS,
                                  "corrupt %s data after %llu bytes of its "
                                  "output: liblzma error %d",
                                  s->filter_name,
                                  (unsigned long long)s->xz.total_out, (int)r),
                        err);
    if (produced > 0)
      return (ssize_t)produced;
    if (avail == 0)
      return wds__fail(err, WDS_ERR_TRUNCATED,
                       "%s stream truncated early (after %llu "
                       "compressed bytes)",
                       s->filter_name, (unsigned long long)s->compressed_bytes);
  }
}

/* Whether the codec's output waits for a check at a frame's, member's or
 * stream's end: zstd frames with a content checksum, gzip members (CRC-32
 * and length), xz streams (their check); bzip2, lz4 and lzip through
 * libarchive at the stream's end. Plain bytes, lzma-alone and compress
 * carry no check: final as they come. */
static int output_waits(const wds__stream *s) {
  switch (s->codec) {
  case CODEC_NONE:
    return 0;
  case CODEC_ZSTD:
    return s->zchecked;
  case CODEC_GZIP:
    return 1;
  case CODEC_XZ:
    return strcmp(s->filter_name, "lzma") != 0;
  case CODEC_ARCHIVE:
    return strcmp(s->filter_name, "compress") != 0;
  }
  return 1;
}

static ssize_t codec_read(wds__stream *s, void *dst, size_t cap, wds__err *err);

ssize_t wds__stream_read(wds__stream *s, void *dst, size_t cap, wds__err *err) {
  ssize_t n = codec_read(s, dst, cap, err);
  if (n > 0) {
    s->out_bytes += (uint64_t)n;
    if (!output_waits(s))
      s->final_bytes = s->out_bytes;
  } else if (n == 0 && cap > 0) {
    s->final_bytes = s->out_bytes; /* a clean end: every check passed */
  }
  return n;
}

uint64_t wds__stream_out(const wds__stream *s) { return s->out_bytes; }

uint64_t wds__stream_final(const wds__stream *s) { return s->final_bytes; }

uint64_t wds__stream_unchecked_frames(const wds__stream *s) {
  return s->unchecked_frames;
}

int wds__stream_unchecked_now(const wds__stream *s) {
  return s->codec != CODEC_NONE && !output_waits(s);
}

static ssize_t codec_read(wds__stream *s, void *dst, size_t cap,
                          wds__err *err) {
  if (cap == 0)
    return 0;
  if (s->pending) {
    if (err)
      *err = s->pending_err;
    return s->pending;
  }
  switch (s->codec) {
  case CODEC_NONE:
    return raw_read(s, dst, cap, err);
  case CODEC_ZSTD:
    return zstd_read(s, dst, cap, err);
  case CODEC_GZIP:
    return gzip_read(s, dst, cap, err);
  case CODEC_XZ:
    return xz_read(s, dst, cap, err);
  case CODEC_ARCHIVE: {
    la_ssize_t n = archive_read_data(s->ar, dst, cap);
    /* Some filters (bzip2) turn a failed read callback into a clean end:
     * the source's own error (a failed command) must not be lost. */
    if (n < 0 || (n == 0 && s->src_failed))
      return archive_status(s, err, "cannot decompress");
    return (ssize_t)n;
  }
  }
  return wds__fail(err, WDS_ERR_INVALID, "bad codec");
}

ssize_t wds__stream_skip(wds__stream *s, uint64_t n, void *scratch,
                         size_t scratch_size, wds__err *err) {
  if (s->codec == CODEC_NONE && s->peek_pos == s->peek_len && !s->src_eof) {
    /* Plain bytes with nothing left to replay: the source may seek. */
    ssize_t k = wds__source_skip(s->src, n, scratch, scratch_size, err);
    if (k == 0)
      s->src_eof = 1;
    if (k > 0) {
      s->compressed_bytes += (uint64_t)k;
      s->out_bytes += (uint64_t)k;
      s->final_bytes = s->out_bytes;
    }
    return k;
  }
  return wds__stream_read(s, scratch,
                          n < scratch_size ? (size_t)n : scratch_size, err);
}

int wds__stream_drain(wds__stream *s, wds__err *err) {
  uint8_t tmp[16384];
  uint64_t total = 0;
  /* Budget in source bytes too (see raw_read): a decoder that consumes
   * endless padding or empty frames yields nothing to count here. */
  s->drain_stop = s->compressed_bytes + DRAIN_MAX_BYTES;
  while (total < DRAIN_MAX_BYTES) {
    ssize_t n = wds__stream_read(s, tmp, sizeof tmp, err);
    if (n < 0)
      return s->drain_cut ? WDS_OK : (int)n; /* our cut, not damage */
    if (n == 0)
      break;
    total += (uint64_t)n;
  }
  if (s->drain_cut)
    return WDS_OK;
  /* A decoder may end before its source does (an lzma-alone stream, or
   * libarchive's filters): read the source on to its end, within the same
   * budget, so that a pipe: command is reaped and its status checked. */
  while (total < DRAIN_MAX_BYTES && !raw_done(s)) {
    ssize_t n = raw_read(s, tmp, sizeof tmp, err);
    if (n < 0)
      return (int)n;
    if (n == 0) /* the budget ran out */
      return WDS_OK;
    total += (uint64_t)n;
  }
  if (s->src_failed) {
    memcpy(err->msg, s->src_err.msg, sizeof err->msg);
    return s->src_status;
  }
  /* Read to the source's end and whole: a cache entry may be linked. More
   * than the budget after the archive: ignored, not read, and not cached. */
  if (raw_done(s))
    wds__source_consumed(s->src);
  return WDS_OK;
}

int wds__stream_file_fd(const wds__stream *s) {
  return s && s->codec == CODEC_NONE ? wds__source_file_fd(s->src) : -1;
}

int wds__stream_file_is_cache_entry(const wds__stream *s) {
  return s && wds__source_is_cache_entry(s->src);
}

const char *wds__stream_codec(const wds__stream *s) {
  switch (s->codec) {
  case CODEC_NONE:
    return "none";
  case CODEC_ZSTD:
    return "zstd";
  case CODEC_GZIP:
  case CODEC_XZ:
  case CODEC_ARCHIVE:
    return s->filter_name;
  }
  return "?";
}

void wds__stream_close(wds__stream *s) {
  if (!s)
    return;
  if (s->ring)
    ring_stop(s);
  if (s->io.stop)
    wds__cancel_destroy(&s->stop_tok);
  if (s->counted)
    atomic_fetch_sub(&open_compressed, 1);
  if (s->ar)
    archive_read_free(s->ar);
  free(s->abuf);
  ZSTD_freeDCtx(s->zd);
  if (s->gz_init)
    inflateEnd(&s->gz);
  if (s->xz_init)
    lzma_end(&s->xz);
  free(s->in_buf);
  wds__source_close(s->src);
  free(s);
}
