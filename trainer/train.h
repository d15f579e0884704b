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
  const char *train_spec, *eval_spec;
  const char *train_index; /* exact mode: `wds index` JSON, NULL = count */
  const wds_source_config *sources; /* a mix instead of train_spec (NULL) */
  size_t source_count;
  int image_size, channels, classes;
  int hidden[TR_MAX_LAYERS];
  int hidden_count;
  size_t batch_size;              /* per rank */
  const size_t *rank_batch_sizes; /* [procs x ranks], by global rank, or
                                     NULL: every rank batch_size */
  size_t rank_batch_size_count;
  uint64_t epochs, steps;  /* steps > 0 overrides epochs */
  uint64_t stop_after;     /* > 0: stop (and checkpoint) after this step */
  int ranks;               /* local ranks (CPU threads or GPUs) */
  int procs, proc_rank;    /* processes of the job; this one's rank */
  int first_device;        /* CUDA device of local rank 0 */
  const char *master_addr; /* rendezvous: process 0's address */
  int master_port, rdv_timeout_ms, collective_timeout_ms;
  int precision; /* TR_PRECISION_* */
  int workers;
  uint64_t seed;
  wds_mode mode;
  uint64_t samples_per_epoch; /* resampled: per node */
  wds_last_batch last_batch;
  wds_crop crop;
  size_t shuffle_buffer;
  double lr, momentum, weight_decay;
  uint64_t warmup_steps;
  uint64_t checkpoint_every;
  const char *checkpoint_path, *resume_path, *json_path;
  const char *rows_path; /* --log-rows: every step's rows (NULL: none) */
  uint64_t log_every;
  int log_checksums;         /* per-rank weight checksums in every log line */
  const tr_backend *backend; /* tr_backend_find(), tr_backend_auto() */
  FILE *out;                 /* log lines (stdout) */
  int read_timeout_ms;       /* the loaders' read timeout (0: their default) */
  wds_defer_reads defer_reads; /* the loaders' (0: AUTO) */
  int retries;                 /* the loaders' http(s) retries (0: default) */
  int allow_pipe_from_files;   /* --allow-pipe-from-files (wds/spec.h) */
  uint64_t max_window_bytes;   /* the loaders' zstd window limit (0: theirs) */
  const char *cache_dir;       /* the loaders' cache of remote shards (NULL) */
  uint64_t cache_size;         /* its size limit (0: none) */
  uint64_t image_memory_limit; /* the loaders' per-image decode budget
                                 (0: WDS_IMAGE_MEMORY_LIMIT_DEFAULT) */
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

/* Runs the training. WDS_OK; WDS_ERR_CANCELLED when interrupted (e says
 * how far it got and the last checkpoint), and only then; or another
 * negative status with the message in e. */
int tr_run(const tr_options *o, wds__err *e);

#endif
