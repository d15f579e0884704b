/* test_http.c — the http(s) source's parts that need no web server: the
 * header parser, the resume check (a 206 at the right byte of the same
 * resource, or a refusal saying why), and, against a silent loopback
 * server, that a cancel wakes a blocked read at once and the read timeout
 * names the URL. The transfers themselves (reuse, cuts, retries, errors)
 * are tests/integration/http.sh's, with nginx and a fault-injecting proxy. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "shards/http.h"
#include "shards/source.h"
#include "test.h"

static void parse(wds__http_meta *m, const char *line, char *reason) {
  wds__http_parse_header(m, line, strlen(line), reason, reason ? 64 : 0);
}

TEST(headers_are_parsed) {
  wds__http_meta m;
  char reason[64];
  memset(&m, 0, sizeof m);
  parse(&m, "HTTP/1.1 206 Partial Content\r\n", reason);
  ASSERT_EQ_INT(m.status, 206);
  ASSERT_STREQ(reason, "Partial Content");
  parse(&m, "ETag: \"5f3-abc\"\r\n", NULL);
  parse(&m, "last-modified:Tue, 24 Nov 2026 07:00:00 GMT \r\n", NULL);
  parse(&m, "Content-Range: bytes 1000-1999/2000\r\n", NULL);
  parse(&m, "Content-Length: 1000\r\n", NULL); /* the part, not the total */
  ASSERT_STREQ(m.etag, "\"5f3-abc\"");
  ASSERT_STREQ(m.last_modified, "Tue, 24 Nov 2026 07:00:00 GMT");
  ASSERT_TRUE(m.has_range);
  ASSERT_EQ_U64(m.range_start, 1000);
  ASSERT_TRUE(m.has_total);
  ASSERT_EQ_U64(m.total, 2000);
  /* A new status line (a redirect followed) starts over. */
  parse(&m, "HTTP/2 200\r\n", reason);
  ASSERT_EQ_INT(m.status, 200);
  ASSERT_STREQ(reason, "");
  ASSERT_TRUE(!m.has_range && !m.has_total && m.etag[0] == '\0');
  parse(&m, "Content-Length: 12345\r\n", NULL);
  ASSERT_TRUE(m.has_total);
  ASSERT_EQ_U64(m.total, 12345);
  /* Unknown total, malformed values: ignored, not guessed. */
  memset(&m, 0, sizeof m);
  parse(&m, "Content-Range: bytes 5-9/*\r\n", NULL);
  ASSERT_TRUE(m.has_range && !m.has_total);
  memset(&m, 0, sizeof m);
  parse(&m, "Content-Range: items 5-9/10\r\n", NULL);
  parse(&m, "Content-Length: 12x\r\n", NULL);
  parse(&m, "Content-Length: 99999999999999999999999\r\n", NULL);
  ASSERT_TRUE(!m.has_range && !m.has_total);
  ASSERT_STREQ(wds__http_reason(404), "Not Found");
  ASSERT_STREQ(wds__http_reason(299), "");
}

TEST(resume_needs_the_same_resource_at_the_right_byte) {
  wds__http_meta first, now;
  char why[400];
  memset(&first, 0, sizeof first);
  first.status = 200;
  first.has_total = 1;
  first.total = 5000;
  strcpy(first.etag, "\"v1\"");
  strcpy(first.last_modified, "Mon");
  now = first;
  now.status = 206;
  now.has_range = 1;
  now.range_start = 1234;
  ASSERT_TRUE(wds__http_resume_ok(&first, &now, 1234, why, sizeof why));

  wds__http_meta bad = now;
  bad.status = 200; /* the server ignored the Range: the whole body again */
  ASSERT_TRUE(!wds__http_resume_ok(&first, &bad, 1234, why, sizeof why));
  ASSERT_CONTAINS(why, "HTTP 200");
  ASSERT_CONTAINS(why, "1234");
  bad = now;
  bad.range_start = 1000; /* bytes delivered twice */
  ASSERT_TRUE(!wds__http_resume_ok(&first, &bad, 1234, why, sizeof why));
  ASSERT_CONTAINS(why, "does not start at byte 1234");
  bad = now;
  bad.has_range = 0;
  ASSERT_TRUE(!wds__http_resume_ok(&first, &bad, 1234, why, sizeof why));
  bad = now;
  strcpy(bad.etag, "\"v2\"");
  ASSERT_TRUE(!wds__http_resume_ok(&first, &bad, 1234, why, sizeof why));
  ASSERT_CONTAINS(why, "ETag \"v1\", then \"v2\"");
  bad = now;
  strcpy(bad.last_modified, "Tue");
  ASSERT_TRUE(!wds__http_resume_ok(&first, &bad, 1234, why, sizeof why));
  ASSERT_CONTAINS(why, "Last-Modified Mon, then Tue");
  bad = now;
  bad.total = 6000;
  ASSERT_TRUE(!wds__http_resume_ok(&first, &bad, 1234, why, sizeof why));
  ASSERT_CONTAINS(why, "changed size");
  bad = now;
  bad.etag[0] = '\0'; /* an ETag that disappears is a change too */
  ASSERT_TRUE(!wds__http_resume_ok(&first, &bad, 1234, why, sizeof why));
  /* Neither side knowing the total is no change. */
  first.has_total = 0;
  now.has_total = 0;
  ASSERT_TRUE(wds__http_resume_ok(&first, &now, 1234, why, sizeof why));
}

