/*
 * pool/decay: decay purging (page_decay_ms). Reserved memory follows live
 * memory down: free pages of the global memory pool's expandable segments
 * that no request used for page_decay_ms are unmapped and released, oldest
 * first, by the helper thread (pool/jobs.c), never on the allocation path.
 *
 * Ages. The helper ticks every page_decay_ms / 8 (at least 1 ms, the
 * helper's clock: api/helper.h, injectable). At each tick it walks the
 * segments' blocks and keeps, per page, since when it has seen the page
 * free and unused: a whole page inside a free block that no request was
 * handed since the tick before. Handing out a block sets its pages' bits
 * in its segment's used_pages (pool/state.h: xsa_mark_used, a few word
 * stores on the allocation path, once decay has ticked), which each tick
 * reads and clears. So a training step's activations, allocated and freed
 * between two ticks, keep their pages young although no tick sees them in
 * use, wherever best fit put them, while the pages a burst alone used (an
 * evaluation's activations) age from its end.
 *
 * How much. Besides its age, the memory released is bounded by amount:
 * reserved memory stays at or above (1 + page_recycling_headroom) times
 * the highest allocated bytes of any tick interval in the last
 * page_decay_ms, so memory the program needed in that time (beyond the
 * headroom's fragmentation) stays even where the ages above guessed
 * wrong; and nothing goes while that need is above NEAR_HIGH of the
 * highest allocated bytes ever: a program that comes back that close to
 * its peak soon regrows what went, paying the driver for it, in a layout
 * of its own (in the bundled traces' replays, peak reserved / peak
 * allocated went 0.03-0.3% above decay off's in 5 of 24 without this
 * rule, 1 with 0.7 or 0.65, none with 0.6), while after a burst it
 * goes (GPT-2's evaluation of twice the activations, recorded on an H100
 * and an H200: steps at 0.56 of the burst's peak). A smaller burst (a
 * checkpoint's copy, a long sequence) stays only while the program comes
 * back to PEAK_BACK of its highest now and then: once no tick's peak has
 * for NEAR_HIGH_HOLD windows, it goes too (the replays keep their peaks:
 * only llm_decode's reserved GB·s changes, 99 -> 93).
 * Regret. Where steps differ in size (random batches and lengths), the
 * window's need swings from step to step: the bound cuts to a small
 * window's need and the next large step creates it all again, on the
 * allocation path (GPT-2 training with batch 4-16 x length 64-1024 on an
 * H200: 130-170 thousand pages released and created again over 200
 * steps, 0.25-0.42 s of lock waits). So the need the bound follows is the
 * highest of the last `horizon` windows, one at first. A cut is judged
 * where the need it follows fell within the window before the horizon by
 * REGRET_MIN or more (pages that age out later, a burst's taken a window
 * after the burst's own cut, are no guess about the need), and where it
 * took REGRET_MIN of the need or more; a repack's regrowth is meant (its
 * backoff is its own). When reserved memory grows back, from tick to
 * tick, by REGRET_SHARE of what the cut took (with what the next ticks
 * of that time took) within `horizon` windows of it (as long as the
 * horizon had kept the need), the cut was a regret. The horizon grows
 * HORIZON_GROWTH times at a regret (up to HORIZON_MAX windows), the
 * first time only at a second regret within HORIZON_CALM x its windows:
 * one can be a program's start (GPT-2's first step on an H200 takes 0.6
 * s, more than a window, and the next creates what went); HORIZON_CALM x horizon
 * windows without one halve it. Memory that comes back later than that
 * (the bursty workload's bursts, every 1.2-2 s) keeps a horizon of one
 * window and goes as fast as before. (Replaying gpt2_varlen and
 * resnet_varbatch six times over, 100 us an event, lags 0 and 500: the
 * allocation path's simulated driver time 270-281 and 167-169 ms against
 * decay off's 244-247 and 100-113, where a horizon of one window cost
 * 721-774 and 378-406; growing twofold, 335-341 and 210-218.)
 * Oldest first: free blocks by the age of their youngest page in
 * the range, each from its high end, whole chunks only (the driver
 * releases whole handles).
 *
 * Repacking. Pages a step touches stay young wherever best fit put them,
 * and after a burst the steps run over a cache mapped ahead of them: best
 * fit scatters them over more pages than a cache grown for them (GPT-2
 * training on an H100: 1.07-1.09 times the steps' peak once the burst's
 * own pages went, against 1.01 before the burst). So when reserved memory
 * has stayed above the window's peak by more than REPACK_EXCESS of it
 * (and REPACK_MIN_PAGES) for a wait, at the next tick where live memory
 * is low in the step (in the lower REPACK_LOW of the span between the
 * lowest live memory the window's ticks saw and its peak, a span of at
 * least REPACK_CYCLE of the peak: steps; so that the step's own blocks
 * are free and go too), every free page goes (oldest first, down to the
 * bound above) whatever its age, and for PACKING_TICKS ticks after,
 * recycling's headroom bound follows the window's peak instead of the
 * highest allocated bytes ever (xsa_decay_packing_high): the steps regrow
 * into pages moved from free blocks, packed as they were at their first
 * step (1.01-1.04 in the simulated replays of the H100 and H200 runs at 6
 * to 40 us an event and GPU lags 0 to 2000, within 5% in under 1 s in 33
 * of 36; on an H100, repacking at any tick, 1.011 within 0.61-0.66 s).
 * Each repack doubles the wait (from one tick, up to REPACK_MAX_WAIT
 * windows) until reserved memory stays within the excess for REPACK_CALM
 * windows: a workload whose repacks do not last repacks seldom, since
 * each costs a step's regrowth on the allocation path. (Repacking at any
 * tick cost llm_decode's allocation path 3.4 x decay off's simulated
 * driver time, only between steps 1.2 x: its live memory, drifting with
 * a growing KV cache, spans less than a fifth of its peak in a window;
 * the recorded GPT-2 runs come within 5% as soon.)
 *
 * Safety. The ages decide what goes, never when: a range that goes is
 * first taken out of the cache (held and draining: nobody's memory, out
 * of reserved), then a fence (pool/sweep.c: an event on every segment
 * stream) is recorded, and the range is unmapped only once a fence
 * recorded after it was taken has completed: every kernel queued before
 * that, on any stream that allocates, is done, and nothing was queued on
 * the range since. No fence is recorded or queried during a capture
 * (the ranges wait). The unmap and release are the helper's job outside
 * the device's lock (pool/jobs.c); releasing the cache (empty_cache, the
 * out-of-memory fallback) synchronizes the streams anyway and releases
 * the waiting ranges itself.
 */
