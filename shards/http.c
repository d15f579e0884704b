/* http.c — http(s):// shards read in process with libcurl (see http.h).
 *
 * One easy handle in a multi handle, driven by the reading thread: a read
 * runs curl_multi_perform and waits in curl_multi_poll beside the
 * cancellation token's eventfd, so a cancel wakes it at once and the read
 * timeout (no byte for that long) works as it does for pipes. The write
 * callback appends to a bounded buffer and pauses the transfer when it is
 * full; the next read that finds the buffer empty resumes it. Memory per
 * source is that buffer (WDS__HTTP_BUFFER) plus libcurl's own.
 *
 * Connections: each thread keeps one multi handle and one easy handle
 * (a pthread key frees them when the thread ends), and libcurl keeps the
 * multi's connections open after a transfer, so the next shard from the
 * same host reuses one. (libcurl does not support sharing a connection
 * cache between threads, so the cache is per thread.) A second source open
 * in the same thread, or a forked child, gets handles of its own.
 *
 * Nothing is printed: no verbose output, errors go to an error buffer. */
#include "http.h"

#include "base/url.h"
#include "netrc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#ifdef WDS_HAVE_CURL
#include <curl/curl.h>

#include "curl_dl.h" /* libcurl's functions, loaded on first use */
#endif

const char *wds__http_reason(long status) {
  switch (status) {
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 410:
    return "Gone";
  case 416:
    return "Range Not Satisfiable";
  case 429:
    return "Too Many Requests";
  case 500:
    return "Internal Server Error";
  case 501:
    return "Not Implemented";
  case 502:
    return "Bad Gateway";
  case 503:
    return "Service Unavailable";
  case 504:
    return "Gateway Timeout";
  default:
    return "";
  }
}

