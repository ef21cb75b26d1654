/*
 * stats_test: what the segment statistics mean, in both modes, on the
 * simulated driver. `segment` counts cuMemAlloc'd (classic) segments, as
 * PyTorch's does; expandable segments never count, as in PyTorch's
 * expandable mode ("we never increment the number of segments",
 * test_cuda.py), whatever they map, for whichever stream or memory pool.
 * The second case replays the allocations of PyTorch's
 * test_graph_memory_stats_and_use_result_after_destroy_graph (a graph
 * captured into a private pool, then destroyed with its result alive) and
 * checks PyTorch's expected deltas. Every step is followed by the pool's and
 * the simulated driver's invariant checkers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/pool/pool_fixture.h"

static void segment_counts_classic_segments_only(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    void *a = alloc(p, 1000, S0);        /* small: a 2 MiB segment */
    void *b = alloc(p, 5 * MiB, S0);     /* large: a 20 MiB segment */
    void *c = alloc(p, 40 * MiB, S1);    /* another stream: its own segment */
    pool_begin(p, (xsa_mempool_id){0, 1}, S1, false);
    void *d = alloc(p, 1000, S1);        /* a memory pool: its own segment */
    pool_end(p, (xsa_mempool_id){0, 1});
    xsa_device_stats s = stats(p);
    assert_int_equal(s.segment[XSA_STAT_ALL].current, expandable ? 0 : 4);
    assert_int_equal(s.segment[XSA_STAT_SMALL_POOL].current, expandable ? 0 : 2);
    assert_int_equal(s.segment[XSA_STAT_LARGE_POOL].allocated, expandable ? 0 : 2);
    assert_int_equal(s.oversize_segments.current, 0);
    /* What expandable segments map counts in reserved_bytes and num_device_alloc. */
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, expandable ? 4 * MiB + 46 * MiB : 4 * MiB + 60 * MiB);
    assert_true(s.num_device_alloc >= 4);
    release(p, a), release(p, b), release(p, c), release(p, d);
    pool_drop(p, (xsa_mempool_id){0, 1});
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    s = stats(p);
    assert_int_equal(s.segment[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.segment[XSA_STAT_ALL].freed, expandable ? 0 : 4);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 0);
    teardown(p);
}

static void test_segment_counts_classic_segments_only(void **state) {
    (void)state;
    run_both(segment_counts_classic_segments_only);
}

/* ---- PyTorch's graph statistics case ---- */

#define SMALL_BUFFER (2 * MiB)
#define LARGE_BUFFER (20 * MiB)
#define ROUND_LARGE (2 * MiB)

typedef struct graph_case {
    size_t bytes;            /* numel * 4 */
    int64_t segments;        /* new segments, classic */
    int64_t reserved;        /* new reserved bytes */
    int64_t reserved_after;  /* reserved bytes left with the result after the graph is gone */
    bool small;
} graph_case;

/* The deltas of the stats PyTorch's test reads, for the case's pool kind. */
typedef struct deltas {
    int64_t segment, reserved, active, active_bytes;
} deltas;

static deltas read_deltas(xsa_pool *p, const xsa_device_stats *before, bool small) {
    xsa_device_stats now = stats(p);
    int t = small ? XSA_STAT_SMALL_POOL : XSA_STAT_LARGE_POOL;
    return (deltas){now.segment[t].current - before->segment[t].current,
                    now.reserved_bytes[t].current - before->reserved_bytes[t].current,
                    now.active[t].current - before->active[t].current,
                    now.active_bytes[t].current - before->active_bytes[t].current};
}

static void expect_deltas(deltas got, deltas want, size_t bytes, const char *when) {
    if (got.segment != want.segment || got.reserved != want.reserved || got.active != want.active ||
        got.active_bytes != want.active_bytes)
        fail_msg("%zu bytes, %s: segment %lld reserved %lld active %lld active_bytes %lld; PyTorch: %lld %lld %lld %lld",
                 bytes, when, (long long)got.segment, (long long)got.reserved, (long long)got.active,
                 (long long)got.active_bytes, (long long)want.segment, (long long)want.reserved, (long long)want.active,
                 (long long)want.active_bytes);
}