#include "pool/decay.h"

#include <stdlib.h>
#include <string.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/pages.h"
#include "pool/state.h"
#include "pool/stats.h"
#include "pool/sweep.h"
#include "pool/trace.h"

#define HORIZON_MAX 16        /* windows: the longest horizon of the bound's need */
#define SAMPLES (8 * (HORIZON_MAX + REGRET_WINDOWS) + 8) /* ticks kept: a window is 8 ticks */
#define MIN_TICK_NS 1000000ull
#define FENCE_POLL_NS 2000000ull /* a waiting fence is looked at again after this */
#define REPACK_EXCESS 0.03      /* the excess over the window's peak a repack is for, */
#define REPACK_MIN_PAGES 16     /* and at least this many pages */
#define REPACK_CYCLE 0.2        /* where the window's live memory spans this x its peak (steps), */
#define REPACK_LOW 0.5          /* at a tick whose live memory is in this lower part of the span */
#define REPACK_CALM 2           /* windows within it that end the backoff */
#define REPACK_MAX_WAIT 64      /* windows: the longest wait between repacks */
#define PACKING_TICKS 4         /* ticks after a repack that recycling follows the window's peak */
#define NEAR_HIGH 0.6           /* nothing goes while the window needed above this x the highest allocated, */
#define PEAK_BACK 0.9           /* and a tick's peak came back to this x it */
#define NEAR_HIGH_HOLD 16       /* windows ago at most */
#define REGRET_WINDOWS 1        /* a cut is judged where the need fell this many windows before the horizon, */
#define REGRET_MIN 0.2          /* by this x the need or more, and it took as much; */
#define REGRET_SHARE 0.25       /* reserved memory regrown by this share of it within the horizon: a regret */
#define HORIZON_GROWTH 4        /* a regret makes the horizon this x longer, */
#define HORIZON_CALM 16         /* (the first time, a second within this x horizon windows) */
                                /* as many windows without one halve it */

