/* run.c — one epoch's threads: start, stop, and the collator.
 *
 * run_start plans the epoch (plan.c), makes each worker's queue, pending
 * chunk and terminal item, and starts the workers (worker.c) and the
 * collator. The collator pops the worker queues round-robin in worker
 * order (a worker that ends leaves the rotation), discards the resume
 * skip, and assigns rows of pool slots through collate.c; the rows' data
 * is copied by the workers and the collator together ("slot copies"
 * below; a deferred read there that fails is applied under the on_error
 * policy before the batch is posted); full batches go to the ready FIFO
 * that next() pops. Slot states and
 * the FIFO are under the loader's mutex. run_stop aborts and joins everything
 * (loader.c: "Locks", "Stopping"). */
#include <stdio.h>

#include "loader/handle.h"

/* Appends to the ready FIFO; a slot (FILLING, its copies done) becomes
 * READY. The FIFO holds nslots + 2 entries: each slot at most once (it is
 * READY while queued), the end and an error, each at most once per run. */
static void post_ready(wds_loader *l, int kind, int slot_index) {
  wds__loader_lock(l);
  size_t cap = (size_t)l->nslots + 2;
  WDS__ASSERT(l->ready_len < cap && l->ready_head < cap);
  l->ready[(l->ready_head + l->ready_len) % cap] =
      (wds__ready_entry){kind, slot_index};
  l->ready_len++;
  if (kind == READY_SLOT)
    wds__slot_set(l, slot_index, SLOT_READY); /* asserts it was FILLING */
  pthread_cond_broadcast(&l->cv);
  wds__loader_unlock(l);
}

static void post_error(wds_loader *l, int status, const char *msg) {
  wds__loader_lock(l);
  l->run_error_status = status;
  snprintf(l->run_error, sizeof l->run_error, "%s", msg);
  wds__loader_unlock(l);
  post_ready(l, READY_ERROR, -1);
}

/* A free slot, marked FILLING; -1 when aborted. wait 0: -1 at once when
 * none is free. */
static int acquire_slot(wds_loader *l, wds__run *rn, int wait) {
  int found = -1;
  wds__loader_lock(l);
  for (;;) {
    if (atomic_load(&rn->abort))
      break;
    for (int i = 0; i < l->nslots; i++)
      if (l->slots[i].state == SLOT_FREE) {
        found = i;
        break;
      }
    if (found >= 0) {
      wds__slot_set(l, found, SLOT_FILLING);
      break;
    }
    if (!wait)
      break;
    l->collator_waits = 1;
    pthread_cond_broadcast(&l->cv); /* a caller holding every slot */
    wds__loader_wait(l);
    l->collator_waits = 0;
  }
  wds__loader_unlock(l);
  return found;
}

/* The collator's view of one worker: the chunk it took last. */
typedef struct inbox {
  wds__item **v;
  size_t len, at;
  wds__blk_returns back, back_items;
} inbox;

static wds__item *inbox_next(wds__run *rn, int w, inbox *in, uint64_t *waited) {
  if (in->at == in->len) {
    wds__copy_help(rn); /* rather than wait idle */
    uint64_t t0 = wds__now_ns();
    in->at = 0;
    in->len = wds__queue_pop_many(&rn->w[w].q, in->v, rn->l->chunk, &rn->abort);
    *waited += wds__now_ns() - t0;
    if (in->len == 0)
      return NULL; /* aborted */
  }
  return in->v[in->at++];
}

static void return_blocks(wds__run *rn, inbox *in) {
  for (int w = 0; w < rn->l->pin.workers; w++) {
    wds__blk_flush(rn->w[w].pool, &in[w].back);
    wds__blk_flush(rn->w[w].ipool, &in[w].back_items);
  }
}

/* ---- slot copies spread over the threads ----
 *
 * The collator assigns a batch's rows in the fixed round-robin order (so
 * which sample is which row does not change), then opens a copy job: the
 * rows split into parts that any thread claims (one atomic add) and copies
 * (wds__batch_copy: disjoint rows). Workers claim parts between samples,
 * the collator while it would otherwise wait for a queue, and before it
 * opens the next job it claims what is left and waits for the parts in
 * progress. The batch is posted when every part is copied: batches are
 * still posted in order, one at a time. */

