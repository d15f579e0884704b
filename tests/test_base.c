/* test_base.c — the internal base (base/): UTF-8, the JSON reader and
 * writer, the size grammar, the job topology from the environment, URL to
 * path, splitmix64; and the multi-spec expansion the tools use. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "base/rng.h"
#include "base/size.h"
#include "base/text.h"
#include "base/topology.h"
#include "base/url.h"
#include "base/utf8.h"
#include "test.h"
#include "wds/spec.h"

/* ---- utf8 ---- */

TEST(utf8_rules) {
  const unsigned char ok2[] = {0xC3, 0xA9}, ok4[] = {0xF0, 0x9F, 0x98, 0x80};
  ASSERT_EQ_INT(wds__utf8_len((const unsigned char *)"a", 1), 1);
  ASSERT_EQ_INT(wds__utf8_len(ok2, 2), 2);
  ASSERT_EQ_INT(wds__utf8_len(ok4, 4), 4);
  ASSERT_EQ_INT(wds__utf8_len(ok4, 3), 0); /* cut short */
  const unsigned char overlong[] = {0xC0, 0x80},
                      surrogate[] = {0xED, 0xA0, 0x80};
  const unsigned char too_big[] = {0xF4, 0x90, 0x80, 0x80};
  ASSERT_EQ_INT(wds__utf8_len(overlong, 2), 0);
  ASSERT_EQ_INT(wds__utf8_len(surrogate, 3), 0);
  ASSERT_EQ_INT(wds__utf8_len(too_big, 4), 0);
  size_t bad = 99;
  ASSERT_EQ_INT(wds__utf8_valid("caf\xc3\xa9", 5, &bad), 1);
  ASSERT_EQ_U64(bad, 5);
  ASSERT_EQ_INT(wds__utf8_valid("ab\xff", 3, &bad), 0);
  ASSERT_EQ_U64(bad, 2);
  unsigned char b[4];
  ASSERT_EQ_INT(wds__utf8_encode(0xE9, b), 2);
  ASSERT_TRUE(b[0] == 0xC3 && b[1] == 0xA9);
  ASSERT_EQ_INT(wds__utf8_encode(0x1F600, b), 4);
  ASSERT_TRUE(memcmp(b, ok4, 4) == 0);
}

/* ---- json ---- */

static int skip_all(const char *text, unsigned flags, wds__err *e) {
  wds__json j;
  wds__json_init(&j, text, strlen(text), flags, e);
  int rc = wds__json_skip(&j, 1);
  return rc ? rc : wds__json_end(&j, "the value");
}

TEST(json_valid_and_strict) {
  wds__err e = {""};
  ASSERT_EQ_INT(
      skip_all(" {\"a\": [1, -2.5e+3, true, null, {}], \"b\": \"x\"} ", 0, &e),
      WDS_OK);
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"{\"a\": 1,}", "offset 8: expected a string"},
      {"[1 2]", "offset 3: expected ',' or ']' in an array"},
      {"01", "offset 0: number with a leading zero"},
      {"1.", "offset 0: invalid number (digits must follow '.')"},
      {"\"a\x01\"", "offset 2: control character in a string"},
      {"\"\xff\"", "offset 1: invalid UTF-8 in a string"},
      {"\"\\x\"", "offset 1: invalid escape in a string"},
      {"\"\\ud800\"", "offset 1: unpaired surrogate"},
      {"\"abc", "offset 0: unterminated string"},
      {"{} x", "offset 3: unexpected data after the value"},
      {"\xef\xbb\xbf{}", "offset 0: invalid value"},
      {"tru", "offset 0: invalid value"},
      {"", "offset 0: unexpected end of input"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    e.msg[0] = '\0';
    ASSERT_EQ_INT(skip_all(bad[i].text, 0, &e), WDS_ERR_FORMAT);
    ASSERT_CONTAINS(e.msg, bad[i].want);
  }
  /* Depth: 64 levels pass, 65 do not. */
  char deep[200];
  memset(deep, '[', 64);
  memset(deep + 64, ']', 64);
  deep[128] = '\0';
  ASSERT_EQ_INT(skip_all(deep, 0, &e), WDS_OK);
  memset(deep, '[', 65);
  memset(deep + 65, ']', 65);
  deep[130] = '\0';
  ASSERT_EQ_INT(skip_all(deep, 0, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "nesting deeper than 64 levels");
}

