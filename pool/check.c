/*
 * pool/check: the pool's invariant checker. Recounts everything from the
 * blocks and compares with the free sets, the pointer map, the segments'
 * pages (and their chunks' sizes), the event queues, the IPC export list, the memory pools (their
 * free sets, counts, routings, the capture's deferred frees, own
 * allocators and flags) and the stats. Slow (linear, times the memory pools), for tests.
 */
#include "pool/check.h"

#include <string.h>

#include "pool/block.h"
#include "pool/capture_reuse.h"
#include "pool/core.h"
#include "pool/free_set.h"
#include "pool/mempool.h"
#include "pool/pause.h"
#include "pool/ptr_map.h"
#include "pool/recycle.h"
#include "pool/state.h"

typedef struct recount {
    int64_t allocation[XSA_POOL_KINDS], allocated_bytes[XSA_POOL_KINDS], requested_bytes[XSA_POOL_KINDS];
    int64_t active[XSA_POOL_KINDS], active_bytes[XSA_POOL_KINDS];
    int64_t inactive_split[XSA_POOL_KINDS], inactive_split_bytes[XSA_POOL_KINDS];
    int64_t segment[XSA_POOL_KINDS], reserved_bytes[XSA_POOL_KINDS];
    size_t free_blocks[XSA_POOL_KINDS], free_bytes[XSA_POOL_KINDS];
    size_t pending_events, live_blocks, oversize_allocations, oversize_segments, blocks, ipc_exports;
    size_t draining_blocks, draining_pages; /* the latter of the segment being checked */
    size_t deferred;
    size_t walked_blocks[XSA_POOL_KINDS], walked_bytes[XSA_POOL_KINDS]; /* in the free sets, all memory pools */
    size_t allocated_blocks;  /* paused ones too (the pointer map holds them) */
    int64_t paused_bytes;     /* the pages paused segments' mapped blocks cover */
} recount;

static int check_block(const xsa_pool *p, const xsa_seg *s, const xsa_block *b, recount *c, char *err, size_t n) {
    int k = s->kind;
    if (b->seg != s) return xsa_check_fail(err, n, "block %#lx: points to another segment", (unsigned long)b->ptr);
    if (b->size == 0 || b->size % XSA_MIN_BLOCK_SIZE) return xsa_check_fail(err, n, "block %#lx: size %zu", (unsigned long)b->ptr, b->size);
    if (b->stream != s->stream) return xsa_check_fail(err, n, "block %#lx: stream differs from its segment's", (unsigned long)b->ptr);
    bool pending = !b->allocated && xsa_block_in_use(b);
    bool free_block = xsa_block_is_free(b);
    if (b->allocated && b->event_count) return xsa_check_fail(err, n, "block %#lx: allocated with events", (unsigned long)b->ptr);
    if (b->capture_deferred) {
        if (b->allocated || b->event_count)
            return xsa_check_fail(err, n, "block %#lx: deferred by a capture but allocated or waiting for events", (unsigned long)b->ptr);
        c->deferred++;
    }
    if (b->in_free_set != free_block)
        return xsa_check_fail(err, n, "block %#lx: in_free_set=%d but free=%d", (unsigned long)b->ptr, b->in_free_set, free_block);
    if (xsa_ptr_map_get(&p->allocated, b->ptr) != (b->allocated ? b : NULL))
        return xsa_check_fail(err, n, "block %#lx: pointer map disagrees (allocated=%d)", (unsigned long)b->ptr, b->allocated);
    if (!b->mapped && (b->allocated || pending)) return xsa_check_fail(err, n, "block %#lx: unmapped but in use", (unsigned long)b->ptr);
    if (b->next && b->mapped == b->next->mapped && !b->mapped)
        return xsa_check_fail(err, n, "block %#lx: two adjacent unmapped blocks", (unsigned long)b->ptr);
    if (free_block && b->next && xsa_block_is_free(b->next))
        return xsa_check_fail(err, n, "block %#lx: two adjacent free blocks were not merged", (unsigned long)b->ptr);
    if (b->draining) {
        if (!b->mapped || !s->expandable || xsa_block_in_use(b) || b->in_free_set)
            return xsa_check_fail(err, n, "draining block %#lx: unmapped, classic, in use or cached", (unsigned long)b->ptr);
        if ((b->ptr - s->base) % p->page_size || b->size % p->page_size)
            return xsa_check_fail(err, n, "draining block %#lx: not whole pages", (unsigned long)b->ptr);
        c->draining_blocks++;
        c->draining_pages += b->size / p->page_size;
    }
    /* A paused segment's blocks are out of the current stats (pool/pause.c). */
    bool counted = !s->paused;
    c->allocated_blocks += b->allocated;
    if (b->allocated && counted) {
        c->allocation[k]++;
        c->allocated_bytes[k] += (int64_t)b->size;
        c->requested_bytes[k] += (int64_t)b->requested;
        if (b->size >= p->opt.max_split_size) c->oversize_allocations++;
    }
    if (b->ipc_exports < 0 || (b->ipc_exports && !s->expandable))
        return xsa_check_fail(err, n, "block %#lx: %d IPC exports in a %s segment", (unsigned long)b->ptr, b->ipc_exports,
                    s->expandable ? "expandable" : "classic");
    c->ipc_exports += (size_t)b->ipc_exports;
    if (b->allocated || pending) {
        if (counted) {
            c->active[k]++;
            c->active_bytes[k] += (int64_t)b->size;
        }
        c->live_blocks++;
        c->pending_events += (size_t)b->event_count;
    }
    if (s->paused && b->mapped) c->paused_bytes += (int64_t)b->size;
    if (free_block) {
        c->free_blocks[k]++;
        c->free_bytes[k] += b->size;
        if (xsa_block_is_split(b) && !s->expandable) { /* PyTorch leaves expandable segments out */
            c->inactive_split[k]++;
            c->inactive_split_bytes[k] += (int64_t)b->size;
        }
    }
    return 1;
}

