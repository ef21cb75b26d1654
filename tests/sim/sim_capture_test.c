/*
 * sim_capture_test: stream capture on the simulated driver (xsalloc/sim.h):
 * captures and their ids, work becoming graph nodes with dependencies,
 * streams joining through events, the calls that invalidate a capture, the
 * end-of-capture errors, and graph replay on the timeline with its
 * violations (unmapped memory, races inside the graph and with streams).
 *
 * Design: every case starts from a fresh configuration, runs xsa_sim_check
 * (which checks the capture state: captures, capturing streams' terminals,
 * graphs' dependencies, captured events) after each step, and ends with no
 * capture, graph, executable graph, event, kernel or memory left. Each rule
 * is tested from both sides where it has two: the call that must fail or
 * count, and the nearest one that must not.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "tests/sim/sim_gpu_fixture.h"
#include "xsalloc/sim.h"

#define FAILED_CAPTURE(word) expect_violations(0, 0, 0, 1, (const char *const[]){(word), NULL})
#define VIOLATIONS(unmapped, races, bad, failed, word) \
    expect_violations(unmapped, races, bad, failed, (const char *const[]){(word), NULL})

/* A stream's capture info; deps copied out (at most 8). */
typedef struct {
    int status;
    uint64_t id;
    size_t n;
    xsa_graph_node deps[8];
} capture_info;

static capture_info info(xsa_stream s) {
    capture_info ci = {.status = -1};
    const xsa_graph_node *deps = NULL;
    OK(XSA_DRV(D, stream_get_capture_info, s, &ci.status, &ci.id, &deps, &ci.n));
    if (ci.status != XSA_CAPTURE_ACTIVE) return ci;
    assert_true(ci.n <= 8);
    for (size_t k = 0; k < ci.n; k++) ci.deps[k] = deps[k];
    return ci;
}

/* The one terminal node of a capturing stream. */
static xsa_graph_node terminal(xsa_stream s) {
    capture_info ci = info(s);
    assert_int_equal(XSA_CAPTURE_ACTIVE, ci.status);
    assert_int_equal(1, ci.n);
    return ci.deps[0];
}

/* The node's dependencies are exactly want[0..n), in any order. */
static void expect_deps(xsa_graph_node node, const xsa_graph_node *want, size_t n) {
    size_t count = 99;
    OK(XSA_DRV(D, graph_node_get_dependencies, node, NULL, &count));
    assert_int_equal(n, count);
    xsa_graph_node got[16];
    assert_true(count <= 16);
    OK(XSA_DRV(D, graph_node_get_dependencies, node, got, &count));
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < count && got[k] != want[i]) k++;
        if (k == count) fail_msg("dependency %zu of %p is missing", i, node);
    }
}

static xsa_graph end_capture(xsa_stream s) {
    xsa_graph g = NULL;
    OK(XSA_DRV(D, stream_end_capture, s, &g));
    assert_non_null(g);
    return g;
}

static xsa_graph_exec instantiate(xsa_graph g) {
    xsa_graph_exec e = NULL;
    OK(XSA_DRV(D, graph_instantiate, &e, g));
    assert_non_null(e);
    return e;
}

static size_t pending_kernels(void) { return usage().pending_kernels; }

/* ---- captures, ids, nodes ------------------------------------------------------ */

static void test_begin_end_status_and_ids(void **state) {
    (void)state;
    assert_int_equal(XSA_CAPTURE_NONE, info(S1).status);
    OK(XSA_DRV(D, stream_begin_capture, S1));
    capture_info a = info(S1);
    assert_int_equal(XSA_CAPTURE_ACTIVE, a.status);
    assert_true(a.id != 0);
    assert_int_equal(0, a.n);
    EXPECT(XSA_CU_ERROR_ILLEGAL_STATE, XSA_DRV(D, stream_begin_capture, S1));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, XSA_DRV(D, stream_begin_capture, NULL));
    OK(XSA_DRV(D, stream_begin_capture, S2));
    capture_info b = info(S2);
    assert_true(b.id != 0 && b.id != a.id);
    assert_int_equal(XSA_CAPTURE_NONE, info(S3).status);
    assert_int_equal(2, usage().captures);
    assert_int_equal(2, usage().graphs);
    xsa_graph g = NULL;
    EXPECT(XSA_CU_ERROR_ILLEGAL_STATE, XSA_DRV(D, stream_end_capture, S3, &g));
    assert_null(g);
    xsa_graph g1 = end_capture(S1), g2 = end_capture(S2);
    assert_ptr_not_equal(g1, g2);
    assert_int_equal(XSA_CAPTURE_NONE, info(S1).status);
    assert_int_equal(0, usage().captures);
    assert_int_equal(2, usage().graphs);
    /* A new capture on the same stream gets a new id. */
    OK(XSA_DRV(D, stream_begin_capture, S1));
    assert_true(info(S1).id > b.id);
    OK(XSA_DRV(D, graph_destroy, end_capture(S1)));
    OK(XSA_DRV(D, graph_destroy, g1));
    OK(XSA_DRV(D, graph_destroy, g2));
    NO_VIOLATION();
}

