/*
 * pool/core: what every policy builds on: free-set membership, split and
 * merge, returning freed blocks, and segment records (design in core.c).
 */
#ifndef XSA_POOL_CORE_H
#define XSA_POOL_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

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
