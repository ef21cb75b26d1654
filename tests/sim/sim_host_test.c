/*
 * sim_host_test: the simulated driver's copy streams and pinned host
 * memory (xsalloc/sim.h, "Streams, pinned host memory and copies"):
 * stream_create / stream_destroy, mem_host_alloc / mem_free_host,
 * mem_host_register / mem_host_unregister, each with its success and
 * error paths, its usage counters, fault injection and configuration's
 * "holds nothing" rule. The copies themselves: sim_copy_test.
 *
 * Design: every case starts from a fresh configuration, runs xsa_sim_check
 * (which checks the created streams and both host tables) after each
 * step, and ends with nothing held. Each error is checked with the table
 * unchanged after it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/sim/sim_gpu_fixture.h"
#include "xsalloc/sim.h"

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Whether [p, p+n) is mapped in this process (msync: ENOMEM where not). */
static bool host_mapped(const void *p, size_t n) {
    uintptr_t first = (uintptr_t)p & ~(uintptr_t)(page() - 1);
    int r = msync((void *)first, (uintptr_t)p + n - first, MS_ASYNC);
    assert_true(r == 0 || errno == ENOMEM);
    return r == 0;
}

static void *fresh_pages(size_t pages) {
    void *m = mmap(NULL, pages * page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    return m;
}

static xsa_stream new_stream(int device) {
    xsa_stream s = NULL;
    OK(XSA_DRV(D, stream_create, &s, device));
    assert_non_null(s);
    return s;
}

static void *host_alloc(size_t size) {
    void *h = NULL;
    OK(XSA_DRV(D, mem_host_alloc, &h, size));
    assert_non_null(h);
    return h;
}

static void configure_two_devices(void) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = 64 * MiB;
    c.devices = 2;
    assert_int_equal(XSA_CU_SUCCESS, xsa_sim_configure(&c));
}

/* ---- streams ------------------------------------------------------------------ */

/* New values, never a canonical address (so never a made-up or traced
 * stream), counted; refused arguments change nothing. */
static void test_stream_create(void **state) {
    (void)state;
    configure_two_devices();
    xsa_stream a = new_stream(0), b = new_stream(1);
    assert_true(a != b);
    assert_true((uintptr_t)a >> 47 && (uintptr_t)b >> 47);
    assert_int_equal(2, usage().streams);
    xsa_stream s = S1;
    EXPECT(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, stream_create, &s, 2));
    EXPECT(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, stream_create, &s, -1));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, stream_create, NULL, 0));
    assert_ptr_equal(S1, s);
    assert_int_equal(2, usage().streams);
    /* A created stream is a stream like any: work queues and completes there. */
    mapping m = new_mapping(1);
    xsa_event e = new_event();
    launch(a, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, a));
    EXPECT(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, stream_query, a));
    OK(XSA_DRV(D, stream_query, b));
    OK(XSA_DRV(D, stream_synchronize, a));
    OK(XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, stream_wait_event, b, e));
    OK(XSA_DRV(D, event_destroy, e));
    drop_mapping(&m);
    OK(XSA_DRV(D, stream_destroy, a));
    OK(XSA_DRV(D, stream_destroy, b));
    assert_int_equal(0, usage().streams);
}

/* A destroyed stream is refused everywhere a stream is taken, and its slot
 * comes back under another value; the legacy stream and made-up ones
 * cannot be destroyed. */
static void test_stream_destroy_and_stale_use(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_event e = new_event();
    xsa_stream s = new_stream(0);
    OK(XSA_DRV(D, stream_destroy, s));
    assert_int_equal(0, usage().streams);
    static char host[4096];
    xsa_graph g = NULL;
    int status = 0;
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_destroy, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_query, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_synchronize, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, event_record, e, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_wait_event, s, e));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_begin_capture, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_end_capture, s, &g));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_get_capture_info, s, &status, NULL, NULL, NULL));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, graph_launch, NULL, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, memcpy_dtoh_async, host, m.va, 16, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, memcpy_htod_async, m.va, host, 16, s));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, xsa_sim_launch(s, m.va, 16));
    assert_int_equal(0, usage().pending_kernels + usage().pending_copies);
    xsa_stream again = new_stream(0); /* the same slot, another generation */
    assert_true(again != s);
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_query, s));
    OK(XSA_DRV(D, stream_query, again));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_destroy, NULL));
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_destroy, S1));
    /* A value shaped like a created stream but never made is refused too. */
    xsa_stream forged = (xsa_stream)(uintptr_t)((uintptr_t)again + 1);
    EXPECT(XSA_CU_ERROR_INVALID_HANDLE, XSA_DRV(D, stream_query, forged));
    OK(XSA_DRV(D, stream_destroy, again));
    OK(XSA_DRV(D, event_destroy, e));
    drop_mapping(&m);
}

