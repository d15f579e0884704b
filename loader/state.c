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
#include "loader/index.h"
#include "loader/internal.h"
#include "loader/plan.h"
#include "loader/shuffle.h"

__extension__ typedef unsigned __int128 u128;

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
  /* Resampled mode draws shards with replacement: shard_shuffle does
   * nothing there (and is refused off), written as 1. */
  sb_printf(&b, "\nlast_batch=%s\ndrop_last=%d\nshard_shuffle=%d\n",
            last_names[c->last_batch], c->drop_last != 0,
            c->mode == WDS_MODE_RESAMPLED || c->shard_shuffle != 0);
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
 * workers or another shuffle buffer, in exact mode (one source or a mix):
 * what the saving job's ranks delivered is a function of its
 * configuration, so it is computed, not guessed. The epoch's sample
 * occurrences are numbered source by source over the source's "units"
 * (mix.c: its whole passes and its window; without a mix, the shards), so
 * a sample a mix repeats is one bit per occurrence. Each old rank's plan
 * is made again (per source, wds__plan_epoch over the units), its workers'
 * feeds interleaved as mix.c's wds__feeds_next does and run through their
 * shuffle buffers over occurrence numbers (the real wds__shuffle_next, with
 * stand-in samples: nothing is read or decoded), and its collator's
 * rotation taken for the rows of its first B batches; the occurrences
 * those rows held are marked, padding excepted (the rank split's padding
 * rows are delivered marked invalid, so they deliver nothing). Each
 * source's occurrences left, in the epoch's unit order, are cut among the
 * new ranks as exact mode cuts an epoch (wds__plan_rank_split with the new
 * sizes: every new rank the same steps per source, the padding repeating
 * the first samples of the remainder, marked pad), and this rank's ranges
 * become its plans for the rest of the epoch (with a mix, one per source,
 * read by the sources' feeds: each source still gives its n_s samples in
 * the epoch). Later epochs are a fresh run's. A state saved inside such a
 * remainder carries the state it came from ("from"), so the marks are
 * made level by level.
 *
 * The stand-ins hold no data. Where every source has an index with its
 * per-sample detail (`wds index` writes each member's size), a stand-in
 * carries its sample's real data_bytes (the wanted members' sizes, as
 * feed.c's raw_copy counts them), so a shuffle buffer's byte bound binds in
 * the replay exactly where it bound in the old run. Without, it never
 * binds in the replay: the old run's order is replayed exactly only when
 * it cannot have bound there either, which shuffle_buffer *
 * max_sample_bytes < shuffle_buffer_bytes guarantees (a sample's data is at
 * most max_sample_bytes); otherwise the resume is refused, naming the
 * values and saying that an index lifts the condition. Cost: one pass
 * over the samples the old ranks delivered (RNG draws, no I/O), a bit per
 * sample occurrence of the epoch, and where the bound may have bound the
 * indexes' detail parsed again and 8 bytes a sample. */

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

/* The epoch's sample occurrences, source by source: each source's
 * "units" (mix.c: its whole passes and its window; without a mix, the
 * shards themselves, empty ones too, as wds__plan_epoch permutes them)
 * and the number of each unit's first occurrence, so an occurrence is a
 * bit. With a mix a sample can occur more than once in an epoch (repeat
 * factors, proportions): each occurrence is its own. */
typedef struct space {
  size_t nsrc;
  wds__units *u;       /* [nsrc] */
  uint64_t **first_id; /* [nsrc][u[s].n] */
  uint64_t total;      /* occurrences in the epoch */
  /* With an index for every source: each sample's data_bytes as a feed
   * gives it (sizes[shard_first[shard] + j]), so the replay's shuffle
   * buffers bind on bytes as the old run's did; NULL without, or while no
   * level needs them (sizes_tried: loaded once a level's bound may bind). */
  uint64_t *sizes, *shard_first;
  int sizes_tried;
} space;

static void space_free(space *sp) {
  for (size_t s = 0; sp->u && s < sp->nsrc; s++) {
    wds__units_free(&sp->u[s]);
    free(sp->first_id[s]);
  }
  free(sp->u);
  free(sp->first_id);
  free(sp->sizes);
  free(sp->shard_first);
  memset(sp, 0, sizeof *sp);
}

static int wanted(const wds_loader *l, const char *ext) {
  for (size_t i = 0; i < l->nwanted; i++)
    if (strcmp(l->wanted[i], ext) == 0)
      return 1;
  return 0;
}

/* sp->sizes from the sources' indexes: each sample's wanted members' sizes
 * summed (what raw_copy counts in data_bytes: feed.c), read from the
 * per-sample detail `wds index` writes. Left NULL (WDS_OK) when a source
 * has no index or an entry no detail; an index that no longer loads is an
 * error naming it. Cost: the indexes parsed once more with their detail,
 * and 8 bytes a sample. */
static int space_sizes(const wds_loader *l, space *sp, wds__err *e) {
  const wds__sources *ss = &l->sources;
  size_t n = ss->urls.count;
  for (size_t s = 0; s < ss->nsrc; s++)
    if (!ss->src[s].index_path)
      return WDS_OK;
  uint64_t total = 0;
  if (!(sp->shard_first = malloc((n ? n : 1) * sizeof *sp->shard_first)))
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    sp->shard_first[i] = total;
    total += l->counts[i];
  }
  if (!(sp->sizes = calloc(total ? total : 1, sizeof *sp->sizes)))
    return wds__fail(e, WDS_ERR_NOMEM,
                     "out of memory (the samples' sizes: %llu bytes)",
                     (unsigned long long)(total * sizeof *sp->sizes));
  int rc = WDS_OK, detail = 1;
  for (size_t src = 0; src < ss->nsrc && rc == WDS_OK && detail; src++) {
    const wds__source *so = &ss->src[src];
    wds__index ix;
    wds__err ie;
    unsigned flags = WDS__INDEX_SAMPLES;
    if (l->cfg.allow_pipe_from_files)
      flags |= WDS_INDEX_ALLOW_PIPE_FROM_FILES;
    if ((rc = wds__index_load_flags(so->index_path, flags, &ix, &ie)) !=
        WDS_OK) {
      rc = wds__fail(e, rc, "resume state: %s", ie.msg);
      break;
    }
    for (size_t sh = so->first; sh < so->first + so->count && detail; sh++) {
      size_t at;
      if ((rc = wds__index_find(&ix, ss->urls.urls[sh], &at, &ie)) != WDS_OK) {
        rc = wds__fail(e, rc, "resume state: index %s: %s", so->index_path,
                       ie.msg);
        break;
      }
      const wds__index_entry *en = &ix.shards[at];
      if (!en->has_samples || en->sample_count != l->counts[sh]) {
        detail = 0; /* no per-sample detail: no sizes */
        break;
      }
      for (uint64_t j = 0; j < l->counts[sh]; j++) {
        const wds_index_sample *smp = &en->samples[j];
        uint64_t b = 0;
        for (size_t f = 0; f < smp->field_count; f++)
          if (wanted(l, smp->fields[f].ext))
            b += smp->fields[f].size_bytes;
        sp->sizes[sp->shard_first[sh] + j] = b;
      }
    }
    wds__index_free(&ix);
  }
  if (rc != WDS_OK || !detail) {
    free(sp->sizes);
    free(sp->shard_first);
    sp->sizes = sp->shard_first = NULL;
  }
  return rc;
}