/* Pages of an expandable segment agree with its blocks' mapped flags. */
static int check_pages(const xsa_pool *p, const xsa_seg *s, const xsa_block *b, char *err, size_t n) {
    size_t page = p->page_size;
    size_t first = (b->ptr - s->base) / page, last = (b->ptr + b->size - 1 - s->base) / page;
    if (!b->mapped && ((b->ptr - s->base) % page || b->size % page))
        return xsa_check_fail(err, n, "unmapped block %#lx: not page aligned", (unsigned long)b->ptr);
    for (size_t pg = first; pg <= last; pg++)
        if (xsa_segment_page_mapped(&s->vm, pg) != (b->mapped && !s->paused))
            return xsa_check_fail(err, n, "block %#lx (mapped=%d): page %zu is %smapped", (unsigned long)b->ptr, b->mapped, pg,
                        b->mapped ? "un" : "");
    return 1;
}

/* No chunk is larger than the pool creates (expandable_handle_mb):
 * recycling only moves the pool's own chunks. */
static int check_chunk_sizes(const xsa_pool *p, const xsa_seg *s, char *err, size_t n) {
    size_t cap = xsa_recycle_max_chunk_pages(p);
    if (s->mp->tag) return 1; /* a resume maps larger chunks: tagged pools lend no pages (pool/pause.c) */
    for (size_t pg = 0; pg < s->vm.max_pages; pg++)
        if (s->vm.chunk_pages[pg] > cap)
            return xsa_check_fail(err, n, "segment %#lx: chunk at page %zu has %u pages, more than the %zu of a handle",
                                  (unsigned long)s->base, pg, s->vm.chunk_pages[pg], cap);
    return 1;
}

