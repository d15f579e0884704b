/* test_defer.c — deferred reads (wds_loader_config.defer_reads, loader/
 * defer.c): large fields of local uncompressed shards left in the file
 * while their sample waits in the shuffle buffer, read with pread as it
 * leaves.
 *
 * The batches must not depend on it: every configuration here is run with
 * OFF (the reference), ON and AUTO, and the whole output (keys, URLs,
 * valid flags, sources, every field's bytes and offsets) compared byte for
 * byte, in the three modes, with 1 and 2 workers, a binding byte limit on
 * the shuffle buffer, resume and eager_next_epoch. Then what can go wrong:
 * more shards than a worker keeps open, a shard truncated or replaced
 * between its scan and the read, and AUTO with a file not in the page
 * cache. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/internal.h"
#include "shards/cache.h"
#include "shards/tarw.h"
#include "test.h"
#include "test_files.h"
#include "wds/loader.h"

static char tmpdir[256];

/* Sizes of the .bin field, cycling: just under and at FEED_INTO_BYTES
 * (16 KiB), larger, empty, small. */
static const size_t bin_sizes[] = {16383, 16384, 20000, 0, 100, 70000, 40000};
#define NBIN (sizeof bin_sizes / sizeof *bin_sizes)

static uint8_t byte_of(int id, int field, size_t i) {
  return (uint8_t)(i * 7 + (size_t)id * 13 + (size_t)field * 101 + (i >> 11));
}

/* Shard k of n samples (global ids from first): .cls (the id), .bin
 * (bin_sizes), .dat (a second large field: 17000 + 1000 * (id % 5) bytes),
 * and .big (150 KB, wanted by no output). */
static int write_shard(const char *path, int first, int n) {
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK)
    return -1;
  uint8_t *data = malloc(150000);
  if (!data)
    return -1;
  for (int i = 0; i < n; i++) {
    int id = first + i;
    char name[64], val[32];
    snprintf(name, sizeof name, "%06d.big", id);
    memset(data, 0xee, 150000);
    wds__tarw_add(w, name, data, 150000, &e);
    snprintf(name, sizeof name, "%06d.cls", id);
    snprintf(val, sizeof val, "%d", id);
    wds__tarw_add(w, name, val, strlen(val), &e);
    size_t nb = bin_sizes[id % NBIN];
    for (size_t j = 0; j < nb; j++)
      data[j] = byte_of(id, 0, j);
    snprintf(name, sizeof name, "%06d.bin", id);
    wds__tarw_add(w, name, data, nb, &e);
    size_t nd = 17000 + 1000 * (size_t)(id % 5);
    for (size_t j = 0; j < nd; j++)
      data[j] = byte_of(id, 1, j);
    snprintf(name, sizeof name, "%06d.dat", id);
    wds__tarw_add(w, name, data, nd, &e);
  }
  free(data);
  int rc = wds__tarw_finish(w, &e);
  wds__tarw_close(w);
  return rc == WDS_OK ? 0 : -1;
}

typedef struct shardset {
  char paths[128][300];
  const char *urls[128];
  size_t n;
} shardset;

static int make_set(shardset *s, const char *name, size_t n, int per) {
  s->n = n;
  for (size_t k = 0; k < n; k++) {
    snprintf(s->paths[k], sizeof s->paths[k], "%s/%s-%03zu.tar", tmpdir, name,
             k);
    s->urls[k] = s->paths[k];
    if (write_shard(s->paths[k], (int)k * per, per) != 0)
      return -1;
  }
  return 0;
}

static const wds_field_spec fields3[] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0},
                                         {"bin", WDS_DECODE_BYTES, 0, 0, 0},
                                         {"dat", WDS_DECODE_BYTES, 0, 0, 0}};

/* Whether every page of fd's file is in the page cache now (mincore over
 * a mapping that is never touched): 1 yes (an empty file too), 0 no or
 * unknown. */
static int file_resident(int fd) {
  struct stat st;
  long pg = sysconf(_SC_PAGESIZE);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 || pg <= 0)
    return 0;
  if (st.st_size == 0)
    return 1;
  size_t len = (size_t)st.st_size, pages = (len + (size_t)pg - 1) / (size_t)pg;
  void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    return 0;
  unsigned char *vec = malloc(pages);
  int all = vec && mincore(m, len, vec) == 0;
  for (size_t i = 0; all && i < pages; i++)
    all = vec[i] & 1;
  free(vec);
  munmap(m, len);
  return all;
}

/* The whole output of a run, serialised. */
typedef struct out {
  uint8_t *b;
  size_t len, cap;
  size_t rows, invalid;
  int status;
  char err[1024];
  wds_loader_stats st;
} out;

