/* cmd_write.c — `wds write`: make a shard set from a directory tree, a JSON
 * lines manifest, or existing shards / a tar stream (re-sharding), through
 * the public writer (wds/writer.h).
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
 * Stream inputs are read with the public reader and passed through without
 * a copy; with --shuffle, through a bounded buffer of copied samples
 * (--shuffle-buffer N): once it is full each new sample replaces a randomly
 * chosen one, which is written; the rest is shuffled and written at the end.
 *
 * Every random choice comes from splitmix64 seeded by --seed: the same input
 * and options give byte-identical shards.
 *
 * A directory's listing is checked before anything is written
 * (check_samples): members that would collide, samples whose every
 * extension has a '.' (one warning), a class-folder tree without --labels
 * (a note). --labels (label_samples) numbers the first key components as
 * torchvision's ImageFolder does and writes the mapping through a
 * wds_outfile before the first shard. A manifest's string values are
 * resolved to files before anything is written too (resolve_files): a
 * path-like value that names no file is an error naming its line. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/mem.h"
#include "base/rng.h"
#include "base/size.h"
#include "base/text.h"
#include "pipeline/decoders.h"
#include "reader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/reader.h"
#include "wds/writer.h"

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
static uint64_t rand_below(uint64_t *state, uint64_t n) {
  return wds__splitmix64(state) % n;
}

/* Reads all of f into a malloc'd buffer (NUL-terminated); NULL on error. */
static char *slurp(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0, k;
  char *d = malloc(cap);
  while (d && (k = fread(d + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (n + 1 == cap && wds__grow_at(&d, &cap, cap * 2, 1, 64) != 0) {
      free(d);
      d = NULL;
    }
  }
  if (d && ferror(f)) {
    free(d);
    d = NULL;
  }
  if (d) {
    d[n] = '\0';
    *len = n;
  }
  return d;
}

/* ---- progress ---- */

typedef struct progress {
  int enabled; /* stderr is a terminal */
  double start, last;
  uint64_t total; /* samples, 0 = unknown */
  int shown;
} progress;

static void progress_update(progress *p, const wds_writer *w, int force) {
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

/* ---- options ---- */

typedef struct write_opts {
  const char *pattern;
  uint64_t max_count, max_size, start, seed, shuffle_buffer;
  int level, shuffle, inline_values, no_sync, split_given;
  int count_given, size_given; /* --maxcount, --maxsize */
  tool_reader_opts ro;         /* --read-timeout (the manifest's too),
                                  --retries, the cache...: shard inputs */
  const char *manifest;
  const char *size_arg; /* --maxsize as given */
  int labels;           /* --labels: class ids from folder names */
  const char *classes;  /* --classes FILE: where the mapping goes */
  int last_dot;         /* --key-rule last-dot */
} write_opts;

/* ---- directory input ---- */

typedef struct dir_entry {
  size_t off;       /* of the relative path in the arena (NUL-terminated) */
  size_t key_off;   /* of the key: off, or (--key-rule last-dot) a copy of
                       the path's first key_len bytes with the '.' of its
                       last component turned into '_' */
  uint32_t len;     /* the path's length */
  uint32_t key_len; /* up to the first (last-dot: last) '.' of the last
                       component; the extension follows at off+key_len+1 */
} dir_entry;

typedef struct dir_list {
  char *arena;
  size_t arena_len, arena_cap;
  dir_entry *e;
  size_t n, cap;
  uint64_t no_ext; /* files skipped: no extension */
  int warnings;
  int last_dot; /* --key-rule last-dot */
} dir_list;

static const char *sort_arena; /* qsort has no context argument */

static int cmp_key(const dir_entry *x, const dir_entry *y) {
  const char *px = sort_arena + x->key_off, *py = sort_arena + y->key_off;
  size_t m = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(px, py, m);
  if (c)
    return c;
  if (x->key_len != y->key_len)
    return x->key_len < y->key_len ? -1 : 1;
  return 0;
}

static int cmp_entry(const void *a, const void *b) {
  const dir_entry *x = a, *y = b;
  int c = cmp_key(x, y);
  if (c)
    return c;
  return strcmp(sort_arena + x->off + x->key_len + 1,
                sort_arena + y->off + y->key_len + 1);
}

static void warn(dir_list *l, const char *fmt, const char *path) {
  if (l->warnings++ < 10) {
    char shown[1024]; /* a file's name: nothing a terminal would obey */
    fprintf(stderr, "wds write: ");
    fprintf(stderr, fmt, wds__esc(path, shown, sizeof shown, 0));
    fputc('\n', stderr);
  }
}

static int add_file(dir_list *l, const char *rel, size_t len) {
  const char *slash = memrchr(rel, '/', len);
  size_t c = slash ? (size_t)(slash - rel) + 1 : 0;
  const char *dot = l->last_dot ? memrchr(rel + c, '.', len - c)
                                : memchr(rel + c, '.', len - c);
  if (!dot) {
    if (l->no_ext++ == 0)
      tool_eprintf("wds write: skipping files without an extension, e.g. %s\n",
                   rel);
    return 0;
  }
  if (len > UINT32_MAX) {
    tool_eprintf("wds write: path too long: %.200s\n", rel);
    return -1;
  }
  size_t key_len = (size_t)(dot - rel);
  /* last-dot: the key's dots would end it where a reader splits it */
  int copy = l->last_dot && memchr(rel + c, '.', key_len - c) != NULL;
  size_t need = len + 1 + (copy ? key_len + 1 : 0);
  if (wds__grow_at(&l->arena, &l->arena_cap, l->arena_len + need, 1, 64) != 0 ||
      wds__grow_at(&l->e, &l->cap, l->n + 1, sizeof *l->e, 64) != 0) {
    fprintf(stderr, "wds write: out of memory listing files\n");
    return -1;
  }
  char *a = l->arena + l->arena_len;
  memcpy(a, rel, len + 1);
  l->e[l->n].off = l->arena_len;
  l->e[l->n].key_off = l->arena_len;
  if (copy) {
    char *k = a + len + 1;
    memcpy(k, rel, key_len);
    k[key_len] = '\0';
    for (size_t i = c; i < key_len; i++)
      if (k[i] == '.')
        k[i] = '_';
    l->e[l->n].key_off = l->arena_len + len + 1;
  }
  l->e[l->n].len = (uint32_t)len;
  l->e[l->n].key_len = (uint32_t)key_len;
  l->n++;
  l->arena_len += need;
  return 0;
}

/* Walks root/rel (rel "" for the root) depth first. rel is a buffer of
 * PATH_MAX bytes holding rel_len bytes. */
static int walk(int rootfd, const char *root, char *rel, size_t rel_len,
                dir_list *l) {
  int fd = rel_len ? openat(rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                   : dup(rootfd);
  if (fd < 0) {
    tool_eprintf("wds write: cannot open directory %s/%s: %s\n", root, rel,
                 strerror(errno));
    return -1;
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    tool_eprintf("wds write: cannot read directory %s/%s: %s\n", root, rel,
                 strerror(errno));
    close(fd);
    return -1;
  }
  int rc = 0;
  struct dirent *de;
  errno = 0;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue; /* hidden, ".", ".." */
    size_t nlen = strlen(de->d_name);
    if (rel_len + 1 + nlen + 1 > PATH_MAX) {
      tool_eprintf("wds write: path too long under %s/%s\n", root, rel);
      rc = -1;
      break;
    }
    size_t o = rel_len;
    if (o)
      rel[o++] = '/';
    memcpy(rel + o, de->d_name, nlen + 1);
    size_t len = o + nlen;
    int type = de->d_type;
    struct stat st;
    if (type == DT_UNKNOWN) {
      if (fstatat(rootfd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        tool_eprintf("wds write: cannot stat %s/%s: %s\n", root, rel,
                     strerror(errno));
        rc = -1;
        break;
      }
      type = S_ISLNK(st.st_mode)   ? DT_LNK
             : S_ISDIR(st.st_mode) ? DT_DIR
             : S_ISREG(st.st_mode) ? DT_REG
                                   : DT_UNKNOWN;
    }
    if (type == DT_LNK) {
      if (fstatat(rootfd, rel, &st, 0) != 0)
        warn(l, "skipping %s: broken symlink", rel);
      else if (S_ISREG(st.st_mode))
        rc = add_file(l, rel, len);
      else if (S_ISDIR(st.st_mode))
        warn(l, "not following symlinked directory %s", rel);
      else
        warn(l, "skipping %s: not a regular file", rel);
    } else if (type == DT_DIR) {
      rc = walk(rootfd, root, rel, len, l);
    } else if (type == DT_REG) {
      rc = add_file(l, rel, len);
    } else {
      warn(l, "skipping %s: not a regular file", rel);
    }
    rel[rel_len] = '\0';
    errno = 0;
  }
  if (rc == 0 && errno != 0) {
    tool_eprintf("wds write: cannot read directory %s/%s: %s\n", root, rel,
                 strerror(errno));
    rc = -1;
  }
  closedir(d);
  return rc;
}

/* A sample: a run of entries (directory) or a record (manifest). */
typedef struct span {
  size_t first, count;
  size_t label; /* --labels: the class id */
} span;

static void shuffle_spans(span *s, size_t n, uint64_t seed) {
  uint64_t st = seed;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)rand_below(&st, i);
    span t = s[i - 1];
    s[i - 1] = s[j];
    s[j] = t;
  }
}

/* Scratch reused by every sample. */
typedef struct scratch {
  uint8_t *data;
  size_t data_cap;
  size_t *offs;
  size_t offs_cap;
  wds_writer_field *f;
  size_t f_cap;
  char *key;
  size_t key_cap;
} scratch;

static void scratch_free(scratch *s) {
  free(s->data);
  free(s->offs);
  free(s->f);
  free(s->key);
}

static int scratch_fields(scratch *s, size_t n, size_t key_len) {
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
/* Opens --manifest without blocking in open(2), which a FIFO without a
 * writer would do for good (restarted after a signal); a FIFO is then
 * waited on until it has data or its end, --read-timeout (when given) or a
 * signal. NULL with errno set (ETIMEDOUT, EINTR) on failure. */
static FILE *open_manifest(const write_opts *o) {
  int fd = open(o->manifest, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  int fl = fd < 0 ? -1 : fcntl(fd, F_GETFL);
  struct stat st;
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
      fstat(fd, &st) != 0)
    goto fail;
  for (int waited = 0; S_ISFIFO(st.st_mode);) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, 100);
    if (r > 0)
      break;
    if (tool_signal_caught()) {
      errno = EINTR;
      goto fail;
    }
    waited += 100;
    if (o->ro.cfg.read_timeout_ms > 0 && waited >= o->ro.cfg.read_timeout_ms) {
      errno = ETIMEDOUT;
      goto fail;
    }
  }
  FILE *f = fdopen(fd, "rb");
  if (f)
    return f;
fail:;
  int e = errno;
  if (fd >= 0)
    close(fd);
  errno = e;
  return NULL;
}

static int read_file_at(int dirfd, const char *where, const char *rel,
                        scratch *s, size_t *used, size_t *off, size_t *size) {
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
static void single_file_hint(const char *msg) {
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

/* The shards of the pattern an earlier run left after this run's last
 * (wds_writer_config.on_leftover): counted, the first and last kept. */
typedef struct leftovers {
  uint64_t n;
  char *first, *last;
} leftovers;

static void on_leftover(void *ctx, const char *path) {
  leftovers *l = ctx;
  if (l->n++ == 0)
    l->first = strdup(path);
  free(l->last);
  l->last = strdup(path);
}

static int writer_failed(void) {
  const char *msg = wds_last_error();
  fprintf(stderr, "wds write: %s\n", msg);
  single_file_hint(msg);
  return 1;
}

/* The length of the first path component of the key of e, or 0 when the
 * key has no '/' (a file directly in DIR). */
static size_t class_len(const dir_list *l, const dir_entry *e) {
  const char *k = l->arena + e->key_off;
  const char *slash = memchr(k, '/', e->key_len);
  return slash ? (size_t)(slash - k) : 0;
}

/* Does the sample have the extension ext (ASCII case-insensitive)? */
static const dir_entry *span_has(const dir_list *l, const span *sp,
                                 const char *ext) {
  for (size_t i = 0; i < sp->count; i++) {
    const dir_entry *e = &l->e[sp->first + i];
    if (strcasecmp(l->arena + e->off + e->key_len + 1, ext) == 0)
      return e;
  }
  return NULL;
}

/* Checks the listing before anything is written: two files that make the
 * same member (--key-rule last-dot: "a.b.jpg" and "a_b.jpg") are an error;
 * samples whose every extension has a '.' ("photo.2019.01.jpg": key
 * "photo", extension "2019.01.jpg") are counted in one warning; a tree of
 * class folders without --labels gets a note. */
static int check_samples(const char *root, const dir_list *l, const span *sp,
                         size_t nsp, const write_opts *o) {
  for (size_t i = 1; i < l->n; i++)
    if (cmp_entry(&l->e[i - 1], &l->e[i]) == 0) {
      tool_eprintf("wds write: %s/%s and %s/%s would both be the member "
                   "\"%.*s.%s\" (--key-rule last-dot turns '.' in a key into "
                   "'_')\n",
                   root, l->arena + l->e[i - 1].off, root,
                   l->arena + l->e[i].off, (int)l->e[i].key_len,
                   l->arena + l->e[i].key_off,
                   l->arena + l->e[i].off + l->e[i].key_len + 1);
      return -1;
    }
  size_t dotted = 0, example = 0;
  for (size_t k = 0; k < nsp && !o->last_dot; k++) {
    size_t all = 1;
    for (size_t i = 0; i < sp[k].count && all; i++) {
      const dir_entry *e = &l->e[sp[k].first + i];
      all = strchr(l->arena + e->off + e->key_len + 1, '.') != NULL;
    }
    if (all && dotted++ == 0)
      example = k;
  }
  if (dotted) {
    const dir_entry *e = &l->e[sp[example].first];
    char exts[256] = "";
    size_t at = 0;
    for (size_t i = 0; i < sp[example].count && i < 3 && at < sizeof exts; i++)
      at += (size_t)snprintf(exts + at, sizeof exts - at, "%s%s", i ? ", " : "",
                             l->arena + e[i].off + e[i].key_len + 1);
    tool_eprintf(
        "wds write: %zu sample%s only extensions with a '.' in them, e.g. "
        "\"%.*s\" with %s%s: a key ends at the first '.' of a file name "
        "(webdataset's rule); if those are separate files, "
        "--key-rule last-dot keys them up to the last '.'\n",
        dotted, dotted == 1 ? " has" : "s have", (int)e->key_len,
        l->arena + e->key_off, exts, sp[example].count > 3 ? ", ..." : "");
  }
  if (!o->labels && nsp > 0) {
    /* ImageFolder: every file in a class folder, two folders or more,
     * no cls field */
    size_t classes = 0;
    int folder_tree = 1;
    for (size_t k = 0; k < nsp && folder_tree; k++) {
      const dir_entry *e = &l->e[sp[k].first];
      size_t c = class_len(l, e);
      folder_tree = c > 0 && !span_has(l, &sp[k], "cls");
      if (folder_tree &&
          (k == 0 || c != class_len(l, &l->e[sp[k - 1].first]) ||
           memcmp(l->arena + e->key_off,
                  l->arena + l->e[sp[k - 1].first].key_off, c) != 0))
        classes++;
    }
    if (folder_tree && classes >= 2)
      tool_eprintf("wds write: %s looks like an ImageFolder tree (%zu class "
                   "folders): --labels adds class ids from the folder names as "
                   ".cls (wds write --help)\n",
                   root, classes);
  }
  return 0;
}

typedef struct class_name {
  const char *s;
  size_t n;
} class_name;

static int cmp_class(const void *a, const void *b) {
  const class_name *x = a, *y = b;
  int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
  return c ? c : x->n < y->n ? -1 : x->n > y->n;
}

/* Writes the class mapping, {"NAME": ID, ...} in id order, to path through
 * a temporary file (wds_outfile). */
static int write_classes(const char *path, const class_name *cl, size_t n,
                         const write_opts *o) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) {
    fprintf(stderr, "wds write: out of memory\n");
    return -1;
  }
  fputs("{", m);
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",\n " : "\n ", m);
    wds__json_write_string(m, cl[i].s, cl[i].n);
    fprintf(m, ": %zu", i);
  }
  fputs("\n}\n", m);
  if (fclose(m) != 0 || !text) {
    free(text);
    fprintf(stderr, "wds write: out of memory\n");
    return -1;
  }
  char err[1100];
  wds_outfile *f = NULL;
  int rc = wds_outfile_open(path, o->no_sync ? WDS_OUTFILE_NO_SYNC : 0, &f);
  if (rc != WDS_OK)
    snprintf(err, sizeof err, "%s", wds_last_error());
  for (size_t at = 0; rc == WDS_OK && at < len;) {
    ssize_t k = write(wds_outfile_fd(f), text + at, len - at);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      snprintf(err, sizeof err, "%s: %s", path,
               k < 0 ? strerror(errno) : "short write");
      rc = WDS_ERR_IO;
    } else {
      at += (size_t)k;
    }
  }
  if (rc == WDS_OK && (rc = wds_outfile_commit(f)) != WDS_OK)
    snprintf(err, sizeof err, "%s", wds_last_error());
  wds_outfile_close(f);
  free(text);
  if (rc != WDS_OK) {
    fprintf(stderr, "wds write: %s\n", err);
    return -1;
  }
  return 0;
}