/* Kernels on a capturing stream run nowhere and are not checked against
 * memory: they become a chain of nodes. */
static void test_kernels_become_chained_nodes(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    OK(XSA_DRV(D, stream_begin_capture, S1));
    launch(S1, m.va, MiB);
    xsa_graph_node n1 = terminal(S1);
    launch(S1, m.va + MiB, MiB);
    xsa_graph_node n2 = terminal(S1);
    launch(S1, m.va + 64 * GRAN, MiB); /* nowhere near memory: fine until replayed */
    xsa_graph_node n3 = terminal(S1);
    assert_int_equal(0, pending_kernels());
    expect_deps(n1, NULL, 0);
    expect_deps(n2, &n1, 1);
    expect_deps(n3, &n2, 1);
    /* A short buffer gets what fits; a long one NULLs after the count. */
    xsa_graph_node buf[3] = {NULL, NULL, NULL};
    size_t count = 0;
    OK(XSA_DRV(D, graph_node_get_dependencies, n3, buf, &count));
    assert_int_equal(0, count);
    buf[1] = (xsa_graph_node)0x1;
    count = 3;
    OK(XSA_DRV(D, graph_node_get_dependencies, n3, buf, &count));
    assert_int_equal(1, count);
    assert_ptr_equal(n2, buf[0]);
    assert_null(buf[1]);
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, xsa_sim_launch(S1, m.va, 0));
    xsa_graph g = end_capture(S1);
    expect_deps(n3, &n2, 1); /* nodes stay valid with their graph */
    OK(XSA_DRV(D, graph_destroy, g));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_node_get_dependencies, n3, NULL, &count));
    NO_VIOLATION();
    drop_mapping(&m);
}

/* S2 joins S1's capture by waiting on an event recorded in it, and joins
 * back the same way: the join node depends on both branches. */
static void test_fork_and_join(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_event fork = new_event(), back = new_event();
    OK(XSA_DRV(D, stream_begin_capture, S1));
    uint64_t id = info(S1).id;
    launch(S1, m.va, 4096);
    xsa_graph_node a = terminal(S1);
    OK(XSA_DRV(D, event_record, fork, S1)); /* recording in a capture is fine */
    OK(XSA_DRV(D, stream_wait_event, S2, fork));
    capture_info joined = info(S2);
    assert_int_equal(XSA_CAPTURE_ACTIVE, joined.status);
    assert_int_equal(id, joined.id);
    assert_int_equal(1, joined.n);
    assert_ptr_equal(a, joined.deps[0]);
    launch(S2, m.va + MiB, 4096);
    xsa_graph_node b = terminal(S2);
    expect_deps(b, &a, 1);
    launch(S1, m.va + 8192, 4096);
    xsa_graph_node c = terminal(S1);
    OK(XSA_DRV(D, event_record, back, S2));
    OK(XSA_DRV(D, stream_wait_event, S1, back));
    capture_info both = info(S1);
    assert_int_equal(2, both.n);
    launch(S1, m.va, MiB);
    expect_deps(terminal(S1), (xsa_graph_node[]){b, c}, 2);
    assert_int_equal(0, pending_kernels());
    OK(XSA_DRV(D, graph_destroy, end_capture(S1)));
    assert_int_equal(XSA_CAPTURE_NONE, info(S2).status); /* the end ends every stream's capture */
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, fork));
    OK(XSA_DRV(D, event_destroy, back));
    drop_mapping(&m);
}

