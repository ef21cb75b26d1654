/* pool: malloc, free and record_stream (design in pool.h). */
#include "pool/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/backup.h"
#include "pool/block.h"
#include "pool/capture_reuse.h"
#include "pool/core.h"
#include "pool/errors.h"
#include "pool/events.h"
#include "pool/expand.h"
#include "pool/free_set.h"
#include "pool/ipc.h"
#include "pool/mempool.h"
#include "pool/options.h"
#include "pool/own_allocator.h"
#include "pool/pause.h"
#include "pool/peer.h"
#include "pool/ptr_map.h"
#include "pool/recycle.h"
#include "pool/release.h"
#include "pool/state.h"
#include "pool/trace.h"

/* ---- rounding (PyTorch's round_size / get_allocation_size) ---- */

static size_t floor_log2(size_t x) { return 63u - (size_t)__builtin_clzll((unsigned long long)x); }

static size_t roundup_divisions(const xsa_pool_options *opt, size_t size) {
    /* Intervals start at 1 MiB (2^20); the last one covers everything above. */
    size_t log_size = floor_log2(size);
    size_t index = log_size > 20 ? log_size - 20 : 0;
    if (index > XSA_ROUNDUP_INTERVALS - 1) index = XSA_ROUNDUP_INTERVALS - 1;
    return opt->roundup_power2_divisions[index];
}

/* Rounds up to the next of `divisions` equal steps between two powers of two. */
static size_t round_to_division(size_t size, size_t divisions) {
    if ((size & (size - 1)) == 0) return size;
    size_t floor_pow2 = (size_t)1 << floor_log2(size);
    size_t step = floor_pow2 >> floor_log2(divisions);
    if (step == 0) return floor_pow2 << 1;
    size_t floor_step = size & ~(step - 1);
    return floor_step == size ? size : floor_step + step;
}

static inline size_t round_size(const xsa_pool_options *opt, size_t size) {
    if (size < XSA_MIN_BLOCK_SIZE) return XSA_MIN_BLOCK_SIZE;
    size_t divisions = roundup_divisions(opt, size);
    if (divisions > 1 && size > XSA_MIN_BLOCK_SIZE * divisions) return round_to_division(size, divisions);
    return XSA_MIN_BLOCK_SIZE * ((size + XSA_MIN_BLOCK_SIZE - 1) / XSA_MIN_BLOCK_SIZE);
}

size_t xsa_pool_round_size(const xsa_pool_options *opt, size_t size) { return round_size(opt, size); }

static size_t allocation_size(size_t size) {
    if (size <= XSA_SMALL_SIZE) return XSA_SMALL_BUFFER;
    if (size < XSA_MIN_LARGE_ALLOC) return XSA_LARGE_BUFFER;
    return XSA_ROUND_LARGE * ((size + XSA_ROUND_LARGE - 1) / XSA_ROUND_LARGE);
}

/* ---- create / destroy ---- */

/* The sentence to print once about a setting the device cannot honour. */
static const char *fallback_warning(const xsa_pool *p) {
    const xsa_pool_options *o = &p->opt;
    if (o->expandable_segments && !p->expandable)
        return o->peer_access || o->ipc_handles
                   ? "this device does not support virtual memory management: expandable_segments falls back to "
                     "classic segments, without peer_access and ipc_handles (they need expandable segments)"
                   : "this device does not support virtual memory management: expandable_segments falls back to "
                     "classic segments";
    if (o->ipc_handles && !p->ipc)
        return "the driver refuses exportable (POSIX file descriptor) memory handles on this device: ipc_handles "
               "falls back to ordinary pages and xsa_ipc_export will fail";
    return NULL;
}

static void destroy_empty(xsa_pool *p) {
    xsa_ipc_destroy(p); /* the probe's handle, if its release failed */
    xsa_ptr_map_destroy(&p->allocated);
    free(p);
}

