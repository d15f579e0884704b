/* rendezvous.h — topology from flags and environment, and the TCP exchange
 * of one small blob from rank 0 to the other processes, whose connections
 * stay open as the job's links. Internal to wds-train.
 *
 * Files: rdv_topology.c (flags and environment), rdv_serve.c (process 0),
 * rdv_fetch.c (the others), rdv_link.c (the links), rdv_net.{h,c} (what
 * they share: deadlines, socket reads and writes).
 *
 * Rank 0 listens and serves; every other process fetches:
 *
 *   rank 0:  tr_rdv_listen(NULL, port, &l, &e);
 *            tr_rdv_serve_on(&l, id, sizeof id, nodes - 1, timeout_ms, &e);
 *            tr_rdv_close(&l);          (or tr_rdv_serve() for all three)
 *   others:  tr_rdv_fetch(addr, port, node_rank, nodes, id, sizeof id,
 *                           &size, timeout_ms, &e);
 *
 * The blob is opaque (at most TR_RDV_MAX_BLOB bytes). Nothing here prints;
 * failures return WDS_ERR_INVALID (bad arguments or configuration) or
 * WDS_ERR_IO (network, protocol, timeout: the message then says "timed out"
 * or "no answer after") with the message in the wds__err.
 *
 * Wire protocol (integers big-endian):
 *   hello, client -> server (16 bytes):
 *     u32 magic TR_RDV_MAGIC, u16 version TR_RDV_VERSION, u16 0,
 *     u32 node rank (1 .. nodes-1), u32 nodes
 *   reply, server -> client (12 bytes, then the blob when status is 0):
 *     u32 magic, u16 version, u16 status (TR_RDV_OK or a TR_RDV_REJECT_*),
 *     u32 blob size
 * The server answers only once every expected client has sent a valid hello,
 * so either all of them get the blob or none does. */
#ifndef WDS_TRAINER_RENDEZVOUS_H
#define WDS_TRAINER_RENDEZVOUS_H

#include <stddef.h>

#include "base/err.h"

#define TR_RDV_MAGIC 0x57445352u /* "WDSR" */
#define TR_RDV_VERSION 1
#define TR_RDV_HELLO_BYTES 16
#define TR_RDV_REPLY_BYTES 12
#define TR_RDV_MAX_BLOB 4096
#define TR_RDV_DEFAULT_PORT 29500

/* Reply status codes (the reason a server turned a client away). */
enum {
  TR_RDV_OK = 0,
  TR_RDV_REJECT_VERSION = 1,   /* protocol version differs */
  TR_RDV_REJECT_RANK = 2,      /* node rank out of range */
  TR_RDV_REJECT_DUPLICATE = 3, /* node rank already taken */
  TR_RDV_REJECT_NODES = 4,     /* node count differs from the server's */
  TR_RDV_REJECT_ABORT = 5      /* the server failed for another reason */
};

/* A listening socket (rank 0). port is the bound port: the one asked for,
 * or the one the kernel chose when 0 was asked for. */
typedef struct tr_rdv_listener {
  int fd;
  int port;
  char addr[80]; /* the bound address as text, for messages */
} tr_rdv_listener;

/* Listens on bind_addr:port (SO_REUSEADDR). bind_addr NULL or "" is every
 * interface (IPv6 and IPv4 when the host has IPv6, else IPv4); otherwise a
 * name or numeric address resolved with getaddrinfo. port 0 picks a free
 * port (tests). On failure l->fd is -1. */
int tr_rdv_listen(const char *bind_addr, int port, tr_rdv_listener *l,
                  wds__err *e);

/* Accepts exactly `clients` clients (node ranks 1..clients, node count
 * clients + 1), checks their hellos, then sends blob[0..size) to every one
 * of them. Returns WDS_OK once all were sent, or an error: a bad hello
 * (wrong version, node rank out of range or repeated, different node count)
 * names the peer's address and the clients already connected are turned
 * away; a connection whose first 4 bytes are not TR_RDV_MAGIC (another
 * program on the port) is closed without a reply and the wait goes on (a
 * timeout then names it); the timeout names the address, the port and how many
 * of how many nodes arrived. Connections that close before sending a hello are
 * dropped, and a client that leaves after its hello frees its node rank (it
 * may come back). clients 0 returns at once. The listener stays open. */
int tr_rdv_serve_on(tr_rdv_listener *l, const void *blob, size_t size,
                    int clients, int timeout_ms, wds__err *e);

/* Closes the listener (fd -1 is a no-op). */
void tr_rdv_close(tr_rdv_listener *l);

/* listen + serve_on + close. */
int tr_rdv_serve(const char *bind_addr, int port, const void *blob, size_t size,
                 int clients, int timeout_ms, wds__err *e);

/* Connects to addr:port (a name or an IPv4/IPv6 address), retrying while
 * the server is not up yet (connection refused, timed out, unreachable:
 * backoff from 50 ms doubling to 1 s) until timeout_ms has passed, sends the
 * hello for node_rank (1 .. nodes-1) of nodes, and reads the blob into
 * blob[0..cap), its length into *size. Every read and write is bounded by
 * the same deadline. On expiry the message names the address, the port, the
 * last connection error and the number of attempts. */
