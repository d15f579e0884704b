/* test_writer.c — the public shard writer (wds/writer.h), through its API
 * only. Shards are written into a temporary directory and read back by the
 * public reader (every byte compared) and by GNU tar, zstd and gzip; shard
 * boundaries are checked against the greedy rule the header states
 * (computed here from tar's block arithmetic); errors are provoked with bad
 * keys, /dev/full and RLIMIT_FSIZE. Durability is observed through fsync,
 * defined here in place of libc's; special files (a FIFO, a private
 * character device made with mknod, never /dev/null itself) must be
 * written in place, never renamed over. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_files.h"
#include "wds/loader.h" /* wds_npy_save */
#include "wds/reader.h"
#include "wds/writer.h"

static char tmpdir[256];

/* ---- helpers ---- */

static int same_files(const char *a, const char *b) {
  size_t la, lb;
  uint8_t *da = test_read_file(a, &la), *db = test_read_file(b, &lb);
  int same = da && db && la == lb && memcmp(da, db, la) == 0;
  free(da);
  free(db);
  return same;
}

static uint64_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_size : UINT64_MAX;
}

/* Whether name is a pattern's lock file (".NAME.lock", wds/writer.h),
 * which is there while a writer of the pattern is open. */
static int is_lock_file(const char *name) {
  size_t n = strlen(name);
  return name[0] == '.' && n > 6 && strcmp(name + n - 5, ".lock") == 0;
}

/* Number of entries in dir but a writer's lock file; with tmp_count, the
 * number of "*.tmp-*". */
static int dir_entries(const char *dir, int *tmp_count) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  if (tmp_count)
    *tmp_count = 0;
  if (!d)
    return -1;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        is_lock_file(e->d_name))
      continue;
    n++;
    if (tmp_count && strstr(e->d_name, ".tmp-"))
      (*tmp_count)++;
  }
  closedir(d);
  return n;
}

/* A fresh, empty subdirectory of tmpdir. */
static void fresh_dir(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", tmpdir, name);
  test_remove_tree(out);
  mkdir(out, 0755);
}

static int have_command(const char *name) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
  return system(cmd) == 0;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* ---- the sample set ---- */

enum { NSAMPLES = 40, MAXF = 3 };

typedef struct tsample {
  char key[64];
  int nf;
  char ext[MAXF][16];
  uint8_t *data[MAXF];
  size_t size[MAXF];
} tsample;

static tsample samples[NSAMPLES];

/* Fields deliberately out of order (the writer sorts them); sizes from 0 to
 * 40000, some exactly 512; keys nested in directories. */
static void make_samples(void) {
  static const char *exts[] = {"jpg", "cls", "seg.png"};
  for (int i = 0; i < NSAMPLES; i++) {
    tsample *s = &samples[i];
    snprintf(s->key, sizeof s->key, "%s/s%04d", i % 2 ? "odd" : "even.dir", i);
    s->nf = 1 + i % MAXF;
    for (int j = 0; j < s->nf; j++) {
      snprintf(s->ext[j], sizeof s->ext[j], "%s", exts[j]);
      s->size[j] = i % 7 == 0 ? 512 : (size_t)(next_rand() % 40000);
      if (i == 3)
        s->size[j] = 0;
      s->data[j] = malloc(s->size[j] + 1);
      for (size_t k = 0; k < s->size[j]; k++)
        s->data[j][k] = (uint8_t)next_rand();
    }
  }
}

static void free_samples(void) {
  for (int i = 0; i < NSAMPLES; i++)
    for (int j = 0; j < samples[i].nf; j++)
      free(samples[i].data[j]);
}

static int write_sample(wds_writer *w, const tsample *s) {
  wds_writer_field f[MAXF];
  for (int j = 0; j < s->nf; j++) {
    f[j].ext = s->ext[j];
    f[j].data = s->data[j];
    f[j].size_bytes = s->size[j];
  }
  return wds_writer_write_sample(w, s->key, f, (size_t)s->nf);
}

typedef struct shard_log {
  int calls;
  char path[16][512];
  uint64_t samples[16], bytes[16];
} shard_log;

static void on_shard(void *ctx, const char *path, uint64_t n, uint64_t bytes) {
  shard_log *l = ctx;
  if (l->calls < 16) {
    snprintf(l->path[l->calls], sizeof l->path[0], "%s", path ? path : "");
    l->samples[l->calls] = n;
    l->bytes[l->calls] = bytes;
  }
  l->calls++;
}

/* Writes samples [0, n) with cfg; WDS_OK or the failing status. */
static int write_all(wds_writer_config *cfg, int n) {
  wds_writer *w;
  int rc = wds_writer_open(cfg, &w);
  if (rc != WDS_OK) {
    printf("  open: %s\n", wds_last_error());
    return rc;
  }
  for (int i = 0; rc == WDS_OK && i < n; i++)
    rc = write_sample(w, &samples[i]);
  if (rc != WDS_OK)
    printf("  write: %s\n", wds_last_error());
  int crc = wds_writer_close(w);
  return rc != WDS_OK ? rc : crc;
}

/* Reads spec with the public reader and compares with samples [first,
 * first + n): keys, extensions in sorted order, every byte. */
static int check_read(const char *spec, int first, int n) {
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.spec = spec;
  wds_reader *r;
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    printf("  reader open: %s\n", wds_last_error());
    return 0;
  }
  const wds_sample *s;
  int rc, i = first, ok = 1;
  while (ok && (rc = wds_reader_next(r, &s)) == WDS_OK) {
    if (i >= first + n) {
      printf("  extra sample %s\n", s->key);
      ok = 0;
      break;
    }
    const tsample *t = &samples[i];
    if (strcmp(s->key, t->key) != 0 || s->field_count != (size_t)t->nf) {
      printf("  sample %d: key %s (%zu fields), expected %s (%d)\n", i, s->key,
             s->field_count, t->key, t->nf);
      ok = 0;
      break;
    }
    const char *prev = "";
    for (size_t j = 0; j < s->field_count; j++) {
      const wds_field *f = &s->fields[j];
      if (strcmp(prev, f->ext) >= 0) {
        printf("  sample %d: fields not sorted (%s after %s)\n", i, f->ext,
               prev);
        ok = 0;
      }
      prev = f->ext;
      int k = 0;
      while (k < t->nf && strcmp(t->ext[k], f->ext) != 0)
        k++;
      if (k == t->nf || f->size_bytes != t->size[k] ||
          (f->size_bytes && memcmp(f->data, t->data[k], f->size_bytes) != 0)) {
        printf("  sample %d field %s differs\n", i, f->ext);
        ok = 0;
      }
    }
    i++;
  }
  if (ok && rc != WDS_EOF) {
    printf("  reader: %s\n", wds_last_error());
    ok = 0;
  }
  if (ok && i != first + n) {
    printf("  read %d samples, expected %d\n", i - first, n);
    ok = 0;
  }
  wds_reader_close(r);
  return ok;
}

