/* mix.c — several sources of shards in one loader (wds_source_config):
 * their URLs, their epoch plans, and each worker's choice between them.
 *
 * The sources' shards are laid end to end in urls (source s holds
 * urls[first, first + count)); shard_source says whose a shard is, and
 * the collator writes it into each row (wds_batch.sources). A loader
 * without sources has one, every shard, and nothing here changes what it
 * does: its plan is wds__plan_epoch of the loader's plan input and its
 * worker reads one
 * feed, as before sources existed.
 *
 * Resampled mode: each worker has a feed per source (each drawing shards
 * of its own source with its own RNG, as one source's feed does) and draws
 * the source of every sample from its RNG (seed, WDS__STREAM_MIX, epoch,
 * rank, worker) with probability w_s / sum(w).
 *
 * Exact mode: source s gives n_s samples per epoch (wds_source_config):
 * k = n_s / T_s whole passes over its shards and a window of r = n_s mod
 * T_s samples of its natural order starting at (e * r) mod T_s. These
 * "units" (a shard, or a sample range of one) go through wds__plan_epoch
 * as if they were shards (permuted by the source's seed and the epoch,
 * split over the ranks by the rank split, padded, dealt to workers), so
 * every rank reads its share of EVERY source, and each source is padded
 * on its own. Inside a worker the sources' quotas q_s are interleaved
 * smoothly: the next sample comes from the source with the smallest
 * (taken_s + 1/2) / q_s (ties: the lower index), so a batch mixes the
 * sources from the first step; the shuffle buffer does the rest.
 *
 * Plain mode reads whole shards and cannot choose per sample: it takes one
 * source only.
 *
 * Views: the sources part works on a wds__sources, which mix.c alone
 * writes (at open); the feeds part reads the loader through wds__feed_ctx,
 * as feed.c does. Neither sees the loader's handle. */
#include <math.h>
#include <stdio.h>

#include "base/url.h"
#include "loader/internal.h"
#include "shards/spec_io.h"

__extension__ typedef unsigned __int128 u128;

#define MAX_SOURCES 4096
#define MAX_UNITS ((size_t)1 << 26) /* per source and epoch */

static const char *src_name(const wds__sources *ss, size_t s, char *buf,
                            size_t n) {
  char rb[WDS__URL_REDACT_MAX]; /* its secrets hidden */
  snprintf(buf, n, "source %zu (%.200s)", s,
           ss->src[s].count
               ? wds__url_redact(ss->urls.urls[ss->src[s].first], rb, sizeof rb)
               : "no shards");
  return buf;
}

static int append_urls(wds__sources *ss, const wds_url_list *add) {
  size_t n = ss->urls.count + add->count;
  char **nv = realloc(ss->urls.urls, (n ? n : 1) * sizeof *nv);
  if (!nv)
    return -1;
  ss->urls.urls = nv;
  for (size_t i = 0; i < add->count; i++)
    ss->urls.urls[ss->urls.count + i] = add->urls[i];
  ss->urls.count = n;
  return 0;
}

static int check_amount(size_t s, const char *what, double v, wds__err *oe) {
  if (!(v >= 0) || !isfinite(v) || v > 1e12)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: source %zu: %s %g (need a finite "
                     "number >= 0; 0 = unset)",
                     s, what, v);
  return WDS_OK;
}

/* A spec expanded into *out on open's thread, the message in e. s3:// listings
 * obey what the shard reads will (feed.c's reader config: the read timeout, the
 * retries) and the caller's interrupt check (cfg.interrupt, asked on this
 * thread, through a token of the open's own: nobody can cancel the loader
 * before open returns it). */
static int expand(const wds_loader_config *cfg, const char *spec,
                  wds_url_list *out, wds__err *e) {
  wds__cancel ask;
  wds__cancel_init(&ask); /* works without its eventfd too, by polling */
  ask.interrupt = cfg->interrupt;
  ask.interrupt_ctx = cfg->interrupt_ctx;
  const wds__io_opts io = {.read_timeout_ms = cfg->read_timeout_ms,
                           .cancel = &ask,
                           .retries = cfg->retries};
  unsigned flags =
      cfg->allow_pipe_from_files ? WDS_SPEC_ALLOW_PIPE_FROM_FILES : 0;
  int rc = wds__spec_expand_io(&spec, 1, 0, flags, &io, out, e);
  wds__cancel_destroy(&ask);
  return rc;
}

