/* write_manifest.c — `wds write --manifest FILE`: one sample per line of
 * JSON (tools/cmd_write.c has the options and the shared set-up).
 *
 * The manifest is parsed line by line into records with base/json's strict
 * reader before anything is written (a bad line is reported before any
 * shard exists). A manifest's string values are
 * resolved to files before anything is written too (resolve_files): a
 * path-like value that names no file is an error naming its line. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/mem.h"
#include "base/text.h"
#include "pipeline/decoders.h"
#include "signals.h"
#include "util.h"
#include "wds/writer.h"
#include "write.h"

/* Reads all of f into a malloc'd buffer (NUL-terminated); NULL on error. */
static char *slurp(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0, k;
  char *d = malloc(cap);
  while (d && (k = fread(d + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (n + 1 == cap && wds__grow_at(&d, &cap, cap * 2, 1, 64) != 0) {
      free(d);
      d = NULL;
    }
  }
  if (d && ferror(f)) {
    free(d);
    d = NULL;
  }
  if (d) {
    d[n] = '\0';
    *len = n;
  }
  return d;
}

/* Opens --manifest without blocking in open(2), which a FIFO without a
 * writer would do for good (restarted after a signal); a FIFO is then
 * waited on until it has data or its end, --read-timeout (when given) or a
 * signal. NULL with errno set (ETIMEDOUT, EINTR) on failure. */
static FILE *open_manifest(const write_opts *o) {
  int fd = open(o->manifest, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  int fl = fd < 0 ? -1 : fcntl(fd, F_GETFL);
  struct stat st;
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
      fstat(fd, &st) != 0)
    goto fail;
  for (int waited = 0; S_ISFIFO(st.st_mode);) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, 100);
    if (r > 0)
      break;
    if (tool_signal_caught()) {
      errno = EINTR;
      goto fail;
    }
    waited += 100;
    if (o->ro.cfg.read_timeout_ms > 0 && waited >= o->ro.cfg.read_timeout_ms) {
      errno = ETIMEDOUT;
      goto fail;
    }
  }
  FILE *f = fdopen(fd, "rb");
  if (f)
    return f;
fail:;
  int e = errno;
  if (fd >= 0)
    close(fd);
  errno = e;
  return NULL;
}

/* ---- manifest input ---- */

/* A field of a manifest record: strings live in the manifest arena. */
typedef struct mfield {
  size_t ext_off;
  size_t val_off, val_len;
  int maybe_file; /* a JSON string: read from the file it names, if any */
  int is_file;    /* it names a regular file (resolve_files) */
} mfield;

typedef struct mrecord {
  size_t key_off;
  size_t first, count; /* in the field array */
  size_t line;
} mrecord;

typedef struct manifest {
  char *arena;
  size_t arena_len, arena_cap;
  mfield *f;
  size_t nf, f_cap;
  mrecord *r;
  size_t nr, r_cap;
} manifest;

static int arena_put(manifest *m, const void *d, size_t n) {
  if (n == 0)
    return 0; /* (an empty arena may still be NULL) */
  if (wds__grow_at(&m->arena, &m->arena_cap, m->arena_len + n, 1, 64) != 0)
    return -1;
  memcpy(m->arena + m->arena_len, d, n);
  m->arena_len += n;
  return 0;
}

/* A JSON string at the cursor, unescaped into the arena followed by a NUL;
 * *off and *len locate it (len without the NUL). */
static int arena_string(wds__json *j, manifest *m, size_t *off, size_t *len) {
  wds__json_ws(j);
  size_t start = j->pos;
  int rc = wds__json_string(j, NULL, 0, len);
  if (rc != WDS_OK)
    return rc;
  if (wds__grow_at(&m->arena, &m->arena_cap, m->arena_len + *len + 1, 1, 64) !=
      0)
    return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
  j->pos = start;
  *off = m->arena_len;
  if ((rc = wds__json_string(j, m->arena + *off, *len, len)) != WDS_OK)
    return rc;
  m->arena[*off + *len] = '\0';
  m->arena_len += *len + 1;
  return WDS_OK;
}

