/* mem.c — see mem.h. */
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

void *wds__grow_slow(void *buf, size_t *cap, size_t need, size_t elem_size,
                     size_t min_cap) {
  if (need <= *cap)
    return buf;
  size_t c = *cap > min_cap ? *cap : (min_cap ? min_cap : 1);
  while (c < need)
    c = c > SIZE_MAX / 2 ? need : c * 2;
  if (elem_size && c > SIZE_MAX / elem_size)
    return NULL;
  void *p = realloc(buf, c * elem_size);
  if (!p)
    return NULL;
  *cap = c;
  return p;
}

int wds__grow_at(void *pbuf, size_t *cap, size_t need, size_t elem_size,
                 size_t min_cap) {
  void **buf = pbuf;
  void *p = wds__grow(*buf, cap, need, elem_size, min_cap);
  if (!p)
    return -1;
  *buf = p;
  return 0;
}

atomic_size_t wds__populate_calls;

void wds__populate_write(void *p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
  uintptr_t z = ((uintptr_t)p + n) & ~(uintptr_t)4095;
  if (z > a) {
    atomic_fetch_add_explicit(&wds__populate_calls, 1, memory_order_relaxed);
    (void)madvise((void *)a, z - a, MADV_POPULATE_WRITE);
  }
#else
  (void)p;
  (void)n;
#endif
}
