/*
 * pool/recycle: physical page recycling between expandable segments, in
 * stream order.
 *
 * PyTorch's expandable segments keep the whole free pages in the middle of
 * a segment mapped while the segment grows at its end, so reserved memory
 * runs ahead of live memory. Here a growing segment first takes whole free
 * pages out of free blocks of any expandable segment of the device (the
 * smallest free blocks first, so large free blocks stay whole) and maps
 * their handles at the growth point. Only growth pays for it, never the
 * cache-hit path.
 *
 * The GPU runs behind the CPU: kernels queued before a block was freed may
 * still use its pages, and cuMemUnmap is not stream ordered. So a page
 * moves without waiting: its handle is mapped at the growth point while it
 * stays mapped at its old address (the driver allows one handle at two
 * addresses, and data written through one reads through the other), and
 * an event recorded on the old segment's stream marks the end of the work
 * that may use the old address. Work on the new block is queued after
 * that: on the same stream by stream order, on another stream by a
 * cuStreamWaitEvent on the event. The old range becomes a draining block,
 * nobody's memory and never handed out, counted in reserved memory once
 * (at its new address), and is unmapped once the event has completed,
 * polled at the next growth, never waited for on the allocation path.
 * Blocks pinned by IPC exports are not free, so they are never taken.
 * Blocks freed with record_stream wait for events on the other streams
 * that used them; when a growth is still short of pages after taking every
 * free one, the pending blocks that free the most whole pages are handed
 * over: their own stream waits for those events on the GPU
 * (cuStreamWaitEvent) instead of the CPU polling them, and they become
 * free blocks of that stream, whose pages move with the usual fence (a
 * fence recorded after the wait covers the other streams' uses too). With
 * the GPU 2000 calls behind, such blocks held a fifth of the multi-stream
 * trace's reserved memory at its peak. A miss that would move pages is
 * first served by a hand-over of its own stream's pending blocks when
 * they, with the free blocks between and around them, fit the request
 * with less than a page left (xsa_recycle_hand_over_fit): otherwise the
 * stream's requests, missing its pending memory for as long as the GPU
 * lags, moved pages out of other free blocks, and each move strands the
 * partial pages at both ends of the moved range (free bytes that neither
 * move nor, until the old address is unmapped, merge with a growth). With
 * the GPU 2000 calls behind, that moved 2.5 times the pages of no lag in
 * the multi-stream trace (5,857 against 2,335; 4,749 with this rule, peak
 * reserved / peak allocated 1.052 to 1.044). Pages come from the global
 * memory pool only: a memory pool's free blocks may be a captured graph's
 * memory, whose addresses must stay. Nothing moves during a capture (the
 * fence queries an event).
 *
 * Moving a page is not free: an unmap, a map and an access change, about
 * 57 us of driver time on an H100, against about 47 us for a new page. So a
 * growth creates new pages while reserved memory stays within (1 +
 * page_recycling_headroom) times the highest allocated bytes seen, and
 * moves pages only for the part beyond: peak reserved stays within about
 * that fraction of peak allocated, and no page moves when the memory it
 * would save is not at stake. Right after decay repacks, the bound
 * follows decay's window instead (pool/decay.c). With decay on, the bound
 * is also at most the highest reserved bytes so far plus what allocated
 * bytes rise above their highest: what decay gave back regrows by moving
 * pages beyond that, so decay does not raise the peak of reserved memory
 * by its own regrowth (without the cap, re-growth after decay could take
 * the whole headroom where the cache had reused its pages: GPT-2's peak
 * reserved / peak allocated 1.0098 with decay against 1.0056 with the cap
 * and 1.0099 off; docs/results-log.md, 2026-11-28).
 *
 * Handle size. Creating and mapping a page costs 137 + 47 us on an H100
 * with kernels queued, so a growth creates its new pages as chunks of
 * several pages (one cuMemCreate and one cuMemMap each), but a chunk moves
 * and is released whole only: where a free block ends inside a chunk, the
 * chunk's free part stays where it is. Each such boundary can strand up to
 * a chunk's pages less one, and the memory recycling works within is the
 * headroom, so a new chunk holds at most 1/8 of the headroom (the highest
 * allocated bytes seen x page_recycling_headroom; expandable_handle_mb
 * caps it, default 20 MiB as PyTorch's handles): one-page chunks while
 * little memory is in use, larger ones as it grows (GPT-2 training's 22
 * GB: 13 pages, capped at 10). Measured on the bundled traces: with 1/8
 * no trace's peak reserved / peak allocated rises more than 0.002 at GPU
 * lag 0 or 500 (GPT-2's cuMemCreate calls: 10,970 to 3,372); 1/6 raises
 * llm_decode's by 0.004 at lag 500, and sizing by the request (20 MiB
 * handles for growths of 8 pages or more) by 0.035 at lag 0, 0.10 at 500.
 * The rule holds with page_recycling:False too (a chunk is then released
 * whole by empty_cache).
 * A growth may also take a chunk larger than the part of it beyond the
 * headroom, as long as it fits in the growth: those pages would otherwise
 * be created. A growth never takes more pages than it maps.
 */
