/* loader.c — the loader's handle: open (configuration; the output fields
 * are fields.c's, the batch pool slots.c's), next, release, epochs,
 * positions, errors, stats, close, cancel. The other concerns have their
 * own files (internal.h lists them); the design they share:
 *
 * One epoch is one "run": `workers` worker threads and one collator thread,
 * started by the first next() of the epoch and joined at its end (or by
 * set_epoch/close, which abort it). With eager_next_epoch the next epoch's
 * workers start as this epoch's end, and its collator at WDS_EOF (run.c,
 * "The next epoch").
 *
 *   worker w:  plan pieces (or resampled draws) -> wds_reader -> copy of the
 *              wanted fields (a "raw" sample, owned) -> shuffle buffer ->
 *              decode -> item -> queue[w] (bounded)
 *   collator:  pops queue[0], queue[1], ... round-robin; a worker that ends
 *              leaves the rotation -> rows of the batch in a free pool slot
 *              -> ready FIFO
 *   next():    pops the ready FIFO; release() frees the slot.
 *
 * Determinism: each worker's item sequence depends only on its plan and its
 * RNG keys (seed, stream, epoch, rank, worker, item number), and the
 * collator's order only on those sequences, so thread timing never shows.
 *
 * Resume: the collator discards the first resume_batches * batch_size items.
 * Worker w's item i can only land at rank position <= i * workers + w (the
 * rotation only shrinks), so items with i * workers + w below the skip count
 * are certainly discarded: the worker passes them on undecoded ("tokens").
 *
 * Locks: each queue has its own mutex; the pool (slot states, ready FIFO,
 * the run's end) is under the loader's mutex. An abort flag, set before the
 * mutexes are taken to broadcast, ends every wait. Memory is bounded by the
 * shuffle buffers (in samples and in bytes), the queues (queue_cap items per
 * worker) and the slots.
 *
 * Stopping: a worker may be blocked in a read (a stalled pipe: command, a
 * slow server). The loader's wake token, shared by every reader it opens,
 * wakes such a read at once: wds__run_stop (set_epoch, close, the end of an
 * epoch) sets it while it joins the threads and clears it after;
 * wds_loader_cancel sets it for good. A cancelled read is never a skipped
 * error: it ends the worker. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/topology.h"
#include "loader/handle.h"
#include "loader/pool.h"
#include "pipeline/gpu_plan.h"

#define MAX_WORKERS WDS_LOADER_MAX_WORKERS
#define MAX_BATCH ((size_t)1 << 24)
#define DEFAULT_SHUFFLE_BYTES ((size_t)1 << 30) /* per worker */