/* The class mapping --labels made, written once every sample is. */
typedef struct class_map {
  class_name *cl; /* names point into the directory list's arena */
  size_t n;
  char *path;
} class_map;

/* Writes the mapping and says so. */
static int class_map_write(const class_map *m, const write_opts *o) {
  if (write_classes(m->path, m->cl, m->n, o) != 0)
    return -1;
  size_t n = m->n;
  tool_eprintf("wds write: %zu classes (%.*s ... %.*s), mapping in %s%s\n", n,
               n ? (int)m->cl[0].n : 0, n ? m->cl[0].s : "",
               n ? (int)m->cl[n - 1].n : 0, n ? m->cl[n - 1].s : "", m->path,
               o->shuffle ? ""
                          : "; samples are in class order (--shuffle mixes the "
                            "classes across shards)");
  return 0;
}

/* --labels: each sample's class is the first component of its key (the
 * folder under DIR); classes are numbered 0..N-1 in sorted (byte) order of
 * their names, as torchvision's ImageFolder numbers them. The mapping, for
 * --classes (default classes.json beside the shards), goes to *map, which
 * the caller writes once the samples are written (a failed run leaves no
 * mapping behind) and frees. */
static int label_samples(const char *root, const dir_list *l, span *sp,
                         size_t nsp, const write_opts *o, class_map *map) {
  int status = -1;
  class_name *cl = malloc((nsp ? nsp : 1) * sizeof *cl);
  char *path = NULL;
  size_t ncl = 0, loose = 0;
  if (!cl) {
    fprintf(stderr, "wds write: out of memory\n");
    return -1;
  }
  for (size_t k = 0; k < nsp; k++) {
    const dir_entry *e = &l->e[sp[k].first];
    size_t c = class_len(l, e);
    const dir_entry *has = span_has(l, &sp[k], "cls");
    if (has) {
      tool_eprintf("wds write: --labels: %s/%s: the sample already has a cls "
                   "field\n",
                   root, l->arena + has->off);
      goto done;
    }
    if (c == 0) {
      if (loose++ == 0)
        tool_eprintf("wds write: --labels: %s/%s is not in a class folder (the "
                     "class is the folder under %s)\n",
                     root, l->arena + e->off, root);
      continue;
    }
    /* a class's samples are adjacent: they share the prefix "NAME/" */
    const char *name = l->arena + e->key_off;
    if (ncl == 0 || cl[ncl - 1].n != c || memcmp(cl[ncl - 1].s, name, c) != 0)
      cl[ncl++] = (class_name){name, c};
  }
  if (loose) {
    if (loose > 1)
      fprintf(stderr,
              "wds write: --labels: %zu samples are not in a class folder\n",
              loose);
    goto done;
  }
  qsort(cl, ncl, sizeof *cl, cmp_class);
  for (size_t k = 0; k < nsp; k++) {
    const dir_entry *e = &l->e[sp[k].first];
    class_name key = {l->arena + e->key_off, class_len(l, e)};
    const class_name *hit = bsearch(&key, cl, ncl, sizeof *cl, cmp_class);
    sp[k].label = (size_t)(hit - cl);
  }
  if (o->classes) {
    path = strdup(o->classes);
  } else {
    /* beside the shards: the pattern's directory (no conversion in it,
     * checked with the options) */
    const char *slash = strrchr(o->pattern, '/');
    size_t dl = slash ? (size_t)(slash - o->pattern) + 1 : 0;
    path = malloc(dl + sizeof "classes.json");
    if (path) {
      memcpy(path, o->pattern, dl);
      memcpy(path + dl, "classes.json", sizeof "classes.json");
    }
  }
  if (!path) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  *map = (class_map){cl, ncl, path};
  return 0;
done:
  free(cl);
  free(path);
  return status;
}

