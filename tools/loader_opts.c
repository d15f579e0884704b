/* loader_opts.c — parses the loader options shared by `wds batches` and
 * `wds bench` into a wds_loader_config (see loader_opts.h).
 *
 * Values are checked here, with messages naming the flag; what depends on
 * several flags (resampled mode needs --samples-per-epoch, rank < world) is
 * checked in tool_loader_opts_finish, so the order of flags never matters:
 * --last-batch overrides --drop-last's choice whichever comes first. The
 * loader checks the config again when it opens. */
#include "loader_opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/size.h"
#include "base/topology.h"
#include "opts.h"

static const struct option loader_options[] = {
    {"rank", required_argument, 0, TOOL_LO_RANK},
    {"world", required_argument, 0, TOOL_LO_WORLD},
    {"workers", required_argument, 0, TOOL_LO_WORKERS},
    {"seed", required_argument, 0, TOOL_LO_SEED},
    {"epoch", required_argument, 0, TOOL_LO_EPOCH},
    {"epochs", required_argument, 0, TOOL_LO_EPOCHS},
    {"mode", required_argument, 0, TOOL_LO_MODE},
    {"samples-per-epoch", required_argument, 0, TOOL_LO_SAMPLES_PER_EPOCH},
    {"batch-size", required_argument, 0, TOOL_LO_BATCH_SIZE},
    {"drop-last", no_argument, 0, TOOL_LO_DROP_LAST},
    {"last-batch", required_argument, 0, TOOL_LO_LAST_BATCH},
    {"shuffle-buffer", required_argument, 0, TOOL_LO_SHUFFLE_BUFFER},
    {"shuffle-initial", required_argument, 0, TOOL_LO_SHUFFLE_INITIAL},
    {"no-shard-shuffle", no_argument, 0, TOOL_LO_NO_SHARD_SHUFFLE},
    {"decode", required_argument, 0, TOOL_LO_DECODE},
    {"image-size", required_argument, 0, TOOL_LO_IMAGE_SIZE},
    {"crop", required_argument, 0, TOOL_LO_CROP},
    {"prefetch", required_argument, 0, TOOL_LO_PREFETCH},
    {"on-error", required_argument, 0, TOOL_LO_ON_ERROR},
    {"index", required_argument, 0, TOOL_LO_INDEX},
    {"resume-at", required_argument, 0, TOOL_LO_RESUME_AT},
    {"max-sample-bytes", required_argument, 0, TOOL_LO_MAX_SAMPLE_BYTES},
    {"read-timeout", required_argument, 0, TOOL_LO_READ_TIMEOUT},
    {"shuffle-bytes", required_argument, 0, TOOL_LO_SHUFFLE_BYTES},
    {"max-window", required_argument, 0, TOOL_LO_MAX_WINDOW},
    {"retries", required_argument, 0, TOOL_LO_RETRIES},
    {"rank-batch-sizes", required_argument, 0, TOOL_LO_RANK_BATCH_SIZES},
    {"cache-dir", required_argument, 0, TOOL_LO_CACHE_DIR},
    {"cache-size", required_argument, 0, TOOL_LO_CACHE_SIZE},
    {"allow-pipe-from-files", no_argument, 0, TOOL_LO_ALLOW_PIPE},
    {"source", required_argument, 0, TOOL_LO_SOURCE},
    {"eager-next-epoch", no_argument, 0, TOOL_LO_EAGER_NEXT_EPOCH},
    {"defer-reads", required_argument, 0, TOOL_LO_DEFER_READS},
    {"image-memory-limit", required_argument, 0, TOOL_LO_IMAGE_MEMORY_LIMIT},
    {"jpeg-decode", required_argument, 0, TOOL_LO_JPEG_DECODE},
};

#define NLOADER (sizeof loader_options / sizeof *loader_options)

void tool_loader_opts_init(tool_loader_opts *o) {
  static const wds_loader_config init = WDS_LOADER_CONFIG_INIT;
  memset(o, 0, sizeof *o);
  o->cfg = init;
  o->epochs = 1;
}

int tool_loader_options(const struct option *own, struct option *out,
                        size_t cap) {
  size_t n = 0;
  while (own && own[n].name)
    n++;
  if (n + NLOADER + 1 > cap)
    return -1;
  memcpy(out, own, n * sizeof *out);
  memcpy(out + n, loader_options, sizeof loader_options);
  memset(out + n + NLOADER, 0, sizeof *out);
  return 0;
}

static const char *flag_name(int c) {
  for (size_t i = 0; i < NLOADER; i++)
    if (loader_options[i].val == c)
      return loader_options[i].name;
  return "?";
}

