/* backend_cuda.cu — the CUDA backend of wds-train: one thread per local
 * GPU, the MLP with cuBLAS and small kernels, gradients averaged with one
 * ncclAllReduce per step.
 *
 * Per rank (= GPU) there are two streams: `copy` carries the host-to-device
 * copies of batches, `compute` everything else (kernels, cuBLAS, NCCL).
 * Batches go into one of two device buffers (slots). For a slot s:
 *
 *   upload(s):   copy waits for consumed[s] (the last kernel that read slot
 *                s), then copies images, labels and valid flags, between
 *                the timing events h2d_start[s] and h2d_stop[s];
 *   forward_backward/evaluate on s: compute waits for h2d_stop[s], and
 *                records consumed[s] after its last read of the slot;
 *   upload_wait(s): the host waits for h2d_stop[s]: the loader's batch slot
 *                may be released, and the copy time is added to the H2D
 *                figures.
 *
 * So batch i+1 is copied while batch i computes, and neither stream ever
 * waits on the host. Labels and valid flags go through small pinned staging
 * buffers per slot (labels checked against --classes on the host, as the CPU
 * backend does); images are copied straight from the loader's pinned batch.
 *
 * Determinism: every rank runs the same kernels and cuBLAS calls on the same
 * GPU model; NCCL's all-reduce gives every rank the same bits, so the
 * momentum step keeps the weights bit-identical on every rank. The loss and
 * count reductions use a fixed order (one block, fixed tree).
 *
 * Waiting: the host never blocks in a CUDA or NCCL call that a failed peer
 * could hold forever. Communicators are non-blocking (NCCL's config
 * blocking = 0); every wait polls the event, ncclCommGetAsyncError and the
 * group's abort flag (the process group's: procgroup.h), and has a
 * deadline (--collective-timeout; ncclCommInitRank waits 300 s for every
 * process). A failure of another local rank (the abort flag), a network
 * error NCCL reports, or a peer process that failed or hangs (NCCL does not
 * tell the others when a process on the same node dies or aborts: the
 * deadline; under torchrun or mpirun the launcher ends the job when a
 * process exits with an error) ends the wait with a message naming the rank and
 * the call, and the communicator is aborted (ncclCommAbort), not left
 * hanging. Copies to pageable host memory, which block inside the driver, are
 * made only after a polled wait for everything before them. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern "C" {
#include "trainer/backend.h"
#include "trainer/nccl_id.h"
#include "trainer/procgroup.h"
#include "wds/gpu_jpeg.h"
}

#define TR_SMALL_MAX 8
#define THREADS 256

struct tr_group {
  tr_group_config c;
  tr_pg *pg;   /* the job's processes: barrier, abort flag */
  int owns_pg; /* made here (c.pg was NULL) */
  ncclUniqueId id;
};

struct tr_rank {
  tr_group *g;
  int local, rank, device;
  tr_model_config m;
  size_t np, B, D; /* parameters, rows, input size */
  size_t offset[TR_MAX_LAYERS];
  cublasComputeType_t compute_type;
  cudaStream_t compute, copy;
  cublasHandle_t blas;
  ncclComm_t comm;
  int comm_ok; /* initialised: finalize it (else abort it) */
  int failed;

  float *w, *v, *grad;            /* device: P, P, P + 2 */
  float *act[TR_MAX_LAYERS + 1];  /* device: B x dims[l] */
  float *dz, *da;                 /* device: B x max dim */
  float *rowloss, *rowcorrect;    /* device: B */
  double *loss_acc;               /* device: 2 (take_loss) */
  double *sums;                   /* device: 3 (evaluate) */
  double *small;                  /* device: TR_SMALL_MAX */
  unsigned long long *gin, *gout; /* device: 1, world */

  uint8_t *img[2];   /* device: B x D */
  int *lab[2];       /* device: B */
  float *valid[2];   /* device: B */
  int *h_lab[2];     /* pinned staging */
  float *h_valid[2]; /* pinned staging */
  double *h_scratch; /* pinned: max(8 doubles, world u64) */
  size_t scratch_bytes;

  wds_gpu_jpeg *jpeg; /* --jpeg-decode gpu: made by the first upload */

  cudaEvent_t h2d_start[2], h2d_stop[2], consumed[2], sync;
  int uploaded[2], pending[2];
  double pending_bytes[2];
  double h2d_bytes, h2d_s;
};

/* ---- errors and waiting ------------------------------------------------- */

static int aborted(const tr_group *g) { return tr_pg_aborted(g->pg); }

static int cuda_fail(tr_rank *r, cudaError_t e, const char *call,
                     wds__err *err) {
  r->failed = 1;
  return wds__fail(err, WDS_ERR_IO, "rank %d (GPU %d): %s: %s (%s)", r->rank,
                   r->device, call, cudaGetErrorString(e), cudaGetErrorName(e));
}

static int nccl_fail(tr_rank *r, ncclResult_t res, const char *call,
                     wds__err *err) {
  const char *last = r->comm ? ncclGetLastError(r->comm) : NULL;
  r->failed = 1;
  return wds__fail(err, WDS_ERR_IO, "rank %d (GPU %d): %s: %s%s%s", r->rank,
                   r->device, call, ncclGetErrorString(res),
                   last && *last ? ": " : "", last ? last : "");
}

static int blas_fail(tr_rank *r, cublasStatus_t st, const char *call,
                     wds__err *err) {
  r->failed = 1;
  return wds__fail(err, WDS_ERR_IO, "rank %d (GPU %d): %s: %s", r->rank,
                   r->device, call, cublasGetStatusString(st));
}

