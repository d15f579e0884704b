/* outfile.c — whole files written safely: wds_outfile (wds/outfile.h).
 *
 * A regular target is written under a temporary name beside it, created
 * exclusively (O_EXCL) and named by the pid and a per-process counter, then
 * synced, renamed over the target and the directory synced; a device, a
 * FIFO or one of the process's own descriptors is written in place. The
 * tar writer (tarw.c) writes every shard through it; npy files, indexes
 * and checkpoints too. */
#include "shards/outfile_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/text.h"

struct wds_outfile {
  int fd;
  unsigned flags;
  mode_t in_place; /* S_IFMT of a target written in place; 0: temporary */
  char *path;
  char *tmp; /* the temporary name while it exists (NULL in place) */
};

/* The descriptor /dev/stdin, /dev/stdout, /dev/stderr, /dev/fd/N or
 * /proc/self/fd/N names (a link to this process's own), or -1 for any
 * other path. */
static int own_fd(const char *path) {
  if (strcmp(path, "/dev/stdin") == 0)
    return 0;
  if (strcmp(path, "/dev/stdout") == 0)
    return 1;
  if (strcmp(path, "/dev/stderr") == 0)
    return 2;
  const char *n = strncmp(path, "/dev/fd/", 8) == 0          ? path + 8
                  : strncmp(path, "/proc/self/fd/", 14) == 0 ? path + 14
                                                             : NULL;
  if (!n || !*n || strlen(n) > 9)
    return -1;
  int fd = 0;
  for (; *n; n++) {
    if (*n < '0' || *n > '9')
      return -1;
    fd = fd * 10 + (*n - '0');
  }
  return fd;
}

/* One of the process's own descriptors (own_fd's): written through a copy
 * of the descriptor, at its offset (after what the process wrote and will
 * write there), whatever it is (a file, a pipe, a terminal, a socket),
 * never reopened, truncated, replaced or renamed over: /dev/stdout is a
 * link in a directory shared by the whole machine, and /dev/fd/N is in
 * /proc, where no temporary can be made. */
static int open_own(wds_outfile *f, const char *path, int own, wds__err *e) {
  struct stat st;
  int fl = fcntl(own, F_GETFL);
  if (fl < 0)
    return wds__fail(e, WDS_ERR_OPEN, "cannot write %s: descriptor %d: %s",
                     path, own, strerror(errno));
  if ((fl & O_ACCMODE) == O_RDONLY)
    return wds__fail(e, WDS_ERR_OPEN,
                     "cannot write %s: descriptor %d is open for reading only",
                     path, own);
  f->fd = fcntl(own, F_DUPFD_CLOEXEC, 3);
  if (f->fd < 0 || fstat(f->fd, &st) != 0)
    return wds__fail(e, WDS_ERR_OPEN, "cannot write %s: %s", path,
                     strerror(errno));
  if (S_ISDIR(st.st_mode))
    return wds__fail(e, WDS_ERR_OPEN, "cannot write %s: it is a directory",
                     path);
  f->in_place = st.st_mode & S_IFMT;
  return WDS_OK;
}

/* WDS_OUTFILE_STREAM's regular file (PATH is none, a regular file, or a
 * symlink to one or to nothing): written in place from the start. A link
 * is removed and the file created exclusively in its place, so its target
 * is never written; O_NOFOLLOW refuses a link planted since. */
static int open_stream(wds_outfile *f, const char *path, wds__err *e) {
  struct stat lst, st;
  int excl = 0;
  if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
    if (unlink(path) != 0)
      return wds__fail(e, WDS_ERR_OPEN,
                       "cannot replace the symbolic link %s: %s", path,
                       strerror(errno));
    excl = O_EXCL;
  }
  f->fd = open(path,
               O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NOCTTY |
                   O_CLOEXEC | excl,
               0666);
  if (f->fd < 0)
    return wds__fail(e, WDS_ERR_OPEN, "cannot create %s: %s", path,
                     strerror(errno));
  if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode))
    return wds__fail(e, WDS_ERR_OPEN,
                     "cannot open %s: it changed while it was opened", path);
  f->in_place = S_IFREG;
  return WDS_OK;
}

