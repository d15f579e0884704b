/* index.c — reads and writes the shard-set index (format in index.h): the
 * one file that defines the format, both ways.
 *
 * Read with the strict JSON reader of base/json.h (recursive descent over
 * the text, nesting bounded; with surrogateescape, which is how the writer
 * below writes names that are not UTF-8). Values the index does not use
 * are validated and skipped, whatever their type, without allocating.
 *
 * Every error is WDS_ERR_FORMAT with "offset N: what" (N counted in bytes
 * from the start of the text); wds__index_load prefixes the file name.
 *
 * Lookups (the sorted permutations built here) are index_lookup.c's.
 *
 * Counts are untrusted (see index.h): an entry whose nsamples, "samples"
 * list and tar_bytes contradict each other is an error naming it, and
 * wds__index_check_count() (index_bounds.c) bounds a count by the shard
 * file's size.
 *
 * The per-sample detail ("samples": keys, [offset, size] per extension) is
 * kept only with WDS__INDEX_SAMPLES (tools: `wds ls --summary --index`);
 * the loader skips it, so its memory stays O(shards). The public handle
 * (wds/index.h) at the end of this file wraps the same reader. */
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/mem.h"
#include "base/url.h"
#include "shards/cache.h" /* wds__sha256(_hex): the one `wds ls --json` uses */
#include "shards/tar.h"

#define WDS__INDEX_MAX_BYTES WDS__JSON_MAX_BYTES /* 2 GiB of JSON */

/* Parses a non-negative integer value no larger than max; with allow_null,
 * `null` is accepted and sets *is_null. */
static int parse_count(wds__json *p, const char *name, uint64_t max,
                       int allow_null, uint64_t *out, int *is_null) {
  char msg[96];
  wds__json_ws(p);
  size_t at = p->pos;
  *is_null = 0;
  if (allow_null && wds__json_peek(p) == 'n') {
    *is_null = 1;
    *out = 0;
    return wds__json_literal(p, "null");
  }
  int is_uint = 0, c = wds__json_peek(p);
  uint64_t v = 0;
  if (c == '-' || (c >= '0' && c <= '9')) {
    int rc = wds__json_number(p, &is_uint, &v);
    if (rc != WDS_OK)
      return rc;
  }
  if (is_uint != 1 || v > max) {
    snprintf(msg, sizeof msg, "\"%s\" must be a non-negative integer%s", name,
             is_uint ? " (too large)" : "");
    return wds__json_fail(p, at, msg);
  }
  *out = v;
  return WDS_OK;
}

/* Parses one [OFFSET, SIZE] pair. */
static int parse_pair(wds__json *p, wds_index_field *f) {
  int rc, is_null;
  wds__json_ws(p);
  size_t at = p->pos;
  if (wds__json_peek(p) != '[')
    return wds__json_fail(p, at, "a field must be [offset, size]");
  p->pos++;
  if ((rc = parse_count(p, "offset", UINT64_MAX, 0, &f->offset, &is_null)) !=
          WDS_OK ||
      (rc = wds__json_expect(p, ',', "a field must be [offset, size]")) !=
          WDS_OK ||
      (rc = parse_count(p, "size", UINT64_MAX, 0, &f->size_bytes, &is_null)) !=
          WDS_OK ||
      (rc = wds__json_expect(p, ']', "a field must be [offset, size]")) !=
          WDS_OK)
    return rc;
  return WDS_OK;
}

static void free_sample(wds_index_sample *s) {
  for (size_t i = 0; i < s->field_count; i++)
    free((char *)s->fields[i].ext);
  free((wds_index_field *)s->fields);
  free((char *)s->key);
}

/* Opens an object as wds__json_open does, but an end of input where the
 * '{' should be fails as "unexpected end of input" (wds__json_expect), not
 * with `what`. *more = 0 for an empty object (its '}' consumed), else 1:
 * read a member, then wds__json_next(p, '}', more). */