static void put(out *o, const void *p, size_t n) {
  if (o->len + n > o->cap) {
    size_t c = o->cap ? o->cap : 1 << 20;
    while (c < o->len + n)
      c *= 2;
    o->b = realloc(o->b, c);
    o->cap = c;
  }
  memcpy(o->b + o->len, p, n);
  o->len += n;
}

static void put_batch(out *o, const wds_batch *b) {
  put(o, &b->epoch, sizeof b->epoch);
  put(o, &b->index, sizeof b->index);
  put(o, &b->rows, sizeof b->rows);
  put(o, b->valid, b->rows);
  for (size_t r = 0; r < b->rows; r++) {
    put(o, b->keys[r], strlen(b->keys[r]) + 1);
    put(o, b->urls[r], strlen(b->urls[r]) + 1);
    put(o, &b->sources[r], sizeof b->sources[r]);
    o->invalid += !b->valid[r];
  }
  for (size_t f = 0; f < b->field_count; f++) {
    const wds_batch_field *bf = &b->fields[f];
    put(o, &bf->size_bytes, sizeof bf->size_bytes);
    put(o, bf->data, bf->size_bytes);
    if (bf->offsets)
      put(o, bf->offsets, (b->rows + 1) * sizeof *bf->offsets);
  }
  o->rows += b->rows;
}

/* Runs epochs of c (from c->epoch) into o; o->status: WDS_OK, or the
 * error that ended it (its text in o->err). */
static void run_cfg(const wds_loader_config *c, int epochs, out *o) {
  memset(o, 0, sizeof *o);
  wds_loader *l;
  o->status = wds_loader_open(c, &l);
  if (o->status != WDS_OK) {
    snprintf(o->err, sizeof o->err, "%s", wds_last_error());
    return;
  }
  for (int e = 0; e < epochs && o->status == WDS_OK; e++) {
    const wds_batch *b;
    int rc;
    while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
      put_batch(o, b);
      wds_loader_release(l, b);
    }
    if (rc != WDS_EOF) {
      o->status = rc;
      snprintf(o->err, sizeof o->err, "%s", wds_last_error());
    }
  }
  wds_loader_stats_get(l, &o->st);
  wds_loader_close(l);
}

static void out_free(out *o) { free(o->b); }

static int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++)
    if (fcntl(fd, F_GETFD) >= 0)
      n++;
  return n;
}

static wds_loader_config cfg_of(const shardset *s) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = s->urls;
  c.url_count = s->n;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = fields3;
  c.field_count = 3;
  c.batch_size = 8;
  c.shuffle_buffer = 30;
  c.seed = 7;
  c.read_buffer_bytes = 65536;
  return c;
}

/* c with OFF, ON and AUTO: the same output; ON deferred something (the
 * fixtures are in the page cache, so AUTO usually does too). */
static int same_all_ways(wds_loader_config c, int epochs, const char *what) {
  out ref, on, au;
  c.defer_reads = WDS_DEFER_OFF;
  run_cfg(&c, epochs, &ref);
  c.defer_reads = WDS_DEFER_ON;
  run_cfg(&c, epochs, &on);
  c.defer_reads = WDS_DEFER_AUTO;
  run_cfg(&c, epochs, &au);
  int ok = 1;
  if (ref.status != WDS_OK || on.status != WDS_OK || au.status != WDS_OK) {
    printf("  %s: status %d %d %d: %s %s %s\n", what, ref.status, on.status,
           au.status, ref.err, on.err, au.err);
    ok = 0;
  } else if (ref.rows == 0 || ref.len != on.len ||
             memcmp(ref.b, on.b, ref.len) != 0 || ref.len != au.len ||
             memcmp(ref.b, au.b, ref.len) != 0) {
    printf("  %s: outputs differ (%zu rows off, %zu on, %zu auto)\n", what,
           ref.rows, on.rows, au.rows);
    ok = 0;
  } else if (ref.st.deferred_fields != 0 || on.st.deferred_fields == 0 ||
             on.st.deferred_bytes == 0) {
    printf("  %s: deferred fields off %llu, on %llu\n", what,
           (unsigned long long)ref.st.deferred_fields,
           (unsigned long long)on.st.deferred_fields);
    ok = 0;
  } else if (!c.eager_next_epoch && ref.st.bytes_read != on.st.bytes_read) {
    /* (eager_next_epoch reads into an epoch never taken, as far as timing
     * lets it) */
    printf("  %s: bytes_read %llu off, %llu on\n", what,
           (unsigned long long)ref.st.bytes_read,
           (unsigned long long)on.st.bytes_read);
    ok = 0;
  }
  out_free(&ref);
  out_free(&on);
  out_free(&au);
  return ok;
}

static shardset set6; /* 6 shards of 20 samples */

/* Checks the reference output's bytes against the fixtures once, so
 * "the same as OFF" means "right". */
