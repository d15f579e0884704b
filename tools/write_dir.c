/* write_dir.c — `wds write DIR`: every regular file under DIR, grouped
 * into samples by key (tools/cmd_write.c has the options and the shared
 * set-up).
 *
 * The walk collects relative paths into one arena (no allocation per
 * file), sorts them once by (key, extension) in byte order and groups runs
 * of equal keys into samples (spans), all before anything is written.
 *
 * A directory's listing is checked before anything is written
 * (check_samples): members that would collide, samples whose every
 * extension has a '.' (one warning), a class-folder tree without --labels
 * (a note). --labels (label_samples) numbers the first key components as
 * torchvision's ImageFolder does and writes the mapping through a
 * wds_outfile before the first shard. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/mem.h"
#include "base/text.h"
#include "signals.h"
#include "util.h"
#include "wds/outfile.h"
#include "wds/writer.h"
#include "write.h"

/* ---- directory input ---- */

typedef struct dir_entry {
  size_t off;       /* of the relative path in the arena (NUL-terminated) */
  size_t key_off;   /* of the key: off, or (--key-rule last-dot) a copy of
                       the path's first key_len bytes with the '.' of its
                       last component turned into '_' */
  uint32_t len;     /* the path's length */
  uint32_t key_len; /* up to the first (last-dot: last) '.' of the last
                       component; the extension follows at off+key_len+1 */
} dir_entry;

typedef struct dir_list {
  char *arena;
  size_t arena_len, arena_cap;
  dir_entry *e;
  size_t n, cap;
  uint64_t no_ext; /* files skipped: no extension */
  int warnings;
  int last_dot; /* --key-rule last-dot */
} dir_list;

static const char *sort_arena; /* qsort has no context argument */

static int cmp_key(const dir_entry *x, const dir_entry *y) {
  const char *px = sort_arena + x->key_off, *py = sort_arena + y->key_off;
  size_t m = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(px, py, m);
  if (c)
    return c;
  if (x->key_len != y->key_len)
    return x->key_len < y->key_len ? -1 : 1;
  return 0;
}

static int cmp_entry(const void *a, const void *b) {
  const dir_entry *x = a, *y = b;
  int c = cmp_key(x, y);
  if (c)
    return c;
  return strcmp(sort_arena + x->off + x->key_len + 1,
                sort_arena + y->off + y->key_len + 1);
}

static void warn(dir_list *l, const char *fmt, const char *path) {
  if (l->warnings++ < 10) {
    char shown[1024]; /* a file's name: nothing a terminal would obey */
    fprintf(stderr, "wds write: ");
    fprintf(stderr, fmt, wds__esc(path, shown, sizeof shown, 0));
    fputc('\n', stderr);
  }
}

static int add_file(dir_list *l, const char *rel, size_t len) {
  const char *slash = memrchr(rel, '/', len);
  size_t c = slash ? (size_t)(slash - rel) + 1 : 0;
  const char *dot = l->last_dot ? memrchr(rel + c, '.', len - c)
                                : memchr(rel + c, '.', len - c);
  if (!dot) {
    if (l->no_ext++ == 0)
      tool_eprintf("wds write: skipping files without an extension, e.g. %s\n",
                   rel);
    return 0;
  }
  if (len > UINT32_MAX) {
    tool_eprintf("wds write: path too long: %.200s\n", rel);
    return -1;
  }
  size_t key_len = (size_t)(dot - rel);
  /* last-dot: the key's dots would end it where a reader splits it */
  int copy = l->last_dot && memchr(rel + c, '.', key_len - c) != NULL;
  size_t need = len + 1 + (copy ? key_len + 1 : 0);
  if (wds__grow_at(&l->arena, &l->arena_cap, l->arena_len + need, 1, 64) != 0 ||
      wds__grow_at(&l->e, &l->cap, l->n + 1, sizeof *l->e, 64) != 0) {
    fprintf(stderr, "wds write: out of memory listing files\n");
    return -1;
  }
  char *a = l->arena + l->arena_len;
  memcpy(a, rel, len + 1);
  l->e[l->n].off = l->arena_len;
  l->e[l->n].key_off = l->arena_len;
  if (copy) {
    char *k = a + len + 1;
    memcpy(k, rel, key_len);
    k[key_len] = '\0';
    for (size_t i = c; i < key_len; i++)
      if (k[i] == '.')
        k[i] = '_';
    l->e[l->n].key_off = l->arena_len + len + 1;
  }
  l->e[l->n].len = (uint32_t)len;
  l->e[l->n].key_len = (uint32_t)key_len;
  l->n++;
  l->arena_len += need;
  return 0;
}

