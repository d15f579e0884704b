/* test_reader.c — the tar parser and sample grouping, on tar bytes crafted
 * here header by header (so each format feature is exercised on its own),
 * read back through the public reader API. */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/mem.h"
#include "pipeline/reader_internal.h"
#include "shards/stream.h"
#include "test.h"
#include "wds/reader.h"

/* ---- building tars in memory ---- */

typedef struct tb {
  uint8_t *d;
  size_t n, cap;
} tb;

static void tb_reserve(tb *b, size_t more) {
  if (b->n + more > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->n + more)
      c *= 2;
    b->d = realloc(b->d, c);
    b->cap = c;
  }
}

static void tb_bytes(tb *b, const void *p, size_t n) {
  tb_reserve(b, n);
  memcpy(b->d + b->n, p, n);
  b->n += n;
}

static void tb_pad(tb *b) {
  size_t r = b->n % 512;
  if (r) {
    tb_reserve(b, 512 - r);
    memset(b->d + b->n, 0, 512 - r);
    b->n += 512 - r;
  }
}

enum { CK_UNSIGNED, CK_SIGNED, CK_BAD };

/* A header; prefix may be NULL; size_field overrides the size text. */
static void tb_header_ex(tb *b, const char *name, char type, uint64_t size,
                         const char *prefix, int base256, int ck,
                         const char *size_field) {
  uint8_t h[512];
  memset(h, 0, sizeof h);
  memcpy(h, name, strnlen(name, 100));
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  if (size_field)
    memcpy(h + 124, size_field, strnlen(size_field, 12));
  else if (base256) {
    h[124] = 0x80;
    for (int i = 0; i < 8; i++)
      h[135 - i] = (uint8_t)(size >> (8 * i));
  } else {
    snprintf((char *)h + 124, 12, "%011llo",
             (unsigned long long)(size & 077777777777ull));
  }
  memcpy(h + 136, "00000000000", 12);
  h[156] = (uint8_t)type;
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  if (prefix)
    memcpy(h + 345, prefix, strnlen(prefix, 155));
  if (ck == CK_SIGNED)
    h[300] = 0xE9; /* a high byte in gname makes the two sums differ */
  memset(h + 148, ' ', 8);
  long sum = 0;
  for (int i = 0; i < 512; i++)
    sum += ck == CK_SIGNED ? (int8_t)h[i] : h[i];
  if (ck == CK_BAD)
    sum += 1;
  snprintf((char *)h + 148, 8, "%06lo", (unsigned long)sum & 0777777ul);
  h[155] = ' ';
  tb_bytes(b, h, 512);
}

static void tb_header(tb *b, const char *name, char type, uint64_t size) {
  tb_header_ex(b, name, type, size, NULL, 0, CK_UNSIGNED, NULL);
}

static void tb_file(tb *b, const char *name, const char *data) {
  tb_header(b, name, '0', strlen(data));
  tb_bytes(b, data, strlen(data));
  tb_pad(b);
}

/* A member with size bytes of a repeating pattern seeded by seed. */
static void tb_file_n(tb *b, const char *name, size_t size, int seed) {
  tb_header(b, name, '0', size);
  tb_reserve(b, size);
  for (size_t i = 0; i < size; i++)
    b->d[b->n + i] = (uint8_t)(i * 31 + (size_t)seed);
  b->n += size;
  tb_pad(b);
}

static void tb_pax(tb *b, char type, const char *key, const char *value) {
  char rec[4096];
  size_t body = strlen(key) + strlen(value) + 3; /* ' ' '=' '\n' */
  size_t len = body + 1;
  while (len != body + (size_t)snprintf(NULL, 0, "%zu", len))
    len = body + (size_t)snprintf(NULL, 0, "%zu", len);
  snprintf(rec, sizeof rec, "%zu %s=%s\n", len, key, value);
  tb_header(b, "././@PaxHeader", type, strlen(rec));
  tb_bytes(b, rec, strlen(rec));
  tb_pad(b);
}

/* A pax header with one record whose value is n raw bytes (NULs too). */
static void tb_pax_bytes(tb *b, char type, const char *key, const char *value,
                         size_t n) {
  char rec[4096];
  size_t body = strlen(key) + n + 3;
  size_t len = body + 1;
  while (len != body + (size_t)snprintf(NULL, 0, "%zu", len))
    len = body + (size_t)snprintf(NULL, 0, "%zu", len);
  size_t at = (size_t)snprintf(rec, sizeof rec, "%zu %s=", len, key);
  memcpy(rec + at, value, n);
  rec[at + n] = '\n';
  tb_header(b, "././@PaxHeader", type, len);
  tb_bytes(b, rec, len);
  tb_pad(b);
}

static void tb_end(tb *b) {
  uint8_t z[1024] = {0};
  tb_bytes(b, z, sizeof z);
}

static char *tb_save(tb *b) {
  char *path = strdup("/tmp/wds-test-reader-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, b->d, b->n) != (ssize_t)b->n)
    abort();
  close(fd);
  free(b->d);
  b->d = NULL;
  b->n = b->cap = 0;
  return path;
}

/* ---- reading back ---- */

typedef struct listing {
  char text[8192]; /* "key:ext=size,ext=size;key:..." */
  int rc;          /* the status that ended the stream */
  char err[1024];
  int samples;
} listing;

static void list_cfg(const wds_reader_config *cfg, listing *out) {
  memset(out, 0, sizeof *out);
  wds_reader *r;
  if ((out->rc = wds_reader_open(cfg, &r)) != WDS_OK)
    return;
  const wds_sample *s;
  size_t len = 0;
  while ((out->rc = wds_reader_next(r, &s)) == WDS_OK) {
    out->samples++;
    len += (size_t)snprintf(out->text + len, sizeof out->text - len,
                            "%s:", s->key);
    for (size_t i = 0; i < s->field_count; i++)
      len += (size_t)snprintf(out->text + len, sizeof out->text - len,
                              "%s%s=%zu", i ? "," : "", s->fields[i].ext,
                              s->fields[i].size_bytes);
    len += (size_t)snprintf(out->text + len, sizeof out->text - len, ";");
  }
  snprintf(out->err, sizeof out->err, "%s", wds_last_error());
  wds_reader_close(r);
}

static void list_urls(const char *const *urls, size_t n, size_t buffer,
                      size_t max_sample, listing *out) {
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = n;
  cfg.buffer_size_bytes = buffer;
  cfg.max_sample_bytes = max_sample;
  list_cfg(&cfg, out);
}

static void list_file(const char *path, listing *out) {
  const char *urls[] = {path};
  list_urls(urls, 1, 0, 0, out);
  if (getenv("WDS_TEST_VERBOSE"))
    printf("  [%d] %s | %s\n", out->rc, out->text, out->err);
}

/* ---- tests ---- */

TEST(groups_consecutive_members_by_key) {
  tb b = {0};
  tb_file(&b, "a/x.jpg", "JPG");
  tb_file(&b, "a/x.cls", "3");
  tb_file(&b, "a/y.jpg", "J2");
  tb_file(&b, "a/x.txt", "again"); /* not adjacent: a new sample */
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "a/x:jpg=3,cls=1;a/y:jpg=2;a/x:txt=5;");
  unlink(p);
  free(p);
}

