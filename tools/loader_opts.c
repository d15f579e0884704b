/* loader_opts.c — the loader options of `wds batches`, `wds bench` and
 * `wds-train` (see loader_opts.h), and the shard-reading options of the
 * reader commands, built from the library's option table
 * (wds_loader_option_at, loader/options.c).
 *
 * Each row of the table with a flag becomes a getopt_long entry, its value
 * is parsed by wds_loader_config_set (one grammar and one message, naming
 * the flag, for every front end) and its --help entry is made from the
 * row. Four loader options are this file's own (not config fields, or not
 * one): --decode (the fields), --rank-batch-sizes, --source (the mix) and
 * --epochs (how many epochs a command runs). What depends on several
 * flags (resampled mode needs --samples-per-epoch, rank < world, the
 * options a mode ignores) is the library's wds_loader_config_check, run by
 * tool_loader_opts_finish once every flag is in (so their order never
 * matters) to name the flags; --drop-last's last batch is the library's
 * too (last_batch's unset default, resolved at open). The loader checks
 * the config again when it opens. */
#include "loader_opts.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/size.h"
#include "base/topology.h"
#include "opts.h"
#include "shards/cache.h"

/* The getopt_long codes of TOOL_LO_*, by flag, in their order (the codes
 * wds-train records as given). A row of the library's table not named
 * here gets a code after them (tool_lo_code), so a new row needs nothing
 * here. */
static const char *const coded[] = {"rank",
                                    "world",
                                    "workers",
                                    "seed",
                                    "epoch",
                                    "epochs",
                                    "mode",
                                    "samples-per-epoch",
                                    "batch-size",
                                    "drop-last",
                                    "last-batch",
                                    "shuffle-buffer",
                                    "shuffle-initial",
                                    "no-shard-shuffle",
                                    "decode",
                                    "image-size",
                                    "crop",
                                    "prefetch",
                                    "on-error",
                                    "index",
                                    "resume-at",
                                    "max-sample-bytes",
                                    "read-timeout",
                                    "shuffle-bytes",
                                    "max-window",
                                    "retries",
                                    "rank-batch-sizes",
                                    "cache-dir",
                                    "cache-size",
                                    "allow-pipe-from-files",
                                    "source",
                                    "eager-next-epoch",
                                    "defer-reads",
                                    "image-memory-limit",
                                    "jpeg-decode"};
#define NCODED (sizeof coded / sizeof *coded)
_Static_assert(NCODED == TOOL_LO_JPEG_DECODE - TOOL_LOADER_OPT_BASE + 1,
               "one flag per TOOL_LO_ code");

/* The options of this file's own, with their help; each is listed after
 * the table's row `after` (NULL: first). */
typedef struct special {
  const char *flag, *value_name, *after, *help;
} special;

static const special specials[] = {
    {"decode", "FIELDS", NULL,
     "the arrays of a batch: comma-separated fields,\n"
     "each NAME[:OPTION]..., NAME one or more\n"
     "extensions joined by ';' (the first one a\n"
     "sample has is used); OPTIONs: rgb, l (gray),\n"
     "N or WxH (image size), and the decoder: image,\n"
     "npy, int, bytes (default: by extension).\n"
     "e.g. \"jpg;png:rgb:224,cls\"\n"
     "(jpg also matches jpeg and jpeg jpg, so\n"
     ".jpg, .JPG, .jpeg and .JPEG files all match)"},
    {"rank-batch-sizes", "B0,B1,...", "batch-size",
     "each rank's batch size (ranks of\n"
     "different GPUs); the count is the world size.\n"
     "Exact and resampled modes: every rank takes\n"
     "the same number of steps S, rank r S x Br\n"
     "samples, the epoch split in proportion\n"
     "(S = ceil(samples / sum), floor with\n"
     "--drop-last; resampled: samples = --samples-\n"
     "per-epoch x ranks); no batch is partial"},
    {"epochs", "N", "epoch", "how many epochs to run (default 1)"},
    {"source", "SPEC[:weight=W|:proportion=P|:repeat=R][:index=FILE]",
     "jpeg-decode",
     "one source of a mix (repeat the option; in\n"
     "place of SPEC...). Resampled mode: each sample\n"
     "comes from a source with probability weight /\n"
     "sum of weights (default 1; a proportion counts\n"
     "as a weight). Exact mode: a source gives\n"
     "round(R x its samples) per epoch (repeat,\n"
     "default 1: 2 = twice, 0.5 = half, another half\n"
     "each epoch) or round(P x E) (proportion, E the\n"
     "sum of all sources' samples), each sample once\n"
     "over all ranks; index=FILE: its counts. The\n"
     "options are read from the end of the argument;\n"
     "rows record their source (0, 1, ... in option\n"
     "order)"},
};
#define NSPECIAL (sizeof specials / sizeof *specials)

