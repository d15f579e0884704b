/* cmd_bench.c — `wds bench`: report throughput.
 *
 * Without loader options it streams every sample through the reader and
 * does not touch them: this measures the reader (I/O, decompression, tar
 * parsing, grouping), which is what the page-cache comparison in
 * docs/performance.md is about. With loader options (--decode, and any
 * other of tool_loader_opts_help's) it runs the whole loader for --epochs
 * epochs, releasing each batch at once, and reports samples/s, MB/s of
 * field bytes, peak RSS and the loader's per-stage times. A progress line
 * is rewritten on stderr (at most 4 times a second) when stderr is a
 * terminal. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/json.h"
#include "base/size.h"
#include "gpu_jpeg.h"
#include "loader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/reader.h"

static const char bench_usage[] =
    "usage: wds bench [--json] [--buffer-size SIZE] [--max-urls N] SPEC...\n"
    "       wds bench [--json] --decode FIELDS [loader options] SPEC...\n"
    "       wds bench [--json] --decode FIELDS [loader options] --source ...\n"
    "\n"
    "Without loader options: streams every sample of the shards without\n"
    "per-sample output and prints samples, bytes (uncompressed tar stream),\n"
    "seconds, samples/s and MB/s (10^6 bytes per second).\n"
    "\n"
    "With loader options (--decode is then required): runs the loader for\n"
    "--epochs epochs and prints batches, samples, seconds, samples/s, MB/s\n"
    "of field bytes read from the shards, peak RSS (getrusage), and the\n"
    "time of each loader stage: summed over the threads that run it, in\n"
    "seconds, and as a busy share of those threads' wall time:\n"
    "  read, shuffle, decode   the workers': % of seconds x workers (read\n"
    "                          includes grouping members into samples)\n"
    "  batch                   the collator's: % of seconds\n"
    "  wait                    this program blocked in next(): % of seconds\n"
    "  consumer                the collator blocked for a free batch slot,\n"
    "                          i.e. waiting on this program: % of seconds\n"
    "On a terminal a progress line is kept up to date on stderr.\n"
    "--buffer-size sets the loader's read buffer; --warmup-epochs N runs N\n"
    "epochs first, untimed (the figures are then for the steady state).\n"
    "\n";

/* The reader benchmark (no loader options). */
static int bench_reader(const wds_url_list *urls, size_t buffer,
                        const wds_loader_config *lc, int json) {
  int status = 0;
  wds_reader *r = NULL;
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = (const char *const *)urls->urls;
  cfg.url_count = urls->count;
  cfg.buffer_size_bytes = buffer;
  cfg.max_window_bytes = lc->max_window_bytes; /* --max-window */
  cfg.read_timeout_ms = lc->read_timeout_ms;   /* --read-timeout */
  cfg.retries = lc->retries;                   /* --retries */
  cfg.cache_dir = lc->cache_dir;               /* --cache-dir */
  cfg.cache_size = lc->cache_size;             /* --cache-size */
  double t0 = tool_now();
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    fprintf(stderr, "wds bench: %s\n", wds_last_error());
    status = 1;
    goto done;
  }
  tool_signals_reader(r);
  const wds_sample *s;
  int rc;
  while ((rc = wds_reader_next(r, &s)) == WDS_OK) {
  }
  double secs = tool_now() - t0;
  if (rc == WDS_ERR_CANCELLED && tool_signal_caught()) {
    status = tool_interrupted("bench", "after %.1f s, no figures", secs);
    goto done;
  }
  if (rc != WDS_EOF) {
    fprintf(stderr, "wds bench: %s\n", wds_last_error());
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
  tool_signals_reader(NULL);
  wds_reader_close(r);
  return status;
}

/* Peak resident set size in bytes (Linux reports ru_maxrss in KiB). */
static uint64_t peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (uint64_t)ru.ru_maxrss * 1024;
}

