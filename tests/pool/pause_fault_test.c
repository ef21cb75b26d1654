/*
 * pause_fault_test: every driver call that pause and resume make, made to
 * fail in turn (each entry point, each call N = 1..count of a fault-free
 * run), on the simulated driver. The workload: two tagged memory pools (one
 * backed up, one discarded, on two streams, with a block recorded on a
 * third stream and one freed with record_stream uses) beside untagged
 * memory; pause every tag, resume every tag. A run passes when:
 * - a failed pause leaves nothing paused: the stats and the device's
 *   memory are as before, every byte is intact, and a pause without the
 *   fault then succeeds;
 * - a failed resume leaves everything paused with its backups, and a
 *   resume without the fault then brings every backed-up byte back;
 * - the invariant checkers pass after every step, and at the end the
 *   simulated driver holds nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pool/pause.h"
#include "tests/pool/pool_fixture.h"

#define S2 ((void *)0x2002)
#define S3 ((void *)0x3003)
static const xsa_mempool_id M1 = {0, 1}, M2 = {0, 2};
enum { KV = 1, WEIGHTS = 2 };

typedef struct workload {
    xsa_pool *p;
    void *w1, *w2, *kv, *plain;
} workload;

static void fill(void *ptr, size_t size, unsigned seed) {
    for (size_t i = 0; i < size; i++) ((unsigned char *)ptr)[i] = (unsigned char)(seed + i * 7);
}

static bool holds(const void *ptr, size_t size, unsigned seed) {
    for (size_t i = 0; i < size; i++)
        if (((const unsigned char *)ptr)[i] != (unsigned char)(seed + i * 7)) return false;
    return true;
}

static void *alloc_in(xsa_pool *p, xsa_mempool_id id, size_t size, void *stream) {
    pool_begin(p, id, NULL, true);
    void *ptr = alloc(p, size, stream);
    pool_end(p, id);
    pool_drop(p, id);
    return ptr;
}

static void setup_workload(workload *w) {
    w->p = make_pool(256 * MiB, true, NULL);
    xsa_pool *p = w->p;
    assert_int_equal(xsa_pool_mempool_create(p, M1, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_pause_set_tag(p, M1, WEIGHTS, "weights", XSA_TAG_CPU_BACKUP, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_pool_mempool_create(p, M2, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_pause_set_tag(p, M2, KV, "kv", 0, err, sizeof err), XSA_POOL_OK);
    w->w1 = alloc_in(p, M1, 5 * MiB, S1);
    w->w2 = alloc_in(p, M1, 3000, S2);
    w->kv = alloc_in(p, M2, 6 * MiB, S1);
    void *gone = alloc_in(p, M2, 4 * MiB, S1);
    assert_int_equal(xsa_pool_record_stream(p, w->kv, S3, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_pool_record_stream(p, gone, S3, err, sizeof err), XSA_POOL_OK);
    release(p, gone);
    w->plain = alloc(p, 3 * MiB, S2);
    fill(w->w1, 5 * MiB, 1);
    fill(w->w2, 3000, 2);
    fill(w->kv, 6 * MiB, 3);
    fill(w->plain, 3 * MiB, 4);
}

static void finish_workload(workload *w) {
    release(w->p, w->w1);
    release(w->p, w->w2);
    release(w->p, w->kv);
    release(w->p, w->plain);
    teardown(w->p);
}

static void expect_backed_up_intact(const workload *w) {
    assert_true(holds(w->w1, 5 * MiB, 1));
    assert_true(holds(w->w2, 3000, 2));
    assert_true(holds(w->plain, 3 * MiB, 4));
}

/* The driver calls of a fault-free pause and resume, per entry point. */
static void reference_counts(uint64_t pause_calls[XSA_DRV_COUNT], uint64_t resume_calls[XSA_DRV_COUNT]) {
    workload w;
    setup_workload(&w);
    uint64_t a[XSA_DRV_COUNT], b[XSA_DRV_COUNT], c[XSA_DRV_COUNT];
    xsa_driver_read_calls(drv, a, NULL);
    assert_int_equal(xsa_pause_tag(w.p, 0, 0, err, sizeof err), XSA_POOL_OK);
    xsa_driver_read_calls(drv, b, NULL);
    assert_int_equal(xsa_resume_tag(w.p, 0, false, err, sizeof err), XSA_POOL_OK);
    xsa_driver_read_calls(drv, c, NULL);
    for (int e = 0; e < XSA_DRV_COUNT; e++) {
        pause_calls[e] = b[e] - a[e];
        resume_calls[e] = c[e] - b[e];
    }
    expect_backed_up_intact(&w);
    finish_workload(&w);
}

