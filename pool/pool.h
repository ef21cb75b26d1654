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
 * Not thread safe: the caller (api/) holds the device's lock. The types it
 * shares with the API (stats, memory pool ids, IPC handles, snapshot
 * records) are xsalloc/types.h's: nothing here includes api/ or calls it.
 * This header is pool.c's; the policies (memory pools and capture, IPC,
 * peers, checkpoints, statistics, snapshots) have their own (pool/state.h
 * lists the files).
 */
#ifndef XSA_POOL_POOL_H
#define XSA_POOL_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/options.h"
#include "pool/types.h"
#include "vmm/driver.h"
#include "xsalloc/types.h"

/* Creates the pool of `device`. If the device cannot do virtual memory
 * management, expandable segments fall back to classic, and if exportable
 * handles are refused with ipc_handles set, IPC falls back to off; either
 * way *warning (if not NULL) is set to a sentence to print once. With
 * peer_access set, every device that can access this one is granted. */
xsa_pool_status xsa_pool_create(xsa_pool **out, xsa_driver *drv, int device, const xsa_pool_options *opt,
                                const char **warning, char *err, size_t errlen);
void xsa_pool_set_listener(xsa_pool *p, const xsa_pool_listener *listener);

/* Returns all memory to the driver (and to memory pools' own allocators),
 * live allocations included. */
void xsa_pool_destroy(xsa_pool *p);

xsa_pool_status xsa_pool_malloc(xsa_pool *p, size_t size, xsa_stream stream, void **out, char *err, size_t errlen);
/* malloc for a thread inside a tag region (xsa_tag_region_begin): a request
 * no routing takes goes to memory pool `region` (created on first use,
 * tagged `tag` with XSA_TAG_* flags) instead of the device's own. */
xsa_pool_status xsa_pool_malloc_in_region(xsa_pool *p, xsa_mempool_id region, uint32_t tag, const char *name,
                                          uint32_t flags, size_t size, xsa_stream stream, void **out, char *err,
                                          size_t errlen);
xsa_pool_status xsa_pool_free(xsa_pool *p, void *ptr, char *err, size_t errlen);
xsa_pool_status xsa_pool_record_stream(xsa_pool *p, void *ptr, xsa_stream stream, char *err, size_t errlen);
/* Is ptr the start of a live allocation of this pool? */
bool xsa_pool_owns(const xsa_pool *p, void *ptr);
/* Live allocations (allocated, or freed and waiting for events). */
size_t xsa_pool_live_blocks(const xsa_pool *p);

/* PyTorch's round_size: the block size a request of `size` bytes gets. */
size_t xsa_pool_round_size(const xsa_pool_options *opt, size_t size);

#endif