/* Walks root/rel (rel "" for the root) depth first. rel is a buffer of
 * PATH_MAX bytes holding rel_len bytes. */
static int walk(int rootfd, const char *root, char *rel, size_t rel_len,
                dir_list *l) {
  int fd = rel_len ? openat(rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                   : dup(rootfd);
  if (fd < 0) {
    tool_eprintf("wds write: cannot open directory %s/%s: %s\n", root, rel,
                 strerror(errno));
    return -1;
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    tool_eprintf("wds write: cannot read directory %s/%s: %s\n", root, rel,
                 strerror(errno));
    close(fd);
    return -1;
  }
  int rc = 0;
  struct dirent *de;
  errno = 0;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue; /* hidden, ".", ".." */
    size_t nlen = strlen(de->d_name);
    if (rel_len + 1 + nlen + 1 > PATH_MAX) {
      tool_eprintf("wds write: path too long under %s/%s\n", root, rel);
      rc = -1;
      break;
    }
    size_t o = rel_len;
    if (o)
      rel[o++] = '/';
    memcpy(rel + o, de->d_name, nlen + 1);
    size_t len = o + nlen;
    int type = de->d_type;
    struct stat st;
    if (type == DT_UNKNOWN) {
      if (fstatat(rootfd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        tool_eprintf("wds write: cannot stat %s/%s: %s\n", root, rel,
                     strerror(errno));
        rc = -1;
        break;
      }
      type = S_ISLNK(st.st_mode)   ? DT_LNK
             : S_ISDIR(st.st_mode) ? DT_DIR
             : S_ISREG(st.st_mode) ? DT_REG
                                   : DT_UNKNOWN;
    }
    if (type == DT_LNK) {
      if (fstatat(rootfd, rel, &st, 0) != 0)
        warn(l, "skipping %s: broken symlink", rel);
      else if (S_ISREG(st.st_mode))
        rc = add_file(l, rel, len);
      else if (S_ISDIR(st.st_mode))
        warn(l, "not following symlinked directory %s", rel);
      else
        warn(l, "skipping %s: not a regular file", rel);
    } else if (type == DT_DIR) {
      rc = walk(rootfd, root, rel, len, l);
    } else if (type == DT_REG) {
      rc = add_file(l, rel, len);
    } else {
      warn(l, "skipping %s: not a regular file", rel);
    }
    rel[rel_len] = '\0';
    errno = 0;
  }
  if (rc == 0 && errno != 0) {
    tool_eprintf("wds write: cannot read directory %s/%s: %s\n", root, rel,
                 strerror(errno));
    rc = -1;
  }
  closedir(d);
  return rc;
}

/* The length of the first path component of the key of e, or 0 when the
 * key has no '/' (a file directly in DIR). */
static size_t class_len(const dir_list *l, const dir_entry *e) {
  const char *k = l->arena + e->key_off;
  const char *slash = memchr(k, '/', e->key_len);
  return slash ? (size_t)(slash - k) : 0;
}

/* Does the sample have the extension ext (ASCII case-insensitive)? */
static const dir_entry *span_has(const dir_list *l, const span *sp,
                                 const char *ext) {
  for (size_t i = 0; i < sp->count; i++) {
    const dir_entry *e = &l->e[sp->first + i];
    if (strcasecmp(l->arena + e->off + e->key_len + 1, ext) == 0)
      return e;
  }
  return NULL;
}

/* Checks the listing before anything is written: two files that make the
 * same member (--key-rule last-dot: "a.b.jpg" and "a_b.jpg") are an error;
 * samples whose every extension has a '.' ("photo.2019.01.jpg": key
 * "photo", extension "2019.01.jpg") are counted in one warning; a tree of
 * class folders without --labels gets a note. */
static int check_samples(const char *root, const dir_list *l, const span *sp,
                         size_t nsp, const write_opts *o) {
  for (size_t i = 1; i < l->n; i++)
    if (cmp_entry(&l->e[i - 1], &l->e[i]) == 0) {
      tool_eprintf("wds write: %s/%s and %s/%s would both be the member "
                   "\"%.*s.%s\" (--key-rule last-dot turns '.' in a key into "
                   "'_')\n",
                   root, l->arena + l->e[i - 1].off, root,
                   l->arena + l->e[i].off, (int)l->e[i].key_len,
                   l->arena + l->e[i].key_off,
                   l->arena + l->e[i].off + l->e[i].key_len + 1);
      return -1;
    }
  size_t dotted = 0, example = 0;
  for (size_t k = 0; k < nsp && !o->last_dot; k++) {
    size_t all = 1;
    for (size_t i = 0; i < sp[k].count && all; i++) {
      const dir_entry *e = &l->e[sp[k].first + i];
      all = strchr(l->arena + e->off + e->key_len + 1, '.') != NULL;
    }
    if (all && dotted++ == 0)
      example = k;
  }
  if (dotted) {
    const dir_entry *e = &l->e[sp[example].first];
    char exts[256] = "";
    size_t at = 0;
    for (size_t i = 0; i < sp[example].count && i < 3 && at < sizeof exts; i++)
      at += (size_t)snprintf(exts + at, sizeof exts - at, "%s%s", i ? ", " : "",
                             l->arena + e[i].off + e[i].key_len + 1);
    tool_eprintf(
        "wds write: %zu sample%s only extensions with a '.' in them, e.g. "
        "\"%.*s\" with %s%s: a key ends at the first '.' of a file name "
        "(webdataset's rule); if those are separate files, "
        "--key-rule last-dot keys them up to the last '.'\n",
        dotted, dotted == 1 ? " has" : "s have", (int)e->key_len,
        l->arena + e->key_off, exts, sp[example].count > 3 ? ", ..." : "");
  }
  if (!o->labels && nsp > 0) {
    /* ImageFolder: every file in a class folder, two folders or more,
     * no cls field */
    size_t classes = 0;
    int folder_tree = 1;
    for (size_t k = 0; k < nsp && folder_tree; k++) {
      const dir_entry *e = &l->e[sp[k].first];
      size_t c = class_len(l, e);
      folder_tree = c > 0 && !span_has(l, &sp[k], "cls");
      if (folder_tree &&
          (k == 0 || c != class_len(l, &l->e[sp[k - 1].first]) ||
           memcmp(l->arena + e->key_off,
                  l->arena + l->e[sp[k - 1].first].key_off, c) != 0))
        classes++;
    }
    if (folder_tree && classes >= 2)
      tool_eprintf("wds write: %s looks like an ImageFolder tree (%zu class "
                   "folders): --labels adds class ids from the folder names as "
                   ".cls (wds write --help)\n",
                   root, classes);
  }
  return 0;
}

typedef struct class_name {
  const char *s;
  size_t n;
} class_name;

static int cmp_class(const void *a, const void *b) {
  const class_name *x = a, *y = b;
  int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
  return c ? c : x->n < y->n ? -1 : x->n > y->n;
}

/* Writes the class mapping, {"NAME": ID, ...} in id order, to path through
 * a temporary file (wds_outfile). */
static int write_classes(const char *path, const class_name *cl, size_t n,
                         const write_opts *o) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) {
    fprintf(stderr, "wds write: out of memory\n");
    return -1;
  }
  fputs("{", m);
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",\n " : "\n ", m);
    wds__json_write_string(m, cl[i].s, cl[i].n);
    fprintf(m, ": %zu", i);
  }
  fputs("\n}\n", m);
  if (fclose(m) != 0 || !text) {
    free(text);
    fprintf(stderr, "wds write: out of memory\n");
    return -1;
  }
  char err[1100];
  wds_outfile *f = NULL;
  int rc = wds_outfile_open(path, o->no_sync ? WDS_OUTFILE_NO_SYNC : 0, &f);
  if (rc != WDS_OK)
    snprintf(err, sizeof err, "%s", wds_last_error());
  for (size_t at = 0; rc == WDS_OK && at < len;) {
    ssize_t k = write(wds_outfile_fd(f), text + at, len - at);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      snprintf(err, sizeof err, "%s: %s", path,
               k < 0 ? strerror(errno) : "short write");
      rc = WDS_ERR_IO;
    } else {
      at += (size_t)k;
    }
  }
  if (rc == WDS_OK && (rc = wds_outfile_commit(f)) != WDS_OK)
    snprintf(err, sizeof err, "%s", wds_last_error());
  wds_outfile_close(f);
  free(text);
  if (rc != WDS_OK) {
    fprintf(stderr, "wds write: %s\n", err);
    return -1;
  }
  return 0;
}

