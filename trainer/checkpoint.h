/* checkpoint.h — trainer checkpoints and the learning-rate schedule
 * (internal).
 *
 * File format (little-endian), version 1:
 *   "WDSTRAIN"  8 bytes magic
 *   u32 version, u32 layers, u32 dims[TR_MAX_LAYERS + 1]
 *   u64 param_count, step, total_steps, loader_epoch, loader_batches,
 *       fingerprint (of the configuration that fixes the data order and the
 *       model), seed
 *   f32 weights[param_count], f32 momentum[param_count]
 *   u64 FNV-1a 64 of every byte before it
 * Written through wds_outfile (wds/writer.h): to PATH.tmp-PID-N (created
 * exclusively, so processes on several hosts sharing the file system never
 * share one), fsync'ed, renamed to PATH, the directory fsync'ed: a crash
 * leaves the old checkpoint or the new one. A PATH that is a device or a
 * FIFO (/dev/null) is written in place, never replaced. */
#ifndef WDS_TRAINER_CHECKPOINT_H
#define WDS_TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/backend.h"

#define TR_CHECKPOINT_VERSION 1

typedef struct tr_checkpoint {
  int layers;
  int dims[TR_MAX_LAYERS + 1];
  size_t param_count;
  uint64_t step, total_steps, loader_epoch, loader_batches;
  uint64_t fingerprint, seed;
  float *weights, *momentum; /* param_count each; owned after load */
} tr_checkpoint;

int tr_checkpoint_save(const char *path, const tr_checkpoint *c, char *err,
                       size_t err_size);
/* Reads and validates (magic, version, sizes, checksum). 0, or -1 with a
 * message naming the file and what is wrong. */
int tr_checkpoint_load(const char *path, tr_checkpoint *c, char *err,
                       size_t err_size);
void tr_checkpoint_free(tr_checkpoint *c);

/* Learning rate of step `step` (0-based) of `total`: linear warm-up from
 * base/warmup to base over the first `warmup` steps, then cosine decay from
 * base towards 0 at step `total`. */
double tr_lr_at(uint64_t step, uint64_t total, uint64_t warmup, double base);

#endif
