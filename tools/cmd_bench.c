/* cmd_bench.c — `wds bench`: stream every sample, report throughput. The
 * samples are not touched: this measures the reader (I/O, decompression,
 * tar parsing, grouping), which is what the page-cache comparison in
 * docs/performance.md is about. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>

#include "util.h"
#include "wds/reader.h"

static const char bench_usage[] =
    "usage: wds bench [--json] [--buffer-size BYTES] [--max-urls N] SPEC...\n"
    "\n"
    "Streams every sample of the shards without per-sample output and "
    "prints\nsamples, bytes (uncompressed tar stream), seconds, samples/s "
    "and MB/s\n(10^6 bytes per second).\n";

int wds_cmd_bench(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, 0, 'j'},
      {"buffer-size", required_argument, 0, 'b'},
      {"max-urls", required_argument, 0, 'm'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int json = 0, c;
  size_t max_urls = 0, buffer = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
    switch (c) {
    case 'j':
      json = 1;
      break;
    case 'b':
    case 'm':
      if (tool_parse_size(optarg, c == 'b' ? &buffer : &max_urls) != 0) {
        fprintf(stderr, "wds bench: --%s needs a number\n",
                c == 'b' ? "buffer-size" : "max-urls");
        return 2;
      }
      break;
    case 'h':
      fputs(bench_usage, stdout);
      return 0;
    default:
      fputs(bench_usage, stderr);
      return 2;
    }
  }
  if (optind >= argc) {
    fputs(bench_usage, stderr);
    return 2;
  }
  wds_url_list urls = {0};
  if (tool_expand_specs("bench", argv + optind, argc - optind, max_urls, &urls))
    return 1;
  int status = 0;
  wds_reader *r = NULL;
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = (const char *const *)urls.urls;
  cfg.url_count = urls.count;
  cfg.buffer_size_bytes = buffer;
  double t0 = tool_now();
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    fprintf(stderr, "wds bench: %s\n", wds_open_error());
    status = 1;
    goto done;
  }
  const wds_sample *s;
  int rc;
  while ((rc = wds_reader_next(r, &s)) == WDS_OK) {
  }
  double secs = tool_now() - t0;
  if (rc != WDS_EOF) {
    fprintf(stderr, "wds bench: %s\n", wds_reader_error(r));
    status = 1;
    goto done;
  }
  wds_reader_stats st;
  wds_reader_stats_get(r, &st);
  if (secs <= 0)
    secs = 1e-9;
  if (json)
    printf("{\"shards\": %" PRIu64 ", \"samples\": %" PRIu64
           ", \"bytes\": %" PRIu64 ", \"field_bytes\": %" PRIu64
           ", \"seconds\": %.6f, \"samples_per_s\": %.1f, \"mb_per_s\": "
           "%.1f}\n",
           st.shards, st.samples, st.tar_bytes, st.field_bytes, secs,
           (double)st.samples / secs, (double)st.tar_bytes / secs / 1e6);
  else
    printf("shards %" PRIu64 "  samples %" PRIu64 "  bytes %" PRIu64
           "  seconds %.3f  samples/s %.0f  MB/s %.1f\n",
           st.shards, st.samples, st.tar_bytes, secs, (double)st.samples / secs,
           (double)st.tar_bytes / secs / 1e6);
done:
  wds_reader_close(r);
  wds_url_list_free(&urls);
  return status;
}
