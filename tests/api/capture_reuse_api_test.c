/*
 * capture_reuse_api_test: capture-time reuse (graph_capture_record_stream_
 * reuse) through the public API on the simulated driver's captures: the
 * key read from the settings string reaches the pool, PyTorch's two-stream
 * case through the entry points torch calls (xsa_torch_*, whose routing
 * follows the driver's capture status), and threads capturing into their
 * own pools at once, each reusing its own frees (TSan runs this too).
 * Invariants are checked after every step of the single-thread cases and
 * at the end of the threaded one; every replay must leave the simulated
 * timeline without a violation.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "api/devices.h"
#include "tests/api/api_fixture.h"
#include "xsalloc/pytorch.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define GiB ((size_t)1 << 30)
#define S1 ((void *)0x1001)
#define S2 ((void *)0x1002)
enum { TENSOR = 32 };

static xsa_driver *drv(void) { return xsa_active_driver(); }

static void expect_no_violation(void) {
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use || v.races || v.bad_launches || v.failed_captures) fail_msg("%s", v.first);
}

/* ---- PyTorch's two-stream case through torch's entry points ---- */

static void *torch_malloc(void *stream) {
    void *p = xsa_torch_malloc(TENSOR, 0, stream);
    assert_non_null(p);
    INVARIANTS(0);
    return p;
}

static void use(void *stream, void *ptr) {
    assert_int_equal(xsa_sim_launch(stream, (xsa_devptr)(uintptr_t)ptr, TENSOR), XSA_CU_SUCCESS);
}

/* to.wait_stream(from) with a fresh event, destroyed after the capture. */
static xsa_event wait_stream(void *to, void *from) {
    xsa_event e = NULL;
    assert_int_equal(XSA_DRV(drv(), event_create, &e, 0), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv(), event_record, e, from), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv(), stream_wait_event, to, e), XSA_CU_SUCCESS);
    return e;
}

/* test_graph_capture_reclaim_2_streams, with `conf` as the settings at
 * initialisation and `later` (unless NULL) given at run time before the
 * capture, as PyTorch's test does: is data1's block handed out again after
 * the join? (Never before it.) */
static bool torch_two_streams(const char *conf, const char *later) {
    xsa_fixture_use_sim(1, 1 * GiB);
    OK(xsa_init(conf));
    if (later) OK(xsa_set_allocator_settings(later));
    const xsa_mempool_id graph = {1, 0};
    xsa_torch_begin_allocate_to_pool(0, graph, NULL);
    assert_int_equal(XSA_DRV(drv(), stream_begin_capture, S1), XSA_CU_SUCCESS);
    void *sink1 = torch_malloc(S1), *data1 = torch_malloc(S1);
    xsa_event fork = wait_stream(S2, S1);
    void *buf2 = torch_malloc(S2);
    use(S2, data1);
    use(S2, buf2);
    xsa_torch_record_stream(data1, S2);
    INVARIANTS(0);
    xsa_torch_free(data1, TENSOR, 0, S1);
    INVARIANTS(0);
    void *data2 = torch_malloc(S1);
    assert_ptr_not_equal(data2, data1);
    use(S1, data2);
    xsa_event join = wait_stream(S1, S2);
    use(S1, sink1);
    void *data3 = torch_malloc(S1);
    use(S1, data3);
    xsa_graph g = NULL;
    xsa_graph_exec e = NULL;
    assert_int_equal(XSA_DRV(drv(), stream_end_capture, S1, &g), XSA_CU_SUCCESS);
    xsa_torch_end_allocate_to_pool(0, graph);
    INVARIANTS(0);
    assert_int_equal(XSA_DRV(drv(), graph_instantiate, &e, g), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv(), graph_launch, e, S1), XSA_CU_SUCCESS);
    xsa_sim_complete_all();
    expect_no_violation();
    assert_int_equal(XSA_DRV(drv(), graph_exec_destroy, e), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv(), graph_destroy, g), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv(), event_destroy, fork), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv(), event_destroy, join), XSA_CU_SUCCESS);
    void *live[] = {sink1, buf2, data2, data3};
    for (int i = 0; i < 4; i++) xsa_torch_free(live[i], TENSOR, 0, S1);
    xsa_torch_release_pool(0, graph);
    INVARIANTS(0);
    return data3 == data1;
}

static void test_key_from_the_settings(void **state) {
    (void)state;
    assert_true(torch_two_streams("graph_capture_record_stream_reuse:True", NULL));
    xsa_fixture_shutdown_and_expect_empty();
    assert_true(torch_two_streams("graph_capture_record_stream_reuse:True,expandable_segments:False", NULL));
    xsa_fixture_shutdown_and_expect_empty();
    assert_false(torch_two_streams("graph_capture_record_stream_reuse:False", NULL));
    xsa_fixture_shutdown_and_expect_empty();
    assert_false(torch_two_streams("", NULL)); /* off by default, as in PyTorch */
}

/* PyTorch's test turns the key on at run time; a later string without it
 * keeps it (as other keys not given are kept), False turns it off. */
static void test_key_at_run_time(void **state) {
    (void)state;
    assert_true(torch_two_streams("", "graph_capture_record_stream_reuse:True"));
    xsa_fixture_shutdown_and_expect_empty();
    assert_false(torch_two_streams("graph_capture_record_stream_reuse:True", "graph_capture_record_stream_reuse:False"));
    xsa_fixture_shutdown_and_expect_empty();
    assert_true(torch_two_streams("graph_capture_record_stream_reuse:True", "max_split_size_mb:64"));
}

/* ---- threads ---- */

enum { THREADS = 4, ROUNDS = 25 };

typedef struct worker {
    int index;
    void *s1, *s2;
    int failures, reused;
    char first[256];
} worker;

