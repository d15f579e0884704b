/* worker.c — a worker thread: its feed's samples through its shuffle
 * buffer, decoded by each field's decoder (pipeline/decoders.h) into
 * items, handed to its queue in chunks. Between samples, and while its
 * queue is full, it takes a share of the collator's slot copies
 * (wds__copy_help, wds__worker_push: run.c).
 *
 * The worker's item i is a pure function of the plan and the RNG keys
 * (seed, stream, epoch, rank, worker, i). Items the collator will certainly
 * discard on resume pass undecoded ("tokens", loader.c). A sample's
 * deferred fields (defer.c) are read as it leaves the shuffle buffer, just
 * before decoding (never for tokens); a failed read is a decode failure.
 * Those wanted only by rows of raw bytes (bytes decoder) stay in the file,
 * their size checked here: the batch copy reads them into the slot row.
 * A decode failure
 * under the skip policy keeps the row, zero-filled and marked invalid. The
 * worker's last word (its END item, allocated before it started, or its
 * error) is always delivered. */
#include <stdio.h>

#include "base/url.h"
#include "loader/handle.h"
#include "loader/shuffle.h"

static const wds__raw_field *find_field(const wds__raw_sample *r,
                                        const wds__out_field *of) {
  for (size_t a = 0; a < of->nalts; a++)
    for (size_t i = 0; i < r->nfields; i++)
      if (r->f[i].ext[0] == of->alts[a][0] &&
          strcmp(r->f[i].ext, of->alts[a]) == 0)
        return &r->f[i];
  return NULL;
}

/* Whether output field of's rows are the raw bytes, laid end to end: a
 * deferred raw field wanted only by such outputs is read by the batch copy
 * straight into its slot row (collate.c), one copy instead of two. */
static int reads_at_copy(const wds__out_field *of) {
  return of->def->passthrough && of->def->layout == WDS__ROW_VARIABLE;
}

/* Marks r's deferred fields that the batch copy reads (wds__raw_field.at_copy).
 */
static void mark_copy_reads(const wds_loader *l, wds__raw_sample *r) {
  size_t k = 0;
  while (k < r->nfields && !r->f[k].fh)
    k++;
  if (k == r->nfields)
    return; /* nothing deferred */
  for (size_t i = 0; i < r->nfields; i++)
    r->f[i].at_copy = 0;
  /* Set for a field some raw-bytes output takes, then cleared again for
   * one that any decoding output takes (the worker must read it). */
  for (size_t i = 0; i < l->nfields; i++) {
    wds__raw_field *rf = (wds__raw_field *)find_field(r, &l->fields[i]);
    if (rf && rf->fh && reads_at_copy(&l->fields[i]))
      rf->at_copy = 1;
  }
  for (size_t i = 0; i < l->nfields; i++) {
    wds__raw_field *rf = (wds__raw_field *)find_field(r, &l->fields[i]);
    if (rf && rf->fh && !reads_at_copy(&l->fields[i]))
      rf->at_copy = 0;
  }
}

/* Row memory for a decoder: a block of the worker's pool. */
typedef struct row_alloc {
  wds__blk_pool *pool;
  int owner;
  int failed;
} row_alloc;

static void *alloc_row(void *ctx, size_t size_bytes) {
  row_alloc *a = ctx;
  void *p = wds__blk_alloc(a->pool, a->owner, size_bytes);
  if (!p)
    a->failed = 1;
  return p;
}

/* Decodes every output field of r into it, each with its decoder from the
 * table; on failure returns the status with a message naming sample, shard
 * and field in e. aug_key: the worker's augmentation key for the epoch. */
