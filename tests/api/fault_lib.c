/*
 * tests/fault_lib: one workload run with one injected driver fault (what
 * is checked is listed in fault_lib.h).
 *
 * Design: the workload is a flat list of steps (init, trace events, cache
 * empties, final frees). Each step is one public call, bracketed by the
 * driver's call counter of the injected entry point, so the step whose
 * call failed is known exactly. Until the fault has fired, the stats and
 * the simulated driver's usage are snapshotted before every step, so the
 * failed step can be compared with the state before it.
 */
#include "tests/api/fault_lib.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/helper.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

typedef enum {
    STEP_INIT, STEP_EVENT, STEP_FREE, STEP_EMPTY, STEP_BEGIN, STEP_END, STEP_RELEASE,
    STEP_SHARE, STEP_CHECKPOINT, STEP_RESTORE, STEP_GHOST, STEP_HELPER,
} step_kind;

typedef struct snapshot {
    xsa_device_stats stats;
    bool has_stats;
    xsa_sim_usage usage;
} snapshot;

typedef struct runner {
    const fi_workload *w;
    xsa_driver_entry entry;
    uint64_t nth;
    size_t check_every;
    fi_outcome *o;
    void **ptrs;   /* by trace id */
    size_t *sizes; /* scaled size of each live id */
    xsa_live_block *ckpt; /* the last checkpoint of a graph's pool */
    size_t n_ckpt;
    void **ghosts; /* blocks a restore allocated, freed right after (NULL once freed) */
    size_t n_ghosts;
    bool initialised;
    bool notice_due;      /* the fault fired in a helper round: the next malloc or empty_cache may report it */
    uint64_t now_ns;      /* the helper's clock: trace time */
    char said[1024]; /* a failed step's sentence when later calls of the step cleared it (share steps) */
    char *err;
    size_t errlen;
} runner;

static int fail(runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(runner *r, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->nth)
        snprintf(r->err, r->errlen, "%s, call %llu of %s fails: step %zu: %s", r->w->c.name,
                 (unsigned long long)r->nth, xsa_driver_entry_name(r->entry), r->o->steps, msg);
    else
        snprintf(r->err, r->errlen, "%s, no fault: step %zu: %s", r->w->c.name, r->o->steps, msg);
    return -1;
}

#define GiB ((size_t)1 << 30)
#define TRACES "benchmarks/traces/"

/* Capacities leave room for the fault-free run (classic segments fragment)
 * but are small enough for the out-of-memory fallback to run now and then. */
const fi_case fi_cases[] = {
    {"gpt2 expandable+recycling", TRACES "gpt2_varlen.trace.gz", "", 5000, 16, 2 * GiB, 0, 0, 0},
    {"resnet classic", TRACES "resnet_varbatch.trace.gz", "expandable_segments:False", 5000, 2, 2 * GiB, 0, 0, 0},
    {"multistream expandable+recycling", TRACES "synthetic_multistream.trace.gz", "", 5000, 1, 4 * GiB, 250, 0, 0},
    /* Capture-time reuse on: its capture-info queries at mallocs and frees in the capture windows. */
    {"multistream classic", TRACES "synthetic_multistream.trace.gz",
     "expandable_segments:False,graph_capture_record_stream_reuse:True", 5000, 1, 4 * GiB, 250, 0, 0},
    /* Headroom 1: handles of several pages (1/8 of the highest allocated bytes). */
    {"gpt2 expandable+recycling+shares", TRACES "gpt2_varlen.trace.gz", "ipc_handles:True,page_recycling_headroom:1", 3000, 16,
     2 * GiB, 0, 25, 0},
    /* The helper thread: decay every 20 events, pages moved at every growth
     * (their old addresses its jobs), readying after decay, captures. */
    {"multistream helper+decay", TRACES "synthetic_multistream.trace.gz",
     "helper_thread:True,page_decay_ms:20,page_recycling_headroom:0", 5000, 1, 4 * GiB, 250, 0, 1000},
};
const size_t fi_n_cases = sizeof fi_cases / sizeof fi_cases[0];

int fi_load(fi_workload *w, const fi_case *c, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->c = *c;
    if (xsa_trace_load(c->trace, &w->t, err, errlen)) return -1;
    if (w->t.n_events > c->events) w->t.n_events = c->events;
    return 0;
}

