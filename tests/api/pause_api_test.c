/*
 * pause_api_test: pause and resume through the public API (xsalloc.h,
 * "Pause and resume") on two simulated devices: tag regions, tagged memory
 * pools, xsa_pause / xsa_resume over every device, paused bytes, host
 * copies and their retention, the snapshot's mark, the errors, and pause
 * and resume racing with malloc and free from other threads (TSan).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"

#define MiB ((size_t)1 << 20)
#define S1 ((void *)0x1001)

static int64_t paused_stat(int device) {
    xsa_device_stats s;
    OK(xsa_get_stats(device, &s));
    return s.paused_bytes.current;
}

static size_t paused_bytes(int device, const char *tag) {
    size_t bytes = 0;
    OK(xsa_paused_bytes(device, tag, &bytes));
    return bytes;
}

/* A region's allocations, on both devices, pause and resume together;
 * the backed-up tag's bytes come back, the untagged memory is untouched. */
static void test_regions_over_devices(void **state) {
    (void)state;
    void *w0, *w1, *kv, *plain;
    OK(xsa_tag_region_begin("weights", XSA_TAG_CPU_BACKUP));
    OK(xsa_malloc(&w0, 5 * MiB, 0, S1));
    OK(xsa_malloc(&w1, 3 * MiB, 1, S1));
    OK(xsa_tag_region_begin("kv_cache", 0)); /* nested: the inner region wins */
    OK(xsa_malloc(&kv, 4 * MiB, 0, S1));
    OK(xsa_tag_region_end());
    OK(xsa_tag_region_end());
    OK(xsa_malloc(&plain, 2 * MiB, 0, S1));
    xsa_fixture_fill(w0, 5 * MiB, 1);
    xsa_fixture_fill(w1, 3 * MiB, 2);
    xsa_fixture_fill(plain, 2 * MiB, 3);

    OK(xsa_pause("weights", 0));
    assert_int_equal(paused_bytes(0, "weights"), 6 * MiB);
    assert_int_equal(paused_bytes(1, "weights"), 4 * MiB);
    assert_int_equal(paused_bytes(0, "kv_cache"), 0);
    assert_int_equal(paused_stat(1), 4 * MiB);
    void *host = NULL;
    OK(xsa_cpu_backup((char *)w1 + 16, 64, &host));
    assert_non_null(host);
    OK(xsa_pause(NULL, XSA_PAUSE_SYNC_DEVICE)); /* the rest: kv_cache */
    assert_int_equal(paused_bytes(0, NULL), 10 * MiB);
    char *json = NULL;
    OK(xsa_snapshot_json(&json));
    assert_non_null(strstr(json, "\"is_paused\":true"));
    xsa_free_buffer(json);
    INVARIANTS(0);
    INVARIANTS(1);
    assert_true(xsa_fixture_filled(plain, 2 * MiB, 3));

    OK(xsa_resume(NULL));
    assert_int_equal(paused_stat(0) + paused_stat(1), 0);
    assert_true(xsa_fixture_filled(w0, 5 * MiB, 1));
    assert_true(xsa_fixture_filled(w1, 3 * MiB, 2));
    OK(xsa_cpu_backup(w1, 64, &host));
    assert_null(host); /* released at resume: retention is off */
    INVARIANTS(0);
    INVARIANTS(1);
    OK(xsa_free(w0));
    OK(xsa_free(w1));
    OK(xsa_free(kv));
    OK(xsa_free(plain));
}

/* A MemPool tagged through the API; allocations routed to it while it is
 * paused fail, frees work. */
static void test_tagged_mempool(void **state) {
    (void)state;
    const xsa_mempool_id pool = {0, 7};
    OK(xsa_mempool_create(0, pool));
    OK(xsa_mempool_set_tag(0, pool, "graph", 0));
    OK(xsa_begin_allocate_to_pool(0, pool, NULL, NULL));
    void *a, *b;
    OK(xsa_malloc(&a, 3 * MiB, 0, S1));
    OK(xsa_malloc(&b, 1 * MiB, 0, S1));
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_pause("graph", 0), "under way");
    OK(xsa_end_allocate_to_pool(0, pool));
    OK(xsa_pause("graph", 0));
    OK(xsa_begin_allocate_to_pool(0, pool, NULL, NULL));
    void *c = NULL;
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_malloc(&c, 1000, 0, S1), "paused");
    assert_null(c);
    OK(xsa_end_allocate_to_pool(0, pool));
    OK(xsa_free(b));
    OK(xsa_resume("graph"));
    OK(xsa_free(a));
    OK(xsa_mempool_release(0, pool));
    OK(xsa_mempool_release(0, pool));
    INVARIANTS(0);
}

