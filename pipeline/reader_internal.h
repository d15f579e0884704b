/* reader_internal.h — the reader as other wds modules open it. Internal. */
#ifndef WDS_PIPELINE_READER_INTERNAL_H
#define WDS_PIPELINE_READER_INTERNAL_H

#include "shards/cancel.h"
#include "wds/reader.h"

/* wds_reader_open() whose reads honour the caller's token instead of the
 * reader's own (cancel NULL: its own). The token must outlive the reader. */
int wds__reader_open(const wds_reader_config *cfg, const wds__cancel *cancel,
                     wds_reader **out);

#endif