static int run_dir(const char *root, const write_opts *o, wds_writer *w,
                   progress *pg) {
  int status = 1;
  dir_list l = {0};
  span *sp = NULL;
  size_t nsp = 0;
  scratch s = {0};
  class_map map = {0};
  char *rel = malloc(PATH_MAX);
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!rel) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  if (rootfd < 0) {
    fprintf(stderr, "wds write: cannot open directory %s: %s\n", root,
            strerror(errno));
    goto done;
  }
  rel[0] = '\0';
  l.last_dot = o->last_dot;
  if (walk(rootfd, root, rel, 0, &l) != 0)
    goto done;
  if (l.warnings > 10)
    fprintf(stderr, "wds write: %d more warnings\n", l.warnings - 10);
  if (l.no_ext > 1)
    fprintf(stderr,
            "wds write: skipped %" PRIu64 " files without an extension\n",
            l.no_ext);
  sort_arena = l.arena;
  qsort(l.e, l.n, sizeof *l.e, cmp_entry);
  sp = malloc((l.n ? l.n : 1) * sizeof *sp);
  if (!sp) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  for (size_t i = 0; i < l.n;) {
    size_t j = i + 1;
    while (j < l.n && cmp_key(&l.e[i], &l.e[j]) == 0)
      j++;
    sp[nsp].first = i;
    sp[nsp].count = j - i;
    sp[nsp].label = 0;
    nsp++;
    i = j;
  }
  if (check_samples(root, &l, sp, nsp, o) != 0)
    goto done;
  if (o->labels && label_samples(root, &l, sp, nsp, o, &map) != 0)
    goto done;
  if (o->shuffle)
    shuffle_spans(sp, nsp, o->seed);
  pg->total = nsp;
  for (size_t k = 0; k < nsp && !tool_signal_caught(); k++) {
    const dir_entry *e = &l.e[sp[k].first];
    size_t n = sp[k].count, used = 0;
    if (scratch_fields(&s, n + (o->labels != 0), e->key_len) != 0)
      goto done;
    for (size_t i = 0; i < n; i++) {
      const char *path = l.arena + e[i].off;
      if (read_file_at(rootfd, root, path, &s, &used, &s.offs[i],
                       &s.f[i].size_bytes) != 0)
        goto done;
      s.f[i].ext = path + e[i].key_len + 1;
    }
    for (size_t i = 0; i < n; i++)
      s.f[i].data = s.data + s.offs[i];
    char label[24];
    if (o->labels) {
      snprintf(label, sizeof label, "%zu", sp[k].label);
      s.f[n].ext = "cls";
      s.f[n].data = label;
      s.f[n].size_bytes = strlen(label);
    }
    memcpy(s.key, l.arena + e->key_off, e->key_len);
    s.key[e->key_len] = '\0';
    if (wds_writer_write_sample(w, s.key, s.f, n + (o->labels != 0)) !=
        WDS_OK) {
      writer_failed();
      goto done;
    }
    progress_update(pg, w, 0);
  }
  if (map.path && !tool_signal_caught() && class_map_write(&map, o) != 0)
    goto done;
  status = 0;
