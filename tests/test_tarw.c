/* test_tarw.c — the internal tar writer. Archives are written into a
 * temporary directory, plain and zstd, and read back three ways: by wds's
 * public reader (every byte compared), by GNU tar (names, modes 0444, owners,
 * sizes), and, where installed, by bsdtar and Python's tarfile. Header bytes
 * are checked directly where the format leaves a choice (prefix split, pax
 * records, checksum, record padding). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader */
#include <zstd.h>

#include "shards/stream.h"
#include "shards/tar.h"
#include "shards/tarw.h"
#include "test.h"
#include "test_files.h"
#include "wds/reader.h"

static char tmpdir[256];

/* ---- helpers ---- */

static void path_in(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", tmpdir, name);
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  if (!d)
    return -1;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

static int have_command(const char *name) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
  return system(cmd) == 0;
}

/* Runs cmd and returns its whole stdout (malloc'd), or NULL if it failed. */
static char *run_capture(const char *cmd) {
  FILE *p = popen(cmd, "r");
  if (!p)
    return NULL;
  size_t cap = 1 << 16, n = 0, k;
  char *out = malloc(cap);
  while (out && (k = fread(out + n, 1, cap - n - 1, p)) > 0) {
    n += k;
    if (n + 1 == cap) {
      char *o = realloc(out, cap *= 2);
      if (!o)
        free(out);
      out = o;
    }
  }
  int st = pclose(p);
  if (!out)
    return NULL;
  out[n] = '\0';
  if (st != 0) {
    printf("  command failed (status %d): %s\n", st, cmd);
    free(out);
    return NULL;
  }
  return out;
}

static uint64_t rng_state = 0x1234567887654321ull;

static void fill_random(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    p[i] = (uint8_t)(rng_state >> 24);
  }
}

static int header_checksum_ok(const uint8_t *h) {
  unsigned sum = 8 * ' ';
  for (int i = 0; i < 512; i++)
    if (i < 148 || i >= 156)
      sum += h[i];
  char buf[8];
  snprintf(buf, sizeof buf, "%06o", sum);
  return memcmp(h + 148, buf, 6) == 0 && h[154] == '\0' && h[155] == ' ';
}

/* ---- the member set used by the round trips ---- */

typedef struct member {
  char name[512];
  uint8_t *data;
  size_t size;
} member;

enum { NMEMBERS = 8 };
static member members[NMEMBERS];

static void make_members(void) {
  size_t sizes[NMEMBERS] = {13, 1 << 20, 0, 1000, 777, 512, 4096, 1};
  char longdir[200], longfile[200];
  memset(longdir, 'd', 120);
  longdir[120] = '\0';
  memset(longfile, 'f', 150);
  longfile[150] = '\0';
  snprintf(members[0].name, sizeof members[0].name, "a/short.txt");
  snprintf(members[1].name, sizeof members[1].name, "big.bin");
  snprintf(members[2].name, sizeof members[2].name, "empty.txt");
  /* > 100 bytes, splits into a 120-byte prefix and "file.bin" */
  snprintf(members[3].name, sizeof members[3].name, "%s/file.bin", longdir);
  /* > 100 bytes with no '/': needs pax */
  snprintf(members[4].name, sizeof members[4].name, "%s.txt", longfile);
  /* > 255 bytes in several components: no split fits, pax */
  snprintf(members[5].name, sizeof members[5].name, "%s/%s/x.bin", longdir,
           longfile);
  /* exactly 100 bytes: the name field has no NUL */
  memset(members[6].name, 'n', 96);
  memcpy(members[6].name + 96, ".bin", 5);
  /* UTF-8 in the name */
  snprintf(members[7].name, sizeof members[7].name,
           "caf\xc3\xa9/na\xc3\xafve.txt");
  for (int i = 0; i < NMEMBERS; i++) {
    members[i].size = sizes[i];
    members[i].data = malloc(sizes[i] ? sizes[i] : 1);
    fill_random(members[i].data, sizes[i]);
  }
}