void fi_unload(fi_workload *w) { xsa_trace_free(&w->t); }

xsa_cu_result fi_error_for(xsa_driver_entry entry) {
    return entry == XSA_DRV_mem_create || entry == XSA_DRV_mem_alloc ? XSA_CU_ERROR_OUT_OF_MEMORY
                                                                     : XSA_CU_ERROR_UNKNOWN;
}

/* ---- data tags: a live allocation's first and last bytes ---- */

static uint64_t tag_of(uint32_t id, size_t size) { return (id + 1) * 0x9E3779B97F4A7C15ull ^ size; }

/* The tag's bytes at the start, and at the end when they do not overlap. */
static void write_tag(void *p, uint32_t id, size_t size) {
    uint64_t tag = tag_of(id, size);
    memcpy(p, &tag, size < 8 ? size : 8);
    if (size >= 16) memcpy((char *)p + size - 8, &tag, 8);
}

static bool tag_intact(const void *p, uint32_t id, size_t size) {
    uint64_t tag = tag_of(id, size);
    return memcmp(p, &tag, size < 8 ? size : 8) == 0 && (size < 16 || memcmp((const char *)p + size - 8, &tag, 8) == 0);
}

static int check_all_tags(runner *r) {
    for (uint32_t id = 0; id < r->w->t.n_ids; id++)
        if (r->ptrs[id] && !tag_intact(r->ptrs[id], id, r->sizes[id]))
            return fail(r, "the data of live allocation id %u (%zu bytes) changed", id, r->sizes[id]);
    return 0;
}

/* ---- one step ---- */

static void *stream_of(unsigned k) { return k == 0 ? NULL : (void *)(uintptr_t)(0x1000u + k); }

static size_t scaled(const runner *r, uint64_t bytes) {
    size_t s = (size_t)(bytes / r->w->c.divisor);
    return s == 0 && bytes ? 1 : s;
}

static xsa_status do_malloc(runner *r, uint32_t id, size_t size, unsigned stream) {
    xsa_status st = xsa_malloc(&r->ptrs[id], size, 0, stream_of(stream));
    if (st == XSA_SUCCESS && r->ptrs[id]) {
        r->sizes[id] = size;
        write_tag(r->ptrs[id], id, size);
    }
    return st;
}

/* Frees id; its tag must be intact. A failed free leaves it live. */
static xsa_status do_free(runner *r, uint32_t id, bool *tag_ok) {
    void *p = r->ptrs[id];
    *tag_ok = !p || tag_intact(p, id, r->sizes[id]);
    xsa_status st = xsa_free(p);
    if (st == XSA_SUCCESS) r->ptrs[id] = NULL;
    return st;
}

/* Shares live allocation id, opens the share twice in this process and
 * checks its tag through the import, then closes both opens (retrying a
 * failed close once: a fault fires once). The first failure is returned. */
static xsa_status do_share(runner *r, uint32_t id, bool *tag_ok) {
    r->said[0] = '\0';
    void *bytes = NULL, *base = NULL, *again = NULL;
    size_t len = 0, offset = 0;
    xsa_status st = xsa_ipc_share(r->ptrs[id], &bytes, &len, &offset);
    /* The fault hit the pool's probe of exportable handles: IPC is off. */
    if (st == XSA_ERROR_NOT_SUPPORTED && r->o->fired && strstr(xsa_last_error(), "fell back")) return XSA_SUCCESS;
    if (st == XSA_SUCCESS) st = xsa_ipc_open(bytes, len, 0, &base);
    if (st == XSA_SUCCESS) {
        *tag_ok = tag_intact((char *)base + offset, id, r->sizes[id]);
        st = xsa_ipc_open(bytes, len, 0, &again);
        for (int open = again ? 2 : 1; open > 0; open--) {
            xsa_status c = xsa_ipc_close(base);
            if (c == XSA_SUCCESS) continue;
            if (st == XSA_SUCCESS) st = c, snprintf(r->said, sizeof r->said, "%s", xsa_last_error());
            xsa_ipc_close(base); /* the import stays after a failed close: closed again */
        }
    }
    xsa_free_buffer(bytes);
    return st;
}