static int header_is(const char *line, size_t n, const char *name,
                     const char **value, size_t *vlen) {
  size_t k = strlen(name);
  if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
    return 0;
  const char *v = line + k + 1, *e = line + n;
  while (v < e && (*v == ' ' || *v == '\t'))
    v++;
  while (e > v &&
         (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t'))
    e--;
  *value = v;
  *vlen = (size_t)(e - v);
  return 1;
}

static void copy_value(char *dst, size_t size, const char *v, size_t n) {
  if (n >= size)
    n = size - 1;
  memcpy(dst, v, n);
  dst[n] = '\0';
}

/* Parses a decimal number of v[0..n); returns the end or NULL. */
static const char *parse_u64(const char *v, const char *e, uint64_t *out) {
  uint64_t x = 0;
  const char *p = v;
  while (p < e && *p >= '0' && *p <= '9') {
    if (x > (UINT64_MAX - 9) / 10)
      return NULL;
    x = x * 10 + (uint64_t)(*p - '0');
    p++;
  }
  if (p == v)
    return NULL;
  *out = x;
  return p;
}

void wds__http_parse_header(wds__http_meta *m, const char *line, size_t n,
                            char *reason, size_t reason_size) {
  const char *v;
  size_t vl;
  if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
    memset(m, 0, sizeof *m);
    const char *p = memchr(line, ' ', n), *e = line + n;
    uint64_t code = 0;
    m->http1 = n >= 7 && strncmp(line, "HTTP/1.", 7) == 0;
    if (p && (p = parse_u64(p + 1, e, &code)) != NULL)
      m->status = (long)code;
    if (reason && reason_size) {
      reason[0] = '\0';
      if (p) {
        while (p < e && *p == ' ')
          p++;
        const char *q = e;
        while (q > p && (q[-1] == '\r' || q[-1] == '\n' || q[-1] == ' '))
          q--;
        copy_value(reason, reason_size, p, (size_t)(q - p));
      }
    }
  } else if (header_is(line, n, "etag", &v, &vl)) {
    copy_value(m->etag, sizeof m->etag, v, vl);
  } else if (header_is(line, n, "last-modified", &v, &vl)) {
    copy_value(m->last_modified, sizeof m->last_modified, v, vl);
  } else if (header_is(line, n, "content-length", &v, &vl)) {
    uint64_t x = 0;
    const char *p = parse_u64(v, v + vl, &x);
    if (p == v + vl && !m->has_range) {
      m->total = x;
      m->has_total = 1;
      m->end = x;
      m->has_end = 1;
    }
  } else if (header_is(line, n, "retry-after", &v, &vl)) {
    long long ms = wds__http_retry_after_ms(v, vl, time(NULL));
    m->has_retry_after = ms >= 0;
    m->retry_after_ms = ms >= 0 ? ms : 0;
  } else if (header_is(line, n, "transfer-encoding", &v, &vl)) {
    for (size_t i = 0; i + 7 <= vl; i++)
      if (strncasecmp(v + i, "chunked", 7) == 0)
        m->chunked = 1;
  } else if (header_is(line, n, "content-range", &v, &vl)) {
    /* bytes A-B/T or bytes A-B/ * */
    const char *e = v + vl, *p = v;
    uint64_t a = 0, b = 0, t = 0;
    if (vl > 6 && strncasecmp(p, "bytes ", 6) == 0 &&
        (p = parse_u64(p + 6, e, &a)) != NULL && p < e && *p == '-' &&
        (p = parse_u64(p + 1, e, &b)) != NULL && p < e && *p == '/') {
      m->has_range = 1;
      m->range_start = a;
      m->has_total = 0;
      m->has_end = b < UINT64_MAX;
      m->end = b + 1;
      if (parse_u64(p + 1, e, &t) == e) {
        m->total = t;
        m->has_total = 1;
      }
    }
  }
}

/* Whether s is the time at written in one of the three forms exactly:
 * libcurl's parser also takes other forms and ignores words it does not
 * know ("... GMT trailing"). */
static int is_http_date(const char *s, time_t at) {
  static const char *const day[] = {"Sunday",    "Monday",   "Tuesday",
                                    "Wednesday", "Thursday", "Friday",
                                    "Saturday"};
  static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  struct tm t;
  if (!gmtime_r(&at, &t) || t.tm_wday < 0 || t.tm_wday > 6 || t.tm_mon < 0 ||
      t.tm_mon > 11)
    return 0;
  char f[3][64];
  snprintf(f[0], sizeof f[0], "%.3s, %02d %s %04d %02d:%02d:%02d GMT",
           day[t.tm_wday], t.tm_mday, mon[t.tm_mon], t.tm_year + 1900,
           t.tm_hour, t.tm_min, t.tm_sec);
  snprintf(f[1], sizeof f[1], "%s, %02d-%s-%02d %02d:%02d:%02d GMT",
           day[t.tm_wday], t.tm_mday, mon[t.tm_mon], t.tm_year % 100, t.tm_hour,
           t.tm_min, t.tm_sec);
  snprintf(f[2], sizeof f[2], "%.3s %s %2d %02d:%02d:%02d %04d", day[t.tm_wday],
           mon[t.tm_mon], t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
           t.tm_year + 1900);
  return strcmp(s, f[0]) == 0 || strcmp(s, f[1]) == 0 || strcmp(s, f[2]) == 0;
}

long long wds__http_retry_after_ms(const char *v, size_t n, time_t now) {
  const char *e = v + n;
  uint64_t secs = 0;
  const char *p = parse_u64(v, e, &secs);
  if (p == e) /* delta-seconds */
    return secs > 86400ull * 365 ? 86400ll * 365 * 1000
                                 : (long long)secs * 1000;
  /* An HTTP-date in any of RFC 9110's three forms, each starting with the
   * day's name: IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", RFC 850
   * "Sunday, 06-Nov-94 08:49:37 GMT", asctime "Sun Nov  6 08:49:37 1994".
   * libcurl's parser reads English names whatever the locale (strptime's
   * %a and %b follow LC_TIME). Without libcurl no date is read (nothing
   * would ask: http(s) is not read in process then). */
  char buf[64];
  if (n == 0 || n >= sizeof buf ||
      !((v[0] >= 'A' && v[0] <= 'Z') || (v[0] >= 'a' && v[0] <= 'z')))
    return -1;
  memcpy(buf, v, n);
  buf[n] = '\0';
#ifdef WDS_HAVE_CURL
  time_t at = curl_getdate(buf, NULL);
#else
  time_t at = (time_t)-1;
#endif
  if (at == (time_t)-1 || !is_http_date(buf, at))
    return -1;
  return at <= now ? 0 : (long long)(at - now) * 1000;
}

int wds__http_close_delimited(const wds__http_meta *m) {
  return m->http1 && !m->has_end && !m->chunked;
}

int wds__http_resume_ok(const wds__http_meta *first, const wds__http_meta *now,
                        uint64_t offset, char *why, size_t why_size) {
  if (now->status != 206) {
    snprintf(why, why_size,
             "the server answered HTTP %ld to a request for bytes from %llu "
             "(a range request needs 206)",
             now->status, (unsigned long long)offset);
    return 0;
  }
  if (!now->has_range || now->range_start != offset) {
    snprintf(why, why_size,
             "the server's Content-Range does not start at byte %llu",
             (unsigned long long)offset);
    return 0;
  }
  if (first->has_total && now->has_total && first->total != now->total) {
    snprintf(why, why_size,
             "the resource changed size (%llu bytes, then %llu) while it was "
             "read",
             (unsigned long long)first->total, (unsigned long long)now->total);
    return 0;
  }
  if (strcmp(first->etag, now->etag) != 0) {
    snprintf(why, why_size,
             "the resource changed while it was read (ETag %s, then %s)",
             first->etag[0] ? first->etag : "none",
             now->etag[0] ? now->etag : "none");
    return 0;
  }
  if (strcmp(first->last_modified, now->last_modified) != 0) {
    snprintf(why, why_size,
             "the resource changed while it was read (Last-Modified %s, "
             "then %s)",
             first->last_modified[0] ? first->last_modified : "none",
             now->last_modified[0] ? now->last_modified : "none");
    return 0;
  }
  return 1;
}

#ifndef WDS_HAVE_CURL

int wds__http_available(void) { return 0; }

int wds__http_open(const char *url, const wds__io_opts *opts, wds__http **out,
                   wds__err *err) {
  (void)url;
  (void)opts;
  *out = NULL;
  return wds__fail(err, WDS_ERR_OPEN,
                   "cannot open: this wds was built without libcurl, so "
                   "http(s):// is not read in process (use pipe:curl -s URL)");
}

ssize_t wds__http_read(wds__http *h, void *dst, size_t cap, wds__err *err) {
  (void)h;
  (void)dst;
  (void)cap;
  return wds__fail(err, WDS_ERR_IO, "no libcurl");
}

int wds__http_open_req(const wds__http_req *req, const wds__io_opts *opts,
                       wds__http **out, wds__err *err) {
  return wds__http_open(req->url, opts, out, err);
}

void wds__http_close(wds__http *h) { (void)h; }

int wds__http_total(const wds__http *h, uint64_t *total) {
  (void)h;
  *total = 0;
  return 0;
}

int wds__http_verified(const wds__http *h) {
  (void)h;
  return 0;
}

#else

#include <pthread.h>
#include <unistd.h>

/* The buffer the write callback fills (grown only when libcurl hands one
 * chunk larger than it, which CURLOPT_BUFFERSIZE bounds). */
#define WDS__HTTP_BUFFER (1u << 20)
#define WDS__HTTP_CURL_BUFFER (256L << 10)
#define WDS__HTTP_CONNECT_TIMEOUT_MS 30000
#define WDS__HTTP_BACKOFF_MS 200
#define WDS__HTTP_BACKOFF_MAX_MS 5000
/* A Retry-After is waited for at most this long per answer (and at most
 * the read timeout), and all the waits of one source at most twice that:
 * a server answering "Retry-After: 3600" to every retry does not hold a
 * worker for retries x an hour; past the budget the source fails saying
 * so. */
#define WDS__HTTP_RETRY_AFTER_MAX_MS 60000

/* ---- per-thread handles ---- */

typedef struct handles {
  CURLM *multi;
  CURL *easy;
  pid_t pid;
  int busy;   /* lent to an open source */
  int orphan; /* its thread ended while lent: the source frees it */
} handles;

/* Guards busy and orphan: a source may be closed in another thread than
 * the one that opened it, while that one ends. */
static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static pthread_key_t handles_key;
static int global_ok;

static void handles_free(handles *c) {
  if (!c)
    return;
  if (c->easy)
    curl_easy_cleanup(c->easy);
  if (c->multi)
    curl_multi_cleanup(c->multi);
  free(c);
}

static void handles_destructor(void *p) {
  handles *c = p;
  if (!c || c->pid != getpid())
    return; /* a forked parent's: not ours to close */
  /* Lent to a source still open: it frees them at close. */
  pthread_mutex_lock(&handles_mu);
  int lent = c->busy;
  if (lent)
    c->orphan = 1;
  pthread_mutex_unlock(&handles_mu);
  if (!lent)
    handles_free(c);
}

static void global_init(void) {
  global_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK &&
              pthread_key_create(&handles_key, handles_destructor) == 0;
}

static handles *handles_new(void) {
  handles *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->multi = curl_multi_init();
  c->easy = curl_easy_init();
  c->pid = getpid();
  if (!c->multi || !c->easy) {
    handles_free(c);
    return NULL;
  }
  return c;
}

/* The thread's handles if free, else new ones (*owned set). */
static handles *handles_get(int *owned) {
  handles *c = pthread_getspecific(handles_key);
  if (c && c->pid != getpid()) {
    /* Inherited through fork: the parent's connections are not ours to
     * use or close. Forget them. */
    pthread_setspecific(handles_key, NULL);
    c = NULL;
  }
  int lent = 0;
  if (c) {
    pthread_mutex_lock(&handles_mu);
    lent = c->busy;
    c->busy = 1;
    pthread_mutex_unlock(&handles_mu);
  }
  if (c && !lent) {
    *owned = 0;
    return c;
  }
  if (!c) {
    c = handles_new();
    if (c && pthread_setspecific(handles_key, c) == 0) {
      c->busy = 1;
      *owned = 0;
      return c;
    }
    handles_free(c);
  }
  *owned = 1;
  return handles_new();
}

/* ---- the source ---- */

struct wds__http {
  char *url; /* what is requested */
  char *sigv4, *userpwd;
  char *netrc_user, *netrc_pass; /* from .netrc (netrc.h); secrets */
  struct curl_slist *headers;
  void (*error_detail)(const char *body, size_t n, char *out, size_t size);
  char *errbody; /* an error response's body (error_detail only) */
  size_t errbody_len;
  handles *h;
  int owned;      /* h is ours alone (freed at close) */
  int in_multi;   /* the easy handle is added to the multi */
  int timeout_ms; /* < 0: none */
  int retries;    /* retries after failed attempts without progress */
  const wds__cancel *cancel;
  const wds__cancel *stop; /* wds__io_opts.stop */

  unsigned char *buf;
  size_t buf_cap, len, pos;
  int paused;
  int done; /* the transfer ended; result holds how */
  CURLcode result;
  int eof; /* the whole resource was delivered */

  uint64_t offset;        /* bytes of the resource taken into buf so far */
  uint64_t attempt_from;  /* offset at the start of this attempt */
  int attempts;           /* attempts so far */
  int failures;           /* consecutive failed attempts without progress */
  long long ra_waited_ms; /* all Retry-After waits so far (the budget's) */
  int have_first;         /* first holds the first answer's meta */
  wds__http_meta first, cur;
  char reason[64];
  int checked;       /* this attempt's answer was checked */
  int headers_done;  /* the last response's header block ended */
  int unsure_end;    /* a body without a length ended at close: a Range
                        request at its end asks whether more follows */
  int end_confirmed; /* ...and the answer was "no" (a 416, or a 200 from a
                        server that ignores ranges) */
  int verified;      /* eof: the end was proved (see wds__http_verified) */
  long http_error;   /* the final status of an attempt refused (>= 400) */
  char refuse[512];  /* a resume refused: why (not retried) */
  char errbuf[CURL_ERROR_SIZE];
};

int wds__http_available(void) { return 1; }

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  wds__http *s = ud;
  size_t len = size * n;
  if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
    /* A new response (after a 1xx or a redirect followed): its state only. */
    wds__http_parse_header(&s->cur, p, len, s->reason, sizeof s->reason);
    s->headers_done = 0;
    return len;
  }
  if (len <= 2 && (len == 0 || p[0] == '\r' || p[0] == '\n')) {
    /* The end of a response's headers: an error status ends the attempt
     * here (its body, an error page, is not shard data). 1xx and followed
     * redirects come before the final answer. */
    s->headers_done = 1;
    if (s->cur.status >= 400 || (s->error_detail && s->cur.status >= 300)) {
      s->http_error = s->cur.status;
      return s->error_detail ? len : 0; /* the body says why */
    }
    return len;
  }
  wds__http_parse_header(&s->cur, p, len, NULL, 0);
  return len;
}

