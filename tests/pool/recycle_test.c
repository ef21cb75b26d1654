/*
 * recycle_test: page recycling on the simulated driver. Pages move at once,
 * in stream order: the handle is mapped at the growth point while its old
 * address stays mapped (draining) until an event recorded on the old
 * stream completes; another stream waits on that event on the GPU, never
 * on the CPU. The headroom rule bounds what moves, a failed growth gives
 * its pages back, and releasing or destroying the pool ends the drains.
 * Blocks freed with record_stream are handed over (their stream waits on
 * the GPU) when memory is short, or to serve their own stream's miss that
 * they fit, and a growth fills partial pages first.
 * Both invariant checkers run after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/pool/pool_fixture.h"

static void recycling(xsa_pool_options *o) { o->page_recycling = true; }

static void fill(void *p, int byte, size_t n) { memset(p, byte, n); }

static void expect_bytes(const void *p, int byte, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != (unsigned char)byte) fail_msg("byte %zu of %p changed", i, p);
}

/* Large segment of S0: a [0, 6), b [6, 10), c [10, 12) MiB, b freed; the
 * stream's work is still queued (events complete only when told). */
typedef struct layout {
    void *a, *b, *c;
} layout;

static layout three_blocks_b_free(xsa_pool *p) {
    layout l = {alloc(p, 6 * MiB, S0), alloc(p, 4 * MiB, S0), alloc(p, 2 * MiB, S0)};
    fill(l.a, 0xA1, 6 * MiB);
    fill(l.c, 0xC3, 2 * MiB);
    release(p, l.b);
    return l;
}

static void test_page_moves_at_once_on_its_stream(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    layout l = three_blocks_b_free(p);
    xsa_sim_usage before = usage();
    uint64_t syncs = driver_calls(XSA_DRV_event_synchronize) + driver_calls(XSA_DRV_stream_synchronize);
    /* The small pool grows by b's upper page, though S0's work may still
     * use it: its work comes after that work on S0. */
    void *d = alloc(p, 1000, S0);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.num_pages_recycled, 1);
    assert_int_equal(usage().handles, before.handles); /* no new physical page */
    assert_int_equal(s.reserved_bytes[XSA_STAT_LARGE_POOL].current, 10 * MiB);
    assert_int_equal(s.reserved_bytes[XSA_STAT_SMALL_POOL].current, 2 * MiB);
    assert_int_equal(driver_calls(XSA_DRV_event_synchronize) + driver_calls(XSA_DRV_stream_synchronize), syncs);
    assert_int_equal(driver_calls(XSA_DRV_stream_wait_event), 0); /* same stream: no wait */
    /* The old address still maps the page (queued work may use it): one
     * physical page, seen at both addresses, counted once. */
    char *old = (char *)l.b + 2 * MiB;
    assert_int_equal(usage().mapped_bytes, 14 * MiB);
    fill(d, 0xDD, 1000);
    expect_bytes(old, 0xDD, 1000);
    /* Its range is nobody's: a request that would fit there goes elsewhere. */
    void *e = alloc(p, 2 * MiB, S0);
    assert_ptr_equal(e, l.b); /* the 2 MiB left of b, not the draining page */
    expect_bytes(l.a, 0xA1, 6 * MiB);
    expect_bytes(l.c, 0xC3, 2 * MiB);
    release(p, e);
    release(p, d);
    release(p, l.a);
    release(p, l.c);
    teardown(p);
}

