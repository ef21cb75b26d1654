/*
 * ready_test: pages the helper thread readies where a growth ended
 * (pool/ready.c), its rounds run here one at a time: below the peak of
 * reserved memory only, never raising it when a growth overtook the job
 * nor passing a memory fraction lowered meanwhile, never planned without
 * the host memory its way back needs (which then needs none), a failure
 * leaving the range unmapped, and empty_cache winning over
 * readying (none planned after it for a growth before it; a job under
 * way across it gives its pages back), so that reserved memory reads
 * what PyTorch's empty_cache promises. Both invariant checkers run after
 * every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pool/jobs.h"
#include "tests/pool/pool_fixture.h"

#define LATER 12500000ull /* ns: a round after the first */

/* calloc and realloc, refused while this is set (the test links with
 * -Wl,--wrap=calloc,--wrap=realloc: the pool's calls come here). */
static bool refuse_host;
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *ptr, size_t size);
#define WRAPPER __attribute__((visibility("default"))) /* the tests' objects are hidden by default */
WRAPPER void *__wrap_calloc(size_t n, size_t size) { return refuse_host ? NULL : __real_calloc(n, size); }
WRAPPER void *__wrap_realloc(void *ptr, size_t size) { return refuse_host ? NULL : __real_realloc(ptr, size); }

static void helper_only(xsa_pool_options *o) {
    o->helper_thread = true;
    o->page_decay_ms = 0;
}

/* A burst of `bytes` on S0 sets the peak and empty_cache takes it back:
 * reserved memory is below its peak, where the helper readies pages. */
static void burst_taken_back(xsa_pool *p, size_t bytes) {
    release(p, alloc(p, bytes, S0));
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
}

/* A pool whose block *a (2 MiB) stays while a 20 MiB burst sets the peak
 * and goes: the next growth of S0 is below the peak. */
static xsa_pool *below_the_peak(void **a) {
    xsa_pool *p = make_pool(1 * GiB, true, helper_only);
    *a = alloc(p, 2 * MiB, S0);
    burst_taken_back(p, 20 * MiB);
    return p;
}

/* below_the_peak, then *b's growth of one page and a round planned: the
 * readying of the page after *b is under way (its driver calls not yet
 * made). */
static xsa_pool *readying_planned(void **a, void **b, xsa_pool_jobs *jobs) {
    xsa_pool *p = below_the_peak(a);
    *b = alloc(p, 2 * MiB, S0);
    xsa_pool_jobs_plan(p, 0, jobs);
    check(p);
    assert_int_equal(jobs->n, 1);
    return p;
}

/* The readied page went back: reserved memory is a's and b's alone, and
 * the next round gives its handle back to the driver. */
static void readied_page_went_back(xsa_pool *p) {
    assert_int_equal(reserved(p), 4 * MiB);
    helper_round(p, LATER);
    assert_int_equal(usage().handle_bytes, 4 * MiB);
}

static void test_pages_readied_where_a_growth_ended_below_the_peak(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, helper_only);
    /* Reserved at its peak: a growth's next pages are not readied. */
    void *a = alloc(p, 2 * MiB, S0);
    uint64_t creates = driver_calls(XSA_DRV_mem_create);
    helper_round(p, 0);
    assert_int_equal(driver_calls(XSA_DRV_mem_create), creates);
    /* Below the peak (a burst released), a growth of one page readies the
     * next one: the next miss of the stream is a cache hit. The user's
     * peak reset (torch.cuda.reset_peak_memory_stats every step, to log
     * it) changes nothing: the peak is the highest ever. */
    burst_taken_back(p, 20 * MiB);
    xsa_pool_reset_peak_stats(p);
    check(p);
    assert_int_equal(reserved(p), 2 * MiB);
    void *b = alloc(p, 2 * MiB, S0);
    helper_round(p, LATER);
    assert_int_equal(reserved(p), 6 * MiB);
    creates = driver_calls(XSA_DRV_mem_create);
    void *c = alloc(p, 2 * MiB, S0);
    assert_int_equal(driver_calls(XSA_DRV_mem_create), creates);
    /* Readied pages are cached memory like any other. */
    release(p, b);
    release(p, c);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(reserved(p), 2 * MiB);
    release(p, a);
    teardown(p);
}

static void test_readied_pages_a_growth_overtook_never_raise_the_peak(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, helper_only);
    /* a [0, 2) MiB stays; a 4 MiB burst sets the peak at 6, empty_cache
     * takes it back; b's growth of one page is to be readied ahead. */
    void *a = alloc(p, 2 * MiB, S0);
    burst_taken_back(p, 4 * MiB);
    void *b = alloc(p, 2 * MiB, S0);
    assert_int_equal(reserved(p), 4 * MiB);
    /* The helper holds the page after b and maps it outside the lock;
     * meanwhile the stream misses again and grows elsewhere, to the peak. */
    xsa_pool_jobs jobs;
    xsa_pool_jobs_plan(p, 0, &jobs);
    check(p);
    assert_int_equal(jobs.n, 1);
    void *c = alloc(p, 2 * MiB, S0);
    assert_int_equal(reserved(p), 6 * MiB);
    xsa_pool_jobs_run(&jobs);
    xsa_pool_jobs_commit(p, &jobs);
    check(p);
    /* The readied page would raise the peak to 8 MiB: it goes back to the
     * driver (by the next round, off the allocation path) instead. */
    assert_int_equal(reserved(p), 6 * MiB);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].peak, 6 * MiB);
    helper_round(p, LATER);
    assert_int_equal(usage().handle_bytes, 6 * MiB);
    assert_int_equal(reserved(p), 6 * MiB);
    release(p, c);
    release(p, b);
    release(p, a);
    teardown(p);
}