/* The first bytes of an attempt: a fresh answer sets the resource's
 * identity; a resumed one must continue it. */
static int check_answer(wds__http *s) {
  s->checked = 1;
  if (s->unsure_end && s->cur.status == 200) {
    /* The server ignores ranges: the whole resource again. Its length, if
     * it gives one, says whether the close-delimited body was whole (the
     * end is then verified) or cut (which cannot resume). Without one the
     * end stands, unverified: nothing tells a cut from it. Stop this
     * second copy. */
    if (s->cur.has_total && s->cur.total > s->offset) {
      snprintf(s->refuse, sizeof s->refuse,
               "the connection closed before the end of the body (after "
               "%llu bytes of %llu; the server ignores ranges, so the "
               "transfer cannot resume)",
               (unsigned long long)s->offset, (unsigned long long)s->cur.total);
      return 0;
    }
    if (s->cur.has_total && s->cur.total < s->offset) {
      snprintf(s->refuse, sizeof s->refuse,
               "the resource changed while it was read (%llu bytes received, "
               "then a length of %llu)",
               (unsigned long long)s->offset, (unsigned long long)s->cur.total);
      return 0;
    }
    s->end_confirmed = 1;
    s->verified = s->cur.has_total;
    return 0;
  }
  if (s->attempt_from == 0) {
    if (s->cur.status >= 300 || s->cur.status < 200) {
      snprintf(s->refuse, sizeof s->refuse, "unexpected HTTP %ld %s",
               s->cur.status, s->reason);
      return 0;
    }
    s->first = s->cur;
    s->have_first = 1;
    s->unsure_end = 0;
    return 1;
  }
  char why[400];
  if (!wds__http_resume_ok(&s->first, &s->cur, s->attempt_from, why,
                           sizeof why)) {
    snprintf(s->refuse, sizeof s->refuse,
             "cannot resume the transfer cut after %llu bytes: %s",
             (unsigned long long)s->attempt_from, why);
    return 0;
  }
  s->unsure_end = 0;
  return 1;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
  wds__http *s = ud;
  size_t len = size * n;
  if (s->http_error) { /* an error's body, kept for error_detail */
    size_t room = WDS__HTTP_ERROR_BODY - s->errbody_len;
    if (len > room)
      len = room;
    memcpy(s->errbody + s->errbody_len, p, len);
    s->errbody_len += len;
    return len == size * n ? len : 0; /* enough: end it */
  }
  if (!s->checked && !check_answer(s))
    return 0; /* CURLE_WRITE_ERROR; s->refuse says why */
  if (s->pos == s->len)
    s->pos = s->len = 0;
  if (s->len + len > s->buf_cap) {
    if (s->len > 0) {
      s->paused = 1;
      return CURL_WRITEFUNC_PAUSE; /* handed again once we resume */
    }
    unsigned char *b = realloc(s->buf, len);
    if (!b)
      return 0;
    s->buf = b;
    s->buf_cap = len;
  }
  memcpy(s->buf + s->len, p, len);
  s->len += len;
  s->offset += len;
  return len;
}

