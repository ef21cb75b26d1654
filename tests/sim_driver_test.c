/*
 * sim_driver_test: the simulated driver reproduces the CUDA driver's rules.
 *
 * Design: every case starts from a fresh configuration (small capacities so
 * that out-of-memory is cheap to reach), calls xsa_sim_check after each step
 * and ends with every usage counter back at zero (teardown). Faults that must
 * happen (use after unmap, access before cuMemSetAccess, use after free) are
 * provoked in a fork()ed child, which must die with SIGSEGV; a control child
 * reading valid memory must exit normally, so the harness itself can fail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/sim.h"

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)

static xsa_driver *D;

static void check_sim(const char *file, int line) {
    char err[256] = "";
    if (!xsa_sim_check(err, sizeof err)) fail_msg("%s:%d: xsa_sim_check: %s", file, line, err);
}
#define CHECK() check_sim(__FILE__, __LINE__)
#define OK(call) assert_int_equal(XSA_CU_SUCCESS, (call))
/* A call that must fail with `err`, leaving the simulator consistent. */
#define FAILS(err, call)                                                       \
    do {                                                                       \
        assert_int_equal((err), (call));                                       \
        CHECK();                                                               \
    } while (0)

static void configure(int devices, size_t capacity) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.devices = devices;
    c.capacity = capacity;
    OK(xsa_sim_configure(&c));
}

static int setup(void **state) {
    (void)state;
    D = xsa_driver_sim();
    configure(1, 64 * MiB);
    return 0;
}

static void assert_usage_zero(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    assert_int_equal(0, u.handles);
    assert_int_equal(0, u.handle_bytes);
    assert_int_equal(0, u.mapped_bytes);
    assert_int_equal(0, u.reservations);
    assert_int_equal(0, u.reserved_bytes);
    assert_int_equal(0, u.mem_allocs);
    assert_int_equal(0, u.mem_alloc_bytes);
    assert_int_equal(0, u.events);
    assert_int_equal(0, u.pending_events);
    for (int d = 0; d < XSA_SIM_MAX_DEVICES; d++) assert_int_equal(0, u.device_used[d]);
}

static int teardown(void **state) {
    (void)state;
    CHECK();
    assert_usage_zero();
    xsa_sim_clear_faults();
    return 0;
}

static xsa_sim_usage usage(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    return u;
}

static size_t free_mem(int device) {
    size_t f = 0, t = 0;
    OK(XSA_DRV(D, mem_get_info, device, &f, &t));
    return f;
}

static xsa_devptr reserve(size_t size) {
    xsa_devptr p = 0;
    OK(XSA_DRV(D, mem_address_reserve, &p, size, 0));
    CHECK();
    return p;
}

static xsa_mem_handle create(size_t size, int device) {
    xsa_mem_handle h = 0;
    OK(XSA_DRV(D, mem_create, &h, size, device, 0));
    assert_true(h != 0);
    CHECK();
    return h;
}

/* Maps the handle at p and grants `device` access. */
static void map_rw(xsa_devptr p, size_t size, xsa_mem_handle h, int device) {
    OK(XSA_DRV(D, mem_map, p, size, 0, h));
    CHECK();
    OK(XSA_DRV(D, mem_set_access, p, size, &device, 1));
    CHECK();
}

static void fill(xsa_devptr p, size_t size, unsigned char seed) {
    unsigned char *b = (unsigned char *)(uintptr_t)p;
    for (size_t i = 0; i < size; i += 4096) b[i] = (unsigned char)(seed + i / 4096);
}

static void assert_filled(xsa_devptr p, size_t size, unsigned char seed) {
    const unsigned char *b = (const unsigned char *)(uintptr_t)p;
    for (size_t i = 0; i < size; i += 4096) assert_int_equal((unsigned char)(seed + i / 4096), b[i]);
}

/* ---- forked children ------------------------------------------------------ */

/* Runs fn(arg) in a child with the default SIGSEGV action (sanitizers install
 * their own) and returns its wait status. */
static int in_child(int (*fn)(void *), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        _exit(fn(arg));
    }
    int status = 0;
    assert_int_equal(pid, waitpid(pid, &status, 0));
    return status;
}

static int read_byte(void *arg) {
    volatile unsigned char *b = arg;
    return b[0] == 0xEE ? 3 : 0; /* any value: reaching here means no fault */
}

