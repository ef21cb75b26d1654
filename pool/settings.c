/*
 * pool/settings: the pool's options changed at run time
 * (xsa_set_allocator_settings, torch.cuda.memory._set_allocator_settings).
 *
 * Design: as in PyTorch, where the allocator reads its settings at each
 * use, the pool reads p->opt at every request (rounding, splitting, the
 * oversize rules, garbage collection, page recycling), so a new value
 * applies from the next request on; nothing already allocated moves.
 * Turning expandable segments on or off changes where new memory goes:
 * segments of both kinds live side by side, each released by its own
 * rules. Two things need work here: whether the device can map virtual
 * memory (asked once, the first time expandable segments are wanted), and
 * the oversize counts, which depend on max_split_size: they are recounted,
 * so that the stats keep saying how many blocks and segments are oversize
 * now (PyTorch's drift when the limit changes is not copied).
 */
#include "pool/settings.h"

#include <stdio.h>

#include "pool/core.h"
#include "pool/state.h"

/* Sets the stat's current value to n (peak follows), leaving its
 * allocated and freed totals alone: a new limit is no allocation. */
static void set_current(xsa_stat *s, int64_t n) {
    s->current = n;
    if (n > s->peak) s->peak = n;
}

static void recount_oversize(xsa_pool *p) {
    int64_t blocks = 0, segments = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (!s->expandable && s->size >= p->opt.max_split_size) segments++;
        for (const xsa_block *b = s->first; b; b = b->next)
            if (b->allocated && b->size >= p->opt.max_split_size) blocks++;
    }
    set_current(&p->stats.oversize_allocations, blocks);
    set_current(&p->stats.oversize_segments, segments);
}

xsa_pool_status xsa_pool_probe_vmm(xsa_pool *p, char *err, size_t errlen) {
    if (p->vmm >= 0) return XSA_POOL_OK;
    int vmm = 0;
    xsa_cu_result r = XSA_DRV(p->drv, device_get_attribute, &vmm, XSA_ATTR_VMM_SUPPORTED, p->device);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    p->vmm = (int8_t)(vmm != 0);
    return XSA_POOL_OK;
}

const char *xsa_pool_set_options(xsa_pool *p, const xsa_pool_options *opt) {
    bool split_changed = opt->max_split_size != p->opt.max_split_size;
    double fraction = p->opt.memory_fraction;
    p->opt = *opt;
    p->opt.memory_fraction = fraction;
    p->expandable = opt->expandable_segments && p->vmm > 0;
    if (split_changed) recount_oversize(p);
    if (opt->expandable_segments && !p->expandable)
        return "this device does not support virtual memory management: expandable_segments:True keeps classic "
               "segments";
    return NULL;
}
