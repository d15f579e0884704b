/* cmd_cat.c — `wds cat`: the samples of a shard set as one tar stream on
 * stdout, through the public writer (wds/writer.h, out_fd = 1).
 *
 * One reader over the whole spec feeds, optionally, a shuffle buffer of N
 * deep-copied samples (WebDataset's shuffle: fill to N, then each new
 * sample replaces a uniformly drawn one, which is written; at the end the
 * rest is drawn out in random order). The draws come from splitmix64
 * seeded by --seed, so the output is a pure function of the input and the
 * options. Memory: the reader's buffer plus the shuffle buffer.
 *
 * On a read error the stream is left without its end-of-archive marker
 * (stdout is pointed at /dev/null before the writer is closed), so a
 * reader downstream sees a truncated stream rather than a short one that
 * looks complete; the exit status is 1. */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/size.h"
#include "pipeline/decoders.h"
#include "reader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/reader.h"
#include "wds/writer.h"

static const char cat_usage[] =
    "usage: wds cat [--fields LIST] [--shuffle N [--seed S]] [--limit N] "
    "[-f]\n"
    "               [--max-urls N] SPEC...\n"
    "\n"
    "Writes the samples of the shards as one uncompressed tar stream to\n"
    "stdout, e.g. wds cat 'a-{000..009}.tar' | wds write -o "
    "'b-%04d.tar.zst' -\n"
    "Members are named KEY.EXT (the extension lower-cased, as read), fields\n"
    "sorted by extension, with fixed mode, owner and mtime.\n"
    "  --fields LIST  keep only these extensions (comma-separated); a sample "
    "with\n"
    "                 none of them is dropped (jpg also keeps jpeg, and jpeg\n"
    "                 jpg)\n"
    "  --shuffle N    shuffle through a buffer of N samples (WebDataset's "
    "shuffle)\n"
    "  --seed S       seed of the shuffle (default 0): the same seed gives "
    "the\n"
    "                 same bytes\n"
    "  --limit N      write at most N samples\n"
    "  -f, --force    write to a terminal anyway\n";

static const char cat_usage_tail[] =
    "Exit status: 0 done, 1 read or write error (the stream is then left\n"
    "without its end-of-archive marker), 2 usage error.\n"
    "\n" WDS__SIZE_HELP;

/* A deep copy of a sample, for the shuffle buffer. */
typedef struct held {
  char *key;
  size_t n;
  wds_writer_field *fields; /* ext and data point into blob */
  char *blob;
} held;

static void held_free(held *h) {
  if (!h)
    return;
  free(h->key);
  free(h->fields);
  free(h->blob);
  free(h);
}

typedef struct cat_state {
  wds_writer *w;
  char **keep; /* --fields */
  size_t nkeep;
  uint64_t limit, written; /* limit 0: none */
  wds_writer_field *scratch;
  size_t scratch_cap;
} cat_state;

/* Is ext one of --fields, or its other spelling (jpg and jpeg)? */
static int keep_ext(const cat_state *c, const char *ext) {
  if (!c->nkeep)
    return 1;
  for (size_t i = 0; i < c->nkeep; i++) {
    const char *alias = wds__ext_alias(c->keep[i], strlen(c->keep[i]));
    if (strcmp(c->keep[i], ext) == 0 || (alias && strcmp(alias, ext) == 0))
      return 1;
  }
  return 0;
}

/* The fields of s that --fields keeps, into c->scratch; returns the count,
 * or (size_t)-1 when out of memory. */
static size_t select_fields(cat_state *c, const wds_sample *s) {
  if (s->field_count > c->scratch_cap) {
    wds_writer_field *f =
        realloc(c->scratch, s->field_count * sizeof *c->scratch);
    if (!f)
      return (size_t)-1;
    c->scratch = f;
    c->scratch_cap = s->field_count;
  }
  size_t n = 0;
  for (size_t i = 0; i < s->field_count; i++)
    if (keep_ext(c, s->fields[i].ext))
      c->scratch[n++] = (wds_writer_field){s->fields[i].ext, s->fields[i].data,
                                           s->fields[i].size_bytes};
  return n;
}