xsa_pool_status xsa_pool_create(xsa_pool **out, xsa_driver *drv, int device, const xsa_pool_options *opt,
                                const char **warning, char *err, size_t errlen) {
    xsa_pool *p = calloc(1, sizeof *p);
    if (!p || !xsa_ptr_map_init(&p->allocated)) {
        free(p);
        snprintf(err, errlen, "device %d: out of host memory creating the pool", device);
        return XSA_POOL_HOST_OOM;
    }
    p->drv = drv;
    p->device = device;
    p->opt = *opt;
    p->global.use_count = 1;
    xsa_events_init(&p->events, drv, device);
    xsa_cu_result r = XSA_DRV(drv, device_total_mem, &p->device_total, device);
    const char *call = "cuDeviceTotalMem";
    if (r == XSA_CU_SUCCESS) {
        call = "cuMemGetAllocationGranularity";
        r = XSA_DRV(drv, mem_get_granularity, &p->page_size, device, 0);
    }
    int vmm = 0;
    if (r == XSA_CU_SUCCESS && opt->expandable_segments) {
        call = "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)";
        r = XSA_DRV(drv, device_get_attribute, &vmm, XSA_ATTR_VMM_SUPPORTED, device);
    }
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, call, r, err, errlen);
        destroy_empty(p);
        return XSA_POOL_DRIVER_ERROR;
    }
    p->vmm = opt->expandable_segments ? (int8_t)(vmm != 0) : -1;
    p->expandable = opt->expandable_segments && vmm;
    p->ipc = p->expandable && opt->ipc_handles && xsa_ipc_probe(p);
    if (p->expandable && opt->peer_access) {
        xsa_pool_status st = xsa_peer_enable_all(p, err, errlen);
        if (st != XSA_POOL_OK) {
            destroy_empty(p);
            return st;
        }
    }
    if (warning) *warning = fallback_warning(p);
    p->allowed_max = (size_t)(opt->memory_fraction * (double)p->device_total);
    *out = p;
    return XSA_POOL_OK;
}

void xsa_pool_set_listener(xsa_pool *p, const xsa_pool_listener *listener) { p->listener = *listener; }

static void free_segment_blocks(xsa_pool *p, xsa_seg *s) {
    for (xsa_block *b = s->first; b;) {
        xsa_block *next = b->next;
        xsa_block_delete(&p->blocks, b);
        b = next;
    }
}

void xsa_pool_destroy(xsa_pool *p) {
    /* Drains, events and exports go first: they refer to blocks (and
     * drains give their events back). */
    xsa_recycle_destroy(p);
    xsa_backup_destroy(p);
    xsa_events_destroy(&p->events);
    xsa_ipc_destroy(p);
    xsa_capture_reuse_forget(p);
    while (p->segments) {
        xsa_seg *s = p->segments;
        if (s->expandable) {
            if (p->listener.released) p->listener.released(p->listener.ctx, s->base);
            xsa_segment_destroy(&s->vm);
        }
        else
            xsa_classic_free(p, s);
        free_segment_blocks(p, s);
        xsa_pool_drop_segment(p, s);
    }
    xsa_mempool_destroy_all(p);
    xsa_block_cache_clear(&p->blocks);
    xsa_ptr_map_destroy(&p->allocated);
    free(p);
}

/* ---- finding and carving blocks ---- */

