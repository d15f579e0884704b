/* consumer.c — a program built against an installed wds (tests/integration/
 * package.sh): writes a zstd-compressed shard with the writer API into DIR,
 * reads it back with the reader and checks every sample. Prints
 * "wds VERSION (headers HEADERS) samples N bytes B" and exits 0, or names
 * what failed and exits 1.
 * Usage: consumer DIR */
#include <stdio.h>
#include <string.h>

#include <wds/wds.h>

#define SAMPLES 5

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer DIR\n");
    return 2;
  }
  if (strcmp(wds_version(), WDS_VERSION_STRING) != 0) {
    fprintf(stderr, "consumer: library %s, headers %s\n", wds_version(),
            WDS_VERSION_STRING);
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/shard-%%03d.tar.zst", argv[1]);
  wds_writer_config wc = WDS_WRITER_CONFIG_INIT;
  wc.pattern = path;
  wc.no_sync = 1;
  wds_writer *w;
  if (wds_writer_open(&wc, &w) != WDS_OK) {
    fprintf(stderr, "consumer: writer: %s\n", wds_last_error());
    return 1;
  }
  for (int i = 0; i < SAMPLES; i++) {
    char key[32], text[32];
    snprintf(key, sizeof key, "sample%02d", i);
    snprintf(text, sizeof text, "text of %d", i);
    wds_writer_field f[2] = {{"txt", text, strlen(text)}, {"cls", "7", 1}};
    if (wds_writer_write_sample(w, key, f, 2) != WDS_OK) {
      fprintf(stderr, "consumer: write: %s\n", wds_last_error());
      wds_writer_abort(w);
      return 1;
    }
  }
  if (wds_writer_close(w) != WDS_OK) {
    fprintf(stderr, "consumer: writer close failed\n");
    return 1;
  }

  snprintf(path, sizeof path, "%s/shard-000.tar.zst", argv[1]);
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  rc.spec = path;
  wds_reader *r;
  if (wds_reader_open(&rc, &r) != WDS_OK) {
    fprintf(stderr, "consumer: reader: %s\n", wds_last_error());
    return 1;
  }
  const wds_sample *s;
  int n = 0, st;
  size_t bytes = 0;
  while ((st = wds_reader_next(r, &s)) == WDS_OK) {
    char key[32], text[32];
    snprintf(key, sizeof key, "sample%02d", n);
    snprintf(text, sizeof text, "text of %d", n);
    int ok = strcmp(s->key, key) == 0 && s->field_count == 2 &&
             strcmp(s->fields[1].ext, "txt") == 0 &&
             s->fields[1].size_bytes == strlen(text) &&
             memcmp(s->fields[1].data, text, strlen(text)) == 0;
    if (!ok) {
      fprintf(stderr, "consumer: sample %d (%s) is not what was written\n", n,
              s->key);
      wds_reader_close(r);
      return 1;
    }
    for (size_t i = 0; i < s->field_count; i++)
      bytes += s->fields[i].size_bytes;
    n++;
  }
  if (st != WDS_EOF) {
    fprintf(stderr, "consumer: read: %s (%s)\n", wds_last_error(),
            wds_status_name(st));
    wds_reader_close(r);
    return 1;
  }
  wds_reader_close(r);
  printf("wds %s (headers %s) samples %d bytes %zu\n", wds_version(),
         WDS_VERSION_STRING, n, bytes);
  return n == SAMPLES ? 0 : 1;
}
