/* count.c — exact mode's per-shard sample counts, at open: from an index
 * (untrusted: checked against itself, the shard files, and an overflow
 * bound; a shard it calls empty is read) or from a counting pass (each
 * shard read once, by min(workers, shards) threads). */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "loader/index.h"
#include "loader/internal.h"

/* Exact mode without an index: count each shard's samples, in parallel. */
typedef struct counter {
  wds_loader *l;
  int index, threads;
  int status;
  char msg[WDS__ERR_SIZE];
  pthread_t thread;
  int *finished; /* counters done, under l->mu (wds__loader_lock; l->cv is
                    signalled) */
} counter;

/* The thread's last act: counted as finished for count_shards' wait. */
static void *count_done(counter *c) {
  wds__loader_lock(c->l);
  (*c->finished)++;
  pthread_cond_broadcast(&c->l->cv);
  wds__loader_unlock(c->l);
  return NULL;
}

/* Waits for the counters (the open's caller's thread), asking the caller's
 * interrupt check (cfg.interrupt) every WDS__INTERRUPT_POLL_MS: when it
 * says stop, the counting readers are cancelled (the loader's wake token,
 * which open sets only here; the loader is closed after). */
static int count_wait(wds_loader *l, const int *finished, int started) {
  int interrupted = 0;
  wds__loader_lock(l);
  while (*finished < started) {
    if (!l->cfg.interrupt || interrupted) {
      wds__loader_wait(l);
      continue;
    }
    struct timespec until;
    wds__deadline_ms(&until, WDS__INTERRUPT_POLL_MS);
    if (wds__loader_timedwait(l, &until) != ETIMEDOUT)
      continue;
    wds__loader_unlock(l); /* the check may wait for other threads */
    interrupted = l->cfg.interrupt(l->cfg.interrupt_ctx) != 0;
    if (interrupted)
      wds__cancel_set(&l->wake);
    wds__loader_lock(l);
  }
  wds__loader_unlock(l);
  return interrupted;
}

static void *count_main(void *arg) {
  counter *c = arg;
  wds_loader *l = c->l;
  for (size_t s = (size_t)c->index; s < l->urls.count && c->status == WDS_OK;
       s += (size_t)c->threads) {
    if (l->src[l->shard_source[s]].index_path)
      continue; /* its source's index gives it */
    wds_reader *rd;
    if (wds__open_shard_reader(l, s, &rd) != WDS_OK) {
      if (l->cfg.on_error == WDS_ON_ERROR_STOP) {
        c->status = WDS_ERR_OPEN;
        snprintf(c->msg, sizeof c->msg, "%s", wds_open_error());
        break;
      }
      wds__note_skip(l, "skipped while counting", wds_open_error());
      l->counts[s] = 0;
      continue;
    }
    const wds_sample *smp;
    int st;
    uint64_t n = 0;
    while ((st = wds_reader_next(rd, &smp)) != WDS_EOF) {
      if (st == WDS_OK) {
        n++;
        continue;
      }
      if (l->cfg.on_error == WDS_ON_ERROR_STOP) {
        c->status = st;
        snprintf(c->msg, sizeof c->msg, "%s", wds_reader_error(rd));
        break;
      }
      wds__note_skip(l, "skipped while counting", wds_reader_error(rd));
    }
    l->counts[s] = n;
    wds_reader_close(rd);
  }
  return count_done(c);
}

static int count_shards(wds_loader *l) {
  int threads = l->pin.workers;
  if ((size_t)threads > l->urls.count)
    threads = (int)l->urls.count;
  counter *c = calloc((size_t)threads, sizeof *c);
  int rc = WDS_OK, started = 0;
  if (!c)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  int finished = 0;
  for (int i = 0; i < threads; i++) {
    c[i] = (counter){l, i, threads, WDS_OK, "", 0, &finished};
    if (pthread_create(&c[i].thread, NULL, count_main, &c[i]) != 0) {
      rc = wds__open_fail(WDS_ERR_NOMEM, "cannot start a thread");
      break;
    }
    started++;
  }
  int interrupted = count_wait(l, &finished, started);
  for (int i = 0; i < started; i++)
    pthread_join(c[i].thread, NULL);
  if (interrupted && rc == WDS_OK)
    rc = wds__open_fail(WDS_ERR_CANCELLED,
                        "interrupted while counting the samples of %zu "
                        "shards for exact mode",
                        l->urls.count);
  for (int i = 0; i < started && rc == WDS_OK; i++)
    if (c[i].status != WDS_OK)
      rc = wds__open_fail(c[i].status, "counting samples for exact mode: %s",
                          c[i].msg);
  free(c);
  return rc;
}

