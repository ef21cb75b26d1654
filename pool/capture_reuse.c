/*
 * pool/capture_reuse: capture-time reuse of cross-stream frees
 * (graph_capture_record_stream_reuse, PyTorch's PR 158352).
 *
 * Design: during a capture a block freed with uses on other streams is
 * deferred to the capture's end (capture.c), since the events that would
 * say when those uses are over cannot be queried then. With the option
 * on, the free also records the block's free markers: the terminal nodes
 * (cuStreamGetCaptureInfo's dependencies) of its own stream and of every
 * stream that used it. It gets markers only if it was handed out in the
 * same capture and every one of those streams captures into it now, so
 * that all its uses are nodes of the graph (a use outside it, such as
 * work queued before the capture, is ordered by no node, and the block
 * then waits for the capture's end as before: stricter than PyTorch,
 * which marks blocks handed out before the capture too). A malloc on
 * stream S during the capture returns to the cache S's marked blocks whose
 * every marker is an ancestor of (or one of) S's terminal nodes: the next
 * node captured on S depends on all of them, so whatever S does with the
 * memory comes after every use, in the graph and at every replay.
 *
 * Ancestors are found by walking dependencies backwards
 * (cuGraphNodeGetDependencies) from S's terminals. The nodes visited are
 * kept per stream and capture and only ever added to: a node captured on
 * S depends on S's terminals and a wait adds to them, so what was an
 * ancestor of S's terminals stays one. Each node is thus asked for its
 * dependencies about once per stream over a whole capture, and a malloc
 * whose stream has no marked block, or nothing new to visit, makes no such
 * call (PyTorch's first version walked the whole graph at every malloc:
 * captures up to 20x slower). Edges with data (programmatic launches,
 * whose ordering is weaker) are never walked through: the driver refuses
 * the query without the edge data (a lossy query), and markers behind
 * them are not reached (terminals with such edges give no markers and no
 * walk). A driver error only costs the reuse: the block waits for the
 * capture's end, and a walk that failed half-way starts again. Everything
 * is forgotten when no capture is left, as capture.c then flushes the
 * deferred frees.
 */
#include "pool/capture_reuse.h"

#include <stdlib.h>
#include <string.h>

#include "pool/core.h"

/* A set of node handles: open addressing, 0 marks an empty slot (a node
 * handle is never NULL), at most half full. */
typedef struct node_set {
    uintptr_t *slot;
    size_t cap, n;
} node_set;

/* The nodes known to be ancestors of (or among) a stream's terminals in a
 * capture: closed under dependencies after every completed walk. */
typedef struct walk {
    xsa_stream stream;
    uint64_t capture;
    node_set visited;
    size_t scanned;  /* visited.n at the last scan of the stream's marked blocks */
    bool unscanned;  /* a block of the stream was marked since */
} walk;

/* A deferred block with its free markers. */
typedef struct marked {
    xsa_block *block;
    xsa_graph_node *markers;
    size_t n_markers;
} marked;

typedef struct xsa_capture_reuse {
    marked *blocks;
    size_t n_blocks, cap_blocks;
    walk *walks;
    size_t n_walks, cap_walks;
    uintptr_t *stack; /* a walk's nodes to visit */
    size_t n_stack, cap_stack;
    xsa_graph_node *deps; /* one node's dependencies */
    size_t cap_deps;
} xsa_capture_reuse;

enum { FIRST_DEPS = 8 };

/* Makes room for `want` elements of `size` bytes in *v (capacity *cap). */
static bool grow(void **v, size_t *cap, size_t want, size_t size) {
    if (want <= *cap) return true;
    size_t n = *cap ? *cap : 8;
    while (n < want) n *= 2;
    void *grown = realloc(*v, n * size);
    if (!grown) return false;
    *v = grown;
    *cap = n;
    return true;
}

/* ---- node sets ---- */

static size_t hash(uintptr_t v) {
    uint64_t h = (uint64_t)v;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h;
}

static bool set_has(const node_set *s, uintptr_t v) {
    if (!s->cap) return false;
    for (size_t i = hash(v) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->slot[i] == v) return true;
        if (!s->slot[i]) return false;
    }
}

static void set_put(uintptr_t *slot, size_t cap, uintptr_t v) {
    size_t i = hash(v) & (cap - 1);
    while (slot[i]) i = (i + 1) & (cap - 1);
    slot[i] = v;
}