#include "pool/recycle.h"

#include <stdlib.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/decay.h"
#include "pool/events.h"
#include "pool/free_set.h"
#include "pool/mempool.h"
#include "pool/pages.h"
#include "pool/state.h"
#include "pool/stats.h"
#include "pool/sweep.h"
#include "pool/trace.h"

/* The highest allocated bytes seen (decay's window's while it repacks), a
 * request of `size` bytes included. */
static double high_with(const xsa_pool *p, size_t size) {
    int64_t packing = xsa_decay_packing_high(p);
    int64_t high = packing >= 0 ? packing : xsa_pool_allocated_high(p);
    int64_t after = p->stats.allocated_bytes[XSA_STAT_ALL].current + (int64_t)size;
    return (double)(after > high ? after : high);
}

size_t xsa_recycle_max_chunk_pages(const xsa_pool *p) {
    size_t cap = p->opt.handle_size / p->page_size;
    return cap < 1 ? 1 : cap;
}

size_t xsa_recycle_new_chunk_pages(const xsa_pool *p, size_t size) {
    size_t cap = xsa_recycle_max_chunk_pages(p);
    double share = high_with(p, size) * p->opt.page_recycling_headroom / XSA_HEADROOM_PER_CHUNK;
    size_t pages = (size_t)(share / (double)p->page_size);
    return pages < 1 ? 1 : pages > cap ? cap : pages;
}

size_t xsa_recycle_pages_wanted(const xsa_pool *p, size_t size, size_t pages) {
    if (!p->opt.page_recycling || p->capturing) return 0;
    double high = high_with(p, size);
    double bound = high * (1.0 + p->opt.page_recycling_headroom);
    if (p->opt.page_decay_ms && p->expandable) {
        /* Memory decay gave back regrows within the highest reserved
         * bytes so far, plus what live memory rises above its highest. */
        double rise = high - (double)xsa_pool_allocated_high(p);
        double cap = (double)xsa_pool_reserved_high(p) + (rise > 0 ? rise : 0);
        if (cap < bound) bound = cap;
    }
    double room = bound - (double)p->reserved; /* bytes that may still be created */
    size_t fresh = room > 0 ? (size_t)(room / (double)p->page_size) : 0;
    return pages > fresh ? pages - fresh : 0;
}

static size_t pages_of(const xsa_pool *p, const xsa_block *b) { return b->size / p->page_size; }

static size_t first_page(const xsa_pool *p, const xsa_block *b) { return (b->ptr - b->seg->base) / p->page_size; }

/* Orders target's stream after the work queued so far on b's stream, with
 * an event that also marks when b's old address can go. Another stream
 * waits on the GPU only if that work has not completed already. */