typedef struct sample {
    uint64_t t;
    int64_t peak;             /* highest allocated bytes since the tick before */
    int64_t live;             /* allocated bytes at the tick */
} sample;

typedef struct range {
    xsa_block *block;
    uint64_t fence;           /* the fence it waits for (sequence number) */
    bool in_job;              /* handed to a helper job */
} range;

typedef struct xsa_decay {
    uint64_t ticks, last;     /* ticks so far, and the last one's time (ns) */
    uint64_t polled;          /* the last round */
    sample s[SAMPLES];        /* the window's ticks, oldest at head */
    size_t head, n;
    int64_t need;             /* the highest peak of the window at the last tick */
    int64_t held_need;        /* the highest peak of the last `horizon` windows: the bound's */
    int64_t recent_need;      /* the same over REGRET_WINDOWS more */
    uint64_t horizon;         /* windows (1 to HORIZON_MAX, a power of two; 0 before the first tick) */
    uint64_t calm_since;      /* the horizon's last change, or its last regret */
    uint64_t regret_at;       /* a regret no second one followed yet (0: none) */
    bool cut;                 /* a cut under judgement (`horizon` windows): */
    uint64_t cut_at;          /* its first tick, */
    int64_t cut_bytes;        /* the bytes its ticks took, */
    int64_t regrown;          /* the growth of reserved memory between ticks since, */
    size_t reserved_after;    /* and reserved memory after the last tick's cut */
    int64_t low;              /* the lowest live memory its ticks saw, at the last tick */
    uint64_t at_peak;         /* the last tick whose peak came back to PEAK_BACK x the highest allocated */
    uint64_t over_since;      /* the tick reserved memory went above the repack bound (0: within) */
    uint64_t within_since;    /* the tick it came within (0: above) */
    uint64_t repack_wait;     /* ns above the bound before the next repack */
    uint64_t repacked;        /* the last repack's tick (0: none) */
    xsa_sweep *fence;         /* recorded as number `recorded`, not yet seen complete */
    uint64_t recorded, completed;
    range *ranges;            /* taken out of the cache, waiting to go */
    size_t n_ranges, cap_ranges;
    size_t kept;              /* slots of ranges[] kept for readyings under way (xsa_decay_keep_slot) */
} xsa_decay;

static uint64_t window_ns(const xsa_pool *p) { return (uint64_t)p->opt.page_decay_ms * 1000000ull; }

static uint64_t period_ns(const xsa_pool *p) {
    uint64_t t = window_ns(p) / 8;
    return t < MIN_TICK_NS ? MIN_TICK_NS : t;
}

static xsa_decay *state(xsa_pool *p) {
    if (!p->decay) p->decay = calloc(1, sizeof *p->decay);
    return p->decay;
}

uint64_t xsa_decay_due(const xsa_pool *p) {
    const xsa_decay *d = p->decay;
    bool on = p->opt.page_decay_ms && p->expandable;
    if (!d) return on ? 0 : UINT64_MAX;
    uint64_t due = !on ? UINT64_MAX : d->ticks ? d->last + period_ns(p) : 0;
    /* Ranges waiting for their fence (taken before decay was turned off
     * too) are looked at again soon. */
    bool waiting = false;
    for (size_t i = 0; i < d->n_ranges && !waiting; i++) waiting = !d->ranges[i].in_job;
    if (waiting && d->polled + FENCE_POLL_NS < due) due = d->polled + FENCE_POLL_NS;
    return due;
}

/* ---- the window ---- */

static void push(xsa_decay *d, sample s) {
    if (d->n == SAMPLES) {
        d->head = (d->head + 1) % SAMPLES;
        d->n--;
    }
    d->s[(d->head + d->n++) % SAMPLES] = s;
}

/* Drops the samples older than HORIZON_MAX + REGRET_WINDOWS windows (the
 * newest always stays); d->need and d->low from those of the window,
 * d->held_need from those of the horizon, d->recent_need from those of
 * REGRET_WINDOWS more. */
