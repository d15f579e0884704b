/* wds/loader.h — fixed-shape batches for one data-parallel rank.
 *
 * The loader turns a shard spec into the batches one rank of a data-parallel
 * job trains on:
 *
 *   shard list -> permuted per epoch by (seed, epoch), the same on every rank
 *              -> split by rank (list[rank::world]) -> split by worker thread
 *   worker     -> tar reader -> samples -> shuffle buffer -> decode
 *   collator   -> worker outputs interleaved round-robin in worker order
 *              -> batches in a fixed pool of (pinned) slots -> next()
 *
 * Epoch modes (every rank yields the same number of batches, except plain):
 *
 *   WDS_MODE_RESAMPLED  each worker draws shards with replacement (RNG of
 *                       seed, epoch, rank, worker); an epoch is exactly
 *                       samples_per_epoch samples on each rank.
 *   WDS_MODE_EXACT      every sample of the epoch goes to exactly one rank.
 *                       Per-shard sample counts come from index_path (the
 *                       JSON `wds index` writes) or a first counting pass at
 *                       open. The shards of rank r's list[r::world] are laid
 *                       end to end, rank after rank, and the sequence is cut
 *                       into world equal ranges, as torch's
 *                       DistributedSampler sizes them: ceil(total / world)
 *                       per rank, the last ranks padded by repeating the
 *                       first samples of the sequence; or, with drop_last,
 *                       floor(total / world) per rank and the tail dropped.
 *   WDS_MODE_PLAIN      every rank reads its shards once. Ranks may yield
 *                       different numbers of batches: unsafe for DDP, where
 *                       an all-reduce would wait on a rank that ran dry.
 *
 * Per-rank batch sizes (rank_batch_sizes, exact and resampled modes): each
 * rank takes its own batch size and a share of the epoch in proportion to
 * it, and every rank still takes the same number of steps.
 * Mixing: with sources (wds_source_config) instead of a spec, each source
 * keeps its own shards and index; resampled mode draws each sample's source
 * by weight, exact mode takes a fixed number of samples of each source per
 * epoch (a repeat factor or a proportion), each source split over the ranks
 * as a spec is and interleaved in every worker. Rows record their source.
 *
 * Determinism: the batch sequence is a pure function of the config, seed,
 * epoch, rank, world size and worker count, never of thread timing. The
 * default worker count is a constant (4, or fewer in plain mode when the
 * rank has fewer shards), not the core count, for that reason.
 *
 * Epochs: next() returns WDS_EOF once at the end of each epoch; the call
 * after that starts the next epoch (or the one set by set_epoch()).
 *
 * Resume: wds_loader_position() gives (epoch, batches delivered in it). A
 * loader opened with .epoch and .resume_batches set to those values
 * delivers exactly the batches an uninterrupted run would have delivered
 * next; the samples already delivered are read but not decoded.
 * wds_loader_state() gives the position with what fixes its meaning, and
 * .resume_state resumes at it after checking it: the same configuration
 * continues as above; in exact mode (one source or a mix) another world,
 * batch or per-rank sizes, workers or shuffle buffer is an elastic resume
 * (the new ranks deliver the epoch's samples the old ones had not, each
 * once as a valid row, in equal steps, each source its own remainder; in
 * resampled mode, the count of samples it still owes); anything else is
 * refused, naming both values.
 *
 * Errors: with WDS_ON_ERROR_STOP the first error (unreadable shard, corrupt
 * tar, missing field, failed decode) is returned by next() (its message in
 * wds_last_error()) and ends the loader. With WDS_ON_ERROR_SKIP it is
 * counted, its message logged ("skipped: ...", through log), and reading
 * goes on. A sample that fails to decode or
 * lacks a field keeps its place in the sequence as a zero-filled row marked
 * invalid (batch->valid[i] == 0), so batch counts, shapes and resume stay
 * exact. In exact mode a shard that yields fewer samples than its count
 * (a read error, a stale index) is an error too, and under the skip policy
 * the missing samples become invalid rows for the same reason; a shard with
 * more samples than its count is an error (WDS_ERR_CORRUPT) found at its
 * end.
 *
 * Threads: workers + 1 collator thread per loader; the handle itself is
 * used by one thread at a time, except wds_loader_release() and
 * wds_loader_cancel(), which any thread may call. */
