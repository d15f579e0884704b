/* cmd_write.c — `wds write`: make a shard set from a directory tree, a JSON
 * lines manifest, or existing shards / a tar stream (re-sharding), through
 * the public writer (wds/writer.h).
 *
 * Split as libarchive's tar/ splits bsdtar: this file holds the options,
 * the dispatch to the three inputs and what they share (the writer's
 * set-up and its errors, the progress line, the scratch a sample is read
 * into, the file reader, the shuffle of a listing); each input has its own
 * file: write_dir.c (DIR), write_manifest.c (--manifest FILE) and
 * write_stream.c (SPEC...: shards or a tar stream). write.h declares what
 * they share.
 *
 * Directory and manifest inputs are listed completely before anything is
 * written: the directory walk collects relative paths into one arena (no
 * allocation per file), sorts them once by (key, extension) in byte order
 * and groups runs of equal keys into samples; the manifest is parsed line by
 * line into records (a bad line is reported before any shard exists). So
 * the total is known (ETA on the progress line) and --shuffle permutes the
 * whole list with a seeded Fisher-Yates. A sample's files are then read to
 * their end (the fstat size sizes the buffer, but /proc and /sys files
 * report 0 or 4096 whatever they hold) into one reused buffer and handed
 * to the writer, which copies them into its 1 MiB staging buffer. A file
 * that changes size while it is read is an error naming it.
 *
 * Shards are synced (fsync) before their rename unless --no-sync; "-o -"
 * writes one tar stream to stdout (the writer's out_fd mode, as wds cat).
 *
 * Every random choice comes from splitmix64 seeded by --seed: the same input
 * and options give byte-identical shards. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/rng.h"
#include "base/size.h"
#include "base/text.h"
#include "reader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/reader.h"
#include "wds/writer.h"
#include "write.h"

static const char write_usage[] =
    "usage: wds write [options] [-o PATTERN] DIR\n"
    "       wds write [options] [-o PATTERN] SPEC...   (shards, or - for a "
    "tar on stdin)\n"
    "       wds write [options] [-o PATTERN] --manifest FILE   (- for stdin)\n"
    "\n"
    "Writes WebDataset shards: numbered tar files of at most --maxcount\n"
    "samples and --maxsize bytes (a shard is larger only when one sample\n"
    "alone is). Members are \"KEY.EXT\", fields sorted by extension, mode\n"
    "0444, owner 0/0, mtime 0: the same input gives byte-identical shards.\n"
    "\n"
    "Inputs:\n"
    "  DIR   every regular file under DIR: key = its path relative to DIR up\n"
    "        to the first '.' of its name, extension = the rest as found\n"
    "        (\"a/b.seg.png\": key \"a/b\", extension \"seg.png\"); files\n"
    "        sharing a key form one sample; samples in byte order of keys.\n"
    "        Names starting with '.' (files and directories) are skipped, as\n"
    "        are files without an extension (counted on stderr). A warning\n"
    "        counts samples whose every extension has a '.' (\"a.2019.jpg\"\n"
    "        is key \"a\", extension \"2019.jpg\"; see --key-rule). Symlinks "
    "to\n"
    "        files are followed (the target's bytes, under the link's name);\n"
    "        symlinks to directories are not descended (warned on stderr).\n"
    "  SPEC  shards read with wds's reader (paths, braces, '::', @FILE,\n"
    "        pipe:CMD, - for stdin): same keys, extensions and bytes.\n"
    "  --manifest FILE  JSON lines, one object per sample:\n"
    "          {\"__key__\": \"img01\", \"jpg\": \"images/01.jpg\", \"cls\": "
    "3}\n"
    "        A string naming an existing file (relative to FILE's directory)\n"
    "        is read from it; one that looks like a path (a '/' in it, or\n"
    "        its field's extension at its end) but names no file is an error\n"
    "        naming the line (--inline: all text); other strings are written\n"
    "        as their UTF-8 text;\n"
    "        numbers, true and false as their JSON text; objects and arrays\n"
    "        as their JSON text as written; null omits the field. Other\n"
    "        \"__x__\" names are ignored.\n"
    "\n";

/* (two strings: C99 compilers need support only 4095 bytes in one) */
static const char write_usage_options[] =
    "Options:\n"
    "  -o, --output PATTERN  shard names, a printf pattern with one %d/%i/%u\n"
    "                     (e.g. %06d; %% for a literal %), no braces; default\n"
    "                     shard-%06d.tar. A name ending in .zst or .tzst is\n"
    "                     zstd-compressed, .gz or .tgz gzip-compressed. A\n"
    "                     name without %d is one file: any size, but with\n"
    "                     --maxcount or --maxsize a run that needs a second\n"
    "                     shard fails, and that file is not written.\n"
    "                     An existing name that is a device or a FIFO\n"
    "                     (/dev/null) is written in place, never replaced.\n"
    "                     - writes one uncompressed tar stream to stdout\n"
    "                     (no --maxcount/--maxsize; the summary goes to\n"
    "                     stderr)\n"
    "      --maxcount N   samples per shard (default 100000)\n"
    "      --maxsize SIZE bytes per shard, uncompressed (default 3GB)\n"
    "      --level L      zstd (default 3) or gzip (default 6) level\n"
    "      --start N      number of the first shard (default 0)\n"
    "      --shuffle      shuffle the sample order: the whole list for DIR "
    "and\n"
    "                     --manifest; for SPEC through a buffer of\n"
    "      --shuffle-buffer N  samples (default 10000)\n"
    "      --seed S       seed of the shuffle (default 0)\n"
    "      --inline       manifest strings are always values, never files\n"
    "      --labels       DIR of class folders (ImageFolder: DIR/CLASS/...):\n"
    "                     each sample gets a cls field, its class id: the\n"
    "                     folder names sorted (byte order) and numbered\n"
    "                     0..N-1, as torchvision's ImageFolder does. The\n"
    "                     mapping, {\"NAME\": ID, ...}, goes to classes.json\n"
    "                     beside the shards. Use --shuffle too, or shards\n"
    "                     hold the classes in order\n"
    "      --classes FILE where --labels writes the mapping (needed with\n"
    "                     -o -)\n"
    "      --key-rule R   DIR: first-dot (default, webdataset's rule: a key\n"
    "                     ends at the first '.' of a file name) or last-dot\n"
    "                     (at the last '.'; a '.' left in the key is written\n"
    "                     as '_', as readers end keys at the first '.')\n"
    "      --no-sync      do not fsync shards (faster for scratch data; a\n"
    "                     power loss may leave a short shard under its name)\n";

