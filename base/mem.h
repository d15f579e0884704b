/* mem.h — growing arrays, the one allocation pattern every module repeats.
 * Internal to wds. */
#ifndef WDS_BASE_MEM_H
#define WDS_BASE_MEM_H

#include <stdatomic.h>
#include <stddef.h>

/* Returns buf grown to hold at least need elements of elem_size bytes, and
 * sets *cap to the new capacity (in elements): doubling from min_cap, so
 * appends cost amortised O(1). Returns buf itself when *cap already
 * suffices, NULL on allocation failure or overflow (buf is then unchanged
 * and still owned by the caller). */
void *wds__grow_slow(void *buf, size_t *cap, size_t need, size_t elem_size,
                     size_t min_cap);

/* The common case, room enough, is inline: the reader grows its arrays
 * several times per tar member. */
static inline void *wds__grow(void *buf, size_t *cap, size_t need,
                              size_t elem_size, size_t min_cap) {
  if (need <= *cap)
    return buf;
  return wds__grow_slow(buf, cap, need, elem_size, min_cap);
}

/* The same for an array pointer updated in place: pbuf is its address
 * (T **). 0, or -1 on allocation failure or overflow (the array and *cap
 * are then unchanged). */
int wds__grow_at(void *pbuf, size_t *cap, size_t need, size_t elem_size,
                 size_t min_cap);

/* Makes the pages wholly inside [p, p + n) in one madvise(2)
 * (MADV_POPULATE_WRITE) instead of one fault each, which costs several
 * times more on a VM; nothing where the kernel lacks it. Only for bytes
 * about to be written: populated pages count in the resident size whether
 * they are written or not. */
void wds__populate_write(void *p, size_t n);

/* The madvise(2) calls wds__populate_write has made in this process (for
 * tests: a steady state that populates recycled memory again shows). */
extern atomic_size_t wds__populate_calls;

#endif