static int write_members(const char *path, int compression) {
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  o.compression = compression;
  o.zstd_level = 5;
  o.gzip_level = 5;
  o.buffer_bytes = 64 << 10; /* smaller than big.bin: the direct path */
  wds__tarw *w = NULL;
  wds__err err;
  int rc = wds__tarw_open_path(path, &o, &w, &err);
  for (int i = 0; rc == WDS_OK && i < NMEMBERS; i++)
    rc = wds__tarw_add(w, members[i].name, members[i].data, members[i].size,
                       &err);
  if (rc == WDS_OK)
    rc = wds__tarw_finish(w, &err);
  if (rc != WDS_OK)
    printf("  writer: %s\n", err.msg);
  wds__tarw_close(w);
  return rc;
}

/* Reads path with the public reader and compares every member. */
static int check_with_reader(const char *path) {
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  const char *urls[1] = {path};
  cfg.urls = urls;
  cfg.url_count = 1;
  wds_reader *r;
  if (wds_reader_open(&cfg, &r) != WDS_OK) {
    printf("  open: %s\n", wds_last_error());
    return 0;
  }
  int ok = 1, i = 0, rc;
  const wds_sample *s;
  /* Every member has its own key: one field per sample, in order. */
  while (ok && (rc = wds_reader_next(r, &s)) == WDS_OK) {
    if (i >= NMEMBERS || s->field_count != 1 ||
        strcmp(s->fields[0].name, members[i].name) != 0 ||
        s->fields[0].size_bytes != members[i].size ||
        (members[i].size &&
         memcmp(s->fields[0].data, members[i].data, members[i].size) != 0)) {
      printf("  sample %d (%s) differs from member \"%s\"\n", i,
             i < NMEMBERS ? s->fields[0].name : "-",
             i < NMEMBERS ? members[i].name : "-");
      ok = 0;
    }
    i++;
  }
  if (ok && rc != WDS_EOF) {
    printf("  reader: %s\n", wds_last_error());
    ok = 0;
  }
  if (ok && i != NMEMBERS) {
    printf("  %d samples, expected %d\n", i, NMEMBERS);
    ok = 0;
  }
  wds_reader_close(r);
  return ok;
}

/* Reads path with the public reader: n samples, none unverified. */
static int check_with_reader_count(const char *path, int n) {
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  const char *urls[1] = {path};
  cfg.urls = urls;
  cfg.url_count = 1;
  wds_reader *r;
  if (wds_reader_open(&cfg, &r) != WDS_OK)
    return 0;
  int i = 0, rc;
  const wds_sample *s;
  while ((rc = wds_reader_next(r, &s)) == WDS_OK)
    i++;
  wds_reader_stats st;
  wds_reader_stats_get(r, &st);
  if (rc != WDS_EOF || i != n || st.unverified_samples != 0)
    printf("  %d samples (%d wanted), %llu unverified: %s\n", i, n,
           (unsigned long long)st.unverified_samples,
           rc != WDS_EOF ? wds_last_error() : "");
  wds_reader_close(r);
  return rc == WDS_EOF && i == n && st.unverified_samples == 0;
}

/* The names a listing tool prints, one per line, must be ours in order. */
static int check_listing(const char *tool, const char *path) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s '%s'", tool, path);
  char *out = run_capture(cmd);
  if (!out)
    return 0;
  int ok = 1;
  char *line = out;
  for (int i = 0; i < NMEMBERS; i++) {
    char *nl = strchr(line, '\n');
    if (!nl || (size_t)(nl - line) != strlen(members[i].name) ||
        memcmp(line, members[i].name, (size_t)(nl - line)) != 0) {
      printf("  %s: line %d is not \"%s\"\n", tool, i + 1, members[i].name);
      ok = 0;
      break;
    }
    line = nl + 1;
  }
  if (ok && *line) {
    printf("  %s: extra output: %s\n", tool, line);
    ok = 0;
  }
  free(out);
  return ok;
}

/* GNU tar's verbose listing: mode, owner and size of every member. */
static int check_gnu_verbose(const char *path) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "TZ=UTC tar --numeric-owner -tvf '%s'", path);
  char *out = run_capture(cmd);
  if (!out)
    return 0;
  int ok = 1;
  char *line = out;
  for (int i = 0; i < NMEMBERS && ok; i++) {
    char expect[64];
    snprintf(expect, sizeof expect, "-r--r--r-- 0/0 %zu 1970-01-01 00:00 ",
             members[i].size);
    /* GNU tar right-aligns the size; squeeze runs of spaces first. */
    char *nl = strchr(line, '\n');
    if (!nl) {
      ok = 0;
      break;
    }
    *nl = '\0';
    char squeezed[1024];
    size_t o = 0;
    for (char *p = line; *p && o + 1 < sizeof squeezed; p++)
      if (!(*p == ' ' && o > 0 && squeezed[o - 1] == ' '))
        squeezed[o++] = *p;
    squeezed[o] = '\0';
    if (strncmp(squeezed, expect, strlen(expect)) != 0 ||
        strcmp(squeezed + strlen(expect), members[i].name) != 0) {
      printf("  tar -tv line \"%s\", expected \"%s%s\"\n", squeezed, expect,
             members[i].name);
      ok = 0;
    }
    line = nl + 1;
  }
  free(out);
  return ok;
}

