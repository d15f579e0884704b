/* test_cache.c — the local shard cache's parts without a server:
 * SHA-256, entry names, filling (commit, abort, short or over-long
 * entries), LRU eviction (open entries and the new one kept), stale
 * temporary files, a cache that cannot be written, and threads filling one
 * entry at once. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shards/cache.h"
#include "test.h"

static char root[256];

static void make_root(void) {
  const char *t = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/wds-test-cache.XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    exit(1);
  }
}

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
      rm_tree(p);
    else
      unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* A fresh directory under root. */
static void sub(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", root, name);
  rm_tree(out);
}

/* Files in dir other than "." and "..", and ".lock" unless lock. */
static int count_files(const char *dir, int lock) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (!lock && strcmp(e->d_name, ".lock") == 0)
      continue;
    n++;
  }
  closedir(d);
  return n;
}

static int entry_exists(const char *dir, const char *url) {
  char *name = wds__cache_entry_name(url);
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  free(name);
  return access(p, F_OK) == 0;
}

/* Fills url with n bytes of pattern c, committed. */
static void fill(const wds__cache_cfg *c, const char *url, size_t n, char ch) {
  wds__cache_fill *f = wds__cache_fill_begin(c, url);
  if (!f)
    return;
  char buf[4096];
  memset(buf, ch, sizeof buf);
  size_t left = n;
  while (left) {
    size_t k = left < sizeof buf ? left : sizeof buf;
    wds__cache_fill_write(f, buf, k);
    left -= k;
  }
  wds__cache_fill_commit(f, n, 1, n);
}

