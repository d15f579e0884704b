/* stream.h — the decompressed byte stream of one shard. Internal to wds.
 *
 * Opens the URL's source, looks at its first bytes and picks a codec: none
 * (a plain tar), zstd (libzstd), gzip (zlib), xz/lzma (liblzma), or
 * libarchive's in-process filters (bzip2, lz4, lzip, compress). The name of
 * the shard plays no part. Reads give decompressed bytes straight into the
 * caller's buffer. See stream.c for why each codec goes where it goes. */
#ifndef WDS_SHARDS_STREAM_H
#define WDS_SHARDS_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "io_opts.h"

typedef struct wds__stream wds__stream;

/* opts (NULL: defaults): read timeout and cancellation for the source,
 * the zstd window limit for the decoder, the reading thread (a compressed
 * stream may read and decompress ahead on a thread of its own; reads,
 * errors and their order are the same either way). */
int wds__stream_open(const char *url, const wds__io_opts *opts,
                     wds__stream **out, wds__err *err);

/* Up to cap decompressed bytes into dst: count (> 0), 0 at a clean end, or a
 * negative status (truncated or corrupt compressed data, a failed command,
 * an I/O error) with the message in err. */
ssize_t wds__stream_read(wds__stream *s, void *dst, size_t cap, wds__err *err);

/* Checked output. wds__stream_out: decompressed bytes returned (read or
 * skipped) so far. wds__stream_final: how many of those are final: they
 * lie in zstd frames, gzip members or xz/bzip2/lz4/lzip streams that ended
 * and passed their checks (content checksum, CRC-32 and length, the
 * stream's check), or in data that carries no check (a plain tar, a zstd
 * frame written without a content checksum, lzma-alone, compress). The
 * bytes between the two belong to a frame whose check is still to come:
 * a reader that must not hand out damaged data holds them until
 * wds__stream_final passes them (reading on: the check comes at the
 * frame's end), or until the stream fails. A frame's check failing is an
 * error from the read that reaches its end. */
uint64_t wds__stream_out(const wds__stream *s);
uint64_t wds__stream_final(const wds__stream *s);
/* zstd frames seen without a content checksum (nothing to verify). */
uint64_t wds__stream_unchecked_frames(const wds__stream *s);
/* Whether the compressed bytes being decoded now carry no check (a zstd
 * frame without a checksum, lzma-alone, compress); 0 for a plain tar. */
int wds__stream_unchecked_now(const wds__stream *s);

/* Skips up to n decompressed bytes (seeking where the source allows it):
 * returns how many (> 0), 0 at the end, or an error. */
ssize_t wds__stream_skip(wds__stream *s, uint64_t n, void *scratch,
                         size_t scratch_size, wds__err *err);

/* Reads and discards the rest of the stream, so that compressed framing and
 * a pipe command's exit status are still checked. */
int wds__stream_drain(wds__stream *s, wds__err *err);

/* "none", "zstd", "gzip", "xz", "lzma", or libarchive's filter name. */
const char *wds__stream_codec(const wds__stream *s);

/* A plain tar (no codec) from a local regular file read from its start:
 * the file's descriptor (owned by the stream), whose offsets are the
 * stream's, so a member's data_offset is where pread finds it. Else -1. */
int wds__stream_file_fd(const wds__stream *s);
/* Whether that file is a shard cache entry (wds__source_is_cache_entry). */
int wds__stream_file_is_cache_entry(const wds__stream *s);

/* Stops the reading thread, if any (a read it is blocked in ends at once),
 * and frees everything. NULL is a no-op. */
void wds__stream_close(wds__stream *s);

/* CPUs this process may run on (its affinity mask; 1 if unknown). */
int wds__cpu_count(void);

/* Tests only: when non-zero, replaces every stream's
 * wds__io_opts.read_thread (> 0 always, < 0 never). */
extern int wds__stream_read_thread;

#endif
