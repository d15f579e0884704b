/* archive_dl.h — libarchive loaded on first use. Internal to wds.
 *
 * wds is not linked against libarchive: it brings libxml2, ICU, libstdc++,
 * libacl, liblz4 and libbz2 into every process (about 3 ms of start-up,
 * docs/performance.md, "Start-up"), and only the shards whose compression
 * wds does not undo itself need it (bzip2, lz4, lzip, compress; see the top
 * of stream.c). shards/stream.c includes this instead of <archive.h>: every
 * libarchive function it calls goes to a wrapper (archive_dl.c) that loads
 * libarchive.so.13 with dlopen the first time any is called. When it cannot
 * be loaded (or is older than WDS__ARCHIVE_MIN_VERSION), archive_read_new
 * returns NULL and wds__archive_dl_error() says why. */
#ifndef WDS_SHARDS_ARCHIVE_DL_H
#define WDS_SHARDS_ARCHIVE_DL_H

#include <archive.h>
#include <archive_entry.h>

/* Why libarchive could not be loaded: "" when it was (it is loaded now if
 * it was not tried yet). */
const char *wds__archive_dl_error(void);

struct archive *wds__archive_read_new(void);
int wds__archive_read_free(struct archive *a);
int wds__archive_read_support_filter_bzip2(struct archive *a);
int wds__archive_read_support_filter_lz4(struct archive *a);
int wds__archive_read_support_filter_lzip(struct archive *a);
int wds__archive_read_support_filter_compress(struct archive *a);
int wds__archive_read_support_format_raw(struct archive *a);
int wds__archive_read_open(struct archive *a, void *client_data,
                           archive_open_callback *open_cb,
                           archive_read_callback *read_cb,
                           archive_close_callback *close_cb);
int wds__archive_read_next_header(struct archive *a,
                                  struct archive_entry **entry);
la_ssize_t wds__archive_read_data(struct archive *a, void *buf, size_t n);
int wds__archive_filter_count(struct archive *a);
int wds__archive_filter_code(struct archive *a, int n);
const char *wds__archive_filter_name(struct archive *a, int n);
const char *wds__archive_error_string(struct archive *a);
void wds__archive_set_error(struct archive *a, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The oldest libarchive wds uses: the lz4 read filter is 3.2.0. Its ABI has
 * been libarchive.so.13 since 3.0. */
#define WDS__ARCHIVE_MIN_VERSION_NUMBER 3002000
#define WDS__ARCHIVE_MIN_VERSION "3.2.0"

#define archive_read_new wds__archive_read_new
#define archive_read_free wds__archive_read_free
#define archive_read_support_filter_bzip2 wds__archive_read_support_filter_bzip2
#define archive_read_support_filter_lz4 wds__archive_read_support_filter_lz4
#define archive_read_support_filter_lzip wds__archive_read_support_filter_lzip
#define archive_read_support_filter_compress                                   \
  wds__archive_read_support_filter_compress
#define archive_read_support_format_raw wds__archive_read_support_format_raw
#define archive_read_open wds__archive_read_open
#define archive_read_next_header wds__archive_read_next_header
#define archive_read_data wds__archive_read_data
#define archive_filter_count wds__archive_filter_count
#define archive_filter_code wds__archive_filter_code
#define archive_filter_name wds__archive_filter_name
#define archive_error_string wds__archive_error_string
#define archive_set_error wds__archive_set_error

#endif
