/*
 * sim_copy_test: copies between device and host memory on the simulated
 * driver (memcpy_dtoh_async, memcpy_htod_async; xsalloc/sim.h): bytes
 * moved through pinned, registered and pageable memory, a copy as stream
 * work (bad launch, unmap while in flight, races either way, completion
 * on the timeline), copies in stream capture and their replay, fault
 * injection, and threads.
 *
 * Design: every case starts from a fresh configuration, runs xsa_sim_check
 * after each step and ends with nothing held and no kernel or copy
 * pending. Each rule is tested from both sides: the copy that must count
 * a violation and the nearest one that must not.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tests/sim/sim_gpu_fixture.h"
#include "xsalloc/sim.h"

#define VIOLATIONS(unmapped, races, bad, failed, ...) \
    expect_violations(unmapped, races, bad, failed, (const char *const[]){__VA_ARGS__, NULL})

static void *dev(xsa_devptr p) { return (void *)(uintptr_t)p; }

static size_t pending_copies(void) { return usage().pending_copies; }

static xsa_stream new_stream(void) {
    xsa_stream s = NULL;
    OK(XSA_DRV(D, stream_create, &s, 0));
    return s;
}

static unsigned char *host_alloc(size_t size) {
    void *h = NULL;
    OK(XSA_DRV(D, mem_host_alloc, &h, size));
    return h;
}

static void pattern(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed);
}

static void expect_pattern(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31u + seed)) fail_msg("byte %zu is %u, expected %u", i, p[i], (unsigned char)(i * 31u + seed));
}

/* ---- bytes ---------------------------------------------------------------------- */

/* Through pinned, registered and pageable host memory, on a created
 * stream, a made-up one and the legacy one: the bytes arrive, and each
 * copy is pending work until completed (manual mode). */
static void test_round_trip(void **state) {
    (void)state;
    mapping m = new_mapping(2);
    size_t n = 3 * MiB + 5;
    xsa_stream s = new_stream();
    unsigned char *pinned = host_alloc(n), *back = host_alloc(n);
    unsigned char *mm = mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mm != MAP_FAILED);
    OK(XSA_DRV(D, mem_host_register, mm, 4 * MiB));
    unsigned char *pageable = malloc(n);
    assert_non_null(pageable);
    pattern(pinned, n, 1);
    OK(XSA_DRV(D, memcpy_htod_async, m.va + 7, pinned, n, s));
    expect_pattern(dev(m.va + 7), n, 1);
    OK(XSA_DRV(D, memcpy_dtoh_async, back, m.va + 7, n, s));
    expect_pattern(back, n, 1);
    assert_int_equal(2, pending_copies());
    assert_int_equal(0, usage().pending_kernels);
    EXPECT(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, stream_query, s));
    OK(XSA_DRV(D, stream_synchronize, s));
    assert_int_equal(0, pending_copies());
    /* Registered memory, on a made-up stream. */
    pattern(mm, n, 2);
    OK(XSA_DRV(D, memcpy_htod_async, m.va, mm, n, S1));
    memset(mm, 0, n);
    OK(XSA_DRV(D, memcpy_dtoh_async, mm, m.va, n, S1));
    expect_pattern(mm, n, 2);
    OK(XSA_DRV(D, stream_synchronize, S1)); /* else the legacy stream's copies below race with these */
    /* Pageable memory, on the legacy stream. */
    pattern(pageable, n, 3);
    OK(XSA_DRV(D, memcpy_htod_async, m.va + GRAN, pageable, n - GRAN, NULL));
    memset(back, 0, n);
    OK(XSA_DRV(D, memcpy_dtoh_async, back, m.va + GRAN, n - GRAN, NULL));
    expect_pattern(back, n - GRAN, 3);
    assert_int_equal(2, pending_copies());
    /* Nothing to copy: success, nothing queued; no host pointer: refused. */
    OK(XSA_DRV(D, memcpy_dtoh_async, back, m.va, 0, s));
    OK(XSA_DRV(D, memcpy_htod_async, m.va, back, 0, s));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, memcpy_dtoh_async, NULL, m.va, 16, s));
    EXPECT(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, memcpy_htod_async, m.va, NULL, 16, s));
    assert_int_equal(2, pending_copies());
    NO_VIOLATION();
    xsa_sim_complete_all();
    free(pageable);
    OK(XSA_DRV(D, mem_host_unregister, mm));
    munmap(mm, 4 * MiB);
    OK(XSA_DRV(D, mem_free_host, pinned));
    OK(XSA_DRV(D, mem_free_host, back));
    OK(XSA_DRV(D, stream_destroy, s));
    drop_mapping(&m);
}

