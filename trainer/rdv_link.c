/* rdv_link.c — the job's links: the rendezvous connections, kept open,
 * watched by one thread per process for a peer's failure ('A'), goodbye
 * ('D') or loss (the socket closing before its goodbye). See rendezvous.h.
 *
 * Threads: the link's thread polls every socket and a wake pipe; others
 * only send, under mu, and the thread closes a socket under mu, so a send
 * never goes to a closed (or reused) descriptor. on_abort is called at most
 * once, from the link's thread. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "trainer/rdv_net.h"
#include "trainer/rendezvous.h"

struct tr_rdv_link {
  int *fds;
  char (*names)[32];
  int *done; /* the peer said goodbye */
  int n, relay;
  int wake[2];
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  int aborted;
  void (*on_abort)(void *ctx, const char *why);
  void *ctx;
};

/* (The link's thread closes sockets under mu: others send under it.) */
static void send_all(tr_rdv_link *k, char msg, int except) {
  pthread_mutex_lock(&k->mu);
  for (int i = 0; i < k->n; i++)
    if (i != except && k->fds[i] >= 0)
      (void)!send(k->fds[i], &msg, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  pthread_mutex_unlock(&k->mu);
}

/* Marks the link aborted; 1 for the first caller. */
static int first_abort(tr_rdv_link *k) {
  pthread_mutex_lock(&k->mu);
  int first = !k->aborted;
  k->aborted = 1;
  pthread_mutex_unlock(&k->mu);
  return first;
}

static void peer_failed(tr_rdv_link *k, int i, const char *what) {
  if (!first_abort(k))
    return;
  if (k->relay) /* node 0 tells everyone else */
    send_all(k, 'A', i);
  char why[160];
  snprintf(why, sizeof why, "%s %s", k->names[i], what);
  k->on_abort(k->ctx, why);
}

static void *link_main(void *arg) {
  tr_rdv_link *k = arg;
  struct pollfd *p = calloc((size_t)k->n + 1, sizeof *p);
  if (!p)
    return NULL;
  for (;;) {
    p[0].fd = k->wake[0];
    p[0].events = POLLIN;
    for (int i = 0; i < k->n; i++) {
      p[i + 1].fd = k->fds[i]; /* -1: ignored by poll */
      p[i + 1].events = POLLIN;
      p[i + 1].revents = 0;
    }
    if (poll(p, (nfds_t)k->n + 1, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (p[0].revents)
      break; /* finish() */
    for (int i = 0; i < k->n; i++) {
      if (!p[i + 1].revents || k->fds[i] < 0)
        continue;
      char buf[64];
      ssize_t got = recv(k->fds[i], buf, sizeof buf, MSG_DONTWAIT);
      if (got < 0 &&
          (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        continue;
      for (ssize_t j = 0; j < got; j++) {
        if (buf[j] == 'D')
          k->done[i] = 1;
        else if (buf[j] == 'A')
          peer_failed(k, i, "failed (see its log)");
      }
      if (got <= 0) { /* closed: fine after a goodbye, a failure before */
        pthread_mutex_lock(&k->mu);
        close(k->fds[i]);
        k->fds[i] = -1;
        pthread_mutex_unlock(&k->mu);
        if (!k->done[i])
          peer_failed(k, i, "exited or lost its connection");
      }
    }
  }
  free(p);
  return NULL;
}

int tr_rdv_link_start(int *fds, int n, int relay, int first_peer,
                      void (*on_abort)(void *ctx, const char *why), void *ctx,
                      tr_rdv_link **out, wds__err *e) {
  *out = NULL;
  tr_rdv_link *k = calloc(1, sizeof *k);
  if (!k)
    return wds__fail(e, WDS_ERR_NOMEM, "rendezvous link: out of memory");
  k->n = n;
  k->relay = relay;
  k->on_abort = on_abort;
  k->ctx = ctx;
  k->wake[0] = k->wake[1] = -1;
  k->fds = calloc((size_t)n + 1, sizeof *k->fds);
  k->done = calloc((size_t)n + 1, sizeof *k->done);
  k->names = calloc((size_t)n + 1, sizeof *k->names);
  pthread_mutex_init(&k->mu, NULL);
  if (!k->fds || !k->done || !k->names || pipe2(k->wake, O_CLOEXEC) != 0) {
    tr_rdv_link_finish(k, 0);
    for (int i = 0; i < n; i++)
      if (fds[i] >= 0)
        close(fds[i]);
    return wds__fail(e, WDS_ERR_NOMEM, "rendezvous link: out of resources");
  }
  for (int i = 0; i < n; i++) {
    k->fds[i] = fds[i];
    snprintf(k->names[i], sizeof k->names[i], "process %d", first_peer + i);
  }
  if (pthread_create(&k->thread, NULL, link_main, k) != 0) {
    tr_rdv_link_finish(k, 0);
    return wds__fail(e, WDS_ERR_NOMEM,
                     "rendezvous link: cannot start a "
                     "thread");
  }
  k->started = 1;
  *out = k;
  return WDS_OK;
}

void tr_rdv_link_abort(tr_rdv_link *k) {
  if (k && first_abort(k))
    send_all(k, 'A', -1);
}

void tr_rdv_link_finish(tr_rdv_link *k, int ok) {
  if (!k)
    return;
  if (k->started) {
    if (ok) {
      pthread_mutex_lock(&k->mu);
      int say = !k->aborted;
      pthread_mutex_unlock(&k->mu);
      if (say)
        send_all(k, 'D', -1);
    }
    (void)!write(k->wake[1], "x", 1);
    pthread_join(k->thread, NULL);
  }
  for (int i = 0; k->fds && i < k->n; i++)
    if (k->fds[i] >= 0)
      close(k->fds[i]);
  if (k->wake[0] >= 0)
    close(k->wake[0]);
  if (k->wake[1] >= 0)
    close(k->wake[1]);
  pthread_mutex_destroy(&k->mu);
  free(k->fds);
  free(k->done);
  free(k->names);
  free(k);
}

/* ---- one blob from process 0, before the links start -------------------- */

int tr_rdv_blob_send(const int *fds, int n, int first_peer, const void *blob,
                     size_t size, int timeout_ms, wds__err *e) {
  if ((!blob && size) || size > TR_RDV_MAX_BLOB || timeout_ms <= 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous: bad arguments (blob size %zu of at most %d, "
                     "timeout %d ms)",
                     size, TR_RDV_MAX_BLOB, timeout_ms);
  int64_t deadline = tr_rdv_now_ms() + timeout_ms;
  unsigned char head[4];
  tr_rdv_put_u32(head, (uint32_t)size);
  for (int i = 0; i < n; i++) {
    int w = tr_rdv_write_full(fds[i], head, sizeof head, deadline);
    if (w == TR_RDV_IO_OK && size)
      w = tr_rdv_write_full(fds[i], blob, size, deadline);
    if (w != TR_RDV_IO_OK)
      return wds__fail(e, WDS_ERR_IO, "rendezvous: sending to process %d: %s",
                       first_peer + i,
                       w == TR_RDV_IO_TIMEOUT ? "timed out" : strerror(errno));
  }
  return WDS_OK;
}

int tr_rdv_blob_recv(int fd, void *blob, size_t cap, size_t *size,
                     int timeout_ms, wds__err *e) {
  *size = 0;
  if ((!blob && cap) || timeout_ms <= 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous: bad arguments (timeout %d ms)", timeout_ms);
  int64_t deadline = tr_rdv_now_ms() + timeout_ms;
  unsigned char head[4];
  size_t got = 0;
  int r = tr_rdv_read_full(fd, head, sizeof head, &got, deadline);
  uint32_t n = r == TR_RDV_IO_OK ? tr_rdv_get_u32(head) : 0;
  if (r == TR_RDV_IO_OK && (n > TR_RDV_MAX_BLOB || n > cap))
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous: process 0 sent %u bytes for a buffer of %zu "
                     "(another wds version?)",
                     (unsigned)n, cap);
  if (r == TR_RDV_IO_OK && n)
    r = tr_rdv_read_full(fd, blob, n, &got, deadline);
  if (r != TR_RDV_IO_OK)
    return wds__fail(e, WDS_ERR_IO, "rendezvous: reading from process 0: %s",
                     r == TR_RDV_IO_TIMEOUT ? "timed out"
                     : r == TR_RDV_IO_EOF
                         ? "process 0 closed the connection (did it fail? "
                           "see its log)"
                         : strerror(errno));
  *size = n;
  return WDS_OK;
}
