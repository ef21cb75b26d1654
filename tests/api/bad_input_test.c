/*
 * bad_input_test: every kind of bad input to the public API gets a clear
 * error and loses nothing. Each case runs with a live allocation holding
 * known data and compares the device stats, the simulated driver's usage
 * and that data before and after the bad call. Malformed configurations
 * (one of each form the parser rejects; config_test has them all at the
 * parser level) must fail xsa_init and XSALLOC_CONF's lazy initialisation
 * with XSA_ERROR_CONFIG, leaving xsalloc uninitialised and the driver
 * untouched.
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
#define GiB ((size_t)1 << 30)

static void *live;  /* 3 MiB filled with 0x5A */
static xsa_device_stats stats_before;
static xsa_sim_usage usage_before;

static int setup(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, 1 * GiB);
    return 0;
}

/* Initialises, allocates the live buffer and records the state. */
static void start(void) {
    assert_int_equal(xsa_init(NULL), XSA_SUCCESS);
    assert_int_equal(xsa_malloc(&live, 3 * MiB, 0, NULL), XSA_SUCCESS);
    memset(live, 0x5A, 3 * MiB);
    assert_int_equal(xsa_get_stats(0, &stats_before), XSA_SUCCESS);
    xsa_sim_get_usage(&usage_before);
}

/* The bad call returned `want` with a message containing `needle`, and
 * nothing changed but the counters of out-of-memory handling (num_ooms,
 * num_alloc_retries, num_sync_all_streams). */
static void expect_rejected(xsa_status got, xsa_status want, const char *needle) {
    if (got != want) fail_msg("got %s (%s), expected %s", xsa_status_name(got), xsa_last_error(), xsa_status_name(want));
    if (!strstr(xsa_last_error(), needle)) fail_msg("message '%s' lacks '%s'", xsa_last_error(), needle);
    xsa_device_stats s;
    assert_int_equal(xsa_get_stats(0, &s), XSA_SUCCESS);
    s.num_ooms = stats_before.num_ooms;
    s.num_alloc_retries = stats_before.num_alloc_retries;
    s.num_sync_all_streams = stats_before.num_sync_all_streams;
    if (memcmp(&s, &stats_before, sizeof s) != 0) fail_msg("the stats changed");
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    if (memcmp(&u, &usage_before, sizeof u) != 0) fail_msg("the driver's usage changed");
    for (size_t i = 0; i < 3 * MiB; i++)
        if (((unsigned char *)live)[i] != 0x5A) fail_msg("byte %zu of the live allocation changed", i);
    if (xsa_check_invariants(0) != XSA_SUCCESS) fail_msg("%s", xsa_last_error());
}

static void test_null_free_is_a_noop(void **state) {
    (void)state;
    start();
    assert_int_equal(xsa_free(NULL), XSA_SUCCESS);
    expect_rejected(XSA_SUCCESS, XSA_SUCCESS, "");
}

static void test_bad_frees(void **state) {
    (void)state;
    start();
    int on_stack;
    expect_rejected(xsa_free(&on_stack), XSA_ERROR_INVALID_POINTER, "not a live allocation");
    expect_rejected(xsa_free((char *)live + 4096), XSA_ERROR_INVALID_POINTER, "not its start");
    void *p = NULL;
    assert_int_equal(xsa_malloc(&p, 1000, 0, NULL), XSA_SUCCESS);
    assert_int_equal(xsa_free(p), XSA_SUCCESS);
    assert_int_equal(xsa_get_stats(0, &stats_before), XSA_SUCCESS);
    xsa_sim_get_usage(&usage_before);
    expect_rejected(xsa_free(p), XSA_ERROR_INVALID_POINTER, "already freed");
}

static void test_record_stream_on_bad_pointers(void **state) {
    (void)state;
    start();
    void *p = NULL;
    assert_int_equal(xsa_malloc(&p, 1000, 0, NULL), XSA_SUCCESS);
    assert_int_equal(xsa_free(p), XSA_SUCCESS);
    assert_int_equal(xsa_get_stats(0, &stats_before), XSA_SUCCESS);
    xsa_sim_get_usage(&usage_before);
    expect_rejected(xsa_record_stream(p, (void *)0x1001), XSA_ERROR_INVALID_POINTER, "record_stream(");
    expect_rejected(xsa_record_stream(NULL, (void *)0x1001), XSA_ERROR_INVALID_POINTER, "record_stream(");
    expect_rejected(xsa_record_stream((char *)live + 512, (void *)0x1001), XSA_ERROR_INVALID_POINTER,
                    "record_stream(");
}

