/* backend_cpu.c — the CPU backend: the MLP in plain C float32, ranks as
 * threads of one process.
 *
 * Determinism: every loop runs in a fixed order (rows ascending, then
 * outputs, then inputs) on one thread, so a rank's gradient is a pure
 * function of its weights and rows. The all-reduce is a reduce-scatter into
 * a shared result buffer, where rank r sums its slice of the parameters over
 * ranks 0..N-1 in that order, followed by every rank copying the result: all
 * ranks get the same bits, whatever the thread timing, and the same SGD step
 * on the same bits keeps the weights bit-identical on every rank.
 *
 * Synchronisation: two barriers per all-reduce. After the first, every
 * rank's gradient is complete (and the previous result has been copied by
 * everyone, so it may be overwritten); after the second, the result is
 * complete. A rank's own gradient buffer is written only by itself, between
 * the second barrier of one all-reduce and the first of the next.
 *
 * Loss and gradients: rows with valid == 0 are skipped (weight 0). The
 * gradient is summed over the valid rows; the flat buffer's last two entries
 * carry the loss sum and the valid count through the same all-reduce, and
 * sgd_step divides by the global count: the mean over the valid rows of all
 * ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "trainer/backend.h"
#include "trainer/barrier.h"

#define TR_SMALL_MAX 8

struct tr_group {
  int ranks;
  size_t n; /* param_count + 2 */
  tr_barrier barrier;
  float **grads; /* per rank */
  float *result; /* the reduced buffer */
  double (*small)[TR_SMALL_MAX];
  uint64_t *u64; /* per rank: gather_u64 */
};

struct tr_rank {
  tr_group *g;
  int rank;
  tr_model_config m;
  size_t param_count, batch_rows;
  size_t offset[TR_MAX_LAYERS];  /* of W of layer l in the flat buffers */
  float *w, *v, *grad;           /* weights, momentum, gradient (+2) */
  float *act[TR_MAX_LAYERS + 1]; /* batch_rows x dims[l] */
  float *delta, *delta2;         /* batch_rows x max dim */
  size_t *rows_idx;
  double loss_acc, count_acc; /* take_loss */
};

size_t tr_model_param_count(const tr_model_config *m) {
  size_t n = 0;
  for (int l = 0; l < m->layers; l++)
    n += (size_t)m->dims[l + 1] * (size_t)m->dims[l] + (size_t)m->dims[l + 1];
  return n;
}