/* What capture-time reuse reads (pool/capture_reuse.c): a fork before
 * any node joins with no terminals and its first node is a root; waiting
 * twice on one event, or on two carrying the same node, adds it once;
 * the origin's terminals after joins are the joined streams' last nodes,
 * and the node after them depends on each. A buffer shorter than a node's
 * dependencies gets as many as fit, and says so. (capture_probe's
 * fork_join_terminals compares these with the real driver.) */
static void test_terminals_through_forks_and_joins(void **state) {
    (void)state;
    enum { SIDE = 10 };
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_event fork = new_event(), back[SIDE];
    OK(XSA_DRV(D, stream_begin_capture, S1));
    OK(XSA_DRV(D, event_record, fork, S1)); /* nothing captured on S1 yet */
    xsa_graph_node last[SIDE];
    for (int i = 0; i < SIDE; i++) {
        xsa_stream side = (xsa_stream)(uintptr_t)(0x2000 + i);
        OK(XSA_DRV(D, stream_wait_event, side, fork));
        OK(XSA_DRV(D, stream_wait_event, side, fork)); /* twice: still nothing */
        capture_info joined = info(side);
        assert_int_equal(XSA_CAPTURE_ACTIVE, joined.status);
        assert_int_equal(0, joined.n);
        launch(side, m.va + (size_t)i * 4096, 4096);
        last[i] = terminal(side);
        expect_deps(last[i], NULL, 0); /* a root */
        back[i] = new_event();
        OK(XSA_DRV(D, event_record, back[i], side));
    }
    assert_int_equal(0, info(S1).n);
    for (int i = 0; i < SIDE; i++) OK(XSA_DRV(D, stream_wait_event, S1, back[i]));
    OK(XSA_DRV(D, stream_wait_event, S1, back[3])); /* again: no duplicate */
    const xsa_graph_node *deps = NULL;
    size_t n = 0;
    int status = 0;
    OK(XSA_DRV(D, stream_get_capture_info, S1, &status, NULL, &deps, &n));
    assert_int_equal(SIDE, n);
    for (int i = 0; i < SIDE; i++) {
        size_t k = 0;
        while (k < n && deps[k] != last[i]) k++;
        if (k == n) fail_msg("side stream %d's last node is not a terminal of S1", i);
    }
    launch(S1, m.va + 64 * 4096, 4096);
    xsa_graph_node join = terminal(S1);
    expect_deps(join, last, SIDE);
    xsa_graph_node some[8];
    size_t got = 8;
    OK(XSA_DRV(D, graph_node_get_dependencies, join, some, &got));
    assert_int_equal(8, got);
    for (int k = 0; k < 8; k++) {
        int i = 0;
        while (i < SIDE && some[k] != last[i]) i++;
        if (i == SIDE) fail_msg("dependency %d of the join is not a side stream's node", k);
    }
    OK(XSA_DRV(D, graph_destroy, end_capture(S1)));
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, fork));
    for (int i = 0; i < SIDE; i++) OK(XSA_DRV(D, event_destroy, back[i]));
    drop_mapping(&m);
}

/* A fork never joined back: no graph, and said why. */
static void test_unjoined_fork(void **state) {
    (void)state;
    xsa_event fork = new_event();
    OK(XSA_DRV(D, stream_begin_capture, S1));
    OK(XSA_DRV(D, event_record, fork, S1));
    OK(XSA_DRV(D, stream_wait_event, S2, fork));
    launch(S2, 0x100000, 4096);
    xsa_graph g = (xsa_graph)0x1;
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_UNJOINED, XSA_DRV(D, stream_end_capture, S1, &g));
    assert_null(g);
    assert_int_equal(XSA_CAPTURE_NONE, info(S2).status);
    assert_int_equal(0, usage().graphs);
    FAILED_CAPTURE("unjoined");
    OK(XSA_DRV(D, event_destroy, fork));
}

/* ---- what invalidates a capture -------------------------------------------------- */

/* After an invalidation the capture stays until its end, which fails. */
static void expect_invalidated_end(xsa_stream origin, const char *why) {
    assert_int_equal(XSA_CAPTURE_INVALIDATED, info(origin).status);
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, xsa_sim_launch(origin, 0x100000, 4096));
    xsa_graph g = (xsa_graph)0x1;
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, XSA_DRV(D, stream_end_capture, origin, &g));
    assert_null(g);
    FAILED_CAPTURE(why);
    assert_int_equal(0, usage().graphs);
}