/* tar bytes of sample i: a 512-byte header per field (short names) and the
 * data padded to 512. */
static uint64_t sample_tar_bytes(int i) {
  uint64_t b = 0;
  for (int j = 0; j < samples[i].nf; j++)
    b += 512 + (samples[i].size[j] + 511) / 512 * 512;
  return b;
}

static uint64_t finished(uint64_t tar) {
  return (tar + 1024 + 10239) / 10240 * 10240;
}

/* ---- tests ---- */

TEST(round_trip_plain) {
  char dir[512], pat[600];
  fresh_dir(dir, sizeof dir, "rt");
  snprintf(pat, sizeof pat, "%s/one.tar", dir); /* no conversion: one file */
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 1);
  ASSERT_EQ_U64(file_size(pat) % 10240, 0);
  ASSERT_TRUE(check_read(pat, 0, NSAMPLES));
  /* GNU tar: mode 0444, owner 0/0, mtime 0 for every member. */
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "TZ=UTC tar --numeric-owner -tvf '%s' | grep -v "
           "'^-r--r--r-- 0/0 .* 1970-01-01 00:00 ' | grep -q .",
           pat);
  ASSERT_TRUE(system(cmd) != 0); /* no line without those fields */
}

TEST(max_count_start_index_and_on_shard) {
  char dir[512], pat[600], spec[700];
  fresh_dir(dir, sizeof dir, "mc");
  snprintf(pat, sizeof pat, "%s/s-%%04d.tar", dir);
  shard_log log = {0};
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  cfg.max_count = 15;
  cfg.start_index = 7;
  cfg.on_shard = on_shard;
  cfg.on_shard_ctx = &log;
  ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 3);
  ASSERT_EQ_INT(log.calls, 3);
  uint64_t expect[3] = {15, 15, 10};
  for (int i = 0; i < 3; i++) {
    char want[600];
    snprintf(want, sizeof want, "%s/s-%04d.tar", dir, 7 + i);
    ASSERT_STREQ(log.path[i], want);
    ASSERT_EQ_U64(log.samples[i], expect[i]);
    ASSERT_EQ_U64(log.bytes[i], file_size(want));
  }
  snprintf(spec, sizeof spec, "%s/s-{0007..0009}.tar", dir);
  ASSERT_TRUE(check_read(spec, 0, NSAMPLES));
  snprintf(spec, sizeof spec, "%s/s-0008.tar", dir);
  ASSERT_TRUE(check_read(spec, 15, 15));
}

/* A pattern without %d is one file: any number of samples without limits;
 * with max_count or max_size_bytes, the sample that would need a second
 * shard fails, naming the file and the limit, and nothing is left (not the
 * file, not its temporary). */
TEST(single_file_limits) {
  char dir[512], path[600];
  fresh_dir(dir, sizeof dir, "single");
  snprintf(path, sizeof path, "%s/one.tar", dir);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = path;
  ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
  ASSERT_TRUE(check_read(path, 0, NSAMPLES));
  ASSERT_EQ_INT(unlink(path), 0);

  for (int limit = 0; limit < 2; limit++) {
    cfg.max_count = limit == 0 ? 3 : 0;
    cfg.max_size_bytes = limit == 1 ? 60000 : 0;
    wds_writer *w;
    ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_OK);
    int rc = WDS_OK, i = 0;
    for (; rc == WDS_OK && i < NSAMPLES; i++)
      rc = write_sample(w, &samples[i]);
    char msg[1100];
    snprintf(msg, sizeof msg, "%s", wds_last_error());
    ASSERT_EQ_INT(rc, WDS_ERR_INVALID);
    if (limit == 0)
      ASSERT_EQ_INT(i, 4); /* the fourth sample */
    ASSERT_CONTAINS(msg, path);
    ASSERT_CONTAINS(msg, "has no %d");
    ASSERT_CONTAINS(msg, limit == 0 ? "past 3 samples" : "past 60000 bytes");
    ASSERT_EQ_INT(wds_writer_close(w), WDS_ERR_INVALID);
    ASSERT_EQ_INT(dir_entries(dir, NULL), 0);
  }
  /* Within the limits: one file. */
  cfg.max_count = NSAMPLES;
  cfg.max_size_bytes = 0;
  ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
  ASSERT_TRUE(check_read(path, 0, NSAMPLES));
  ASSERT_EQ_INT(dir_entries(dir, NULL), 1);
}

TEST(max_size_splits_greedily) {
  char dir[512], pat[600];
  fresh_dir(dir, sizeof dir, "ms");
  snprintf(pat, sizeof pat, "%s/m-%%02d.tar", dir);
  uint64_t max = 60000;
  /* The sample set has samples of up to 3 x 40000 bytes: some alone exceed
   * 60000 and must get a shard of their own. */
  shard_log log = {0};
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  cfg.max_size_bytes = max;
  cfg.on_shard = on_shard;
  cfg.on_shard_ctx = &log;
  ASSERT_EQ_INT(write_all(&cfg, 16), WDS_OK);
  /* The expected split, from the rule in writer.h. */
  int nshards = 0, alone = 0;
  uint64_t counts[16] = {0}, cur = 0, n = 0;
  for (int i = 0; i < 16; i++) {
    uint64_t b = sample_tar_bytes(i);
    if (n > 0 && finished(cur + b) > max) {
      counts[nshards++] = n;
      cur = n = 0;
    }
    cur += b;
    n++;
    if (n == 1 && finished(b) > max)
      alone++;
  }
  counts[nshards++] = n;
  ASSERT_TRUE(alone > 0);   /* the set does exercise the exception */
  ASSERT_TRUE(nshards > 3); /* and real splitting */
  ASSERT_EQ_INT(log.calls, nshards);
  int first = 0;
  for (int i = 0; i < nshards; i++) {
    ASSERT_EQ_U64(log.samples[i], counts[i]);
    uint64_t size = file_size(log.path[i]);
    ASSERT_TRUE(size <= max || log.samples[i] == 1);
    ASSERT_TRUE(check_read(log.path[i], first, (int)counts[i]));
    first += (int)counts[i];
  }
}

