/* feed.c — a worker's sample feed: the raw samples its shuffle buffer
 * takes, in the order its plan gives.
 *
 * Plain and exact mode: the worker's pieces (shard, first sample, end) in
 * plan order; samples before a piece's first are read and dropped (tar has
 * no index). Resampled mode: shards drawn with replacement from the
 * worker's RNG, each read to its end. A sample is taken from the reader
 * with only the fields some output wants (raw_copy): the reader skips the
 * other fields' data unread and reads large fields straight into blocks
 * of their own (feed_sink, the reader's sink), so their bytes are copied
 * once (by the kernel) before the slot; small fields are copied out of the
 * reader's window into the sample's block. Samples read only to be
 * dropped have all their data skipped. With defer_reads, a local
 * uncompressed shard's large fields are not read at all here: the raw
 * sample holds the shard's file handle and their offsets (defer.c), and
 * the worker reads them when the sample leaves the shuffle buffer.
 *
 * Exact mode keeps its promises: a shard that ends before its count, or
 * cannot be opened, leaves "holes" (fill samples, invalid rows) for what
 * it owed, so every rank still yields the same number of rows; a shard
 * with more samples than its count is an error found at its counted end.
 * Read errors go through read_error: under the stop policy (or a cancel)
 * the worker stops with an error item; under skip they are counted and the
 * feed goes on.
 *
 * A feed sees the loader through wds__feed_ctx only (set at open,
 * read-only; its one write, a skip, goes through ctx->skip) and its worker
 * through wds__feed_worker; it writes nothing but itself. */
#include <stdio.h>

#include "loader/internal.h"
#include "pipeline/reader_internal.h"
#include "shards/stream.h"

static int wanted_ext(const wds__feed_ctx *c, const char *ext) {
  for (size_t i = 0; i < c->nwanted; i++)
    if (c->wanted[i][0] == ext[0] && strcmp(c->wanted[i], ext) == 0)
      return 1;
  return 0;
}

/* Fields at least this large are read by the reader straight into a block
 * of their own (feed_sink), smaller ones are copied out of its window into
 * the sample's block. */
#define FEED_INTO_BYTES ((uint64_t)16 << 10)

/* Reclaims the blocks handed to the reader for a sample it did not return
 * (an error dropped it). */
static void into_reset(wds__feed *src) {
  for (size_t i = 0; i < src->ninto; i++)
    wds__blk_free(src->into[i]);
  src->ninto = 0;
  src->into_failed = 0;
  src->ndoff = 0;
}

/* The shard has member hashes (an index made with `wds index --hashes`):
 * its kept fields are read here, never deferred, and checked (check_hashes)
 * before the sample enters the shuffle buffer. */
static int hashed(const wds__feed *src) {
  return src->ctx->hashes && src->ctx->hashes[src->shard].count;
}

/* The reader's sink while the feed reads samples it keeps, for fields of
 * FEED_INTO_BYTES or more (smaller ones stay in the window, the cheapest
 * way to read them; raw_copy drops those no output wants): straight into
 * a block, or skipped unread if no output wants them. */
static int feed_sink(void *ctx, const char *ext, uint64_t size, void **dst) {
  wds__feed *src = ctx;
  const wds__feed_worker *w = &src->w;
  if (!wanted_ext(src->ctx, ext))
    return WDS__SINK_SKIP;
  if (src->defer < 0 && hashed(src)) /* its bytes are checked here */
    src->defer = 0;
  if (src->defer < 0) { /* the shard's first large field: decide */
    src->fh = wds__fh_open(wds__reader_shard_fd(src->rd),
                           wds__reader_shard_is_cache_entry(src->rd),
                           src->ctx->cfg->defer_reads, w->pool);
    src->defer = src->fh != NULL;
  }
  uint64_t off = src->defer ? wds__reader_data_offset(src->rd) : 0;
  if (src->defer && wds__fh_defers(src->fh, off, size)) {
    if (src->ndoff == src->doff_cap) {
      size_t c = src->doff_cap ? 2 * src->doff_cap : 8;
      uint64_t *nv = realloc(src->doff, c * sizeof *nv);
      if (!nv) {
        src->into_failed = 1;
        return WDS_ERR_NOMEM;
      }
      src->doff = nv;
      src->doff_cap = c;
    }
    src->doff[src->ndoff++] = off;
    return WDS__SINK_DEFER;
  }
  if (src->ninto == src->into_cap) {
    size_t c = src->into_cap ? 2 * src->into_cap : 8;
    void **nv = realloc(src->into, c * sizeof *nv);
    if (!nv) {
      src->into_failed = 1;
      return WDS_ERR_NOMEM;
    }
    src->into = nv;
    src->into_cap = c;
  }
  int fresh = 1;
  void *b = wds__blk_alloc_read(w->pool, w->index, (size_t)size, &fresh);
  if (!b) {
    src->into_failed = 1;
    return WDS_ERR_NOMEM;
  }
  src->into[src->ninto++] = b;
  *dst = b;
  /* A recycled block was written by its last use (a read into it that
   * failed frees it instead, into_reset): its pages are made, and
   * populating them again per sample was the steady state's cost. */
  return fresh ? WDS__SINK_INTO : WDS__SINK_INTO_MADE;
}

