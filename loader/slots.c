/* slots.c — the loader's batch pool: its slots made at open (the
 * collation's view, the ready FIFO, the fences' scratch) and freed at
 * close, the slot states' transitions (wds__slot_set, the comment in
 * internal.h), the ready FIFO's pop, and the fences of
 * wds_loader_release_after: a slot given back behind a fence is FENCED (it
 * counts as held) until the fence's done(), polled by next() (which calls
 * the oldest fence's wait() when the collator waits for a slot) and drained
 * by close(); fence_mu makes one thread at a time run fence callbacks,
 * outside mu. Moved out of loader.c, which calls it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loader/handle.h"

/* Collation's skips go through the loader's count, text and log. */
static void collate_skip(void *ctx, const char *msg) {
  wds__note_skip(ctx, "skipped", msg);
}

int wds__slots_setup(wds_loader *l, wds__err *oe) {
  l->col = (wds__collate){l->fields,
                          l->nfields,
                          l->cfg.batch_size,
                          l->cfg.on_error,
                          l->cfg.last_batch,
                          (const char *const *)l->sources.urls.urls,
                          l->alloc,
                          collate_skip,
                          l,
                          &l->st_fill,
                          &l->st_pool_bytes,
                          l->sources.shard_source};
  l->nslots = (int)l->cfg.prefetch_batches;
  l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
  l->ready = calloc((size_t)l->nslots + 2, sizeof *l->ready);
  l->fence_tmp = calloc((size_t)l->nslots, sizeof *l->fence_tmp);
  if (!l->slots || !l->ready || !l->fence_tmp)
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  for (int k = 0; k < l->nslots; k++) {
    wds__err e;
    int rc = wds__slot_init(&l->col, &l->slots[k], k, &e);
    if (rc != WDS_OK)
      return wds__fail(oe, rc, "%s", e.msg);
  }
  return WDS_OK;
}

void wds__slots_free(wds_loader *l) {
  if (!l->slots)
    return;
  for (int k = 0; k < l->nslots; k++)
    wds__slot_free(&l->col, &l->slots[k]);
  free(l->slots);
  free(l->ready);
  free(l->fence_tmp);
  l->slots = NULL;
}

/* ---- slot states ---- */

/* Whether the slot comment (internal.h) allows from -> to. */
static int slot_move_ok(int from, int to) {
  switch (to) {
  case SLOT_FILLING:
    return from == SLOT_FREE;
  case SLOT_READY:
    return from == SLOT_FILLING;
  case SLOT_HELD:
    return from == SLOT_READY;
  case SLOT_FENCED:
    return from == SLOT_HELD;
  case SLOT_FREE: /* released, fence done, dropped or undelivered */
    return from != SLOT_FREE;
  default:
    return 0;
  }
}

/* held and fenced agree with the slots' states (called with l->mu held). */
static int slot_counts_ok(const wds_loader *l) {
  int held = 0, fenced = 0;
  for (int i = 0; i < l->nslots; i++) {
    held += l->slots[i].state == SLOT_HELD || l->slots[i].state == SLOT_FENCED;
    fenced += l->slots[i].state == SLOT_FENCED;
  }
  return held == l->held && fenced == l->fenced;
}

void wds__slot_set(wds_loader *l, int i, int to) {
  WDS__ASSERT_LOCKED(l);
  WDS__ASSERT(i >= 0 && i < l->nslots);
  wds__slot *s = &l->slots[i];
  int from = s->state;
  WDS__ASSERT(slot_move_ok(from, to));
  /* HELD and FENCED count in held, FENCED also in fenced. */
  l->held += (to == SLOT_HELD) -
             (to == SLOT_FREE && (from == SLOT_HELD || from == SLOT_FENCED));
  l->fenced += (to == SLOT_FENCED) - (from == SLOT_FENCED);
  s->state = to;
  WDS__ASSERT(0 <= l->fenced && l->fenced <= l->held && l->held <= l->nslots);
  WDS__ASSERT(slot_counts_ok(l));
}

/* The ready FIFO's oldest entry, taken (called with l->mu held, the FIFO
 * not empty). A slot entry's slot is READY: run_stop empties the FIFO when
 * it frees READY slots. */
