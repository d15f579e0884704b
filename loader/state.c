/* state.c — the saved position (wds_loader_state) and its check at open
 * (wds_loader_config.resume_state).
 *
 * A position (epoch, batches delivered in it) means something only under
 * the configuration that made it: the same count of batches is another set
 * of samples on another world, with other batch sizes, other workers or
 * another shuffle buffer. So the saved state carries, beside the position,
 * everything that fixes which samples those batches held, and a loader
 * opened with it compares each of them with its own and refuses one that
 * differs, naming both values: a position is never continued silently
 * under a configuration that would repeat or miss samples.
 *
 * The text, version 1 (one "key=value" a line, in this order; every key
 * required, none other allowed):
 *
 *   wds-loader-state 1
 *   epoch=E  batches=B  rank=R (the saver's: not compared, any rank's state
 *   opens on any rank)  mode=exact  seed=S  world_size=W  workers=K
 *   batch_size=N (0 with per-rank sizes)  rank_batch_sizes=24,8 (empty
 *   without)  last_batch=keep  drop_last=0  shard_shuffle=1
 *   shuffle_buffer=..  shuffle_initial=..  shuffle_buffer_bytes=..
 *   samples_per_epoch=..  data=HEX (FNV-1a 64 of the shard list, the
 *   sources' shares and, in exact mode, the per-shard counts)
 *   max_sample_bytes=.. (what the elastic replay's byte bound needs)
 *   from=HEX (empty, or inside an elastic resume's remainder the state it
 *   resumed from, hex-encoded: the remainder's positions are its)
 *   check=HEX (FNV-1a 64 of every byte before the line)
 *
 * A text that does not start with the first line is foreign; another
 * version number, or a check that does not match (a corrupted or edited
 * state), is an error saying so. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "loader/handle.h"
#include "loader/internal.h"
#include "loader/plan.h"
#include "loader/shuffle.h"

#define STATE_MAGIC "wds-loader-state "
#define STATE_VERSION 1

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
#define FNV_INIT 0xcbf29ce484222325ULL

/* What the epoch's samples are: the shards, the sources' shares, the
 * counts (exact mode). */
static uint64_t data_fingerprint(const wds_loader *l) {
  uint64_t h = FNV_INIT;
  const wds__sources *s = &l->sources;
  for (size_t i = 0; i < s->urls.count; i++)
    h = fnv(h, s->urls.urls[i], strlen(s->urls.urls[i]) + 1);
  for (size_t i = 0; i < s->nsrc; i++) {
    const wds__source *src = &s->src[i];
    uint64_t v[2] = {src->first, src->count};
    double d[3] = {src->weight, src->proportion, src->repeat};
    h = fnv(h, v, sizeof v);
    h = fnv(h, d, sizeof d);
  }
  if (l->counts)
    h = fnv(h, l->counts, s->urls.count * sizeof *l->counts);
  return h;
}

static const char *const mode_names[] = {"plain", "exact", "resampled"};
static const char *const last_names[] = {"keep", "drop", "pad"};

