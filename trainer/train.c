/* train.c — the training loop: one loader, one thread per local rank.
 *
 * Threads: rank 0's thread is also the coordinator. Before each round it
 * decides what all ranks do next (a step on a batch it fetched from the
 * loader, an evaluation, stop) and publishes it in `shared`; a barrier
 * hands it to the other ranks. The batch stays borrowed from the loader
 * until the step's all-reduce has begun on every rank (its first barrier:
 * nobody reads the batch after that), then rank 0 releases it. The loader
 * prefetches in its own threads while the ranks compute.
 *
 * Invariants: every rank runs the same sequence of rounds, so collectives
 * always match; a failing rank records its message and aborts the group,
 * which wakes every rank blocked in a collective. Rank 0 alone writes logs
 * and checkpoints (the weights are bit-identical on every rank; the
 * per-rank checksums in the logs show it).
 *
 * tr_run is its stages in order, each a function: the rows of the job
 * (plan_rows), the model and fingerprint (plan_model), the checkpoint to
 * resume (load_resume), the loaders (open_loaders, their configurations
 * derived from tr_options.loader), the logs (open_log), the start lines,
 * the process group (start_group), the rank threads (run_ranks), their
 * outcome, the summary, and the logs committed (close_log). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "base/text.h"
#include "base/url.h"
#include "trainer/checkpoint.h"
#include "trainer/procgroup.h"
#include "trainer/train.h"
#include "wds/gpu_jpeg.h"
#include "wds/outfile.h"

enum { CMD_STEP, CMD_EVAL, CMD_FINAL, CMD_STOP };

typedef struct shared {
  const tr_options *o;
  const tr_backend *be;
  tr_pg *pg; /* the job's processes (procgroup.h) */
  tr_group *group;
  tr_model_config model;
  size_t param_count;
  wds_loader *train, *eval;
  uint64_t epoch_batches, total_steps, start_step;
  tr_checkpoint ck;      /* --resume's checkpoint, once loaded */
  tr_checkpoint *resume; /* &ck when resuming; NULL: fresh weights */
  uint64_t fingerprint;
  /* The configuration without what an elastic resume may change (ranks,
   * processes, batch and per-rank sizes, workers, shuffle buffer, last
   * batch): a checkpoint of another one of those resumes elastically when
   * this is its, in exact mode (a --train spec or a mix of --sources). */
  uint64_t elastic_fingerprint;
  int elastic;           /* resuming elastically: the loader takes ck's state */
  uint64_t elastic_left; /* the samples of the epoch its job had not read */
  int elastic_live;      /* the loader reads the rest of an epoch (else the
                            process's loader batches are the checkpoint's: only
                            the split among local ranks changed) */
  FILE *json;            /* --json */
  FILE *rows_log;        /* --log-rows */
  wds_outfile *json_file;     /* what json and rows_log write into (their */
  wds_outfile *rows_file;     /* descriptors are copies of these) */
  int json_errno, rows_errno; /* the first failed write's (0: none) */
  int summarized;             /* summarize ran (it checks the output) */
  int out_errno;              /* the output's first failed flush (0: none) */

  int world, first_rank; /* ranks of the job; global rank of local 0 */
  size_t *rows, *row0;   /* per local rank: its rows of a loader batch */
  size_t proc_rows;      /* rows of a loader batch (this process) */
  size_t *proc_sizes;    /* per process: its rows (rank_batch_sizes) */

  /* Published by rank 0 before each round's barrier. */
  int cmd;
  const wds_batch *batch;
  int batch_slot, batch_staged; /* device buffer; already uploaded */
  uint64_t step;                /* steps done before this round */
  uint64_t epoch;               /* of the current batch */
  int eval_end;                 /* eval rounds: no more batches */
  /* The batch after the current one, fetched by rank 0 while the step
   * computes and uploaded by every rank (double buffering); or the end of
   * the epoch. */
  const wds_batch *next;
  int next_slot, next_eof;
  unsigned uploads; /* slot of the next upload: uploads & 1 */

  uint64_t *checksums; /* per global rank */
  double eval_loss, eval_acc;
  uint64_t eval_count;
  int have_eval;

  /* Rank 0's log interval, and the run's totals. */
  double iv_wait_s, iv_start_s, iv_h2d_bytes, iv_h2d_s;
  double total_wait_s, total_h2d_bytes, total_h2d_s;

  pthread_mutex_t err_mu;
  int failed;
  int interrupted; /* the failure was an interrupt (o->interrupted) */
  wds__err err;    /* the first failure */
  int err_code;
  uint64_t saved_step; /* of the last checkpoint written, if saved */
  int saved;
} shared;

typedef struct rank_arg {
  shared *sh;
  int rank;
} rank_arg;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Records the first failure (status and message) and aborts the group, so
 * that every rank leaves its collectives. */
static void fail(shared *sh, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(shared *sh, int status, const char *fmt, ...) {
  pthread_mutex_lock(&sh->err_mu);
  if (!sh->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sh->err.msg, sizeof sh->err.msg, fmt, ap);
    va_end(ap);
    sh->err_code = status;
    sh->failed = 1;
  }
  pthread_mutex_unlock(&sh->err_mu);
  sh->be->group_abort(sh->group);
}

void tr_options_init(tr_options *o) {
  static const wds_loader_config loader_init = WDS_LOADER_CONFIG_INIT;
  memset(o, 0, sizeof *o);
  /* The loader's defaults but where wds-train's differ. */
  o->loader = loader_init;
  o->loader.image_size = 32;
  o->loader.batch_size = 32; /* per rank */
  o->loader.mode = WDS_MODE_EXACT;
  o->loader.last_batch = WDS_LAST_KEEP;
  o->loader.crop = WDS_CROP_CENTER;
  o->loader.shuffle_buffer = 1000;
  o->channels = 3;
  o->classes = 10;
  o->hidden[0] = 256;
  o->hidden[1] = 128;
  o->hidden_count = 2;
  o->epochs = 1;
  o->ranks = 1;
  o->procs = 1;
  o->init_timeout_ms = 300000;
  o->collective_timeout_ms = 600000;
  o->lr = 0.05;
  o->momentum = 0.9;
  o->weight_decay = 5e-4;
  o->log_every = 10;
  o->backend = tr_backend_find("cpu");
  o->out = stdout;
}

static void print_checksums(const shared *sh, FILE *f, const char *sep) {
  for (int i = 0; i < sh->world; i++)
    fprintf(f, "%s\"%016" PRIx64 "\"", i ? sep : "", sh->checksums[i]);
}

/* Rank 0, --log-rows: the valid rows of the step about to be taken, "STEP
 * EPOCH BATCH RANK SOURCE KEY" each (steps counted from 1, as the log's;
 * RANK global). The key is escaped as `wds batches` writes keys
 * (base/text.h: blanks, backslashes, controls and bytes that are not UTF-8
 * as \xHH), so that a key holding a newline or a blank cannot make a line
 * or a field of its own. */
static void write_rows(const shared *sh, const wds_batch *b, FILE *out) {
  int local = 0;
  for (size_t i = 0; i < b->rows; i++) {
    if (b->valid && !b->valid[i])
      continue;
    while (local + 1 < sh->o->ranks && i >= sh->row0[local + 1])
      local++;
    fprintf(out, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %d %" PRIu32 " ",
            sh->step + 1, b->epoch, b->index, sh->first_rank + local,
            b->sources ? b->sources[i] : 0);
    if (b->keys && b->keys[i])
      wds__esc_write(out, b->keys[i], WDS__ESC_BLANK | WDS__ESC_BACKSLASH);
    else
      fputc('-', out);
    fputc('\n', out);
  }
}

/* Flushes the output, keeping the reason of its first failure for the
 * run's message (a failure is reported at the end, with every other). */
static void note_out(shared *sh) {
  errno = 0;
  if ((fflush(sh->o->out) != 0 || ferror(sh->o->out)) && !sh->out_errno)
    sh->out_errno = errno ? errno : EIO;
}

/* After a write to log f (--json or --log-rows): 0, or -1 when it failed,
 * which stops the run there (fail: its message names the log and the
 * reason) and keeps the reason for close_log. */
static int log_written(shared *sh, FILE *f, const char *flag, int *saved) {
  if (!ferror(f))
    return 0;
  if (!*saved) {
    *saved = errno ? errno : EIO;
    fail(sh, WDS_ERR_IO, "%s %s: cannot write it: %s", flag,
         f == sh->json ? sh->o->json_path : sh->o->rows_path, strerror(*saved));
  }
  return -1;
}

/* The step's rows are made in memory and go out in one write (the log's
 * FILE is unbuffered, set where it is opened), so a reader (tail -f) or a run
 * killed mid-way sees whole steps, never half a row, however many rows a step
 * has. Out of memory, they go straight to the log. */
