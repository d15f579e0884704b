/* wds/status.h — status codes shared by every wds API.
 *
 * Every function that can fail returns an int: WDS_OK (0), WDS_EOF (1) for a
 * clean end of stream, or one of the negative codes below. The text of a
 * failure (what and where: shard URL, member, byte offset) is the calling
 * thread's wds_last_error(); wds_strerror() gives the generic text of a
 * code. */
#ifndef WDS_STATUS_H
#define WDS_STATUS_H

#include "wds/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, generic message) — the single table of status codes. */
#define WDS_STATUS_TABLE(X)                                                    \
  X(WDS_OK, 0, "success")                                                      \
  X(WDS_EOF, 1, "end of stream")                                               \
  X(WDS_ERR_NOMEM, -1, "out of memory")                                        \
  X(WDS_ERR_INVALID, -2, "invalid argument")                                   \
  X(WDS_ERR_SPEC, -3, "invalid shard spec")                                    \
  X(WDS_ERR_LIMIT, -4, "limit exceeded")                                       \
  X(WDS_ERR_IO, -5, "I/O error")                                               \
  X(WDS_ERR_OPEN, -6, "cannot open source")                                    \
  X(WDS_ERR_COMMAND, -7, "pipe command failed")                                \
  X(WDS_ERR_TRUNCATED, -8, "truncated input")                                  \
  X(WDS_ERR_CORRUPT, -9, "corrupt archive")                                    \
  X(WDS_ERR_FORMAT, -10, "unsupported format")                                 \
  X(WDS_ERR_DECOMPRESS, -11, "decompression error")                            \
  X(WDS_ERR_DUPLICATE, -12, "duplicate field in sample")                       \
  X(WDS_ERR_TIMEOUT, -13, "timed out")                                         \
  X(WDS_ERR_CANCELLED, -14, "cancelled")

enum wds_status {
#define WDS_STATUS_ENUM_(name, value, msg) name = (value),
  WDS_STATUS_TABLE(WDS_STATUS_ENUM_)
#undef WDS_STATUS_ENUM_
};

/* Generic text of a status code ("unknown status" for anything else). The
 * returned string is static. */
WDS_API const char *wds_strerror(int status);

/* Name of a status code ("WDS_ERR_TRUNCATED"), static; "WDS_UNKNOWN" otherwise.
 */
WDS_API const char *wds_status_name(int status);

/* The text of the most recent failure of a wds call in the calling thread
 * ("" if none): what failed and where (the spec position, shard URL, member,
 * byte offset, option). Every wds function that fails (a negative status;
 * NULL from wds_index_url_for, wds_gpu_jpeg_buffer, wds_reader_shard_url,
 * whose NULL is a failure) sets it before it returns, in the caller's
 * thread, also for errors found on the loader's worker threads; a
 * handle whose errors are sticky sets it again on each failing call. A call
 * that succeeds leaves it. The string is the thread's own: valid until the
 * thread's next failing wds call. */
WDS_API const char *wds_last_error(void);

/* For code built on wds that reports its failures the same way (the
 * header-only helpers of wds/cuda.h, a program's own layers): when status is
 * negative, sets the calling thread's last error to msg (control
 * characters escaped; the status's generic text when msg is NULL or "").
 * Returns status; a status >= 0 leaves the text. */
WDS_API int wds_last_error_set(int status, const char *msg);

#ifdef __cplusplus
}
#endif
#endif /* WDS_STATUS_H */