TEST(json_strings_numbers_lines) {
  wds__err e = {""};
  wds__json j;
  const char *text = "\"a\\u00e9\\ud83d\\ude00\\udc80\\n\"";
  char out[16];
  size_t len;
  /* \udc80 is a raw byte with surrogateescape only. */
  wds__json_init(&j, text, strlen(text), 0, &e);
  ASSERT_EQ_INT(wds__json_string(&j, out, sizeof out, &len), WDS_ERR_FORMAT);
  wds__json_init(&j, text, strlen(text), WDS__JSON_SURROGATEESCAPE, &e);
  ASSERT_EQ_INT(wds__json_string(&j, out, sizeof out, &len), WDS_OK);
  ASSERT_EQ_U64(len, 9);
  ASSERT_TRUE(memcmp(out, "a\xc3\xa9\xf0\x9f\x98\x80\x80\n", 9) == 0);
  /* Numbers. */
  int is_uint;
  uint64_t v;
  const char *nums[] = {"18446744073709551615", "18446744073709551616", "-1",
                        "1e3"};
  int want[] = {1, 2, 0, 0};
  for (int i = 0; i < 4; i++) {
    wds__json_init(&j, nums[i], strlen(nums[i]), 0, &e);
    ASSERT_EQ_INT(wds__json_number(&j, &is_uint, &v), WDS_OK);
    ASSERT_EQ_INT(is_uint, want[i]);
  }
  /* A NUL inside a string that must not hold one. */
  const char *nul = "\"a\\u0000b\"";
  char *s = NULL;
  wds__json_init(&j, nul, strlen(nul), 0, &e);
  ASSERT_EQ_INT(wds__json_string_dup(&j, "the key", &s, NULL), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "the key contains a NUL character");
  /* Errors name line and column when the cursor has a line. */
  wds__json_init(&j, "{\"a\" 1}", 7, 0, &e);
  j.line = 7;
  ASSERT_EQ_INT(wds__json_skip(&j, 1), WDS_ERR_FORMAT);
  ASSERT_STREQ(e.msg, "line 7, column 6: expected ':' after an object key");
}

TEST(json_writer_round_trip) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  ASSERT_TRUE(f != NULL);
  const char raw[] = "q\"b\\\n\x01 \xc3\xa9 \xff";
  wds__json_write_string(f, raw, sizeof raw - 1);
  putc(' ', f);
  wds__json_write_i64_or_null(f, -1);
  putc(' ', f);
  wds__json_write_i64_or_null(f, 42);
  fclose(f);
  ASSERT_STREQ(buf, "\"q\\\"b\\\\\\n\\u0001 \xc3\xa9 \\udcff\" null 42");
  /* Read back with surrogateescape: the same bytes. */
  wds__err e = {""};
  wds__json j;
  char out[32];
  size_t len;
  wds__json_init(&j, buf, strlen(buf), WDS__JSON_SURROGATEESCAPE, &e);
  ASSERT_EQ_INT(wds__json_string(&j, out, sizeof out, &len), WDS_OK);
  ASSERT_EQ_U64(len, sizeof raw - 1);
  ASSERT_TRUE(memcmp(out, raw, len) == 0);
  free(buf);
  /* Numbers: JSON has no NaN or infinity (printf writes "-nan", "inf"). */
  f = open_memstream(&buf, &n);
  ASSERT_TRUE(f != NULL);
  double vals[] = {1.5, NAN, -NAN, INFINITY, -INFINITY, -0.25};
  for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
    wds__json_write_double(f, "%.2f", vals[i]);
    putc(' ', f);
  }
  fclose(f);
  ASSERT_STREQ(buf, "1.50 null null null null -0.25 ");
  free(buf);
}

/* ---- size ---- */

TEST(size_grammar) {
  static const struct {
    const char *s;
    uint64_t v;
  } ok[] = {{"0", 0},
            {"1000", 1000},
            {"1K", 1024},
            {"1k", 1024},
            {"2M", 2 << 20},
            {"3G", 3ull << 30},
            {"1T", 1ull << 40},
            {"1KiB", 1024},
            {"500Mi", 500ull << 20},
            {"1KB", 1000},
            {"3GB", 3000000000ull},
            {"1TB", 1000000000000ull},
            {"100B", 100},
            {"18446744073709551615", UINT64_MAX},
            {"16777215T", 16777215ull << 40}};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    uint64_t v = 7;
    ASSERT_EQ_INT(wds__size_parse(ok[i].s, &v), 0);
    ASSERT_EQ_U64(v, ok[i].v);
  }
  static const char *const bad[] = {
      "",          "-1",  "+1",  " 1", "1 ",  "1.5G", "3e9",
      "1X",        "1Kb", "1iB", "K",  "1GG", "1B5",  "18446744073709551616",
      "16777216T", NULL};
  for (size_t i = 0; bad[i]; i++) {
    uint64_t v;
    ASSERT_EQ_INT(wds__size_parse(bad[i], &v), -1);
  }
  ASSERT_EQ_INT(wds__size_parse(NULL, NULL), -1);
}

/* ---- topology ---- */

static int topo(wds__topology *t, wds__err *e, const char *const *vars) {
  e->msg[0] = '\0';
  return wds__topology_from_env(t, test_env_lookup, (void *)vars, e);
}

