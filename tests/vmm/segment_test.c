/*
 * segment_test: the expandable segment (vmm/segment) on a driver table.
 * Built twice: segment_test on the simulated driver, segment_gpu_test on the
 * real one (XSA_TEST_CUDA), which skips when there is no GPU. Failures
 * part-way are injected by a wrapper table that makes one entry point fail
 * at a chosen call, so the same cases run on both drivers.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/driver_cuda.h"
#include "vmm/segment.h"
#include "vmm/segment_job.h"
#include "xsalloc/sim.h"

static xsa_driver *real;     /* the driver under test */
static xsa_driver wrapped;   /* real, with one entry point made to fail */
static char err[512];

/* ---- failing wrapper ---- */
static int fail_entry = -1, fail_countdown;

static int should_fail(int entry) { return entry == fail_entry && --fail_countdown == 0; }

static xsa_cu_result w_mem_create(xsa_mem_handle *h, size_t size, int device, int exportable) {
    return should_fail(XSA_DRV_mem_create) ? XSA_CU_ERROR_OUT_OF_MEMORY : real->mem_create(h, size, device, exportable);
}
static xsa_cu_result w_mem_map(xsa_devptr ptr, size_t size, size_t offset, xsa_mem_handle h) {
    return should_fail(XSA_DRV_mem_map) ? XSA_CU_ERROR_UNKNOWN : real->mem_map(ptr, size, offset, h);
}
static xsa_cu_result w_mem_set_access(xsa_devptr ptr, size_t size, const int *devices, int n) {
    return should_fail(XSA_DRV_mem_set_access) ? XSA_CU_ERROR_UNKNOWN : real->mem_set_access(ptr, size, devices, n);
}
static xsa_cu_result w_mem_unmap(xsa_devptr ptr, size_t size) {
    return should_fail(XSA_DRV_mem_unmap) ? XSA_CU_ERROR_UNKNOWN : real->mem_unmap(ptr, size);
}

static void fail_at(int entry, int nth) {
    fail_entry = entry;
    fail_countdown = nth;
}

static int setup(void **state) {
    (void)state;
#ifdef XSA_TEST_CUDA
    real = xsa_driver_cuda(err, sizeof err);
    if (!real) {
        print_message("no GPU: %s\n", err);
        return 0;
    }
#else
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = (size_t)1 << 30;
    if (xsa_sim_configure(&c) != XSA_CU_SUCCESS) return -1;
    real = xsa_driver_sim();
#endif
    /* Copy the function pointers only: the counters are atomics. */
    memcpy((char *)&wrapped, (const char *)real, offsetof(xsa_driver, calls));
    xsa_driver_reset_calls(&wrapped);
    wrapped.mem_create = w_mem_create;
    wrapped.mem_map = w_mem_map;
    wrapped.mem_set_access = w_mem_set_access;
    wrapped.mem_unmap = w_mem_unmap;
    fail_entry = -1;
    return 0;
}

#define NEED_DRIVER()                                   \
    do {                                                \
        if (!real) skip();                              \
    } while (0)

#define CHECK(s)                                                       \
    do {                                                               \
        if (!xsa_segment_check((s), err, sizeof err)) fail_msg("%s", err); \
    } while (0)

static void init_segment(xsa_segment *s, size_t pages) {
    size_t gran = 0;
    assert_int_equal(real->mem_get_granularity(&gran, 0, 0), XSA_CU_SUCCESS);
    assert_int_equal(xsa_segment_init(s, &wrapped, 0, pages * gran), XSA_CU_SUCCESS);
    assert_int_equal(s->max_pages, pages);
    CHECK(s);
}

