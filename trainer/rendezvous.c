/* rendezvous.c — rank 0 serves a small blob (the NCCL unique id) over TCP;
 * the other processes fetch it. See rendezvous.h for the protocol.
 *
 * No threads: the server is one poll() loop over the listening socket and
 * every accepted connection, all non-blocking, against one deadline. A
 * connection moves through three states: accepted (hello partly read),
 * joined (a valid hello: it holds a node rank), and answered. Nobody is
 * answered until every expected node has joined, so a misconfigured job
 * fails on every node instead of leaving some in NCCL init. A joined client
 * that disconnects gives its rank back, so a restarted process can join
 * again; a connection that closes before its hello (a port probe) is dropped.
 *
 * The client retries its connect (the server may start later) with backoff,
 * and bounds every connect, read and write by the same deadline. Messages
 * name the peer (address:port), the count of attempts and the last error,
 * because a rendezvous that fails is almost always a configuration problem
 * the user has to find on another machine. */
#include "trainer/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RDV_BACKOFF_FIRST_MS 50
#define RDV_BACKOFF_MAX_MS 1000
#define RDV_CONNECT_MAX_MS 2000 /* per attempt: a silent host is retried */
#define RDV_EXTRA_CONNS 64      /* connections beyond `clients` (probes) */

/* ---- small helpers ------------------------------------------------------ */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int remaining_ms(int64_t deadline) {
  int64_t r = deadline - now_ms();
  if (r <= 0)
    return 0;
  return r > INT_MAX ? INT_MAX : (int)r;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static void put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

static uint16_t get_u16(const unsigned char *p) {
  return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

/* "host:port", with brackets around an IPv6 address (truncated to cap: a
 * name in a message). */
static void host_port(char *dst, size_t cap, const char *host, int port) {
  char buf[512];
  int n = strchr(host, ':')
              ? snprintf(buf, sizeof buf, "[%.300s]:%d", host, port)
              : snprintf(buf, sizeof buf, "%.300s:%d", host, port);
  wds__copy_msg(dst, cap, n > 0 ? buf : "?");
}

static void sockaddr_text(char *dst, size_t cap, const struct sockaddr *sa,
                          socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    snprintf(dst, cap, "(unknown address)");
    return;
  }
  host_port(dst, cap, host, atoi(serv));
}

static double seconds(int ms) { return ms / 1000.0; }

/* Waits until fd is ready for events or the deadline. 1 ready, 0 timed out,
 * -1 error (errno). */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, remaining_ms(deadline));
    if (r > 0)
      return 1;
    if (r == 0)
      return 0;
    if (errno != EINTR)
      return -1;
  }
}

enum { IO_OK = 0, IO_EOF = 1, IO_TIMEOUT = 2, IO_ERRNO = -1 };

/* Reads exactly n bytes (fd non-blocking); *got counts what arrived. */
static int read_full(int fd, void *buf, size_t n, size_t *got,
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
      return IO_EOF;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return IO_ERRNO;
    int w = wait_fd(fd, POLLIN, deadline);
    if (w == 0)
      return IO_TIMEOUT;
    if (w < 0)
      return IO_ERRNO;
  }
  return IO_OK;
}

/* Writes exactly n bytes (fd non-blocking; no SIGPIPE). */
static int write_full(int fd, const void *buf, size_t n, int64_t deadline) {
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
      return IO_ERRNO;
    int w = wait_fd(fd, POLLOUT, deadline);
    if (w == 0)
      return IO_TIMEOUT;
    if (w < 0)
      return IO_ERRNO;
  }
  return IO_OK;
}

static void encode_reply(unsigned char *h, int status, size_t size) {
  put_u32(h, WDS__RDV_MAGIC);
  put_u16(h + 4, WDS__RDV_VERSION);
  put_u16(h + 6, (uint16_t)status);
  put_u32(h + 8, (uint32_t)size);
}

/* ---- server ------------------------------------------------------------- */