TEST(reference_rows_are_right) {
  wds_loader_config c = cfg_of(&set6);
  c.defer_reads = WDS_DEFER_ON;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *b;
  int rc, seen[120] = {0};
  size_t rows = 0;
  while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
    const int64_t *cls = b->fields[0].data;
    for (size_t r = 0; r < b->rows; r++) {
      int id = (int)cls[r];
      ASSERT_TRUE(b->valid[r] && id >= 0 && id < 120 && !seen[id]);
      seen[id] = 1;
      for (int f = 0; f < 2; f++) {
        const uint8_t *d = b->fields[1 + f].data;
        const uint64_t *off = b->fields[1 + f].offsets;
        size_t want =
            f ? 17000 + 1000 * (size_t)(id % 5) : bin_sizes[id % NBIN];
        ASSERT_EQ_U64(off[r + 1] - off[r], want);
        for (size_t j = 0; j < want; j++)
          if (d[off[r] + j] != byte_of(id, f, j)) {
            TEST_FAIL_("sample %d field %d byte %zu", id, f, j);
            wds_loader_release(l, b);
            wds_loader_close(l);
            return;
          }
      }
      rows++;
    }
    wds_loader_release(l, b);
  }
  ASSERT_EQ_INT(rc, WDS_EOF);
  ASSERT_EQ_U64(rows, 120);
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  wds_loader_close(l);
  /* .bin at and over 16 KiB (4 of 7 sizes) and every .dat were deferred;
   * .bin of 16383 bytes and less never is. */
  uint64_t want_fields = 0, want_bytes = 0;
  for (int id = 0; id < 120; id++) {
    size_t nb = bin_sizes[id % NBIN];
    if (nb >= 16384) {
      want_fields++;
      want_bytes += nb;
    }
    want_fields++;
    want_bytes += 17000 + 1000 * (uint64_t)(id % 5);
  }
  ASSERT_EQ_U64(st.deferred_fields, want_fields);
  ASSERT_EQ_U64(st.deferred_bytes, want_bytes);
}

TEST(same_batches_in_every_mode) {
  for (int mode = 0; mode < 3; mode++)
    for (int workers = 1; workers <= 2; workers++)
      for (int cap = 0; cap < 2; cap++) {
        wds_loader_config c = cfg_of(&set6);
        c.workers = workers;
        c.mode = mode == 0   ? WDS_MODE_PLAIN
                 : mode == 1 ? WDS_MODE_EXACT
                             : WDS_MODE_RESAMPLED;
        if (mode == 1) { /* rank 1 of 2: pieces start inside shards */
          c.rank = 1;
          c.world_size = 2;
        }
        if (mode == 2)
          c.samples_per_epoch = 90;
        /* A byte bound that binds (about 4 samples): the buffer must count
         * a deferred field at its size, or it would hold more samples. */
        c.shuffle_buffer_bytes = cap ? 200000 : 0;
        char what[96];
        snprintf(what, sizeof what, "mode %d, %d workers, byte cap %d", mode,
                 workers, cap);
        ASSERT_TRUE(same_all_ways(c, 2, what));
      }
}

TEST(same_batches_with_resume_and_eager_next_epoch) {
  for (int mode = 0; mode < 3; mode++)
    for (int workers = 1; workers <= 2; workers++) {
      wds_loader_config c = cfg_of(&set6);
      c.workers = workers;
      c.mode = mode == 0   ? WDS_MODE_PLAIN
               : mode == 1 ? WDS_MODE_EXACT
                           : WDS_MODE_RESAMPLED;
      if (mode == 2)
        c.samples_per_epoch = 90;
      c.epoch = 1;
      c.eager_next_epoch = 1;
      char what[96];
      snprintf(what, sizeof what, "eager, mode %d, %d workers", mode, workers);
      ASSERT_TRUE(same_all_ways(c, 3, what));
      static const uint64_t at[] = {1, 4, 9};
      for (size_t k = 0; k < 3; k++) {
        c.resume_batches = at[k];
        snprintf(what, sizeof what, "resume at %llu, mode %d, %d workers",
                 (unsigned long long)at[k], mode, workers);
        ASSERT_TRUE(same_all_ways(c, 2, what));
      }
    }
}

/* More shards than a worker keeps open (WDS__FH_CAP): a shuffle buffer
 * that holds all of them before the first output; past the cap shards are
 * read in the stream; no descriptor is left open after close. */
