/*
 * pool: one device's caching allocator, with the semantics of PyTorch's
 * CUDACachingAllocator (DeviceCachingAllocator) on top of vmm segments.
 *
 * Design: requests are rounded (round_size) and served from the small
 * (<= 1 MiB) or large pool's free set by best fit on (stream, size,
 * address), splitting the block found when should_split says so. On a miss:
 * garbage collection (when configured), new device memory, a free block of
 * a memory pool that lends its memory (use_on_oom) to a global request,
 * release of cached oversize blocks and retry, release of everything cached
 * (events synchronized first) and retry, then out-of-memory with PyTorch's
 * report.
 * New memory is a cuMemAlloc segment (classic) or, with expandable
 * segments, pages mapped at the free end of the one expandable segment of
 * (stream, pool kind), merged with the free block before them. Freed blocks
 * merge with free neighbours; a block used on other streams
 * (record_stream) returns to the cache only when events recorded on those
 * streams at free time have completed (polled on each malloc, waited for
 * when the cache is released). Stats follow PyTorch's names and definitions.
 *
 * Memory pools (PyTorch's private pools): segments and free sets belong to
 * a memory pool, the device's global one unless a routing
 * (begin_allocate_to_pool) sends the request's stream to another; a block
 * only ever returns to its own pool's free set. The release paths
 * (empty_cache, OOM fallbacks, garbage collection) and page recycling
 * touch the global pool and released pools only. A memory pool may have an
 * allocator of its own, whose memory makes its (classic) segments. While
 * a capture is under way no event is queried or waited for: a cross-stream
 * free is deferred until it ends (or, with capture_reuse, until the captured
 * graph orders its uses), and a miss does not release the cache.
 *
 * Not thread safe: the caller (api/) holds the device's lock. The pool uses
 * the public stats struct of api/xsalloc.h as its type (no calls go back to
 * api/).
 */
#ifndef XSA_POOL_POOL_H
#define XSA_POOL_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/xsalloc.h"
#include "pool/options.h"
#include "pool/trace.h"
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

/* Creates the pool of `device`. If the device cannot do virtual memory
 * management, expandable segments fall back to classic, and if exportable
 * handles are refused with ipc_handles set, IPC falls back to off; either
 * way *warning (if not NULL) is set to a sentence to print once. With
 * peer_access set, every device that can access this one is granted. */
xsa_pool_status xsa_pool_create(xsa_pool **out, xsa_driver *drv, int device, const xsa_pool_options *opt,
                                const char **warning, char *err, size_t errlen);
/* Told when an expandable segment reserves or frees its address range. */
typedef struct xsa_pool_listener {
    void (*reserved)(void *ctx, int device, uintptr_t base, size_t size);
    void (*released)(void *ctx, uintptr_t base);
    void *ctx;
} xsa_pool_listener;

void xsa_pool_set_listener(xsa_pool *p, const xsa_pool_listener *listener);

/* Returns all memory to the driver (and to memory pools' own allocators),
 * live allocations included. */
void xsa_pool_destroy(xsa_pool *p);

xsa_pool_status xsa_pool_malloc(xsa_pool *p, size_t size, xsa_stream stream, void **out, char *err, size_t errlen);
xsa_pool_status xsa_pool_free(xsa_pool *p, void *ptr, char *err, size_t errlen);
xsa_pool_status xsa_pool_record_stream(xsa_pool *p, void *ptr, xsa_stream stream, char *err, size_t errlen);
/* Is ptr the start of a live allocation of this pool? */
bool xsa_pool_owns(const xsa_pool *p, void *ptr);

/* Releases every cached block's memory (synchronizing pending events). */
xsa_pool_status xsa_pool_empty_cache(xsa_pool *p, char *err, size_t errlen);
void xsa_pool_cache_info(xsa_pool *p, size_t *cached_free, size_t *largest);
/* Base and size of the allocation unit holding ptr: a cuMemAlloc segment, or
 * the mapped run of an expandable segment around ptr. */