static int listen_on(const struct sockaddr *sa, socklen_t len, int v6only,
                     int *fd_out) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (sa->sa_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
  if (bind(fd, sa, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  *fd_out = fd;
  return 0;
}

int wds__rdv_listen(const char *bind_addr, int port, wds__rdv_listener *l,
                    wds__err *e) {
  l->fd = -1;
  l->port = 0;
  l->addr[0] = '\0';
  if (port < 0 || port > 65535)
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous: port %d is out of range (0..65535)", port);
  int wildcard = !bind_addr || !bind_addr[0];
  const char *shown = wildcard ? "*" : bind_addr;
  int fd = -1, err = 0;
  if (wildcard) {
    /* Dual-stack first; IPv4 alone where the host has no IPv6. */
    struct sockaddr_in6 a6;
    memset(&a6, 0, sizeof a6);
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons((uint16_t)port);
    if (listen_on((struct sockaddr *)&a6, sizeof a6, 0, &fd) != 0) {
      err = errno;
      struct sockaddr_in a4;
      memset(&a4, 0, sizeof a4);
      a4.sin_family = AF_INET;
      a4.sin_addr.s_addr = htonl(INADDR_ANY);
      a4.sin_port = htons((uint16_t)port);
      if (listen_on((struct sockaddr *)&a4, sizeof a4, 0, &fd) != 0)
        err = errno;
    }
  } else {
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int g = getaddrinfo(bind_addr, serv, &hints, &res);
    if (g != 0)
      return wds__fail(e, WDS_ERR_INVALID,
                       "rendezvous: cannot resolve the address to listen on "
                       "'%s': %s",
                       bind_addr, gai_strerror(g));
    err = EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
      if (listen_on(ai->ai_addr, ai->ai_addrlen, 1, &fd) != 0)
        err = errno;
    freeaddrinfo(res);
  }
  if (fd < 0) {
    char where[320];
    host_port(where, sizeof where, shown, port);
    return wds__fail(e, WDS_ERR_IO, "rendezvous: cannot listen on %s: %s%s",
                     where, strerror(err),
                     err == EADDRINUSE
                         ? " (another job or program holds the port: choose "
                           "another MASTER_PORT)"
                         : "");
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
    l->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
  else
    l->port = port;
  host_port(l->addr, sizeof l->addr, shown, l->port);
  l->fd = fd;
  return WDS_OK;
}

void wds__rdv_close(wds__rdv_listener *l) {
  if (l && l->fd >= 0) {
    close(l->fd);
    l->fd = -1;
  }
}

typedef struct conn {
  int fd;
  int rank; /* 0 until a valid hello */
  size_t got;
  unsigned char hello[WDS__RDV_HELLO_BYTES];
  char peer[80];
} conn;

/* Best effort: a client turned away learns why instead of seeing EOF. */
static void send_reject(int fd, int status) {
  unsigned char h[WDS__RDV_REPLY_BYTES];
  encode_reply(h, status, 0);
  (void)!send(fd, h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Checks a complete hello against the server's view; on a bad one, rejects
 * the client and formats the error. */
static int check_hello(const wds__rdv_listener *l, conn *c, conn *conns,
                       int *by_rank, int clients, wds__err *e) {
  uint32_t magic = get_u32(c->hello);
  uint16_t version = get_u16(c->hello + 4);
  uint32_t rank = get_u32(c->hello + 8);
  uint32_t nodes = get_u32(c->hello + 12);
  if (magic != WDS__RDV_MAGIC)
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: peer %s is not a wds rendezvous client "
                     "(bad magic 0x%08x); is another program connecting to "
                     "this port?",
                     l->addr, c->peer, (unsigned)magic);
  if (version != WDS__RDV_VERSION) {
    send_reject(c->fd, WDS__RDV_REJECT_VERSION);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: peer %s speaks protocol version %u, "
                     "node 0 speaks %d (run the same wds build on every node)",
                     l->addr, c->peer, (unsigned)version, WDS__RDV_VERSION);
  }
  if (nodes != (uint32_t)clients + 1) {
    send_reject(c->fd, WDS__RDV_REJECT_NODES);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: peer %s (node %u) says there are %u "
                     "nodes, node 0 expects %d (check the node count on every "
                     "node)",
                     l->addr, c->peer, (unsigned)rank, (unsigned)nodes,
                     clients + 1);
  }
  if (rank < 1 || rank > (uint32_t)clients) {
    send_reject(c->fd, WDS__RDV_REJECT_RANK);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: peer %s sent node rank %u, outside "
                     "1..%d",
                     l->addr, c->peer, (unsigned)rank, clients);
  }
  if (by_rank[rank] >= 0) {
    send_reject(c->fd, WDS__RDV_REJECT_DUPLICATE);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: node rank %u sent by both %s and %s "
                     "(check the node rank of each node)",
                     l->addr, (unsigned)rank, conns[by_rank[rank]].peer,
                     c->peer);
  }
  c->rank = (int)rank;
  return WDS_OK;
}