static void assert_faults(xsa_devptr p) {
    int st = in_child(read_byte, (void *)(uintptr_t)p);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
        fail_msg("reading %#llx did not fault (status %#x)", (unsigned long long)p, st);
}

static void assert_readable(xsa_devptr p) {
    int st = in_child(read_byte, (void *)(uintptr_t)p);
    if (!WIFEXITED(st)) fail_msg("reading %#llx killed the child (status %#x)", (unsigned long long)p, st);
}

/* Whether any host mapping covers address p. */
static bool host_mapped(xsa_devptr p) {
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long lo = 0, hi = 0;
        found = sscanf(line, "%llx-%llx", &lo, &hi) == 2 && p >= lo && p < hi;
    }
    fclose(f);
    return found;
}

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
    /* Error codes as the H100's driver 580 gives them (tests/gpu/driver_probe.c). */
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

#define S1 ((xsa_stream)0x1000)
#define S2 ((xsa_stream)0x2000)

static xsa_event new_event(void) {
    xsa_event e = NULL;
    OK(XSA_DRV(D, event_create, &e, 0));
    assert_non_null(e);
    CHECK();
    return e;
}

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

/* ---- the H100 cost estimate ------------------------------------------------------ */

#define US 1000u /* the estimate counts nanoseconds */

/* The estimate added since *mark, which moves to now. */
static uint64_t est_since(uint64_t *mark) {
    uint64_t now = xsa_sim_h100_est_ns(), added = now - *mark;
    *mark = now;
    return added;
}

/* The driver's cost goes by handle mapping: a grant or an unmap over ten
 * one-page handles costs ten times one over a ten-page handle. */
static void test_h100_estimate(void **state) {
    (void)state;
    int dev = 0;
    xsa_devptr p = reserve(20 * GRAN);
    uint64_t mark = 0;
    assert_int_equal(0, est_since(&mark)); /* a reservation is not in the model */
    xsa_mem_handle one[10];
    for (int i = 0; i < 10; i++) {
        one[i] = create(GRAN, 0);
        OK(XSA_DRV(D, mem_map, p + i * GRAN, GRAN, 0, one[i]));
    }
    OK(XSA_DRV(D, mem_set_access, p, 10 * GRAN, &dev, 1));
    assert_int_equal(10 * 15 * US + 10 * 2 * US + 10 * 34 * US, est_since(&mark));
    xsa_mem_handle ten = create(10 * GRAN, 0);
    map_rw(p + 10 * GRAN, 10 * GRAN, ten, 0);
    assert_int_equal(15 * US + 2 * US + 34 * US, est_since(&mark));
    /* Granted again: 0.5 us a mapping, over one or both layouts. */
    OK(XSA_DRV(D, mem_set_access, p, 10 * GRAN, &dev, 1));
    assert_int_equal(10 * US / 2, est_since(&mark));
    OK(XSA_DRV(D, mem_set_access, p + 10 * GRAN, 10 * GRAN, &dev, 1));
    assert_int_equal(US / 2, est_since(&mark));
    OK(XSA_DRV(D, mem_set_access, p + 8 * GRAN, 4 * GRAN, &dev, 1));
    assert_int_equal(3 * US / 2, est_since(&mark));
    /* A refused call pays its cost a call, not by mapping; an injected
     * fault pays nothing. */
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, GRAN, GRAN, ten));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p + 10 * GRAN, GRAN));
    assert_int_equal(2 * US, est_since(&mark));
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_UNKNOWN);
    FAILS(XSA_CU_ERROR_UNKNOWN, XSA_DRV(D, mem_unmap, p, 10 * GRAN));
    assert_int_equal(0, est_since(&mark));
    /* One unmap over the ten one-page mappings costs as ten unmaps. */
    OK(XSA_DRV(D, mem_unmap, p, 10 * GRAN));
    assert_int_equal(10 * 25 * US, est_since(&mark));
    OK(XSA_DRV(D, mem_unmap, p + 10 * GRAN, 10 * GRAN));
    assert_int_equal(25 * US, est_since(&mark));
    for (int i = 0; i < 10; i++) OK(XSA_DRV(D, mem_release, one[i]));
    OK(XSA_DRV(D, mem_release, ten));
    OK(XSA_DRV(D, mem_address_free, p, 20 * GRAN));
    assert_int_equal(11 * US, est_since(&mark));
    /* Events: 1 us a record, a query (ready or not) and a stream wait. */
    xsa_event e = new_event();
    OK(XSA_DRV(D, event_record, e, S1));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, stream_wait_event, S2, e));
    xsa_sim_complete_all();
    OK(XSA_DRV(D, event_destroy, e));
    assert_int_equal(3 * US, est_since(&mark));
    /* Another device granted on mappings the first has: not yet accessible. */
    configure(2, 64 * MiB);
    assert_int_equal(0, xsa_sim_h100_est_ns());
    p = reserve(2 * GRAN);
    one[0] = create(GRAN, 0);
    one[1] = create(GRAN, 0);
    OK(XSA_DRV(D, mem_map, p, GRAN, 0, one[0]));
    OK(XSA_DRV(D, mem_map, p + GRAN, GRAN, 0, one[1]));
    OK(XSA_DRV(D, mem_set_access, p, 2 * GRAN, &dev, 1));
    mark = xsa_sim_h100_est_ns();
    int both[2] = {0, 1};
    OK(XSA_DRV(D, mem_set_access, p, 2 * GRAN, both, 2));
    OK(XSA_DRV(D, mem_set_access, p, 2 * GRAN, &both[1], 1));
    assert_int_equal(2 * 34 * US + 2 * US / 2, est_since(&mark));
    OK(XSA_DRV(D, mem_unmap, p, 2 * GRAN));
    OK(XSA_DRV(D, mem_release, one[0]));
    OK(XSA_DRV(D, mem_release, one[1]));
    OK(XSA_DRV(D, mem_address_free, p, 2 * GRAN));
}