/* ---- tests ---- */

TEST(plain_round_trip) {
  char path[512];
  path_in(path, sizeof path, "plain.tar");
  ASSERT_EQ_INT(write_members(path, WDS__TARW_NONE), WDS_OK);
  size_t len;
  uint8_t *d = test_read_file(path, &len);
  ASSERT_TRUE(d != NULL);
  free(d);
  ASSERT_EQ_U64(len % 10240, 0);
  ASSERT_TRUE(check_with_reader(path));
  ASSERT_TRUE(check_listing("tar -tf", path));
  ASSERT_TRUE(check_gnu_verbose(path));
  if (have_command("bsdtar"))
    ASSERT_TRUE(check_listing("bsdtar -tf", path));
  if (have_command("python3"))
    ASSERT_TRUE(check_listing(
        "python3 -c 'import sys, tarfile\n"
        "for m in tarfile.open(sys.argv[1]):\n"
        "  assert m.isfile() and m.mode == 0o444 and m.uid == 0 and "
        "m.mtime == 0\n"
        "  sys.stdout.buffer.write(m.name.encode(\"utf-8\", "
        "\"surrogateescape\") + b\"\\n\")'",
        path));
}

TEST(zstd_round_trip) {
  char path[512], plain[512];
  path_in(path, sizeof path, "comp.tar.zst");
  path_in(plain, sizeof plain, "plain.tar");
  ASSERT_EQ_INT(write_members(path, WDS__TARW_ZSTD), WDS_OK);
  ASSERT_TRUE(check_with_reader(path));
  ASSERT_TRUE(check_listing("tar -tf", path));
  if (have_command("bsdtar"))
    ASSERT_TRUE(check_listing("bsdtar -tf", path));
  if (have_command("zstd")) {
    /* One valid frame whose content is exactly the plain archive. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "zstd -q -t '%s' && zstd -dc '%s' | cmp - '%s'",
             path, path, plain);
    ASSERT_EQ_INT(system(cmd), 0);
  }
}

/* zstd output is a sequence of frames of about 1 MiB of tar, each with a
 * content checksum, each starting on a member's header, but for one that
 * splits a member larger than 4 MiB; together, the plain archive. */
TEST(zstd_frames) {
  char path[512];
  path_in(path, sizeof path, "frames.tar.zst");
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  o.compression = WDS__TARW_ZSTD;
  wds__tarw *w = NULL;
  wds__err err;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &err), WDS_OK);
  size_t big = (size_t)9 << 20, small = 20000;
  uint8_t *data = malloc(big + 200 * 100);
  ASSERT_TRUE(data != NULL);
  fill_random(data, big + 200 * 100);
  int rc = WDS_OK;
  char name[64];
  for (int i = 0; rc == WDS_OK && i < 200; i++) {
    snprintf(name, sizeof name, "s%04d.bin", i);
    rc = wds__tarw_add(w, name, data + (size_t)i * 100, i == 100 ? big : small,
                       &err);
  }
  if (rc == WDS_OK)
    rc = wds__tarw_finish(w, &err);
  wds__tarw_stats st;
  wds__tarw_stats_get(w, &st);
  wds__tarw_close(w);
  free(data);
  ASSERT_EQ_INT(rc, WDS_OK);
  size_t n = 0;
  uint8_t *z = test_read_file(path, &n);
  ASSERT_TRUE(z != NULL);
  uint8_t *tar = malloc(st.tar_bytes);
  size_t at = 0, out = 0, frames = 0, split = 0;
  while (at < n) {
    ZSTD_frameHeader fh;
    size_t fsz = ZSTD_findFrameCompressedSize(z + at, n - at);
    CHECK(!ZSTD_isError(fsz));
    CHECK(ZSTD_getFrameHeader(&fh, z + at, n - at) == 0);
    CHECK(fh.checksumFlag);
    size_t k = ZSTD_decompress(tar + out, st.tar_bytes - out, z + at, fsz);
    CHECK(!ZSTD_isError(k));
    CHECK(k <= (size_t)4 << 20); /* at most 4 MiB of tar */
    /* A frame starts on a member's header unless it splits big data. */
    if (!header_checksum_ok(tar + out))
      split++;
    out += k;
    at += fsz;
    frames++;
  }
  CHECK(out == st.tar_bytes);
  CHECK(frames == st.frames);
  CHECK(frames >= 6); /* ~4 MiB of small members, and 9 MiB */
  CHECK(split >= 1 && split <= 2);
  /* Every decoder reads them as one stream. */
  CHECK(check_with_reader_count(path, 200));
  if (have_command("zstd")) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd,
             "zstd -q -t '%s' && zstd -dc '%s' | tar -tf - | "
             "test $(wc -l) -eq 200",
             path, path);
    CHECK(system(cmd) == 0);
  }
