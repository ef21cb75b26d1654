/*
 * xsalloc: a CUDA caching allocator whose segments are expandable virtual
 * memory ranges. Public C API.
 *
 * Semantics follow PyTorch's CUDACachingAllocator: the same block rounding,
 * small/large pools, best-fit split and merge, per-stream caching,
 * record_stream deferred frees, statistics with the same names and
 * definitions, and PYTORCH_CUDA_ALLOC_CONF's syntax and keys in XSALLOC_CONF.
 *
 * Every function may be called from any thread. Each returns an xsa_status;
 * on an error, xsa_last_error() gives a sentence (thread local) that stays
 * valid until the next xsalloc call on this thread.
 *
 * Initialisation is lazy: the first call that needs a device starts the
 * driver, with the settings of the environment (PyTorch's
 * PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, with XSALLOC_CONF
 * layered over it key by key). Call xsa_init() first to pass a
 * configuration string instead, or xsa_configure() to pass one without
 * starting the driver yet.
 *
 * fork: a child forked before the driver started starts its own; in a
 * child forked after it started, every call that needs a device fails with
 * XSA_ERROR_NO_DRIVER ("Cannot re-initialize CUDA in forked subprocess",
 * as CUDA itself cannot), and xsa_free of the parent's memory does nothing;
 * such a child that picks the simulated driver (xsa_use_driver("sim"))
 * starts afresh on it, as another process would.
 */
#ifndef XSALLOC_H
#define XSALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xsalloc/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The names the shared library exports: it is built with
 * -fvisibility=hidden, so that calls inside it are direct (and inlined
 * across files with link-time optimisation) and only this API is seen. */
#ifndef XSA_API
#define XSA_API __attribute__((visibility("default")))
#endif

typedef enum xsa_status {
    XSA_SUCCESS = 0,
    XSA_ERROR_INVALID_VALUE,     /* a bad argument (NULL out-pointer, bad fraction...) */
    XSA_ERROR_OUT_OF_MEMORY,     /* the message carries PyTorch's report */
    XSA_ERROR_INVALID_DEVICE,    /* device index out of range */
    XSA_ERROR_INVALID_POINTER,   /* free/record_stream of a pointer xsalloc does not own (unknown, interior, already freed) */
    XSA_ERROR_CONFIG,            /* XSALLOC_CONF or the init string is malformed */
    XSA_ERROR_NO_DRIVER,         /* no usable CUDA driver (and the simulated one was not chosen) */
    XSA_ERROR_DRIVER,            /* a driver call failed; the message names it */
    XSA_ERROR_ALREADY_INITIALIZED,
    XSA_ERROR_NOT_SUPPORTED,     /* not possible here: classic segments, IPC off, peer access the hardware cannot do */
} xsa_status;

XSA_API const char *xsa_status_name(xsa_status status);
/* The detail of the last error on this thread ("" if none). */
XSA_API const char *xsa_last_error(void);

/* Selects the driver before initialisation: "cuda", "sim", or NULL for the
 * default (environment XSA_DRIVER, else cuda when a GPU is usable, else sim). */
XSA_API xsa_status xsa_use_driver(const char *name);
/* Name of the driver in use ("cuda" or "sim"); initialises if needed. */
XSA_API const char *xsa_driver_name(void);

/* Initialises from `conf` (PYTORCH_CUDA_ALLOC_CONF syntax), or, when conf is
 * NULL, from the environment: PYTORCH_ALLOC_CONF, else
 * PYTORCH_CUDA_ALLOC_CONF, with XSALLOC_CONF over it key by key (none set:
 * all defaults), and starts the driver. PyTorch keys that xsalloc accepts
 * but cannot honour are named in one line on stderr, once per process
 * (docs/configuration.md). Fails with XSA_ERROR_ALREADY_INITIALIZED if
 * initialised or configured (call xsa_shutdown first). */
XSA_API xsa_status xsa_init(const char *conf);
/* Takes the settings as xsa_init does (the same string, the same errors)
 * without starting the driver: the first call that needs a device starts
 * it. So nothing touches CUDA until then (a process may still set
 * CUDA_VISIBLE_DEVICES or fork). */
XSA_API xsa_status xsa_configure(const char *conf);
/* Frees every cached block, returns all memory to the driver and forgets the
 * configuration. Live allocations are released too (their pointers become
 * invalid); xsa_live_allocations tells how many there were. Blocks this
 * process imported (xsa_ipc_import, xsa_ipc_open) are closed; exports not
 * yet imported are revoked, and shares (xsa_ipc_share) become stale. */
XSA_API xsa_status xsa_shutdown(void);

XSA_API xsa_status xsa_device_count(int *count);
/* The calling thread's current device (default 0), used by xsa_malloc_current. */
XSA_API xsa_status xsa_set_device(int device);
XSA_API xsa_status xsa_get_device(int *device);

/* Allocates `size` bytes on `device` for use on `stream` (NULL: the legacy
 * default stream). size 0 succeeds with *ptr = NULL. */
