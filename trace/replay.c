/*
 * trace/replay: trace replay through xsalloc (see replay.h).
 *
 * Design: a session is set-up (driver, init, checks, the device's context,
 * the simulated GPU's mode) and tear-down; a pass is the timed event loop
 * (nothing but xsalloc calls, plus optional series samples and, at a GPU
 * lag, the program's simulated kernels), then its end (synchronize the
 * streams at a lag, free what is live, read stats, check invariants and
 * the simulated GPU's violations). Errors in any phase still shut xsalloc
 * down so the next replay can start clean.
 */
#include "trace/replay.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "api/devices.h"
#include "api/helper.h"
#include "vmm/driver.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define SERIES_POINTS 2000

struct xsa_replay_session {
    xsa_replay_options o;
    xsa_driver *d;
    int sim;
    xsa_event order;          /* at a lag: orders streams at record_stream lines */
    bool helper;              /* the helper runs in manual mode, on trace time */
    uint64_t event_ns;        /* trace time an event; 0: none */
    uint64_t now_ns;          /* the helper's clock: trace time */
};

typedef struct replay {
    xsa_replay_session *s;
    const xsa_trace *t;
    void **ptrs;              /* by trace id */
    /* At a lag, by trace id: the allocation's bytes and the trace stream
     * that used it last. */
    uint64_t *bytes;
    uint16_t *last_stream;
    int64_t peak_allocated, peak_reserved; /* over the series' windows */
    char *err;
    size_t errlen;
} replay;

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* "xsa_malloc failed: XSA_ERROR_OUT_OF_MEMORY: <detail>" appended to what. */
static int fail_call(char *err, size_t errlen, xsa_status st, const char *fmt, ...) {
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fail(err, errlen, "%s failed: %s: %s", what, xsa_status_name(st), xsa_last_error());
}

static int fail_driver(replay *rp, const char *what, xsa_cu_result cr) {
    return fail(rp->err, rp->errlen, "%s failed: %s", what, rp->s->d->error_string(cr));
}

static void *stream_of(unsigned k) { return k == 0 ? NULL : (void *)(uintptr_t)(0x1000u + k); }

/* Writes the current values and the peaks since the previous sample; the
 * peaks are reset (and kept here) so that a plot shows the spikes between
 * samples. */
static int sample(replay *rp, size_t event) {
    xsa_device_stats s;
    xsa_status st = xsa_get_stats(0, &s);
    if (st != XSA_SUCCESS) return fail_call(rp->err, rp->errlen, st, "xsa_get_stats");
    const xsa_stat *a = &s.allocated_bytes[XSA_STAT_ALL], *r = &s.reserved_bytes[XSA_STAT_ALL];
    fprintf(rp->s->o.series, "%zu,%lld,%lld,%lld,%lld\n", event, (long long)a->current,
            (long long)r->current, (long long)a->peak, (long long)r->peak);
    if (a->peak > rp->peak_allocated) rp->peak_allocated = a->peak;
    if (r->peak > rp->peak_reserved) rp->peak_reserved = r->peak;
    st = xsa_reset_peak_stats(0);
    return st == XSA_SUCCESS ? 0 : fail_call(rp->err, rp->errlen, st, "xsa_reset_peak_stats");
}

/* ---- the program's kernels, at a GPU lag ---- */

/* A kernel over allocation `id` on trace stream k. A launch on unmapped
 * memory is a violation the simulated GPU counts; the pass fails at its
 * end, not here. */
static int kernel(replay *rp, const xsa_trace_event *e, unsigned k) {
    xsa_devptr p = (xsa_devptr)(uintptr_t)rp->ptrs[e->id];
    xsa_cu_result cr = xsa_sim_launch(stream_of(k), p, (size_t)rp->bytes[e->id]);
    if (cr == XSA_CU_SUCCESS || cr == XSA_CU_ERROR_ILLEGAL_ADDRESS) return 0;
    char what[96];
    snprintf(what, sizeof what, "line %u: xsa_sim_launch(id %u, stream %u)", e->line, e->id, k);
    return fail_driver(rp, what, cr);
}

/* record_stream: the other stream waits for the tensor's last use, then
 * uses it. */
