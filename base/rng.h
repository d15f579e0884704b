/* rng.h — seeded, counter-based randomness for every ordering decision,
 * and the splitmix64 stream every module and tool uses. Internal.
 *
 * A key is a hash of (seed, stream, epoch, rank, worker): a pure function,
 * so any draw can be recomputed anywhere without replaying others. A
 * generator (xoshiro256**) is seeded from one key and used by exactly one
 * thread. Bounded draws are unbiased (Lemire's multiply-and-reject). */
#ifndef WDS_BASE_RNG_H
#define WDS_BASE_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Streams: which decision a key is for. */
enum {
  WDS__STREAM_SHARDS = 1,   /* epoch shard permutation (same on all ranks) */
  WDS__STREAM_RESAMPLE = 2, /* resampled shard draws per worker */
  WDS__STREAM_SHUFFLE = 3,  /* shuffle buffer per worker */
  WDS__STREAM_AUGMENT = 4,  /* per-sample crop and flip */
  WDS__STREAM_MIX = 5,      /* resampled mode: each sample's source */
  WDS__STREAM_SOURCE = 6    /* a mixed source's seed (by its index) */
};

typedef struct wds__rng {
  uint64_t s[4];
} wds__rng;

/* The splitmix64 finaliser: a bijective mix of x + golden ratio. */
uint64_t wds__mix64(uint64_t x);
/* The sequential splitmix64 generator: advances *state by the golden ratio
 * and returns its mix (wds__mix64 of the old state). Fast, not
 * cryptographic; the tools' seeded streams and the trainer's weights. */
uint64_t wds__splitmix64(uint64_t *state);
uint64_t wds__rng_key(uint64_t seed, uint64_t stream, uint64_t epoch,
                      uint64_t rank, uint64_t worker);
void wds__rng_init(wds__rng *r, uint64_t key);
uint64_t wds__rng_next(wds__rng *r);
uint64_t wds__rng_below(wds__rng *r, uint64_t n);    /* [0, n); n > 0 */
void wds__permute(size_t *a, size_t n, wds__rng *r); /* Fisher-Yates */

#endif
