/* cmd_index.c — `wds index`: one JSON index for a shard set (format in
 * wds/index.h, the top level compatible with wids' shard index).
 *
 * Each shard is read by its own reader, to its end, so a shard's count,
 * tar size and errors are its own. A shard's entry is built in a memory
 * stream and written once the shard has been read completely: the "url",
 * "nsamples" and "filesize" keys come first, for people reading the file.
 * Memory is one shard's entry at a time.
 *
 * With -o the index goes to a temporary file in the target directory,
 * renamed when complete; any error removes it, so no partial index ever
 * sits under the final name. Local shard paths are then written relative
 * to the index's directory (the loader resolves them against it), so the
 * index and its shards can be moved together. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"
#include "wds/index.h"
#include "wds/reader.h"

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
    "SIZE the size of its data.\n"
    "  -o FILE      write to FILE (a temporary name, renamed when complete)\n"
    "               instead of stdout; local shard paths are then written\n"
    "               relative to FILE's directory\n"
    "  --name NAME  the index's \"name\" (default: the first SPEC)\n"
    "  --max-urls N refuse specs that expand to more than N URLs\n"
    "The loader (wds batches --mode exact --index FILE) and wds ls --summary\n"
    "--index FILE read it. Exits 1, leaving no index, if a shard cannot be\n"
    "read completely (the message names it).\n";

/* Reads one shard and writes its shardlist entry to out. Returns 0, or 1
 * after printing the error. */
static int index_shard(const char *url, const char *written_url, FILE *out) {
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
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    fprintf(stderr, "wds index: %s\n", wds_open_error());
    goto done;
  }
  if (!(mem = open_memstream(&buf, &buf_len))) {
    fprintf(stderr, "wds index: out of memory\n");
    goto done;
  }
  const wds_sample *s;
  while ((rc = wds_reader_next(r, &s)) == WDS_OK) {
    fputs(nsamples ? ",\n  {\"key\": " : "\n  {\"key\": ", mem);
    tool_json_string(mem, s->key, strlen(s->key));
    fputs(", \"fields\": {", mem);
    for (size_t i = 0; i < s->field_count; i++) {
      const wds_field *f = &s->fields[i];
      fputs(i ? ", " : "", mem);
      tool_json_string(mem, f->ext, strlen(f->ext));
      fprintf(mem, ": [%" PRIu64 ", %zu]", f->offset, f->size_bytes);
    }
    fputs("}}", mem);
    nsamples++;
  }
  if (rc != WDS_EOF) {
    fprintf(stderr, "wds index: %s\n", wds_reader_error(r));
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
    fprintf(stderr,
            "wds index: %s: the shard changed while it was read (%" PRId64
            " bytes, now %" PRId64 ")\n",
            url, filesize, (int64_t)st.st_size);
    goto done;
  }
  fputs("{\"url\": ", out);
  tool_json_string(out, written_url, strlen(written_url));
  fprintf(out, ", \"nsamples\": %" PRIu64 ", \"filesize\": ", nsamples);
  if (filesize >= 0)
    fprintf(out, "%" PRId64, filesize);
  else
    fputs("null", out);
  fprintf(out, ", \"tar_bytes\": %" PRIu64 ", \"samples\": [", rs.tar_bytes);
  fwrite(buf, 1, buf_len, out);
  fputs("]}", out);
  status = 0;
done:
  if (mem)
    fclose(mem);
  free(buf);
  wds_reader_close(r);
  return status;
}

int wds_cmd_index(int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                       {"name", required_argument, 0, 'n'},
                                       {"max-urls", required_argument, 0, 'm'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *out_path = NULL, *name = NULL;
  size_t max_urls = 0;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
    switch (c) {
    case 'o':
      out_path = optarg;
      break;
    case 'n':
      name = optarg;
      break;
    case 'm':
      if (tool_parse_size(optarg, &max_urls) != 0) {
        fprintf(stderr, "wds index: --max-urls needs a number\n");
        return 2;
      }
      break;
    case 'h':
      fputs(index_usage, stdout);
      return 0;
    default:
      fputs(index_usage, stderr);
      return 2;
    }
  }
  if (optind >= argc) {
    fputs(index_usage, stderr);
    return 2;
  }
  if (out_path && (!out_path[0] || out_path[strlen(out_path) - 1] == '/')) {
    fprintf(stderr, "wds index: -o needs a file name\n");
    return 2;
  }
  if (!name)
    name = argv[optind];

  int status = 1;
  wds_url_list urls = {0};
  char *tmp = NULL, *dir_real = NULL;
  FILE *out = stdout;
  if (tool_expand_specs("index", argv + optind, argc - optind, max_urls,
                        &urls)) {
    status = 2;
    goto done;
  }
  if (out_path) {
    const char *slash = strrchr(out_path, '/');
    char *dir =
        slash ? strndup(out_path, (size_t)(slash - out_path) + 1) : strdup(".");
    tmp = malloc(strlen(out_path) + 16);
    if (!dir || !tmp) {
      free(dir);
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
    sprintf(tmp, "%s.tmp.XXXXXX", out_path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
      fprintf(stderr, "wds index: cannot create %s: %s\n", tmp,
              strerror(errno));
      free(tmp);
      tmp = NULL;
      goto done;
    }
    fchmod(fd, 0644);
    if (!(out = fdopen(fd, "w"))) {
      close(fd);
      out = stdout;
      fprintf(stderr, "wds index: %s: %s\n", tmp, strerror(errno));
      goto done;
    }
  }

  fputs("{\"wids_version\": 1, \"__kind__\": \"wds-shard-index\", "
        "\"name\": ",
        out);
  tool_json_string(out, name, strlen(name));
  fputs(", \"shardlist\": [\n", out);
  for (size_t i = 0; i < urls.count; i++) {
    char *wurl = wds_index_url_for(urls.urls[i], dir_real);
    if (!wurl) {
      fprintf(stderr, "wds index: out of memory\n");
      goto done;
    }
    if (i)
      fputs(",\n", out);
    int rc = index_shard(urls.urls[i], wurl, out);
    free(wurl);
    if (rc != 0)
      goto done;
  }
  fputs("\n]}\n", out);
  if (fflush(out) != 0 || ferror(out) ||
      (out != stdout && fsync(fileno(out)) != 0)) {
    fprintf(stderr, "wds index: cannot write %s: %s\n",
            out_path ? tmp : "the output", strerror(errno));
    goto done;
  }
  if (out != stdout) {
    FILE *f = out;
    out = stdout;
    if (fclose(f) != 0 || rename(tmp, out_path) != 0) {
      fprintf(stderr, "wds index: cannot write %s: %s\n", out_path,
              strerror(errno));
      goto done;
    }
    free(tmp);
    tmp = NULL;
  }
  status = 0;
done:
  if (out != stdout)
    fclose(out);
  if (tmp) {
    unlink(tmp);
    free(tmp);
  }
  free(dir_real);
  wds_url_list_free(&urls);
  return status;
}
