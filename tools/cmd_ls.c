/* cmd_ls.c — `wds ls`: one line (or JSON object) per sample, or a summary.
 *
 * The summary either scans the shards or, with --index, adds up the counts
 * and sizes an index (wds/index.h) holds for each URL of the spec: no shard
 * is read, only stat'ed to detect a stale index. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/size.h"
#include "base/text.h"
#include "base/url.h"
#include "reader_opts.h"
#include "shards/cache.h" /* wds__sha256_hex: the index's digests */
#include "signals.h"
#include "util.h"
#include "wds/index.h"
#include "wds/reader.h"

static const char ls_usage[] =
    "usage: wds ls [--json] [--summary [--index FILE]] [--max-urls N] "
    "SPEC...\n"
    "\n"
    "Lists the samples of the shards, in stream order.\n"
    "  (default)    one line per sample: key, then each field's extension and "
    "size\n"
    "               (tab-separated; a control character, DEL, a backslash\n"
    "               or a byte that is not UTF-8 in a key or extension as\n"
    "               \\xHH)\n"
    "  --json       one JSON object per sample:\n"
    "               {\"__key__\": K, \"__url__\": U, \"fields\": {EXT: "
    "{\"size\": N, \"sha256\": HEX}}}\n"
    "               (U without its secrets: user:***@, sig=***, ...)\n"
    "  --summary    totals only: shards, samples, bytes, samples per "
    "extension\n"
    "               (with --json, as one JSON object)\n"
    "  --index FILE with --summary: add up the counts and sizes of an index\n"
    "               (wds index) instead of reading the shards; every URL of\n"
    "               the spec must be in it, and a local shard whose size\n"
    "               differs from the index's is an error (stale index)\n";

static const char ls_usage_tail[] =
    "Exits 1 at the first error (the message names shard, member, offset).\n"
    "\n" WDS__SIZE_HELP;

/* Extension counts: a small open-addressing table. */
typedef struct ext_count {
  char *ext;
  uint64_t samples;
  uint64_t bytes;
} ext_count;

typedef struct ext_table {
  ext_count *slots;
  size_t cap, used;
} ext_table;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static ext_count *ext_find(ext_table *t, const char *ext) {
  if ((t->used + 1) * 2 > t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 64;
    ext_count *ns = calloc(nc, sizeof *ns);
    if (!ns)
      return NULL;
    for (size_t i = 0; i < t->cap; i++) {
      if (!t->slots[i].ext)
        continue;
      size_t j = hash_str(t->slots[i].ext) & (nc - 1);
      while (ns[j].ext)
        j = (j + 1) & (nc - 1);
      ns[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = ns;
    t->cap = nc;
  }
  size_t j = hash_str(ext) & (t->cap - 1);
  while (t->slots[j].ext && strcmp(t->slots[j].ext, ext) != 0)
    j = (j + 1) & (t->cap - 1);
  if (!t->slots[j].ext) {
    t->slots[j].ext = strdup(ext);
    if (!t->slots[j].ext)
      return NULL;
    t->used++;
  }
  return &t->slots[j];
}

static int cmp_ext(const void *a, const void *b) {
  const ext_count *x = a, *y = b;
  return strcmp(x->ext, y->ext);
}

/* tar_bytes < 0: unknown (an index without them). */
static int print_summary(const wds_reader_stats *st, int64_t tar_bytes,
                         const ext_table *t, int json) {
  /* A sorted copy, for a stable listing. */
  ext_count *list = malloc((t->used ? t->used : 1) * sizeof *list);
  if (!list)
    return -1;
  size_t n = 0;
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].ext)
      list[n++] = t->slots[i];
  qsort(list, n, sizeof *list, cmp_ext);
  if (json) {
    printf("{\"shards\": %" PRIu64 ", \"samples\": %" PRIu64
           ", \"bytes\": %" PRIu64 ", \"tar_bytes\": ",
           st->shards, st->samples, st->field_bytes);
    if (tar_bytes >= 0)
      printf("%" PRId64, tar_bytes);
    else
      fputs("null", stdout);
    printf(", \"extensions\": {");
    for (size_t i = 0; i < n; i++) {
      fputs(i ? ", " : "", stdout);
      wds__json_write_string(stdout, list[i].ext, strlen(list[i].ext));
      printf(": {\"samples\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
             list[i].samples, list[i].bytes);
    }
    printf("}}\n");
  } else {
    printf("shards      %" PRIu64 "\n", st->shards);
    printf("samples     %" PRIu64 "\n", st->samples);
    printf("bytes       %" PRIu64 " (field data)\n", st->field_bytes);
    if (tar_bytes >= 0)
      printf("tar bytes   %" PRId64 " (uncompressed stream)\n", tar_bytes);
    else
      printf("tar bytes   unknown (not in the index)\n");
    printf("extensions  %zu\n", n);
    for (size_t i = 0; i < n; i++) {
      char shown[1024]; /* an extension from a shard (base/text.h) */
      printf("  %-16s %12" PRIu64 " samples %16" PRIu64 " bytes\n",
             wds__esc(list[i].ext, shown, sizeof shown, WDS__ESC_BACKSLASH),
             list[i].samples, list[i].bytes);
    }
  }
  free(list);
  return 0;
}

