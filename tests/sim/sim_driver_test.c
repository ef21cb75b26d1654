/*
 * sim_driver_test: the simulated driver reproduces the CUDA driver's rules
 * for one device: reservations, handles, mappings, classic allocations,
 * events, fault injection and call counters (sim_driver_system_test has
 * the rest).
 *
 * Design: the harness of sim_driver_fixture.h (a fresh configuration per
 * case, xsa_sim_check after each step, every counter zero at the end). Faults that must
 * happen (use after unmap, access before cuMemSetAccess, use after free) are
 * provoked in a fork()ed child, which must die with SIGSEGV; a control child
 * reading valid memory must exit normally, so the harness itself can fail.
 */
#include "tests/sim/sim_driver_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- devices ---------------------------------------------------------------- */

static void test_devices(void **state) {
    (void)state;
    assert_string_equal("sim", D->name);
    OK(XSA_DRV(D, init));
    int n = 0, v = -1;
    OK(XSA_DRV(D, device_get_count, &n));
    assert_int_equal(1, n);
    OK(XSA_DRV(D, device_get_attribute, &v, XSA_ATTR_VMM_SUPPORTED, 0));
    assert_int_equal(1, v);
    OK(XSA_DRV(D, device_get_attribute, &v, XSA_ATTR_POSIX_FD_SUPPORTED, 0));
    assert_int_equal(1, v);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, device_get_attribute, &v, 1, 0));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, device_get_attribute, &v, XSA_ATTR_VMM_SUPPORTED, 1));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, device_get_attribute, &v, XSA_ATTR_VMM_SUPPORTED, -1));
    size_t total = 0, f = 0, g = 0;
    OK(XSA_DRV(D, device_total_mem, &total, 0));
    assert_int_equal(64 * MiB, total);
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, device_total_mem, &total, 1));
    OK(XSA_DRV(D, mem_get_info, 0, &f, &total));
    assert_int_equal(64 * MiB, f);
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_get_info, 3, &f, &total));
    OK(XSA_DRV(D, mem_get_granularity, &g, 0, 0));
    assert_int_equal(GRAN, g);
    OK(XSA_DRV(D, mem_get_granularity, &g, 0, 1));
    assert_int_equal(GRAN, g);
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_get_granularity, &g, 1, 0));
    int can = -1;
    OK(XSA_DRV(D, device_can_access_peer, &can, 0, 0));
    assert_int_equal(0, can);
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, device_can_access_peer, &can, 0, 1));
}

static void test_contexts_and_error_strings(void **state) {
    (void)state;
    void *ctx = NULL;
    OK(XSA_DRV(D, primary_ctx_retain, &ctx, 0));
    assert_non_null(ctx);
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, primary_ctx_retain, &ctx, 1));
    OK(XSA_DRV(D, ctx_set_current, ctx));
    OK(XSA_DRV(D, ctx_set_current, NULL));
    int bogus;
    FAILS(XSA_CU_ERROR_INVALID_CONTEXT, XSA_DRV(D, ctx_set_current, &bogus));
    OK(XSA_DRV(D, primary_ctx_release, 0));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, primary_ctx_release, 1));
    assert_non_null(strstr(D->error_string(XSA_CU_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY"));
    assert_non_null(strstr(D->error_string(XSA_CU_ERROR_NOT_READY), "CUDA_ERROR_NOT_READY"));
    assert_non_null(D->error_string(12345));
    assert_non_null(D->error_string(-1));
}

/* ---- reservations, handles and mappings --------------------------------- */

static void test_map_write_read(void **state) {
    (void)state;
    xsa_devptr p = reserve(8 * GRAN);
    assert_int_equal(0, p % GRAN);
    xsa_mem_handle h = create(2 * GRAN, 0);
    assert_int_equal(60 * MiB, free_mem(0));
    map_rw(p + GRAN, 2 * GRAN, h, 0);
    xsa_sim_usage u = usage();
    assert_int_equal(1, u.handles);
    assert_int_equal(2 * GRAN, u.handle_bytes);
    assert_int_equal(2 * GRAN, u.mapped_bytes);
    assert_int_equal(1, u.reservations);
    assert_int_equal(8 * GRAN, u.reserved_bytes);
    assert_int_equal(2 * GRAN, u.device_used[0]);
    fill(p + GRAN, 2 * GRAN, 7);
    assert_filled(p + GRAN, 2 * GRAN, 7);
    /* Same physical memory when mapped again elsewhere, at an offset too. */
    OK(XSA_DRV(D, mem_unmap, p + GRAN, 2 * GRAN));
    CHECK();
    map_rw(p + 4 * GRAN, 2 * GRAN, h, 0);
    assert_filled(p + 4 * GRAN, 2 * GRAN, 7);
    OK(XSA_DRV(D, mem_unmap, p + 4 * GRAN, 2 * GRAN));
    /* Part of a handle: the H100's driver refuses with NOT_SUPPORTED. */
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, GRAN, GRAN, h));
    CHECK();
    OK(XSA_DRV(D, mem_release, h));
    CHECK();
    assert_int_equal(64 * MiB, free_mem(0));
    OK(XSA_DRV(D, mem_address_free, p, 8 * GRAN));
}