static int is_dunder(const char *s, size_t n) {
  return n >= 4 && s[0] == '_' && s[1] == '_' && s[n - 1] == '_' &&
         s[n - 2] == '_';
}

/* One line: a flat JSON object, read with base/json's strict reader.
 * Appends a record (and its fields). */
static int parse_record(wds__json *j, manifest *m, size_t line) {
  size_t first = m->nf, key_off = 0;
  int have_key = 0, more = 1, rc;
  wds__json_ws(j);
  size_t obj_at = j->pos;
  if ((rc = wds__json_expect(j, '{', "expected a JSON object")) != WDS_OK)
    return rc;
  if (wds__json_peek(j) == '}') {
    j->pos++;
    more = 0;
  }
  while (more) {
    size_t name_off, name_len;
    wds__json_ws(j);
    size_t name_at = j->pos;
    if ((rc = arena_string(j, m, &name_off, &name_len)) != WDS_OK ||
        (rc = wds__json_expect(j, ':', "expected ':' after an object key")) !=
            WDS_OK)
      return rc;
    const char *name = m->arena + name_off;
    int is_key = name_len == 7 && memcmp(name, "__key__", 7) == 0;
    /* memchr: a NUL from "\u0000" would cut the name short. */
    if (memchr(name, '\0', name_len))
      return wds__json_fail(j, name_at, "a field name contains NUL");
    for (size_t i = first; i < m->nf; i++)
      if (strcmp(m->arena + m->f[i].ext_off, name) == 0)
        return wds__json_fail(j, name_at, "a field name appears twice");
    if (is_key && have_key)
      return wds__json_fail(j, name_at, "__key__ appears twice");
    int c = wds__json_peek(j);
    size_t val_at = j->pos, val_off = 0, val_len = 0;
    int maybe_file = 0, omit = 0;
    if (c == '"') {
      if ((rc = arena_string(j, m, &val_off, &val_len)) != WDS_OK)
        return rc;
      maybe_file = 1;
    } else if (c == 'n') {
      if ((rc = wds__json_literal(j, "null")) != WDS_OK)
        return rc;
      omit = 1;
    } else {
      /* numbers, true, false, objects and arrays: their text as written */
      if ((rc = wds__json_skip(j, 2)) != WDS_OK)
        return rc;
      val_len = j->pos - val_at;
      val_off = m->arena_len;
      if (arena_put(m, j->s + val_at, val_len) != 0 || arena_put(m, "", 1) != 0)
        return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
    }
    if (is_key) {
      if (c != '"')
        return wds__json_fail(j, val_at, "__key__ must be a string");
      if (memchr(m->arena + val_off, '\0', val_len))
        return wds__json_fail(j, val_at, "__key__ contains NUL");
      have_key = 1;
      key_off = val_off;
    } else if (!omit && !is_dunder(m->arena + name_off, name_len)) {
      /* (m->arena, not name: parsing the value may have moved the arena) */
      if (wds__grow_at(&m->f, &m->f_cap, m->nf + 1, sizeof *m->f, 64) != 0)
        return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
      m->f[m->nf].ext_off = name_off;
      m->f[m->nf].val_off = val_off;
      m->f[m->nf].val_len = val_len;
      m->f[m->nf].maybe_file = maybe_file;
      m->f[m->nf].is_file = 0;
      m->nf++;
    }
    if ((rc = wds__json_next(j, '}', &more)) != WDS_OK)
      return rc;
  }
  if ((rc = wds__json_end(j, "the object")) != WDS_OK)
    return rc;
  if (!have_key)
    return wds__json_fail(j, obj_at, "no \"__key__\"");
  if (m->nf == first)
    return wds__json_fail(j, obj_at, "no fields");
  if (wds__grow_at(&m->r, &m->r_cap, m->nr + 1, sizeof *m->r, 64) != 0)
    return wds__fail(j->e, WDS_ERR_NOMEM, "out of memory");
  m->r[m->nr].key_off = key_off;
  m->r[m->nr].first = first;
  m->r[m->nr].count = m->nf - first;
  m->r[m->nr].line = line;
  m->nr++;
  return WDS_OK;
}

