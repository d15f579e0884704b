/* xml_dl.c — libxml2 loaded on first use (see xml_dl.h). */
#ifdef WDS_HAVE_XML2
#include "shards/xml_dl.h"
#include "shards/dl.h"

#include <dlfcn.h>
#include <stdio.h>

/* The functions shards/s3.c calls, looked up once. */
static struct {
  void (*init_parser)(void);
  xmlDocPtr (*read_memory)(const char *, int, const char *, const char *, int);
  xmlNodePtr (*doc_get_root_element)(const xmlDoc *);
  xmlChar *(*node_get_content)(const xmlNode *);
  void (*free_doc)(xmlDocPtr);
} fn;
/* xmlFree is a variable, or (libxml2 built with per-thread allocators) a
 * function returning the calling thread's: whichever the library has. */
static xmlFreeFunc *free_var;
static xmlFreeFunc *(*free_fn)(void);

/* xmlFree, whichever form it has, and the parser initialised once (libxml2
 * wants it before any use from threads). */
static int check(wds__dl_lib *l, void *handle) {
  void *p = dlsym(handle, "__xmlFree");
  if (p)
    *(void **)&free_fn = p; /* POSIX: a function's address as a void * */
  else
    free_var = dlsym(handle, "xmlFree");
  if (!free_fn && !free_var) {
    snprintf(l->error, sizeof l->error,
             "cannot load libxml2: it has neither xmlFree nor __xmlFree");
    return 0;
  }
  fn.init_parser();
  return 1;
}

/* libxml2's ABI was libxml2.so.2 from 2.0 to 2.13, libxml2.so.16 from 2.14:
 * the one of the headers wds was built with first. Everything used here
 * (xmlReadMemory's XML_PARSE_NONET...) is in every 2.6 or later. */
static const char *const sonames[] = {
#if LIBXML_VERSION >= 21400
    "libxml2.so.16",
#else
    "libxml2.so.2",
#endif
    "libxml2.so", NULL};
static const wds__dl_sym syms[] = {
    {"xmlInitParser", (void **)&fn.init_parser},
    {"xmlReadMemory", (void **)&fn.read_memory},
    {"xmlDocGetRootElement", (void **)&fn.doc_get_root_element},
    {"xmlNodeGetContent", (void **)&fn.node_get_content},
    {"xmlFreeDoc", (void **)&fn.free_doc},
};

static wds__dl_lib lib =
    WDS__DL_LIB("libxml2", sonames, syms, "2.6", LIBXML_DOTTED_VERSION, check);

const char *wds__xml_dl_error(void) { return wds__dl_error(&lib); }

/* Done once when loaded (libxml2 wants it before any use from threads). */
void wds__xmlInitParser(void) { (void)wds__dl_ready(&lib); }

/* Only xmlReadMemory can see libxml2 missing: s3.c calls nothing else
 * without a document. The others still fail safely. */
xmlDocPtr wds__xmlReadMemory(const char *buffer, int size, const char *url,
                             const char *encoding, int options) {
  return wds__dl_ready(&lib)
             ? fn.read_memory(buffer, size, url, encoding, options)
             : NULL;
}

xmlNodePtr wds__xmlDocGetRootElement(const xmlDoc *doc) {
  return wds__dl_ready(&lib) ? fn.doc_get_root_element(doc) : NULL;
}

xmlChar *wds__xmlNodeGetContent(const xmlNode *cur) {
  return wds__dl_ready(&lib) ? fn.node_get_content(cur) : NULL;
}

void wds__xmlFreeDoc(xmlDocPtr doc) {
  if (wds__dl_ready(&lib))
    fn.free_doc(doc);
}

void wds__xmlFree(void *p) {
  if (!p || !wds__dl_ready(&lib))
    return;
  xmlFreeFunc f = free_fn ? *free_fn() : *free_var;
  f(p);
}

#else
typedef int wds__no_xml2; /* built without libxml2: nothing here */
#endif