static held *held_copy(const char *key, const wds_writer_field *f, size_t n) {
  held *h = calloc(1, sizeof *h);
  size_t total = 0;
  if (!h)
    return NULL;
  for (size_t i = 0; i < n; i++)
    total += strlen(f[i].ext) + 1 + f[i].size_bytes;
  h->key = strdup(key);
  h->fields = malloc(n * sizeof *h->fields);
  h->blob = malloc(total ? total : 1);
  if (!h->key || !h->fields || !h->blob) {
    held_free(h);
    return NULL;
  }
  char *p = h->blob;
  for (size_t i = 0; i < n; i++) {
    size_t el = strlen(f[i].ext) + 1;
    memcpy(p, f[i].ext, el);
    h->fields[i].ext = p;
    p += el;
    if (f[i].size_bytes)
      memcpy(p, f[i].data, f[i].size_bytes);
    h->fields[i].data = p;
    h->fields[i].size_bytes = f[i].size_bytes;
    p += f[i].size_bytes;
  }
  h->n = n;
  return h;
}

static int write_one(cat_state *c, const char *key, const wds_writer_field *f,
                     size_t n) {
  if (wds_writer_write_sample(c->w, key, f, n) != WDS_OK) {
    fprintf(stderr, "wds cat: %s\n", wds_last_error());
    return -1;
  }
  c->written++;
  return 0;
}

/* Uniform in [0, n) (n > 0), without modulo bias. */
static size_t draw(uint64_t *state, size_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
  do
    x = wds__splitmix64(state);
  while (x >= limit);
  return (size_t)(x % n);
}

static int parse_fields_opt(cat_state *c, const char *list) {
  const char *p = list;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == 0)
      return -1;
    char **k = realloc(c->keep, (c->nkeep + 1) * sizeof *k);
    if (!k)
      return -1;
    c->keep = k;
    if (!(k[c->nkeep] = strndup(p, n)))
      return -1;
    for (char *q = k[c->nkeep]; *q; q++)
      if (*q >= 'A' && *q <= 'Z')
        *q = (char)(*q - 'A' + 'a'); /* extensions are read lower-cased */
    c->nkeep++;
    if (!end)
      return 0;
    p = end + 1;
  }
}

