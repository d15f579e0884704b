/* loader.c — worker threads, deterministic interleave, batch pool.
 *
 * One epoch is one "run": `workers` worker threads and one collator thread,
 * started by the first next() of the epoch and joined at its end (or by
 * set_epoch/close, which abort it).
 *
 *   worker w:  plan pieces (or resampled draws) -> wds_reader -> copy of the
 *              wanted fields (a "raw" sample, owned) -> shuffle buffer ->
 *              decode -> item -> queue[w] (bounded)
 *   collator:  pops queue[0], queue[1], ... round-robin; a worker that ends
 *              leaves the rotation -> rows of the batch in a free pool slot
 *              -> ready FIFO
 *   next():    pops the ready FIFO; release() frees the slot.
 *
 * Determinism: each worker's item sequence depends only on its plan and its
 * RNG keys (seed, stream, epoch, rank, worker, item number), and the
 * collator's order only on those sequences, so thread timing never shows.
 *
 * Resume: the collator discards the first resume_batches * batch_size items.
 * Worker w's item i can only land at rank position <= i * workers + w (the
 * rotation only shrinks), so items with i * workers + w below the skip count
 * are certainly discarded: the worker passes them on undecoded ("tokens").
 *
 * Locks: each queue has its own mutex; the pool (slot states, ready FIFO,
 * the run's end) is under the loader's mutex. An abort flag, set before the
 * mutexes are taken to broadcast, ends every wait. Memory is bounded by the
 * shuffle buffers (in samples and in bytes), the queues (queue_cap items per
 * worker) and the slots.
 *
 * Stopping: a worker may be blocked in a read (a stalled pipe: command, a
 * slow server). The loader's wake token, shared by every reader it opens,
 * wakes such a read at once: run_stop (set_epoch, close, the end of an
 * epoch) sets it while it joins the threads and clears it after;
 * wds_loader_cancel sets it for good. A cancelled read is never a skipped
 * error: it ends the worker. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/err.h"
#include "base/rng.h"
#include "loader/index.h"
#include "loader/plan.h"
#include "loader/pool.h"
#include "pipeline/decode.h"
#include "pipeline/decoders.h"
#include "pipeline/reader_internal.h"
#include "shards/cancel.h"
#include "wds/loader.h"
#include "wds/reader.h"
#include "wds/spec.h"

#define MAX_WORKERS 256
#define MAX_BATCH ((size_t)1 << 24)
#define DEFAULT_SHUFFLE_BYTES ((size_t)1 << 30) /* per worker */

/* ---- samples and items ------------------------------------------------ */

typedef struct raw_field {
  const char *ext;
  const uint8_t *data;
  size_t size;
} raw_field;

/* A sample copied out of the reader: only the fields some output wants.
 * One allocation: this struct, the field table, the strings, the data. */
typedef struct raw_sample {
  size_t shard;
  int hole;            /* exact mode fill for samples a shard failed to yield */
  uint64_t data_bytes; /* the fields' data, summed (0 for a hole) */
  const char *key;
  size_t nfields;
  raw_field *f;
} raw_sample;

enum { ITEM_SAMPLE, ITEM_TOKEN, ITEM_END, ITEM_ERROR };

/* A decoded field (pipeline/decoders.h): owned data is a block of the
 * worker's pool. */
typedef wds__field_value item_field;

typedef struct item {
  int kind;
  int valid;
  int status;      /* ITEM_ERROR, or the failure of an invalid row */
  char *msg;       /* owned, or NULL */
  raw_sample *raw; /* owned */
  item_field f[];
} item;

/* ---- per-field output ---------------------------------------------------- */

typedef struct out_field {
  char *name;  /* the spec's name, "jpg;png" */
  char **alts; /* its alternatives */
  size_t nalts;
  const wds__decoder_def *def; /* resolved, never AUTO */
  wds__field_opts opts;
  wds__row_shape row; /* as the options give it */
} out_field;

/* ---- queues -------------------------------------------------------------- */

typedef struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  item **ring;
  size_t cap, head, len;
} queue;

/* ---- slots --------------------------------------------------------------- */

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct slot_buf {
  void *mem;
  size_t cap;
} slot_buf;

typedef struct slot {
  int state;
  wds_batch batch;
  wds_batch_field *bf;
  slot_buf *buf;      /* per field, from the allocator */
  uint64_t **offsets; /* per field (BYTES), batch_size + 1 */
  char **keys;
  const char **urls;
  uint8_t *valid;
  char *key_arena;
  size_t key_len, key_cap;
  size_t *key_off;
} slot;

enum { READY_SLOT, READY_EOF, READY_ERROR };

typedef struct ready_entry {
  int kind;
  int slot;
} ready_entry;

/* ---- runs ---------------------------------------------------------------- */

typedef struct run run;

/* Sample copies and decoded images are large and made at a high rate. Fresh
 * malloc memory for each costs page faults (glibc gives freed heap tops
 * back to the kernel), so blocks go back to the worker that made them: the
 * collator returns them in bulk after each batch, the worker reuses them.
 * A block carries its capacity and owner in a 16-byte header. */
typedef struct blk_head {
  size_t cap;
  int owner;
  int pad;
} blk_head;

typedef struct blk_pool {
  pthread_mutex_t mu;
  void **shared; /* returned by the collator; under mu */
  size_t shared_len, shared_cap;
  void **local; /* the worker's own */
  size_t local_len, local_cap;
  size_t limit; /* most blocks kept */
} blk_pool;

typedef struct worker {
  run *run;
  int index;
  pthread_t thread;
  int started;
  queue q;
  item *terminal;  /* the END (or out-of-memory error) item, made early */
  blk_pool *ipool; /* item shells: one size, kept apart from the data */
  blk_pool *pool;  /* the loader's, for this worker index: kept across
                      epochs, so a new epoch reuses the last one's memory */
  item **pending;  /* the chunk being filled */
  size_t npending;
} worker;

struct run {
  wds_loader *l;
  uint64_t epoch;
  uint64_t skip; /* rank items to discard (resume) */
  wds__epoch_plan plan;
  worker *w;
  pthread_t collator;
  int collator_started;
  atomic_int abort;
};

struct wds_loader {
  wds_loader_config cfg;
  char *spec_copy, *index_copy;
  wds_url_list urls;
  uint64_t *counts;
  wds__plan_input pin;
  out_field *fields;
  size_t nfields;
  char **wanted; /* every alternative of every field: what raws keep */
  size_t nwanted;
  size_t queue_cap; /* items per worker queue */
  size_t chunk;     /* items per hand-off */
  blk_pool *pools;  /* per worker index */
  int needs_decode; /* some field is not plain bytes */
  wds_allocator alloc;
  wds__cancel wake;     /* every reader's token: see "Stopping" above */
  atomic_int cancelled; /* wds_loader_cancel() was called */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_mutex_t log_mu;
  slot *slots;
  int nslots, held;
  int collator_waits; /* the collator is blocked for want of a free slot */
  ready_entry *ready;
  size_t ready_head, ready_len;
  int run_error_status;
  char run_error[WDS__ERR_SIZE];

  run *cur;
  uint64_t epoch;      /* of the next batch */
  uint64_t delivered;  /* batches of `epoch` delivered */
  uint64_t first_skip; /* resume_batches, for the first run only */
  int failed;          /* a fatal status, returned from then on */
  uint64_t epoch_batches;
  char err[WDS__ERR_SIZE];
  char err_out[WDS__ERR_SIZE]; /* what wds_loader_error() returned */

  /* Stats (relaxed atomics, summed over threads). */
  atomic_uint_fast64_t st_batches, st_samples, st_skipped, st_fill, st_shards,
      st_bytes, st_read_ns, st_shuffle_ns, st_decode_ns, st_batch_ns,
      st_wait_ns, st_slot_wait_ns, st_pool_bytes;
};

/* The last error's text: written by workers (skips) and the caller's thread,
 * so always under l->mu; wds_loader_error() hands out a copy. */
static void set_error(wds_loader *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define STAT_ADD(l, name, v)                                                   \
  atomic_fetch_add_explicit(&(l)->st_##name, (v), memory_order_relaxed)

static void log_msg(wds_loader *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_msg(wds_loader *l, const char *fmt, ...) {
  if (!l->cfg.log)
    return;
  char buf[WDS__ERR_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  /* Workers and the collator log; the callback sees one call at a time. */
  pthread_mutex_lock(&l->log_mu);
  l->cfg.log(l->cfg.log_ctx, buf);
  pthread_mutex_unlock(&l->log_mu);
}

/* An error under WDS_ON_ERROR_SKIP: counted, kept as the last error, and
 * logged ("skipped: ..."). */
static void note_skip(wds_loader *l, const char *what, const char *msg) {
  STAT_ADD(l, skipped, 1);
  set_error(l, "%s", msg);
  log_msg(l, "%s: %s", what, msg);
}

/* ---- dtype helpers (public) ------------------------------------------------
 */

/* ---- environment ----------------------------------------------------------
 */

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v)
    return 0;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > 1 << 30)
    return 0;
  *out = (int)x;
  return 1;
}

void wds_env_rank_world(int *rank, int *world_size) {
  static const char *const pairs[][2] = {
      {"RANK", "WORLD_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}};
  int r = 0, w = 1;
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
    int a, b;
    if (env_int(pairs[i][0], &a) && env_int(pairs[i][1], &b) && b > 0) {
      r = a;
      w = b;
      break;
    }
  }
  if (rank)
    *rank = r;
  if (world_size)
    *world_size = w;
}

/* ---- queues ---------------------------------------------------------------
 */

static int queue_init(queue *q, size_t cap) {
  memset(q, 0, sizeof *q);
  q->ring = calloc(cap, sizeof *q->ring);
  if (!q->ring)
    return -1;
  q->cap = cap;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->not_empty, NULL);
  pthread_cond_init(&q->not_full, NULL);
  return 0;
}

static void item_free(item *it, size_t nfields);

static void queue_destroy(queue *q, size_t nfields) {
  if (!q->ring)
    return;
  for (size_t i = 0; i < q->len; i++)
    item_free(q->ring[(q->head + i) % q->cap], nfields);
  free(q->ring);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->not_empty);
  pthread_cond_destroy(&q->not_full);
  q->ring = NULL;
}

/* Queues move items in chunks (one lock and one wake-up per chunk, not per
 * item): per-item hand-offs cost more than reading a small sample.
 * Returns 0, or -1 when the run is aborted (nothing is queued). */
