/*
 * pool/expand: the pool's side of expandable segments.
 *
 * Each (memory pool, stream, pool kind) has one segment: a reserved range
 * as large as the device, tiled by blocks. Unmapped ranges are blocks too
 * (pool/pages); a miss maps just the pages needed at the start of an
 * unmapped block, merged with the free block before it, taking pages from
 * page recycling when the headroom rule says so, and creating the rest as
 * handles of the size recycle.c's rule gives (several pages each once
 * enough memory is in use). The unmapped block is chosen to leave the
 * fewest free bytes in partial pages (they can be neither recycled nor
 * released), then by best fit.
 */
#include "pool/expand.h"

#include <stdio.h>
#include <stdlib.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/errors.h"
#include "pool/pages.h"
#include "pool/recycle.h"
#include "pool/state.h"
#include "pool/trace.h"

static xsa_seg *find_segment(xsa_pool *p, const xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream) {
    for (xsa_seg *s = p->segments; s; s = s->next_seg)
        if (s->expandable && s->kind == kind && s->stream == stream && s->mp == mp) return s;
    return NULL;
}

static xsa_pool_status create_segment(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream,
                                      xsa_seg **out, char *err, size_t errlen) {
    xsa_block *b;
    xsa_seg *s = xsa_pool_new_records(p, mp, kind, stream, &b, err, errlen);
    if (!s) return XSA_POOL_HOST_OOM;
    xsa_cu_result r = xsa_segment_init(&s->vm, p->drv, p->device, p->device_total);
    if (r != XSA_CU_SUCCESS) return xsa_pool_segment_failed(p, s, b, "cuMemAddressReserve", r, err, errlen);
    s->vm.exportable = p->ipc;
    /* Cannot fail: nothing is mapped yet, and the pool keeps fewer peers
     * than a segment's access list holds. */
    for (int i = 0; i < p->n_peers; i++) xsa_segment_add_access(&s->vm, p->peers[i]);
    s->expandable = true;
    b->mapped = false;
    xsa_pool_link_new_segment(p, s, b, (uintptr_t)s->vm.base, s->vm.max_pages * s->vm.page_size);
    if (p->listener.reserved) p->listener.reserved(p->listener.ctx, p->device, s->base, s->size);
    *out = s;
    return XSA_POOL_OK;
}

/* Bytes a request could get from unmapped block u: u plus the free blocks
 * on both sides (the one after only once u is mapped whole). */
static size_t room(const xsa_block *u) {
    return u->size + (xsa_block_free_neighbour(u->prev) ? u->prev->size : 0) +
           (xsa_block_free_neighbour(u->next) ? u->next->size : 0);
}

/* How the free bytes in partial pages around unmapped block u change if
 * a request of `size` is mapped there: what is left after the request,
 * less the free blocks beside u that it uses (negative: it fills the
 * partial page of a free block before u, or maps u whole into the one
 * after). Partial pages cannot be recycled, so they are what reserved
 * memory keeps beyond allocated. */
static long long partial_change(const xsa_block *u, size_t size, size_t page) {
    size_t before = xsa_block_free_neighbour(u->prev) ? u->prev->size : 0;
    size_t after = xsa_block_free_neighbour(u->next) ? u->next->size : 0;
    if (before >= size) return 0;
    size_t need = size - before, bytes = (need + page - 1) / page * page;
    if (bytes < u->size) return (long long)(bytes - need) - (long long)before;
    return (long long)(before + u->size + after - size) - (long long)(before + after);
}

/* Among the segment's unmapped blocks with room for `size`: the one that
 * leaves the fewest free bytes in partial pages, then the best fit, then
 * the lowest address. (Best fit alone left a partial page at the end of
 * most mapped runs: 3% of allocated memory in the multi-stream trace.) */
static xsa_block *find_unmapped(const xsa_seg *s, size_t size) {
    xsa_block *best = NULL;
    long long best_change = 0;
    for (xsa_block *b = s->first; b; b = b->next) {
        if (b->mapped || b->held || room(b) < size) continue;
        long long change = partial_change(b, size, s->vm.page_size);
        if (!best || change < best_change || (change == best_change && room(b) < room(best))) {
            best = b;
            best_change = change;
        }
    }
    return best;
}

