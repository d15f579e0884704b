/* source.c — open a shard URL as a forward-only byte source.
 *
 * Files and stdin are plain descriptors. "pipe:CMD" runs CMD through /bin/sh
 * with posix_spawn (safe in threaded programs), in its own process group and
 * with SIGPIPE at its default action, reading its stdout through a pipe. The
 * child's exit status is collected when the pipe reaches end-of-file: only
 * then do we know the stream was complete, so a failing command is reported
 * in place of a clean end. When the caller stops early, close() kills the
 * process group and reaps it, so nothing is left running and nothing is
 * reported. http(s):// URLs are read in process with libcurl (http.c), and
 * s3:// ones too, signed (s3.c); WebDataset's other curl schemes need an
 * explicit pipe:curl.
 *
 * Commands must not outlive us, however we end. Their own process group
 * keeps the terminal's Ctrl-C away from them (the program decides: the
 * tools cancel, close and so stop them), so something outside this process
 * must stop them when it dies without closing (SIGKILL, a crash, a Python
 * program that exits without closing). That is the warden: one /bin/sh
 * per process, started with the first command, in a process group of its
 * own and deaf to INT, TERM and HUP. It reads "+PGID" / "-PGID" lines from
 * a socket whose other end only we hold; when that socket reaches
 * end-of-file, we are gone, and it stops every group still registered
 * (SIGTERM, then SIGKILL a second later). A group is unregistered before
 * its leader is reaped, so a reused process group id is never signalled.
 *
 * Reads of pipes, stdin and other non-regular descriptors poll: beside the
 * descriptor, the cancellation token's eventfd (a cancel wakes a blocked
 * read at once), and with a deadline (the read timeout: no byte for that
 * long is WDS_ERR_TIMEOUT). Regular files are read directly. */
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/url.h"
#include "cache.h"
#include "http.h"
#include "s3.h"

extern char **environ;

struct wds__source {
  int fd;
  int owns_fd;
  pid_t pid; /* > 0 while a pipe: command has not been reaped */
  int at_eof;
  int regular;     /* a regular file: skip() may seek forward */
  uint64_t offset; /* bytes consumed so far */
  uint64_t size;   /* regular files: size at open */
  char *command;   /* for messages */
  int timeout_ms;  /* < 0: none */
  const wds__cancel *cancel;
  const wds__cancel *stop; /* wds__io_opts.stop */
  int nonblock;    /* our own pipe, O_NONBLOCK: read first, poll when empty */
  wds__http *http; /* http(s):// and s3://, read in process (http.c) */
  wds__cache_fill *fill; /* a remote shard being written to the cache */
  char *cache_name;      /* a cache entry read in place of a remote shard */
  /* The source reached its end with the fill whole: the entry waits for
   * wds__source_consumed (the consumer read it all) to be linked. */
  int fill_ended, fill_verified, fill_has_total;
  uint64_t fill_total;
};

/* The descriptor a command's shell reads its gate from (see
 * spawn_command). */
#define WDS__GATE_FD 3

/* Runs `/bin/sh -c script` with posix_spawn (safe in threaded programs)
 * in a process group of its own, with an empty signal mask (even if the
 * calling thread blocks signals) and the signals in dflt at their default
 * action (even if we ignore them). stdin comes from in_fd and stdout goes
 * to out_fd (-1: /dev/null); gate_fd (unless -1) becomes its descriptor
 * WDS__GATE_FD; stderr is ours, or /dev/null when quiet.
 * Returns 0 with *pid set, or an errno value. */
static int spawn_sh(const char *script, int in_fd, int out_fd, int gate_fd,
                    int quiet, const sigset_t *dflt, pid_t *pid) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  if (posix_spawn_file_actions_init(&fa) != 0)
    return ENOMEM;
  if (posix_spawnattr_init(&attr) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    return ENOMEM;
  }
  sigset_t none;
  sigemptyset(&none);
  int e = EINVAL;
  if ((in_fd >= 0 ? posix_spawn_file_actions_adddup2(&fa, in_fd, STDIN_FILENO)
                  : posix_spawn_file_actions_addopen(
                        &fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0)) == 0 &&
      (out_fd >= 0
           ? posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO)
           : posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
                                              O_WRONLY, 0)) == 0 &&
      (gate_fd < 0 ||
       posix_spawn_file_actions_adddup2(&fa, gate_fd, WDS__GATE_FD) == 0) &&
      (!quiet || posix_spawn_file_actions_addopen(
                     &fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0) == 0) &&
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                          POSIX_SPAWN_SETSIGDEF |
                                          POSIX_SPAWN_SETSIGMASK) == 0 &&
      posix_spawnattr_setpgroup(&attr, 0) == 0 &&
      posix_spawnattr_setsigdefault(&attr, dflt) == 0 &&
      posix_spawnattr_setsigmask(&attr, &none) == 0) {
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    e = posix_spawn(pid, "/bin/sh", &fa, &attr, argv, environ);
  }
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  return e;
}

