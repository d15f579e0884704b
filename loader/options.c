/* options.c — the loader's options as one table (wds_loader_option, in
 * wds/loader.h): one row per option a front end sets by name, saying where
 * the value lives in wds_loader_config, its type and bounds, its CLI flag
 * and its help. wds_loader_config_set parses a value by its row; the CLI
 * (tools/loader_opts.c: getopt entries, parsing, --help) and the Python
 * binding (python/wds/_options.c: keyword conversion) are both built from
 * the table, so a new loader option is one row here.
 *
 * A row is named by its Python keyword, which is the config field's name
 * but for `index` (index_path) and `prefetch` (prefetch_batches); the CLI
 * names it by its flag ("--batch-size"). A value named by the flag takes
 * the CLI's grammar, by the name the field's: they differ only for
 * TIMEOUT rows (seconds with a fraction, or whole milliseconds).
 *
 * Not in the table, kept special by each front end (they are not one plain
 * field): the input (spec, urls; --source and Python's sources=, a list of
 * sources), the fields (--decode, Python's positional fields: parsed into
 * an array), rank_batch_sizes (a list), the callbacks (log, interrupt,
 * allocator), and the CLI's --epochs (how many epochs a command runs,
 * not a config field). drop_last making the last batch DROP unless
 * last_batch is given is the library's too: last_batch's default is
 * WDS_LAST_AUTO, which wds_loader_open resolves. read_buffer_bytes is not
 * exposed. crop_scale and crop_ratio (FLOATS rows of two numbers) set two
 * fields each, the _min and _max.
 *
 * The rules between options of a whole config (resampled mode needs
 * samples_per_epoch, an index only in exact mode, the options a mode
 * ignores, ...) are wds_loader_config_check, at the end of this file:
 * wds_loader_open runs it, and the front ends run it first to name the
 * options their way.
 *
 * Errors: like the other handle-less calls that fail before a handle
 * exists, wds_loader_config_set keeps its message where wds_last_error()
 * reads it (thread-local), naming the option as the caller named it. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/size.h"
#include "base/topology.h"
#include "wds/loader.h"

/* Field enums and ints are stored as 4 bytes, sizes and counts as 8
 * (size_t on 64-bit; 4 elsewhere, written the same way by size). */
_Static_assert(sizeof(wds_mode) == sizeof(int), "enum fields are ints");
_Static_assert(sizeof(wds_crop) == sizeof(int), "enum fields are ints");

#define FIELD(f)                                                               \
  .offset = offsetof(wds_loader_config, f),                                    \
  .size = sizeof(((wds_loader_config *)0)->f)

#define MAX_TIMEOUT_MS ((uint64_t)86400 * 24 * 1000) /* 24 days */

static const char *const modes[] = {"plain", "exact", "resampled", NULL};
static const char *const lasts[] = {"keep", "drop", "pad", NULL};
static const char *const crops[] = {"center", "random", NULL};
static const char *const policies[] = {"stop", "skip", NULL};
static const char *const defers[] = {"auto", "on", "off", NULL};
static const char *const wheres[] = {"cpu", "gpu", NULL};
static const char *const image_dtypes[] = {"uint8", "float32", "float16", NULL};
_Static_assert(sizeof(wds_image_dtype) == sizeof(int), "enum fields are ints");
/* The FLOATS rows of pairs store into two consecutive double fields. */
_Static_assert(offsetof(wds_loader_config, crop_scale_max) ==
                   offsetof(wds_loader_config, crop_scale_min) + sizeof(double),
               "crop_scale_min, crop_scale_max consecutive");
_Static_assert(offsetof(wds_loader_config, crop_ratio_max) ==
                   offsetof(wds_loader_config, crop_ratio_min) + sizeof(double),
               "crop_ratio_min, crop_ratio_max consecutive");

#define SIZE_WORDS                                                             \
  "a size in bytes, optionally with K, M, G, T (powers of 1024) or KB, MB, "   \
  "GB, TB (of 1000)"

/* In the order of `wds batches --help`. Help lines are wrapped to 55
 * columns (the CLI indents them by 25). */