static int open_object(wds__json *p, const char *what, int *more) {
  int rc = wds__json_expect(p, '{', what);
  if (rc != WDS_OK)
    return rc;
  *more = wds__json_peek(p) != '}';
  if (!*more)
    p->pos++;
  return WDS_OK;
}

/* Parses {"EXT": [OFFSET, SIZE], ...} into s->fields; an extension listed
 * twice is an error. */
static int parse_fields(wds__json *p, wds_index_sample *s) {
  size_t cap = 0;
  int rc, more;
  if ((rc = wds__json_open(p, '{', "\"fields\" must be an object", &more)) !=
      WDS_OK)
    return rc;
  while (more) {
    wds_index_field *grown = wds__grow((wds_index_field *)s->fields, &cap,
                                       s->field_count + 1, sizeof *grown, 4);
    if (!grown)
      return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
    s->fields = grown;
    wds_index_field *f = &grown[s->field_count];
    char *ext;
    wds__json_ws(p);
    size_t at = p->pos;
    if ((rc = wds__json_string_dup(p, "an extension", &ext, NULL)) != WDS_OK)
      return rc;
    f->ext = ext;
    s->field_count++;
    for (size_t i = 0; i + 1 < s->field_count; i++)
      if (strcmp(grown[i].ext, ext) == 0)
        return wds__json_fail(p, at, "extension listed twice in a sample");
    if ((rc = wds__json_expect(p, ':', "expected ':' after an object key")) !=
            WDS_OK ||
        (rc = parse_pair(p, f)) != WDS_OK)
      return rc;
    if ((rc = wds__json_next(p, '}', &more)) != WDS_OK)
      return rc;
  }
  return WDS_OK;
}

uint32_t wds__index_ext_hash(const char *ext) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *ext; ext++)
    h = (h ^ (uint8_t)*ext) * 16777619u;
  return h;
}

void wds__index_hashes_free(wds__index_hashes *h) {
  free(h->start);
  free(h->m);
  memset(h, 0, sizeof *h);
}

int wds__index_hash_check(const wds__index_hashes *h, uint64_t j,
                          const char *ext, const void *data, size_t size,
                          wds__err *e) {
  if (j >= h->count)
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "member \"%.100s\": the index records no sample %llu", ext,
                     (unsigned long long)j);
  uint32_t eh = wds__index_ext_hash(ext);
  for (uint64_t i = h->start[j]; i < h->start[j + 1]; i++) {
    if (h->m[i].ext_hash != eh)
      continue;
    uint8_t md[32];
    wds__sha256(data, size, md);
    if (memcmp(md, h->m[i].digest, sizeof h->m[i].digest) == 0)
      return WDS_OK;
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "member \"%.100s\": its data does not match the "
                     "index's sha256 (the data changed since `wds index "
                     "--hashes`)",
                     ext);
  }
  return wds__fail(e, WDS_ERR_CORRUPT,
                   "member \"%.100s\": the index records no sha256 for it",
                   ext);
}

static int hex_digit(int c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : -1;
}

/* Parses a sample's {"EXT": "HEX", ...} (64 lowercase hex digits each)
 * into h->m; an extension listed twice is an error. */
