/* wds/outfile.h — whole files written safely: wds_outfile.
 *
 * What the shard writer (wds/writer.h) does for each shard, for any file
 * written whole (an index, a checkpoint, a .npy file). A PATH that does not
 * exist or is a regular file is written under a temporary name beside it,
 * "PATH.tmp-PID-N" (created exclusively, so concurrent writers, even on
 * other hosts of a shared file system, never share one), and commit() syncs
 * it (fsync), renames it to PATH and syncs the directory: PATH holds the old
 * file or the complete new one, never part of one, even after a power loss.
 * WDS_OUTFILE_NO_SYNC leaves out both syncs (scratch output; a crash is then
 * still safe, a power loss may not be).
 *
 * Temporary-and-rename is for regular files only: renaming over a device
 * would replace it (run as root, `-o /dev/null` would turn /dev/null into a
 * regular file for every later `> /dev/null` on the machine). A PATH that
 * exists and is itself a character or block device or a FIFO is opened
 * and written in place, as a shell redirection would (a FIFO blocks until a
 * reader opens it); a directory or a socket is an error.
 *
 * Symbolic links: PATH a symlink to a regular file (or a dangling one) is
 * replaced by the new file, as atomic writers do (the rename replaces the
 * link; its old target is left as it was). A symlink to a device, a FIFO
 * or a socket is refused (WDS_ERR_OPEN, naming what it points to): a link
 * planted where an output goes must not send it into a disk, a terminal or
 * another program's pipe.
 *
 * The process's own descriptors, /dev/stdin, /dev/stdout, /dev/stderr,
 * /dev/fd/N and /proc/self/fd/N, are written in place through a copy of
 * the descriptor, at its offset, whatever it refers to (a regular file
 * stdout is redirected to, a pipe, a terminal, a socket), as a shell
 * redirection would: never reopened, truncated, replaced or renamed over
 * (as root, a rename over /dev/stdout would replace the machine's link),
 * and so not atomically. A descriptor that is not open, or open for
 * reading only, is an error naming it.
 *
 *   wds_outfile *f;
 *   if (wds_outfile_open(path, 0, &f) != WDS_OK) ... wds_last_error()
 *   write(wds_outfile_fd(f), ...);
 *   rc = wds_outfile_commit(f);
 *   wds_outfile_close(f);  // always; removes the temporary if not committed
 *
 * Errors: WDS_ERR_OPEN from open, WDS_ERR_IO from commit, with a message
 * naming the file in wds_last_error(). */
#ifndef WDS_OUTFILE_H
#define WDS_OUTFILE_H

#include <stddef.h>

#include "wds/api.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* wds_outfile_open's flags. */
#define WDS_OUTFILE_NO_SYNC 1u
/* A log, written as it goes: a PATH that does not exist or is a regular
 * file is created or truncated and written in place, so a reader
 * (`tail -f`) sees what was written and a killed process leaves what it
 * wrote; commit() syncs it (unless NO_SYNC) and closes it. The rules for
 * links stay: a symlink to a regular file (or a dangling one) is replaced
 * by a new file, its target left as it was (the link is removed, the file
 * created with O_EXCL); one to a device, a FIFO or a socket is refused.
 * Devices and FIFOs are written in place as without the flag; the
 * process's own descriptors (/dev/stdout, /dev/fd/N) are written through a
 * copy of the descriptor, at its offset (stdout redirected to a file gets
 * the log after what was printed). */
#define WDS_OUTFILE_STREAM 2u

typedef struct wds_outfile wds_outfile;

WDS_API int wds_outfile_open(const char *path, unsigned flags,
                             wds_outfile **out);

/* The descriptor to write to (the outfile's: do not close it). */
WDS_API int wds_outfile_fd(const wds_outfile *f);

/* 1 when PATH is written in place (a device, a FIFO, or a file opened with
 * WDS_OUTFILE_STREAM), 0 otherwise. */
WDS_API int wds_outfile_in_place(const wds_outfile *f);

/* The temporary name; NULL when written in place or once committed. */
WDS_API const char *wds_outfile_tmp_path(const wds_outfile *f);

/* Ends the file: fsync (unless NO_SYNC; in place only for block devices),
 * close, rename to PATH and fsync of its directory. After a failure the
 * temporary file is removed by close. */
WDS_API int wds_outfile_commit(wds_outfile *f);

/* Closes the descriptor if still open and removes an uncommitted temporary
 * file; frees f. NULL is a no-op. */
WDS_API void wds_outfile_close(wds_outfile *f);

#ifdef __cplusplus
}
#endif
#endif /* WDS_OUTFILE_H */
