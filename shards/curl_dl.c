/* curl_dl.c — libcurl loaded on first use (see curl_dl.h). */
#ifdef WDS_HAVE_CURL
#include "shards/curl_dl.h"
#include "shards/dl.h"

#include <stdarg.h>
#include <stdio.h>

/* The functions shards/http.c calls, looked up once. */
static struct {
  CURLcode (*global_init)(long);
  CURL *(*easy_init)(void);
  void (*easy_cleanup)(CURL *);
  void (*easy_reset)(CURL *);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  CURLcode (*easy_pause)(CURL *, int);
  const char *(*easy_strerror)(CURLcode);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_cleanup)(CURLM *);
  CURLMcode (*multi_add_handle)(CURLM *, CURL *);
  CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
  CURLMcode (*multi_perform)(CURLM *, int *);
  CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd[], unsigned int, int,
                          int *);
  CURLMsg *(*multi_info_read)(CURLM *, int *);
  const char *(*multi_strerror)(CURLMcode);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  time_t (*getdate)(const char *, const time_t *);
  curl_version_info_data *(*version_info)(CURLversion);
} fn;

/* The symbols alone do not say which options work: an older libcurl has
 * them all but refuses CURLOPT_PROTOCOLS_STR or signs S3 requests
 * differently. */
static int check(wds__dl_lib *l, void *handle) {
  (void)handle;
  curl_version_info_data *v = fn.version_info(CURLVERSION_NOW);
  if (v && v->version_num >= WDS__CURL_MIN_VERSION_NUM)
    return 1;
  char found[256];
  snprintf(found, sizeof found, "libcurl %s",
           v && v->version ? v->version : "(unknown version)");
  return wds__dl_too_old(l, found);
}

/* libcurl's ABI has been .so.4 since 2006; the unversioned name is a
 * development link, tried last. */
static const char *const sonames[] = {"libcurl.so.4", "libcurl.so", NULL};
static const wds__dl_sym syms[] = {
#define F(name)                                                                \
  { "curl_" #name, (void **)&fn.name }
    F(global_init),    F(easy_init),        F(easy_cleanup),
    F(easy_reset),     F(easy_setopt),      F(easy_getinfo),
    F(easy_pause),     F(easy_strerror),    F(multi_init),
    F(multi_cleanup),  F(multi_add_handle), F(multi_remove_handle),
    F(multi_perform),  F(multi_poll),       F(multi_info_read),
    F(multi_strerror), F(slist_append),     F(slist_free_all),
    F(getdate),        F(version_info),
#undef F
};

static wds__dl_lib lib = WDS__DL_LIB(
    "libcurl", sonames, syms, WDS__CURL_MIN_VERSION, LIBCURL_VERSION, check);

const char *wds__curl_dl_error(void) { return wds__dl_error(&lib); }

/* Only curl_global_init can see libcurl missing: http.c calls it first and
 * calls nothing else when it fails. The others are not reached then; they
 * still fail safely. */
CURLcode wds__curl_global_init(long flags) {
  return wds__dl_ready(&lib) ? fn.global_init(flags) : CURLE_FAILED_INIT;
}

CURL *wds__curl_easy_init(void) {
  return wds__dl_ready(&lib) ? fn.easy_init() : NULL;
}

void wds__curl_easy_cleanup(CURL *h) {
  if (wds__dl_ready(&lib))
    fn.easy_cleanup(h);
}

void wds__curl_easy_reset(CURL *h) {
  if (wds__dl_ready(&lib))
    fn.easy_reset(h);
}

/* The argument's type follows from the option's number (curl.h's
 * CURLOPTTYPE_* ranges). */
CURLcode wds__curl_easy_setopt(CURL *h, CURLoption opt, ...) {
  if (!wds__dl_ready(&lib))
    return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, opt);
  CURLcode rc;
  if (opt < CURLOPTTYPE_OBJECTPOINT) {
    long v = va_arg(ap, long);
    rc = fn.easy_setopt(h, opt, v);
  } else if (opt < CURLOPTTYPE_FUNCTIONPOINT) {
    void *v = va_arg(ap, void *);
    rc = fn.easy_setopt(h, opt, v);
  } else if (opt < CURLOPTTYPE_OFF_T) {
    void (*v)(void) = va_arg(ap, void (*)(void));
    rc = fn.easy_setopt(h, opt, v);
  } else if (opt < CURLOPTTYPE_BLOB) {
    curl_off_t v = va_arg(ap, curl_off_t);
    rc = fn.easy_setopt(h, opt, v);
  } else {
    void *v = va_arg(ap, void *);
    rc = fn.easy_setopt(h, opt, v);
  }
  va_end(ap);
  return rc;
}

/* Every CURLINFO takes a pointer to the result. */
CURLcode wds__curl_easy_getinfo(CURL *h, CURLINFO info, ...) {
  if (!wds__dl_ready(&lib))
    return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, info);
  void *p = va_arg(ap, void *);
  va_end(ap);
  return fn.easy_getinfo(h, info, p);
}

CURLcode wds__curl_easy_pause(CURL *h, int bitmask) {
  return wds__dl_ready(&lib) ? fn.easy_pause(h, bitmask) : CURLE_FAILED_INIT;
}

const char *wds__curl_easy_strerror(CURLcode code) {
  return wds__dl_ready(&lib) ? fn.easy_strerror(code) : lib.error;
}

CURLM *wds__curl_multi_init(void) {
  return wds__dl_ready(&lib) ? fn.multi_init() : NULL;
}

CURLMcode wds__curl_multi_cleanup(CURLM *m) {
  return wds__dl_ready(&lib) ? fn.multi_cleanup(m) : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_add_handle(CURLM *m, CURL *h) {
  return wds__dl_ready(&lib) ? fn.multi_add_handle(m, h) : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_remove_handle(CURLM *m, CURL *h) {
  return wds__dl_ready(&lib) ? fn.multi_remove_handle(m, h)
                             : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_perform(CURLM *m, int *running) {
  return wds__dl_ready(&lib) ? fn.multi_perform(m, running)
                             : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_poll(CURLM *m, struct curl_waitfd extra[],
                               unsigned int n, int timeout_ms, int *numfds) {
  return wds__dl_ready(&lib) ? fn.multi_poll(m, extra, n, timeout_ms, numfds)
                             : CURLM_INTERNAL_ERROR;
}

CURLMsg *wds__curl_multi_info_read(CURLM *m, int *left) {
  return wds__dl_ready(&lib) ? fn.multi_info_read(m, left) : NULL;
}

const char *wds__curl_multi_strerror(CURLMcode code) {
  return wds__dl_ready(&lib) ? fn.multi_strerror(code) : lib.error;
}

struct curl_slist *wds__curl_slist_append(struct curl_slist *l, const char *s) {
  return wds__dl_ready(&lib) ? fn.slist_append(l, s) : NULL;
}

void wds__curl_slist_free_all(struct curl_slist *l) {
  if (wds__dl_ready(&lib))
    fn.slist_free_all(l);
}

time_t wds__curl_getdate(const char *p, const time_t *unused) {
  return wds__dl_ready(&lib) ? fn.getdate(p, unused) : (time_t)-1;
}

#else
typedef int wds__no_curl; /* built without libcurl: nothing here */
#endif