done:
  if (rootfd >= 0)
    close(rootfd);
  free(map.cl);
  free(map.path);
  free(rel);
  free(l.arena);
  free(l.e);
  free(sp);
  scratch_free(&s);
  return status;
}

/* ---- manifest input ---- */

/* A field of a manifest record: strings live in the manifest arena. */
typedef struct mfield {
  size_t ext_off;
  size_t val_off, val_len;
  int maybe_file; /* a JSON string: read from the file it names, if any */
  int is_file;    /* it names a regular file (resolve_files) */
} mfield;

typedef struct mrecord {
  size_t key_off;
  size_t first, count; /* in the field array */
  size_t line;
} mrecord;

typedef struct manifest {
  char *arena;
  size_t arena_len, arena_cap;
  mfield *f;
  size_t nf, f_cap;
  mrecord *r;
  size_t nr, r_cap;
} manifest;

static int arena_put(manifest *m, const void *d, size_t n) {
  if (n == 0)
    return 0; /* (an empty arena may still be NULL) */
  if (wds__grow_at(&m->arena, &m->arena_cap, m->arena_len + n, 1, 64) != 0)
    return -1;
  memcpy(m->arena + m->arena_len, d, n);
  m->arena_len += n;
  return 0;
}

/* A JSON string at the cursor, unescaped into the arena followed by a NUL;
 * *off and *len locate it (len without the NUL). */