XSA_API xsa_status xsa_malloc(void **ptr, size_t size, int device, void *stream);
XSA_API xsa_status xsa_malloc_current(void **ptr, size_t size, void *stream);
/* Frees a pointer returned by xsa_malloc. NULL is a no-op. If the block was
 * used on other streams (xsa_record_stream), it returns to the cache once
 * the work queued on those streams so far has completed. */
XSA_API xsa_status xsa_free(void *ptr);
/* Marks `ptr` as used by `stream` (PyTorch's recordStream). */
XSA_API xsa_status xsa_record_stream(void *ptr, void *stream);

/* Releases every cached (free) block's memory to the driver on all devices,
 * waiting for pending record_stream events first. Memory pools in use keep
 * theirs; released ones give back what is free. A device with a routing
 * (xsa_begin_allocate_to_pool) under way is left alone: releasing would
 * wait for events during a capture. */
XSA_API xsa_status xsa_empty_cache(void);
/* Free cached bytes on a device and the largest free cached block. */
XSA_API xsa_status xsa_cache_info(int device, size_t *cached_free, size_t *largest);
/* The segment allocation (cuMemAlloc'd segment, or expandable range's mapped
 * extent) containing `ptr`: its base and size. */
XSA_API xsa_status xsa_get_base_allocation(void *ptr, void **base, size_t *size);
/* Caps reserved memory on `device` at fraction * device total (0 <= f <= 1,
 * PyTorch's range). At 0 no new device memory can be had: a request the
 * cache cannot serve fails with XSA_ERROR_OUT_OF_MEMORY (after the cache is
 * released, as any miss at the cap), as in PyTorch. */
XSA_API xsa_status xsa_set_memory_fraction(double fraction, int device);
/* The fraction in use on `device`: the last one set, else the configured
 * per_process_memory_fraction (1 by default). */
XSA_API xsa_status xsa_get_memory_fraction(int device, double *fraction);

/* The device's statistics: PyTorch's DeviceStats (xsa_device_stats,
 * xsalloc/types.h), same names and definitions. */
XSA_API xsa_status xsa_get_stats(int device, xsa_device_stats *stats);
XSA_API xsa_status xsa_reset_peak_stats(int device);
XSA_API xsa_status xsa_reset_accumulated_stats(int device);

/* ---- Memory pools (PyTorch's MemPool / CUDA graph private pools) ----
 *
 * A memory pool is a cache of its own inside a device's allocator, named
 * by a pair of integers like PyTorch's MempoolId_t (graphs use {id, 0},
 * MemPool and graph_pool_handle {0, id}; {0, 0} is the device's own cache
 * and cannot be named). Its blocks live in segments of its own (one
 * expandable segment per pool, stream and small/large kind, or cuMemAlloc
 * segments with expandable_segments:False); a block freed goes back to its
 * pool only, and no allocation outside the pool ever receives its memory.
 * While a pool is in use (use count > 0) neither page recycling nor
 * xsa_empty_cache nor the out-of-memory fallbacks unmap, move or free any
 * of its pages, so a captured graph may replay over its freed blocks. The
 * pool's memory counts in the device's stats (reserved, allocated...) as
 * PyTorch counts it, and snapshots name each segment's pool
 * (segment_pool_id). */

/* Creates the pool `id` on `device` with a use count of 1, or adds a use
 * to an existing one (PyTorch's createOrIncrefPool). A released pool
 * whose memory has not gone back yet is in use again. */
XSA_API xsa_status xsa_mempool_create(int device, xsa_mempool_id id);
/* Drops a use of pool `id` (PyTorch's releasePool). At zero uses the pool
 * is released: its free memory goes back to the device at once (at the
 * end of the capture if one is under way), all of it when its last block
 * is freed (at the next xsa_empty_cache if that block still waited for
 * record_stream events), and what is free at each xsa_empty_cache; the id
 * is forgotten once the pool holds no memory. Live blocks stay valid until
 * freed. A block of the released pool freed during a capture may be used
 * by that graph's replays: the pools capturing then keep the released
 * pool's memory until they are released themselves. A driver error while memory goes back is returned; the use is
 * dropped all the same (xsa_empty_cache tries again).
 * XSA_ERROR_INVALID_VALUE if the pool does not exist or is released. */
XSA_API xsa_status xsa_mempool_release(int device, xsa_mempool_id id);

/* PyTorch's beginAllocateToPool: creates pool `id` or adds a use to it, then
 * routes the allocations on `device` from streams that filter(ctx, stream)
 * accepts (every stream if filter is NULL) to it, until
 * xsa_end_allocate_to_pool. When several routings accept a stream, the one
 * begun last wins (as in PyTorch 2.10 and later). As in PyTorch, a routing counts as a graph capture
 * under way: until it ends the device's allocator neither queries nor
 * waits for events (an event query would invalidate a capture), a miss
 * does not release cached memory, xsa_empty_cache leaves the device alone,
 * and a block with uses on other streams (xsa_record_stream) freed
 * meanwhile returns to its pool only after the capture, once those
 * streams' work queued by then has completed (with
 * graph_capture_record_stream_reuse, as soon as the captured graph orders
 * those uses before its stream's next work: docs/configuration.md). The filter is called with
 * the device's lock held: it must not call xsalloc.
 * XSA_ERROR_INVALID_VALUE for id {0, 0} or a pool already routed to. */