int wds__sources_open(wds__sources *ss, const wds_loader_config *cfg,
                      wds__err *oe) {
  int rc;
  if (cfg->sources && (cfg->spec || cfg->urls))
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: give a spec (or urls) or sources, "
                     "not both");
  /* index_path beside sources: refused by wds_loader_config_check. */
  size_t n = cfg->sources ? cfg->source_count : 1;
  if (n == 0 || n > MAX_SOURCES)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: %zu sources (1 .. %d)", n, MAX_SOURCES);
  if (!(ss->src = calloc(n, sizeof *ss->src)))
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  ss->nsrc = n;
  if (!cfg->sources) {
    if (cfg->spec) {
      wds__err e;
      rc = expand(cfg, cfg->spec, &ss->urls, &e);
      if (rc != WDS_OK)
        return wds__fail(oe, rc, "%s", e.msg);
    } else {
      ss->urls.urls =
          calloc(cfg->url_count ? cfg->url_count : 1, sizeof(char *));
      if (!ss->urls.urls)
        return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
      for (size_t i = 0; i < cfg->url_count; i++) {
        if (!cfg->urls[i] || !(ss->urls.urls[i] = strdup(cfg->urls[i])))
          return wds__fail(oe, cfg->urls[i] ? WDS_ERR_NOMEM : WDS_ERR_INVALID,
                           "wds_loader_open: urls[%zu]: %s", i,
                           cfg->urls[i] ? "out of memory" : "NULL");
        ss->urls.count++;
      }
    }
    if (cfg->index_path && !(ss->src[0].index_path = strdup(cfg->index_path)))
      return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
    ss->src[0].count = ss->urls.count;
  } else {
    for (size_t s = 0; s < n; s++) {
      const wds_source_config *sc = &cfg->sources[s];
      wds__source *so = &ss->src[s];
      if (!sc->spec || !sc->spec[0])
        return wds__fail(oe, WDS_ERR_INVALID,
                         "wds_loader_open: source %zu has no spec", s);
      if ((rc = check_amount(s, "weight", sc->weight, oe)) != WDS_OK ||
          (rc = check_amount(s, "proportion", sc->proportion, oe)) != WDS_OK ||
          (rc = check_amount(s, "repeat", sc->repeat, oe)) != WDS_OK)
        return rc;
      if ((sc->weight > 0) + (sc->proportion > 0) + (sc->repeat > 0) > 1)
        return wds__fail(oe, WDS_ERR_INVALID,
                         "wds_loader_open: source %zu (%.300s) sets more "
                         "than one of weight, proportion and repeat",
                         s, sc->spec);
      so->weight = sc->weight;
      so->proportion = sc->proportion;
      so->repeat = sc->repeat;
      wds_url_list add = {0};
      wds__err e;
      rc = expand(cfg, sc->spec, &add, &e);
      if (rc != WDS_OK)
        return wds__fail(oe, rc, "source %zu: %s", s, e.msg);
      so->first = ss->urls.count;
      so->count = add.count;
      if (append_urls(ss, &add) != 0) {
        wds_url_list_free(&add);
        return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
      }
      free(add.urls); /* the strings belong to ss->urls now */
      if (so->count == 0)
        return wds__fail(oe, WDS_ERR_INVALID,
                         "wds_loader_open: source %zu (%.300s) has no "
                         "shards",
                         s, sc->spec);
      if (sc->index_path && !(so->index_path = strdup(sc->index_path)))
        return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
    }
  }
  if (!(ss->shard_source = calloc(ss->urls.count ? ss->urls.count : 1,
                                  sizeof *ss->shard_source)))
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  for (size_t s = 0; s < n; s++) {
    for (size_t i = 0; i < ss->src[s].count; i++)
      ss->shard_source[ss->src[s].first + i] = (uint32_t)s;
    /* Source 0 keeps the config's seed: one source is the loader without
     * sources, draw for draw. */
    ss->src[s].seed =
        s == 0 ? cfg->seed
               : wds__rng_key(cfg->seed, WDS__STREAM_SOURCE, s, 0, 0);
  }

  /* What each mode can do with sources. */
  wds_mode mode = cfg->mode;
  for (size_t s = 0; s < n; s++) {
    const wds__source *so = &ss->src[s];
    char name[300];
    src_name(ss, s, name, sizeof name);
    if (mode == WDS_MODE_PLAIN && n > 1)
      return wds__fail(
          oe, WDS_ERR_INVALID,
          "wds_loader_open: %zu sources in plain mode: mixing chooses a "
          "source per sample, and plain mode reads whole shards (use --mode "
          "exact or resampled)",
          n);
    if (mode == WDS_MODE_PLAIN && (so->repeat > 0 || so->proportion > 0))
      return wds__fail(oe, WDS_ERR_INVALID,
                       "wds_loader_open: %s: repeat and proportion need "
                       "exact mode (plain mode reads each shard once)",
                       name);
    if (mode == WDS_MODE_RESAMPLED && so->repeat > 0)
      return wds__fail(
          oe, WDS_ERR_INVALID,
          "wds_loader_open: %s: repeat is for exact mode; in resampled mode "
          "give a weight (or a proportion)",
          name);
    if (mode == WDS_MODE_EXACT && so->weight > 0)
      return wds__fail(
          oe, WDS_ERR_INVALID,
          "wds_loader_open: %s: weight is for resampled mode; in exact mode "
          "give a repeat factor or a proportion of the epoch",
          name);
    if (mode != WDS_MODE_EXACT && so->index_path)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "wds_loader_open: %s: an index is only used in "
                       "exact mode",
                       name);
  }
  if (mode == WDS_MODE_RESAMPLED) {
    if (!(ss->mix_cum = calloc(n, sizeof *ss->mix_cum)))
      return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
    double sum = 0;
    for (size_t s = 0; s < n; s++) {
      double w = ss->src[s].weight > 0       ? ss->src[s].weight
                 : ss->src[s].proportion > 0 ? ss->src[s].proportion
                                             : 1.0;
      sum += w;
      ss->mix_cum[s] = sum;
    }
    ss->mixed = n > 1;
  }
  return WDS_OK;
}

