/* err.c — status table and error-text helpers. The only place that turns
 * status codes into text; everything is generated from WDS_STATUS_TABLE.
 * The thread's last error (wds_last_error) lives here. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/text.h"

const char *wds_strerror(int status) {
  switch (status) {
#define WDS_STATUS_CASE_(name, value, msg)                                     \
  case value:                                                                  \
    return msg;
    WDS_STATUS_TABLE(WDS_STATUS_CASE_)
#undef WDS_STATUS_CASE_
  default:
    return "unknown status";
  }
}

const char *wds_status_name(int status) {
  switch (status) {
#define WDS_STATUS_NAME_(name, value, msg)                                     \
  case value:                                                                  \
    return #name;
    WDS_STATUS_TABLE(WDS_STATUS_NAME_)
#undef WDS_STATUS_NAME_
  default:
    return "WDS_UNKNOWN";
  }
}

/* A message in buf (size bytes) made safe to print: what it quotes (a
 * member name, a key, a URL, a command) may hold control characters or
 * bytes that are not UTF-8, escaped as \xHH (base/text.h). */
static void make_printable(char *buf, size_t size) {
  if (!wds__esc_needed(buf, 0))
    return;
  char tmp[WDS__ERR_SIZE];
  wds__esc_into(tmp, sizeof tmp < size ? sizeof tmp : size, buf, 0);
  memcpy(buf, tmp, strlen(tmp) + 1);
}

int wds__fail(wds__err *e, int status, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    make_printable(e->msg, sizeof e->msg);
  }
  return status;
}

void wds__err_prefix(wds__err *e, const char *fmt, ...) {
  if (!e)
    return;
  char prefix[WDS__ERR_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char old[WDS__ERR_SIZE];
  memcpy(old, e->msg, sizeof old);
  size_t n = strlen(prefix);
  if (n > sizeof e->msg - 3)
    n = sizeof e->msg - 3;
  memcpy(e->msg, prefix, n);
  memcpy(e->msg + n, ": ", 2);
  size_t rest = sizeof e->msg - n - 3;
  size_t m = strnlen(old, rest);
  memcpy(e->msg + n + 2, old, m);
  e->msg[n + 2 + m] = '\0';
  make_printable(e->msg, sizeof e->msg);
}

void wds__copy_msg(char *dst, size_t dst_size, const char *src) {
  if (!dst || dst_size == 0)
    return;
  if (!src)
    src = "";
  size_t n = strlen(src);
  if (n >= dst_size) {
    /* cut between characters: a message stays valid UTF-8 */
    n = dst_size - 1;
    while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
      n--;
  }
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* The calling thread's last error (wds_last_error): set by every public
 * call that fails, left by those that succeed. */
static _Thread_local char last_error[WDS__ERR_SIZE];

const char *wds_last_error(void) { return last_error; }

int wds__last_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  make_printable(last_error, sizeof last_error);
  return status;
}

int wds__last_set(int status, const char *msg) {
  if (status >= 0)
    return status;
  if (!msg || !msg[0])
    msg = wds_strerror(status);
  if (msg != last_error)
    wds__copy_msg(last_error, sizeof last_error, msg);
  return status;
}

/* wds__last_set for a message from outside, made printable first. */
int wds_last_error_set(int status, const char *msg) {
  if (status >= 0 || !msg || !msg[0] || msg == last_error)
    return wds__last_set(status, msg);
  char buf[WDS__ERR_SIZE];
  snprintf(buf, sizeof buf, "%s", msg);
  make_printable(buf, sizeof buf);
  return wds__last_set(status, buf);
}
