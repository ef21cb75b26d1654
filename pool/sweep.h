/*
 * pool/sweep: events over every segment stream of a pool, which a moved
 * page's old address waits for (design in sweep.c).
 */
#ifndef XSA_POOL_SWEEP_H
#define XSA_POOL_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* A new sweep (drains 0) over the streams of p's segments, or
 * NULL (host memory or a driver call refused, *why says which when not
 * NULL: nothing recorded); whether
 * it has completed (XSA_CU_SUCCESS; with wait, waits for it first); one
 * drain less waiting on it (freed at none). */
xsa_sweep *xsa_sweep_record(xsa_pool *p, xsa_cu_result *why);
xsa_cu_result xsa_sweep_wait(xsa_pool *p, xsa_sweep *w, bool wait);
/* Waits for the work queued on every stream of p's segments. */
xsa_cu_result xsa_sweep_synchronize(xsa_pool *p);
void xsa_sweep_drop(xsa_pool *p, xsa_sweep *w);

#endif