static const wds_loader_option rows[] = {
    {.name = "batch_size",
     .flag = "batch-size",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 1,
     .max = (uint64_t)1 << 24,
     FIELD(batch_size),
     .help = "rows per batch (default 1)"},
    {.name = "mode",
     .flag = "mode",
     .value_name = "MODE",
     .type = WDS_OPTION_ENUM,
     .names = modes,
     FIELD(mode),
     .help = "plain (the default of wds batches and bench;\n"
             "wds-train and Python's wds.Loader default to\n"
             "exact): each rank reads its shards once, ranks\n"
             "may get different batch counts;\n"
             "exact: every sample once per epoch over all\n"
             "ranks, equal counts (padded or --drop-last);\n"
             "resampled: shards drawn with replacement,\n"
             "--samples-per-epoch per rank"},
    {.name = "samples_per_epoch",
     .flag = "samples-per-epoch",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 1,
     .max = UINT64_MAX,
     FIELD(samples_per_epoch),
     .help = "samples per rank and epoch (resampled: needed;\n"
             "plain: a cap)"},
    {.name = "index",
     .flag = "index",
     .value_name = "FILE",
     .type = WDS_OPTION_STRING,
     .expects = "a file name",
     FIELD(index_path),
     .help = "exact mode: per-shard sample counts (the JSON\n"
             "`wds index` writes) instead of a counting pass"},
    {.name = "rank",
     .flag = "rank",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 0,
     .max = 1 << 20,
     FIELD(rank),
     .help = "this process's rank (default: RANK, SLURM_PROCID,\n"
             "OMPI_COMM_WORLD_RANK, PMI_RANK, else 0)"},
    {.name = "world_size",
     .flag = "world",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 1,
     .max = 1 << 20,
     FIELD(world_size),
     .help = "the number of ranks (default: WORLD_SIZE,\n"
             "SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE,\n"
             "else 1)"},
    {.name = "workers",
     .flag = "workers",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 1,
     .max = WDS_LOADER_MAX_WORKERS,
     FIELD(workers),
     .help = "worker threads, 1..256 (default 4); the batch\n"
             "order depends on it: keep it fixed to\n"
             "reproduce a run"},
    {.name = "seed",
     .flag = "seed",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 0,
     .max = UINT64_MAX,
     FIELD(seed),
     .help = "seed of every shuffle and draw (default 0)"},
    {.name = "epoch",
     .flag = "epoch",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 0,
     .max = UINT64_MAX,
     FIELD(epoch),
     .help = "the first epoch (default 0)"},
    {.name = "resume_batches",
     .flag = "resume-at",
     .value_name = "K",
     .type = WDS_OPTION_INT,
     .min = 0,
     .max = UINT64_MAX,
     FIELD(resume_batches),
     .help = "skip the first K batches of --epoch, as after\n"
             "a restart: the output continues exactly where\n"
             "an uninterrupted run would be"},
    {.name = "shuffle_buffer",
     .flag = "shuffle-buffer",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 0,
     .max = (uint64_t)1 << 32,
     FIELD(shuffle_buffer),
     .help = "samples per worker shuffle buffer (0: none)"},
    {.name = "shuffle_initial",
     .flag = "shuffle-initial",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 0,
     .max = (uint64_t)1 << 32,
     FIELD(shuffle_initial),
     .help = "samples buffered before the first output"},
    {.name = "shuffle_buffer_bytes",
     .flag = "shuffle-bytes",
     .value_name = "SIZE",
     .type = WDS_OPTION_SIZE,
     .min = 1,
     .max = SIZE_MAX,
     FIELD(shuffle_buffer_bytes),
     .help = "and at most SIZE bytes of samples per worker\n"
             "(default 1G): the buffer\n"
             "holds fewer samples when they are large"},
    {.name = "shard_shuffle",
     .flag = "no-shard-shuffle",
     .type = WDS_OPTION_BOOL,
     .cli_value = "0",
     FIELD(shard_shuffle),
     .help = "keep the spec's shard order in every epoch"},
    {.name = "eager_next_epoch",
     .flag = "eager-next-epoch",
     .type = WDS_OPTION_BOOL,
     .cli_value = "1",
     FIELD(eager_next_epoch),
     .help = "with --epochs: read the next epoch while the\n"
             "last batches of this one are taken (the same\n"
             "batches; more memory for a while)"},
    {.name = "drop_last",
     .flag = "drop-last",
     .type = WDS_OPTION_BOOL,
     .cli_value = "1",
     FIELD(drop_last),
     .help = "exact mode: drop the tail instead of padding,\n"
             "and drop a partial last batch (torch's\n"
             "drop_last for the sampler and the DataLoader)"},
    {.name = "last_batch",
     .flag = "last-batch",
     .value_name = "HOW",
     .type = WDS_OPTION_ENUM,
     .names = lasts,
     FIELD(last_batch),
     .help = "keep, drop, or pad (to --batch-size with\n"
             "repeated rows marked invalid); default: drop\n"
             "with --drop-last, else keep"},
    {.name = "image_size",
     .flag = "image-size",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 1,
     .max = 65536,
     FIELD(image_size),
     .help = "default image width and height (224)"},
    {.name = "crop",
     .flag = "crop",
     .value_name = "HOW",
     .type = WDS_OPTION_ENUM,
     .names = crops,
     FIELD(crop),
     .help = "center (default) or random (resized crop and\n"
             "flip)"},
    {.name = "crop_scale",
     .flag = "crop-scale",
     .value_name = "MIN,MAX",
     .type = WDS_OPTION_FLOATS,
     .count = 2,
     .lo = 0,
     .lo_open = 1,
     .hi = 1,
     .offset = offsetof(wds_loader_config, crop_scale_min),
     .size = 2 * sizeof(double),
     .expects = "two numbers MIN,MAX with 0 < MIN <= MAX <= 1",
     .help = "--crop random: the crop's area range, a share\n"
             "of the image's (RandomResizedCrop's scale;\n"
             "default 0.08,1)"},
    {.name = "crop_ratio",
     .flag = "crop-ratio",
     .value_name = "MIN,MAX",
     .type = WDS_OPTION_FLOATS,
     .count = 2,
     .lo = 0,
     .lo_open = 1,
     .hi = 1e9,
     .offset = offsetof(wds_loader_config, crop_ratio_min),
     .size = 2 * sizeof(double),
     .expects = "two numbers MIN,MAX with 0 < MIN <= MAX",
     .help = "--crop random: the crop's aspect ratio range,\n"
             "width / height, drawn log-uniform\n"
             "(RandomResizedCrop's ratio; default\n"
             "0.75,1.3333)"},
    {.name = "flip_prob",
     .flag = "flip-prob",
     .value_name = "P",
     .type = WDS_OPTION_FLOATS,
     .count = 1,
     .lo = 0,
     .hi = 1,
     FIELD(flip_prob),
     .expects = "a probability in [0, 1]",
     .help = "--crop random: horizontal flip probability\n"
             "(default 0.5)"},
    {.name = "brightness",
     .flag = "brightness",
     .value_name = "B",
     .type = WDS_OPTION_FLOATS,
     .count = 2,
     .count_one = 1,
     .centered = 1,
     .center = 1,
     .lo = 0,
     .hi = 1e9,
     FIELD(brightness),
     .expects = "a number B >= 0 or two, MIN,MAX",
     .help = "ColorJitter: the brightness factor, uniform in\n"
             "[max(0, 1-B), 1+B]; or B is MIN,MAX (default:\n"
             "off). The four adjustments run in a random\n"
             "order per image, on the resized pixels"},
    {.name = "contrast",
     .flag = "contrast",
     .value_name = "C",
     .type = WDS_OPTION_FLOATS,
     .count = 2,
     .count_one = 1,
     .centered = 1,
     .center = 1,
     .lo = 0,
     .hi = 1e9,
     FIELD(contrast),
     .expects = "a number C >= 0 or two, MIN,MAX",
     .help = "ColorJitter: the contrast factor, in\n"
             "[max(0, 1-C), 1+C]; or C is MIN,MAX (default:\n"
             "off)"},
    {.name = "saturation",
     .flag = "saturation",
     .value_name = "S",
     .type = WDS_OPTION_FLOATS,
     .count = 2,
     .count_one = 1,
     .centered = 1,
     .center = 1,
     .lo = 0,
     .hi = 1e9,
     FIELD(saturation),
     .expects = "a number S >= 0 or two, MIN,MAX",
     .help = "ColorJitter: the saturation factor, in\n"
             "[max(0, 1-S), 1+S]; or S is MIN,MAX (default:\n"
             "off)"},
    {.name = "hue",
     .flag = "hue",
     .value_name = "H",
     .type = WDS_OPTION_FLOATS,
     .count = 2,
     .count_one = 1,
     .centered = 1,
     .center = 0,
     .lo = -0.5,
     .hi = 0.5,
     FIELD(hue),
     .expects = "a number H in [0, 0.5] or two, MIN,MAX, in [-0.5, 0.5]",
     .help = "ColorJitter: the hue shift, in [-H, H], H <= 0.5;\n"
             "or H is MIN,MAX in [-0.5, 0.5] (default: off)"},
    {.name = "image_dtype",
     .flag = "image-dtype",
     .value_name = "TYPE",
     .type = WDS_OPTION_ENUM,
     .names = image_dtypes,
     FIELD(image_dtype),
     .help = "uint8 (default: HWC bytes), or float32 or\n"
             "float16: CHW rows of (x/255 - mean) / std,\n"
             "ready for a model"},
    {.name = "normalize_mean",
     .flag = "normalize-mean",
     .value_name = "M",
     .type = WDS_OPTION_FLOATS,
     .count = 3,
     .count_one = 1,
     .lo = -1e9,
     .hi = 1e9,
     .offset = offsetof(wds_loader_config, normalize_mean),
     .size = 3 * sizeof(double),
     .expects = "one number or three (R,G,B)",
     .help = "float --image-dtype: the mean subtracted, one\n"
             "number or R,G,B (default 0; ImageNet's:\n"
             "0.485,0.456,0.406)"},
    {.name = "normalize_std",
     .flag = "normalize-std",
     .value_name = "S",
     .type = WDS_OPTION_FLOATS,
     .count = 3,
     .count_one = 1,
     .lo = -1e9,
     .hi = 1e9,
     .offset = offsetof(wds_loader_config, normalize_std),
     .size = 3 * sizeof(double),
     .expects = "one number or three (R,G,B), none 0",
     .help = "float --image-dtype: the divisor, one number or\n"
             "R,G,B, none 0 (default 1; ImageNet's:\n"
             "0.229,0.224,0.225)"},
    {.name = "prefetch",
     .flag = "prefetch",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 2, /* a slot being filled and one the caller holds */
     .max = 1024,
     FIELD(prefetch_batches),
     .help = "batches in flight (pool slots, 2..1024, default 4)"},
    {.name = "on_error",
     .flag = "on-error",
     .value_name = "HOW",
     .type = WDS_OPTION_ENUM,
     .names = policies,
     FIELD(on_error),
     .help = "stop (default) or skip (count and go on; bad\n"
             "samples become invalid rows)"},
    {.name = "max_sample_bytes",
     .flag = "max-sample-bytes",
     .value_name = "SIZE",
     .type = WDS_OPTION_SIZE,
     .min = 1,
     .max = SIZE_MAX,
     FIELD(max_sample_bytes),
     .help = "largest sample accepted"},
    {.name = "read_timeout_ms",
     .flag = "read-timeout",
     .value_name = "S",
     .type = WDS_OPTION_TIMEOUT,
     .min = 0,
     .max = MAX_TIMEOUT_MS,
     FIELD(read_timeout_ms),
     .help = "a shard that delivers no data for S seconds\n"
             "fails, naming it (default 300; 0: wait\n"
             "forever)"},
    {.name = "max_window_bytes",
     .flag = "max-window",
     .value_name = "SIZE",
     .type = WDS_OPTION_SIZE,
     .min = 1,
     .max = UINT64_MAX,
     .expects = SIZE_WORDS " (a zstd window: default 128M, zstd --long=31 "
                           "needs 2G)",
     FIELD(max_window_bytes),
     .help = "largest zstd window a shard may need\n"
             "(default 128M; zstd --long=31: 2G)"},
    {.name = "max_unverified_bytes",
     .flag = "max-unverified",
     .value_name = "SIZE",
     .type = WDS_OPTION_SIZE,
     .min = 1,
     .max = UINT64_MAX,
     FIELD(max_unverified_bytes),
     .help = "a compressed shard's samples are delivered\n"
             "once their zstd frame's or gzip member's\n"
             "check passed, holding up to SIZE of a frame\n"
             "(default 64M); a larger frame's samples are\n"
             "delivered unchecked and counted"},
    {.name = "retries",
     .flag = "retries",
     .value_name = "N",
     .type = WDS_OPTION_INT,
     .min = 0,
     .max = 1000,
     .zero_is_none = 1,
     .expects = "a count from 0 to 1000",
     FIELD(retries),
     .help = "http(s):// shards: tries again N times (default\n"
             "5; 0: none), with backoff, after a connect\n"
             "error, HTTP 408, 429 or 5xx or a cut transfer\n"
             "(which resumes where it stopped)"},
    {.name = "allow_pipe_from_files",
     .flag = "allow-pipe-from-files",
     .type = WDS_OPTION_BOOL,
     .cli_value = "1",
     FIELD(allow_pipe_from_files),
     .help = "run the pipe: commands read from @FILE lists\n"
             "and index files (refused by default: such\n"
             "files may come from anywhere)"},
    {.name = "defer_reads",
     .flag = "defer-reads",
     .value_name = "WHEN",
     .type = WDS_OPTION_ENUM,
     .names = defers,
     FIELD(defer_reads),
     .help = "auto (default), on or off: large fields (16 KiB\n"
             "and more) of local uncompressed shards stay in\n"
             "the file while their sample is in the shuffle\n"
             "buffer and are read (pread) as it leaves; auto:\n"
             "only fields whose pages were all in the page\n"
             "cache when the shard was opened. The batches\n"
             "are the same"},
    {.name = "cache_dir",
     .flag = "cache-dir",
     .value_name = "DIR",
     .type = WDS_OPTION_STRING,
     .expects = "a directory",
     FIELD(cache_dir),
     .help = "keep remote shards (http(s)://, s3://) read\n"
             "whole in DIR and read them from there later\n"
             "(default $WDS_CACHE_DIR; shared safely by\n"
             "processes; trusts the URL)"},
    {.name = "cache_size",
     .flag = "cache-size",
     .value_name = "SIZE",
     .type = WDS_OPTION_SIZE,
     .min = 0,
     .max = UINT64_MAX,
     .expects = SIZE_WORDS "; 0 = no limit",
     FIELD(cache_size),
     .help = "delete least recently used entries of the\n"
             "cache over SIZE (default 0: no limit)"},
    {.name = "image_memory_limit",
     .flag = "image-memory-limit",
     .value_name = "SIZE",
     .type = WDS_OPTION_SIZE,
     .min = 1,
     .max = UINT64_MAX,
     .expects = SIZE_WORDS " (default 256M)",
     FIELD(image_memory_limit),
     .help = "memory one image's decode may take (default\n"
             "256M: the decoded pixels at the scale needed,\n"
             "a progressive JPEG's coefficients); an image\n"
             "over it is an error naming it"},
    {.name = "jpeg_decode",
     .flag = "jpeg-decode",
     .value_name = "WHERE",
     .type = WDS_OPTION_ENUM,
     .names = wheres,
     FIELD(jpeg_decode),
     .help = "cpu (default) or gpu: JPEG image fields decoded\n"
             "by the workers, or by nvJPEG on the GPU (the\n"
             "workers plan the crops: the same samples and\n"
             "crops); gpu needs CUDA, a GPU and libnvjpeg"},
};