static int use_on_other_stream(replay *rp, const xsa_trace_event *e) {
    unsigned last = rp->last_stream[e->id];
    if (e->stream != last) {
        xsa_driver *d = rp->s->d;
        xsa_cu_result cr = XSA_DRV(d, event_record, rp->s->order, stream_of(last));
        if (cr == XSA_CU_SUCCESS) cr = XSA_DRV(d, stream_wait_event, stream_of(e->stream), rp->s->order);
        if (cr != XSA_CU_SUCCESS) return fail_driver(rp, "ordering streams at a record_stream line", cr);
    }
    rp->last_stream[e->id] = e->stream;
    return kernel(rp, e, e->stream);
}

/* Before an event at a lag: a tick, and the kernels the program runs
 * before the call. */
static int before_call(replay *rp, const xsa_trace_event *e) {
    xsa_sim_tick(1);
    if (!rp->ptrs[e->id]) return 0; /* a 0-byte allocation is NULL: no kernel */
    if (e->kind == XSA_TRACE_FREE) return kernel(rp, e, rp->last_stream[e->id]);
    if (e->kind == XSA_TRACE_RECORD) return use_on_other_stream(rp, e);
    return 0;
}

/* After an allocation at a lag: the kernel that writes it. */
static int after_alloc(replay *rp, const xsa_trace_event *e) {
    rp->bytes[e->id] = e->bytes;
    rp->last_stream[e->id] = e->stream;
    return rp->ptrs[e->id] ? kernel(rp, e, e->stream) : 0;
}

/* ---- the pass ---- */

static int run_event(replay *rp, const xsa_trace_event *e) {
    int lag = rp->s->o.gpu_lag > 0;
    if (lag && before_call(rp, e)) return -1;
    void **slot = &rp->ptrs[e->id];
    xsa_status st = XSA_SUCCESS;
    if (e->kind == XSA_TRACE_ALLOC) {
        st = xsa_malloc(slot, (size_t)e->bytes, 0, stream_of(e->stream));
        if (st != XSA_SUCCESS)
            return fail_call(rp->err, rp->errlen, st, "line %u: xsa_malloc(%llu bytes, stream %u)", e->line,
                             (unsigned long long)e->bytes, e->stream);
        if (lag) return after_alloc(rp, e);
    } else if (e->kind == XSA_TRACE_FREE) {
        st = xsa_free(*slot);
        *slot = NULL;
        if (st != XSA_SUCCESS) return fail_call(rp->err, rp->errlen, st, "line %u: xsa_free(id %u)", e->line, e->id);
    } else if (*slot) { /* a 0-byte allocation is NULL: nothing to record */
        st = xsa_record_stream(*slot, stream_of(e->stream));
        if (st != XSA_SUCCESS)
            return fail_call(rp->err, rp->errlen, st, "line %u: xsa_record_stream(id %u, stream %u)", e->line,
                             e->id, e->stream);
    }
    return 0;
}

/* ---- trace time: the helper's rounds, reserved memory over time ---- */

static uint64_t trace_clock(void *ctx) { return ((const xsa_replay_session *)ctx)->now_ns; }

/* The helper's due rounds at the clock's time, their driver calls and
 * H100 estimate counted apart; when the next one is due. */
static uint64_t helper_rounds(replay *rp, xsa_replay_result *r) {
    xsa_replay_session *s = rp->s;
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT];
    xsa_driver_read_calls(s->d, before, NULL);
    uint64_t est = s->sim ? xsa_sim_h100_est_ns() : 0;
    uint64_t next = xsa_helper_poll();
    xsa_driver_read_calls(s->d, after, NULL);
    for (int i = 0; i < XSA_DRV_COUNT; i++) r->helper_calls[i] += after[i] - before[i];
    if (s->sim) r->helper_est_h100_ns += xsa_sim_h100_est_ns() - est;
    return next;
}

static int read_memory(replay *rp, int64_t *allocated, int64_t *reserved) {
    xsa_device_stats st;
    xsa_status status = xsa_get_stats(0, &st);
    if (status != XSA_SUCCESS) return fail_call(rp->err, rp->errlen, status, "xsa_get_stats");
    *allocated = st.allocated_bytes[XSA_STAT_ALL].current;
    *reserved = st.reserved_bytes[XSA_STAT_ALL].current;
    return 0;
}

