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
 * Version 2 (written only by runs with --rank-batch-sizes; version 1
 * otherwise, byte for byte as before) adds, after the momentum:
 *   u32 rank_sizes_count, u32 rank_sizes[rank_sizes_count]
 * Version 3 (written by runs whose loader gave its saved state: every run
 * of this build) has, after the momentum:
 *   u32 rank_sizes_count, u32 rank_sizes[rank_sizes_count] (count 0: none),
 *   u32 world (the job's ranks), u64 elastic_fingerprint (the configuration
 *   without what an elastic resume may change: ranks, processes, batch and
 *   per-rank sizes, workers, shuffle buffer, last batch), u32 state_len,
 *   the training loader's saved state (wds_loader_state, state_len bytes
 *   of text, no NUL)
 * Written through wds_outfile (wds/outfile.h): to PATH.tmp-PID-N (created
 * exclusively, so processes on several hosts sharing the file system never
 * share one), fsync'ed, renamed to PATH, the directory fsync'ed: a crash
 * leaves the old checkpoint or the new one. A PATH that is a device or a
 * FIFO (/dev/null) is written in place, never replaced. */
#ifndef WDS_TRAINER_CHECKPOINT_H
#define WDS_TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "trainer/model.h"

#define TR_CHECKPOINT_VERSION 3 /* the newest this build reads */
/* A version 2 file holds at most this many per-rank batch sizes (a
 * larger file is refused before it is read). */
#define TR_CHECKPOINT_MAX_RANK_SIZES (1 << 20)
/* A version 3 file's loader state is at most this many bytes. */
#define TR_CHECKPOINT_MAX_STATE (16 << 20)

typedef struct tr_checkpoint {
  int layers;
  int dims[TR_MAX_LAYERS + 1];
  size_t param_count;
  uint64_t step, total_steps, loader_epoch, loader_batches;
  uint64_t fingerprint, seed;
  float *weights, *momentum; /* param_count each; owned after load */
  uint32_t *rank_sizes;      /* per-rank batch sizes (--rank-batch-sizes),
                                freed by tr_checkpoint_free; NULL when none */
  size_t rank_sizes_count;
  /* Version 3: the job's ranks, the elastic fingerprint and the loader's
   * saved state (owned after load; NULL: none, a version 1 or 2 file). */
  uint32_t world;
  uint64_t elastic_fingerprint;
  char *loader_state;
} tr_checkpoint;

/* WDS_OK, or WDS_ERR_IO (WDS_ERR_NOMEM) with the message in e. */
int tr_checkpoint_save(const char *path, const tr_checkpoint *c, wds__err *e);
/* Reads and validates (magic, version, sizes, checksum): the header is
 * read and checked first, and the rest only when the file's size is the
 * one its header gives (bounded), so a large file that is not a
 * checkpoint costs one header read. WDS_OK, or a
 * negative status with a message naming the file and what is wrong:
 * WDS_ERR_OPEN (cannot open it), WDS_ERR_IO (not a regular file, a failed
 * read), WDS_ERR_TRUNCATED (too short, or a size that does not match its
 * header), WDS_ERR_FORMAT (another version), WDS_ERR_CORRUPT (bad magic,
 * sizes or checksum), WDS_ERR_NOMEM. On failure c holds nothing. */
int tr_checkpoint_load(const char *path, tr_checkpoint *c, wds__err *e);
void tr_checkpoint_free(tr_checkpoint *c);

/* Learning rate of step `step` (0-based) of `total`: linear warm-up from
 * base/warmup to base over the first `warmup` steps, then cosine decay from
 * base towards 0 at step `total`. */
double tr_lr_at(uint64_t step, uint64_t total, uint64_t warmup, double base);

/* FNV-1a 64 of bytes, continuing from h (start with TR_FNV_INIT): the
 * checkpoint's checksum, the weight checksums in the logs, the
 * configuration's fingerprint. */
#define TR_FNV_INIT 0xcbf29ce484222325ULL
uint64_t tr_fnv1a(uint64_t h, const void *data, size_t size);

#endif