static void window(xsa_decay *d, uint64_t now, uint64_t span) {
    while (d->n > 1 && d->s[d->head].t + (HORIZON_MAX + REGRET_WINDOWS) * span < now) {
        d->head = (d->head + 1) % SAMPLES;
        d->n--;
    }
    d->need = d->held_need = d->recent_need = 0;
    d->low = INT64_MAX;
    for (size_t i = 0; i < d->n; i++) {
        const sample *s = &d->s[(d->head + i) % SAMPLES];
        if (s->t + (d->horizon + REGRET_WINDOWS) * span >= now && s->peak > d->recent_need) d->recent_need = s->peak;
        if (s->t + d->horizon * span >= now && s->peak > d->held_need) d->held_need = s->peak;
        if (s->t + span < now && i + 1 < d->n) continue;
        if (s->peak > d->need) d->need = s->peak;
        if (s->live < d->low) d->low = s->live;
    }
}

/* The horizon at the tick at `now`: HORIZON_GROWTH times as long after a
 * regret (the first time, after a second within HORIZON_CALM x its
 * windows of the first), half as long after as many windows without one
 * (so always a power of two). A cut is
 * judged for `horizon` windows, by the growth of reserved memory from one
 * tick to the next. */
static void regret(const xsa_pool *p, xsa_decay *d, uint64_t now, uint64_t span) {
    if (!d->horizon) d->horizon = 1, d->calm_since = now;
    uint64_t calm = HORIZON_CALM * d->horizon * span;
    if (d->cut && p->reserved > d->reserved_after) d->regrown += (int64_t)(p->reserved - d->reserved_after);
    if (d->cut && (double)d->cut_bytes >= REGRET_MIN * (double)d->held_need &&
        (double)d->regrown >= REGRET_SHARE * (double)d->cut_bytes) {
        d->cut = false;
        d->calm_since = now;
        if (d->horizon > 1 || (d->regret_at && now - d->regret_at < calm)) {
            d->horizon = d->horizon * HORIZON_GROWTH < HORIZON_MAX ? d->horizon * HORIZON_GROWTH : HORIZON_MAX;
            d->regret_at = 0;
        } else {
            d->regret_at = now;
        }
    } else if (d->horizon > 1 && now - d->calm_since >= calm) {
        d->horizon /= 2;
        d->calm_since = now;
    }
    if (d->cut && now - d->cut_at >= d->horizon * span) d->cut = false;
}

/* ---- ages ---- */

static bool decays(const xsa_pool *p, const xsa_seg *s) { return s->expandable && s->mp == &p->global; }

/* Pages [lo, hi) are not free: their age is forgotten. */
static void not_free(xsa_seg *s, size_t lo, size_t hi) {
    if (hi > s->n_free_since) hi = s->n_free_since;
    for (size_t pg = lo; pg < hi; pg++) s->free_since[pg] = 0;
}

static bool used(const xsa_seg *s, size_t pg) { return s->used_pages[pg / 64] >> (pg % 64) & 1; }

/* Free block b at tick `stamp`: its whole pages age unless a request used
 * them since the tick before. */
static void age_free(const xsa_pool *p, xsa_seg *s, const xsa_block *b, uint64_t stamp) {
    size_t lo = xsa_seg_page_of(p, s, b->ptr), hi = xsa_seg_page_above(p, s, b->ptr + b->size);
    size_t whole_lo = xsa_seg_page_above(p, s, b->ptr), whole_hi = xsa_seg_page_of(p, s, b->ptr + b->size);
    if (whole_hi <= whole_lo) {
        not_free(s, lo, hi);
        return;
    }
    not_free(s, lo, whole_lo);
    not_free(s, whole_hi, hi);
    for (size_t pg = whole_lo; pg < whole_hi; pg++)
        if (used(s, pg) || !s->free_since[pg]) s->free_since[pg] = stamp;
    if (whole_hi > s->n_free_since) s->n_free_since = whole_hi;
}

/* The tick's walk over the segments that decay; the used bits start over. */
static void age_pages(xsa_pool *p, uint64_t stamp) {
    for (xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (!decays(p, s)) continue;
        size_t words = (s->vm.max_pages + 63) / 64;
        if (!s->free_since && !(s->free_since = calloc(s->vm.max_pages, sizeof *s->free_since))) continue;
        if (!s->used_pages && !(s->used_pages = calloc(words, sizeof *s->used_pages))) continue;
        for (const xsa_block *b = s->first; b; b = b->next) {
            if (b->mapped && xsa_block_is_free(b))
                age_free(p, s, b, stamp);
            else
                not_free(s, xsa_seg_page_of(p, s, b->ptr), xsa_seg_page_above(p, s, b->ptr + b->size));
        }
        memset(s->used_pages, 0, words * sizeof *s->used_pages);
    }
}

