/*
 * capture_reuse_test: capture-time reuse (graph_capture_record_stream_reuse,
 * pool/capture_reuse.c) on real captures of the simulated driver, in
 * expandable and classic mode: a block freed during a capture with uses
 * on other streams is reused on its stream once those streams joined back
 * after the uses, never before; with the option off nothing changes.
 *
 * Design: each case captures on S1 with every stream routed to one graph
 * pool, forks and joins streams as torch's wait_stream does (an event
 * recorded on one stream, waited on by the other), and launches a
 * simulated kernel for every use of a block. The pool's and the simulated
 * driver's invariant checkers run after every step. Every capture is then
 * instantiated and replayed twice on the simulated GPU timeline, which
 * must report no violation: a block handed out again before the other
 * streams joined would be two unordered nodes of the graph on the same
 * memory, a race at every replay. PyTorch's test_graph_capture_reclaim_2_
 * streams and _4_streams are the first two cases, step for step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pool/capture_reuse.h"
#include "tests/pool/pool_fixture.h"

#define S2 ((void *)0x2002)
#define S3 ((void *)0x2003)
#define S4 ((void *)0x2004)
static const xsa_mempool_id G1 = {1, 0};
enum { TENSOR = 32 }; /* torch.empty(8) of float32 */

static void reuse_on(xsa_pool_options *o) { o->capture_reuse = true; }

/* ---- streams, kernels, captures ---- */

enum { MAX_EVENTS = 160 };
static xsa_event events[MAX_EVENTS];
static int n_events;

/* torch's to.wait_stream(from): to's next work runs after from's so far. */
static void wait_stream(void *to, void *from) {
    assert_true(n_events < MAX_EVENTS);
    xsa_event e = NULL;
    assert_int_equal(XSA_DRV(drv, event_create, &e, 0), XSA_CU_SUCCESS);
    events[n_events++] = e;
    assert_int_equal(XSA_DRV(drv, event_record, e, from), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, stream_wait_event, to, e), XSA_CU_SUCCESS);
}

static void drop_events(void) {
    for (int i = 0; i < n_events; i++) assert_int_equal(XSA_DRV(drv, event_destroy, events[i]), XSA_CU_SUCCESS);
    n_events = 0;
}

/* A kernel on `stream` that reads and writes the block at ptr. */
static void use(void *stream, void *ptr) {
    assert_int_equal(xsa_sim_launch(stream, (xsa_devptr)(uintptr_t)ptr, TENSOR), XSA_CU_SUCCESS);
}

/* A kernel on `stream` on bytes [at, at + n) of the block at ptr. The
 * simulator takes every kernel for a writer, so concurrent readers of one
 * block are given distinct bytes. */
static void use_part(void *stream, void *ptr, size_t at, size_t n) {
    assert_int_equal(xsa_sim_launch(stream, (xsa_devptr)(uintptr_t)ptr + at, n), XSA_CU_SUCCESS);
}

static void record_stream(xsa_pool *p, void *ptr, void *stream) {
    assert_int_equal(xsa_pool_record_stream(p, ptr, stream, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
}

/* torch.cuda.graph's order: the routing (every stream, as torch's filter
 * accepts the streams of the capture), then the capture on S1. */
static void capture_begin(xsa_pool *p) {
    pool_begin(p, G1, NULL, true);
    assert_int_equal(XSA_DRV(drv, stream_begin_capture, S1), XSA_CU_SUCCESS);
    CHECK(p);
}

static void expect_no_violation(void) {
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use || v.races || v.bad_launches || v.failed_captures) fail_msg("%s", v.first);
}

/* Ends the capture and the routing, then replays the graph twice on S1:
 * the timeline must see no race, no unmapped memory, no failed capture. */
static void capture_end_and_replay(xsa_pool *p) {
    xsa_graph g = NULL;
    xsa_graph_exec e = NULL;
    assert_int_equal(XSA_DRV(drv, stream_end_capture, S1, &g), XSA_CU_SUCCESS);
    pool_end(p, G1);
    assert_int_equal(XSA_DRV(drv, graph_instantiate, &e, g), XSA_CU_SUCCESS);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(XSA_DRV(drv, graph_launch, e, S1), XSA_CU_SUCCESS);
        xsa_sim_complete_all();
        CHECK(p);
    }
    expect_no_violation();
    assert_int_equal(XSA_DRV(drv, graph_exec_destroy, e), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, graph_destroy, g), XSA_CU_SUCCESS);
}

