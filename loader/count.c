/* count.c — exact mode's per-shard sample counts, at open: from an index
 * (untrusted: checked against itself, the shard files, and an overflow
 * bound; a shard it calls empty is read) or from a counting pass (each
 * shard read once, by min(workers, shards) threads).
 *
 * It sees the loader through wds__count_ctx only (the sources, the config,
 * the shard opener, the skip callback) and writes nothing of it but the
 * counts array it returns; its threads meet on a lock of their own. */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "base/url.h"
#include "loader/index.h"
#include "loader/internal.h"
#include "pipeline/reader_internal.h"

/* Where the exact mode's count of a shard came from, for messages. */
const char *wds__count_source(const wds__sources *ss, size_t shard, char *buf,
                              size_t n) {
  const char *ix = ss->src[ss->shard_source[shard]].index_path;
  if (!ix)
    return "the counting pass";
  snprintf(buf, n, "the index %.300s", ix);
  return buf;
}

/* The counting threads' meeting point: how many have finished. */
typedef struct count_done_at {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* signalled as each finishes */
  int finished;      /* under mu */
} count_done_at;

/* Exact mode without an index: count each shard's samples, in parallel. */
typedef struct counter {
  const wds__count_ctx *c;
  uint64_t *counts;
  int index, threads;
  int status;
  char msg[WDS__ERR_SIZE];
  pthread_t thread;
  count_done_at *done;
} counter;

/* The thread's last act: counted as finished for count_shards' wait. */
static void *count_done(counter *k) {
  pthread_mutex_lock(&k->done->mu);
  k->done->finished++;
  pthread_cond_broadcast(&k->done->cv);
  pthread_mutex_unlock(&k->done->mu);
  return NULL;
}

/* Waits for the counters (the open's caller's thread), asking the caller's
 * interrupt check (cfg.interrupt) every WDS__INTERRUPT_POLL_MS: when it
 * says stop, the counting readers are cancelled (the loader's wake token,
 * which open sets only here; the loader is closed after). */
static int count_wait(const wds__count_ctx *c, count_done_at *d, int started) {
  const wds_loader_config *cfg = c->cfg;
  int interrupted = 0;
  pthread_mutex_lock(&d->mu);
  while (d->finished < started) {
    if (!cfg->interrupt || interrupted) {
      pthread_cond_wait(&d->cv, &d->mu);
      continue;
    }
    struct timespec until;
    wds__deadline_ms(&until, WDS__INTERRUPT_POLL_MS);
    if (pthread_cond_timedwait(&d->cv, &d->mu, &until) != ETIMEDOUT)
      continue;
    pthread_mutex_unlock(&d->mu); /* the check may wait for other threads */
    interrupted = cfg->interrupt(cfg->interrupt_ctx) != 0;
    if (interrupted)
      wds__cancel_set(c->opener->wake);
    pthread_mutex_lock(&d->mu);
  }
  pthread_mutex_unlock(&d->mu);
  return interrupted;
}

/* A counting thread. Once count_wait has set the wake token (an
 * interrupt), it stops: a cancelled read is no bad shard to note as
 * skipped, and a cancelled reader never ends. */
static void *count_main(void *arg) {
  counter *k = arg;
  const wds__count_ctx *c = k->c;
  const wds__sources *ss = c->sources;
  const wds__cancel *wake = c->opener->wake;
  for (size_t s = (size_t)k->index;
       s < ss->urls.count && k->status == WDS_OK && !wds__cancelled(wake);
       s += (size_t)k->threads) {
    if (ss->src[ss->shard_source[s]].index_path)
      continue; /* its source's index gives it */
    wds_reader *rd;
    wds__err e;
    if (wds__open_shard_reader(c->opener, s, &rd, &e) != WDS_OK) {
      if (wds__cancelled(wake))
        break;
      if (c->cfg->on_error == WDS_ON_ERROR_STOP) {
        k->status = WDS_ERR_OPEN;
        snprintf(k->msg, sizeof k->msg, "%s", e.msg);
        break;
      }
      c->skip(c->skip_ctx, "skipped while counting", e.msg);
      k->counts[s] = 0;
      continue;
    }
    const wds_sample *smp;
    int st;
    uint64_t n = 0;
    while ((st = wds__reader_next(rd, &smp)) != WDS_EOF) {
      if (st == WDS_OK) {
        n++;
        continue;
      }
      if (wds__cancelled(wake))
        break;
      if (c->cfg->on_error == WDS_ON_ERROR_STOP) {
        k->status = st;
        snprintf(k->msg, sizeof k->msg, "%s", wds__reader_error(rd));
        break;
      }
      c->skip(c->skip_ctx, "skipped while counting", wds__reader_error(rd));
    }
    k->counts[s] = n;
    wds_reader_close(rd);
  }
  return count_done(k);
}

