/*
 * pool_test: PyTorch's caching rules on the simulated driver, in classic
 * and expandable mode. Every step is followed by the pool's and the
 * simulated driver's invariant checkers.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/pool/pool_fixture.h"

static void divisions4(xsa_pool_options *o) {
    for (int i = 0; i < XSA_ROUNDUP_INTERVALS; i++) o->roundup_power2_divisions[i] = 4;
}

static void test_round_size(void **state) {
    (void)state;
    xsa_pool_options o;
    xsa_pool_options_default(&o);
    assert_int_equal(xsa_pool_round_size(&o, 1), 512);
    assert_int_equal(xsa_pool_round_size(&o, 512), 512);
    assert_int_equal(xsa_pool_round_size(&o, 513), 1024);
    assert_int_equal(xsa_pool_round_size(&o, 3 * MiB + 1), 3 * MiB + 512);
    divisions4(&o);
    /* 4 divisions between 2 MiB and 4 MiB: steps of 512 KiB. */
    assert_int_equal(xsa_pool_round_size(&o, 2 * MiB + 1), 2 * MiB + 512 * KiB);
    assert_int_equal(xsa_pool_round_size(&o, 3 * MiB + 1), 3 * MiB + 512 * KiB);
    assert_int_equal(xsa_pool_round_size(&o, 4 * MiB), 4 * MiB);
    /* Below 512 * divisions bytes the plain 512-byte rounding applies. */
    assert_int_equal(xsa_pool_round_size(&o, 1500), 1536);
    /* Small sizes use the first interval: 4 divisions of [1024, 2048) would
     * be 256-byte steps, finer than 512: the power-of-two floor's step. */
    assert_int_equal(xsa_pool_round_size(&o, 2100), 2560);
}

/* ---- classic segments ---- */

static void test_classic_segment_sizes(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    void *a = alloc(p, 1000, S0);            /* small: 2 MiB segment */
    void *b = alloc(p, 5 * MiB, S0);         /* 1-10 MiB: 20 MiB segment */
    void *c = alloc(p, 16 * MiB - 1, S0);    /* >= 10 MiB and no cached fit: its own segment */
    xsa_device_stats s = stats(p);
    assert_int_equal(s.reserved_bytes[XSA_STAT_SMALL_POOL].current, 2 * MiB);
    assert_int_equal(s.reserved_bytes[XSA_STAT_LARGE_POOL].current, 20 * MiB + 16 * MiB);
    assert_int_equal(s.segment[XSA_STAT_ALL].current, 3);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 1024 + 5 * MiB + 16 * MiB);
    assert_int_equal(s.requested_bytes[XSA_STAT_ALL].current, 1000 + 5 * MiB + 16 * MiB - 1);
    assert_int_equal(s.num_device_alloc, 3);
    release(p, a);
    release(p, b);
    release(p, c);
    s = stats(p);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 38 * MiB); /* cached */
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    s = stats(p);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.num_device_free, 3);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].peak, 38 * MiB);
    teardown(p);
}

static void test_split_merge_and_inactive_split(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    void *a = alloc(p, 4096, S0);
    void *b = alloc(p, 4096, S0);
    void *c = alloc(p, 4096, S0);
    assert_ptr_equal((char *)b, (char *)a + 4096); /* split from one small segment */
    assert_ptr_equal((char *)c, (char *)b + 4096);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.segment[XSA_STAT_ALL].current, 1);
    assert_int_equal(s.inactive_split[XSA_STAT_ALL].current, 1); /* the rest of the segment */
    release(p, b);
    s = stats(p);
    assert_int_equal(s.inactive_split[XSA_STAT_ALL].current, 2);
    assert_int_equal(s.inactive_split_bytes[XSA_STAT_ALL].current, 2 * MiB - 3 * 4096 + 4096);
    /* Best fit: a 4 KiB request takes the 4 KiB hole, not the segment's rest. */
    void *d = alloc(p, 4000, S0);
    assert_ptr_equal(d, b);
    release(p, a);
    release(p, c);
    release(p, d);
    s = stats(p);
    assert_int_equal(s.inactive_split[XSA_STAT_ALL].current, 0); /* all merged back */
    assert_int_equal(s.active[XSA_STAT_ALL].current, 0);
    teardown(p);
}

