/*
 * sim/cost: the H100 estimate of the simulated driver's calls (the model
 * and its constants: cost.c).
 */
#ifndef XSA_SIM_COST_H
#define XSA_SIM_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/state.h"

/* A call made (not an injected fault) adds its entry point's cost a call;
 * a cuMemSetAccess about to grant `mask` on pages [first, first+n) of r,
 * and a cuMemUnmap about to unmap them, add their cost per mapping there
 * (called after every check passed, before the pages change). */
void xsa_sim_cost_call(xsa_driver_entry e);
void xsa_sim_cost_set_access(const sim_reservation *r, size_t first, size_t n, uint8_t mask);
void xsa_sim_cost_unmap(const sim_reservation *r, size_t first, size_t n);

#endif
