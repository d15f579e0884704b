/* internal.h — the loader's shared internal structures and the functions
 * its files call across. Internal.
 *
 * The loader is one concern per file:
 *
 *   loader.c   open (configuration), next, release, set_epoch, position,
 *              errors, stats, close, cancel
 *   fields.c   the output fields made at open (names, decoders, options)
 *   slots.c    the batch pool's slots: set-up, states, the ready FIFO's
 *              pop, the fences of release_after
 *   run.c      one epoch's threads: run_start/run_stop, the collator
 *              (round-robin over the worker queues, batch slots, the ready
 *              FIFO)
 *   worker.c   a worker thread: feed -> shuffle -> decode (the decoder
 *              table, pipeline/decoders.h) -> items -> its queue
 *   feed.c     a worker's sample feed: plan pieces or resampled draws,
 *              shard readers, raw sample copies, holes, the exact mode's
 *              count checks
 *   shuffle.c  the shuffle buffer (WebDataset's _shuffle), no threads;
 *              shuffle.h has its per-sample path inline
 *   collate.c  rows into batch slots: layouts, keys, valid flags, the last
 *              batch (keep, drop, pad), no threads
 *   queue.c    the bounded per-worker queues (chunked hand-off)
 *   items.c    recycled blocks (per worker pools) and items
 *   count.c    exact mode's per-shard counts: the index, or a counting pass
 *   mix.c      several sources: their URLs, exact mode's per-source plans,
 *              a worker's feeds (one per source) and the choice between them
 *   plan.c     an epoch's plan (plan.h): shard order, rank and worker split
 *   state.c    the saved position (wds_loader_state), its check at open and
 *              the elastic resume's replay
 *   defer.c    deferred reads (pread as a sample leaves the shuffle buffer)
 *   pool.c     the slot allocators (pinned with CUDA)
 *   options.c  the option table and the rules between options
 *   index*.c, fieldspec.c, jpeg_gpu*.{c,cu}: the index format, --decode
 *              strings, the GPU JPEG decoder (their headers say more)
 *
 * Threads, locks and invariants are described in loader.c; who writes
 * which of the handle's fields, in struct wds_loader's comment (handle.h,
 * which feed.c, count.c and mix.c cannot include). */
#ifndef WDS_LOADER_INTERNAL_H
#define WDS_LOADER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/assert.h"
#include "base/err.h"
#include "base/rng.h"
#include "loader/index.h"
#include "loader/plan.h"
#include "pipeline/decoders.h"
#include "shards/cache.h"
#include "shards/cancel.h"
#include "wds/loader.h"
#include "wds/reader.h"
#include "wds/spec.h"

/* ---- samples and items ---- */

/* A shard file that deferred fields are read from (defer_reads): its own
 * descriptor (the reader's, duplicated: a file renamed over meanwhile is
 * still the old inode), held by the feed while it reads the shard and by
 * each deferred field; closed with the last. */
typedef struct wds__fh {
  atomic_int refs;
  int fd;
  uint64_t size;         /* at open: a change is an error */
  struct timespec mtime; /* at open: a change is an error (the file was
                            written: a same-size rewrite in place), except
                            for a cache entry, whose mtime marks use */
  int cache_entry;       /* a shard cache entry (never changed in place) */
  atomic_int *open;      /* the pool's count of open handles (the cap) */
  int auto_;             /* AUTO: defer only fields whose granules are in res */
  uint64_t *res;         /* AUTO: one bit per granule (1 MiB) whose first and
                            last pages were in the page cache at open, while the
                            feed reads the shard (then NULL) */
  size_t npages, page;   /* AUTO: granules and a granule's bytes */
} wds__fh;

/* A handle on fd's file (duplicated) when deferral applies under mode:
 * not OFF, fd a regular file (not -1), fewer than WDS__FH_CAP open in bp
 * and in the process fewer than a quarter of the soft RLIMIT_NOFILE, and
 * under AUTO some of the file in the page cache; else NULL (read in the
 * stream). One reference, the caller's. */
typedef struct wds__blk_pool wds__blk_pool;
wds__fh *wds__fh_open(int fd, int cache_entry, wds_defer_reads mode,
                      wds__blk_pool *bp);
/* Whether the field at off (size bytes) is deferred: always under ON;
 * under AUTO when all its granules were in the page cache at open (a read
 * from there is as cheap in any order; from a disk it is not). Only until
 * wds__fh_scan_done. */
int wds__fh_defers(const wds__fh *fh, uint64_t off, uint64_t size);
/* The feed is done with the shard: AUTO's bitmap is freed (the handle
 * lives on for its deferred fields). NULL: no-op. */
void wds__fh_scan_done(wds__fh *fh);
void wds__fh_put(wds__fh *fh); /* drops a reference; NULL: no-op */
/* Bytes of AUTO bitmaps held in the process (tests). */
extern atomic_size_t wds__fh_res_bytes;

