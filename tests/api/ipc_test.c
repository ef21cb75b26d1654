/*
 * ipc_test: IPC export/import of blocks through the public API on the
 * simulated driver (exportable handles are memfds a forked child can map):
 * a round trip across fork() with data written on each side read on the
 * other, the lifetime rules (pinned pages are neither reused, recycled nor
 * unmapped until the importer closed or the export was revoked), handles of
 * many pages over a socket, bad and stale handles, and the fallback when
 * exportable handles are refused. Every test also checks that no fd leaks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static void *const S0 = NULL;
static void *const S1 = (void *)0x1001;

static void sim(int devices, size_t granularity, int fd_handles) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.devices = devices;
    c.capacity = 1 * GiB;
    c.granularity = granularity;
    c.eager_events = 1;
    c.fd_handles_supported = fd_handles;
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
}

static int fds_at_start;

static int setup(void **state) {
    (void)state;
    xsa_shutdown();
    sim(2, 2 * MiB, 1);
    assert_int_equal(xsa_use_driver("sim"), XSA_SUCCESS);
    unsetenv("XSALLOC_CONF");
    fds_at_start = xsa_fixture_open_fds();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    xsa_fixture_shutdown_and_expect_empty();
    sim(2, 2 * MiB, 1); /* closes the simulated devices' memfds */
    assert_int_equal(xsa_fixture_open_fds(), fds_at_start);
    return 0;
}


static void *alloc(size_t size, int device, void *stream) {
    void *p = NULL;
    OK(xsa_malloc(&p, size, device, stream));
    return p;
}


static xsa_device_stats stats(int device) {
    xsa_device_stats s;
    OK(xsa_get_stats(device, &s));
    return s;
}

/* ---- across fork ---- */

enum { CHILD_OK, CHILD_RECV, CHILD_IMPORT, CHILD_DATA_A, CHILD_SYNC, CHILD_DATA_B, CHILD_CLOSE };

static int sync_byte(int sock, char c) {
    if (write(sock, &c, 1) != 1) return 0;
    char got = 0;
    return read(sock, &got, 1) == 1 && got == c;
}

/* The importing process: checks A, lets the parent write B, checks B,
 * writes C and closes. */
static int child(int sock) {
    xsa_ipc_handle h;
    /* Another process: the simulated driver afresh (a child forked after the
     * start may not use the parent's). */
    if (xsa_use_driver("sim") != XSA_SUCCESS) return CHILD_RECV;
    if (xsa_ipc_recv(sock, &h) != XSA_SUCCESS) return CHILD_RECV;
    void *q = NULL;
    xsa_status st = xsa_ipc_import(&h, 0, &q);
    xsa_ipc_handle_close(&h);
    if (st != XSA_SUCCESS) return CHILD_IMPORT;
    if (!xsa_fixture_filled(q, h.size, 'A')) return CHILD_DATA_A;
    if (!sync_byte(sock, '1')) return CHILD_SYNC;
    if (!xsa_fixture_filled(q, h.size, 'B')) return CHILD_DATA_B;
    xsa_fixture_fill(q, h.size, 'C');
    if (xsa_ipc_close(q) != XSA_SUCCESS) return CHILD_CLOSE;
    return sync_byte(sock, '2') ? CHILD_OK : CHILD_SYNC;
}