#define COPY_PART_BYTES ((uint64_t)128 << 10)

void wds__copy_parts(wds__run *rn) {
  wds_loader *l = rn->l;
  for (;;) {
    uint64_t v =
        atomic_fetch_add_explicit(&rn->job_claim, 1, memory_order_acq_rel);
    uint64_t part = v & 0xffffffffu, parts = v >> 32;
    if (part >= parts)
      return;
    const wds__copy_job *j = &rn->job;
    size_t r0 = (size_t)part * j->part_rows;
    size_t r1 = r0 + j->part_rows < j->rows ? r0 + j->part_rows : j->rows;
    /* A claimed part is rows of the open job, which stays as it is until
     * every part is copied (job_left reaches 0). */
    WDS__ASSERT(j->s && j->items && j->part_rows > 0 && r0 < r1);
    wds__batch_copy(&l->col, j->s, (const wds__item *const *)j->items + r0, r0,
                    r1);
    unsigned left =
        atomic_fetch_sub_explicit(&rn->job_left, 1, memory_order_acq_rel);
    WDS__ASSERT(left >= 1); /* this part was not copied yet */
    if (left == 1) {
      wds__loader_lock(l);
      if (rn->job_waiting)
        pthread_cond_broadcast(&l->cv);
      wds__loader_unlock(l);
    }
  }
}

static int copy_due(void *rn) { return wds__copy_due(rn); }

int wds__worker_push(wds__worker *w, wds__item **its, size_t n) {
  wds__run *rn = w->run;
  int rc;
  /* Slot copies to share rather than wait idle (job_open wakes the wait
   * when it opens a job). */
  while ((rc = wds__queue_push_many(&w->q, its, n, &rn->abort, copy_due, rn)) ==
         WDS__QUEUE_BUSY)
    wds__copy_parts(rn);
  return rc == WDS__QUEUE_PUSHED ? 0 : -1;
}

/* A batch whose rows are assigned: its items, and each item's worker (its
 * blocks go back there). */
typedef struct batch_rows {
  int slot;
  wds__item **items;
  int *from;
  size_t rows;
} batch_rows;

/* Opens the copy job of b's rows (the previous job is done). */
static void job_open(wds__run *rn, batch_rows *b) {
  wds_loader *l = rn->l;
  /* The job is written only while no part is claimed or being copied:
   * the previous one is done, its every part claimed. A job is a full
   * batch (the last, partial one the collator copies alone). */
  WDS__ASSERT(atomic_load(&rn->job_left) == 0);
  WDS__ASSERT((atomic_load(&rn->job_claim) & 0xffffffffu) >=
              (atomic_load(&rn->job_claim) >> 32));
  WDS__ASSERT(b->slot >= 0 && b->slot < l->nslots &&
              b->rows == l->cfg.batch_size);
  wds__slot *s = &l->slots[b->slot];
  uint64_t bytes = 0;
  for (size_t i = 0; i < l->nfields; i++)
    bytes += s->bf[i].size_bytes;
  uint64_t parts = bytes / COPY_PART_BYTES + 1;
  uint64_t most = 2 * ((uint64_t)l->pin.workers + 1);
  if (parts > most)
    parts = most;
  if (parts > b->rows)
    parts = b->rows ? b->rows : 1;
  rn->job.s = s;
  rn->job.items = b->items;
  rn->job.rows = b->rows;
  rn->job.part_rows = (size_t)((b->rows + parts - 1) / parts);
  if (rn->job.part_rows == 0)
    rn->job.part_rows = 1;
  parts = (b->rows + rn->job.part_rows - 1) / rn->job.part_rows;
  WDS__ASSERT(parts >= 1 && parts <= most && parts < ((uint64_t)1 << 32));
  atomic_store_explicit(&rn->job_left, (unsigned)parts, memory_order_relaxed);
  atomic_store_explicit(&rn->job_claim, parts << 32, memory_order_release);
  /* Workers waiting for room in their queue take parts too. */
  for (int i = 0; i < l->pin.workers; i++)
    wds__queue_wake_pushers(&rn->w[i].q);
}