typedef struct wds__raw_field {
  const char *ext;
  const uint8_t *data; /* NULL while deferred */
  size_t size;
  void *blk;   /* the block data is (owned), or NULL: data is in the sample's */
  wds__fh *fh; /* deferred: data is still in the file at off (one reference),
                  read by the worker when the sample leaves the shuffle
                  buffer (wds__defer_read); NULL once read */
  uint64_t off;
  int at_copy; /* deferred and wanted only by passthrough VARIABLE rows: the
                  batch copy reads it into the slot row (worker.c) */
} wds__raw_field;

/* A sample taken from the reader: only the fields some output wants. One
 * block holds this struct, the field table, the strings and the small
 * fields' data; a large field's data is a block of its own, which the
 * reader filled straight from the stream (feed.c). */
typedef struct wds__raw_sample {
  size_t shard;
  int hole; /* exact mode fill for samples a shard failed to yield */
  int pad;  /* exact mode: a padding repeat (wds__piece.pad): its row is
               delivered with its data, marked invalid */
  uint64_t data_bytes; /* the fields' data, summed (0 for a hole) */
  const char *key;
  const char *all_exts; /* every field the sample had, wanted or not:
                           "cls, jpg" (for the missing-field message) */
  size_t nfields;
  wds__raw_field *f;
} wds__raw_sample;

enum { ITEM_SAMPLE, ITEM_TOKEN, ITEM_END, ITEM_ERROR };

/* A decoded field (pipeline/decoders.h): owned data is a block of the
 * worker's pool. */
typedef wds__field_value wds__item_field;

typedef struct wds__item {
  int kind;
  int valid;
  int status;           /* ITEM_ERROR, or the failure of an invalid row */
  char *msg;            /* owned, or NULL */
  wds__raw_sample *raw; /* owned */
  wds__item_field f[];
} wds__item;

/* ---- per-field output ---- */

typedef struct wds__out_field {
  char *name;  /* the spec's name, "jpg;png" */
  char **alts; /* its alternatives */
  size_t nalts;
  const wds__decoder_def *def; /* resolved, never AUTO */
  wds__field_opts opts;
  wds__row_shape row; /* as the options give it */
} wds__out_field;

/* ---- queues ---- */

typedef struct wds__queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  wds__item **ring;
  size_t cap, head, len;
} wds__queue;

/* ---- slots ---- */

/* FREE -> FILLING (the collator) -> READY (posted) -> HELD (next() gave it
 * out) -> FREE (release), or HELD -> FENCED (release_after) -> FREE once its
 * fence is done. HELD and FENCED slots count in `held`, FENCED also in
 * `fenced`. */
enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD, SLOT_FENCED };

typedef struct wds__slot_buf {
  void *mem;
  size_t cap;
} wds__slot_buf;

typedef struct wds__slot {
  int state;
  wds_batch batch;
  wds_release_fence fence; /* FENCED: what frees it (slots.c) */
  uint64_t fence_seq;      /* FENCED: order of release_after calls */
  wds_batch_field *bf;
  wds__slot_buf *buf; /* per field, from the allocator */
  uint64_t **offsets; /* per field (VARIABLE rows), batch_size + 1 */
  char **keys;
  const char **urls;
  uint32_t *sources;
  uint8_t *valid;
  uint8_t *pad; /* per row: a padding repeat whose data is copied (its
                   valid flag is 0 all the same) */
  char *key_arena;
  size_t key_len, key_cap;
  size_t *key_off;
  /* Deferred reads in the batch copy (collate.c): per row the errno of its
   * first failed read (0: none) and that field, written by the thread that
   * copies the row; the count of failures, read after the copies. */
  int *read_err;
  uint32_t *read_err_field;
  atomic_uint read_errs;
} wds__slot;

enum { READY_SLOT, READY_EOF, READY_ERROR };

typedef struct wds__ready_entry {
  int kind;
  int slot;
} wds__ready_entry;

/* Per-batch state while a slot fills. */
typedef struct wds__filling {
  int slot;
  size_t rows;
  int *first_set; /* per field: dtype/shape fixed by a valid row */
} wds__filling;

/* What collation needs to know (collate.c), set when the loader opens. */
typedef struct wds__collate {
  const wds__out_field *fields;
  size_t nfields;
  size_t batch_size;
  wds_error_policy on_error;
  wds_last_batch last_batch;
  const char *const *urls; /* shard URLs, by wds__raw_sample.shard */
  wds_allocator alloc;     /* slot memory */
  /* An error under WDS_ON_ERROR_SKIP (counted, kept, logged). */
  void (*skip)(void *ctx, const char *msg);
  void *skip_ctx;
  atomic_uint_fast64_t *fill_rows;  /* stats: invalid rows */
  atomic_uint_fast64_t *pool_bytes; /* stats: slot memory */
  const uint32_t *shard_source;     /* each shard's source, or NULL: 0 */
} wds__collate;

/* ---- recycled blocks ---- */

typedef struct wds__run wds__run;

/* Sample copies and decoded images are large and made at a high rate. Fresh
 * malloc memory for each costs page faults (glibc gives freed heap tops
 * back to the kernel), so blocks go back to the worker that made them: the
 * collator returns them in bulk after each batch, the worker reuses them.
 * A block carries its capacity and owner in a 16-byte header. Small fresh
 * blocks are carved out of a larger chunk (items.c, "Carving"). */
