/* rng.c — splitmix64 key hashing and xoshiro256** generators (see rng.h).
 * Both are small, fast, well studied and identical on every platform, which
 * is what reproducible orders across machines need. */
#include "base/rng.h"

uint64_t wds__mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t wds__splitmix64(uint64_t *state) {
  uint64_t x = *state;
  *state = x + 0x9e3779b97f4a7c15ULL;
  return wds__mix64(x);
}

uint64_t wds__rng_key(uint64_t seed, uint64_t stream, uint64_t epoch,
                      uint64_t rank, uint64_t worker) {
  /* Chained hashing: each component goes through the full mixer, so keys of
   * neighbouring tuples are unrelated. */
  uint64_t k = wds__mix64(seed);
  k = wds__mix64(k ^ stream);
  k = wds__mix64(k ^ epoch);
  k = wds__mix64(k ^ rank);
  return wds__mix64(k ^ worker);
}

void wds__rng_init(wds__rng *r, uint64_t key) {
  uint64_t x = key;
  for (int i = 0; i < 4; i++) {
    x += 0x9e3779b97f4a7c15ULL;
    r->s[i] = wds__mix64(x);
  }
  if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
    r->s[0] = 1; /* the all-zero state is a fixed point */
}

__extension__ typedef unsigned __int128 u128;

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t wds__rng_next(wds__rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t wds__rng_below(wds__rng *r, uint64_t n) {
  u128 m = (u128)wds__rng_next(r) * n;
  uint64_t low = (uint64_t)m;
  if (low < n) {
    uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = (u128)wds__rng_next(r) * n;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

void wds__permute(size_t *a, size_t n, wds__rng *r) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)wds__rng_below(r, i);
    size_t t = a[i - 1];
    a[i - 1] = a[j];
    a[j] = t;
  }
}
