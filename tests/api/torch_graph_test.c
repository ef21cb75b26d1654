/*
 * torch_graph_test: torch.cuda.graph's routing through the entry points of
 * PyTorch's CUDAPluggableAllocator (xsa_torch_begin_allocate_to_pool, ...),
 * on the simulated driver's stream capture, in expandable and classic
 * mode. The routing follows the driver's capture status: a stream's
 * allocations go to the graph's pool while it captures into the capture
 * the routing first saw, never before it and never from another capture.
 * Invariants are checked after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api/devices.h"
#include "tests/api/api_fixture.h"
#include "vmm/driver.h"
#include "xsalloc/pytorch.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define S1 ((void *)0x1001)
#define S2 ((void *)0x1002)

static const xsa_mempool_id GRAPH = {1, 7};

#define DRV_OK(call) assert_int_equal((call), XSA_CU_SUCCESS)

static int setup_expandable(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, 1 * GiB);
    OK(xsa_init("page_recycling_headroom:0"));
    return 0;
}

static int setup_classic(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, 1 * GiB);
    OK(xsa_init("expandable_segments:False"));
    return 0;
}

static void begin_capture(void *stream) { DRV_OK(XSA_DRV(xsa_active_driver(), stream_begin_capture, stream)); }

static void end_capture(void *stream) {
    xsa_graph g = NULL;
    DRV_OK(XSA_DRV(xsa_active_driver(), stream_end_capture, stream, &g));
    assert_non_null(g);
    DRV_OK(XSA_DRV(xsa_active_driver(), graph_destroy, g));
}

static void *torch_malloc(size_t size, void *stream) {
    void *p = xsa_torch_malloc((ssize_t)size, 0, stream);
    assert_non_null(p);
    INVARIANTS(0);
    return p;
}

static void torch_free(void *p, void *stream) {
    xsa_torch_free(p, 0, 0, stream);
    INVARIANTS(0);
}

static int64_t reserved(void) {
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    return s.reserved_bytes[XSA_STAT_ALL].current;
}

/* Whether a block of `size` freed on `stream` is in the device's own cache:
 * an allocation of that size there gets it back. */
static bool reused_outside(void *freed, size_t size, void *stream) {
    void *q = torch_malloc(size, stream);
    bool same = q == freed;
    torch_free(q, stream);
    return same;
}

/* Before its capture begins a stream is not routed; while it captures, its
 * blocks come from the graph's pool and go back there only. */
static void test_routing_follows_the_capture(void **state) {
    (void)state;
    xsa_torch_begin_allocate_to_pool(0, GRAPH, NULL);
    INVARIANTS(0);
    void *before = torch_malloc(4 * MiB, S1);
    torch_free(before, S1);
    begin_capture(S1);
    void *in_graph = torch_malloc(4 * MiB, S1);
    torch_free(in_graph, S1);
    void *again = torch_malloc(4 * MiB, S1); /* reuse inside the pool, in the capture */
    assert_ptr_equal(again, in_graph);
    torch_free(again, S1);
    end_capture(S1);
    xsa_torch_end_allocate_to_pool(0, GRAPH);
    INVARIANTS(0);
    assert_true(reused_outside(before, 4 * MiB, S1));    /* not routed: the device's cache */
    assert_false(reused_outside(in_graph, 4 * MiB, S1)); /* the graph's memory stays its own */
    xsa_torch_release_pool(0, GRAPH);
    INVARIANTS(0);
}

/* The routing binds to the first capture it sees: another capture, on
 * another stream, is not routed to this graph's pool. */
static void test_another_capture_is_not_routed(void **state) {
    (void)state;
    xsa_torch_begin_allocate_to_pool(0, GRAPH, NULL);
    begin_capture(S1);
    void *mine = torch_malloc(2 * MiB, S1);
    end_capture(S1);
    begin_capture(S2);
    void *other = torch_malloc(2 * MiB, S2);
    torch_free(other, S2);
    end_capture(S2);
    torch_free(mine, S1);
    xsa_torch_end_allocate_to_pool(0, GRAPH);
    assert_true(reused_outside(other, 2 * MiB, S2));
    assert_false(reused_outside(mine, 2 * MiB, S1));
    xsa_torch_release_pool(0, GRAPH);
    INVARIANTS(0);
}

/* Releasing the graph's pool once it is empty gives its memory back. */
static void test_release_gives_memory_back(void **state) {
    (void)state;
    int64_t base = reserved();
    xsa_torch_begin_allocate_to_pool(0, GRAPH, NULL);
    begin_capture(S1);
    void *a = torch_malloc(8 * MiB, S1), *b = torch_malloc(3 * MiB, S1);
    torch_free(a, S1);
    end_capture(S1);
    xsa_torch_end_allocate_to_pool(0, GRAPH);
    assert_true(reserved() > base);
    torch_free(b, S1); /* the pool is still in use: its memory stays */
    assert_true(reserved() > base);
    xsa_torch_release_pool(0, GRAPH);
    INVARIANTS(0);
    assert_int_equal(reserved(), base);
}

/* Calls torch should never make are refused with a sentence, no crash. */
static void test_misuse_is_reported(void **state) {
    (void)state;
    xsa_torch_end_allocate_to_pool(0, GRAPH); /* no routing */
    assert_non_null(strstr(xsa_last_error(), "pool"));
    xsa_torch_release_pool(0, GRAPH); /* no such pool */
    assert_non_null(strstr(xsa_last_error(), "pool"));
    xsa_torch_begin_allocate_to_pool(0, (xsa_mempool_id){0, 0}, NULL); /* the device's own id */
    INVARIANTS(0);
    void *p = torch_malloc(MiB, S1);
    torch_free(p, S1);
}

#define BOTH(fn) cmocka_unit_test_setup_teardown(fn, setup_expandable, xsa_fixture_teardown), \
                 cmocka_unit_test_setup_teardown(fn, setup_classic, xsa_fixture_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        BOTH(test_routing_follows_the_capture),
        BOTH(test_another_capture_is_not_routed),
        BOTH(test_release_gives_memory_back),
        BOTH(test_misuse_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