/* Appends printf's output to b (a line of the state: short). */
static void sb_printf(wds__sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(wds__sbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0)
    wds__sb_putn(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

int wds__state_format(const wds_loader *l, uint64_t epoch, uint64_t batches,
                      char **out) {
  const wds_loader_config *c = &l->cfg;
  int shuf = c->shuffle_buffer > 1;
  wds__sbuf b = {0};
  sb_printf(&b,
            STATE_MAGIC "%d\nepoch=%" PRIu64 "\nbatches=%" PRIu64
                        "\nrank=%d\nmode=%s\nseed=%" PRIu64
                        "\nworld_size=%d\nworkers=%d\nbatch_size=%zu\n"
                        "rank_batch_sizes=",
            STATE_VERSION, epoch, batches, c->rank, mode_names[c->mode],
            c->seed, c->world_size, c->workers,
            l->rank_bs ? (size_t)0 : c->batch_size);
  for (int r = 0; l->rank_bs && r < c->world_size; r++)
    sb_printf(&b, r ? ",%zu" : "%zu", l->rank_bs[r]);
  sb_printf(&b, "\nlast_batch=%s\ndrop_last=%d\nshard_shuffle=%d\n",
            last_names[c->last_batch], c->drop_last != 0,
            c->shard_shuffle != 0);
  sb_printf(&b,
            "shuffle_buffer=%zu\nshuffle_initial=%zu\n"
            "shuffle_buffer_bytes=%zu\nsamples_per_epoch=%" PRIu64
            "\ndata=%016" PRIx64 "\nmax_sample_bytes=%zu\nfrom=",
            shuf ? c->shuffle_buffer : (size_t)0,
            shuf ? c->shuffle_initial : (size_t)0,
            shuf ? c->shuffle_buffer_bytes : (size_t)0,
            c->mode == WDS_MODE_EXACT ? 0 : c->samples_per_epoch,
            data_fingerprint(l),
            c->max_sample_bytes ? c->max_sample_bytes : (size_t)1 << 30);
  /* In an elastic resume's remainder: the state it resumed from, as hex
   * (its position is the remainder's, which that state defines). */
  if (l->elastic_from && l->elastic_live && epoch == l->elastic_epoch) {
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *q = (const unsigned char *)l->elastic_from; *q;
         q++) {
      char h[2] = {hex[*q >> 4], hex[*q & 15]};
      wds__sb_putn(&b, h, 2);
    }
  }
  wds__sb_putc(&b, '\n');
  uint64_t sum = b.oom || !b.p ? 0 : fnv(FNV_INIT, b.p, b.n);
  sb_printf(&b, "check=%016" PRIx64 "\n", sum);
  *out = wds__sb_take(&b);
  return *out ? WDS_OK : WDS_ERR_NOMEM;
}

int wds_loader_state_at(const wds_loader *l, uint64_t epoch, uint64_t batches,
                        char **text) {
  if (!text)
    return wds__last_fail(WDS_ERR_INVALID, "wds_loader_state_at: text is NULL");
  *text = NULL;
  if (!l)
    return wds__last_fail(WDS_ERR_INVALID, "wds_loader_state_at: no loader");
  if (wds__state_format(l, epoch, batches, text) != WDS_OK)
    return wds__last_fail(WDS_ERR_NOMEM, "wds_loader_state_at: out of memory");
  return WDS_OK;
}

int wds_loader_state(const wds_loader *l, char **text) {
  if (!text)
    return wds__last_fail(WDS_ERR_INVALID, "wds_loader_state: text is NULL");
  *text = NULL;
  if (!l)
    return wds__last_fail(WDS_ERR_INVALID, "wds_loader_state: no loader");
  if (wds__state_format(l, l->epoch, l->delivered, text) != WDS_OK)
    return wds__last_fail(WDS_ERR_NOMEM, "wds_loader_state: out of memory");
  return WDS_OK;
}

/* ---- parsing ---- */

/* The keys, in order (the check line after them). */
static const char *const keys[] = {"epoch",
                                   "batches",
                                   "rank",
                                   "mode",
                                   "seed",
                                   "world_size",
                                   "workers",
                                   "batch_size",
                                   "rank_batch_sizes",
                                   "last_batch",
                                   "drop_last",
                                   "shard_shuffle",
                                   "shuffle_buffer",
                                   "shuffle_initial",
                                   "shuffle_buffer_bytes",
                                   "samples_per_epoch",
                                   "data",
                                   "max_sample_bytes",
                                   "from"};
#define NKEYS (sizeof keys / sizeof *keys)

enum {
  K_EPOCH,
  K_BATCHES,
  K_RANK,
  K_MODE,
  K_SEED,
  K_WORLD,
  K_WORKERS,
  K_BATCH,
  K_RBS,
  K_LAST,
  K_DROP,
  K_SSHUF,
  K_SBUF,
  K_SINIT,
  K_SBYTES,
  K_SPE,
  K_DATA,
  K_MAXS,
  K_FROM
};

typedef struct parsed {
  char *copy;             /* owned: the values point into it */
  const char *val[NKEYS]; /* each key's value */
} parsed;

/* Splits text into *p; WDS_OK or an error in e naming what is wrong. */
static int parse(const char *text, parsed *p, wds__err *e) {
  memset(p, 0, sizeof *p);
  size_t mlen = strlen(STATE_MAGIC);
  if (strncmp(text, STATE_MAGIC, mlen) != 0)
    return wds__fail(e, WDS_ERR_FORMAT,
                     "resume state: not a wds loader state (it does not "
                     "begin with \"%s%d\")",
                     STATE_MAGIC, STATE_VERSION);
  char *end;
  long v = strtol(text + mlen, &end, 10);
  if (end == text + mlen || *end != '\n')
    return wds__fail(e, WDS_ERR_FORMAT,
                     "resume state: its first line is not \"%s<version>\"",
                     STATE_MAGIC);
  if (v != STATE_VERSION)
    return wds__fail(e, WDS_ERR_FORMAT,
                     "resume state: version %ld; this build reads version %d",
                     v, STATE_VERSION);
  const char *chk = strstr(text, "\ncheck=");
  if (!chk)
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "resume state: no check line (cut short?)");
  chk++;
  char *cend;
  uint64_t want = strtoull(chk + 6, &cend, 16);
  if (cend != chk + 6 + 16 || (*cend != '\n' && *cend) ||
      (*cend == '\n' && cend[1]))
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "resume state: a malformed check line (or text after "
                     "it)");
  if (want != fnv(FNV_INIT, text, (size_t)(chk - text)))
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "resume state: checksum mismatch (the state is corrupt "
                     "or was edited)");
  p->copy = strndup(text, (size_t)(chk - text));
  if (!p->copy)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  char *line = strchr(p->copy, '\n') + 1;
  for (size_t k = 0; k < NKEYS; k++) {
    char *nl = strchr(line, '\n');
    size_t klen = strlen(keys[k]);
    if (!nl || strncmp(line, keys[k], klen) != 0 || line[klen] != '=') {
      free(p->copy);
      p->copy = NULL;
      return wds__fail(e, WDS_ERR_CORRUPT,
                       "resume state: expected the line \"%s=...\" (line %zu)",
                       keys[k], k + 2);
    }
    *nl = 0;
    p->val[k] = line + klen + 1;
    line = nl + 1;
  }
  if (*line) {
    free(p->copy);
    p->copy = NULL;
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "resume state: unexpected lines before its check");
  }
  return WDS_OK;
}

