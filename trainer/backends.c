/* backends.c — the registry of wds-train's backends: one table, in the
 * order --device auto tries them (device backends first, the CPU last: it
 * is always available). A build without CUDA simply has no "cuda" row; a
 * new backend is its own file and one row here. */
#include <stddef.h>
#include <string.h>

#include "trainer/backend.h"

static const tr_backend *const backends[] = {
#ifdef WDS_TRAINER_CUDA
    &tr_backend_cuda,
#endif
    &tr_backend_cpu,
};

#define N_BACKENDS (sizeof backends / sizeof backends[0])

const tr_backend *tr_backend_find(const char *name) {
  for (size_t i = 0; i < N_BACKENDS; i++)
    if (strcmp(backends[i]->name, name) == 0)
      return backends[i];
  return NULL;
}

int tr_backend_available(const tr_backend *be, wds__err *why) {
  if (!be->device_count)
    return 1;
  return be->device_count(why) > 0;
}

const tr_backend *tr_backend_auto(wds__err *why) {
  for (size_t i = 0; i < N_BACKENDS; i++)
    if (tr_backend_available(backends[i], why))
      return backends[i];
  return &tr_backend_cpu; /* not reached: the CPU is always available */
}
