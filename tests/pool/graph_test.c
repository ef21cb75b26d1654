/*
 * graph_test: memory pools (PyTorch's private pools and MemPool) and the
 * rules of allocation during a CUDA graph capture, one case per rule, on
 * the simulated driver, in expandable and classic mode. The capture is the
 * pool layer's flag (begin_allocate_to_pool's `capture`) until the
 * simulated driver captures streams. Every step is followed by the pool's
 * and the simulated driver's invariant checkers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/pool/pool_fixture.h"

#define S2 ((void *)0x2002)
static const xsa_mempool_id GLOBAL = {0, 0};
static const xsa_mempool_id G1 = {1, 0}, G2 = {2, 0};

static void use_on(xsa_pool *p, void *ptr, void *stream) {
    assert_int_equal(xsa_pool_record_stream(p, ptr, stream, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
}

static bool same(xsa_mempool_id a, xsa_mempool_id b) { return a.first == b.first && a.second == b.second; }

/* The memory pool of the segment holding ptr ({99, 99}: none), from a
 * snapshot, which also shows that snapshots carry the pool id. */
static xsa_mempool_id pool_of(xsa_pool *p, void *ptr) {
    xsa_pool_snapshot s;
    assert_int_equal(xsa_pool_snapshot_take(p, &s), XSA_POOL_OK);
    xsa_mempool_id id = {99, 99};
    for (size_t i = 0; i < s.n_segments; i++)
        if ((uintptr_t)ptr >= s.segments[i].addr && (uintptr_t)ptr < s.segments[i].addr + s.segments[i].total_size)
            id = s.segments[i].pool_id;
    xsa_pool_snapshot_free(&s);
    return id;
}

/* Bytes held by the segments of memory pool id. */
static size_t held_by(xsa_pool *p, xsa_mempool_id id) {
    xsa_pool_snapshot s;
    assert_int_equal(xsa_pool_snapshot_take(p, &s), XSA_POOL_OK);
    size_t bytes = 0;
    for (size_t i = 0; i < s.n_segments; i++)
        if (same(s.segments[i].pool_id, id)) bytes += s.segments[i].total_size;
    xsa_pool_snapshot_free(&s);
    return bytes;
}

#define ASSERT_POOL(p, ptr, id) assert_true(same(pool_of(p, ptr), id))

/* ---- routing ---- */

static void routing_by_filter(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    pool_begin(p, G1, S1, true);
    void *a = alloc(p, 1000, S1), *b = alloc(p, 1000, S0), *c = alloc(p, 8 * MiB, S1);
    ASSERT_POOL(p, a, G1);
    ASSERT_POOL(p, b, GLOBAL);
    ASSERT_POOL(p, c, G1);
    /* The routing begun last wins where both accept (PyTorch 2.10's
     * order: a nested use_mem_pool takes its allocations). */
    pool_begin(p, G2, NULL, true);
    void *d = alloc(p, 1000, S1), *e = alloc(p, 1000, S0);
    ASSERT_POOL(p, d, G2);
    ASSERT_POOL(p, e, G2);
    pool_end(p, G2);
    void *f = alloc(p, 1000, S1);
    ASSERT_POOL(p, f, G1);
    pool_end(p, G1);
    void *g = alloc(p, 1000, S1);
    ASSERT_POOL(p, g, GLOBAL);
    /* Pool memory counts in the device's stats. */
    assert_int_equal(stats(p).allocated_bytes[XSA_STAT_ALL].current, 6 * 1024 + 8 * MiB);
    void *all[] = {a, b, c, d, e, f, g};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(p, all[i]);
    teardown(p);
}

static void test_routing_by_filter(void **state) {
    (void)state;
    run_both(routing_by_filter);
}

static void test_bad_calls(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    REFUSED(xsa_pool_begin_allocate_to_pool(p, GLOBAL, NULL, NULL, true, err, sizeof err));
    REFUSED(xsa_pool_mempool_create(p, GLOBAL, err, sizeof err));
    REFUSED(xsa_pool_end_allocate_to_pool(p, G1, err, sizeof err));
    REFUSED(xsa_pool_mempool_release(p, G1, err, sizeof err));
    pool_begin(p, G1, S1, false);
    REFUSED(xsa_pool_begin_allocate_to_pool(p, G1, NULL, NULL, true, err, sizeof err));
    /* The routing's use is the last one: releasing it would strand routed blocks. */
    REFUSED(xsa_pool_mempool_release(p, G1, err, sizeof err));
    pool_end(p, G1);
    pool_drop(p, G1);
    assert_false(xsa_pool_mempool_exists(p, G1, NULL));
    REFUSED(xsa_pool_mempool_release(p, G1, err, sizeof err));
    teardown(p);
}

