/* cmd_batches.c — `wds batches`: run the loader and print what each batch
 * holds, one line per batch, so the epoch semantics (exact, resampled,
 * padding, resume) can be checked from a shell, and with --save write the
 * arrays as .npy files for numpy.
 *
 * Single-threaded over the public loader API: next() -> print/save ->
 * release(), every batch released before the next is asked for. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/text.h"
#include "base/url.h"
#include "gpu_jpeg.h"
#include "loader_opts.h"
#include "opts.h"
#include "signals.h"
#include "util.h"
#include "wds/outfile.h"
#include "wds/reader.h" /* wds_last_error */

static const char batches_usage[] =
    "usage: wds batches SPEC... --decode FIELDS [loader options] [--save DIR]\n"
    "                   [--json]\n"
    "       wds batches --source SPEC[:OPTIONS] --source ... --decode FIELDS\n"
    "                   [loader options] [--save DIR] [--json]\n"
    "\n"
    "Runs the loader for --epochs epochs and prints one line per batch:\n"
    "\n"
    "  EPOCH BATCH KEY...      the sample keys of the batch's rows, in order\n"
    "  EPOCH BATCH S:KEY...    with --source: each key after its row's source\n"
    "                          (0 for the first --source, 1, ...)\n"
    "\n"
    "A key byte that is a blank, a control character, DEL, a backslash or\n"
    "not part of valid UTF-8 is written as \\xHH, so keys never contain\n"
    "spaces. Rows marked invalid (padding, failed samples) are listed like\n"
    "the others; --json shows them:\n"
    "\n"
    "  --json      one JSON object per line instead:\n"
    "              {\"epoch\":E,\"batch\":B,\"keys\":[...],\"valid\":[1,1,0]}\n"
    "              (keys as JSON strings; bytes that are not UTF-8 as "
    "\\udcXX),\n"
    "              with --source also \"sources\":[0,1,...]\n"
    "  --save DIR  also write each field of each batch to\n"
    "              DIR/e{EPOCH}-b{BATCH:06d}.{FIELD}.npy (';' in the field "
    "name\n"
    "              becomes '_'); a bytes field is a 1-D uint8 array of the "
    "rows\n"
    "              laid end to end plus {FIELD}.offsets.npy (uint64, rows + 1\n"
    "              entries: row i is data[offsets[i]:offsets[i+1]]); and per\n"
    "              batch the rows: e{EPOCH}-b{BATCH:06d}.__valid__.npy "
    "(uint8,\n"
    "              1 for a real row, 0 for padding or a failed sample) and\n"
    "              e{EPOCH}-b{BATCH:06d}.__rows__.json ({\"keys\": [...],\n"
    "              \"urls\": [...]}: each row's sample key and shard, its\n"
    "              secrets as ***; with\n"
    "              --source also \"sources\": [...], each row's source)\n"
    "\n"
    "Stopping and resuming (the position and what gives it meaning, checked):\n"
    "\n"
    "  --max-batches N      stop after N batches (over every epoch)\n"
    "  --save-state FILE    at the end (also after --max-batches or an\n"
    "                       interrupt) write the loader's saved state to FILE\n"
    "                       (wds_loader_state: a few lines of text)\n"
    "  --resume-state FILE  resume at the state in FILE, saved by any rank of\n"
    "                       the job (overrides --epoch and --resume-at). In\n"
    "                       exact mode another --world, batch or per-rank\n"
    "                       sizes, --workers or shuffle buffer is an elastic\n"
    "                       resume: the ranks print the rest of the epoch\n"
    "                       between them, each sample once, in equal steps.\n"
    "                       (Resampled mode: the count it still owes.) What\n"
    "                       cannot be continued exactly (another seed, mode "
    "or\n"
    "                       data; another world in plain mode) is an error\n"
    "                       naming both values\n"
    "\n"
    "With --on-error skip, what was skipped is summed up on stderr at the end\n"
    "(how many errors and invalid rows, and the first few messages).\n"
    "\n"
    "Exit status: 0, 1 for a loader error (\"wds batches: MESSAGE\"), 2 for a\n"
    "usage error.\n\n";

/* Writes a key for the text output (see the usage; base/text.h). */
static void put_key(FILE *f, const char *key) {
  if (!key) {
    fputs("\\x00", f); /* no key: not expected, but visible */
    return;
  }
  wds__esc_write(f, key, WDS__ESC_BLANK | WDS__ESC_BACKSLASH);
}