xsa_pool_status xsa_pool_base_allocation(xsa_pool *p, void *ptr, void **base, size_t *size);
void xsa_pool_set_memory_fraction(xsa_pool *p, double fraction);
double xsa_pool_memory_fraction(const xsa_pool *p);
/* New options at run time (the API decides which may change: not
 * peer_access, ipc_handles nor handle_size; the memory fraction stays the
 * pool's own). Each applies from the next request on, as in PyTorch;
 * expandable_segments decides where new memory goes (segments of the other
 * kind keep their blocks until released; with it off no request is placed
 * in an expandable segment). Asks the device nothing: with
 * expandable_segments set, call xsa_pool_probe_vmm first. Returns a
 * sentence to print when the device cannot do what was asked (no virtual
 * memory management: classic segments), else NULL. */
const char *xsa_pool_set_options(xsa_pool *p, const xsa_pool_options *opt);
/* Asks the device, once, whether it can map virtual memory (for
 * xsa_pool_set_options); XSA_POOL_DRIVER_ERROR if the driver fails. */
xsa_pool_status xsa_pool_probe_vmm(xsa_pool *p, char *err, size_t errlen);

void xsa_pool_get_stats(const xsa_pool *p, xsa_device_stats *out);
void xsa_pool_reset_peak_stats(xsa_pool *p);
void xsa_pool_reset_accumulated_stats(xsa_pool *p);
/* Live allocations (allocated, or freed and waiting for events). */
size_t xsa_pool_live_blocks(const xsa_pool *p);

/* Grants device `peer` read/write on every page of the pool's expandable
 * segments, now and later (see xsa_enable_peer_access). */
xsa_pool_status xsa_pool_enable_peer(xsa_pool *p, int peer, char *err, size_t errlen);
/* The devices granted so far, into peers[] (room for
 * XSA_SEGMENT_MAX_ACCESS - 1); how many. */
int xsa_pool_peers(const xsa_pool *p, int *peers);

/* IPC export of the live allocation at ptr; the protocol and the lifetime
 * of exported pages are in api/xsalloc.h. The block stays pinned (never
 * returned to the cache once freed) until the export is closed or revoked. */
xsa_pool_status xsa_pool_ipc_export(xsa_pool *p, void *ptr, xsa_ipc_handle *out, char *err, size_t errlen);
/* Ends a pending export that was not imported. */
xsa_pool_status xsa_pool_ipc_revoke(xsa_pool *p, uint64_t export_id, char *err, size_t errlen);

/* One physical handle under a shared block: its fd in this process, the
 * fd's registration id (vmm/share.h) and its pages. */
typedef struct xsa_shared_chunk {
    int32_t fd;
    uint32_t pages;
    uint64_t id;
} xsa_shared_chunk;

/* What xsa_pool_ipc_share gives: the handles under the block, whole, in
 * address order (malloc'd; the caller frees chunks), the pages' size, and
 * where the block starts past the first handle's start. */
typedef struct xsa_pool_share {
    xsa_shared_chunk *chunks;
    size_t n_chunks;
    size_t page_size;
    size_t offset;
} xsa_pool_share;

/* Shares the live allocation at ptr with any number of importers (the
 * protocol is in api/xsalloc.h, xsa_ipc_share). Nothing is pinned: each
 * handle's fd stays open while the handle stays mapped. */
xsa_pool_status xsa_pool_ipc_share(xsa_pool *p, void *ptr, xsa_pool_share *out, char *err, size_t errlen);

/* Memory pools (semantics in api/xsalloc.h, xsa_mempool_create and on).
 * Id {0, 0} (the global pool) is XSA_POOL_INVALID, and so are releasing
 * a pool that does not exist or is released, routing twice to one pool and
 * ending a routing that does not exist. begin's `capture` says that a
 * graph capture is under way while the routing lasts (no event queries,
 * cross-stream frees deferred, no cache release on a miss); the API sets
 * it for every routing, as PyTorch does, until capture status is read
 * from the driver (cuStreamGetCaptureInfo). end flushes the deferred
 * frees once no capture is left (a driver error leaves them deferred, to
 * be tried again at the next end or empty_cache). */
xsa_pool_status xsa_pool_mempool_create(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);
xsa_pool_status xsa_pool_mempool_release(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);
xsa_pool_status xsa_pool_begin_allocate_to_pool(xsa_pool *p, xsa_mempool_id id, xsa_stream_filter filter, void *ctx,
                                                bool capture, char *err, size_t errlen);
