/* rdv_net.c — the rendezvous files' socket helpers (rdv_net.h): every
 * wait is a poll() against one absolute deadline, so a whole exchange is
 * bounded by one timeout however many reads and writes it takes. */
#include "trainer/rdv_net.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t tr_rdv_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tr_rdv_remaining_ms(int64_t deadline) {
  int64_t r = deadline - tr_rdv_now_ms();
  if (r <= 0)
    return 0;
  return r > INT_MAX ? INT_MAX : (int)r;
}

void tr_rdv_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* "host:port", with brackets around an IPv6 address (truncated to cap: a
 * name in a message). */
void tr_rdv_host_port(char *dst, size_t cap, const char *host, int port) {
  char buf[512];
  int n = strchr(host, ':')
              ? snprintf(buf, sizeof buf, "[%.300s]:%d", host, port)
              : snprintf(buf, sizeof buf, "%.300s:%d", host, port);
  wds__copy_msg(dst, cap, n > 0 ? buf : "?");
}

void tr_rdv_sockaddr_text(char *dst, size_t cap, const struct sockaddr *sa,
                          socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    snprintf(dst, cap, "(unknown address)");
    return;
  }
  tr_rdv_host_port(dst, cap, host, atoi(serv));
}

/* Waits until fd is ready for events or the deadline. 1 ready, 0 timed out,
 * -1 error (errno). */
int tr_rdv_wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, tr_rdv_remaining_ms(deadline));
    if (r > 0)
      return 1;
    if (r == 0)
      return 0;
    if (errno != EINTR)
      return -1;
  }
}

/* Reads exactly n bytes (fd non-blocking); *got counts what arrived. */
int tr_rdv_read_full(int fd, void *buf, size_t n, size_t *got,
                     int64_t deadline) {
  unsigned char *p = buf;
  *got = 0;
  while (*got < n) {
    ssize_t r = recv(fd, p + *got, n - *got, 0);
    if (r > 0) {
      *got += (size_t)r;
      continue;
    }
    if (r == 0)
      return TR_RDV_IO_EOF;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return TR_RDV_IO_ERRNO;
    int w = tr_rdv_wait_fd(fd, POLLIN, deadline);
    if (w == 0)
      return TR_RDV_IO_TIMEOUT;
    if (w < 0)
      return TR_RDV_IO_ERRNO;
  }
  return TR_RDV_IO_OK;
}

/* Writes exactly n bytes (fd non-blocking; no SIGPIPE). */
int tr_rdv_write_full(int fd, const void *buf, size_t n, int64_t deadline) {
  const unsigned char *p = buf;
  size_t done = 0;
  while (done < n) {
    ssize_t r = send(fd, p + done, n - done, MSG_NOSIGNAL);
    if (r > 0) {
      done += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return TR_RDV_IO_ERRNO;
    int w = tr_rdv_wait_fd(fd, POLLOUT, deadline);
    if (w == 0)
      return TR_RDV_IO_TIMEOUT;
    if (w < 0)
      return TR_RDV_IO_ERRNO;
  }
  return TR_RDV_IO_OK;
}

void tr_rdv_encode_reply(unsigned char *h, int status, size_t size) {
  tr_rdv_put_u32(h, TR_RDV_MAGIC);
  tr_rdv_put_u16(h + 4, TR_RDV_VERSION);
  tr_rdv_put_u16(h + 6, (uint16_t)status);
  tr_rdv_put_u32(h + 8, (uint32_t)size);
}