static void progress(uint64_t epoch, uint64_t batch, uint64_t per_epoch,
                     uint64_t samples, double secs) {
  char total[32] = "";
  if (per_epoch)
    snprintf(total, sizeof total, "/%" PRIu64, per_epoch);
  fprintf(stderr,
          "\r  epoch %" PRIu64 "  batch %" PRIu64 "%s  samples %" PRIu64
          "  %.0f samples/s   ",
          epoch, batch, total, samples, secs > 0 ? (double)samples / secs : 0);
}

/* The loader benchmark: --epochs epochs, every batch released at once. */
static int bench_loader(const tool_loader_opts *lo, int json, uint64_t warmup) {
  static const char *const stage_names[] = {"read",  "shuffle", "decode",
                                            "batch", "wait",    "consumer"};
  int status = 0, rc = WDS_OK;
  int tty = isatty(STDERR_FILENO), shown = 0;
  wds_loader *l = NULL;
  wds_gpu_jpeg *gj = NULL; /* --jpeg-decode gpu */
  tool_gpu_batch gb;
  memset(&gb, 0, sizeof gb);
  uint64_t batches = 0, samples = 0;
  double t0 = tool_now(), last_shown = t0;
  if (tool_gpu_jpeg_open("bench", &lo->cfg, &gj) != 0)
    return 1;
  if (wds_loader_open(&lo->cfg, &l) != WDS_OK) {
    fprintf(stderr, "wds bench: %s\n", wds_last_error());
    wds_gpu_jpeg_close(gj);
    return 1;
  }
  tool_signals_loader(0, l);
  uint64_t per_epoch = wds_loader_epoch_batches(l);
  /* Warm-up epochs fill the loader's recycled memory and the page cache;
   * they are run but neither timed nor counted. */
  for (uint64_t e = 0; e < warmup; e++) {
    const wds_batch *b;
    while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
      int bad = gj && tool_gpu_jpeg_batch("bench", gj, l, b, 0, &gb) != 0;
      wds_loader_release(l, b);
      if (bad) {
        status = 1;
        goto done;
      }
    }
    if (rc != WDS_EOF) {
      status = rc == WDS_ERR_CANCELLED && tool_signal_caught()
                   ? tool_interrupted("bench", "during the warm-up")
                   : (fprintf(stderr, "wds bench: %s\n", wds_last_error()), 1);
      goto done;
    }
  }
  wds_loader_stats warm;
  wds_loader_stats_get(l, &warm);
  t0 = tool_now();
  last_shown = t0;
  for (uint64_t e = 0; e < lo->epochs; e++) {
    const wds_batch *b;
    while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
      batches++;
      samples += b->rows;
      uint64_t ep = b->epoch, index = b->index;
      /* the images decoded on the GPU, waited for: part of the time */
      int bad = gj && tool_gpu_jpeg_batch("bench", gj, l, b, 0, &gb) != 0;
      wds_loader_release(l, b);
      if (bad) {
        status = 1;
        goto done;
      }
      double now = tool_now();
      if (tty && now - last_shown >= 0.25) {
        progress(ep, index + 1, per_epoch, samples, now - t0);
        last_shown = now;
        shown = 1;
      }
    }
    if (rc != WDS_EOF)
      break;
  }
  double secs = tool_now() - t0;
  if (shown)
    fputs("\r\033[K", stderr); /* clear the progress line */
  if (rc == WDS_ERR_CANCELLED && tool_signal_caught()) {
    status = tool_interrupted("bench", "%llu batch%s in %.1f s, no figures",
                              (unsigned long long)batches,
                              batches == 1 ? "" : "es", secs);
    goto done;
  }
  if (rc != WDS_EOF) {
    fprintf(stderr, "wds bench: %s\n", wds_last_error());
    status = 1;
    goto done;
  }
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  st.bytes_read -= warm.bytes_read;
  st.read_ns -= warm.read_ns;
  st.shuffle_ns -= warm.shuffle_ns;
  st.decode_ns -= warm.decode_ns;
  st.batch_ns -= warm.batch_ns;
  st.wait_ns -= warm.wait_ns;
  st.slot_wait_ns -= warm.slot_wait_ns;
  st.skipped -= warm.skipped;
  st.fill_rows -= warm.fill_rows;
  st.shards_opened -= warm.shards_opened;
  st.deferred_fields -= warm.deferred_fields;
  st.deferred_bytes -= warm.deferred_bytes;
  if (secs <= 0)
    secs = 1e-9;
  int workers = lo->cfg.workers > 0 ? lo->cfg.workers : 4;
  size_t nrb = lo->cfg.rank_batch_size_count;
  int rank = tool_loader_rank(&lo->cfg);
  size_t batch_size = nrb && rank >= 0 && (size_t)rank < nrb
                          ? lo->cfg.rank_batch_sizes[rank]
                          : lo->cfg.batch_size;
  const uint64_t ns[] = {st.read_ns,  st.shuffle_ns, st.decode_ns,
                         st.batch_ns, st.wait_ns,    st.slot_wait_ns};
  /* Busy share of the threads running each stage (see the usage). */
  const double threads[] = {workers, workers, workers, 1, 1, 1};
  double rss_mb = (double)peak_rss_bytes() / 1e6;
  if (json) {
    printf(
        "{\"mode\": \"%s\", \"epochs\": %" PRIu64 ", \"workers\": %d, "
        "\"batch_size\": %zu, \"batches\": %" PRIu64 ", \"samples\": %" PRIu64
        ", \"bytes_read\": %" PRIu64 ", \"seconds\": %.6f, "
        "\"samples_per_s\": %.1f, \"mb_per_s\": %.1f, \"peak_rss_mb\": %.1f, "
        "\"peak_pool_bytes\": %" PRIu64 ", \"skipped\": %" PRIu64
        ", \"fill_rows\": %" PRIu64 ", \"shards_opened\": %" PRIu64
        ", \"deferred_fields\": %" PRIu64 ", \"deferred_bytes\": %" PRIu64
        ", %s",
        tool_mode_name(lo->cfg.mode), lo->epochs, workers, batch_size, batches,
        samples, st.bytes_read, secs, (double)samples / secs,
        (double)st.bytes_read / secs / 1e6, rss_mb, st.peak_pool_bytes,
        st.skipped, st.fill_rows, st.shards_opened, st.deferred_fields,
        st.deferred_bytes, nrb ? "" : "\"allocator\": ");
    if (nrb) {
      printf("\"rank\": %d, \"rank_batch_sizes\": [", rank);
      for (size_t i = 0; i < nrb; i++)
        printf(i ? ", %zu" : "%zu", lo->cfg.rank_batch_sizes[i]);
      printf("], \"steps_per_epoch\": %" PRIu64 ", \"allocator\": ", per_epoch);
    }
    const char *alloc = wds_loader_allocator_name(l);
    alloc = alloc ? alloc : "";
    wds__json_write_string(stdout, alloc, strlen(alloc));
    printf(", \"stages\": {");
    for (int i = 0; i < 6; i++)
      printf("%s\"%s\": {\"seconds\": %.6f, \"busy_pct\": %.1f}", i ? ", " : "",
             stage_names[i], (double)ns[i] / 1e9,
             100.0 * (double)ns[i] / 1e9 / (secs * threads[i]));
    printf("}");
    if (gj)
      tool_gpu_jpeg_json(stdout, gj);
    printf("}\n");
  } else {
    printf("batches %" PRIu64 "  samples %" PRIu64 "  seconds %.3f  samples/s "
           "%.0f  MB/s %.1f  peak RSS %.1f MB\n",
           batches, samples, secs, (double)samples / secs,
           (double)st.bytes_read / secs / 1e6, rss_mb);
    tool_print_rank_batches(stdout, "wds bench", &lo->cfg, l);
    printf("stages (thread-seconds, busy %%):");
    for (int i = 0; i < 6; i++)
      printf("  %s %.3f (%.0f%%)", stage_names[i], (double)ns[i] / 1e9,
             100.0 * (double)ns[i] / 1e9 / (secs * threads[i]));
    printf("\n");
    if (st.skipped || st.fill_rows)
      printf("skipped %" PRIu64 "  invalid rows %" PRIu64 "\n", st.skipped,
             st.fill_rows);
    if (gj)
      tool_gpu_jpeg_report(stdout, gj);
  }