static int space_make(const wds_loader *l, uint64_t epoch, space *sp,
                      wds__err *e) {
  const wds__sources *ss = &l->sources;
  memset(sp, 0, sizeof *sp);
  sp->nsrc = ss->mixed ? ss->nsrc : 1;
  sp->u = calloc(sp->nsrc, sizeof *sp->u);
  sp->first_id = calloc(sp->nsrc, sizeof *sp->first_id);
  if (!sp->u || !sp->first_id)
    goto nomem;
  for (size_t s = 0; s < sp->nsrc; s++) {
    wds__units *u = &sp->u[s];
    if (ss->mixed) {
      if (wds__source_units(ss, l->counts, s, epoch, u) != 0)
        goto nomem;
    } else {
      size_t n = ss->urls.count;
      u->shard = malloc((n ? n : 1) * sizeof *u->shard);
      u->begin = calloc(n ? n : 1, sizeof *u->begin);
      u->len = malloc((n ? n : 1) * sizeof *u->len);
      if (!u->shard || !u->begin || !u->len)
        goto nomem;
      for (size_t i = 0; i < n; i++) {
        u->shard[i] = i;
        u->len[i] = l->counts[i];
      }
      u->n = u->cap = n;
    }
    if (!(sp->first_id[s] = malloc((u->n ? u->n : 1) * sizeof(uint64_t))))
      goto nomem;
    for (size_t k = 0; k < u->n; k++) {
      sp->first_id[s][k] = sp->total;
      sp->total += u->len[k];
    }
  }
  return WDS_OK;
nomem:
  space_free(sp);
  return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
}

