/* outfile_internal.h — wds_outfile (wds/outfile.h) for the other modules:
 * the same calls with their failure's text in a wds__err, leaving the
 * thread's last error to the public call that fails. Internal. */
#ifndef WDS_SHARDS_OUTFILE_INTERNAL_H
#define WDS_SHARDS_OUTFILE_INTERNAL_H

#include "base/err.h"
#include "wds/outfile.h"

int wds__outfile_open(const char *path, unsigned flags, wds_outfile **out,
                      wds__err *e);
int wds__outfile_commit(wds_outfile *f, wds__err *e);

#endif
