/* fuzz_spec.c — libFuzzer harness for wds_brace_expand / wds_spec_expand.
 *
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -Iinclude -I. shards/spec.c shards/err.c tests/fuzz/fuzz_spec.c -o
 * fuzz_spec (or configure with -DWDS_FUZZ=ON and CC=clang:
 * build/tests/fuzz_spec)
 *   ./fuzz_spec -max_total_time=120 -max_len=4096
 *
 * The input is one pattern (NUL-terminated copy). '@' is replaced before
 * wds_spec_expand() so that the fuzzer never opens files such as /dev/stdin.
 * Besides the sanitizers, it checks the API contract: on success at most
 * max_urls non-NULL URLs and an empty message, on failure an empty list and
 * a message, printable (no control character or byte that is not UTF-8,
 * whatever the pattern holds: base/text.h); and that a pattern without
 * "::", "@" or "${" expands the same as a spec and as a pattern. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "wds/spec.h"

#define FUZZ_MAX_URLS 10000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* before: the thread's last error before the call, which a success leaves. */
static void check(int rc, const wds_url_list *list, const char *before) {
  const char *err = wds_last_error();
  /* A message is printable whatever the pattern holds (base/text.h). */
  if (wds__esc_needed(err, 0))
    abort();
  if (rc == WDS_OK) {
    if (list->count > FUZZ_MAX_URLS || strcmp(err, before) != 0 ||
        (list->count > 0) != (list->urls != NULL))
      abort();
    for (size_t i = 0; i < list->count; i++)
      if (!list->urls[i])
        abort();
  } else if (rc >= 0 || list->count != 0 || list->urls != NULL ||
             strcmp(err, wds_strerror(rc)) == 0) { /* its own message */
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  wds_url_list a = {0}, b = {0};
  char before[1024];
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';

  snprintf(before, sizeof before, "%s", wds_last_error());
  int rc_a = wds_brace_expand(s, FUZZ_MAX_URLS, &a);
  check(rc_a, &a, before);

  for (size_t i = 0; i < size; i++)
    if (s[i] == '@')
      s[i] = '#';
  snprintf(before, sizeof before, "%s", wds_last_error());
  int rc_b = wds_spec_expand(s, FUZZ_MAX_URLS, &b);
  check(rc_b, &b, before);

  /* Same input, no spec syntax (and no NUL inside): same result. */
  if (strlen(s) == size && size > 0 && !memchr(data, '@', size) &&
      !strstr(s, "::") && !strstr(s, "${")) {
    if (rc_a != rc_b || a.count != b.count)
      abort();
    for (size_t i = 0; i < a.count; i++)
      if (strcmp(a.urls[i], b.urls[i]) != 0)
        abort();
  }
  wds_url_list_free(&a);
  wds_url_list_free(&b);
  free(s);
  return 0;
}