static int parse_hashes(wds__json *p, wds__index_hashes *h, size_t *cap) {
  int rc, more;
  size_t first = h->nm;
  if ((rc = wds__json_open(p, '{', "\"sha256\" must be an object", &more)) !=
      WDS_OK)
    return rc;
  while (more) {
    char ext[256], hex[80];
    size_t len;
    wds__json_ws(p);
    size_t at = p->pos;
    if ((rc = wds__json_string(p, ext, sizeof ext - 1, &len)) != WDS_OK)
      return rc;
    ext[len < sizeof ext ? len : sizeof ext - 1] = '\0';
    if (len >= sizeof ext || strlen(ext) != len)
      return wds__json_fail(p, at,
                            "a hashed extension is too long or has "
                            "a NUL");
    if ((rc = wds__json_expect(p, ':', "expected ':' after an object key")) !=
        WDS_OK)
      return rc;
    wds__json_ws(p);
    size_t hat = p->pos;
    if ((rc = wds__json_string(p, hex, sizeof hex - 1, &len)) != WDS_OK)
      return rc;
    wds__member_hash *grown =
        wds__grow(h->m, cap, h->nm + 1, sizeof *grown, 64);
    if (!grown)
      return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
    h->m = grown;
    wds__member_hash *m = &h->m[h->nm];
    if (len != 64)
      return wds__json_fail(p, hat, "a sha256 must be 64 hex digits");
    for (size_t i = 0; i < 32; i++) {
      int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
      if (hi < 0 || lo < 0)
        return wds__json_fail(p, hat,
                              "a sha256 must be 64 lowercase hex digits");
      if (i < sizeof m->digest)
        m->digest[i] = (uint8_t)(hi << 4 | lo);
    }
    m->ext_hash = wds__index_ext_hash(ext);
    for (size_t i = first; i < h->nm; i++)
      if (h->m[i].ext_hash == m->ext_hash)
        return wds__json_fail(p, at,
                              "extension hashed twice in a sample (or two "
                              "extensions with one 32-bit hash)");
    h->nm++;
    if ((rc = wds__json_next(p, '}', &more)) != WDS_OK)
      return rc;
  }
  return WDS_OK;
}

/* Parses {"key": K, "fields": {...}, "sha256": {...}} (other keys
 * skipped). s NULL: the loader's count-only parse, which keeps the hashes
 * alone (key and fields skipped). h NULL: "sha256" is skipped; else it is
 * appended to h (*hashed set when the sample had one). */
static int parse_sample(wds__json *p, wds_index_sample *s, int depth,
                        wds__index_hashes *h, size_t *hcap, int *hashed) {
  char key[16];
  size_t obj_at = p->pos;
  int rc, more, have_key = 0, have_fields = 0, have_hash = 0;
  *hashed = 0;
  if ((rc = open_object(p, "samples must be objects", &more)) != WDS_OK)
    return rc;
  while (more) {
    wds__json_ws(p);
    size_t key_at = p->pos;
    if ((rc = wds__json_key(p, key, sizeof key)) != WDS_OK)
      return rc;
    int *seen = strcmp(key, "key") == 0           ? &have_key
                : strcmp(key, "fields") == 0      ? &have_fields
                : strcmp(key, "sha256") == 0 && h ? &have_hash
                                                  : NULL;
    if (seen && *seen)
      return wds__json_fail(p, key_at, "duplicate key in a sample");
    if (seen)
      *seen = 1;
    if (!s && seen != &have_hash) {
      if ((rc = wds__json_skip(p, depth + 1)) != WDS_OK)
        return rc;
    } else if (seen == &have_hash) {
      *hashed = 1;
      if ((rc = parse_hashes(p, h, hcap)) != WDS_OK)
        return rc;
    } else if (seen == &have_key) {
      char *k;
      if ((rc = wds__json_string_dup(p, "\"key\"", &k, NULL)) != WDS_OK)
        return rc;
      s->key = k;
    } else if (seen == &have_fields) {
      if ((rc = parse_fields(p, s)) != WDS_OK)
        return rc;
    } else if ((rc = wds__json_skip(p, depth + 1)) != WDS_OK) {
      return rc;
    }
    if ((rc = wds__json_next(p, '}', &more)) != WDS_OK)
      return rc;
  }
  if (s && (!have_key || !have_fields))
    return wds__json_fail(p, obj_at,
                          have_key ? "a sample has no \"fields\""
                                   : "a sample has no \"key\"");
  return WDS_OK;
}

/* Parses the "samples" array of an entry: into ent->samples with
 * WDS__INDEX_SAMPLES, into ent->hashes with WDS__INDEX_HASHES; *count is
 * the number of entries. */