/* ---- reuse ---- */

static void reuse_within_pool(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    pool_begin(p, G1, S1, true);
    void *a = alloc(p, 3 * MiB, S1), *s = alloc(p, 4096, S1);
    int64_t held = reserved(p);
    release(p, a);
    release(p, s);
    /* A capture's frees on its own stream are reused within it at once. */
    assert_ptr_equal(alloc(p, 3 * MiB, S1), a);
    assert_ptr_equal(alloc(p, 4096, S1), s);
    assert_int_equal(reserved(p), held);
    release(p, a);
    release(p, s);
    pool_end(p, G1);
    pool_drop(p, G1);
    teardown(p);
}

static void test_reuse_within_pool_one_stream(void **state) {
    (void)state;
    run_both(reuse_within_pool);
}

static void no_reuse_outside_pool(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    pool_begin(p, G1, S1, true);
    void *a = alloc(p, 1000, S1), *b = alloc(p, 8 * MiB, S1);
    release(p, a);
    release(p, b);
    pool_end(p, G1);
    size_t pool_bytes = held_by(p, G1);
    /* The same requests on the same stream, outside the pool: new memory. */
    void *c = alloc(p, 1000, S1), *d = alloc(p, 8 * MiB, S1);
    ASSERT_POOL(p, c, GLOBAL);
    ASSERT_POOL(p, d, GLOBAL);
    assert_ptr_not_equal(c, a);
    assert_ptr_not_equal(d, b);
    assert_int_equal(held_by(p, G1), pool_bytes);
    /* Another pool does not get it either. */
    pool_begin(p, G2, S1, true);
    void *e = alloc(p, 8 * MiB, S1);
    ASSERT_POOL(p, e, G2);
    release(p, e);
    pool_end(p, G2);
    /* The global pool's empty_cache leaves the pool's memory where it is. */
    release(p, c);
    release(p, d);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(held_by(p, G1), pool_bytes);
    assert_int_equal((size_t)reserved(p), pool_bytes + held_by(p, G2));
    pool_drop(p, G1);
    pool_drop(p, G2);
    assert_int_equal(reserved(p), 0);
    teardown(p);
}

static void test_no_reuse_outside_pool(void **state) {
    (void)state;
    run_both(no_reuse_outside_pool);
}

/* ---- capture ---- */

static void cross_stream_free_deferred(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    pool_begin(p, G1, S1, true);
    assert_true(xsa_pool_capturing(p));
    void *a = alloc(p, 4096, S1);
    use_on(p, a, S2);
    uint64_t records = driver_calls(XSA_DRV_event_record);
    release(p, a);
    /* No event during the capture, and a is not reused: S2's use is pending. */
    assert_int_equal(driver_calls(XSA_DRV_event_record), records);
    assert_int_equal(stats(p).active[XSA_STAT_ALL].current, 1);
    void *b = alloc(p, 4096, S1);
    assert_ptr_not_equal(b, a);
    pool_end(p, G1);
    /* After the capture the free waits for S2 like any record_stream free. */
    assert_int_equal(driver_calls(XSA_DRV_event_record), records + 1);
    pool_begin(p, G1, S1, false); /* a routing that is no capture polls events */
    assert_false(xsa_pool_capturing(p));
    void *c = alloc(p, 4096, S1);
    assert_ptr_not_equal(c, a);
    xsa_sim_complete_stream(S2);
    void *d = alloc(p, 4096, S1);
    assert_ptr_equal(d, a); /* back in its pool */
    pool_end(p, G1);
    release(p, b);
    release(p, c);
    release(p, d);
    pool_drop(p, G1);
    pool_drop(p, G1);
    assert_int_equal(reserved(p), 0);
    teardown(p);
}

static void test_cross_stream_free_deferred_while_capturing(void **state) {
    (void)state;
    run_both(cross_stream_free_deferred);
}

