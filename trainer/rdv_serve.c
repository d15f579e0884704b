/* rdv_serve.c — the rendezvous server (process 0): listen, wait for every
 * other process's hello, answer them all with the blob. See rendezvous.h for
 * the protocol.
 *
 * No threads: the server is one poll() loop over the listening socket and
 * every accepted connection, all non-blocking, against one deadline. A
 * connection moves through three states: accepted (hello partly read),
 * joined (a valid hello: it holds a node rank), and answered. Nobody is
 * answered until every expected node has joined, so a misconfigured job
 * fails on every node instead of leaving some in NCCL init. A joined client
 * that disconnects gives its rank back, so a restarted process can join
 * again; a connection that closes before its hello (a port probe) is
 * dropped. Messages name the peer (address:port), because a rendezvous that
 * fails is almost always a configuration problem the user has to find on
 * another machine. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "trainer/rdv_net.h"
#include "trainer/rendezvous.h"

#define RDV_EXTRA_CONNS 64 /* connections beyond `clients` (probes) */

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

int tr_rdv_listen(const char *bind_addr, int port, tr_rdv_listener *l,
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
    tr_rdv_host_port(where, sizeof where, shown, port);
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
  tr_rdv_host_port(l->addr, sizeof l->addr, shown, l->port);
  l->fd = fd;
  return WDS_OK;
}

void tr_rdv_close(tr_rdv_listener *l) {
  if (l && l->fd >= 0) {
    close(l->fd);
    l->fd = -1;
  }
}

typedef struct conn {
  int fd;
  int rank; /* 0 until a valid hello */
  size_t got;
  unsigned char hello[TR_RDV_HELLO_BYTES];
  char peer[80];
} conn;

/* Best effort: a client turned away learns why instead of seeing EOF. */
static void send_reject(int fd, int status) {
  unsigned char h[TR_RDV_REPLY_BYTES];
  tr_rdv_encode_reply(h, status, 0);
  (void)!send(fd, h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Checks a complete hello against the server's view; on a bad one, rejects
 * the client and formats the error. */
static int check_hello(const tr_rdv_listener *l, conn *c, conn *conns,
                       int *by_rank, int clients, wds__err *e) {
  uint16_t version = tr_rdv_get_u16(c->hello + 4);
  uint32_t rank = tr_rdv_get_u32(c->hello + 8);
  uint32_t nodes = tr_rdv_get_u32(c->hello + 12);
  if (version != TR_RDV_VERSION) {
    send_reject(c->fd, TR_RDV_REJECT_VERSION);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: peer %s speaks protocol version %u, "
                     "node 0 speaks %d (run the same wds build on every node)",
                     l->addr, c->peer, (unsigned)version, TR_RDV_VERSION);
  }
  if (nodes != (uint32_t)clients + 1) {
    send_reject(c->fd, TR_RDV_REJECT_NODES);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: peer %s (node %u) says there are %u "
                     "nodes, node 0 expects %d (check the node count on every "
                     "node)",
                     l->addr, c->peer, (unsigned)rank, (unsigned)nodes,
                     clients + 1);
  }
  if (rank < 1 || rank > (uint32_t)clients) {
    send_reject(c->fd, TR_RDV_REJECT_RANK);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: peer %s sent node rank %u, outside "
                     "1..%d",
                     l->addr, c->peer, (unsigned)rank, clients);
  }
  if (by_rank[rank] >= 0) {
    send_reject(c->fd, TR_RDV_REJECT_DUPLICATE);
    return wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: node rank %u sent by both %s and %s "
                     "(check the node rank of each node)",
                     l->addr, (unsigned)rank, conns[by_rank[rank]].peer,
                     c->peer);
  }
  c->rank = (int)rank;
  return WDS_OK;
}

static int timeout_error(const tr_rdv_listener *l, const conn *conns,
                         int n_conns, const int *by_rank, int clients,
                         int arrived, int timeout_ms, const char *dropped,
                         const char *strangers, wds__err *e) {
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
      "nodes arrived (missing node ranks: %s)%s%s%s%s%s%s%s; are all "
      "nodes started, with MASTER_ADDR and MASTER_PORT pointing here?",
      l->addr, tr_rdv_seconds(timeout_ms), arrived, clients, missing,
      n_silent ? "; connected without a complete hello: " : "", silent,
      n_silent > 4 ? ", ..." : "",
      dropped[0] ? "; closed before a hello: " : "", dropped,
      strangers[0] ? "; dropped, not a wds client: " : "", strangers);
}