static void print_batch(const wds_batch *b, int json, int sources) {
  if (!json) {
    printf("%" PRIu64 " %" PRIu64, b->epoch, b->index);
    for (size_t i = 0; i < b->rows; i++) {
      putchar(' ');
      if (sources)
        printf("%" PRIu32 ":", b->sources[i]);
      put_key(stdout, b->keys[i]);
    }
    putchar('\n');
    return;
  }
  printf("{\"epoch\":%" PRIu64 ",\"batch\":%" PRIu64 ",\"keys\":[", b->epoch,
         b->index);
  for (size_t i = 0; i < b->rows; i++) {
    if (i)
      putchar(',');
    if (b->keys[i])
      wds__json_write_string(stdout, b->keys[i], strlen(b->keys[i]));
    else
      fputs("null", stdout);
  }
  fputs("],\"valid\":[", stdout);
  for (size_t i = 0; i < b->rows; i++)
    printf(i ? ",%d" : "%d", b->valid ? b->valid[i] : 1);
  if (sources) {
    fputs("],\"sources\":[", stdout);
    for (size_t i = 0; i < b->rows; i++)
      printf(i ? ",%" PRIu32 : "%" PRIu32, b->sources[i]);
  }
  fputs("]}\n", stdout);
}

/* DIR/e{epoch}-b{index:06d}.{field}{suffix}.npy, ';' -> '_'. */
static char *npy_path(const char *dir, const wds_batch *b, const char *field,
                      const char *suffix) {
  size_t n = strlen(dir) + strlen(field) + strlen(suffix) + 96;
  char *p = malloc(n);
  if (!p)
    return NULL;
  int k = snprintf(p, n, "%s/e%" PRIu64 "-b%06" PRIu64 ".", dir, b->epoch,
                   b->index);
  for (const char *s = field; *s; s++)
    p[k++] = *s == ';' ? '_' : *s;
  snprintf(p + k, n - (size_t)k, "%s.npy", suffix);
  return p;
}

/* DIR/e{epoch}-b{index:06d}.__rows__.json: the rows' keys and shards (the
 * URLs without their secrets: base/url.h), written whole through
 * wds_outfile as the arrays are (wds_npy_save). */
static int save_rows(const char *dir, const wds_batch *b, int sources,
                     char *err, size_t errn) {
  char *path = npy_path(dir, b, "__rows__", ""), *text = NULL;
  size_t len = 0;
  FILE *f = NULL;
  wds_outfile *of = NULL;
  int rc = WDS_ERR_NOMEM;
  snprintf(err, errn, "out of memory");
  if (!path || !(f = open_memstream(&text, &len)))
    goto done;
  strcpy(path + strlen(path) - 4, ".json"); /* npy_path ends in ".npy" */
  for (int which = 0; which < 2; which++) {
    const char *const *v = which ? b->urls : b->keys;
    fputs(which ? "], \"urls\": [" : "{\"keys\": [", f);
    for (size_t i = 0; i < b->rows; i++) {
      if (i)
        fputs(", ", f);
      char red[WDS__URL_REDACT_MAX], *full = NULL;
      const char *s = v ? v[i] : NULL;
      if (s && which) /* a URL: without its secrets, in full */
        s = (full = wds__url_redacted(s)) ? full
                                          : wds__url_redact(s, red, sizeof red);
      if (s)
        wds__json_write_string(f, s, strlen(s));
      else
        fputs("null", f);
      free(full);
    }
  }
  if (sources) {
    fputs("], \"sources\": [", f);
    for (size_t i = 0; i < b->rows; i++)
      fprintf(f, i ? ", %" PRIu32 : "%" PRIu32, b->sources[i]);
  }
  fputs("]}\n", f);
  int failed = fclose(f) != 0;
  f = NULL;
  if (failed || !text)
    goto done;
  if ((rc = wds_outfile_open(path, WDS_OUTFILE_NO_SYNC, &of)) != WDS_OK) {
    snprintf(err, errn, "%s", wds_last_error());
    goto done;
  }
  for (size_t at = 0; at < len;) {
    ssize_t k = write(wds_outfile_fd(of), text + at, len - at);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      snprintf(err, errn, "%s: %s", path,
               k < 0 ? strerror(errno) : "short write");
      rc = WDS_ERR_IO;
      goto done;
    }
    at += (size_t)k;
  }
  if ((rc = wds_outfile_commit(of)) != WDS_OK)
    snprintf(err, errn, "%s", wds_last_error());