TEST(more_shards_than_the_handle_cap) {
  static shardset many;
  ASSERT_EQ_INT(make_set(&many, "many", 2 * WDS__FH_CAP + 6, 2), 0);
  int fds0 = open_fds();
  wds_loader_config c = cfg_of(&many);
  c.shuffle_buffer = 1000;
  c.batch_size = 16;
  ASSERT_TRUE(same_all_ways(c, 1, "many shards"));
  c.defer_reads = WDS_DEFER_ON;
  out on;
  run_cfg(&c, 1, &on);
  ASSERT_EQ_INT(on.status, WDS_OK);
  ASSERT_EQ_U64(on.rows, many.n * 2);
  /* A shard has 2 .dat and up to 2 deferrable .bin: at most WDS__FH_CAP
   * shards' worth is deferred. */
  uint64_t one = on.st.deferred_fields;
  printf("  1 worker: deferred %llu fields of %zu shards\n",
         (unsigned long long)one, many.n);
  ASSERT_TRUE(one >= WDS__FH_CAP * 2);
  ASSERT_TRUE(one <= WDS__FH_CAP * 4);
  out_free(&on);
  c.workers = 2; /* each worker has its own cap: 64 of the 70 shards */
  run_cfg(&c, 1, &on);
  ASSERT_EQ_INT(on.status, WDS_OK);
  printf("  2 workers: deferred %llu fields\n",
         (unsigned long long)on.st.deferred_fields);
  ASSERT_TRUE(on.st.deferred_fields > one);
  out_free(&on);
  ASSERT_EQ_INT(open_fds(), fds0);
}

/* The hook truncates or replaces the shard at the first deferred read,
 * after every sample was scanned (the buffer holds them all). */
static const char *hook_path;
static int hook_action; /* 1 truncate, 2 replace by rename, 3 touch, 4
                           rewrite in place (same size), 5 touch as a
                           cache hit does */
static int hook_calls;
static size_t hook_res_bytes; /* wds__fh_res_bytes at the first read */

/* Waits until the file system's clock (the coarse one the kernel stamps
 * mtimes with) is past path's mtime, so that a write now gives the file
 * another mtime (the same-size rewrite below must not fall in the tick of
 * the write that made the file). */
static void wait_past_mtime(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return;
  for (int i = 0; i < 2000; i++) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (now.tv_sec > st.st_mtim.tv_sec ||
        (now.tv_sec == st.st_mtim.tv_sec && now.tv_nsec > st.st_mtim.tv_nsec))
      return;
    usleep(1000);
  }
}

/* Overwrites path in place (no truncation, same inode) with the bytes of
 * a shard of the same size and other content: samples from 700 (ids 700
 * mod 35 = 0, so every field has the size it has from 0). */
static void rewrite_in_place(const char *path) {
  char tmp[400];
  snprintf(tmp, sizeof tmp, "%s.other", path);
  size_t n = 0, old = 0;
  uint8_t *other =
      write_shard(tmp, 700, 20) == 0 ? test_read_file(tmp, &n) : NULL;
  uint8_t *mine = test_read_file(path, &old);
  if (!other || !mine || n != old || memcmp(other, mine, n) == 0)
    printf("  rewrite: the other shard is not the same size (%zu, %zu) with "
           "other bytes\n",
           n, old);
  wait_past_mtime(path);
  int fd = open(path, O_WRONLY);
  if (fd < 0 || !other || pwrite(fd, other, n, 0) != (ssize_t)n)
    perror("rewrite");
  if (fd >= 0)
    close(fd);
  free(other);
  free(mine);
  unlink(tmp);
}

static void defer_hook(const char *url) {
  (void)url;
  if (hook_calls++ || !hook_path)
    return;
  hook_res_bytes = atomic_load(&wds__fh_res_bytes);
  if (hook_action == 1) {
    if (truncate(hook_path, 600000) != 0)
      perror("truncate");
  } else if (hook_action == 3) {
    /* a new mtime, the bytes unchanged (touch; a cache hit's futimens) */
    struct timespec ts[2] = {{0, UTIME_NOW}, {2000000000, 0}};
    if (utimensat(AT_FDCWD, hook_path, ts, 0) != 0)
      perror("touch");
  } else if (hook_action == 4) {
    rewrite_in_place(hook_path);
  } else if (hook_action == 5) {
    /* a cache hit by another process: the cache's futimens(fd, NULL) */
    if (utimensat(AT_FDCWD, hook_path, NULL, 0) != 0)
      perror("cache touch");
  } else if (hook_action == 2) {
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.new", hook_path);
    if (write_shard(tmp, 1000, 3) != 0 || rename(tmp, hook_path) != 0)
      perror("replace");
  }
}

