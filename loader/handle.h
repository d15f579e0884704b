/* handle.h — the loader's handle, struct wds_loader. Internal.
 *
 * Included by the files that work on the handle (loader.c, run.c,
 * worker.c, collate.c, ...), never by feed.c, count.c or mix.c: those read
 * the loader through their views (wds__feed_ctx, wds__count_ctx,
 * wds__sources in loader/internal.h), and without this header the compiler
 * refuses any use of the handle's fields there. */
#ifndef WDS_LOADER_HANDLE_H
#define WDS_LOADER_HANDLE_H

#include "loader/internal.h"

/* The loader's handle. Who writes what (each group's comment says): the
 * open (loader.c) writes the configuration and what it derives, which is
 * read-only once wds_loader_open returns; mix.c alone writes `sources` and
 * count.c alone writes `counts` (both at open; the feeds, mix.c's and
 * feed.c's workers' part, and the counting pass see only their context
 * structs, never this one); the threads of a run share the rest through
 * named functions: the lock (wds__loader_lock), slot states
 * (wds__slot_set), the error text (wds__set_error, wds__note_skip), the
 * stats (STAT_ADD), the wake token (shards/cancel.h). */
struct wds_loader {
  /* ---- open (loader.c): read-only once open returns ---- */
  wds_loader_config cfg;
  char *spec_copy, *index_copy, *cache_dir_copy;
  size_t *rank_bs; /* copy of cfg.rank_batch_sizes, or NULL */
  wds__plan_input pin;
  wds__out_field *fields;
  size_t nfields;
  char **wanted; /* every alternative of every field: what raws keep */
  size_t nwanted;
  int needs_decode; /* some field is not plain bytes */
  size_t queue_cap; /* items per worker queue */
  size_t chunk;     /* items per hand-off */
  wds_allocator alloc;
  uint64_t epoch_batches;
  /* The modules' views (set by open; each says what it reads). */
  wds__collate col;         /* collate.c */
  wds__shard_opener opener; /* feed.c's shard readers */
  wds__feed_ctx feed_ctx;   /* feed.c, mix.c: a worker's feeds */
  wds__count_ctx count_ctx; /* count.c: the counting pass */
  /* Per worker index (2 * workers: data, then item shells): the array is
   * open's; a pool's blocks are its worker's and the collator's (items.c:
   * the shared list under the pool's mu). */
  wds__blk_pool *pools;

  /* ---- mix.c alone writes (at open) ---- */
  wds__sources sources;
  /* ---- count.c alone writes (at open, exact mode) ---- */
  uint64_t *counts;          /* per shard */
  wds__index_hashes *hashes; /* per shard, from --hashes indexes; or NULL */

  /* ---- shared by the threads, through named functions ---- */
  wds__cancel wake;     /* every reader's token: set by run_stop (run.c), an
                           interrupted count (count.c) and wds_loader_cancel;
                           see "Stopping" in loader.c */
  atomic_int cancelled; /* wds_loader_cancel() was called */
  wds__cache_stats cache_stats; /* every reader's use of cfg.cache_dir */
  pthread_mutex_t mu;
  wds__lock_owner mu_owner; /* who holds mu (assertion builds: base/assert.h);
                               taken through wds__loader_lock */
  pthread_cond_t cv;
  pthread_mutex_t log_mu; /* one log callback at a time (loader.c) */

  /* The batch pool, under mu. Slot states change through wds__slot_set
   * (loader.c: next, release; slots.c: fences; run.c: the collator, run_stop),
   * which keeps 0 <= fenced <= held <= nslots; a FILLING slot's contents are
   * the collator's (collate.c through it, and the copy job's threads). */
  wds__slot *slots;
  int nslots, held;
  /* Fences (wds_loader_release_after; slots.c): FENCED slots, the next
   * sequence number, and the lock that makes one thread at a time run
   * callbacks (the FENCED slots' fence fields change only under it and
   * mu). */
  int fenced;
  uint64_t fence_next;
  pthread_mutex_t fence_mu;
  int *fence_tmp;          /* nslots entries: the FENCED slots seen by a poll */
  int collator_waits;      /* the collator is blocked for want of a free slot
                              (run.c sets it, a freed fence clears it) */
  wds__ready_entry *ready; /* a FIFO of nslots + 2 entries: each slot at most
                              once, the end, an error; run.c posts, next()
                              pops, run_stop empties */
  size_t ready_head, ready_len;
  int run_error_status; /* the error the collator posts (run.c) */
  char run_error[WDS__ERR_SIZE];