/* Every peer of the pool is on the segment's access list. */
static int check_access(const xsa_pool *p, const xsa_seg *s, char *err, size_t n) {
    for (int i = 0; i < p->n_peers; i++) {
        int k = 0;
        while (k < s->vm.n_access && s->vm.access[k] != p->peers[i]) k++;
        if (k == s->vm.n_access)
            return xsa_check_fail(err, n, "segment %#lx: peer device %d is missing from its access list", (unsigned long)s->base,
                        p->peers[i]);
    }
    return 1;
}

static int check_segment(const xsa_pool *p, const xsa_seg *s, recount *c, char *err, size_t n) {
    if (!s->first || s->first->prev || s->first->ptr != s->base)
        return xsa_check_fail(err, n, "segment %#lx: first block is not at its base", (unsigned long)s->base);
    uintptr_t at = s->base;
    c->draining_pages = 0;
    for (const xsa_block *b = s->first; b; b = b->next) {
        if (b->ptr != at) return xsa_check_fail(err, n, "segment %#lx: gap or overlap at %#lx", (unsigned long)s->base, (unsigned long)at);
        if (b->next && b->next->prev != b) return xsa_check_fail(err, n, "block %#lx: next->prev broken", (unsigned long)b->ptr);
        c->blocks++;
        if (!check_block(p, s, b, c, err, n)) return 0;
        if (s->expandable && !check_pages(p, s, b, err, n)) return 0;
        if (!s->expandable && !b->mapped) return xsa_check_fail(err, n, "classic block %#lx unmapped", (unsigned long)b->ptr);
        at += b->size;
    }
    if (at != s->base + s->size) return xsa_check_fail(err, n, "segment %#lx: blocks cover %zu of %zu bytes", (unsigned long)s->base, (size_t)(at - s->base), s->size);
    size_t bytes = s->size;
    if (s->expandable) {
        if (!xsa_segment_check(&s->vm, err, n) || !check_access(p, s, err, n) || !check_chunk_sizes(p, s, err, n))
            return 0;
        if (c->draining_pages != s->draining_pages)
            return xsa_check_fail(err, n, "segment %#lx: %zu draining pages counted, %zu in blocks", (unsigned long)s->base,
                                  s->draining_pages, c->draining_pages);
        bytes = xsa_seg_owned_pages(s) * p->page_size; /* 0 while paused */
    } else if (s->size >= p->opt.max_split_size) {
        c->oversize_segments++;
    }
    if (!s->expandable) c->segment[s->kind]++; /* expandable segments never count (pages.c) */
    c->reserved_bytes[s->kind] += (int64_t)bytes;
    return 1;
}

/* Memory pool mp's free set of `kind`: its own checker, then an in-order
 * walk: keys increase, every block is mp's, count and bytes match the
 * walk, each stream is attached once per segment of mp. */
static int check_free_set(const xsa_pool *p, const xsa_mempool *mp, int kind, recount *c, char *err, size_t n) {
    const xsa_free_set *set = &mp->free[kind];
    if (!xsa_free_set_check(set, err, n)) return 0;
    size_t count = 0, bytes = 0;
    const xsa_block *prev = NULL;
    for (const xsa_block *b = xsa_free_set_first(set); b; b = xsa_free_set_next(set, b)) {
        if (prev && !((uintptr_t)prev->stream < (uintptr_t)b->stream ||
                      (prev->stream == b->stream && (prev->size < b->size || (prev->size == b->size && prev->ptr < b->ptr)))))
            return xsa_check_fail(err, n, "free set %d: out of order at %#lx", kind, (unsigned long)b->ptr);
        if ((int)b->seg->kind != kind) return xsa_check_fail(err, n, "free set %d holds a block of the other pool", kind);
        if (b->seg->mp != mp)
            return xsa_check_fail(err, n, "free set %d of memory pool (%llu, %llu) holds block %#lx of another memory pool",
                                  kind, (unsigned long long)mp->id.first, (unsigned long long)mp->id.second, (unsigned long)b->ptr);
        count++;
        bytes += b->size;
        prev = b;
    }
    if (count != set->count || bytes != set->bytes)
        return xsa_check_fail(err, n, "free set %d: %zu blocks/%zu bytes walked, %zu/%zu counted", kind, count, bytes,
                              set->count, set->bytes);
    c->walked_blocks[kind] += count;
    c->walked_bytes[kind] += bytes;
    size_t segments = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        if ((int)s->kind != kind || s->mp != mp) continue;
        size_t same = 0;
        for (const xsa_seg *t = p->segments; t; t = t->next_seg)
            same += t->kind == s->kind && t->stream == s->stream && t->mp == mp;
        if (xsa_free_set_segments(set, s->stream) != same)
            return xsa_check_fail(err, n, "free set %d: stream %p attached %zu times for %zu segments", kind, s->stream,
                        xsa_free_set_segments(set, s->stream), same);
        segments++;
    }
    if (segments != set->segments)
        return xsa_check_fail(err, n, "free set %d: %zu segments attached, %zu exist", kind, set->segments, segments);
    return 1;
}