/* Querying or synchronizing an event recorded in the capture: the H100's
 * CUDA_ERROR_CAPTURED_EVENT, and the capture is invalidated. */
static void test_captured_event_query_invalidates(void **state) {
    (void)state;
    xsa_event e = new_event();
    for (int sync = 0; sync < 2; sync++) {
        OK(XSA_DRV(D, stream_begin_capture, S1));
        launch(S1, 0x100000, 4096);
        OK(XSA_DRV(D, event_record, e, S1));
        EXPECT(XSA_CU_ERROR_CAPTURED_EVENT,
               sync ? XSA_DRV(D, event_synchronize, e) : XSA_DRV(D, event_query, e));
        expect_invalidated_end(S1, sync ? "cuEventSynchronize" : "cuEventQuery");
        /* Still last recorded in a capture that has ended: refused with
         * CUDA_ERROR_INVALID_VALUE on the H100, nothing to invalidate. */
        EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, event_query, e));
        EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, event_synchronize, e));
        EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, stream_wait_event, S2, e));
        NO_VIOLATION();
        OK(XSA_DRV(D, event_record, e, S2)); /* recorded again outside: an event again */
        OK(XSA_DRV(D, event_synchronize, e));
    }
    OK(XSA_DRV(D, event_destroy, e));
}

/* Global mode: while a capture is under way, any query or synchronize and
 * cuMemFree are refused and invalidate it; outside capture they work. */
static void test_sync_calls_forbidden_during_capture(void **state) {
    (void)state;
    xsa_event e = new_event();
    xsa_devptr p = 0;
    OK(XSA_DRV(D, mem_alloc, &p, MiB, 0));
    OK(XSA_DRV(D, event_record, e, S2));
    for (int how = 0; how < 6; how++) {
        OK(XSA_DRV(D, stream_begin_capture, S1));
        xsa_cu_result r = how == 0 ? XSA_DRV(D, stream_query, S1)
                        : how == 1 ? XSA_DRV(D, stream_synchronize, S1)
                        : how == 2 ? XSA_DRV(D, stream_synchronize, S2)
                        : how == 3 ? XSA_DRV(D, event_query, e)
                        : how == 4 ? XSA_DRV(D, event_synchronize, e)
                                   : XSA_DRV(D, mem_free, p);
        assert_int_equal(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, r);
        CHECK();
        /* Invalidated, the capture still refuses them until it ends (H100). */
        assert_int_equal(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, XSA_DRV(D, mem_free, p));
        expect_invalidated_end(S1, "global mode forbids it");
    }
    assert_int_equal(1, usage().mem_allocs); /* the refused free did nothing */
    OK(XSA_DRV(D, stream_query, S1));
    OK(XSA_DRV(D, stream_synchronize, S2));
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, event_synchronize, e));
    OK(XSA_DRV(D, mem_free, p));
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, e));
}

/* Measured on the H100: virtual-memory calls and event records work during
 * a capture, which ends fine; cuMemAlloc is refused and invalidates it. */
static void test_memory_calls_during_capture(void **state) {
    (void)state;
    xsa_event e = new_event();
    OK(XSA_DRV(D, stream_begin_capture, S1));
    mapping m = new_mapping(2);
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, S1));
    drop_mapping(&m);
    assert_int_equal(XSA_CAPTURE_ACTIVE, info(S1).status);
    xsa_graph g = end_capture(S1);
    OK(XSA_DRV(D, graph_destroy, g));
    NO_VIOLATION();
    xsa_devptr p = 0;
    OK(XSA_DRV(D, stream_begin_capture, S1));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, XSA_DRV(D, mem_alloc, &p, MiB, 0));
    assert_int_equal(0, usage().mem_allocs);
    expect_invalidated_end(S1, "cuMemAlloc");
    OK(XSA_DRV(D, event_destroy, e));
}

/* A thread in relaxed mode may allocate, free and query outside work during
 * a global capture, which ends fine (PyTorch's cudaMalloc in capture); a
 * captured event's query is refused whatever the mode. */
