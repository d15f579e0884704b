/* cmd_synth.c — `wds synth`: write a synthetic shard set for demos and
 * benchmarks.
 *
 * Shard i is named by formatting the PATTERN with i. The pattern is parsed
 * here into prefix, one integer conversion and suffix, and the name is built
 * by hand: the user's text never reaches printf as a format. Sample data is a
 * pure function of (seed, global sample index) — splitmix64 — so the same
 * options give byte-identical shards on any machine, whatever the split into
 * shards. Shards are written through the internal tar writer (temporary name,
 * renamed when complete); there is no public writer API yet, hence the
 * relative include. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "../shards/tarw.h"
#include "util.h"

static const char synth_usage[] =
    "usage: wds synth [--shards N] [--samples N] [--size BYTES] [--seed S]\n"
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
    "  --size BYTES   size of the .bin field (default 1024)\n"
    "  --seed S       seed of the data (default 0)\n"
    "  --level L      zstd level for .zst names (default 3)\n"
    "\n"
    "Prints one line: shards, samples, bytes written.\n";

/* PATTERN split around its one conversion. */
typedef struct pattern {
  char *prefix; /* literal text ("%%" already turned into "%") */
  char *suffix;
  int zero_pad;
  int width;
} pattern;

static void pattern_free(pattern *p) {
  free(p->prefix);
  free(p->suffix);
}

/* Copies literal text s[0..n), turning "%%" into "%". */
static char *unescape(const char *s, size_t n) {
  char *o = malloc(n + 1);
  if (!o)
    return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    o[j++] = s[i];
    if (s[i] == '%')
      i++; /* the second '%' of "%%" */
  }
  o[j] = '\0';
  return o;
}

/* Accepts exactly one %d / %i / %u with an optional '0' flag and width, and
 * "%%" anywhere; everything else printf-special is refused. */
static int pattern_parse(const char *s, pattern *p, char *msg,
                         size_t msg_size) {
  memset(p, 0, sizeof *p);
  size_t conv_start = 0, conv_end = 0;
  int convs = 0;
  for (size_t i = 0; s[i]; i++) {
    if (s[i] != '%')
      continue;
    if (s[i + 1] == '%') {
      i++;
      continue;
    }
    size_t j = i + 1;
    int zero = 0, width = 0;
    if (s[j] == '0') {
      zero = 1;
      j++;
    }
    while (s[j] >= '0' && s[j] <= '9') {
      width = width * 10 + (s[j] - '0');
      if (width > 64) {
        snprintf(msg, msg_size, "PATTERN \"%s\": field width over 64", s);
        return -1;
      }
      j++;
    }
    if (s[j] != 'd' && s[j] != 'i' && s[j] != 'u') {
      snprintf(msg, msg_size,
               "PATTERN \"%s\": only one %%d, %%i or %%u (e.g. %%06d) and "
               "%%%% are allowed",
               s);
      return -1;
    }
    if (++convs > 1) {
      snprintf(msg, msg_size,
               "PATTERN \"%s\" has more than one integer conversion", s);
      return -1;
    }
    p->zero_pad = zero;
    p->width = width;
    conv_start = i;
    conv_end = j + 1;
    i = j;
  }
  if (convs == 0) {
    snprintf(msg, msg_size,
             "PATTERN \"%s\" needs one integer conversion for the shard "
             "index, e.g. demo-%%06d.tar",
             s);
    return -1;
  }
  p->prefix = unescape(s, conv_start);
  p->suffix = unescape(s + conv_end, strlen(s + conv_end));
  if (!p->prefix || !p->suffix) {
    pattern_free(p);
    snprintf(msg, msg_size, "out of memory");
    return -1;
  }
  return 0;
}