static size_t expandable_size(const xsa_block *b) {
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* PyTorch's get_free_block: best fit on (stream, size), with the oversize
 * rules, and for expandable segments the size a block could grow to. The
 * block stays in the free set. */
static xsa_block *get_free_block(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size) {
    xsa_free_set *set = &mp->free[kind];
    if (p->opt.garbage_collection_threshold > 0) p->free_lookups[kind]++;
    xsa_block *b = xsa_free_set_lower_bound(set, stream, size);
    if (!b || b->stream != stream) return NULL;
    if (__builtin_expect(b->seg->expandable && !p->expandable && !mp->tag, 0)) {
        /* Expandable segments turned off at run time: as in PyTorch, no
         * request is placed in one any more (pool/settings.c); tagged
         * memory pools keep theirs (pool/pause.c). */
        while (b && b->stream == stream && b->seg->expandable) b = xsa_free_set_next(set, b);
        if (!b || b->stream != stream) return NULL;
    }
    /* A later block (never smaller) can only win when b could grow into
     * unmapped space after it. */
    while (b->seg->expandable && expandable_size(b) > b->size) {
        xsa_block *next = xsa_free_set_next(set, b);
        if (!next || next->stream != stream || expandable_size(next) >= expandable_size(b)) break;
        b = next;
    }
    size_t max_split = p->opt.max_split_size;
    if (size < max_split && b->size >= max_split) return NULL;
    if (size >= max_split && b->size >= size + p->opt.max_non_split_rounding) return NULL;
    return b;
}

/* PyTorch's should_split, by the block's segment's rule (a memory pool's
 * own allocator makes classic segments in expandable mode too). */
static bool should_split(const xsa_pool *p, const xsa_block *b, size_t size) {
    size_t remaining = b->size - size;
    switch (b->seg->split) {
    case XSA_SPLIT_ANY_REST: return remaining >= XSA_MIN_BLOCK_SIZE;
    case XSA_SPLIT_CLASSIC_LARGE: return size < p->opt.max_split_size && remaining > XSA_SMALL_SIZE;
    default: return false; /* no_split */
    }
}

/* The cache hit: hands out `size` bytes at the start of free block b; a
 * split-off rest stays in the free set (in place, as a rule), else b
 * leaves it. NULL only if out of host memory, with b still in the set. */
static xsa_block *alloc_cached_block(xsa_pool *p, xsa_block *b, size_t size, size_t requested) {
    xsa_pool_kind kind = b->seg->kind;
    xsa_free_set *set = xsa_free_set_of(b);
    xsa_split_tally t = {0, 0};
    xsa_tally(&t, b, -1);
    if (should_split(p, b, size)) {
        xsa_block *front = xsa_pool_new_front(p, b, size);
        if (!front) return NULL;
        xsa_free_set_rekey(set, b, b->ptr + size, b->size - size);
        xsa_stamp_free(p, b);
        xsa_tally(&t, b, +1);
        b = front;
    } else {
        xsa_free_set_erase(set, b);
    }
    xsa_inactive_split_change(p, kind, t);
    xsa_pool_hand_out(p, b, requested);
    return b;
}

/* The miss: the same for new memory b, not in the free set. */
static xsa_block *alloc_new_block(xsa_pool *p, xsa_block *b, size_t size, size_t requested) {
    if (should_split(p, b, size)) {
        xsa_block *front = xsa_pool_carve_front(p, b, size);
        xsa_pool_insert_free(p, b);
        if (!front) return NULL;
        b = front;
    }
    xsa_pool_hand_out(p, b, requested);
    return b;
}

/* A miss that the headroom rule would serve by moving pages (pool/recycle.c):
 * first the stream's own memory that waits for record_stream events, handed
 * over, if it fits the request. NULL if not. No event is queried during a
 * capture (pages_wanted is 0 then). */
static xsa_block *handed_over_block(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream,
                                    size_t size) {
    if (!p->expandable || !p->events.outstanding || !xsa_mempool_is_global(p, mp) ||
        !xsa_recycle_pages_wanted(p, size, (size + p->page_size - 1) / p->page_size) ||
        !xsa_recycle_hand_over_fit(p, kind, stream, size))
        return NULL;
    return get_free_block(p, mp, kind, stream, size);
}

/* A classic segment: one cuMemAlloc (or the memory pool's own
 * allocator), one block covering it. */
static xsa_pool_status alloc_classic(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size,
                                     xsa_block **out, char *err, size_t errlen) {
    xsa_block *b;
    xsa_seg *s = xsa_pool_new_records(p, mp, kind, stream, &b, err, errlen);
    if (!s) return XSA_POOL_HOST_OOM;
    uintptr_t base = 0;
    xsa_cu_result r = xsa_classic_alloc(p, mp, stream, size, &base);
    if (r != XSA_CU_SUCCESS) return xsa_pool_segment_failed(p, s, b, "cuMemAlloc", r, err, errlen);
    xsa_pool_link_new_segment(p, s, b, base, size);
    p->reserved += size;
    xsa_stats_update(p->stats.segment, kind, 1);
    xsa_stats_update(p->stats.reserved_bytes, kind, (int64_t)size);
    if (size >= p->opt.max_split_size) xsa_stat_update(&p->stats.oversize_segments, 1);
    p->stats.num_device_alloc++;
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_ALLOC, kind, s->base, size, size, stream);
    *out = b;
    return XSA_POOL_OK;
}

/* PyTorch's alloc_block: new memory for a request of `size` (block size)
 * whose classic segment would be `alloc_size`. */
static xsa_pool_status alloc_block(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size,
                                   bool retry, xsa_block **out, char *err, size_t errlen) {
    if (retry) p->stats.num_alloc_retries++;
    if ((p->expandable || mp->tag) && !xsa_mempool_owns_allocator(mp))
        return xsa_expand_alloc(p, mp, kind, stream, size, out, err, errlen);
    size_t alloc_size = allocation_size(size);
    if (p->reserved + alloc_size > p->allowed_max) return XSA_POOL_OOM;
    return alloc_classic(p, mp, kind, stream, alloc_size, out, err, errlen);
}