done:
  if (f)
    fclose(f);
  wds_outfile_close(of); /* removes the temporary file after an error */
  free(text);
  free(path);
  return rc;
}

/* --save-state: the loader's state into path (wds_outfile); 1 with the
 * error printed on failure. */
static int save_state(wds_loader *l, const char *path) {
  char *text = NULL;
  wds_outfile *of = NULL;
  int rc = wds_loader_state(l, &text);
  if (rc == WDS_OK && (rc = wds_outfile_open(path, 0, &of)) == WDS_OK) {
    size_t len = strlen(text);
    for (size_t at = 0; at < len && rc == WDS_OK;) {
      ssize_t k = write(wds_outfile_fd(of), text + at, len - at);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0) {
        fprintf(stderr, "wds batches: --save-state %s: %s\n", path,
                k < 0 ? strerror(errno) : "short write");
        rc = WDS_ERR_IO;
        break;
      }
      at += (size_t)k;
    }
    if (rc == WDS_OK && (rc = wds_outfile_commit(of)) != WDS_OK)
      fprintf(stderr, "wds batches: --save-state: %s\n", wds_last_error());
  } else {
    fprintf(stderr, "wds batches: --save-state: %s\n", wds_last_error());
  }
  wds_outfile_close(of);
  free(text);
  return rc != WDS_OK;
}

/* --resume-state: the text of path (at most 16 MiB: a state of a million
 * ranks' sizes), malloc'd; NULL with the error printed. */
static char *read_state(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "wds batches: --resume-state %s: %s\n", path,
            strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 12, n = 0, max = (size_t)16 << 20;
  char *d = malloc(cap + 1);
  while (d) {
    size_t k = fread(d + n, 1, cap - n, f);
    n += k;
    if (n < cap)
      break;
    char *nd = cap >= max ? NULL : realloc(d, 2 * cap + 1);
    if (!nd) {
      fprintf(stderr, "wds batches: --resume-state %s: %s\n", path,
              cap >= max ? "larger than 16 MiB: not a loader state"
                         : "out of memory");
      free(d);
      d = NULL;
      break;
    }
    d = nd;
    cap *= 2;
  }
  if (d && ferror(f)) {
    fprintf(stderr, "wds batches: --resume-state %s: read failed\n", path);
    free(d);
    d = NULL;
  }
  fclose(f);
  if (d)
    d[n] = 0;
  return d;
}

/* Saves every field of b, its valid mask and its rows' keys; prints the
 * error and returns 1 on failure. */
static int save_batch(const char *dir, const wds_batch *b, int sources) {
  char err[512];
  {
    /* The valid mask: which rows are real (padding and failed samples are
     * not), so a reader of the arrays can tell them apart. */
    uint8_t *ones = NULL;
    const uint8_t *valid = b->valid;
    if (!valid && (ones = malloc(b->rows ? b->rows : 1)))
      memset(ones, 1, b->rows);
    char *path = npy_path(dir, b, "__valid__", "");
    int64_t shape = (int64_t)b->rows;
    int rc = WDS_ERR_NOMEM;
    snprintf(err, sizeof err, "out of memory");
    if (path && (valid || ones) &&
        (rc = wds_npy_save(path, WDS_DTYPE_U8, 1, &shape,
                           valid ? valid : ones)) != WDS_OK)
      snprintf(err, sizeof err, "%s", wds_last_error());
    free(path);
    free(ones);
    if (rc == WDS_OK)
      rc = save_rows(dir, b, sources, err, sizeof err);
    if (rc != WDS_OK) {
      fprintf(stderr, "wds batches: --save: %s\n", err);
      return 1;
    }
  }
  for (size_t i = 0; i < b->field_count; i++) {
    const wds_batch_field *f = &b->fields[i];
    char *path = npy_path(dir, b, f->name, ""), *opath = NULL;
    int rc = WDS_ERR_NOMEM;
    snprintf(err, sizeof err, "out of memory");
    if (path && f->dtype != WDS_DTYPE_BYTES) {
      rc = wds_npy_save(path, f->dtype, f->ndim, f->shape, f->data);
      if (rc != WDS_OK)
        snprintf(err, sizeof err, "%s", wds_last_error());
    } else if (path) {
      int64_t shape = (int64_t)f->size_bytes;
      rc = wds_npy_save(path, WDS_DTYPE_U8, 1, &shape, f->data);
      if (rc != WDS_OK)
        snprintf(err, sizeof err, "%s", wds_last_error());
      opath = npy_path(dir, b, f->name, ".offsets");
      if (rc == WDS_OK && !opath) {
        rc = WDS_ERR_NOMEM;
        snprintf(err, sizeof err, "out of memory");
      }
      if (rc == WDS_OK) {
        int64_t oshape = (int64_t)b->rows + 1;
        rc = wds_npy_save(opath, WDS_DTYPE_U64, 1, &oshape, f->offsets);
        if (rc != WDS_OK)
          snprintf(err, sizeof err, "%s", wds_last_error());
      }
    }
    free(path);
    free(opath);
    if (rc != WDS_OK) {
      fprintf(stderr, "wds batches: --save: %s\n", err);
      return 1;
    }
  }
  return 0;
}

