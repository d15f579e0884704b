/* test_index.c — the shard-set index reader (loader/index.h): a valid index
 * with values to skip, relative path resolution, lookups, stale-file
 * detection, string escapes, and malformed JSON reported with the byte
 * offset of the problem. Files are made in a temporary directory. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/index.h"
#include "test.h"

static char tmpdir[64];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
}

static int parse(const char *text, wds__index *ix, wds__err *e) {
  memset(e, 0, sizeof *e);
  return wds__index_parse(text, strlen(text), "", ix, e);
}

TEST(valid_index) {
  const char *text =
      " {\"wids_version\": 1, \"name\": \"demo\", \"extra\": [1, -2.5e+3, "
      "true, false, null, {\"a\": [[]]}],\n"
      "  \"shardlist\": [\n"
      "    {\"url\": \"a.tar\", \"nsamples\": 10, \"filesize\": 20480,\n"
      "     \"samples\": [{\"key\": \"x\", \"offset\": 0}]},\n"
      "    {\"nsamples\": 0, \"url\": \"http://h/b.tar\"},\n"
      "    {\"url\": \"/abs/c.tar\", \"filesize\": null, \"nsamples\": "
      "18446744073709551615, \"md5\": \"\"}\n"
      "  ]} \n";
  wds__index ix;
  wds__err e;
  ASSERT_EQ_INT(parse(text, &ix, &e), WDS_OK);
  ASSERT_EQ_INT(ix.count, 3);
  ASSERT_STREQ(ix.shards[0].url, "a.tar");
  ASSERT_STREQ(ix.shards[0].path, "a.tar");
  ASSERT_EQ_U64(ix.shards[0].nsamples, 10);
  ASSERT_EQ_INT(ix.shards[0].filesize, 20480);
  ASSERT_STREQ(ix.shards[1].url, "http://h/b.tar");
  ASSERT_EQ_U64(ix.shards[1].nsamples, 0);
  ASSERT_EQ_INT(ix.shards[1].filesize, -1);
  ASSERT_EQ_U64(ix.shards[2].nsamples, UINT64_MAX);
  ASSERT_EQ_INT(ix.shards[2].filesize, -1);
  uint64_t n = 0;
  ASSERT_EQ_INT(wds__index_lookup(&ix, "http://h/b.tar", &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 0);
  ASSERT_EQ_INT(wds__index_lookup(&ix, "/abs/c.tar", &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, UINT64_MAX);
  ASSERT_EQ_INT(wds__index_lookup(&ix, "file:///abs//./c.tar", &n, &e), WDS_OK);
  ASSERT_EQ_INT(wds__index_lookup(&ix, "b.tar", &n, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "b.tar: not in the index");
  wds__index_free(&ix);
  wds__index_free(&ix); /* idempotent */

  ASSERT_EQ_INT(parse("{\"shardlist\":[]}", &ix, &e), WDS_OK);
  ASSERT_EQ_INT(ix.count, 0);
  ASSERT_EQ_INT(wds__index_lookup(&ix, "a.tar", &n, &e), WDS_ERR_INVALID);
  wds__index_free(&ix);
}

TEST(string_escapes) {
  wds__index ix;
  wds__err e;
  ASSERT_EQ_INT(parse("{\"shardlist\":[{\"url\":\"d/\\u00e9\\ud83d\\ude00"
                      "\\udcff\\\"\\\\\\/\\b\\f\\n\\r\\t\xc3\xa9.tar\","
                      "\"n\\u0073amples\":3}]}",
                      &ix, &e),
                WDS_OK);
  ASSERT_STREQ(ix.shards[0].url,
               "d/\xc3\xa9\xf0\x9f\x98\x80\xff\"\\/\b\f\n\r\t\xc3\xa9.tar");
  ASSERT_EQ_U64(ix.shards[0].nsamples, 3);
  wds__index_free(&ix);
}

