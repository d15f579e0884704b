/* spec_io.h — spec expansion whose s3:// listings obey the I/O options of a
 * shard read. Internal to wds (used by the reader, the loader and the tools).
 *
 * wds_spec_expand_flags() lists an s3:// glob or prefix (s3.h) with the
 * defaults: a 300 s read timeout, 5 retries, no way to cancel. This variant
 * takes the options a shard read is given, so a listing honours
 * --read-timeout / read_timeout_ms, --retries / retries and the caller's
 * cancel token (WDS_ERR_CANCELLED, "URL (ListObjectsV2): cancelled") exactly
 * as the reads that follow it do. */
#ifndef WDS_SHARDS_SPEC_IO_H
#define WDS_SHARDS_SPEC_IO_H

#include <stddef.h>

#include "base/err.h"
#include "io_opts.h"
#include "wds/spec.h"

/* wds_spec_expand_flags() with io for the listings (NULL: the defaults; its
 * cache is not used). */
int wds__spec_expand_io(const char *const *specs, size_t nspecs,
                        size_t max_urls, unsigned flags, const wds__io_opts *io,
                        wds_url_list *out, wds__err *e);

#endif