static void test_grow_and_shrink(void **state) {
    (void)state;
    NEED_DRIVER();
    xsa_segment s;
    init_segment(&s, 64);
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT];
    xsa_driver_read_calls(&wrapped, before, NULL);
    assert_int_equal(xsa_segment_map(&s, 0, 8, NULL), XSA_CU_SUCCESS);
    xsa_driver_read_calls(&wrapped, after, NULL);
    /* One create and map per page, one access call for the run. */
    assert_int_equal(after[XSA_DRV_mem_create] - before[XSA_DRV_mem_create], 8);
    assert_int_equal(after[XSA_DRV_mem_map] - before[XSA_DRV_mem_map], 8);
    assert_int_equal(after[XSA_DRV_mem_set_access] - before[XSA_DRV_mem_set_access], 1);
    CHECK(&s);
    assert_int_equal(s.mapped_pages, 8);
    assert_int_equal(xsa_segment_map(&s, 8, 4, NULL), XSA_CU_SUCCESS); /* grow at the tail */
    assert_int_equal(xsa_segment_map(&s, 4, 1, NULL), XSA_CU_ERROR_INVALID_VALUE); /* already mapped */
    CHECK(&s);
    /* Unmap a middle range, then the tail. */
    assert_int_equal(xsa_segment_unmap(&s, 3, 5, NULL), XSA_CU_SUCCESS);
    CHECK(&s);
    assert_int_equal(s.mapped_pages, 7);
    assert_false(xsa_segment_page_mapped(&s, 3));
    assert_true(xsa_segment_page_mapped(&s, 8));
    assert_int_equal(xsa_segment_unmap(&s, 2, 2, NULL), XSA_CU_ERROR_INVALID_VALUE); /* page 3 not mapped */
    assert_int_equal(xsa_segment_unmap(&s, 8, 4, NULL), XSA_CU_SUCCESS);
    /* Map the hole again. */
    assert_int_equal(xsa_segment_map(&s, 3, 5, NULL), XSA_CU_SUCCESS);
    CHECK(&s);
    assert_int_equal(s.mapped_pages, 8);
    xsa_segment_destroy(&s);
}

static void test_partial_map_failure_undoes(void **state) {
    (void)state;
    NEED_DRIVER();
    xsa_segment s;
    init_segment(&s, 32);
    assert_int_equal(xsa_segment_map(&s, 0, 2, NULL), XSA_CU_SUCCESS);
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT];
    xsa_driver_read_calls(&wrapped, before, NULL);
    fail_at(XSA_DRV_mem_create, 4); /* page 4 of 6 */
    assert_int_equal(xsa_segment_map(&s, 2, 6, NULL), XSA_CU_ERROR_OUT_OF_MEMORY);
    CHECK(&s);
    assert_int_equal(s.mapped_pages, 2);
    xsa_driver_read_calls(&wrapped, after, NULL);
    /* The three handles it made were unmapped (one call) and released. */
    assert_int_equal(after[XSA_DRV_mem_release] - before[XSA_DRV_mem_release], 3);
    assert_int_equal(after[XSA_DRV_mem_unmap] - before[XSA_DRV_mem_unmap], 1);
    fail_at(XSA_DRV_mem_map, 2);
    assert_int_equal(xsa_segment_map(&s, 2, 6, NULL), XSA_CU_ERROR_UNKNOWN);
    CHECK(&s);
    fail_at(XSA_DRV_mem_set_access, 1);
    assert_int_equal(xsa_segment_map(&s, 2, 6, NULL), XSA_CU_ERROR_UNKNOWN);
    CHECK(&s);
    assert_int_equal(s.mapped_pages, 2);
    /* After the failures the same range maps fine. */
    assert_int_equal(xsa_segment_map(&s, 2, 6, NULL), XSA_CU_SUCCESS);
    fail_at(XSA_DRV_mem_unmap, 1); /* a failed unmap of 4 pages leaves all mapped */
    assert_int_equal(xsa_segment_unmap(&s, 0, 4, NULL), XSA_CU_ERROR_UNKNOWN);
    CHECK(&s);
    assert_int_equal(s.mapped_pages, 8);
    /* Moved and new pages in one call: one cuMemSetAccess for the run. */
    xsa_mem_handle mixed[4] = {XSA_NO_HANDLE, XSA_NO_HANDLE, XSA_NO_HANDLE, XSA_NO_HANDLE};
    assert_int_equal(xsa_segment_unmap(&s, 6, 2, mixed), XSA_CU_SUCCESS);
    xsa_driver_read_calls(&wrapped, before, NULL);
    assert_int_equal(xsa_segment_map(&s, 10, 4, mixed), XSA_CU_SUCCESS);
    xsa_driver_read_calls(&wrapped, after, NULL);
    assert_int_equal(after[XSA_DRV_mem_create] - before[XSA_DRV_mem_create], 2);
    assert_int_equal(after[XSA_DRV_mem_set_access] - before[XSA_DRV_mem_set_access], 1);
    CHECK(&s);
    xsa_segment_destroy(&s);
}