static void test_other_stream_waits_on_the_gpu_and_old_address_goes_later(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    layout l = three_blocks_b_free(p);
    void *d = alloc(p, 1000, S0); /* b's upper page moves */
    char *upper = (char *)l.b + 2 * MiB, *lower = l.b;
    /* b's lower page moves to S1's small pool: S1 waits for S0's queued
     * work on the GPU (cuStreamWaitEvent), the CPU waits for nothing. */
    void *x = alloc(p, 1 * MiB, S1);
    assert_int_equal(driver_calls(XSA_DRV_stream_wait_event), 1);
    assert_int_equal(driver_calls(XSA_DRV_event_synchronize) + driver_calls(XSA_DRV_stream_synchronize), 0);
    assert_int_equal(stats(p).num_pages_recycled, 2);
    /* S0's work is still queued: both old addresses stay mapped. */
    assert_int_not_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)upper), 0);
    assert_int_not_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)lower), 0);
    /* S0's work completes. The upper page moved before S1 had a segment:
     * its old address goes at the next growth. The lower one moved after:
     * the work S1 had queued then may still use it (a kernel without
     * record_stream), so it stays until that completes too (sweep.c). */
    xsa_sim_complete_stream(S0);
    void *v = alloc(p, 2 * MiB, S1);
    assert_int_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)upper), 0);
    assert_int_not_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)lower), 0);
    release(p, v);
    xsa_sim_complete_all();
    /* The next growth unmaps them (polled, never waited for). */
    void *y = alloc(p, 4 * MiB, S1);
    assert_int_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)upper), 0);
    assert_int_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)lower), 0);
    assert_int_equal(driver_calls(XSA_DRV_event_synchronize) + driver_calls(XSA_DRV_stream_synchronize), 0);
    assert_int_equal(usage().mapped_bytes, (size_t)stats(p).reserved_bytes[XSA_STAT_ALL].current);
    release(p, x);
    release(p, y);
    release(p, d);
    release(p, l.a);
    release(p, l.c);
    teardown(p);
}

/* When the old stream's work has already completed, the other stream needs
 * no wait; pages of the growing stream itself are taken first. */
static void test_no_wait_for_finished_work_and_own_stream_first(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    xsa_sim_set_eager_events(1); /* every recorded event has completed */
    void *a = alloc(p, 4 * MiB, S0), *keep0 = alloc(p, 2 * MiB, S0);
    void *b = alloc(p, 4 * MiB, S1), *keep1 = alloc(p, 2 * MiB, S1);
    release(p, a); /* S0: 2 free pages */
    release(p, b); /* S1: 2 free pages */
    void *x = alloc(p, 1000, S1); /* S1's small pool takes one of b's pages, not a's */
    assert_int_equal(stats(p).num_pages_recycled, 1);
    void *z = alloc(p, 4 * MiB, S0); /* a's pages are all there: a cache hit */
    assert_ptr_equal(z, a);
    assert_int_equal(stats(p).num_pages_recycled, 1);
    release(p, z);
    /* 3 pages for S1: b's last, then a's two; S0's work is done, so S1
     * waits for nothing. */
    void *y = alloc(p, 6 * MiB, S1);
    assert_int_equal(stats(p).num_pages_recycled, 4);
    assert_int_equal(driver_calls(XSA_DRV_stream_wait_event), 0);
    xsa_sim_set_eager_events(0);
    release(p, x);
    release(p, y);
    release(p, keep0);
    release(p, keep1);
    teardown(p);
}

/* A block freed with record_stream waits for the other stream's work. Its
 * pages move only when memory is short, and only after its own stream
 * waits for that work on the GPU (cuStreamWaitEvent): never synchronized
 * on the CPU, and never without the wait. */
static void test_pending_record_stream_block_moves_after_a_gpu_wait(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    void *a = alloc(p, 4 * MiB, S0);
    void *keep = alloc(p, 2 * MiB, S0);
    assert_int_equal(xsa_pool_record_stream(p, a, S1, err, sizeof err), XSA_POOL_OK);
    release(p, a); /* waits for S1's event */
    uint64_t waits = driver_calls(XSA_DRV_stream_wait_event), syncs = driver_calls(XSA_DRV_event_synchronize);
    void *x = alloc(p, 2 * MiB, S1); /* short of a page: a is handed over, one page moves */
    assert_int_equal(stats(p).num_pages_recycled, 1);
    /* S0 waits for S1's event, then S1 for the fence on S0. */
    assert_int_equal(driver_calls(XSA_DRV_stream_wait_event), waits + 2);
    assert_int_equal(driver_calls(XSA_DRV_event_synchronize), syncs);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 6 * MiB);
    xsa_sim_complete_all();
    void *y = alloc(p, 2 * MiB, S1); /* a's other page, a free block of S0 by now */
    assert_int_equal(stats(p).num_pages_recycled, 2);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 6 * MiB);
    release(p, x);
    release(p, y);
    release(p, keep);
    teardown(p);
}

