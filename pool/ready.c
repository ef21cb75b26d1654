/*
 * pool/ready: pages readied ahead of a growing segment, so that the next
 * request the cache misses finds them mapped instead of making the driver
 * calls (cuMemCreate, cuMemMap, cuMemSetAccess: about 50 us a one-page
 * handle on an H100 with kernels queued) on the allocation path.
 *
 * Design: a growth that created pages (pool/expand.c) notes where it
 * ended and how many it created, and wakes the helper thread. The helper
 * takes the unmapped range there, as many pages as that growth created,
 * out of everyone's reach (a held unmapped block: no growth maps there
 * meanwhile), creates, maps and grants them outside the device's lock
 * (vmm/segment_job.h), in handles of the size a growth would create
 * (pool/recycle.c's rule), and then gives them to the segment as a free
 * block, merged with the free block the growth left before it: the next
 * miss of that stream is a cache hit. Only pages a growth would create
 * now are readied, and only below the peak of reserved memory (the
 * highest ever, whatever the user's peak resets: a loop that logs its
 * peak every step resets it every step): a job
 * growing back after decay released its memory gets them ahead, while
 * peak reserved memory never grows by a guess (the bundled traces'
 * ratios stay what they are without the helper). Within the recycling
 * headroom too (a growth beyond it moves free pages instead of creating
 * them) and the memory fraction, and only for the global memory pool (a
 * memory pool's memory belongs to its graphs).
 * The check is made again when the job is done: a miss of the stream
 * while the range was held grew elsewhere, and pages that would now raise
 * the peak (or pass a memory fraction lowered meanwhile) go back to the
 * driver by the next round (pool/decay.c's release path) instead of into
 * the cache, through a slot kept for it when the job was planned, so
 * that no host allocation can fail on that way back.
 * Readied pages are ordinary free memory from then on: recycled, released
 * by empty_cache, and with decay on (pool/decay.c) released again if no
 * request uses them. A readying that fails is dropped (an out-of-memory
 * quietly: it was a guess; the growth that needs the pages will say).
 * Giving the cache back wins over readying: after empty_cache (or an
 * out-of-memory's release of everything) no readying is
 * planned for a growth before it, and a job under way across it gives
 * its pages back as one that would raise the peak does, so that reserved
 * memory right after empty_cache is what the live blocks hold, as
 * PyTorch's empty_cache promises, whenever the helper's round falls.
 */
#include "pool/ready.h"

#include "pool/block.h"
#include "pool/core.h"
#include "pool/decay.h"
#include "pool/pages.h"
#include "pool/recycle.h"
#include "pool/state.h"
#include "pool/stats.h"
#include "pool/trace.h"

/* The unmapped block starting at page `page` of s that no job holds, or NULL. */
static xsa_block *unmapped_at(const xsa_pool *p, const xsa_seg *s, size_t page) {
    uintptr_t at = s->base + page * p->page_size;
    for (xsa_block *b = s->first; b; b = b->next) {
        if (b->ptr + b->size <= at) continue;
        return b->ptr == at && !b->mapped && !b->held ? b : NULL;
    }
    return NULL;
}

/* How many of `want` pages to ready: what a growth would create now
 * (pool/recycle.c's headroom rule, the memory fraction), below the peak
 * of reserved memory. */
static size_t creatable(const xsa_pool *p, size_t want) {
    size_t moved = xsa_recycle_pages_wanted(p, 0, want), n = want - moved;
    size_t room = p->allowed_max > p->reserved ? (p->allowed_max - p->reserved) / p->page_size : 0;
    int64_t peak = xsa_pool_reserved_high(p);
    size_t below = peak > (int64_t)p->reserved ? (size_t)(peak - (int64_t)p->reserved) / p->page_size : 0;
    if (room > below) room = below;
    return n < room ? n : room;
}

size_t xsa_ready_hold(xsa_pool *p, xsa_block **out, size_t *chunk_pages, size_t max) {
    size_t count = 0;
    for (xsa_seg *s = p->segments; s && count < max; s = s->next_seg) {
        size_t want = s->grew_pages;
        s->grew_pages = 0; /* one readying a growth */
        if (!want || !s->expandable || s->mp != &p->global) continue;
        xsa_block *u = unmapped_at(p, s, s->grew_at);
        if (!u) continue;
        size_t n = want < u->size / p->page_size ? want : u->size / p->page_size;
        n = creatable(p, n);
        if (!n || !xsa_decay_keep_slot(p)) continue; /* its way back, should the pages be unwanted at its end */
        xsa_block *m = n * p->page_size < u->size ? xsa_pool_carve_front(p, u, n * p->page_size) : u;
        if (!m) {
            xsa_decay_drop_slot(p);
            continue;
        }
        m->held = true;
        s->held++;
        chunk_pages[count] = xsa_recycle_new_chunk_pages(p, 0);
        out[count++] = m;
    }
    return count;
}

void xsa_ready_done(xsa_pool *p, xsa_block *b, bool was_mapped, bool emptied) {
    xsa_seg *s = b->seg;
    b->held = false;
    s->held--;
    /* The cache was emptied while the job ran, or a miss grew elsewhere
     * (the range was held) and the pages are no longer below the peak, or
     * the memory fraction was lowered below them: they go back to the
     * driver, through the job's kept slot, which is dropped otherwise. */
    bool unwanted = emptied || (int64_t)(p->reserved + b->size) > xsa_pool_reserved_high(p) ||
                    p->reserved + b->size > p->allowed_max;
    if (was_mapped && unwanted) {
        xsa_decay_give_back(p, b);
        return;
    }
    xsa_decay_drop_slot(p);
    if (!was_mapped) {
        xsa_pages_merge_unmapped(p, b);
        return;
    }
    b->mapped = true;
    xsa_pages_account(p, s, 0, b->size / p->page_size, +1);
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_MAP, s->kind, b->ptr, b->size, b->size, s->stream);
    xsa_pages_return_free(p, b);
}

void xsa_ready_forget(xsa_pool *p) {
    for (xsa_seg *s = p->segments; s; s = s->next_seg) s->grew_pages = 0;
    p->helper.emptied++;
}
