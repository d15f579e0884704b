/* cache.c — the local shard cache (see cache.h).
 *
 * Layout of a cache directory:
 *   HASH-NAME        an entry: the bytes of one remote shard, as served
 *   .lock            flock'ed (exclusive) while entries are evicted
 *   .tmp-NAME.PID.N  an entry being linked into place, or being written
 *                    where O_TMPFILE is not supported
 *
 * An entry is written to an O_TMPFILE file (unnamed: a process that dies
 * while writing leaves nothing), flock'ed by its writer, then linked as
 * .tmp-... (linkat through /proc/self/fd) and renamed onto its name. Where
 * O_TMPFILE or /proc is missing, mkstemp names the temporary file from the
 * start. A temporary file that nobody holds locked and that has not changed
 * for WDS__CACHE_STALE_S seconds belongs to a process that died: the
 * eviction pass deletes it. Use is the entry's mtime, set when it is opened
 * (the atime is not reliable: relatime, noatime). */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nettle/sha2.h>

#include "base/url.h"

/* A temporary file unchanged and unlocked this long is a dead writer's. */
#define WDS__CACHE_STALE_S 60
#define WDS__CACHE_BASENAME_MAX 80

/* ---- SHA-256: nettle's ---- */

void wds__sha256(const void *data, size_t n, uint8_t out[32]) {
  struct sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, n, data);
  sha256_digest(&ctx, SHA256_DIGEST_SIZE, out);
}

void wds__hex(const uint8_t *bytes, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

void wds__sha256_hex(const void *data, size_t n, char hex[65]) {
  uint8_t md[32];
  wds__sha256(data, n, md);
  wds__hex(md, sizeof md, hex);
}

/* ---- names ---- */

const char *wds__cache_dir_default(const char *dir) {
  if (dir)
    return dir;
  const char *env = getenv("WDS_CACHE_DIR");
  return env && *env ? env : NULL;
}

int wds__cache_is_remote(const char *url) {
  return url && wds__url_has_scheme(url) && strncmp(url, "file:", 5) != 0;
}

char *wds__cache_entry_name(const char *url) {
  char *norm = wds__url_identity(url);
  if (!norm)
    return NULL;
  uint8_t d[32];
  wds__sha256(norm, strlen(norm), d);
  /* The last path component, without a query. */
  size_t plen = strcspn(norm, "?");
  const char *start = norm;
  const char *sep = strstr(norm, "://");
  if (sep && (size_t)(sep - norm) < plen)
    start = sep + 3;
  const char *base = start;
  for (const char *p = start; p < norm + plen; p++)
    if (*p == '/')
      base = p + 1;
  /* Only a path gives the suffix: the authority may hold user:password. */
  size_t blen = base == start ? 0 : (size_t)(norm + plen - base);
  if (blen > WDS__CACHE_BASENAME_MAX)
    blen = WDS__CACHE_BASENAME_MAX;
  char *name = malloc(32 + 1 + (blen ? blen : 5) + 1);
  if (!name) {
    free(norm);
    return NULL;
  }
  wds__hex(d, 16, name);
  name[32] = '-'; /* over wds__hex's NUL */
  if (blen == 0) {
    memcpy(name + 33, "shard", 6);
  } else {
    for (size_t i = 0; i < blen; i++) {
      char c = base[i];
      int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
      name[33 + i] = ok ? c : '_';
    }
    name[33 + blen] = '\0';
  }
  free(norm);
  return name;
}

/* ---- reporting ---- */

static void report(wds__cache_stats *st, const char *fmt, ...) {
  if (!st)
    return;
  atomic_fetch_add(&st->errors, 1);
  if (!st->warn || atomic_exchange(&st->warned, 1))
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  st->warn(st->warn_ctx, msg);
}

static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + 1 + b + 1);
  if (!p)
    return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

/* ---- entries open in this process ---- */

static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static char **open_names;
static size_t open_len, open_cap;
static pthread_once_t open_once = PTHREAD_ONCE_INIT;

/* A forked child (multiprocessing's fork) may have been forked while
 * another thread held the mutex; it keeps the list (its entries stay
 * protected: the child may read them too). */
static void open_after_fork_child(void) { pthread_mutex_init(&open_mu, NULL); }

