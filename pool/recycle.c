/*
 * pool/recycle: physical page recycling between expandable segments.
 *
 * PyTorch's expandable segments keep the whole free pages in the middle of
 * a segment mapped while the segment grows at its end, so reserved memory
 * runs ahead of live memory. Here a growing segment first takes whole free
 * pages out of free blocks of any expandable segment of the device (the
 * smallest free blocks first, so large free blocks stay whole), unmaps them
 * there and maps the same handles at the growth point. Only growth pays for
 * it, never the cache-hit path.
 *
 * A page may leave its block only when no work that used it can still run:
 * cuMemUnmap takes effect at once, not in stream order, so even a move to
 * the same stream would pull the page from under kernels still queued
 * there (the H100 reported an illegal address when it did). Each segment
 * keeps a fence: an event recorded on its stream; blocks that became free
 * before the fence was recorded may move once it has completed (polled,
 * never waited for; an idle stream completes it at once). Blocks waiting
 * for record_stream events or pinned by IPC exports are not free, so they
 * are never taken.
 *
 * Moving a page is not free: an unmap, a map and an access change, about
 * 57 us of driver time on an H100, against about 47 us for a new page. So a
 * growth creates new pages while reserved memory stays within (1 +
 * page_recycling_headroom) times the highest allocated bytes seen, and
 * moves pages only for the part beyond: peak reserved stays within about
 * that fraction of peak allocated, and no page moves when the memory it
 * would save is not at stake.
 */
#include "pool/pool_internal.h"

/* Polls s's fence; on completion everything freed before it may move. */
static void poll_fence(xsa_pool *p, xsa_seg *s) {
    if (s->fence_pending && XSA_DRV(p->drv, event_query, s->fence) == XSA_CU_SUCCESS) {
        s->safe_seq = s->fence_seq;
        s->fence_pending = false;
    }
}

/* Records a fence on each expandable segment where blocks became free
 * since its last completed fence and none is pending, and polls it at once
 * (an idle stream completes it then). Only when a growth would otherwise
 * go without pages: on the GPU, polling right after recording costs a
 * flush of queued work. */
static void record_fences(xsa_pool *p) {
    for (xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (!s->expandable || s->fence_pending) continue;
        if (s->last_free_seq == 0 || s->last_free_seq < s->safe_seq) continue; /* nothing new */
        if (!s->fence && XSA_DRV(p->drv, event_create, &s->fence, p->device) != XSA_CU_SUCCESS) {
            s->fence = NULL;
            continue;
        }
        if (XSA_DRV(p->drv, event_record, s->fence, s->stream) != XSA_CU_SUCCESS) continue;
        s->fence_seq = p->free_seq + 1;
        s->fence_pending = true;
        poll_fence(p, s);
    }
}

/* Takes up to `want` pages from the high end of free block b's whole pages. */
static size_t take_from(xsa_pool *p, xsa_block *b, size_t want, xsa_mem_handle *handles) {
    xsa_seg *s = b->seg;
    size_t page = p->page_size;
    size_t first = (b->ptr - s->base + page - 1) / page;
    size_t end = (b->ptr + b->size - s->base) / page;
    if (end <= first) return 0;
    size_t n = end - first < want ? end - first : want;
    char err[256];
    if (xsa_expand_unmap_pages(p, b, end - n, end, handles, err, sizeof err) != XSA_POOL_OK) return 0;
    return n;
}

/* Takes pages from free blocks whose fence has completed; *waiting tells
 * whether blocks were passed over because work may still use them. */
static size_t take_settled(xsa_pool *p, const xsa_block *keep1, const xsa_block *keep2, size_t pages,
                           xsa_mem_handle *handles, bool *waiting) {
    size_t got = 0;
    *waiting = false;
    for (int k = 0; k < XSA_POOL_KINDS && got < pages; k++) {
        xsa_free_set *set = &p->free[k];
        /* Ascending (stream, size): small free blocks first. Each step
         * finds the next block before b is split. */
        for (xsa_block *b = xsa_free_set_first(set), *next; b && got < pages; b = next) {
            if (b->size < p->page_size) {
                /* Skip the stream's blocks too small to hold a page. */
                next = xsa_free_set_lower_bound(set, b->stream, p->page_size);
                continue;
            }
            next = xsa_free_set_next(set, b);
            if (b == keep1 || b == keep2 || !b->seg->expandable) continue;
            if (b->free_seq >= b->seg->safe_seq) {
                *waiting = true; /* work queued before its free may still use it */
                continue;
            }
            got += take_from(p, b, pages - got, handles + got);
        }
    }
    return got;
}

size_t xsa_recycle_pages_wanted(const xsa_pool *p, size_t size, size_t pages) {
    if (!p->opt.page_recycling) return 0;
    int64_t high = xsa_pool_allocated_high(p);
    int64_t after = p->stats.allocated_bytes[XSA_STAT_ALL].current + (int64_t)size;
    if (after > high) high = after;
    double bound = (double)high * (1.0 + p->opt.page_recycling_headroom);
    double room = bound - (double)p->reserved; /* bytes that may still be created */
    size_t fresh = room > 0 ? (size_t)(room / (double)p->page_size) : 0;
    return pages > fresh ? pages - fresh : 0;
}

size_t xsa_recycle_take(xsa_pool *p, const xsa_block *keep1, const xsa_block *keep2, size_t pages,
                        xsa_mem_handle *handles) {
    for (xsa_seg *s = p->segments; s; s = s->next_seg)
        if (s->expandable) poll_fence(p, s);
    bool waiting = false;
    size_t got = take_settled(p, keep1, keep2, pages, handles, &waiting);
    if (got < pages && waiting) {
        record_fences(p);
        got += take_settled(p, keep1, keep2, pages - got, handles + got, &waiting);
    }
    return got;
}

void xsa_recycle_give_back(xsa_seg *target, xsa_mem_handle *handles, size_t n) {
    for (size_t i = 0; i < n; i++) xsa_segment_release_handle(&target->vm, handles[i]);
}

xsa_cu_result xsa_recycle_forget_segment(xsa_pool *p, xsa_seg *s) {
    if (s->fence) {
        xsa_cu_result r = XSA_DRV(p->drv, event_destroy, s->fence);
        if (r != XSA_CU_SUCCESS) return r; /* kept: destroyed with the segment later */
    }
    s->fence = NULL;
    s->fence_pending = false;
    return XSA_CU_SUCCESS;
}