  /* ---- the caller's thread (loader.c; run.c's start and stop) ---- */
  wds__run *cur;
  uint64_t epoch;      /* of the next batch */
  uint64_t delivered;  /* batches of `epoch` delivered */
  uint64_t first_skip; /* resume_batches, for the first run only */
  /* An elastic resume (state.c): this rank's plan for the rest of
   * elastic_epoch, taken by that epoch's first run (run.c); elastic_live
   * while the epoch being read is that remainder (cleared by set_epoch and
   * the epoch's end); the state it resumed from (its "from" in a state
   * saved meanwhile), the samples left for the new ranks, the old world. */
  wds__epoch_plan elastic_plan;
  wds__epoch_plan *elastic_splan; /* mixed exact mode: each source's
                                     remainder ([nsrc]; run.c's splan) */
  char *elastic_from;
  uint64_t elastic_epoch, elastic_left, elastic_batches;
  int elastic_live, elastic_world;
  int failed;                     /* a fatal status, returned from then on */
  char failed_err[WDS__ERR_SIZE]; /* its text (l->err then; set with failed,
                                     under mu: later calls report it, not
                                     what another call wrote in l->err) */

  /* ---- any thread ---- */
  char err[WDS__ERR_SIZE]; /* wds__set_error, under mu */
  /* Stats (STAT_ADD: relaxed atomics, summed over threads; collate.c
   * through the pointers in col). */
  atomic_uint_fast64_t st_batches, st_samples, st_skipped, st_fill, st_shards,
      st_bytes, st_read_ns, st_shuffle_ns, st_decode_ns, st_batch_ns,
      st_wait_ns, st_slot_wait_ns, st_pool_bytes, st_deferred,
      st_deferred_bytes, st_unverified;
};

#define STAT_ADD(l, name, v)                                                   \
  atomic_fetch_add_explicit(&(l)->st_##name, (v), memory_order_relaxed)

/* ---- the loader's mutex ----
 *
 * l->mu is taken and released through these, so that assertion builds know
 * which thread holds it (base/assert.h) and a function whose comment says
 * "called with l->mu held" checks it (WDS__ASSERT_LOCKED). Elsewhere they
 * are pthread_mutex_lock, _unlock and pthread_cond_wait. */

static inline void wds__loader_lock(wds_loader *l) {
  pthread_mutex_lock(&l->mu);
  WDS__OWNER_SET(&l->mu_owner);
}

static inline void wds__loader_unlock(wds_loader *l) {
  WDS__OWNER_CLEAR(&l->mu_owner);
  pthread_mutex_unlock(&l->mu);
}

/* pthread_cond_wait on l->cv (mu held, released while waiting). */
static inline void wds__loader_wait(wds_loader *l) {
  WDS__OWNER_CLEAR(&l->mu_owner);
  pthread_cond_wait(&l->cv, &l->mu);
  WDS__OWNER_SET(&l->mu_owner);
}

/* pthread_cond_timedwait on l->cv: 0, or ETIMEDOUT when until passed. */
static inline int wds__loader_timedwait(wds_loader *l,
                                        const struct timespec *until) {
  WDS__OWNER_CLEAR(&l->mu_owner);
  int rc = pthread_cond_timedwait(&l->cv, &l->mu, until);
  WDS__OWNER_SET(&l->mu_owner);
  return rc;
}

#define WDS__ASSERT_LOCKED(l) WDS__ASSERT_OWNED(&(l)->mu_owner)

#endif