static int timeout_error(const wds__rdv_listener *l, const conn *conns,
                         int n_conns, const int *by_rank, int clients,
                         int arrived, int timeout_ms, const char *dropped,
                         wds__err *e) {
  char missing[256] = "", silent[256] = "";
  size_t m = 0;
  int listed = 0;
  for (int r = 1; r <= clients && m < sizeof missing; r++) {
    if (by_rank[r] >= 0)
      continue;
    if (listed == 8) {
      m += (size_t)snprintf(missing + m, sizeof missing - m, ", ...");
      break;
    }
    m += (size_t)snprintf(missing + m, sizeof missing - m, "%s%d",
                          listed ? ", " : "", r);
    listed++;
  }
  int n_silent = 0;
  size_t s = 0;
  for (int i = 0; i < n_conns; i++) {
    if (conns[i].rank)
      continue;
    if (n_silent < 4 && s < sizeof silent)
      s += (size_t)snprintf(silent + s, sizeof silent - s, "%s%s",
                            n_silent ? ", " : "", conns[i].peer);
    n_silent++;
  }
  return wds__fail(
      e, WDS_ERR_IO,
      "rendezvous on %s: timed out after %.1f s: %d of %d other "
      "nodes arrived (missing node ranks: %s)%s%s%s%s%s; are all nodes "
      "started, with MASTER_ADDR and MASTER_PORT pointing here?",
      l->addr, seconds(timeout_ms), arrived, clients, missing,
      n_silent ? "; connected without a complete hello: " : "", silent,
      n_silent > 4 ? ", ..." : "",
      dropped[0] ? "; closed before a hello: " : "", dropped);
}

static int serve_impl(wds__rdv_listener *l, const void *blob, size_t size,
                      int clients, int timeout_ms, int *keep, wds__err *e) {
  if (!l || l->fd < 0 || (!blob && size) || size > WDS__RDV_MAX_BLOB ||
      clients < 0 || timeout_ms <= 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous: bad arguments (listener %s, blob size %zu "
                     "of at most %d, %d clients, timeout %d ms)",
                     l && l->fd >= 0 ? "open" : "closed", size,
                     WDS__RDV_MAX_BLOB, clients, timeout_ms);
  if (clients == 0)
    return WDS_OK;
  if (clients > 1 << 20)
    return wds__fail(e, WDS_ERR_INVALID, "rendezvous: %d clients is too many",
                     clients);
  int rc = WDS_OK;
  int cap = clients + RDV_EXTRA_CONNS, n = 0, arrived = 0;
  int64_t deadline = now_ms() + timeout_ms;
  char dropped[128] = "";
  conn *conns = calloc((size_t)cap, sizeof *conns);
  int *by_rank = malloc(((size_t)clients + 1) * sizeof *by_rank);
  struct pollfd *pfds = calloc((size_t)cap + 1, sizeof *pfds);
  if (!conns || !by_rank || !pfds) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "rendezvous: out of memory for %d clients",
                   clients);
    goto out;
  }
  for (int r = 0; r <= clients; r++)
    by_rank[r] = -1;

  while (arrived < clients) {
    int wait = remaining_ms(deadline);
    if (wait == 0) {
      rc = timeout_error(l, conns, n, by_rank, clients, arrived, timeout_ms,
                         dropped, e);
      goto out;
    }
    /* pfds[0] is the listener; a full table leaves newcomers in the
     * backlog until a probe goes away. */
    pfds[0].fd = n < cap ? l->fd : -1;
    pfds[0].events = POLLIN;
    for (int i = 0; i < n; i++) {
      pfds[i + 1].fd = conns[i].fd;
      pfds[i + 1].events = POLLIN;
      pfds[i + 1].revents = 0;
    }
    pfds[0].revents = 0;
    int r = poll(pfds, (nfds_t)n + 1, wait);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      rc = wds__fail(e, WDS_ERR_IO, "rendezvous on %s: poll: %s", l->addr,
                     strerror(errno));
      goto out;
    }
    /* Connections first (indexes match pfds before accepting appends). */
    int n_polled = n;
    for (int i = 0; i < n_polled; i++) {
      if (!pfds[i + 1].revents)
        continue;
      conn *c = &conns[i];
      if (c->rank) {
        /* A joined client has nothing more to say: data is a protocol
         * error, end-of-file means it left and frees its rank. */
        unsigned char b;
        ssize_t got = recv(c->fd, &b, 1, MSG_DONTWAIT);
        if (got > 0) {
          rc = wds__fail(e, WDS_ERR_IO,
                         "rendezvous on %s: peer %s (node %d) sent data after "
                         "its hello",
                         l->addr, c->peer, c->rank);
          goto out;
        }
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
          continue;
        by_rank[c->rank] = -1;
        arrived--;
        close(c->fd);
        c->fd = -1;
        continue;
      }
      ssize_t got = recv(c->fd, c->hello + c->got, sizeof c->hello - c->got,
                         MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR))
        continue;
      if (got <= 0) {
        snprintf(dropped, sizeof dropped, "%s", c->peer);
        close(c->fd);
        c->fd = -1;
        continue;
      }
      c->got += (size_t)got;
      if (c->got < sizeof c->hello)
        continue;
      rc = check_hello(l, c, conns, by_rank, clients, e);
      if (rc != WDS_OK) {
        close(c->fd); /* already told why */
        c->fd = -1;
        goto out;
      }
      by_rank[c->rank] = i;
      arrived++;
    }
    /* Drop closed connections, keeping by_rank in step. */
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (conns[i].fd < 0)
        continue;
      if (k != i) {
        conns[k] = conns[i];
        if (conns[k].rank)
          by_rank[conns[k].rank] = k;
      }
      k++;
    }
    n = k;
    if (pfds[0].revents) {
      while (n < cap) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
              errno == ECONNABORTED)
            break;
          rc = wds__fail(e, WDS_ERR_IO, "rendezvous on %s: accept: %s", l->addr,
                         strerror(errno));
          goto out;
        }
        conn *c = &conns[n++];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        sockaddr_text(c->peer, sizeof c->peer, (struct sockaddr *)&ss, len);
      }
    }
  }

  /* Everyone joined: answer them all. */
  unsigned char head[WDS__RDV_REPLY_BYTES];
  encode_reply(head, WDS__RDV_OK, size);
  for (int i = 0; i < n; i++) {
    if (!conns[i].rank)
      continue;
    int w = write_full(conns[i].fd, head, sizeof head, deadline);
    if (w == IO_OK && size)
      w = write_full(conns[i].fd, blob, size, deadline);
    if (w != IO_OK) {
      rc = wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: sending to peer %s (node %d): %s",
                     l->addr, conns[i].peer, conns[i].rank,
                     w == IO_TIMEOUT ? "timed out" : strerror(errno));
      goto out;
    }
    conns[i].rank = -conns[i].rank; /* answered: no reject on later errors */
  }

