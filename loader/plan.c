/* plan.c — the epoch plan: shard order, rank split, worker split.
 *
 * Plain: the epoch's permuted shard list is split list[rank::world], then
 * [worker::workers]; each shard is read whole.
 *
 * Exact: the rank lists are laid end to end (rank 0's shards, then rank
 * 1's, ...) into one sequence of `total` samples, which wds__plan_rank_split
 * cuts into `world` consecutive ranges. With equal ranks they are as
 * DistributedSampler sizes them: ceil(total / world) per rank, positions
 * past the end wrapping to the start (the padding repeats the first
 * samples), or floor(total / world) with drop_last. With rank weights (the
 * ranks' batch sizes B_r) every rank takes the same number of steps S =
 * ceil(total / sum B) (floor with drop_last) and rank r the S * B_r samples
 * after rank r-1's. When shard sizes are even and ranks equal each rank
 * reads exactly its list[rank::world]; otherwise only the shards at the
 * cuts are shared, each rank reading a sample range of them. A rank's
 * ranges are dealt to workers [worker::workers]; when there are fewer
 * ranges than workers the largest are halved first.
 *
 * Resampled: nothing is planned but each worker's quota of the rank's
 * samples: samples_per_epoch, or with rank weights S * B_r where S =
 * ceil(samples_per_epoch * world / sum B) (samples_per_epoch is then the
 * mean per rank: the epoch's total is unchanged); the shards are drawn
 * while reading.
 *
 * Plain mode refuses rank weights: a rank's sample count is not known
 * before it reads its shards, so equal step counts cannot be promised. */
#include "loader/plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

static size_t rank_shard_count(size_t shards, int rank, int world) {
  return shards > (size_t)rank
             ? (shards - (size_t)rank + (size_t)world - 1) / (size_t)world
             : 0;
}

static uint64_t exact_total(const wds__plan_input *in) {
  uint64_t total = 0;
  for (size_t i = 0; i < in->shards; i++)
    total += in->counts[i];
  return total;
}

uint64_t wds__plan_rank_split(uint64_t total, const size_t *weights, int world,
                              int drop_last, uint64_t *begin) {
  uint64_t sum = 0;
  for (int r = 0; r < world; r++)
    sum += weights ? (uint64_t)weights[r] : 1;
  uint64_t steps = sum == 0    ? 0
                   : drop_last ? total / sum
                               : total / sum + (total % sum != 0);
  if (begin) {
    begin[0] = 0;
    for (int r = 0; r < world; r++)
      begin[r + 1] = begin[r] + steps * (weights ? (uint64_t)weights[r] : 1);
  }
  return steps;
}

static uint64_t weight_sum(const wds__plan_input *in) {
  uint64_t sum = 0;
  for (int r = 0; r < in->world; r++)
    sum += in->rank_weights ? (uint64_t)in->rank_weights[r] : 1;
  return sum;
}

static uint64_t rank_weight(const wds__plan_input *in) {
  return in->rank_weights ? (uint64_t)in->rank_weights[in->rank] : 1;
}

/* Resampled mode with rank weights: the steps every rank takes. */
static uint64_t resampled_steps(const wds__plan_input *in) {
  return wds__plan_rank_split(in->samples_per_epoch * (uint64_t)in->world,
                              in->rank_weights, in->world, 0, NULL);
}

