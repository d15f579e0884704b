/* plan.h — which samples each worker of a rank reads in an epoch. Internal.
 *
 * A pure function of (shard count, per-shard sample counts for exact mode,
 * seed, epoch, rank, world, workers, mode): no threads, no I/O, so it is
 * unit-tested directly and is identical on every rank and machine. */
#ifndef WDS_LOADER_PLAN_H
#define WDS_LOADER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "wds/loader.h"

#define WDS__TO_END UINT64_MAX

/* Samples [begin, end) of one shard, in archive order. */
typedef struct wds__piece {
  size_t shard;
  uint64_t begin, end; /* end == WDS__TO_END: to the end of the shard */
  int pad; /* exact mode: the rank split's padding (positions past the
              total, repeating samples another range holds): its rows are
              delivered marked invalid */
} wds__piece;

typedef struct wds__worker_plan {
  wds__piece *pieces; /* empty in resampled mode: shards are drawn */
  size_t count;
  uint64_t quota; /* items this worker yields: exact and resampled modes;
                     WDS__TO_END in plain mode (unknown) */
} wds__worker_plan;

typedef struct wds__plan_input {
  size_t shards;
  const uint64_t *counts; /* exact mode: samples per shard */
  uint64_t seed;
  int rank, world, workers;
  wds_mode mode;
  int shard_shuffle;
  int drop_last;
  uint64_t samples_per_epoch; /* resampled: per rank (the mean per rank
                                 with rank_weights) */
  const size_t *rank_weights; /* [world]: each rank's batch size, or NULL:
                                 every rank the same (weight 1) */
} wds__plan_input;

typedef struct wds__epoch_plan {
  uint64_t epoch;
  uint64_t rank_samples; /* exact/resampled: samples this rank yields;
                            WDS__TO_END in plain mode */
  uint64_t steps;        /* with rank_weights: the batches every rank takes (its
                            rank_samples are steps * its weight); else 0 */
  uint64_t total_samples; /* exact: samples in the data set */
  uint64_t padded;        /* exact: repeated samples added on this rank */
  int workers;
  wds__worker_plan *w; /* [workers] */
} wds__epoch_plan;

/* The rank split, one function for every use (exact mode, each mixed
 * source): `total` samples laid end to end are cut into `world`
 * consecutive ranges, rank r's holding steps * weights[r] samples
 * (weights NULL: every weight 1), where steps = ceil(total / sum of the
 * weights), or floor(total / sum) with drop_last. Positions at or past
 * `total` wrap to the start: the padding repeats the first samples and is
 * smaller than the sum of the weights; its pieces carry `pad` and its rows
 * are delivered marked invalid, so the valid rows of all ranks hold every
 * sample once. begin (world + 1 entries, may be
 * NULL) receives the cuts: rank r's range is [begin[r], begin[r + 1]).
 * Returns steps: 0 when a rank would get no sample (total < sum with
 * drop_last, or total == 0). Weights must be >= 1 and total + sum must not
 * overflow (wds__plan_check checks both). With every weight 1 this is
 * DistributedSampler's split. */
uint64_t wds__plan_rank_split(uint64_t total, const size_t *weights, int world,
                              int drop_last, uint64_t *begin);

/* Checks what does not depend on the epoch (a rank or worker left without
 * shards in plain mode, without samples in exact mode). */
int wds__plan_check(const wds__plan_input *in, wds__err *e);

/* The epoch's shard order: a permutation of 0..shards-1 (identity without
 * shard_shuffle). order must hold in->shards entries. */
void wds__plan_shard_order(const wds__plan_input *in, uint64_t epoch,
                           size_t *order);

int wds__plan_epoch(const wds__plan_input *in, uint64_t epoch,
                    wds__epoch_plan *out, wds__err *e);
void wds__plan_free(wds__epoch_plan *p);

/* A rank's plan from its pieces in order (exact mode; an elastic resume's
 * remainder, elastic.c): halved while fewer than the workers, dealt
 * [worker::workers]. Takes pieces (malloc'd; freed). The caller sets
 * rank_samples, steps, total_samples and padded. */
int wds__plan_from_pieces(const wds__plan_input *in, uint64_t epoch,
                          wds__piece *pieces, size_t count,
                          wds__epoch_plan *out, wds__err *e);

#endif
