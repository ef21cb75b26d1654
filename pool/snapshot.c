/*
 * pool/snapshot: a neutral description of the pool's segments and blocks for
 * api/ to format (JSON, pickle). Segments are cut as PyTorch's snapshot cuts
 * them: an expandable segment is reported as one segment per run of mapped
 * blocks, so that every reported segment is tiled by its blocks and the
 * unmapped ranges appear only as gaps between segments.
 */
#include "pool/snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "pool/block.h"
#include "pool/state.h"

static xsa_snap_state state_of(const xsa_block *b) {
    if (b->allocated) return XSA_SNAP_ALLOCATED;
    /* Freed but held by record_stream events or IPC exports. */
    return xsa_block_in_use(b) ? XSA_SNAP_PENDING_FREE : XSA_SNAP_INACTIVE;
}

/* Counts the mapped runs and mapped blocks of every segment. */
static void count(const xsa_pool *p, size_t *runs, size_t *blocks, size_t *reservations) {
    *runs = *blocks = *reservations = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (s->expandable) ++*reservations;
        for (const xsa_block *b = s->first; b; b = b->next) {
            if (!xsa_block_holds_memory(b)) continue;
            ++*blocks;
            if (!b->prev || !xsa_block_holds_memory(b->prev)) ++*runs;
        }
    }
}

/* Appends the run of mapped blocks starting at b as one segment. */
static void add_run(xsa_pool_snapshot *out, const xsa_seg *s, const xsa_block *b) {
    xsa_snap_segment *g = &out->segments[out->n_segments++];
    memset(g, 0, sizeof *g);
    g->addr = b->ptr;
    g->stream = s->stream;
    g->pool_id = s->mp->id;
    g->large = s->kind == XSA_POOL_LARGE;
    g->expandable = s->expandable;
    g->paused = s->paused;
    g->reservation = s->base;
    g->first_block = out->n_blocks;
    for (; b && xsa_block_holds_memory(b); b = b->next) {
        xsa_snap_block *k = &out->blocks[out->n_blocks++];
        k->addr = b->ptr;
        k->size = b->size;
        k->state = state_of(b);
        k->requested = k->state == XSA_SNAP_INACTIVE ? 0 : b->requested;
        g->total_size += b->size;
        if (k->state == XSA_SNAP_ALLOCATED) g->allocated_size += b->size;
        if (k->state != XSA_SNAP_INACTIVE) {
            g->active_size += b->size;
            g->requested_size += k->requested;
        }
        g->n_blocks++;
    }
}

static int by_addr(const void *a, const void *b) {
    uintptr_t x = ((const xsa_snap_segment *)a)->addr, y = ((const xsa_snap_segment *)b)->addr;
    return (x > y) - (x < y);
}

xsa_pool_status xsa_pool_snapshot_take(const xsa_pool *p, xsa_pool_snapshot *out) {
    memset(out, 0, sizeof *out);
    size_t runs, blocks, reservations;
    count(p, &runs, &blocks, &reservations);
    /* calloc(0) may return NULL: ask for at least one element. */
    out->segments = calloc(runs + 1, sizeof *out->segments);
    out->blocks = calloc(blocks + 1, sizeof *out->blocks);
    out->reservations = calloc(reservations + 1, sizeof *out->reservations);
    if (!out->segments || !out->blocks || !out->reservations) {
        xsa_pool_snapshot_free(out);
        return XSA_POOL_HOST_OOM;
    }
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        for (const xsa_block *b = s->first; b; b = b->next)
            if (xsa_block_holds_memory(b) && (!b->prev || !xsa_block_holds_memory(b->prev))) add_run(out, s, b);
        if (!s->expandable) continue;
        xsa_snap_reservation *r = &out->reservations[out->n_reservations++];
        r->addr = s->base;
        r->size = s->size;
        r->mapped = xsa_seg_owned_pages(s) * s->vm.page_size;
        r->stream = s->stream;
        r->pool_id = s->mp->id;
        r->large = s->kind == XSA_POOL_LARGE;
    }
    qsort(out->segments, out->n_segments, sizeof *out->segments, by_addr);
    return XSA_POOL_OK;
}

void xsa_pool_snapshot_free(xsa_pool_snapshot *s) {
    free(s->segments);
    free(s->blocks);
    free(s->reservations);
    memset(s, 0, sizeof *s);
}
