/* size.c — see size.h. */
#include "base/size.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

int wds__size_parse(const char *s, uint64_t *out) {
  uint64_t v = 0, mult = 1;
  const char *p = s;
  if (!p || *p < '0' || *p > '9')
    return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  static const char letters[] = "KMGT";
  int power = 0;
  for (int i = 0; i < 4; i++)
    if (*p == letters[i] || *p == letters[i] + ('a' - 'A'))
      power = i + 1;
  if (power) {
    p++;
    uint64_t base = 1024;
    if (*p == 'i') {
      p++;
      if (*p == 'B')
        p++;
    } else if (*p == 'B') {
      base = 1000;
      p++;
    }
    for (int i = 0; i < power; i++)
      mult *= base;
  } else if (*p == 'B') {
    p++;
  }
  if (*p || (v && mult > UINT64_MAX / v))
    return -1;
  *out = v * mult;
  return 0;
}

int wds__parse_u64(const char *s, uint64_t *out) {
  if (!s || *s < '0' || *s > '9')
    return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end)
    return -1;
  *out = v;
  return 0;
}
