/*
 * benchmarks/replay_lib: trace replay through xsalloc (see replay_lib.h).
 *
 * Design: a replay is set-up (driver, init, checks), the timed event loop
 * (nothing but xsalloc calls, plus optional series samples), then tear-down
 * (free what is live, read stats, check invariants, shut down). Errors in
 * any phase still shut xsalloc down so the next replay can start clean.
 */
#include "benchmarks/replay_lib.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "api/xsalloc.h"
#include "benchmarks/timing.h"
#include "vmm/driver.h"
#include "vmm/sim.h"

#define SERIES_POINTS 2000

typedef struct replay {
    const xsa_trace *t;
    void **ptrs; /* by trace id */
    FILE *series;
    int64_t peak_allocated, peak_reserved; /* over the series' windows */
    char *err;
    size_t errlen;
} replay;

static int fail(replay *rp, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rp->err, rp->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* "xsa_malloc failed: XSA_ERROR_OUT_OF_MEMORY: <detail>" appended to what. */
static int fail_call(replay *rp, xsa_status st, const char *fmt, ...) {
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fail(rp, "%s failed: %s: %s", what, xsa_status_name(st), xsa_last_error());
}

static void *stream_of(unsigned k) { return k == 0 ? NULL : (void *)(uintptr_t)(0x1000u + k); }

/* Writes the current values and the peaks since the previous sample; the
 * peaks are reset (and kept here) so that a plot shows the spikes between
 * samples. */
static int sample(replay *rp, size_t event) {
    xsa_device_stats s;
    xsa_status st = xsa_get_stats(0, &s);
    if (st != XSA_SUCCESS) return fail_call(rp, st, "xsa_get_stats");
    const xsa_stat *a = &s.allocated_bytes[XSA_STAT_ALL], *r = &s.reserved_bytes[XSA_STAT_ALL];
    fprintf(rp->series, "%zu,%lld,%lld,%lld,%lld\n", event, (long long)a->current,
            (long long)r->current, (long long)a->peak, (long long)r->peak);
    if (a->peak > rp->peak_allocated) rp->peak_allocated = a->peak;
    if (r->peak > rp->peak_reserved) rp->peak_reserved = r->peak;
    st = xsa_reset_peak_stats(0);
    return st == XSA_SUCCESS ? 0 : fail_call(rp, st, "xsa_reset_peak_stats");
}

static int run_event(replay *rp, const xsa_trace_event *e) {
    void **slot = &rp->ptrs[e->id];
    xsa_status st = XSA_SUCCESS;
    if (e->kind == XSA_TRACE_ALLOC) {
        st = xsa_malloc(slot, (size_t)e->bytes, 0, stream_of(e->stream));
        if (st != XSA_SUCCESS)
            return fail_call(rp, st, "line %u: xsa_malloc(%llu bytes, stream %u)", e->line,
                             (unsigned long long)e->bytes, e->stream);
    } else if (e->kind == XSA_TRACE_FREE) {
        st = xsa_free(*slot);
        *slot = NULL;
        if (st != XSA_SUCCESS) return fail_call(rp, st, "line %u: xsa_free(id %u)", e->line, e->id);
    } else if (*slot) { /* a 0-byte allocation is NULL: nothing to record */
        st = xsa_record_stream(*slot, stream_of(e->stream));
        if (st != XSA_SUCCESS)
            return fail_call(rp, st, "line %u: xsa_record_stream(id %u, stream %u)", e->line, e->id,
                             e->stream);
    }
    return 0;
}

/* The timed loop; fills r->ns_per_event and the driver call counts. */
static int run_events(replay *rp, xsa_replay_result *r) {
    size_t n = rp->t->n_events;
    size_t step = n / SERIES_POINTS ? n / SERIES_POINTS : 1;
    xsa_driver *d = xsa_active_driver();
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT], ns_before[XSA_DRV_COUNT], ns_after[XSA_DRV_COUNT];
    xsa_driver_time_calls(d, true);
    xsa_driver_read_calls(d, before, ns_before);
    if (rp->series)
        fputs("event,allocated_bytes,reserved_bytes,allocated_peak,reserved_peak\n", rp->series);
    double t0 = xsa_bench_now_ns();
    for (size_t i = 0; i < n; i++) {
        if (run_event(rp, &rp->t->events[i])) return -1;
        if (rp->series && ((i + 1) % step == 0 || i + 1 == n) && sample(rp, i + 1)) return -1;
    }
    double elapsed = xsa_bench_now_ns() - t0;
    xsa_driver_read_calls(d, after, ns_after);
    xsa_driver_time_calls(d, false);
    for (int i = 0; i < XSA_DRV_COUNT; i++) {
        r->driver_calls[i] = after[i] - before[i];
        r->driver_ns[i] = ns_after[i] - ns_before[i];
    }
    r->ns_per_event = n ? elapsed / (double)n : 0;
    return 0;
}