static int parse_u64(const char *s, uint64_t *out) {
  char *end;
  if (!*s || *s == '-' || *s == '+')
    return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end)
    return -1;
  *out = v;
  return 0;
}

/* What a value is called in a message. */
static const char *what(size_t k) {
  switch (k) {
  case K_RBS:
    return "per-rank batch sizes";
  case K_DATA:
    return "data (shards, sources or their sample counts; fingerprint)";
  default:
    return keys[k];
  }
}

/* ---- elastic resume (exact mode) ----
 *
 * A state saved under another world, other batch or per-rank sizes, other
 * workers or another shuffle buffer, in exact mode over one source: what
 * the saving job's ranks delivered is a function of its configuration, so
 * it is computed, not guessed. Each old rank's plan is made again
 * (wds__plan_epoch), its workers' shuffle buffers run over sample numbers
 * (the real wds__shuffle_next, with stand-in samples: nothing is read or
 * decoded) and its collator's rotation taken for the rows of its first B
 * batches; the samples those rows held are marked. The samples left, in
 * the epoch's shard order and archive order, are cut among the new ranks
 * as exact mode cuts an epoch (wds__plan_rank_split with the new sizes:
 * every new rank the same steps, the padding repeating the first samples
 * of the remainder), and this rank's range becomes its plan for the rest
 * of the epoch. Later epochs are a fresh run's. A state saved inside such
 * a remainder carries the state it came from ("from"), so the marks are
 * made level by level.
 *
 * The stand-ins hold no data, so a shuffle buffer's byte bound never binds
 * in the replay: the old run's order is replayed exactly only when it
 * cannot have bound there either, which shuffle_buffer * max_sample_bytes
 * < shuffle_buffer_bytes guarantees (a sample's data is at most
 * max_sample_bytes). Otherwise the resume is refused, naming the values.
 * Cost: one pass over the samples the old ranks delivered (RNG draws, no
 * I/O) and a bit per sample of the epoch. */

typedef struct level {
  uint64_t epoch, batches;
  int world, workers;
  size_t batch_size; /* 0 with rbs */
  size_t *rbs;       /* [world], or NULL */
  size_t sbuf, sinit, sbytes, maxs;
  uint64_t spe; /* resampled: samples_per_epoch */
  int drop_last;
  struct level *from; /* the state this one resumed from, or NULL */
} level;

