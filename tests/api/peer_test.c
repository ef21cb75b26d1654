/*
 * peer_test: peer access between simulated devices through the public API:
 * grants on pages mapped before and after xsa_enable_peer_access (growth,
 * new segments, recycled pages), refusals naming both devices (peer matrix,
 * classic segments), peer_access:True, a driver failure part-way and its
 * retry. The simulated driver's per-page access bits are the ground truth;
 * invariants are checked after each step.
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
#define PAGE (2 * MiB)
#define DEV(d) (1u << (d))

static void *const S0 = NULL;
static void *const S1 = (void *)0x1001;

/* Three devices; device 2 cannot access device 0's memory. */
static void sim_three_devices(void) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.devices = 3;
    c.capacity = 1 * GiB;
    c.eager_events = 1;
    c.peer[2][0] = 0;
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
}

static int setup(void **state) {
    (void)state;
    xsa_shutdown();
    sim_three_devices();
    assert_int_equal(xsa_use_driver("sim"), XSA_SUCCESS);
    unsetenv("XSALLOC_CONF");
    return 0;
}


static void *alloc(size_t size, int device, void *stream) {
    void *p = NULL;
    OK(xsa_malloc(&p, size, device, stream));
    return p;
}

/* Every page under [p, p+size) grants exactly `bits`. */
static void assert_access(void *p, size_t size, unsigned bits) {
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(PAGE - 1);
    for (; a < (uintptr_t)p + size; a += PAGE)
        if (xsa_sim_page_access(a) != bits)
            fail_msg("page %#lx grants %#x, want %#x", (unsigned long)a, xsa_sim_page_access(a), bits);
}

static void test_peer_access_now_and_on_grow(void **state) {
    (void)state;
    OK(xsa_init("page_recycling:False"));
    void *small = alloc(1000, 0, S0), *big = alloc(6 * MiB, 0, S0);
    assert_access(big, 6 * MiB, DEV(0));
    assert_access(small, 1000, DEV(0));
    OK(xsa_enable_peer_access(0, 1));
    INVARIANTS(0);
    /* Pages mapped before: both segments (small and large pool). */
    assert_access(big, 6 * MiB, DEV(0) | DEV(1));
    assert_access(small, 1000, DEV(0) | DEV(1));
    /* Growth of an existing segment, and a new segment on another stream. */
    void *grown = alloc(10 * MiB, 0, S0), *other = alloc(4 * MiB, 0, S1);
    assert_access(grown, 10 * MiB, DEV(0) | DEV(1));
    assert_access(other, 4 * MiB, DEV(0) | DEV(1));
    INVARIANTS(0);
    /* Idempotent, self is a no-op, other devices are unaffected. */
    OK(xsa_enable_peer_access(0, 1));
    OK(xsa_enable_peer_access(0, 0));
    void *on1 = alloc(4 * MiB, 1, S0);
    assert_access(on1, 4 * MiB, DEV(1));
    /* After empty_cache unmapped everything free, new pages get it too. */
    OK(xsa_free(grown));
    OK(xsa_free(other));
    OK(xsa_empty_cache());
    void *again = alloc(8 * MiB, 0, S1);
    assert_access(again, 8 * MiB, DEV(0) | DEV(1));
    INVARIANTS(0);
    INVARIANTS(1);
    OK(xsa_free(small));
    OK(xsa_free(big));
    OK(xsa_free(again));
    OK(xsa_free(on1));
}

static void test_recycled_pages_keep_peer_access(void **state) {
    (void)state;
    OK(xsa_init("page_recycling:True"));
    OK(xsa_enable_peer_access(0, 1));
    void *a = alloc(8 * MiB, 0, S0), *keep = alloc(2 * MiB, 0, S0);
    OK(xsa_free(a));
    xsa_device_stats before, after;
    OK(xsa_get_stats(0, &before));
    void *b = alloc(8 * MiB, 0, S1); /* takes a's free pages */
    OK(xsa_get_stats(0, &after));
    assert_true(after.num_pages_recycled > before.num_pages_recycled);
    assert_access(b, 8 * MiB, DEV(0) | DEV(1));
    INVARIANTS(0);
    OK(xsa_free(b));
    OK(xsa_free(keep));
}