/* The error an injected call of entry e gives. */
static xsa_cu_result injected(xsa_driver_entry e) {
    return e == XSA_DRV_mem_create || e == XSA_DRV_mem_host_alloc ? XSA_CU_ERROR_OUT_OF_MEMORY : XSA_CU_ERROR_UNKNOWN;
}

static void fault_in_pause(xsa_driver_entry e, uint64_t nth) {
    workload w;
    setup_workload(&w);
    xsa_pool *p = w.p;
    xsa_device_stats before = stats(p);
    xsa_sim_usage device = usage();
    xsa_sim_fail_call(e, nth, injected(e));
    xsa_pool_status st = xsa_pause_tag(p, 0, 0, err, sizeof err);
    xsa_sim_clear_faults();
    CHECK(p);
    if (st != XSA_POOL_OK) {
        xsa_device_stats after = stats(p);
        assert_int_equal(after.paused_bytes.current, 0);
        assert_int_equal(after.allocated_bytes[XSA_STAT_ALL].current, before.allocated_bytes[XSA_STAT_ALL].current);
        assert_true(after.reserved_bytes[XSA_STAT_ALL].current <= before.reserved_bytes[XSA_STAT_ALL].current);
        assert_true(usage().handle_bytes <= device.handle_bytes);
        assert_int_equal(usage().host_allocs, 0);
        expect_backed_up_intact(&w);
        assert_true(holds(w.kv, 6 * MiB, 3));
        assert_int_equal(xsa_pause_tag(p, 0, 0, err, sizeof err), XSA_POOL_OK);
        CHECK(p);
    }
    assert_int_equal(xsa_resume_tag(p, 0, false, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    expect_backed_up_intact(&w);
    finish_workload(&w);
}

static void fault_in_resume(xsa_driver_entry e, uint64_t nth) {
    workload w;
    setup_workload(&w);
    xsa_pool *p = w.p;
    assert_int_equal(xsa_pause_tag(p, 0, 0, err, sizeof err), XSA_POOL_OK);
    xsa_device_stats paused = stats(p);
    size_t device = usage().handle_bytes;
    xsa_sim_fail_call(e, nth, injected(e));
    xsa_pool_status st = xsa_resume_tag(p, 0, false, err, sizeof err);
    xsa_sim_clear_faults();
    CHECK(p);
    if (st != XSA_POOL_OK) {
        assert_int_equal(stats(p).paused_bytes.current, paused.paused_bytes.current);
        assert_int_equal(usage().handle_bytes, device);
        assert_true(usage().host_allocs > 0);
        assert_int_equal(xsa_resume_tag(p, 0, false, err, sizeof err), XSA_POOL_OK);
        CHECK(p);
    }
    expect_backed_up_intact(&w);
    finish_workload(&w);
}

static void test_every_fault(void **state) {
    (void)state;
    uint64_t pause_calls[XSA_DRV_COUNT], resume_calls[XSA_DRV_COUNT];
    reference_counts(pause_calls, resume_calls);
    size_t runs = 0;
    for (int e = 0; e < XSA_DRV_COUNT; e++) {
        for (uint64_t n = 1; n <= pause_calls[e]; n++, runs++) fault_in_pause((xsa_driver_entry)e, n);
        for (uint64_t n = 1; n <= resume_calls[e]; n++, runs++) fault_in_resume((xsa_driver_entry)e, n);
    }
    /* The sweep reached the calls it is about. */
    assert_true(pause_calls[XSA_DRV_stream_synchronize] >= 3 && pause_calls[XSA_DRV_mem_unmap] >= 2 &&
                pause_calls[XSA_DRV_memcpy_dtoh_async] == 2 && pause_calls[XSA_DRV_mem_host_alloc] == 1 &&
                pause_calls[XSA_DRV_mem_release] >= 3);
    assert_true(resume_calls[XSA_DRV_mem_create] >= 3 && resume_calls[XSA_DRV_mem_map] >= 3 &&
                resume_calls[XSA_DRV_mem_set_access] >= 3 && resume_calls[XSA_DRV_memcpy_htod_async] == 2);
    print_message("pause_fault_test: %zu runs, each with one failed call\n", runs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_fault),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