int wds__sources_plan_check(wds__sources *ss, wds_mode mode,
                            const uint64_t *counts, wds__err *oe) {
  if (mode != WDS_MODE_EXACT)
    return WDS_OK;
  uint64_t all = 0;
  char name[300];
  for (size_t s = 0; s < ss->nsrc; s++) {
    wds__source *so = &ss->src[s];
    so->total = 0;
    for (size_t i = 0; i < so->count; i++)
      so->total += counts[so->first + i]; /* check_total bounds it */
    all += so->total;
    if (so->total == 0 && ss->nsrc > 1)
      return wds__fail(oe, WDS_ERR_INVALID, "exact mode: %s has no samples",
                       src_name(ss, s, name, sizeof name));
  }
  for (size_t s = 0; s < ss->nsrc; s++) {
    wds__source *so = &ss->src[s];
    double want = so->repeat > 0       ? so->repeat * (double)so->total
                  : so->proportion > 0 ? so->proportion * (double)all
                                       : (double)so->total;
    if (want >= 0x1p50)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "exact mode: %s would give %.3g samples per "
                       "epoch (at most 2^50)",
                       src_name(ss, s, name, sizeof name), want);
    so->n = (uint64_t)llround(want);
    if (so->n == 0 && ss->nsrc > 1)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "exact mode: %s gives no sample per epoch (%s %g "
                       "of %llu samples)",
                       src_name(ss, s, name, sizeof name),
                       so->repeat > 0 ? "repeat" : "proportion",
                       so->repeat > 0 ? so->repeat : so->proportion,
                       (unsigned long long)(so->repeat > 0 ? so->total : all));
    if (so->total > 0 && so->n / so->total + 1 > MAX_UNITS / so->count)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "exact mode: %s: %llu passes over %zu shards per "
                       "epoch is too many",
                       src_name(ss, s, name, sizeof name),
                       (unsigned long long)(so->n / so->total), so->count);
  }
  ss->mixed = ss->nsrc > 1 || ss->src[0].n != ss->src[0].total;
  return WDS_OK;
}

/* ---- exact mode: a source's epoch plan ---- */

typedef wds__units units;

void wds__units_free(wds__units *u) {
  free(u->shard);
  free(u->begin);
  free(u->len);
  memset(u, 0, sizeof *u);
}

void wds__units_map(const wds__units *u, wds__epoch_plan *p) {
  for (int w = 0; w < p->workers; w++)
    for (size_t i = 0; i < p->w[w].count; i++) {
      wds__piece *pc = &p->w[w].pieces[i];
      size_t k = pc->shard;
      pc->shard = u->shard[k];
      pc->begin += u->begin[k];
      pc->end += u->begin[k];
    }
}

