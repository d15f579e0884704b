/* defer.c — deferred reads (wds_loader_config.defer_reads).
 *
 * A shard that is a local regular file read without compression can leave
 * its large wanted fields (FEED_INTO_BYTES and more) in the file: the
 * reader skips their data (a seek, no read) and the raw sample in the
 * shuffle buffer holds the shard's file handle, the data's offset and its
 * size instead of the bytes (feed.c). When the sample leaves the buffer,
 * the worker reads each such field with pread into a recycled block of its
 * pool (wds__defer_read), then decodes as usual; a field wanted only by
 * rows of raw bytes (at_copy) is not read there: its file's size is
 * checked and the batch copy preads it into its slot row
 * (wds__defer_pread, collate.c). So the shuffle buffer's
 * memory is not touched until the sample is used: no fresh pages faulted
 * in and zeroed for a buffer of samples that only waits.
 *
 * The handle is the reader's descriptor duplicated, refcounted by the feed
 * (while it reads the shard) and by each deferred field, so a file renamed
 * over meanwhile is still read from the inode that was scanned. A file
 * that changed (its size, or its mtime, against those at open, checked
 * before and after each read: a same-size rewrite in place keeps the
 * inode and the size, and its bytes must not pass for the old file's
 * under the old keys; a cache entry's mtime marks use and is not compared)
 * or a read error is an error naming the shard, sample, field and offset,
 * which the worker treats like a decode failure. The output never depends
 * on deferral: the shuffle buffer counts a deferred field at its size. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/url.h"
#include "loader/internal.h"
#include "shards/source.h"

void (*wds__defer_read_hook)(const char *url);
void (*wds__defer_copy_hook)(const char *url, const char *key);

/* Handles open in the process (all workers of all loaders). */
static atomic_int fh_held;
atomic_size_t wds__fh_res_bytes;

/* The process's budget of held descriptors: a quarter of the soft
 * RLIMIT_NOFILE (read at each open: a program may change it). */
static int fh_budget(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 16;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur / 4 > (rlim_t)1 << 20)
    return 1 << 20;
  return (int)(rl.rlim_cur / 4);
}

/* Pages per granule of AUTO's residency map: 1 MiB of 4 KiB pages. */
#define RES_GRANULE 256

/* Whether the page at byte at of the mapping m (len bytes) is in the page
 * cache. */
static int page_in_cache(const char *m, size_t len, size_t page, size_t at) {
  unsigned char v = 0;
  size_t n = len - at < page ? len - at : page;
  return mincore((void *)(m + at), n, &v) == 0 && (v & 1);
}

/* One bit per granule (RES_GRANULE pages) of fd's file (size bytes), set
 * when the granule's first and last pages are in the page cache, from
 * mincore over an untouched mapping; *gbytes: a granule's bytes; *any:
 * some granule is. NULL when that cannot be known. Two one-page calls per
 * granule: a map of every page cost 6-11% of a steady-state epoch of
 * 100 KB samples (the kernel's lookup per page), this about 0.1%; the
 * kernel caches and evicts files in runs, so a granule's ends stand for
 * it. */
static uint64_t *residency_bits(int fd, uint64_t size, size_t page,
                                size_t *ngran, size_t *gbytes, int *any) {
  *any = 0;
  if (size == 0 || size > SIZE_MAX / 2)
    return NULL;
  size_t len = (size_t)size, g = page * RES_GRANULE;
  size_t n = (len + g - 1) / g;
  uint64_t *bits = calloc((n + 63) / 64, sizeof *bits);
  if (!bits)
    return NULL;
  char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    free(bits);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    size_t first = i * g, end = first + g < len ? first + g : len;
    size_t last = (end - 1) / page * page;
    if (page_in_cache(m, len, page, first) &&
        (last == first || page_in_cache(m, len, page, last))) {
      bits[i / 64] |= (uint64_t)1 << (i % 64);
      *any = 1;
    }
  }
  munmap(m, len);
  *ngran = n;
  *gbytes = g;
  return bits;
}

static void res_free(wds__fh *fh) {
  if (fh->res) {
    atomic_fetch_sub(&wds__fh_res_bytes, (fh->npages + 63) / 64 * 8);
    free(fh->res);
    fh->res = NULL;
  }
}

