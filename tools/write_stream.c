/* write_stream.c — `wds write SPEC...`: re-sharding existing shards or a
 * tar stream (tools/cmd_write.c has the options and the shared set-up).
 *
 * Stream inputs are read with the public reader and passed through without
 * a copy; with --shuffle, through a bounded buffer of copied samples
 * (--shuffle-buffer N): once it is full each new sample replaces a randomly
 * chosen one, which is written; the rest is shuffled and written at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "reader_opts.h"
#include "signals.h"
#include "util.h"
#include "wds/reader.h"
#include "wds/writer.h"
#include "write.h"

/* ---- stream input ---- */

/* A sample copied out of the reader: one allocation. */
typedef struct held {
  char *key;
  size_t count;
  wds_writer_field *f;
} held;

static held *hold(const wds_sample *smp) {
  size_t key_len = strlen(smp->key);
  size_t bytes =
      sizeof(held) + smp->field_count * sizeof(wds_writer_field) + key_len + 1;
  for (size_t i = 0; i < smp->field_count; i++)
    bytes += strlen(smp->fields[i].name) - key_len + smp->fields[i].size_bytes;
  held *h = malloc(bytes);
  if (!h)
    return NULL;
  h->f = (wds_writer_field *)(h + 1);
  h->count = smp->field_count;
  char *p = (char *)(h->f + h->count);
  h->key = p;
  memcpy(p, smp->key, key_len + 1);
  p += key_len + 1;
  for (size_t i = 0; i < h->count; i++) {
    const wds_field *sf = &smp->fields[i];
    const char *ext = sf->name + key_len + 1; /* as found, not lower-cased */
    size_t elen = strlen(ext);
    memcpy(p, ext, elen + 1);
    h->f[i].ext = p;
    p += elen + 1;
    if (sf->size_bytes)
      memcpy(p, sf->data, sf->size_bytes);
    h->f[i].data = p;
    h->f[i].size_bytes = sf->size_bytes;
    p += sf->size_bytes;
  }
  return h;
}

int run_stream(char **specs, int nspecs, const write_opts *o, wds_writer *w,
               progress *pg) {
  int status = 1;
  wds_url_list urls = {0};
  wds_reader *r = NULL;
  held **buf = NULL;
  size_t nbuf = 0;
  wds_writer_field *f = NULL;
  size_t f_cap = 0;
  uint64_t rng = o->seed;
  if (tool_reader_expand(&o->ro, "write", specs, nspecs, &urls) != 0)
    goto done;
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  tool_reader_opts_apply(&o->ro, &rc);
  rc.urls = (const char *const *)urls.urls;
  rc.url_count = urls.count;
  if (wds_reader_open(&rc, &r) != WDS_OK) {
    fprintf(stderr, "wds write: %s\n", wds_last_error());
    goto done;
  }
  tool_signals_reader(r);
  if (o->shuffle) {
    buf = calloc(o->shuffle_buffer, sizeof *buf);
    if (!buf) {
      fprintf(stderr, "wds write: out of memory (shuffle buffer)\n");
      goto done;
    }
  }
  const wds_sample *smp;
  int rrc;
  while ((rrc = wds_reader_next(r, &smp)) == WDS_OK) {
    if (o->shuffle) {
      held *h = hold(smp);
      if (!h) {
        fprintf(stderr, "wds write: out of memory (shuffle buffer)\n");
        goto done;
      }
      if (nbuf < o->shuffle_buffer) {
        buf[nbuf++] = h;
        continue;
      }
      size_t j = (size_t)rand_below(&rng, nbuf);
      held *out = buf[j];
      buf[j] = h;
      int wrc = wds_writer_write_sample(w, out->key, out->f, out->count);
      free(out);
      if (wrc != WDS_OK) {
        writer_failed();
        goto done;
      }
    } else {
      size_t key_len = strlen(smp->key);
      if (wds__grow_at(&f, &f_cap, smp->field_count, sizeof *f, 64) != 0) {
        fprintf(stderr, "wds write: out of memory\n");
        goto done;
      }
      for (size_t i = 0; i < smp->field_count; i++) {
        f[i].ext = smp->fields[i].name + key_len + 1;
        f[i].data = smp->fields[i].data;
        f[i].size_bytes = smp->fields[i].size_bytes;
      }
      if (wds_writer_write_sample(w, smp->key, f, smp->field_count) != WDS_OK) {
        writer_failed();
        goto done;
      }
    }
    progress_update(pg, w, 0);
  }
  if (rrc == WDS_ERR_CANCELLED && tool_signal_caught())
    goto done; /* the caller says so */
  if (rrc != WDS_EOF) {
    fprintf(stderr, "wds write: %s\n", wds_last_error());
    goto done;
  }
  /* Drain the buffer in a shuffled order. */
  for (size_t i = nbuf; i > 1; i--) {
    size_t j = (size_t)rand_below(&rng, i);
    held *t = buf[i - 1];
    buf[i - 1] = buf[j];
    buf[j] = t;
  }
  for (size_t i = 0; i < nbuf && !tool_signal_caught(); i++) {
    if (wds_writer_write_sample(w, buf[i]->key, buf[i]->f, buf[i]->count) !=
        WDS_OK) {
      writer_failed();
      goto done;
    }
    progress_update(pg, w, 0);
  }
  status = 0;
done:
  if (r) {
    wds_reader_stats st;
    wds_reader_stats_get(r, &st);
    tool_cache_note("wds write", o->ro.cfg.cache_dir, st.cache_errors);
  }
  for (size_t i = 0; i < nbuf; i++)
    free(buf[i]);
  free(buf);
  free(f);
  tool_signals_reader(NULL);
  wds_reader_close(r);
  wds_url_list_free(&urls);
  return status;
}