static void test_reserve_errors(void **state) {
    (void)state;
    xsa_devptr p = 0;
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_reserve, &p, 0, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_reserve, &p, GRAN + 4096, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_reserve, &p, GRAN, 3 * GRAN));
    assert_int_equal(0, usage().reservations);
    OK(XSA_DRV(D, mem_address_reserve, &p, 4 * GRAN, 64 * MiB));
    assert_int_equal(0, p % (64 * MiB));
    /* Reservations are larger than the device: they are only address space. */
    xsa_devptr big = reserve((size_t)64 << 30);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_free, p, 2 * GRAN));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_free, p + GRAN, 3 * GRAN));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_free, p, 8 * GRAN));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_free, 4096, GRAN));
    OK(XSA_DRV(D, mem_address_free, p, 4 * GRAN));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_free, p, 4 * GRAN));
    OK(XSA_DRV(D, mem_address_free, big, (size_t)64 << 30));
}

static void test_create_release_errors(void **state) {
    (void)state;
    xsa_mem_handle h = 0;
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_create, &h, 0, 0, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_create, &h, GRAN / 2, 0, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_create, &h, GRAN + 4096, 0, 0));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_create, &h, GRAN, 1, 0));
    assert_int_equal(0, h);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_release, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_release, 0x123456789ull));
    h = create(GRAN, 0);
    OK(XSA_DRV(D, mem_release, h));
    CHECK();
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_release, h));
    /* The slot is reused, yet the stale value stays invalid. */
    xsa_mem_handle h2 = create(GRAN, 0);
    assert_true(h2 != h);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_release, h));
    OK(XSA_DRV(D, mem_release, h2));
}

static void test_map_errors(void **state) {
    (void)state;
    xsa_devptr p = reserve(4 * GRAN);
    xsa_mem_handle h = create(2 * GRAN, 0), dead = create(GRAN, 0);
    OK(XSA_DRV(D, mem_release, dead));
    /* Error codes as the H100's driver 580 gives them (tests/gpu/probes/driver_probe.c). */
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p + 4096, 2 * GRAN, 0, h));      /* misaligned */
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, GRAN + 4096, 0, h));          /* not the handle's size */
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, 0, 0, h));
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, GRAN, 4096, h));              /* offset */
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p + 3 * GRAN, 2 * GRAN, 0, h));  /* past the end */
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p - 2 * GRAN, 2 * GRAN, 0, h));  /* before the start */
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, 2 * GRAN, GRAN, h));
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, 3 * GRAN, 0, h));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p, GRAN, 0, dead));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p, GRAN, 0, 0));
    assert_int_equal(0, usage().mapped_bytes);
    map_rw(p + GRAN, 2 * GRAN, h, 0);
    fill(p + GRAN, 2 * GRAN, 1);
    /* Over a mapped range, wholly or partly: refused, the mapping untouched. */
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p + GRAN, 2 * GRAN, 0, h));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p, 2 * GRAN, 0, h));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p + 2 * GRAN, 2 * GRAN, 0, h));
    assert_int_equal(2 * GRAN, usage().mapped_bytes);
    assert_filled(p + GRAN, 2 * GRAN, 1);
    OK(XSA_DRV(D, mem_unmap, p + GRAN, 2 * GRAN));
    OK(XSA_DRV(D, mem_release, h));
    OK(XSA_DRV(D, mem_address_free, p, 4 * GRAN));
}

