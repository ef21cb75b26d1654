/*
 * sim_timeline_test: the simulated driver's GPU timeline (xsalloc/sim.h): the
 * lag, the clock that synchronization moves, kernels, and the violations a
 * real GPU punishes (unmap under a running kernel, races between streams,
 * launches on unmapped memory).
 *
 * Design: every case starts from a fresh configuration, calls xsa_sim_check
 * after each step and ends with the driver empty and no kernel pending.
 * Each rule is tested from both sides: the case that must count a
 * violation and the nearest case that must not, so that a checker that
 * counts everything, or nothing, fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "tests/sim/sim_gpu_fixture.h"
#include "xsalloc/sim.h"

#define PENDING(call)                                                          \
    do {                                                                       \
        assert_int_equal(XSA_CU_ERROR_NOT_READY, (call));                      \
        CHECK();                                                               \
    } while (0)

static void tick(uint64_t n) {
    xsa_sim_tick(n);
    CHECK();
}

static size_t pending_kernels(void) { return usage().pending_kernels; }

static xsa_sim_violations violations(void) {
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    return v;
}

/* ---- the lag ---------------------------------------------------------------- */

/* An event after a kernel completes `lag` ticks after the launch; an event
 * on an idle stream completes at once (a record adds no lag). */
static void test_event_after_kernel_waits_for_lag(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_event e = new_event(), idle = new_event();
    xsa_sim_set_gpu_lag(LAG);
    launch(S1, m.va, MiB);
    assert_int_equal(1, pending_kernels());
    OK(XSA_DRV(D, event_record, e, S1));
    PENDING(XSA_DRV(D, event_query, e));
    PENDING(XSA_DRV(D, stream_query, S1));
    OK(XSA_DRV(D, event_record, idle, S2));
    OK(XSA_DRV(D, event_query, idle));
    tick(LAG - 1);
    PENDING(XSA_DRV(D, event_query, e));
    assert_int_equal(1, pending_kernels());
    tick(1);
    assert_int_equal(LAG, xsa_sim_now());
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, stream_query, S1));
    assert_int_equal(0, pending_kernels());
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, e));
    OK(XSA_DRV(D, event_destroy, idle));
    drop_mapping(&m);
}

/* A stream's work completes in order: a kernel queued with a shorter lag
 * behind a longer one completes with it, not before. */
static void test_stream_work_completes_in_order(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_event e = new_event();
    xsa_sim_set_gpu_lag(LAG);
    launch(S1, m.va, MiB);
    xsa_sim_set_gpu_lag(10);
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, S1));
    tick(10);
    PENDING(XSA_DRV(D, event_query, e));
    assert_int_equal(2, pending_kernels());
    tick(LAG - 10);
    OK(XSA_DRV(D, event_query, e));
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, e));
    drop_mapping(&m);
}

/* Lag 0, the eager switch and the eager configuration behave alike:
 * everything completes as it is queued. */
static void test_lag_zero_is_eager(void **state) {
    (void)state;
    for (int how = 0; how < 3; how++) {
        if (how == 2) {
            xsa_sim_config c;
            xsa_sim_default_config(&c);
            c.capacity = 64 * MiB;
            c.eager_events = 1;
            assert_int_equal(XSA_CU_SUCCESS, xsa_sim_configure(&c));
        }
        if (how == 0) xsa_sim_set_gpu_lag(0);
        if (how == 1) xsa_sim_set_eager_events(1);
        mapping m = new_mapping(1);
        xsa_event e = new_event();
        launch(S1, m.va, MiB);
        assert_int_equal(0, pending_kernels());
        OK(XSA_DRV(D, event_record, e, S1));
        OK(XSA_DRV(D, event_query, e));
        OK(XSA_DRV(D, stream_query, S1));
        launch(S2, m.va, MiB); /* S1's kernel is over: no race */
        OK(XSA_DRV(D, event_destroy, e));
        drop_mapping(&m); /* nothing in flight */
        assert_int_equal(0, xsa_sim_now());
        NO_VIOLATION();
        xsa_sim_set_eager_events(0);
    }
}