/* ---- the fence ---- */

/* Looks at the fence under way; records one when ranges wait for one
 * recorded after them. */
static void fence(xsa_pool *p, xsa_decay *d, xsa_cu_result *failure) {
    if (d->fence) {
        xsa_cu_result r = xsa_sweep_wait(p, d->fence, false);
        if (r == XSA_CU_ERROR_NOT_READY) return;
        if (r != XSA_CU_SUCCESS && *failure == XSA_CU_SUCCESS) *failure = r;
        if (r == XSA_CU_SUCCESS) d->completed = d->recorded;
        xsa_sweep_drop(p, d->fence); /* a failed one is recorded again */
        d->fence = NULL;
    }
    bool waiting = false;
    for (size_t i = 0; i < d->n_ranges; i++) waiting |= d->ranges[i].fence > d->completed;
    if (!waiting) return;
    xsa_cu_result why = XSA_CU_SUCCESS;
    if (!(d->fence = xsa_sweep_record(p, &why))) {
        if (why != XSA_CU_ERROR_OUT_OF_MEMORY && *failure == XSA_CU_SUCCESS) *failure = why;
        return;
    }
    d->fence->drains = 1; /* decay's own: dropped when seen complete */
    d->recorded++;
}

/* ---- choosing ---- */

typedef struct run {
    xsa_block *block;
    size_t lo, hi;            /* pages */
    uint64_t youngest;        /* the latest free_since among them */
} run;

static int older_first(const void *a, const void *b) {
    uint64_t x = ((const run *)a)->youngest, y = ((const run *)b)->youngest;
    return (x > y) - (x < y);
}

/* The latest free_since of pages [lo, hi), or 0 if one of them has not
 * been free since `before` or earlier. */
static uint64_t old_since(const xsa_seg *s, size_t lo, size_t hi, uint64_t before) {
    uint64_t youngest = 0;
    if (hi > s->n_free_since) return 0;
    for (size_t pg = lo; pg < hi; pg++) {
        uint64_t f = s->free_since[pg];
        if (!f || f > before) return 0;
        if (f > youngest) youngest = f;
    }
    return youngest;
}

/* The highest run of whole chunks of free block b whose pages have all
 * been free since `before` or earlier; false if none. */
static bool old_run(const xsa_pool *p, const xsa_block *b, uint64_t before, run *out) {
    const xsa_seg *s = b->seg;
    size_t first, end, start;
    if (!xsa_pages_whole_chunks(p, b, &first, &end)) return false;
    *out = (run){(xsa_block *)b, 0, 0, 0};
    for (size_t c = end; c > first; c = start) {
        xsa_segment_chunk(&s->vm, c - 1, &start);
        uint64_t since = old_since(s, start, c, before);
        if (!since) {
            if (out->hi) break; /* the run ends below its highest old chunk */
            continue;
        }
        if (!out->hi) out->hi = c;
        out->lo = start;
        if (since > out->youngest) out->youngest = since;
    }
    return out->hi != 0;
}

/* Room in ranges[] for one more range beside the kept slots. */
static bool room_for_one(xsa_decay *d) {
    if (d->n_ranges + d->kept < d->cap_ranges) return true;
    size_t cap = d->cap_ranges ? 2 * d->cap_ranges : 8;
    range *grown = realloc(d->ranges, cap * sizeof *grown);
    if (!grown) return false;
    d->ranges = grown;
    d->cap_ranges = cap;
    return true;
}

static bool keep_range(xsa_decay *d, xsa_block *b) {
    if (!room_for_one(d)) return false;
    d->ranges[d->n_ranges++] = (range){b, d->recorded + 1, false};
    return true;
}

/* Range b of `pages` pages is a helper job's, out of the segment's
 * memory (held, draining), or no longer. */
static void hold(xsa_seg *s, xsa_block *b, size_t pages) {
    b->draining = b->held = true;
    s->held++;
    s->draining_pages += pages;
}

