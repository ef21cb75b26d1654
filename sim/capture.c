/*
 * sim/capture: stream capture on the simulated driver: captures, the
 * graphs they build, executable graphs and their replay on the timeline
 * (the rules are in xsalloc/sim.h).
 *
 * Design: this file sits in front of the timeline. Every stream and event
 * entry point, the copies and xsa_sim_launch come here first: work on a
 * capturing stream becomes a node of the capture's graph, everything else
 * goes on to timeline.c unchanged. A node is a kernel or a copy (with its
 * host pointer and direction, so that a replay copies again). Its state is its own (not in S) and guarded by
 * the same lock. A graph is an array of nodes, each a device range and the
 * indices of the earlier nodes it depends on, so the array order is a
 * topological order and a replay queues the nodes in it. A capturing stream
 * keeps its terminal nodes (what the next node depends on); a captured event
 * keeps a copy of them (sim_event.cap_deps). Handles encode a serial number
 * (graph, executable graph: serial << 32; node: serial << 32 | index + 1),
 * so a stale or made-up value fails a lookup and is never dereferenced.
 * An executable graph is a copy of its graph's nodes (the graph may be
 * destroyed first) plus, found once at instantiation with ancestor bit
 * sets, the sentence for its first pair of unordered overlapping nodes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/capture.h"
#include "sim/host.h"
#include "sim/state.h"
#include "sim/timeline.h"

typedef sim_node_list node_list;

typedef enum { NODE_KERNEL, NODE_DTOH, NODE_HTOD } node_kind;

typedef struct {
    xsa_devptr ptr;
    size_t size;
    xsa_stream stream; /* captured on, for sentences */
    node_kind kind;
    void *host;        /* a copy's host memory */
    node_list deps;    /* earlier nodes of the same graph */
} cap_node;

typedef ARRAY(cap_node) cap_nodes;

typedef struct {
    uint32_t serial;   /* 0: a free slot */
    uint64_t capture;  /* the id of the capture building it; 0 once ended */
    cap_nodes nodes;
} cap_graph;

typedef struct {
    uint32_t serial;   /* 0: a free slot */
    cap_nodes nodes;
    char race[400];    /* "" or the first unordered overlapping pair */
} cap_exec;

typedef struct {
    uint64_t id;
    xsa_stream origin;
    size_t graph;      /* slot in C.graphs */
    bool invalidated;
} cap_seq;

typedef struct {
    xsa_stream stream;
    uint64_t capture;  /* id of its capture */
    node_list deps;    /* its terminal nodes */
    ARRAY(xsa_graph_node) view; /* handed out by the last capture info */
} cap_stream;

static struct {
    ARRAY(cap_seq) seqs;       /* captures under way */
    ARRAY(cap_stream) streams; /* streams in them */
    ARRAY(cap_graph) graphs;
    ARRAY(cap_exec) execs;
    uint32_t next_serial;
    uint64_t next_id;          /* capture ids: unique in the process */
} C;

/* ---- lookups and small helpers ------------------------------------------ */

static cap_stream *find_stream(xsa_stream s) {
    for (size_t i = 0; i < C.streams.n; i++)
        if (C.streams.v[i].stream == s) return &C.streams.v[i];
    return NULL;
}

static cap_seq *find_seq(uint64_t id) {
    for (size_t i = 0; i < C.seqs.n; i++)
        if (C.seqs.v[i].id == id) return &C.seqs.v[i];
    return NULL;
}

static cap_graph *graph_of(const cap_seq *q) { return &C.graphs.v[q->graph]; }

static cap_graph *graph_lookup(xsa_graph g) {
    uint64_t v = (uint64_t)(uintptr_t)g;
    if (!v || (v & 0xffffffffu)) return NULL;
    for (size_t i = 0; i < C.graphs.n; i++)
        if (C.graphs.v[i].serial && C.graphs.v[i].serial == v >> 32) return &C.graphs.v[i];
    return NULL;
}

static cap_exec *exec_lookup(xsa_graph_exec e) {
    uint64_t v = (uint64_t)(uintptr_t)e;
    if (!v || (v & 0xffffffffu)) return NULL;
    for (size_t i = 0; i < C.execs.n; i++)
        if (C.execs.v[i].serial && C.execs.v[i].serial == v >> 32) return &C.execs.v[i];
    return NULL;
}

static void *handle_of(uint32_t serial, uint64_t low) { return (void *)(uintptr_t)((uint64_t)serial << 32 | low); }

