/* cmd_index.c — `wds index`: one JSON index for a shard set (format in
 * wds/index.h, the top level compatible with wids' shard index).
 *
 * Each shard is read by its own reader, to its end, so a shard's count,
 * tar size and errors are its own. A shard's "samples" list is built in a
 * memory stream and its entry written once the shard has been read
 * completely. The text itself is written by loader/index.c, next to the
 * reader of the same format.
 * Memory is one shard's entry at a time.
 *
 * With -o the index goes through wds_outfile (wds/outfile.h): a temporary
 * file in the target directory, synced and renamed when complete; any error
 * removes it, so no partial index ever sits under the final name. A target
 * that is a device or a FIFO is written in place, never replaced; "-o -" is
 * stdout. Local shard paths are then written relative to the index's
 * directory (the loader resolves them against it), so the index and its
 * shards can be moved together. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/size.h"
#include "base/url.h"
#include "loader/index.h"
#include "reader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/index.h"
#include "wds/outfile.h"
#include "wds/reader.h"

/* /dev/stdin, /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: one of
 * the process's own descriptors (wds/outfile.h writes them in place). */
static int names_own_fd(const char *p) {
  if (!strcmp(p, "/dev/stdin") || !strcmp(p, "/dev/stdout") ||
      !strcmp(p, "/dev/stderr"))
    return 1;
  const char *n = !strncmp(p, "/dev/fd/", 8)          ? p + 8
                  : !strncmp(p, "/proc/self/fd/", 14) ? p + 14
                                                      : NULL;
  return n && *n && strspn(n, "0123456789") == strlen(n);
}

static const char index_usage[] =
    "usage: wds index [-o FILE] [--name NAME] [--max-urls N] SPEC...\n"
    "\n"
    "Reads every shard to its end and writes one JSON index of the set:\n"
    "  {\"wids_version\": 1, \"__kind__\": \"wds-shard-index\", \"name\": "
    "NAME,\n"
    "   \"shardlist\": [{\"url\": U, \"nsamples\": N, \"filesize\": BYTES,\n"
    "                  \"tar_bytes\": BYTES, \"samples\": [{\"key\": K,\n"
    "                  \"fields\": {EXT: [OFFSET, SIZE], ...}}, ...]}, ...]}\n"
    "nsamples counts the samples the reader yields (what the loader's exact\n"
    "mode needs); filesize is null for pipe:, stdin and remote URLs; OFFSET\n"
    "is that of the member's first header in the decompressed tar stream,\n"
    "SIZE the size of its data. A URL's secrets (its password, token and\n"
    "signature values; a pipe: command's -u password, secret headers and\n"
    "assignments) are written as ***: the index still matches the URLs and\n"
    "commands that carry them.\n"
    "  -o FILE      write to FILE instead of stdout (- for stdout): under a\n"
    "               temporary name, synced and renamed when complete; a\n"
    "               FILE that is a device or a FIFO (/dev/null) is written\n"
    "               in place, never replaced. Local shard paths are then\n"
    "               written relative to FILE's directory\n"
    "  --name NAME  the index's \"name\" (default: the first SPEC)\n";

static const char index_usage_tail[] =
    "The loader (wds batches --mode exact --index FILE) and wds ls --summary\n"
    "--index FILE read it. Exits 1, leaving no index, if a shard cannot be\n"
    "read completely (the message names it).\n"
    "\n" WDS__SIZE_HELP;

static tool_reader_opts ro;   /* --read-timeout, --retries, the cache... */
static uint64_t cache_errors; /* shards read without the cache */

/* Reads one shard and writes its shardlist entry to out (first: the first
 * entry). Returns 0, or 1 after printing the error (nothing when a signal
 * cancelled the read). */