int wds__plan_check(const wds__plan_input *in, wds__err *e) {
  if (in->rank_weights) {
    for (int r = 0; r < in->world; r++)
      if (in->rank_weights[r] < 1 || in->rank_weights[r] > ((size_t)1 << 24))
        return wds__fail(e, WDS_ERR_INVALID,
                         "rank %d's batch size %zu (1 .. 16777216)", r,
                         in->rank_weights[r]);
    if (in->mode == WDS_MODE_PLAIN)
      return wds__fail(
          e, WDS_ERR_INVALID,
          "per-rank batch sizes need --mode exact or resampled: in plain "
          "mode a rank's sample count is not known before it reads its "
          "shards, so equal step counts on every rank cannot be promised");
    if (in->mode == WDS_MODE_RESAMPLED &&
        in->samples_per_epoch > (UINT64_MAX / 2) / (uint64_t)in->world)
      return wds__fail(e, WDS_ERR_INVALID,
                       "resampled mode: samples_per_epoch %llu is too large",
                       (unsigned long long)in->samples_per_epoch);
  }
  if (in->mode == WDS_MODE_PLAIN) {
    size_t mine = rank_shard_count(in->shards, in->rank, in->world);
    if (in->shards < (size_t)in->world)
      return wds__fail(
          e, WDS_ERR_INVALID,
          "%zu shard%s for %d ranks: rank %d would get no shard (use at "
          "least as many shards as ranks, fewer ranks, or --mode resampled "
          "or exact)",
          in->shards, in->shards == 1 ? "" : "s", in->world, in->rank);
    if (mine < (size_t)in->workers)
      return wds__fail(
          e, WDS_ERR_INVALID,
          "rank %d of %d gets %zu of the %zu shards, fewer than its %d "
          "workers: a worker would get no shard (use at most %zu worker%s, "
          "more shards, or --mode resampled or exact)",
          in->rank, in->world, mine, in->shards, in->workers, mine,
          mine == 1 ? "" : "s");
  } else if (in->mode == WDS_MODE_EXACT) {
    uint64_t total = exact_total(in);
    if (total > UINT64_MAX / 2)
      return wds__fail(e, WDS_ERR_INVALID,
                       "exact mode: %llu samples is too many",
                       (unsigned long long)total);
    if (wds__plan_rank_split(total, in->rank_weights, in->world, in->drop_last,
                             NULL) == 0) {
      if (in->rank_weights)
        return wds__fail(e, WDS_ERR_INVALID,
                         "exact mode: %llu sample%s in %zu shards for %d "
                         "ranks whose batch sizes add up to %llu%s: a rank "
                         "would get no step",
                         (unsigned long long)total, total == 1 ? "" : "s",
                         in->shards, in->world,
                         (unsigned long long)weight_sum(in),
                         in->drop_last ? " with drop_last" : "");
      return wds__fail(e, WDS_ERR_INVALID,
                       "exact mode: %llu sample%s in %zu shards for %d "
                       "ranks%s: a rank would get no sample",
                       (unsigned long long)total, total == 1 ? "" : "s",
                       in->shards, in->world,
                       in->drop_last ? " with drop_last" : "");
    }
  } else if (in->samples_per_epoch == 0) {
    return wds__fail(e, WDS_ERR_INVALID,
                     "resampled mode needs samples_per_epoch (per rank)");
  }
  return WDS_OK;
}

void wds__plan_shard_order(const wds__plan_input *in, uint64_t epoch,
                           size_t *order) {
  for (size_t i = 0; i < in->shards; i++)
    order[i] = i;
  if (in->shard_shuffle) {
    wds__rng r;
    /* Same key on every rank: rank and worker are 0 on purpose. */
    wds__rng_init(&r, wds__rng_key(in->seed, WDS__STREAM_SHARDS, epoch, 0, 0));
    wds__permute(order, in->shards, &r);
  }
}

static int push_piece(wds__piece **v, size_t *n, size_t *cap, wds__piece p) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    wds__piece *nv = realloc(*v, c * sizeof *nv);
    if (!nv)
      return -1;
    *v = nv;
    *cap = c;
  }
  (*v)[(*n)++] = p;
  return 0;
}

/* Fewer ranges than workers: halve the largest so every worker reads. */
static int halve_for_workers(const wds__plan_input *in, wds__piece **pieces,
                             size_t *count, size_t *cap, wds__err *e) {
  while (*count > 0 && *count < (size_t)in->workers) {
    size_t big = 0;
    for (size_t i = 1; i < *count; i++)
      if ((*pieces)[i].end - (*pieces)[i].begin >
          (*pieces)[big].end - (*pieces)[big].begin)
        big = i;
    wds__piece b = (*pieces)[big];
    if (b.end - b.begin < 2)
      break;
    if (push_piece(pieces, count, cap, b) != 0)
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
    memmove(*pieces + big + 2, *pieces + big + 1,
            (*count - big - 2) * sizeof **pieces);
    uint64_t mid = b.begin + (b.end - b.begin) / 2;
    (*pieces)[big].end = mid;
    (*pieces)[big + 1] = (wds__piece){b.shard, mid, b.end, b.pad};
  }
  return WDS_OK;
}

/* Deals a rank's pieces [worker::workers] into out->w (allocated). */
static int deal_pieces(const wds__plan_input *in, const wds__piece *all,
                       size_t all_count, wds__epoch_plan *out, wds__err *e) {
  for (int w = 0; w < in->workers; w++) {
    wds__worker_plan *wp = &out->w[w];
    size_t mine = all_count > (size_t)w
                      ? (all_count - (size_t)w + (size_t)in->workers - 1) /
                            (size_t)in->workers
                      : 0;
    wp->pieces = malloc((mine ? mine : 1) * sizeof *wp->pieces);
    if (!wp->pieces)
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
    wp->quota = in->mode == WDS_MODE_PLAIN ? WDS__TO_END : 0;
    for (size_t i = (size_t)w; i < all_count; i += (size_t)in->workers) {
      wp->pieces[wp->count++] = all[i];
      if (in->mode == WDS_MODE_EXACT)
        wp->quota += all[i].end - all[i].begin;
    }
  }
  return WDS_OK;
}