typedef struct wds__blk_head {
  size_t cap;
  int owner;
  uint32_t chunk_off; /* 0: malloc'd on its own; else carved from the
                         wds__blk_chunk that starts this many bytes before */
} wds__blk_head;

/* Memory small blocks are carved from: freed (by whichever thread drops
 * the last reference) when every block carved from it has been freed and
 * its pool carves from another. */
typedef struct wds__blk_chunk {
  atomic_size_t refs; /* its blocks not yet freed, + 1 while it is its
                         pool's current chunk */
  size_t size;
} wds__blk_chunk;

typedef struct wds__blk_pool {
  pthread_mutex_t mu;
  void **shared; /* returned by the collator; under mu */
  size_t shared_len, shared_cap;
  void **local; /* the worker's own */
  size_t local_len, local_cap;
  size_t limit; /* most blocks kept */
  /* Carving (the allocating worker's only): the current chunk, where the
   * next block goes and what is left of it, the next chunk's size, and
   * the chunk bytes made so far (bounded). */
  wds__blk_chunk *chunk;
  char *carve;
  size_t carve_left, chunk_next;
  uint64_t carved;
  atomic_int fh_open; /* this worker index's open deferral handles (feed.c:
                         at most WDS__FH_CAP; the pool outlives them) */
} wds__blk_pool;

/* Collator side: blocks to hand back, per worker, flushed after a batch. */
typedef struct wds__blk_returns {
  void **v;
  size_t len, cap;
} wds__blk_returns;

/* ---- runs ---- */

typedef struct wds__worker {
  wds__run *run;
  int index;
  pthread_t thread;
  int started;
  wds__queue q;
  wds__item *terminal;  /* the END (or out-of-memory error) item, made early */
  wds__blk_pool *ipool; /* item shells: one size, kept apart from the data */
  wds__blk_pool *pool;  /* the loader's, for this worker index: kept across
                      epochs, so a new epoch reuses the last one's memory */
  wds__item **pending;  /* the chunk being filled */
  size_t npending;
} wds__worker;

/* A batch's rows being copied into its slot (run.c): the collator has
 * assigned every row (wds__batch_assign, _reserve, _finish) and hands the
 * copies out in parts, which the workers (between their samples) and the
 * collator claim. Written by the collator only while no part is claimed or
 * being copied (job_left == 0), published by the release store of
 * job_claim. */
typedef struct wds__copy_job {
  wds__slot *s;
  wds__item **items; /* row r: items[r] */
  size_t rows;
  size_t part_rows;
} wds__copy_job;

struct wds__run {
  wds_loader *l;
  uint64_t epoch;
  uint64_t skip;          /* rank items to discard (resume) */
  wds__epoch_plan plan;   /* mixed: the sums over the sources (quotas) */
  wds__epoch_plan *splan; /* mixed exact mode: each source's plan, its
                             pieces naming shards of l->urls; else NULL */
  wds__worker *w;
  pthread_t collator;
  int collator_started;
  atomic_int abort;
  wds__copy_job job;
  atomic_uint_fast64_t job_claim; /* (parts << 32) | next part to claim */
  atomic_uint job_left;           /* parts not yet copied */
  int job_waiting;                /* the collator waits for job_left == 0
                                     (under l->mu) */
  /* Epoch overlap (run.c, "The next epoch"): the next epoch's run, made
   * with this one and started worker by worker as this one's end (under
   * l->mu; NULL when there is none). */
  wds__run *succ;
  int ended;   /* the collator took every worker's last word (it set this
                  before posting the end: read after popping it) */
  int elastic; /* its plan is an elastic resume's remainder */
};

/* One source of the loader's shards (mix.c): urls[first, first + count).
 * A loader without sources has one, all of its shards. */
typedef struct wds__source {
  size_t first, count;
  char *index_path; /* owned; NULL: counted */
  double weight, proportion, repeat;
  uint64_t total; /* exact: its samples (T_s) */
  uint64_t n;     /* exact: its samples per epoch (n_s) */
  uint64_t seed;  /* its plan's and draws' seed (source 0: the config's) */
} wds__source;

/* The loader's shards and their sources: mix.c alone writes it, at open
 * (wds__sources_open, wds__sources_plan_check); read-only once open
 * returns, by every thread. */
typedef struct wds__sources {
  wds_url_list urls; /* every source's shards, end to end */
  wds__source *src;  /* [nsrc] */
  size_t nsrc;
  uint32_t *shard_source; /* [urls.count] */
  double *mix_cum;        /* resampled: cumulative weights, [nsrc] */
  int mixed;              /* the plan and the feeds go through mix.c */
} wds__sources;

/* An error under WDS_ON_ERROR_SKIP, as the loader takes it from a module
 * that does not see the loader (wds__note_skip: counted and logged as
 * "<what>: msg"). */
typedef void (*wds__skip_fn)(void *ctx, const char *what, const char *msg);

/* How the loader opens one shard's reader (feed.c; the workers and the
 * counting pass): cfg's limits, and reads that the wake token interrupts
 * and that count in the cache stats. Set at open, read-only after; the
 * token and the stats are the loader's shared state, changed through
 * their own functions (shards/cancel.h, the reader's atomics). */
