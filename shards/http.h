/* http.h — http:// and https:// shards read in process with libcurl.
 * Internal to wds (used by source.c).
 *
 * A transfer streams into a bounded buffer that reads drain; connections
 * are kept per thread and reused by the next shard on the same host;
 * transient failures (connect errors, HTTP 408/429/5xx, a cut transfer) are
 * retried with backoff, a transfer cut after N bytes resuming with a
 * "Range: bytes=N-" request whose answer must be a 206 starting at N for
 * the same ETag/Last-Modified, so no byte is lost or delivered twice. */
#ifndef WDS_SHARDS_HTTP_H
#define WDS_SHARDS_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "base/err.h"
#include "io_opts.h"

typedef struct wds__http wds__http;

/* 1 when built with libcurl. */
int wds__http_available(void);

/* Starts the transfer (nothing is sent before the first read). */
int wds__http_open(const char *url, const wds__io_opts *opts, wds__http **out,
                   wds__err *err);

/* A request beyond a plain GET of a public URL (s3://, s3.c). The strings
 * are copied. */
typedef struct wds__http_req {
  const char *url;        /* what is requested (messages do not name it:
                             the caller prefixes what it calls it) */
  const char *aws_sigv4;  /* CURLOPT_AWS_SIGV4's parameter, or NULL */
  const char *userpwd;    /* "KEY:SECRET" for it; never in a message */
  const char *headers[3]; /* extra header lines; NULL ends them early */
  /* Turns an error response's body (its first WDS__HTTP_ERROR_BODY bytes)
   * into a detail for the message, such as S3's XML <Code>; "" for none.
   * With it, 3xx answers are errors too (redirects are not followed). */
  void (*error_detail)(const char *body, size_t n, char *out, size_t size);
} wds__http_req;

#define WDS__HTTP_ERROR_BODY 8192

int wds__http_open_req(const wds__http_req *req, const wds__io_opts *opts,
                       wds__http **out, wds__err *err);
/* Up to cap bytes: the count (> 0), 0 at the end, or a negative status. */
ssize_t wds__http_read(wds__http *h, void *dst, size_t cap, wds__err *err);
/* 1 with *total set when the server announced the resource's length. */
int wds__http_total(const wds__http *h, uint64_t *total);
/* 1 once the read reached an end that was verified: a Content-Length or a
 * Content-Range's end reached, a chunked body's terminator, an HTTP/2 or /3
 * stream's end, a 416 to a Range request at the end of a body without a
 * length, or a server ignoring that request answering 200 with a
 * Content-Length equal to the bytes received. 0 before the end, and at an
 * end only assumed: a body without a length that ended at close, from a
 * server that ignores ranges and gives no length (the read succeeds, but a
 * cut could not be told from it; the cache does not keep such a body). A
 * 200 to that request whose Content-Length differs from the bytes received
 * is a cut: the read fails (it cannot resume). */
int wds__http_verified(const wds__http *h);
/* Stops the transfer if it still runs. NULL is a no-op. */
void wds__http_close(wds__http *h);

/* What a response said about the resource, for the resume check. */
typedef struct wds__http_meta {
  long status;
  int has_range;          /* a Content-Range "bytes A-B/T" was seen */
  uint64_t range_start;   /* A */
  uint64_t total;         /* T, or the Content-Length of a 200; */
  int has_total;          /* 0: unknown ("*" or no length) */
  char etag[128];         /* "" when absent */
  char last_modified[64]; /* "" when absent */
  int has_end;            /* the body's end in the resource is known: */
  uint64_t end;           /* B + 1 of a Content-Range, else Content-Length */
  int chunked;            /* Transfer-Encoding: chunked (its end is marked) */
  int http1;              /* HTTP/1.x: a body without a length ends at close */
  int has_retry_after;    /* a valid Retry-After: */
  long long retry_after_ms; /* how long it asks to wait (0: now) */
} wds__http_meta;

/* A Retry-After value (delta-seconds, or an HTTP-date compared with now) as
 * milliseconds to wait (0 for a date past), or -1 when it is neither. */
long long wds__http_retry_after_ms(const char *v, size_t n, time_t now);

/* Whether a response's body ends only where the connection closed (HTTP/1.x,
 * neither a length nor chunked), so a cut cannot be told from the end. */
int wds__http_close_delimited(const wds__http_meta *m);

/* Parses one header line (as libcurl hands them, with CRLF) into m; a status
 * line starts a new response and clears m. */
void wds__http_parse_header(wds__http_meta *m, const char *line, size_t n,
                            char *reason, size_t reason_size);

/* Whether a response to "Range: bytes=offset-" continues the resource first
 * described by `first`: a 206 whose Content-Range starts at offset, with the
 * same total, ETag and Last-Modified. Returns 1, or 0 with why filled. */
int wds__http_resume_ok(const wds__http_meta *first, const wds__http_meta *now,
                        uint64_t offset, char *why, size_t why_size);

/* The reason phrase for a status (HTTP/2 sends none), or "". */
const char *wds__http_reason(long status);

#endif
