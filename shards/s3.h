/* s3.h — s3://BUCKET/KEY shards and bucket listings. Internal to wds (used
 * by source.c and spec.c).
 *
 * An object is read through http.c (retries, Range resume, the bounded
 * buffer) with the request signed by libcurl's AWS Signature V4. The
 * credentials, region and endpoint come from the environment, as for the
 * AWS CLI: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
 * AWS_REGION or AWS_DEFAULT_REGION (default us-east-1), AWS_ENDPOINT_URL_S3
 * or AWS_ENDPOINT_URL (an S3-compatible store, addressed path-style:
 * ENDPOINT/BUCKET/KEY; without one, AWS in virtual-host style:
 * https://BUCKET.s3.REGION.amazonaws.com/KEY). Errors name the s3:// URL
 * and S3's <Code>, never the secret.
 *
 * A spec's s3:// URL whose key has a glob character (* ? [) or is empty or
 * ends in '/' names a listing: ListObjectsV2 from the prefix before the
 * first glob character, keys matched with fnmatch(FNM_PATHNAME) (a '*'
 * stays within one path component) or, for a prefix, every key under it
 * that ends in a shard extension; sorted by key. */
#ifndef WDS_SHARDS_S3_H
#define WDS_SHARDS_S3_H

#include <stddef.h>

#include "base/err.h"
#include "http.h"
#include "io_opts.h"

/* What the environment says (pointers into it, or NULL when unset or
 * empty). */
typedef struct wds__s3_env {
  const char *key_id, *secret, *token;
  const char *region;       /* NULL: us-east-1 */
  const char *endpoint;     /* NULL: AWS */
  const char *endpoint_var; /* which variable gave endpoint */
} wds__s3_env;

void wds__s3_env_get(wds__s3_env *env);

/* 1 when url starts with "s3://". */
int wds__s3_is_url(const char *url);

/* 1 when url is an s3:// URL naming a listing (see above). */
int wds__s3_is_listing(const char *url);

/* The HTTP URL that reads the s3:// URL, and the signing region (at least
 * 64 bytes). Refuses a URL without a bucket or key, a malformed endpoint or
 * region. *http_url is the caller's to free. */
int wds__s3_request_url(const char *url, const wds__s3_env *env,
                        char **http_url, char *region, size_t region_size,
                        wds__err *err);

/* Opens an s3:// object for reading (http.c's reads and close). */
int wds__s3_open(const char *url, const wds__io_opts *opts, wds__http **out,
                 wds__err *err);

/* S3's XML error body -> "S3 error CODE (MESSAGE)", or "" when it is not
 * one. */
void wds__s3_error_detail(const char *body, size_t n, char *out, size_t size);

/* Expands a listing URL: add() is called with each matching s3:// URL in
 * key order (a non-zero return stops with that status). No match is an
 * error naming the pattern. Each page is requested with opts' read timeout,
 * retries and cancel token, as a shard is read (opts' cache is not used; NULL:
 * the defaults); a cancel ends it with WDS_ERR_CANCELLED. */
typedef struct wds__s3_room {
  size_t urls;     /* URLs the caller can still take */
  uint64_t bytes;  /* bytes of URLs it can still take (URL + NUL + pointer) */
  size_t max_urls; /* its limits, for the messages */
  uint64_t max_bytes;
} wds__s3_room;
/* room (NULL: no bound): a listing that would make more URLs or URL bytes
 * than the caller can take fails with WDS_ERR_LIMIT while it lists, before
 * it holds them all. */
int wds__s3_list(const char *url, const wds__io_opts *opts,
                 const wds__s3_room *room,
                 int (*add)(void *ud, const char *url), void *ud,
                 wds__err *err);

/* Parses one ListObjectsV2 page: add_key() for every <Key> of <Contents>;
 * *truncated and *next (the NextContinuationToken, the caller's to free)
 * from the page. Exposed for the unit test. */
int wds__s3_parse_listing(const char *xml, size_t n,
                          int (*add_key)(void *ud, const char *key), void *ud,
                          int *truncated, char **next, wds__err *err);

#endif