/* Segment s of memory pool mp: an own allocator's memory makes classic
 * segments only; its split rule is its kind's, type's and pool's, and a
 * classic segment of a no_split pool is one block. */
static int check_own_segment(const xsa_mempool *mp, const xsa_seg *s, char *err, size_t n) {
    unsigned long long a = mp->id.first, b = mp->id.second;
    if (xsa_mempool_owns_allocator(mp) && s->expandable)
        return xsa_check_fail(err, n, "memory pool (%llu, %llu) has an allocator of its own and an expandable segment",
                              a, b);
    if (s->split != xsa_seg_split_rule(s))
        return xsa_check_fail(err, n, "segment %#lx: split rule %d, its kind, type and pool's %d",
                              (unsigned long)s->base, s->split, xsa_seg_split_rule(s));
    if (s->split == XSA_SPLIT_NEVER && !s->expandable && s->first->next)
        return xsa_check_fail(err, n, "segment %#lx of no_split memory pool (%llu, %llu) is split",
                              (unsigned long)s->base, a, b);
    return 1;
}

/* Memory pool mp: its segment count agrees with a recount, one
 * expandable segment per (stream, kind), its segments fit its allocator
 * and flags, and its free sets check. */
static int check_mempool(const xsa_pool *p, const xsa_mempool *mp, recount *c, char *err, size_t n) {
    size_t segments = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (s->mp != mp) continue;
        segments++;
        if (!check_own_segment(mp, s, err, n)) return 0;
        for (const xsa_seg *t = s->next_seg; t && s->expandable; t = t->next_seg)
            if (t->mp == mp && t->expandable && t->kind == s->kind && t->stream == s->stream)
                return xsa_check_fail(err, n, "two expandable segments of one memory pool, stream and kind");
    }
    unsigned long long a = mp->id.first, b = mp->id.second;
    if (!mp->allocator.alloc != !mp->allocator.free)
        return xsa_check_fail(err, n, "memory pool (%llu, %llu): an allocator without alloc or free", a, b);
    if (xsa_mempool_is_global(p, mp) && (mp->allocator.alloc || mp->use_on_oom || mp->no_split))
        return xsa_check_fail(err, n, "the global memory pool has an allocator of its own, use_on_oom or no_split");
    if (segments != mp->segments)
        return xsa_check_fail(err, n, "memory pool (%llu, %llu): %zu segments counted, %zu found", a, b, mp->segments,
                              segments);
    if (mp->use_count < 0 || (xsa_mempool_is_global(p, mp) && mp->use_count != 1))
        return xsa_check_fail(err, n, "memory pool (%llu, %llu): use count %d", a, b, mp->use_count);
    for (int k = 0; k < XSA_POOL_KINDS; k++)
        if (!check_free_set(p, mp, k, c, err, n)) return 0;
    return 1;
}

/* A pool's holds are the kept lists naming it; a pool is kept by other
 * listed pools, once by each, and keeps nothing once released. */
