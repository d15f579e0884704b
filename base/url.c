/* url.c — see url.h. */
#include "base/url.h"

#include <string.h>

static int starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

int wds__url_has_scheme(const char *url) {
  const char *p = url;
  while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
         (*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.')
    p++;
  return p > url && starts_with(p, "://");
}

/* The path of a file:// URL, or NULL when it has none that is absolute. */
static const char *file_path(const char *url) {
  const char *p = url + 7;
  if (starts_with(p, "localhost/"))
    p += 9;
  return *p == '/' ? p : NULL;
}

int wds__url_is_bad_file(const char *url) {
  return starts_with(url, "file://") && !file_path(url);
}

const char *wds__url_local_path(const char *url) {
  if (strcmp(url, "-") == 0 || starts_with(url, "pipe:"))
    return NULL;
  if (starts_with(url, "file://"))
    return file_path(url);
  return wds__url_has_scheme(url) ? NULL : url;
}