XSA_API xsa_status xsa_begin_allocate_to_pool(int device, xsa_mempool_id id, xsa_stream_filter filter, void *ctx);
/* Ends the routing to pool `id` (the use it added stays until
 * xsa_mempool_release). When no routing is left, the frees deferred by the
 * capture record their events; a driver error there is returned, the
 * routing is ended all the same and the deferred frees are tried again at
 * the next end or xsa_empty_cache. XSA_ERROR_INVALID_VALUE if there is no
 * routing to the pool. */
XSA_API xsa_status xsa_end_allocate_to_pool(int device, xsa_mempool_id id);
/* *uses: the use count of pool `id` (PyTorch's getPoolUseCount), 0 if the
 * pool does not exist or is released. */
XSA_API xsa_status xsa_mempool_use_count(int device, xsa_mempool_id id, int *uses);

/* A memory pool's own allocator: xsa_mempool_allocator (xsalloc/types.h). */
/* Creates pool `id` on `device`, with a use count of 1, whose segments come
 * from `allocator` (copied; the pool keeps ctx) instead of the device's
 * memory (PyTorch's createOrIncrefPool with an allocator). The pool caches,
 * splits and merges blocks in them as in cuMemAlloc segments (they are
 * classic segments, also with expandable_segments:True: the allocator's
 * memory cannot be mapped page by page); a segment's size is the one a
 * cuMemAlloc segment would have (2 MiB for requests up to 1 MiB, 20 MiB below
 * 10 MiB, else the request rounded up to 2 MiB). Segments go back
 * through free only when the pool is released: its free segments at
 * once, each other one as its last block is freed (at the next
 * xsa_empty_cache if that block waited for record_stream events), never
 * while the pool is in use, and neither page recycling nor the
 * out-of-memory fallbacks touch them. The memory fraction counts them as
 * reserved memory (alloc is not called past it), and the stats count them
 * as PyTorch does (reserved_bytes, segment, num_device_alloc...). Once the
 * pool's last segment is freed the pool is forgotten and release(ctx)
 * called, so a block freed after the caller let go of its allocator still
 * returns through free. XSA_ERROR_INVALID_VALUE (nothing kept) for id
 * {0, 0}, alloc or free NULL, or a pool `id` that exists already. */
XSA_API xsa_status xsa_mempool_create_with_allocator(int device, xsa_mempool_id id,
                                                     const xsa_mempool_allocator *allocator);
/* PyTorch's MemPool(use_on_oom=True): when an allocation outside the
 * memory pools finds no memory (the device's, or within the memory
 * fraction), before any cached memory is released for it, it takes a
 * free block of a pool in use with use_on_oom set (of its stream and
 * size, as from the device's own cache); that block returns to its pool
 * when freed. A released pool lends nothing. A graph's pool may lend too:
 * its replays then share that memory, which is the caller's choice.
 * XSA_ERROR_INVALID_VALUE for id {0, 0} or a pool that does not exist or
 * is released. */
XSA_API xsa_status xsa_mempool_set_use_on_oom(int device, xsa_mempool_id id, bool use_on_oom);
/* PyTorch's MemPool(no_split=True): the pool never splits a block; a
 * request takes a whole cached block, or a whole new segment (classic
 * segments) or mapped run (expandable), and xsa_mempool_restore refuses
 * a block that would split a classic segment of the pool. Set it before
 * the pool's first allocation: XSA_ERROR_INVALID_VALUE once the pool holds
 * memory, and for id {0, 0} or a pool that does not exist or is released. */
XSA_API xsa_status xsa_mempool_set_no_split(int device, xsa_mempool_id id, bool no_split);

/* Checkpoints of a pool (PyTorch's getCheckpointState and
 * setCheckpointPoolState). cudagraph trees (torch.compile's
 * "reduce-overhead") replay graphs over a pool, which changes no allocator
 * state; before recording or warming up a graph after such replays they
 * bring the pool back to the state it had after an earlier graph: the
 * blocks live then are allocated again (the replayed outputs still alive
 * live there), everything else in the pool is free. */

/* The allocated blocks of pool `id`, in address order: *blocks (NULL when
 * *n is 0; free with xsa_free_buffer). Freed blocks still waiting for
 * record_stream events or IPC importers are not live.
 * XSA_ERROR_INVALID_VALUE for id {0, 0} or a pool that does not exist. */
XSA_API xsa_status xsa_mempool_checkpoint(int device, xsa_mempool_id id, xsa_live_block **blocks, size_t *n);