static int check_holds(const xsa_pool *p, char *err, size_t n) {
    for (const xsa_mempool *mp = p->mempools; mp; mp = mp->next) {
        int holds = 0;
        for (const xsa_mempool *q = p->mempools; q; q = q->next)
            for (size_t i = 0; i < q->n_kept; i++) holds += q->kept[i] == mp;
        unsigned long long a = mp->id.first, b = mp->id.second;
        if (holds != mp->holds)
            return xsa_check_fail(err, n, "memory pool (%llu, %llu): %d holds, kept by %d", a, b, mp->holds, holds);
        if (mp->n_kept > mp->cap_kept || (mp->n_kept && xsa_mempool_released(mp)))
            return xsa_check_fail(err, n, "memory pool (%llu, %llu): released, yet keeps %zu", a, b, mp->n_kept);
        for (size_t i = 0; i < mp->n_kept; i++) {
            const xsa_mempool *kept = mp->kept[i];
            bool listed = false;
            for (const xsa_mempool *q = p->mempools; q; q = q->next) listed |= q == kept;
            if (!listed || kept == mp)
                return xsa_check_fail(err, n, "memory pool (%llu, %llu) keeps itself or an unlisted one", a, b);
            for (size_t j = i + 1; j < mp->n_kept; j++)
                if (mp->kept[j] == kept) return xsa_check_fail(err, n, "memory pool (%llu, %llu) keeps one twice", a, b);
        }
    }
    return p->global.holds == 0 && p->global.n_kept == 0
               ? 1
               : xsa_check_fail(err, n, "the global memory pool keeps or is kept");
}

/* Every segment's memory pool is listed, ids are distinct and private,
 * routings name distinct pools in use, the capture count and the deferred
 * frees agree with them. */
static int check_mempools(const xsa_pool *p, recount *c, char *err, size_t n) {
    if (!check_mempool(p, &p->global, c, err, n)) return 0;
    size_t listed = 0;
    for (const xsa_mempool *mp = p->mempools; mp; mp = mp->next, listed++) {
        if (!mp->id.first && !mp->id.second) return xsa_check_fail(err, n, "a memory pool has id (0, 0)");
        for (const xsa_mempool *o = mp->next; o; o = o->next)
            if (o->id.first == mp->id.first && o->id.second == mp->id.second)
                return xsa_check_fail(err, n, "two memory pools (%llu, %llu)", (unsigned long long)mp->id.first,
                                      (unsigned long long)mp->id.second);
        if (!check_mempool(p, mp, c, err, n)) return 0;
    }
    size_t in_segments = p->global.segments;
    for (const xsa_mempool *mp = p->mempools; mp; mp = mp->next) in_segments += mp->segments;
    size_t segments = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) segments++;
    if (in_segments != segments) return xsa_check_fail(err, n, "%zu segments, %zu in listed memory pools", segments, in_segments);
    if (!check_holds(p, err, n)) return 0;
    int capturing = 0;
    for (int i = 0; i < p->n_routes; i++) {
        const xsa_mempool *mp = p->routes[i].mp;
        if (xsa_mempool_is_global(p, mp) || mp->use_count < 1)
            return xsa_check_fail(err, n, "routing %d: to the global or a released memory pool", i);
        for (int j = i + 1; j < p->n_routes; j++)
            if (p->routes[j].mp == mp) return xsa_check_fail(err, n, "routings %d and %d: one memory pool", i, j);
        capturing += p->routes[i].capture;
    }
    if (capturing != p->capturing) return xsa_check_fail(err, n, "%d capturing routings, %d counted", capturing, p->capturing);
    if (!xsa_capture_reuse_check(p, err, n)) return 0;
    if (c->deferred != p->n_deferred)
        return xsa_check_fail(err, n, "%zu blocks deferred by a capture, %zu queued", c->deferred, p->n_deferred);
    for (size_t i = 0; i < p->n_deferred; i++)
        if (!p->deferred[i]->capture_deferred) return xsa_check_fail(err, n, "a queued deferred block is not deferred");
    for (int k = 0; k < XSA_POOL_KINDS; k++)
        if (c->walked_blocks[k] != c->free_blocks[k] || c->walked_bytes[k] != c->free_bytes[k])
            return xsa_check_fail(err, n, "free sets %d: %zu blocks/%zu bytes, %zu/%zu free in segments", k,
                                  c->walked_blocks[k], c->walked_bytes[k], c->free_blocks[k], c->free_bytes[k]);
    return 1;
}

