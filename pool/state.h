/*
 * pool/state: the pool's state, shared by its source files: the records
 * (memory pools, routes, segments, drains, exports, the pool) and the
 * inline accounting every malloc and free does. No functions of any file:
 * each file's calls are in its own header.
 *
 * Design: the files are in layers, each calling only those below it.
 *   core:     errors.c (refusals' sentences), block.c, free_set.c, ptr_map.c, events.c, ipc_state.c,
 *             trace.c (observation points), stats.c, mempool.c (memory
 *             pool records and routing), own_allocator.c (memory pools
 *             with an allocator of their own, their flags, the memory of
 *             classic segments), core.c (segment records, free-set
 *             membership, split and merge, returning freed blocks);
 *   policies: pages.c (an expandable segment's pages as blocks), sweep.c,
 *             recycle.c (page recycling), expand.c (growing expandable
 *             segments), ipc.c (IPC exports), peer.c (peer access),
 *             release.c (giving memory back), capture.c (the memory pool
 *             calls and capture), capture_reuse.c (capture-time reuse),
 *             checkpoint.c (a memory pool's blocks set to a checkpoint),
 *             settings.c (options changed at run time), backup.c (host
 *             copies of blocks), pause.c (tagged pools paused and resumed),
 *             decay.c (pages unused long enough released), ready.c (pages
 *             mapped ahead of a growth), jobs.c (the helper thread's work:
 *             decay, readying and retiring recycling's old mappings);
 *   readers:  check.c, snapshot.c, info.c;
 *   top:      pool.c (create, malloc, free, record_stream, destroy).
 * Not part of the pool's interface (api/ uses pool.h and the policies'
 * headers).
 */
#ifndef XSA_POOL_STATE_H
#define XSA_POOL_STATE_H

#include "pool/block.h"
#include "pool/events.h"
#include "pool/free_set.h"
#include "pool/ipc_state.h"
#include "pool/options.h"
#include "pool/ptr_map.h"
#include "pool/types.h"
#include "vmm/segment.h"
#include "xsalloc/types.h"

/* PyTorch's constants. */
#define XSA_MIN_BLOCK_SIZE ((size_t)512)
#define XSA_SMALL_SIZE ((size_t)1 << 20)        /* largest small request */
#define XSA_SMALL_BUFFER ((size_t)2 << 20)      /* small segment */
#define XSA_LARGE_BUFFER ((size_t)20 << 20)     /* segment for 1-10 MiB misses */
#define XSA_MIN_LARGE_ALLOC ((size_t)10 << 20)
#define XSA_ROUND_LARGE ((size_t)2 << 20)

/* A memory pool (PyTorch's private pool / MemPool): its own segments and
 * free sets, so that its memory goes to its own allocations only. The
 * device's allocator has one built in, the global memory pool (id {0, 0}),
 * which serves every allocation not routed to another one. */
typedef struct xsa_mempool {
    xsa_mempool_id id;
    int use_count;             /* creates and begins, less releases; 0: released (global: always 1) */
    int holds;                 /* pools in use that keep this released one's memory (`kept`) */
    /* A captured graph may use its memory at replays, which run on any
     * stream, ones the pool never sees too: it gives memory back only after
     * a device-wide wait (release.c), which clears the flag. */
    bool replayed;
    size_t segments;           /* its segments */
    /* Its own allocator (alloc NULL: the device's memory) and PyTorch's
     * MemPool flags (pool/own_allocator.c). */
    xsa_mempool_allocator allocator;
    bool use_on_oom;           /* lends its free blocks to the global pool's misses while in use */
    bool no_split;             /* never splits a block; unchanged while it holds segments */
    /* Pause and resume (pool/pause.c): its tag (0: none; api/ names
     * them), the tag's XSA_TAG_* flags, whether a malloc into it saw its
     * stream capturing (its graphs replay over its free blocks, on any
     * stream), and whether it is paused (its pages released, its ranges
     * kept). */
    uint32_t tag;
    uint32_t tag_flags;
    char tag_name[64];         /* for messages */
    bool captured;
    bool paused;
    xsa_free_set free[XSA_POOL_KINDS];
    /* Released pools a block of which was freed while this pool captured:
     * the graph may use that memory at every replay, so they keep it until
     * this pool is released too (mempool.c). */
    struct xsa_mempool **kept;
    size_t n_kept, cap_kept;
    struct xsa_mempool *next;
} xsa_mempool;

/* Routing of a begin_allocate_to_pool: allocations on streams `filter`
 * accepts (every stream if NULL) go to mp. */
typedef struct xsa_route {
    xsa_mempool *mp;
    xsa_stream_filter filter;
    void *ctx;
    bool capture;              /* a graph capture: no event queries while it lasts */
} xsa_route;

