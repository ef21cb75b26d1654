/*
 * pool/ready: pages readied ahead of a growing segment by the helper
 * thread (design in ready.c).
 */
#ifndef XSA_POOL_READY_H
#define XSA_POOL_READY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* For the helper thread, with the device's lock held: the unmapped ranges
 * where the last growths ended that it should map now, up to max, into
 * out[] (unmapped blocks a helper job holds), with the pages of each new
 * chunk in chunk_pages[]; how many. */
size_t xsa_ready_hold(xsa_pool *p, xsa_block **out, size_t *chunk_pages, size_t max);
/* A range's job is over: mapped (free memory of its segment now, merged
 * with the free blocks around it; back to the driver instead if the
 * cache was emptied while it ran, or the pages would now raise the peak
 * or pass the memory fraction), or not (unmapped space again). */
void xsa_ready_done(xsa_pool *p, xsa_block *b, bool was_mapped, bool emptied);
/* The cache is being given back (empty_cache, an out-of-memory's last
 * resort): the readying the last growths asked for is dropped,
 * and jobs under way give their pages back when they end. */
void xsa_ready_forget(xsa_pool *p);

#endif