done:
  free(tar);
  free(z);
}

TEST(gzip_round_trip) {
  char path[512], plain[512];
  path_in(path, sizeof path, "comp.tar.gz");
  path_in(plain, sizeof plain, "plain.tar");
  ASSERT_EQ_INT(write_members(path, WDS__TARW_GZIP), WDS_OK);
  ASSERT_TRUE(check_with_reader(path));
  ASSERT_TRUE(check_listing("tar -tzf", path));
  /* The header: magic, deflate, no flags (no name), mtime 0, OS 3. */
  size_t len;
  uint8_t *d = test_read_file(path, &len);
  ASSERT_TRUE(d != NULL && len > 18);
  int header_ok = d[0] == 0x1f && d[1] == 0x8b && d[2] == 8 && d[3] == 0 &&
                  d[4] == 0 && d[5] == 0 && d[6] == 0 && d[7] == 0 && d[9] == 3;
  free(d);
  ASSERT_TRUE(header_ok);
  if (have_command("gzip")) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "gzip -t '%s' && gzip -dc '%s' | cmp - '%s'",
             path, path, plain);
    ASSERT_EQ_INT(system(cmd), 0);
  }
}

TEST(output_is_deterministic) {
  char a[512], b[512];
  path_in(a, sizeof a, "det-a.tar.zst");
  path_in(b, sizeof b, "det-b.tar.zst");
  ASSERT_EQ_INT(write_members(a, WDS__TARW_ZSTD), WDS_OK);
  ASSERT_EQ_INT(write_members(b, WDS__TARW_ZSTD), WDS_OK);
  size_t la, lb;
  uint8_t *da = test_read_file(a, &la), *db = test_read_file(b, &lb);
  int same = da && db && la == lb && memcmp(da, db, la) == 0;
  free(da);
  free(db);
  ASSERT_TRUE(same);
}

