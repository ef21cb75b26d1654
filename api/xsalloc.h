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
 * Initialisation is lazy: the first call initialises from XSALLOC_CONF. Call
 * xsa_init() first to pass a configuration string instead.
 */
#ifndef XSALLOC_H
#define XSALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
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
} xsa_status;

const char *xsa_status_name(xsa_status status);
/* The detail of the last error on this thread ("" if none). */
const char *xsa_last_error(void);

/* Selects the driver before initialisation: "cuda", "sim", or NULL for the
 * default (environment XSA_DRIVER, else cuda when a GPU is usable, else sim). */
xsa_status xsa_use_driver(const char *name);
/* Name of the driver in use ("cuda" or "sim"); initialises if needed. */
const char *xsa_driver_name(void);

/* Initialises from `conf` (PYTORCH_CUDA_ALLOC_CONF syntax), or from the
 * environment variable XSALLOC_CONF when conf is NULL. Fails with
 * XSA_ERROR_ALREADY_INITIALIZED if initialised (call xsa_shutdown first). */
xsa_status xsa_init(const char *conf);
/* Frees every cached block, returns all memory to the driver and forgets the
 * configuration. Live allocations are released too (their pointers become
 * invalid); xsa_live_allocations tells how many there were. */
xsa_status xsa_shutdown(void);

xsa_status xsa_device_count(int *count);
/* The calling thread's current device (default 0), used by xsa_malloc_current. */
xsa_status xsa_set_device(int device);
xsa_status xsa_get_device(int *device);

/* Allocates `size` bytes on `device` for use on `stream` (NULL: the legacy
 * default stream). size 0 succeeds with *ptr = NULL. */
xsa_status xsa_malloc(void **ptr, size_t size, int device, void *stream);
xsa_status xsa_malloc_current(void **ptr, size_t size, void *stream);
/* Frees a pointer returned by xsa_malloc. NULL is a no-op. If the block was
 * used on other streams (xsa_record_stream), it returns to the cache once
 * the work queued on those streams so far has completed. */
xsa_status xsa_free(void *ptr);
/* Marks `ptr` as used by `stream` (PyTorch's recordStream). */
xsa_status xsa_record_stream(void *ptr, void *stream);

/* Releases every cached (free) block's memory to the driver on all devices,
 * waiting for pending record_stream events first. */
xsa_status xsa_empty_cache(void);
/* Free cached bytes on a device and the largest free cached block. */
xsa_status xsa_cache_info(int device, size_t *cached_free, size_t *largest);
/* The segment allocation (cuMemAlloc'd segment, or expandable range's mapped
 * extent) containing `ptr`: its base and size. */
xsa_status xsa_get_base_allocation(void *ptr, void **base, size_t *size);
/* Caps reserved memory on `device` at fraction * device total (0 < f <= 1). */
xsa_status xsa_set_memory_fraction(double fraction, int device);

/* One statistic, as in PyTorch's Stat. */
typedef struct xsa_stat {
    int64_t current, peak, allocated, freed;
} xsa_stat;

enum { XSA_STAT_ALL = 0, XSA_STAT_SMALL_POOL = 1, XSA_STAT_LARGE_POOL = 2, XSA_STAT_TYPES = 3 };

/* PyTorch's DeviceStats, same names and definitions. Arrays are indexed by
 * XSA_STAT_ALL / XSA_STAT_SMALL_POOL / XSA_STAT_LARGE_POOL. */
typedef struct xsa_device_stats {
    xsa_stat allocation[XSA_STAT_TYPES];           /* blocks handed out */
    xsa_stat segment[XSA_STAT_TYPES];              /* segments (expandable: mapped extents) */
    xsa_stat active[XSA_STAT_TYPES];               /* allocated or pending-free blocks */
    xsa_stat inactive_split[XSA_STAT_TYPES];       /* free blocks inside partly used segments */
    xsa_stat allocated_bytes[XSA_STAT_TYPES];
    xsa_stat reserved_bytes[XSA_STAT_TYPES];
    xsa_stat active_bytes[XSA_STAT_TYPES];
    xsa_stat inactive_split_bytes[XSA_STAT_TYPES];
    xsa_stat requested_bytes[XSA_STAT_TYPES];
    int64_t num_alloc_retries;
    int64_t num_ooms;
    int64_t num_sync_all_streams;
    int64_t num_device_alloc;
    int64_t num_device_free;
    xsa_stat oversize_allocations;
    xsa_stat oversize_segments;
    int64_t max_split_size;
    /* xsalloc's own: pages mapped/unmapped by expandable segments, and pages
     * moved between segments by page recycling. */
    int64_t num_pages_mapped;
    int64_t num_pages_unmapped;
    int64_t num_pages_recycled;
} xsa_device_stats;