/* The capture's streams: trace stream 1. */
static bool captured(void *ctx, void *stream) {
    (void)ctx;
    return stream == stream_of(1);
}

static xsa_mempool_id graph_pool(uint32_t g) { return (xsa_mempool_id){g, 0}; }

static xsa_status do_checkpoint(runner *r, uint32_t g) {
    xsa_free_buffer(r->ckpt);
    return xsa_mempool_checkpoint(0, graph_pool(g), &r->ckpt, &r->n_ckpt);
}

/* Restores graph g's pool to the last checkpoint: the trace's allocations
 * it freed are no longer live (the trace's own free of them frees NULL),
 * the blocks it allocated are the ghosts, freed by the next steps. */
static xsa_status do_restore(runner *r, uint32_t g) {
    xsa_restore_delta d;
    xsa_status st = xsa_mempool_restore(0, graph_pool(g), r->ckpt, r->n_ckpt, &d);
    if (st != XSA_SUCCESS) return st;
    for (size_t i = 0; i < d.n_freed; i++)
        for (uint32_t id = 0; id < r->w->t.n_ids; id++)
            if (r->ptrs[id] == d.freed[i]) r->ptrs[id] = NULL;
    void **grown = realloc(r->ghosts, (r->n_ghosts + d.n_allocated + 1) * sizeof *grown);
    if (grown) {
        r->ghosts = grown;
        for (size_t i = 0; i < d.n_allocated; i++) r->ghosts[r->n_ghosts++] = d.allocated[i];
    }
    xsa_restore_delta_free(&d);
    return grown ? XSA_SUCCESS : XSA_ERROR_OUT_OF_MEMORY;
}

static xsa_status do_step(runner *r, step_kind kind, const xsa_trace_event *e, uint32_t id, bool *tag_ok) {
    *tag_ok = true;
    switch (kind) {
    case STEP_BEGIN: return xsa_begin_allocate_to_pool(0, graph_pool(id), captured, NULL);
    case STEP_END: return xsa_end_allocate_to_pool(0, graph_pool(id));
    case STEP_RELEASE: return xsa_mempool_release(0, graph_pool(id));
    case STEP_CHECKPOINT: return do_checkpoint(r, id);
    case STEP_RESTORE: return do_restore(r, id);
    case STEP_GHOST: {
        xsa_status st = xsa_free(r->ghosts[id]);
        if (st == XSA_SUCCESS) r->ghosts[id] = NULL;
        return st;
    }
    case STEP_INIT: {
        xsa_status st = xsa_init(r->w->c.conf);
        if (st != XSA_SUCCESS) return st;
        r->initialised = true;
        xsa_device_stats s;
        return xsa_get_stats(0, &s); /* creates the device's pool */
    }
    case STEP_EMPTY: return xsa_empty_cache();
    case STEP_HELPER: /* its failures reach the next malloc or empty_cache */
        r->now_ns += (uint64_t)r->w->c.event_us * 1000u;
        xsa_helper_poll();
        return XSA_SUCCESS;
    case STEP_FREE: return do_free(r, id, tag_ok);
    case STEP_SHARE: return do_share(r, id, tag_ok);
    case STEP_EVENT: break;
    }
    if (e->kind == XSA_TRACE_ALLOC) return do_malloc(r, e->id, scaled(r, e->bytes), e->stream);
    if (e->kind == XSA_TRACE_FREE) return do_free(r, e->id, tag_ok);
    /* A failed or zero-byte allocation is NULL: nothing to record. */
    return r->ptrs[e->id] ? xsa_record_stream(r->ptrs[e->id], stream_of(e->stream)) : XSA_SUCCESS;
}

static void take_snapshot(const runner *r, snapshot *s) {
    xsa_sim_get_usage(&s->usage);
    s->has_stats = r->initialised && xsa_get_stats(0, &s->stats) == XSA_SUCCESS;
}

static uint64_t calls_of(xsa_driver_entry e) {
    uint64_t c[XSA_DRV_COUNT];
    xsa_driver_read_calls(xsa_driver_sim(), c, NULL);
    return c[e];
}

