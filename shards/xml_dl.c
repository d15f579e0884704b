/* xml_dl.c — libxml2 loaded on first use (see xml_dl.h). */
#ifdef WDS_HAVE_XML2
#include "shards/xml_dl.h"
#include "shards/dl.h"

#include <dlfcn.h>
#include <pthread.h>
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

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char load_error[512];

static void load(void) {
  /* libxml2's ABI was libxml2.so.2 from 2.0 to 2.13, libxml2.so.16 from
   * 2.14: the one of the headers wds was built with first. Everything used
   * here (xmlReadMemory's XML_PARSE_NONET...) is in every 2.6 or later. */
  static const char *const sonames[] = {
#if LIBXML_VERSION >= 21400
    "libxml2.so.16",
#else
    "libxml2.so.2",
#endif
    "libxml2.so",
    NULL
  };
  static const wds__dl_sym t[] = {
      {"xmlInitParser", (void **)&fn.init_parser},
      {"xmlReadMemory", (void **)&fn.read_memory},
      {"xmlDocGetRootElement", (void **)&fn.doc_get_root_element},
      {"xmlNodeGetContent", (void **)&fn.node_get_content},
      {"xmlFreeDoc", (void **)&fn.free_doc},
  };
  void *h = wds__dl_open("libxml2", sonames, t, sizeof t / sizeof t[0], "2.6",
                         load_error, sizeof load_error);
  if (!h)
    return;
  void *p = dlsym(h, "__xmlFree");
  if (p)
    *(void **)&free_fn = p; /* POSIX: as for the functions above */
  else
    free_var = dlsym(h, "xmlFree");
  if (!free_fn && !free_var) {
    snprintf(load_error, sizeof load_error,
             "cannot load libxml2: it has neither xmlFree nor __xmlFree");
    dlclose(h);
    return;
  }
  fn.init_parser();
  loaded = 1; /* the library stays loaded for the process */
}

static int ready(void) {
  pthread_once(&once, load);
  return loaded;
}

const char *wds__xml_dl_error(void) {
  pthread_once(&once, load);
  return load_error;
}

/* Done once when loaded (libxml2 wants it before any use from threads). */
void wds__xmlInitParser(void) { (void)ready(); }

/* Only xmlReadMemory can see libxml2 missing: s3.c calls nothing else
 * without a document. The others still fail safely. */
xmlDocPtr wds__xmlReadMemory(const char *buffer, int size, const char *url,
                             const char *encoding, int options) {
  return ready() ? fn.read_memory(buffer, size, url, encoding, options) : NULL;
}

xmlNodePtr wds__xmlDocGetRootElement(const xmlDoc *doc) {
  return ready() ? fn.doc_get_root_element(doc) : NULL;
}

xmlChar *wds__xmlNodeGetContent(const xmlNode *cur) {
  return ready() ? fn.node_get_content(cur) : NULL;
}

void wds__xmlFreeDoc(xmlDocPtr doc) {
  if (ready())
    fn.free_doc(doc);
}

void wds__xmlFree(void *p) {
  if (!p || !ready())
    return;
  xmlFreeFunc f = free_fn ? *free_fn() : *free_var;
  f(p);
}

#else
typedef int wds__no_xml2; /* built without libxml2: nothing here */
#endif
