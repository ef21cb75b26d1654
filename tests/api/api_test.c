/*
 * api_test: the public C API on the simulated driver: initialisation and
 * configuration errors, every error path, several devices, several threads.
 * Invariants are checked after each step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/devices.h"
#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)


static void test_bad_config_names_key_and_value(void **state) {
    (void)state;
    assert_int_equal(xsa_init("max_split_size_mb:abc"), XSA_ERROR_CONFIG);
    assert_non_null(strstr(xsa_last_error(), "max_split_size_mb"));
    assert_non_null(strstr(xsa_last_error(), "abc"));
    assert_int_equal(xsa_init("no_such_key:1"), XSA_ERROR_CONFIG);
    assert_non_null(strstr(xsa_last_error(), "no_such_key"));
    /* Lazy init from the environment fails the same way, on every call. */
    setenv("XSALLOC_CONF", "expandable_segments:maybe", 1);
    void *p = (void *)1;
    assert_int_equal(xsa_malloc(&p, 100, 0, NULL), XSA_ERROR_CONFIG);
    assert_null(p);
    assert_non_null(strstr(xsa_last_error(), "XSALLOC_CONF"));
    assert_non_null(strstr(xsa_last_error(), "maybe"));
    setenv("XSALLOC_CONF", "expandable_segments:False", 1);
    OK(xsa_malloc(&p, 100, 0, NULL)); /* lazily initialised, classic */
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 2 * MiB);
    OK(xsa_free(p));
    assert_int_equal(xsa_init(NULL), XSA_ERROR_ALREADY_INITIALIZED);
}

static void test_size_zero_null_and_bad_pointers(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:True"));
    assert_string_equal(xsa_driver_name(), "sim");
    void *p = (void *)1;
    OK(xsa_malloc(&p, 0, 0, NULL));
    assert_null(p);
    OK(xsa_free(NULL));
    OK(xsa_malloc(&p, 4096, 0, NULL));
    assert_int_equal(xsa_free((char *)p + 512), XSA_ERROR_INVALID_POINTER);
    assert_non_null(strstr(xsa_last_error(), "inside the allocation"));
    assert_int_equal(xsa_free((void *)0x12345), XSA_ERROR_INVALID_POINTER);
    INVARIANTS(0);
    OK(xsa_free(p));
    assert_int_equal(xsa_free(p), XSA_ERROR_INVALID_POINTER);
    assert_int_equal(xsa_record_stream(p, (void *)0x77), XSA_ERROR_INVALID_POINTER);
    assert_int_equal(xsa_malloc(NULL, 10, 0, NULL), XSA_ERROR_INVALID_VALUE);
    INVARIANTS(0);
}

static void test_bad_device_and_arguments(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    int n = 0;
    OK(xsa_device_count(&n));
    assert_int_equal(n, 2);
    void *p = NULL;
    assert_int_equal(xsa_malloc(&p, 10, 2, NULL), XSA_ERROR_INVALID_DEVICE);
    assert_non_null(strstr(xsa_last_error(), "device 2"));
    assert_int_equal(xsa_malloc(&p, 10, -1, NULL), XSA_ERROR_INVALID_DEVICE);
    assert_int_equal(xsa_set_device(5), XSA_ERROR_INVALID_DEVICE);
    assert_int_equal(xsa_set_memory_fraction(1.5, 0), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_set_memory_fraction(-0.5, 0), XSA_ERROR_INVALID_VALUE);
    xsa_device_stats s;
    assert_int_equal(xsa_get_stats(3, &s), XSA_ERROR_INVALID_DEVICE);
    assert_int_equal(xsa_use_driver("opencl"), XSA_ERROR_INVALID_VALUE);
}