/* A server that accepts and never answers. */
static int silent_fd = -1;
static int silent_port;

static void silent_start(void) {
  silent_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  if (silent_fd < 0 || bind(silent_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(silent_fd, 8) != 0 ||
      getsockname(silent_fd, (struct sockaddr *)&a, &n) != 0) {
    perror("silent server");
    return;
  }
  silent_port = ntohs(a.sin_port);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *cancel_later(void *p) {
  struct timespec d = {0, 200 * 1000 * 1000};
  nanosleep(&d, NULL);
  wds__cancel_set(p);
  return NULL;
}

TEST(a_cancel_wakes_a_read_from_a_silent_server) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x.tar", silent_port);
  wds__cancel c;
  wds__cancel_init(&c);
  wds__io_opts o = {.read_timeout_ms = -1, .cancel = &c};
  wds__source *s = NULL;
  wds__err err = {0};
  ASSERT_EQ_INT(wds__source_open(url, &o, &s, &err), WDS_OK);
  pthread_t t;
  pthread_create(&t, NULL, cancel_later, &c);
  char buf[512];
  double t0 = now_s();
  ASSERT_EQ_INT(wds__source_read(s, buf, sizeof buf, &err), WDS_ERR_CANCELLED);
  double dt = now_s() - t0;
  pthread_join(t, NULL);
  printf("  cancelled after %.2f s\n", dt);
  ASSERT_TRUE(dt >= 0.15 && dt < 2);
  wds__source_close(s);
  wds__cancel_destroy(&c);
}

TEST(the_read_timeout_names_the_url) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/y.tar", silent_port);
  wds__io_opts o = {.read_timeout_ms = 300};
  wds__source *s = NULL;
  wds__err err = {0};
  ASSERT_EQ_INT(wds__source_open(url, &o, &s, &err), WDS_OK);
  char buf[512];
  double t0 = now_s();
  ASSERT_EQ_INT(wds__source_read(s, buf, sizeof buf, &err), WDS_ERR_TIMEOUT);
  double dt = now_s() - t0;
  printf("  %s (%.2f s)\n", err.msg, dt);
  ASSERT_TRUE(dt >= 0.29 && dt < 5);
  ASSERT_CONTAINS(err.msg, "no data for 0.3 s from ");
  ASSERT_CONTAINS(err.msg, url);
  wds__source_close(s);
}

static void *open_and_leave(void *p) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/z.tar", silent_port);
  wds__err err = {0};
  if (wds__source_open(url, NULL, (wds__source **)p, &err) != WDS_OK)
    *(wds__source **)p = NULL;
  return NULL;
}

/* A source opened in a thread that then ends, closed in another: the
 * thread's handles, lent to it, are freed at its close (ASan's leak check
 * sees it), and a second source in one thread gets handles of its own. */
TEST(a_source_outlives_its_thread) {
  wds__source *s = NULL, *a = NULL, *b = NULL;
  pthread_t t;
  pthread_create(&t, NULL, open_and_leave, &s);
  pthread_join(t, NULL);
  ASSERT_TRUE(s != NULL);
  wds__source_close(s);
  open_and_leave(&a);
  open_and_leave(&b);
  ASSERT_TRUE(a != NULL && b != NULL);
  wds__source_close(a);
  wds__source_close(b);
  open_and_leave(&a); /* the thread's handles again, free once more */
  ASSERT_TRUE(a != NULL);
  wds__source_close(a);
}

TEST(other_remote_schemes_name_pipe_curl) {
  wds__source *s = NULL;
  wds__err err = {0};
  ASSERT_TRUE(wds__source_open("sftp://host/a.tar", NULL, &s, &err) != WDS_OK);
  ASSERT_CONTAINS(err.msg, "pipe:curl -s 'sftp://host/a.tar'");
  ASSERT_TRUE(s == NULL);
}

int main(void) {
  RUN(headers_are_parsed);
  RUN(resume_needs_the_same_resource_at_the_right_byte);
  RUN(other_remote_schemes_name_pipe_curl);
  if (!wds__http_available()) {
    printf("SKIP: built without libcurl: no transfer tests\n");
  } else {
    silent_start();
    if (silent_port <= 0)
      return 1;
    RUN(a_cancel_wakes_a_read_from_a_silent_server);
    RUN(the_read_timeout_names_the_url);
    RUN(a_source_outlives_its_thread);
    close(silent_fd);
  }
  return test_summary();
}