static int decode_item(wds_loader *l, wds__decoder *dec, wds__worker *w,
                       uint64_t aug_key, uint64_t seq, wds__item *it,
                       wds__err *e) {
  const wds__raw_sample *r = it->raw;
  /* For messages only, its secrets hidden (wds__url_redact). */
  char ub[WDS__URL_REDACT_MAX];
  const char *url = l->sources.urls.urls[r->shard];
  row_alloc ra = {w->pool, w->index, 0};
  wds__decode_call call = {dec, 0, alloc_row, &ra};
  for (size_t i = 0; i < l->nfields; i++) {
    const wds__out_field *of = &l->fields[i];
    const wds__raw_field *rf = find_field(r, of);
    if (!rf) /* every field it has, wanted or not: a typo shows */
      return wds__fail(e, WDS_ERR_FORMAT,
                       "%s: sample \"%s\" has no field '%s' (has: %.300s)",
                       wds__url_redact(url, ub, sizeof ub), r->key, of->name,
                       r->all_exts && r->all_exts[0] ? r->all_exts
                                                     : "no fields");
    if (rf->fh && rf->at_copy) { /* read by the batch copy */
      memset(&it->f[i], 0, sizeof it->f[i]);
      it->f[i].dtype = WDS_DTYPE_BYTES;
      it->f[i].size = rf->size;
      it->f[i].defer = rf;
      continue;
    }
    call.rng_key = of->def->random
                       ? wds__mix64(aug_key ^ wds__mix64(wds__mix64(seq) ^ i))
                       : 0;
    int rc =
        of->def->decode(&of->opts, &call, rf->data, rf->size, &it->f[i], e);
    if (rc != WDS_OK) {
      if (ra.failed) /* the worker's own failure, not the field's */
        return rc;
      wds__err_prefix(e, "%s: sample \"%s\": field '%s'",
                      wds__url_redact(url, ub, sizeof ub), r->key, rf->ext);
      return rc;
    }
  }
  return WDS_OK;
}

/* Publishes a worker's stage times since *mark: reading and decoding as
 * measured, the rest of its busy time (copying samples out of the reader,
 * the shuffle buffer, making items) as "shuffle". Per chunk, not per
 * sample: shared counters written per sample cost more than they measure. */
static void worker_stats(wds_loader *l, wds__feeds *src, uint64_t *decode_ns,
                         uint64_t *mark, wds__defer_stats *deferred) {
  uint64_t now = wds__now_ns(), busy = now - *mark;
  uint64_t read_ns, bytes, shards, unverified;
  wds__feeds_stats(src, &read_ns, &bytes, &unverified, &shards);
  read_ns += deferred->ns; /* the deferred fields' reads */
  uint64_t known = read_ns + *decode_ns;
  STAT_ADD(l, read_ns, read_ns);
  STAT_ADD(l, decode_ns, *decode_ns);
  STAT_ADD(l, shuffle_ns, busy > known ? busy - known : 0);
  STAT_ADD(l, bytes, bytes);
  STAT_ADD(l, shards, shards);
  STAT_ADD(l, deferred, deferred->fields);
  STAT_ADD(l, deferred_bytes, deferred->bytes);
  STAT_ADD(l, unverified, unverified);
  memset(deferred, 0, sizeof *deferred);
  *decode_ns = 0;
  *mark = now;
}

