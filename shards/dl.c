/* dl.c — a shared library loaded on first use (see dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>

void *wds__dl_open(const char *lib, const char *const *sonames,
                   const wds__dl_sym *syms, size_t nsyms,
                   const char *min_version, char *why, size_t why_size) {
  void *h = NULL;
  const char *first_error = NULL;
  char first[256] = "";
  for (size_t i = 0; !h && sonames[i]; i++) {
    h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    /* The first name is the ABI wds was built for: its error is the one
     * worth showing ("libarchive.so.13: cannot open shared object file"). */
    if (!h && !first_error) {
      const char *e = dlerror();
      snprintf(first, sizeof first, "%s", e ? e : sonames[i]);
      first_error = first;
    }
  }
  if (!h) {
    snprintf(why, why_size, "cannot load %s: %s", lib,
             first_error ? first_error : "no library name to try");
    return NULL;
  }
  for (size_t i = 0; i < nsyms; i++) {
    /* POSIX: a function's address comes back as a void *. */
    void *p = dlsym(h, syms[i].name);
    if (!p) {
      snprintf(why, why_size,
               "cannot load %s: it has no %s (%s %s or later is needed)", lib,
               syms[i].name, lib, min_version);
      dlclose(h);
      return NULL;
    }
    *syms[i].slot = p;
  }
  return h;
}