static void unhold(xsa_seg *s, xsa_block *b, size_t pages) {
    b->held = b->draining = false;
    s->held--;
    s->draining_pages -= pages;
}

/* Takes pages [lo, hi) of free block b out of the cache to go: held,
 * draining (out of reserved), waiting for the next fence. */
static bool take(xsa_pool *p, xsa_decay *d, xsa_block *b, size_t lo, size_t hi) {
    xsa_seg *s = b->seg;
    char err[128];
    if (!keep_range(d, NULL)) return false;
    if (xsa_pages_isolate(p, b, s->base + lo * p->page_size, s->base + hi * p->page_size, err, sizeof err) != XSA_POOL_OK) {
        d->n_ranges--;
        return false;
    }
    d->ranges[d->n_ranges - 1].block = b;
    hold(s, b, hi - lo);
    xsa_pages_account(p, s, hi - lo, 0, -1);
    not_free(s, lo, hi);
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_UNMAP, s->kind, b->ptr, b->size, b->size, s->stream);
    return true;
}

bool xsa_decay_keep_slot(xsa_pool *p) {
    xsa_decay *d = state(p);
    if (!d || !room_for_one(d)) return false;
    d->kept++;
    return true;
}

void xsa_decay_drop_slot(xsa_pool *p) { p->decay->kept--; }

void xsa_decay_give_back(xsa_pool *p, xsa_block *b) {
    xsa_decay *d = p->decay;
    d->kept--; /* the job's kept slot: no allocation here */
    d->ranges[d->n_ranges++] = (range){b, 0, false}; /* fence 0: passed, completed is never below 0 */
    size_t pages = b->size / p->page_size;
    b->mapped = true;
    hold(b->seg, b, pages);
    p->stats.num_device_alloc++; /* created, never reserved: end_range counts their release */
    p->stats.num_pages_mapped += (int64_t)pages;
}

/* Takes runs of free pages all free since `before` or earlier, oldest
 * first, each from its high end in whole chunks, within *budget pages. */
static void take_runs(xsa_pool *p, xsa_decay *d, uint64_t before, size_t *budget) {
    size_t n = 0, cap = 0;
    run *runs = NULL;
    for (xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (!decays(p, s) || !s->free_since) continue;
        for (xsa_block *b = s->first; b; b = b->next) {
            run r;
            if (!b->mapped || !xsa_block_is_free(b) || !old_run(p, b, before, &r)) continue;
            if (n == cap) {
                run *grown = realloc(runs, (cap = cap ? 2 * cap : 16) * sizeof *grown);
                if (!grown) break;
                runs = grown;
            }
            runs[n++] = r;
        }
    }
    if (n) qsort(runs, n, sizeof *runs, older_first);
    for (size_t i = 0; i < n && *budget; i++) {
        const xsa_seg *s = runs[i].block->seg;
        size_t lo = runs[i].hi, start;
        while (lo > runs[i].lo) { /* whole chunks from the high end, within the budget */
            xsa_segment_chunk(&s->vm, lo - 1, &start);
            if (runs[i].hi - start > *budget) break;
            lo = start;
        }
        if (lo == runs[i].hi || !take(p, d, runs[i].block, lo, runs[i].hi)) continue;
        *budget -= runs[i].hi - lo;
    }
    free(runs);
}

/* Whether this tick repacks: reserved memory has stayed above the
 * window's peak by more than REPACK_EXCESS of it and REPACK_MIN_PAGES for
 * the wait, and live memory is low in the window's steps; the backoff's
 * bookkeeping. */
static bool repack_due(const xsa_pool *p, xsa_decay *d, uint64_t stamp) {
    uint64_t span = window_ns(p);
    int64_t need = d->need;
    /* One tick at first, and again if page_decay_ms changed under it. */
    if (d->repack_wait < period_ns(p) || d->repack_wait > 2 * REPACK_MAX_WAIT * span) d->repack_wait = period_ns(p);
    double excess = (double)p->reserved - (double)need;
    if (excess <= REPACK_EXCESS * (double)need || excess < REPACK_MIN_PAGES * (double)p->page_size) {
        d->over_since = 0;
        if (!d->within_since) d->within_since = stamp;
        if (stamp - d->within_since >= REPACK_CALM * span) d->repack_wait = period_ns(p);
        return false;
    }
    d->within_since = 0;
    if (!d->over_since) d->over_since = stamp;
    if (stamp - d->over_since < d->repack_wait) return false;
    double live = (double)p->stats.allocated_bytes[XSA_STAT_ALL].current, range = (double)(need - d->low);
    if (range < REPACK_CYCLE * (double)need || live > (double)d->low + REPACK_LOW * range) return false;
    d->over_since = d->repacked = stamp;
    if (d->repack_wait < REPACK_MAX_WAIT * span) d->repack_wait *= 2;
    return true;
}

