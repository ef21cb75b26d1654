/*
 * bursty: a training job with an evaluation burst every few steps, the
 * workload decay purging is for. After a burst, a job keeps the burst's
 * memory reserved (PyTorch's allocator until empty_cache): with decay on,
 * reserved memory comes back down to what the training steps use.
 *
 * Design: the trace is written as text and parsed by trace/trace.c, so it
 * is checked like any other. Parameters, gradients and optimizer state
 * are allocated first and kept. A step's forward pass allocates, layer by
 * layer, the activations it keeps for the backward pass and two
 * temporaries it frees at once; the backward pass frees each layer's
 * activations in reverse, with two temporaries per layer; the optimizer
 * step allocates and frees a few more. A step's batch is a seeded draw
 * between 80% and 100% of the longest, as varying sequence lengths do.
 * The evaluation after every burst_every-th step (but the last) runs the forward pass on
 * twice the batch and keeps every layer's output to the end (hidden states
 * for the metrics): twice the activations at its peak. One stream, no
 * record_stream. A seed gives the same trace everywhere (integer
 * arithmetic only). With sync_ns, the program waits that long for the
 * GPU after every step and after every evaluation's forward pass (the
 * GPU-bound loop of benchmarks/gpu/bursty.py: the host queues a step in a
 * fraction of its time, then synchronizes): a 'w' line.
 */
#include "benchmarks/bursty.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void xsa_bursty_default(xsa_bursty_shape *s) {
    *s = (xsa_bursty_shape){.steps = 40, .burst_every = 5, .layers = 24, .tensors = 40,
                            .params_bytes = 2000000000ull, .act_bytes = 8000000000ull, .seed = 1};
}

typedef struct writer {
    char *text;
    size_t len, cap;
    size_t events;
    uint32_t next_id;
    uint64_t rng;
    int failed;
} writer;