#define EXPECT_W(w, cond)                                                                     \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            if (!(w)->failures++) snprintf((w)->first, sizeof (w)->first, "%s: %s", #cond,   \
                                           xsa_last_error());                                 \
            return;                                                                           \
        }                                                                                     \
    } while (0)

/* The routing filter: streams capturing into the capture of the thread's
 * own origin stream (what torch's filter accepts). Called under the
 * device's lock; the simulated driver takes its own. */
static bool same_capture(void *ctx, void *stream) {
    int a = 0, b = 0;
    uint64_t ia = 0, ib = 0;
    return XSA_DRV(drv(), stream_get_capture_info, ctx, &a, &ia, NULL, NULL) == XSA_CU_SUCCESS &&
           XSA_DRV(drv(), stream_get_capture_info, stream, &b, &ib, NULL, NULL) == XSA_CU_SUCCESS &&
           a == XSA_CAPTURE_ACTIVE && b == XSA_CAPTURE_ACTIVE && ia == ib;
}

static bool wait_w(void *to, void *from, xsa_event *e) {
    return XSA_DRV(drv(), event_create, e, 0) == XSA_CU_SUCCESS &&
           XSA_DRV(drv(), event_record, *e, from) == XSA_CU_SUCCESS &&
           XSA_DRV(drv(), stream_wait_event, to, *e) == XSA_CU_SUCCESS;
}

static bool launch_w(void *stream, void *ptr) {
    return xsa_sim_launch(stream, (xsa_devptr)(uintptr_t)ptr, TENSOR) == XSA_CU_SUCCESS;
}

/* One capture of the two-stream case into the thread's pool for round r. */
static void round_of(worker *w, int r) {
    xsa_mempool_id id = {(uint64_t)(100 + w->index), (uint64_t)r};
    void *s1 = w->s1, *s2 = w->s2, *sink = NULL, *a = NULL, *buf = NULL, *b = NULL, *c = NULL;
    xsa_event fork = NULL, join = NULL;
    xsa_graph g = NULL;
    xsa_graph_exec e = NULL;
    EXPECT_W(w, xsa_begin_allocate_to_pool(0, id, same_capture, s1) == XSA_SUCCESS);
    EXPECT_W(w, XSA_DRV(drv(), stream_begin_capture, s1) == XSA_CU_SUCCESS);
    EXPECT_W(w, xsa_malloc(&sink, TENSOR, 0, s1) == XSA_SUCCESS && xsa_malloc(&a, TENSOR, 0, s1) == XSA_SUCCESS);
    EXPECT_W(w, wait_w(s2, s1, &fork));
    EXPECT_W(w, xsa_malloc(&buf, TENSOR, 0, s2) == XSA_SUCCESS && launch_w(s2, a) && launch_w(s2, buf));
    EXPECT_W(w, xsa_record_stream(a, s2) == XSA_SUCCESS && xsa_free(a) == XSA_SUCCESS);
    EXPECT_W(w, xsa_malloc(&b, TENSOR, 0, s1) == XSA_SUCCESS && b != a && launch_w(s1, b));
    EXPECT_W(w, wait_w(s1, s2, &join) && launch_w(s1, sink));
    EXPECT_W(w, xsa_malloc(&c, TENSOR, 0, s1) == XSA_SUCCESS && launch_w(s1, c));
    w->reused += c == a;
    EXPECT_W(w, XSA_DRV(drv(), stream_end_capture, s1, &g) == XSA_CU_SUCCESS);
    EXPECT_W(w, xsa_end_allocate_to_pool(0, id) == XSA_SUCCESS);
    EXPECT_W(w, XSA_DRV(drv(), graph_instantiate, &e, g) == XSA_CU_SUCCESS);
    EXPECT_W(w, XSA_DRV(drv(), graph_launch, e, s1) == XSA_CU_SUCCESS);
    xsa_sim_complete_stream(s1); /* the replay, before its memory goes */
    EXPECT_W(w, XSA_DRV(drv(), graph_exec_destroy, e) == XSA_CU_SUCCESS &&
                    XSA_DRV(drv(), graph_destroy, g) == XSA_CU_SUCCESS);
    EXPECT_W(w, XSA_DRV(drv(), event_destroy, fork) == XSA_CU_SUCCESS &&
                    XSA_DRV(drv(), event_destroy, join) == XSA_CU_SUCCESS);
    void *live[] = {sink, buf, b, c};
    for (int i = 0; i < 4; i++) EXPECT_W(w, xsa_free(live[i]) == XSA_SUCCESS);
    EXPECT_W(w, xsa_mempool_release(0, id) == XSA_SUCCESS);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    for (int r = 0; r < ROUNDS && !w->failures; r++) round_of(w, r);
    return NULL;
}

/* Captures on several threads at once, one device: each capture's frees
 * are reused in its own pool after its own join, and only there. */
static void test_threads_capture_at_once(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, 1 * GiB);
    OK(xsa_init("graph_capture_record_stream_reuse:True"));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.index = i, .s1 = (void *)(uintptr_t)(0x5000 + 2 * i), .s2 = (void *)(uintptr_t)(0x5001 + 2 * i)};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < THREADS; i++) {
        if (w[i].failures) fail_msg("thread %d: %s", i, w[i].first);
        assert_int_equal(w[i].reused, ROUNDS);
    }
    INVARIANTS(0);
    xsa_sim_complete_all();
    expect_no_violation();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_key_from_the_settings, xsa_fixture_teardown),
        cmocka_unit_test_teardown(test_key_at_run_time, xsa_fixture_teardown),
        cmocka_unit_test_teardown(test_threads_capture_at_once, xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