/* Maps pages for a request of `size` bytes in segment s. */
static xsa_pool_status grow(xsa_pool *p, xsa_seg *s, size_t size, xsa_block **out, char *err, size_t errlen) {
    /* Old addresses of moved pages whose work is done give their range back
     * (before choosing where to map: they merge with unmapped blocks); not
     * during a capture, which an event query would invalidate. With the
     * helper thread most were unmapped off the allocation path already
     * (pool/jobs.c): they only merge here. */
    if (p->drains && !p->capturing) xsa_recycle_drain(p, false);
    xsa_block *u = find_unmapped(s, size);
    if (!u) return XSA_POOL_OOM; /* the reservation is as large as the device */
    xsa_block *before = xsa_block_free_neighbour(u->prev) ? u->prev : NULL;
    size_t have = before ? before->size : 0;
    /* have >= size only when the oversize rules refused `before`: still map a page. */
    size_t need = size > have ? size - have : 1;
    size_t bytes = (need + p->page_size - 1) / p->page_size * p->page_size;
    if (bytes > u->size) bytes = u->size; /* the free block after u makes up the rest */
    size_t pages = bytes / p->page_size;
    /* Recycled chunks are mapped elsewhere in this pool: no new memory. The
     * rest are new chunks. Recycling may take more than it is asked for,
     * never more than the growth maps. */
    size_t moved = 0, n_moved = 0, wanted = xsa_recycle_pages_wanted(p, size, pages);
    xsa_chunk *chunks = wanted ? malloc(pages * sizeof *chunks) : NULL;
    const xsa_drain *mark = p->drains;
    if (chunks) moved = xsa_recycle_take(p, s, before, u->next, wanted, pages, chunks, &n_moved);
    if (p->reserved + (pages - moved) * p->page_size > p->allowed_max) {
        xsa_recycle_undo(p, mark);
        free(chunks);
        return XSA_POOL_OOM;
    }
    /* Take the block record before mapping, so nothing can fail after. */
    xsa_block *m = bytes < u->size ? xsa_pool_carve_front(p, u, bytes) : u;
    xsa_cu_result r = XSA_CU_ERROR_OUT_OF_MEMORY;
    if (m)
        r = xsa_segment_map_chunks(&s->vm, xsa_seg_page_of(p, s, m->ptr), pages, chunks, n_moved,
                                   xsa_recycle_new_chunk_pages(p, size));
    free(chunks);
    if (r != XSA_CU_SUCCESS) {
        xsa_recycle_undo(p, mark);
        if (!m) return xsa_pool_host_oom(p->device, err, errlen);
        if (m != u) xsa_pool_absorb(p, u, m); /* give the carved range back to u */
        if (r == XSA_CU_ERROR_OUT_OF_MEMORY) return XSA_POOL_OOM;
        xsa_pool_driver_error(p, "mapping pages (cuMemCreate/cuMemMap/cuMemSetAccess)", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    m->mapped = true;
    xsa_pages_account(p, s, moved, pages - moved, +1);
    p->stats.num_pages_recycled += (int64_t)moved;
    /* The helper readies pages where this growth ended (pool/ready.c) and
     * unmaps the old addresses of the moved ones (pool/jobs.c). */
    s->grew_at = xsa_seg_page_of(p, s, m->ptr + bytes);
    s->grew_pages = pages - moved;
    xsa_pool_want_helper(p);
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_MAP, s->kind, m->ptr, bytes, bytes, s->stream);
    if (before) xsa_pool_absorb(p, m, before);
    if (xsa_block_free_neighbour(m->next)) xsa_pool_absorb(p, m, m->next);
    *out = m;
    return XSA_POOL_OK;
}

xsa_pool_status xsa_expand_alloc(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size,
                                 xsa_block **out, char *err, size_t errlen) {
    xsa_seg *s = find_segment(p, mp, kind, stream);
    if (!s) {
        xsa_pool_status st = create_segment(p, mp, kind, stream, &s, err, errlen);
        if (st != XSA_POOL_OK) return st;
    }
    xsa_pool_status st = grow(p, s, size, out, err, errlen);
    /* A failed request leaves no empty reservation behind (one made for it
     * for a new stream, or one whose pages recycling took). */
    if (st != XSA_POOL_OK && s->vm.mapped_pages == 0) xsa_pages_destroy_segment(p, s);
    return st;
}