static void test_unmap_errors(void **state) {
    (void)state;
    xsa_devptr p = reserve(6 * GRAN);
    xsa_mem_handle a = create(2 * GRAN, 0), b = create(GRAN, 0);
    map_rw(p, 2 * GRAN, a, 0);
    map_rw(p + 2 * GRAN, GRAN, b, 0);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p, GRAN));          /* half of a */
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p + GRAN, 2 * GRAN)); /* half of a + b */
    OK(XSA_DRV(D, mem_unmap, p + 3 * GRAN, GRAN)); /* never mapped: a no-op, as on the H100 */
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p + 4096, GRAN));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p + 6 * GRAN, GRAN));
    assert_int_equal(3 * GRAN, usage().mapped_bytes);
    assert_readable(p + GRAN);
    /* Two whole mappings and an unmapped page in one call. */
    OK(XSA_DRV(D, mem_unmap, p, 4 * GRAN));
    CHECK();
    assert_int_equal(0, usage().mapped_bytes);
    OK(XSA_DRV(D, mem_unmap, p, 2 * GRAN));
    OK(XSA_DRV(D, mem_release, a));
    OK(XSA_DRV(D, mem_release, b));
    OK(XSA_DRV(D, mem_address_free, p, 6 * GRAN));
}

static void test_set_access_errors(void **state) {
    (void)state;
    xsa_devptr p = reserve(4 * GRAN);
    xsa_mem_handle h = create(GRAN, 0);
    int dev0 = 0, dev1 = 1, devm = -1;
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_set_access, p, GRAN, &dev0, 1));
    OK(XSA_DRV(D, mem_map, p, GRAN, 0, h));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_set_access, p, 2 * GRAN, &dev0, 1));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_set_access, p + 4096, GRAN, &dev0, 1));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_set_access, p, GRAN, &dev0, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_set_access, p, GRAN, NULL, 1));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_set_access, p, GRAN, &dev1, 1));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_set_access, p, GRAN, &devm, 1));
    assert_faults(p); /* none of the refused calls granted access */
    OK(XSA_DRV(D, mem_set_access, p, GRAN, &dev0, 1));
    assert_readable(p);
    OK(XSA_DRV(D, mem_unmap, p, GRAN));
    OK(XSA_DRV(D, mem_release, h));
    OK(XSA_DRV(D, mem_address_free, p, 4 * GRAN));
}

static void test_use_after_unmap_faults(void **state) {
    (void)state;
    xsa_devptr p = reserve(2 * GRAN);
    xsa_mem_handle h = create(GRAN, 0);
    map_rw(p, GRAN, h, 0);
    fill(p, GRAN, 3);
    assert_readable(p + 4096);
    OK(XSA_DRV(D, mem_unmap, p, GRAN));
    CHECK();
    assert_faults(p + 4096);
    OK(XSA_DRV(D, mem_release, h));
    OK(XSA_DRV(D, mem_address_free, p, 2 * GRAN));
}

static void test_access_before_set_access_faults(void **state) {
    (void)state;
    xsa_devptr p = reserve(GRAN);
    xsa_mem_handle h = create(GRAN, 0);
    assert_faults(p); /* reserved only */
    OK(XSA_DRV(D, mem_map, p, GRAN, 0, h));
    CHECK();
    assert_faults(p); /* mapped, no access yet */
    OK(XSA_DRV(D, mem_set_access, p, GRAN, (int[]){0}, 1));
    assert_readable(p);
    OK(XSA_DRV(D, mem_unmap, p, GRAN));
    OK(XSA_DRV(D, mem_release, h));
    OK(XSA_DRV(D, mem_address_free, p, GRAN));
}

static void test_address_free_with_mappings(void **state) {
    (void)state;
    xsa_devptr p = reserve(4 * GRAN);
    xsa_mem_handle h = create(GRAN, 0);
    map_rw(p + 3 * GRAN, GRAN, h, 0);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_address_free, p, 4 * GRAN));
    assert_int_equal(1, usage().reservations);
    assert_readable(p + 3 * GRAN);
    OK(XSA_DRV(D, mem_unmap, p + 3 * GRAN, GRAN));
    OK(XSA_DRV(D, mem_address_free, p, 4 * GRAN));
    CHECK();
    OK(XSA_DRV(D, mem_release, h));
}

