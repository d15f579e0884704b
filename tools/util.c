/* util.c — helpers shared by the wds subcommands. */
#include "util.h"

#include "shards/cache.h"
#include "shards/spec_io.h"
#include "signals.h"

#include "base/text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tool_allow_pipe_from_files;

int tool_expand_specs(const char *cmd, char **specs, int nspecs,
                      size_t max_urls, int read_timeout_ms, int retries,
                      wds_url_list *out) {
  wds__err err;
  unsigned flags =
      tool_allow_pipe_from_files ? WDS_SPEC_ALLOW_PIPE_FROM_FILES : 0;
  wds__io_opts io = {.read_timeout_ms = read_timeout_ms,
                     .cancel = tool_signals_cancel(),
                     .retries = retries};
  int rc = wds__spec_expand_io((const char *const *)specs, (size_t)nspecs,
                               max_urls, flags, &io, out, &err);
  if (rc == WDS_OK)
    return 0;
  if (rc == WDS_ERR_CANCELLED && tool_signal_caught())
    return tool_interrupted(cmd, "nothing was read");
  fprintf(stderr, "wds %s: %s\n", cmd, err.msg);
  return 1;
}

void tool_eprintf(const char *fmt, ...) {
  char *msg = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&msg, fmt, ap);
  va_end(ap);
  if (n < 0) {
    fputs("(out of memory for a message)\n", stderr);
    return;
  }
  int nl = n > 0 && msg[n - 1] == '\n';
  if (nl)
    msg[n - 1] = '\0';
  wds__esc_write(stderr, msg, 0);
  if (nl)
    fputc('\n', stderr);
  free(msg);
}

double tool_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- stdout ---- */

/* The program as messages name it: "wds ls", "wds-train". */
static char stdout_prog[64] = "wds";
static int stdout_reported;

static void stdout_report(int err) {
  if (stdout_reported)
    return;
  stdout_reported = 1;
  if (err)
    fprintf(stderr, "%s: cannot write the output: %s\n", stdout_prog,
            strerror(err));
  else
    fprintf(stderr, "%s: cannot write the output\n", stdout_prog);
}

void tool_stdout_said(void) { stdout_reported = 1; }

int tool_stdout_check(void) {
  if (!ferror(stdout))
    return 0;
  int err = errno;
  /* glibc drops a buffer whose write failed; what was written since is
   * still pending, and flushing it fails again with a fresh errno. */
  errno = 0;
  if (fflush(stdout) != 0 && errno)
    err = errno;
  stdout_report(err);
  return -1;
}

int tool_stdout_flush(void) {
  errno = 0;
  if (fflush(stdout) != 0) {
    stdout_report(errno);
    return -1;
  }
  return tool_stdout_check();
}

/* The exit handler (gnulib's close_stdout): fclose also reports errors a
 * file system defers to close (NFS). A stdout closed before we started
 * (EBADF) is no error when nothing was written to it. */
static void stdout_at_exit(void) {
  int pending = __fpending(stdout) != 0;
  int failed = ferror(stdout) != 0, err = 0;
  errno = 0;
  if (fclose(stdout) != 0 && (failed || pending || errno != EBADF)) {
    failed = 1;
    err = errno;
  }
  if (!failed)
    return;
  stdout_report(err);
  /* exit() is already running: _exit is how a handler changes the status
   * (the streams left are stderr, unbuffered, and those already closed). */
  _exit(1);
}

void tool_stdout_init_prog(const char *prog) {
  static int registered;
  snprintf(stdout_prog, sizeof stdout_prog, "%s", prog);
  if (!registered && atexit(stdout_at_exit) == 0)
    registered = 1;
}

void tool_stdout_init(const char *cmd) {
  char prog[64];
  snprintf(prog, sizeof prog, "wds %s", cmd);
  tool_stdout_init_prog(prog);
}
