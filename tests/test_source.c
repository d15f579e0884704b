/* test_source.c — pipe: commands and stalls at the reader's level: the read
 * timeout, wds_reader_cancel from a thread and from a signal handler, and
 * the warden (a command dies with its process, even by SIGKILL).
 *
 * Each stalled command is `sleep N.PID`, N unique to its test and PID this
 * test's process (so that suites running side by side, or a command some
 * earlier run left behind, do not meet), found in /proc by its command
 * line. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shards/source.h"
#include "shards/tarw.h"
#include "test.h"
#include "test_files.h"
#include "wds/reader.h"

static char tmpdir[256];

static long run_id; /* this test's process id, taken before any fork */

/* "N.PID": the argument of this run's `sleep` for test number n. */
static const char *arg(int n) {
  static char buf[8][32];
  snprintf(buf[n], sizeof buf[n], "%d.%ld", 6400 + n, run_id % 100000);
  return buf[n];
}

/* "pipe:sleep N.PID" */
static const char *sleep_url(int n) {
  static char buf[8][48];
  snprintf(buf[n], sizeof buf[n], "pipe:sleep %s", arg(n));
  return buf[n];
}

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Whether a process runs `sleep ARG`; with stop, sends it SIGKILL too (so
 * that a failed test leaves nothing behind holding our output). */
static int sleep_find(const char *arg, int stop) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  int found = 0;
  char want[64];
  int wlen = snprintf(want, sizeof want, "sleep%c%s", 0, arg) + 1;
  while (d && !found && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    char path[300], buf[64];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f)
      continue;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    /* a zombie has an empty command line: it no longer runs */
    found = n == (size_t)wlen && memcmp(buf, want, n) == 0;
    if (found && stop)
      kill((pid_t)atol(e->d_name), SIGKILL);
  }
  if (d)
    closedir(d);
  return found;
}

static int sleep_running(const char *arg) { return sleep_find(arg, 0); }

/* Waits up to ms for sleep_running(arg) to become `state`. */
static int wait_sleep(const char *arg, int state, long ms) {
  for (long t = 0; t < ms; t += 20) {
    if (sleep_running(arg) == state)
      return 1;
    pause_ms(20);
  }
  return sleep_running(arg) == state;
}

static wds_reader *open_one(const char *url, int timeout_ms) {
  wds_reader_config c = WDS_READER_CONFIG_INIT;
  c.urls = &url;
  c.url_count = 1;
  c.read_timeout_ms = timeout_ms;
  wds_reader *r = NULL;
  if (wds_reader_open(&c, &r) != WDS_OK)
    printf("  open: %s\n", wds_last_error());
  return r;
}

TEST(read_timeout_ends_a_stalled_shard) {
  wds_reader *r = open_one(sleep_url(1), 200);
  ASSERT_TRUE(r != NULL);
  const wds_sample *s;
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_TIMEOUT);
  double dt = test_now_s() - t0;
  printf("  %s (%.2f s)\n", wds_last_error(), dt);
  ASSERT_TRUE(dt >= 0.19 && dt < 5);
  char want[96];
  snprintf(want, sizeof want, "%s: no data for 0.2 s", sleep_url(1));
  ASSERT_CONTAINS(wds_last_error(), want);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF); /* the only shard */
  wds_reader_close(r);
  ASSERT_TRUE(wait_sleep(arg(1), 0, 5000)); /* stopped on close */
}

TEST(read_timeout_does_not_touch_files_or_flowing_pipes) {
  char path[512];
  snprintf(path, sizeof path, "%s/a.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "k%d.txt", i);
    ASSERT_EQ_INT(wds__tarw_add(w, name, "x", 1, &e), WDS_OK);
  }
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);
  /* a command that pauses less than the timeout between its writes */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "pipe:head -c 1024 %s; sleep 0.3; tail -c +1025 %s",
           path, path);
  const char *urls[2] = {path, cmd};
  for (int k = 0; k < 2; k++) {
    wds_reader *r = open_one(urls[k], 1000);
    ASSERT_TRUE(r != NULL);
    const wds_sample *s;
    int n = 0, rc;
    while ((rc = wds_reader_next(r, &s)) == WDS_OK)
      n++;
    if (rc != WDS_EOF)
      printf("  %s\n", wds_last_error());
    ASSERT_EQ_INT(rc, WDS_EOF);
    ASSERT_EQ_INT(n, 3);
    wds_reader_close(r);
  }
}

typedef struct blocked {
  wds_reader *r;
  int rc;
  double returned;
} blocked;

static void *read_blocked(void *arg) {
  blocked *b = arg;
  const wds_sample *s;
  b->rc = wds_reader_next(b->r, &s);
  b->returned = test_now_s();
  return NULL;
}

