/* cancel.c — the cancellation token (see cancel.h). */
#include "cancel.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

int wds__cancel_init(wds__cancel *c) {
  atomic_init(&c->set, 0);
  c->interrupt = NULL;
  c->interrupt_ctx = NULL;
  c->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return c->fd >= 0 ? 0 : -1;
}

void wds__cancel_destroy(wds__cancel *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
}

void wds__cancel_set(wds__cancel *c) {
  int saved = errno; /* signal handlers must not change errno */
  atomic_store_explicit(&c->set, 1, memory_order_release);
  if (c->fd >= 0) {
    uint64_t one = 1;
    ssize_t n = write(c->fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is already non-zero, which is enough */
  }
  errno = saved;
}

void wds__cancel_reset(wds__cancel *c) {
  if (c->fd >= 0) {
    uint64_t v;
    ssize_t n = read(c->fd, &v, sizeof v);
    (void)n; /* EAGAIN: nothing was written */
  }
  atomic_store_explicit(&c->set, 0, memory_order_release);
}

int wds__cancel_interrupted(const wds__cancel *c) {
  if (!c)
    return 0;
  if (wds__cancelled(c))
    return 1;
  if (c->interrupt && c->interrupt(c->interrupt_ctx)) {
    wds__cancel_set((wds__cancel *)c); /* the flag, not the check, changes */
    return 1;
  }
  return 0;
}

uint64_t wds__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void wds__deadline_ms(struct timespec *until, long ms) {
  clock_gettime(CLOCK_REALTIME, until);
  until->tv_sec += ms / 1000;
  until->tv_nsec += (ms % 1000) * 1000000L;
  if (until->tv_nsec >= 1000000000L) {
    until->tv_sec++;
    until->tv_nsec -= 1000000000L;
  }
}

int wds__read_wait(const wds__cancel *c, uint64_t start_ms, int timeout_ms,
                   int max_ms, int *wait, wds__err *err) {
  int w = max_ms;
  if (c && c->interrupt) {
    if (wds__now_ms() - start_ms >= WDS__INTERRUPT_POLL_MS &&
        wds__cancel_interrupted(c))
      return wds__fail(err, WDS_ERR_CANCELLED, "interrupted");
    if (w < 0 || w > WDS__INTERRUPT_POLL_MS)
      w = WDS__INTERRUPT_POLL_MS;
  }
  if (timeout_ms >= 0) {
    uint64_t waited = wds__now_ms() - start_ms;
    if (waited >= (uint64_t)timeout_ms)
      return wds__fail(err, WDS_ERR_TIMEOUT,
                       "no data for %.1f s (the read timeout; raise it with "
                       "--read-timeout or read_timeout_ms)",
                       (double)timeout_ms / 1000);
    if (w < 0 || (uint64_t)timeout_ms - waited < (uint64_t)w)
      w = (int)((uint64_t)timeout_ms - waited);
  }
  if (c && c->fd < 0 && (w < 0 || w > WDS__CANCEL_POLL_MS))
    w = WDS__CANCEL_POLL_MS; /* no eventfd: look at the flag often */
  *wait = w;
  return WDS_OK;
}

int wds__sleep_ms(const wds__cancel *c, const wds__cancel *stop, long ms,
                  wds__err *err) {
  uint64_t start = wds__now_ms(), until = start + (ms > 0 ? (uint64_t)ms : 0);
  uint64_t asked = start; /* when the interrupt check was last due */
  for (;;) {
    if (wds__cancelled(c) || wds__cancelled(stop))
      return wds__fail(err, WDS_ERR_CANCELLED, "cancelled");
    uint64_t t = wds__now_ms();
    if (c && c->interrupt && t - asked >= WDS__INTERRUPT_POLL_MS) {
      asked = t;
      if (wds__cancel_interrupted(c))
        return wds__fail(err, WDS_ERR_CANCELLED, "interrupted");
    }
    if (t >= until)
      return WDS_OK;
    uint64_t wait = until - t;
    if (c && c->interrupt && wait > asked + WDS__INTERRUPT_POLL_MS - t)
      wait = asked + WDS__INTERRUPT_POLL_MS - t;
    if (((c && c->fd < 0) || (stop && stop->fd < 0)) &&
        wait > WDS__CANCEL_POLL_MS)
      wait = WDS__CANCEL_POLL_MS; /* no eventfd: look at the flag often */
    struct pollfd p[2] = {{.fd = c ? c->fd : -1, .events = POLLIN},
                          {.fd = stop ? stop->fd : -1, .events = POLLIN}};
    poll(p, 2, (int)wait);
  }
}
