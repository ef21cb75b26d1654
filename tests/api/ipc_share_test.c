/*
 * ipc_share_test: blocks shared as bytes (xsa_ipc_share / xsa_ipc_open,
 * torch's shareIpcHandle / getIpcDevPtr) through the public API on the
 * simulated driver, whose exportable handles are memfds that another
 * process takes with pidfd_getfd as it would take the real driver's fds:
 * opens in this process and in forked ones, several importers and opens
 * of one share, the bytes of a block the same each time, nothing pinned,
 * stale bytes refused (memory unmapped, fd numbers reused, exporter gone),
 * the kernel's refusals named (EPERM injected, and real under another
 * user), malformed bytes, IPC off, and failures part-way that leave
 * nothing behind. Invariants after every step; no fd may leak.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static void *const S0 = NULL;

/* api/ipc_share.c's layout, for the tests that tamper with bytes. */
enum { AT_PID = 8, AT_N_CHUNKS = 20, AT_REGISTRY_ID = 24, HEADER = 40, CHUNK = 16, CHUNK_FD = 0, CHUNK_PAGES = 4, CHUNK_ID = 8 };

static int fds_at_start;

static int setup(void **state) {
    (void)state;
    xsa_fixture_use_sim(2, (size_t)1 << 30);
    /* Forked importers take this process's fds: allow it under Yama's
     * ptrace_scope 1 too (no-op elsewhere). */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    fds_at_start = xsa_fixture_open_fds();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    xsa_sim_clear_faults();
    xsa_fixture_shutdown_and_expect_empty();
    xsa_fixture_use_sim(2, (size_t)1 << 30); /* closes the simulated devices' memfds */
    assert_int_equal(xsa_fixture_open_fds(), fds_at_start);
    return 0;
}

/* OK and FAILS (api_fixture.h), then the invariant checker. */
#define OK_CHECKED(call)                                                             \
    do {                                                                     \
        xsa_status st_ = (call);                                             \
        if (st_ != XSA_SUCCESS) fail_msg("%s: %s", #call, xsa_last_error()); \
        INVARIANTS(0);                                                        \
    } while (0)
/* The failure's sentence stays in `said` (the invariant check clears it). */
static char said[4096];
#define FAILS_CHECKED(status, call, needle)                                                              \
    do {                                                                                         \
        xsa_status st_ = (call);                                                                 \
        snprintf(said, sizeof said, "%s", xsa_last_error());                                     \
        if (st_ != (status) || !strstr(said, needle))                                            \
            fail_msg("%s gave %s \"%s\", want %s with \"%s\"", #call, xsa_status_name(st_),      \
                     said, #status, needle);                                                     \
        INVARIANTS(0);                                                                            \
    } while (0)

typedef struct share {
    void *bytes;
    size_t len, offset;
} share;

static share share_of(void *p) {
    share s;
    OK_CHECKED(xsa_ipc_share(p, &s.bytes, &s.len, &s.offset));
    return s;
}

static void *alloc(size_t size) {
    void *p = NULL;
    OK_CHECKED(xsa_malloc(&p, size, 0, S0));
    return p;
}

static xsa_sim_usage usage(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    return u;
}

static int64_t reserved(void) {
    xsa_device_stats s;
    OK_CHECKED(xsa_get_stats(0, &s));
    return s.reserved_bytes[XSA_STAT_ALL].current;
}

/* ---- in this process ---- */

/* The bytes of a block are the same each time, open once per device, and
 * each open is closed once; the memory is the block's, both ways. */
static void test_share_and_open_here(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    void *pad = alloc(1536 * KiB), *blk = alloc(5 * MiB);
    xsa_fixture_fill(blk, 5 * MiB, 'A');
    share s = share_of(blk), again = share_of(blk), other = share_of(pad);
    assert_int_equal(s.offset, 1536 * KiB); /* one-page handles: from blk's first page */
    assert_true(s.len == again.len && memcmp(s.bytes, again.bytes, s.len) == 0);
    assert_true(other.len != s.len || memcmp(other.bytes, s.bytes, s.len) != 0);
    void *base = NULL, *base2 = NULL, *on1 = NULL;
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 0, &base));
    assert_true(base != (char *)blk - s.offset && xsa_fixture_filled((char *)base + s.offset, 5 * MiB, 'A'));
    size_t mapped = usage().mapped_bytes;
    char *odd = malloc(again.len + 1); /* the bytes at any alignment, as a caller's buffer may be */
    memcpy(odd + 1, again.bytes, again.len);
    OK_CHECKED(xsa_ipc_open(odd + 1, again.len, 0, &base2));
    free(odd);
    assert_ptr_equal(base2, base);
    assert_int_equal(usage().mapped_bytes, mapped); /* opened once */
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 1, &on1)); /* another device maps it for itself */
    assert_true(on1 != base && xsa_sim_page_access((uintptr_t)on1) == 2u);
    xsa_fixture_fill((char *)base + s.offset, 5 * MiB, 'B');
    assert_true(xsa_fixture_filled(blk, 5 * MiB, 'B'));
    OK_CHECKED(xsa_ipc_close(base));
    assert_true(xsa_fixture_filled((char *)base + s.offset, 5 * MiB, 'B')); /* still open once */
    OK_CHECKED(xsa_ipc_close(base));
    OK_CHECKED(xsa_ipc_close(on1));
    FAILS_CHECKED(XSA_ERROR_INVALID_POINTER, xsa_ipc_close(base), "already closed");
    assert_int_equal(usage().mapped_bytes, mapped - 4 * 2 * MiB);
    xsa_free_buffer(s.bytes), xsa_free_buffer(again.bytes), xsa_free_buffer(other.bytes);
    OK_CHECKED(xsa_free(blk));
    OK_CHECKED(xsa_free(pad));
}