static double headroom;
static void recycling_with_headroom(xsa_pool_options *o) {
    o->page_recycling = true;
    o->page_recycling_headroom = headroom;
}

/* A growth creates new pages while reserved stays within (1 + headroom) x
 * the highest allocated bytes, and moves pages only for the rest. */
static void test_headroom_bounds_moves(void **state) {
    (void)state;
    const struct {
        double headroom;
        int64_t recycled, reserved;
    } cases[] = {
        {0.0, 2, 16 * MiB}, /* high 16 MiB, reserved 16: both pages move */
        {0.1, 2, 16 * MiB}, /* room for 1.6 MiB: still no whole new page */
        {0.2, 1, 18 * MiB}, /* room for 3.2 MiB: one new page, one moved */
        {1.0, 0, 20 * MiB}, /* room for 16 MiB: nothing moves */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        headroom = cases[i].headroom;
        xsa_pool *p = make_pool(1 * GiB, true, recycling_with_headroom);
        void *a = alloc(p, 8 * MiB, S0);
        release(p, alloc(p, 8 * MiB, S0)); /* 4 free pages on S0; allocated 8 of 16 MiB */
        void *x = alloc(p, 4 * MiB, S1);   /* S1's segment needs 2 pages */
        xsa_device_stats s = stats(p);
        if (s.num_pages_recycled != cases[i].recycled || s.reserved_bytes[XSA_STAT_ALL].current != cases[i].reserved)
            fail_msg("headroom %.1f: %lld pages recycled, %lld bytes reserved", headroom,
                     (long long)s.num_pages_recycled, (long long)s.reserved_bytes[XSA_STAT_ALL].current);
        release(p, x);
        release(p, a);
        teardown(p);
    }
}

/* The bound uses the highest allocated bytes ever seen: resetting the peak
 * stats does not make recycling move pages it would not have moved. */
static void test_headroom_survives_peak_reset(void **state) {
    (void)state;
    headroom = 0.5;
    xsa_pool *p = make_pool(1 * GiB, true, recycling_with_headroom);
    release(p, alloc(p, 16 * MiB, S0)); /* high 16 MiB; 8 free pages on S0 */
    xsa_pool_reset_peak_stats(p);       /* allocated peak now 0 */
    void *x = alloc(p, 4 * MiB, S1);    /* within 1.5 x 16 MiB: new pages */
    assert_int_equal(stats(p).num_pages_recycled, 0);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 20 * MiB);
    void *y = alloc(p, 8 * MiB, S1); /* 4 pages, room for 2 new: 2 move */
    assert_int_equal(stats(p).num_pages_recycled, 2);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 24 * MiB); /* the bound */
    release(p, x);
    release(p, y);
    teardown(p);
}

/* A growth that fails after taking pages gives them back where they were:
 * the pool is as before, with the same free memory. */
static void test_failed_growth_gives_pages_back(void **state) {
    (void)state;
    const xsa_driver_entry failing[] = {XSA_DRV_mem_map, XSA_DRV_mem_set_access, XSA_DRV_mem_create};
    for (size_t i = 0; i < sizeof failing / sizeof *failing; i++) {
        headroom = 0.0;
        xsa_pool *p = make_pool(1 * GiB, true, recycling_with_headroom);
        void *a = alloc(p, 8 * MiB, S0);
        release(p, alloc(p, 4 * MiB, S0)); /* 2 free pages; high 12 MiB */
        void *b = alloc(p, 2 * MiB, S1);   /* one page moves: 1 free page left on S0 */
        xsa_device_stats before = stats(p);
        size_t free_before = 0;
        xsa_pool_cache_info(p, &free_before, NULL);
        /* 2 pages: one to move, one new (cuMemCreate is called for it only). */
        xsa_sim_fail_call(failing[i], 1, XSA_CU_ERROR_UNKNOWN);
        void *x = NULL;
        assert_int_equal(xsa_pool_malloc(p, 4 * MiB, S1, &x, err, sizeof err), XSA_POOL_DRIVER_ERROR);
        CHECK(p);
        xsa_device_stats after = stats(p);
        size_t free_after = 0;
        xsa_pool_cache_info(p, &free_after, NULL);
        assert_int_equal(free_after, free_before);
        assert_int_equal(after.num_pages_recycled, before.num_pages_recycled);
        for (int k = 0; k < XSA_STAT_TYPES; k++)
            assert_int_equal(after.reserved_bytes[k].current, before.reserved_bytes[k].current);
        x = alloc(p, 4 * MiB, S1); /* and it works once the driver does */
        release(p, x);
        release(p, a);
        release(p, b);
        teardown(p);
    }
}