static void test_release_while_mapped(void **state) {
    (void)state;
    xsa_devptr p = reserve(4 * GRAN);
    xsa_mem_handle h = create(2 * GRAN, 0);
    map_rw(p, 2 * GRAN, h, 0);
    fill(p, 2 * GRAN, 9);
    OK(XSA_DRV(D, mem_release, h));
    CHECK();
    xsa_sim_usage u = usage();
    assert_int_equal(1, u.handles);
    assert_int_equal(2 * GRAN, u.handle_bytes);
    assert_int_equal(2 * GRAN, u.device_used[0]);
    assert_int_equal(60 * MiB, free_mem(0));
    assert_filled(p, 2 * GRAN, 9); /* still usable */
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_release, h));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_map, p + 2 * GRAN, 2 * GRAN, 0, h));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_export_fd, &(int){0}, h));
    OK(XSA_DRV(D, mem_unmap, p, 2 * GRAN)); /* the last mapping: memory goes back */
    CHECK();
    assert_int_equal(0, usage().handles);
    assert_int_equal(64 * MiB, free_mem(0));
    OK(XSA_DRV(D, mem_address_free, p, 4 * GRAN));
}

static void test_out_of_memory(void **state) {
    (void)state;
    configure(1, 4 * GRAN);
    xsa_mem_handle a = create(3 * GRAN, 0), b = 77;
    xsa_sim_usage before = usage();
    FAILS(XSA_CU_ERROR_OUT_OF_MEMORY, XSA_DRV(D, mem_create, &b, 2 * GRAN, 0, 0));
    FAILS(XSA_CU_ERROR_OUT_OF_MEMORY, XSA_DRV(D, mem_create, &b, 2 * GRAN, 0, 1));
    assert_int_equal(77, b);
    xsa_sim_usage after = usage();
    assert_int_equal(before.handles, after.handles);
    assert_int_equal(before.handle_bytes, after.handle_bytes);
    assert_int_equal(before.device_used[0], after.device_used[0]);
    assert_int_equal(GRAN, free_mem(0));
    xsa_devptr m = 0;
    FAILS(XSA_CU_ERROR_OUT_OF_MEMORY, XSA_DRV(D, mem_alloc, &m, GRAN + 1, 0));
    assert_int_equal(0, usage().mem_allocs);
    b = create(GRAN, 0); /* exactly full */
    assert_int_equal(0, free_mem(0));
    FAILS(XSA_CU_ERROR_OUT_OF_MEMORY, XSA_DRV(D, mem_create, &b, GRAN, 0, 0));
    FAILS(XSA_CU_ERROR_OUT_OF_MEMORY, XSA_DRV(D, mem_alloc, &m, 1, 0));
    OK(XSA_DRV(D, mem_release, a));
    OK(XSA_DRV(D, mem_release, b));
    assert_int_equal(4 * GRAN, free_mem(0));
}

/* ---- classic allocations ------------------------------------------------- */

static void test_mem_alloc_free(void **state) {
    (void)state;
    xsa_devptr p = 0, q = 0;
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_alloc, &p, 0, 0));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_alloc, &p, 1, 1));
    OK(XSA_DRV(D, mem_alloc, &p, 1, 0));
    CHECK();
    OK(XSA_DRV(D, mem_alloc, &q, 3 * MiB, 0));
    CHECK();
    xsa_sim_usage u = usage();
    assert_int_equal(2, u.mem_allocs);
    assert_int_equal(2 * MiB + 4 * MiB, u.mem_alloc_bytes);
    assert_int_equal(6 * MiB, u.device_used[0]);
    assert_int_equal(58 * MiB, free_mem(0));
    fill(q, 3 * MiB, 5);
    assert_filled(q, 3 * MiB, 5);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free, q + 4096));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free, 0x1000));
    assert_int_equal(2, usage().mem_allocs);
    OK(XSA_DRV(D, mem_free, q));
    /* Unmapped, so a use after free faults. Not checked in a child: its
     * runtime (TSan restarts a thread after fork) may reuse the address. */
    assert_false(host_mapped(q));
    CHECK();
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free, q));
    OK(XSA_DRV(D, mem_free, p));
    assert_int_equal(64 * MiB, free_mem(0));
}