static int parse_samples(wds__json *p, wds__index_entry *ent, unsigned flags,
                         size_t *count, int depth) {
  size_t cap = 0, hcap = 0, scap = 0, nhashed = 0;
  int rc, more;
  int keep = (flags & WDS__INDEX_SAMPLES) != 0;
  wds__index_hashes *h = flags & WDS__INDEX_HASHES ? &ent->hashes : NULL;
  *count = 0;
  if ((rc = wds__json_open(p, '[', "\"samples\" must be an array", &more)) !=
      WDS_OK)
    return rc;
  if (keep)
    ent->has_samples = 1;
  while (more) {
    wds_index_sample *s = NULL;
    if (keep) {
      wds_index_sample *grown = wds__grow(
          ent->samples, &cap, ent->sample_count + 1, sizeof *grown, 64);
      if (!grown)
        return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
      ent->samples = grown;
      s = &ent->samples[ent->sample_count++];
      memset(s, 0, sizeof *s);
    }
    if (h) {
      uint64_t *grown =
          wds__grow(h->start, &scap, *count + 2, sizeof *grown, 64);
      if (!grown)
        return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
      h->start = grown;
      h->start[*count] = h->nm;
    }
    wds__json_ws(p);
    size_t at = p->pos;
    int hashed = 0;
    if (!keep && !h)
      rc = wds__json_skip(p, depth + 1);
    else
      rc = parse_sample(p, s, depth + 1, h, &hcap, &hashed);
    if (rc != WDS_OK)
      return rc;
    nhashed += hashed != 0;
    if (h && nhashed != 0 && nhashed != *count + 1)
      return wds__json_fail(p, at,
                            hashed ? "a sample has \"sha256\", but those "
                                     "before it have none"
                                   : "a sample has no \"sha256\", but those "
                                     "before it have one");
    (*count)++;
    if (h)
      h->start[*count] = h->nm;
    if ((rc = wds__json_next(p, ']', &more)) != WDS_OK)
      return rc;
  }
  if (h) {
    if (nhashed)
      h->count = *count;
    else
      wds__index_hashes_free(h);
  }
  return WDS_OK;
}

/* What an entry's tar_bytes (the decompressed tar stream's length, up to
 * and including its end-of-archive block) can hold: every sample starts
 * with a 512-byte header, so at most tar_bytes / 512 - 1 samples, and a
 * member's data (padded to 512 bytes) lies between its header at OFFSET
 * and that last block. */
static int check_tar_bytes(wds__json *p, size_t i, const wds__index_entry *ent,
                           size_t at) {
  char msg[900];
  if (ent->tar_bytes < 0)
    return WDS_OK;
  uint64_t tb = (uint64_t)ent->tar_bytes;
  uint64_t most = tb >= 1024 ? tb / 512 - 1 : 0;
  if (ent->nsamples > most) {
    snprintf(msg, sizeof msg,
             "shardlist[%zu] (\"%.200s\"): \"nsamples\" %llu is more than "
             "its \"tar_bytes\" %llu can hold (at most %llu: a sample takes "
             "a 512-byte header, and the stream ends with a 512-byte block)",
             i, ent->url, (unsigned long long)ent->nsamples,
             (unsigned long long)tb, (unsigned long long)most);
    return wds__json_fail(p, at, msg);
  }
  for (size_t j = 0; j < ent->sample_count; j++) {
    const wds_index_sample *s = &ent->samples[j];
    for (size_t k = 0; k < s->field_count; k++) {
      const wds_index_field *f = &s->fields[k];
      uint64_t padded = (f->size_bytes + 511) & ~(uint64_t)511;
      if (tb < 1024 || f->offset > tb - 1024 || f->size_bytes > tb ||
          padded > tb - 1024 - f->offset) {
        snprintf(msg, sizeof msg,
                 "shardlist[%zu] (\"%.200s\"): sample \"%.200s\" field "
                 "\"%.40s\" [%llu, %llu] does not fit in its \"tar_bytes\" "
                 "%llu",
                 i, ent->url, s->key, f->ext, (unsigned long long)f->offset,
                 (unsigned long long)f->size_bytes, (unsigned long long)tb);
        return wds__json_fail(p, at, msg);
      }
    }
  }
  return WDS_OK;
}