static void finish(xsa_pool *p, void **live, size_t n) {
    for (size_t i = 0; i < n; i++) release(p, live[i]);
    xsa_sim_complete_all(); /* the deferred frees' events */
    pool_drop(p, G1);
    drop_events();
    teardown(p);
}

/* Is the block at ptr a free still waiting (not yet back in the cache)? */
static bool waiting(xsa_pool *p, void *ptr) {
    xsa_pool_snapshot s;
    assert_int_equal(xsa_pool_snapshot_take(p, &s), XSA_POOL_OK);
    bool found = false;
    for (size_t i = 0; i < s.n_blocks; i++)
        found |= s.blocks[i].addr == (uintptr_t)ptr && s.blocks[i].state == XSA_SNAP_PENDING_FREE;
    xsa_pool_snapshot_free(&s);
    return found;
}

/* `later` did not get freed block `freed`, which still waits (a check of
 * the pointer alone would miss a reuse by a block of another size). */
#define NOT_REUSED(p, later, freed)              \
    do {                                         \
        assert_ptr_not_equal((later), (freed));  \
        assert_true(waiting((p), (freed)));      \
    } while (0)

/* Calls the pool made to the entry points capture-time reuse adds. */
typedef struct calls {
    uint64_t info, deps;
} calls;

static calls new_calls(void) {
    return (calls){driver_calls(XSA_DRV_stream_get_capture_info), driver_calls(XSA_DRV_graph_node_get_dependencies)};
}

/* ---- PyTorch's two cases ---- */

typedef struct outcome {
    void *data1, *data2, *data3;
} outcome;

/* test_graph_capture_reclaim_2_streams: data1 is read on S2 and freed;
 * data2 is asked for before S2 joins S1 again, data3 after. */
static outcome two_streams(bool expandable, bool reuse) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse ? reuse_on : NULL);
    calls before = new_calls();
    capture_begin(p);
    void *sink1 = alloc(p, TENSOR, S1); /* up front, so that it takes no freed block later */
    void *data1 = alloc(p, TENSOR, S1);
    wait_stream(S2, S1); /* fork */
    void *buf2 = alloc(p, TENSOR, S2);
    use(S2, data1); /* torch.add(data1, 2.0, out=buf2) */
    use(S2, buf2);
    record_stream(p, data1, S2);
    release(p, data1);
    void *data2 = alloc(p, TENSOR, S1); /* before the join */
    NOT_REUSED(p, data2, data1);
    use(S1, data2);
    wait_stream(S1, S2); /* join */
    use(S1, sink1);
    void *data3 = alloc(p, TENSOR, S1); /* after the join */
    assert_int_equal(waiting(p, data1), !reuse);
    use(S1, data3);
    if (!reuse) { /* off, the pool asks the driver nothing */
        calls after = new_calls();
        assert_int_equal(after.info, before.info);
        assert_int_equal(after.deps, before.deps);
    }
    capture_end_and_replay(p);
    finish(p, (void *[]){sink1, buf2, data2, data3}, 4);
    return (outcome){data1, data2, data3};
}

static void test_two_streams(void **state) {
    (void)state;
    for (int expandable = 1; expandable >= 0; expandable--) {
        outcome on = two_streams(expandable, true);
        assert_ptr_not_equal(on.data2, on.data1); /* no reuse before the join */
        assert_ptr_equal(on.data3, on.data1);     /* reuse after it */
        /* Off, as before: the block waits for the capture's end. */
        outcome off = two_streams(expandable, false);
        assert_ptr_not_equal(off.data2, off.data1);
        assert_ptr_not_equal(off.data3, off.data1);
    }
}

/* test_graph_capture_reclaim_4_streams: data1 is written on S1 and read on
 * S2, S3 and S4; partial joins (S2 into S1, S4 into S3) allow no reuse;
 * after S3 joins S1 too, data1 is reused. data4 comes after one more node
 * on S1 (the fault sweep uses it: a reuse a fault cost comes back). */
