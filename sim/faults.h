/*
 * sim/faults: the guard every entry point of the simulated driver passes
 * (fault injection's controls are in xsalloc/sim.h).
 */
#ifndef XSA_SIM_FAULTS_H
#define XSA_SIM_FAULTS_H

#include "vmm/driver.h"

/* Takes the simulated driver's lock and counts a call of entry point e;
 * returns the injected error, if one is armed for this call (the lock is
 * held either way), else adds the call's H100 cost and returns success. */
xsa_cu_result xsa_sim_enter(xsa_driver_entry e);

#endif
