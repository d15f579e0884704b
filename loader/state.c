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
#include "loader/internal.h"

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
            "\ndata=%016" PRIx64 "\n",
            shuf ? c->shuffle_buffer : (size_t)0,
            shuf ? c->shuffle_initial : (size_t)0,
            shuf ? c->shuffle_buffer_bytes : (size_t)0,
            c->mode == WDS_MODE_EXACT ? 0 : c->samples_per_epoch,
            data_fingerprint(l));
  uint64_t sum = b.oom || !b.p ? 0 : fnv(FNV_INIT, b.p, b.n);
  sb_printf(&b, "check=%016" PRIx64 "\n", sum);
  *out = wds__sb_take(&b);
  return *out ? WDS_OK : WDS_ERR_NOMEM;
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
                                   "data"};
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
  K_DATA
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

int wds__state_check(wds_loader *l, const char *text, wds__err *e) {
  parsed saved, mine;
  char *own = NULL;
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
  for (size_t k = K_MODE; k < NKEYS; k++) {
    if (strcmp(saved.val[k], mine.val[k]) == 0)
      continue;
    const char *sv = saved.val[k][0] ? saved.val[k] : "none";
    const char *mv = mine.val[k][0] ? mine.val[k] : "none";
    rc = wds__fail(e, WDS_ERR_INVALID,
                   "resume state: saved with %s %s; this loader has %s %s: "
                   "its position (epoch %" PRIu64 ", %" PRIu64
                   " batches) means other samples here, so it cannot be "
                   "continued (resume with the configuration it was saved "
                   "with)",
                   what(k), sv, what(k), mv, epoch, batches);
    goto done;
  }
  l->cfg.epoch = epoch;
  l->cfg.resume_batches = batches;
done:
  free(saved.copy);
  free(mine.copy);
  free(own);
  return rc;
}
