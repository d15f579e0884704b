/* cmd_verify.c — `wds verify`: read every shard to its end and report what
 * is wrong with it.
 *
 * Each shard gets its own reader, read to the end; every error the reader
 * reports is a problem (classified by its status: unreadable, truncated,
 * checksum, corrupt, duplicate_extension). On top of the reader's checks:
 * a key seen earlier in the same shard (non-adjacent members, which
 * WebDataset silently splits into two samples), required fields missing
 * (--require), fields that fail to decode (--decode, through the public
 * wds_decode_check). Problems are printed as they are found — one line,
 * or one element of the JSON "problems" array — so memory stays bounded:
 * one shard's key set (freed after each shard) and the reader's buffer. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/json.h"
#include "base/size.h"
#include "base/text.h"
#include "base/url.h"
#include "loader/index.h"
#include "pipeline/decoders.h"
#include "reader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/loader.h"
#include "wds/reader.h"

static const char verify_usage[] =
    "usage: wds verify [--require LIST] [--decode] [--index FILE] [--json]\n"
    "                  [--max-urls N] SPEC...\n"
    "\n"
    "Reads every shard to its end and reports, one line per problem\n"
    "(\"URL: sample KEY: problem\" or \"URL: KIND: message\"):\n"
    "  unreadable           the shard cannot be opened or read\n"
    "  truncated            the shard ends early\n"
    "  checksum             a tar header (or compressed frame) checksum "
    "error\n"
    "  corrupt              any other error the reader reports\n"
    "  duplicate_extension  an extension repeated within a sample\n"
    "  repeated_key         a key seen earlier in the same shard "
    "(non-adjacent\n"
    "                       members: WebDataset splits them into two "
    "samples)\n"
    "  missing_field        a sample without a --require field\n"
    "  decode               a field that does not decode (--decode)\n"
    "  hash_mismatch        a member whose data differs from the sha256 the\n"
    "                       --index records (wds index --hashes), or that\n"
    "                       it does not record\n"
    "  index                a shard not in the --index, or one it records\n"
    "                       no hashes for\n"
    "then a summary line. Options:\n"
    "  --require LIST  comma-separated fields every sample must have; ';' "
    "separates\n"
    "                  alternatives: --require 'jpg;png,cls'\n"
    "                  (jpg also matches jpeg, and jpeg jpg)\n"
    "  --decode        decode jpg/jpeg/png, npy and cls/cls2/index/inx/id "
    "fields\n"
    "  --index FILE    check every member against the sha256 the index\n"
    "                  (made with wds index --hashes) records for it\n"
    "  --image-memory-limit SIZE  with --decode: memory one image's decode\n"
    "                  may take (default 256M); an image over it is a\n"
    "                  decode problem naming its size and the limit\n"
    "  --json          one JSON object: {\"problems\": [{\"url\", \"key\", "
    "\"kind\",\n"
    "                  \"message\"}...], \"shards\", \"samples\", "
    "\"problem_count\",\n"
    "                  \"counts\": {KIND: N}}\n";

static const char verify_usage_tail[] =
    "Exit status: 0 no problems, 1 problems found, 2 usage error.\n"
    "\n" WDS__SIZE_HELP;

enum kind {
  K_UNREADABLE,
  K_TRUNCATED,
  K_CHECKSUM,
  K_CORRUPT,
  K_DUP_EXT,
  K_REPEATED_KEY,
  K_MISSING,
  K_DECODE,
  K_HASH,
  K_INDEX,
  K_COUNT
};

static const char *const kind_names[K_COUNT] = {
    "unreadable",          "truncated",    "checksum",      "corrupt",
    "duplicate_extension", "repeated_key", "missing_field", "decode",
    "hash_mismatch",       "index"};

typedef struct verifier {
  int json;
  uint64_t counts[K_COUNT];
  uint64_t problems, shards, samples;
  char **require; /* groups: "jpg;png" */
  size_t nrequire;
  wds_decode_checker *checker; /* --decode */
  tool_reader_opts ro;         /* --read-timeout, --retries, the cache... */
  uint64_t cache_errors;       /* shards read without the cache */
  const char *index_path;      /* --index */
  wds__index ix;               /* with WDS__INDEX_HASHES */
} verifier;

