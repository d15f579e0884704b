/* index.h — reading and writing a shard-set index (the JSON `wds index`
 * writes). Internal.
 *
 * Format (top level compatible with wids' shard index):
 *
 *   {"wids_version": 1, "name": "...",
 *    "shardlist": [
 *      {"url": "data-000.tar", "nsamples": 1000, "filesize": 123456789,
 *       "samples": [...]},            <- optional, per-sample detail (skipped)
 *      ...]}
 *
 * shardlist[].url, .nsamples, .filesize and .tar_bytes are read; with
 * WDS__INDEX_SAMPLES also .samples (the full format is in wds/index.h,
 * which is the public face of this reader). Every other value is skipped.
 * A relative url is relative to the directory holding the index file.
 *
 * An index is untrusted input: a count it gives decides how many samples
 * the loader reads and how many invalid rows it tops a short shard up with.
 * So parsing refuses counts the entry itself contradicts (more samples than
 * its tar_bytes can hold, a "samples" list of another length, members
 * outside tar_bytes), and wds__index_check_count() bounds a count by the
 * shard file itself. */
#ifndef WDS_LOADER_INDEX_H
#define WDS_LOADER_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "wds/index.h"
#include "wds/reader.h"

/* A member's recorded hash, as kept in memory (WDS__INDEX_HASHES): the
 * first 16 bytes of the SHA-256 of its data (the digest `wds ls --json`
 * prints and `wds index --hashes` writes in full) and a 32-bit FNV-1a of
 * its extension, to find it. 20 bytes a member. */
typedef struct wds__member_hash {
  uint8_t digest[16];
  uint32_t ext_hash;
} wds__member_hash;

/* An entry's hashes: sample j's members are m[start[j] .. start[j + 1]).
 * count = 0 (and start NULL) when the entry records none; else count is
 * nsamples, every sample having its "sha256" object. 8 bytes a sample. */
typedef struct wds__index_hashes {
  size_t count;
  uint64_t *start; /* count + 1 */
  wds__member_hash *m;
  size_t nm;
} wds__index_hashes;

/* The kept form of a member hash, and the check: WDS_OK when the sample
 * (j of the entry) records a hash for ext that data matches; else
 * WDS_ERR_CORRUPT with a message naming the member (the caller adds shard
 * and key): the digest differs, or the index records no hash for ext. */
uint32_t wds__index_ext_hash(const char *ext);
int wds__index_hash_check(const wds__index_hashes *h, uint64_t j,
                          const char *ext, const void *data, size_t size,
                          wds__err *e);
void wds__index_hashes_free(wds__index_hashes *h);

typedef struct wds__index_entry {
  char *url;  /* as written in the index */
  char *path; /* url resolved against the index's directory */
  uint64_t nsamples;
  int64_t filesize;  /* -1 when absent */
  int64_t tar_bytes; /* -1 when absent */
  int has_samples;   /* "samples" was loaded (WDS__INDEX_SAMPLES) */
  size_t sample_count;
  wds_index_sample *samples; /* strings and fields malloc'd per sample */
  wds__index_hashes hashes;  /* with WDS__INDEX_HASHES; else empty */
} wds__index_entry;

#define WDS__INDEX_SAMPLES WDS_INDEX_SAMPLES
/* Internal flag: count the entries of a "samples" list without keeping
 * them, and require nsamples of them (the loader's check, at O(shards)
 * memory). Implied by WDS__INDEX_SAMPLES. */
#define WDS__INDEX_COUNT_SAMPLES 2u
/* Internal flag: keep each sample's member hashes (its "sha256" object,
 * written by `wds index --hashes`) in the entry's compact `hashes`; an
 * entry where some samples have one and others not is an error. Implies
 * reading "samples" (WDS__INDEX_COUNT_SAMPLES if not WDS__INDEX_SAMPLES). */
#define WDS__INDEX_HASHES 8u
/* The internal flags must not share a bit with the public ones (wds/index.h):
 * 4u is WDS_INDEX_ALLOW_PIPE_FROM_FILES, and a shared bit once let every
 * loader that asked for hashes run an index's pipe: commands unasked. */
_Static_assert(((WDS__INDEX_COUNT_SAMPLES | WDS__INDEX_HASHES) &
                (WDS_INDEX_SAMPLES | WDS_INDEX_ALLOW_PIPE_FROM_FILES)) == 0,
               "internal index flags overlap the public ones");

/* Every sample takes at least one 512-byte tar header, and a tar stream
 * ends with a 512-byte block: a stream wds can read (its offsets are 64-bit)
 * holds fewer samples than this, and so does a data set whose streams add
 * up to less than 2^64 bytes. */
#define WDS__INDEX_MAX_SAMPLES (UINT64_MAX / 512)

typedef struct wds__index {
  wds__index_entry *shards; /* in file order */
  size_t count;
  size_t *by_url_;  /* private: shards sorted by url, then by path, */
  size_t *by_path_; /* for O(log n) lookups */
  char *dir_real_;  /* private: realpath of the index's directory (NULL
                       when parsed from memory or not resolvable) */
} wds__index;

