/* curl_dl.c — libcurl loaded on first use (see curl_dl.h). */
#ifdef WDS_HAVE_CURL
#include "shards/curl_dl.h"
#include "shards/dl.h"

#include <dlfcn.h>
#include <pthread.h>
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

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char load_error[512];

static void load(void) {
  /* libcurl's ABI has been .so.4 since 2006; the unversioned name is a
   * development link, tried last. */
  static const char *const sonames[] = {"libcurl.so.4", "libcurl.so", NULL};
  static const wds__dl_sym t[] = {
#define F(name) {"curl_" #name, (void **)&fn.name}
      F(global_init),    F(easy_init),        F(easy_cleanup),
      F(easy_reset),     F(easy_setopt),      F(easy_getinfo),
      F(easy_pause),     F(easy_strerror),    F(multi_init),
      F(multi_cleanup),  F(multi_add_handle), F(multi_remove_handle),
      F(multi_perform),  F(multi_poll),       F(multi_info_read),
      F(multi_strerror), F(slist_append),     F(slist_free_all),
      F(getdate),        F(version_info),
#undef F
  };
  void *h = wds__dl_open("libcurl", sonames, t, sizeof t / sizeof t[0],
                         WDS__CURL_MIN_VERSION, load_error, sizeof load_error);
  if (!h)
    return;
  /* The symbols alone do not say which options work: an older libcurl has
   * them all but refuses CURLOPT_PROTOCOLS_STR or signs S3 requests
   * differently. */
  curl_version_info_data *v = fn.version_info(CURLVERSION_NOW);
  if (!v || v->version_num < WDS__CURL_MIN_VERSION_NUM) {
    snprintf(load_error, sizeof load_error,
             "cannot use libcurl %s: libcurl %s or later is needed (wds was "
             "built against %s)",
             v && v->version ? v->version : "(unknown version)",
             WDS__CURL_MIN_VERSION, LIBCURL_VERSION);
    dlclose(h);
    return;
  }
  loaded = 1; /* the library stays loaded for the process */
}

static int ready(void) {
  pthread_once(&once, load);
  return loaded;
}

const char *wds__curl_dl_error(void) {
  pthread_once(&once, load);
  return load_error;
}

/* Only curl_global_init can see libcurl missing: http.c calls it first and
 * calls nothing else when it fails. The others are not reached then; they
 * still fail safely. */
CURLcode wds__curl_global_init(long flags) {
  return ready() ? fn.global_init(flags) : CURLE_FAILED_INIT;
}

CURL *wds__curl_easy_init(void) { return ready() ? fn.easy_init() : NULL; }

void wds__curl_easy_cleanup(CURL *h) {
  if (ready())
    fn.easy_cleanup(h);
}

void wds__curl_easy_reset(CURL *h) {
  if (ready())
    fn.easy_reset(h);
}

/* The argument's type follows from the option's number (curl.h's
 * CURLOPTTYPE_* ranges). */
CURLcode wds__curl_easy_setopt(CURL *h, CURLoption opt, ...) {
  if (!ready())
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
  if (!ready())
    return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, info);
  void *p = va_arg(ap, void *);
  va_end(ap);
  return fn.easy_getinfo(h, info, p);
}

CURLcode wds__curl_easy_pause(CURL *h, int bitmask) {
  return ready() ? fn.easy_pause(h, bitmask) : CURLE_FAILED_INIT;
}

const char *wds__curl_easy_strerror(CURLcode code) {
  return ready() ? fn.easy_strerror(code) : load_error;
}

CURLM *wds__curl_multi_init(void) { return ready() ? fn.multi_init() : NULL; }

CURLMcode wds__curl_multi_cleanup(CURLM *m) {
  return ready() ? fn.multi_cleanup(m) : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_add_handle(CURLM *m, CURL *h) {
  return ready() ? fn.multi_add_handle(m, h) : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_remove_handle(CURLM *m, CURL *h) {
  return ready() ? fn.multi_remove_handle(m, h) : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_perform(CURLM *m, int *running) {
  return ready() ? fn.multi_perform(m, running) : CURLM_INTERNAL_ERROR;
}

CURLMcode wds__curl_multi_poll(CURLM *m, struct curl_waitfd extra[],
                               unsigned int n, int timeout_ms, int *numfds) {
  return ready() ? fn.multi_poll(m, extra, n, timeout_ms, numfds)
                 : CURLM_INTERNAL_ERROR;
}

CURLMsg *wds__curl_multi_info_read(CURLM *m, int *left) {
  return ready() ? fn.multi_info_read(m, left) : NULL;
}

const char *wds__curl_multi_strerror(CURLMcode code) {
  return ready() ? fn.multi_strerror(code) : load_error;
}

struct curl_slist *wds__curl_slist_append(struct curl_slist *l, const char *s) {
  return ready() ? fn.slist_append(l, s) : NULL;
}

void wds__curl_slist_free_all(struct curl_slist *l) {
  if (ready())
    fn.slist_free_all(l);
}

time_t wds__curl_getdate(const char *p, const time_t *unused) {
  return ready() ? fn.getdate(p, unused) : (time_t)-1;
}

#else
typedef int wds__no_curl; /* built without libcurl: nothing here */
#endif