TEST(a_shard_truncated_before_the_read) {
  static shardset s2;
  ASSERT_EQ_INT(make_set(&s2, "trunc", 2, 20), 0);
  wds_loader_config c = cfg_of(&s2);
  c.shuffle_buffer = 100;
  c.shard_shuffle = 0;
  c.defer_reads = WDS_DEFER_ON;
  out o;
  wds__defer_read_hook = defer_hook;
  /* stop: the error names the shard, a sample, its field and offset */
  hook_path = s2.paths[0];
  hook_action = 1;
  hook_calls = 0;
  run_cfg(&c, 1, &o);
  ASSERT_TRUE(hook_calls > 0);
  ASSERT_TRUE(o.status == WDS_ERR_IO);
  printf("  stop: %s\n", o.err);
  ASSERT_CONTAINS(o.err, s2.paths[0]);
  ASSERT_CONTAINS(o.err, "sample \"");
  ASSERT_CONTAINS(o.err, "field '");
  ASSERT_CONTAINS(o.err, "at offset ");
  ASSERT_CONTAINS(o.err, "changed");
  out_free(&o);
  /* skip: the other shard's samples all arrive, the first's are invalid
   * rows (counted) where the read failed, the rest of the epoch goes on */
  ASSERT_EQ_INT(write_shard(s2.paths[0], 0, 20), 0);
  hook_calls = 0;
  c.on_error = WDS_ON_ERROR_SKIP;
  run_cfg(&c, 1, &o);
  ASSERT_EQ_INT(o.status, WDS_OK);
  ASSERT_EQ_U64(o.rows, 40);
  printf("  skip: %zu invalid rows, %llu skipped\n", o.invalid,
         (unsigned long long)o.st.skipped);
  ASSERT_EQ_U64(o.invalid, 20); /* every deferred read of shard 0 fails */
  ASSERT_EQ_U64(o.st.skipped, 20);
  ASSERT_EQ_U64(o.st.fill_rows, 20);
  out_free(&o);
  hook_path = NULL;
  wds__defer_read_hook = NULL;
}

/* The copy hook truncates the shard (to nothing) when the batch copy
 * reads sample copy_key's deferred bytes into its slot row, after the
 * worker checked the file's size: a field read in the copy fails there. */
static char copy_key[64];
static const char *copy_path;
static atomic_int copy_hits;

static void copy_hook(const char *url, const char *key) {
  (void)url;
  if (!copy_path || strcmp(key, copy_key) != 0 ||
      atomic_fetch_add(&copy_hits, 1) != 0)
    return;
  if (truncate(copy_path, 0) != 0)
    perror("truncate");
}

/* A key of shard url in the last batch of c's epoch (c->defer_reads OFF):
 * its rows are assigned after every sample was read and size-checked. */
static int last_batch_key(const wds_loader_config *c, const char *url,
                          char *key, size_t n) {
  wds_loader *l;
  if (wds_loader_open(c, &l) != WDS_OK)
    return -1;
  const wds_batch *b;
  key[0] = '\0';
  while (wds_loader_next(l, &b) == WDS_OK) {
    key[0] = '\0';
    for (size_t r = 0; r < b->rows && !key[0]; r++)
      if (strcmp(b->urls[r], url) == 0)
        snprintf(key, n, "%s", b->keys[r]);
    wds_loader_release(l, b);
  }
  wds_loader_close(l);
  return key[0] ? 0 : -1;
}

TEST(a_shard_truncated_before_the_copy) {
  static shardset s2;
  ASSERT_EQ_INT(make_set(&s2, "ctrunc", 2, 20), 0);
  wds_loader_config c = cfg_of(&s2);
  c.shuffle_buffer = 100;
  c.shard_shuffle = 0;
  c.defer_reads = WDS_DEFER_OFF;
  ASSERT_EQ_INT(last_batch_key(&c, s2.paths[0], copy_key, sizeof copy_key), 0);
  c.defer_reads = WDS_DEFER_ON;
  wds__defer_copy_hook = copy_hook;
  copy_path = s2.paths[0];
  /* stop: the four full batches before, then the error naming the shard,
   * the sample, its field and offset */
  atomic_store(&copy_hits, 0);
  out o;
  run_cfg(&c, 1, &o);
  ASSERT_TRUE(atomic_load(&copy_hits) >= 1); /* once a field */
  ASSERT_EQ_INT(o.status, WDS_ERR_IO);
  printf("  stop: %s\n", o.err);
  ASSERT_EQ_U64(o.rows, 32);
  char want[100];
  snprintf(want, sizeof want, "sample \"%s\": field '", copy_key);
  ASSERT_CONTAINS(o.err, s2.paths[0]);
  ASSERT_CONTAINS(o.err, want);
  ASSERT_CONTAINS(o.err, "at offset ");
  ASSERT_CONTAINS(o.err, "ends before it");
  out_free(&o);
  /* skip: the failed rows invalid, zeros, of their sizes; the rest right */
  ASSERT_EQ_INT(write_shard(s2.paths[0], 0, 20), 0);
  atomic_store(&copy_hits, 0);
  c.on_error = WDS_ON_ERROR_SKIP;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *b;
  int rc, seen[40] = {0}, key_invalid = 0;
  size_t rows = 0, invalid = 0, bad = 0;
  while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
    const int64_t *cls = b->fields[0].data;
    for (size_t r = 0; r < b->rows; r++, rows++) {
      int id = atoi(b->keys[r]);
      if (id < 0 || id >= 40 || seen[id]++)
        bad++;
      int ok = b->valid[r];
      if (!ok) {
        invalid++;
        key_invalid |= strcmp(b->keys[r], copy_key) == 0;
        bad += strcmp(b->urls[r], s2.paths[0]) != 0 || cls[r] != 0;
      } else {
        bad += cls[r] != id;
      }
      for (int f = 0; f < 2; f++) {
        const uint8_t *d = b->fields[1 + f].data;
        const uint64_t *off = b->fields[1 + f].offsets;
        size_t n = f ? 17000 + 1000 * (size_t)(id % 5) : bin_sizes[id % NBIN];
        if (off[r + 1] - off[r] != n) {
          bad++;
          continue;
        }
        for (size_t j = 0; j < n; j++)
          if (d[off[r] + j] != (ok ? byte_of(id, f, j) : 0)) {
            bad++;
            break;
          }
      }
    }
    wds_loader_release(l, b);
  }
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  wds_loader_close(l);
  wds__defer_copy_hook = NULL;
  copy_path = NULL;
  printf("  skip: %zu invalid rows of %zu, %llu skipped\n", invalid, rows,
         (unsigned long long)st.skipped);
  ASSERT_EQ_INT(rc, WDS_EOF);
  ASSERT_TRUE(atomic_load(&copy_hits) >= 1); /* once a field */
  ASSERT_EQ_U64(rows, 40);
  ASSERT_EQ_U64(bad, 0);
  ASSERT_TRUE(key_invalid);
  ASSERT_TRUE(invalid >= 1 && invalid <= 8);
  ASSERT_EQ_U64(st.skipped, invalid);
  ASSERT_EQ_U64(st.fill_rows, invalid);
}