TEST(key_rules_match_webdataset) {
  /* Expected (key, ext) pairs were checked against webdataset 1.0.2's
   * base_plus_ext and metadata rules. */
  tb b = {0};
  const char *names[] = {"a.b/c/.x",     "a/b/.y",    ".x",        "a..b",
                         "dir.v1/s.JPG", "a/b",       "a/.b.c",    "a.b/.x",
                         "__k__.txt",    "m.Tar.GZ",  "__index__", "___",
                         "__a__/b.txt",  "x/__a__.z", "__a__b__",  "q.seg.PNG"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    tb_file(&b, names[i], "d");
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "a.b/c/:x=1;a/b/:y=1;a:.b=1;dir.v1/s:jpg=1;a/:b.c=1;"
                       "__k__:txt=1;m:tar.gz=1;x/__a__:z=1;q:seg.png=1;");
  unlink(p);
  free(p);
}

TEST(ustar_prefix_gnu_longname_and_pax_path) {
  char longname[300];
  memset(longname, 'n', sizeof longname);
  memcpy(longname + 250, ".jpg", 5);
  tb b = {0};
  tb_header_ex(&b, "file.cls", '0', 1, "some/prefix", 0, CK_UNSIGNED, NULL);
  tb_bytes(&b, "7", 1);
  tb_pad(&b);
  tb_header(&b, "././@LongLink", 'L', strlen(longname) + 1);
  tb_bytes(&b, longname, strlen(longname) + 1);
  tb_pad(&b);
  tb_file(&b, "truncated-name-in-header", "abc");
  tb_pax(&b, 'x', "path", "pax/dir.v2/sample.PNG");
  tb_file(&b, "ignored", "png!");
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  char expect[600];
  snprintf(expect, sizeof expect,
           "some/prefix/file:cls=1;%.250s:jpg=3;pax/dir.v2/sample:png=4;",
           longname);
  ASSERT_STREQ(l.text, expect);
  unlink(p);
  free(p);
}

TEST(pax_size_base256_and_signed_checksum) {
  tb b = {0};
  /* pax size overrides a header size of 0 */
  tb_pax(&b, 'x', "size", "5");
  tb_header(&b, "s1.txt", '0', 0);
  tb_bytes(&b, "hello", 5);
  tb_pad(&b);
  /* base-256 size field */
  tb_header_ex(&b, "s2.bin", '0', 700, NULL, 1, CK_UNSIGNED, NULL);
  tb_reserve(&b, 700);
  memset(b.d + b.n, 'z', 700);
  b.n += 700;
  tb_pad(&b);
  /* a header whose checksum was computed with signed chars */
  tb_header_ex(&b, "s3.txt", '0', 2, NULL, 0, CK_SIGNED, NULL);
  tb_bytes(&b, "ok", 2);
  tb_pad(&b);
  /* a global header with a key we ignore changes nothing */
  tb_pax(&b, 'g', "comment", "made by hand");
  tb_file(&b, "s4.txt", "four");
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "s1:txt=5;s2:bin=700;s3:txt=2;s4:txt=4;");
  unlink(p);
  free(p);
}

TEST(non_regular_members_are_skipped) {
  tb b = {0};
  tb_header(&b, "d.dir/", '5', 0);
  tb_header(&b, "link.jpg", '2', 999); /* symlink: size ignored, no data */
  tb_header(&b, "hard.jpg", '1', 0);
  tb_header(&b, "fifo.x", '6', 0);
  tb_header(&b, "olddir.v7/", '\0', 0); /* v7 directory */
  tb_file_n(&b, "vol.lbl", 3000, 1);
  b.d[b.n - 3072 - 512 + 156] = 'V'; /* make it an unknown type, fix sum */
  {
    uint8_t *h = b.d + b.n - 3072 - 512;
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
      sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum & 0777777u);
    h[155] = ' ';
  }
  tb_file(&b, "real.jpg", "data");
  tb_header(&b, "v7file.txt", '\0', 3); /* v7 regular file */
  tb_bytes(&b, "v7!", 3);
  tb_pad(&b);
  tb_file(&b, "cont.txt", "c");
  b.d[b.n - 1024 + 156] = '7'; /* contiguous file counts as regular */
  {
    uint8_t *h = b.d + b.n - 1024;
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
      sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum & 0777777u);
    h[155] = ' ';
  }
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "real:jpg=4;v7file:txt=3;cont:txt=1;");
  unlink(p);
  free(p);
}

