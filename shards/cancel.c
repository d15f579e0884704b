/* cancel.c — the cancellation token (see cancel.h). */
#include "cancel.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int wds__cancel_init(wds__cancel *c) {
  atomic_init(&c->set, 0);
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