#ifndef WDS_LOADER_H
#define WDS_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "wds/api.h"
#include "wds/decode.h" /* wds_decode, wds_crop, wds_dtype, checks, npy */
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wds_mode {
  WDS_MODE_PLAIN = 0,
  WDS_MODE_EXACT = 1,
  WDS_MODE_RESAMPLED = 2
} wds_mode;

typedef enum wds_last_batch {
  WDS_LAST_KEEP = 0, /* the last batch may be smaller */
  WDS_LAST_DROP = 1, /* a partial last batch is dropped */
  WDS_LAST_PAD = 2,  /* filled to batch_size by repeating its first rows,
                        which are marked invalid */
  WDS_LAST_AUTO = 3  /* not given (WDS_LOADER_CONFIG_INIT's): the open
                        takes DROP with drop_last, else KEEP, as torch's
                        drop_last; a policy given explicitly wins */
} wds_last_batch;

typedef enum wds_error_policy {
  WDS_ON_ERROR_STOP = 0,
  WDS_ON_ERROR_SKIP = 1
} wds_error_policy;

/* wds_loader_config.defer_reads */
typedef enum wds_defer_reads {
  WDS_DEFER_AUTO = 0, /* fields whose pages are all in the page cache */
  WDS_DEFER_ON = 1,   /* from every local uncompressed shard */
  WDS_DEFER_OFF = 2   /* never: every field is read in the stream */
} wds_defer_reads;

/* wds_loader_config.jpeg_decode */
typedef enum wds_jpeg_decode {
  WDS_JPEG_DECODE_CPU = 0,
  WDS_JPEG_DECODE_GPU = 1
} wds_jpeg_decode;

/* The most worker threads a loader runs (wds_loader_config.workers). */
#define WDS_LOADER_MAX_WORKERS 256

/* One output field. */
typedef struct wds_field_spec {
  const char *name;  /* extensions, ';'-separated; the first one a sample
                        has is used: "jpg;png". Matched lower-case; "jpg"
                        also matches "jpeg" and "jpeg" "jpg", after the
                        names listed. */
  wds_decode decode; /* WDS_DECODE_AUTO by default */
  int channels;      /* images: 3 = RGB (0 means 3), 1 = L */
  int width, height; /* images: output size; 0 = the loader's image_size */
} wds_field_spec;

/* Parses "jpg;png:rgb:224,cls,npy:npy,txt:bytes" into specs: comma-separated
 * fields, each NAME[:OPTION]... with options rgb, l (gray), WxH or N (image
 * size), image, npy, int, bytes (decoder). Names point into *storage
 * (release with free()). Returns WDS_OK or WDS_ERR_INVALID with a message in
 * wds_last_error(). */
WDS_API int wds_field_specs_parse(const char *text, wds_field_spec **specs,
                                  size_t *count, char **storage);

/* Memory for batch slots. alloc returns size_bytes bytes aligned to at
 * least 64, or NULL. */
typedef struct wds_allocator {
  void *(*alloc)(void *ctx, size_t size_bytes);
  void (*free)(void *ctx, void *ptr, size_t size_bytes);
  void *ctx;
  const char *name; /* reported by wds_loader_allocator_name() */
} wds_allocator;

/* One source of a mixed data set (wds_loader_config.sources): a shard spec
 * with its own index and how much of it an epoch takes. At most one of
 * weight, proportion and repeat is set (0 = unset; none: weight 1 in
 * resampled mode, repeat 1 in exact mode).
 *
 *   resampled mode: each sample comes from source s with probability
 *     w_s / sum(w), w_s its weight (or its proportion); repeat is refused.
 *   exact mode: source s gives n_s samples per epoch, each once over all
 *     ranks: repeat R: round(R * T_s), T_s its sample count (2: every
 *     sample twice; 0.5: half of them); proportion P: round(P * E), E the
 *     sum of every source's T (the epoch as if each source were read
 *     once); weight is refused. A partial pass (the fraction of R, or
 *     n_s mod T_s samples) takes, in epoch e, the n_s mod T_s samples of
 *     the source's natural order (shards in spec order, samples in archive
 *     order) that follow position (e * (n_s mod T_s)) mod T_s, wrapping:
 *     consecutive epochs take consecutive windows, so every sample is seen
 *     within ceil(T_s / (n_s mod T_s)) epochs.
 *   plain mode: one source only. */
typedef struct wds_source_config {
  const char *spec;       /* the source's shards (wds/spec.h) */
  const char *index_path; /* exact mode: its per-shard counts; NULL = count */
  double weight;
  double proportion;
  double repeat;
} wds_source_config;