static void level_free(level *v) {
  while (v) {
    level *f = v->from;
    free(v->rbs);
    free(v);
    v = f;
  }
}

static int parse_size(const char *s, size_t *out) {
  uint64_t v;
  if (parse_u64(s, &v) || v > SIZE_MAX)
    return -1;
  *out = (size_t)v;
  return 0;
}

/* The numbers of a parsed state, and the states before it (hex in from). */
static int level_of(const parsed *p, level **out, int depth, wds__err *e) {
  *out = NULL;
  level *v = calloc(1, sizeof *v);
  uint64_t world, workers, drop;
  if (!v)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  if (parse_u64(p->val[K_EPOCH], &v->epoch) ||
      parse_u64(p->val[K_BATCHES], &v->batches) ||
      parse_u64(p->val[K_WORLD], &world) ||
      parse_u64(p->val[K_WORKERS], &workers) ||
      parse_size(p->val[K_BATCH], &v->batch_size) ||
      parse_size(p->val[K_SBUF], &v->sbuf) ||
      parse_size(p->val[K_SINIT], &v->sinit) ||
      parse_size(p->val[K_SBYTES], &v->sbytes) ||
      parse_size(p->val[K_MAXS], &v->maxs) ||
      parse_u64(p->val[K_DROP], &drop) || parse_u64(p->val[K_SPE], &v->spe) ||
      world < 1 || world > 1 << 24 || workers < 1 ||
      workers > WDS_LOADER_MAX_WORKERS || drop > 1) {
    level_free(v);
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "resume state: a value out of range (epoch, batches, "
                     "world_size, workers, sizes)");
  }
  v->world = (int)world;
  v->workers = (int)workers;
  v->drop_last = (int)drop;
  if (p->val[K_RBS][0]) {
    v->rbs = calloc((size_t)world, sizeof *v->rbs);
    const char *q = p->val[K_RBS];
    for (int r = 0; v->rbs && r < v->world; r++) {
      char *end;
      unsigned long long b = strtoull(q, &end, 10);
      if (end == q || b < 1 || b > (1 << 24) ||
          *end != (r + 1 < v->world ? ',' : '\0')) {
        level_free(v);
        return wds__fail(e, WDS_ERR_CORRUPT,
                         "resume state: bad per-rank batch sizes");
      }
      v->rbs[r] = (size_t)b;
      q = end + 1;
    }
    if (!v->rbs) {
      level_free(v);
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    }
  } else if (v->batch_size < 1) {
    level_free(v);
    return wds__fail(e, WDS_ERR_CORRUPT, "resume state: batch_size 0");
  }
  const char *h = p->val[K_FROM];
  size_t hn = strlen(h);
  if (hn) {
    char *text = NULL;
    parsed fp;
    int rc = WDS_OK;
    if (depth > 64 || hn % 2)
      rc = wds__fail(e, WDS_ERR_CORRUPT, "resume state: a bad from= line");
    else if (!(text = malloc(hn / 2 + 1)))
      rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == WDS_OK && i < hn / 2; i++) {
      unsigned x;
      if (sscanf(h + 2 * i, "%2x", &x) != 1 || x == 0)
        rc = wds__fail(e, WDS_ERR_CORRUPT, "resume state: a bad from= line");
      text[i] = (char)x;
    }
    if (rc == WDS_OK) {
      text[hn / 2] = 0;
      if ((rc = parse(text, &fp, e)) == WDS_OK) {
        rc = level_of(&fp, &v->from, depth + 1, e);
        free(fp.copy);
      }
    }
    free(text);
    if (rc == WDS_OK && v->from->epoch != v->epoch)
      rc = wds__fail(e, WDS_ERR_CORRUPT,
                     "resume state: resumed from a state of another epoch");
    if (rc != WDS_OK) {
      level_free(v);
      return rc;
    }
  }
  *out = v;
  return WDS_OK;
}

/* A stand-in sample: its number in the epoch (the shards' natural order). */
typedef struct stand_in {
  wds__raw_sample r; /* first: the shuffle buffer holds &r */
  uint64_t id;
} stand_in;