static const char write_usage_tail[] =
    "\n"
    "SIGINT, SIGTERM or SIGHUP stop it cleanly: completed shards stay, the\n"
    "unfinished one is removed, and it exits with 128 + the signal.\n"
    "Each shard is written as NAME.tmp-PID-N beside NAME, synced, and renamed\n"
    "when complete, so neither an interrupted run nor a power loss leaves a\n"
    "truncated shard under a final name; a killed run may leave *.tmp-*\n"
    "files, safe to delete. Files are read to their end (files in /proc and\n"
    "/sys too); one that changes size while it is read is an error.\n"
    "One run at a time writes a numbered PATTERN: another one still writing\n"
    "it (a lock file .NAME%d.lock beside the shards) makes this one fail,\n"
    "naming its pid. Shards of the PATTERN numbered after the last one\n"
    "written (an earlier run's) are named in a warning, not deleted.\n"
    "On a terminal, a progress line goes to stderr. At the end one line on\n"
    "stdout: shards, samples, bytes. Exit status 1 on an error, 2 on a usage\n"
    "error.\n"
    "\n" WDS__SIZE_HELP;

#define DEFAULT_MAX_COUNT 100000u
#define DEFAULT_MAX_SIZE 3000000000u
#define DEFAULT_SHUFFLE_BUFFER 10000u

/* ---- small helpers ---- */

/* Uniform in [0, n), n > 0 (modulo: the bias is below n / 2^64, nothing
 * for any list that fits in memory). */
uint64_t rand_below(uint64_t *state, uint64_t n) {
  return wds__splitmix64(state) % n;
}

/* ---- progress ---- */