int tool_cmd_cat(int argc, char **argv) {
  static const struct option own[] = {{"fields", required_argument, 0, 'F'},
                                      {"shuffle", required_argument, 0, 's'},
                                      {"seed", required_argument, 0, 'S'},
                                      {"limit", required_argument, 0, 'l'},
                                      {"force", no_argument, 0, 'f'},
                                      {"help", no_argument, 0, 'h'},
                                      {0, 0, 0, 0}};
  struct option opts[24];
  tool_reader_opts ro;
  cat_state c;
  memset(&c, 0, sizeof c);
  int force = 0, status = 2, ch, rc = WDS_OK, have_seed = 0;
  size_t shuffle = 0, nheld = 0;
  uint64_t seed = 0, rng;
  held **buf = NULL;
  wds_url_list urls = {0};
  wds_reader *r = NULL;
  tool_stdout_init("cat");
  tool_reader_opts_init(&ro);
  if (tool_reader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((ch = tool_getopt("wds cat", argc, argv, "fh", opts)) != -1) {
    switch (ch) {
    case 'F':
      if (parse_fields_opt(&c, optarg) != 0) {
        tool_usage_error("wds cat",
                         "--fields needs extensions separated by ',': \"%s\"",
                         optarg);
        goto done;
      }
      break;
    case 's':
      if (tool_parse_size(optarg, &shuffle) != 0) {
        tool_usage_error("wds cat", "--shuffle needs a number, not \"%s\"",
                         optarg);
        goto done;
      }
      break;
    case 'S':
      if (tool_parse_u64(optarg, &seed) != 0) {
        tool_usage_error("wds cat", "--seed needs a number, not \"%s\"",
                         optarg);
        goto done;
      }
      have_seed = 1;
      break;
    case 'l':
      if (tool_parse_u64(optarg, &c.limit) != 0 || c.limit == 0) {
        tool_usage_error("wds cat", "--limit needs a number > 0, not \"%s\"",
                         optarg);
        goto done;
      }
      break;
    case 'f':
      force = 1;
      break;
    case 'h':
      fputs(cat_usage, stdout);
      tool_reader_opts_help(stdout);
      fputs(cat_usage_tail, stdout);
      status = 0;
      goto done;
    default:
      if (tool_reader_opt(&ro, ch, optarg, "wds cat") != 1)
        goto done;
    }
  }
  if (optind >= argc) {
    tool_usage_error("wds cat", "expected a SPEC");
    goto done;
  }
  if (tool_reader_opts_finish(&ro, "wds cat") != 0)
    goto done;
  if (have_seed && shuffle <= 1)
    fprintf(stderr, "wds cat: note: --seed has no effect without --shuffle N "
                    "(N > 1)\n");
  if (!force && isatty(1)) {
    tool_usage_error("wds cat", "not writing a tar stream to a terminal "
                                "(redirect stdout, or use -f)");
    goto done;
  }
  int xs = tool_reader_expand(&ro, "cat", argv + optind, argc - optind, &urls);
  if (xs) {
    status = tool_signal_caught() ? xs : 2;
    goto done;
  }
  status = 1;
  wds_reader_config rcfg = WDS_READER_CONFIG_INIT;
  tool_reader_opts_apply(&ro, &rcfg);
  rcfg.urls = (const char *const *)urls.urls;
  rcfg.url_count = urls.count;
  if (wds_reader_open(&rcfg, &r) != WDS_OK) {
    fprintf(stderr, "wds cat: %s\n", wds_last_error());
    goto done;
  }
  tool_signals_reader(r);
  wds_writer_config wcfg = WDS_WRITER_CONFIG_INIT;
  wcfg.out_fd = 1;
  wcfg.compression = WDS_COMPRESS_NONE;
  if (wds_writer_open(&wcfg, &c.w) != WDS_OK) {
    fprintf(stderr, "wds cat: %s\n", wds_last_error());
    goto done;
  }
  if (shuffle > 1 && !(buf = calloc(shuffle, sizeof *buf))) {
    fprintf(stderr, "wds cat: out of memory (--shuffle %zu)\n", shuffle);
    goto done;
  }
  rng = seed;
  const wds_sample *s;
  while (!(c.limit && c.written >= c.limit) &&
         (rc = wds_reader_next(r, &s)) == WDS_OK) {
    size_t n = select_fields(&c, s);
    if (n == (size_t)-1) {
      fprintf(stderr, "wds cat: out of memory\n");
      goto done;
    }
    if (n == 0)
      continue; /* none of --fields: dropped */
    if (!buf) {
      if (write_one(&c, s->key, c.scratch, n) != 0)
        goto done;
      continue;
    }
    held *h = held_copy(s->key, c.scratch, n);
    if (!h) {
      fprintf(stderr, "wds cat: out of memory\n");
      goto done;
    }
    if (nheld < shuffle) {
      buf[nheld++] = h;
      continue;
    }
    size_t j = draw(&rng, shuffle);
    held *out = buf[j];
    buf[j] = h;
    int wrc = write_one(&c, out->key, out->fields, out->n);
    held_free(out);
    if (wrc != 0)
      goto done;
  }
  if (rc == WDS_ERR_CANCELLED && tool_signal_caught()) {
    /* The stream is left without its end marker, as after any error. */
    status = tool_interrupted("cat",
                              "%llu sample%s written, the tar stream "
                              "left unfinished",
                              (unsigned long long)c.written,
                              c.written == 1 ? "" : "s");
    goto done;
  }
  if (rc != WDS_OK && rc != WDS_EOF) {
    fprintf(stderr, "wds cat: %s\n", wds_last_error());
    goto done;
  }
  /* Drain the buffer in random order. */
  while (nheld && !(c.limit && c.written >= c.limit)) {
    size_t j = draw(&rng, nheld);
    held *out = buf[j];
    buf[j] = buf[--nheld];
    buf[nheld] = NULL;
    int wrc = write_one(&c, out->key, out->fields, out->n);
    held_free(out);
    if (wrc != 0)
      goto done;
  }
  /* end_shard, not close: the handle keeps the error's text (a small
   * stream is written only now: "/dev/full: No space left on device"). */
  if (wds_writer_end_shard(c.w) != WDS_OK) {
    fprintf(stderr, "wds cat: cannot finish the tar stream: %s\n",
            wds_last_error());
    goto done;
  }
  wds_writer_close(c.w);
  c.w = NULL;
  status = 0;
done:
  if (c.w) {
    /* Failed: no end-of-archive marker (see the top of the file). */
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull >= 0) {
      dup2(devnull, 1);
      close(devnull);
    }
    wds_writer_close(c.w);
  }
  for (size_t i = 0; buf && i < shuffle; i++)
    held_free(buf[i]);
  free(buf);
  free(c.scratch);
  for (size_t i = 0; i < c.nkeep; i++)
    free(c.keep[i]);
  free(c.keep);
  tool_signals_reader(NULL);
  if (r) {
    wds_reader_stats cst;
    wds_reader_stats_get(r, &cst);
    tool_cache_note("wds cat", ro.cfg.cache_dir, cst.cache_errors);
  }
  wds_reader_close(r);
  wds_url_list_free(&urls);
  return status;
}