/* Brings pool `id` back to the live blocks live[0..n) (any order, e.g. a
 * checkpoint): the pool's allocations not in the set are freed (as
 * xsa_free would: the pointers become invalid), and each block of the set
 * that is not allocated is allocated at exactly its address and size,
 * split out of the free memory holding it, with its requested size; the
 * stats change as those frees and allocations would change them. All or
 * nothing: on an error the pool is as it was. Each block must lie in one
 * of the pool's segments, in mapped memory, with the segment's stream, and
 * not overlap another; the memory it needs must be free, allocated, or
 * waiting for record_stream events. Memory still in use on other streams
 * (a freed block's pending events, or the streams an allocation freed here
 * was used on) is waited for first (cuEventSynchronize,
 * cuStreamSynchronize), which is refused while a capture is under way on
 * the device; so is memory pinned by an IPC export or held back by a
 * capture. XSA_ERROR_INVALID_VALUE (naming the block and the reason) for
 * id {0, 0}, a pool that does not exist, is released or is being routed to
 * (xsa_begin_allocate_to_pool), and a set that does not fit as above;
 * XSA_ERROR_DRIVER if a wait fails; *delta is filled on success only. */
XSA_API xsa_status xsa_mempool_restore(int device, xsa_mempool_id id, const xsa_live_block *live, size_t n,
                                       xsa_restore_delta *delta);
XSA_API void xsa_restore_delta_free(xsa_restore_delta *delta);

/* ---- Pause and resume: tagged memory released and restored at the same addresses ----
 *
 * What torch_memory_saver and vLLM's sleep mode do, inside the allocator.
 * A tag names memory pools: a MemPool or a graph's pool tagged with
 * xsa_mempool_set_tag, or the pools a thread's tag region allocates in
 * (xsa_tag_region_begin). Tagged pools have expandable segments, also
 * with expandable_segments:False. xsa_pause releases the physical pages of
 * every pool with the tag (NULL: every tagged pool), on every device, and
 * keeps their virtual ranges; xsa_resume maps new pages at the same
 * addresses. Pausing waits first for the work that may use the pages: the
 * streams their segments and record_stream name (the whole device if a
 * graph was captured into the pool, or with XSA_PAUSE_SYNC_DEVICE). With
 * backup (XSA_TAG_CPU_BACKUP, or XSA_PAUSE_BACKUP) the live allocations'
 * requested bytes are copied to host memory before, and back after, on a
 * copy stream, finished before the call returns; without, their contents
 * are lost. The free cache goes too and is not mapped again, except in a
 * pool a graph was captured into (its replays use its free blocks).
 * While paused: xsa_free of its allocations works (their copies go); an
 * allocation routed to it fails (XSA_ERROR_INVALID_VALUE); its blocks are
 * out of the current stats (allocation, allocated_bytes, active,
 * active_bytes, requested_bytes) and its pages move from reserved_bytes to
 * paused_bytes; snapshots mark its segments "is_paused". Each device is all
 * or nothing: on an error nothing changed there (a device before it in the
 * same call stays done; the message says so). Out of device memory in
 * xsa_resume is XSA_ERROR_OUT_OF_MEMORY with everything still paused and
 * the backups kept: a later call can succeed. Pausing a paused pool, or a
 * tag nothing carries, does nothing. xsa_empty_cache gives back the free
 * memory of tagged pools in use too, unless a graph was captured into
 * them (unlike other pools in use). Refused (XSA_ERROR_INVALID_VALUE)
 * while a capture or a routing (xsa_begin_allocate_to_pool) is under way
 * on the device. Flags: xsalloc/types.h (XSA_TAG_*, XSA_PAUSE_*). */

/* Tags pool `id` of `device` (it must exist and be in use) with `tag` (1 to
 * 63 bytes) and XSA_TAG_* flags; again with the same tag, the flags change.
 * XSA_ERROR_INVALID_VALUE for another tag, a paused pool or a bad name;
 * XSA_ERROR_NOT_SUPPORTED for a pool with an allocator of its own or
 * classic segments already, or a device without virtual memory management. */
XSA_API xsa_status xsa_mempool_set_tag(int device, xsa_mempool_id id, const char *tag, unsigned flags);
/* Until the matching end, the calling thread's allocations through
 * xsa_malloc (and the CuPy and PyTorch entry points over it) that no
 * routing takes go to the tag's own pool on their device (one per tag and
 * flags). Regions nest, 16 deep. */
XSA_API xsa_status xsa_tag_region_begin(const char *tag, unsigned flags);
XSA_API xsa_status xsa_tag_region_end(void);
/* Pauses / resumes every pool tagged `tag` (NULL: every tag). */
XSA_API xsa_status xsa_pause(const char *tag, unsigned flags);
XSA_API xsa_status xsa_resume(const char *tag);
/* *bytes: the page bytes the paused pools tagged `tag` (NULL: all) of
 * `device` released. */
XSA_API xsa_status xsa_paused_bytes(int device, const char *tag, size_t *bytes);
/* *host: the host copy of [ptr, ptr+size), inside one live allocation that
 * has a backup (while paused, or after a resume with retention on), else
 * NULL. XSA_ERROR_INVALID_POINTER if no live allocation holds ptr;
 * XSA_ERROR_INVALID_VALUE if the range passes the copy's end. */
