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

#ifdef __cplusplus
}
#endif
#endif
