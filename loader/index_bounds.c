/* index_bounds.c — how many samples a shard can hold: the bound that
 * keeps an untrusted count from sizing anything (see index.h,
 * wds__index_check_count). */
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/url.h"
#include "shards/tarfmt.h"

/* How the reader will decode a file, from its first bytes, as
 * shards/stream.c decides it: a plain tar starts with a valid header (or
 * the end-of-archive block). */
enum shard_kind { KIND_OTHER, KIND_PLAIN, KIND_ZSTD, KIND_GZIP };

static enum shard_kind shard_kind(const char *path) {
  uint8_t h[512];
  size_t n = 0;
  /* Never blocks on a FIFO (no writer: open(2) would wait for good), nor
   * takes its bytes: only a regular file is looked into. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return KIND_OTHER;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return KIND_OTHER;
  }
  while (n < sizeof h) {
    ssize_t k = read(fd, h + n, sizeof h - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    n += (size_t)k;
  }
  close(fd);
  int zero = 1;
  for (size_t i = 0; i < n && zero; i++)
    zero = h[i] == 0;
  if (n == sizeof h && (zero || wds__tarfmt_is_header(h)))
    return KIND_PLAIN;
  if (n >= 4) {
    uint32_t m = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                 (uint32_t)h[3] << 24;
    if (m == 0xFD2FB528u || (m & 0xFFFFFFF0u) == 0x184D2A50u)
      return KIND_ZSTD;
  }
  if (n >= 2 && h[0] == 0x1f && h[1] == 0x8b)
    return KIND_GZIP;
  /* xz, bzip2 and the rest; or bytes the reader will refuse. */
  return KIND_OTHER;
}

int wds__index_check_count(const char *url, uint64_t nsamples, wds__err *e) {
  const char *lp = wds__url_local_path(url);
  struct stat st;
  /* A file that is missing or not regular is reported when it is read;
   * a remote one has no size to go by. */
  if (!lp || stat(lp, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (nsamples <= WDS__INDEX_MAX_SAMPLES - 1)
      return WDS_OK;
    return wds__fail(e, WDS_ERR_CORRUPT,
                     "%s: the index gives %llu samples, more than any shard "
                     "can hold (%llu: a sample takes at least 512 bytes of a "
                     "tar stream whose offsets are 64-bit)",
                     url, (unsigned long long)nsamples,
                     (unsigned long long)(WDS__INDEX_MAX_SAMPLES - 1));
  }
  uint64_t size = (uint64_t)st.st_size;
  if (nsamples <= (size >= 1024 ? size / 512 - 1 : 0))
    return WDS_OK; /* fits even as a plain tar: no need to read the file */
  enum shard_kind kind = shard_kind(lp);
  uint64_t ratio = kind == KIND_PLAIN  ? 1
                   : kind == KIND_ZSTD ? 32768
                   : kind == KIND_GZIP ? 1032
                                       : 0;
  uint64_t tar = ratio == 0                  ? UINT64_MAX
                 : size > UINT64_MAX / ratio ? UINT64_MAX
                                             : size * ratio;
  uint64_t most = tar >= 1024 ? tar / 512 - 1 : 0;
  if (nsamples <= most)
    return WDS_OK;
  return wds__fail(
      e, WDS_ERR_CORRUPT,
      "%s: the index gives %llu samples, more than the shard's %llu bytes "
      "can hold (at most %llu %s; re-run wds index)",
      url, (unsigned long long)nsamples, (unsigned long long)size,
      (unsigned long long)most,
      kind == KIND_PLAIN
          ? "in a plain tar: a sample takes a 512-byte header, and the "
            "archive ends with a 512-byte block"
      : kind == KIND_ZSTD
          ? "in zstd data, which decompresses to at most 32768 times its "
            "size, at 512 bytes of tar per sample"
      : kind == KIND_GZIP
          ? "in gzip data, which decompresses to at most 1032 times its "
            "size, at 512 bytes of tar per sample"
          : "in any tar stream, whose offsets are 64-bit, at 512 bytes per "
            "sample");
}