static int check_stat(const char *name, const xsa_stat *by_type, const int64_t *recount_by_kind, char *err, size_t n) {
    int64_t small = recount_by_kind[XSA_POOL_SMALL], large = recount_by_kind[XSA_POOL_LARGE];
    if (by_type[XSA_STAT_SMALL_POOL].current != small || by_type[XSA_STAT_LARGE_POOL].current != large ||
        by_type[XSA_STAT_ALL].current != small + large)
        return xsa_check_fail(err, n, "stat %s: current %lld (small %lld, large %lld) but recount %lld (small %lld, large %lld)", name,
                    (long long)by_type[XSA_STAT_ALL].current, (long long)by_type[XSA_STAT_SMALL_POOL].current,
                    (long long)by_type[XSA_STAT_LARGE_POOL].current, (long long)(small + large), (long long)small,
                    (long long)large);
    for (int t = 0; t < XSA_STAT_TYPES; t++)
        if (by_type[t].peak < by_type[t].current)
            return xsa_check_fail(err, n, "stat %s[%d]: peak below current", name, t);
    return 1;
}

/* Each export names a block whose ipc_exports counts exactly its records
 * (pinned blocks are in use, hence mapped: check_block says so). */
static int check_exports(const xsa_pool *p, const recount *c, char *err, size_t n) {
    size_t records = 0;
    for (const xsa_export *e = p->exports; e; e = e->next) {
        int same = 0;
        for (const xsa_export *f = p->exports; f; f = f->next) same += f->block == e->block;
        if (same != e->block->ipc_exports)
            return xsa_check_fail(err, n, "block %#lx: %d IPC exports counted, %d recorded", (unsigned long)e->block->ptr,
                        e->block->ipc_exports, same);
        records++;
    }
    if (records != c->ipc_exports)
        return xsa_check_fail(err, n, "%zu IPC export records, blocks count %zu", records, c->ipc_exports);
    return 1;
}

/* Each drain names a distinct draining block of this pool and a sweep
 * that counts the drains sharing it, and every draining block has one. */
static int check_drains(const xsa_pool *p, const recount *c, char *err, size_t n) {
    size_t records = 0;
    for (const xsa_drain *d = p->drains; d; d = d->next, records++) {
        if (!d->block->draining)
            return xsa_check_fail(err, n, "drain of block %#lx: the block is not draining", (unsigned long)d->block->ptr);
        size_t sharing = 0;
        for (const xsa_drain *e = p->drains; e && d->sweep; e = e->next) sharing += e->sweep == d->sweep;
        if (!d->sweep || sharing != d->sweep->drains || d->sweep->pending > d->sweep->n_events)
            return xsa_check_fail(err, n, "drain of block %#lx: no sweep, or its sweep counts %zu drains, %zu share it",
                                  (unsigned long)d->block->ptr, d->sweep ? d->sweep->drains : 0, sharing);
        for (const xsa_drain *e = d->next; e; e = e->next)
            if (e->block == d->block) return xsa_check_fail(err, n, "block %#lx drains twice", (unsigned long)d->block->ptr);
    }
    if (records != c->draining_blocks)
        return xsa_check_fail(err, n, "%zu drain records, %zu draining blocks", records, c->draining_blocks);
    return 1;
}

/* Each stream's queue of record_stream events is well linked, and each
 * node names a freed block that waits for exactly as many events as
 * nodes name it (a block handed over by page recycling leaves no node
 * behind). */
