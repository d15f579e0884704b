/* err.h — internal error text carried beside a status code.
 *
 * Internal functions take a wds__err* and, on failure, write what failed and
 * where into it and return the negative status; a public function that fails
 * copies it into the calling thread's last error (wds_last_error, below).
 * Fixed-size: formatting an error never allocates. */
#ifndef WDS_BASE_ERR_H
#define WDS_BASE_ERR_H

#include <stddef.h>

#include "wds/status.h"

#define WDS__ERR_SIZE 1024

/* The refusal of a pipe: command read from a file (an @FILE list, an index),
 * one %s: the URL. */
#define WDS__PIPE_FROM_FILE_REFUSED                                            \
  "\"%.300s\" is a pipe: command read from a file, which is not run unless "   \
  "allowed (--allow-pipe-from-files, or allow_pipe_from_files in the "         \
  "config)"

typedef struct wds__err {
  char msg[WDS__ERR_SIZE];
} wds__err;

/* Formats the message into e (when e is not NULL) and returns status. */
int wds__fail(wds__err *e, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to e's message (used to add the shard URL). */
void wds__err_prefix(wds__err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copies a message into a caller's buffer (truncating between UTF-8
 * characters, always terminated). Messages made here are printable: what
 * they quote has its control characters and bytes that are not UTF-8
 * escaped as \xHH (base/text.h) by wds__fail, wds__err_prefix and
 * wds__last_fail. */
void wds__copy_msg(char *dst, size_t dst_size, const char *src);

/* The calling thread's last error, the text wds_last_error() returns.
 * Every public function that fails sets it before it returns, in the
 * caller's thread; one that succeeds leaves it as it was. Only public
 * functions write it: internal ones report into a wds__err (so an open that
 * recovers from an internal failure, a skipped shard, leaves it alone), and
 * the public function copies that here (wds__last_set) or, for a failure of
 * its own, formats here directly (wds__last_fail). */

/* Formats the message into the thread's last error and returns status. */
int wds__last_fail(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* When status < 0: copies msg (printable already: a wds__err's) into the
 * thread's last error, or the status's generic text when msg is NULL or
 * empty. Returns status; a status >= 0 leaves the text. */
int wds__last_set(int status, const char *msg);

#endif
