/* dl.h — a shared library loaded on first use (dlopen). Internal to wds.
 *
 * wds is not linked against libcurl (curl_dl.c), libarchive (archive_dl.c)
 * or libxml2 (xml_dl.c): their shared objects and relocations cost every
 * process start-up time (docs/performance.md, "Start-up"), and most runs
 * never call them. Each *_dl.c describes its library once (a wds__dl_lib:
 * names, the functions it needs, a version check) and its wrappers call
 * wds__dl_ready, which loads it the first time. */
#ifndef WDS_SHARDS_DL_H
#define WDS_SHARDS_DL_H

#include <stddef.h>

/* A function looked up by name; its address is stored through slot. */
typedef struct {
  const char *name;
  void **slot;
} wds__dl_sym;

/* Opens the first of sonames (NULL-terminated) that the dynamic loader
 * finds, RTLD_NOW | RTLD_LOCAL, and looks up every symbol of syms. Returns
 * the handle (kept for the life of the process), or NULL with the reason in
 * why: "cannot load LIB: <dlerror>", or "cannot load LIB: it has no SYM (LIB
 * MIN or later is needed)"; lib names the library in messages. */
void *wds__dl_open(const char *lib, const char *const *sonames,
                   const wds__dl_sym *syms, size_t nsyms,
                   const char *min_version, char *why, size_t why_size);

/* A library loaded once, on first use: a static one per *_dl.c, its
 * description set and the rest zero. */
typedef struct wds__dl_lib {
  const char *name;           /* in messages: "libcurl" */
  const char *const *sonames; /* tried in order, NULL-terminated */
  const wds__dl_sym *syms;    /* all must be found */
  size_t nsyms;
  const char *min_version;   /* the oldest usable, in messages: "7.86.0" */
  const char *built_against; /* the headers' version, in messages */
  /* Called once the symbols are found (NULL: none): nonzero when the
   * library is usable; else 0 with the reason in l->error (an old version:
   * wds__dl_too_old), and the library is closed again. */
  int (*check)(struct wds__dl_lib *l, void *handle);
  /* Kept by wds__dl_ready: */
  int state;       /* 0: not tried yet; 1: loaded; -1: cannot be used */
  char error[512]; /* why it cannot be used; "" when loaded */
} wds__dl_lib;

/* The initialiser of a wds__dl_lib: SYMS an array (its length counted
 * here), CHECK may be NULL. */
#define WDS__DL_LIB(NAME, SONAMES, SYMS, MIN_VERSION, BUILT_AGAINST, CHECK)    \
  {                                                                            \
    .name = (NAME), .sonames = (SONAMES), .syms = (SYMS),                      \
    .nsyms = sizeof(SYMS) / sizeof((SYMS)[0]), .min_version = (MIN_VERSION),   \
    .built_against = (BUILT_AGAINST), .check = (CHECK)                         \
  }

/* Loads l the first time any thread asks (the others wait); 1 when it can
 * be used, for the life of the process, else 0 (l->error says why). A
 * check must not load another library. */
int wds__dl_ready(wds__dl_lib *l);

/* Why l cannot be used ("" when it can), loading it first. */
const char *wds__dl_error(wds__dl_lib *l);

/* For a check: refuses l as too old, found naming the version loaded
 * ("libcurl 7.81.0"): l->error becomes "cannot use FOUND: NAME MIN or later
 * is needed (wds was built against BUILT)". Returns 0. */
int wds__dl_too_old(wds__dl_lib *l, const char *found);

#endif