/* Manual mode (the default) is as before: nothing completes with time,
 * only by hand; switching to a lag completes manual work with no time. */
static void test_manual_mode_unchanged(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_event e = new_event();
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, S1));
    tick(1000000);
    PENDING(XSA_DRV(D, event_query, e));
    assert_int_equal(1, pending_kernels());
    xsa_sim_complete_stream(S1);
    CHECK();
    OK(XSA_DRV(D, event_query, e));
    assert_int_equal(0, pending_kernels());
    /* Synchronize completes manual work without moving the clock. */
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, S1));
    OK(XSA_DRV(D, event_synchronize, e));
    OK(XSA_DRV(D, event_query, e));
    assert_int_equal(1000000, xsa_sim_now());
    /* Manual work gets a time when a lag is set. */
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, S1));
    xsa_sim_set_eager_events(1);
    CHECK();
    OK(XSA_DRV(D, event_query, e));
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, e));
    drop_mapping(&m);
}

/* Synchronizing moves the CPU's clock to the completion of what it waits
 * for, and no further; a stream that waits on an event waits for its record. */
static void test_synchronize_advances_clock(void **state) {
    (void)state;
    mapping m = new_mapping(2);
    xsa_event e = new_event(), done = new_event(), after_wait = new_event();
    xsa_sim_set_gpu_lag(LAG);
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, S1));
    tick(30);
    OK(XSA_DRV(D, event_synchronize, e));
    assert_int_equal(LAG, xsa_sim_now());
    OK(XSA_DRV(D, event_record, done, S1));
    OK(XSA_DRV(D, event_synchronize, done)); /* already complete: the clock stays */
    assert_int_equal(LAG, xsa_sim_now());
    launch(S2, m.va + GRAN, MiB);
    OK(XSA_DRV(D, stream_synchronize, S2));
    assert_int_equal(2 * LAG, xsa_sim_now());
    OK(XSA_DRV(D, stream_synchronize, S3)); /* never used */
    assert_int_equal(2 * LAG, xsa_sim_now());
    /* S1 waits on S2's record; S1's own record then completes with it. */
    launch(S2, m.va + GRAN, MiB);
    OK(XSA_DRV(D, event_record, e, S2));
    OK(XSA_DRV(D, stream_wait_event, S1, e));
    OK(XSA_DRV(D, event_record, after_wait, S1));
    tick(LAG - 1);
    PENDING(XSA_DRV(D, event_query, after_wait));
    PENDING(XSA_DRV(D, stream_query, S1));
    tick(1);
    OK(XSA_DRV(D, event_query, after_wait));
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, e));
    OK(XSA_DRV(D, event_destroy, done));
    OK(XSA_DRV(D, event_destroy, after_wait));
    drop_mapping(&m);
}

/* ---- unmapping and freeing memory in use ------------------------------------ */

static void test_unmap_with_queued_kernel(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(2);
    tick(7);
    launch(S1, m.va + GRAN + 4096, 8192);
    OK(XSA_DRV(D, mem_unmap, m.va, m.size)); /* the unmap itself succeeds */
    char addr[32], stream[32];
    snprintf(addr, sizeof addr, "%#llx", (unsigned long long)(m.va + GRAN + 4096));
    snprintf(stream, sizeof stream, "stream %p", S1);
    expect_violations(1, 0, 0, 0, (const char *const[]){"cuMemUnmap", "illegal address an H100 gives", addr, stream,
                                                     "queued at tick 7", NULL});
    /* The same after the kernel completed: fine. */
    map_at(m.va, m.size, m.h);
    launch(S1, m.va, m.size);
    tick(LAG);
    OK(XSA_DRV(D, mem_unmap, m.va, m.size));
    NO_VIOLATION();
    /* A release with a kernel in flight is fine; its unmap is not. */
    map_at(m.va, m.size, m.h);
    launch(NULL, m.va, MiB);
    OK(XSA_DRV(D, mem_release, m.h));
    OK(XSA_DRV(D, mem_unmap, m.va, m.size));
    expect_violations(1, 0, 0, 0, (const char *const[]){"the default stream", NULL});
    OK(XSA_DRV(D, mem_address_free, m.va, m.size));
    xsa_sim_complete_all();
}

