/* test_rendezvous.c — the TCP rendezvous (server thread + client threads on
 * the loopback interface, ephemeral ports) and topology from environment
 * variables. No GPU needed. */
#include "trainer/procgroup.h"
#include "trainer/rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/test.h"

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A port that was free a moment ago (bound by the kernel, then released). */
static int free_port(void) {
  tr_rdv_listener l;
  wds__err e;
  if (tr_rdv_listen("127.0.0.1", 0, &l, &e) != WDS_OK)
    return -1;
  int port = l.port;
  tr_rdv_close(&l);
  return port;
}

static void fill_blob(unsigned char *b, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b[i] = (unsigned char)x;
  }
}

/* ---- server and client threads ------------------------------------------ */

typedef struct server_arg {
  tr_rdv_listener *l;
  const char *bind_addr; /* used when l is NULL: listen on port after delay */
  int port, delay_ms;
  const unsigned char *blob;
  size_t size;
  int clients, timeout_ms;
  int rc;
  int64_t elapsed_ms;
  wds__err e;
} server_arg;

static void *server_main(void *p) {
  server_arg *a = p;
  int64_t t0 = now_ms();
  if (a->l) {
    a->rc = tr_rdv_serve_on(a->l, a->blob, a->size, a->clients, a->timeout_ms,
                            &a->e);
  } else {
    sleep_ms(a->delay_ms);
    a->rc = tr_rdv_serve(a->bind_addr, a->port, a->blob, a->size, a->clients,
                         a->timeout_ms, &a->e);
  }
  a->elapsed_ms = now_ms() - t0;
  return NULL;
}

typedef struct client_arg {
  const char *addr;
  int port, node_rank, nodes, timeout_ms;
  unsigned char blob[TR_RDV_MAX_BLOB];
  size_t size;
  int rc;
  int64_t elapsed_ms;
  wds__err e;
} client_arg;

static void *client_main(void *p) {
  client_arg *a = p;
  int64_t t0 = now_ms();
  a->rc = tr_rdv_fetch(a->addr, a->port, a->node_rank, a->nodes, a->blob,
                       sizeof a->blob, &a->size, a->timeout_ms, &a->e);
  a->elapsed_ms = now_ms() - t0;
  return NULL;
}

static void client_init(client_arg *c, const char *addr, int port, int rank,
                        int nodes, int timeout_ms) {
  memset(c, 0, sizeof *c);
  c->addr = addr;
  c->port = port;
  c->node_rank = rank;
  c->nodes = nodes;
  c->timeout_ms = timeout_ms;
  c->rc = 12345;
}

/* A raw TCP client on 127.0.0.1 (for hellos the library would not send). */
static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void make_hello(unsigned char *h, uint32_t magic, uint16_t version,
                       uint32_t rank, uint32_t nodes) {
  uint32_t v[4] = {htonl(magic), htonl((uint32_t)version << 16), htonl(rank),
                   htonl(nodes)};
  memcpy(h, v, 16);
}

/* Reads the 12-byte reply of a raw client (status, or -1 on EOF/error). */
static int raw_reply_status(int fd) {
  unsigned char h[TR_RDV_REPLY_BYTES];
  size_t got = 0;
  while (got < sizeof h) {
    ssize_t r = recv(fd, h + got, sizeof h - got, 0);
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return h[6] << 8 | h[7];
}

/* ---- exchange ----------------------------------------------------------- */

TEST(serve_three_clients) {
  unsigned char blob[128];
  fill_blob(blob, sizeof blob, 1);
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  ASSERT_TRUE(l.port > 0);
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 3,
                  .timeout_ms = 10000};
  static client_arg c[3];
  pthread_t ts, tc[3];
  pthread_create(&ts, NULL, server_main, &s);
  for (int i = 0; i < 3; i++) {
    client_init(&c[i], "127.0.0.1", l.port, i + 1, 4, 10000);
    pthread_create(&tc[i], NULL, client_main, &c[i]);
  }
  for (int i = 0; i < 3; i++)
    pthread_join(tc[i], NULL);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  if (s.rc != WDS_OK)
    printf("  server: %s\n", s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_OK);
  for (int i = 0; i < 3; i++) {
    if (c[i].rc != WDS_OK)
      printf("  client %d: %s\n", i + 1, c[i].e.msg);
    ASSERT_EQ_INT(c[i].rc, WDS_OK);
    ASSERT_EQ_U64(c[i].size, sizeof blob);
    ASSERT_TRUE(memcmp(c[i].blob, blob, sizeof blob) == 0);
  }
}

/* The largest blob, through a name ("localhost") resolved by getaddrinfo;
 * the server listens on every interface. */
TEST(max_blob_by_name_wildcard) {
  static unsigned char blob[TR_RDV_MAX_BLOB];
  fill_blob(blob, sizeof blob, 2);
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen(NULL, 0, &l, &e), WDS_OK);
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 1,
                  .timeout_ms = 10000};
  static client_arg c;
  client_init(&c, "localhost", l.port, 1, 2, 10000);
  pthread_t ts, tc;
  pthread_create(&ts, NULL, server_main, &s);
  pthread_create(&tc, NULL, client_main, &c);
  pthread_join(tc, NULL);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  ASSERT_EQ_INT(s.rc, WDS_OK);
  if (c.rc)
    printf("  client: %s\n", c.e.msg);
  ASSERT_EQ_INT(c.rc, WDS_OK);
  ASSERT_EQ_U64(c.size, sizeof blob);
  ASSERT_TRUE(memcmp(c.blob, blob, sizeof blob) == 0);
}

TEST(ipv6_loopback) {
  tr_rdv_listener l;
  wds__err e;
  if (tr_rdv_listen("::1", 0, &l, &e) != WDS_OK)
    SKIP("no IPv6 loopback here: %.900s", e.msg);
  ASSERT_CONTAINS(l.addr, "[::1]:");
  unsigned char blob[128];
  fill_blob(blob, sizeof blob, 3);
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 1,
                  .timeout_ms = 10000};
  static client_arg c;
  client_init(&c, "::1", l.port, 1, 2, 10000);
  pthread_t ts, tc;
  pthread_create(&ts, NULL, server_main, &s);
  pthread_create(&tc, NULL, client_main, &c);
  pthread_join(tc, NULL);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  ASSERT_EQ_INT(s.rc, WDS_OK);
  ASSERT_EQ_INT(c.rc, WDS_OK);
  ASSERT_TRUE(memcmp(c.blob, blob, sizeof blob) == 0);
}