/* Reads and validates path. Errors (WDS_ERR_OPEN, WDS_ERR_FORMAT) name the
 * file and the byte offset of the problem. *out is zeroed on failure. */
int wds__index_load(const char *path, wds__index *out, wds__err *e);
int wds__index_load_flags(const char *path, unsigned flags, wds__index *out,
                          wds__err *e);

/* Parses an index already in memory (dir: the index's directory, for
 * relative urls; "" for none). Used by wds__index_load and the fuzzer. */
int wds__index_parse(const char *text, size_t size, const char *dir,
                     wds__index *out, wds__err *e);
/* The same with flags (0 or WDS__INDEX_SAMPLES: keep the sample detail,
 * whose count must then equal nsamples). */
int wds__index_parse_flags(const char *text, size_t size, const char *dir,
                           unsigned flags, wds__index *out, wds__err *e);

/* The sample count for a shard URL of the spec: matched against each
 * entry's url exactly, then against its resolved path, then (a local file
 * and an index loaded from a file) the file's real path made relative to
 * the index's real directory, as `wds index -o` writes it, against the
 * urls: so "../a.tar" in d/sub/index.json is found as "d/a.tar". For a local
 * file whose filesize is recorded, the file's current size is compared and a
 * difference is WDS_ERR_CORRUPT ("stale index: ... was N bytes, is M").
 * WDS_ERR_INVALID if the index has no entry for url. */
int wds__index_lookup(const wds__index *ix, const char *url, uint64_t *nsamples,
                      wds__err *e);
/* The same, giving the entry's position in ix->shards. */
int wds__index_find(const wds__index *ix, const char *url, size_t *entry,
                    wds__err *e);

/* Checks that the shard at url can hold nsamples samples: at most
 * WDS__INDEX_MAX_SAMPLES - 1, and for a local file what its current size
 * can hold, as the reader will decode it (the first bytes tell): a plain
 * tar (512 bytes per sample plus the end-of-archive block), zstd (at most
 * 32768 bytes out per byte in: a 128 KiB block from a 4-byte RLE block),
 * gzip (deflate's 1032:1). Other codecs (xz, bzip2, ...) have no bound
 * worth the name, and remote shards no size: only the first bound applies.
 * WDS_ERR_CORRUPT with a message naming url and the numbers; a file that
 * cannot be opened is left to the reader to report. */
int wds__index_check_count(const char *url, uint64_t nsamples, wds__err *e);

void wds__index_free(wds__index *ix);

/* index_lookup.c, for the parser: the resolved path of an entry url, its
 * identity (local relative paths joined to dir, lexically normalised;
 * remote urls and pipe: commands as wds__url_identity gives them for the
 * url redacted (wds__url_redacted: its password, token and signature
 * values as ***, as wds index writes them), so
 * "pipe:curl -s http://h/a.tar" and "http://H:80/./a.tar" are one shard,
 * and so are "http://h/a.tar?sig=A" and "http://h/a.tar?sig=***"),
 * malloc'd or NULL when out of memory; and the permutation sorting
 * entries by url (by_path 0) or path (1), a repeated key being an error
 * naming both entries. */
char *wds__index_resolve(const char *dir, const char *url);
int wds__index_sort(wds__index *ix, int by_path, size_t **perm, wds__err *e);

/* ---- writing: what the functions above read (`wds index`) ----
 * An index is the head, the entries, the tail. An entry's "samples" list is
 * built first (one sample at a time, into a memory stream, say), as its
 * count is only known at the end of the shard; the entry then writes its
 * keys (url, nsamples and filesize first, for people reading the file) and
 * that list. Names that are not UTF-8 are written with surrogateescape. */

/* {"wids_version": 1, "__kind__": "wds-shard-index", "name": NAME,
 *  "shardlist": [ */
void wds__index_write_head(FILE *out, const char *name);
/* One element of an entry's "samples": {"key": K, "fields": {EXT: [OFFSET,
 * SIZE], ...}}; first: the first of its list. With hashes, the sample also
 * gets "sha256": {EXT: HEX, ...}, each member's data's SHA-256 (readers
 * that predate it skip the key, as every unknown key). */
void wds__index_write_sample(FILE *out, int first, const wds_sample *s);
void wds__index_write_sample_hashed(FILE *out, int first, const wds_sample *s,
                                    int hashes);
/* One shardlist entry; samples[0..samples_len) is what write_sample wrote,
 * filesize -1 for none (null). first: the first entry of the list. */
void wds__index_write_entry(FILE *out, int first, const char *url,
                            uint64_t nsamples, int64_t filesize,
                            uint64_t tar_bytes, const char *samples,
                            size_t samples_len);
/* Closes the shardlist and the index object. */
void wds__index_write_tail(FILE *out);

#endif