wds__fh *wds__fh_open(int fd, int cache_entry, wds_defer_reads mode,
                      wds__blk_pool *bp) {
  if (fd < 0 || mode == WDS_DEFER_OFF)
    return NULL;
  if (atomic_load(&bp->fh_open) >= WDS__FH_CAP)
    return NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t *res = NULL;
  size_t npages = 0; /* granules */
  if (mode == WDS_DEFER_AUTO) {
    int any = 0;
    size_t g = page;
    res = residency_bits(fd, (uint64_t)st.st_size, page, &npages, &g, &any);
    page = g;
    if (!any) { /* none of it cached, or unknown: read in the stream */
      free(res);
      return NULL;
    }
  }
  if (atomic_fetch_add(&fh_held, 1) >= fh_budget()) {
    atomic_fetch_sub(&fh_held, 1); /* the process's budget is spent */
    free(res);
    return NULL;
  }
  wds__fh *fh = malloc(sizeof *fh);
  if (fh)
    fh->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (!fh || fh->fd < 0) {
    atomic_fetch_sub(&fh_held, 1);
    free(res);
    free(fh);
    return NULL; /* out of descriptors: read in the stream */
  }
  fh->res = res;
  fh->auto_ = mode == WDS_DEFER_AUTO;
  fh->npages = npages;
  fh->page = page;
  if (res)
    atomic_fetch_add(&wds__fh_res_bytes, (npages + 63) / 64 * 8);
  atomic_init(&fh->refs, 1);
  fh->size = (uint64_t)st.st_size;
  fh->mtime = st.st_mtim;
  fh->cache_entry = cache_entry;
  fh->open = &bp->fh_open;
  atomic_fetch_add(fh->open, 1);
  return fh;
}

void wds__fh_scan_done(wds__fh *fh) {
  if (fh) {
    res_free(fh);
    fh->npages = 0;
  }
}

void wds__fh_put(wds__fh *fh) {
  if (!fh || atomic_fetch_sub(&fh->refs, 1) != 1)
    return;
  close(fh->fd);
  atomic_fetch_sub(fh->open, 1);
  atomic_fetch_sub(&fh_held, 1);
  res_free(fh);
  free(fh);
}

int wds__fh_defers(const wds__fh *fh, uint64_t off, uint64_t size) {
  if (off > fh->size || size > fh->size - off)
    return 0; /* past the file's size at open (a header's claim): the stream
                 finds out, without a block of the claimed size */
  if (!fh->auto_)
    return 1;
  if (size == 0 || !fh->res)
    return 0;
  uint64_t a = off / fh->page, b = (off + size - 1) / fh->page;
  if (b >= fh->npages)
    return 0; /* past the file's size at open: the stream finds out */
  for (uint64_t p = a; p <= b; p++)
    if (!(fh->res[p / 64] >> (p % 64) & 1))
      return 0;
  return 1;
}

void wds__defer_drop(wds__raw_sample *r) {
  for (size_t i = 0; i < r->nfields; i++)
    if (r->f[i].fh) {
      wds__fh_put(r->f[i].fh);
      r->f[i].fh = NULL;
    }
}

/* Reads size bytes at off: 0, or the errno (EIO for a short read, ENODATA
 * for the file's end). */
static int pread_all(int fd, uint8_t *dst, size_t size, uint64_t off) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = pread(fd, dst + got, size - got, (off_t)(off + got));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (n == 0)
      return ENODATA;
    got += (size_t)n;
  }
  return 0;
}

/* Whether fh's file changed since it was opened: its size, or (but for a
 * cache entry, whose mtime marks use) its modification time, which every
 * write sets: a file rewritten in place with the same size keeps its size
 * and inode, and its bytes would be the new file's under the old one's
 * keys. A touch looks the same and is refused too: nothing tells them
 * apart. 0, or 1 with the reason in why; -1 when fstat fails (why: its
 * error). */