typedef struct wds_loader_config {
  /* Input: a shard spec (wds/spec.h), or urls/url_count when spec is NULL,
   * or sources/source_count when both are NULL (a mix; see
   * wds_source_config). One source of default weight is exactly its spec
   * given alone. Each batch row records its source (wds_batch.sources). */
  const char *spec;
  const char *const *urls;
  size_t url_count;
  const char *index_path;    /* exact mode: per-shard counts; NULL = count */
  int allow_pipe_from_files; /* pipe: commands read from an @FILE of spec
                                or named by index_path are refused (naming
                                the file) unless this is 1: such files may
                                come from anywhere (wds/spec.h) */
  const wds_source_config *sources;
  size_t source_count;

  /* Topology. -1: from RANK/WORLD_SIZE, else SLURM_PROCID/SLURM_NTASKS,
   * else OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, else PMI_RANK/PMI_SIZE,
   * else 0/1 (the rule wds-train reads too). A partial set (RANK without
   * WORLD_SIZE, LOCAL_RANK alone, PMI_RANK without PMI_SIZE, PMIX_RANK
   * above 0 with no size) or a value that is not an integer in range fails
   * wds_loader_open, naming the variable. */
  int rank;
  int world_size;
  int workers; /* worker threads, 1 .. WDS_LOADER_MAX_WORKERS; 0 (a
                  zeroed config) = 4 (plain mode: at most the rank's shard
                  count). The CLI's --workers and Python's workers= take
                  1 .. WDS_LOADER_MAX_WORKERS */

  /* Order. */
  uint64_t seed;
  uint64_t epoch;          /* first epoch (or the epoch to resume in) */
  uint64_t resume_batches; /* batches of `epoch` already delivered */
  wds_mode mode;
  int shard_shuffle;          /* permute shards per epoch (default 1) */
  size_t shuffle_buffer;      /* samples per worker; 0/1 = no shuffle */
  size_t shuffle_initial;     /* fill before the first output; 0 = the
                                 whole buffer. WebDataset's `initial`. */
  uint64_t samples_per_epoch; /* per rank: required in resampled mode, a
                                 cap in plain mode, unused in exact mode */
  int drop_last;              /* exact mode: drop the tail (else pad);
                                 every mode: last_batch AUTO is DROP */

  /* Batches. */
  size_t batch_size; /* default 1 */
  /* Per-rank batch sizes (mixed GPUs in one job): rank_batch_sizes[r] is
   * rank r's batch size; the count must equal world_size, each entry 1 ..
   * 2^24; this rank's batches have rank_batch_sizes[rank] rows (batch_size
   * must then be 1, the default, or that same value). Exact mode splits
   * the epoch in proportion: every rank takes the same number of steps
   * S = ceil(total / sum) (floor with drop_last), rank r the S * B_r
   * samples after those of ranks 0..r-1, the padding repeating the first
   * samples (less than the sum). Resampled mode: samples_per_epoch is the
   * mean per rank, S = ceil(samples_per_epoch * world / sum) and rank r
   * draws S * B_r. Either way no batch is partial, so last_batch changes
   * nothing. Plain mode refuses them (a rank's sample count is not known
   * in advance). count 0: every rank uses batch_size, as before. */
  const size_t *rank_batch_sizes;
  size_t rank_batch_size_count;
  wds_last_batch last_batch;
  const wds_field_spec *fields; /* required: the arrays of a batch */
  size_t field_count;
  int image_size; /* default image width and height (224) */
  wds_crop crop;
  double crop_scale_min, crop_scale_max; /* random crop area (0.08, 1) */
  size_t prefetch_batches;               /* slots in the pool; 0 = 4 */
  /* Image augmentation, torchvision's (v2) definitions, every draw from
   * the image's own key (a pure function of seed, epoch, rank, worker and
   * the sample's place in the worker's stream, as the crop's):
   *   crop_ratio_min/max  WDS_CROP_RANDOM's aspect-ratio range (w / h,
   *                       log-uniform; RandomResizedCrop's ratio; 3/4, 4/3)
   *   flip_prob           WDS_CROP_RANDOM's horizontal flip (0.5)
   *   brightness, contrast, saturation, hue
   *                       ColorJitter's (min, max) ranges: factors uniform
   *                       in [min, max] (0 <= min <= max), the hue shift in
   *                       [min, max] (-0.5 <= min <= max <= 0.5), applied
   *                       in a random order on the resized uint8 pixels.
   *                       The options' single number v is torchvision's
   *                       too: [max(0, 1 - v), 1 + v], hue [-v, v]. (1, 1),
   *                       hue (0, 0) (the defaults): off
   *   image_dtype         WDS_IMAGE_UINT8 (HWC bytes, the default), or
   *                       FLOAT32 / FLOAT16: CHW rows of
   *                       (x / 255 - normalize_mean[c]) / normalize_std[c]
   *   normalize_mean/std  per channel (an L field uses [0]); (0, 1): x / 255.
   *                       Set only with a float image_dtype.
   * Not with jpeg_decode GPU (but the crop ratio and flip). */
  double crop_ratio_min, crop_ratio_max;
  double flip_prob;
  double brightness[2], contrast[2], saturation[2], hue[2];
  wds_image_dtype image_dtype;
  double normalize_mean[3], normalize_std[3];
  int eager_next_epoch; /* 1: read the next epoch early: each worker's
                           successor starts as the worker ends, while this
                           epoch's last batches are delivered (not in
                           plain mode with samples_per_epoch: there at
                           WDS_EOF), and its batches are made from WDS_EOF
                           on (its shuffle buffer fills while the caller
                           evaluates or checkpoints) instead of at the
                           next call; set_epoch() of another epoch or
                           close() stop it. The batches are the same
                           either way. */

  /* Errors and limits. */
  wds_error_policy on_error;
  size_t max_sample_bytes; /* per sample, as in wds_reader_config */
  size_t read_buffer_bytes;
  int read_timeout_ms;         /* as in wds_reader_config: 0 = 5 minutes */
  uint64_t max_window_bytes;   /* as in wds_reader_config: 0 = 128 MiB */
  int retries;                 /* as in wds_reader_config: 0 = 5, < 0 none */
  const char *cache_dir;       /* as in wds_reader_config: the local cache
                                  of remote shards; NULL = none. A failure
                                  to write it is logged once (log). */
  uint64_t cache_size;         /* as in wds_reader_config: 0 = no limit */
  size_t shuffle_buffer_bytes; /* per worker: the shuffle buffer holds at
                                  most this many bytes of sample data (as
                                  well as at most shuffle_buffer samples);
                                  0 = 1 GiB. A sample larger than this
                                  passes through alone. */
  /* As in wds_reader_config: how much of a zstd frame or gzip member is
     held until its check passes; 0 = 64 MiB. */
  uint64_t max_unverified_bytes;

  wds_allocator allocator; /* alloc == NULL: pinned when built with CUDA
                              and a GPU is present, else aligned host */
  void (*log)(void *ctx, const char *message); /* NULL: silent. Called
                     from the loader's threads, one call at a time. */
  void *log_ctx;
  /* Large fields (16 KiB and more) of a shard that is a local file read
   * without compression can stay in the file while their sample waits in
   * the shuffle buffer (only offset and size held), and are read (pread)
   * when it leaves: AUTO (the default) from shards with pages in the page
   * cache when opened, each field deferred only when all its pages were
   * cached then (judged per MiB of the file by its first and last pages); ON
   * every such field; OFF never. The batches are the same either way; a file
   * whose size or mtime changed (it shrank, or was written in place, even
   * with the same size; a touch too) before or while a deferred field is
   * read is an error (on_error) naming it (a shard cache entry's mtime,
   * which marks use, is not compared: entries never change in place). Held
   * descriptors: at most 32 per worker and a quarter of the soft RLIMIT_NOFILE
   * per process; past that a shard is read in the stream. */
  wds_defer_reads defer_reads;
  /* The memory one image's decode may take, in bytes (per worker: a worker
   * decodes one image at a time); 0 = WDS_IMAGE_MEMORY_LIMIT_DEFAULT, 256
   * MiB (wds/decode.h says what it counts: the decoded pixels at the DCT
   * scale the output needs, a progressive JPEG's buffered coefficients).
   * Checked from the image's headers before its decode allocates: an
   * image over it is an error (WDS_ERR_LIMIT, under on_error) naming the
   * shard, sample, field, the image's size, what it needs and the
   * limit. */
  uint64_t image_memory_limit;
  /* Where JPEG image fields are decoded. CPU (the default): by the workers,
   * as above. GPU: each image field that takes jpg/jpeg becomes a bytes
   * field of planned rows: the workers read, shuffle and group as always,
   * make each JPEG's crop plan (center, or random crop and flip from the
   * same key, so the same crop) from its header and put the plan and the
   * JPEG's bytes into the slot; a non-JPEG image (PNG) is decoded on the
   * CPU into its row. Batch composition, order, modes, padding, mixing and
   * resume are those of the CPU path. wds_gpu_jpeg_decode (wds/gpu_jpeg.h)
   * decodes such a field into a device array (NHWC uint8, the CPU path's
   * shape); the rows are meant for it only. */
  wds_jpeg_decode jpeg_decode;
  /* NULL, or a check the caller's thread calls about every 100 ms while it
   * has waited 100 ms or more in wds_loader_open() (an s3:// listing, exact
   * mode's counting pass, the read that checks a shard an index gives 0
   * samples) or wds_loader_next() (a stalled source), and never from the
   * loader's own threads. Nonzero ends the wait with WDS_ERR_CANCELLED
   * ("interrupted"): open fails (its counting readers are stopped); next()
   * returns without a batch and the loader stays as it was (the next call
   * waits for the same batch; close() stops a stalled read at once). For
   * callers that must notice a signal while a call blocks: the Python
   * binding's KeyboardInterrupt. */
  int (*interrupt)(void *ctx);
  void *interrupt_ctx;
  /* NULL, or a saved position (the text wds_loader_state gave, on any rank
   * of the job that saved it): the loader resumes there, instead of at
   * epoch and resume_batches, after checking that everything that fixes
   * which samples the delivered batches held is as it was (mode, seed,
   * world_size, workers, batch_size or rank_batch_sizes, last_batch,
   * drop_last, shard_shuffle, the shuffle buffer's settings,
   * samples_per_epoch, the shards and their counts). One that differs
   * fails wds_loader_open (WDS_ERR_INVALID) naming both values; a text
   * that is not a state, of another version or corrupted fails it too
   * (WDS_ERR_FORMAT, WDS_ERR_CORRUPT). The text is read during the open
   * only. */
  const char *resume_state;
} wds_loader_config;