/* Prints one problem. key may be NULL (shard-level). */
static void report(verifier *v, enum kind k, const char *url, const char *key,
                   const char *msg) {
  /* The URL without its secrets (base/url.h); in the text, nothing from
   * the shard a terminal would obey (base/text.h). */
  char red[WDS__URL_REDACT_MAX], kb[1024], mb[2048];
  if (v->json) {
    char *full = wds__url_redacted(url); /* in full */
    url = full ? full : wds__url_redact(url, red, sizeof red);
    fputs(v->problems ? ",\n  {\"url\": " : "\n  {\"url\": ", stdout);
    wds__json_write_string(stdout, url, strlen(url));
    free(full);
    fputs(", \"key\": ", stdout);
    if (key)
      wds__json_write_string(stdout, key, strlen(key));
    else
      fputs("null", stdout);
    printf(", \"kind\": \"%s\", \"message\": ", kind_names[k]);
    wds__json_write_string(stdout, msg, strlen(msg));
    fputs("}", stdout);
  } else {
    url = wds__url_shown(url, red, sizeof red);
    msg = wds__esc(msg, mb, sizeof mb, 0);
    if (key)
      printf("%s: sample %s: %s: %s\n", url, wds__esc(key, kb, sizeof kb, 0),
             kind_names[k], msg);
    else
      printf("%s: %s: %s\n", url, kind_names[k], msg);
  }
  v->counts[k]++;
  v->problems++;
}

static enum kind classify(int rc, const char *msg) {
  if (rc == WDS_ERR_DUPLICATE)
    return K_DUP_EXT;
  if (strstr(msg, "checksum"))
    return K_CHECKSUM;
  switch (rc) {
  case WDS_ERR_OPEN:
  case WDS_ERR_COMMAND:
  case WDS_ERR_IO:
    return K_UNREADABLE;
  case WDS_ERR_TRUNCATED:
    return K_TRUNCATED;
  default:
    return K_CORRUPT;
  }
}

/* The reader prefixes its messages with "URL: " (as messages show it:
 * wds__url_shown); the report line has the URL already. */
static const char *strip_url(const char *msg, const char *url) {
  char shown[WDS__URL_REDACT_MAX];
  url = wds__url_shown(url, shown, sizeof shown);
  size_t n = strlen(url);
  if (strncmp(msg, url, n) == 0 && strncmp(msg + n, ": ", 2) == 0)
    return msg + n + 2;
  return msg;
}

/* ---- a set of keys (open addressing, FNV-1a) ---- */