/* Decimal in [min, max]; prints the error and returns -1 otherwise. */
static int num(const char *cmd, int c, const char *arg, uint64_t min,
               uint64_t max, uint64_t *out) {
  uint64_t v;
  if (tool_parse_u64(arg, &v) != 0 || v < min || v > max) {
    if (max == UINT64_MAX)
      tool_usage_error(cmd,
                       "--%s needs a whole number of at least %llu, not "
                       "\"%s\"",
                       flag_name(c), (unsigned long long)min, arg);
    else
      tool_usage_error(
          cmd, "--%s needs a whole number in %llu..%llu, not \"%s\"",
          flag_name(c), (unsigned long long)min, (unsigned long long)max, arg);
    return -1;
  }
  *out = v;
  return 0;
}

/* A byte count of at least 1 and at most max, in the size grammar of
 * base/size.h. 0, or -1 for anything else. */
static int suffixed_bytes(const char *arg, uint64_t max, uint64_t *out) {
  uint64_t v;
  if (wds__size_parse(arg, &v) != 0 || v < 1 || v > max)
    return -1;
  *out = v;
  return 0;
}

static int bytes(const char *cmd, int c, const char *arg, size_t *out) {
  uint64_t v;
  if (suffixed_bytes(arg, SIZE_MAX, &v) == 0) {
    *out = (size_t)v;
    return 0;
  }
  tool_usage_error(cmd,
                   "--%s needs a size in bytes (optionally with K, M, G, T: "
                   "powers of 1024, or KB, MB, GB, TB: of 1000), not \"%s\"",
                   flag_name(c), arg);
  return -1;
}

/* Index of arg in words (NULL-terminated), or -1 after printing the error. */
static int word(const char *cmd, int c, const char *arg,
                const char *const *words) {
  for (int i = 0; words[i]; i++)
    if (strcmp(arg, words[i]) == 0)
      return i;
  char list[256];
  size_t used = 0;
  list[0] = '\0';
  for (int i = 0; words[i] && used < sizeof list; i++) {
    int n = snprintf(list + used, sizeof list - used, "%s%s",
                     i ? (words[i + 1] ? ", " : " or ") : "", words[i]);
    if (n < 0)
      break;
    used += (size_t)n;
  }
  tool_usage_error(cmd, "--%s must be %s, not \"%s\"", flag_name(c), list, arg);
  return -1;
}

int tool_parse_rank_batch_sizes(const char *cmd, const char *flag,
                                const char *arg, uint64_t max, size_t **out,
                                size_t *count) {
  size_t n = 1, k = 0;
  for (const char *p = arg; *p; p++)
    n += *p == ',';
  size_t *v = n <= (1u << 20) ? malloc(n * sizeof *v) : NULL;
  char *copy = strdup(arg);
  if (!v || !copy) {
    free(v);
    free(copy);
    tool_usage_error(cmd, "--%s: too many entries (at most 1048576)", flag);
    return -1;
  }
  char *item = copy;
  for (size_t i = 0; i < n; i++) {
    char *comma = strchr(item, ',');
    if (comma)
      *comma = '\0';
    uint64_t x;
    if (tool_parse_u64(item, &x) != 0 || x < 1 || x > max) {
      tool_usage_error(cmd,
                       "--%s needs one batch size (1..%llu) per rank, "
                       "comma-separated (e.g. 24,8,8); entry %zu is \"%s\"",
                       flag, (unsigned long long)max, i + 1, item);
      free(v);
      free(copy);
      return -1;
    }
    v[k++] = (size_t)x;
    item = comma ? comma + 1 : item + strlen(item);
  }
  free(copy);
  free(*out);
  *out = v;
  *count = k;
  return 0;
}