static int arena_string(wds__json *j, manifest *m, size_t *off, size_t *len) {
  wds__json_ws(j);
  size_t start = j->pos;
  int rc = wds__json_string(j, NULL, 0, len);
  if (rc != WDS_OK)
    return rc;
  if (wds__grow_at(&m->arena, &m->arena_cap, m->arena_len + *len + 1, 1, 64) !=
      0)
    return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
  j->pos = start;
  *off = m->arena_len;
  if ((rc = wds__json_string(j, m->arena + *off, *len, len)) != WDS_OK)
    return rc;
  m->arena[*off + *len] = '\0';
  m->arena_len += *len + 1;
  return WDS_OK;
}

static int is_dunder(const char *s, size_t n) {
  return n >= 4 && s[0] == '_' && s[1] == '_' && s[n - 1] == '_' &&
         s[n - 2] == '_';
}

/* One line: a flat JSON object, read with base/json's strict reader.
 * Appends a record (and its fields). */
static int parse_record(wds__json *j, manifest *m, size_t line) {
  size_t first = m->nf, key_off = 0;
  int have_key = 0, more = 1, rc;
  wds__json_ws(j);
  size_t obj_at = j->pos;
  if ((rc = wds__json_expect(j, '{', "expected a JSON object")) != WDS_OK)
    return rc;
  if (wds__json_peek(j) == '}') {
    j->pos++;
    more = 0;
  }
  while (more) {
    size_t name_off, name_len;
    wds__json_ws(j);
    size_t name_at = j->pos;
    if ((rc = arena_string(j, m, &name_off, &name_len)) != WDS_OK ||
        (rc = wds__json_expect(j, ':', "expected ':' after an object key")) !=
            WDS_OK)
      return rc;
    const char *name = m->arena + name_off;
    int is_key = name_len == 7 && memcmp(name, "__key__", 7) == 0;
    /* memchr: a NUL from "\u0000" would cut the name short. */
    if (memchr(name, '\0', name_len))
      return wds__json_fail(j, name_at, "a field name contains NUL");
    for (size_t i = first; i < m->nf; i++)
      if (strcmp(m->arena + m->f[i].ext_off, name) == 0)
        return wds__json_fail(j, name_at, "a field name appears twice");
    if (is_key && have_key)
      return wds__json_fail(j, name_at, "__key__ appears twice");
    int c = wds__json_peek(j);
    size_t val_at = j->pos, val_off = 0, val_len = 0;
    int maybe_file = 0, omit = 0;
    if (c == '"') {
      if ((rc = arena_string(j, m, &val_off, &val_len)) != WDS_OK)
        return rc;
      maybe_file = 1;
    } else if (c == 'n') {
      if ((rc = wds__json_literal(j, "null")) != WDS_OK)
        return rc;
      omit = 1;
    } else {
      /* numbers, true, false, objects and arrays: their text as written */
      if ((rc = wds__json_skip(j, 2)) != WDS_OK)
        return rc;
      val_len = j->pos - val_at;
      val_off = m->arena_len;
      if (arena_put(m, j->s + val_at, val_len) != 0 || arena_put(m, "", 1) != 0)
        return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
    }
    if (is_key) {
      if (c != '"')
        return wds__json_fail(j, val_at, "__key__ must be a string");
      if (memchr(m->arena + val_off, '\0', val_len))
        return wds__json_fail(j, val_at, "__key__ contains NUL");
      have_key = 1;
      key_off = val_off;
    } else if (!omit && !is_dunder(m->arena + name_off, name_len)) {
      /* (m->arena, not name: parsing the value may have moved the arena) */
      if (wds__grow_at(&m->f, &m->f_cap, m->nf + 1, sizeof *m->f, 64) != 0)
        return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
      m->f[m->nf].ext_off = name_off;
      m->f[m->nf].val_off = val_off;
      m->f[m->nf].val_len = val_len;
      m->f[m->nf].maybe_file = maybe_file;
      m->f[m->nf].is_file = 0;
      m->nf++;
    }
    if ((rc = wds__json_next(j, '}', &more)) != WDS_OK)
      return rc;
  }
  if ((rc = wds__json_end(j, "the object")) != WDS_OK)
    return rc;
  if (!have_key)
    return wds__json_fail(j, obj_at, "no \"__key__\"");
  if (m->nf == first)
    return wds__json_fail(j, obj_at, "no fields");
  if (wds__grow_at(&m->r, &m->r_cap, m->nr + 1, sizeof *m->r, 64) != 0)
    return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
  m->r[m->nr].key_off = key_off;
  m->r[m->nr].first = first;
  m->r[m->nr].count = m->nf - first;
  m->r[m->nr].line = line;
  m->nr++;
  return WDS_OK;
}