typedef struct key_set {
  char **slots;
  size_t cap, used;
} key_set;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Adds key: 1 if it was new, 0 if already present, -1 out of memory. */
static int key_set_add(key_set *t, const char *key) {
  if ((t->used + 1) * 2 > t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 1024;
    char **ns = calloc(nc, sizeof *ns);
    if (!ns)
      return -1;
    for (size_t i = 0; i < t->cap; i++) {
      if (!t->slots[i])
        continue;
      size_t j = hash_str(t->slots[i]) & (nc - 1);
      while (ns[j])
        j = (j + 1) & (nc - 1);
      ns[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = ns;
    t->cap = nc;
  }
  size_t j = hash_str(key) & (t->cap - 1);
  while (t->slots[j]) {
    if (strcmp(t->slots[j], key) == 0)
      return 0;
    j = (j + 1) & (t->cap - 1);
  }
  if (!(t->slots[j] = strdup(key)))
    return -1;
  t->used++;
  return 1;
}

static void key_set_free(key_set *t) {
  for (size_t i = 0; i < t->cap; i++)
    free(t->slots[i]);
  free(t->slots);
  memset(t, 0, sizeof *t);
}

/* Does the sample have the extension p[0..n) (ASCII case-insensitive, as
 * extensions are read lower-cased)? */
static int has_ext(const wds_sample *s, const char *p, size_t n) {
  for (size_t i = 0; i < s->field_count; i++)
    if (strlen(s->fields[i].ext) == n &&
        strncasecmp(s->fields[i].ext, p, n) == 0)
      return 1;
  return 0;
}

/* Does the sample have one of the ';'-separated extensions of group, or
 * the other spelling of one (wds__ext_alias: jpg and jpeg)? */
static int has_any(const wds_sample *s, const char *group) {
  const char *p = group;
  while (*p) {
    const char *end = strchr(p, ';');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    const char *alias = wds__ext_alias(p, n);
    if (has_ext(s, p, n) || (alias && has_ext(s, alias, strlen(alias))))
      return 1;
    p += n + (end ? 1 : 0);
  }
  return 0;
}

static int check_sample(verifier *v, const char *url, const wds_sample *s,
                        key_set *keys, const wds__index_hashes *h, uint64_t j) {
  char msg[1024];
  for (size_t i = 0; h && i < s->field_count; i++) {
    wds__err e;
    const wds_field *f = &s->fields[i];
    if (wds__index_hash_check(h, j, f->ext, f->data, f->size_bytes, &e) !=
        WDS_OK)
      report(v, K_HASH, url, s->key, e.msg);
  }
  int added = key_set_add(keys, s->key);
  if (added < 0)
    return -1;
  if (added == 0)
    report(v, K_REPEATED_KEY, url, s->key,
           "the key appears again after other samples (non-adjacent "
           "members; WebDataset splits them into two samples)");
  for (size_t g = 0; g < v->nrequire; g++)
    if (!has_any(s, v->require[g])) {
      snprintf(msg, sizeof msg, "no field %s", v->require[g]);
      report(v, K_MISSING, url, s->key, msg);
    }
  if (v->checker)
    for (size_t i = 0; i < s->field_count; i++) {
      const wds_field *f = &s->fields[i];
      char err[900];
      if (wds_decode_check(v->checker, f->ext, f->data, f->size_bytes) !=
          WDS_OK) {
        wds__copy_msg(err, sizeof err, wds_last_error());
        snprintf(msg, sizeof msg, "field %s (%zu bytes): %s", f->ext,
                 f->size_bytes, err);
        report(v, K_DECODE, url, s->key, msg);
      }
    }
  return 0;
}

/* Reads one shard to its end. Returns 0, or -1 when out of memory. */
static int verify_shard(verifier *v, const char *url) {
  wds_reader *r = NULL;
  key_set keys = {0};
  int status = 0, rc;
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = &url;
  cfg.url_count = 1;
  tool_reader_opts_apply(&v->ro, &cfg);
  v->shards++;
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    const char *m = wds_last_error();
    report(v, K_UNREADABLE, url, NULL, strip_url(m, url));
    goto done;
  }
  tool_signals_reader(r);
  const wds__index_hashes *h = NULL;
  if (v->index_path) {
    size_t at;
    wds__err e;
    if (wds__index_find(&v->ix, url, &at, &e) != WDS_OK) {
      report(v, K_INDEX, url, NULL, strip_url(e.msg, url));
    } else if (!v->ix.shards[at].hashes.count) {
      snprintf(e.msg, sizeof e.msg,
               "the index %s records no hashes for it (wds index --hashes "
               "makes one that does)",
               v->index_path);
      report(v, K_INDEX, url, NULL, e.msg);
    } else {
      h = &v->ix.shards[at].hashes;
    }
  }
  uint64_t j = 0; /* the sample's place in the shard (the index's) */
  const wds_sample *s;
  /* After an error the reader goes on: with the next sample after a
   * duplicate extension, else with the (absent) next shard: WDS_EOF. */
  while ((rc = wds_reader_next(r, &s)) != WDS_EOF) {
    if (rc == WDS_ERR_CANCELLED && tool_signal_caught()) {
      v->shards--; /* not verified: the caller says so */
      break;
    }
    if (rc != WDS_OK) {
      const char *m = wds_last_error();
      report(v, classify(rc, m), url, NULL, strip_url(m, url));
      continue;
    }
    v->samples++;
    if (check_sample(v, url, s, &keys, h, j++) != 0) {
      status = -1;
      goto done;
    }
  }
done:
  key_set_free(&keys);
  tool_signals_reader(NULL);
  if (r) {
    wds_reader_stats cst;
    wds_reader_stats_get(r, &cst);
    v->cache_errors += cst.cache_errors;
  }
  wds_reader_close(r);
  return status;
}

/* Splits the --require list at ',' into v->require. */
static int parse_require(verifier *v, const char *list) {
  const char *p = list;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == 0 || (n && (p[0] == ';' || p[n - 1] == ';')) ||
        memmem(p, n, ";;", 2))
      return -1;
    char **g = realloc(v->require, (v->nrequire + 1) * sizeof *g);
    if (!g)
      return -1;
    v->require = g;
    if (!(g[v->nrequire] = strndup(p, n)))
      return -1;
    v->nrequire++;
    if (!end)
      return 0;
    p = end + 1;
  }
}

