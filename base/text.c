/* text.c — see text.h. */
#include "base/text.h"

#include <string.h>

#include "base/utf8.h"

/* The length of the unit at s[0..n) (n > 0): a byte or a UTF-8 character;
 * *esc is set when it is to be escaped. */
static size_t unit_at(const unsigned char *s, size_t n, unsigned flags,
                      int *esc) {
  unsigned c = s[0];
  if (c < 0x80) {
    *esc = c < 0x20 || c == 0x7f || (c == ' ' && (flags & WDS__ESC_BLANK)) ||
           (c == '\\' && (flags & WDS__ESC_BACKSLASH));
    return 1;
  }
  size_t l = wds__utf8_len(s, n);
  if (l == 0) { /* not UTF-8: this byte alone */
    *esc = 1;
    return 1;
  }
  *esc = l == 2 && c == 0xc2 && s[1] <= 0x9f; /* a C1 control */
  return l;
}

int wds__esc_needed(const char *str, unsigned flags) {
  const unsigned char *s = (const unsigned char *)str;
  size_t n = strlen(str);
  for (size_t i = 0; i < n;) {
    int esc;
    i += unit_at(s + i, n - i, flags, &esc);
    if (esc)
      return 1;
  }
  return 0;
}

static const char hex[] = "0123456789abcdef";

void wds__esc_write(FILE *f, const char *str, unsigned flags) {
  const unsigned char *s = (const unsigned char *)str;
  size_t n = strlen(str);
  for (size_t i = 0; i < n;) {
    int esc;
    size_t l = unit_at(s + i, n - i, flags, &esc);
    if (esc) {
      for (size_t k = 0; k < l; k++) {
        char e[4] = {'\\', 'x', hex[s[i + k] >> 4], hex[s[i + k] & 15]};
        fwrite(e, 1, 4, f);
      }
    } else {
      fwrite(s + i, 1, l, f);
    }
    i += l;
  }
}

size_t wds__esc_into(char *dst, size_t size, const char *str, unsigned flags) {
  if (!dst || size == 0)
    return 0;
  const unsigned char *s = (const unsigned char *)str;
  size_t n = strlen(str), o = 0;
  for (size_t i = 0; i < n;) {
    int esc;
    size_t l = unit_at(s + i, n - i, flags, &esc);
    if (o + (esc ? 4 * l : l) >= size)
      break;
    if (esc) {
      for (size_t k = 0; k < l; k++) {
        dst[o++] = '\\';
        dst[o++] = 'x';
        dst[o++] = hex[s[i + k] >> 4];
        dst[o++] = hex[s[i + k] & 15];
      }
    } else {
      memcpy(dst + o, s + i, l);
      o += l;
    }
    i += l;
  }
  dst[o] = '\0';
  return o;
}

const char *wds__esc(const char *s, char *buf, size_t size, unsigned flags) {
  if (!s || !buf || size == 0 || !wds__esc_needed(s, flags))
    return s;
  wds__esc_into(buf, size, s, flags);
  return buf;
}
