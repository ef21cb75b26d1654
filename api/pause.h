/*
 * api/pause: tag names, the threads' tag regions, and pause and resume over
 * every device (xsalloc/xsalloc.h, "Pause and resume"; design in pause.c).
 * Internal to api/: allocator.c asks it where a thread inside a region
 * allocates.
 */
#ifndef XSA_API_PAUSE_H
#define XSA_API_PAUSE_H

#include <stdatomic.h>
#include <stddef.h>

#include "pool/types.h"

/* Threads with a tag region open: malloc reads the thread's regions only
 * when this is not 0 (one load on the hot path, no thread-local access). */
extern atomic_int xsa_regions_open;

/* malloc on pool p (its device's lock held) for a thread that may be in a
 * tag region: into the innermost region's memory pool, else as usual. */
xsa_pool_status xsa_region_malloc(xsa_pool *p, size_t size, void *stream, void **out, char *err, size_t errlen);

#endif
