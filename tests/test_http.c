/* test_http.c — the http(s) source's parts that need no web server: the
 * header parser, the resume check (a 206 at the right byte of the same
 * resource, or a refusal saying why), and, against a silent loopback
 * server, that a cancel wakes a blocked read at once and the read timeout
 * ends the read. A scripted loopback server answers each connection as a
 * test says (closed at accept, after the status line, after the headers, a
 * body without Content-Length cut short, ...): every one of these ends in
 * the whole resource or a clear error, never in a short one; a 429 or 503
 * with Retry-After is retried after that long, within the read timeout.
 * Messages do not name the URL (the reader prefixes it). The transfers
 * through nginx (reuse, random cuts, retries, errors) are
 * tests/integration/http.sh's, with a fault-injecting proxy. */
#include <arpa/inet.h>
#include <dirent.h>
#include <locale.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shards/cache.h"
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
  ASSERT_TRUE(m.has_end); /* the body's end: B + 1 */
  ASSERT_EQ_U64(m.end, 2000);
  ASSERT_TRUE(m.http1 && !wds__http_close_delimited(&m));
  /* A new status line (a redirect followed) starts over. */
  parse(&m, "HTTP/2 200\r\n", reason);
  ASSERT_EQ_INT(m.status, 200);
  ASSERT_STREQ(reason, "");
  ASSERT_TRUE(!m.has_range && !m.has_total && m.etag[0] == '\0');
  parse(&m, "Content-Length: 12345\r\n", NULL);
  ASSERT_TRUE(m.has_total);
  ASSERT_EQ_U64(m.total, 12345);
  ASSERT_TRUE(m.has_end && !m.http1);
  ASSERT_EQ_U64(m.end, 12345);
  /* HTTP/1.x without a length ends at close, unless chunked. */
  memset(&m, 0, sizeof m);
  parse(&m, "HTTP/1.0 200 OK\r\n", reason);
  ASSERT_TRUE(wds__http_close_delimited(&m));
  parse(&m, "Transfer-Encoding: gzip, Chunked\r\n", NULL);
  ASSERT_TRUE(m.chunked && !wds__http_close_delimited(&m));
  memset(&m, 0, sizeof m);
  parse(&m, "HTTP/2 200\r\n", reason);
  ASSERT_TRUE(!wds__http_close_delimited(&m));
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
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds__source_read(s, buf, sizeof buf, &err), WDS_ERR_CANCELLED);
  double dt = test_now_s() - t0;
  pthread_join(t, NULL);
  printf("  cancelled after %.2f s\n", dt);
  ASSERT_TRUE(dt >= 0.15 && dt < 2);
  wds__source_close(s);
  wds__cancel_destroy(&c);
}

TEST(the_read_timeout_is_reported) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/y.tar", silent_port);
  wds__io_opts o = {.read_timeout_ms = 300};
  wds__source *s = NULL;
  wds__err err = {0};
  ASSERT_EQ_INT(wds__source_open(url, &o, &s, &err), WDS_OK);
  char buf[512];
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds__source_read(s, buf, sizeof buf, &err), WDS_ERR_TIMEOUT);
  double dt = test_now_s() - t0;
  printf("  %s (%.2f s)\n", err.msg, dt);
  ASSERT_TRUE(dt >= 0.29 && dt < 5);
  ASSERT_STREQ(err.msg, "no data for 0.3 s (the read timeout; raise it with "
                        "--read-timeout or read_timeout_ms)");
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

/* ---- the scripted server ---- */

#define BODY_SIZE 100000
static unsigned char body[BODY_SIZE];

