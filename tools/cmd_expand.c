/* cmd_expand.c — `wds expand`: print the URLs a shard spec expands to.
 *
 * One URL per line, in order, for each SPEC in turn; each SPEC is expanded
 * on its own (the limit applies to each). Exit status: 0 on success, 1 when
 * a spec cannot be expanded or stdout cannot be written, 2 on a usage error.
 * s3:// listings take --read-timeout and --retries as a shard read does
 * (tool_expand_specs). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_opts.h"
#include "util.h"
#include "wds/spec.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: wds expand [--max-urls N] [--read-timeout S] [--retries N] "
          "SPEC...\n"
          "\n"
          "Prints the URLs each SPEC expands to, one per line.\n"
          "\n"
          "A SPEC is one or more parts joined by \"::\"; a part is @FILE (one\n"
          "spec per line, '#' comments) or a pattern: ${NAME} is replaced by\n"
          "the environment variable WDS_NAME, then braces are expanded as\n"
          "Python's braceexpand does: {000..099} {a,b} {0..10..2} {a..e}.\n"
          "An s3:// URL whose key has a glob (s3://b/train/shard-*.tar; '*'\n"
          "stays in one '/' component) or ends in '/' (every shard under the\n"
          "prefix) then becomes the objects a bucket listing gives, sorted.\n"
          "\n"
          "options:\n"
          "  --max-urls N  refuse a SPEC that expands past N URLs\n"
          "                (default %zu)\n"
          "  --read-timeout S  an s3:// listing that delivers no data for S\n"
          "                seconds fails (default 300; 0: wait forever)\n"
          "  --retries N   s3:// listings: tries again N times (default 5; 0:\n"
          "                none)\n" TOOL_ALLOW_PIPE_HELP
          "  -h, --help    show this help\n",
          (size_t)WDS_DEFAULT_MAX_URLS);
}

int tool_cmd_expand(int argc, char **argv) {
  static const struct option opts[] = {
      {"max-urls", required_argument, 0, 'm'},
      {"read-timeout", required_argument, 0, 't'},
      {"retries", required_argument, 0, 'R'},
      TOOL_ALLOW_PIPE_OPTION,
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  size_t max_urls = 0;
  int i, c, timeout_ms = 0, retries = 0;

  tool_stdout_init("expand");
  optind = 1;
  while ((c = tool_getopt("wds expand", argc, argv, "h", opts)) != -1) {
    switch (c) {
    case TOOL_OPT_ALLOW_PIPE:
      tool_allow_pipe_from_files = 1;
      break;
    case 'h':
      usage(stdout);
      return tool_stdout_flush() != 0;
    case 't':
      if (tool_read_timeout("wds expand", optarg, &timeout_ms))
        return 2;
      break;
    case 'R':
      if (tool_retries("wds expand", optarg, &retries))
        return 2;
      break;
    case 'm':
      if (tool_parse_size(optarg, &max_urls) != 0)
        return tool_usage_error("wds expand", "invalid --max-urls value \"%s\"",
                                optarg);
      break;
    default:
      return 2;
    }
  }
  if (optind >= argc)
    return tool_usage_error("wds expand", "no SPEC given");

  for (i = optind; i < argc; i++) {
    wds_url_list list = {0};
    int rc = tool_expand_specs("expand", argv + i, 1, max_urls, timeout_ms,
                               retries, &list);
    if (rc != 0)
      return rc;
    for (size_t j = 0; j < list.count; j++) {
      if (fputs(list.urls[j], stdout) == EOF || putchar('\n') == EOF)
        break;
    }
    wds_url_list_free(&list);
    if (tool_stdout_check() != 0)
      return 1;
  }
  return tool_stdout_flush() != 0 ? 1 : 0;
}