static void test_retention(void **state) {
    (void)state;
    int retain = -1;
    OK(xsa_get_backup_retention(&retain));
    assert_int_equal(retain, 0);
    void *w;
    OK(xsa_tag_region_begin("weights", XSA_TAG_CPU_BACKUP | XSA_TAG_BACKUP_MMAP));
    OK(xsa_malloc(&w, 1 * MiB, 0, S1));
    OK(xsa_tag_region_end());
    OK(xsa_set_backup_retention(1));
    OK(xsa_pause("weights", 0));
    void *first = NULL, *kept = NULL;
    OK(xsa_cpu_backup(w, 1 * MiB, &first));
    OK(xsa_resume("weights"));
    OK(xsa_cpu_backup(w, 1 * MiB, &kept));
    assert_ptr_equal(first, kept);
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_cpu_backup(w, 1 * MiB + 1, &kept), "passes the end");
    OK(xsa_set_backup_retention(0));
    OK(xsa_free(w)); /* the copy goes with its allocation */
    FAILS(XSA_ERROR_INVALID_POINTER, xsa_cpu_backup(w, 1, &kept), "not in a live allocation");
}

static void test_bad_input(void **state) {
    (void)state;
    char long_name[80];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_tag_region_begin("", 0), "1 to 63 bytes");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_tag_region_begin(NULL, 0), "1 to 63 bytes");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_tag_region_begin(long_name, 0), "1 to 63 bytes");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_tag_region_begin("kv", 0x80), "unknown flags");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_tag_region_end(), "no tag region is open");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_pause("kv", 0x80), "unknown flags");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_pause("kv", XSA_PAUSE_BACKUP | XSA_PAUSE_DISCARD), "together");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_pause("", 0), "1 to 63 bytes");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_paused_bytes(0, NULL, NULL), "NULL");
    FAILS(XSA_ERROR_INVALID_DEVICE, xsa_paused_bytes(9, NULL, &(size_t){0}), "");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_set_tag(0, (xsa_mempool_id){0, 0}, "kv", 0), "no such memory pool");
    /* A tag nothing carries: nothing to do. */
    OK(xsa_pause("never-used", 0));
    OK(xsa_resume("never-used"));
    for (int i = 0; i < 16; i++) OK(xsa_tag_region_begin("deep", 0));
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_tag_region_begin("deep", 0), "16 deep");
    for (int i = 0; i < 16; i++) OK(xsa_tag_region_end());
}

/* ---- threads ---- */

#define ROUNDS 30
static atomic_bool stop;

/* Untagged malloc and free with data checks on one device. */
static void *churn(void *arg) {
    unsigned char seed = (unsigned char)(uintptr_t)arg;
    int device = (int)((uintptr_t)arg & 1);
    while (!atomic_load(&stop)) {
        void *p = NULL;
        size_t size = (1 + seed % 3) * MiB + seed * 512;
        if (xsa_malloc(&p, size, device, S1) != XSA_SUCCESS) fail_msg("churn: %s", xsa_last_error());
        xsa_fixture_fill(p, size, seed);
        if (!xsa_fixture_filled(p, size, seed)) fail_msg("churn: data lost");
        if (xsa_free(p) != XSA_SUCCESS) fail_msg("churn free: %s", xsa_last_error());
    }
    return NULL;
}

/* Allocations in a region of a tag nobody pauses, and reads of the stats. */
static void *other_region(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        void *p = NULL;
        if (xsa_tag_region_begin("scratch", 0) != XSA_SUCCESS) fail_msg("%s", xsa_last_error());
        if (xsa_malloc(&p, 3 * MiB, 1, S1) != XSA_SUCCESS) fail_msg("region malloc: %s", xsa_last_error());
        if (xsa_tag_region_end() != XSA_SUCCESS) fail_msg("%s", xsa_last_error());
        size_t bytes;
        if (xsa_paused_bytes(1, "scratch", &bytes) != XSA_SUCCESS || bytes) fail_msg("scratch was paused");
        if (xsa_free(p) != XSA_SUCCESS) fail_msg("region free: %s", xsa_last_error());
    }
    return NULL;
}

static void test_pause_races_malloc_and_free(void **state) {
    (void)state;
    void *w[2];
    OK(xsa_tag_region_begin("weights", XSA_TAG_CPU_BACKUP));
    for (int d = 0; d < 2; d++) {
        OK(xsa_malloc(&w[d], 6 * MiB, d, S1));
        xsa_fixture_fill(w[d], 6 * MiB, (unsigned char)(40 + d));
    }
    OK(xsa_tag_region_end());
    atomic_store(&stop, false);
    pthread_t t[5];
    for (uintptr_t i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(i + 1)), 0);
    assert_int_equal(pthread_create(&t[4], NULL, other_region, NULL), 0);
    for (int r = 0; r < ROUNDS; r++) {
        OK(xsa_pause("weights", 0));
        assert_int_equal(paused_bytes(0, "weights") + paused_bytes(1, "weights"), 12 * MiB);
        OK(xsa_resume("weights"));
        for (int d = 0; d < 2; d++) assert_true(xsa_fixture_filled(w[d], 6 * MiB, (unsigned char)(40 + d)));
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);
    for (int d = 0; d < 2; d++) {
        INVARIANTS(d);
        OK(xsa_free(w[d]));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_regions_over_devices, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_tagged_mempool, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_retention, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_pause_races_malloc_and_free, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