/* A cuMemAlloc allocation is device memory too. */
static void test_copy_classic_allocation(void **state) {
    (void)state;
    xsa_devptr p = 0;
    OK(XSA_DRV(D, mem_alloc, &p, MiB, 0));
    unsigned char *h = host_alloc(MiB);
    pattern(h, MiB, 9);
    OK(XSA_DRV(D, memcpy_htod_async, p, h, MiB, S1));
    expect_pattern(dev(p), MiB, 9);
    OK(XSA_DRV(D, stream_synchronize, S1));
    OK(XSA_DRV(D, mem_free, p));
    OK(XSA_DRV(D, mem_free_host, h));
    NO_VIOLATION();
}

/* ---- a copy is stream work ---------------------------------------------------------- */

/* Refused, counted, nothing queued and no byte moved. */
static void expect_bad_copy(int to_host, xsa_devptr p, size_t n, const char *addr) {
    static unsigned char host[4 * 4096];
    assert_true(n <= sizeof host);
    memset(host, 0x5a, sizeof host);
    size_t before = pending_copies();
    xsa_cu_result r = to_host ? XSA_DRV(D, memcpy_dtoh_async, host, p, n, S1)
                              : XSA_DRV(D, memcpy_htod_async, p, host, n, S1);
    assert_int_equal(XSA_CU_ERROR_ILLEGAL_ADDRESS, r);
    CHECK();
    VIOLATIONS(0, 0, 1, 0, to_host ? "a copy (cuMemcpyDtoHAsync)" : "a copy (cuMemcpyHtoDAsync)",
               "CUDA_ERROR_ILLEGAL_ADDRESS", addr);
    assert_int_equal(before, pending_copies());
    for (size_t i = 0; i < sizeof host; i++) assert_int_equal(0x5a, host[i]);
}

static void test_bad_copies(void **state) {
    (void)state;
    xsa_devptr va = reserve(3 * GRAN);
    xsa_mem_handle h = 0;
    OK(XSA_DRV(D, mem_create, &h, GRAN, 0, 0));
    char addr[32];
    snprintf(addr, sizeof addr, "%#llx", (unsigned long long)va);
    for (int to_host = 0; to_host < 2; to_host++) expect_bad_copy(to_host, va, 4096, addr); /* unmapped */
    OK(XSA_DRV(D, mem_map, va, GRAN, 0, h));
    for (int to_host = 0; to_host < 2; to_host++) expect_bad_copy(to_host, va, 4096, addr); /* no access */
    int d0 = 0;
    OK(XSA_DRV(D, mem_set_access, va, GRAN, &d0, 1));
    snprintf(addr, sizeof addr, "%#llx", (unsigned long long)(va + GRAN));
    for (int to_host = 0; to_host < 2; to_host++) expect_bad_copy(to_host, va + GRAN - 4096, 8192, addr); /* past it */
    static char not_device[4096];
    expect_bad_copy(1, (xsa_devptr)(uintptr_t)not_device, 64, "");
    /* The nearest good copy. */
    unsigned char *pinned = host_alloc(4096);
    OK(XSA_DRV(D, memcpy_dtoh_async, pinned, va + GRAN - 4096, 4096, S1));
    NO_VIOLATION();
    xsa_sim_complete_all();
    OK(XSA_DRV(D, mem_free_host, pinned));
    OK(XSA_DRV(D, mem_unmap, va, GRAN));
    OK(XSA_DRV(D, mem_release, h));
    OK(XSA_DRV(D, mem_address_free, va, 3 * GRAN));
}

/* Unmapping (or cuMemFree-ing) memory a copy still uses is the illegal
 * address the GPU gives; after the copy completed it is fine. */
