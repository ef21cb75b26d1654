/*
 * pool/checkpoint: a memory pool's live blocks (a checkpoint), and bringing
 * the pool back to such a set (PyTorch's getCheckpointState and
 * setCheckpointPoolState; semantics in xsalloc/xsalloc.h). cudagraph trees
 * need it because a graph replay changes no allocator state: before they
 * record or warm up a graph after replays, the pool is told which blocks
 * the replayed outputs still alive occupy.
 *
 * Design: a restore is all or nothing, in three steps.
 *  1. Check, changing nothing: every block of the set lies in one of the
 *     pool's segments, on its stream, in mapped memory that is free,
 *     allocated or waiting for events, and overlaps no other; make room for
 *     what step 3 needs (block records for two splits per new block,
 *     pointer map slots, the delta's arrays).
 *  2. Wait for the GPU work that may still use memory the restore frees or
 *     hands out: the other streams an allocation freed here was used on
 *     (record_stream), and pending events of freed blocks in the set's way.
 *     During a capture nothing may be waited for, so a restore that needs
 *     it is refused in step 1. A driver error here leaves the pool as it
 *     was (waited-for blocks aside, which were free already for the user).
 *  3. Free the pool's allocations that are not in the set (they merge with
 *     free neighbours), then carve each block of the set that is not
 *     allocated out of the free block now holding it, front and back rests
 *     staying free. A block of the set allocated at the same address and
 *     size stays allocated, with the set's requested size. Nothing here
 *     can fail.
 * Stats move as the equivalent frees and mallocs move them; the observer
 * sees those frees and allocations.
 *
 * Core: it calls the block records, free sets, pointer map, events and
 * core.c's split and merge, nothing above them.
 */
#include "pool/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/errors.h"
#include "pool/events.h"
#include "pool/mempool.h"
#include "pool/ptr_map.h"
#include "pool/state.h"
#include "pool/trace.h"

/* The private memory pool id, or NULL with err set. */
static xsa_mempool *private_pool(xsa_pool *p, const char *what, xsa_mempool_id id, char *err, size_t errlen) {
    bool private = id.first || id.second;
    xsa_mempool *mp = private ? xsa_mempool_find(p, id) : NULL;
    if (!mp)
        xsa_pool_invalid_pool(p->device, what, id, private ? "no such pool" : "(0, 0) is the device's own cache", err,
                              errlen);
    return mp;
}

static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const xsa_live_block *)a)->ptr, y = (uintptr_t)((const xsa_live_block *)b)->ptr;
    return x < y ? -1 : x > y;
}

xsa_pool_status xsa_pool_mempool_checkpoint(xsa_pool *p, xsa_mempool_id id, xsa_live_block **out, size_t *n,
                                            char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    xsa_mempool *mp = private_pool(p, "xsa_mempool_checkpoint", id, err, errlen);
    if (!mp) return XSA_POOL_INVALID;
    size_t count = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        for (const xsa_block *b = s->mp == mp ? s->first : NULL; b; b = b->next) count += b->allocated;
    if (!count) return XSA_POOL_OK;
    xsa_live_block *blocks = malloc(count * sizeof *blocks);
    if (!blocks) return xsa_pool_host_oom(p->device, err, errlen);
    size_t i = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        for (const xsa_block *b = s->mp == mp ? s->first : NULL; b; b = b->next)
            if (b->allocated) blocks[i++] = (xsa_live_block){(void *)b->ptr, b->size, b->requested, b->stream};
    qsort(blocks, count, sizeof *blocks, by_address);
    *out = blocks;
    *n = count;
    return XSA_POOL_OK;
}

/* ---- restore, step 1: the plan ---- */

typedef struct plan {
    xsa_mempool *mp;
    xsa_live_block *set; /* a copy, in address order */
    size_t n;
    size_t n_new;        /* blocks of the set not allocated now */
    size_t n_live;       /* the pool's allocations now */
    bool wait_events;    /* memory of the set waits for record_stream events */
    bool sync_uses;      /* an allocation to free was used on other streams */
} plan;

static xsa_seg *segment_of(const xsa_pool *p, const xsa_mempool *mp, uintptr_t ptr) {
    for (xsa_seg *s = p->segments; s; s = s->next_seg)
        if (s->mp == mp && ptr >= s->base && ptr < s->base + s->size) return s;
    return NULL;
}

static xsa_block *block_of(const xsa_seg *s, uintptr_t ptr) {
    xsa_block *b = s->first;
    while (b->ptr + b->size <= ptr) b = b->next;
    return b;
}

/* Is allocation b in the set, at its address and size (it stays)? */
static bool kept(const plan *pl, const xsa_block *b) {
    xsa_live_block key = {.ptr = (void *)b->ptr};
    const xsa_live_block *e = pl->n ? bsearch(&key, pl->set, pl->n, sizeof key, by_address) : NULL;
    return e && e->size == b->size;
}

