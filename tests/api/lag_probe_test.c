/*
 * lag_probe_test: XSALLOC_LAG_PROBE on the simulated driver, events
 * completed by hand. Probes complete only when the test completes their
 * stream, with the exact distances in calls; each stream is its own lane;
 * a full set of slots skips probes and reuses its events; the JSON file is
 * written at xsa_shutdown; a path that cannot be written fails init; with
 * the variable unset the entry points make no event call; threads calling
 * at once lose no count. The torch adapter's entry points (xsa_ctx_malloc,
 * xsa_ctx_free: no stream on a free) are counted too, and a probe falls
 * due on a free waits for the next call with a stream.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/devices.h"
#include "api/lag_probe.h"
#include "tests/api/api_fixture.h"
#include "xsalloc/pytorch.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define GiB ((size_t)1 << 30)
#define S1 ((void *)0x1001)
#define S2 ((void *)0x1002)

static char path[4096];

static int setup(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, 1 * GiB); /* events complete only when the test says so */
    unsetenv("XSALLOC_LAG_PROBE");
    const char *dir = getenv("TEST_TMPDIR");
    snprintf(path, sizeof path, "%s/lag_probe.json", dir ? dir : "/tmp");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unsetenv("XSALLOC_LAG_PROBE");
    xsa_fixture_shutdown_and_expect_empty();
    return 0;
}

/* n malloc + free pairs on `stream` through the PyTorch entry points: 2n calls. */
static void pairs(int n, void *stream) {
    for (int i = 0; i < n; i++) {
        void *p = xsa_torch_malloc(4096, 0, stream);
        assert_non_null(p);
        xsa_torch_free(p, 4096, 0, stream);
    }
}

static xsa_lag_probe_stats stats(void) {
    xsa_lag_probe_stats s;
    xsa_lag_probe_read(&s);
    return s;
}

static uint64_t event_calls(xsa_driver_entry e) {
    uint64_t c[XSA_DRV_COUNT];
    xsa_driver_read_calls(xsa_active_driver(), c, NULL);
    return c[e];
}

static char *read_file(const char *p) {
    static char text[4096];
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static void test_unset_makes_no_event_calls(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    pairs(2000, S1); /* one stream: the pool itself needs no event */
    assert_false(atomic_load(&xsa_lag_probe_on));
    assert_int_equal(event_calls(XSA_DRV_event_create), 0);
    assert_int_equal(event_calls(XSA_DRV_event_record), 0);
    assert_int_equal(event_calls(XSA_DRV_event_query), 0);
}

static void test_probes_complete_with_their_stream(void **state) {
    (void)state;
    setenv("XSALLOC_LAG_PROBE", path, 1);
    OK(xsa_init(NULL));
    pairs(16, S1); /* calls 1-32: probes at calls 16 and 32 */
    pairs(4, S1);  /* calls 33-40 */
    assert_int_equal(stats().probes, 0);
    assert_int_equal(stats().pending, 2);
    xsa_sim_complete_stream(S1);
    pairs(1, S1); /* call 41 sees both: 41 - 16 and 41 - 32; call 42 */
    assert_int_equal(stats().probes, 2);
    assert_int_equal(xsa_lag_probe_count(25), 1);
    assert_int_equal(xsa_lag_probe_count(9), 1);

    /* S2's probe stays pending while S1's completes: lanes are separate. */
    pairs(3, S2); /* calls 43-48: a probe at 48 on S2 */
    pairs(8, S1); /* calls 49-64: a probe at 64 on S1 */
    xsa_sim_complete_stream(S1);
    pairs(1, S1); /* calls 65-66 */
    assert_int_equal(xsa_lag_probe_count(1), 1);
    assert_int_equal(stats().pending, 1);
    xsa_sim_complete_stream(S2);
    pairs(1, S1); /* calls 67-68 */
    assert_int_equal(xsa_lag_probe_count(19), 1);
    xsa_lag_probe_stats s = stats();
    assert_int_equal(s.calls, 68);
    assert_int_equal(s.probes, 4);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.sum, 25 + 9 + 1 + 19);
    assert_int_equal(s.max, 25);

    OK(xsa_shutdown());
    assert_false(atomic_load(&xsa_lag_probe_on));
    /* Distances 1, 9, 19, 25: nearest-rank percentiles, log2 buckets [1,2), [8,16), [16,32). */
    assert_string_equal(read_file(path),
                        "{\"probes\": 4, \"p10\": 1, \"p50\": 9, \"p90\": 25, \"p99\": 25, \"max\": 25, "
                        "\"mean\": 13.500, \"hist\": {\"1\": 1, \"8\": 1, \"16\": 2}, \"calls\": 68, "
                        "\"every\": 16, \"pending\": 0, \"skipped\": 0, \"error\": null}\n");
}

