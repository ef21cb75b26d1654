/*
 * pool/pages: an expandable segment's pages seen as blocks, for the
 * policies that change them (expand.c grows, recycle.c moves, release.c
 * unmaps): the accounting of pages gained or lost, isolating whole pages
 * inside a free block, unmapping them, merging unmapped ranges, and
 * destroying an empty segment. Unmapped ranges are blocks too (mapped ==
 * false, page aligned, in no free set). Calls only the core below it.
 */
#include "pool/pages.h"

#include <stdio.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/errors.h"
#include "pool/state.h"
#include "pool/trace.h"

void xsa_pages_account(xsa_pool *p, xsa_seg *s, size_t moved, size_t created, int sign) {
    size_t pages = moved + created, bytes = pages * p->page_size;
    p->reserved = sign > 0 ? p->reserved + bytes : p->reserved - bytes;
    xsa_stats_update(p->stats.reserved_bytes, s->kind, sign * (int64_t)bytes);
    /* `segment` counts device allocations of whole segments (cuMemAlloc),
     * as PyTorch's expandable segments leave it: they never count one.
     * Moved pages are not device allocations or frees. */
    if (!created) return;
    if (sign > 0) {
        p->stats.num_device_alloc++;
        p->stats.num_pages_mapped += (int64_t)created;
    } else {
        p->stats.num_device_free++;
        p->stats.num_pages_unmapped += (int64_t)created;
    }
}

void xsa_pages_merge_unmapped(xsa_pool *p, xsa_block *u) {
    if (u->prev && !u->prev->mapped) xsa_pool_absorb(p, u, u->prev);
    if (u->next && !u->next->mapped) xsa_pool_absorb(p, u, u->next);
}

void xsa_pages_return_free(xsa_pool *p, xsa_block *b) {
    if (xsa_block_free_neighbour(b->prev)) xsa_pool_absorb(p, b, b->prev);
    if (xsa_block_free_neighbour(b->next)) xsa_pool_absorb(p, b, b->next);
    xsa_pool_insert_free(p, b);
}

/* Fills in piece as the free block [lo, hi) of b's segment between prev and next. */
static void link_piece(xsa_block *piece, const xsa_block *b, uintptr_t lo, uintptr_t hi, xsa_block *prev,
                       xsa_block *next) {
    piece->ptr = lo;
    piece->size = hi - lo;
    piece->stream = b->stream;
    piece->seg = b->seg;
    piece->mapped = true;
    piece->prev = prev;
    piece->next = next;
    if (prev) prev->next = piece;
    if (next) next->prev = piece;
    xsa_fix_first(piece);
}

xsa_pool_status xsa_pages_isolate(xsa_pool *p, xsa_block *b, uintptr_t lo, uintptr_t hi, char *err, size_t errlen) {
    /* Records for the pieces around [lo, hi), taken before anything changes. */
    xsa_block *head = NULL, *tail = NULL;
    if ((lo > b->ptr && !(head = xsa_block_new(&p->blocks))) ||
        (hi < b->ptr + b->size && !(tail = xsa_block_new(&p->blocks)))) {
        if (head) xsa_block_delete(&p->blocks, head);
        return xsa_pool_host_oom(p->device, err, errlen);
    }
    xsa_pool_erase_free(p, b);
    uintptr_t b_end = b->ptr + b->size;
    if (head) link_piece(head, b, b->ptr, lo, b->prev, b);
    if (tail) link_piece(tail, b, hi, b_end, b, b->next);
    b->ptr = lo;
    b->size = hi - lo;
    /* The pieces are inserted once their neighbours are final, so that the
     * inactive_split accounting sees them as they stay. */
    if (head) xsa_pool_insert_free(p, head);
    if (tail) xsa_pool_insert_free(p, tail);
    return XSA_POOL_OK;
}

