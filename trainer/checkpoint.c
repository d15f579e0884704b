/* checkpoint.c — atomic checkpoint files (wds_outfile: temporary name +
 * fsync + rename) and the learning-rate schedule. The file is built in
 * memory and checked as a whole on load, so a truncated or altered file is
 * always an error before any of it is used. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer/checkpoint.h"
#include "wds/outfile.h"

#define TR_MAGIC "WDSTRAIN"
#define TR_HEADER_BYTES (8 + 4 + 4 + 4 * (TR_MAX_LAYERS + 1) + 8 * 7)

static void put_u32(unsigned char **p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    *(*p)++ = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char **p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    *(*p)++ = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char **p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)(*p)[i] << (8 * i);
  *p += 4;
  return v;
}
static uint64_t get_u64(const unsigned char **p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)(*p)[i] << (8 * i);
  *p += 8;
  return v;
}
/* Floats as their IEEE bits, little-endian. */
static void put_floats(unsigned char **p, const float *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &f[i], 4);
    put_u32(p, u);
  }
}
static void get_floats(const unsigned char **p, float *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = get_u32(p);
    memcpy(&f[i], &u, 4);
  }
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

uint64_t tr_fnv1a(uint64_t h, const void *data, size_t size) {
  const unsigned char *p = data;
  for (size_t i = 0; i < size; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

int tr_checkpoint_save(const char *path, const tr_checkpoint *c, wds__err *e) {
  int rc = WDS_ERR_IO;
  size_t slen = c->loader_state ? strlen(c->loader_state) : 0;
  size_t extra = c->loader_state       ? 4 + 4 * c->rank_sizes_count + 16 + slen
                 : c->rank_sizes_count ? 4 + 4 * c->rank_sizes_count
                                       : 0;
  size_t size = TR_HEADER_BYTES + 8 * c->param_count + extra + 8;
  unsigned char *buf = malloc(size), *p = buf;
  wds_outfile *f = NULL;
  if (!buf) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "checkpoint %s: out of memory", path);
    goto done;
  }
  memcpy(p, TR_MAGIC, 8);
  p += 8;
  put_u32(&p, c->loader_state ? 3 : c->rank_sizes_count ? 2 : 1);
  put_u32(&p, (uint32_t)c->layers);
  for (int i = 0; i <= TR_MAX_LAYERS; i++)
    put_u32(&p, i <= c->layers ? (uint32_t)c->dims[i] : 0);
  put_u64(&p, c->param_count);
  put_u64(&p, c->step);
  put_u64(&p, c->total_steps);
  put_u64(&p, c->loader_epoch);
  put_u64(&p, c->loader_batches);
  put_u64(&p, c->fingerprint);
  put_u64(&p, c->seed);
  put_floats(&p, c->weights, c->param_count);
  put_floats(&p, c->momentum, c->param_count);
  if (c->rank_sizes_count || c->loader_state) {
    put_u32(&p, (uint32_t)c->rank_sizes_count);
    for (size_t i = 0; i < c->rank_sizes_count; i++)
      put_u32(&p, c->rank_sizes[i]);
  }
  if (c->loader_state) {
    put_u32(&p, c->world);
    put_u64(&p, c->elastic_fingerprint);
    put_u32(&p, (uint32_t)slen);
    memcpy(p, c->loader_state, slen);
    p += slen;
  }
  put_u64(&p, tr_fnv1a(TR_FNV_INIT, buf, (size_t)(p - buf)));

  /* The processes of a multi-node job may write the same path on a shared
   * file system: wds_outfile creates its temporary name exclusively. */
  if (wds_outfile_open(path, 0, &f) != WDS_OK) {
    rc = wds__fail(e, WDS_ERR_IO, "checkpoint: %s", wds_last_error());
    goto done;
  }
  if (write_all(wds_outfile_fd(f), buf, size) != 0) {
    rc = wds__fail(e, WDS_ERR_IO, "checkpoint %s: %s", path, strerror(errno));
    goto done;
  }
  if (wds_outfile_commit(f) != WDS_OK) {
    rc = wds__fail(e, WDS_ERR_IO, "checkpoint: %s", wds_last_error());
    goto done;
  }
  rc = WDS_OK;
done:
  wds_outfile_close(f); /* removes the temporary file after an error */
  free(buf);
  return rc;
}

