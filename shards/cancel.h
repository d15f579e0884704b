/* cancel.h — a cancellation token. Internal to wds. (The options every
 * shard open takes, the token among them, are io_opts.h's.)
 *
 * A token is a flag and an eventfd. Setting it is async-signal-safe (an
 * atomic store and a write), so a signal handler may cancel; a source
 * blocked in a read polls the eventfd beside its descriptor and returns
 * WDS_ERR_CANCELLED at once. Loops that do not read check the flag. */
#ifndef WDS_SHARDS_CANCEL_H
#define WDS_SHARDS_CANCEL_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "base/err.h"

typedef struct wds__cancel {
  atomic_int set;
  int fd; /* eventfd, readable once set; -1 if none could be made (then
             blocked reads notice the flag within WDS__CANCEL_POLL_MS) */
  /* The caller's interrupt check (wds_reader_config.interrupt), or NULL:
   * a read that has waited WDS__INTERRUPT_POLL_MS asks it every as often,
   * from the thread that waits (the caller's, or a compressed stream's
   * reading thread); nonzero sets the token. */
  int (*interrupt)(void *ctx);
  void *interrupt_ctx;
} wds__cancel;

/* How often a blocked read re-checks a token that has no eventfd. */
#define WDS__CANCEL_POLL_MS 100
/* How often a wait asks an interrupt check (wds_*_config.interrupt). */
#define WDS__INTERRUPT_POLL_MS 100

/* 0, or -1 when the eventfd cannot be made (the token still works, by
 * polling). */
int wds__cancel_init(wds__cancel *c);
void wds__cancel_destroy(wds__cancel *c);
/* Async-signal-safe and thread-safe. */
void wds__cancel_set(wds__cancel *c);
/* Clears the flag and drains the eventfd (no reader may be blocked on it). */
void wds__cancel_reset(wds__cancel *c);
/* Asks c's interrupt check, when it has one (never under a lock the
 * caller's other threads take: the check may wait for them); a nonzero
 * answer sets c. Returns whether c is set. */
int wds__cancel_interrupted(const wds__cancel *c);
static inline int wds__cancelled(const wds__cancel *c) {
  return c &&
         atomic_load_explicit(&((wds__cancel *)c)->set, memory_order_acquire);
}

/* Monotonic milliseconds. */
uint64_t wds__now_ms(void);

/* *until = the realtime clock ms milliseconds from now: the deadline of a
 * pthread_cond_timedwait slice. */
void wds__deadline_ms(struct timespec *until, long ms);

/* How long a read blocked since start_ms (wds__now_ms) may wait next, in
 * *wait: at most max_ms (-1: no bound), what is left of timeout_ms (< 0:
 * none), WDS__CANCEL_POLL_MS when c has no eventfd to poll, and
 * WDS__INTERRUPT_POLL_MS when c has an interrupt check. Returns
 * WDS_ERR_TIMEOUT with the read-timeout message (naming the timeout) once
 * timeout_ms has passed, WDS_ERR_CANCELLED ("interrupted") when the check,
 * asked once the read has waited WDS__INTERRUPT_POLL_MS, says so, else
 * WDS_OK. Shared by pipe/file sources and http.c, so every scheme times
 * out alike. */
int wds__read_wait(const wds__cancel *c, uint64_t start_ms, int timeout_ms,
                   int max_ms, int *wait, wds__err *err);

/* Sleeps ms milliseconds (a deadline on the monotonic clock) in slices
 * that obey the tokens: WDS_ERR_CANCELLED ("cancelled") at once when c or
 * stop is set (their eventfds are polled; a token without one is looked at
 * every WDS__CANCEL_POLL_MS), or ("interrupted") when c's interrupt check,
 * asked every WDS__INTERRUPT_POLL_MS of the sleep, says stop; WDS_OK at the
 * deadline. c and stop may be NULL. For waits that are not reads (http.c's
 * retry backoff), so that they end as a blocked read would. */
int wds__sleep_ms(const wds__cancel *c, const wds__cancel *stop, long ms,
                  wds__err *err);

/* Either token is set (each may be NULL). */
static inline int wds__cancelled2(const wds__cancel *a, const wds__cancel *b) {
  return wds__cancelled(a) || wds__cancelled(b);
}

#endif