/* Parses one shardlist entry (an object at p->pos) into *ent. */
static int parse_entry(wds__json *p, size_t i, const char *dir, unsigned flags,
                       wds__index_entry *ent, int depth) {
  char msg[320], key[16];
  size_t obj_at = p->pos;
  int rc = WDS_OK, more, have_url = 0, have_n = 0, have_size = 0, have_tar = 0,
      have_samples = 0;
  size_t samples_at = 0, listed = 0;
  ent->filesize = -1;
  ent->tar_bytes = -1;
  if (depth > WDS__JSON_MAX_DEPTH)
    return wds__json_fail(p, obj_at, "nesting deeper than 64 levels");
  if ((rc = open_object(p, "shardlist entries must be objects", &more)) !=
      WDS_OK)
    return rc;
  while (more) {
    wds__json_ws(p);
    size_t key_at = p->pos;
    if ((rc = wds__json_key(p, key, sizeof key)) != WDS_OK)
      return rc;
    int *seen = strcmp(key, "url") == 0         ? &have_url
                : strcmp(key, "nsamples") == 0  ? &have_n
                : strcmp(key, "filesize") == 0  ? &have_size
                : strcmp(key, "tar_bytes") == 0 ? &have_tar
                : strcmp(key, "samples") == 0 &&
                        (flags & (WDS__INDEX_SAMPLES |
                                  WDS__INDEX_COUNT_SAMPLES | WDS__INDEX_HASHES))
                    ? &have_samples
                    : NULL;
    if (seen && *seen) {
      snprintf(msg, sizeof msg, "duplicate key \"%s\"", key);
      return wds__json_fail(p, key_at, msg);
    }
    if (seen)
      *seen = 1;
    if (seen == &have_url) {
      wds__json_ws(p);
      size_t at = p->pos, len;
      if ((rc = wds__json_string(p, NULL, 0, &len)) != WDS_OK)
        return rc;
      if (len == 0)
        return wds__json_fail(p, at, "\"url\" is empty");
      ent->url = malloc(len + 1);
      if (!ent->url)
        return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
      p->pos = at;
      if ((rc = wds__json_string(p, ent->url, len, &len)) != WDS_OK)
        return rc;
      ent->url[len] = '\0';
      if (strlen(ent->url) != len)
        return wds__json_fail(p, at, "\"url\" contains a NUL character");
      ent->path = wds__index_resolve(dir, ent->url);
      if (!ent->path)
        return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
    } else if (seen == &have_n) {
      int is_null;
      if ((rc = parse_count(p, "nsamples", UINT64_MAX, 0, &ent->nsamples,
                            &is_null)) != WDS_OK)
        return rc;
    } else if (seen == &have_size) {
      uint64_t v;
      int is_null;
      if ((rc = parse_count(p, "filesize", INT64_MAX, 1, &v, &is_null)) !=
          WDS_OK)
        return rc;
      ent->filesize = is_null ? -1 : (int64_t)v; /* null: unknown */
    } else if (seen == &have_tar) {
      uint64_t v;
      int is_null;
      if ((rc = parse_count(p, "tar_bytes", INT64_MAX, 1, &v, &is_null)) !=
          WDS_OK)
        return rc;
      ent->tar_bytes = is_null ? -1 : (int64_t)v;
    } else if (seen == &have_samples) {
      wds__json_ws(p);
      samples_at = p->pos;
      if ((rc = parse_samples(p, ent, flags, &listed, depth + 1)) != WDS_OK)
        return rc;
    } else if ((rc = wds__json_skip(p, depth + 1)) != WDS_OK) {
      return rc;
    }
    if ((rc = wds__json_next(p, '}', &more)) != WDS_OK)
      return rc;
  }
  if (!have_url || !have_n) {
    snprintf(msg, sizeof msg, "shardlist[%zu] has no \"%s\"", i,
             have_url ? "nsamples" : "url");
    return wds__json_fail(p, obj_at, msg);
  }
  if (have_samples && listed != ent->nsamples) {
    snprintf(msg, sizeof msg,
             "shardlist[%zu] (\"%.200s\") lists %zu samples but "
             "\"nsamples\" is %llu",
             i, ent->url, listed, (unsigned long long)ent->nsamples);
    return wds__json_fail(p, samples_at, msg);
  }
  return check_tar_bytes(p, i, ent, obj_at);
}