static int count_shards(const wds__count_ctx *c, uint64_t *counts,
                        wds__err *oe) {
  size_t shards = c->sources->urls.count;
  int threads = c->threads;
  if ((size_t)threads > shards)
    threads = (int)shards;
  counter *k = calloc((size_t)threads, sizeof *k);
  int rc = WDS_OK, started = 0;
  if (!k)
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  count_done_at done = {.finished = 0};
  pthread_mutex_init(&done.mu, NULL);
  pthread_cond_init(&done.cv, NULL);
  for (int i = 0; i < threads; i++) {
    k[i] = (counter){c, counts, i, threads, WDS_OK, "", 0, &done};
    if (pthread_create(&k[i].thread, NULL, count_main, &k[i]) != 0) {
      rc = wds__fail(oe, WDS_ERR_NOMEM, "cannot start a thread");
      break;
    }
    started++;
  }
  int interrupted = count_wait(c, &done, started);
  for (int i = 0; i < started; i++)
    pthread_join(k[i].thread, NULL);
  pthread_mutex_destroy(&done.mu);
  pthread_cond_destroy(&done.cv);
  if (interrupted && rc == WDS_OK)
    rc = wds__fail(oe, WDS_ERR_CANCELLED,
                   "interrupted while counting the samples of %zu "
                   "shards for exact mode",
                   shards);
  for (int i = 0; i < started && rc == WDS_OK; i++)
    if (k[i].status != WDS_OK)
      rc = wds__fail(oe, k[i].status, "counting samples for exact mode: %s",
                     k[i].msg);
  free(k);
  return rc;
}

/* Exact mode: the epoch's total, overflow-checked, so that the plan's and
 * the batch count's arithmetic cannot wrap (counted shards could only get
 * there in theory; an index can say anything). */
static int check_total(const wds__sources *ss, const uint64_t *counts,
                       wds__err *oe) {
  char from[320];
  uint64_t total = 0;
  for (size_t s = 0; s < ss->urls.count; s++) {
    if (counts[s] > WDS__INDEX_MAX_SAMPLES - total)
      return wds__fail(
          oe, WDS_ERR_CORRUPT,
          "exact mode: the counts from %s add up to more than %llu samples "
          "at %.300s (%llu samples), more than any data set holds (a "
          "sample takes at least 512 bytes of tar: 2^64 bytes in all)",
          wds__count_source(ss, s, from, sizeof from),
          (unsigned long long)WDS__INDEX_MAX_SAMPLES, ss->urls.urls[s],
          (unsigned long long)counts[s]);
    total += counts[s];
  }
  return WDS_OK;
}

/* Checks shard s when its index gives it 0 samples (check_empty_shards),
 * its reader opened with `o` (the token that asks the interrupt check). */
static int check_empty_shard(const wds__count_ctx *c, const uint64_t *counts,
                             size_t s, const wds__shard_opener *o,
                             wds__err *oe) {
  const wds__sources *ss = c->sources;
  char ub[WDS__URL_REDACT_MAX];
  const char *index_path = ss->src[ss->shard_source[s]].index_path;
  if (counts[s] != 0 || !index_path)
    return WDS_OK;
  const char *url = wds__url_redact(ss->urls.urls[s], ub, sizeof ub);
  char msg[WDS__ERR_SIZE];
  uint64_t n = 0;
  wds_reader *rd;
  wds__err e;
  int st = wds__open_shard_reader(o, s, &rd, &e);
  if (st == WDS_OK)
    wds__reader_set_read_thread(rd, -1); /* the check on this thread */
  if (st != WDS_OK) {
    snprintf(msg, sizeof msg, "%s", e.msg);
  } else {
    const wds_sample *smp;
    while ((st = wds__reader_next(rd, &smp)) != WDS_EOF)
      if (st == WDS_OK)
        n++;
      else if (st != WDS_ERR_DUPLICATE)
        break;
    if (n > 0)
      snprintf(msg, sizeof msg,
               "index %.300s: %.400s: the index gives 0 samples, but the "
               "shard has %s%llu: they would never be read (re-run wds "
               "index)",
               index_path, url, st == WDS_EOF ? "" : "at least ",
               (unsigned long long)n);
    else if (st != WDS_EOF)
      snprintf(msg, sizeof msg,
               "index %.300s gives 0 samples, and the shard cannot be read "
               "to check: %.600s",
               index_path, wds__reader_error(rd));
    wds_reader_close(rd);
  }
  if (wds__cancelled(o->wake))
    return wds__fail(oe, WDS_ERR_CANCELLED,
                     "interrupted while reading %.400s, which the "
                     "index %.300s gives 0 samples, to check that it "
                     "is empty",
                     url, index_path);
  if (st == WDS_EOF && n == 0)
    return WDS_OK;
  int status = n > 0 ? WDS_ERR_CORRUPT : st;
  if (c->cfg->on_error == WDS_ON_ERROR_STOP)
    return wds__fail(oe, status, "%s", msg);
  c->skip(c->skip_ctx, "skipped", msg);
  return WDS_OK;
}