#define CU(call, what)                                                         \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess)                                                     \
      return cuda_fail(r, e_, what, err);                                      \
  } while (0)

#define BL(call, what)                                                         \
  do {                                                                         \
    cublasStatus_t s_ = (call);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                           \
      return blas_fail(r, s_, what, err);                                      \
  } while (0)

#define LAUNCHED(what) CU(cudaGetLastError(), what)

/* Returns the status of a call that failed (its message is in err). */
#define TRY(call)                                                              \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != WDS_OK)                                                         \
      return rc_;                                                              \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The deadline of a wait that starts now (--collective-timeout). */
static double collective_deadline(const tr_rank *r) {
  int ms = r->g->c.collective_timeout_ms;
  return now_s() + (ms > 0 ? ms / 1000.0 : 600.0);
}

static int timeout_fail(tr_rank *r, const char *what, double waited_s,
                        const char *flag, wds__err *err) {
  r->failed = 1;
  return wds__fail(err, WDS_ERR_TIMEOUT,
                   "rank %d (GPU %d): %s: nothing completed for %.0f s (%s): "
                   "a rank of another process failed or hangs; aborting the "
                   "communicator",
                   r->rank, r->device, what, waited_s, flag);
}

static void pause_briefly(unsigned spins) {
  if (spins < 64) {
    sched_yield();
  } else {
    struct timespec ts = {0, spins < 4096 ? 20000 : 200000};
    nanosleep(&ts, NULL);
  }
}

/* The communicator's pending error, if any (WDS_OK: none). */
static int nccl_async_check(tr_rank *r, const char *call, wds__err *err) {
  if (!r->comm)
    return WDS_OK;
  ncclResult_t a = ncclSuccess;
  ncclResult_t q = ncclCommGetAsyncError(r->comm, &a);
  if (q != ncclSuccess)
    return nccl_fail(r, q, "ncclCommGetAsyncError", err);
  if (a != ncclSuccess && a != ncclInProgress)
    return nccl_fail(r, a, call, err);
  return WDS_OK;
}

static int aborted_fail(tr_rank *r, const char *what, wds__err *err) {
  char why[192];
  tr_pg_why(r->g->pg, why, sizeof why);
  r->failed = 1;
  return wds__fail(err, WDS_ERR_CANCELLED, "rank %d (GPU %d): %s: aborted (%s)",
                   r->rank, r->device, what,
                   why[0] ? why : "another rank failed");
}

/* Waits for an event: polls it, the communicator's asynchronous error and
 * the group's abort flag. */
static int wait_event(tr_rank *r, cudaEvent_t ev, const char *what,
                      wds__err *err) {
  double t0 = now_s(), deadline = collective_deadline(r);
  for (unsigned spins = 0;; spins++) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess)
      return WDS_OK;
    if (e != cudaErrorNotReady)
      return cuda_fail(r, e, what, err);
    int rc = nccl_async_check(r, what, err);
    if (rc != WDS_OK)
      return rc;
    if (aborted(r->g))
      return aborted_fail(r, what, err);
    if ((spins & 63) == 63 && now_s() > deadline)
      return timeout_fail(r, what, now_s() - t0, "--collective-timeout", err);
    pause_briefly(spins);
  }
}

/* Everything enqueued on the compute stream so far. */
static int wait_compute(tr_rank *r, const char *what, wds__err *err) {
  CU(cudaEventRecord(r->sync, r->compute), "cudaEventRecord");
  return wait_event(r, r->sync, what, err);
}

/* A non-blocking NCCL call's result: ncclInProgress is polled until the
 * call is complete (or failed, or the group aborted, or deadline_s passed:
 * 0 = --collective-timeout from now). */
static int nccl_done(tr_rank *r, ncclResult_t res, const char *call,
                     double deadline_s, wds__err *err) {
  if (res != ncclSuccess && res != ncclInProgress)
    return nccl_fail(r, res, call, err);
  double t0 = now_s();
  const char *flag = deadline_s > 0 ? "the 300 s wait for every process"
                                    : "--collective-timeout";
  if (deadline_s <= 0)
    deadline_s = collective_deadline(r);
  for (unsigned spins = 0;; spins++) {
    ncclResult_t a = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(r->comm, &a);
    if (q != ncclSuccess)
      return nccl_fail(r, q, "ncclCommGetAsyncError", err);
    if (a == ncclSuccess)
      return WDS_OK;
    if (a != ncclInProgress)
      return nccl_fail(r, a, call, err);
    if (aborted(r->g))
      return aborted_fail(r, call, err);
    if ((spins & 63) == 63 && now_s() > deadline_s)
      return timeout_fail(r, call, now_s() - t0, flag, err);
    pause_briefly(spins);
  }
}

/* ---- kernels ------------------------------------------------------------ */

static unsigned blocks_for(size_t n) {
  size_t b = (n + THREADS - 1) / THREADS;
  if (b < 1)
    b = 1;
  return (unsigned)(b > 65535 ? 65535 : b);
}

/* u8 -> float in [-1, 1], exactly as the CPU backend computes it (no
 * contraction into an FMA). */
__global__ void k_normalize(const uint8_t *in, float *out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = __fmul_rn((float)in[i], 1.0f / 255.0f);
    out[i] = __fmul_rn(__fsub_rn(x, 0.5f), 2.0f);
  }
}

/* z[i][o] += b[o], then ReLU unless this is the output layer. */
__global__ void k_bias_act(float *z, const float *b, size_t rows, int dout,
                           int relu) {
  size_t n = rows * (size_t)dout;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float s = z[i] + b[i % (size_t)dout];
    z[i] = relu && s < 0.0f ? 0.0f : s;
  }
}