/* "Nothing else changed" across the failed step (see fault_lib.h). */
static int compare(runner *r, const snapshot *a, const snapshot *b) {
    if (a->has_stats && b->has_stats) {
        for (int k = 0; k < XSA_STAT_TYPES; k++) {
#define SAME(f)                                                                                     \
    if (a->stats.f[k].current != b->stats.f[k].current)                                             \
        return fail(r, #f "[%d] changed from %lld to %lld", k, (long long)a->stats.f[k].current,    \
                    (long long)b->stats.f[k].current);
#define NOT_UP(f)                                                                                   \
    if (b->stats.f[k].current > a->stats.f[k].current)                                              \
        return fail(r, #f "[%d] went up from %lld to %lld", k, (long long)a->stats.f[k].current,    \
                    (long long)b->stats.f[k].current);
            SAME(allocation) SAME(allocated_bytes) SAME(requested_bytes)
            NOT_UP(active) NOT_UP(active_bytes) NOT_UP(reserved_bytes) NOT_UP(segment)
#undef SAME
#undef NOT_UP
        }
    }
#define USAGE_NOT_UP(f)                                                                             \
    if (b->usage.f > a->usage.f) return fail(r, "driver " #f " went up from %zu to %zu", a->usage.f, b->usage.f);
    USAGE_NOT_UP(handles) USAGE_NOT_UP(handle_bytes) USAGE_NOT_UP(mapped_bytes) USAGE_NOT_UP(reservations)
    USAGE_NOT_UP(reserved_bytes) USAGE_NOT_UP(mem_allocs) USAGE_NOT_UP(mem_alloc_bytes)
#undef USAGE_NOT_UP
    return 0;
}

static int check_invariants(runner *r) {
    if (!r->initialised) return 0;
    if (xsa_check_invariants(0) != XSA_SUCCESS) return fail(r, "invariants: %s", xsa_last_error());
    return 0;
}

/* The failed request's status must name the injected error. */
static int check_failed_status(runner *r, step_kind kind, xsa_status st, const char *msg) {
    xsa_status want = fi_error_for(r->entry) == XSA_CU_ERROR_OUT_OF_MEMORY ? XSA_ERROR_OUT_OF_MEMORY
                      : kind == STEP_INIT && !r->initialised           ? XSA_ERROR_NO_DRIVER
                                                                       : XSA_ERROR_DRIVER;
    if (st != want) return fail(r, "returned %s (%s), expected %s", xsa_status_name(st), msg, xsa_status_name(want));
    if (!msg[0]) return fail(r, "%s without a message", xsa_status_name(st));
    return 0;
}

/* A step that may report the helper's failure: a malloc or empty_cache. */
static bool attends(step_kind kind, const xsa_trace_event *e) {
    return kind == STEP_EMPTY || (kind == STEP_EVENT && e->kind == XSA_TRACE_ALLOC);
}

/* The step after a fault in a helper round that may report it: failed
 * with the helper's notice (held to a failed request's checks) or not
 * (the helper absorbed the fault). */
static int notice_step(runner *r, step_kind kind, xsa_status st, const char *msg, const snapshot *before) {
    r->notice_due = false;
    if (st == XSA_SUCCESS) return 0;
    if (!strstr(msg, "helper thread")) return fail(r, "failed after a helper round's fault, not with its notice: %s", msg);
    r->o->errored = 1;
    snapshot after;
    if (check_failed_status(r, kind, st, msg)) return -1;
    take_snapshot(r, &after);
    if (compare(r, before, &after)) return -1;
    return check_all_tags(r) || check_invariants(r) ? -1 : 0;
}

static int run_step(runner *r, step_kind kind, const xsa_trace_event *e, uint32_t id) {
    bool armed = r->nth && !r->o->fired, noticed = r->notice_due && attends(kind, e);
    snapshot before, after;
    uint64_t calls_before = armed ? calls_of(r->entry) : 0;
    if (armed || noticed) take_snapshot(r, &before);
    bool tag_ok;
    xsa_status st = do_step(r, kind, e, id, &tag_ok);
    const char *msg = st == XSA_SUCCESS ? "" : r->said[0] ? r->said : xsa_last_error();
    bool hit = armed && calls_of(r->entry) >= r->nth && calls_before < r->nth;
    r->o->steps++;
    if (!tag_ok)
        return fail(r, "allocation id %u: its data changed while it was live (checked at its free, or through a share)",
                    e ? e->id : id);
    if (noticed) return notice_step(r, kind, st, msg, &before);
    if (hit && kind == STEP_HELPER) { /* no request here: the next one may say */
        r->o->fired = 1;
        r->notice_due = true;
        return check_all_tags(r) || check_invariants(r) ? -1 : 0;
    }
    if (hit) {
        r->o->fired = 1;
        r->o->errored = st != XSA_SUCCESS;
        if (st != XSA_SUCCESS) {
            if (check_failed_status(r, kind, st, msg)) return -1;
            take_snapshot(r, &after);
            if (compare(r, &before, &after)) return -1;
        }
        if (check_all_tags(r) || check_invariants(r)) return -1;
        /* A failed xsa_init is retried: the workload needs the allocator. */
        return kind == STEP_INIT && !r->initialised ? run_step(r, kind, e, id) : 0;
    }
    /* After a fault, memory a restore needs may be held back by a capture
     * whose deferred frees could not record their events: refused. */
    bool refusal_after_fault = kind == STEP_RESTORE && st == XSA_ERROR_INVALID_VALUE && r->o->fired;
    if (st != XSA_SUCCESS && !refusal_after_fault)
        return fail(r, "%s%s%u failed: %s: %s", kind == STEP_EVENT ? "trace line " : "",
                    kind == STEP_EVENT ? "" : "id ", kind == STEP_EVENT ? e->line : id, xsa_status_name(st), msg);
    /* Before the fault the run is the fault-free one, checked at every step. */
    bool differs = !r->nth || r->o->fired;
    if (differs && r->o->steps % r->check_every == 0) return check_invariants(r);
    return 0;
}

/* ---- the workload ---- */

/* Halfway through graph g's capture its pool is checkpointed, halfway
 * through the window after it the pool is restored to that checkpoint and
 * the blocks the restore allocated are freed (as cudagraph trees free
 * those no output lives in), before event i (fault_lib.h). */
static int checkpoint_steps(runner *r, size_t i) {
    size_t window = r->w->c.graph_window;
    uint32_t g = (uint32_t)(i / (2 * window));
    if (i / window % 2) return run_step(r, STEP_CHECKPOINT, NULL, g + 1);
    if (g == 0) return 0;
    if (run_step(r, STEP_RESTORE, NULL, g)) return -1;
    for (size_t k = 0; k < r->n_ghosts; k++)
        if (r->ghosts[k] && run_step(r, STEP_GHOST, NULL, (uint32_t)k)) return -1;
    return 0;
}

/* Graph g's capture begins, or ends and graph g - 1's pool is released,
 * before event i (fault_lib.h); checkpoints between. */
static int graph_steps(runner *r, size_t i) {
    size_t window = r->w->c.graph_window;
    if (window && i % window == window / 2) return checkpoint_steps(r, i);
    if (!window || i % window) return 0;
    uint32_t g = (uint32_t)(i / (2 * window)) + 1;
    if (i / window % 2) return run_step(r, STEP_BEGIN, NULL, g);
    if (g == 1) return 0;
    if (run_step(r, STEP_END, NULL, g - 1)) return -1;
    return g > 2 ? run_step(r, STEP_RELEASE, NULL, g - 2) : 0;
}

/* After the trace: the capture under way ends, the pools left are released. */
static int graph_ends(runner *r) {
    size_t window = r->w->c.graph_window, n = r->w->t.n_events;
    if (!window || n <= window) return 0;
    uint32_t last = (uint32_t)((n - 1 - window) / (2 * window)) + 1; /* the last graph begun */
    if ((n - 1) / window % 2) { /* its capture is under way; the one before is not released */
        if (run_step(r, STEP_END, NULL, last)) return -1;
        if (last > 1 && run_step(r, STEP_RELEASE, NULL, last - 1)) return -1;
    }
    return run_step(r, STEP_RELEASE, NULL, last);
}

static int run_workload(runner *r) {
    const xsa_trace *t = &r->w->t;
    if (run_step(r, STEP_INIT, NULL, 0)) return -1;
    for (size_t i = 0; i < t->n_events; i++) {
        if (graph_steps(r, i)) return -1;
        const xsa_trace_event *e = &t->events[i];
        if (run_step(r, STEP_EVENT, e, 0)) return -1;
        if (r->w->c.event_us && run_step(r, STEP_HELPER, NULL, 0)) return -1;
        size_t every = r->w->c.share_every;
        if (every && (i + 1) % every == 0 && e->kind == XSA_TRACE_ALLOC && r->ptrs[e->id] &&
            run_step(r, STEP_SHARE, NULL, e->id))
            return -1;
        if ((i + 1) % FI_COMPLETE_EVERY == 0) xsa_sim_complete_all();
        if ((i + 1) % FI_EMPTY_EVERY == 0 && run_step(r, STEP_EMPTY, NULL, 0)) return -1;
    }
    /* The second pass frees what a failed free of the first one left. */
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t id = 0; id < t->n_ids; id++)
            if (r->ptrs[id] && run_step(r, STEP_FREE, NULL, id)) return -1;
        for (size_t k = 0; k < r->n_ghosts; k++)
            if (r->ghosts[k] && run_step(r, STEP_GHOST, NULL, (uint32_t)k)) return -1;
    }
    if (graph_ends(r)) return -1;
    return run_step(r, STEP_EMPTY, NULL, 0);
}