static void test_unmap_under_copy(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(2);
    unsigned char *h = host_alloc(MiB);
    xsa_sim_tick(3);
    OK(XSA_DRV(D, memcpy_dtoh_async, h, m.va + GRAN, MiB, S1));
    OK(XSA_DRV(D, mem_unmap, m.va, m.size));
    char stream[32];
    snprintf(stream, sizeof stream, "stream %p", S1);
    VIOLATIONS(1, 0, 0, 0, "cuMemUnmap", "while a copy queued at tick 3", stream, "illegal address an H100 gives");
    map_at(m.va, m.size, m.h);
    OK(XSA_DRV(D, memcpy_htod_async, m.va, h, MiB, S1));
    xsa_sim_tick(LAG);
    CHECK();
    assert_int_equal(0, pending_copies());
    OK(XSA_DRV(D, mem_unmap, m.va, m.size));
    NO_VIOLATION();
    OK(XSA_DRV(D, mem_release, m.h));
    OK(XSA_DRV(D, mem_address_free, m.va, m.size));
    xsa_devptr p = 0;
    OK(XSA_DRV(D, mem_alloc, &p, MiB, 0));
    OK(XSA_DRV(D, memcpy_htod_async, p, h, MiB, S2));
    OK(XSA_DRV(D, mem_free, p));
    VIOLATIONS(1, 0, 0, 0, "cuMemFree", "a copy");
    OK(XSA_DRV(D, mem_free_host, h));
    xsa_sim_complete_all();
}

/* A copy and a kernel (or two copies) on unordered streams over the same
 * bytes race, either way round; ordered by an event, or apart, they do not. */
static void test_copy_races(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    xsa_stream s = new_stream();
    unsigned char *h = host_alloc(MiB);
    xsa_event after = new_event();
    launch(S1, m.va, MiB);
    OK(XSA_DRV(D, memcpy_dtoh_async, h, m.va + MiB, MiB, s)); /* other bytes */
    NO_VIOLATION();
    OK(XSA_DRV(D, memcpy_dtoh_async, h, m.va + MiB - 1, 2, s));
    VIOLATIONS(0, 1, 0, 0, "race: a copy queued", "while a kernel queued");
    OK(XSA_DRV(D, event_record, after, S1));
    OK(XSA_DRV(D, stream_wait_event, S2, after));
    OK(XSA_DRV(D, memcpy_htod_async, m.va, h, MiB, S2)); /* after S1's kernel, but not after s's copies */
    VIOLATIONS(0, 1, 0, 0, "race: a copy queued", "while a copy queued");
    xsa_sim_tick(LAG);
    CHECK();
    OK(XSA_DRV(D, memcpy_dtoh_async, h, m.va, MiB, s));
    launch(S3, m.va + 4096, 4096);
    VIOLATIONS(0, 1, 0, 0, "race: a kernel queued", "while a copy queued");
    OK(XSA_DRV(D, event_record, after, s));
    OK(XSA_DRV(D, stream_wait_event, S1, after));
    launch(S1, m.va, 4096); /* ordered after s's copy (and S3's kernel is elsewhere) */
    NO_VIOLATION();
    xsa_sim_complete_all();
    OK(XSA_DRV(D, event_destroy, after));
    OK(XSA_DRV(D, mem_free_host, h));
    OK(XSA_DRV(D, stream_destroy, s));
    drop_mapping(&m);
}

/* On the timeline a copy completes `lag` ticks after it is queued, in
 * order with its stream's work; a synchronize moves the clock to it; lag
 * 0 completes it at once. */
static void test_copy_completion(void **state) {
    (void)state;
    xsa_sim_set_gpu_lag(LAG);
    mapping m = new_mapping(1);
    unsigned char *h = host_alloc(4096);
    xsa_stream s = new_stream();
    xsa_event e = new_event();
    OK(XSA_DRV(D, memcpy_dtoh_async, h, m.va, 4096, s));
    OK(XSA_DRV(D, event_record, e, s));
    xsa_sim_tick(LAG - 1);
    EXPECT(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, e));
    assert_int_equal(1, pending_copies());
    xsa_sim_tick(1);
    OK(XSA_DRV(D, event_query, e));
    assert_int_equal(0, pending_copies());
    OK(XSA_DRV(D, memcpy_htod_async, m.va, h, 4096, s));
    OK(XSA_DRV(D, stream_synchronize, s));
    assert_int_equal(2 * LAG, xsa_sim_now());
    xsa_sim_set_gpu_lag(0);
    OK(XSA_DRV(D, memcpy_htod_async, m.va, h, 4096, s));
    assert_int_equal(0, pending_copies());
    NO_VIOLATION();
    OK(XSA_DRV(D, event_destroy, e));
    OK(XSA_DRV(D, stream_destroy, s));
    OK(XSA_DRV(D, mem_free_host, h));
    drop_mapping(&m);
}

