/* tarw.h — streaming tar writer. Internal to wds.
 *
 * Writes POSIX ustar members (pax 'x' extension headers only when a name or
 * size does not fit), either plain, as zstd frames of about 1 MiB of tar
 * each (content checksums on; tarw.c says why) or as one gzip member, to a
 * caller's file descriptor or to a path. Output is deterministic: every
 * member has mode 0444 (as WebDataset's TarWriter writes), uid/gid 0, empty
 * user/group names and the same mtime, and the gzip header has no name, mtime
 * 0 and OS byte 3 (Unix), so the same members give the same bytes. The archive
 * ends with two zero blocks and is padded to a 10240-byte record, as GNU tar
 * and Python's tarfile do.
 *
 *   wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
 *   o.compression = WDS__TARW_ZSTD;
 *   wds__tarw *w;
 *   if (wds__tarw_open_path("out.tar.zst", &o, &w, &err) != WDS_OK) ...
 *   rc = wds__tarw_add(w, "a.txt", "hi", 2, &err);
 *   if (rc == WDS_OK) rc = wds__tarw_finish(w, &err);
 *   wds__tarw_close(w);     // always; discards an unfinished archive
 *
 * With a path, the archive is written through wds_outfile (wds/outfile.h): to
 * a temporary name in the same directory, "PATH.tmp-PID-N" (N a per-process
 * counter), renamed into place by wds__tarw_finish() (synced first with the
 * fsync option); closing without a successful finish removes the temporary
 * file. A PATH that is a device or a FIFO is written in place. With a
 * descriptor, the caller keeps ownership of it.
 *
 * Errors are sticky: after a failed call every later call (except close)
 * returns the same status. */
#ifndef WDS_SHARDS_TARW_H
#define WDS_SHARDS_TARW_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum wds__tarw_compression {
  WDS__TARW_NONE = 0,
  WDS__TARW_ZSTD = 1,
  WDS__TARW_GZIP = 2
};

typedef struct wds__tarw_options {
  int compression;     /* enum wds__tarw_compression */
  int zstd_level;      /* ZSTD_minCLevel()..ZSTD_maxCLevel(); 0 = zstd's
                          default (3) */
  int64_t mtime;       /* seconds since the epoch, for every member;
                          0 <= mtime < 8^11 */
  size_t buffer_bytes; /* write block; 0 = 1 MiB */
  int fsync;           /* path mode: fsync the file before the rename and
                          its directory after */
  int gzip_level;      /* 1..9; 0 = 6 */
} wds__tarw_options;

#define WDS__TARW_OPTIONS_INIT                                                 \
  { WDS__TARW_NONE, 0, 0, 0, 0, 0 }

typedef struct wds__tarw wds__tarw;

/* Counters since open. */
typedef struct wds__tarw_stats {
  uint64_t members;
  uint64_t tar_bytes; /* uncompressed tar stream written */
  uint64_t out_bytes; /* bytes written to the file (compressed size) */
  uint64_t frames;    /* zstd frames ended (each about 1 MiB of tar) */
} wds__tarw_stats;

/* Writes to fd, which stays the caller's (not closed). opts may be NULL.
 * Messages name it "output fd N". */
int wds__tarw_open_fd(int fd, const wds__tarw_options *opts, wds__tarw **out,
                      wds__err *err);

/* Creates path (through a temporary name; see above). opts may be NULL. */
int wds__tarw_open_path(const char *path, const wds__tarw_options *opts,
                        wds__tarw **out, wds__err *err);

/* One whole member: name (a relative path, at most 65535 bytes, not empty)
 * and size bytes of data. */
int wds__tarw_add(wds__tarw *w, const char *name, const void *data,
                  uint64_t size, wds__err *err);

/* A member in pieces: begin() writes the header for a member of exactly size
 * bytes, write() its data in any number of calls, end() the padding. end()
 * fails when fewer bytes were written; write() fails on more. */
int wds__tarw_begin(wds__tarw *w, const char *name, uint64_t size,
                    wds__err *err);
int wds__tarw_write(wds__tarw *w, const void *data, size_t n, wds__err *err);
int wds__tarw_end(wds__tarw *w, wds__err *err);

/* Writes the end-of-archive blocks and record padding, ends the zstd frame,
 * flushes, and in path mode closes and renames the file into place. */
int wds__tarw_finish(wds__tarw *w, wds__err *err);

void wds__tarw_stats_get(const wds__tarw *w, wds__tarw_stats *out);

/* Frees w; an unfinished path-mode archive is removed. NULL is a no-op. */
void wds__tarw_close(wds__tarw *w);

/* Formats the header blocks of a member (a pax 'x' header with its records
 * when needed, then the ustar header) into out: WDS_OK with *len_out set (a
 * multiple of 512), WDS_ERR_INVALID for a bad name or mtime, WDS_ERR_LIMIT
 * when cap is too small (WDS__TARW_HEADER_MAX always suffices). Exposed for
 * tests. */
/* Bytes a member adds to the tar stream: its header blocks (with a pax
 * header when needed) and its data padded to 512; 0 for a name that
 * format_header refuses (empty or longer than 65535 bytes). */
uint64_t wds__tarw_member_bytes(size_t name_len, const char *name,
                                uint64_t size);

/* The size of a finished archive whose members took tar_bytes: two zero
 * blocks added and padded to a whole 10240-byte record. */
uint64_t wds__tarw_finished_bytes(uint64_t tar_bytes);

#define WDS__TARW_HEADER_MAX (3 * 512 + 65536 + 64)
int wds__tarw_format_header(const char *name, uint64_t size, int64_t mtime,
                            uint8_t *out, size_t cap, size_t *len_out,
                            wds__err *err);

#endif