XSA_API xsa_status xsa_cpu_backup(const void *ptr, size_t size, void **host);
/* *out: what the last xsa_pause (resume 0) or xsa_resume (1) that paused or
 * resumed something on `device` did, step by step (xsalloc/types.h); all
 * zero before the first. */
XSA_API xsa_status xsa_last_pause_report(int device, int resume, xsa_pause_report *out);
/* Retention (read at resume; default 0): the host copies stay after
 * xsa_resume, and the next pause refreshes them in place, at the same
 * addresses, instead of taking new host memory; 0 releases them at resume. */
XSA_API xsa_status xsa_set_backup_retention(int retain);
XSA_API xsa_status xsa_get_backup_retention(int *retain);

/* ---- Several GPUs: peer access ----
 *
 * Grants device `peer` read/write on every mapped page of `device`'s
 * expandable segments, now and on pages mapped later (each newly mapped run
 * gets cuMemSetAccess for the device and all its peers), and on the memory
 * imported for `device` (xsa_ipc_import, xsa_ipc_open), imported before or
 * after. Idempotent;
 * peer == device is a no-op. XSA_ERROR_NOT_SUPPORTED, naming both devices,
 * when cuDeviceCanAccessPeer says the peer cannot access the device's memory,
 * or when the device uses classic cuMemAlloc segments (expandable_segments:
 * False, or no virtual memory management): for those, CUDA's own
 * cuCtxEnablePeerAccess applies and xsalloc does not call it. A driver error
 * part-way may leave some segments granted; calling again completes it.
 * peer_access:True in XSALLOC_CONF does this for every peer that can access
 * a device, when the device's allocator is created. */
XSA_API xsa_status xsa_enable_peer_access(int device, int peer);

/* ---- Several processes: IPC export of a block ----
 *
 * With ipc_handles:True in XSALLOC_CONF, expandable segments create their
 * physical pages exportable as POSIX file descriptors (if the driver
 * refuses, a warning is printed once per device and IPC stays off). A live
 * block of an expandable segment can then be exported: the handle describes
 * the physical handles under it, whole (one fd each; a physical handle
 * holds one or more pages), where the block starts in them and its size.
 * Classic (cuMemAlloc) blocks cannot be exported.
 *
 * Protocol and lifetime (one export = one importer):
 *  1. Exporter: xsa_ipc_export(ptr, &h). The fds in h are the caller's.
 *     Synchronize the work that writes the block before sending.
 *  2. xsa_ipc_send(sock, &h) over a Unix socket (the fds travel as
 *     SCM_RIGHTS ancillary data; the struct's fd fields are meaningless in
 *     another process). Then xsa_ipc_handle_close(&h) closes the sender's fds.
 *  3. Importer: xsa_ipc_recv(sock, &h), xsa_ipc_import(&h, device, &p),
 *     xsa_ipc_handle_close(&h). p maps the same memory in a reservation of
 *     the importer's own, with access for `device`. A handle imports once.
 *  4. Importer: when done (its work on p completed), xsa_ipc_close(p).
 *  The exporter's pages stay pinned from xsa_ipc_export until the importer
 *  has closed (or the export was revoked): the block may be used and freed
 *  as usual, but a freed exported block is not returned to the cache (never
 *  reused, recycled or unmapped, empty_cache included) until then. The
 *  exporter learns of the close without a callback: each export carries a
 *  shared state word (a memfd) that the importer sets, and the exporter
 *  polls it, never blocking, on malloc, free, export and empty_cache.
 *  An export that will never be imported (the send failed, the peer went
 *  away before importing) is ended by the exporter with xsa_ipc_revoke(&h);
 *  an importer that exits without xsa_ipc_close keeps the block pinned
 *  until the exporter's xsa_shutdown. To share a block with N processes,
 *  export it N times. A handle that was already imported, closed or revoked,
 *  or whose exporter shut down, is refused as stale. */

/* Exports the live block at `ptr` (the pointer xsa_malloc returned).
 * XSA_ERROR_NOT_SUPPORTED if IPC is off or the block is classic;
 * XSA_ERROR_INVALID_VALUE if it spans more than XSA_IPC_MAX_PAGES pages. */
XSA_API xsa_status xsa_ipc_export(void *ptr, xsa_ipc_handle *handle);
/* Ends an export that was not imported (the exporter's side); fails with
 * XSA_ERROR_INVALID_VALUE if the importer has it (it ends at its close) or
 * the export is no longer pending. */
XSA_API xsa_status xsa_ipc_revoke(const xsa_ipc_handle *handle);
/* Maps an exported block into this process for use on `device`.
 * XSA_ERROR_INVALID_VALUE for a malformed or stale handle. */
XSA_API xsa_status xsa_ipc_import(const xsa_ipc_handle *handle, int device, void **ptr);
/* Unmaps an imported block and tells the exporter; or ends one open of a
 * share (xsa_ipc_open's base), unmapping it at the last. On a driver error
 * (XSA_ERROR_DRIVER, whatever the driver answered, its out of memory too)
 * the import stays, and closing it again retries. */
