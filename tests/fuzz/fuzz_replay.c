/* fuzz_replay.c — runs a libFuzzer target over files or directories of
 * inputs without libFuzzer, so the seed corpus and every crash found so far
 * are replayed by ctest under the normal and the sanitized builds. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
    return 1;
  }
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 65536;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return 1;
      }
      buf = nb;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    if (n == 0)
      break;
    len += n;
  }
  fclose(f);
  /* Hand the target a buffer of exactly the input's size, as libFuzzer
   * does, so that a read past the end hits ASan's redzone instead of the
   * slack of the read buffer. */
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    free(buf);
    return 1;
  }
  if (len)
    memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

int main(int argc, char **argv) {
  int count = 0, failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "fuzz_replay: cannot stat %s\n", argv[i]);
      failed = 1;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      failed |= run_file(argv[i]);
      count++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      struct stat est;
      if (stat(path, &est) != 0 || !S_ISREG(est.st_mode))
        continue;
      failed |= run_file(path);
      count++;
    }
    if (d)
      closedir(d);
  }
  printf("fuzz_replay: %d inputs replayed\n", count);
  return failed || count == 0;
}