/* Clients start first; the server comes up 300 ms later on a known port. */
TEST(clients_before_server) {
  int port = free_port();
  ASSERT_TRUE(port > 0);
  unsigned char blob[128];
  fill_blob(blob, sizeof blob, 4);
  server_arg s = {.bind_addr = "127.0.0.1",
                  .port = port,
                  .delay_ms = 300,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 2,
                  .timeout_ms = 10000};
  static client_arg c[2];
  pthread_t ts, tc[2];
  int64_t t0 = now_ms();
  for (int i = 0; i < 2; i++) {
    client_init(&c[i], "127.0.0.1", port, i + 1, 3, 10000);
    pthread_create(&tc[i], NULL, client_main, &c[i]);
  }
  pthread_create(&ts, NULL, server_main, &s);
  for (int i = 0; i < 2; i++)
    pthread_join(tc[i], NULL);
  pthread_join(ts, NULL);
  int64_t elapsed = now_ms() - t0;
  if (s.rc)
    printf("  server: %s\n", s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_OK);
  for (int i = 0; i < 2; i++) {
    if (c[i].rc)
      printf("  client: %s\n", c[i].e.msg);
    ASSERT_EQ_INT(c[i].rc, WDS_OK);
    ASSERT_TRUE(memcmp(c[i].blob, blob, sizeof blob) == 0);
  }
  /* Retries back off to at most ~400 ms apart around the 300 ms mark. */
  printf("  clients done after %lld ms\n", (long long)elapsed);
  ASSERT_TRUE(elapsed >= 300 && elapsed < 2000);
}

/* ---- failures ----------------------------------------------------------- */

TEST(nothing_listens) {
  int port = free_port();
  ASSERT_TRUE(port > 0);
  static client_arg c;
  client_init(&c, "127.0.0.1", port, 1, 2, 1000);
  client_main(&c);
  printf("  %lld ms: %s\n", (long long)c.elapsed_ms, c.e.msg);
  ASSERT_EQ_INT(c.rc, WDS_ERR_IO);
  ASSERT_TRUE(c.elapsed_ms >= 900 && c.elapsed_ms <= 1500);
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", port);
  ASSERT_CONTAINS(c.e.msg, where);
  ASSERT_CONTAINS(c.e.msg, "no answer after 1.0 s");
  ASSERT_CONTAINS(c.e.msg, "Connection refused");
  ASSERT_CONTAINS(c.e.msg, "attempts");
  ASSERT_CONTAINS(c.e.msg, "is node 0 running");
}

TEST(unresolvable_name) {
  static client_arg c;
  client_init(&c, "no-such-host.invalid", 29500, 1, 2, 1000);
  client_main(&c);
  printf("  %s\n", c.e.msg);
  ASSERT_EQ_INT(c.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(c.e.msg, "no-such-host.invalid");
  ASSERT_TRUE(c.elapsed_ms <= 1500);
}

TEST(bad_arguments) {
  unsigned char b[16];
  size_t n;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_fetch("127.0.0.1", 0, 1, 2, b, sizeof b, &n, 100, &e),
                WDS_ERR_INVALID);
  ASSERT_EQ_INT(tr_rdv_fetch("127.0.0.1", 1, 2, 2, b, sizeof b, &n, 100, &e),
                WDS_ERR_INVALID);
  ASSERT_EQ_INT(tr_rdv_fetch("", 1, 1, 2, b, sizeof b, &n, 100, &e),
                WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "MASTER_ADDR");
  tr_rdv_listener l;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  static unsigned char big[TR_RDV_MAX_BLOB + 1];
  ASSERT_EQ_INT(tr_rdv_serve_on(&l, big, sizeof big, 1, 100, &e),
                WDS_ERR_INVALID);
  ASSERT_EQ_INT(tr_rdv_serve_on(&l, big, 1, 0, 100, &e), WDS_OK);
  /* The port is taken: a second listener says so. */
  tr_rdv_listener l2;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", l.port, &l2, &e), WDS_ERR_IO);
  ASSERT_CONTAINS(e.msg, "in use");
  ASSERT_EQ_INT(l2.fd, -1);
  tr_rdv_close(&l);
  tr_rdv_close(&l2); /* fd -1: no-op */
}

/* Only 1 of 2 clients arrives: the server times out naming the count, and
 * the client that did arrive is told node 0 failed. */
TEST(server_timeout_one_of_two) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  unsigned char blob[128] = {0};
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 2,
                  .timeout_ms = 500};
  static client_arg c;
  client_init(&c, "127.0.0.1", l.port, 1, 3, 5000);
  pthread_t ts, tc;
  pthread_create(&ts, NULL, server_main, &s);
  pthread_create(&tc, NULL, client_main, &c);
  pthread_join(ts, NULL);
  pthread_join(tc, NULL);
  tr_rdv_close(&l);
  printf("  server after %lld ms: %s\n", (long long)s.elapsed_ms, s.e.msg);
  printf("  client: %s\n", c.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_TRUE(s.elapsed_ms >= 450 && s.elapsed_ms <= 1200);
  ASSERT_CONTAINS(s.e.msg, "timed out after 0.5 s");
  ASSERT_CONTAINS(s.e.msg, "1 of 2 other nodes arrived");
  ASSERT_CONTAINS(s.e.msg, "missing node ranks: 2");
  char port[32];
  snprintf(port, sizeof port, "127.0.0.1:%d", l.port);
  ASSERT_CONTAINS(s.e.msg, port);
  ASSERT_EQ_INT(c.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(c.e.msg, "node 0 failed");
  ASSERT_TRUE(c.elapsed_ms < 2000);
}

/* A client whose server never answers gives up at its own deadline; its
 * departure frees its rank on the server. */
TEST(client_timeout_waiting_for_answer) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  unsigned char blob[8] = {0};
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 2,
                  .timeout_ms = 1500};
  static client_arg c;
  client_init(&c, "127.0.0.1", l.port, 2, 3, 400);
  pthread_t ts, tc;
  pthread_create(&ts, NULL, server_main, &s);
  pthread_create(&tc, NULL, client_main, &c);
  pthread_join(tc, NULL);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  printf("  client after %lld ms: %s\n", (long long)c.elapsed_ms, c.e.msg);
  printf("  server: %s\n", s.e.msg);
  ASSERT_EQ_INT(c.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(c.e.msg, "connected, but no answer");
  ASSERT_TRUE(c.elapsed_ms >= 350 && c.elapsed_ms <= 1000);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(s.e.msg, "0 of 2 other nodes arrived");
}

/* A connection that sends nothing holds the server only until its
 * timeout, and is named. */