/* Copies what no one has claimed and waits for the rest: the job is done. */
static void job_finish(wds__run *rn) {
  wds_loader *l = rn->l;
  wds__copy_parts(rn);
  if (atomic_load_explicit(&rn->job_left, memory_order_acquire) == 0)
    return;
  wds__loader_lock(l);
  rn->job_waiting = 1;
  while (atomic_load_explicit(&rn->job_left, memory_order_acquire) > 0)
    wds__loader_wait(l);
  rn->job_waiting = 0;
  wds__loader_unlock(l);
  WDS__ASSERT(atomic_load(&rn->job_left) == 0);
}

/* Gives b's items back to their workers (after the job is done). */
static void rows_recycle(wds__run *rn, inbox *in, batch_rows *b) {
  /* No part in progress reads these items. */
  WDS__ASSERT(atomic_load(&rn->job_left) == 0);
  for (size_t r = 0; r < b->rows; r++)
    wds__item_recycle(b->items[r], rn->l->nfields, &in[b->from[r]].back,
                      &in[b->from[r]].back_items);
  b->rows = 0;
}

/* b's copies are done: its deferred reads that failed there go under the
 * on_error policy (wds__batch_reads_check), then b goes out and its items
 * back to their workers. 0, or -1: the epoch ends with the error (posted;
 * b's slot is not, and b is left as it was for the cleanup). */
static int post_copied(wds__run *rn, inbox *in, batch_rows *b) {
  wds__err e;
  /* b is the open job's batch, and every part of it is copied. */
  WDS__ASSERT(b->slot >= 0 && rn->job.s == &rn->l->slots[b->slot] &&
              rn->job.items == b->items && rn->job.rows == b->rows);
  WDS__ASSERT(atomic_load(&rn->job_left) == 0);
  int rc = wds__batch_reads_check(&rn->l->col, &rn->l->slots[b->slot],
                                  (const wds__item *const *)b->items, 0,
                                  b->rows, &e);
  if (rc != WDS_OK) {
    post_error(rn->l, rc, e.msg);
    return -1;
  }
  post_ready(rn->l, READY_SLOT, b->slot);
  b->slot = -1;
  rows_recycle(rn, in, b);
  return_blocks(rn, in);
  return 0;
}

static void rows_free(wds__run *rn, batch_rows *b) {
  WDS__ASSERT(atomic_load(&rn->job_left) == 0); /* no part reads them */
  for (size_t r = 0; r < b->rows; r++)
    wds__item_free(b->items[r], rn->l->nfields);
  b->rows = 0;
  free(b->items);
  free(b->from);
}