TEST(header_layout) {
  static uint8_t h[WDS__TARW_HEADER_MAX];
  size_t len;
  wds__err err;

  /* Short name: one ustar block, fields as tarfile writes them. */
  ASSERT_EQ_INT(wds__tarw_format_header("a.txt", 1234, 1700000000, h, sizeof h,
                                        &len, &err),
                WDS_OK);
  ASSERT_EQ_U64(len, 512);
  ASSERT_STREQ((char *)h, "a.txt");
  ASSERT_TRUE(memcmp(h + 100, "0000444\0", 8) == 0);
  ASSERT_TRUE(memcmp(h + 108, "0000000\0", 8) == 0);
  ASSERT_TRUE(memcmp(h + 124, "00000002322\0", 12) == 0);
  ASSERT_TRUE(memcmp(h + 136, "14524770400\0", 12) == 0);
  ASSERT_EQ_INT(h[156], '0');
  ASSERT_TRUE(memcmp(h + 257,
                     "ustar\0"
                     "00",
                     8) == 0);
  ASSERT_EQ_INT(h[265], 0); /* uname, gname empty */
  ASSERT_EQ_INT(h[297], 0);
  ASSERT_EQ_INT(h[345], 0); /* no prefix */
  ASSERT_TRUE(header_checksum_ok(h));
  ASSERT_TRUE(wds__tarfmt_is_header(h));

  /* Prefix split at the last '/' that leaves <= 155 bytes of prefix. */
  char name[512];
  memset(name, 'p', 150);
  name[150] = '/';
  memset(name + 151, 'q', 60);
  memcpy(name + 211, "/r.bin", 7);
  ASSERT_EQ_INT(wds__tarw_format_header(name, 0, 0, h, sizeof h, &len, &err),
                WDS_OK);
  ASSERT_EQ_U64(len, 512);
  ASSERT_TRUE(strncmp((char *)h + 345, name, 150) == 0 && h[345 + 150] == 0);
  ASSERT_STREQ((char *)h, name + 151);
  ASSERT_TRUE(header_checksum_ok(h));

  /* A 300-byte name: pax 'x' header with a path record. */
  memset(name, 'z', 300);
  name[300] = '\0';
  ASSERT_EQ_INT(wds__tarw_format_header(name, 5, 0, h, sizeof h, &len, &err),
                WDS_OK);
  ASSERT_EQ_U64(len, 512 + 512 + 512);
  ASSERT_EQ_INT(h[156], 'x');
  ASSERT_STREQ((char *)h, "././@PaxHeader");
  ASSERT_TRUE(header_checksum_ok(h));
  /* "310 path=zzz...\n": 3 + 1 + 5 + 300 + 1 = 310 */
  ASSERT_TRUE(memcmp(h + 512, "310 path=zzz", 12) == 0);
  ASSERT_EQ_INT(h[512 + 309], '\n');
  ASSERT_TRUE(memcmp(h + 124, "00000000466\0", 12) == 0); /* 310 */
  ASSERT_EQ_INT(h[1024 + 156], '0');
  ASSERT_TRUE(header_checksum_ok(h + 1024));
  ASSERT_TRUE(memcmp(h + 1024 + 124, "00000000005\0", 12) == 0);

  /* 8 GiB - 1 still fits the octal field; 8 GiB needs a pax size record and
   * the ustar field is then 0. */
  ASSERT_EQ_INT(wds__tarw_format_header("m.bin", ((uint64_t)8 << 30) - 1, 0, h,
                                        sizeof h, &len, &err),
                WDS_OK);
  ASSERT_EQ_U64(len, 512);
  ASSERT_TRUE(memcmp(h + 124, "77777777777\0", 12) == 0);
  ASSERT_EQ_INT(wds__tarw_format_header("m.bin", (uint64_t)8 << 30, 0, h,
                                        sizeof h, &len, &err),
                WDS_OK);
  ASSERT_EQ_U64(len, 1536);
  ASSERT_TRUE(memcmp(h + 512, "19 size=8589934592\n", 19) == 0);
  ASSERT_TRUE(memcmp(h + 1024 + 124, "00000000000\0", 12) == 0);

  /* Record lengths that cross a power of ten count their own digits. */
  memset(name, 'y', 300);
  name[90 + 100] = '\0'; /* 190 bytes, one component */
  ASSERT_EQ_INT(wds__tarw_format_header(name, 0, 0, h, sizeof h, &len, &err),
                WDS_OK);
  ASSERT_TRUE(memcmp(h + 512, "200 path=", 9) == 0); /* 3+1+5+190+1 */

  /* Bad input. */
  ASSERT_EQ_INT(wds__tarw_format_header("", 0, 0, h, sizeof h, &len, &err),
                WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds__tarw_format_header("a", 0, -1, h, sizeof h, &len, &err),
                WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds__tarw_format_header("a", 0, 0, h, 100, &len, &err),
                WDS_ERR_LIMIT);
}

/* Header bytes are identical to what Python's tarfile writes (USTAR_FORMAT
 * where the name fits the ustar fields, else PAX_FORMAT). */