static int index_shard(const char *url, const char *written_url, int first,
                       FILE *out) {
  int status = 1, rc;
  char *buf = NULL;
  size_t buf_len = 0;
  FILE *mem = NULL;
  wds_reader *r = NULL;
  uint64_t nsamples = 0;
  int64_t filesize = -1;
  const char *lp = wds_index_local_path(url);
  struct stat st;
  if (lp && stat(lp, &st) == 0 && S_ISREG(st.st_mode))
    filesize = (int64_t)st.st_size;

  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = &url;
  cfg.url_count = 1;
  tool_reader_opts_apply(&ro, &cfg);
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    fprintf(stderr, "wds index: %s\n", wds_last_error());
    goto done;
  }
  tool_signals_reader(r);
  if (!(mem = open_memstream(&buf, &buf_len))) {
    fprintf(stderr, "wds index: out of memory\n");
    goto done;
  }
  const wds_sample *s;
  while ((rc = wds_reader_next(r, &s)) == WDS_OK) {
    wds__index_write_sample(mem, nsamples == 0, s);
    nsamples++;
  }
  if (rc == WDS_ERR_CANCELLED && tool_signal_caught())
    goto done; /* the caller says so */
  if (rc != WDS_EOF) {
    fprintf(stderr, "wds index: %s\n", wds_last_error());
    goto done;
  }
  if (fclose(mem) != 0) {
    mem = NULL;
    fprintf(stderr, "wds index: out of memory\n");
    goto done;
  }
  mem = NULL;
  wds_reader_stats rs;
  wds_reader_stats_get(r, &rs);
  /* The file changed while it was read: the index would be stale. */
  if (filesize >= 0 && stat(lp, &st) == 0 && (int64_t)st.st_size != filesize) {
    char shown[WDS__URL_REDACT_MAX];
    fprintf(stderr,
            "wds index: %s: the shard changed while it was read (%" PRId64
            " bytes, now %" PRId64 ")\n",
            wds__url_shown(url, shown, sizeof shown), filesize,
            (int64_t)st.st_size);
    goto done;
  }
  wds__index_write_entry(out, first, written_url, nsamples, filesize,
                         rs.tar_bytes, buf, buf_len);
  status = 0;
done:
  if (mem)
    fclose(mem);
  free(buf);
  tool_signals_reader(NULL);
  if (r) {
    wds_reader_stats cst;
    wds_reader_stats_get(r, &cst);
    cache_errors += cst.cache_errors;
  }
  wds_reader_close(r);
  return status;
}