/* Nothing is pinned: a shared block freed goes back to the cache at once,
 * its pages are released by empty_cache, its fds close with them, and its
 * bytes are stale from then on. */
static void test_nothing_pinned_and_stale_after_release(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    int before = xsa_fixture_open_fds();
    void *blk = alloc(4 * MiB);
    assert_int_equal(xsa_fixture_open_fds(), before + 2); /* the simulated driver's memfds of two handles */
    share s = share_of(blk);
    assert_int_equal(xsa_fixture_open_fds(), before + 2 + 3); /* their exports and the registry */
    void *base = NULL;
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 0, &base));
    OK_CHECKED(xsa_ipc_close(base));
    OK_CHECKED(xsa_free(blk));
    void *same = alloc(4 * MiB);
    assert_ptr_equal(same, blk); /* cached again at once */
    OK_CHECKED(xsa_free(same));
    OK_CHECKED(xsa_empty_cache());
    assert_int_equal(reserved(), 0);
    assert_int_equal(xsa_fixture_open_fds(), before);
    FAILS_CHECKED(XSA_ERROR_INVALID_VALUE, xsa_ipc_open(s.bytes, s.len, 0, &base), "stale handle");
    assert_null(base);
    xsa_free_buffer(s.bytes);
}

/* An fd number closed with its handle and reused by another share is not
 * taken for the old one: the registry's ids differ. */
