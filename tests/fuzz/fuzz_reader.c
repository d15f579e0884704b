/* fuzz_reader.c — libFuzzer target for everything that parses shard bytes:
 * compression detection, zstd/libarchive decompression, the tar parser and
 * sample grouping (and every error message printable: base/text.h). The
 * input is served through a memfd, so the real source
 * path (open/read) is used. Built as a libFuzzer binary with
 * -DWDS_FUZZ=ON (clang), and always as a replay driver (fuzz_replay.c) that
 * runs the seed corpus in the test suite. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/text.h"
#include "pipeline/reader_internal.h"
#include "wds/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("wds-fuzz", MFD_CLOEXEC);
  if (fd < 0)
    return 0;
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(fd, data + off, size - off);
    if (n <= 0)
      break;
    off += (size_t)n;
  }
  char url[64];
  snprintf(url, sizeof url, "/proc/self/fd/%d", fd);
  const char *urls[] = {url};
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  cfg.urls = urls;
  cfg.url_count = 1;
  cfg.buffer_size_bytes = 65536;  /* small: exercise compaction */
  cfg.max_sample_bytes = 8 << 20; /* bounded memory per input */
  wds_reader *r;
  if (wds_reader_open(&cfg, &r) == WDS_OK) {
    const wds_sample *s;
    int rc;
    volatile uint8_t sink = 0;
    /* Continue past recoverable errors, as a skipping loader would; a
     * hard error ends the (single) shard and so the loop. */
    for (int i = 0; i < 100000; i++) {
      rc = wds_reader_next(r, &s);
      if (rc == WDS_EOF)
        break;
      if (rc != WDS_OK) {
        /* every error carries its own message (the reader's; the thread's
         * text would fall back to the status's generic one) */
        if (wds__reader_error(r)[0] == '\0' ||
            strcmp(wds_last_error(), wds_strerror(rc)) == 0)
          __builtin_trap();
        if (wds__esc_needed(wds_last_error(), 0))
          __builtin_trap(); /* printable, whatever a member's name holds */
        continue;
      }
      for (size_t f = 0; f < s->field_count; f++)
        if (s->fields[f].size_bytes)
          sink ^= s->fields[f].data[0] ^
                  s->fields[f].data[s->fields[f].size_bytes - 1];
    }
    (void)sink;
    wds_reader_close(r);
  }
  close(fd);
  return 0;
}