done:
  tool_signals_loader(0, NULL);
  wds_loader_close(l);
  wds_gpu_jpeg_close(gj);
  tool_gpu_batch_free(&gb);
  return status;
}

int tool_cmd_bench(int argc, char **argv) {
  static const struct option own[] = {
      {"json", no_argument, 0, 'j'},
      {"buffer-size", required_argument, 0, 'b'},
      {"max-urls", required_argument, 0, 'm'},
      {"warmup-epochs", required_argument, 0, 'w'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  struct option opts[64];
  tool_loader_opts lo;
  tool_loader_opts_init(&lo);
  int json = 0, c, r, status = 0;
  size_t max_urls = 0, buffer = 0, warmup = 0;
  wds_url_list urls = {0};
  tool_stdout_init("bench");
  if (tool_loader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = tool_getopt("wds bench", argc, argv, "jh", opts)) != -1) {
    switch (c) {
    case 'j':
      json = 1;
      break;
    case 'b': {
      uint64_t v;
      if (wds__size_parse(optarg, &v) != 0 || v > SIZE_MAX) {
        status = tool_usage_error(
            "wds bench", "--buffer-size needs a SIZE, not \"%s\"", optarg);
        goto done;
      }
      buffer = (size_t)v;
      break;
    }
    case 'm':
      if (tool_parse_size(optarg, &max_urls) != 0) {
        status = tool_usage_error(
            "wds bench", "--max-urls needs a number, not \"%s\"", optarg);
        goto done;
      }
      break;
    case 'w':
      if (tool_parse_size(optarg, &warmup) != 0) {
        status = tool_usage_error(
            "wds bench", "--warmup-epochs needs a number, not \"%s\"", optarg);
        goto done;
      }
      break;
    case 'h':
      fputs(bench_usage, stdout);
      tool_loader_opts_help(stdout);
      return tool_stdout_check() != 0; /* longer than a buffer */
    case TOOL_OPT_BAD:
      status = 2;
      goto done;
    default:
      r = tool_loader_opt(&lo, c, optarg, "wds bench");
      if (r == 1)
        break;
      status = 2;
      goto done;
    }
  }
  if ((status = tool_loader_inputs_check(&lo, "wds bench", argc - optind)))
    goto done;
  if (lo.given && !lo.decode) {
    status = tool_usage_error("wds bench",
                              "loader options need --decode FIELDS (without "
                              "loader options bench measures the reader)");
    goto done;
  }
  if (lo.given && tool_loader_opts_finish(&lo, "wds bench") != 0) {
    status = 2;
    goto done;
  }
  /* The reader benchmark takes the cache too (finish did it for a loader). */
  if (!lo.given &&
      tool_cache_finish("wds bench", &lo.cfg.cache_dir, lo.cfg.cache_size)) {
    status = 2;
    goto done;
  }
  tool_allow_pipe_from_files = lo.cfg.allow_pipe_from_files;
  if (lo.nsources) {
    lo.cfg.read_buffer_bytes = buffer;
    status = bench_loader(&lo, json, warmup);
    goto done;
  }
  if ((status =
           tool_expand_specs("bench", argv + optind, argc - optind, max_urls,
                             lo.cfg.read_timeout_ms, lo.cfg.retries, &urls)))
    goto done;
  if (lo.given) {
    lo.cfg.urls = (const char *const *)urls.urls;
    lo.cfg.url_count = urls.count;
    lo.cfg.read_buffer_bytes = buffer;
    status = bench_loader(&lo, json, warmup);
  } else {
    status = bench_reader(&urls, buffer, &lo.cfg, json);
  }
done:
  wds_url_list_free(&urls);
  tool_loader_opts_free(&lo);
  if (tool_stdout_flush() != 0)
    status = 1;
  return status;
}