static int coded_index(const char *flag) {
  for (size_t i = 0; i < NCODED; i++)
    if (strcmp(coded[i], flag) == 0)
      return (int)i;
  return -1;
}

/* flag's getopt code: its TOOL_LO_ code, else (a row the list above
 * lacks) one after them, by its place among such rows of the table. */
static int code_of(const char *flag) {
  int i = coded_index(flag), k = 0;
  if (i >= 0)
    return TOOL_LOADER_OPT_BASE + i;
  for (size_t j = 0; wds_loader_option_at(j); j++) {
    const char *f = wds_loader_option_at(j)->flag;
    if (strcmp(f, flag) == 0)
      return TOOL_LOADER_OPT_BASE + (int)NCODED + k;
    k += coded_index(f) < 0;
  }
  return -1;
}

/* The getopt entries: the table's rows, then the specials. */
#define MAX_LOADER_OPTS 96
static int tool_parse_source(const char *arg, wds_source_config *out, char *err,
                             size_t errn);

static struct option loader_options[MAX_LOADER_OPTS];
static size_t nloader;

static void build(void) {
  if (nloader)
    return;
  for (size_t i = 0; wds_loader_option_at(i) && nloader + 1 < MAX_LOADER_OPTS;
       i++) {
    const wds_loader_option *r = wds_loader_option_at(i);
    loader_options[nloader++] = (struct option){
        r->flag, r->type == WDS_OPTION_BOOL ? no_argument : required_argument,
        0, code_of(r->flag)};
  }
  for (size_t i = 0; i < NSPECIAL && nloader + 1 < MAX_LOADER_OPTS; i++)
    loader_options[nloader++] = (struct option){
        specials[i].flag, required_argument, 0, code_of(specials[i].flag)};
}

static const char *flag_name(int c) {
  build();
  for (size_t i = 0; i < nloader; i++)
    if (loader_options[i].val == c)
      return loader_options[i].name;
  return NULL;
}

void tool_loader_opts_init(tool_loader_opts *o) {
  static const wds_loader_config init = WDS_LOADER_CONFIG_INIT;
  memset(o, 0, sizeof *o);
  o->cfg = init;
  o->epochs = 1;
}

int tool_loader_options(const struct option *own, struct option *out,
                        size_t cap) {
  size_t n = 0;
  build();
  while (own && own[n].name)
    n++;
  if (n + nloader + 1 > cap)
    return -1;
  memcpy(out, own, n * sizeof *out);
  memcpy(out + n, loader_options, nloader * sizeof *out);
  memset(out + n + nloader, 0, sizeof *out);
  return 0;
}

int tool_option_set(wds_loader_config *cfg, const char *cmd, const char *flag,
                    const char *arg) {
  const wds_loader_option *r;
  char name[64];
  snprintf(name, sizeof name, "--%s", flag);
  if (!(r = wds_loader_option_find(name)))
    return -1;
  if (wds_loader_config_set(cfg, name, arg) != WDS_OK) {
    tool_usage_error(cmd, "%s", wds_last_error());
    return -1;
  }
  return 0;
}

/* Parses "24,8,8" (1 .. max each, at most 2^20 entries) into a malloc'ed
 * array. Returns 0, or -1 after printing the error naming `flag` (without
 * "--"). */
