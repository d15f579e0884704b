/* reader.c — WebDataset samples from a list of shards.
 *
 * One shard at a time: open the stream, iterate tar members, group them by
 * key. Grouping has a one-member look-ahead: a sample is complete when the
 * next member's key differs (or the shard ends), so that member is held as
 * "pending" and starts the next sample. Field data stays in the tar window
 * (views, no copies); the window's keep mark is the first member of the
 * current sample, so everything a returned sample points to stays put until
 * the next call. Names, keys and extensions are small and copied into an
 * arena per sample.
 *
 * Errors close the current shard; the next call moves on to the next shard,
 * except after a duplicate extension, where the rest of that key's members
 * are skipped and reading continues in the same shard.
 *
 * Checked frames. A compressed shard's bytes are checked at the end of
 * each zstd frame (content checksum) or gzip member (CRC-32, length): a
 * sample is returned only once every byte of its data is final
 * (wds__tar_settle reads on into the window to the end of the frame that
 * holds its last byte), so a sample from a frame whose check fails is
 * never returned: the error comes instead, and ends the shard. A frame
 * larger than max_unverified_bytes is not held: its samples are returned
 * as they come and counted (stats.unverified_samples), as are samples in
 * compressed data without a check (a zstd frame without a checksum). */
#include "wds/reader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/url.h"
#include "reader_internal.h"
#include "shards/cancel.h"
#include "shards/spec_io.h"
#include "shards/stream.h"
#include "shards/tar.h"
#include "wds/spec.h"

#define DEFAULT_BUFFER_BYTES ((size_t)4 << 20)
#define DEFAULT_MAX_SAMPLE_BYTES ((size_t)1 << 30)
#define DEFAULT_MAX_FIELDS ((size_t)4096)
#define DEFAULT_MAX_UNVERIFIED_BYTES ((uint64_t)64 << 20)

typedef struct field_slot {
  size_t ext_off; /* offsets into the arena */
  size_t name_off;
  uint64_t data_voff;
  const uint8_t *dest; /* the sink's buffer (SINK_INTO), or NULL */
  int where;           /* WDS__SINK_WINDOW, _INTO, _SKIP or _DEFER */
  uint64_t size;
  uint64_t offset;
} field_slot;

struct wds_reader {
  wds_reader_config cfg;
  wds_url_list urls;
  size_t next_shard; /* index of the next shard to open */
  size_t shard;      /* index of the open shard */
  wds__stream *stream;
  wds__tar *tar;
  int shard_done; /* ended or failed: close on the next call */

  /* Pending member: read, not yet placed in a sample. */
  int has_pending;
  wds__tar_member pending;
  char *pending_name;
  size_t pending_name_cap;
  size_t pending_key_len; /* key = pending_name[0..key_len) */
  size_t pending_ext_off; /* extension starts at pending_name + ext_off */
  int pending_ext_same;   /* the extension was lower case already */
  /* After a duplicate: members with this key are dropped. */
  int skipping_key;
  char *skip_key;
  size_t skip_key_cap;

  /* The sample being built / returned. */
  char *arena;
  size_t arena_len, arena_cap;
  field_slot *slots;
  size_t slot_count, slot_cap;
  wds_field *fields;
  size_t fields_cap;
  wds_sample sample;
  size_t key_len;            /* strlen(arena), the current key */
  uint64_t sample_bytes;     /* data and names held for the current sample */
  uint64_t sample_end;       /* stream offset after its last member's data */
  uint64_t sample_unchecked; /* the stream's unchecked frames at its start */
  int sample_unchecked_now;  /* it started in bytes that carry no check */

  wds_reader_stats stats;
  wds__err err;
  wds__cancel own_cancel;    /* wds_reader_cancel() */
  const wds__cancel *cancel; /* the one reads honour: own, or the owner's */
  wds__io_opts io;
  wds__cache_stats own_cache_stats;
  char *cache_dir; /* io.cache.dir: a copy of the config's */