static int parse_shardlist(wds__json *p, const char *dir, unsigned flags,
                           wds__index *ix) {
  size_t cap = 0;
  int rc, more;
  if ((rc = wds__json_open(p, '[', "\"shardlist\" must be an array", &more)) !=
      WDS_OK)
    return rc;
  while (more) {
    wds__index_entry *grown =
        wds__grow(ix->shards, &cap, ix->count + 1, sizeof *grown, 64);
    if (!grown)
      return wds__fail(p->e, WDS_ERR_NOMEM, "out of memory");
    ix->shards = grown;
    wds__index_entry *ent = &ix->shards[ix->count++];
    memset(ent, 0, sizeof *ent);
    wds__json_ws(p);
    if ((rc = parse_entry(p, ix->count - 1, dir, flags, ent, 3)) != WDS_OK)
      return rc;
    if ((rc = wds__json_next(p, ']', &more)) != WDS_OK)
      return rc;
  }
  return WDS_OK;
}

int wds__index_parse(const char *text, size_t size, const char *dir,
                     wds__index *out, wds__err *e) {
  return wds__index_parse_flags(text, size, dir, 0, out, e);
}

int wds__index_parse_flags(const char *text, size_t size, const char *dir,
                           unsigned flags, wds__index *out, wds__err *e) {
  wds__index ix = {0};
  wds__json p;
  int rc = WDS_OK, more, have_list = 0;
  char key[16];
  memset(out, 0, sizeof *out);
  if (!text && size)
    return wds__fail(e, WDS_ERR_INVALID, "NULL index text");
  if (!dir)
    dir = "";
  wds__json_init(&p, text, size, WDS__JSON_SURROGATEESCAPE, e);
  if ((rc = open_object(&p, "the index must be a JSON object", &more)) !=
      WDS_OK)
    goto done;
  while (more) {
    wds__json_ws(&p);
    size_t key_at = p.pos;
    if ((rc = wds__json_key(&p, key, sizeof key)) != WDS_OK)
      goto done;
    if (strcmp(key, "shardlist") == 0) {
      if (have_list) {
        rc = wds__json_fail(&p, key_at, "duplicate key \"shardlist\"");
        goto done;
      }
      have_list = 1;
      rc = parse_shardlist(&p, dir, flags, &ix);
    } else {
      rc = wds__json_skip(&p, 2);
    }
    if (rc != WDS_OK)
      goto done;
    if ((rc = wds__json_next(&p, '}', &more)) != WDS_OK)
      goto done;
  }
  if ((rc = wds__json_end(&p, "the index object")) != WDS_OK)
    goto done;
  if (!have_list) {
    rc = wds__fail(e, WDS_ERR_FORMAT, "no \"shardlist\" in the index");
    goto done;
  }
  if ((rc = wds__index_sort(&ix, 0, &ix.by_url_, e)) != WDS_OK ||
      (rc = wds__index_sort(&ix, 1, &ix.by_path_, e)) != WDS_OK)
    goto done;
  *out = ix;
  return WDS_OK;
done:
  wds__index_free(&ix);
  return rc;
}

int wds__index_load(const char *path, wds__index *out, wds__err *e) {
  return wds__index_load_flags(path, 0, out, e);
}

