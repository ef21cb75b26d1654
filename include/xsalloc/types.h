/*
 * xsalloc/types: the types that the public API (xsalloc/xsalloc.h) and the
 * layers below it share: statistics, memory pool ids, live blocks and
 * restores, IPC handles and snapshot records. No functions: their
 * semantics are documented with the calls that take them, in xsalloc.h.
 */
#ifndef XSALLOC_TYPES_H
#define XSALLOC_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One statistic, as in PyTorch's Stat. */
typedef struct xsa_stat {
    int64_t current, peak, allocated, freed;
} xsa_stat;

enum { XSA_STAT_ALL = 0, XSA_STAT_SMALL_POOL = 1, XSA_STAT_LARGE_POOL = 2, XSA_STAT_TYPES = 3 };

/* PyTorch's DeviceStats, same names and definitions. Arrays are indexed by
 * XSA_STAT_ALL / XSA_STAT_SMALL_POOL / XSA_STAT_LARGE_POOL. */
typedef struct xsa_device_stats {
    xsa_stat allocation[XSA_STAT_TYPES];           /* blocks handed out */
    xsa_stat segment[XSA_STAT_TYPES];              /* cuMemAlloc'd (classic) segments; as in PyTorch,
                                                    * expandable segments never count: their pages
                                                    * count in reserved_bytes and num_device_alloc */
    xsa_stat active[XSA_STAT_TYPES];               /* allocated or pending-free blocks */
    xsa_stat inactive_split[XSA_STAT_TYPES];       /* free blocks inside partly used classic segments
                                                    * (PyTorch leaves expandable ones out: their free
                                                    * pages can always be released) */
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
    /* xsalloc's own: the page bytes that paused memory pools released
     * (xsa_pause); they are out of reserved_bytes until resumed, and the
     * pools' blocks out of allocation, allocated_bytes, active,
     * active_bytes and requested_bytes (current values). */
    xsa_stat paused_bytes;
    /* xsalloc's own: calls on the device that slept for its lock (another
     * thread held it: the helper thread's rounds, another thread of the
     * program) and the microseconds they slept; accumulated (reset by
     * xsa_reset_accumulated_stats). */
    int64_t num_device_lock_waits;
    int64_t device_lock_wait_us;
} xsa_device_stats;

/* A memory pool's id: a pair of integers like PyTorch's MempoolId_t ({0, 0}
 * is the device's own cache). */
typedef struct xsa_mempool_id {
    uint64_t first, second;
} xsa_mempool_id;

/* Pause and resume (xsalloc.h, "Pause and resume"): a tag's flags... */
#define XSA_TAG_CPU_BACKUP 0x1u      /* a pause copies live bytes to host memory; resume restores them */
#define XSA_TAG_BACKUP_MMAP 0x2u     /* the host copy is mmap'd memory registered with the driver */
/* ...and a pause's. */
#define XSA_PAUSE_BACKUP 0x1u        /* back up every paused pool's live bytes, whatever its tag's flags */
#define XSA_PAUSE_DISCARD 0x2u       /* back up nothing, whatever the flags */
#define XSA_PAUSE_SYNC_DEVICE 0x4u   /* wait for all of the device's work, not only its streams' */

/* What the last pause or resume of a device's memory pools did, and how
 * long each step took (xsa_last_pause_report). */
typedef struct xsa_pause_report {
    uint64_t wait_ns;      /* pause: waiting for the work that used the pages */
    uint64_t copy_ns;      /* copying the live bytes to host memory (pause, host memory taken included) or back */
    uint64_t map_ns;       /* unmapping and releasing the pages (pause) or creating and mapping them (resume) */
    uint64_t copied_bytes; /* live bytes copied */
    uint64_t pages;        /* pages released or mapped */
    uint32_t pools;        /* memory pools paused or resumed */
} xsa_pause_report;

/* Says whether an allocation on `stream` goes to the pool. */
typedef bool (*xsa_stream_filter)(void *ctx, void *stream);

