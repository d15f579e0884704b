/* test_collate.c — rows into batch slots (loader/collate.c) without
 * threads: fields of the three row layouts (int: FIXED, npy: FIRST, bytes:
 * VARIABLE), keys, URLs and valid flags, offsets of bytes fields, the last
 * batch kept, dropped or padded, and rows whose npy shape differs. */
#include "loader/internal.h"
#include "loader/pool.h"
#include "test.h"

enum { F_INT, F_NPY, F_TXT, NF };

static const char *const urls[] = {"a.tar", "b.tar"};

typedef struct fixture {
  wds__out_field fields[NF];
  wds__collate c;
  wds__slot s;
  wds__filling fl;
  atomic_uint_fast64_t fill_rows, pool_bytes;
  int skips;
  char last_skip[WDS__ERR_SIZE];
} fixture;

static void on_skip(void *ctx, const char *msg) {
  fixture *fx = ctx;
  fx->skips++;
  snprintf(fx->last_skip, sizeof fx->last_skip, "%s", msg);
}

static int fixture_init(fixture *fx, size_t batch_size, wds_last_batch last,
                        wds_error_policy on_error) {
  static const char *const names[NF] = {"cls", "npy", "txt"};
  static const wds_decode decs[NF] = {WDS_DECODE_INT, WDS_DECODE_NPY,
                                      WDS_DECODE_BYTES};
  memset(fx, 0, sizeof *fx);
  for (int i = 0; i < NF; i++) {
    wds__out_field *of = &fx->fields[i];
    of->name = (char *)names[i];
    of->def = wds__decoder_get(decs[i]);
    of->def->row_shape(&of->opts, &of->row);
  }
  atomic_init(&fx->fill_rows, 0);
  atomic_init(&fx->pool_bytes, 0);
  fx->c = (wds__collate){fx->fields,
                         NF,
                         batch_size,
                         on_error,
                         last,
                         urls,
                         wds__host_allocator(),
                         on_skip,
                         fx,
                         &fx->fill_rows,
                         &fx->pool_bytes,
                         NULL};
  fx->fl.slot = 0;
  fx->fl.first_set = calloc(NF, sizeof(int));
  wds__err e;
  return fx->fl.first_set ? wds__slot_init(&fx->c, &fx->s, 0, &e)
                          : WDS_ERR_NOMEM;
}

static void fixture_free(fixture *fx) {
  wds__slot_free(&fx->c, &fx->s);
  free(fx->fl.first_set);
}

/* An item as a worker makes it: an int, a float32 npy array of n values
 * (all v), and text. valid 0: an invalid (fill) row. */
typedef struct row {
  wds__raw_sample raw;
  wds__item *it;
  float npy[4];
} row;

static wds__item *make_item(row *r, const char *key, size_t shard, int valid,
                            int64_t label, size_t n, float v,
                            const char *text) {
  r->it = calloc(1, sizeof(wds__item) + NF * sizeof(wds__item_field));
  if (!r->it)
    return NULL;
  memset(&r->raw, 0, sizeof r->raw);
  r->raw.key = key;
  r->raw.shard = shard;
  wds__item *it = r->it;
  it->kind = ITEM_SAMPLE;
  it->valid = valid;
  it->raw = &r->raw;
  if (!valid)
    return it;
  it->f[F_INT].dtype = WDS_DTYPE_I64;
  it->f[F_INT].local.i64 = label;
  it->f[F_INT].data = &it->f[F_INT].local.i64;
  it->f[F_INT].size = 8;
  for (size_t i = 0; i < n; i++)
    r->npy[i] = v;
  it->f[F_NPY].dtype = WDS_DTYPE_F32;
  it->f[F_NPY].ndim = 1;
  it->f[F_NPY].shape[0] = (int64_t)n;
  it->f[F_NPY].data = r->npy;
  it->f[F_NPY].size = n * sizeof(float);
  it->f[F_TXT].dtype = WDS_DTYPE_BYTES;
  it->f[F_TXT].data = (void *)text;
  it->f[F_TXT].size = strlen(text);
  return it;
}

