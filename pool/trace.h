/*
 * pool/trace: the pool's observation points, for the trace ring and the
 * memory hooks of api/ (pool -> api only through this callback).
 *
 * Design: a pool has at most one observer, a function called synchronously
 * (under the caller's device lock) at each point below. The points are
 * one-line XSA_OBSERVE calls; with no observer each costs one predictable
 * branch on a pointer in the pool, and the event is built out of line.
 */
#ifndef XSA_POOL_TRACE_H
#define XSA_POOL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/driver.h"

typedef enum xsa_obs_kind {
    XSA_OBS_MALLOC_BEGIN,   /* a request reaches the pool (size, block_size: rounded) */
    XSA_OBS_MEMORY_BEGIN,   /* the cache missed: new memory is wanted (size, block_size: rounded) */
    XSA_OBS_MEMORY_END,     /* new memory made free block addr of block_size bytes */
    XSA_OBS_ALLOC,          /* block addr handed out (size: requested, block_size) */
    XSA_OBS_FREE_REQUESTED, /* free of allocation addr accepted (size: requested, block_size) */
    XSA_OBS_FREE_END,       /* that free call is done (same fields) */
    XSA_OBS_FREE_COMPLETED, /* block addr is back in the cache (its events completed) */
    XSA_OBS_RECORD_STREAM,  /* allocation addr is used on `stream` too */
    XSA_OBS_SEGMENT_ALLOC,  /* cuMemAlloc'd segment addr, size bytes */
    XSA_OBS_SEGMENT_FREE,   /* cuMemFree'd segment */
    XSA_OBS_SEGMENT_MAP,    /* pages [addr, addr+size) of an expandable segment mapped */
    XSA_OBS_SEGMENT_UNMAP,  /* pages unmapped (released, or moved by page recycling) */
    XSA_OBS_OOM,            /* out of memory for size bytes; addr: the device's free bytes */
} xsa_obs_kind;

typedef struct xsa_obs_event {
    xsa_obs_kind kind;
    int device;
    int pool;          /* xsa_pool_kind of the block or segment */
    uintptr_t addr;
    size_t size;
    size_t block_size; /* the block's size where a block is involved, else = size */
    xsa_stream stream;
} xsa_obs_event;

typedef void (*xsa_observer_fn)(void *ctx, const xsa_obs_event *e);

struct xsa_pool;
/* Builds the event and calls the pool's observer (called by XSA_OBSERVE). */
void xsa_observe_emit(struct xsa_pool *p, xsa_obs_kind kind, int pool, uintptr_t addr, size_t size,
                      size_t block_size, xsa_stream stream);

#define XSA_OBSERVE(p, ...)                                                     \
    do {                                                                        \
        if (__builtin_expect((p)->observer != NULL, 0)) xsa_observe_emit((p), __VA_ARGS__); \
    } while (0)

#endif