TEST(zstd_and_gzip) {
  char dir[512], plain[600], zst[600], gz[600], cmd[2400];
  fresh_dir(dir, sizeof dir, "comp");
  snprintf(plain, sizeof plain, "%s/p.tar", dir);
  snprintf(zst, sizeof zst, "%s/z.tar.zst", dir);
  snprintf(gz, sizeof gz, "%s/g.tar.gz", dir);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = plain;
  ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
  cfg.pattern = zst;
  cfg.level = 5;
  ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
  cfg.pattern = gz;
  cfg.level = 0;
  ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
  ASSERT_TRUE(file_size(zst) < file_size(plain) + 1000);
  ASSERT_TRUE(check_read(zst, 0, NSAMPLES));
  ASSERT_TRUE(check_read(gz, 0, NSAMPLES));
  /* Decompressed, both are exactly the plain shard. */
  ASSERT_TRUE(have_command("zstd"));
  ASSERT_TRUE(have_command("gzip"));
  snprintf(cmd, sizeof cmd, "zstd -q -t '%s' && zstd -dc '%s' | cmp -s - '%s'",
           zst, zst, plain);
  ASSERT_EQ_INT(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "gzip -t '%s' && gzip -dc '%s' | cmp -s - '%s'", gz,
           gz, plain);
  ASSERT_EQ_INT(system(cmd), 0);
  snprintf(cmd, sizeof cmd,
           "test \"$(zstd -dc '%s' | tar tvf - | wc -l)\" = "
           "\"$(tar tf '%s' | wc -l)\"",
           zst, plain);
  ASSERT_EQ_INT(system(cmd), 0);
  /* The gzip header: no name flag, mtime 0, OS 3. */
  size_t len;
  uint8_t *d = test_read_file(gz, &len);
  ASSERT_TRUE(d != NULL);
  int ok =
      len > 10 && d[3] == 0 && !d[4] && !d[5] && !d[6] && !d[7] && d[9] == 3;
  free(d);
  ASSERT_TRUE(ok);
}

TEST(deterministic) {
  static const char *names[] = {"d-%02d.tar", "d-%02d.tar.zst",
                                "d-%02d.tar.gz"};
  char a[512], b[512];
  fresh_dir(a, sizeof a, "det-a");
  fresh_dir(b, sizeof b, "det-b");
  for (int k = 0; k < 3; k++) {
    for (int run = 0; run < 2; run++) {
      char pat[700];
      snprintf(pat, sizeof pat, "%s/%s", run ? b : a, names[k]);
      wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
      cfg.pattern = pat;
      cfg.max_count = 13;
      ASSERT_EQ_INT(write_all(&cfg, NSAMPLES), WDS_OK);
    }
    for (int i = 0; i < 4; i++) {
      char fa[700], fb[700], name[64];
      snprintf(name, sizeof name, names[k], i);
      snprintf(fa, sizeof fa, "%s/%s", a, name);
      snprintf(fb, sizeof fb, "%s/%s", b, name);
      ASSERT_TRUE(file_size(fa) != UINT64_MAX);
      ASSERT_TRUE(same_files(fa, fb));
    }
  }
  ASSERT_EQ_INT(dir_entries(a, NULL), 12);
}

/* Opens a writer on dir/x-%d.tar, writes one good sample, then (key, f, n)
 * and expects WDS_ERR_INVALID, sticky; close removes the temporary file. */
static int expect_invalid(const char *key, const wds_writer_field *f,
                          size_t n) {
  char dir[512], pat[600];
  fresh_dir(dir, sizeof dir, "inv");
  snprintf(pat, sizeof pat, "%s/x-%%d.tar", dir);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  wds_writer *w;
  if (wds_writer_open(&cfg, &w) != WDS_OK)
    return 0;
  int ok = 1, tmp;
  ok &= write_sample(w, &samples[1]) == WDS_OK;
  ok &= dir_entries(dir, &tmp) == 1 && tmp == 1; /* being written */
  int rc = wds_writer_write_sample(w, key, f, n);
  if (rc != WDS_ERR_INVALID) {
    printf("  key \"%s\": status %d, expected WDS_ERR_INVALID\n",
           key ? key : "(null)", rc);
    ok = 0;
  }
  ok &= strlen(wds_last_error()) > 0;
  ok &= write_sample(w, &samples[2]) == WDS_ERR_INVALID; /* sticky */
  ok &= wds_writer_close(w) == WDS_ERR_INVALID;
  ok &= dir_entries(dir, NULL) == 0; /* temporary file removed */
  return ok;
}

TEST(invalid_samples) {
  wds_writer_field one[1] = {{"jpg", "x", 1}};
  ASSERT_TRUE(expect_invalid("", one, 1));
  ASSERT_TRUE(expect_invalid(NULL, one, 1));
  ASSERT_TRUE(expect_invalid("a.b", one, 1));
  ASSERT_TRUE(expect_invalid("dir/a.b", one, 1));
  ASSERT_TRUE(expect_invalid("a.b/", one, 1));
  ASSERT_TRUE(expect_invalid("/", one, 1));
  ASSERT_TRUE(expect_invalid("a//", one, 1));
  ASSERT_TRUE(expect_invalid("k", one, 0));
  wds_writer_field empty_ext[1] = {{"", "x", 1}};
  ASSERT_TRUE(expect_invalid("k", empty_ext, 1));
  wds_writer_field slash_ext[1] = {{"a/b", "x", 1}};
  ASSERT_TRUE(expect_invalid("k", slash_ext, 1));
  wds_writer_field dup[2] = {{"jpg", "x", 1}, {"jpg", "y", 1}};
  ASSERT_TRUE(expect_invalid("k", dup, 2));
  wds_writer_field dup_case[3] = {
      {"JPG", "x", 1}, {"cls", "1", 1}, {"jpg", "y", 1}};
  ASSERT_TRUE(expect_invalid("k", dup_case, 3));
  wds_writer_field no_data[1] = {{"jpg", NULL, 3}};
  ASSERT_TRUE(expect_invalid("k", no_data, 1));

  /* Valid: a dot in a directory of the key; a key ending in '/' whose
   * directory has no dot reads back as the same key ("a/" + ".jpg"). */
  char dir[512], pat[600];
  fresh_dir(dir, sizeof dir, "valid");
  snprintf(pat, sizeof pat, "%s/v.tar", dir);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_OK);
  ASSERT_EQ_INT(wds_writer_write_sample(w, "x.y/z", one, 1), WDS_OK);
  ASSERT_EQ_INT(wds_writer_write_sample(w, "dir/", one, 1), WDS_OK);
  ASSERT_EQ_INT(wds_writer_close(w), WDS_OK);
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  rc.spec = pat;
  wds_reader *r;
  const wds_sample *s;
  ASSERT_EQ_INT(wds_reader_open(&rc, &r), WDS_OK);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "x.y/z");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "dir/");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF);
  wds_reader_close(r);
}

TEST(open_errors) {
  wds_writer *w = (wds_writer *)&w;
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_ERR_INVALID);
  ASSERT_TRUE(w == NULL);
  ASSERT_TRUE(strlen(wds_last_error()) > 0);
  static const char *bad[] = {"x-%s.tar", "x-%d-%d.tar", "x-%ld.tar",
                              "x-%099d.tar", "x-%"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    cfg.pattern = bad[i];
    ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_ERR_INVALID);
    ASSERT_CONTAINS(wds_last_error(), bad[i]);
  }
  cfg.pattern = "x-%d.tar.zst";
  cfg.level = 99;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "level");
  cfg.pattern = "x-%d.tar.gz";
  cfg.level = 10;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_ERR_INVALID);
  cfg.level = 0;
  cfg.mtime = -1;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds_writer_close(NULL), WDS_OK);
  wds_writer_abort(NULL);
}