/* Puts rows 0..2: "k0" (valid), "k1" (invalid), "k2" (valid). */
static int put_three(fixture *fx, row *rows) {
  wds__err e;
  if (!make_item(&rows[0], "k0", 0, 1, 7, 2, 1.5f, "hello") ||
      !make_item(&rows[1], "k1", 1, 0, 0, 0, 0, "") ||
      !make_item(&rows[2], "k2", 1, 1, -3, 2, 2.5f, "xy"))
    return WDS_ERR_NOMEM;
  for (int i = 0; i < 3; i++) {
    int rc = wds__batch_put(&fx->c, &fx->s, &fx->fl, rows[i].it, &e);
    if (rc != WDS_OK)
      return rc;
  }
  return WDS_OK;
}

static void free_rows(row *rows, int n) {
  for (int i = 0; i < n; i++)
    free(rows[i].it);
}

static int64_t int_at(const wds_batch *b, size_t i) {
  int64_t v;
  memcpy(&v, (const uint8_t *)b->fields[F_INT].data + 8 * i, 8);
  return v;
}

static float npy_at(const wds_batch *b, size_t i, size_t k) {
  float v;
  memcpy(&v,
         (const uint8_t *)b->fields[F_NPY].data +
             i * b->fields[F_NPY].row_bytes + k * 4,
         4);
  return v;
}

TEST(keep_last_batch) {
  fixture fx;
  row rows[3] = {0};
  ASSERT_EQ_INT(fixture_init(&fx, 4, WDS_LAST_KEEP, WDS_ON_ERROR_STOP), WDS_OK);
  wds__batch_begin(&fx.c, &fx.s, &fx.fl, 5, 9);
  ASSERT_EQ_INT(put_three(&fx, rows), WDS_OK);
  wds__err e;
  ASSERT_EQ_INT(wds__batch_last(&fx.c, &fx.s, &fx.fl, &e), 1);
  const wds_batch *b = &fx.s.batch;
  ASSERT_EQ_U64(b->epoch, 5);
  ASSERT_EQ_U64(b->index, 9);
  ASSERT_EQ_INT(b->rows, 3);
  ASSERT_EQ_INT(b->field_count, NF);
  ASSERT_STREQ(b->keys[0], "k0");
  ASSERT_STREQ(b->keys[1], "k1");
  ASSERT_STREQ(b->keys[2], "k2");
  ASSERT_STREQ(b->urls[0], "a.tar");
  ASSERT_STREQ(b->urls[2], "b.tar");
  ASSERT_EQ_INT(b->valid[0], 1);
  ASSERT_EQ_INT(b->valid[1], 0);
  ASSERT_EQ_INT(b->valid[2], 1);
  ASSERT_EQ_U64(atomic_load(&fx.fill_rows), 1);
  /* int: FIXED, (rows,) int64; the invalid row is 0 */
  const wds_batch_field *fi = &b->fields[F_INT];
  ASSERT_EQ_INT(fi->dtype, WDS_DTYPE_I64);
  ASSERT_EQ_INT(fi->ndim, 1);
  ASSERT_EQ_INT(fi->shape[0], 3);
  ASSERT_EQ_INT(fi->size_bytes, 24);
  ASSERT_EQ_INT(int_at(b, 0), 7);
  ASSERT_EQ_INT(int_at(b, 1), 0);
  ASSERT_EQ_INT(int_at(b, 2), -3);
  /* npy: FIRST, the first valid row sets (rows, 2) float32 */
  const wds_batch_field *fn = &b->fields[F_NPY];
  ASSERT_EQ_INT(fn->dtype, WDS_DTYPE_F32);
  ASSERT_EQ_INT(fn->ndim, 2);
  ASSERT_EQ_INT(fn->shape[0], 3);
  ASSERT_EQ_INT(fn->shape[1], 2);
  ASSERT_EQ_INT(fn->row_bytes, 8);
  ASSERT_TRUE(npy_at(b, 0, 1) == 1.5f);
  ASSERT_TRUE(npy_at(b, 1, 0) == 0.0f);
  ASSERT_TRUE(npy_at(b, 2, 0) == 2.5f);
  /* bytes: VARIABLE, offsets; the invalid row is empty */
  const wds_batch_field *ft = &b->fields[F_TXT];
  ASSERT_EQ_INT(ft->dtype, WDS_DTYPE_BYTES);
  ASSERT_EQ_INT(ft->row_bytes, 0);
  ASSERT_TRUE(ft->offsets != NULL);
  ASSERT_EQ_U64(ft->offsets[0], 0);
  ASSERT_EQ_U64(ft->offsets[1], 5);
  ASSERT_EQ_U64(ft->offsets[2], 5);
  ASSERT_EQ_U64(ft->offsets[3], 7);
  ASSERT_EQ_INT(ft->size_bytes, 7);
  ASSERT_TRUE(memcmp(ft->data, "helloxy", 7) == 0);
  ASSERT_TRUE(fi->offsets == NULL && fn->offsets == NULL);
  free_rows(rows, 3);
  fixture_free(&fx);
}

