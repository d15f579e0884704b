/* io_opts.h — the options every shard open takes (a source, a stream, an
 * http(s) or s3 transfer, an s3 listing), and their defaults. Internal to
 * wds. */
#ifndef WDS_SHARDS_IO_OPTS_H
#define WDS_SHARDS_IO_OPTS_H

#include <stdint.h>

#include "cache.h"
#include "cancel.h"

/* Default read timeout: no byte for this long ends the shard with
 * WDS_ERR_TIMEOUT. Generous: a slow network delivers something well within
 * it; a stalled command or server does not. */
#define WDS__DEFAULT_READ_TIMEOUT_MS (300 * 1000)

/* Default zstd window limit (bytes); frames that need more are refused with
 * a message naming the window and the option that raises it. */
#define WDS__DEFAULT_MAX_WINDOW_BYTES ((uint64_t)128 << 20)

/* Default retries of an http(s):// transfer after attempts that failed
 * transiently without progress (connect errors, HTTP 408/429/5xx, a cut
 * transfer, which resumes where it stopped). */
#define WDS__DEFAULT_RETRIES 5

/* Options for opening a shard's source and stream. NULL or zeros: defaults. */
typedef struct wds__io_opts {
  int read_timeout_ms;       /* 0 = WDS__DEFAULT_READ_TIMEOUT_MS, < 0 never */
  const wds__cancel *cancel; /* may be NULL */
  uint64_t max_window_bytes; /* 0 = WDS__DEFAULT_MAX_WINDOW_BYTES */
  int retries;               /* http(s): 0 = WDS__DEFAULT_RETRIES, < 0 none */
  wds__cache_cfg cache;      /* remote shards: cache.dir NULL = no cache */
  /* A second token that source reads honour like cancel (may be NULL; it
   * must have an eventfd): stream.c's reading thread reads the source, and
   * closing the stream sets it to end a read blocked there. */
  const wds__cancel *stop;
  /* The reading thread of a compressed stream (stream.c): 0 = when the
   * process has a spare CPU (or as WDS_READ_THREAD says: 0 never, 1
   * always), > 0 = always, < 0 = never. */
  int read_thread;
} wds__io_opts;

#endif
