/* dl.h — a shared library loaded on first use (dlopen). Internal to wds.
 *
 * wds is not linked against libcurl (curl_dl.c), libarchive (archive_dl.c)
 * or libxml2 (xml_dl.c): their shared objects and relocations cost every
 * process start-up time (docs/performance.md, "Start-up"), and most runs
 * never call them. Each *_dl.c keeps a table of the functions it needs and
 * fills it with wds__dl_open the first time one is called. */
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

#endif