/* The sink while samples are read only to be dropped (before a piece's
 * first sample, past an exact count): no data is read at all. */
static int skip_sink(void *ctx, const char *ext, uint64_t size, void **dst) {
  (void)ctx;
  (void)ext;
  (void)size;
  (void)dst;
  return WDS__SINK_SKIP;
}

/* Whether raw_copy keeps field f: read (not skipped) or deferred, and
 * wanted. While the shard defers, a wanted field without data is one the
 * sink deferred (it skips only unwanted ones). */
static int keep_field(const wds__feed *src, const wds_field *f) {
  return (f->data || !f->size_bytes || src->defer > 0) &&
         wanted_ext(src->ctx, f->ext);
}

/* Fields whose keep flag and extension length raw_copy's first pass
 * remembers for its second (the rest are worked out again). */
#define RAW_KNOWN 64

/* The raw sample of s: one block for the key, extensions and small fields'
 * data; the large fields' blocks (src->into, which the reader filled) are
 * taken over as they are. */
static wds__raw_sample *raw_copy(wds__feed *src, const wds_sample *s) {
  size_t klen = strlen(s->key) + 1;
  size_t n = 0, bytes = klen, data = 0, k = 0, all = 1;
  uint64_t keep = 0; /* field i < RAW_KNOWN is kept */
  size_t elens[RAW_KNOWN];
  for (size_t i = 0; i < s->field_count; i++) {
    const wds_field *f = &s->fields[i];
    size_t elen = strlen(f->ext);
    all += elen + 2; /* all_exts: skipped fields are listed too */
    if (i < RAW_KNOWN)
      elens[i] = elen;
    if (!keep_field(src, f))
      continue;
    if (i < RAW_KNOWN)
      keep |= (uint64_t)1 << i;
    n++;
    bytes += elen + 1;
    if (k < src->ninto && (const void *)f->data == src->into[k])
      k++;
    else if (f->data || !f->size_bytes)
      bytes += f->size_bytes;
    data += f->size_bytes; /* deferred too: the shuffle buffer's bound */
  }
  bytes += all;
  size_t head = sizeof(wds__raw_sample) + n * sizeof(wds__raw_field);
  wds__raw_sample *r = wds__blk_alloc(src->w.pool, src->w.index, head + bytes);
  if (!r)
    return NULL;
  char *p = (char *)r + head;
  r->shard = src->shard;
  r->hole = 0;
  r->pad = 0;
  r->data_bytes = data;
  r->nfields = n;
  r->f = (wds__raw_field *)(r + 1);
  memcpy(p, s->key, klen);
  r->key = p;
  p += klen;
  r->all_exts = p;
  for (size_t i = 0; i < s->field_count; i++) {
    size_t elen = i < RAW_KNOWN ? elens[i] : strlen(s->fields[i].ext);
    if (i) {
      memcpy(p, ", ", 2);
      p += 2;
    }
    memcpy(p, s->fields[i].ext, elen);
    p += elen;
  }
  *p++ = '\0';
  size_t j = 0, d = 0;
  k = 0;
  for (size_t i = 0; i < s->field_count; i++) {
    const wds_field *f = &s->fields[i];
    if (i < RAW_KNOWN ? !(keep >> i & 1) : !keep_field(src, f))
      continue;
    size_t elen = (i < RAW_KNOWN ? elens[i] : strlen(f->ext)) + 1;
    memcpy(p, f->ext, elen);
    r->f[j].ext = p;
    p += elen;
    r->f[j].size = f->size_bytes;
    r->f[j].fh = NULL;
    if (!f->data && f->size_bytes) { /* deferred (keep_field) */
      r->f[j].data = NULL;
      r->f[j].blk = NULL;
      r->f[j].off = d < src->ndoff ? src->doff[d] : 0;
      d++;
      r->f[j].fh = src->fh;
      atomic_fetch_add(&src->fh->refs, 1);
    } else if (k < src->ninto && (const void *)f->data == src->into[k]) {
      r->f[j].data = f->data;
      r->f[j].blk = src->into[k++];
    } else {
      if (f->size_bytes)
        memcpy(p, f->data, f->size_bytes);
      r->f[j].data = (const uint8_t *)p;
      r->f[j].blk = NULL;
      p += f->size_bytes;
    }
    j++;
  }
  src->ninto = 0; /* the sample owns them now */
  src->ndoff = 0;
  return r;
}