/* Does s end with "." + e[0..n) (ASCII case-insensitive)? */
static int ends_with_ext(const char *s, size_t len, const char *e, size_t n) {
  return n > 0 && len > n && s[len - n - 1] == '.' &&
         strncasecmp(s + len - n, e, n) == 0;
}

/* Does the string value of field ext look like a path: a '/' in it, or the
 * extension of its field at its end ("img.jpg" for jpg; for "seg.png",
 * ".seg.png" or ".png"; jpg and jpeg for each other)? */
static int looks_like_path(const char *val, size_t len, const char *ext) {
  if (memchr(val, '/', len))
    return 1;
  const char *dot = strrchr(ext, '.');
  const char *tail = dot ? dot + 1 : ext;
  const char *alias = wds__ext_alias(tail, strlen(tail));
  return ends_with_ext(val, len, ext, strlen(ext)) ||
         ends_with_ext(val, len, tail, strlen(tail)) ||
         (alias && ends_with_ext(val, len, alias, strlen(alias)));
}

/* Before anything is written: marks the string values that name a regular
 * file (relative to dirfd); a value that looks like a path but names none
 * is an error naming the manifest line (a typo would otherwise be stored
 * as the text of the path). */
static int resolve_files(manifest *m, int dirfd, const char *dir,
                         const char *name) {
  for (size_t k = 0; k < m->nr; k++) {
    const mrecord *r = &m->r[k];
    for (size_t i = 0; i < r->count; i++) {
      mfield *mf = &m->f[r->first + i];
      const char *val = m->arena + mf->val_off;
      const char *ext = m->arena + mf->ext_off;
      if (!mf->maybe_file || mf->val_len == 0 || memchr(val, '\0', mf->val_len))
        continue;
      struct stat st;
      int found = fstatat(dirfd, val, &st, 0) == 0;
      int err = errno;
      if (found && S_ISREG(st.st_mode)) {
        mf->is_file = 1;
        continue;
      }
      if (!looks_like_path(val, mf->val_len, ext))
        continue;
      tool_eprintf("wds write: manifest %s, line %zu: field \"%s\": \"%.300s\" "
                   "looks like a path but %s (relative to %s); --inline keeps "
                   "every string as text\n",
                   name, r->line, ext, val,
                   found ? "is not a regular file" : "names no file", dir);
      if (!found && err != ENOENT && err != ENOTDIR)
        tool_eprintf("wds write: (%s/%.300s: %s)\n", dir, val, strerror(err));
      return -1;
    }
  }
  return 0;
}

