/* test_assert.c — WDS__ASSERT (base/assert.h): in a build with assertions
 * on (Debug, sanitizers, -DWDS_ASSERT=ON) a false one prints the file,
 * line, function and expression and aborts (death tests: the call runs in
 * a forked child, which must die of SIGABRT with that message), among
 * them the library's own checks of the shuffle buffer's bound, a slot's
 * state moves and the loader lock's owner; with assertions off it
 * compiles to nothing and does not evaluate its expression. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/assert.h"
#include "loader/handle.h"
#include "loader/shuffle.h"
#include "test.h"

static int trip_arg, trip_line;

static void trip(void) {
  trip_line = __LINE__ + 1;
  WDS__ASSERT(trip_arg == 0);
}

/* Runs fn in a child with its stderr captured into got (NUL-terminated).
 * Returns the signal that ended it, 0 when it exited 0, -1 otherwise. */
static int run_child(void (*fn)(void), char *got, size_t n) {
  int fd[2];
  got[0] = '\0';
  if (pipe(fd) != 0)
    return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    fn();
    _exit(0);
  }
  close(fd[1]);
  size_t len = 0;
  ssize_t r;
  while ((r = read(fd[0], got + len, n - 1 - len)) > 0)
    len += (size_t)r;
  got[len] = '\0';
  close(fd[0]);
  int st;
  if (waitpid(pid, &st, 0) != pid)
    return -1;
  if (WIFSIGNALED(st))
    return WTERMSIG(st);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

#define ASSERT_DIES_WITH(fn, ...)                                              \
  do {                                                                         \
    char got_[4096];                                                           \
    int sig_ = run_child(fn, got_, sizeof got_);                               \
    if (sig_ != SIGABRT) {                                                     \
      TEST_FAIL_("%s: ended with %d, not SIGABRT; stderr: %s", #fn, sig_,      \
                 got_);                                                        \
      return;                                                                  \
    }                                                                          \
    const char *want_[] = {__VA_ARGS__};                                       \
    for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++)               \
      if (!strstr(got_, want_[i_])) {                                          \
        TEST_FAIL_("%s: stderr lacks \"%s\": %s", #fn, want_[i_], got_);       \
        return;                                                                \
      }                                                                        \
  } while (0)

/* The shuffle buffer takes one sample more than its capacity. */
static void overfill_shuffle(void) {
  wds__shuffle sh;
  if (wds__shuffle_init(&sh, 2, 2, 1 << 20, 1) != WDS_OK)
    return;
  for (int i = 0; i < 3; i++)
    wds__shuffle_add(&sh, wds__raw_hole(NULL, 0, (size_t)i));
}

/* A loader with two slots, as far as wds__slot_set needs one. */
static wds_loader *slots_only(void) {
  wds_loader *l = calloc(1, sizeof *l);
  if (!l)
    return NULL;
  pthread_mutex_init(&l->mu, NULL);
  atomic_init(&l->mu_owner, 0);
  l->nslots = 2;
  l->slots = calloc(2, sizeof *l->slots);
  return l;
}

/* A slot moved without the loader's mutex. */
static void move_unlocked(void) {
  wds_loader *l = slots_only();
  if (l && l->slots)
    wds__slot_set(l, 0, SLOT_FILLING);
}

/* A slot handed out (HELD) that was never posted (READY). */
static void move_skipping_ready(void) {
  wds_loader *l = slots_only();
  if (!l || !l->slots)
    return;
  wds__loader_lock(l);
  wds__slot_set(l, 0, SLOT_FILLING); /* allowed */
  wds__slot_set(l, 0, SLOT_HELD);    /* not: FILLING -> HELD */
}

TEST(false_assertion_aborts_with_its_place) {
  if (!WDS__ASSERT_ON)
    SKIP("assertions are off in this build (on: -DWDS_ASSERT=ON)");
  trip(); /* true: sets trip_line */
  trip_arg = 1;
  char line[32];
  snprintf(line, sizeof line, "test_assert.c:%d:", trip_line);
  ASSERT_DIES_WITH(trip, line, " trip: ", "assertion failed: trip_arg == 0");
  trip_arg = 0;
  char got[256];
  ASSERT_EQ_INT(run_child(trip, got, sizeof got), 0); /* true: no abort */
}

TEST(library_invariants_abort) {
  if (!WDS__ASSERT_ON)
    SKIP("assertions are off in this build (on: -DWDS_ASSERT=ON)");
  ASSERT_DIES_WITH(overfill_shuffle, "shuffle.h:", "wds__shuffle_add",
                   "assertion failed: sh->len < sh->cap");
  ASSERT_DIES_WITH(move_unlocked, "slots.c:", "wds__slot_set",
                   "assertion failed: WDS__OWNED(&(l)->mu_owner)");
  ASSERT_DIES_WITH(move_skipping_ready, "slots.c:", "wds__slot_set",
                   "assertion failed: slot_move_ok(from, to)");
}

TEST(evaluated_only_when_on) {
  int n = 0;
  WDS__ASSERT(++n == 1);
  ASSERT_EQ_INT(n, WDS__ASSERT_ON ? 1 : 0);
  if (!WDS__ASSERT_ON) {
    /* Compiled away: a false one does nothing. */
    trip_arg = 1;
    trip();
    WDS__ASSERT(0 == 1);
    trip_arg = 0;
  }
}

TEST(lock_owner_follows_the_lock) {
  wds_loader *l = slots_only();
  ASSERT_TRUE(l && l->slots);
  ASSERT_TRUE(!WDS__ASSERT_ON || !WDS__OWNED(&l->mu_owner));
  wds__loader_lock(l);
  ASSERT_TRUE(WDS__OWNED(&l->mu_owner));
  wds__slot_set(l, 1, SLOT_FILLING);
  wds__slot_set(l, 1, SLOT_READY);
  wds__slot_set(l, 1, SLOT_HELD);
  ASSERT_EQ_INT(l->held, 1);
  wds__slot_set(l, 1, SLOT_FENCED);
  ASSERT_EQ_INT(l->held, 1);
  ASSERT_EQ_INT(l->fenced, 1);
  wds__slot_set(l, 1, SLOT_FREE);
  ASSERT_EQ_INT(l->held, 0);
  ASSERT_EQ_INT(l->fenced, 0);
  wds__loader_unlock(l);
  ASSERT_TRUE(!WDS__ASSERT_ON || !WDS__OWNED(&l->mu_owner));
  pthread_mutex_destroy(&l->mu);
  free(l->slots);
  free(l);
}

int main(void) {
  printf("assertions %s\n", WDS__ASSERT_ON ? "on" : "off");
  RUN(false_assertion_aborts_with_its_place);
  RUN(library_invariants_abort);
  RUN(evaluated_only_when_on);
  RUN(lock_owner_follows_the_lock);
  return test_summary();
}