/* How a segment's blocks split (PyTorch's should_split, decided once per
 * segment): any rest of at least 512 bytes (small pool, expandable
 * segments), the classic large rule (below max_split_size, a rest above
 * 1 MiB), or never (a no_split memory pool). */
typedef enum { XSA_SPLIT_ANY_REST, XSA_SPLIT_CLASSIC_LARGE, XSA_SPLIT_NEVER } xsa_split_rule;

/* A segment: a cuMemAlloc'd range (classic), or the reserved range of an
 * expandable segment (one per memory pool, stream and pool kind). */
typedef struct xsa_seg {
    xsa_mempool *mp;
    xsa_free_set *set;         /* mp->free[kind]: one load on the hot paths */
    xsa_pool_kind kind;
    xsa_stream stream;
    bool expandable;
    uint8_t split;             /* xsa_split_rule: one load on the hot path */
    uintptr_t base;
    size_t size;               /* classic: allocation size; expandable: reserved */
    xsa_block *first;          /* lowest-address block */
    xsa_segment vm;            /* expandable only */
    size_t draining_pages;     /* mapped in vm but moved on (pool/recycle) or being released (pool/decay): not this segment's memory */
    /* Its memory pool is paused: nothing is mapped in vm, and the pages its
     * mapped blocks cover are the ones a resume maps again (pool/pause.c). */
    bool paused;
    size_t held;               /* blocks a helper job holds (pool/jobs.c): the segment stays while any */
    /* Where the last growth that created pages ended and how many it
     * created: the helper readies pages there (pool/ready.c); 0 pages: none. */
    size_t grew_at, grew_pages;
    /* Decay (pool/decay.c): per page below n_free_since, since when the
     * helper has seen it free (its clock's ns; 0: not free); and a bit a
     * page, set when a block on it is handed out, cleared at each tick
     * (NULL until decay first ticks): the pages requests used between two
     * ticks, which a step's short-lived blocks leave free by the tick. */
    uint64_t *free_since;
    size_t n_free_since;
    uint64_t *used_pages;
    struct xsa_seg *prev_seg, *next_seg;
} xsa_seg;

/* Pages of an expandable segment the pool holds: mapped and not draining. */
static inline size_t xsa_seg_owned_pages(const xsa_seg *s) { return s->vm.mapped_pages - s->draining_pages; }

/* Events recorded on every segment stream of the device by a growth that
 * moved pages (pool/sweep.c): the old addresses it left go once all have
 * completed. Shared by that growth's drains. */
typedef struct xsa_sweep {
    xsa_event *events;
    size_t n_events;
    size_t pending;            /* events[0, pending) not yet seen complete */
    size_t drains;             /* drains waiting on it */
} xsa_sweep;

/* A draining block's old mapping, unmapped once `event` (recorded on its
 * segment's stream when its pages moved) and its growth's sweep have
 * completed (pool/recycle.c). */
typedef struct xsa_drain {
    xsa_block *block;
    xsa_event event;
    xsa_sweep *sweep;
    bool held;                 /* its unmap is a helper job's, under way (pool/jobs.c) */
    /* The helper has unmapped it; the pool's records say draining (the
     * block held) until the next growth or release takes it back, where
     * the drain would have been unmapped without the helper, so the pool's
     * choices are the same with it and without. */
    bool unmapped;
    struct xsa_drain *next;
} xsa_drain;

/* The helper thread's side of the pool (pool/jobs.h): told when work for
 * it appears, and a failure of its work kept for the next caller. */
typedef struct xsa_pool_helper {
    void (*wake)(void *ctx, int device);
    void *ctx;
    bool wanted;               /* work is waiting for the next round (a growth's pages to ready, drains) */
    uint64_t polled;           /* the last round (the helper's clock, ns) */
    size_t jobs;               /* jobs planned and not yet committed */
    uint64_t emptied;          /* cached memory given back so far (xsa_release_cached): a readying across one undoes */
    xsa_pool_status notice;    /* a helper job's failure for the next malloc or empty_cache; OK: none */
    char notice_msg[256];
} xsa_pool_helper;

/* An IPC export not yet seen closed or revoked (pool/ipc.c). */
typedef struct xsa_export {
    xsa_block *block;
    xsa_ipc_state *state;      /* shared with the importer */
    uint64_t id;
    struct xsa_export *next;
} xsa_export;