static void test_reused_fd_numbers_are_stale(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    void *keep = alloc(2 * MiB), *blk = alloc(2 * MiB);
    share k = share_of(keep), s = share_of(blk); /* keep holds the registry open */
    int old_fd;
    memcpy(&old_fd, (char *)s.bytes + HEADER + CHUNK_FD, sizeof old_fd);
    OK_CHECKED(xsa_free(blk));
    OK_CHECKED(xsa_empty_cache());
    void *next = alloc(2 * MiB);
    xsa_fixture_fill(next, 2 * MiB, 'N');
    share n = share_of(next);
    int new_fd;
    memcpy(&new_fd, (char *)n.bytes + HEADER + CHUNK_FD, sizeof new_fd);
    assert_int_equal(new_fd, old_fd); /* the lowest free number again */
    void *base = NULL;
    FAILS_CHECKED(XSA_ERROR_INVALID_VALUE, xsa_ipc_open(s.bytes, s.len, 0, &base), "stale handle");
    OK_CHECKED(xsa_ipc_open(n.bytes, n.len, 0, &base));
    assert_true(xsa_fixture_filled((char *)base + n.offset, 2 * MiB, 'N'));
    OK_CHECKED(xsa_ipc_close(base));
    xsa_free_buffer(k.bytes), xsa_free_buffer(s.bytes), xsa_free_buffer(n.bytes);
    OK_CHECKED(xsa_free(keep));
    OK_CHECKED(xsa_free(next));
}

/* Physical handles of several pages: the share covers the whole handles
 * under the block, from the one it starts inside of. */
static void test_multi_page_handles(void **state) {
    (void)state;
    /* Handles hold 1/8 of the headroom: 64 MiB x 1 / 8 = 4 pages. */
    OK_CHECKED(xsa_init("ipc_handles:True,page_recycling_headroom:1"));
    OK_CHECKED(xsa_free(alloc(64 * MiB)));
    void *pad = alloc(3 * MiB), *blk = alloc(10 * MiB); /* pages 1-6 of two 4-page handles */
    xsa_fixture_fill(blk, 10 * MiB, 'H');
    share s = share_of(blk), p = share_of(pad);
    uint32_t n_chunks, pages[2];
    memcpy(&n_chunks, (char *)s.bytes + AT_N_CHUNKS, sizeof n_chunks);
    memcpy(&pages[0], (char *)s.bytes + HEADER + CHUNK_PAGES, sizeof pages[0]);
    memcpy(&pages[1], (char *)s.bytes + HEADER + CHUNK + CHUNK_PAGES, sizeof pages[1]);
    assert_true(n_chunks == 2 && pages[0] == 4 && pages[1] == 4);
    assert_int_equal(s.offset, 3 * MiB);
    assert_true(p.len == HEADER + CHUNK && memcmp(p.bytes, s.bytes, p.len - CHUNK) != 0); /* the first handle only */
    size_t mapped = usage().mapped_bytes;
    void *base = NULL, *pbase = NULL;
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 0, &base));
    assert_int_equal(usage().mapped_bytes, mapped + 16 * MiB);
    assert_true(xsa_fixture_filled((char *)base + s.offset, 10 * MiB, 'H'));
    xsa_fixture_fill(pad, 3 * MiB, 'P');
    OK_CHECKED(xsa_ipc_open(p.bytes, p.len, 0, &pbase));
    assert_true(xsa_fixture_filled((char *)pbase + p.offset, 3 * MiB, 'P') && xsa_fixture_filled((char *)base, 3 * MiB, 'P'));
    xsa_fixture_fill((char *)base + s.offset, 10 * MiB, 'I');
    assert_true(xsa_fixture_filled(blk, 10 * MiB, 'I'));
    OK_CHECKED(xsa_ipc_close(pbase));
    OK_CHECKED(xsa_ipc_close(base));
    xsa_free_buffer(s.bytes), xsa_free_buffer(p.bytes);
    OK_CHECKED(xsa_free(blk));
    OK_CHECKED(xsa_free(pad));
}

/* ---- threads ---- */

#define THREADS 4

static void *common;

/* Shares its own block and the common one, opens, checks and closes both,
 * again and again: the registry and the imports under concurrent use. */