TEST(large_members_with_a_small_window) {
  /* 64 KiB window: members larger than it, and a large skipped member in
   * the middle of a sample, which must not disturb the held fields. */
  tb b = {0};
  tb_file_n(&b, "big/a.bin", 300000, 1);
  tb_file_n(&b, "big/a-skipped-no-extension", 500000, 2);
  tb_file_n(&b, "big/a.more", 200000, 3);
  tb_file_n(&b, "__meta__", 400000, 4);
  tb_file_n(&b, "big/b.bin", 70000, 5);
  tb_end(&b);
  char *p = tb_save(&b);
  const char *urls[] = {p};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 1;
  cfg.buffer_size_bytes = 65536;
  wds_reader *r;
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  const wds_sample *s;
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "big/a");
  ASSERT_EQ_INT(s->field_count, 2);
  ASSERT_EQ_INT(s->fields[0].size_bytes, 300000);
  ASSERT_EQ_INT(s->fields[1].size_bytes, 200000);
  const int seeds[] = {1, 3};
  for (int f = 0; f < 2; f++)
    for (size_t i = 0; i < s->fields[f].size_bytes; i++)
      if (s->fields[f].data[i] != (uint8_t)(i * 31 + (size_t)seeds[f])) {
        TEST_FAIL_("field %d byte %zu differs", f, i);
        wds_reader_close(r);
        return;
      }
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "big/b");
  ASSERT_EQ_INT(s->fields[0].data[69999], (uint8_t)(69999 * 31 + 5));
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF);
  wds_reader_stats st;
  wds_reader_stats_get(r, &st);
  ASSERT_EQ_U64(st.samples, 2);
  ASSERT_EQ_U64(st.field_bytes, 570000);
  wds_reader_close(r);
  /* The same with a sample limit below the first sample's size. */
  listing l;
  list_urls(urls, 1, 65536, 400000, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  ASSERT_CONTAINS(l.err, "big/a.more");
  /* Cut inside the large skipped member: the skip must not run past the end
   * (a seek would not notice), and the error names that member. */
  ASSERT_EQ_INT(truncate(p, 512 + 300032 + 512 + 250000), 0);
  listing cut;
  list_urls(urls, 1, 65536, 0, &cut);
  ASSERT_EQ_INT(cut.rc, WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(cut.err, "\"big/a-skipped-no-extension\" at offset 300544");
  ASSERT_CONTAINS(cut.err, "250000 of 500000");
  ASSERT_EQ_INT(cut.samples, 0);
  unlink(p);
  free(p);
}

TEST(errors_name_member_and_offset) {
  tb b = {0};
  tb_file(&b, "a.txt", "aaaa");
  tb_file_n(&b, "b.bin", 2000, 1);
  tb_end(&b);
  size_t full = b.n;
  uint8_t copy[8192];
  memcpy(copy, b.d, full);
  char *p = tb_save(&b);
  listing l;
#define WRITE_PREFIX(n)                                                        \
  do {                                                                         \
    FILE *f_ = fopen(p, "wb");                                                 \
    fwrite(copy, 1, (n), f_);                                                  \
    fclose(f_);                                                                \
  } while (0)

  /* Cut inside the second header. */
  WRITE_PREFIX(1024 + 100);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(l.err, "offset 1024");
  ASSERT_CONTAINS(l.err, p);
  ASSERT_EQ_INT(l.samples, 0); /* "a" could be partial: never returned */

  /* Cut inside the data of b.bin. */
  WRITE_PREFIX(1536 + 1000);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(l.err, "\"b.bin\" at offset 1024");
  ASSERT_CONTAINS(l.err, "1000 of 2000");

  /* Cut after the last member: no end-of-archive marker. */
  WRITE_PREFIX(1536 + 2048);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(l.err, "end-of-archive");

  /* One zero block then the end: accepted, as tar and Python do. */
  WRITE_PREFIX(full - 512);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "a:txt=4;b:bin=2000;");

  /* A damaged second header. */
  copy[1024 + 10] ^= 0x40;
  WRITE_PREFIX(full);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(l.err, "checksum at offset 1024");
#undef WRITE_PREFIX
  unlink(p);
  free(p);
}

TEST(bad_size_field_and_sparse) {
  tb b = {0};
  tb_header_ex(&b, "a.txt", '0', 0, NULL, 0, CK_UNSIGNED, "00000x00012");
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(l.err, "size field");
  ASSERT_CONTAINS(l.err, "\"a.txt\" at offset 0");
  unlink(p);
  free(p);
  tb_header(&b, "sparse.bin", 'S', 0);
  tb_end(&b);
  p = tb_save(&b);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_FORMAT);
  ASSERT_CONTAINS(l.err, "sparse");
  unlink(p);
  free(p);
}

TEST(duplicate_extension_then_continue) {
  tb b = {0};
  tb_file(&b, "a.jpg", "1");
  tb_file(&b, "a.JPG", "2");
  tb_file(&b, "a.cls", "3"); /* the rest of key "a" is dropped too */
  tb_file(&b, "b.jpg", "4");
  tb_end(&b);
  char *p = tb_save(&b);
  const char *urls[] = {p};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 1;
  wds_reader *r;
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  const wds_sample *s;
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_DUPLICATE);
  ASSERT_CONTAINS(wds_last_error(), "\"a.JPG\" at offset 1024");
  ASSERT_CONTAINS(wds_last_error(), "duplicate");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "b");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF);
  wds_reader_close(r);
  unlink(p);
  free(p);
}

TEST(samples_never_span_shards_and_errors_skip_to_next_shard) {
  tb b = {0};
  tb_file(&b, "k.jpg", "1");
  tb_end(&b);
  char *p1 = tb_save(&b);
  tb_file(&b, "k.cls", "2");
  tb_end(&b);
  char *p2 = tb_save(&b);
  const char *urls[] = {p1, "/nonexistent/wds-shard.tar", p2};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 3;
  wds_reader *r;
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  const wds_sample *s;
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "k");
  ASSERT_EQ_INT(s->field_count, 1);
  ASSERT_EQ_INT(s->shard_index, 0);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_OPEN);
  ASSERT_CONTAINS(wds_last_error(), "/nonexistent/wds-shard.tar");
  ASSERT_CONTAINS(wds_last_error(), "No such file");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "k");
  ASSERT_STREQ(s->fields[0].ext, "cls");
  ASSERT_EQ_INT(s->shard_index, 2);
  ASSERT_STREQ(s->url, p2);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF);
  wds_reader_close(r);
  unlink(p1);
  unlink(p2);
  free(p1);
  free(p2);
}

TEST(empty_and_zero_only_streams) {
  tb b = {0};
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_EQ_INT(l.samples, 0);
  ASSERT_EQ_INT(truncate(p, 0), 0);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(l.err, "empty");
  unlink(p);
  free(p);
}