static xsa_pool_status refuse(const xsa_pool *p, const plan *pl, const xsa_live_block *e, const char *why, char *err,
                              size_t errlen) {
    snprintf(err, errlen, "xsa_mempool_restore(device %d, pool (%llu, %llu)): block %p (%zu bytes): %s", p->device,
             (unsigned long long)pl->mp->id.first, (unsigned long long)pl->mp->id.second, e->ptr, e->size, why);
    return XSA_POOL_INVALID;
}

/* Block e of the set fits the pool (prev: the block before it, or NULL). */
static xsa_pool_status check_block(const xsa_pool *p, plan *pl, const xsa_live_block *e, const xsa_live_block *prev,
                                   char *err, size_t errlen) {
    uintptr_t lo = (uintptr_t)e->ptr, hi = lo + e->size;
    if (!lo || !e->size || hi < lo || lo % XSA_MIN_BLOCK_SIZE || e->size % XSA_MIN_BLOCK_SIZE || e->requested > e->size)
        return refuse(p, pl, e, "not a block: its address and size must be multiples of 512 bytes, not 0, and its "
                                "requested size at most its size", err, errlen);
    if (prev && (uintptr_t)prev->ptr + prev->size > lo)
        return refuse(p, pl, e, "overlaps the block before it in the set", err, errlen);
    const xsa_seg *s = segment_of(p, pl->mp, lo);
    if (!s || hi > s->base + s->size) return refuse(p, pl, e, "not inside one of the pool's segments", err, errlen);
    if (e->stream != s->stream) return refuse(p, pl, e, "its stream is not its segment's", err, errlen);
    if (s->split == XSA_SPLIT_NEVER && !s->expandable && (lo != s->base || hi != s->base + s->size))
        return refuse(p, pl, e, "the pool splits no block (no_split): a block in a classic segment of it covers the "
                                "segment", err, errlen);
    for (const xsa_block *b = block_of(s, lo); b && b->ptr < hi; b = b->next) {
        if (!xsa_block_holds_memory(b))
            return refuse(p, pl, e, "part of it is not mapped (that memory of the pool was released)", err, errlen);
        if (b->allocated && b->ptr == lo && b->size == e->size) return XSA_POOL_OK; /* allocated already */
        if (b->ipc_exports || b->capture_deferred)
            return refuse(p, pl, e, "memory it needs is pinned by an IPC export or held back by a capture", err,
                          errlen);
        if (!b->allocated && b->event_count) pl->wait_events = true;
    }
    pl->n_new++;
    return XSA_POOL_OK;
}

/* Counts the pool's allocations; notes whether those to free were used on
 * other streams. */
static void scan_allocations(const xsa_pool *p, plan *pl) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        for (const xsa_block *b = s->mp == pl->mp ? s->first : NULL; b; b = b->next) {
            if (!b->allocated) continue;
            pl->n_live++;
            if (b->n_stream_uses && !kept(pl, b)) pl->sync_uses = true;
        }
}

static xsa_pool_status make_plan(xsa_pool *p, xsa_mempool_id id, const xsa_live_block *live, size_t n, plan *pl,
                                 char *err, size_t errlen) {
    const char *what = "xsa_mempool_restore";
    if (!(pl->mp = private_pool(p, what, id, err, errlen))) return XSA_POOL_INVALID;
    if (xsa_mempool_released(pl->mp)) return xsa_pool_invalid_pool(p->device, what, id, "the pool is released", err,
                                                                   errlen);
    if (xsa_mempool_route_index(p, pl->mp) >= 0)
        return xsa_pool_invalid_pool(p->device, what, id, "allocations are being routed to it (end that first)", err,
                                     errlen);
    if (n) {
        if (!(pl->set = malloc(n * sizeof *pl->set))) return xsa_pool_host_oom(p->device, err, errlen);
        for (size_t i = 0; i < n; i++) pl->set[i] = live[i];
        pl->n = n;
        qsort(pl->set, n, sizeof *pl->set, by_address);
    }
    for (size_t i = 0; i < n; i++) {
        xsa_pool_status st = check_block(p, pl, &pl->set[i], i ? &pl->set[i - 1] : NULL, err, errlen);
        if (st != XSA_POOL_OK) return st;
    }
    scan_allocations(p, pl);
    if ((pl->wait_events || pl->sync_uses) && p->capturing)
        return xsa_pool_invalid_pool(p->device, what, id,
                                     "memory it frees or hands out may still be in use on other streams, which "
                                    "cannot be waited for while a capture is under way", err, errlen);
    return XSA_POOL_OK;
}

/* Room for step 3: it allocates nothing. */
static xsa_pool_status make_room(xsa_pool *p, const plan *pl, xsa_restore_delta *d, char *err, size_t errlen) {
    if (!xsa_ptr_map_reserve(&p->allocated, pl->n_new) || !xsa_block_cache_reserve(&p->blocks, 2 * pl->n_new))
        return xsa_pool_host_oom(p->device, err, errlen);
    d->freed = pl->n_live ? malloc(pl->n_live * sizeof *d->freed) : NULL;
    d->allocated = pl->n_new ? malloc(pl->n_new * sizeof *d->allocated) : NULL;
    if ((pl->n_live && !d->freed) || (pl->n_new && !d->allocated)) return xsa_pool_host_oom(p->device, err, errlen);
    return XSA_POOL_OK;
}