/* Does s end with "." + e[0..n) (ASCII case-insensitive)? */
static int ends_with_ext(const char *s, size_t len, const char *e, size_t n) {
  return n > 0 && len > n && s[len - n - 1] == '.' &&
         strncasecmp(s + len - n, e, n) == 0;
}

/* Does the string value of field ext look like a path: a '/' in it, or the
 * extension of its field at its end ("img.jpg" for jpg; for "seg.png",
 * ".seg.png" or ".png"; jpg and jpeg for each other)? */
static int looks_like_path(const char *val, size_t len, const char *ext) {
  if (memchr(val, '/', len))
    return 1;
  const char *dot = strrchr(ext, '.');
  const char *tail = dot ? dot + 1 : ext;
  const char *alias = wds__ext_alias(tail, strlen(tail));
  return ends_with_ext(val, len, ext, strlen(ext)) ||
         ends_with_ext(val, len, tail, strlen(tail)) ||
         (alias && ends_with_ext(val, len, alias, strlen(alias)));
}

/* Before anything is written: marks the string values that name a regular
 * file (relative to dirfd); a value that looks like a path but names none
 * is an error naming the manifest line (a typo would otherwise be stored
 * as the text of the path). */
static int resolve_files(manifest *m, int dirfd, const char *dir,
                         const char *name) {
  for (size_t k = 0; k < m->nr; k++) {
    const mrecord *r = &m->r[k];
    for (size_t i = 0; i < r->count; i++) {
      mfield *mf = &m->f[r->first + i];
      const char *val = m->arena + mf->val_off;
      const char *ext = m->arena + mf->ext_off;
      if (!mf->maybe_file || mf->val_len == 0 || memchr(val, '\0', mf->val_len))
        continue;
      struct stat st;
      int found = fstatat(dirfd, val, &st, 0) == 0;
      int err = errno;
      if (found && S_ISREG(st.st_mode)) {
        mf->is_file = 1;
        continue;
      }
      if (!looks_like_path(val, mf->val_len, ext))
        continue;
      tool_eprintf("wds write: manifest %s, line %zu: field \"%s\": \"%.300s\" "
                   "looks like a path but %s (relative to %s); --inline keeps "
                   "every string as text\n",
                   name, r->line, ext, val,
                   found ? "is not a regular file" : "names no file", dir);
      if (!found && err != ENOENT && err != ENOTDIR)
        tool_eprintf("wds write: (%s/%.300s: %s)\n", dir, val, strerror(err));
      return -1;
    }
  }
  return 0;
}