TEST(pipe_sources_and_exit_status) {
  tb b = {0};
  tb_file(&b, "p.txt", "piped");
  tb_end(&b);
  char *p = tb_save(&b);
  char cmd[512], failing[600];
  snprintf(cmd, sizeof cmd, "pipe:cat %s", p);
  snprintf(failing, sizeof failing, "pipe:cat %s; exit 7", p);
  listing l;
  const char *u1[] = {cmd};
  list_urls(u1, 1, 0, 0, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "p:txt=5;");
  const char *u2[] = {failing};
  list_urls(u2, 1, 0, 0, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_COMMAND);
  ASSERT_CONTAINS(l.err, "exit status 7");
  ASSERT_EQ_INT(l.samples, 0); /* the data is not trusted */
  /* Stopping early: the command is stopped, no error, no hang. */
  const char *u3[] = {"pipe:yes | head -c 100000000"};
  list_urls(u3, 1, 0, 0, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_FORMAT);
  unlink(p);
  free(p);
}

TEST(skipped_entries_do_not_fill_the_window) {
  /* 20,000 directory headers (10 MB) and 2,000 files without an extension
   * around and inside samples, read with a 64 KiB window and a 1 MiB sample
   * limit: none of it is held, so nothing overflows. */
  tb b = {0};
  for (int i = 0; i < 10000; i++)
    tb_header(&b, "d/", '5', 0);
  tb_file(&b, "s1.txt", "one");
  for (int i = 0; i < 1000; i++)
    tb_file(&b, "README", "no extension: skipped");
  tb_file(&b, "s1.cls", "1");
  for (int i = 0; i < 10000; i++)
    tb_header(&b, "d/", '5', 0);
  for (int i = 0; i < 1000; i++)
    tb_file(&b, "__meta__", "metadata: skipped");
  tb_file(&b, "s2.txt", "two");
  tb_end(&b);
  char *p = tb_save(&b);
  const char *urls[] = {p};
  listing l;
  list_urls(urls, 1, 65536, 1 << 20, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "s1:txt=3,cls=1;s2:txt=3;");
  unlink(p);
  free(p);
}

/* Writes n bytes to a new temp file; returns its path. */
static char *save_bytes(const void *data, size_t n) {
  tb b = {0};
  tb_bytes(&b, data, n);
  return tb_save(&b);
}

static void small_tar(tb *b) {
  tb_file(b, "z.txt", "zipped");
  tb_end(b);
}

TEST(small_zstd_shard) {
  /* Smaller than the 512 bytes peeked for detection. */
  tb b = {0};
  small_tar(&b);
  uint8_t z[2048];
  size_t zn = ZSTD_compress(z, sizeof z, b.d, b.n, 19);
  ASSERT_TRUE(!ZSTD_isError(zn) && zn < 512);
  free(b.d);
  char *p = save_bytes(z, zn);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "z:txt=6;");
  unlink(p);
  free(p);
}

/* A zstd frame of raw blocks whose header asks for a 2^window_log window,
 * as `zstd --long=N` writes from a pipe: no content size (with one, libzstd
 * decodes a frame that fits the output buffer without any window). The
 * decoder reserves the window but touches only what the blocks fill. */
static size_t zstd_raw_frame(uint8_t *out, const uint8_t *data, size_t n,
                             int window_log) {
  size_t o = 0;
  memcpy(out, "\x28\xb5\x2f\xfd", 4);
  o = 4;
  out[o++] = 0x00; /* no content size, no checksum: a window descriptor */
  out[o++] = (uint8_t)((window_log - 10) << 3);
  size_t block = (size_t)1 << (window_log < 17 ? window_log : 17);
  size_t at = 0;
  do {
    size_t k = n - at < block ? n - at : block;
    uint32_t h = (uint32_t)(k << 3) | (at + k == n); /* raw, last */
    out[o++] = (uint8_t)h;
    out[o++] = (uint8_t)(h >> 8);
    out[o++] = (uint8_t)(h >> 16);
    memcpy(out + o, data + at, k);
    o += k;
    at += k;
  } while (at < n);
  return o;
}

