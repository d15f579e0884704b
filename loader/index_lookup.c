/* index_lookup.c — where a shard URL is in an index: the resolved-path
 * rule, the sorted permutations, lookups, and the relative url `wds index
 * -o` records (see index.h). The format itself, read and written, is
 * index.c's.
 *
 * Lookups binary-search two sorted permutations of the entries (by url and
 * by resolved path), so opening a loader on n shards costs O(n log n). */
#include "index.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/url.h"

/* dir + "/" + path, lexically normalised: repeated '/' and "." components
 * removed ("..": kept, as it depends on symlinks). Malloc'd. */
static char *join_normalize(const char *dir, const char *path) {
  size_t dn = dir ? strlen(dir) : 0, pn = strlen(path);
  char *in = malloc(dn + pn + 2), *out = malloc(dn + pn + 3);
  if (!in || !out) {
    free(in);
    free(out);
    return NULL;
  }
  size_t n = 0;
  if (dn && path[0] != '/') {
    memcpy(in, dir, dn);
    in[dn] = '/';
    n = dn + 1;
  }
  memcpy(in + n, path, pn + 1);
  size_t o = 0;
  if (in[0] == '/')
    out[o++] = '/';
  for (size_t i = 0; in[i];) {
    while (in[i] == '/')
      i++;
    size_t j = i;
    while (in[j] && in[j] != '/')
      j++;
    if (j == i)
      break;
    if (!(j - i == 1 && in[i] == '.')) {
      if (o && out[o - 1] != '/')
        out[o++] = '/';
      memcpy(out + o, in + i, j - i);
      o += j - i;
    }
    i = j;
  }
  if (o == 0)
    out[o++] = '.';
  out[o] = '\0';
  free(in);
  return out;
}

char *wds__index_resolve(const char *dir, const char *url) {
  const char *lp = wds__url_local_path(url);
  if (!lp) {
    /* remote, pipe: (base/url.h), its secrets as *** (wds index writes
     * them so): the same entry for any credentials */
    char *red = wds__url_redacted(url);
    char *id = red ? wds__url_identity(red) : NULL;
    free(red);
    return id;
  }
  return join_normalize(lp == url ? dir : NULL, lp);
}

/* (key, entry) pairs: qsort has no context argument, and a global would not
 * be thread-safe. Ties break by entry number so the order is total. */
typedef struct keyed {
  const char *key;
  size_t index;
} keyed;

static int keyed_cmp(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c)
    return c;
  return x->index < y->index ? -1 : x->index > y->index;
}

int wds__index_sort(wds__index *ix, int by_path, size_t **perm, wds__err *e) {
  int rc = WDS_OK;
  keyed *k = malloc((ix->count ? ix->count : 1) * sizeof *k);
  *perm = malloc((ix->count ? ix->count : 1) * sizeof **perm);
  if (!k || !*perm) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < ix->count; i++) {
    k[i].key = by_path ? ix->shards[i].path : ix->shards[i].url;
    k[i].index = i;
  }
  qsort(k, ix->count, sizeof *k, keyed_cmp);
  for (size_t i = 0; i < ix->count; i++) {
    (*perm)[i] = k[i].index;
    if (i && strcmp(k[i].key, k[i - 1].key) == 0) {
      const wds__index_entry *a = &ix->shards[k[i - 1].index],
                             *b = &ix->shards[k[i].index];
      char ra[WDS__URL_REDACT_MAX], rb[WDS__URL_REDACT_MAX],
          rp[WDS__URL_REDACT_MAX];
      if (by_path)
        rc = wds__fail(e, WDS_ERR_FORMAT,
                       "shardlist[%zu] (\"%s\") and shardlist[%zu] (\"%s\") "
                       "are the same file \"%s\"",
                       k[i - 1].index, wds__url_redact(a->url, ra, sizeof ra),
                       k[i].index, wds__url_redact(b->url, rb, sizeof rb),
                       wds__url_redact(a->path, rp, sizeof rp));
      else
        rc = wds__fail(e, WDS_ERR_FORMAT,
                       "duplicate url \"%s\" in shardlist[%zu] and "
                       "shardlist[%zu]",
                       wds__url_redact(a->url, ra, sizeof ra), k[i - 1].index,
                       k[i].index);
      goto done;
    }
  }
done:
  free(k);
  return rc;
}

/* The path of target relative to directory dir, both canonical (from
 * realpath): "a.tar", "sub/a.tar", "../a.tar". Malloc'd; NULL when out of
 * memory. The inverse of resolving a url against the index's directory,
 * and what `wds index -o` writes. */
