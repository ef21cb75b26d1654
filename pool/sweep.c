/*
 * pool/sweep: the fence that lets page recycling unmap an old address.
 *
 * A moved page's old address stays mapped until no kernel can use it.
 * The event recorded on the old segment's stream (recycle.c's fence)
 * orders the new owner after that stream's work, but a kernel on another
 * stream may still read the freed block: a block of stream A used on
 * stream B without record_stream and freed while B's kernel runs is legal
 * under PyTorch's rule as long as the memory is reused on A only (PyTorch's
 * test_cublas_multiple_threads_same_device does this), and cuMemUnmap under
 * that kernel is an illegal address that poisons the context (H100). So a
 * growth that moves pages also records a sweep: one event on every stream
 * that owns a segment of the device (the streams that allocate, which in
 * PyTorch programs are the streams that run kernels), and an old address
 * is unmapped only once its sweep has completed. A stream that never
 * allocates and uses a freed block without record_stream is not covered
 * (PyTorch's own expandable segments unmap after synchronizing the
 * segment's stream alone). Never recorded during a capture: recycling
 * does not run then. Releasing cached memory (empty_cache, the
 * out-of-memory fallback) waits for the same streams on the CPU first, as
 * PyTorch's cudaFree waits for the device.
 */
#include "pool/sweep.h"

#include <stdlib.h>

#include "pool/events.h"
#include "pool/state.h"

static size_t count_segments(const xsa_pool *p) {
    size_t n = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) n++;
    return n;
}

/* The distinct streams of p's segments into out (room for one a segment). */
static size_t segment_streams(const xsa_pool *p, xsa_stream *out) {
    size_t n = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        size_t i = 0;
        while (i < n && out[i] != s->stream) i++;
        if (i == n) out[n++] = s->stream;
    }
    return n;
}

static void put_events(xsa_pool *p, xsa_sweep *w, size_t n) {
    for (size_t i = 0; i < n; i++) xsa_events_put_event(&p->events, w->events[i]);
}

xsa_sweep *xsa_sweep_record(xsa_pool *p, xsa_cu_result *why) {
    xsa_cu_result r = XSA_CU_ERROR_OUT_OF_MEMORY;
    size_t max = count_segments(p);
    xsa_sweep *w = calloc(1, sizeof *w);
    xsa_stream *streams = malloc((max ? max : 1) * sizeof *streams);
    if (w) w->events = malloc((max ? max : 1) * sizeof *w->events);
    if (!w || !streams || !w->events) goto fail;
    size_t n = segment_streams(p, streams);
    for (; w->n_events < n; w->n_events++) {
        xsa_event *ev = &w->events[w->n_events];
        if ((r = xsa_events_take_event(&p->events, ev)) != XSA_CU_SUCCESS) goto fail;
        if ((r = XSA_DRV(p->drv, event_record, *ev, streams[w->n_events])) != XSA_CU_SUCCESS) {
            xsa_events_put_event(&p->events, *ev);
            goto fail;
        }
    }
    w->pending = w->n_events;
    free(streams);
    return w;
fail:
    if (why) *why = r;
    if (w) {
        if (w->events) put_events(p, w, w->n_events);
        free(w->events);
    }
    free(w);
    free(streams);
    return NULL;
}

xsa_cu_result xsa_sweep_wait(xsa_pool *p, xsa_sweep *w, bool wait) {
    /* events[0, pending) have not been seen complete; a completed one
     * swaps to the end. */
    while (w->pending > 0) {
        xsa_event ev = w->events[w->pending - 1];
        xsa_cu_result r = wait ? XSA_DRV(p->drv, event_synchronize, ev) : XSA_DRV(p->drv, event_query, ev);
        if (r != XSA_CU_SUCCESS) return r;
        w->pending--;
    }
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sweep_synchronize(xsa_pool *p) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        const xsa_seg *t = p->segments;
        while (t != s && t->stream != s->stream) t = t->next_seg;
        if (t != s) continue; /* its stream was synchronized already */
        xsa_cu_result r = XSA_DRV(p->drv, stream_synchronize, s->stream);
        if (r != XSA_CU_SUCCESS) return r;
    }
    return XSA_CU_SUCCESS;
}

void xsa_sweep_drop(xsa_pool *p, xsa_sweep *w) {
    if (--w->drains > 0) return;
    put_events(p, w, w->n_events);
    free(w->events);
    free(w);
}
