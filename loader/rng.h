/* rng.h — seeded, counter-based randomness for every ordering decision.
 * Internal.
 *
 * A key is a hash of (seed, stream, epoch, rank, worker): a pure function,
 * so any draw can be recomputed anywhere without replaying others. A
 * generator (xoshiro256**) is seeded from one key and used by exactly one
 * thread. Bounded draws are unbiased (Lemire's multiply-and-reject). */
#ifndef WDS_LOADER_RNG_H
#define WDS_LOADER_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Streams: which decision a key is for. */
enum {
  WDS__STREAM_SHARDS = 1,   /* epoch shard permutation (same on all ranks) */
  WDS__STREAM_RESAMPLE = 2, /* resampled shard draws per worker */
  WDS__STREAM_SHUFFLE = 3,  /* shuffle buffer per worker */
  WDS__STREAM_AUGMENT = 4   /* per-sample crop and flip */
};

typedef struct wds__rng {
  uint64_t s[4];
} wds__rng;

uint64_t wds__mix64(uint64_t x);
uint64_t wds__rng_key(uint64_t seed, uint64_t stream, uint64_t epoch,
                      uint64_t rank, uint64_t worker);
void wds__rng_init(wds__rng *r, uint64_t key);
uint64_t wds__rng_next(wds__rng *r);
uint64_t wds__rng_below(wds__rng *r, uint64_t n); /* [0, n); n > 0 */
void wds__permute(size_t *a, size_t n, wds__rng *r); /* Fisher-Yates */

#endif