static void test_bad_sizes(void **state) {
    (void)state;
    start();
    void *p = (void *)1;
    expect_rejected(xsa_malloc(&p, 0, 0, NULL), XSA_SUCCESS, ""); /* size 0: NULL, nothing allocated */
    assert_null(p);
    p = (void *)1;
    expect_rejected(xsa_malloc(&p, SIZE_MAX, 0, NULL), XSA_ERROR_OUT_OF_MEMORY,
                    "CUDA out of memory. Tried to allocate more than 1EB memory.");
    assert_null(p);
    expect_rejected(xsa_malloc(&p, SIZE_MAX - 4096, 0, NULL), XSA_ERROR_OUT_OF_MEMORY, "total capacity of 1024.00 MiB");
    expect_rejected(xsa_malloc(&p, 1 * GiB + 1, 0, NULL), XSA_ERROR_OUT_OF_MEMORY, "Tried to allocate 1.00 GiB");
    /* Fits the device but not next to the live allocation: the report, after the retry. */
    expect_rejected(xsa_malloc(&p, 1 * GiB - 2 * MiB, 0, NULL), XSA_ERROR_OUT_OF_MEMORY, "3.00 MiB is allocated by xsalloc");
    assert_null(p);
    expect_rejected(xsa_malloc(NULL, 100, 0, NULL), XSA_ERROR_INVALID_VALUE, "ptr is NULL");
}

static void test_bad_devices(void **state) {
    (void)state;
    start();
    void *p = NULL;
    size_t a, b;
    xsa_device_stats s;
    expect_rejected(xsa_malloc(&p, 100, 1, NULL), XSA_ERROR_INVALID_DEVICE, "device 1 does not exist");
    expect_rejected(xsa_malloc(&p, 100, -1, NULL), XSA_ERROR_INVALID_DEVICE, "device -1");
    expect_rejected(xsa_malloc(&p, 100, INT32_MAX, NULL), XSA_ERROR_INVALID_DEVICE, "does not exist");
    expect_rejected(xsa_set_device(1), XSA_ERROR_INVALID_DEVICE, "xsa_set_device");
    expect_rejected(xsa_cache_info(7, &a, &b), XSA_ERROR_INVALID_DEVICE, "xsa_cache_info");
    expect_rejected(xsa_get_stats(1, &s), XSA_ERROR_INVALID_DEVICE, "xsa_get_stats");
    expect_rejected(xsa_reset_peak_stats(1), XSA_ERROR_INVALID_DEVICE, "xsa_reset_peak_stats");
    expect_rejected(xsa_reset_accumulated_stats(-3), XSA_ERROR_INVALID_DEVICE, "xsa_reset_accumulated_stats");
    expect_rejected(xsa_set_memory_fraction(0.5, 1), XSA_ERROR_INVALID_DEVICE, "xsa_set_memory_fraction");
    expect_rejected(xsa_check_invariants(2), XSA_ERROR_INVALID_DEVICE, "xsa_check_invariants");
}

static void test_bad_arguments(void **state) {
    (void)state;
    start();
    void *base;
    size_t size;
    expect_rejected(xsa_set_memory_fraction(-0.01, 0), XSA_ERROR_INVALID_VALUE, "[0, 1]");
    expect_rejected(xsa_set_memory_fraction(1.01, 0), XSA_ERROR_INVALID_VALUE, "[0, 1]");
    expect_rejected(xsa_set_memory_fraction(strtod("nan", NULL), 0), XSA_ERROR_INVALID_VALUE, "[0, 1]");
    expect_rejected(xsa_get_stats(0, NULL), XSA_ERROR_INVALID_VALUE, "stats is NULL");
    expect_rejected(xsa_device_count(NULL), XSA_ERROR_INVALID_VALUE, "count is NULL");
    expect_rejected(xsa_get_device(NULL), XSA_ERROR_INVALID_VALUE, "device is NULL");
    expect_rejected(xsa_get_base_allocation(live, NULL, &size), XSA_ERROR_INVALID_VALUE, "NULL");
    expect_rejected(xsa_get_base_allocation((char *)live + 1, &base, &size), XSA_ERROR_INVALID_POINTER, "not a live");
    expect_rejected(xsa_init(NULL), XSA_ERROR_ALREADY_INITIALIZED, "already initialised");
    expect_rejected(xsa_use_driver("cuda"), XSA_ERROR_ALREADY_INITIALIZED, "already initialised");
    expect_rejected(xsa_use_driver("opencl"), XSA_ERROR_INVALID_VALUE, "'cuda' or 'sim'");
}