/* clang-format off */
#define WDS_LOADER_CONFIG_INIT                                                 \
  {                                                                            \
    .rank = -1, .world_size = -1, .shard_shuffle = 1, .batch_size = 1,         \
    .last_batch = WDS_LAST_AUTO,                                               \
    .image_size = 224, .crop_scale_min = 0.08, .crop_scale_max = 1.0,          \
    .crop_ratio_min = 3.0 / 4.0, .crop_ratio_max = 4.0 / 3.0,                  \
    .flip_prob = 0.5, .brightness = {1, 1}, .contrast = {1, 1},                \
    .saturation = {1, 1}, .normalize_std = {1, 1, 1}                           \
  }
/* clang-format on */

/* ---- Options by name --------------------------------------------------
 * The options a front end sets (the CLI's flags, the Python keywords) are
 * one table, a row per option: its name (the Python keyword: the field's
 * name, but `index` for index_path and `prefetch` for prefetch_batches),
 * its CLI flag, its type and bounds, where it lives in wds_loader_config
 * and its help. Not rows (set directly): spec, urls, sources, fields,
 * rank_batch_sizes, the callbacks and read_buffer_bytes.
 *
 *   wds_loader_config cfg = WDS_LOADER_CONFIG_INIT;
 *   if (wds_loader_config_set(&cfg, "batch_size", "32") != WDS_OK ||
 *       wds_loader_config_set(&cfg, "--read-timeout", "2.5") != WDS_OK)
 *     puts(wds_last_error());  // "batch_size needs a whole number ..."
 */