TEST(drop_last_batch) {
  fixture fx;
  row rows[3] = {0};
  ASSERT_EQ_INT(fixture_init(&fx, 4, WDS_LAST_DROP, WDS_ON_ERROR_STOP), WDS_OK);
  wds__batch_begin(&fx.c, &fx.s, &fx.fl, 0, 0);
  ASSERT_EQ_INT(put_three(&fx, rows), WDS_OK);
  wds__err e;
  ASSERT_EQ_INT(wds__batch_last(&fx.c, &fx.s, &fx.fl, &e), 0);
  free_rows(rows, 3);
  /* No rows: nothing to deliver under any policy. */
  fixture_free(&fx);
  ASSERT_EQ_INT(fixture_init(&fx, 4, WDS_LAST_KEEP, WDS_ON_ERROR_STOP), WDS_OK);
  wds__batch_begin(&fx.c, &fx.s, &fx.fl, 0, 0);
  ASSERT_EQ_INT(wds__batch_last(&fx.c, &fx.s, &fx.fl, &e), 0);
  fixture_free(&fx);
}

TEST(pad_last_batch) {
  fixture fx;
  row rows[3] = {0};
  ASSERT_EQ_INT(fixture_init(&fx, 5, WDS_LAST_PAD, WDS_ON_ERROR_STOP), WDS_OK);
  wds__batch_begin(&fx.c, &fx.s, &fx.fl, 0, 2);
  ASSERT_EQ_INT(put_three(&fx, rows), WDS_OK);
  wds__err e;
  ASSERT_EQ_INT(wds__batch_last(&fx.c, &fx.s, &fx.fl, &e), 1);
  const wds_batch *b = &fx.s.batch;
  /* Rows 3 and 4 repeat rows 0 and 1, marked invalid. */
  ASSERT_EQ_INT(b->rows, 5);
  ASSERT_STREQ(b->keys[3], "k0");
  ASSERT_STREQ(b->keys[4], "k1");
  ASSERT_STREQ(b->urls[3], "a.tar");
  ASSERT_EQ_INT(b->valid[3], 0);
  ASSERT_EQ_INT(b->valid[4], 0);
  ASSERT_EQ_U64(atomic_load(&fx.fill_rows), 3);
  ASSERT_EQ_INT(int_at(b, 3), 7);
  ASSERT_TRUE(npy_at(b, 3, 0) == 1.5f);
  const wds_batch_field *ft = &b->fields[F_TXT];
  ASSERT_EQ_U64(ft->offsets[4], 12);
  ASSERT_EQ_U64(ft->offsets[5], 12);
  ASSERT_EQ_INT(ft->size_bytes, 12);
  ASSERT_TRUE(memcmp(ft->data, "helloxyhello", 12) == 0);
  ASSERT_EQ_INT(b->fields[F_INT].shape[0], 5);
  free_rows(rows, 3);
  fixture_free(&fx);
}

TEST(full_batches_reuse_the_slot) {
  fixture fx;
  row rows[3] = {0};
  ASSERT_EQ_INT(fixture_init(&fx, 3, WDS_LAST_KEEP, WDS_ON_ERROR_STOP), WDS_OK);
  for (int round = 0; round < 2; round++) {
    wds__batch_begin(&fx.c, &fx.s, &fx.fl, 1, (uint64_t)round);
    ASSERT_EQ_INT(put_three(&fx, rows), WDS_OK);
    ASSERT_EQ_INT(fx.fl.rows, 3);
    wds__batch_finish(&fx.c, &fx.s, &fx.fl);
    ASSERT_EQ_INT(fx.s.batch.rows, 3);
    ASSERT_STREQ(fx.s.batch.keys[2], "k2");
    ASSERT_EQ_U64(fx.s.batch.fields[F_TXT].offsets[3], 7);
    free_rows(rows, 3);
  }
  fixture_free(&fx);
}

/* A later npy row of another shape: an error naming the sample under the
 * stop policy, an invalid row (and a skip) under the skip policy. */