TEST(relative_paths) {
  char dir[128], sub[160], path[192], text[1024];
  snprintf(dir, sizeof dir, "%s/idx", tmpdir);
  mkdir(dir, 0755);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  mkdir(sub, 0755);
  snprintf(path, sizeof path, "%s/index.json", dir);
  write_file(path, "{\"shardlist\": ["
                   "{\"url\": \"a.tar\", \"nsamples\": 1},"
                   "{\"url\": \"./sub//b.tar\", \"nsamples\": 2},"
                   "{\"url\": \"/x/c.tar\", \"nsamples\": 3},"
                   "{\"url\": \"pipe:cat d.tar\", \"nsamples\": 4},"
                   "{\"url\": \"../e.tar\", \"nsamples\": 5}]}");
  wds__index ix;
  wds__err e;
  int rc = wds__index_load(path, &ix, &e);
  if (rc != WDS_OK)
    printf("  %s\n", e.msg);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_INT(ix.count, 5);
  snprintf(text, sizeof text, "%s/a.tar", dir);
  ASSERT_STREQ(ix.shards[0].path, text);
  snprintf(text, sizeof text, "%s/sub/b.tar", dir);
  ASSERT_STREQ(ix.shards[1].path, text);
  ASSERT_STREQ(ix.shards[1].url, "./sub//b.tar");
  ASSERT_STREQ(ix.shards[2].path, "/x/c.tar");
  ASSERT_STREQ(ix.shards[3].path, "pipe:cat d.tar");
  snprintf(text, sizeof text, "%s/../e.tar", dir);
  ASSERT_STREQ(ix.shards[4].path, text);

  uint64_t n = 0;
  /* By url as written, by resolved path, by an equivalent spelling. */
  ASSERT_EQ_INT(wds__index_lookup(&ix, "a.tar", &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 1);
  snprintf(text, sizeof text, "%s/sub/b.tar", dir);
  ASSERT_EQ_INT(wds__index_lookup(&ix, text, &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 2);
  snprintf(text, sizeof text, "%s/./sub/./b.tar", dir);
  ASSERT_EQ_INT(wds__index_lookup(&ix, text, &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 2);
  snprintf(text, sizeof text, "file://%s/a.tar", dir);
  ASSERT_EQ_INT(wds__index_lookup(&ix, text, &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 1);
  ASSERT_EQ_INT(wds__index_lookup(&ix, "pipe:cat d.tar", &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 4);
  wds__index_free(&ix);

  /* An index in the root directory ("/index.json"). */
  const char *root = "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":1}]}";
  ASSERT_EQ_INT(wds__index_parse(root, strlen(root), "/", &ix, &e), WDS_OK);
  ASSERT_STREQ(ix.shards[0].path, "/a.tar");
  wds__index_free(&ix);
}

TEST(stale_detection) {
  char shard[128], index[160], text[512];
  snprintf(shard, sizeof shard, "%s/s.tar", tmpdir);
  snprintf(index, sizeof index, "%s/stale.json", tmpdir);
  write_file(shard, "0123456789");
  snprintf(text, sizeof text,
           "{\"shardlist\": [{\"url\": \"s.tar\", \"nsamples\": 7, "
           "\"filesize\": 10}, {\"url\": \"missing.tar\", \"nsamples\": 1, "
           "\"filesize\": 5}, {\"url\": \"https://h/s.tar\", \"nsamples\": 2, "
           "\"filesize\": 99}]}");
  write_file(index, text);
  wds__index ix;
  wds__err e;
  ASSERT_EQ_INT(wds__index_load(index, &ix, &e), WDS_OK);
  uint64_t n = 0;
  ASSERT_EQ_INT(wds__index_lookup(&ix, shard, &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 7);
  write_file(shard, "0123456789ab");
  ASSERT_EQ_INT(wds__index_lookup(&ix, shard, &n, &e), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(e.msg, "stale index");
  ASSERT_CONTAINS(e.msg, "was 10 bytes, is 12");
  ASSERT_CONTAINS(e.msg, shard);
  /* No file to compare: the loader reports it when it opens the shard. */
  snprintf(text, sizeof text, "%s/missing.tar", tmpdir);
  ASSERT_EQ_INT(wds__index_lookup(&ix, text, &n, &e), WDS_OK);
  /* Remote: not checked. */
  ASSERT_EQ_INT(wds__index_lookup(&ix, "https://h/s.tar", &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 2);
  wds__index_free(&ix);
}

TEST(load_errors) {
  wds__index ix;
  wds__err e;
  char path[128];
  snprintf(path, sizeof path, "%s/nope.json", tmpdir);
  ASSERT_EQ_INT(wds__index_load(path, &ix, &e), WDS_ERR_OPEN);
  ASSERT_CONTAINS(e.msg, path);
  ASSERT_EQ_INT(ix.count, 0);
  ASSERT_TRUE(ix.shards == NULL);
  ASSERT_EQ_INT(wds__index_load(tmpdir, &ix, &e), WDS_ERR_OPEN);
  snprintf(path, sizeof path, "%s/bad.json", tmpdir);
  write_file(path, "{\"shardlist\": [}");
  ASSERT_EQ_INT(wds__index_load(path, &ix, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, path);
  ASSERT_CONTAINS(e.msg, "offset 15");
}

/* Malformed inputs: status WDS_ERR_FORMAT and a message holding both
 * fragments (the first usually "offset N:"). */
static const struct {
  const char *text, *frag1, *frag2;
} bad[] = {
    {"", "offset 0:", "end of input"},
    {"   ", "offset 3:", "end of input"},
    {"[]", "offset 0:", "must be a JSON object"},
    {"\xef\xbb\xbf{\"shardlist\":[]}", "offset 0:", "JSON object"},
    {"{}", "no \"shardlist\"", NULL},
    {"{\"shardlist\":[]", "offset 15:", "end of input"},
    {"{\"shardlist\":[]} x", "offset 17:", "after the index object"},
    {"{\"shardlist\":[],}", "offset 16:", "expected a string"},
    {"{\"shardlist\":[] \"a\":1}", "offset 16:", "expected ',' or '}'"},
    {"{\"shardlist\" []}", "offset 13:", "expected ':'"},
    {"{\"shardlist\":{}}", "offset 13:", "must be an array"},
    {"{\"shardlist\":[1]}", "offset 14:", "must be objects"},
    {"{\"shardlist\":[{}]}", "offset 14:", "shardlist[0] has no \"url\""},
    {"{\"shardlist\":[{\"url\":\"a\"}]}", "offset 14:", "no \"nsamples\""},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":-1}]}",
     "offset 36:", "\"nsamples\" must be a non-negative integer"},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":1.0}]}",
     "offset 36:", "non-negative integer"},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":1e3}]}",
     "offset 36:", "non-negative integer"},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":\"5\"}]}",
     "offset 36:", "non-negative integer"},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":18446744073709551616}]}",
     "offset 36:", "too large"},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":01}]}",
     "offset 36:", "leading zero"},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":1,\"filesize\":-5}]}",
     "offset 49:", "\"filesize\" must be"},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":1,\"filesize\":"
     "9223372036854775808}]}",
     "offset 49:", "too large"},
    {"{\"shardlist\":[{\"url\":\"\",\"nsamples\":1}]}",
     "offset 21:", "\"url\" is empty"},
    {"{\"shardlist\":[{\"url\":5,\"nsamples\":1}]}",
     "offset 21:", "expected a string"},
    {"{\"shardlist\":[{\"url\":\"a\\u0000b\",\"nsamples\":1}]}",
     "offset 21:", "NUL"},
    {"{\"shardlist\":[{\"url\":\"a\",\"url\":\"b\",\"nsamples\":1}]}",
     "offset 25:", "duplicate key \"url\""},
    {"{\"shardlist\":[],\"shardlist\":[]}",
     "offset 16:", "duplicate key \"shardlist\""},
    {"{\"shardlist\":[{\"url\":\"a\",\"nsamples\":1},"
     "{\"url\":\"b\",\"nsamples\":1},{\"url\":\"a\",\"nsamples\":2}]}",
     "duplicate url \"a\"", "shardlist[0] and shardlist[2]"},
    {"{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":1},"
     "{\"url\":\"./a.tar\",\"nsamples\":1}]}",
     "are the same file", NULL},
    {"{\"a\":\"x\ty\",\"shardlist\":[]}", "offset 7:", "control character"},
    {"{\"a\":\"x\\qy\",\"shardlist\":[]}", "offset 7:", "invalid escape"},
    {"{\"a\":\"\\u12g4\",\"shardlist\":[]}", "offset 6:", "\\u escape"},
    {"{\"a\":\"\\u12", "offset 6:", "\\u escape"},
    {"{\"a\":\"\\ud800x\",\"shardlist\":[]}", "offset 6:", "unpaired"},
    {"{\"a\":\"\\ud800\\u0041\",\"shardlist\":[]}", "offset 6:", "unpaired"},
    {"{\"a\":\"\\udc00\",\"shardlist\":[]}", "offset 6:", "unpaired"},
    {"{\"a\":\"\xc3(\",\"shardlist\":[]}", "offset 6:", "invalid UTF-8"},
    {"{\"a\":\"\xed\xa0\x80\",\"shardlist\":[]}", "offset 6:", "invalid UTF-8"},
    {"{\"a\":\"abc", "offset 5:", "unterminated string"},
    {"{\"a\":\"abc\\", "offset 5:", "unterminated string"},
    {"{\"a\":tru,\"shardlist\":[]}", "offset 5:", "invalid value"},
    {"{\"a\":nul", "offset 5:", "invalid value"},
    {"{\"a\":+1,\"shardlist\":[]}", "offset 5:", "invalid value"},
    {"{\"a\":-,\"shardlist\":[]}", "offset 5:", "invalid number"},
    {"{\"a\":1.,\"shardlist\":[]}", "offset 5:", "'.'"},
    {"{\"a\":1e,\"shardlist\":[]}", "offset 5:", "'e'"},
    {"{\"a\":[1,],\"shardlist\":[]}", "offset 8:", "invalid value"},
    {"{\"a\":[1 2],\"shardlist\":[]}", "offset 8:", "expected ',' or ']'"},
    {"{\"a\":{\"b\" 1},\"shardlist\":[]}", "offset 10:", "expected ':'"},
    {"{\"a\":{1:2},\"shardlist\":[]}", "offset 6:", "expected a string"},
    {"{\"a\":[", "offset 6:", "end of input"},
    {"{\"a\":/*c*/1,\"shardlist\":[]}", "offset 5:", "invalid value"},
};