/* A memory pool's own allocator (PyTorch's MemPool(allocator): NCCL's
 * ncclMemAlloc, symmetric memory, registered buffers). alloc returns
 * `size` bytes of device memory for `stream` (NULL: out of memory); free
 * takes back a pointer alloc returned, with the same size, device and
 * stream. release (may be NULL) is told once that the pool is done with
 * ctx: after the pool's last segment went back through free. All three
 * are called with the device's lock held and the thread in relaxed
 * capture mode (as PyTorch calls them): they must not call xsalloc. */
typedef struct xsa_mempool_allocator {
    void *(*alloc)(void *ctx, size_t size, int device, void *stream);
    void (*free)(void *ctx, void *ptr, size_t size, int device, void *stream);
    void (*release)(void *ctx);
    void *ctx;
} xsa_mempool_allocator;

/* A live block of a memory pool, as a checkpoint lists it. */
typedef struct xsa_live_block {
    void *ptr;
    size_t size;      /* the block's size (the request rounded, as snapshots show it) */
    size_t requested; /* the size asked for (requested_bytes) */
    void *stream;     /* the stream it was allocated on */
} xsa_live_block;

/* What a restore changed: the pool's allocations it freed (allocated and
 * not in the set) and the blocks of the set it allocated (the others were
 * allocated already, at the same address and size: they stay allocated,
 * only their requested size becomes the set's). Free the arrays with
 * xsa_restore_delta_free. */
typedef struct xsa_restore_delta {
    void **freed;
    size_t n_freed;
    void **allocated;
    size_t n_allocated;
} xsa_restore_delta;

/* An IPC export (xsa_ipc_export): a fixed-size struct without pointers. */
#define XSA_IPC_MAX_PAGES 1024 /* pages per handle: 2 GiB of 2 MiB pages */

typedef struct xsa_ipc_handle {
    uint32_t magic;          /* XSA_IPC_MAGIC */
    uint32_t version;        /* XSA_IPC_VERSION */
    uint64_t export_id;      /* unique per export (exporter's pid and a counter) */
    int32_t device;          /* exporter's device, in the exporter's numbering */
    int32_t n_pages;         /* pages of all its physical handles */
    uint64_t page_size;
    uint64_t offset;         /* block start past the first physical handle's start */
    uint64_t size;           /* block size */
    int32_t state_fd;        /* the shared state word's memfd, in this process */
    int32_t n_handles;       /* physical handles, in address order */
    int32_t fds[XSA_IPC_MAX_PAGES];      /* one per physical handle, in this process; -1 past n_handles */
    uint32_t pages[XSA_IPC_MAX_PAGES];   /* pages of each physical handle; 0 past n_handles */
} xsa_ipc_handle;

#define XSA_IPC_MAGIC 0x78736169u /* "xsai" */
#define XSA_IPC_VERSION 2u

/* Snapshot records: a block and the segment holding it. */
typedef enum xsa_snap_state { XSA_SNAP_ALLOCATED, XSA_SNAP_PENDING_FREE, XSA_SNAP_INACTIVE } xsa_snap_state;

typedef struct xsa_snap_block {
    uintptr_t addr;
    size_t size;
    size_t requested;        /* 0 unless allocated or pending free */
    xsa_snap_state state;
} xsa_snap_block;

/* A segment as PyTorch reports it: a cuMemAlloc'd segment, or one mapped
 * run of an expandable segment. */
typedef struct xsa_snap_segment {
    uintptr_t addr;
    size_t total_size, allocated_size, active_size, requested_size;
    void *stream;
    xsa_mempool_id pool_id;  /* its memory pool; {0, 0}: the device's own cache */
    bool large;
    bool expandable;
    bool paused;             /* its memory pool is paused: no page is mapped until resumed */
    uintptr_t reservation;   /* base of the expandable range holding it; addr if classic */
    size_t first_block, n_blocks; /* its blocks in the snapshot's blocks */
} xsa_snap_segment;

#endif