/* The plan input of source s of sp for in: its units as shards. */
static wds__plan_input src_pin(const wds_loader *l, const space *sp, size_t s,
                               wds__plan_input in) {
  in.shards = sp->u[s].n;
  in.counts = sp->u[s].len;
  in.seed = l->sources.src[s].seed;
  return in;
}

/* A stand-in sample: its occurrence number in the epoch, and whether the
 * rank split made it padding (delivered marked invalid: not a delivery). */
typedef struct stand_in {
  wds__raw_sample r; /* first: the shuffle buffer holds &r */
  uint64_t id;
} stand_in;

/* One old worker's feed of one source, replayed: its pieces in order. */
typedef struct rfeed {
  const wds__worker_plan *wp; /* pieces in unit space */
  const wds__units *u;        /* its source's units */
  const space *sp;
  const uint64_t *first_id;
  size_t piece;
  uint64_t next; /* the next sample of pieces[piece] */
} rfeed;

/* One old worker replayed: its feeds (one per source), chosen between as
 * mix.c's wds__feeds_next does, through its shuffle buffer. */
typedef struct replay {
  rfeed *f;
  size_t nf;
  uint64_t *taken; /* per feed (nf > 1) */
  uint64_t out;    /* samples it gave */
  uint64_t quota;  /* its quota: the feeds' summed */
  wds__shuffle sh;
  int failed;
} replay;

static int replay_pull(void *ctx, wds__raw_sample **out) {
  replay *rp = ctx;
  *out = NULL;
  size_t s = 0;
  if (rp->nf > 1) {
    /* mix.c's pick_due: the source whose next sample is due first. */
    size_t best = rp->nf;
    for (size_t k = 0; k < rp->nf; k++) {
      uint64_t qk = rp->f[k].wp->quota;
      if (rp->taken[k] >= qk)
        continue;
      if (best == rp->nf ||
          (u128)(2 * rp->taken[k] + 1) * rp->f[best].wp->quota <
              (u128)(2 * rp->taken[best] + 1) * qk)
        best = k;
    }
    if (best == rp->nf)
      return 0;
    s = best;
    rp->taken[s]++;
  }
  rfeed *f = &rp->f[s];
  while (f->piece < f->wp->count && f->next >= f->wp->pieces[f->piece].end) {
    f->piece++;
    if (f->piece < f->wp->count)
      f->next = f->wp->pieces[f->piece].begin;
  }
  if (f->piece >= f->wp->count)
    return 0;
  stand_in *si = calloc(1, sizeof *si);
  if (!si) {
    rp->failed = 1;
    return -1;
  }
  const wds__piece *pc = &f->wp->pieces[f->piece];
  if (f->sp->sizes) /* the sample's real size: the byte bound binds */
    si->r.data_bytes = f->sp->sizes[f->sp->shard_first[f->u->shard[pc->shard]] +
                                    f->u->begin[pc->shard] + f->next];
  si->id = f->first_id[pc->shard] + f->next++;
  si->r.pad = pc->pad;
  *out = &si->r;
  return 0;
}

/* Marks in bits the samples of the first n rows of rank `rank` of v (its
 * plans per source of sp, in unit space: its workers' feeds and shuffle
 * keys) as its collator takes them; padding is not marked. */
