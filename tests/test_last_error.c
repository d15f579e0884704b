/* test_last_error.c — wds_last_error(), the one way to get error text: it
 * is the calling thread's own (two threads failing differently each read
 * theirs), every kind of failing call sets it (opens, calls on a handle,
 * sticky errors on each call, errors of the loader's worker threads, the
 * functions that once took a caller's buffer), and a call that succeeds
 * leaves it. Public API only, as a user of the library sees it. */
#include <pthread.h>
#include <unistd.h>

#include "test.h"
#include "wds/decode.h"
#include "wds/index.h"
#include "wds/loader.h"
#include "wds/outfile.h"
#include "wds/reader.h"
#include "wds/spec.h"
#include "wds/status.h"
#include "wds/writer.h"

static char tmpdir[256];
static char shard[512]; /* two samples "a", "b" with a .cls field */

static int make_shard(void) {
  snprintf(shard, sizeof shard, "%s/good.tar", tmpdir);
  wds_writer_config c = WDS_WRITER_CONFIG_INIT;
  c.pattern = shard;
  wds_writer *w;
  if (wds_writer_open(&c, &w) != WDS_OK)
    return -1;
  wds_writer_field f = {"cls", "1", 1};
  int rc = wds_writer_write_sample(w, "a", &f, 1);
  if (rc == WDS_OK)
    rc = wds_writer_write_sample(w, "b", &f, 1);
  if (rc == WDS_OK)
    rc = wds_writer_close(w);
  else
    wds_writer_abort(w);
  return rc == WDS_OK ? 0 : -1;
}

/* ---- per thread ---- */

typedef struct failer {
  pthread_barrier_t *both_failed;
  int which;
  char seen[1024];
  int rc;
} failer;

static void *fail_in_thread(void *arg) {
  failer *f = arg;
  wds_url_list l = {0};
  if (f->which == 0) {
    f->rc = wds_brace_expand("x{", 0, &l);
  } else {
    wds_writer_config c = WDS_WRITER_CONFIG_INIT;
    wds_writer *w;
    f->rc = wds_writer_open(&c, &w);
  }
  /* both have failed before either reads its text */
  pthread_barrier_wait(f->both_failed);
  snprintf(f->seen, sizeof f->seen, "%s", wds_last_error());
  return NULL;
}