static void test_relaxed_thread_may_allocate(void **state) {
    (void)state;
    xsa_devptr before = 0, during = 0;
    xsa_event outside = new_event(), inside = new_event();
    OK(XSA_DRV(D, mem_alloc, &before, MiB, 0));
    OK(XSA_DRV(D, event_record, outside, S2));
    OK(XSA_DRV(D, stream_begin_capture, S1));
    launch(S1, before, MiB);
    OK(XSA_DRV(D, event_record, inside, S1));
    int mode = XSA_CAPTURE_MODE_RELAXED;
    OK(XSA_DRV(D, thread_exchange_capture_mode, &mode));
    assert_int_equal(XSA_CAPTURE_MODE_GLOBAL, mode);
    OK(XSA_DRV(D, mem_alloc, &during, MiB, 0));
    OK(XSA_DRV(D, event_synchronize, outside));
    OK(XSA_DRV(D, mem_free, during));
    assert_int_equal(XSA_CAPTURE_ACTIVE, info(S1).status);
    OK(XSA_DRV(D, thread_exchange_capture_mode, &mode));
    assert_int_equal(XSA_CAPTURE_MODE_RELAXED, mode);
    xsa_graph g = end_capture(S1);
    OK(XSA_DRV(D, graph_destroy, g));
    /* Back in global mode: refused again. */
    OK(XSA_DRV(D, stream_begin_capture, S1));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, XSA_DRV(D, mem_alloc, &during, MiB, 0));
    expect_invalidated_end(S1, "cuMemAlloc");
    /* Relaxed, a captured event is refused still, and invalidates. */
    mode = XSA_CAPTURE_MODE_RELAXED;
    OK(XSA_DRV(D, thread_exchange_capture_mode, &mode));
    OK(XSA_DRV(D, stream_begin_capture, S1));
    launch(S1, before, MiB);
    OK(XSA_DRV(D, event_record, inside, S1));
    EXPECT(XSA_CU_ERROR_CAPTURED_EVENT, XSA_DRV(D, event_query, inside));
    expect_invalidated_end(S1, "cuEventQuery");
    OK(XSA_DRV(D, thread_exchange_capture_mode, &mode));
    mode = 7;
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, thread_exchange_capture_mode, &mode));
    OK(XSA_DRV(D, mem_free, before));
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, outside));
    OK(XSA_DRV(D, event_destroy, inside));
}

/* Dependencies may not cross the capture's boundary. */
static void test_isolation_merge_and_unmatched(void **state) {
    (void)state;
    xsa_event outside = new_event(), never = new_event(), inside = new_event();
    OK(XSA_DRV(D, event_record, outside, S2));
    OK(XSA_DRV(D, stream_begin_capture, S1));
    OK(XSA_DRV(D, stream_wait_event, S1, never)); /* never recorded: no wait at all */
    assert_int_equal(XSA_CAPTURE_ACTIVE, info(S1).status);
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_ISOLATION, XSA_DRV(D, stream_wait_event, S1, outside));
    expect_invalidated_end(S1, "recorded outside the capture");
    /* The legacy stream cannot join. */
    OK(XSA_DRV(D, stream_begin_capture, S1));
    OK(XSA_DRV(D, event_record, inside, S1));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_IMPLICIT, XSA_DRV(D, stream_wait_event, NULL, inside));
    expect_invalidated_end(S1, "default stream");
    /* Two captures cannot merge: both are invalidated. */
    OK(XSA_DRV(D, stream_begin_capture, S1));
    OK(XSA_DRV(D, stream_begin_capture, S2));
    OK(XSA_DRV(D, event_record, inside, S1));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_MERGE, XSA_DRV(D, stream_wait_event, S2, inside));
    assert_int_equal(XSA_CAPTURE_INVALIDATED, info(S1).status);
    xsa_graph g = NULL;
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, XSA_DRV(D, stream_end_capture, S2, &g));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, XSA_DRV(D, stream_end_capture, S1, &g));
    VIOLATIONS(0, 0, 0, 2, "capture");
    /* Ending on a stream that only joined. */
    OK(XSA_DRV(D, stream_begin_capture, S1));
    OK(XSA_DRV(D, event_record, inside, S1));
    OK(XSA_DRV(D, stream_wait_event, S3, inside));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_UNMATCHED, XSA_DRV(D, stream_end_capture, S3, &g));
    expect_invalidated_end(S1, "which joined it");
    assert_int_equal(XSA_CAPTURE_NONE, info(S3).status);
    OK(XSA_DRV(D, event_destroy, outside));
    OK(XSA_DRV(D, event_destroy, never));
    OK(XSA_DRV(D, event_destroy, inside));
}