xsa_status xsa_get_stats(int device, xsa_device_stats *stats);
xsa_status xsa_reset_peak_stats(int device);
xsa_status xsa_reset_accumulated_stats(int device);

/* Runs every invariant checker of the device's allocator (blocks tile the
 * segments, free sets hold exactly the free blocks, stats equal a recount,
 * segment pages and handles agree). XSA_SUCCESS or XSA_ERROR_INVALID_VALUE
 * with the first disagreement in the message. For tests. */
xsa_status xsa_check_invariants(int device);

/* ---- Observability: summary, snapshots, trace recording, memory hooks ----
 * Buffers returned below are malloc'd; free them with xsa_free_buffer (or
 * free()). */
void xsa_free_buffer(void *buffer);

/* torch.cuda.memory_summary()'s table for `device`, same rows, columns and
 * byte and count formatting (only the title names xsalloc). abbreviated != 0
 * leaves out the "from large pool" / "from small pool" rows. *out: a
 * NUL-terminated string. */
xsa_status xsa_memory_summary(int device, int abbreviated, char **out);

/* A snapshot of every device, with the structure of PyTorch's
 * torch.cuda.memory._snapshot(): "segments" (device, address, total_size,
 * allocated_size, active_size, requested_size, stream, segment_type
 * "large"/"small", segment_pool_id, is_expandable, frames, blocks: address,
 * size, requested_size, state "active_allocated" / "active_pending_free" /
 * "inactive", frames), "device_traces" (one list per device: the recorded
 * events, see xsa_record_history, with PyTorch's action names and keys
 * action, addr (device_free for oom), size, stream, time_us,
 * compile_context, user_metadata, frames), "allocator_settings" and
 * "external_annotations" (empty). As in PyTorch, an expandable segment
 * appears as one segment per mapped range; xsalloc adds
 * "expandable_segments": per reservation its device, address,
 * reserved_size, mapped_size, stream, segment_type and mapped_ranges
 * ([address, size] pairs). Frames are always empty. *out: a NUL-terminated
 * JSON text. */
xsa_status xsa_snapshot_json(char **out);
/* The same snapshot as a pickle (protocol 4 opcodes, no Python needed),
 * which pytorch.org/memory_viz and torch.cuda._memory_viz open. */
xsa_status xsa_snapshot_pickle(void **bytes, size_t *len);
/* Writes xsa_snapshot_pickle's bytes to `path` (PyTorch's _dump_snapshot). */
xsa_status xsa_dump_snapshot(const char *path);

/* Trace recording, off by default. enabled != 0 starts recording on every
 * device into a fresh ring of the last max_entries (>= 1) events per
 * device: alloc, free_requested, free_completed, record_stream,
 * segment_alloc/free (classic), segment_map/unmap (expandable pages,
 * including pages moved by page recycling) and oom, each with address,
 * size (the requested size for alloc and free events), stream and
 * CLOCK_MONOTONIC time. enabled == 0 stops recording; what was recorded
 * stays in snapshots until recording starts again or xsa_shutdown. */
xsa_status xsa_record_history(int enabled, size_t max_entries);
/* Writes `device`'s recorded events as a trace that the benchmarks replay
 * (benchmarks/README.md): "a <id> <bytes> <stream>", "f <id>" and
 * "r <id> <stream>" lines, ids dense from 0, streams numbered in order of
 * first use. Events about allocations made before the oldest recorded
 * event are left out, so the file always replays. */
xsa_status xsa_write_trace(int device, const char *path);

/* Memory hooks, after CuPy's MemoryHook. For one xsa_malloc: malloc_pre,
 * then only if the cache missed alloc_pre and (if new memory was obtained)
 * alloc_post, then (on success) malloc_post. For one xsa_free: free_pre,
 * free_post. Hooks run on the calling thread with the device's lock held:
 * they must not call xsalloc. */
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
xsa_status xsa_register_hooks(const xsa_memory_hooks *hooks, void *user, int *id);
xsa_status xsa_unregister_hooks(int id);


#ifdef __cplusplus
}
#endif
#endif