/* One handle mapped at two addresses: unmapping the one the kernel did not
 * go through is fine; the other is not. */
static void test_unmap_other_mapping_of_handle(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_devptr alias = reserve(m.size);
    map_at(alias, m.size, m.h);
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, mem_unmap, alias, m.size));
    NO_VIOLATION();
    map_at(alias, m.size, m.h);
    OK(XSA_DRV(D, mem_unmap, m.va, m.size));
    expect_violations(1, 0, 0, 0, (const char *const[]){"cuMemUnmap", NULL});
    OK(XSA_DRV(D, mem_unmap, alias, m.size));
    NO_VIOLATION();
    OK(XSA_DRV(D, mem_address_free, alias, m.size));
    OK(XSA_DRV(D, mem_release, m.h));
    OK(XSA_DRV(D, mem_address_free, m.va, m.size));
    xsa_sim_complete_all();
}

/* Classic cuMemFree with a queued kernel, and after it completed. */
static void test_mem_free_with_queued_kernel(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    xsa_devptr p = 0;
    OK(XSA_DRV(D, mem_alloc, &p, 3 * MiB, 0));
    launch(S2, p + MiB, MiB);
    OK(XSA_DRV(D, mem_free, p));
    expect_violations(1, 0, 0, 0, (const char *const[]){"cuMemFree", "illegal address", NULL});
    OK(XSA_DRV(D, mem_alloc, &p, 3 * MiB, 0));
    launch(S2, p, 3 * MiB);
    OK(XSA_DRV(D, stream_synchronize, S2));
    OK(XSA_DRV(D, mem_free, p));
    NO_VIOLATION();
    xsa_sim_complete_all();
}

/* ---- races ----------------------------------------------------------------------- */

static void test_two_streams_race(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(2);
    launch(S1, m.va, MiB);
    launch(S1, m.va, MiB);               /* same stream: ordered */
    launch(S2, m.va + MiB, GRAN);        /* other bytes */
    NO_VIOLATION();
    launch(S2, m.va + MiB - 1, 2);       /* one byte in common */
    char stream[32];
    snprintf(stream, sizeof stream, "on stream %p, which", S1);
    expect_violations(0, 1, 0, 0, (const char *const[]){"race", stream, NULL});
    tick(LAG);                           /* both complete: nothing to race with */
    launch(S3, m.va, m.size);
    NO_VIOLATION();
    xsa_sim_complete_all();
    drop_mapping(&m);
}

/* The same handle through two mappings races too: uses are physical. */
static void test_race_through_two_mappings(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_devptr alias = reserve(m.size);
    map_at(alias, m.size, m.h);
    launch(S1, m.va, MiB);
    launch(S2, alias + MiB, MiB);
    NO_VIOLATION();
    launch(S2, alias, 4096);
    expect_violations(0, 1, 0, 0, NULL);
    tick(LAG);
    OK(XSA_DRV(D, mem_unmap, alias, m.size));
    OK(XSA_DRV(D, mem_address_free, alias, m.size));
    drop_mapping(&m);
}

/* cuStreamWaitEvent on an event recorded after the kernel orders; one
 * recorded before it does not (and S2 races with S3's kernel too: one
 * count a launch). */
static void test_wait_event_orders(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_event before = new_event(), after = new_event();
    OK(XSA_DRV(D, event_record, before, S1));
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, after, S1));
    OK(XSA_DRV(D, stream_wait_event, S3, after));
    launch(S3, m.va, MiB);
    NO_VIOLATION();
    OK(XSA_DRV(D, stream_wait_event, S2, before));
    launch(S2, m.va, MiB);
    expect_violations(0, 1, 0, 0, NULL);
    OK(XSA_DRV(D, event_destroy, before));
    OK(XSA_DRV(D, event_destroy, after));
    xsa_sim_complete_all();
    drop_mapping(&m);
}

