/* test_interrupt.h — a caller's interrupt check (cfg.interrupt) for tests
 * of Ctrl-C: asked from the caller's thread only, while a call waits; it
 * says stop from its `after`-th call on, and counts the calls other threads
 * make (which a test expects to be none). */
#ifndef WDS_TESTS_TEST_INTERRUPT_H
#define WDS_TESTS_TEST_INTERRUPT_H

#include <pthread.h>
#include <stdatomic.h>

typedef struct interrupter {
  pthread_t caller;
  atomic_int calls, other_thread;
  int after;
} interrupter;

static inline int interrupt_check(void *ctx) {
  interrupter *it = ctx;
  if (!pthread_equal(pthread_self(), it->caller))
    atomic_fetch_add(&it->other_thread, 1);
  return atomic_fetch_add(&it->calls, 1) + 1 >= it->after;
}

#endif