int tr_rdv_fetch(const char *addr, int port, int node_rank, int nodes,
                 void *blob, size_t cap, size_t *size, int timeout_ms,
                 wds__err *e);

/* As serve_on / fetch, but the connections stay open as the job's links
 * (below): fds[i] is node rank i + 1's socket (clients entries); *fd the
 * socket to node 0. On failure nothing stays open. */
int tr_rdv_serve_keep(tr_rdv_listener *l, const void *blob, size_t size,
                      int clients, int timeout_ms, int *fds, wds__err *e);
int tr_rdv_fetch_keep(const char *addr, int port, int node_rank, int nodes,
                      void *blob, size_t cap, size_t *size, int timeout_ms,
                      int *fd, wds__err *e);

/* The job's links: after the rendezvous, node 0 keeps a socket to every
 * other process and each keeps its socket to node 0, watched by a thread.
 * A process that fails says so (link_abort: one byte 'A'); one that ends
 * well says goodbye (link_finish(ok): 'D'). A peer's 'A', or its socket
 * closing before its goodbye (it crashed or was killed), calls
 * on_abort(ctx, why) once, from the link's thread; node 0 (relay) passes
 * the failure on to every other process. So a failure anywhere reaches
 * every process at once, which NCCL does not promise (a process on the same
 * node that dies is not noticed by its peers' kernels). */
typedef struct tr_rdv_link tr_rdv_link;

/* Takes ownership of fds[0..n) (closed on failure too); first_peer names
 * fds[0]'s process in messages ("process N"). */
int tr_rdv_link_start(int *fds, int n, int relay, int first_peer,
                      void (*on_abort)(void *ctx, const char *why), void *ctx,
                      tr_rdv_link **out, wds__err *e);
/* Tells the other processes this one failed (once; a no-op after an abort
 * came in). Thread-safe. */
void tr_rdv_link_abort(tr_rdv_link *k);
/* Says goodbye when ok (and nothing was aborted), stops the thread, closes
 * the sockets, frees. NULL is a no-op. */
void tr_rdv_link_finish(tr_rdv_link *k, int ok);

/* Before the links start (their thread reads the sockets): process 0 sends
 * blob[0..size) (at most TR_RDV_MAX_BLOB bytes) on each of fds[0..n)
 * (first_peer names fds[0]'s process in messages); another process reads
 * one into blob[0..cap) from its socket to process 0, its length into
 * *size. Framed as u32 size (big-endian), then the bytes; both bounded by
 * timeout_ms. */
int tr_rdv_blob_send(const int *fds, int n, int first_peer, const void *blob,
                     size_t size, int timeout_ms, wds__err *e);
int tr_rdv_blob_recv(int fd, void *blob, size_t cap, size_t *size,
                     int timeout_ms, wds__err *e);

/* Topology of the job. Before tr_rdv_resolve(): explicit values (from
 * command-line flags) or "unset" ("" for master_addr, -1 for the integers);
 * explicit values win over the environment. After: every field set.
 *
 * One process per node (the default): nodes/node_rank from NNODES and
 * NODE_RANK, else SLURM_NNODES and SLURM_NODEID, else a single node.
 * One process per GPU (torchrun): when RANK, WORLD_SIZE or LOCAL_RANK is
 * set, all three must be (LOCAL_WORLD_SIZE defaults to WORLD_SIZE); nodes =
 * WORLD_SIZE / LOCAL_WORLD_SIZE and node_rank = RANK / LOCAL_WORLD_SIZE, and
 * the rendezvous runs between all WORLD_SIZE processes (rdv_rank = RANK,
 * rdv_size = WORLD_SIZE), on MASTER_PORT + 1 by default since torchrun's own
 * store listens on MASTER_PORT.
 * master_addr comes from MASTER_ADDR and is required with more than one
 * rendezvous participant (SLURM's node list is not parsed); master_port from
 * MASTER_PORT, default 29500. Messages name explicit values by the flags
 * that set them: --master-addr, --master-port, --nodes, --node-rank. */
typedef struct tr_rdv_config {
  char master_addr[256];
  int master_port;
  int nodes;
  int node_rank;
  /* Out only: */
  int per_process; /* 1: one process per GPU (torchrun variables) */
  int rank, world_size, local_rank,
      local_world_size;   /* -1 unless per_process */
  int rdv_rank, rdv_size; /* who serves (0) and how many take part */
  char source[48];        /* where the topology came from, for logs */
} tr_rdv_config;

#define TR_RDV_CONFIG_INIT                                                     \
  { "", -1, -1, -1, 0, -1, -1, -1, -1, 0, 1, "" }

/* Looks variables up with get(name, ctx) (NULL: unset), or getenv when get
 * is NULL, through base/topology.h. Validation errors (WDS_ERR_INVALID)
 * name the variable and its value. */
int tr_rdv_resolve(tr_rdv_config *c,
                   const char *(*get)(const char *name, void *ctx), void *ctx,
                   wds__err *e);

/* tr_rdv_resolve() with getenv. */
int tr_rdv_env(tr_rdv_config *c, wds__err *e);

#endif