xsa_pool_status xsa_pool_end_allocate_to_pool(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);
/* Memory pools with an allocator of their own and PyTorch's MemPool flags
 * (pool/own_allocator.c; semantics in api/xsalloc.h,
 * xsa_mempool_create_with_allocator, xsa_mempool_set_use_on_oom and
 * xsa_mempool_set_no_split). */
xsa_pool_status xsa_pool_mempool_create_with(xsa_pool *p, xsa_mempool_id id, const xsa_mempool_allocator *allocator,
                                             char *err, size_t errlen);
xsa_pool_status xsa_pool_mempool_set_use_on_oom(xsa_pool *p, xsa_mempool_id id, bool use_on_oom, char *err,
                                                size_t errlen);
xsa_pool_status xsa_pool_mempool_set_no_split(xsa_pool *p, xsa_mempool_id id, bool no_split, char *err,
                                              size_t errlen);
/* Is a capture under way on the device? */
bool xsa_pool_capturing(const xsa_pool *p);
/* graph_capture_record_stream_reuse at run time (pool/capture_reuse.c):
 * on, a block freed during a capture with uses on other streams may return
 * to the cache before the capture ends, once the captured graph orders
 * those uses before the next work on the block's stream. Off, such frees
 * wait for the capture's end; blocks already waiting keep waiting. */
void xsa_pool_set_capture_reuse(xsa_pool *p, bool on);
/* Does memory pool id exist (released or not)? Its use count in *uses. */
bool xsa_pool_mempool_exists(const xsa_pool *p, xsa_mempool_id id, int *uses);

/* Checkpoints (pool/checkpoint.c; semantics in api/xsalloc.h,
 * xsa_mempool_checkpoint and xsa_mempool_restore): the live blocks of
 * memory pool id (*out malloc'd, NULL when *n is 0), and bringing the pool
 * back to such a set, all or nothing (*delta's arrays malloc'd). */
xsa_pool_status xsa_pool_mempool_checkpoint(xsa_pool *p, xsa_mempool_id id, xsa_live_block **out, size_t *n,
                                            char *err, size_t errlen);
xsa_pool_status xsa_pool_mempool_restore(xsa_pool *p, xsa_mempool_id id, const xsa_live_block *live, size_t n,
                                         xsa_restore_delta *delta, char *err, size_t errlen);

/* PyTorch's round_size: the block size a request of `size` bytes gets. */
size_t xsa_pool_round_size(const xsa_pool_options *opt, size_t size);

/* Sets the observer called at every point of pool/trace.h (fn NULL: none). */
void xsa_pool_set_observer(xsa_pool *p, xsa_observer_fn fn, void *ctx);

/* Snapshot: the segments as PyTorch reports them (a cuMemAlloc'd segment, or
 * one mapped run of an expandable segment), in address order, each with its
 * blocks in address order; and the reservation of each expandable segment. */
/* xsa_snap_block and xsa_snap_segment are public (api/xsalloc.h). */
typedef struct xsa_snap_reservation {
    uintptr_t addr;
    size_t size, mapped;
    xsa_stream stream;
    xsa_mempool_id pool_id;
    bool large;
} xsa_snap_reservation;

typedef struct xsa_pool_snapshot {
    xsa_snap_segment *segments;
    size_t n_segments;
    xsa_snap_block *blocks;
    size_t n_blocks;
    xsa_snap_reservation *reservations;
    size_t n_reservations;
} xsa_pool_snapshot;

/* Fills *out (free with xsa_pool_snapshot_free); XSA_POOL_HOST_OOM if host
 * memory runs out, with *out empty. */
xsa_pool_status xsa_pool_snapshot_take(const xsa_pool *p, xsa_pool_snapshot *out);
void xsa_pool_snapshot_free(xsa_pool_snapshot *s);

/* Invariant checker: blocks tile every segment, the free sets hold exactly
 * the free mapped blocks, the pointer map holds exactly the allocated ones,
 * stats equal a recount, segment pages agree with block mapping. Returns 1,
 * or 0 with the first disagreement in err. */
int xsa_pool_check(const xsa_pool *p, char *err, size_t errlen);

#endif