static void *share_loop(void *arg) {
    size_t k = (size_t)arg;
    void *own = NULL;
    if (xsa_malloc(&own, (k + 1) * MiB, 0, S0) != XSA_SUCCESS) return "malloc";
    memset(own, (int)('a' + k), (k + 1) * MiB);
    const char *why = NULL;
    for (int i = 0; i < 50 && !why; i++) {
        void *blocks[2] = {own, common};
        for (int b = 0; b < 2 && !why; b++) {
            void *bytes = NULL, *base = NULL;
            size_t len, offset;
            if (xsa_ipc_share(blocks[b], &bytes, &len, &offset) != XSA_SUCCESS) why = "share";
            else if (xsa_ipc_open(bytes, len, 0, &base) != XSA_SUCCESS) why = "open";
            else if (*((char *)base + offset) != (b ? 'C' : (char)('a' + k))) why = "data";
            if (base && xsa_ipc_close(base) != XSA_SUCCESS) why = "close";
            xsa_free_buffer(bytes);
        }
    }
    if (xsa_free(own) != XSA_SUCCESS) why = "free";
    return (void *)why;
}

static void test_threads(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    common = alloc(2 * MiB);
    memset(common, 'C', 2 * MiB);
    pthread_t t[THREADS];
    for (size_t k = 0; k < THREADS; k++) assert_int_equal(pthread_create(&t[k], NULL, share_loop, (void *)k), 0);
    for (size_t k = 0; k < THREADS; k++) {
        void *why = NULL;
        assert_int_equal(pthread_join(t[k], &why), 0);
        if (why) fail_msg("thread %zu: %s failed: %s", k, (const char *)why, xsa_last_error());
    }
    INVARIANTS(0);
    OK_CHECKED(xsa_free(common));
}

/* ---- across fork ---- */

enum { CHILD_OK, CHILD_READ, CHILD_OPEN, CHILD_DATA, CHILD_AGAIN, CHILD_CLOSE, CHILD_REFUSED, CHILD_SETUID };

static ssize_t read_all(int fd, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0) return r;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static int read_share(int fd, share *s) {
    if (read_all(fd, &s->len, sizeof s->len) != sizeof s->len || read_all(fd, &s->offset, sizeof s->offset) != sizeof s->offset)
        return 0;
    s->bytes = malloc(s->len);
    return s->bytes && read_all(fd, s->bytes, s->len) == (ssize_t)s->len;
}

static void write_share(int fd, const share *s) {
    assert_int_equal(write(fd, &s->len, sizeof s->len), sizeof s->len);
    assert_int_equal(write(fd, &s->offset, sizeof s->offset), sizeof s->offset);
    assert_int_equal(write(fd, s->bytes, s->len), (ssize_t)s->len);
}

/* Every 4 KiB's first byte and the last byte are c. */
static int all(const void *p, size_t size, char c) {
    const char *b = p;
    for (size_t i = 0; i < size; i += 4096)
        if (b[i] != c) return 0;
    return b[size - 1] == c;
}

/* Importer k of a forked pair: sees A in its half (the other importer may
 * have written its own already), writes its half with k's digit, opens
 * again (same base) and closes both. */
/* A forked child stands for another process: it picks the simulated driver
 * afresh (a child forked after the start may not use the parent's). */
static int importer(int fd, int k, size_t size) {
    share s;
    if (xsa_use_driver("sim") != XSA_SUCCESS) return CHILD_READ;
    if (!read_share(fd, &s)) return CHILD_READ;
    void *base = NULL, *again = NULL;
    if (xsa_ipc_open(s.bytes, s.len, 0, &base) != XSA_SUCCESS) return CHILD_OPEN;
    char *half = (char *)base + s.offset + k * size / 2;
    if (!all(half, size / 2, 'A')) return CHILD_DATA;
    memset(half, '0' + k, size / 2);
    if (xsa_ipc_open(s.bytes, s.len, 0, &again) != XSA_SUCCESS || again != base) return CHILD_AGAIN;
    if (xsa_ipc_close(again) != XSA_SUCCESS || xsa_ipc_close(base) != XSA_SUCCESS) return CHILD_CLOSE;
    return CHILD_OK;
}

static void wait_ok(pid_t pid, int want) {
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != want) fail_msg("child: status %#x, want exit %d", status, want);
}

/* Two processes open one share: each sees the data, the exporter sees
 * both writes, and frees and allocates as usual afterwards. */