static int unit_add(units *u, size_t shard, uint64_t begin, uint64_t len) {
  if (len == 0)
    return 0;
  if (u->n == u->cap) {
    size_t c = u->cap ? 2 * u->cap : 64;
    size_t *ns = realloc(u->shard, c * sizeof *ns);
    if (!ns)
      return -1;
    u->shard = ns;
    uint64_t *nb = realloc(u->begin, c * sizeof *nb);
    if (!nb)
      return -1;
    u->begin = nb;
    uint64_t *nl = realloc(u->len, c * sizeof *nl);
    if (!nl)
      return -1;
    u->len = nl;
    u->cap = c;
  }
  u->shard[u->n] = shard;
  u->begin[u->n] = begin;
  u->len[u->n] = len;
  u->n++;
  return 0;
}

/* Source s's units in epoch e: k whole passes, then the window of r
 * samples from (e * r) mod T in its natural order. */
int wds__source_units(const wds__sources *ss, const uint64_t *counts, size_t s,
                      uint64_t epoch, wds__units *u) {
  const wds__source *so = &ss->src[s];
  uint64_t T = so->total, k = so->n / T, r = so->n % T;
  for (uint64_t pass = 0; pass < k; pass++)
    for (size_t i = 0; i < so->count; i++)
      if (unit_add(u, so->first + i, 0, counts[so->first + i]) != 0)
        return -1;
  if (r == 0)
    return 0;
  uint64_t pos = (uint64_t)(((u128)(epoch % T) * r) % T);
  /* The shard holding position pos, and the offset in it. */
  size_t i = 0;
  while (pos >= counts[so->first + i]) {
    pos -= counts[so->first + i];
    i++;
  }
  for (uint64_t left = r; left > 0;) {
    uint64_t c = counts[so->first + i];
    uint64_t take = c - pos < left ? c - pos : left;
    if (unit_add(u, so->first + i, pos, take) != 0)
      return -1;
    left -= take;
    pos = 0;
    i = (i + 1) % so->count;
  }
  return 0;
}

static int source_plan(const wds__sources *ss, const wds__plan_input *pin,
                       size_t s, uint64_t epoch, wds__epoch_plan *out,
                       wds__err *e) {
  units u = {0};
  int rc = WDS_OK;
  memset(out, 0, sizeof *out);
  if (wds__source_units(ss, pin->counts, s, epoch, &u) != 0) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
    goto done;
  }
  wds__plan_input in = *pin;
  in.shards = u.n;
  in.counts = u.len;
  in.seed = ss->src[s].seed;
  rc = wds__plan_epoch(&in, epoch, out, e);
  if (rc != WDS_OK) {
    char name[300];
    wds__err_prefix(e, "%s", src_name(ss, s, name, sizeof name));
    goto done;
  }
  wds__units_map(&u, out);
done:
  wds__units_free(&u);
  return rc;
}

int wds__plan_sum(const wds__epoch_plan *per, size_t n, uint64_t epoch,
                  int workers, wds__epoch_plan *sum, wds__err *e) {
  memset(sum, 0, sizeof *sum);
  sum->epoch = epoch;
  sum->workers = workers;
  if (!(sum->w = calloc((size_t)workers, sizeof *sum->w)))
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
  for (size_t s = 0; s < n; s++) {
    sum->rank_samples += per[s].rank_samples;
    sum->steps += per[s].steps; /* rank weights: each source's steps */
    sum->total_samples += per[s].total_samples;
    sum->padded += per[s].padded;
    for (int w = 0; w < workers; w++)
      sum->w[w].quota += per[s].w[w].quota;
  }
  return WDS_OK;
}

int wds__run_plan(const wds__sources *ss, const wds__plan_input *pin,
                  uint64_t epoch, wds__epoch_plan *sum, wds__epoch_plan **per,
                  wds__err *e) {
  *per = NULL;
  if (!ss->mixed || pin->mode != WDS_MODE_EXACT)
    return wds__plan_epoch(pin, epoch, sum, e);
  memset(sum, 0, sizeof *sum);
  wds__epoch_plan *p = calloc(ss->nsrc, sizeof *p);
  int rc = WDS_OK;
  if (!p)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
  for (size_t s = 0; s < ss->nsrc && rc == WDS_OK; s++)
    rc = source_plan(ss, pin, s, epoch, &p[s], e);
  if (rc == WDS_OK)
    rc = wds__plan_sum(p, ss->nsrc, epoch, pin->workers, sum, e);
  if (rc != WDS_OK) {
    wds__run_plan_free(ss, sum, p);
    return rc;
  }
  *per = p;
  return WDS_OK;
}

void wds__run_plan_free(const wds__sources *ss, wds__epoch_plan *sum,
                        wds__epoch_plan *per) {
  wds__plan_free(sum);
  if (per)
    for (size_t s = 0; s < ss->nsrc; s++)
      wds__plan_free(&per[s]);
  free(per);
}