out:
  for (int i = 0; conns && i < n; i++) {
    if (conns[i].fd < 0)
      continue;
    if (rc != WDS_OK && conns[i].rank > 0)
      send_reject(conns[i].fd, WDS__RDV_REJECT_ABORT);
    if (rc == WDS_OK && keep && conns[i].rank < 0) {
      keep[-conns[i].rank - 1] = conns[i].fd; /* the client's link */
      continue;
    }
    close(conns[i].fd);
  }
  free(pfds);
  free(by_rank);
  free(conns);
  return rc;
}

int wds__rdv_serve_on(wds__rdv_listener *l, const void *blob, size_t size,
                      int clients, int timeout_ms, wds__err *e) {
  return serve_impl(l, blob, size, clients, timeout_ms, NULL, e);
}

int wds__rdv_serve_keep(wds__rdv_listener *l, const void *blob, size_t size,
                        int clients, int timeout_ms, int *fds, wds__err *e) {
  for (int i = 0; fds && i < clients; i++)
    fds[i] = -1;
  return serve_impl(l, blob, size, clients, timeout_ms, fds, e);
}

int wds__rdv_serve(const char *bind_addr, int port, const void *blob,
                   size_t size, int clients, int timeout_ms, wds__err *e) {
  wds__rdv_listener l;
  int rc = wds__rdv_listen(bind_addr, port, &l, e);
  if (rc != WDS_OK)
    return rc;
  rc = wds__rdv_serve_on(&l, blob, size, clients, timeout_ms, e);
  wds__rdv_close(&l);
  return rc;
}

/* ---- client ------------------------------------------------------------- */

/* Errors worth retrying: the server is not up (yet), or the network is
 * still coming up. */
static int retryable(int err) {
  switch (err) {
  case ECONNREFUSED:
  case ETIMEDOUT:
  case EHOSTUNREACH:
  case ENETUNREACH:
  case ECONNRESET:
  case ECONNABORTED:
  case EADDRNOTAVAIL:
  case EAGAIN:
  case EINTR:
    return 1;
  default:
    return 0;
  }
}

/* One connect to one address, bounded by min(deadline, the per-attempt
 * limit). Returns the fd, or -1 with *err set. */
static int connect_once(const struct addrinfo *ai, int64_t deadline, int *err) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      *err = errno;
      goto fail;
    }
    int64_t until = now_ms() + RDV_CONNECT_MAX_MS;
    int w = wait_fd(fd, POLLOUT, until < deadline ? until : deadline);
    if (w <= 0) {
      *err = w == 0 ? ETIMEDOUT : errno;
      goto fail;
    }
    int so = 0;
    socklen_t len = sizeof so;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0)
      so = errno;
    if (so != 0) {
      *err = so;
      goto fail;
    }
  }
  /* A client on a free local port can connect to itself (TCP simultaneous
   * open) when nothing listens on a port of the ephemeral range. */
  struct sockaddr_storage self, peer;
  socklen_t ls = sizeof self, lp = sizeof peer;
  if (getsockname(fd, (struct sockaddr *)&self, &ls) == 0 &&
      getpeername(fd, (struct sockaddr *)&peer, &lp) == 0 && ls == lp &&
      memcmp(&self, &peer, ls) == 0) {
    *err = ECONNREFUSED;
    goto fail;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
fail:
  close(fd);
  return -1;
}