static void log_msg(wds_loader *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_msg(wds_loader *l, const char *fmt, ...) {
  if (!l->cfg.log)
    return;
  char buf[WDS__ERR_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  /* Workers and the collator log; the callback sees one call at a time. */
  pthread_mutex_lock(&l->log_mu);
  l->cfg.log(l->cfg.log_ctx, buf);
  pthread_mutex_unlock(&l->log_mu);
}

/* The cache's first failure (the shard was read without it). */
static void cache_warn(void *ctx, const char *msg) { log_msg(ctx, "%s", msg); }

void wds__note_skip(wds_loader *l, const char *what, const char *msg) {
  STAT_ADD(l, skipped, 1);
  log_msg(l, "%s: %s", what, msg);
}

/* The feeds' and the counting pass's skips (wds__skip_fn). */
static void skip_noted(void *ctx, const char *what, const char *msg) {
  wds__note_skip(ctx, what, msg);
}

/* ---- environment ---- */

/* The rule is base/topology.h's; an environment it refuses gives 0 and 1
 * here, and fails wds_loader_open with its message. */
void wds_env_rank_world(int *rank, int *world_size) {
  wds__topology t;
  wds__topology_from_env(&t, NULL, NULL, NULL);
  if (rank)
    *rank = t.rank;
  if (world_size)
    *world_size = t.world_size;
}

/* ---- open: configuration ---- */

static uint64_t batches_for(const wds_loader *l, uint64_t samples) {
  uint64_t bs = l->cfg.batch_size;
  return l->cfg.last_batch == WDS_LAST_DROP ? samples / bs
                                            : (samples + bs - 1) / bs;
}

static int validate(const wds_loader_config *c, wds__err *oe) {
#define BAD(...)                                                               \
  return wds__fail(oe, WDS_ERR_INVALID, "wds_loader_open: " __VA_ARGS__)
  if (c->world_size < 1 || c->world_size > 1 << 24)
    BAD("world size %d (1 .. 16777216)", c->world_size);
  if (c->rank < 0) /* rank below world: wds_loader_config_check */
    BAD("rank %d is not in 0 .. %d", c->rank, c->world_size - 1);
  if (c->workers < 1 || c->workers > MAX_WORKERS)
    BAD("%d workers (1 .. %d)", c->workers, MAX_WORKERS);
  if (c->mode != WDS_MODE_PLAIN && c->mode != WDS_MODE_EXACT &&
      c->mode != WDS_MODE_RESAMPLED)
    BAD("unknown mode %d", (int)c->mode);
  if (c->batch_size < 1 || c->batch_size > MAX_BATCH)
    BAD("batch size %zu (1 .. %zu)", c->batch_size, MAX_BATCH);
  if (c->last_batch != WDS_LAST_KEEP && c->last_batch != WDS_LAST_DROP &&
      c->last_batch != WDS_LAST_PAD)
    BAD("unknown last-batch policy %d", (int)c->last_batch);
  if (c->on_error != WDS_ON_ERROR_STOP && c->on_error != WDS_ON_ERROR_SKIP)
    BAD("unknown error policy %d", (int)c->on_error);
  if (c->defer_reads != WDS_DEFER_AUTO && c->defer_reads != WDS_DEFER_ON &&
      c->defer_reads != WDS_DEFER_OFF)
    BAD("unknown defer_reads %d", (int)c->defer_reads);
  if (c->jpeg_decode != WDS_JPEG_DECODE_CPU &&
      c->jpeg_decode != WDS_JPEG_DECODE_GPU)
    BAD("unknown jpeg_decode %d", (int)c->jpeg_decode);
  if (c->crop != WDS_CROP_CENTER && c->crop != WDS_CROP_RANDOM)
    BAD("unknown crop mode %d", (int)c->crop);
  if (!(c->crop_scale_min > 0 && c->crop_scale_min <= c->crop_scale_max &&
        c->crop_scale_max <= 1))
    BAD("crop_scale (%g, %g): need 0 < min <= max <= 1", c->crop_scale_min,
        c->crop_scale_max);
  {
    wds__augment a;
    wds__err ae;
    wds__config_augment(c, &a);
    if (wds__augment_check(&a, 3, &ae) != WDS_OK)
      BAD("%s", ae.msg);
    if (c->jpeg_decode == WDS_JPEG_DECODE_GPU &&
        (wds__jitter_active(&a.jitter) || a.dtype != WDS_IMAGE_UINT8))
      BAD("jpeg_decode gpu decodes into uint8 HWC rows without color "
          "jitter: brightness, contrast, saturation, hue and image_dtype "
          "need jpeg_decode cpu");
  }
  /* The rules between options: the one check every front end runs. */
  if (wds_loader_config_check(c, WDS_OPTION_NAMES_KEYWORD) != WDS_OK)
    BAD("%s", wds_last_error());
  if (c->shuffle_buffer > ((size_t)1 << 26))
    BAD("shuffle buffer of %zu samples (at most 67108864)", c->shuffle_buffer);
  if (c->prefetch_batches < 2 || c->prefetch_batches > 1024)
    BAD("%zu batches in flight (2 .. 1024)", c->prefetch_batches);
#undef BAD
  return WDS_OK;
}

/* Checks and copies cfg's rank_batch_sizes; this rank's entry becomes
 * the batch size. */
static int rank_batch_sizes(wds_loader *l, const wds_loader_config *cfg,
                            wds__err *oe) {
  wds_loader_config *c = &l->cfg;
  size_t n = cfg->rank_batch_size_count;
  if (n == 0) {
    c->rank_batch_sizes = NULL;
    return WDS_OK;
  }
  if (!cfg->rank_batch_sizes)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: rank_batch_sizes is NULL but "
                     "rank_batch_size_count is %zu",
                     n);
  if (c->world_size < 1 || n != (size_t)c->world_size)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: %zu per-rank batch sizes for a "
                     "world size of %d: give one per rank",
                     n, c->world_size);
  for (size_t r = 0; r < n; r++)
    if (cfg->rank_batch_sizes[r] < 1 || cfg->rank_batch_sizes[r] > MAX_BATCH)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "wds_loader_open: rank %zu's batch size %zu "
                       "(1 .. %zu)",
                       r, cfg->rank_batch_sizes[r], MAX_BATCH);
  if (c->rank < 0 || c->rank >= c->world_size)
    return WDS_OK; /* validate() says so */
  size_t mine = cfg->rank_batch_sizes[c->rank];
  if (c->batch_size != 1 && c->batch_size != mine)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: batch_size %zu, but "
                     "rank_batch_sizes gives rank %d %zu: set one of "
                     "them",
                     c->batch_size, c->rank, mine);
  if (c->mode == WDS_MODE_PLAIN)
    return wds__fail(
        oe, WDS_ERR_INVALID,
        "wds_loader_open: per-rank batch sizes need exact or resampled "
        "mode: in plain mode a rank's sample count is not known before it "
        "reads its shards, so equal step counts cannot be promised");
  if (!(l->rank_bs = malloc(n * sizeof *l->rank_bs)))
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  memcpy(l->rank_bs, cfg->rank_batch_sizes, n * sizeof *l->rank_bs);
  c->rank_batch_sizes = l->rank_bs;
  c->batch_size = mine;
  return WDS_OK;
}