struct xsa_pool {
    xsa_driver *drv;
    int device;
    xsa_pool_options opt;
    bool expandable;           /* effective (false when the device lacks VMM) */
    int8_t vmm;                /* the device can map virtual memory: 1, 0, -1 not asked yet */
    bool ipc;                  /* effective: exportable pages (ipc_handles, unless refused) */
    xsa_mem_handle probe_left; /* the IPC probe's trial handle if its release failed: released at destroy */
    int peers[XSA_SEGMENT_MAX_ACCESS - 1]; /* devices granted access to every segment */
    int n_peers;
    xsa_export *exports;
    /* malloc has something to look at besides the cache: exports to poll
     * or a helper notice (xsa_pool_update_attend). */
    bool attend;
    size_t device_total;
    size_t allowed_max;        /* memory fraction * device_total */
    size_t page_size;
    size_t reserved;           /* bytes mapped or cuMemAlloc'd (PyTorch's total_allocated_memory) */
    int64_t allocated_high;    /* highest allocated bytes before the last peak reset (recycling headroom) */
    int64_t reserved_high;     /* highest reserved bytes before the last peak reset (decay's regrowth) */
    /* Decay reads the peak of allocated bytes between its ticks by resetting
     * allocated_bytes[ALL].peak: the user's peak it took out is kept here
     * (readers take the max, pool/stats.c), and the tick's peak that a
     * user's reset took out. */
    int64_t peak_held, interval_peak_held;
    struct xsa_decay *decay;   /* pool/decay.c's state; NULL until decay first runs */
    xsa_pool_helper helper;
    xsa_mempool global;        /* the device's own cache */
    xsa_mempool *mempools;     /* the others, newest first */
    xsa_route *routes;         /* oldest first; the newest accepting route wins */
    int n_routes, cap_routes;
    int capturing;             /* routes with capture set */
    /* Blocks freed during capture with uses on other streams: their
     * events are recorded once no capture is under way (capture.c). */
    xsa_block **deferred;
    size_t n_deferred, cap_deferred;
    struct xsa_capture_reuse *reuse; /* free markers of deferred blocks (capture_reuse.c); NULL: none */
    uint64_t free_lookups[XSA_POOL_KINDS]; /* get_free_block calls, for GC ages */
    xsa_ptr_map allocated;
    xsa_block_cache blocks;
    xsa_events events;
    xsa_seg *segments;
    xsa_drain *drains;         /* newest first */
    size_t live_blocks;        /* allocated or pending free */
    xsa_device_stats stats;
    xsa_pool_listener listener;
    xsa_observer_fn observer;  /* pool/trace.h; NULL: none */
    void *observer_ctx;
    xsa_stream copy_stream;    /* backups' copies (pool/backup.c); NULL until the first */
    xsa_pause_report reports[2]; /* the last pause's and resume's (pool/pause.c) */
    struct xsa_arena *arenas;  /* host memory holding backups (pool/backup.c) */
};

/* Work for the helper thread appeared (a growth to ready pages after,
 * drains to retire): its next round should come soon. */
static inline void xsa_pool_want_helper(xsa_pool *p) {
    if (!p->opt.helper_thread) return;
    p->helper.wanted = true;
    if (p->helper.wake) p->helper.wake(p->helper.ctx, p->device);
}

/* malloc's one test for exports to poll or a helper notice to report. */
static inline void xsa_pool_update_attend(xsa_pool *p) {
    p->attend = p->exports != NULL || p->helper.notice != XSA_POOL_OK;
}

/* PyTorch's Stat arithmetic (current, peak, allocated, freed); inline
 * because every malloc and free updates several. */
static inline void xsa_stat_update(xsa_stat *stat, int64_t amount) {
    stat->current += amount;
    if (stat->current > stat->peak) stat->peak = stat->current;
    if (amount > 0)
        stat->allocated += amount;
    else
        stat->freed -= amount;
}

/* The stat of a pool kind: XSA_STAT_SMALL_POOL / XSA_STAT_LARGE_POOL follow
 * XSA_STAT_ALL in the kinds' order. */
_Static_assert(XSA_STAT_SMALL_POOL == 1 + XSA_POOL_SMALL && XSA_STAT_LARGE_POOL == 1 + XSA_POOL_LARGE,
               "stat types follow the pool kinds");

/* Which stats a pool kind updates: all + its own. For XSA_STAT_ALL only
 * current and peak are kept: its allocated and freed are the sums of the
 * two pools', filled in by xsa_pool_get_stats (a store less for each of
 * the ~30 updates of a malloc/free pair). */
static inline void xsa_stat_current(xsa_stat *stat, int64_t amount) {
    stat->current += amount;
    if (stat->current > stat->peak) stat->peak = stat->current;
}

static inline void xsa_stats_update(xsa_stat *stat_by_type, xsa_pool_kind kind, int64_t amount) {
    xsa_stat_current(&stat_by_type[XSA_STAT_ALL], amount);
    xsa_stat_update(&stat_by_type[1 + kind], amount);
}

/* The same for an amount known to be >= 0 (add) or removed (sub): the
 * sign test and, for sub, the peak test are left out. */
static inline void xsa_stats_add(xsa_stat *stat_by_type, xsa_pool_kind kind, int64_t amount) {
    xsa_stat_current(&stat_by_type[XSA_STAT_ALL], amount);
    xsa_stat *own = &stat_by_type[1 + kind];
    own->current += amount;
    own->allocated += amount;
    if (own->current > own->peak) own->peak = own->current;
}

