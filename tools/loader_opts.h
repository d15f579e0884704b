/* loader_opts.h — the loader options `wds batches`, `wds bench` and
 * `wds-train` share, made from the library's option table (wds/loader.h:
 * wds_loader_option; getopt entries, parsing, --help), plus --decode,
 * --rank-batch-sizes, --source and --epochs.
 *
 * A command builds its getopt_long table with tool_loader_options() (its own
 * options first), hands every option code it does not know to
 * tool_loader_opt(), and calls tool_loader_opts_finish() after the loop:
 *
 *   tool_loader_opts lo;
 *   tool_loader_opts_init(&lo);
 *   ...  default: switch (tool_loader_opt(&lo, c, optarg, "wds batches")) ...
 *   if (tool_loader_opts_finish(&lo, "wds batches") != 0) return 2;
 *   wds_loader_open(&lo.cfg, &l);  ...  tool_loader_opts_free(&lo);
 *
 * CMD is the command as typed ("wds batches", "wds-train"). Usage errors are
 * printed as "CMD: --flag ...; see 'CMD --help'" (tools/opts.h) and
 * reported to the caller, which exits with status 2. */
#ifndef WDS_TOOLS_LOADER_OPTS_H
#define WDS_TOOLS_LOADER_OPTS_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "wds/loader.h"

/* getopt_long codes of the loader options start here (commands use
 * characters below 256 for their own). */
#define TOOL_LOADER_OPT_BASE 1000

/* The loader options' getopt_long codes, for a command that takes some of
 * them (tool_loader_options_some) and needs to know which were given. */
enum {
  TOOL_LO_RANK = TOOL_LOADER_OPT_BASE,
  TOOL_LO_WORLD,
  TOOL_LO_WORKERS,
  TOOL_LO_SEED,
  TOOL_LO_EPOCH,
  TOOL_LO_EPOCHS,
  TOOL_LO_MODE,
  TOOL_LO_SAMPLES_PER_EPOCH,
  TOOL_LO_BATCH_SIZE,
  TOOL_LO_DROP_LAST,
  TOOL_LO_LAST_BATCH,
  TOOL_LO_SHUFFLE_BUFFER,
  TOOL_LO_SHUFFLE_INITIAL,
  TOOL_LO_NO_SHARD_SHUFFLE,
  TOOL_LO_DECODE,
  TOOL_LO_IMAGE_SIZE,
  TOOL_LO_CROP,
  TOOL_LO_PREFETCH,
  TOOL_LO_ON_ERROR,
  TOOL_LO_INDEX,
  TOOL_LO_RESUME_AT,
  TOOL_LO_MAX_SAMPLE_BYTES,
  TOOL_LO_READ_TIMEOUT,
  TOOL_LO_SHUFFLE_BYTES,
  TOOL_LO_MAX_WINDOW,
  TOOL_LO_RETRIES,
  TOOL_LO_RANK_BATCH_SIZES,
  TOOL_LO_CACHE_DIR,
  TOOL_LO_CACHE_SIZE,
  TOOL_LO_ALLOW_PIPE,
  TOOL_LO_SOURCE,
  TOOL_LO_EAGER_NEXT_EPOCH,
  TOOL_LO_DEFER_READS,
  TOOL_LO_IMAGE_MEMORY_LIMIT,
  TOOL_LO_JPEG_DECODE
};

typedef struct tool_loader_opts {
  wds_loader_config cfg; /* from WDS_LOADER_CONFIG_INIT plus the options */
  uint64_t epochs;       /* --epochs: how many epochs to run (default 1) */
  const char *decode;    /* --decode text; NULL when not given */
  int given;             /* any loader option was given (but
                            --max-window, which readers take too) */
  int resume_given;
  int batch_size_given;
  wds_field_spec *fields; /* parsed --decode (cfg.fields points here) */
  char *field_storage;
  size_t *rank_bs;            /* --rank-batch-sizes (cfg.rank_batch_sizes points
                                 here) */
  wds_source_config *sources; /* parsed --source options (cfg.sources
                                 points here once finished); specs owned */
  size_t nsources;
} tool_loader_opts;

void tool_loader_opts_init(tool_loader_opts *o);

