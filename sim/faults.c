/*
 * sim/faults: fault injection (xsa_sim_fail_call, xsalloc/sim.h) and the guard
 * every entry point of the table passes first.
 *
 * Design: the guard takes the one lock, applies the default configuration
 * on first use and counts the call per entry point; an armed fault whose
 * count is reached is returned before the call does anything, so an
 * injected fault has no effect (and costs nothing in the H100 estimate).
 */
#include "sim/faults.h"

#include "sim/cost.h"
#include "sim/state.h"

void xsa_sim_fail_call(xsa_driver_entry entry, uint64_t nth, xsa_cu_result error) {
    if ((unsigned)entry >= XSA_DRV_COUNT || nth == 0) return;
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    if (S.n_faults < SIM_MAX_FAULTS)
        S.faults[S.n_faults++] = (sim_fault){entry, S.entry_calls[entry] + nth, error};
    pthread_mutex_unlock(&xsa_sim_lock);
}

void xsa_sim_clear_faults(void) {
    pthread_mutex_lock(&xsa_sim_lock);
    S.n_faults = 0;
    pthread_mutex_unlock(&xsa_sim_lock);
}

xsa_cu_result xsa_sim_enter(xsa_driver_entry e) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    uint64_t n = ++S.entry_calls[e];
    for (int i = 0; i < S.n_faults; i++) {
        if (S.faults[i].entry != e || S.faults[i].at != n) continue;
        xsa_cu_result err = S.faults[i].error;
        S.faults[i] = S.faults[--S.n_faults];
        return err;
    }
    xsa_sim_cost_call(e);
    return XSA_CU_SUCCESS;
}