TEST(bad_json) {
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    wds__index ix;
    wds__err e;
    int rc = parse(bad[i].text, &ix, &e);
    if (rc != WDS_ERR_FORMAT || !strstr(e.msg, bad[i].frag1) ||
        (bad[i].frag2 && !strstr(e.msg, bad[i].frag2)) || ix.count != 0 ||
        ix.shards != NULL) {
      TEST_FAIL_("case %zu \"%s\": rc %d, \"%s\" (wanted \"%s\" \"%s\")", i,
                 bad[i].text, rc, e.msg, bad[i].frag1,
                 bad[i].frag2 ? bad[i].frag2 : "");
    }
    wds__index_free(&ix);
  }
}

/* Unknown values nest up to 64 levels (the top object is level 1). */
TEST(depth_limit) {
  char text[512];
  wds__index ix;
  wds__err e;
  for (int levels = 62; levels <= 64; levels++) {
    int n = snprintf(text, sizeof text, "{\"shardlist\":[],\"x\":");
    for (int i = 0; i < levels; i++)
      text[n++] = '[';
    for (int i = 0; i < levels; i++)
      text[n++] = ']';
    text[n++] = '}';
    text[n] = '\0';
    int rc = parse(text, &ix, &e);
    if (levels <= 63) {
      ASSERT_EQ_INT(rc, WDS_OK);
    } else {
      ASSERT_EQ_INT(rc, WDS_ERR_FORMAT);
      ASSERT_CONTAINS(e.msg, "nesting deeper than 64");
      ASSERT_CONTAINS(e.msg, "offset 83:");
    }
    wds__index_free(&ix);
  }
  /* Deep input far past the limit fails fast, without deep recursion. */
  static char deep[1 << 20];
  memcpy(deep, "{\"x\":", 5);
  memset(deep + 5, '[', sizeof deep - 6);
  ASSERT_EQ_INT(wds__index_parse(deep, sizeof deep - 1, "", &ix, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "nesting deeper than 64");
}

/* Embedded NUL bytes and text that is not NUL-terminated. */
TEST(explicit_length) {
  wds__index ix;
  wds__err e;
  const char text[] = "{\"shardlist\":[]}\0garbage";
  ASSERT_EQ_INT(wds__index_parse(text, 16, "", &ix, &e), WDS_OK);
  wds__index_free(&ix);
  ASSERT_EQ_INT(wds__index_parse(text, 17, "", &ix, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "offset 16:");
  ASSERT_EQ_INT(wds__index_parse(text, 10, "", &ix, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "offset 1: unterminated string");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-index.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(valid_index);
  RUN(string_escapes);
  RUN(relative_paths);
  RUN(stale_detection);
  RUN(load_errors);
  RUN(bad_json);
  RUN(depth_limit);
  RUN(explicit_length);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    printf("could not remove %s\n", tmpdir);
  return test_summary();
}