static int log_rows(shared *sh, const wds_batch *b) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  errno = 0;
  if (m) {
    write_rows(sh, b, m);
    if (fclose(m) == 0) {
      errno = 0;
      if (len)
        fwrite(buf, 1, len, sh->rows_log);
      free(buf);
      return log_written(sh, sh->rows_log, "--log-rows", &sh->rows_errno);
    }
  }
  free(buf);
  errno = 0;
  write_rows(sh, b, sh->rows_log);
  return log_written(sh, sh->rows_log, "--log-rows", &sh->rows_errno);
}

/* "SPEC (repeat 2, index FILE)" of source s, as given but for the spec's
 * secrets (base/url.h) and what a terminal would obey (base/text.h). */
static void describe_source(FILE *f, const wds_source_config *s) {
  char shown[WDS__URL_REDACT_MAX];
  fputs(wds__url_shown(s->spec, shown, sizeof shown), f);
  if (s->weight > 0)
    fprintf(f, " (weight %g", s->weight);
  else if (s->proportion > 0)
    fprintf(f, " (proportion %g", s->proportion);
  else if (s->repeat > 0)
    fprintf(f, " (repeat %g", s->repeat);
  else
    fputs(" (default amount", f);
  if (s->index_path) {
    fputs(", index ", f);
    wds__esc_write(f, s->index_path, 0);
  }
  fputc(')', f);
}

/* Rank 0: fetches a training batch (the time counts as data wait). 1: a
 * batch, 0: the end of the epoch, -1: failed. */
static int fetch(shared *sh, const wds_batch **out) {
  double t0 = now_s();
  const wds_batch *b = NULL;
  int rc = wds_loader_next(sh->train, &b);
  double dt = now_s() - t0;
  sh->iv_wait_s += dt;
  sh->total_wait_s += dt;
  if (rc == WDS_EOF)
    return 0;
  if (rc == WDS_ERR_CANCELLED) {
    sh->interrupted = 1;
    fail(sh, rc, "interrupted");
    return -1;
  }
  if (rc != WDS_OK) {
    fail(sh, rc, "training data: %s", wds_last_error());
    return -1;
  }
  int64_t gs[3];
  int gpu = sh->o->loader.jpeg_decode == WDS_JPEG_DECODE_GPU &&
            wds_gpu_jpeg_shape(sh->train, 0, gs) == WDS_OK &&
            gs[0] * gs[1] * gs[2] == sh->model.dims[0];
  if (b->field_count < 2 ||
      (!gpu && (b->fields[0].dtype != WDS_DTYPE_U8 ||
                b->fields[0].row_bytes != (size_t)sh->model.dims[0])) ||
      b->fields[1].dtype != WDS_DTYPE_I64) {
    wds_loader_release(sh->train, b);
    fail(sh, WDS_ERR_FORMAT, "training data: unexpected batch layout");
    return -1;
  }
  *out = b;
  return 1;
}

/* Steps wanted after `done` steps. */
static int more_steps(const shared *sh, uint64_t done) {
  return done < sh->total_steps &&
         !(sh->o->stop_after && done >= sh->o->stop_after);
}

/* Rank 0: decide the next round. */
static int coordinate(shared *sh, int *seen_eof) {
  if (sh->o->interrupted && sh->o->interrupted()) {
    sh->interrupted = 1;
    fail(sh, WDS_ERR_CANCELLED, "interrupted");
    return -1;
  }
  if (sh->step >= sh->total_steps) {
    sh->cmd = CMD_FINAL;
    return 0;
  }
  if (!more_steps(sh, sh->step)) {
    sh->cmd = CMD_STOP;
    return 0;
  }
  const wds_batch *b = sh->next;
  int staged = b != NULL, slot = sh->next_slot;
  sh->next = NULL;
  if (!b) {
    int got = 0;
    if (sh->next_eof)
      sh->next_eof = 0; /* the step before saw the end of the epoch */
    else if ((got = fetch(sh, &b)) < 0)
      return -1;
    if (!got) {
      if (*seen_eof) {
        fail(sh, WDS_ERR_INVALID, "training data: an epoch has no batches");
        return -1;
      }
      *seen_eof = 1;
      sh->cmd = CMD_EVAL;
      return 0;
    }
    slot = (int)(sh->uploads++ & 1);
  }
  *seen_eof = 0;
  sh->batch = b;
  sh->batch_slot = slot;
  sh->batch_staged = staged;
  sh->epoch = b->epoch;
  sh->cmd = CMD_STEP;
  if (sh->rows_log && log_rows(sh, b) != 0)
    return -1; /* the batch is released with the loader */
  return 0;
}

static void view_of(const shared *sh, const wds_batch *b, int rank, int slot,
                    tr_batch_view *v) {
  v->images = b->fields[0].data;
  v->labels = b->fields[1].data;
  v->valid = b->valid;
  v->batch_rows = b->rows;
  v->row0 = sh->row0[rank];
  v->rows = sh->rows[rank];
  v->slot = slot;
}

/* 1 with the first non-finite value of w[0..n) in *v, else 0. */
static int non_finite(const float *w, size_t n, double *v) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(w[i])) {
      *v = w[i];
      return 1;
    }
  return 0;
}

/* The run diverged: a non-finite training or evaluation loss, or weights
 * ("training loss is", "weights are": what, and v its value). Training stops
 * there with an error, as Keras' TerminateOnNaN and Lightning's
 * EarlyStopping(check_finite) stop (a diverged model only wastes the rest of
 * the run); the last checkpoint written is kept (a checkpoint is never written
 * from such weights). Returns WDS_ERR_INVALID with the message in e. */
static int diverged(shared *sh, wds__err *e, const char *what, double v) {
  char ranks[64], ck[WDS__ERR_SIZE / 2];
  if (sh->world == 1)
    snprintf(ranks, sizeof ranks, "rank 0");
  else
    snprintf(ranks, sizeof ranks, "all %d ranks", sh->world);
  if (sh->saved)
    snprintf(ck, sizeof ck,
             "checkpoint %.300s is at step %" PRIu64 ", before it",
             sh->o->checkpoint_path, sh->saved_step);
  else if (sh->resume)
    snprintf(ck, sizeof ck, "checkpoint %.300s (resumed) is at step %" PRIu64,
             sh->o->resume_path, sh->start_step);
  else
    snprintf(ck, sizeof ck, "no checkpoint written in this run");
  return wds__fail(e, WDS_ERR_INVALID,
                   "step %" PRIu64 ": the %s %s on %s: the run diverged "
                   "and was stopped (lower --lr, now %g, or add "
                   "--warmup-steps); %s",
                   sh->step, what, isnan(v) ? "NaN" : "infinite", ranks,
                   sh->o->lr, ck);
}

/* be->upload of view v of training batch b; a batch whose JPEGs are planned
 * for the GPU (--jpeg-decode gpu) goes to be->upload_jpeg, which decodes
 * the rank's rows on its device. */
static int upload(const shared *sh, tr_rank *r, const wds_batch *b,
                  const tr_batch_view *v, wds__err *e) {
  if (b->fields[0].dtype == WDS_DTYPE_BYTES)
    return sh->be->upload_jpeg(r, v, sh->train, b, e);
  return sh->be->upload(r, v, e);
}

static int save_checkpoint(shared *sh, tr_rank *r, wds__err *e) {
  tr_checkpoint c = {.layers = sh->model.layers,
                     .param_count = sh->param_count,
                     .step = sh->step,
                     .total_steps = sh->total_steps,
                     .fingerprint = sh->fingerprint,
                     .seed = sh->o->loader.seed};
  memcpy(c.dims, sh->model.dims, sizeof c.dims);
  wds_loader_position(sh->train, &c.loader_epoch, &c.loader_batches);
  if (sh->next) /* fetched ahead, not trained on: the resumed run reads it */
    c.loader_batches--;
  /* The position with what gives it meaning: another world resumes it
   * elastically (version 3). Without memory for it: a version 2 file. */
  if (wds_loader_state_at(sh->train, c.loader_epoch, c.loader_batches,
                          &c.loader_state) != WDS_OK)
    c.loader_state = NULL;
  c.world = (uint32_t)sh->world;
  c.elastic_fingerprint = sh->elastic_fingerprint;
  c.weights = malloc(sh->param_count * sizeof(float));
  c.momentum = malloc(sh->param_count * sizeof(float));
  size_t nrs = sh->o->loader.rank_batch_size_count;
  if (nrs && (c.rank_sizes = malloc(nrs * sizeof *c.rank_sizes)) != NULL) {
    for (size_t i = 0; i < nrs; i++)
      c.rank_sizes[i] = (uint32_t)sh->o->loader.rank_batch_sizes[i];
    c.rank_sizes_count = nrs;
  }
  int rc;
  if (!c.weights || !c.momentum || (nrs && !c.rank_sizes))
    rc = wds__fail(e, WDS_ERR_NOMEM, "checkpoint: out of memory");
  else if ((rc = sh->be->get_state(r, c.weights, c.momentum, e)) == WDS_OK) {
    double bad;
    if (non_finite(c.weights, sh->param_count, &bad) ||
        non_finite(c.momentum, sh->param_count, &bad))
      rc = diverged(sh, e, "weights are", bad); /* the last checkpoint stays */
    else
      rc = tr_checkpoint_save(sh->o->checkpoint_path, &c, e);
  }
  if (rc == WDS_OK) {
    sh->saved = 1;
    sh->saved_step = c.step;
  }
  tr_checkpoint_free(&c);
  return rc;
}