static void test_export_import_across_fork(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    void *pad = alloc(1536 * KiB, 0, S0), *blk = alloc(5 * MiB, 0, S0);
    xsa_fixture_fill(blk, 5 * MiB, 'A');
    xsa_ipc_handle h;
    OK(xsa_ipc_export(blk, &h));
    assert_int_equal(h.n_pages, 4); /* 1.5 MiB into the first of four 2 MiB pages */
    assert_int_equal(h.offset, 1536 * KiB);
    assert_int_equal(h.size, 5 * MiB);
    INVARIANTS(0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        _exit(child(sv[1]));
    }
    close(sv[1]);
    OK(xsa_ipc_send(sv[0], &h));
    xsa_ipc_handle_close(&h);
    char c = 0;
    assert_int_equal(read(sv[0], &c, 1), 1); /* imported, A seen */
    xsa_fixture_fill(blk, 5 * MiB, 'B');
    assert_int_equal(write(sv[0], &c, 1), 1);
    assert_int_equal(read(sv[0], &c, 1), 1); /* C written, closed */
    assert_int_equal(write(sv[0], &c, 1), 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(sv[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != CHILD_OK) fail_msg("child failed: status %#x", status);
    assert_true(xsa_fixture_filled(blk, 5 * MiB, 'C'));
    /* The importer closed: freeing returns the block to the cache at once. */
    OK(xsa_free(blk));
    assert_int_equal(stats(0).active_bytes[XSA_STAT_ALL].current, 1536 * KiB);
    INVARIANTS(0);
    OK(xsa_free(pad));
}

/* ---- lifetime: pinned pages ---- */

static int64_t reserved(int device) { return stats(device).reserved_bytes[XSA_STAT_ALL].current; }

/* An exported block freed by the exporter keeps its pages: not reused by
 * malloc, not recycled to another stream, not unmapped by empty_cache,
 * until the importer closes. */
static void test_pinned_until_importer_closes(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    void *blk = alloc(8 * MiB, 0, S0), *keep = alloc(2 * MiB, 0, S0);
    xsa_fixture_fill(blk, 8 * MiB, 'P');
    xsa_ipc_handle h;
    void *q = NULL;
    OK(xsa_ipc_export(blk, &h));
    OK(xsa_ipc_import(&h, 0, &q));
    xsa_ipc_handle_close(&h);
    assert_true(q != blk && xsa_fixture_filled(q, 8 * MiB, 'P'));
    OK(xsa_free(blk));
    xsa_device_stats s = stats(0);
    assert_int_equal(s.active_bytes[XSA_STAT_ALL].current, 10 * MiB); /* still in use */
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 2 * MiB);
    INVARIANTS(0);
    OK(xsa_empty_cache());
    assert_int_equal(reserved(0), 10 * MiB);
    assert_int_equal(xsa_sim_page_access((uintptr_t)blk), 1u);
    /* Another stream grows: with recycling on, only pinned pages are free
     * in the pool, and none of them moves. */
    void *other = alloc(8 * MiB, 0, S1);
    assert_int_equal(stats(0).num_pages_recycled, 0);
    /* The same stream reuses nothing of blk either. */
    void *same = alloc(8 * MiB, 0, S0);
    assert_true(same != blk);
    xsa_fixture_fill(q, 8 * MiB, 'Q'); /* the importer still owns the memory */
    assert_true(xsa_fixture_filled(blk, 8 * MiB, 'Q'));
    INVARIANTS(0);
    OK(xsa_ipc_close(q));
    /* The next empty_cache sees the close and unmaps blk's pages. */
    OK(xsa_empty_cache());
    assert_int_equal(reserved(0), 18 * MiB);
    assert_int_equal(xsa_sim_page_access((uintptr_t)blk), 0u);
    INVARIANTS(0);
    OK(xsa_free(other));
    OK(xsa_free(same));
    OK(xsa_free(keep));
}

/* Exported, freed before the import: still importable, and the block is
 * cached again (a later malloc gets its address) once the importer closed. */
static void test_freed_before_import(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    void *blk = alloc(4 * MiB, 0, S0), *keep = alloc(2 * MiB, 0, S0);
    xsa_fixture_fill(blk, 4 * MiB, 'F');
    xsa_ipc_handle h;
    OK(xsa_ipc_export(blk, &h));
    OK(xsa_free(blk));
    void *during = alloc(4 * MiB, 0, S0);
    assert_true(during != blk);
    void *q = NULL;
    OK(xsa_ipc_import(&h, 1, &q)); /* device 1 may access device 0 */
    xsa_ipc_handle_close(&h);
    assert_true(xsa_fixture_filled(q, 4 * MiB, 'F'));
    assert_int_equal(xsa_sim_page_access((uintptr_t)q), 2u);
    OK(xsa_ipc_close(q));
    void *after = alloc(4 * MiB, 0, S0); /* polls the close first */
    assert_ptr_equal(after, blk);
    INVARIANTS(0);
    OK(xsa_free(after));
    OK(xsa_free(during));
    OK(xsa_free(keep));
}

/* Memory imported for a device is granted to the devices granted access
 * to that device's memory (xsa_enable_peer_access), whether they were
 * granted before the import or after; an import for another device is not. */
static void test_imports_granted_to_peers(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    void *a = alloc(2 * MiB, 0, S0), *b = alloc(2 * MiB, 0, S0), *c = alloc(2 * MiB, 0, S0);
    xsa_ipc_handle ha, hb, hc;
    OK(xsa_ipc_export(a, &ha));
    OK(xsa_ipc_export(c, &hc));
    void *qa = NULL, *qc = NULL, *qb = NULL;
    OK(xsa_ipc_import(&ha, 0, &qa));
    OK(xsa_ipc_import(&hc, 1, &qc));
    assert_int_equal(xsa_sim_page_access((uintptr_t)qa), 1u);
    assert_int_equal(xsa_sim_page_access((uintptr_t)qc), 2u);
    OK(xsa_enable_peer_access(0, 1));
    INVARIANTS(0);
    assert_int_equal(xsa_sim_page_access((uintptr_t)a), 3u);
    assert_int_equal(xsa_sim_page_access((uintptr_t)qa), 3u); /* imported before */
    assert_int_equal(xsa_sim_page_access((uintptr_t)qc), 2u); /* device 1's import: not device 0's memory */
    OK(xsa_ipc_export(b, &hb));
    OK(xsa_ipc_import(&hb, 0, &qb));
    assert_int_equal(xsa_sim_page_access((uintptr_t)qb), 3u); /* imported after */
    void *bytes = NULL, *base = NULL;
    size_t len = 0, offset = 0;
    OK(xsa_ipc_share(b, &bytes, &len, &offset));
    OK(xsa_ipc_open(bytes, len, 0, &base));
    assert_int_equal(xsa_sim_page_access((uintptr_t)base), 3u);
    INVARIANTS(0);
    OK(xsa_ipc_close(base));
    free(bytes);
    xsa_ipc_handle_close(&ha);
    xsa_ipc_handle_close(&hb);
    xsa_ipc_handle_close(&hc);
    OK(xsa_ipc_close(qa));
    OK(xsa_ipc_close(qb));
    OK(xsa_ipc_close(qc));
    OK(xsa_free(a));
    OK(xsa_free(b));
    OK(xsa_free(c));
}

/* A driver error granting the peer on imported memory fails the call and
 * leaves the import as it was; calling again completes the grant. Device
 * 0's pool has nothing mapped, so the import's grant is the only call. */
static void test_import_grant_fails_then_completes(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    void *a = alloc(2 * MiB, 1, S0), *q = NULL;
    xsa_ipc_handle h;
    OK(xsa_ipc_export(a, &h));
    OK(xsa_ipc_import(&h, 0, &q));
    xsa_ipc_handle_close(&h);
    xsa_sim_fail_call(XSA_DRV_mem_set_access, 1, XSA_CU_ERROR_UNKNOWN);
    FAILS(XSA_ERROR_DRIVER, xsa_enable_peer_access(0, 1), "imported memory");
    assert_int_equal(xsa_sim_page_access((uintptr_t)q), 1u);
    INVARIANTS(0);
    OK(xsa_enable_peer_access(0, 1));
    assert_int_equal(xsa_sim_page_access((uintptr_t)q), 3u);
    INVARIANTS(0);
    OK(xsa_ipc_close(q));
    OK(xsa_free(a));
}

/* A revoked export unpins at once; a pinned block waiting for record_stream
 * events too returns only when both are over. */
static void test_revoke_and_events(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    xsa_sim_set_eager_events(0);
    void *blk = alloc(4 * MiB, 0, S0), *keep = alloc(2 * MiB, 0, S0);
    OK(xsa_record_stream(blk, S1));
    xsa_ipc_handle h;
    OK(xsa_ipc_export(blk, &h));
    OK(xsa_free(blk));
    OK(xsa_ipc_revoke(&h));
    assert_int_equal(stats(0).active_bytes[XSA_STAT_ALL].current, 6 * MiB); /* the event is pending */
    INVARIANTS(0);
    xsa_sim_complete_all();
    void *after = alloc(4 * MiB, 0, S0);
    assert_ptr_equal(after, blk);
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_revoke(&h), "not pending");
    xsa_ipc_handle_close(&h);
    INVARIANTS(0);
    OK(xsa_free(after));
    OK(xsa_free(keep));
}