typedef struct four {
    void *data1, *data2, *data3, *data4;
    uint64_t data1_info_call;  /* the capture info call of data1's malloc (its stamp) */
    uint64_t info_before_free; /* capture info calls before data1's free */
    uint64_t free_info_calls;  /* and in it */
} four;

static four four_streams(xsa_pool *p) {
    uint64_t info0 = driver_calls(XSA_DRV_stream_get_capture_info);
    capture_begin(p);
    uint64_t data1_call = driver_calls(XSA_DRV_stream_get_capture_info) - info0 + 1;
    void *data1 = alloc(p, TENSOR, S1);
    use(S1, data1); /* torch.ones */
    void *sink1 = alloc(p, TENSOR, S1), *sink3 = alloc(p, TENSOR, S1);
    void *bufs[3];
    void *side[3] = {S2, S3, S4};
    for (int i = 0; i < 3; i++) {
        wait_stream(side[i], S1);
        bufs[i] = alloc(p, TENSOR, side[i]);
        use_part(side[i], data1, (size_t)i * 8, 8); /* torch.add(data1, ..., out=buf): reads */
        use(side[i], bufs[i]);
        record_stream(p, data1, side[i]);
    }
    calls before = new_calls();
    release(p, data1);
    uint64_t free_info = new_calls().info - before.info;
    wait_stream(S1, S2); /* partial joins */
    use(S1, sink1);
    wait_stream(S3, S4);
    use(S3, sink3);
    record_stream(p, sink3, S3);
    void *data2 = alloc(p, TENSOR, S1); /* S1 and S3 not joined yet */
    NOT_REUSED(p, data2, data1);
    use(S1, data2);
    wait_stream(S1, S3); /* the final join */
    use(S1, sink1);
    void *data3 = alloc(p, TENSOR, S1);
    use(S1, data3);
    void *data4 = alloc(p, TENSOR, S1);
    use(S1, data4);
    capture_end_and_replay(p);
    four out = {data1, data2, data3, data4, data1_call, before.info - info0, free_info};
    finish(p, (void *[]){sink1, sink3, bufs[0], bufs[1], bufs[2], data2, data3, data4}, 8);
    return out;
}

static void test_four_streams(void **state) {
    (void)state;
    for (int expandable = 1; expandable >= 0; expandable--) {
        four on = four_streams(make_pool(1 * GiB, expandable, reuse_on));
        assert_ptr_not_equal(on.data2, on.data1);
        assert_ptr_equal(on.data3, on.data1);
        assert_int_equal(on.free_info_calls, 4); /* its stream and the three that used it */
        four off = four_streams(make_pool(1 * GiB, expandable, NULL));
        assert_ptr_not_equal(off.data2, off.data1);
        assert_ptr_not_equal(off.data3, off.data1);
        assert_ptr_not_equal(off.data4, off.data1);
        assert_int_equal(off.free_info_calls, 0);
    }
}

/* ---- the join must follow the uses ---- */

/* S2 joins S1 before its use of the block, then S1 captures more work:
 * S1's work does not follow the use, so no reuse; a join after the use
 * allows it. */
static void join_before_use(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *sink = alloc(p, TENSOR, S1), *a = alloc(p, TENSOR, S1);
    use(S1, a);
    wait_stream(S2, S1);
    wait_stream(S1, S2); /* a join with nothing of S2's after the fork */
    use(S2, a);
    record_stream(p, a, S2);
    release(p, a);
    use(S1, sink);
    void *b = alloc(p, TENSOR, S1);
    NOT_REUSED(p, b, a);
    use(S1, b);
    wait_stream(S1, S2);
    use(S1, sink);
    void *c = alloc(p, TENSOR, S1);
    assert_ptr_equal(c, a);
    use(S1, c);
    capture_end_and_replay(p);
    finish(p, (void *[]){sink, b, c}, 3);
}

static void test_join_must_follow_the_uses(void **state) {
    (void)state;
    run_both(join_before_use);
}

/* A join without new work on S1 is enough: S1's terminals are then the
 * other stream's last node, which its next work depends on. */