TEST(zstd_window_limit_is_named_and_can_be_raised) {
  /* Guards against a valid `zstd --long=31` shard refused as "corrupt zstd
   * data". Now: WDS_ERR_LIMIT with the frame's window, the limit and the
   * option; max_window_bytes raises it (and lowers it). */
  tb b = {0};
  tb_file(&b, "w.txt", "window");
  tb_file_n(&b, "w.bin", 3000, 5);
  tb_end(&b);
  uint8_t *z = malloc(2 * b.n + 64);
  size_t zn = zstd_raw_frame(z, b.d, b.n, 28);
  char *p28 = save_bytes(z, zn);
  /* Two frames: the second, at offset `first`, asks for 2 GiB. */
  size_t first = zstd_raw_frame(z, b.d, 1024, 20);
  zn = first + zstd_raw_frame(z + first, b.d + 1024, b.n - 1024, 31);
  char *p31 = save_bytes(z, zn);
  free(z);
  free(b.d);
  const char *expect = "w:txt=6,bin=3000;";
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = (const char *const[]){p28};
  cfg.url_count = 1;
  listing l;
  list_cfg(&cfg, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  ASSERT_CONTAINS(l.err, p28);
  ASSERT_CONTAINS(l.err, "zstd frame at compressed offset 0 needs a 256 MiB "
                         "window (as zstd --long=28 writes), over the limit "
                         "of 128 MiB");
  ASSERT_CONTAINS(l.err, "--max-window 256M");
  ASSERT_CONTAINS(l.err, "max_window_bytes");
  cfg.max_window_bytes = ((uint64_t)256 << 20) - 1; /* exact, not 2^N */
  list_cfg(&cfg, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  ASSERT_CONTAINS(l.err, "over the limit of 268435455 bytes");
  cfg.max_window_bytes = (uint64_t)256 << 20;
  list_cfg(&cfg, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, expect);

  cfg.urls = (const char *const[]){p31};
  cfg.max_window_bytes = 0;
  list_cfg(&cfg, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  char at[96];
  snprintf(at, sizeof at,
           "zstd frame at compressed offset %zu needs a 2 GiB window", first);
  ASSERT_CONTAINS(l.err, at);
  ASSERT_CONTAINS(l.err, "--max-window 2G");
  cfg.max_window_bytes = (uint64_t)2 << 30;
  list_cfg(&cfg, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, expect);
  /* No frame needs more than libzstd's maximum, which applies. */
  cfg.max_window_bytes = UINT64_MAX;
  list_cfg(&cfg, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  /* A lower limit refuses the 1 MiB frame before it. */
  cfg.max_window_bytes = 1000;
  list_cfg(&cfg, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  ASSERT_CONTAINS(l.err, "offset 0 needs a 1 MiB window (as zstd --long=20 "
                         "writes), over the limit of 1 KiB");
  unlink(p28);
  free(p28);
  unlink(p31);
  free(p31);
}

static size_t gzip_bytes(const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                         int level) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    return 0;
  zs.next_in = (uint8_t *)in;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  int r = deflate(&zs, Z_FINISH);
  size_t len = cap - zs.avail_out;
  deflateEnd(&zs);
  return r == Z_STREAM_END ? len : 0;
}

TEST(gzip_checksum_and_members) {
  tb b = {0};
  small_tar(&b);
  uint8_t gz[8192];
  /* Level 0: stored blocks, so a payload byte can be flipped in place. */
  size_t n = gzip_bytes(b.d, b.n, gz, sizeof gz, 0);
  ASSERT_TRUE(n > 0);
  /* Two members (tar then padding zeros) read as one stream. */
  size_t n2 = gzip_bytes(b.d, b.n, gz, sizeof gz, 6);
  uint8_t *two = malloc(n2 + 64);
  memcpy(two, gz, n2);
  uint8_t zeros[1024] = {0};
  size_t n3 = gzip_bytes(zeros, sizeof zeros, two + n2, 64, 6);
  ASSERT_TRUE(n3 > 0);
  char *p = save_bytes(two, n2 + n3);
  free(two);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "z:txt=6;");
  unlink(p);
  free(p);

  n = gzip_bytes(b.d, b.n, gz, sizeof gz, 0);
  uint8_t *hit = memmem(gz, n, "zipped", 6);
  ASSERT_TRUE(hit != NULL);
  hit[0] = 'Z'; /* the CRC-32 no longer matches */
  p = save_bytes(gz, n);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_DECOMPRESS);
  ASSERT_CONTAINS(l.err, "gzip");
  ASSERT_CONTAINS(l.err, "at offset"); /* where in the tar it was noticed */
  ASSERT_EQ_INT(l.samples, 0);
  unlink(p);
  free(p);

  hit[0] = 'z';
  p = save_bytes(gz, n - 3); /* cut inside the trailer */
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_TRUNCATED);
  unlink(p);
  free(p);
  free(b.d);
}

TEST(decompression_memory_and_bombs_are_bounded) {
  listing l;
  /* A 24-byte xz stream whose header asks for a 4 GiB dictionary. */
  list_file(WDS_SOURCE_DIR "/tests/fuzz/corpus/reader/crash-xz-dict4g", &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  ASSERT_CONTAINS(l.err, "MiB to decompress");
  /* A tar followed by 5 GiB of compressed zeros: read up to the marker
   * plus a bounded tail, not to the end. */
  list_file(WDS_SOURCE_DIR "/tests/fuzz/corpus/reader/crash-bz2-drain-bomb",
            &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_TRUE(l.samples > 0);
}

TEST(fields_per_sample_are_bounded) {
  tb b = {0};
  const char *names[] = {"k.a", "k.b", "k.c", "k.d", "j.a"};
  for (size_t i = 0; i < 5; i++)
    tb_file(&b, names[i], "x");
  tb_end(&b);
  char *p = tb_save(&b);
  const char *urls[] = {p};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 1;
  cfg.max_fields = 3;
  wds_reader *r;
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  const wds_sample *s;
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(), "more than 3 fields");
  ASSERT_CONTAINS(wds_last_error(), "\"k.d\" at offset 3072");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF); /* the shard is abandoned */
  wds_reader_close(r);
  unlink(p);
  free(p);
}

TEST(pipe_status_checked_for_every_codec) {
  /* bzip2 (libarchive) and lzma-alone decoders end before their source:
   * the command's exit status must still be read. Its stdin is /dev/null. */
  tb b = {0};
  small_tar(&b);
  char *p = tb_save(&b);
  const char *tools[] = {"bzip2 -c", "xz --format=lzma -c", "gzip -c",
                         "zstd -q -c"};
  for (size_t i = 0; i < sizeof tools / sizeof *tools; i++) {
    char ok[512], bad[512];
    snprintf(ok, sizeof ok,
             "pipe:%s %s; [ \"$(readlink /proc/self/fd/0)\" = /dev/null ]",
             tools[i], p);
    snprintf(bad, sizeof bad, "pipe:%s %s; exit 4", tools[i], p);
    listing l;
    const char *u1[] = {ok};
    list_urls(u1, 1, 0, 0, &l);
    if (l.rc != WDS_EOF || strcmp(l.text, "z:txt=6;") != 0) {
      TEST_FAIL_("%s: rc %d, \"%s\", %s", tools[i], l.rc, l.text, l.err);
      break;
    }
    const char *u2[] = {bad};
    list_urls(u2, 1, 0, 0, &l);
    if (l.rc != WDS_ERR_COMMAND || !strstr(l.err, "exit status 4")) {
      TEST_FAIL_("%s: rc %d, %s", tools[i], l.rc, l.err);
      break;
    }
  }
  unlink(p);
  free(p);
}

TEST(sample_limit_counts_the_sample_only) {
  /* The limit is data + 2 strings per field: "x.bin" holds 3,000,000 + 5 +
   * 3 + 2 bytes. Padding, look-ahead and skipped entries do not count. */
  tb b = {0};
  tb_file_n(&b, "x.bin", 3000000, 1);
  tb_file_n(&b, "__meta__", 60000, 2);
  tb_file(&b, "y.txt", "y");
  tb_end(&b);
  char *p = tb_save(&b);
  const char *urls[] = {p};
  listing l;
  list_urls(urls, 1, 65536, 3000000 + 12, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "x:bin=3000000;y:txt=1;");
  list_urls(urls, 1, 65536, 3000000 + 11, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  ASSERT_CONTAINS(l.err, "\"x.bin\" at offset 0");
  ASSERT_CONTAINS(l.err, "max_sample_bytes");
  /* A limit below the read buffer size is still the limit. */
  list_urls(urls, 1, 0, 1000, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_LIMIT);
  unlink(p);
  free(p);
}

TEST(pax_and_gnu_corner_cases_match_tarfile) {
  tb b = {0};
  /* Within one pax header the last record wins; trailing '/' is removed. */
  char rec[256];
  snprintf(rec, sizeof rec, "%s", "16 path=first.a\n17 path=second.b\n");
  tb_header(&b, "././@PaxHeader", 'x', strlen(rec));
  tb_bytes(&b, rec, strlen(rec));
  tb_pad(&b);
  tb_file(&b, "ignored", "1");
  tb_pax(&b, 'x', "path", "dir/img.jpg/");
  tb_file(&b, "ignored2", "22");
  /* A pax size before a 'K' entry belongs to the member after it. */
  tb_pax(&b, 'x', "size", "3");
  tb_header(&b, "././@LongLink", 'K', 10);
  tb_bytes(&b, "link-name", 10);
  tb_pad(&b);
  tb_header(&b, "after.k", '0', 0);
  tb_bytes(&b, "abc", 3);
  tb_pad(&b);
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "second:b=1;dir/img:jpg=2;after:k=3;");
  unlink(p);
  free(p);
}

TEST(nul_in_extension_names_is_an_error) {
  /* Guards against a pax path "a\0b.txt" dropping the member silently (its
   * name cut to "a", which has no extension); Python's tarfile keeps it. */
  tb b = {0};
  tb_file(&b, "first.txt", "1");
  tb_pax_bytes(&b, 'x', "path", "a\0b.txt", 7);
  tb_file(&b, "ignored", "22");
  tb_file(&b, "after.txt", "333");
  tb_end(&b);
  char *p = tb_save(&b);
  listing l;
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_FORMAT);
  ASSERT_STREQ(l.text, ""); /* "first" might have had more members */
  ASSERT_CONTAINS(l.err, p);
  ASSERT_CONTAINS(l.err, "member \"a\\0b.txt\" at offset 1024");
  ASSERT_CONTAINS(l.err, "pax path record");
  ASSERT_CONTAINS(l.err, "NUL byte at position 1");
  unlink(p);
  free(p);

  /* A global pax path applies to the members that have none of their own. */
  tb_pax_bytes(&b, 'g', "path", "g\0.jpg", 6);
  tb_file(&b, "named.jpg", "1");
  tb_end(&b);
  p = tb_save(&b);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_FORMAT);
  ASSERT_CONTAINS(l.err, "member \"g\\0.jpg\" at offset 1024");
  ASSERT_CONTAINS(l.err, "global pax path record");
  unlink(p);
  free(p);

  /* A GNU long name is its bytes up to a NUL (and NUL padding); more name
   * after the NUL is damage tar would hide by cutting the name. */
  tb_header(&b, "././@LongLink", 'L', 12);
  tb_bytes(&b, "x\0y.jpg\0\0\0\0\0", 12);
  tb_pad(&b);
  tb_file(&b, "short", "data");
  tb_end(&b);
  p = tb_save(&b);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(l.err, "member \"x\\0y.jpg\" at offset 0");
  ASSERT_CONTAINS(l.err, "GNU long name record");
  unlink(p);
  free(p);

  /* Not errors: trailing NULs after a long name; a NUL in the name of a
   * link or directory (no data, skipped anyway) or in a pax linkpath (wds
   * reads no link targets); an inner path overridden by the outer one. */
  tb_header(&b, "././@LongLink", 'L', 12);
  tb_bytes(&b, "ok.jpg\0\0\0\0\0\0", 12);
  tb_pad(&b);
  tb_file(&b, "short", "data");
  tb_pax_bytes(&b, 'x', "path", "l\0nk.jpg", 8);
  tb_header(&b, "link.jpg", '2', 0);
  tb_pax_bytes(&b, 'x', "path", "d\0r.d", 6);
  tb_header(&b, "dir.d/", '5', 0);
  tb_pax_bytes(&b, 'x', "linkpath", "t\0rget", 7);
  tb_header(&b, "sym.jpg", '2', 0);
  tb_pax_bytes(&b, 'x', "linkpath", "t\0rget", 7);
  tb_file(&b, "reg.txt", "r");
  tb_pax(&b, 'x', "path", "outer.cls");
  tb_pax_bytes(&b, 'x', "path", "in\0ner.cls", 9);
  tb_file(&b, "ignored", "7");
  tb_end(&b);
  p = tb_save(&b);
  list_file(p, &l);
  ASSERT_EQ_INT(l.rc, WDS_EOF);
  ASSERT_STREQ(l.text, "ok:jpg=4;reg:txt=1;outer:cls=1;");
  unlink(p);
  free(p);
}