static void test_oom_carries_report_and_changes_nothing(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *p = NULL, *q = (void *)1;
    OK(xsa_malloc(&p, 512 * MiB, 0, NULL));
    assert_int_equal(xsa_malloc(&q, 600 * MiB, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    assert_null(q);
    assert_non_null(strstr(xsa_last_error(), "Tried to allocate 600.00 MiB"));
    assert_int_equal(xsa_malloc(&q, SIZE_MAX, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    INVARIANTS(0);
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.num_ooms, 2);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 512 * MiB);
    OK(xsa_free(p));
}

/* The report is PyTorch's text (c10/cuda/CUDACachingAllocator.cpp), its
 * figures xsalloc's, then xsalloc's detail: checked whole up to the
 * detail, for the plain case, a memory pool's cached memory and a request
 * of 1 EiB or more. Log scrapers and batch-size finders match it. */
static void test_oom_report_is_pytorchs_text(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *p = NULL, *q = NULL;
    OK(xsa_malloc(&p, 512 * MiB, 0, NULL));
    assert_int_equal(xsa_malloc(&q, 600 * MiB, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    const char *want = "CUDA out of memory. Tried to allocate 600.00 MiB. GPU 0 has a total capacity of 1024.00 MiB "
                       "of which 512.00 MiB is free. Of the allocated memory 512.00 MiB is allocated by xsalloc, and "
                       "0 bytes is reserved by xsalloc but unallocated. xsalloc: the request was 629145600 bytes (a "
                       "629145600-byte block) on stream (nil). ";
    if (strncmp(xsa_last_error(), want, strlen(want))) fail_msg("got:  %s\nwant: %s", xsa_last_error(), want);
    OK(xsa_free(p));
    /* A memory pool's cached block counts as allocated, in private pools. */
    xsa_mempool_id g = {0, 5};
    OK(xsa_mempool_create(0, g));
    OK(xsa_begin_allocate_to_pool(0, g, NULL, NULL));
    OK(xsa_malloc(&p, 4 * MiB, 0, NULL));
    OK(xsa_free(p));
    OK(xsa_end_allocate_to_pool(0, g));
    OK(xsa_empty_cache());
    assert_int_equal(xsa_malloc(&q, 2 * GiB, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    want = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 1024.00 MiB of which "
           "1020.00 MiB is free. Of the allocated memory 4.00 MiB is allocated by xsalloc, with 4.00 MiB allocated in "
           "private pools (e.g., CUDA Graphs), and 0 bytes is reserved by xsalloc but unallocated. xsalloc: ";
    if (strncmp(xsa_last_error(), want, strlen(want))) fail_msg("got:  %s\nwant: %s", xsa_last_error(), want);
    OK(xsa_mempool_release(0, g));
    OK(xsa_empty_cache());
    assert_int_equal(xsa_malloc(&q, (size_t)1 << 60, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    want = "CUDA out of memory. Tried to allocate more than 1EB memory. xsalloc: the request was 1152921504606846976 "
           "bytes";
    if (strncmp(xsa_last_error(), want, strlen(want))) fail_msg("got:  %s\nwant: %s", xsa_last_error(), want);
    INVARIANTS(0);
}

static void test_memory_fraction_before_and_after_first_use(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    OK(xsa_set_memory_fraction(0.25, 1)); /* before device 1's pool exists */
    void *p = NULL;
    assert_int_equal(xsa_malloc(&p, 300 * MiB, 1, NULL), XSA_ERROR_OUT_OF_MEMORY);
    assert_non_null(strstr(xsa_last_error(), "is free. 256.00 MiB allowed; Of the allocated memory"));
    OK(xsa_set_memory_fraction(0.5, 1));
    OK(xsa_malloc(&p, 300 * MiB, 1, NULL));
    OK(xsa_free(p));
    INVARIANTS(1);
}

/* PyTorch's fraction 0: accepted, before and after a device's pool
 * exists, and then no new device memory: cached blocks still serve, a miss
 * releases the cache and fails with the out-of-memory report, and the
 * fraction can be raised again. */
static void test_memory_fraction_zero(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    OK(xsa_set_memory_fraction(0.0, 1)); /* before device 1's pool exists: not "none" */
    void *p = (void *)1, *q = NULL;
    assert_int_equal(xsa_malloc(&p, 512, 1, NULL), XSA_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    assert_non_null(strstr(xsa_last_error(), "0 bytes allowed"));
    INVARIANTS(1);
    OK(xsa_malloc(&p, 4 * MiB, 0, NULL));
    OK(xsa_free(p));
    OK(xsa_set_memory_fraction(0.0, 0));
    OK(xsa_malloc(&q, 4 * MiB, 0, NULL)); /* the cached block, as in PyTorch */
    assert_ptr_equal(q, p);
    assert_int_equal(xsa_malloc(&p, 64 * MiB, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(xsa_malloc(&p, 512, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.num_ooms, 2);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 4 * MiB);
    INVARIANTS(0);
    OK(xsa_free(q));
    OK(xsa_set_memory_fraction(1.0, 0));
    OK(xsa_set_memory_fraction(1.0, 1));
    OK(xsa_malloc(&p, 64 * MiB, 1, NULL));
    OK(xsa_free(p));
    INVARIANTS(1);
}

/* The fraction each device has: configured, then as set, before and
 * after its pool exists (torch.cuda.get_per_process_memory_fraction). */
static void test_memory_fraction_read_back(void **state) {
    (void)state;
    OK(xsa_init("per_process_memory_fraction:0.5"));
    double f = -1;
    OK(xsa_get_memory_fraction(0, &f));
    assert_true(f == 0.5);
    OK(xsa_set_memory_fraction(0.0, 0));
    OK(xsa_get_memory_fraction(0, &f));
    assert_true(f == 0.0);
    void *p = NULL;
    OK(xsa_malloc(&p, MiB, 1, NULL));
    OK(xsa_get_memory_fraction(1, &f));
    assert_true(f == 0.5);
    OK(xsa_set_memory_fraction(0.75, 1));
    OK(xsa_get_memory_fraction(1, &f));
    assert_true(f == 0.75);
    OK(xsa_free(p));
    assert_int_equal(xsa_get_memory_fraction(2, &f), XSA_ERROR_INVALID_DEVICE);
    assert_int_equal(xsa_get_memory_fraction(0, NULL), XSA_ERROR_INVALID_VALUE);
}

static void test_devices_are_separate(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *a = NULL, *b = NULL;
    OK(xsa_malloc(&a, 8 * MiB, 0, NULL));
    OK(xsa_set_device(1));
    OK(xsa_malloc_current(&b, 8 * MiB, NULL));
    int d = -1;
    OK(xsa_get_device(&d));
    assert_int_equal(d, 1);
    xsa_device_stats s0, s1;
    OK(xsa_get_stats(0, &s0));
    OK(xsa_get_stats(1, &s1));
    assert_int_equal(s0.allocated_bytes[XSA_STAT_ALL].current, 8 * MiB);
    assert_int_equal(s1.allocated_bytes[XSA_STAT_ALL].current, 8 * MiB);
    void *base = NULL;
    size_t size = 0;
    OK(xsa_get_base_allocation(b, &base, &size));
    assert_ptr_equal(base, b);
    assert_int_equal(size, 8 * MiB);
    OK(xsa_free(a)); /* found by asking the pools: right device */
    OK(xsa_free(b));
    size_t cached = 0, largest = 0;
    OK(xsa_cache_info(1, &cached, &largest));
    assert_int_equal(cached, 8 * MiB);
    assert_int_equal(largest, 8 * MiB);
    OK(xsa_empty_cache());
    OK(xsa_cache_info(1, &cached, &largest));
    assert_int_equal(cached, 0);
    INVARIANTS(0);
    INVARIANTS(1);
    OK(xsa_set_device(0));
}

static void test_no_vmm_falls_back_to_classic(void **state) {
    (void)state;
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.vmm_supported = 0;
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
    OK(xsa_init("expandable_segments:True"));
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT];
    xsa_driver_read_calls(xsa_active_driver(), before, NULL);
    void *p = NULL;
    OK(xsa_malloc(&p, 3 * MiB, 0, NULL));
    xsa_driver_read_calls(xsa_active_driver(), after, NULL);
    /* A classic 20 MiB segment from cuMemAlloc, no reservation. */
    assert_int_equal(after[XSA_DRV_mem_alloc] - before[XSA_DRV_mem_alloc], 1);
    assert_int_equal(after[XSA_DRV_mem_address_reserve] - before[XSA_DRV_mem_address_reserve], 0);
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 20 * MiB);
    OK(xsa_free(p));
    INVARIANTS(0);
}

static void test_shutdown_returns_live_memory(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *p = NULL;
    OK(xsa_malloc(&p, 8 * MiB, 0, NULL));
    OK(xsa_record_stream(p, (void *)0x99));
    OK(xsa_malloc(&p, 4 * MiB, 1, NULL));
    /* xsa_fixture_teardown checks that the simulated driver holds nothing afterwards. */
}

#define THREADS 4
#define OPS 20000

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *live[16] = {0};
    for (int i = 0; i < OPS; i++) {
        seed = seed * 1103515245u + 12345u;
        int slot = (seed >> 8) % 16;
        int device = (seed >> 16) & 1;
        if (live[slot]) {
            if ((seed >> 20) % 4 == 0) xsa_record_stream(live[slot], (void *)(uintptr_t)(0x100 + (seed % 3)));
            if (xsa_free(live[slot]) != XSA_SUCCESS) return (void *)"free failed";
            live[slot] = NULL;
        } else {
            size_t size = (size_t)1 << (9 + (seed >> 12) % 15);
            if (xsa_malloc(&live[slot], size, device, (void *)(uintptr_t)(seed % 2)) != XSA_SUCCESS) return (void *)"malloc failed";
        }
        if (i % 5000 == 0) xsa_empty_cache();
    }
    for (int s = 0; s < 16; s++)
        if (live[s] && xsa_free(live[s]) != XSA_SUCCESS) return (void *)"final free failed";
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    xsa_sim_set_eager_events(1);
    OK(xsa_init(NULL));
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < THREADS; i++) {
        void *result = NULL;
        pthread_join(t[i], &result);
        if (result) fail_msg("thread %d: %s: %s", i, (const char *)result, xsa_last_error());
    }
    INVARIANTS(0);
    INVARIANTS(1);
    OK(xsa_empty_cache());
    for (int d = 0; d < 2; d++) {
        xsa_device_stats s;
        OK(xsa_get_stats(d, &s));
        assert_int_equal(s.allocation[XSA_STAT_ALL].current, 0);
        assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 0);
    }
    xsa_sim_set_eager_events(0);
}

/* A pool's checkpoint and restore through the API: argument errors, the
 * device's lock, the delta and its free. */
static void test_checkpoint_and_restore(void **state) {
    (void)state;
    const xsa_mempool_id g = {1, 0};
    xsa_live_block *blocks = NULL;
    size_t n = 0;
    assert_int_equal(xsa_mempool_checkpoint(0, g, NULL, &n), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_mempool_checkpoint(2, g, &blocks, &n), XSA_ERROR_INVALID_DEVICE);
    assert_int_equal(xsa_mempool_checkpoint(0, g, &blocks, &n), XSA_ERROR_INVALID_VALUE);
    assert_non_null(strstr(xsa_last_error(), "no such pool"));
    OK(xsa_mempool_create(0, g));
    OK(xsa_begin_allocate_to_pool(0, g, NULL, NULL));
    void *a = NULL, *b = NULL;
    OK(xsa_malloc(&a, 3 * MiB, 0, NULL));
    OK(xsa_malloc(&b, 1000, 0, NULL));
    OK(xsa_end_allocate_to_pool(0, g));
    OK(xsa_mempool_checkpoint(0, g, &blocks, &n));
    assert_int_equal(n, 2);
    OK(xsa_free(a));
    xsa_restore_delta d;
    assert_int_equal(xsa_mempool_restore(0, g, NULL, 1, &d), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_mempool_restore(0, g, blocks, n, NULL), XSA_ERROR_INVALID_VALUE);
    OK(xsa_mempool_restore(0, g, blocks, n, &d));
    INVARIANTS(0);
    assert_int_equal(d.n_freed, 0);
    assert_int_equal(d.n_allocated, 1);
    assert_ptr_equal(d.allocated[0], a);
    xsa_restore_delta_free(&d);
    assert_null(d.allocated);
    OK(xsa_mempool_restore(0, g, NULL, 0, &d)); /* frees both */
    INVARIANTS(0);
    assert_int_equal(d.n_freed, 2);
    xsa_restore_delta_free(&d);
    assert_int_equal(xsa_free(a), XSA_ERROR_INVALID_POINTER);
    xsa_free_buffer(blocks);
    OK(xsa_mempool_release(0, g));
    OK(xsa_mempool_release(0, g));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_config_names_key_and_value, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_size_zero_null_and_bad_pointers, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bad_device_and_arguments, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_oom_carries_report_and_changes_nothing, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_oom_report_is_pytorchs_text, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_memory_fraction_before_and_after_first_use, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_memory_fraction_zero, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_memory_fraction_read_back, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_devices_are_separate, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_no_vmm_falls_back_to_classic, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_returns_live_memory, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_threads, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_and_restore, xsa_fixture_two_devices, xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
