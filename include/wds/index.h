/* wds/index.h — reading a shard-set index (the JSON `wds index` writes).
 *
 * Format (the top level is compatible with wids' shard index):
 *
 *   {"wids_version": 1, "__kind__": "wds-shard-index", "name": "...",
 *    "shardlist": [
 *      {"url": "data-000.tar", "nsamples": 2, "filesize": 30720,
 *       "tar_bytes": 30720,                       <- optional
 *       "samples": [                              <- optional
 *         {"key": "a", "fields": {"cls": [0, 1], "jpg": [1024, 5120]}},
 *         ...]},
 *      ...]}
 *
 * url: the shard as given to `wds index` (a pipe: command that only fetches
 * a URL, "pipe:curl -s URL", is recorded as that URL); a relative local path
 * is relative to the directory holding the index file. Lookups match a
 * shard by its identity, whatever scheme names it: an index of http:// URLs
 * serves a loader given the same shards as pipe:curl commands, and the
 * other way round (wds_index_lookup). nsamples: the samples the reader
 * yields. filesize: the file's size in bytes (absent or null for pipe: and
 * remote URLs). tar_bytes: the size of the decompressed tar stream. In
 * samples, each field maps its extension to [OFFSET, SIZE]: the offset of
 * the member's first header in the decompressed stream (wds_field.offset)
 * and the size of its data. Other keys are allowed and ignored.
 *
 *   wds_index *ix;
 *   if (wds_index_load("index.json", WDS_INDEX_SAMPLES, &ix) != WDS_OK)
 *     { puts(wds_last_error()); ... }
 *   size_t i;
 *   if (wds_index_lookup(ix, "data-000.tar", &i) != WDS_OK)
 *     puts(wds_last_error());             // not listed, or stale
 *   wds_index_shard sh;
 *   wds_index_shard_info(ix, i, &sh);     // sh.nsamples, sh.samples[j] ...
 *   wds_index_close(ix);
 *
 * A handle is read-only after load; use it from one thread at a time. */
#ifndef WDS_INDEX_H
#define WDS_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "wds/api.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of wds_index_load. WDS_INDEX_SAMPLES keeps the per-sample detail
 * (keys, fields); without it "samples" is validated as JSON and skipped,
 * which is all the loader needs. */
#define WDS_INDEX_SAMPLES 1u
/* Without it, an index whose url names a pipe: command is refused (naming
 * the file and the entry): an index may come from anywhere, and running
 * its urls as commands must be the user's choice (--allow-pipe-from-files,
 * allow_pipe_from_files). */
#define WDS_INDEX_ALLOW_PIPE_FROM_FILES 4u

typedef struct wds_index wds_index;

/* A field of an indexed sample. Borrowed from the index until close. */
typedef struct wds_index_field {
  const char *ext;
  uint64_t offset;     /* of the member's first header (decompressed) */
  uint64_t size_bytes; /* of the member's data */
} wds_index_field;

typedef struct wds_index_sample {
  const char *key;
  size_t field_count;
  const wds_index_field *fields; /* in the order of the index */
} wds_index_sample;

/* One shard of the index. Pointers are borrowed until wds_index_close. */
typedef struct wds_index_shard {
  const char *url;  /* as written in the index */
  const char *path; /* url resolved against the index's directory */
  uint64_t nsamples;
  int64_t filesize;                /* -1 when absent or null */
  int64_t tar_bytes;               /* -1 when absent */
  int has_samples;                 /* the per-sample detail was loaded */
  size_t sample_count;             /* == nsamples when has_samples */
  const wds_index_sample *samples; /* NULL unless has_samples */
} wds_index_shard;

/* Reads and validates the index at path (flags: 0 or WDS_INDEX_SAMPLES).
 * An index is untrusted input: an entry whose nsamples is more than its
 * tar_bytes can hold (a sample takes a 512-byte header, and the stream
 * ends with a 512-byte block) is an error naming it, and with
 * WDS_INDEX_SAMPLES so is a "samples" list without nsamples entries or a
 * member [OFFSET, SIZE] that does not fit in tar_bytes. On failure *out is
 * NULL and wds_last_error() names the file and the byte offset of the
 * problem. (The loader also bounds each count by the shard file's size,
 * and checks their sum.) */
WDS_API int wds_index_load(const char *path, unsigned flags, wds_index **out);

WDS_API size_t wds_index_shard_count(const wds_index *ix);

/* Shard i (in file order) into *out; WDS_ERR_INVALID when i is out of
 * range. */
WDS_API int wds_index_shard_info(const wds_index *ix, size_t i,
                                 wds_index_shard *out);

/* Finds the shard for a URL of a spec: matched against each url exactly,
 * then by identity (so "./a.tar", "file:///d/a.tar" and "/d/a.tar" find the
 * same entry, and so do "http://H:80/a.tar", "pipe:curl -sL 'http://h/a.tar'"
 * and "pipe:wget -qO- http://h/a.tar"; a URL's password and secret query
 * values do not count, so "http://h/a.tar?sig=***" in an index serves
 * "http://h/a.tar?sig=SECRET"; docs/architecture.md, "Shard identity").
 * For a local file with a recorded
 * filesize, the file's current size is compared: a difference is
 * WDS_ERR_CORRUPT ("URL: stale index: the shard was N bytes, is M"). Not
 * listed: WDS_ERR_INVALID. The message is in wds_last_error(). */
WDS_API int wds_index_lookup(const wds_index *ix, const char *url,
                             size_t *shard);

WDS_API void wds_index_close(wds_index *ix); /* NULL is a no-op */

/* The local path a URL names ("/d/a.tar", "file:///d/a.tar" -> "/d/a.tar"),
 * pointing into url; NULL for "-", pipe: commands, other scheme:// URLs
 * and file:// URLs without an absolute path (file://relative), which the
 * reader refuses too. The rules every index function applies. */
WDS_API const char *wds_index_local_path(const char *url);

/* The url an index in the canonical directory index_dir_real (as realpath
 * gives it) records for a shard URL: a local path made relative to that
 * directory ("a.tar", "sub/a.tar", "../a.tar"), so index and shards can be
 * moved together; the URL a fetch-only pipe: command fetches
 * ("pipe:curl -s URL": URL); the URL as given when it is not local, cannot
 * be resolved, or index_dir_real is NULL. A URL that is not local is
 * written without its secrets: a password ("user:***@host") and the values
 * of query parameters that carry credentials (X-Amz-Signature, sig,
 * token, ...) are "***"; lookups match it by identity, in which those
 * values do not count. Malloc'd (free()); NULL when out of memory. */
WDS_API char *wds_index_url_for(const char *url, const char *index_dir_real);

#ifdef __cplusplus
}
#endif
#endif /* WDS_INDEX_H */