static void join_without_work(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *a = alloc(p, TENSOR, S1);
    use(S1, a);
    wait_stream(S2, S1);
    use(S2, a);
    record_stream(p, a, S2);
    release(p, a);
    wait_stream(S1, S2);
    void *b = alloc(p, TENSOR, S1);
    assert_ptr_equal(b, a);
    use(S1, b);
    capture_end_and_replay(p);
    finish(p, (void *[]){b}, 1);
}

static void test_join_alone_is_enough(void **state) {
    (void)state;
    run_both(join_without_work);
}

/* Reuse is on the block's own stream only: S2, which used it, never gets
 * it during the capture, even once S1's work follows S2's. */
static void own_stream_only(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *a = alloc(p, TENSOR, S1), *sink = alloc(p, TENSOR, S1);
    use(S1, a);
    wait_stream(S2, S1);
    use(S2, a);
    record_stream(p, a, S2);
    release(p, a);
    wait_stream(S1, S2);
    use(S1, sink);
    wait_stream(S2, S1);
    void *b = alloc(p, TENSOR, S2);
    NOT_REUSED(p, b, a);
    use(S2, b);
    wait_stream(S1, S2);
    void *c = alloc(p, TENSOR, S1);
    assert_ptr_equal(c, a);
    use(S1, c);
    capture_end_and_replay(p);
    finish(p, (void *[]){sink, b, c}, 3);
}

static void test_reuse_on_its_own_stream_only(void **state) {
    (void)state;
    run_both(own_stream_only);
}

/* ---- blocks that wait for the capture's end ---- */

/* A use on a stream outside the capture (it may still be running): no
 * marker can order it, so the block waits for the end and the events. */
static void use_outside_capture(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *a = alloc(p, TENSOR, S1), *sink = alloc(p, TENSOR, S1);
    use(S1, a);
    use(S3, a); /* S3 is not capturing: real work, queued */
    record_stream(p, a, S3);
    release(p, a);
    use(S1, sink);
    void *b = alloc(p, TENSOR, S1);
    NOT_REUSED(p, b, a);
    use(S1, b);
    xsa_sim_complete_stream(S3); /* before the replay, which would race with it */
    capture_end_and_replay(p);
    /* After the capture the free waits for its event on S3 (complete now):
     * the next malloc returns it to the cache. */
    assert_int_equal(stats(p).active[XSA_STAT_ALL].current, 3);
    release(p, alloc(p, TENSOR, S0));
    assert_int_equal(stats(p).active[XSA_STAT_ALL].current, 2);
    finish(p, (void *[]){sink, b}, 2);
}

static void test_use_outside_the_capture_waits_for_its_end(void **state) {
    (void)state;
    run_both(use_outside_capture);
}

/* A block handed out before the capture may have uses queued outside the
 * graph (here on S2, before S2 joined): it waits for the capture's end,
 * where PyTorch would drop those uses and reuse it. */
static void handed_out_before(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    pool_begin(p, G1, NULL, false); /* G1 already has the block, as after an earlier capture */
    void *a = alloc(p, TENSOR, S1);
    pool_end(p, G1);
    use(S2, a); /* real work, queued */
    capture_begin(p);
    void *sink = alloc(p, TENSOR, S1);
    use(S1, a);
    wait_stream(S2, S1);
    use(S2, a);
    record_stream(p, a, S2);
    release(p, a);
    wait_stream(S1, S2);
    use(S1, sink);
    void *b = alloc(p, TENSOR, S1);
    NOT_REUSED(p, b, a);
    use(S1, b);
    xsa_sim_complete_stream(S2); /* the real work, before the replay */
    capture_end_and_replay(p);
    pool_drop(p, G1); /* the first routing's use */
    finish(p, (void *[]){sink, b}, 2);
}

static void test_block_from_before_the_capture_waits(void **state) {
    (void)state;
    run_both(handed_out_before);
}

/* ---- the option at run time ---- */

