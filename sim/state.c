/*
 * sim/state: the simulated driver's one state, its lock, a configuration
 * applied to it (the default one on first use), and the lookups of
 * reservations and cuMemAlloc allocations that the memory calls and the
 * timeline share (design in state.h).
 */
#include "sim/state.h"

#include <string.h>
#include <unistd.h>

bool xsa_sim_grow(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need) cap2 *= 2;
    void *nv = realloc(*v, cap2 * elem);
    if (!nv) return false;
    *v = nv;
    *cap = cap2;
    return true;
}

sim_state xsa_sim_state;
pthread_mutex_t xsa_sim_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- configuration --------------------------------------------------- */

void xsa_sim_default_config(xsa_sim_config *c) {
    memset(c, 0, sizeof *c);
    c->devices = 1;
    c->capacity = (size_t)80 << 30;
    c->granularity = (size_t)2 << 20;
    c->vmm_supported = 1;
    c->fd_handles_supported = 1;
    memset(c->peer, 1, sizeof c->peer);
}

/* Forgets the device files (nothing lives in them). */
static void reset_devices(void) {
    for (int d = 0; d < XSA_SIM_MAX_DEVICES; d++) {
        sim_device *dv = &S.dev[d];
        /* Before the first configuration the fds are zero-initialized, not open. */
        if (dv->fd >= 0 && S.configured) close(dv->fd);
        for (size_t i = 0; i < dv->free_ranges.n; i++) ARRAY_FREE(dv->free_ranges.v[i].offsets);
        ARRAY_FREE(dv->free_ranges);
        memset(dv, 0, sizeof *dv);
        dv->fd = -1;
    }
}

/* A new configuration: no stream, clock 0, the configured mode, no violation. */
static void reset_timeline(void) {
    for (size_t i = 0; i < S.streams.n; i++) {
        ARRAY_FREE(S.streams.v[i].ops);
        ARRAY_FREE(S.streams.v[i].clock);
    }
    S.streams.n = 0;
    S.now = 0;
    S.lag = S.cfg.eager_events ? 0 : -1;
    memset(&S.violations, 0, sizeof S.violations);
}

void xsa_sim_apply_config(const xsa_sim_config *c) {
    reset_devices();
    S.cfg = *c;
    reset_timeline(); /* reads cfg.eager_events */
    S.n_faults = 0;
    memset(S.entry_calls, 0, sizeof S.entry_calls);
    S.h100_est_ns = 0;
    S.configured = true;
}

void xsa_sim_ensure_configured(void) {
    if (S.configured) return;
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    xsa_sim_apply_config(&c);
}

/* ---- lookups ----------------------------------------------------------- */

sim_reservation *xsa_sim_resv_holding(uintptr_t p, size_t size) {
    size_t i;
    FIND_BELOW(S.resv, p, i);
    if (i == S.resv.n) return NULL;
    sim_reservation *r = &S.resv.v[i];
    return p - r->base < r->size && size <= r->size - (p - r->base) ? r : NULL;
}

sim_alloc *xsa_sim_alloc_holding(uintptr_t p, size_t size) {
    size_t i;
    FIND_BELOW(S.allocs, p, i);
    if (i == S.allocs.n) return NULL;
    sim_alloc *a = &S.allocs.v[i];
    return p - a->base < a->size && size <= a->size - (p - a->base) ? a : NULL;
}
