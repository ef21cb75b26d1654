/*
 * pool/trace: the pool's observation points, for the trace ring and the
 * memory hooks of api/ (pool -> api only through this callback).
 *
 * Design: a pool has at most one observer, a function called synchronously
 * (under the caller's device lock) at each point (its kinds: pool/types.h). The points are
 * one-line XSA_OBSERVE calls; with no observer each costs one predictable
 * branch on a pointer in the pool, and the event is built out of line.
 */
#ifndef XSA_POOL_TRACE_H
#define XSA_POOL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"

/* Builds the event and calls the pool's observer (called by XSA_OBSERVE). */
void xsa_observe_emit(xsa_pool *p, xsa_obs_kind kind, int pool, uintptr_t addr, size_t size,
                      size_t block_size, xsa_stream stream);

#define XSA_OBSERVE(p, ...)                                                     \
    do {                                                                        \
        if (__builtin_expect((p)->observer != NULL, 0)) xsa_observe_emit((p), __VA_ARGS__); \
    } while (0)

/* Sets the observer called at every point above (fn NULL: none). */
void xsa_pool_set_observer(xsa_pool *p, xsa_observer_fn fn, void *ctx);

#endif
