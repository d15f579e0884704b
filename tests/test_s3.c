/* test_s3.c — the s3:// parts that need no server: an s3:// URL mapped to
 * the request URL (host, path, region; path style with an endpoint,
 * virtual-host style on AWS), which URLs name listings, S3's XML error
 * bodies and ListObjectsV2 pages parsed (and bad XML refused), missing
 * credentials named. Against a loopback endpoint that accepts and never
 * answers: a listing obeys the read timeout and the cancel token it is
 * given (wds__spec_expand_io), through the reader's and the loader's open
 * too, and their interrupt checks. Reading and listing against a server are
 * tests/integration/s3.sh's (moto, and s3_fake.py for stalls and retries). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "shards/http.h"
#include "shards/s3.h"
#include "shards/spec_io.h"
#include "test.h"
#include "test_interrupt.h"
#include "wds/loader.h"
#include "wds/reader.h"

static int map(const wds__s3_env *env, const char *url, char *http, size_t size,
               char *region, wds__err *err) {
  char *u = NULL;
  int rc = wds__s3_request_url(url, env, &u, region, 64, err);
  snprintf(http, size, "%s", u ? u : "");
  free(u);
  return rc;
}

TEST(urls_map_to_requests) {
  wds__s3_env env;
  wds__err err;
  char http[512], region[64];
  memset(&env, 0, sizeof env);
  /* AWS: virtual-host style, the default region. */
  ASSERT_EQ_INT(map(&env, "s3://bkt/train/shard-000.tar", http, sizeof http,
                    region, &err),
                WDS_OK);
  ASSERT_STREQ(http, "https://bkt.s3.us-east-1.amazonaws.com/train/"
                     "shard-000.tar");
  ASSERT_STREQ(region, "us-east-1");
  env.region = "eu-west-1";
  ASSERT_EQ_INT(
      map(&env, "s3://bkt/a b+c/%x~.tar", http, sizeof http, region, &err),
      WDS_OK);
  /* SigV4's encoding: all but unreserved bytes and '/'. */
  ASSERT_STREQ(http, "https://bkt.s3.eu-west-1.amazonaws.com/a%20b%2Bc/"
                     "%25x~.tar");
  ASSERT_STREQ(region, "eu-west-1");
  /* A bucket that is no DNS label of the certificate: path style. */
  ASSERT_EQ_INT(
      map(&env, "s3://my.bucket/k.tar", http, sizeof http, region, &err),
      WDS_OK);
  ASSERT_STREQ(http, "https://s3.eu-west-1.amazonaws.com/my.bucket/k.tar");
  /* An endpoint (MinIO, moto): path style, its scheme and port. */
  env.endpoint = "http://127.0.0.1:9000/";
  env.endpoint_var = "AWS_ENDPOINT_URL";
  ASSERT_EQ_INT(
      map(&env, "s3://bkt/d/\xc3\xa9.tar", http, sizeof http, region, &err),
      WDS_OK);
  ASSERT_STREQ(http, "http://127.0.0.1:9000/bkt/d/%C3%A9.tar");
  ASSERT_STREQ(region, "eu-west-1");

  /* Refused, saying why. */
  ASSERT_EQ_INT(map(&env, "s3:///k.tar", http, sizeof http, region, &err),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(err.msg, "names no bucket");
  ASSERT_EQ_INT(map(&env, "s3://bkt", http, sizeof http, region, &err),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(err.msg, "names no object");
  ASSERT_EQ_INT(map(&env, "s3://b*t/k", http, sizeof http, region, &err),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(err.msg, "bucket name");
  env.endpoint = "127.0.0.1:9000";
  ASSERT_EQ_INT(map(&env, "s3://bkt/k", http, sizeof http, region, &err),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(err.msg, "AWS_ENDPOINT_URL=\"127.0.0.1:9000\" is not an "
                           "http:// or https:// URL");
  env.endpoint = NULL;
  env.region = "eu:west";
  ASSERT_EQ_INT(map(&env, "s3://bkt/k", http, sizeof http, region, &err),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(err.msg, "is not a region name");
}

TEST(environment_is_read) {
  setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "", 1); /* empty is unset */
  unsetenv("AWS_SESSION_TOKEN");
  setenv("AWS_REGION", "ap-south-1", 1);
  setenv("AWS_DEFAULT_REGION", "us-west-2", 1);
  setenv("AWS_ENDPOINT_URL", "http://a:1", 1);
  setenv("AWS_ENDPOINT_URL_S3", "http://b:2", 1);
  wds__s3_env env;
  wds__s3_env_get(&env);
  ASSERT_STREQ(env.key_id, "AKID");
  ASSERT_TRUE(env.secret == NULL && env.token == NULL);
  ASSERT_STREQ(env.region, "ap-south-1");   /* AWS_REGION wins */
  ASSERT_STREQ(env.endpoint, "http://b:2"); /* the S3-specific one wins */
  ASSERT_STREQ(env.endpoint_var, "AWS_ENDPOINT_URL_S3");
  unsetenv("AWS_REGION");
  unsetenv("AWS_ENDPOINT_URL_S3");
  wds__s3_env_get(&env);
  ASSERT_STREQ(env.region, "us-west-2");
  ASSERT_STREQ(env.endpoint, "http://a:1");
  unsetenv("AWS_DEFAULT_REGION");
  unsetenv("AWS_ENDPOINT_URL");
}

TEST(missing_credentials_are_named) {
  wds__err err;
  wds__http *h = NULL;
  unsetenv("AWS_ACCESS_KEY_ID");
  setenv("AWS_SECRET_ACCESS_KEY", "THE-SECRET-VALUE", 1);
  ASSERT_TRUE(wds__s3_open("s3://bkt/k.tar", NULL, &h, &err) < 0);
  ASSERT_TRUE(h == NULL);
  ASSERT_CONTAINS(err.msg, "s3://bkt/k.tar");
#ifdef WDS_TEST_HAVE_CURL
  ASSERT_CONTAINS(err.msg, "no AWS credentials (AWS_ACCESS_KEY_ID is not set");
#endif
  ASSERT_TRUE(strstr(err.msg, "THE-SECRET-VALUE") == NULL);
  unsetenv("AWS_SECRET_ACCESS_KEY");
  ASSERT_TRUE(wds__s3_open("s3://bkt/k.tar", NULL, &h, &err) < 0);
#ifdef WDS_TEST_HAVE_CURL
  ASSERT_CONTAINS(err.msg, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are "
                           "not set");
#endif
}

TEST(listings_are_recognised) {
  ASSERT_TRUE(wds__s3_is_listing("s3://b/train/shard-*.tar"));
  ASSERT_TRUE(wds__s3_is_listing("s3://b/train/shard-??.tar"));
  ASSERT_TRUE(wds__s3_is_listing("s3://b/train/shard-[0-4].tar"));
  ASSERT_TRUE(wds__s3_is_listing("s3://b/train/"));
  ASSERT_TRUE(wds__s3_is_listing("s3://b/"));
  ASSERT_TRUE(wds__s3_is_listing("s3://b"));
  ASSERT_TRUE(!wds__s3_is_listing("s3://b/train/shard-000.tar"));
  ASSERT_TRUE(!wds__s3_is_listing("http://h/train/*.tar"));
  ASSERT_TRUE(!wds__s3_is_listing("train/*.tar"));
}

static int collect(void *ud, const char *key) {
  char *all = ud;
  strcat(all, key);
  strcat(all, "|");
  return WDS_OK;
}

TEST(xml_is_parsed) {
  char detail[400];
  static const char error[] =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>"
      "SignatureDoesNotMatch</Code><Message>The request signature we "
      "calculated does not match</Message><RequestId>1</RequestId></Error>";
  wds__s3_error_detail(error, sizeof error - 1, detail, sizeof detail);
  static const char page[] =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><Prefix>t/</Prefix><KeyCount>2</KeyCount>"
      "<IsTruncated>true</IsTruncated>"
      "<Contents><Key>t/a&amp;b.tar</Key><Size>5</Size></Contents>"
      "<Contents><Key>t/c d.tar</Key><Size>5</Size></Contents>"
      "<NextContinuationToken>tok/+=</NextContinuationToken>"
      "</ListBucketResult>";
  char keys[256] = "";
  int truncated = -1;
  char *next = NULL;
  wds__err err;
  int rc = wds__s3_parse_listing(page, sizeof page - 1, collect, keys,
                                 &truncated, &next, &err);
  if (rc != WDS_OK && strstr(err.msg, "without libxml2")) {
    printf("  (built without libxml2: %s)\n", err.msg);
    ASSERT_STREQ(detail, "");
    return;
  }
  ASSERT_STREQ(detail, "S3 error SignatureDoesNotMatch (The request signature "
                       "we calculated does not match)");
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_STREQ(keys, "t/a&b.tar|t/c d.tar|");
  ASSERT_EQ_INT(truncated, 1);
  ASSERT_STREQ(next, "tok/+=");
  free(next);

  /* Not S3's XML, or not XML: no detail, and a listing refused. */
  wds__s3_error_detail("<html>oops</html>", 17, detail, sizeof detail);
  ASSERT_STREQ(detail, "");
  wds__s3_error_detail("\x01\x02garbage", 9, detail, sizeof detail);
  ASSERT_STREQ(detail, "");
  keys[0] = '\0';
  ASSERT_EQ_INT(wds__s3_parse_listing("<Error><Code>x</Code></Error>", 29,
                                      collect, keys, &truncated, &next, &err),
                WDS_ERR_IO);
  ASSERT_CONTAINS(err.msg, "not a ListObjectsV2 answer");
  ASSERT_TRUE(next == NULL);
  ASSERT_EQ_INT(wds__s3_parse_listing("<ListBucketResult><Contents>", 28,
                                      collect, keys, &truncated, &next, &err),
                WDS_ERR_IO);
  /* Entities are not expanded (no "billion laughs"), no external entity
   * is read. */
  static const char bomb[] =
      "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\">"
      "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
      "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">"
      "<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
      "<ListBucketResult><Contents><Key>&x;</Key></Contents>"
      "<Contents><Key>k</Key></Contents></ListBucketResult>";
  keys[0] = '\0';
  rc = wds__s3_parse_listing(bomb, sizeof bomb - 1, collect, keys, &truncated,
                             &next, &err);
  ASSERT_TRUE(strstr(keys, "root:") == NULL);
  free(next);
  next = NULL;
  /* A page that is not truncated has no token. */
  static const char last[] = "<ListBucketResult><IsTruncated>false"
                             "</IsTruncated></ListBucketResult>";
  ASSERT_EQ_INT(wds__s3_parse_listing(last, sizeof last - 1, collect, keys,
                                      &truncated, &next, &err),
                WDS_OK);
  ASSERT_EQ_INT(truncated, 0);
  ASSERT_TRUE(next == NULL);
}

/* ---- a listing against an endpoint that never answers ---- */

static int silent_fd = -1;
static int silent_port;

static void silent_start(void) {
  silent_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  if (silent_fd < 0 || bind(silent_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(silent_fd, 16) != 0 ||
      getsockname(silent_fd, (struct sockaddr *)&a, &n) != 0) {
    perror("silent server");
    return;
  }
  silent_port = ntohs(a.sin_port);
}

static void silent_env(void) {
  char ep[64];
  snprintf(ep, sizeof ep, "http://127.0.0.1:%d", silent_port);
  setenv("AWS_ENDPOINT_URL", ep, 1);
  setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "THE-SECRET-VALUE", 1);
}

static void *cancel_later(void *p) {
  struct timespec d = {0, 200 * 1000 * 1000};
  nanosleep(&d, NULL);
  wds__cancel_set(p);
  return NULL;
}

#define STALL_SPEC "s3://b/x-*.tar"
#define STALL_TIMEOUT                                                          \
  STALL_SPEC " (ListObjectsV2): no data for 0.3 s (the read timeout; raise "   \
             "it with --read-timeout or read_timeout_ms)"

TEST(a_listing_obeys_the_read_timeout) {
  silent_env();
  const char *spec = STALL_SPEC;
  wds__io_opts io = {.read_timeout_ms = 300};
  wds_url_list l = {0};
  wds__err e;
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds__spec_expand_io(&spec, 1, 0, 0, &io, &l, &e),
                WDS_ERR_TIMEOUT);
  double dt = test_now_s() - t0;
  printf("  %s (%.2f s)\n", e.msg, dt);
  ASSERT_TRUE(dt >= 0.29 && dt < 5);
  ASSERT_STREQ(e.msg, STALL_TIMEOUT);
  ASSERT_TRUE(l.count == 0 && l.urls == NULL);
}

TEST(a_cancel_ends_a_stalled_listing) {
  silent_env();
  const char *spec = STALL_SPEC;
  wds__cancel c;
  wds__cancel_init(&c);
  wds__io_opts io = {.read_timeout_ms = -1, .cancel = &c};
  wds_url_list l = {0};
  wds__err e;
  pthread_t t;
  pthread_create(&t, NULL, cancel_later, &c);
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds__spec_expand_io(&spec, 1, 0, 0, &io, &l, &e),
                WDS_ERR_CANCELLED);
  double dt = test_now_s() - t0;
  pthread_join(t, NULL);
  printf("  %s (%.2f s)\n", e.msg, dt);
  ASSERT_TRUE(dt >= 0.15 && dt < 2);
  ASSERT_STREQ(e.msg, STALL_SPEC " (ListObjectsV2): cancelled");
  /* Already cancelled: no request at all. */
  t0 = test_now_s();
  ASSERT_EQ_INT(wds__spec_expand_io(&spec, 1, 0, 0, &io, &l, &e),
                WDS_ERR_CANCELLED);
  ASSERT_TRUE(test_now_s() - t0 < 0.5);
  ASSERT_STREQ(e.msg, STALL_SPEC " (ListObjectsV2): cancelled");
  wds__cancel_destroy(&c);
}

TEST(the_reader_and_the_loader_list_with_their_read_timeout) {
  silent_env();
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  rc.spec = STALL_SPEC;
  rc.read_timeout_ms = 300;
  wds_reader *r = NULL;
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds_reader_open(&rc, &r), WDS_ERR_TIMEOUT);
  ASSERT_TRUE(test_now_s() - t0 < 5);
  ASSERT_TRUE(r == NULL);
  ASSERT_STREQ(wds_last_error(), STALL_TIMEOUT);

  static const wds_field_spec fs[1] = {{"cls", WDS_DECODE_INT, 0, 0, 0}};
  wds_loader_config lc = WDS_LOADER_CONFIG_INIT;
  lc.spec = STALL_SPEC;
  lc.rank = 0;
  lc.world_size = 1;
  lc.fields = fs;
  lc.field_count = 1;
  lc.batch_size = 4;
  lc.read_timeout_ms = 300;
  wds_loader *l = NULL;
  t0 = test_now_s();
  ASSERT_EQ_INT(wds_loader_open(&lc, &l), WDS_ERR_TIMEOUT);
  ASSERT_TRUE(test_now_s() - t0 < 5);
  ASSERT_TRUE(l == NULL);
  ASSERT_STREQ(wds_last_error(), STALL_TIMEOUT);

  /* One source of several, named by the loader. */
  wds_source_config src[2] = {{.spec = STALL_SPEC}, {.spec = STALL_SPEC}};
  lc.spec = NULL;
  lc.sources = src;
  lc.source_count = 2;
  ASSERT_EQ_INT(wds_loader_open(&lc, &l), WDS_ERR_TIMEOUT);
  ASSERT_STREQ(wds_last_error(), "source 0: " STALL_TIMEOUT);
}