/* One old worker replayed: its pieces through its shuffle buffer. */
typedef struct replay {
  const wds__worker_plan *wp;
  const uint64_t *first_id;
  size_t piece;
  uint64_t next; /* the next sample of pieces[piece] */
  uint64_t out;  /* samples it gave */
  wds__shuffle sh;
  int failed;
} replay;

static int replay_pull(void *ctx, wds__raw_sample **out) {
  replay *rp = ctx;
  *out = NULL;
  while (rp->piece < rp->wp->count &&
         rp->next >= rp->wp->pieces[rp->piece].end) {
    rp->piece++;
    if (rp->piece < rp->wp->count)
      rp->next = rp->wp->pieces[rp->piece].begin;
  }
  if (rp->piece >= rp->wp->count)
    return 0;
  stand_in *si = calloc(1, sizeof *si);
  if (!si) {
    rp->failed = 1;
    return -1;
  }
  const wds__piece *pc = &rp->wp->pieces[rp->piece];
  si->id = rp->first_id[pc->shard] + rp->next++;
  *out = &si->r;
  return 0;
}

/* Marks in bits the samples of the first n rows of plan p (rank `rank`
 * of v: its workers' shuffle keys) as its collator takes them. */
static int replay_rank(const wds_loader *l, const level *v, int rank,
                       const wds__epoch_plan *p, uint64_t n,
                       const uint64_t *first_id, uint8_t *bits, wds__err *e) {
  int K = v->workers, rc = WDS_OK;
  replay *rp = calloc((size_t)K, sizeof *rp);
  int *active = malloc((size_t)K * sizeof *active);
  if (!rp || !active) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (int w = 0; w < K; w++) {
    rp[w].wp = &p->w[w];
    rp[w].first_id = first_id;
    rp[w].next = p->w[w].count ? p->w[w].pieces[0].begin : 0;
    if (wds__shuffle_init(&rp[w].sh, v->sbuf, v->sinit, v->sbytes,
                          wds__rng_key(l->cfg.seed, WDS__STREAM_SHUFFLE,
                                       v->epoch, (uint64_t)rank,
                                       (uint64_t)w)) != WDS_OK) {
      rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
    active[w] = w;
  }
  /* The collator's rotation (run.c): worker after worker, one row each; a
   * worker that gave its quota leaves it. */
  int n_active = K, cur = 0;
  for (uint64_t pos = 0; pos < n && n_active > 0;) {
    replay *r = &rp[active[cur]];
    if (r->out == r->wp->quota) {
      memmove(active + cur, active + cur + 1,
              (size_t)(n_active - cur - 1) * sizeof *active);
      if (--n_active > 0)
        cur %= n_active;
      continue;
    }
    wds__raw_sample *s;
    if (wds__shuffle_next(&r->sh, replay_pull, r, &s) != 0 || !s) {
      rc = r->failed ? wds__fail(e, WDS_ERR_NOMEM, "out of memory")
                     : wds__fail(e, WDS_ERR_CORRUPT,
                                 "resume state: a worker's plan is shorter "
                                 "than its quota (bug)");
      goto done;
    }
    stand_in *si = (stand_in *)s;
    bits[si->id / 8] |= (uint8_t)(1u << (si->id % 8));
    free(si);
    r->out++;
    pos++;
    cur = (cur + 1) % n_active;
  }
done:
  for (int w = 0; rp && w < K; w++) {
    for (size_t i = 0; i < rp[w].sh.len; i++)
      free(rp[w].sh.buf[i]);
    free(rp[w].sh.buf);
  }
  free(rp);
  free(active);
  return rc;
}

static int bit(const uint8_t *bits, uint64_t id) {
  return (bits[id / 8] >> (id % 8)) & 1;
}

/* The remainder's plan for rank `rank` of in (its world, workers, weights,
 * drop_last): the samples not marked in bits, in the epoch's shard order,
 * cut among in's ranks. *left: the samples not marked. */
static int remainder_plan(const wds_loader *l, const wds__plan_input *in,
                          uint64_t epoch, const uint8_t *bits,
                          const uint64_t *first_id, wds__epoch_plan *out,
                          uint64_t *left, wds__err *e) {
  size_t n = in->shards, np = 0, cap = 0;
  size_t *order = malloc((n ? n : 1) * sizeof *order);
  uint64_t *cut = malloc(((size_t)in->world + 1) * sizeof *cut);
  wds__piece *pcs = NULL;
  int rc = WDS_OK;
  if (!order || !cut) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
    goto done;
  }
  wds__plan_shard_order(in, epoch, order);
  uint64_t m = 0;
  for (size_t i = 0; i < n; i++)
    for (uint64_t j = 0; j < l->counts[i]; j++)
      m += !bit(bits, first_id[i] + j);
  *left = m;
  uint64_t steps = m ? wds__plan_rank_split(m, in->rank_weights, in->world,
                                            in->drop_last, cut)
                     : 0;
  uint64_t start = m ? cut[in->rank] : 0, end = m ? cut[in->rank + 1] : 0;
  if (!steps)
    start = end = 0;
  /* Positions [start, end) of the remainder (wrapping past m: padding),
   * as runs of unmarked samples within a shard. */
  for (uint64_t from = start; from < end;) {
    uint64_t lo = from % m, hi = lo + (end - from);
    if (hi > m)
      hi = m;
    uint64_t pos = 0;
    for (size_t k = 0; k < n && pos < hi; k++) {
      size_t sh = order[k];
      for (uint64_t j = 0; j < l->counts[sh] && pos < hi;) {
        if (bit(bits, first_id[sh] + j)) {
          j++;
          continue;
        }
        uint64_t j0 = j;
        while (j < l->counts[sh] && !bit(bits, first_id[sh] + j) &&
               pos + (j - j0) < hi)
          j++;
        uint64_t a = pos, b = pos + (j - j0);
        pos = b;
        if (b <= lo)
          continue;
        uint64_t skip = a < lo ? lo - a : 0;
        if (np == cap) {
          size_t c2 = cap ? 2 * cap : 16;
          wds__piece *nv = realloc(pcs, c2 * sizeof *nv);
          if (!nv) {
            rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
            goto done;
          }
          pcs = nv;
          cap = c2;
        }
        pcs[np++] = (wds__piece){sh, j0 + skip, j};
      }
    }
    from += hi - lo;
  }
  rc = wds__plan_from_pieces(in, epoch, pcs, np, out, e);
  pcs = NULL;
  if (rc == WDS_OK) {
    out->rank_samples = end - start;
    out->steps = in->rank_weights ? steps : 0;
    out->total_samples = m;
    out->padded = m && end > m ? end - (start > m ? start : m) : 0;
  }
done:
  free(pcs);
  free(order);
  free(cut);
  return rc;
}