int tool_cmd_index(int argc, char **argv) {
  static const struct option own[] = {{"output", required_argument, 0, 'o'},
                                      {"name", required_argument, 0, 'n'},
                                      {"help", no_argument, 0, 'h'},
                                      {0, 0, 0, 0}};
  struct option opts[16];
  const char *out_path = NULL, *name = NULL;
  int c, r;
  tool_stdout_init("index");
  tool_reader_opts_init(&ro);
  if (tool_reader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = tool_getopt("wds index", argc, argv, "o:h", opts)) != -1) {
    switch (c) {
    case 'o':
      out_path = optarg;
      break;
    case 'n':
      name = optarg;
      break;
    case 'h':
      fputs(index_usage, stdout);
      tool_reader_opts_help(stdout);
      fputs(index_usage_tail, stdout);
      return 0;
    default:
      if ((r = tool_reader_opt(&ro, c, optarg, "wds index")) != 1)
        return 2;
    }
  }
  if (optind >= argc)
    return tool_usage_error("wds index", "expected a SPEC");
  if (tool_reader_opts_finish(&ro, "wds index") != 0)
    return 2;
  if (out_path && strcmp(out_path, "-") == 0)
    out_path = NULL; /* stdout */
  if (out_path && (!out_path[0] || out_path[strlen(out_path) - 1] == '/')) {
    return tool_usage_error("wds index", "-o needs a file name");
  }
  char *default_name = NULL; /* the first SPEC without its secrets */
  if (!name && !(name = default_name = wds__url_redacted(argv[optind]))) {
    fprintf(stderr, "wds index: out of memory\n");
    return 1;
  }

  int status = 1;
  tool_signals_defer(1); /* the shard loop checks; -o's temporary goes */
  wds_url_list urls = {0};
  char *dir_real = NULL;
  wds_outfile *of = NULL;
  FILE *out = stdout;
  int xs =
      tool_reader_expand(&ro, "index", argv + optind, argc - optind, &urls);
  if (xs) {
    status = tool_signal_caught() ? xs : 2;
    goto done;
  }
  if (out_path && names_own_fd(out_path)) {
    /* /dev/stdout, /dev/fd/N: written through the descriptor (as -o -),
     * whose file may be anywhere: paths as given, as for -o -. */
    if (wds_outfile_open(out_path, 0, &of) != WDS_OK) {
      fprintf(stderr, "wds index: %s\n", wds_last_error());
      goto done;
    }
  } else if (out_path) {
    const char *slash = strrchr(out_path, '/');
    char *dir =
        slash ? strndup(out_path, (size_t)(slash - out_path) + 1) : strdup(".");
    if (!dir) {
      fprintf(stderr, "wds index: out of memory\n");
      goto done;
    }
    dir_real = realpath(dir, NULL);
    if (!dir_real) {
      fprintf(stderr, "wds index: %s: %s\n", dir, strerror(errno));
      free(dir);
      goto done;
    }
    free(dir);
    if (wds_outfile_open(out_path, 0, &of) != WDS_OK) {
      fprintf(stderr, "wds index: %s\n", wds_last_error());
      goto done;
    }
  }
  if (of) {
    /* stdio on a copy of the descriptor: fclose flushes it, and commit
     * syncs and closes the outfile's own. */
    int fd = dup(wds_outfile_fd(of));
    if (fd < 0 || !(out = fdopen(fd, "w"))) {
      fprintf(stderr, "wds index: %s: %s\n", out_path, strerror(errno));
      if (fd >= 0)
        close(fd);
      out = stdout;
      goto done;
    }
  }

  wds__index_write_head(out, name);
  for (size_t i = 0; i < urls.count; i++) {
    char *wurl = wds_index_url_for(urls.urls[i], dir_real);
    if (!wurl) {
      fprintf(stderr, "wds index: out of memory\n");
      goto done;
    }
    int rc = index_shard(urls.urls[i], wurl, i == 0, out);
    free(wurl);
    if (tool_signal_caught()) {
      status = tool_interrupted("index",
                                "%zu of %zu shard%s read, no index "
                                "written",
                                rc ? i : i + 1, urls.count,
                                urls.count == 1 ? "" : "s");
      goto done;
    }
    if (rc != 0)
      goto done;
    if (ferror(out)) /* stop reading shards: reported below */
      break;
  }
  wds__index_write_tail(out);
  if (out == stdout) {
    if (tool_stdout_flush() != 0)
      goto done;
  } else {
    FILE *f = out;
    out = stdout;
    int failed = ferror(f) != 0;
    errno = 0;
    if (fflush(f) != 0)
      failed = 1;
    int err = errno;
    if (fclose(f) != 0 && !failed) {
      failed = 1;
      err = errno;
    }
    if (failed) {
      fprintf(stderr, "wds index: cannot write %s%s%s\n", out_path,
              err ? ": " : "", err ? strerror(err) : "");
      goto done;
    }
    if (wds_outfile_commit(of) != WDS_OK) {
      fprintf(stderr, "wds index: %s\n", wds_last_error());
      goto done;
    }
  }
  status = 0;
done:
  tool_cache_note("wds index", ro.cfg.cache_dir, cache_errors);
  if (out != stdout)
    fclose(out);
  wds_outfile_close(of); /* removes the temporary file after an error */
  free(dir_real);
  free(default_name);
  wds_url_list_free(&urls);
  return status;
}