static void no_event_query_during_capture(bool expandable) {
    xsa_pool *p = make_pool(64 * MiB, expandable, NULL);
    /* A global free waits for S2's event; 40 MiB are cached on S0. */
    void *w = alloc(p, 4096, S0);
    use_on(p, w, S2);
    release(p, w);
    release(p, alloc(p, 40 * MiB, S0));
    uint64_t queries = driver_calls(XSA_DRV_event_query), syncs = driver_calls(XSA_DRV_event_synchronize);
    int64_t retries = stats(p).num_alloc_retries, sync_all = stats(p).num_sync_all_streams;
    pool_begin(p, G1, S1, true);
    void *a = alloc(p, 4096, S1), *b = alloc(p, 4096, S0);
    release(p, a);
    a = alloc(p, 4096, S1);
    /* A miss that only the cache's release could serve fails rather than
     * synchronize; empty_cache does nothing. */
    void *x = NULL;
    assert_int_equal(xsa_pool_malloc(p, 40 * MiB, S1, &x, err, sizeof err), XSA_POOL_OOM);
    CHECK(p);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(driver_calls(XSA_DRV_event_query), queries);
    assert_int_equal(driver_calls(XSA_DRV_event_synchronize), syncs);
    assert_int_equal(stats(p).num_alloc_retries, retries);
    assert_int_equal(stats(p).num_sync_all_streams, sync_all);
    pool_end(p, G1);
    /* Outside the capture both happen again: the counters can see them. */
    release(p, alloc(p, 4096, S0));
    assert_true(driver_calls(XSA_DRV_event_query) > queries);
    x = alloc(p, 40 * MiB, S1);
    assert_int_equal(stats(p).num_sync_all_streams, sync_all + 1);
    release(p, x);
    release(p, a);
    release(p, b);
    pool_drop(p, G1);
    teardown(p);
}

static void test_no_event_query_during_capture(void **state) {
    (void)state;
    run_both(no_event_query_during_capture);
}

/* ---- memory of pools in use ---- */

static void recycling_at_once(xsa_pool_options *o) {
    o->page_recycling = true;
    o->page_recycling_headroom = 0;
}

static void test_recycling_and_empty_cache_leave_live_pools_alone(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling_at_once);
    pool_begin(p, G1, S1, true);
    void *g = alloc(p, 8 * MiB, S1); /* the graph's temporary: freed in the capture */
    release(p, g);
    pool_end(p, G1);
    /* The global pool grows to the device's highest allocated bytes: page
     * recycling would take the pool's 4 free pages. */
    void *a = alloc(p, 8 * MiB, S0);
    assert_int_equal(stats(p).num_pages_recycled, 0);
    assert_int_equal(held_by(p, G1), 8 * MiB);
    release(p, a);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(held_by(p, G1), 8 * MiB);
    assert_int_equal(reserved(p), 8 * MiB);
    /* A replay writes the freed block's memory: still mapped. */
    assert_int_equal(xsa_sim_launch(S1, (xsa_devptr)(uintptr_t)g, 8 * MiB), XSA_CU_SUCCESS);
    xsa_sim_complete_all();
    CHECK(p);
    /* Released, the pool's free pages serve the device again. */
    pool_drop(p, G1);
    assert_int_equal(reserved(p), 0);
    teardown(p);
}

/* ---- a captured graph on the simulated driver ---- */

static void launch(void *stream, void *ptr, size_t size) {
    assert_int_equal(xsa_sim_launch(stream, (xsa_devptr)(uintptr_t)ptr, size), XSA_CU_SUCCESS);
}

static bool overlaps(const xsa_sim_range *r, const void *ptr, size_t size) {
    uintptr_t lo = (uintptr_t)ptr;
    return r->ptr < lo + size && lo < r->ptr + r->size;
}

/* Issue 16's program: a graph captured on S1 whose temporaries are freed
 * inside the capture, then eager allocations on the capture's stream and
 * another, which recycling (headroom 0) would feed with the graph's free
 * pages, then a replay. The capture must stay valid (no query of the event
 * a record_stream free waits for), no eager block may overlap memory the
 * graph uses, and the replay
 * must find its memory mapped. Classic mode warms the pool up first: a
 * cuMemAlloc during a global capture invalidates it (as on the H100). */