/* The plan input of rank `rank` under level v. */
static wds__plan_input level_pin(const wds_loader *l, const level *v,
                                 int rank) {
  wds__plan_input in = l->pin;
  in.rank = rank;
  in.world = v->world;
  in.workers = v->workers;
  in.drop_last = v->drop_last;
  in.rank_weights = v->rbs;
  return in;
}

/* Resampled mode: a rank's plan for `left` samples of the epoch dealt to
 * in's ranks in equal steps (in proportion to their weights): quotas. */
static int resampled_rest(const wds__plan_input *in, uint64_t epoch,
                          uint64_t left, wds__epoch_plan *out, wds__err *e) {
  memset(out, 0, sizeof *out);
  out->epoch = epoch;
  out->workers = in->workers;
  if (!(out->w = calloc((size_t)in->workers, sizeof *out->w)))
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory planning an epoch");
  uint64_t steps =
      left ? wds__plan_rank_split(left, in->rank_weights, in->world, 0, NULL)
           : 0;
  uint64_t n =
      steps * (in->rank_weights ? (uint64_t)in->rank_weights[in->rank] : 1);
  out->rank_samples = n;
  out->steps = in->rank_weights ? steps : 0;
  for (int w = 0; w < in->workers; w++)
    out->w[w].quota =
        n / (uint64_t)in->workers + ((uint64_t)w < n % (uint64_t)in->workers);
  return WDS_OK;
}

/* Resampled mode: the epoch's samples (*total: over the first job's
 * ranks) and those the ranks of v and the states before it drew
 * (*done). Draws are with replacement: what is owed is a count. */