/* ---- several devices ----------------------------------------------------------- */

static void test_peer_matrix(void **state) {
    (void)state;
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.devices = 2;
    c.capacity = 16 * MiB;
    c.peer[1][0] = 0; /* device 1 cannot reach device 0's memory */
    OK(xsa_sim_configure(&c));
    int n = 0, can = -1;
    OK(XSA_DRV(D, device_get_count, &n));
    assert_int_equal(2, n);
    int expect[2][2] = {{0, 1}, {0, 0}};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            OK(XSA_DRV(D, device_can_access_peer, &can, a, b));
            assert_int_equal(expect[a][b], can);
        }
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, device_can_access_peer, &can, 0, 2));
    xsa_devptr p = reserve(4 * GRAN);
    xsa_mem_handle h0 = create(GRAN, 0), h1 = create(2 * GRAN, 1);
    assert_int_equal(14 * MiB, free_mem(0));
    assert_int_equal(12 * MiB, free_mem(1));
    OK(XSA_DRV(D, mem_map, p, GRAN, 0, h0));
    OK(XSA_DRV(D, mem_map, p + GRAN, 2 * GRAN, 0, h1));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_set_access, p, GRAN, (int[]){0, 1}, 2));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_set_access, p, 3 * GRAN, (int[]){1}, 1));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_set_access, p, GRAN, (int[]){0, 2}, 2));
    assert_faults(p);
    assert_faults(p + GRAN);
    OK(XSA_DRV(D, mem_set_access, p + GRAN, 2 * GRAN, (int[]){0, 1}, 2));
    OK(XSA_DRV(D, mem_set_access, p, 3 * GRAN, (int[]){0}, 1));
    CHECK();
    fill(p, 3 * GRAN, 11);
    assert_filled(p, 3 * GRAN, 11);
    OK(XSA_DRV(D, mem_unmap, p, 3 * GRAN));
    OK(XSA_DRV(D, mem_release, h0));
    OK(XSA_DRV(D, mem_release, h1));
    OK(XSA_DRV(D, mem_address_free, p, 4 * GRAN));
    assert_int_equal(16 * MiB, free_mem(1));
}

/* ---- exportable handles ---------------------------------------------------------- */

struct shared_read {
    int fd;
    size_t size;
};

static int read_exported(void *arg) {
    struct shared_read *s = arg;
    unsigned char *m = mmap(NULL, s->size, PROT_READ, MAP_SHARED, s->fd, 0);
    if (m == MAP_FAILED) return 2;
    for (size_t i = 0; i < s->size; i += 4096)
        if (m[i] != (unsigned char)(42 + i / 4096)) return 1;
    return 0;
}