static void captured_graph(bool expandable) {
    xsa_pool *p = make_pool(256 * MiB, expandable, recycling_at_once);
    void *x = alloc(p, 4 * MiB, S1);
    launch(S1, x, 4 * MiB);
    void *w = alloc(p, 4096, S2); /* its free waits for an event on S1, pending through the capture */
    use_on(p, w, S1);
    release(p, w);
    if (!expandable) {
        pool_begin(p, G1, S1, false);
        release(p, alloc(p, 8 * MiB, S1));
        pool_end(p, G1);
    }
    assert_int_equal(XSA_DRV(drv, stream_begin_capture, S1), XSA_CU_SUCCESS);
    pool_begin(p, G1, S1, true);
    void *a = alloc(p, 2 * MiB, S1);
    launch(S1, a, 2 * MiB);
    void *b = alloc(p, 2 * MiB, S1);
    launch(S1, b, 2 * MiB);
    release(p, a);
    void *c = alloc(p, 2 * MiB, S1); /* a's memory, reused inside the capture */
    launch(S1, c, 2 * MiB);
    release(p, b);
    pool_end(p, G1);
    xsa_graph graph = NULL;
    xsa_graph_exec exec = NULL;
    assert_int_equal(XSA_DRV(drv, stream_end_capture, S1, &graph), XSA_CU_SUCCESS);
    assert_non_null(graph);
    assert_int_equal(XSA_DRV(drv, graph_instantiate, &exec, graph), XSA_CU_SUCCESS);
    CHECK(p);
    enum { EAGER = 16 };
    void *eager[EAGER];
    for (int i = 0; i < EAGER - 1; i++) eager[i] = alloc(p, 2 * MiB, i % 2 ? S2 : S1);
    /* The work queued so far completes; the next growth unmaps the old
     * addresses of any pages recycling moved (the illegal address
     * at the replay, had they been the graph's). */
    xsa_sim_complete_all();
    eager[EAGER - 1] = alloc(p, 2 * MiB, S1);
    xsa_sim_range r[8];
    size_t n = xsa_sim_graph_exec_ranges(exec, r, 8);
    assert_int_equal(n, 3);
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < EAGER; i++)
            if (overlaps(&r[k], eager[i], 2 * MiB)) fail_msg("eager block %d overlaps the graph's node %zu", i, k);
    assert_int_equal(XSA_DRV(drv, graph_launch, exec, S1), XSA_CU_SUCCESS);
    xsa_sim_complete_all();
    CHECK(p);
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use || v.bad_launches || v.failed_captures) fail_msg("replay: %s", v.first);
    for (int i = 0; i < EAGER; i++) release(p, eager[i]);
    release(p, c);
    release(p, x);
    assert_int_equal(XSA_DRV(drv, graph_exec_destroy, exec), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, graph_destroy, graph), XSA_CU_SUCCESS);
    pool_drop(p, G1);
    if (!expandable) pool_drop(p, G1); /* the warm-up's use */
    teardown(p);
}

static void test_captured_graph_replays_over_its_pool(void **state) {
    (void)state;
    run_both(captured_graph);
}

/* ---- classic segments ---- */

static void gc_at_half(xsa_pool_options *o) { o->garbage_collection_threshold = 0.5; }

/* cuMemAlloc'd segments capture too: during a capture no segment is
 * freed (cuMemFree synchronizes the device), by garbage collection or the
 * out-of-memory fallbacks, and nothing synchronizes. */
static void test_capture_in_classic_mode(void **state) {
    (void)state;
    xsa_pool *p = make_pool(64 * MiB, false, gc_at_half);
    release(p, alloc(p, 40 * MiB, S0)); /* cached, unsplit, above the GC threshold */
    uint64_t frees = driver_calls(XSA_DRV_mem_free), syncs = driver_calls(XSA_DRV_stream_synchronize);
    pool_begin(p, G1, S1, true);
    void *a = alloc(p, 4 * MiB, S1); /* a new 20 MiB segment of the pool */
    ASSERT_POOL(p, a, G1);
    void *x = NULL;
    assert_int_equal(xsa_pool_malloc(p, 20 * MiB, S1, &x, err, sizeof err), XSA_POOL_OOM);
    CHECK(p);
    release(p, a);
    assert_ptr_equal(alloc(p, 4 * MiB, S1), a);
    assert_int_equal(driver_calls(XSA_DRV_mem_free), frees);
    assert_int_equal(driver_calls(XSA_DRV_stream_synchronize), syncs);
    pool_end(p, G1);
    /* After the capture the same request frees the global cache and fits. */
    pool_begin(p, G1, S1, false);
    x = alloc(p, 20 * MiB, S1);
    assert_true(driver_calls(XSA_DRV_mem_free) > frees);
    release(p, x);
    release(p, a);
    pool_end(p, G1);
    pool_drop(p, G1);
    pool_drop(p, G1); /* each begin added a use */
    assert_int_equal(usage().mem_allocs, 0);
    teardown(p);
}