/* The summary from an index: every URL looked up (stale check included),
 * its samples' fields added up. Returns 0, or 1 after printing the error. */
static int index_summary(const char *index_path, const wds_url_list *urls,
                         ext_table *table, int json) {
  wds_index *ix = NULL;
  wds_reader_stats st;
  int64_t tar_bytes = 0;
  int status = 1;
  memset(&st, 0, sizeof st);
  unsigned flags = WDS_INDEX_SAMPLES;
  if (tool_allow_pipe_from_files)
    flags |= WDS_INDEX_ALLOW_PIPE_FROM_FILES;
  if (wds_index_load(index_path, flags, &ix) != WDS_OK) {
    fprintf(stderr, "wds ls: %s\n", wds_last_error());
    goto done;
  }
  for (size_t u = 0; u < urls->count; u++) {
    size_t i;
    wds_index_shard sh;
    char shown[WDS__URL_REDACT_MAX];
    const char *url = wds__url_shown(urls->urls[u], shown, sizeof shown);
    if (wds_index_lookup(ix, urls->urls[u], &i) != WDS_OK) {
      fprintf(stderr, "wds ls: %s: %s\n", index_path, wds_last_error());
      goto done;
    }
    wds_index_shard_info(ix, i, &sh);
    if (!sh.has_samples) {
      fprintf(stderr,
              "wds ls: %s: %s: the index has no per-sample sizes (made by "
              "another tool?); run wds index, or leave out --index\n",
              index_path, url);
      goto done;
    }
    st.shards++;
    st.samples += sh.nsamples;
    if (sh.tar_bytes < 0 || tar_bytes < 0) {
      tar_bytes = -1;
    } else if (sh.tar_bytes > INT64_MAX - tar_bytes) {
      /* An index is untrusted input: its sizes must add up. (Member sizes
       * and counts are bounded by each entry's tar_bytes when it loads.) */
      fprintf(stderr,
              "wds ls: %s: %s: the shards' tar_bytes add up to more than "
              "2^63 bytes: not a real index\n",
              index_path, url);
      goto done;
    } else {
      tar_bytes += sh.tar_bytes;
    }
    for (size_t j = 0; j < sh.sample_count; j++)
      for (size_t k = 0; k < sh.samples[j].field_count; k++) {
        const wds_index_field *f = &sh.samples[j].fields[k];
        ext_count *e = ext_find(table, f->ext);
        if (!e) {
          fprintf(stderr, "wds ls: out of memory\n");
          goto done;
        }
        e->samples++;
        e->bytes += f->size_bytes;
        st.field_bytes += f->size_bytes;
      }
  }
  if (print_summary(&st, tar_bytes, table, json) != 0) {
    fprintf(stderr, "wds ls: out of memory\n");
    goto done;
  }
  status = 0;
done:
  wds_index_close(ix);
  return status;
}

static void print_sample(const wds_sample *s, int json) {
  if (json) {
    fputs("{\"__key__\": ", stdout);
    wds__json_write_string(stdout, s->key, strlen(s->key));
    fputs(", \"__url__\": ", stdout);
    /* without its secrets, in full (cut only when out of memory) */
    char red[WDS__URL_REDACT_MAX], *full = wds__url_redacted(s->url);
    const char *url = full ? full : wds__url_redact(s->url, red, sizeof red);
    wds__json_write_string(stdout, url, strlen(url));
    free(full);
    fputs(", \"fields\": {", stdout);
    for (size_t i = 0; i < s->field_count; i++) {
      const wds_field *f = &s->fields[i];
      char hex[65];
      wds__sha256_hex(f->data, f->size_bytes, hex);
      fputs(i ? ", " : "", stdout);
      wds__json_write_string(stdout, f->ext, strlen(f->ext));
      printf(": {\"size\": %zu, \"sha256\": \"%s\"}", f->size_bytes, hex);
    }
    fputs("}}\n", stdout);
  } else {
    /* a key or extension from the shard: one line, nothing a terminal
     * would obey (base/text.h) */
    wds__esc_write(stdout, s->key, WDS__ESC_BACKSLASH);
    for (size_t i = 0; i < s->field_count; i++) {
      putchar('\t');
      wds__esc_write(stdout, s->fields[i].ext, WDS__ESC_BACKSLASH);
      printf(" %zu", s->fields[i].size_bytes);
    }
    putchar('\n');
  }
}