static int synchronize_streams(replay *rp);

/* A wait of the trace ('w' lines) after an event: the program waits for
 * the GPU (at a lag, its streams synchronize: the simulated GPU catches
 * up), and the clock moves from one due round of the helper to the next
 * through it, reserved memory counted in between. */
static int wait_idle(replay *rp, xsa_replay_result *r, uint64_t idle) {
    xsa_replay_session *s = rp->s;
    if (s->o.gpu_lag > 0 && synchronize_streams(rp)) return -1;
    uint64_t end = s->now_ns + idle;
    while (s->now_ns < end) {
        uint64_t next = s->helper ? helper_rounds(rp, r) : UINT64_MAX, to = end;
        if (next > s->now_ns && next < end) to = next;
        int64_t allocated = 0, reserved = 0;
        if (read_memory(rp, &allocated, &reserved)) return -1;
        r->reserved_gb_s += (double)reserved * 1e-9 * ((double)(to - s->now_ns) * 1e-9);
        s->now_ns = to;
    }
    if (s->helper) helper_rounds(rp, r);
    return 0;
}

/* After event i: the clock moves to its end, the helper's due rounds run,
 * reserved memory over the event is added up, then the trace's wait after
 * it, if any, passes (`sample` sees the memory after it). */
static int after_event(replay *rp, xsa_replay_result *r, size_t event) {
    xsa_replay_session *s = rp->s;
    s->now_ns += s->event_ns;
    if (s->helper) helper_rounds(rp, r);
    if (!s->event_ns) return 0;
    int64_t allocated = 0, reserved = 0;
    if (read_memory(rp, &allocated, &reserved)) return -1;
    r->reserved_gb_s += (double)reserved * 1e-9 * ((double)s->event_ns * 1e-9);
    uint64_t idle = rp->t->wait_ns ? rp->t->wait_ns[event - 1] : 0;
    if (idle && (wait_idle(rp, r, idle) || read_memory(rp, &allocated, &reserved))) return -1;
    if (s->o.sample) s->o.sample(s->o.sample_ctx, event, allocated, reserved);
    return 0;
}

/* The timed loop; fills r->ns_per_event, the driver call counts and, on
 * the simulated driver, their H100 estimate. */
static int run_events(replay *rp, xsa_replay_result *r) {
    size_t n = rp->t->n_events;
    size_t step = n / SERIES_POINTS ? n / SERIES_POINTS : 1;
    xsa_driver *d = rp->s->d;
    FILE *series = rp->s->o.series;
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT], ns_before[XSA_DRV_COUNT], ns_after[XSA_DRV_COUNT];
    xsa_driver_time_calls(d, true);
    xsa_driver_read_calls(d, before, ns_before);
    uint64_t est_before = rp->s->sim ? xsa_sim_h100_est_ns() : 0;
    if (series) fputs("event,allocated_bytes,reserved_bytes,allocated_peak,reserved_peak\n", series);
    uint64_t t0 = xsa_driver_now_ns();
    bool timed = rp->s->helper || rp->s->event_ns;
    for (size_t i = 0; i < n; i++) {
        if (run_event(rp, &rp->t->events[i])) return -1;
        if (timed && after_event(rp, r, i + 1)) return -1;
        if (series && ((i + 1) % step == 0 || i + 1 == n) && sample(rp, i + 1)) return -1;
    }
    double elapsed = (double)(xsa_driver_now_ns() - t0);
    xsa_driver_read_calls(d, after, ns_after);
    xsa_driver_time_calls(d, false);
    r->est_h100_driver_ns = rp->s->sim ? xsa_sim_h100_est_ns() - est_before : 0;
    for (int i = 0; i < XSA_DRV_COUNT; i++) {
        r->driver_calls[i] = after[i] - before[i];
        r->driver_ns[i] = ns_after[i] - ns_before[i];
    }
    r->ns_per_event = n ? elapsed / (double)n : 0;
    return 0;
}