/* One configuration of each form the parser rejects, and a word the
 * message must contain. */
static const struct {
    const char *conf, *needle;
} bad_confs[] = {
    {"expandable_segments", "no ':'"},                       /* key without value */
    {"expandable_segments:", "empty value"},
    {":True", "empty key"},
    {",expandable_segments:True", "leading ','"},
    {"expandable_segments:True,,page_recycling:True", "',,'"},
    {"expandable_segments:True:False", "unexpected ':'"},
    {"expandable_segments:True]", "unexpected ']'"},
    {"[", "unexpected '['"},
    {"no_such_key:1", "no_such_key"},                        /* unknown key */
    {"Expandable_segments:True", "Expandable_segments"},     /* keys are case-sensitive */
    {"max split_size_mb:64", "max split_size_mb"},           /* whitespace inside a key */
    {"page_recycling:True,page_recycling:False", "page_recycling"}, /* duplicate */
    {"expandable_segments:true", "not a boolean"},
    {"max_split_size_mb:abc", "abc"},                        /* not a number */
    {"max_split_size_mb:-64", "-64"},                        /* sign */
    {"max_split_size_mb:64.5", "64.5"},                      /* fraction */
    {"max_split_size_mb:0x40", "0x40"},                      /* hex */
    {"max_split_size_mb:20MB", "20MB"},                      /* suffix */
    {"max_split_size_mb:99999999999999999999999", "max_split_size_mb"}, /* overflow */
    {"max_split_size_mb:19", "max_split_size_mb"},           /* below the minimum */
    {"max_non_split_rounding_mb:1", "max_non_split_rounding_mb"},
    {"garbage_collection_threshold:1.0", "garbage_collection_threshold"}, /* out of range */
    {"garbage_collection_threshold:nan", "nan"},
    {"garbage_collection_threshold:inf", "inf"},
    {"per_process_memory_fraction:-0.5", "per_process_memory_fraction"},
    {"per_process_memory_fraction:1.5", "1.5"},
    {"roundup_power2_divisions:3", "roundup_power2_divisions"}, /* not a power of two */
    {"roundup_power2_divisions:[]", "empty list"},
    {"roundup_power2_divisions:[256:1", "closing ']'"},
    {"roundup_power2_divisions:[300:1]", "not a power of two"},
    {"roundup_power2_divisions:[512:1,256:2]", "later interval"},
    {"roundup_power2_divisions:[256:1,>:8,1024:2]", "must be last"},
    {"roundup_power2_divisions:[256:[1]]", "nested"},
    {"max_split_size_mb:[256:1]", "max_split_size_mb"},      /* a list for a scalar key */
    {"backend:cudaMallocAsync", "cudaMallocAsync"},          /* refused values and keys */
    {"large_segment_size_mb:40", "large_segment_size_mb"},
    {"pinned_num_register_threads:3", "pinned_num_register_threads"},
    {"expandable_segments_reserve:1", "expandable_segments_reserve"},
};

static void test_every_malformed_config(void **state) {
    (void)state;
    xsa_sim_usage u0, u;
    xsa_sim_get_usage(&u0);
    for (size_t i = 0; i < sizeof bad_confs / sizeof bad_confs[0]; i++) {
        const char *conf = bad_confs[i].conf, *needle = bad_confs[i].needle;
        xsa_status st = xsa_init(conf);
        if (st != XSA_ERROR_CONFIG || !strstr(xsa_last_error(), needle))
            fail_msg("xsa_init(\"%s\"): %s: '%s' (wanted XSA_ERROR_CONFIG naming '%s')", conf, xsa_status_name(st),
                     xsa_last_error(), needle);
        setenv("XSALLOC_CONF", conf, 1);
        void *p = (void *)1;
        st = xsa_malloc(&p, 100, 0, NULL);
        if (st != XSA_ERROR_CONFIG || p || !strstr(xsa_last_error(), "XSALLOC_CONF"))
            fail_msg("XSALLOC_CONF=\"%s\": %s: '%s'", conf, xsa_status_name(st), xsa_last_error());
        unsetenv("XSALLOC_CONF");
        xsa_sim_get_usage(&u);
        if (memcmp(&u, &u0, sizeof u) != 0) fail_msg("\"%s\" touched the driver", conf);
    }
    /* Nothing was initialised: a good configuration still goes through. */
    assert_int_equal(xsa_init("expandable_segments:False"), XSA_SUCCESS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_null_free_is_a_noop, setup, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bad_frees, setup, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_record_stream_on_bad_pointers, setup, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bad_sizes, setup, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bad_devices, setup, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_every_malformed_config, setup, xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