/* ---- events ---------------------------------------------------------------- */


static void test_events_pending_until_completed(void **state) {
    (void)state;
    xsa_event e = new_event();
    OK(XSA_DRV(D, event_query, e)); /* never recorded */
    OK(XSA_DRV(D, event_record, e, S1));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, e));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, stream_query, S1));
    OK(XSA_DRV(D, stream_query, S2));
    OK(XSA_DRV(D, stream_query, NULL));
    assert_int_equal(1, usage().pending_events);
    OK(XSA_DRV(D, stream_wait_event, S2, e)); /* no visible effect */
    xsa_sim_complete_stream(S2);
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, e));
    xsa_sim_complete_stream(S1);
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, stream_query, S1));
    assert_int_equal(0, usage().pending_events);
    /* Re-recording replaces the earlier record. */
    OK(XSA_DRV(D, event_record, e, S1));
    OK(XSA_DRV(D, event_record, e, S2));
    xsa_sim_complete_stream(S2);
    OK(XSA_DRV(D, event_query, e));
    /* xsa_sim_complete_all, on the default stream too. */
    OK(XSA_DRV(D, event_record, e, NULL));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, stream_query, NULL));
    xsa_sim_complete_all();
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, stream_query, S1));
    OK(XSA_DRV(D, event_destroy, e));
}

static void test_stream_and_event_synchronize(void **state) {
    (void)state;
    xsa_event a = new_event(), b = new_event(), c = new_event();
    OK(XSA_DRV(D, event_record, a, S1));
    OK(XSA_DRV(D, event_record, b, S1));
    OK(XSA_DRV(D, event_record, c, S2));
    assert_int_equal(3, usage().pending_events);
    OK(XSA_DRV(D, event_synchronize, a)); /* a only: b is later on S1 */
    CHECK();
    OK(XSA_DRV(D, event_query, a));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, b));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, c));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, stream_query, S1));
    OK(XSA_DRV(D, event_record, a, S1)); /* after b now */
    OK(XSA_DRV(D, event_synchronize, a));  /* so b completes too */
    OK(XSA_DRV(D, event_query, b));
    OK(XSA_DRV(D, stream_query, S1));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, c));
    OK(XSA_DRV(D, stream_synchronize, S2));
    OK(XSA_DRV(D, event_query, c));
    OK(XSA_DRV(D, stream_synchronize, (xsa_stream)0x9999)); /* never used */
    assert_int_equal(0, usage().pending_events);
    OK(XSA_DRV(D, event_destroy, a));
    OK(XSA_DRV(D, event_destroy, b));
    OK(XSA_DRV(D, event_destroy, c));
}

static void test_eager_events(void **state) {
    (void)state;
    xsa_event e = new_event();
    xsa_sim_set_eager_events(1);
    OK(XSA_DRV(D, event_record, e, S1));
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, stream_query, S1));
    xsa_sim_set_eager_events(0);
    OK(XSA_DRV(D, event_record, e, S1));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, event_destroy, e));
    /* Eager from the configuration. */
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.eager_events = 1;
    OK(xsa_sim_configure(&c));
    e = new_event();
    OK(XSA_DRV(D, event_record, e, S2));
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, event_destroy, e));
}

static void test_event_destroy_and_unknown(void **state) {
    (void)state;
    xsa_event e = new_event(), keep = new_event();
    OK(XSA_DRV(D, event_record, e, S1));
    OK(XSA_DRV(D, event_destroy, e)); /* pending: legal */
    CHECK();
    assert_int_equal(1, usage().events);
    assert_int_equal(0, usage().pending_events);
    xsa_event bad[] = {e, NULL, (xsa_event)0x1234, (xsa_event)&keep};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, event_query, bad[i]));
        FAILS(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, event_record, bad[i], S1));
        FAILS(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, event_synchronize, bad[i]));
        FAILS(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_wait_event, S1, bad[i]));
        FAILS(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, event_destroy, bad[i]));
    }
    /* A new event reusing the slot does not revive the old value. */
    xsa_event again = new_event();
    assert_ptr_not_equal(again, e);
    FAILS(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, event_query, e));
    xsa_event none = NULL;
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, event_create, &none, 1));
    assert_null(none);
    OK(XSA_DRV(D, stream_wait_event, S1, keep));
    OK(XSA_DRV(D, event_destroy, keep));
    OK(XSA_DRV(D, event_destroy, again));
    xsa_sim_complete_all(); /* the destroyed event's record is still on S1 */
}