static int start_attempt(wds__http *s, wds__err *err) {
  CURL *e = s->h->easy;
  curl_easy_reset(e);
  s->done = 0;
  s->paused = 0;
  s->checked = 0;
  s->headers_done = 0;
  s->http_error = 0;
  s->errbody_len = 0;
  s->errbuf[0] = '\0';
  memset(&s->cur, 0, sizeof s->cur);
  s->reason[0] = '\0';
  s->attempt_from = s->offset;
  s->attempts++;
  char range[48];
  long connect_ms = WDS__HTTP_CONNECT_TIMEOUT_MS;
  if (s->timeout_ms > 0 && s->timeout_ms < connect_ms)
    connect_ms = s->timeout_ms;
  if (curl_easy_setopt(e, CURLOPT_URL, s->url) != CURLE_OK)
    return wds__fail(err, WDS_ERR_OPEN, "cannot open: a URL libcurl refuses");
  /* Every option is checked: one refused (a libcurl built without a
   * feature, out of memory) would otherwise send another request than
   * meant: any protocol, unsigned, without the session token... */
  const char *refused = NULL;
#define SET(opt, val)                                                          \
  do {                                                                         \
    if (!refused && curl_easy_setopt(e, opt, val) != CURLE_OK)                 \
      refused = #opt;                                                          \
  } while (0)
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, s->error_detail ? 0L : 1L);
  SET(CURLOPT_MAXREDIRS, 10L);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_VERBOSE, 0L);
  SET(CURLOPT_NOPROGRESS, 1L);
  SET(CURLOPT_ERRORBUFFER, s->errbuf);
  SET(CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
  SET(CURLOPT_TCP_KEEPALIVE, 1L);
  SET(CURLOPT_BUFFERSIZE, WDS__HTTP_CURL_BUFFER);
  SET(CURLOPT_USERAGENT, "wds");
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, s);
  SET(CURLOPT_WRITEFUNCTION, on_write);
  SET(CURLOPT_WRITEDATA, s);
  /* Trusted certificates beside the system's bundle, as the curl tool
   * takes them (a private CA, a test server's own certificate). */
  const char *ca = getenv("CURL_CA_BUNDLE");
  if (!ca || !*ca)
    ca = getenv("SSL_CERT_FILE");
  if (ca && *ca)
    SET(CURLOPT_CAINFO, ca);
  const char *cadir = getenv("SSL_CERT_DIR");
  if (cadir && *cadir)
    SET(CURLOPT_CAPATH, cadir);
  /* Credentials for an http(s) host from ~/.netrc when the URL has none
   * (as curl --netrc-optional): they need not be in the URL, where they
   * would travel into logs and files. Read by wds (netrc.h), never by
   * libcurl (CURLOPT_NETRC stays CURL_NETRC_IGNORED), whose open() of a
   * FIFO there would block beyond every timeout and signal. */
  if (s->netrc_user)
    SET(CURLOPT_USERNAME, s->netrc_user);
  if (s->netrc_pass)
    SET(CURLOPT_PASSWORD, s->netrc_pass);
  if (s->sigv4) {
    SET(CURLOPT_AWS_SIGV4, s->sigv4);
    SET(CURLOPT_USERPWD, s->userpwd);
    /* The path is sent and signed as given: libcurl would otherwise drop
     * "." and ".." segments and fetch another object than the s3:// URL
     * names (a key is a name, not a path). */
    SET(CURLOPT_PATH_AS_IS, 1L);
  }
  if (s->headers)
    SET(CURLOPT_HTTPHEADER, s->headers);
  if (s->offset > 0 || s->unsure_end) {
    snprintf(range, sizeof range, "%llu-", (unsigned long long)s->offset);
    SET(CURLOPT_RANGE, range);
  }
