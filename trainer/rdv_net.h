/* rdv_net.h — what the rendezvous files share (internal to rdv_*.c, and
 * procgroup.c's data links): the
 * clock and deadlines, big-endian fields, addresses as text, and
 * non-blocking socket reads and writes bounded by a deadline. */
#ifndef WDS_TRAINER_RDV_NET_H
#define WDS_TRAINER_RDV_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "trainer/rendezvous.h"

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t tr_rdv_now_ms(void);
/* Milliseconds left until deadline (0 when passed). */
int tr_rdv_remaining_ms(int64_t deadline);
/* Sleeps ms milliseconds (through EINTR). */
void tr_rdv_sleep_ms(int ms);

static inline double tr_rdv_seconds(int ms) { return ms / 1000.0; }

static inline void tr_rdv_put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static inline void tr_rdv_put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}

static inline uint32_t tr_rdv_get_u32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

static inline uint16_t tr_rdv_get_u16(const unsigned char *p) {
  return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

/* "host:port", with brackets around an IPv6 address (truncated to cap: a
 * name in a message). */
void tr_rdv_host_port(char *dst, size_t cap, const char *host, int port);
/* A socket address as "host:port" (numeric). */
void tr_rdv_sockaddr_text(char *dst, size_t cap, const struct sockaddr *sa,
                          socklen_t len);

/* Waits until fd is ready for events or the deadline. 1 ready, 0 timed out,
 * -1 error (errno). */
int tr_rdv_wait_fd(int fd, short events, int64_t deadline);

enum {
  TR_RDV_IO_OK = 0,
  TR_RDV_IO_EOF = 1,
  TR_RDV_IO_TIMEOUT = 2,
  TR_RDV_IO_ERRNO = -1
};

/* Reads exactly n bytes (fd non-blocking); *got counts what arrived. One of
 * TR_RDV_IO_*. */
int tr_rdv_read_full(int fd, void *buf, size_t n, size_t *got,
                     int64_t deadline);
/* Writes exactly n bytes (fd non-blocking; no SIGPIPE). */
int tr_rdv_write_full(int fd, const void *buf, size_t n, int64_t deadline);

/* The server's reply header (TR_RDV_REPLY_BYTES). */
void tr_rdv_encode_reply(unsigned char *h, int status, size_t size);

#endif