/* Page recycling moves pages with an event fence (recorded and queried):
 * not during a capture. */
static void test_no_page_moves_during_capture(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling_at_once);
    release(p, alloc(p, 8 * MiB, S0)); /* 4 free pages of the global pool */
    uint64_t records = driver_calls(XSA_DRV_event_record), queries = driver_calls(XSA_DRV_event_query);
    pool_begin(p, G1, S1, true);
    void *g = alloc(p, 8 * MiB, S1);
    assert_int_equal(stats(p).num_pages_recycled, 0);
    assert_int_equal(driver_calls(XSA_DRV_event_record), records);
    assert_int_equal(driver_calls(XSA_DRV_event_query), queries);
    release(p, g);
    pool_end(p, G1);
    /* The same growth outside a capture takes them. */
    pool_begin(p, G2, S1, false);
    void *h = alloc(p, 8 * MiB, S1);
    assert_int_equal(stats(p).num_pages_recycled, 4);
    release(p, h);
    pool_end(p, G2);
    /* Their old addresses wait for S0's work: a growth during a capture
     * does not query its event to unmap them. */
    queries = driver_calls(XSA_DRV_event_query);
    pool_begin(p, G1, S1, true);
    void *k = alloc(p, 16 * MiB, S1);
    assert_int_equal(driver_calls(XSA_DRV_event_query), queries);
    release(p, k);
    pool_end(p, G1);
    pool_drop(p, G1);
    pool_drop(p, G2);
    teardown(p);
}

/* ---- released pools ---- */

static void release_returns_memory(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    assert_int_equal(xsa_pool_mempool_create(p, G1, err, sizeof err), XSA_POOL_OK); /* MemPool() */
    CHECK(p);
    pool_begin(p, G1, S1, true);                                                          /* use 2 */
    void *a = alloc(p, 8 * MiB, S1), *b = alloc(p, 1000, S1), *c = alloc(p, 4 * MiB, S1);
    release(p, a);
    pool_end(p, G1);
    pool_drop(p, G1);
    int uses = 0;
    assert_true(xsa_pool_mempool_exists(p, G1, &uses));
    assert_int_equal(uses, 1);
    /* In use: kept (classic: a and c share one 20 MiB segment). */
    assert_int_equal(held_by(p, G1), (expandable ? 12 * MiB : 20 * MiB) + 2 * MiB);
    pool_drop(p, G1);
    /* Released: the free memory goes at once (a's pages; a classic segment
     * only when all of it is free), the rest with the last block. */
    size_t left = (expandable ? 4 * MiB : 20 * MiB) + 2 * MiB;
    assert_int_equal(held_by(p, G1), left);
    assert_true(xsa_pool_mempool_exists(p, G1, &uses));
    assert_int_equal(uses, 0);
    release(p, c); /* not the last block: nothing is unmapped or synchronized for it */
    assert_int_equal(held_by(p, G1), left);
    release(p, b);
    assert_int_equal(reserved(p), 0);
    assert_false(xsa_pool_mempool_exists(p, G1, NULL));
    assert_int_equal(usage().handles + usage().mem_allocs, 0);
    /* A pool released during another capture gives its memory back at the end. */
    pool_begin(p, G2, S2, true);
    pool_begin(p, G1, S1, false);
    release(p, alloc(p, 1000, S1));
    pool_end(p, G1);
    pool_drop(p, G1);
    assert_int_equal(held_by(p, G1), 2 * MiB);
    pool_end(p, G2);
    assert_int_equal(held_by(p, G1), 0);
    assert_false(xsa_pool_mempool_exists(p, G1, NULL));
    pool_drop(p, G2);
    teardown(p);
}

static void test_release_of_empty_pool_returns_memory(void **state) {
    (void)state;
    run_both(release_returns_memory);
}

/* Warms memory pool id up on S1 outside any capture (classic mode: a
 * cuMemAlloc during a global capture invalidates it, as on the H100). */
static void warm_up(xsa_pool *p, xsa_mempool_id id, bool expandable) {
    if (expandable) return;
    pool_begin(p, id, S1, false);
    release(p, alloc(p, 4000, S1));
    pool_end(p, id);
}