/* PyTorch's format_size: up to 1 KiB in bytes, then KiB, MiB and GiB with
 * two decimals (the boundaries included in the smaller unit). */
static void format_size(char *buf, size_t len, size_t bytes) {
    if (bytes <= 1024)
        snprintf(buf, len, "%zu bytes", bytes);
    else if (bytes <= ((size_t)1 << 20))
        snprintf(buf, len, "%.2f KiB", bytes / 1024.0);
    else if (bytes <= ((size_t)1 << 30))
        snprintf(buf, len, "%.2f MiB", bytes / 1048576.0);
    else
        snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
}

/* Free cached memory of the memory pools other than the global one: it
 * serves only their own allocations (PyTorch's "allocated in private
 * pools"). */
static size_t private_pools_cached(const xsa_pool *p) {
    size_t bytes = 0;
    for (const xsa_mempool *mp = p->mempools; mp; mp = mp->next)
        for (int k = 0; k < XSA_POOL_KINDS; k++) bytes += mp->free[k].bytes;
    return bytes;
}

/* PyTorch tells a request of 1 EiB or more apart. */
#define ONE_EXA_BYTES ((size_t)1 << 60)

/* The out-of-memory report: PyTorch's sentences, word for word and in its
 * order, with xsalloc's figures (the allocator named as what it is), then
 * xsalloc's own detail. "Tried to allocate" is, as in PyTorch, the size of
 * the segment the request would need (allocation_size), not the request. */
static void oom_report(xsa_pool *p, size_t requested, xsa_stream stream, char *err, size_t errlen) {
    size_t free_bytes = 0, total = 0;
    XSA_DRV(p->drv, mem_get_info, p->device, &free_bytes, &total);
    XSA_OBSERVE(p, XSA_OBS_OOM, requested <= XSA_SMALL_SIZE ? XSA_POOL_SMALL : XSA_POOL_LARGE, free_bytes, requested,
                requested, stream);
    char tot[32], fre[32];
    format_size(tot, sizeof tot, total);
    format_size(fre, sizeof fre, free_bytes);
    if (requested >= ONE_EXA_BYTES) {
        snprintf(err, errlen,
                 "CUDA out of memory. Tried to allocate more than 1EB memory. xsalloc: the request was %zu bytes on "
                 "stream %p; GPU %d has a total capacity of %s of which %s is free.",
                 requested, stream, p->device, tot, fre);
        return;
    }
    size_t rounded = round_size(&p->opt, requested), priv = private_pools_cached(p);
    size_t allocated = (size_t)p->stats.allocated_bytes[XSA_STAT_ALL].current;
    char seg[32], alc[32], unal[32], allowed[64] = "", in_priv[96] = "";
    format_size(seg, sizeof seg, allocation_size(rounded));
    format_size(alc, sizeof alc, allocated + priv);
    format_size(unal, sizeof unal, p->reserved - allocated - priv);
    if (p->opt.memory_fraction < 1.0) {
        format_size(allowed, sizeof allowed, p->allowed_max);
        strcat(allowed, " allowed; ");
    }
    if (priv) {
        char b[32];
        format_size(b, sizeof b, priv);
        snprintf(in_priv, sizeof in_priv, "with %s allocated in private pools (e.g., CUDA Graphs), ", b);
    }
    snprintf(err, errlen,
             "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "
             "%sOf the allocated memory %s is allocated by xsalloc, %sand %s is reserved by xsalloc but "
             "unallocated. xsalloc: the request was %zu bytes (a %zu-byte block) on stream %p. %s",
             seg, p->device, tot, fre, allowed, alc, in_priv, unal, requested, rounded, stream,
             p->expandable ? "If reserved but unallocated memory is large, set max_split_size_mb in XSALLOC_CONF to "
                             "limit splitting of large blocks."
                           : "If reserved but unallocated memory is large, set expandable_segments:True (xsalloc's "
                             "default) in XSALLOC_CONF to avoid fragmentation, or max_split_size_mb to limit "
                             "splitting of large blocks.");
}

/* PyTorch's use_on_oom: a free block (left in its free set) of a memory
 * pool in use that lends its memory to the global pool's misses. */