static bool fence(xsa_pool *p, const xsa_seg *target, const xsa_block *b, xsa_event *ev) {
    if (xsa_events_take_event(&p->events, ev) != XSA_CU_SUCCESS) return false;
    if (XSA_DRV(p->drv, event_record, *ev, b->stream) == XSA_CU_SUCCESS &&
        (target->stream == b->stream || XSA_DRV(p->drv, event_query, *ev) == XSA_CU_SUCCESS ||
         XSA_DRV(p->drv, stream_wait_event, target->stream, *ev) == XSA_CU_SUCCESS))
        return true;
    xsa_events_put_event(&p->events, *ev);
    return false;
}

/* Moves whole chunks from the high end of free block b to target (into
 * chunks[]): while fewer than `want` pages, and at most `limit`; how many
 * pages. */
static size_t take_from(xsa_pool *p, const xsa_seg *target, xsa_block *b, size_t want, size_t limit,
                        xsa_chunk *chunks, size_t *n_chunks) {
    xsa_seg *s = b->seg;
    size_t page = p->page_size, first, end, lo, start, n = 0;
    if (!xsa_pages_whole_chunks(p, b, &first, &end)) return 0;
    for (lo = end; lo > first && n < want; lo = start) {
        size_t len = xsa_segment_chunk(&s->vm, lo - 1, &start);
        if (n + len > limit) break;
        n += len;
    }
    if (n == 0) return 0;
    xsa_drain *d = malloc(sizeof *d);
    char err[128];
    if (!d) return 0;
    if (!fence(p, target, b, &d->event)) {
        free(d);
        return 0;
    }
    if (xsa_pages_isolate(p, b, s->base + lo * page, s->base + end * page, err, sizeof err) != XSA_POOL_OK) {
        xsa_events_put_event(&p->events, d->event);
        free(d);
        return 0;
    }
    for (size_t c = lo; c < end; c += s->vm.chunk_pages[c])
        chunks[(*n_chunks)++] = (xsa_chunk){s->vm.handles[c], s->vm.chunk_pages[c]};
    b->draining = true;
    s->draining_pages += n;
    xsa_pages_account(p, s, n, 0, -1);
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_UNMAP, s->kind, b->ptr, b->size, b->size, s->stream);
    d->block = b;
    d->sweep = NULL; /* the growth's, once all its takes are done */
    d->held = d->unmapped = false;
    d->next = p->drains;
    p->drains = d;
    return n;
}

/* Takes pages for target from the free blocks of `stream` (other == false)
 * or of every other stream (other == true), small free blocks first. */
static size_t take_pass(xsa_pool *p, const xsa_seg *target, bool other, const xsa_block *keep1,
                        const xsa_block *keep2, size_t pages, size_t limit, xsa_chunk *chunks, size_t *n_chunks) {
    size_t got = 0;
    for (int k = 0; k < XSA_POOL_KINDS && got < pages; k++) {
        xsa_free_set *set = &p->global.free[k];
        /* Ascending (stream, size). Each step finds the next block before
         * b is split. */
        xsa_block *b = other ? xsa_free_set_first(set) : xsa_free_set_lower_bound(set, target->stream, p->page_size);
        for (xsa_block *next; b && got < pages; b = next) {
            if ((b->stream == target->stream) != !other) {
                if (!other) break; /* past the stream's blocks */
                next = xsa_free_set_lower_bound(set, (xsa_stream)((uintptr_t)b->stream + 1), 0);
                continue;
            }
            if (b->size < p->page_size) {
                /* Skip the stream's blocks too small to hold a page. */
                next = xsa_free_set_lower_bound(set, b->stream, p->page_size);
                continue;
            }
            next = xsa_free_set_next(set, b);
            if (b == keep1 || b == keep2 || !b->seg->expandable) continue;
            got += take_from(p, target, b, pages - got, limit - got, chunks, n_chunks);
        }
    }
    return got;
}

/* Whole pages that pending block b would free, merged with its free
 * neighbours (an estimate: chunks of several pages are not looked at). */