static int check_event_queues(const xsa_pool *p, char *err, size_t n) {
    const xsa_events *e = &p->events;
    size_t nodes = 0;
    for (int q = 0; q < e->n_queues; q++) {
        const xsa_pending *last = NULL;
        for (const xsa_pending *node = e->queues[q].head; node; last = node, node = node->next, nodes++) {
            const xsa_block *b = node->block;
            if (b->allocated || b->event_count <= 0)
                return xsa_check_fail(err, n, "event queue %d names block %#lx, which waits for no event", q,
                                      (unsigned long)b->ptr);
            int named = 0;
            for (int r = 0; r < e->n_queues; r++)
                for (const xsa_pending *o = e->queues[r].head; o; o = o->next) named += o->block == b;
            if (named != b->event_count)
                return xsa_check_fail(err, n, "block %#lx waits for %d events, %d queued", (unsigned long)b->ptr,
                                      b->event_count, named);
        }
        if (e->queues[q].tail != last) return xsa_check_fail(err, n, "event queue %d: tail is not its last node", q);
    }
    if (nodes != e->outstanding)
        return xsa_check_fail(err, n, "%zu events queued, %zu outstanding", nodes, e->outstanding);
    return 1;
}

int xsa_pool_check(const xsa_pool *p, char *err, size_t n) {
    recount c;
    memset(&c, 0, sizeof c);
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        if (!check_segment(p, s, &c, err, n)) return 0;
    if (!check_mempools(p, &c, err, n)) return 0;
    if (!check_exports(p, &c, err, n) || !check_drains(p, &c, err, n) || !check_event_queues(p, err, n)) return 0;
    const xsa_device_stats *st = &p->stats;
    if (!check_stat("allocation", st->allocation, c.allocation, err, n) ||
        !check_stat("allocated_bytes", st->allocated_bytes, c.allocated_bytes, err, n) ||
        !check_stat("requested_bytes", st->requested_bytes, c.requested_bytes, err, n) ||
        !check_stat("active", st->active, c.active, err, n) ||
        !check_stat("active_bytes", st->active_bytes, c.active_bytes, err, n) ||
        !check_stat("inactive_split", st->inactive_split, c.inactive_split, err, n) ||
        !check_stat("inactive_split_bytes", st->inactive_split_bytes, c.inactive_split_bytes, err, n) ||
        !check_stat("segment", st->segment, c.segment, err, n) ||
        !check_stat("reserved_bytes", st->reserved_bytes, c.reserved_bytes, err, n))
        return 0;
    if ((int64_t)p->reserved != st->reserved_bytes[XSA_STAT_ALL].current)
        return xsa_check_fail(err, n, "reserved %zu but reserved_bytes stat %lld", p->reserved, (long long)st->reserved_bytes[XSA_STAT_ALL].current);
    if (c.live_blocks != p->live_blocks) return xsa_check_fail(err, n, "live blocks %zu, recount %zu", p->live_blocks, c.live_blocks);
    if (!xsa_ptr_map_check(&p->allocated, err, n)) return 0;
    if (c.allocated_blocks != p->allocated.count)
        return xsa_check_fail(err, n, "pointer map holds %zu, allocated blocks %zu", p->allocated.count, c.allocated_blocks);
    if (c.paused_bytes != st->paused_bytes.current)
        return xsa_check_fail(err, n, "paused_bytes %lld, paused segments cover %lld", (long long)st->paused_bytes.current,
                              (long long)c.paused_bytes);
    if (!xsa_pause_check(p, err, n)) return 0;
    if (c.pending_events != p->events.outstanding)
        return xsa_check_fail(err, n, "blocks wait for %zu events, queues hold %zu", c.pending_events, p->events.outstanding);
    if ((int64_t)c.oversize_allocations != st->oversize_allocations.current || (int64_t)c.oversize_segments != st->oversize_segments.current)
        return xsa_check_fail(err, n, "oversize stats disagree with a recount");
    if (p->blocks.live != c.blocks) return xsa_check_fail(err, n, "%zu block records live, %zu in segments", p->blocks.live, c.blocks);
    return 1;
}