static xsa_block *lent_block(xsa_pool *p, xsa_pool_kind kind, xsa_stream stream, size_t size) {
    for (xsa_mempool *mp = p->mempools; mp; mp = mp->next) {
        if (!mp->use_on_oom || xsa_mempool_released(mp) || mp->paused) continue;
        xsa_block *b = get_free_block(p, mp, kind, stream, size);
        if (b) return b;
    }
    return NULL;
}

/* The miss path: PyTorch's order of fallbacks. *lent says that *out is a
 * cached block of a use_on_oom pool, still in its free set (the lending
 * comes before any release, as in PyTorch: releasing is expensive).
 * During a capture nothing is released: freeing memory synchronizes, and
 * the full release waits for events. */
static xsa_pool_status alloc_on_miss(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream,
                                     size_t size, xsa_block **out, bool *lent, char *err, size_t errlen) {
    bool capturing = p->capturing > 0;
    if (p->opt.garbage_collection_threshold > 0 && !capturing) xsa_garbage_collect(p);
    xsa_pool_status st = alloc_block(p, mp, kind, stream, size, false, out, err, errlen);
    if (st != XSA_POOL_OOM) return st;
    if (xsa_mempool_is_global(p, mp) && (*out = lent_block(p, kind, stream, size))) {
        *lent = true;
        return XSA_POOL_OK;
    }
    if (capturing) return st;
    if (xsa_release_available(p, mp, kind, stream, size)) {
        st = alloc_block(p, mp, kind, stream, size, false, out, err, errlen);
        if (st != XSA_POOL_OOM) return st;
    }
    st = xsa_release_cached(p, err, errlen);
    if (st != XSA_POOL_OK) return st;
    return alloc_block(p, mp, kind, stream, size, true, out, err, errlen);
}

/* A tagged memory pool learns that a graph is captured into it (pool/pause.c
 * keeps such a pool's free pages and waits for the device). */
static __attribute__((noinline, cold)) void note_capture(xsa_pool *p, xsa_mempool *mp, xsa_stream stream) {
    int status = XSA_CAPTURE_NONE;
    if (XSA_DRV(p->drv, stream_get_capture_info, stream, &status, NULL, NULL, NULL) == XSA_CU_SUCCESS &&
        status != XSA_CAPTURE_NONE)
        mp->captured = true;
}

/* malloc, with `fallback` as the memory pool of requests no routing takes
 * (the global one, or a thread's tag region's: xsa_pool_malloc_in_region). */
static inline xsa_pool_status pool_malloc(xsa_pool *p, xsa_mempool *fallback, size_t size, xsa_stream stream,
                                          void **out, char *err, size_t errlen) {
    if (size > p->device_total) {
        /* Larger than the device: rounding could overflow, and no retry helps. */
        p->stats.num_ooms++;
        oom_report(p, size, stream, err, errlen);
        return XSA_POOL_OOM;
    }
    if (!xsa_ptr_map_reserve_one(&p->allocated)) return xsa_pool_host_oom(p->device, err, errlen);
    /* A call only when events wait; none during a capture (a query of an
     * event recorded in it would invalidate it). */
    if (p->events.outstanding && !p->capturing) xsa_events_poll(&p->events, xsa_pool_block_done, p);
    if (p->exports) xsa_ipc_poll(p);
    /* During a capture, cross-stream frees the graph has ordered may
     * return first (capture_reuse.c); the block handed out is stamped. */
    uint64_t capture = __builtin_expect(p->capturing, 0) ? xsa_capture_reuse_malloc(p, stream) : 0;
    xsa_mempool *mp = fallback;
    if (__builtin_expect(p->n_routes != 0, 0)) {
        xsa_mempool *routed = xsa_mempool_route(p, stream);
        if (routed != &p->global) mp = routed;
        if (mp->paused) return xsa_pause_refuse(p, mp, err, errlen);
        if (mp->tag && !mp->captured && p->capturing) note_capture(p, mp, stream);
    }
    size_t rounded = round_size(&p->opt, size);
    xsa_pool_kind kind = rounded <= XSA_SMALL_SIZE ? XSA_POOL_SMALL : XSA_POOL_LARGE;
    XSA_OBSERVE(p, XSA_OBS_MALLOC_BEGIN, kind, 0, size, rounded, stream);
    xsa_block *b = get_free_block(p, mp, kind, stream, rounded), *a;
    if (!b) b = handed_over_block(p, mp, kind, stream, rounded);
    /* A block in a free set (a hit, or lent by a use_on_oom pool) or new
     * memory: one call site each, so that both stay inlined. */
    bool fresh = false;
    if (!b) {
        XSA_OBSERVE(p, XSA_OBS_MEMORY_BEGIN, kind, 0, size, rounded, stream);
        bool lent = false;
        xsa_pool_status st = alloc_on_miss(p, mp, kind, stream, rounded, &b, &lent, err, errlen);
        if (st == XSA_POOL_OOM) {
            p->stats.num_ooms++;
            oom_report(p, size, stream, err, errlen);
        }
        if (st != XSA_POOL_OK) return st;
        XSA_OBSERVE(p, XSA_OBS_MEMORY_END, kind, b->ptr, size, b->size, stream);
        fresh = !lent;
    }
    a = fresh ? alloc_new_block(p, b, rounded, size) : alloc_cached_block(p, b, rounded, size);
    if (!a) return xsa_pool_host_oom(p->device, err, errlen);
    if (capture) a->capture_id = capture;
    XSA_OBSERVE(p, XSA_OBS_ALLOC, kind, a->ptr, size, a->size, stream);
    *out = (void *)a->ptr;
    return XSA_POOL_OK;
}