/* Adds v (not in s); false if out of host memory. */
static bool set_add(node_set *s, uintptr_t v) {
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        uintptr_t *slot = calloc(cap, sizeof *slot);
        if (!slot) return false;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) set_put(slot, cap, s->slot[i]);
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    set_put(s->slot, s->cap, v);
    s->n++;
    return true;
}

static void set_free(node_set *s) {
    free(s->slot);
    *s = (node_set){0};
}

/* ---- the state ---- */

static xsa_capture_reuse *state(xsa_pool *p) {
    if (!p->reuse) p->reuse = calloc(1, sizeof *p->reuse);
    return p->reuse;
}

void xsa_pool_set_capture_reuse(xsa_pool *p, bool on) { p->opt.capture_reuse = on; }

void xsa_capture_reuse_forget(xsa_pool *p) {
    xsa_capture_reuse *r = p->reuse;
    if (!r) return;
    for (size_t i = 0; i < r->n_blocks; i++) free(r->blocks[i].markers);
    for (size_t i = 0; i < r->n_walks; i++) set_free(&r->walks[i].visited);
    free(r->blocks);
    free(r->walks);
    free(r->stack);
    free(r->deps);
    free(r);
    p->reuse = NULL;
}

/* The walk of (stream, capture), or NULL. */
static walk *find_walk(xsa_capture_reuse *r, xsa_stream stream, uint64_t capture) {
    for (size_t i = 0; i < r->n_walks; i++)
        if (r->walks[i].stream == stream && r->walks[i].capture == capture) return &r->walks[i];
    return NULL;
}

/* The walk of (stream, capture), new if need be: a stream is in one
 * capture at a time, so a walk of another capture on it is over and its
 * slot is taken. NULL if out of host memory. */
static walk *walk_for(xsa_capture_reuse *r, xsa_stream stream, uint64_t capture) {
    walk *w = find_walk(r, stream, capture);
    if (w) return w;
    for (size_t i = 0; i < r->n_walks && !w; i++)
        if (r->walks[i].stream == stream) w = &r->walks[i];
    if (!w) {
        if (!grow((void **)&r->walks, &r->cap_walks, r->n_walks + 1, sizeof *r->walks)) return NULL;
        w = &r->walks[r->n_walks++];
        w->visited = (node_set){0};
    }
    set_free(&w->visited);
    *w = (walk){.stream = stream, .capture = capture, .unscanned = true};
    return w;
}

/* ---- the free: markers ---- */

/* Adds stream s's terminal nodes to *m if s captures into `capture`. */
static bool add_terminals(xsa_pool *p, marked *m, size_t *cap, xsa_stream s, uint64_t capture) {
    int status = XSA_CAPTURE_NONE;
    uint64_t id = 0;
    const xsa_graph_node *t = NULL;
    size_t n = 0;
    if (XSA_DRV(p->drv, stream_get_capture_info, s, &status, &id, &t, &n) != XSA_CU_SUCCESS ||
        status != XSA_CAPTURE_ACTIVE || id != capture)
        return false;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < m->n_markers && m->markers[k] != t[i]) k++;
        if (k < m->n_markers) continue; /* also a terminal of another stream */
        if (!grow((void **)&m->markers, cap, m->n_markers + 1, sizeof *m->markers)) return false;
        m->markers[m->n_markers++] = t[i];
    }
    return true;
}

void xsa_capture_reuse_free(xsa_pool *p, xsa_block *b) {
    uint64_t capture = b->capture_id;
    if (!p->opt.capture_reuse || !capture) return;
    marked m = {.block = b};
    size_t cap = 0;
    bool ok = add_terminals(p, &m, &cap, b->stream, capture);
    for (int i = 0; ok && i < b->n_stream_uses; i++) ok = add_terminals(p, &m, &cap, b->stream_uses[i], capture);
    /* No marker at all (no node captured yet on those streams): PyTorch's
     * rule, the block waits for the capture's end. */
    xsa_capture_reuse *r = ok && m.n_markers ? state(p) : NULL;
    if (!r || !grow((void **)&r->blocks, &r->cap_blocks, r->n_blocks + 1, sizeof *r->blocks)) {
        free(m.markers);
        return;
    }
    r->blocks[r->n_blocks++] = m;
    walk *w = find_walk(r, b->stream, capture);
    if (w) w->unscanned = true;
}

/* ---- the malloc: walks ---- */

/* Node v's dependencies into r->deps; their count in *n. One call when
 * there are fewer than the buffer holds, else the count is asked for.
 * The driver's result (out of host memory: XSA_CU_ERROR_OUT_OF_MEMORY). */