static int drawn(const wds_loader *l, const level *v, uint64_t *total,
                 uint64_t *done, wds__err *e) {
  uint64_t t = 0, d = 0;
  int rc = WDS_OK;
  if (v->from && (rc = drawn(l, v->from, &t, &d, e)) != WDS_OK)
    return rc;
  uint64_t before = d;
  for (int r = 0; r < v->world && rc == WDS_OK; r++) {
    wds__plan_input in = level_pin(l, v, r);
    in.samples_per_epoch = v->spe;
    wds__epoch_plan p;
    rc = v->from ? resampled_rest(&in, v->epoch, t - before, &p, e)
                 : wds__plan_epoch(&in, v->epoch, &p, e);
    if (rc != WDS_OK)
      break;
    if (!v->from)
      t += p.rank_samples;
    uint64_t b = v->rbs ? v->rbs[r] : v->batch_size;
    d += v->batches > p.rank_samples / b ? p.rank_samples : v->batches * b;
    wds__plan_free(&p);
  }
  *total = t;
  *done = d;
  return rc;
}

/* Marks in bits every sample the ranks of v (and the states before it)
 * delivered in its epoch. */
static int mark_delivered(const wds_loader *l, const level *v,
                          const uint64_t *first_id, uint8_t *bits,
                          size_t nbytes, wds__err *e) {
  int rc = WDS_OK;
  uint8_t *base = NULL;
  if (v->sbuf > 1 && (v->maxs == 0 || v->sbytes / v->maxs <= v->sbuf))
    return wds__fail(
        e, WDS_ERR_INVALID,
        "resume state: saved with a shuffle buffer of %zu samples and "
        "shuffle_buffer_bytes %zu, max_sample_bytes %zu: its byte bound may "
        "have changed the saved run's order, which cannot be replayed without "
        "reading, so the state continues only under the configuration it was "
        "saved with (an elastic resume needs shuffle_buffer * "
        "max_sample_bytes < shuffle_buffer_bytes)",
        v->sbuf, v->sbytes, v->maxs);
  if (v->from) {
    if ((rc = mark_delivered(l, v->from, first_id, bits, nbytes, e)) != WDS_OK)
      return rc;
    if (!(base = malloc(nbytes ? nbytes : 1)))
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    memcpy(base, bits, nbytes);
  }
  for (int r = 0; r < v->world && rc == WDS_OK; r++) {
    wds__plan_input in = level_pin(l, v, r);
    wds__epoch_plan p;
    uint64_t left;
    rc = base ? remainder_plan(l, &in, v->epoch, base, first_id, &p, &left, e)
              : wds__plan_epoch(&in, v->epoch, &p, e);
    if (rc != WDS_OK)
      break;
    uint64_t b = v->rbs ? v->rbs[r] : v->batch_size;
    uint64_t rows =
        v->batches > p.rank_samples / b ? p.rank_samples : v->batches * b;
    rc = replay_rank(l, v, r, &p, rows, first_id, bits, e);
    wds__plan_free(&p);
  }
  free(base);
  return rc;
}

static int state_elastic(wds_loader *l, const level *v, const char *text,
                         int changed, wds__err *e) {
  /* The world it resumed from: a state of this very configuration (this
   * loader's own, reopened inside a remainder) reports its origin's. */
  int from_world = !changed && v->from ? v->from->world : v->world;
  if (l->cfg.mode == WDS_MODE_RESAMPLED) {
    uint64_t total, done;
    int rc = drawn(l, v, &total, &done, e);
    if (rc == WDS_OK)
      rc = resampled_rest(&l->pin, v->epoch, total - done, &l->elastic_plan, e);
    if (rc == WDS_OK && !(l->elastic_from = strdup(text))) {
      wds__plan_free(&l->elastic_plan);
      rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    }
    if (rc != WDS_OK)
      return rc;
    l->elastic_epoch = v->epoch;
    l->elastic_live = 1;
    l->elastic_left = total - done;
    l->elastic_world = from_world;
    l->cfg.epoch = v->epoch;
    l->cfg.resume_batches = 0;
    return WDS_OK;
  }
  size_t n = l->sources.urls.count;
  uint64_t total = 0;
  uint64_t *first_id = malloc((n ? n : 1) * sizeof *first_id);
  uint8_t *bits = NULL;
  int rc = WDS_OK;
  if (!first_id) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    first_id[i] = total;
    total += l->counts[i];
  }
  size_t nbytes = (size_t)(total / 8 + 1);
  if (!(bits = calloc(nbytes, 1))) {
    rc = wds__fail(e, WDS_ERR_NOMEM,
                   "out of memory (a bit per sample of the epoch: %zu bytes)",
                   nbytes);
    goto done;
  }
  if ((rc = mark_delivered(l, v, first_id, bits, nbytes, e)) != WDS_OK)
    goto done;
  uint64_t left;
  rc = remainder_plan(l, &l->pin, v->epoch, bits, first_id, &l->elastic_plan,
                      &left, e);
  if (rc != WDS_OK)
    goto done;
  if (!(l->elastic_from = strdup(text))) {
    wds__plan_free(&l->elastic_plan);
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  l->elastic_epoch = v->epoch;
  l->elastic_live = 1;
  l->elastic_left = left;
  l->elastic_world = from_world;
  l->cfg.epoch = v->epoch;
  l->cfg.resume_batches = 0;
done:
  free(first_id);
  free(bits);
  return rc;
}