static void test_empty_cache_waits_for_old_addresses(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    layout l = three_blocks_b_free(p);
    void *d = alloc(p, 1000, S0); /* b's upper page moves; S0's work is queued */
    release(p, l.a);
    release(p, l.c);
    uint64_t syncs = driver_calls(XSA_DRV_event_synchronize);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_true(driver_calls(XSA_DRV_event_synchronize) > syncs);
    /* Only the small pool's page is left, mapped once. */
    assert_int_equal(usage().mapped_bytes, 2 * MiB);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 2 * MiB);
    assert_int_equal(usage().reservations, 1);
    release(p, d);
    teardown(p);
}

static void test_refused_unmap_of_old_address_is_retried(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    layout l = three_blocks_b_free(p);
    void *d = alloc(p, 1000, S0);
    release(p, l.a);
    release(p, l.c);
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_UNKNOWN);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_DRIVER_ERROR);
    CHECK(p);
    assert_int_equal(usage().mapped_bytes, 14 * MiB); /* the old address stayed, and the rest */
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 12 * MiB);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(usage().mapped_bytes, 2 * MiB);
    release(p, d);
    teardown(p);
}

static void launch(void *stream, void *ptr, size_t size) {
    assert_int_equal(xsa_sim_launch(stream, (xsa_devptr)(uintptr_t)ptr, size), XSA_CU_SUCCESS);
}

static void expect_no_violation(void) {
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use || v.races || v.bad_launches) fail_msg("timeline violation: %s", v.first);
}

/* On the simulated GPU timeline, with kernels still queued on the pages
 * that move: no unmap under a queued kernel, no race between the old
 * block's kernels and the new block's on another stream. (Unmapping the old
 * address at once, as recycling did before it waited for fences, is caught
 * here as an illegal address; moving to another stream without the GPU
 * wait, as a race.) */
static void test_moves_under_queued_kernels_are_safe(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    xsa_sim_set_gpu_lag(100);
    void *a = alloc(p, 6 * MiB, S0), *b = alloc(p, 4 * MiB, S0), *c = alloc(p, 2 * MiB, S0);
    launch(S0, b, 4 * MiB); /* b's last kernel, still queued at its free */
    release(p, b);
    void *d = alloc(p, 1000, S0); /* b's upper page, same stream */
    launch(S0, d, 1000);
    void *x = alloc(p, 1 * MiB, S1); /* b's lower page, to another stream */
    launch(S1, x, 1 * MiB);
    assert_int_equal(stats(p).num_pages_recycled, 2);
    assert_int_not_equal(usage().pending_kernels, 0);
    expect_no_violation();
    xsa_sim_tick(1000); /* the GPU catches up */
    void *y = alloc(p, 4 * MiB, S1); /* a growth: the old addresses are unmapped now */
    launch(S1, y, 4 * MiB);
    assert_int_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)b), 0);
    expect_no_violation();
    release(p, x);
    release(p, y);
    release(p, d);
    release(p, a);
    release(p, c);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    expect_no_violation();
    xsa_sim_set_gpu_lag(-1);
    teardown(p);
}

#define S2 ((void *)0x1002)

/* With the GPU 100 calls behind: a 4 MiB block of S0 (returned; *keep, a 2
 * MiB block after it, stays live) written on S0, then used on S1
 * (record_stream) and freed while S1's kernel on it is still queued. */
static void *freed_while_s1_uses_it(xsa_pool *p, void **keep) {
    xsa_sim_set_gpu_lag(100);
    void *a = alloc(p, 4 * MiB, S0);
    *keep = alloc(p, 2 * MiB, S0);
    launch(S0, a, 4 * MiB);
    xsa_sim_tick(1000); /* S0's write is done before S1 reads */
    assert_int_equal(xsa_pool_record_stream(p, a, S1, err, sizeof err), XSA_POOL_OK);
    launch(S1, a, 4 * MiB);
    release(p, a);
    return a;
}