/* ---- replay ------------------------------------------------------------------------ */

/* One graph of `n` kernels over m's first page, captured on S1. */
static xsa_graph_exec chain(const mapping *m, int n) {
    OK(XSA_DRV(D, stream_begin_capture, S1));
    for (int i = 0; i < n; i++) launch(S1, m->va + (size_t)i * 4096, 4096);
    xsa_graph g = end_capture(S1);
    xsa_graph_exec e = instantiate(g);
    OK(XSA_DRV(D, graph_destroy, g)); /* the executable graph does not need it */
    return e;
}

/* A replay is kernels on the launch stream's timeline, with its lag. */
static void test_replay_runs_on_timeline(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_graph_exec e = chain(&m, 3);
    xsa_event done = new_event();
    OK(XSA_DRV(D, graph_launch, e, S3));
    assert_int_equal(3, pending_kernels());
    OK(XSA_DRV(D, event_record, done, S3));
    xsa_sim_tick(LAG - 1);
    EXPECT(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, done));
    xsa_sim_tick(1);
    OK(XSA_DRV(D, event_query, done));
    assert_int_equal(0, pending_kernels());
    OK(XSA_DRV(D, graph_launch, e, S2)); /* again, on another stream */
    assert_int_equal(3, pending_kernels());
    NO_VIOLATION();
    OK(XSA_DRV(D, stream_synchronize, S2));
    OK(XSA_DRV(D, graph_exec_destroy, e));
    OK(XSA_DRV(D, event_destroy, done));
    drop_mapping(&m);
}

/* Unmapping under a queued replay, and replaying over unmapped memory: the
 * illegal address an H100 gives. */
static void test_replay_on_unmapped_memory(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_graph_exec e = chain(&m, 2);
    OK(XSA_DRV(D, graph_launch, e, S3));
    OK(XSA_DRV(D, mem_unmap, m.va, m.size));
    VIOLATIONS(1, 0, 0, 0, "illegal address");
    EXPECT(XSA_CU_ERROR_ILLEGAL_ADDRESS, XSA_DRV(D, graph_launch, e, S3));
    VIOLATIONS(0, 0, 2, 0, "a graph node replayed");
    xsa_sim_complete_all();
    OK(XSA_DRV(D, graph_exec_destroy, e));
    OK(XSA_DRV(D, mem_release, m.h));
    OK(XSA_DRV(D, mem_address_free, m.va, m.size));
}

/* A replay races with another stream's kernel it is not ordered with. */
static void test_replay_races_with_stream(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_graph_exec e = chain(&m, 2);
    xsa_event after = new_event();
    OK(XSA_DRV(D, graph_launch, e, S3));
    OK(XSA_DRV(D, event_record, after, S3));
    OK(XSA_DRV(D, stream_wait_event, S2, after));
    launch(S2, m.va, 4096); /* ordered after the replay */
    NO_VIOLATION();
    launch(S1, m.va + 4096, 4096);
    VIOLATIONS(0, 1, 0, 0, "race");
    xsa_sim_complete_all();
    OK(XSA_DRV(D, graph_exec_destroy, e));
    OK(XSA_DRV(D, event_destroy, after));
    drop_mapping(&m);
}

/* Two branches of one graph on the same memory, neither after the other:
 * a race at every launch; the same bytes ordered by the join are fine. */
static void test_race_inside_graph(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_event fork = new_event(), back = new_event();
    for (int ordered = 0; ordered < 2; ordered++) {
        OK(XSA_DRV(D, stream_begin_capture, S1));
        OK(XSA_DRV(D, event_record, fork, S1));
        OK(XSA_DRV(D, stream_wait_event, S2, fork));
        launch(S2, m.va, MiB);
        OK(XSA_DRV(D, event_record, back, S2));
        if (ordered) OK(XSA_DRV(D, stream_wait_event, S1, back));
        launch(S1, m.va + MiB - 1, 2);
        if (!ordered) OK(XSA_DRV(D, stream_wait_event, S1, back));
        xsa_graph g = end_capture(S1);
        xsa_graph_exec e = instantiate(g);
        OK(XSA_DRV(D, graph_destroy, g));
        for (int i = 0; i < 2; i++) OK(XSA_DRV(D, graph_launch, e, S3));
        if (ordered) NO_VIOLATION();
        else VIOLATIONS(0, 2, 0, 0, "race in a graph");
        xsa_sim_complete_all();
        OK(XSA_DRV(D, graph_exec_destroy, e));
    }
    OK(XSA_DRV(D, event_destroy, fork));
    OK(XSA_DRV(D, event_destroy, back));
    drop_mapping(&m);
}