TEST(endless_input_after_the_archive_ends) {
  /* Endless zeros after a compressed tar: gzip skips them as padding, xz
   * rejects nothing it has not read; the drain budget is in source bytes,
   * so both end (this hung when it counted decompressed bytes only). */
  tb b = {0};
  small_tar(&b);
  char *p = tb_save(&b);
  const char *tools[] = {"gzip -c", "xz -c"};
  for (size_t i = 0; i < 2; i++) {
    char url[512];
    snprintf(url, sizeof url, "pipe:%s %s; cat /dev/zero", tools[i], p);
    const char *u[] = {url};
    listing l;
    list_urls(u, 1, 0, 0, &l);
    if (l.rc != WDS_EOF || strcmp(l.text, "z:txt=6;") != 0) {
      TEST_FAIL_("%s: rc %d, \"%s\", %s", tools[i], l.rc, l.text, l.err);
      break;
    }
  }
  unlink(p);
  free(p);
}

/* ---- the reader's sink (pipeline/reader_internal.h) ---- */

/* The loader's sink: ".bin" into a buffer of its own, ".skip" skipped, the
 * rest in the window; "fail" makes the next ".bin" fail to allocate;
 * "made": each buffer is written first and said made (INTO_MADE, as a
 * recycled block), so the reader must not populate it. */
typedef struct sink_ctx {
  void *bufs[64];
  int n;
  int fail;
  int made;
} sink_ctx;