/* CUDA: a stream destroyed with work queued returns at once; the work
 * completes and the resources go after. Its uses still count. */
static void test_stream_destroy_with_queued_work(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_event e = new_event();
    xsa_stream s = new_stream(0);
    launch(s, m.va, MiB);
    OK(XSA_DRV(D, event_record, e, s));
    OK(XSA_DRV(D, stream_destroy, s));
    assert_int_equal(1, usage().pending_kernels);
    EXPECT(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, e));
    launch(S2, m.va, MiB); /* still running: a race */
    expect_violations(0, 1, 0, 0, (const char *const[]){"race", NULL});
    xsa_sim_tick(LAG);
    CHECK();
    OK(XSA_DRV(D, event_query, e));
    /* Manual mode: a device-wide synchronize completes a destroyed stream's work. */
    xsa_sim_set_gpu_lag(-1);
    s = new_stream(0);
    launch(s, m.va, MiB);
    OK(XSA_DRV(D, stream_destroy, s));
    OK(XSA_DRV(D, mem_unmap, m.va, m.size)); /* under the kernel */
    expect_violations(1, 0, 0, 0, (const char *const[]){"cuMemUnmap", NULL});
    OK(XSA_DRV(D, ctx_synchronize, 0));
    assert_int_equal(0, usage().pending_kernels);
    OK(XSA_DRV(D, mem_release, m.h));
    OK(XSA_DRV(D, mem_address_free, m.va, m.size));
    OK(XSA_DRV(D, event_destroy, e));
    xsa_sim_complete_all();
}

/* Refused while it is in a capture, which it invalidates. */
static void test_stream_destroy_while_capturing(void **state) {
    (void)state;
    xsa_stream s = new_stream(0);
    OK(XSA_DRV(D, stream_begin_capture, s));
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, XSA_DRV(D, stream_destroy, s));
    assert_int_equal(1, usage().streams);
    expect_violations(0, 0, 0, 1, (const char *const[]){"cuStreamDestroy", NULL});
    xsa_graph g = NULL;
    EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, XSA_DRV(D, stream_end_capture, s, &g));
    assert_null(g);
    OK(XSA_DRV(D, stream_destroy, s));
}

/* ---- pinned host memory ---------------------------------------------------------- */

/* Real, page-aligned, writable memory of the size asked, counted, and
 * unmapped at free; refused arguments change nothing. */
static void test_host_alloc_free(void **state) {
    (void)state;
    size_t size = 3 * page() + 1;
    void *h = host_alloc(size);
    assert_int_equal(0, (uintptr_t)h % page());
    memset(h, 0xab, size);
    void *small = host_alloc(1);
    assert_int_equal(2, usage().host_allocs);
    assert_int_equal(size + 1, usage().host_alloc_bytes);
    void *out = S1;
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_host_alloc, &out, 0));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_host_alloc, NULL, 64));
    assert_ptr_equal(S1, out);
    static char elsewhere[64];
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free_host, (char *)h + 1));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free_host, elsewhere));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free_host, NULL));
    assert_int_equal(2, usage().host_allocs);
    OK(XSA_DRV(D, mem_free_host, h));
    assert_false(host_mapped(h, size));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free_host, h));
    assert_int_equal(1, usage().host_allocs);
    assert_int_equal(1, usage().host_alloc_bytes);
    OK(XSA_DRV(D, mem_free_host, small));
    assert_int_equal(0, usage().host_alloc_bytes);
}

/* Registration: counted; overlapping any registered or allocated byte is
 * 712, unmapped memory and empty ranges are refused; unregistering
 * anything but a registered base is 713. */
