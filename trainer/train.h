/* train.h — the training loop of wds-train, backend-neutral (internal).
 *
 * One loader per process (rank = process rank, world = process count:
 * one process per node, or one per GPU under torchrun), one thread per
 * local rank; global rank = process rank x local ranks + local rank. Each
 * loader batch holds ranks x batch_size rows; rank r trains on rows [r*B,
 * (r+1)*B). So every rank takes exactly one step per loader batch, and a
 * partial last batch
 * (--last-batch keep) only leaves some ranks fewer (or no) valid rows: the
 * gradient is the mean over the valid rows of all ranks, computed by summing
 * gradients, losses and counts in one all-reduce.
 *
 * Per-rank batch sizes (rank_batch_sizes, one per global rank): local rank
 * r takes B_r rows, after those of the process's ranks before it; the
 * process's loader has rank_batch_sizes = each process's sum, so every
 * process (and rank) takes the same number of steps. The same all-reduce
 * of sums and counts makes a step the mean over the union of the ranks'
 * rows, whatever their sizes. */
#ifndef WDS_TRAINER_TRAIN_H
#define WDS_TRAINER_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "trainer/backend.h"
#include "wds/loader.h"

typedef struct tr_options {
  /* The training loader's options as given: --train (spec), --index
   * (index_path), --source (sources), --seed (also the weights'), and the
   * rows: batch_size per rank, rank_batch_sizes one per global rank
   * ([procs x ranks]; NULL: every rank batch_size). Filled by the command
   * line's shared loader options (tools/loader_opts.c) over wds-train's
   * defaults (tr_options_init). train.c derives each loader's configuration
   * from it, setting only what the trainer decides: the rows of a loader
   * batch (the process's ranks' rows; per process with rank_batch_sizes),
   * the fields, rank and world (processes), the epoch overlap and the
   * resume position. The evaluation loader reads eval_spec in plain mode,
   * decoding on the CPU (jpeg_decode GPU: the training loader's JPEGs are
   * decoded on each rank's GPU, by a backend with upload_jpeg). */
  wds_loader_config loader;
  const char *eval_spec;
  int channels, classes;
  int hidden[TR_MAX_LAYERS];
  int hidden_count;
  uint64_t epochs, steps; /* steps > 0 overrides epochs */
  uint64_t stop_after;    /* > 0: stop (and checkpoint) after this step */
  int ranks;              /* local ranks (CPU threads or GPUs) */
  int procs, proc_rank;   /* processes of the job; this one's rank */
  int mpi;                /* the processes meet through MPI (mpirun, srun) */
  int first_device;       /* CUDA device of local rank 0 */
  int init_timeout_ms;    /* CUDA: the wait for every process (300 s) */
  int collective_timeout_ms;
  int precision; /* TR_PRECISION_* */
  double lr, momentum, weight_decay;
  uint64_t warmup_steps;
  uint64_t checkpoint_every;
  const char *checkpoint_path, *resume_path, *json_path;
  const char *rows_path; /* --log-rows: every step's rows (NULL: none) */
  uint64_t log_every;
  int log_checksums;         /* per-rank weight checksums in every log line */
  const tr_backend *backend; /* tr_backend_find(), tr_backend_auto() */
  FILE *out;                 /* log lines (stdout) */
  /* Non-zero when the run must stop (a signal): rank 0 checks it before
   * each step; the caller also cancels the loaders so that a blocked read
   * wakes. NULL: never. */
  int (*interrupted)(void);
  /* Told of each loader once it is open (slot 0 train, 1 eval) and before
   * it is closed (NULL), so that a signal handler can cancel it. NULL: no
   * one is told. */
  void (*watch_loader)(int slot, wds_loader *l);
} tr_options;

void tr_options_init(tr_options *o);

/* The fingerprint of what fixes the data order and the model (specs,
 * indexes, sources, seed, mode, batch and rank layout, image options,
 * optimizer settings, backend, layer sizes): a checkpoint resumes only
 * under the same one, and every rank of a job must have it. Specs of any
 * length count whole. */
uint64_t tr_config_fingerprint(const tr_options *o, const tr_model_config *m);

/* Runs the training. WDS_OK; WDS_ERR_CANCELLED when interrupted (e says
 * how far it got and the last checkpoint), and only then; or another
 * negative status with the message in e. */
int tr_run(const tr_options *o, wds__err *e);

#endif