int run_manifest(const write_opts *o, wds_writer *w, progress *pg) {
  int status = 1;
  manifest m = {0};
  scratch s = {0};
  span *sp = NULL;
  char *text = NULL, *dir = NULL;
  int dirfd = -1;
  size_t len = 0;
  const char *name = strcmp(o->manifest, "-") == 0 ? "stdin" : o->manifest;
  FILE *f = strcmp(o->manifest, "-") == 0 ? stdin : open_manifest(o);
  if (!f && errno == ETIMEDOUT) {
    fprintf(stderr,
            "wds write: manifest %s: no data for %.1f s (a FIFO without a "
            "writer; the read timeout, --read-timeout)\n",
            o->manifest, (double)o->ro.cfg.read_timeout_ms / 1000);
    goto done;
  }
  if (!f) {
    fprintf(stderr, "wds write: cannot open manifest %s: %s\n", o->manifest,
            strerror(errno));
    goto done;
  }
  text = slurp(f, &len);
  if (f != stdin)
    fclose(f);
  if (!text) {
    fprintf(stderr, "wds write: cannot read manifest %s\n", name);
    goto done;
  }
  /* File values are relative to the manifest's directory (stdin: here). */
  dir = strdup(f == stdin ? "." : o->manifest);
  if (!dir) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  if (f != stdin) {
    char *slash = strrchr(dir, '/');
    if (!slash)
      strcpy(dir, ".");
    else if (slash == dir)
      dir[1] = '\0';
    else
      *slash = '\0';
  }
  dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) {
    fprintf(stderr, "wds write: cannot open directory %s: %s\n", dir,
            strerror(errno));
    goto done;
  }
  size_t line = 0;
  for (const char *p = text; p < text + len;) {
    const char *nl = memchr(p, '\n', (size_t)(text + len - p));
    const char *e = nl ? nl : text + len;
    line++;
    const char *q = p;
    while (q < e && (*q == ' ' || *q == '\t' || *q == '\r'))
      q++;
    if (q < e) {
      wds__err err = {""};
      wds__json j;
      wds__json_init(&j, p, (size_t)(e - p), 0, &err);
      j.line = line;
      if (parse_record(&j, &m, line) != WDS_OK) {
        /* "line L, column C: what" (out of memory has no place) */
        if (strncmp(err.msg, "line ", 5) == 0)
          fprintf(stderr, "wds write: manifest %s, %s\n", name, err.msg);
        else
          fprintf(stderr, "wds write: manifest %s, line %zu: %s\n", name, line,
                  err.msg);
        goto done;
      }
    }
    p = nl ? nl + 1 : e;
  }
  if (!o->inline_values && resolve_files(&m, dirfd, dir, name) != 0)
    goto done;
  sp = malloc((m.nr ? m.nr : 1) * sizeof *sp);
  if (!sp) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  for (size_t i = 0; i < m.nr; i++) {
    sp[i].first = i;
    sp[i].count = 1;
    sp[i].label = 0;
  }
  if (o->shuffle)
    shuffle_spans(sp, m.nr, o->seed);
  pg->total = m.nr;
  for (size_t k = 0; k < m.nr && !tool_signal_caught(); k++) {
    const mrecord *r = &m.r[sp[k].first];
    size_t used = 0;
    if (scratch_fields(&s, r->count, 0) != 0)
      goto done;
    /* data pointers: into s.data for files (set after reading, as the
     * buffer may move), into the arena for values (s.offs = SIZE_MAX). */
    for (size_t i = 0; i < r->count; i++) {
      const mfield *mf = &m.f[r->first + i];
      const char *val = m.arena + mf->val_off;
      s.f[i].ext = m.arena + mf->ext_off;
      s.offs[i] = SIZE_MAX;
      s.f[i].size_bytes = mf->val_len;
      if (mf->is_file && read_file_at(dirfd, dir, val, &s, &used, &s.offs[i],
                                      &s.f[i].size_bytes) != 0) {
        fprintf(stderr, "wds write: (manifest %s, line %zu)\n", name, r->line);
        goto done;
      }
    }
    for (size_t i = 0; i < r->count; i++)
      s.f[i].data = s.offs[i] == SIZE_MAX
                        ? (const void *)(m.arena + m.f[r->first + i].val_off)
                        : (const void *)(s.data + s.offs[i]);
    if (wds_writer_write_sample(w, m.arena + r->key_off, s.f, r->count) !=
        WDS_OK) {
      fprintf(stderr, "wds write: manifest %s, line %zu: %s\n", name, r->line,
              wds_last_error());
      single_file_hint(wds_last_error());
      goto done;
    }
    progress_update(pg, w, 0);
  }
  status = 0;
done:
  if (dirfd >= 0)
    close(dirfd);
  free(dir);
  free(text);
  free(sp);
  free(m.arena);
  free(m.f);
  free(m.r);
  scratch_free(&s);
  return status;
}