/* Chooses what goes at this tick: old runs (every free run when it
 * repacks), oldest first, from their high end, while reserved stays above
 * the bound. */
static void choose(xsa_pool *p, xsa_decay *d, uint64_t stamp) {
    double bound = (1.0 + p->opt.page_recycling_headroom) * (double)d->held_need;
    uint64_t span = window_ns(p), before = stamp > span ? stamp - span : 0;
    if (repack_due(p, d, stamp)) before = stamp;
    if ((double)d->need > NEAR_HIGH * (double)xsa_pool_allocated_high(p) &&
        d->last - d->at_peak < NEAR_HIGH_HOLD * span)
        return;
    if ((double)p->reserved <= bound) return;
    size_t budget = (size_t)(((double)p->reserved - bound) / (double)p->page_size), asked = budget;
    take_runs(p, d, before, &budget);
    if (budget == asked || before == stamp) return; /* a repack's regrowth is meant */
    if (!d->cut) {
        /* Judged only where the need it follows fell within REGRET_WINDOWS:
         * pages that aged out later (a burst's, taken a window after the
         * burst's own cut) are no guess about the need. */
        if ((double)d->recent_need < (1.0 + REGRET_MIN) * (double)d->held_need) return;
        d->cut = true;
        d->cut_at = d->last;
        d->cut_bytes = d->regrown = 0;
    }
    d->cut_bytes += (int64_t)((asked - budget) * p->page_size);
}

int64_t xsa_decay_packing_high(const xsa_pool *p) {
    const xsa_decay *d = p->decay;
    if (!d || !d->repacked || !p->opt.page_decay_ms || !p->expandable ||
        d->last + 1 - d->repacked > PACKING_TICKS * period_ns(p))
        return -1;
    int64_t interval = xsa_pool_interval_peak(p);
    return d->need > interval ? d->need : interval;
}

/* ---- the tick and the round ---- */

static void tick(xsa_pool *p, xsa_decay *d, uint64_t now) {
    uint64_t stamp = now + 1; /* 0 means "not free" */
    int64_t peak = xsa_pool_take_interval_peak(p);
    if ((double)peak >= PEAK_BACK * (double)xsa_pool_allocated_high(p)) d->at_peak = now;
    push(d, (sample){now, peak, p->stats.allocated_bytes[XSA_STAT_ALL].current});
    regret(p, d, now, window_ns(p));
    window(d, now, window_ns(p));
    age_pages(p, stamp);
    d->last = now;
    d->ticks++;
    if (!p->capturing) choose(p, d, stamp);
    d->reserved_after = p->reserved;
}

size_t xsa_decay_round(xsa_pool *p, uint64_t now, xsa_block **out, size_t max, xsa_cu_result *failure) {
    bool on = p->opt.page_decay_ms && p->expandable;
    if (!on && !p->decay) return 0;
    xsa_decay *d = state(p);
    if (!d) return 0;
    if (on && (!d->ticks || now >= d->last + period_ns(p))) tick(p, d, now);
    d->polled = now;
    if (p->capturing) return 0; /* no fence is recorded or looked at */
    fence(p, d, failure);
    size_t n = 0;
    for (size_t i = 0; i < d->n_ranges && n < max; i++) {
        range *r = &d->ranges[i];
        if (r->in_job || r->fence > d->completed) continue;
        r->in_job = true;
        out[n++] = r->block;
    }
    return n;
}

/* Forgets range i. */
static void drop_range(xsa_decay *d, size_t i) { d->ranges[i] = d->ranges[--d->n_ranges]; }

static size_t find_range(const xsa_decay *d, const xsa_block *b) {
    size_t i = 0;
    while (i < d->n_ranges && d->ranges[i].block != b) i++;
    return i;
}

