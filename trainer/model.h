/* model.h — the model of wds-train (internal): an MLP on flattened images,
 * its parameters, their initial values, and the CPU reference of its math.
 *
 * Every backend uses the same layout and the same initial parameters (so a
 * run is the same on any backend up to floating-point order); the CPU
 * backend computes with the reference below, and the CUDA backend's tests
 * compare against it.
 *
 * Layout of the flat parameter vector: for each layer l, W (dims[l+1] x
 * dims[l], row-major) then b (dims[l+1]). A gradient buffer has two more
 * entries: the loss sum and the valid-row count of the rows it was computed
 * on (so one all-reduce carries all three). */
#ifndef WDS_TRAINER_MODEL_H
#define WDS_TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_MAX_LAYERS 16

/* The model: an MLP on flattened images. dims[0] = H*W*C inputs,
 * dims[1..layers-1] hidden (ReLU), dims[layers] = classes. */
typedef struct tr_model_config {
  int layers; /* weight matrices */
  int dims[TR_MAX_LAYERS + 1];
  uint64_t seed; /* initial weights */
  float momentum;
  float weight_decay;
} tr_model_config;

/* Parameters of the model (the gradient buffer has 2 more floats). */
size_t tr_model_param_count(const tr_model_config *m);

/* offset[l] = where layer l's W starts in the flat vector (its b follows
 * it). */
void tr_model_offsets(const tr_model_config *m, size_t offset[TR_MAX_LAYERS]);

/* The initial parameters (param_count floats) from m->seed: He-uniform
 * weights, zero biases; the same in every backend and on every rank. */
void tr_model_init(const tr_model_config *m, float *w);

/* A rank's view of a loader batch: rows [row0, row0 + rows). Rows past the
 * batch's end count as invalid (a partial last batch). */
typedef struct tr_batch_view {
  const uint8_t *images; /* batch->fields[image] data, N x H x W x C */
  const int64_t *labels; /* N */
  const uint8_t *valid;  /* N */
  size_t batch_rows;     /* rows in the loader batch */
  size_t row0, rows;     /* this rank's range */
  int slot;              /* device buffer (backends with upload) */
} tr_batch_view;

/* ---- the CPU reference ---------------------------------------------------
 *
 * Plain C float32, one thread, every loop in a fixed order (rows ascending,
 * then outputs, then inputs): a gradient is a pure function of the weights
 * and the rows. Rows with valid == 0 are skipped (weight 0); gradients are
 * summed, not averaged, over the valid rows. */

/* Scratch space for up to `rows` valid rows of one view. */
typedef struct tr_model_work {
  tr_model_config m;
  size_t param_count, rows;
  size_t offset[TR_MAX_LAYERS];
  float *act[TR_MAX_LAYERS + 1]; /* rows x dims[l] */
  float *delta, *delta2;         /* rows x max dim */
  size_t *rows_idx;              /* batch row of each gathered row */
} tr_model_work;

/* WDS_OK, or WDS_ERR_NOMEM with nothing allocated. rows 0 counts as 1. */
int tr_model_work_init(tr_model_work *k, const tr_model_config *m, size_t rows);
void tr_model_work_free(
    tr_model_work *k); /* zeroed: a second free is a no-op */

/* The gradient of the summed cross-entropy over the valid rows of b at
 * weights w into grad (param_count + 2: loss sum and valid count last).
 * WDS_ERR_INVALID for a label out of range (the message names `rank`, the
 * label and its batch row). */
int tr_model_forward_backward(tr_model_work *k, const float *w,
                              const tr_batch_view *b, float *grad, int rank,
                              wds__err *e);

/* Adds the loss sum, the count of correct predictions (argmax) and the count
 * of valid rows of b at weights w. Errors as forward_backward. */
int tr_model_evaluate(tr_model_work *k, const float *w, const tr_batch_view *b,
                      double *loss_sum, uint64_t *correct, uint64_t *count,
                      int rank, wds__err *e);

/* Momentum SGD with weight decay at learning rate lr on w and v, the summed
 * gradient grad (param_count + 2) divided by its valid count first. */
void tr_model_sgd(const tr_model_config *m, size_t param_count, float *w,
                  float *v, const float *grad, float lr);

#ifdef __cplusplus
}
#endif

#endif