/* The ranges a replay uses, for tests that check them against live blocks. */
static void test_graph_exec_ranges(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_graph_exec e = chain(&m, 3);
    xsa_sim_range r[4];
    memset(r, 0, sizeof r);
    assert_int_equal(3, xsa_sim_graph_exec_ranges(e, r, 4));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(m.va + (size_t)i * 4096, r[i].ptr);
        assert_int_equal(4096, r[i].size);
    }
    assert_int_equal(0, r[3].size);
    assert_int_equal(3, xsa_sim_graph_exec_ranges(e, r, 1));
    assert_int_equal(3, xsa_sim_graph_exec_ranges(e, NULL, 0));
    OK(XSA_DRV(D, graph_exec_destroy, e));
    assert_int_equal(0, xsa_sim_graph_exec_ranges(e, r, 4));
    drop_mapping(&m);
}

/* A graph launched into a capture joins it: its roots after the stream's
 * terminals, its sinks the new terminals. */
static void test_graph_launched_into_capture(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_graph_exec inner = chain(&m, 2);
    OK(XSA_DRV(D, stream_begin_capture, S2));
    launch(S2, m.va + MiB, 4096);
    xsa_graph_node first = terminal(S2);
    OK(XSA_DRV(D, graph_launch, inner, S2));
    xsa_graph_node sink = terminal(S2);
    xsa_graph_node mid = NULL;
    size_t count = 1;
    OK(XSA_DRV(D, graph_node_get_dependencies, sink, &mid, &count));
    expect_deps(mid, &first, 1);
    assert_int_equal(0, pending_kernels());
    xsa_graph g = end_capture(S2);
    xsa_graph_exec outer = instantiate(g);
    assert_int_equal(3, xsa_sim_graph_exec_ranges(outer, NULL, 0));
    OK(XSA_DRV(D, graph_launch, outer, S3));
    assert_int_equal(3, pending_kernels());
    NO_VIOLATION();
    xsa_sim_complete_all();
    OK(XSA_DRV(D, graph_destroy, g));
    OK(XSA_DRV(D, graph_exec_destroy, outer));
    OK(XSA_DRV(D, graph_exec_destroy, inner));
    drop_mapping(&m);
}

/* ---- handles, arguments, faults, configuration ---------------------------------- */

static void test_bad_handles_and_arguments(void **state) {
    (void)state;
    xsa_graph_exec e = NULL;
    xsa_graph g = NULL;
    size_t n = 0;
    int status = 0;
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_instantiate, &e, (xsa_graph)0x1234));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_launch, (xsa_graph_exec)0x1234, S1));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_exec_destroy, NULL));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_destroy, NULL));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_node_get_dependencies, (xsa_graph_node)0x5, NULL, &n));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, stream_get_capture_info, S1, NULL, NULL, NULL, NULL));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, stream_end_capture, S1, NULL));
    OK(XSA_DRV(D, stream_begin_capture, S1));
    launch(S1, 0x100000, 4096);
    xsa_graph_node node = terminal(S1);
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_node_get_dependencies, node, NULL, NULL));
    OK(XSA_DRV(D, stream_get_capture_info, S1, &status, NULL, NULL, NULL)); /* the rest is optional */
    assert_int_equal(XSA_CAPTURE_ACTIVE, status);
    /* The capture's graph is the capture's: a node handle is no graph either. */
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_destroy, (xsa_graph)node));
    g = end_capture(S1);
    e = instantiate(g);
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_launch, (xsa_graph_exec)g, S1));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_destroy, (xsa_graph)e));
    OK(XSA_DRV(D, graph_exec_destroy, e));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_exec_destroy, e));
    OK(XSA_DRV(D, graph_destroy, g));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, graph_destroy, g));
    NO_VIOLATION();
}

/* The new entry points are driver calls: counted and faultable; a faulted
 * begin starts nothing. A graph left alive refuses a new configuration. */