static int tool_parse_rank_batch_sizes(const char *cmd, const char *flag,
                                       const char *arg, uint64_t max,
                                       size_t **out, size_t *count) {
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
  wds_loader_config *cfg = &o->cfg;
  const char *flag = flag_name(c);
  if (!flag)
    return 0;
  /* --max-window, --read-timeout, --retries, the cache and
   * --allow-pipe-from-files apply to a plain reader too (wds bench without
   * --decode): they do not make a loader. */
  if (c != TOOL_LO_MAX_WINDOW && c != TOOL_LO_READ_TIMEOUT &&
      c != TOOL_LO_RETRIES && c != TOOL_LO_CACHE_DIR &&
      c != TOOL_LO_CACHE_SIZE && c != TOOL_LO_ALLOW_PIPE)
    o->given = 1;
  switch (c) {
  case TOOL_LO_EPOCHS:
    if (tool_parse_u64(arg, &o->epochs) != 0 || o->epochs < 1) {
      tool_usage_error(cmd,
                       "--epochs needs a whole number of at least 1, not "
                       "\"%s\"",
                       arg);
      return -1;
    }
    return 1;
  case TOOL_LO_RANK_BATCH_SIZES:
    if (tool_parse_rank_batch_sizes(cmd, flag, arg, (uint64_t)1 << 24,
                                    &o->rank_bs, &cfg->rank_batch_size_count))
      return -1;
    cfg->rank_batch_sizes = o->rank_bs;
    return 1;
  case TOOL_LO_DECODE:
    o->decode = arg;
    return 1;
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
    return 1;
  }
  default:
    break;
  }
  if (tool_option_set(cfg, cmd, flag, arg) != 0)
    return -1;
  switch (c) { /* what the tools and wds-train need to know was given */
  case TOOL_LO_BATCH_SIZE:
    o->batch_size_given = 1;
    break;
  case TOOL_LO_RESUME_AT:
    o->resume_given = 1;
    break;
  default:
    break;
  }
  return 1;
}