/* The end of the program at a lag: its streams are synchronized. */
static int synchronize_streams(replay *rp) {
    for (int k = 0; k < rp->t->n_streams; k++) {
        xsa_cu_result cr = XSA_DRV(rp->s->d, stream_synchronize, stream_of((unsigned)k));
        if (cr != XSA_CU_SUCCESS) return fail_driver(rp, "cuStreamSynchronize at the end of the trace", cr);
    }
    return 0;
}

/* Frees what the trace left live, reads the stats and checks invariants. */
static int finish(replay *rp, xsa_replay_result *r) {
    for (uint32_t id = 0; id < rp->t->n_ids; id++) {
        xsa_status st = xsa_free(rp->ptrs[id]);
        rp->ptrs[id] = NULL;
        if (st != XSA_SUCCESS) return fail_call(rp->err, rp->errlen, st, "end of trace: xsa_free(id %u)", id);
    }
    xsa_device_stats s;
    xsa_status st = xsa_get_stats(0, &s);
    if (st != XSA_SUCCESS) return fail_call(rp->err, rp->errlen, st, "xsa_get_stats");
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
    if (st != XSA_SUCCESS) return fail_call(rp->err, rp->errlen, st, "end of trace: xsa_check_invariants");
    return 0;
}

/* The simulated GPU's violations over the pass. */
static int check_violations(replay *rp, xsa_replay_result *r) {
    if (!rp->s->sim) return 0;
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    r->violations = v.unmapped_in_use + v.races + v.bad_launches;
    if (!r->violations) return 0;
    return fail(rp->err, rp->errlen,
                "the simulated GPU (lag %lld) saw %llu violations (%llu unmapped in use, %llu races, %llu bad "
                "launches); the first: %s",
                (long long)rp->s->o.gpu_lag, (unsigned long long)r->violations,
                (unsigned long long)v.unmapped_in_use, (unsigned long long)v.races,
                (unsigned long long)v.bad_launches, v.first);
}

static int pass(replay *rp, xsa_replay_result *r) {
    size_t ids = rp->t->n_ids ? rp->t->n_ids : 1;
    rp->ptrs = calloc(ids, sizeof *rp->ptrs);
    if (!rp->ptrs) return fail(rp->err, rp->errlen, "out of memory for %u trace ids", rp->t->n_ids);
    if (rp->s->o.gpu_lag > 0) {
        rp->bytes = calloc(ids, sizeof *rp->bytes);
        rp->last_stream = calloc(ids, sizeof *rp->last_stream);
        if (!rp->bytes || !rp->last_stream) return fail(rp->err, rp->errlen, "out of memory for %u trace ids", rp->t->n_ids);
    }
    if (rp->s->sim) xsa_sim_clear_violations();
    int rc = run_events(rp, r);
    if (rc == 0 && rp->s->o.gpu_lag > 0) rc = synchronize_streams(rp);
    if (rc == 0) rc = finish(rp, r);
    /* Violations come first: they may explain a failure that followed. */
    char then[512] = "";
    if (rc) snprintf(then, sizeof then, "%s", rp->err);
    if (check_violations(rp, r) == 0) return rc;
    if (rc) {
        size_t len = strlen(rp->err);
        snprintf(rp->err + len, rp->errlen - len, "; then: %s", then);
    }
    return -1;
}

int xsa_replay_pass(xsa_replay_session *s, const xsa_trace *t, xsa_replay_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->events = t->n_events;
    r->gpu_lag = s->o.gpu_lag;
    r->event_ns = s->event_ns;
    snprintf(r->driver, sizeof r->driver, "%s", s->d->name);
    if (!s->sim && t->n_streams > 1)
        return fail(err, errlen, "the %s driver replays single-stream traces only (this one has %d streams: "
                                 "use --driver sim)", s->d->name, t->n_streams);
    replay rp = {.s = s, .t = t, .err = err, .errlen = errlen};
    int rc = pass(&rp, r);
    free(rp.ptrs);
    free(rp.bytes);
    free(rp.last_stream);
    return rc;
}

