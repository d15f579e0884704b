/* reader_opts.h — the shard-reading options the reader commands share.
 *
 * `wds cat`, `ls`, `index`, `verify` and `write` (its SPEC inputs) read
 * shards: --read-timeout, --retries, --max-window, --cache-dir,
 * --cache-size and --allow-pipe-from-files (rows of the loader's table,
 * parsed by wds_loader_config_set, so with the loader commands' grammar
 * and messages) and --max-urls. A command appends the entries with
 * tool_reader_options(), hands the codes it does not know to
 * tool_reader_opt(), calls tool_reader_opts_finish() after the loop, and
 * tool_reader_expand() / tool_reader_opts_apply() to use them. */
#ifndef WDS_TOOLS_READER_OPTS_H
#define WDS_TOOLS_READER_OPTS_H

#include <getopt.h>
#include <stdio.h>

#include "loader_opts.h"
#include "wds/reader.h"
#include "wds/spec.h"

/* getopt_long codes of the reader options start here. */
#define TOOL_READER_OPT_BASE 1200

typedef struct tool_reader_opts {
  wds_loader_config cfg; /* the rows' values (WDS_LOADER_CONFIG_INIT plus
                            the options given) */
  size_t max_urls;       /* --max-urls; 0 = no limit */
} tool_reader_opts;

void tool_reader_opts_init(tool_reader_opts *o);

/* As tool_loader_options, with the reader options. */
int tool_reader_options(const struct option *own, struct option *out,
                        size_t cap);

/* 1 if c was a reader option, 0 if not, -1 for a bad value (printed). */
int tool_reader_opt(tool_reader_opts *o, int c, const char *arg,
                    const char *cmd);

/* After the options: the cache directory's default ($WDS_CACHE_DIR),
 * --cache-size without one refused, --allow-pipe-from-files for the
 * spec expansion (tool_allow_pipe_from_files). 0, or -1 after printing the
 * usage error. */
int tool_reader_opts_finish(tool_reader_opts *o, const char *cmd);

/* The options into a reader config. */
void tool_reader_opts_apply(const tool_reader_opts *o, wds_reader_config *rc);

/* tool_expand_specs with the options' --max-urls, --read-timeout and
 * --retries. */
int tool_reader_expand(const tool_reader_opts *o, const char *cmd, char **specs,
                       int nspecs, wds_url_list *out);

/* Their --help entries. */
void tool_reader_opts_help(FILE *f);

#endif