static void open_register_atfork(void) {
  pthread_atfork(NULL, NULL, open_after_fork_child);
}

static int open_add(const char *name) {
  pthread_once(&open_once, open_register_atfork);
  pthread_mutex_lock(&open_mu);
  int ok = 1;
  if (open_len == open_cap) {
    size_t cap = open_cap ? open_cap * 2 : 16;
    char **p = realloc(open_names, cap * sizeof *p);
    if (p) {
      open_names = p;
      open_cap = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) {
    char *copy = strdup(name);
    if (copy)
      open_names[open_len++] = copy;
    else
      ok = 0;
  }
  pthread_mutex_unlock(&open_mu);
  return ok;
}

static int open_has_locked(const char *name) {
  for (size_t i = 0; i < open_len; i++)
    if (strcmp(open_names[i], name) == 0)
      return 1;
  return 0;
}

void wds__cache_release(char *name) {
  if (!name)
    return;
  pthread_mutex_lock(&open_mu);
  for (size_t i = 0; i < open_len; i++) {
    if (strcmp(open_names[i], name) == 0) {
      free(open_names[i]);
      open_names[i] = open_names[--open_len];
      break;
    }
  }
  if (open_len == 0) {
    free(open_names);
    open_names = NULL;
    open_cap = 0;
  }
  pthread_mutex_unlock(&open_mu);
  free(name);
}

size_t wds__cache_open_count(void) {
  pthread_mutex_lock(&open_mu);
  size_t n = open_len;
  pthread_mutex_unlock(&open_mu);
  return n;
}

int wds__cache_open(const wds__cache_cfg *c, const char *url, char **name) {
  *name = NULL;
  if (!c || !c->dir)
    return -1;
  char *n = wds__cache_entry_name(url);
  char *path = n ? join(c->dir, n) : NULL;
  if (!path) {
    free(n);
    return -1;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int e = errno;
  free(path);
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    fd = -1;
    e = EISDIR;
  }
  if (fd < 0) {
    if (e != ENOENT && e != ENOTDIR)
      report(c->stats,
             "shard cache %s: cannot open %s: %s (reading without "
             "the cache)",
             c->dir, n, strerror(e));
    free(n);
    return -1;
  }
  futimens(fd, NULL); /* used now (refused when not ours: then unmarked) */
  if (!open_add(n)) {
    close(fd);
    free(n);
    return -1;
  }
  if (c->stats)
    atomic_fetch_add(&c->stats->hits, 1);
  *name = n;
  return fd;
}

/* ---- filling ---- */

struct wds__cache_fill {
  int fd;
  int failed;
  int unnamed; /* O_TMPFILE: no name until commit */
  char *tmp;   /* the temporary file's path (named: from the start) */
  char *dir;
  char *name;
  uint64_t size;
  uint64_t written;
  wds__cache_stats *stats;
};

static atomic_uint tmp_counter;
static atomic_int swept;      /* stale temporary files were looked for */
static atomic_int no_tmpfile; /* O_TMPFILE files cannot be linked here */

/* mkdir -p; 0 or an errno value. */
static int make_dirs(const char *dir) {
  char *p = strdup(dir);
  if (!p)
    return ENOMEM;
  int e = 0;
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == '\0') {
      char c = *s;
      *s = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        e = errno;
        break;
      }
      *s = c;
      if (c == '\0')
        break;
    }
  }
  free(p);
  return e;
}

static char *tmp_path(const char *dir, const char *name, int with_x) {
  char suffix[48];
  snprintf(suffix, sizeof suffix, ".%ld.%u%s", (long)getpid(),
           atomic_fetch_add(&tmp_counter, 1), with_x ? ".XXXXXX" : "");
  size_t a = strlen(dir), b = strlen(name), s = strlen(suffix);
  char *p = malloc(a + 6 + b + s + 1);
  if (!p)
    return NULL;
  snprintf(p, a + 6 + b + s + 1, "%s/.tmp-%s%s", dir, name, suffix);
  return p;
}

static void fill_free(wds__cache_fill *f) {
  if (f->fd >= 0)
    close(f->fd);
  free(f->tmp);
  free(f->dir);
  free(f->name);
  free(f);
}