static const char *reject_text(int status) {
  switch (status) {
  case WDS__RDV_REJECT_VERSION:
    return "its protocol version differs (run the same wds build on every "
           "node)";
  case WDS__RDV_REJECT_RANK:
    return "the node rank is out of range";
  case WDS__RDV_REJECT_DUPLICATE:
    return "another node already has this node rank";
  case WDS__RDV_REJECT_NODES:
    return "node 0 expects a different node count";
  case WDS__RDV_REJECT_ABORT:
    return "node 0 failed (see its log)";
  default:
    return "unknown reason";
  }
}

static int fetch_impl(const char *addr, int port, int node_rank, int nodes,
                      void *blob, size_t cap, size_t *size, int timeout_ms,
                      int *keep_fd, wds__err *e) {
  if (size)
    *size = 0;
  if (!addr || !addr[0])
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous: no address for node 0 (set MASTER_ADDR)");
  char where[320];
  host_port(where, sizeof where, addr, port);
  if (port < 1 || port > 65535 || nodes < 2 || node_rank < 1 ||
      node_rank >= nodes || (!blob && cap) || !size || timeout_ms <= 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous with %s: bad arguments (port %d, node rank "
                     "%d of %d nodes, timeout %d ms)",
                     where, port, node_rank, nodes, timeout_ms);
  int64_t start = now_ms(), deadline = start + timeout_ms;
  int rc = WDS_OK, fd = -1, attempts = 0, last_err = 0, backoff = 0;
  int gai = 0;
  struct addrinfo *res = NULL;
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);

  for (;;) {
    if (!res) {
      struct addrinfo hints;
      memset(&hints, 0, sizeof hints);
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      gai = getaddrinfo(addr, serv, &hints, &res);
      if (gai != 0 && gai != EAI_AGAIN) {
        rc = wds__fail(e, WDS_ERR_IO,
                       "rendezvous with %s: cannot resolve '%s': %s (check "
                       "MASTER_ADDR)",
                       where, addr,
                       gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
        goto out;
      }
      if (gai != 0)
        res = NULL;
    }
    /* Retry while one address of the name may still answer; an address
     * family the host lacks (an IPv6 result on an IPv4-only host) is not
     * one. */
    int hopeless = res != NULL, first_err = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
      attempts++;
      int err = 0;
      fd = connect_once(ai, deadline, &err);
      if (fd < 0) {
        if (retryable(err)) {
          hopeless = 0;
          last_err = err;
        } else if (!first_err) {
          first_err = err;
        }
      }
    }
    if (fd >= 0)
      break;
    if (hopeless) {
      rc = wds__fail(e, WDS_ERR_IO, "rendezvous with %s: connect: %s", where,
                     strerror(first_err));
      goto out;
    }
    int left = remaining_ms(deadline);
    if (left == 0) {
      const char *why =
          res ? strerror(last_err) : "name resolution failing temporarily";
      rc = wds__fail(e, WDS_ERR_IO,
                     "rendezvous with %s: no answer after %.1f s (%s, %d "
                     "attempt%s); is node 0 running, and are MASTER_ADDR and "
                     "MASTER_PORT right?",
                     where, seconds((int)(now_ms() - start)), why, attempts,
                     attempts == 1 ? "" : "s");
      goto out;
    }
    backoff = backoff ? backoff * 2 : RDV_BACKOFF_FIRST_MS;
    if (backoff > RDV_BACKOFF_MAX_MS)
      backoff = RDV_BACKOFF_MAX_MS;
    sleep_ms(backoff < left ? backoff : left);
  }

  /* Connected: hello, then the answer. */
  char peer[96];
  {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char text[80] = "";
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
      sockaddr_text(text, sizeof text, (struct sockaddr *)&ss, len);
    /* " (10.0.0.1:29500)" when addr was a name: the address it reached. */
    if (text[0] && strcmp(text, where) != 0)
      snprintf(peer, sizeof peer, " (%s)", text);
    else
      peer[0] = '\0';
  }
  unsigned char hello[WDS__RDV_HELLO_BYTES];
  put_u32(hello, WDS__RDV_MAGIC);
  put_u16(hello + 4, WDS__RDV_VERSION);
  put_u16(hello + 6, 0);
  put_u32(hello + 8, (uint32_t)node_rank);
  put_u32(hello + 12, (uint32_t)nodes);
  int w = write_full(fd, hello, sizeof hello, deadline);
  if (w != IO_OK) {
    rc =
        wds__fail(e, WDS_ERR_IO, "rendezvous with %s%s: sending hello: %s",
                  where, peer, w == IO_TIMEOUT ? "timed out" : strerror(errno));
    goto out;
  }
  unsigned char head[WDS__RDV_REPLY_BYTES];
  size_t got = 0;
  int r = read_full(fd, head, sizeof head, &got, deadline);
  if (r == IO_TIMEOUT) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: connected, but no answer after "
                   "%.1f s: node 0 answers once all %d nodes have joined; are "
                   "they all started?",
                   where, peer, seconds((int)(now_ms() - start)), nodes);
    goto out;
  }
  if (r != IO_OK) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: %s before answering (%zu of %d "
                   "bytes); did node 0 fail? see its log",
                   where, peer,
                   r == IO_EOF ? "node 0 closed the connection"
                               : strerror(errno),
                   got, WDS__RDV_REPLY_BYTES);
    goto out;
  }
  uint32_t magic = get_u32(head);
  uint16_t version = get_u16(head + 4), status = get_u16(head + 6);
  uint32_t n = get_u32(head + 8);
  if (magic != WDS__RDV_MAGIC) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: the peer is not a wds rendezvous "
                   "server (bad magic 0x%08x); is MASTER_PORT right?",
                   where, peer, (unsigned)magic);
    goto out;
  }
  if (status != WDS__RDV_OK) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: %s node rank %d of %d nodes: %s",
                   where, peer,
                   status == WDS__RDV_REJECT_ABORT ? "node 0 gave up on"
                                                   : "node 0 turned away",
                   node_rank, nodes, reject_text(status));
    goto out;
  }
  if (version != WDS__RDV_VERSION || n > WDS__RDV_MAX_BLOB || n > cap) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: bad answer (protocol version %u, "
                   "%u bytes for a buffer of %zu)",
                   where, peer, (unsigned)version, (unsigned)n, cap);
    goto out;
  }
  r = read_full(fd, blob, n, &got, deadline);
  if (r != IO_OK) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: reading the id: %s after %zu of "
                   "%u bytes",
                   where, peer,
                   r == IO_TIMEOUT ? "timed out"
                   : r == IO_EOF   ? "node 0 closed the connection"
                                   : strerror(errno),
                   got, (unsigned)n);
    goto out;
  }
  *size = n;