int tool_loader_opt(tool_loader_opts *o, int c, const char *arg,
                    const char *cmd) {
  static const char *const modes[] = {"plain", "exact", "resampled", NULL};
  static const char *const lasts[] = {"keep", "drop", "pad", NULL};
  static const char *const crops[] = {"center", "random", NULL};
  static const char *const policies[] = {"stop", "skip", NULL};
  static const char *const defers[] = {"auto", "on", "off", NULL};
  static const char *const wheres[] = {"cpu", "gpu", NULL};
  wds_loader_config *cfg = &o->cfg;
  uint64_t v = 0;
  int w;
  if (c < TOOL_LOADER_OPT_BASE || c >= TOOL_LOADER_OPT_BASE + (int)NLOADER)
    return 0;
  /* --max-window, --read-timeout, --retries, the cache and
   * --allow-pipe-from-files apply to a plain reader too (wds bench without
   * --decode): they do not make a loader. */
  if (c != TOOL_LO_MAX_WINDOW && c != TOOL_LO_READ_TIMEOUT &&
      c != TOOL_LO_RETRIES && c != TOOL_LO_CACHE_DIR &&
      c != TOOL_LO_CACHE_SIZE && c != TOOL_LO_ALLOW_PIPE)
    o->given = 1;
  switch (c) {
  case TOOL_LO_RANK:
    if (num(cmd, c, arg, 0, 1 << 20, &v))
      return -1;
    cfg->rank = (int)v;
    break;
  case TOOL_LO_WORLD:
    if (num(cmd, c, arg, 1, 1 << 20, &v))
      return -1;
    cfg->world_size = (int)v;
    break;
  case TOOL_LO_WORKERS:
    if (num(cmd, c, arg, 1, WDS_LOADER_MAX_WORKERS, &v))
      return -1;
    cfg->workers = (int)v;
    break;
  case TOOL_LO_SEED:
    if (num(cmd, c, arg, 0, UINT64_MAX, &cfg->seed))
      return -1;
    break;
  case TOOL_LO_EPOCH:
    if (num(cmd, c, arg, 0, UINT64_MAX, &cfg->epoch))
      return -1;
    break;
  case TOOL_LO_EPOCHS:
    if (num(cmd, c, arg, 1, UINT64_MAX, &o->epochs))
      return -1;
    break;
  case TOOL_LO_MODE:
    if ((w = word(cmd, c, arg, modes)) < 0)
      return -1;
    cfg->mode = w == 0   ? WDS_MODE_PLAIN
                : w == 1 ? WDS_MODE_EXACT
                         : WDS_MODE_RESAMPLED;
    break;
  case TOOL_LO_SAMPLES_PER_EPOCH:
    if (num(cmd, c, arg, 1, UINT64_MAX, &cfg->samples_per_epoch))
      return -1;
    break;
  case TOOL_LO_BATCH_SIZE:
    if (num(cmd, c, arg, 1, (uint64_t)1 << 24, &v))
      return -1;
    cfg->batch_size = (size_t)v;
    o->batch_size_given = 1;
    break;
  case TOOL_LO_RANK_BATCH_SIZES:
    if (tool_parse_rank_batch_sizes(cmd, flag_name(c), arg, (uint64_t)1 << 24,
                                    &o->rank_bs, &cfg->rank_batch_size_count))
      return -1;
    cfg->rank_batch_sizes = o->rank_bs;
    break;
  case TOOL_LO_DROP_LAST:
    /* As torch users pass drop_last to DistributedSampler and DataLoader. */
    cfg->drop_last = 1;
    o->drop_last_given = 1;
    break;
  case TOOL_LO_LAST_BATCH:
    if ((w = word(cmd, c, arg, lasts)) < 0)
      return -1;
    o->last_batch = w == 0   ? WDS_LAST_KEEP
                    : w == 1 ? WDS_LAST_DROP
                             : WDS_LAST_PAD;
    o->last_batch_given = 1;
    break;
  case TOOL_LO_SHUFFLE_BUFFER:
  case TOOL_LO_SHUFFLE_INITIAL:
    if (num(cmd, c, arg, 0, (uint64_t)1 << 32, &v))
      return -1;
    if (c == TOOL_LO_SHUFFLE_BUFFER)
      cfg->shuffle_buffer = (size_t)v;
    else
      cfg->shuffle_initial = (size_t)v;
    break;
  case TOOL_LO_EAGER_NEXT_EPOCH:
    cfg->eager_next_epoch = 1;
    break;
  case TOOL_LO_NO_SHARD_SHUFFLE:
    cfg->shard_shuffle = 0;
    break;
  case TOOL_LO_DECODE:
    o->decode = arg;
    break;
  case TOOL_LO_IMAGE_SIZE:
    if (num(cmd, c, arg, 1, 65536, &v))
      return -1;
    cfg->image_size = (int)v;
    break;
  case TOOL_LO_CROP:
    if ((w = word(cmd, c, arg, crops)) < 0)
      return -1;
    cfg->crop = w == 0 ? WDS_CROP_CENTER : WDS_CROP_RANDOM;
    break;
  case TOOL_LO_PREFETCH:
    /* The pool needs a slot being filled and one held by the caller. */
    if (num(cmd, c, arg, 2, 1024, &v))
      return -1;
    cfg->prefetch_batches = (size_t)v;
    break;
  case TOOL_LO_DEFER_READS:
    if ((w = word(cmd, c, arg, defers)) < 0)
      return -1;
    cfg->defer_reads = w == 0   ? WDS_DEFER_AUTO
                       : w == 1 ? WDS_DEFER_ON
                                : WDS_DEFER_OFF;
    break;
  case TOOL_LO_JPEG_DECODE:
    if ((w = word(cmd, c, arg, wheres)) < 0)
      return -1;
    cfg->jpeg_decode = w == 0 ? WDS_JPEG_DECODE_CPU : WDS_JPEG_DECODE_GPU;
    break;
  case TOOL_LO_ON_ERROR:
    if ((w = word(cmd, c, arg, policies)) < 0)
      return -1;
    cfg->on_error = w == 0 ? WDS_ON_ERROR_STOP : WDS_ON_ERROR_SKIP;
    break;
  case TOOL_LO_INDEX:
    if (!arg[0]) {
      tool_usage_error(cmd, "--index needs a file name");
      return -1;
    }
    cfg->index_path = arg;
    break;
  case TOOL_LO_RESUME_AT:
    if (num(cmd, c, arg, 0, UINT64_MAX, &cfg->resume_batches))
      return -1;
    o->resume_given = 1;
    break;
  case TOOL_LO_MAX_SAMPLE_BYTES:
    if (bytes(cmd, c, arg, &cfg->max_sample_bytes))
      return -1;
    break;
  case TOOL_LO_READ_TIMEOUT:
    if (tool_read_timeout(cmd, arg, &cfg->read_timeout_ms))
      return -1;
    break;
  case TOOL_LO_SHUFFLE_BYTES:
    if (bytes(cmd, c, arg, &cfg->shuffle_buffer_bytes))
      return -1;
    break;
  case TOOL_LO_MAX_WINDOW:
    if (tool_max_window(cmd, arg, &cfg->max_window_bytes))
      return -1;
    break;
  case TOOL_LO_RETRIES:
    if (tool_retries(cmd, arg, &cfg->retries))
      return -1;
    break;
  case TOOL_LO_CACHE_DIR:
    cfg->cache_dir = arg;
    break;
  case TOOL_LO_IMAGE_MEMORY_LIMIT:
    if (tool_image_memory_limit(cmd, arg, &cfg->image_memory_limit))
      return -1;
    break;
  case TOOL_LO_CACHE_SIZE:
    if (tool_cache_size(cmd, arg, &cfg->cache_size))
      return -1;
    break;
  case TOOL_LO_ALLOW_PIPE:
    cfg->allow_pipe_from_files = 1;
    break;
  case TOOL_LO_SOURCE: {
    char err[512];
    wds_source_config *nv =
        realloc(o->sources, (o->nsources + 1) * sizeof *o->sources);
    if (!nv) {
      tool_usage_error(cmd, "out of memory");
      return -1;
    }
    o->sources = nv;
    if (tool_parse_source(arg, &o->sources[o->nsources], err, sizeof err)) {
      tool_usage_error(cmd, "--source %s: %s", arg, err);
      return -1;
    }
    o->nsources++;
    break;
  }
  default:
    return 0;
  }
  return 1;
}

