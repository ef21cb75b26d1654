/*
 * pool/capture: the memory pool calls (create, release, begin and end of a
 * routing), the end of a capture, and empty_cache (semantics in pool.h and
 * xsalloc/xsalloc.h).
 *
 * During a capture the pool must not query or wait for an event: a query
 * of an event recorded in the capture invalidates it (CUDA_ERROR_CAPTURED_
 * EVENT, measured on an H100). So a block freed then with uses on other
 * streams is only queued (mempool.c); when the last capturing routing
 * ends, its events are recorded on those streams and it waits for them as
 * any record_stream free does. Released memory pools whose memory could
 * not go back during the capture (unmapping synchronizes) give it back
 * then. This file sits above the core (mempool.c, events.c, pool.c) and
 * release.c; none of them calls it.
 */
#include "pool/capture.h"

#include <stdio.h>

#include "pool/capture_reuse.h"
#include "pool/core.h"
#include "pool/errors.h"
#include "pool/events.h"
#include "pool/mempool.h"
#include "pool/release.h"
#include "pool/state.h"

static bool is_private(xsa_mempool_id id) { return id.first != 0 || id.second != 0; }

xsa_pool_status xsa_pool_mempool_create(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen) {
    if (!is_private(id)) return xsa_pool_invalid_pool(p->device, "xsa_mempool_create", id, "(0, 0) is the device's own cache",
        err, errlen);
    xsa_mempool *mp = xsa_mempool_find(p, id);
    if (mp)
        mp->use_count++;
    else if (!xsa_mempool_new(p, id))
        return xsa_pool_host_oom(p->device, err, errlen);
    return XSA_POOL_OK;
}

/* A pool that a released one kept gives its memory back if nothing else
 * keeps it (a driver error leaves it to empty_cache, as a free does). */
static void release_kept(xsa_pool *p, xsa_mempool *kept) {
    char ignored[256];
    xsa_release_mempool(p, kept, ignored, sizeof ignored);
}

xsa_pool_status xsa_pool_mempool_release(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen) {
    const char *what = "xsa_mempool_release";
    if (!is_private(id)) return xsa_pool_invalid_pool(p->device, what, id, "(0, 0) is the device's own cache", err,
                                                      errlen);
    xsa_mempool *mp = xsa_mempool_find(p, id);
    if (!mp || xsa_mempool_released(mp)) return xsa_pool_invalid_pool(p->device, what, id, "no such pool in use",
                                                                      err, errlen);
    /* Allocations routed to a released pool would never return its memory. */
    if (mp->use_count == 1 && xsa_mempool_route_index(p, mp) >= 0)
        return xsa_pool_invalid_pool(p->device, what, id,
                                     "its last use is a routing: end it first (xsa_end_allocate_to_pool)", err, errlen);
    mp->use_count--;
    if (xsa_mempool_released(mp)) xsa_mempool_drop_kept(p, mp, release_kept);
    return xsa_release_mempool(p, mp, err, errlen);
}

xsa_pool_status xsa_pool_begin_allocate_to_pool(xsa_pool *p, xsa_mempool_id id, xsa_stream_filter filter, void *ctx,
                                                bool capture, char *err, size_t errlen) {
    const char *what = "xsa_begin_allocate_to_pool";
    if (!is_private(id)) return xsa_pool_invalid_pool(p->device, what, id, "(0, 0) is the device's own cache", err,
                                                      errlen);
    xsa_mempool *mp = xsa_mempool_find(p, id);
    if (mp && xsa_mempool_route_index(p, mp) >= 0) return xsa_pool_invalid_pool(p->device, what, id,
                                                                                "already routed to", err, errlen);
    bool created = !mp;
    if (created && !(mp = xsa_mempool_new(p, id))) return xsa_pool_host_oom(p->device, err, errlen);
    if (!xsa_mempool_add_route(p, mp, filter, ctx, capture)) {
        if (created) xsa_mempool_delete(p, mp);
        return xsa_pool_host_oom(p->device, err, errlen);
    }
    if (!created) mp->use_count++;
    return XSA_POOL_OK;
}

/* The capture's deferred frees record their events now. A block whose
 * recording fails stays deferred for the next try; the first error is
 * returned. */
static xsa_pool_status flush_deferred(xsa_pool *p, char *err, size_t errlen) {
    xsa_pool_status st = XSA_POOL_OK;
    size_t kept = 0;
    for (size_t i = 0; i < p->n_deferred; i++) {
        xsa_block *b = p->deferred[i];
        const char *call = "";
        xsa_cu_result r = xsa_events_record_uses(&p->events, b, &call);
        if (r != XSA_CU_SUCCESS) {
            if (st == XSA_POOL_OK) xsa_pool_driver_error(p, call, r, err, errlen);
            st = XSA_POOL_DRIVER_ERROR;
            p->deferred[kept++] = b;
            continue;
        }
        b->capture_deferred = false;
    }
    p->n_deferred = kept;
    return st;
}

/* No capture is left: deferred frees wait for events, released memory
 * pools give back what they could not during the capture. */
static xsa_pool_status capture_over(xsa_pool *p, char *err, size_t errlen) {
    xsa_capture_reuse_forget(p); /* the markers name nodes of graphs whose capture ended */
    xsa_pool_status st = flush_deferred(p, err, errlen);
    for (xsa_mempool *mp = p->mempools, *next; mp; mp = next) {
        next = mp->next; /* mp may go */
        if (!xsa_mempool_released(mp)) continue;
        xsa_pool_status r = xsa_release_mempool(p, mp, err, errlen);
        if (st == XSA_POOL_OK) st = r;
    }
    return st;
}

xsa_pool_status xsa_pool_end_allocate_to_pool(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen) {
    xsa_mempool *mp = is_private(id) ? xsa_mempool_find(p, id) : NULL;
    int i = mp ? xsa_mempool_route_index(p, mp) : -1;
    if (i < 0) return xsa_pool_invalid_pool(p->device, "xsa_end_allocate_to_pool", id, "no routing to this pool",
                                            err, errlen);
    xsa_mempool_remove_route(p, i);
    return p->capturing ? XSA_POOL_OK : capture_over(p, err, errlen);
}

bool xsa_pool_capturing(const xsa_pool *p) { return p->capturing > 0; }

bool xsa_pool_mempool_exists(const xsa_pool *p, xsa_mempool_id id, int *uses) {
    const xsa_mempool *mp = xsa_mempool_find((xsa_pool *)p, id);
    if (mp && uses) *uses = mp->use_count;
    return mp != NULL;
}

xsa_pool_status xsa_pool_empty_cache(xsa_pool *p, char *err, size_t errlen) {
    /* Releasing waits for events and synchronizes streams: not during a
     * capture (PyTorch's would fail the capture). */
    if (p->capturing) return XSA_POOL_OK;
    xsa_pool_status st = p->n_deferred ? flush_deferred(p, err, errlen) : XSA_POOL_OK;
    return st == XSA_POOL_OK ? xsa_release_cached(p, err, errlen) : st;
}