/* A shard renamed over between scan and read: its deferred fields still
 * come from the file that was scanned (the handle holds the inode), so the
 * output is the one without the replacement. */
TEST(a_shard_replaced_before_the_read) {
  static shardset s2;
  ASSERT_EQ_INT(make_set(&s2, "repl", 2, 20), 0);
  wds_loader_config c = cfg_of(&s2);
  c.shuffle_buffer = 100;
  c.defer_reads = WDS_DEFER_OFF;
  out ref, o;
  run_cfg(&c, 1, &ref);
  ASSERT_EQ_INT(ref.status, WDS_OK);
  c.defer_reads = WDS_DEFER_ON;
  wds__defer_read_hook = defer_hook;
  hook_path = s2.paths[1];
  hook_action = 2;
  hook_calls = 0;
  run_cfg(&c, 1, &o);
  hook_path = NULL;
  wds__defer_read_hook = NULL;
  ASSERT_TRUE(hook_calls > 0);
  ASSERT_EQ_INT(o.status, WDS_OK);
  ASSERT_TRUE(o.st.deferred_fields > 0);
  ASSERT_TRUE(ref.len == o.len && memcmp(ref.b, o.b, ref.len) == 0);
  out_free(&ref);
  out_free(&o);
}

/* A shard rewritten in place with the same size between scan and read
 * (same inode, same size, other bytes): the deferred read is an error
 * naming the shard, sample, field and offset and saying the file changed,
 * never the new file's bytes under the old one's keys and labels; under skip
 * the shard's deferred rows are invalid and the other shard's arrive. A touch
 * (a new mtime, the bytes unchanged) cannot be told from such a rewrite by
 * anything but the bytes, so it is refused the same way. */
TEST(a_shard_rewritten_in_place_or_touched_before_the_read) {
  static shardset s2;
  ASSERT_EQ_INT(make_set(&s2, "rewrite", 2, 20), 0);
  wds_loader_config c = cfg_of(&s2);
  c.shuffle_buffer = 100;
  c.shard_shuffle = 0;
  c.defer_reads = WDS_DEFER_ON;
  wds__defer_read_hook = defer_hook;
  hook_path = s2.paths[0];
  const int actions[] = {4, 3};
  for (int a = 0; a < 2; a++) {
    out o;
    ASSERT_EQ_INT(write_shard(s2.paths[0], 0, 20), 0);
    hook_action = actions[a];
    hook_calls = 0;
    c.on_error = WDS_ON_ERROR_STOP;
    run_cfg(&c, 1, &o);
    ASSERT_TRUE(hook_calls > 0);
    printf("  %s: %s\n", a == 0 ? "rewritten" : "touched", o.err);
    ASSERT_EQ_INT(o.status, WDS_ERR_IO);
    ASSERT_CONTAINS(o.err, s2.paths[0]);
    ASSERT_CONTAINS(o.err, "sample \"");
    ASSERT_CONTAINS(o.err, "field '");
    ASSERT_CONTAINS(o.err, "at offset ");
    ASSERT_CONTAINS(o.err, "changed");
    out_free(&o);
    ASSERT_EQ_INT(write_shard(s2.paths[0], 0, 20), 0);
    hook_calls = 0;
    c.on_error = WDS_ON_ERROR_SKIP;
    run_cfg(&c, 1, &o);
    ASSERT_EQ_INT(o.status, WDS_OK);
    ASSERT_EQ_U64(o.rows, 40);
    ASSERT_EQ_U64(o.invalid, 20); /* every deferred read of shard 0 fails */
    out_free(&o);
  }
  hook_path = NULL;
  wds__defer_read_hook = NULL;
}