xsa_pool_status xsa_pool_malloc(xsa_pool *p, size_t size, xsa_stream stream, void **out, char *err, size_t errlen) {
    return pool_malloc(p, &p->global, size, stream, out, err, errlen);
}

xsa_pool_status xsa_pool_malloc_in_region(xsa_pool *p, xsa_mempool_id region, uint32_t tag, const char *name,
                                          uint32_t flags, size_t size, xsa_stream stream, void **out, char *err,
                                          size_t errlen) {
    xsa_mempool *mp = xsa_mempool_find(p, region);
    if (!mp) {
        if (!(mp = xsa_mempool_new(p, region))) return xsa_pool_host_oom(p->device, err, errlen);
        xsa_pool_status st = xsa_pause_set_tag(p, region, tag, name, flags, err, errlen);
        if (st != XSA_POOL_OK) {
            xsa_mempool_delete(p, mp);
            return st;
        }
    }
    if (mp->paused) return xsa_pause_refuse(p, mp, err, errlen);
    return pool_malloc(p, mp, size, stream, out, err, errlen);
}

/* The allocation that contains ptr, for error messages (slow path). */
static const xsa_block *block_containing(const xsa_pool *p, uintptr_t ptr) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (ptr < s->base || ptr >= s->base + s->size) continue;
        for (const xsa_block *b = s->first; b; b = b->next)
            if (ptr >= b->ptr && ptr < b->ptr + b->size) return b;
    }
    return NULL;
}

static xsa_pool_status bad_pointer(const xsa_pool *p, const char *what, void *ptr, char *err, size_t errlen) {
    const xsa_block *b = block_containing(p, (uintptr_t)ptr);
    if (b && b->allocated && b->ptr != (uintptr_t)ptr)
        snprintf(err, errlen,
                 "%s(%p): not a live allocation: the pointer is inside the allocation at %#lx (size %zu) on device "
                 "%d, not its start", what, ptr, (unsigned long)b->ptr, b->size, p->device);
    else if (b)
        snprintf(err, errlen, "%s(%p): not a live allocation on device %d (already freed?)", what, ptr, p->device);
    else
        snprintf(err, errlen, "%s(%p): not a live allocation of xsalloc on device %d (unknown pointer)", what, ptr,
                 p->device);
    return XSA_POOL_BAD_POINTER;
}

/* A freed block used on other streams waits for events recorded on them
 * now, or during a capture for its end (capture.c records them then) or,
 * with capture_reuse, until the captured graph orders its uses. */
static xsa_pool_status wait_for_uses(xsa_pool *p, xsa_block *b, char *err, size_t errlen) {
    if (p->capturing) {
        if (xsa_mempool_defer(p, b)) {
            xsa_capture_reuse_free(p, b); /* or sooner, once the graph orders the uses */
            return XSA_POOL_OK;
        }
        return xsa_pool_host_oom(p->device, err, errlen);
    }
    const char *call = "";
    xsa_cu_result r = xsa_events_record_uses(&p->events, b, &call);
    if (r == XSA_CU_SUCCESS) return XSA_POOL_OK;
    xsa_pool_driver_error(p, call, r, err, errlen);
    return XSA_POOL_DRIVER_ERROR;
}

