/* reader_internal.h — the reader as other wds modules open it. Internal. */
#ifndef WDS_PIPELINE_READER_INTERNAL_H
#define WDS_PIPELINE_READER_INTERNAL_H

#include "shards/cache.h"
#include "shards/cancel.h"
#include "shards/io_opts.h"
#include "wds/reader.h"

/* wds_reader_open() whose reads honour the caller's token instead of the
 * reader's own (cancel NULL: its own). The token must outlive the reader.
 * A failure's text goes into e, not into the thread's last error. */
int wds__reader_open(const wds_reader_config *cfg, const wds__cancel *cancel,
                     wds_reader **out, wds__err *e);

/* wds_reader_next() for other modules: a failure's text stays on the reader
 * (wds__reader_error), not in the thread's last error. */
int wds__reader_next(wds_reader *r, const wds_sample **out);

/* The text of the reader's last failure ("" if none). */
const char *wds__reader_error(const wds_reader *r);

/* Where member data goes (wds__reader_set_sink). Called once per member
 * that joins a sample, before its data is read, with the lower-cased
 * extension and the data's size; returns one of: */
enum {
  WDS__SINK_WINDOW,   /* the data is read into the reader's window, as without
                         a sink: wds_field.data is a view, valid until the
                         next call */
  WDS__SINK_INTO,     /* *dst (at least size bytes, the caller's) receives the
                         data: wds_field.data is *dst. The part of the member
                         not already in the window is read straight from the
                         stream into *dst (one copy in all) */
  WDS__SINK_SKIP,     /* the data is not wanted: it is skipped, never kept in
                         memory, and wds_field.data is NULL (size_bytes is
                         still its size) */
  WDS__SINK_DEFER,    /* the caller reads the data later itself, with pread
                         at wds__reader_data_offset() in
                         wds__reader_shard_fd() (only when that is not -1):
                         skipped like SKIP (wds_field.data is NULL) */
  WDS__SINK_INTO_MADE /* as INTO, and *dst's pages are already made (a
                         recycled buffer): the reader does not populate
                         them. With INTO it populates *dst as the bytes
                         arrive (wds__tar_read_into) */
};
/* A negative return is an error status (WDS_ERR_NOMEM: the caller could not
 * allocate *dst), which ends the shard like a read error would. A buffer
 * handed out for a sample the reader then does not return (an error
 * dropped it) stays the caller's. */
typedef int (*wds__member_sink)(void *ctx, const char *ext, uint64_t size,
                                void **dst);

/* While a sink runs: the open shard's file when it is a local regular file
 * read without compression (wds__stream_file_fd; owned by the reader, open
 * until the shard is closed), else -1; and the file offset of the data of
 * the member the sink is asked about. */
int wds__reader_shard_fd(const wds_reader *r);
/* Whether that file is a shard cache entry (shards/source.h). */
int wds__reader_shard_is_cache_entry(const wds_reader *r);
uint64_t wds__reader_data_offset(const wds_reader *r);

/* Sets (sink NULL: clears) where the reader puts member data from the next
 * wds_reader_next() on. Without a sink every member is read into the
 * window; so is, without asking the sink, a member under min_bytes. */
void wds__reader_set_sink(wds_reader *r, wds__member_sink sink, void *ctx,
                          uint64_t min_bytes);

/* The reading thread of the compressed shards it opens from the next one
 * on (wds__io_opts.read_thread: 0 by the process's spare CPUs, > 0
 * always, < 0 never). */
void wds__reader_set_read_thread(wds_reader *r, int v);

/* Counts (and reports) the cache's use in stats, shared with other readers,
 * instead of the reader's own counters (NULL: its own). Before the first
 * wds_reader_next(); stats must outlive the reader. */
void wds__reader_set_cache_stats(wds_reader *r, wds__cache_stats *stats);

#endif