int tool_loader_opts_finish(tool_loader_opts *o, const char *cmd) {
  wds_loader_config *cfg = &o->cfg;
  if (o->last_batch_given)
    cfg->last_batch = o->last_batch;
  else if (o->drop_last_given)
    cfg->last_batch = WDS_LAST_DROP;
  if (tool_cache_finish(cmd, &cfg->cache_dir, cfg->cache_size) != 0)
    return -1;
  if (cfg->mode == WDS_MODE_RESAMPLED && cfg->samples_per_epoch == 0) {
    tool_usage_error(cmd, "--mode resampled needs --samples-per-epoch N");
    return -1;
  }
  if (cfg->mode == WDS_MODE_EXACT && cfg->samples_per_epoch) {
    tool_usage_error(cmd, "--samples-per-epoch is not used in --mode exact "
                          "(every sample once per epoch)");
    return -1;
  }
  if (o->nsources && cfg->index_path) {
    tool_usage_error(cmd, "--index with --source: give each source its "
                          "index as --source SPEC:index=FILE");
    return -1;
  }
  if (o->nsources) {
    cfg->sources = o->sources;
    cfg->source_count = o->nsources;
  }
  if (cfg->index_path && cfg->mode != WDS_MODE_EXACT) {
    tool_usage_error(cmd, "--index is only used in --mode exact");
    return -1;
  }
  if (cfg->rank < 0 || cfg->world_size <= 0) {
    /* What the loader would take from the environment is checked here, so
     * that a wrong launcher environment (RANK without WORLD_SIZE) is the
     * usage error it is, as in wds-train, before any shard is opened. */
    wds__topology t;
    wds__err e;
    if (wds__topology_from_env(&t, NULL, NULL, &e) != WDS_OK) {
      tool_usage_error(cmd, "rank and world size from the environment: %s",
                       e.msg);
      return -1;
    }
  }
  if (cfg->rank_batch_size_count) {
    int n = (int)cfg->rank_batch_size_count;
    if (o->batch_size_given) {
      tool_usage_error(cmd, "--batch-size and --rank-batch-sizes: give one "
                            "(--rank-batch-sizes sets every rank's)");
      return -1;
    }
    if (cfg->mode == WDS_MODE_PLAIN) {
      tool_usage_error(cmd, "--rank-batch-sizes needs --mode exact or "
                            "resampled (in plain mode the ranks' step counts "
                            "are not known in advance)");
      return -1;
    }
    if (cfg->world_size > 0 && cfg->world_size != n) {
      tool_usage_error(cmd,
                       "--rank-batch-sizes gives %d ranks, but --world is "
                       "%d",
                       n, cfg->world_size);
      return -1;
    }
    if (cfg->world_size <= 0) {
      wds__topology t;
      wds__err e;
      if (wds__topology_from_env(&t, NULL, NULL, &e) == WDS_OK &&
          t.launcher != WDS__LAUNCHER_NONE && t.world_size != n) {
        tool_usage_error(cmd,
                         "--rank-batch-sizes gives %d ranks, but the "
                         "environment's world size is %d",
                         n, t.world_size);
        return -1;
      }
      cfg->world_size = n;
    }
  }
  if (cfg->rank >= 0 && cfg->world_size > 0 && cfg->rank >= cfg->world_size) {
    tool_usage_error(cmd, "--rank %d is not below --world %d", cfg->rank,
                     cfg->world_size);
    return -1;
  }
  if (cfg->shuffle_initial > cfg->shuffle_buffer) {
    tool_usage_error(
        cmd, "--shuffle-initial %zu is larger than --shuffle-buffer %zu",
        cfg->shuffle_initial, cfg->shuffle_buffer);
    return -1;
  }
  if (o->decode) {
    size_t n = 0;
    if (wds_field_specs_parse(o->decode, &o->fields, &n, &o->field_storage) !=
        WDS_OK) {
      tool_usage_error(cmd, "--decode: %s", wds_last_error());
      return -1;
    }
    cfg->fields = o->fields;
    cfg->field_count = n;
  }
  return 0;
}

