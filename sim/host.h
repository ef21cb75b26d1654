/*
 * sim/host: pinned host memory on the simulated driver: the entry points
 * the table calls with the lock held (xsa_driver's fields say what they
 * do), and what the copies, the usage counters and the checker need.
 */
#ifndef XSA_SIM_HOST_H
#define XSA_SIM_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/state.h"

xsa_cu_result xsa_sim_host_alloc(void **host, size_t size);
xsa_cu_result xsa_sim_host_free(void *host);
xsa_cu_result xsa_sim_host_register(void *host, size_t size);
xsa_cu_result xsa_sim_host_unregister(void *host);

/* Whether all of [p, p+n) lies in one allocation or one registration. */
bool xsa_sim_host_pinned(const void *p, size_t n);
/* Whether any allocation or registration is live (configuration). */
bool xsa_sim_host_live(void);
void xsa_sim_host_usage(xsa_sim_usage *u);
/* Both tables sorted, disjoint, allocations page-aligned, counters agree. */
int xsa_sim_host_check(char *err, size_t errlen);

#endif