static void test_exportable(void **state) {
    (void)state;
    xsa_devptr p = reserve(2 * GRAN);
    xsa_mem_handle h = 0, plain = create(GRAN, 0);
    OK(XSA_DRV(D, mem_create, &h, 2 * GRAN, 0, 1));
    CHECK();
    map_rw(p, 2 * GRAN, h, 0);
    fill(p, 2 * GRAN, 42);
    int fd = -1;
    OK(XSA_DRV(D, mem_export_fd, &fd, h));
    assert_true(fd >= 0);
    struct shared_read s = {fd, 2 * GRAN};
    int st = in_child(read_exported, &s);
    assert_true(WIFEXITED(st));
    assert_int_equal(0, WEXITSTATUS(st));
    close(fd);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_export_fd, &fd, plain));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_export_fd, &fd, 0));
    OK(XSA_DRV(D, mem_unmap, p, 2 * GRAN));
    OK(XSA_DRV(D, mem_release, h));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_export_fd, &fd, h));
    OK(XSA_DRV(D, mem_release, plain));
    OK(XSA_DRV(D, mem_address_free, p, 2 * GRAN));
    /* Without POSIX fd support exportable handles are refused. */
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.fd_handles_supported = 0;
    OK(xsa_sim_configure(&c));
    int v = -1;
    OK(XSA_DRV(D, device_get_attribute, &v, XSA_ATTR_POSIX_FD_SUPPORTED, 0));
    assert_int_equal(0, v);
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_create, &h, GRAN, 0, 1));
}

/* An exported fd imported as a second handle: the same memory, counted
 * once, mapped and granted on its own; page access bits are readable. */
static void test_import_fd(void **state) {
    (void)state;
    configure(2, 64 * MiB);
    xsa_devptr p = reserve(2 * GRAN), q = reserve(2 * GRAN);
    xsa_mem_handle h = 0, imported = 0;
    OK(XSA_DRV(D, mem_create, &h, 2 * GRAN, 0, 1));
    map_rw(p, 2 * GRAN, h, 0);
    assert_int_equal(1u, xsa_sim_page_access(p + GRAN));
    int fd = -1;
    OK(XSA_DRV(D, mem_export_fd, &fd, h));
    OK(XSA_DRV(D, mem_import_fd, &imported, fd, 1));
    close(fd); /* the handle keeps its own reference */
    CHECK();
    assert_int_equal(2, usage().handles);
    assert_int_equal(2 * GRAN, usage().handle_bytes);
    assert_int_equal(64 * MiB - 2 * GRAN, free_mem(0));
    assert_int_equal(64 * MiB, free_mem(1));
    map_rw(q, 2 * GRAN, imported, 1);
    assert_int_equal(2u, xsa_sim_page_access(q));
    fill(p, 2 * GRAN, 77);
    assert_filled(q, 2 * GRAN, 77);
    /* Peer access on the importing side follows the peer matrix too. */
    int both[] = {0, 1};
    OK(XSA_DRV(D, mem_set_access, q, 2 * GRAN, both, 2));
    assert_int_equal(3u, xsa_sim_page_access(q + GRAN));
    assert_int_equal(0u, xsa_sim_page_access(q + 2 * GRAN)); /* past the reservation */
    OK(XSA_DRV(D, mem_unmap, p, 2 * GRAN));
    OK(XSA_DRV(D, mem_release, h));
    assert_int_equal(0u, xsa_sim_page_access(p));
    assert_filled(q, 2 * GRAN, 77); /* the import keeps the memory */
    OK(XSA_DRV(D, mem_unmap, q, 2 * GRAN));
    OK(XSA_DRV(D, mem_release, imported));
    OK(XSA_DRV(D, mem_address_free, p, 2 * GRAN));
    OK(XSA_DRV(D, mem_address_free, q, 2 * GRAN));
    /* Not an exported handle's fd. */
    int devnull = open("/dev/null", O_RDONLY);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_import_fd, &imported, devnull, 0));
    close(devnull);
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_import_fd, &imported, -1, 0));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_import_fd, NULL, 0, 0));
    FAILS(XSA_CU_ERROR_INVALID_DEVICE, XSA_DRV(D, mem_import_fd, &imported, 0, 2));
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.fd_handles_supported = 0;
    OK(xsa_sim_configure(&c));
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_import_fd, &imported, 0, 0));
}

/* ---- configuration --------------------------------------------------------------- */

static void assert_configure_refused(void) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    assert_int_equal(XSA_CU_ERROR_NOT_PERMITTED, xsa_sim_configure(&c));
    CHECK();
}