/* ---- capture ------------------------------------------------------------------------- */

/* With pinned host memory a copy is a node: nothing moves or is queued
 * at capture; each replay copies (in node order, on the launch stream)
 * and is work an unmap must wait for. */
static void test_copy_captured_and_replayed(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    xsa_stream s = new_stream();
    unsigned char *in = host_alloc(8192), *out = host_alloc(8192);
    pattern(in, 8192, 4);
    memset(out, 0, 8192);
    OK(XSA_DRV(D, stream_begin_capture, s));
    OK(XSA_DRV(D, memcpy_htod_async, m.va, in, 8192, s));
    launch(s, m.va, 8192);
    OK(XSA_DRV(D, memcpy_dtoh_async, out, m.va, 8192, s));
    assert_int_equal(0, pending_copies());
    assert_int_equal(0, out[1]);
    assert_int_not_equal(in[1], ((unsigned char *)dev(m.va))[1]);
    xsa_graph g = NULL;
    OK(XSA_DRV(D, stream_end_capture, s, &g));
    xsa_graph_exec x = NULL;
    OK(XSA_DRV(D, graph_instantiate, &x, g));
    xsa_sim_range r[4];
    assert_int_equal(3, xsa_sim_graph_exec_ranges(x, r, 4));
    for (int i = 0; i < 3; i++) assert_true(r[i].ptr == m.va && r[i].size == 8192);
    OK(XSA_DRV(D, graph_launch, x, S2));
    expect_pattern(out, 8192, 4);
    assert_int_equal(2, pending_copies());
    assert_int_equal(1, usage().pending_kernels);
    OK(XSA_DRV(D, mem_unmap, m.va, m.size));
    VIOLATIONS(1, 0, 0, 0, "cuMemUnmap", "a copy");
    map_at(m.va, m.size, m.h);
    xsa_sim_complete_all();
    /* Host memory freed since the capture: that node is a bad launch,
     * the others still run. */
    OK(XSA_DRV(D, mem_free_host, out));
    EXPECT(XSA_CU_ERROR_ILLEGAL_ADDRESS, XSA_DRV(D, graph_launch, x, S2));
    VIOLATIONS(0, 0, 1, 0, "a copy node (cuMemcpyDtoHAsync) replayed", "no longer pinned");
    assert_int_equal(1, pending_copies());
    xsa_sim_complete_all();
    OK(XSA_DRV(D, graph_exec_destroy, x));
    OK(XSA_DRV(D, graph_destroy, g));
    OK(XSA_DRV(D, mem_free_host, in));
    OK(XSA_DRV(D, stream_destroy, s));
    drop_mapping(&m);
}

/* Registered memory captures too; pageable memory is refused and
 * invalidates the capture; an invalidated capture refuses later copies. */
static void test_copy_capture_needs_pinned_memory(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    unsigned char *mm = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mm != MAP_FAILED);
    unsigned char *pinned = host_alloc(4096);
    OK(XSA_DRV(D, mem_host_register, mm, 4096));
    OK(XSA_DRV(D, stream_begin_capture, S1));
    OK(XSA_DRV(D, memcpy_dtoh_async, mm, m.va, 4096, S1));
    NO_VIOLATION();
    xsa_graph g = NULL;
    OK(XSA_DRV(D, stream_end_capture, S1, &g));
    OK(XSA_DRV(D, graph_destroy, g));
    for (int how = 0; how < 3; how++) { /* past the registration; past the allocation; plain pageable */
        unsigned char *h = how == 0 ? mm + 4096 - 8 : how == 1 ? pinned + 4096 - 8 : mm + 4096;
        OK(XSA_DRV(D, stream_begin_capture, S1));
        EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED, XSA_DRV(D, memcpy_dtoh_async, h, m.va, 16, S1));
        VIOLATIONS(0, 0, 0, 1, "cuMemcpyDtoHAsync with pageable host memory");
        EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, XSA_DRV(D, memcpy_htod_async, m.va, pinned, 16, S1));
        EXPECT(XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED, XSA_DRV(D, stream_end_capture, S1, &g));
        assert_null(g);
    }
    assert_int_equal(0, pending_copies());
    OK(XSA_DRV(D, mem_host_unregister, mm));
    munmap(mm, 8192);
    OK(XSA_DRV(D, mem_free_host, pinned));
    drop_mapping(&m);
}