TEST(no_file_before_first_sample_and_abort) {
  char dir[512], pat[600];
  fresh_dir(dir, sizeof dir, "lazy");
  snprintf(pat, sizeof pat, "%s/l-%%d%%%%.tar", dir); /* "l-0%.tar" */
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_OK);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 0);
  ASSERT_EQ_INT(wds_writer_close(w), WDS_OK);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 0);

  /* end_shard finishes now; the next sample starts the next number. */
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_OK);
  ASSERT_EQ_INT(write_sample(w, &samples[0]), WDS_OK);
  ASSERT_EQ_INT(wds_writer_end_shard(w), WDS_OK);
  ASSERT_EQ_INT(wds_writer_end_shard(w), WDS_OK); /* nothing open: no-op */
  ASSERT_EQ_INT(write_sample(w, &samples[1]), WDS_OK);
  wds_writer_stats st;
  wds_writer_stats_get(w, &st);
  ASSERT_EQ_U64(st.shards, 1);
  ASSERT_EQ_U64(st.samples, 2);
  ASSERT_EQ_U64(st.members, (uint64_t)(samples[0].nf + samples[1].nf));
  /* abort: the unfinished second shard goes, the first stays. */
  wds_writer_abort(w);
  int tmp;
  ASSERT_EQ_INT(dir_entries(dir, &tmp), 1);
  ASSERT_EQ_INT(tmp, 0);
  char first[700];
  snprintf(first, sizeof first, "%s/l-0%%.tar", dir);
  ASSERT_TRUE(check_read(first, 0, 1));
}

TEST(out_fd_mode) {
  char dir[512], path[600];
  fresh_dir(dir, sizeof dir, "fd");
  snprintf(path, sizeof path, "%s/stream.tar", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(fd >= 0);
  shard_log log = {0};
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.out_fd = fd;
  cfg.max_count = 3; /* not applied to a stream */
  cfg.on_shard = on_shard;
  cfg.on_shard_ctx = &log;
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_OK);
  for (int i = 0; i < 10; i++)
    ASSERT_EQ_INT(write_sample(w, &samples[i]), WDS_OK);
  ASSERT_EQ_INT(wds_writer_end_shard(w), WDS_OK);
  ASSERT_EQ_INT(write_sample(w, &samples[10]), WDS_ERR_INVALID);
  wds_writer_close(w);
  ASSERT_EQ_INT(log.calls, 1);
  ASSERT_STREQ(log.path[0], "");
  ASSERT_EQ_U64(log.samples[0], 10);
  ASSERT_TRUE(fcntl(fd, F_GETFD) != -1); /* not closed */
  close(fd);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 1); /* no temporary name */
  ASSERT_TRUE(check_read(path, 0, 10));

  /* Compression on a stream: explicit. */
  snprintf(path, sizeof path, "%s/stream.tar.zst", dir);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(fd >= 0);
  cfg = (wds_writer_config)WDS_WRITER_CONFIG_INIT;
  cfg.out_fd = fd;
  cfg.compression = WDS_COMPRESS_ZSTD;
  ASSERT_EQ_INT(write_all(&cfg, 5), WDS_OK);
  close(fd);
  size_t len;
  uint8_t *d = test_read_file(path, &len);
  ASSERT_TRUE(d && len > 4 && d[0] == 0x28 && d[1] == 0xb5);
  free(d);
  ASSERT_TRUE(check_read(path, 0, 5));
}

TEST(write_error_to_dev_full) {
  int fd = open("/dev/full", O_WRONLY);
  ASSERT_TRUE(fd >= 0);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.out_fd = fd;
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_OK);
  int rc = WDS_OK;
  for (int i = 0; rc == WDS_OK && i < NSAMPLES; i++)
    rc = write_sample(w, &samples[i]); /* > 1 MiB: the buffer spills */
  if (rc == WDS_OK)
    rc = wds_writer_end_shard(w);
  ASSERT_EQ_INT(rc, WDS_ERR_IO);
  ASSERT_CONTAINS(wds_last_error(), "output fd");
  ASSERT_CONTAINS(wds_last_error(), strerror(ENOSPC));
  ASSERT_EQ_INT(write_sample(w, &samples[0]), WDS_ERR_IO);
  ASSERT_EQ_INT(wds_writer_close(w), WDS_ERR_IO);
  close(fd);
}

/* A file size limit makes write(2) fail with EFBIG in path mode: the error
 * names the shard, and close removes its temporary file. */
TEST(write_error_removes_temporary) {
  char dir[512], pat[600];
  fresh_dir(dir, sizeof dir, "efbig");
  snprintf(pat, sizeof pat, "%s/e-%%d.tar", dir);
  struct rlimit old, lim;
  ASSERT_EQ_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  lim = old;
  lim.rlim_cur = 100000;
  ASSERT_EQ_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  cfg.max_count = 2; /* the first shard (small) is finished, and stays */
  wds_writer *w;
  static uint8_t big[2 << 20];
  wds_writer_field bf[1] = {{"bin", big, sizeof big}};
  int rc = wds_writer_open(&cfg, &w);
  int orc = rc;
  for (int i = 0; rc == WDS_OK && i < 3; i++)
    rc = write_sample(w, &samples[i]);
  if (rc == WDS_OK) /* larger than the staging buffer: written at once */
    rc = wds_writer_write_sample(w, "big", bf, 1);
  if (rc == WDS_OK)
    rc = wds_writer_end_shard(w);
  char msg[1100];
  snprintf(msg, sizeof msg, "%s", orc == WDS_OK ? wds_last_error() : "");
  int crc = orc == WDS_OK ? wds_writer_close(w) : orc;
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  ASSERT_EQ_INT(orc, WDS_OK);
  ASSERT_EQ_INT(rc, WDS_ERR_IO);
  ASSERT_EQ_INT(crc, WDS_ERR_IO);
  ASSERT_CONTAINS(msg, dir);
  ASSERT_CONTAINS(msg, strerror(EFBIG));
  int tmp;
  ASSERT_TRUE(dir_entries(dir, &tmp) >= 1);
  ASSERT_EQ_INT(tmp, 0);
  char first[700];
  snprintf(first, sizeof first, "%s/e-0.tar", dir);
  ASSERT_TRUE(check_read(first, 0, 2));
}

/* ---- durability and special files ---- */

/* fsync as the library sees it: the executable's definition comes before
 * libc's (wds is a static library), so every call the writer makes lands
 * here, is classified, and is passed on to the system call. */