/* --on-error skip: what the loader skipped, from its log (one call at a
 * time), summed up at the end. */
#define SKIP_SHOWN 5
typedef struct skip_log {
  uint64_t count;
  char *first[SKIP_SHOWN];
} skip_log;

static void skip_log_cb(void *ctx, const char *message) {
  skip_log *s = ctx;
  if (strncmp(message, "skipped", 7) != 0)
    return;
  if (s->count < SKIP_SHOWN)
    s->first[s->count] = strdup(message);
  s->count++;
}

static void skip_summary(const skip_log *s, const wds_loader_stats *stats) {
  wds_loader_stats st = *stats;
  if (st.skipped < s->count)
    st.skipped = s->count; /* any logged after the stats were taken */
  if (st.skipped == 0)
    return;
  fprintf(stderr,
          "wds batches: --on-error skip: skipped %" PRIu64 " error%s; %" PRIu64
          " invalid row%s (failed samples and padding)%s\n",
          st.skipped, st.skipped == 1 ? "" : "s", st.fill_rows,
          st.fill_rows == 1 ? "" : "s", s->count ? "; the first:" : "");
  for (size_t i = 0; i < SKIP_SHOWN && i < s->count; i++)
    if (s->first[i])
      fprintf(stderr, "  %s\n", s->first[i]);
  if (s->count > SKIP_SHOWN)
    fprintf(stderr, "  ... and %" PRIu64 " more\n", s->count - SKIP_SHOWN);
}