void tool_loader_opts_free(tool_loader_opts *o) {
  for (size_t i = 0; i < o->nsources; i++) {
    free((char *)o->sources[i].spec);
    free((char *)o->sources[i].index_path);
  }
  free(o->sources);
  o->sources = NULL;
  o->nsources = 0;
  o->cfg.sources = NULL;
  o->cfg.source_count = 0;
  free(o->fields);
  free(o->field_storage);
  free(o->rank_bs);
  o->rank_bs = NULL;
  o->cfg.rank_batch_sizes = NULL;
  o->cfg.rank_batch_size_count = 0;
  o->fields = NULL;
  o->field_storage = NULL;
  o->cfg.fields = NULL;
  o->cfg.field_count = 0;
}

const char *tool_mode_name(wds_mode m) {
  switch (m) {
  case WDS_MODE_EXACT:
    return "exact";
  case WDS_MODE_RESAMPLED:
    return "resampled";
  default:
    return "plain";
  }
}

int tool_loader_rank(const wds_loader_config *cfg) {
  int rank = cfg->rank, world;
  if (rank < 0)
    wds_env_rank_world(&rank, &world);
  return rank;
}

void tool_print_rank_batches(FILE *f, const char *cmd,
                             const wds_loader_config *cfg,
                             const wds_loader *l) {
  size_t n = cfg->rank_batch_size_count;
  int rank = tool_loader_rank(cfg);
  if (!n || rank < 0 || (size_t)rank >= n)
    return;
  fprintf(f, "%s: rank %d of %zu: batch size %zu (per rank: ", cmd, rank, n,
          cfg->rank_batch_sizes[rank]);
  for (size_t i = 0; i < n; i++)
    fprintf(f, i ? ",%zu" : "%zu", cfg->rank_batch_sizes[i]);
  fprintf(f, "), %llu steps per epoch\n",
          (unsigned long long)wds_loader_epoch_batches(l));
}