static int queue_push_many(queue *q, item **its, size_t n,
                           atomic_int *abort_flag) {
  pthread_mutex_lock(&q->mu);
  while (q->cap - q->len < n && !atomic_load(abort_flag))
    pthread_cond_wait(&q->not_full, &q->mu);
  if (atomic_load(abort_flag)) {
    pthread_mutex_unlock(&q->mu);
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    q->ring[(q->head + q->len + i) % q->cap] = its[i];
  q->len += n;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
  return 0;
}

/* Takes up to max items (at least one, unless aborted: then 0). */
static size_t queue_pop_many(queue *q, item **out, size_t max,
                             atomic_int *abort_flag) {
  size_t n = 0;
  pthread_mutex_lock(&q->mu);
  while (q->len == 0 && !atomic_load(abort_flag))
    pthread_cond_wait(&q->not_empty, &q->mu);
  if (!atomic_load(abort_flag)) {
    for (; n < max && q->len > 0; n++) {
      out[n] = q->ring[q->head];
      q->head = (q->head + 1) % q->cap;
      q->len--;
    }
    pthread_cond_signal(&q->not_full);
  }
  pthread_mutex_unlock(&q->mu);
  return n;
}

static void queue_wake(queue *q) {
  pthread_mutex_lock(&q->mu);
  pthread_cond_broadcast(&q->not_empty);
  pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
}

/* ---- recycled blocks ------------------------------------------------------
 */

static void blk_free(void *p) {
  if (p)
    free((blk_head *)p - 1);
}

static void *blk_alloc(blk_pool *bp, int owner, size_t need) {
  if (!bp)
    goto fresh;
  if (bp->local_len == 0) {
    pthread_mutex_lock(&bp->mu);
    void **t = bp->local;
    size_t tc = bp->local_cap;
    bp->local = bp->shared;
    bp->local_cap = bp->shared_cap;
    bp->local_len = bp->shared_len;
    bp->shared = t;
    bp->shared_cap = tc;
    bp->shared_len = 0;
    pthread_mutex_unlock(&bp->mu);
  }
  while (bp->local_len > 0) {
    void *p = bp->local[--bp->local_len];
    if (((blk_head *)p - 1)->cap >= need)
      return p;
    blk_free(p); /* too small: sizes grow to the largest seen */
  }
fresh:;
  size_t cap = need + need / 8 + 64;
  blk_head *h = malloc(sizeof *h + cap);
  if (!h)
    return NULL;
  h->cap = cap;
  h->owner = owner;
  return h + 1;
}

/* Collator side: blocks to hand back, per worker, flushed after a batch. */
typedef struct blk_returns {
  void **v;
  size_t len, cap;
} blk_returns;

static void blk_return(blk_returns *r, void *p) {
  if (!p)
    return;
  if (r->len == r->cap) {
    size_t c = r->cap ? 2 * r->cap : 64;
    void **nv = realloc(r->v, c * sizeof *nv);
    if (!nv) {
      blk_free(p);
      return;
    }
    r->v = nv;
    r->cap = c;
  }
  r->v[r->len++] = p;
}

static void blk_flush(blk_pool *bp, blk_returns *r) {
  if (r->len == 0)
    return;
  pthread_mutex_lock(&bp->mu);
  size_t i = 0;
  if (bp->shared_len + r->len > bp->shared_cap && bp->shared_cap < bp->limit) {
    size_t c = bp->shared_len + r->len;
    if (c > bp->limit)
      c = bp->limit;
    void **nv = realloc(bp->shared, c * sizeof *nv);
    if (nv) {
      bp->shared = nv;
      bp->shared_cap = c;
    }
  }
  for (; i < r->len && bp->shared_len < bp->shared_cap; i++)
    bp->shared[bp->shared_len++] = r->v[i];
  pthread_mutex_unlock(&bp->mu);
  for (; i < r->len; i++)
    blk_free(r->v[i]);
  r->len = 0;
}

static void blk_pool_destroy(blk_pool *bp) {
  for (size_t i = 0; i < bp->shared_len; i++)
    blk_free(bp->shared[i]);
  for (size_t i = 0; i < bp->local_len; i++)
    blk_free(bp->local[i]);
  free(bp->shared);
  free(bp->local);
  pthread_mutex_destroy(&bp->mu);
  memset(bp, 0, sizeof *bp);
}

/* ---- items ----------------------------------------------------------------
 */

static void item_free(item *it, size_t nfields) {
  if (!it)
    return;
  if (it->kind == ITEM_SAMPLE)
    for (size_t i = 0; i < nfields; i++)
      if (it->f[i].owned)
        blk_free(it->f[i].data);
  free(it->msg);
  blk_free(it->raw);
  blk_free(it);
}

/* The collator's way to dispose of an item: its blocks go back to their
 * worker. */
static void item_recycle(item *it, size_t nfields, blk_returns *r,
                         blk_returns *ri) {
  if (it->kind == ITEM_SAMPLE)
    for (size_t i = 0; i < nfields; i++)
      if (it->f[i].owned)
        blk_return(r, it->f[i].data);
  blk_return(r, it->raw);
  free(it->msg);
  blk_return(ri, it);
}

/* bp: the worker's pool, or NULL (a fresh block). */
static item *item_new(blk_pool *bp, int owner, size_t nfields, int kind) {
  size_t n = sizeof(item) + nfields * sizeof(item_field);
  item *it = blk_alloc(bp, owner, n);
  if (it) {
    memset(it, 0, n);
    it->kind = kind;
    it->valid = 1;
  }
  return it;
}

static int wanted_ext(const wds_loader *l, const char *ext) {
  for (size_t i = 0; i < l->nwanted; i++)
    if (strcmp(l->wanted[i], ext) == 0)
      return 1;
  return 0;
}

static raw_sample *raw_copy(const wds_loader *l, blk_pool *bp, int owner,
                            const wds_sample *s, size_t shard) {
  size_t n = 0, bytes = strlen(s->key) + 1, data = 0;
  for (size_t i = 0; i < s->field_count; i++)
    if (wanted_ext(l, s->fields[i].ext)) {
      n++;
      bytes += strlen(s->fields[i].ext) + 1 + s->fields[i].size_bytes;
      data += s->fields[i].size_bytes;
    }
  size_t head = sizeof(raw_sample) + n * sizeof(raw_field);
  raw_sample *r = blk_alloc(bp, owner, head + bytes);
  if (!r)
    return NULL;
  char *p = (char *)r + head;
  r->shard = shard;
  r->hole = 0;
  r->data_bytes = data;
  r->nfields = n;
  r->f = (raw_field *)(r + 1);
  size_t klen = strlen(s->key) + 1;
  memcpy(p, s->key, klen);
  r->key = p;
  p += klen;
  size_t j = 0;
  for (size_t i = 0; i < s->field_count; i++) {
    const wds_field *f = &s->fields[i];
    if (!wanted_ext(l, f->ext))
      continue;
    size_t elen = strlen(f->ext) + 1;
    memcpy(p, f->ext, elen);
    r->f[j].ext = p;
    p += elen;
    if (f->size_bytes)
      memcpy(p, f->data, f->size_bytes);
    r->f[j].data = (const uint8_t *)p;
    r->f[j].size = f->size_bytes;
    p += f->size_bytes;
    j++;
  }
  return r;
}

static raw_sample *raw_hole(blk_pool *bp, int owner, size_t shard) {
  raw_sample *r = blk_alloc(bp, owner, sizeof *r + 1);
  if (!r)
    return NULL;
  memset(r, 0, sizeof *r + 1);
  r->shard = shard;
  r->hole = 1;
  r->key = (const char *)(r + 1); /* "" */
  return r;
}

/* ---- worker: the sample source --------------------------------------------
 */

typedef struct source {
  worker *w;
  wds_reader *rd;
  size_t piece;  /* next piece (plain, exact) */
  size_t shard;  /* shard being read */
  uint64_t want; /* samples wanted from it (exact), or TO_END */
  uint64_t got;
  uint64_t holes; /* fill samples still to emit */
  wds__rng draw;  /* resampled shard draws */
  uint64_t empty_draws;
  uint64_t read_ns, bytes, shards; /* stats not yet published */
  uint64_t begin;                  /* exact: first sample of the piece */
  uint64_t before; /* samples read before the piece: begin, unless the
                      shard ended (or failed) first */
  int failed;      /* a read error ended the shard (already reported) */
  int to_end;      /* exact: the piece ends where the shard's count does */
  int done;
  char last_err[WDS__ERR_SIZE];
} source;

/* Everything a worker needs for an error item. */
static item *error_item(size_t nfields, int status, const char *msg) {
  item *it = item_new(NULL, 0, nfields, ITEM_ERROR);
  if (it) {
    it->status = status;
    it->msg = strdup(msg);
  }
  return it;
}

/* Reports a read error: returns 1 if the worker must stop (stop policy),
 * after putting an error item in *fatal. */
static int read_error(source *src, int status, const char *msg, item **fatal) {
  wds_loader *l = src->w->run->l;
  if (l->cfg.on_error == WDS_ON_ERROR_STOP || status == WDS_ERR_CANCELLED) {
    *fatal = error_item(l->nfields, status, msg);
    return 1;
  }
  snprintf(src->last_err, sizeof src->last_err, "%s", msg);
  note_skip(l, "skipped", msg);
  return 0;
}

static void source_close_reader(source *src) {
  if (src->rd) {
    wds_reader_close(src->rd);
    src->rd = NULL;
  }
}

/* A reader of one shard, as the workers and the counting pass open it: the
 * loader's limits, and reads that its wake token interrupts. */
static int open_shard_reader(wds_loader *l, size_t shard, wds_reader **out) {
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  const char *url = l->urls.urls[shard];
  rc.urls = &url;
  rc.url_count = 1;
  rc.max_sample_bytes = l->cfg.max_sample_bytes;
  rc.buffer_size_bytes = l->cfg.read_buffer_bytes;
  rc.read_timeout_ms = l->cfg.read_timeout_ms;
  rc.max_window_bytes = l->cfg.max_window_bytes;
  return wds__reader_open(&rc, &l->wake, out);
}

static int source_open(source *src, size_t shard, uint64_t begin, uint64_t end,
                       item **fatal) {
  wds_loader *l = src->w->run->l;
  src->shard = shard;
  src->got = 0;
  src->want = end == WDS__TO_END ? WDS__TO_END : end - begin;
  src->begin = begin;
  src->before = 0;
  src->failed = 0;
  src->to_end = l->counts && end != WDS__TO_END && end == l->counts[shard];
  src->shards++;
  if (open_shard_reader(l, shard, &src->rd) != WDS_OK) {
    char msg[WDS__ERR_SIZE];
    snprintf(msg, sizeof msg, "%s", wds_open_error());
    src->rd = NULL;
    return read_error(src, WDS_ERR_OPEN, msg, fatal) ? -1 : 0;
  }
  /* Samples before the piece are read and dropped: tar has no index. */
  for (; src->before < begin && !atomic_load(&src->w->run->abort);) {
    const wds_sample *s;
    int st = wds_reader_next(src->rd, &s);
    if (st == WDS_OK) {
      src->before++;
      continue;
    }
    if (st == WDS_EOF)
      break;
    if (read_error(src, st, wds_reader_error(src->rd), fatal))
      return -1;
    if (st != WDS_ERR_DUPLICATE) { /* the duplicate was not a sample */
      src->failed = 1;
      break;
    }
  }
  return 0;
}

/* Where the exact mode's counts came from, for messages. */
static const char *count_source(const wds_loader *l, char *buf, size_t n) {
  if (!l->cfg.index_path)
    return "the counting pass";
  snprintf(buf, n, "the index %.300s", l->cfg.index_path);
  return buf;
}

/* Exact mode, at the counted end of a shard: one more sample means the count
 * is wrong, and samples would silently go unread. */
static int source_check_end(source *src, item **fatal) {
  wds_loader *l = src->w->run->l;
  const wds_sample *s;
  int st = wds_reader_next(src->rd, &s);
  if (st == WDS_EOF)
    return 0;
  char msg[WDS__ERR_SIZE], from[320];
  if (st == WDS_OK) {
    /* The true count, for the message: read on to the end (this shard's
     * later samples are dropped either way). */
    char key[101];
    snprintf(key, sizeof key, "%s", s->key);
    uint64_t n = l->counts[src->shard] + 1;
    int more = WDS_OK;
    while (!atomic_load(&src->w->run->abort) &&
           (more = wds_reader_next(src->rd, &s)) != WDS_EOF) {
      if (more == WDS_OK)
        n++;
      else if (more != WDS_ERR_DUPLICATE)
        break;
    }
    snprintf(msg, sizeof msg,
             "%.500s: has more samples than the %llu %s gives (%s%llu); "
             "sample \"%s\" and later are not read",
             l->urls.urls[src->shard],
             (unsigned long long)l->counts[src->shard],
             count_source(l, from, sizeof from),
             more == WDS_EOF ? "" : "at least ", (unsigned long long)n, key);
  } else
    snprintf(msg, sizeof msg, "%s", wds_reader_error(src->rd));
  return read_error(src, st == WDS_OK ? WDS_ERR_CORRUPT : st, msg, fatal) ? -1
                                                                          : 0;
}

/* Next raw sample for the shuffle buffer: *out set, or NULL at the end.
 * Returns -1 with *fatal set when the worker must stop. */
static int source_next(source *src, raw_sample **out, item **fatal) {
  worker *w = src->w;
  run *rn = w->run;
  wds_loader *l = rn->l;
  const wds__worker_plan *wp = &rn->plan.w[w->index];
  *out = NULL;
  for (;;) {
    if (src->holes > 0) {
      src->holes--;
      if (!(*out = raw_hole(w->pool, w->index, src->shard)))
        goto nomem;
      return 0;
    }
    if (src->done || atomic_load(&rn->abort))
      return 0;
    if (!src->rd) {
      if (l->cfg.mode == WDS_MODE_RESAMPLED) {
        uint64_t limit = 2 * (uint64_t)l->urls.count + 100;
        if (src->empty_draws >= limit) {
          char msg[WDS__ERR_SIZE];
          snprintf(msg, sizeof msg,
                   "resampled mode: %llu shards drawn in a row gave no "
                   "sample (last error: %.900s)",
                   (unsigned long long)src->empty_draws,
                   src->last_err[0] ? src->last_err : "none");
          *fatal = error_item(l->nfields, WDS_ERR_CORRUPT, msg);
          return -1;
        }
        size_t shard = (size_t)wds__rng_below(&src->draw, l->urls.count);
        if (source_open(src, shard, 0, WDS__TO_END, fatal) != 0)
          return -1;
      } else {
        if (src->piece == wp->count) {
          src->done = 1;
          return 0;
        }
        const wds__piece *pc = &wp->pieces[src->piece++];
        if (source_open(src, pc->shard, pc->begin, pc->end, fatal) != 0)
          return -1;
      }
      if (!src->rd) { /* open failed, skipped */
        src->empty_draws++;
        if (src->want != WDS__TO_END)
          src->holes = src->want;
        continue;
      }
    }
    if (src->want != WDS__TO_END && src->got == src->want) {
      if (src->to_end && source_check_end(src, fatal) != 0)
        return -1;
      source_close_reader(src);
      continue;
    }
    const wds_sample *s;
    uint64_t t0 = now_ns();
    int st = wds_reader_next(src->rd, &s);
    src->read_ns += now_ns() - t0;
    if (st == WDS_OK) {
      src->got++;
      src->empty_draws = 0;
      raw_sample *r = raw_copy(l, w->pool, w->index, s, src->shard);
      if (!r)
        goto nomem;
      src->bytes += r->data_bytes;
      *out = r;
      return 0;
    }
    if (st != WDS_EOF) {
      if (read_error(src, st, wds_reader_error(src->rd), fatal))
        return -1;
      if (st == WDS_ERR_DUPLICATE)
        continue; /* the reader goes on within the shard */
    }
    /* End of the shard (or an error that ended it). */
    if (src->got == 0)
      src->empty_draws++;
    if (st == WDS_EOF && src->want != WDS__TO_END && src->got < src->want &&
        !src->failed) {
      /* Exact mode: fewer samples than counted (a stale index, a shard
       * changed since): an error, and under skip the rank is topped up.
       * The shard's count, not the piece's end, and where it really
       * ended (perhaps before the piece began). */
      char msg[WDS__ERR_SIZE], from[320];
      snprintf(msg, sizeof msg,
               "%.500s: ended after %llu samples, but %s promised %llu",
               l->urls.urls[src->shard],
               (unsigned long long)(src->before + src->got),
               count_source(l, from, sizeof from),
               (unsigned long long)l->counts[src->shard]);
      if (read_error(src, WDS_ERR_TRUNCATED, msg, fatal))
        return -1;
    }
    if (src->want != WDS__TO_END && src->got < src->want)
      src->holes = src->want - src->got;
    source_close_reader(src);
  }
nomem:
  *fatal = error_item(l->nfields, WDS_ERR_NOMEM, "out of memory");
  return -1;
}

/* ---- worker: shuffle buffer (WebDataset's _shuffle) ------------------------
 */

typedef struct shuffler {
  raw_sample **buf;
  size_t len, cap, initial;
  uint64_t bytes, cap_bytes; /* field data held, and its bound */
  int src_done;
  wds__rng rng;
} shuffler;

static void shuffle_add(shuffler *sh, raw_sample *s) {
  sh->buf[sh->len++] = s;
  sh->bytes += s->data_bytes;
}

static raw_sample *shuffle_pick(shuffler *sh) {
  size_t k = (size_t)wds__rng_below(&sh->rng, sh->len);
  raw_sample *s = sh->buf[k];
  sh->buf[k] = sh->buf[--sh->len];
  sh->bytes -= s->data_bytes;
  return s;
}

/* Per input: add it, add one more while under capacity, and emit a random
 * element once `initial` are buffered; at the end drain in random order.
 * Capacity is counted in samples and in bytes: at cap_bytes the buffer is
 * full (no second add) and, like one at `initial`, emits, so it never holds
 * much more than cap_bytes plus one sample. Both depend on the data only,
 * so the order stays a pure function of the configuration.
 * Returns 0 with *out (NULL at the end) or -1 with *fatal. */
static int shuffle_next(shuffler *sh, source *src, raw_sample **out,
                        item **fatal) {
  *out = NULL;
  if (sh->cap <= 1)
    return source_next(src, out, fatal);
  for (;;) {
    if (!sh->src_done) {
      raw_sample *s;
      if (source_next(src, &s, fatal) != 0)
        return -1;
      if (!s) {
        sh->src_done = 1;
        continue;
      }
      shuffle_add(sh, s);
      if (sh->len < sh->cap && sh->bytes < sh->cap_bytes) {
        if (source_next(src, &s, fatal) != 0)
          return -1;
        if (s)
          shuffle_add(sh, s);
        else
          sh->src_done = 1;
      }
      if (sh->len >= sh->initial || sh->bytes >= sh->cap_bytes) {
        *out = shuffle_pick(sh);
        return 0;
      }
      continue;
    }
    if (sh->len > 0)
      *out = shuffle_pick(sh);
    return 0;
  }
}

/* ---- worker: decoding ---------------------------------------------------- */

static const raw_field *find_field(const raw_sample *r, const out_field *of) {
  for (size_t a = 0; a < of->nalts; a++)
    for (size_t i = 0; i < r->nfields; i++)
      if (strcmp(r->f[i].ext, of->alts[a]) == 0)
        return &r->f[i];
  return NULL;
}

/* Row memory for a decoder: a block of the worker's pool. */
typedef struct row_alloc {
  blk_pool *pool;
  int owner;
  int failed;
} row_alloc;

static void *alloc_row(void *ctx, size_t size_bytes) {
  row_alloc *a = ctx;
  void *p = blk_alloc(a->pool, a->owner, size_bytes);
  if (!p)
    a->failed = 1;
  return p;
}

/* Decodes every output field of r into it, each with its decoder from the
 * table; on failure returns the status with a message naming sample, shard
 * and field in e. aug_key: the worker's augmentation key for the epoch. */
static int decode_item(wds_loader *l, wds__decoder *dec, worker *w,
                       uint64_t aug_key, uint64_t seq, item *it, wds__err *e) {
  const raw_sample *r = it->raw;
  const char *url = l->urls.urls[r->shard];
  row_alloc ra = {w->pool, w->index, 0};
  wds__decode_call call = {dec, 0, alloc_row, &ra};
  for (size_t i = 0; i < l->nfields; i++) {
    const out_field *of = &l->fields[i];
    const raw_field *rf = find_field(r, of);
    if (!rf) {
      char have[256] = "";
      size_t n = 0;
      for (size_t k = 0; k < r->nfields && n < sizeof have - 1; k++)
        n += (size_t)snprintf(have + n, sizeof have - n, "%s%s", k ? ", " : "",
                              r->f[k].ext);
      return wds__fail(e, WDS_ERR_FORMAT,
                       "%s: sample \"%s\" has no field '%s' (has: %s)", url,
                       r->key, of->name, r->nfields ? have : "nothing wanted");
    }
    call.rng_key = wds__mix64(aug_key ^ wds__mix64(wds__mix64(seq) ^ i));
    int rc =
        of->def->decode(&of->opts, &call, rf->data, rf->size, &it->f[i], e);
    if (rc != WDS_OK) {
      if (ra.failed) /* the worker's own failure, not the field's */
        return rc;
      wds__err_prefix(e, "%s: sample \"%s\": field '%s'", url, r->key, rf->ext);
      return rc;
    }
  }
  return WDS_OK;
}

/* Publishes a worker's stage times since *mark: reading and decoding as
 * measured, the rest of its busy time (copying samples out of the reader,
 * the shuffle buffer, making items) as "shuffle". Per chunk, not per
 * sample: shared counters written per sample cost more than they measure. */
static void worker_stats(wds_loader *l, source *src, uint64_t *decode_ns,
                         uint64_t *mark) {
  uint64_t now = now_ns(), busy = now - *mark;
  uint64_t known = src->read_ns + *decode_ns;
  STAT_ADD(l, read_ns, src->read_ns);
  STAT_ADD(l, decode_ns, *decode_ns);
  STAT_ADD(l, shuffle_ns, busy > known ? busy - known : 0);
  STAT_ADD(l, bytes, src->bytes);
  STAT_ADD(l, shards, src->shards);
  src->read_ns = src->bytes = src->shards = 0;
  *decode_ns = 0;
  *mark = now;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  run *rn = w->run;
  wds_loader *l = rn->l;
  const wds__worker_plan *wp = &rn->plan.w[w->index];
  uint64_t W = (uint64_t)l->pin.workers;
  uint64_t aug_key = wds__rng_key(l->cfg.seed, WDS__STREAM_AUGMENT, rn->epoch,
                                  (uint64_t)l->pin.rank, (uint64_t)w->index);
  item *fatal = NULL;
  int failed = 0; /* the loop ended on an error (fatal may be NULL if even
                     its item could not be allocated) */
  source src;
  shuffler sh;
  wds__decoder *dec = wds__decoder_new();
  memset(&src, 0, sizeof src);
  memset(&sh, 0, sizeof sh);
  src.w = w;
  wds__rng_init(&src.draw,
                wds__rng_key(l->cfg.seed, WDS__STREAM_RESAMPLE, rn->epoch,
                             (uint64_t)l->pin.rank, (uint64_t)w->index));
  wds__rng_init(&sh.rng,
                wds__rng_key(l->cfg.seed, WDS__STREAM_SHUFFLE, rn->epoch,
                             (uint64_t)l->pin.rank, (uint64_t)w->index));
  sh.cap = l->cfg.shuffle_buffer;
  sh.cap_bytes = l->cfg.shuffle_buffer_bytes;
  sh.initial = l->cfg.shuffle_initial == 0 ||
                       l->cfg.shuffle_initial > l->cfg.shuffle_buffer
                   ? l->cfg.shuffle_buffer
                   : l->cfg.shuffle_initial;
  if ((sh.cap > 1 && !(sh.buf = malloc(sh.cap * sizeof *sh.buf))) || !dec)
    failed = 1;

  uint64_t mark = now_ns(), decode_ns = 0;
  for (uint64_t seq = 0; !failed && seq < wp->quota; seq++) {
    raw_sample *r;
    if (shuffle_next(&sh, &src, &r, &fatal) != 0) {
      failed = 1;
      break;
    }
    if (!r)
      break;
    int token = seq * W + (uint64_t)w->index < rn->skip;
    item *it = item_new(w->ipool, w->index, l->nfields,
                        token ? ITEM_TOKEN : ITEM_SAMPLE);
    if (!it) {
      blk_free(r);
      failed = 1;
      break;
    }
    it->raw = r;
    if (!token && r->hole) {
      it->valid = 0;
    } else if (!token) {
      wds__err e;
      uint64_t t1 = l->needs_decode ? now_ns() : 0;
      int rc = decode_item(l, dec, w, aug_key, seq, it, &e);
      if (l->needs_decode)
        decode_ns += now_ns() - t1;
      if (rc != WDS_OK) {
        if (l->cfg.on_error == WDS_ON_ERROR_STOP || rc == WDS_ERR_NOMEM) {
          fatal = error_item(l->nfields, rc, e.msg);
          failed = 1;
          item_free(it, l->nfields);
          break;
        }
        /* Skip: the row stays, zero-filled and marked invalid. */
        for (size_t i = 0; i < l->nfields; i++)
          if (it->f[i].owned) {
            blk_free(it->f[i].data);
            it->f[i].data = NULL;
          }
        memset(it->f, 0, l->nfields * sizeof *it->f);
        it->valid = 0;
        it->status = rc;
        it->msg = strdup(e.msg);
        note_skip(l, "skipped", e.msg);
      }
    }
    w->pending[w->npending++] = it;
    if (w->npending == l->chunk) {
      worker_stats(l, &src, &decode_ns, &mark);
      if (queue_push_many(&w->q, w->pending, w->npending, &rn->abort) != 0)
        break; /* aborted: run_stop frees what is pending */
      w->npending = 0;
      mark = now_ns(); /* time blocked on the queue is nobody's stage */
    }
  }
  /* The quota can be met without another read: check the last shard's
   * count too. */
  if (!failed && src.rd && src.to_end && src.got == src.want &&
      source_check_end(&src, &fatal) != 0)
    failed = 1;
  worker_stats(l, &src, &decode_ns, &mark);
  /* The worker's last word, always delivered: its error, or the end. The
   * terminal item was allocated by run_start, so running out of memory
   * cannot turn an error into a silent early end (a short epoch on one
   * rank would hang an all-reduce). */
  item *last = w->terminal;
  w->terminal = NULL;
  if (fatal) {
    item_free(last, l->nfields);
    last = fatal;
  } else if (failed) {
    last->kind = ITEM_ERROR;
    last->status = WDS_ERR_NOMEM;
  }
  if (w->npending < l->chunk)
    w->pending[w->npending++] = last;
  else
    item_free(last, l->nfields);
  if (queue_push_many(&w->q, w->pending, w->npending, &rn->abort) == 0)
    w->npending = 0;
  source_close_reader(&src);
  for (size_t i = 0; i < sh.len; i++)
    blk_free(sh.buf[i]);
  free(sh.buf);
  wds__decoder_free(dec);
  return NULL;
}

/* ---- collator --------------------------------------------------------- */

static int slot_reserve(wds_loader *l, slot_buf *b, size_t need, size_t used) {
  if (need <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < need)
    cap *= 2;
  void *m = l->alloc.alloc(l->alloc.ctx, cap);
  if (!m)
    return -1;
  if (used)
    memcpy(m, b->mem, used);
  if (b->mem)
    l->alloc.free(l->alloc.ctx, b->mem, b->cap);
  STAT_ADD(l, pool_bytes, cap - b->cap);
  b->mem = m;
  b->cap = cap;
  return 0;
}

static void post_ready(wds_loader *l, int kind, int slot_index) {
  pthread_mutex_lock(&l->mu);
  size_t cap = (size_t)l->nslots + 2;
  l->ready[(l->ready_head + l->ready_len) % cap] =
      (ready_entry){kind, slot_index};
  l->ready_len++;
  if (kind == READY_SLOT)
    l->slots[slot_index].state = SLOT_READY;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static void post_error(wds_loader *l, int status, const char *msg) {
  pthread_mutex_lock(&l->mu);
  l->run_error_status = status;
  snprintf(l->run_error, sizeof l->run_error, "%s", msg);
  pthread_mutex_unlock(&l->mu);
  post_ready(l, READY_ERROR, -1);
}

static int acquire_slot(wds_loader *l, run *rn) {
  int found = -1;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    if (atomic_load(&rn->abort))
      break;
    for (int i = 0; i < l->nslots; i++)
      if (l->slots[i].state == SLOT_FREE) {
        found = i;
        break;
      }
    if (found >= 0) {
      l->slots[found].state = SLOT_FILLING;
      break;
    }
    l->collator_waits = 1;
    pthread_cond_broadcast(&l->cv); /* a caller holding every slot */
    pthread_cond_wait(&l->cv, &l->mu);
    l->collator_waits = 0;
  }
  pthread_mutex_unlock(&l->mu);
  return found;
}

/* Per-batch state while a slot fills. */
typedef struct filling {
  int slot;
  size_t rows;
  int *first_set; /* per field: dtype/shape fixed by a valid row */
} filling;

static void begin_batch(wds_loader *l, slot *s, filling *fl, run *rn,
                        uint64_t index) {
  fl->rows = 0;
  memset(fl->first_set, 0, l->nfields * sizeof *fl->first_set);
  s->key_len = 0;
  s->batch.epoch = rn->epoch;
  s->batch.index = index;
  for (size_t i = 0; i < l->nfields; i++) {
    wds_batch_field *bf = &s->bf[i];
    const out_field *of = &l->fields[i];
    bf->name = of->name;
    bf->size_bytes = 0;
    bf->dtype = of->row.dtype;
    bf->ndim = of->row.ndim + 1;
    memcpy(bf->shape + 1, of->row.shape,
           (size_t)of->row.ndim * sizeof *bf->shape);
    bf->row_bytes = of->row.row_bytes;
    if (of->def->layout == WDS__ROW_VARIABLE) {
      s->offsets[i][0] = 0;
      bf->offsets = s->offsets[i];
    } else {
      bf->offsets = NULL;
    }
  }
}

/* Appends key as row's key. from_arena: key is the arena's own text at that
 * offset (padding repeats a row): it is located again after the arena may
 * have moved. */
static int key_append_at(slot *s, size_t row, const char *key,
                         size_t from_arena) {
  size_t n = strlen(key) + 1;
  if (s->key_len + n > s->key_cap) {
    size_t cap = s->key_cap ? s->key_cap : 4096;
    while (cap < s->key_len + n)
      cap *= 2;
    char *a = realloc(s->key_arena, cap);
    if (!a)
      return -1;
    s->key_arena = a;
    s->key_cap = cap;
  }
  if (from_arena != SIZE_MAX)
    key = s->key_arena + from_arena;
  memcpy(s->key_arena + s->key_len, key, n);
  s->key_off[row] = s->key_len;
  s->key_len += n;
  return 0;
}

/* Writes item `it` as row fl->rows of slot s. A shape mismatch of an npy
 * field is an error naming the sample (returned), or under the skip policy
 * turns the row invalid. */
static int key_append(slot *s, size_t row, const char *key) {
  return key_append_at(s, row, key, SIZE_MAX);
}

static int put_row(wds_loader *l, slot *s, filling *fl, item *it, wds__err *e) {
  size_t row = fl->rows;
  const raw_sample *r = it->raw;
  int valid = it->valid;
  if (valid) {
    for (size_t i = 0; i < l->nfields; i++) {
      const item_field *f = &it->f[i];
      wds_batch_field *bf = &s->bf[i];
      if (l->fields[i].def->layout != WDS__ROW_FIRST || !fl->first_set[i])
        continue;
      int same = bf->dtype == f->dtype && bf->ndim == f->ndim + 1;
      for (int d = 0; same && d < f->ndim; d++)
        same = bf->shape[d + 1] == f->shape[d];
      if (!same) {
        wds__fail(e, WDS_ERR_FORMAT,
                  "%s: sample \"%s\": field '%s': %s of a different dtype "
                  "or shape than the batch's first row",
                  l->urls.urls[r->shard], r->key, l->fields[i].name,
                  l->fields[i].def->row_noun);
        if (l->cfg.on_error == WDS_ON_ERROR_STOP)
          return WDS_ERR_FORMAT;
        note_skip(l, "skipped", e->msg);
        valid = 0;
        break;
      }
    }
  }
  if (key_append(s, row, r ? r->key : "") != 0)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  s->urls[row] = r ? l->urls.urls[r->shard] : "";
  s->valid[row] = (uint8_t)valid;
  if (!valid)
    STAT_ADD(l, fill, 1);
  size_t bs = l->cfg.batch_size;
  for (size_t i = 0; i < l->nfields; i++) {
    const item_field *f = &it->f[i];
    wds_batch_field *bf = &s->bf[i];
    slot_buf *b = &s->buf[i];
    switch (l->fields[i].def->layout) {
    case WDS__ROW_FIRST:
      if (valid && !fl->first_set[i]) {
        fl->first_set[i] = 1;
        bf->dtype = f->dtype;
        bf->ndim = f->ndim + 1;
        memcpy(bf->shape + 1, f->shape, (size_t)f->ndim * sizeof(int64_t));
        bf->row_bytes = f->size;
        if (slot_reserve(l, b, bs * bf->row_bytes, 0) != 0)
          return wds__fail(e, WDS_ERR_NOMEM, "out of memory (batch slot)");
        memset(b->mem, 0, row * bf->row_bytes); /* earlier invalid rows */
      }
      /* fall through */
    case WDS__ROW_FIXED: {
      if (bf->row_bytes == 0)
        break;
      uint8_t *dst = (uint8_t *)b->mem + row * bf->row_bytes;
      if (!valid)
        memset(dst, 0, bf->row_bytes);
      else
        memcpy(dst, f->data, bf->row_bytes);
      break;
    }
    case WDS__ROW_VARIABLE: {
      uint64_t at = s->offsets[i][row];
      size_t n = valid ? f->size : 0;
      if (slot_reserve(l, b, (size_t)at + n, (size_t)at) != 0)
        return wds__fail(e, WDS_ERR_NOMEM, "out of memory (batch slot)");
      if (n)
        memcpy((uint8_t *)b->mem + at, f->data, n);
      s->offsets[i][row + 1] = at + n;
      break;
    }
    }
  }
  fl->rows++;
  return WDS_OK;
}

/* Repeats the first rows, marked invalid, up to batch_size (WDS_LAST_PAD). */
static int pad_batch(wds_loader *l, slot *s, filling *fl, wds__err *e) {
  size_t have = fl->rows;
  for (size_t row = have; row < l->cfg.batch_size; row++) {
    size_t src = (row - have) % have;
    if (key_append_at(s, row, s->key_arena + s->key_off[src],
                      s->key_off[src]) != 0)
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    s->urls[row] = s->urls[src];
    s->valid[row] = 0;
    STAT_ADD(l, fill, 1);
    for (size_t i = 0; i < l->nfields; i++) {
      wds_batch_field *bf = &s->bf[i];
      slot_buf *b = &s->buf[i];
      if (l->fields[i].def->layout == WDS__ROW_VARIABLE) {
        uint64_t a = s->offsets[i][src], z = s->offsets[i][src + 1];
        uint64_t at = s->offsets[i][row];
        if (slot_reserve(l, b, (size_t)(at + z - a), (size_t)at) != 0)
          return wds__fail(e, WDS_ERR_NOMEM, "out of memory (batch slot)");
        memcpy((uint8_t *)b->mem + at, (uint8_t *)b->mem + a, (size_t)(z - a));
        s->offsets[i][row + 1] = at + z - a;
      } else if (bf->row_bytes) {
        memcpy((uint8_t *)b->mem + row * bf->row_bytes,
               (uint8_t *)b->mem + src * bf->row_bytes, bf->row_bytes);
      }
    }
  }
  fl->rows = l->cfg.batch_size;
  return WDS_OK;
}

static void finish_batch(wds_loader *l, slot *s, filling *fl) {
  size_t rows = fl->rows;
  s->batch.rows = rows;
  for (size_t r = 0; r < rows; r++)
    s->keys[r] = s->key_arena + s->key_off[r];
  for (size_t i = 0; i < l->nfields; i++) {
    wds_batch_field *bf = &s->bf[i];
    bf->shape[0] = (int64_t)rows;
    bf->data = s->buf[i].mem;
    bf->size_bytes = l->fields[i].def->layout == WDS__ROW_VARIABLE
                         ? (size_t)s->offsets[i][rows]
                         : rows * bf->row_bytes;
  }
}

/* The collator's view of one worker: the chunk it took last. */
typedef struct inbox {
  item **v;
  size_t len, at;
  blk_returns back, back_items;
} inbox;

static item *inbox_next(run *rn, int w, inbox *in, uint64_t *waited) {
  if (in->at == in->len) {
    uint64_t t0 = now_ns();
    in->at = 0;
    in->len = queue_pop_many(&rn->w[w].q, in->v, rn->l->chunk, &rn->abort);
    *waited += now_ns() - t0;
    if (in->len == 0)
      return NULL; /* aborted */
  }
  return in->v[in->at++];
}

static void return_blocks(run *rn, inbox *in) {
  for (int w = 0; w < rn->l->pin.workers; w++) {
    blk_flush(rn->w[w].pool, &in[w].back);
    blk_flush(rn->w[w].ipool, &in[w].back_items);
  }
}

static void *collator_main(void *arg) {
  run *rn = arg;
  wds_loader *l = rn->l;
  int W = l->pin.workers;
  int *active = malloc((size_t)W * sizeof *active);
  inbox *in = calloc((size_t)W, sizeof *in);
  filling fl = {-1, 0, calloc(l->nfields ? l->nfields : 1, sizeof(int))};
  size_t bs = l->cfg.batch_size;
  uint64_t pos = 0, index = rn->skip / bs;
  uint64_t target = rn->plan.rank_samples;
  int n_active = W, cur = 0;
  uint64_t mark = now_ns(), waited = 0;
  wds__err e;
  if (!active || !in || !fl.first_set) {
    post_error(l, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (int i = 0; i < W; i++)
    if (!(in[i].v = malloc(l->chunk * sizeof *in[i].v))) {
      post_error(l, WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
  if (l->cfg.mode == WDS_MODE_PLAIN && l->cfg.samples_per_epoch)
    target = l->cfg.samples_per_epoch;
  for (int i = 0; i < W; i++)
    active[i] = i;
  while (pos < target && n_active > 0) {
    int wi = active[cur];
    item *it = inbox_next(rn, wi, &in[wi], &waited);
    if (!it)
      goto done; /* aborted */
    if (it->kind == ITEM_END) {
      item_free(it, l->nfields);
      memmove(active + cur, active + cur + 1,
              (size_t)(n_active - cur - 1) * sizeof *active);
      if (--n_active > 0)
        cur %= n_active;
      continue;
    }
    if (it->kind == ITEM_ERROR) {
      post_error(l, it->status, it->msg ? it->msg : wds_strerror(it->status));
      item_free(it, l->nfields);
      goto done;
    }
    cur = (cur + 1) % n_active;
    if (pos++ < rn->skip) {
      item_recycle(it, l->nfields, &in[wi].back, &in[wi].back_items);
      if (pos % bs == 0)
        return_blocks(rn, in);
      continue;
    }
    if (fl.slot < 0) {
      uint64_t t0 = now_ns();
      fl.slot = acquire_slot(l, rn);
      uint64_t dt = now_ns() - t0;
      waited += dt;
      STAT_ADD(l, slot_wait_ns, dt);
      if (fl.slot < 0) {
        item_free(it, l->nfields);
        goto done;
      }
      begin_batch(l, &l->slots[fl.slot], &fl, rn, index);
    }
    int rc = put_row(l, &l->slots[fl.slot], &fl, it, &e);
    item_recycle(it, l->nfields, &in[wi].back, &in[wi].back_items);
    if (rc != WDS_OK) {
      post_error(l, rc, e.msg);
      goto done;
    }
    if (fl.rows == bs) {
      finish_batch(l, &l->slots[fl.slot], &fl);
      post_ready(l, READY_SLOT, fl.slot);
      fl.slot = -1;
      index++;
      return_blocks(rn, in);
      /* The collator's busy time: wall time less its waits, per batch. */
      uint64_t now = now_ns();
      STAT_ADD(l, batch_ns, now - mark > waited ? now - mark - waited : 0);
      mark = now;
      waited = 0;
    }
  }
  if (l->cfg.mode != WDS_MODE_PLAIN) {
    /* Each worker yields exactly its quota, then its last word: an error
     * found after its last sample (a shard longer than its count) is read
     * here, before the epoch may end. */
    for (int k = 0; k < n_active; k++) {
      item *it = inbox_next(rn, active[k], &in[active[k]], &waited);
      if (!it)
        goto done; /* aborted */
      int kind = it->kind;
      if (kind == ITEM_ERROR)
        post_error(l, it->status, it->msg ? it->msg : wds_strerror(it->status));
      item_free(it, l->nfields);
      if (kind == ITEM_ERROR)
        goto done;
    }
  }
  if (fl.slot >= 0) {
    if (l->cfg.last_batch == WDS_LAST_DROP || fl.rows == 0) {
      pthread_mutex_lock(&l->mu);
      l->slots[fl.slot].state = SLOT_FREE;
      pthread_cond_broadcast(&l->cv);
      pthread_mutex_unlock(&l->mu);
    } else {
      if (l->cfg.last_batch == WDS_LAST_PAD &&
          pad_batch(l, &l->slots[fl.slot], &fl, &e) != WDS_OK) {
        post_error(l, WDS_ERR_NOMEM, e.msg);
        goto done;
      }
      finish_batch(l, &l->slots[fl.slot], &fl);
      post_ready(l, READY_SLOT, fl.slot);
    }
    fl.slot = -1;
  }
  post_ready(l, READY_EOF, -1);
done:
  if (fl.slot >= 0) {
    pthread_mutex_lock(&l->mu);
    l->slots[fl.slot].state = SLOT_FREE;
    pthread_mutex_unlock(&l->mu);
  }
  for (int i = 0; in && i < W; i++) {
    for (size_t k = in[i].at; k < in[i].len; k++)
      item_free(in[i].v[k], l->nfields);
    for (size_t k = 0; k < in[i].back.len; k++)
      blk_free(in[i].back.v[k]);
    for (size_t k = 0; k < in[i].back_items.len; k++)
      blk_free(in[i].back_items.v[k]);
    free(in[i].back.v);
    free(in[i].back_items.v);
    free(in[i].v);
  }
  free(in);
  free(fl.first_set);
  free(active);
  return NULL;
}

/* ---- runs -------------------------------------------------------------- */

static void run_stop(wds_loader *l) {
  run *rn = l->cur;
  if (!rn)
    return;
  atomic_store(&rn->abort, 1);
  wds__cancel_set(&l->wake); /* workers blocked in a read */
  for (int i = 0; i < l->pin.workers; i++)
    if (rn->w[i].q.ring)
      queue_wake(&rn->w[i].q);
  pthread_mutex_lock(&l->mu);
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->pin.workers; i++)
    if (rn->w[i].started)
      pthread_join(rn->w[i].thread, NULL);
  if (rn->collator_started)
    pthread_join(rn->collator, NULL);
  /* No reader is open now. A cancel stores its flag before setting the
   * token, so one that comes during the reset is not lost. */
  wds__cancel_reset(&l->wake);
  if (atomic_load(&l->cancelled))
    wds__cancel_set(&l->wake);
  for (int i = 0; i < l->pin.workers; i++) {
    queue_destroy(&rn->w[i].q, l->nfields);
    for (size_t k = 0; k < rn->w[i].npending; k++)
      item_free(rn->w[i].pending[k], l->nfields);
    free(rn->w[i].pending);
    item_free(rn->w[i].terminal, l->nfields);
  }
  /* Batches prepared but not delivered go back to the pool. */
  pthread_mutex_lock(&l->mu);
  for (int i = 0; i < l->nslots; i++)
    if (l->slots[i].state == SLOT_READY || l->slots[i].state == SLOT_FILLING)
      l->slots[i].state = SLOT_FREE;
  l->ready_len = 0;
  l->ready_head = 0;
  pthread_mutex_unlock(&l->mu);
  wds__plan_free(&rn->plan);
  free(rn->w);
  free(rn);
  l->cur = NULL;
}

static int run_start(wds_loader *l, uint64_t epoch, uint64_t skip) {
  wds__err e;
  run *rn = calloc(1, sizeof *rn);
  if (!rn)
    return wds__fail(&e, WDS_ERR_NOMEM, "out of memory");
  rn->l = l;
  rn->epoch = epoch;
  rn->skip = skip;
  atomic_init(&rn->abort, 0);
  l->cur = rn;
  int rc = wds__plan_epoch(&l->pin, epoch, &rn->plan, &e);
  if (rc != WDS_OK) {
    set_error(l, "%s", e.msg);
    l->cur = NULL;
    free(rn);
    return rc;
  }
  rn->w = calloc((size_t)l->pin.workers, sizeof *rn->w);
  if (!rn->w)
    goto nomem;
  for (int i = 0; i < l->pin.workers; i++) {
    rn->w[i].run = rn;
    rn->w[i].index = i;
    rn->w[i].pool = &l->pools[i];
    rn->w[i].ipool = &l->pools[l->cfg.workers + i];
    if (queue_init(&rn->w[i].q, l->queue_cap) != 0 ||
        !(rn->w[i].pending = malloc(l->chunk * sizeof(item *))) ||
        !(rn->w[i].terminal = item_new(NULL, 0, l->nfields, ITEM_END)))
      goto nomem;
  }
  for (int i = 0; i < l->pin.workers; i++) {
    if (pthread_create(&rn->w[i].thread, NULL, worker_main, &rn->w[i]) != 0)
      goto nothread;
    rn->w[i].started = 1;
  }
  if (pthread_create(&rn->collator, NULL, collator_main, rn) != 0)
    goto nothread;
  rn->collator_started = 1;
  return WDS_OK;
nothread:
  run_stop(l);
  set_error(l, "cannot start a thread");
  return WDS_ERR_NOMEM;
nomem:
  if (rn->w)
    for (int i = 0; i < l->pin.workers; i++) {
      queue_destroy(&rn->w[i].q, l->nfields);
      free(rn->w[i].pending);
      item_free(rn->w[i].terminal, l->nfields);
    }
  wds__plan_free(&rn->plan);
  free(rn->w);
  free(rn);
  l->cur = NULL;
  set_error(l, "out of memory");
  return WDS_ERR_NOMEM;
}

/* ---- open: configuration ---------------------------------------------- */

static void free_fields(wds_loader *l) {
  for (size_t i = 0; i < l->nfields; i++) {
    for (size_t a = 0; a < l->fields[i].nalts; a++)
      free(l->fields[i].alts[a]);
    free(l->fields[i].alts);
    free(l->fields[i].name);
  }
  free(l->fields);
  free(l->wanted);
  l->fields = NULL;
  l->wanted = NULL;
}

static int setup_fields(wds_loader *l, const wds_loader_config *cfg) {
  if (!cfg->fields || cfg->field_count == 0)
    return wds__open_fail(WDS_ERR_INVALID,
                          "wds_loader_open: no output fields (e.g. "
                          "\"jpg;png:rgb:224,cls\")");
  if (cfg->field_count > 256)
    return wds__open_fail(WDS_ERR_INVALID,
                          "wds_loader_open: %zu output fields (at most 256)",
                          cfg->field_count);
  l->fields = calloc(cfg->field_count, sizeof *l->fields);
  if (!l->fields)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  l->nfields = cfg->field_count;
  size_t total_alts = 0;
  for (size_t i = 0; i < cfg->field_count; i++) {
    const wds_field_spec *fs = &cfg->fields[i];
    out_field *of = &l->fields[i];
    if (!fs->name || !*fs->name)
      return wds__open_fail(WDS_ERR_INVALID,
                            "wds_loader_open: field %zu has no name", i);
    if (!(of->name = strdup(fs->name)))
      return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
    size_t n = 1;
    for (const char *p = fs->name; *p; p++)
      n += *p == ';';
    if (!(of->alts = calloc(n, sizeof *of->alts)))
      return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
    const char *p = fs->name;
    for (size_t a = 0; a < n; a++) {
      const char *q = strchr(p, ';');
      size_t len = q ? (size_t)(q - p) : strlen(p);
      if (len == 0)
        return wds__open_fail(WDS_ERR_INVALID,
                              "wds_loader_open: field \"%s\" has an empty "
                              "alternative",
                              fs->name);
      if (!(of->alts[a] = strndup(p, len)))
        return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
      for (char *c = of->alts[a]; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
          *c = (char)(*c - 'A' + 'a');
      of->nalts++;
      p = q ? q + 1 : p + len;
    }
    total_alts += n;
    of->def = fs->decode == WDS_DECODE_AUTO ? wds__decoder_for_ext(of->alts[0])
                                            : wds__decoder_get(fs->decode);
    if (!of->def)
      return wds__open_fail(WDS_ERR_INVALID,
                            "wds_loader_open: field \"%s\": unknown decode %d",
                            fs->name, (int)fs->decode);
    of->opts.channels = fs->channels ? fs->channels : 3;
    of->opts.width = fs->width ? fs->width : cfg->image_size;
    of->opts.height = fs->height ? fs->height : cfg->image_size;
    of->opts.crop = cfg->crop;
    of->opts.scale_min = cfg->crop_scale_min;
    of->opts.scale_max = cfg->crop_scale_max;
    wds__err e;
    if (of->def->check_opts && of->def->check_opts(&of->opts, &e) != WDS_OK)
      return wds__open_fail(WDS_ERR_INVALID,
                            "wds_loader_open: field \"%s\": %s", fs->name,
                            e.msg);
    of->def->row_shape(&of->opts, &of->row);
  }
  for (size_t i = 0; i < l->nfields; i++)
    l->needs_decode |= !l->fields[i].def->passthrough;
  l->wanted = calloc(total_alts, sizeof *l->wanted);
  if (!l->wanted)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < l->nfields; i++)
    for (size_t a = 0; a < l->fields[i].nalts; a++)
      l->wanted[l->nwanted++] = l->fields[i].alts[a];
  return WDS_OK;
}

/* Exact mode without an index: count each shard's samples, in parallel. */
typedef struct counter {
  wds_loader *l;
  int index, threads;
  int status;
  char msg[WDS__ERR_SIZE];
  pthread_t thread;
} counter;

static void *count_main(void *arg) {
  counter *c = arg;
  wds_loader *l = c->l;
  for (size_t s = (size_t)c->index; s < l->urls.count && c->status == WDS_OK;
       s += (size_t)c->threads) {
    wds_reader *rd;
    if (open_shard_reader(l, s, &rd) != WDS_OK) {
      if (l->cfg.on_error == WDS_ON_ERROR_STOP) {
        c->status = WDS_ERR_OPEN;
        snprintf(c->msg, sizeof c->msg, "%s", wds_open_error());
        break;
      }
      note_skip(l, "skipped while counting", wds_open_error());
      l->counts[s] = 0;
      continue;
    }
    const wds_sample *smp;
    int st;
    uint64_t n = 0;
    while ((st = wds_reader_next(rd, &smp)) != WDS_EOF) {
      if (st == WDS_OK) {
        n++;
        continue;
      }
      if (l->cfg.on_error == WDS_ON_ERROR_STOP) {
        c->status = st;
        snprintf(c->msg, sizeof c->msg, "%s", wds_reader_error(rd));
        break;
      }
      note_skip(l, "skipped while counting", wds_reader_error(rd));
    }
    l->counts[s] = n;
    wds_reader_close(rd);
  }
  return NULL;
}

static int count_shards(wds_loader *l) {
  int threads = l->pin.workers;
  if ((size_t)threads > l->urls.count)
    threads = (int)l->urls.count;
  counter *c = calloc((size_t)threads, sizeof *c);
  int rc = WDS_OK, started = 0;
  if (!c)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  for (int i = 0; i < threads; i++) {
    c[i] = (counter){l, i, threads, WDS_OK, "", 0};
    if (pthread_create(&c[i].thread, NULL, count_main, &c[i]) != 0) {
      rc = wds__open_fail(WDS_ERR_NOMEM, "cannot start a thread");
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++)
    pthread_join(c[i].thread, NULL);
  for (int i = 0; i < started && rc == WDS_OK; i++)
    if (c[i].status != WDS_OK)
      rc = wds__open_fail(c[i].status, "counting samples for exact mode: %s",
                          c[i].msg);
  free(c);
  return rc;
}

/* Exact mode: the epoch's total, overflow-checked, so that the plan's and
 * the batch count's arithmetic cannot wrap (counted shards could only get
 * there in theory; an index can say anything). */
static int check_total(wds_loader *l) {
  char from[320];
  uint64_t total = 0;
  for (size_t s = 0; s < l->urls.count; s++) {
    if (l->counts[s] > WDS__INDEX_MAX_SAMPLES - total)
      return wds__open_fail(
          WDS_ERR_CORRUPT,
          "exact mode: the counts from %s add up to more than %llu samples "
          "at %.300s (%llu samples), more than any data set holds (a "
          "sample takes at least 512 bytes of tar: 2^64 bytes in all)",
          count_source(l, from, sizeof from),
          (unsigned long long)WDS__INDEX_MAX_SAMPLES, l->urls.urls[s],
          (unsigned long long)l->counts[s]);
    total += l->counts[s];
  }
  return WDS_OK;
}

/* Exact mode with an index: a shard it gives no samples is in no piece of
 * any plan, so nothing would ever read it, and samples it does hold would
 * be lost without a word. Each such shard is read here (an empty one ends
 * at its first block) and must be empty; otherwise the error names the
 * true count. Under skip it is noted, and the samples stay unread, as
 * with any count that is too small. */
static int check_empty_shards(wds_loader *l) {
  for (size_t s = 0; s < l->urls.count; s++) {
    if (l->counts[s] != 0)
      continue;
    const char *url = l->urls.urls[s];
    char msg[WDS__ERR_SIZE];
    uint64_t n = 0;
    wds_reader *rd;
    int st = open_shard_reader(l, s, &rd);
    if (st != WDS_OK) {
      snprintf(msg, sizeof msg, "%s", wds_open_error());
    } else {
      const wds_sample *smp;
      while ((st = wds_reader_next(rd, &smp)) != WDS_EOF)
        if (st == WDS_OK)
          n++;
        else if (st != WDS_ERR_DUPLICATE)
          break;
      if (n > 0)
        snprintf(msg, sizeof msg,
                 "index %.300s: %.400s: the index gives 0 samples, but the "
                 "shard has %s%llu: they would never be read (re-run wds "
                 "index)",
                 l->cfg.index_path, url, st == WDS_EOF ? "" : "at least ",
                 (unsigned long long)n);
      else if (st != WDS_EOF)
        snprintf(msg, sizeof msg,
                 "index %.300s gives 0 samples, and the shard cannot be read "
                 "to check: %.600s",
                 l->cfg.index_path, wds_reader_error(rd));
      wds_reader_close(rd);
    }
    if (st == WDS_EOF && n == 0)
      continue;
    int status = n > 0 ? WDS_ERR_CORRUPT : st;
    if (l->cfg.on_error == WDS_ON_ERROR_STOP)
      return wds__open_fail(status, "%s", msg);
    note_skip(l, "skipped", msg);
  }
  return WDS_OK;
}

static int load_counts(wds_loader *l) {
  l->counts = calloc(l->urls.count ? l->urls.count : 1, sizeof *l->counts);
  if (!l->counts)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  if (!l->cfg.index_path) {
    int rc = count_shards(l);
    return rc == WDS_OK ? check_total(l) : rc;
  }
  wds__index ix;
  wds__err e;
  /* An index is untrusted: its counts are checked against its own
   * "samples" lists and tar_bytes, against each shard file, and summed
   * with an overflow check; a shard it says is empty is read. */
  int rc = wds__index_load_flags(l->cfg.index_path, WDS__INDEX_COUNT_SAMPLES,
                                 &ix, &e);
  if (rc != WDS_OK)
    return wds__open_fail(rc, "%s", e.msg);
  for (size_t s = 0; s < l->urls.count && rc == WDS_OK; s++) {
    rc = wds__index_lookup(&ix, l->urls.urls[s], &l->counts[s], &e);
    if (rc == WDS_OK)
      rc = wds__index_check_count(l->urls.urls[s], l->counts[s], &e);
  }
  wds__index_free(&ix);
  if (rc != WDS_OK)
    return wds__open_fail(rc, "index %s: %s", l->cfg.index_path, e.msg);
  if ((rc = check_total(l)) != WDS_OK)
    return rc;
  return check_empty_shards(l);
}

static int setup_pool(wds_loader *l) {
  size_t bs = l->cfg.batch_size;
  l->nslots = (int)l->cfg.prefetch_batches;
  l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
  l->ready = calloc((size_t)l->nslots + 2, sizeof *l->ready);
  if (!l->slots || !l->ready)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  for (int k = 0; k < l->nslots; k++) {
    slot *s = &l->slots[k];
    s->bf = calloc(l->nfields, sizeof *s->bf);
    s->buf = calloc(l->nfields, sizeof *s->buf);
    s->offsets = calloc(l->nfields, sizeof *s->offsets);
    s->keys = calloc(bs, sizeof *s->keys);
    s->urls = calloc(bs, sizeof *s->urls);
    s->valid = calloc(bs, 1);
    s->key_off = calloc(bs, sizeof *s->key_off);
    if (!s->bf || !s->buf || !s->offsets || !s->keys || !s->urls || !s->valid ||
        !s->key_off)
      return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
    s->batch.keys = (const char *const *)s->keys;
    s->batch.urls = s->urls;
    s->batch.valid = s->valid;
    s->batch.fields = s->bf;
    s->batch.field_count = l->nfields;
    s->batch.slot = k;
    for (size_t i = 0; i < l->nfields; i++) {
      const out_field *of = &l->fields[i];
      size_t fixed =
          of->def->layout == WDS__ROW_FIXED ? bs * of->row.row_bytes : 0;
      if (fixed && slot_reserve(l, &s->buf[i], fixed, 0) != 0)
        return wds__open_fail(WDS_ERR_NOMEM,
                              "cannot allocate %zu bytes for a batch slot "
                              "(%s memory)",
                              fixed, l->alloc.name ? l->alloc.name : "custom");
      if (of->def->layout == WDS__ROW_VARIABLE &&
          !(s->offsets[i] = calloc(bs + 1, sizeof(uint64_t))))
        return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
    }
  }
  return WDS_OK;
}

static void free_pool(wds_loader *l) {
  if (!l->slots)
    return;
  for (int k = 0; k < l->nslots; k++) {
    slot *s = &l->slots[k];
    for (size_t i = 0; s->buf && i < l->nfields; i++)
      if (s->buf[i].mem)
        l->alloc.free(l->alloc.ctx, s->buf[i].mem, s->buf[i].cap);
    for (size_t i = 0; s->offsets && i < l->nfields; i++)
      free(s->offsets[i]);
    free(s->bf);
    free(s->buf);
    free(s->offsets);
    free(s->keys);
    free(s->urls);
    free(s->valid);
    free(s->key_off);
    free(s->key_arena);
  }
  free(l->slots);
  free(l->ready);
  l->slots = NULL;
}

static uint64_t batches_for(const wds_loader *l, uint64_t samples) {
  uint64_t bs = l->cfg.batch_size;
  return l->cfg.last_batch == WDS_LAST_DROP ? samples / bs
                                            : (samples + bs - 1) / bs;
}

static int validate(const wds_loader_config *c) {
#define BAD(...)                                                               \
  return wds__open_fail(WDS_ERR_INVALID, "wds_loader_open: " __VA_ARGS__)
  if (c->world_size < 1 || c->world_size > 1 << 24)
    BAD("world size %d (1 .. 16777216)", c->world_size);
  if (c->rank < 0 || c->rank >= c->world_size)
    BAD("rank %d is not in 0 .. %d", c->rank, c->world_size - 1);
  if (c->workers < 1 || c->workers > MAX_WORKERS)
    BAD("%d workers (1 .. %d)", c->workers, MAX_WORKERS);
  if (c->mode != WDS_MODE_PLAIN && c->mode != WDS_MODE_EXACT &&
      c->mode != WDS_MODE_RESAMPLED)
    BAD("unknown mode %d", (int)c->mode);
  if (c->batch_size < 1 || c->batch_size > MAX_BATCH)
    BAD("batch size %zu (1 .. %zu)", c->batch_size, MAX_BATCH);
  if (c->last_batch != WDS_LAST_KEEP && c->last_batch != WDS_LAST_DROP &&
      c->last_batch != WDS_LAST_PAD)
    BAD("unknown last-batch policy %d", (int)c->last_batch);
  if (c->on_error != WDS_ON_ERROR_STOP && c->on_error != WDS_ON_ERROR_SKIP)
    BAD("unknown error policy %d", (int)c->on_error);
  if (c->crop != WDS_CROP_CENTER && c->crop != WDS_CROP_RANDOM)
    BAD("unknown crop mode %d", (int)c->crop);
  if (!(c->crop_scale_min > 0 && c->crop_scale_min <= c->crop_scale_max &&
        c->crop_scale_max <= 1))
    BAD("crop scale (%g, %g): need 0 < min <= max <= 1", c->crop_scale_min,
        c->crop_scale_max);
  if (c->mode == WDS_MODE_RESAMPLED && c->samples_per_epoch == 0)
    BAD("resampled mode needs samples_per_epoch (samples per rank and epoch)");
  if (c->mode == WDS_MODE_EXACT && c->samples_per_epoch)
    BAD("samples_per_epoch is set, but exact mode's epoch is the whole data "
        "set");
  if (c->shuffle_buffer > ((size_t)1 << 26))
    BAD("shuffle buffer of %zu samples (at most 67108864)", c->shuffle_buffer);
  if (c->prefetch_batches < 2 || c->prefetch_batches > 1024)
    BAD("%zu batches in flight (2 .. 1024)", c->prefetch_batches);
#undef BAD
  return WDS_OK;
}

int wds_loader_open(const wds_loader_config *cfg, wds_loader **out) {
  int rc;
  wds_loader *l = NULL;
  if (!out)
    return wds__open_fail(WDS_ERR_INVALID, "wds_loader_open: out is NULL");
  *out = NULL;
  wds__open_error_clear();
  if (!cfg || (!cfg->spec && !cfg->urls))
    return wds__open_fail(WDS_ERR_INVALID, "wds_loader_open: no spec or urls");
  l = calloc(1, sizeof *l);
  if (!l)
    return wds__open_fail(WDS_ERR_NOMEM, "out of memory");
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  pthread_mutex_init(&l->log_mu, NULL);
  wds__cancel_init(&l->wake); /* works without its eventfd too, by polling */
  atomic_init(&l->cancelled, 0);
  l->cfg = *cfg;
  wds_loader_config *c = &l->cfg;
  if (c->rank < 0 || c->world_size < 0) {
    int r, w;
    wds_env_rank_world(&r, &w);
    if (c->rank < 0)
      c->rank = r;
    if (c->world_size < 0)
      c->world_size = w;
  }
  int auto_workers = c->workers == 0;
  if (auto_workers)
    c->workers = 4;
  if (c->prefetch_batches == 0)
    c->prefetch_batches = 4;
  if (c->shuffle_buffer_bytes == 0)
    c->shuffle_buffer_bytes = DEFAULT_SHUFFLE_BYTES;
  if ((rc = validate(c)) != WDS_OK)
    goto fail;
  c->fields = NULL; /* copied into l->fields; the caller's may go away */
  c->spec = NULL;
  c->urls = NULL;
  if (cfg->index_path && !(l->index_copy = strdup(cfg->index_path))) {
    rc = wds__open_fail(WDS_ERR_NOMEM, "out of memory");
    goto fail;
  }
  c->index_path = l->index_copy;
  l->alloc = cfg->allocator.alloc ? cfg->allocator : wds__default_allocator();
  if (!l->alloc.free) {
    rc = wds__open_fail(WDS_ERR_INVALID,
                        "wds_loader_open: allocator without free");
    goto fail;
  }
  if ((rc = setup_fields(l, cfg)) != WDS_OK)
    goto fail;

  if (cfg->spec) {
    rc = wds_spec_expand(cfg->spec, 0, &l->urls, wds__open_error_buf(),
                         WDS__ERR_SIZE);
    if (rc != WDS_OK)
      goto fail;
  } else {
    l->urls.urls = calloc(cfg->url_count ? cfg->url_count : 1, sizeof(char *));
    if (!l->urls.urls) {
      rc = wds__open_fail(WDS_ERR_NOMEM, "out of memory");
      goto fail;
    }
    for (size_t i = 0; i < cfg->url_count; i++) {
      if (!cfg->urls[i] || !(l->urls.urls[i] = strdup(cfg->urls[i]))) {
        rc = wds__open_fail(cfg->urls[i] ? WDS_ERR_NOMEM : WDS_ERR_INVALID,
                            "wds_loader_open: urls[%zu]: %s", i,
                            cfg->urls[i] ? "out of memory" : "NULL");
        goto fail;
      }
      l->urls.count++;
    }
  }
  if (l->urls.count == 0) {
    rc = wds__open_fail(WDS_ERR_INVALID, "wds_loader_open: no shards");
    goto fail;
  }

  if (auto_workers && c->mode == WDS_MODE_PLAIN) {
    /* Not more workers than this rank has shards: still a function of the
     * config alone, never of the machine. */
    size_t mine =
        l->urls.count > (size_t)c->rank
            ? (l->urls.count - (size_t)c->rank + (size_t)c->world_size - 1) /
                  (size_t)c->world_size
            : 0;
    if (mine >= 1 && mine < (size_t)c->workers)
      c->workers = (int)mine;
  }
  l->pin = (wds__plan_input){l->urls.count, NULL,
                             c->seed,       c->rank,
                             c->world_size, c->workers,
                             c->mode,       c->shard_shuffle,
                             c->drop_last,  c->samples_per_epoch};
  if (c->mode == WDS_MODE_EXACT && !c->index_path)
    for (size_t i = 0; i < l->urls.count; i++)
      if (strcmp(l->urls.urls[i], "-") == 0) {
        rc = wds__open_fail(WDS_ERR_INVALID,
                            "exact mode reads each shard twice without an "
                            "index (once to count), which stdin ('-') cannot "
                            "be: give an index (wds index) or use "
                            "--mode plain or resampled");
        goto fail;
      }
  if (c->mode == WDS_MODE_EXACT) {
    if ((rc = load_counts(l)) != WDS_OK)
      goto fail;
    l->pin.counts = l->counts;
  }
  {
    wds__err e;
    if ((rc = wds__plan_check(&l->pin, &e)) != WDS_OK) {
      wds__open_fail(rc, "%s", e.msg);
      goto fail;
    }
    if (c->mode != WDS_MODE_PLAIN) {
      wds__epoch_plan p;
      if ((rc = wds__plan_epoch(&l->pin, c->epoch, &p, &e)) != WDS_OK) {
        wds__open_fail(rc, "%s", e.msg);
        goto fail;
      }
      l->epoch_batches = batches_for(l, p.rank_samples);
      wds__plan_free(&p);
    } else if (c->samples_per_epoch) {
      l->epoch_batches = 0; /* a cap, not a promise */
    }
  }
  if (c->resume_batches > UINT64_MAX / c->batch_size) {
    rc = wds__open_fail(WDS_ERR_INVALID,
                        "wds_loader_open: resume at batch %llu is out of range",
                        (unsigned long long)c->resume_batches);
    goto fail;
  }
  if (c->mode != WDS_MODE_PLAIN && c->resume_batches > l->epoch_batches) {
    rc = wds__open_fail(WDS_ERR_INVALID,
                        "wds_loader_open: resume at batch %llu, but an epoch "
                        "has %llu batches",
                        (unsigned long long)c->resume_batches,
                        (unsigned long long)l->epoch_batches);
    goto fail;
  }
  {
    /* Enough queued items per worker to fill a batch between them twice,
     * within limits: the queues are part of the memory bound. */
    size_t per =
        2 * ((c->batch_size + (size_t)c->workers - 1) / (size_t)c->workers);
    l->queue_cap = per < 4 ? 4 : per > 1024 ? 1024 : per;
    l->chunk = l->queue_cap / 2;
  }
  if ((rc = setup_pool(l)) != WDS_OK)
    goto fail;
  if (!(l->pools = calloc(2 * (size_t)c->workers, sizeof *l->pools))) {
    rc = wds__open_fail(WDS_ERR_NOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < 2 * c->workers; i++) {
    pthread_mutex_init(&l->pools[i].mu, NULL);
    /* Blocks in circulation: shuffle buffer, queue, a batch, with some
     * slack; every sample has a copy and up to one block per field. */
    l->pools[i].limit =
        (c->shuffle_buffer + l->queue_cap + c->batch_size + 64) *
        (l->nfields + 1);
  }
  l->epoch = c->epoch;
  l->delivered = c->resume_batches;
  l->first_skip = c->resume_batches;
  *out = l;
  return WDS_OK;
fail:
  wds_loader_close(l);
  return rc;
}

/* ---- next / release ---------------------------------------------------- */

/* The loader was cancelled: the run stops and every later call fails. */
static int cancelled(wds_loader *l) {
  run_stop(l);
  set_error(l, "cancelled");
  l->failed = WDS_ERR_CANCELLED;
  return l->failed;
}

int wds_loader_next(wds_loader *l, const wds_batch **out) {
  if (out)
    *out = NULL;
  if (!l || !out)
    return WDS_ERR_INVALID;
  if (l->failed)
    return l->failed;
  if (atomic_load(&l->cancelled))
    return cancelled(l);
  if (!l->cur) {
    uint64_t skip = l->first_skip * l->cfg.batch_size;
    l->first_skip = 0;
    int rc = run_start(l, l->epoch, skip);
    if (rc != WDS_OK) {
      l->failed = rc;
      return rc;
    }
  }
  uint64_t t0 = now_ns();
  pthread_mutex_lock(&l->mu);
  while (l->ready_len == 0) {
    /* Only a deadlock if the collator needs a slot: it may still be about
     * to post the end of the epoch, which needs none. */
    if (l->held == l->nslots && l->collator_waits) {
      pthread_mutex_unlock(&l->mu);
      set_error(l,
                "wds_loader_next: all %d batch slots are held by the caller; "
                "release one first",
                l->nslots);
      return WDS_ERR_INVALID;
    }
    if (atomic_load(&l->cancelled)) {
      pthread_mutex_unlock(&l->mu);
      return cancelled(l);
    }
    /* A cancel cannot signal the condition variable (not async-signal-safe),
     * so the wait is sliced. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&l->cv, &l->mu, &until);
  }
  ready_entry r = l->ready[l->ready_head];
  l->ready_head = (l->ready_head + 1) % ((size_t)l->nslots + 2);
  l->ready_len--;
  if (r.kind == READY_SLOT) {
    l->slots[r.slot].state = SLOT_HELD;
    l->held++;
  }
  pthread_mutex_unlock(&l->mu);
  STAT_ADD(l, wait_ns, now_ns() - t0);
  if (r.kind == READY_SLOT) {
    *out = &l->slots[r.slot].batch;
    l->delivered++;
    STAT_ADD(l, batches, 1);
    STAT_ADD(l, samples, (*out)->rows);
    return WDS_OK;
  }
  run_stop(l);
  if (r.kind == READY_EOF) {
    l->epoch++;
    l->delivered = 0;
    if (l->cfg.eager_next_epoch) {
      int rc = run_start(l, l->epoch, 0);
      if (rc != WDS_OK)
        l->failed = rc; /* the next call reports it */
    }
    return WDS_EOF;
  }
  set_error(l, "%s", l->run_error);
  l->failed = l->run_error_status ? l->run_error_status : WDS_ERR_CORRUPT;
  return l->failed;
}

void wds_loader_release(wds_loader *l, const wds_batch *b) {
  if (!l || !b || b->slot < 0 || b->slot >= l->nslots ||
      b != &l->slots[b->slot].batch)
    return;
  pthread_mutex_lock(&l->mu);
  if (l->slots[b->slot].state == SLOT_HELD) {
    l->slots[b->slot].state = SLOT_FREE;
    l->held--;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
}

int wds_loader_set_epoch(wds_loader *l, uint64_t epoch) {
  if (!l)
    return WDS_ERR_INVALID;
  run_stop(l);
  l->epoch = epoch;
  l->delivered = 0;
  l->first_skip = 0;
  return WDS_OK;
}

void wds_loader_position(const wds_loader *l, uint64_t *epoch,
                         uint64_t *batches) {
  if (epoch)
    *epoch = l ? l->epoch : 0;
  if (batches)
    *batches = l ? l->delivered : 0;
}

uint64_t wds_loader_epoch_batches(const wds_loader *l) {
  return l ? l->epoch_batches : 0;
}

static void set_error(wds_loader *l, const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&l->mu);
  va_start(ap, fmt);
  vsnprintf(l->err, sizeof l->err, fmt, ap);
  va_end(ap);
  pthread_mutex_unlock(&l->mu);
}

const char *wds_loader_error(const wds_loader *l) {
  if (!l)
    return "";
  wds_loader *m = (wds_loader *)l; /* the lock, not the text, changes */
  pthread_mutex_lock(&m->mu);
  memcpy(m->err_out, m->err, sizeof m->err_out);
  pthread_mutex_unlock(&m->mu);
  return m->err_out;
}

const char *wds_loader_allocator_name(const wds_loader *l) {
  return l && l->alloc.name ? l->alloc.name : "custom";
}

void wds_loader_stats_get(const wds_loader *l, wds_loader_stats *o) {
  memset(o, 0, sizeof *o);
  if (!l)
    return;
  wds_loader *m = (wds_loader *)l; /* atomics are read, not changed */
  o->batches = atomic_load(&m->st_batches);
  o->samples = atomic_load(&m->st_samples);
  o->skipped = atomic_load(&m->st_skipped);
  o->fill_rows = atomic_load(&m->st_fill);
  o->shards_opened = atomic_load(&m->st_shards);
  o->bytes_read = atomic_load(&m->st_bytes);
  o->read_ns = atomic_load(&m->st_read_ns);
  o->shuffle_ns = atomic_load(&m->st_shuffle_ns);
  o->decode_ns = atomic_load(&m->st_decode_ns);
  o->batch_ns = atomic_load(&m->st_batch_ns);
  o->wait_ns = atomic_load(&m->st_wait_ns);
  o->slot_wait_ns = atomic_load(&m->st_slot_wait_ns);
  o->peak_pool_bytes = atomic_load(&m->st_pool_bytes);
}

void wds_loader_close(wds_loader *l) {
  if (!l)
    return;
  run_stop(l);
  for (int i = 0; l->pools && i < 2 * l->cfg.workers; i++)
    blk_pool_destroy(&l->pools[i]);
  free(l->pools);
  free_pool(l);
  free_fields(l);
  wds_url_list_free(&l->urls);
  free(l->counts);
  free(l->spec_copy);
  free(l->index_copy);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->log_mu);
  wds__cancel_destroy(&l->wake);
  free(l);
}

void wds_loader_cancel(wds_loader *l) {
  if (!l)
    return;
  /* Async-signal-safe: an atomic store and an eventfd write. next() sees
   * the flag within one of its wait slices. */
  atomic_store(&l->cancelled, 1);
  wds__cancel_set(&l->wake);
}