/* ---- many pages over a socket ---- */

static void round_trip(int type, void *blk, size_t size, int pages) {
    xsa_ipc_handle h, got;
    OK(xsa_ipc_export(blk, &h));
    assert_int_equal(h.n_pages, pages);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, type, 0, sv), 0);
    OK(xsa_ipc_send(sv[0], &h));
    xsa_ipc_handle_close(&h);
    OK(xsa_ipc_recv(sv[1], &got));
    close(sv[0]);
    close(sv[1]);
    assert_int_equal(got.n_pages, pages);
    assert_true(got.n_handles == pages && got.fds[pages - 1] >= 0 && got.fds[pages] == -1 && got.state_fd >= 0);
    void *q = NULL;
    OK(xsa_ipc_import(&got, 0, &q));
    xsa_ipc_handle_close(&got);
    assert_true(xsa_fixture_filled(q, size, 'M'));
    OK(xsa_ipc_close(q));
}

static void test_many_pages_over_a_socket(void **state) {
    (void)state;
    sim(1, 64 * KiB, 1); /* small pages: many fds, several messages */
    OK(xsa_init("ipc_handles:True"));
    size_t size = 600 * 64 * KiB;
    void *blk = alloc(size, 0, S0);
    xsa_fixture_fill(blk, size, 'M');
    round_trip(SOCK_STREAM, blk, size, 600);
    round_trip(SOCK_SEQPACKET, blk, size, 600);
    INVARIANTS(0);
    OK(xsa_free(blk));
    /* More pages than a handle carries. */
    void *huge = alloc((XSA_IPC_MAX_PAGES + 1) * 64 * KiB, 0, S1);
    xsa_ipc_handle h;
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_export(huge, &h), "at most 1024");
    OK(xsa_free(huge));
}

