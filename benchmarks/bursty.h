/*
 * bursty: a training job with evaluation bursts, as an allocation trace
 * (design in bursty.c), with where each burst ends: decay purging's
 * workload (benchmarks/decay.c, tests/trace/decay_replay_test.c).
 */
#ifndef XSA_BENCHMARKS_BURSTY_H
#define XSA_BENCHMARKS_BURSTY_H

#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h"

typedef struct xsa_bursty_shape {
    unsigned steps;        /* training steps */
    unsigned burst_every;  /* an evaluation after every this many steps */
    unsigned layers;
    unsigned tensors;      /* activations a layer keeps for its backward pass */
    uint64_t params_bytes; /* weights, gradients, optimizer state: allocated first, kept */
    uint64_t act_bytes;    /* a step's activations at its longest batch; an evaluation keeps twice that */
    uint64_t seed;
    /* Trace time the program waits for the GPU at the end of every step
     * and of every evaluation's forward pass (its synchronize, a 'w'
     * line); 0: none. */
    uint64_t sync_ns;
} xsa_bursty_shape;

/* The benchmark's shape: 40 steps of a GPT-2-sized job (24 layers, 2 GB
 * of parameters and optimizer state, up to 8 GB of activations a step, a
 * step about 2,100 trace events), an evaluation after every 5th but the
 * last. */
void xsa_bursty_default(xsa_bursty_shape *shape);

typedef struct xsa_bursty {
    xsa_trace trace;
    size_t *burst_end;     /* [n_bursts]: the event count just after each evaluation's last free */
    size_t *next_burst;    /* [n_bursts]: the event count where the next evaluation begins (or the end) */
    size_t n_bursts;
} xsa_bursty;

/* Makes the trace; 0, or -1 with a sentence in err. */
int xsa_bursty_make(const xsa_bursty_shape *shape, xsa_bursty *out, char *err, size_t errlen);
/* A recorded trace as a bursty workload (benchmarks/gpu/bursty.py
 * --record): a burst is each stretch where live memory rises above
 * `above` bytes, from where live memory last sat near its lowest before
 * (the end of the step before it: its ramp belongs to the burst) to where
 * it is near that low again (the burst's last frees). 0, or -1 with a
 * sentence in err (no burst is an error). */
int xsa_bursty_load(const char *path, uint64_t above, xsa_bursty *out, char *err, size_t errlen);
void xsa_bursty_free(xsa_bursty *b);

/* How long after each burst reserved memory took to come within 5% of
 * the live memory that followed, in ns of trace time at event_ns an event
 * and the trace's waits: allocated[e] and reserved[e] are the bytes after e
 * events and the wait after the e-th (e = 0..trace.n_events); settle[i]
 * gets the time from burst i's end to the first e at which reserved is at
 * most 1.05 times the highest allocated bytes until the next burst (-1:
 * never). */
void xsa_bursty_settle(const xsa_bursty *b, uint64_t event_ns, const int64_t *allocated, const int64_t *reserved,
                       int64_t *settle);
/* The trace time event e (1-based, e = 1..trace.n_events) takes at
 * event_ns an event, the trace's wait after it included. */
static inline uint64_t xsa_bursty_event_time(const xsa_bursty *b, uint64_t event_ns, size_t e) {
    return event_ns + (b->trace.wait_ns ? b->trace.wait_ns[e - 1] : 0);
}
/* Where reserved memory settled: the highest, over the bursts, of
 * reserved memory just before the next burst (or the trace's end) over
 * the highest allocated bytes since the burst's end. */
double xsa_bursty_settled(const xsa_bursty *b, const int64_t *allocated, const int64_t *reserved);

#endif