static int replay_rank(const wds_loader *l, const level *v, int rank,
                       const space *sp, const wds__epoch_plan *plans,
                       uint64_t n, uint8_t *bits, wds__err *e) {
  int K = v->workers, rc = WDS_OK;
  size_t S = sp->nsrc;
  replay *rp = calloc((size_t)K, sizeof *rp);
  int *active = malloc((size_t)K * sizeof *active);
  if (!rp || !active) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (int w = 0; w < K; w++) {
    rp[w].nf = S;
    rp[w].f = calloc(S, sizeof *rp[w].f);
    rp[w].taken = calloc(S, sizeof *rp[w].taken);
    if (!rp[w].f || !rp[w].taken) {
      rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
    for (size_t s = 0; s < S; s++) {
      rfeed *f = &rp[w].f[s];
      f->wp = &plans[s].w[w];
      f->u = &sp->u[s];
      f->sp = sp;
      f->first_id = sp->first_id[s];
      f->next = f->wp->count ? f->wp->pieces[0].begin : 0;
      rp[w].quota += f->wp->quota;
    }
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
    if (r->out == r->quota) {
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
    if (!si->r.pad)
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
    free(rp[w].f);
    free(rp[w].taken);
  }
  free(rp);
  free(active);
  return rc;
}

static int bit(const uint8_t *bits, uint64_t id) {
  return (bits[id / 8] >> (id % 8)) & 1;
}

/* The remainder's plan for rank in->rank of in (its world, workers,
 * weights, drop_last; its shards: one source's units, in->counts): the
 * occurrences not marked in bits (first_id: each unit's first), in the
 * epoch's unit order, cut among in's ranks; positions past the samples
 * left (the padding) are pieces marked pad. *left: the samples not
 * marked. Pieces are in unit space. */
static int remainder_plan(const wds__plan_input *in, uint64_t epoch,
                          const uint8_t *bits, const uint64_t *first_id,
                          wds__epoch_plan *out, uint64_t *left, wds__err *e) {
  size_t n = in->shards, np = 0, cap = 0;
  const uint64_t *counts = in->counts;
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
    for (uint64_t j = 0; j < counts[i]; j++)
      m += !bit(bits, first_id[i] + j);
  *left = m;
  uint64_t steps = m ? wds__plan_rank_split(m, in->rank_weights, in->world,
                                            in->drop_last, cut)
                     : 0;
  uint64_t start = m ? cut[in->rank] : 0, end = m ? cut[in->rank + 1] : 0;
  if (!steps)
    start = end = 0;
  /* Positions [start, end) of the remainder (wrapping past m: padding),
   * as runs of unmarked samples within a unit. */
  for (uint64_t from = start; from < end;) {
    uint64_t lo = from % m, hi = lo + (end - from);
    if (hi > m)
      hi = m;
    uint64_t pos = 0;
    for (size_t k = 0; k < n && pos < hi; k++) {
      size_t sh = order[k];
      for (uint64_t j = 0; j < counts[sh] && pos < hi;) {
        if (bit(bits, first_id[sh] + j)) {
          j++;
          continue;
        }
        uint64_t j0 = j;
        while (j < counts[sh] && !bit(bits, first_id[sh] + j) &&
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
        pcs[np++] = (wds__piece){sh, j0 + skip, j, from >= m};
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

/* The plans per source (unit space) of the rank of `in`: a fresh epoch's
 * (base NULL) or the remainder of the occurrences not marked in base.
 * *left (may be NULL): the occurrences not marked, over the sources. */
static int rank_plans(const wds_loader *l, const space *sp,
                      const wds__plan_input *in, uint64_t epoch,
                      const uint8_t *base, wds__epoch_plan *plans,
                      uint64_t *left, wds__err *e) {
  int rc = WDS_OK;
  uint64_t all = 0;
  for (size_t s = 0; s < sp->nsrc && rc == WDS_OK; s++) {
    wds__plan_input is = src_pin(l, sp, s, *in);
    uint64_t m = 0;
    rc = base ? remainder_plan(&is, epoch, base, sp->first_id[s], &plans[s], &m,
                               e)
              : wds__plan_epoch(&is, epoch, &plans[s], e);
    all += m;
  }
  if (left)
    *left = all;
  return rc;
}

static void plans_free(wds__epoch_plan *plans, size_t n) {
  for (size_t s = 0; plans && s < n; s++)
    wds__plan_free(&plans[s]);
  free(plans);
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

/* Marks in bits every sample occurrence the ranks of v (and the states
 * before it) delivered as valid rows in its epoch. */
static int mark_delivered(const wds_loader *l, const level *v, space *sp,
                          uint8_t *bits, size_t nbytes, wds__err *e) {
  int rc = WDS_OK;
  uint8_t *base = NULL;
  wds__epoch_plan *plans = NULL;
  /* Whether the byte bound may have bound in v's run: then the replay
   * needs the samples' sizes (the indexes', read once for every level). */
  int may_bind =
      v->sbuf > 1 && (v->maxs == 0 || v->sbytes / v->maxs <= v->sbuf);
  if (may_bind && !sp->sizes_tried) {
    sp->sizes_tried = 1;
    if ((rc = space_sizes(l, sp, e)) != WDS_OK)
      return rc;
  }
  if (may_bind && !sp->sizes)
    return wds__fail(
        e, WDS_ERR_INVALID,
        "resume state: saved with a shuffle buffer of %zu samples and "
        "shuffle_buffer_bytes %zu, max_sample_bytes %zu: its byte bound may "
        "have changed the saved run's order, which cannot be replayed without "
        "the samples' sizes, so the state continues only under the "
        "configuration it was saved with (an elastic resume needs "
        "shuffle_buffer * max_sample_bytes < shuffle_buffer_bytes, or an "
        "index with per-sample detail, as `wds index` writes, for every "
        "source: its sizes are replayed)",
        v->sbuf, v->sbytes, v->maxs);
  if (v->from) {
    if ((rc = mark_delivered(l, v->from, sp, bits, nbytes, e)) != WDS_OK)
      return rc;
    if (!(base = malloc(nbytes ? nbytes : 1)))
      return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    memcpy(base, bits, nbytes);
  }
  for (int r = 0; r < v->world && rc == WDS_OK; r++) {
    wds__plan_input in = level_pin(l, v, r);
    if (!(plans = calloc(sp->nsrc, sizeof *plans))) {
      rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
      break;
    }
    rc = rank_plans(l, sp, &in, v->epoch, base, plans, NULL, e);
    uint64_t rank_samples = 0;
    for (size_t s = 0; s < sp->nsrc; s++)
      rank_samples += plans[s].rank_samples;
    uint64_t b = v->rbs ? v->rbs[r] : v->batch_size;
    uint64_t rows =
        v->batches > rank_samples / b ? rank_samples : v->batches * b;
    if (rc == WDS_OK)
      rc = replay_rank(l, v, r, sp, plans, rows, bits, e);
    plans_free(plans, sp->nsrc);
    plans = NULL;
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
  space sp;
  uint8_t *bits = NULL;
  wds__epoch_plan *plans = NULL;
  int rc = space_make(l, v->epoch, &sp, e);
  if (rc != WDS_OK)
    return rc;
  size_t nbytes = (size_t)(sp.total / 8 + 1);
  if (!(bits = calloc(nbytes, 1))) {
    rc = wds__fail(e, WDS_ERR_NOMEM,
                   "out of memory (a bit per sample of the epoch: %zu bytes)",
                   nbytes);
    goto done;
  }
  if ((rc = mark_delivered(l, v, &sp, bits, nbytes, e)) != WDS_OK)
    goto done;
  uint64_t left;
  if (!(plans = calloc(sp.nsrc, sizeof *plans))) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "out of memory");
    goto done;
  }
  if ((rc = rank_plans(l, &sp, &l->pin, v->epoch, bits, plans, &left, e)) !=
      WDS_OK)
    goto done;
  for (size_t s = 0; s < sp.nsrc; s++)
    wds__units_map(&sp.u[s], &plans[s]);
  if (l->sources.mixed) {
    /* Each source's remainder read by its own feeds, as a fresh mixed
     * run's plans (run.c takes both). */
    if ((rc = wds__plan_sum(plans, sp.nsrc, v->epoch, l->pin.workers,
                            &l->elastic_plan, e)) != WDS_OK)
      goto done;
    l->elastic_splan = plans;
    plans = NULL;
  } else {
    l->elastic_plan = plans[0];
    memset(&plans[0], 0, sizeof plans[0]);
  }
  if (!(l->elastic_from = strdup(text))) {
    wds__plan_free(&l->elastic_plan);
    plans_free(l->elastic_splan, sp.nsrc);
    l->elastic_splan = NULL;
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
  plans_free(plans, sp.nsrc);
  space_free(&sp);
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
  /* Exact (one source or a mix) and resampled mode: another world, other
   * sizes, workers or shuffle settings are an elastic resume; in plain
   * mode, or with another seed, mode or data, a difference is refused. */
  int can_elastic = (l->cfg.mode == WDS_MODE_EXACT && l->counts) ||
                    l->cfg.mode == WDS_MODE_RESAMPLED;
  int elastic = saved.val[K_FROM][0] != 0, changed = 0;
  for (size_t k = K_MODE; k < K_FROM; k++) {
    if (strcmp(saved.val[k], mine.val[k]) == 0)
      continue;
    /* Not used in resampled mode (a state written before it was refused
     * off there may say 0): the same samples either way. */
    if (k == K_SSHUF && l->cfg.mode == WDS_MODE_RESAMPLED)
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
                       ? "; an elastic resume takes exact or resampled "
                         "mode"
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
