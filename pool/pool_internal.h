/*
 * pool/pool_internal: the pool's state, shared by its source files. The
 * core, which calls nothing above it: core.c (segments, free-set
 * membership, split and merge), mempool.c (memory pool records and
 * routing), own_allocator.c (memory pools with an allocator of their
 * own, their flags, the memory of classic segments), checkpoint.c (a
 * memory pool's blocks set to a checkpoint), free_set.c, block.c,
 * events.c, stats.c. The policies above it:
 * pages.c (an expandable segment's pages as blocks), recycle.c (page
 * recycling), expand.c (growing expandable segments), release.c (giving
 * memory back), ipc.c (IPC exports), peer.c (peer access), capture.c (the
 * memory pool calls and capture), capture_reuse.c (capture-time reuse),
 * settings.c (options changed at run time); pool.c (malloc/free) on top;
 * check.c,
 * snapshot.c and info.c read. No file calls one above it. Not part of the
 * pool's interface.
 */
#ifndef XSA_POOL_INTERNAL_H
#define XSA_POOL_INTERNAL_H

#include "pool/block.h"
#include "pool/events.h"
#include "pool/free_set.h"
#include "pool/ipc_state.h"
#include "pool/pool.h"
#include "pool/ptr_map.h"
#include "vmm/segment.h"

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
    size_t draining_pages;     /* mapped in vm but moved on (pool/recycle): not this segment's memory */
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
    struct xsa_drain *next;
} xsa_drain;

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
    size_t device_total;
    size_t allowed_max;        /* memory fraction * device_total */
    size_t page_size;
    size_t reserved;           /* bytes mapped or cuMemAlloc'd (PyTorch's total_allocated_memory) */
    int64_t allocated_high;    /* highest allocated bytes before the last peak reset (recycling headroom) */
    xsa_mempool global;        /* the device's own cache */
    xsa_mempool *mempools;     /* the others, newest first */
    xsa_route *routes;         /* oldest first; the oldest accepting route wins */
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
};

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

/* Marks b (out of the free set) allocated, in the pointer map (room was
 * reserved) and the stats: the end of every malloc and of a restore's
 * allocations. Inline: it is on the hot path. */