/* What the server does on its i-th connection (one request each):
 *   "accept"      close at once, reading nothing
 *   "status"      the status line of a 200, then close
 *   "midheader"   a status line and half a header, then close
 *   "headers"     a 200's headers (Content-Length given), no body, close
 *   "body:N"      a 200's headers and N bytes of the body, close
 *   "nolen[:N]"   headers without Content-Length, the rest of the body
 *                 (from the Range asked, as a 206) or N bytes of it, close
 *   "norange"     ignores Range: a 200 without Content-Length, whole body
 *   "norangelen"  ignores Range: a 200 with Content-Length, whole body
 *   "429:S"       429 Too Many Requests with "Retry-After: S" (seconds)
 *   "503date:S"   503 with a Retry-After HTTP-date S seconds from now
 *   "redir"       302 to a URL with a password and a signature ("404" next)
 *   "404"         404 Not Found
 *   "full"        a correct answer: 200, or 206 for a Range, or 416 for a
 *                 Range at the end
 * Beyond the script: "full". */
static const char *script[8];
static int script_len, served;
static int srv_fd = -1, srv_port;
static int scripted_timeout_ms = 10000;
static const wds__cache_cfg *scripted_cache; /* NULL: none */
static const wds__cancel *scripted_cancel;   /* NULL: none */
/* The path requested, and a SigV4 request (wds__http_open_req) instead of
 * a plain source when scripted_sigv4 is set. */
static const char *scripted_path = "/s.tar", *scripted_sigv4;
static char last_request[512]; /* the last request line the server saw */

static void send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0)
      return;
    c += k;
    n -= (size_t)k;
  }
}