static struct {
  int on;
  char dir[600];  /* the shard directory */
  int files;      /* regular files synced... */
  int files_tmp;  /* ...while under their temporary name */
  int dirs;       /* directories synced... */
  int dirs_after; /* ...once the shard had its final name (no temporary) */
} syncs;

int fsync(int fd) {
  struct stat st;
  if (syncs.on && fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      syncs.dirs++;
      int tmp, n = dir_entries(syncs.dir, &tmp);
      if (tmp == 0 && n == syncs.dirs)
        syncs.dirs_after++;
    } else if (S_ISREG(st.st_mode)) {
      char link[64], name[700];
      snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
      ssize_t n = readlink(link, name, sizeof name - 1);
      syncs.files++;
      if (n > 0) {
        name[n] = '\0';
        if (strstr(name, ".tmp-"))
          syncs.files_tmp++;
      }
    }
  }
  return (int)syscall(SYS_fsync, fd);
}

/* Each shard is synced under its temporary name, renamed, and then its
 * directory synced; no_sync leaves out both. */
TEST(shards_synced_by_default) {
  char dir[512], pat[600], path[700];
  fresh_dir(dir, sizeof dir, "sync");
  snprintf(pat, sizeof pat, "%s/s-%%d.tar", dir);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  cfg.max_count = 4;
  memset(&syncs, 0, sizeof syncs);
  snprintf(syncs.dir, sizeof syncs.dir, "%s", dir);
  syncs.on = 1;
  int rc = write_all(&cfg, 12);
  syncs.on = 0;
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_INT(syncs.files, 3);
  ASSERT_EQ_INT(syncs.files_tmp, 3);
  ASSERT_EQ_INT(syncs.dirs, 3);
  ASSERT_EQ_INT(syncs.dirs_after, 3);
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/s-%d.tar", dir, i);
    ASSERT_TRUE(check_read(path, 4 * i, 4));
  }

  fresh_dir(dir, sizeof dir, "nosync");
  snprintf(pat, sizeof pat, "%s/s-%%d.tar", dir);
  cfg.pattern = pat;
  cfg.no_sync = 1;
  memset(&syncs, 0, sizeof syncs);
  syncs.on = 1;
  rc = write_all(&cfg, 12);
  syncs.on = 0;
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_INT(syncs.files + syncs.dirs, 0);
  snprintf(path, sizeof path, "%s/s-2.tar", dir);
  ASSERT_TRUE(check_read(path, 8, 4));
}

/* Reads what is in the FIFO (its writer gone) into path; the byte count. */
static long drain_to(int rfd, const char *path) {
  FILE *f = fopen(path, "wb");
  char buf[4096];
  long total = 0;
  ssize_t k;
  while (f && (k = read(rfd, buf, sizeof buf)) > 0) {
    fwrite(buf, 1, (size_t)k, f);
    total += k;
  }
  if (f)
    fclose(f);
  return total;
}

/* A FIFO is written in place (its read end opened first, so opening it
 * does not block; samples small enough for the pipe's buffer): it stays a
 * FIFO and carries the archive. A pattern without %d gets one shard: a
 * second would follow the first into the same stream, so it is refused.
 * wds_npy_save too writes it in place. */
TEST(fifo_written_in_place) {
  char dir[512], path[600], copy[600];
  fresh_dir(dir, sizeof dir, "fifo");
  snprintf(path, sizeof path, "%s/out.tar", dir);
  snprintf(copy, sizeof copy, "%s/copy.tar", dir);
  ASSERT_EQ_INT(mkfifo(path, 0644), 0);
  int rfd = open(path, O_RDONLY | O_NONBLOCK);
  ASSERT_TRUE(rfd >= 0);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = path;
  wds_writer *w;
  int rc = wds_writer_open(&cfg, &w);
  if (rc == WDS_OK)
    rc = write_sample(w, &samples[0]); /* 512 bytes */
  if (rc == WDS_OK)
    rc = wds_writer_end_shard(w);
  int second = rc == WDS_OK ? write_sample(w, &samples[3]) : rc;
  char msg[1100];
  snprintf(msg, sizeof msg, "%s", rc == WDS_OK ? wds_last_error() : "");
  if (w)
    wds_writer_close(w);
  struct stat st;
  ASSERT_EQ_INT(lstat(path, &st), 0);
  int fifo = S_ISFIFO(st.st_mode);
  long got = drain_to(rfd, copy);
  close(rfd);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_TRUE(fifo);
  ASSERT_EQ_INT(got, 10240);
  ASSERT_TRUE(check_read(copy, 0, 1));
  ASSERT_EQ_INT(second, WDS_ERR_INVALID);
  ASSERT_CONTAINS(msg, "in place");
  ASSERT_EQ_INT(dir_entries(dir, NULL), 2); /* out.tar, copy.tar */

  rfd = open(path, O_RDONLY | O_NONBLOCK);
  ASSERT_TRUE(rfd >= 0);
  int64_t shape = 3;
  rc = wds_npy_save(path, WDS_DTYPE_U8, 1, &shape, "abc");
  ASSERT_EQ_INT(lstat(path, &st), 0);
  fifo = S_ISFIFO(st.st_mode);
  char head[8] = "";
  ssize_t k = read(rfd, head, 6);
  close(rfd);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_TRUE(fifo);
  ASSERT_TRUE(k == 6 && memcmp(head, "\x93NUMPY", 6) == 0);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 2);
}

/* A character device is written in place, and refused through a symlink
 * (a symlink must not turn an output into a device write): a private null
 * device made with mknod in the test's directory (never /dev/null itself, which
 * a failing test would replace). Needs CAP_MKNOD and a file system without
 * nodev: skipped, and said, otherwise. */
TEST(device_written_in_place) {
  char dir[512], dev[600], link[600];
  fresh_dir(dir, sizeof dir, "dev");
  snprintf(dev, sizeof dev, "%s/null", dir);
  snprintf(link, sizeof link, "%s/link", dir);
  if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) != 0)
    SKIP("mknod %s: %s", dev, strerror(errno));
  int probe = open(dev, O_WRONLY);
  if (probe < 0) {
    int en = errno;
    unlink(dev);
    SKIP("open %s: %s", dev, strerror(en));
  }
  close(probe);
  ASSERT_EQ_INT(symlink("null", link), 0);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = dev;
  int rc = write_all(&cfg, 5);
  struct stat st;
  ASSERT_EQ_INT(lstat(dev, &st), 0);
  int chr = S_ISCHR(st.st_mode);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_TRUE(chr);

  wds_outfile *f;
  ASSERT_EQ_INT(wds_outfile_open(dev, 0, &f), WDS_OK);
  ASSERT_EQ_INT(wds_outfile_in_place(f), 1);
  ASSERT_TRUE(wds_outfile_tmp_path(f) == NULL);
  ASSERT_EQ_INT(write(wds_outfile_fd(f), "x", 1), 1);
  rc = wds_outfile_commit(f);
  wds_outfile_close(f);
  ASSERT_EQ_INT(rc, WDS_OK);
  f = NULL;
  ASSERT_EQ_INT(wds_outfile_open(link, 0, &f), WDS_ERR_OPEN);
  ASSERT_TRUE(f == NULL);
  ASSERT_CONTAINS(wds_last_error(), "symbolic link to a character device");
  cfg.pattern = link;
  ASSERT_EQ_INT(write_all(&cfg, 5), WDS_ERR_OPEN);
  ASSERT_EQ_INT(lstat(link, &st), 0);
  ASSERT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ_INT(lstat(dev, &st), 0);
  ASSERT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_EQ_INT(dir_entries(dir, NULL), 2);
  unlink(link);
  unlink(dev);
}