static void test_two_importers_across_fork(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    size_t size = 6 * MiB;
    void *pad = alloc(512 * KiB), *blk = alloc(size);
    memset(blk, 'A', size);
    share s = share_of(blk);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0) {
            close(fds[1]);
            _exit(importer(fds[0], k, size));
        }
        close(fds[0]);
        write_share(fds[1], &s);
        close(fds[1]);
    }
    for (int k = 0; k < 2; k++) wait_ok(kids[k], CHILD_OK);
    assert_true(all(blk, size / 2, '0') && all((char *)blk + size / 2, size / 2, '1'));
    OK_CHECKED(xsa_free(blk));
    void *after = alloc(size);
    assert_ptr_equal(after, blk);
    xsa_free_buffer(s.bytes);
    OK_CHECKED(xsa_free(after));
    OK_CHECKED(xsa_free(pad));
}

/* The exporter is another process: its share opens while it lives and is
 * stale once it has exited. */
static void test_exporter_exits(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    int to_parent[2], to_child[2];
    assert_int_equal(pipe(to_parent), 0);
    assert_int_equal(pipe(to_child), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* the exporter: a fresh allocator of its own */
        close(to_parent[0]), close(to_child[1]);
        void *p = NULL, *bytes = NULL;
        share s;
        char go;
        if (xsa_shutdown() || xsa_use_driver("sim") || xsa_init("ipc_handles:True") || xsa_malloc(&p, 3 * MiB, 0, S0))
            _exit(1);
        xsa_fixture_fill(p, 3 * MiB, 'E');
        if (xsa_ipc_share(p, &bytes, &s.len, &s.offset)) _exit(2);
        s.bytes = bytes;
        write_share(to_parent[1], &s);
        _exit(read(to_child[0], &go, 1) == 1 ? 0 : 3); /* exits without freeing */
    }
    close(to_parent[1]), close(to_child[0]);
    share s;
    assert_true(read_share(to_parent[0], &s));
    close(to_parent[0]);
    void *base = NULL;
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 0, &base));
    assert_true(xsa_fixture_filled((char *)base + s.offset, 3 * MiB, 'E'));
    assert_int_equal(write(to_child[1], "x", 1), 1);
    close(to_child[1]);
    wait_ok(pid, 0);
    /* The memory stays while this process has it open. */
    assert_true(xsa_fixture_filled((char *)base + s.offset, 3 * MiB, 'E'));
    OK_CHECKED(xsa_ipc_close(base));
    FAILS_CHECKED(XSA_ERROR_INVALID_VALUE, xsa_ipc_open(s.bytes, s.len, 0, &base), "has exited");
    free(s.bytes);
}

/* ---- the kernel's refusals ---- */

static void test_kernel_refusals_named(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    void *blk = alloc(2 * MiB);
    share s = share_of(blk);
    void *base = NULL;
    int fds = xsa_fixture_open_fds();
    xsa_sim_fail_call(XSA_DRV_process_get_fds, 1, XSA_CU_ERROR_NOT_PERMITTED);
    FAILS_CHECKED(XSA_ERROR_NOT_SUPPORTED, xsa_ipc_open(s.bytes, s.len, 0, &base), "EPERM");
    assert_non_null(strstr(said, "ptrace restrictions"));
    xsa_sim_fail_call(XSA_DRV_process_get_fds, 2, XSA_CU_ERROR_NOT_SUPPORTED); /* the handles' fds, after the registry */
    FAILS_CHECKED(XSA_ERROR_NOT_SUPPORTED, xsa_ipc_open(s.bytes, s.len, 0, &base), "Linux 5.6");
    xsa_sim_fail_call(XSA_DRV_process_get_fds, 2, XSA_CU_ERROR_UNKNOWN);
    FAILS_CHECKED(XSA_ERROR_DRIVER, xsa_ipc_open(s.bytes, s.len, 0, &base), "pidfd_getfd");
    assert_int_equal(xsa_fixture_open_fds(), fds);
    assert_null(base);
    /* A real refusal: another user may not take root's fds. */
    if (geteuid() == 0) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            close(p[1]);
            share got;
            if (!read_share(p[0], &got)) _exit(CHILD_READ);
            if (setgid(65534) || setuid(65534)) _exit(CHILD_SETUID);
            if (xsa_use_driver("sim") != XSA_SUCCESS) _exit(CHILD_OPEN); /* another process, on the simulator */
            xsa_status st = xsa_ipc_open(got.bytes, got.len, 0, &base);
            _exit(st == XSA_ERROR_NOT_SUPPORTED && strstr(xsa_last_error(), "EPERM") ? CHILD_REFUSED : CHILD_OPEN);
        }
        close(p[0]);
        write_share(p[1], &s);
        close(p[1]);
        wait_ok(pid, CHILD_REFUSED);
    }
    xsa_free_buffer(s.bytes);
    OK_CHECKED(xsa_free(blk));
}