static int run_manifest(const write_opts *o, wds_writer *w, progress *pg) {
  int status = 1;
  manifest m = {0};
  scratch s = {0};
  span *sp = NULL;
  char *text = NULL, *dir = NULL;
  int dirfd = -1;
  size_t len = 0;
  const char *name = strcmp(o->manifest, "-") == 0 ? "stdin" : o->manifest;
  FILE *f = strcmp(o->manifest, "-") == 0 ? stdin : open_manifest(o);
  if (!f && errno == ETIMEDOUT) {
    fprintf(stderr,
            "wds write: manifest %s: no data for %.1f s (a FIFO without a "
            "writer; the read timeout, --read-timeout)\n",
            o->manifest, (double)o->ro.cfg.read_timeout_ms / 1000);
    goto done;
  }
  if (!f) {
    fprintf(stderr, "wds write: cannot open manifest %s: %s\n", o->manifest,
            strerror(errno));
    goto done;
  }
  text = slurp(f, &len);
  if (f != stdin)
    fclose(f);
  if (!text) {
    fprintf(stderr, "wds write: cannot read manifest %s\n", name);
    goto done;
  }
  /* File values are relative to the manifest's directory (stdin: here). */
  dir = strdup(f == stdin ? "." : o->manifest);
  if (!dir) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  if (f != stdin) {
    char *slash = strrchr(dir, '/');
    if (!slash)
      strcpy(dir, ".");
    else if (slash == dir)
      dir[1] = '\0';
    else
      *slash = '\0';
  }
  dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) {
    fprintf(stderr, "wds write: cannot open directory %s: %s\n", dir,
            strerror(errno));
    goto done;
  }
  size_t line = 0;
  for (const char *p = text; p < text + len;) {
    const char *nl = memchr(p, '\n', (size_t)(text + len - p));
    const char *e = nl ? nl : text + len;
    line++;
    const char *q = p;
    while (q < e && (*q == ' ' || *q == '\t' || *q == '\r'))
      q++;
    if (q < e) {
      wds__err err = {""};
      wds__json j;
      wds__json_init(&j, p, (size_t)(e - p), 0, &err);
      j.line = line;
      if (parse_record(&j, &m, line) != WDS_OK) {
        /* "line L, column C: what" (out of memory has no place) */
        if (strncmp(err.msg, "line ", 5) == 0)
          fprintf(stderr, "wds write: manifest %s, %s\n", name, err.msg);
        else
          fprintf(stderr, "wds write: manifest %s, line %zu: %s\n", name, line,
                  err.msg);
        goto done;
      }
    }
    p = nl ? nl + 1 : e;
  }
  if (!o->inline_values && resolve_files(&m, dirfd, dir, name) != 0)
    goto done;
  sp = malloc((m.nr ? m.nr : 1) * sizeof *sp);
  if (!sp) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  for (size_t i = 0; i < m.nr; i++) {
    sp[i].first = i;
    sp[i].count = 1;
    sp[i].label = 0;
  }
  if (o->shuffle)
    shuffle_spans(sp, m.nr, o->seed);
  pg->total = m.nr;
  for (size_t k = 0; k < m.nr && !tool_signal_caught(); k++) {
    const mrecord *r = &m.r[sp[k].first];
    size_t used = 0;
    if (scratch_fields(&s, r->count, 0) != 0)
      goto done;
    /* data pointers: into s.data for files (set after reading, as the
     * buffer may move), into the arena for values (s.offs = SIZE_MAX). */
    for (size_t i = 0; i < r->count; i++) {
      const mfield *mf = &m.f[r->first + i];
      const char *val = m.arena + mf->val_off;
      s.f[i].ext = m.arena + mf->ext_off;
      s.offs[i] = SIZE_MAX;
      s.f[i].size_bytes = mf->val_len;
      if (mf->is_file && read_file_at(dirfd, dir, val, &s, &used, &s.offs[i],
                                      &s.f[i].size_bytes) != 0) {
        fprintf(stderr, "wds write: (manifest %s, line %zu)\n", name, r->line);
        goto done;
      }
    }
    for (size_t i = 0; i < r->count; i++)
      s.f[i].data = s.offs[i] == SIZE_MAX
                        ? (const void *)(m.arena + m.f[r->first + i].val_off)
                        : (const void *)(s.data + s.offs[i]);
    if (wds_writer_write_sample(w, m.arena + r->key_off, s.f, r->count) !=
        WDS_OK) {
      fprintf(stderr, "wds write: manifest %s, line %zu: %s\n", name, r->line,
              wds_last_error());
      single_file_hint(wds_last_error());
      goto done;
    }
    progress_update(pg, w, 0);
  }
  status = 0;
done:
  if (dirfd >= 0)
    close(dirfd);
  free(dir);
  free(text);
  free(sp);
  free(m.arena);
  free(m.f);
  free(m.r);
  scratch_free(&s);
  return status;
}

/* ---- stream input ---- */

/* A sample copied out of the reader: one allocation. */
typedef struct held {
  char *key;
  size_t count;
  wds_writer_field *f;
} held;