void progress_update(progress *p, const wds_writer *w, int force) {
  if (!p->enabled)
    return;
  double now = tool_now();
  if (!force && now - p->last < 0.25)
    return;
  p->last = now;
  wds_writer_stats st;
  wds_writer_stats_get(w, &st);
  double secs = now - p->start;
  double mbps = secs > 0 ? (double)st.tar_bytes / 1e6 / secs : 0;
  char eta[64] = "";
  if (p->total && st.samples > 0 && st.samples <= p->total) {
    double left = secs * (double)(p->total - st.samples) / (double)st.samples;
    snprintf(eta, sizeof eta, ", ETA %.0fs", left);
  }
  char done[64];
  if (p->total)
    snprintf(done, sizeof done, "%" PRIu64 "/%" PRIu64, st.samples, p->total);
  else
    snprintf(done, sizeof done, "%" PRIu64, st.samples);
  fprintf(stderr, "\r%s samples, %" PRIu64 " shards done, %.1f MB/s%s\033[K",
          done, st.shards, mbps, eta);
  p->shown = 1;
}

static void progress_end(progress *p) {
  if (p->enabled && p->shown)
    fputs("\r\033[K", stderr);
}

/* ---- a sample's listing and scratch ---- */

void shuffle_spans(span *s, size_t n, uint64_t seed) {
  uint64_t st = seed;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)rand_below(&st, i);
    span t = s[i - 1];
    s[i - 1] = s[j];
    s[j] = t;
  }
}

void scratch_free(scratch *s) {
  free(s->data);
  free(s->offs);
  free(s->f);
  free(s->key);
}

int scratch_fields(scratch *s, size_t n, size_t key_len) {
  if (wds__grow_at(&s->offs, &s->offs_cap, n, sizeof *s->offs, 64) != 0 ||
      wds__grow_at(&s->f, &s->f_cap, n, sizeof *s->f, 64) != 0 ||
      wds__grow_at(&s->key, &s->key_cap, key_len + 1, 1, 64) != 0) {
    fprintf(stderr, "wds write: out of memory\n");
    return -1;
  }
  return 0;
}

/* Reads the file at dirfd/rel (for messages: shown as "where/rel") to the
 * end of s->data at *used; sets *off and *size. It reads to the end of the
 * file, not to its fstat size, which /proc and /sys make up (0, 4096). A
 * regular file with a non-zero size must give exactly that many bytes, and
 * no file may grow past what was read: otherwise it changed while being
 * read, and the sample would hold a mix of two versions. */
int read_file_at(int dirfd, const char *where, const char *rel, scratch *s,
                 size_t *used, size_t *off, size_t *size) {
  /* O_NONBLOCK: a FIFO (put there after the walk's check) must not block
   * open(2); it is refused below, as anything but a regular file is. */
  int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    tool_eprintf("wds write: cannot open %s/%s: %s\n", where, rel,
                 strerror(errno));
    return -1;
  }
  int rc = -1;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    tool_eprintf("wds write: cannot stat %s/%s: %s\n", where, rel,
                 strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    tool_eprintf("wds write: %s/%s is not a regular file\n", where, rel);
    goto done;
  }
  size_t expect = (size_t)st.st_size, n = 0;
  for (;;) {
    /* Room for what is expected and one byte more: the read that returns 0
     * (the end) or shows that the file grew. */
    size_t need = *used + (n < expect ? expect : n) + 1;
    if (wds__grow_at(&s->data, &s->data_cap, need, 1, 64) != 0) {
      tool_eprintf("wds write: out of memory reading %s/%s (%zu bytes)\n",
                   where, rel, need - *used);
      goto done;
    }
    ssize_t k = read(fd, s->data + *used + n, s->data_cap - *used - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      tool_eprintf("wds write: cannot read %s/%s: %s\n", where, rel,
                   strerror(errno));
      goto done;
    }
    if (k == 0)
      break;
    n += (size_t)k;
    if (expect > 0 && n > expect)
      break; /* grew: refused below */
  }
  struct stat now;
  if ((expect > 0 && n != expect) ||
      (fstat(fd, &now) == 0 && now.st_size > 0 && (size_t)now.st_size > n)) {
    tool_eprintf("wds write: %s/%s changed size while it was read (%zu bytes "
                 "when opened, %s%zu read)\n",
                 where, rel, expect,
                 n > expect && expect > 0 ? "more than " : "", n);
    goto done;
  }
  *off = *used;
  *size = n;
  *used += n;
  rc = 0;
