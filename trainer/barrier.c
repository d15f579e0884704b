/* barrier.c — abortable barrier: a generation counter under a mutex; the
 * last thread to arrive starts the next generation and wakes the rest. */
#include "trainer/barrier.h"

int tr_barrier_init(tr_barrier *b, int count) {
  b->count = count;
  b->waiting = 0;
  b->generation = 0;
  b->aborted = 0;
  if (pthread_mutex_init(&b->mu, NULL) != 0)
    return WDS_ERR_NOMEM;
  if (pthread_cond_init(&b->cv, NULL) != 0) {
    pthread_mutex_destroy(&b->mu);
    return WDS_ERR_NOMEM;
  }
  return WDS_OK;
}

void tr_barrier_destroy(tr_barrier *b) {
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
}

int tr_barrier_wait(tr_barrier *b) {
  int rc = WDS_OK;
  pthread_mutex_lock(&b->mu);
  if (b->aborted) {
    rc = WDS_ERR_CANCELLED;
  } else if (++b->waiting == b->count) {
    b->waiting = 0;
    b->generation++;
    pthread_cond_broadcast(&b->cv);
  } else {
    unsigned long gen = b->generation;
    while (gen == b->generation && !b->aborted)
      pthread_cond_wait(&b->cv, &b->mu);
    if (gen == b->generation)
      rc = WDS_ERR_CANCELLED;
  }
  pthread_mutex_unlock(&b->mu);
  return rc;
}

void tr_barrier_abort(tr_barrier *b) {
  pthread_mutex_lock(&b->mu);
  b->aborted = 1;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}
