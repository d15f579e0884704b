/* queue.c — the bounded queue from a worker to the collator.
 *
 * One mutex and two condition variables per queue; a ring of cap item
 * pointers. Items move in chunks (one lock and one wake-up per chunk).
 * Every wait also ends when the run's abort flag is set: run_stop sets it,
 * then wakes both sides (wds__queue_wake). A pusher may have other work
 * than waiting for room (a worker: slot copies, run.c's wds__worker_push):
 * its `busy` check, asked under the queue's lock, sends it back to do that
 * work, and wds__queue_wake_pushers wakes it when some arrives. The queue
 * knows nothing of what the work is. */
#include "loader/internal.h"

int wds__queue_init(wds__queue *q, size_t cap) {
  memset(q, 0, sizeof *q);
  q->ring = calloc(cap, sizeof *q->ring);
  if (!q->ring)
    return -1;
  q->cap = cap;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->not_empty, NULL);
  pthread_cond_init(&q->not_full, NULL);
  return 0;
}

void wds__queue_destroy(wds__queue *q, size_t nfields) {
  if (!q->ring)
    return;
  for (size_t i = 0; i < q->len; i++)
    wds__item_free(q->ring[(q->head + i) % q->cap], nfields);
  free(q->ring);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->not_empty);
  pthread_cond_destroy(&q->not_full);
  q->ring = NULL;
}

/* Chunks, not items: per-item hand-offs cost more than reading a small
 * sample. */
int wds__queue_push_many(wds__queue *q, wds__item **its, size_t n,
                         atomic_int *abort_flag, int (*busy)(void *ctx),
                         void *ctx) {
  pthread_mutex_lock(&q->mu);
  while (q->cap - q->len < n && !atomic_load(abort_flag)) {
    if (busy && busy(ctx)) { /* other work than waiting: the caller's */
      pthread_mutex_unlock(&q->mu);
      return WDS__QUEUE_BUSY;
    }
    pthread_cond_wait(&q->not_full, &q->mu);
  }
  if (atomic_load(abort_flag)) {
    pthread_mutex_unlock(&q->mu);
    return WDS__QUEUE_ABORTED;
  }
  WDS__ASSERT(n <= q->cap - q->len && q->head < q->cap);
  for (size_t i = 0; i < n; i++)
    q->ring[(q->head + q->len + i) % q->cap] = its[i];
  q->len += n;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
  return WDS__QUEUE_PUSHED;
}

size_t wds__queue_pop_many(wds__queue *q, wds__item **out, size_t max,
                           atomic_int *abort_flag) {
  size_t n = 0;
  pthread_mutex_lock(&q->mu);
  while (q->len == 0 && !atomic_load(abort_flag))
    pthread_cond_wait(&q->not_empty, &q->mu);
  if (!atomic_load(abort_flag)) {
    for (; n < max && q->len > 0; n++) {
      out[n] = q->ring[q->head];
      q->head = (q->head + 1) % q->cap;
      q->len--;
    }
    pthread_cond_signal(&q->not_full);
    WDS__ASSERT(n > 0 && n <= max && q->len < q->cap); /* at least one */
  }
  pthread_mutex_unlock(&q->mu);
  return n;
}

void wds__queue_wake(wds__queue *q) {
  pthread_mutex_lock(&q->mu);
  pthread_cond_broadcast(&q->not_empty);
  pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
}

void wds__queue_wake_pushers(wds__queue *q) {
  pthread_mutex_lock(&q->mu);
  pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
}