#undef SET
  if (refused)
    return wds__fail(err, WDS_ERR_OPEN,
                     "cannot open: libcurl refused %s (libcurl %s or later, "
                     "built with http and https, is needed)",
                     refused, WDS__CURL_MIN_VERSION);
  if (curl_multi_add_handle(s->h->multi, e) != CURLM_OK)
    return wds__fail(err, WDS_ERR_IO, "cannot start the HTTP transfer");
  s->in_multi = 1;
  return WDS_OK;
}

static void stop_attempt(wds__http *s) {
  if (s->in_multi) {
    curl_multi_remove_handle(s->h->multi, s->h->easy);
    s->in_multi = 0;
  }
}

static char *dup_or_null(const char *x, int *bad) {
  char *d = x ? strdup(x) : NULL;
  if (x && !d)
    *bad = 1;
  return d;
}

int wds__http_open(const char *url, const wds__io_opts *opts, wds__http **out,
                   wds__err *err) {
  wds__http_req req = {.url = url};
  return wds__http_open_req(&req, opts, out, err);
}

int wds__http_open_req(const wds__http_req *req, const wds__io_opts *opts,
                       wds__http **out, wds__err *err) {
  *out = NULL;
  pthread_once(&global_once, global_init);
  if (!global_ok)
    return wds__fail(err, WDS_ERR_OPEN, "cannot initialise libcurl%s%s",
                     *wds__curl_dl_error() ? ": " : "", wds__curl_dl_error());
  wds__http *s = calloc(1, sizeof *s);
  if (!s)
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  int bad = 0;
  s->url = dup_or_null(req->url, &bad);
  s->sigv4 = dup_or_null(req->aws_sigv4, &bad);
  s->userpwd = dup_or_null(req->userpwd, &bad);
  for (size_t i = 0; i < sizeof req->headers / sizeof *req->headers &&
                     req->headers[i] && !bad;
       i++) {
    struct curl_slist *l = curl_slist_append(s->headers, req->headers[i]);
    if (l)
      s->headers = l;
    else
      bad = 1;
  }
  s->error_detail = req->error_detail;
  if (s->error_detail && !(s->errbody = malloc(WDS__HTTP_ERROR_BODY)))
    bad = 1;
  if (!s->sigv4 && !bad && s->url) {
    wds__cache_stats *cs = opts ? opts->cache.stats : NULL;
    int rc =
        wds__netrc_for_url(s->url, &s->netrc_user, &s->netrc_pass,
                           cs ? cs->warn : NULL, cs ? cs->warn_ctx : NULL, err);
    if (rc != WDS_OK) {
      wds__http_close(s);
      return rc;
    }
  }
  s->buf_cap = WDS__HTTP_BUFFER;
  s->buf = malloc(s->buf_cap);
  s->h = handles_get(&s->owned);
  if (bad || !s->url || !s->buf || !s->h) {
    wds__http_close(s);
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  }
  s->timeout_ms = !opts || opts->read_timeout_ms == 0
                      ? WDS__DEFAULT_READ_TIMEOUT_MS
                      : opts->read_timeout_ms;
  s->retries = !opts || opts->retries == 0 ? WDS__DEFAULT_RETRIES
               : opts->retries < 0 ? 0
                                   : opts->retries;
  s->cancel = opts ? opts->cancel : NULL;
  s->stop = opts ? opts->stop : NULL;
  int rc = start_attempt(s, err);
  if (rc != WDS_OK) {
    wds__http_close(s);
    return rc;
  }
  *out = s;
  return WDS_OK;
}