static xsa_cu_result dependencies(xsa_pool *p, xsa_capture_reuse *r, uintptr_t v, size_t *n) {
    if (!grow((void **)&r->deps, &r->cap_deps, FIRST_DEPS, sizeof *r->deps)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    xsa_graph_node node = (xsa_graph_node)v;
    size_t k = r->cap_deps, count = 0;
    xsa_cu_result res = XSA_DRV(p->drv, graph_node_get_dependencies, node, r->deps, &k);
    if (res != XSA_CU_SUCCESS || k < r->cap_deps) {
        *n = k;
        return res;
    }
    if ((res = XSA_DRV(p->drv, graph_node_get_dependencies, node, NULL, &count)) != XSA_CU_SUCCESS) return res;
    if (count > r->cap_deps) {
        if (!grow((void **)&r->deps, &r->cap_deps, count, sizeof *r->deps)) return XSA_CU_ERROR_OUT_OF_MEMORY;
        k = count;
        if ((res = XSA_DRV(p->drv, graph_node_get_dependencies, node, r->deps, &k)) != XSA_CU_SUCCESS) return res;
    }
    *n = k < count ? k : count;
    return XSA_CU_SUCCESS;
}

static bool push(xsa_capture_reuse *r, uintptr_t v) {
    if (!grow((void **)&r->stack, &r->cap_stack, r->n_stack + 1, sizeof *r->stack)) return false;
    r->stack[r->n_stack++] = v;
    return true;
}

/* Adds to w the terminals t[0..n) and their ancestors not yet in it. A
 * node joins w once its dependencies are on the stack, so a finished walk
 * leaves w closed under dependencies, but for nodes whose dependencies
 * have edge data (a lossy query): such a node joins without them, as its
 * ancestors through those edges may still run when it starts, and it is
 * never asked again. On any other driver error or out of host memory, w
 * is emptied (what it holds is true, but the ancestors of nodes left
 * half-done would never be visited) and false returned. */
static bool extend(xsa_pool *p, xsa_capture_reuse *r, walk *w, const xsa_graph_node *t, size_t n) {
    r->n_stack = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++)
        if (!set_has(&w->visited, (uintptr_t)t[i])) ok = push(r, (uintptr_t)t[i]);
    while (ok && r->n_stack) {
        uintptr_t v = r->stack[--r->n_stack];
        if (set_has(&w->visited, v)) continue;
        size_t k = 0;
        xsa_cu_result res = dependencies(p, r, v, &k);
        ok = res == XSA_CU_SUCCESS || res == XSA_CU_ERROR_LOSSY_QUERY;
        for (size_t j = 0; ok && res == XSA_CU_SUCCESS && j < k; j++)
            if (!set_has(&w->visited, (uintptr_t)r->deps[j])) ok = push(r, (uintptr_t)r->deps[j]);
        ok = ok && set_add(&w->visited, v);
    }
    if (ok) return true;
    r->n_stack = 0;
    set_free(&w->visited);
    w->unscanned = true;
    return false;
}

/* Marked block m is of this stream and capture: markers are compared
 * within their own capture only, since the driver may give a node of a
 * later graph the handle of a node of an ended one. */
static bool marks_of(const marked *m, xsa_stream stream, uint64_t capture) {
    return m->block->stream == stream && m->block->capture_id == capture;
}

static bool all_visited(const marked *m, const walk *w) {
    for (size_t k = 0; k < m->n_markers; k++)
        if (!set_has(&w->visited, (uintptr_t)m->markers[k])) return false;
    return true;
}

/* b leaves the capture's deferred frees (capture.c's list). */
static void undefer(xsa_pool *p, xsa_block *b) {
    for (size_t i = 0; i < p->n_deferred; i++)
        if (p->deferred[i] == b) {
            p->deferred[i] = p->deferred[--p->n_deferred];
            break;
        }
    b->capture_deferred = false;
}

/* Marked block i returns to the cache: the graph orders its uses before
 * the stream's next work, so no event is needed for them. */
static void reclaim(xsa_pool *p, xsa_capture_reuse *r, size_t i) {
    xsa_block *b = r->blocks[i].block;
    free(r->blocks[i].markers);
    r->blocks[i] = r->blocks[--r->n_blocks];
    undefer(p, b);
    b->n_stream_uses = 0;
    xsa_pool_block_done(p, b);
}

