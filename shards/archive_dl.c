/* archive_dl.c — libarchive loaded on first use (see archive_dl.h). */
#include "shards/archive_dl.h"
#include "shards/dl.h"

#include <stdarg.h>
#include <stdio.h>

/* The functions shards/stream.c calls, looked up once. */
static struct {
  struct archive *(*read_new)(void);
  int (*read_free)(struct archive *);
  int (*read_support_filter_bzip2)(struct archive *);
  int (*read_support_filter_lz4)(struct archive *);
  int (*read_support_filter_lzip)(struct archive *);
  int (*read_support_filter_compress)(struct archive *);
  int (*read_support_format_raw)(struct archive *);
  int (*read_open)(struct archive *, void *, archive_open_callback *,
                   archive_read_callback *, archive_close_callback *);
  int (*read_next_header)(struct archive *, struct archive_entry **);
  la_ssize_t (*read_data)(struct archive *, void *, size_t);
  int (*filter_count)(struct archive *);
  int (*filter_code)(struct archive *, int);
  const char *(*filter_name)(struct archive *, int);
  const char *(*error_string)(struct archive *);
  void (*set_error)(struct archive *, int, const char *, ...);
  int (*version_number)(void);
  const char *(*version_string)(void);
} fn;

/* The version's functions are in every libarchive; anything older than
 * WDS__ARCHIVE_MIN_VERSION is refused by its number. */
static int check(wds__dl_lib *l, void *handle) {
  (void)handle;
  if (fn.version_number() >= WDS__ARCHIVE_MIN_VERSION_NUMBER)
    return 1;
  const char *v = fn.version_string();
  return wds__dl_too_old(l, v ? v : "libarchive (unknown version)");
}

/* The unversioned name is a development link, tried last. */
static const char *const sonames[] = {"libarchive.so.13", "libarchive.so",
                                      NULL};
static const wds__dl_sym syms[] = {
#define F(name)                                                                \
  { "archive_" #name, (void **)&fn.name }
    F(read_new),
    F(read_free),
    F(read_support_filter_bzip2),
    F(read_support_filter_lz4),
    F(read_support_filter_lzip),
    F(read_support_filter_compress),
    F(read_support_format_raw),
    F(read_open),
    F(read_next_header),
    F(read_data),
    F(filter_count),
    F(filter_code),
    F(filter_name),
    F(error_string),
    F(set_error),
    F(version_number),
    F(version_string),
#undef F
};

static wds__dl_lib lib =
    WDS__DL_LIB("libarchive", sonames, syms, WDS__ARCHIVE_MIN_VERSION,
                ARCHIVE_VERSION_ONLY_STRING, check);

const char *wds__archive_dl_error(void) { return wds__dl_error(&lib); }

/* Only archive_read_new can see libarchive missing: stream.c calls it
 * first, and nothing else on a NULL handle. The others still fail safely. */
struct archive *wds__archive_read_new(void) {
  return wds__dl_ready(&lib) ? fn.read_new() : NULL;
}

int wds__archive_read_free(struct archive *a) {
  return wds__dl_ready(&lib) && a ? fn.read_free(a) : ARCHIVE_OK;
}

int wds__archive_read_support_filter_bzip2(struct archive *a) {
  return wds__dl_ready(&lib) ? fn.read_support_filter_bzip2(a) : ARCHIVE_FATAL;
}

int wds__archive_read_support_filter_lz4(struct archive *a) {
  return wds__dl_ready(&lib) ? fn.read_support_filter_lz4(a) : ARCHIVE_FATAL;
}

int wds__archive_read_support_filter_lzip(struct archive *a) {
  return wds__dl_ready(&lib) ? fn.read_support_filter_lzip(a) : ARCHIVE_FATAL;
}

int wds__archive_read_support_filter_compress(struct archive *a) {
  return wds__dl_ready(&lib) ? fn.read_support_filter_compress(a)
                             : ARCHIVE_FATAL;
}

int wds__archive_read_support_format_raw(struct archive *a) {
  return wds__dl_ready(&lib) ? fn.read_support_format_raw(a) : ARCHIVE_FATAL;
}

int wds__archive_read_open(struct archive *a, void *client_data,
                           archive_open_callback *open_cb,
                           archive_read_callback *read_cb,
                           archive_close_callback *close_cb) {
  return wds__dl_ready(&lib)
             ? fn.read_open(a, client_data, open_cb, read_cb, close_cb)
             : ARCHIVE_FATAL;
}

int wds__archive_read_next_header(struct archive *a,
                                  struct archive_entry **entry) {
  return wds__dl_ready(&lib) ? fn.read_next_header(a, entry) : ARCHIVE_FATAL;
}

la_ssize_t wds__archive_read_data(struct archive *a, void *buf, size_t n) {
  return wds__dl_ready(&lib) ? fn.read_data(a, buf, n) : ARCHIVE_FATAL;
}

int wds__archive_filter_count(struct archive *a) {
  return wds__dl_ready(&lib) ? fn.filter_count(a) : 0;
}

int wds__archive_filter_code(struct archive *a, int n) {
  return wds__dl_ready(&lib) ? fn.filter_code(a, n) : ARCHIVE_FILTER_NONE;
}

const char *wds__archive_filter_name(struct archive *a, int n) {
  return wds__dl_ready(&lib) ? fn.filter_name(a, n) : NULL;
}

const char *wds__archive_error_string(struct archive *a) {
  return wds__dl_ready(&lib) ? fn.error_string(a) : lib.error;
}

/* Formatted here: a variadic call cannot be passed on as it is. */
void wds__archive_set_error(struct archive *a, int err, const char *fmt, ...) {
  if (!wds__dl_ready(&lib))
    return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fn.set_error(a, err, "%s", msg);
}