static void hex(const uint8_t *d, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

TEST(sha256_matches_the_standard_vectors) {
  uint8_t d[32];
  char h[65];
  wds__sha256("", 0, d);
  hex(d, 32, h);
  ASSERT_STREQ(
      h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  wds__sha256("abc", 3, d);
  hex(d, 32, h);
  ASSERT_STREQ(
      h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  /* 56 bytes: the padding needs a second block. */
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  wds__sha256(m, strlen(m), d);
  hex(d, 32, h);
  ASSERT_STREQ(
      h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* A million 'a's: many blocks. */
  char *a = malloc(1000000);
  ASSERT_TRUE(a != NULL);
  memset(a, 'a', 1000000);
  wds__sha256(a, 1000000, d);
  free(a);
  hex(d, 32, h);
  ASSERT_STREQ(
      h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* wds__sha256_hex, the digests `wds index --hashes` writes and `wds ls
 * --json` prints (one function for both), and wds__hex. */
TEST(sha256_hex_is_the_digest_in_lower_case) {
  char h[65];
  memset(h, 'x', sizeof h);
  wds__sha256_hex("abc", 3, h);
  ASSERT_STREQ(
      h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const uint8_t b[3] = {0x00, 0xab, 0xf0};
  char x[7];
  memset(x, 'x', sizeof x);
  wds__hex(b, 3, x);
  ASSERT_STREQ(x, "00abf0");
  wds__hex(b, 0, x);
  ASSERT_STREQ(x, "");
}

TEST(entry_names_hash_the_shard_identity) {
  char *a = wds__cache_entry_name("http://Example.COM:80/data/shard-000.tar");
  char *b = wds__cache_entry_name("HTTP://example.com/data/shard-000.tar#x");
  char *c = wds__cache_entry_name("http://example.com/data/Shard-000.tar");
  char *d = wds__cache_entry_name("https://example.com:443/a%20b.tar?sig=1");
  char *e = wds__cache_entry_name("https://example.com/a%20b.tar");
  char *f = wds__cache_entry_name("http://example.com:8080/data/shard-000.tar");
  char *g = wds__cache_entry_name("s3://bucket/");
  ASSERT_TRUE(a && b && c && d && e && f && g);
  ASSERT_STREQ(a, b);             /* scheme and host case, :80, #fragment */
  ASSERT_TRUE(strcmp(a, c) != 0); /* the path's case counts */
  ASSERT_TRUE(strcmp(a, f) != 0); /* another port */
  ASSERT_TRUE(strcmp(d, e) != 0); /* the query counts */
  ASSERT_EQ_INT(strlen(a), 32 + 1 + strlen("shard-000.tar"));
  ASSERT_STREQ(a + 32, "-shard-000.tar");
  ASSERT_STREQ(d + 32, "-a_20b.tar"); /* query dropped, '%' replaced */
  ASSERT_STREQ(g + 32, "-shard");
  /* No path: the suffix is not the authority (it may hold a password). */
  char *u = wds__cache_entry_name("http://user:secret@example.com");
  ASSERT_TRUE(u && !strstr(u, "secret") && !strstr(u, "user"));
  ASSERT_STREQ(u + 32, "-shard");
  free(u);
  /* The index's identity: dot segments, percent-encoding, S3 https. */
  char *h =
      wds__cache_entry_name("http://example.com/x/../data/./shard-000.tar");
  char *pe = wds__cache_entry_name("http://example.com/data/shard%2D000.tar");
  char *j = wds__cache_entry_name("https://bucket.s3.amazonaws.com/k/s.tar");
  char *k = wds__cache_entry_name("s3://bucket/k/s.tar");
  ASSERT_TRUE(h && pe && j && k);
  ASSERT_STREQ(h, a);
  ASSERT_STREQ(pe, a);
  ASSERT_STREQ(j, k);
  free(h);
  free(pe);
  free(j);
  free(k);
  for (int i = 0; i < 32; i++)
    ASSERT_TRUE((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f'));
  free(a);
  free(b);
  free(c);
  free(d);
  free(e);
  free(f);
  free(g);
  char longurl[400] = "http://h/";
  memset(longurl + 9, 'x', 300);
  longurl[309] = '\0';
  char *l = wds__cache_entry_name(longurl);
  ASSERT_EQ_INT(strlen(l), 32 + 1 + 80);
  free(l);
}

TEST(only_remote_urls_are_cached) {
  ASSERT_TRUE(wds__cache_is_remote("http://h/a.tar"));
  ASSERT_TRUE(wds__cache_is_remote("https://h/a.tar"));
  ASSERT_TRUE(wds__cache_is_remote("s3://b/a.tar"));
  ASSERT_TRUE(!wds__cache_is_remote("file:///tmp/a.tar"));
  ASSERT_TRUE(!wds__cache_is_remote("/tmp/a.tar"));
  ASSERT_TRUE(!wds__cache_is_remote("a.tar"));
  ASSERT_TRUE(!wds__cache_is_remote("pipe:cat a.tar"));
  ASSERT_TRUE(!wds__cache_is_remote("-"));
}

TEST(a_committed_entry_is_found_and_an_abandoned_one_is_not) {
  char dir[512];
  sub(dir, sizeof dir, "basic/new"); /* created, with its parent */
  wds__cache_stats st = {0};
  wds__cache_cfg c = {.dir = dir, .size = 0, .stats = &st};
  const char *url = "http://h/x/a.tar";
  char *name = NULL;
  ASSERT_EQ_INT(wds__cache_open(&c, url, &name), -1);
  ASSERT_TRUE(name == NULL);
  wds__cache_fill *f = wds__cache_fill_begin(&c, url);
  ASSERT_TRUE(f != NULL);
  wds__cache_fill_write(f, "hello ", 6);
  wds__cache_fill_write(f, "world", 5);
  ASSERT_EQ_INT(count_files(dir, 0), 0); /* nothing named while written */
  wds__cache_fill_commit(f, 11, 1, 11);
  ASSERT_EQ_INT(count_files(dir, 0), 1);
  ASSERT_EQ_U64(atomic_load(&st.stored), 1);
  int fd = wds__cache_open(&c, url, &name);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ_INT(wds__cache_open_count(), 1);
  char buf[32] = {0};
  ASSERT_EQ_INT(read(fd, buf, sizeof buf), 11);
  ASSERT_STREQ(buf, "hello world");
  struct stat sb;
  ASSERT_EQ_INT(fstat(fd, &sb), 0);
  ASSERT_EQ_INT(sb.st_mode & 0777, 0644);
  close(fd);
  wds__cache_release(name);
  ASSERT_EQ_INT(wds__cache_open_count(), 0);
  ASSERT_EQ_U64(atomic_load(&st.hits), 1);

  /* Abandoned (a cut, an error, a reader that stopped): nothing. */
  f = wds__cache_fill_begin(&c, "http://h/x/b.tar");
  ASSERT_TRUE(f != NULL);
  wds__cache_fill_write(f, "partial", 7);
  wds__cache_fill_abort(f);
  /* Ended, but shorter than the server announced. */
  f = wds__cache_fill_begin(&c, "http://h/x/c.tar");
  wds__cache_fill_write(f, "short", 5);
  wds__cache_fill_commit(f, 5, 1, 9);
  /* The length given at the end disagrees with what was written. */
  f = wds__cache_fill_begin(&c, "http://h/x/d.tar");
  wds__cache_fill_write(f, "abc", 3);
  wds__cache_fill_commit(f, 4, 0, 0);
  ASSERT_EQ_INT(count_files(dir, 0), 1);
  ASSERT_TRUE(!entry_exists(dir, "http://h/x/b.tar"));
  ASSERT_TRUE(!entry_exists(dir, "http://h/x/c.tar"));
  ASSERT_TRUE(!entry_exists(dir, "http://h/x/d.tar"));
  ASSERT_EQ_U64(atomic_load(&st.errors), 0);
  wds__cache_fill_abort(NULL);
}

/* Descriptors of this process open on files in dir (an O_TMPFILE file
 * shows as "DIR/#INODE (deleted)"), or -1 without /proc. */
static int fds_in(const char *dir) {
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  int n = 0;
  size_t dl = strlen(dir);
  struct dirent *e;
  char p[300], target[1024];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(p, target, sizeof target - 1);
    if (k <= 0)
      continue;
    target[k] = '\0';
    n += strncmp(target, dir, dl) == 0 && target[dl] == '/';
  }
  closedir(d);
  return n;
}

/* --cache-size is enforced while the shard is written: a fill that passes
 * it is abandoned at once (its temporary file's space given back, no
 * error: the shard reads on uncached); one that fits it exactly is kept. */
TEST(a_fill_larger_than_the_limit_is_dropped_while_written) {
  char dir[512];
  sub(dir, sizeof dir, "limit");
  wds__cache_stats st = {0};
  wds__cache_cfg c = {.dir = dir, .size = 10, .stats = &st};
  wds__cache_fill *f = wds__cache_fill_begin(&c, "http://h/big.tar");
  ASSERT_TRUE(f != NULL);
  int before = fds_in(dir);
  wds__cache_fill_write(f, "0123456", 7);
  if (before >= 0)
    ASSERT_EQ_INT(fds_in(dir), before);
  wds__cache_fill_write(f, "789a", 4); /* 11 > 10: dropped now */
  if (before >= 0) {
    printf("  descriptors on the cache: %d, then %d\n", before, fds_in(dir));
    ASSERT_TRUE(before >= 1);
    ASSERT_EQ_INT(fds_in(dir), before - 1);
  }
  ASSERT_EQ_INT(count_files(dir, 0), 0);
  wds__cache_fill_write(f, "b", 1); /* ignored */
  wds__cache_fill_commit(f, 12, 1, 12);
  ASSERT_TRUE(!entry_exists(dir, "http://h/big.tar"));
  ASSERT_EQ_INT(count_files(dir, 0), 0);
  ASSERT_EQ_U64(atomic_load(&st.stored), 0);
  ASSERT_EQ_U64(atomic_load(&st.errors), 0);
  /* Exactly the limit fits. */
  f = wds__cache_fill_begin(&c, "http://h/fits.tar");
  ASSERT_TRUE(f != NULL);
  wds__cache_fill_write(f, "01234", 5);
  wds__cache_fill_write(f, "56789", 5);
  wds__cache_fill_commit(f, 10, 1, 10);
  ASSERT_TRUE(entry_exists(dir, "http://h/fits.tar"));
  ASSERT_EQ_U64(atomic_load(&st.stored), 1);
  /* An end the source could not verify: not kept, reported once. */
  f = wds__cache_fill_begin(&c, "http://h/unsure.tar");
  ASSERT_TRUE(f != NULL);
  wds__cache_fill_write(f, "abc", 3);
  wds__cache_fill_unverified(f);
  ASSERT_TRUE(!entry_exists(dir, "http://h/unsure.tar"));
  ASSERT_EQ_U64(atomic_load(&st.errors), 1);
  wds__cache_fill_unverified(NULL);
  if (before >= 0)
    ASSERT_EQ_INT(fds_in(dir), 0);
}

static void set_mtime(const char *dir, const char *url, time_t t) {
  char *name = wds__cache_entry_name(url);
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  free(name);
  struct timespec ts[2] = {{t, 0}, {t, 0}};
  utimensat(AT_FDCWD, p, ts, 0);
}

TEST(eviction_deletes_the_least_recently_used_first) {
  char dir[512];
  sub(dir, sizeof dir, "lru");
  wds__cache_stats st = {0};
  wds__cache_cfg unlimited = {.dir = dir, .size = 0, .stats = &st};
  const char *u[4] = {"http://h/0.tar", "http://h/1.tar", "http://h/2.tar",
                      "http://h/3.tar"};
  for (int i = 0; i < 3; i++)
    fill(&unlimited, u[i], 1000, (char)('a' + i));
  time_t now = time(NULL);
  set_mtime(dir, u[0], now - 300); /* the oldest... */
  set_mtime(dir, u[1], now - 200);
  set_mtime(dir, u[2], now - 100);
  /* ...but opened now: used most recently. */
  char *name = NULL;
  int fd = wds__cache_open(&unlimited, u[0], &name);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  wds__cache_release(name);
  /* A fourth entry with room for three: 1 goes (least recently used). */
  wds__cache_cfg c = {.dir = dir, .size = 3500, .stats = &st};
  fill(&c, u[3], 1000, 'd');
  ASSERT_TRUE(entry_exists(dir, u[0]));
  ASSERT_TRUE(!entry_exists(dir, u[1]));
  ASSERT_TRUE(entry_exists(dir, u[2]));
  ASSERT_TRUE(entry_exists(dir, u[3]));
  ASSERT_EQ_U64(atomic_load(&st.evicted), 1);

  /* An entry open in this process is kept; the next oldest goes. */
  set_mtime(dir, u[0], now - 50);
  set_mtime(dir, u[2], now - 40);
  set_mtime(dir, u[3], now - 30);
  fd = wds__cache_open(&unlimited, u[0], &name); /* touches it: newest */
  ASSERT_TRUE(fd >= 0);
  set_mtime(dir, u[0], now - 60); /* the oldest again, but open */
  ASSERT_EQ_INT(wds__cache_evict(dir, 2000, NULL, &st), 1);
  ASSERT_TRUE(entry_exists(dir, u[0]));
  ASSERT_TRUE(!entry_exists(dir, u[2]));
  ASSERT_TRUE(entry_exists(dir, u[3]));
  close(fd);
  wds__cache_release(name);
  /* `keep` (the entry just written) is kept even when it is the oldest. */
  char *keep = wds__cache_entry_name(u[0]);
  ASSERT_EQ_INT(wds__cache_evict(dir, 1000, keep, &st), 1);
  free(keep);
  ASSERT_EQ_INT(count_files(dir, 0), 1);
  ASSERT_TRUE(entry_exists(dir, u[0]));
  ASSERT_TRUE(!entry_exists(dir, u[3]));

  /* An entry larger than the whole cache is not kept. */
  fill(&c, "http://h/huge.tar", 5000, 'h');
  ASSERT_TRUE(!entry_exists(dir, "http://h/huge.tar"));
  ASSERT_TRUE(entry_exists(dir, u[0]));
}

TEST(stale_temporary_files_are_deleted_unless_locked) {
  char dir[512], p1[600], p2[600], p3[600];
  sub(dir, sizeof dir, "stale");
  ASSERT_EQ_INT(mkdir(dir, 0777), 0);
  snprintf(p1, sizeof p1, "%s/.tmp-dead.1.1", dir);
  snprintf(p2, sizeof p2, "%s/.tmp-live.1.2", dir);
  snprintf(p3, sizeof p3, "%s/.tmp-young.1.3", dir);
  int f1 = open(p1, O_CREAT | O_WRONLY, 0644);
  int f2 = open(p2, O_CREAT | O_WRONLY, 0644);
  int f3 = open(p3, O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(f1 >= 0 && f2 >= 0 && f3 >= 0);
  close(f1);
  close(f3);
  ASSERT_EQ_INT(flock(f2, LOCK_EX), 0); /* a writer still at work */
  time_t old = time(NULL) - 3600;
  struct timespec ts[2] = {{old, 0}, {old, 0}};
  utimensat(AT_FDCWD, p1, ts, 0);
  utimensat(AT_FDCWD, p2, ts, 0);
  /* The flock is per open file: another open of it, as another process
   * would, must see the lock. */
  wds__cache_evict(dir, 0, NULL, NULL);
  ASSERT_TRUE(access(p1, F_OK) != 0); /* dead and old: gone */
  ASSERT_TRUE(access(p2, F_OK) == 0); /* locked: kept */
  ASSERT_TRUE(access(p3, F_OK) == 0); /* just made: kept */
  close(f2);
}

static int warned;
static char warning[512];
static void on_warn(void *ctx, const char *msg) {
  (void)ctx;
  warned++;
  snprintf(warning, sizeof warning, "%s", msg);
}

TEST(a_cache_that_cannot_be_written_is_counted_and_reported_once) {
  char path[512];
  sub(path, sizeof path, "afile");
  int fd = open(path, O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/sub", path); /* below a regular file */
  wds__cache_stats st = {0};
  st.warn = on_warn;
  warned = 0;
  wds__cache_cfg c = {.dir = dir, .size = 0, .stats = &st};
  ASSERT_TRUE(wds__cache_fill_begin(&c, "http://h/a.tar") == NULL);
  ASSERT_TRUE(wds__cache_fill_begin(&c, "http://h/b.tar") == NULL);
  ASSERT_EQ_U64(atomic_load(&st.errors), 2);
  ASSERT_EQ_INT(warned, 1);
  ASSERT_CONTAINS(warning, dir);
  ASSERT_CONTAINS(warning, "without the cache");
  char *name = NULL;
  ASSERT_EQ_INT(wds__cache_open(&c, "http://h/a.tar", &name), -1);
}

/* Threads filling the same URL at once: each writes its own file; the last
 * rename wins; the entry is whole. */
typedef struct filler {
  const wds__cache_cfg *c;
  char ch;
} filler;

static void *fill_thread(void *p) {
  filler *f = p;
  for (int i = 0; i < 20; i++)
    fill(f->c, "http://h/same.tar", 300000, 'z');
  (void)f->ch;
  return NULL;
}

TEST(threads_filling_one_entry_at_once_leave_it_whole) {
  char dir[512];
  sub(dir, sizeof dir, "race");
  wds__cache_stats st = {0};
  wds__cache_cfg c = {.dir = dir, .size = 400000, .stats = &st};
  pthread_t t[4];
  filler f[4];
  for (int i = 0; i < 4; i++) {
    f[i] = (filler){&c, (char)('a' + i)};
    ASSERT_EQ_INT(pthread_create(&t[i], NULL, fill_thread, &f[i]), 0);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  ASSERT_EQ_U64(atomic_load(&st.stored), 80);
  ASSERT_EQ_U64(atomic_load(&st.errors), 0);
  ASSERT_EQ_INT(count_files(dir, 0), 1); /* no temporary file left */
  char *name = NULL;
  int fd = wds__cache_open(&c, "http://h/same.tar", &name);
  ASSERT_TRUE(fd >= 0);
  struct stat sb;
  fstat(fd, &sb);
  ASSERT_EQ_U64(sb.st_size, 300000);
  char buf[4096];
  ssize_t n;
  int all_z = 1;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++)
      all_z &= buf[i] == 'z';
  close(fd);
  wds__cache_release(name);
  ASSERT_TRUE(all_z);
}

int main(void) {
  make_root();
  RUN(sha256_matches_the_standard_vectors);
  RUN(sha256_hex_is_the_digest_in_lower_case);
  RUN(entry_names_hash_the_shard_identity);
  RUN(only_remote_urls_are_cached);
  RUN(a_committed_entry_is_found_and_an_abandoned_one_is_not);
  RUN(a_fill_larger_than_the_limit_is_dropped_while_written);
  RUN(eviction_deletes_the_least_recently_used_first);
  RUN(stale_temporary_files_are_deleted_unless_locked);
  RUN(a_cache_that_cannot_be_written_is_counted_and_reported_once);
  RUN(threads_filling_one_entry_at_once_leave_it_whole);
  rm_tree(root);
  return test_summary();
}