TEST(cancel_from_a_thread_wakes_a_blocked_read) {
  blocked b = {open_one(sleep_url(2), -1), 0, 0};
  ASSERT_TRUE(b.r != NULL);
  pthread_t t;
  ASSERT_EQ_INT(pthread_create(&t, NULL, read_blocked, &b), 0);
  ASSERT_TRUE(wait_sleep(arg(2), 1, 5000));
  pause_ms(100);
  double t0 = test_now_s();
  wds_reader_cancel(b.r);
  pthread_join(t, NULL);
  printf("  woke %.3f s after the cancel\n", b.returned - t0);
  ASSERT_EQ_INT(b.rc, WDS_ERR_CANCELLED);
  ASSERT_TRUE(b.returned - t0 < 1.0);
  const wds_sample *s;
  ASSERT_EQ_INT(wds_reader_next(b.r, &s), WDS_ERR_CANCELLED); /* for good */
  wds_reader_close(b.r);
  ASSERT_TRUE(wait_sleep(arg(2), 0, 5000));
}

static wds_reader *volatile alarm_reader;

static void on_alarm(int sig) {
  (void)sig;
  wds_reader_cancel(alarm_reader);
}

TEST(cancel_from_a_signal_handler) {
  wds_reader *r = open_one(sleep_url(3), -1);
  ASSERT_TRUE(r != NULL);
  alarm_reader = r;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART; /* the read is woken by the cancel, not EINTR */
  sigaction(SIGALRM, &sa, &old);
  struct itimerval it = {{0, 0}, {0, 300 * 1000}};
  setitimer(ITIMER_REAL, &it, NULL);
  const wds_sample *s;
  double t0 = test_now_s();
  int rc = wds_reader_next(r, &s);
  double dt = test_now_s() - t0;
  sigaction(SIGALRM, &old, NULL);
  printf("  next() returned after %.3f s\n", dt);
  ASSERT_EQ_INT(rc, WDS_ERR_CANCELLED);
  ASSERT_TRUE(dt < 3.0);
  wds_reader_close(r);
  ASSERT_TRUE(wait_sleep(arg(3), 0, 5000));
}

/* The warden: a process killed while its reader runs a command (no close,
 * no handler can run) takes the command with it; and one that exits
 * without closing its reader, as a careless program may. */
TEST(commands_die_with_their_process) {
  const char *args[2] = {arg(4), arg(5)};
  for (int k = 0; k < 2; k++) {
    fflush(stdout);
    pid_t child = fork();
    ASSERT_TRUE(child >= 0);
    if (child == 0) {
      wds_reader *r = open_one(sleep_url(4 + k), k == 0 ? -1 : 300);
      const wds_sample *s;
      if (r)
        wds_reader_next(r, &s); /* k == 0 blocks until killed */
      _exit(0);                 /* k == 1: leaves the reader open */
    }
    if (k == 0) {
      ASSERT_TRUE(wait_sleep(args[k], 1, 5000));
      kill(child, SIGKILL);
    }
    int status;
    waitpid(child, &status, 0);
    printf("  %s: the child %s\n", args[k],
           WIFSIGNALED(status) ? "was killed" : "exited");
    ASSERT_TRUE(wait_sleep(args[k], 0, 5000));
  }
}

static void die_now(void) { raise(SIGKILL); }

/* A process killed between a command's spawn and its registration with the
 * warden (here by a hook at that point; before, by a preemption there on a
 * busy machine) leaves nothing running: the command's shell waits at its
 * gate, reads end-of-file when we are gone, and runs nothing. Before the
 * gate, the command ran on with nobody to stop it. */
TEST(a_command_never_outlives_a_death_before_registration) {
  fflush(stdout);
  pid_t child = fork();
  ASSERT_TRUE(child >= 0);
  if (child == 0) {
    wds__source_after_spawn_hook = die_now;
    wds_reader *r = open_one(sleep_url(6), -1);
    const wds_sample *s;
    if (r)
      wds_reader_next(r, &s); /* opens the shard: the hook kills us */
    _exit(0);                 /* not reached */
  }
  int status;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  /* The command would have started within this time. */
  pause_ms(500);
  int gone = wait_sleep(arg(6), 0, 2000);
  if (!gone)
    sleep_find(arg(6), 1);
  ASSERT_TRUE(gone);
}

int main(void) {
  run_id = (long)getpid();
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-source-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(read_timeout_ends_a_stalled_shard);
  RUN(read_timeout_does_not_touch_files_or_flowing_pipes);
  RUN(cancel_from_a_thread_wakes_a_blocked_read);
  RUN(cancel_from_a_signal_handler);
  RUN(commands_die_with_their_process);
  RUN(a_command_never_outlives_a_death_before_registration);
  test_remove_tree(tmpdir);
  return test_summary();
}