/* A cached remote shard hit again (by another worker or process: the
 * cache marks use with a new mtime) between scan and read: the deferred
 * reads succeed, the output is the one without deferral. Cache entries
 * are linked whole and replaced by rename, never written in place, so
 * their mtime is not compared (their size still is). The entry is put in
 * the cache by hand for an http URL that is never contacted. */
TEST(a_cached_shard_hit_again_before_the_read) {
  static shardset s2;
  ASSERT_EQ_INT(make_set(&s2, "cachehit", 2, 20), 0);
  char dir[300], entries[2][400];
  const char *urls[2] = {"http://127.0.0.1:9/cachehit-000.tar",
                         "http://127.0.0.1:9/cachehit-001.tar"};
  snprintf(dir, sizeof dir, "%s/cache", tmpdir);
  ASSERT_EQ_INT(mkdir(dir, 0755), 0);
  for (int k = 0; k < 2; k++) {
    char *name = wds__cache_entry_name(urls[k]);
    ASSERT_TRUE(name != NULL);
    snprintf(entries[k], sizeof entries[k], "%s/%s", dir, name);
    free(name);
    ASSERT_EQ_INT(rename(s2.paths[k], entries[k]), 0);
  }
  wds_loader_config c = cfg_of(&s2);
  c.urls = urls;
  c.cache_dir = dir;
  c.shuffle_buffer = 100;
  c.defer_reads = WDS_DEFER_OFF;
  out ref, o;
  run_cfg(&c, 1, &ref);
  if (ref.status != WDS_OK)
    printf("  reference: %s\n", ref.err);
  ASSERT_EQ_INT(ref.status, WDS_OK);
  c.defer_reads = WDS_DEFER_ON;
  wds__defer_read_hook = defer_hook;
  hook_path = entries[0];
  hook_action = 5;
  hook_calls = 0;
  run_cfg(&c, 1, &o);
  hook_path = NULL;
  wds__defer_read_hook = NULL;
  ASSERT_TRUE(hook_calls > 0);
  if (o.status != WDS_OK)
    printf("  cache hit: %s\n", o.err);
  ASSERT_EQ_INT(o.status, WDS_OK);
  ASSERT_TRUE(o.st.deferred_fields > 0);
  ASSERT_TRUE(ref.len == o.len && memcmp(ref.b, o.b, ref.len) == 0);
  out_free(&ref);
  out_free(&o);
}

/* A low RLIMIT_NOFILE: the descriptors held for deferred reads stay
 * within one per-process budget (a quarter of the soft limit) shared by
 * all workers, so many shards and several workers still open every shard;
 * the batches are the same as without deferral. */
TEST(held_descriptors_stay_within_the_fd_limit) {
  static shardset many;
  ASSERT_EQ_INT(make_set(&many, "nofile", 120, 2), 0);
  struct rlimit old;
  ASSERT_EQ_INT(getrlimit(RLIMIT_NOFILE, &old), 0);
  int fds0 = open_fds();
  struct rlimit low = old;
  low.rlim_cur = (rlim_t)(fds0 + 56);
  if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < low.rlim_cur)
    low.rlim_cur = old.rlim_cur;
  ASSERT_EQ_INT(setrlimit(RLIMIT_NOFILE, &low), 0);
  wds_loader_config c = cfg_of(&many);
  c.shuffle_buffer = 1000;
  c.batch_size = 16;
  c.workers = 4;
  int ok = same_all_ways(c, 1, "low RLIMIT_NOFILE, 4 workers");
  c.workers = 6;
  ok = ok && same_all_ways(c, 1, "low RLIMIT_NOFILE, 6 workers");
  ASSERT_EQ_INT(setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_TRUE(ok);
  ASSERT_EQ_INT(open_fds(), fds0);
}

/* AUTO's page-cache bitmap lives only while the feed reads its shard:
 * when the first deferred read comes, every shard was scanned (the buffer
 * holds them all) and their fields wait, but at most one shard's bitmap
 * (one bit a page) is still held; none after close. */