static inline void xsa_stats_sub(xsa_stat *stat_by_type, xsa_pool_kind kind, int64_t amount) {
    stat_by_type[XSA_STAT_ALL].current -= amount;
    stat_by_type[1 + kind].current -= amount;
    stat_by_type[1 + kind].freed += amount;
}

/* The free set of block b's memory pool and kind. */
static inline xsa_free_set *xsa_free_set_of(const xsa_block *b) { return b->seg->set; }

/* inactive_split counts the free split blocks of classic segments only, as
 * PyTorch's does: the free pages of an expandable segment can always be
 * released. Like PyTorch, the hot paths change it once by the net effect
 * of a split or merge. */
typedef struct xsa_split_tally {
    int64_t count, bytes;
} xsa_split_tally;

/* Adds (sign +1) or takes away (-1) b's share of inactive_split. */
static inline void xsa_tally(xsa_split_tally *t, const xsa_block *b, int sign) {
    if (b->seg->expandable || !xsa_block_is_split(b)) return;
    t->count += sign;
    t->bytes += sign * (int64_t)b->size;
}

static inline void xsa_inactive_split_change(xsa_pool *p, xsa_pool_kind kind, xsa_split_tally t) {
    if (t.count) xsa_stats_update(p->stats.inactive_split, kind, t.count);
    if (t.bytes) xsa_stats_update(p->stats.inactive_split_bytes, kind, t.bytes);
}

/* A block becoming free: its age for garbage collection. */
static inline void xsa_stamp_free(const xsa_pool *p, xsa_block *b) { b->gc_base = p->free_lookups[b->seg->kind]; }

/* The page of segment s holding address a, and the first page that
 * starts at or above a. */
static inline size_t xsa_seg_page_of(const xsa_pool *p, const xsa_seg *s, uintptr_t a) {
    return (a - s->base) / p->page_size;
}
static inline size_t xsa_seg_page_above(const xsa_pool *p, const xsa_seg *s, uintptr_t a) {
    return (a - s->base + p->page_size - 1) / p->page_size;
}

/* Decay's record (xsa_seg.used_pages) that b's pages were used. */
static inline void xsa_mark_used(const xsa_pool *p, const xsa_block *b) {
    xsa_seg *s = b->seg;
    size_t pg = xsa_seg_page_of(p, s, b->ptr), hi = xsa_seg_page_above(p, s, b->ptr + b->size);
    for (; pg < hi && pg % 64; pg++) s->used_pages[pg / 64] |= 1ull << (pg % 64);
    for (; pg + 64 <= hi; pg += 64) s->used_pages[pg / 64] = ~0ull;
    for (; pg < hi; pg++) s->used_pages[pg / 64] |= 1ull << (pg % 64);
}

/* Marks b (out of the free set) allocated, in the pointer map (room was
 * reserved) and the stats: the end of every malloc and of a restore's
 * allocations. Inline: it is on the hot path. */
static inline void xsa_pool_hand_out(xsa_pool *p, xsa_block *b, size_t requested) {
    xsa_pool_kind kind = b->seg->kind;
    b->allocated = true;
    b->requested = requested;
    b->capture_id = 0; /* malloc stamps it during a capture (pool/capture_reuse.c) */
    xsa_ptr_map_insert_reserved(&p->allocated, b->ptr, b);
    if (__builtin_expect(b->seg->used_pages != NULL, 0)) xsa_mark_used(p, b);
    p->live_blocks++;
    xsa_stats_add(p->stats.allocation, kind, 1);
    xsa_stats_add(p->stats.allocated_bytes, kind, (int64_t)b->size);
    xsa_stats_add(p->stats.active, kind, 1);
    xsa_stats_add(p->stats.active_bytes, kind, (int64_t)b->size);
    xsa_stats_add(p->stats.requested_bytes, kind, (int64_t)requested);
    if (b->size >= p->opt.max_split_size) xsa_stat_update(&p->stats.oversize_allocations, 1);
}

/* The reverse for an allocation being freed (already out of the pointer
 * map): no longer allocated, out of the allocation stats. It stays
 * active until xsa_pool_free_block returns it to the cache. */
static inline void xsa_pool_give_back(xsa_pool *p, xsa_block *b) {
    xsa_pool_kind kind = b->seg->kind;
    b->allocated = false;
    xsa_stats_sub(p->stats.allocation, kind, 1);
    xsa_stats_sub(p->stats.allocated_bytes, kind, (int64_t)b->size);
    xsa_stats_sub(p->stats.requested_bytes, kind, (int64_t)b->requested);
    if (b->size >= p->opt.max_split_size) xsa_stat_update(&p->stats.oversize_allocations, -1);
}

#endif