static void test_host_register_unregister(void **state) {
    (void)state;
    char *m = fresh_pages(8), *pinned = host_alloc(page());
    size_t p = page();
    OK(XSA_DRV(D, mem_host_register, m, 4 * p));
    assert_int_equal(1, usage().host_registrations);
    assert_int_equal(4 * p, usage().host_registered_bytes);
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, XSA_DRV(D, mem_host_register, m, 4 * p));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, XSA_DRV(D, mem_host_register, m + p, p));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, XSA_DRV(D, mem_host_register, m + 4 * p - 1, 2 * p));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, XSA_DRV(D, mem_host_register, pinned, p));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, XSA_DRV(D, mem_host_register, pinned + 8, 8));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_host_register, NULL, p));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_host_register, m + 4 * p, 0));
    assert_int_equal(1, usage().host_registrations);
    /* Adjacent bytes, even in the same page, are another range. */
    OK(XSA_DRV(D, mem_host_register, m + 4 * p, 100));
    OK(XSA_DRV(D, mem_host_register, m + 4 * p + 200, 100));
    OK(XSA_DRV(D, mem_host_register, m + 5 * p, 3 * p));
    assert_int_equal(4, usage().host_registrations);
    assert_int_equal(7 * p + 200, usage().host_registered_bytes);
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, XSA_DRV(D, mem_host_unregister, m + p));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, XSA_DRV(D, mem_host_unregister, m + 4 * p + 100));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, XSA_DRV(D, mem_host_unregister, pinned));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, XSA_DRV(D, mem_host_unregister, NULL));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free_host, m)); /* registered, not allocated */
    OK(XSA_DRV(D, mem_host_unregister, m + 4 * p));
    OK(XSA_DRV(D, mem_host_unregister, m + 4 * p + 200));
    OK(XSA_DRV(D, mem_host_unregister, m + 5 * p));
    OK(XSA_DRV(D, mem_host_unregister, m));
    EXPECT(XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, XSA_DRV(D, mem_host_unregister, m));
    assert_int_equal(0, usage().host_registered_bytes);
    /* Memory not mapped at all. */
    munmap(m, 8 * p);
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_host_register, m, p));
    m = fresh_pages(2);
    munmap(m + p, p);
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_host_register, m, 2 * p)); /* half mapped */
    OK(XSA_DRV(D, mem_host_register, m, p));
    OK(XSA_DRV(D, mem_host_unregister, m));
    munmap(m, p);
    OK(XSA_DRV(D, mem_free_host, pinned));
}

/* A global-mode capture refuses the four host calls and is invalidated;
 * a relaxed thread may make them; ended captures refuse nothing. */
static void test_host_calls_during_capture(void **state) {
    (void)state;
    char *m = fresh_pages(1);
    void *h = host_alloc(64);
    for (int call = 0; call < 4; call++) {
        OK(XSA_DRV(D, stream_begin_capture, S1));
        void *out = NULL;
        xsa_cu_result r = call == 0   ? XSA_DRV(D, mem_host_alloc, &out, 64)
                          : call == 1 ? XSA_DRV(D, mem_free_host, h)
                          : call == 2 ? XSA_DRV(D, mem_host_register, m, page())
                                      : XSA_DRV(D, mem_host_unregister, m);
        assert_int_equal(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, r);
        CHECK();
        assert_null(out);
        assert_int_equal(1, usage().host_allocs);
        assert_int_equal(0, usage().host_registrations);
        static const char *const names[] = {"cuMemHostAlloc", "cuMemFreeHost", "cuMemHostRegister", "cuMemHostUnregister"};
        expect_violations(0, 0, 0, 1, (const char *const[]){names[call], NULL});
        xsa_graph g = NULL;
        EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, XSA_DRV(D, stream_end_capture, S1, &g));
    }
    OK(XSA_DRV(D, stream_begin_capture, S1));
    int mode = XSA_CAPTURE_MODE_RELAXED;
    OK(XSA_DRV(D, thread_exchange_capture_mode, &mode));
    void *more = host_alloc(64);
    OK(XSA_DRV(D, mem_host_register, m, page()));
    OK(XSA_DRV(D, mem_host_unregister, m));
    OK(XSA_DRV(D, mem_free_host, more));
    OK(XSA_DRV(D, thread_exchange_capture_mode, &mode));
    NO_VIOLATION();
    xsa_graph g = NULL;
    OK(XSA_DRV(D, stream_end_capture, S1, &g));
    OK(XSA_DRV(D, graph_destroy, g));
    OK(XSA_DRV(D, mem_free_host, h));
    munmap(m, page());
}

/* ---- faults, counters, configuration ---------------------------------------------- */

/* An injected fault on each entry point returns the error and changes
 * nothing; the next call works. */