/* Per row: softmax cross-entropy against the label. dz = p - onehot for
 * valid rows, 0 for the others; loss and correctness per row (0 when
 * invalid). One thread per row. */
__global__ void k_softmax_xent(const float *z, const int *lab,
                               const float *valid, int rows, int classes,
                               float *dz, float *rowloss, float *rowcorrect) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows)
    return;
  const float *zi = z + (size_t)i * classes;
  float *di = dz ? dz + (size_t)i * classes : NULL;
  if (valid[i] == 0.0f) {
    if (di)
      for (int c = 0; c < classes; c++)
        di[c] = 0.0f;
    rowloss[i] = 0.0f;
    if (rowcorrect)
      rowcorrect[i] = 0.0f;
    return;
  }
  float mx = zi[0];
  int am = 0;
  for (int c = 1; c < classes; c++)
    if (zi[c] > mx) {
      mx = zi[c];
      am = c;
    }
  double sum = 0.0;
  for (int c = 0; c < classes; c++)
    sum += exp((double)(zi[c] - mx));
  int y = lab[i];
  if (di) {
    for (int c = 0; c < classes; c++)
      di[c] = (float)(exp((double)(zi[c] - mx)) / sum);
    di[y] -= 1.0f;
  }
  rowloss[i] = (float)(log(sum) + (double)mx - (double)zi[y]);
  if (rowcorrect)
    rowcorrect[i] = am == y ? 1.0f : 0.0f;
}

/* out[k] (+)= sum over rows of a[k][row], for k < nvec, in a fixed order:
 * one block, THREADS threads, strided partial sums then a fixed tree. */
__global__ void k_sum_rows(const float *a0, const float *a1, const float *a2,
                           int rows, double *out, int accumulate,
                           float *out_f) {
  __shared__ double part[3][THREADS];
  const float *a[3] = {a0, a1, a2};
  int t = threadIdx.x;
  for (int k = 0; k < 3; k++) {
    double s = 0.0;
    if (a[k])
      for (int i = t; i < rows; i += THREADS)
        s += a[k][i];
    part[k][t] = s;
  }
  __syncthreads();
  for (int w = THREADS / 2; w > 0; w /= 2) {
    if (t < w)
      for (int k = 0; k < 3; k++)
        part[k][t] += part[k][t + w];
    __syncthreads();
  }
  if (t == 0) {
    for (int k = 0; k < 3; k++) {
      if (!a[k])
        continue;
      if (out)
        out[k] = accumulate ? out[k] + part[k][0] : part[k][0];
      if (out_f)
        out_f[k] = (float)part[k][0];
    }
  }
}

/* db[o] = sum over rows of dz[row][o] (rows ascending). */
__global__ void k_bias_grad(const float *dz, size_t rows, int dout, float *db) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= dout)
    return;
  float s = 0.0f;
  for (size_t i = 0; i < rows; i++)
    s += dz[i * (size_t)dout + o];
  db[o] = s;
}

/* ReLU's derivative: da = 0 where the layer's output was 0. */
__global__ void k_relu_mask(float *da, const float *a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    if (a[i] <= 0.0f)
      da[i] = 0.0f;
}

/* loss_acc += (loss sum, count) of the all-reduced gradient buffer. */
__global__ void k_take_step_loss(const float *tail, double *acc) {
  acc[0] += tail[0];
  acc[1] += tail[1];
}

__global__ void k_sgd(float *w, float *v, const float *g, size_t n,
                      const float *count, float lr, float mu, float wd) {
  float c = *count;
  float scale = c > 0.0f ? 1.0f / c : 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float gi = g[i] * scale + wd * w[i];
    float vi = mu * v[i] + gi;
    v[i] = vi;
    w[i] -= lr * vi;
  }
}

/* ---- group -------------------------------------------------------------- */

static int cuda_device_count(wds__err *why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    wds__fail(why, WDS_ERR_IO, "%s", cudaGetErrorString(e));
    return 0;
  }
  if (n == 0)
    wds__fail(why, WDS_ERR_IO, "no device");
  return n;
}

static int cuda_set_device(int device, wds__err *err) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return wds__fail(err, WDS_ERR_IO, "cudaSetDevice(%d): %s", device,
                     cudaGetErrorString(e));
  return WDS_OK;
}

static int cuda_group_create(const tr_group_config *c, tr_group **out,
                             wds__err *err) {
  *out = NULL;
  wds__err why;
  why.msg[0] = '\0';
  int visible = cuda_device_count(&why);
  if (visible < 1)
    return wds__fail(err, WDS_ERR_INVALID, "no CUDA GPU found (%s)", why.msg);
  if (c->first_device < 0 || c->first_device + c->local_ranks > visible)
    return wds__fail(err, WDS_ERR_INVALID, "GPUs %d..%d asked for, %d visible",
                     c->first_device, c->first_device + c->local_ranks - 1,
                     visible);
  if (c->pg && (tr_pg_local_ranks(c->pg) != c->local_ranks ||
                tr_pg_procs(c->pg) != c->procs ||
                tr_pg_proc_rank(c->pg) != c->proc_rank))
    return wds__fail(err, WDS_ERR_INVALID,
                     "the process group (process %d of %d, %d local ranks) is "
                     "not the job's (process %d of %d, %d local ranks)",
                     tr_pg_proc_rank(c->pg), tr_pg_procs(c->pg),
                     tr_pg_local_ranks(c->pg), c->proc_rank, c->procs,
                     c->local_ranks);
  tr_group *g = (tr_group *)calloc(1, sizeof *g);
  if (!g)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  g->c = *c;
  g->pg = c->pg;
  int rc;
  if (!g->pg) {
    if ((rc = tr_pg_create_local(c->local_ranks, &g->pg, err)) != WDS_OK) {
      free(g);
      return rc;
    }
    g->owns_pg = 1;
  }
  /* The communicator's id (nccl_id.h): made here, by MPI_Bcast, or from
   * NCCL_COMM_ID. */
  if ((rc = tr_nccl_id(g->pg, c->procs, c->proc_rank, &g->id, err)) != WDS_OK)
    goto fail;
  *out = g;
  return WDS_OK;
fail:
  if (g->owns_pg)
    tr_pg_destroy(g->pg);
  free(g);
  return rc;
}