/* Exact mode: the epoch's total, overflow-checked, so that the plan's and
 * the batch count's arithmetic cannot wrap (counted shards could only get
 * there in theory; an index can say anything). */
static int check_total(wds_loader *l) {
  char from[320];
  uint64_t total = 0;
  for (size_t s = 0; s < l->urls.count; s++) {
    if (l->counts[s] > WDS__INDEX_MAX_SAMPLES - total)
      return wds__open_fail(
          WDS_ERR_CORRUPT,
          "exact mode: the counts from %s add up to more than %llu samples "
          "at %.300s (%llu samples), more than any data set holds (a "
          "sample takes at least 512 bytes of tar: 2^64 bytes in all)",
          wds__count_source(l, s, from, sizeof from),
          (unsigned long long)WDS__INDEX_MAX_SAMPLES, l->urls.urls[s],
          (unsigned long long)l->counts[s]);
    total += l->counts[s];
  }
  return WDS_OK;
}

/* Exact mode with an index: a shard it gives no samples is in no piece of
 * any plan, so nothing would ever read it, and samples it does hold would
 * be lost without a word. Each such shard is read here (an empty one ends
 * at its first block) and must be empty; otherwise the error names the
 * true count. Under skip it is noted, and the samples stay unread, as
 * with any count that is too small. */
static int check_empty_shards(wds_loader *l) {
  for (size_t s = 0; s < l->urls.count; s++) {
    const char *index_path = l->src[l->shard_source[s]].index_path;
    if (l->counts[s] != 0 || !index_path)
      continue;
    const char *url = l->urls.urls[s];
    char msg[WDS__ERR_SIZE];
    uint64_t n = 0;
    wds_reader *rd;
    int st = wds__open_shard_reader(l, s, &rd);
    if (st != WDS_OK) {
      snprintf(msg, sizeof msg, "%s", wds_open_error());
    } else {
      const wds_sample *smp;
      while ((st = wds_reader_next(rd, &smp)) != WDS_EOF)
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
                 index_path, wds_reader_error(rd));
      wds_reader_close(rd);
    }
    if (st == WDS_EOF && n == 0)
      continue;
    int status = n > 0 ? WDS_ERR_CORRUPT : st;
    if (l->cfg.on_error == WDS_ON_ERROR_STOP)
      return wds__open_fail(status, "%s", msg);
    wds__note_skip(l, "skipped", msg);
  }
  return WDS_OK;
}

int wds__load_counts(wds_loader *l) {
  l->counts = calloc(l->urls.count ? l->urls.count : 1, sizeof *l->counts);
  if (!l->counts)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  int counted = 0, indexed = 0;
  for (size_t s = 0; s < l->nsrc; s++) {
    if (l->src[s].index_path)
      indexed = 1;
    else
      counted = 1;
  }
  if (counted) {
    int rc = count_shards(l);
    if (rc != WDS_OK)
      return rc;
  }
  /* An index is untrusted: its counts are checked against its own
   * "samples" lists and tar_bytes, against each shard file, and summed
   * with an overflow check; a shard it says is empty is read. Each source
   * has its own (or is counted). */
  for (size_t src = 0; src < l->nsrc; src++) {
    const wds__source *so = &l->src[src];
    if (!so->index_path)
      continue;
    wds__index ix;
    wds__err e;
    unsigned flags = WDS__INDEX_COUNT_SAMPLES;
    if (l->cfg.allow_pipe_from_files)
      flags |= WDS_INDEX_ALLOW_PIPE_FROM_FILES;
    int rc = wds__index_load_flags(so->index_path, flags, &ix, &e);
    if (rc != WDS_OK)
      return wds__open_fail(rc, "%s", e.msg);
    for (size_t s = so->first; s < so->first + so->count && rc == WDS_OK; s++) {
      rc = wds__index_lookup(&ix, l->urls.urls[s], &l->counts[s], &e);
      if (rc == WDS_OK)
        rc = wds__index_check_count(l->urls.urls[s], l->counts[s], &e);
    }
    wds__index_free(&ix);
    if (rc != WDS_OK)
      return wds__open_fail(rc, "index %s: %s", so->index_path, e.msg);
  }
  int rc = check_total(l);
  if (rc != WDS_OK || !indexed)
    return rc;
  return check_empty_shards(l);
}