static char *pattern_format(const pattern *p, uint64_t index) {
  char num[96];
  snprintf(num, sizeof num, p->zero_pad ? "%0*" PRIu64 : "%*" PRIu64, p->width,
           index);
  size_t n = strlen(p->prefix) + strlen(num) + strlen(p->suffix) + 1;
  char *o = malloc(n);
  if (o)
    snprintf(o, n, "%s%s%s", p->prefix, num, p->suffix);
  return o;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Fills buf with the data of sample k: a stream seeded by (seed, k). */
static void fill_random(uint8_t *buf, size_t n, uint64_t seed, uint64_t k) {
  uint64_t st = seed;
  st = splitmix64(&st) ^ (k * 0xD1B54A32D192ED03ull);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = splitmix64(&st);
    memcpy(buf + i, &v, 8);
  }
  if (i < n) {
    uint64_t v = splitmix64(&st);
    memcpy(buf + i, &v, n - i);
  }
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Writes one shard; prints the error and returns 1 on failure. */
static int write_shard(const char *path, const wds__tarw_options *o,
                       uint64_t first, uint64_t count, uint8_t *buf,
                       size_t size, uint64_t seed, wds__tarw_stats *total) {
  wds__err err;
  wds__tarw *w = NULL;
  int rc = wds__tarw_open_path(path, o, &w, &err);
  for (uint64_t k = first; rc == WDS_OK && k < first + count; k++) {
    char name[64], text[64];
    fill_random(buf, size, seed, k);
    snprintf(name, sizeof name, "sample%09" PRIu64 ".bin", k);
    rc = wds__tarw_add(w, name, buf, size, &err);
    if (rc != WDS_OK)
      break;
    int n = snprintf(text, sizeof text, "%" PRIu64, k % 10);
    snprintf(name, sizeof name, "sample%09" PRIu64 ".cls", k);
    rc = wds__tarw_add(w, name, text, (uint64_t)n, &err);
    if (rc != WDS_OK)
      break;
    n = snprintf(text, sizeof text, "{\"index\": %" PRIu64 "}", k);
    snprintf(name, sizeof name, "sample%09" PRIu64 ".json", k);
    rc = wds__tarw_add(w, name, text, (uint64_t)n, &err);
  }
  if (rc == WDS_OK)
    rc = wds__tarw_finish(w, &err);
  if (rc == WDS_OK) {
    wds__tarw_stats st;
    wds__tarw_stats_get(w, &st);
    total->members += st.members;
    total->tar_bytes += st.tar_bytes;
    total->out_bytes += st.out_bytes;
  } else {
    fprintf(stderr, "wds synth: %s\n", err.msg);
  }
  wds__tarw_close(w);
  return rc == WDS_OK ? 0 : 1;
}

int wds_cmd_synth(int argc, char **argv) {
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
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'n':
    case 's':
    case 'z':
    case 'r': {
      uint64_t *dst = c == 'n'   ? &shards
                      : c == 's' ? &samples
                      : c == 'z' ? &size
                                 : &seed;
      if (tool_parse_u64(optarg, dst) != 0) {
        fprintf(stderr,
                "wds synth: --%s needs a non-negative number, not "
                "\"%s\"\n",
                c == 'n'   ? "shards"
                : c == 's' ? "samples"
                : c == 'z' ? "size"
                           : "seed",
                optarg);
        return 2;
      }
      break;
    }
    case 'l': {
      char *end;
      errno = 0;
      level = strtol(optarg, &end, 10);
      if (errno || !*optarg || *end || level < INT_MIN || level > INT_MAX) {
        fprintf(stderr, "wds synth: --level needs an integer, not \"%s\"\n",
                optarg);
        return 2;
      }
      break;
    }
    case 'h':
      fputs(synth_usage, stdout);
      return 0;
    default:
      fputs(synth_usage, stderr);
      return 2;
    }
  }
  if (argc - optind != 1) {
    fprintf(stderr, "wds synth: expected one PATTERN\n");
    fputs(synth_usage, stderr);
    return 2;
  }
  if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel()) {
    fprintf(stderr, "wds synth: --level must be in %d..%d\n", ZSTD_minCLevel(),
            ZSTD_maxCLevel());
    return 2;
  }
  if (shards == 0) {
    fprintf(stderr, "wds synth: --shards must be at least 1\n");
    return 2;
  }
  if (samples > UINT64_MAX / shards || size > (uint64_t)SIZE_MAX / 2) {
    fprintf(stderr, "wds synth: --shards, --samples or --size too large\n");
    return 2;
  }
  const char *pat_text = argv[optind];
  pattern pat;
  char msg[512];
  if (pattern_parse(pat_text, &pat, msg, sizeof msg) != 0) {
    fprintf(stderr, "wds synth: %s\n", msg);
    return 2;
  }
  int status = 0;
  char *path = NULL;
  uint8_t *buf = malloc(size ? (size_t)size : 1);
  if (!buf) {
    fprintf(stderr, "wds synth: out of memory (%" PRIu64 "-byte sample)\n",
            size);
    status = 1;
    goto done;
  }
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  o.compression = ends_with(pat_text, ".zst") ? WDS__TARW_ZSTD : WDS__TARW_NONE;
  o.zstd_level = (int)level;
  wds__tarw_stats total = {0};
  for (uint64_t i = 0; i < shards; i++) {
    free(path);
    path = pattern_format(&pat, i);
    if (!path) {
      fprintf(stderr, "wds synth: out of memory\n");
      status = 1;
      goto done;
    }
    if (write_shard(path, &o, i * samples, samples, buf, (size_t)size, seed,
                    &total) != 0) {
      status = 1;
      goto done;
    }
  }
  printf("wrote %" PRIu64 " shards, %" PRIu64 " samples, %" PRIu64
         " bytes (%" PRIu64 " bytes of tar)\n",
         shards, shards * samples, total.out_bytes, total.tar_bytes);
done:
  free(path);
  free(buf);
  pattern_free(&pat);
  return status;
}