static int fh_changed(const wds__fh *fh, char *why, size_t n) {
  struct stat fs;
  if (fstat(fh->fd, &fs) != 0) {
    snprintf(why, n, "%s", strerror(errno));
    return -1;
  }
  if ((uint64_t)fs.st_size != fh->size) {
    snprintf(why, n,
             "the file changed since the shard was opened (size %llu, was "
             "%llu)",
             (unsigned long long)fs.st_size, (unsigned long long)fh->size);
    return 1;
  }
  if (!fh->cache_entry && (fs.st_mtim.tv_sec != fh->mtime.tv_sec ||
                           fs.st_mtim.tv_nsec != fh->mtime.tv_nsec)) {
    snprintf(why, n,
             "the file changed since the shard was opened (the same size, "
             "modified at %lld.%09ld, was %lld.%09ld: written in place or "
             "touched; its bytes may not be the ones scanned)",
             (long long)fs.st_mtim.tv_sec, (long)fs.st_mtim.tv_nsec,
             (long long)fh->mtime.tv_sec, (long)fh->mtime.tv_nsec);
    return 1;
  }
  return 0;
}

/* wds__defer_pread's status for a file that changed (fh_changed) by the
 * end of the read. */
#define DEFER_CHANGED (-1)

int wds__defer_pread(const wds__raw_field *f, void *dst) {
  int en = pread_all(f->fh->fd, dst, f->size, f->off);
  if (en)
    return en;
  /* Checked after the read: a file unchanged now was unchanged while it
   * was read (a write sets the mtime before it changes any byte). */
  char why[8];
  int ch = fh_changed(f->fh, why, sizeof why);
  return ch == 0 ? 0 : ch > 0 ? DEFER_CHANGED : EIO;
}

int wds__defer_fail(wds__err *e, const char *url, const char *key,
                    const wds__raw_field *f, const char *why) {
  char ub[WDS__URL_REDACT_MAX];
  return wds__fail(e, WDS_ERR_IO,
                   "%s: sample \"%s\": field '%s': cannot read its %zu bytes "
                   "at offset %llu: %s",
                   wds__url_redact(url, ub, sizeof ub), key, f->ext, f->size,
                   (unsigned long long)f->off, why);
}

const char *wds__defer_why(int en) {
  if (en == DEFER_CHANGED)
    return "the file changed while it was read (its size or modification "
           "time is not the one seen when the shard was opened: written in "
           "place?)";
  return en == ENODATA
             ? "the file ends before it (truncated since the shard was "
               "opened?)"
             : strerror(en);
}

int wds__defer_read(wds__raw_sample *r, const char *url, wds__blk_pool *bp,
                    int owner, wds__defer_stats *st, wds__err *e) {
  size_t i = 0;
  while (i < r->nfields && !r->f[i].fh)
    i++;
  if (i == r->nfields)
    return WDS_OK; /* nothing deferred: no clock read */
  const wds__fh *checked = NULL;
  if (wds__defer_read_hook)
    wds__defer_read_hook(url);
  uint64_t t0 = wds__now_ns();
  for (; i < r->nfields; i++) {
    wds__raw_field *f = &r->f[i];
    if (!f->fh)
      continue;
    const char *why = NULL;
    char whyb[256];
    if (f->fh != checked) {
      if (fh_changed(f->fh, whyb, sizeof whyb) != 0)
        why = whyb;
      checked = f->fh;
    }
    if (!why && f->at_copy) { /* the batch copy reads it into its row */
      st->fields++;
      st->bytes += f->size;
      continue;
    }
    void *b = NULL;
    if (!why) {
      b = wds__blk_alloc(bp, owner, f->size ? f->size : 1);
      if (!b) {
        wds__defer_drop(r);
        st->ns += wds__now_ns() - t0;
        return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
      }
      int en = wds__defer_pread(f, b);
      if (en) {
        wds__blk_free(b);
        why = wds__defer_why(en);
      }
    }
    if (why) {
      wds__defer_drop(r);
      st->ns += wds__now_ns() - t0;
      return wds__defer_fail(e, url, r->key, f, why);
    }
    f->data = b;
    f->blk = b;
    wds__fh_put(f->fh);
    f->fh = NULL;
    st->fields++;
    st->bytes += f->size;
  }
  st->ns += wds__now_ns() - t0;
  return WDS_OK;
}
