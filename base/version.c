/* version.c — wds_version(): the version the library was built as. */
#include "wds/version.h"

const char *wds_version(void) { return WDS_VERSION_STRING; }
