/* pool/stats: reading and resetting the stats (updates are inline in state.h). */
#include "pool/stats.h"

#include <string.h>

#include "pool/state.h"

#define N_ARRAYS 9

/* The per-type stat arrays, in one list for the loops below. */
static void arrays_of(xsa_device_stats *s, xsa_stat *arrays[N_ARRAYS]) {
    xsa_stat *all[N_ARRAYS] = {s->allocation,   s->segment,         s->active,
                               s->inactive_split, s->allocated_bytes, s->reserved_bytes,
                               s->active_bytes, s->inactive_split_bytes, s->requested_bytes};
    memcpy(arrays, all, sizeof all);
}

void xsa_pool_get_stats(const xsa_pool *p, xsa_device_stats *out) {
    *out = p->stats;
    /* XSA_STAT_ALL's allocated and freed are not kept (state.h). */
    xsa_stat *arrays[N_ARRAYS];
    arrays_of(out, arrays);
    for (int a = 0; a < N_ARRAYS; a++) {
        xsa_stat *t = arrays[a];
        t[XSA_STAT_ALL].allocated = t[XSA_STAT_SMALL_POOL].allocated + t[XSA_STAT_LARGE_POOL].allocated;
        t[XSA_STAT_ALL].freed = t[XSA_STAT_SMALL_POOL].freed + t[XSA_STAT_LARGE_POOL].freed;
    }
    out->max_split_size = p->opt.max_split_size == SIZE_MAX ? -1 : (int64_t)p->opt.max_split_size;
    /* The part of the peak decay's ticks took out of the stat (state.h). */
    xsa_stat *all = &out->allocated_bytes[XSA_STAT_ALL];
    if (p->peak_held > all->peak) all->peak = p->peak_held;
}

static void each_stat(xsa_device_stats *s, void (*fn)(xsa_stat *)) {
    xsa_stat *arrays[N_ARRAYS];
    arrays_of(s, arrays);
    for (int a = 0; a < N_ARRAYS; a++)
        for (int t = 0; t < XSA_STAT_TYPES; t++) fn(&arrays[a][t]);
    fn(&s->oversize_allocations);
    fn(&s->oversize_segments);
    fn(&s->paused_bytes);
}

static void reset_peak(xsa_stat *s) { s->peak = s->current; }
static void reset_accumulated(xsa_stat *s) { s->allocated = s->freed = 0; }

void xsa_pool_reset_peak_stats(xsa_pool *p) {
    p->allocated_high = xsa_pool_allocated_high(p);
    p->reserved_high = xsa_pool_reserved_high(p);
    /* Decay's next tick still sees the peak since its last one. */
    int64_t peak = p->stats.allocated_bytes[XSA_STAT_ALL].peak;
    if (peak > p->interval_peak_held) p->interval_peak_held = peak;
    p->peak_held = 0;
    each_stat(&p->stats, reset_peak);
}

int64_t xsa_pool_allocated_high(const xsa_pool *p) {
    int64_t peak = p->stats.allocated_bytes[XSA_STAT_ALL].peak;
    if (p->peak_held > peak) peak = p->peak_held;
    return peak > p->allocated_high ? peak : p->allocated_high;
}

int64_t xsa_pool_reserved_high(const xsa_pool *p) {
    int64_t peak = p->stats.reserved_bytes[XSA_STAT_ALL].peak;
    return peak > p->reserved_high ? peak : p->reserved_high;
}

int64_t xsa_pool_interval_peak(const xsa_pool *p) {
    int64_t peak = p->stats.allocated_bytes[XSA_STAT_ALL].peak;
    return peak > p->interval_peak_held ? peak : p->interval_peak_held;
}

int64_t xsa_pool_take_interval_peak(xsa_pool *p) {
    xsa_stat *all = &p->stats.allocated_bytes[XSA_STAT_ALL];
    int64_t interval = xsa_pool_interval_peak(p);
    if (all->peak > p->peak_held) p->peak_held = all->peak;
    all->peak = all->current;
    p->interval_peak_held = 0;
    return interval;
}

void xsa_pool_reset_accumulated_stats(xsa_pool *p) {
    each_stat(&p->stats, reset_accumulated);
    p->stats.num_alloc_retries = 0;
    p->stats.num_ooms = 0;
    p->stats.num_sync_all_streams = 0;
    p->stats.num_device_alloc = 0;
    p->stats.num_device_free = 0;
    p->stats.num_pages_mapped = 0;
    p->stats.num_pages_unmapped = 0;
    p->stats.num_pages_recycled = 0;
}