/* A growth's readying not yet planned when the user empties the cache:
 * none is planned after it, so reserved memory stays what the live
 * blocks hold. */
static void test_empty_cache_forgets_the_readying_a_growth_asked_for(void **state) {
    (void)state;
    void *a;
    xsa_pool *p = below_the_peak(&a);
    void *b = alloc(p, 2 * MiB, S0); /* a growth of one page, below the peak */
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    check(p);
    helper_round(p, 0);
    assert_int_equal(reserved(p), 4 * MiB);
    assert_int_equal(usage().handle_bytes, 4 * MiB);
    release(p, b);
    release(p, a);
    teardown(p);
}

/* A readying under way (its driver calls outside the lock) while the
 * user empties the cache: its pages go back to the driver, by the next
 * round, never into the cache. */
static void test_readying_under_way_at_empty_cache_gives_its_pages_back(void **state) {
    (void)state;
    void *a, *b;
    xsa_pool_jobs jobs;
    xsa_pool *p = readying_planned(&a, &b, &jobs);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    check(p);
    xsa_pool_jobs_run(&jobs);
    xsa_pool_jobs_commit(p, &jobs);
    check(p);
    readied_page_went_back(p);
    /* Readying goes on at later growths. */
    void *c = alloc(p, 2 * MiB, S0);
    helper_round(p, 2 * LATER);
    assert_int_equal(reserved(p), 8 * MiB);
    release(p, c);
    release(p, b);
    release(p, a);
    teardown(p);
}

/* The memory fraction lowered while a readying is under way: its pages
 * would pass the new limit, so they go back to the driver, as a growth
 * would have been refused them. */
static void test_readying_across_a_lower_memory_fraction_gives_its_pages_back(void **state) {
    (void)state;
    void *a, *b;
    xsa_pool_jobs jobs;
    xsa_pool *p = readying_planned(&a, &b, &jobs);
    xsa_pool_set_memory_fraction(p, (double)(4 * MiB) / (double)(1 * GiB)); /* what is reserved now */
    xsa_pool_jobs_run(&jobs);
    xsa_pool_jobs_commit(p, &jobs);
    check(p);
    readied_page_went_back(p);
    release(p, b);
    release(p, a);
    teardown(p);
}

/* Without host memory at its planning, a readying is not planned (it
 * could not be given back): nothing changes; the next growth's is. */
static void test_no_readying_without_host_memory_for_its_way_back(void **state) {
    (void)state;
    void *a;
    xsa_pool *p = below_the_peak(&a);
    void *b = alloc(p, 2 * MiB, S0);
    xsa_pool_jobs jobs;
    refuse_host = true;
    xsa_pool_jobs_plan(p, 0, &jobs);
    refuse_host = false;
    check(p);
    assert_int_equal(jobs.n, 0);
    xsa_pool_jobs_commit(p, &jobs);
    check(p);
    assert_int_equal(reserved(p), 4 * MiB);
    void *c = alloc(p, 2 * MiB, S0);
    helper_round(p, LATER);
    assert_int_equal(reserved(p), 8 * MiB);
    release(p, c);
    release(p, b);
    release(p, a);
    teardown(p);
}

/* Giving pages back needs no host memory: a readying across empty_cache
 * whose commit finds none still keeps its pages out of the cache. */
static void test_readied_pages_go_back_without_host_memory(void **state) {
    (void)state;
    void *a, *b;
    xsa_pool_jobs jobs;
    xsa_pool *p = readying_planned(&a, &b, &jobs);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    xsa_pool_jobs_run(&jobs);
    refuse_host = true;
    xsa_pool_jobs_commit(p, &jobs);
    refuse_host = false;
    check(p);
    readied_page_went_back(p);
    release(p, b);
    release(p, a);
    teardown(p);
}

static void test_readying_that_fails_leaves_the_range_unmapped(void **state) {
    (void)state;
    void *a;
    xsa_pool *p = below_the_peak(&a);
    /* Out of memory: a guess gone wrong, nobody is told (the next malloc,
     * a growth, succeeds). */
    void *b = alloc(p, 2 * MiB, S0);
    xsa_sim_fail_call(XSA_DRV_mem_create, 1, XSA_CU_ERROR_OUT_OF_MEMORY);
    helper_round(p, 0);
    assert_int_equal(reserved(p), 4 * MiB);
    /* A refused map is told. */
    void *c = alloc(p, 2 * MiB, S0);
    xsa_sim_fail_call(XSA_DRV_mem_map, 1, XSA_CU_ERROR_UNKNOWN);
    helper_round(p, LATER);
    assert_int_equal(reserved(p), 6 * MiB);
    expect_helper_notice(p, "cuMemMap");
    release(p, c);
    release(p, b);
    release(p, a);
    teardown(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pages_readied_where_a_growth_ended_below_the_peak),
        cmocka_unit_test(test_readied_pages_a_growth_overtook_never_raise_the_peak),
        cmocka_unit_test(test_empty_cache_forgets_the_readying_a_growth_asked_for),
        cmocka_unit_test(test_readying_under_way_at_empty_cache_gives_its_pages_back),
        cmocka_unit_test(test_readying_across_a_lower_memory_fraction_gives_its_pages_back),
        cmocka_unit_test(test_no_readying_without_host_memory_for_its_way_back),
        cmocka_unit_test(test_readied_pages_go_back_without_host_memory),
        cmocka_unit_test(test_readying_that_fails_leaves_the_range_unmapped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