/* ---- fault injection ---------------------------------------------------------- */

static void test_fault_injection(void **state) {
    (void)state;
    xsa_devptr p = reserve(2 * GRAN);
    xsa_sim_fail_call(XSA_DRV_mem_create, 2, XSA_CU_ERROR_OUT_OF_MEMORY);
    xsa_mem_handle a = create(GRAN, 0), b = 0;
    xsa_sim_usage before = usage();
    FAILS(XSA_CU_ERROR_OUT_OF_MEMORY, XSA_DRV(D, mem_create, &b, GRAN, 0, 0));
    assert_int_equal(0, b);
    assert_int_equal(before.handles, usage().handles);
    assert_int_equal(before.device_used[0], usage().device_used[0]);
    b = create(GRAN, 0);
    /* Several armed at once: the map fails without mapping, and so on. */
    xsa_sim_fail_call(XSA_DRV_mem_map, 1, XSA_CU_ERROR_UNKNOWN);
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_INVALID_VALUE);
    xsa_sim_fail_call(XSA_DRV_mem_release, 1, XSA_CU_ERROR_NOT_PERMITTED);
    xsa_sim_fail_call(XSA_DRV_event_query, 1, XSA_CU_ERROR_INVALID_HANDLE);
    FAILS(XSA_CU_ERROR_UNKNOWN, XSA_DRV(D, mem_map, p, GRAN, 0, a));
    assert_int_equal(0, usage().mapped_bytes);
    map_rw(p, GRAN, a, 0);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p, GRAN));
    assert_readable(p);
    OK(XSA_DRV(D, mem_unmap, p, GRAN));
    FAILS(XSA_CU_ERROR_NOT_PERMITTED, XSA_DRV(D, mem_release, a));
    assert_int_equal(2, usage().handles);
    OK(XSA_DRV(D, mem_release, a));
    /* Cleared faults never fire. */
    xsa_sim_fail_call(XSA_DRV_mem_release, 1, XSA_CU_ERROR_UNKNOWN);
    xsa_sim_clear_faults();
    OK(XSA_DRV(D, mem_release, b));
    OK(XSA_DRV(D, mem_address_free, p, 2 * GRAN));
    /* The armed event_query fault is still waiting; configure drops it. */
    configure(1, 64 * MiB);
    xsa_event e = new_event();
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, event_destroy, e));
}

static void test_call_counters(void **state) {
    (void)state;
    uint64_t calls[XSA_DRV_COUNT];
    OK(XSA_DRV(D, init));
    OK(XSA_DRV(D, init));
    xsa_driver_read_calls(D, calls, NULL);
    assert_int_equal(2, calls[XSA_DRV_init]);
    configure(1, 64 * MiB);
    xsa_driver_read_calls(D, calls, NULL);
    assert_int_equal(0, calls[XSA_DRV_init]);
    /* The sim counts direct calls too (fault injection does not depend on XSA_DRV). */
    xsa_sim_fail_call(XSA_DRV_init, 2, XSA_CU_ERROR_NOT_INITIALIZED);
    OK(D->init());
    assert_int_equal(XSA_CU_ERROR_NOT_INITIALIZED, D->init());
    OK(D->init());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_devices),
        T(test_contexts_and_error_strings),
        T(test_map_write_read),
        T(test_reserve_errors),
        T(test_create_release_errors),
        T(test_map_errors),
        T(test_unmap_errors),
        T(test_set_access_errors),
        T(test_use_after_unmap_faults),
        T(test_access_before_set_access_faults),
        T(test_address_free_with_mappings),
        T(test_release_while_mapped),
        T(test_out_of_memory),
        T(test_mem_alloc_free),
        T(test_events_pending_until_completed),
        T(test_stream_and_event_synchronize),
        T(test_eager_events),
        T(test_event_destroy_and_unknown),
        T(test_fault_injection),
        T(test_call_counters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