int tr_checkpoint_load(const char *path, tr_checkpoint *c, wds__err *e) {
  int rc = WDS_ERR_CORRUPT;
  unsigned char *buf = NULL;
  memset(c, 0, sizeof *c);
  /* O_NONBLOCK: a FIFO without a writer would block open(2) for good; it
   * is refused below, as anything that is not a regular file is. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  FILE *f = NULL;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    rc = wds__fail(e, WDS_ERR_OPEN, "checkpoint %s: %s", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return rc;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return wds__fail(e, WDS_ERR_OPEN,
                     "checkpoint %s: not a regular file (a %s): --resume "
                     "reads a checkpoint file that wds-train wrote",
                     path,
                     S_ISFIFO(st.st_mode)   ? "FIFO"
                     : S_ISDIR(st.st_mode)  ? "directory"
                     : S_ISCHR(st.st_mode)  ? "character device"
                     : S_ISBLK(st.st_mode)  ? "block device"
                     : S_ISSOCK(st.st_mode) ? "socket"
                                            : "special file");
  }
  if (!(f = fdopen(fd, "rb"))) {
    close(fd);
    return wds__fail(e, WDS_ERR_NOMEM, "checkpoint %s: out of memory", path);
  }
  size_t size = (size_t)st.st_size;
  if (size < TR_HEADER_BYTES + 8) {
    rc = wds__fail(e, WDS_ERR_TRUNCATED,
                   "checkpoint %s: too short (%zu bytes) to be a wds-train "
                   "checkpoint",
                   path, size);
    goto done;
  }
  /* The header first: a file that is not a checkpoint, or whose size does
   * not match its header, is refused before the rest is read (nothing is
   * allocated for a file's claimed size). */
  unsigned char head[TR_HEADER_BYTES];
  if (fread(head, 1, sizeof head, f) != sizeof head) {
    rc = wds__fail(e, WDS_ERR_IO, "checkpoint %s: read failed", path);
    goto done;
  }
  const unsigned char *p = head;
  if (memcmp(p, TR_MAGIC, 8) != 0) {
    rc = wds__fail(e, WDS_ERR_CORRUPT,
                   "checkpoint %s: not a wds-train checkpoint (bad magic)",
                   path);
    goto done;
  }
  p += 8;
  uint32_t version = get_u32(&p);
  if (version < 1 || version > TR_CHECKPOINT_VERSION) {
    rc = wds__fail(e, WDS_ERR_FORMAT,
                   "checkpoint %s: version %u (this wds-train reads versions "
                   "1 to %d)",
                   path, version, TR_CHECKPOINT_VERSION);
    goto done;
  }
  uint32_t layers = get_u32(&p);
  if (layers < 1 || layers > TR_MAX_LAYERS) {
    rc = wds__fail(e, WDS_ERR_CORRUPT, "checkpoint %s: bad layer count %u",
                   path, layers);
    goto done;
  }
  c->layers = (int)layers;
  for (int i = 0; i <= TR_MAX_LAYERS; i++) {
    uint32_t d = get_u32(&p);
    if (i <= c->layers && (d < 1 || d > (1u << 24))) {
      rc = wds__fail(e, WDS_ERR_CORRUPT, "checkpoint %s: bad layer size %u",
                     path, d);
      goto done;
    }
    c->dims[i] = i <= c->layers ? (int)d : 0;
  }
  tr_model_config m = {.layers = c->layers};
  memcpy(m.dims, c->dims, sizeof m.dims);
  size_t expect_params = tr_model_param_count(&m);
  c->param_count = (size_t)get_u64(&p);
  if (c->param_count != expect_params) {
    rc =
        wds__fail(e, WDS_ERR_CORRUPT,
                  "checkpoint %s: %zu parameters, but its layer sizes make %zu",
                  path, c->param_count, expect_params);
    goto done;
  }
  size_t base = TR_HEADER_BYTES + 8 * c->param_count + 8;
  if (version == 1 ? size != base : size < base + 4) {
    rc = wds__fail(
        e, WDS_ERR_TRUNCATED,
        "checkpoint %s: %zu bytes, expected %s%zu (truncated or extended)",
        path, size, version == 1 ? "" : "more than ",
        version == 1 ? base : base + 3);
    goto done;
  }
  if (version == 3 &&
      size - base > 4 + 4 * (size_t)TR_CHECKPOINT_MAX_RANK_SIZES + 16 +
                        TR_CHECKPOINT_MAX_STATE) {
    rc = wds__fail(e, WDS_ERR_TRUNCATED,
                   "checkpoint %s: %zu bytes, more than a version 3 file "
                   "holds (extended)",
                   path, size);
    goto done;
  }
  if (version == 2 && size - base - 4 > 4 * TR_CHECKPOINT_MAX_RANK_SIZES) {
    rc = wds__fail(e, WDS_ERR_TRUNCATED,
                   "checkpoint %s: %zu bytes, expected at most %zu (at most "
                   "%d per-rank batch sizes; extended)",
                   path, size, base + 4 + 4 * TR_CHECKPOINT_MAX_RANK_SIZES,
                   TR_CHECKPOINT_MAX_RANK_SIZES);
    goto done;
  }
  /* The sizes agree: the rest of the file, after the header read. */
  buf = malloc(size);
  if (!buf) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "checkpoint %s: out of memory (%zu bytes)",
                   path, size);
    goto done;
  }
  memcpy(buf, head, sizeof head);
  if (fread(buf + sizeof head, 1, size - sizeof head, f) !=
          size - sizeof head ||
      fgetc(f) != EOF) {
    rc = wds__fail(e, WDS_ERR_IO,
                   "checkpoint %s: read failed (or the file changed while "
                   "read)",
                   path);
    goto done;
  }
  if (version == 3) {
    /* The size its fields give (read before the checksum is checked, each
     * within the file): a file cut short or extended says so. */
    const unsigned char *r = buf + base - 8;
    size_t want = 0;
    uint32_t n = get_u32(&r);
    if (n <= TR_CHECKPOINT_MAX_RANK_SIZES &&
        base - 8 + 4 + 4 * (size_t)n + 16 <= size) {
      r += 4 * (size_t)n + 12;
      want = base + 4 + 4 * (size_t)n + 16 + get_u32(&r);
    }
    if (want != size) {
      rc = wds__fail(e, WDS_ERR_TRUNCATED,
                     "checkpoint %s: %zu bytes, but its fields make %zu "
                     "(truncated or extended)",
                     path, size, want);
      goto done;
    }
  }
  p = buf + (p - head); /* the header's fields that follow, then the rest */
  const unsigned char *q = buf + size - 8;
  uint64_t sum = get_u64(&q);
  if (sum != tr_fnv1a(TR_FNV_INIT, buf, size - 8)) {
    rc = wds__fail(e, WDS_ERR_CORRUPT,
                   "checkpoint %s: checksum mismatch (corrupt file)", path);
    goto done;
  }
  if (version == 3) {
    const unsigned char *r = buf + base - 8;
    size_t rest = size - base - 4;
    uint32_t n = get_u32(&r);
    if (n > TR_CHECKPOINT_MAX_RANK_SIZES || rest < 4 * (size_t)n + 16) {
      rc = wds__fail(e, WDS_ERR_CORRUPT,
                     "checkpoint %s: %u per-rank batch sizes in %zu bytes",
                     path, n, rest);
      goto done;
    }
    rest -= 4 * (size_t)n + 16;
    if (n && !(c->rank_sizes = malloc(n * sizeof *c->rank_sizes))) {
      rc = wds__fail(e, WDS_ERR_NOMEM, "checkpoint %s: out of memory", path);
      goto done;
    }
    for (uint32_t i = 0; i < n; i++)
      c->rank_sizes[i] = get_u32(&r);
    c->rank_sizes_count = n;
    c->world = get_u32(&r);
    c->elastic_fingerprint = get_u64(&r);
    uint32_t slen = get_u32(&r);
    if (slen != rest || memchr(r, 0, slen)) {
      rc = wds__fail(e, WDS_ERR_CORRUPT,
                     "checkpoint %s: a loader state of %u bytes in %zu", path,
                     slen, rest);
      goto done;
    }
    if (!(c->loader_state = malloc((size_t)slen + 1))) {
      rc = wds__fail(e, WDS_ERR_NOMEM, "checkpoint %s: out of memory", path);
      goto done;
    }
    memcpy(c->loader_state, r, slen);
    c->loader_state[slen] = 0;
  }
  if (version == 2) {
    const unsigned char *r = buf + base - 8;
    uint32_t n = get_u32(&r);
    if (n < 1 || (size - base - 4) / 4 != n || (size - base - 4) % 4 != 0) {
      rc = wds__fail(e, WDS_ERR_CORRUPT,
                     "checkpoint %s: %u per-rank batch sizes in %zu bytes",
                     path, n, size - base - 4);
      goto done;
    }
    c->rank_sizes = malloc(n * sizeof *c->rank_sizes);
    if (!c->rank_sizes) {
      rc = wds__fail(e, WDS_ERR_NOMEM, "checkpoint %s: out of memory", path);
      goto done;
    }
    for (uint32_t i = 0; i < n; i++)
      c->rank_sizes[i] = get_u32(&r);
    c->rank_sizes_count = n;
  }
  c->step = get_u64(&p);
  c->total_steps = get_u64(&p);
  c->loader_epoch = get_u64(&p);
  c->loader_batches = get_u64(&p);
  c->fingerprint = get_u64(&p);
  c->seed = get_u64(&p);
  c->weights = malloc(c->param_count * sizeof(float));
  c->momentum = malloc(c->param_count * sizeof(float));
  if (!c->weights || !c->momentum) {
    rc = wds__fail(e, WDS_ERR_NOMEM, "checkpoint %s: out of memory", path);
    goto done;
  }
  get_floats(&p, c->weights, c->param_count);
  get_floats(&p, c->momentum, c->param_count);
  rc = WDS_OK;
done:
  if (rc != WDS_OK)
    tr_checkpoint_free(c);
  free(buf);
  fclose(f);
  return rc;
}

void tr_checkpoint_free(tr_checkpoint *c) {
  free(c->weights);
  free(c->momentum);
  free(c->rank_sizes);
  free(c->loader_state);
  c->loader_state = NULL;
  c->weights = c->momentum = NULL;
  c->rank_sizes = NULL;
  c->rank_sizes_count = 0;
}

double tr_lr_at(uint64_t step, uint64_t total, uint64_t warmup, double base) {
  if (step < warmup)
    return base * (double)(step + 1) / (double)warmup;
  if (total <= warmup)
    return base;
  double progress = (double)(step - warmup) / (double)(total - warmup);
  if (progress > 1.0)
    progress = 1.0;
  return base * 0.5 * (1.0 + cos(M_PI * progress));
}
