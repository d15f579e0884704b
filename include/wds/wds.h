/* wds/wds.h — everything public in one include. */
#ifndef WDS_WDS_H
#define WDS_WDS_H

#include "wds/decode.h"
#include "wds/index.h"
#include "wds/loader.h"
#include "wds/outfile.h"
#include "wds/reader.h"
#include "wds/spec.h"
#include "wds/status.h"
#include "wds/version.h"
#include "wds/writer.h"

#endif