typedef enum wds_option_type {
  WDS_OPTION_BOOL = 0,    /* "1" or "0" ("true", "false"); a CLI flag
                             takes no value and sets cli_value */
  WDS_OPTION_INT = 1,     /* decimal digits, in min..max */
  WDS_OPTION_SIZE = 2,    /* bytes with an optional K, M, G, T (powers of
                             1024) or KB, MB, GB, TB (of 1000), min..max */
  WDS_OPTION_TIMEOUT = 3, /* by name: whole milliseconds; by flag: seconds
                             (a fraction allowed); 0 = wait forever (the
                             field gets -1), at most max milliseconds */
  WDS_OPTION_ENUM = 4,    /* one of names: names[i] stores i */
  WDS_OPTION_STRING = 5,  /* not empty; the field points to the value,
                             which must outlive the config's use */
  WDS_OPTION_FLOATS = 6   /* count decimal numbers, comma-separated, each
                             in [lo, hi] ((lo, hi] with lo_open), into
                             count consecutive doubles from the field; with
                             count_one a single number fills all count (or,
                             centered, gives a range around center) */
} wds_option_type;

typedef struct wds_loader_option {
  const char *name;       /* "batch_size": the Python keyword */
  const char *flag;       /* "batch-size": the CLI's --batch-size */
  const char *value_name; /* the value in --help ("N", "SIZE"); NULL for
                             BOOL */
  wds_option_type type;
  uint64_t min, max;        /* INT, SIZE, TIMEOUT (milliseconds) */
  const char *const *names; /* ENUM: NULL-terminated */
  const char *cli_value;    /* BOOL: what the CLI flag sets ("1"; "0" for
                               --no-shard-shuffle) */
  int zero_is_none;         /* INT: 0 stores -1 (retries: none, while the
                               field's 0 is the default) */
  size_t offset, size;      /* the field in wds_loader_config */
  const char *expects;      /* what the error says it needs; NULL: from
                               the type and bounds */
  const char *help;         /* lines of at most 55 columns, '\n' between */
  int count, count_one;     /* FLOATS: how many numbers; one fills all */
  double lo, hi;            /* FLOATS: each number's bounds */
  int lo_open;              /* FLOATS: lo itself is refused */
  int centered;             /* FLOATS of 2 with count_one: one number v
                               means (max(lo, center - v), center + v),
                               v >= 0 (ColorJitter's single form) */
  double center;
} wds_loader_option;