typedef struct wds__shard_opener {
  const wds_loader_config *cfg;
  const wds__sources *sources;
  wds__cancel *wake;
  wds__cache_stats *cache_stats;
  int workers; /* the loader's (a compressed shard's reading thread) */
} wds__shard_opener;

/* What a worker's feeds read of the loader (feed.c, mix.c): set at open,
 * read-only after. Their one write to the loader's state is a skip. */
typedef struct wds__feed_ctx {
  const wds_loader_config *cfg; /* mode, on_error, defer_reads, seed, rank */
  const wds__sources *sources;
  const uint64_t *counts; /* exact mode: per shard (count.c); else NULL */
  const wds__shard_opener *opener;
  char *const *wanted; /* every alternative of every field */
  size_t nwanted;
  size_t nfields; /* of an error item */
  wds__skip_fn skip;
  void *skip_ctx;
  /* exact mode with an index made with --hashes: per shard (count.c);
   * else NULL. A kept member is checked against it before delivery. */
  const wds__index_hashes *hashes;
} wds__feed_ctx;

/* What exact mode's counting reads (count.c): set at open. Its output is
 * the counts array, which count.c alone writes. */
typedef struct wds__count_ctx {
  const wds_loader_config *cfg; /* on_error, interrupt,
                                   allow_pipe_from_files */
  const wds__sources *sources;
  const wds__shard_opener *opener; /* its wake token: set when interrupted */
  int threads;                     /* at most this many counting threads */
  wds__skip_fn skip;
  void *skip_ctx;
} wds__count_ctx;

static inline uint64_t wds__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The handle itself, struct wds_loader, with its lock and STAT_ADD, is in
 * loader/handle.h: the files that work on the handle include it; feed.c,
 * count.c and mix.c do not, so the compiler keeps them to their views
 * (wds__feed_ctx, wds__count_ctx, wds__sources). */

/* Moves slot i to state `to`, called with l->mu held: the transitions of
 * the slot comment (FREE -> FILLING -> READY -> HELD -> FREE, HELD ->
 * FENCED -> FREE; and back to FREE from FILLING or READY when a batch is
 * dropped or a run stops), `held` and `fenced` kept with them (slots.c).
 * A move the comment does not allow is an assertion failure. */
void wds__slot_set(wds_loader *l, int i, int to);

/* ---- slots.c: the batch pool ---- */

/* The pool's slots, the ready FIFO and the fences' scratch, made at open
 * (after the fields and sources) and freed at close. */
int wds__slots_setup(wds_loader *l, wds__err *oe);
void wds__slots_free(wds_loader *l);
/* The ready FIFO's oldest entry, taken (called with l->mu held, the FIFO
 * not empty). */
wds__ready_entry wds__ready_pop(wds_loader *l);
/* The fences (wds_loader_release_after): how many slots are FENCED; the
 * done ones freed (with `block`, the oldest waited for), returning how
 * many; a held batch's slot fenced; every fence's slot back at close. */
int wds__fenced_count(wds_loader *l);
int wds__fences_poll(wds_loader *l, int block);
int wds__release_after(wds_loader *l, const wds_batch *b,
                       const wds_release_fence *fence);
void wds__fences_drain(wds_loader *l);

/* ---- fields.c: the output fields ---- */

/* The output fields of cfg (l->fields, l->wanted), made at open; freed at
 * close (and after a failed open). */
int wds__fields_setup(wds_loader *l, const wds_loader_config *cfg,
                      wds__err *oe);
void wds__fields_free(wds_loader *l);
/* The images' augmentation and output of cfg (pipeline/augment.h). */
void wds__config_augment(const wds_loader_config *cfg, wds__augment *a);

/* ---- loader.c ---- */

/* The last error's text: written by the threads calling the loader (and
 * wds_gpu_jpeg_decode_rows, which may run on several at once), so always
 * under l->mu; a public call that fails copies it into its caller's last
 * error (wds_last_error). What WDS_ON_ERROR_SKIP skips goes to the log. */
