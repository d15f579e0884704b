/* xml_dl.h — libxml2 loaded on first use. Internal to wds.
 *
 * wds is not linked against libxml2: with ICU behind it, it costs every
 * process start-up time (docs/performance.md, "Start-up"), and only s3://
 * error bodies and listings need it. shards/s3.c includes this after
 * libxml2's headers: every libxml2 function it calls goes to a wrapper
 * (xml_dl.c) that loads libxml2 with dlopen the first time any is called.
 * When it cannot be loaded, xmlReadMemory returns NULL and
 * wds__xml_dl_error() says why. */
#ifndef WDS_SHARDS_XML_DL_H
#define WDS_SHARDS_XML_DL_H

#include <libxml/parser.h>
#include <libxml/tree.h>

/* Why libxml2 could not be loaded: "" when it was (it is loaded now if it
 * was not tried yet). */
const char *wds__xml_dl_error(void);

void wds__xmlInitParser(void);
xmlDocPtr wds__xmlReadMemory(const char *buffer, int size, const char *url,
                             const char *encoding, int options);
xmlNodePtr wds__xmlDocGetRootElement(const xmlDoc *doc);
xmlChar *wds__xmlNodeGetContent(const xmlNode *cur);
void wds__xmlFreeDoc(xmlDocPtr doc);
void wds__xmlFree(void *p);

/* libxml2 may define xmlFree as a macro (its per-thread allocator). */
#undef xmlFree
#define xmlInitParser wds__xmlInitParser
#define xmlReadMemory wds__xmlReadMemory
#define xmlDocGetRootElement wds__xmlDocGetRootElement
#define xmlNodeGetContent wds__xmlNodeGetContent
#define xmlFreeDoc wds__xmlFreeDoc
#define xmlFree wds__xmlFree

#endif
