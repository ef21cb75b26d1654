/*
 * pool/release: giving cached memory back to the driver, as PyTorch does:
 * whole unsplit classic segments are freed (through a memory pool's own
 * allocator for its segments), expandable segments unmap the whole pages
 * of their free blocks. Three callers: the OOM fallbacks
 * (release cached oversize blocks of the stream; release everything after
 * synchronizing events), garbage collection of the oldest cached blocks,
 * and empty_cache. Only free-set blocks are released: blocks pinned by IPC
 * exports wait outside it, so their pages are never unmapped here.
 *
 * Memory pools: only the global one, released ones and tagged ones no
 * graph was captured into (pool/pause.c) give memory back. A
 * memory pool in use keeps every page (a captured graph replays over the
 * addresses of its freed blocks); a released one gives back its free
 * memory at empty_cache, and all of it once its last block is freed, and
 * its record goes with its last segment. A released pool's block freed
 * during a capture may be written by that graph's replays (PyTorch's
 * test_graph_capture_reset_recapture: a graph's output, outliving its
 * pool, is rewritten by the next capture), so the pools capturing then
 * keep the released pool's memory until they are released themselves.
 * A graph's replays run on streams of the caller's choosing, so a pool
 * that was captured into waits for the whole device before its memory
 * goes back.
 */
#include "pool/release.h"

#include <stdio.h>
#include <stdlib.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/decay.h"
#include "pool/errors.h"
#include "pool/events.h"
#include "pool/free_set.h"
#include "pool/ipc.h"
#include "pool/mempool.h"
#include "pool/own_allocator.h"
#include "pool/pages.h"
#include "pool/ready.h"
#include "pool/recycle.h"
#include "pool/state.h"
#include "pool/sweep.h"
#include "pool/trace.h"

xsa_cu_result xsa_release_classic_block(xsa_pool *p, xsa_block *b) {
    xsa_seg *s = b->seg;
    /* A refused free has no effect: the segment stays cached, to be
     * released again later, rather than leak. */
    xsa_cu_result r = xsa_classic_free(p, s);
    if (r != XSA_CU_SUCCESS) return r;
    xsa_pool_erase_free(p, b);
    p->reserved -= s->size;
    xsa_stats_update(p->stats.segment, s->kind, -1);
    xsa_stats_update(p->stats.reserved_bytes, s->kind, -(int64_t)s->size);
    if (s->size >= p->opt.max_split_size) xsa_stat_update(&p->stats.oversize_segments, -1);
    p->stats.num_device_free++;
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_FREE, s->kind, s->base, s->size, s->size, s->stream);
    xsa_block_delete(&p->blocks, b);
    xsa_pool_drop_segment(p, s);
    return XSA_CU_SUCCESS;
}

/* Free block b is a classic segment whole, the only kind cuMemFree gives
 * back: a split one shares its segment with other blocks. */
static bool whole_classic_segment(const xsa_block *b) { return !b->seg->expandable && !xsa_block_is_split(b); }

/* Releases what can be released of free block b (which is in the free set). */
static xsa_pool_status release_free_block(xsa_pool *p, xsa_block *b, char *err, size_t errlen) {
    if (b->seg->expandable) return xsa_pages_unmap_block(p, b, err, errlen);
    xsa_cu_result r = xsa_block_is_split(b) ? XSA_CU_SUCCESS : xsa_release_classic_block(p, b);
    if (r == XSA_CU_SUCCESS) return XSA_POOL_OK;
    xsa_pool_driver_error(p, "cuMemFree", r, err, errlen);
    return XSA_POOL_DRIVER_ERROR;
}

/* Releases every free block of one pool kind of memory pool mp. Blocks are
 * collected first: releasing changes the free set. */
static xsa_pool_status release_kind(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, char *err, size_t errlen) {
    xsa_free_set *set = &mp->free[kind];
    size_t n = set->count;
    if (n == 0) return XSA_POOL_OK;
    xsa_block **blocks = malloc(n * sizeof *blocks);
    if (!blocks) return xsa_pool_host_oom(p->device, err, errlen);
    size_t i = 0;
    for (xsa_block *b = xsa_free_set_first(set); b; b = xsa_free_set_next(set, b)) blocks[i++] = b;
    xsa_pool_status st = XSA_POOL_OK;
    for (i = 0; i < n && st == XSA_POOL_OK; i++) st = release_free_block(p, blocks[i], err, errlen);
    free(blocks);
    return st;
}

/* mp's expandable segments with nothing mapped give their reservation back. */
static void drop_empty_segments(xsa_pool *p, const xsa_mempool *mp) {
    for (xsa_seg *s = p->segments, *next; s; s = next) {
        next = s->next_seg;
        if (s->mp == mp && s->expandable && !xsa_pages_segment_holds(s)) xsa_pages_destroy_segment(p, s);
    }
}

/* Everything free in memory pool mp goes back to the device. */
static xsa_pool_status release_mempool_free(xsa_pool *p, xsa_mempool *mp, char *err, size_t errlen) {
    xsa_pool_status st = release_kind(p, mp, XSA_POOL_LARGE, err, errlen);
    if (st == XSA_POOL_OK) st = release_kind(p, mp, XSA_POOL_SMALL, err, errlen);
    drop_empty_segments(p, mp);
    return st;
}

/* A pool a graph was captured into: its graphs are gone once it is
 * released (PyTorch destroys the graph, then releases its pool), but their
 * last replays may still run, on streams no segment of the pool names
 * (torch.cuda.graph captures on a side stream, replays on the caller's).
 * Events on the pool's streams would not cover them: the device's work is
 * waited for, once. Not during a capture (the callers wait for its end). */