int wds__plan_from_pieces(const wds__plan_input *in, uint64_t epoch,
                          wds__piece *pieces, size_t count,
                          wds__epoch_plan *out, wds__err *e) {
  size_t cap = count;
  int rc = WDS_OK;
  memset(out, 0, sizeof *out);
  out->epoch = epoch;
  out->workers = in->workers;
  out->w = calloc((size_t)in->workers, sizeof *out->w);
  if (!out->w)
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
  if (rc == WDS_OK)
    rc = halve_for_workers(in, &pieces, &count, &cap, e);
  if (rc == WDS_OK)
    rc = deal_pieces(in, pieces, count, out, e);
  free(pieces);
  if (rc != WDS_OK)
    wds__plan_free(out);
  return rc;
}

/* Cuts this rank's range of the rank-major sample sequence into pieces. */
static int exact_pieces(const wds__plan_input *in, const size_t *order,
                        wds__epoch_plan *out, wds__piece **pieces,
                        size_t *count, wds__err *e) {
  int rc = WDS_OK;
  size_t n = in->shards, cap = 0;
  size_t *seq = malloc((n ? n : 1) * sizeof *seq);
  uint64_t *prefix = malloc((n + 1) * sizeof *prefix);
  uint64_t *cut = malloc(((size_t)in->world + 1) * sizeof *cut);
  if (!seq || !prefix || !cut) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
    goto done;
  }
  size_t k = 0;
  for (int r = 0; r < in->world; r++)
    for (size_t i = (size_t)r; i < n; i += (size_t)in->world)
      seq[k++] = order[i];
  prefix[0] = 0;
  for (size_t i = 0; i < n; i++)
    prefix[i + 1] = prefix[i] + in->counts[seq[i]];
  uint64_t total = prefix[n];
  uint64_t steps = wds__plan_rank_split(total, in->rank_weights, in->world,
                                        in->drop_last, cut);
  uint64_t start = cut[in->rank], end = cut[in->rank + 1];
  out->total_samples = total;
  out->rank_samples = end - start;
  out->steps = in->rank_weights ? steps : 0;
  out->padded = end > total ? end - (start > total ? start : total) : 0;
  for (uint64_t p = start; p < end;) {
    uint64_t q = p % total;
    /* The shard holding position q: prefix[lo] <= q < prefix[lo + 1]. */
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      if (prefix[mid] <= q)
        lo = mid;
      else
        hi = mid;
    }
    uint64_t len = prefix[lo + 1] - q;
    if (len > end - p)
      len = end - p;
    wds__piece pc = {seq[lo], q - prefix[lo], q - prefix[lo] + len, p >= total};
    if (push_piece(pieces, count, &cap, pc) != 0) {
      rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
      goto done;
    }
    p += len;
  }
  rc = halve_for_workers(in, pieces, count, &cap, e);
done:
  free(seq);
  free(prefix);
  free(cut);
  return rc;
}

int wds__plan_epoch(const wds__plan_input *in, uint64_t epoch,
                    wds__epoch_plan *out, wds__err *e) {
  int rc = wds__plan_check(in, e);
  size_t *order = NULL;
  wds__piece *all = NULL;
  size_t all_count = 0;
  memset(out, 0, sizeof *out);
  if (rc != WDS_OK)
    return rc;
  out->epoch = epoch;
  out->workers = in->workers;
  out->w = calloc((size_t)in->workers, sizeof *out->w);
  order = malloc((in->shards ? in->shards : 1) * sizeof *order);
  if (!out->w || !order) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
    goto done;
  }
  wds__plan_shard_order(in, epoch, order);

  if (in->mode == WDS_MODE_RESAMPLED) {
    uint64_t n = in->samples_per_epoch;
    if (in->rank_weights) {
      out->steps = resampled_steps(in);
      n = out->steps * rank_weight(in);
    }
    out->rank_samples = n;
    for (int w = 0; w < in->workers; w++)
      out->w[w].quota =
          n / (uint64_t)in->workers + ((uint64_t)w < n % (uint64_t)in->workers);
    goto done;
  }
  if (in->mode == WDS_MODE_PLAIN) {
    out->rank_samples = WDS__TO_END;
    size_t cap = 0;
    for (size_t i = (size_t)in->rank; i < in->shards; i += (size_t)in->world)
      if (push_piece(&all, &all_count, &cap,
                     (wds__piece){order[i], 0, WDS__TO_END, 0}) != 0) {
        rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
        goto done;
      }
  } else {
    rc = exact_pieces(in, order, out, &all, &all_count, e);
    if (rc != WDS_OK)
      goto done;
  }
  /* Deal pieces [worker::workers]. */
  rc = deal_pieces(in, all, all_count, out, e);
done:
  free(order);
  free(all);
  if (rc != WDS_OK)
    wds__plan_free(out);
  return rc;
}

void wds__plan_free(wds__epoch_plan *p) {
  if (!p || !p->w)
    return;
  for (int w = 0; w < p->workers; w++)
    free(p->w[w].pieces);
  free(p->w);
  p->w = NULL;
}
