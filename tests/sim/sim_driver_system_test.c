/*
 * sim_driver_system_test: the simulated driver across devices and processes
 * and at scale: peer access, exportable handles and imported fds, its
 * configuration, thousands of handles, threads, and every counter back to
 * zero after cleanup.
 */
#include "tests/sim/sim_driver_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
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