/* ---- step 2: waiting ---- */

static xsa_pool_status wait_for_uses(xsa_pool *p, const plan *pl, char *err, size_t errlen) {
    for (const xsa_seg *s = p->segments; s && pl->sync_uses; s = s->next_seg)
        for (const xsa_block *b = s->mp == pl->mp ? s->first : NULL; b; b = b->next) {
            if (!b->allocated || !b->n_stream_uses || kept(pl, b)) continue;
            for (int i = 0; i < b->n_stream_uses; i++) {
                xsa_cu_result r = XSA_DRV(p->drv, stream_synchronize, b->stream_uses[i]);
                if (r != XSA_CU_SUCCESS) {
                    xsa_pool_driver_error(p, "cuStreamSynchronize", r, err, errlen);
                    return XSA_POOL_DRIVER_ERROR;
                }
            }
        }
    xsa_cu_result r = pl->wait_events ? xsa_events_synchronize(&p->events, xsa_pool_block_done, p) : XSA_CU_SUCCESS;
    if (r == XSA_CU_SUCCESS) return XSA_POOL_OK;
    xsa_pool_driver_error(p, "cuEventSynchronize", r, err, errlen);
    return XSA_POOL_DRIVER_ERROR;
}

/* ---- step 3: the changes ---- */

/* Frees the pool's allocations not in the set, as xsa_pool_free does once
 * their streams are done (so without events). */
static void free_unlisted(xsa_pool *p, const plan *pl, xsa_restore_delta *d) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        for (const xsa_block *b = s->mp == pl->mp ? s->first : NULL; b; b = b->next)
            if (b->allocated && !kept(pl, b)) d->freed[d->n_freed++] = (void *)b->ptr;
    for (size_t i = 0; i < d->n_freed; i++) {
        xsa_block *b = xsa_ptr_map_remove(&p->allocated, (uintptr_t)d->freed[i]);
        xsa_pool_kind kind = b->seg->kind;
        size_t size = b->size, requested = b->requested;
        xsa_stream stream = b->stream;
        XSA_OBSERVE(p, XSA_OBS_FREE_REQUESTED, kind, b->ptr, requested, size, stream);
        b->n_stream_uses = 0; /* synchronized in step 2 */
        xsa_pool_give_back(p, b);
        xsa_pool_block_done(p, b); /* an exported one stays pinned, as after xsa_free */
        XSA_OBSERVE(p, XSA_OBS_FREE_END, kind, (uintptr_t)d->freed[i], requested, size, stream);
    }
}

/* Allocates each block of the set that is not: the free block holding it
 * (step 1 and the frees made sure there is one) is split around it. */
static void allocate_listed(xsa_pool *p, const plan *pl, xsa_restore_delta *d) {
    for (size_t i = 0; i < pl->n; i++) {
        const xsa_live_block *e = &pl->set[i];
        uintptr_t lo = (uintptr_t)e->ptr;
        xsa_block *b = block_of(segment_of(p, pl->mp, lo), lo);
        if (b->allocated) { /* kept: only its requested size is the set's */
            xsa_stats_update(p->stats.requested_bytes, b->seg->kind, (int64_t)e->requested - (int64_t)b->requested);
            b->requested = e->requested;
            continue;
        }
        xsa_pool_erase_free(p, b);
        /* Records were reserved: the carves cannot fail. */
        if (b->ptr < lo) xsa_pool_insert_free(p, xsa_pool_carve_front(p, b, lo - b->ptr));
        if (b->size > e->size) {
            xsa_block *front = xsa_pool_carve_front(p, b, e->size);
            xsa_pool_insert_free(p, b);
            b = front;
        }
        xsa_pool_hand_out(p, b, e->requested);
        XSA_OBSERVE(p, XSA_OBS_ALLOC, b->seg->kind, b->ptr, e->requested, b->size, b->stream);
        d->allocated[d->n_allocated++] = e->ptr;
    }
}

xsa_pool_status xsa_pool_mempool_restore(xsa_pool *p, xsa_mempool_id id, const xsa_live_block *live, size_t n,
                                         xsa_restore_delta *delta, char *err, size_t errlen) {
    plan pl = {0};
    xsa_restore_delta d = {0};
    xsa_pool_status st = make_plan(p, id, live, n, &pl, err, errlen);
    if (st == XSA_POOL_OK) st = make_room(p, &pl, &d, err, errlen);
    if (st == XSA_POOL_OK) st = wait_for_uses(p, &pl, err, errlen);
    if (st == XSA_POOL_OK) {
        free_unlisted(p, &pl, &d);
        allocate_listed(p, &pl, &d);
        *delta = d;
    } else {
        free(d.freed);
        free(d.allocated);
    }
    free(pl.set);
    return st;
}