TEST(headers_match_tarfile) {
  if (!have_command("python3"))
    SKIP("no python3");
  char name[512];
  char hpath[512], cpath[512];
  path_in(hpath, sizeof hpath, "headers.bin");
  path_in(cpath, sizeof cpath, "cases.txt");
  FILE *hf = fopen(hpath, "wb"), *cf = fopen(cpath, "w");
  ASSERT_TRUE(hf && cf);
  static uint8_t h[WDS__TARW_HEADER_MAX];
  for (int i = 0; i < 12; i++) {
    uint64_t size = (uint64_t)i * 1000003;
    int64_t mtime = i * 86400 * 365;
    switch (i) {
    case 0:
      snprintf(name, sizeof name, "a.txt");
      break;
    case 1:
      snprintf(name, sizeof name, "%.*s/file.bin", 120, members[5].name);
      break;
    case 2:
      snprintf(name, sizeof name, "%.150s.txt", members[4].name);
      break;
    case 3:
      snprintf(name, sizeof name, "%s", members[5].name);
      break;
    case 4:
      snprintf(name, sizeof name, "%s", members[6].name);
      break;
    case 5:
      snprintf(name, sizeof name, "%s", members[7].name);
      break;
    case 6:
      snprintf(name, sizeof name, "big.bin");
      size = (uint64_t)8 << 30;
      break;
    case 7:
      snprintf(name, sizeof name, "huge.bin");
      size = (uint64_t)1 << 40;
      break;
    case 8:
      memset(name, 'k', 99);
      memcpy(name + 99, "/", 2);
      break;
    case 9:
      memset(name, 'k', 155);
      memcpy(name + 155, "/x.y", 5);
      break;
    case 10:
      memset(name, 'k', 156);
      memcpy(name + 156, "/x.y", 5);
      break;
    default:
      memset(name, 'w', 1000 % 300);
      name[1000 % 300] = 0;
      break;
    }
    size_t len;
    wds__err err;
    ASSERT_EQ_INT(
        wds__tarw_format_header(name, size, mtime, h, sizeof h, &len, &err),
        WDS_OK);
    fwrite(h, 1, len, hf);
    fprintf(cf, "%s\t%llu\t%lld\t%zu\n", name, (unsigned long long)size,
            (long long)mtime, len);
  }
  fclose(hf);
  fclose(cf);
  char cmd[2048];
  snprintf(
      cmd, sizeof cmd,
      "python3 -c 'import sys, tarfile\n"
      "hb = open(sys.argv[1], \"rb\").read(); o = 0\n"
      "for line in open(sys.argv[2], encoding=\"utf-8\"):\n"
      "  n, size, mtime, ln = line.rstrip(\"\\n\").split(\"\\t\")\n"
      "  t = tarfile.TarInfo(n); t.size = int(size); t.mtime = int(mtime)\n"
      "  t.mode = 0o444; t.uname = t.gname = \"\"\n"
      "  try: b = t.tobuf(tarfile.USTAR_FORMAT, \"utf-8\", \"strict\")\n"
      "  except ValueError: b = t.tobuf(tarfile.PAX_FORMAT, \"utf-8\", "
      "\"strict\")\n"
      "  if hb[o:o + int(ln)] != b: print(\"differs:\", n[:40], len(b)); "
      "sys.exit(1)\n"
      "  o += int(ln)\n"
      "print(\"same\")' '%s' '%s'",
      hpath, cpath);
  char *out = run_capture(cmd);
  ASSERT_TRUE(out != NULL);
  int same = strcmp(out, "same\n") == 0;
  if (!same)
    printf("  %s", out);
  free(out);
  ASSERT_TRUE(same);
}

/* A sparse archive whose one member is 8 GiB of zeros: GNU tar and our own
 * parser must both see the pax size. */
TEST(pax_size_over_8gib) {
  char path[512];
  path_in(path, sizeof path, "huge.tar");
  static uint8_t h[WDS__TARW_HEADER_MAX];
  size_t len;
  wds__err err;
  uint64_t size = ((uint64_t)8 << 30) + 3;
  ASSERT_EQ_INT(
      wds__tarw_format_header("huge.bin", size, 0, h, sizeof h, &len, &err),
      WDS_OK);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(fd >= 0);
  int ok = write(fd, h, len) == (ssize_t)len;
  uint64_t total = len + (size + 511) / 512 * 512 + 1024;
  ok = ok && ftruncate(fd, (off_t)total) == 0;
  close(fd);
  ASSERT_TRUE(ok);

  char cmd[700];
  snprintf(cmd, sizeof cmd, "tar --numeric-owner -tvf '%s'", path);
  char *out = run_capture(cmd);
  ASSERT_TRUE(out != NULL);
  int listed = strstr(out, " 8589934595 ") && strstr(out, "huge.bin");
  if (!listed)
    printf("  tar -tv: %s\n", out);
  free(out);
  ASSERT_TRUE(listed);

  /* Our parser: the size comes from the pax record. (Not skipped to the
   * end: that reads 8 GiB of holes, seconds of system time.) */
  wds__stream *s = NULL;
  wds__tar *t = NULL;
  wds__tar_member m;
  int rc = wds__stream_open(path, NULL, &s, &err);
  if (rc == WDS_OK)
    rc = wds__tar_open(s, 1 << 20, 1 << 20, &t, &err);
  if (rc == WDS_OK)
    rc = wds__tar_next(t, &m, &err);
  uint64_t got = rc == WDS_OK ? m.size : 0;
  int name_ok = rc == WDS_OK && strcmp(m.name, "huge.bin") == 0;
  wds__tar_close(t);
  wds__stream_close(s);
  unlink(path);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_TRUE(name_ok);
  ASSERT_EQ_U64(got, size);
}