/* Row i of the table (0, 1, ...); NULL past the last. Static. */
WDS_API const wds_loader_option *wds_loader_option_at(size_t i);

/* The row named name (its Python keyword), or "--FLAG" (its CLI flag);
 * NULL if none. */
WDS_API const wds_loader_option *wds_loader_option_find(const char *name);

/* Parses value by the row that name names (as wds_loader_option_find)
 * into its field of cfg; a flag's value takes the CLI's grammar (seconds
 * for a TIMEOUT), and a BOOL row named by its flag takes no value (NULL)
 * and sets what the flag sets (cli_value: "--no-shard-shuffle" sets
 * shard_shuffle to 0); a value there is refused. Returns WDS_OK, or
 * WDS_ERR_INVALID leaving cfg as it was, and wds_last_error() says why, naming
 * the option as name does:
 * `--workers needs a whole number in 1..256, not "0"`. */
WDS_API int wds_loader_config_set(wds_loader_config *cfg, const char *name,
                                  const char *value);

/* How wds_loader_config_check names the options in its message: as the
 * Python keywords and C fields (`samples_per_epoch`, `mode="exact"`) or as
 * the CLI's flags (`--samples-per-epoch`, `--mode exact`). */
typedef enum wds_option_naming {
  WDS_OPTION_NAMES_KEYWORD = 0,
  WDS_OPTION_NAMES_FLAG = 1
} wds_option_naming;

/* The rules between options, for a whole config: resampled mode needs
 * samples_per_epoch and exact mode takes none; an index only in exact mode,
 * and not beside sources (each source has its own); rank_batch_sizes not in
 * plain mode and one per rank of a given world_size; rank below world_size;
 * shuffle_initial at most shuffle_buffer. Returns WDS_OK, or
 * WDS_ERR_INVALID with wds_last_error() naming the options at fault as
 * naming says: "--shuffle-initial 9 is larger than --shuffle-buffer 4".
 * wds_loader_open() runs it too (keyword names); a front end runs it first
 * to name its own spellings. */
WDS_API int wds_loader_config_check(const wds_loader_config *cfg,
                                    wds_option_naming naming);

/* The rank and world size wds_loader_open() takes from the environment when
 * the config gives none (rank and world_size -1): torchrun's RANK and
 * WORLD_SIZE, else Slurm's SLURM_PROCID/SLURM_NTASKS, Open MPI's
 * OMPI_COMM_WORLD_RANK/_SIZE or PMI_RANK/PMI_SIZE, else rank 0 of 1; the
 * same rule wds-train reads. Returns WDS_OK, or WDS_ERR_INVALID with
 * wds_last_error() naming the variable of a partial or bad set (rank 0 of
 * 1 then). Either pointer may be NULL. */
WDS_API int wds_env_topology(int *rank, int *world_size);

/* One array of a batch. Row i of a fixed-size field starts at
 * data + i * row_bytes; a BYTES field's row i is data[offsets[i] ..
 * offsets[i+1]). */
