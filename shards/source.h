/* source.h — byte sources behind a shard URL: files, pipe:CMD, stdin.
 * Internal to wds. A source only reads forward: it never seeks, so pipes and
 * stdin behave exactly like files. */
#ifndef WDS_SHARDS_SOURCE_H
#define WDS_SHARDS_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "io_opts.h"

typedef struct wds__source wds__source;

/* Opens url: "-" (stdin), "pipe:CMD" (CMD run by /bin/sh, its stdout read),
 * "file://PATH", http(s):// (read in process with libcurl: http.h), or a
 * local path (ftp, sftp and scp need an explicit pipe:curl). opts (NULL:
 * defaults) gives the read timeout and the cancellation token that reads
 * honour. */
int wds__source_open(const char *url, const wds__io_opts *opts,
                     wds__source **out, wds__err *err);

/* Opens the local file path for reading (its descriptor in *fd) without
 * blocking in open(2), which a FIFO without a writer would do for good
 * (restarted after signals); the descriptor blocks again for reads. With
 * wait_fifo, a FIFO (or pipe) is then waited on until it has data or its
 * end, under opts's read timeout and cancel token (opts NULL: the default
 * timeout). Errors (WDS_ERR_OPEN: strerror's text; WDS_ERR_TIMEOUT,
 * WDS_ERR_CANCELLED) name neither the path nor the open: callers prefix
 * them. */
int wds__open_local(const char *path, const wds__io_opts *opts, int wait_fifo,
                    int *fd, wds__err *err);

/* Reads up to cap bytes into dst. Returns the count (> 0), 0 at the end of
 * the source, or a negative status. For a pipe, the end of the stream is
 * only reported once the command has exited with status 0; a non-zero exit
 * is an error naming the command and its status. */
ssize_t wds__source_read(wds__source *s, void *dst, size_t cap, wds__err *err);

/* Skips up to n bytes: returns how many (> 0), 0 at the end, or an error.
 * Regular files seek forward (never past their size at open); anything else
 * reads into scratch. */
ssize_t wds__source_skip(wds__source *s, uint64_t n, void *scratch,
                         size_t scratch_size, wds__err *err);

/* The consumer read the source to its end (a read returned 0) and found
 * it whole: the stream's drain after the tar's end-of-archive marker. Only
 * then is a remote shard's cache entry (cache.h), filled as it was read,
 * linked into place; a source closed without this (a reader that stopped
 * early, an error) leaves nothing, even when a reading thread had read it
 * all ahead. A no-op for sources without a fill. Called by the thread that
 * reads the stream, after the source's end was seen. */
void wds__source_consumed(wds__source *s);

/* Whether reads come from a regular file (a local file or a cache entry):
 * they never wait on a command or a network. */
int wds__source_is_regular(const wds__source *s);

/* The descriptor of a source that is a local regular file (a path,
 * file://, or a cache entry) read from its start, so that the source's byte
 * offsets are the file's: for reading members in place with pread. -1 for
 * anything else (stdin, pipes, http). Owned by the source. */
int wds__source_file_fd(const wds__source *s);

/* Whether the source reads a shard cache entry (cache.h): a file the cache
 * never changes in place (entries are linked whole, replaced by rename),
 * whose mtime it sets to mark use (a hit by any process). */
int wds__source_is_cache_entry(const wds__source *s);

/* Closes the source. A command that is still running (because the caller
 * stopped reading early) is stopped: that is not an error. NULL is a no-op. */
void wds__source_close(wds__source *s);

/* Tests only: when set, called in the opening thread between a pipe:
 * command's spawn and its registration with the warden (the command waits
 * at its gate meanwhile). */
extern void (*wds__source_after_spawn_hook)(void);

#endif