/* Reports a read error: returns 1 if the worker must stop (stop policy),
 * after putting an error item in *fatal. */
static int read_error(wds__feed *src, int status, const char *msg,
                      wds__item **fatal) {
  const wds__feed_ctx *c = src->ctx;
  if (c->cfg->on_error == WDS_ON_ERROR_STOP || status == WDS_ERR_CANCELLED) {
    *fatal = wds__error_item(c->nfields, status, msg);
    return 1;
  }
  snprintf(src->last_err, sizeof src->last_err, "%s", msg);
  c->skip(c->skip_ctx, "skipped", msg);
  return 0;
}

static void feed_close_reader(wds__feed *src) {
  if (src->rd) {
    wds_reader_stats st;
    wds_reader_stats_get(src->rd, &st);
    src->unverified += st.unverified_samples;
    wds_reader_close(src->rd);
    src->rd = NULL;
  }
  wds__fh_scan_done(src->fh);
  wds__fh_put(src->fh); /* deferred fields hold their own references */
  src->fh = NULL;
  src->defer = -1;
}

int wds__open_shard_reader(const wds__shard_opener *o, size_t shard,
                           wds_reader **out, wds__err *e) {
  const wds_loader_config *cfg = o->cfg;
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  const char *url = o->sources->urls.urls[shard];
  rc.urls = &url;
  rc.url_count = 1;
  rc.max_sample_bytes = cfg->max_sample_bytes;
  rc.buffer_size_bytes = cfg->read_buffer_bytes;
  rc.read_timeout_ms = cfg->read_timeout_ms;
  rc.max_window_bytes = cfg->max_window_bytes;
  rc.max_unverified_bytes = cfg->max_unverified_bytes;
  rc.retries = cfg->retries;
  rc.cache_dir = cfg->cache_dir;
  rc.cache_size = cfg->cache_size;
  int st = wds__reader_open(&rc, o->wake, out, e);
  if (st == WDS_OK) {
    wds__reader_set_cache_stats(*out, o->cache_stats);
    /* A compressed shard's reading thread pays only where a CPU is spare
     * for each worker's: the stream's own rule counts the streams open,
     * which at the start of an epoch is one, so with 2 workers on 2 CPUs
     * the first would get a thread that then competes with the second
     * worker (bench-zst.sh: 0.93 and 0.98 of before, without 1.00 and
     * 1.12). */
    if (wds__cpu_count() < 2 * o->workers)
      wds__reader_set_read_thread(*out, -1);
  }
  return st;
}

static int feed_open(wds__feed *src, size_t shard, uint64_t begin, uint64_t end,
                     wds__item **fatal) {
  const wds__feed_ctx *c = src->ctx;
  src->shard = shard;
  src->got = 0;
  src->want = end == WDS__TO_END ? WDS__TO_END : end - begin;
  src->begin = begin;
  src->before = 0;
  src->failed = 0;
  src->defer = -1;
  src->to_end = c->counts && end != WDS__TO_END && end == c->counts[shard];
  src->pad = 0; /* the caller sets the piece's */
  src->shards++;
  wds__err e;
  if (wds__open_shard_reader(c->opener, shard, &src->rd, &e) != WDS_OK) {
    src->rd = NULL;
    return read_error(src, WDS_ERR_OPEN, e.msg, fatal) ? -1 : 0;
  }
  /* Samples before the piece are read and dropped (tar has no index),
   * their data skipped unread. */
  wds__reader_set_sink(src->rd, skip_sink, NULL, 0);
  for (; src->before < begin && !atomic_load(src->w.abort);) {
    const wds_sample *s;
    int st = wds__reader_next(src->rd, &s);
    if (st == WDS_OK) {
      src->before++;
      continue;
    }
    if (st == WDS_EOF)
      break;
    if (read_error(src, st, wds__reader_error(src->rd), fatal))
      return -1;
    if (st != WDS_ERR_DUPLICATE) { /* the duplicate was not a sample */
      src->failed = 1;
      break;
    }
  }
  return 0;
}