static void test_configure(void **state) {
    (void)state;
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    assert_int_equal(1, c.devices);
    assert_int_equal((size_t)80 << 30, c.capacity);
    assert_int_equal(GRAN, c.granularity);
    xsa_sim_config bad[6];
    for (int i = 0; i < 6; i++) bad[i] = c;
    bad[0].devices = 0;
    bad[1].devices = XSA_SIM_MAX_DEVICES + 1;
    bad[2].granularity = 2048;
    bad[3].granularity = 3 * 4096;
    bad[4].capacity = c.granularity * 3 + 4096;
    bad[5].capacity = 0;
    for (int i = 0; i < 6; i++) assert_int_equal(XSA_CU_ERROR_INVALID_VALUE, xsa_sim_configure(&bad[i]));
    assert_int_equal(XSA_CU_ERROR_INVALID_VALUE, xsa_sim_configure(NULL));
    assert_int_equal(64 * MiB, free_mem(0)); /* unchanged */

    xsa_mem_handle h = create(GRAN, 0);
    assert_configure_refused();
    OK(XSA_DRV(D, mem_release, h));
    xsa_devptr p = reserve(GRAN);
    assert_configure_refused();
    OK(XSA_DRV(D, mem_address_free, p, GRAN));
    OK(XSA_DRV(D, mem_alloc, &p, 1, 0));
    assert_configure_refused();
    OK(XSA_DRV(D, mem_free, p));
    xsa_event e = new_event();
    assert_configure_refused();
    OK(XSA_DRV(D, event_destroy, e));

    /* A small granularity and 8 devices are applied. */
    c.devices = 8;
    c.granularity = 64 * 1024;
    c.capacity = 64 * 1024 * 10;
    OK(xsa_sim_configure(&c));
    size_t g = 0;
    OK(XSA_DRV(D, mem_get_granularity, &g, 7, 0));
    assert_int_equal(64 * 1024, g);
    h = create(64 * 1024, 7);
    assert_int_equal(9 * 64 * 1024, free_mem(7));
    OK(XSA_DRV(D, mem_release, h));
}

/* ---- scale: many handles, one fd per device, memory returned --------------------- */

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* Bytes of host memory held by the device's shared memfd (found by name). */
static long long device_file_bytes(void) {
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    long long bytes = -1;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", ent->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = 0;
        struct stat st;
        if (strstr(target, "xsa-sim-device0") && stat(path, &st) == 0) bytes = (long long)st.st_blocks * 512;
    }
    closedir(d);
    return bytes;
}

static void test_many_handles(void **state) {
    (void)state;
    enum { N = 3000 };
    configure(1, (size_t)N * GRAN);
    xsa_devptr p = reserve((size_t)N * GRAN);
    xsa_mem_handle *h = calloc(N, sizeof *h);
    assert_non_null(h);
    h[0] = create(GRAN, 0); /* opens the device file */
    int fds = count_fds();
    for (int i = 1; i < N; i++) OK(XSA_DRV(D, mem_create, &h[i], GRAN, 0, 0));
    assert_int_equal(fds, count_fds());
    for (int i = 0; i < N; i += 100) {
        OK(XSA_DRV(D, mem_map, p + (size_t)i * GRAN, GRAN, 0, h[i]));
        OK(XSA_DRV(D, mem_set_access, p + (size_t)i * GRAN, GRAN, (int[]){0}, 1));
        memset((void *)(uintptr_t)(p + (size_t)i * GRAN), 0x5a, GRAN);
    }
    CHECK();
    assert_true(device_file_bytes() >= (long long)(N / 100) * (long long)GRAN);
    for (int i = 0; i < N; i += 100) OK(XSA_DRV(D, mem_unmap, p + (size_t)i * GRAN, GRAN));
    for (int i = 0; i < N; i++) OK(XSA_DRV(D, mem_release, h[i]));
    CHECK();
    assert_int_equal(0, device_file_bytes()); /* punched out */
    /* Released ranges are reused: a new handle reads zeros, not old data. */
    h[0] = create(GRAN, 0);
    map_rw(p, GRAN, h[0], 0);
    assert_int_equal(0, ((unsigned char *)(uintptr_t)p)[4096]);
    OK(XSA_DRV(D, mem_unmap, p, GRAN));
    OK(XSA_DRV(D, mem_release, h[0]));
    OK(XSA_DRV(D, mem_address_free, p, (size_t)N * GRAN));
    free(h);
}

/* ---- threads ------------------------------------------------------------------ */