/* All ranks: one pass over the evaluation set. */
/* WDS_OK, or a negative status: with a message in e when this rank failed,
 * without one when the group was aborted (another rank failed). */
static int run_eval(shared *sh, tr_rank *r, int rank, wds__err *e) {
  double sums[3] = {0, 0, 0}; /* loss, correct, count */
  double loss = 0;
  uint64_t correct = 0, count = 0;
  int rc;
  for (;;) {
    if (rank == 0) {
      const wds_batch *b = NULL;
      rc = wds_loader_next(sh->eval, &b);
      sh->batch = NULL;
      sh->eval_end = 1;
      if (rc == WDS_OK) {
        if (b->field_count < 2 ||
            b->fields[0].row_bytes != (size_t)sh->model.dims[0]) {
          wds_loader_release(sh->eval, b);
          fail(sh, WDS_ERR_FORMAT, "evaluation data: unexpected batch layout");
          return WDS_ERR_FORMAT;
        }
        sh->batch = b;
        sh->eval_end = 0;
      } else if (rc == WDS_ERR_CANCELLED) {
        sh->interrupted = 1;
        fail(sh, rc, "interrupted");
        return rc;
      } else if (rc != WDS_EOF) {
        fail(sh, rc, "evaluation data: %s", wds_last_error());
        return rc;
      }
    }
    if ((rc = sh->be->barrier(r)) != WDS_OK)
      return rc;
    if (sh->eval_end)
      break;
    tr_batch_view v;
    view_of(sh, sh->batch, rank, 0, &v);
    if (sh->be->upload && ((rc = sh->be->upload(r, &v, e)) != WDS_OK ||
                           (rc = sh->be->upload_wait(r, 0, e)) != WDS_OK))
      return rc;
    if ((rc = sh->be->evaluate(r, &v, &loss, &correct, &count, e)) != WDS_OK)
      return rc;
    if ((rc = sh->be->barrier(r)) != WDS_OK)
      return rc;
    if (rank == 0)
      wds_loader_release(sh->eval, sh->batch);
  }
  sums[0] = loss;
  sums[1] = (double)correct;
  sums[2] = (double)count;
  if ((rc = sh->be->allreduce_small(r, sums, 3, e)) != WDS_OK)
    return rc;
  if (rank == 0) {
    sh->have_eval = 1;
    sh->eval_count = (uint64_t)sums[2];
    sh->eval_loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
    sh->eval_acc = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
  }
  return 0;
}

static int log_eval(shared *sh, const char *when) {
  FILE *out = sh->o->out;
  if (sh->eval_count == 0)
    fprintf(out,
            "eval %s step %" PRIu64 ": no samples to evaluate (the --eval "
            "shards hold none)\n",
            when, sh->step);
  else
    fprintf(out,
            "eval %s step %" PRIu64 ": loss %.4f accuracy %.4f (%" PRIu64
            " samples)\n",
            when, sh->step, sh->eval_loss, sh->eval_acc, sh->eval_count);
  note_out(sh);
  if (sh->json) {
    /* No samples: no loss or accuracy (null), not zeros. */
    int none = sh->eval_count == 0;
    fprintf(sh->json,
            "{\"eval\": {\"when\": \"%s\", \"step\": %" PRIu64 ", \"loss\": ",
            when, sh->step);
    wds__json_write_double(sh->json, "%.6f", none ? NAN : sh->eval_loss);
    fputs(", \"accuracy\": ", sh->json);
    wds__json_write_double(sh->json, "%.6f", none ? NAN : sh->eval_acc);
    fprintf(sh->json, ", \"samples\": %" PRIu64 "}}\n", sh->eval_count);
    errno = 0;
    fflush(sh->json);
    return log_written(sh, sh->json, "--json", &sh->json_errno);
  }
  return 0;
}

static void print_step(shared *sh, double lr, double loss, double sps,
                       double wait, double h2d) {
  FILE *out = sh->o->out;
  fprintf(out,
          "step %" PRIu64 "/%" PRIu64 " epoch %" PRIu64
          " loss %.4f lr %.5f samples/s %.0f data-wait %.1f%%",
          sh->step, sh->total_steps, sh->epoch, loss, lr, sps, wait);
  if (sh->be->take_h2d)
    fprintf(out, " h2d %.1f GB/s", h2d);
  if (sh->o->log_checksums) {
    fputs(" weights", out);
    for (int i = 0; i < sh->world; i++)
      fprintf(out, " %016" PRIx64, sh->checksums[i]);
  }
  fputc('\n', out);
  note_out(sh);
  if (sh->json) {
    /* A non-finite loss (the run diverged; log_step stops it) is null:
     * JSON has no NaN. */
    fprintf(sh->json,
            "{\"step\": %" PRIu64 ", \"epoch\": %" PRIu64 ", \"loss\": ",
            sh->step, sh->epoch);
    wds__json_write_double(sh->json, "%.6f", loss);
    fputs(", \"lr\": ", sh->json);
    wds__json_write_double(sh->json, "%.6g", lr);
    fputs(", \"samples_per_s\": ", sh->json);
    wds__json_write_double(sh->json, "%.1f", sps);
    fputs(", \"data_wait_pct\": ", sh->json);
    wds__json_write_double(sh->json, "%.2f", wait);
    if (sh->be->take_h2d) {
      fputs(", \"h2d_gb_per_s\": ", sh->json);
      wds__json_write_double(sh->json, "%.3f", h2d);
    }
    if (sh->o->log_checksums) {
      fputs(", \"weights_checksum\": [", sh->json);
      print_checksums(sh, sh->json, ", ");
      fputc(']', sh->json);
    }
    fputs("}\n", sh->json);
    errno = 0;
    fflush(sh->json);
    log_written(sh, sh->json, "--json", &sh->json_errno);
  }
}

/* Rank 0, every rank having taken the step: a log line for the interval. */
static int log_step(shared *sh, tr_rank *r, double lr, wds__err *e) {
  double loss_sum, count;
  int rc = sh->be->take_loss(r, &loss_sum, &count, e);
  if (rc != WDS_OK)
    return rc;
  if (sh->be->take_h2d) {
    double bytes, secs;
    sh->be->take_h2d(r, &bytes, &secs);
    sh->iv_h2d_bytes += bytes;
    sh->iv_h2d_s += secs;
    sh->total_h2d_bytes += bytes;
    sh->total_h2d_s += secs;
  }
  double t = now_s(), dt = t - sh->iv_start_s;
  double loss = count > 0 ? loss_sum / count : 0.0;
  /* count is the job's valid rows: samples/s of the whole job. */
  double sps = dt > 0 ? count / dt : 0.0;
  double wait = dt > 0 ? 100.0 * sh->iv_wait_s / dt : 0.0;
  double h2d = sh->iv_h2d_s > 0 ? sh->iv_h2d_bytes / sh->iv_h2d_s / 1e9 : 0;
  if (sh->o->proc_rank == 0) /* process 0 logs for the job */
    print_step(sh, lr, loss, sps, wait, h2d);
  if (sh->json_errno)
    return 1; /* recorded: the run stops at the first failed write */
  sh->iv_wait_s = sh->iv_h2d_bytes = sh->iv_h2d_s = 0;
  sh->iv_start_s = t;
  if (!isfinite(loss))
    return diverged(sh, e, "training loss is", loss);
  return WDS_OK;
}

/* Every rank: the weight checksums of all ranks of the job (a collective),
 * into all[world]; local rank 0 keeps them in sh->checksums. */
static int gather_checksums(shared *sh, tr_rank *r, int rank, float *tmp,
                            uint64_t *all, wds__err *e) {
  int rc = sh->be->get_state(r, tmp, NULL, e);
  if (rc != WDS_OK)
    return rc;
  /* Every rank has the same weights: rank 0 checks them (at the end of
   * the run, whatever --log-every says). */
  double bad;
  if (rank == 0 && non_finite(tmp, sh->param_count, &bad))
    return diverged(sh, e, "weights are", bad);
  /* The bytes of the float32 weights as the host holds them (little-endian
   * on every platform wds builds for). */
  uint64_t mine = tr_fnv1a(TR_FNV_INIT, tmp, sh->param_count * sizeof(float));
  if ((rc = sh->be->gather_u64(r, mine, all, e)) != WDS_OK)
    return rc;
  if (rank == 0)
    memcpy(sh->checksums, all, (size_t)sh->world * sizeof *all);
  return WDS_OK;
}

/* One training step on sh->batch (every rank), with the next batch fetched
 * (rank 0) and uploaded (every rank) while this one computes. WDS_OK; 1 when
 * the run ends because another rank failed (or a fetch failed: already
 * recorded); or a negative status with the message in e. */