/* Range b (held, draining) is gone from the cache for good or back in it. */
static void end_range(xsa_pool *p, xsa_block *b, bool was_unmapped) {
    xsa_seg *s = b->seg;
    size_t pages = b->size / p->page_size;
    unhold(s, b, pages);
    if (was_unmapped) {
        b->mapped = false;
        p->stats.num_device_free++;
        p->stats.num_pages_unmapped += (int64_t)pages;
        xsa_pages_merge_unmapped(p, b);
        return;
    }
    xsa_pages_account(p, s, pages, 0, +1);
    if (p->decay) p->decay->reserved_after += pages * p->page_size; /* back, not regrown: no regret */
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_MAP, s->kind, b->ptr, b->size, b->size, s->stream);
    xsa_pages_return_free(p, b);
}

void xsa_decay_released(xsa_pool *p, xsa_block *b, bool was_unmapped) {
    xsa_decay *d = p->decay;
    size_t i = find_range(d, b);
    if (i < d->n_ranges) drop_range(d, i);
    end_range(p, b, was_unmapped);
}

xsa_cu_result xsa_decay_release_waiting(xsa_pool *p) {
    xsa_decay *d = p->decay;
    xsa_cu_result first = XSA_CU_SUCCESS;
    for (size_t i = 0; d && i < d->n_ranges;) {
        range *r = &d->ranges[i];
        if (r->in_job) {
            i++;
            continue;
        }
        xsa_block *b = r->block;
        xsa_seg *s = b->seg;
        xsa_cu_result res = xsa_segment_unmap(&s->vm, xsa_seg_page_of(p, s, b->ptr), b->size / p->page_size, NULL);
        if (res != XSA_CU_SUCCESS && first == XSA_CU_SUCCESS) first = res;
        drop_range(d, i);
        end_range(p, b, res == XSA_CU_SUCCESS);
    }
    return first;
}

void xsa_decay_destroy(xsa_pool *p) {
    xsa_decay *d = p->decay;
    if (!d) return;
    if (d->fence) xsa_sweep_drop(p, d->fence);
    free(d->ranges);
    free(d);
    p->decay = NULL;
}

int xsa_decay_check(const xsa_pool *p, size_t *ranges, char *err, size_t errlen) {
    const xsa_decay *d = p->decay;
    *ranges = d ? d->n_ranges : 0;
    if (d && d->n_ranges + d->kept > d->cap_ranges)
        return xsa_check_fail(err, errlen, "decay: %zu ranges and %zu kept slots in room for %zu", d->n_ranges, d->kept,
                              d->cap_ranges);
    if (d && d->over_since && d->within_since)
        return xsa_check_fail(err, errlen, "decay: reserved memory both above and within the repack bound");
    if (d && d->repacked > d->last + 1)
        return xsa_check_fail(err, errlen, "decay: a repack after the last tick");
    if (d && d->at_peak > d->last)
        return xsa_check_fail(err, errlen, "decay: the highest came back after the last tick");
    if (d && d->ticks && (!d->horizon || d->horizon > HORIZON_MAX || (d->horizon & (d->horizon - 1))))
        return xsa_check_fail(err, errlen, "decay: a horizon of %llu windows", (unsigned long long)d->horizon);
    if (d && (d->cut_at > d->last || d->calm_since > d->last || d->regret_at > d->last))
        return xsa_check_fail(err, errlen, "decay: a cut or a horizon change after the last tick");
    for (size_t i = 0; d && i < d->n_ranges; i++) {
        const xsa_block *b = d->ranges[i].block;
        if (!b->held || !b->draining || !b->mapped || !decays(p, b->seg))
            return xsa_check_fail(err, errlen, "decay range %#lx: not a held draining block of a decaying segment",
                                  (unsigned long)b->ptr);
        if (d->ranges[i].fence > d->recorded + 1)
            return xsa_check_fail(err, errlen, "decay range %#lx waits for fence %llu, %llu recorded",
                                  (unsigned long)b->ptr, (unsigned long long)d->ranges[i].fence,
                                  (unsigned long long)d->recorded);
        for (size_t j = i + 1; j < d->n_ranges; j++)
            if (d->ranges[j].block == b) return xsa_check_fail(err, errlen, "decay range %#lx twice", (unsigned long)b->ptr);
    }
    return 1;
}
