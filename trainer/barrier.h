/* barrier.h — a reusable thread barrier that can be aborted (internal).
 *
 * pthread_barrier_t cannot be woken: if one rank thread fails, the others
 * would wait in it forever. tr_barrier_abort() makes every current and
 * later tr_barrier_wait() return WDS_ERR_CANCELLED. */
#ifndef WDS_TRAINER_BARRIER_H
#define WDS_TRAINER_BARRIER_H

#include <pthread.h>

#include "wds/status.h"

typedef struct tr_barrier {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int count, waiting;
  unsigned long generation;
  int aborted;
} tr_barrier;

int tr_barrier_init(tr_barrier *b, int count); /* WDS_OK or WDS_ERR_NOMEM */
void tr_barrier_destroy(tr_barrier *b);
int tr_barrier_wait(
    tr_barrier *b); /* WDS_OK, or WDS_ERR_CANCELLED once aborted */
void tr_barrier_abort(tr_barrier *b);

#endif