static void switched(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    capture_begin(p);
    void *a = alloc(p, TENSOR, S1), *b = alloc(p, TENSOR, S1);
    use(S1, a);
    use(S1, b);
    wait_stream(S2, S1);
    use(S2, a);
    use(S2, b);
    record_stream(p, a, S2);
    record_stream(p, b, S2);
    release(p, a); /* off: no markers */
    xsa_pool_set_capture_reuse(p, true);
    release(p, b); /* on, but b was handed out with the option off: no stamp */
    wait_stream(S1, S2);
    void *c = alloc(p, TENSOR, S1);
    NOT_REUSED(p, c, a);
    NOT_REUSED(p, c, b);
    use(S1, c);
    /* c was handed out with the option on: it qualifies. */
    wait_stream(S2, S1);
    use(S2, c);
    record_stream(p, c, S2);
    release(p, c);
    wait_stream(S1, S2);
    xsa_pool_set_capture_reuse(p, false); /* off again: no reuse, no driver call */
    calls before = new_calls();
    void *d = alloc(p, TENSOR, S1);
    NOT_REUSED(p, d, c);
    calls after = new_calls();
    assert_int_equal(after.info + after.deps, before.info + before.deps);
    use(S1, d);
    xsa_pool_set_capture_reuse(p, true); /* on: c comes back at the next malloc */
    void *e = alloc(p, TENSOR, S1);
    assert_ptr_equal(e, c);
    use(S1, e);
    capture_end_and_replay(p);
    finish(p, (void *[]){d, e}, 2);
}

static void test_option_switched_at_run_time(void **state) {
    (void)state;
    run_both(switched);
}

/* ---- captures that end or fail inside one routing ---- */

/* Ends the capture on S1 (all joined) and instantiates, launches and
 * destroys its graph: the replay must be clean. */
static void end_and_replay_capture(xsa_pool *p) {
    xsa_graph g = NULL;
    xsa_graph_exec e = NULL;
    assert_int_equal(XSA_DRV(drv, stream_end_capture, S1, &g), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, graph_instantiate, &e, g), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, graph_launch, e, S1), XSA_CU_SUCCESS);
    xsa_sim_complete_all();
    CHECK(p);
    expect_no_violation();
    assert_int_equal(XSA_DRV(drv, graph_exec_destroy, e), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, graph_destroy, g), XSA_CU_SUCCESS);
}

/* Two captures on S1 within one routing: a block marked in the first is
 * ordered by nothing of the second's graph, so it waits for the routing's
 * end; the second's own frees are reused (its walk takes the first's
 * place on S1). */
static void two_captures(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *a = alloc(p, TENSOR, S1);
    use(S1, a);
    wait_stream(S2, S1);
    use(S2, a);
    record_stream(p, a, S2);
    release(p, a);
    void *x = alloc(p, TENSOR, S1); /* a walk of S1 in the first capture: a not reached */
    NOT_REUSED(p, x, a);
    use(S1, x);
    wait_stream(S1, S2);
    end_and_replay_capture(p);
    assert_int_equal(XSA_DRV(drv, stream_begin_capture, S1), XSA_CU_SUCCESS);
    void *b = alloc(p, TENSOR, S1);
    NOT_REUSED(p, b, a);
    use(S1, b);
    wait_stream(S2, S1);
    use(S2, b);
    record_stream(p, b, S2);
    release(p, b);
    wait_stream(S1, S2);
    void *c = alloc(p, TENSOR, S1);
    assert_ptr_equal(c, b);
    assert_true(waiting(p, a));
    use(S1, c);
    end_and_replay_capture(p);
    pool_end(p, G1); /* a's free records its event on S2 now */
    xsa_sim_complete_all();
    release(p, alloc(p, TENSOR, S0)); /* a malloc polls the events */
    assert_false(waiting(p, a));
    finish(p, (void *[]){x, c}, 2);
}

static void test_captures_ending_inside_one_routing(void **state) {
    (void)state;
    run_both(two_captures);
}

/* An invalidated capture orders nothing: its marked blocks wait for the
 * routing's end. */