int wds__http_total(const wds__http *s, uint64_t *total) {
  *total = s->have_first && s->first.has_total ? s->first.total : 0;
  return s->have_first && s->first.has_total;
}

int wds__http_verified(const wds__http *s) { return s->eof && s->verified; }

void wds__http_close(wds__http *s) {
  if (!s)
    return;
  if (s->h) {
    stop_attempt(s);
    curl_easy_reset(s->h->easy); /* drops our callbacks' pointers */
    int drop = s->owned;
    if (!s->owned) {
      pthread_mutex_lock(&handles_mu);
      drop = s->h->orphan;
      s->h->busy = 0;
      pthread_mutex_unlock(&handles_mu);
    }
    if (drop)
      handles_free(s->h);
  }
  free(s->buf);
  free(s->url);
  free(s->sigv4);
  if (s->userpwd) { /* the secret: not left in freed memory */
    explicit_bzero(s->userpwd, strlen(s->userpwd));
    free(s->userpwd);
  }
  wds__netrc_free_secret(s->netrc_user);
  wds__netrc_free_secret(s->netrc_pass);
  /* The headers may hold a secret (S3's session token): wiped too. */
  for (struct curl_slist *l = s->headers; l; l = l->next)
    if (l->data)
      explicit_bzero(l->data, strlen(l->data));
  curl_slist_free_all(s->headers);
  free(s->errbody);
  free(s);
}

