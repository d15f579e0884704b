/* s3.c — s3:// objects and listings (see s3.h).
 *
 * The request is http.c's, with three additions: CURLOPT_AWS_SIGV4
 * ("aws:amz:REGION:s3") and CURLOPT_USERPWD (KEY:SECRET) sign it; the
 * header "x-amz-content-sha256: UNSIGNED-PAYLOAD", which S3 requires and
 * libcurl (7.86 and later) takes as the payload hash it signs; and
 * "x-amz-security-token" for temporary credentials. libcurl 7.88 signs the
 * path and query exactly as given, so both are written here already in
 * SigV4's canonical form: each byte but A-Z a-z 0-9 - _ . ~ percent-encoded
 * (and '/' in the key's path), query parameters sorted by name.
 *
 * XML (error bodies, listing pages) is parsed with libxml2, bounded: an
 * error body is at most WDS__HTTP_ERROR_BODY bytes, a listing page at most
 * WDS__S3_PAGE_MAX; no network access, no entity substitution, nothing
 * printed. libxml2 is loaded on first use (xml_dl.h): without it an error
 * message lacks S3's <Code>, and a listing fails naming libxml2. */
#include "s3.h"

#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WDS_HAVE_XML2
#include "xml_dl.h" /* libxml2's functions, loaded on first use */
#endif

#include "base/strbuf.h"
#include "base/url.h"

#define WDS__S3_DEFAULT_REGION "us-east-1"
/* A real page is at most 1,000 keys of at most 1 KiB each and their
 * metadata (a few MB); libxml2's tree of it is a few times larger. */
#define WDS__S3_PAGE_MAX ((size_t)16 << 20)
#define WDS__S3_MAX_PAGES 1000000