/* After the workload: nothing left but cached events, then nothing at all. */
static int finish(runner *r) {
    xsa_sim_clear_faults();
    xsa_driver_read_calls(xsa_driver_sim(), r->o->calls, NULL);
    if (xsa_empty_cache() != XSA_SUCCESS) return fail(r, "final xsa_empty_cache: %s", xsa_last_error());
    xsa_device_stats s;
    if (xsa_get_stats(0, &s) != XSA_SUCCESS) return fail(r, "final xsa_get_stats: %s", xsa_last_error());
    if (s.allocation[XSA_STAT_ALL].current || s.reserved_bytes[XSA_STAT_ALL].current)
        return fail(r, "after the workload: %lld allocations, %lld bytes reserved", (long long)s.allocation[XSA_STAT_ALL].current,
                    (long long)s.reserved_bytes[XSA_STAT_ALL].current);
    if (check_invariants(r)) return -1;
    xsa_shutdown();
    r->initialised = false;
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    if (u.handles || u.mapped_bytes || u.reservations || u.mem_allocs || u.events)
        return fail(r, "after shutdown the driver holds %zu handles, %zu mapped bytes, %zu reservations, %zu "
                       "allocations, %zu events", u.handles, u.mapped_bytes, u.reservations, u.mem_allocs, u.events);
    return 0;
}

