/* writer.c — the public shard writer (wds/writer.h) on top of the internal
 * tar writer (tarw.c).
 *
 * One wds__tarw is open at a time: the current shard, created lazily by the
 * first sample that goes into it (path mode), or the one stream on out_fd,
 * created by open. Before a sample is written its tar size is computed from
 * the names and sizes alone (wds__tarw_member_bytes), so the decision to
 * start a new shard is exact: the current shard is finished first when the
 * sample would take it past max_count, or make the finished file (end blocks
 * and record padding included) larger than max_size_bytes. Only a shard
 * holding nothing yet takes a sample that alone is too large.
 *
 * Per sample the writer allocates nothing once its two scratch buffers (the
 * member name, the field order) have grown to the largest sample: the data
 * goes straight into tarw's staging buffer.
 *
 * Invariant: w->status is WDS_OK until a call fails; then every call returns
 * it, and close/abort discard the unfinished shard (tarw removes its
 * temporary file). Shards finished before stay.
 *
 * Each shard file goes through wds_outfile (outfile.c; tarw opens and
 * commits it): temporary name, fsync, rename, fsync of the directory, or in
 * place for a device or a FIFO. */
#include "wds/writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "base/err.h"
#include "base/mem.h"
#include "tarw.h"

#define DEFAULT_MAX_COUNT 100000u
#define DEFAULT_MAX_SIZE_BYTES 3000000000u

struct wds_writer {
  /* The pattern split around its one integer conversion. */
  char *prefix, *suffix;
  int has_conv, zero_pad, width;

  int out_fd;
  uint64_t max_count, max_size_bytes;
  int count_set, size_set; /* given (non-zero) in the config: a pattern
                              without a conversion then has limits */
  uint64_t next_index;     /* number of the next shard to open */
  wds__tarw_options topts;
  void (*on_shard)(void *ctx, const char *path, uint64_t samples,
                   uint64_t file_bytes);
  void *on_shard_ctx;
  void (*on_leftover)(void *ctx, const char *path);
  void *on_leftover_ctx;

  /* The pattern's lock (numbered patterns, from the first shard on). */
  int lock_fd;
  char *lock_path;

  wds__tarw *tw; /* current shard or stream; NULL between shards */
  int fd_ended;  /* out_fd mode: the stream is finished */
  char *tw_path; /* its final name (path mode) */
  uint64_t shard_samples;

  char *name; /* "KEY.EXT" scratch */
  size_t name_cap;
  const wds_writer_field **order; /* fields sorted by extension */
  size_t order_cap;

  wds_writer_stats done; /* of finished shards (tar/out bytes) and totals */
  int status;
  wds__err err;
};

/* ---- errors ---- */

static int set_error(wds_writer *w, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_error(wds_writer *w, int status, const char *fmt, ...) {
  if (w->status != WDS_OK)
    return w->status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
  va_end(ap);
  w->status = status;
  return status;
}

/* Takes a failure from tarw (its message already in e). */
static int take_error(wds_writer *w, int status, const wds__err *e) {
  return set_error(w, status, "%s", e->msg);
}

/* ---- the pattern ---- */

/* Copies literal text s[0..n), turning "%%" into "%". */
static char *unescape(const char *s, size_t n) {
  char *o = malloc(n + 1);
  if (!o)
    return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    o[j++] = s[i];
    if (s[i] == '%' && i + 1 < n && s[i + 1] == '%')
      i++;
  }
  o[j] = '\0';
  return o;
}

/* Accepts at most one %d / %i / %u with an optional '0' flag and width, and
 * "%%" anywhere; everything else printf-special is refused. The user's text
 * never reaches printf as a format. */
