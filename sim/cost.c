/*
 * sim/cost: what the simulated driver's calls would cost the CPU on an
 * H100 (xsa_sim_h100_est_ns, xsalloc/sim.h), so that a policy's driver time shows
 * on the simulated driver too.
 *
 * Design: the real driver's cost goes by physical handle, not by byte: a
 * cuMemSetAccess or cuMemUnmap pays for every handle mapping in its range
 * (a grant over ten one-page handles costs ten times one over a single
 * ten-page handle, and one unmap over ten mappings as much as ten unmaps),
 * while cuMemCreate and cuMemMap pay by call (a map is always of a whole
 * handle: the driver refuses a part, mappings.c). So the model is a cost
 * a call for each entry point measured, plus, for cuMemSetAccess and
 * cuMemUnmap, a cost a mapping found on the range's pages (runs of one map
 * id). A call pays its cost a call whatever it returns (a query answering
 * NOT_READY costs as one answering SUCCESS), an injected fault pays
 * nothing (it has no effect), and only a call that succeeds pays by
 * mapping. Entry points not measured (reservations, cuMemAlloc/cuMemFree,
 * synchronizations, event creation, capture, copy streams, pinned host
 * memory, copies) add nothing: tests/gpu/probes/host_copy_probe.c prints
 * what the last three cost on a GPU, for when a cost is grounded there. The
 * sum is kept in whole nanoseconds: exact, since every constant is.
 */
#include "sim/cost.h"

/* CPU nanoseconds on an H100 (driver 580) while kernels are queued, as in
 * training (the driver is 4-7x slower then than on an idle GPU): measured
 * with tests/gpu/probes/vmm_handle_cost_probe.py and tests/gpu/probes/vmm_stall_probe.py. */
#define CREATE_NS 15000u    /* cuMemCreate, a call, whatever the size */
#define MAP_NS 2000u        /* cuMemMap, a call */
#define GRANT_NS 34000u     /* cuMemSetAccess, a mapping in the range */
#define REGRANT_NS 500u     /* cuMemSetAccess, a mapping already accessible to the devices granted */
#define UNMAP_NS 25000u     /* cuMemUnmap, a mapping in the range */
#define SMALL_NS 1000u      /* cuMemRelease, event record, event query, stream wait: a call */

static const uint32_t per_call_ns[XSA_DRV_COUNT] = {
    [XSA_DRV_mem_create] = CREATE_NS,
    [XSA_DRV_mem_map] = MAP_NS,
    [XSA_DRV_mem_release] = SMALL_NS,
    [XSA_DRV_event_record] = SMALL_NS,
    [XSA_DRV_event_query] = SMALL_NS,
    [XSA_DRV_stream_wait_event] = SMALL_NS,
};

void xsa_sim_cost_call(xsa_driver_entry e) { S.h100_est_ns += per_call_ns[e]; }

/* The mappings on pages [first, first+n) of r; *accessible (if not NULL):
 * those whose pages there all grant every device of `mask` already. */
static size_t mappings(const sim_reservation *r, size_t first, size_t n, uint8_t mask, size_t *accessible) {
    size_t count = 0, granted = 0;
    for (size_t i = first; i < first + n;) {
        uint64_t id = r->pages[i].map_id;
        bool all = true;
        size_t end = i;
        for (; end < first + n && r->pages[end].map_id == id; end++) all &= (r->pages[end].access & mask) == mask;
        if (id) {
            count++;
            granted += all;
        }
        i = end;
    }
    if (accessible) *accessible = granted;
    return count;
}

void xsa_sim_cost_set_access(const sim_reservation *r, size_t first, size_t n, uint8_t mask) {
    size_t accessible, all = mappings(r, first, n, mask, &accessible);
    S.h100_est_ns += (uint64_t)(all - accessible) * GRANT_NS + (uint64_t)accessible * REGRANT_NS;
}

void xsa_sim_cost_unmap(const sim_reservation *r, size_t first, size_t n) {
    S.h100_est_ns += (uint64_t)mappings(r, first, n, 0, NULL) * UNMAP_NS;
}

uint64_t xsa_sim_h100_est_ns(void) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    uint64_t ns = S.h100_est_ns;
    pthread_mutex_unlock(&xsa_sim_lock);
    return ns;
}