static void invalidated(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *a = alloc(p, TENSOR, S1);
    use(S1, a);
    wait_stream(S2, S1);
    use(S2, a);
    record_stream(p, a, S2);
    release(p, a);
    wait_stream(S1, S2);
    assert_int_equal(XSA_DRV(drv, stream_query, S3), XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* invalidates */
    void *b = alloc(p, TENSOR, S1);
    NOT_REUSED(p, b, a);
    xsa_graph g = NULL;
    assert_int_equal(XSA_DRV(drv, stream_end_capture, S1, &g), XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED);
    assert_null(g);
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    assert_int_equal(v.failed_captures, 1);
    xsa_sim_clear_violations();
    pool_end(p, G1);
    xsa_sim_complete_all();
    release(p, alloc(p, TENSOR, S0));
    assert_false(waiting(p, a));
    finish(p, (void *[]){b}, 1);
}

static void test_invalidated_capture_reuses_nothing(void **state) {
    (void)state;
    run_both(invalidated);
}

/* ---- many streams, long captures ---- */

enum { WIDE = 11 }; /* more streams than the walk's first buffer of dependencies */

/* A block used on WIDE - 1 other streams: every stream but one joined is
 * not enough; the last join allows the reuse. S1's node after the joins
 * has WIDE dependencies. */
static void wide(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *a = alloc(p, TENSOR, S1), *sink = alloc(p, TENSOR, S1);
    use(S1, a);
    void *side[WIDE];
    for (int i = 1; i < WIDE; i++) {
        side[i] = (void *)(uintptr_t)(0x3000 + i);
        wait_stream(side[i], S1);
        use_part(side[i], a, (size_t)i * 2, 2); /* concurrent reads: distinct bytes */
        record_stream(p, a, side[i]);
    }
    release(p, a);
    for (int i = 2; i < WIDE; i++) wait_stream(S1, side[i]);
    use(S1, sink);
    void *b = alloc(p, TENSOR, S1);
    NOT_REUSED(p, b, a);
    use(S1, b);
    wait_stream(S1, side[1]);
    use(S1, sink);
    void *c = alloc(p, TENSOR, S1);
    assert_ptr_equal(c, a);
    use(S1, c);
    capture_end_and_replay(p);
    finish(p, (void *[]){sink, b, c}, 3);
}

static void test_many_streams(void **state) {
    (void)state;
    run_both(wide);
}

enum { ROUNDS = 150 };

/* A long capture, one block forked to S2 and freed every round, reused
 * the round after: each node of the graph is asked for its dependencies
 * at most once (a walk per malloc from scratch would ask
 * ROUNDS^2 times as often). */
static void long_capture(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *sink = alloc(p, TENSOR, S1), *a = alloc(p, TENSOR, S1), *first = a;
    uint64_t deps0 = driver_calls(XSA_DRV_graph_node_get_dependencies);
    size_t nodes = 0;
    for (int r = 0; r < ROUNDS; r++) {
        use(S1, a);
        wait_stream(S2, S1);
        use(S2, a);
        record_stream(p, a, S2);
        release(p, a);
        wait_stream(S1, S2);
        use(S1, sink);
        nodes += 3;
        a = alloc(p, TENSOR, S1);
        assert_ptr_equal(a, first); /* reused every round */
        if (n_events > MAX_EVENTS - 2) drop_events(); /* recorded in the capture, waited on: done with */
    }
    uint64_t asked = driver_calls(XSA_DRV_graph_node_get_dependencies) - deps0;
    print_message("%s: %zu nodes captured, %llu dependency queries\n", expandable ? "expandable" : "classic", nodes,
                  (unsigned long long)asked);
    assert_true(asked <= nodes);     /* each node at most once */
    assert_true(asked >= nodes - 3); /* and the walk did visit them (all but the last round's) */
    use(S1, a);
    capture_end_and_replay(p);
    finish(p, (void *[]){sink, a}, 2);
}

static void test_walk_is_incremental(void **state) {
    (void)state;
    run_both(long_capture);
}

/* ---- edges with data ---- */

/* A node whose dependencies have edge data (programmatic launches, which
 * order less than a full dependency) is not walked through: the driver
 * refuses the query without the edge data (the simulator, which has no
 * such edges, is made to), the markers behind it are not reached, and the
 * node is not asked again at later mallocs. */
static void lossy(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    capture_begin(p);
    void *sink = alloc(p, TENSOR, S1), *a = alloc(p, TENSOR, S1);
    use(S1, a);
    wait_stream(S2, S1);
    use(S2, a);
    record_stream(p, a, S2);
    release(p, a);
    wait_stream(S1, S2);
    use(S1, sink); /* the join node: its dependencies are refused below */
    xsa_sim_fail_call(XSA_DRV_graph_node_get_dependencies, 1, XSA_CU_ERROR_LOSSY_QUERY);
    uint64_t asked = driver_calls(XSA_DRV_graph_node_get_dependencies);
    void *b = alloc(p, TENSOR, S1);
    NOT_REUSED(p, b, a);
    assert_int_equal(driver_calls(XSA_DRV_graph_node_get_dependencies), asked + 1);
    use(S1, b);
    void *c = alloc(p, TENSOR, S1); /* the walk stops at the join node, known already */
    NOT_REUSED(p, c, a);
    assert_int_equal(driver_calls(XSA_DRV_graph_node_get_dependencies), asked + 2);
    use(S1, c);
    capture_end_and_replay(p);
    finish(p, (void *[]){sink, b, c}, 3);
}

static void test_edges_with_data_are_not_walked_through(void **state) {
    (void)state;
    run_both(lossy);
}

/* ---- faults in the new driver calls ---- */

/* Every call the 4-stream case makes to the capture info and to the node
 * dependencies, made to fail in turn: the requests still succeed, the
 * capture stays valid, no block is reused before the final join (the
 * replay checks it), and the reuse a fault cost comes back at a later
 * malloc, unless it hit the query of the malloc that handed the block out
 * or of its free (then the block waits for the capture's end, as with the
 * option off). */
static void fault_sweep(xsa_driver_entry entry, bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, reuse_on);
    uint64_t count = driver_calls(entry);
    four clean = four_streams(p);
    count = driver_calls(entry) - count;
    assert_ptr_equal(clean.data3, clean.data1);
    assert_true(count > 0);
    print_message("%s, %s: every one of %llu calls made to fail\n", xsa_driver_entry_name(entry),
                  expandable ? "expandable" : "classic", (unsigned long long)count);
    for (uint64_t nth = 1; nth <= count; nth++) {
        p = make_pool(1 * GiB, expandable, reuse_on);
        xsa_sim_fail_call(entry, nth, XSA_CU_ERROR_UNKNOWN);
        four f = four_streams(p);
        xsa_sim_clear_faults();
        assert_ptr_not_equal(f.data2, f.data1);
        /* The malloc that handed data1 out (no stamp) or its free (no markers). */
        bool lost = entry == XSA_DRV_stream_get_capture_info &&
                    (nth == clean.data1_info_call ||
                     (nth > clean.info_before_free && nth <= clean.info_before_free + clean.free_info_calls));
        if (lost)
            assert_true(f.data3 != f.data1 && f.data4 != f.data1);
        else if (f.data3 != f.data1 && f.data4 != f.data1)
            fail_msg("call %llu of %s failing lost the reuse for good", (unsigned long long)nth,
                     xsa_driver_entry_name(entry));
    }
}