typedef struct wds_batch_field {
  const char *name; /* the extension each sample used is not recorded;
                       this is the spec's name, e.g. "jpg;png" */
  wds_dtype dtype;
  int ndim;                /* including the batch dimension */
  int64_t shape[8];        /* shape[0] = rows */
  void *data;              /* in the slot's (pinned) memory */
  size_t size_bytes;       /* of data in use */
  size_t row_bytes;        /* 0 for BYTES */
  const uint64_t *offsets; /* BYTES only: rows + 1 entries */
} wds_batch_field;

typedef struct wds_batch {
  uint64_t epoch;
  uint64_t index; /* batch number within the epoch, from 0 */
  size_t rows;
  const char *const *keys; /* per row */
  const char *const *urls; /* per row: the shard it came from */
  const uint8_t *valid;    /* per row: 1, or 0 for a fill row */
  size_t field_count;
  const wds_batch_field *fields;
  int slot; /* the pool slot, for callers tracking their copies */
  const uint32_t *sources; /* per row: the index of its source in
                              wds_loader_config.sources (0 without) */
} wds_batch;

typedef struct wds_loader wds_loader;

/* Validates cfg, expands the spec, (exact mode) loads or counts shard sizes,
 * allocates the batch pool. On failure *out is NULL and wds_last_error()
 * says why. */
WDS_API int wds_loader_open(const wds_loader_config *cfg, wds_loader **out);

/* Next batch, borrowed until wds_loader_release(). Blocks while the batch is
 * prepared. Returns WDS_OK, WDS_EOF at the end of an epoch (the next call
 * starts the next one), or a negative status (wds_last_error() says what
 * and where: shard, sample, field, offset, also for errors the worker
 * threads found; after one, every later call returns it again and sets the
 * text again). WDS_ERR_INVALID if every slot is held by the caller. */
WDS_API int wds_loader_next(wds_loader *l, const wds_batch **out);

/* Gives a batch's slot back to the pool. Unlike the other calls, it may be
 * made from any thread, also while another thread is in wds_loader_next()
 * (a consumer handing batches to other threads, the Python binding's
 * garbage collector); not after wds_loader_close(). */
WDS_API void wds_loader_release(wds_loader *l, const wds_batch *b);

/* A consumer that copies a batch asynchronously (cudaMemcpyAsync from the
 * pinned slot, any DMA) must not give the slot back before the copy has read
 * it: a worker would refill it under the copy. A fence says when the reads
 * are over:
 *   done(ctx)  nonzero once nothing reads the slot any more; must not block
 *              (cudaEventQuery(ev) != cudaErrorNotReady);
 *   wait(ctx)  optional: blocks until done() would return nonzero
 *              (cudaEventSynchronize);
 *   drop(ctx)  optional: called once, after the slot went back to the pool
 *              or at close (cudaEventDestroy, freeing ctx).
 * The callbacks run in the thread that calls wds_loader_next(),
 * wds_loader_release_after() or wds_loader_close(), never two at once, and
 * must not call the loader. wds/cuda.h builds a fence from a CUDA event. */
typedef struct wds_release_fence {
  int (*done)(void *ctx);
  void (*wait)(void *ctx);
  void (*drop)(void *ctx);
  void *ctx;
} wds_release_fence;

/* Gives b back like wds_loader_release(), but its slot rejoins the pool only
 * once fence->done() says its reads are over: b must not be used after the
 * call. The loader polls its fences in next() (while it waits for a slot a
 * worker needs, it calls the oldest fence's wait() when there is one, else
 * polls every millisecond) and waits for every fence in close(). A slot
 * behind a fence is not "held by the caller": next() does not report
 * WDS_ERR_INVALID while a fence can still free one. Returns WDS_OK, or
 * WDS_ERR_INVALID (b not a held batch of l, or fence->done NULL: nothing is
 * done, drop() is not called). */
WDS_API int wds_loader_release_after(wds_loader *l, const wds_batch *b,
                                     const wds_release_fence *fence);

/* Abandons the current epoch; the next call to next() starts `epoch`.
 * Batches the caller holds stay valid until released. */
WDS_API int wds_loader_set_epoch(wds_loader *l, uint64_t epoch);

/* Position for resume: the epoch of the next batch and how many batches of
 * it were delivered. After the last batch of epoch e: (e, n); after the
 * WDS_EOF that ends it: (e + 1, 0). */