static char *relative_to(const char *dir, const char *target) {
  size_t common = 0;
  for (size_t i = 0;; i++) {
    int dend = dir[i] == '\0' || dir[i] == '/';
    int tend = target[i] == '\0' || target[i] == '/';
    if (dend && tend)
      common = i;
    if (dir[i] != target[i] || dir[i] == '\0')
      break;
  }
  if (strcmp(dir, "/") == 0)
    common = 0;
  size_t ups = 0;
  for (const char *p = dir + common; *p; p++)
    if (*p == '/' && p[1] != '\0')
      ups++;
  const char *rest = target + common;
  while (*rest == '/')
    rest++;
  char *out = malloc(ups * 3 + strlen(rest) + 2);
  if (!out)
    return NULL;
  for (size_t k = 0; k < ups; k++)
    memcpy(out + 3 * k, "../", 3);
  strcpy(out + 3 * ups, rest);
  if (out[0] == '\0')
    strcpy(out, ".");
  return out;
}

const char *wds_index_local_path(const char *url) {
  return wds__url_local_path(url);
}

static char *url_for(const char *url, const char *index_dir_real) {
  char *fetched = wds__url_pipe_source(url);
  if (fetched) { /* the URL, not a command to run (base/url.h) */
    char *red = wds__url_redacted(fetched);
    free(fetched);
    return red;
  }
  const char *lp = wds__url_local_path(url);
  if (!lp)
    return wds__url_redacted(url); /* no secrets in an index */
  if (!index_dir_real)
    return strdup(url);
  char *real = realpath(lp, NULL);
  if (!real)
    return strdup(url); /* reported when the shard is read */
  char *rel = relative_to(index_dir_real, real);
  free(real);
  return rel;
}

char *wds_index_url_for(const char *url, const char *index_dir_real) {
  char *r = url ? url_for(url, index_dir_real) : NULL;
  if (!r)
    wds__last_fail(url ? WDS_ERR_NOMEM : WDS_ERR_INVALID,
                   "wds_index_url_for: %s",
                   url ? "out of memory" : "the URL is NULL");
  return r;
}

/* Binary search of perm (sorted by url or path) for key; -1 if absent. */
static long find(const wds__index *ix, const size_t *perm, int by_path,
                 const char *key) {
  size_t lo = 0, hi = ix->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const wds__index_entry *m = &ix->shards[perm[mid]];
    int c = strcmp(key, by_path ? m->path : m->url);
    if (c == 0)
      return (long)perm[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return -1;
}

int wds__index_lookup(const wds__index *ix, const char *url, uint64_t *nsamples,
                      wds__err *e) {
  size_t i;
  int rc = wds__index_find(ix, url, &i, e);
  if (rc == WDS_OK)
    *nsamples = ix->shards[i].nsamples;
  return rc;
}

int wds__index_find(const wds__index *ix, const char *url, size_t *entry,
                    wds__err *e) {
  long i = -1;
  if (!ix || !url)
    return wds__fail(e, WDS_ERR_INVALID, "NULL index or url");
  if (ix->count && ix->by_url_)
    i = find(ix, ix->by_url_, 0, url);
  if (i < 0 && ix->count && ix->by_path_) {
    char *norm = wds__index_resolve(NULL, url);
    if (!norm)
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    i = find(ix, ix->by_path_, 1, norm);
    free(norm);
  }
  if (i < 0 && ix->count && ix->by_url_ && ix->dir_real_ &&
      wds__url_local_path(url)) {
    /* what `wds index -o` recorded for this file */
    char *rel = url_for(url, ix->dir_real_);
    if (rel)
      i = find(ix, ix->by_url_, 0, rel);
    free(rel);
  }
  if (i < 0)
    return wds__fail(e, WDS_ERR_INVALID, "%s: not in the index",
                     wds__url_redact(url, (char[WDS__URL_REDACT_MAX]){0},
                                     WDS__URL_REDACT_MAX));
  const wds__index_entry *ent = &ix->shards[i];
  const char *lp = wds__url_local_path(url);
  struct stat st;
  /* A file that cannot be stat'ed is reported when the loader opens it. */
  if (ent->filesize >= 0 && lp && stat(lp, &st) == 0 && S_ISREG(st.st_mode) &&
      (int64_t)st.st_size != ent->filesize)
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "%s: stale index: the shard was %" PRId64
                     " bytes, is %" PRId64 " (re-run wds index)",
                     url, ent->filesize, (int64_t)st.st_size);
  *entry = (size_t)i;
  return WDS_OK;
}