/* Exact mode, at the counted end of a shard: one more sample means the count
 * is wrong, and samples would silently go unread. */
static int feed_check_end(wds__feed *src, wds__item **fatal) {
  const wds__feed_ctx *c = src->ctx;
  const wds_sample *s;
  wds__reader_set_sink(src->rd, skip_sink, NULL, 0);
  int st = wds__reader_next(src->rd, &s);
  if (st == WDS_EOF)
    return 0;
  char msg[WDS__ERR_SIZE], from[320];
  if (st == WDS_OK) {
    /* The true count, for the message: read on to the end (this shard's
     * later samples are dropped either way). */
    char key[101];
    snprintf(key, sizeof key, "%s", s->key);
    uint64_t n = c->counts[src->shard] + 1;
    int more = WDS_OK;
    while (!atomic_load(src->w.abort) &&
           (more = wds__reader_next(src->rd, &s)) != WDS_EOF) {
      if (more == WDS_OK)
        n++;
      else if (more != WDS_ERR_DUPLICATE)
        break;
    }
    snprintf(msg, sizeof msg,
             "%.500s: has more samples than the %llu %s gives (%s%llu); "
             "sample \"%s\" and later are not read",
             c->sources->urls.urls[src->shard],
             (unsigned long long)c->counts[src->shard],
             wds__count_source(c->sources, src->shard, from, sizeof from),
             more == WDS_EOF ? "" : "at least ", (unsigned long long)n, key);
  } else
    snprintf(msg, sizeof msg, "%s", wds__reader_error(src->rd));
  return read_error(src, st == WDS_OK ? WDS_ERR_CORRUPT : st, msg, fatal) ? -1
                                                                          : 0;
}

/* Checks each kept field of r, the shard's sample j, against the index's
 * hashes. 0 when they match (or the shard has none); else -1 with the
 * message (shard, key, member) in msg. */
static int check_hashes(const wds__feed *src, const wds__raw_sample *r,
                        uint64_t j, char *msg, size_t n) {
  if (!hashed(src))
    return 0;
  const wds__index_hashes *h = &src->ctx->hashes[src->shard];
  for (size_t i = 0; i < r->nfields; i++) {
    wds__err e;
    WDS__ASSERT(r->f[i].data || !r->f[i].size); /* never deferred (hashed) */
    if (wds__index_hash_check(h, j, r->f[i].ext, r->f[i].data, r->f[i].size,
                              &e) != WDS_OK) {
      snprintf(msg, n, "%.500s: sample \"%.200s\" (%llu of the shard): %.250s",
               src->ctx->sources->urls.urls[src->shard], r->key,
               (unsigned long long)j, e.msg);
      return -1;
    }
  }
  return 0;
}

/* Next raw sample for the shuffle buffer: *out set, or NULL at the end.
 * Returns -1 with *fatal set when the worker must stop. */
