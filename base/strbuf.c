/* strbuf.c — see strbuf.h. */
#include "base/strbuf.h"

#include <stdlib.h>

void wds__sb_putn(wds__sbuf *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

char *wds__sb_take(wds__sbuf *b) {
  if (b->oom) {
    free(b->p);
    return NULL;
  }
  return b->p ? b->p : strdup("");
}
