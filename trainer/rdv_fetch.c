/* rdv_fetch.c — the rendezvous client (every process but 0): connect to
 * process 0, send the hello, read the blob. See rendezvous.h for the
 * protocol.
 *
 * The client retries its connect (the server may start later) with backoff,
 * and bounds every connect, read and write by the same deadline. Messages
 * name the peer (address:port), the count of attempts and the last error,
 * because a rendezvous that fails is almost always a configuration problem
 * the user has to find on another machine. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "trainer/rdv_net.h"
#include "trainer/rendezvous.h"

#define RDV_BACKOFF_FIRST_MS 50
#define RDV_BACKOFF_MAX_MS 1000
#define RDV_CONNECT_MAX_MS 2000 /* per attempt: a silent host is retried */

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
    int64_t until = tr_rdv_now_ms() + RDV_CONNECT_MAX_MS;
    int w = tr_rdv_wait_fd(fd, POLLOUT, until < deadline ? until : deadline);
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
  case TR_RDV_REJECT_VERSION:
    return "its protocol version differs (run the same wds build on every "
           "node)";
  case TR_RDV_REJECT_RANK:
    return "the node rank is out of range";
  case TR_RDV_REJECT_DUPLICATE:
    return "another node already has this node rank";
  case TR_RDV_REJECT_NODES:
    return "node 0 expects a different node count";
  case TR_RDV_REJECT_ABORT:
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
  tr_rdv_host_port(where, sizeof where, addr, port);
  if (port < 1 || port > 65535 || nodes < 2 || node_rank < 1 ||
      node_rank >= nodes || (!blob && cap) || !size || timeout_ms <= 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "rendezvous with %s: bad arguments (port %d, node rank "
                     "%d of %d nodes, timeout %d ms)",
                     where, port, node_rank, nodes, timeout_ms);
  int64_t start = tr_rdv_now_ms(), deadline = start + timeout_ms;
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
    int left = tr_rdv_remaining_ms(deadline);
    if (left == 0) {
      const char *why =
          res ? strerror(last_err) : "name resolution failing temporarily";
      rc = wds__fail(e, WDS_ERR_IO,
                     "rendezvous with %s: no answer after %.1f s (%s, %d "
                     "attempt%s); is node 0 running, and are MASTER_ADDR and "
                     "MASTER_PORT right?",
                     where, tr_rdv_seconds((int)(tr_rdv_now_ms() - start)), why,
                     attempts, attempts == 1 ? "" : "s");
      goto out;
    }
    backoff = backoff ? backoff * 2 : RDV_BACKOFF_FIRST_MS;
    if (backoff > RDV_BACKOFF_MAX_MS)
      backoff = RDV_BACKOFF_MAX_MS;
    tr_rdv_sleep_ms(backoff < left ? backoff : left);
  }

  /* Connected: hello, then the answer. */
  char peer[96];
  {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char text[80] = "";
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
      tr_rdv_sockaddr_text(text, sizeof text, (struct sockaddr *)&ss, len);
    /* " (10.0.0.1:29500)" when addr was a name: the address it reached. */
    if (text[0] && strcmp(text, where) != 0)
      snprintf(peer, sizeof peer, " (%s)", text);
    else
      peer[0] = '\0';
  }
  unsigned char hello[TR_RDV_HELLO_BYTES];
  tr_rdv_put_u32(hello, TR_RDV_MAGIC);
  tr_rdv_put_u16(hello + 4, TR_RDV_VERSION);
  tr_rdv_put_u16(hello + 6, 0);
  tr_rdv_put_u32(hello + 8, (uint32_t)node_rank);
  tr_rdv_put_u32(hello + 12, (uint32_t)nodes);
  int w = tr_rdv_write_full(fd, hello, sizeof hello, deadline);
  if (w != TR_RDV_IO_OK) {
    rc = wds__fail(e, WDS_ERR_IO, "rendezvous with %s%s: sending hello: %s",
                   where, peer,
                   w == TR_RDV_IO_TIMEOUT ? "timed out" : strerror(errno));
    goto out;
  }
  unsigned char head[TR_RDV_REPLY_BYTES];
  size_t got = 0;
  int r = tr_rdv_read_full(fd, head, sizeof head, &got, deadline);
  if (r == TR_RDV_IO_TIMEOUT) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: connected, but no answer after "
                   "%.1f s: node 0 answers once all %d nodes have joined; are "
                   "they all started?",
                   where, peer, tr_rdv_seconds((int)(tr_rdv_now_ms() - start)),
                   nodes);
    goto out;
  }
  if (r != TR_RDV_IO_OK) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: %s before answering (%zu of %d "
                   "bytes); did node 0 fail? see its log",
                   where, peer,
                   r == TR_RDV_IO_EOF ? "node 0 closed the connection"
                                      : strerror(errno),
                   got, TR_RDV_REPLY_BYTES);
    goto out;
  }
  uint32_t magic = tr_rdv_get_u32(head);
  uint16_t version = tr_rdv_get_u16(head + 4),
           status = tr_rdv_get_u16(head + 6);
  uint32_t n = tr_rdv_get_u32(head + 8);
  if (magic != TR_RDV_MAGIC) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: the peer is not a wds rendezvous "
                   "server (bad magic 0x%08x); is MASTER_PORT right?",
                   where, peer, (unsigned)magic);
    goto out;
  }
  if (status != TR_RDV_OK) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: %s node rank %d of %d nodes: %s",
                   where, peer,
                   status == TR_RDV_REJECT_ABORT ? "node 0 gave up on"
                                                 : "node 0 turned away",
                   node_rank, nodes, reject_text(status));
    goto out;
  }
  if (version != TR_RDV_VERSION || n > TR_RDV_MAX_BLOB || n > cap) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: bad answer (protocol version %u, "
                   "%u bytes for a buffer of %zu)",
                   where, peer, (unsigned)version, (unsigned)n, cap);
    goto out;
  }
  r = tr_rdv_read_full(fd, blob, n, &got, deadline);
  if (r != TR_RDV_IO_OK) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous with %s%s: reading the id: %s after %zu of "
                   "%u bytes",
                   where, peer,
                   r == TR_RDV_IO_TIMEOUT ? "timed out"
                   : r == TR_RDV_IO_EOF   ? "node 0 closed the connection"
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

int tr_rdv_fetch(const char *addr, int port, int node_rank, int nodes,
                 void *blob, size_t cap, size_t *size, int timeout_ms,
                 wds__err *e) {
  return fetch_impl(addr, port, node_rank, nodes, blob, cap, size, timeout_ms,
                    NULL, e);
}

int tr_rdv_fetch_keep(const char *addr, int port, int node_rank, int nodes,
                      void *blob, size_t cap, size_t *size, int timeout_ms,
                      int *fd, wds__err *e) {
  if (fd)
    *fd = -1;
  return fetch_impl(addr, port, node_rank, nodes, blob, cap, size, timeout_ms,
                    fd, e);
}