TEST(streamed_member_and_counters) {
  char path[512];
  path_in(path, sizeof path, "pieces.tar");
  wds__tarw *w;
  wds__err err;
  ASSERT_EQ_INT(wds__tarw_open_path(path, NULL, &w, &err), WDS_OK);
  int rc = wds__tarw_begin(w, "k.txt", 10, &err);
  if (rc == WDS_OK)
    rc = wds__tarw_write(w, "01234", 5, &err);
  if (rc == WDS_OK)
    rc = wds__tarw_write(w, "", 0, &err);
  if (rc == WDS_OK)
    rc = wds__tarw_write(w, "56789", 5, &err);
  if (rc == WDS_OK)
    rc = wds__tarw_end(w, &err);
  if (rc == WDS_OK)
    rc = wds__tarw_finish(w, &err);
  wds__tarw_stats st = {0};
  if (rc == WDS_OK)
    wds__tarw_stats_get(w, &st);
  wds__tarw_close(w);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_U64(st.members, 1);
  ASSERT_EQ_U64(st.tar_bytes, 10240);
  ASSERT_EQ_U64(st.out_bytes, 10240);
  size_t len;
  uint8_t *d = test_read_file(path, &len);
  ASSERT_TRUE(d != NULL);
  int same =
      len == 10240 && memcmp(d + 512, "0123456789", 10) == 0 && d[522] == 0;
  free(d);
  ASSERT_TRUE(same);
}

