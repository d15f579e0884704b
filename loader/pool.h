/* pool.h — default allocators for batch slots. Internal. */
#ifndef WDS_LOADER_POOL_H
#define WDS_LOADER_POOL_H

#include "wds/loader.h"

/* Pinned (cudaHostAlloc, portable across devices) when wds was built with
 * CUDA and a GPU is visible at run time; aligned host memory otherwise. The
 * choice is made once per process. */
wds_allocator wds__default_allocator(void);

/* Aligned host memory (4 KiB pages), always available. */
wds_allocator wds__host_allocator(void);

#endif
