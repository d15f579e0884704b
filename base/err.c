/* err.c — status table and error-text helpers. The only place that turns
 * status codes into text; everything is generated from WDS_STATUS_TABLE. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

int wds__fail(wds__err *e, int status, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
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
}

void wds__copy_msg(char *dst, size_t dst_size, const char *src) {
  if (!dst || dst_size == 0)
    return;
  snprintf(dst, dst_size, "%s", src ? src : "");
}

static _Thread_local char open_error[WDS__ERR_SIZE];

const char *wds_open_error(void) { return open_error; }

int wds__open_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(open_error, sizeof open_error, fmt, ap);
  va_end(ap);
  return status;
}

void wds__open_error_clear(void) { open_error[0] = '\0'; }

char *wds__open_error_buf(void) { return open_error; }