/* PyTorch's test_cublas_multiple_threads_same_device on the timeline: a
 * block of S0 is used on S1 without record_stream (the program synchronized
 * first, and PyTorch reuses a block on its own stream only, so it needs
 * none) and freed while S1's kernel on it is queued; S2's growth takes its
 * pages. Their old address may go only once the work every stream of the
 * device had queued by then has completed: unmapping it when the fence on
 * S0 (idle) completed was the H100's illegal address. */
static void test_old_address_waits_for_every_stream(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    xsa_sim_set_gpu_lag(100);
    void *a = alloc(p, 4 * MiB, S0), *keep = alloc(p, 2 * MiB, S0);
    void *s1_own = alloc(p, 2 * MiB, S1); /* S1 allocates too, as the test's threads do */
    xsa_sim_tick(1000);
    launch(S1, a, 4 * MiB); /* S1 reads a; no record_stream */
    release(p, a);          /* a free block of S0 at once */
    void *y = alloc(p, 2 * MiB, S2);
    assert_int_equal(stats(p).num_pages_recycled, 1);
    void *z = alloc(p, 4 * MiB, S2); /* a growth: it polls the old addresses */
    expect_no_violation();
    assert_int_not_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)a + 2 * MiB), 0);
    xsa_sim_tick(1000); /* S1's kernel completes */
    void *w = alloc(p, 8 * MiB, S2);
    assert_int_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)a + 2 * MiB), 0);
    expect_no_violation();
    release(p, w);
    release(p, z);
    release(p, y);
    release(p, s1_own);
    release(p, keep);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    expect_no_violation();
    xsa_sim_set_gpu_lag(-1);
    teardown(p);
}

/* The same program, then empty_cache: PyTorch's cudaFree synchronizes the
 * device, so the release waits for every segment stream's work, not only
 * for the stream of the segment it unmaps. */
static void test_empty_cache_waits_for_every_stream(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    xsa_sim_set_gpu_lag(100);
    void *a = alloc(p, 4 * MiB, S0), *s1_own = alloc(p, 2 * MiB, S1);
    xsa_sim_tick(1000);
    launch(S1, a, 4 * MiB); /* S1 reads a; no record_stream */
    release(p, a);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    expect_no_violation();
    assert_int_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)a), 0);
    release(p, s1_own);
    xsa_sim_set_gpu_lag(-1);
    teardown(p);
}

/* On the timeline: a block used on S1 (record_stream) and freed while S1's
 * kernel on it is queued, its pages then going to S2. S2's kernel on them
 * must come after S1's: S0 waits on S1's event, S2 on the fence recorded
 * on S0 after that wait. (Without S0's wait, as a hand-over that skipped
 * cuStreamWaitEvent would, S2's kernel races with S1's.) */
static void test_handed_over_pages_wait_for_the_other_streams_use(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    void *keep, *a = freed_while_s1_uses_it(p, &keep);
    void *y = alloc(p, 2 * MiB, S2);
    launch(S2, y, 2 * MiB);
    assert_int_equal(stats(p).num_pages_recycled, 1);
    assert_int_not_equal(usage().pending_kernels, 0);
    expect_no_violation();
    xsa_sim_tick(1000);
    void *z = alloc(p, 4 * MiB, S2); /* a growth: the old address goes now */
    launch(S2, z, 4 * MiB);
    assert_int_equal(xsa_sim_page_access((xsa_devptr)(uintptr_t)a + 2 * MiB), 0);
    expect_no_violation();
    release(p, y);
    release(p, z);
    release(p, keep);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    expect_no_violation();
    xsa_sim_set_gpu_lag(-1);
    teardown(p);
}

/* On the timeline, at the headroom bound: S0's block used on S1
 * (record_stream) and freed while S1's kernel on it is queued. S0's next
 * request that the block holds with less than a page left gets it, S0
 * waiting for S1's event on the GPU, instead of its pages moving to a
 * growth (which strands the partial pages around them). One that would
 * leave a page free is not served so: that page would move out later. */
