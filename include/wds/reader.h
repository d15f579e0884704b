/* wds/reader.h — a stream of WebDataset samples from a shard spec.
 *
 * The reader opens each shard in turn (local path, file://URL, pipe:CMD, "-"
 * for stdin, http(s):// read in process with libcurl, s3:// signed
 * requests; ftp:// and the like need an explicit pipe:curl), detects the
 * compression from the first bytes (none, zstd, gzip, xz, lzma, and through
 * libarchive bzip2, lz4, lzip, compress), parses the tar stream with wds's
 * own streaming parser and groups members into samples by WebDataset's rules:
 *
 *   - only regular files count; directories, links and devices are skipped;
 *   - members named like "__meta__" (top level) or "__x__/..." are skipped;
 *   - key = path up to the first dot of the last path component, extension =
 *     the rest, lower-cased ("a/b.Seg.PNG" -> key "a/b", ext "seg.png");
 *     names without a dot in the last component are skipped;
 *   - consecutive members with the same key form one sample; a sample never
 *     spans two shards; an extension repeated within a sample is an error.
 *
 * Typical use:
 *
 *   wds_reader_config cfg = WDS_READER_CONFIG_INIT;
 *   cfg.spec = "data-{000..009}.tar";
 *   wds_reader *r;
 *   if (wds_reader_open(&cfg, &r) != WDS_OK) { puts(wds_last_error()); ... }
 *   const wds_sample *s;
 *   int rc;
 *   while ((rc = wds_reader_next(r, &s)) == WDS_OK) { use s->fields[i] ... }
 *   if (rc != WDS_EOF) fprintf(stderr, "%s\n", wds_last_error());
 *   wds_reader_close(r);
 *
 * Memory: one read buffer per reader (buffer_size_bytes), grown only as far as
 * the largest sample needs, and never past max_sample_bytes. Field data is
 * handed out as views into that buffer: no copy is made. */
#ifndef WDS_READER_H
#define WDS_READER_H

#include <stddef.h>
#include <stdint.h>

#include "wds/api.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One field of a sample: a member of the tar. All pointers are borrowed from
 * the reader and valid until the next wds_reader_next() or _close(). */
typedef struct wds_field {
  const char *ext;     /* lower-cased extension, e.g. "jpg", "seg.png" */
  const char *name;    /* the member's full name in the tar */
  const uint8_t *data; /* size_bytes bytes (not NUL-terminated) */
  size_t size_bytes;
  uint64_t offset; /* offset of the member's first header in the
                      (decompressed) tar stream */
} wds_field;

/* A sample: a key and its fields, in archive order. Borrowed like wds_field. */
typedef struct wds_sample {
  const char *key;    /* "dir/name" without extension */
  const char *url;    /* the shard it came from, as expanded */
  size_t shard_index; /* index of url in the expanded shard list */
  size_t field_count;
  const wds_field *fields;
} wds_sample;

