/* test_s3.c — the s3:// parts that need no server: an s3:// URL mapped to
 * the request URL (host, path, region; path style with an endpoint,
 * virtual-host style on AWS), which URLs name listings, S3's XML error
 * bodies and ListObjectsV2 pages parsed (and bad XML refused), missing
 * credentials named. Reading and listing against a server are
 * tests/integration/s3.sh's (moto). */
#include <stdlib.h>
#include <string.h>

#include "shards/s3.h"
#include "test.h"

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

int main(void) {
  RUN(urls_map_to_requests);
  RUN(environment_is_read);
  RUN(missing_credentials_are_named);
  RUN(listings_are_recognised);
  RUN(xml_is_parsed);
  return test_summary();
}