static void *worker(void *arg) {
    unsigned char seed = (unsigned char)(uintptr_t)arg;
    xsa_devptr p = 0;
    int ok = XSA_DRV(D, mem_address_reserve, &p, 8 * GRAN, 0) == XSA_CU_SUCCESS;
    xsa_event e = NULL;
    ok = ok && XSA_DRV(D, event_create, &e, 0) == XSA_CU_SUCCESS;
    for (int round = 0; ok && round < 50; round++) {
        xsa_mem_handle h = 0;
        size_t at = (size_t)(round % 8) * GRAN;
        int dev = 0;
        ok = XSA_DRV(D, mem_create, &h, GRAN, 0, 0) == XSA_CU_SUCCESS &&
             XSA_DRV(D, mem_map, p + at, GRAN, 0, h) == XSA_CU_SUCCESS &&
             XSA_DRV(D, mem_set_access, p + at, GRAN, &dev, 1) == XSA_CU_SUCCESS;
        if (ok) {
            unsigned char *b = (unsigned char *)(uintptr_t)(p + at);
            b[0] = seed;
            ok = b[0] == seed;
        }
        ok = ok && XSA_DRV(D, event_record, e, (xsa_stream)arg) == XSA_CU_SUCCESS;
        ok = ok && XSA_DRV(D, mem_release, h) == XSA_CU_SUCCESS;
        ok = ok && XSA_DRV(D, mem_unmap, p + at, GRAN) == XSA_CU_SUCCESS;
        ok = ok && XSA_DRV(D, event_synchronize, e) == XSA_CU_SUCCESS;
        ok = ok && xsa_sim_check(NULL, 0);
    }
    ok = ok && XSA_DRV(D, event_destroy, e) == XSA_CU_SUCCESS;
    ok = ok && XSA_DRV(D, mem_address_free, p, 8 * GRAN) == XSA_CU_SUCCESS;
    return (void *)(uintptr_t)ok;
}

static void test_threads(void **state) {
    (void)state;
    enum { T = 6 };
    pthread_t t[T];
    for (int i = 0; i < T; i++) assert_int_equal(0, pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)));
    for (int i = 0; i < T; i++) {
        void *ok = NULL;
        assert_int_equal(0, pthread_join(t[i], &ok));
        assert_true(ok != NULL);
    }
    CHECK();
    uint64_t calls[XSA_DRV_COUNT];
    xsa_driver_read_calls(D, calls, NULL);
    assert_int_equal(T * 50, calls[XSA_DRV_mem_map]);
}

/* ---- everything back to zero ------------------------------------------------------- */

static void test_usage_zero_after_cleanup(void **state) {
    (void)state;
    configure(2, 32 * MiB);
    xsa_devptr p = reserve(4 * GRAN), m = 0;
    xsa_mem_handle a = create(GRAN, 0), b = create(GRAN, 1), x = 0;
    OK(XSA_DRV(D, mem_create, &x, GRAN, 1, 1));
    map_rw(p, GRAN, a, 0);
    map_rw(p + GRAN, GRAN, b, 1);
    map_rw(p + 2 * GRAN, GRAN, x, 1);
    OK(XSA_DRV(D, mem_alloc, &m, 5 * MiB, 1));
    xsa_event e = new_event();
    OK(XSA_DRV(D, event_record, e, S1));
    xsa_sim_usage u = usage();
    assert_int_equal(3, u.handles);
    assert_int_equal(3 * GRAN, u.mapped_bytes);
    assert_int_equal(GRAN, u.device_used[0]);
    assert_int_equal(2 * GRAN + 6 * MiB, u.device_used[1]);
    assert_int_equal(1, u.pending_events);
    OK(XSA_DRV(D, mem_release, a));
    OK(XSA_DRV(D, mem_release, b));
    OK(XSA_DRV(D, mem_release, x));
    OK(XSA_DRV(D, mem_unmap, p, 3 * GRAN));
    OK(XSA_DRV(D, mem_address_free, p, 4 * GRAN));
    OK(XSA_DRV(D, mem_free, m));
    OK(XSA_DRV(D, event_destroy, e));
    xsa_sim_complete_all();
    CHECK();
    assert_usage_zero();
    assert_int_equal(32 * MiB, free_mem(0));
    assert_int_equal(32 * MiB, free_mem(1));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

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
        T(test_h100_estimate),
        T(test_peer_matrix),
        T(test_exportable),
        T(test_import_fd),
        T(test_configure),
        T(test_many_handles),
        T(test_threads),
        T(test_usage_zero_after_cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