/* Everything after init: the mode of the simulated GPU, the context. */
static int start(xsa_replay_session *s, char *err, size_t errlen) {
    if (s->o.gpu_lag < 0) return fail(err, errlen, "a GPU lag is 0 or more (got %lld)", (long long)s->o.gpu_lag);
    if (!s->sim && s->o.gpu_lag)
        return fail(err, errlen, "a GPU lag (%lld) needs the simulated driver: a real GPU runs on its own "
                                 "timeline (use --driver sim, or lag 0)", (long long)s->o.gpu_lag);
    if (s->sim && s->o.gpu_lag) xsa_sim_set_gpu_lag(s->o.gpu_lag);
    else if (s->sim) xsa_sim_set_eager_events(1);
    /* A real program has its device's context before its first allocation
     * (PyTorch makes it at lazy init), so it is made here, outside the
     * timed loop and alike for every mode: otherwise the first allocator
     * call that needs a context (cuMemAlloc, or the first event) pays the
     * context's creation, about 110 ms on an H100. */
    void *ctx = NULL;
    xsa_cu_result cr = XSA_DRV(s->d, primary_ctx_retain, &ctx, 0);
    if (cr != XSA_CU_SUCCESS) return fail(err, errlen, "cuDevicePrimaryCtxRetain(0) failed: %s", s->d->error_string(cr));
    if (s->o.gpu_lag && (cr = XSA_DRV(s->d, event_create, &s->order, 0)) != XSA_CU_SUCCESS) {
        s->order = NULL;
        return fail(err, errlen, "cuEventCreate failed: %s", s->d->error_string(cr));
    }
    /* The helper thread on trace time, in manual mode. */
    xsa_pool_options opt;
    xsa_api_options(&opt);
    s->helper = opt.helper_thread;
    s->event_ns = s->o.event_ns ? s->o.event_ns : s->helper ? XSA_REPLAY_DEFAULT_EVENT_NS : 0;
    if (s->helper) {
        xsa_helper_set_manual(true);
        xsa_helper_set_deferred_commit(s->o.helper_deferred);
        xsa_helper_set_clock(trace_clock, s);
    }
    return 0;
}

xsa_replay_session *xsa_replay_open(const xsa_replay_options *o, char *err, size_t errlen) {
    xsa_replay_session *s = calloc(1, sizeof *s);
    if (!s) {
        fail(err, errlen, "out of memory");
        return NULL;
    }
    s->o = *o;
    xsa_status st = xsa_use_driver(o->driver);
    if (st != XSA_SUCCESS) {
        fail_call(err, errlen, st, "xsa_use_driver(%s)", o->driver ? o->driver : "default");
        free(s);
        return NULL;
    }
    st = xsa_init(o->conf);
    if (st != XSA_SUCCESS) {
        /* With NULL, the message names the environment variable read. */
        fail_call(err, errlen, st, "xsa_init(%s%s%s)", o->conf ? "'" : "", o->conf ? o->conf : "NULL", o->conf ? "'" : "");
        free(s);
        return NULL;
    }
    s->d = xsa_active_driver();
    s->sim = strcmp(s->d->name, "sim") == 0;
    if (start(s, err, errlen)) {
        xsa_replay_close(s, NULL, 0);
        return NULL;
    }
    return s;
}

int xsa_replay_close(xsa_replay_session *s, char *err, size_t errlen) {
    if (s->helper) {
        xsa_helper_set_deferred_commit(0); /* commits what waits */
        xsa_helper_set_clock(NULL, NULL);
        xsa_helper_set_manual(false);
    }
    if (s->order) XSA_DRV(s->d, event_destroy, s->order);
    XSA_DRV(s->d, primary_ctx_release, 0);
    if (s->sim) xsa_sim_set_eager_events(0); /* the simulated driver's default */
    free(s);
    xsa_status st = xsa_shutdown();
    return st == XSA_SUCCESS || !err ? 0 : fail_call(err, errlen, st, "xsa_shutdown");
}

int xsa_replay(const xsa_trace *t, const xsa_replay_options *o, xsa_replay_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->events = t->n_events;
    xsa_replay_session *s = xsa_replay_open(o, err, errlen);
    if (!s) return -1;
    int rc = xsa_replay_pass(s, t, r, err, errlen);
    if (xsa_replay_close(s, rc ? NULL : err, errlen)) rc = -1;
    return rc;
}
