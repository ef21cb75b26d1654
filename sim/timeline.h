/*
 * sim/timeline: the simulated GPU's timeline as the simulator's other
 * files use it (design in timeline.c).
 */
#ifndef XSA_SIM_TIMELINE_H
#define XSA_SIM_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/state.h"

/* The stream and event entry points (through capture.c) ... */
xsa_cu_result xsa_sim_tl_stream_create(xsa_stream *stream, int device);
xsa_cu_result xsa_sim_tl_stream_destroy(xsa_stream stream);
/* False for a stream stream_create made and stream_destroy destroyed (any
 * other value is a stream). */
bool xsa_sim_tl_stream_valid(xsa_stream stream);
xsa_cu_result xsa_sim_tl_stream_query(xsa_stream stream);
xsa_cu_result xsa_sim_tl_stream_synchronize(xsa_stream stream);
/* The CPU waits for every stream's last work. */
void xsa_sim_tl_synchronize_all(void);
xsa_cu_result xsa_sim_tl_event_create(xsa_event *event, int device);
xsa_cu_result xsa_sim_tl_event_record(xsa_event event, xsa_stream stream);
xsa_cu_result xsa_sim_tl_event_query(xsa_event event);
xsa_cu_result xsa_sim_tl_event_synchronize(xsa_event event);
xsa_cu_result xsa_sim_tl_event_destroy(xsa_event event);
xsa_cu_result xsa_sim_tl_stream_wait_event(xsa_stream stream, xsa_event event);
/* ... what memory calls tell it: pages [first, first+n) of r are about to
 * be unmapped (violations for kernels still using them; their uses go), a
 * cuMemAlloc allocation is about to be freed ... */
void xsa_sim_tl_unmapping(sim_reservation *r, size_t first, size_t n);
void xsa_sim_tl_freeing_alloc(sim_alloc *a);
/* ... kernels (xsa_sim_launch's work outside capture), events by value,
 * violations (the first one's sentence is kept) ... */
/* `what` names the work in a bad launch's sentence ("a kernel launched"). */
xsa_cu_result xsa_sim_tl_launch(xsa_stream stream, xsa_devptr ptr, size_t size, const char *what);
/* A copy: the kernel's checks and queueing over [dev, dev+n), then the
 * bytes move (to_host: from dev to host, else from host to dev). */
xsa_cu_result xsa_sim_tl_copy(bool to_host, void *host, xsa_devptr dev, size_t n, xsa_stream stream,
                              const char *what);
sim_event *xsa_sim_tl_event_lookup(xsa_event event);
__attribute__((format(printf, 2, 3))) void xsa_sim_tl_violation(uint64_t *count, const char *fmt, ...);
/* ... and what the checker and the usage counters read. */
bool xsa_sim_tl_event_pending(const sim_event *ev);
bool xsa_sim_tl_use_pending(const sim_use *u);
/* The op of stream st with sequence number seq, or NULL. */
const sim_op *xsa_sim_tl_find_op(const sim_stream *st, uint64_t seq);

#endif
