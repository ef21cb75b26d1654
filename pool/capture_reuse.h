/*
 * pool/capture_reuse: the hooks of capture-time reuse
 * (graph_capture_record_stream_reuse; the rule and its design are at the
 * top of capture_reuse.c): the switch the API turns, then the hooks.
 * pool.c calls the first two hooks on its capture paths, capture.c the
 * third when no capture is left, check.c the last.
 */
#ifndef XSA_POOL_CAPTURE_REUSE_H
#define XSA_POOL_CAPTURE_REUSE_H

#include <stdint.h>

#include "pool/state.h"

/* graph_capture_record_stream_reuse at run time: on, a block freed during
 * a capture with uses on other streams may return to the cache before the
 * capture ends, once the captured graph orders those uses before the next
 * work on the block's stream. Off, such frees wait for the capture's end;
 * blocks already waiting keep waiting. */
void xsa_pool_set_capture_reuse(xsa_pool *p, bool on);

/* A malloc on `stream` while a capture is under way on the device: the
 * stream's marked blocks that its captured work now follows return to the
 * cache. Returns the id of the capture the stream is in, for the block
 * the malloc hands out (0: none, or the option is off). */
uint64_t xsa_capture_reuse_malloc(xsa_pool *p, xsa_stream stream);

/* Block b, freed during a capture with uses on other streams, has just
 * been deferred to the capture's end: with the option on, its free
 * markers are recorded, if it qualifies (capture_reuse.c). Never fails: a
 * block without markers waits for the capture's end. */
void xsa_capture_reuse_free(xsa_pool *p, xsa_block *b);

/* No capture is left, or the pool goes: every marker and walk is
 * forgotten (the blocks stay deferred; capture.c flushes them). */
void xsa_capture_reuse_forget(xsa_pool *p);

/* Invariant checker of the markers and walks; 1, or 0 with err. */
int xsa_capture_reuse_check(const xsa_pool *p, char *err, size_t errlen);

#endif