static void test_own_pending_block_serves_a_tight_miss(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    void *keep, *a = freed_while_s1_uses_it(p, &keep);
    uint64_t waits = driver_calls(XSA_DRV_stream_wait_event);
    uint64_t syncs = driver_calls(XSA_DRV_event_synchronize) + driver_calls(XSA_DRV_stream_synchronize);
    void *b = alloc(p, 3 * MiB + 1, S0);
    assert_ptr_equal(b, a);
    launch(S0, b, 3 * MiB + 1);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.num_pages_recycled, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 6 * MiB);
    assert_int_equal(driver_calls(XSA_DRV_stream_wait_event), waits + 1); /* S0 on S1's event */
    assert_int_equal(driver_calls(XSA_DRV_event_synchronize) + driver_calls(XSA_DRV_stream_synchronize), syncs);
    assert_int_not_equal(usage().pending_kernels, 0);
    expect_no_violation();
    /* 4 MiB pending again, a 2 MiB request: the usual growth takes it. */
    xsa_sim_tick(1000);
    assert_int_equal(xsa_pool_record_stream(p, b, S1, err, sizeof err), XSA_POOL_OK);
    launch(S1, b, 4 * MiB);
    release(p, b);
    void *c = alloc(p, 2 * MiB, S0);
    assert_ptr_not_equal(c, a);
    assert_int_equal(stats(p).num_pages_recycled, 1);
    launch(S0, c, 2 * MiB);
    expect_no_violation();
    xsa_sim_tick(1000);
    release(p, c);
    release(p, keep);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    expect_no_violation();
    xsa_sim_set_gpu_lag(-1);
    teardown(p);
}

/* A growth maps where it leaves the fewest free bytes in partial pages:
 * into the unmapped range after a free 1 MiB piece (using the piece, one
 * new page) rather than the best-fitting 4 MiB range (two new pages and a
 * free MiB that no page move can take). S0's large segment, in MiB: a
 * [0, 3), a free piece [3, 4), unmapped [4, 10), c [10, 12), unmapped
 * [12, 16), e [16, 18). */
static void test_growth_fills_partial_pages_first(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    void *a = alloc(p, 3 * MiB, S0), *b = alloc(p, 7 * MiB, S0), *c = alloc(p, 2 * MiB, S0);
    void *d = alloc(p, 4 * MiB, S0), *e = alloc(p, 2 * MiB, S0);
    release(p, b);
    release(p, d);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    check(p);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 8 * MiB);
    void *f = alloc(p, 3 * MiB, S0);
    assert_ptr_equal(f, (char *)a + 3 * MiB);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 10 * MiB);
    release(p, f);
    release(p, a);
    release(p, c);
    release(p, e);
    teardown(p);
}

/* Headroom 0.25: a new handle holds at most high / 32 (1/8 of the
 * headroom), so these tests see several-page handles at a few hundred MiB. */
static void quarter_headroom(xsa_pool_options *o) {
    o->page_recycling = true;
    o->page_recycling_headroom = 0.25;
}

static void quarter_headroom_six_mib(xsa_pool_options *o) {
    quarter_headroom(o);
    o->handle_size = 6 * MiB;
}

/* cuMemCreate calls of one allocation; its cuMemMap calls (one a handle,
 * new or moved) in last_maps. */
static uint64_t last_maps;
static uint64_t creates_of(xsa_pool *p, size_t size, void *stream, void **out) {
    uint64_t c0 = driver_calls(XSA_DRV_mem_create), m0 = driver_calls(XSA_DRV_mem_map);
    *out = alloc(p, size, stream);
    last_maps = driver_calls(XSA_DRV_mem_map) - m0;
    return driver_calls(XSA_DRV_mem_create) - c0;
}

/* A growth's new handles hold at most 1/8 of the headroom (the highest
 * allocated bytes x page_recycling_headroom, the request included), at
 * least a page, at most expandable_handle_mb; a partly free handle stays
 * mapped whole at empty_cache. */