wds__cache_fill *wds__cache_fill_begin(const wds__cache_cfg *c,
                                       const char *url) {
  if (!c || !c->dir)
    return NULL;
  wds__cache_fill *f = calloc(1, sizeof *f);
  if (!f)
    return NULL;
  f->fd = -1;
  f->size = c->size;
  f->stats = c->stats;
  f->dir = strdup(c->dir);
  f->name = wds__cache_entry_name(url);
  if (!f->dir || !f->name) {
    fill_free(f);
    return NULL;
  }
  int e = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
#ifdef O_TMPFILE
    if (!atomic_load(&no_tmpfile)) {
      f->fd = open(c->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
      e = errno;
      if (f->fd >= 0) {
        f->unnamed = 1;
        break;
      }
    } else {
      e = EOPNOTSUPP;
    }
#else
    e = EOPNOTSUPP;
#endif
    if (e != ENOENT && e != EACCES && e != EROFS && e != ENOSPC &&
        e != EDQUOT && e != ENOTDIR) {
      /* O_TMPFILE unsupported here: a named temporary file. */
      f->tmp = tmp_path(c->dir, f->name, 1);
      if (!f->tmp) {
        fill_free(f);
        return NULL;
      }
      f->fd = mkostemp(f->tmp, O_CLOEXEC);
      e = errno;
      if (f->fd >= 0)
        break;
      free(f->tmp);
      f->tmp = NULL;
    }
    if (e != ENOENT || attempt > 0)
      break;
    e = make_dirs(c->dir); /* a new cache directory */
    if (e != 0)
      break;
  }
  if (f->fd < 0) {
    report(c->stats,
           "shard cache %s: cannot create a file: %s (reading "
           "without the cache)",
           c->dir, strerror(e));
    fill_free(f);
    return NULL;
  }
  flock(f->fd, LOCK_EX); /* ours while it is written: not stale */
  /* The first entry in this process looks for what dead ones left. */
  if (!atomic_exchange(&swept, 1) && c->size == 0)
    wds__cache_evict(c->dir, 0, NULL, c->stats);
  return f;
}

/* Gives the temporary file's space back at once; the fill stays failed. */
static void fill_drop(wds__cache_fill *f) {
  f->failed = 1;
  if (f->tmp) {
    unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL;
  }
  if (f->fd >= 0)
    close(f->fd); /* an O_TMPFILE file goes with its descriptor */
  f->fd = -1;
}

void wds__cache_fill_write(wds__cache_fill *f, const void *data, size_t n) {
  if (!f || f->failed)
    return;
  if (f->size > 0 && n > f->size - f->written) {
    /* Larger than the whole cache: it could never be kept. Not an error:
     * the shard reads on, uncached. */
    fill_drop(f);
    return;
  }
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(f->fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      report(f->stats,
             "shard cache %s: cannot write: %s (reading without "
             "the cache)",
             f->dir, w < 0 ? strerror(errno) : "no progress");
      fill_drop(f);
      return;
    }
    p += w;
    n -= (size_t)w;
    f->written += (uint64_t)w;
  }
}

void wds__cache_fill_unverified(wds__cache_fill *f) {
  if (!f)
    return;
  if (!f->failed)
    report(f->stats,
           "shard cache %s: %s not kept: its server gave no length and "
           "ignores ranges, so its end could not be verified (read without "
           "the cache)",
           f->dir, f->name);
  wds__cache_fill_abort(f);
}

void wds__cache_fill_abort(wds__cache_fill *f) {
  if (!f)
    return;
  if (f->tmp)
    unlink(f->tmp);
  fill_free(f);
}