TEST(silent_client) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  int fd = raw_connect(l.port);
  ASSERT_TRUE(fd >= 0);
  unsigned char blob[8] = {0};
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 1,
                  .timeout_ms = 300};
  server_main(&s);
  close(fd);
  tr_rdv_close(&l);
  printf("  %lld ms: %s\n", (long long)s.elapsed_ms, s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_TRUE(s.elapsed_ms >= 250 && s.elapsed_ms <= 1000);
  ASSERT_CONTAINS(s.e.msg, "0 of 1 other nodes arrived");
  ASSERT_CONTAINS(s.e.msg, "without a complete hello: 127.0.0.1:");
}

/* A probe that connects and leaves, and a client that joins and leaves,
 * do not stop the rendezvous: the rank can be taken again. */
TEST(leavers_are_forgotten) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  unsigned char blob[32];
  fill_blob(blob, sizeof blob, 5);
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 2,
                  .timeout_ms = 10000};
  pthread_t ts;
  pthread_create(&ts, NULL, server_main, &s);
  int probe = raw_connect(l.port);
  ASSERT_TRUE(probe >= 0);
  close(probe);
  int fd = raw_connect(l.port);
  ASSERT_TRUE(fd >= 0);
  unsigned char h[16];
  make_hello(h, TR_RDV_MAGIC, TR_RDV_VERSION, 1, 3);
  ASSERT_EQ_INT(send(fd, h, sizeof h, MSG_NOSIGNAL), 16);
  sleep_ms(100); /* let the server register rank 1 */
  close(fd);
  sleep_ms(100);
  static client_arg c[2];
  pthread_t tc[2];
  for (int i = 0; i < 2; i++) {
    client_init(&c[i], "127.0.0.1", l.port, i + 1, 3, 10000);
    pthread_create(&tc[i], NULL, client_main, &c[i]);
  }
  for (int i = 0; i < 2; i++)
    pthread_join(tc[i], NULL);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  if (s.rc)
    printf("  server: %s\n", s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_OK);
  for (int i = 0; i < 2; i++) {
    ASSERT_EQ_INT(c[i].rc, WDS_OK);
    ASSERT_TRUE(memcmp(c[i].blob, blob, sizeof blob) == 0);
  }
}

/* Runs a server for `clients` clients against one raw hello; returns the
 * status the raw client read and leaves the server's error in *s. */
static int raw_hello_case(server_arg *s, tr_rdv_listener *l, int clients,
                          uint32_t magic, uint16_t version, uint32_t rank,
                          uint32_t nodes) {
  static unsigned char blob[8];
  memset(s, 0, sizeof *s);
  s->l = l;
  s->blob = blob;
  s->size = sizeof blob;
  s->clients = clients;
  s->timeout_ms = 5000;
  pthread_t ts;
  pthread_create(&ts, NULL, server_main, s);
  int fd = raw_connect(l->port), st = -2;
  if (fd >= 0) {
    unsigned char h[16];
    make_hello(h, magic, version, rank, nodes);
    if (send(fd, h, sizeof h, MSG_NOSIGNAL) == 16)
      st = raw_reply_status(fd);
    close(fd);
  }
  pthread_join(ts, NULL);
  return st;
}

TEST(bad_hellos) {
  tr_rdv_listener l;
  wds__err e;
  server_arg s;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);

  int st = raw_hello_case(&s, &l, 2, TR_RDV_MAGIC, 7, 1, 3);
  printf("  %s\n", s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(s.e.msg, "protocol version 7");
  ASSERT_EQ_INT(st, TR_RDV_REJECT_VERSION);

  st = raw_hello_case(&s, &l, 2, TR_RDV_MAGIC, 1, 0, 3);
  printf("  %s\n", s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(s.e.msg, "node rank 0, outside 1..2");
  ASSERT_EQ_INT(st, TR_RDV_REJECT_RANK);

  tr_rdv_close(&l);
}

/* Another program's bytes on node 0's port (issue 34: they aborted the
 * whole job with "bad magic"): that connection is closed without a reply
 * and the rendezvous goes on; the nodes that come after join. Where no
 * node comes, the timeout's message names the stranger. */
TEST(a_stranger_is_dropped_and_the_job_goes_on) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  static unsigned char blob[8] = "ncclid!";
  static server_arg s;
  memset(&s, 0, sizeof s);
  s.l = &l;
  s.blob = blob;
  s.size = sizeof blob;
  s.clients = 1;
  s.timeout_ms = 10000;
  pthread_t ts;
  pthread_create(&ts, NULL, server_main, &s);
  int fd = raw_connect(l.port);
  ASSERT_TRUE(fd >= 0);
  const char *get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(send(fd, get, strlen(get), MSG_NOSIGNAL) > 0);
  ASSERT_EQ_INT(raw_reply_status(fd), -1); /* closed, no reply */
  close(fd);
  static client_arg c;
  client_init(&c, "127.0.0.1", l.port, 1, 2, 10000);
  pthread_t tc;
  pthread_create(&tc, NULL, client_main, &c);
  pthread_join(tc, NULL);
  pthread_join(ts, NULL);
  if (s.rc)
    printf("  server: %s\n", s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_OK);
  ASSERT_EQ_INT(c.rc, WDS_OK);
  ASSERT_TRUE(memcmp(c.blob, blob, sizeof blob) == 0);

  /* No node comes: the timeout names the stranger. */
  memset(&s, 0, sizeof s);
  s.l = &l;
  s.blob = blob;
  s.size = sizeof blob;
  s.clients = 1;
  s.timeout_ms = 1000;
  pthread_create(&ts, NULL, server_main, &s);
  fd = raw_connect(l.port);
  ASSERT_TRUE(fd >= 0);
  ASSERT_TRUE(send(fd, get, strlen(get), MSG_NOSIGNAL) > 0);
  pthread_join(ts, NULL);
  close(fd);
  printf("  %s\n", s.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(s.e.msg, "timed out");
  ASSERT_CONTAINS(s.e.msg, "not a wds client: 127.0.0.1:");
  ASSERT_CONTAINS(s.e.msg, "bad magic 0x47455420");
  tr_rdv_close(&l);
}

TEST(mismatched_node_count) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  unsigned char blob[8] = {0};
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 2,
                  .timeout_ms = 5000};
  static client_arg c;
  client_init(&c, "127.0.0.1", l.port, 1, 5, 5000);
  pthread_t ts, tc;
  pthread_create(&ts, NULL, server_main, &s);
  pthread_create(&tc, NULL, client_main, &c);
  pthread_join(tc, NULL);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  printf("  server: %s\n  client: %s\n", s.e.msg, c.e.msg);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(s.e.msg, "says there are 5 nodes, node 0 expects 3");
  ASSERT_CONTAINS(s.e.msg, "127.0.0.1:");
  ASSERT_EQ_INT(c.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(c.e.msg, "node 0 expects a different node count");
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", l.port);
  ASSERT_CONTAINS(c.e.msg, where);
}