/* The default stream waits on S3, which waited on S1 after the kernel:
 * ordered. S2 waiting on S3's event recorded before S3's wait is not. */
static void test_wait_is_transitive(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_event e1 = new_event(), early3 = new_event(), e3 = new_event();
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, event_record, e1, S1));
    OK(XSA_DRV(D, event_record, early3, S3));
    OK(XSA_DRV(D, stream_wait_event, S3, e1));
    OK(XSA_DRV(D, event_record, e3, S3));
    OK(XSA_DRV(D, event_destroy, e1)); /* the wait took its clock already */
    OK(XSA_DRV(D, stream_wait_event, NULL, e3));
    launch(NULL, m.va, MiB);
    NO_VIOLATION();
    OK(XSA_DRV(D, stream_wait_event, S2, early3));
    launch(S2, m.va, MiB);
    expect_violations(0, 1, 0, 0, NULL);
    OK(XSA_DRV(D, event_destroy, early3));
    OK(XSA_DRV(D, event_destroy, e3));
    xsa_sim_complete_all();
    drop_mapping(&m);
}

/* Completion the host saw orders too: a successful query after the clock
 * passed, an event or stream synchronize, a forced completion. */
static void test_completion_seen_by_host_orders(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_event e = new_event();
    for (int how = 0; how < 4; how++) {
        xsa_sim_set_gpu_lag(how == 3 ? -1 : LAG);
        launch(S1, m.va, MiB);
        OK(XSA_DRV(D, event_record, e, S1));
        if (how == 0) {
            tick(LAG);
            OK(XSA_DRV(D, event_query, e));
        }
        if (how == 1) OK(XSA_DRV(D, event_synchronize, e));
        if (how == 2) OK(XSA_DRV(D, stream_synchronize, S1));
        if (how == 3) xsa_sim_complete_stream(S1);
        launch(S2, m.va, MiB);
        NO_VIOLATION();
        OK(XSA_DRV(D, stream_synchronize, S2));
    }
    /* Manual mode: kernels stay pending, so they race. */
    launch(S1, m.va, MiB);
    launch(S2, m.va, MiB);
    expect_violations(0, 1, 0, 0, NULL);
    xsa_sim_complete_all();
    OK(XSA_DRV(D, event_destroy, e));
    drop_mapping(&m);
}

/* ---- launches ------------------------------------------------------------------- */

/* Refused, counted, and nothing queued. */
static void expect_bad_launch(xsa_stream s, xsa_devptr p, size_t size, const char *addr_word) {
    size_t pending = pending_kernels();
    assert_int_equal(XSA_CU_ERROR_ILLEGAL_ADDRESS, xsa_sim_launch(s, p, size));
    CHECK();
    expect_violations(0, 0, 1, 0, (const char *const[]){"CUDA_ERROR_ILLEGAL_ADDRESS", addr_word, NULL});
    assert_int_equal(pending, pending_kernels());
}