static int run_step(shared *sh, tr_rank *r, int rank, float *tmp, uint64_t *all,
                    wds__err *e) {
  const tr_options *o = sh->o;
  const tr_backend *be = sh->be;
  tr_batch_view v;
  view_of(sh, sh->batch, rank, sh->batch_slot, &v);
  double lr = tr_lr_at(sh->step, sh->total_steps, o->warmup_steps, o->lr);
  int rc;
  if (be->upload && !sh->batch_staged &&
      (rc = upload(sh, r, sh->batch, &v, e)) != WDS_OK)
    return rc;
  if ((rc = be->forward_backward(r, &v, e)) != WDS_OK ||
      (rc = be->allreduce(r, e)) != WDS_OK ||
      (rc = be->sgd_step(r, (float)lr, e)) != WDS_OK)
    return rc;
  uint64_t done = sh->step + 1;
  if (rank == 0 && more_steps(sh, done)) {
    const wds_batch *b = NULL;
    int got = fetch(sh, &b);
    if (got < 0)
      return 1;
    sh->next = got ? b : NULL;
    sh->next_eof = !got;
    if (got)
      sh->next_slot = (int)(sh->uploads++ & 1);
  }
  if (be->barrier(r) != 0) /* next published */
    return 1;
  if (be->upload && sh->next) {
    tr_batch_view nv;
    view_of(sh, sh->next, rank, sh->next_slot, &nv);
    if ((rc = upload(sh, r, sh->next, &nv, e)) != WDS_OK)
      return rc;
  }
  if (be->upload_wait && (rc = be->upload_wait(r, v.slot, e)) != WDS_OK)
    return rc;
  int log_now =
      o->log_every && (done % o->log_every == 0 || done == sh->total_steps);
  if (log_now && o->log_checksums &&
      (rc = gather_checksums(sh, r, rank, tmp, all, e)) != WDS_OK)
    return rc;
  if (be->barrier(r) != 0) /* nobody reads the batch any more */
    return 1;
  if (rank == 0) {
    wds_loader_release(sh->train, sh->batch);
    sh->batch = NULL;
    sh->step = done;
    if (log_now && (rc = log_step(sh, r, lr, e)) != WDS_OK)
      return rc;
    if (o->checkpoint_path &&
        ((o->checkpoint_every && done % o->checkpoint_every == 0) ||
         done == o->stop_after || done == sh->total_steps) &&
        (rc = save_checkpoint(sh, r, e)) != WDS_OK)
      return rc;
  }
  return WDS_OK;
}

static void *rank_main(void *arg) {
  rank_arg *a = arg;
  shared *sh = a->sh;
  const tr_backend *be = sh->be;
  int rank = a->rank, seen_eof = 0, rc;
  wds__err err;
  err.msg[0] = '\0';
  tr_rank *r = NULL;
  float *tmp = malloc(sh->param_count * sizeof(float));
  uint64_t *prints = calloc((size_t)sh->world, sizeof *prints);
  if (!tmp || !prints) {
    fail(sh, WDS_ERR_NOMEM, "rank %d: out of memory", sh->first_rank + rank);
    goto out;
  }
  if ((rc = be->rank_create(sh->group, rank, &sh->model, sh->rows[rank], &r,
                            &err)) != WDS_OK)
    goto failed;
  if (sh->resume && (rc = be->set_state(r, sh->resume->weights,
                                        sh->resume->momentum, &err)) != WDS_OK)
    goto failed;
  /* Every rank of the job runs the same configuration (processes started
   * with other options would train something else, or hang). */
  if ((rc = be->gather_u64(r, sh->fingerprint, prints, &err)) != WDS_OK)
    goto failed;
  for (int i = 0; i < sh->world; i++)
    if (prints[i] != sh->fingerprint) {
      rc = wds__fail(&err, WDS_ERR_INVALID,
                     "rank %d was started with other options than rank %d "
                     "(data, model, optimizer, batch or topology settings "
                     "differ)",
                     i, sh->first_rank + rank);
      goto failed;
    }
  if (rank == 0)
    sh->iv_start_s = now_s();
  for (;;) {
    if (rank == 0 && coordinate(sh, &seen_eof) != 0)
      goto out;
    if (be->barrier(r) != WDS_OK)
      goto out;
    int cmd = sh->cmd;
    if (cmd == CMD_STEP) {
      rc = run_step(sh, r, rank, tmp, prints, &err);
      if (rc < 0)
        goto failed;
      if (rc > 0)
        goto out;
    } else if (cmd == CMD_EVAL || cmd == CMD_FINAL) {
      if (sh->eval) {
        if ((rc = run_eval(sh, r, rank, &err)) != WDS_OK)
          goto failed_or_out;
        if (rank == 0 && sh->o->proc_rank == 0 && /* for the job */
            log_eval(sh, cmd == CMD_FINAL ? "final" : "epoch-end") != 0)
          goto out; /* recorded: the run stops there */
        if (rank == 0 && sh->eval_count > 0 && !isfinite(sh->eval_loss)) {
          rc = diverged(sh, &err, "evaluation loss is", sh->eval_loss);
          goto failed;
        }
      }
      /* Every rank has read this round's command before rank 0 writes the
       * next one (without an eval set the round has no collective). */
      if (be->barrier(r) != WDS_OK)
        goto out;
      if (cmd == CMD_FINAL)
        break;
    } else {
      break;
    }
  }
  /* Final checksums of every rank. */
  if ((rc = gather_checksums(sh, r, rank, tmp, prints, &err)) != WDS_OK)
    goto failed;
  goto out;
failed_or_out:
  if (!err.msg[0])
    goto out;
failed:
  fail(sh, rc, "%s", err.msg);
out:
  be->rank_destroy(r);
  free(tmp);
  free(prints);
  return NULL;
}

static wds_field_spec g_fields_tpl[2] = {
    {.name = "jpg;jpeg;png", .decode = WDS_DECODE_IMAGE},
    {.name = "cls", .decode = WDS_DECODE_INT}};

/* FNV-1a of the string s (NULL: ""), continuing from h. */
static uint64_t fnv_str(uint64_t h, const char *s) {
  return s ? tr_fnv1a(h, s, strlen(s)) : h;
}

/* FNV-1a of the formatted text, continuing from h: numbers and names only
 * (never a spec or a path, which fnv_str hashes whatever their length), so
 * the text always fits. */