XSA_API xsa_status xsa_ipc_close(void *ptr);
/* Sends the handle and its n_handles + 1 fds over a connected Unix socket
 * (several messages when there are more fds than one message carries). */
XSA_API xsa_status xsa_ipc_send(int socket_fd, const xsa_ipc_handle *handle);
/* Receives a handle sent by xsa_ipc_send; its fds are the caller's. */
XSA_API xsa_status xsa_ipc_recv(int socket_fd, xsa_ipc_handle *handle);
/* Closes the handle's fds (those >= 0) and sets them to -1. */
XSA_API void xsa_ipc_handle_close(xsa_ipc_handle *handle);

/* ---- Several processes: a block shared as bytes, for any number of
 * importers (what torch.multiprocessing sends a CUDA tensor as) ----
 *
 * xsa_ipc_share describes a live block as a byte string that any process
 * may open, any number of times, with no fd to send along: the bytes name
 * the exporting process and the fds it keeps open for the block's physical
 * handles, and the importer takes them itself (pidfd_getfd(2)). It needs
 * ipc_handles:True, like xsa_ipc_export. Lifetime:
 *  - The bytes cover the whole physical handles under the block (a handle
 *    holds one or more pages): *offset says where the block starts in them.
 *    The same block, or another over the same handles, gives the same bytes
 *    again, so an importer maps them once.
 *  - Nothing is pinned. The exporter keeps one fd open per shared handle
 *    for as long as the handle stays mapped in its segment, and the caller
 *    keeps the block allocated until every importer has opened the bytes
 *    and is done with the memory (torch's CUDA IPC reference counting does
 *    this). Once the handles are unmapped (the block freed and its pages
 *    released or moved, or xsa_shutdown) the bytes are stale: an open
 *    refuses them, never maps other memory in their place.
 *  - Ordering of GPU work across processes is the caller's: synchronize
 *    the writes before sending, and the importer's work before its close.
 * Taking another process's fds needs the kernel's ptrace permission over
 * it (the same user with Yama ptrace_scope 0, or the exporter naming the
 * importer with prctl(PR_SET_PTRACER), or CAP_SYS_PTRACE) and Linux 5.6. */

/* Shares the live block at `ptr` (the pointer xsa_malloc returned).
 * *bytes (free with xsa_free_buffer) and *len: the byte string; *offset:
 * where ptr is in the memory it describes. XSA_ERROR_NOT_SUPPORTED if IPC
 * is off or the block is classic. */
XSA_API xsa_status xsa_ipc_share(void *ptr, void **bytes, size_t *len, size_t *offset);
/* Maps the memory the bytes describe into this process for use on
 * `device`; *base is its start (add xsa_ipc_share's offset). The same
 * bytes opened again on the same device give the same base; each open is
 * ended by one xsa_ipc_close(base). XSA_ERROR_INVALID_VALUE for bytes that
 * are not a share or are stale (the exporter exited or unmapped the
 * memory); XSA_ERROR_NOT_SUPPORTED, naming the cause, when the kernel
 * refuses to hand over the fds (EPERM: its ptrace restrictions) or lacks
 * pidfd_getfd. */
XSA_API xsa_status xsa_ipc_open(const void *bytes, size_t len, int device, void **base);

/* Runs every invariant checker of the device's allocator (blocks tile the
 * segments, free sets hold exactly the free blocks, stats equal a recount,
 * segment pages and handles agree). XSA_SUCCESS or XSA_ERROR_INVALID_VALUE
 * with the first disagreement in the message. For tests. */
XSA_API xsa_status xsa_check_invariants(int device);

/* ---- Observability: summary, snapshots, trace recording, memory hooks ----
 * Buffers returned below are malloc'd; free them with xsa_free_buffer (or
 * free()). */
XSA_API void xsa_free_buffer(void *buffer);

/* torch.cuda.memory_summary()'s table for `device`, same rows, columns and
 * byte and count formatting (only the title names xsalloc); when memory
 * pools hold segments, xsalloc adds a table of them below (per pool id its
 * segments, reserved, allocated and active bytes); then one line saying
 * where the settings came from: `xsalloc settings from VARIABLE: "TEXT"`
 * (VARIABLE: XSALLOC_CONF, PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, or
 * xsa_init for its string), or `xsalloc settings: all defaults (...)`.
 * abbreviated != 0 leaves out the "from large pool" / "from small pool"
 * rows. *out: a NUL-terminated string. */
XSA_API xsa_status xsa_memory_summary(int device, int abbreviated, char **out);