static size_t pending_pages(const xsa_pool *p, const xsa_block *b) {
    uintptr_t lo = xsa_block_free_neighbour(b->prev) ? b->prev->ptr : b->ptr;
    uintptr_t hi = b->ptr + b->size + (xsa_block_free_neighbour(b->next) ? b->next->size : 0);
    size_t first = (lo - b->seg->base + p->page_size - 1) / p->page_size, end = (hi - b->seg->base) / p->page_size;
    return end > first ? end - first : 0;
}

/* A pending block that may be handed over: the global memory pool's, of an
 * expandable segment, not pinned, and not next to the free blocks around
 * the growth point (a merge would take their records away). */
static bool may_hand_over(const xsa_pool *p, const xsa_block *b, const xsa_block *keep1, const xsa_block *keep2) {
    if (b->ipc_exports || b->capture_deferred || !b->seg->expandable || !xsa_mempool_is_global(p, b->seg->mp))
        return false;
    for (const xsa_block *k = keep1; k; k = k == keep1 ? keep2 : NULL)
        if (b == k || b->prev == k || b->next == k) return false;
    return true;
}

/* Ends pending block b's wait: its own stream waits for its events on the
 * GPU and b becomes a free block of that stream. False if a wait could not
 * be queued (b keeps waiting). */
static bool hand_over(xsa_pool *p, xsa_block *b) {
    if (!xsa_events_hand_over(&p->events, b, b->stream)) return false;
    xsa_pool_free_block(p, b);
    return true;
}

typedef struct candidate {
    xsa_block *block;
    size_t pages;
} candidate;