#define NROWS (sizeof rows / sizeof *rows)

const wds_loader_option *wds_loader_option_at(size_t i) {
  return i < NROWS ? &rows[i] : NULL;
}

const wds_loader_option *wds_loader_option_find(const char *name) {
  if (!name)
    return NULL;
  int by_flag = strncmp(name, "--", 2) == 0;
  for (size_t i = 0; i < NROWS; i++)
    if (strcmp(by_flag ? rows[i].flag : rows[i].name,
               by_flag ? name + 2 : name) == 0)
      return &rows[i];
  return NULL;
}

/* The field of row r in cfg set to v (4 or 8 bytes, by the field's size;
 * v fits: the bounds say so). */
static void store(wds_loader_config *cfg, const wds_loader_option *r,
                  int64_t v) {
  char *p = (char *)cfg + r->offset;
  if (r->size == sizeof(uint32_t)) {
    uint32_t x = (uint32_t)v;
    memcpy(p, &x, sizeof x);
  } else {
    uint64_t x = (uint64_t)v;
    memcpy(p, &x, sizeof x);
  }
}

/* "a, b or c" of an ENUM row into buf. */
static const char *name_list(const char *const *names, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; names[i] && used < n; i++) {
    int k = snprintf(buf + used, n - used, "%s%s",
                     i ? (names[i + 1] ? ", " : " or ") : "", names[i]);
    if (k < 0)
      break;
    used += (size_t)k;
  }
  return buf;
}