static void emit(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(writer *w, const char *fmt, ...) {
    if (w->failed) return;
    if (w->cap - w->len < 64) {
        size_t cap = w->cap ? 2 * w->cap : 1 << 20;
        char *grown = realloc(w->text, cap);
        if (!grown) {
            w->failed = 1;
            return;
        }
        w->text = grown;
        w->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    w->len += (size_t)vsnprintf(w->text + w->len, w->cap - w->len, fmt, ap);
    va_end(ap);
    w->events++;
}

static uint32_t alloc(writer *w, uint64_t bytes) {
    uint32_t id = w->next_id++;
    emit(w, "a %u %llu 0\n", id, (unsigned long long)(bytes ? bytes : 512));
    return id;
}

static void release(writer *w, uint32_t id) { emit(w, "f %u\n", id); }

static uint64_t next(writer *w) {
    uint64_t x = w->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* The program waits sync_ns for the GPU (a 'w' line: no event). */
static void synchronize(writer *w, const xsa_bursty_shape *s) {
    if (!s->sync_ns) return;
    emit(w, "w %llu\n", (unsigned long long)(s->sync_ns / 1000));
    w->events--;
}

/* An allocation and its free at once (a temporary). */
static void temporary(writer *w, uint64_t bytes) { release(w, alloc(w, bytes)); }

/* One step's forward pass over `tensor` bytes a tensor: the ids kept. */
static void forward(writer *w, const xsa_bursty_shape *s, uint64_t tensor, uint32_t *kept) {
    for (unsigned l = 0; l < s->layers; l++) {
        for (unsigned t = 0; t < s->tensors; t++) {
            kept[l * s->tensors + t] = alloc(w, tensor + (t % 4) * 4096); /* a few shapes a layer */
            if (t % 20 == 0) temporary(w, tensor * 2);
        }
    }
}

static void training_step(writer *w, const xsa_bursty_shape *s, uint32_t *kept) {
    uint64_t per = s->act_bytes / ((uint64_t)s->layers * s->tensors);
    uint64_t tensor = per * (80 + next(w) % 21) / 100 / 512 * 512; /* the batch: 80-100% of the longest */
    forward(w, s, tensor, kept);
    for (unsigned l = s->layers; l-- > 0;) {
        temporary(w, tensor * 2);
        for (unsigned t = s->tensors; t-- > 0;) release(w, kept[l * s->tensors + t]);
        temporary(w, tensor);
    }
    for (int i = 0; i < 4; i++) temporary(w, s->params_bytes / 16); /* the optimizer's temporaries */
    synchronize(w, s);
}

/* The evaluation: twice the batch, every layer's output kept to the end. */
static void evaluation(writer *w, const xsa_bursty_shape *s, uint32_t *kept) {
    uint64_t tensor = 2 * (s->act_bytes / ((uint64_t)s->layers * s->tensors)) / 512 * 512;
    forward(w, s, tensor, kept);
    synchronize(w, s);
    for (unsigned i = 0; i < s->layers * s->tensors; i++) release(w, kept[i]);
}

static int fail(char *err, size_t errlen, const char *what) {
    snprintf(err, errlen, "bursty: %s", what);
    return -1;
}

int xsa_bursty_make(const xsa_bursty_shape *s, xsa_bursty *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!s->steps || !s->burst_every || !s->layers || !s->tensors) return fail(err, errlen, "a zero in the shape");
    size_t bursts = s->steps / s->burst_every;
    writer w = {.rng = s->seed * 0x9E3779B97F4A7C15ull + 1};
    uint32_t *kept = malloc((size_t)s->layers * s->tensors * sizeof *kept);
    size_t *start = malloc((bursts + 1) * sizeof *start);
    out->burst_end = malloc((bursts + 1) * sizeof *out->burst_end);
    out->next_burst = malloc((bursts + 1) * sizeof *out->next_burst);
    if (!kept || !start || !out->burst_end || !out->next_burst) {
        free(kept), free(start);
        xsa_bursty_free(out);
        return fail(err, errlen, "out of host memory");
    }
    emit(&w, "# bursty: %u steps, an evaluation every %u\n", s->steps, s->burst_every);
    w.events = 0; /* the comment is no event */
    uint64_t param = s->params_bytes / (4ull * (s->layers + 2));
    for (unsigned i = 0; i < 4 * (s->layers + 2); i++) alloc(&w, param);
    for (unsigned step = 1; step <= s->steps; step++) {
        training_step(&w, s, kept);
        if (step % s->burst_every || step == s->steps) continue; /* steps follow every burst */
        start[out->n_bursts] = w.events;
        evaluation(&w, s, kept);
        out->burst_end[out->n_bursts++] = w.events;
    }
    for (size_t i = 0; i < out->n_bursts; i++) out->next_burst[i] = i + 1 < out->n_bursts ? start[i + 1] : w.events;
    free(kept);
    free(start);
    if (w.failed) {
        free(w.text);
        xsa_bursty_free(out);
        return fail(err, errlen, "out of host memory");
    }
    int rc = xsa_trace_parse("bursty", w.text, w.len, &out->trace, err, errlen);
    free(w.text);
    if (rc) xsa_bursty_free(out);
    return rc;
}

#define RECENT 50000 /* events: several steps of a recorded training run */

int xsa_bursty_load(const char *path, uint64_t above, xsa_bursty *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (xsa_trace_load(path, &out->trace, err, errlen)) return -1;
    const xsa_trace *t = &out->trace;
    uint64_t *bytes = calloc(t->n_ids ? t->n_ids : 1, sizeof *bytes), *live = malloc((t->n_events + 1) * sizeof *live);
    out->burst_end = malloc((t->n_events + 1) * sizeof *out->burst_end);
    out->next_burst = malloc((t->n_events + 1) * sizeof *out->next_burst);
    if (!bytes || !live || !out->burst_end || !out->next_burst) {
        free(bytes), free(live);
        xsa_bursty_free(out);
        return fail(err, errlen, "out of host memory");
    }
    live[0] = 0; /* live[e]: after e events */
    for (size_t e = 0; e < t->n_events; e++) {
        const xsa_trace_event *ev = &t->events[e];
        live[e + 1] = live[e];
        if (ev->kind == XSA_TRACE_ALLOC) live[e + 1] += bytes[ev->id] = ev->bytes;
        else if (ev->kind == XSA_TRACE_FREE) live[e + 1] -= bytes[ev->id];
    }
    /* A burst rises above `above`: it starts where live memory last sat
     * near its low of the RECENT events before (within a twentieth of the
     * way to `above`: its ramp is no step's) and ends where live memory is
     * back there (its last frees). */
    size_t from = 0, *start = out->next_burst;
    for (size_t e = 1; e <= t->n_events; e++) {
        if (live[e] <= above || live[e - 1] > above) continue;
        uint64_t low = UINT64_MAX;
        for (size_t i = e - from > RECENT ? e - RECENT : from; i < e; i++)
            if (live[i] < low) low = live[i];
        uint64_t near = low + (above - low) / 20;
        size_t s0 = e - 1;
        while (s0 > from && live[s0] > near) s0--;
        size_t end = e;
        while (end < t->n_events && live[end] > near) end++;
        if (live[end] > near) break; /* the trace ends inside the burst */
        start[out->n_bursts] = s0;
        out->burst_end[out->n_bursts++] = end;
        from = e = end;
    }
    for (size_t i = 0; i < out->n_bursts; i++) out->next_burst[i] = i + 1 < out->n_bursts ? start[i + 1] : t->n_events;
    free(bytes);
    free(live);
    if (out->n_bursts) return 0;
    snprintf(err, errlen, "bursty: %s: live memory is never above %.2f GB: no burst", path, above / 1e9);
    xsa_bursty_free(out);
    return -1;
}

void xsa_bursty_free(xsa_bursty *b) {
    xsa_trace_free(&b->trace);
    free(b->burst_end);
    free(b->next_burst);
    memset(b, 0, sizeof *b);
}

/* The highest allocated bytes from burst i's end to the next burst. */
static int64_t live_peak(const xsa_bursty *b, size_t i, const int64_t *allocated) {
    int64_t live = 0;
    for (size_t e = b->burst_end[i]; e <= b->next_burst[i]; e++)
        if (allocated[e] > live) live = allocated[e];
    return live;
}

void xsa_bursty_settle(const xsa_bursty *b, uint64_t event_ns, const int64_t *allocated, const int64_t *reserved,
                       int64_t *settle) {
    for (size_t i = 0; i < b->n_bursts; i++) {
        size_t from = b->burst_end[i], to = b->next_burst[i];
        int64_t live = live_peak(b, i, allocated);
        settle[i] = -1;
        int64_t waited = 0; /* from the end of event `from` (and its wait) to the end of event e's wait */
        for (size_t e = from; e <= to && settle[i] < 0; e++) {
            if (e > from) waited += (int64_t)xsa_bursty_event_time(b, event_ns, e);
            if ((double)reserved[e] <= 1.05 * (double)live) settle[i] = waited;
        }
    }
}

double xsa_bursty_settled(const xsa_bursty *b, const int64_t *allocated, const int64_t *reserved) {
    double worst = 0;
    for (size_t i = 0; i < b->n_bursts; i++) {
        int64_t live = live_peak(b, i, allocated);
        double r = live ? (double)reserved[b->next_burst[i]] / (double)live : 0;
        if (r > worst) worst = r;
    }
    return worst;
}