static held *hold(const wds_sample *smp) {
  size_t key_len = strlen(smp->key);
  size_t bytes =
      sizeof(held) + smp->field_count * sizeof(wds_writer_field) + key_len + 1;
  for (size_t i = 0; i < smp->field_count; i++)
    bytes += strlen(smp->fields[i].name) - key_len + smp->fields[i].size_bytes;
  held *h = malloc(bytes);
  if (!h)
    return NULL;
  h->f = (wds_writer_field *)(h + 1);
  h->count = smp->field_count;
  char *p = (char *)(h->f + h->count);
  h->key = p;
  memcpy(p, smp->key, key_len + 1);
  p += key_len + 1;
  for (size_t i = 0; i < h->count; i++) {
    const wds_field *sf = &smp->fields[i];
    const char *ext = sf->name + key_len + 1; /* as found, not lower-cased */
    size_t elen = strlen(ext);
    memcpy(p, ext, elen + 1);
    h->f[i].ext = p;
    p += elen + 1;
    if (sf->size_bytes)
      memcpy(p, sf->data, sf->size_bytes);
    h->f[i].data = p;
    h->f[i].size_bytes = sf->size_bytes;
    p += sf->size_bytes;
  }
  return h;
}

static int run_stream(char **specs, int nspecs, const write_opts *o,
                      wds_writer *w, progress *pg) {
  int status = 1;
  wds_url_list urls = {0};
  wds_reader *r = NULL;
  held **buf = NULL;
  size_t nbuf = 0;
  wds_writer_field *f = NULL;
  size_t f_cap = 0;
  uint64_t rng = o->seed;
  if (tool_reader_expand(&o->ro, "write", specs, nspecs, &urls) != 0)
    goto done;
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  tool_reader_opts_apply(&o->ro, &rc);
  rc.urls = (const char *const *)urls.urls;
  rc.url_count = urls.count;
  if (wds_reader_open(&rc, &r) != WDS_OK) {
    fprintf(stderr, "wds write: %s\n", wds_last_error());
    goto done;
  }
  tool_signals_reader(r);
  if (o->shuffle) {
    buf = calloc(o->shuffle_buffer, sizeof *buf);
    if (!buf) {
      fprintf(stderr, "wds write: out of memory (shuffle buffer)\n");
      goto done;
    }
  }
  const wds_sample *smp;
  int rrc;
  while ((rrc = wds_reader_next(r, &smp)) == WDS_OK) {
    if (o->shuffle) {
      held *h = hold(smp);
      if (!h) {
        fprintf(stderr, "wds write: out of memory (shuffle buffer)\n");
        goto done;
      }
      if (nbuf < o->shuffle_buffer) {
        buf[nbuf++] = h;
        continue;
      }
      size_t j = (size_t)rand_below(&rng, nbuf);
      held *out = buf[j];
      buf[j] = h;
      int wrc = wds_writer_write_sample(w, out->key, out->f, out->count);
      free(out);
      if (wrc != WDS_OK) {
        writer_failed();
        goto done;
      }
    } else {
      size_t key_len = strlen(smp->key);
      if (wds__grow_at(&f, &f_cap, smp->field_count, sizeof *f, 64) != 0) {
        fprintf(stderr, "wds write: out of memory\n");
        goto done;
      }
      for (size_t i = 0; i < smp->field_count; i++) {
        f[i].ext = smp->fields[i].name + key_len + 1;
        f[i].data = smp->fields[i].data;
        f[i].size_bytes = smp->fields[i].size_bytes;
      }
      if (wds_writer_write_sample(w, smp->key, f, smp->field_count) != WDS_OK) {
        writer_failed();
        goto done;
      }
    }
    progress_update(pg, w, 0);
  }
  if (rrc == WDS_ERR_CANCELLED && tool_signal_caught())
    goto done; /* the caller says so */
  if (rrc != WDS_EOF) {
    fprintf(stderr, "wds write: %s\n", wds_last_error());
    goto done;
  }
  /* Drain the buffer in a shuffled order. */
  for (size_t i = nbuf; i > 1; i--) {
    size_t j = (size_t)rand_below(&rng, i);
    held *t = buf[i - 1];
    buf[i - 1] = buf[j];
    buf[j] = t;
  }
  for (size_t i = 0; i < nbuf && !tool_signal_caught(); i++) {
    if (wds_writer_write_sample(w, buf[i]->key, buf[i]->f, buf[i]->count) !=
        WDS_OK) {
      writer_failed();
      goto done;
    }
    progress_update(pg, w, 0);
  }
  status = 0;
done:
  if (r) {
    wds_reader_stats st;
    wds_reader_stats_get(r, &st);
    tool_cache_note("wds write", o->ro.cfg.cache_dir, st.cache_errors);
  }
  for (size_t i = 0; i < nbuf; i++)
    free(buf[i]);
  free(buf);
  free(f);
  tool_signals_reader(NULL);
  wds_reader_close(r);
  wds_url_list_free(&urls);
  return status;
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
  leftovers left = {0, NULL, NULL};
  cfg.on_leftover = on_leftover;
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
  if (left.n == 1)
    fprintf(stderr,
            "wds write: warning: %s, a shard of this pattern after the last "
            "one written, is left from an earlier run: a spec of the "
            "pattern would read it with these (delete it, or keep it on "
            "purpose)\n",
            left.first ? left.first : "?");
  else if (left.n > 1)
    fprintf(stderr,
            "wds write: warning: %" PRIu64 " shards of this pattern after "
            "the last one written are left from an earlier run, %s to %s: "
            "a spec of the pattern would read them with these (delete "
            "them, or keep them on purpose)\n",
            left.n, left.first ? left.first : "?", left.last ? left.last : "?");
  free(left.first);
  free(left.last);
  return tool_stdout_flush() != 0 ? 1 : 0;
}