/* In parts: one string literal may be at most 4095 characters (C99). */
static const char loader_help_1[] =
    "  --decode FIELDS        the arrays of a batch: comma-separated "
    "fields,\n"
    "                         each NAME[:OPTION]..., NAME one or more\n"
    "                         extensions joined by ';' (the first one a\n"
    "                         sample has is used); OPTIONs: rgb, l (gray),\n"
    "                         N or WxH (image size), and the decoder: "
    "image,\n"
    "                         npy, int, bytes (default: by extension).\n"
    "                         e.g. \"jpg;png:rgb:224,cls\"\n"
    "                         (jpg also matches jpeg and jpeg jpg, so\n"
    "                         .jpg, .JPG, .jpeg and .JPEG files all match)\n"
    "  --batch-size N         rows per batch (default 1)\n"
    "  --rank-batch-sizes B0,B1,...  each rank's batch size (ranks of\n"
    "                         different GPUs); the count is the world size.\n"
    "                         Exact and resampled modes: every rank takes\n"
    "                         the same number of steps S, rank r S x Br\n"
    "                         samples, the epoch split in proportion\n"
    "                         (S = ceil(samples / sum), floor with\n"
    "                         --drop-last; resampled: samples = --samples-\n"
    "                         per-epoch x ranks); no batch is partial\n"
    "  --mode MODE            plain (the default of wds batches and bench;\n"
    "                         wds-train and Python's wds.Loader default to\n"
    "                         exact): each rank reads its shards once, ranks\n"
    "                         may get different batch counts;\n"
    "                         exact: every sample once per epoch over all\n"
    "                         ranks, equal counts (padded or --drop-last);\n"
    "                         resampled: shards drawn with replacement,\n"
    "                         --samples-per-epoch per rank\n"
    "  --samples-per-epoch N  samples per rank and epoch (resampled: "
    "needed;\n"
    "                         plain: a cap)\n"
    "  --index FILE           exact mode: per-shard sample counts (the JSON\n"
    "                         `wds index` writes) instead of a counting "
    "pass\n"
    "  --rank N, --world N    this process's rank and the number of ranks\n"
    "                         (default: RANK/WORLD_SIZE, SLURM_PROCID/\n"
    "                         SLURM_NTASKS, OMPI_COMM_WORLD_*, else 0 of 1)\n"
    "  --workers N            worker threads, 1..256 (default 4); the batch\n"
    "                         order depends on it: keep it fixed to\n"
    "                         reproduce a run\n"
    "  --seed N               seed of every shuffle and draw (default 0)\n"
    "  --epoch N              the first epoch (default 0)\n"
    "  --epochs N             how many epochs to run (default 1)\n"
    "  --resume-at K          skip the first K batches of --epoch, as after\n"
    "                         a restart: the output continues exactly where\n"
    "                         an uninterrupted run would be\n";

static const char loader_help_2[] =
    "  --shuffle-buffer N     samples per worker shuffle buffer (0: none)\n"
    "  --shuffle-initial N    samples buffered before the first output\n"
    "  --shuffle-bytes SIZE   and at most SIZE bytes of samples per worker\n"
    "                         (default 1G): the buffer\n"
    "                         holds fewer samples when they are large\n"
    "  --no-shard-shuffle     keep the spec's shard order in every epoch\n"
    "  --eager-next-epoch     with --epochs: read the next epoch while the\n"
    "                         last batches of this one are taken (the same\n"
    "                         batches; more memory for a while)\n"
    "  --drop-last            exact mode: drop the tail instead of padding,\n"
    "                         and drop a partial last batch (torch's\n"
    "                         drop_last for the sampler and the DataLoader)\n"
    "  --last-batch HOW       keep (default), drop, or pad (to --batch-size\n"
    "                         with repeated rows marked invalid); overrides\n"
    "                         --drop-last for the last batch\n"
    "  --image-size N         default image width and height (224)\n"
    "  --crop HOW             center (default) or random (resized crop and\n"
    "                         flip)\n"
    "  --prefetch N           batches in flight (pool slots, 2..1024, "
    "default 4)\n"
    "  --on-error HOW         stop (default) or skip (count and go on; bad\n"
    "                         samples become invalid rows)\n"
    "  --max-sample-bytes SIZE  largest sample accepted\n"
    "  --read-timeout S       a shard that delivers no data for S seconds\n"
    "                         fails, naming it (default 300; 0: wait\n"
    "                         forever)\n"
    "  --max-window SIZE      largest zstd window a shard may need\n"
    "                         (default 128M; zstd --long=31: 2G)\n"
    "  --retries N            http(s):// shards: tries again N times (default\n"
    "                         5; 0: none), with backoff, after a connect\n"
    "                         error, HTTP 408, 429 or 5xx or a cut transfer\n"
    "                         (which resumes where it stopped)\n"
    "  --allow-pipe-from-files  run the pipe: commands read from @FILE lists\n"
    "                         and --index files (refused by default: such\n"
    "                         files may come from anywhere)\n";