void wds__cache_fill_commit(wds__cache_fill *f, uint64_t length,
                            int has_expected, uint64_t expected) {
  if (!f)
    return;
  if (f->failed || f->written != length ||
      (has_expected && expected != length) ||
      (f->size > 0 && length > f->size)) {
    wds__cache_fill_abort(f); /* incomplete, or larger than the cache */
    return;
  }
  char *final = join(f->dir, f->name);
  if (!final) {
    wds__cache_fill_abort(f);
    return;
  }
  const char *what = NULL;
  int e = 0;
  /* Durable before it is named: a crash never leaves a short entry. */
  if (fdatasync(f->fd) != 0) {
    what = "sync";
    e = errno;
  } else if (f->unnamed) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
    f->tmp = tmp_path(f->dir, f->name, 0);
    if (!f->tmp) {
      what = "name";
      e = ENOMEM;
    } else if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) !=
               0) {
      what = "link";
      e = errno;
      if (e == ENOENT) /* no /proc: named temporary files from now on */
        atomic_store(&no_tmpfile, 1);
      free(f->tmp);
      f->tmp = NULL;
    }
  } else {
    fchmod(f->fd, 0644); /* mkstemp made it 0600 */
  }
  if (!what && rename(f->tmp, final) != 0) {
    what = "rename";
    e = errno;
  }
  if (what) {
    report(f->stats,
           "shard cache %s: cannot %s an entry: %s (reading "
           "without the cache)",
           f->dir, what, strerror(e));
    free(final);
    wds__cache_fill_abort(f);
    return;
  }
  free(f->tmp);
  f->tmp = NULL;
  free(final);
  if (f->stats)
    atomic_fetch_add(&f->stats->stored, 1);
  close(f->fd); /* drops the lock */
  f->fd = -1;
  if (f->size > 0)
    wds__cache_evict(f->dir, f->size, f->name, f->stats);
  fill_free(f);
}

/* ---- eviction ---- */

typedef struct entry {
  char *name;
  uint64_t bytes;
  struct timespec used;
} entry;

static int by_use(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->used.tv_sec != y->used.tv_sec)
    return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
  if (x->used.tv_nsec != y->used.tv_nsec)
    return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* A temporary file of a writer that died: unlocked, unchanged for a while. */
static int stale_tmp(int dfd, const char *name, const struct stat *st) {
  if (time(NULL) - st->st_mtime < WDS__CACHE_STALE_S)
    return 0;
  int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return 0;
  int free_of_writer = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return free_of_writer;
}

size_t wds__cache_evict(const char *dir, uint64_t size, const char *keep,
                        wds__cache_stats *stats) {
  char *lock_path = join(dir, ".lock");
  if (!lock_path)
    return 0;
  int lfd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lfd < 0)
    lfd = open(lock_path, O_RDONLY | O_CLOEXEC);
  free(lock_path);
  if (lfd < 0) {
    if (size > 0)
      report(stats,
             "shard cache %s: cannot open its lock file: %s (entries "
             "are not evicted)",
             dir, strerror(errno));
    return 0;
  }
  while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
  }
  size_t deleted = 0;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    if (dfd >= 0)
      close(dfd);
    close(lfd);
    return 0;
  }
  entry *es = NULL;
  size_t n = 0, cap = 0;
  uint64_t total = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    const char *nm = de->d_name;
    if (nm[0] == '.' && strncmp(nm, ".tmp-", 5) != 0)
      continue; /* ".", "..", ".lock" */
    struct stat st;
    if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (nm[0] == '.') {
      if (stale_tmp(dfd, nm, &st))
        unlinkat(dfd, nm, 0);
      continue;
    }
    if (n == cap) {
      size_t c2 = cap ? cap * 2 : 64;
      entry *p = realloc(es, c2 * sizeof *p);
      if (!p)
        break;
      es = p;
      cap = c2;
    }
    es[n].name = strdup(nm);
    if (!es[n].name)
      break;
    es[n].bytes = (uint64_t)st.st_size;
    es[n].used = st.st_mtim;
    total += es[n].bytes;
    n++;
  }
  if (size > 0 && total > size) {
    qsort(es, n, sizeof *es, by_use);
    pthread_mutex_lock(&open_mu);
    for (size_t i = 0; i < n && total > size; i++) {
      if ((keep && strcmp(es[i].name, keep) == 0) ||
          open_has_locked(es[i].name))
        continue;
      if (unlinkat(dfd, es[i].name, 0) == 0 || errno == ENOENT) {
        total -= es[i].bytes;
        deleted++;
      }
    }
    pthread_mutex_unlock(&open_mu);
  }
  for (size_t i = 0; i < n; i++)
    free(es[i].name);
  free(es);
  closedir(d);
  close(lfd);
  if (stats && deleted)
    atomic_fetch_add(&stats->evicted, deleted);
  return deleted;
}