static void test_large_split_rule(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    /* A 20 MiB segment for a 2 MiB request: the rest (18 MiB > 1 MiB) splits. */
    void *a = alloc(p, 2 * MiB, S0);
    void *b = alloc(p, 17 * MiB, S0); /* fits in the 18 MiB remainder: remaining 1 MiB, not > 1 MiB: no split */
    xsa_device_stats s = stats(p);
    assert_int_equal(s.segment[XSA_STAT_ALL].current, 1);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 20 * MiB);
    release(p, a);
    release(p, b);
    teardown(p);
}

static void test_streams_never_share_blocks(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    void *a = alloc(p, 4096, S0);
    release(p, a);
    void *b = alloc(p, 4096, S1);
    assert_ptr_not_equal(a, b);
    assert_int_equal(stats(p).segment[XSA_STAT_ALL].current, 2);
    void *c = alloc(p, 4096, S0);
    assert_ptr_equal(a, c);
    release(p, b);
    release(p, c);
    teardown(p);
}

static void max_split_40(xsa_pool_options *o) { o->max_split_size = 40 * MiB; }

static void test_max_split_size(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, max_split_40);
    void *big = alloc(p, 64 * MiB, S0);
    assert_int_equal(stats(p).oversize_segments.current, 1);
    assert_int_equal(stats(p).oversize_allocations.current, 1);
    release(p, big);
    /* A normal request never gets the oversize block. */
    void *small = alloc(p, 12 * MiB, S0);
    assert_int_equal(stats(p).segment[XSA_STAT_ALL].current, 2);
    /* An oversize request may take it if at most 20 MiB larger... */
    void *over = alloc(p, 50 * MiB, S0);
    assert_ptr_equal(over, big);
    release(p, over);
    /* ...but not if more: 42 MiB + 20 MiB <= 64 MiB, so a new segment. */
    void *over2 = alloc(p, 42 * MiB, S0);
    assert_ptr_not_equal(over2, big);
    release(p, over2);
    release(p, small);
    teardown(p);
}

static void test_oom_report_changes_nothing(void **state) {
    (void)state;
    xsa_pool *p = make_pool(64 * MiB, false, NULL);
    void *a = alloc(p, 40 * MiB, S0);
    xsa_device_stats before = stats(p);
    void *x = NULL;
    assert_int_equal(xsa_pool_malloc(p, 30 * MiB, S0, &x, err, sizeof err), XSA_POOL_OOM);
    assert_null(x);
    assert_non_null(strstr(err, "CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a total capacity of"));
    assert_non_null(strstr(err, "Of the allocated memory 40.00 MiB is allocated by xsalloc"));
    assert_non_null(strstr(err, "max_split_size_mb"));
    CHECK(p);
    xsa_device_stats after = stats(p);
    assert_int_equal(after.num_ooms, before.num_ooms + 1);
    assert_int_equal(after.allocated_bytes[XSA_STAT_ALL].current, before.allocated_bytes[XSA_STAT_ALL].current);
    assert_int_equal(after.reserved_bytes[XSA_STAT_ALL].current, before.reserved_bytes[XSA_STAT_ALL].current);
    /* Larger than the device: refused before any rounding. */
    assert_int_equal(xsa_pool_malloc(p, SIZE_MAX, S0, &x, err, sizeof err), XSA_POOL_OOM);
    CHECK(p);
    release(p, a);
    teardown(p);
}

static void test_oom_retry_releases_cache(void **state) {
    (void)state;
    xsa_pool *p = make_pool(64 * MiB, false, NULL);
    void *a = alloc(p, 30 * MiB, S0);
    release(p, a); /* 30 MiB cached */
    void *b = alloc(p, 40 * MiB, S0); /* needs the cache released */
    xsa_device_stats s = stats(p);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_sync_all_streams, 1);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 40 * MiB);
    release(p, b);
    teardown(p);
}