wds__ready_entry wds__ready_pop(wds_loader *l) {
  WDS__ASSERT_LOCKED(l);
  size_t cap = (size_t)l->nslots + 2;
  WDS__ASSERT(l->ready_len > 0 && l->ready_len <= cap && l->ready_head < cap);
  wds__ready_entry r = l->ready[l->ready_head];
  l->ready_head = (l->ready_head + 1) % cap;
  l->ready_len--;
  WDS__ASSERT(r.kind == READY_SLOT || r.kind == READY_EOF ||
              r.kind == READY_ERROR);
  WDS__ASSERT(r.kind != READY_SLOT || (r.slot >= 0 && r.slot < l->nslots &&
                                       l->slots[r.slot].state == SLOT_READY));
  return r;
}

/* ---- fences (wds_loader_release_after) ---- */

int wds__fenced_count(wds_loader *l) {
  wds__loader_lock(l);
  int n = l->fenced;
  wds__loader_unlock(l);
  return n;
}

/* Frees the FENCED slots whose fences are done, calling their drop(). With
 * `block` and none done, waits for the oldest: its wait(), or a millisecond
 * when it has none (the caller polls again). Returns the slots freed. */
int wds__fences_poll(wds_loader *l, int block) {
  pthread_mutex_lock(&l->fence_mu);
  int n = 0;
  wds__loader_lock(l);
  for (int i = 0; i < l->nslots; i++)
    if (l->slots[i].state == SLOT_FENCED)
      l->fence_tmp[n++] = i;
  wds__loader_unlock(l);
  /* The fence fields of these slots change only under fence_mu: read
   * without mu from here on. */
  int freed = 0, oldest = -1;
  for (int k = 0; k < n; k++) {
    wds__slot *s = &l->slots[l->fence_tmp[k]];
    if (!s->fence.done(s->fence.ctx)) {
      if (oldest < 0 || s->fence_seq < l->slots[oldest].fence_seq)
        oldest = l->fence_tmp[k];
      l->fence_tmp[k] = -1;
      continue;
    }
    freed++;
  }
  if (block && freed == 0 && oldest >= 0) {
    wds__slot *s = &l->slots[oldest];
    if (s->fence.wait) {
      s->fence.wait(s->fence.ctx);
      l->fence_tmp[0] = oldest;
      n = freed = 1;
    } else {
      struct timespec ms = {0, 1000 * 1000};
      nanosleep(&ms, NULL);
    }
  }
  for (int k = 0; freed && k < n; k++) {
    if (l->fence_tmp[k] < 0)
      continue;
    wds__slot *s = &l->slots[l->fence_tmp[k]];
    wds_release_fence f = s->fence;
    wds__loader_lock(l);
    wds__slot_set(l, l->fence_tmp[k], SLOT_FREE); /* FENCED -> FREE */
    memset(&s->fence, 0, sizeof s->fence);
    /* The collator has a slot now (it sets the flag again if it still
     * lacks one): next() waits for no further fence meanwhile. */
    l->collator_waits = 0;
    pthread_cond_broadcast(&l->cv);
    wds__loader_unlock(l);
    if (f.drop)
      f.drop(f.ctx);
  }
  pthread_mutex_unlock(&l->fence_mu);
  return freed;
}

int wds__release_after(wds_loader *l, const wds_batch *b,
                       const wds_release_fence *fence) {
  if (!b || !fence || !fence->done || b->slot < 0 || b->slot >= l->nslots ||
      b != &l->slots[b->slot].batch) {
    wds__set_error(l, "wds_loader_release_after: %s",
                   !fence || !fence->done ? "the fence has no done()"
                                          : "not a batch of this loader");
    return WDS_ERR_INVALID;
  }
  pthread_mutex_lock(&l->fence_mu);
  wds__loader_lock(l);
  wds__slot *s = &l->slots[b->slot];
  int ok = s->state == SLOT_HELD;
  if (ok) {
    s->fence = *fence;
    s->fence_seq = l->fence_next++;
    wds__slot_set(l, b->slot, SLOT_FENCED);
  }
  wds__loader_unlock(l);
  pthread_mutex_unlock(&l->fence_mu);
  if (!ok) {
    wds__set_error(l,
                   "wds_loader_release_after: batch %" PRIu64
                   " of epoch %" PRIu64 " is not held (released twice?)",
                   b->index, b->epoch);
    return WDS_ERR_INVALID;
  }
  wds__fences_poll(l, 0); /* perhaps done already */
  return WDS_OK;
}

/* close(): every fence's slot back, every drop() called. */
void wds__fences_drain(wds_loader *l) {
  while (wds__fenced_count(l) > 0)
    wds__fences_poll(l, 1);
}
