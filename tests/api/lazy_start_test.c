/*
 * lazy_start_test: nothing touches the driver before the first call that
 * needs a device. xsa_configure takes the settings and starts nothing;
 * the calls that need only the settings (xsa_get_settings, run-time
 * settings, their check) start nothing either; the first allocation
 * starts, with the settings given before. The proof is the simulated
 * driver's fault injection: its next cuInit is made to fail, and the
 * failure shows exactly at the call that starts. xsa_init still starts at
 * once, and a failed start leaves nothing behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)

/* The next cuInit fails: a call that starts the driver says so. */
static void fail_next_init(void) { xsa_sim_fail_call(XSA_DRV_init, 1, XSA_CU_ERROR_NOT_INITIALIZED); }

static void test_configure_starts_nothing_until_the_first_allocation(void **state) {
    (void)state;
    fail_next_init();
    OK(xsa_configure("max_split_size_mb:64,expandable_segments:False"));
    xsa_settings s;
    OK(xsa_get_settings(&s));
    assert_true(s.max_split_size == 64 * MiB);
    assert_string_equal(s.source, "xsa_init");
    /* Settings changed (and checked) before the start: still no driver. */
    OK(xsa_check_allocator_settings("max_split_size_mb:40"));
    OK(xsa_set_allocator_settings("max_split_size_mb:40,expandable_segments:False"));
    FAILS(XSA_ERROR_ALREADY_INITIALIZED, xsa_configure(NULL), "already initialised");
    FAILS(XSA_ERROR_ALREADY_INITIALIZED, xsa_init(NULL), "already initialised");
    /* The first allocation starts: the injected cuInit failure shows here. */
    void *p = NULL;
    FAILS(XSA_ERROR_NO_DRIVER, xsa_malloc(&p, MiB, 0, NULL), "initialisation failed");
    /* The configuration stays (it was given): the next call starts with it. */
    OK(xsa_malloc(&p, MiB, 0, NULL));
    xsa_device_stats st;
    OK(xsa_get_stats(0, &st));
    assert_int_equal(st.max_split_size, 40 * MiB); /* the run-time change reached the pools */
    assert_int_equal(st.segment[XSA_STAT_ALL].current, 1); /* classic: expandable_segments:False held */
    OK(xsa_free(p));
    INVARIANTS(0);
}

static void test_environment_settings_are_read_without_starting(void **state) {
    (void)state;
    setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.5", 1);
    fail_next_init();
    xsa_settings s;
    OK(xsa_get_settings(&s)); /* configures from the environment, starts nothing */
    assert_true(s.garbage_collection_threshold == 0.5);
    assert_string_equal(s.source, "PYTORCH_CUDA_ALLOC_CONF");
    int n = 0;
    FAILS(XSA_ERROR_NO_DRIVER, xsa_device_count(&n), "initialisation failed"); /* this one needs the driver */
    OK(xsa_device_count(&n));
    assert_int_equal(n, 2);
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
}

static void test_init_starts_at_once_and_a_failed_start_leaves_nothing(void **state) {
    (void)state;
    fail_next_init();
    FAILS(XSA_ERROR_NO_DRIVER, xsa_init("max_split_size_mb:64"), "initialisation failed");
    OK(xsa_init("max_split_size_mb:32")); /* nothing was left configured */
    xsa_settings s;
    OK(xsa_get_settings(&s));
    assert_true(s.max_split_size == 32 * MiB);
    /* A lazy start that fails forgets the environment's settings it read. */
    xsa_shutdown();
    OK(xsa_use_driver("sim"));
    fail_next_init();
    void *p = NULL;
    FAILS(XSA_ERROR_NO_DRIVER, xsa_malloc(&p, MiB, 0, NULL), "initialisation failed");
    OK(xsa_init("max_split_size_mb:20"));
}

/* A malformed string fails xsa_configure at once, naming the key, and
 * configures nothing; shutdown forgets a configuration never started. */
static void test_configure_errors_and_shutdown(void **state) {
    (void)state;
    FAILS(XSA_ERROR_CONFIG, xsa_configure("max_split_size_mb:x"), "configuration: key 'max_split_size_mb'");
    OK(xsa_configure("max_split_size_mb:64"));
    OK(xsa_shutdown());
    OK(xsa_use_driver("sim"));
    OK(xsa_configure("max_split_size_mb:100"));
    xsa_settings s;
    OK(xsa_get_settings(&s));
    assert_true(s.max_split_size == 100 * MiB);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_configure_starts_nothing_until_the_first_allocation,
                                        xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_environment_settings_are_read_without_starting, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_init_starts_at_once_and_a_failed_start_leaves_nothing,
                                        xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_configure_errors_and_shutdown, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
