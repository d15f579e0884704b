/* backend.h — what a compute backend of wds-train provides (internal).
 *
 * The trainer's loop (train.c) is backend-neutral: it owns the loader, the
 * rank threads, the schedule, logs and checkpoints, and asks a backend to do
 * the math of one rank. A backend is a table of functions:
 *
 *   group_create   once per process, on the job's process group
 *                  (procgroup.h: the barrier, the abort flag and the host
 *                  collectives, over MPI across processes, made before any
 *                  backend): the state shared by its local ranks (CPU:
 *                  nothing more; CUDA: the ncclUniqueId, made by process 0
 *                  and broadcast by MPI, or derived by every process from
 *                  NCCL_COMM_ID under torchrun: launch.h).
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
 * Every function returns WDS_OK or a negative status (wds/status.h) with a
 * message in e that names the rank (and, for CUDA/NCCL failures, the call):
 * WDS_ERR_CANCELLED when a collective ended because the group was aborted,
 * WDS_ERR_TIMEOUT when one made no progress for --collective-timeout,
 * WDS_ERR_INVALID for bad input (a label out of range), WDS_ERR_NOMEM, and
 * WDS_ERR_IO for a failed device, library or network call. Functions taking
 * a rank handle are called on that rank's thread only; the group's
 * functions may block until every rank of the job has called them
 * (collectives).
 *
 * The backends of a build are listed in one table (backends.c): a new
 * backend is one file that defines its tr_backend, and one row there. */
#ifndef WDS_TRAINER_BACKEND_H
#define WDS_TRAINER_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "trainer/model.h"
#include "trainer/procgroup.h"
#include "wds/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The job as one process sees it. */
typedef struct tr_group_config {
  int local_ranks;  /* rank threads in this process */
  int world;        /* ranks of the job (all processes) */
  int first_rank;   /* global rank of local rank 0 */
  int first_device; /* device of local rank 0 (torchrun: LOCAL_RANK) */
  size_t param_count;
  int procs, proc_rank;      /* processes of the job; this one's rank */
  int init_timeout_ms;       /* CUDA: the longest wait for ncclCommInitRank */
  int collective_timeout_ms; /* CUDA: the longest wait for a collective or
                                a copy before the communicator is aborted;
                                0 = 600 s */
  int precision;             /* TR_PRECISION_* (CUDA) */
  /* The job's process group, started or not (a broadcast over it needs it
   * not yet started); the caller destroys it after the backend's group.
   * NULL: the backend's group makes a one-process group of local_ranks
   * ranks and owns it (tests). */
  tr_pg *pg;
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
  const char *name; /* --device NAME */
  /* Device backends: the devices visible (0, with why, when none), and
   * making `device` the calling thread's current one (the main thread,
   * before the loaders pin their batch memory: the context is made on that
   * device, not on device 0). NULL both for a host backend, whose ranks are
   * threads (--ranks). */
  int (*device_count)(wds__err *why);
  int (*set_device)(int device, wds__err *e);
  /* Non-zero: the backend's collectives are the process group's host ones
   * (procgroup.h), which span processes only under MPI
   * (tr_pg_config.host_collectives). */
  int host_collectives;
  int (*group_create)(const tr_group_config *c, tr_group **out, wds__err *e);
  /* Makes every rank blocked in (or later entering) a collective return
   * WDS_ERR_CANCELLED: a rank that failed calls it so the others do not wait
   * forever. */
  void (*group_abort)(tr_group *g);
  void (*group_destroy)(tr_group *g);
  int (*rank_create)(tr_group *g, int rank, const tr_model_config *m,
                     size_t batch_rows, tr_rank **out, wds__err *e);
  void (*rank_destroy)(tr_rank *r);
  int (*upload)(tr_rank *r, const tr_batch_view *b, wds__err *e);
  int (*upload_wait)(tr_rank *r, int slot, wds__err *e);
  int (*forward_backward)(tr_rank *r, const tr_batch_view *b, wds__err *e);
  int (*allreduce)(tr_rank *r, wds__err *e);
  int (*take_loss)(tr_rank *r, double *loss_sum, double *count, wds__err *e);
  int (*sgd_step)(tr_rank *r, float lr, wds__err *e);
  int (*evaluate)(tr_rank *r, const tr_batch_view *b, double *loss_sum,
                  uint64_t *correct, uint64_t *count, wds__err *e);
  /* Sums n doubles over the ranks (rank order; every rank gets the same
   * result): evaluation totals. */
  int (*allreduce_small)(tr_rank *r, double *values, int n, wds__err *e);
  /* all[0..world) = every rank's value, in global rank order. */
  int (*gather_u64)(tr_rank *r, uint64_t mine, uint64_t *all, wds__err *e);
  /* Blocks until every local rank arrived (WDS_ERR_CANCELLED once
   * aborted). */
  int (*barrier)(tr_rank *r);
  /* Host copies, param_count floats each (either may be NULL). */
  int (*get_state)(tr_rank *r, float *weights, float *momentum, wds__err *e);
  int (*set_state)(tr_rank *r, const float *weights, const float *momentum,
                   wds__err *e);
  /* param_count + 2 floats: the gradient buffer as the last allreduce left
   * it (tests). */
  int (*get_grad)(tr_rank *r, float *grad, wds__err *e);
  /* Bytes copied to the device and the copy engine's busy seconds since the
   * last call (NULL: no device). */
  void (*take_h2d)(tr_rank *r, double *bytes, double *seconds);
  /* upload of a batch of l whose field 0 holds JPEGs planned for the GPU
   * (--jpeg-decode gpu): wds/gpu_jpeg.h decodes the view's rows into the
   * rank's device buffer (a row nothing decodes turns invalid under skip
   * before the flags are staged). NULL: --jpeg-decode gpu is refused. */
  int (*upload_jpeg)(tr_rank *r, const tr_batch_view *b, wds_loader *l,
                     const wds_batch *batch, wds__err *e);
} tr_backend;

/* The backends (one file each). */
extern const tr_backend tr_backend_cpu;  /* backend_cpu.c */
extern const tr_backend tr_backend_cuda; /* backend_cuda.cu: CUDA builds */

/* ---- the registry (backends.c) ------------------------------------------ */

/* The backend called name in this build, or NULL. */
const tr_backend *tr_backend_find(const char *name);

/* Non-zero when be can run here: a host backend always, a device backend
 * when a device is visible (else 0, with the reason in why). */
int tr_backend_available(const tr_backend *be, wds__err *why);

/* --device auto: the first backend of the table that is available (device
 * backends come first); why says why the ones before it are not. */
const tr_backend *tr_backend_auto(wds__err *why);

#ifdef __cplusplus
}
#endif

#endif