static void test_handles_move_between_segments(void **state) {
    (void)state;
    NEED_DRIVER();
    xsa_segment a, b;
    init_segment(&a, 16);
    init_segment(&b, 16);
    assert_int_equal(xsa_segment_map(&a, 0, 4, NULL), XSA_CU_SUCCESS);
    xsa_mem_handle taken[2];
    assert_int_equal(xsa_segment_unmap(&a, 1, 2, taken), XSA_CU_SUCCESS);
    assert_int_equal(xsa_segment_map(&b, 5, 2, taken), XSA_CU_SUCCESS);
    CHECK(&a);
    CHECK(&b);
    assert_true(b.handles[5] == taken[0] && b.handles[6] == taken[1]);
    /* A failure with given handles leaves them to the caller. */
    assert_int_equal(xsa_segment_unmap(&b, 5, 2, taken), XSA_CU_SUCCESS);
    fail_at(XSA_DRV_mem_map, 2);
    assert_int_equal(xsa_segment_map(&a, 1, 2, taken), XSA_CU_ERROR_UNKNOWN);
    CHECK(&a);
    assert_int_equal(xsa_segment_map(&a, 1, 2, taken), XSA_CU_SUCCESS);
    xsa_segment_destroy(&a);
    xsa_segment_destroy(&b);
}

/* Chunks: a growth's new pages come as handles of the pages asked for,
 * pages, one cuMemCreate and one cuMemMap each; only whole chunks unmap
 * (each handle released once) or move to another segment. */
static void test_chunks_map_unmap_and_move_whole(void **state) {
    (void)state;
    NEED_DRIVER();
    xsa_segment a, b;
    init_segment(&a, 16);
    init_segment(&b, 16);
    uint64_t before[XSA_DRV_COUNT], after[XSA_DRV_COUNT];
    xsa_driver_read_calls(&wrapped, before, NULL);
    assert_int_equal(xsa_segment_map_chunks(&a, 2, 7, NULL, 0, 3), XSA_CU_SUCCESS); /* chunks of 3, 3, 1 */
    xsa_driver_read_calls(&wrapped, after, NULL);
    CHECK(&a);
    assert_int_equal(after[XSA_DRV_mem_create] - before[XSA_DRV_mem_create], 3);
    assert_int_equal(after[XSA_DRV_mem_map] - before[XSA_DRV_mem_map], 3);
    assert_int_equal(after[XSA_DRV_mem_set_access] - before[XSA_DRV_mem_set_access], 1);
    size_t start = 0;
    assert_int_equal(xsa_segment_chunk(&a, 6, &start), 3);
    assert_int_equal(start, 5);
    assert_int_equal(xsa_segment_chunk(&a, 8, &start), 1);
    assert_int_equal(start, 8);
    /* A range that cuts a chunk is refused, whole chunks are not. */
    assert_int_equal(xsa_segment_unmap(&a, 2, 2, NULL), XSA_CU_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_segment_unmap(&a, 3, 3, NULL), XSA_CU_ERROR_INVALID_VALUE);
    xsa_driver_read_calls(&wrapped, before, NULL);
    assert_int_equal(xsa_segment_unmap(&a, 2, 3, NULL), XSA_CU_SUCCESS);
    xsa_driver_read_calls(&wrapped, after, NULL);
    assert_int_equal(after[XSA_DRV_mem_release] - before[XSA_DRV_mem_release], 1);
    CHECK(&a);
    /* A chunk moves whole: mapped in b while still mapped in a, then a's
     * old mapping goes without releasing the handle. */
    xsa_chunk moved = {a.handles[5], a.chunk_pages[5]};
    assert_int_equal(xsa_segment_map_chunks(&b, 0, 5, &moved, 1, 2), XSA_CU_SUCCESS); /* 3 moved, then 2 new */
    CHECK(&b);
    assert_true(b.handles[0] == moved.handle && b.chunk_pages[0] == 3 && b.chunk_pages[3] == 2);
    assert_int_equal(xsa_segment_unmap_moved(&a, 5, 3), XSA_CU_SUCCESS);
    CHECK(&a);
    xsa_segment_destroy(&a);
    xsa_segment_destroy(&b);
#ifndef XSA_TEST_CUDA
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    assert_int_equal(u.handles, 0); /* every handle released once, none twice */
#endif
}

static bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

/* A shared chunk keeps one fd (registered) while it stays mapped here, and
 * any unmap of the chunk closes it: released, taken, or moved away. */
static void test_shared_fds_follow_chunks(void **state) {
    (void)state;
    NEED_DRIVER();
    xsa_segment a, b;
    init_segment(&a, 8);
    init_segment(&b, 8);
    a.exportable = true;
    assert_int_equal(xsa_segment_map_chunks(&a, 0, 3, NULL, 0, 3), XSA_CU_SUCCESS);
    assert_int_equal(xsa_segment_map(&a, 3, 3, NULL), XSA_CU_SUCCESS);
    int fd[4], again;
    uint64_t id[4], id_again;
    size_t starts[4] = {0, 3, 4, 5};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(xsa_segment_share(&a, starts[i], &fd[i], &id[i]), XSA_CU_SUCCESS);
        assert_true(fd_open(fd[i]) && id[i] && xsa_share_id(fd[i]) == id[i]);
    }
    assert_int_equal(xsa_segment_share(&a, 0, &again, &id_again), XSA_CU_SUCCESS);
    assert_true(again == fd[0] && id_again == id[0]); /* one fd per chunk */
    assert_int_equal(xsa_segment_share(&a, 1, &again, &id_again), XSA_CU_ERROR_INVALID_VALUE); /* not a chunk start */
    assert_int_equal(xsa_segment_share(&a, 6, &again, &id_again), XSA_CU_ERROR_INVALID_VALUE); /* unmapped */
    CHECK(&a);
    if (!xsa_share_check(err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(xsa_segment_unmap(&a, 3, 1, NULL), XSA_CU_SUCCESS);
    assert_true(!fd_open(fd[1]) && !xsa_share_id(fd[1]));
    xsa_mem_handle taken;
    assert_int_equal(xsa_segment_unmap(&a, 4, 1, &taken), XSA_CU_SUCCESS);
    assert_true(!fd_open(fd[2]));
    xsa_segment_release_handle(&a, taken);
    assert_int_equal(xsa_segment_map(&b, 0, 1, &a.handles[5]), XSA_CU_SUCCESS);
    assert_int_equal(xsa_segment_unmap_moved(&a, 5, 1), XSA_CU_SUCCESS);
    assert_true(!fd_open(fd[3]));
    CHECK(&a);
    CHECK(&b);
    if (!xsa_share_check(err, sizeof err)) fail_msg("%s", err);
    int reg;
    uint64_t reg_id;
    assert_true(xsa_share_registry(&reg, &reg_id) && fd_open(reg));
    xsa_segment_destroy(&a);
    assert_true(!fd_open(fd[0]));
    assert_false(xsa_share_registry(&reg, &reg_id)); /* closed with the last export */
    assert_false(fd_open(reg));
    xsa_segment_destroy(&b);
}

#ifndef XSA_TEST_CUDA
/* Host-visible checks: only the simulated driver's memory is host memory. */
static void test_data_survives_and_unmapped_faults(void **state) {
    (void)state;
    xsa_segment s;
    init_segment(&s, 8);
    assert_int_equal(xsa_segment_map(&s, 0, 3, NULL), XSA_CU_SUCCESS);
    unsigned char *base = (unsigned char *)(uintptr_t)s.base;
    size_t page = s.page_size;
    memset(base, 0x5A, 3 * page);
    assert_int_equal(xsa_segment_unmap(&s, 1, 1, NULL), XSA_CU_SUCCESS);
    for (size_t i = 0; i < page; i++) {
        if (base[i] != 0x5A || base[2 * page + i] != 0x5A) fail_msg("byte %zu changed", i);
    }
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        base[page + 7] = 1;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    xsa_segment_destroy(&s);
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    assert_int_equal(u.handles, 0);
    assert_int_equal(u.reservations, 0);
}
#endif

#ifndef XSA_TEST_CUDA
/* Device `d` may use every page of [first, first+n) of s. */
static void assert_granted(const xsa_segment *s, size_t first, size_t n, int d) {
    for (size_t p = first; p < first + n; p++)
        if (!(xsa_sim_page_access(xsa_segment_page_addr(s, p)) & (1u << d))) fail_msg("page %zu not granted to %d", p, d);
}

/* A job unmapping pages outside the owner's lock marks them leaving: a
 * peer granted meanwhile skips them (the driver refuses a grant on pages
 * it has unmapped), and if the unmap failed, finish grants them. */
static void test_a_grant_skips_pages_a_job_unmaps(void **state) {
    (void)state;
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = (size_t)1 << 30;
    c.devices = 3;
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
    xsa_segment s;
    init_segment(&s, 8);
    assert_int_equal(xsa_segment_map(&s, 0, 6, NULL), XSA_CU_SUCCESS);
    xsa_segment_job done, refused;
    assert_int_equal(xsa_segment_job_begin(&s, XSA_SEG_JOB_UNMAP_RELEASE, 4, 2, 1, &done), XSA_CU_SUCCESS);
    assert_int_equal(xsa_segment_job_begin(&s, XSA_SEG_JOB_UNMAP_RELEASE, 2, 2, 1, &refused), XSA_CU_SUCCESS);
    CHECK(&s);
    xsa_segment_job_run(&done); /* the driver has pages 4 and 5 back */
    fail_at(XSA_DRV_mem_unmap, 1);
    xsa_segment_job_run(&refused);
    assert_int_equal(refused.result, XSA_CU_ERROR_UNKNOWN);
    assert_int_equal(xsa_segment_add_access(&s, 1), XSA_CU_SUCCESS);
    assert_granted(&s, 0, 2, 1);
    assert_int_equal(xsa_segment_job_finish(&s, &done), XSA_CU_SUCCESS);
    assert_int_equal(xsa_segment_job_finish(&s, &refused), XSA_CU_ERROR_UNKNOWN);
    CHECK(&s);
    assert_int_equal(s.mapped_pages, 4);
    assert_granted(&s, 0, 4, 1); /* the refused job's pages too, at its finish */
    /* A later grant reaches them as any mapped page. */
    assert_int_equal(xsa_segment_add_access(&s, 2), XSA_CU_SUCCESS);
    assert_granted(&s, 0, 4, 2);
    assert_int_equal(xsa_segment_destroy(&s), XSA_CU_SUCCESS);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_grow_and_shrink, setup),
        cmocka_unit_test_setup(test_partial_map_failure_undoes, setup),
        cmocka_unit_test_setup(test_handles_move_between_segments, setup),
        cmocka_unit_test_setup(test_chunks_map_unmap_and_move_whole, setup),
        cmocka_unit_test_setup(test_shared_fds_follow_chunks, setup),
#ifndef XSA_TEST_CUDA
        cmocka_unit_test_setup(test_data_survives_and_unmapped_faults, setup),
        cmocka_unit_test_setup(test_a_grant_skips_pages_a_job_unmaps, setup),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