/* Captures on S1 into memory pool id: launches on *b (when launch_b) then
 * ten times b = b + 1, each a new block of id, the old one freed inside
 * the capture. Returns the instantiated graph; *b is the last block. */
static xsa_graph_exec capture_chain(xsa_pool *p, xsa_mempool_id id, void **b, bool launch_b, xsa_graph *graph) {
    assert_int_equal(XSA_DRV(drv, stream_begin_capture, S1), XSA_CU_SUCCESS);
    pool_begin(p, id, S1, true);
    if (launch_b) launch(S1, *b, 4000);
    void *first = *b;
    for (int i = 0; i < 10; i++) {
        void *next = alloc(p, 4000, S1);
        launch(S1, next, 4000);
        if (*b != first || launch_b) release(p, *b);
        *b = next;
    }
    xsa_graph_exec exec = NULL;
    assert_int_equal(XSA_DRV(drv, stream_end_capture, S1, graph), XSA_CU_SUCCESS);
    pool_end(p, id); /* after the capture, as torch's capture_end */
    assert_int_equal(XSA_DRV(drv, graph_instantiate, &exec, *graph), XSA_CU_SUCCESS);
    CHECK(p);
    return exec;
}

/* No kernel on unmapped memory, bad launch, race or failed capture so far. */
static void expect_no_violation(const char *when) {
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use || v.bad_launches || v.races || v.failed_captures) fail_msg("%s: %s", when, v.first);
}

static void replay(xsa_pool *p, xsa_graph_exec exec) {
    assert_int_equal(XSA_DRV(drv, graph_launch, exec, S1), XSA_CU_SUCCESS);
    xsa_sim_complete_all();
    CHECK(p);
    expect_no_violation("replay");
}

static void destroy_graph(xsa_graph_exec exec, xsa_graph graph) {
    assert_int_equal(XSA_DRV(drv, graph_exec_destroy, exec), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, graph_destroy, graph), XSA_CU_SUCCESS);
}

/* PyTorch's test_graph_capture_reset_recapture: a graph's output b (a
 * block of its pool G1) outlives g.reset(), which releases G1; the next
 * capture, into G2, writes b and frees it (b = b + 2). The replay of the
 * second graph writes b's memory, so freeing b during that capture must
 * not give G1's memory back while G2 is in use (on the H100 it did, at
 * the capture's end: an illegal address that poisoned the context). Once
 * G2 is released too, both pools' memory goes back. */
static void reset_recapture(bool expandable) {
    xsa_pool *p = make_pool(256 * MiB, expandable, NULL);
    void *a = alloc(p, 4000, S1);
    launch(S1, a, 4000);
    warm_up(p, G1, expandable);
    warm_up(p, G2, expandable);
    void *b = a;
    xsa_graph graph = NULL;
    xsa_graph_exec exec = capture_chain(p, G1, &b, false, &graph);
    ASSERT_POOL(p, b, G1);
    replay(p, exec);
    destroy_graph(exec, graph); /* g.reset() */
    pool_drop(p, G1);
    if (!expandable) pool_drop(p, G1); /* the warm-up's use */
    assert_true(held_by(p, G1) > 0);    /* b is live */
    void *old_b = b;
    exec = capture_chain(p, G2, &b, true, &graph);
    ASSERT_POOL(p, b, G2);
    xsa_sim_range r[16];
    size_t n = xsa_sim_graph_exec_ranges(exec, r, 16);
    bool writes_old_b = false;
    for (size_t k = 0; k < n; k++) writes_old_b |= overlaps(&r[k], old_b, 4000);
    assert_true(writes_old_b);
    replay(p, exec);
    replay(p, exec);
    assert_true(held_by(p, G1) > 0); /* old b's memory, which the graph writes */
    destroy_graph(exec, graph); /* g.reset(); del g */
    release(p, b);
    release(p, a);
    pool_drop(p, G2);
    if (!expandable) pool_drop(p, G2);
    /* G2 released and empty: it and the pool it kept go back. */
    assert_false(xsa_pool_mempool_exists(p, G1, NULL));
    assert_false(xsa_pool_mempool_exists(p, G2, NULL));
    assert_int_equal(held_by(p, G1) + held_by(p, G2), 0);
    teardown(p);
}

static void test_pool_released_with_live_block_freed_in_next_capture(void **state) {
    (void)state;
    run_both(reset_recapture);
}