/* ---- the warden ---- */

/* The warden's script: $g holds " PGID PGID ... ". */
static const char warden_script[] =
    "trap '' INT TERM HUP QUIT\n"
    "g=' '\n"
    "while IFS= read -r l; do\n"
    "  case $l in\n"
    "    +*) g=\"$g${l#+} \" ;;\n"
    "    -*) p=${l#-}\n"
    "        case $g in *\" $p \"*) g=\"${g%%\" $p \"*} ${g#*\" $p \"}\" ;; "
    "esac ;;\n"
    "  esac\n"
    "done\n"
    "[ -n \"${g# }\" ] || exit 0\n"
    "for p in $g; do kill -s TERM -- -$p 2>/dev/null; done\n"
    "sleep 1\n"
    "for p in $g; do kill -s KILL -- -$p 2>/dev/null; done\n";

static pthread_mutex_t warden_mu = PTHREAD_MUTEX_INITIALIZER;
static wds__lock_owner warden_owner; /* assertion builds: base/assert.h */
static int warden_fd = -1;           /* our end of its socket */
static pid_t warden_pid;
static pthread_once_t warden_once = PTHREAD_ONCE_INIT;

/* A forked child (multiprocessing's fork) must not share our warden: it
 * starts its own when it runs a command. The parent keeps its socket. */
static void warden_after_fork_child(void) {
  if (warden_fd >= 0)
    close(warden_fd);
  warden_fd = -1;
  warden_pid = 0;
  pthread_mutex_init(&warden_mu, NULL);
  atomic_store(&warden_owner, 0);
}

static void warden_lock(void) {
  pthread_mutex_lock(&warden_mu);
  WDS__OWNER_SET(&warden_owner);
}

static void warden_unlock(void) {
  WDS__OWNER_CLEAR(&warden_owner);
  pthread_mutex_unlock(&warden_mu);
}

static void warden_register_atfork(void) {
  pthread_atfork(NULL, NULL, warden_after_fork_child);
}

/* Starts the warden; called with warden_mu held. Failure leaves none: the
 * commands still run, only without protection against our sudden death. */
static void warden_start(void) {
  WDS__ASSERT_OWNED(&warden_owner);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return;
  sigset_t dflt; /* at their default, then ignored by the script's trap */
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  sigaddset(&dflt, SIGINT);
  sigaddset(&dflt, SIGTERM);
  sigaddset(&dflt, SIGHUP);
  /* stdout and stderr to /dev/null: it must not hold a pipe of ours (a
   * `wds ... 2>&1 | tail` would wait for it). */
  pid_t pid;
  if (spawn_sh(warden_script, sv[1], -1, -1, 1, &dflt, &pid) == 0) {
    warden_fd = sv[0];
    warden_pid = pid;
  } else {
    close(sv[0]);
  }
  close(sv[1]);
}

/* Sends "+PGID" or "-PGID"; a warden that died is replaced once (it can
 * only have died by someone killing it: it then protects the groups
 * registered from now on). */