static const char *env_nonempty(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

void wds__s3_env_get(wds__s3_env *env) {
  memset(env, 0, sizeof *env);
  env->key_id = env_nonempty("AWS_ACCESS_KEY_ID");
  env->secret = env_nonempty("AWS_SECRET_ACCESS_KEY");
  env->token = env_nonempty("AWS_SESSION_TOKEN");
  env->region = env_nonempty("AWS_REGION");
  if (!env->region)
    env->region = env_nonempty("AWS_DEFAULT_REGION");
  /* The service-specific variable wins, as in the AWS CLI. */
  static const char *const vars[] = {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"};
  for (size_t i = 0; i < 2 && !env->endpoint; i++)
    if ((env->endpoint = env_nonempty(vars[i])) != NULL)
      env->endpoint_var = vars[i];
}

int wds__s3_is_url(const char *url) { return strncmp(url, "s3://", 5) == 0; }

int wds__s3_is_listing(const char *url) {
  if (!wds__s3_is_url(url))
    return 0;
  const char *key = strchr(url + 5, '/');
  if (!key || !key[1])
    return 1; /* s3://bucket or s3://bucket/: the whole bucket */
  key++;
  return strpbrk(key, "*?[") != NULL || key[strlen(key) - 1] == '/';
}

/* ---- URLs ---- */

/* SigV4's URI encoding; keep_slash for a key in the path. */
static void sb_enc(wds__sbuf *b, const char *s, int keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
        (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
        c == '~' || (keep_slash && c == '/')) {
      wds__sb_putn(b, (const char *)p, 1);
    } else {
      char e[3] = {'%', hex[c >> 4], hex[c & 15]};
      wds__sb_putn(b, e, 3);
    }
  }
}

/* Splits s3://BUCKET[/KEY] (KEY may be empty). */
static int split_url(const char *url, char **bucket, const char **key,
                     wds__err *err) {
  const char *b = url + 5, *slash = strchr(b, '/');
  size_t n = slash ? (size_t)(slash - b) : strlen(b);
  *bucket = NULL;
  *key = slash ? slash + 1 : b + n;
  if (n == 0)
    return wds__fail(err, WDS_ERR_OPEN,
                     "%.300s names no bucket (s3://BUCKET/KEY)", url);
  for (size_t i = 0; i < n; i++) {
    char c = b[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'))
      return wds__fail(err, WDS_ERR_OPEN,
                       "%.300s: the bucket name has a character S3 does not "
                       "allow (letters, digits, '-', '.', '_')",
                       url);
  }
  if (!(*bucket = strndup(b, n)))
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  return WDS_OK;
}

/* A bucket name that can be a DNS label of a TLS host name. */
static int virtual_host_ok(const char *bucket) {
  size_t n = strlen(bucket);
  if (n < 3 || n > 63 || bucket[0] == '-' || bucket[n - 1] == '-')
    return 0;
  for (const char *p = bucket; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
      return 0; /* '.' breaks the certificate's wildcard */
  return 1;
}

static int region_of(const wds__s3_env *env, char *region, size_t size,
                     wds__err *err) {
  const char *r = env->region ? env->region : WDS__S3_DEFAULT_REGION;
  size_t n = strlen(r);
  if (n >= size || n >= 64)
    return wds__fail(err, WDS_ERR_OPEN,
                     "the AWS region \"%.64s...\" is too long", r);
  for (const char *p = r; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
      return wds__fail(err, WDS_ERR_OPEN,
                       "the AWS region \"%.64s\" (AWS_REGION or "
                       "AWS_DEFAULT_REGION) is not a region name (lower-case "
                       "letters, digits, '-')",
                       r);
  memcpy(region, r, n + 1);
  return WDS_OK;
}

/* The request URL for bucket and key (NULL: the bucket itself, for a
 * listing) with an optional query, already canonical. */
static int build_url(const wds__s3_env *env, const char *bucket,
                     const char *key, const char *query, const char *region,
                     char **out, wds__err *err) {
  wds__sbuf b = {0};
  *out = NULL;
  if (env->endpoint) {
    const char *e = env->endpoint;
    char red[WDS__URL_REDACT_MAX]; /* e in messages: without its secrets */
    if (strncmp(e, "http://", 7) != 0 && strncmp(e, "https://", 8) != 0)
      return wds__fail(err, WDS_ERR_OPEN,
                       "%s=\"%.200s\" is not an http:// or https:// URL",
                       env->endpoint_var, wds__url_redact(e, red, sizeof red));
    size_t n = strlen(e);
    while (n > 0 && e[n - 1] == '/')
      n--;
    if (memchr(e, '?', n) || memchr(e, '#', n) || memchr(e, ' ', n))
      return wds__fail(err, WDS_ERR_OPEN,
                       "%s=\"%.200s\" has a query, fragment or space",
                       env->endpoint_var, wds__url_redact(e, red, sizeof red));
    wds__sb_putn(&b, e, n);
    wds__sb_puts(&b, "/");
    wds__sb_puts(&b, bucket); /* path style */
    if (key) {
      wds__sb_puts(&b, "/");
      sb_enc(&b, key, 1);
    }
  } else {
    if (virtual_host_ok(bucket)) {
      wds__sb_puts(&b, "https://");
      wds__sb_puts(&b, bucket);
      wds__sb_puts(&b, ".s3.");
      wds__sb_puts(&b, region);
      wds__sb_puts(&b, ".amazonaws.com/");
    } else {
      wds__sb_puts(&b, "https://s3.");
      wds__sb_puts(&b, region);
      wds__sb_puts(&b, ".amazonaws.com/");
      wds__sb_puts(&b, bucket);
      if (key)
        wds__sb_puts(&b, "/");
    }
    if (key)
      sb_enc(&b, key, 1);
  }
  if (query) {
    wds__sb_puts(&b, "?");
    wds__sb_puts(&b, query);
  }
  if (b.oom) {
    free(b.p);
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  }
  *out = b.p;
  return WDS_OK;
}

int wds__s3_request_url(const char *url, const wds__s3_env *env,
                        char **http_url, char *region, size_t region_size,
                        wds__err *err) {
  char *bucket = NULL;
  const char *key;
  *http_url = NULL;
  if (!wds__s3_is_url(url))
    return wds__fail(err, WDS_ERR_OPEN, "not an s3:// URL: %.300s", url);
  int rc = split_url(url, &bucket, &key, err);
  if (rc == WDS_OK && !*key)
    rc = wds__fail(err, WDS_ERR_OPEN,
                   "%.300s names no object (s3://BUCKET/KEY; a listing needs "
                   "a glob or a prefix ending in '/' in a spec)",
                   url);
  if (rc == WDS_OK)
    rc = region_of(env, region, region_size, err);
  if (rc == WDS_OK)
    rc = build_url(env, bucket, key, NULL, region, http_url, err);
  free(bucket);
  return rc;
}

/* ---- signed requests ---- */

#ifndef WDS_HAVE_CURL

int wds__s3_open(const char *url, const wds__io_opts *opts, wds__http **out,
                 wds__err *err) {
  (void)opts;
  *out = NULL;
  return wds__fail(err, WDS_ERR_OPEN,
                   "cannot open %.300s: this wds was built without libcurl, "
                   "so s3:// is not supported",
                   url);
}

#else

/* The request's signing parts; userpwd holds the secret. */
typedef struct signing {
  char region[64];
  char sigv4[96];
  char *userpwd;
  char *token_header;
} signing;

static void signing_free(signing *g) {
  if (g->userpwd) {
    explicit_bzero(g->userpwd, strlen(g->userpwd));
    free(g->userpwd);
  }
  if (g->token_header) { /* holds the session token */
    explicit_bzero(g->token_header, strlen(g->token_header));
    free(g->token_header);
  }
  memset(g, 0, sizeof *g);
}

static int signing_make(const char *url, const wds__s3_env *env, signing *g,
                        wds__err *err) {
  memset(g, 0, sizeof *g);
  if (!env->key_id || !env->secret)
    return wds__fail(
        err, WDS_ERR_OPEN,
        "cannot read %.300s: no AWS credentials (%s not set; set "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and AWS_SESSION_TOKEN "
        "for temporary credentials)",
        url,
        !env->key_id && !env->secret ? "AWS_ACCESS_KEY_ID and "
                                       "AWS_SECRET_ACCESS_KEY are"
        : !env->key_id               ? "AWS_ACCESS_KEY_ID is"
                                     : "AWS_SECRET_ACCESS_KEY is");
  if (strchr(env->key_id, ':') || strpbrk(env->key_id, "\r\n"))
    return wds__fail(err, WDS_ERR_OPEN,
                     "AWS_ACCESS_KEY_ID has a ':' or a line break");
  if (env->token && strpbrk(env->token, "\r\n"))
    return wds__fail(err, WDS_ERR_OPEN, "AWS_SESSION_TOKEN has a line break");
  int rc = region_of(env, g->region, sizeof g->region, err);
  if (rc != WDS_OK)
    return rc;
  snprintf(g->sigv4, sizeof g->sigv4, "aws:amz:%s:s3", g->region);
  size_t kn = strlen(env->key_id), sn = strlen(env->secret);
  if (!(g->userpwd = malloc(kn + sn + 2)))
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  memcpy(g->userpwd, env->key_id, kn);
  g->userpwd[kn] = ':';
  memcpy(g->userpwd + kn + 1, env->secret, sn + 1);
  if (env->token) {
    static const char h[] = "x-amz-security-token: ";
    size_t tn = strlen(env->token);
    if (!(g->token_header = malloc(sizeof h + tn))) {
      signing_free(g);
      return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
    }
    memcpy(g->token_header, h, sizeof h - 1);
    memcpy(g->token_header + sizeof h - 1, env->token, tn + 1);
  }
  return WDS_OK;
}

static int open_signed(const char *http_url, const signing *g,
                       const wds__io_opts *opts, wds__http **out,
                       wds__err *err) {
  wds__http_req req = {
      .url = http_url,
      .aws_sigv4 = g->sigv4,
      .userpwd = g->userpwd,
      .headers = {"x-amz-content-sha256: UNSIGNED-PAYLOAD", g->token_header},
      .error_detail = wds__s3_error_detail,
  };
  return wds__http_open_req(&req, opts, out, err);
}

int wds__s3_open(const char *url, const wds__io_opts *opts, wds__http **out,
                 wds__err *err) {
  wds__s3_env env;
  signing g;
  char *http_url = NULL;
  *out = NULL;
  wds__s3_env_get(&env);
  int rc = signing_make(url, &env, &g, err);
  if (rc != WDS_OK)
    return rc;
  char region[64];
  rc = wds__s3_request_url(url, &env, &http_url, region, sizeof region, err);
  if (rc == WDS_OK)
    rc = open_signed(http_url, &g, opts, out, err);
  free(http_url);
  signing_free(&g);
  return rc;
}

#endif

/* ---- XML ---- */

#ifdef WDS_HAVE_XML2

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;
static void xml_init(void) { xmlInitParser(); }

static xmlDocPtr xml_read(const char *xml, size_t n) {
  pthread_once(&xml_once, xml_init);
  if (n > (size_t)INT32_MAX)
    return NULL;
  return xmlReadMemory(xml, (int)n, NULL, NULL,
                       XML_PARSE_NONET | XML_PARSE_NOERROR |
                           XML_PARSE_NOWARNING | XML_PARSE_NOCDATA);
}

static int is_elem(xmlNodePtr x, const char *name) {
  return x->type == XML_ELEMENT_NODE &&
         strcmp((const char *)x->name, name) == 0;
}

/* The text of x's first child element named name, or NULL (xmlFree it). */
static xmlChar *child_text(xmlNodePtr x, const char *name) {
  for (xmlNodePtr c = x->children; c; c = c->next)
    if (is_elem(c, name))
      return xmlNodeGetContent(c);
  return NULL;
}

/* Copies text, control characters as '?', at most max bytes. */
static void copy_clean(char *out, size_t size, const char *s, size_t max) {
  size_t o = 0;
  for (; s && *s && o + 1 < size && o < max; s++)
    out[o++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
  out[o] = '\0';
}

void wds__s3_error_detail(const char *body, size_t n, char *out, size_t size) {
  if (!size)
    return;
  out[0] = '\0';
  xmlDocPtr d = xml_read(body, n);
  xmlNodePtr root = d ? xmlDocGetRootElement(d) : NULL;
  if (root && is_elem(root, "Error")) {
    xmlChar *code = child_text(root, "Code");
    xmlChar *msg = child_text(root, "Message");
    if (code && *code) {
      char c[80], m[240];
      copy_clean(c, sizeof c, (const char *)code, sizeof c - 1);
      copy_clean(m, sizeof m, (const char *)msg, sizeof m - 1);
      if (m[0])
        snprintf(out, size, "S3 error %s (%s)", c, m);
      else
        snprintf(out, size, "S3 error %s", c);
    }
    xmlFree(code);
    xmlFree(msg);
  }
  xmlFreeDoc(d);
}

int wds__s3_parse_listing(const char *xml, size_t n,
                          int (*add_key)(void *ud, const char *key), void *ud,
                          int *truncated, char **next, wds__err *err) {
  *truncated = 0;
  *next = NULL;
  xmlDocPtr d = xml_read(xml, n);
  if (!d && *wds__xml_dl_error())
    return wds__fail(err, WDS_ERR_OPEN, "s3:// listings need libxml2: %s",
                     wds__xml_dl_error());
  xmlNodePtr root = d ? xmlDocGetRootElement(d) : NULL;
  if (!root || !is_elem(root, "ListBucketResult")) {
    xmlFreeDoc(d);
    return wds__fail(err, WDS_ERR_IO,
                     "the listing is not a ListObjectsV2 answer "
                     "(no <ListBucketResult>)");
  }
  int rc = WDS_OK;
  for (xmlNodePtr c = root->children; c && rc == WDS_OK; c = c->next) {
    if (is_elem(c, "Contents")) {
      xmlChar *key = child_text(c, "Key");
      if (!key)
        rc = wds__fail(err, WDS_ERR_IO,
                       "the listing has <Contents> without "
                       "<Key>");
      else if (*key)
        rc = add_key(ud, (const char *)key);
      xmlFree(key);
    } else if (is_elem(c, "IsTruncated")) {
      xmlChar *t = xmlNodeGetContent(c);
      *truncated = t && strcmp((const char *)t, "true") == 0;
      xmlFree(t);
    } else if (is_elem(c, "NextContinuationToken")) {
      xmlChar *t = xmlNodeGetContent(c);
      free(*next);
      *next = t ? strdup((const char *)t) : NULL;
      if (t && !*next)
        rc = wds__fail(err, WDS_ERR_NOMEM, "out of memory");
      xmlFree(t);
    }
  }
  xmlFreeDoc(d);
  if (rc != WDS_OK) {
    free(*next);
    *next = NULL;
  }
  return rc;
}

#else

void wds__s3_error_detail(const char *body, size_t n, char *out, size_t size) {
  (void)body;
  (void)n;
  if (size)
    out[0] = '\0';
}

int wds__s3_parse_listing(const char *xml, size_t n,
                          int (*add_key)(void *ud, const char *key), void *ud,
                          int *truncated, char **next, wds__err *err) {
  (void)xml;
  (void)n;
  (void)add_key;
  (void)ud;
  *truncated = 0;
  *next = NULL;
  return wds__fail(err, WDS_ERR_OPEN,
                   "this wds was built without libxml2 (libxml2-dev), so "
                   "s3:// listings are not supported");
}

#endif

/* ---- listings ---- */

typedef struct keys {
  char **v;
  size_t n, cap;
  size_t listed;
  const char *pattern; /* fnmatch pattern, or NULL: a prefix listing */
  const char *prefix;
  size_t bucket_len;
  const wds__s3_room *room; /* NULL: no bound but memory */
  uint64_t bytes;           /* of the URLs the kept keys make */
  wds__err *err;
} keys;

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

#if defined(WDS_HAVE_CURL)

/* The extensions a prefix listing takes as shards: what the reader opens
 * (stream.c sniffs the compression). */
static int is_shard_name(const char *key) {
  static const char *const ext[] = {
      ".tar",      ".tar.gz",   ".tgz",     ".tar.zst", ".tzst",
      ".tar.zstd", ".tar.xz",   ".txz",     ".tar.bz2", ".tbz2",
      ".tbz",      ".tar.lzma", ".tar.lz4", ".tar.Z"};
  size_t n = strlen(key);
  for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
    size_t k = strlen(ext[i]);
    if (n > k && strcmp(key + n - k, ext[i]) == 0 && key[n - k - 1] != '/')
      return 1;
  }
  return 0;
}

static int keys_add(void *ud, const char *key) {
  keys *k = ud;
  k->listed++;
  if (strncmp(key, k->prefix, strlen(k->prefix)) != 0)
    return WDS_OK; /* not asked for */
  if (k->pattern ? fnmatch(k->pattern, key, FNM_PATHNAME) != 0
                 : !is_shard_name(key))
    return WDS_OK;
  /* Bounded while listing, not after: a bucket of millions of keys, or an
   * endpoint that never stops paging, must not hold them all first. */
  uint64_t per_url = 5 + (uint64_t)k->bucket_len + 1 + strlen(key) + 1 +
                     sizeof(char *); /* as the caller counts URL bytes */
  if (k->room && k->n >= k->room->urls)
    return wds__fail(k->err, WDS_ERR_LIMIT,
                     "the listing makes more than %zu URLs, over the limit",
                     k->room->max_urls);
  if (k->room && per_url > k->room->bytes - k->bytes)
    return wds__fail(k->err, WDS_ERR_LIMIT,
                     "the listing makes more than %llu bytes of URLs, over "
                     "the limit",
                     (unsigned long long)k->room->max_bytes);
  k->bytes += per_url;
  if (k->n == k->cap) {
    size_t cap = k->cap ? k->cap * 2 : 64;
    char **v = realloc(k->v, cap * sizeof *v);
    if (!v)
      return wds__fail(k->err, WDS_ERR_NOMEM, "out of memory");
    k->v = v;
    k->cap = cap;
  }
  if (!(k->v[k->n] = strdup(key)))
    return wds__fail(k->err, WDS_ERR_NOMEM, "out of memory");
  k->n++;
  return WDS_OK;
}

/* Reads a whole listing page (at most WDS__S3_PAGE_MAX bytes). */
static int read_page(wds__http *h, wds__sbuf *page, wds__err *err) {
  char chunk[65536];
  page->n = 0;
  for (;;) {
    ssize_t r = wds__http_read(h, chunk, sizeof chunk, err);
    if (r < 0)
      return (int)r;
    if (r == 0)
      break;
    if (page->n + (size_t)r > WDS__S3_PAGE_MAX)
      return wds__fail(err, WDS_ERR_LIMIT,
                       "a listing page is larger than %zu bytes",
                       WDS__S3_PAGE_MAX);
    wds__sb_putn(page, chunk, (size_t)r);
    if (page->oom)
      return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  }
  return WDS_OK;
}

static int list_pages(const char *url, const char *bucket, keys *k,
                      const wds__io_opts *opts, wds__err *err) {
  wds__s3_env env;
  signing g;
  wds__s3_env_get(&env);
  int rc = signing_make(url, &env, &g, err);
  if (rc != WDS_OK)
    return rc;
  char *token = NULL, *name = NULL;
  wds__sbuf page = {0};
  char red[WDS__URL_REDACT_MAX];
  const char *shown = wds__url_redact(url, red, sizeof red);
  size_t nlen = strlen(shown) + 32;
  if (!(name = malloc(nlen))) {
    signing_free(&g);
    return wds__fail(err, WDS_ERR_NOMEM, "out of memory");
  }
  snprintf(name, nlen, "%s (ListObjectsV2)", shown);
  for (long pages = 0; rc == WDS_OK; pages++) {
    if (opts && wds__cancelled(opts->cancel)) {
      rc = wds__fail(err, WDS_ERR_CANCELLED, "%s: cancelled", name);
      break;
    }
    if (pages >= WDS__S3_MAX_PAGES) {
      rc = wds__fail(err, WDS_ERR_LIMIT, "more than %d listing pages",
                     WDS__S3_MAX_PAGES); /* the caller names the URL */
      break;
    }
    /* The query in canonical order: parameters sorted by name. */
    wds__sbuf q = {0};
    if (token) {
      wds__sb_puts(&q, "continuation-token=");
      sb_enc(&q, token, 0);
      wds__sb_puts(&q, "&");
    }
    wds__sb_puts(&q, "list-type=2&prefix=");
    sb_enc(&q, k->prefix, 0);
    char *http_url = NULL;
    if (q.oom)
      rc = wds__fail(err, WDS_ERR_NOMEM, "out of memory");
    else
      rc = build_url(&env, bucket, NULL, q.p, g.region, &http_url, err);
    free(q.p);
    wds__http *h = NULL;
    if (rc == WDS_OK)
      rc = open_signed(http_url, &g, opts, &h, err);
    free(http_url);
    if (rc == WDS_OK)
      rc = read_page(h, &page, err);
    wds__http_close(h);
    if (rc != WDS_OK) {
      wds__err_prefix(err, "%s", name); /* http.c names no URL */
      break;
    }
    int truncated = 0;
    char *next = NULL;
    rc = wds__s3_parse_listing(page.p ? page.p : "", page.n, keys_add, k,
                               &truncated, &next, err);
    if (rc != WDS_OK) {
      if (rc != WDS_ERR_LIMIT) /* keys_add's limits: the caller names it */
        wds__err_prefix(err, "%s", name);
      break;
    }
    if (!truncated) {
      free(next);
      break;
    }
    if (!next || !*next || (token && strcmp(next, token) == 0)) {
      free(next);
      rc = wds__fail(err, WDS_ERR_IO,
                     "%s: a truncated listing page without a new "
                     "NextContinuationToken",
                     name);
      break;
    }
    free(token);
    token = next;
  }
  free(token);
  free(page.p);
  free(name);
  signing_free(&g);
  return rc;
}

#else

static int list_pages(const char *url, const char *bucket, keys *k,
                      const wds__io_opts *opts, wds__err *err) {
  (void)bucket;
  (void)k;
  (void)opts;
  return wds__fail(err, WDS_ERR_OPEN,
                   "cannot list %.300s: this wds was built without libcurl, "
                   "so s3:// is not supported",
                   url);
}

#endif

int wds__s3_list(const char *url, const wds__io_opts *opts,
                 const wds__s3_room *room,
                 int (*add)(void *ud, const char *url), void *ud,
                 wds__err *err) {
  char *bucket = NULL, *prefix = NULL;
  const char *key;
  keys k = {.err = err, .room = room};
  wds__sbuf out = {0};
  int rc = split_url(url, &bucket, &key, err);
  if (rc != WDS_OK)
    return rc;
  const char *glob = strpbrk(key, "*?[");
  size_t plen = glob ? (size_t)(glob - key) : strlen(key);
  if (!(prefix = strndup(key, plen))) {
    rc = wds__fail(err, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  k.prefix = prefix;
  k.pattern = glob ? key : NULL;
  k.bucket_len = strlen(bucket);
  rc = list_pages(url, bucket, &k, opts, err);
  if (rc != WDS_OK)
    goto done;
  if (k.n == 0) {
    if (glob)
      rc = wds__fail(err, WDS_ERR_SPEC,
                     "no object matches %.300s (%zu listed under the prefix "
                     "\"%.300s\")",
                     url, k.listed, prefix);
    else
      rc = wds__fail(err, WDS_ERR_SPEC,
                     "no shard (.tar, .tar.gz, .tgz, .tar.zst, .tar.xz, "
                     ".tar.bz2, ...) under %.300s (%zu objects listed)",
                     url, k.listed);
    goto done;
  }
  qsort(k.v, k.n, sizeof *k.v, cmp_str);
  for (size_t i = 0; i < k.n && rc == WDS_OK; i++) {
    if (i > 0 && strcmp(k.v[i], k.v[i - 1]) == 0)
      continue;
    out.n = 0;
    wds__sb_puts(&out, "s3://");
    wds__sb_puts(&out, bucket);
    wds__sb_puts(&out, "/");
    wds__sb_puts(&out, k.v[i]);
    rc = out.oom ? wds__fail(err, WDS_ERR_NOMEM, "out of memory")
                 : add(ud, out.p);
  }
done:
  for (size_t i = 0; i < k.n; i++)
    free(k.v[i]);
  free(k.v);
  free(out.p);
  free(prefix);
  free(bucket);
  return rc;
}
