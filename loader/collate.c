/* collate.c — rows into batch slots: no threads, no loader (wds__collate
 * says what it needs), so tests drive it directly.
 *
 * A slot holds one batch: per field a buffer from the loader's allocator
 * (pinned when CUDA is present), per row a key (in one arena), the shard's
 * URL and a valid flag. How a field's rows are laid out comes from its
 * decoder's row layout (pipeline/decoders.h): FIXED rows at i * row_bytes
 * (memory reserved when the slot is made), FIRST rows likewise once the
 * batch's first valid row has set dtype and shape (a later row that
 * differs is an error, or an invalid row under the skip policy), VARIABLE
 * rows end to end with batch_size + 1 offsets. An invalid row is zeros (an
 * empty VARIABLE row), except a VARIABLE row whose deferred read failed in
 * the copy (wds__item_field.defer: the raw bytes read with pread straight into
 * the row): the rows after it are placed already, so under the skip policy
 * it keeps its size, zero-filled, marked invalid (wds__batch_reads_check). The
 * last batch of an epoch is kept, dropped or padded by repeating its first
 * rows, marked invalid. */
#include "loader/handle.h"

static int slot_reserve(const wds__collate *c, wds__slot_buf *b, size_t need,
                        size_t used) {
  if (need <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < need)
    cap *= 2;
  void *m = c->alloc.alloc(c->alloc.ctx, cap);
  if (!m)
    return -1;
  if (used)
    memcpy(m, b->mem, used);
  if (b->mem)
    c->alloc.free(c->alloc.ctx, b->mem, b->cap);
  atomic_fetch_add_explicit(c->pool_bytes, cap - b->cap, memory_order_relaxed);
  b->mem = m;
  b->cap = cap;
  return 0;
}

int wds__slot_init(const wds__collate *c, wds__slot *s, int index,
                   wds__err *e) {
  size_t bs = c->batch_size;
  memset(s, 0, sizeof *s);
  s->bf = calloc(c->nfields, sizeof *s->bf);
  s->buf = calloc(c->nfields, sizeof *s->buf);
  s->offsets = calloc(c->nfields, sizeof *s->offsets);
  s->keys = calloc(bs, sizeof *s->keys);
  s->urls = calloc(bs, sizeof *s->urls);
  s->sources = calloc(bs, sizeof *s->sources);
  s->valid = calloc(bs, 1);
  s->pad = calloc(bs, 1);
  s->key_off = calloc(bs, sizeof *s->key_off);
  s->read_err = calloc(bs, sizeof *s->read_err);
  s->read_err_field = calloc(bs, sizeof *s->read_err_field);
  atomic_init(&s->read_errs, 0);
  if (!s->bf || !s->buf || !s->offsets || !s->keys || !s->urls || !s->sources ||
      !s->valid || !s->pad || !s->key_off || !s->read_err || !s->read_err_field)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  s->batch.keys = (const char *const *)s->keys;
  s->batch.urls = s->urls;
  s->batch.sources = s->sources;
  s->batch.valid = s->valid;
  s->batch.fields = s->bf;
  s->batch.field_count = c->nfields;
  s->batch.slot = index;
  for (size_t i = 0; i < c->nfields; i++) {
    const wds__out_field *of = &c->fields[i];
    size_t fixed =
        of->def->layout == WDS__ROW_FIXED ? bs * of->row.row_bytes : 0;
    if (fixed && slot_reserve(c, &s->buf[i], fixed, 0) != 0)
      return wds__fail(e, WDS_ERR_NOMEM,
                       "cannot allocate %zu bytes for a batch slot (%s "
                       "memory)",
                       fixed, c->alloc.name ? c->alloc.name : "custom");
    if (of->def->layout == WDS__ROW_VARIABLE &&
        !(s->offsets[i] = calloc(bs + 1, sizeof(uint64_t))))
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  }
  return WDS_OK;
}

void wds__slot_free(const wds__collate *c, wds__slot *s) {
  for (size_t i = 0; s->buf && i < c->nfields; i++)
    if (s->buf[i].mem)
      c->alloc.free(c->alloc.ctx, s->buf[i].mem, s->buf[i].cap);
  for (size_t i = 0; s->offsets && i < c->nfields; i++)
    free(s->offsets[i]);
  free(s->bf);
  free(s->buf);
  free(s->offsets);
  free(s->keys);
  free(s->urls);
  free(s->sources);
  free(s->valid);
  free(s->pad);
  free(s->key_off);
  free(s->key_arena);
  free(s->read_err);
  free(s->read_err_field);
  memset(s, 0, sizeof *s);
}

