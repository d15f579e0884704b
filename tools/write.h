/* write.h — what the files of `wds write` share (tools/cmd_write.c and its
 * three inputs: write_dir.c, write_manifest.c, write_stream.c): the
 * options, the progress line, a sample's span of a listing and the scratch
 * it is read into, the file reader, and the writer's error report. Internal
 * to the wds command. */
#ifndef WDS_TOOLS_WRITE_H
#define WDS_TOOLS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "reader_opts.h"
#include "wds/writer.h"

/* The options. */
typedef struct write_opts {
  const char *pattern;
  uint64_t max_count, max_size, start, seed, shuffle_buffer;
  int level, shuffle, inline_values, no_sync, split_given;
  int count_given, size_given; /* --maxcount, --maxsize */
  tool_reader_opts ro;         /* --read-timeout (the manifest's too),
                                  --retries, the cache...: shard inputs */
  const char *manifest;
  const char *size_arg; /* --maxsize as given */
  int labels;           /* --labels: class ids from folder names */
  const char *classes;  /* --classes FILE: where the mapping goes */
  int last_dot;         /* --key-rule last-dot */
} write_opts;

/* The progress line on a terminal (stderr). */
typedef struct progress {
  int enabled; /* stderr is a terminal */
  double start, last;
  uint64_t total; /* samples, 0 = unknown */
  int shown;
} progress;

void progress_update(progress *p, const wds_writer *w, int force);

/* A sample: a run of entries (directory) or a record (manifest). */
typedef struct span {
  size_t first, count;
  size_t label; /* --labels: the class id */
} span;

void shuffle_spans(span *s, size_t n, uint64_t seed);

/* Scratch reused by every sample. */
typedef struct scratch {
  uint8_t *data;
  size_t data_cap;
  size_t *offs;
  size_t offs_cap;
  wds_writer_field *f;
  size_t f_cap;
  char *key;
  size_t key_cap;
} scratch;

void scratch_free(scratch *s);
int scratch_fields(scratch *s, size_t n, size_t key_len);

/* Reads the file at dirfd/rel to the end of s->data at *used, as a whole
 * (cmd_write.c says how); -1 after a message naming it. */
int read_file_at(int dirfd, const char *where, const char *rel, scratch *s,
                 size_t *used, size_t *off, size_t *size);

/* Uniform in [0, n), n > 0. */
uint64_t rand_below(uint64_t *state, uint64_t n);

/* Reports the writer's last error (with a hint for a one-file -o); 1. */
int writer_failed(void);
/* The hint alone, after a message of the caller's own about msg. */
void single_file_hint(const char *msg);

/* The three inputs: 0 when every sample was written, 1 on an error
 * (reported). */
int run_dir(const char *root, const write_opts *o, wds_writer *w, progress *pg);
int run_manifest(const write_opts *o, wds_writer *w, progress *pg);
int run_stream(char **specs, int nspecs, const write_opts *o, wds_writer *w,
               progress *pg);

#endif