static int serve_impl(tr_rdv_listener *l, const void *blob, size_t size,
                      int clients, int timeout_ms, int *keep, wds__err *e) {
  if (!l || l->fd < 0 || (!blob && size) || size > TR_RDV_MAX_BLOB ||
      clients < 0 || timeout_ms <= 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous: bad arguments (listener %s, blob size %zu "
                     "of at most %d, %d clients, timeout %d ms)",
                     l && l->fd >= 0 ? "open" : "closed", size, TR_RDV_MAX_BLOB,
                     clients, timeout_ms);
  if (clients == 0)
    return WDS_OK;
  if (clients > 1 << 20)
    return wds__fail(e, WDS_ERR_INVALID, "rendezvous: %d clients is too many",
                     clients);
  int rc = WDS_OK;
  int cap = clients + RDV_EXTRA_CONNS, n = 0, arrived = 0;
  int64_t deadline = tr_rdv_now_ms() + timeout_ms;
  char dropped[128] = "", strangers[128] = "";
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
    int wait = tr_rdv_remaining_ms(deadline);
    if (wait == 0) {
      rc = timeout_error(l, conns, n, by_rank, clients, arrived, timeout_ms,
                         dropped, strangers, e);
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
      /* Another program on the port (a scanner, a health check, a client
       * of something else): its connection is dropped and the rendezvous
       * goes on; the job's nodes are still awaited. */
      if (c->got >= 4 && tr_rdv_get_u32(c->hello) != TR_RDV_MAGIC) {
        snprintf(strangers, sizeof strangers, "%s (bad magic 0x%08x)", c->peer,
                 (unsigned)tr_rdv_get_u32(c->hello));
        close(c->fd);
        c->fd = -1;
        continue;
      }
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
        tr_rdv_sockaddr_text(c->peer, sizeof c->peer, (struct sockaddr *)&ss,
                             len);
      }
    }
  }

  /* Everyone joined: answer them all. */
  unsigned char head[TR_RDV_REPLY_BYTES];
  tr_rdv_encode_reply(head, TR_RDV_OK, size);
  for (int i = 0; i < n; i++) {
    if (!conns[i].rank)
      continue;
    int w = tr_rdv_write_full(conns[i].fd, head, sizeof head, deadline);
    if (w == TR_RDV_IO_OK && size)
      w = tr_rdv_write_full(conns[i].fd, blob, size, deadline);
    if (w != TR_RDV_IO_OK) {
      rc = wds__fail(e, WDS_ERR_IO,
                     "rendezvous on %s: sending to peer %s (node %d): %s",
                     l->addr, conns[i].peer, conns[i].rank,
                     w == TR_RDV_IO_TIMEOUT ? "timed out" : strerror(errno));
      goto out;
    }
    conns[i].rank = -conns[i].rank; /* answered: no reject on later errors */
  }

out:
  for (int i = 0; conns && i < n; i++) {
    if (conns[i].fd < 0)
      continue;
    if (rc != WDS_OK && conns[i].rank > 0)
      send_reject(conns[i].fd, TR_RDV_REJECT_ABORT);
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

int tr_rdv_serve_on(tr_rdv_listener *l, const void *blob, size_t size,
                    int clients, int timeout_ms, wds__err *e) {
  return serve_impl(l, blob, size, clients, timeout_ms, NULL, e);
}

int tr_rdv_serve_keep(tr_rdv_listener *l, const void *blob, size_t size,
                      int clients, int timeout_ms, int *fds, wds__err *e) {
  for (int i = 0; fds && i < clients; i++)
    fds[i] = -1;
  return serve_impl(l, blob, size, clients, timeout_ms, fds, e);
}

int tr_rdv_serve(const char *bind_addr, int port, const void *blob, size_t size,
                 int clients, int timeout_ms, wds__err *e) {
  tr_rdv_listener l;
  int rc = tr_rdv_listen(bind_addr, port, &l, e);
  if (rc != WDS_OK)
    return rc;
  rc = tr_rdv_serve_on(&l, blob, size, clients, timeout_ms, e);
  tr_rdv_close(&l);
  return rc;
}
