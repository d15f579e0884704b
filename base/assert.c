/* assert.c — the failure path of WDS__ASSERT (base/assert.h), and the
 * thread identity its lock-owner checks compare. Compiled in every build:
 * a test or a tool built with assertions on may link a library without. */
#include "base/assert.h"

#include <stdio.h>
#include <stdlib.h>

void wds__assert_fail(const char *expr, const char *file, int line,
                      const char *func) {
  fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", file, line, func, expr);
  fflush(stderr);
  abort();
}

/* The address of a thread-local byte: nonzero, and no two live threads
 * share it. */
static _Thread_local char self_byte;

uintptr_t wds__thread_self(void) { return (uintptr_t)&self_byte; }
