/* wds/writer.h — writing WebDataset shards (what WebDataset's ShardWriter
 * and TarWriter do).
 *
 * A writer takes samples (a key and fields) and writes them as tar members
 * "KEY.EXT", fields sorted by extension, into a numbered series of shards
 * ("shard-%06d.tar"), starting a new shard when the next sample would take
 * the current one past max_count samples or max_size_bytes bytes (a shard
 * only exceeds max_size_bytes when one sample alone does). Or, with
 * out_fd >= 0, into one tar stream on that descriptor (`wds cat`).
 *
 * Output is deterministic: every member has mode 0444 (as WebDataset's
 * TarWriter writes), uid/gid 0, empty owner names and the same mtime
 * (config .mtime, default 0); the archive ends with two zero blocks padded
 * to a 10240-byte record; gzip headers carry no name, time 0 and OS byte 3.
 * So the same samples give byte-identical shards. Each shard is written
 * under a temporary name in its directory, "NAME.tmp-PID-N", synced
 * (fsync), renamed to NAME when complete and the directory synced: neither
 * an interrupted run nor a power loss leaves a truncated shard under a final
 * name (a killed process may leave its "*.tmp-PID-N" files; they can be
 * deleted). A NAME that exists and is not a regular file (/dev/null, a
 * FIFO, a device) is written in place instead, never replaced: see
 * wds_outfile (wds/outfile.h, included here).
 *
 * One writer at a time per numbered pattern: the first shard takes an
 * exclusive lock (flock) on a file beside the shards, ".PREFIX%dSUFFIX.lock"
 * (the pattern's file name with its conversion written %d, '/' as '_'),
 * holding the holder's pid, kept until close or abort (which delete it).
 * A second writer of the same pattern, in this process or another, fails
 * its first sample with WDS_ERR_OPEN naming the lock and the other
 * writer's pid: two runs would interleave their shards. A lock file that
 * cannot be opened or used (a directory or FIFO at its path, another
 * user's file this one cannot open) is the same error naming it and the
 * reason, never skipped; another user's lock that can be read is taken
 * through a read-only descriptor (flock needs no more).
 *
 * Compression comes from the name: ".zst"/".tzst" zstd, ".gz"/".tgz" gzip,
 * anything else none (WDS_COMPRESS_AUTO), or is given explicitly. zstd is
 * written as frames of about 1 MiB of tar, each with a content checksum
 * and ending on a member boundary (a member over 4 MiB is split), so a
 * reader can check a sample before it hands it out; any zstd decoder reads
 * them as one stream. gzip is one member (Python's tarfile, in the stream
 * mode WebDataset uses, stops at the end of a first member).
 *
 *   wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
 *   cfg.pattern = "out/shard-%06d.tar.zst";
 *   wds_writer *w;
 *   if (wds_writer_open(&cfg, &w) != WDS_OK) { puts(wds_last_error()); ... }
 *   wds_writer_field f[2] = {{"jpg", jpeg, jpeg_size}, {"cls", "3", 1}};
 *   rc = wds_writer_write_sample(w, "img0001", f, 2);
 *   ...
 *   rc = wds_writer_close(w);   // finishes (renames) the last shard
 *
 * Errors (WDS_ERR_IO with the path, WDS_ERR_INVALID for a bad key or
 * extension) are sticky: after one, every call returns it (and sets
 * wds_last_error() again), and close
 * removes the unfinished shard's temporary file. Shards completed before
 * stay. wds_writer_abort() discards the unfinished shard without an error
 * (a producer whose own input failed). */
#ifndef WDS_WRITER_H
#define WDS_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "wds/api.h"
#include "wds/outfile.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wds_compress {
  WDS_COMPRESS_AUTO = 0, /* from the name */
  WDS_COMPRESS_NONE = 1,
  WDS_COMPRESS_ZSTD = 2,
  WDS_COMPRESS_GZIP = 3
} wds_compress;

