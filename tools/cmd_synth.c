/* cmd_synth.c — `wds synth`: write a synthetic shard set for demos and
 * benchmarks.
 *
 * Samples go through the public writer (wds/writer.h) with max_count set to
 * --samples, so shard i holds samples [i*N, (i+1)*N) and is named by the
 * writer from the PATTERN (parsed there: the user's text never reaches printf
 * as a format; temporary name, renamed when complete). Sample data is a pure
 * function of (seed, global sample index) — splitmix64 — so the same options
 * give byte-identical shards on any machine, whatever the split into
 * shards. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "base/rng.h"
#include "base/size.h"
#include "signals.h"
#include "util.h"
#include "wds/writer.h"

static const char synth_usage[] =
    "usage: wds synth [--shards N] [--samples N] [--size SIZE] [--seed S]\n"
    "                 [--level L] PATTERN\n"
    "\n"
    "Writes a synthetic WebDataset shard set, for demos and benchmarks only:\n"
    "the content is pseudo-random bytes, not real data. Shard i (0-based) is\n"
    "named by PATTERN with i in place of its one integer conversion (%d, %i,\n"
    "%u, optionally zero-padded to a width, e.g. demo-%06d.tar; write %% for\n"
    "a literal %). A name ending in .zst is written zstd-compressed.\n"
    "\n"
    "Each shard holds --samples samples (default 100). Sample number k counts\n"
    "across all shards and has the key sample%09d (k) and three fields:\n"
    "  .bin   --size bytes (default 1024) of pseudo-random data from\n"
    "         splitmix64 seeded by (--seed, k); fast, not cryptographic\n"
    "  .cls   the class k % 10 as decimal text\n"
    "  .json  {\"index\": k}\n"
    "The same options always give byte-identical shards.\n"
    "\n"
    "  --shards N     number of shards (default 1)\n"
    "  --samples N    samples per shard (default 100)\n"
    "  --size SIZE    size of the .bin field (default 1024)\n"
    "  --seed S       seed of the data (default 0)\n"
    "  --level L      zstd level for .zst names (default 3)\n"
    "\n"
    "Prints one line: shards, samples, bytes written.\n"
    "\n" WDS__SIZE_HELP;

/* Whether PATTERN has an integer conversion (the writer checks the rest):
 * without one, every shard would get the same name. */
static int has_conversion(const char *s) {
  for (; *s; s++) {
    if (*s != '%')
      continue;
    if (s[1] == '%') {
      s++;
      continue;
    }
    return 1;
  }
  return 0;
}

/* Fills buf with the data of sample k: a stream seeded by (seed, k). */
static void fill_random(uint8_t *buf, size_t n, uint64_t seed, uint64_t k) {
  uint64_t st = seed;
  st = wds__splitmix64(&st) ^ (k * 0xD1B54A32D192ED03ull);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = wds__splitmix64(&st);
    memcpy(buf + i, &v, 8);
  }
  if (i < n) {
    uint64_t v = wds__splitmix64(&st);
    memcpy(buf + i, &v, n - i);
  }
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Writes samples [first, first + count): .bin, .cls, .json (the writer
 * sorts fields by extension, which is this order). */
static int write_samples(wds_writer *w, uint64_t first, uint64_t count,
                         uint8_t *buf, size_t size, uint64_t seed) {
  int rc = WDS_OK;
  for (uint64_t k = first;
       rc == WDS_OK && k < first + count && !tool_signal_caught(); k++) {
    char key[64], cls[32], json[64];
    fill_random(buf, size, seed, k);
    snprintf(key, sizeof key, "sample%09" PRIu64, k);
    int ncls = snprintf(cls, sizeof cls, "%" PRIu64, k % 10);
    int njson = snprintf(json, sizeof json, "{\"index\": %" PRIu64 "}", k);
    wds_writer_field f[3] = {{"bin", buf, size},
                             {"cls", cls, (size_t)ncls},
                             {"json", json, (size_t)njson}};
    rc = wds_writer_write_sample(w, key, f, 3);
  }
  return rc;
}