static int more_pages_first(const void *a, const void *b) {
    size_t x = ((const candidate *)a)->pages, y = ((const candidate *)b)->pages;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Memory is short and blocks freed with record_stream still wait for the
 * other streams' work: the blocks that free the most whole pages, until
 * about `pages`, stop waiting on the CPU and have their own stream wait on
 * the GPU instead (xsa_events_hand_over); they are free blocks of that
 * stream then, whose pages recycling can move with the usual fence. How
 * many pages they free, by the estimate. */
static size_t hand_over_pending(xsa_pool *p, const xsa_block *keep1, const xsa_block *keep2, size_t pages) {
    xsa_events *e = &p->events;
    candidate *c = malloc(e->outstanding * sizeof *c);
    size_t n = 0, freed = 0;
    if (!c) return 0;
    for (int q = 0; q < e->n_queues; q++)
        for (xsa_pending *node = e->queues[q].head; node; node = node->next) {
            xsa_block *b = node->block;
            size_t i = 0;
            while (i < n && c[i].block != b) i++; /* one entry per block */
            if (i < n || !may_hand_over(p, b, keep1, keep2)) continue;
            size_t whole = pending_pages(p, b);
            if (whole) c[n++] = (candidate){b, whole};
        }
    qsort(c, n, sizeof *c, more_pages_first);
    for (size_t i = 0; i < n && freed < pages; i++) {
        if (!hand_over(p, c[i].block)) break;
        freed += c[i].pages;
    }
    free(c);
    return freed;
}

/* A block freed with record_stream that a hand-over could end now. */
static bool pending_handable(const xsa_pool *p, const xsa_block *b) {
    return b && b->mapped && !b->draining && !b->allocated && b->event_count > 0 && may_hand_over(p, b, NULL, NULL);
}

static bool free_or_handable(const xsa_pool *p, const xsa_block *b) {
    return b && (xsa_block_is_free(b) || pending_handable(p, b));
}

bool xsa_recycle_hand_over_fit(xsa_pool *p, xsa_pool_kind kind, xsa_stream stream, size_t size) {
    xsa_events *e = &p->events;
    xsa_block *best = NULL; /* the first block of the tightest run */
    size_t best_run = 0;
    for (int q = 0; q < e->n_queues; q++)
        for (xsa_pending *node = e->queues[q].head; node; node = node->next) {
            xsa_block *b = node->block, *lo = b;
            if (b->stream != stream || b->seg->kind != kind || !pending_handable(p, b)) continue;
            size_t run = b->size;
            while (free_or_handable(p, lo->prev)) run += (lo = lo->prev)->size;
            for (const xsa_block *hi = b->next; free_or_handable(p, hi); hi = hi->next) run += hi->size;
            /* A larger run would leave free bytes that pages then move out of. */
            if (run < size || run - size >= p->page_size || (best && run >= best_run)) continue;
            best = lo;
            best_run = run;
        }
    if (!best) return false;
    /* Handing over one block merges it with its free neighbours only: the
     * records of the run's other pending blocks stay. */
    size_t n = 0;
    for (const xsa_block *b = best; free_or_handable(p, b); b = b->next) n += pending_handable(p, b);
    xsa_block **todo = malloc(n * sizeof *todo);
    if (!todo) return false;
    n = 0;
    for (xsa_block *b = best; free_or_handable(p, b); b = b->next)
        if (pending_handable(p, b)) todo[n++] = b;
    bool all = true;
    for (size_t i = 0; i < n && all; i++) all = hand_over(p, todo[i]);
    free(todo);
    return all;
}

/* Takes pages of the growing stream first (they move with no wait at all),
 * then other streams'. */
static size_t take_passes(xsa_pool *p, const xsa_seg *target, const xsa_block *keep1, const xsa_block *keep2,
                          size_t pages, size_t limit, xsa_chunk *chunks, size_t *n_chunks) {
    size_t got = take_pass(p, target, false, keep1, keep2, pages, limit, chunks, n_chunks);
    if (got < pages) got += take_pass(p, target, true, keep1, keep2, pages - got, limit - got, chunks, n_chunks);
    return got;
}

/* The drains since `mark` wait for one sweep of every stream (sweep.c
 * says why); false if it could not be recorded. */
static bool sweep_new_drains(xsa_pool *p, const xsa_drain *mark) {
    xsa_sweep *w = xsa_sweep_record(p, NULL);
    if (!w) return false;
    for (xsa_drain *d = p->drains; d != mark; d = d->next) {
        d->sweep = w;
        w->drains++;
    }
    return true;
}

size_t xsa_recycle_take(xsa_pool *p, const xsa_seg *target, const xsa_block *keep1, const xsa_block *keep2,
                        size_t pages, size_t limit, xsa_chunk *chunks, size_t *n_chunks) {
    const xsa_drain *mark = p->drains;
    *n_chunks = 0;
    size_t got = take_passes(p, target, keep1, keep2, pages, limit, chunks, n_chunks);
    /* Short of free pages: blocks waiting for record_stream events next. */
    if (got < pages && p->events.outstanding && hand_over_pending(p, keep1, keep2, pages - got))
        got += take_passes(p, target, keep1, keep2, pages - got, limit - got, chunks, n_chunks);
    if (got && !sweep_new_drains(p, mark)) {
        /* Without a sweep the old addresses could never go: the growth
         * creates its pages instead. */
        xsa_recycle_undo(p, mark);
        *n_chunks = 0;
        return 0;
    }
    return got;
}

/* Ends drain d (unlinked by the caller): its event goes back to the
 * spares, and its share of the sweep. */
static void forget(xsa_pool *p, xsa_drain *d) {
    xsa_events_put_event(&p->events, d->event);
    if (d->sweep) xsa_sweep_drop(p, d->sweep);
    free(d);
}

void xsa_recycle_undo(xsa_pool *p, const xsa_drain *mark) {
    while (p->drains != mark) {
        xsa_drain *d = p->drains;
        xsa_block *b = d->block;
        p->drains = d->next;
        b->draining = false;
        b->seg->draining_pages -= pages_of(p, b);
        xsa_pages_account(p, b->seg, pages_of(p, b), 0, +1);
        xsa_pages_return_free(p, b);
        forget(p, d);
    }
}

/* d's old address is unmapped: the range becomes unmapped space of its
 * segment. */
static void unmapped(xsa_pool *p, xsa_drain *d) {
    xsa_block *b = d->block;
    b->seg->draining_pages -= pages_of(p, b);
    b->draining = false;
    b->mapped = false;
    xsa_pages_merge_unmapped(p, b);
}

/* Unmaps d's old address. */
static xsa_cu_result finish(xsa_pool *p, xsa_drain *d) {
    xsa_block *b = d->block;
    xsa_cu_result r = xsa_segment_unmap_moved(&b->seg->vm, first_page(p, b), pages_of(p, b));
    if (r == XSA_CU_SUCCESS) unmapped(p, d);
    return r;
}

/* Whether d's work has completed: its event, then its sweep. */
static xsa_cu_result drain_done(xsa_pool *p, xsa_drain *d, bool wait) {
    xsa_cu_result r = wait ? XSA_DRV(p->drv, event_synchronize, d->event) : XSA_DRV(p->drv, event_query, d->event);
    return r == XSA_CU_SUCCESS ? xsa_sweep_wait(p, d->sweep, wait) : r;
}

size_t xsa_recycle_hold_done(xsa_pool *p, xsa_drain **out, size_t max, xsa_cu_result *failure) {
    size_t n = 0;
    for (xsa_drain *d = p->drains; d && n < max; d = d->next) {
        if (d->held || d->unmapped) continue;
        xsa_cu_result r = drain_done(p, d, false);
        if (r != XSA_CU_SUCCESS) {
            if (r != XSA_CU_ERROR_NOT_READY && *failure == XSA_CU_SUCCESS) *failure = r;
            continue;
        }
        d->held = d->block->held = true;
        d->block->seg->held++;
        out[n++] = d;
    }
    return n;
}

void xsa_recycle_retired(xsa_drain *d, bool was_unmapped) {
    xsa_block *b = d->block;
    d->held = false;
    if (!was_unmapped) { /* drains again: the next try unmaps it */
        b->held = false;
        b->seg->held--;
        return;
    }
    /* Held, draining as before in the pool's records, until taken back
     * (xsa_recycle_drain). */
    d->unmapped = true;
}

/* Takes back the range of drain d, which the helper unmapped: its pages
 * leave the segment's records, the range is unmapped space. */
static void take_back(xsa_pool *p, xsa_drain *d) {
    xsa_block *b = d->block;
    xsa_segment_forget(&b->seg->vm, first_page(p, b), pages_of(p, b));
    b->held = false;
    b->seg->held--;
    unmapped(p, d);
}

xsa_cu_result xsa_recycle_drain(xsa_pool *p, bool wait) {
    xsa_cu_result first = XSA_CU_SUCCESS;
    for (xsa_drain **at = &p->drains; *at;) {
        xsa_drain *d = *at;
        if (d->held) { /* a helper job unmaps it */
            at = &d->next;
            continue;
        }
        xsa_cu_result r = XSA_CU_SUCCESS;
        if (d->unmapped)
            take_back(p, d);
        else if ((r = drain_done(p, d, wait)) == XSA_CU_SUCCESS)
            r = finish(p, d);
        if (r != XSA_CU_SUCCESS) {
            /* Not done yet, or refused: the drain stays for the next try. */
            if (wait && first == XSA_CU_SUCCESS) first = r;
            at = &d->next;
            continue;
        }
        *at = d->next;
        forget(p, d);
    }
    return first;
}

void xsa_recycle_destroy(xsa_pool *p) {
    while (p->drains) {
        xsa_drain *d = p->drains;
        p->drains = d->next;
        /* The handles are their new segments': released with those. If the
         * unmap is refused (or the helper unmapped it already), the old
         * segment forgets them all the same. */
        if (d->unmapped || finish(p, d) != XSA_CU_SUCCESS)
            xsa_segment_forget(&d->block->seg->vm, first_page(p, d->block), pages_of(p, d->block));
        forget(p, d);
    }
}