/* One case: `a` on stream S1 outside the graph, CUDAGraph's two rng holders
 * (8 bytes each, S1's global cache: they are not allocated from the
 * capture's pool), then the capture into private pool `id` of
 * b = a.clone(); 5 x b = b.clone() + 1 (the temporary freed before the old
 * b). Deleting the graph frees the rng holders and releases the pool. */
static void graph_case_run(xsa_pool *p, const graph_case *c, xsa_mempool_id id, bool expandable) {
    void *a = alloc(p, c->bytes, S1);
    xsa_device_stats before = stats(p);
    void *seed = alloc(p, 8, S1), *offset = alloc(p, 8, S1);
    pool_begin(p, id, S1, true);
    void *b = alloc(p, c->bytes, S1);
    for (int i = 0; i < 5; i++) {
        void *t = alloc(p, c->bytes, S1), *r = alloc(p, c->bytes, S1);
        release(p, t);
        release(p, b);
        b = r;
    }
    pool_end(p, id);
    /* The small pool's deltas include the rng holders (PyTorch's "+ 1024"). */
    deltas want = {expandable ? 0 : c->segments, c->reserved, c->small ? 3 : 1,
                   (int64_t)c->bytes + (c->small ? 1024 : 0)};
    expect_deltas(read_deltas(p, &before, c->small), want, c->bytes, "after the capture");
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK); /* the graph lives: nothing goes */
    CHECK(p);
    expect_deltas(read_deltas(p, &before, c->small), want, c->bytes, "after empty_cache");
    release(p, seed), release(p, offset);
    pool_drop(p, id);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    want = (deltas){expandable ? 0 : 1, c->reserved_after, 1, (int64_t)c->bytes};
    expect_deltas(read_deltas(p, &before, c->small), want, c->bytes, "after the graph is gone");
    release(p, a), release(p, b);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
}

static void graph_stats(bool expandable) {
    size_t min_large = 10 * MiB, rounded = (min_large + 512 + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
    /* PyTorch's expectations (classic; its expandable mode counts no
     * segment). Reserved bytes are per 2 MiB page in xsalloc's expandable
     * mode, PyTorch's too for the small pool; its large pool maps 20 MiB
     * pages, which xsalloc does not (README, "Differences from PyTorch"):
     * the large cases' expandable figures are xsalloc's page counts. */
    const graph_case classic[] = {
        {512, 1, SMALL_BUFFER, SMALL_BUFFER, true},
        {MiB, 2, 2 * SMALL_BUFFER, SMALL_BUFFER, true},
        {MiB + 512, 1, LARGE_BUFFER, LARGE_BUFFER, false},
        {min_large - 512, 2, 2 * LARGE_BUFFER, LARGE_BUFFER, false},
        {min_large + 512, 3, 3 * (int64_t)rounded, (int64_t)rounded, false},
    };
    const graph_case pages[] = {
        {512, 0, SMALL_BUFFER, SMALL_BUFFER, true},
        {MiB, 0, 2 * SMALL_BUFFER, SMALL_BUFFER, true},
        {MiB + 512, 0, 4 * MiB, 2 * MiB, false},
        {min_large - 512, 0, 30 * MiB, 12 * MiB, false},
        {min_large + 512, 0, 32 * MiB, 12 * MiB, false},
    };
    xsa_pool *p = make_pool(4 * GiB, expandable, NULL);
    for (size_t i = 0; i < sizeof classic / sizeof classic[0]; i++)
        graph_case_run(p, expandable ? &pages[i] : &classic[i], (xsa_mempool_id){i + 1, 0}, expandable);
    teardown(p);
}

static void test_pytorch_graph_memory_stats(void **state) {
    (void)state;
    run_both(graph_stats);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment_counts_classic_segments_only),
        cmocka_unit_test(test_pytorch_graph_memory_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