static void test_full_slots_skip_and_reuse_their_events(void **state) {
    (void)state;
    setenv("XSALLOC_LAG_PROBE", path, 1);
    OK(xsa_init(NULL));
    int n = XSA_LAG_PROBE_SLOTS + 1;
    pairs(n * XSA_LAG_PROBE_EVERY / 2, S1); /* n probe calls, one slot short */
    assert_int_equal(stats().pending, XSA_LAG_PROBE_SLOTS);
    assert_int_equal(stats().skipped, 1);
    assert_int_equal(event_calls(XSA_DRV_event_create), XSA_LAG_PROBE_SLOTS);
    xsa_sim_complete_stream(S1);
    pairs(1, S1);
    assert_int_equal(stats().probes, XSA_LAG_PROBE_SLOTS);
    assert_int_equal(stats().max, (uint64_t)n * XSA_LAG_PROBE_EVERY + 1 - XSA_LAG_PROBE_EVERY);
    pairs(XSA_LAG_PROBE_EVERY, S1); /* two more probes, on reused slots */
    assert_int_equal(stats().pending, 2);
    assert_int_equal(event_calls(XSA_DRV_event_create), XSA_LAG_PROBE_SLOTS);

    /* Streams beyond the lanes are counted, not probed. */
    xsa_lag_probe_stats before = stats();
    for (int i = 0; i < XSA_LAG_PROBE_LANES; i++) pairs(XSA_LAG_PROBE_EVERY / 2, (void *)(uintptr_t)(0x2000 + i));
    xsa_lag_probe_stats after = stats();
    assert_int_equal(after.calls - before.calls, XSA_LAG_PROBE_LANES * XSA_LAG_PROBE_EVERY);
    assert_int_equal(after.skipped - before.skipped, 1); /* S1 holds a lane: the 8th new stream has none */
}

static void test_eager_events_complete_at_the_next_call(void **state) {
    (void)state;
    setenv("XSALLOC_LAG_PROBE", path, 1);
    xsa_sim_set_eager_events(1); /* the next test's fixture configures the driver afresh */
    OK(xsa_init(NULL));
    pairs(8 * XSA_LAG_PROBE_EVERY, NULL);
    assert_int_equal(stats().probes, 15); /* the 16th, at the last call, is pending */
    assert_int_equal(xsa_lag_probe_count(1), 15);
    OK(xsa_shutdown()); /* the last poll counts it, at distance 0 */
    assert_non_null(strstr(read_file(path), "\"probes\": 16, \"p10\": 1, "));
    assert_non_null(strstr(read_file(path), "\"hist\": {\"0\": 1, \"1\": 15}"));
}

static void *thread_pairs(void *stream) {
    pairs(500, stream);
    return NULL;
}

static void test_threads_lose_no_count(void **state) {
    (void)state;
    setenv("XSALLOC_LAG_PROBE", path, 1);
    xsa_sim_set_eager_events(1);
    OK(xsa_init(NULL));
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, thread_pairs, (void *)(0x1001 + i)), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    xsa_lag_probe_stats s = stats();
    assert_int_equal(s.calls, 4 * 1000);
    assert_int_equal(s.probes + s.pending + s.skipped, 4 * 1000 / XSA_LAG_PROBE_EVERY);
    assert_int_equal(s.skipped, 0);
}

static void test_no_probe_writes_nulls(void **state) {
    (void)state;
    setenv("XSALLOC_LAG_PROBE", path, 1);
    OK(xsa_init(NULL));
    pairs(3, NULL);
    OK(xsa_shutdown());
    assert_string_equal(read_file(path),
                        "{\"probes\": 0, \"p10\": null, \"p50\": null, \"p90\": null, \"p99\": null, "
                        "\"max\": null, \"mean\": null, \"hist\": {}, \"calls\": 6, \"every\": 16, "
                        "\"pending\": 0, \"skipped\": 0, \"error\": null}\n");
}

/* What the torch adapter calls: xsa_ctx_malloc with the stream,
 * xsa_ctx_free with none. Every call counts; the 16th call is a free, so
 * its probe is recorded at the 17th, a malloc, on that malloc's stream. */
static void test_adapter_entry_points_are_probed(void **state) {
    (void)state;
    setenv("XSALLOC_LAG_PROBE", path, 1);
    OK(xsa_init(NULL));
    for (int i = 0; i < 9; i++) { /* calls 1-18 */
        void *p = NULL;
        OK(xsa_ctx_malloc(&p, 4096, 0, S1));
        OK(xsa_ctx_free(p));
    }
    xsa_lag_probe_stats s = stats();
    assert_int_equal(s.calls, 18);
    assert_int_equal(s.pending, 1);
    xsa_sim_complete_stream(S1);
    void *p = NULL;
    OK(xsa_ctx_malloc(&p, 4096, 0, S1)); /* call 19 sees it: 19 - 17 */
    OK(xsa_ctx_free(p));
    assert_int_equal(xsa_lag_probe_count(2), 1);
    assert_int_equal(stats().calls, 20);
}

static void test_unwritable_path_fails_init(void **state) {
    (void)state;
    setenv("XSALLOC_LAG_PROBE", "/nonexistent/dir/lag.json", 1);
    assert_int_equal(xsa_init(NULL), XSA_ERROR_CONFIG);
    assert_non_null(strstr(xsa_last_error(), "XSALLOC_LAG_PROBE"));
    assert_non_null(strstr(xsa_last_error(), "/nonexistent/dir/lag.json"));
    assert_false(atomic_load(&xsa_lag_probe_on));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unset_makes_no_event_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probes_complete_with_their_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_slots_skip_and_reuse_their_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eager_events_complete_at_the_next_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_lose_no_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_probe_writes_nulls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adapter_entry_points_are_probed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_path_fails_init, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