/* The usage error for row r named `name` (as the caller named it). */
static int bad(const wds_loader_option *r, const char *name, const char *value,
               int by_flag) {
  char what[256];
  if (r->expects)
    snprintf(what, sizeof what, "%s", r->expects);
  else if (r->type == WDS_OPTION_INT || r->type == WDS_OPTION_SIZE) {
    if (r->type == WDS_OPTION_SIZE)
      snprintf(what, sizeof what,
               "a size in bytes (optionally with K, M, G, T: powers of 1024, "
               "or KB, MB, GB, TB: of 1000)");
    else if (r->max == UINT64_MAX)
      snprintf(what, sizeof what, "a whole number of at least %llu",
               (unsigned long long)r->min);
    else
      snprintf(what, sizeof what, "a whole number in %llu..%llu",
               (unsigned long long)r->min, (unsigned long long)r->max);
  } else if (r->type == WDS_OPTION_TIMEOUT)
    snprintf(what, sizeof what,
             by_flag ? "seconds (0 = wait forever, at most 24 days)"
                     : "milliseconds (0 = wait forever, at most %llu)",
             (unsigned long long)r->max);
  else if (r->type == WDS_OPTION_BOOL)
    snprintf(what, sizeof what, "1 or 0 (true or false)");
  else if (r->type == WDS_OPTION_ENUM) {
    char list[200];
    return wds__last_fail(WDS_ERR_INVALID, "%s must be %s, not \"%s\"", name,
                          name_list(r->names, list, sizeof list), value);
  } else
    snprintf(what, sizeof what, "a value");
  return wds__last_fail(WDS_ERR_INVALID, "%s needs %s, not \"%s\"", name, what,
                        value);
}