void *wds__worker_main(void *arg) {
  wds__worker *w = arg;
  wds__run *rn = w->run;
  wds_loader *l = rn->l;
  const wds__worker_plan *wp = &rn->plan.w[w->index];
  uint64_t W = (uint64_t)l->pin.workers;
  uint64_t aug_key = wds__rng_key(l->cfg.seed, WDS__STREAM_AUGMENT, rn->epoch,
                                  (uint64_t)l->pin.rank, (uint64_t)w->index);
  wds__item *fatal = NULL;
  int failed = 0; /* the loop ended on an error (fatal may be NULL if even
                     its item could not be allocated) */
  wds__feeds src;
  wds__shuffle sh;
  wds__decoder *dec = wds__decoder_new();
  if (dec)
    wds__decoder_set_memory_limit(dec, l->cfg.image_memory_limit);
  memset(&sh, 0, sizeof sh);
  const wds__feed_worker fw = {w->pool, w->index, rn->epoch, &rn->abort};
  int feeds_failed =
      wds__feeds_init(&src, &l->feed_ctx, &fw, &rn->plan, rn->splan) != 0;
  if (feeds_failed ||
      wds__shuffle_init(&sh, l->cfg.shuffle_buffer, l->cfg.shuffle_initial,
                        l->cfg.shuffle_buffer_bytes,
                        wds__rng_key(l->cfg.seed, WDS__STREAM_SHUFFLE,
                                     rn->epoch, (uint64_t)l->pin.rank,
                                     (uint64_t)w->index)) != WDS_OK ||
      !dec)
    failed = 1;

  uint64_t mark = wds__now_ns(), decode_ns = 0;
  wds__defer_stats deferred = {0, 0, 0}; /* deferred fields read */
  for (uint64_t seq = 0; !failed && seq < wp->quota; seq++) {
    wds__raw_sample *r;
    if (wds__shuffle_next(&sh, wds__feeds_next, &src, &r) != 0) {
      fatal = src.fatal;
      failed = 1;
      break;
    }
    if (!r)
      break;
    int token = seq * W + (uint64_t)w->index < rn->skip;
    wds__item *it = wds__item_new(w->ipool, w->index, l->nfields,
                                  token ? ITEM_TOKEN : ITEM_SAMPLE);
    if (!it) {
      wds__raw_free(r);
      failed = 1;
      break;
    }
    it->raw = r;
    if (token)
      wds__defer_drop(r); /* never read */
    if (!token && r->hole) {
      it->valid = 0;
    } else if (!token) {
      wds__err e;
      mark_copy_reads(l, r);
      int rc = wds__defer_read(r, l->sources.urls.urls[r->shard], w->pool,
                               w->index, &deferred, &e);
      if (rc == WDS_OK) {
        uint64_t t1 = l->needs_decode ? wds__now_ns() : 0;
        rc = decode_item(l, dec, w, aug_key, seq, it, &e);
        if (l->needs_decode)
          decode_ns += wds__now_ns() - t1;
      }
      if (rc != WDS_OK) {
        if (l->cfg.on_error == WDS_ON_ERROR_STOP || rc == WDS_ERR_NOMEM) {
          fatal = wds__error_item(l->nfields, rc, e.msg);
          failed = 1;
          wds__item_free(it, l->nfields);
          break;
        }
        /* Skip: the row stays, zero-filled and marked invalid. */
        for (size_t i = 0; i < l->nfields; i++)
          if (it->f[i].owned) {
            wds__blk_free(it->f[i].data);
            it->f[i].data = NULL;
          }
        memset(it->f, 0, l->nfields * sizeof *it->f);
        it->valid = 0;
        it->status = rc;
        it->msg = strdup(e.msg);
        wds__note_skip(l, "skipped", e.msg);
      }
    }
    w->pending[w->npending++] = it;
    wds__copy_help(rn); /* rows of a batch waiting for their slot copy */
    if (w->npending == l->chunk) {
      worker_stats(l, &src, &decode_ns, &mark, &deferred);
      if (wds__worker_push(w, w->pending, w->npending) != 0)
        break; /* aborted: run_stop frees what is pending */
      w->npending = 0;
      mark = wds__now_ns(); /* time blocked on the queue is nobody's stage */
    }
  }
  /* The quota can be met without another read: check the last shard's
   * count too. */
  if (!failed && wds__feeds_check_last(&src) != 0) {
    fatal = src.fatal;
    failed = 1;
  }
  worker_stats(l, &src, &decode_ns, &mark, &deferred);
  /* The worker's last word, always delivered: its error, or the end. The
   * terminal item was allocated by run_start, so running out of memory
   * cannot turn an error into a silent early end (a short epoch on one
   * rank would hang an all-reduce). */
  wds__item *last = w->terminal;
  w->terminal = NULL;
  if (fatal) {
    wds__item_free(last, l->nfields);
    last = fatal;
  } else if (failed) {
    last->kind = ITEM_ERROR;
    last->status = WDS_ERR_NOMEM;
  }
  if (w->npending < l->chunk)
    w->pending[w->npending++] = last;
  else
    wds__item_free(last, l->nfields);
  if (wds__worker_push(w, w->pending, w->npending) == 0)
    w->npending = 0;
  wds__feeds_close(&src);
  wds__shuffle_free(&sh);
  wds__decoder_free(dec);
  if (!failed)
    wds__worker_handoff(w); /* the next epoch's worker w, on its pools */
  return NULL;
}
