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

#include "base/json.h"
#include "loader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/reader.h" /* wds_open_error */

static const char batches_usage[] =
    "usage: wds batches SPEC... --decode FIELDS [loader options] [--save DIR]\n"
    "                   [--json]\n"
    "\n"
    "Runs the loader for --epochs epochs and prints one line per batch:\n"
    "\n"
    "  EPOCH BATCH KEY...      the sample keys of the batch's rows, in order\n"
    "\n"
    "A key byte that is a blank, a control character, DEL or a backslash is\n"
    "written as \\xHH, so keys never contain spaces. Rows marked invalid\n"
    "(padding, failed samples) are listed like the others; --json shows them:\n"
    "\n"
    "  --json      one JSON object per line instead:\n"
    "              {\"epoch\":E,\"batch\":B,\"keys\":[...],\"valid\":[1,1,0]}\n"
    "              (keys as JSON strings; bytes that are not UTF-8 as "
    "\\udcXX)\n"
    "  --save DIR  also write each field of each batch to\n"
    "              DIR/e{EPOCH}-b{BATCH:06d}.{FIELD}.npy (';' in the field "
    "name\n"
    "              becomes '_'); a bytes field is a 1-D uint8 array of the "
    "rows\n"
    "              laid end to end plus {FIELD}.offsets.npy (uint64, rows + 1\n"
    "              entries: row i is data[offsets[i]:offsets[i+1]])\n"
    "\n"
    "Exit status: 0, 1 for a loader error (\"wds batches: MESSAGE\"), 2 for a\n"
    "usage error.\n\n";

/* Writes a key for the text output (see the usage). */
static void put_key(FILE *f, const char *key) {
  if (!key) {
    fputs("\\x00", f); /* no key: not expected, but visible */
    return;
  }
  for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
    if (*p <= 0x20 || *p == 0x7f || *p == '\\')
      fprintf(f, "\\x%02x", *p);
    else
      putc(*p, f);
  }
}

static void print_batch(const wds_batch *b, int json) {
  if (!json) {
    printf("%" PRIu64 " %" PRIu64, b->epoch, b->index);
    for (size_t i = 0; i < b->rows; i++) {
      putchar(' ');
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

/* Saves every field of b; prints the error and returns 1 on failure. */
static int save_batch(const char *dir, const wds_batch *b) {
  char err[512];
  for (size_t i = 0; i < b->field_count; i++) {
    const wds_batch_field *f = &b->fields[i];
    char *path = npy_path(dir, b, f->name, ""), *opath = NULL;
    int rc = WDS_ERR_NOMEM;
    snprintf(err, sizeof err, "out of memory");
    if (path && f->dtype != WDS_DTYPE_BYTES) {
      rc = wds_npy_save(path, f->dtype, f->ndim, f->shape, f->data, err,
                        sizeof err);
    } else if (path) {
      int64_t shape = (int64_t)f->size_bytes;
      rc =
          wds_npy_save(path, WDS_DTYPE_U8, 1, &shape, f->data, err, sizeof err);
      opath = npy_path(dir, b, f->name, ".offsets");
      if (rc == WDS_OK && !opath) {
        rc = WDS_ERR_NOMEM;
        snprintf(err, sizeof err, "out of memory");
      }
      if (rc == WDS_OK) {
        int64_t oshape = (int64_t)b->rows + 1;
        rc = wds_npy_save(opath, WDS_DTYPE_U64, 1, &oshape, f->offsets, err,
                          sizeof err);
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

int tool_cmd_batches(int argc, char **argv) {
  static const struct option own[] = {{"json", no_argument, 0, 'j'},
                                      {"save", required_argument, 0, 's'},
                                      {"help", no_argument, 0, 'h'},
                                      {0, 0, 0, 0}};
  struct option opts[64];
  tool_loader_opts lo;
  tool_loader_opts_init(&lo);
  int json = 0, c, status = 0, r;
  const char *save = NULL;
  wds_url_list urls = {0};
  wds_loader *l = NULL;
  tool_stdout_init("batches");
  if (tool_loader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'j':
      json = 1;
      break;
    case 's':
      save = optarg;
      break;
    case 'h':
      fputs(batches_usage, stdout);
      tool_loader_opts_help(stdout);
      return tool_stdout_check() != 0; /* longer than a buffer */
    default:
      r = tool_loader_opt(&lo, c, optarg, "batches");
      if (r == 1)
        break;
      if (r == 0)
        fputs("wds batches: see wds batches --help\n", stderr);
      return 2;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "wds batches: expected a SPEC (see wds batches --help)\n");
    return 2;
  }
  if (!lo.decode) {
    fprintf(stderr, "wds batches: --decode FIELDS is required, e.g. --decode "
                    "\"jpg;png:rgb:224,cls\" (see wds batches --help)\n");
    return 2;
  }
  if (tool_loader_opts_finish(&lo, "batches") != 0) {
    status = 2;
    goto done;
  }
  if (save && mkdir(save, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "wds batches: --save %s: %s\n", save, strerror(errno));
    status = 1;
    goto done;
  }
  if (argc - optind == 1) {
    lo.cfg.spec = argv[optind];
  } else {
    if (tool_expand_specs("batches", argv + optind, argc - optind, 0, &urls)) {
      status = 1;
      goto done;
    }
    lo.cfg.urls = (const char *const *)urls.urls;
    lo.cfg.url_count = urls.count;
  }
  if (wds_loader_open(&lo.cfg, &l) != WDS_OK) {
    fprintf(stderr, "wds batches: %s\n", wds_open_error());
    status = 1;
    goto done;
  }
  tool_signals_loader(0, l);
  uint64_t printed = 0;
  for (uint64_t e = 0; e < lo.epochs && status == 0; e++) {
    const wds_batch *b;
    while ((r = wds_loader_next(l, &b)) == WDS_OK) {
      printed++;
      print_batch(b, json);
      int failed = tool_stdout_check() != 0 || (save && save_batch(save, b));
      wds_loader_release(l, b);
      if (failed) {
        status = 1;
        break;
      }
    }
    if (status == 0 && r == WDS_ERR_CANCELLED && tool_signal_caught()) {
      status = tool_interrupted("batches", "%llu batches printed%s",
                                (unsigned long long)printed,
                                save ? " and saved" : "");
      break;
    }
    if (status == 0 && r != WDS_EOF) {
      fflush(stdout); /* the batches before the error come first */
      fprintf(stderr, "wds batches: %s\n", wds_loader_error(l));
      status = 1;
    }
  }
  if (tool_stdout_flush() != 0)
    status = 1;
done:
  tool_signals_loader(0, NULL);
  wds_loader_close(l);
  wds_url_list_free(&urls);
  tool_loader_opts_free(&lo);
  return status;
}