/* wds_outfile on its own: a regular file is replaced only by commit (the
 * old content stays until then; close without commit removes the
 * temporary); a directory and a socket are refused at open. */
TEST(outfile_regular_directory_socket) {
  char dir[512], path[600], sock[600];
  fresh_dir(dir, sizeof dir, "outfile");
  snprintf(path, sizeof path, "%s/f.txt", dir);
  FILE *old = fopen(path, "w");
  ASSERT_TRUE(old != NULL);
  fputs("old", old);
  fclose(old);
  wds_outfile *f;
  ASSERT_EQ_INT(wds_outfile_open(path, 0, &f), WDS_OK);
  ASSERT_EQ_INT(wds_outfile_in_place(f), 0);
  ASSERT_CONTAINS(wds_outfile_tmp_path(f), ".tmp-");
  ASSERT_EQ_INT(write(wds_outfile_fd(f), "new", 3), 3);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 2);
  wds_outfile_close(f); /* not committed */
  size_t len;
  uint8_t *d = test_read_file(path, &len);
  int kept = d && len == 3 && memcmp(d, "old", 3) == 0;
  free(d);
  ASSERT_TRUE(kept);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 1);

  ASSERT_EQ_INT(wds_outfile_open(path, 0, &f), WDS_OK);
  ASSERT_EQ_INT(write(wds_outfile_fd(f), "new!", 4), 4);
  int rc = wds_outfile_commit(f);
  int again = wds_outfile_commit(f);
  const char *tmp_after = wds_outfile_tmp_path(f);
  wds_outfile_close(f);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_INT(again, WDS_ERR_INVALID);
  ASSERT_TRUE(tmp_after == NULL);
  d = test_read_file(path, &len);
  int replaced = d && len == 4 && memcmp(d, "new!", 4) == 0;
  free(d);
  ASSERT_TRUE(replaced);
  ASSERT_EQ_INT(dir_entries(dir, NULL), 1);

  f = NULL;
  ASSERT_EQ_INT(wds_outfile_open(dir, 0, &f), WDS_ERR_OPEN);
  ASSERT_TRUE(f == NULL);
  ASSERT_CONTAINS(wds_last_error(), "directory");
  snprintf(sock, sizeof sock, "%s/sock", dir);
  int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_TRUE(sfd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t slen = strlen(sock);
  int bound = slen < sizeof sa.sun_path;
  if (bound) {
    memcpy(sa.sun_path, sock, slen + 1);
    bound = bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0;
  }
  rc = bound ? wds_outfile_open(sock, 0, &f) : -1;
  close(sfd);
  ASSERT_TRUE(bound);
  ASSERT_EQ_INT(rc, WDS_ERR_OPEN);
  ASSERT_CONTAINS(wds_last_error(), "socket");
  ASSERT_EQ_INT(wds_outfile_open("/nonexistent-dir-wds/x", 0, &f),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(wds_last_error(), "/nonexistent-dir-wds/x");
  ASSERT_EQ_INT(dir_entries(dir, NULL), 2); /* f.txt, sock */
}

/* ---- one writer per pattern; shards an earlier run left ---- */

/* Two writers of one numbered pattern would interleave their shards (issue
 * 26 item 6): the second, in this process or another, fails its first
 * sample (WDS_ERR_OPEN) naming the lock and the first one's pid, and
 * writes nothing; the same pattern with another width is the same
 * pattern; another pattern in the directory is not held up; after close
 * the lock file is gone and a new writer goes ahead. */
TEST(one_writer_per_pattern) {
  char dir[512], pat[600], pat3[600], other[600], lock[700], want[700];
  fresh_dir(dir, sizeof dir, "lock");
  snprintf(pat, sizeof pat, "%s/p-%%05d.tar", dir);
  snprintf(pat3, sizeof pat3, "%s/p-%%03d.tar", dir);
  snprintf(other, sizeof other, "%s/q-%%05d.tar", dir);
  snprintf(lock, sizeof lock, "%s/.p-%%d.tar.lock", dir);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  cfg.max_count = 1;
  wds_writer *w1, *w2, *w3;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w1), WDS_OK);
  struct stat st;
  ASSERT_TRUE(stat(lock, &st) != 0); /* no file before the first sample */
  ASSERT_EQ_INT(write_sample(w1, &samples[0]), WDS_OK);
  ASSERT_EQ_INT(stat(lock, &st), 0);
  size_t n = 0;
  char *pid = (char *)test_read_file(lock, &n);
  char mine[32];
  snprintf(mine, sizeof mine, "%ld\n", (long)getpid());
  ASSERT_TRUE(pid && n == strlen(mine) && memcmp(pid, mine, n) == 0);
  free(pid);

  cfg.pattern = pat3;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w2), WDS_OK);
  ASSERT_EQ_INT(write_sample(w2, &samples[1]), WDS_ERR_OPEN);
  printf("  second writer: %s\n", wds_last_error());
  snprintf(want, sizeof want, "(pid %ld)", (long)getpid());
  ASSERT_CONTAINS(wds_last_error(), "another writer");
  ASSERT_CONTAINS(wds_last_error(), want);
  ASSERT_CONTAINS(wds_last_error(), lock);
  ASSERT_EQ_INT(wds_writer_close(w2), WDS_ERR_OPEN);
  int tmp;
  ASSERT_EQ_INT(dir_entries(dir, &tmp), 1); /* w1's shard being written */
  ASSERT_EQ_INT(tmp, 1);

  /* another process */
  fflush(stdout);
  pid_t child = fork();
  ASSERT_TRUE(child >= 0);
  if (child == 0) {
    wds_writer *wc;
    cfg.pattern = pat;
    int ok = wds_writer_open(&cfg, &wc) == WDS_OK &&
             write_sample(wc, &samples[2]) == WDS_ERR_OPEN &&
             strstr(wds_last_error(), want) != NULL;
    wds_writer_abort(wc);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ_INT(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  cfg.pattern = other; /* another pattern: its own lock */
  ASSERT_EQ_INT(write_all(&cfg, 2), WDS_OK);

  ASSERT_EQ_INT(write_sample(w1, &samples[1]), WDS_OK);
  ASSERT_EQ_INT(wds_writer_close(w1), WDS_OK);
  ASSERT_TRUE(stat(lock, &st) != 0); /* deleted at close */
  cfg.pattern = pat;
  cfg.start_index = 2;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w3), WDS_OK);
  ASSERT_EQ_INT(write_sample(w3, &samples[2]), WDS_OK);
  wds_writer_abort(w3);
  ASSERT_TRUE(stat(lock, &st) != 0); /* and at abort */
  snprintf(want, sizeof want, "%s/p-{00000..00001}.tar", dir);
  ASSERT_TRUE(check_read(want, 0, 2));
}