int wds_loader_open(const wds_loader_config *cfg, wds_loader **out) {
  int rc;
  wds__err err = {{0}};
  wds_loader *l = NULL;
  if (!out)
    return wds__last_fail(WDS_ERR_INVALID, "wds_loader_open: out is NULL");
  *out = NULL;
  if (!cfg || (!cfg->spec && !cfg->urls && !cfg->sources))
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_loader_open: no spec, urls or sources");
  l = calloc(1, sizeof *l);
  if (!l)
    return wds__last_fail(WDS_ERR_NOMEM, "out of memory");
  pthread_mutex_init(&l->mu, NULL);
  atomic_init(&l->mu_owner, 0);
  pthread_cond_init(&l->cv, NULL);
  pthread_mutex_init(&l->log_mu, NULL);
  pthread_mutex_init(&l->fence_mu, NULL);
  wds__cancel_init(&l->wake); /* works without its eventfd too, by polling */
  atomic_init(&l->cancelled, 0);
  l->cfg = *cfg;
  wds_loader_config *c = &l->cfg;
  if (c->rank < 0 || c->world_size < 0) {
    wds__topology t;
    wds__err te;
    if ((rc = wds__topology_from_env(&t, NULL, NULL, &te)) != WDS_OK) {
      wds__fail(&err, rc, "rank and world size from the environment: %s",
                te.msg);
      goto fail;
    }
    if (c->rank < 0)
      c->rank = t.rank;
    if (c->world_size < 0)
      c->world_size = t.world_size;
  }
  int auto_workers = c->workers == 0;
  if (auto_workers)
    c->workers = 4;
  if (c->prefetch_batches == 0)
    c->prefetch_batches = 4;
  if (c->shuffle_buffer_bytes == 0)
    c->shuffle_buffer_bytes = DEFAULT_SHUFFLE_BYTES;
  /* last_batch not given: drop_last's choice (torch's drop_last), the one
   * place every front end's "drop_last drops a partial last batch" is. */
  if (c->last_batch == WDS_LAST_AUTO)
    c->last_batch = c->drop_last ? WDS_LAST_DROP : WDS_LAST_KEEP;
  if ((rc = rank_batch_sizes(l, cfg, &err)) != WDS_OK)
    goto fail;
  if ((rc = validate(c, &err)) != WDS_OK)
    goto fail;
  c->fields = NULL; /* copied into l->fields; the caller's may go away */
  c->spec = NULL;
  c->urls = NULL;
  c->sources = NULL;
  if (cfg->index_path && !(l->index_copy = strdup(cfg->index_path))) {
    rc = wds__fail(&err, WDS_ERR_NOMEM, "out of memory");
    goto fail;
  }
  c->index_path = l->index_copy;
  const char *cache_dir = wds__cache_dir_default(cfg->cache_dir);
  if (cache_dir && cache_dir[0] && !(l->cache_dir_copy = strdup(cache_dir))) {
    rc = wds__fail(&err, WDS_ERR_NOMEM, "out of memory");
    goto fail;
  }
  c->cache_dir = l->cache_dir_copy;
  l->cache_stats.warn = cache_warn;
  l->cache_stats.warn_ctx = l;
  l->alloc = cfg->allocator.alloc ? cfg->allocator : wds__default_allocator();
  if (!l->alloc.free) {
    rc = wds__fail(&err, WDS_ERR_INVALID,
                   "wds_loader_open: allocator without free");
    goto fail;
  }
  if ((rc = wds__fields_setup(l, cfg, &err)) != WDS_OK)
    goto fail;

  if ((rc = wds__sources_open(&l->sources, cfg, &err)) != WDS_OK)
    goto fail;
  if (l->sources.urls.count == 0) {
    rc = wds__fail(&err, WDS_ERR_INVALID, "wds_loader_open: no shards");
    goto fail;
  }

  if (auto_workers && c->mode == WDS_MODE_PLAIN) {
    /* Not more workers than this rank has shards: still a function of the
     * config alone, never of the machine. */
    size_t mine = l->sources.urls.count > (size_t)c->rank
                      ? (l->sources.urls.count - (size_t)c->rank +
                         (size_t)c->world_size - 1) /
                            (size_t)c->world_size
                      : 0;
    if (mine >= 1 && mine < (size_t)c->workers)
      c->workers = (int)mine;
  }
  l->pin = (wds__plan_input){l->sources.urls.count,
                             NULL,
                             c->seed,
                             c->rank,
                             c->world_size,
                             c->workers,
                             c->mode,
                             c->shard_shuffle,
                             c->drop_last,
                             c->samples_per_epoch,
                             l->rank_bs};
  if (c->mode == WDS_MODE_EXACT)
    for (size_t i = 0; i < l->sources.urls.count; i++)
      if (!l->sources.src[l->sources.shard_source[i]].index_path &&
          strcmp(l->sources.urls.urls[i], "-") == 0) {
        rc = wds__fail(&err, WDS_ERR_INVALID,
                       "exact mode reads each shard twice without an "
                       "index (once to count), which stdin ('-') cannot "
                       "be: give an index (wds index) or use "
                       "--mode plain or resampled");
        goto fail;
      }
  l->opener = (wds__shard_opener){&l->cfg, &l->sources, &l->wake,
                                  &l->cache_stats, c->workers};
  if (c->mode == WDS_MODE_EXACT) {
    l->count_ctx = (wds__count_ctx){&l->cfg,    &l->sources, &l->opener,
                                    c->workers, skip_noted,  l};
    if ((rc = wds__load_counts_hashes(&l->count_ctx, &l->counts, &l->hashes,
                                      &err)) != WDS_OK)
      goto fail;
    l->pin.counts = l->counts;
  }
  if ((rc = wds__sources_plan_check(&l->sources, c->mode, l->counts, &err)) !=
      WDS_OK)
    goto fail;
  if (cfg->resume_state) {
    wds__err e;
    if ((rc = wds__state_check(l, cfg->resume_state, &e)) != WDS_OK) {
      wds__fail(&err, rc, "%s", e.msg);
      goto fail;
    }
    if (l->elastic_live)
      l->elastic_batches = batches_for(l, l->elastic_plan.rank_samples);
  }
  {
    wds__err e;
    if ((rc = wds__plan_check(&l->pin, &e)) != WDS_OK) {
      wds__fail(&err, rc, "%s", e.msg);
      goto fail;
    }
    if (c->mode != WDS_MODE_PLAIN) {
      wds__epoch_plan p, *per;
      if ((rc = wds__run_plan(&l->sources, &l->pin, c->epoch, &p, &per, &e)) !=
          WDS_OK) {
        wds__fail(&err, rc, "%s", e.msg);
        goto fail;
      }
      l->epoch_batches = batches_for(l, p.rank_samples);
      wds__run_plan_free(&l->sources, &p, per);
    } else if (c->samples_per_epoch) {
      l->epoch_batches = 0; /* a cap, not a promise */
    }
  }
  if (c->resume_batches > UINT64_MAX / c->batch_size) {
    rc = wds__fail(&err, WDS_ERR_INVALID,
                   "wds_loader_open: resume at batch %llu is out of range",
                   (unsigned long long)c->resume_batches);
    goto fail;
  }
  if (c->mode != WDS_MODE_PLAIN && c->resume_batches > l->epoch_batches) {
    rc = wds__fail(&err, WDS_ERR_INVALID,
                   "wds_loader_open: resume at batch %llu, but an epoch "
                   "has %llu batches",
                   (unsigned long long)c->resume_batches,
                   (unsigned long long)l->epoch_batches);
    goto fail;
  }
  {
    /* Enough queued items per worker to fill a batch between them twice,
     * within limits: the queues are part of the memory bound. */
    size_t per =
        2 * ((c->batch_size + (size_t)c->workers - 1) / (size_t)c->workers);
    l->queue_cap = per < 4 ? 4 : per > 1024 ? 1024 : per;
    l->chunk = l->queue_cap / 2;
  }
  l->feed_ctx = (wds__feed_ctx){&l->cfg,   &l->sources, l->counts,  &l->opener,
                                l->wanted, l->nwanted,  l->nfields, skip_noted,
                                l,         l->hashes};
  if ((rc = wds__slots_setup(l, &err)) != WDS_OK)
    goto fail;
  if (!(l->pools = calloc(2 * (size_t)c->workers, sizeof *l->pools))) {
    rc = wds__fail(&err, WDS_ERR_NOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < 2 * c->workers; i++) {
    pthread_mutex_init(&l->pools[i].mu, NULL);
    atomic_init(&l->pools[i].fh_open, 0);
    /* Blocks in circulation: shuffle buffer, queue, two batches (one
     * being copied into its slot while the next is assigned), with some
     * slack; every sample has its block, up to one per wanted field (read
     * straight into it) and one per output field (decoded). */
    l->pools[i].limit =
        (c->shuffle_buffer + l->queue_cap + 2 * c->batch_size + 64) *
        (l->nwanted + l->nfields + 1);
  }
  c->resume_state = NULL; /* read: the caller's text may go away */
  l->epoch = c->epoch;
  l->delivered = c->resume_batches;
  l->first_skip = c->resume_batches;
  *out = l;
  return WDS_OK;
fail:
  wds_loader_close(l);
  return wds__last_set(rc, err.msg);
}

/* ---- next / release ---- */

/* The loader fails for good with rc: rc and its text (l->err now) are what
 * every later next() reports, whatever other calls write into l->err
 * since (release_after's refusals, an interrupt). */
static int fail_for_good(wds_loader *l, int rc) {
  wds__loader_lock(l);
  memcpy(l->failed_err, l->err, sizeof l->failed_err);
  wds__loader_unlock(l);
  l->failed = rc;
  return rc;
}

/* The loader was cancelled: the run stops and every later call fails. (An
 * interrupt, cfg.interrupt, is not a cancel: next() returns, the loader
 * stays as it was.) */
static int cancelled(wds_loader *l) {
  wds__run_stop(l);
  wds__set_error(l, "cancelled");
  return fail_for_good(l, WDS_ERR_CANCELLED);
}

static int loader_next(wds_loader *l, const wds_batch **out) {
  *out = NULL;
  if (l->failed)
    return l->failed;
  if (atomic_load(&l->cancelled))
    return cancelled(l);
  if (!l->cur) {
    uint64_t skip = l->first_skip * l->cfg.batch_size;
    l->first_skip = 0;
    int rc = wds__run_start(l, l->epoch, skip);
    if (rc != WDS_OK)
      return fail_for_good(l, rc);
  }
  uint64_t t0 = wds__now_ns();
  if (wds__fenced_count(l) > 0)
    wds__fences_poll(l, 0);
  uint64_t t_asked = 0; /* when cfg.interrupt was last called */
  wds__loader_lock(l);
  while (l->ready_len == 0) {
    if (l->cfg.interrupt &&
        wds__now_ns() - t0 >= (uint64_t)WDS__INTERRUPT_POLL_MS * 1000000 &&
        wds__now_ns() - t_asked >= (uint64_t)WDS__INTERRUPT_POLL_MS * 1000000) {
      t_asked = wds__now_ns();
      /* Asked without the lock: the check may wait for a thread that
       * takes it (the Python binding's GIL holder releasing a batch). */
      wds__loader_unlock(l);
      int stop = l->cfg.interrupt(l->cfg.interrupt_ctx);
      wds__loader_lock(l);
      if (stop) { /* a batch ready meanwhile stays for the next call */
        wds__loader_unlock(l);
        STAT_ADD(l, wait_ns, wds__now_ns() - t0);
        wds__set_error(l,
                       "interrupted while waiting for batch %llu of "
                       "epoch %llu",
                       (unsigned long long)l->delivered,
                       (unsigned long long)l->epoch);
        return WDS_ERR_CANCELLED;
      }
      if (l->ready_len > 0)
        break;
    }
    if (l->fenced > 0 && !atomic_load(&l->cancelled)) {
      /* Slots behind fences: free those done; when the collator waits for a
       * slot, wait for the oldest fence. */
      int block = l->collator_waits;
      wds__loader_unlock(l);
      int freed = wds__fences_poll(l, block);
      wds__loader_lock(l);
      if (freed || block)
        continue;
    } else if (l->fenced == 0 && l->held == l->nslots && l->collator_waits) {
      /* Only a deadlock if the collator needs a slot: it may still be about
       * to post the end of the epoch, which needs none. */
      wds__loader_unlock(l);
      wds__set_error(
          l,
          "wds_loader_next: all %d batch slots are held by the caller; "
          "release one first",
          l->nslots);
      return WDS_ERR_INVALID;
    }
    if (atomic_load(&l->cancelled)) {
      wds__loader_unlock(l);
      return cancelled(l);
    }
    /* A cancel cannot signal the condition variable (not async-signal-safe),
     * so the wait is sliced. */
    struct timespec until;
    wds__deadline_ms(&until, l->fenced > 0 ? 1 : 50);
    wds__loader_timedwait(l, &until);
  }
  wds__ready_entry r = wds__ready_pop(l);
  if (r.kind == READY_SLOT)
    wds__slot_set(l, r.slot, SLOT_HELD); /* asserts it was READY */
  wds__loader_unlock(l);
  STAT_ADD(l, wait_ns, wds__now_ns() - t0);
  if (r.kind == READY_SLOT) {
    *out = &l->slots[r.slot].batch;
    l->delivered++;
    STAT_ADD(l, batches, 1);
    STAT_ADD(l, samples, (*out)->rows);
    return WDS_OK;
  }
  if (r.kind == READY_EOF) {
    if (l->epoch == UINT64_MAX) {
      /* No epoch after the last number: wrapping to 0 would replay epoch
       * 0's order as a new one. This end is delivered; the next call
       * reports it. */
      wds__set_error(l,
                     "epoch %" PRIu64 " is the last epoch number: no "
                     "epoch follows it",
                     l->epoch);
      fail_for_good(l, WDS_ERR_INVALID);
      return WDS_EOF;
    }
    l->epoch++;
    l->delivered = 0;
    l->elastic_live = 0; /* later epochs are a fresh run's */
    int rc = wds__run_next_epoch(l);
    if (rc != WDS_OK)
      fail_for_good(l, rc); /* the next call reports it */
    return WDS_EOF;
  }
  wds__run_stop(l);
  wds__set_error(l, "%s", l->run_error);
  return fail_for_good(l, l->run_error_status ? l->run_error_status
                                              : WDS_ERR_CORRUPT);
}

/* A public call's status: a failure's text (l->err, which the workers'
 * errors reach through the run; for next(), failed_err once the loader
 * failed for good with rc) copied into the caller's last error. */
static int loader_status(wds_loader *l, int rc, int next) {
  if (rc >= 0)
    return rc;
  char msg[WDS__ERR_SIZE];
  wds__loader_lock(l);
  memcpy(msg, next && rc == l->failed ? l->failed_err : l->err, sizeof msg);
  wds__loader_unlock(l);
  return wds__last_set(rc, msg);
}

int wds_loader_next(wds_loader *l, const wds_batch **out) {
  if (out)
    *out = NULL;
  if (!l || !out)
    return wds__last_fail(WDS_ERR_INVALID, "wds_loader_next: %s is NULL",
                          l ? "out" : "the loader");
  return loader_status(l, loader_next(l, out), 1);
}

int wds_loader_release_after(wds_loader *l, const wds_batch *b,
                             const wds_release_fence *fence) {
  if (!l)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_loader_release_after: the loader is NULL");
  return loader_status(l, wds__release_after(l, b, fence), 0);
}

void wds_loader_release(wds_loader *l, const wds_batch *b) {
  if (!l || !b || b->slot < 0 || b->slot >= l->nslots ||
      b != &l->slots[b->slot].batch)
    return;
  wds__loader_lock(l);
  if (l->slots[b->slot].state == SLOT_HELD) {
    wds__slot_set(l, b->slot, SLOT_FREE);
    pthread_cond_broadcast(&l->cv);
  }
  wds__loader_unlock(l);
}

int wds_loader_set_epoch(wds_loader *l, uint64_t epoch) {
  if (!l)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_loader_set_epoch: the loader is NULL");
  /* The run already reading this epoch from its start (eager_next_epoch)
   * is the one asked for: kept. */
  if (l->cur && l->cur->epoch == epoch && l->cur->skip == 0 &&
      !l->cur->elastic && l->delivered == 0 && l->epoch == epoch)
    return WDS_OK;
  wds__run_stop(l);
  l->elastic_live = 0; /* a fresh epoch, whichever */
  l->epoch = epoch;
  l->delivered = 0;
  l->first_skip = 0;
  return WDS_OK;
}

void wds_loader_position(const wds_loader *l, uint64_t *epoch,
                         uint64_t *batches) {
  if (epoch)
    *epoch = l ? l->epoch : 0;
  if (batches)
    *batches = l ? l->delivered : 0;
}

uint64_t wds_loader_epoch_batches(const wds_loader *l) {
  if (l && l->elastic_live && l->epoch == l->elastic_epoch)
    return l->elastic_batches; /* the rest of an elastic resume's epoch */
  return l ? l->epoch_batches : 0;
}

int wds_loader_elastic(const wds_loader *l, int *old_world,
                       uint64_t *samples_left, uint64_t *full_epoch_batches) {
  int live = l && l->elastic_live && l->epoch == l->elastic_epoch;
  if (full_epoch_batches)
    *full_epoch_batches = l ? l->epoch_batches : 0;
  if (old_world)
    *old_world = live ? l->elastic_world : 0;
  if (samples_left)
    *samples_left = live ? l->elastic_left : 0;
  return live;
}

void wds__set_error(wds_loader *l, const char *fmt, ...) {
  va_list ap;
  wds__loader_lock(l);
  va_start(ap, fmt);
  vsnprintf(l->err, sizeof l->err, fmt, ap);
  va_end(ap);
  wds__loader_unlock(l);
}

const char *wds_loader_allocator_name(const wds_loader *l) {
  return l && l->alloc.name ? l->alloc.name : "custom";
}

void wds_loader_stats_get(const wds_loader *l, wds_loader_stats *o) {
  memset(o, 0, sizeof *o);
  if (!l)
    return;
  wds_loader *m = (wds_loader *)l; /* atomics are read, not changed */
  o->batches = atomic_load(&m->st_batches);
  o->samples = atomic_load(&m->st_samples);
  o->skipped = atomic_load(&m->st_skipped);
  o->fill_rows = atomic_load(&m->st_fill);
  o->shards_opened = atomic_load(&m->st_shards);
  o->bytes_read = atomic_load(&m->st_bytes);
  o->read_ns = atomic_load(&m->st_read_ns);
  o->shuffle_ns = atomic_load(&m->st_shuffle_ns);
  o->decode_ns = atomic_load(&m->st_decode_ns);
  o->batch_ns = atomic_load(&m->st_batch_ns);
  o->wait_ns = atomic_load(&m->st_wait_ns);
  o->slot_wait_ns = atomic_load(&m->st_slot_wait_ns);
  o->peak_pool_bytes = atomic_load(&m->st_pool_bytes);
  o->cache_hits = atomic_load(&m->cache_stats.hits);
  o->cache_stored = atomic_load(&m->cache_stats.stored);
  o->cache_errors = atomic_load(&m->cache_stats.errors);
  o->deferred_fields = atomic_load(&m->st_deferred);
  o->deferred_bytes = atomic_load(&m->st_deferred_bytes);
  o->unverified_samples = atomic_load(&m->st_unverified);
}

void wds_loader_close(wds_loader *l) {
  if (!l)
    return;
  if (l->slots)
    wds__fences_drain(l);
  wds__run_stop(l);
  for (int i = 0; l->pools && i < 2 * l->cfg.workers; i++)
    wds__blk_pool_destroy(&l->pools[i]);
  free(l->pools);
  wds__slots_free(l);
  wds__fields_free(l);
  wds__free_hashes(l->hashes, l->sources.urls.count);
  /* the elastic remainder's plans (each source's: before the sources) */
  wds__run_plan_free(&l->sources, &l->elastic_plan, l->elastic_splan);
  wds__sources_free(&l->sources); /* and its URLs */
  free(l->counts);
  free(l->spec_copy);
  free(l->index_copy);
  free(l->rank_bs);
  free(l->elastic_from);
  free(l->cache_dir_copy);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->log_mu);
  pthread_mutex_destroy(&l->fence_mu);
  wds__cancel_destroy(&l->wake);
  free(l);
}

void wds_loader_cancel(wds_loader *l) {
  if (!l)
    return;
  /* Async-signal-safe: an atomic store and an eventfd write. next() sees
   * the flag within one of its wait slices. */
  atomic_store(&l->cancelled, 1);
  wds__cancel_set(&l->wake);
}
