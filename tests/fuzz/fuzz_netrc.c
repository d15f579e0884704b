/* fuzz_netrc.c — libFuzzer target for the .netrc reader wds gives
 * libcurl's credentials from (shards/netrc.c): curl's
 * grammar (tokens, quotes and escapes, machine/default/login/password/
 * account/macdef, comments), the entry chosen for a host and a user.
 * Built as a libFuzzer binary with -DWDS_FUZZ=ON (clang), and always as a
 * replay driver (fuzz_replay.c) over tests/fuzz/corpus/netrc;
 * scripts/fuzz.sh runs it.
 *
 * Input: the file's bytes; the host and the user asked for are the first
 * two tokens after a line "#@ HOST USER" if the input has one, else
 * "example.com" and none. Besides the sanitizers it checks the contract:
 * OK (or out of memory) only; what is found is a pair of strings or NULLs,
 * and asked with a user, the login found is that user (or none); the same
 * input parses the same twice. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shards/netrc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const char *a, const char *b) {
  return (!a && !b) || (a && b && !strcmp(a, b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char host[64] = "example.com", user[64] = "";
  const char *at = memmem(data, size, "#@ ", 3);
  if (at) {
    char line[200];
    /* the bytes after "#@ " (3 past at), to the input's end */
    size_t n = size - (size_t)(at + 3 - (const char *)data);
    snprintf(line, sizeof line, "%.*s", (int)(n < 199 ? n : 199), at + 3);
    line[strcspn(line, "\n")] = '\0';
    if (sscanf(line, "%63s %63s", host, user) < 1)
      snprintf(host, sizeof host, "example.com");
  }
  const char *u = user[0] ? user : NULL;
  char *l1 = NULL, *p1 = NULL, *l2 = NULL, *p2 = NULL;
  int rc = wds__netrc_parse((const char *)data, size, host, u, &l1, &p1);
  if (rc != WDS_OK && rc != WDS_ERR_NOMEM)
    abort();
  if (rc == WDS_OK) {
    if (u && l1 && strcmp(l1, u) != 0)
      abort();
    if (u && !l1 && p1)
      abort(); /* a password for a user it did not find */
    if (wds__netrc_parse((const char *)data, size, host, u, &l2, &p2) ==
            WDS_OK &&
        (!same(l1, l2) || !same(p1, p2)))
      abort();
  }
  wds__netrc_free_secret(l1);
  wds__netrc_free_secret(p1);
  wds__netrc_free_secret(l2);
  wds__netrc_free_secret(p2);
  return 0;
}