static uint64_t fnv_fmt(uint64_t h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static uint64_t fnv_fmt(uint64_t h, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0)
    n = 0;
  return tr_fnv1a(h, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* FNV-1a is byte by byte: hashed in pieces, the text hashes as it did when
 * it was formatted whole into one buffer (checkpoints of earlier runs still
 * resume), now without its 4 KB limit, which a long --train spec ran past
 * (reading the stack beyond the buffer, so a resume could be refused or
 * accepted wrongly; a --source spec was cut at 4 KB). */
uint64_t tr_config_fingerprint(const tr_options *o, const tr_model_config *m) {
  uint64_t h = fnv_str(TR_FNV_INIT, "train=");
  h = fnv_str(h, o->loader.spec);
  h = fnv_str(h, "|index=");
  h = fnv_str(h, o->loader.index_path);
  h = fnv_fmt(h,
              "|seed=%" PRIu64 "|mode=%d|spe=%" PRIu64
              "|batch=%zu|ranks=%d|procs=%d|workers=%d|img=%d|ch=%d|crop=%d"
              "|sbuf=%zu|last=%d|lr=%.17g|mom=%.17g|wd=%.17g|warmup=%" PRIu64
              "|backend=",
              o->loader.seed, (int)o->loader.mode, o->loader.samples_per_epoch,
              o->loader.batch_size, o->ranks, o->procs, o->loader.workers,
              o->loader.image_size, o->channels, (int)o->loader.crop,
              o->loader.shuffle_buffer, (int)o->loader.last_batch, o->lr,
              o->momentum, o->weight_decay, o->warmup_steps);
  h = fnv_str(h, o->backend->name);
  h = fnv_fmt(h, "|layers=%d", m->layers);
  h = tr_fnv1a(h, m->dims, sizeof m->dims);
  /* Per-rank batch sizes: unchanged fingerprints without them. */
  for (size_t i = 0; i < o->loader.rank_batch_size_count; i++) {
    uint64_t b = o->loader.rank_batch_sizes[i];
    h = tr_fnv1a(h, &b, sizeof b);
  }
  /* The augmentation (crop scale and ratio, flip, ColorJitter): unchanged
   * fingerprints with the defaults. */
  {
    static const wds_loader_config d = WDS_LOADER_CONFIG_INIT;
    const wds_loader_config *c = &o->loader;
    char aug[512];
    snprintf(aug, sizeof aug,
             "|aug=%.17g,%.17g,%.17g,%.17g,%.17g|cj=%.17g,%.17g,%.17g,%.17g,"
             "%.17g,%.17g,%.17g,%.17g",
             c->crop_scale_min, c->crop_scale_max, c->crop_ratio_min,
             c->crop_ratio_max, c->flip_prob, c->brightness[0],
             c->brightness[1], c->contrast[0], c->contrast[1], c->saturation[0],
             c->saturation[1], c->hue[0], c->hue[1]);
    char def[512];
    snprintf(def, sizeof def,
             "|aug=%.17g,%.17g,%.17g,%.17g,%.17g|cj=%.17g,%.17g,%.17g,%.17g,"
             "%.17g,%.17g,%.17g,%.17g",
             d.crop_scale_min, d.crop_scale_max, d.crop_ratio_min,
             d.crop_ratio_max, d.flip_prob, d.brightness[0], d.brightness[1],
             d.contrast[0], d.contrast[1], d.saturation[0], d.saturation[1],
             d.hue[0], d.hue[1]);
    if (strcmp(aug, def) != 0)
      h = fnv_str(h, aug);
  }
  /* Sources: unchanged fingerprints without them. */
  for (size_t i = 0; i < o->loader.source_count; i++) {
    const wds_source_config *sc = &o->loader.sources[i];
    h = fnv_str(h, "|source=");
    h = fnv_str(h, sc->spec);
    h = fnv_str(h, "|index=");
    h = fnv_str(h, sc->index_path);
    h = fnv_fmt(h, "|w=%.17g|p=%.17g|r=%.17g", sc->weight, sc->proportion,
                sc->repeat);
  }
  return h;
}

/* The fingerprint without what an elastic resume may change. */
static uint64_t elastic_fingerprint(const tr_options *o,
                                    const tr_model_config *m) {
  tr_options t = *o;
  t.ranks = t.procs = 1;
  t.loader.batch_size = 1;
  t.loader.rank_batch_sizes = NULL;
  t.loader.rank_batch_size_count = 0;
  t.loader.workers = 0;
  t.loader.shuffle_buffer = 0;
  t.loader.last_batch = WDS_LAST_KEEP;
  return tr_config_fingerprint(&t, m);
}

/* The checkpoint's per-rank batch sizes are the run's (none: none). */
static int same_rank_sizes(const tr_options *o, const tr_checkpoint *ck) {
  if (ck->rank_sizes_count != o->loader.rank_batch_size_count)
    return 0;
  for (size_t i = 0; i < ck->rank_sizes_count; i++)
    if (ck->rank_sizes[i] != o->loader.rank_batch_sizes[i])
      return 0;
  return 1;
}

/* "per-rank batch sizes 24,8" (the run's, from o, or a checkpoint's), or
 * "no per-rank batch sizes (--batch-size 32)". */
static void describe_rank_sizes(char *buf, size_t cap, const tr_options *o,
                                const uint32_t *ck_sizes, size_t ck_count) {
  size_t n = o ? o->loader.rank_batch_size_count : ck_count, used = 0;
  if (n == 0) {
    if (o)
      snprintf(buf, cap, "no per-rank batch sizes (--batch-size %zu)",
               o->loader.batch_size);
    else
      snprintf(buf, cap, "no per-rank batch sizes");
    return;
  }
  int k = snprintf(buf, cap, "per-rank batch sizes ");
  used = k > 0 ? (size_t)k : 0;
  for (size_t i = 0; i < n && used + 16 < cap; i++) {
    k = snprintf(buf + used, cap - used, i ? ",%zu" : "%zu",
                 o ? o->loader.rank_batch_sizes[i] : (size_t)ck_sizes[i]);
    used += k > 0 ? (size_t)k : 0;
  }
  if (used + 16 >= cap)
    snprintf(buf + used, cap - used, ",...");
}

/* The rows of the job: world and first rank, each local rank's rows of a
 * loader batch (rows, row0), the process's (proc_rows) and each process's
 * (proc_sizes). */
static int plan_rows(shared *sh, wds__err *e) {
  const tr_options *o = sh->o;
  const wds_loader_config *lo = &o->loader;
  sh->world = o->procs * o->ranks;
  sh->first_rank = o->proc_rank * o->ranks;
  if (lo->rank_batch_size_count &&
      lo->rank_batch_size_count != (size_t)sh->world)
    return wds__fail(e, WDS_ERR_INVALID,
                     "%zu per-rank batch sizes for %d ranks (%d process%s x "
                     "%d rank%s): give one per rank",
                     lo->rank_batch_size_count, sh->world, o->procs,
                     o->procs == 1 ? "" : "es", o->ranks,
                     o->ranks == 1 ? "" : "s");
  sh->rows = calloc((size_t)o->ranks, sizeof *sh->rows);
  sh->row0 = calloc((size_t)o->ranks, sizeof *sh->row0);
  sh->proc_sizes = calloc((size_t)o->procs, sizeof *sh->proc_sizes);
  if (!sh->rows || !sh->row0 || !sh->proc_sizes)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  for (int p = 0; p < o->procs; p++)
    for (int i = 0; i < o->ranks; i++) {
      size_t g = (size_t)p * (size_t)o->ranks + (size_t)i;
      size_t b =
          lo->rank_batch_size_count ? lo->rank_batch_sizes[g] : lo->batch_size;
      if (b < 1 || b > ((size_t)1 << 24))
        return wds__fail(e, WDS_ERR_INVALID,
                         "rank %zu's batch size %zu (1 .. 16777216)", g, b);
      if (p == o->proc_rank) {
        sh->row0[i] = sh->proc_rows;
        sh->rows[i] = b;
        sh->proc_rows += b;
      }
      sh->proc_sizes[p] += b;
    }
  return WDS_OK;
}

/* The model the options describe, its size and the run's fingerprint. */
static void plan_model(shared *sh) {
  const tr_options *o = sh->o;
  tr_model_config *m = &sh->model;
  m->layers = o->hidden_count + 1;
  m->dims[0] = o->loader.image_size * o->loader.image_size * o->channels;
  for (int i = 0; i < o->hidden_count; i++)
    m->dims[i + 1] = o->hidden[i];
  m->dims[m->layers] = o->classes;
  m->seed = o->loader.seed;
  m->momentum = (float)o->momentum;
  m->weight_decay = (float)o->weight_decay;
  sh->param_count = tr_model_param_count(m);
  sh->fingerprint = tr_config_fingerprint(o, m);
  sh->elastic_fingerprint = elastic_fingerprint(o, m);
}

/* A checkpoint's fingerprint that is not this run's: which one of the
 * options that fix what a saved position means (ranks per process,
 * processes, workers, batch size, mode, shuffle buffer, seed) made it,
 * found by hashing this run's options with that one changed, into buf as
 * "was made on 2 ranks (1 process x 2); this run has 3 ranks (1 process x
 * 3)". 0 when no single one of them explains it (buf then empty). The
 * checkpoint keeps only the fingerprint, so the values are found, not
 * read: each is tried over its range (ranks and processes 1..4096, workers
 * 0..256, batch size 1..65536, shuffle buffer 0..65536), a few hundred
 * thousand hashes of a short text. */
static int explain_fingerprint(const tr_options *o, const tr_model_config *m,
                               uint64_t want, char *buf, size_t cap) {
  tr_options t = *o;
  buf[0] = 0;
  for (int v = 1; v <= 4096; v++) {
    t.ranks = v;
    if (v != o->ranks && tr_config_fingerprint(&t, m) == want) {
      snprintf(buf, cap,
               "was made on %d ranks (%d process%s x %d); this run has %d "
               "ranks (%d process%s x %d)",
               v * o->procs, o->procs, o->procs == 1 ? "" : "es", v,
               o->ranks * o->procs, o->procs, o->procs == 1 ? "" : "es",
               o->ranks);
      return 1;
    }
  }
  t.ranks = o->ranks;
  for (int v = 1; v <= 4096; v++) {
    t.procs = v;
    if (v != o->procs && tr_config_fingerprint(&t, m) == want) {
      snprintf(buf, cap,
               "was made on %d ranks (%d process%s x %d); this run has %d "
               "ranks (%d process%s x %d)",
               v * o->ranks, v, v == 1 ? "" : "es", o->ranks,
               o->ranks * o->procs, o->procs, o->procs == 1 ? "" : "es",
               o->ranks);
      return 1;
    }
  }
  t.procs = o->procs;
  for (int v = 0; v <= 256; v++) {
    t.loader.workers = v; /* 0: not given (the loader's default, 4) */
    if (v != o->loader.workers && tr_config_fingerprint(&t, m) == want) {
      snprintf(buf, cap,
               "was made with --workers %d; this run has --workers %d",
               v ? v : 4, o->loader.workers ? o->loader.workers : 4);
      return 1;
    }
  }
  t.loader.workers = o->loader.workers;
  for (size_t v = 1; v <= 65536; v++) {
    t.loader.batch_size = v;
    if (v != o->loader.batch_size && tr_config_fingerprint(&t, m) == want) {
      snprintf(buf, cap,
               "was made with --batch-size %zu; this run has --batch-size %zu",
               v, o->loader.batch_size);
      return 1;
    }
  }
  t.loader.batch_size = o->loader.batch_size;
  static const char *const modes[] = {"plain", "exact", "resampled"};
  for (int v = 0; v < 3; v++) {
    t.loader.mode = (wds_mode)v;
    if (v != (int)o->loader.mode && tr_config_fingerprint(&t, m) == want) {
      snprintf(buf, cap, "was made with --mode %s; this run has --mode %s",
               modes[v], modes[o->loader.mode]);
      return 1;
    }
  }
  t.loader.mode = o->loader.mode;
  for (size_t v = 0; v <= 65536; v++) {
    t.loader.shuffle_buffer = v;
    if (v != o->loader.shuffle_buffer && tr_config_fingerprint(&t, m) == want) {
      snprintf(buf, cap,
               "was made with --shuffle-buffer %zu; this run has "
               "--shuffle-buffer %zu",
               v, o->loader.shuffle_buffer);
      return 1;
    }
  }
  return 0;
}

/* --resume: the checkpoint, loaded and checked against this run (model,
 * per-rank batch sizes, fingerprint); sh->resume and the first step. */
static int load_resume(shared *sh, wds__err *e) {
  const tr_options *o = sh->o;
  tr_checkpoint *ck = &sh->ck;
  int rc = tr_checkpoint_load(o->resume_path, ck, e);
  if (rc != WDS_OK)
    return rc;
  if (ck->layers != sh->model.layers ||
      memcmp(ck->dims, sh->model.dims, sizeof ck->dims) != 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "checkpoint %s: its model has other layer sizes than "
                     "--image-size/--channels/--hidden/--classes give",
                     o->resume_path);
  /* Another world, other sizes, workers or shuffle buffer, the rest the
   * same, in exact mode (a --train spec or a mix of --sources, which the
   * fingerprint covers): the loader resumes elastically
   * from the checkpoint's state (it checks that state against its own
   * configuration, and refuses what it cannot continue exactly). */
  if (ck->fingerprint != sh->fingerprint && ck->loader_state &&
      ck->elastic_fingerprint == sh->elastic_fingerprint &&
      o->loader.mode == WDS_MODE_EXACT && !o->steps) {
    sh->elastic = 1;
    sh->resume = ck;
    sh->step = sh->start_step = ck->step; /* set again by open_loaders */
    return WDS_OK;
  }
  if (!same_rank_sizes(o, ck)) {
    char had[256], have[256];
    describe_rank_sizes(had, sizeof had, NULL, ck->rank_sizes,
                        ck->rank_sizes_count);
    describe_rank_sizes(have, sizeof have, o, NULL, 0);
    return wds__fail(e, WDS_ERR_INVALID,
                     "checkpoint %s was made with %s; this run has %s: "
                     "resume with the same batch sizes",
                     o->resume_path, had, have);
  }
  char why[256];
  if (ck->fingerprint != sh->fingerprint &&
      explain_fingerprint(o, &sh->model, ck->fingerprint, why, sizeof why))
    return wds__fail(e, WDS_ERR_INVALID,
                     "checkpoint %s %s: its position (epoch %" PRIu64
                     ", %" PRIu64 " batches) means other samples here, so "
                     "it cannot be continued; resume with the options it "
                     "was made with",
                     o->resume_path, why, ck->loader_epoch, ck->loader_batches);
  if (ck->fingerprint != sh->fingerprint)
    return wds__fail(e, WDS_ERR_INVALID,
                     "checkpoint %s: made with another configuration (data "
                     "spec or --source list, seed, mode, batch size, ranks, "
                     "workers, image options or optimizer settings differ); "
                     "resume with the same options",
                     o->resume_path);
  sh->resume = ck;
  sh->step = sh->start_step = ck->step;
  return WDS_OK;
}

/* The training loader's configuration: the options as given (o->loader),
 * but what the trainer decides: the rows, the fields, the rank and world
 * (processes), the epoch overlap and the position to resume at. */
static void train_loader_config(const shared *sh, const wds_field_spec *fields,
                                wds_loader_config *lc) {
  const tr_options *o = sh->o;
  *lc = o->loader;
  lc->rank = o->proc_rank;
  lc->world_size = o->procs;
  if (o->loader.rank_batch_size_count) {
    /* Each process's share in proportion to its ranks' rows: every
     * process takes the same number of steps. */
    lc->rank_batch_sizes = sh->proc_sizes;
    lc->rank_batch_size_count = (size_t)o->procs;
    lc->batch_size = 1; /* the loader's default: the per-rank sizes rule */
  } else {
    lc->batch_size = sh->proc_rows;
  }
  lc->fields = fields;
  lc->field_count = 2;
  /* The next epoch's shuffle buffer fills while this one's last step
   * computes and the evaluation runs. */
  lc->eager_next_epoch = 1;
  lc->epoch = sh->resume ? sh->resume->loader_epoch : 0;
  lc->resume_batches = sh->resume ? sh->resume->loader_batches : 0;
  /* The saved state whenever there is one, not only across a change of
   * world: a checkpoint made inside an elastic remainder counts its batches
   * in that remainder (its from= chain says which), so even on the same
   * configuration the plain (epoch, batches) would point at other samples.
   * The loader checks the state against its configuration and, without a
   * from= chain and on the same configuration, opens (epoch, batches). */
  if (sh->resume && sh->resume->loader_state)
    lc->resume_state = sh->resume->loader_state;
}

/* The evaluation loader's: the training loader's reading options over
 * eval_spec, each sample once in order (plain mode, no shuffle, center
 * crop, decoded on the CPU), the process's rows per batch. */
static void eval_loader_config(const shared *sh, const wds_loader_config *lc,
                               wds_loader_config *ec) {
  *ec = *lc;
  ec->spec = sh->o->eval_spec;
  ec->index_path = NULL;
  ec->sources = NULL;
  ec->source_count = 0;
  ec->mode = WDS_MODE_PLAIN;
  ec->workers = 0; /* plain mode: at most one per eval shard */
  ec->samples_per_epoch = 0;
  ec->rank_batch_sizes = NULL; /* plain mode: rows split as in training */
  ec->rank_batch_size_count = 0;
  ec->batch_size = sh->proc_rows;
  ec->shard_shuffle = 0;
  ec->shuffle_buffer = 0;
  ec->crop = WDS_CROP_CENTER;
  ec->last_batch = WDS_LAST_KEEP;
  ec->epoch = 0;
  ec->resume_batches = 0;
  ec->resume_state = NULL;
  ec->jpeg_decode = WDS_JPEG_DECODE_CPU;
}

/* The loaders (training, and evaluation with --eval), and the steps of the
 * run they give. */
static int open_loaders(shared *sh, wds__err *e) {
  const tr_options *o = sh->o;
  int rc;
  /* The loaders pin their batch memory in the current device's context:
   * make it this process's first GPU (under torchrun, GPU LOCAL_RANK). */
  if (o->backend->set_device &&
      (rc = o->backend->set_device(o->first_device, e)) != WDS_OK)
    return rc;
  if (o->loader.jpeg_decode == WDS_JPEG_DECODE_GPU && !o->backend->upload_jpeg)
    return wds__fail(e, WDS_ERR_INVALID,
                     "--jpeg-decode gpu: the %s backend cannot decode on a "
                     "GPU (use --device cuda)",
                     o->backend->name);
  wds_field_spec fields[2] = {g_fields_tpl[0], g_fields_tpl[1]};
  fields[0].channels = o->channels;
  wds_loader_config lc;
  train_loader_config(sh, fields, &lc);
  if ((rc = wds_loader_open(&lc, &sh->train)) != WDS_OK)
    return wds__fail(e, rc, "%s: %s",
                     o->loader.source_count ? "--source" : "--train",
                     wds_last_error());
  if (o->watch_loader)
    o->watch_loader(0, sh->train);
  sh->epoch_batches = wds_loader_epoch_batches(sh->train);
  uint64_t left = 0, full = 0;
  if (sh->resume && wds_loader_elastic(sh->train, NULL, &left, &full)) {
    /* The rest of the interrupted epoch, then whole epochs of this world:
     * the step count follows the fraction of the epochs done, so the
     * learning-rate schedule goes on where it was. Also on the world the
     * checkpoint was made on, when it was made inside such a remainder. */
    uint64_t rest = sh->epoch_batches, ep = sh->resume->loader_epoch;
    sh->epoch_batches = full;
    sh->elastic_left = left;
    sh->elastic_live = 1;
    sh->step = sh->start_step = ep * full + (rest < full ? full - rest : 0);
  }
  sh->total_steps = o->steps ? o->steps : o->epochs * sh->epoch_batches;
  if (sh->total_steps == 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "no training steps (an epoch has no batches?)");
  if (sh->resume && sh->start_step > sh->total_steps)
    return wds__fail(e, WDS_ERR_INVALID,
                     "checkpoint %s is at step %" PRIu64 ", past the %" PRIu64
                     " steps of this run",
                     o->resume_path, sh->start_step, sh->total_steps);
  if (o->eval_spec) {
    wds_loader_config ec;
    eval_loader_config(sh, &lc, &ec);
    if ((rc = wds_loader_open(&ec, &sh->eval)) != WDS_OK)
      return wds__fail(e, rc, "--eval: %s", wds_last_error());
    if (o->watch_loader)
      o->watch_loader(1, sh->eval);
  }
  return WDS_OK;
}

/* --json FILE, --log-rows FILE: opened for writing into *f as logs
 * (wds/outfile.h, WDS_OUTFILE_STREAM): FILE is written as the run goes, so
 * `tail -f` follows it and a killed run leaves what it logged; a FIFO or a
 * device named itself is written in place; a symbolic link to a FIFO, a
 * device or a socket is refused, and one to a file is replaced (its target
 * left as it was). */
static int open_log(const char *flag, const char *path, wds_outfile **of,
                    FILE **f, wds__err *e) {
  if (wds_outfile_open(path, WDS_OUTFILE_STREAM, of) != WDS_OK)
    return wds__fail(e, WDS_ERR_OPEN, "%s: %s", flag, wds_last_error());
  /* stdio on a copy of the descriptor: fclose flushes and closes it, and
   * the commit syncs and closes the outfile's own. */
  int fd = dup(wds_outfile_fd(*of));
  if (fd < 0 || !(*f = fdopen(fd, "w"))) {
    int rc =
        wds__fail(e, WDS_ERR_OPEN, "%s %s: %s", flag, path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return rc;
  }
  return WDS_OK;
}

/* Adds "; WHAT" to a failed run's message (rc < 0) unless it names WHAT
 * already, or fails the run with WHAT: every output that failed is named,
 * not only the first. */
static int also_failed(wds__err *e, int rc, const char *what) {
  if (rc == WDS_OK)
    return wds__fail(e, WDS_ERR_IO, "%s", what);
  if (!strstr(e->msg, what)) {
    size_t n = strlen(e->msg);
    snprintf(e->msg + n, sizeof e->msg - n, "; %s", what);
  }
  return rc;
}

/* Ends what open_log opened (of NULL: nothing), whatever the run's
 * status rc so far: the log is kept. A log that could not be written
 * fails a run that had not failed, and is named after the first failure
 * of one that had, with its reason (saved: the first failed write's errno,
 * kept by log_written; else fclose's). */
static int close_log(const char *flag, const char *path, wds_outfile *of,
                     FILE *f, int saved, int rc, wds__err *e) {
  if (!of)
    return rc;
  int failed = 0;
  errno = 0;
  if (f) {
    /* A write that failed earlier leaves only the error flag: fclose
     * reports only what was still buffered. */
    failed = ferror(f) != 0;
    if (fclose(f) != 0)
      failed = 1;
  }
  int en = saved ? saved : errno;
  char what[WDS__ERR_SIZE];
  if (failed || saved) {
    snprintf(what, sizeof what, "%s %s: cannot write it%s%s", flag, path,
             en ? ": " : "", en ? strerror(en) : "");
    rc = also_failed(e, rc, what);
  }
  if (wds_outfile_commit(of) != WDS_OK) {
    snprintf(what, sizeof what, "%s: %s", flag, wds_last_error());
    rc = also_failed(e, rc, what);
  }
  wds_outfile_close(of);
  return rc;
}

/* The start lines: backend, ranks, rows, batches and steps, model size;
 * each source; where a resumed run resumes. */
static void print_banner(const shared *sh) {
  const tr_options *o = sh->o;
  const wds_loader_config *lo = &o->loader;
  FILE *out = o->out;
  fprintf(out, "wds-train: backend %s, %d rank%s", o->backend->name, o->ranks,
          o->ranks == 1 ? "" : "s");
  if (o->procs > 1)
    fprintf(out, " in process %d of %d (global ranks %d..%d of %d)",
            o->proc_rank, o->procs, sh->first_rank,
            sh->first_rank + o->ranks - 1, sh->world);
  if (lo->rank_batch_size_count) {
    size_t sum = 0;
    fputs(", rows per rank ", out);
    for (size_t i = 0; i < lo->rank_batch_size_count; i++) {
      fprintf(out, i ? ",%zu" : "%zu", lo->rank_batch_sizes[i]);
      sum += lo->rank_batch_sizes[i];
    }
    fprintf(out, " (global batch %zu; %zu per loader batch)", sum,
            sh->proc_rows);
  } else {
    fprintf(out, ", %zu rows per rank (%zu per loader batch)", lo->batch_size,
            sh->proc_rows);
  }
  fprintf(out,
          ", %" PRIu64 " batches per epoch, %" PRIu64
          " steps%s, model %zu parameters\n",
          sh->epoch_batches, sh->total_steps, sh->resume ? " (resumed)" : "",
          sh->param_count);
  for (size_t i = 0; i < lo->source_count; i++) {
    fprintf(out, "wds-train: source %zu: ", i);
    describe_source(out, &lo->sources[i]);
    fputc('\n', out);
  }
  if (sh->resume && sh->elastic_live)
    fprintf(out,
            "resumed on %d rank%s from a checkpoint made on %u (%s): %" PRIu64
            " samples of epoch %" PRIu64 " remain; step %" PRIu64 " of %" PRIu64
            " (the checkpoint's %" PRIu64 " of %" PRIu64 ")\n",
            sh->world, sh->world == 1 ? "" : "s", sh->resume->world,
            o->resume_path, sh->elastic_left, sh->resume->loader_epoch,
            sh->start_step, sh->total_steps, sh->resume->step,
            sh->resume->total_steps);
  else if (sh->resume)
    fprintf(out,
            "resumed from %s at step %" PRIu64 " (epoch %" PRIu64
            ", batch %" PRIu64 ")\n",
            o->resume_path, sh->resume->step, sh->resume->loader_epoch,
            sh->resume->loader_batches);
  fflush(out); /* checked by summarize */
}

/* The job's process group (under MPI: its collectives span the processes),
 * then the backend builds its group on it; from tr_pg_start on, under MPI,
 * a watchdog ends the job when a collective hangs. */
static int start_group(shared *sh, wds__err *e) {
  const tr_options *o = sh->o;
  tr_pg_config pc = {.local_ranks = o->ranks,
                     .procs = o->procs,
                     .proc_rank = o->proc_rank,
                     .host_collectives = o->backend->host_collectives,
                     .collective_timeout_ms = o->collective_timeout_ms,
                     .mpi = o->mpi};
  int rc = tr_pg_create(&pc, &sh->pg, e);
  if (rc != WDS_OK)
    return rc;
  tr_group_config gc = {.local_ranks = o->ranks,
                        .world = sh->world,
                        .first_rank = sh->first_rank,
                        .first_device = o->first_device,
                        .param_count = sh->param_count,
                        .procs = o->procs,
                        .proc_rank = o->proc_rank,
                        .init_timeout_ms = o->init_timeout_ms,
                        .collective_timeout_ms = o->collective_timeout_ms,
                        .precision = o->precision,
                        .pg = sh->pg};
  if ((rc = o->backend->group_create(&gc, &sh->group, e)) != WDS_OK)
    return rc;
  return tr_pg_start(sh->pg, e);
}

/* One thread per local rank (rank_main), joined; *seconds: how long they
 * ran. A rank's failure is in sh (failed, err), not in the status: this
 * fails only when the threads could not be started at all. */
static int run_ranks(shared *sh, double *seconds, wds__err *e) {
  int ranks = sh->o->ranks, started = 0, rc = WDS_OK;
  sh->checksums = calloc((size_t)sh->world, sizeof *sh->checksums);
  pthread_t *threads = calloc((size_t)ranks, sizeof *threads);
  rank_arg *args = calloc((size_t)ranks, sizeof *args);
  if (!sh->checksums || !threads || !args) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  double t0 = now_s();
  for (; started < ranks; started++) {
    args[started].sh = sh;
    args[started].rank = started;
    if (pthread_create(&threads[started], NULL, rank_main, &args[started]) !=
        0) {
      fail(sh, WDS_ERR_NOMEM, "cannot start rank thread %d", started);
      break;
    }
  }
  for (int i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  *seconds = now_s() - t0;
  if (sh->next) /* fetched ahead of a stop (or a failure) */
    wds_loader_release(sh->train, sh->next);
  sh->next = NULL;
done:
  free(threads);
  free(args);
  return rc;
}

/* The ranks' outcome: WDS_OK when they finished (or stopped as asked);
 * WDS_ERR_CANCELLED when interrupted, saying how far the run got and where
 * its last checkpoint is; or the first failure's status and message. */
static int ranks_outcome(const shared *sh, wds__err *e) {
  const tr_options *o = sh->o;
  if (!sh->failed)
    return WDS_OK;
  if (sh->interrupted) {
    if (sh->saved)
      wds__fail(e, WDS_ERR_CANCELLED,
                "%" PRIu64 " of %" PRIu64 " steps done; checkpoint %s is at "
                "step %" PRIu64 " (--resume it to continue)",
                sh->step, sh->total_steps, o->checkpoint_path, sh->saved_step);
    else
      wds__fail(e, WDS_ERR_CANCELLED,
                "%" PRIu64 " of %" PRIu64 " steps done; no checkpoint written "
                "in this run%s",
                sh->step, sh->total_steps,
                o->checkpoint_path ? "" : " (--checkpoint PATH keeps one)");
    return WDS_ERR_CANCELLED;
  }
  /* WDS_ERR_CANCELLED is the interrupt's alone: a rank that left because
   * another process failed reports an I/O error of the job. */
  int rc = sh->err_code == WDS_ERR_CANCELLED ? WDS_ERR_IO : sh->err_code;
  return wds__fail(e, rc, "%s", sh->err.msg);
}

/* The run's figures for the summary. */
typedef struct run_totals {
  double seconds, wait_pct, h2d_gb_per_s; /* h2d: 0 when not measured */
  int stopped;                            /* before its last step */
} run_totals;

/* The summary line on o->out ("done after N steps ...") and where the
 * checkpoint is. */
static void print_summary(const shared *sh, const run_totals *t) {
  FILE *out = sh->o->out;
  fprintf(out, "%s after %" PRIu64 " steps in %.2f s",
          t->stopped ? "stopped" : "done", sh->step, t->seconds);
  if (sh->have_eval && sh->eval_count == 0)
    fputs(", eval: no samples", out);
  else if (sh->have_eval)
    fprintf(out, ", eval loss %.4f accuracy %.4f", sh->eval_loss, sh->eval_acc);
  fprintf(out, ", data-wait %.1f%%", t->wait_pct);
  if (t->h2d_gb_per_s > 0)
    fprintf(out, ", h2d %.1f GB/s", t->h2d_gb_per_s);
  fputs(", weights checksum", out);
  for (int i = 0; i < sh->world; i++)
    fprintf(out, " %016" PRIx64, sh->checksums[i]);
  fputc('\n', out);
  if (sh->o->checkpoint_path)
    fprintf(out, "checkpoint %s\n", sh->o->checkpoint_path);
}

/* The summary as the last JSON line of --json: every number through
 * base/json (a value that is not finite is null), every string escaped. */
static void json_summary(const shared *sh, const run_totals *t) {
  const wds_loader_config *lo = &sh->o->loader;
  FILE *j = sh->json;
  fprintf(j, "{\"summary\": {\"steps\": %" PRIu64 ", \"stopped\": %s", sh->step,
          t->stopped ? "true" : "false");
  if (lo->rank_batch_size_count) {
    fputs(", \"rank_batch_sizes\": [", j);
    for (size_t i = 0; i < lo->rank_batch_size_count; i++)
      fprintf(j, i ? ", %zu" : "%zu", lo->rank_batch_sizes[i]);
    fputc(']', j);
  }
  if (lo->source_count) {
    fputs(", \"sources\": [", j);
    for (size_t i = 0; i < lo->source_count; i++) {
      const wds_source_config *sc = &lo->sources[i];
      fputs(i ? ", {\"spec\": " : "{\"spec\": ", j);
      /* without its secrets, in full */
      char red[WDS__URL_REDACT_MAX], *full = wds__url_redacted(sc->spec);
      const char *shown =
          full ? full : wds__url_redact(sc->spec, red, sizeof red);
      wds__json_write_string(j, shown, strlen(shown));
      free(full);
      if (sc->weight > 0) {
        fputs(", \"weight\": ", j);
        wds__json_write_double(j, "%.17g", sc->weight);
      }
      if (sc->proportion > 0) {
        fputs(", \"proportion\": ", j);
        wds__json_write_double(j, "%.17g", sc->proportion);
      }
      if (sc->repeat > 0) {
        fputs(", \"repeat\": ", j);
        wds__json_write_double(j, "%.17g", sc->repeat);
      }
      if (sc->index_path) {
        fputs(", \"index\": ", j);
        wds__json_write_string(j, sc->index_path, strlen(sc->index_path));
      }
      fputc('}', j);
    }
    fputc(']', j);
  }
  /* null without an evaluation, or one of no samples ("eval_samples"
   * tells them apart: absent, or 0). */
  int measured = sh->have_eval && sh->eval_count > 0;
  fputs(", \"eval_loss\": ", j);
  wds__json_write_double(j, "%.6f", measured ? sh->eval_loss : NAN);
  fputs(", \"eval_accuracy\": ", j);
  wds__json_write_double(j, "%.6f", measured ? sh->eval_acc : NAN);
  if (sh->have_eval)
    fprintf(j, ", \"eval_samples\": %" PRIu64, sh->eval_count);
  fputs(", \"seconds\": ", j);
  wds__json_write_double(j, "%.3f", t->seconds);
  fputs(", \"data_wait_pct\": ", j);
  wds__json_write_double(j, "%.2f", t->wait_pct);
  if (t->h2d_gb_per_s > 0) {
    fputs(", \"h2d_gb_per_s\": ", j);
    wds__json_write_double(j, "%.3f", t->h2d_gb_per_s);
  }
  fputs(", \"weights_checksum\": [", j);
  print_checksums(sh, j, ", ");
  fputs("]}}\n", j);
}

/* The end of a run that did not fail: the summary line, and the JSON
 * summary. A log that could not be written fails the run (exit 1), after
 * the JSON summary: the errno of the failed flush, or none if an earlier
 * line's write failed and this one's did not. */
static int summarize(const shared *sh, double seconds, wds__err *e) {
  FILE *out = sh->o->out;
  run_totals t = {
      .seconds = seconds,
      .wait_pct = seconds > 0 ? 100.0 * sh->total_wait_s / seconds : 0.0,
      .h2d_gb_per_s = sh->total_h2d_s > 0
                          ? sh->total_h2d_bytes / sh->total_h2d_s / 1e9
                          : 0.0,
      .stopped = sh->step < sh->total_steps};
  print_summary(sh, &t);
  errno = 0;
  int out_failed = fflush(out) != 0 || ferror(out);
  int out_errno = !out_failed ? 0 : sh->out_errno ? sh->out_errno : errno;
  if (sh->json)
    json_summary(sh, &t);
  if (out_failed)
    return wds__fail(e, WDS_ERR_IO, "cannot write the output%s%s",
                     out_errno ? ": " : "",
                     out_errno ? strerror(out_errno) : "");
  return WDS_OK;
}

/* What a run holds, released (the loaders last: the ranks' views and the
 * group are gone by then). */
static void release(shared *sh) {
  const tr_options *o = sh->o;
  free(sh->checksums);
  free(sh->rows);
  free(sh->row0);
  free(sh->proc_sizes);
  if (sh->group)
    o->backend->group_destroy(sh->group);
  tr_pg_destroy(sh->pg);
  if (o->watch_loader) {
    o->watch_loader(0, NULL);
    o->watch_loader(1, NULL);
  }
  wds_loader_close(sh->eval);
  wds_loader_close(sh->train);
  tr_checkpoint_free(&sh->ck);
  pthread_mutex_destroy(&sh->err_mu);
}

int tr_run(const tr_options *o, wds__err *e) {
  shared sh;
  memset(&sh, 0, sizeof sh);
  sh.o = o;
  sh.be = o->backend;
  pthread_mutex_init(&sh.err_mu, NULL);
  double seconds = 0;
  int rc = plan_rows(&sh, e);
  if (rc == WDS_OK) {
    plan_model(&sh);
    if (o->resume_path)
      rc = load_resume(&sh, e);
  }
  if (rc == WDS_OK)
    rc = open_loaders(&sh, e);
  if (rc == WDS_OK && o->json_path)
    rc = open_log("--json", o->json_path, &sh.json_file, &sh.json, e);
  if (rc == WDS_OK && o->rows_path)
    rc = open_log("--log-rows", o->rows_path, &sh.rows_file, &sh.rows_log, e);
  if (rc == WDS_OK && sh.rows_log) /* a step's rows in one write: log_rows */
    setvbuf(sh.rows_log, NULL, _IONBF, 0);
  if (rc == WDS_OK) {
    print_banner(&sh);
    rc = start_group(&sh, e);
  }
  if (rc == WDS_OK)
    rc = run_ranks(&sh, &seconds, e);
  if (rc == WDS_OK)
    rc = ranks_outcome(&sh, e);
  if (rc == WDS_OK) {
    sh.summarized = 1;
    rc = summarize(&sh, seconds, e);
  }
  if (rc != WDS_OK && !sh.summarized) {
    /* The output failed too (summarize reports it when it runs)? */
    errno = 0;
    int out_failed = fflush(o->out) != 0 || ferror(o->out);
    int en = sh.out_errno ? sh.out_errno : errno;
    if (out_failed) {
      char what[300];
      snprintf(what, sizeof what, "cannot write the output%s%s", en ? ": " : "",
               en ? strerror(en) : "");
      rc = also_failed(e, rc, what);
    }
  }
  rc = close_log("--json", o->json_path, sh.json_file, sh.json, sh.json_errno,
                 rc, e);
  rc = close_log("--log-rows", o->rows_path, sh.rows_file, sh.rows_log,
                 sh.rows_errno, rc, e);
  release(&sh);
  return rc;
}
