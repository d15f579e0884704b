/* test.h — a very small test harness shared by the unit-test binaries.
 *
 *   TEST(name) { ASSERT_EQ_INT(1 + 1, 2); ASSERT_STREQ(s, "x"); }
 *   int main(void) { RUN(name); return test_summary(); }
 *
 * A failed assertion prints both values with file and line, marks the test
 * failed and returns from it (CHECK_*: jumps to the test's `done:` label,
 * its teardown, instead). A test that cannot run here says why with
 * SKIP("reason") and returns; RUN_SKIPPED(name, "reason") counts a test not
 * run at all (a part the build lacks). Each test prints one line: "ok   name",
 * "FAIL name" or "SKIP name: reason". test_summary() prints
 * "N passed, N failed, N skipped" and returns the process exit status: 1 on a
 * failure, 77 when every test skipped (ctest's SKIP_RETURN_CODE, set for
 * every unit test: the whole binary is then reported as skipped), else 0.
 * scripts/ctest-skips.py lists the SKIP lines after a run. */
#ifndef WDS_TESTS_TEST_H
#define WDS_TESTS_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int test_passed_, test_failed_, test_skipped_, test_cur_failed_;
/* The running test's reason to skip ("" while it runs or passes). */
static char test_cur_skip_[1024];

#define TEST(name) static void name(void)

#define RUN(name)                                                              \
  do {                                                                         \
    test_cur_failed_ = 0;                                                      \
    test_cur_skip_[0] = '\0';                                                  \
    name();                                                                    \
    if (test_cur_failed_) {                                                    \
      test_failed_++;                                                          \
      printf("FAIL %s\n", #name);                                              \
    } else if (test_cur_skip_[0]) {                                            \
      test_skipped_++;                                                         \
      printf("SKIP %s: %s\n", #name, test_cur_skip_);                          \
    } else {                                                                   \
      test_passed_++;                                                          \
      printf("ok   %s\n", #name);                                              \
    }                                                                          \
    fflush(stdout);                                                            \
  } while (0)

/* SKIP("why", ...): the test cannot run here (a build without the feature,
 * one GPU where it needs two); it returns, counted as skipped, not passed. */
#define SKIP(...)                                                              \
  do {                                                                         \
    snprintf(test_cur_skip_, sizeof test_cur_skip_, __VA_ARGS__);              \
    if (!test_cur_skip_[0])                                                    \
      snprintf(test_cur_skip_, sizeof test_cur_skip_, "(no reason given)");    \
    return;                                                                    \
  } while (0)

/* RUN_IF(cond, name, "why", ...): RUN(name) when cond holds, else as
 * RUN_SKIPPED (a part of the build that is missing: libcurl). */
#define RUN_IF(cond, name, ...)                                                \
  do {                                                                         \
    if (cond)                                                                  \
      RUN(name);                                                               \
    else                                                                       \
      RUN_SKIPPED(name, __VA_ARGS__);                                          \
  } while (0)

/* RUN_SKIPPED(name, "why", ...): a test this binary does not run at all. */
#define RUN_SKIPPED(name, ...)                                                 \
  do {                                                                         \
    (void)name;                                                                \
    test_skipped_++;                                                           \
    printf("SKIP %s: ", #name);                                                \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    fflush(stdout);                                                            \
  } while (0)

#define TEST_FAIL_(...)                                                        \
  do {                                                                         \
    printf("  %s:%d: ", __FILE__, __LINE__);                                   \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    test_cur_failed_ = 1;                                                      \
  } while (0)

#define ASSERT_TRUE(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      TEST_FAIL_("ASSERT_TRUE(%s) failed", #cond);                             \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define ASSERT_EQ_INT(a, b)                                                    \
  do {                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                        \
    if (a_ != b_) {                                                            \
      TEST_FAIL_("ASSERT_EQ_INT(%s, %s): %lld != %lld", #a, #b, a_, b_);       \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define ASSERT_EQ_U64(a, b)                                                    \
  do {                                                                         \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                           \
    if (a_ != b_) {                                                            \
      TEST_FAIL_("ASSERT_EQ_U64(%s, %s): %" PRIu64 " != %" PRIu64, #a, #b, a_, \
                 b_);                                                          \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define ASSERT_STREQ(a, b)                                                     \
  do {                                                                         \
    const char *a_ = (a), *b_ = (b);                                           \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                   \
      TEST_FAIL_("ASSERT_STREQ(%s, %s): \"%s\" != \"%s\"", #a, #b,             \
                 a_ ? a_ : "(null)", b_ ? b_ : "(null)");                      \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define ASSERT_CONTAINS(haystack, needle)                                      \
  do {                                                                         \
    const char *h_ = (haystack), *n_ = (needle);                               \
    if (!h_ || !strstr(h_, n_)) {                                              \
      TEST_FAIL_("ASSERT_CONTAINS(%s, %s): \"%s\" does not contain \"%s\"",    \
                 #haystack, #needle, h_ ? h_ : "(null)", n_);                  \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* CHECK_*: as ASSERT_*, but a failed check jumps to the test's teardown
 * (a label `done:` the test defines) instead of returning, so what the test
 * holds (device memory, communicators, loaders) is released on every path:
 * the GPU tests use them, so that compute-sanitizer's leak check
 * (scripts/gpu-run.sh) finds only real leaks, also after a failure. */
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      TEST_FAIL_("CHECK(%s) failed", #cond);                                   \
      goto done;                                                               \
    }                                                                          \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
  do {                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                        \
    if (a_ != b_) {                                                            \
      TEST_FAIL_("CHECK_EQ_INT(%s, %s): %lld != %lld", #a, #b, a_, b_);        \
      goto done;                                                               \
    }                                                                          \
  } while (0)

#define CHECK_EQ_U64(a, b)                                                     \
  do {                                                                         \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                           \
    if (a_ != b_) {                                                            \
      TEST_FAIL_("CHECK_EQ_U64(%s, %s): %" PRIu64 " != %" PRIu64, #a, #b, a_,  \
                 b_);                                                          \
      goto done;                                                               \
    }                                                                          \
  } while (0)

#define CHECK_CONTAINS(haystack, needle)                                       \
  do {                                                                         \
    const char *h_ = (haystack), *n_ = (needle);                               \
    if (!h_ || !strstr(h_, n_)) {                                              \
      TEST_FAIL_("CHECK_CONTAINS(%s, %s): \"%s\" does not contain \"%s\"",     \
                 #haystack, #needle, h_ ? h_ : "(null)", n_);                  \
      goto done;                                                               \
    }                                                                          \
  } while (0)

/* Seconds on the monotonic clock (for "ended within" checks). */
/* An environment for code that reads its variables through a lookup
 * callback (wds__topology_from_env, tr_launch_resolve): ctx is a
 * NULL-terminated array of "NAME=value" strings, passed as (void *)vars. */
static inline const char *test_env_lookup(const char *name, void *ctx) {
  size_t n = strlen(name);
  for (const char *const *v = ctx; *v; v++)
    if (strncmp(*v, name, n) == 0 && (*v)[n] == '=')
      return *v + n + 1;
  return NULL;
}

static inline double test_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int test_summary(void) {
  printf("%d passed, %d failed, %d skipped\n", test_passed_, test_failed_,
         test_skipped_);
  if (test_failed_)
    return 1;
  return test_skipped_ && !test_passed_ ? 77 : 0;
}

#endif