static void test_faults_in_capture_info(void **state) {
    (void)state;
    fault_sweep(XSA_DRV_stream_get_capture_info, true);
    fault_sweep(XSA_DRV_stream_get_capture_info, false);
}

static void test_faults_in_node_dependencies(void **state) {
    (void)state;
    fault_sweep(XSA_DRV_graph_node_get_dependencies, true);
    fault_sweep(XSA_DRV_graph_node_get_dependencies, false);
}

/* An argument runs the cases whose names match it (cmocka's filter). */
int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_streams),
        cmocka_unit_test(test_four_streams),
        cmocka_unit_test(test_join_must_follow_the_uses),
        cmocka_unit_test(test_join_alone_is_enough),
        cmocka_unit_test(test_reuse_on_its_own_stream_only),
        cmocka_unit_test(test_use_outside_the_capture_waits_for_its_end),
        cmocka_unit_test(test_block_from_before_the_capture_waits),
        cmocka_unit_test(test_option_switched_at_run_time),
        cmocka_unit_test(test_captures_ending_inside_one_routing),
        cmocka_unit_test(test_invalidated_capture_reuses_nothing),
        cmocka_unit_test(test_many_streams),
        cmocka_unit_test(test_walk_is_incremental),
        cmocka_unit_test(test_edges_with_data_are_not_walked_through),
        cmocka_unit_test(test_faults_in_capture_info),
        cmocka_unit_test(test_faults_in_node_dependencies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