/* A block of released memory pool mp was freed: if it was the last, the
 * pool's memory goes back (a failure leaves it to empty_cache; the free
 * has succeeded). Out of line: the hot path only tests use_count. */
static __attribute__((noinline, cold)) void free_released(xsa_pool *p, xsa_mempool *mp) {
    char ignored[256];
    if (!p->capturing && !xsa_mempool_in_use(p, mp)) xsa_release_mempool(p, mp, ignored, sizeof ignored);
}

/* Before a block of released pool mp is freed during a capture: the
 * capturing pools keep mp's memory (release.c says why). */
static __attribute__((noinline, cold)) xsa_pool_status keep_released(xsa_pool *p, xsa_mempool *mp, char *err,
                                                                    size_t errlen) {
    if (xsa_mempool_keep(p, mp)) return XSA_POOL_OK;
    return xsa_pool_host_oom(p->device, err, errlen);
}

/* A block of a paused memory pool was freed (pool/pause.c); if the pool
 * is released, its memory record may go with it. */
static __attribute__((noinline, cold)) xsa_pool_status free_paused(xsa_pool *p, xsa_block *b) {
    xsa_mempool *mp = b->seg->mp;
    xsa_pause_free(p, b);
    if (xsa_mempool_released(mp)) free_released(p, mp);
    return XSA_POOL_OK;
}

xsa_pool_status xsa_pool_free(xsa_pool *p, void *ptr, char *err, size_t errlen) {
    xsa_block *b = xsa_ptr_map_remove(&p->allocated, (uintptr_t)ptr);
    if (!b) return bad_pointer(p, "xsa_free", ptr, err, errlen);
    xsa_mempool *mp = b->seg->mp;
    if (__builtin_expect(b->seg->paused, 0)) return free_paused(p, b);
    if (__builtin_expect(b->backup != NULL, 0)) xsa_backup_drop(p, b); /* a copy kept after a resume */
    xsa_pool_status st = XSA_POOL_OK;
    if (__builtin_expect(xsa_mempool_released(mp), 0) && p->capturing) st = keep_released(p, mp, err, errlen);
    if (st == XSA_POOL_OK && b->n_stream_uses > 0) st = wait_for_uses(p, b, err, errlen);
    if (st != XSA_POOL_OK) {
        xsa_ptr_map_insert_reserved(&p->allocated, b->ptr, b); /* still allocated; its slot was just freed */
        return st;
    }
    xsa_pool_kind kind = b->seg->kind;
    size_t size = b->size, requested = b->requested; /* b may merge away below */
    xsa_stream stream = b->stream;
    XSA_OBSERVE(p, XSA_OBS_FREE_REQUESTED, kind, b->ptr, requested, size, stream);
    xsa_pool_give_back(p, b);
    if (b->ipc_exports)
        xsa_ipc_poll(p); /* returns b to the cache if its exports are over */
    else if (b->event_count == 0 && !b->capture_deferred)
        xsa_pool_free_block(p, b);
    XSA_OBSERVE(p, XSA_OBS_FREE_END, kind, (uintptr_t)ptr, requested, size, stream);
    if (__builtin_expect(xsa_mempool_released(mp), 0)) free_released(p, mp);
    return XSA_POOL_OK;
}

xsa_pool_status xsa_pool_record_stream(xsa_pool *p, void *ptr, xsa_stream stream, char *err, size_t errlen) {
    xsa_block *b = xsa_ptr_map_get(&p->allocated, (uintptr_t)ptr);
    if (!b) return bad_pointer(p, "xsa_record_stream", ptr, err, errlen);
    if (stream == b->stream) return XSA_POOL_OK; /* uses on the allocation stream need no event */
    if (!xsa_block_add_stream_use(b, stream)) return xsa_pool_host_oom(p->device, err, errlen);
    XSA_OBSERVE(p, XSA_OBS_RECORD_STREAM, b->seg->kind, b->ptr, b->requested, b->size, stream);
    return XSA_POOL_OK;
}

bool xsa_pool_owns(const xsa_pool *p, void *ptr) { return xsa_ptr_map_get(&p->allocated, (uintptr_t)ptr) != NULL; }

size_t xsa_pool_live_blocks(const xsa_pool *p) { return p->live_blocks; }