int tool_cmd_verify(int argc, char **argv) {
  static const struct option own[] = {
      {"require", required_argument, 0, 'r'},
      {"decode", no_argument, 0, 'd'},
      {"json", no_argument, 0, 'j'},
      {"image-memory-limit", required_argument, 0, 'I'},
      {"index", required_argument, 0, 'x'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  struct option opts[16];
  verifier v;
  memset(&v, 0, sizeof v);
  tool_reader_opts_init(&v.ro);
  int decode = 0, c, status = 2;
  uint64_t image_limit = 0;
  wds_url_list urls = {0};
  tool_stdout_init("verify");
  if (tool_reader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = tool_getopt("wds verify", argc, argv, "h", opts)) != -1) {
    switch (c) {
    case 'r':
      if (parse_require(&v, optarg) != 0) {
        tool_usage_error("wds verify",
                         "--require needs extensions separated by ',' "
                         "(alternatives by ';'): \"%s\"",
                         optarg);
        goto done;
      }
      break;
    case 'd':
      decode = 1;
      break;
    case 'I':
      if (tool_image_memory_limit("wds verify", optarg, &image_limit))
        goto done;
      break;
    case 'j':
      v.json = 1;
      break;
    case 'x':
      v.index_path = optarg;
      break;
    case 'h':
      fputs(verify_usage, stdout);
      tool_reader_opts_help(stdout);
      fputs(verify_usage_tail, stdout);
      status = 0;
      goto done;
    default:
      if (tool_reader_opt(&v.ro, c, optarg, "wds verify") != 1)
        goto done;
    }
  }
  if (optind >= argc) {
    tool_usage_error("wds verify", "expected a SPEC");
    goto done;
  }
  if (tool_reader_opts_finish(&v.ro, "wds verify") != 0)
    goto done;
  int xs =
      tool_reader_expand(&v.ro, "verify", argv + optind, argc - optind, &urls);
  if (xs) {
    status = tool_signal_caught() ? xs : 2;
    goto done;
  }
  if (v.index_path) {
    wds__err e;
    unsigned flags = WDS__INDEX_COUNT_SAMPLES | WDS__INDEX_HASHES;
    if (v.ro.cfg.allow_pipe_from_files)
      flags |= WDS_INDEX_ALLOW_PIPE_FROM_FILES;
    if (wds__index_load_flags(v.index_path, flags, &v.ix, &e) != WDS_OK) {
      fprintf(stderr, "wds verify: %s\n", e.msg);
      status = 1;
      goto done;
    }
  }
  if (decode && wds_decode_checker_open(&v.checker) != WDS_OK) {
    fprintf(stderr, "wds verify: out of memory\n");
    status = 1;
    goto done;
  }
  if (v.checker)
    wds_decode_checker_set_image_memory_limit(v.checker, image_limit);
  if (v.json)
    fputs("{\"problems\": [", stdout);
  tool_signals_defer(1); /* the shard loop checks */
  for (size_t i = 0; i < urls.count; i++) {
    if (tool_signal_caught())
      break;
    if (verify_shard(&v, urls.urls[i]) != 0) {
      fflush(stdout);
      fprintf(stderr, "wds verify: out of memory\n");
      status = 1;
      goto done;
    }
    if (tool_stdout_check() != 0) { /* the report is lost: stop */
      status = 1;
      goto done;
    }
  }
  if (tool_signal_caught()) {
    if (v.json)
      fputs("]}\n", stdout); /* valid JSON, but no verdict */
    status = tool_interrupted("verify",
                              "%" PRIu64 " of %zu shard%s verified (%" PRIu64
                              " problem%s "
                              "so far), no verdict",
                              v.shards, urls.count, urls.count == 1 ? "" : "s",
                              v.problems, v.problems == 1 ? "" : "s");
    goto done;
  }
  if (v.json) {
    printf("%s], \"shards\": %" PRIu64 ", \"samples\": %" PRIu64
           ", \"problem_count\": %" PRIu64 ", \"counts\": {",
           v.problems ? "\n" : "", v.shards, v.samples, v.problems);
    for (int k = 0; k < K_COUNT; k++)
      printf("%s\"%s\": %" PRIu64, k ? ", " : "", kind_names[k], v.counts[k]);
    printf("}}\n");
  } else if (v.problems == 0) {
    printf("verified %" PRIu64 " shard%s, %" PRIu64 " sample%s: no problems\n",
           v.shards, v.shards == 1 ? "" : "s", v.samples,
           v.samples == 1 ? "" : "s");
  } else {
    printf("verified %" PRIu64 " shard%s, %" PRIu64 " sample%s: %" PRIu64
           " problem%s (",
           v.shards, v.shards == 1 ? "" : "s", v.samples,
           v.samples == 1 ? "" : "s", v.problems, v.problems == 1 ? "" : "s");
    int first = 1;
    for (int k = 0; k < K_COUNT; k++)
      if (v.counts[k]) {
        printf("%s%s %" PRIu64, first ? "" : ", ", kind_names[k], v.counts[k]);
        first = 0;
      }
    printf(")\n");
  }
  status = v.problems ? 1 : 0;
done:
  if (tool_stdout_flush() != 0 && status == 0)
    status = 1;
  tool_cache_note("wds verify", v.ro.cfg.cache_dir, v.cache_errors);
  for (size_t i = 0; i < v.nrequire; i++)
    free(v.require[i]);
  free(v.require);
  wds_decode_checker_close(v.checker);
  wds__index_free(&v.ix);
  wds_url_list_free(&urls);
  return status;
}
