/*
 * pool/mempool: memory pool records and routing (they call only free
 * sets).
 */
#ifndef XSA_POOL_MEMPOOL_H
#define XSA_POOL_MEMPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* The memory pool of id, or NULL; the global one for {0, 0}. */
xsa_mempool *xsa_mempool_find(xsa_pool *p, xsa_mempool_id id);
/* A new memory pool record with use_count 1; NULL if out of host memory. */
xsa_mempool *xsa_mempool_new(xsa_pool *p, xsa_mempool_id id);
/* Unlinks and frees a memory pool that has no segment left; its own
 * allocator, if any, is told it is done (release(ctx)). */
void xsa_mempool_delete(xsa_pool *p, xsa_mempool *mp);
/* Does a block of mp's segments hold memory in use? (A scan: asked only
 * of released pools, so that the hot paths keep no count.) */
bool xsa_mempool_in_use(const xsa_pool *p, const xsa_mempool *mp);
/* The memory pool an allocation on `stream` goes to (routes are set). */
xsa_mempool *xsa_mempool_route(xsa_pool *p, xsa_stream stream);
/* The route to mp, or -1. */
int xsa_mempool_route_index(const xsa_pool *p, const xsa_mempool *mp);
/* Adds a route (false if out of host memory) / removes route i. */
bool xsa_mempool_add_route(xsa_pool *p, xsa_mempool *mp, xsa_stream_filter filter, void *ctx, bool capture);
void xsa_mempool_remove_route(xsa_pool *p, int i);
/* Released memory pool mp had a block freed during a capture: every pool
 * capturing now keeps mp's memory until it is released itself. False if
 * out of host memory (the holds taken so far stay). */
bool xsa_mempool_keep(xsa_pool *p, xsa_mempool *mp);
/* Pool mp was released: it keeps no other pool's memory any more. The
 * pools it kept are returned through release (may be NULL), one call each. */
void xsa_mempool_drop_kept(xsa_pool *p, xsa_mempool *mp, void (*release)(xsa_pool *p, xsa_mempool *kept));
/* Queues b (freed during capture, with uses on other streams) for its
 * events; false if out of host memory, b unchanged. */
bool xsa_mempool_defer(xsa_pool *p, xsa_block *b);
/* Frees every record (pool teardown; the segments are gone), telling
 * their own allocators as delete does. */
void xsa_mempool_destroy_all(xsa_pool *p);

static inline bool xsa_mempool_is_global(const xsa_pool *p, const xsa_mempool *mp) { return mp == &p->global; }
/* Do mp's segments come from an allocator of its own? */
static inline bool xsa_mempool_owns_allocator(const xsa_mempool *mp) { return mp->allocator.alloc != NULL; }
/* Released (use_count 0): no new use may route to it. */
static inline bool xsa_mempool_released(const xsa_mempool *mp) { return mp->use_count == 0; }
/* Released and kept by no pool in use: its free memory may go back to the device. */
static inline bool xsa_mempool_freeable(const xsa_mempool *mp) { return mp->use_count == 0 && mp->holds == 0; }

#endif