/* Exact mode with an index: a shard it gives no samples is in no piece of
 * any plan, so nothing would ever read it, and samples it does hold would
 * be lost without a word. Each such shard is read here (an empty one ends
 * at its first block) and must be empty; otherwise the error names the
 * true count. Under skip it is noted, and the samples stay unread, as
 * with any count that is too small. The reads are the caller's thread's
 * (no reading thread), under the read timeout and the caller's interrupt
 * check (cfg.interrupt, through a token of the check's own in a copy of
 * the opener), which ends open under either policy: an interrupt is not a
 * bad shard. */
static int check_empty_shards(const wds__count_ctx *c, const uint64_t *counts,
                              wds__err *oe) {
  wds__cancel ask;
  wds__cancel_init(&ask); /* works without its eventfd too, by polling */
  ask.interrupt = c->cfg->interrupt;
  ask.interrupt_ctx = c->cfg->interrupt_ctx;
  wds__shard_opener o = *c->opener;
  o.wake = &ask;
  int rc = WDS_OK;
  for (size_t s = 0; s < c->sources->urls.count && rc == WDS_OK; s++)
    rc = check_empty_shard(c, counts, s, &o, oe);
  wds__cancel_destroy(&ask);
  return rc;
}

static int copy_hashes(wds__index_hashes *to, const wds__index_hashes *h) {
  to->start = malloc((h->count + 1) * sizeof *to->start);
  to->m = malloc((h->nm ? h->nm : 1) * sizeof *to->m);
  if (!to->start || !to->m) {
    wds__index_hashes_free(to);
    return WDS_ERR_NOMEM;
  }
  memcpy(to->start, h->start, (h->count + 1) * sizeof *to->start);
  if (h->nm)
    memcpy(to->m, h->m, h->nm * sizeof *to->m);
  to->count = h->count;
  to->nm = h->nm;
  return WDS_OK;
}

void wds__free_hashes(wds__index_hashes *h, size_t n) {
  if (!h)
    return;
  for (size_t i = 0; i < n; i++)
    wds__index_hashes_free(&h[i]);
  free(h);
}

int wds__load_counts(const wds__count_ctx *c, uint64_t **out, wds__err *oe) {
  return wds__load_counts_hashes(c, out, NULL, oe);
}

int wds__load_counts_hashes(const wds__count_ctx *c, uint64_t **out,
                            wds__index_hashes **hashes, wds__err *oe) {
  const wds__sources *ss = c->sources;
  if (hashes)
    *hashes = NULL;
  uint64_t *counts = *out =
      calloc(ss->urls.count ? ss->urls.count : 1, sizeof *counts);
  if (!counts)
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  int counted = 0, indexed = 0;
  for (size_t s = 0; s < ss->nsrc; s++) {
    if (ss->src[s].index_path)
      indexed = 1;
    else
      counted = 1;
  }
  if (counted) {
    int rc = count_shards(c, counts, oe);
    if (rc != WDS_OK)
      return rc;
  }
  /* An index is untrusted: its counts are checked against its own
   * "samples" lists and tar_bytes, against each shard file, and summed
   * with an overflow check; a shard it says is empty is read. Each source
   * has its own (or is counted). */
  for (size_t src = 0; src < ss->nsrc; src++) {
    const wds__source *so = &ss->src[src];
    if (!so->index_path)
      continue;
    wds__index ix;
    wds__err e;
    unsigned flags = WDS__INDEX_COUNT_SAMPLES;
    if (hashes)
      flags |= WDS__INDEX_HASHES; /* 20 bytes a member, 8 a sample */
    if (c->cfg->allow_pipe_from_files)
      flags |= WDS_INDEX_ALLOW_PIPE_FROM_FILES;
    int rc = wds__index_load_flags(so->index_path, flags, &ix, &e);
    if (rc != WDS_OK)
      return wds__fail(oe, rc, "%s", e.msg);
    for (size_t s = so->first; s < so->first + so->count && rc == WDS_OK; s++) {
      size_t at;
      rc = wds__index_find(&ix, ss->urls.urls[s], &at, &e);
      if (rc == WDS_OK)
        rc = wds__index_lookup(&ix, ss->urls.urls[s], &counts[s], &e);
      if (rc == WDS_OK)
        rc = wds__index_check_count(ss->urls.urls[s], counts[s], &e);
      /* The shard's hashes, copied for the loader (a URL listed twice in
       * the spec has one entry). */
      const wds__index_hashes *h = &ix.shards[at].hashes;
      if (rc == WDS_OK && h->count && hashes) {
        if (!*hashes && !(*hashes = calloc(ss->urls.count, sizeof **hashes)))
          rc = wds__fail(&e, WDS_ERR_NOMEM, "out of memory");
        else if ((rc = copy_hashes(&(*hashes)[s], h)) != WDS_OK)
          rc = wds__fail(&e, rc, "out of memory");
      }
    }
    wds__index_free(&ix);
    if (rc != WDS_OK)
      return wds__fail(oe, rc, "index %s: %s", so->index_path, e.msg);
  }
  int rc = check_total(ss, counts, oe);
  if (rc != WDS_OK || !indexed)
    return rc;
  return check_empty_shards(c, counts, oe);
}