static int transient_curl(CURLcode c) {
  switch (c) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_PARTIAL_FILE:
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
    return 1;
  default:
    return 0;
  }
}

static int transient_http(long status) {
  return status == 408 || status == 429 || status >= 500;
}

/* Sleeps ms before a retry unless cancelled or interrupted first (the
 * interrupt check asked as a blocked read asks it). */
static int backoff(wds__http *s, int ms, wds__err *err) {
  return wds__sleep_ms(s->cancel, s->stop, ms, err);
}

static const char *attempts_note(wds__http *s, char *b, size_t n) {
  if (s->attempts > 1)
    snprintf(b, n, " (gave up after %d attempts)", s->attempts);
  else
    b[0] = '\0';
  return b;
}

/* The attempt ended. Returns WDS_OK when the resource is complete (eof
 * set) or a new attempt started, else the error. */
static int finish_attempt(wds__http *s, wds__err *err) {
  CURLcode c = s->result;
  long status = s->http_error;
  stop_attempt(s);
  if (s->end_confirmed || (s->unsure_end && status == 416)) {
    s->eof = 1;
    if (!s->end_confirmed)
      s->verified = 1; /* a 416 at the end: nothing follows */
    return WDS_OK;
  }
  if (s->refuse[0])
    return wds__fail(err, WDS_ERR_IO, "%s", s->refuse);
  /* libcurl reports some cuts as a complete transfer: a connection that
   * closes inside the headers (a 200 with no byte), or inside a body whose
   * length is given only by Content-Range or not at all. */
  const char *cut = NULL;
  if (c == CURLE_OK && status == 0) {
    if (!s->headers_done) {
      cut = "the connection closed inside the response headers";
    } else if (!s->checked && !check_answer(s)) { /* an empty body */
      if (s->end_confirmed) {
        s->eof = 1;
        return WDS_OK;
      }
      return wds__fail(err, WDS_ERR_IO, "%s", s->refuse);
    } else if (s->cur.has_end && s->offset < s->cur.end) {
      cut = "the connection closed before the end of the body";
    } else if (wds__http_close_delimited(&s->cur)) {
      /* Ended by the close alone: ask for what follows (a 416 says
       * nothing; a 206 continues a cut body). Not a failure. */
      s->unsure_end = 1;
      return start_attempt(s, err);
    } else {
      /* The body's own framing ended it: its Content-Length or
       * Content-Range end reached (libcurl fails a shorter one), the
       * chunked terminator, or an HTTP/2 or /3 stream's end. */
      s->eof = 1;
      s->verified = 1;
      return WDS_OK;
    }
  }
  /* A cut that came exactly at the end of a known length lost nothing. */
  if (status == 0 && s->have_first && s->first.has_total &&
      s->offset == s->first.total) {
    s->eof = 1;
    s->verified = 1;
    return WDS_OK;
  }
  int transient = status ? transient_http(status) : cut ? 1 : transient_curl(c);
  int progress = s->offset > s->attempt_from;
  if (progress)
    s->failures = 0; /* a new run of retries */
  s->failures++;
  if (transient && s->failures <= s->retries) {
    /* A transfer cut after delivering data resumes at once; failures in a
     * row back off (200 ms, doubling, at most 5 s, a little jitter). */
    int ms = 0;
    if (!progress) {
      ms = WDS__HTTP_BACKOFF_MS << (s->failures - 1 < 5 ? s->failures - 1 : 5);
      if (ms > WDS__HTTP_BACKOFF_MAX_MS)
        ms = WDS__HTTP_BACKOFF_MAX_MS;
      ms += (int)(wds__now_ms() % 50);
    }
    /* A 429 or 503 may say when to come back (Retry-After): waited, up to
     * the read timeout (what a stalled server would be given) and
     * WDS__HTTP_RETRY_AFTER_MAX_MS, and all such waits of this source up
     * to twice that; past it the source fails, saying so. */
    if ((status == 429 || status == 503) && s->cur.has_retry_after &&
        s->cur.retry_after_ms > ms) {
      long long cap = WDS__HTTP_RETRY_AFTER_MAX_MS;
      if (s->timeout_ms > 0 && s->timeout_ms < cap)
        cap = s->timeout_ms;
      long long left = 2 * cap - s->ra_waited_ms;
      if (left <= 0) {
        const char *reason =
            s->reason[0] ? s->reason : wds__http_reason(status);
        return wds__fail(err, WDS_ERR_OPEN,
                         "HTTP %ld%s%s: the server asks to wait %.1f s more "
                         "(Retry-After) after %.1f s of such waits, the most "
                         "wds waits for one shard (gave up after %d attempts)",
                         status, *reason ? " " : "", reason,
                         (double)s->cur.retry_after_ms / 1000,
                         (double)s->ra_waited_ms / 1000, s->attempts);
      }
      long long ra = s->cur.retry_after_ms;
      if (ra > cap)
        ra = cap;
      if (ra > left)
        ra = left;
      s->ra_waited_ms += ra;
      if (ra > ms)
        ms = (int)ra;
    }
    int rc = backoff(s, ms, err);
    if (rc != WDS_OK)
      return rc;
    return start_attempt(s, err);
  }
  char note[64];
  attempts_note(s, note, sizeof note);
  if (status) {
    const char *reason = s->reason[0] ? s->reason : wds__http_reason(status);
    char detail[400] = "";
    if (s->error_detail && s->errbody_len > 0) {
      detail[0] = ',';
      detail[1] = ' ';
      s->error_detail(s->errbody, s->errbody_len, detail + 2,
                      sizeof detail - 2);
      if (!detail[2])
        detail[0] = '\0';
    }
    char *eff = NULL;
    curl_easy_getinfo(s->h->easy, CURLINFO_EFFECTIVE_URL, &eff);
    char rb[WDS__URL_REDACT_MAX];
    if (!s->error_detail && eff && strcmp(eff, s->url) != 0)
      return wds__fail(err, WDS_ERR_OPEN, "HTTP %ld%s%s (redirected to %s)%s",
                       status, *reason ? " " : "", reason,
                       wds__url_redact(eff, rb, sizeof rb), note);
    return wds__fail(err, WDS_ERR_OPEN, "HTTP %ld%s%s%s%s", status,
                     *reason ? " " : "", reason, detail, note);
  }
  /* The URL is not named: the reader prefixes it, as for every source. */
  const char *what = cut ? cut
                     : s->errbuf[0] ? s->errbuf
                                    : curl_easy_strerror(c);
  if (s->offset > 0)
    return wds__fail(err, WDS_ERR_IO, "%s after %llu bytes%s", what,
                     (unsigned long long)s->offset, note);
  return wds__fail(err, WDS_ERR_OPEN, "%s%s", what, note);
}

