/* assert.h — runtime assertions of the invariants the comments state.
 *
 * WDS__ASSERT(cond) checks an invariant of the library's own making (a
 * slot's state, a count's bounds, a lock held), never anything input can
 * cause: input gets an error with a message (base/err.h). In a build with
 * assertions on (WDS__ASSERT_ON, set by CMake: Debug, the sanitizer and
 * fuzz builds, or -DWDS_ASSERT=ON) a false condition prints the file,
 * line, function and expression to stderr and aborts. Otherwise it
 * compiles to nothing: the expression is not evaluated, but it is still
 * compiled (sizeof), so it cannot rot. An assertion must have no side
 * effects.
 *
 * Lock ownership: a struct that wants "called with mu held" checked keeps a
 * wds__lock_owner beside the mutex, set after each lock and cleared before
 * each unlock (and around condition waits) through the WDS__OWNER_*
 * macros; WDS__ASSERT_OWNED(o) then checks that the calling thread holds
 * it. The owner is a relaxed atomic, so the check is race-free (TSan
 * clean) whoever calls it; with assertions off the macros compile to
 * nothing and the field is never touched. */
#ifndef WDS_BASE_ASSERT_H
#define WDS_BASE_ASSERT_H

#include <stdatomic.h>
#include <stdint.h>

#if defined(WDS__ASSERT_ON) && WDS__ASSERT_ON
#undef WDS__ASSERT_ON
#define WDS__ASSERT_ON 1
#else
#undef WDS__ASSERT_ON
#define WDS__ASSERT_ON 0
#endif

/* Prints "FILE:LINE: FUNC: assertion failed: EXPR" to stderr and aborts. */
_Noreturn void wds__assert_fail(const char *expr, const char *file, int line,
                                const char *func) __attribute__((cold));

#if WDS__ASSERT_ON
#define WDS__ASSERT(cond)                                                      \
  ((cond) ? (void)0 : wds__assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define WDS__ASSERT(cond) ((void)sizeof(!(cond)))
#endif

/* The thread holding a lock: 0 when none (or assertions are off). */
typedef atomic_uintptr_t wds__lock_owner;

/* This thread's identity: nonzero, distinct among live threads. */
uintptr_t wds__thread_self(void);

#if WDS__ASSERT_ON
#define WDS__OWNER_SET(o)                                                      \
  atomic_store_explicit((o), wds__thread_self(), memory_order_relaxed)
#define WDS__OWNER_CLEAR(o)                                                    \
  do {                                                                         \
    WDS__ASSERT_OWNED(o);                                                      \
    atomic_store_explicit((o), (uintptr_t)0, memory_order_relaxed);            \
  } while (0)
#define WDS__OWNED(o)                                                          \
  (atomic_load_explicit((o), memory_order_relaxed) == wds__thread_self())
#else
#define WDS__OWNER_SET(o) ((void)sizeof(o))
#define WDS__OWNER_CLEAR(o) ((void)sizeof(o))
#define WDS__OWNED(o) ((void)sizeof(o), 1)
#endif
#define WDS__ASSERT_OWNED(o) WDS__ASSERT(WDS__OWNED(o))

#endif