void wds__set_error(wds_loader *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* An error under WDS_ON_ERROR_SKIP: counted, kept as the last error, and
 * logged ("<what>: msg"). */
void wds__note_skip(wds_loader *l, const char *what, const char *msg);

/* The saved position (state.c): l's state at (epoch, batches) as
 * wds_loader_state gives it (malloc'd into *out); WDS_ERR_NOMEM. */
int wds__state_format(const wds_loader *l, uint64_t epoch, uint64_t batches,
                      char **out);
/* Checks a saved state (cfg.resume_state) against l's configuration, once
 * its data is known (after the counts); on success sets cfg.epoch and
 * cfg.resume_batches to its position. */
int wds__state_check(wds_loader *l, const char *text, wds__err *e);

/* ---- items.c: blocks and items ---- */

/* A carved block's free: its chunk loses a reference (items.c). */
void wds__blk_free_carved(wds__blk_head *h);

static inline void wds__blk_free(void *p) {
  if (!p)
    return;
  wds__blk_head *h = (wds__blk_head *)p - 1;
  if (h->chunk_off)
    wds__blk_free_carved(h);
  else
    free(h);
}

/* A block of at least need bytes from bp (the worker's; NULL: a fresh
 * block), or NULL. The common case, the worker's last block fitting, is
 * inline. A fresh large block is populated (its pages made at once) when
 * populate is 1: for blocks written whole right away, never for one a
 * stream is read into (wds__blk_alloc_read). *fresh (fresh may be NULL):
 * 1 when the block is new from malloc, its pages not yet made; 0 when it
 * was recycled (written by its last user) or carved from a populated
 * chunk. */
void *wds__blk_alloc_slow(wds__blk_pool *bp, int owner, size_t need,
                          int populate, int *fresh);

/* Whether a recycled block of cap bytes serves a request of need: large
 * enough, and for a small request (16 KiB at most) not a large block (over
 * 64 KiB), which a field or image will want: a raw sample's header taking
 * a field's block leaves the next field a fresh one to fault in (with
 * deferred reads every header of a shuffle buffer is made before any of
 * its fields' blocks). */
static inline int wds__blk_fits(size_t cap, size_t need) {
  return cap >= need && (need > ((size_t)16 << 10) || cap <= (size_t)64 << 10);
}

static inline void *wds__blk_alloc_pop(wds__blk_pool *bp, int owner,
                                       size_t need, int populate, int *fresh) {
  if (bp && bp->local_len > 0) {
    void *p = bp->local[bp->local_len - 1];
    if (wds__blk_fits(((wds__blk_head *)p - 1)->cap, need)) {
      bp->local_len--;
      if (fresh)
        *fresh = 0;
      return p;
    }
  }
  return wds__blk_alloc_slow(bp, owner, need, populate, fresh);
}

static inline void *wds__blk_alloc(wds__blk_pool *bp, int owner, size_t need) {
  return wds__blk_alloc_pop(bp, owner, need, 1, NULL);
}

/* A block for a stream's bytes, whose size is what a tar header claims:
 * none of it populated (the reader populates a fresh one as the bytes
 * arrive, and a recycled one, *fresh 0, not at all: its pages were made
 * by its last use). */
static inline void *wds__blk_alloc_read(wds__blk_pool *bp, int owner,
                                        size_t need, int *fresh) {
  return wds__blk_alloc_pop(bp, owner, need, 0, fresh);
}

static inline void wds__blk_return(wds__blk_returns *r, void *p) {
  if (!p)
    return;
  if (r->len == r->cap) {
    size_t c = r->cap ? 2 * r->cap : 64;
    void **nv = realloc(r->v, c * sizeof *nv);
    if (!nv) {
      wds__blk_free(p);
      return;
    }
    r->v = nv;
    r->cap = c;
  }
  r->v[r->len++] = p;
}

/* Hands the collator's returns to their pool (bounded by its limit; the
 * rest are freed). */
void wds__blk_flush(wds__blk_pool *bp, wds__blk_returns *r);
void wds__blk_pool_destroy(wds__blk_pool *bp);

/* bp: the worker's pool, or NULL (a fresh block). */
static inline wds__item *wds__item_new(wds__blk_pool *bp, int owner,
                                       size_t nfields, int kind) {
  size_t n = sizeof(wds__item) + nfields * sizeof(wds__item_field);
  wds__item *it = wds__blk_alloc(bp, owner, n);
  if (it) {
    memset(it, 0, n);
    it->kind = kind;
    it->valid = 1;
  }
  return it;
}

void wds__item_free(wds__item *it, size_t nfields); /* NULL: no-op */
void wds__raw_free(wds__raw_sample *r); /* and its blocks; NULL: no-op */
/* The collator's way to dispose of an item: its blocks go back to their
 * worker (r: data blocks, ri: item shells). */
static inline void wds__raw_recycle(wds__raw_sample *raw, wds__blk_returns *r) {
  if (!raw)
    return;
  for (size_t i = 0; i < raw->nfields; i++) {
    wds__blk_return(r, raw->f[i].blk);
    wds__fh_put(raw->f[i].fh);
  }
  wds__blk_return(r, raw);
}

static inline void wds__item_recycle(wds__item *it, size_t nfields,
                                     wds__blk_returns *r,
                                     wds__blk_returns *ri) {
  if (it->kind == ITEM_SAMPLE)
    for (size_t i = 0; i < nfields; i++)
      if (it->f[i].owned)
        wds__blk_return(r, it->f[i].data);
  wds__raw_recycle(it->raw, r);
  free(it->msg);
  wds__blk_return(ri, it);
}
/* An ITEM_ERROR item (a fresh block), or NULL. */
wds__item *wds__error_item(size_t nfields, int status, const char *msg);
/* An exact mode fill sample of a shard (key ""), or NULL. */
wds__raw_sample *wds__raw_hole(wds__blk_pool *bp, int owner, size_t shard);

/* ---- queue.c ---- */

int wds__queue_init(wds__queue *q, size_t cap); /* 0, or -1: out of memory */
void wds__queue_destroy(wds__queue *q, size_t nfields); /* frees queued items */
/* Queues move items in chunks (one lock and one wake-up per chunk, not per
 * item). A push waits while the queue lacks room for all n, unless
 * busy(ctx) (asked with the queue's lock held, so cheap and without side
 * effects; busy NULL: never) says the caller has other work: then it
 * returns WDS__QUEUE_BUSY, nothing queued, for the caller to do that work
 * and push again. WDS__QUEUE_ABORTED once *abort_flag is set (nothing is
 * queued). */
enum { WDS__QUEUE_PUSHED = 0, WDS__QUEUE_BUSY = 1, WDS__QUEUE_ABORTED = -1 };
int wds__queue_push_many(wds__queue *q, wds__item **its, size_t n,
                         atomic_int *abort_flag, int (*busy)(void *ctx),
                         void *ctx);
/* Takes up to max items (at least one, unless aborted: then 0). */
size_t wds__queue_pop_many(wds__queue *q, wds__item **out, size_t max,
                           atomic_int *abort_flag);
/* Wakes pushers waiting for room, to ask their busy check again. */
void wds__queue_wake_pushers(wds__queue *q);
void wds__queue_wake(wds__queue *q); /* wakes every waiter (abort) */

/* ---- feed.c: a worker's sample feed ---- */

/* A worker as its feeds see it. */
typedef struct wds__feed_worker {
  wds__blk_pool *pool; /* the worker's blocks */
  int index;
  uint64_t epoch;
  const atomic_int *abort; /* the run's */
} wds__feed_worker;

typedef struct wds__feed {
  const wds__feed_ctx *ctx;
  wds__feed_worker w;
  const wds__worker_plan *wp; /* its pieces (plain, exact) */
  size_t first, count;        /* resampled: the shards it draws from */
  wds_reader *rd;
  size_t piece;  /* next piece (plain, exact) */
  size_t shard;  /* shard being read */
  uint64_t want; /* samples wanted from it (exact), or TO_END */
  uint64_t got;
  uint64_t holes; /* fill samples still to emit */
  wds__rng draw;  /* resampled shard draws */
  uint64_t empty_draws;
  /* The readers' unverified_samples, not yet published. */
  uint64_t unverified;
  uint64_t read_ns, bytes, shards; /* stats not yet published */
  uint64_t begin;                  /* exact: first sample of the piece */
  uint64_t before; /* samples read before the piece: begin, unless the
                      shard ended (or failed) first */
  int failed;      /* a read error ended the shard (already reported) */
  int to_end;      /* exact: the piece ends where the shard's count does */
  int done;
  int pad;     /* exact: the piece being read is padding (wds__piece.pad) */
  void **into; /* blocks the reader is filling for the sample being read */
  size_t ninto, into_cap;
  int into_failed; /* a block could not be allocated */
  int defer;       /* this shard's wanted large fields are deferred: -1 not
                      decided yet (at its first large field), 0 no, 1 yes */
  wds__fh *fh;     /* the shard's file while defer is 1 (the feed's ref) */
  uint64_t *doff;  /* the sample's deferred fields' offsets, in order */
  size_t ndoff, doff_cap;
  wds__item *fatal; /* why the worker must stop: an error item (or NULL when
                  even that could not be allocated) */
  char last_err[WDS__ERR_SIZE];
} wds__feed;

/* Worker w's feed for its epoch (of source s's shards, reading wp's
 * pieces; source 0 and the run's plan without a mix). */
void wds__feed_init(wds__feed *src, const wds__feed_ctx *ctx,
                    const wds__feed_worker *w, size_t s,
                    const wds__worker_plan *wp);

/* Next raw sample (wds__sample_pull): *out set, or NULL at the end.
 * Returns -1 with src->fatal set when the worker must stop. */
int wds__feed_next(void *src, wds__raw_sample **out);

/* Exact mode, the quota met without another read: the last shard's count
 * is checked too (one more sample is an error). 0, or -1 with src->fatal. */
int wds__feed_check_last(wds__feed *src);

void wds__feed_close(wds__feed *src); /* closes the open reader, if any */

/* Deferred reads (defer_reads): at most this many shard files open per
 * worker; past it a shard is read in the stream as without deferral. */
#define WDS__FH_CAP 32

/* What a worker's deferred reads did (not yet published). */
typedef struct wds__defer_stats {
  uint64_t fields, bytes, ns;
} wds__defer_stats;

/* Reads r's deferred fields (wds__raw_field.fh) into blocks of bp (owner's), so
 * r looks as if read in the stream (nothing to do for a sample without),
 * except those marked at_copy: their file's size is checked and they stay
 * deferred, for the batch copy to read into the slot row. WDS_OK, or an
 * error naming the shard (url, redacted), sample, field and offset in e
 * (the sample's other deferred fields are dropped; WDS_ERR_NOMEM when a
 * block could not be had). Counted in *st. */
int wds__defer_read(wds__raw_sample *r, const char *url, wds__blk_pool *bp,
                    int owner, wds__defer_stats *st, wds__err *e);
/* Drops r's deferred fields unread (resume tokens). */
void wds__defer_drop(wds__raw_sample *r);
/* Reads f's size bytes (deferred, at_copy) at dst: 0, or the errno (EIO
 * for a short read, ENODATA for the file's end). Any thread. */
int wds__defer_pread(const wds__raw_field *f, void *dst);
/* What a failed deferred read's errno means, for its message. */
const char *wds__defer_why(int en);
/* The error of deferred field f of sample key in the shard at url (named
 * with its secrets hidden) that could not be read: WDS_ERR_IO, the message
 * naming shard, sample, field, size, offset and why. Worker and copy. */
int wds__defer_fail(wds__err *e, const char *url, const char *key,
                    const wds__raw_field *f, const char *why);

/* Tests only: when set, called by a worker before it reads a sample's
 * deferred fields; the copy hook by the batch copy before it reads an
 * at_copy field of sample key (any thread). */
extern void (*wds__defer_read_hook)(const char *url);
extern void (*wds__defer_copy_hook)(const char *url, const char *key);

/* A reader of one shard, as the workers and the counting pass open it: the
 * loader's limits, and reads that its wake token interrupts. */
int wds__open_shard_reader(const wds__shard_opener *o, size_t shard,
                           wds_reader **out, wds__err *e);

/* ---- mix.c: sources ---- */

/* A worker's sample feeds, one per source, and the choice between them:
 * resampled mode draws a source per sample (weights), exact mode
 * interleaves the sources' quotas smoothly; one source: its feed alone. */
typedef struct wds__feeds {
  const wds__feed_ctx *ctx;
  wds__feed *f; /* [n] */
  size_t n;
  wds__rng pick;    /* resampled: the source draws */
  uint64_t *taken;  /* exact: samples taken from each feed */
  uint64_t *quota;  /* exact: each feed's samples */
  wds__item *fatal; /* why the worker must stop (a feed's) */
} wds__feeds;

/* Worker w's feeds for its epoch: plan's pieces, or with a mix in exact
 * mode each source's (splan[s]). 0, or -1: out of memory. */
int wds__feeds_init(wds__feeds *fs, const wds__feed_ctx *ctx,
                    const wds__feed_worker *w, const wds__epoch_plan *plan,
                    const wds__epoch_plan *splan);
int wds__feeds_next(void *fs, wds__raw_sample **out); /* wds__feed_next's */
int wds__feeds_check_last(wds__feeds *fs);
void wds__feeds_stats(wds__feeds *fs, uint64_t *read_ns, uint64_t *bytes,
                      uint64_t *unverified,
                      uint64_t *shards); /* taken from every feed */
void wds__feeds_close(wds__feeds *fs);

/* At open: the sources (from cfg->sources, or the one spec or URL list)
 * into ss (zeroed by the caller): urls, src and shard_source; listings
 * read on the caller's thread under cfg's read timeout, retries and
 * interrupt check. WDS_OK, or a failure in oe. */
int wds__sources_open(wds__sources *ss, const wds_loader_config *cfg,
                      wds__err *oe);
/* After the counts (exact mode: counts per shard): each source's n_s,
 * checked; ss->mixed. */
int wds__sources_plan_check(wds__sources *ss, wds_mode mode,
                            const uint64_t *counts, wds__err *oe);
/* The epoch plan of pin (its counts in exact mode): wds__plan_epoch, or
 * with a mix the sum of the sources' plans (and *per, each source's, in
 * exact mode; else NULL). */
int wds__run_plan(const wds__sources *ss, const wds__plan_input *pin,
                  uint64_t epoch, wds__epoch_plan *sum, wds__epoch_plan **per,
                  wds__err *e);
void wds__run_plan_free(const wds__sources *ss, wds__epoch_plan *sum,
                        wds__epoch_plan *per);
/* Exact mode: source s's "units" in epoch (its whole passes and its window,
 * each a shard or a sample range of one, in the order wds__plan_epoch
 * permutes them as shards; units of 0 samples left out), and pieces of a
 * plan over them mapped back to shards. */
typedef struct wds__units {
  size_t *shard;
  uint64_t *begin, *len;
  size_t n, cap;
} wds__units;
int wds__source_units(const wds__sources *ss, const uint64_t *counts, size_t s,
                      uint64_t epoch, wds__units *u);
void wds__units_map(const wds__units *u, wds__epoch_plan *p);
void wds__units_free(wds__units *u);
/* The plan of a rank reading n sources' plans per (its workers' quotas,
 * samples, steps and padding summed; no pieces: the feeds read per's). */
int wds__plan_sum(const wds__epoch_plan *per, size_t n, uint64_t epoch,
                  int workers, wds__epoch_plan *sum, wds__err *e);
void wds__sources_free(wds__sources *ss); /* and its URLs */

/* ---- shuffle.c: the shuffle buffer (loader/shuffle.h) ---- */

/* ---- collate.c: rows into batch slots ---- */

/* A slot's arrays for batch_size rows, with FIXED fields' memory reserved;
 * s is zeroed first. WDS_OK or WDS_ERR_NOMEM (message in e). */
int wds__slot_init(const wds__collate *c, wds__slot *s, int index, wds__err *e);
void wds__slot_free(const wds__collate *c, wds__slot *s); /* also half-made */

void wds__batch_begin(const wds__collate *c, wds__slot *s, wds__filling *fl,
                      uint64_t epoch, uint64_t index);

/* Writes item `it` as row fl->rows of slot s: wds__batch_assign, then
 * wds__batch_copy of that row. */
int wds__batch_put(const wds__collate *c, wds__slot *s, wds__filling *fl,
                   const wds__item *it, wds__err *e);

/* Rows in two steps, so that the data can be copied by other threads:
 * wds__batch_assign makes item `it` row fl->rows (key, URL, valid flag, the
 * batch's dtype and shape, VARIABLE offsets; FIXED and FIRST memory), no
 * field data yet. A shape mismatch of a FIRST field is an error naming the
 * sample (returned), or under the skip policy turns the row invalid.
 * wds__batch_reserve then makes room for the VARIABLE rows assigned so far
 * (data written before is not kept: call it before any wds__batch_copy of
 * the batch), and wds__batch_copy writes rows [row0, row1) from
 * items[0 .. row1 - row0), zeros for invalid rows. Copies of disjoint row
 * ranges may run at once, on any threads; they only read the slot's
 * layout and write those rows' bytes. */
int wds__batch_assign(const wds__collate *c, wds__slot *s, wds__filling *fl,
                      const wds__item *it, wds__err *e);
int wds__batch_reserve(const wds__collate *c, wds__slot *s,
                       const wds__filling *fl, wds__err *e);
void wds__batch_copy(const wds__collate *c, wds__slot *s,
                     const wds__item *const *items, size_t row0, size_t row1);
/* After the copies of rows [row0, row1) (items as for wds__batch_copy) are
 * done: the deferred reads that failed in them (their rows already zeros)
 * under the on_error policy, as a decode failure: stop returns WDS_ERR_IO
 * naming the shard, sample, field and offset of the first such row; skip
 * marks each such row invalid (its size kept), counted and logged. */
int wds__batch_reads_check(const wds__collate *c, wds__slot *s,
                           const wds__item *const *items, size_t row0,
                           size_t row1, wds__err *e);

/* Rows, keys and sizes published in s->batch. */
void wds__batch_finish(const wds__collate *c, wds__slot *s, wds__filling *fl);

/* The epoch's last, partial batch by the last-batch policy: 1 (finished,
 * padded under WDS_LAST_PAD: deliver it), 0 (drop it: no rows, or
 * WDS_LAST_DROP), or a negative status (message in e). */
int wds__batch_last(const wds__collate *c, wds__slot *s, wds__filling *fl,
                    wds__err *e);

/* ---- worker.c, run.c, count.c ---- */

void *wds__worker_main(void *arg); /* a worker thread (arg: wds__worker *) */

/* Copies parts of the run's open copy job until none is left to claim (any
 * thread; run.c). */
void wds__copy_parts(wds__run *rn);

/* Whether the run's open copy job has parts left to claim: one relaxed
 * load. */
static inline int wds__copy_due(const wds__run *rn) {
  uint64_t v = atomic_load_explicit(&rn->job_claim, memory_order_relaxed);
  return (v & 0xffffffffu) < (v >> 32);
}

/* A worker's check between samples: one relaxed load when there is nothing
 * to copy. */
static inline void wds__copy_help(wds__run *rn) {
  if (wds__copy_due(rn))
    wds__copy_parts(rn);
}

/* Hands a worker's items to its queue (wds__queue_push_many): while the
 * queue is full the worker copies slot rows of the run's open copy job
 * rather than wait idle. 0, or -1 when the run is aborted (nothing is
 * queued). */
int wds__worker_push(wds__worker *w, wds__item **its, size_t n);

int wds__run_start(wds_loader *l, uint64_t epoch, uint64_t skip);
void wds__run_stop(wds_loader *l); /* and its successor; no run: no-op */
/* The epoch's end was delivered: the run is joined and, if its successor
 * was made, that becomes the current run (its collator started); else
 * with eager_next_epoch the next run starts. WDS_OK or a failure. */
int wds__run_next_epoch(wds_loader *l);
/* A worker's last act: its successor in the next epoch's run starts. */
void wds__worker_handoff(wds__worker *w);

/* Exact mode: each shard's count (*out, an array the caller frees, set
 * even on failure) from its source's index or a counting pass, checked.
 * WDS_OK, or a failure (wds__last_fail). */
int wds__load_counts(const wds__count_ctx *c, uint64_t **out, wds__err *oe);
/* The same, also keeping the member hashes an index made with `wds index
 * --hashes` records: *hashes (NULL when no index has any) is an array of
 * one wds__index_hashes per shard, empty for a shard without; free it with
 * wds__free_hashes(*hashes, shard count). */
int wds__load_counts_hashes(const wds__count_ctx *c, uint64_t **out,
                            wds__index_hashes **hashes, wds__err *oe);
void wds__free_hashes(wds__index_hashes *h, size_t n);
/* Where the exact mode's count of a shard came from, for messages. */
const char *wds__count_source(const wds__sources *ss, size_t shard, char *buf,
                              size_t n);

#endif
