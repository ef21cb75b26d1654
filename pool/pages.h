/*
 * pool/pages: an expandable segment's pages as blocks.
 */
#ifndef XSA_POOL_PAGES_H
#define XSA_POOL_PAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* Unmaps the whole pages inside free block b, splitting it around them. */
xsa_pool_status xsa_pages_unmap_block(xsa_pool *p, xsa_block *b, char *err, size_t errlen);
/* Destroys an expandable segment with no mapped page. If the driver refuses
 * to free its reservation, the segment stays (empty) and false is returned:
 * the next release tries again. */
bool xsa_pages_destroy_segment(xsa_pool *p, xsa_seg *s);
/* The accounting of pages that segment s gained (sign +1) or lost (-1),
 * called after the change: `moved` between segments, `created` new or
 * released (device allocations and frees). */
void xsa_pages_account(xsa_pool *p, xsa_seg *s, size_t moved, size_t created, int sign);
/* Makes pages [lo, hi) of free block b a block of their own (b, out of the
 * free set); the rest of b stays free around it. Host OOM leaves b as it was. */
xsa_pool_status xsa_pages_isolate(xsa_pool *p, xsa_block *b, uintptr_t lo, uintptr_t hi, char *err, size_t errlen);
/* Puts b (mapped, not in use, out of the free set) back in the cache,
 * merged with free neighbours. */
void xsa_pages_return_free(xsa_pool *p, xsa_block *b);
/* The largest range of pages [*first, *end) of whole chunks inside free
 * block b; false if there is none. */
bool xsa_pages_whole_chunks(const xsa_pool *p, const xsa_block *b, size_t *first, size_t *end);
/* Merges unmapped block u with unmapped neighbours. */
void xsa_pages_merge_unmapped(xsa_pool *p, xsa_block *u);

/* Free block b of a paused segment (pool/pause.c): its whole pages (none
 * is mapped now) are forgotten, so that no resume maps them again; they
 * leave paused_bytes. No driver call. False if b has no whole page or
 * host memory for the records ran out (b stays as it was). */
bool xsa_pages_forget_free(xsa_pool *p, xsa_block *b);
/* Does expandable segment s hold memory: pages mapped, or pages a resume
 * will map (a paused segment's mapped blocks)? */
bool xsa_pages_segment_holds(const xsa_seg *s);

#endif
