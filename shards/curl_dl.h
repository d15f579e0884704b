/* curl_dl.h — libcurl loaded on first use. Internal to wds.
 *
 * wds is not linked against libcurl: its ~20 shared objects (TLS, Kerberos,
 * LDAP, SSH, IDN...) and their relocations cost a local run several
 * milliseconds of start-up (docs/performance.md, "Start-up"). shards/http.c
 * includes this after <curl/curl.h>: every libcurl function it calls goes
 * to a wrapper (curl_dl.c) that loads libcurl.so.4 with dlopen the first
 * time any is called, so only processes that open an http(s):// or s3://
 * shard load it. When it cannot be loaded, curl_global_init fails and
 * wds__curl_dl_error() says why. */
#ifndef WDS_SHARDS_CURL_DL_H
#define WDS_SHARDS_CURL_DL_H

#include <curl/curl.h>

/* Why libcurl could not be loaded ("" when it was, or was not tried). */
const char *wds__curl_dl_error(void);

CURLcode wds__curl_global_init(long flags);
CURL *wds__curl_easy_init(void);
void wds__curl_easy_cleanup(CURL *h);
void wds__curl_easy_reset(CURL *h);
CURLcode wds__curl_easy_setopt(CURL *h, CURLoption opt, ...);
CURLcode wds__curl_easy_getinfo(CURL *h, CURLINFO info, ...);
CURLcode wds__curl_easy_pause(CURL *h, int bitmask);
const char *wds__curl_easy_strerror(CURLcode code);
CURLM *wds__curl_multi_init(void);
CURLMcode wds__curl_multi_cleanup(CURLM *m);
CURLMcode wds__curl_multi_add_handle(CURLM *m, CURL *h);
CURLMcode wds__curl_multi_remove_handle(CURLM *m, CURL *h);
CURLMcode wds__curl_multi_perform(CURLM *m, int *running);
CURLMcode wds__curl_multi_poll(CURLM *m, struct curl_waitfd extra[],
                               unsigned int n, int timeout_ms, int *numfds);
CURLMsg *wds__curl_multi_info_read(CURLM *m, int *left);
const char *wds__curl_multi_strerror(CURLMcode code);
struct curl_slist *wds__curl_slist_append(struct curl_slist *l, const char *s);
void wds__curl_slist_free_all(struct curl_slist *l);
time_t wds__curl_getdate(const char *p, const time_t *unused);

/* The oldest libcurl wds uses: CURLOPT_PROTOCOLS_STR is 7.85, and S3's
 * "x-amz-content-sha256: UNSIGNED-PAYLOAD" is signed as given (not as the
 * hash of the body) from 7.86. A libcurl older than this is refused when
 * loaded, with both versions named. */
#define WDS__CURL_MIN_VERSION_NUM 0x075600
#define WDS__CURL_MIN_VERSION "7.86.0"

/* <curl/curl.h> may define these two as type-checking macros. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init wds__curl_global_init
#define curl_easy_init wds__curl_easy_init
#define curl_easy_cleanup wds__curl_easy_cleanup
#define curl_easy_reset wds__curl_easy_reset
#define curl_easy_setopt wds__curl_easy_setopt
#define curl_easy_getinfo wds__curl_easy_getinfo
#define curl_easy_pause wds__curl_easy_pause
#define curl_easy_strerror wds__curl_easy_strerror
#define curl_multi_init wds__curl_multi_init
#define curl_multi_cleanup wds__curl_multi_cleanup
#define curl_multi_add_handle wds__curl_multi_add_handle
#define curl_multi_remove_handle wds__curl_multi_remove_handle
#define curl_multi_perform wds__curl_multi_perform
#define curl_multi_poll wds__curl_multi_poll
#define curl_multi_info_read wds__curl_multi_info_read
#define curl_multi_strerror wds__curl_multi_strerror
#define curl_slist_append wds__curl_slist_append
#define curl_slist_free_all wds__curl_slist_free_all
#define curl_getdate wds__curl_getdate

#endif