/* A FLOATS row: r->count numbers (or one, with count_one), each in its
 * bounds, stored only when all are good. */
static int set_floats(wds_loader_config *cfg, const wds_loader_option *r,
                      const char *name, const char *value, int by_flag) {
  double v[8];
  int n = 0;
  const char *p = value;
  for (;;) {
    char *end;
    errno = 0;
    double x = strtod(p, &end);
    while (end > p && (*end == ' ' || *end == '\t'))
      end++;
    if (errno || end == p || !isfinite(x) ||
        !(r->lo_open ? x > r->lo : x >= r->lo) || !(x <= r->hi) ||
        n == r->count || n == 8 || (*end && *end != ','))
      return bad(r, name, value, by_flag);
    v[n++] = x;
    if (!*end)
      break;
    p = end + 1;
  }
  if (n != r->count && !(n == 1 && r->count_one))
    return bad(r, name, value, by_flag);
  if (n == 1 && r->centered) { /* v: (max(lo, center - v), center + v) */
    if (!(v[0] >= 0) || !(r->center + v[0] <= r->hi))
      return bad(r, name, value, by_flag);
    double lo = r->center - v[0];
    v[1] = r->center + v[0];
    v[0] = lo > r->lo ? lo : r->lo;
    n = 2;
  }
  for (int i = n; i < r->count; i++)
    v[i] = v[0];
  memcpy((char *)cfg + r->offset, v, (size_t)r->count * sizeof(double));
  return WDS_OK;
}