int wds__index_load_flags(const char *path, unsigned flags, wds__index *out,
                          wds__err *e) {
  int rc = WDS_OK, fd = -1;
  char *text = NULL, *dir = NULL;
  memset(out, 0, sizeof *out);
  /* O_NONBLOCK: a FIFO without a writer would block open(2) for good; it
   * is refused below, as anything that is not a regular file is. */
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    rc = wds__fail(e, WDS_ERR_OPEN, "%s: cannot open the index: %s", path,
                   strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    rc =
        wds__fail(e, WDS_ERR_OPEN, "%s: the index is not a regular file", path);
    goto done;
  }
  if ((uint64_t)st.st_size > WDS__INDEX_MAX_BYTES) {
    rc = wds__fail(e, WDS_ERR_LIMIT, "%s: the index is over %zu bytes", path,
                   WDS__INDEX_MAX_BYTES);
    goto done;
  }
  size_t size = (size_t)st.st_size, got = 0;
  text = malloc(size ? size : 1);
  const char *slash = strrchr(path, '/');
  size_t dn = slash ? (size_t)(slash - path) : 0;
  dir = malloc(dn + 2);
  if (!text || !dir) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  memcpy(dir, path, dn);
  if (slash && dn == 0)
    dir[dn++] = '/'; /* "/index.json" */
  dir[dn] = '\0';
  while (got < size) {
    ssize_t n = read(fd, text + got, size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      rc = wds__fail(e, WDS_ERR_IO, "%s: cannot read the index: %s", path,
                     strerror(errno));
      goto done;
    }
    if (n == 0)
      break; /* shrank while reading: parse what is there */
    got += (size_t)n;
  }
  rc = wds__index_parse_flags(text, got, dir, flags, out, e);
  for (size_t i = 0; rc == WDS_OK && i < out->count; i++)
    if (!(flags & WDS_INDEX_ALLOW_PIPE_FROM_FILES) &&
        strncmp(out->shards[i].url, "pipe:", 5) == 0) {
      rc = wds__fail(e, WDS_ERR_FORMAT,
                     "shardlist entry %zu: " WDS__PIPE_FROM_FILE_REFUSED, i + 1,
                     wds__url_redact(out->shards[i].url, (char[300]){0}, 300));
      wds__index_free(out);
    }
  if (rc != WDS_OK)
    wds__err_prefix(e, "%s", path);
  else
    out->dir_real_ = realpath(dir[0] ? dir : ".", NULL); /* NULL: unused */
done:
  if (fd >= 0)
    close(fd);
  free(text);
  free(dir);
  return rc;
}

void wds__index_free(wds__index *ix) {
  if (!ix)
    return;
  for (size_t i = 0; i < ix->count; i++) {
    free(ix->shards[i].url);
    free(ix->shards[i].path);
    for (size_t j = 0; j < ix->shards[i].sample_count; j++)
      free_sample(&ix->shards[i].samples[j]);
    free(ix->shards[i].samples);
    wds__index_hashes_free(&ix->shards[i].hashes);
  }
  free(ix->shards);
  free(ix->by_url_);
  free(ix->by_path_);
  free(ix->dir_real_);
  memset(ix, 0, sizeof *ix);
}

/* ---- writing (the format above, the other way) ----------------------- */

void wds__index_write_head(FILE *out, const char *name) {
  fputs("{\"wids_version\": 1, \"__kind__\": \"wds-shard-index\", "
        "\"name\": ",
        out);
  wds__json_write_string(out, name, strlen(name));
  fputs(", \"shardlist\": [\n", out);
}

void wds__index_write_sample(FILE *out, int first, const wds_sample *s) {
  wds__index_write_sample_hashed(out, first, s, 0);
}

void wds__index_write_sample_hashed(FILE *out, int first, const wds_sample *s,
                                    int hashes) {
  fputs(first ? "\n  {\"key\": " : ",\n  {\"key\": ", out);
  wds__json_write_string(out, s->key, strlen(s->key));
  fputs(", \"fields\": {", out);
  for (size_t i = 0; i < s->field_count; i++) {
    const wds_field *f = &s->fields[i];
    fputs(i ? ", " : "", out);
    wds__json_write_string(out, f->ext, strlen(f->ext));
    fprintf(out, ": [%" PRIu64 ", %zu]", f->offset, f->size_bytes);
  }
  if (hashes) {
    fputs("}, \"sha256\": {", out);
    for (size_t i = 0; i < s->field_count; i++) {
      const wds_field *f = &s->fields[i];
      char hex[65];
      wds__sha256_hex(f->data, f->size_bytes, hex);
      fputs(i ? ", " : "", out);
      wds__json_write_string(out, f->ext, strlen(f->ext));
      fprintf(out, ": \"%s\"", hex);
    }
  }
  fputs("}}", out);
}