/* The keys an elastic resume may change: where the samples go, not which
 * samples the epoch has. */
static int elastic_key(size_t k) {
  return k == K_WORLD || k == K_WORKERS || k == K_BATCH || k == K_RBS ||
         k == K_LAST || k == K_DROP || k == K_SBUF || k == K_SINIT ||
         k == K_SBYTES || k == K_MAXS;
}

int wds__state_check(wds_loader *l, const char *text, wds__err *e) {
  parsed saved, mine;
  char *own = NULL;
  level *v = NULL;
  int rc = parse(text, &saved, e);
  if (rc != WDS_OK)
    return rc;
  memset(&mine, 0, sizeof mine);
  if (wds__state_format(l, 0, 0, &own) != WDS_OK) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  if ((rc = parse(own, &mine, e)) != WDS_OK)
    goto done;
  uint64_t epoch, batches, rank;
  if (parse_u64(saved.val[K_EPOCH], &epoch) ||
      parse_u64(saved.val[K_BATCHES], &batches) ||
      parse_u64(saved.val[K_RANK], &rank)) {
    rc = wds__fail(e, WDS_ERR_CORRUPT,
                   "resume state: epoch, batches or rank is not a number");
    goto done;
  }
  /* Exact mode over one source: another world, other sizes, workers or
   * shuffle settings are an elastic resume; in other modes, with mixing or
   * another seed, mode or data, a difference is refused. */
  int can_elastic =
      (l->cfg.mode == WDS_MODE_EXACT && !l->sources.mixed && l->counts) ||
      l->cfg.mode == WDS_MODE_RESAMPLED;
  int elastic = saved.val[K_FROM][0] != 0, changed = 0;
  for (size_t k = K_MODE; k < K_FROM; k++) {
    if (strcmp(saved.val[k], mine.val[k]) == 0)
      continue;
    if (can_elastic && elastic_key(k)) {
      elastic = changed = 1;
      continue;
    }
    const char *sv = saved.val[k][0] ? saved.val[k] : "none";
    const char *mv = mine.val[k][0] ? mine.val[k] : "none";
    rc = wds__fail(e, WDS_ERR_INVALID,
                   "resume state: saved with %s %s; this loader has %s %s: "
                   "its position (epoch %" PRIu64 ", %" PRIu64
                   " batches) means other samples here, so it cannot be "
                   "continued (resume with the configuration it was saved "
                   "with%s)",
                   what(k), sv, what(k), mv, epoch, batches,
                   l->cfg.mode != WDS_MODE_RESAMPLED && elastic_key(k)
                       ? "; an elastic resume takes exact mode over one "
                         "source, or resampled mode"
                       : "");
    goto done;
  }
  if (elastic) {
    if ((rc = level_of(&saved, &v, 0, e)) != WDS_OK)
      goto done;
    rc = state_elastic(l, v, text, changed, e);
    goto done;
  }
  l->cfg.epoch = epoch;
  l->cfg.resume_batches = batches;
done:
  level_free(v);
  free(saved.copy);
  free(mine.copy);
  free(own);
  return rc;
}