static void test_memory_fraction(void **state) {
    (void)state;
    xsa_pool *p = make_pool(256 * MiB, false, NULL);
    xsa_pool_set_memory_fraction(p, 0.25); /* 64 MiB */
    void *a = alloc(p, 60 * MiB, S0);
    void *x = NULL;
    assert_int_equal(xsa_pool_malloc(p, 6 * MiB, S0, &x, err, sizeof err), XSA_POOL_OOM);
    assert_non_null(strstr(err, "is free. 64.00 MiB allowed; Of the allocated memory 60.00 MiB"));
    CHECK(p);
    release(p, a);
    teardown(p);
}

/* ---- record_stream ---- */

static void test_record_stream_defers_reuse(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    void *a = alloc(p, 4096, S0);
    assert_int_equal(xsa_pool_record_stream(p, a, S1, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_pool_record_stream(p, a, S0, err, sizeof err), XSA_POOL_OK); /* own stream: ignored */
    release(p, a);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.allocation[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.active[XSA_STAT_ALL].current, 1); /* pending free */
    void *b = alloc(p, 4096, S0);
    assert_ptr_not_equal(a, b); /* the event on S1 has not completed */
    release(p, b);
    xsa_sim_complete_stream(S1);
    void *c = alloc(p, 4096, S0); /* the poll in malloc frees it */
    assert_ptr_equal(a, c);
    assert_int_equal(stats(p).active[XSA_STAT_ALL].current, 1);
    release(p, c);
    teardown(p);
}

static void test_empty_cache_waits_for_events(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    void *a = alloc(p, 8 * MiB, S0);
    assert_int_equal(xsa_pool_record_stream(p, a, S1, err, sizeof err), XSA_POOL_OK);
    release(p, a);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.active[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 0);
    teardown(p);
}

static void test_free_event_failure_keeps_block(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    void *a = alloc(p, 4096, S0);
    assert_int_equal(xsa_pool_record_stream(p, a, S1, err, sizeof err), XSA_POOL_OK);
    xsa_sim_fail_call(XSA_DRV_event_record, 1, XSA_CU_ERROR_UNKNOWN);
    assert_int_equal(xsa_pool_free(p, a, err, sizeof err), XSA_POOL_DRIVER_ERROR);
    assert_non_null(strstr(err, "cuEventRecord"));
    CHECK(p);
    assert_true(xsa_pool_owns(p, a));
    release(p, a); /* the retry works */
    teardown(p);
}

/* ---- expandable segments ---- */

static void test_expandable_grows_by_pages(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    void *a = alloc(p, 3 * MiB, S0);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 4 * MiB); /* two 2 MiB pages */
    void *b = alloc(p, 1 * MiB + 4096, S0);                           /* fits in the tail's 1 MiB? no: grows */
    assert_ptr_equal((char *)b, (char *)a + 3 * MiB);                 /* contiguous */
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 6 * MiB);
    void *c = alloc(p, 1000, S0); /* small pool: its own segment */
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_SMALL_POOL].current, 2 * MiB);
    assert_int_equal(stats(p).segment[XSA_STAT_ALL].current, 0); /* expandable: never counted (stats_test) */
    release(p, a);
    release(p, b);
    release(p, c);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 0);
    assert_int_equal(stats(p).segment[XSA_STAT_ALL].current, 0);
    teardown(p);
}

static void test_expandable_unmaps_only_whole_free_pages(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    void *a = alloc(p, 3 * MiB, S0);      /* pages 0-1 */
    void *b = alloc(p, 4 * MiB, S0);      /* [3, 7) MiB: pages 1-3 */
    void *c = alloc(p, 2 * MiB, S0);      /* [7, 9) MiB: pages 3-4 */
    memset(a, 0xA1, 3 * MiB);
    memset(c, 0xC3, 2 * MiB);
    release(p, b);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    /* b's whole pages are page 2 only ([4, 6) MiB); pages 1 and 3 are shared. */
    xsa_device_stats s = stats(p);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 10 * MiB - 2 * MiB);
    assert_int_equal(s.num_pages_unmapped, 1);
    for (size_t i = 0; i < 3 * MiB; i++)
        if (((unsigned char *)a)[i] != 0xA1) fail_msg("a[%zu] changed", i);
    for (size_t i = 0; i < 2 * MiB; i++)
        if (((unsigned char *)c)[i] != 0xC3) fail_msg("c[%zu] changed", i);
    /* The unmapped page faults. */
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not cmocka's handler */
        ((volatile char *)b)[1 * MiB] = 1;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));
    /* A 4 MiB request maps page 2 again and reuses b's place. */
    void *d = alloc(p, 4 * MiB, S0);
    assert_ptr_equal(d, b);
    memset(d, 0xDD, 4 * MiB);
    release(p, a);
    release(p, c);
    release(p, d);
    teardown(p);
}