/* Physical handles of several pages: exported whole, one fd each, from the
 * one the block starts inside of. */
static void test_multi_page_handles(void **state) {
    (void)state;
    /* Handles hold 1/8 of the headroom: 64 MiB x 1 / 8 = 4 pages. */
    OK(xsa_init("ipc_handles:True,page_recycling_headroom:1"));
    OK(xsa_free(alloc(64 * MiB, 0, S0)));
    void *pad = alloc(3 * MiB, 0, S0), *blk = alloc(10 * MiB, 0, S0); /* pages 1-6 of two 4-page handles */
    xsa_fixture_fill(blk, 10 * MiB, 'H');
    xsa_ipc_handle h;
    OK(xsa_ipc_export(blk, &h));
    assert_true(h.n_handles == 2 && h.pages[0] == 4 && h.pages[1] == 4 && h.n_pages == 8);
    assert_true(h.fds[1] >= 0 && h.fds[2] == -1 && h.offset == 3 * MiB);
    xsa_ipc_handle got;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    OK(xsa_ipc_send(sv[0], &h));
    xsa_ipc_handle_close(&h);
    OK(xsa_ipc_recv(sv[1], &got));
    close(sv[0]);
    close(sv[1]);
    assert_true(got.n_handles == 2 && got.fds[1] >= 0 && got.fds[2] == -1);
    void *q = NULL;
    OK(xsa_ipc_import(&got, 0, &q));
    xsa_ipc_handle_close(&got);
    assert_true(xsa_fixture_filled(q, 10 * MiB, 'H'));
    xsa_fixture_fill(q, 10 * MiB, 'I');
    assert_true(xsa_fixture_filled(blk, 10 * MiB, 'I'));
    INVARIANTS(0);
    OK(xsa_ipc_close(q));
    OK(xsa_free(blk));
    OK(xsa_free(pad));
    INVARIANTS(0);
}