static void test_new_handles_follow_the_headroom(void **state) {
    (void)state;
    xsa_pool *p = make_pool(2 * GiB, true, quarter_headroom);
    void *a, *b, *c, *d, *e;
    assert_int_equal(creates_of(p, 1000, S0, &e), 1);          /* small pool: one page */
    assert_int_equal(creates_of(p, 60 * MiB, S0, &a), 30);     /* high 60 MiB: 1-page handles */
    assert_int_equal(creates_of(p, 200 * MiB, S0, &b), 25);    /* high 260 MiB: 4 pages (8 MiB) each */
    assert_int_equal(creates_of(p, 800 * MiB, S0, &c), 40);    /* high 1060 MiB: 16, capped at 10 (20 MiB) */
    assert_int_equal(last_maps, 40);
    assert_int_equal(stats(p).num_pages_recycled, 0);
    release(p, b);
    d = alloc(p, 2 * MiB, S0); /* the front of b's range: one page of its first handle */
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_LARGE_POOL].current, (60 + 8 + 800) * MiB);
    release(p, a);
    release(p, c);
    release(p, d);
    release(p, e);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 0);
    teardown(p);
    /* expandable_handle_mb caps the handles: 6 MiB, 3 pages. */
    p = make_pool(2 * GiB, true, quarter_headroom_six_mib);
    assert_int_equal(creates_of(p, 800 * MiB, S0, &c), 134); /* 133 of 3 pages, 1 of 1 */
    release(p, c);
    teardown(p);
}

/* Recycling moves whole handles: a growth takes a free handle larger than
 * the part of it beyond the headroom when the handle fits in the growth
 * (those pages would be created otherwise), never one larger than the
 * growth. */
static void test_larger_handles_move_whole_within_the_growth(void **state) {
    (void)state;
    xsa_pool *p = make_pool(2 * GiB, true, quarter_headroom_six_mib);
    void *l, *y, *z;
    /* 100 pages at high 200 MiB: 33 handles of 3 pages, then one of 1. */
    assert_int_equal(creates_of(p, 200 * MiB, S0, &l), 34);
    release(p, l);
    /* 28 pages on S1, 25 within the headroom (250 - 200 MiB): 3 wanted.
     * From the top of l's range: its 1-page handle, then a 3-page one (4
     * pages, more than wanted); 24 new pages in 8 handles. */
    assert_int_equal(creates_of(p, 56 * MiB, S1, &y), 8);
    assert_int_equal(last_maps, 8 + 2); /* and the two handles moved */
    assert_int_equal(stats(p).num_pages_recycled, 4);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 248 * MiB);
    /* 2 pages on another stream, 1 wanted: l's 3-page handles are larger
     * than the growth, so it creates both pages (one 2-page handle). */
    assert_int_equal(creates_of(p, 4 * MiB, (void *)0x1002, &z), 1);
    assert_int_equal(last_maps, 1);
    assert_int_equal(stats(p).num_pages_recycled, 4);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 252 * MiB);
    release(p, y);
    release(p, z);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 0);
    teardown(p);
}

/* Destroying the pool with old addresses still draining releases each
 * handle once (teardown checks the simulated driver holds nothing). */
static void test_destroy_while_draining(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, recycling);
    layout l = three_blocks_b_free(p);
    alloc(p, 1000, S0);
    (void)l;
    teardown(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_moves_at_once_on_its_stream),
        cmocka_unit_test(test_other_stream_waits_on_the_gpu_and_old_address_goes_later),
        cmocka_unit_test(test_no_wait_for_finished_work_and_own_stream_first),
        cmocka_unit_test(test_pending_record_stream_block_moves_after_a_gpu_wait),
        cmocka_unit_test(test_headroom_bounds_moves),
        cmocka_unit_test(test_headroom_survives_peak_reset),
        cmocka_unit_test(test_failed_growth_gives_pages_back),
        cmocka_unit_test(test_empty_cache_waits_for_old_addresses),
        cmocka_unit_test(test_refused_unmap_of_old_address_is_retried),
        cmocka_unit_test(test_destroy_while_draining),
        cmocka_unit_test(test_moves_under_queued_kernels_are_safe),
        cmocka_unit_test(test_old_address_waits_for_every_stream),
        cmocka_unit_test(test_empty_cache_waits_for_every_stream),
        cmocka_unit_test(test_new_handles_follow_the_headroom),
        cmocka_unit_test(test_larger_handles_move_whole_within_the_growth),
        cmocka_unit_test(test_handed_over_pages_wait_for_the_other_streams_use),
        cmocka_unit_test(test_own_pending_block_serves_a_tight_miss),
        cmocka_unit_test(test_growth_fills_partial_pages_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
