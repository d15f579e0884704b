/* wds/wds.h — everything public in one include. */
#ifndef WDS_WDS_H
#define WDS_WDS_H

#include "wds/reader.h"
#include "wds/spec.h"
#include "wds/status.h"

#endif