uint64_t xsa_capture_reuse_malloc(xsa_pool *p, xsa_stream stream) {
    if (!p->opt.capture_reuse) return 0;
    int status = XSA_CAPTURE_NONE;
    uint64_t capture = 0;
    const xsa_graph_node *t = NULL;
    size_t n = 0;
    if (XSA_DRV(p->drv, stream_get_capture_info, stream, &status, &capture, &t, &n) != XSA_CU_SUCCESS ||
        status != XSA_CAPTURE_ACTIVE)
        return 0;
    xsa_capture_reuse *r = p->reuse;
    size_t first = 0;
    while (r && first < r->n_blocks && !marks_of(&r->blocks[first], stream, capture)) first++;
    if (!r || first == r->n_blocks) return capture; /* nothing to reuse: no walk */
    walk *w = walk_for(r, stream, capture);
    if (!w || !extend(p, r, w, t, n)) return capture;
    if (w->visited.n == w->scanned && !w->unscanned) return capture; /* nothing new since the last scan */
    for (size_t i = first; i < r->n_blocks;)
        if (marks_of(&r->blocks[i], stream, capture) && all_visited(&r->blocks[i], w))
            reclaim(p, r, i); /* the last entry moved to i */
        else
            i++;
    w->scanned = w->visited.n;
    w->unscanned = false;
    return capture;
}

/* ---- the checker ---- */

#define FAIL(...) xsa_check_fail(err, errlen, __VA_ARGS__)

static int check_marked(const xsa_pool *p, const xsa_capture_reuse *r, size_t i, char *err, size_t errlen) {
    const marked *m = &r->blocks[i];
    const xsa_block *b = m->block;
    if (!b->capture_deferred || b->allocated || b->event_count)
        return FAIL("marked block %#lx: not a deferred free", (unsigned long)b->ptr);
    if (!b->capture_id) return FAIL("marked block %#lx: handed out in no capture", (unsigned long)b->ptr);
    if (!m->n_markers) return FAIL("marked block %#lx: no free marker", (unsigned long)b->ptr);
    size_t listed = 0;
    for (size_t k = 0; k < p->n_deferred; k++) listed += p->deferred[k] == b;
    if (listed != 1) return FAIL("marked block %#lx: listed %zu times among deferred frees", (unsigned long)b->ptr, listed);
    for (size_t j = 0; j < i; j++)
        if (r->blocks[j].block == b) return FAIL("block %#lx: marked twice", (unsigned long)b->ptr);
    for (size_t k = 0; k < m->n_markers; k++) {
        if (!m->markers[k]) return FAIL("marked block %#lx: a NULL marker", (unsigned long)b->ptr);
        for (size_t j = 0; j < k; j++)
            if (m->markers[j] == m->markers[k]) return FAIL("marked block %#lx: a marker twice", (unsigned long)b->ptr);
    }
    return 1;
}

static int check_walk(const xsa_capture_reuse *r, size_t i, char *err, size_t errlen) {
    const walk *w = &r->walks[i];
    if (!w->capture) return FAIL("walk %zu: of no capture", i);
    for (size_t j = 0; j < i; j++)
        if (r->walks[j].stream == w->stream) return FAIL("walks %zu and %zu: one stream", j, i);
    const node_set *s = &w->visited;
    if (s->cap & (s->cap - 1) || 2 * s->n > s->cap) return FAIL("walk %zu: %zu nodes in %zu slots", i, s->n, s->cap);
    size_t used = 0;
    for (size_t k = 0; k < s->cap; k++) {
        if (!s->slot[k]) continue;
        if (!set_has(s, s->slot[k])) return FAIL("walk %zu: a node its probe cannot find", i);
        used++;
    }
    if (used != s->n) return FAIL("walk %zu: %zu nodes counted, %zu in slots", i, s->n, used);
    if (r->n_stack) return FAIL("walk stack left with %zu nodes", r->n_stack);
    return 1;
}

int xsa_capture_reuse_check(const xsa_pool *p, char *err, size_t errlen) {
    const xsa_capture_reuse *r = p->reuse;
    if (!r) return 1;
    if (!p->capturing && (r->n_blocks || r->n_walks)) return FAIL("free markers or walks kept with no capture");
    for (size_t i = 0; i < r->n_blocks; i++)
        if (!check_marked(p, r, i, err, errlen)) return 0;
    for (size_t i = 0; i < r->n_walks; i++)
        if (!check_walk(r, i, err, errlen)) return 0;
    return 1;
}