int wds__outfile_open(const char *path, unsigned flags, wds_outfile **out,
                      wds__err *e) {
  static atomic_uint counter;
  int rc = WDS_OK;
  if (!out)
    return wds__fail(e, WDS_ERR_INVALID, "out is NULL");
  *out = NULL;
  if (!path || !*path)
    return wds__fail(e, WDS_ERR_INVALID, "empty output path");
  wds_outfile *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  }
  f->fd = -1;
  f->flags = flags;
  struct stat st, lst;
  int own = own_fd(path);
  if (own >= 0) {
    rc = open_own(f, path, own, e);
    goto done;
  }
  /* Anything stat cannot see (ENOENT, a dangling link) is created through
   * the temporary, whose errors name the problem; so is a regular file, or
   * a symlink to one, which the rename then replaces (the link, never its
   * target). */
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode)) {
      rc = wds__fail(e, WDS_ERR_OPEN, "cannot write %s: it is a %s", path,
                     S_ISDIR(st.st_mode) ? "directory" : "socket");
      goto done;
    }
    /* A device or FIFO is written in place only when PATH names it
     * itself: a symlink to one (planted in a shared output directory,
     * say) would send the output into a disk, a terminal or another
     * program's pipe. (The process's own descriptors, /dev/stdout and
     * /dev/fd/N, were taken above.) */
    int is_link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
    if (is_link) {
      char *real = realpath(path, NULL), shown[512];
      const char *what = S_ISFIFO(st.st_mode)  ? "FIFO"
                         : S_ISCHR(st.st_mode) ? "character device"
                         : S_ISBLK(st.st_mode) ? "block device"
                                               : "special file";
      rc = wds__fail(e, WDS_ERR_OPEN,
                     "cannot write %s: it is a symbolic link to a %s (%s): "
                     "an output replaces a link to a regular file, and never "
                     "writes through one to a device, FIFO or socket; name "
                     "the %s itself to write into it",
                     path, what,
                     real ? wds__esc(real, shown, sizeof shown, 0) : "?", what);
      free(real);
      goto done;
    }
    /* No O_CREAT: it exists, and must not turn into a new regular file.
     * O_NOFOLLOW: a link put in its place since the lstat is refused. */
    f->fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
    if (f->fd < 0) {
      rc = wds__fail(e, WDS_ERR_OPEN, "cannot open %s: %s", path,
                     strerror(errno));
      goto done;
    }
    if (fstat(f->fd, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
      /* Replaced by a regular file since the stat: writing it in place
       * would not be atomic. */
      rc = wds__fail(e, WDS_ERR_OPEN,
                     "cannot open %s: it changed while it was opened", path);
      goto done;
    }
    f->in_place = st.st_mode & S_IFMT;
    goto done;
  }
  if (flags & WDS_OUTFILE_STREAM) {
    rc = open_stream(f, path, e);
    goto done;
  }
  size_t n = strlen(path) + 48;
  if (!(f->tmp = malloc(n))) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  /* A name of our own beside the target, so the rename is atomic; O_EXCL,
   * so concurrent writers (threads, processes, other hosts sharing the file
   * system) never share one. */
  for (int tries = 0;; tries++) {
    snprintf(f->tmp, n, "%s.tmp-%ld-%u", path, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f->fd >= 0)
      break;
    if (errno != EEXIST || tries >= 100) {
      rc = wds__fail(e, WDS_ERR_OPEN, "cannot create %s (as %s): %s", path,
                     f->tmp, strerror(errno));
      free(f->tmp); /* not ours: never removed */
      f->tmp = NULL;
      goto done;
    }
  }
done:
  if (rc != WDS_OK) {
    wds_outfile_close(f);
    return rc;
  }
  *out = f;
  return WDS_OK;
}

int wds_outfile_open(const char *path, unsigned flags, wds_outfile **out) {
  wds__err e;
  return wds__last_set(wds__outfile_open(path, flags, out, &e), e.msg);
}

int wds_outfile_fd(const wds_outfile *f) { return f ? f->fd : -1; }

int wds_outfile_in_place(const wds_outfile *f) { return f && f->in_place != 0; }

const char *wds_outfile_tmp_path(const wds_outfile *f) {
  return f ? f->tmp : NULL;
}

/* Syncs the directory holding path, which makes a rename in it durable. A
 * directory that cannot be opened for reading, or a file system that cannot
 * sync one (EINVAL), is skipped: there is nothing more to do. */
static int sync_dir(const char *path, wds__err *e) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path))
                    : strdup(".");
  int rc = WDS_OK;
  if (!dir)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS)
      rc = wds__fail(e, WDS_ERR_IO, "cannot sync directory %s: %s", dir,
                     strerror(errno));
    close(dfd);
  }
  free(dir);
  return rc;
}

int wds__outfile_commit(wds_outfile *f, wds__err *e) {
  if (!f || f->fd < 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "output file already committed or closed");
  int sync = !(f->flags & WDS_OUTFILE_NO_SYNC);
  const char *name = f->tmp ? f->tmp : f->path;
  /* Only files and block devices hold data to sync: fsync of a FIFO or a
   * character device fails (EINVAL) and would mean nothing. A stream's
   * file (in place, S_IFREG) is synced where it is. */
  if (sync && (f->tmp || f->in_place == S_IFBLK || f->in_place == S_IFREG) &&
      fsync(f->fd) != 0)
    return wds__fail(e, WDS_ERR_IO, "cannot sync %s: %s", name,
                     strerror(errno));
  int fd = f->fd;
  f->fd = -1;
  /* close reports what a file system defers (NFS: quota, ENOSPC). */
  if (close(fd) != 0)
    return wds__fail(e, WDS_ERR_IO, "cannot write %s: %s", name,
                     strerror(errno));
  if (!f->tmp)
    return WDS_OK;
  if (rename(f->tmp, f->path) != 0)
    return wds__fail(e, WDS_ERR_IO, "cannot rename %s to %s: %s", f->tmp,
                     f->path, strerror(errno));
  free(f->tmp); /* now the file under its final name: never removed */
  f->tmp = NULL;
  return sync ? sync_dir(f->path, e) : WDS_OK;
}

int wds_outfile_commit(wds_outfile *f) {
  wds__err e;
  return wds__last_set(wds__outfile_commit(f, &e), e.msg);
}

void wds_outfile_close(wds_outfile *f) {
  if (!f)
    return;
  if (f->fd >= 0)
    close(f->fd);
  if (f->tmp)
    unlink(f->tmp);
  free(f->tmp);
  free(f->path);
  free(f);
}