/* ---- bad and stale handles ---- */

static void test_bad_handles(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    void *blk = alloc(4 * MiB, 0, S0);
    xsa_ipc_handle h, bad;
    void *q = (void *)1;
    FAILS(XSA_ERROR_INVALID_POINTER, xsa_ipc_export((void *)0x1234, &h), "not a live allocation");
    FAILS(XSA_ERROR_INVALID_POINTER, xsa_ipc_export((char *)blk + 512, &h), "not a live allocation");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_export(blk, NULL), "NULL");
    OK(xsa_ipc_export(blk, &h));
    bad = h;
    bad.magic = 0;
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&bad, 0, &q), "not an xsalloc IPC handle");
    assert_null(q);
    bad = h;
    bad.n_pages = 0;
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&bad, 0, &q), "page count");
    bad = h;
    bad.size = 5 * MiB;
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&bad, 0, &q), "offset and size");
    bad = h;
    bad.state_fd = -1;
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&bad, 0, &q), "closed");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_send(-1, &bad), "bad handle");
    bad = h;
    bad.state_fd = h.fds[0]; /* a page, not a state */
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&bad, 0, &q), "not an export's state");
    FAILS(XSA_ERROR_INVALID_DEVICE, xsa_ipc_import(&h, 2, &q), "device 2");
    /* A state of another export. */
    void *blk2 = alloc(2 * MiB, 0, S1);
    xsa_ipc_handle h2;
    OK(xsa_ipc_export(blk2, &h2));
    bad = h;
    bad.state_fd = h2.state_fd;
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&bad, 0, &q), "another export");
    /* A page fd that is not an exported handle: the driver refuses, and the
     * export is over (its importer got nothing). */
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    bad = h2;
    bad.fds[0] = devnull;
    FAILS(XSA_ERROR_DRIVER, xsa_ipc_import(&bad, 0, &q), "cuMemImportFromShareableHandle");
    close(devnull);
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&h2, 0, &q), "already closed");
    FAILS(XSA_ERROR_INVALID_POINTER, xsa_ipc_close((void *)0x1234), "not a pointer returned by xsa_ipc_import");
    xsa_ipc_handle_close(&h2);
    xsa_ipc_handle_close(&h);
    /* A received handle that is cut short, or not a handle at all. */
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(write(sv[0], "junk", 4), 4);
    close(sv[0]);
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_recv(sv[1], &bad), "closed mid-handle");
    assert_int_equal(bad.state_fd, -1);
    close(sv[1]);
    INVARIANTS(0);
    OK(xsa_free(blk));
    OK(xsa_free(blk2));
}

static void test_stale_handles(void **state) {
    (void)state;
    OK(xsa_init("ipc_handles:True"));
    void *blk = alloc(4 * MiB, 0, S0);
    xsa_ipc_handle h, r, gone;
    void *q = NULL, *q2 = NULL;
    OK(xsa_ipc_export(blk, &h));
    OK(xsa_ipc_import(&h, 0, &q));
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&h, 0, &q2), "already imported");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_revoke(&h), "is imported");
    FAILS(XSA_ERROR_INVALID_POINTER, xsa_free(q), "not a live allocation"); /* not the allocator's */
    OK(xsa_ipc_close(q));
    FAILS(XSA_ERROR_INVALID_POINTER, xsa_ipc_close(q), "already closed");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&h, 0, &q2), "already closed");
    xsa_ipc_handle_close(&h);
    OK(xsa_ipc_export(blk, &r));
    OK(xsa_ipc_revoke(&r));
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&r, 0, &q2), "already revoked");
    xsa_ipc_handle_close(&r);
    /* The exporter shuts down: its pending exports become stale. */
    OK(xsa_ipc_export(blk, &gone));
    OK(xsa_shutdown());
    OK(xsa_init("ipc_handles:True"));
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_ipc_import(&gone, 0, &q2), "already revoked");
    xsa_ipc_handle_close(&gone);
}

