/* sniff.h — what bytes that are not a tar archive are, for messages.
 * Internal to wds.
 *
 * A shard URL that serves an error page (`pipe:curl -s` of a missing
 * object), a .zip, or a compressed file of something else is reported by
 * what it is instead of as a cut tar header or unknown compression, by the
 * one place every tool, the loader and the Python package read through
 * (the stream and the tar parser). */
#ifndef WDS_SHARDS_SNIFF_H
#define WDS_SHARDS_SNIFF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* "an HTML page", "a zip archive", "gzip data", "text", ... for the first n
 * bytes p of some data, or NULL when they are nothing known. */
const char *wds__sniff(const uint8_t *p, size_t n);

/* Fails err with the message for data that is not a tar archive: codec is
 * the compression the data came out of ("none" when it was not
 * compressed), p the first n bytes of the (decompressed) data. Empty data
 * is WDS_ERR_TRUNCATED ("empty input (0 bytes)"), anything else
 * WDS_ERR_FORMAT naming what it is when wds__sniff knows, else its first
 * bytes. Returns the status. */
int wds__not_tar(wds__err *err, const char *codec, const uint8_t *p, size_t n);

#endif