static int test_sink(void *ctx, const char *ext, uint64_t size, void **dst) {
  sink_ctx *c = ctx;
  if (strcmp(ext, "skip") == 0)
    return WDS__SINK_SKIP;
  if (strcmp(ext, "bin") != 0)
    return WDS__SINK_WINDOW;
  if (c->fail)
    return WDS_ERR_NOMEM;
  if (c->n == 64)
    abort();
  *dst = c->bufs[c->n++] = malloc(size ? size : 1);
  if (!*dst)
    return WDS_ERR_NOMEM;
  if (!c->made)
    return WDS__SINK_INTO;
  memset(*dst, 0xa5, size); /* its pages made, with bytes to overwrite */
  return WDS__SINK_INTO_MADE;
}

/* A shard of mixed sizes: small and large members, in and out of the
 * window, skipped and kept, with and without padding. */
static void sink_tar(tb *b) {
  static const size_t sizes[] = {1000,   100000, 300000, 20000, 0,
                                 131072, 70001,  512,    65536, 1};
  char name[64];
  for (int i = 0; i < 10; i++) {
    snprintf(name, sizeof name, "s%02d.bin", i);
    tb_file_n(b, name, sizes[i], i);
    snprintf(name, sizeof name, "s%02d.skip", i);
    tb_file_n(b, name, sizes[(i + 3) % 10], 100 + i);
    snprintf(name, sizeof name, "s%02d.txt", i);
    tb_file_n(b, name, sizes[(i + 7) % 10], 200 + i);
  }
  tb_end(b);
}

static int pattern_ok(const wds_field *f, int seed) {
  for (size_t i = 0; i < f->size_bytes; i++)
    if (f->data[i] != (uint8_t)(i * 31 + (size_t)seed))
      return 0;
  return 1;
}

/* Reads path with the sink and a window of `buffer` bytes; every field's
 * bytes and offset must be what the reader without a sink gives. With
 * made, the buffers are said made (INTO_MADE). populated: how many madvise
 * calls wds__populate_write may make while it reads: 0 none (buffers
 * made), 1 some (members read straight from a plain file into fresh
 * buffers), -1 any. */
static void check_sink(const char *path, size_t buffer, int made,
                       int populated) {
  const char *urls[] = {path};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 1;
  cfg.buffer_size_bytes = buffer;
  wds_reader *plain, *r;
  ASSERT_EQ_INT(wds_reader_open(&cfg, &plain), WDS_OK);
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  sink_ctx c = {0};
  c.made = made;
  wds__reader_set_sink(r, test_sink, &c, 0);
  size_t calls = atomic_load(&wds__populate_calls);
  const wds_sample *s, *p;
  int n = 0;
  for (;; n++) {
    int rp = wds_reader_next(plain, &p), rs = wds_reader_next(r, &s);
    ASSERT_EQ_INT(rs, rp);
    if (rs != WDS_OK)
      break;
    ASSERT_STREQ(s->key, p->key);
    ASSERT_EQ_INT(s->field_count, 3);
    ASSERT_EQ_INT(p->field_count, 3);
    for (int f = 0; f < 3; f++) {
      ASSERT_STREQ(s->fields[f].ext, p->fields[f].ext);
      ASSERT_EQ_U64(s->fields[f].size_bytes, p->fields[f].size_bytes);
      ASSERT_EQ_U64(s->fields[f].offset, p->fields[f].offset);
    }
    /* .bin in the caller's buffer, .skip not read, .txt a window view. */
    ASSERT_TRUE(s->fields[0].data == c.bufs[c.n - 1]);
    ASSERT_TRUE(s->fields[1].data == NULL);
    ASSERT_TRUE(s->fields[2].data != NULL || s->fields[2].size_bytes == 0);
    ASSERT_TRUE(pattern_ok(&s->fields[0], n));
    ASSERT_TRUE(pattern_ok(&p->fields[1], 100 + n));
    ASSERT_TRUE(pattern_ok(&s->fields[2], 200 + n));
  }
  ASSERT_EQ_INT(n, 10);
  calls = atomic_load(&wds__populate_calls) - calls;
  printf("  window %zu, buffers made %d: %zu populate calls\n", buffer, made,
         calls);
  if (populated == 0)
    ASSERT_EQ_U64(calls, 0);
#ifdef MADV_POPULATE_WRITE
  if (populated == 1)
    ASSERT_TRUE(calls > 0);
#endif
  wds_reader_stats a, b;
  wds_reader_stats_get(plain, &a);
  wds_reader_stats_get(r, &b);
  ASSERT_EQ_U64(b.tar_bytes, a.tar_bytes);
  ASSERT_EQ_U64(b.field_bytes, a.field_bytes);
  wds_reader_close(plain);
  wds_reader_close(r);
  for (int i = 0; i < c.n; i++)
    free(c.bufs[i]);
}