static void test_bad_launches(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    xsa_devptr va = reserve(3 * GRAN);
    xsa_mem_handle h = 0;
    OK(XSA_DRV(D, mem_create, &h, GRAN, 0, 0));
    char addr[32];
    snprintf(addr, sizeof addr, "%#llx", (unsigned long long)va);
    expect_bad_launch(S1, va, MiB, addr);                  /* reserved, unmapped */
    OK(XSA_DRV(D, mem_map, va, GRAN, 0, h));
    expect_bad_launch(S1, va, MiB, addr);                  /* mapped, no access */
    int dev = 0;
    OK(XSA_DRV(D, mem_set_access, va, GRAN, &dev, 1));
    launch(S1, va, GRAN);
    snprintf(addr, sizeof addr, "%#llx", (unsigned long long)(va + GRAN));
    expect_bad_launch(S1, va + MiB, GRAN, addr);           /* runs past the mapping */
    expect_bad_launch(S1, va + 2 * GRAN, 4 * GRAN, "");    /* past the reservation */
    static char host[4096];
    expect_bad_launch(S1, (xsa_devptr)(uintptr_t)host, 16, ""); /* no device memory */
    assert_int_equal(XSA_CU_ERROR_INVALID_VALUE, xsa_sim_launch(S1, va, 0));
    NO_VIOLATION();
    xsa_sim_complete_all();
    OK(XSA_DRV(D, mem_unmap, va, GRAN));
    OK(XSA_DRV(D, mem_release, h));
    OK(XSA_DRV(D, mem_address_free, va, 3 * GRAN));
}

/* A kernel over several mappings records each: unmapping any one of them
 * under it is a violation. */
static void test_kernel_over_several_mappings(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    xsa_devptr va = reserve(3 * GRAN);
    xsa_mem_handle h[3];
    for (int i = 0; i < 3; i++) {
        OK(XSA_DRV(D, mem_create, &h[i], GRAN, 0, 0));
        map_at(va + (size_t)i * GRAN, GRAN, h[i]);
    }
    launch(S1, va + GRAN / 2, 2 * GRAN);
    OK(XSA_DRV(D, mem_unmap, va + 2 * GRAN, GRAN));
    expect_violations(1, 0, 0, 0, NULL);
    OK(XSA_DRV(D, mem_unmap, va, GRAN));
    expect_violations(1, 0, 0, 0, NULL);
    xsa_sim_complete_all();
    OK(XSA_DRV(D, mem_unmap, va + GRAN, GRAN));
    NO_VIOLATION();
    for (int i = 0; i < 3; i++) OK(XSA_DRV(D, mem_release, h[i]));
    OK(XSA_DRV(D, mem_address_free, va, 3 * GRAN));
}

/* Launch and tick are test controls: not driver calls, never faulted.
 * A configuration resets the clock, the lag and the violations. */
static void test_controls_and_configure(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_sim_fail_call(XSA_DRV_stream_query, 1, XSA_CU_ERROR_UNKNOWN);
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT];
    xsa_driver_read_calls(D, before, NULL);
    xsa_sim_set_gpu_lag(LAG);
    launch(S1, m.va, MiB);
    tick(5);
    launch(S2, m.va, MiB); /* a race, counted */
    xsa_driver_read_calls(D, after, NULL);
    assert_memory_equal(before, after, sizeof before);
    assert_int_equal(XSA_CU_ERROR_UNKNOWN, XSA_DRV(D, stream_query, S1)); /* the fault is still armed */
    xsa_sim_clear_faults();
    assert_int_equal(1, violations().races);
    xsa_sim_complete_all();
    drop_mapping(&m);
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    assert_int_equal(XSA_CU_SUCCESS, xsa_sim_configure(&c));
    assert_int_equal(0, xsa_sim_now());
    NO_VIOLATION();
    m = new_mapping(1);
    launch(S1, m.va, MiB); /* manual again */
    tick(1000);
    assert_int_equal(1, pending_kernels());
    xsa_sim_complete_all();
    drop_mapping(&m);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_event_after_kernel_waits_for_lag),
        T(test_stream_work_completes_in_order),
        T(test_lag_zero_is_eager),
        T(test_manual_mode_unchanged),
        T(test_synchronize_advances_clock),
        T(test_unmap_with_queued_kernel),
        T(test_unmap_other_mapping_of_handle),
        T(test_mem_free_with_queued_kernel),
        T(test_two_streams_race),
        T(test_race_through_two_mappings),
        T(test_wait_event_orders),
        T(test_wait_is_transitive),
        T(test_completion_seen_by_host_orders),
        T(test_bad_launches),
        T(test_kernel_over_several_mappings),
        T(test_controls_and_configure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