TEST(duplicate_node_rank) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  unsigned char blob[8] = {0};
  server_arg s = {.l = &l,
                  .blob = blob,
                  .size = sizeof blob,
                  .clients = 3,
                  .timeout_ms = 5000};
  static client_arg c[2];
  pthread_t ts, tc[2];
  pthread_create(&ts, NULL, server_main, &s);
  for (int i = 0; i < 2; i++) {
    client_init(&c[i], "127.0.0.1", l.port, 2, 4, 5000);
    pthread_create(&tc[i], NULL, client_main, &c[i]);
  }
  for (int i = 0; i < 2; i++)
    pthread_join(tc[i], NULL);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  printf("  server: %s\n  client: %s\n  client: %s\n", s.e.msg, c[0].e.msg,
         c[1].e.msg);
  ASSERT_EQ_INT(s.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(s.e.msg, "node rank 2 sent by both 127.0.0.1:");
  ASSERT_TRUE(s.elapsed_ms < 2000);
  /* One client is told its rank is taken, the other that node 0 failed. */
  ASSERT_EQ_INT(c[0].rc, WDS_ERR_IO);
  ASSERT_EQ_INT(c[1].rc, WDS_ERR_IO);
  int taken = !!strstr(c[0].e.msg, "already has this node rank") +
              !!strstr(c[1].e.msg, "already has this node rank");
  int failed = !!strstr(c[0].e.msg, "node 0 failed") +
               !!strstr(c[1].e.msg, "node 0 failed");
  ASSERT_EQ_INT(taken, 1);
  ASSERT_EQ_INT(failed, 1);
}

/* A server that is not a wds rendezvous (answers garbage). */
static void *garbage_server(void *p) {
  tr_rdv_listener *l = p;
  int fd = -1;
  for (int i = 0; i < 500 && fd < 0; i++) {
    fd = accept(l->fd, NULL, NULL);
    if (fd < 0)
      sleep_ms(10);
  }
  if (fd >= 0) {
    unsigned char h[16];
    size_t got = 0;
    while (got < sizeof h) {
      ssize_t r = recv(fd, h + got, sizeof h - got, 0);
      if (r <= 0)
        break;
      got += (size_t)r;
    }
    const char reply[] = "HTTP/1.1 400 Bad";
    (void)!send(fd, reply, sizeof reply - 1, MSG_NOSIGNAL);
    close(fd);
  }
  return NULL;
}

TEST(not_a_wds_server) {
  tr_rdv_listener l;
  wds__err e;
  ASSERT_EQ_INT(tr_rdv_listen("127.0.0.1", 0, &l, &e), WDS_OK);
  pthread_t ts;
  pthread_create(&ts, NULL, garbage_server, &l);
  static client_arg c;
  client_init(&c, "127.0.0.1", l.port, 1, 2, 5000);
  client_main(&c);
  pthread_join(ts, NULL);
  tr_rdv_close(&l);
  printf("  %s\n", c.e.msg);
  ASSERT_EQ_INT(c.rc, WDS_ERR_IO);
  ASSERT_CONTAINS(c.e.msg, "not a wds rendezvous server");
}

/* ---- topology from the environment -------------------------------------- */

typedef struct env {
  const char *const *vars; /* "NAME=value", NULL-terminated */
} env;

static const char *env_lookup(const char *name, void *ctx) {
  const env *en = ctx;
  size_t n = strlen(name);
  for (const char *const *v = en->vars; *v; v++)
    if (strncmp(*v, name, n) == 0 && (*v)[n] == '=')
      return *v + n + 1;
  return NULL;
}

static int resolve(tr_rdv_config *c, wds__err *e, const char *const *vars) {
  env en = {vars};
  return tr_rdv_resolve(c, env_lookup, &en, e);
}