TEST(misuse_and_errors) {
  char path[600], dir[512];
  path_in(dir, sizeof dir, "errs");
  ASSERT_EQ_INT(mkdir(dir, 0755), 0);
  snprintf(path, sizeof path, "%s/out.tar", dir);
  wds__tarw *w;
  wds__err err;

  /* A bad name is refused without spoiling the archive. */
  ASSERT_EQ_INT(wds__tarw_open_path(path, NULL, &w, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_add(w, "", "x", 1, &err), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err.msg, "empty member name");
  ASSERT_EQ_INT(wds__tarw_add(w, "ok.txt", "x", 1, &err), WDS_OK);
  /* Writing past the declared size is an error, and sticky. */
  ASSERT_EQ_INT(wds__tarw_begin(w, "b.txt", 2, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_write(w, "abc", 3, &err), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err.msg, "declared size");
  ASSERT_EQ_INT(wds__tarw_finish(w, &err), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err.msg, "declared size");
  /* Before close only the temporary file exists; after, nothing. */
  ASSERT_TRUE(!file_exists(path));
  ASSERT_EQ_INT(dir_entries(dir), 1);
  wds__tarw_close(w);
  ASSERT_EQ_INT(dir_entries(dir), 0);

  /* Finishing inside a member. */
  ASSERT_EQ_INT(wds__tarw_open_path(path, NULL, &w, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_begin(w, "c.txt", 5, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_write(w, "ab", 2, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_end(w, &err), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err.msg, "2 of its 5");
  wds__tarw_close(w);
  ASSERT_EQ_INT(dir_entries(dir), 0);

  /* Closing unfinished discards; an existing file is left alone until a
   * finished archive replaces it. */
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs("old", f);
  fclose(f);
  ASSERT_EQ_INT(wds__tarw_open_path(path, NULL, &w, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_add(w, "d.txt", "d", 1, &err), WDS_OK);
  wds__tarw_close(w);
  size_t len;
  uint8_t *d = test_read_file(path, &len);
  int old = d && len == 3 && memcmp(d, "old", 3) == 0;
  free(d);
  ASSERT_TRUE(old);
  ASSERT_EQ_INT(wds__tarw_open_path(path, NULL, &w, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_add(w, "d.txt", "d", 1, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_finish(w, &err), WDS_OK);
  ASSERT_EQ_INT(wds__tarw_add(w, "e.txt", "e", 1, &err), WDS_ERR_INVALID);
  wds__tarw_close(w);
  d = test_read_file(path, &len);
  int replaced = d && len == 10240;
  free(d);
  ASSERT_TRUE(replaced);
  ASSERT_EQ_INT(dir_entries(dir), 1);
  unlink(path);
  rmdir(dir);

  /* Bad options and paths. */
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  o.compression = WDS__TARW_ZSTD;
  o.zstd_level = 1000;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &err), WDS_ERR_INVALID);
  ASSERT_TRUE(w == NULL);
  o = (wds__tarw_options)WDS__TARW_OPTIONS_INIT;
  o.mtime = -5;
  ASSERT_EQ_INT(wds__tarw_open_fd(1, &o, &w, &err), WDS_ERR_INVALID);
  ASSERT_EQ_INT(
      wds__tarw_open_path("/nonexistent-dir-wds/x.tar", NULL, &w, &err),
      WDS_ERR_OPEN);
  ASSERT_CONTAINS(err.msg, "/nonexistent-dir-wds/x.tar");
  ASSERT_TRUE(w == NULL);
  wds__tarw_close(NULL);
}

/* A full device: the write error is reported (by the call that hits it, at
 * the latest finish), never lost. */
TEST(write_error_reported) {
  int fd = open("/dev/full", O_WRONLY);
  if (fd < 0)
    SKIP("no /dev/full");
  for (int comp = 0; comp < 2; comp++) {
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    o.compression = comp ? WDS__TARW_ZSTD : WDS__TARW_NONE;
    wds__tarw *w;
    wds__err err;
    int rc = wds__tarw_open_fd(fd, &o, &w, &err);
    if (rc != WDS_OK)
      break;
    rc = wds__tarw_add(w, "a.txt", "abc", 3, &err);
    if (rc == WDS_OK)
      rc = wds__tarw_finish(w, &err);
    wds__tarw_close(w);
    if (rc != WDS_ERR_IO || !strstr(err.msg, "No space left")) {
      printf("  compression %d: rc %d, \"%s\"\n", comp, rc, err.msg);
      close(fd);
      ASSERT_TRUE(0);
    }
  }
  close(fd);
}

/* The fd stays the caller's and the mtime is the caller's. */
TEST(fd_mode_and_mtime) {
  char path[512];
  path_in(path, sizeof path, "fd.tar");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(fd >= 0);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  o.mtime = 1234567890;
  wds__tarw *w;
  wds__err err;
  int rc = wds__tarw_open_fd(fd, &o, &w, &err);
  if (rc == WDS_OK)
    rc = wds__tarw_add(w, "t.txt", "t", 1, &err);
  if (rc == WDS_OK)
    rc = wds__tarw_finish(w, &err);
  wds__tarw_close(w);
  int still_open = write(fd, "", 0) == 0;
  close(fd);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_TRUE(still_open);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "TZ=UTC tar --numeric-owner -tvf '%s'", path);
  char *out = run_capture(cmd);
  ASSERT_TRUE(out != NULL);
  int ok = strstr(out, "2009-02-13 23:31 t.txt") != NULL;
  if (!ok)
    printf("  tar -tv: %s\n", out);
  free(out);
  ASSERT_TRUE(ok);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/wds-test-tarw-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) {
    printf("cannot create a temporary directory: %s\n", strerror(errno));
    return 1;
  }
  make_members();
  RUN(plain_round_trip);
  RUN(zstd_round_trip);
  RUN(zstd_frames);
  RUN(gzip_round_trip);
  RUN(output_is_deterministic);
  RUN(header_layout);
  RUN(headers_match_tarfile);
  RUN(pax_size_over_8gib);
  RUN(streamed_member_and_counters);
  RUN(misuse_and_errors);
  RUN(write_error_reported);
  RUN(fd_mode_and_mtime);
  for (int i = 0; i < NMEMBERS; i++)
    free(members[i].data);
  test_remove_tree(tmpdir);
  return test_summary();
}
