/* cache.h — the local shard cache: remote shards kept on local disk.
 * Internal to wds (used by source.c).
 *
 * A remote shard (any URL with a scheme but file://: http(s)://, s3://) is
 * cached by its URL. While it streams, its bytes are also written to an
 * unnamed temporary file in the cache directory; only when the source was
 * read whole to its end without error (and the length the server announced
 * matched), and the consumer read it all (source.h: wds__source_consumed,
 * which the stream's drain calls after the tar's end; a reading thread that
 * read the transfer ahead of a reader that stopped is not enough), is the
 * file linked into place under a name made from the URL's
 * SHA-256, atomically (rename). A cut, an error, a reader that stops early,
 * a shard larger than the size limit, or an end that the HTTP source could
 * not verify (a body without a length, ended at close, from a server that
 * ignores ranges: wds__http_verified) leaves nothing. Later opens of the URL
 * read the local file, and mark it used (its mtime) for least-recently-used
 * eviction, which runs after each new entry under an flock on the directory's
 * lock file, while the entries take more than the size limit. Several processes
 * may share a directory: each writes its own temporary file; the last rename of
 * one URL wins (with the same content). The cache trusts the URL: an object
 * changed on the server is not noticed until its entry is evicted or deleted.
 *
 * Failures to write the cache (a read-only or full disk) never fail the
 * read: the shard streams as without the cache, the failure is counted and
 * the first one reported through the warning callback, if any. */
#ifndef WDS_SHARDS_CACHE_H
#define WDS_SHARDS_CACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Counters shared by the sources of one reader or loader. */
typedef struct wds__cache_stats {
  atomic_uint_fast64_t hits;    /* opens served from the cache */
  atomic_uint_fast64_t stored;  /* entries written */
  atomic_uint_fast64_t evicted; /* entries deleted over the limit */
  atomic_uint_fast64_t errors;  /* failures to use or write the cache */
  atomic_int warned;            /* the first error was reported */
  void (*warn)(void *ctx, const char *msg); /* NULL: counted only */
  void *warn_ctx;
} wds__cache_stats;

/* The cache a source uses (NULL dir: none). */
typedef struct wds__cache_cfg {
  const char *dir;
  uint64_t size;           /* bytes of entries kept; 0 = no limit */
  wds__cache_stats *stats; /* may be NULL */
} wds__cache_cfg;

/* 1 for a URL the cache keeps: one with a scheme other than file:. */
int wds__cache_is_remote(const char *url);

/* The cache directory a reader or loader uses: dir when given (a config's
 * cache_dir, a --cache-dir), else $WDS_CACHE_DIR when set and not empty,
 * else NULL (no cache). The one place the variable is read. */
const char *wds__cache_dir_default(const char *dir);

/* The entry's file name for url (malloc'd): 32 hex digits of the SHA-256 of
 * the shard's identity (base/url.h: wds__url_identity, the one the index
 * matches by: scheme and host lower-case, no default port or fragment,
 * dot segments and percent-encoding normalised, AWS S3 https URLs as
 * s3://BUCKET/KEY), '-', and its last path component without a query
 * (characters other than letters, digits, '.', '_' and '-' replaced by '_',
 * at most 80). NULL when out of memory. */
char *wds__cache_entry_name(const char *url);

/* SHA-256 of data into out (32 bytes), with nettle's sha256. */
void wds__sha256(const void *data, size_t n, uint8_t out[32]);

/* The lower-case hex digits of bytes[0..n) into out: 2n digits and a
 * NUL. */
void wds__hex(const uint8_t *bytes, size_t n, char *out);

/* SHA-256 of data as 64 lower-case hex digits and a NUL: the digest
 * `wds index --hashes` writes and `wds ls --json` prints, one function. */
void wds__sha256_hex(const void *data, size_t n, char hex[65]);

/* Opens the entry for url if there is one: returns its descriptor (marked
 * used, and recorded as open by this process until wds__cache_release), or
 * -1 when there is none. *name gets the entry's name (malloc'd) for the
 * release. */
int wds__cache_open(const wds__cache_cfg *c, const char *url, char **name);
void wds__cache_release(char *name);

/* A new entry being written. */
typedef struct wds__cache_fill wds__cache_fill;

/* Starts an entry for url; NULL when the cache cannot be written (counted
 * and reported once). */
wds__cache_fill *wds__cache_fill_begin(const wds__cache_cfg *c,
                                       const char *url);
/* Appends n bytes; a write error abandons the entry (counted, reported),
 * and so does, silently, passing the size limit (the shard could never be
 * kept): its temporary file is deleted at once, the read goes on uncached.
 * Temporary files are not counted in the limit: concurrent fills can take
 * up to their own sizes (each at most the limit) beyond it while they run. */
void wds__cache_fill_write(wds__cache_fill *f, const void *data, size_t n);
/* The source ended cleanly after `length` bytes; expected is the length the
 * server announced (has_expected 0: none). Links the entry into place if
 * everything was written and the lengths agree, then evicts over the limit.
 * Frees f. */
void wds__cache_fill_commit(wds__cache_fill *f, uint64_t length,
                            int has_expected, uint64_t expected);
/* The source ended at an end it could not verify (http.h:
 * wds__http_verified): the entry is abandoned, and that is counted and
 * reported once as a failure to use the cache. Frees f; NULL is a no-op. */
void wds__cache_fill_unverified(wds__cache_fill *f);
/* Abandons the entry: nothing is left behind. Frees f; NULL is a no-op. */
void wds__cache_fill_abort(wds__cache_fill *f);

/* Deletes least recently used entries of dir while they take more than
 * size bytes (0: none), never one open in this process nor `keep`; and
 * temporary files that crashed processes left. Under the directory's lock.
 * Returns how many entries were deleted. */
size_t wds__cache_evict(const char *dir, uint64_t size, const char *keep,
                        wds__cache_stats *stats);

/* Tests only: the entry names open in this process. */
size_t wds__cache_open_count(void);

#endif