TEST(auto_keeps_one_bitmap_while_fields_wait) {
  wds_loader_config c = cfg_of(&set6);
  c.shuffle_buffer = 1000;
  c.defer_reads = WDS_DEFER_AUTO;
  struct stat st;
  ASSERT_EQ_INT(stat(set6.paths[0], &st), 0);
  size_t one = ((size_t)st.st_size / 4096 + 64) / 8 + 8;
  wds__defer_read_hook = defer_hook;
  hook_path = set6.paths[0];
  hook_action = 0;
  hook_calls = 0;
  hook_res_bytes = (size_t)-1;
  out o;
  run_cfg(&c, 1, &o);
  hook_path = NULL;
  wds__defer_read_hook = NULL;
  ASSERT_EQ_INT(o.status, WDS_OK);
  ASSERT_TRUE(hook_calls > 0);
  printf("  %llu fields deferred; bitmaps held at the first read: %zu bytes "
         "(one shard's: up to %zu)\n",
         (unsigned long long)o.st.deferred_fields, hook_res_bytes, one);
  ASSERT_TRUE(o.st.deferred_fields > 0);
  ASSERT_TRUE(hook_res_bytes <= one);
  ASSERT_EQ_U64(atomic_load(&wds__fh_res_bytes), 0);
  out_free(&o);
}

/* AUTO defers only fields whose pages were in the page cache when the
 * shard was opened: a fresh file with its pages dropped (posix_fadvise
 * DONTNEED after fsync) is read in the stream; that read caches the fields
 * it read (not the unwanted .big ones it seeked over), so the next run
 * defers them. */
TEST(auto_reads_an_uncached_file_in_the_stream) {
  static shardset s1;
  ASSERT_EQ_INT(make_set(&s1, "cold", 1, 40), 0); /* ~8 MB */
  int fd = open(s1.paths[0], O_RDONLY);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ_INT(file_resident(fd), 1);
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  int resident = file_resident(fd);
  close(fd);
  if (resident)
    SKIP("the kernel kept the file's pages after DONTNEED; the uncached case "
         "is not checked");
  wds_loader_config c = cfg_of(&s1);
  c.shuffle_buffer = 100;
  out o;
  run_cfg(&c, 1, &o); /* AUTO */
  ASSERT_EQ_INT(o.status, WDS_OK);
  ASSERT_EQ_U64(o.rows, 40);
  /* At most the fields the first reads (and the kernel's read-ahead)
   * brought in before the shard's first large field. */
  uint64_t cold = o.st.deferred_fields;
  out_free(&o);
  run_cfg(&c, 1, &o); /* what was read is cached now */
  ASSERT_EQ_INT(o.status, WDS_OK);
  uint64_t warm = o.st.deferred_fields;
  out_free(&o);
  c.defer_reads = WDS_DEFER_ON;
  run_cfg(&c, 1, &o);
  ASSERT_EQ_INT(o.status, WDS_OK);
  printf("  AUTO uncached: %llu deferred; AUTO cached: %llu; ON: %llu\n",
         (unsigned long long)cold, (unsigned long long)warm,
         (unsigned long long)o.st.deferred_fields);
  ASSERT_TRUE(cold <= 4);
  ASSERT_EQ_U64(warm, o.st.deferred_fields);
  ASSERT_TRUE(warm > 40);
  out_free(&o);
}

/* Compressed shards and pipes are never deferred; ON changes nothing. */
TEST(only_plain_local_files_are_deferred) {
  static shardset s1;
  ASSERT_EQ_INT(make_set(&s1, "pipe", 1, 10), 0);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "pipe:cat %s", s1.paths[0]);
  const char *urls[1] = {cmd};
  wds_loader_config c = cfg_of(&s1);
  c.urls = urls;
  c.defer_reads = WDS_DEFER_ON;
  out o;
  run_cfg(&c, 1, &o);
  ASSERT_EQ_INT(o.status, WDS_OK);
  ASSERT_EQ_U64(o.rows, 10);
  ASSERT_EQ_U64(o.st.deferred_fields, 0);
  out_free(&o);
  c.defer_reads = (wds_defer_reads)7;
  wds_loader *l;
  ASSERT_TRUE(wds_loader_open(&c, &l) != WDS_OK);
  ASSERT_CONTAINS(wds_last_error(), "defer_reads");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-defer-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  if (make_set(&set6, "six", 6, 20) != 0) {
    printf("cannot write the fixtures\n");
    return 1;
  }
  RUN(reference_rows_are_right);
  RUN(same_batches_in_every_mode);
  RUN(same_batches_with_resume_and_eager_next_epoch);
  RUN(more_shards_than_the_handle_cap);
  RUN(a_shard_truncated_before_the_read);
  RUN(a_shard_truncated_before_the_copy);
  RUN(a_shard_replaced_before_the_read);
  RUN(a_shard_rewritten_in_place_or_touched_before_the_read);
  RUN(a_cached_shard_hit_again_before_the_read);
  RUN(held_descriptors_stay_within_the_fd_limit);
  RUN(auto_keeps_one_bitmap_while_fields_wait);
  RUN(auto_reads_an_uncached_file_in_the_stream);
  RUN(only_plain_local_files_are_deferred);
  test_remove_tree(tmpdir);
  return test_summary();
}