void wds__sources_free(wds__sources *ss) {
  wds_url_list_free(&ss->urls);
  for (size_t s = 0; ss->src && s < ss->nsrc; s++)
    free(ss->src[s].index_path);
  free(ss->src);
  free(ss->shard_source);
  free(ss->mix_cum);
  ss->src = NULL;
  ss->shard_source = NULL;
  ss->mix_cum = NULL;
}

/* ---- a worker's feeds ---- */

int wds__feeds_init(wds__feeds *fs, const wds__feed_ctx *ctx,
                    const wds__feed_worker *w, const wds__epoch_plan *plan,
                    const wds__epoch_plan *splan) {
  const wds__sources *ss = ctx->sources;
  memset(fs, 0, sizeof *fs);
  fs->ctx = ctx;
  fs->n = ss->mixed ? ss->nsrc : 1;
  if (!(fs->f = calloc(fs->n, sizeof *fs->f)))
    return -1;
  for (size_t s = 0; s < fs->n; s++)
    wds__feed_init(&fs->f[s], ctx, w, s,
                   splan ? &splan[s].w[w->index] : &plan->w[w->index]);
  if (fs->n > 1 && ctx->cfg->mode == WDS_MODE_EXACT) {
    fs->taken = calloc(fs->n, sizeof *fs->taken);
    fs->quota = calloc(fs->n, sizeof *fs->quota);
    if (!fs->taken || !fs->quota)
      return -1;
    for (size_t s = 0; s < fs->n; s++)
      fs->quota[s] = fs->f[s].wp->quota;
  }
  wds__rng_init(&fs->pick,
                wds__rng_key(ctx->cfg->seed, WDS__STREAM_MIX, w->epoch,
                             (uint64_t)ctx->cfg->rank, (uint64_t)w->index));
  return 0;
}

/* Exact mode: the source whose next sample is due first. */
static size_t pick_due(const wds__feeds *fs) {
  size_t best = fs->n;
  for (size_t s = 0; s < fs->n; s++) {
    if (fs->taken[s] >= fs->quota[s])
      continue;
    /* (2 t_s + 1) / q_s < (2 t_b + 1) / q_b */
    if (best == fs->n || (u128)(2 * fs->taken[s] + 1) * fs->quota[best] <
                             (u128)(2 * fs->taken[best] + 1) * fs->quota[s])
      best = s;
  }
  return best;
}

int wds__feeds_next(void *ctx, wds__raw_sample **out) {
  wds__feeds *fs = ctx;
  size_t s = 0;
  *out = NULL;
  if (fs->n > 1) {
    const double *cum = fs->ctx->sources->mix_cum;
    if (fs->taken) {
      s = pick_due(fs);
      if (s == fs->n)
        return 0; /* every quota met */
      fs->taken[s]++;
    } else {
      double u =
          (double)(wds__rng_next(&fs->pick) >> 11) * 0x1p-53 * cum[fs->n - 1];
      while (s + 1 < fs->n && !(u < cum[s]))
        s++;
    }
  }
  int rc = wds__feed_next(&fs->f[s], out);
  if (rc != 0)
    fs->fatal = fs->f[s].fatal;
  return rc;
}

int wds__feeds_check_last(wds__feeds *fs) {
  for (size_t s = 0; s < fs->n; s++)
    if (wds__feed_check_last(&fs->f[s]) != 0) {
      fs->fatal = fs->f[s].fatal;
      return -1;
    }
  return 0;
}

void wds__feeds_stats(wds__feeds *fs, uint64_t *read_ns, uint64_t *bytes,
                      uint64_t *unverified, uint64_t *shards) {
  *read_ns = *bytes = *shards = *unverified = 0;
  for (size_t s = 0; s < fs->n && fs->f; s++) {
    *read_ns += fs->f[s].read_ns;
    *bytes += fs->f[s].bytes;
    *shards += fs->f[s].shards;
    *unverified += fs->f[s].unverified;
    fs->f[s].read_ns = fs->f[s].bytes = fs->f[s].shards = 0;
    fs->f[s].unverified = 0;
  }
}

void wds__feeds_close(wds__feeds *fs) {
  for (size_t s = 0; s < fs->n && fs->f; s++)
    wds__feed_close(&fs->f[s]);
  free(fs->f);
  free(fs->taken);
  free(fs->quota);
  memset(fs, 0, sizeof *fs);
}