static inline void xsa_pool_hand_out(xsa_pool *p, xsa_block *b, size_t requested) {
    xsa_pool_kind kind = b->seg->kind;
    b->allocated = true;
    b->requested = requested;
    b->capture_id = 0; /* malloc stamps it during a capture (pool/capture_reuse.c) */
    xsa_ptr_map_insert_reserved(&p->allocated, b->ptr, b);
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


/* Free-set membership with the inactive_split accounting it implies. */
void xsa_pool_insert_free(xsa_pool *p, xsa_block *b);
void xsa_pool_erase_free(xsa_pool *p, xsa_block *b);

/* Returns a freed block (no pending events) to its pool, merging it with
 * free neighbours. */
void xsa_pool_free_block(xsa_pool *p, xsa_block *b);
/* The events of freed block b have completed (xsa_block_done_fn, ctx the
 * pool): it returns to the cache unless IPC exports still pin it. */
void xsa_pool_block_done(void *ctx, xsa_block *b);

/* Removes block `gone` (a free or unmapped neighbour of keep, like it in
 * mapping) and extends keep over it. */
void xsa_pool_absorb(xsa_pool *p, xsa_block *keep, xsa_block *gone);
/* A new record for the first `size` bytes of b, linked before it; b's own
 * extent is the caller's to shrink. NULL if out of host memory. */
xsa_block *xsa_pool_new_front(xsa_pool *p, xsa_block *b, size_t size);
/* Splits a new block of `size` bytes off the start of b (not in a free
 * set); NULL if out of host memory. */
xsa_block *xsa_pool_carve_front(xsa_pool *p, xsa_block *b, size_t size);

/* Sets seg->first if b has become the segment's first block. */
static inline void xsa_fix_first(xsa_block *b) {
    if (!b->prev) b->seg->first = b;
}

/* mempool.c: memory pool records and routing (core: calls only free sets). */
/* The memory pool of id, or NULL; the global one for {0, 0}. */
xsa_mempool *xsa_mempool_find(xsa_pool *p, xsa_mempool_id id);
/* A new memory pool record with use_count 1; NULL if out of host memory. */
xsa_mempool *xsa_mempool_new(xsa_pool *p, xsa_mempool_id id);
/* Unlinks and frees a memory pool that has no segment left; its own
 * allocator, if any, is told it is done (release(ctx)). */
void xsa_mempool_delete(xsa_pool *p, xsa_mempool *mp);
/* Does a block of mp's segments hold memory in use? (A scan: asked only
 * of released pools, so that the hot paths keep no count.) */
bool xsa_mempool_in_use(const xsa_pool *p, const xsa_mempool *mp);
/* The memory pool an allocation on `stream` goes to (routes are set). */
xsa_mempool *xsa_mempool_route(xsa_pool *p, xsa_stream stream);
/* The route to mp, or -1. */
int xsa_mempool_route_index(const xsa_pool *p, const xsa_mempool *mp);
/* Adds a route (false if out of host memory) / removes route i. */
bool xsa_mempool_add_route(xsa_pool *p, xsa_mempool *mp, xsa_stream_filter filter, void *ctx, bool capture);
void xsa_mempool_remove_route(xsa_pool *p, int i);
/* Released memory pool mp had a block freed during a capture: every pool
 * capturing now keeps mp's memory until it is released itself. False if
 * out of host memory (the holds taken so far stay). */
bool xsa_mempool_keep(xsa_pool *p, xsa_mempool *mp);
/* Pool mp was released: it keeps no other pool's memory any more. The
 * pools it kept are returned through release (may be NULL), one call each. */
void xsa_mempool_drop_kept(xsa_pool *p, xsa_mempool *mp, void (*release)(xsa_pool *p, xsa_mempool *kept));
/* Queues b (freed during capture, with uses on other streams) for its
 * events; false if out of host memory, b unchanged. */
bool xsa_mempool_defer(xsa_pool *p, xsa_block *b);
/* Frees every record (pool teardown; the segments are gone), telling
 * their own allocators as delete does. */
void xsa_mempool_destroy_all(xsa_pool *p);

static inline bool xsa_mempool_is_global(const xsa_pool *p, const xsa_mempool *mp) { return mp == &p->global; }
/* Do mp's segments come from an allocator of its own? */
static inline bool xsa_mempool_owns_allocator(const xsa_mempool *mp) { return mp->allocator.alloc != NULL; }
/* Released (use_count 0): no new use may route to it. */
static inline bool xsa_mempool_released(const xsa_mempool *mp) { return mp->use_count == 0; }
/* Released and kept by no pool in use: its free memory may go back to the device. */
static inline bool xsa_mempool_freeable(const xsa_mempool *mp) { return mp->use_count == 0 && mp->holds == 0; }

/* own_allocator.c: the memory of a classic segment of memory pool mp, of
 * `size` bytes for `stream`: cuMemAlloc, or mp's own allocator (NULL from
 * it is out of memory); and its return (cuMemFree, or the allocator's
 * free, which cannot fail). The thread is in relaxed capture mode for
 * both, as PyTorch makes these calls. */
xsa_cu_result xsa_classic_alloc(xsa_pool *p, xsa_mempool *mp, xsa_stream stream, size_t size, uintptr_t *base);
xsa_cu_result xsa_classic_free(xsa_pool *p, const xsa_seg *s);

/* pages.c */
/* Unmaps the whole pages inside free block b, splitting it around them. */
xsa_pool_status xsa_pages_unmap_block(xsa_pool *p, xsa_block *b, char *err, size_t errlen);
/* Destroys an expandable segment with no mapped page. If the driver refuses
 * to free its reservation, the segment stays (empty) and false is returned:
 * the next release tries again. */
bool xsa_pages_destroy_segment(xsa_pool *p, xsa_seg *s);
/* The accounting of pages that segment s gained (sign +1) or lost (-1),
 * called after the change: `moved` between segments, `created` new or
 * released (device allocations and frees). */
void xsa_pages_account(xsa_pool *p, xsa_seg *s, size_t moved, size_t created, int sign);
/* Makes pages [lo, hi) of free block b a block of their own (b, out of the
 * free set); the rest of b stays free around it. Host OOM leaves b as it was. */
xsa_pool_status xsa_pages_isolate(xsa_pool *p, xsa_block *b, uintptr_t lo, uintptr_t hi, char *err, size_t errlen);
/* Puts b (mapped, not in use, out of the free set) back in the cache,
 * merged with free neighbours. */
void xsa_pages_return_free(xsa_pool *p, xsa_block *b);
/* The largest range of pages [*first, *end) of whole chunks inside free
 * block b; false if there is none. */
bool xsa_pages_whole_chunks(const xsa_pool *p, const xsa_block *b, size_t *first, size_t *end);
/* Merges unmapped block u with unmapped neighbours. */
void xsa_pages_merge_unmapped(xsa_pool *p, xsa_block *u);

/* expand.c */
xsa_pool_status xsa_expand_alloc(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size,
                                 xsa_block **out, char *err, size_t errlen);

/* stats.c: the highest allocated bytes seen, peak resets notwithstanding. */
int64_t xsa_pool_allocated_high(const xsa_pool *p);

/* recycle.c: how many of the `pages` new pages a growth for a request of
 * `size` bytes should take from recycling (the page_recycling_headroom rule). */
size_t xsa_recycle_pages_wanted(const xsa_pool *p, size_t size, size_t pages);
/* A new chunk holds at most 1/XSA_HEADROOM_PER_CHUNK of the headroom. */
#define XSA_HEADROOM_PER_CHUNK 8.0
/* The most pages of any chunk the pool creates (expandable_handle_mb),
 * and the pages of each new chunk of a growth for a request of `size`
 * bytes (the handle-size rule, design in recycle.c). */
size_t xsa_recycle_max_chunk_pages(const xsa_pool *p);
size_t xsa_recycle_new_chunk_pages(const xsa_pool *p, size_t size);
/* Moves whole free chunks of the pool's expandable segments (never from
 * `keep1`/`keep2`, the free blocks around the growth point) to segment
 * `target` while fewer than `pages` pages are taken, and at most `limit`
 * pages (a chunk that would pass it is left): the chunks go to
 * chunks[0..*n_chunks) (room for `limit`) for target to map, their old
 * addresses drain. Returns how many pages. */
size_t xsa_recycle_take(xsa_pool *p, const xsa_seg *target, const xsa_block *keep1, const xsa_block *keep2,
                        size_t pages, size_t limit, xsa_chunk *chunks, size_t *n_chunks);
/* A miss of `size` bytes (block size) on `stream` that would move pages:
 * hands over the stream's blocks freed with record_stream (their stream
 * waits for the other streams' work on the GPU) that, with the free
 * blocks between and around them, make the smallest free block that holds
 * the request with less than a page left. True if one was handed over
 * whole: the free set has it. */
bool xsa_recycle_hand_over_fit(xsa_pool *p, xsa_pool_kind kind, xsa_stream stream, size_t size);
/* Undoes the takes since the drain list's head was `mark` (the growth that
 * took them failed): the pages are free blocks of their segments again. */
void xsa_recycle_undo(xsa_pool *p, const xsa_drain *mark);
/* Unmaps the old addresses whose queued work has completed; with wait,
 * waits for all of them first. Returns the first driver error (the drain
 * stays, to be tried again). */
xsa_cu_result xsa_recycle_drain(xsa_pool *p, bool wait);
/* Pool teardown: unmaps every old address without waiting. */
void xsa_recycle_destroy(xsa_pool *p);

/* sweep.c: a new sweep (drains 0) over the streams of p's segments, or
 * NULL (host memory or a driver call refused: nothing recorded); whether
 * it has completed (XSA_CU_SUCCESS; with wait, waits for it first); one
 * drain less waiting on it (freed at none). */
xsa_sweep *xsa_sweep_record(xsa_pool *p);
xsa_cu_result xsa_sweep_wait(xsa_pool *p, xsa_sweep *w, bool wait);
/* Waits for the work queued on every stream of p's segments. */
xsa_cu_result xsa_sweep_synchronize(xsa_pool *p);
void xsa_sweep_drop(xsa_pool *p, xsa_sweep *w);

/* ipc.c: whether exportable pages work on the device (attribute and a
 * trial cuMemCreate); drops the exports seen closed or revoked, returning
 * freed blocks they pinned to the cache; revokes and forgets them all. */
bool xsa_ipc_probe(xsa_pool *p);
void xsa_ipc_poll(xsa_pool *p);
void xsa_ipc_destroy(xsa_pool *p);

/* peer.c: grants every device that can access p's device (peer_access). */
xsa_pool_status xsa_peer_enable_all(xsa_pool *p, char *err, size_t errlen);

/* release.c */
xsa_pool_status xsa_release_cached(xsa_pool *p, char *err, size_t errlen);
bool xsa_release_available(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size);
/* Released memory pool mp gives its free memory back, and its record once
 * it has no segment (not while a capture is under way). */
xsa_pool_status xsa_release_mempool(xsa_pool *p, xsa_mempool *mp, char *err, size_t errlen);
void xsa_garbage_collect(xsa_pool *p);
/* Frees free unsplit classic block b's segment; on a driver error nothing changes. */
xsa_cu_result xsa_release_classic_block(xsa_pool *p, xsa_block *b);

/* New segments: records of (memory pool, kind, stream), with the stream
 * attached to the memory pool's free set (NULL if out of host memory, err set), their release when the
 * driver call failed (the status to return), and the segment filled in as
 * one block covering it and linked (xsa_pool_drop_segment ends it). */
xsa_seg *xsa_pool_new_records(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, xsa_block **b,
                              char *err, size_t errlen);
xsa_pool_status xsa_pool_segment_failed(xsa_pool *p, xsa_seg *s, xsa_block *b, const char *call, xsa_cu_result r,
                                        char *err, size_t errlen);
void xsa_pool_link_new_segment(xsa_pool *p, xsa_seg *s, xsa_block *b, uintptr_t base, size_t size);
/* Segment s's split rule, from its pool kind, type and memory pool. */
static inline xsa_split_rule xsa_seg_split_rule(const xsa_seg *s) {
    if (s->mp->no_split) return XSA_SPLIT_NEVER;
    return s->kind == XSA_POOL_SMALL || s->expandable ? XSA_SPLIT_ANY_REST : XSA_SPLIT_CLASSIC_LARGE;
}

/* Segment list. drop is the end of a linked segment's record: out of the
 * list, its stream detached from the free set, freed (its blocks are gone). */
void xsa_pool_link_segment(xsa_pool *p, xsa_seg *s);
void xsa_pool_drop_segment(xsa_pool *p, xsa_seg *s);

/* Writes "<call> failed: <driver's text>" into err. */
void xsa_pool_driver_error(xsa_pool *p, const char *call, xsa_cu_result r, char *err, size_t errlen);

#endif