WDS_API void wds_loader_position(const wds_loader *l, uint64_t *epoch,
                                 uint64_t *batches);

/* The position as a saved state (the text wds_loader_config.resume_state
 * takes): the position of wds_loader_position and the configuration that
 * gives it meaning, versioned and checksummed (a few hundred bytes of
 * text, one "key=value" a line). *text is malloc'd: release it with
 * free(). Every rank of a job gives the same text but for its rank line,
 * and any of them resumes any rank. Returns WDS_OK, or WDS_ERR_NOMEM
 * (*text NULL). */
WDS_API int wds_loader_state(const wds_loader *l, char **text);
/* The same for another position of this loader's configuration: (epoch,
 * batches delivered in it), e.g. one batch back when a batch fetched ahead
 * was not used (wds-train's checkpoints). The caller vouches for it. */
WDS_API int wds_loader_state_at(const wds_loader *l, uint64_t epoch,
                                uint64_t batches, char **text);

/* Batches in an epoch for this rank; 0 in plain mode (not known). While
 * the rest of an elastic resume's epoch is read (resume_state), its
 * batches on this rank. */
WDS_API uint64_t wds_loader_epoch_batches(const wds_loader *l);

/* Whether the epoch being read is the rest of an elastic resume's (a state
 * of another world, other batch or per-rank sizes, workers or shuffle
 * settings, exact mode: resume_state): then 1, with the world it was saved
 * on and the samples of the epoch its ranks had not delivered (which the
 * new ranks deliver between them) and the batches of a whole epoch on
 * this rank (wds_loader_epoch_batches() gives the remainder's then); else
 * 0 (and 0, 0, the whole epoch's). Pointers may be NULL. */
WDS_API int wds_loader_elastic(const wds_loader *l, int *old_world,
                               uint64_t *samples_left,
                               uint64_t *full_epoch_batches);

typedef struct wds_loader_stats {
  uint64_t batches, samples; /* delivered */
  uint64_t skipped;          /* errors under WDS_ON_ERROR_SKIP */
  uint64_t fill_rows;        /* invalid rows: failures, padding */
  uint64_t shards_opened;
  uint64_t bytes_read; /* field bytes read from shards */
  /* Time in each stage, summed over threads (nanoseconds). */
  uint64_t read_ns;      /* tar reading and grouping into samples (one pass
                            of the reader; workers) */
  uint64_t shuffle_ns;   /* copying into and out of the shuffle buffer */
  uint64_t decode_ns;    /* decoding and resizing (workers) */
  uint64_t batch_ns;     /* collating into slots (collator) */
  uint64_t wait_ns;      /* the caller blocked in next(): waiting on data */
  uint64_t slot_wait_ns; /* the collator blocked for a free slot: the
                            pipeline waiting on the consumer */
  uint64_t peak_pool_bytes;
  /* cache_dir: shards read from it, written to it, and failures to use or
     write it (those shards were read without the cache). */
  uint64_t cache_hits, cache_stored, cache_errors;
  /* defer_reads: fields read with pread as their sample left the shuffle
     buffer, and their bytes (also in bytes_read). */
  uint64_t deferred_fields, deferred_bytes;
  /* Samples of compressed shards delivered unchecked: before the check of
     the zstd frame or gzip member they lie in came (the frame was larger
     than max_unverified_bytes: shards written as one large frame by other
     tools), or from zstd frames without a checksum; docs/loader.md. */
  uint64_t unverified_samples;
} wds_loader_stats;

WDS_API void wds_loader_stats_get(const wds_loader *l, wds_loader_stats *out);
WDS_API const char *wds_loader_allocator_name(const wds_loader *l);

/* Makes a next() blocked on data, and every later one, return
 * WDS_ERR_CANCELLED promptly: workers blocked in a read wake at once.
 * Thread-safe and async-signal-safe (a signal handler may call it while
 * another thread is in next()). The loader must still be closed. */
WDS_API void wds_loader_cancel(wds_loader *l);

/* Stops the threads and frees everything; returns promptly even while a
 * worker is blocked in a read. Batches still held become invalid. NULL is
 * a no-op. */
WDS_API void wds_loader_close(wds_loader *l);

/* Rank and world size from the environment, as the loader reads them
 * (see wds_loader_config.rank); 0 and 1 for an environment the loader
 * refuses. */
WDS_API void wds_env_rank_world(int *rank, int *world_size);

#ifdef __cplusplus
}
#endif
#endif /* WDS_LOADER_H */