/* Ctrl-C in Python reaches a listing the loader's open makes, as it does
 * the reader's: the interrupt check ends it (the read timeout, 5 s, is
 * far off), from the caller's thread. */
TEST(the_reader_and_the_loader_list_under_their_interrupt_check) {
  silent_env();
  interrupter it = {.caller = pthread_self(), .after = 3};
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  rc.spec = STALL_SPEC;
  rc.read_timeout_ms = 5000;
  rc.interrupt = interrupt_check;
  rc.interrupt_ctx = &it;
  wds_reader *r = NULL;
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds_reader_open(&rc, &r), WDS_ERR_CANCELLED);
  ASSERT_TRUE(test_now_s() - t0 < 2);
  ASSERT_STREQ(wds_last_error(), STALL_SPEC " (ListObjectsV2): interrupted");

  static const wds_field_spec fs[1] = {{"cls", WDS_DECODE_INT, 0, 0, 0}};
  wds_loader_config lc = WDS_LOADER_CONFIG_INIT;
  lc.spec = STALL_SPEC;
  lc.rank = 0;
  lc.world_size = 1;
  lc.fields = fs;
  lc.field_count = 1;
  lc.batch_size = 4;
  lc.read_timeout_ms = 5000;
  lc.interrupt = interrupt_check;
  lc.interrupt_ctx = &it;
  wds_loader *l = NULL;
  atomic_store(&it.calls, 0);
  t0 = test_now_s();
  int st = wds_loader_open(&lc, &l);
  double dt = test_now_s() - t0;
  printf("  loader: %d after %.2f s: %s\n", st, dt, wds_last_error());
  ASSERT_EQ_INT(st, WDS_ERR_CANCELLED);
  ASSERT_TRUE(dt < 2);
  ASSERT_TRUE(l == NULL);
  ASSERT_STREQ(wds_last_error(), STALL_SPEC " (ListObjectsV2): interrupted");

  wds_source_config src[2] = {{.spec = STALL_SPEC}, {.spec = STALL_SPEC}};
  lc.spec = NULL;
  lc.sources = src;
  lc.source_count = 2;
  atomic_store(&it.calls, 0);
  t0 = test_now_s();
  ASSERT_EQ_INT(wds_loader_open(&lc, &l), WDS_ERR_CANCELLED);
  ASSERT_TRUE(test_now_s() - t0 < 2);
  ASSERT_STREQ(wds_last_error(),
               "source 0: " STALL_SPEC " (ListObjectsV2): interrupted");
  ASSERT_EQ_INT(atomic_load(&it.other_thread), 0);
}

int main(void) {
  RUN(urls_map_to_requests);
  RUN(environment_is_read);
  RUN(missing_credentials_are_named);
  RUN(listings_are_recognised);
  RUN(xml_is_parsed);
  /* The tests against a local server need libcurl: without it each is
   * counted as skipped. */
  int curl = wds__http_available();
  if (curl) {
    silent_start();
    if (silent_port <= 0)
      return 1;
  }
  RUN_IF(curl, a_listing_obeys_the_read_timeout, "built without libcurl");
  RUN_IF(curl, a_cancel_ends_a_stalled_listing, "built without libcurl");
  RUN_IF(curl, the_reader_and_the_loader_list_with_their_read_timeout,
         "built without libcurl");
  RUN_IF(curl, the_reader_and_the_loader_list_under_their_interrupt_check,
         "built without libcurl");
  if (curl)
    close(silent_fd);
  return test_summary();
}