int tool_cmd_synth(int argc, char **argv) {
  static const struct option opts[] = {{"shards", required_argument, 0, 'n'},
                                       {"samples", required_argument, 0, 's'},
                                       {"size", required_argument, 0, 'z'},
                                       {"seed", required_argument, 0, 'r'},
                                       {"level", required_argument, 0, 'l'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  uint64_t shards = 1, samples = 100, size = 1024, seed = 0;
  long level = 3;
  int c;
  tool_stdout_init("synth");
  optind = 1;
  while ((c = tool_getopt("wds synth", argc, argv, "h", opts)) != -1) {
    switch (c) {
    case 'n':
    case 's':
    case 'z':
    case 'r': {
      uint64_t *dst = c == 'n'   ? &shards
                      : c == 's' ? &samples
                      : c == 'z' ? &size
                                 : &seed;
      if ((c == 'z' ? wds__size_parse(optarg, dst)
                    : tool_parse_u64(optarg, dst)) != 0) {
        return tool_usage_error("wds synth",
                                "--%s needs a non-negative number, not \"%s\"",
                                c == 'n'   ? "shards"
                                : c == 's' ? "samples"
                                : c == 'z' ? "size"
                                           : "seed",
                                optarg);
      }
      break;
    }
    case 'l': {
      char *end;
      errno = 0;
      level = strtol(optarg, &end, 10);
      if (errno || !*optarg || *end || level < INT_MIN || level > INT_MAX) {
        return tool_usage_error("wds synth",
                                "--level needs an integer, not \"%s\"", optarg);
      }
      break;
    }
    case 'h':
      fputs(synth_usage, stdout);
      return 0;
    default:
      return 2;
    }
  }
  if (argc - optind != 1)
    return tool_usage_error("wds synth", "expected one PATTERN");
  if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
    return tool_usage_error("wds synth", "--level must be in %d..%d",
                            ZSTD_minCLevel(), ZSTD_maxCLevel());
  if (shards == 0)
    return tool_usage_error("wds synth", "--shards must be at least 1");
  if (samples > UINT64_MAX / shards || size > (uint64_t)SIZE_MAX / 2)
    return tool_usage_error("wds synth",
                            "--shards, --samples or --size too large");
  const char *pat_text = argv[optind];
  if (!has_conversion(pat_text) && shards > 1) {
    return tool_usage_error("wds synth",
                            "PATTERN \"%s\" needs one integer conversion for "
                            "the shard index, e.g. demo-%%06d.tar",
                            pat_text);
  }
  if (samples == 0)
    return tool_usage_error("wds synth", "--samples must be at least 1");
  int status = 0;
  wds_writer *w = NULL;
  uint8_t *buf = malloc(size ? (size_t)size : 1);
  if (!buf) {
    fprintf(stderr, "wds synth: out of memory (%" PRIu64 "-byte sample)\n",
            size);
    status = 1;
    goto done;
  }
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat_text;
  cfg.compression = ends_with(pat_text, ".zst")  ? WDS_COMPRESS_ZSTD
                    : ends_with(pat_text, ".gz") ? WDS_COMPRESS_GZIP
                                                 : WDS_COMPRESS_NONE;
  cfg.level = cfg.compression == WDS_COMPRESS_ZSTD ? (int)level : 0;
  cfg.max_count = samples;
  cfg.max_size_bytes = UINT64_MAX;
  if (wds_writer_open(&cfg, &w) != WDS_OK) {
    fprintf(stderr, "wds synth: %s\n", wds_last_error());
    status = 2;
    goto done;
  }
  tool_signals_defer(1); /* write_samples checks; the unfinished shard goes */
  if (write_samples(w, 0, shards * samples, buf, (size_t)size, seed) !=
      WDS_OK) {
    fprintf(stderr, "wds synth: %s\n", wds_last_error());
    status = 1;
    goto done;
  }
  if (tool_signal_caught()) {
    wds_writer_stats st;
    wds_writer_stats_get(w, &st);
    wds_writer_abort(w); /* removes the unfinished shard's temporary file */
    w = NULL;
    status = tool_interrupted(
        "synth", "%" PRIu64 " shard%s completed, the unfinished one removed",
        st.shards, st.shards == 1 ? "" : "s");
    goto done;
  }
  if (wds_writer_end_shard(w) != WDS_OK) {
    fprintf(stderr, "wds synth: %s\n", wds_last_error());
    status = 1;
    goto done;
  }
  wds_writer_stats st;
  wds_writer_stats_get(w, &st);
  printf("wrote %" PRIu64 " shard%s, %" PRIu64 " sample%s, %" PRIu64
         " bytes (%" PRIu64 " bytes of tar)\n",
         st.shards, st.shards == 1 ? "" : "s", st.samples,
         st.samples == 1 ? "" : "s", st.out_bytes, st.tar_bytes);
done:
  wds_writer_close(w);
  free(buf);
  if (tool_stdout_flush() != 0)
    status = 1;
  return status;
}