ssize_t wds__http_read(wds__http *s, void *dst, size_t cap, wds__err *err) {
  uint64_t start = wds__now_ms();
  for (;;) {
    if (s->pos < s->len) {
      size_t n = s->len - s->pos;
      if (n > cap)
        n = cap;
      memcpy(dst, s->buf + s->pos, n);
      s->pos += n;
      return (ssize_t)n;
    }
    if (s->eof)
      return 0;
    if (wds__cancelled2(s->cancel, s->stop))
      return wds__fail(err, WDS_ERR_CANCELLED, "cancelled");
    if (s->done) {
      int rc = finish_attempt(s, err);
      if (rc != WDS_OK)
        return rc;
      start = wds__now_ms();
      continue;
    }
    s->pos = s->len = 0;
    if (s->paused) {
      s->paused = 0;
      curl_easy_pause(s->h->easy, CURLPAUSE_CONT); /* may deliver at once */
      if (s->len > 0)
        continue;
    }
    int running = 0;
    CURLMcode mc = curl_multi_perform(s->h->multi, &running);
    if (mc != CURLM_OK)
      return wds__fail(err, WDS_ERR_IO, "libcurl: %s", curl_multi_strerror(mc));
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(s->h->multi, &left)) != NULL) {
      if (m->msg == CURLMSG_DONE && m->easy_handle == s->h->easy) {
        s->done = 1;
        s->result = m->data.result;
      }
    }
    if (s->len > 0 || s->done)
      continue;
    int wait;
    int rc = wds__read_wait(s->cancel, start, s->timeout_ms, 1000, &wait, err);
    if (rc != WDS_OK)
      return rc;
    struct curl_waitfd extra[2];
    unsigned nextra = 0;
    if (s->cancel && s->cancel->fd >= 0)
      extra[nextra++] =
          (struct curl_waitfd){.fd = s->cancel->fd, .events = CURL_WAIT_POLLIN};
    if (s->stop && s->stop->fd >= 0)
      extra[nextra++] =
          (struct curl_waitfd){.fd = s->stop->fd, .events = CURL_WAIT_POLLIN};
    mc =
        curl_multi_poll(s->h->multi, nextra ? extra : NULL, nextra, wait, NULL);
    if (mc != CURLM_OK)
      return wds__fail(err, WDS_ERR_IO, "libcurl: %s", curl_multi_strerror(mc));
  }
}

#endif