/* PyTorch's test_repeat_graph_capture_cublas_workspace_memory: each round
 * captures on the capture stream S1 into a new pool, whose temporaries are
 * freed inside the capture, and replays on the caller's stream S2; the
 * next round's CUDAGraph() destroys the graph and releases its pool while
 * that replay may still run (on the H100, under load, an illegal address).
 * S2 is no stream of the pool's: the pool's memory may go back only once
 * every stream is past the replays, so the release waits for the device. */
static void release_while_replaying_elsewhere(bool expandable) {
    xsa_pool *p = make_pool(256 * MiB, expandable, recycling_at_once);
    for (uint64_t round = 1; round <= 4; round++) {
        const xsa_mempool_id g = {round, 0};
        warm_up(p, g, expandable);
        assert_int_equal(XSA_DRV(drv, stream_begin_capture, S1), XSA_CU_SUCCESS);
        pool_begin(p, g, S1, true);
        void *workspace = alloc(p, 4 * MiB, S1), *out = alloc(p, 4 * MiB, S1);
        launch(S1, workspace, 4 * MiB);
        launch(S1, out, 4 * MiB);
        release(p, out);
        release(p, workspace);
        xsa_graph graph = NULL;
        xsa_graph_exec exec = NULL;
        assert_int_equal(XSA_DRV(drv, stream_end_capture, S1, &graph), XSA_CU_SUCCESS);
        pool_end(p, g);
        assert_int_equal(XSA_DRV(drv, graph_instantiate, &exec, graph), XSA_CU_SUCCESS);
        assert_int_equal(XSA_DRV(drv, graph_launch, exec, S2), XSA_CU_SUCCESS); /* still running */
        destroy_graph(exec, graph);
        pool_drop(p, g);
        if (!expandable) pool_drop(p, g); /* the warm-up's use */
        CHECK(p);
        assert_int_equal(held_by(p, g), 0);
        expect_no_violation("after the release");
    }
    xsa_sim_complete_all();
    teardown(p);
}

static void test_pool_released_while_a_replay_runs_on_another_stream(void **state) {
    (void)state;
    run_both(release_while_replaying_elsewhere);
}

/* The device-wide wait refused: the release reports it and gives nothing
 * back (the replay may still run); empty_cache later waits and does. */
static void release_wait_refused(bool expandable) {
    xsa_pool *p = make_pool(256 * MiB, expandable, NULL);
    warm_up(p, G1, expandable);
    pool_begin(p, G1, S1, true);
    void *a = alloc(p, 4 * MiB, S1);
    launch(S1, a, 4 * MiB);
    release(p, a);
    pool_end(p, G1);
    if (!expandable) pool_drop(p, G1);
    size_t held = held_by(p, G1);
    assert_true(held > 0);
    xsa_sim_fail_call(XSA_DRV_ctx_synchronize, 1, XSA_CU_ERROR_UNKNOWN);
    assert_int_equal(xsa_pool_mempool_release(p, G1, err, sizeof err), XSA_POOL_DRIVER_ERROR);
    assert_non_null(strstr(err, "cuCtxSynchronize"));
    CHECK(p);
    assert_int_equal(held_by(p, G1), held);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(held_by(p, G1), 0);
    assert_false(xsa_pool_mempool_exists(p, G1, NULL));
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use) fail_msg("%s", v.first);
    teardown(p);
}

static void test_refused_device_wait_keeps_the_pool(void **state) {
    (void)state;
    run_both(release_wait_refused);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routing_by_filter),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_reuse_within_pool_one_stream),
        cmocka_unit_test(test_no_reuse_outside_pool),
        cmocka_unit_test(test_cross_stream_free_deferred_while_capturing),
        cmocka_unit_test(test_no_event_query_during_capture),
        cmocka_unit_test(test_recycling_and_empty_cache_leave_live_pools_alone),
        cmocka_unit_test(test_no_page_moves_during_capture),
        cmocka_unit_test(test_captured_graph_replays_over_its_pool),
        cmocka_unit_test(test_release_of_empty_pool_returns_memory),
        cmocka_unit_test(test_pool_released_with_live_block_freed_in_next_capture),
        cmocka_unit_test(test_pool_released_while_a_replay_runs_on_another_stream),
        cmocka_unit_test(test_refused_device_wait_keeps_the_pool),
        cmocka_unit_test(test_capture_in_classic_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
