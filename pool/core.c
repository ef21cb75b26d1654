/*
 * pool/core: the block pool's core below the policies (design in pool.h):
 * the segment list, free-set membership with its stats, splitting and
 * merging blocks, and new segments' records. The policies (expand.c,
 * pages.c, recycle.c, release.c, ipc.c, peer.c, capture.c) and the
 * malloc/free paths (pool.c) call it; it calls only the free sets,
 * memory pool records and block records below it.
 */
#include "pool/core.h"

#include <stdio.h>
#include <stdlib.h>

#include "pool/block.h"
#include "pool/free_set.h"
#include "pool/state.h"
#include "pool/trace.h"

void xsa_pool_driver_error(xsa_pool *p, const char *call, xsa_cu_result r, char *err, size_t errlen) {
    snprintf(err, errlen, "device %d: %s failed: %s (CUresult %d)", p->device, call, p->drv->error_string(r), r);
}

void xsa_pool_link_segment(xsa_pool *p, xsa_seg *s) {
    s->prev_seg = NULL;
    s->next_seg = p->segments;
    if (p->segments) p->segments->prev_seg = s;
    p->segments = s;
}

void xsa_pool_drop_segment(xsa_pool *p, xsa_seg *s) {
    if (s->prev_seg)
        s->prev_seg->next_seg = s->next_seg;
    else
        p->segments = s->next_seg;
    if (s->next_seg) s->next_seg->prev_seg = s->prev_seg;
    xsa_free_set_detach(&s->mp->free[s->kind], s->stream);
    s->mp->segments--;
    free(s->free_since);
    free(s->used_pages);
    free(s);
}

void xsa_pool_insert_free(xsa_pool *p, xsa_block *b) {
    xsa_split_tally t = {0, 0};
    xsa_stamp_free(p, b);
    xsa_free_set_insert(xsa_free_set_of(b), b);
    xsa_tally(&t, b, +1);
    xsa_inactive_split_change(p, b->seg->kind, t);
}

void xsa_pool_erase_free(xsa_pool *p, xsa_block *b) {
    xsa_split_tally t = {0, 0};
    xsa_tally(&t, b, -1);
    xsa_inactive_split_change(p, b->seg->kind, t);
    xsa_free_set_erase(xsa_free_set_of(b), b);
}

/* A new record for the first `size` bytes of b, linked before it; b's own
 * extent is the caller's to shrink. NULL if out of host memory. */
xsa_block *xsa_pool_new_front(xsa_pool *p, xsa_block *b, size_t size) {
    xsa_block *front = xsa_block_new(&p->blocks);
    if (!front) return NULL;
    front->ptr = b->ptr;
    front->size = size;
    front->stream = b->stream;
    front->seg = b->seg;
    front->mapped = b->mapped;
    front->prev = b->prev;
    if (front->prev) front->prev->next = front;
    front->next = b;
    b->prev = front;
    xsa_fix_first(front);
    return front;
}

xsa_block *xsa_pool_carve_front(xsa_pool *p, xsa_block *b, size_t size) {
    xsa_block *front = xsa_pool_new_front(p, b, size);
    if (front) {
        b->ptr += size;
        b->size -= size;
    }
    return front;
}

xsa_seg *xsa_pool_new_records(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, xsa_block **b,
                              char *err, size_t errlen) {
    xsa_seg *s = calloc(1, sizeof *s);
    *b = s ? xsa_block_new(&p->blocks) : NULL;
    if (!*b || !xsa_free_set_attach(&mp->free[kind], stream)) {
        if (*b) xsa_block_delete(&p->blocks, *b);
        free(s);
        snprintf(err, errlen, "device %d: out of host memory", p->device);
        return NULL;
    }
    s->mp = mp;
    s->set = &mp->free[kind];
    s->kind = kind;
    s->stream = stream;
    return s;
}

xsa_pool_status xsa_pool_segment_failed(xsa_pool *p, xsa_seg *s, xsa_block *b, const char *call, xsa_cu_result r,
                                        char *err, size_t errlen) {
    xsa_free_set_detach(&s->mp->free[s->kind], s->stream);
    xsa_block_delete(&p->blocks, b);
    free(s);
    if (r == XSA_CU_ERROR_OUT_OF_MEMORY) return XSA_POOL_OOM;
    xsa_pool_driver_error(p, call, r, err, errlen);
    return XSA_POOL_DRIVER_ERROR;
}

void xsa_pool_link_new_segment(xsa_pool *p, xsa_seg *s, xsa_block *b, uintptr_t base, size_t size) {
    s->base = base;
    s->size = size;
    s->first = b;
    s->split = (uint8_t)xsa_seg_split_rule(s);
    b->ptr = base;
    b->size = size;
    b->stream = s->stream;
    b->seg = s;
    s->mp->segments++;
    xsa_pool_link_segment(p, s);
}

/* Takes gone out of its segment's block list and recycles its record. */
static void unlink_block(xsa_pool *p, xsa_block *gone) {
    if (gone->prev)
        gone->prev->next = gone->next;
    else
        gone->seg->first = gone->next;
    if (gone->next) gone->next->prev = gone->prev;
    xsa_block_delete(&p->blocks, gone);
}

void xsa_pool_absorb(xsa_pool *p, xsa_block *keep, xsa_block *gone) {
    if (gone->mapped) xsa_pool_erase_free(p, gone);
    if (gone == keep->prev) keep->ptr = gone->ptr;
    keep->size += gone->size;
    unlink_block(p, gone);
}

/* Free neighbours merge with b into one free block. The record that stays
 * is a neighbour's if there is one: it is already in the free set, and
 * usually keeps its place there as it grows. */
void xsa_pool_free_block(xsa_pool *p, xsa_block *b) {
    size_t original = b->size;
    xsa_pool_kind kind = b->seg->kind;
    xsa_free_set *set = xsa_free_set_of(b);
    XSA_OBSERVE(p, XSA_OBS_FREE_COMPLETED, kind, b->ptr, b->requested, b->size, b->stream);
    xsa_block *prev = xsa_block_free_neighbour(b->prev) ? b->prev : NULL;
    xsa_block *next = xsa_block_free_neighbour(b->next) ? b->next : NULL;
    /* inactive_split changes by the net effect of the merge. */
    xsa_split_tally t = {0, 0};
    if (prev) xsa_tally(&t, prev, -1);
    if (next) xsa_tally(&t, next, -1);
    uintptr_t ptr = prev ? prev->ptr : b->ptr;
    size_t size = (prev ? prev->size : 0) + b->size + (next ? next->size : 0);
    xsa_block *keep = prev ? prev : next ? next : b;
    if (prev && next) {
        xsa_free_set_erase(set, next);
        unlink_block(p, next);
    }
    if (keep != b) {
        unlink_block(p, b);
        xsa_free_set_rekey(set, keep, ptr, size);
    } else {
        xsa_free_set_insert(set, b);
    }
    xsa_stamp_free(p, keep);
    xsa_tally(&t, keep, +1);
    xsa_inactive_split_change(p, kind, t);
    p->live_blocks--;
    xsa_stats_sub(p->stats.active, kind, 1);
    xsa_stats_sub(p->stats.active_bytes, kind, (int64_t)original);
}

void xsa_pool_block_done(void *ctx, xsa_block *b) {
    if (!b->ipc_exports) xsa_pool_free_block(ctx, b);
}