static void test_expandable_map_failure_changes_nothing(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    void *a = alloc(p, 2 * MiB, S0);
    xsa_device_stats before = stats(p);
    xsa_sim_usage u0, u1;
    xsa_sim_get_usage(&u0);
    /* Fail the third page's map of a five-page growth. */
    xsa_sim_fail_call(XSA_DRV_mem_map, 3, XSA_CU_ERROR_UNKNOWN);
    void *x = NULL;
    assert_int_equal(xsa_pool_malloc(p, 10 * MiB, S0, &x, err, sizeof err), XSA_POOL_DRIVER_ERROR);
    assert_non_null(strstr(err, "mapping pages"));
    CHECK(p);
    xsa_sim_get_usage(&u1);
    assert_int_equal(u1.handles, u0.handles);
    assert_int_equal(u1.mapped_bytes, u0.mapped_bytes);
    xsa_device_stats after = stats(p);
    assert_int_equal(after.reserved_bytes[XSA_STAT_ALL].current, before.reserved_bytes[XSA_STAT_ALL].current);
    /* Out of physical memory at cuMemCreate is an OOM after the retries. */
    xsa_sim_fail_call(XSA_DRV_mem_create, 2, XSA_CU_ERROR_OUT_OF_MEMORY);
    x = alloc(p, 10 * MiB, S0); /* the retry after releasing the cache succeeds */
    assert_int_equal(stats(p).num_alloc_retries, 1);
    release(p, x);
    release(p, a);
    teardown(p);
}

static void test_expandable_best_fit_prefers_non_tail(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    void *a = alloc(p, 6 * MiB, S0);
    void *b = alloc(p, 2 * MiB, S0);
    void *c = alloc(p, 4 * MiB, S0);
    release(p, a); /* a 6 MiB hole at the start */
    release(p, c); /* the free tail: 4 MiB, could grow */
    void *d = alloc(p, 4 * MiB, S0);
    assert_ptr_equal(d, a); /* the hole, not the growable tail */
    release(p, b);
    release(p, d);
    teardown(p);
}

/* ---- driver refusals while giving memory back ---- */

static void test_refused_release_is_retried(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    release(p, alloc(p, 4 * MiB, S0));
    xsa_sim_fail_call(XSA_DRV_mem_release, 1, XSA_CU_ERROR_UNKNOWN);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(usage().handles, 0); /* released again after the unmap */
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, 0);
    teardown(p);
}

static void test_refused_address_free_keeps_segment(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    release(p, alloc(p, 4 * MiB, S0));
    xsa_sim_fail_call(XSA_DRV_mem_address_free, 1, XSA_CU_ERROR_UNKNOWN);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(usage().reservations, 1); /* kept, not forgotten */
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(usage().reservations, 0);
    release(p, alloc(p, 4 * MiB, S0));
    teardown(p);
}

static void test_refused_mem_free_keeps_segment_cached(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    release(p, alloc(p, 4096, S0));
    xsa_device_stats before = stats(p);
    xsa_sim_fail_call(XSA_DRV_mem_free, 1, XSA_CU_ERROR_UNKNOWN);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_DRIVER_ERROR);
    assert_non_null(strstr(err, "cuMemFree"));
    CHECK(p);
    assert_int_equal(stats(p).reserved_bytes[XSA_STAT_ALL].current, before.reserved_bytes[XSA_STAT_ALL].current);
    assert_int_equal(usage().mem_allocs, 1);
    void *a = alloc(p, 4096, S0); /* the cached segment is still usable */
    release(p, a);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(usage().mem_allocs, 0);
    teardown(p);
}

