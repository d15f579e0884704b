/* strbuf.h — a growing NUL-terminated string for building URLs and
 * requests: appends never fail, an allocation failure sets oom and later
 * appends do nothing, so callers check once at the end. */
#ifndef WDS_BASE_STRBUF_H
#define WDS_BASE_STRBUF_H

#include <stddef.h>
#include <string.h>

typedef struct wds__sbuf {
  char *p;  /* NULL until the first append; NUL-terminated after it */
  size_t n; /* bytes, without the NUL */
  size_t cap;
  int oom; /* an allocation failed: p holds what came before */
} wds__sbuf;

void wds__sb_putn(wds__sbuf *b, const char *s, size_t n);
static inline void wds__sb_putc(wds__sbuf *b, char c) {
  wds__sb_putn(b, &c, 1);
}
static inline void wds__sb_puts(wds__sbuf *b, const char *s) {
  wds__sb_putn(b, s, strlen(s));
}
/* The string (malloc'd; "" when nothing was appended), or NULL after an
 * allocation failure (the buffer is freed either way). */
char *wds__sb_take(wds__sbuf *b);

#endif