/* Writes own (terminated by an all-zero entry) followed by the loader
 * options and a terminator into out[0..cap). Returns 0, or -1 if cap is
 * too small. */
int tool_loader_options(const struct option *own, struct option *out,
                        size_t cap);

/* As tool_loader_options, with only the loader options named (without
 * "--"; NULL-terminated). -1 if cap is too small or a name is unknown. */
int tool_loader_options_some(const struct option *own, const char *const *names,
                             struct option *out, size_t cap);

/* Handles getopt_long code c with argument arg. Returns 1 if it was a loader
 * option, 0 if not (the caller's usage error), -1 for a bad value (the
 * message is printed). */
int tool_loader_opt(tool_loader_opts *o, int c, const char *arg,
                    const char *cmd);

/* The input of `wds batches` and `wds bench`: nspecs SPEC arguments or
 * --source options, one of the two. 0, or the usage error's status (2)
 * after printing it. */
int tool_loader_inputs_check(const tool_loader_opts *o, const char *cmd,
                             int nspecs);

/* Checks combinations and parses --decode into cfg.fields. Returns 0, or -1
 * after printing the message. */
int tool_loader_opts_finish(tool_loader_opts *o, const char *cmd);

void tool_loader_opts_free(tool_loader_opts *o);

/* The options' help text, for both commands' --help. */
void tool_loader_opts_help(FILE *f);

/* The help entries of the loader options named (NULL-terminated), in that
 * order, for a command that takes only those (wds-train). */
void tool_loader_opts_help_some(FILE *f, const char *const *names);

const char *tool_mode_name(wds_mode m);

/* With --rank-batch-sizes: "CMD: rank R of N: batch size B (per rank:
 * 24,8,8), S steps per epoch" on f; nothing without. */
void tool_print_rank_batches(FILE *f, const char *cmd,
                             const wds_loader_config *cfg, const wds_loader *l);

/* The rank the loader of cfg runs as (cfg's, else the environment's). */
int tool_loader_rank(const wds_loader_config *cfg);

/* Single rows of the table, for a command that takes one alone (`wds
 * expand`, `wds verify --image-memory-limit`). --read-timeout SECONDS
 * (fractions allowed; 0 = wait forever) into a config's read_timeout_ms.
 * Returns 0, or -1 after printing the error. */
int tool_read_timeout(const char *cmd, const char *arg, int *ms);

/* --image-memory-limit SIZE: the per-image decode budget
 * (wds_loader_config.image_memory_limit; `wds verify --decode`'s checker);
 * at least 1 byte. 0, or -1 after printing the usage error. */
int tool_image_memory_limit(const char *cmd, const char *arg, uint64_t *bytes);

/* --retries N (0..1000; 0 = none) into a config's retries: how many times
 * an http(s):// transfer that failed transiently is tried again. Returns 0,
 * or -1 after printing the error. */
int tool_retries(const char *cmd, const char *arg, int *retries);

/* After the options: *dir defaults to $WDS_CACHE_DIR (when set and not
 * empty); --cache-size without a cache directory is a usage error. Returns
 * 0, or -1 after printing the error. */
int tool_cache_finish(const char *cmd, const char **dir, uint64_t size);

/* After a run: a note on stderr when the cache could not be used for some
 * shards (errors: the stats' cache_errors; none: nothing printed). */
void tool_cache_note(const char *cmd, const char *dir, uint64_t errors);

/* The row of the loader's option table whose CLI flag is flag (without
 * "--") set from arg (NULL: a flag without a value sets the row's
 * cli_value) through wds_loader_config_set. 0, or -1 after printing its
 * message as a usage error of cmd. */
int tool_option_set(wds_loader_config *cfg, const char *cmd, const char *flag,
                    const char *arg);

/* The --help entry of flag (a row of the table, or one of this file's
 * own). 0, or -1 if there is none. */
int tool_option_help(FILE *f, const char *flag);

/* One --help entry in the loader options' layout: "  --FLAG VALUE"
 * (value_name may be NULL) and help's lines, indented by 25 columns. */
void tool_option_help_entry(FILE *f, const char *flag, const char *value_name,
                            const char *help);

#endif