TEST(the_text_is_per_thread) {
  /* this thread's own failure first: the others must not touch it */
  wds_index *ix;
  ASSERT_EQ_INT(wds_index_load("/nonexistent-wds/index.json", 0, &ix),
                WDS_ERR_OPEN);
  char mine[1024];
  snprintf(mine, sizeof mine, "%s", wds_last_error());
  ASSERT_CONTAINS(mine, "/nonexistent-wds/index.json");

  pthread_barrier_t b;
  pthread_barrier_init(&b, NULL, 2);
  failer f[2] = {{&b, 0, "", 0}, {&b, 1, "", 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    ASSERT_EQ_INT(pthread_create(&t[i], NULL, fail_in_thread, &f[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&b);
  ASSERT_EQ_INT(f[0].rc, WDS_ERR_SPEC);
  ASSERT_CONTAINS(f[0].seen, "unbalanced brace");
  ASSERT_TRUE(strstr(f[0].seen, "no output") == NULL);
  ASSERT_EQ_INT(f[1].rc, WDS_ERR_INVALID);
  ASSERT_CONTAINS(f[1].seen, "no output: set pattern or out_fd");
  ASSERT_TRUE(strstr(f[1].seen, "brace") == NULL);
  ASSERT_STREQ(wds_last_error(), mine);
}

static void *read_fresh(void *arg) {
  snprintf(arg, 1024, "%s", wds_last_error());
  return NULL;
}

TEST(a_new_thread_starts_empty) {
  wds_url_list l = {0};
  ASSERT_EQ_INT(wds_spec_expand("{", 0, &l), WDS_ERR_SPEC);
  char seen[1024] = "x";
  pthread_t t;
  ASSERT_EQ_INT(pthread_create(&t, NULL, read_fresh, seen), 0);
  pthread_join(t, NULL);
  ASSERT_STREQ(seen, "");
}

/* ---- opens ---- */

TEST(every_open_sets_it) {
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  rc.spec = "a-{0..3.tar";
  wds_reader *r = (wds_reader *)1;
  ASSERT_EQ_INT(wds_reader_open(&rc, &r), WDS_ERR_SPEC);
  ASSERT_TRUE(r == NULL);
  ASSERT_CONTAINS(wds_last_error(), "unbalanced");

  wds_writer_config wc = WDS_WRITER_CONFIG_INIT;
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&wc, &w), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "no output: set pattern or out_fd");

  wds_loader_config lc = WDS_LOADER_CONFIG_INIT;
  lc.spec = shard;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&lc, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "no output fields");

  wds_index *ix;
  ASSERT_EQ_INT(wds_index_load(shard, 0, &ix), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(wds_last_error(), shard);

  wds_decode_checker *c = NULL;
  ASSERT_EQ_INT(wds_decode_checker_open(NULL), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "wds_decode_checker_open: out is NULL");
  (void)c;
}

/* ---- calls on a handle ---- */

TEST(handle_calls_set_it_and_sticky_errors_set_it_again) {
  /* the reader: a shard that is not there, named with the reason */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/missing.tar", tmpdir);
  const char *urls[] = {missing, shard};
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  rc.urls = urls;
  rc.url_count = 2;
  wds_reader *r;
  ASSERT_EQ_INT(wds_reader_open(&rc, &r), WDS_OK);
  const wds_sample *s;
  int st = wds_reader_next(r, &s);
  ASSERT_TRUE(st < 0);
  ASSERT_CONTAINS(wds_last_error(), missing);
  /* the reader goes on with the next shard: successes leave the text */
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_STREQ(s->key, "a");
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_OK);
  ASSERT_EQ_INT(wds_reader_next(r, &s), WDS_EOF);
  ASSERT_CONTAINS(wds_last_error(), missing);
  ASSERT_TRUE(wds_reader_shard_url(r, 5) == NULL);
  ASSERT_CONTAINS(wds_last_error(), "wds_reader_shard_url: shard 5 of 2");
  wds_reader_close(r);

  /* the writer: sticky, each call sets the text again */
  char pat[600];
  snprintf(pat, sizeof pat, "%s/out-%%02d.tar", tmpdir);
  wds_writer_config wc = WDS_WRITER_CONFIG_INIT;
  wc.pattern = pat;
  wds_writer *w;
  ASSERT_EQ_INT(wds_writer_open(&wc, &w), WDS_OK);
  wds_writer_field f = {"txt", "x", 1};
  ASSERT_EQ_INT(wds_writer_write_sample(w, "", &f, 1), WDS_ERR_INVALID);
  char first[1024];
  snprintf(first, sizeof first, "%s", wds_last_error());
  ASSERT_TRUE(first[0] != '\0');
  wds_url_list l = {0};
  ASSERT_EQ_INT(wds_brace_expand("{", 0, &l), WDS_ERR_SPEC); /* another */
  ASSERT_EQ_INT(wds_writer_write_sample(w, "ok", &f, 1), WDS_ERR_INVALID);
  ASSERT_STREQ(wds_last_error(), first);
  ASSERT_EQ_INT(wds_brace_expand("{", 0, &l), WDS_ERR_SPEC);
  ASSERT_EQ_INT(wds_writer_end_shard(w), WDS_ERR_INVALID);
  ASSERT_STREQ(wds_last_error(), first);
  ASSERT_EQ_INT(wds_brace_expand("{", 0, &l), WDS_ERR_SPEC);
  ASSERT_EQ_INT(wds_writer_close(w), WDS_ERR_INVALID); /* after the free */
  ASSERT_STREQ(wds_last_error(), first);

  /* the index */
  char ixpath[600];
  snprintf(ixpath, sizeof ixpath, "%s/index.json", tmpdir);
  FILE *fp = fopen(ixpath, "w");
  ASSERT_TRUE(fp != NULL);
  fprintf(fp, "{\"wids_version\": 1, \"shardlist\": [{\"url\": \"good.tar\", "
              "\"nsamples\": 2}]}");
  fclose(fp);
  wds_index *ix;
  ASSERT_EQ_INT(wds_index_load(ixpath, 0, &ix), WDS_OK);
  size_t i;
  ASSERT_EQ_INT(wds_index_lookup(ix, "other.tar", &i), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "other.tar: not in the index");
  ASSERT_EQ_INT(wds_index_lookup(ix, shard, &i), WDS_OK);
  ASSERT_CONTAINS(wds_last_error(), "other.tar: not in the index");
  wds_index_shard sh;
  ASSERT_EQ_INT(wds_index_shard_info(ix, 1, &sh), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "shard 1 of an index of 1");
  wds_index_close(ix);
}

/* An error the loader's worker thread finds reaches the thread that calls
 * next(), and next() sets it again on each call after. */
TEST(loader_errors_from_its_threads) {
  char missing[600];
  snprintf(missing, sizeof missing, "%s/gone.tar", tmpdir);
  const char *urls[] = {shard, missing};
  wds_field_spec fs = {"cls", WDS_DECODE_AUTO, 0, 0, 0};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = urls;
  c.url_count = 2;
  c.fields = &fs;
  c.field_count = 1;
  c.batch_size = 1;
  c.workers = 2;
  c.shard_shuffle = 0;
  c.rank = 0;
  c.world_size = 1;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *b;
  int rc;
  while ((rc = wds_loader_next(l, &b)) == WDS_OK)
    wds_loader_release(l, b);
  ASSERT_TRUE(rc < 0);
  ASSERT_CONTAINS(wds_last_error(), missing);
  wds_url_list ul = {0};
  ASSERT_EQ_INT(wds_spec_expand("{", 0, &ul), WDS_ERR_SPEC);
  ASSERT_EQ_INT(wds_loader_next(l, &b), rc); /* sticky */
  ASSERT_CONTAINS(wds_last_error(), missing);
  /* another call's refusal in between: next() still reports its own
   * failure (it reported the refusal's text) */
  wds_release_fence no_done = {0};
  wds_batch fake = {0};
  ASSERT_EQ_INT(wds_loader_release_after(l, &fake, &no_done), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "wds_loader_release_after");
  ASSERT_EQ_INT(wds_loader_next(l, &b), rc);
  ASSERT_CONTAINS(wds_last_error(), missing);
  wds_loader_close(l);
  ASSERT_CONTAINS(wds_last_error(), missing); /* close is no failure */

  ASSERT_EQ_INT(wds_loader_next(NULL, &b), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "wds_loader_next: the loader is NULL");
}

/* An open that meets a failure inside and goes on (a shard skipped under
 * WDS_ON_ERROR_SKIP while checking an index, in the caller's thread)
 * succeeds: the caller's last error stays as it was. */
TEST(an_open_that_skips_leaves_it) {
  char ixpath[600], gone[600];
  snprintf(ixpath, sizeof ixpath, "%s/skip-index.json", tmpdir);
  snprintf(gone, sizeof gone, "%s/gone-too.tar", tmpdir);
  FILE *fp = fopen(ixpath, "w");
  ASSERT_TRUE(fp != NULL);
  fprintf(fp,
          "{\"wids_version\": 1, \"shardlist\": [{\"url\": \"good.tar\", "
          "\"nsamples\": 2}, {\"url\": \"gone-too.tar\", \"nsamples\": 0}]}");
  fclose(fp);
  const char *urls[] = {shard, gone};
  wds_field_spec fs = {"cls", WDS_DECODE_AUTO, 0, 0, 0};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = urls;
  c.url_count = 2;
  c.index_path = ixpath;
  c.mode = WDS_MODE_EXACT;
  c.on_error = WDS_ON_ERROR_SKIP;
  c.fields = &fs;
  c.field_count = 1;
  c.batch_size = 1;
  c.rank = 0;
  c.world_size = 1;
  wds_url_list l = {0};
  ASSERT_EQ_INT(wds_brace_expand("{", 0, &l), WDS_ERR_SPEC);
  char before[1024];
  snprintf(before, sizeof before, "%s", wds_last_error());
  wds_loader *ld;
  ASSERT_EQ_INT(wds_loader_open(&c, &ld), WDS_OK);
  wds_loader_stats st;
  wds_loader_stats_get(ld, &st);
  ASSERT_EQ_U64(st.skipped, 1); /* the unreadable shard the index empties */
  ASSERT_STREQ(wds_last_error(), before);
  wds_loader_close(ld);
}

/* ---- the functions that once took a caller's buffer ---- */

/* wds_last_error_set: code built on wds (wds/cuda.h) reports the same way */
TEST(code_built_on_wds_sets_it) {
  ASSERT_EQ_INT(wds_last_error_set(WDS_ERR_IO, "copy refused\x1b[2J"),
                WDS_ERR_IO);
  ASSERT_TRUE(strcmp(wds_last_error(), "copy refused\\x1b[2J") == 0);
  ASSERT_EQ_INT(wds_last_error_set(WDS_OK, "not an error"), WDS_OK);
  ASSERT_EQ_INT(wds_last_error_set(WDS_EOF, "not an error"), WDS_EOF);
  ASSERT_TRUE(strcmp(wds_last_error(), "copy refused\\x1b[2J") == 0);
  ASSERT_EQ_INT(wds_last_error_set(WDS_ERR_TIMEOUT, NULL), WDS_ERR_TIMEOUT);
  ASSERT_TRUE(strcmp(wds_last_error(), wds_strerror(WDS_ERR_TIMEOUT)) == 0);
}

TEST(former_buffer_functions_set_it) {
  wds_url_list l = {0};
  ASSERT_EQ_INT(wds_spec_expand("a::@/nonexistent-wds/list", 0, &l),
                WDS_ERR_OPEN);
  ASSERT_CONTAINS(wds_last_error(), "/nonexistent-wds/list");
  const char *two[] = {"a", "b{"};
  ASSERT_EQ_INT(wds_spec_expand_list(two, 2, 0, &l), WDS_ERR_SPEC);
  ASSERT_CONTAINS(wds_last_error(), "b{");
  ASSERT_EQ_INT(wds_spec_expand_flags(two, 2, 1, 0, &l), WDS_ERR_SPEC);
  ASSERT_EQ_INT(wds_brace_expand("{1..20}", 10, &l), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(), "over the limit of 10");

  ASSERT_EQ_INT(wds_decode_check(NULL, "npy", "not npy", 7), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(wds_last_error(), "npy");
  ASSERT_EQ_INT(wds_decode_check(NULL, "cls", "12x", 3), WDS_ERR_FORMAT);
  char cls_err[1024];
  snprintf(cls_err, sizeof cls_err, "%s", wds_last_error());
  ASSERT_TRUE(cls_err[0] != '\0');
  ASSERT_EQ_INT(wds_decode_check(NULL, "cls", "12", 2), WDS_OK);
  ASSERT_STREQ(wds_last_error(), cls_err);

  int64_t shape = 2;
  ASSERT_EQ_INT(
      wds_npy_save("/nonexistent-wds/a.npy", WDS_DTYPE_U8, 1, &shape, "ab"),
      WDS_ERR_IO);
  ASSERT_CONTAINS(wds_last_error(), "/nonexistent-wds/a.npy");

  wds_outfile *of;
  ASSERT_EQ_INT(wds_outfile_open(tmpdir, 0, &of), WDS_ERR_OPEN);
  ASSERT_CONTAINS(wds_last_error(), "directory");
  char path[600];
  snprintf(path, sizeof path, "%s/out.txt", tmpdir);
  ASSERT_EQ_INT(wds_outfile_open(path, 0, &of), WDS_OK);
  ASSERT_EQ_INT(wds_outfile_commit(of), WDS_OK);
  ASSERT_CONTAINS(wds_last_error(), "directory"); /* successes leave it */
  ASSERT_EQ_INT(wds_outfile_commit(of), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "already committed");
  wds_outfile_close(of);

  wds_field_spec *specs;
  size_t n;
  char *storage;
  ASSERT_EQ_INT(wds_field_specs_parse("jpg:rgb:huge", &specs, &n, &storage),
                WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "unknown option \"huge\"");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-last-error.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  if (make_shard() != 0) {
    printf("cannot make %s: %s\n", shard, wds_last_error());
    return 1;
  }
  RUN(a_new_thread_starts_empty);
  RUN(the_text_is_per_thread);
  RUN(every_open_sets_it);
  RUN(handle_calls_set_it_and_sticky_errors_set_it_again);
  RUN(loader_errors_from_its_threads);
  RUN(an_open_that_skips_leaves_it);
  RUN(code_built_on_wds_sets_it);
  RUN(former_buffer_functions_set_it);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    printf("could not remove %s\n", tmpdir);
  return test_summary();
}