typedef struct wds_writer_config {
  const char *pattern;     /* printf pattern with one integer conversion (%d,
                              %06d, %i, %u), '%%' for a literal '%'; a name
                              without one is a single output file: without
                              max_count/max_size_bytes (0) it takes any
                              number of samples; with them, a sample that
                              would need a second shard fails
                              (WDS_ERR_INVALID, the file is not kept). One
                              starting with "pipe:" (any case, after
                              spaces) is refused (WDS_ERR_INVALID): the
                              writer runs no command */
  int out_fd;              /* >= 0: one tar stream to this descriptor instead
                              (not closed; no temporary name; max_count and
                              max_size_bytes not applied; with AUTO the
                              compression comes from pattern if set, else
                              none) */
  uint64_t max_count;      /* samples per shard; 0 = 100000 */
  uint64_t max_size_bytes; /* size of a finished uncompressed shard (end
                              blocks and record padding included); 0 = 3e9,
                              UINT64_MAX for no limit */
  uint64_t start_index;    /* number of the first shard */
  wds_compress compression;
  int level;     /* zstd ZSTD_minCLevel()..22 (0 = 3), gzip 1..9 (0 = 6);
                    ignored without compression */
  int64_t mtime; /* of every member, seconds since the epoch, 0..8^11-1;
                    default 0 */
  int no_sync;   /* 1: do not fsync shards and their directory (faster for
                    scratch data; a power loss may then leave a short shard
                    under its final name); default 0: synced */

  /* Called after each shard is complete and renamed (NULL: not called):
   * for progress lines and indexes. With out_fd, called once by close with
   * path NULL. file_bytes is the shard's size on disk (compressed). */
  void (*on_shard)(void *ctx, const char *path, uint64_t samples,
                   uint64_t file_bytes);
  void *on_shard_ctx;
  /* Called by close, after the last shard is renamed, for each file
   * already in the shards' directory that the pattern names with a number
   * after the last shard written (an earlier run's, which readers of the
   * pattern would take for this run's), in number order (NULL: not
   * called; nothing is deleted). Only for a pattern with a conversion
   * whose directory part has none, when a shard was written. */
  void (*on_leftover)(void *ctx, const char *path);
  void *on_leftover_ctx;
} wds_writer_config;

/* What the front ends report of on_leftover's calls: counted, the first
 * and last path kept (malloc'd). Give wds_writer_leftover_add as
 * on_leftover and a zeroed wds_writer_leftovers as its ctx; release the
 * paths with wds_writer_leftovers_free. A path that cannot be copied
 * (out of memory) is counted and left NULL. */
typedef struct wds_writer_leftovers {
  uint64_t count;
  char *first, *last;
} wds_writer_leftovers;
WDS_API void wds_writer_leftover_add(void *leftovers, const char *path);
WDS_API void wds_writer_leftovers_free(wds_writer_leftovers *l);

#define WDS_WRITER_CONFIG_INIT                                                 \
  {                                                                            \
    .pattern = NULL, .out_fd = -1, .max_count = 0, .max_size_bytes = 0,        \
    .start_index = 0, .compression = WDS_COMPRESS_AUTO                         \
  }

/* One field of a sample to write: member "KEY.EXT". */
typedef struct wds_writer_field {
  const char *ext; /* without the dot; may contain dots ("seg.png") */
  const void *data;
  size_t size_bytes;
} wds_writer_field;

typedef struct wds_writer wds_writer;

typedef struct wds_writer_stats {
  uint64_t shards;  /* completed */
  uint64_t samples; /* written */
  uint64_t members;
  uint64_t tar_bytes; /* uncompressed */
  uint64_t out_bytes; /* written to files (compressed) */
} wds_writer_stats;

/* On failure *out is NULL and wds_last_error() says why. No file is created
 * before the first sample. */
WDS_API int wds_writer_open(const wds_writer_config *cfg, wds_writer **out);

/* Writes one sample (the data is copied or written before it returns). The
 * key must be non-empty, must not end with '/', and (to be read back as the
 * same sample by WebDataset's rules) have no '.' in its last path
 * component; a sample has at least one field; extensions must be non-empty,
 * contain no '/', and be unique within the sample ignoring ASCII case
 * (readers lower-case them). Fields are written sorted by extension (byte
 * order). Anything else is WDS_ERR_INVALID (sticky, like every error). */
WDS_API int wds_writer_write_sample(wds_writer *w, const char *key,
                                    const wds_writer_field *fields,
                                    size_t count);

WDS_API void wds_writer_stats_get(const wds_writer *w, wds_writer_stats *out);

/* Finishes and renames the current shard now (no-op when none is open);
 * the next sample starts a new one, numbered on. With out_fd it ends the
 * stream, and later samples are WDS_ERR_INVALID. Unlike close, it leaves
 * the handle to read the final stats from. */
WDS_API int wds_writer_end_shard(wds_writer *w);

/* Finishes and renames the current shard, then frees everything; returns
 * WDS_OK or the error (sticky or from finishing; its text in
 * wds_last_error()). NULL is a no-op (WDS_OK).
 * After an error the unfinished shard's temporary file is removed. */
WDS_API int wds_writer_close(wds_writer *w);

/* Frees everything without finishing: the unfinished shard's temporary
 * file is removed (with out_fd, the stream is left without its end
 * blocks). Shards completed before stay. NULL is a no-op. */
WDS_API void wds_writer_abort(wds_writer *w);

#ifdef __cplusplus
}
#endif
#endif /* WDS_WRITER_H */
