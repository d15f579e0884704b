/* wds.c — the `wds` command: one binary, one subcommand per task. */
#include <stdio.h>
#include <string.h>

#include "shards/netrc.h"
#include "signals.h"
#include "util.h"
#include "wds/version.h"

static const struct {
  const char *name;
  int (*run)(int, char **);
  const char *help;
} commands[] = {
    {"expand", tool_cmd_expand, "print the URLs a shard spec expands to"},
    {"ls", tool_cmd_ls, "list the samples of shards (--json, --summary)"},
    {"batches", tool_cmd_batches,
     "run the loader, print each batch's keys (--save: .npy)"},
    {"bench", tool_cmd_bench,
     "report throughput of the reader, or of the loader"},
    {"synth", tool_cmd_synth, "write synthetic shards (demos, benchmarks)"},
    {"write", tool_cmd_write,
     "write shards from a directory, a manifest or shards (re-shard)"},
    {"index", tool_cmd_index, "write a JSON index of a shard set"},
    {"verify", tool_cmd_verify, "read shards to the end, report every problem"},
    {"cat", tool_cmd_cat, "write the samples as one tar stream to stdout"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: wds <command> [options] [SPEC...]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\n'wds <command> --help' describes a command. A SPEC is a shard "
             "spec: paths or URLs\nwith braces (data-{000..099}.tar), joined "
             "by '::', @FILE lists, pipe:CMD or -.\n");
}

/* The library's warnings without a log to go to (shards/netrc.h). */
static void warn_stderr(const char *msg) { fprintf(stderr, "wds: %s\n", msg); }

int main(int argc, char **argv) {
  wds__netrc_set_warn_sink(warn_stderr);
  if (argc < 2) {
    char names[256];
    size_t used = 0;
    names[0] = '\0';
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
      int n = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                       commands[i].name);
      if (n < 0 || (size_t)n >= sizeof names - used)
        break;
      used += (size_t)n;
    }
    return tool_usage_error("wds", "no command given (%s)", names);
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("wds %s\n", wds_version());
    return 0;
  }
  tool_signals_install();
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (strcmp(argv[1], commands[i].name) == 0)
      return commands[i].run(argc - 1, argv + 1);
  return tool_usage_error("wds", "unknown command '%s'", argv[1]);
}