int wds_loader_config_set(wds_loader_config *cfg, const char *name,
                          const char *value) {
  const wds_loader_option *r = wds_loader_option_find(name);
  /* A BOOL row named by its flag is the flag given: it takes no value and
   * sets what the flag sets (--no-shard-shuffle: shard_shuffle 0), so a
   * "1" can never turn a --no-... flag's meaning around. */
  if (r && r->type == WDS_OPTION_BOOL && name[0] == '-') {
    if (value)
      return wds__last_fail(WDS_ERR_INVALID,
                            "%s takes no value (it sets %s to %s), not \"%s\"",
                            name, r->name, r->cli_value, value);
    value = r->cli_value;
  }
  if (!cfg || !r || !value)
    return wds__last_fail(WDS_ERR_INVALID,
                          !r ? "unknown loader option \"%s\""
                             : "wds_loader_config_set: %s: config or value "
                               "is NULL",
                          name ? name : "(null)");
  int by_flag = name[0] == '-';
  uint64_t v;
  switch (r->type) {
  case WDS_OPTION_BOOL:
    if (!strcmp(value, "1") || !strcmp(value, "true"))
      store(cfg, r, 1);
    else if (!strcmp(value, "0") || !strcmp(value, "false"))
      store(cfg, r, 0);
    else
      return bad(r, name, value, by_flag);
    return WDS_OK;
  case WDS_OPTION_INT:
    if (wds__parse_u64(value, &v) != 0 || v < r->min || v > r->max)
      return bad(r, name, value, by_flag);
    store(cfg, r, r->zero_is_none && v == 0 ? -1 : (int64_t)v);
    return WDS_OK;
  case WDS_OPTION_SIZE:
    if (wds__size_parse(value, &v) != 0 || v < r->min || v > r->max)
      return bad(r, name, value, by_flag);
    store(cfg, r, (int64_t)v);
    return WDS_OK;
  case WDS_OPTION_TIMEOUT:
    if (by_flag) { /* seconds, fractions allowed */
      char *end = NULL;
      errno = 0;
      /* Decimal digits with one optional '.', nothing else: strtod would
       * also take a sign ("-0"), hex ("0x10"), exponents, "inf", spaces. */
      size_t digits = strspn(value, "0123456789");
      if (value[digits] == '.')
        digits += 1 + strspn(value + digits + 1, "0123456789");
      double s =
          value[digits] || strcmp(value, ".") == 0 ? -1 : strtod(value, &end);
      if (s < 0 || errno || end == value || *end || !(s >= 0) ||
          s * 1000 > (double)r->max)
        return bad(r, name, value, by_flag);
      v = s == 0 ? 0 : s * 1000 < 1 ? 1 : (uint64_t)(s * 1000 + 0.5);
    } else if (wds__parse_u64(value, &v) != 0 || v > r->max)
      return bad(r, name, value, by_flag);
    store(cfg, r, v == 0 ? -1 : (int64_t)v); /* the config's "never" */
    return WDS_OK;
  case WDS_OPTION_ENUM:
    for (int i = 0; r->names[i]; i++)
      if (strcmp(value, r->names[i]) == 0) {
        store(cfg, r, i);
        return WDS_OK;
      }
    return bad(r, name, value, by_flag);
  case WDS_OPTION_STRING:
    if (!value[0])
      return bad(r, name, value, by_flag);
    memcpy((char *)cfg + r->offset, &value, sizeof value);
    return WDS_OK;
  case WDS_OPTION_FLOATS:
    return set_floats(cfg, r, name, value, by_flag);
  }
  return bad(r, name, value, by_flag);
}