static void warden_send(char op, pid_t pgid) {
  char line[32];
  int n = snprintf(line, sizeof line, "%c%ld\n", op, (long)pgid);
  pthread_once(&warden_once, warden_register_atfork);
  warden_lock();
  for (int attempt = 0; attempt < 2; attempt++) {
    if (warden_fd < 0) {
      if (op == '-')
        break; /* a new warden never knew the group */
      warden_start();
      if (warden_fd < 0)
        break;
    }
    ssize_t w;
    do {
      w = send(warden_fd, line, (size_t)n, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w == n)
      break;
    /* EPIPE: the warden is gone. Reap it if it was ours. */
    close(warden_fd);
    warden_fd = -1;
    if (warden_pid > 0)
      waitpid(warden_pid, NULL, WNOHANG);
    warden_pid = 0;
  }
  warden_unlock();
}

/* Starts the warden before a command does, if it is not running, so that
 * the command's registration does not wait for a first warden to start. */
static void warden_ensure(void) {
  pthread_once(&warden_once, warden_register_atfork);
  warden_lock();
  if (warden_fd < 0)
    warden_start();
  warden_unlock();
}

/* ---- commands ---- */

static int starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Single-quotes s for /bin/sh. */
static char *shell_quote(const char *s) {
  size_t n = 3;
  for (const char *p = s; *p; p++)
    n += (*p == '\'') ? 4 : 1;
  char *q = malloc(n);
  if (!q)
    return NULL;
  char *o = q;
  *o++ = '\'';
  for (const char *p = s; *p; p++) {
    if (*p == '\'') {
      memcpy(o, "'\\''", 4);
      o += 4;
    } else {
      *o++ = *p;
    }
  }
  *o++ = '\'';
  *o = '\0';
  return q;
}

/* A test hook: called between a command's spawn and its registration. */
void (*wds__source_after_spawn_hook)(void);

/* The command's shell waits at a gate (a socket on WDS__GATE_FD) until we
 * have registered its group with the warden, and runs nothing if we died
 * first (the gate then reads end-of-file). Without it, a SIGKILL of this
 * process between the spawn and the registration, or a preemption there
 * long enough for the command to start and be seen, left the command
 * running with nobody to stop it. */
static const char gate_script[] = "read -r _ <&3 || exit 1; exec 3<&-; ";

/* A connected socket pair (a send to a shell that is gone then fails with
 * EPIPE instead of raising SIGPIPE), both ends above WDS__GATE_FD, so that
 * the dup2 onto it in the child never meets its own source (which would
 * keep close-on-exec). */
static int gate_pair(int fds[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return -1;
  for (int i = 0; i < 2; i++) {
    if (fds[i] > WDS__GATE_FD)
      continue;
    int d = fcntl(fds[i], F_DUPFD_CLOEXEC, WDS__GATE_FD + 1);
    if (d < 0) {
      close(fds[0]);
      close(fds[1]);
      return -1;
    }
    close(fds[i]);
    fds[i] = d;
  }
  return 0;
}

static int spawn_command(wds__source *s, const char *cmd, wds__err *err) {
  int fds[2], gate[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return wds__fail(err, WDS_ERR_OPEN,
                     "cannot create a pipe for the command: %s",
                     strerror(errno));
  if (gate_pair(gate) != 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    return wds__fail(err, WDS_ERR_OPEN,
                     "cannot create a socket pair for the command: %s",
                     strerror(e));
  }
  size_t glen = strlen(gate_script), clen = strlen(cmd);
  char *script = malloc(glen + clen + 1);
  if (!script) {
    close(fds[0]);
    close(fds[1]);
    close(gate[0]);
    close(gate[1]);
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  }
  memcpy(script, gate_script, glen);
  memcpy(script + glen, cmd, clen + 1);
  /* A larger pipe (1 MiB, the default limit for unprivileged processes;
   * refused quietly where lower) means fewer wake-ups per byte: the
   * command fills more before we drain it. */
  fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
  /* Its own process group, so that close() can stop the whole pipeline;
   * SIGPIPE at its default even if we ignore it. stdin is /dev/null: the
   * command runs in a background process group, where reading the terminal
   * would stop it (SIGTTIN) and hang us; and our own stdin may be a shard
   * ("-"). */
  sigset_t dflt;
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  warden_ensure();
  int e = spawn_sh(script, -1, fds[1], gate[0], 0, &dflt, &s->pid);
  free(script);
  close(fds[1]);
  close(gate[0]);
  if (e != 0) {
    s->pid = 0;
    close(fds[0]);
    close(gate[1]);
    return e == ENOMEM ? wds__fail(err, WDS_ERR_NOMEM, "out of memory")
                       : wds__fail(err, WDS_ERR_OPEN,
                                   "cannot start /bin/sh: %s", strerror(e));
  }
  if (wds__source_after_spawn_hook)
    wds__source_after_spawn_hook();
  warden_send('+', s->pid);
  /* Open the gate. A failed write (the shell is already gone) leaves it
   * closed: the shell then reads end-of-file and exits, which the reader
   * reports as the command's failure. */
  ssize_t gw;
  do {
    gw = send(gate[1], "\n", 1, MSG_NOSIGNAL);
  } while (gw < 0 && errno == EINTR);
  close(gate[1]);
  /* The read end is ours alone, so it may be non-blocking: a read is then
   * tried before any poll, and a flowing pipe costs no extra system call. */
  int fl = fcntl(fds[0], F_GETFL);
  s->nonblock = fl >= 0 && fcntl(fds[0], F_SETFL, fl | O_NONBLOCK) == 0;
  s->fd = fds[0];
  s->owns_fd = 1;
  return WDS_OK;
}

/* Remote schemes that WebDataset's gopen hands to curl: http(s) is read in
 * process (http.c); the others need an explicit pipe:curl. */
static int is_http_url(const char *url) {
  return starts_with(url, "http://") || starts_with(url, "https://");
}

static int is_other_remote_url(const char *url) {
  static const char *const schemes[] = {"ftp://", "ftps://", "sftp://",
                                        "scp://"};
  for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++)
    if (starts_with(url, schemes[i]))
      return 1;
  return 0;
}

/* Whether path holds a '{' with a '}' after it: a brace group the spec's
 * expansion left as it was (as braceexpand does: {000..00a}, {0000...0004},
 * {x}), which a missing file's message then points at. */
static int literal_braces(const char *path) {
  const char *open = strchr(path, '{');
  return open && strchr(open, '}') != NULL;
}

/* Reads the open file fd (ours now). */
static int use_file(wds__source *s, int fd, wds__err *err) {
  s->fd = fd;
  s->owns_fd = 1;
  struct stat st;
  if (fstat(s->fd, &st) != 0)
    return wds__fail(err, WDS_ERR_OPEN, "cannot stat the file: %s",
                     strerror(errno));
  if (S_ISDIR(st.st_mode))
    return wds__fail(err, WDS_ERR_OPEN, "cannot open: is a directory");
  if (S_ISREG(st.st_mode)) {
    s->regular = 1;
    s->size = (uint64_t)st.st_size;
  }
  posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return WDS_OK;
}

int wds__source_open(const char *url, const wds__io_opts *opts,
                     wds__source **out, wds__err *err) {
  int rc = WDS_OK;
  char *quoted = NULL;
  *out = NULL;
  wds__source *s = calloc(1, sizeof *s);
  if (!s)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  s->fd = -1;
  s->timeout_ms = !opts || opts->read_timeout_ms == 0
                      ? WDS__DEFAULT_READ_TIMEOUT_MS
                      : opts->read_timeout_ms;
  s->cancel = opts ? opts->cancel : NULL;
  s->stop = opts ? opts->stop : NULL;
  /* A remote shard read before may be in the local cache (cache.h). */
  const wds__cache_cfg *cache =
      opts && opts->cache.dir && wds__cache_is_remote(url) ? &opts->cache
                                                           : NULL;
  int cached_fd = cache ? wds__cache_open(cache, url, &s->cache_name) : -1;

  if (cached_fd >= 0) {
    rc = use_file(s, cached_fd, err);
  } else if (strcmp(url, "-") == 0) {
    s->fd = STDIN_FILENO;
  } else if (starts_with(url, "pipe:")) {
    const char *cmd = url + 5;
    s->command = strdup(cmd);
    if (!s->command) {
      rc = wds__fail(err, WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
    rc = spawn_command(s, cmd, err);
  } else if (is_http_url(url)) {
    rc = wds__http_open(url, opts, &s->http, err);
  } else if (wds__s3_is_url(url)) {
    rc = wds__s3_open(url, opts, &s->http, err);
  } else if (is_other_remote_url(url)) {
    quoted = shell_quote(url);
    char rb[WDS__URL_REDACT_MAX];
    rc = wds__fail(err, WDS_ERR_OPEN,
                   "cannot open: only http(s):// is read in process; name "
                   "a command for this scheme explicitly (pipe:curl -s %s)",
                   wds__url_redact(quoted ? quoted : url, rb, sizeof rb));
  } else {
    const char *path = wds__url_local_path(url);
    if (!path && wds__url_is_bad_file(url)) {
      rc = wds__fail(err, WDS_ERR_OPEN,
                     "cannot open: file URLs must name an absolute "
                     "local path (file:///PATH)");
      goto done;
    } else if (!path) {
      rc = wds__fail(err, WDS_ERR_OPEN,
                     "cannot open: unsupported URL scheme (use a local "
                     "path, file://, http(s)://, s3://, pipe:CMD or -)");
      goto done;
    }
    /* A FIFO's first read waits for data under the read timeout and
     * cancel, as a pipe's does (wait_readable). */
    int fd;
    rc = wds__open_local(path, opts, 0, &fd, err);
    if (rc == WDS_OK) {
      rc = use_file(s, fd, err);
    } else {
      if (rc == WDS_ERR_OPEN && literal_braces(path) &&
          access(path, F_OK) != 0 && errno == ENOENT) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n,
                 " (the braces were not expanded: {a..b} needs two "
                 "integers or two letters, {a,b} a comma)");
      }
      wds__err_prefix(err, "cannot open the file");
    }
  }
  /* A remote shard streams into the cache as it is read. */
  if (rc == WDS_OK && cache && s->http)
    s->fill = wds__cache_fill_begin(cache, url);
done:
  free(quoted);
  if (rc != WDS_OK) {
    wds__source_close(s);
    return rc;
  }
  *out = s;
  return WDS_OK;
}

/* Reaps the command and turns its status into an error, or 0 when it
 * succeeded. WebDataset also accepts 141 (128 + SIGPIPE). */
static int reap_command(wds__source *s, wds__err *err) {
  int status = 0;
  pid_t r;
  /* the command as messages show it: without its secrets, or its URLs'
   * (base/url.h) */
  char rb[WDS__URL_REDACT_MAX];
  const char *cmd = wds__command_redact(s->command, rb, sizeof rb);
  warden_send('-', s->pid);
  do {
    r = waitpid(s->pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  s->pid = 0;
  /* ECHILD: the program ignores SIGCHLD, so the child was reaped by the
   * kernel and its status is gone. Python's subprocess reports 0 then. */
  if (r < 0 && errno == ECHILD)
    return WDS_OK;
  if (r < 0)
    return wds__fail(err, WDS_ERR_COMMAND, "cannot wait for command \"%s\": %s",
                     cmd, strerror(errno));
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code == 0 || code == 141)
      return WDS_OK;
    return wds__fail(err, WDS_ERR_COMMAND,
                     "command \"%s\" failed with exit status %d", cmd, code);
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGPIPE)
      return WDS_OK;
    return wds__fail(
        err, WDS_ERR_COMMAND,
        "command \"%s\" killed by signal %d (%s) before it could exit", cmd,
        sig, strsignal(sig));
  }
  return wds__fail(err, WDS_ERR_COMMAND, "command \"%s\" ended abnormally",
                   cmd);
}

static int wait_readable(wds__source *s, wds__err *err);

int wds__open_local(const char *path, const wds__io_opts *opts, int wait_fifo,
                    int *fd_out, wds__err *err) {
  *fd_out = -1;
  /* O_NONBLOCK: a FIFO without a writer opens at once instead of blocking
   * in open(2) beyond the read timeout, cancel and signals. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return wds__fail(err, WDS_ERR_OPEN, "%s", strerror(errno));
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    return wds__fail(err, WDS_ERR_OPEN, "fcntl: %s", strerror(e));
  }
  struct stat st;
  if (wait_fifo && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
    wds__source w = {.fd = fd,
                     .timeout_ms = !opts || opts->read_timeout_ms == 0
                                       ? WDS__DEFAULT_READ_TIMEOUT_MS
                                       : opts->read_timeout_ms,
                     .cancel = opts ? opts->cancel : NULL,
                     .stop = opts ? opts->stop : NULL};
    int rc = wait_readable(&w, err);
    if (rc != WDS_OK) {
      close(fd);
      return rc;
    }
  }
  *fd_out = fd;
  return WDS_OK;
}

/* Waits until the descriptor has data (or its end, or an error, which the
 * read then reports), the token is set, or the read timeout passes. */
static int wait_readable(wds__source *s, wds__err *err) {
  uint64_t start = wds__now_ms();
  for (;;) {
    if (wds__cancelled2(s->cancel, s->stop))
      return wds__fail(err, WDS_ERR_CANCELLED, "cancelled");
    struct pollfd p[3] = {
        {.fd = s->fd, .events = POLLIN},
        {.fd = s->cancel ? s->cancel->fd : -1, .events = POLLIN},
        {.fd = s->stop ? s->stop->fd : -1, .events = POLLIN}};
    int wait;
    int rc = wds__read_wait(s->cancel, start, s->timeout_ms, -1, &wait, err);
    if (rc != WDS_OK)
      return rc;
    int r = poll(p, 3, wait);
    if (r < 0 && errno != EINTR)
      return wds__fail(err, WDS_ERR_IO, "poll error: %s", strerror(errno));
    if (r > 0 && p[0].revents)
      return WDS_OK;
  }
}

ssize_t wds__source_read(wds__source *s, void *dst, size_t cap, wds__err *err) {
  if (s->at_eof)
    return 0;
  if (s->http) {
    ssize_t n = wds__http_read(s->http, dst, cap, err);
    if (n > 0) {
      s->offset += (uint64_t)n;
      wds__cache_fill_write(s->fill, dst, (size_t)n);
    } else if (n == 0) {
      s->at_eof = 1;
      /* Read whole; but the stream's reading thread may have read ahead of
       * a consumer that stops before the end: the entry is linked (or, at
       * an end only assumed, http.h, abandoned as a cache failure) when the
       * consumer says it read everything (wds__source_consumed). */
      if (s->fill) {
        s->fill_ended = 1;
        s->fill_verified = wds__http_verified(s->http);
        s->fill_has_total = wds__http_total(s->http, &s->fill_total);
      }
    } else {
      wds__cache_fill_abort(s->fill);
      s->fill = NULL;
    }
    return n;
  }
  for (;;) {
    if (wds__cancelled2(s->cancel, s->stop))
      return wds__fail(err, WDS_ERR_CANCELLED, "cancelled");
    if (!s->regular && !s->nonblock) {
      int rc = wait_readable(s, err);
      if (rc != WDS_OK)
        return rc;
    }
    ssize_t n = read(s->fd, dst, cap);
    if (n > 0) {
      s->offset += (uint64_t)n;
      return n;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && s->nonblock) {
      int rc = wait_readable(s, err); /* empty: wait for the command */
      if (rc != WDS_OK)
        return rc;
      continue;
    }
    if (n < 0)
      return wds__fail(err, WDS_ERR_IO, "read error: %s", strerror(errno));
    s->at_eof = 1;
    if (s->pid > 0) {
      int rc = reap_command(s, err);
      if (rc != WDS_OK)
        return rc;
    }
    return 0;
  }
}

ssize_t wds__source_skip(wds__source *s, uint64_t n, void *scratch,
                         size_t scratch_size, wds__err *err) {
  if (s->regular && !s->at_eof) {
    /* Never past the size seen at open: a seek cannot notice truncation,
     * so the end is read (and so checked) normally. */
    uint64_t room = s->size > s->offset ? s->size - s->offset : 0;
    uint64_t step = n < room ? n : room;
    if (step > (uint64_t)SSIZE_MAX)
      step = (uint64_t)SSIZE_MAX;
    if (step > scratch_size) {
      if (lseek(s->fd, (off_t)step, SEEK_CUR) < 0)
        return wds__fail(err, WDS_ERR_IO, "seek error: %s", strerror(errno));
      s->offset += step;
      return (ssize_t)step;
    }
  }
  return wds__source_read(s, scratch,
                          n < scratch_size ? (size_t)n : scratch_size, err);
}

void wds__source_consumed(wds__source *s) {
  if (!s || !s->fill || !s->fill_ended)
    return;
  if (s->fill_verified) /* the entry takes its place */
    wds__cache_fill_commit(s->fill, s->offset, s->fill_has_total,
                           s->fill_total);
  else /* an end only assumed: the read stands, the entry not */
    wds__cache_fill_unverified(s->fill);
  s->fill = NULL;
}

int wds__source_is_regular(const wds__source *s) { return s->regular; }

int wds__source_file_fd(const wds__source *s) {
  return s && s->regular ? s->fd : -1;
}

int wds__source_is_cache_entry(const wds__source *s) {
  return s && s->cache_name != NULL;
}

void wds__source_close(wds__source *s) {
  if (!s)
    return;
  if (s->owns_fd && s->fd >= 0)
    close(s->fd);
  wds__cache_fill_abort(s->fill); /* stopped early: nothing is kept */
  wds__cache_release(s->cache_name);
  wds__http_close(s->http);
  if (s->pid > 0) {
    /* Stopped early: the command may be blocked writing to us or elsewhere.
     * Its process group cannot be reused while the child is unreaped; if
     * the host program ignores SIGCHLD the kernel may have reaped it
     * already (ECHILD), and then the group must not be signalled. */
    int status0;
    warden_send('-', s->pid);
    pid_t r0 = waitpid(s->pid, &status0, WNOHANG);
    if (r0 != 0) {
      s->pid = 0;
      goto freed;
    }
    kill(-s->pid, SIGTERM);
    int status;
    pid_t r = 0;
    for (int i = 0; i < 200 && r == 0; i++) { /* up to 2 s, then SIGKILL */
      r = waitpid(s->pid, &status, WNOHANG);
      if (r < 0 && errno == EINTR)
        r = 0;
      if (r == 0)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (r == 0) {
      kill(-s->pid, SIGKILL);
      while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
freed:
  free(s->command);
  free(s);
}
