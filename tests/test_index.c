/* test_index.c — the shard-set index reader (loader/index.h): a valid index
 * with values to skip, relative path resolution, lookups, stale-file
 * detection, string escapes, and malformed JSON reported with the byte
 * offset of the problem; the public handle (wds/index.h) with the
 * per-sample detail, "../" urls, malformed sample detail. Files are made
 * in a temporary directory. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/index.h"
#include "test.h"
#include "wds/index.h"

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

/* Remote shards are matched by identity (base/url.h): a pipe:curl form
 * finds the http:// entry and the other way round. */
TEST(remote_identity_lookup) {
  const char *text = "{\"shardlist\": ["
                     "{\"url\": \"http://h/a.tar\", \"nsamples\": 1},"
                     "{\"url\": \"pipe:curl -s https://H:443/b.tar\", "
                     "\"nsamples\": 2}]}";
  wds__index ix;
  wds__err e;
  ASSERT_EQ_INT(wds__index_parse(text, strlen(text), "", &ix, &e), WDS_OK);
  uint64_t n = 0;
  ASSERT_EQ_INT(
      wds__index_lookup(&ix, "pipe:curl -sL 'http://H:80/a.tar'", &n, &e),
      WDS_OK);
  ASSERT_EQ_U64(n, 1);
  ASSERT_EQ_INT(
      wds__index_lookup(&ix, "pipe:wget -qO- http://h/x/../a.tar", &n, &e),
      WDS_OK);
  ASSERT_EQ_U64(n, 1);
  ASSERT_EQ_INT(wds__index_lookup(&ix, "https://h/b.tar", &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 2);
  ASSERT_EQ_INT(wds__index_lookup(&ix, "http://h/b.tar", &n, &e),
                WDS_ERR_INVALID); /* another scheme: another server */
  ASSERT_EQ_INT(
      wds__index_lookup(&ix, "pipe:curl -s http://h/a.tar | cat", &n, &e),
      WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "not in the index");
  wds__index_free(&ix);
  /* two urls of one shard are one entry too many */
  text = "{\"shardlist\": [{\"url\": \"http://h/a.tar\", \"nsamples\": 1},"
         "{\"url\": \"pipe:curl -s http://h/a.tar\", \"nsamples\": 1}]}";
  ASSERT_EQ_INT(wds__index_parse(text, strlen(text), "", &ix, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "are the same file \"http://h/a.tar\"");
}

/* Secrets: wds_index_url_for writes a remote URL
 * without them, and a lookup matches by identity, in which they do not
 * count: the redacted entry serves the URL with its secrets and with new
 * ones; messages name no secret; local paths are never rewritten. */
TEST(secrets_not_in_index) {
  char *u = wds_index_url_for(
      "https://u:pw1@h/a.tar?X-Amz-Signature=s1&token=t1&v=2", NULL);
  ASSERT_STREQ(u, "https://u:***@h/a.tar?X-Amz-Signature=***&token=***&v=2");
  free(u);
  u = wds_index_url_for("pipe:curl -sf 'http://u:pw1@h/b.tar?sig=s1'", "/");
  ASSERT_STREQ(u, "http://u:***@h/b.tar?sig=***");
  free(u);
  u = wds_index_url_for("dir/a?token=x.tar", NULL); /* a file name */
  ASSERT_STREQ(u, "dir/a?token=x.tar");
  free(u);
  const char *text =
      "{\"shardlist\": ["
      "{\"url\": \"https://u:***@h/a.tar?X-Amz-Signature=***&v=2\", "
      "\"nsamples\": 1},"
      "{\"url\": \"http://h/c.tar?token=raw1\", \"nsamples\": 3}]}";
  wds__index ix;
  wds__err e;
  ASSERT_EQ_INT(wds__index_parse(text, strlen(text), "", &ix, &e), WDS_OK);
  uint64_t n = 0;
  ASSERT_EQ_INT(
      wds__index_lookup(&ix, "https://u:pw1@h/a.tar?X-Amz-Signature=s1&v=2", &n,
                        &e),
      WDS_OK);
  ASSERT_EQ_U64(n, 1);
  ASSERT_EQ_INT(
      wds__index_lookup(&ix, "https://u:pw2@H:443/a.tar?X-Amz-Signature=s2&v=2",
                        &n, &e),
      WDS_OK);
  ASSERT_EQ_U64(n, 1);
  /* an older index holding a secret serves other secrets too */
  ASSERT_EQ_INT(wds__index_lookup(&ix, "http://h/c.tar?token=raw2", &n, &e),
                WDS_OK);
  ASSERT_EQ_U64(n, 3);
  /* what is not a secret still counts: another user, another query */
  ASSERT_EQ_INT(
      wds__index_lookup(&ix, "https://v:pw1@h/a.tar?X-Amz-Signature=s1&v=2", &n,
                        &e),
      WDS_ERR_INVALID);
  ASSERT_EQ_INT(
      wds__index_lookup(&ix, "https://u:pw1@h/a.tar?X-Amz-Signature=s1&v=3", &n,
                        &e),
      WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "https://u:***@h/a.tar?X-Amz-Signature=***&v=3");
  ASSERT_TRUE(strstr(e.msg, "pw1") == NULL && strstr(e.msg, "s1") == NULL);
  wds__index_free(&ix);
  /* a duplicate names no secret */
  text = "{\"shardlist\": [{\"url\": \"http://h/d.tar?sig=A1\", "
         "\"nsamples\": 1},"
         "{\"url\": \"http://h/d.tar?sig=B2\", \"nsamples\": 1}]}";
  ASSERT_EQ_INT(wds__index_parse(text, strlen(text), "", &ix, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "are the same file \"http://h/d.tar?sig=***\"");
  ASSERT_TRUE(strstr(e.msg, "A1") == NULL && strstr(e.msg, "B2") == NULL);
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
  /* Its pipe: entry is refused unless allowed, naming file and entry. */
  ASSERT_EQ_INT(wds__index_load(path, &ix, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "/idx/index.json: shardlist entry 4: \"pipe:cat "
                         "d.tar\" is a pipe: command read from a file");
  ASSERT_CONTAINS(e.msg, "--allow-pipe-from-files");
  ASSERT_TRUE(ix.count == 0 && ix.shards == NULL);
  int rc =
      wds__index_load_flags(path, WDS_INDEX_ALLOW_PIPE_FROM_FILES, &ix, &e);
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

/* The public handle (wds/index.h) with the per-sample detail. */
TEST(public_api) {
  char shard[128], index[160], text[1024];
  snprintf(shard, sizeof shard, "%s/pub.tar", tmpdir);
  snprintf(index, sizeof index, "%s/pub.json", tmpdir);
  write_file(shard, "0123456789");
  write_file(
      index,
      "{\"wids_version\": 1, \"__kind__\": \"wds-shard-index\", "
      "\"name\": \"x\", \"shardlist\": ["
      "{\"url\": \"pub.tar\", \"nsamples\": 2, \"filesize\": 10, "
      "\"tar_bytes\": 4096, \"samples\": ["
      "{\"key\": \"a/b\", \"fields\": {\"jpg\": [0, 5], "
      "\"seg.png\": [1024, 7]}, \"extra\": [1]},"
      "{\"fields\": {}, \"key\": \"caf\\u00e9\"}]},"
      "{\"url\": \"pipe:cat x\", \"nsamples\": 3, \"filesize\": null}]}");
  wds_index *ix = NULL;
  ASSERT_EQ_INT(wds_index_load(index, WDS_INDEX_SAMPLES, &ix), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(wds_last_error(), "shardlist entry 2: \"pipe:cat x\" is a "
                                    "pipe: command read from a file");
  ASSERT_TRUE(ix == NULL);
  ASSERT_EQ_INT(
      wds_index_load(index, WDS_INDEX_SAMPLES | WDS_INDEX_ALLOW_PIPE_FROM_FILES,
                     &ix),
      WDS_OK);
  ASSERT_EQ_INT(wds_index_shard_count(ix), 2);
  wds_index_shard sh;
  ASSERT_EQ_INT(wds_index_shard_info(ix, 0, &sh), WDS_OK);
  ASSERT_STREQ(sh.url, "pub.tar");
  ASSERT_STREQ(sh.path, shard);
  ASSERT_EQ_U64(sh.nsamples, 2);
  ASSERT_EQ_INT(sh.filesize, 10);
  ASSERT_EQ_INT(sh.tar_bytes, 4096);
  ASSERT_TRUE(sh.has_samples);
  ASSERT_EQ_INT(sh.sample_count, 2);
  ASSERT_STREQ(sh.samples[0].key, "a/b");
  ASSERT_EQ_INT(sh.samples[0].field_count, 2);
  ASSERT_STREQ(sh.samples[0].fields[0].ext, "jpg");
  ASSERT_EQ_U64(sh.samples[0].fields[0].offset, 0);
  ASSERT_EQ_U64(sh.samples[0].fields[0].size_bytes, 5);
  ASSERT_STREQ(sh.samples[0].fields[1].ext, "seg.png");
  ASSERT_EQ_U64(sh.samples[0].fields[1].offset, 1024);
  ASSERT_EQ_U64(sh.samples[0].fields[1].size_bytes, 7);
  ASSERT_STREQ(sh.samples[1].key, "caf\xc3\xa9");
  ASSERT_EQ_INT(sh.samples[1].field_count, 0);
  ASSERT_EQ_INT(wds_index_shard_info(ix, 1, &sh), WDS_OK);
  ASSERT_EQ_INT(sh.filesize, -1);
  ASSERT_EQ_INT(sh.tar_bytes, -1);
  ASSERT_TRUE(!sh.has_samples && sh.samples == NULL && sh.sample_count == 0);
  ASSERT_EQ_INT(wds_index_shard_info(ix, 2, &sh), WDS_ERR_INVALID);

  size_t i = 99;
  ASSERT_EQ_INT(wds_index_lookup(ix, shard, &i), WDS_OK);
  ASSERT_EQ_INT(i, 0);
  /* the lookup succeeded: the thread's last error is still shard_info's */
  ASSERT_STREQ(wds_last_error(),
               "wds_index_shard_info: shard 2 of an index of 2");
  ASSERT_EQ_INT(wds_index_lookup(ix, "pipe:cat x", &i), WDS_OK);
  ASSERT_EQ_INT(i, 1);
  ASSERT_EQ_INT(wds_index_lookup(ix, "nope.tar", &i), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "nope.tar: not in the index");
  write_file(shard, "0123456789abc");
  ASSERT_EQ_INT(wds_index_lookup(ix, shard, &i), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(wds_last_error(), shard);
  ASSERT_CONTAINS(wds_last_error(),
                  "stale index: the shard was 10 bytes, is 13");
  wds_index_close(ix);
  wds_index_close(NULL);

  /* Without the flag the detail is skipped. */
  ASSERT_EQ_INT(wds_index_load(index, WDS_INDEX_ALLOW_PIPE_FROM_FILES, &ix),
                WDS_OK);
  ASSERT_EQ_INT(wds_index_shard_info(ix, 0, &sh), WDS_OK);
  ASSERT_TRUE(!sh.has_samples && sh.samples == NULL);
  ASSERT_EQ_U64(sh.nsamples, 2);
  wds_index_close(ix);

  /* Load errors: *out NULL, the message names the file. */
  snprintf(text, sizeof text, "%s/none.json", tmpdir);
  ix = (wds_index *)1;
  ASSERT_EQ_INT(wds_index_load(text, 0, &ix), WDS_ERR_OPEN);
  ASSERT_TRUE(ix == NULL);
  ASSERT_CONTAINS(wds_last_error(), text);
  ASSERT_EQ_INT(wds_index_load(index, 8, &ix), WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds_index_load(NULL, 0, &ix), WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds_index_load(index, 0, NULL), WDS_ERR_INVALID);
}

/* "../x.tar" urls (an index in a subdirectory of its shards) are found by
 * the shard's own path. */
TEST(parent_urls) {
  char dir[128], sub[160], shard[192], index[192], other[192];
  snprintf(dir, sizeof dir, "%s/par", tmpdir);
  mkdir(dir, 0755);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  mkdir(sub, 0755);
  snprintf(shard, sizeof shard, "%s/s.tar", dir);
  write_file(shard, "abc");
  snprintf(index, sizeof index, "%s/idx.json", sub);
  write_file(index, "{\"shardlist\": [{\"url\": \"../s.tar\", \"nsamples\": 4, "
                    "\"filesize\": 3}]}");
  wds__index ix;
  wds__err e;
  ASSERT_EQ_INT(wds__index_load(index, &ix, &e), WDS_OK);
  uint64_t n = 0;
  ASSERT_EQ_INT(wds__index_lookup(&ix, shard, &n, &e), WDS_OK);
  ASSERT_EQ_U64(n, 4);
  snprintf(other, sizeof other, "%s/../par/./s.tar", dir);
  ASSERT_EQ_INT(wds__index_lookup(&ix, other, &n, &e), WDS_OK);
  snprintf(other, sizeof other, "%s/t.tar", dir);
  write_file(other, "abc");
  ASSERT_EQ_INT(wds__index_lookup(&ix, other, &n, &e), WDS_ERR_INVALID);
  write_file(shard, "abcd");
  ASSERT_EQ_INT(wds__index_lookup(&ix, shard, &n, &e), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(e.msg, "stale index");
  wds__index_free(&ix);
}

/* Malformed per-sample detail (only checked with WDS__INDEX_SAMPLES). */
static const struct {
  const char *samples, *frag;
  int nsamples;
} bad_samples[] = {
    {"[{\"key\":\"a\",\"fields\":{}}]", "lists 1 samples but \"nsamples\" is 2",
     2},
    {"{}", "\"samples\" must be an array", 0},
    {"[1]", "samples must be objects", 1},
    {"[{\"fields\":{}}]", "no \"key\"", 1},
    {"[{\"key\":\"a\"}]", "no \"fields\"", 1},
    {"[{\"key\":\"a\",\"key\":\"b\",\"fields\":{}}]", "duplicate key", 1},
    {"[{\"key\":\"a\\u0000\",\"fields\":{}}]", "NUL", 1},
    {"[{\"key\":1,\"fields\":{}}]", "expected a string", 1},
    {"[{\"key\":\"a\",\"fields\":[]}]", "\"fields\" must be an object", 1},
    {"[{\"key\":\"a\",\"fields\":{\"x\":5}}]", "[offset, size]", 1},
    {"[{\"key\":\"a\",\"fields\":{\"x\":[1]}}]", "[offset, size]", 1},
    {"[{\"key\":\"a\",\"fields\":{\"x\":[1,2,3]}}]", "[offset, size]", 1},
    {"[{\"key\":\"a\",\"fields\":{\"x\":[-1,2]}}]", "\"offset\" must be", 1},
    {"[{\"key\":\"a\",\"fields\":{\"x\":[1,2.5]}}]", "\"size\" must be", 1},
    {"[{\"key\":\"a\",\"fields\":{\"x\":[1,2],\"x\":[3,4]}}]",
     "extension listed twice", 1},
    {"[{\"key\":\"a\",\"fields\":{\"x\":[1,2]}},]", "offset 82:", 1},
};

TEST(bad_samples_json) {
  char text[512];
  for (size_t i = 0; i < sizeof bad_samples / sizeof *bad_samples; i++) {
    wds__index ix;
    wds__err e;
    e.msg[0] = '\0';
    snprintf(text, sizeof text,
             "{\"shardlist\":[{\"url\":\"a\",\"nsamples\":%d,\"samples\":%s}]}",
             bad_samples[i].nsamples, bad_samples[i].samples);
    int rc = wds__index_parse_flags(text, strlen(text), "", WDS__INDEX_SAMPLES,
                                    &ix, &e);
    if (rc != WDS_ERR_FORMAT || !strstr(e.msg, bad_samples[i].frag) ||
        ix.count != 0 || ix.shards != NULL)
      TEST_FAIL_("case %zu %s: rc %d, \"%s\" (wanted \"%s\")", i,
                 bad_samples[i].samples, rc, e.msg, bad_samples[i].frag);
    wds__index_free(&ix);
    /* Without the flag only JSON validity matters. */
    rc = wds__index_parse(text, strlen(text), "", &ix, &e);
    int json_error = strstr(bad_samples[i].samples, ",]") != NULL;
    if (rc != (json_error ? WDS_ERR_FORMAT : WDS_OK))
      TEST_FAIL_("case %zu without samples: rc %d, \"%s\"", i, rc, e.msg);
    wds__index_free(&ix);
  }
}

/* An index's counts are not trusted. What an entry contradicts itself with
 * (tar_bytes, the "samples" list) is a format error naming the entry. */
TEST(counts_bounded_by_the_entry) {
  wds__index ix;
  wds__err e;
  /* tar_bytes 13312 = 26 blocks: at most 25 samples and the final block. */
  const char *ok =
      "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":25,\"tar_bytes\":13312},"
      "{\"url\":\"b.tar\",\"nsamples\":0,\"tar_bytes\":0}]}";
  ASSERT_EQ_INT(parse(ok, &ix, &e), WDS_OK);
  wds__index_free(&ix);
  const char *over = "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":26,"
                     "\"tar_bytes\":13312}]}";
  ASSERT_EQ_INT(parse(over, &ix, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "offset 14: shardlist[0] (\"a.tar\"): \"nsamples\" "
                         "26 is more than its \"tar_bytes\" 13312 can hold "
                         "(at most 25");
  ASSERT_TRUE(ix.count == 0 && ix.shards == NULL);
  const char *max = "{\"shardlist\":[{\"tar_bytes\":1024,\"url\":\"a.tar\","
                    "\"nsamples\":18446744073709551615}]}";
  ASSERT_EQ_INT(parse(max, &ix, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "at most 1:");

  /* A "samples" list of another length: with the detail kept (as before)
   * and, for the loader, counted without keeping it. Without either flag
   * it is skipped. */
  const char *list = "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":3,"
                     "\"samples\":[{\"key\":\"a\",\"fields\":{}},"
                     "{\"key\":\"b\",\"fields\":{}}]}]}";
  ASSERT_EQ_INT(parse(list, &ix, &e), WDS_OK);
  wds__index_free(&ix);
  ASSERT_EQ_INT(wds__index_parse_flags(list, strlen(list), "",
                                       WDS__INDEX_COUNT_SAMPLES, &ix, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "shardlist[0] (\"a.tar\") lists 2 samples but "
                         "\"nsamples\" is 3");
  ASSERT_EQ_INT(wds__index_parse_flags(list, strlen(list), "",
                                       WDS__INDEX_SAMPLES, &ix, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "lists 2 samples");
  const char *list2 = "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":2,"
                      "\"samples\":[[1, {\"x\": []}], \"y\"]}]}";
  ASSERT_EQ_INT(wds__index_parse_flags(list2, strlen(list2), "",
                                       WDS__INDEX_COUNT_SAMPLES, &ix, &e),
                WDS_OK);
  ASSERT_EQ_U64(ix.shards[0].nsamples, 2);
  ASSERT_TRUE(!ix.shards[0].has_samples && ix.shards[0].samples == NULL);
  wds__index_free(&ix);
  const char *list3 = "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":2,"
                      "\"samples\":[1, 2,]}]}";
  ASSERT_EQ_INT(wds__index_parse_flags(list3, strlen(list3), "",
                                       WDS__INDEX_COUNT_SAMPLES, &ix, &e),
                WDS_ERR_FORMAT);

  /* A member's [OFFSET, SIZE] lies inside tar_bytes: a header at OFFSET,
   * the data padded to 512 bytes, and the final block after it. */
  const char *fits = "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":1,"
                     "\"tar_bytes\":3072,\"samples\":[{\"key\":\"k\","
                     "\"fields\":{\"jpg\":[1024,1024]}}]}]}";
  ASSERT_EQ_INT(wds__index_parse_flags(fits, strlen(fits), "",
                                       WDS__INDEX_SAMPLES, &ix, &e),
                WDS_OK);
  wds__index_free(&ix);
  const char *outside[] = {"[1024,1025]", "[2048,1]", "[0,3072]",
                           "[18446744073709551615,1]",
                           "[0,18446744073709551615]"};
  for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
    char text[256];
    snprintf(text, sizeof text,
             "{\"shardlist\":[{\"url\":\"a.tar\",\"nsamples\":1,"
             "\"tar_bytes\":3072,\"samples\":[{\"key\":\"k\","
             "\"fields\":{\"jpg\":%s}}]}]}",
             outside[i]);
    int rc = wds__index_parse_flags(text, strlen(text), "", WDS__INDEX_SAMPLES,
                                    &ix, &e);
    if (rc != WDS_ERR_FORMAT || !strstr(e.msg, "sample \"k\" field \"jpg\"") ||
        !strstr(e.msg, "does not fit in its \"tar_bytes\" 3072"))
      TEST_FAIL_("%s: rc %d, %s", outside[i], rc, e.msg);
    wds__index_free(&ix);
  }
}

static void write_bytes(const char *path, const void *head, size_t head_len,
                        size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(1);
  }
  for (size_t i = 0; i < size; i++)
    fputc(i < head_len ? ((const unsigned char *)head)[i] : 0, f);
  fclose(f);
}

/* wds__index_check_count bounds a count by the shard file, read as the
 * reader will decode it. */
TEST(counts_bounded_by_the_file) {
  char path[192], url[220];
  wds__err e;
  /* Plain (a zero first block is an empty tar): 20 blocks, at most 19. */
  snprintf(path, sizeof path, "%s/plain.tar", tmpdir);
  write_bytes(path, "", 0, 10240);
  ASSERT_EQ_INT(wds__index_check_count(path, 19, &e), WDS_OK);
  ASSERT_EQ_INT(wds__index_check_count(path, 20, &e), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(e.msg, path);
  ASSERT_CONTAINS(e.msg, "the index gives 20 samples, more than the shard's "
                         "10240 bytes can hold (at most 19 in a plain tar");
  snprintf(url, sizeof url, "file://%s", path);
  ASSERT_EQ_INT(wds__index_check_count(url, UINT64_MAX, &e), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(e.msg, "at most 19 in a plain tar");
  /* zstd: 1000 bytes decompress to at most 32768000, 63999 samples. */
  snprintf(path, sizeof path, "%s/z.tar.zst", tmpdir);
  write_bytes(path, "\x28\xb5\x2f\xfd", 4, 1000);
  ASSERT_EQ_INT(wds__index_check_count(path, 63999, &e), WDS_OK);
  ASSERT_EQ_INT(wds__index_check_count(path, 64000, &e), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(e.msg, "at most 63999 in zstd data");
  /* A skippable frame first is zstd too. */
  write_bytes(path, "\x5a\x2a\x4d\x18", 4, 1000);
  ASSERT_EQ_INT(wds__index_check_count(path, 64000, &e), WDS_ERR_CORRUPT);
  /* gzip: 1000 bytes, at most 1032000 of tar: 2014 samples. */
  snprintf(path, sizeof path, "%s/g.tar.gz", tmpdir);
  write_bytes(path, "\x1f\x8b", 2, 1000);
  ASSERT_EQ_INT(wds__index_check_count(path, 2014, &e), WDS_OK);
  ASSERT_EQ_INT(wds__index_check_count(path, 2015, &e), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(e.msg, "at most 2014 in gzip data");
  /* xz (and bzip2, ...): no sound ratio; only the bound for any stream. */
  snprintf(path, sizeof path, "%s/x.tar.xz", tmpdir);
  write_bytes(path,
              "\xfd"
              "7zXZ",
              6, 1000);
  ASSERT_EQ_INT(wds__index_check_count(path, 1u << 30, &e), WDS_OK);
  ASSERT_EQ_INT(wds__index_check_count(path, WDS__INDEX_MAX_SAMPLES - 1, &e),
                WDS_OK);
  ASSERT_EQ_INT(wds__index_check_count(path, WDS__INDEX_MAX_SAMPLES, &e),
                WDS_ERR_CORRUPT);
  /* No file to look at: a missing one is reported when read; a remote or
   * piped one gets the bound for any stream. */
  snprintf(path, sizeof path, "%s/missing.tar", tmpdir);
  ASSERT_EQ_INT(wds__index_check_count(path, 1000000, &e), WDS_OK);
  ASSERT_EQ_INT(
      wds__index_check_count("pipe:cat x.tar", WDS__INDEX_MAX_SAMPLES - 1, &e),
      WDS_OK);
  ASSERT_EQ_INT(wds__index_check_count("https://h/a.tar", UINT64_MAX, &e),
                WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(e.msg, "https://h/a.tar: the index gives "
                         "18446744073709551615 samples, more than any shard "
                         "can hold");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-index.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(valid_index);
  RUN(string_escapes);
  RUN(secrets_not_in_index);
  RUN(relative_paths);
  RUN(remote_identity_lookup);
  RUN(stale_detection);
  RUN(load_errors);
  RUN(bad_json);
  RUN(depth_limit);
  RUN(explicit_length);
  RUN(public_api);
  RUN(parent_urls);
  RUN(bad_samples_json);
  RUN(counts_bounded_by_the_entry);
  RUN(counts_bounded_by_the_file);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    printf("could not remove %s\n", tmpdir);
  return test_summary();
}