static const char *stream_text(xsa_stream s, char *buf, size_t len) {
    if (!s) return "the default stream";
    snprintf(buf, len, "stream %p", s);
    return buf;
}

static bool list_copy(node_list *to, const node_list *from) {
    if (!ARRAY_RESERVE(*to, from->n)) return false;
    if (from->n) memcpy(to->v, from->v, from->n * sizeof *from->v);
    to->n = from->n;
    return true;
}

/* Adds the nodes of `from` that `to` lacks. */
static bool list_merge(node_list *to, const node_list *from) {
    if (!ARRAY_RESERVE(*to, to->n + from->n)) return false;
    for (size_t i = 0; i < from->n; i++) {
        size_t k = 0;
        while (k < to->n && to->v[k] != from->v[i]) k++;
        if (k == to->n) to->v[to->n++] = from->v[i];
    }
    return true;
}

static void free_nodes(cap_nodes *nodes) {
    for (size_t i = 0; i < nodes->n; i++) ARRAY_FREE(nodes->v[i].deps);
    ARRAY_FREE(*nodes);
}

/* A graph or executable graph slot: a free one, else a new one. */
#define NEW_SLOT(arr, out)                                                     \
    do {                                                                       \
        (out) = 0;                                                             \
        while ((out) < (arr).n && (arr).v[(out)].serial) (out)++;              \
        if ((out) == (arr).n) {                                                \
            if (!ARRAY_RESERVE((arr), (arr).n + 1)) return XSA_CU_ERROR_OUT_OF_MEMORY; \
            memset(&(arr).v[(arr).n++], 0, sizeof *(arr).v);                   \
        }                                                                      \
    } while (0)

static uint32_t new_serial(void) { return ++C.next_serial ? C.next_serial : ++C.next_serial; }

/* ---- invalidation -------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void invalidate(cap_seq *q, const char *fmt, ...) {
    if (q->invalidated) return;
    q->invalidated = true;
    char why[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    xsa_sim_tl_violation(&S.violations.failed_captures, "capture %llu invalidated: %s",
                         (unsigned long long)q->id, why);
}

/* A call global mode forbids while a capture is under way: invalidates
 * every capture under way; UNSUPPORTED if there was one. */
/* The calling thread's capture interaction mode (XSA_CAPTURE_MODE_*). */
static _Thread_local int thread_mode = XSA_CAPTURE_MODE_GLOBAL;

xsa_cu_result xsa_sim_cap_exchange_mode(int *mode) {
    if (!mode || *mode < XSA_CAPTURE_MODE_GLOBAL || *mode > XSA_CAPTURE_MODE_RELAXED) return XSA_CU_ERROR_INVALID_VALUE;
    int old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return XSA_CU_SUCCESS;
}

/* A call that a global-mode capture under way refuses, unless the calling
 * thread is in relaxed mode (every capture here is global). An invalidated
 * capture still refuses these calls until it ends (H100). */
static xsa_cu_result forbidden(const char *call) {
    if (thread_mode == XSA_CAPTURE_MODE_RELAXED) return XSA_CU_SUCCESS;
    for (size_t i = 0; i < C.seqs.n; i++)
        if (!C.seqs.v[i].invalidated)
            invalidate(&C.seqs.v[i], "%s while it was under way (global mode forbids it)", call);
    return C.seqs.n ? XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED : XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_cap_device_sync(const char *call) { return forbidden(call); }

/* ---- capturing work --------------------------------------------------------------- */

/* A node like `proto` depending on `deps`; its index in *out. */
static bool add_node(cap_graph *g, const cap_node *proto, const node_list *deps, uint32_t *out) {
    if (!ARRAY_RESERVE(g->nodes, g->nodes.n + 1)) return false;
    cap_node nd = *proto;
    nd.deps = (node_list){0};
    if (!list_copy(&nd.deps, deps)) return false;
    *out = (uint32_t)g->nodes.n;
    g->nodes.v[g->nodes.n++] = nd;
    return true;
}

/* The stream's terminals become the one node `node`. */
static void terminal_is(cap_stream *cs, uint32_t node) {
    cs->deps.n = 0;
    cs->deps.v[cs->deps.n++] = node; /* room: the caller reserved one */
}

/* A kernel or copy `nd` (its range checked by the caller) becomes the
 * stream's one terminal node. */
static xsa_cu_result capture_work(cap_stream *cs, const cap_node *nd) {
    uint32_t node;
    if (!ARRAY_RESERVE(cs->deps, 1) || !add_node(graph_of(find_seq(cs->capture)), nd, &cs->deps, &node))
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    terminal_is(cs, node);
    return XSA_CU_SUCCESS;
}

static xsa_cu_result capture_kernel(cap_stream *cs, xsa_devptr ptr, size_t size) {
    if (find_seq(cs->capture)->invalidated) return XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (size == 0 || ptr + size < ptr) return XSA_CU_ERROR_INVALID_VALUE;
    return capture_work(cs, &(cap_node){.ptr = ptr, .size = size, .stream = cs->stream});
}

xsa_cu_result xsa_sim_launch(xsa_stream stream, xsa_devptr ptr, size_t size) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    cap_stream *cs = find_stream(stream);
    xsa_cu_result r = !xsa_sim_tl_stream_valid(stream) ? XSA_CU_ERROR_INVALID_HANDLE
                      : cs ? capture_kernel(cs, ptr, size)
                           : xsa_sim_tl_launch(stream, ptr, size, "a kernel launched");
    pthread_mutex_unlock(&xsa_sim_lock);
    return r;
}