out:
  if (fd >= 0 && rc == WDS_OK && keep_fd)
    *keep_fd = fd; /* the link to node 0 */
  else if (fd >= 0)
    close(fd);
  if (res)
    freeaddrinfo(res);
  return rc;
}

int wds__rdv_fetch(const char *addr, int port, int node_rank, int nodes,
                   void *blob, size_t cap, size_t *size, int timeout_ms,
                   wds__err *e) {
  return fetch_impl(addr, port, node_rank, nodes, blob, cap, size, timeout_ms,
                    NULL, e);
}

int wds__rdv_fetch_keep(const char *addr, int port, int node_rank, int nodes,
                        void *blob, size_t cap, size_t *size, int timeout_ms,
                        int *fd, wds__err *e) {
  if (fd)
    *fd = -1;
  return fetch_impl(addr, port, node_rank, nodes, blob, cap, size, timeout_ms,
                    fd, e);
}

/* ---- the job's links: failures of other processes ------------------------ */

struct wds__rdv_link {
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
static void send_all(wds__rdv_link *k, char msg, int except) {
  pthread_mutex_lock(&k->mu);
  for (int i = 0; i < k->n; i++)
    if (i != except && k->fds[i] >= 0)
      (void)!send(k->fds[i], &msg, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  pthread_mutex_unlock(&k->mu);
}

/* Marks the link aborted; 1 for the first caller. */
static int first_abort(wds__rdv_link *k) {
  pthread_mutex_lock(&k->mu);
  int first = !k->aborted;
  k->aborted = 1;
  pthread_mutex_unlock(&k->mu);
  return first;
}

static void peer_failed(wds__rdv_link *k, int i, const char *what) {
  if (!first_abort(k))
    return;
  if (k->relay) /* node 0 tells everyone else */
    send_all(k, 'A', i);
  char why[160];
  snprintf(why, sizeof why, "%s %s", k->names[i], what);
  k->on_abort(k->ctx, why);
}

static void *link_main(void *arg) {
  wds__rdv_link *k = arg;
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

int wds__rdv_link_start(int *fds, int n, int relay, int first_peer,
                        void (*on_abort)(void *ctx, const char *why), void *ctx,
                        wds__rdv_link **out, wds__err *e) {
  *out = NULL;
  wds__rdv_link *k = calloc(1, sizeof *k);
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
    wds__rdv_link_finish(k, 0);
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
    wds__rdv_link_finish(k, 0);
    return wds__fail(e, WDS_ERR_NOMEM,
                     "rendezvous link: cannot start a "
                     "thread");
  }
  k->started = 1;
  *out = k;
  return WDS_OK;
}

void wds__rdv_link_abort(wds__rdv_link *k) {
  if (k && first_abort(k))
    send_all(k, 'A', -1);
}

void wds__rdv_link_finish(wds__rdv_link *k, int ok) {
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

/* ---- topology from flags and environment -------------------------------- */

typedef struct getter {
  const char *(*get)(const char *name, void *ctx);
  void *ctx;
} getter;

static const char *var(const getter *g, const char *name) {
  const char *v = g->get(name, g->ctx);
  return v && v[0] ? v : NULL;
}

/* Strict decimal in [lo, hi]; the error names the variable and value. */
static int parse_int(const char *name, const char *v, long lo, long hi,
                     int *out, wds__err *e) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return wds__fail(e, WDS_ERR_INVALID, "%s='%s': not an integer in %ld..%ld",
                     name, v, lo, hi);
  *out = (int)x;
  return WDS_OK;
}

/* An explicit value, else the first variable of names[] that is set.
 * *from is the flag or variable that gave the value (NULL: none). */
static int pick_int(const getter *g, int explicit_value, const char *flag,
                    const char *const *names, long lo, long hi, int *out,
                    const char **from, wds__err *e) {
  if (explicit_value != -1) {
    if (explicit_value < lo || explicit_value > hi)
      return wds__fail(e, WDS_ERR_INVALID, "%s %d: not in %ld..%ld", flag,
                       explicit_value, lo, hi);
    *out = explicit_value;
    *from = flag;
    return WDS_OK;
  }
  for (; *names; names++) {
    const char *v = var(g, *names);
    if (v) {
      *from = *names;
      return parse_int(*names, v, lo, hi, out, e);
    }
  }
  *from = NULL;
  return WDS_OK;
}

static const char *env_get(const char *name, void *ctx) {
  (void)ctx;
  return getenv(name);
}

int wds__rdv_resolve(wds__rdv_config *c,
                     const char *(*get)(const char *name, void *ctx), void *ctx,
                     wds__err *e) {
  getter g = {get, ctx};
  int rc;
  c->per_process = 0;
  c->rank = c->world_size = c->local_rank = c->local_world_size = -1;

  /* Address and port. */
  if (!c->master_addr[0]) {
    const char *a = var(&g, "MASTER_ADDR");
    if (a) {
      if (strlen(a) >= sizeof c->master_addr)
        return wds__fail(e, WDS_ERR_INVALID, "MASTER_ADDR='%.64s...': too long",
                         a);
      snprintf(c->master_addr, sizeof c->master_addr, "%s", a);
    }
  }
  const char *port_from;
  int port = WDS__RDV_DEFAULT_PORT;
  static const char *const port_vars[] = {"MASTER_PORT", NULL};
  rc = pick_int(&g, c->master_port, "--master-port", port_vars, 1, 65535, &port,
                &port_from, e);
  if (rc)
    return rc;

  /* One process per GPU (torchrun). */
  const char *rank_s = var(&g, "RANK"), *world_s = var(&g, "WORLD_SIZE");
  const char *lrank_s = var(&g, "LOCAL_RANK");
  const char *lworld_s = var(&g, "LOCAL_WORLD_SIZE");
  const char *nodes_from = NULL, *rank_from = NULL;
  int nodes = 1, node_rank = 0;
  if (rank_s || world_s || lrank_s) {
    const char *names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK"};
    const char *vals[] = {rank_s, world_s, lrank_s};
    int set = vals[0] ? 0 : vals[1] ? 1 : 2;
    for (int i = 0; i < 3; i++)
      if (!vals[i])
        return wds__fail(e, WDS_ERR_INVALID,
                         "%s is not set, but %s='%s' is (one process per GPU "
                         "needs RANK, WORLD_SIZE and LOCAL_RANK, as torchrun "
                         "sets them)",
                         names[i], names[set], vals[set]);
    int world = 0, rank = 0, lrank = 0, lworld = 0;
    if ((rc = parse_int("WORLD_SIZE", world_s, 1, 1 << 20, &world, e)) ||
        (rc = parse_int("RANK", rank_s, 0, world - 1, &rank, e)))
      return rc;
    lworld = world;
    if (lworld_s &&
        (rc = parse_int("LOCAL_WORLD_SIZE", lworld_s, 1, world, &lworld, e)))
      return rc;
    if ((rc = parse_int("LOCAL_RANK", lrank_s, 0, lworld - 1, &lrank, e)))
      return rc;
    if (world % lworld != 0)
      return wds__fail(e, WDS_ERR_INVALID,
                       "WORLD_SIZE=%d is not a multiple of LOCAL_WORLD_SIZE=%d "
                       "(every node must run the same number of processes)",
                       world, lworld);
    if (rank % lworld != lrank)
      return wds__fail(e, WDS_ERR_INVALID,
                       "RANK=%d and LOCAL_RANK=%d disagree with "
                       "LOCAL_WORLD_SIZE=%d (expected LOCAL_RANK=%d: ranks are "
                       "numbered node by node)",
                       rank, lrank, lworld, rank % lworld);
    nodes = world / lworld;
    node_rank = rank / lworld;
    if (c->nodes != -1 && c->nodes != nodes)
      return wds__fail(e, WDS_ERR_INVALID,
                       "--nodes %d disagrees with WORLD_SIZE=%d / "
                       "LOCAL_WORLD_SIZE=%d = %d nodes",
                       c->nodes, world, lworld, nodes);
    if (c->node_rank != -1 && c->node_rank != node_rank)
      return wds__fail(e, WDS_ERR_INVALID,
                       "--node-rank %d disagrees with RANK=%d / "
                       "LOCAL_WORLD_SIZE=%d = node %d",
                       c->node_rank, rank, lworld, node_rank);
    /* torchrun's own store listens on MASTER_PORT on the first node. */
    if (c->master_port == -1) {
      if (port == 65535)
        return wds__fail(e, WDS_ERR_INVALID,
                         "MASTER_PORT=65535: one process per GPU uses "
                         "MASTER_PORT + 1 (torchrun's store holds "
                         "MASTER_PORT); set the port explicitly");
      port++;
    }
    c->per_process = 1;
    c->rank = rank;
    c->world_size = world;
    c->local_rank = lrank;
    c->local_world_size = lworld;
    c->rdv_rank = rank;
    c->rdv_size = world;
    snprintf(c->source, sizeof c->source, "torchrun (RANK, WORLD_SIZE)");
  } else {
    static const char *const nodes_vars[] = {"NNODES", "SLURM_NNODES", NULL};
    static const char *const rank_vars[] = {"NODE_RANK", "SLURM_NODEID", NULL};
    if ((rc = pick_int(&g, c->nodes, "--nodes", nodes_vars, 1, 1 << 16, &nodes,
                       &nodes_from, e)))
      return rc;
    if ((rc = pick_int(&g, c->node_rank, "--node-rank", rank_vars, 0,
                       (1 << 16) - 1, &node_rank, &rank_from, e)))
      return rc;
    if (!nodes_from)
      nodes = 1;
    if (!rank_from) {
      if (nodes > 1)
        return wds__fail(e, WDS_ERR_INVALID,
                         "%s=%d but no node rank: set NODE_RANK (0..%d) or "
                         "--node-rank",
                         nodes_from, nodes, nodes - 1);
      node_rank = 0;
    }
    if (node_rank >= nodes && !nodes_from)
      return wds__fail(e, WDS_ERR_INVALID,
                       "%s=%d but no node count: set NNODES or --nodes",
                       rank_from, node_rank);
    if (node_rank >= nodes)
      return wds__fail(e, WDS_ERR_INVALID,
                       "%s=%d is out of range for %s=%d (0..%d)", rank_from,
                       node_rank, nodes_from, nodes, nodes - 1);
    c->rdv_rank = node_rank;
    c->rdv_size = nodes;
    if (!nodes_from)
      snprintf(c->source, sizeof c->source, "single node");
    else
      snprintf(c->source, sizeof c->source, "%s, %s", nodes_from,
               rank_from ? rank_from : "-");
  }
  c->nodes = nodes;
  c->node_rank = node_rank;
  c->master_port = port;
  if (!c->master_addr[0]) {
    if (c->rdv_size > 1)
      return wds__fail(
          e, WDS_ERR_INVALID,
          "%d %s (%s) but MASTER_ADDR is not set: export MASTER_ADDR=<address "
          "of node 0> (under SLURM: $(scontrol show hostnames "
          "\"$SLURM_JOB_NODELIST\" | head -n1)) or pass --master-addr",
          c->rdv_size, c->per_process ? "processes" : "nodes", c->source);
    snprintf(c->master_addr, sizeof c->master_addr, "127.0.0.1");
  }
  return WDS_OK;
}

int wds__rdv_env(wds__rdv_config *c, wds__err *e) {
  return wds__rdv_resolve(c, env_get, NULL, e);
}