/* A snapshot of every device, with the structure of PyTorch's
 * torch.cuda.memory._snapshot(): "segments" (device, address, total_size,
 * allocated_size, active_size, requested_size, stream, segment_type
 * "large"/"small", segment_pool_id, is_expandable, frames, blocks: address,
 * size, requested_size, state "active_allocated" / "active_pending_free" /
 * "inactive", frames), "device_traces" (one list per device: the recorded
 * events, see xsa_record_history, with PyTorch's action names and keys
 * action, addr (device_free for oom), size, stream, time_us,
 * compile_context, user_metadata, frames), "allocator_settings" (the
 * settings in use, with PyTorch's "PYTORCH_CUDA_ALLOC_CONF": the settings
 * string, whichever variable gave it, and "conf_source": XSALLOC_CONF,
 * PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, xsa_init or none) and
 * "external_annotations" (empty). As in PyTorch, an expandable segment
 * appears as one segment per mapped range; xsalloc adds
 * "expandable_segments": per reservation its device, address,
 * reserved_size, mapped_size, stream, segment_type, segment_pool_id and
 * mapped_ranges ([address, size] pairs). segment_pool_id is the memory
 * pool's id, (0, 0) for the device's own cache. Frames are always empty. *out: a NUL-terminated
 * JSON text. */
XSA_API xsa_status xsa_snapshot_json(char **out);
/* The same snapshot as a pickle (protocol 4 opcodes, no Python needed),
 * which pytorch.org/memory_viz and torch.cuda._memory_viz open. */
XSA_API xsa_status xsa_snapshot_pickle(void **bytes, size_t *len);
/* Writes xsa_snapshot_pickle's bytes to `path` (PyTorch's _dump_snapshot). */
XSA_API xsa_status xsa_dump_snapshot(const char *path);

/* Trace recording, off by default. enabled != 0 starts recording on every
 * device into a fresh ring of the last max_entries (>= 1) events per
 * device: alloc, free_requested, free_completed, record_stream,
 * segment_alloc/free (classic), segment_map/unmap (expandable pages,
 * including pages moved by page recycling) and oom, each with address,
 * size (the requested size for alloc and free events), stream and
 * CLOCK_MONOTONIC time. enabled == 0 stops recording; what was recorded
 * stays in snapshots until recording starts again or xsa_shutdown. */
XSA_API xsa_status xsa_record_history(int enabled, size_t max_entries);
/* Writes `device`'s recorded events as a trace that the benchmarks replay
 * (benchmarks/README.md): "a <id> <bytes> <stream>", "f <id>" and
 * "r <id> <stream>" lines, ids dense from 0, streams numbered in order of
 * first use. Events about allocations made before the oldest recorded
 * event are left out, so the file always replays. */
XSA_API xsa_status xsa_write_trace(int device, const char *path);

/* The CUDA driver calls xsalloc made, per entry point, since it was
 * initialised. xsa_time_driver_calls(1) starts adding up the time spent in
 * each (two clock reads per call; 0 stops). xsa_driver_calls_json writes
 * {"mem_create": [calls, microseconds, helper calls, helper microseconds],
 * ...} (the helper's: the part made by the helper thread's rounds, so the
 * rest is what the allocating threads paid; entry points never called
 * left out; microseconds 0 while timing was off) into buf and sets
 * *needed to the bytes it takes with the NUL; XSA_ERROR_INVALID_VALUE if
 * len is smaller (call with buf NULL, len 0 to ask). */
XSA_API xsa_status xsa_time_driver_calls(int enabled);
XSA_API xsa_status xsa_driver_calls_json(char *buf, size_t len, size_t *needed);

/* Memory hooks, after CuPy's MemoryHook. For one xsa_malloc: malloc_pre,
 * then only if the cache missed alloc_pre and (if new memory was obtained)
 * alloc_post, then (on success) malloc_post. For one xsa_free: free_pre,
 * free_post. Hooks run on the calling thread with the device's lock held:
 * they may read that device's statistics (xsa_get_stats, xsa_cache_info);
 * any other call on that device fails with XSA_ERROR_NOT_SUPPORTED (it
 * never waits for the lock its own thread holds). */
typedef struct xsa_hook_info {
    int device;
    size_t size;      /* bytes requested by the caller */
    size_t mem_size;  /* malloc_pre, alloc_pre: the rounded size; malloc_post, free_*: the block's size;
                       * alloc_post: the free block the new memory made */
    void *ptr;        /* NULL in malloc_pre and alloc_pre */
    int pool_id;      /* XSA_STAT_SMALL_POOL or XSA_STAT_LARGE_POOL */
    void *stream;     /* the allocation's stream */
} xsa_hook_info;

typedef void (*xsa_hook_fn)(const xsa_hook_info *info, void *user);

/* Any member may be NULL. */
typedef struct xsa_memory_hooks {
    xsa_hook_fn malloc_pre, malloc_post;
    xsa_hook_fn alloc_pre, alloc_post;
    xsa_hook_fn free_pre, free_post;
} xsa_memory_hooks;

#define XSA_MAX_HOOKS 8

/* Registers a set of hooks (copied) with `user` passed to each; *id names
 * it for xsa_unregister_hooks. Sets are called in the order of their ids.
 * At most XSA_MAX_HOOKS sets; xsa_shutdown unregisters them all. */