/* ---- bad bytes, IPC off ---- */

static void expect_bad(const share *s, size_t at, const void *value, size_t n, xsa_status want, const char *needle) {
    char *bad = malloc(s->len);
    memcpy(bad, s->bytes, s->len);
    memcpy(bad + at, value, n);
    void *base = (void *)1;
    FAILS_CHECKED(want, xsa_ipc_open(bad, s->len, 0, &base), needle);
    assert_null(base);
    free(bad);
}

static void test_bad_bytes(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    void *blk = alloc(4 * MiB);
    share s = share_of(blk);
    void *base = NULL;
    size_t len;
    FAILS_CHECKED(XSA_ERROR_INVALID_VALUE, xsa_ipc_share(blk, NULL, &len, &len), "NULL");
    FAILS_CHECKED(XSA_ERROR_INVALID_POINTER, xsa_ipc_share((char *)blk + 512, &base, &len, &len), "not a live allocation");
    FAILS_CHECKED(XSA_ERROR_INVALID_VALUE, xsa_ipc_open(NULL, 4, 0, &base), "NULL");
    FAILS_CHECKED(XSA_ERROR_INVALID_VALUE, xsa_ipc_open(s.bytes, 12, 0, &base), "too short");
    FAILS_CHECKED(XSA_ERROR_INVALID_VALUE, xsa_ipc_open(s.bytes, s.len - 1, 0, &base), "length");
    FAILS_CHECKED(XSA_ERROR_INVALID_DEVICE, xsa_ipc_open(s.bytes, s.len, 2, &base), "device 2");
    uint32_t zero = 0;
    uint64_t other_id = 12345;
    int32_t closed_fd = 999, negative = -1;
    expect_bad(&s, 0, &zero, sizeof zero, XSA_ERROR_INVALID_VALUE, "not the bytes of xsa_ipc_share");
    expect_bad(&s, AT_PID, &negative, sizeof negative, XSA_ERROR_INVALID_VALUE, "no exporting process");
    expect_bad(&s, AT_REGISTRY_ID, &other_id, sizeof other_id, XSA_ERROR_INVALID_VALUE, "stale handle");
    expect_bad(&s, HEADER + CHUNK + CHUNK_ID, &other_id, sizeof other_id, XSA_ERROR_INVALID_VALUE, "stale handle");
    expect_bad(&s, HEADER + CHUNK_FD, &closed_fd, sizeof closed_fd, XSA_ERROR_INVALID_VALUE, "stale handle");
    xsa_free_buffer(s.bytes);
    OK_CHECKED(xsa_free(blk));
}