/* Frees what the trace left live, reads the stats and checks invariants. */
static int finish(replay *rp, xsa_replay_result *r) {
    for (uint32_t id = 0; id < rp->t->n_ids; id++) {
        xsa_status st = xsa_free(rp->ptrs[id]);
        rp->ptrs[id] = NULL;
        if (st != XSA_SUCCESS) return fail_call(rp, st, "end of trace: xsa_free(id %u)", id);
    }
    xsa_device_stats s;
    xsa_status st = xsa_get_stats(0, &s);
    if (st != XSA_SUCCESS) return fail_call(rp, st, "xsa_get_stats");
    /* Sampling resets the peaks: the whole replay's peak is the largest. */
    r->peak_allocated = s.allocated_bytes[XSA_STAT_ALL].peak;
    r->peak_reserved = s.reserved_bytes[XSA_STAT_ALL].peak;
    if (rp->peak_allocated > r->peak_allocated) r->peak_allocated = rp->peak_allocated;
    if (rp->peak_reserved > r->peak_reserved) r->peak_reserved = rp->peak_reserved;
    r->ratio = r->peak_allocated ? (double)r->peak_reserved / (double)r->peak_allocated : 0;
    r->pages_recycled = s.num_pages_recycled;
    r->num_alloc_retries = s.num_alloc_retries;
    r->num_ooms = s.num_ooms;
    st = xsa_check_invariants(0);
    if (st != XSA_SUCCESS) return fail_call(rp, st, "end of trace: xsa_check_invariants");
    return 0;
}

/* Everything between init and shutdown. */
static int run_initialised(replay *rp, xsa_replay_result *r) {
    const char *name = xsa_driver_name();
    snprintf(r->driver, sizeof r->driver, "%s", name);
    int sim = strcmp(name, "sim") == 0;
    if (!sim && rp->t->n_streams > 1)
        return fail(rp, "the %s driver replays single-stream traces only (this one has %d streams: "
                        "use --driver sim)", name, rp->t->n_streams);
    rp->ptrs = calloc(rp->t->n_ids ? rp->t->n_ids : 1, sizeof *rp->ptrs);
    if (!rp->ptrs) return fail(rp, "out of memory for %u trace ids", rp->t->n_ids);
    if (sim) xsa_sim_set_eager_events(1);
    /* A real program has its device's context before its first allocation
     * (PyTorch makes it at lazy init), so it is made here, outside the
     * timed loop and alike for every mode: otherwise the first allocator
     * call that needs a context (cuMemAlloc, or the first event) pays the
     * context's creation, about 110 ms on an H100. */
    xsa_driver *d = xsa_active_driver();
    void *ctx = NULL;
    xsa_cu_result cr = XSA_DRV(d, primary_ctx_retain, &ctx, 0);
    if (cr != XSA_CU_SUCCESS) return fail(rp, "cuDevicePrimaryCtxRetain(0) failed: %s", d->error_string(cr));
    int rc = run_events(rp, r);
    if (rc == 0) rc = finish(rp, r);
    XSA_DRV(d, primary_ctx_release, 0);
    if (sim) xsa_sim_set_eager_events(0); /* the simulated driver's default */
    return rc;
}

int xsa_replay(const xsa_trace *t, const char *conf, const char *driver, xsa_replay_result *r,
               FILE *series, char *err, size_t errlen) {
    replay rp = {.t = t, .series = series, .err = err, .errlen = errlen};
    memset(r, 0, sizeof *r);
    r->events = t->n_events;
    xsa_status st = xsa_use_driver(driver);
    if (st != XSA_SUCCESS) return fail_call(&rp, st, "xsa_use_driver(%s)", driver ? driver : "default");
    st = xsa_init(conf);
    if (st != XSA_SUCCESS) return fail_call(&rp, st, "xsa_init('%s')", conf ? conf : "$XSALLOC_CONF");
    int rc = run_initialised(&rp, r);
    free(rp.ptrs);
    st = xsa_shutdown();
    if (rc == 0 && st != XSA_SUCCESS) rc = fail_call(&rp, st, "xsa_shutdown");
    return rc;
}
