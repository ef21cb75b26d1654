/*
 * pool/types: the types the pool's interface and its state share: the
 * status every call returns, the pool (opaque outside pool/), its listener
 * and its observer. No functions.
 */
#ifndef XSA_POOL_TYPES_H
#define XSA_POOL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/driver.h"

typedef enum {
    XSA_POOL_OK = 0,
    XSA_POOL_OOM,           /* err holds the out-of-memory report */
    XSA_POOL_BAD_POINTER,   /* not a live allocation of this pool */
    XSA_POOL_DRIVER_ERROR,  /* err names the call and the driver's error */
    XSA_POOL_HOST_OOM,      /* host malloc failed */
    XSA_POOL_INVALID,       /* bad argument */
    XSA_POOL_UNSUPPORTED,   /* not possible here (classic segments, IPC off, hardware); err says why */
} xsa_pool_status;

typedef struct xsa_pool xsa_pool;

/* A block's or segment's pool kind: small (<= 1 MiB requests) or large. */
typedef enum { XSA_POOL_SMALL = 0, XSA_POOL_LARGE = 1, XSA_POOL_KINDS = 2 } xsa_pool_kind;

/* Told when an expandable segment reserves or frees its address range. */
typedef struct xsa_pool_listener {
    void (*reserved)(void *ctx, int device, uintptr_t base, size_t size);
    void (*released)(void *ctx, uintptr_t base);
    void *ctx;
} xsa_pool_listener;

/* The pool's observation points (pool/trace.h): what each event says. */
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
    int pool;          /* the xsa_pool_kind of the block or segment */
    uintptr_t addr;
    size_t size;
    size_t block_size; /* the block's size where a block is involved, else = size */
    xsa_stream stream;
} xsa_obs_event;

typedef void (*xsa_observer_fn)(void *ctx, const xsa_obs_event *e);

#endif
