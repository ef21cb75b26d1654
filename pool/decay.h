/*
 * pool/decay: decay purging, free pages unused for page_decay_ms released
 * by the helper thread (design in decay.c).
 */
#ifndef XSA_POOL_DECAY_H
#define XSA_POOL_DECAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* The time (ns of the helper's clock) decay wants its next round at:
 * its next tick, or sooner to poll the fence of ranges waiting to go;
 * UINT64_MAX when decay is off. */
uint64_t xsa_decay_due(const xsa_pool *p);
/* One round at `now`, with the device's lock held: a tick when one is
 * due (page ages, the window of peaks; new ranges held to go, with a
 * fence), then the ranges whose fence has completed into out[] (up to
 * max; draining blocks a helper job holds, for it to unmap and release)
 * and how many. A driver call of its own that failed goes to *failure
 * if that is still success (not ready is no failure). Nothing during a
 * capture but the page ages. */
size_t xsa_decay_round(xsa_pool *p, uint64_t now, xsa_block **out, size_t max, xsa_cu_result *failure);
/* A range's job is over: unmapped (its handles released, or kept by the
 * segment when the driver refused), or not (free again). */
void xsa_decay_released(xsa_pool *p, xsa_block *b, bool was_unmapped);
/* For PACKING_TICKS ticks after decay repacked (pool/decay.c): the
 * highest allocated bytes of its window and of the interval since its
 * last tick, which recycling's headroom bound follows then instead of
 * the highest ever. -1 otherwise (decay off included). */
int64_t xsa_decay_packing_high(const xsa_pool *p);
/* A slot for a readying (pool/ready.c) to give its pages back through
 * at its end, kept from when it is planned so that giving back never
 * needs host memory; false if that cannot be had (host memory: no
 * readying then). Each kept slot is used by xsa_decay_give_back or
 * dropped. */
bool xsa_decay_keep_slot(xsa_pool *p);
void xsa_decay_drop_slot(xsa_pool *p);
/* Pages the helper readied that are not wanted after all (the cache was
 * emptied, a growth overtook them, the memory fraction was lowered):
 * mapped block b (no work ever ran on it) is kept out of the cache, and
 * the next round hands it to a job to unmap and release, as a range whose
 * fence has passed. Uses the readying's kept slot. */
void xsa_decay_give_back(xsa_pool *p, xsa_block *b);
/* Releasing the cache (pool/release.c), after every segment stream was
 * synchronized: the ranges still waiting for their fence are unmapped
 * and released now. The first driver error (those ranges are free again). */
xsa_cu_result xsa_decay_release_waiting(xsa_pool *p);
/* Teardown: the fence's events go back to the spares, the state is freed. */
void xsa_decay_destroy(xsa_pool *p);
/* Invariant checker: every draining block a helper job holds without a
 * drain record is one of decay's ranges, and each range is such a block;
 * the repack bookkeeping is consistent (above or within its bound, not
 * both; no repack after the last tick). Counts the ranges into *ranges. */
int xsa_decay_check(const xsa_pool *p, size_t *ranges, char *err, size_t errlen);

#endif