/* The class mapping --labels made, written once every sample is. */
typedef struct class_map {
  class_name *cl; /* names point into the directory list's arena */
  size_t n;
  char *path;
} class_map;

/* Writes the mapping and says so. */
static int class_map_write(const class_map *m, const write_opts *o) {
  if (write_classes(m->path, m->cl, m->n, o) != 0)
    return -1;
  size_t n = m->n;
  tool_eprintf("wds write: %zu classes (%.*s ... %.*s), mapping in %s%s\n", n,
               n ? (int)m->cl[0].n : 0, n ? m->cl[0].s : "",
               n ? (int)m->cl[n - 1].n : 0, n ? m->cl[n - 1].s : "", m->path,
               o->shuffle ? ""
                          : "; samples are in class order (--shuffle mixes the "
                            "classes across shards)");
  return 0;
}

/* --labels: each sample's class is the first component of its key (the
 * folder under DIR); classes are numbered 0..N-1 in sorted (byte) order of
 * their names, as torchvision's ImageFolder numbers them. The mapping, for
 * --classes (default classes.json beside the shards), goes to *map, which
 * the caller writes once the samples are written (a failed run leaves no
 * mapping behind) and frees. */
static int label_samples(const char *root, const dir_list *l, span *sp,
                         size_t nsp, const write_opts *o, class_map *map) {
  int status = -1;
  class_name *cl = malloc((nsp ? nsp : 1) * sizeof *cl);
  char *path = NULL;
  size_t ncl = 0, loose = 0;
  if (!cl) {
    fprintf(stderr, "wds write: out of memory\n");
    return -1;
  }
  for (size_t k = 0; k < nsp; k++) {
    const dir_entry *e = &l->e[sp[k].first];
    size_t c = class_len(l, e);
    const dir_entry *has = span_has(l, &sp[k], "cls");
    if (has) {
      tool_eprintf("wds write: --labels: %s/%s: the sample already has a cls "
                   "field\n",
                   root, l->arena + has->off);
      goto done;
    }
    if (c == 0) {
      if (loose++ == 0)
        tool_eprintf("wds write: --labels: %s/%s is not in a class folder (the "
                     "class is the folder under %s)\n",
                     root, l->arena + e->off, root);
      continue;
    }
    /* a class's samples are adjacent: they share the prefix "NAME/" */
    const char *name = l->arena + e->key_off;
    if (ncl == 0 || cl[ncl - 1].n != c || memcmp(cl[ncl - 1].s, name, c) != 0)
      cl[ncl++] = (class_name){name, c};
  }
  if (loose) {
    if (loose > 1)
      fprintf(stderr,
              "wds write: --labels: %zu samples are not in a class folder\n",
              loose);
    goto done;
  }
  qsort(cl, ncl, sizeof *cl, cmp_class);
  for (size_t k = 0; k < nsp; k++) {
    const dir_entry *e = &l->e[sp[k].first];
    class_name key = {l->arena + e->key_off, class_len(l, e)};
    const class_name *hit = bsearch(&key, cl, ncl, sizeof *cl, cmp_class);
    sp[k].label = (size_t)(hit - cl);
  }
  if (o->classes) {
    path = strdup(o->classes);
  } else {
    /* beside the shards: the pattern's directory (no conversion in it,
     * checked with the options) */
    const char *slash = strrchr(o->pattern, '/');
    size_t dl = slash ? (size_t)(slash - o->pattern) + 1 : 0;
    path = malloc(dl + sizeof "classes.json");
    if (path) {
      memcpy(path, o->pattern, dl);
      memcpy(path + dl, "classes.json", sizeof "classes.json");
    }
  }
  if (!path) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  *map = (class_map){cl, ncl, path};
  return 0;
done:
  free(cl);
  free(path);
  return status;
}