static const char loader_help_3[] =
    "  --defer-reads WHEN     auto (default), on or off: large fields (16 KiB\n"
    "                         and more) of local uncompressed shards stay in\n"
    "                         the file while their sample is in the shuffle\n"
    "                         buffer and are read (pread) as it leaves; auto:\n"
    "                         only fields whose pages were all in the page\n"
    "                         cache when the shard was opened. The batches\n"
    "                         are the same\n"
    "  --cache-dir DIR        keep remote shards (http(s)://, s3://) read\n"
    "                         whole in DIR and read them from there later\n"
    "                         (default $WDS_CACHE_DIR; shared safely by\n"
    "                         processes; trusts the URL)\n"
    "  --cache-size SIZE      delete least recently used entries of the\n"
    "                         cache over SIZE (default 0: no "
    "limit)\n" TOOL_IMAGE_MEMORY_LIMIT_HELP
    "  --jpeg-decode WHERE    cpu (default) or gpu: JPEG image fields decoded\n"
    "                         by the workers, or by nvJPEG on the GPU (the\n"
    "                         workers plan the crops: the same samples and\n"
    "                         crops); gpu needs CUDA, a GPU and libnvjpeg\n";

/* --source: a part of its own. */
static const char source_help[] =
    "  --source SPEC[:weight=W|:proportion=P|:repeat=R][:index=FILE]\n"
    "                         one source of a mix (repeat the option; in\n"
    "                         place of SPEC...). Resampled mode: each sample\n"
    "                         comes from a source with probability weight /\n"
    "                         sum of weights (default 1; a proportion counts\n"
    "                         as a weight). Exact mode: a source gives\n"
    "                         round(R x its samples) per epoch (repeat,\n"
    "                         default 1: 2 = twice, 0.5 = half, another half\n"
    "                         each epoch) or round(P x E) (proportion, E the\n"
    "                         sum of all sources' samples), each sample once\n"
    "                         over all ranks; index=FILE: its counts. The\n"
    "                         options are read from the end of the argument;\n"
    "                         rows record their source (0, 1, ... in option\n"
    "                         order)\n";

void tool_loader_opts_help(FILE *f) {
  fputs("loader options:\n", f);
  fputs(loader_help_1, f);
  fputs(loader_help_2, f);
  fputs(loader_help_3, f);
  fputs(source_help, f);
  fputs("\n" WDS__SIZE_HELP, f);
}

void tool_loader_opts_help_some(FILE *f, const char *const *names) {
  /* An entry is its "  --NAME" line and the indented lines after it. */
  static const char *const parts[] = {loader_help_1, loader_help_2,
                                      loader_help_3, source_help, NULL};
  for (const char *const *n = names; *n; n++) {
    size_t len = strlen(*n);
    int found = 0;
    for (const char *const *part = parts; *part && !found; part++)
      for (const char *line = *part; *line;) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, "  --", 4) == 0 && strncmp(line + 4, *n, len) == 0 &&
            (line[4 + len] == ' ' || line[4 + len] == ',')) {
          do {
            fwrite(line, 1, (size_t)(end - line) + 1, f);
            line = end + 1;
            end = strchr(line, '\n');
          } while (*line && strncmp(line, "  --", 4) != 0);
          found = 1;
          break;
        }
        line = end + 1;
      }
  }
}

int tool_loader_options_some(const struct option *own, const char *const *names,
                             struct option *out, size_t cap) {
  size_t n = 0;
  while (own && own[n].name)
    n++;
  if (n + 1 > cap)
    return -1;
  memcpy(out, own, n * sizeof *out);
  for (const char *const *name = names; *name; name++) {
    size_t i = 0;
    while (i < NLOADER && strcmp(loader_options[i].name, *name) != 0)
      i++;
    if (i == NLOADER || n + 2 > cap)
      return -1;
    out[n++] = loader_options[i];
  }
  memset(out + n, 0, sizeof *out);
  return 0;
}

/* The options a --source argument may end in. */
static const char *const source_keys[] = {"weight", "proportion", "repeat",
                                          "index", NULL};