/* ---- the rules between options -------------------------------------- */

/* How option `name` (a row's keyword, or "sources" / "rank_batch_sizes",
 * which are not rows) is written in a message: by its CLI flag
 * ("--samples-per-epoch") or as the keyword. */
static const char *opt_name(const char *name, int by_flag, char *buf,
                            size_t cap) {
  if (!by_flag)
    return name;
  const wds_loader_option *r = wds_loader_option_find(name);
  if (r)
    snprintf(buf, cap, "--%s", r->flag);
  else if (!strcmp(name, "sources"))
    snprintf(buf, cap, "--source");
  else /* rank_batch_sizes */
    snprintf(buf, cap, "--rank-batch-sizes");
  return buf;
}

/* How mode m is written: `--mode exact` or `mode="exact"`. */
static const char *mode_name(wds_mode m, int by_flag, char *buf, size_t cap) {
  const char *n = (unsigned)m < 3 ? modes[m] : "?"; /* the row's names */
  snprintf(buf, cap, by_flag ? "--mode %s" : "mode=\"%s\"", n);
  return buf;
}

int wds_loader_config_check(const wds_loader_config *cfg,
                            wds_option_naming naming) {
  if (!cfg)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_loader_config_check: config is NULL");
  int f = naming == WDS_OPTION_NAMES_FLAG;
  char a[64], b[64], m[64];
#define N(name, buf) opt_name(name, f, buf, sizeof buf)
#define M(mode) mode_name(mode, f, m, sizeof m)
  if (cfg->mode == WDS_MODE_RESAMPLED && cfg->samples_per_epoch == 0)
    return wds__last_fail(WDS_ERR_INVALID,
                          "%s needs %s (samples per rank and epoch)",
                          M(WDS_MODE_RESAMPLED), N("samples_per_epoch", a));
  if (cfg->mode == WDS_MODE_EXACT && cfg->samples_per_epoch)
    return wds__last_fail(WDS_ERR_INVALID,
                          "%s is not used in %s (every sample once per "
                          "epoch)",
                          N("samples_per_epoch", a), M(WDS_MODE_EXACT));
  if (cfg->sources && cfg->index_path)
    return wds__last_fail(WDS_ERR_INVALID,
                          "%s with %s: give each source its own index (%s)",
                          N("index", a), N("sources", b),
                          f ? "--source SPEC:index=FILE"
                            : "its wds_source_config.index_path, or "
                              "wds.Source(..., index=FILE)");
  /* The options a mode ignores, set to other than their default: an
   * error naming the option and the mode, never a silent no-op. Plain
   * mode: rank_batch_sizes (below); exact: samples_per_epoch (above);
   * resampled: the index (below) and the shard order (shards are drawn
   * with replacement). Every other option acts in every mode (drop_last
   * through the last batch's policy). */
  if (cfg->mode == WDS_MODE_RESAMPLED && !cfg->shard_shuffle)
    return wds__last_fail(WDS_ERR_INVALID,
                          "%s is not used in %s (shards are drawn with "
                          "replacement, in no order)",
                          f ? "--no-shard-shuffle" : "shard_shuffle=False",
                          M(WDS_MODE_RESAMPLED));
  if (cfg->index_path && cfg->mode != WDS_MODE_EXACT)
    return wds__last_fail(WDS_ERR_INVALID, "%s is only used in %s",
                          N("index", a), M(WDS_MODE_EXACT));
  if (cfg->rank_batch_size_count && cfg->mode == WDS_MODE_PLAIN)
    return wds__last_fail(WDS_ERR_INVALID,
                          "%s needs %s or resampled (in plain mode the "
                          "ranks' step counts are not known in advance)",
                          N("rank_batch_sizes", a), M(WDS_MODE_EXACT));
  if (cfg->rank_batch_size_count && cfg->world_size > 0 &&
      cfg->rank_batch_size_count != (size_t)cfg->world_size)
    return wds__last_fail(WDS_ERR_INVALID, "%s gives %zu ranks, but %s is %d",
                          N("rank_batch_sizes", a), cfg->rank_batch_size_count,
                          N("world_size", b), cfg->world_size);
  if (cfg->rank >= 0 && cfg->world_size > 0 && cfg->rank >= cfg->world_size)
    return wds__last_fail(WDS_ERR_INVALID, "%s %d is not below %s %d",
                          N("rank", a), cfg->rank, N("world_size", b),
                          cfg->world_size);
  if (cfg->shuffle_initial > cfg->shuffle_buffer)
    return wds__last_fail(WDS_ERR_INVALID, "%s %zu is larger than %s %zu",
                          N("shuffle_initial", a), cfg->shuffle_initial,
                          N("shuffle_buffer", b), cfg->shuffle_buffer);
#undef N
#undef M
  return WDS_OK;
}

int wds_env_topology(int *rank, int *world_size) {
  wds__topology t;
  wds__err e = {{0}};
  int rc = wds__topology_from_env(&t, NULL, NULL, &e);
  if (rank)
    *rank = rc == WDS_OK ? t.rank : 0;
  if (world_size)
    *world_size = rc == WDS_OK ? t.world_size : 1;
  return rc == WDS_OK ? WDS_OK : wds__last_set(rc, e.msg);
}