int run_dir(const char *root, const write_opts *o, wds_writer *w,
            progress *pg) {
  int status = 1;
  dir_list l = {0};
  span *sp = NULL;
  size_t nsp = 0;
  scratch s = {0};
  class_map map = {0};
  char *rel = malloc(PATH_MAX);
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!rel) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  if (rootfd < 0) {
    fprintf(stderr, "wds write: cannot open directory %s: %s\n", root,
            strerror(errno));
    goto done;
  }
  rel[0] = '\0';
  l.last_dot = o->last_dot;
  if (walk(rootfd, root, rel, 0, &l) != 0)
    goto done;
  if (l.warnings > 10)
    fprintf(stderr, "wds write: %d more warnings\n", l.warnings - 10);
  if (l.no_ext > 1)
    fprintf(stderr,
            "wds write: skipped %" PRIu64 " files without an extension\n",
            l.no_ext);
  sort_arena = l.arena;
  qsort(l.e, l.n, sizeof *l.e, cmp_entry);
  sp = malloc((l.n ? l.n : 1) * sizeof *sp);
  if (!sp) {
    fprintf(stderr, "wds write: out of memory\n");
    goto done;
  }
  for (size_t i = 0; i < l.n;) {
    size_t j = i + 1;
    while (j < l.n && cmp_key(&l.e[i], &l.e[j]) == 0)
      j++;
    sp[nsp].first = i;
    sp[nsp].count = j - i;
    sp[nsp].label = 0;
    nsp++;
    i = j;
  }
  if (check_samples(root, &l, sp, nsp, o) != 0)
    goto done;
  if (o->labels && label_samples(root, &l, sp, nsp, o, &map) != 0)
    goto done;
  if (o->shuffle)
    shuffle_spans(sp, nsp, o->seed);
  pg->total = nsp;
  for (size_t k = 0; k < nsp && !tool_signal_caught(); k++) {
    const dir_entry *e = &l.e[sp[k].first];
    size_t n = sp[k].count, used = 0;
    if (scratch_fields(&s, n + (o->labels != 0), e->key_len) != 0)
      goto done;
    for (size_t i = 0; i < n; i++) {
      const char *path = l.arena + e[i].off;
      if (read_file_at(rootfd, root, path, &s, &used, &s.offs[i],
                       &s.f[i].size_bytes) != 0)
        goto done;
      s.f[i].ext = path + e[i].key_len + 1;
    }
    for (size_t i = 0; i < n; i++)
      s.f[i].data = s.data + s.offs[i];
    char label[24];
    if (o->labels) {
      snprintf(label, sizeof label, "%zu", sp[k].label);
      s.f[n].ext = "cls";
      s.f[n].data = label;
      s.f[n].size_bytes = strlen(label);
    }
    memcpy(s.key, l.arena + e->key_off, e->key_len);
    s.key[e->key_len] = '\0';
    if (wds_writer_write_sample(w, s.key, s.f, n + (o->labels != 0)) !=
        WDS_OK) {
      writer_failed();
      goto done;
    }
    progress_update(pg, w, 0);
  }
  if (map.path && !tool_signal_caught() && class_map_write(&map, o) != 0)
    goto done;
  status = 0;
done:
  if (rootfd >= 0)
    close(rootfd);
  free(map.cl);
  free(map.path);
  free(rel);
  free(l.arena);
  free(l.e);
  free(sp);
  scratch_free(&s);
  return status;
}