int tool_parse_source(const char *arg, wds_source_config *out, char *err,
                      size_t errn) {
  memset(out, 0, sizeof *out);
  char *text = strdup(arg);
  int seen[4] = {0, 0, 0, 0};
  if (!text) {
    snprintf(err, errn, "out of memory");
    return -1;
  }
  /* Options are taken from the end: the last ":KEY=" of any key ends the
   * spec (or the option before it), so a URL's "host:port" or a spec's
   * "::" stays in the spec, and an index path may hold ':'. */
  for (;;) {
    char *best = NULL;
    int key = -1;
    for (int k = 0; source_keys[k]; k++) {
      char pat[32];
      snprintf(pat, sizeof pat, ":%s=", source_keys[k]);
      for (char *p = strstr(text, pat); p; p = strstr(p + 1, pat))
        if (!best || p > best) {
          best = p;
          key = k;
        }
    }
    if (!best)
      break;
    const char *val = best + strlen(source_keys[key]) + 2;
    if (seen[key]++) {
      snprintf(err, errn, "%s given twice", source_keys[key]);
      goto bad;
    }
    if (key == 3) {
      if (!*val) {
        snprintf(err, errn, "index= needs a file name");
        goto bad;
      }
      if (!(out->index_path = strdup(val))) {
        snprintf(err, errn, "out of memory");
        goto bad;
      }
    } else {
      char *end;
      errno = 0;
      double v = strtod(val, &end);
      if (errno || end == val || *end || !(v > 0) || v > 1e12) {
        snprintf(err, errn, "%s= needs a number above 0, not \"%s\"",
                 source_keys[key], val);
        goto bad;
      }
      if (key == 0)
        out->weight = v;
      else if (key == 1)
        out->proportion = v;
      else
        out->repeat = v;
    }
    *best = '\0';
  }
  if (seen[0] + seen[1] + seen[2] > 1) {
    snprintf(err, errn, "give one of weight=, proportion= and repeat=");
    goto bad;
  }
  if (!text[0]) {
    snprintf(err, errn, "no SPEC before the options");
    goto bad;
  }
  out->spec = text;
  return 0;
bad:
  free(text);
  free((char *)out->index_path);
  memset(out, 0, sizeof *out);
  return -1;
}

int tool_read_timeout(const char *cmd, const char *arg, int *ms) {
  char *end;
  errno = 0;
  double s = strtod(arg, &end);
  if (errno || end == arg || *end || !(s >= 0) || s > 86400.0 * 24) {
    tool_usage_error(cmd,
                     "--read-timeout needs seconds (0 = wait forever, at "
                     "most 24 days), not \"%s\"",
                     arg);
    return -1;
  }
  if (s == 0)
    *ms = -1; /* the config's "never" (0 there is the default) */
  else
    *ms = s * 1000 < 1 ? 1 : (int)(s * 1000 + 0.5);
  return 0;
}

int tool_retries(const char *cmd, const char *arg, int *retries) {
  char *end;
  errno = 0;
  long v = strtol(arg, &end, 10);
  if (errno || end == arg || *end || v < 0 || v > 1000 ||
      !(*arg >= '0' && *arg <= '9')) {
    tool_usage_error(cmd, "--retries needs a count from 0 to 1000, not \"%s\"",
                     arg);
    return -1;
  }
  *retries = v == 0 ? -1 : (int)v; /* the config's "none" (0 there is 5) */
  return 0;
}

int tool_cache_size(const char *cmd, const char *arg, uint64_t *out) {
  if (wds__size_parse(arg, out) == 0)
    return 0;
  tool_usage_error(cmd,
                   "--cache-size needs a size in bytes, optionally with K, M, "
                   "G, T (powers of 1024) or KB, MB, GB, TB (of 1000); 0 = no "
                   "limit, not \"%s\"",
                   arg);
  return -1;
}

int tool_cache_finish(const char *cmd, const char **dir, uint64_t size) {
  if (*dir && !**dir) {
    tool_usage_error(cmd, "--cache-dir needs a directory, not \"\"");
    return -1;
  }
  if (!*dir) {
    const char *env = getenv("WDS_CACHE_DIR");
    if (env && *env)
      *dir = env;
  }
  if (size && !*dir) {
    tool_usage_error(cmd, "--cache-size needs --cache-dir DIR (or "
                          "WDS_CACHE_DIR)");
    return -1;
  }
  return 0;
}

void tool_cache_note(const char *cmd, const char *dir, uint64_t errors) {
  if (errors && dir)
    fprintf(stderr,
            "%s: note: the cache %s could not be used %llu time%s (those "
            "shards were read without it)\n",
            cmd, dir, (unsigned long long)errors, errors == 1 ? "" : "s");
}

int tool_max_window(const char *cmd, const char *arg, uint64_t *out) {
  if (suffixed_bytes(arg, UINT64_MAX, out) == 0)
    return 0;
  tool_usage_error(cmd,
                   "--max-window needs a size in bytes, optionally with K, M, "
                   "G, T (powers of 1024) or KB, MB, GB, TB (of 1000) (a zstd "
                   "window: default 128M, zstd --long=31 needs 2G), not \"%s\"",
                   arg);
  return -1;
}

int tool_image_memory_limit(const char *cmd, const char *arg, uint64_t *out) {
  if (suffixed_bytes(arg, UINT64_MAX, out) == 0)
    return 0;
  tool_usage_error(cmd,
                   "--image-memory-limit needs a size in bytes, optionally "
                   "with K, M, G, T (powers of 1024) or KB, MB, GB, TB (of "
                   "1000) (default 256M), not \"%s\"",
                   arg);
  return -1;
}