uint64_t tr_fnv1a(uint64_t h, const void *data, size_t size) {
  const unsigned char *p = data;
  for (size_t i = 0; i < size; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

void tr_model_init(const tr_model_config *m, float *w) {
  /* He-uniform weights from one splitmix64 stream of the seed, zero
   * biases: the same on every rank and in every backend. */
  uint64_t s = m->seed ^ 0x5eed0f3a11e7ULL;
  size_t off = 0;
  for (int l = 0; l < m->layers; l++) {
    size_t nw = (size_t)m->dims[l + 1] * (size_t)m->dims[l];
    float bound = sqrtf(6.0f / (float)m->dims[l]);
    float *W = w + off;
    for (size_t i = 0; i < nw; i++) {
      double u =
          (double)(wds__splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0);
      W[i] = (float)((2.0 * u - 1.0) * bound);
    }
    memset(W + nw, 0, (size_t)m->dims[l + 1] * sizeof(float));
    off += nw + (size_t)m->dims[l + 1];
  }
}

static int cpu_group_create(const tr_group_config *c, tr_group **out, char *err,
                            size_t err_size) {
  int ranks = c->local_ranks;
  *out = NULL;
  if (c->world != ranks || c->procs != 1) {
    snprintf(err, err_size,
             "the CPU backend runs in one process (ranks are threads); "
             "%d processes of %d ranks need the CUDA backend",
             c->procs, c->world);
    return -1;
  }
  tr_group *g = calloc(1, sizeof *g);
  if (!g)
    goto nomem;
  g->ranks = ranks;
  g->n = c->param_count + 2;
  g->grads = calloc((size_t)ranks, sizeof *g->grads);
  g->result = malloc(g->n * sizeof *g->result);
  g->small = calloc((size_t)ranks, sizeof *g->small);
  g->u64 = calloc((size_t)ranks, sizeof *g->u64);
  if (!g->grads || !g->result || !g->small || !g->u64)
    goto nomem_free;
  if (tr_barrier_init(&g->barrier, ranks) != 0)
    goto nomem_free;
  *out = g;
  return 0;
nomem_free:
  free(g->grads);
  free(g->result);
  free(g->small);
  free(g->u64);
  free(g);
nomem:
  snprintf(err, err_size, "out of memory (CPU group of %d ranks)", ranks);
  return -1;
}

static void cpu_group_abort(tr_group *g) { tr_barrier_abort(&g->barrier); }

static void cpu_group_destroy(tr_group *g) {
  if (!g)
    return;
  tr_barrier_destroy(&g->barrier);
  free(g->grads);
  free(g->result);
  free(g->small);
  free(g->u64);
  free(g);
}

static void cpu_rank_destroy(tr_rank *r) {
  if (!r)
    return;
  free(r->w);
  free(r->v);
  free(r->grad);
  for (int l = 0; l <= r->m.layers; l++)
    free(r->act[l]);
  free(r->delta);
  free(r->delta2);
  free(r->rows_idx);
  free(r);
}

static int cpu_rank_create(tr_group *g, int rank, const tr_model_config *m,
                           size_t batch_rows, tr_rank **out, char *err,
                           size_t err_size) {
  tr_rank *r = calloc(1, sizeof *r);
  *out = NULL;
  if (!r)
    goto nomem;
  r->g = g;
  r->rank = rank;
  r->m = *m;
  r->param_count = tr_model_param_count(m);
  r->batch_rows = batch_rows ? batch_rows : 1;
  size_t off = 0, maxdim = 0;
  for (int l = 0; l < m->layers; l++) {
    r->offset[l] = off;
    off += (size_t)m->dims[l + 1] * (size_t)m->dims[l] + (size_t)m->dims[l + 1];
  }
  for (int l = 0; l <= m->layers; l++) {
    if (l > 0 && (size_t)m->dims[l] > maxdim) /* deltas: never the input */
      maxdim = (size_t)m->dims[l];
    r->act[l] = malloc(r->batch_rows * (size_t)m->dims[l] * sizeof(float));
    if (!r->act[l])
      goto nomem_free;
  }
  r->w = malloc(r->param_count * sizeof(float));
  r->v = calloc(r->param_count, sizeof(float));
  r->grad = calloc(r->param_count + 2, sizeof(float));
  r->delta = malloc(r->batch_rows * maxdim * sizeof(float));
  r->delta2 = malloc(r->batch_rows * maxdim * sizeof(float));
  r->rows_idx = malloc(r->batch_rows * sizeof(size_t));
  if (!r->w || !r->v || !r->grad || !r->delta || !r->delta2 || !r->rows_idx)
    goto nomem_free;
  tr_model_init(m, r->w);
  g->grads[rank] = r->grad;
  *out = r;
  return 0;
nomem_free:
  cpu_rank_destroy(r);
nomem:
  snprintf(err, err_size, "rank %d: out of memory (model of %zu parameters)",
           rank, tr_model_param_count(m));
  return -1;
}

/* Normalised inputs of the valid rows of b into act[0]; their indexes in
 * rows_idx. Returns the count, or -1 for a label out of range. */
static long gather(tr_rank *r, const tr_batch_view *b, char *err,
                   size_t err_size) {
  size_t d = (size_t)r->m.dims[0], n = 0;
  int classes = r->m.dims[r->m.layers];
  for (size_t i = 0; i < b->rows && n < r->batch_rows; i++) {
    size_t row = b->row0 + i;
    if (row >= b->batch_rows || !b->valid[row])
      continue;
    int64_t y = b->labels[row];
    if (y < 0 || y >= classes) {
      snprintf(err, err_size,
               "rank %d: label %lld of batch row %zu is out of range "
               "[0, %d) (--classes)",
               r->rank, (long long)y, row, classes);
      return -1;
    }
    const uint8_t *px = b->images + row * d;
    float *x = r->act[0] + n * d;
    for (size_t k = 0; k < d; k++)
      x[k] = ((float)px[k] * (1.0f / 255.0f) - 0.5f) * 2.0f;
    r->rows_idx[n++] = row;
  }
  return (long)n;
}

static void forward(tr_rank *r, size_t n) {
  for (int l = 0; l < r->m.layers; l++) {
    size_t din = (size_t)r->m.dims[l], dout = (size_t)r->m.dims[l + 1];
    const float *W = r->w + r->offset[l], *bias = W + dout * din;
    int relu = l + 1 < r->m.layers;
    for (size_t i = 0; i < n; i++) {
      const float *a = r->act[l] + i * din;
      float *z = r->act[l + 1] + i * dout;
      for (size_t o = 0; o < dout; o++) {
        const float *wo = W + o * din;
        float s = 0.0f;
        for (size_t k = 0; k < din; k++)
          s += wo[k] * a[k];
        s += bias[o];
        z[o] = relu && s < 0.0f ? 0.0f : s;
      }
    }
  }
}

/* Cross-entropy of row i's logits against label y; probabilities into p
 * (may be NULL). Also the argmax. */
static double xent(const float *z, int classes, int64_t y, float *p,
                   int *argmax) {
  float mx = z[0];
  int am = 0;
  for (int c = 1; c < classes; c++)
    if (z[c] > mx) {
      mx = z[c];
      am = c;
    }
  double sum = 0.0;
  for (int c = 0; c < classes; c++)
    sum += exp((double)(z[c] - mx));
  if (p)
    for (int c = 0; c < classes; c++)
      p[c] = (float)(exp((double)(z[c] - mx)) / sum);
  *argmax = am;
  return log(sum) + (double)mx - (double)z[y];
}

static int cpu_forward_backward(tr_rank *r, const tr_batch_view *b, char *err,
                                size_t err_size) {
  long nl = gather(r, b, err, err_size);
  if (nl < 0)
    return -1;
  size_t n = (size_t)nl;
  int L = r->m.layers, classes = r->m.dims[L];
  memset(r->grad, 0, (r->param_count + 2) * sizeof(float));
  forward(r, n);
  double loss = 0.0;
  float *dz = r->delta;
  for (size_t i = 0; i < n; i++) {
    int64_t y = b->labels[r->rows_idx[i]];
    int am;
    float *p = dz + i * (size_t)classes;
    loss += xent(r->act[L] + i * (size_t)classes, classes, y, p, &am);
    p[y] -= 1.0f;
  }
  for (int l = L - 1; l >= 0; l--) {
    size_t din = (size_t)r->m.dims[l], dout = (size_t)r->m.dims[l + 1];
    const float *W = r->w + r->offset[l];
    float *dW = r->grad + r->offset[l], *db = dW + dout * din;
    float *da = r->delta2;
    for (size_t i = 0; i < n; i++) {
      const float *a = r->act[l] + i * din, *d = dz + i * dout;
      for (size_t o = 0; o < dout; o++) {
        float g = d[o];
        if (g == 0.0f)
          continue;
        float *row = dW + o * din;
        for (size_t k = 0; k < din; k++)
          row[k] += g * a[k];
        db[o] += g;
      }
    }
    if (l == 0)
      break;
    for (size_t i = 0; i < n; i++) {
      const float *d = dz + i * dout, *a = r->act[l] + i * din;
      float *out = da + i * din;
      memset(out, 0, din * sizeof(float));
      for (size_t o = 0; o < dout; o++) {
        float g = d[o];
        if (g == 0.0f)
          continue;
        const float *wo = W + o * din;
        for (size_t k = 0; k < din; k++)
          out[k] += g * wo[k];
      }
      for (size_t k = 0; k < din; k++)
        if (a[k] <= 0.0f) /* ReLU: a = max(z, 0) */
          out[k] = 0.0f;
    }
    r->delta2 = dz;
    r->delta = da;
    dz = da;
  }
  r->grad[r->param_count] = (float)loss;
  r->grad[r->param_count + 1] = (float)n;
  return 0;
}

/* A collective left because the group was aborted. */
static int aborted_err(const tr_rank *r, const char *what, char *err,
                       size_t err_size) {
  snprintf(err, err_size, "rank %d: %s aborted (another rank failed)", r->rank,
           what);
  return -1;
}

static int cpu_allreduce(tr_rank *r, char *err, size_t err_size) {
  tr_group *g = r->g;
  if (tr_barrier_wait(&g->barrier) != 0)
    goto aborted;
  size_t lo = g->n * (size_t)r->rank / (size_t)g->ranks;
  size_t hi = g->n * (size_t)(r->rank + 1) / (size_t)g->ranks;
  for (size_t i = lo; i < hi; i++) {
    float s = g->grads[0][i];
    for (int k = 1; k < g->ranks; k++)
      s += g->grads[k][i];
    g->result[i] = s;
  }
  if (tr_barrier_wait(&g->barrier) != 0)
    goto aborted;
  memcpy(r->grad, g->result, g->n * sizeof(float));
  r->loss_acc += r->grad[r->param_count];
  r->count_acc += r->grad[r->param_count + 1];
  return 0;
aborted:
  return aborted_err(r, "all-reduce", err, err_size);
}

static int cpu_take_loss(tr_rank *r, double *loss_sum, double *count, char *err,
                         size_t err_size) {
  (void)err;
  (void)err_size;
  *loss_sum = r->loss_acc;
  *count = r->count_acc;
  r->loss_acc = r->count_acc = 0;
  return 0;
}

static int cpu_sgd_step(tr_rank *r, float lr, char *err, size_t err_size) {
  (void)err;
  (void)err_size;
  float count = r->grad[r->param_count + 1];
  float scale = count > 0.0f ? 1.0f / count : 0.0f;
  float mu = r->m.momentum, wd = r->m.weight_decay;
  for (size_t i = 0; i < r->param_count; i++) {
    float gi = r->grad[i] * scale + wd * r->w[i];
    r->v[i] = mu * r->v[i] + gi;
    r->w[i] -= lr * r->v[i];
  }
  return 0;
}

static int cpu_evaluate(tr_rank *r, const tr_batch_view *b, double *loss_sum,
                        uint64_t *correct, uint64_t *count, char *err,
                        size_t err_size) {
  long nl = gather(r, b, err, err_size);
  if (nl < 0)
    return -1;
  size_t n = (size_t)nl;
  int L = r->m.layers, classes = r->m.dims[L];
  forward(r, n);
  for (size_t i = 0; i < n; i++) {
    int64_t y = b->labels[r->rows_idx[i]];
    int am;
    *loss_sum += xent(r->act[L] + i * (size_t)classes, classes, y, NULL, &am);
    if (am == y)
      (*correct)++;
  }
  *count += n;
  return 0;
}

static int cpu_allreduce_small(tr_rank *r, double *values, int n, char *err,
                               size_t err_size) {
  tr_group *g = r->g;
  if (n > TR_SMALL_MAX) {
    snprintf(err, err_size, "allreduce_small: %d values (at most %d)", n,
             TR_SMALL_MAX);
    return -1;
  }
  memcpy(g->small[r->rank], values, (size_t)n * sizeof(double));
  if (tr_barrier_wait(&g->barrier) != 0)
    goto aborted;
  for (int i = 0; i < n; i++) {
    double s = g->small[0][i];
    for (int k = 1; k < g->ranks; k++)
      s += g->small[k][i];
    values[i] = s;
  }
  if (tr_barrier_wait(&g->barrier) != 0) /* before small[] is reused */
    goto aborted;
  return 0;
aborted:
  return aborted_err(r, "all-reduce", err, err_size);
}

static int cpu_gather_u64(tr_rank *r, uint64_t mine, uint64_t *all, char *err,
                          size_t err_size) {
  tr_group *g = r->g;
  g->u64[r->rank] = mine;
  if (tr_barrier_wait(&g->barrier) != 0)
    goto aborted;
  memcpy(all, g->u64, (size_t)g->ranks * sizeof *all);
  if (tr_barrier_wait(&g->barrier) != 0) /* before u64[] is reused */
    goto aborted;
  return 0;
aborted:
  return aborted_err(r, "gather", err, err_size);
}

static int cpu_barrier(tr_rank *r) { return tr_barrier_wait(&r->g->barrier); }

static int cpu_get_state(tr_rank *r, float *weights, float *momentum, char *err,
                         size_t err_size) {
  (void)err;
  (void)err_size;
  if (weights)
    memcpy(weights, r->w, r->param_count * sizeof(float));
  if (momentum)
    memcpy(momentum, r->v, r->param_count * sizeof(float));
  return 0;
}

static int cpu_set_state(tr_rank *r, const float *weights,
                         const float *momentum, char *err, size_t err_size) {
  (void)err;
  (void)err_size;
  if (weights)
    memcpy(r->w, weights, r->param_count * sizeof(float));
  if (momentum)
    memcpy(r->v, momentum, r->param_count * sizeof(float));
  return 0;
}

static int cpu_get_grad(tr_rank *r, float *grad, char *err, size_t err_size) {
  (void)err;
  (void)err_size;
  memcpy(grad, r->grad, (r->param_count + 2) * sizeof(float));
  return 0;
}

const tr_backend tr_backend_cpu = {
    .name = "cpu",
    .group_create = cpu_group_create,
    .group_abort = cpu_group_abort,
    .group_destroy = cpu_group_destroy,
    .rank_create = cpu_rank_create,
    .rank_destroy = cpu_rank_destroy,
    .forward_backward = cpu_forward_backward,
    .allreduce = cpu_allreduce,
    .take_loss = cpu_take_loss,
    .sgd_step = cpu_sgd_step,
    .evaluate = cpu_evaluate,
    .allreduce_small = cpu_allreduce_small,
    .gather_u64 = cpu_gather_u64,
    .barrier = cpu_barrier,
    .get_state = cpu_get_state,
    .set_state = cpu_set_state,
    .get_grad = cpu_get_grad,
};