static xsa_pool_status fence_replays(xsa_pool *p, xsa_mempool *mp, char *err, size_t errlen) {
    if (!mp->replayed || mp->segments == 0) return XSA_POOL_OK;
    xsa_cu_result r = XSA_DRV(p->drv, ctx_synchronize, p->device);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuCtxSynchronize", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    p->stats.num_sync_all_streams++;
    mp->replayed = false;
    return XSA_POOL_OK;
}

xsa_pool_status xsa_release_mempool(xsa_pool *p, xsa_mempool *mp, char *err, size_t errlen) {
    if (p->capturing || !xsa_mempool_freeable(mp)) return XSA_POOL_OK;
    xsa_pool_status st = fence_replays(p, mp, err, errlen);
    if (st != XSA_POOL_OK) return st; /* nothing goes back: the memory stays cached, as after a refused free */
    st = release_mempool_free(p, mp, err, errlen);
    if (mp->segments == 0) xsa_mempool_delete(p, mp);
    return st;
}

xsa_pool_status xsa_release_cached(xsa_pool *p, char *err, size_t errlen) {
    xsa_ready_forget(p); /* no readying planned before this fills the cache again */
    xsa_cu_result r = xsa_events_synchronize(&p->events, xsa_pool_block_done, p);
    p->stats.num_sync_all_streams++;
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuEventSynchronize", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    /* Kernels on any stream may still read freed blocks (pool/sweep.c). */
    r = xsa_sweep_synchronize(p);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuStreamSynchronize", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    /* Old addresses of moved pages go, so that empty segments can. */
    r = xsa_recycle_drain(p, true);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuEventSynchronize (page recycling)", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    /* Decay's ranges waiting for their fence: the streams are synchronized. */
    r = xsa_decay_release_waiting(p);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuMemUnmap (decay)", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    /* Exports are polled, never waited for: pinned blocks stay. */
    if (p->exports) xsa_ipc_poll(p);
    xsa_pool_status st = release_mempool_free(p, &p->global, err, errlen);
    for (xsa_mempool *mp = p->mempools, *next; mp && st == XSA_POOL_OK; mp = next) {
        next = mp->next; /* mp may go */
        /* A tagged pool in use that no graph was captured into caches for
         * its own allocations only, and gives everything back at each
         * pause anyway: its cache goes too (pool/pause.c). */
        bool tagged_cache = mp->tag && !mp->captured && !mp->paused && !xsa_mempool_released(mp);
        st = tagged_cache ? release_mempool_free(p, mp, err, errlen) : xsa_release_mempool(p, mp, err, errlen);
    }
    return st;
}

bool xsa_release_available(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size) {
    size_t max_split = p->opt.max_split_size;
    /* A memory pool in use keeps its memory (only the global one routes
     * requests and may give memory back). */
    if (max_split == SIZE_MAX || !xsa_mempool_is_global(p, mp)) return false;
    xsa_free_set *set = &mp->free[kind];
    size_t want = size < max_split ? max_split : size;
    xsa_block *b = xsa_free_set_lower_bound(set, stream, want);
    /* Only a free block that is its whole segment goes: one split before a
     * run-time max_split_size_mb shares its segment with live blocks. */
    if (b && b->stream == stream && whole_classic_segment(b))
        return xsa_release_classic_block(p, b) == XSA_CU_SUCCESS;
    /* No single block is large enough: free oversize blocks of the stream,
     * largest first, until enough is released. */
    if (b) {
        b = xsa_free_set_prev(set, b);
    } else {
        /* lower_bound was past the end: start from the largest key. */
        for (xsa_block *t = xsa_free_set_first(set); t; t = xsa_free_set_next(set, t)) b = t;
    }
    size_t released = 0;
    while (b && released < want && b->size >= max_split && b->stream == stream) {
        xsa_block *prev = xsa_free_set_prev(set, b);
        if (whole_classic_segment(b)) {
            size_t size = b->size;
            if (xsa_release_classic_block(p, b) != XSA_CU_SUCCESS) return false;
            released += size;
        }
        b = prev;
    }
    return released >= want;
}

void xsa_garbage_collect(xsa_pool *p) {
    size_t threshold = (size_t)(p->opt.garbage_collection_threshold * (double)p->allowed_max);
    if (p->reserved <= threshold) return;
    size_t target = p->reserved - threshold;
    xsa_free_set *set = &p->global.free[XSA_POOL_LARGE];
    uint64_t now = p->free_lookups[XSA_POOL_LARGE];
    double total_age = 0;
    size_t freeable = 0;
    for (xsa_block *b = xsa_free_set_first(set); b; b = xsa_free_set_next(set, b))
        if (whole_classic_segment(b)) {
            total_age += (double)(now - b->gc_base);
            freeable++;
        }
    /* Free the blocks at least as old as the average, until enough is back. */
    size_t reclaimed = 0;
    bool freed = true;
    while (reclaimed < target && freed && freeable > 0) {
        double age_threshold = total_age / (double)freeable;
        freed = false;
        for (xsa_block *b = xsa_free_set_first(set), *next; b; b = next) {
            next = xsa_free_set_next(set, b);
            double age = (double)(now - b->gc_base);
            if (!whole_classic_segment(b) || age < age_threshold) continue;
            size_t size = b->size;
            if (xsa_release_classic_block(p, b) != XSA_CU_SUCCESS) return;
            freed = true;
            reclaimed += size;
            total_age -= age;
            freeable--;
        }
    }
}