static void serve_one(int c, const char *act) {
  if (strcmp(act, "accept") == 0)
    return;
  char req[4096];
  size_t n = 0;
  while (n < sizeof req - 1) {
    ssize_t k = recv(c, req + n, sizeof req - 1 - n, 0);
    if (k <= 0)
      return;
    n += (size_t)k;
    req[n] = '\0';
    if (strstr(req, "\r\n\r\n"))
      break;
  }
  size_t line = strcspn(req, "\r\n");
  if (line >= sizeof last_request)
    line = sizeof last_request - 1;
  memcpy(last_request, req, line);
  last_request[line] = '\0';
  long from = -1;
  const char *r = strstr(req, "Range: bytes=");
  if (r)
    from = strtol(r + 13, NULL, 10);
  char h[512];
  const char *tag = "ETag: \"v1\"\r\nConnection: close\r\n";
  if (strncmp(act, "429:", 4) == 0 || strncmp(act, "503date:", 8) == 0) {
    char ra[64];
    if (act[0] == '4') {
      snprintf(ra, sizeof ra, "%s", act + 4);
    } else {
      time_t at = time(NULL) + atol(act + 8);
      struct tm tm;
      gmtime_r(&at, &tm);
      strftime(ra, sizeof ra, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    }
    int k = snprintf(h, sizeof h,
                     "HTTP/1.1 %s\r\nRetry-After: %s\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n",
                     act[0] == '4' ? "429 Too Many Requests"
                                   : "503 Service Unavailable",
                     ra);
    send_all(c, h, (size_t)k);
  } else if (strcmp(act, "redir") == 0 || strcmp(act, "404") == 0) {
    int k = act[0] == 'r'
                ? snprintf(h, sizeof h,
                           "HTTP/1.1 302 Found\r\nLocation: http://u:pw-secret@"
                           "127.0.0.1:%d/gone?X-Amz-Signature=sig-secret&v=1"
                           "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                           srv_port)
                : snprintf(h, sizeof h,
                           "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                           "Connection: close\r\n\r\n");
    send_all(c, h, (size_t)k);
  } else if (strcmp(act, "status") == 0) {
    send_all(c, "HTTP/1.1 200 OK\r\n", 17);
  } else if (strcmp(act, "midheader") == 0) {
    send_all(c, "HTTP/1.1 200 OK\r\nContent-Le", 27);
  } else if (strcmp(act, "headers") == 0 || strncmp(act, "body:", 5) == 0) {
    int k =
        snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n",
                 tag, BODY_SIZE);
    send_all(c, h, (size_t)k);
    if (act[0] == 'b')
      send_all(c, body, (size_t)atol(act + 5));
  } else if (strncmp(act, "nolen", 5) == 0 || strncmp(act, "norange", 7) == 0) {
    long start = from < 0 || act[2] == 'r' ? 0 : from;
    int k = start > 0 ? snprintf(h, sizeof h,
                                 "HTTP/1.1 206 Partial Content\r\n%s"
                                 "Content-Range: bytes %ld-%d/%d\r\n\r\n",
                                 tag, start, BODY_SIZE - 1, BODY_SIZE)
            : strcmp(act, "norangelen") == 0
                ? snprintf(h, sizeof h,
                           "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n",
                           tag, BODY_SIZE)
                : snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\n%s\r\n", tag);
    send_all(c, h, (size_t)k);
    long len = BODY_SIZE - start;
    if (act[5] == ':' && atol(act + 6) < len)
      len = atol(act + 6);
    send_all(c, body + start, (size_t)len);
  } else { /* full */
    int k;
    if (from >= BODY_SIZE)
      k = snprintf(h, sizeof h,
                   "HTTP/1.1 416 Range Not Satisfiable\r\n%s"
                   "Content-Range: bytes */%d\r\nContent-Length: 0\r\n\r\n",
                   tag, BODY_SIZE);
    else if (from >= 0)
      k = snprintf(h, sizeof h,
                   "HTTP/1.1 206 Partial Content\r\n%sContent-Length: %ld\r\n"
                   "Content-Range: bytes %ld-%d/%d\r\n\r\n",
                   tag, BODY_SIZE - from, from, BODY_SIZE - 1, BODY_SIZE);
    else
      k = snprintf(h, sizeof h,
                   "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n", tag,
                   BODY_SIZE);
    send_all(c, h, (size_t)k);
    if (from < BODY_SIZE)
      send_all(c, body + (from < 0 ? 0 : from),
               (size_t)(BODY_SIZE - (from < 0 ? 0 : from)));
  }
}

static void *serve_script(void *unused) {
  (void)unused;
  for (;;) {
    int c = accept(srv_fd, NULL, NULL);
    if (c < 0)
      return NULL;
    const char *act = served < script_len ? script[served] : "full";
    served++;
    serve_one(c, act);
    shutdown(c, SHUT_RDWR);
    close(c);
  }
}

/* Reads the resource through the script; returns the bytes read (in *got)
 * or the error status (message in err). */
/* Set: read_scripted reads the source to its end but does not say it was
 * consumed (wds__source_consumed). */
static int scripted_keep_unconsumed;

static int read_scripted(int retries, const char *const *acts, int n,
                         size_t *got, wds__err *err) {
  script_len = n;
  for (int i = 0; i < n; i++)
    script[i] = acts[i];
  served = 0;
  srv_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (srv_fd < 0 || bind(srv_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(srv_fd, 8) != 0 ||
      getsockname(srv_fd, (struct sockaddr *)&a, &al) != 0)
    return -1000;
  srv_port = ntohs(a.sin_port);
  pthread_t t;
  pthread_create(&t, NULL, serve_script, NULL);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", srv_port, scripted_path);
  wds__io_opts o = {.read_timeout_ms = scripted_timeout_ms, .retries = retries};
  if (scripted_cache)
    o.cache = *scripted_cache;
  o.cancel = scripted_cancel;
  wds__source *s = NULL;
  wds__http *h = NULL;
  wds__http_req req = {
      .url = url, .aws_sigv4 = scripted_sigv4, .userpwd = "AKID:SECRET"};
  int rc = scripted_sigv4 ? wds__http_open_req(&req, &o, &h, err)
                          : wds__source_open(url, &o, &s, err);
  static unsigned char got_buf[2 * BODY_SIZE];
  *got = 0;
  while (rc == WDS_OK) {
    size_t room = sizeof got_buf - *got;
    ssize_t k = h ? wds__http_read(h, got_buf + *got, room, err)
                  : wds__source_read(s, got_buf + *got, room, err);
    if (k < 0)
      rc = (int)k;
    if (k <= 0)
      break;
    *got += (size_t)k;
  }
  if (rc == WDS_OK && s && scripted_keep_unconsumed) {
    /* Read to the end, but not consumed (a reading thread ahead of a
     * consumer that stopped): closed without wds__source_consumed. */
  } else if (rc == WDS_OK && s) {
    wds__source_consumed(s); /* as the stream's drain says it */
  }
  wds__source_close(s);
  wds__http_close(h);
  shutdown(srv_fd, SHUT_RDWR); /* wakes its accept: the server ends */
  pthread_join(t, NULL);
  close(srv_fd);
  if (rc == WDS_OK && *got <= BODY_SIZE && memcmp(got_buf, body, *got) != 0)
    return -2000; /* wrong bytes */
  return rc;
}

/* Each script ends with the whole body, delivered once, in order. */
TEST(every_cut_the_server_makes_is_resumed_or_retried) {
  static const struct {
    const char *acts[4];
    int connections; /* the script's, then "full" ones */
  } cases[] = {
      {{"status"}, 2},    /* libcurl calls this a complete, empty 200 */
      {{"midheader"}, 2}, /* ... and this */
      {{"headers"}, 2},   /* cut at byte 0 of the body */
      {{"accept"}, 2},    /* nothing at all */
      {{"body:5000", "status"}, 3}, /* the resume cut in its headers */
      {{"body:5000", "headers"}, 3},
      {{"nolen:5000"}, 2}, /* no length, cut: the Range probe finds more */
      {{"nolen:0"}, 2},    /* no length, no byte */
      {{"nolen"}, 2},      /* no length, whole: the probe gets a 416 */
      {{"nolen:7", "nolen:7", "nolen:0", "nolen"}, 4}, /* 206s cut too */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *const *acts = cases[i].acts;
    int n = 0;
    while (n < 4 && acts[n])
      n++;
    size_t got = 0;
    wds__err err = {0};
    int rc = read_scripted(5, acts, n, &got, &err);
    printf("  %-10s %-9s: rc %d, %zu bytes, %d connections%s%s\n", acts[0],
           n > 1 ? acts[1] : "", rc, got, served, rc ? ": " : "",
           rc ? err.msg : "");
    ASSERT_EQ_INT(rc, WDS_OK);
    ASSERT_EQ_U64(got, BODY_SIZE);
    ASSERT_EQ_INT(served, cases[i].connections);
  }
}

TEST(retry_after_is_parsed) {
  if (!wds__http_available()) {
    /* Dates are libcurl's to parse; without it only the seconds form. */
    ASSERT_EQ_INT(wds__http_retry_after_ms("120", 3, 0), 120000);
    return;
  }
  time_t now = 1000000000; /* Sun, 09 Sep 2001 01:46:40 GMT */
  ASSERT_EQ_INT(wds__http_retry_after_ms("120", 3, now), 120000);
  ASSERT_EQ_INT(wds__http_retry_after_ms("0", 1, now), 0);
  const char *d = "Sun, 09 Sep 2001 01:46:43 GMT";
  ASSERT_EQ_INT(wds__http_retry_after_ms(d, strlen(d), now), 3000);
  d = "Sun, 09 Sep 2001 01:46:00 GMT"; /* past: now */
  ASSERT_EQ_INT(wds__http_retry_after_ms(d, strlen(d), now), 0);
  /* RFC 9110's obsolete forms too: RFC 850 and asctime. */
  d = "Sunday, 09-Sep-01 01:46:45 GMT";
  ASSERT_EQ_INT(wds__http_retry_after_ms(d, strlen(d), now), 5000);
  d = "Sun Sep  9 01:46:50 2001";
  ASSERT_EQ_INT(wds__http_retry_after_ms(d, strlen(d), now), 10000);
  /* English names whatever the locale (strptime's %a/%b follow LC_TIME:
   * a German locale read "Sun" as no day). */
  if (setlocale(LC_TIME, "de_DE.UTF-8") || setlocale(LC_TIME, "fr_FR.UTF-8") ||
      setlocale(LC_TIME, "C.UTF-8")) {
    d = "Sun, 09 Sep 2001 01:46:43 GMT";
    ASSERT_EQ_INT(wds__http_retry_after_ms(d, strlen(d), now), 3000);
    setlocale(LC_TIME, "C");
  }
  ASSERT_EQ_INT(wds__http_retry_after_ms("soon", 4, now), -1);
  ASSERT_EQ_INT(wds__http_retry_after_ms("12s", 3, now), -1);
  ASSERT_EQ_INT(wds__http_retry_after_ms("", 0, now), -1);
  d = "Sun, 09 Sep 2001 01:46:43 GMT trailing";
  ASSERT_EQ_INT(wds__http_retry_after_ms(d, strlen(d), now), -1);
  wds__http_meta m;
  memset(&m, 0, sizeof m);
  parse(&m, "HTTP/1.1 429 Too Many Requests\r\n", NULL);
  parse(&m, "Retry-After: 7\r\n", NULL);
  ASSERT_TRUE(m.has_retry_after);
  ASSERT_EQ_INT(m.retry_after_ms, 7000);
  parse(&m, "HTTP/1.1 200 OK\r\n", NULL); /* a new response: none */
  ASSERT_TRUE(!m.has_retry_after);
}

/* A 429 or 503 with Retry-After is retried after that long (seconds or an
 * HTTP-date), capped by the read timeout. */
TEST(retry_after_is_waited_for) {
  static const struct {
    const char *act;
    int timeout_ms;
    double min_s, max_s;
  } cases[] = {
      {"429:1", 10000, 0.95, 2.5},
      {"503date:2", 10000, 0.95, 3.5}, /* a date: whole seconds */
      {"429:30", 700, 0.65, 2.5},      /* capped by the read timeout */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t got = 0;
    wds__err err = {0};
    scripted_timeout_ms = cases[i].timeout_ms;
    double t0 = test_now_s();
    int rc = read_scripted(3, &cases[i].act, 1, &got, &err);
    double dt = test_now_s() - t0;
    scripted_timeout_ms = 10000;
    printf("  %-10s: rc %d, %zu bytes, %.2f s%s%s\n", cases[i].act, rc, got, dt,
           rc ? ": " : "", rc ? err.msg : "");
    ASSERT_EQ_INT(rc, WDS_OK);
    ASSERT_EQ_U64(got, BODY_SIZE);
    ASSERT_EQ_INT(served, 2);
    ASSERT_TRUE(dt >= cases[i].min_s && dt < cases[i].max_s);
  }
}

/* A server asking for an hour at each answer does not hold the reader for
 * retries x an hour: each wait is capped (here by the 0.5 s read timeout)
 * and all of them by twice that; then the source fails, saying why. */
TEST(retry_after_waits_have_one_budget) {
  const char *acts[] = {"429:3600", "429:3600", "429:3600", "429:3600"};
  size_t got = 0;
  wds__err err = {0};
  scripted_timeout_ms = 500;
  double t0 = test_now_s();
  int rc = read_scripted(5, acts, 4, &got, &err);
  double dt = test_now_s() - t0;
  scripted_timeout_ms = 10000;
  printf("  rc %d, %.2f s: %s\n", rc, dt, err.msg);
  ASSERT_TRUE(rc < 0);
  ASSERT_EQ_INT(served, 3);
  ASSERT_TRUE(dt >= 0.95 && dt < 3.0);
  ASSERT_CONTAINS(err.msg, "HTTP 429 Too Many Requests");
  ASSERT_CONTAINS(err.msg, "wait 3600.0 s more (Retry-After) after 1.0 s");
  ASSERT_CONTAINS(err.msg, "gave up after 3 attempts");
}

/* The caller's interrupt check: stop once `after_s` have passed since
 * `t0`, counting the calls. */
typedef struct {
  double t0, after_s;
  int calls;
} stop_after;

static int interrupt_after(void *ctx) {
  stop_after *w = ctx;
  w->calls++;
  return test_now_s() - w->t0 >= w->after_s;
}

/* A retry's wait (here a Retry-After of 30 s, within the 60 s read
 * timeout) ends as soon as the caller's interrupt check says stop, or the
 * token is cancelled: every wait obeys both, not only reads. */
TEST(a_retry_wait_obeys_the_interrupt_and_cancel) {
  const char *acts[] = {"429:30"};
  for (int how = 0; how < 2; how++) {
    wds__cancel c;
    wds__cancel_init(&c);
    stop_after w = {test_now_s(), 0.3, 0};
    pthread_t t;
    if (how == 0) {
      c.interrupt = interrupt_after;
      c.interrupt_ctx = &w;
    } else {
      pthread_create(&t, NULL, cancel_later, &c); /* in 0.2 s */
    }
    scripted_cancel = &c;
    scripted_timeout_ms = 60000;
    size_t got = 0;
    wds__err err = {0};
    double t0 = test_now_s();
    int rc = read_scripted(3, acts, 1, &got, &err);
    double dt = test_now_s() - t0;
    scripted_cancel = NULL;
    scripted_timeout_ms = 10000;
    if (how == 1)
      pthread_join(t, NULL);
    printf("  %s: rc %d after %.2f s (%d checks): %s\n",
           how ? "cancel" : "interrupt", rc, dt, w.calls, err.msg);
    ASSERT_EQ_INT(rc, WDS_ERR_CANCELLED);
    ASSERT_EQ_INT(served, 1); /* no retry */
    ASSERT_TRUE(dt < 1.5);
    ASSERT_STREQ(err.msg, how ? "cancelled" : "interrupted");
    wds__cancel_destroy(&c);
  }
}

/* A SigV4 request (s3://) sends and signs the path as given: "." and ".."
 * are parts of an S3 key, which libcurl would otherwise remove, fetching
 * another object than the URL names. */
TEST(a_signed_request_keeps_dot_segments) {
  static const char *const paths[] = {"/b/a/../x.tar", "/b/./x.tar",
                                      "/b/../x.tar"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    size_t got = 0;
    wds__err err = {0};
    scripted_path = paths[i];
    scripted_sigv4 = "aws:amz:us-east-1:s3";
    last_request[0] = '\0';
    int rc = read_scripted(0, NULL, 0, &got, &err);
    scripted_path = "/s.tar";
    scripted_sigv4 = NULL;
    printf("  %s: rc %d, request \"%s\"%s%s\n", paths[i], rc, last_request,
           rc ? ": " : "", rc ? err.msg : "");
    ASSERT_EQ_INT(rc, WDS_OK);
    ASSERT_EQ_U64(got, BODY_SIZE);
    char want[128];
    snprintf(want, sizeof want, "GET %s HTTP/1.1", paths[i]);
    ASSERT_STREQ(last_request, want);
  }
}

/* A redirect's target in a message hides its password and signature. */
TEST(a_redirect_target_hides_its_secrets) {
  const char *acts[] = {"redir", "404"};
  size_t got = 0;
  wds__err err = {0};
  int rc = read_scripted(0, acts, 2, &got, &err);
  printf("  %s\n", err.msg);
  ASSERT_TRUE(rc < 0);
  ASSERT_CONTAINS(err.msg, "HTTP 404 Not Found (redirected to http://u:***@");
  ASSERT_CONTAINS(err.msg, "/gone?X-Amz-Signature=***&v=1)");
  ASSERT_TRUE(strstr(err.msg, "pw-secret") == NULL);
  ASSERT_TRUE(strstr(err.msg, "sig-secret") == NULL);
}

TEST(a_server_ignoring_ranges_ends_a_body_without_length) {
  /* Nothing can tell the cut from the end then: the end stands. */
  const char *acts[] = {"nolen:5000", "norange"};
  size_t got = 0;
  wds__err err = {0};
  ASSERT_EQ_INT(read_scripted(5, acts, 2, &got, &err), WDS_OK);
  ASSERT_EQ_U64(got, 5000);
  ASSERT_EQ_INT(served, 2);
}

static void rm_cache_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static int warned_count;
static char warned_msg[512];
static void note_warning(void *ctx, const char *msg) {
  (void)ctx;
  warned_count++;
  snprintf(warned_msg, sizeof warned_msg, "%s", msg);
}

/* The cache keeps a shard only when its end was verified (http.h:
 * wds__http_verified): never a body without a length that ended at close
 * from a server that ignores ranges and gives no length (a cut could not
 * be told from the end: the read succeeds, the entry is not kept, and
 * that is reported once); a 200 to the Range probe whose Content-Length
 * exceeds the bytes received is a cut, which fails the read. */
TEST(only_a_verified_end_is_cached) {
  static const struct {
    const char *acts[2];
    int rc;     /* WDS_OK, or < 0: an error */
    size_t got; /* bytes read */
    int cached; /* the end was verified: an entry was kept */
  } cases[] = {
      {{"full"}, WDS_OK, BODY_SIZE, 1},                /* Content-Length */
      {{"body:5000", "full"}, WDS_OK, BODY_SIZE, 1},   /* resumed: 206 */
      {{"nolen", "full"}, WDS_OK, BODY_SIZE, 1},       /* a 416 at the end */
      {{"nolen:5000", "full"}, WDS_OK, BODY_SIZE, 1},  /* a 206 follows */
      {{"nolen", "norangelen"}, WDS_OK, BODY_SIZE, 1}, /* length agrees */
      {{"nolen:5000", "norange"}, WDS_OK, 5000, 0},    /* nothing tells */
      {{"nolen", "norange"}, WDS_OK, BODY_SIZE, 0},    /* ...whole or not */
      {{"nolen:5000", "norangelen"}, -1, 5000, 0},     /* a cut */
  };
  char dir[256];
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/wds-test-http-cache.XXXXXX",
           t && *t ? t : "/tmp");
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    wds__cache_stats st;
    memset(&st, 0, sizeof st);
    st.warn = note_warning;
    warned_count = 0;
    wds__cache_cfg cfg = {.dir = dir, .stats = &st};
    scripted_cache = &cfg;
    size_t got = 0;
    wds__err err = {0};
    const char *const *acts = cases[i].acts;
    int n = acts[1] ? 2 : 1;
    int rc = read_scripted(5, acts, n, &got, &err);
    scripted_cache = NULL;
    int kept = (int)atomic_load(&st.stored);
    printf("  %-10s %-10s: rc %d, %zu bytes, kept %d%s%s\n", acts[0],
           n > 1 ? acts[1] : "", rc, got, kept, rc ? ": " : "",
           rc ? err.msg : "");
    if (cases[i].rc == WDS_OK) {
      ASSERT_EQ_INT(rc, WDS_OK);
    } else {
      ASSERT_TRUE(rc < 0);
      ASSERT_CONTAINS(err.msg, "closed before the end of the body (after "
                               "5000 bytes of 100000; the server ignores "
                               "ranges, so the transfer cannot resume)");
    }
    ASSERT_EQ_U64(got, cases[i].got);
    ASSERT_EQ_INT(kept, cases[i].cached);
    int entries = 0;
    DIR *d = opendir(dir);
    ASSERT_TRUE(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      entries += e->d_name[0] != '.';
    closedir(d);
    ASSERT_EQ_INT(entries, cases[i].cached);
    if (cases[i].rc == WDS_OK && !cases[i].cached) {
      ASSERT_EQ_INT((int)atomic_load(&st.errors), 1);
      ASSERT_EQ_INT(warned_count, 1);
      ASSERT_CONTAINS(warned_msg, "its end could not be verified");
    }
    if (cases[i].cached) {
      /* The same read to a verified end, not consumed (a stream's reading
       * thread that read ahead of a reader that stopped early): nothing
       * is kept, and nothing is left behind. */
      rm_cache_dir(dir);
      ASSERT_EQ_INT(mkdir(dir, 0700), 0);
      memset(&st, 0, sizeof st);
      scripted_cache = &cfg;
      scripted_keep_unconsumed = 1;
      rc = read_scripted(5, acts, n, &got, &err);
      scripted_keep_unconsumed = 0;
      scripted_cache = NULL;
      ASSERT_EQ_INT(rc, WDS_OK);
      ASSERT_EQ_U64(got, cases[i].got);
      ASSERT_EQ_INT((int)atomic_load(&st.stored), 0);
      ASSERT_EQ_INT((int)atomic_load(&st.errors), 0);
      d = opendir(dir);
      ASSERT_TRUE(d != NULL);
      entries = 0;
      while ((e = readdir(d)) != NULL)
        entries += e->d_name[0] != '.' || strncmp(e->d_name, ".tmp", 4) == 0;
      closedir(d);
      ASSERT_EQ_INT(entries, 0);
    }
    rm_cache_dir(dir);
    ASSERT_EQ_INT(mkdir(dir, 0700), 0);
  }
  rm_cache_dir(dir);
}

TEST(cuts_in_the_headers_give_up_after_the_retries) {
  const char *acts[] = {"status", "midheader", "status", "status"};
  size_t got = 0;
  wds__err err = {0};
  int rc = read_scripted(2, acts, 4, &got, &err);
  printf("  %s\n", err.msg);
  ASSERT_TRUE(rc < 0);
  ASSERT_EQ_U64(got, 0);
  /* (the URL is the caller's to name, as for every source) */
  ASSERT_STREQ(err.msg, "the connection closed inside the response headers "
                        "(gave up after 3 attempts)");
  ASSERT_EQ_INT(served, 3);
}

int main(void) {
  for (size_t i = 0; i < BODY_SIZE; i++)
    body[i] = (unsigned char)(i * 7 % 251);
  RUN(headers_are_parsed);
  RUN(resume_needs_the_same_resource_at_the_right_byte);
  RUN(retry_after_is_parsed);
  RUN(other_remote_schemes_name_pipe_curl);
  /* The tests against a local server need libcurl: without it each is
   * counted as skipped. */
  int curl = wds__http_available();
  if (curl) {
    silent_start();
    if (silent_port <= 0)
      return 1;
  }
  RUN_IF(curl, a_cancel_wakes_a_read_from_a_silent_server,
         "built without libcurl");
  RUN_IF(curl, the_read_timeout_is_reported, "built without libcurl");
  RUN_IF(curl, a_source_outlives_its_thread, "built without libcurl");
  RUN_IF(curl, every_cut_the_server_makes_is_resumed_or_retried,
         "built without libcurl");
  RUN_IF(curl, a_server_ignoring_ranges_ends_a_body_without_length,
         "built without libcurl");
  RUN_IF(curl, only_a_verified_end_is_cached, "built without libcurl");
  RUN_IF(curl, cuts_in_the_headers_give_up_after_the_retries,
         "built without libcurl");
  RUN_IF(curl, retry_after_is_waited_for, "built without libcurl");
  RUN_IF(curl, retry_after_waits_have_one_budget, "built without libcurl");
  RUN_IF(curl, a_retry_wait_obeys_the_interrupt_and_cancel,
         "built without libcurl");
  RUN_IF(curl, a_signed_request_keeps_dot_segments, "built without libcurl");
  RUN_IF(curl, a_redirect_target_hides_its_secrets, "built without libcurl");
  if (curl)
    close(silent_fd);
  return test_summary();
}