static void test_refused_when_hardware_cannot(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *p = alloc(4 * MiB, 0, S0);
    assert_int_equal(xsa_enable_peer_access(0, 2), XSA_ERROR_NOT_SUPPORTED);
    const char *e = xsa_last_error();
    if (!strstr(e, "device 2") || !strstr(e, "device 0") || !strstr(e, "cuDeviceCanAccessPeer"))
        fail_msg("message does not name both devices and the reason: %s", e);
    assert_access(p, 4 * MiB, DEV(0)); /* nothing granted */
    /* The other direction is allowed by the matrix. */
    OK(xsa_enable_peer_access(2, 0));
    void *q = alloc(2 * MiB, 2, S0);
    assert_access(q, 2 * MiB, DEV(2) | DEV(0));
    assert_int_equal(xsa_enable_peer_access(0, 3), XSA_ERROR_INVALID_DEVICE);
    assert_int_equal(xsa_enable_peer_access(-1, 0), XSA_ERROR_INVALID_DEVICE);
    INVARIANTS(0);
    INVARIANTS(2);
    OK(xsa_free(p));
    OK(xsa_free(q));
}

static void test_classic_segments_refused(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:False"));
    assert_int_equal(xsa_enable_peer_access(0, 1), XSA_ERROR_NOT_SUPPORTED);
    const char *e = xsa_last_error();
    if (!strstr(e, "classic") || !strstr(e, "device 0") || !strstr(e, "device 1"))
        fail_msg("message does not explain classic segments: %s", e);
}

static void test_peer_access_config_grants_every_capable_peer(void **state) {
    (void)state;
    OK(xsa_init("peer_access:True"));
    void *on0 = alloc(4 * MiB, 0, S0), *on1 = alloc(4 * MiB, 1, S0), *on2 = alloc(4 * MiB, 2, S0);
    assert_access(on0, 4 * MiB, DEV(0) | DEV(1)); /* device 2 cannot */
    assert_access(on1, 4 * MiB, DEV(0) | DEV(1) | DEV(2));
    assert_access(on2, 4 * MiB, DEV(0) | DEV(1) | DEV(2));
    /* The one the hardware cannot do is still refused when asked for. */
    assert_int_equal(xsa_enable_peer_access(0, 2), XSA_ERROR_NOT_SUPPORTED);
    for (int d = 0; d < 3; d++) INVARIANTS(d);
    OK(xsa_free(on0));
    OK(xsa_free(on1));
    OK(xsa_free(on2));
}

static void test_driver_failure_then_retry(void **state) {
    (void)state;
    OK(xsa_init("page_recycling:False"));
    void *a = alloc(4 * MiB, 0, S0), *b = alloc(4 * MiB, 0, S1);
    xsa_sim_fail_call(XSA_DRV_mem_set_access, 2, XSA_CU_ERROR_UNKNOWN); /* the second segment */
    assert_int_equal(xsa_enable_peer_access(0, 1), XSA_ERROR_DRIVER);
    assert_non_null(strstr(xsa_last_error(), "cuMemSetAccess"));
    INVARIANTS(0);
    /* Not recorded: new pages do not get it yet. */
    void *c = alloc(2 * MiB, 0, (void *)0x2002);
    assert_access(c, 2 * MiB, DEV(0));
    OK(xsa_enable_peer_access(0, 1));
    assert_access(a, 4 * MiB, DEV(0) | DEV(1));
    assert_access(b, 4 * MiB, DEV(0) | DEV(1));
    assert_access(c, 2 * MiB, DEV(0) | DEV(1));
    INVARIANTS(0);
    OK(xsa_free(a));
    OK(xsa_free(b));
    OK(xsa_free(c));
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, xsa_fixture_teardown)
        T(test_peer_access_now_and_on_grow),
        T(test_recycled_pages_keep_peer_access),
        T(test_refused_when_hardware_cannot),
        T(test_classic_segments_refused),
        T(test_peer_access_config_grants_every_capable_peer),
        T(test_driver_failure_then_retry),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