/* ---- IPC off ---- */

static void test_export_refused_without_ipc(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *blk = alloc(4 * MiB, 0, S0);
    xsa_ipc_handle h;
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_ipc_export(blk, &h), "ipc_handles:True");
    OK(xsa_free(blk));
    OK(xsa_shutdown());
    OK(xsa_init("expandable_segments:False"));
    blk = alloc(4 * MiB, 0, S0);
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_ipc_export(blk, &h), "classic cuMemAlloc segment");
    OK(xsa_free(blk));
}

/* Runs fn with stderr going to a temporary file; returns what it wrote. */
static char *capture_stderr(void (*fn)(void)) {
    static char text[4096];
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t n = (size_t)pread(fileno(tmp), text, sizeof text - 1, 0);
    text[n < sizeof text ? n : 0] = '\0';
    fclose(tmp);
    return text;
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Creates both devices' pools (where warnings are printed); no assertion
 * runs while stderr is captured. */
static void *on_device[3];
static xsa_status alloc_status;

static void alloc_on_both_devices(void) {
    xsa_device_stats unused;
    alloc_status = xsa_init("ipc_handles:True");
    /* Both pools first: their probes are the first two cuMemCreate calls. */
    for (int d = 0; d < 2 && alloc_status == XSA_SUCCESS; d++) alloc_status = xsa_get_stats(d, &unused);
    void *where[3][2] = {{NULL, S0}, {NULL, S1}, {(void *)1, S0}};
    for (int i = 0; i < 3 && alloc_status == XSA_SUCCESS; i++)
        alloc_status = xsa_malloc(&on_device[i], 4 * MiB, where[i][0] ? 1 : 0, where[i][1]);
}

static void assert_ipc_fell_back(const char *text) {
    OK(alloc_status);
    if (count(text, "ipc_handles falls back") != 2) fail_msg("want one warning per device, got: %s", text);
    assert_int_equal(count(text, "device 0"), 1);
    assert_int_equal(count(text, "device 1"), 1);
    xsa_ipc_handle h;
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_ipc_export(on_device[0], &h), "fell back");
    for (int i = 0; i < 3; i++) OK(xsa_free(on_device[i]));
    INVARIANTS(0);
}

static void test_fallback_when_exportable_refused(void **state) {
    (void)state;
    /* Device attribute 103 says no. */
    sim(2, 2 * MiB, 0);
    assert_ipc_fell_back(capture_stderr(alloc_on_both_devices));
    OK(xsa_shutdown());
    /* The attribute says yes but cuMemCreate refuses exportable handles. */
    sim(2, 2 * MiB, 1);
    xsa_sim_fail_call(XSA_DRV_mem_create, 1, XSA_CU_ERROR_NOT_SUPPORTED);
    xsa_sim_fail_call(XSA_DRV_mem_create, 2, XSA_CU_ERROR_INVALID_VALUE);
    assert_ipc_fell_back(capture_stderr(alloc_on_both_devices));
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_export_import_across_fork),
        T(test_pinned_until_importer_closes),
        T(test_freed_before_import),
        T(test_imports_granted_to_peers),
        T(test_import_grant_fails_then_completes),
        T(test_revoke_and_events),
        T(test_many_pages_over_a_socket),
        T(test_multi_page_handles),
        T(test_bad_handles),
        T(test_stale_handles),
        T(test_export_refused_without_ipc),
        T(test_fallback_when_exportable_refused),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