static void cuda_group_abort(tr_group *g) {
  tr_pg_abort(g->pg, NULL); /* the local ranks */
}

static void cuda_group_destroy(tr_group *g) {
  if (!g)
    return;
  if (g->owns_pg)
    tr_pg_destroy(g->pg);
  free(g);
}

/* ---- rank --------------------------------------------------------------- */

static void cuda_rank_destroy(tr_rank *r) {
  if (!r)
    return;
  cudaSetDevice(r->device);
  if (r->failed) /* the local ranks waiting for this one give up */
    cuda_group_abort(r->g);
  if (r->comm) {
    if (r->comm_ok && !r->failed && !aborted(r->g)) {
      /* Flush, then free; ncclCommFinalize is non-blocking here. */
      ncclResult_t res = ncclCommFinalize(r->comm);
      wds__err err;
      if (nccl_done(r, res, "ncclCommFinalize", 0, &err) == WDS_OK)
        ncclCommDestroy(r->comm);
      else
        ncclCommAbort(r->comm);
    } else {
      ncclCommAbort(r->comm);
    }
  }
  /* after the communicator is aborted (which ends a hung collective and
   * the compute queued behind it): the decoder's close waits for its work,
   * polled under --collective-timeout */
  wds_gpu_jpeg_close(r->jpeg);
  r->jpeg = NULL;
  if (r->compute)
    cudaStreamSynchronize(r->compute);
  if (r->copy)
    cudaStreamSynchronize(r->copy);
  if (r->blas)
    cublasDestroy(r->blas);
  cudaFree(r->w);
  cudaFree(r->v);
  cudaFree(r->grad);
  for (int l = 0; l <= r->m.layers; l++)
    cudaFree(r->act[l]);
  cudaFree(r->dz);
  cudaFree(r->da);
  cudaFree(r->rowloss);
  cudaFree(r->rowcorrect);
  cudaFree(r->loss_acc);
  cudaFree(r->sums);
  cudaFree(r->small);
  cudaFree(r->gin);
  cudaFree(r->gout);
  for (int s = 0; s < 2; s++) {
    cudaFree(r->img[s]);
    cudaFree(r->lab[s]);
    cudaFree(r->valid[s]);
    cudaFreeHost(r->h_lab[s]);
    cudaFreeHost(r->h_valid[s]);
    if (r->h2d_start[s])
      cudaEventDestroy(r->h2d_start[s]);
    if (r->h2d_stop[s])
      cudaEventDestroy(r->h2d_stop[s]);
    if (r->consumed[s])
      cudaEventDestroy(r->consumed[s]);
  }
  cudaFreeHost(r->h_scratch);
  if (r->sync)
    cudaEventDestroy(r->sync);
  if (r->compute)
    cudaStreamDestroy(r->compute);
  if (r->copy)
    cudaStreamDestroy(r->copy);
  free(r);
}

#define DMALLOC(ptr, bytes)                                                    \
  CU(cudaMalloc((void **)&(ptr), (bytes)), "cudaMalloc")

