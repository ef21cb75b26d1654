/*
 * pool/recycle: page recycling (design in recycle.c).
 */
#ifndef XSA_POOL_RECYCLE_H
#define XSA_POOL_RECYCLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* How many of the `pages` new pages a growth for a request of
 * `size` bytes should take from recycling (the page_recycling_headroom rule). */
size_t xsa_recycle_pages_wanted(const xsa_pool *p, size_t size, size_t pages);
/* A new chunk holds at most 1/XSA_HEADROOM_PER_CHUNK of the headroom. */
#define XSA_HEADROOM_PER_CHUNK 8.0
/* The most pages of any chunk the pool creates (expandable_handle_mb),
 * and the pages of each new chunk of a growth for a request of `size`
 * bytes (the handle-size rule, design in recycle.c). */
size_t xsa_recycle_max_chunk_pages(const xsa_pool *p);
size_t xsa_recycle_new_chunk_pages(const xsa_pool *p, size_t size);
/* Moves whole free chunks of the pool's expandable segments (never from
 * `keep1`/`keep2`, the free blocks around the growth point) to segment
 * `target` while fewer than `pages` pages are taken, and at most `limit`
 * pages (a chunk that would pass it is left): the chunks go to
 * chunks[0..*n_chunks) (room for `limit`) for target to map, their old
 * addresses drain. Returns how many pages. */
size_t xsa_recycle_take(xsa_pool *p, const xsa_seg *target, const xsa_block *keep1, const xsa_block *keep2,
                        size_t pages, size_t limit, xsa_chunk *chunks, size_t *n_chunks);
/* A miss of `size` bytes (block size) on `stream` that would move pages:
 * hands over the stream's blocks freed with record_stream (their stream
 * waits for the other streams' work on the GPU) that, with the free
 * blocks between and around them, make the smallest free block that holds
 * the request with less than a page left. True if one was handed over
 * whole: the free set has it. */
bool xsa_recycle_hand_over_fit(xsa_pool *p, xsa_pool_kind kind, xsa_stream stream, size_t size);
/* Undoes the takes since the drain list's head was `mark` (the growth that
 * took them failed): the pages are free blocks of their segments again. */
void xsa_recycle_undo(xsa_pool *p, const xsa_drain *mark);
/* Unmaps the old addresses whose queued work has completed; with wait,
 * waits for all of them first. Returns the first driver error (the drain
 * stays, to be tried again). Drains a helper job holds are left to it. */
xsa_cu_result xsa_recycle_drain(xsa_pool *p, bool wait);
/* For the helper thread (pool/jobs.c), never during a capture: holds up
 * to `max` drains whose work has completed into out[] (their unmaps are
 * its jobs now), and how many; a query's failure (other than not ready)
 * goes to *failure if that is still success. */
size_t xsa_recycle_hold_done(xsa_pool *p, xsa_drain **out, size_t max, xsa_cu_result *failure);
/* A held drain's job is over: its old address was unmapped (the drain
 * stays held, as it is in the pool's records, until the next
 * xsa_recycle_drain takes it back where it would have unmapped it without
 * the helper: the pool's choices are the same with the helper and
 * without), or not (it drains again). */
void xsa_recycle_retired(xsa_drain *d, bool was_unmapped);
/* Pool teardown: unmaps every old address without waiting. */
void xsa_recycle_destroy(xsa_pool *p);

#endif