bool xsa_pages_whole_chunks(const xsa_pool *p, const xsa_block *b, size_t *first, size_t *end) {
    const xsa_segment *vm = &b->seg->vm;
    size_t page = p->page_size, start;
    size_t lo = (b->ptr - b->seg->base + page - 1) / page, hi = (b->ptr + b->size - b->seg->base) / page;
    if (hi <= lo) return false;
    size_t len = xsa_segment_chunk(vm, lo, &start);
    if (start < lo) lo = start + len; /* the first chunk starts before b */
    if (hi <= lo) return false;
    len = xsa_segment_chunk(vm, hi - 1, &start);
    if (start + len > hi) hi = start; /* the last one ends after it */
    if (hi <= lo) return false;
    *first = lo;
    *end = hi;
    return true;
}

/* The whole pages inside b: [*first, *end), false if none. */
static bool whole_pages(const xsa_pool *p, const xsa_block *b, size_t *first, size_t *end) {
    size_t page = p->page_size;
    *first = (b->ptr - b->seg->base + page - 1) / page;
    *end = (b->ptr + b->size - b->seg->base) / page;
    return *end > *first;
}

bool xsa_pages_forget_free(xsa_pool *p, xsa_block *b) {
    xsa_seg *s = b->seg;
    size_t page = p->page_size, first, end;
    char ignored[64];
    if (!whole_pages(p, b, &first, &end) ||
        xsa_pages_isolate(p, b, s->base + first * page, s->base + end * page, ignored, sizeof ignored) != XSA_POOL_OK)
        return false;
    b->mapped = false;
    xsa_stat_update(&p->stats.paused_bytes, -(int64_t)((end - first) * page));
    xsa_pages_merge_unmapped(p, b);
    return true;
}

bool xsa_pages_segment_holds(const xsa_seg *s) {
    if (!s->paused) return s->vm.mapped_pages > 0;
    for (const xsa_block *b = s->first; b; b = b->next)
        if (b->mapped) return true;
    return false;
}

xsa_pool_status xsa_pages_unmap_block(xsa_pool *p, xsa_block *b, char *err, size_t errlen) {
    xsa_seg *s = b->seg;
    size_t page = p->page_size, first, end;
    if (s->paused) {
        xsa_pages_forget_free(p, b); /* nothing is mapped: nothing to wait for */
        return XSA_POOL_OK;
    }
    if (!xsa_pages_whole_chunks(p, b, &first, &end)) return XSA_POOL_OK;
    /* cuMemUnmap is not stream ordered: kernels still queued on the stream
     * may use these pages. Releasing memory may block (PyTorch does too). */
    xsa_cu_result r = XSA_DRV(p->drv, stream_synchronize, s->stream);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuStreamSynchronize", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    uintptr_t lo = s->base + first * page, hi = s->base + end * page;
    xsa_pool_status st = xsa_pages_isolate(p, b, lo, hi, err, errlen);
    if (st != XSA_POOL_OK) return st;
    r = xsa_segment_unmap(&s->vm, first, end - first, NULL);
    if (r != XSA_CU_SUCCESS) {
        xsa_pages_return_free(p, b);
        xsa_pool_driver_error(p, "cuMemUnmap", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    b->mapped = false;
    xsa_pages_account(p, s, 0, end - first, -1);
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_UNMAP, s->kind, lo, hi - lo, hi - lo, s->stream);
    xsa_pages_merge_unmapped(p, b);
    return XSA_POOL_OK;
}

bool xsa_pages_destroy_segment(xsa_pool *p, xsa_seg *s) {
    if (p->listener.released) p->listener.released(p->listener.ctx, s->base);
    if (xsa_segment_destroy(&s->vm) != XSA_CU_SUCCESS) {
        /* The range stays: it is found again, as a segment of this device. */
        if (p->listener.reserved) p->listener.reserved(p->listener.ctx, p->device, s->base, s->size);
        return false;
    }
    for (xsa_block *b = s->first; b;) {
        xsa_block *next = b->next;
        if (b->in_free_set) xsa_pool_erase_free(p, b);
        xsa_block_delete(&p->blocks, b);
        b = next;
    }
    xsa_pool_drop_segment(p, s);
    return true;
}
