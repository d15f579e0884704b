/* dl.c — a shared library loaded on first use (see dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <pthread.h>
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

/* One lock for every library's first load: loads are rare and short, and a
 * check loads nothing else. */
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

static int load(wds__dl_lib *l) {
  void *h = wds__dl_open(l->name, l->sonames, l->syms, l->nsyms, l->min_version,
                         l->error, sizeof l->error);
  if (!h)
    return -1;
  if (l->check && !l->check(l, h)) {
    dlclose(h);
    return -1;
  }
  return 1; /* the library stays loaded for the process */
}

int wds__dl_ready(wds__dl_lib *l) {
  int state = __atomic_load_n(&l->state, __ATOMIC_ACQUIRE);
  if (state == 0) {
    pthread_mutex_lock(&load_mu);
    state = __atomic_load_n(&l->state, __ATOMIC_RELAXED);
    if (state == 0) {
      state = load(l);
      __atomic_store_n(&l->state, state, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&load_mu);
  }
  return state > 0;
}

const char *wds__dl_error(wds__dl_lib *l) {
  (void)wds__dl_ready(l);
  return l->error;
}

int wds__dl_too_old(wds__dl_lib *l, const char *found) {
  snprintf(l->error, sizeof l->error,
           "cannot use %s: %s %s or later is needed (wds was built against "
           "%s)",
           found, l->name, l->min_version, l->built_against);
  return 0;
}