int tool_cmd_ls(int argc, char **argv) {
  static const struct option own[] = {{"json", no_argument, 0, 'j'},
                                      {"summary", no_argument, 0, 's'},
                                      {"index", required_argument, 0, 'i'},
                                      {"help", no_argument, 0, 'h'},
                                      {0, 0, 0, 0}};
  struct option opts[16];
  tool_reader_opts ro;
  int json = 0, summary = 0, c;
  const char *index_path = NULL;
  tool_stdout_init("ls");
  tool_reader_opts_init(&ro);
  if (tool_reader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = tool_getopt("wds ls", argc, argv, "jsh", opts)) != -1) {
    switch (c) {
    case 'j':
      json = 1;
      break;
    case 's':
      summary = 1;
      break;
    case 'i':
      index_path = optarg;
      break;
    case 'h':
      fputs(ls_usage, stdout);
      tool_reader_opts_help(stdout);
      fputs(ls_usage_tail, stdout);
      return 0;
    default:
      if (tool_reader_opt(&ro, c, optarg, "wds ls") != 1)
        return 2;
    }
  }
  if (optind >= argc)
    return tool_usage_error("wds ls", "expected a SPEC");
  if (index_path && !summary)
    return tool_usage_error("wds ls", "--index goes with --summary");
  if (tool_reader_opts_finish(&ro, "wds ls") != 0)
    return 2;
  wds_url_list urls = {0};
  int xs = tool_reader_expand(&ro, "ls", argv + optind, argc - optind, &urls);
  if (xs)
    return xs;

  int status = 0;
  ext_table table = {0};
  wds_reader *r = NULL;
  if (index_path) {
    status = index_summary(index_path, &urls, &table, json);
    goto done;
  }
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  tool_reader_opts_apply(&ro, &cfg);
  cfg.urls = (const char *const *)urls.urls;
  cfg.url_count = urls.count;
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    fprintf(stderr, "wds ls: %s\n", wds_last_error());
    status = 1;
    goto done;
  }
  tool_signals_reader(r);
  const wds_sample *s;
  int rc;
  uint64_t listed = 0;
  while ((rc = wds_reader_next(r, &s)) == WDS_OK) {
    listed++;
    if (!summary) {
      print_sample(s, json);
      if (tool_stdout_check() != 0) { /* stop reading: nobody gets it */
        status = 1;
        goto done;
      }
      continue;
    }
    for (size_t i = 0; i < s->field_count; i++) {
      ext_count *e = ext_find(&table, s->fields[i].ext);
      if (!e) {
        fprintf(stderr, "wds ls: out of memory\n");
        status = 1;
        goto done;
      }
      e->samples++;
      e->bytes += s->fields[i].size_bytes;
    }
  }
  fflush(stdout);
  if (rc == WDS_ERR_CANCELLED && tool_signal_caught()) {
    status =
        tool_interrupted("ls", "%llu sample%s listed",
                         (unsigned long long)listed, listed == 1 ? "" : "s");
    goto done;
  }
  if (rc != WDS_EOF) {
    fprintf(stderr, "wds ls: %s\n", wds_last_error());
    status = 1;
    goto done;
  }
  if (summary) {
    wds_reader_stats st;
    wds_reader_stats_get(r, &st);
    if (print_summary(&st, (int64_t)st.tar_bytes, &table, json) != 0) {
      fprintf(stderr, "wds ls: out of memory\n");
      status = 1;
    }
  }
done:
  for (size_t i = 0; i < table.cap; i++)
    free(table.slots[i].ext);
  free(table.slots);
  tool_signals_reader(NULL);
  if (r) {
    wds_reader_stats cst;
    wds_reader_stats_get(r, &cst);
    tool_cache_note("wds ls", ro.cfg.cache_dir, cst.cache_errors);
  }
  wds_reader_close(r);
  wds_url_list_free(&urls);
  if (tool_stdout_flush() != 0)
    status = 1;
  return status;
}
