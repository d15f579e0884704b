/* model.c — the MLP's parameters, their initial values, and the CPU
 * reference of its math (model.h): forward, softmax cross-entropy, backward
 * and the SGD step, in plain C float32 on one thread.
 *
 * Determinism: every loop runs in a fixed order (rows ascending, then
 * outputs, then inputs), so a gradient is a pure function of the weights
 * and the rows, and the same SGD step on the same bits gives the same bits
 * on every rank. */
#include "trainer/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

size_t tr_model_param_count(const tr_model_config *m) {
  size_t n = 0;
  for (int l = 0; l < m->layers; l++)
    n += (size_t)m->dims[l + 1] * (size_t)m->dims[l] + (size_t)m->dims[l + 1];
  return n;
}

void tr_model_offsets(const tr_model_config *m, size_t offset[TR_MAX_LAYERS]) {
  size_t off = 0;
  for (int l = 0; l < m->layers; l++) {
    offset[l] = off;
    off += (size_t)m->dims[l + 1] * (size_t)m->dims[l] + (size_t)m->dims[l + 1];
  }
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

void tr_model_work_free(tr_model_work *k) {
  for (int l = 0; l <= TR_MAX_LAYERS; l++)
    free(k->act[l]);
  free(k->delta);
  free(k->delta2);
  free(k->rows_idx);
  memset(k, 0, sizeof *k);
}

int tr_model_work_init(tr_model_work *k, const tr_model_config *m,
                       size_t rows) {
  memset(k, 0, sizeof *k);
  k->m = *m;
  k->param_count = tr_model_param_count(m);
  k->rows = rows ? rows : 1;
  tr_model_offsets(m, k->offset);
  size_t maxdim = 0;
  for (int l = 0; l <= m->layers; l++) {
    if (l > 0 && (size_t)m->dims[l] > maxdim) /* deltas: never the input */
      maxdim = (size_t)m->dims[l];
    k->act[l] = malloc(k->rows * (size_t)m->dims[l] * sizeof(float));
    if (!k->act[l])
      goto nomem;
  }
  k->delta = malloc(k->rows * maxdim * sizeof(float));
  k->delta2 = malloc(k->rows * maxdim * sizeof(float));
  k->rows_idx = malloc(k->rows * sizeof(size_t));
  if (!k->delta || !k->delta2 || !k->rows_idx)
    goto nomem;
  return WDS_OK;
nomem:
  tr_model_work_free(k);
  return WDS_ERR_NOMEM;
}

/* Normalised inputs of the valid rows of b into act[0]; their indexes in
 * rows_idx, their count in *n. */
static int gather(tr_model_work *k, const tr_batch_view *b, size_t *n_out,
                  int rank, wds__err *e) {
  size_t d = (size_t)k->m.dims[0], n = 0;
  int classes = k->m.dims[k->m.layers];
  for (size_t i = 0; i < b->rows && n < k->rows; i++) {
    size_t row = b->row0 + i;
    if (row >= b->batch_rows || !b->valid[row])
      continue;
    int64_t y = b->labels[row];
    if (y < 0 || y >= classes)
      return wds__fail(e, WDS_ERR_INVALID,
                       "rank %d: label %lld of batch row %zu is out of range "
                       "[0, %d) (--classes)",
                       rank, (long long)y, row, classes);
    const uint8_t *px = b->images + row * d;
    float *x = k->act[0] + n * d;
    for (size_t j = 0; j < d; j++)
      x[j] = ((float)px[j] * (1.0f / 255.0f) - 0.5f) * 2.0f;
    k->rows_idx[n++] = row;
  }
  *n_out = n;
  return WDS_OK;
}

static void forward(tr_model_work *k, const float *w, size_t n) {
  for (int l = 0; l < k->m.layers; l++) {
    size_t din = (size_t)k->m.dims[l], dout = (size_t)k->m.dims[l + 1];
    const float *W = w + k->offset[l], *bias = W + dout * din;
    int relu = l + 1 < k->m.layers;
    for (size_t i = 0; i < n; i++) {
      const float *a = k->act[l] + i * din;
      float *z = k->act[l + 1] + i * dout;
      for (size_t o = 0; o < dout; o++) {
        const float *wo = W + o * din;
        float s = 0.0f;
        for (size_t j = 0; j < din; j++)
          s += wo[j] * a[j];
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

int tr_model_forward_backward(tr_model_work *k, const float *w,
                              const tr_batch_view *b, float *grad, int rank,
                              wds__err *e) {
  size_t n;
  int rc = gather(k, b, &n, rank, e);
  if (rc != WDS_OK)
    return rc;
  int L = k->m.layers, classes = k->m.dims[L];
  memset(grad, 0, (k->param_count + 2) * sizeof(float));
  forward(k, w, n);
  double loss = 0.0;
  float *dz = k->delta;
  for (size_t i = 0; i < n; i++) {
    int64_t y = b->labels[k->rows_idx[i]];
    int am;
    float *p = dz + i * (size_t)classes;
    loss += xent(k->act[L] + i * (size_t)classes, classes, y, p, &am);
    p[y] -= 1.0f;
  }
  for (int l = L - 1; l >= 0; l--) {
    size_t din = (size_t)k->m.dims[l], dout = (size_t)k->m.dims[l + 1];
    const float *W = w + k->offset[l];
    float *dW = grad + k->offset[l], *db = dW + dout * din;
    float *da = k->delta2;
    for (size_t i = 0; i < n; i++) {
      const float *a = k->act[l] + i * din, *d = dz + i * dout;
      for (size_t o = 0; o < dout; o++) {
        float g = d[o];
        if (g == 0.0f)
          continue;
        float *row = dW + o * din;
        for (size_t j = 0; j < din; j++)
          row[j] += g * a[j];
        db[o] += g;
      }
    }
    if (l == 0)
      break;
    for (size_t i = 0; i < n; i++) {
      const float *d = dz + i * dout, *a = k->act[l] + i * din;
      float *out = da + i * din;
      memset(out, 0, din * sizeof(float));
      for (size_t o = 0; o < dout; o++) {
        float g = d[o];
        if (g == 0.0f)
          continue;
        const float *wo = W + o * din;
        for (size_t j = 0; j < din; j++)
          out[j] += g * wo[j];
      }
      for (size_t j = 0; j < din; j++)
        if (a[j] <= 0.0f) /* ReLU: a = max(z, 0) */
          out[j] = 0.0f;
    }
    k->delta2 = dz;
    k->delta = da;
    dz = da;
  }
  grad[k->param_count] = (float)loss;
  grad[k->param_count + 1] = (float)n;
  return WDS_OK;
}

int tr_model_evaluate(tr_model_work *k, const float *w, const tr_batch_view *b,
                      double *loss_sum, uint64_t *correct, uint64_t *count,
                      int rank, wds__err *e) {
  size_t n;
  int rc = gather(k, b, &n, rank, e);
  if (rc != WDS_OK)
    return rc;
  int L = k->m.layers, classes = k->m.dims[L];
  forward(k, w, n);
  for (size_t i = 0; i < n; i++) {
    int64_t y = b->labels[k->rows_idx[i]];
    int am;
    *loss_sum += xent(k->act[L] + i * (size_t)classes, classes, y, NULL, &am);
    if (am == y)
      (*correct)++;
  }
  *count += n;
  return WDS_OK;
}

void tr_model_sgd(const tr_model_config *m, size_t param_count, float *w,
                  float *v, const float *grad, float lr) {
  float count = grad[param_count + 1];
  float scale = count > 0.0f ? 1.0f / count : 0.0f;
  float mu = m->momentum, wd = m->weight_decay;
  for (size_t i = 0; i < param_count; i++) {
    float gi = grad[i] * scale + wd * w[i];
    v[i] = mu * v[i] + gi;
    w[i] -= lr * v[i];
  }
}