static void test_failed_growth_leaves_no_reservation(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    xsa_sim_fail_call(XSA_DRV_mem_map, 1, XSA_CU_ERROR_UNKNOWN);
    void *x = NULL;
    assert_int_equal(xsa_pool_malloc(p, 4 * MiB, S1, &x, err, sizeof err), XSA_POOL_DRIVER_ERROR);
    CHECK(p);
    assert_int_equal(usage().reservations, 0);
    teardown(p);
}

static void gc_half(xsa_pool_options *o) { o->garbage_collection_threshold = 0.5; }

static void test_garbage_collection_frees_old_blocks(void **state) {
    (void)state;
    xsa_pool *p = make_pool(100 * MiB, false, gc_half);
    void *a = alloc(p, 30 * MiB, S0);
    void *b = alloc(p, 24 * MiB, S0);
    release(p, a);
    release(p, b); /* 54 MiB cached, above the 50 MiB threshold */
    void *c = alloc(p, 40 * MiB, S0); /* a miss: GC frees the cached segments first */
    xsa_device_stats s = stats(p);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 40 * MiB);
    release(p, c);
    teardown(p);
}

static void test_bad_pointers(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    void *a = alloc(p, 4096, S0);
    assert_int_equal(xsa_pool_free(p, (char *)a + 512, err, sizeof err), XSA_POOL_BAD_POINTER);
    assert_non_null(strstr(err, "inside the allocation"));
    assert_int_equal(xsa_pool_free(p, (void *)0x1234, err, sizeof err), XSA_POOL_BAD_POINTER);
    assert_non_null(strstr(err, "unknown pointer"));
    release(p, a);
    assert_int_equal(xsa_pool_free(p, a, err, sizeof err), XSA_POOL_BAD_POINTER);
    assert_non_null(strstr(err, "already freed"));
    assert_int_equal(xsa_pool_record_stream(p, a, S1, err, sizeof err), XSA_POOL_BAD_POINTER);
    CHECK(p);
    teardown(p);
}

static void test_stats_reset(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    void *a = alloc(p, 8 * MiB, S0);
    release(p, a);
    xsa_pool_reset_peak_stats(p);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].peak, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].peak, 8 * MiB);
    xsa_pool_reset_accumulated_stats(p);
    s = stats(p);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].allocated, 0);
    assert_int_equal(s.num_device_alloc, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 8 * MiB);
    teardown(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_size),
        cmocka_unit_test(test_classic_segment_sizes),
        cmocka_unit_test(test_split_merge_and_inactive_split),
        cmocka_unit_test(test_large_split_rule),
        cmocka_unit_test(test_streams_never_share_blocks),
        cmocka_unit_test(test_max_split_size),
        cmocka_unit_test(test_oom_report_changes_nothing),
        cmocka_unit_test(test_oom_retry_releases_cache),
        cmocka_unit_test(test_memory_fraction),
        cmocka_unit_test(test_record_stream_defers_reuse),
        cmocka_unit_test(test_empty_cache_waits_for_events),
        cmocka_unit_test(test_free_event_failure_keeps_block),
        cmocka_unit_test(test_expandable_grows_by_pages),
        cmocka_unit_test(test_expandable_unmaps_only_whole_free_pages),
        cmocka_unit_test(test_expandable_map_failure_changes_nothing),
        cmocka_unit_test(test_expandable_best_fit_prefers_non_tail),
        cmocka_unit_test(test_refused_release_is_retried),
        cmocka_unit_test(test_refused_address_free_keeps_segment),
        cmocka_unit_test(test_refused_mem_free_keeps_segment_cached),
        cmocka_unit_test(test_failed_growth_leaves_no_reservation),
        cmocka_unit_test(test_garbage_collection_frees_old_blocks),
        cmocka_unit_test(test_bad_pointers),
        cmocka_unit_test(test_stats_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
