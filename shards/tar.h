/* tar.h — streaming tar parser over a wds__stream. Internal to wds.
 *
 * The parser owns one growable read window. wds__tar_next() returns the next
 * regular-file member's name and size without touching its data;
 * wds__tar_load() brings the data into the window; members never loaded are
 * skipped without being kept. Everything from the "keep" mark to the newest
 * member stays in the window, so a caller can hold several members (a
 * sample) at once. Window positions are virtual offsets: skipped data that
 * was never stored is not counted, so they stay valid across skips; a view is
 * buf + (voff - base), valid until the next call that reads. */
#ifndef WDS_SHARDS_TAR_H
#define WDS_SHARDS_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "stream.h"
#include "tarfmt.h" /* WDS__TAR_BLOCK */

typedef struct wds__tar wds__tar;

typedef struct wds__tar_member {
  const char *name; /* valid until the next wds__tar_next() */
  size_t name_len;
  uint64_t size;
  uint64_t header_offset; /* stream offset of its first (extension) header */
  uint64_t data_offset;   /* stream offset of its data */
  uint64_t data_voff;     /* virtual window offset of its data */
} wds__tar_member;

/* stream stays owned by the caller. max_window_bytes is a hard bound on the
 * window (at least twice block_bytes); the caller checks its own sample
 * limit and leaves room for padding, look-ahead and small skips. */
int wds__tar_open(wds__stream *stream, size_t block_bytes,
                  size_t max_window_bytes, wds__tar **out, wds__err *err);
void wds__tar_close(wds__tar *t);

/* Next regular member: WDS_OK, WDS_EOF at the end-of-archive marker, or an
 * error (truncated, bad checksum, bad size field, unsupported member). */
int wds__tar_next(wds__tar *t, wds__tar_member *m, wds__err *err);

/* Brings m's data into the window. */
int wds__tar_load(wds__tar *t, const wds__tar_member *m, wds__err *err);

/* Copies m's data (the member last returned by wds__tar_next) into dst
 * (m->size bytes): what the window already holds is copied, the rest is
 * read from the stream straight into dst and never enters the window, so a
 * large member costs one copy in all. The window then holds nothing of the
 * member past what it already had; m's virtual offsets must not be used
 * afterwards. After large members the window reads only a little ahead
 * (so the next large member is mostly read straight too). The pages of
 * dst past its first `made` bytes (those already resident: a recycled
 * buffer's) are populated a piece at a time ahead of the reads, so the
 * resident size follows the bytes that arrive, not m->size (a header's
 * claim). */
int wds__tar_read_into(wds__tar *t, const wds__tar_member *m, void *dst,
                       uint64_t made, wds__err *err);

/* m's data (the member last returned) will not be loaded: skipped, or
 * read by the caller from the file itself. If it is large (16 KiB or
 * more) window fills turn short as after wds__tar_read_into, and skips
 * past the window seek (when the stream can) rather than read, so the data
 * of this and of the next large members is never copied into the window. */
void wds__tar_skip_unread(wds__tar *t, const wds__tar_member *m);

/* Bytes before virtual offset voff may be discarded from now on. */
void wds__tar_keep_from(wds__tar *t, uint64_t voff);

/* Of the bytes from the keep mark on, only those before voff are held (the
 * loaded members); what lies between voff and the parse position (headers
 * and members nobody loaded) may be dropped, and is, when it grows large.
 * Virtual offsets of held bytes never change. */
void wds__tar_hold_to(wds__tar *t, uint64_t voff);

/* Pointer to the window byte at virtual offset voff (which must be held). */
const uint8_t *wds__tar_view(const wds__tar *t, uint64_t voff);

/* Reads ahead into the window (never past its limit) until every stream
 * byte before stream offset end is final (wds__stream_final: its zstd
 * frame or gzip member ended and passed its check), so that a caller hands
 * out nothing a later check would find damaged. A failed check is the
 * stream's error, returned here. It stops holding when the frame still
 * open holds max_open_bytes decompressed bytes (a frame larger than that
 * is read as it comes: *settled is 0) or the window is full; *settled is
 * 1 when every byte before end is final. Held bytes stay in the window:
 * later members and skips use them as usual. */
int wds__tar_settle(wds__tar *t, uint64_t end, uint64_t max_open_bytes,
                    int *settled, wds__err *err);

/* Stream bytes consumed so far. */
uint64_t wds__tar_offset(const wds__tar *t);

#endif