typedef struct wds_reader_config {
  /* Shard spec (see wds/spec.h). When NULL, urls/url_count are used as is. */
  const char *spec;
  const char *const *urls;
  size_t url_count;
  size_t max_urls;           /* limit on the expanded spec; 0 = default */
  size_t buffer_size_bytes;  /* read block; 0 = 4 MiB */
  size_t max_sample_bytes;   /* largest sample accepted: field data plus
                                two strings (name, extension) per field;
                                0 = 1 GiB. A larger one is WDS_ERR_LIMIT
                                naming the member, and ends the shard. */
  size_t max_fields;         /* most fields in one sample; 0 = 4096 */
  int read_timeout_ms;       /* a shard that delivers no byte for this long
                                fails with WDS_ERR_TIMEOUT naming the shard
                                and the wait; 0 = 300000 (5 minutes), < 0 =
                                wait forever. Pipes, stdin and sockets only:
                                a regular file's read does not stall. */
  uint64_t max_window_bytes; /* zstd window a shard may need; 0 = 128 MiB.
                                A larger one (zstd --long=31) is
                                WDS_ERR_LIMIT naming the window. */
  int retries;               /* http(s):// shards: how many times a transfer
                                that fails transiently (connect error, HTTP
                                408, 429 or 5xx, a cut connection) is tried
                                again, with backoff, before the shard fails;
                                a cut transfer resumes at the byte where it
                                stopped, and the count restarts after an
                                attempt that delivered data. 0 = 5, < 0 =
                                none. */
  const char *cache_dir;     /* remote shards (http(s)://, s3://; never
                                local files or pipe:) are kept in this
                                directory (created if missing) once read
                                whole, and read from it on later opens;
                                NULL = $WDS_CACHE_DIR when set, else no
                                cache. Shared safely by several
                                processes. The cache trusts the URL: a
                                changed object is not noticed. A failure to
                                write it never fails a read. */
  uint64_t cache_size;       /* bytes the cache's entries may take: least
                                recently used ones are deleted over it;
                                0 = no limit */
  int allow_pipe_from_files; /* run pipe: commands read from an @FILE of
                                spec; 0: refused, naming the file and line
                                (wds/spec.h) */
  /* NULL, or a check that a read which has waited 100 ms (a stalled pipe:
   * command, FIFO or server) calls about every 100 ms while it waits, from
   * the thread that waits: the caller's of wds_reader_open() (an s3://
   * listing) or wds_reader_next(), or a compressed shard's reading thread,
   * so it must be thread-safe. Nonzero cancels the reader as
   * wds_reader_cancel() does: the call returns WDS_ERR_CANCELLED
   * ("interrupted"). For callers that must notice a signal while a call
   * blocks: the Python binding's KeyboardInterrupt. */
  int (*interrupt)(void *ctx);
  void *interrupt_ctx;
  /* A compressed shard's sample is returned only once the checks of the
   * zstd frames or gzip members its data lies in have passed: the reader
   * reads on to the frame's end, holding up to this many decompressed
   * bytes of it; 0 = 64 MiB. A larger frame's samples are returned as
   * they come (counted in unverified_samples, as are samples in data that
   * carries no check: a zstd frame without a checksum). */
  uint64_t max_unverified_bytes;
} wds_reader_config;

#define WDS_READER_CONFIG_INIT                                                 \
  { NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, NULL, NULL, 0 }

typedef struct wds_reader wds_reader;

/* Counters since open. */
typedef struct wds_reader_stats {
  uint64_t shards;       /* shards opened */
  uint64_t samples;      /* samples returned */
  uint64_t members;      /* regular tar members grouped into samples */
  uint64_t field_bytes;  /* bytes of field data returned */
  uint64_t tar_bytes;    /* bytes of (decompressed) tar stream consumed */
  uint64_t cache_hits;   /* shards read from cache_dir */
  uint64_t cache_stored; /* shards written to cache_dir */
  uint64_t cache_errors; /* failures to use or write cache_dir (the shard
                            was read without the cache) */
  /* Samples of compressed shards returned unchecked: before the check of
   * their zstd frame or gzip member came (the frame was larger than
   * max_unverified_bytes), or from data that carries none (a zstd frame
   * without a content checksum); and such zstd frames, in closed shards. */
  uint64_t unverified_samples;
  uint64_t unchecked_frames;
} wds_reader_stats;

/* Validates cfg, expands the spec and prepares to read; shards are opened
 * lazily by wds_reader_next(). On failure *out is NULL, nothing leaks and
 * wds_last_error() tells why. */
WDS_API int wds_reader_open(const wds_reader_config *cfg, wds_reader **out);

/* Next sample: WDS_OK with *out set (borrowed until the next call), WDS_EOF
 * after the last shard, or a negative status with wds_last_error() naming
 * the shard URL, member and byte offset. After an error the reader stays
 * usable: the next call continues with the next shard (or, after
 * WDS_ERR_DUPLICATE, with the next sample of the same shard), so callers
 * can choose to stop at the first error or to skip what is bad. */
WDS_API int wds_reader_next(wds_reader *r, const wds_sample **out);

/* Makes a wds_reader_next() blocked in a read, and every later one, return
 * WDS_ERR_CANCELLED at once (a pipe: command is stopped when the reader is
 * closed). Thread-safe and async-signal-safe: a signal handler may call it
 * while another thread reads. */
WDS_API void wds_reader_cancel(wds_reader *r);

/* The expanded shard list. */
WDS_API size_t wds_reader_shard_count(const wds_reader *r);
WDS_API const char *wds_reader_shard_url(const wds_reader *r, size_t index);

WDS_API void wds_reader_stats_get(const wds_reader *r, wds_reader_stats *out);

/* Closes the current shard (stopping a pipe: command if it still runs) and
 * frees everything. NULL is a no-op. */
WDS_API void wds_reader_close(wds_reader *r);

#ifdef __cplusplus
}
#endif
#endif /* WDS_READER_H */