static const char *copy_call(node_kind kind) { return kind == NODE_DTOH ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync"; }

/* A copy on the timeline (outside capture, or replayed). */
static xsa_cu_result timeline_copy(node_kind kind, void *host, xsa_devptr dev, size_t n, xsa_stream stream,
                                   const char *how) {
    char what[64];
    snprintf(what, sizeof what, "a copy (%s)%s", copy_call(kind), how);
    return xsa_sim_tl_copy(kind == NODE_DTOH, host, dev, n, stream, what);
}

/* A copy on a capturing stream is a node with pinned host memory; with
 * pageable memory CUDA cannot capture it. */
xsa_cu_result xsa_sim_cap_copy(bool to_host, void *host, xsa_devptr dev, size_t n, xsa_stream stream) {
    node_kind kind = to_host ? NODE_DTOH : NODE_HTOD;
    if (!host) return XSA_CU_ERROR_INVALID_VALUE;
    if (n == 0) return XSA_CU_SUCCESS;
    if (dev + n < dev) return XSA_CU_ERROR_INVALID_VALUE;
    cap_stream *cs = find_stream(stream);
    if (!cs) return timeline_copy(kind, host, dev, n, stream, "");
    cap_seq *q = find_seq(cs->capture);
    if (q->invalidated) return XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (!xsa_sim_host_pinned(host, n)) {
        invalidate(q, "%s with pageable host memory %p", copy_call(kind), host);
        return XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return capture_work(cs, &(cap_node){.ptr = dev, .size = n, .stream = stream, .kind = kind, .host = host});
}

/* Forgets that the event was recorded in a capture. */
static void uncapture(sim_event *ev) {
    ev->capture = 0;
    ARRAY_FREE(ev->cap_deps);
}

xsa_cu_result xsa_sim_cap_event_record(xsa_event event, xsa_stream stream) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    cap_stream *cs = find_stream(stream);
    if (!ev || !cs) {
        if (ev) uncapture(ev);
        return xsa_sim_tl_event_record(event, stream);
    }
    cap_seq *q = find_seq(cs->capture);
    if (q->invalidated) return XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (!list_copy(&ev->cap_deps, &cs->deps)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    ev->capture = q->id;
    ev->seq = 0; /* the record replaces the event's state: no timeline work */
    ev->clock.n = 0;
    return XSA_CU_SUCCESS;
}

/* A stream not yet in a capture joins capture q with no terminals. */
static cap_stream *join(cap_seq *q, xsa_stream s) {
    if (!ARRAY_RESERVE(C.streams, C.streams.n + 1)) return NULL;
    cap_stream *cs = &C.streams.v[C.streams.n++];
    *cs = (cap_stream){.stream = s, .capture = q->id};
    return cs;
}

xsa_cu_result xsa_sim_cap_stream_wait_event(xsa_stream stream, xsa_event event) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    cap_stream *cs = find_stream(stream);
    if (!ev) return XSA_CU_ERROR_INVALID_HANDLE;
    char a[48];
    if (!ev->capture) {
        if (!cs) return xsa_sim_tl_stream_wait_event(stream, event);
        if (!ev->seq) return XSA_CU_SUCCESS; /* never recorded: no wait, as in CUDA */
        cap_seq *q = find_seq(cs->capture);
        if (q->invalidated) return XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
        invalidate(q, "%s waited on an event recorded outside the capture", stream_text(stream, a, sizeof a));
        return XSA_CU_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    cap_seq *q = find_seq(ev->capture);
    if (!q) return XSA_CU_ERROR_INVALID_VALUE; /* its capture is over: as on the H100 */
    if (cs && cs->capture != q->id) {
        cap_seq *other = find_seq(cs->capture);
        invalidate(other, "%s waited on an event of capture %llu", stream_text(stream, a, sizeof a),
                   (unsigned long long)q->id);
        invalidate(q, "%s of capture %llu waited on one of its events", stream_text(stream, a, sizeof a),
                   (unsigned long long)other->id);
        return XSA_CU_ERROR_STREAM_CAPTURE_MERGE;
    }
    if (q->invalidated) return XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (!stream) { /* the legacy stream cannot join a capture */
        invalidate(q, "the default stream waited on one of its events");
        return XSA_CU_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    if (!cs && !(cs = join(q, stream))) return XSA_CU_ERROR_OUT_OF_MEMORY;
    return list_merge(&cs->deps, &ev->cap_deps) ? XSA_CU_SUCCESS : XSA_CU_ERROR_OUT_OF_MEMORY;
}

/* ---- queries and synchronization ------------------------------------------------ */

static xsa_cu_result stream_sync_call(xsa_stream stream, const char *call) {
    cap_stream *cs = find_stream(stream);
    if (cs && find_seq(cs->capture)->invalidated) return XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
    return forbidden(call);
}

xsa_cu_result xsa_sim_cap_stream_query(xsa_stream stream) {
    xsa_cu_result r = stream_sync_call(stream, "cuStreamQuery");
    return r ? r : xsa_sim_tl_stream_query(stream);
}

xsa_cu_result xsa_sim_cap_stream_synchronize(xsa_stream stream) {
    xsa_cu_result r = stream_sync_call(stream, "cuStreamSynchronize");
    return r ? r : xsa_sim_tl_stream_synchronize(stream);
}

static xsa_cu_result event_sync_call(xsa_event event, const char *call) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    if (!ev) return XSA_CU_ERROR_INVALID_HANDLE;
    if (!ev->capture) return forbidden(call);
    cap_seq *q = find_seq(ev->capture);
    /* Recorded in a capture that has ended: refused until recorded again,
     * with this error on the H100 (tests/gpu/probes/capture_probe.c). */
    if (!q) return XSA_CU_ERROR_INVALID_VALUE;
    char why[64];
    snprintf(why, sizeof why, "%s of an event recorded in it", call);
    invalidate(q, "%s", why);
    forbidden(call);
    return XSA_CU_ERROR_CAPTURED_EVENT;
}

xsa_cu_result xsa_sim_cap_event_query(xsa_event event) {
    xsa_cu_result r = event_sync_call(event, "cuEventQuery");
    return r ? r : xsa_sim_tl_event_query(event);
}

xsa_cu_result xsa_sim_cap_event_synchronize(xsa_event event) {
    xsa_cu_result r = event_sync_call(event, "cuEventSynchronize");
    return r ? r : xsa_sim_tl_event_synchronize(event);
}

xsa_cu_result xsa_sim_cap_stream_destroy(xsa_stream stream) {
    cap_stream *cs = find_stream(stream);
    if (!cs) return xsa_sim_tl_stream_destroy(stream);
    char a[48];
    invalidate(find_seq(cs->capture), "cuStreamDestroy of %s, which is in it", stream_text(stream, a, sizeof a));
    return XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

xsa_cu_result xsa_sim_cap_event_destroy(xsa_event event) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    if (ev) uncapture(ev);
    return xsa_sim_tl_event_destroy(event);
}

/* ---- beginning and ending ------------------------------------------------------- */

xsa_cu_result xsa_sim_cap_begin(xsa_stream stream) {
    if (!stream) return XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream */
    if (find_stream(stream)) return XSA_CU_ERROR_ILLEGAL_STATE;
    size_t slot;
    NEW_SLOT(C.graphs, slot);
    if (!ARRAY_RESERVE(C.seqs, C.seqs.n + 1) || !ARRAY_RESERVE(C.streams, C.streams.n + 1))
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    cap_seq q = {.id = ++C.next_id, .origin = stream, .graph = slot};
    C.graphs.v[slot] = (cap_graph){.serial = new_serial(), .capture = q.id};
    C.seqs.v[C.seqs.n++] = q;
    join(&C.seqs.v[C.seqs.n - 1], stream);
    return XSA_CU_SUCCESS;
}

static void destroy_graph(cap_graph *g) {
    free_nodes(&g->nodes);
    *g = (cap_graph){0};
}

/* Every stream leaves capture q, which ends. */
static void finish(cap_seq *q) {
    for (size_t i = 0; i < C.streams.n;) {
        cap_stream *cs = &C.streams.v[i];
        if (cs->capture != q->id) {
            i++;
            continue;
        }
        ARRAY_FREE(cs->deps);
        ARRAY_FREE(cs->view);
        *cs = C.streams.v[--C.streams.n];
    }
    *q = C.seqs.v[--C.seqs.n];
}

/* A stream of capture q whose terminals are not all ancestors of (or
 * among) the origin's, or NULL. */
static const cap_stream *unjoined(const cap_seq *q, const cap_stream *origin) {
    const cap_graph *g = graph_of(q);
    bool *reach = calloc(g->nodes.n + 1, sizeof *reach);
    if (!reach) return NULL; /* cannot tell: the graph is let through */
    for (size_t k = 0; k < origin->deps.n; k++) reach[origin->deps.v[k]] = true;
    for (size_t i = g->nodes.n; i-- > 0;) /* dependencies are earlier nodes */
        for (size_t k = 0; reach[i] && k < g->nodes.v[i].deps.n; k++) reach[g->nodes.v[i].deps.v[k]] = true;
    const cap_stream *bad = NULL;
    for (size_t i = 0; i < C.streams.n && !bad; i++) {
        const cap_stream *cs = &C.streams.v[i];
        for (size_t k = 0; cs->capture == q->id && k < cs->deps.n && !bad; k++)
            if (!reach[cs->deps.v[k]]) bad = cs;
    }
    free(reach);
    return bad;
}

xsa_cu_result xsa_sim_cap_end(xsa_stream stream, xsa_graph *graph) {
    if (!graph) return XSA_CU_ERROR_INVALID_VALUE;
    *graph = NULL;
    cap_stream *cs = find_stream(stream);
    if (!cs) return XSA_CU_ERROR_ILLEGAL_STATE;
    cap_seq *q = find_seq(cs->capture);
    char a[48], b[48];
    if (q->origin != stream) {
        invalidate(q, "cuStreamEndCapture on %s, which joined it", stream_text(stream, a, sizeof a));
        return XSA_CU_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    cap_graph *g = graph_of(q);
    xsa_cu_result r = XSA_CU_SUCCESS;
    const cap_stream *fork = q->invalidated ? NULL : unjoined(q, cs);
    if (q->invalidated) {
        r = XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (fork) {
        xsa_sim_tl_violation(&S.violations.failed_captures,
                             "capture %llu ended unjoined: the work of %s was not joined back into %s",
                             (unsigned long long)q->id, stream_text(fork->stream, a, sizeof a),
                             stream_text(stream, b, sizeof b));
        r = XSA_CU_ERROR_STREAM_CAPTURE_UNJOINED;
    }
    if (r) destroy_graph(g);
    else {
        g->capture = 0;
        *graph = handle_of(g->serial, 0);
    }
    finish(q);
    return r;
}

xsa_cu_result xsa_sim_cap_info(xsa_stream stream, int *status, uint64_t *id, const xsa_graph_node **deps, size_t *n) {
    if (!status) return XSA_CU_ERROR_INVALID_VALUE;
    cap_stream *cs = find_stream(stream);
    const cap_seq *q = cs ? find_seq(cs->capture) : NULL;
    *status = !q ? XSA_CAPTURE_NONE : q->invalidated ? XSA_CAPTURE_INVALIDATED : XSA_CAPTURE_ACTIVE;
    if (*status != XSA_CAPTURE_ACTIVE) return XSA_CU_SUCCESS;
    if (deps) {
        if (!ARRAY_RESERVE(cs->view, cs->deps.n + 1)) return XSA_CU_ERROR_OUT_OF_MEMORY;
        uint32_t serial = graph_of(q)->serial;
        for (size_t k = 0; k < cs->deps.n; k++) cs->view.v[k] = handle_of(serial, cs->deps.v[k] + 1u);
        cs->view.n = cs->deps.n;
        *deps = cs->view.v;
    }
    if (id) *id = q->id;
    if (n) *n = cs->deps.n;
    return XSA_CU_SUCCESS;
}

/* ---- graphs ---------------------------------------------------------------------- */

xsa_cu_result xsa_sim_cap_node_deps(xsa_graph_node node, xsa_graph_node *deps, size_t *n) {
    uint64_t v = (uint64_t)(uintptr_t)node, idx = (v & 0xffffffffu) - 1;
    cap_graph *g = graph_lookup(handle_of((uint32_t)(v >> 32), 0));
    if (!n || !g || !(v & 0xffffffffu) || idx >= g->nodes.n) return XSA_CU_ERROR_INVALID_VALUE;
    const node_list *d = &g->nodes.v[idx].deps;
    if (!deps) {
        *n = d->n;
        return XSA_CU_SUCCESS;
    }
    size_t k = 0;
    for (; k < *n && k < d->n; k++) deps[k] = handle_of(g->serial, d->v[k] + 1u);
    for (size_t j = k; j < *n; j++) deps[j] = NULL;
    *n = k;
    return XSA_CU_SUCCESS;
}

static bool copy_nodes(cap_nodes *to, const cap_nodes *from) {
    if (!ARRAY_RESERVE(*to, from->n)) return false;
    for (; to->n < from->n; to->n++) {
        cap_node *nd = &to->v[to->n];
        *nd = from->v[to->n];
        nd->deps = (node_list){0};
        if (!list_copy(&nd->deps, &from->v[to->n].deps)) return false;
    }
    return true;
}

/* The sentence for the first two nodes on overlapping addresses, neither
 * an ancestor of the other ("" if none); false without memory. */
static bool find_race(const cap_nodes *nodes, char *out, size_t len) {
    size_t n = nodes->n, words = (n + 63) / 64;
    out[0] = 0;
    uint64_t *anc = calloc(n * words + 1, sizeof *anc); /* anc[i*words..]: ancestors of node i */
    if (!anc) return false;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < nodes->v[i].deps.n; k++) {
            uint32_t d = nodes->v[i].deps.v[k];
            for (size_t w = 0; w < words; w++) anc[i * words + w] |= anc[d * words + w];
            anc[i * words + d / 64] |= (uint64_t)1 << (d % 64);
        }
    for (size_t j = 0; j < n && !out[0]; j++)
        for (size_t i = 0; i < j && !out[0]; i++) {
            const cap_node *x = &nodes->v[i], *y = &nodes->v[j];
            bool overlap = x->ptr < y->ptr + y->size && y->ptr < x->ptr + x->size;
            if (!overlap || (anc[j * words + i / 64] >> (i % 64) & 1)) continue;
            char a[48], b[48];
            snprintf(out, len,
                     "race in a graph: node %zu (captured on %s) and node %zu (captured on %s) both use %#llx, "
                     "and neither depends on the other",
                     i, stream_text(x->stream, a, sizeof a), j, stream_text(y->stream, b, sizeof b),
                     (unsigned long long)(x->ptr > y->ptr ? x->ptr : y->ptr));
        }
    free(anc);
    return true;
}

xsa_cu_result xsa_sim_cap_instantiate(xsa_graph_exec *exec, xsa_graph graph) {
    cap_graph *g = graph_lookup(graph);
    if (!exec || !g) return XSA_CU_ERROR_INVALID_VALUE;
    size_t gi = (size_t)(g - C.graphs.v), slot;
    NEW_SLOT(C.execs, slot);
    g = &C.graphs.v[gi];
    cap_exec *e = &C.execs.v[slot];
    if (!copy_nodes(&e->nodes, &g->nodes) || !find_race(&e->nodes, e->race, sizeof e->race)) {
        free_nodes(&e->nodes);
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    e->serial = new_serial();
    *exec = handle_of(e->serial, 0);
    return XSA_CU_SUCCESS;
}

/* The executable graph's nodes join capture of cs (a child graph): roots
 * depend on the stream's terminals, which become its sinks. */
static xsa_cu_result capture_graph(cap_stream *cs, const cap_exec *e) {
    cap_seq *q = find_seq(cs->capture);
    if (q->invalidated) return XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED;
    cap_graph *g = graph_of(q);
    uint32_t base = (uint32_t)g->nodes.n, node;
    bool *sink = calloc(e->nodes.n + 1, sizeof *sink);
    if (!sink) return XSA_CU_ERROR_OUT_OF_MEMORY;
    bool ok = true;
    for (size_t i = 0; ok && i < e->nodes.n; i++) {
        const cap_node *x = &e->nodes.v[i];
        sink[i] = true;
        node_list deps = {0};
        ok = x->deps.n ? list_copy(&deps, &x->deps) : list_copy(&deps, &cs->deps);
        for (size_t k = 0; ok && x->deps.n && k < deps.n; k++) {
            sink[deps.v[k]] = false;
            deps.v[k] += base;
        }
        ok = ok && add_node(g, x, &deps, &node);
        ARRAY_FREE(deps);
    }
    if (ok && e->nodes.n) {
        cs->deps.n = 0;
        ok = ARRAY_RESERVE(cs->deps, e->nodes.n);
        for (size_t i = 0; ok && i < e->nodes.n; i++)
            if (sink[i]) cs->deps.v[cs->deps.n++] = base + (uint32_t)i;
    }
    free(sink);
    if (ok) return XSA_CU_SUCCESS;
    invalidate(q, "out of host memory adding a graph to it");
    return XSA_CU_ERROR_OUT_OF_MEMORY;
}

/* A kernel node, or a copy node while its host memory is still pinned. */
static xsa_cu_result replay_node(const cap_node *x, xsa_stream stream) {
    if (x->kind == NODE_KERNEL) return xsa_sim_tl_launch(stream, x->ptr, x->size, "a graph node replayed");
    if (xsa_sim_host_pinned(x->host, x->size)) return timeline_copy(x->kind, x->host, x->ptr, x->size, stream, " replayed");
    char a[48];
    xsa_sim_tl_violation(&S.violations.bad_launches,
                         "a copy node (%s) replayed on %s uses host memory %p that is no longer pinned: "
                         "CUDA_ERROR_ILLEGAL_ADDRESS",
                         copy_call(x->kind), stream_text(stream, a, sizeof a), x->host);
    return XSA_CU_ERROR_ILLEGAL_ADDRESS;
}

xsa_cu_result xsa_sim_cap_graph_launch(xsa_graph_exec exec, xsa_stream stream) {
    const cap_exec *e = exec_lookup(exec);
    if (!e) return XSA_CU_ERROR_INVALID_VALUE;
    cap_stream *cs = find_stream(stream);
    if (cs) return capture_graph(cs, e);
    if (e->race[0]) xsa_sim_tl_violation(&S.violations.races, "%s", e->race);
    xsa_cu_result r = XSA_CU_SUCCESS;
    for (size_t i = 0; i < e->nodes.n; i++) {
        const cap_node *x = &e->nodes.v[i];
        xsa_cu_result ri = replay_node(x, stream);
        if (ri == XSA_CU_ERROR_OUT_OF_MEMORY) return ri;
        if (ri) r = ri;
    }
    return r;
}

xsa_cu_result xsa_sim_cap_exec_destroy(xsa_graph_exec exec) {
    cap_exec *e = exec_lookup(exec);
    if (!e) return XSA_CU_ERROR_INVALID_VALUE;
    free_nodes(&e->nodes);
    *e = (cap_exec){0};
    return XSA_CU_SUCCESS;
}

/* The graph of a capture under way is the capture's until it ends. */
xsa_cu_result xsa_sim_cap_graph_destroy(xsa_graph graph) {
    cap_graph *g = graph_lookup(graph);
    if (!g || g->capture) return XSA_CU_ERROR_INVALID_VALUE;
    destroy_graph(g);
    return XSA_CU_SUCCESS;
}

size_t xsa_sim_graph_exec_ranges(xsa_graph_exec exec, xsa_sim_range *out, size_t max) {
    pthread_mutex_lock(&xsa_sim_lock);
    const cap_exec *e = exec_lookup(exec);
    size_t n = e ? e->nodes.n : 0;
    for (size_t i = 0; out && i < n && i < max; i++) out[i] = (xsa_sim_range){e->nodes.v[i].ptr, e->nodes.v[i].size};
    pthread_mutex_unlock(&xsa_sim_lock);
    return n;
}

/* ---- usage and the checker ------------------------------------------------------- */

bool xsa_sim_cap_live(void) {
    for (size_t i = 0; i < C.graphs.n; i++)
        if (C.graphs.v[i].serial) return true;
    for (size_t i = 0; i < C.execs.n; i++)
        if (C.execs.v[i].serial) return true;
    return false; /* a capture has a graph */
}

void xsa_sim_cap_usage(xsa_sim_usage *u) {
    u->captures = C.seqs.n;
    for (size_t i = 0; i < C.graphs.n; i++) u->graphs += C.graphs.v[i].serial != 0;
    for (size_t i = 0; i < C.execs.n; i++) u->graph_execs += C.execs.v[i].serial != 0;
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), 0)

/* Node indices below `limit`, each once. */
static int check_list(const node_list *l, size_t limit, const char *what, char *err, size_t errlen) {
    for (size_t k = 0; k < l->n; k++) {
        if (l->v[k] >= limit) return FAIL("%s names node %u of %zu", what, l->v[k], limit);
        for (size_t j = 0; j < k; j++)
            if (l->v[j] == l->v[k]) return FAIL("%s names node %u twice", what, l->v[k]);
    }
    return 1;
}

/* Nodes depend on earlier nodes only (a topological order), cover memory. */
static int check_nodes(const cap_nodes *nodes, const char *what, char *err, size_t errlen) {
    for (size_t i = 0; i < nodes->n; i++) {
        const cap_node *nd = &nodes->v[i];
        if (nd->size == 0 || nd->ptr + nd->size < nd->ptr) return FAIL("%s: node %zu has no range", what, i);
        if ((nd->kind != NODE_KERNEL) != (nd->host != NULL)) return FAIL("%s: node %zu's host memory is wrong", what, i);
        if (!check_list(&nd->deps, i, what, err, errlen)) return 0;
    }
    return 1;
}

static int check_serials(char *err, size_t errlen) {
    size_t building = 0;
    for (size_t i = 0; i < C.graphs.n + C.execs.n; i++) {
        uint32_t s = i < C.graphs.n ? C.graphs.v[i].serial : C.execs.v[i - C.graphs.n].serial;
        if (!s) continue;
        for (size_t j = 0; j < i; j++)
            if ((j < C.graphs.n ? C.graphs.v[j].serial : C.execs.v[j - C.graphs.n].serial) == s)
                return FAIL("serial %u is on two graphs", s);
        if (i >= C.graphs.n) {
            if (!check_nodes(&C.execs.v[i - C.graphs.n].nodes, "an executable graph", err, errlen)) return 0;
            continue;
        }
        const cap_graph *g = &C.graphs.v[i];
        if (g->capture) {
            const cap_seq *q = find_seq(g->capture);
            if (!q || q->graph != i) return FAIL("graph slot %zu is built by no capture under way", i);
            building++;
        }
        if (!check_nodes(&g->nodes, "a graph", err, errlen)) return 0;
    }
    if (building != C.seqs.n) return FAIL("%zu captures under way, %zu graphs being built", C.seqs.n, building);
    return 1;
}

static int check_captures(char *err, size_t errlen) {
    for (size_t i = 0; i < C.seqs.n; i++) {
        const cap_seq *q = &C.seqs.v[i];
        if (!q->id || q->id > C.next_id) return FAIL("capture %zu has id %llu", i, (unsigned long long)q->id);
        for (size_t j = 0; j < i; j++)
            if (C.seqs.v[j].id == q->id) return FAIL("two captures have id %llu", (unsigned long long)q->id);
        if (q->graph >= C.graphs.n || C.graphs.v[q->graph].capture != q->id)
            return FAIL("capture %llu names a graph it does not build", (unsigned long long)q->id);
        const cap_stream *o = find_stream(q->origin);
        if (!o || o->capture != q->id) return FAIL("capture %llu's origin stream is not in it", (unsigned long long)q->id);
    }
    for (size_t i = 0; i < C.streams.n; i++) {
        const cap_stream *cs = &C.streams.v[i];
        if (find_stream(cs->stream) != cs) return FAIL("a stream is in capture twice");
        const cap_seq *q = find_seq(cs->capture);
        if (!q) return FAIL("capturing stream %zu names no capture under way", i);
        if (!check_list(&cs->deps, graph_of(q)->nodes.n, "a capturing stream's terminals", err, errlen)) return 0;
    }
    for (size_t i = 0; i < S.events.n; i++) {
        const sim_event *ev = &S.events.v[i];
        if (!ev->capture) {
            if (ev->cap_deps.n) return FAIL("event slot %zu keeps captured terminals", i);
            continue;
        }
        if (!ev->live || ev->seq || ev->capture > C.next_id) return FAIL("captured event slot %zu is not one", i);
        const cap_seq *q = find_seq(ev->capture);
        if (q && !check_list(&ev->cap_deps, graph_of(q)->nodes.n, "a captured event", err, errlen)) return 0;
    }
    return 1;
}

int xsa_sim_cap_check(char *err, size_t errlen) { return check_serials(err, errlen) && check_captures(err, errlen); }