static uint64_t trace_clock(void *ctx) { return ((const runner *)ctx)->now_ns; }

int fi_run(const fi_workload *w, xsa_driver_entry entry, uint64_t nth, size_t check_every, fi_outcome *o,
           char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    runner r = {.w = w, .entry = entry, .nth = nth, .check_every = check_every ? check_every : 1, .o = o,
                .err = err, .errlen = errlen};
    xsa_shutdown();
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = w->c.capacity;
    if (xsa_sim_configure(&c) != XSA_CU_SUCCESS) return fail(&r, "the simulated driver still holds resources");
    if (xsa_use_driver("sim") != XSA_SUCCESS) return fail(&r, "xsa_use_driver: %s", xsa_last_error());
    if (nth) xsa_sim_fail_call(entry, nth, fi_error_for(entry));
    /* The helper's rounds are steps of the workload, on trace time, never
     * a thread's (whose faults would fire at no step): without event_us,
     * it never runs. */
    xsa_helper_set_manual(true);
    xsa_helper_set_clock(trace_clock, &r);
    r.ptrs = calloc(w->t.n_ids + 1, sizeof *r.ptrs);
    r.sizes = calloc(w->t.n_ids + 1, sizeof *r.sizes);
    int rc = r.ptrs && r.sizes ? run_workload(&r) : fail(&r, "out of host memory");
    if (rc == 0) rc = finish(&r);
    xsa_sim_clear_faults();
    xsa_shutdown();
    xsa_helper_set_clock(NULL, NULL);
    xsa_helper_set_manual(false);
    free(r.ptrs);
    free(r.sizes);
    xsa_free_buffer(r.ckpt);
    free(r.ghosts);
    return rc;
}