  wds__member_sink sink; /* where member data goes (NULL: the window) */
  void *sink_ctx;
  uint64_t sink_min; /* smaller members go to the window unasked */
  int window_held;   /* a member of the current sample is in the window */
};

void wds__reader_set_sink(wds_reader *r, wds__member_sink sink, void *ctx,
                          uint64_t min_bytes) {
  r->sink = sink;
  r->sink_ctx = ctx;
  r->sink_min = min_bytes;
}

int wds__reader_shard_fd(const wds_reader *r) {
  return r->stream ? wds__stream_file_fd(r->stream) : -1;
}

int wds__reader_shard_is_cache_entry(const wds_reader *r) {
  return r->stream && wds__stream_file_is_cache_entry(r->stream);
}

uint64_t wds__reader_data_offset(const wds_reader *r) {
  return r->pending.data_offset;
}

int wds_reader_open(const wds_reader_config *cfg, wds_reader **out) {
  wds__err e;
  return wds__last_set(wds__reader_open(cfg, NULL, out, &e), e.msg);
}

#define open_fail(...) wds__fail(e, __VA_ARGS__)
int wds__reader_open(const wds_reader_config *cfg, const wds__cancel *cancel,
                     wds_reader **out, wds__err *e) {
  int rc = WDS_OK;
  wds_reader *r = NULL;
  e->msg[0] = '\0';
  if (!out)
    return open_fail(WDS_ERR_INVALID, "wds_reader_open: out is NULL");
  *out = NULL;
  if (!cfg || (!cfg->spec && (!cfg->urls && cfg->url_count > 0)))
    return open_fail(WDS_ERR_INVALID, "wds_reader_open: no spec or urls");
  r = calloc(1, sizeof *r);
  if (!r)
    return open_fail(WDS_ERR_NOMEM, "out of memory");
  r->cfg = *cfg;
  wds__cancel_init(&r->own_cancel); /* works without its eventfd too */
  r->own_cancel.interrupt = cfg->interrupt;
  r->own_cancel.interrupt_ctx = cfg->interrupt_ctx;
  r->cancel = cancel ? cancel : &r->own_cancel;
  r->io = (wds__io_opts){.read_timeout_ms = cfg->read_timeout_ms,
                         .cancel = r->cancel,
                         .max_window_bytes = cfg->max_window_bytes,
                         .retries = cfg->retries};
  r->io.cache =
      (wds__cache_cfg){.size = cfg->cache_size, .stats = &r->own_cache_stats};
  const char *cache_dir = wds__cache_dir_default(cfg->cache_dir);
  if (cache_dir && cache_dir[0]) {
    r->cache_dir = strdup(cache_dir);
    if (!r->cache_dir) {
      rc = open_fail(WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
    r->io.cache.dir = r->cache_dir;
  }
  r->cfg.spec = NULL;      /* not owned; only used here */
  r->cfg.cache_dir = NULL; /* r->cache_dir: our copy */
  r->cfg.urls = NULL;
  if (r->cfg.buffer_size_bytes == 0)
    r->cfg.buffer_size_bytes = DEFAULT_BUFFER_BYTES;
  if (r->cfg.max_sample_bytes == 0)
    r->cfg.max_sample_bytes = DEFAULT_MAX_SAMPLE_BYTES;
  if (r->cfg.max_fields == 0)
    r->cfg.max_fields = DEFAULT_MAX_FIELDS;
  if (r->cfg.max_unverified_bytes == 0)
    r->cfg.max_unverified_bytes = DEFAULT_MAX_UNVERIFIED_BYTES;
  if (cfg->spec) {
    rc = wds__spec_expand_io(
        &cfg->spec, 1, cfg->max_urls,
        cfg->allow_pipe_from_files ? WDS_SPEC_ALLOW_PIPE_FROM_FILES : 0, &r->io,
        &r->urls, e);
    if (rc != WDS_OK)
      goto done;
  } else {
    r->urls.urls = calloc(cfg->url_count ? cfg->url_count : 1, sizeof(char *));
    if (!r->urls.urls) {
      rc = open_fail(WDS_ERR_NOMEM, "out of memory");
      goto done;
    }
    for (size_t i = 0; i < cfg->url_count; i++) {
      if (!cfg->urls[i]) {
        rc =
            open_fail(WDS_ERR_INVALID, "wds_reader_open: urls[%zu] is NULL", i);
        goto done;
      }
      r->urls.urls[i] = strdup(cfg->urls[i]);
      if (!r->urls.urls[i]) {
        rc = open_fail(WDS_ERR_NOMEM, "out of memory");
        goto done;
      }
      r->urls.count = i + 1;
    }
  }
done:
  if (rc != WDS_OK) {
    wds_reader_close(r);
    return rc;
  }
  *out = r;
  return WDS_OK;
}

static void close_shard(wds_reader *r) {
  if (r->stream)
    r->stats.unchecked_frames += wds__stream_unchecked_frames(r->stream);
  wds__tar_close(r->tar);
  r->tar = NULL;
  wds__stream_close(r->stream);
  r->stream = NULL;
  r->has_pending = 0;
  r->skipping_key = 0;
}

void wds_reader_close(wds_reader *r) {
  if (!r)
    return;
  close_shard(r);
  wds_url_list_free(&r->urls);
  free(r->pending_name);
  free(r->skip_key);
  free(r->arena);
  free(r->slots);
  free(r->fields);
  free(r->cache_dir);
  wds__cancel_destroy(&r->own_cancel);
  free(r);
}

void wds_reader_cancel(wds_reader *r) {
  if (r)
    wds__cancel_set(&r->own_cancel);
}

const char *wds__reader_error(const wds_reader *r) { return r->err.msg; }

size_t wds_reader_shard_count(const wds_reader *r) { return r->urls.count; }

const char *wds_reader_shard_url(const wds_reader *r, size_t index) {
  if (index < r->urls.count)
    return r->urls.urls[index];
  wds__last_fail(WDS_ERR_INVALID, "wds_reader_shard_url: shard %zu of %zu",
                 index, r->urls.count);
  return NULL;
}

void wds_reader_stats_get(const wds_reader *r, wds_reader_stats *out) {
  *out = r->stats;
  const wds__cache_stats *c = r->io.cache.stats;
  out->cache_hits = atomic_load(&c->hits);
  out->cache_stored = atomic_load(&c->stored);
  out->cache_errors = atomic_load(&c->errors);
}

void wds__reader_set_read_thread(wds_reader *r, int v) {
  r->io.read_thread = v;
}

void wds__reader_set_cache_stats(wds_reader *r, wds__cache_stats *stats) {
  r->io.cache.stats = stats ? stats : &r->own_cache_stats;
}

/* WebDataset's metadata rule: a top-level "__x__", or a match of the regex
 * __[^/]*__($|/) at the start of the name. */
static int is_meta(const char *n, size_t len) {
  if (len < 2 || n[0] != '_' || n[1] != '_')
    return 0;
  if (!memchr(n, '/', len) && n[len - 1] == '_' && n[len - 2] == '_')
    return 1;
  for (size_t k = 2; k + 1 < len && n[k] != '/'; k++)
    if (n[k] == '_' && n[k + 1] == '_' && (k + 2 == len || n[k + 2] == '/'))
      return 1;
  return 0;
}

/* WebDataset's base_plus_ext(), the regex ^((?:.* /|)[^.]+)[.]([^/]*)$
 * (without the space): sets the key length and the extension start, or
 * returns 0 when the name matches no sample. */
static int split_key(const char *n, size_t len, size_t *key_len,
                     size_t *ext_off) {
  const char *slash = memrchr(n, '/', len);
  size_t c = slash ? (size_t)(slash - n) + 1 : 0; /* last component */
  const char *dot = memchr(n + c, '.', len - c);
  if (!dot)
    return 0;
  size_t d = (size_t)(dot - n);
  if (d > c) {
    *key_len = d;
    *ext_off = d + 1;
    return 1;
  }
  /* The last component starts with a dot: the regex can still match with
   * [^.]+ spanning the previous component and its slash, if that component
   * has no dot. */
  if (c == 0)
    return 0;
  size_t p = c - 1;
  while (p > 0 && n[p - 1] != '/')
    p--;
  if (memchr(n + p, '.', c - 1 - p))
    return 0;
  *key_len = c;
  *ext_off = c + 1;
  return 1;
}

static int arena_add(wds_reader *r, const char *s, size_t n, size_t *off) {
  char *a = wds__grow(r->arena, &r->arena_cap, r->arena_len + n + 1, 1, 1024);
  if (!a)
    return WDS_ERR_NOMEM;
  r->arena = a;
  memcpy(r->arena + r->arena_len, s, n);
  r->arena[r->arena_len + n] = '\0';
  *off = r->arena_len;
  r->arena_len += n + 1;
  return WDS_OK;
}

static int lower_ascii(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Reads the next member that belongs to some sample into r->pending.
 * WDS_OK, WDS_EOF at the end of the shard, or an error. */
static int read_pending(wds_reader *r) {
  for (;;) {
    int rc = wds__tar_next(r->tar, &r->pending, &r->err);
    if (rc != WDS_OK)
      return rc;
    const char *n = r->pending.name;
    size_t len = r->pending.name_len;
    size_t key_len, ext_off;
    if (is_meta(n, len) || !split_key(n, len, &key_len, &ext_off))
      continue;
    if (r->skipping_key) {
      if (strlen(r->skip_key) == key_len &&
          memcmp(r->skip_key, n, key_len) == 0)
        continue;
      r->skipping_key = 0;
    }
    char *p = wds__grow(r->pending_name, &r->pending_name_cap, len + 1, 1, 64);
    if (!p)
      return wds__fail(&r->err, WDS_ERR_NOMEM, "out of memory");
    r->pending_name = p;
    memcpy(r->pending_name, n, len + 1);
    int same = 1;
    for (size_t i = ext_off; i < len; i++) {
      char c = r->pending_name[i], lc = (char)lower_ascii((unsigned char)c);
      same &= c == lc;
      r->pending_name[i] = lc;
    }
    r->pending_ext_same = same;
    r->pending_key_len = key_len;
    r->pending_ext_off = ext_off;
    r->has_pending = 1;
    return WDS_OK;
  }
}

/* Adds the pending member to the current sample. */
static int take_pending(wds_reader *r) {
  wds__tar_member *m = &r->pending;
  /* max_sample_bytes counts what the sample holds: its data and the two
   * strings per field, checked before anything is read. */
  uint64_t add = m->size + 2 * (uint64_t)m->name_len + 2;
  if (add > r->cfg.max_sample_bytes - r->sample_bytes ||
      r->sample_bytes > r->cfg.max_sample_bytes)
    return wds__fail(&r->err, WDS_ERR_LIMIT,
                     "member \"%s\" at offset %llu (%llu bytes): sample "
                     "\"%s\" would hold more than max_sample_bytes (%zu bytes)",
                     m->name, (unsigned long long)m->header_offset,
                     (unsigned long long)m->size, r->arena,
                     r->cfg.max_sample_bytes);
  r->sample_bytes += add;
  if (m->data_offset + m->size > r->sample_end)
    r->sample_end = m->data_offset + m->size;
  int where = WDS__SINK_WINDOW, made = 0;
  void *dest = NULL;
  if (r->sink && m->size >= r->sink_min) {
    where = r->sink(r->sink_ctx, r->pending_name + r->pending_ext_off, m->size,
                    &dest);
    if (where < 0)
      return wds__fail(&r->err, where,
                       "member \"%s\" at offset %llu (%llu bytes): %s", m->name,
                       (unsigned long long)m->header_offset,
                       (unsigned long long)m->size, wds_strerror(where));
    if (where == WDS__SINK_INTO_MADE) {
      made = 1;
      where = WDS__SINK_INTO;
    }
    if (where == WDS__SINK_INTO && !dest && m->size)
      where = WDS__SINK_SKIP;
    if (where == WDS__SINK_DEFER && wds__reader_shard_fd(r) < 0)
      return wds__fail(&r->err, WDS_ERR_INVALID,
                       "member \"%s\" at offset %llu: deferred, but the "
                       "shard is not a plain local file",
                       m->name, (unsigned long long)m->header_offset);
  }
  int rc = WDS_OK;
  if (where == WDS__SINK_WINDOW)
    rc = wds__tar_load(r->tar, m, &r->err);
  else if (where == WDS__SINK_INTO && m->size)
    rc = wds__tar_read_into(r->tar, m, dest, made ? m->size : 0, &r->err);
  else
    wds__tar_skip_unread(r->tar, m); /* SKIP, DEFER: seeked over */
  if (rc != WDS_OK)
    return rc;
  field_slot *slots =
      wds__grow(r->slots, &r->slot_cap, r->slot_count + 1, sizeof *slots, 8);
  if (!slots)
    return wds__fail(&r->err, WDS_ERR_NOMEM, "out of memory");
  r->slots = slots;
  field_slot *f = &r->slots[r->slot_count];
  /* The member's name is stored with its extension lower-cased; keep the
   * original for messages and for wds_field.name. When the extension was
   * lower case already, it is the tail of the name's copy. */
  if (arena_add(r, m->name, m->name_len, &f->name_off) != WDS_OK)
    return wds__fail(&r->err, WDS_ERR_NOMEM, "out of memory");
  if (r->pending_ext_same)
    f->ext_off = f->name_off + r->pending_ext_off;
  else if (arena_add(r, r->pending_name + r->pending_ext_off,
                     m->name_len - r->pending_ext_off, &f->ext_off) != WDS_OK)
    return wds__fail(&r->err, WDS_ERR_NOMEM, "out of memory");
  if (where == WDS__SINK_WINDOW) {
    wds__tar_hold_to(r->tar, m->data_voff + m->size);
    r->window_held = 1;
  } else if (!r->window_held) {
    /* Nothing of the sample is in the window: none of it need stay. */
    wds__tar_keep_from(r->tar, m->data_voff);
  }
  f->where = where;
  f->dest = dest;
  f->data_voff = m->data_voff;
  f->size = m->size;
  f->offset = m->header_offset;
  r->slot_count++;
  r->has_pending = 0;
  r->stats.members++;
  return WDS_OK;
}

static int same_key(const wds_reader *r) {
  return r->key_len == r->pending_key_len &&
         memcmp(r->arena, r->pending_name, r->pending_key_len) == 0;
}

static int has_ext(const wds_reader *r, const char *ext) {
  for (size_t i = 0; i < r->slot_count; i++) {
    const char *e = r->arena + r->slots[i].ext_off;
    if (e[0] == ext[0] && strcmp(e, ext) == 0) /* most differ at once */
      return 1;
  }
  return 0;
}

static int finish_sample(wds_reader *r, const wds_sample **out) {
  wds_field *fields =
      wds__grow(r->fields, &r->fields_cap, r->slot_count, sizeof *fields, 8);
  if (!fields)
    return wds__fail(&r->err, WDS_ERR_NOMEM, "out of memory");
  r->fields = fields;
  for (size_t i = 0; i < r->slot_count; i++) {
    const field_slot *s = &r->slots[i];
    wds_field *f = &r->fields[i];
    f->ext = r->arena + s->ext_off;
    f->name = r->arena + s->name_off;
    f->data = s->where == WDS__SINK_WINDOW ? wds__tar_view(r->tar, s->data_voff)
              : s->where == WDS__SINK_INTO ? s->dest
                                           : NULL;
    f->size_bytes = (size_t)s->size;
    f->offset = s->offset;
    r->stats.field_bytes += s->size;
  }
  r->sample.key = r->arena;
  r->sample.url = r->urls.urls[r->shard];
  r->sample.shard_index = r->shard;
  r->sample.field_count = r->slot_count;
  r->sample.fields = r->fields;
  r->stats.samples++;
  *out = &r->sample;
  return WDS_OK;
}

/* Counts the sample as unverified when its frame was over the bound (not
 * settled), or some of its bytes lie in compressed data that carries no
 * check (a zstd frame without a checksum). */
static void count_unverified(wds_reader *r, int settled) {
  if (!settled || r->sample_unchecked_now ||
      wds__stream_unchecked_now(r->stream) ||
      wds__stream_unchecked_frames(r->stream) != r->sample_unchecked)
    r->stats.unverified_samples++;
}

/* Holds the sample until the checks of the frames its data lies in have
 * passed (see the top of the file). At the shard's end the drain does it. */
static int settle_sample(wds_reader *r) {
  int settled = 1;
  int rc = wds__tar_settle(r->tar, r->sample_end, r->cfg.max_unverified_bytes,
                           &settled, &r->err);
  if (rc != WDS_OK) {
    wds__err_prefix(&r->err,
                    "sample \"%s\" (ending at offset %llu) and the rest of the "
                    "shard not delivered",
                    r->arena, (unsigned long long)r->sample_end);
    return rc;
  }
  count_unverified(r, settled);
  return WDS_OK;
}

/* The read window's hard bound: a whole sample plus room for the padding,
 * the look-ahead header and skipped entries around it. */
static size_t window_limit(const wds_reader_config *c) {
  size_t slack = 2 * c->buffer_size_bytes + ((size_t)1 << 20);
  return c->max_sample_bytes > SIZE_MAX - slack ? SIZE_MAX
                                                : c->max_sample_bytes + slack;
}

/* Ends the shard at its end-of-archive marker: the rest of the stream is
 * read so compressed framing and a command's exit status are checked. The
 * tar window stays open: the shard's last sample may still point into it. */
/* Every shard error starts with the shard's URL, its secrets hidden
 * (wds__url_redact: a password, a presigned URL's signature). */
static void prefix_url(wds_reader *r) {
  char b[WDS__URL_REDACT_MAX];
  wds__err_prefix(&r->err, "%s",
                  wds__url_redact(r->urls.urls[r->shard], b, sizeof b));
}

static int end_shard(wds_reader *r) {
  r->shard_done = 1;
  int rc = wds__stream_drain(r->stream, &r->err);
  if (rc != WDS_OK) {
    /* Where: a gzip CRC, a zstd checksum or a command's status is checked
     * after the tar's last byte (the parser stops after the marker's first
     * zero block). */
    uint64_t at = r->tar ? wds__tar_offset(r->tar) : 0;
    if (at >= 512)
      wds__err_prefix(&r->err, "after the end-of-archive marker at offset %llu",
                      (unsigned long long)(at - 512));
    prefix_url(r);
  }
  return rc;
}

static int fail_shard(wds_reader *r, int rc) {
  if (rc != WDS_ERR_DUPLICATE)
    r->shard_done = 1;
  prefix_url(r);
  return rc;
}

/* After a duplicate extension: the sample is dropped and the rest of its
 * key's members are skipped. */
static int skip_rest_of_key(wds_reader *r) {
  size_t n = r->key_len;
  char *k = wds__grow(r->skip_key, &r->skip_key_cap, n + 1, 1, 64);
  if (!k)
    return WDS_ERR_NOMEM;
  r->skip_key = k;
  memcpy(r->skip_key, r->arena, n + 1);
  r->skipping_key = 1;
  r->has_pending = 0;
  r->slot_count = 0;
  return WDS_OK;
}

int wds__reader_next(wds_reader *r, const wds_sample **out) {
  int rc;
  *out = NULL;
  r->err.msg[0] = '\0';
  for (;;) {
    if (wds__cancelled(r->cancel)) /* before moving on to another shard */
      return wds__fail(&r->err, WDS_ERR_CANCELLED, "cancelled");
    if (r->shard_done) {
      r->stats.tar_bytes += r->tar ? wds__tar_offset(r->tar) : 0;
      close_shard(r);
      r->shard_done = 0;
    }
    if (!r->stream) {
      if (r->next_shard >= r->urls.count)
        return WDS_EOF;
      r->shard = r->next_shard++;
      rc =
          wds__stream_open(r->urls.urls[r->shard], &r->io, &r->stream, &r->err);
      if (rc == WDS_OK)
        rc = wds__tar_open(r->stream, r->cfg.buffer_size_bytes,
                           window_limit(&r->cfg), &r->tar, &r->err);
      if (rc != WDS_OK)
        return fail_shard(r, rc);
      r->stats.shards++;
    }
    if (!r->has_pending) {
      rc = read_pending(r);
      if (rc == WDS_EOF) {
        rc = end_shard(r);
        if (rc != WDS_OK)
          return rc;
        continue;
      }
      if (rc != WDS_OK)
        return fail_shard(r, rc);
    }
    /* Start a sample with the pending member; nothing before its data is
     * needed any more. The key is the arena's first string. */
    r->arena_len = 0;
    r->slot_count = 0;
    r->sample_bytes = 0;
    r->sample_end = 0;
    r->sample_unchecked = wds__stream_unchecked_frames(r->stream);
    r->sample_unchecked_now = wds__stream_unchecked_now(r->stream);
    r->window_held = 0;
    size_t key_off;
    wds__tar_keep_from(r->tar, r->pending.data_voff);
    if (arena_add(r, r->pending_name, r->pending_key_len, &key_off) != WDS_OK)
      return fail_shard(r, wds__fail(&r->err, WDS_ERR_NOMEM, "out of memory"));
    r->key_len = r->pending_key_len;
    rc = take_pending(r);
    if (rc != WDS_OK)
      return fail_shard(r, rc);
    for (;;) {
      rc = read_pending(r);
      if (rc == WDS_EOF) {
        /* The shard is complete, so its last sample is whole (and every
         * check passed). */
        rc = end_shard(r);
        if (rc != WDS_OK)
          return rc;
        count_unverified(r, 1);
        return finish_sample(r, out);
      }
      if (rc != WDS_OK)
        return fail_shard(r, rc);
      if (!same_key(r)) {
        rc = settle_sample(r);
        if (rc != WDS_OK)
          return fail_shard(r, rc);
        return finish_sample(r, out);
      }
      if (r->slot_count >= r->cfg.max_fields)
        return fail_shard(
            r, wds__fail(&r->err, WDS_ERR_LIMIT,
                         "member \"%s\" at offset %llu: sample \"%s\" has "
                         "more than %zu fields (max_fields)",
                         r->pending.name,
                         (unsigned long long)r->pending.header_offset, r->arena,
                         r->cfg.max_fields));
      if (has_ext(r, r->pending_name + r->pending_ext_off)) {
        wds__fail(&r->err, WDS_ERR_DUPLICATE,
                  "member \"%s\" at offset %llu: duplicate extension \"%s\" "
                  "in sample \"%s\"",
                  r->pending.name, (unsigned long long)r->pending.header_offset,
                  r->pending_name + r->pending_ext_off, r->arena);
        if (skip_rest_of_key(r) != WDS_OK)
          return fail_shard(r,
                            wds__fail(&r->err, WDS_ERR_NOMEM, "out of memory"));
        return fail_shard(r, WDS_ERR_DUPLICATE);
      }
      rc = take_pending(r);
      if (rc != WDS_OK)
        return fail_shard(r, rc);
    }
  }
}

int wds_reader_next(wds_reader *r, const wds_sample **out) {
  if (!r || !out)
    return wds__last_fail(WDS_ERR_INVALID, "wds_reader_next: %s is NULL",
                          r ? "out" : "the reader");
  return wds__last_set(wds__reader_next(r, out), r->err.msg);
}
