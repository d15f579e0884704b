/* reader_opts.c — the shard-reading options of the reader commands (see
 * reader_opts.h): rows of the loader's option table, parsed and described
 * by it through loader_opts.c, and --max-urls. */
#include "reader_opts.h"

#include <string.h>

#include "opts.h"
#include "util.h"

/* ---- the reader commands' options ---- */

/* The table's rows they take, by flag; --max-urls is code BASE + N. */
static const char *const reader_rows[] = {
    "read-timeout",  "retries",    "max-window",
    "cache-dir",     "cache-size", "allow-pipe-from-files",
    "max-unverified"};
#define NREADER (sizeof reader_rows / sizeof *reader_rows)
#define TOOL_READER_MAX_URLS (TOOL_READER_OPT_BASE + (int)NREADER)

static const char max_urls_help[] = "refuse specs that expand to more than "
                                    "N URLs";

void tool_reader_opts_init(tool_reader_opts *o) {
  static const wds_loader_config init = WDS_LOADER_CONFIG_INIT;
  memset(o, 0, sizeof *o);
  o->cfg = init;
}

int tool_reader_options(const struct option *own, struct option *out,
                        size_t cap) {
  size_t n = 0;
  while (own && own[n].name)
    n++;
  if (n + NREADER + 2 > cap)
    return -1;
  memcpy(out, own, n * sizeof *out);
  for (size_t i = 0; i < NREADER; i++) {
    char name[64];
    snprintf(name, sizeof name, "--%s", reader_rows[i]);
    const wds_loader_option *r = wds_loader_option_find(name);
    out[n++] = (struct option){
        reader_rows[i],
        r && r->type == WDS_OPTION_BOOL ? no_argument : required_argument, 0,
        TOOL_READER_OPT_BASE + (int)i};
  }
  out[n++] =
      (struct option){"max-urls", required_argument, 0, TOOL_READER_MAX_URLS};
  memset(out + n, 0, sizeof *out);
  return 0;
}

int tool_reader_opt(tool_reader_opts *o, int c, const char *arg,
                    const char *cmd) {
  if (c == TOOL_READER_MAX_URLS) {
    if (tool_parse_size(arg, &o->max_urls) != 0) {
      tool_usage_error(cmd, "--max-urls needs a number, not \"%s\"", arg);
      return -1;
    }
    return 1;
  }
  if (c < TOOL_READER_OPT_BASE || c >= TOOL_READER_MAX_URLS)
    return 0;
  return tool_option_set(&o->cfg, cmd, reader_rows[c - TOOL_READER_OPT_BASE],
                         arg)
             ? -1
             : 1;
}

int tool_reader_opts_finish(tool_reader_opts *o, const char *cmd) {
  if (o->cfg.allow_pipe_from_files)
    tool_allow_pipe_from_files = 1;
  return tool_cache_finish(cmd, &o->cfg.cache_dir, o->cfg.cache_size);
}

void tool_reader_opts_apply(const tool_reader_opts *o, wds_reader_config *rc) {
  rc->read_timeout_ms = o->cfg.read_timeout_ms;
  rc->retries = o->cfg.retries;
  rc->max_window_bytes = o->cfg.max_window_bytes;
  rc->max_unverified_bytes = o->cfg.max_unverified_bytes;
  rc->cache_dir = o->cfg.cache_dir;
  rc->cache_size = o->cfg.cache_size;
  rc->allow_pipe_from_files = o->cfg.allow_pipe_from_files;
}

int tool_reader_expand(const tool_reader_opts *o, const char *cmd, char **specs,
                       int nspecs, wds_url_list *out) {
  return tool_expand_specs(cmd, specs, nspecs, o->max_urls,
                           o->cfg.read_timeout_ms, o->cfg.retries, out);
}

void tool_reader_opts_help(FILE *f) {
  tool_option_help_entry(f, "max-urls", "N", max_urls_help);
  for (size_t i = 0; i < NREADER; i++)
    tool_option_help(f, reader_rows[i]);
}