TEST(topology_one_rule) {
  wds__topology t;
  wds__err e;
  const char *none[] = {"LOCAL_WORLD_SIZE=4", "SLURM_NTASKS=8", NULL};
  ASSERT_EQ_INT(topo(&t, &e, none), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_NONE && t.rank == 0 &&
              t.world_size == 1 && t.local_rank == -1);
  const char *torch[] = {"RANK=5",
                         "WORLD_SIZE=8",
                         "LOCAL_RANK=1",
                         "LOCAL_WORLD_SIZE=4",
                         "SLURM_PROCID=0",
                         "SLURM_NTASKS=2",
                         NULL};
  ASSERT_EQ_INT(topo(&t, &e, torch), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_TORCHRUN && t.rank == 5 &&
              t.world_size == 8 && t.local_rank == 1 &&
              t.local_world_size == 4);
  const char *torch2[] = {"RANK=1", "WORLD_SIZE=2", NULL};
  ASSERT_EQ_INT(topo(&t, &e, torch2), WDS_OK);
  ASSERT_TRUE(t.rank == 1 && t.world_size == 2 && t.local_rank == -1);
  const char *slurm[] = {"SLURM_PROCID=3",         "SLURM_NTASKS=8",
                         "SLURM_LOCALID=1",        "OMPI_COMM_WORLD_RANK=0",
                         "OMPI_COMM_WORLD_SIZE=2", NULL};
  ASSERT_EQ_INT(topo(&t, &e, slurm), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_SLURM && t.rank == 3 &&
              t.world_size == 8 && t.local_rank == 1);
  const char *ompi[] = {"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=4",
                        "OMPI_COMM_WORLD_LOCAL_RANK=0",
                        "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
  ASSERT_EQ_INT(topo(&t, &e, ompi), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_OMPI && t.rank == 2 &&
              t.world_size == 4 && t.local_rank == 0 &&
              t.local_world_size == 2);
  ASSERT_STREQ(t.rank_var, "OMPI_COMM_WORLD_RANK");
  ASSERT_STREQ(t.size_var, "OMPI_COMM_WORLD_SIZE");
  /* MPICH's Hydra (and srun --mpi=pmi2): PMI_RANK, PMI_SIZE. */
  const char *pmi[] = {"PMI_RANK=1", "PMI_SIZE=3", "PMIX_RANK=1", NULL};
  ASSERT_EQ_INT(topo(&t, &e, pmi), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_PMI && t.rank == 1 &&
              t.world_size == 3 && t.local_rank == -1);
  ASSERT_STREQ(t.rank_var, "PMI_RANK");
  /* A PMIx launch gives its size through a launcher's variables. */
  const char *pmix[] = {"PMIX_RANK=1", "SLURM_PROCID=1", "SLURM_NTASKS=2",
                        NULL};
  ASSERT_EQ_INT(topo(&t, &e, pmix), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_SLURM && t.rank == 1 &&
              t.world_size == 2);
  /* PMIX_RANK=0 alone is rank 0 (of one, or the others are refused). */
  const char *pmix0[] = {"PMIX_RANK=0", NULL};
  ASSERT_EQ_INT(topo(&t, &e, pmix0), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_NONE && t.rank == 0 &&
              t.world_size == 1 && t.rank_var == NULL);
  /* torchrun started inside an mpirun or srun task: its children inherit
   * the task's variables, which name torchrun's agent; torchrun's win. */
  const char *nested[] = {"RANK=1",
                          "WORLD_SIZE=2",
                          "LOCAL_RANK=1",
                          "TORCHELASTIC_RUN_ID=none",
                          "OMPI_COMM_WORLD_RANK=0",
                          "OMPI_COMM_WORLD_SIZE=1",
                          "PMI_RANK=0",
                          "PMI_SIZE=1",
                          "PMIX_RANK=3",
                          NULL};
  ASSERT_EQ_INT(topo(&t, &e, nested), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_TORCHRUN && t.rank == 1 &&
              t.world_size == 2 && t.local_rank == 1);
  /* A batch script's SLURM_PROCID without SLURM_NTASKS: no launcher. */
  const char *batch[] = {"SLURM_PROCID=0", NULL};
  ASSERT_EQ_INT(topo(&t, &e, batch), WDS_OK);
  ASSERT_TRUE(t.launcher == WDS__LAUNCHER_NONE);
  static const struct {
    const char *vars[5];
    const char *want;
  } bad[] = {
      {{"RANK=1", NULL}, "WORLD_SIZE is not set, but RANK='1' is"},
      {{"LOCAL_RANK=0", NULL}, "RANK is not set, but LOCAL_RANK='0' is"},
      {{"RANK=x", "WORLD_SIZE=2", NULL}, "RANK='x': not an integer in 0..1"},
      {{"RANK=2", "WORLD_SIZE=2", NULL}, "RANK='2'"},
      {{"RANK=0", "WORLD_SIZE=6", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=4", NULL},
       "WORLD_SIZE=6 is not a multiple of LOCAL_WORLD_SIZE=4"},
      {{"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=4", NULL},
       "expected LOCAL_RANK=1"},
      {{"SLURM_PROCID=8", "SLURM_NTASKS=8", NULL}, "SLURM_PROCID='8'"},
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=0", NULL},
       "OMPI_COMM_WORLD_SIZE='0'"},
      /* A rank of a job whose size nothing gives: every process would
       * take itself for rank 0 of 1, each a duplicate of the job. */
      {{"PMI_RANK=1", NULL},
       "PMI_RANK='1' is set but PMI_SIZE is not: a rank of a job of unknown "
       "size"},
      {{"OMPI_COMM_WORLD_RANK=1", NULL}, "OMPI_COMM_WORLD_SIZE is not"},
      {{"PMI_RANK=3", "PMI_SIZE=3", NULL}, "PMI_RANK='3'"},
      {{"PMIX_RANK=1", NULL}, "PMIX_RANK='1' names a process of a PMIx"},
      /* A size without the rank: the same, not one full job each. */
      {{"PMI_SIZE=2", NULL},
       "PMI_SIZE='2' is set but PMI_RANK is not: the size of a job without "
       "this process's rank"},
      {{"OMPI_COMM_WORLD_SIZE=2", NULL},
       "OMPI_COMM_WORLD_SIZE='2' is set but OMPI_COMM_WORLD_RANK is not"},
      /* torchrun's mark without its rank. */
      {{"TORCHELASTIC_RUN_ID=x", "OMPI_COMM_WORLD_RANK=0",
        "OMPI_COMM_WORLD_SIZE=1", NULL},
       "RANK is not set, but TORCHELASTIC_RUN_ID='x' is"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ASSERT_EQ_INT(topo(&t, &e, bad[i].vars), WDS_ERR_INVALID);
    ASSERT_CONTAINS(e.msg, bad[i].want);
    ASSERT_TRUE(t.rank == 0 && t.world_size == 1);
  }
}

/* ---- url ---- */

TEST(url_to_path) {
  static const struct {
    const char *url, *path;
  } cases[] = {{"a.tar", "a.tar"},
               {"/d/a.tar", "/d/a.tar"},
               {"file:///d/a.tar", "/d/a.tar"},
               {"file://localhost/d/a.tar", "/d/a.tar"},
               {"file://rel/a.tar", NULL},
               {"file://host/d/a.tar", NULL},
               {"-", NULL},
               {"pipe:cat a.tar", NULL},
               {"http://h/a.tar", NULL},
               {"s3+x://b/a.tar", NULL},
               {"dir:/x", "dir:/x"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *p = wds__url_local_path(cases[i].url);
    if (!cases[i].path)
      ASSERT_TRUE(p == NULL);
    else
      ASSERT_STREQ(p, cases[i].path);
  }
  ASSERT_EQ_INT(wds__url_is_bad_file("file://rel/a.tar"), 1);
  ASSERT_EQ_INT(wds__url_is_bad_file("file:///a.tar"), 0);
  ASSERT_EQ_INT(wds__url_is_bad_file("http://h/a.tar"), 0);
  ASSERT_EQ_INT(wds__url_has_scheme("http://h"), 1);
  ASSERT_EQ_INT(wds__url_has_scheme("://h"), 0);
}

/* ---- rng ---- */

/* One identity whatever scheme names a shard (base/url.h). */
TEST(shard_identity) {
  static const struct {
    const char *url, *id;
  } cases[] = {
      {"http://host/a.tar", "http://host/a.tar"},
      {"HTTP://Host.Example:80/a.tar", "http://host.example/a.tar"},
      {"https://h:443/d/./x/../a.tar#frag", "https://h/d/a.tar"},
      {"https://h:8443/a.tar", "https://h:8443/a.tar"},
      {"http://h:080/a.tar", "http://h/a.tar"},
      {"http://h", "http://h/"},
      {"http://h/%7euser/a%2db%2fc%3F.tar?x=%2a&y=%7E",
       "http://h/~user/a-b%2Fc%3F.tar?x=%2A&y=~"},
      {"http://h/a/b/../../../a.tar", "http://h/a.tar"},
      {"http://h/a.tar?sig=A..B/../C", "http://h/a.tar?sig=A..B/../C"},
      {"http://User:Pw@H/a.tar", "http://User:Pw@h/a.tar"},
      {"http://[::1]:80/a.tar", "http://[::1]/a.tar"},
      {"http://[::1]/a.tar", "http://[::1]/a.tar"},
      /* pipe: commands that only fetch a URL are that URL */
      {"pipe:curl -s http://H/a.tar", "http://h/a.tar"},
      {"pipe:curl -sL 'http://h/a b.tar'", "http://h/a b.tar"},
      {"pipe:curl -f -s -S -L \"http://h:80/a.tar\"", "http://h/a.tar"},
      {"pipe:curl --silent --location --retry 3 -o - http://h/a.tar",
       "http://h/a.tar"},
      {"pipe:/usr/bin/curl -fsSL http://h/a.tar", "http://h/a.tar"},
      {"pipe:curl -sLo- http://h/a.tar", "http://h/a.tar"},
      {"pipe:curl -s http\\://h/a.tar", "http://h/a.tar"},
      {"pipe:wget -q -O - http://h/a.tar", "http://h/a.tar"},
      {"pipe:wget -qO- https://h/a.tar", "https://h/a.tar"},
      {"pipe:aws s3 cp s3://Bucket/k/a.tar -", "s3://bucket/k/a.tar"},
      {"pipe:aws s3 cp --quiet s3://b/k/a.tar -", "s3://b/k/a.tar"},
      /* AWS's https forms of an S3 object */
      {"https://b.s3.amazonaws.com/k/a%20b.tar", "s3://b/k/a b.tar"},
      {"https://b.s3.us-west-2.amazonaws.com/k/a.tar", "s3://b/k/a.tar"},
      {"https://b.s3-eu-west-1.amazonaws.com/k/a.tar", "s3://b/k/a.tar"},
      {"https://s3.us-west-2.amazonaws.com/b/k/a.tar", "s3://b/k/a.tar"},
      {"https://my.bucket.s3.amazonaws.com/a.tar", "s3://my.bucket/a.tar"},
      {"https://s3.amazonaws.com/b/k/a.tar?versionId=3",
       "https://s3.amazonaws.com/b/k/a.tar?versionId=3"},
      {"s3://b/k/./a%20.tar", "s3://b/k/./a%20.tar"},
      /* not fetch-only commands, and other URLs: as they are */
      {"pipe:curl -s http://h/a.tar | zcat",
       "pipe:curl -s http://h/a.tar | zcat"},
      {"pipe:curl -s http://h/a.tar > x", "pipe:curl -s http://h/a.tar > x"},
      {"pipe:curl -s -d x http://h/a.tar", "pipe:curl -s -d x http://h/a.tar"},
      {"pipe:curl -s http://h/a.tar http://h/b.tar",
       "pipe:curl -s http://h/a.tar http://h/b.tar"},
      {"pipe:curl -s $URL", "pipe:curl -s $URL"},
      {"pipe:curl -s 'http://h/a.tar", "pipe:curl -s 'http://h/a.tar"},
      {"pipe:wget -q http://h/a.tar", "pipe:wget -q http://h/a.tar"},
      {"pipe:cat a.tar", "pipe:cat a.tar"},
      {"pipe:curl -s ftp://h/a.tar", "pipe:curl -s ftp://h/a.tar"},
      {"FTP://H/a.tar", "ftp://H/a.tar"},
      {"a.tar", "a.tar"},
      {"/d/../a.tar", "/d/../a.tar"},
      {"-", "-"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *id = wds__url_identity(cases[i].url);
    if (!id || strcmp(id, cases[i].id) != 0)
      printf("  %s -> %s (want %s)\n", cases[i].url, id ? id : "NULL",
             cases[i].id);
    ASSERT_STREQ(id, cases[i].id);
    free(id);
  }
}

/* Secrets in URLs are hidden for messages; the rest stays readable. */
TEST(url_redact_hides_secrets) {
  static const struct {
    const char *url, *want;
  } cases[] = {
      {"https://user:hunter2@h.example/a.tar",
       "https://user:***@h.example/a.tar"},
      {"https://user@h.example/a.tar", "https://user@h.example/a.tar"},
      {"https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&"
       "X-Amz-Credential=AKIA%2F20260101&X-Amz-Signature=deadbeef&"
       "X-Amz-Security-Token=FwoG&X-Amz-Expires=3600",
       "https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&"
       "X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Security-Token=***&"
       "X-Amz-Expires=3600"},
      {"https://a.blob.core.windows.net/c/x.tar?sv=2021&sig=abc%2Bdef#f",
       "https://a.blob.core.windows.net/c/x.tar?sv=2021&sig=***#f"},
      {"http://h/x.tar?Signature=s1&token=t1&access_token=t2&page=2",
       "http://h/x.tar?Signature=***&token=***&access_token=***&page=2"},
      {"pipe:curl -s 'https://u:pw@h/x.tar?sig=zz' | cat",
       "pipe:curl -s 'https://u:***@h/x.tar?sig=***' | cat"},
      {"http://h/x.tar?sig=", "http://h/x.tar?sig="},
      {"s3://bucket/a/../x.tar", "s3://bucket/a/../x.tar"},
      {"/data/a.tar", "/data/a.tar"},
      {"http://h:8080/a@b.tar", "http://h:8080/a@b.tar"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char b[WDS__URL_REDACT_MAX];
    const char *got = wds__url_redact(cases[i].url, b, sizeof b);
    if (strcmp(got, cases[i].want) != 0)
      printf("  %s -> %s\n", cases[i].url, got);
    ASSERT_STREQ(got, cases[i].want);
    if (strcmp(cases[i].url, cases[i].want) == 0)
      ASSERT_TRUE(got == cases[i].url); /* nothing hidden: as it is */
  }
  /* A small buffer cuts the text, never overruns. */
  char small[12];
  ASSERT_STREQ(wds__url_redact("http://u:p@h/x.tar", small, sizeof small),
               "http://u:**");
}

/* A pipe: command's credentials are hidden as a URL's are, by the same
 * rules for the URLs in it, and for what a command carries besides:
 * -u/--user USER:PASS, secret header values (Authorization, X-Amz-*, ...),
 * secret options (--password ...) and assignments (AWS_SECRET_ACCESS_KEY=,
 * *_TOKEN=). Only what is shown changes, never what runs; text that is not
 * a command keeps these forms. */
TEST(url_redact_hides_a_commands_secrets) {
  static const struct {
    const char *url, *want;
  } cases[] = {
      {"pipe:curl -s -u alice:PW1 https://h/x.tar",
       "pipe:curl -s -u alice:*** https://h/x.tar"},
      {"pipe:curl -s --user 'alice:PW1' https://h/x.tar",
       "pipe:curl -s --user 'alice:***' https://h/x.tar"},
      {"pipe:curl --user=alice:PW1 -ualice:PW2 -sSu \"alice:PW3\" https://h/a",
       "pipe:curl --user=alice:*** -ualice:*** -sSu \"alice:***\" https://h/a"},
      {"pipe:curl -u alice https://h/x.tar",
       "pipe:curl -u alice https://h/x.tar"},
      {"pipe:curl -sH 'Authorization: Bearer TOK1' https://h/x.tar",
       "pipe:curl -sH 'Authorization: ***' https://h/x.tar"},
      {"pipe:curl --header \"X-Amz-Security-Token: TOK2\" -H "
       "'x-amz-date:20260101' -H 'Accept: */*' https://h/x.tar",
       "pipe:curl --header \"X-Amz-Security-Token: ***\" -H 'x-amz-date:***' "
       "-H 'Accept: */*' https://h/x.tar"},
      {"pipe:wget --header='Proxy-Authorization: Basic YWxh' -q -O - "
       "https://h/a",
       "pipe:wget --header='Proxy-Authorization: ***' -q -O - https://h/a"},
      {"pipe:wget --password=PW4 --http-password PW5 --ask-password -O - "
       "https://h/a",
       "pipe:wget --password=*** --http-password *** --ask-password -O - "
       "https://h/a"},
      {"pipe:AWS_SECRET_ACCESS_KEY=SEC1 AWS_SESSION_TOKEN='TOK3' "
       "AWS_REGION=eu-west-1 aws s3 cp s3://b/k.tar -",
       "pipe:AWS_SECRET_ACCESS_KEY=*** AWS_SESSION_TOKEN='***' "
       "AWS_REGION=eu-west-1 aws s3 cp s3://b/k.tar -"},
      {"pipe:env HF_TOKEN=hf_x OPENAI_API_KEY=sk-1 python get.py | cat",
       "pipe:env HF_TOKEN=*** OPENAI_API_KEY=*** python get.py | cat"},
      {"pipe:curl -s -u a:PW6 'https://u:PW7@h/x.tar?sig=zz&n=1'",
       "pipe:curl -s -u a:*** 'https://u:***@h/x.tar?sig=***&n=1'"},
      /* a spec with a command after another shard */
      {"/d/a.tar::pipe:curl -u a:PW8 https://h/b.tar",
       "/d/a.tar::pipe:curl -u a:*** https://h/b.tar"},
      /* nothing to hide: as it is */
      {"pipe:curl -sSLf -H 'Accept: x' https://h/x.tar",
       "pipe:curl -sSLf -H 'Accept: x' https://h/x.tar"},
      /* not a command: a path is what it is */
      {"/data/TOKEN=1/-u a:b.tar", "/data/TOKEN=1/-u a:b.tar"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char b[WDS__URL_REDACT_MAX];
    const char *got = wds__url_redact(cases[i].url, b, sizeof b);
    if (strcmp(got, cases[i].want) != 0)
      printf("  %s\n   -> %s\n", cases[i].url, got);
    ASSERT_STREQ(got, cases[i].want);
    if (strcmp(cases[i].url, cases[i].want) == 0)
      ASSERT_TRUE(got == cases[i].url);
    char *full = wds__url_redacted(cases[i].url); /* in full: the same */
    ASSERT_STREQ(full, cases[i].want);
    free(full);
  }
  /* A command without its "pipe:" (source.c's messages). */
  char b[WDS__URL_REDACT_MAX];
  ASSERT_STREQ(
      wds__command_redact("curl -su bob:PW9 https://h/x.tar", b, sizeof b),
      "curl -su bob:*** https://h/x.tar");
  /* Cut to a small buffer, never overrun; no part of a secret shown. */
  char small[16];
  ASSERT_STREQ(
      wds__url_redact("pipe:curl -u a:LONGSECRET x", small, sizeof small),
      "pipe:curl -u a:");
  ASSERT_STREQ(wds__url_redact("pipe:curl -u a:LONGSECRET x", b, sizeof b),
               "pipe:curl -u a:*** x");
}

/* Any text, however its quotes and options are cut: the redaction stays
 * inside its buffers (ASan watches), a full redaction is never longer than
 * 3 bytes per byte and equals one into a large buffer. */
TEST(url_redact_survives_any_command) {
  static const char alphabet[] = "  '\"\\-uUH:=@/?&;aT_KEY=x:p-sheader";
  uint64_t st = 12345;
  char text[48], b[WDS__URL_REDACT_MAX];
  for (int i = 0; i < 20000; i++) {
    size_t n = 5;
    memcpy(text, "pipe:", 5);
    size_t len = 5 + (size_t)(wds__splitmix64(&st) % 40);
    while (n < len)
      text[n++] = alphabet[wds__splitmix64(&st) % (sizeof alphabet - 1)];
    text[n] = '\0';
    char *full = wds__url_redacted(text);
    ASSERT_TRUE(full != NULL);
    ASSERT_TRUE(strlen(full) <= 3 * n + 3);
    const char *r = wds__url_redact(text, b, sizeof b);
    ASSERT_STREQ(r, full);
    char small[9]; /* cut, never overrun */
    r = wds__url_redact(text, small, sizeof small);
    ASSERT_TRUE(r == text || strlen(r) < sizeof small);
    free(full);
  }
}

/* A URL redacted in full (what an index holds) is never cut; shown (what
 * text output prints) it is redacted and escaped. */
TEST(url_redacted_and_shown) {
  char *r = wds__url_redacted("http://u:p@h/x.tar?sig=a&b=1");
  ASSERT_STREQ(r, "http://u:***@h/x.tar?sig=***&b=1"); /* longer: p -> *** */
  free(r);
  r = wds__url_redacted("/data/a.tar");
  ASSERT_STREQ(r, "/data/a.tar");
  free(r);
  size_t n = 3 * WDS__URL_REDACT_MAX;
  char *long_url = malloc(n + 64);
  ASSERT_TRUE(long_url != NULL);
  strcpy(long_url, "http://h/");
  memset(long_url + 9, 'a', n);
  strcpy(long_url + 9 + n, ".tar?token=zz");
  r = wds__url_redacted(long_url);
  ASSERT_TRUE(r && strlen(r) == 9 + n + strlen(".tar?token=***"));
  ASSERT_TRUE(r && strcmp(r + 9 + n, ".tar?token=***") == 0);
  free(r);
  free(long_url);
  char b[WDS__URL_REDACT_MAX];
  const char *plain = "http://h/x.tar";
  ASSERT_TRUE(wds__url_shown(plain, b, sizeof b) == plain);
  ASSERT_STREQ(
      wds__url_shown("http://u:p@h/\x1b]0;t\a.tar?token=x", b, sizeof b),
      "http://u:***@h/\\x1b]0;t\\x07.tar?token=***");
}

/* Untrusted text made safe for a terminal (base/text.h): C0 controls,
 * DEL, C1 controls and bytes that are not UTF-8 as \xHH; printable ASCII
 * and valid UTF-8 kept; blanks and backslashes only when asked; idempotent
 * without WDS__ESC_BACKSLASH; a cut never splits an escape or a character. */
TEST(text_escape) {
  static const struct {
    const char *in;
    unsigned flags;
    const char *want;
  } cases[] = {
      {"plain key", 0, "plain key"},
      {"caf\xc3\xa9 \xe2\x82\xac", 0, "caf\xc3\xa9 \xe2\x82\xac"},
      {"a\nb\tc\x1b]0;t\x07\x1b[2J\x7f", 0,
       "a\\x0ab\\x09c\\x1b]0;t\\x07\\x1b[2J\\x7f"},
      {"c1 \xc2\x9b \xc2\xa0", 0, "c1 \\xc2\\x9b \xc2\xa0"},
      {"bad \xff \xc3 \xed\xa0\x80", 0, "bad \\xff \\xc3 \\xed\\xa0\\x80"},
      {"a b\\c", 0, "a b\\c"},
      {"a b\\c", WDS__ESC_BLANK | WDS__ESC_BACKSLASH, "a\\x20b\\x5cc"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char b[256];
    const char *got = wds__esc(cases[i].in, b, sizeof b, cases[i].flags);
    if (strcmp(got, cases[i].want) != 0)
      printf("  case %zu -> %s\n", i, got);
    ASSERT_STREQ(got, cases[i].want);
    ASSERT_EQ_INT(wds__esc_needed(cases[i].in, cases[i].flags),
                  strcmp(cases[i].in, cases[i].want) != 0);
    if (strcmp(cases[i].in, cases[i].want) == 0)
      ASSERT_TRUE(got == cases[i].in);
    if (!(cases[i].flags & WDS__ESC_BACKSLASH))
      ASSERT_EQ_INT(wds__esc_needed(got, cases[i].flags), 0);
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    ASSERT_TRUE(f != NULL);
    wds__esc_write(f, cases[i].in, cases[i].flags);
    fclose(f);
    ASSERT_STREQ(mem, cases[i].want);
    free(mem);
  }
  char small[7];
  ASSERT_EQ_INT(wds__esc_into(small, sizeof small,
                              "ab\x1b"
                              "cd",
                              0),
                6);
  ASSERT_STREQ(small, "ab\\x1b");
  ASSERT_EQ_INT(wds__esc_into(small, 6,
                              "ab\x1b"
                              "cd",
                              0),
                2);
  ASSERT_STREQ(small, "ab"); /* "\x1b" does not fit whole */
  ASSERT_EQ_INT(wds__esc_into(small, sizeof small, "abcd\xc3\xa9", 0), 6);
  ASSERT_EQ_INT(wds__esc_into(small, 6, "abcd\xc3\xa9", 0), 4);
  ASSERT_STREQ(small, "abcd");
  /* Error messages are made printable as they are made (base/err.c). */
  wds__err e;
  wds__fail(&e, WDS_ERR_FORMAT, "member \"%s\"", "a\x1b[2J\xff");
  ASSERT_STREQ(e.msg, "member \"a\\x1b[2J\\xff\"");
  wds__err_prefix(&e, "%s", "u\rl");
  ASSERT_STREQ(e.msg, "u\\x0dl: member \"a\\x1b[2J\\xff\"");
}

TEST(splitmix64_sequence) {
  /* The reference sequence of splitmix64 from seed 0 (Vigna's). */
  uint64_t s = 0;
  ASSERT_EQ_U64(wds__splitmix64(&s), 0xe220a8397b1dcdafULL);
  ASSERT_EQ_U64(wds__splitmix64(&s), 0x6e789e6aa1b965f4ULL);
  ASSERT_EQ_U64(wds__splitmix64(&s), 0x06c45d188009454fULL);
  ASSERT_EQ_U64(s, 3 * 0x9e3779b97f4a7c15ULL);
  ASSERT_EQ_U64(wds__mix64(0), 0xe220a8397b1dcdafULL);
}

/* ---- several specs, one list ---- */

TEST(spec_expand_list) {
  const char *specs[] = {"a-{0..1}.tar", "b.tar::c-{x,y}.tar"};
  wds_url_list l = {0};
  ASSERT_EQ_INT(wds_spec_expand_list(specs, 2, 0, &l), WDS_OK);
  ASSERT_EQ_U64(l.count, 5);
  ASSERT_STREQ(l.urls[0], "a-0.tar");
  ASSERT_STREQ(l.urls[2], "b.tar");
  ASSERT_STREQ(l.urls[4], "c-y.tar");
  wds_url_list_free(&l);
  /* One limit for the whole list; the message names the spec at fault. */
  ASSERT_EQ_INT(wds_spec_expand_list(specs, 2, 4, &l), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(), "c-{x,y}.tar");
  ASSERT_CONTAINS(wds_last_error(), "after 3 others");
  ASSERT_TRUE(l.count == 0 && l.urls == NULL);
  ASSERT_EQ_INT(wds_spec_expand_list(specs, 0, 0, &l), WDS_OK);
  ASSERT_EQ_U64(l.count, 0);
  ASSERT_EQ_INT(wds_spec_expand_list(NULL, 1, 0, &l), WDS_ERR_INVALID);
}

int main(void) {
  RUN(utf8_rules);
  RUN(url_redact_hides_secrets);
  RUN(url_redact_hides_a_commands_secrets);
  RUN(url_redact_survives_any_command);
  RUN(url_redacted_and_shown);
  RUN(text_escape);
  RUN(json_valid_and_strict);
  RUN(json_strings_numbers_lines);
  RUN(json_writer_round_trip);
  RUN(size_grammar);
  RUN(topology_one_rule);
  RUN(url_to_path);
  RUN(shard_identity);
  RUN(splitmix64_sequence);
  RUN(spec_expand_list);
  return test_summary();
}