TEST(sink_reads_members_into_caller_buffers) {
  tb b = {0};
  sink_tar(&b);
  size_t len = b.n;
  uint8_t *copy = malloc(len);
  ASSERT_TRUE(copy != NULL);
  memcpy(copy, b.d, len);
  char *p = tb_save(&b);
  check_sink(p, 0, 0, -1); /* 4 MiB window: most members already in it */
  /* 64 KiB: large members come straight from the file, into fresh buffers
   * (populated as they arrive), or into buffers made already (never). */
  check_sink(p, 65536, 0, 1);
  check_sink(p, 65536, 1, 0);
  /* The same through a decompressor (gzip). */
  size_t cap = len + len / 2 + 1024;
  uint8_t *gz = malloc(cap);
  ASSERT_TRUE(gz != NULL);
  size_t n = gzip_bytes(copy, len, gz, cap, 1);
  ASSERT_TRUE(n > 0);
  char *pg = save_bytes(gz, n);
  check_sink(pg, 65536, 0, -1);
  check_sink(pg, 65536, 1, 0);
  free(gz);
  unlink(pg);
  free(pg);

  /* Cut inside a member read straight into a buffer (s01.bin, 100000
   * bytes, found where the plain reader says): the error names it and how
   * much of it there was. */
  const char *urls[] = {p};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 1;
  cfg.buffer_size_bytes = 65536;
  wds_reader *r;
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  const wds_sample *s;
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  uint64_t s01_bin = s->fields[0].offset;
  wds_reader_close(r);
  ASSERT_EQ_INT(truncate(p, (off_t)(s01_bin + 512 + 90000)), 0);
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  sink_ctx c = {0};
  wds__reader_set_sink(r, test_sink, &c, 0);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(wds_last_error(), "\"s01.bin\"");
  ASSERT_CONTAINS(wds_last_error(),
                  "stream truncated after 90000 of 100000 data bytes");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF);
  wds_reader_close(r);
  for (int i = 0; i < c.n; i++)
    free(c.bufs[i]);

  /* Members under the sink's min_bytes go to the window unasked. */
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  sink_ctx m = {0};
  wds__reader_set_sink(r, test_sink, &m, 100000);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK); /* s00: 1000, 20000, 512 */
  ASSERT_TRUE(s->fields[1].data != NULL && pattern_ok(&s->fields[1], 100));
  ASSERT_EQ_INT(m.n, 0);
  wds_reader_close(r);

  /* A sink that cannot allocate: an error naming the member, the shard
   * ends. */
  ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
  sink_ctx f = {.fail = 1};
  wds__reader_set_sink(r, test_sink, &f, 0);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_NOMEM);
  ASSERT_CONTAINS(wds_last_error(), "\"s00.bin\" at offset 0");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF);
  wds_reader_close(r);
  free(copy);
  unlink(p);
  free(p);
}

TEST(status_table) {
  ASSERT_STREQ(wds_strerror(WDS_ERR_TRUNCATED), "truncated input");
  ASSERT_STREQ(wds_status_name(WDS_ERR_CORRUPT), "WDS_ERR_CORRUPT");
  ASSERT_STREQ(wds_strerror(12345), "unknown status");
}

/* A brace group the expansion leaves literal (as braceexpand does) names a
 * file that does not exist: the message says why the braces are there. */
TEST(literal_braces_in_a_missing_file_get_a_hint) {
  static const char *const specs[] = {"/nonexistent/data-{000..00a}.tar",
                                      "/nonexistent/d-{0000...0004}.tar",
                                      "/nonexistent/d-{x}.tar"};
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    wds_reader_config cfg = WDS_READER_CONFIG_INIT;
    cfg.spec = specs[i];
    wds_reader *r;
    ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
    const wds_sample *s;
    ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_OPEN);
    printf("  %s\n", wds_last_error());
    ASSERT_CONTAINS(wds_last_error(), specs[i]);
    ASSERT_CONTAINS(wds_last_error(),
                    "No such file or directory (the braces were not "
                    "expanded: {a..b} needs two integers or two letters");
    wds_reader_close(r);
  }
  /* Without braces, or with braces but another error: no hint. */
  static const char *const others[] = {"/nonexistent/d-000.tar",
                                       "/nonexistent/d-}{.tar"};
  for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
    wds_reader_config cfg = WDS_READER_CONFIG_INIT;
    cfg.spec = others[i];
    wds_reader *r;
    ASSERT_EQ_INT(wds_reader_open(&cfg, &r), WDS_OK);
    const wds_sample *s;
    ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_ERR_OPEN);
    ASSERT_CONTAINS(wds_last_error(), "No such file or directory");
    ASSERT_TRUE(strstr(wds_last_error(), "braces") == NULL);
    wds_reader_close(r);
  }
}

/* A shard's URL starts its errors with its secrets hidden: a password and
 * a presigned query's signature and token (base/url.c wds__url_redact). */
TEST(error_messages_hide_url_secrets) {
  const char *urls[] = {"sftp://user:hunter2@h.example/a.tar?"
                        "X-Amz-Signature=SIGSECRET&X-Amz-Security-Token="
                        "TOKSECRET&part=1"};
  listing l;
  list_urls(urls, 1, 0, 0, &l);
  printf("  %s\n", l.err);
  ASSERT_TRUE(l.rc != WDS_OK && l.rc != WDS_EOF);
  ASSERT_CONTAINS(l.err, "sftp://user:***@h.example/a.tar?X-Amz-Signature=***&"
                         "X-Amz-Security-Token=***&part=1: cannot open");
  ASSERT_TRUE(strstr(l.err, "hunter2") == NULL);
  ASSERT_TRUE(strstr(l.err, "SIGSECRET") == NULL);
  ASSERT_TRUE(strstr(l.err, "TOKSECRET") == NULL);
}

int main(void) {
  /* WDS_TEST_STREAM_THREAD=1 (or -1): every compressed stream with (or
   * without) its reading thread; unset, stream.c's own rule decides. */
  const char *thread = getenv("WDS_TEST_STREAM_THREAD");
  if (thread)
    wds__stream_read_thread = atoi(thread);
  RUN(groups_consecutive_members_by_key);
  RUN(key_rules_match_webdataset);
  RUN(ustar_prefix_gnu_longname_and_pax_path);
  RUN(pax_size_base256_and_signed_checksum);
  RUN(non_regular_members_are_skipped);
  RUN(large_members_with_a_small_window);
  RUN(errors_name_member_and_offset);
  RUN(bad_size_field_and_sparse);
  RUN(duplicate_extension_then_continue);
  RUN(samples_never_span_shards_and_errors_skip_to_next_shard);
  RUN(empty_and_zero_only_streams);
  RUN(pipe_sources_and_exit_status);
  RUN(skipped_entries_do_not_fill_the_window);
  RUN(small_zstd_shard);
  RUN(zstd_window_limit_is_named_and_can_be_raised);
  RUN(gzip_checksum_and_members);
  RUN(decompression_memory_and_bombs_are_bounded);
  RUN(fields_per_sample_are_bounded);
  RUN(pipe_status_checked_for_every_codec);
  RUN(sample_limit_counts_the_sample_only);
  RUN(pax_and_gnu_corner_cases_match_tarfile);
  RUN(nul_in_extension_names_is_an_error);
  RUN(endless_input_after_the_archive_ends);
  RUN(sink_reads_members_into_caller_buffers);
  RUN(status_table);
  RUN(error_messages_hide_url_secrets);
  RUN(literal_braces_in_a_missing_file_get_a_hint);
  return test_summary();
}