static int pattern_parse(wds_writer *w, const char *s, wds__err *oe) {
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
      if (width > 64)
        return wds__fail(oe, WDS_ERR_INVALID,
                         "pattern \"%s\": field width over 64", s);
      j++;
    }
    if (s[j] != 'd' && s[j] != 'i' && s[j] != 'u')
      return wds__fail(oe, WDS_ERR_INVALID,
                       "pattern \"%s\": only one %%d, %%i or %%u (e.g. "
                       "%%06d) and %%%% are allowed",
                       s);
    if (++convs > 1)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "pattern \"%s\" has more than one integer "
                       "conversion",
                       s);
    w->zero_pad = zero;
    w->width = width;
    conv_start = i;
    conv_end = j + 1;
    i = j;
  }
  w->has_conv = convs == 1;
  if (!w->has_conv)
    conv_start = conv_end = strlen(s);
  w->prefix = unescape(s, conv_start);
  w->suffix = unescape(s + conv_end, strlen(s + conv_end));
  if (!w->prefix || !w->suffix)
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  return WDS_OK;
}

static char *pattern_format(const wds_writer *w, uint64_t index) {
  char num[96] = "";
  if (w->has_conv)
    snprintf(num, sizeof num, w->zero_pad ? "%0*" PRIu64 : "%*" PRIu64,
             w->width, index);
  size_t n = strlen(w->prefix) + strlen(num) + strlen(w->suffix) + 1;
  char *o = malloc(n);
  if (o)
    snprintf(o, n, "%s%s%s", w->prefix, num, w->suffix);
  return o;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int compression_from_name(const char *name) {
  if (ends_with(name, ".zst") || ends_with(name, ".tzst"))
    return WDS__TARW_ZSTD;
  if (ends_with(name, ".gz") || ends_with(name, ".tgz"))
    return WDS__TARW_GZIP;
  return WDS__TARW_NONE;
}

/* ---- one writer per pattern ----
 *
 * Two runs writing the same numbered pattern at once would interleave
 * their shards (each renames its own over the other's), and both succeed.
 * So the first shard takes an exclusive flock on a lock file in the
 * shards' directory, named after the pattern (its conversion written %d,
 * whatever its width), which holds the holder's pid for the message a
 * second writer gets. The holder deletes it at close; a writer that got
 * the lock on a file deleted (or replaced) meanwhile tries again, so two
 * never hold locks on two files of one name. A holder that dies leaves
 * the file unlocked: the next writer takes it. */

/* The lock file's path for w's pattern (malloc'd), or NULL. */
static char *lock_path_of(const wds_writer *w) {
  const char *slash = strrchr(w->prefix, '/');
  size_t dlen = slash ? (size_t)(slash - w->prefix) + 1 : 0;
  const char *base = w->prefix + dlen;
  size_t n = dlen + 1 + strlen(base) + 2 + strlen(w->suffix) + 6;
  char *p = malloc(n);
  if (!p)
    return NULL;
  snprintf(p, n, "%.*s.%s%%d%s.lock", (int)dlen, w->prefix, base, w->suffix);
  for (char *c = p + dlen; *c; c++)
    if (*c == '/')
      *c = '_';
  return p;
}

static int take_lock(wds_writer *w) {
  if (!w->has_conv || w->lock_fd >= 0)
    return WDS_OK;
  if (!w->lock_path && !(w->lock_path = lock_path_of(w)))
    return set_error(w, WDS_ERR_NOMEM, "out of memory");
  for (int tries = 0; tries < 100; tries++) {
    /* O_NONBLOCK: a FIFO planted at the lock's path must not block the
     * open (it is refused below). */
    int fl = O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;
    int fd = open(w->lock_path, O_RDWR | O_CREAT | fl, 0644);
    if (fd < 0 && errno == EACCES) {
      /* Another user's lock file (0644 in a shared directory): flock needs
       * no write access, so it still says whether that user writes. */
      fd = open(w->lock_path, O_RDONLY | fl);
      if (fd < 0 && errno == ENOENT)
        errno = EACCES; /* no lock there: the directory refused it */
    }
    /* No directory (ENOENT): no shard can be written there either, and
     * the shard's own open, next, says so naming the shard (take_lock runs
     * again before each shard until it holds the lock). Any other lock
     * that cannot be taken is an error: skipping it would let two writers
     * both succeed and leave one mixed shard set. */
    if (fd < 0 && errno == ENOENT)
      return WDS_OK;
    if (fd < 0)
      return set_error(w, WDS_ERR_OPEN,
                       "%s%%d%s: cannot open the pattern's lock file %s: %s "
                       "(one writer per pattern: a lock that cannot be taken "
                       "is not skipped)",
                       w->prefix, w->suffix, w->lock_path, strerror(errno));
    struct stat ls;
    if (fstat(fd, &ls) != 0 || !S_ISREG(ls.st_mode)) {
      close(fd);
      return set_error(w, WDS_ERR_OPEN,
                       "%s%%d%s: cannot use the pattern's lock file %s: it "
                       "is not a regular file",
                       w->prefix, w->suffix, w->lock_path);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int en = errno;
      char pid[32] = "";
      ssize_t k = pread(fd, pid, sizeof pid - 1, 0);
      pid[k > 0 ? k : 0] = '\0';
      pid[strcspn(pid, "\n")] = '\0';
      close(fd);
      if (en == EWOULDBLOCK)
        return set_error(
            w, WDS_ERR_OPEN,
            "%s%%d%s: another writer%s%s%s is writing this pattern (it "
            "holds %s): two would interleave their shards; wait for it to "
            "finish, or write elsewhere",
            w->prefix, w->suffix, *pid ? " (pid " : "", pid, *pid ? ")" : "",
            w->lock_path);
      return set_error(w, WDS_ERR_OPEN, "cannot lock %s: %s", w->lock_path,
                       strerror(en));
    }
    struct stat a, b;
    if (fstat(fd, &a) == 0 && stat(w->lock_path, &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      char pid[32];
      int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
      if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        /* the pid is only for messages */
      }
      w->lock_fd = fd;
      return WDS_OK;
    }
    close(fd); /* deleted or replaced by its holder meanwhile: again */
  }
  return set_error(w, WDS_ERR_OPEN, "cannot lock %s: it keeps changing",
                   w->lock_path);
}

static void drop_lock(wds_writer *w) {
  if (w->lock_fd >= 0) {
    unlink(w->lock_path); /* while locked: see take_lock */
    close(w->lock_fd);
    w->lock_fd = -1;
  }
  free(w->lock_path);
  w->lock_path = NULL;
}

/* The number a file name of the pattern's directory stands for: name is
 * base (the prefix's file part), the number as pattern_format writes it,
 * and the suffix. -1 if it is not one. */
static int leftover_number(const wds_writer *w, const char *dir,
                           const char *base, const char *name, uint64_t *num) {
  size_t bl = strlen(base), sl = strlen(w->suffix), nl = strlen(name);
  if (nl <= bl + sl || strncmp(name, base, bl) != 0 ||
      strcmp(name + nl - sl, w->suffix) != 0)
    return -1;
  uint64_t v = 0;
  size_t i = bl, end = nl - sl;
  while (i < end && name[i] == ' ')
    i++;
  if (i == end)
    return -1;
  for (; i < end; i++) {
    if (name[i] < '0' || name[i] > '9' || v > (UINT64_MAX - 9) / 10)
      return -1;
    v = v * 10 + (uint64_t)(name[i] - '0');
  }
  /* exactly the name the pattern gives v (widths, padding, zeros) */
  char *full = pattern_format(w, v);
  size_t dl = strlen(dir);
  int same =
      full && strncmp(full, dir, dl) == 0 && strcmp(full + dl, name) == 0;
  free(full);
  if (!same)
    return -1;
  *num = v;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Reports (on_leftover) the files of the pattern numbered after the last
 * shard written. */
static void report_leftovers(wds_writer *w) {
  if (!w->on_leftover || !w->has_conv || w->out_fd >= 0 ||
      w->done.shards == 0 || strchr(w->suffix, '/'))
    return;
  const char *slash = strrchr(w->prefix, '/');
  size_t dlen = slash ? (size_t)(slash - w->prefix) + 1 : 0;
  char *dir = strndup(w->prefix, dlen);
  DIR *d = dir ? opendir(dlen ? dir : ".") : NULL;
  uint64_t *nums = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    uint64_t v;
    if (leftover_number(w, dir, w->prefix + dlen, de->d_name, &v) != 0 ||
        v < w->next_index)
      continue;
    uint64_t *nv = wds__grow(nums, &cap, n + 1, sizeof *nums, 16);
    if (!nv)
      break;
    nums = nv;
    nums[n++] = v;
  }
  if (d)
    closedir(d);
  if (n > 1)
    qsort(nums, n, sizeof *nums, cmp_u64);
  for (size_t i = 0; i < n; i++) {
    char *path = pattern_format(w, nums[i]);
    if (path)
      w->on_leftover(w->on_leftover_ctx, path);
    free(path);
  }
  free(nums);
  free(dir);
}

/* ---- shards ---- */

static int open_shard(wds_writer *w) {
  wds__err e;
  if (take_lock(w) != WDS_OK)
    return w->status;
  w->tw_path = pattern_format(w, w->next_index);
  if (!w->tw_path)
    return set_error(w, WDS_ERR_NOMEM, "out of memory");
  /* Without a conversion every shard has the same name. A regular file is
   * replaced by the next shard, but a device or FIFO is written in place:
   * a second archive would follow the first in one stream, where readers
   * stop at the first end-of-archive marker. */
  struct stat st;
  if (!w->has_conv && w->done.shards > 0 && stat(w->tw_path, &st) == 0 &&
      !S_ISREG(st.st_mode))
    return set_error(w, WDS_ERR_INVALID,
                     "%s is written in place (not a regular file): a second "
                     "shard cannot follow the first into it (use a pattern "
                     "with %%d)",
                     w->tw_path);
  int rc = wds__tarw_open_path(w->tw_path, &w->topts, &w->tw, &e);
  if (rc != WDS_OK)
    return take_error(w, rc, &e);
  w->next_index++;
  w->shard_samples = 0;
  return WDS_OK;
}

/* Finishes the current shard (or stream) and reports it. */
static int finish_shard(wds_writer *w) {
  wds__err e;
  int rc = wds__tarw_finish(w->tw, &e);
  if (rc != WDS_OK)
    return take_error(w, rc, &e);
  wds__tarw_stats st;
  wds__tarw_stats_get(w->tw, &st);
  wds__tarw_close(w->tw);
  w->tw = NULL;
  w->done.shards++;
  w->done.tar_bytes += st.tar_bytes;
  w->done.out_bytes += st.out_bytes;
  if (w->on_shard)
    w->on_shard(w->on_shard_ctx, w->tw_path, w->shard_samples, st.out_bytes);
  free(w->tw_path);
  w->tw_path = NULL;
  return WDS_OK;
}

/* ---- the API ---- */

static void writer_free(wds_writer *w) {
  if (!w)
    return;
  wds__tarw_close(w->tw); /* removes an unfinished temporary file */
  drop_lock(w);
  free(w->tw_path);
  free(w->prefix);
  free(w->suffix);
  free(w->name);
  free(w->order);
  free(w);
}

/* Whether name starts with "pipe:" (any case, after spaces). */
static int looks_like_pipe(const char *name) {
  while (*name == ' ' || *name == '\t')
    name++;
  return strncasecmp(name, "pipe:", 5) == 0;
}

int wds_writer_open(const wds_writer_config *cfg, wds_writer **out) {
  int rc = WDS_OK;
  wds_writer *w = NULL;
  if (!out)
    return wds__last_fail(WDS_ERR_INVALID, "out is NULL");
  *out = NULL;
  if (!cfg)
    return wds__last_fail(WDS_ERR_INVALID, "config is NULL");
  if (cfg->out_fd < 0 && (!cfg->pattern || !*cfg->pattern))
    return wds__last_fail(WDS_ERR_INVALID, "no output: set pattern or out_fd");
  /* A pipe: target is a command (webdataset runs it; wds.ShardWriter does,
   * through out_fd); written as a pattern it would become a file named
   * "pipe:cat > x.tar". Refused, spaces before it and any case too. */
  if (cfg->out_fd < 0 && looks_like_pipe(cfg->pattern))
    return wds__last_fail(WDS_ERR_INVALID,
                          "\"%.300s\": a pipe: target is a command, which "
                          "this writer does not run (write to a file, or to "
                          "stdout and pipe that; wds.ShardWriter runs "
                          "\"pipe:CMD\" targets)",
                          cfg->pattern);
  if (cfg->mtime < 0 || cfg->mtime >= (int64_t)1 << 33)
    return wds__last_fail(WDS_ERR_INVALID,
                          "mtime %" PRId64 " is outside 0..8^11-1", cfg->mtime);
  w = calloc(1, sizeof *w);
  if (!w)
    return wds__last_fail(WDS_ERR_NOMEM, "out of memory");
  w->out_fd = cfg->out_fd;
  w->max_count = cfg->max_count ? cfg->max_count : DEFAULT_MAX_COUNT;
  w->max_size_bytes =
      cfg->max_size_bytes ? cfg->max_size_bytes : DEFAULT_MAX_SIZE_BYTES;
  w->count_set = cfg->max_count != 0;
  w->size_set = cfg->max_size_bytes != 0;
  w->next_index = cfg->start_index;
  w->on_shard = cfg->on_shard;
  w->on_shard_ctx = cfg->on_shard_ctx;
  w->on_leftover = cfg->on_leftover;
  w->on_leftover_ctx = cfg->on_leftover_ctx;
  w->lock_fd = -1;
  if (cfg->pattern) {
    wds__err pe;
    rc = pattern_parse(w, cfg->pattern, &pe);
    if (rc != WDS_OK) {
      wds__last_set(rc, pe.msg);
      goto done;
    }
  }

  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  o.mtime = cfg->mtime;
  switch (cfg->compression) {
  case WDS_COMPRESS_AUTO:
    o.compression =
        cfg->pattern ? compression_from_name(cfg->pattern) : WDS__TARW_NONE;
    break;
  case WDS_COMPRESS_NONE:
    o.compression = WDS__TARW_NONE;
    break;
  case WDS_COMPRESS_ZSTD:
    o.compression = WDS__TARW_ZSTD;
    break;
  case WDS_COMPRESS_GZIP:
    o.compression = WDS__TARW_GZIP;
    break;
  default:
    rc = wds__last_fail(WDS_ERR_INVALID, "unknown compression %d",
                        (int)cfg->compression);
    goto done;
  }
  if (o.compression == WDS__TARW_ZSTD && cfg->level != 0 &&
      (cfg->level < ZSTD_minCLevel() || cfg->level > ZSTD_maxCLevel())) {
    rc = wds__last_fail(WDS_ERR_INVALID, "zstd level %d is outside %d..%d",
                        cfg->level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    goto done;
  }
  if (o.compression == WDS__TARW_GZIP && (cfg->level < 0 || cfg->level > 9)) {
    rc = wds__last_fail(WDS_ERR_INVALID, "gzip level %d is outside 1..9",
                        cfg->level);
    goto done;
  }
  o.zstd_level = cfg->level;
  o.gzip_level = cfg->level;
  o.fsync = !cfg->no_sync;
  w->topts = o;

  if (w->out_fd >= 0) {
    wds__err e;
    rc = wds__tarw_open_fd(w->out_fd, &w->topts, &w->tw, &e);
    if (rc != WDS_OK) {
      rc = wds__last_fail(rc, "%s", e.msg);
      goto done;
    }
  }
done:
  if (rc != WDS_OK) {
    writer_free(w);
    return rc;
  }
  *out = w;
  return WDS_OK;
}

static int cmp_ext(const void *a, const void *b) {
  const wds_writer_field *x = *(const wds_writer_field *const *)a;
  const wds_writer_field *y = *(const wds_writer_field *const *)b;
  return strcmp(x->ext, y->ext);
}

static int ascii_lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int same_ext_ignoring_case(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (ascii_lower((unsigned char)*a) != ascii_lower((unsigned char)*b))
      return 0;
  return *a == *b;
}

/* Builds "KEY.EXT" in w->name. */
static int make_name(wds_writer *w, const char *key, size_t key_len,
                     const char *ext) {
  size_t ext_len = strlen(ext);
  char *n = wds__grow(w->name, &w->name_cap, key_len + ext_len + 2, 1, 256);
  if (!n)
    return set_error(w, WDS_ERR_NOMEM, "out of memory");
  w->name = n;
  memcpy(n, key, key_len);
  n[key_len] = '.';
  memcpy(n + key_len + 1, ext, ext_len + 1);
  return WDS_OK;
}

/* Whether "KEY.EXT" splits back into KEY by WebDataset's rule (the
 * regex in pipeline/reader.c's split_key()): the
 * key's last component has no '.'; when it is empty (KEY ends with '/'),
 * the component before it must be non-empty and dot-free. */
static int key_reads_back(const char *key) {
  size_t len = strlen(key);
  const char *slash = strrchr(key, '/');
  size_t c = slash ? (size_t)(slash - key) + 1 : 0;
  if (c < len)
    return memchr(key + c, '.', len - c) == NULL;
  if (c < 2)
    return 0; /* "" or "/" */
  size_t p = c - 1;
  while (p > 0 && key[p - 1] != '/')
    p--;
  return c - 1 > p && memchr(key + p, '.', c - 1 - p) == NULL;
}

/* Checks key and fields; sorts the fields into w->order. */
static int check_sample(wds_writer *w, const char *key,
                        const wds_writer_field *fields, size_t count) {
  if (!key || !*key)
    return set_error(w, WDS_ERR_INVALID, "sample with an empty key");
  if (!key_reads_back(key))
    return set_error(w, WDS_ERR_INVALID,
                     "sample \"%.200s\": the key would not be read back as "
                     "itself (a '.' in its last path component, or a "
                     "trailing '/' after an empty or dotted component)",
                     key);
  if (count == 0 || !fields)
    return set_error(w, WDS_ERR_INVALID, "sample \"%.200s\" has no fields",
                     key);
  const wds_writer_field **order =
      wds__grow(w->order, &w->order_cap, count, sizeof *order, 16);
  if (!order)
    return set_error(w, WDS_ERR_NOMEM, "out of memory");
  w->order = order;
  for (size_t i = 0; i < count; i++) {
    const wds_writer_field *f = &fields[i];
    if (!f->ext || !*f->ext || strchr(f->ext, '/'))
      return set_error(w, WDS_ERR_INVALID,
                       "sample \"%.200s\": field %zu: the extension \"%.200s\" "
                       "is empty or contains '/'",
                       key, i, f->ext ? f->ext : "(null)");
    if (!f->data && f->size_bytes > 0)
      return set_error(w, WDS_ERR_INVALID,
                       "sample \"%.200s\": field \"%.200s\" has no data", key,
                       f->ext);
    order[i] = f;
  }
  if (count > 1)
    qsort(order, count, sizeof *order, cmp_ext);
  /* Readers lower-case extensions: "JPG" and "jpg" would collide. */
  for (size_t i = 0; i < count; i++)
    for (size_t j = i + 1; j < count; j++)
      if (same_ext_ignoring_case(order[i]->ext, order[j]->ext))
        return set_error(w, WDS_ERR_INVALID,
                         "sample \"%.200s\": duplicate extension \"%.200s\"%s",
                         key, order[j]->ext,
                         strcmp(order[i]->ext, order[j]->ext) == 0
                             ? ""
                             : " (extensions are read lower-cased)");
  return WDS_OK;
}

static int write_sample(wds_writer *w, const char *key,
                        const wds_writer_field *fields, size_t count) {
  if (w->status != WDS_OK)
    return w->status;
  int rc = check_sample(w, key, fields, count);
  if (rc != WDS_OK)
    return rc;
  size_t key_len = strlen(key);
  uint64_t sample_bytes = 0;
  for (size_t i = 0; i < count; i++) {
    rc = make_name(w, key, key_len, w->order[i]->ext);
    if (rc != WDS_OK)
      return rc;
    uint64_t b = wds__tarw_member_bytes(strlen(w->name), w->name,
                                        w->order[i]->size_bytes);
    if (b == 0)
      return set_error(w, WDS_ERR_INVALID,
                       "sample \"%.200s\": member name of %zu bytes is too "
                       "long for tar (at most 65535)",
                       key, strlen(w->name));
    sample_bytes += b;
  }

  if (w->tw && w->out_fd < 0 && w->shard_samples > 0 &&
      (w->has_conv || w->count_set || w->size_set)) {
    wds__tarw_stats st;
    wds__tarw_stats_get(w->tw, &st);
    uint64_t finished = wds__tarw_finished_bytes(st.tar_bytes + sample_bytes);
    int over_count =
        w->shard_samples >= w->max_count && (w->has_conv || w->count_set);
    int over_size =
        finished > w->max_size_bytes && (w->has_conv || w->size_set);
    /* Without a conversion the next shard would have the same name: the
     * limits the caller gave cannot be kept. The shard stays unfinished
     * (close and abort remove its temporary file). */
    if ((over_count || over_size) && !w->has_conv)
      return set_error(
          w, WDS_ERR_INVALID,
          "%s: the name has no %%d, so no second shard can follow it: "
          "sample \"%.200s\" would take it past %" PRIu64 " %s (use a "
          "pattern such as shard-%%06d.tar)",
          w->tw_path, key, over_count ? w->max_count : w->max_size_bytes,
          !over_count         ? "bytes"
          : w->max_count == 1 ? "sample"
                              : "samples");
    if (over_count || over_size) {
      rc = finish_shard(w);
      if (rc != WDS_OK)
        return rc;
    }
  }
  if (!w->tw && w->fd_ended)
    return set_error(w, WDS_ERR_INVALID,
                     "sample \"%.200s\" written after the end of the stream",
                     key);
  if (!w->tw) {
    rc = open_shard(w);
    if (rc != WDS_OK)
      return rc;
  }
  for (size_t i = 0; i < count; i++) {
    const wds_writer_field *f = w->order[i];
    wds__err e;
    rc = make_name(w, key, key_len, f->ext);
    if (rc == WDS_OK) {
      rc = wds__tarw_add(w->tw, w->name, f->data, f->size_bytes, &e);
      if (rc != WDS_OK)
        return take_error(w, rc, &e);
    }
    if (rc != WDS_OK)
      return rc;
  }
  w->shard_samples++;
  w->done.samples++;
  w->done.members += count;
  return WDS_OK;
}

int wds_writer_write_sample(wds_writer *w, const char *key,
                            const wds_writer_field *fields, size_t count) {
  if (!w)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_writer_write_sample: the writer is NULL");
  return wds__last_set(write_sample(w, key, fields, count), w->err.msg);
}

void wds_writer_stats_get(const wds_writer *w, wds_writer_stats *out) {
  *out = w->done;
  if (w->tw) {
    wds__tarw_stats st;
    wds__tarw_stats_get(w->tw, &st);
    out->tar_bytes += st.tar_bytes;
    out->out_bytes += st.out_bytes;
  }
}

int wds_writer_end_shard(wds_writer *w) {
  if (!w)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_writer_end_shard: the writer is NULL");
  if (w->status != WDS_OK || !w->tw)
    return wds__last_set(w->status, w->err.msg);
  if (w->out_fd >= 0)
    w->fd_ended = 1;
  return wds__last_set(finish_shard(w), w->err.msg);
}

int wds_writer_close(wds_writer *w) {
  if (!w)
    return WDS_OK;
  if (w->status == WDS_OK && w->tw)
    finish_shard(w);
  if (w->status == WDS_OK)
    report_leftovers(w);
  int rc = wds__last_set(w->status, w->err.msg);
  writer_free(w);
  return rc;
}

void wds_writer_abort(wds_writer *w) { writer_free(w); }

/* ---- leftovers, as the front ends report them ---- */

void wds_writer_leftover_add(void *leftovers, const char *path) {
  wds_writer_leftovers *l = leftovers;
  if (l->count++ == 0)
    l->first = strdup(path);
  free(l->last);
  l->last = strdup(path);
}

void wds_writer_leftovers_free(wds_writer_leftovers *l) {
  if (!l)
    return;
  free(l->first);
  free(l->last);
  l->first = l->last = NULL;
  l->count = 0;
}