typedef struct left_log {
  int n;
  char path[8][700];
} left_log;

static void on_left(void *ctx, const char *path) {
  left_log *l = ctx;
  if (l->n < 8)
    snprintf(l->path[l->n], sizeof l->path[0], "%s", path);
  l->n++;
}

/* A run with fewer shards than the last one leaves the last one's later
 * shards in place: close reports each file the pattern names with a
 * number after the last shard written (on_leftover, in number order),
 * none before it or of other names; abort reports nothing. */
TEST(leftover_shards_are_reported) {
  char dir[512], pat[600], path[700];
  fresh_dir(dir, sizeof dir, "left");
  snprintf(pat, sizeof pat, "%s/r-%%03d.tar", dir);
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  cfg.pattern = pat;
  cfg.max_count = 1;
  left_log log;
  memset(&log, 0, sizeof log);
  cfg.on_leftover = on_left;
  cfg.on_leftover_ctx = &log;
  ASSERT_EQ_INT(write_all(&cfg, 5), WDS_OK); /* r-000 .. r-004 */
  ASSERT_EQ_INT(log.n, 0);
  /* an earlier run's far shard, and names that are not the pattern's */
  const char *extra[] = {"r-012.tar",  "r-7.tar",   "r-004.tar.bak",
                         "r-0004.tar", "r-00x.tar", ".r-005.tar"};
  for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, extra[i]);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fclose(f);
  }
  ASSERT_EQ_INT(write_all(&cfg, 2), WDS_OK); /* r-000, r-001 again */
  ASSERT_EQ_INT(log.n, 4);
  const int want[] = {2, 3, 4, 12};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/r-%03d.tar", dir, want[i]);
    ASSERT_STREQ(log.path[i], path);
  }
  /* from start_index 3: only those after the last one written (r-003) */
  memset(&log, 0, sizeof log);
  cfg.start_index = 3;
  ASSERT_EQ_INT(write_all(&cfg, 1), WDS_OK);
  ASSERT_EQ_INT(log.n, 2);
  snprintf(path, sizeof path, "%s/r-004.tar", dir);
  ASSERT_STREQ(log.path[0], path);
  /* abort: nothing */
  memset(&log, 0, sizeof log);
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&cfg, &w), WDS_OK);
  ASSERT_EQ_INT(write_sample(w, &samples[0]), WDS_OK);
  ASSERT_EQ_INT(wds_writer_end_shard(w), WDS_OK);
  wds_writer_abort(w);
  ASSERT_EQ_INT(log.n, 0);
}

/* Symbolic links: one to a FIFO is refused (its read
 * end open, so a write through it would not block: before the fix it
 * succeeded), and so is one to a socket, each link and target left as
 * they were; one to a regular file is replaced by the new file, its old
 * target untouched; a dangling one is replaced too. The process's own
 * descriptors (/dev/fd/N) are written in place. */
TEST(outfile_symlinks) {
  char dir[512], fifo[600], link[600], reg[600], rlink[600], dangling[600];
  fresh_dir(dir, sizeof dir, "links");
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(link, sizeof link, "%s/to-fifo", dir);
  snprintf(reg, sizeof reg, "%s/target.txt", dir);
  snprintf(rlink, sizeof rlink, "%s/to-reg", dir);
  snprintf(dangling, sizeof dangling, "%s/dangling", dir);
  ASSERT_EQ_INT(mkfifo(fifo, 0644), 0);
  ASSERT_EQ_INT(symlink("fifo", link), 0);
  int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
  ASSERT_TRUE(rfd >= 0);
  wds_outfile *f = NULL;
  int rc = wds_outfile_open(link, 0, &f);
  char err[1024]; /* the text now: the npy save below fails too */
  snprintf(err, sizeof err, "%s", wds_last_error());
  if (f) {
    (void)!write(wds_outfile_fd(f), "leak", 4);
    wds_outfile_commit(f);
    wds_outfile_close(f);
  }
  char got[8];
  ssize_t k = read(rfd, got, sizeof got);
  int64_t shape = 3;
  int npy = wds_npy_save(link, WDS_DTYPE_U8, 1, &shape, "abc");
  char err2[1024];
  snprintf(err2, sizeof err2, "%s", wds_last_error());
  ssize_t k2 = read(rfd, got, sizeof got);
  close(rfd);
  ASSERT_EQ_INT(rc, WDS_ERR_OPEN);
  ASSERT_CONTAINS(err, "symbolic link to a FIFO");
  ASSERT_CONTAINS(err, "/fifo)");
  ASSERT_TRUE(k <= 0);
  ASSERT_EQ_INT(npy, WDS_ERR_IO); /* npy.c: every failure to write is IO */
  ASSERT_CONTAINS(err2, "symbolic link to a FIFO");
  ASSERT_TRUE(k2 <= 0);
  struct stat st;
  ASSERT_EQ_INT(lstat(link, &st), 0);
  ASSERT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ_INT(lstat(fifo, &st), 0);
  ASSERT_TRUE(S_ISFIFO(st.st_mode));

  char sock[600], slink[600];
  snprintf(sock, sizeof sock, "%s/sock", dir);
  snprintf(slink, sizeof slink, "%s/to-sock", dir);
  int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  int bound = sfd >= 0 && strlen(sock) < sizeof sa.sun_path;
  if (bound) {
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    bound = bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0;
  }
  if (bound) {
    ASSERT_EQ_INT(symlink("sock", slink), 0);
    rc = wds_outfile_open(slink, 0, &f);
    close(sfd);
    ASSERT_EQ_INT(rc, WDS_ERR_OPEN);
    ASSERT_CONTAINS(wds_last_error(), "socket");
    ASSERT_EQ_INT(lstat(slink, &st), 0);
    ASSERT_TRUE(S_ISLNK(st.st_mode));
  } else if (sfd >= 0) {
    close(sfd);
  }

  FILE *old = fopen(reg, "w");
  ASSERT_TRUE(old != NULL);
  fputs("old", old);
  fclose(old);
  ASSERT_EQ_INT(symlink("target.txt", rlink), 0);
  ASSERT_EQ_INT(symlink("nowhere/x", dangling), 0);
  const char *replaced[] = {rlink, dangling};
  for (int i = 0; i < 2; i++) {
    ASSERT_EQ_INT(wds_outfile_open(replaced[i], 0, &f), WDS_OK);
    ASSERT_EQ_INT(wds_outfile_in_place(f), 0);
    ASSERT_EQ_INT(write(wds_outfile_fd(f), "new", 3), 3);
    rc = wds_outfile_commit(f);
    wds_outfile_close(f);
    ASSERT_EQ_INT(rc, WDS_OK);
    ASSERT_EQ_INT(lstat(replaced[i], &st), 0);
    ASSERT_TRUE(S_ISREG(st.st_mode));
    ASSERT_EQ_INT(st.st_size, 3);
  }
  size_t len;
  uint8_t *d = test_read_file(reg, &len);
  int kept = d && len == 3 && memcmp(d, "old", 3) == 0;
  free(d);
  ASSERT_TRUE(kept);

  /* /dev/fd/N: a pipe this process opened */
  int p[2];
  ASSERT_EQ_INT(pipe(p), 0);
  char own[64];
  snprintf(own, sizeof own, "/dev/fd/%d", p[1]);
  rc = wds_outfile_open(own, 0, &f);
  int in_place = rc == WDS_OK && wds_outfile_in_place(f);
  if (rc == WDS_OK) {
    ASSERT_EQ_INT(write(wds_outfile_fd(f), "own", 3), 3);
    rc = wds_outfile_commit(f);
    wds_outfile_close(f);
  }
  close(p[1]);
  k = read(p[0], got, sizeof got);
  close(p[0]);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_TRUE(in_place);
  ASSERT_TRUE(k == 3 && memcmp(got, "own", 3) == 0);
}