TEST(npy_shape_mismatch) {
  for (int skip = 0; skip <= 1; skip++) {
    fixture fx;
    row rows[2] = {0};
    ASSERT_EQ_INT(fixture_init(&fx, 4, WDS_LAST_KEEP,
                               skip ? WDS_ON_ERROR_SKIP : WDS_ON_ERROR_STOP),
                  WDS_OK);
    wds__batch_begin(&fx.c, &fx.s, &fx.fl, 0, 0);
    wds__err e;
    ASSERT_TRUE(make_item(&rows[0], "k0", 0, 1, 1, 2, 1.0f, "a"));
    ASSERT_TRUE(make_item(&rows[1], "k1", 1, 1, 2, 3, 2.0f, "b"));
    ASSERT_EQ_INT(wds__batch_put(&fx.c, &fx.s, &fx.fl, rows[0].it, &e), WDS_OK);
    int rc = wds__batch_put(&fx.c, &fx.s, &fx.fl, rows[1].it, &e);
    if (!skip) {
      ASSERT_EQ_INT(rc, WDS_ERR_FORMAT);
      ASSERT_CONTAINS(e.msg, "b.tar: sample \"k1\": field 'npy': npy array "
                             "of a different dtype or shape");
      ASSERT_EQ_INT(fx.skips, 0);
    } else {
      ASSERT_EQ_INT(rc, WDS_OK);
      ASSERT_EQ_INT(fx.skips, 1);
      ASSERT_CONTAINS(fx.last_skip, "sample \"k1\"");
      ASSERT_EQ_INT(wds__batch_last(&fx.c, &fx.s, &fx.fl, &e), 1);
      ASSERT_EQ_INT(fx.s.batch.rows, 2);
      ASSERT_EQ_INT(fx.s.batch.valid[1], 0);
      ASSERT_EQ_INT(int_at(&fx.s.batch, 1), 0);
      ASSERT_EQ_U64(fx.s.batch.fields[F_TXT].offsets[2], 1);
      ASSERT_EQ_U64(atomic_load(&fx.fill_rows), 1);
    }
    free_rows(rows, 2);
    fixture_free(&fx);
  }
}

/* A batch whose first rows are invalid: the npy field's shape comes from
 * the first valid row, and the earlier rows are zeros. */
TEST(npy_first_valid_row_sets_shape) {
  fixture fx;
  row rows[2] = {0};
  ASSERT_EQ_INT(fixture_init(&fx, 2, WDS_LAST_KEEP, WDS_ON_ERROR_STOP), WDS_OK);
  wds__batch_begin(&fx.c, &fx.s, &fx.fl, 0, 0);
  const wds_batch_field *fn = &fx.s.batch.fields[F_NPY];
  ASSERT_EQ_INT(fn->dtype, WDS_DTYPE_U8); /* until a valid row */
  ASSERT_EQ_INT(fn->ndim, 2);
  ASSERT_EQ_INT(fn->shape[1], 0);
  wds__err e;
  ASSERT_TRUE(make_item(&rows[0], "k0", 0, 0, 0, 0, 0, ""));
  ASSERT_TRUE(make_item(&rows[1], "k1", 0, 1, 4, 3, 9.0f, "z"));
  ASSERT_EQ_INT(wds__batch_put(&fx.c, &fx.s, &fx.fl, rows[0].it, &e), WDS_OK);
  ASSERT_EQ_INT(wds__batch_put(&fx.c, &fx.s, &fx.fl, rows[1].it, &e), WDS_OK);
  wds__batch_finish(&fx.c, &fx.s, &fx.fl);
  ASSERT_EQ_INT(fn->dtype, WDS_DTYPE_F32);
  ASSERT_EQ_INT(fn->shape[1], 3);
  ASSERT_EQ_INT(fn->size_bytes, 24);
  ASSERT_TRUE(npy_at(&fx.s.batch, 0, 2) == 0.0f);
  ASSERT_TRUE(npy_at(&fx.s.batch, 1, 2) == 9.0f);
  free_rows(rows, 2);
  fixture_free(&fx);
}

int main(void) {
  RUN(keep_last_batch);
  RUN(drop_last_batch);
  RUN(pad_last_batch);
  RUN(full_batches_reuse_the_slot);
  RUN(npy_shape_mismatch);
  RUN(npy_first_valid_row_sets_shape);
  return test_summary();
}