static int feed_pull(wds__feed *src, wds__raw_sample **out, wds__item **fatal) {
  const wds__feed_worker *w = &src->w;
  const wds__feed_ctx *c = src->ctx;
  const wds__worker_plan *wp = src->wp;
  *out = NULL;
  for (;;) {
    if (src->holes > 0) {
      src->holes--;
      if (!(*out = wds__raw_hole(w->pool, w->index, src->shard)))
        goto nomem;
      return 0;
    }
    if (src->done || atomic_load(w->abort))
      return 0;
    if (!src->rd) {
      if (c->cfg->mode == WDS_MODE_RESAMPLED) {
        uint64_t limit = 2 * (uint64_t)src->count + 100;
        if (src->empty_draws >= limit) {
          char msg[WDS__ERR_SIZE];
          snprintf(msg, sizeof msg,
                   "resampled mode: %llu shards drawn in a row gave no "
                   "sample (last error: %.900s)",
                   (unsigned long long)src->empty_draws,
                   src->last_err[0] ? src->last_err : "none");
          *fatal = wds__error_item(c->nfields, WDS_ERR_CORRUPT, msg);
          return -1;
        }
        size_t shard =
            src->first + (size_t)wds__rng_below(&src->draw, src->count);
        if (feed_open(src, shard, 0, WDS__TO_END, fatal) != 0)
          return -1;
      } else {
        if (src->piece == wp->count) {
          src->done = 1;
          return 0;
        }
        const wds__piece *pc = &wp->pieces[src->piece++];
        if (feed_open(src, pc->shard, pc->begin, pc->end, fatal) != 0)
          return -1;
        src->pad = pc->pad;
      }
      if (!src->rd) { /* open failed, skipped */
        src->empty_draws++;
        if (src->want != WDS__TO_END)
          src->holes = src->want;
        continue;
      }
    }
    if (src->want != WDS__TO_END && src->got == src->want) {
      if (src->to_end && feed_check_end(src, fatal) != 0)
        return -1;
      feed_close_reader(src);
      continue;
    }
    const wds_sample *s;
    uint64_t t0 = wds__now_ns();
    wds__reader_set_sink(src->rd, feed_sink, src, FEED_INTO_BYTES);
    int st = wds__reader_next(src->rd, &s);
    src->read_ns += wds__now_ns() - t0;
    if (src->into_failed) {
      into_reset(src);
      goto nomem;
    }
    if (st == WDS_OK) {
      src->got++;
      src->empty_draws = 0;
      wds__raw_sample *r = raw_copy(src, s);
      if (!r) {
        into_reset(src);
        goto nomem;
      }
      char msg[WDS__ERR_SIZE];
      if (check_hashes(src, r, src->before + src->got - 1, msg, sizeof msg)) {
        /* An altered sample is never delivered: stop, or an invalid row
         * in its place (exact mode keeps its count). */
        wds__raw_free(r);
        if (read_error(src, WDS_ERR_CORRUPT, msg, fatal))
          return -1;
        if (!(*out = wds__raw_hole(w->pool, w->index, src->shard)))
          goto nomem;
        return 0;
      }
      src->bytes += r->data_bytes;
      r->pad = src->pad;
      *out = r;
      return 0;
    }
    into_reset(src); /* blocks of a sample the error dropped */
    if (st != WDS_EOF) {
      if (read_error(src, st, wds__reader_error(src->rd), fatal))
        return -1;
      if (st == WDS_ERR_DUPLICATE)
        continue; /* the reader goes on within the shard */
    }
    /* End of the shard (or an error that ended it). */
    if (src->got == 0)
      src->empty_draws++;
    if (st == WDS_EOF && src->want != WDS__TO_END && src->got < src->want &&
        !src->failed) {
      /* Exact mode: fewer samples than counted (a stale index, a shard
       * changed since): an error, and under skip the rank is topped up.
       * The shard's count, not the piece's end, and where it really
       * ended (perhaps before the piece began). */
      char msg[WDS__ERR_SIZE], from[320];
      snprintf(msg, sizeof msg,
               "%.500s: ended after %llu samples, but %s promised %llu",
               c->sources->urls.urls[src->shard],
               (unsigned long long)(src->before + src->got),
               wds__count_source(c->sources, src->shard, from, sizeof from),
               (unsigned long long)c->counts[src->shard]);
      if (read_error(src, WDS_ERR_TRUNCATED, msg, fatal))
        return -1;
    }
    if (src->want != WDS__TO_END && src->got < src->want)
      src->holes = src->want - src->got;
    feed_close_reader(src);
  }
nomem:
  *fatal = wds__error_item(c->nfields, WDS_ERR_NOMEM, "out of memory");
  return -1;
}

void wds__feed_init(wds__feed *src, const wds__feed_ctx *ctx,
                    const wds__feed_worker *w, size_t s,
                    const wds__worker_plan *wp) {
  const wds__source *so = &ctx->sources->src[s];
  memset(src, 0, sizeof *src);
  src->ctx = ctx;
  src->w = *w;
  src->wp = wp;
  src->first = so->first;
  src->count = so->count;
  wds__rng_init(&src->draw,
                wds__rng_key(so->seed, WDS__STREAM_RESAMPLE, w->epoch,
                             (uint64_t)ctx->cfg->rank, (uint64_t)w->index));
}

int wds__feed_next(void *src, wds__raw_sample **out) {
  wds__feed *f = src;
  return feed_pull(f, out, &f->fatal);
}

int wds__feed_check_last(wds__feed *src) {
  if (src->rd && src->to_end && src->got == src->want)
    return feed_check_end(src, &src->fatal);
  return 0;
}

void wds__feed_close(wds__feed *src) {
  feed_close_reader(src);
  into_reset(src);
  free(src->into);
  src->into = NULL;
  src->into_cap = 0;
  free(src->doff);
  src->doff = NULL;
  src->doff_cap = 0;
}