int tool_cmd_batches(int argc, char **argv) {
  static const struct option own[] = {
      {"json", no_argument, 0, 'j'},
      {"save", required_argument, 0, 's'},
      {"max-batches", required_argument, 0, 'M'},
      {"save-state", required_argument, 0, 'S'},
      {"resume-state", required_argument, 0, 'R'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  struct option opts[64];
  tool_loader_opts lo;
  tool_loader_opts_init(&lo);
  int json = 0, c, status = 0, r = WDS_OK;
  const char *save = NULL, *save_state_path = NULL, *resume_path = NULL;
  char *resume_text = NULL;
  uint64_t max_batches = UINT64_MAX;
  wds_url_list urls = {0};
  wds_loader *l = NULL;
  wds_gpu_jpeg *gj = NULL; /* --jpeg-decode gpu */
  tool_gpu_batch gb;
  memset(&gb, 0, sizeof gb);
  skip_log skips = {0};
  tool_stdout_init("batches");
  if (tool_loader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = tool_getopt("wds batches", argc, argv, "h", opts)) != -1) {
    switch (c) {
    case 'j':
      json = 1;
      break;
    case 's':
      save = optarg;
      break;
    case 'M':
      if (tool_parse_u64(optarg, &max_batches) != 0) {
        status = tool_usage_error("wds batches",
                                  "--max-batches needs a whole number");
        goto done;
      }
      break;
    case 'S':
      save_state_path = optarg;
      break;
    case 'R':
      resume_path = optarg;
      break;
    case 'h':
      fputs(batches_usage, stdout);
      tool_loader_opts_help(stdout);
      return tool_stdout_check() != 0; /* longer than a buffer */
    case TOOL_OPT_BAD:
      status = 2;
      goto done;
    default:
      r = tool_loader_opt(&lo, c, optarg, "wds batches");
      if (r == 1)
        break;
      status = 2;
      goto done;
    }
  }
  if ((status = tool_loader_inputs_check(&lo, "wds batches", argc - optind)))
    goto done;
  if (!lo.decode) {
    return tool_usage_error("wds batches",
                            "--decode FIELDS is required, e.g. --decode "
                            "\"jpg;png:rgb:224,cls\"");
  }
  if (tool_loader_opts_finish(&lo, "wds batches") != 0) {
    status = 2;
    goto done;
  }
  if (save && mkdir(save, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "wds batches: --save %s: %s\n", save, strerror(errno));
    status = 1;
    goto done;
  }
  tool_allow_pipe_from_files = lo.cfg.allow_pipe_from_files;
  if (lo.nsources) {
    /* the sources are the input (tool_loader_opts_finish set them) */
  } else if (argc - optind == 1) {
    lo.cfg.spec = argv[optind];
  } else {
    if ((status =
             tool_expand_specs("batches", argv + optind, argc - optind, 0,
                               lo.cfg.read_timeout_ms, lo.cfg.retries, &urls)))
      goto done;
    lo.cfg.urls = (const char *const *)urls.urls;
    lo.cfg.url_count = urls.count;
  }
  if (lo.cfg.on_error == WDS_ON_ERROR_SKIP) {
    lo.cfg.log = skip_log_cb;
    lo.cfg.log_ctx = &skips;
  }
  if (resume_path) {
    if (!(resume_text = read_state(resume_path))) {
      status = 1;
      goto done;
    }
    lo.cfg.resume_state = resume_text;
  }
  if (tool_gpu_jpeg_open("batches", &lo.cfg, &gj) != 0) {
    status = 1;
    goto done;
  }
  if (wds_loader_open(&lo.cfg, &l) != WDS_OK) {
    fprintf(stderr, "wds batches: %s\n", wds_last_error());
    status = 1;
    goto done;
  }
  tool_signals_loader(0, l);
  tool_print_rank_batches(stderr, "wds batches", &lo.cfg, l);
  uint64_t printed = 0;
  for (uint64_t e = 0; e < lo.epochs && status == 0 && printed < max_batches;
       e++) {
    const wds_batch *b;
    while (printed < max_batches && (r = wds_loader_next(l, &b)) == WDS_OK) {
      const wds_batch *show = b;
      /* --jpeg-decode gpu: decoded first (a failed image turns its row
       * invalid under skip), kept on the host for --save */
      if (gj) {
        if (tool_gpu_jpeg_batch("batches", gj, l, b, save != NULL, &gb) != 0) {
          wds_loader_release(l, b);
          status = 1;
          break;
        }
        show = &gb.b;
      }
      printed++;
      print_batch(show, json, lo.nsources > 0);
      int failed = tool_stdout_check() != 0 ||
                   (save && save_batch(save, show, lo.nsources > 0));
      wds_loader_release(l, b);
      if (failed) {
        status = 1;
        break;
      }
    }
    if (status == 0 && r == WDS_ERR_CANCELLED && tool_signal_caught()) {
      status = tool_interrupted(
          "batches", "%llu batch%s printed%s", (unsigned long long)printed,
          printed == 1 ? "" : "es", save ? " and saved" : "");
      break;
    }
    if (printed == max_batches)
      break;
    if (status == 0 && r != WDS_EOF) {
      fflush(stdout); /* the batches before the error come first */
      fprintf(stderr, "wds batches: %s\n", wds_last_error());
      status = 1;
    }
  }
  if (tool_stdout_flush() != 0)
    status = 1;
  /* After an interrupt too: the position of the last batch printed. */
  if (save_state_path && l && (status == 0 || tool_signal_caught()) &&
      save_state(l, save_state_path) != 0 && status == 0)
    status = 1;
done:
  tool_signals_loader(0, NULL);
  wds_loader_stats st = {0};
  int opened = l != NULL;
  if (l)
    wds_loader_stats_get(l, &st);
  /* Closed first: the log is the workers' until they stop. */
  wds_loader_close(l);
  if (gj)
    tool_gpu_jpeg_report(stderr, gj);
  wds_gpu_jpeg_close(gj);
  tool_gpu_batch_free(&gb);
  if (opened && lo.cfg.on_error == WDS_ON_ERROR_SKIP)
    skip_summary(&skips, &st);
  tool_cache_note("wds batches", lo.cfg.cache_dir, st.cache_errors);
  for (size_t i = 0; i < SKIP_SHOWN; i++)
    free(skips.first[i]);
  wds_url_list_free(&urls);
  free(resume_text);
  tool_loader_opts_free(&lo);
  return status;
}
