/* backend.h — what a compute backend of wds-train provides (internal).
 *
 * The trainer's loop (train.c) is backend-neutral: it owns the loader, the
 * rank threads, the schedule, logs and checkpoints, and asks a backend to do
 * the math of one rank. A backend is a table of functions:
 *
 *   group_create   once per process: the state shared by its local ranks
 *                  (CPU: a barrier and the all-reduce buffers; CUDA: the
 *                  ncclUniqueId, created by process 0 and fetched from it by
 *                  the others through the TCP rendezvous).
 *   rank_create    per local rank, called on the rank's own thread:
 *                  parameters initialised from the seed (the same on every
 *                  rank), momentum zero, buffers sized for batch_rows rows
 *                  (CUDA: device, streams, cuBLAS, ncclCommInitRank).
 *   upload         (optional; NULL when the backend reads host memory) starts
 *                  copying the rank's rows of a loader batch to the device
 *                  buffer view->slot (0 or 1), asynchronously, after the
 *                  compute that last read that buffer; upload_wait blocks
 *                  until the copy has completed, so the loader's slot can be
 *                  released. The loop uploads batch i+1 while batch i
 *                  computes (double buffering).
 *   forward_backward  on rows [row0, row0 + rows) of a loader batch (the
 *                  host view, or device buffer view->slot after upload):
 *                  gradients summed (not averaged) over the valid rows into
 *                  the flat gradient buffer, whose last two entries are the
 *                  loss sum and the valid-row count. May return before the
 *                  device has finished (CUDA: enqueued on a stream).
 *   allreduce      sums the flat buffers of all ranks of the job (every rank
 *                  gets the same bits: CPU sums ranks 0..N-1 in order; CUDA:
 *                  one ncclAllReduce of the buffer).
 *   take_loss      the loss sum and valid count of the steps since the last
 *                  call (global: after the all-reduce); may wait for the
 *                  device, so the loop calls it only when it logs.
 *   sgd_step       divides the summed gradient by the global valid count,
 *                  then momentum SGD with weight decay at learning rate lr.
 *   evaluate       adds loss sum, correct count and valid count over some
 *                  rows (waits for the device).
 *   get_state / set_state  host copies of weights and momentum (checkpoints,
 *                  checksums); get_grad the flat gradient buffer (tests).
 *
 * Every function returns 0 or -1 with a message in err that names the rank
 * (and, for CUDA/NCCL failures, the call). Functions taking a rank handle
 * are called on that rank's thread only; the group's functions may block
 * until every rank of the job has called them (collectives). */
#ifndef WDS_TRAINER_BACKEND_H
#define WDS_TRAINER_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wds/loader.h"

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

/* Parameters: for each layer l, W (dims[l+1] x dims[l], row-major) then b
 * (dims[l+1]). */
size_t tr_model_param_count(const tr_model_config *m);

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

/* The job as one process sees it. */
typedef struct tr_group_config {
  int local_ranks;  /* rank threads in this process */
  int world;        /* ranks of the job (all processes) */
  int first_rank;   /* global rank of local rank 0 */
  int first_device; /* CUDA device of local rank 0 (torchrun: LOCAL_RANK) */
  size_t param_count;
  /* Processes of the job (CUDA: the ncclUniqueId rendezvous). */
  int procs, proc_rank;
  const char *master_addr; /* process 0's address, as the others reach it */
  int master_port;
  int rdv_timeout_ms;
  int collective_timeout_ms; /* CUDA: the longest wait for a collective or
                                a copy before the communicator is aborted;
                                0 = 600 s */
  int precision;             /* TR_PRECISION_* (CUDA) */
} tr_group_config;

enum { TR_PRECISION_AUTO, TR_PRECISION_FP32, TR_PRECISION_TF32 };

/* A job of one process with `ranks` local ranks (tests). */
static inline tr_group_config tr_group_config_local(int ranks,
                                                    size_t param_count) {
  tr_group_config c;
  memset(&c, 0, sizeof c);
  c.local_ranks = ranks;
  c.world = ranks;
  c.param_count = param_count;
  c.procs = 1;
  return c;
}

typedef struct tr_group tr_group;
typedef struct tr_rank tr_rank;

typedef struct tr_backend {
  const char *name;
  int (*group_create)(const tr_group_config *c, tr_group **out, char *err,
                      size_t err_size);
  /* Makes every rank blocked in (or later entering) a collective return -1:
   * a rank that failed calls it so the others do not wait forever. */
  void (*group_abort)(tr_group *g);
  void (*group_destroy)(tr_group *g);
  int (*rank_create)(tr_group *g, int rank, const tr_model_config *m,
                     size_t batch_rows, tr_rank **out, char *err,
                     size_t err_size);
  void (*rank_destroy)(tr_rank *r);
  int (*upload)(tr_rank *r, const tr_batch_view *b, char *err, size_t err_size);
  int (*upload_wait)(tr_rank *r, int slot, char *err, size_t err_size);
  int (*forward_backward)(tr_rank *r, const tr_batch_view *b, char *err,
                          size_t err_size);
  int (*allreduce)(tr_rank *r, char *err, size_t err_size);
  int (*take_loss)(tr_rank *r, double *loss_sum, double *count, char *err,
                   size_t err_size);
  int (*sgd_step)(tr_rank *r, float lr, char *err, size_t err_size);
  int (*evaluate)(tr_rank *r, const tr_batch_view *b, double *loss_sum,
                  uint64_t *correct, uint64_t *count, char *err,
                  size_t err_size);
  /* Sums n doubles over the ranks (rank order; every rank gets the same
   * result): evaluation totals. */
  int (*allreduce_small)(tr_rank *r, double *values, int n, char *err,
                         size_t err_size);
  /* all[0..world) = every rank's value, in global rank order. */
  int (*gather_u64)(tr_rank *r, uint64_t mine, uint64_t *all, char *err,
                    size_t err_size);
  /* Blocks until every local rank arrived (-1 once aborted). */
  int (*barrier)(tr_rank *r);
  /* Host copies, param_count floats each (either may be NULL). */
  int (*get_state)(tr_rank *r, float *weights, float *momentum, char *err,
                   size_t err_size);
  int (*set_state)(tr_rank *r, const float *weights, const float *momentum,
                   char *err, size_t err_size);
  /* param_count + 2 floats: the gradient buffer as the last allreduce left
   * it (tests). */
  int (*get_grad)(tr_rank *r, float *grad, char *err, size_t err_size);
  /* Bytes copied to the device and the copy engine's busy seconds since the
   * last call (NULL: no device). */
  void (*take_h2d)(tr_rank *r, double *bytes, double *seconds);
} tr_backend;

extern const tr_backend tr_backend_cpu;

/* NULL when this build has no CUDA backend (backend_cuda.cu). */
const tr_backend *tr_backend_cuda_get(void);

/* CUDA devices visible (0 without CUDA or without a GPU), and, when none,
 * why (the CUDA runtime's message) into why. */
int tr_cuda_device_count(char *why, size_t why_size);

/* Makes `device` the calling thread's current device (the main thread, before
 * the loaders pin their batch memory: the context is made on that GPU, not
 * on GPU 0). 0, or -1 with the message in err. */
int tr_cuda_set_device(int device, char *err, size_t err_size);

/* FNV-1a 64 of bytes, continuing from h (start with TR_FNV_INIT). */
#define TR_FNV_INIT 0xcbf29ce484222325ULL
uint64_t tr_fnv1a(uint64_t h, const void *data, size_t size);

#ifdef __cplusplus
}
#endif

#endif