void wds__batch_begin(const wds__collate *c, wds__slot *s, wds__filling *fl,
                      uint64_t epoch, uint64_t index) {
  fl->rows = 0;
  memset(fl->first_set, 0, c->nfields * sizeof *fl->first_set);
  s->key_len = 0;
  s->batch.epoch = epoch;
  s->batch.index = index;
  for (size_t i = 0; i < c->nfields; i++) {
    wds_batch_field *bf = &s->bf[i];
    const wds__out_field *of = &c->fields[i];
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
static int key_append_at(wds__slot *s, size_t row, const char *key,
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

static int key_append(wds__slot *s, size_t row, const char *key) {
  return key_append_at(s, row, key, SIZE_MAX);
}

int wds__batch_assign(const wds__collate *c, wds__slot *s, wds__filling *fl,
                      const wds__item *it, wds__err *e) {
  size_t row = fl->rows;
  WDS__ASSERT(row < c->batch_size && it->kind == ITEM_SAMPLE);
  const wds__raw_sample *r = it->raw;
  int valid = it->valid;
  if (valid) {
    for (size_t i = 0; i < c->nfields; i++) {
      const wds__item_field *f = &it->f[i];
      wds_batch_field *bf = &s->bf[i];
      if (c->fields[i].def->layout != WDS__ROW_FIRST || !fl->first_set[i])
        continue;
      int same = bf->dtype == f->dtype && bf->ndim == f->ndim + 1;
      for (int d = 0; same && d < f->ndim; d++)
        same = bf->shape[d + 1] == f->shape[d];
      if (!same) {
        wds__fail(e, WDS_ERR_FORMAT,
                  "%s: sample \"%s\": field '%s': %s of a different dtype "
                  "or shape than the batch's first row",
                  c->urls[r->shard], r->key, c->fields[i].name,
                  c->fields[i].def->row_noun);
        if (c->on_error == WDS_ON_ERROR_STOP)
          return WDS_ERR_FORMAT;
        c->skip(c->skip_ctx, e->msg);
        valid = 0;
        break;
      }
    }
  }
  if (key_append(s, row, r ? r->key : "") != 0)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  s->urls[row] = r ? c->urls[r->shard] : "";
  s->sources[row] = r && c->shard_source ? c->shard_source[r->shard] : 0;
  /* A padding repeat keeps its data (copied as a valid row's) but is
   * marked invalid: the valid rows of all ranks hold each sample once. */
  int pad = valid && r && r->pad;
  s->valid[row] = (uint8_t)(valid && !pad);
  s->pad[row] = (uint8_t)pad;
  s->read_err[row] = 0;
  if (!valid || pad)
    atomic_fetch_add_explicit(c->fill_rows, 1, memory_order_relaxed);
  size_t bs = c->batch_size;
  for (size_t i = 0; i < c->nfields; i++) {
    const wds__item_field *f = &it->f[i];
    wds_batch_field *bf = &s->bf[i];
    switch (c->fields[i].def->layout) {
    case WDS__ROW_FIRST:
      if (valid && !fl->first_set[i]) {
        fl->first_set[i] = 1;
        bf->dtype = f->dtype;
        bf->ndim = f->ndim + 1;
        memcpy(bf->shape + 1, f->shape, (size_t)f->ndim * sizeof(int64_t));
        bf->row_bytes = f->size;
        if (slot_reserve(c, &s->buf[i], bs * bf->row_bytes, 0) != 0)
          return wds__fail(e, WDS_ERR_NOMEM, "out of memory (batch slot)");
        /* Earlier (invalid) rows, written while the row size was 0. */
        memset(s->buf[i].mem, 0, row * bf->row_bytes);
      }
      break;
    case WDS__ROW_FIXED:
      break;
    case WDS__ROW_VARIABLE:
      s->offsets[i][row + 1] = s->offsets[i][row] + (valid ? f->size : 0);
      break;
    }
  }
  fl->rows++;
  return WDS_OK;
}

/* Memory for the VARIABLE fields' rows [0, rows); keep: the bytes already
 * written (rows before the last), kept if the buffer moves. */
static int reserve_rows(const wds__collate *c, wds__slot *s, size_t rows,
                        int keep, wds__err *e) {
  for (size_t i = 0; i < c->nfields; i++)
    if (c->fields[i].def->layout == WDS__ROW_VARIABLE &&
        slot_reserve(c, &s->buf[i], (size_t)s->offsets[i][rows],
                     keep && rows ? (size_t)s->offsets[i][rows - 1] : 0) != 0)
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory (batch slot)");
  return WDS_OK;
}

int wds__batch_reserve(const wds__collate *c, wds__slot *s,
                       const wds__filling *fl, wds__err *e) {
  return reserve_rows(c, s, fl->rows, 0, e);
}

/* Reads row's deferred field i (f->defer) straight into dst, its row; a
 * failure leaves the row zeros and is noted on the slot for
 * wds__batch_reads_check (only this thread writes the row's notes). */
static void copy_read(const wds__collate *c, wds__slot *s, const wds__item *it,
                      size_t row, size_t i, uint8_t *dst) {
  const wds__raw_field *rf = it->f[i].defer;
  if (wds__defer_copy_hook)
    wds__defer_copy_hook(c->urls[it->raw->shard], it->raw->key);
  int en = wds__defer_pread(rf, dst);
  if (en == 0)
    return;
  memset(dst, 0, rf->size);
  if (!s->read_err[row]) {
    s->read_err[row] = en;
    s->read_err_field[row] = (uint32_t)i;
  }
  atomic_fetch_add_explicit(&s->read_errs, 1, memory_order_relaxed);
}

/* Whether rows [0, row1) fit the slot's memory: wds__batch_reserve (or
 * the slot's FIXED reservation, or a FIRST field's first valid row) made
 * room for them before any copy. */
static int rows_fit(const wds__collate *c, const wds__slot *s, size_t row1) {
  for (size_t i = 0; i < c->nfields; i++) {
    if (c->fields[i].def->layout == WDS__ROW_VARIABLE) {
      if (s->offsets[i][row1] > s->buf[i].cap)
        return 0;
    } else if (s->bf[i].row_bytes &&
               row1 * s->bf[i].row_bytes > s->buf[i].cap) {
      return 0;
    }
  }
  return 1;
}

void wds__batch_copy(const wds__collate *c, wds__slot *s,
                     const wds__item *const *items, size_t row0, size_t row1) {
  WDS__ASSERT(row0 <= row1 && row1 <= c->batch_size);
  WDS__ASSERT(rows_fit(c, s, row1));
  for (size_t row = row0; row < row1; row++) {
    const wds__item *it = items[row - row0];
    int valid = s->valid[row] || s->pad[row]; /* has data */
    for (size_t i = 0; i < c->nfields; i++) {
      const wds__item_field *f = &it->f[i];
      const wds_batch_field *bf = &s->bf[i];
      uint8_t *mem = s->buf[i].mem;
      if (c->fields[i].def->layout == WDS__ROW_VARIABLE) {
        WDS__ASSERT(s->offsets[i][row] <= s->offsets[i][row + 1]);
        uint64_t at = s->offsets[i][row], n = s->offsets[i][row + 1] - at;
        if (n && f->defer)
          copy_read(c, s, it, row, i, mem + at);
        else if (n)
          memcpy(mem + at, f->data, (size_t)n);
      } else if (bf->row_bytes) {
        uint8_t *dst = mem + row * bf->row_bytes;
        if (!valid)
          memset(dst, 0, bf->row_bytes);
        else if (f->write) /* a decoded image's last pass, in place */
          f->write(f->data, dst);
        else
          memcpy(dst, f->data, bf->row_bytes);
      }
    }
  }
}

int wds__batch_reads_check(const wds__collate *c, wds__slot *s,
                           const wds__item *const *items, size_t row0,
                           size_t row1, wds__err *e) {
  if (atomic_load_explicit(&s->read_errs, memory_order_acquire) == 0)
    return WDS_OK;
  atomic_store_explicit(&s->read_errs, 0, memory_order_relaxed);
  for (size_t row = row0; row < row1; row++) {
    int en = s->read_err[row];
    if (!en)
      continue;
    s->read_err[row] = 0;
    const wds__item *it = items[row - row0];
    const wds__raw_field *rf = it->f[s->read_err_field[row]].defer;
    wds__defer_fail(e, c->urls[it->raw->shard], it->raw->key, rf,
                    wds__defer_why(en));
    if (c->on_error == WDS_ON_ERROR_STOP)
      return WDS_ERR_IO;
    /* Skip: the row becomes zeros, every field (its fields that were read
     * were copied), and keeps its sizes (the rows after it are placed). */
    for (size_t i = 0; i < c->nfields; i++) {
      uint8_t *mem = s->buf[i].mem;
      if (c->fields[i].def->layout == WDS__ROW_VARIABLE) {
        uint64_t at = s->offsets[i][row], n = s->offsets[i][row + 1] - at;
        if (n)
          memset(mem + at, 0, (size_t)n);
      } else if (s->bf[i].row_bytes) {
        memset(mem + row * s->bf[i].row_bytes, 0, s->bf[i].row_bytes);
      }
    }
    if (s->valid[row]) {
      s->valid[row] = 0;
      atomic_fetch_add_explicit(c->fill_rows, 1, memory_order_relaxed);
    }
    s->pad[row] = 0;
    c->skip(c->skip_ctx, e->msg);
  }
  return WDS_OK;
}

int wds__batch_put(const wds__collate *c, wds__slot *s, wds__filling *fl,
                   const wds__item *it, wds__err *e) {
  int rc = wds__batch_assign(c, s, fl, it, e);
  if (rc != WDS_OK)
    return rc;
  if ((rc = reserve_rows(c, s, fl->rows, 1, e)) != WDS_OK)
    return rc;
  wds__batch_copy(c, s, &it, fl->rows - 1, fl->rows);
  return wds__batch_reads_check(c, s, &it, fl->rows - 1, fl->rows, e);
}

/* Repeats the first rows, marked invalid, up to batch_size (WDS_LAST_PAD). */
static int pad_batch(const wds__collate *c, wds__slot *s, wds__filling *fl,
                     wds__err *e) {
  size_t have = fl->rows;
  WDS__ASSERT(have > 0 && have <= c->batch_size); /* rows to repeat */
  for (size_t row = have; row < c->batch_size; row++) {
    size_t src = (row - have) % have;
    if (key_append_at(s, row, s->key_arena + s->key_off[src],
                      s->key_off[src]) != 0)
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    s->urls[row] = s->urls[src];
    s->sources[row] = s->sources[src];
    s->valid[row] = 0;
    s->pad[row] = (uint8_t)(s->valid[src] | s->pad[src]);
    atomic_fetch_add_explicit(c->fill_rows, 1, memory_order_relaxed);
    for (size_t i = 0; i < c->nfields; i++) {
      wds_batch_field *bf = &s->bf[i];
      wds__slot_buf *b = &s->buf[i];
      if (c->fields[i].def->layout == WDS__ROW_VARIABLE) {
        uint64_t a = s->offsets[i][src], z = s->offsets[i][src + 1];
        uint64_t at = s->offsets[i][row];
        if (slot_reserve(c, b, (size_t)(at + z - a), (size_t)at) != 0)
          return wds__fail(e, WDS_ERR_NOMEM, "out of memory (batch slot)");
        memcpy((uint8_t *)b->mem + at, (uint8_t *)b->mem + a, (size_t)(z - a));
        s->offsets[i][row + 1] = at + z - a;
      } else if (bf->row_bytes) {
        memcpy((uint8_t *)b->mem + row * bf->row_bytes,
               (uint8_t *)b->mem + src * bf->row_bytes, bf->row_bytes);
      }
    }
  }
  fl->rows = c->batch_size;
  return WDS_OK;
}

void wds__batch_finish(const wds__collate *c, wds__slot *s, wds__filling *fl) {
  size_t rows = fl->rows;
  WDS__ASSERT(rows <= c->batch_size && rows_fit(c, s, rows));
  s->batch.rows = rows;
  for (size_t r = 0; r < rows; r++)
    s->keys[r] = s->key_arena + s->key_off[r];
  for (size_t i = 0; i < c->nfields; i++) {
    wds_batch_field *bf = &s->bf[i];
    bf->shape[0] = (int64_t)rows;
    bf->data = s->buf[i].mem;
    bf->size_bytes = c->fields[i].def->layout == WDS__ROW_VARIABLE
                         ? (size_t)s->offsets[i][rows]
                         : rows * bf->row_bytes;
  }
}

int wds__batch_last(const wds__collate *c, wds__slot *s, wds__filling *fl,
                    wds__err *e) {
  if (c->last_batch == WDS_LAST_DROP || fl->rows == 0)
    return 0;
  if (c->last_batch == WDS_LAST_PAD && pad_batch(c, s, fl, e) != WDS_OK)
    return WDS_ERR_NOMEM;
  wds__batch_finish(c, s, fl);
  return 1;
}
