/* old_libarchive.c — a stand-in libarchive.so.13 for tools_startup: every
 * function shards/archive_dl.c looks up, reporting version 3.1.2 (older
 * than WDS__ARCHIVE_MIN_VERSION), so wds must refuse it when loaded. None
 * of the others may be called: each aborts. */
#include <stdlib.h>

#define WDS_FAKE_EXPORT __attribute__((visibility("default")))

WDS_FAKE_EXPORT int archive_version_number(void);
WDS_FAKE_EXPORT const char *archive_version_string(void);
int archive_version_number(void) { return 3001002; }
const char *archive_version_string(void) { return "libarchive 3.1.2"; }

#define FAKE(name)                                                             \
  WDS_FAKE_EXPORT void name(void);                                             \
  void name(void) { abort(); }
FAKE(archive_read_new)
FAKE(archive_read_free)
FAKE(archive_read_support_filter_bzip2)
FAKE(archive_read_support_filter_lz4)
FAKE(archive_read_support_filter_lzip)
FAKE(archive_read_support_filter_compress)
FAKE(archive_read_support_format_raw)
FAKE(archive_read_open)
FAKE(archive_read_next_header)
FAKE(archive_read_data)
FAKE(archive_filter_count)
FAKE(archive_filter_code)
FAKE(archive_filter_name)
FAKE(archive_error_string)
FAKE(archive_set_error)