done:
  close(fd);
  return rc;
}

/* The options, for writer_failed's hint (set once by tool_cmd_write). */
static const write_opts *failed_opts;

/* The writer's refusal of a second shard under a name without %d, in the
 * words of the option that asked for it. */
void single_file_hint(const char *msg) {
  const write_opts *o = failed_opts;
  if (!o || !strstr(msg, "has no %d, so no second shard"))
    return;
  int count = strstr(msg, " bytes (use") == NULL;
  char limit[32];
  snprintf(limit, sizeof limit, "%" PRIu64, o->max_count);
  fprintf(stderr,
          "wds write: -o %s names one file: %s %s needs a pattern with %%d "
          "(e.g. shard-%%06d.tar); no shard was written\n",
          o->pattern, count ? "--maxcount" : "--maxsize",
          count ? limit : o->size_arg);
}

int writer_failed(void) {
  const char *msg = wds_last_error();
  fprintf(stderr, "wds write: %s\n", msg);
  single_file_hint(msg);
  return 1;
}

/* ---- main ---- */

/* One line, naming the help (tools/opts.h). */
#define usage_error(...) tool_usage_error("wds write", __VA_ARGS__)

int tool_cmd_write(int argc, char **argv) {
  enum {
    OPT_MAXCOUNT = 256,
    OPT_MAXSIZE,
    OPT_LEVEL,
    OPT_START,
    OPT_SHUFFLE,
    OPT_SHUFFLE_BUFFER,
    OPT_SEED,
    OPT_MANIFEST,
    OPT_INLINE,
    OPT_NO_SYNC,
    OPT_LABELS,
    OPT_CLASSES,
    OPT_KEY_RULE
  };
  static const struct option own[] = {
      {"output", required_argument, 0, 'o'},
      {"maxcount", required_argument, 0, OPT_MAXCOUNT},
      {"maxsize", required_argument, 0, OPT_MAXSIZE},
      {"level", required_argument, 0, OPT_LEVEL},
      {"start", required_argument, 0, OPT_START},
      {"shuffle", no_argument, 0, OPT_SHUFFLE},
      {"shuffle-buffer", required_argument, 0, OPT_SHUFFLE_BUFFER},
      {"seed", required_argument, 0, OPT_SEED},
      {"manifest", required_argument, 0, OPT_MANIFEST},
      {"inline", no_argument, 0, OPT_INLINE},
      {"no-sync", no_argument, 0, OPT_NO_SYNC},
      {"labels", no_argument, 0, OPT_LABELS},
      {"classes", required_argument, 0, OPT_CLASSES},
      {"key-rule", required_argument, 0, OPT_KEY_RULE},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  struct option opts[32];
  write_opts o = {.pattern = "shard-%06d.tar",
                  .max_count = DEFAULT_MAX_COUNT,
                  .max_size = DEFAULT_MAX_SIZE,
                  .shuffle_buffer = DEFAULT_SHUFFLE_BUFFER};
  int c;
  tool_stdout_init("write");
  tool_reader_opts_init(&o.ro);
  if (tool_reader_options(own, opts, sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = tool_getopt("wds write", argc, argv, "ho:", opts)) != -1) {
    switch (c) {
    case 'o':
      o.pattern = optarg;
      break;
    case OPT_MAXCOUNT:
      if (tool_parse_u64(optarg, &o.max_count) != 0 || o.max_count == 0)
        return usage_error("--maxcount needs a positive number, not \"%s\"",
                           optarg);
      o.split_given = o.count_given = 1;
      break;
    case OPT_MAXSIZE:
      if (wds__size_parse(optarg, &o.max_size) != 0 || o.max_size == 0)
        return usage_error("--maxsize needs a positive size (e.g. 500M, 3G), "
                           "not \"%s\"",
                           optarg);
      o.split_given = o.size_given = 1;
      o.size_arg = optarg;
      break;
    case OPT_LEVEL: {
      char *end;
      errno = 0;
      long v = strtol(optarg, &end, 10);
      if (errno || !*optarg || *end || v < INT_MIN || v > INT_MAX)
        return usage_error("--level needs an integer, not \"%s\"", optarg);
      o.level = (int)v;
      break;
    }
    case OPT_START:
      if (tool_parse_u64(optarg, &o.start) != 0)
        return usage_error("--start needs a non-negative number, not \"%s\"",
                           optarg);
      break;
    case OPT_SHUFFLE:
      o.shuffle = 1;
      break;
    case OPT_SHUFFLE_BUFFER:
      if (tool_parse_u64(optarg, &o.shuffle_buffer) != 0 ||
          o.shuffle_buffer == 0 || o.shuffle_buffer > (uint64_t)1 << 32)
        return usage_error("--shuffle-buffer needs a number in 1..2^32, not "
                           "\"%s\"",
                           optarg);
      break;
    case OPT_SEED:
      if (tool_parse_u64(optarg, &o.seed) != 0)
        return usage_error("--seed needs a non-negative number, not \"%s\"",
                           optarg);
      break;
    case OPT_MANIFEST:
      o.manifest = optarg;
      break;
    case OPT_INLINE:
      o.inline_values = 1;
      break;
    case OPT_NO_SYNC:
      o.no_sync = 1;
      break;
    case OPT_LABELS:
      o.labels = 1;
      break;
    case OPT_CLASSES:
      o.classes = optarg;
      break;
    case OPT_KEY_RULE:
      if (strcmp(optarg, "first-dot") != 0 && strcmp(optarg, "last-dot") != 0)
        return usage_error("--key-rule is first-dot or last-dot, not \"%s\"",
                           optarg);
      o.last_dot = strcmp(optarg, "last-dot") == 0;
      break;
    case 'h':
      fputs(write_usage, stdout);
      fputs(write_usage_options, stdout);
      fputs("  Reading SPEC inputs (--read-timeout also a --manifest "
            "FIFO):\n",
            stdout);
      tool_reader_opts_help(stdout);
      fputs(write_usage_tail, stdout);
      return tool_stdout_check() != 0; /* about a buffer long */
    default:
      if (tool_reader_opt(&o.ro, c, optarg, "wds write") != 1)
        return 2;
    }
  }
  if (tool_reader_opts_finish(&o.ro, "wds write") != 0)
    return 2;
  int ninputs = argc - optind;
  char **inputs = argv + optind;
  if (strchr(o.pattern, '{') || strchr(o.pattern, '}'))
    return usage_error("-o \"%s\": the output is a printf pattern "
                       "(shard-%%06d.tar), not braces",
                       o.pattern);
  int is_dir = 0;
  if (o.manifest) {
    if (ninputs > 0)
      return usage_error("--manifest takes no other INPUT (\"%s\")", inputs[0]);
  } else {
    if (ninputs == 0)
      return usage_error("%s", "no INPUT: a directory, shard specs, or "
                               "--manifest FILE");
    for (int i = 0; i < ninputs; i++) {
      struct stat st;
      if (strcmp(inputs[i], "-") != 0 && stat(inputs[i], &st) == 0 &&
          S_ISDIR(st.st_mode)) {
        if (ninputs > 1)
          return usage_error("one directory at a time, without other INPUTs "
                             "(\"%s\")",
                             inputs[i]);
        is_dir = 1;
      }
    }
  }
  if (o.inline_values && !o.manifest)
    return usage_error("%s", "--inline applies to --manifest only");
  if ((o.labels || o.last_dot) && !is_dir)
    return usage_error("%s", o.labels ? "--labels applies to a DIR input only"
                                      : "--key-rule applies to a DIR input "
                                        "only");
  if (o.classes && !o.labels)
    return usage_error("%s", "--classes names the mapping --labels writes");
  if (o.labels && !o.classes) {
    const char *slash = strrchr(o.pattern, '/');
    if (strcmp(o.pattern, "-") == 0)
      return usage_error("%s", "--labels with -o -: name the class mapping "
                               "file with --classes FILE");
    if (slash && memchr(o.pattern, '%', (size_t)(slash - o.pattern)))
      return usage_error("--labels: the shards' directory in \"%s\" has a "
                         "%%: name the class mapping file with --classes FILE",
                         o.pattern);
  }
  int to_stdout = strcmp(o.pattern, "-") == 0;
  if (to_stdout && o.split_given)
    return usage_error("%s", "-o - is one tar stream: --maxcount and "
                             "--maxsize need a shard PATTERN");
  if (to_stdout && isatty(1)) {
    return usage_error("%s", "not writing a tar stream to a terminal "
                             "(redirect stdout)");
  }

  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = to_stdout ? NULL : o.pattern;
  cfg.out_fd = to_stdout ? 1 : -1;
  cfg.no_sync = o.no_sync;
  /* Limits only when given: a PATTERN without %d is then one file that
   * the writer refuses to take past them (its defaults are ours). */
  cfg.max_count = o.count_given ? o.max_count : 0;
  cfg.max_size_bytes = o.size_given ? o.max_size : 0;
  cfg.start_index = o.start;
  cfg.level = o.level;
  /* The shards of the pattern an earlier run left after this run's last:
   * counted, the first and last kept (the library's, as Python's). */
  wds_writer_leftovers left = {0, NULL, NULL};
  cfg.on_leftover = wds_writer_leftover_add;
  cfg.on_leftover_ctx = &left;
  wds_writer *w = NULL;
  if (wds_writer_open(&cfg, &w) != WDS_OK) {
    fprintf(stderr, "wds write: %s\n", wds_last_error());
    return 2;
  }
  progress pg = {0};
  pg.enabled = isatty(2);
  pg.start = tool_now();
  int status;
  failed_opts = &o;
  tool_signals_defer(1); /* the loops check; the unfinished shard goes */
  if (o.manifest)
    status = run_manifest(&o, w, &pg);
  else if (is_dir)
    status = run_dir(inputs[0], &o, w, &pg);
  else
    status = run_stream(inputs, ninputs, &o, w, &pg);
  if (tool_signal_caught()) {
    progress_end(&pg);
    wds_writer_stats st;
    wds_writer_stats_get(w, &st);
    wds_writer_abort(w); /* removes the unfinished shard's temporary file */
    return tool_interrupted(
        "write", "%" PRIu64 " shard%s completed, the unfinished one removed",
        st.shards, st.shards == 1 ? "" : "s");
  }
  if (status == 0 && wds_writer_end_shard(w) != WDS_OK)
    status = writer_failed();
  progress_end(&pg);
  if (status != 0) {
    /* An input error leaves the unfinished shard unfinished: removed. */
    wds_writer_abort(w);
    return 1;
  }
  wds_writer_stats st;
  wds_writer_stats_get(w, &st);
  wds_writer_close(w);
  /* With -o - (or -o /dev/stdout, written through it) stdout holds the
   * tar stream. */
  int names_stdout = !strcmp(o.pattern, "/dev/stdout") ||
                     !strcmp(o.pattern, "/dev/fd/1") ||
                     !strcmp(o.pattern, "/proc/self/fd/1");
  fprintf(to_stdout || names_stdout ? stderr : stdout,
          "wrote %" PRIu64 " shard%s, %" PRIu64 " sample%s, %" PRIu64
          " bytes (%" PRIu64 " bytes of tar)\n",
          st.shards, st.shards == 1 ? "" : "s", st.samples,
          st.samples == 1 ? "" : "s", st.out_bytes, st.tar_bytes);
  if (left.count == 1)
    fprintf(stderr,
            "wds write: warning: %s, a shard of this pattern after the last "
            "one written, is left from an earlier run: a spec of the "
            "pattern would read it with these (delete it, or keep it on "
            "purpose)\n",
            left.first ? left.first : "?");
  else if (left.count > 1)
    fprintf(stderr,
            "wds write: warning: %" PRIu64 " shards of this pattern after "
            "the last one written are left from an earlier run, %s to %s: "
            "a spec of the pattern would read them with these (delete "
            "them, or keep them on purpose)\n",
            left.count, left.first ? left.first : "?",
            left.last ? left.last : "?");
  wds_writer_leftovers_free(&left);
  return tool_stdout_flush() != 0 ? 1 : 0;
}