XSA_API xsa_status xsa_register_hooks(const xsa_memory_hooks *hooks, void *user, int *id);
XSA_API xsa_status xsa_unregister_hooks(int id);

/* ---- For framework adapters (python/xsalloc/csrc/) ----
 * The recorded events and one device's segments as structs, so that an
 * adapter can build a framework's own snapshot and trace types. */

typedef enum xsa_action {
    XSA_ACT_ALLOC,
    XSA_ACT_FREE_REQUESTED,
    XSA_ACT_FREE_COMPLETED,
    XSA_ACT_SEGMENT_ALLOC,
    XSA_ACT_SEGMENT_FREE,
    XSA_ACT_SEGMENT_MAP,
    XSA_ACT_SEGMENT_UNMAP,
    XSA_ACT_OOM,
    XSA_ACT_RECORD_STREAM, /* xsalloc's own: not a PyTorch action */
} xsa_action;

typedef struct xsa_history_entry {
    xsa_action action;
    uintptr_t addr;   /* oom: the device's free bytes */
    size_t size;      /* alloc, free_*, record_stream: requested bytes */
    void *stream;
    uint64_t time_ns; /* CLOCK_MONOTONIC */
    uint64_t tag;     /* the recording thread's xsa_set_trace_tag at the event */
} xsa_history_entry;

/* Sets the calling thread's trace tag (0 at first): every event recorded on
 * this thread carries it until it changes. An adapter tags its calls to
 * find each event's context (a framework's stack) again. */
XSA_API void xsa_set_trace_tag(uint64_t tag);

/* Called with every event as it happens, recorded or not (PyTorch's
 * allocator trace tracker), on the calling thread with the device's lock
 * held: as a memory hook, it may read the device's statistics and any
 * other call on that device fails with XSA_ERROR_NOT_SUPPORTED. fn NULL
 * removes it. */
typedef void (*xsa_trace_fn)(int device, const xsa_history_entry *entry, void *user);
XSA_API xsa_status xsa_set_trace_callback(xsa_trace_fn fn, void *user);

/* One device's segments in address order, each with its blocks in address
 * order, and its recorded events, oldest first (none unless recording was
 * on). Free with xsa_device_snapshot_free. */
typedef struct xsa_device_snapshot {
    xsa_snap_segment *segments;
    size_t n_segments;
    xsa_snap_block *blocks;
    size_t n_blocks;
    xsa_history_entry *history;
    size_t n_history;
} xsa_device_snapshot;

XSA_API xsa_status xsa_device_snapshot_take(int device, xsa_device_snapshot *out);

/* The settings in use (configures if needed, starts nothing), with PyTorch's meanings:
 * where they came from (source: "XSALLOC_CONF", "PYTORCH_ALLOC_CONF",
 * "PYTORCH_CUDA_ALLOC_CONF", "xsa_init", "xsa_set_allocator_settings" once
 * they changed at run time, or NULL when all are defaults) and the last
 * string given (PyTorch's last_allocator_settings); strings stay valid
 * until xsa_shutdown. */
typedef struct xsa_settings {
    const char *source, *text;
    bool expandable_segments, page_recycling;
    size_t max_split_size;               /* SIZE_MAX: no limit */
    double garbage_collection_threshold; /* 0: off */
    size_t roundup_power2_divisions[16];
    bool helper_thread;                  /* xsalloc's own: the helper thread on */
    uint32_t page_decay_ms;              /* xsalloc's own: decay purging's time; 0: off */
} xsa_settings;
XSA_API xsa_status xsa_get_settings(xsa_settings *out);

/* Changes the settings at run time (configures first if needed; before the
 * driver starts, the pools are then made with them): PyTorch's
 * _set_allocator_settings, which the torch adapter forwards here. The
 * string has XSALLOC_CONF's syntax and keys and is checked the same way
 * (XSA_ERROR_CONFIG, naming the key). As in PyTorch, max_split_size_mb,
 * roundup_power2_divisions and garbage_collection_threshold return to
 * their defaults when not given; other keys not given keep their values;
 * a new value applies from the next request on, on every device:
 * expandable_segments decides where new memory goes (memory already held
 * stays where it is; with it False no request is placed in an expandable
 * segment). peer_access, ipc_handles, expandable_handle_mb and
 * per_process_memory_fraction are set when the pools are made: another
 * value than the one in use fails with XSA_ERROR_NOT_SUPPORTED naming the
 * key (as does expandable_segments:False while peer_access or ipc_handles
 * is True); nothing changes on any failure. PyTorch keys xsalloc ignores
 * are accepted and named on stderr once. docs/configuration.md has the table. */
XSA_API xsa_status xsa_set_allocator_settings(const char *conf);
/* What xsa_set_allocator_settings(conf) would answer, with nothing
 * changed: the torch adapter asks it before torch's own setter, so that a
 * string xsalloc refuses leaves both allocators' settings as they were. */
XSA_API xsa_status xsa_check_allocator_settings(const char *conf);
XSA_API void xsa_device_snapshot_free(xsa_device_snapshot *snap);

#ifdef __cplusplus
}
#endif
#endif