static void test_share_refused_without_ipc(void **state) {
    (void)state;
    OK_CHECKED(xsa_init(NULL));
    void *blk = alloc(4 * MiB), *bytes = NULL;
    size_t len, offset;
    FAILS_CHECKED(XSA_ERROR_NOT_SUPPORTED, xsa_ipc_share(blk, &bytes, &len, &offset),
          "set ipc_handles:True in XSALLOC_CONF");
    assert_null(bytes);
    OK_CHECKED(xsa_free(blk));
    xsa_shutdown();
    OK_CHECKED(xsa_init("expandable_segments:False"));
    blk = alloc(4 * MiB);
    FAILS_CHECKED(XSA_ERROR_NOT_SUPPORTED, xsa_ipc_share(blk, &bytes, &len, &offset), "classic cuMemAlloc segment");
    OK_CHECKED(xsa_free(blk));
}

/* ---- failures part-way ---- */

/* An open that fails at any driver call leaves no mapping, handle or fd
 * behind; a close that fails keeps the import, and closing again works. */
static void test_failures_leave_nothing(void **state) {
    (void)state;
    OK_CHECKED(xsa_init("ipc_handles:True"));
    void *blk = alloc(6 * MiB);
    xsa_fixture_fill(blk, 6 * MiB, 'F');
    share s = share_of(blk);
    struct { xsa_driver_entry e; uint64_t nth; } faults[] = {
        {XSA_DRV_mem_address_reserve, 1}, {XSA_DRV_mem_import_fd, 2}, {XSA_DRV_mem_map, 3},
        {XSA_DRV_mem_set_access, 1}, {XSA_DRV_process_get_fds, 1}, {XSA_DRV_process_get_fds, 2},
    };
    xsa_sim_usage u0 = usage();
    int fds = xsa_fixture_open_fds();
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        void *base = NULL;
        xsa_sim_fail_call(faults[i].e, faults[i].nth, XSA_CU_ERROR_UNKNOWN);
        if (xsa_ipc_open(s.bytes, s.len, 0, &base) != XSA_ERROR_DRIVER)
            fail_msg("%s fails: %s", xsa_driver_entry_name(faults[i].e), xsa_last_error());
        xsa_sim_clear_faults();
        xsa_sim_usage u = usage();
        assert_true(u.handles == u0.handles && u.mapped_bytes == u0.mapped_bytes && u.reservations == u0.reservations);
        assert_int_equal(xsa_fixture_open_fds(), fds);
        INVARIANTS(0);
    }
    void *base = NULL;
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 0, &base));
    xsa_sim_fail_call(XSA_DRV_mem_address_free, 1, XSA_CU_ERROR_UNKNOWN);
    FAILS_CHECKED(XSA_ERROR_DRIVER, xsa_ipc_close(base), "close again");
    void *fresh = NULL; /* not the half-closed one */
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 0, &fresh));
    assert_true(fresh != base && xsa_fixture_filled((char *)fresh + s.offset, 6 * MiB, 'F'));
    OK_CHECKED(xsa_ipc_close(fresh));
    OK_CHECKED(xsa_ipc_close(base));
    /* The driver's out of memory on closing is no shortage of memory for
     * the caller: a driver error, and closing again retries (ops_fuzz
     * found the close answering XSA_ERROR_OUT_OF_MEMORY). */
    OK_CHECKED(xsa_ipc_open(s.bytes, s.len, 0, &fresh));
    xsa_sim_fail_call(XSA_DRV_mem_address_free, 1, XSA_CU_ERROR_OUT_OF_MEMORY);
    FAILS_CHECKED(XSA_ERROR_DRIVER, xsa_ipc_close(fresh), "close again");
    OK_CHECKED(xsa_ipc_close(fresh));
    assert_int_equal(usage().reservations, u0.reservations);
    xsa_free_buffer(s.bytes);
    OK_CHECKED(xsa_free(blk));
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_share_and_open_here),
        T(test_nothing_pinned_and_stale_after_release),
        T(test_reused_fd_numbers_are_stale),
        T(test_multi_page_handles),
        T(test_threads),
        T(test_two_importers_across_fork),
        T(test_exporter_exits),
        T(test_kernel_refusals_named),
        T(test_bad_bytes),
        T(test_share_refused_without_ipc),
        T(test_failures_leave_nothing),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