int tool_loader_opts_finish(tool_loader_opts *o, const char *cmd) {
  wds_loader_config *cfg = &o->cfg;
  if (tool_cache_finish(cmd, &cfg->cache_dir, cfg->cache_size) != 0)
    return -1;
  if (o->epochs - 1 > UINT64_MAX - cfg->epoch) {
    /* The last epoch would be past 2^64 - 1: the number would wrap to 0
     * and replay epoch 0's order as if it were new. */
    tool_usage_error(cmd,
                     "--epoch %" PRIu64 " with --epochs %" PRIu64
                     " runs past the last epoch number (%" PRIu64
                     "): at most %" PRIu64 " epochs from there",
                     cfg->epoch, o->epochs, UINT64_MAX,
                     UINT64_MAX - cfg->epoch + 1); /* epoch > 0 here */
    return -1;
  }
  if (o->nsources) {
    cfg->sources = o->sources;
    cfg->source_count = o->nsources;
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
    if (cfg->world_size <= 0 && cfg->mode != WDS_MODE_PLAIN) {
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
  /* The rules between options (the library's one check), in flags. */
  if (wds_loader_config_check(cfg, WDS_OPTION_NAMES_FLAG) != WDS_OK) {
    tool_usage_error(cmd, "%s", wds_last_error());
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

int tool_loader_inputs_check(const tool_loader_opts *o, const char *cmd,
                             int nspecs) {
  if (nspecs <= 0 && !o->nsources)
    return tool_usage_error(cmd, "expected a SPEC (or --source)");
  if (nspecs > 0 && o->nsources)
    return tool_usage_error(cmd, "give SPEC... or --source options, not both");
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

/* One --help entry: "  --FLAG VALUE" padded to column 25 (or two
 * blanks after it; a line of its own when it is long), then the help's
 * lines, each indented by 25. */
void tool_option_help_entry(FILE *f, const char *flag, const char *value_name,
                            const char *help) {
  int n = fprintf(f, "  --%s%s%s", flag, value_name ? " " : "",
                  value_name ? value_name : "");
  if (n > 40)
    fprintf(f, "\n%25s", "");
  else
    fprintf(f, "%*s", n <= 23 ? 25 - n : 2, "");
  for (const char *p = help; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    fprintf(f, "%s%.*s\n", p == help ? "" : "                         ",
            (int)len, p);
    p += len + (nl != NULL);
  }
}

int tool_option_help(FILE *f, const char *flag) {
  char name[64];
  snprintf(name, sizeof name, "--%s", flag);
  const wds_loader_option *r = wds_loader_option_find(name);
  if (r) {
    tool_option_help_entry(f, r->flag, r->value_name, r->help);
    return 0;
  }
  for (size_t i = 0; i < NSPECIAL; i++)
    if (strcmp(specials[i].flag, flag) == 0) {
      tool_option_help_entry(f, flag, specials[i].value_name, specials[i].help);
      return 0;
    }
  return -1;
}

static void specials_after(FILE *f, const char *after) {
  for (size_t i = 0; i < NSPECIAL; i++)
    if (after ? specials[i].after && strcmp(specials[i].after, after) == 0
              : !specials[i].after)
      tool_option_help(f, specials[i].flag);
}

void tool_loader_opts_help(FILE *f) {
  fputs("loader options:\n", f);
  specials_after(f, NULL);
  for (size_t i = 0; wds_loader_option_at(i); i++) {
    const wds_loader_option *r = wds_loader_option_at(i);
    tool_option_help(f, r->flag);
    specials_after(f, r->flag);
  }
  fputs("\n" WDS__SIZE_HELP, f);
}

void tool_loader_opts_help_some(FILE *f, const char *const *names) {
  for (const char *const *n = names; *n; n++)
    tool_option_help(f, *n);
}

int tool_loader_options_some(const struct option *own, const char *const *names,
                             struct option *out, size_t cap) {
  size_t n = 0;
  build();
  while (own && own[n].name)
    n++;
  if (n + 1 > cap)
    return -1;
  memcpy(out, own, n * sizeof *out);
  for (const char *const *name = names; *name; name++) {
    size_t i = 0;
    while (i < nloader && strcmp(loader_options[i].name, *name) != 0)
      i++;
    if (i == nloader || n + 2 > cap)
      return -1;
    out[n++] = loader_options[i];
  }
  memset(out + n, 0, sizeof *out);
  return 0;
}

/* The options a --source argument may end in. */
static const char *const source_keys[] = {"weight", "proportion", "repeat",
                                          "index", NULL};

/* Parses one --source argument, SPEC[:weight=W|:proportion=P|:repeat=R]
 * [:index=FILE], into *out (out->spec and out->index_path malloc'ed).
 * Returns 0, or -1 with the reason in err. */
static int tool_parse_source(const char *arg, wds_source_config *out, char *err,
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

/* The reader commands' parsers of single rows: the table's, by flag. */
static int one_row(const char *cmd, const char *flag, const char *arg,
                   wds_loader_config *cfg) {
  static const wds_loader_config init = WDS_LOADER_CONFIG_INIT;
  *cfg = init;
  return tool_option_set(cfg, cmd, flag, arg);
}

int tool_read_timeout(const char *cmd, const char *arg, int *ms) {
  wds_loader_config cfg;
  if (one_row(cmd, "read-timeout", arg, &cfg) != 0)
    return -1;
  *ms = cfg.read_timeout_ms;
  return 0;
}

int tool_retries(const char *cmd, const char *arg, int *retries) {
  wds_loader_config cfg;
  if (one_row(cmd, "retries", arg, &cfg) != 0)
    return -1;
  *retries = cfg.retries;
  return 0;
}

int tool_image_memory_limit(const char *cmd, const char *arg, uint64_t *out) {
  wds_loader_config cfg;
  if (one_row(cmd, "image-memory-limit", arg, &cfg) != 0)
    return -1;
  *out = cfg.image_memory_limit;
  return 0;
}

int tool_cache_finish(const char *cmd, const char **dir, uint64_t size) {
  if (*dir && !**dir) {
    tool_usage_error(cmd, "--cache-dir needs a directory, not \"\"");
    return -1;
  }
  *dir = wds__cache_dir_default(*dir); /* $WDS_CACHE_DIR when not given */
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
