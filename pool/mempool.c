/*
 * pool/mempool: memory pool records, routing and the capture's deferred
 * frees: the core's part of memory pools (design in pool.h).
 *
 * A device has few memory pools (a graph each, a MemPool each) and fewer
 * routings at once, so both are plain lists searched linearly; the hot
 * path pays one test of n_routes and nothing else. The records call only
 * the free sets below them (and, when a record goes, its own allocator's
 * release): releasing memory and recording events are the policies'
 * (release.c, capture.c).
 */
#include "pool/mempool.h"

#include <stdlib.h>

#include "pool/block.h"
#include "pool/free_set.h"
#include "pool/grow.h"
#include "pool/state.h"

static bool same_id(xsa_mempool_id a, xsa_mempool_id b) { return a.first == b.first && a.second == b.second; }

xsa_mempool *xsa_mempool_find(xsa_pool *p, xsa_mempool_id id) {
    if (same_id(id, p->global.id)) return &p->global;
    for (xsa_mempool *mp = p->mempools; mp; mp = mp->next)
        if (same_id(mp->id, id)) return mp;
    return NULL;
}

xsa_mempool *xsa_mempool_new(xsa_pool *p, xsa_mempool_id id) {
    xsa_mempool *mp = calloc(1, sizeof *mp);
    if (!mp) return NULL;
    mp->id = id;
    mp->use_count = 1;
    mp->next = p->mempools;
    p->mempools = mp;
    return mp;
}

static void free_record(xsa_mempool *mp) {
    /* The record was the last user of its allocator's context. */
    if (mp->allocator.release) mp->allocator.release(mp->allocator.ctx);
    for (int k = 0; k < XSA_POOL_KINDS; k++) xsa_free_set_destroy(&mp->free[k]);
    free(mp->kept);
    free(mp);
}

void xsa_mempool_delete(xsa_pool *p, xsa_mempool *mp) {
    for (xsa_mempool **at = &p->mempools; *at; at = &(*at)->next)
        if (*at == mp) {
            *at = mp->next;
            break;
        }
    free_record(mp);
}

bool xsa_mempool_in_use(const xsa_pool *p, const xsa_mempool *mp) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (s->mp != mp) continue;
        for (const xsa_block *b = s->first; b; b = b->next)
            if (xsa_block_in_use(b)) return true;
    }
    return false;
}

xsa_mempool *xsa_mempool_route(xsa_pool *p, xsa_stream stream) {
    /* Newest first, as PyTorch 2.10 and later search captures_underway
     * (LIFO), so that a nested torch.cuda.use_mem_pool wins. */
    for (int i = p->n_routes - 1; i >= 0; i--) {
        const xsa_route *r = &p->routes[i];
        if (!r->filter || r->filter(r->ctx, stream)) return r->mp;
    }
    return &p->global;
}

int xsa_mempool_route_index(const xsa_pool *p, const xsa_mempool *mp) {
    for (int i = 0; i < p->n_routes; i++)
        if (p->routes[i].mp == mp) return i;
    return -1;
}

bool xsa_mempool_add_route(xsa_pool *p, xsa_mempool *mp, xsa_stream_filter filter, void *ctx, bool capture) {
    if (!XSA_GROW_FOR_ONE(p->routes, p->n_routes, p->cap_routes, 4)) return false;
    p->routes[p->n_routes++] = (xsa_route){mp, filter, ctx, capture};
    if (capture) p->capturing++;
    mp->replayed |= capture;
    return true;
}

void xsa_mempool_remove_route(xsa_pool *p, int i) {
    if (p->routes[i].capture) p->capturing--;
    for (int j = i + 1; j < p->n_routes; j++) p->routes[j - 1] = p->routes[j];
    p->n_routes--;
}

/* q keeps mp (once); false if out of host memory. */
static bool keep_by(xsa_mempool *q, xsa_mempool *mp) {
    for (size_t i = 0; i < q->n_kept; i++)
        if (q->kept[i] == mp) return true;
    if (!XSA_GROW_FOR_ONE(q->kept, q->n_kept, q->cap_kept, 4)) return false;
    q->kept[q->n_kept++] = mp;
    mp->holds++;
    mp->replayed = true; /* q's graph writes its memory */
    return true;
}

bool xsa_mempool_keep(xsa_pool *p, xsa_mempool *mp) {
    for (int i = 0; i < p->n_routes; i++)
        if (p->routes[i].capture && !keep_by(p->routes[i].mp, mp)) return false;
    return true;
}

void xsa_mempool_drop_kept(xsa_pool *p, xsa_mempool *mp, void (*release)(xsa_pool *p, xsa_mempool *kept)) {
    xsa_mempool **kept = mp->kept;
    size_t n = mp->n_kept;
    mp->kept = NULL;
    mp->n_kept = mp->cap_kept = 0;
    for (size_t i = 0; i < n; i++) kept[i]->holds--;
    /* Released after every hold is dropped: a release may delete a record. */
    for (size_t i = 0; i < n && release; i++) release(p, kept[i]);
    free(kept);
}

bool xsa_mempool_defer(xsa_pool *p, xsa_block *b) {
    if (!XSA_GROW_FOR_ONE(p->deferred, p->n_deferred, p->cap_deferred, 16)) return false;
    p->deferred[p->n_deferred++] = b;
    b->capture_deferred = true;
    return true;
}

void xsa_mempool_destroy_all(xsa_pool *p) {
    while (p->mempools) {
        xsa_mempool *mp = p->mempools;
        p->mempools = mp->next;
        free_record(mp);
    }
    for (int k = 0; k < XSA_POOL_KINDS; k++) xsa_free_set_destroy(&p->global.free[k]);
    free(p->routes);
    free(p->deferred);
}