static void test_faults_counts_and_configure(void **state) {
    (void)state;
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT];
    xsa_driver_read_calls(D, before, NULL);
    xsa_sim_fail_call(XSA_DRV_stream_begin_capture, 1, XSA_CU_ERROR_UNKNOWN);
    EXPECT(XSA_CU_ERROR_UNKNOWN, XSA_DRV(D, stream_begin_capture, S1));
    assert_int_equal(XSA_CAPTURE_NONE, info(S1).status);
    OK(XSA_DRV(D, stream_begin_capture, S1));
    xsa_graph g = end_capture(S1);
    xsa_driver_read_calls(D, after, NULL);
    assert_int_equal(2, after[XSA_DRV_stream_begin_capture] - before[XSA_DRV_stream_begin_capture]);
    assert_int_equal(1, after[XSA_DRV_stream_end_capture] - before[XSA_DRV_stream_end_capture]);
    assert_string_equal("graph_launch", xsa_driver_entry_name(XSA_DRV_graph_launch));
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    assert_int_equal(XSA_CU_ERROR_NOT_PERMITTED, xsa_sim_configure(&c));
    OK(XSA_DRV(D, graph_destroy, g));
    assert_int_equal(XSA_CU_SUCCESS, xsa_sim_configure(&c));
    assert_string_equal("CUDA_ERROR_CAPTURED_EVENT: operation not permitted on an event last recorded in a capturing stream",
                        D->error_string(XSA_CU_ERROR_CAPTURED_EVENT));
}

/* Threads capturing and replaying on their own streams at once: the
 * driver's state stays consistent (TSan runs this too). No thread
 * synchronizes: in global mode that would invalidate the others' captures. */
enum { THREADS = 4, ROUNDS = 50 };

typedef struct {
    xsa_stream stream;
    xsa_devptr va;
    int failures;
} worker_arg;

static void *capture_worker(void *p) {
    worker_arg *w = p;
    char err[256];
    for (int i = 0; i < ROUNDS; i++) {
        xsa_graph g = NULL;
        xsa_graph_exec e = NULL;
        bool ok = XSA_DRV(D, stream_begin_capture, w->stream) == XSA_CU_SUCCESS;
        for (int k = 0; ok && k < 3; k++) ok = xsa_sim_launch(w->stream, w->va + (size_t)k * 4096, 4096) == XSA_CU_SUCCESS;
        ok = ok && XSA_DRV(D, stream_end_capture, w->stream, &g) == XSA_CU_SUCCESS;
        ok = ok && XSA_DRV(D, graph_instantiate, &e, g) == XSA_CU_SUCCESS;
        ok = ok && XSA_DRV(D, graph_destroy, g) == XSA_CU_SUCCESS;
        ok = ok && XSA_DRV(D, graph_launch, e, w->stream) == XSA_CU_SUCCESS;
        xsa_sim_complete_stream(w->stream);
        ok = ok && XSA_DRV(D, graph_exec_destroy, e) == XSA_CU_SUCCESS;
        ok = ok && xsa_sim_check(err, sizeof err);
        w->failures += !ok;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    pthread_t t[THREADS];
    worker_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (worker_arg){.stream = (xsa_stream)(uintptr_t)(0x2000 + i), .va = m.va + (size_t)i * 3 * 4096};
        assert_int_equal(0, pthread_create(&t[i], NULL, capture_worker, &args[i]));
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(0, pthread_join(t[i], NULL));
        assert_int_equal(0, args[i].failures);
    }
    CHECK();
    NO_VIOLATION();
    drop_mapping(&m);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_begin_end_status_and_ids),
        T(test_kernels_become_chained_nodes),
        T(test_fork_and_join),
        T(test_terminals_through_forks_and_joins),
        T(test_unjoined_fork),
        T(test_captured_event_query_invalidates),
        T(test_sync_calls_forbidden_during_capture),
        T(test_memory_calls_during_capture),
        T(test_relaxed_thread_may_allocate),
        T(test_isolation_merge_and_unmatched),
        T(test_replay_runs_on_timeline),
        T(test_replay_on_unmapped_memory),
        T(test_replay_races_with_stream),
        T(test_race_inside_graph),
        T(test_graph_exec_ranges),
        T(test_graph_launched_into_capture),
        T(test_bad_handles_and_arguments),
        T(test_faults_counts_and_configure),
        T(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
