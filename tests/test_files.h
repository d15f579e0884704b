/* test_files.h — file helpers shared by the unit tests: reading a whole
 * file and removing a test's temporary tree. static inline, so a test that
 * uses one and not the other compiles without unused-function warnings. */
#ifndef WDS_TESTS_TEST_FILES_H
#define WDS_TESTS_TEST_FILES_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole file (malloc'd) and its length, or NULL if it cannot be read
 * or memory runs out. */
static inline uint8_t *test_read_file(const char *path, size_t *len) {
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0, k;
  uint8_t *d = malloc(cap);
  while (d && (k = fread(d + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      uint8_t *nd = realloc(d, cap *= 2);
      if (!nd)
        free(d);
      d = nd;
    }
  }
  fclose(f);
  *len = n;
  return d;
}

/* Removes dir and everything below it (symlinks are removed, not
 * followed). */
static inline void test_remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d)
    return;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char p[4096];
    int n = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (n < 0 || (size_t)n >= sizeof p)
      continue; /* too long to name: left behind */
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
      test_remove_tree(p);
    else
      unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

#endif