static void *collator_main(void *arg) {
  wds__run *rn = arg;
  wds_loader *l = rn->l;
  int W = l->pin.workers;
  int *active = malloc((size_t)W * sizeof *active);
  inbox *in = calloc((size_t)W, sizeof *in);
  wds__filling fl = {-1, 0, calloc(l->nfields ? l->nfields : 1, sizeof(int))};
  size_t bs = l->cfg.batch_size;
  uint64_t pos = 0, index = rn->skip / bs;
  uint64_t target = rn->plan.rank_samples;
  int n_active = W, cur = 0;
  uint64_t mark = wds__now_ns(), waited = 0;
  wds__err e;
  /* cur: the batch being assigned (slot fl.slot); pend: the batch being
   * copied (pend.slot >= 0), posted once the copies are done. */
  batch_rows bcur = {-1, malloc(bs * sizeof(wds__item *)),
                     malloc(bs * sizeof(int)), 0};
  batch_rows pend = {-1, malloc(bs * sizeof(wds__item *)),
                     malloc(bs * sizeof(int)), 0};
  if (!active || !in || !fl.first_set || !bcur.items || !bcur.from ||
      !pend.items || !pend.from) {
    post_error(l, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (int i = 0; i < W; i++)
    if (!(in[i].v = malloc(l->chunk * sizeof *in[i].v))) {
      post_error(l, WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
  if (l->cfg.mode == WDS_MODE_PLAIN && l->cfg.samples_per_epoch)
    target = l->cfg.samples_per_epoch;
  for (int i = 0; i < W; i++)
    active[i] = i;
  while (pos < target && n_active > 0) {
    int wi = active[cur];
    wds__item *it = inbox_next(rn, wi, &in[wi], &waited);
    if (!it)
      goto done; /* aborted */
    if (it->kind == ITEM_END) {
      wds__item_free(it, l->nfields);
      memmove(active + cur, active + cur + 1,
              (size_t)(n_active - cur - 1) * sizeof *active);
      if (--n_active > 0)
        cur %= n_active;
      continue;
    }
    if (it->kind == ITEM_ERROR) {
      post_error(l, it->status, it->msg ? it->msg : wds_strerror(it->status));
      wds__item_free(it, l->nfields);
      goto done;
    }
    cur = (cur + 1) % n_active;
    if (pos++ < rn->skip) {
      wds__item_recycle(it, l->nfields, &in[wi].back, &in[wi].back_items);
      if (pos % bs == 0)
        return_blocks(rn, in);
      continue;
    }
    /* The batch being copied, once done, goes out at once. */
    if (pend.slot >= 0 &&
        atomic_load_explicit(&rn->job_left, memory_order_acquire) == 0) {
      if (post_copied(rn, in, &pend) != 0) {
        wds__item_free(it, l->nfields);
        goto done;
      }
    }
    if (fl.slot < 0) {
      uint64_t t0 = wds__now_ns();
      fl.slot = acquire_slot(l, rn, 0);
      if (fl.slot < 0 && pend.slot >= 0) {
        /* Every free slot is taken: the caller may need the one being
         * copied before it releases any. */
        job_finish(rn);
        if (post_copied(rn, in, &pend) != 0) {
          wds__item_free(it, l->nfields);
          goto done;
        }
      }
      if (fl.slot < 0)
        fl.slot = acquire_slot(l, rn, 1);
      uint64_t dt = wds__now_ns() - t0;
      waited += dt;
      STAT_ADD(l, slot_wait_ns, dt);
      if (fl.slot < 0) {
        wds__item_free(it, l->nfields);
        goto done;
      }
      bcur.slot = fl.slot;
      wds__batch_begin(&l->col, &l->slots[fl.slot], &fl, rn->epoch, index);
    }
    /* The batch being assigned: its rows so far, fewer than a batch. */
    WDS__ASSERT(bcur.slot == fl.slot && bcur.rows == fl.rows && bcur.rows < bs);
    bcur.items[bcur.rows] = it;
    bcur.from[bcur.rows++] = wi;
    int rc = wds__batch_assign(&l->col, &l->slots[fl.slot], &fl, it, &e);
    if (rc != WDS_OK) {
      post_error(l, rc, e.msg);
      goto done;
    }
    if (fl.rows == bs) {
      wds__slot *s = &l->slots[fl.slot];
      if ((rc = wds__batch_reserve(&l->col, s, &fl, &e)) != WDS_OK) {
        post_error(l, rc, e.msg);
        goto done;
      }
      wds__batch_finish(&l->col, s, &fl);
      if (pend.slot >= 0) { /* batches go out in order */
        job_finish(rn);
        if (post_copied(rn, in, &pend) != 0)
          goto done;
      }
      batch_rows t = pend;
      pend = bcur;
      bcur = t;
      bcur.slot = -1;
      fl.slot = -1;
      job_open(rn, &pend);
      index++;
      /* The collator's busy time: wall time less its waits, per batch. */
      uint64_t now = wds__now_ns();
      STAT_ADD(l, batch_ns, now - mark > waited ? now - mark - waited : 0);
      mark = now;
      waited = 0;
    }
  }
  if (pend.slot >= 0) {
    job_finish(rn);
    if (post_copied(rn, in, &pend) != 0)
      goto done;
  }
  if (l->cfg.mode != WDS_MODE_PLAIN) {
    /* Each worker yields exactly its quota, then its last word: an error
     * found after its last sample (a shard longer than its count) is read
     * here, before the epoch may end. */
    for (int k = 0; k < n_active; k++) {
      wds__item *it = inbox_next(rn, active[k], &in[active[k]], &waited);
      if (!it)
        goto done; /* aborted */
      int kind = it->kind;
      if (kind == ITEM_ERROR)
        post_error(l, it->status, it->msg ? it->msg : wds_strerror(it->status));
      wds__item_free(it, l->nfields);
      if (kind == ITEM_ERROR)
        goto done;
    }
  }
  if (fl.slot >= 0) {
    /* The last, partial batch: its rows copied here, then padded, kept or
     * dropped. */
    wds__slot *s = &l->slots[fl.slot];
    int rc = wds__batch_reserve(&l->col, s, &fl, &e);
    if (rc == WDS_OK) {
      wds__batch_copy(&l->col, s, (const wds__item *const *)bcur.items, 0,
                      bcur.rows);
      rc = wds__batch_reads_check(
          &l->col, s, (const wds__item *const *)bcur.items, 0, bcur.rows, &e);
    }
    if (rc == WDS_OK) {
      rows_recycle(rn, in, &bcur);
      return_blocks(rn, in);
      rc = wds__batch_last(&l->col, s, &fl, &e);
    }
    if (rc < 0) {
      post_error(l, rc, e.msg);
      goto done;
    }
    if (rc == 0) {
      wds__loader_lock(l);
      wds__slot_set(l, fl.slot, SLOT_FREE); /* dropped: FILLING -> FREE */
      pthread_cond_broadcast(&l->cv);
      wds__loader_unlock(l);
    } else {
      post_ready(l, READY_SLOT, fl.slot);
    }
    fl.slot = -1;
  }
  if (l->cfg.mode == WDS_MODE_PLAIN && rn->skip / bs > 0) {
    /* Plain mode learns an epoch's length only by reading it: a resume
     * point past its end is an error here (the other modes refuse one at
     * open), not an epoch that silently has nothing. */
    uint64_t have =
        l->cfg.last_batch == WDS_LAST_DROP ? pos / bs : (pos + bs - 1) / bs;
    if (rn->skip / bs > have) {
      char msg[256];
      snprintf(msg, sizeof msg,
               "resume at batch %llu of epoch %llu, but the epoch has %llu "
               "batch%s (%llu samples): past its end",
               (unsigned long long)(rn->skip / bs),
               (unsigned long long)rn->epoch, (unsigned long long)have,
               have == 1 ? "" : "es", (unsigned long long)pos);
      post_error(l, WDS_ERR_INVALID, msg);
      goto done;
    }
  }
  /* Every worker's last word was taken (plain mode ends on the last END;
   * the other modes read each one above): they are ending on their own. */
  rn->ended = n_active == 0 || l->cfg.mode != WDS_MODE_PLAIN;
  post_ready(l, READY_EOF, -1);
done:
  /* Parts in progress read the pending batch's items: wait for them. */
  if (pend.slot >= 0)
    job_finish(rn);
  WDS__ASSERT(atomic_load(&rn->job_left) == 0);
  wds__loader_lock(l);
  if (fl.slot >= 0)
    wds__slot_set(l, fl.slot, SLOT_FREE); /* FILLING, never posted */
  if (pend.slot >= 0)
    wds__slot_set(l, pend.slot, SLOT_FREE);
  wds__loader_unlock(l);
  rows_free(rn, &bcur);
  rows_free(rn, &pend);
  for (int i = 0; in && i < W; i++) {
    for (size_t k = in[i].at; k < in[i].len; k++)
      wds__item_free(in[i].v[k], l->nfields);
    for (size_t k = 0; k < in[i].back.len; k++)
      wds__blk_free(in[i].back.v[k]);
    for (size_t k = 0; k < in[i].back_items.len; k++)
      wds__blk_free(in[i].back_items.v[k]);
    free(in[i].back.v);
    free(in[i].back_items.v);
    free(in[i].v);
  }
  free(in);
  free(fl.first_set);
  free(active);
  return NULL;
}

/* ---- runs: made, launched, stopped ----
 *
 * The next epoch (eager_next_epoch): a run is made with its successor, the
 * next epoch's run (its plan, queues and terminal items; no threads). As
 * each worker of the current run ends (it has handed its last item to its
 * queue and will not touch its block pools again), it starts the
 * successor's worker of the same index, which uses the same pools: so a
 * worker's successor never runs beside it, and the next epoch's reading
 * and shuffle-buffer filling overlap the current epoch's last batches.
 * The successor's collator starts only when the current epoch's end has
 * been delivered (wds__run_next_epoch), so no batch of the next epoch is
 * posted before it. Not for plain mode with samples_per_epoch, where the
 * collator stops workers that have not ended. Aborting a run aborts its
 * successor too (the abort flag is set under l->mu, so no worker starts a
 * successor's worker after it); the wake token is only set to abort, never
 * at a normal end, when the successor's readers may be open. */

static void run_free(wds_loader *l, wds__run *rn) {
  if (rn->w)
    for (int i = 0; i < l->pin.workers; i++) {
      wds__queue_destroy(&rn->w[i].q, l->nfields);
      for (size_t k = 0; k < rn->w[i].npending; k++)
        wds__item_free(rn->w[i].pending[k], l->nfields);
      free(rn->w[i].pending);
      wds__item_free(rn->w[i].terminal, l->nfields);
    }
  wds__run_plan_free(&l->sources, &rn->plan, rn->splan);
  free(rn->w);
  free(rn);
}

/* Joins rn's threads and frees it. abort: they are told to stop (and
 * blocked reads woken: the caller resets the wake token after); else they
 * have ended or are ending on their own. */
static void run_join(wds_loader *l, wds__run *rn, int abort) {
  if (abort) {
    for (int i = 0; i < l->pin.workers; i++)
      if (rn->w[i].q.ring)
        wds__queue_wake(&rn->w[i].q);
    wds__loader_lock(l);
    pthread_cond_broadcast(&l->cv);
    wds__loader_unlock(l);
  }
  for (int i = 0; i < l->pin.workers; i++)
    if (rn->w[i].started)
      pthread_join(rn->w[i].thread, NULL);
  if (rn->collator_started)
    pthread_join(rn->collator, NULL);
  run_free(l, rn);
}

void wds__run_stop(wds_loader *l) {
  wds__run *rn = l->cur;
  if (!rn)
    return;
  wds__loader_lock(l);
  atomic_store(&rn->abort, 1);
  wds__run *nx = rn->succ;
  rn->succ = NULL;
  if (nx)
    atomic_store(&nx->abort, 1); /* no worker starts one of its own now */
  wds__loader_unlock(l);
  wds__cancel_set(&l->wake); /* workers blocked in a read */
  run_join(l, rn, 1);
  if (nx)
    run_join(l, nx, 1);
  /* No reader is open now. A cancel stores its flag before setting the
   * token, so one that comes during the reset is not lost. */
  wds__cancel_reset(&l->wake);
  if (atomic_load(&l->cancelled))
    wds__cancel_set(&l->wake);
  /* Batches prepared but not delivered go back to the pool. */
  wds__loader_lock(l);
  for (int i = 0; i < l->nslots; i++)
    if (l->slots[i].state == SLOT_READY || l->slots[i].state == SLOT_FILLING)
      wds__slot_set(l, i, SLOT_FREE);
  l->ready_len = 0;
  l->ready_head = 0;
  wds__loader_unlock(l);
  l->cur = NULL;
}

/* A run of epoch: planned, its queues and terminal items made; no thread
 * started. */
static int run_make(wds_loader *l, uint64_t epoch, uint64_t skip,
                    wds__run **out) {
  wds__err e;
  *out = NULL;
  wds__run *rn = calloc(1, sizeof *rn);
  if (!rn) {
    wds__set_error(l, "out of memory");
    return WDS_ERR_NOMEM;
  }
  rn->l = l;
  rn->epoch = epoch;
  rn->skip = skip;
  atomic_init(&rn->abort, 0);
  atomic_init(&rn->job_claim, 0);
  atomic_init(&rn->job_left, 0);
  int rc = WDS_OK;
  if (l->elastic_live && l->elastic_plan.w && epoch == l->elastic_epoch &&
      skip == 0) {
    /* The rest of an elastic resume's epoch (state.c): its plan, once. */
    rn->plan = l->elastic_plan;
    rn->splan = l->elastic_splan;
    memset(&l->elastic_plan, 0, sizeof l->elastic_plan);
    l->elastic_splan = NULL;
    rn->elastic = 1;
  } else {
    rc = wds__run_plan(&l->sources, &l->pin, epoch, &rn->plan, &rn->splan, &e);
  }
  if (rc != WDS_OK) {
    wds__set_error(l, "%s", e.msg);
    free(rn);
    return rc;
  }
  rn->w = calloc((size_t)l->pin.workers, sizeof *rn->w);
  if (!rn->w)
    goto nomem;
  for (int i = 0; i < l->pin.workers; i++) {
    rn->w[i].run = rn;
    rn->w[i].index = i;
    rn->w[i].pool = &l->pools[i];
    rn->w[i].ipool = &l->pools[l->cfg.workers + i];
    if (wds__queue_init(&rn->w[i].q, l->queue_cap) != 0 ||
        !(rn->w[i].pending = malloc(l->chunk * sizeof(wds__item *))) ||
        !(rn->w[i].terminal = wds__item_new(NULL, 0, l->nfields, ITEM_END)))
      goto nomem;
  }
  *out = rn;
  return WDS_OK;
nomem:
  run_free(l, rn);
  wds__set_error(l, "out of memory");
  return WDS_ERR_NOMEM;
}

/* Starts l->cur's workers that are not running yet and its collator, and
 * makes its successor when the next epoch may overlap this one. */
static int run_launch(wds_loader *l) {
  wds__run *rn = l->cur;
  for (int i = 0; i < l->pin.workers; i++) {
    wds__loader_lock(l); /* a predecessor may be starting it */
    int rc = 0;
    if (!rn->w[i].started) {
      rc = pthread_create(&rn->w[i].thread, NULL, wds__worker_main, &rn->w[i]);
      rn->w[i].started = rc == 0;
    }
    wds__loader_unlock(l);
    if (rc != 0)
      goto nothread;
  }
  if (pthread_create(&rn->collator, NULL, collator_main, rn) != 0)
    goto nothread;
  rn->collator_started = 1;
  if (l->cfg.eager_next_epoch &&
      !(l->cfg.mode == WDS_MODE_PLAIN && l->cfg.samples_per_epoch) &&
      rn->epoch < UINT64_MAX) {
    wds__run *nx;
    if (run_make(l, rn->epoch + 1, 0, &nx) == WDS_OK) {
      wds__loader_lock(l);
      rn->succ = nx;
      wds__loader_unlock(l);
    } /* else the next epoch starts at this one's end, as without overlap */
  }
  return WDS_OK;
nothread:
  wds__run_stop(l);
  wds__set_error(l, "cannot start a thread");
  return WDS_ERR_NOMEM;
}

int wds__run_start(wds_loader *l, uint64_t epoch, uint64_t skip) {
  int rc = run_make(l, epoch, skip, &l->cur);
  return rc != WDS_OK ? rc : run_launch(l);
}

void wds__worker_handoff(wds__worker *w) {
  wds__run *rn = w->run;
  wds_loader *l = rn->l;
  wds__loader_lock(l);
  wds__run *nx = rn->succ;
  if (nx && !atomic_load(&rn->abort) && !atomic_load(&nx->abort) &&
      !nx->w[w->index].started &&
      pthread_create(&nx->w[w->index].thread, NULL, wds__worker_main,
                     &nx->w[w->index]) == 0)
    nx->w[w->index].started = 1;
  wds__loader_unlock(l);
}

int wds__run_next_epoch(wds_loader *l) {
  wds__run *rn = l->cur;
  if (!rn || !rn->ended) {
    wds__run_stop(l);
  } else {
    wds__loader_lock(l);
    wds__run *nx = rn->succ;
    rn->succ = NULL;
    wds__loader_unlock(l);
    /* Every thread of rn has ended or is ending: no abort, and the wake
     * token stays clear for nx's readers. */
    run_join(l, rn, 0);
    l->cur = NULL;
    if (nx) {
      l->cur = nx;
      return run_launch(l);
    }
  }
  return l->cfg.eager_next_epoch ? wds__run_start(l, l->epoch, 0) : WDS_OK;
}