/* WDS_OUTFILE_STREAM: a log written where it goes, visible before the
 * commit, left whole when never committed; a link to a file is replaced
 * (its target untouched), one to a FIFO refused. */
TEST(outfile_stream) {
  char dir[512], path[600], reg[600], rlink[600], fifo[600], flink[600];
  fresh_dir(dir, sizeof dir, "stream");
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  snprintf(reg, sizeof reg, "%s/target.txt", dir);
  snprintf(rlink, sizeof rlink, "%s/to-reg", dir);
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(flink, sizeof flink, "%s/to-fifo", dir);
  FILE *old = fopen(path, "w");
  ASSERT_TRUE(old != NULL);
  fputs("an older, longer log", old);
  fclose(old);
  wds_outfile *f = NULL;
  ASSERT_EQ_INT(wds_outfile_open(path, WDS_OUTFILE_STREAM, &f), WDS_OK);
  ASSERT_EQ_INT(wds_outfile_in_place(f), 1);
  ASSERT_TRUE(wds_outfile_tmp_path(f) == NULL);
  ASSERT_EQ_INT(write(wds_outfile_fd(f), "one\n", 4), 4);
  size_t len;
  uint8_t *d = test_read_file(path, &len); /* before any commit */
  int seen = d && len == 4 && memcmp(d, "one\n", 4) == 0;
  free(d);
  wds_outfile_close(f); /* never committed: what was written stays */
  d = test_read_file(path, &len);
  int kept = d && len == 4 && memcmp(d, "one\n", 4) == 0;
  free(d);
  ASSERT_TRUE(seen);
  ASSERT_TRUE(kept);

  old = fopen(reg, "w");
  ASSERT_TRUE(old != NULL);
  fputs("old", old);
  fclose(old);
  ASSERT_EQ_INT(symlink("target.txt", rlink), 0);
  ASSERT_EQ_INT(wds_outfile_open(rlink, WDS_OUTFILE_STREAM, &f), WDS_OK);
  ASSERT_EQ_INT(write(wds_outfile_fd(f), "new", 3), 3);
  int rc = wds_outfile_commit(f);
  wds_outfile_close(f);
  ASSERT_EQ_INT(rc, WDS_OK);
  struct stat st;
  ASSERT_EQ_INT(lstat(rlink, &st), 0);
  ASSERT_TRUE(S_ISREG(st.st_mode));
  ASSERT_EQ_INT(st.st_size, 3);
  d = test_read_file(reg, &len);
  kept = d && len == 3 && memcmp(d, "old", 3) == 0;
  free(d);
  ASSERT_TRUE(kept);

  ASSERT_EQ_INT(mkfifo(fifo, 0644), 0);
  ASSERT_EQ_INT(symlink("fifo", flink), 0);
  f = NULL;
  rc = wds_outfile_open(flink, WDS_OUTFILE_STREAM, &f);
  wds_outfile_close(f); /* NULL: leaves the last error */
  ASSERT_EQ_INT(rc, WDS_ERR_OPEN);
  ASSERT_CONTAINS(wds_last_error(), "symbolic link to a FIFO");
  ASSERT_EQ_INT(lstat(flink, &st), 0);
  ASSERT_TRUE(S_ISLNK(st.st_mode));
}

/* wds_writer_leftover_add, the on_leftover the CLI and Python give:
 * counted, the first and last path kept. */
TEST(leftovers_keep_the_count_first_and_last) {
  wds_writer_leftovers l = {0, NULL, NULL};
  wds_writer_leftover_add(&l, "d/s-000003.tar");
  ASSERT_EQ_U64(l.count, 1);
  ASSERT_STREQ(l.first, "d/s-000003.tar");
  ASSERT_STREQ(l.last, "d/s-000003.tar");
  wds_writer_leftover_add(&l, "d/s-000004.tar");
  wds_writer_leftover_add(&l, "d/s-000009.tar");
  ASSERT_EQ_U64(l.count, 3);
  ASSERT_STREQ(l.first, "d/s-000003.tar");
  ASSERT_STREQ(l.last, "d/s-000009.tar");
  wds_writer_leftovers_free(&l);
  ASSERT_TRUE(l.first == NULL && l.last == NULL && l.count == 0);
  wds_writer_leftovers_free(NULL);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/wds-test-writer-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  make_samples();
  RUN(round_trip_plain);
  RUN(max_count_start_index_and_on_shard);
  RUN(single_file_limits);
  RUN(max_size_splits_greedily);
  RUN(zstd_and_gzip);
  RUN(deterministic);
  RUN(invalid_samples);
  RUN(open_errors);
  RUN(no_file_before_first_sample_and_abort);
  RUN(out_fd_mode);
  RUN(write_error_to_dev_full);
  RUN(write_error_removes_temporary);
  RUN(shards_synced_by_default);
  RUN(fifo_written_in_place);
  RUN(device_written_in_place);
  RUN(outfile_regular_directory_socket);
  RUN(one_writer_per_pattern);
  RUN(leftover_shards_are_reported);
  RUN(leftovers_keep_the_count_first_and_last);
  RUN(outfile_symlinks);
  RUN(outfile_stream);
  free_samples();
  test_remove_tree(tmpdir);
  return test_summary();
}