/* ---- faults and threads -------------------------------------------------------------- */

/* An injected fault moves no byte and queues nothing. */
static void test_copy_faults(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    unsigned char *h = host_alloc(4096);
    memset(dev(m.va), 1, 4096);
    memset(h, 2, 4096);
    xsa_sim_fail_call(XSA_DRV_memcpy_dtoh_async, 1, XSA_CU_ERROR_UNKNOWN);
    xsa_sim_fail_call(XSA_DRV_memcpy_htod_async, 1, XSA_CU_ERROR_OUT_OF_MEMORY);
    EXPECT(XSA_CU_ERROR_UNKNOWN, XSA_DRV(D, memcpy_dtoh_async, h, m.va, 4096, S1));
    EXPECT(XSA_CU_ERROR_OUT_OF_MEMORY, XSA_DRV(D, memcpy_htod_async, m.va, h, 4096, S1));
    assert_int_equal(0, pending_copies());
    assert_int_equal(2, h[0]);
    assert_int_equal(1, ((unsigned char *)dev(m.va))[0]);
    OK(XSA_DRV(D, memcpy_dtoh_async, h, m.va, 4096, S1));
    assert_int_equal(1, h[4095]);
    uint64_t calls[XSA_DRV_COUNT];
    xsa_driver_read_calls(D, calls, NULL);
    assert_int_equal(2, calls[XSA_DRV_memcpy_dtoh_async]);
    assert_int_equal(1, calls[XSA_DRV_memcpy_htod_async]);
    xsa_sim_complete_all();
    OK(XSA_DRV(D, mem_free_host, h));
    drop_mapping(&m);
}

/* Threads each make a stream and pinned memory and copy their own bytes
 * back and forth; the checker runs as they go. */
enum { THREADS = 4, ROUNDS = 30, SLICE = 64 * 1024 };

static xsa_devptr shared_va;

static void *copy_worker(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    xsa_stream s = NULL;
    void *h = NULL, *back = NULL;
    bool ok = XSA_DRV(D, stream_create, &s, 0) == XSA_CU_SUCCESS && XSA_DRV(D, mem_host_alloc, &h, SLICE) == XSA_CU_SUCCESS &&
              XSA_DRV(D, mem_host_alloc, &back, SLICE) == XSA_CU_SUCCESS;
    xsa_devptr mine = shared_va + id * SLICE;
    for (int i = 0; ok && i < ROUNDS; i++) {
        memset(h, (int)(id * ROUNDS + (uintptr_t)i), SLICE);
        ok = XSA_DRV(D, memcpy_htod_async, mine, h, SLICE, s) == XSA_CU_SUCCESS &&
             XSA_DRV(D, memcpy_dtoh_async, back, mine, SLICE, s) == XSA_CU_SUCCESS &&
             XSA_DRV(D, stream_synchronize, s) == XSA_CU_SUCCESS && memcmp(h, back, SLICE) == 0 &&
             xsa_sim_check(NULL, 0);
    }
    ok = ok && XSA_DRV(D, mem_free_host, h) == XSA_CU_SUCCESS && XSA_DRV(D, mem_free_host, back) == XSA_CU_SUCCESS &&
         XSA_DRV(D, stream_destroy, s) == XSA_CU_SUCCESS;
    return (void *)(uintptr_t)ok;
}

static void test_threads(void **state) {
    (void)state;
    mapping m = new_mapping(1);
    shared_va = m.va;
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) assert_int_equal(0, pthread_create(&t[i], NULL, copy_worker, (void *)i));
    for (int i = 0; i < THREADS; i++) {
        void *ok = NULL;
        assert_int_equal(0, pthread_join(t[i], &ok));
        assert_true(ok != NULL);
    }
    NO_VIOLATION();
    drop_mapping(&m);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_round_trip),
        T(test_copy_classic_allocation),
        T(test_bad_copies),
        T(test_unmap_under_copy),
        T(test_copy_races),
        T(test_copy_completion),
        T(test_copy_captured_and_replayed),
        T(test_copy_capture_needs_pinned_memory),
        T(test_copy_faults),
        T(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