void wds__index_write_entry(FILE *out, int first, const char *url,
                            uint64_t nsamples, int64_t filesize,
                            uint64_t tar_bytes, const char *samples,
                            size_t samples_len) {
  if (!first)
    fputs(",\n", out);
  fputs("{\"url\": ", out);
  wds__json_write_string(out, url, strlen(url));
  fprintf(out, ", \"nsamples\": %" PRIu64 ", \"filesize\": ", nsamples);
  wds__json_write_i64_or_null(out, filesize);
  fprintf(out, ", \"tar_bytes\": %" PRIu64 ", \"samples\": [", tar_bytes);
  fwrite(samples, 1, samples_len, out);
  fputs("]}", out);
}

void wds__index_write_tail(FILE *out) { fputs("\n]}\n", out); }

/* ---- the public API (wds/index.h): a handle around wds__index ---------- */

struct wds_index {
  wds__index ix;
};

int wds_index_load(const char *path, unsigned flags, wds_index **out) {
  wds__err e;
  int rc;
  if (!out)
    return wds__last_fail(WDS_ERR_INVALID, "wds_index_load: out is NULL");
  *out = NULL;
  if (!path)
    return wds__last_fail(WDS_ERR_INVALID, "wds_index_load: path is NULL");
  if (flags & ~(WDS_INDEX_SAMPLES | WDS_INDEX_ALLOW_PIPE_FROM_FILES))
    return wds__last_fail(WDS_ERR_INVALID, "wds_index_load: unknown flags 0x%x",
                          flags);
  wds_index *h = calloc(1, sizeof *h);
  if (!h)
    return wds__last_fail(WDS_ERR_NOMEM, "out of memory");
  e.msg[0] = '\0';
  if ((rc = wds__index_load_flags(path, flags, &h->ix, &e)) != WDS_OK) {
    free(h);
    return wds__last_fail(rc, "%s", e.msg);
  }
  *out = h;
  return WDS_OK;
}

size_t wds_index_shard_count(const wds_index *ix) {
  return ix ? ix->ix.count : 0;
}

int wds_index_shard_info(const wds_index *ix, size_t i, wds_index_shard *out) {
  if (!ix || !out)
    return wds__last_fail(WDS_ERR_INVALID, "wds_index_shard_info: %s is NULL",
                          ix ? "out" : "the index");
  if (i >= ix->ix.count)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_index_shard_info: shard %zu of an index of %zu",
                          i, ix->ix.count);
  const wds__index_entry *ent = &ix->ix.shards[i];
  out->url = ent->url;
  out->path = ent->path;
  out->nsamples = ent->nsamples;
  out->filesize = ent->filesize;
  out->tar_bytes = ent->tar_bytes;
  out->has_samples = ent->has_samples;
  out->sample_count = ent->sample_count;
  out->samples = ent->has_samples ? ent->samples : NULL;
  return WDS_OK;
}

int wds_index_lookup(const wds_index *ix, const char *url, size_t *shard) {
  if (!ix || !shard)
    return wds__last_fail(WDS_ERR_INVALID, "wds_index_lookup: NULL %s",
                          ix ? "shard" : "index");
  wds__err e = {{0}}; /* the handle stays read-only: threads may share it */
  return wds__last_set(wds__index_find(&ix->ix, url, shard, &e), e.msg);
}

void wds_index_close(wds_index *ix) {
  if (!ix)
    return;
  wds__index_free(&ix->ix);
  free(ix);
}