static int rank_init(tr_rank *r, wds__err *err) {
  tr_group *g = r->g;
  const tr_model_config *m = &r->m;
  CU(cudaSetDevice(r->device), "cudaSetDevice");
  int major = 0;
  CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                            r->device),
     "cudaDeviceGetAttribute");
  int tf32 = g->c.precision == TR_PRECISION_TF32 ||
             (g->c.precision == TR_PRECISION_AUTO && major >= 8);
  r->compute_type = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CU(cudaStreamCreateWithFlags(&r->compute, cudaStreamNonBlocking),
     "cudaStreamCreate");
  CU(cudaStreamCreateWithFlags(&r->copy, cudaStreamNonBlocking),
     "cudaStreamCreate");
  BL(cublasCreate(&r->blas), "cublasCreate");
  BL(cublasSetStream(r->blas, r->compute), "cublasSetStream");
  size_t maxdim = 0; /* of the deltas: layers 1..L (never the input) */
  for (int l = 0; l <= m->layers; l++) {
    if (l > 0 && (size_t)m->dims[l] > maxdim)
      maxdim = (size_t)m->dims[l];
    DMALLOC(r->act[l], r->B * (size_t)m->dims[l] * sizeof(float));
  }
  DMALLOC(r->w, r->np * sizeof(float));
  DMALLOC(r->v, r->np * sizeof(float));
  DMALLOC(r->grad, (r->np + 2) * sizeof(float));
  DMALLOC(r->dz, r->B * maxdim * sizeof(float));
  DMALLOC(r->da, r->B * maxdim * sizeof(float));
  DMALLOC(r->rowloss, r->B * sizeof(float));
  DMALLOC(r->rowcorrect, r->B * sizeof(float));
  DMALLOC(r->loss_acc, 2 * sizeof(double));
  DMALLOC(r->sums, 3 * sizeof(double));
  DMALLOC(r->small, TR_SMALL_MAX * sizeof(double));
  DMALLOC(r->gin, sizeof(unsigned long long));
  DMALLOC(r->gout, (size_t)g->c.world * sizeof(unsigned long long));
  r->scratch_bytes = (size_t)g->c.world * sizeof(unsigned long long);
  if (r->scratch_bytes < 8 * sizeof(double))
    r->scratch_bytes = 8 * sizeof(double);
  CU(cudaMallocHost((void **)&r->h_scratch, r->scratch_bytes),
     "cudaMallocHost");
  for (int s = 0; s < 2; s++) {
    DMALLOC(r->img[s], r->B * r->D);
    DMALLOC(r->lab[s], r->B * sizeof(int));
    DMALLOC(r->valid[s], r->B * sizeof(float));
    CU(cudaMemset(r->img[s], 0, r->B * r->D), "cudaMemset");
    CU(cudaMallocHost((void **)&r->h_lab[s], r->B * sizeof(int)),
       "cudaMallocHost");
    CU(cudaMallocHost((void **)&r->h_valid[s], r->B * sizeof(float)),
       "cudaMallocHost");
    CU(cudaEventCreate(&r->h2d_start[s]), "cudaEventCreate");
    CU(cudaEventCreate(&r->h2d_stop[s]), "cudaEventCreate");
    CU(cudaEventCreateWithFlags(&r->consumed[s], cudaEventDisableTiming),
       "cudaEventCreate");
    CU(cudaEventRecord(r->consumed[s], r->compute), "cudaEventRecord");
  }
  CU(cudaEventCreateWithFlags(&r->sync, cudaEventDisableTiming),
     "cudaEventCreate");
  CU(cudaMemset(r->v, 0, r->np * sizeof(float)), "cudaMemset");
  CU(cudaMemset(r->grad, 0, (r->np + 2) * sizeof(float)), "cudaMemset");
  CU(cudaMemset(r->loss_acc, 0, 2 * sizeof(double)), "cudaMemset");
  float *w0 = (float *)malloc(r->np * sizeof(float));
  if (!w0) {
    return wds__fail(err, WDS_ERR_NOMEM, "rank %d: out of memory", r->rank);
  }
  tr_model_init(m, w0);
  cudaError_t e =
      cudaMemcpy(r->w, w0, r->np * sizeof(float), cudaMemcpyHostToDevice);
  free(w0);
  CU(e, "cudaMemcpy (initial weights)");
  CU(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  /* The communicator: non-blocking, so a peer that never comes ends in a
   * timeout or an abort instead of a hang. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t res =
      ncclCommInitRankConfig(&r->comm, g->c.world, g->id, r->rank, &cfg);
  double deadline =
      now_s() +
      (g->c.init_timeout_ms > 0 ? g->c.init_timeout_ms / 1000.0 : 300.0);
  TRY(nccl_done(r, res, "ncclCommInitRank", deadline, err));
  r->comm_ok = 1;
  return WDS_OK;
}

static int cuda_rank_create(tr_group *g, int local, const tr_model_config *m,
                            size_t batch_rows, tr_rank **out, wds__err *err) {
  *out = NULL;
  tr_rank *r = (tr_rank *)calloc(1, sizeof *r);
  if (!r)
    return wds__fail(err, WDS_ERR_NOMEM, "rank %d: out of memory",
                     g->c.first_rank + local);
  r->g = g;
  r->local = local;
  r->rank = g->c.first_rank + local;
  r->device = g->c.first_device + local;
  r->m = *m;
  r->np = tr_model_param_count(m);
  r->B = batch_rows ? batch_rows : 1;
  r->D = (size_t)m->dims[0];
  tr_model_offsets(m, r->offset);
  int rc = rank_init(r, err);
  if (rc != WDS_OK) {
    r->failed = 1;
    cuda_rank_destroy(r);
    return rc;
  }
  *out = r;
  return WDS_OK;
}

/* ---- data --------------------------------------------------------------- */

static int cuda_upload_wait(tr_rank *r, int s, wds__err *err);

/* Rows of view b that exist in its batch. */
static size_t rows_present(const tr_batch_view *b) {
  if (b->row0 >= b->batch_rows)
    return 0;
  size_t n = b->batch_rows - b->row0;
  return n < b->rows ? n : b->rows;
}

/* upload, and upload_jpeg with l and batch set. */
static int upload_rows(tr_rank *r, const tr_batch_view *b, wds_loader *l,
                       const wds_batch *batch, wds__err *err) {
  int s = b->slot;
  if (s < 0 || s > 1 || b->rows > r->B) {
    return wds__fail(err, WDS_ERR_INVALID,
                     "rank %d: upload: slot %d, %zu rows (at most %zu)",
                     r->rank, s, b->rows, r->B);
  }
  /* The staging buffers of the slot are free once its last copy is done. */
  if (r->pending[s])
    TRY(cuda_upload_wait(r, s, err));
  size_t n = rows_present(b);
  int gpu_jpeg = l != NULL; /* --jpeg-decode gpu */
  if (gpu_jpeg) {
    /* This rank's rows decoded on its GPU into the slot's buffer, on the
     * copy stream once the compute that read the buffer is done; a row
     * that cannot be decoded turns invalid (skip) before the flags are
     * staged below, or is the run's error (stop). */
    if (!r->jpeg) {
      int rc = wds_gpu_jpeg_open(r->device, &r->jpeg);
      if (rc != WDS_OK)
        return wds__fail(err, rc, "rank %d: --jpeg-decode gpu: %s", r->rank,
                         wds_last_error());
      /* its waits poll under the deadline of the backend's other waits */
      int ms = r->g->c.collective_timeout_ms;
      wds_gpu_jpeg_set_timeout(r->jpeg, ms > 0 ? ms : 600000);
    }
    CU(cudaStreamWaitEvent(r->copy, r->consumed[s], 0), "cudaStreamWaitEvent");
    CU(cudaEventRecord(r->h2d_start[s], r->copy), "cudaEventRecord");
    if (n) {
      int rc = wds_gpu_jpeg_decode_rows(r->jpeg, l, batch, 0, b->row0, n,
                                        r->img[s], r->copy);
      if (rc != WDS_OK)
        return wds__fail(err, rc, "rank %d: training data: %s", r->rank,
                         wds_last_error());
    }
  }
  int classes = r->m.dims[r->m.layers];
  for (size_t i = 0; i < r->B; i++) {
    size_t row = b->row0 + i;
    int ok = i < n && b->valid[row];
    int64_t y = ok ? b->labels[row] : 0;
    if (ok && (y < 0 || y >= classes)) {
      return wds__fail(err, WDS_ERR_INVALID,
                       "rank %d: label %lld of batch row %zu is out of range "
                       "[0, %d) (--classes)",
                       r->rank, (long long)y, row, classes);
    }
    r->h_lab[s][i] = (int)y;
    r->h_valid[s][i] = ok ? 1.0f : 0.0f;
  }
  if (!gpu_jpeg) {
    CU(cudaStreamWaitEvent(r->copy, r->consumed[s], 0), "cudaStreamWaitEvent");
    CU(cudaEventRecord(r->h2d_start[s], r->copy), "cudaEventRecord");
    if (n)
      CU(cudaMemcpyAsync(r->img[s], b->images + b->row0 * r->D, n * r->D,
                         cudaMemcpyHostToDevice, r->copy),
         "cudaMemcpyAsync (images)");
  }
  CU(cudaMemcpyAsync(r->lab[s], r->h_lab[s], r->B * sizeof(int),
                     cudaMemcpyHostToDevice, r->copy),
     "cudaMemcpyAsync (labels)");
  CU(cudaMemcpyAsync(r->valid[s], r->h_valid[s], r->B * sizeof(float),
                     cudaMemcpyHostToDevice, r->copy),
     "cudaMemcpyAsync (valid flags)");
  CU(cudaEventRecord(r->h2d_stop[s], r->copy), "cudaEventRecord");
  r->pending[s] = 1;
  r->uploaded[s] = 1;
  r->pending_bytes[s] =
      (double)(n * r->D + r->B * (sizeof(int) + sizeof(float)));
  return WDS_OK;
}

static int cuda_upload(tr_rank *r, const tr_batch_view *b, wds__err *err) {
  return upload_rows(r, b, NULL, NULL, err);
}

static int cuda_upload_jpeg(tr_rank *r, const tr_batch_view *b, wds_loader *l,
                            const wds_batch *batch, wds__err *err) {
  return upload_rows(r, b, l, batch, err);
}

static int cuda_upload_wait(tr_rank *r, int s, wds__err *err) {
  if (s < 0 || s > 1 || !r->pending[s])
    return 0;
  TRY(wait_event(r, r->h2d_stop[s], "host-to-device copy", err));
  float ms = 0.0f;
  CU(cudaEventElapsedTime(&ms, r->h2d_start[s], r->h2d_stop[s]),
     "cudaEventElapsedTime");
  r->h2d_bytes += r->pending_bytes[s];
  r->h2d_s += ms / 1000.0;
  r->pending[s] = 0;
  return WDS_OK;
}

static void cuda_take_h2d(tr_rank *r, double *bytes, double *seconds) {
  *bytes = r->h2d_bytes;
  *seconds = r->h2d_s;
  r->h2d_bytes = r->h2d_s = 0;
}

/* ---- math --------------------------------------------------------------- */

/* Normalised inputs of slot s into act[0], then the forward pass. */
static int forward(tr_rank *r, int s, wds__err *err) {
  if (s < 0 || s > 1 || !r->uploaded[s]) {
    return wds__fail(err, WDS_ERR_INVALID,
                     "rank %d: device buffer %d holds no batch", r->rank, s);
  }
  CU(cudaStreamWaitEvent(r->compute, r->h2d_stop[s], 0), "cudaStreamWaitEvent");
  size_t n = r->B * r->D;
  k_normalize<<<blocks_for(n), THREADS, 0, r->compute>>>(r->img[s], r->act[0],
                                                         n);
  LAUNCHED("k_normalize");
  const float one = 1.0f, zero = 0.0f;
  for (int l = 0; l < r->m.layers; l++) {
    int din = r->m.dims[l], dout = r->m.dims[l + 1];
    const float *W = r->w + r->offset[l], *bias = W + (size_t)dout * din;
    /* Z (dout x B, column-major) = W^T (W column-major din x dout) . A. */
    BL(cublasGemmEx(r->blas, CUBLAS_OP_T, CUBLAS_OP_N, dout, (int)r->B, din,
                    &one, W, CUDA_R_32F, din, r->act[l], CUDA_R_32F, din, &zero,
                    r->act[l + 1], CUDA_R_32F, dout, r->compute_type,
                    CUBLAS_GEMM_DEFAULT),
       "cublasGemmEx (forward)");
    size_t nz = r->B * (size_t)dout;
    k_bias_act<<<blocks_for(nz), THREADS, 0, r->compute>>>(
        r->act[l + 1], bias, r->B, dout, l + 1 < r->m.layers);
    LAUNCHED("k_bias_act");
  }
  return WDS_OK;
}

static int cuda_forward_backward(tr_rank *r, const tr_batch_view *b,
                                 wds__err *err) {
  int s = b->slot, L = r->m.layers, classes = r->m.dims[L];
  TRY(forward(r, s, err));
  int rows = (int)r->B;
  k_softmax_xent<<<(rows + THREADS - 1) / THREADS, THREADS, 0, r->compute>>>(
      r->act[L], r->lab[s], r->valid[s], rows, classes, r->dz, r->rowloss,
      NULL);
  LAUNCHED("k_softmax_xent");
  /* grad[P] = loss sum, grad[P + 1] = valid rows. */
  k_sum_rows<<<1, THREADS, 0, r->compute>>>(r->rowloss, r->valid[s], NULL, rows,
                                            NULL, 0, r->grad + r->np);
  LAUNCHED("k_sum_rows");
  CU(cudaEventRecord(r->consumed[s], r->compute), "cudaEventRecord");
  const float one = 1.0f, zero = 0.0f;
  float *dz = r->dz, *da = r->da;
  for (int l = L - 1; l >= 0; l--) {
    int din = r->m.dims[l], dout = r->m.dims[l + 1];
    const float *W = r->w + r->offset[l];
    float *dW = r->grad + r->offset[l], *db = dW + (size_t)dout * din;
    /* dW (din x dout column-major = dout x din row-major) = A . dZ^T. */
    BL(cublasGemmEx(r->blas, CUBLAS_OP_N, CUBLAS_OP_T, din, dout, rows, &one,
                    r->act[l], CUDA_R_32F, din, dz, CUDA_R_32F, dout, &zero, dW,
                    CUDA_R_32F, din, r->compute_type, CUBLAS_GEMM_DEFAULT),
       "cublasGemmEx (weight gradient)");
    k_bias_grad<<<(dout + THREADS - 1) / THREADS, THREADS, 0, r->compute>>>(
        dz, r->B, dout, db);
    LAUNCHED("k_bias_grad");
    if (l == 0)
      break;
    /* dA (din x B) = W (din x dout) . dZ (dout x B), then ReLU's mask. */
    BL(cublasGemmEx(r->blas, CUBLAS_OP_N, CUBLAS_OP_N, din, rows, dout, &one, W,
                    CUDA_R_32F, din, dz, CUDA_R_32F, dout, &zero, da,
                    CUDA_R_32F, din, r->compute_type, CUBLAS_GEMM_DEFAULT),
       "cublasGemmEx (input gradient)");
    size_t na = r->B * (size_t)din;
    k_relu_mask<<<blocks_for(na), THREADS, 0, r->compute>>>(da, r->act[l], na);
    LAUNCHED("k_relu_mask");
    float *t = dz;
    dz = da;
    da = t;
  }
  return WDS_OK;
}

static int cuda_allreduce(tr_rank *r, wds__err *err) {
  if (aborted(r->g))
    return aborted_fail(r, "ncclAllReduce", err);
  ncclResult_t res = ncclAllReduce(r->grad, r->grad, r->np + 2, ncclFloat,
                                   ncclSum, r->comm, r->compute);
  TRY(nccl_done(r, res, "ncclAllReduce", 0, err));
  k_take_step_loss<<<1, 1, 0, r->compute>>>(r->grad + r->np, r->loss_acc);
  LAUNCHED("k_take_step_loss");
  return WDS_OK;
}

static int cuda_take_loss(tr_rank *r, double *loss_sum, double *count,
                          wds__err *err) {
  CU(cudaMemcpyAsync(r->h_scratch, r->loss_acc, 2 * sizeof(double),
                     cudaMemcpyDeviceToHost, r->compute),
     "cudaMemcpyAsync (loss)");
  CU(cudaMemsetAsync(r->loss_acc, 0, 2 * sizeof(double), r->compute),
     "cudaMemsetAsync");
  TRY(wait_compute(r, "loss", err));
  *loss_sum = r->h_scratch[0];
  *count = r->h_scratch[1];
  return WDS_OK;
}

static int cuda_sgd_step(tr_rank *r, float lr, wds__err *err) {
  k_sgd<<<blocks_for(r->np), THREADS, 0, r->compute>>>(
      r->w, r->v, r->grad, r->np, r->grad + r->np + 1, lr, r->m.momentum,
      r->m.weight_decay);
  LAUNCHED("k_sgd");
  return WDS_OK;
}

static int cuda_evaluate(tr_rank *r, const tr_batch_view *b, double *loss_sum,
                         uint64_t *correct, uint64_t *count, wds__err *err) {
  int s = b->slot, L = r->m.layers, rows = (int)r->B;
  TRY(forward(r, s, err));
  k_softmax_xent<<<(rows + THREADS - 1) / THREADS, THREADS, 0, r->compute>>>(
      r->act[L], r->lab[s], r->valid[s], rows, r->m.dims[L], NULL, r->rowloss,
      r->rowcorrect);
  LAUNCHED("k_softmax_xent");
  k_sum_rows<<<1, THREADS, 0, r->compute>>>(
      r->rowloss, r->rowcorrect, r->valid[s], rows, r->sums, 0, NULL);
  LAUNCHED("k_sum_rows");
  CU(cudaEventRecord(r->consumed[s], r->compute), "cudaEventRecord");
  CU(cudaMemcpyAsync(r->h_scratch, r->sums, 3 * sizeof(double),
                     cudaMemcpyDeviceToHost, r->compute),
     "cudaMemcpyAsync (evaluation sums)");
  TRY(wait_compute(r, "evaluate", err));
  *loss_sum += r->h_scratch[0];
  *correct += (uint64_t)(r->h_scratch[1] + 0.5);
  *count += (uint64_t)(r->h_scratch[2] + 0.5);
  return WDS_OK;
}

static int cuda_allreduce_small(tr_rank *r, double *values, int n,
                                wds__err *err) {
  if (n < 1 || n > TR_SMALL_MAX) {
    return wds__fail(err, WDS_ERR_LIMIT,
                     "allreduce_small: %d values (at most %d)", n,
                     TR_SMALL_MAX);
  }
  memcpy(r->h_scratch, values, (size_t)n * sizeof(double));
  CU(cudaMemcpyAsync(r->small, r->h_scratch, (size_t)n * sizeof(double),
                     cudaMemcpyHostToDevice, r->compute),
     "cudaMemcpyAsync");
  ncclResult_t res = ncclAllReduce(r->small, r->small, (size_t)n, ncclFloat64,
                                   ncclSum, r->comm, r->compute);
  TRY(nccl_done(r, res, "ncclAllReduce (evaluation totals)", 0, err));
  CU(cudaMemcpyAsync(r->h_scratch, r->small, (size_t)n * sizeof(double),
                     cudaMemcpyDeviceToHost, r->compute),
     "cudaMemcpyAsync");
  TRY(wait_compute(r, "ncclAllReduce (evaluation totals)", err));
  memcpy(values, r->h_scratch, (size_t)n * sizeof(double));
  return WDS_OK;
}

static int cuda_gather_u64(tr_rank *r, uint64_t mine, uint64_t *all,
                           wds__err *err) {
  unsigned long long *h = (unsigned long long *)r->h_scratch;
  h[0] = mine;
  CU(cudaMemcpyAsync(r->gin, h, sizeof *h, cudaMemcpyHostToDevice, r->compute),
     "cudaMemcpyAsync");
  ncclResult_t res =
      ncclAllGather(r->gin, r->gout, 1, ncclUint64, r->comm, r->compute);
  TRY(nccl_done(r, res, "ncclAllGather", 0, err));
  size_t bytes = (size_t)r->g->c.world * sizeof *h;
  CU(cudaMemcpyAsync(h, r->gout, bytes, cudaMemcpyDeviceToHost, r->compute),
     "cudaMemcpyAsync");
  TRY(wait_compute(r, "ncclAllGather", err));
  for (int i = 0; i < r->g->c.world; i++)
    all[i] = h[i];
  return WDS_OK;
}

static int cuda_barrier(tr_rank *r) { return tr_pg_barrier(r->g->pg); }

/* Device <-> host copies of n floats, ordered on the compute stream. */
static int copy_floats(tr_rank *r, void *dst, const void *src, size_t n,
                       cudaMemcpyKind kind, const char *what, wds__err *err) {
  /* With pageable host memory the copy blocks in the driver until the
   * stream reaches it: first wait (polling) for what is queued before. */
  TRY(wait_compute(r, what, err));
  CU(cudaMemcpyAsync(dst, src, n * sizeof(float), kind, r->compute), what);
  return wait_compute(r, what, err);
}

static int cuda_get_state(tr_rank *r, float *weights, float *momentum,
                          wds__err *err) {
  if (weights)
    TRY(copy_floats(r, weights, r->w, r->np, cudaMemcpyDeviceToHost,
                    "cudaMemcpyAsync (weights)", err));
  if (momentum)
    TRY(copy_floats(r, momentum, r->v, r->np, cudaMemcpyDeviceToHost,
                    "cudaMemcpyAsync (momentum)", err));
  return WDS_OK;
}

static int cuda_set_state(tr_rank *r, const float *weights,
                          const float *momentum, wds__err *err) {
  if (weights)
    TRY(copy_floats(r, r->w, weights, r->np, cudaMemcpyHostToDevice,
                    "cudaMemcpyAsync (weights)", err));
  if (momentum)
    TRY(copy_floats(r, r->v, momentum, r->np, cudaMemcpyHostToDevice,
                    "cudaMemcpyAsync (momentum)", err));
  return WDS_OK;
}

static int cuda_get_grad(tr_rank *r, float *grad, wds__err *err) {
  return copy_floats(r, grad, r->grad, r->np + 2, cudaMemcpyDeviceToHost,
                     "cudaMemcpyAsync (gradient)", err);
}

static tr_backend make_backend(void) {
  tr_backend b;
  memset(&b, 0, sizeof b);
  b.name = "cuda";
  b.device_count = cuda_device_count;
  b.set_device = cuda_set_device;
  b.group_create = cuda_group_create;
  b.group_abort = cuda_group_abort;
  b.group_destroy = cuda_group_destroy;
  b.rank_create = cuda_rank_create;
  b.rank_destroy = cuda_rank_destroy;
  b.upload = cuda_upload;
  b.upload_wait = cuda_upload_wait;
  b.forward_backward = cuda_forward_backward;
  b.allreduce = cuda_allreduce;
  b.take_loss = cuda_take_loss;
  b.sgd_step = cuda_sgd_step;
  b.evaluate = cuda_evaluate;
  b.allreduce_small = cuda_allreduce_small;
  b.gather_u64 = cuda_gather_u64;
  b.barrier = cuda_barrier;
  b.get_state = cuda_get_state;
  b.set_state = cuda_set_state;
  b.get_grad = cuda_get_grad;
  b.take_h2d = cuda_take_h2d;
  b.upload_jpeg = cuda_upload_jpeg;
  return b;
}

/* Initialised before main (the registry's table holds its address). */
extern "C" const tr_backend tr_backend_cuda = make_backend();