TEST(env_single_node_default) {
  tr_rdv_config c = TR_RDV_CONFIG_INIT;
  wds__err e;
  const char *vars[] = {NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_EQ_INT(c.nodes, 1);
  ASSERT_EQ_INT(c.node_rank, 0);
  ASSERT_EQ_INT(c.master_port, 29500);
  ASSERT_STREQ(c.master_addr, "127.0.0.1");
  ASSERT_EQ_INT(c.per_process, 0);
  ASSERT_EQ_INT(c.rdv_size, 1);
  ASSERT_STREQ(c.source, "single node");
}

TEST(env_nnodes) {
  tr_rdv_config c = TR_RDV_CONFIG_INIT;
  wds__err e;
  const char *vars[] = {
      "MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", "NNODES=4", "NODE_RANK=2",
      "SLURM_NNODES=8",       "SLURM_NODEID=7",   NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_EQ_INT(c.nodes, 4);
  ASSERT_EQ_INT(c.node_rank, 2);
  ASSERT_EQ_INT(c.rdv_rank, 2);
  ASSERT_EQ_INT(c.rdv_size, 4);
  ASSERT_EQ_INT(c.master_port, 1234);
  ASSERT_STREQ(c.master_addr, "10.0.0.1");
  ASSERT_STREQ(c.source, "NNODES, NODE_RANK");
}

TEST(env_slurm) {
  tr_rdv_config c = TR_RDV_CONFIG_INIT;
  wds__err e;
  const char *vars[] = {"MASTER_ADDR=node001", "SLURM_NNODES=3",
                        "SLURM_NODEID=1", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_EQ_INT(c.nodes, 3);
  ASSERT_EQ_INT(c.node_rank, 1);
  ASSERT_EQ_INT(c.master_port, 29500);
  ASSERT_STREQ(c.source, "SLURM_NNODES, SLURM_NODEID");

  /* SLURM without MASTER_ADDR: an error that says what to set. */
  tr_rdv_config c2 = TR_RDV_CONFIG_INIT;
  const char *vars2[] = {"SLURM_NNODES=3", "SLURM_NODEID=1", NULL};
  ASSERT_EQ_INT(resolve(&c2, &e, vars2), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "MASTER_ADDR is not set");
  ASSERT_CONTAINS(e.msg, "SLURM_NNODES");
}

TEST(env_explicit_wins) {
  tr_rdv_config c = TR_RDV_CONFIG_INIT;
  wds__err e;
  snprintf(c.master_addr, sizeof c.master_addr, "head");
  c.master_port = 4000;
  c.nodes = 2;
  c.node_rank = 1;
  const char *vars[] = {"MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", "NNODES=4",
                        "NODE_RANK=2", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_STREQ(c.master_addr, "head");
  ASSERT_EQ_INT(c.master_port, 4000);
  ASSERT_EQ_INT(c.nodes, 2);
  ASSERT_EQ_INT(c.node_rank, 1);
  ASSERT_STREQ(c.source, "--nodes, --node-rank");
}

TEST(env_torchrun) {
  tr_rdv_config c = TR_RDV_CONFIG_INIT;
  wds__err e;
  const char *vars[] = {
      "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29400",  "RANK=5",    "WORLD_SIZE=8",
      "LOCAL_RANK=1",         "LOCAL_WORLD_SIZE=4", "NNODES=99", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_EQ_INT(c.per_process, 1);
  ASSERT_EQ_INT(c.rank, 5);
  ASSERT_EQ_INT(c.world_size, 8);
  ASSERT_EQ_INT(c.local_rank, 1);
  ASSERT_EQ_INT(c.local_world_size, 4);
  ASSERT_EQ_INT(c.nodes, 2);
  ASSERT_EQ_INT(c.node_rank, 1);
  ASSERT_EQ_INT(c.rdv_rank, 5);
  ASSERT_EQ_INT(c.rdv_size, 8);
  ASSERT_EQ_INT(c.master_port, 29401); /* torchrun's store has 29400 */

  /* Single node, LOCAL_WORLD_SIZE missing: defaults to WORLD_SIZE. */
  tr_rdv_config c2 = TR_RDV_CONFIG_INIT;
  const char *vars2[] = {"MASTER_ADDR=127.0.0.1", "RANK=0", "WORLD_SIZE=2",
                         "LOCAL_RANK=0", NULL};
  ASSERT_EQ_INT(resolve(&c2, &e, vars2), WDS_OK);
  ASSERT_EQ_INT(c2.nodes, 1);
  ASSERT_EQ_INT(c2.local_world_size, 2);
  ASSERT_EQ_INT(c2.master_port, 29501);

  /* An explicit port is used as given. */
  tr_rdv_config c3 = TR_RDV_CONFIG_INIT;
  c3.master_port = 7000;
  ASSERT_EQ_INT(resolve(&c3, &e, vars2), WDS_OK);
  ASSERT_EQ_INT(c3.master_port, 7000);
}

typedef struct bad_case {
  const char *vars[8];
  int nodes; /* explicit, -1 unset */
  const char *want[2];
} bad_case;

TEST(env_errors_name_variable_and_value) {
  static const bad_case cases[] = {
      {{"NNODES=two", NULL}, -1, {"NNODES='two'", "not an integer"}},
      {{"NNODES=0", NULL}, -1, {"NNODES='0'", "1.."}},
      {{"NNODES=2", "NODE_RANK=2", "MASTER_ADDR=h", NULL},
       -1,
       {"NODE_RANK=2 is out of range for NNODES=2", "0..1"}},
      {{"NNODES=2", "MASTER_ADDR=h", NULL},
       -1,
       {"NNODES=2 but no node rank", "NODE_RANK"}},
      {{"NNODES=2", "NODE_RANK=1", NULL}, -1, {"MASTER_ADDR is not set", ""}},
      {{"MASTER_PORT=70000", NULL}, -1, {"MASTER_PORT='70000'", "1..65535"}},
      {{"MASTER_PORT=12ab", NULL}, -1, {"MASTER_PORT='12ab'", ""}},
      {{"SLURM_NNODES=2", "SLURM_NODEID=-1", "MASTER_ADDR=h", NULL},
       -1,
       {"SLURM_NODEID='-1'", ""}},
      {{"RANK=0", "WORLD_SIZE=2", NULL},
       -1,
       {"LOCAL_RANK is not set", "RANK='0'"}},
      {{"LOCAL_RANK=0", NULL}, -1, {"RANK is not set", "LOCAL_RANK='0'"}},
      {{"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL},
       -1,
       {"RANK='2'", "0..1"}},
      {{"RANK=0", "WORLD_SIZE=6", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=4", NULL},
       -1,
       {"WORLD_SIZE=6 is not a multiple of LOCAL_WORLD_SIZE=4", ""}},
      {{"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=4",
        "MASTER_ADDR=h", NULL},
       -1,
       {"RANK=5 and LOCAL_RANK=0", "expected LOCAL_RANK=1"}},
      {{"RANK=0", "WORLD_SIZE=8", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=4",
        "MASTER_ADDR=h", NULL},
       3,
       {"--nodes 3 disagrees", "= 2 nodes"}},
      {{"NODE_RANK=0", NULL}, 0, {"--nodes 0", "1.."}},
      {{"NODE_RANK=1", NULL}, -1, {"NODE_RANK=1 but no node count", "NNODES"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tr_rdv_config c = TR_RDV_CONFIG_INIT;
    c.nodes = cases[i].nodes;
    wds__err e;
    e.msg[0] = '\0';
    int rc = resolve(&c, &e, cases[i].vars);
    printf("  case %zu: %s\n", i, e.msg);
    ASSERT_EQ_INT(rc, WDS_ERR_INVALID);
    ASSERT_CONTAINS(e.msg, cases[i].want[0]);
    ASSERT_CONTAINS(e.msg, cases[i].want[1]);
  }
}

/* An environment that names this process a rank of several (mpirun, srun,
 * MPICH's Hydra) that wds-train cannot join is refused, naming the
 * variables: before, each process ran the whole job alone (issue 36). */
TEST(env_refuses_duplicate_jobs) {
  static const bad_case cases[] = {
      {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
        "OMPI_COMM_WORLD_LOCAL_RANK=1", NULL},
       -1,
       {"OMPI_COMM_WORLD_RANK=1 and OMPI_COMM_WORLD_SIZE=2",
        "as node 0 of 1 (single node)"}},
      /* Rank 0 too: it would train alone on a share of the data. */
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", NULL},
       -1,
       {"rank 0 of 2", "duplicate"}},
      /* Two tasks on one node. */
      {{"SLURM_PROCID=1", "SLURM_NTASKS=2", NULL},
       -1,
       {"SLURM_PROCID=1 and SLURM_NTASKS=2", "node 0 of 1"}},
      {{"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_NNODES=1", "SLURM_NODEID=0",
        NULL},
       -1,
       {"SLURM_PROCID=1 and SLURM_NTASKS=2", "node 0 of 1 (SLURM_NODEID)"}},
      {{"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_NNODES=2", "SLURM_NODEID=1",
        "MASTER_ADDR=h", NULL},
       -1,
       {"rank 3 of 4", "node 1 of 2"}},
      {{"PMI_RANK=1", "PMI_SIZE=2", NULL},
       -1,
       {"PMI_RANK=1 and PMI_SIZE=2", "torchrun"}},
      {{"PMI_RANK=1", NULL}, -1, {"PMI_RANK='1'", "PMI_SIZE is not"}},
      {{"PMIX_RANK=1", NULL}, -1, {"PMIX_RANK='1'", "size"}},
      /* Flags that disagree with the launcher. */
      {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "MASTER_ADDR=h",
        NULL},
       3,
       {"rank 1 of 2", "node"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tr_rdv_config c = TR_RDV_CONFIG_INIT;
    c.nodes = cases[i].nodes;
    if (c.nodes > 0)
      c.node_rank = 1;
    wds__err e;
    e.msg[0] = '\0';
    int rc = resolve(&c, &e, cases[i].vars);
    printf("  case %zu: %s\n", i, e.msg);
    ASSERT_EQ_INT(rc, WDS_ERR_INVALID);
    ASSERT_CONTAINS(e.msg, cases[i].want[0]);
    ASSERT_CONTAINS(e.msg, cases[i].want[1]);
  }
  /* One task per node agrees with the nodes: one job. */
  tr_rdv_config c = TR_RDV_CONFIG_INIT;
  wds__err e;
  const char *ok[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_NNODES=2",
                      "SLURM_NODEID=1", "MASTER_ADDR=h",  NULL};
  ASSERT_EQ_INT(resolve(&c, &e, ok), WDS_OK);
  ASSERT_EQ_INT(c.nodes, 2);
  ASSERT_EQ_INT(c.node_rank, 1);
  /* So does a launcher of one process, and torchrun under srun (torchrun's
   * variables win: SLURM_PROCID is then the node's agent). */
  tr_rdv_config c2 = TR_RDV_CONFIG_INIT;
  const char *one[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1",
                       NULL};
  ASSERT_EQ_INT(resolve(&c2, &e, one), WDS_OK);
  ASSERT_EQ_INT(c2.nodes, 1);
  tr_rdv_config c3 = TR_RDV_CONFIG_INIT;
  const char *tr[] = {
      "RANK=3",         "WORLD_SIZE=4",   "LOCAL_RANK=1",  "LOCAL_WORLD_SIZE=2",
      "SLURM_PROCID=1", "SLURM_NTASKS=2", "MASTER_ADDR=h", NULL};
  ASSERT_EQ_INT(resolve(&c3, &e, tr), WDS_OK);
  ASSERT_EQ_INT(c3.rank, 3);
}

TEST(env_getenv) {
  /* Single-threaded here: setenv is safe. */
  setenv("MASTER_ADDR", "192.168.1.1", 1);
  setenv("NNODES", "2", 1);
  setenv("NODE_RANK", "1", 1);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_RANK");
  unsetenv("MASTER_PORT");
  tr_rdv_config c = TR_RDV_CONFIG_INIT;
  wds__err e;
  int rc = tr_rdv_env(&c, &e);
  unsetenv("MASTER_ADDR");
  unsetenv("NNODES");
  unsetenv("NODE_RANK");
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_STREQ(c.master_addr, "192.168.1.1");
  ASSERT_EQ_INT(c.nodes, 2);
  ASSERT_EQ_INT(c.node_rank, 1);
}

/* ---- the job's links ----------------------------------------------------- */

typedef struct hit {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int hits;
  char why[192];
} hit;

static void on_abort(void *ctx, const char *why) {
  hit *h = ctx;
  pthread_mutex_lock(&h->mu);
  h->hits++;
  snprintf(h->why, sizeof h->why, "%s", why);
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* The number of aborts seen within ms. */
static int hits_within(hit *h, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&h->mu);
  while (h->hits == 0 &&
         pthread_cond_timedwait(&h->cv, &h->mu, &ts) != ETIMEDOUT) {
  }
  int n = h->hits;
  pthread_mutex_unlock(&h->mu);
  return n;
}

typedef struct keep_arg {
  int port, rank, fd, rc;
  wds__err e;
} keep_arg;

static void *keep_client(void *p) {
  keep_arg *a = p;
  unsigned char blob[16];
  size_t n = 0;
  a->rc = tr_rdv_fetch_keep("127.0.0.1", a->port, a->rank, 3, blob, sizeof blob,
                            &n, 5000, &a->fd, &a->e);
  return NULL;
}

/* Three processes (threads here): the rendezvous with kept sockets, then a
 * link each; node 0 relays. */
static int make_job(tr_rdv_link *k[3], hit h[3]) {
  tr_rdv_listener l;
  wds__err e;
  for (int i = 0; i < 3; i++) {
    memset(&h[i], 0, sizeof h[i]);
    pthread_mutex_init(&h[i].mu, NULL);
    pthread_cond_init(&h[i].cv, NULL);
  }
  if (tr_rdv_listen("127.0.0.1", 0, &l, &e) != WDS_OK)
    return -1;
  keep_arg c[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    memset(&c[i], 0, sizeof c[i]);
    c[i].port = l.port;
    c[i].rank = i + 1;
    pthread_create(&t[i], NULL, keep_client, &c[i]);
  }
  int fds[2];
  int rc = tr_rdv_serve_keep(&l, "id", 2, 2, 5000, fds, &e);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  tr_rdv_close(&l);
  if (rc != WDS_OK || c[0].rc != WDS_OK || c[1].rc != WDS_OK)
    return -1;
  if (fds[0] < 0 || fds[1] < 0 || c[0].fd < 0 || c[1].fd < 0)
    return -1;
  if (tr_rdv_link_start(fds, 2, 1, 1, on_abort, &h[0], &k[0], &e) ||
      tr_rdv_link_start(&c[0].fd, 1, 0, 0, on_abort, &h[1], &k[1], &e) ||
      tr_rdv_link_start(&c[1].fd, 1, 0, 0, on_abort, &h[2], &k[2], &e))
    return -1;
  return 0;
}

static void free_hits(hit h[3]) {
  for (int i = 0; i < 3; i++) {
    pthread_mutex_destroy(&h[i].mu);
    pthread_cond_destroy(&h[i].cv);
  }
}

TEST(links_goodbye_is_not_a_failure) {
  for (int order = 0; order < 2; order++) {
    tr_rdv_link *k[3];
    hit h[3];
    ASSERT_EQ_INT(make_job(k, h), 0);
    if (order == 0) { /* the clients end first, then node 0 */
      tr_rdv_link_finish(k[1], 1);
      tr_rdv_link_finish(k[2], 1);
      sleep_ms(100);
      tr_rdv_link_finish(k[0], 1);
    } else { /* node 0 first */
      tr_rdv_link_finish(k[0], 1);
      sleep_ms(100);
      tr_rdv_link_finish(k[1], 1);
      tr_rdv_link_finish(k[2], 1);
    }
    for (int i = 0; i < 3; i++)
      ASSERT_EQ_INT(h[i].hits, 0);
    free_hits(h);
  }
}

TEST(links_a_failure_reaches_every_process) {
  tr_rdv_link *k[3];
  hit h[3];
  ASSERT_EQ_INT(make_job(k, h), 0);
  tr_rdv_link_abort(k[1]); /* process 1 failed */
  tr_rdv_link_abort(k[1]); /* once only */
  ASSERT_EQ_INT(hits_within(&h[0], 5000), 1);
  ASSERT_EQ_INT(hits_within(&h[2], 5000), 1); /* relayed by node 0 */
  ASSERT_CONTAINS(h[0].why, "process 1 failed");
  ASSERT_CONTAINS(h[2].why, "process 0 failed");
  sleep_ms(50);
  ASSERT_EQ_INT(h[1].hits, 0); /* no echo back */
  for (int i = 0; i < 3; i++)
    tr_rdv_link_finish(k[i], 0);
  ASSERT_EQ_INT(h[0].hits + h[1].hits + h[2].hits, 2);
  free_hits(h);
}

TEST(links_a_lost_process_reaches_every_process) {
  /* Process 2 ends without a goodbye (crashed, killed). */
  tr_rdv_link *k[3];
  hit h[3];
  ASSERT_EQ_INT(make_job(k, h), 0);
  tr_rdv_link_finish(k[2], 0);
  ASSERT_EQ_INT(hits_within(&h[0], 5000), 1);
  ASSERT_CONTAINS(h[0].why, "process 2 exited or lost its connection");
  ASSERT_EQ_INT(hits_within(&h[1], 5000), 1);
  tr_rdv_link_finish(k[0], 0);
  tr_rdv_link_finish(k[1], 0);
  free_hits(h);
  /* Node 0 lost: both others learn it. */
  ASSERT_EQ_INT(make_job(k, h), 0);
  tr_rdv_link_finish(k[0], 0);
  ASSERT_EQ_INT(hits_within(&h[1], 5000), 1);
  ASSERT_EQ_INT(hits_within(&h[2], 5000), 1);
  ASSERT_CONTAINS(h[1].why, "process 0 exited or lost its connection");
  tr_rdv_link_finish(k[1], 0);
  tr_rdv_link_finish(k[2], 0);
  free_hits(h);
}

/* The process group (procgroup.h) of three "processes" (threads here):
 * the rendezvous, process 0's blob reaching the others, then the links:
 * process 2 fails and the others are aborted, with the reason. */
typedef struct pg_arg {
  int rank, port, rc, bcast_rc, start_rc;
  unsigned char blob[128];
  tr_pg *pg;
  wds__err e;
} pg_arg;

static void *pg_process(void *p) {
  pg_arg *a = p;
  tr_pg_config c = {.local_ranks = 1,
                    .procs = 3,
                    .proc_rank = a->rank,
                    .master_addr = "127.0.0.1",
                    .master_port = a->port,
                    .rdv_timeout_ms = 10000};
  a->rc = tr_pg_create(&c, &a->pg, &a->e);
  if (a->rc != WDS_OK)
    return NULL;
  if (a->rank == 0)
    fill_blob(a->blob, sizeof a->blob, 7);
  a->bcast_rc = tr_pg_bcast(a->pg, a->blob, sizeof a->blob, &a->e);
  a->start_rc = tr_pg_start(a->pg, &a->e);
  return NULL;
}

TEST(process_group_bcast_and_abort) {
  pg_arg a[3];
  pthread_t t[3];
  int port = free_port();
  ASSERT_TRUE(port > 0);
  for (int i = 0; i < 3; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].rank = i;
    a[i].port = port;
    pthread_create(&t[i], NULL, pg_process, &a[i]);
  }
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  unsigned char want[128];
  fill_blob(want, sizeof want, 7);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ_INT(a[i].rc, WDS_OK);
    ASSERT_EQ_INT(a[i].bcast_rc, WDS_OK);
    ASSERT_EQ_INT(a[i].start_rc, WDS_OK);
    ASSERT_TRUE(memcmp(a[i].blob, want, sizeof want) == 0);
    ASSERT_EQ_INT(tr_pg_procs(a[i].pg), 3);
    ASSERT_EQ_INT(tr_pg_proc_rank(a[i].pg), i);
    ASSERT_TRUE(!tr_pg_aborted(a[i].pg));
  }
  /* A one-rank group's barrier passes at once. */
  ASSERT_EQ_INT(tr_pg_barrier(a[1].pg), WDS_OK);
  tr_pg_abort(a[2].pg, "rank 2 failed here");
  int64_t t0 = now_ms();
  while ((!tr_pg_aborted(a[0].pg) || !tr_pg_aborted(a[1].pg)) &&
         now_ms() - t0 < 5000)
    sleep_ms(5);
  char why[192];
  ASSERT_TRUE(tr_pg_aborted(a[0].pg));
  tr_pg_why(a[0].pg, why, sizeof why);
  ASSERT_CONTAINS(why, "process 2 failed");
  ASSERT_TRUE(tr_pg_aborted(a[1].pg));
  tr_pg_why(a[1].pg, why, sizeof why);
  ASSERT_CONTAINS(why, "process 0 failed");
  tr_pg_why(a[2].pg, why, sizeof why);
  ASSERT_STREQ(why, "rank 2 failed here");
  /* An aborted group's barrier returns at once. */
  ASSERT_EQ_INT(tr_pg_barrier(a[1].pg), WDS_ERR_CANCELLED);
  for (int i = 0; i < 3; i++)
    tr_pg_destroy(a[i].pg);
}

/* A blob of another size than the receiver expects is an error. */
typedef struct pg_size_arg {
  int rank, port, rc;
  wds__err e;
} pg_size_arg;

static void *pg_size_process(void *p) {
  pg_size_arg *a = p;
  tr_pg_config c = {.local_ranks = 1,
                    .procs = 2,
                    .proc_rank = a->rank,
                    .master_addr = "127.0.0.1",
                    .master_port = a->port,
                    .rdv_timeout_ms = 10000};
  tr_pg *g = NULL;
  unsigned char blob[64] = {0};
  a->rc = tr_pg_create(&c, &g, &a->e);
  if (a->rc == WDS_OK)
    a->rc = tr_pg_bcast(g, blob, a->rank == 0 ? 16 : 32, &a->e);
  tr_pg_destroy(g);
  return NULL;
}

TEST(process_group_bcast_size_mismatch) {
  pg_size_arg a[2];
  pthread_t t[2];
  int port = free_port();
  ASSERT_TRUE(port > 0);
  for (int i = 0; i < 2; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].rank = i;
    a[i].port = port;
    pthread_create(&t[i], NULL, pg_size_process, &a[i]);
  }
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  printf("  %s\n", a[1].e.msg);
  ASSERT_EQ_INT(a[0].rc, WDS_OK);
  ASSERT_EQ_INT(a[1].rc, WDS_ERR_IO);
  ASSERT_CONTAINS(a[1].e.msg, "sent 16 bytes, 32 expected");
}

/* The host collectives across processes (host_links, the CPU backend): 3
 * "processes" (threads) of 2 local ranks each. The all-reduce is the sum in
 * global rank order (values whose sum depends on the order), the same bits
 * on every rank; the f64 sum and the gather too. Then process 1 aborts
 * while the others wait in an all-reduce: they leave it, naming it. */
#define HC_PROCS 3
#define HC_LOCAL 2
#define HC_N 1001

typedef struct hc_proc hc_proc;
typedef struct hc_rank {
  hc_proc *p;
  int local, rc, rc_abort;
  float buf[HC_N];
  double sums[2];
  uint64_t all[HC_PROCS * HC_LOCAL];
} hc_rank;

struct hc_proc {
  int rank, port, rc, aborter;
  tr_pg *pg;
  wds__err e;
  hc_rank r[HC_LOCAL];
};

static float hc_value(int grank, int i) {
  /* large and small magnitudes: float addition order shows */
  return (grank % 2 ? 1e7f : 1.0f) * (float)((i * 7 + grank * 13) % 17) +
         0.1f * (float)grank;
}

static void *hc_rank_main(void *arg) {
  hc_rank *r = arg;
  tr_pg *g = r->p->pg;
  int grank = r->p->rank * HC_LOCAL + r->local;
  for (int i = 0; i < HC_N; i++)
    r->buf[i] = hc_value(grank, i);
  r->sums[0] = grank;
  r->sums[1] = 0.5 * grank;
  wds__err e;
  r->rc = tr_pg_allreduce_f32(g, r->local, r->buf, HC_N);
  if (r->rc == WDS_OK)
    r->rc = tr_pg_sum_f64(g, r->local, r->sums, 2, &e);
  if (r->rc == WDS_OK)
    r->rc = tr_pg_gather_u64(g, r->local, 100 + (uint64_t)grank, r->all);
  if (r->rc != WDS_OK)
    return NULL;
  /* The abort: process 1 does not come. */
  if (r->p->aborter) {
    if (r->local == 0) {
      sleep_ms(200);
      tr_pg_abort(g, "process 1 gave up here");
    }
    return NULL;
  }
  float scratch[HC_N] = {0};
  r->rc_abort = tr_pg_allreduce_f32(g, r->local, scratch, HC_N);
  return NULL;
}

static void *hc_process(void *arg) {
  hc_proc *p = arg;
  tr_pg_config c = {.local_ranks = HC_LOCAL,
                    .procs = HC_PROCS,
                    .proc_rank = p->rank,
                    .master_addr = "127.0.0.1",
                    .master_port = p->port,
                    .rdv_timeout_ms = 10000,
                    .host_links = 1,
                    .collective_timeout_ms = 10000};
  p->rc = tr_pg_create(&c, &p->pg, &p->e);
  if (p->rc == WDS_OK)
    p->rc = tr_pg_start(p->pg, &p->e);
  if (p->rc != WDS_OK)
    return NULL;
  pthread_t t[HC_LOCAL];
  for (int k = 0; k < HC_LOCAL; k++) {
    p->r[k].p = p;
    p->r[k].local = k;
    pthread_create(&t[k], NULL, hc_rank_main, &p->r[k]);
  }
  for (int k = 0; k < HC_LOCAL; k++)
    pthread_join(t[k], NULL);
  return NULL;
}

TEST(process_group_host_collectives) {
  static hc_proc p[HC_PROCS];
  pthread_t t[HC_PROCS];
  int port = free_port();
  ASSERT_TRUE(port > 0);
  for (int i = 0; i < HC_PROCS; i++) {
    memset(&p[i], 0, sizeof p[i]);
    p[i].rank = i;
    p[i].port = port;
    p[i].aborter = i == 1;
    pthread_create(&t[i], NULL, hc_process, &p[i]);
  }
  for (int i = 0; i < HC_PROCS; i++)
    pthread_join(t[i], NULL);
  static float want[HC_N];
  for (int i = 0; i < HC_N; i++) {
    float s = hc_value(0, i);
    for (int g = 1; g < HC_PROCS * HC_LOCAL; g++)
      s += hc_value(g, i);
    want[i] = s;
  }
  for (int i = 0; i < HC_PROCS; i++) {
    ASSERT_EQ_INT(p[i].rc, WDS_OK);
    for (int k = 0; k < HC_LOCAL; k++) {
      hc_rank *r = &p[i].r[k];
      ASSERT_EQ_INT(r->rc, WDS_OK);
      ASSERT_TRUE(memcmp(r->buf, want, sizeof want) == 0);
      ASSERT_TRUE(r->sums[0] == 15.0 && r->sums[1] == 7.5);
      for (int g = 0; g < HC_PROCS * HC_LOCAL; g++)
        ASSERT_EQ_U64(r->all[g], 100 + (uint64_t)g);
      if (i != 1)
        ASSERT_EQ_INT(r->rc_abort, WDS_ERR_CANCELLED);
    }
  }
  char why[192];
  tr_pg_why(p[0].pg, why, sizeof why);
  printf("  process 0: %s\n", why);
  ASSERT_CONTAINS(why, "process 1");
  tr_pg_why(p[2].pg, why, sizeof why);
  printf("  process 2: %s\n", why);
  ASSERT_CONTAINS(why, "process");
  for (int i = 0; i < HC_PROCS; i++)
    tr_pg_destroy(p[i].pg);
}

int main(void) {
  RUN(env_single_node_default);
  RUN(env_nnodes);
  RUN(env_slurm);
  RUN(env_explicit_wins);
  RUN(env_torchrun);
  RUN(env_errors_name_variable_and_value);
  RUN(env_refuses_duplicate_jobs);
  RUN(env_getenv);
  RUN(serve_three_clients);
  RUN(max_blob_by_name_wildcard);
  RUN(ipv6_loopback);
  RUN(clients_before_server);
  RUN(nothing_listens);
  RUN(unresolvable_name);
  RUN(bad_arguments);
  RUN(server_timeout_one_of_two);
  RUN(client_timeout_waiting_for_answer);
  RUN(silent_client);
  RUN(leavers_are_forgotten);
  RUN(bad_hellos);
  RUN(a_stranger_is_dropped_and_the_job_goes_on);
  RUN(mismatched_node_count);
  RUN(duplicate_node_rank);
  RUN(not_a_wds_server);
  RUN(links_goodbye_is_not_a_failure);
  RUN(process_group_host_collectives);
  RUN(links_a_failure_reaches_every_process);
  RUN(links_a_lost_process_reaches_every_process);
  RUN(process_group_bcast_and_abort);
  RUN(process_group_bcast_size_mismatch);
  return test_summary();
}