static void test_fault_injection(void **state) {
    (void)state;
    char *m = fresh_pages(1);
    xsa_stream s = new_stream(0), out_s = S3;
    void *h = host_alloc(64), *out_h = S3;
    for (int e = 0; e < 6; e++) {
        static const xsa_driver_entry entries[] = {XSA_DRV_stream_create,     XSA_DRV_stream_destroy,
                                                   XSA_DRV_mem_host_alloc,    XSA_DRV_mem_free_host,
                                                   XSA_DRV_mem_host_register, XSA_DRV_mem_host_unregister};
        xsa_sim_fail_call(entries[e], 1, XSA_CU_ERROR_UNKNOWN);
        xsa_sim_usage before = usage();
        xsa_cu_result r = e == 0   ? XSA_DRV(D, stream_create, &out_s, 0)
                          : e == 1 ? XSA_DRV(D, stream_destroy, s)
                          : e == 2 ? XSA_DRV(D, mem_host_alloc, &out_h, 64)
                          : e == 3 ? XSA_DRV(D, mem_free_host, h)
                          : e == 4 ? XSA_DRV(D, mem_host_register, m, page())
                                   : XSA_DRV(D, mem_host_unregister, m);
        assert_int_equal(XSA_CU_ERROR_UNKNOWN, r);
        CHECK();
        xsa_sim_usage after = usage();
        assert_memory_equal(&before, &after, sizeof before);
        assert_ptr_equal(S3, out_s);
        assert_ptr_equal(S3, out_h);
        if (e == 4) OK(XSA_DRV(D, mem_host_register, m, page())); /* so that unregister has one */
    }
    OK(XSA_DRV(D, stream_query, s)); /* not destroyed */
    OK(XSA_DRV(D, mem_host_unregister, m));
    OK(XSA_DRV(D, mem_free_host, h));
    OK(XSA_DRV(D, stream_destroy, s));
    munmap(m, page());
}

/* Every entry point's calls are counted through XSA_DRV. */
static void test_call_counters(void **state) {
    (void)state;
    uint64_t calls[XSA_DRV_COUNT];
    char *m = fresh_pages(1);
    xsa_stream s = new_stream(0);
    void *h = host_alloc(8);
    OK(XSA_DRV(D, mem_host_register, m, page()));
    OK(XSA_DRV(D, mem_host_unregister, m));
    OK(XSA_DRV(D, mem_free_host, h));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_free_host, h));
    OK(XSA_DRV(D, stream_destroy, s));
    xsa_driver_read_calls(D, calls, NULL);
    assert_int_equal(1, calls[XSA_DRV_stream_create]);
    assert_int_equal(1, calls[XSA_DRV_stream_destroy]);
    assert_int_equal(1, calls[XSA_DRV_mem_host_alloc]);
    assert_int_equal(2, calls[XSA_DRV_mem_free_host]);
    assert_int_equal(1, calls[XSA_DRV_mem_host_register]);
    assert_int_equal(1, calls[XSA_DRV_mem_host_unregister]);
    assert_string_equal("memcpy_dtoh_async", xsa_driver_entry_name(XSA_DRV_memcpy_dtoh_async));
    assert_int_equal(XSA_DRV_mem_host_register, xsa_driver_entry_from_name("mem_host_register"));
    assert_non_null(strstr(D->error_string(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED),
                           "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"));
    assert_non_null(strstr(D->error_string(XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED),
                           "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"));
    munmap(m, page());
}

/* A created stream, a pinned allocation or a registration held keeps a
 * configuration out. */
static void test_configure_needs_nothing_held(void **state) {
    (void)state;
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = 64 * MiB;
    char *m = fresh_pages(1);
    for (int held = 0; held < 3; held++) {
        xsa_stream s = NULL;
        void *h = NULL;
        if (held == 0) s = new_stream(0);
        if (held == 1) h = host_alloc(64);
        if (held == 2) OK(XSA_DRV(D, mem_host_register, m, page()));
        assert_int_equal(XSA_CU_ERROR_NOT_PERMITTED, xsa_sim_configure(&c));
        if (held == 0) OK(XSA_DRV(D, stream_destroy, s));
        if (held == 1) OK(XSA_DRV(D, mem_free_host, h));
        if (held == 2) OK(XSA_DRV(D, mem_host_unregister, m));
        assert_int_equal(XSA_CU_SUCCESS, xsa_sim_configure(&c));
    }
    munmap(m, page());
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_stream_create),
        T(test_stream_destroy_and_stale_use),
        T(test_stream_destroy_with_queued_work),
        T(test_stream_destroy_while_capturing),
        T(test_host_alloc_free),
        T(test_host_register_unregister),
        T(test_host_calls_during_capture),
        T(test_fault_injection),
        T(test_call_counters),
        T(test_configure_needs_nothing_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
