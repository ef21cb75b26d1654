/*
 * pause_test: tagged memory pools paused and resumed at the same addresses
 * (pool/pause.c, pool/backup.c) on the simulated driver, whose device
 * memory is host memory at the device address: bytes written before a
 * pause are compared after the resume, a kernel on a paused page is a bad
 * launch, and an unmap under a kernel still queued is counted. Every step
 * is followed by the pool's and the simulated driver's invariant checkers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pool/pause.h"
#include "tests/pool/pool_fixture.h"

#define S2 ((void *)0x2002)
#define S3 ((void *)0x3003)
static const xsa_mempool_id M1 = {0, 1}, M2 = {0, 2};
enum { KV = 1, WEIGHTS = 2 };

/* Memory pool id in use, tagged. */
static void tagged_pool(xsa_pool *p, xsa_mempool_id id, uint32_t tag, uint32_t flags) {
    assert_int_equal(xsa_pool_mempool_create(p, id, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_pause_set_tag(p, id, tag, "tag", flags, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
}

/* An allocation in memory pool id, as torch.cuda.use_mem_pool makes one. */
static void *alloc_in(xsa_pool *p, xsa_mempool_id id, size_t size, void *stream) {
    pool_begin(p, id, NULL, true);
    void *ptr = alloc(p, size, stream);
    pool_end(p, id);
    pool_drop(p, id);
    return ptr;
}

static void fill(void *ptr, size_t size, unsigned seed) {
    for (size_t i = 0; i < size; i++) ((unsigned char *)ptr)[i] = (unsigned char)(seed + i * 7);
}

static bool holds(const void *ptr, size_t size, unsigned seed) {
    for (size_t i = 0; i < size; i++)
        if (((const unsigned char *)ptr)[i] != (unsigned char)(seed + i * 7)) return false;
    return true;
}

static void pause_ok(xsa_pool *p, uint32_t tag, unsigned flags) {
    xsa_pool_status st = xsa_pause_tag(p, tag, flags, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("pause: %d %s", st, err);
    CHECK(p);
}

static void resume_ok(xsa_pool *p, uint32_t tag, bool retain) {
    xsa_pool_status st = xsa_resume_tag(p, tag, retain, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("resume: %d %s", st, err);
    CHECK(p);
}

static xsa_sim_violations violations(void) {
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    return v;
}

/* ---- the round trip ---- */

static void round_trip(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP);
    tagged_pool(p, M2, KV, 0);
    void *w = alloc_in(p, M1, 6 * MiB + 100, S1), *small = alloc_in(p, M1, 1000, S1);
    void *kv = alloc_in(p, M2, 8 * MiB, S1), *other = alloc(p, 4 * MiB, S1);
    fill(w, 6 * MiB + 100, 1);
    fill(small, 1000, 2);
    fill(kv, 8 * MiB, 3);
    fill(other, 4 * MiB, 4);
    xsa_device_stats before = stats(p);
    size_t device_before = usage().handle_bytes;

    pause_ok(p, 0, 0); /* every tag: weights backed up, the KV cache not */
    xsa_device_stats paused = stats(p);
    int64_t weights_pages = 8 * MiB, small_pages = 2 * MiB, kv_pages = 8 * MiB;
    int64_t gone = weights_pages + small_pages + kv_pages;
    assert_int_equal(paused.paused_bytes.current, gone);
    assert_int_equal(paused.reserved_bytes[XSA_STAT_ALL].current, before.reserved_bytes[XSA_STAT_ALL].current - gone);
    assert_int_equal(usage().handle_bytes, device_before - (size_t)gone);
    /* Only the untagged allocation is still allocated memory. */
    assert_int_equal(paused.allocated_bytes[XSA_STAT_ALL].current, 4 * MiB);
    assert_int_equal(paused.allocation[XSA_STAT_ALL].current, 1);
    assert_int_equal(xsa_pause_paused_bytes(p, WEIGHTS), (size_t)(weights_pages + small_pages));
    assert_int_equal(xsa_pause_paused_bytes(p, KV), (size_t)kv_pages);
    /* GPU work on a paused page is a bad launch; the rest runs. */
    assert_int_equal(xsa_sim_launch(S1, (xsa_devptr)(uintptr_t)w, 64), XSA_CU_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(violations().bad_launches, 1);
    assert_int_equal(xsa_sim_launch(S1, (xsa_devptr)(uintptr_t)other, 64), XSA_CU_SUCCESS);
    assert_true(holds(other, 4 * MiB, 4));

    xsa_pause_report r = xsa_pause_last_report(p, false);
    assert_int_equal(r.pools, 2);
    assert_int_equal(r.pages, (uint64_t)gone / (2 * MiB));
    assert_int_equal(r.copied_bytes, 6 * MiB + 100 + 1000);
    resume_ok(p, 0, false);
    r = xsa_pause_last_report(p, true);
    assert_int_equal(r.pages, (uint64_t)gone / (2 * MiB));
    assert_int_equal(r.copied_bytes, 6 * MiB + 100 + 1000);
    xsa_device_stats after = stats(p);
    assert_int_equal(after.paused_bytes.current, 0);
    assert_int_equal(after.reserved_bytes[XSA_STAT_ALL].current, before.reserved_bytes[XSA_STAT_ALL].current);
    assert_int_equal(after.allocated_bytes[XSA_STAT_ALL].current, before.allocated_bytes[XSA_STAT_ALL].current);
    assert_int_equal(after.requested_bytes[XSA_STAT_ALL].current, before.requested_bytes[XSA_STAT_ALL].current);
    assert_int_equal(after.active[XSA_STAT_ALL].current, before.active[XSA_STAT_ALL].current);
    assert_int_equal(usage().handle_bytes, device_before);
    /* Same addresses; the backed-up bytes are back, the others are not. */
    assert_true(holds(w, 6 * MiB + 100, 1));
    assert_true(holds(small, 1000, 2));
    assert_false(holds(kv, 8 * MiB, 3));
    assert_int_equal(xsa_sim_launch(S1, (xsa_devptr)(uintptr_t)kv, 64), XSA_CU_SUCCESS);
    assert_int_equal(usage().host_allocs, 0); /* no retention: the host copies went */
    xsa_sim_complete_all();
    release(p, w);
    release(p, small);
    release(p, kv);
    release(p, other);
    teardown(p);
}

static void test_round_trip(void **state) {
    (void)state;
    run_both(round_trip);
}

/* Pausing one tag leaves the other alone; a paused pool pauses once. */
static void test_tags_are_separate(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP);
    tagged_pool(p, M2, KV, 0);
    void *w = alloc_in(p, M1, 4 * MiB, S1), *kv = alloc_in(p, M2, 4 * MiB, S1);
    fill(kv, 4 * MiB, 9);
    pause_ok(p, WEIGHTS, 0);
    uint64_t unmaps = driver_calls(XSA_DRV_mem_unmap);
    pause_ok(p, WEIGHTS, 0);
    assert_int_equal(driver_calls(XSA_DRV_mem_unmap), unmaps);
    assert_true(holds(kv, 4 * MiB, 9));
    assert_int_equal(xsa_pause_paused_bytes(p, KV), 0);
    resume_ok(p, KV, false); /* nothing of KV is paused: nothing happens */
    assert_int_equal(stats(p).paused_bytes.current, 4 * MiB);
    resume_ok(p, WEIGHTS, false);
    release(p, w);
    release(p, kv);
    teardown(p);
}

/* ---- waiting for the work ---- */

/* Kernels still queued on the pool's stream and on a stream recorded with
 * record_stream are waited for; a stream that never used the pool is not. */
static void test_pause_waits_for_its_streams(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, KV, 0);
    void *kv = alloc_in(p, M1, 4 * MiB, S1), *other = alloc(p, 2 * MiB, S3);
    assert_int_equal(xsa_pool_record_stream(p, kv, S2, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_sim_launch(S1, (xsa_devptr)(uintptr_t)kv, 1 * MiB), XSA_CU_SUCCESS);
    assert_int_equal(xsa_sim_launch(S2, (xsa_devptr)(uintptr_t)kv + 1 * MiB, 1 * MiB), XSA_CU_SUCCESS);
    assert_int_equal(xsa_sim_launch(S3, (xsa_devptr)(uintptr_t)other, 1 * MiB), XSA_CU_SUCCESS);
    pause_ok(p, KV, 0);
    xsa_sim_violations v = violations();
    if (v.unmapped_in_use) fail_msg("%s", v.first);
    assert_int_equal(usage().pending_kernels, 1); /* S3's: not the whole device */
    assert_int_equal(driver_calls(XSA_DRV_ctx_synchronize), 0);
    xsa_sim_complete_all();
    resume_ok(p, KV, false);
    release(p, kv);
    release(p, other);
    teardown(p);
}

/* A block freed with record_stream uses still waits for S2: the pause
 * waits for it, and it is back in the cache (not mapped again). */
static void test_pause_completes_pending_frees(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, KV, 0);
    void *keep = alloc_in(p, M1, 2 * MiB, S1), *gone = alloc_in(p, M1, 4 * MiB, S1);
    assert_int_equal(xsa_pool_record_stream(p, gone, S2, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_sim_launch(S2, (xsa_devptr)(uintptr_t)gone, 1 * MiB), XSA_CU_SUCCESS);
    release(p, gone);
    pause_ok(p, KV, 0);
    assert_int_equal(violations().unmapped_in_use, 0);
    assert_int_equal(stats(p).paused_bytes.current, 2 * MiB); /* the freed block's pages are not kept */
    resume_ok(p, KV, false);
    assert_int_equal(usage().handle_bytes, 2 * MiB);
    release(p, keep);
    teardown(p);
}

/* A graph captured into the pool: the pause waits for the whole device,
 * and every page comes back (its replays use the free blocks). */
static void test_captured_pool_keeps_its_pages(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, KV, 0);
    pool_begin(p, M1, S1, true);
    assert_int_equal(drv->stream_begin_capture(S1), XSA_CU_SUCCESS);
    void *out = alloc(p, 2 * MiB, S1), *scratch = alloc(p, 6 * MiB, S1);
    release(p, scratch);
    xsa_graph g = NULL;
    assert_int_equal(drv->stream_end_capture(S1, &g), XSA_CU_SUCCESS);
    assert_int_equal(drv->graph_destroy(g), XSA_CU_SUCCESS);
    pool_end(p, M1);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(usage().handle_bytes, 8 * MiB); /* the graph replays over its free blocks */
    uint64_t syncs = driver_calls(XSA_DRV_ctx_synchronize);
    pause_ok(p, KV, 0);
    assert_int_equal(driver_calls(XSA_DRV_ctx_synchronize), syncs + 1);
    assert_int_equal(stats(p).paused_bytes.current, 8 * MiB);
    resume_ok(p, KV, false);
    assert_int_equal(usage().handle_bytes, 8 * MiB);
    release(p, out);
    pool_drop(p, M1);
    teardown(p);
}

/* empty_cache gives back a tagged pool's cache, unless a graph was captured into it. */
static void test_empty_cache_releases_tagged_cache(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, KV, 0);
    void *keep = alloc_in(p, M1, 2 * MiB, S1), *gone = alloc_in(p, M1, 6 * MiB, S1);
    release(p, gone);
    assert_int_equal(usage().handle_bytes, 8 * MiB);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(usage().handle_bytes, 2 * MiB);
    release(p, keep);
    teardown(p);
}

/* A global-mode capture on another stream (another thread's, or another
 * device's) is not invalidated by a pause and resume with backup: they run
 * in relaxed capture mode. */
static void test_pause_beside_a_capture(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP);
    void *w = alloc_in(p, M1, 3 * MiB, S1);
    fill(w, 3 * MiB, 11);
    assert_int_equal(drv->stream_begin_capture(S3), XSA_CU_SUCCESS);
    pause_ok(p, WEIGHTS, 0);
    resume_ok(p, WEIGHTS, false);
    xsa_graph g = NULL;
    assert_int_equal(drv->stream_end_capture(S3, &g), XSA_CU_SUCCESS);
    assert_non_null(g);
    assert_int_equal(drv->graph_destroy(g), XSA_CU_SUCCESS);
    assert_int_equal(violations().failed_captures, 0);
    assert_true(holds(w, 3 * MiB, 11));
    release(p, w);
    teardown(p);
}

/* ---- while paused ---- */

static void test_free_while_paused(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP);
    void *a = alloc_in(p, M1, 4 * MiB, S1);
    fill(a, 4 * MiB, 5);
    pause_ok(p, WEIGHTS, 0);
    assert_int_equal(usage().host_allocs, 1);
    release(p, a); /* its copy goes, and its pages */
    xsa_device_stats s = stats(p);
    assert_int_equal(s.paused_bytes.current, 0);
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.allocation[XSA_STAT_ALL].freed, 1);
    assert_int_equal(usage().host_allocs, 0);
    resume_ok(p, WEIGHTS, false);
    assert_int_equal(usage().handle_bytes, 0);
    assert_int_equal(xsa_pool_free(p, a, err, sizeof err), XSA_POOL_BAD_POINTER);
    teardown(p);
}

static void test_malloc_in_paused_pool_is_refused(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, KV, 0);
    void *a = alloc_in(p, M1, 4 * MiB, S1);
    pause_ok(p, KV, 0);
    pool_begin(p, M1, NULL, true);
    void *ptr = NULL;
    assert_int_equal(xsa_pool_malloc(p, 1000, S1, &ptr, err, sizeof err), XSA_POOL_INVALID);
    assert_non_null(strstr(err, "paused"));
    CHECK(p);
    /* Nor may pausing or resuming happen during a routing. */
    assert_int_equal(xsa_resume_tag(p, KV, false, err, sizeof err), XSA_POOL_INVALID);
    assert_non_null(strstr(err, "under way"));
    pool_end(p, M1);
    pool_drop(p, M1);
    resume_ok(p, KV, false);
    release(p, a);
    teardown(p);
}

/* A paused pool dropped by its last user goes with its last block. */
static void test_release_paused_pool(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, KV, XSA_TAG_CPU_BACKUP);
    void *a = alloc_in(p, M1, 4 * MiB, S1), *b = alloc_in(p, M1, 3 * MiB, S1);
    pause_ok(p, KV, 0);
    pool_drop(p, M1);
    release(p, a);
    assert_int_equal(usage().reservations, 1);
    release(p, b);
    assert_int_equal(usage().reservations, 0); /* the segment and the record went */
    assert_int_equal(stats(p).paused_bytes.current, 0);
    assert_int_equal(usage().host_allocs, 0);
    teardown(p);
}

/* ---- resume ---- */

/* Out of device memory (another user took it): nothing is resumed, what
 * was mapped is undone, the backups stay, and a retry once memory is back
 * succeeds with the bytes intact. */
static void test_resume_out_of_memory_is_recoverable(void **state) {
    (void)state;
    xsa_pool *p = make_pool(64 * MiB, true, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP);
    void *w1 = alloc_in(p, M1, 10 * MiB, S1), *w2 = alloc_in(p, M1, 20 * MiB, S2);
    fill(w1, 10 * MiB, 6);
    fill(w2, 20 * MiB, 16);
    pause_ok(p, WEIGHTS, 0);
    xsa_mem_handle hog;
    assert_int_equal(drv->mem_create(&hog, 40 * MiB, 0, 0), XSA_CU_SUCCESS);
    xsa_device_stats s = stats(p);
    assert_int_equal(xsa_resume_tag(p, WEIGHTS, false, err, sizeof err), XSA_POOL_OOM);
    assert_non_null(strstr(err, "stays paused"));
    CHECK(p);
    xsa_device_stats t = stats(p);
    assert_int_equal(t.paused_bytes.current, s.paused_bytes.current);
    assert_int_equal(t.reserved_bytes[XSA_STAT_ALL].current, s.reserved_bytes[XSA_STAT_ALL].current);
    assert_int_equal(t.allocated_bytes[XSA_STAT_ALL].current, s.allocated_bytes[XSA_STAT_ALL].current);
    assert_int_equal(t.num_device_alloc, s.num_device_alloc);
    assert_int_equal(usage().handle_bytes, 40 * MiB); /* w1's run was mapped, then undone */
    assert_int_equal(usage().host_allocs, 1);
    assert_int_equal(drv->mem_release(hog), XSA_CU_SUCCESS);
    resume_ok(p, WEIGHTS, false);
    assert_true(holds(w1, 10 * MiB, 6));
    assert_true(holds(w2, 20 * MiB, 16));
    release(p, w1);
    release(p, w2);
    teardown(p);
}

static void fraction_half(xsa_pool_options *o) { o->memory_fraction = 0.5; }

static void test_resume_past_the_memory_fraction(void **state) {
    (void)state;
    xsa_pool *p = make_pool(64 * MiB, true, fraction_half);
    tagged_pool(p, M1, KV, 0);
    void *kv = alloc_in(p, M1, 20 * MiB, S1);
    pause_ok(p, KV, 0);
    void *hog = alloc(p, 20 * MiB, S1);
    assert_int_equal(xsa_resume_tag(p, KV, false, err, sizeof err), XSA_POOL_OOM);
    assert_non_null(strstr(err, "memory fraction"));
    CHECK(p);
    release(p, hog);
    resume_ok(p, KV, false);
    release(p, kv);
    teardown(p);
}

/* Retention: the copy stays after resume, and the next pause refreshes it
 * in place; the host memory goes with the block. */
static void test_retained_backup(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP | XSA_TAG_BACKUP_MMAP);
    void *w = alloc_in(p, M1, 3 * MiB, S1);
    fill(w, 3 * MiB, 7);
    pause_ok(p, WEIGHTS, 0);
    assert_int_equal(usage().host_registrations, 1);
    void *host = NULL;
    assert_int_equal(xsa_pause_cpu_backup(p, (uintptr_t)w + 100, 1000, &host, err, sizeof err), XSA_POOL_OK);
    assert_true(holds((char *)host - 100, 3 * MiB, 7));
    assert_int_equal(xsa_pause_cpu_backup(p, (uintptr_t)w + 100, 3 * MiB, &host, err, sizeof err), XSA_POOL_INVALID);
    resume_ok(p, WEIGHTS, true);
    void *kept = NULL;
    assert_int_equal(xsa_pause_cpu_backup(p, (uintptr_t)w, 1, &kept, err, sizeof err), XSA_POOL_OK);
    assert_non_null(kept);
    fill(w, 3 * MiB, 8);
    pause_ok(p, WEIGHTS, 0);
    void *again = NULL;
    assert_int_equal(xsa_pause_cpu_backup(p, (uintptr_t)w, 1, &again, err, sizeof err), XSA_POOL_OK);
    assert_ptr_equal(again, kept);
    assert_true(holds(again, 3 * MiB, 8));
    assert_int_equal(usage().host_registrations, 1);
    resume_ok(p, WEIGHTS, false);
    assert_int_equal(xsa_pause_cpu_backup(p, (uintptr_t)w, 1, &again, err, sizeof err), XSA_POOL_OK);
    assert_null(again);
    assert_int_equal(usage().host_registrations, 0);
    release(p, w);
    teardown(p);
}

/* Neighbouring blocks are copied with one call each way, their bytes
 * intact; once a block between two kept copies is freed they take two. */
static void test_neighbours_copy_in_one_call(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP);
    size_t sizes[3] = {3 * MiB + 1000, 2 * MiB + 24, 5 * MiB + 333};
    void *b[3];
    for (int i = 0; i < 3; i++) {
        b[i] = alloc_in(p, M1, sizes[i], S1);
        fill(b[i], sizes[i], (unsigned)(20 + i));
    }
    uint64_t dtoh = driver_calls(XSA_DRV_memcpy_dtoh_async), htod = driver_calls(XSA_DRV_memcpy_htod_async);
    pause_ok(p, WEIGHTS, 0);
    assert_int_equal(driver_calls(XSA_DRV_memcpy_dtoh_async) - dtoh, 1);
    resume_ok(p, WEIGHTS, true);
    assert_int_equal(driver_calls(XSA_DRV_memcpy_htod_async) - htod, 1);
    for (int i = 0; i < 3; i++) assert_true(holds(b[i], sizes[i], (unsigned)(20 + i)));
    release(p, b[1]);
    fill(b[0], sizes[0], 30);
    fill(b[2], sizes[2], 32);
    dtoh = driver_calls(XSA_DRV_memcpy_dtoh_async);
    pause_ok(p, WEIGHTS, 0);
    assert_int_equal(driver_calls(XSA_DRV_memcpy_dtoh_async) - dtoh, 2);
    resume_ok(p, WEIGHTS, false);
    assert_true(holds(b[0], sizes[0], 30));
    assert_true(holds(b[2], sizes[2], 32));
    release(p, b[0]);
    release(p, b[2]);
    teardown(p);
}

/* A pause without backup drops a copy kept from before. */
static void test_discard_drops_kept_copy(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    tagged_pool(p, M1, WEIGHTS, XSA_TAG_CPU_BACKUP);
    void *w = alloc_in(p, M1, 3 * MiB, S1);
    pause_ok(p, WEIGHTS, 0);
    resume_ok(p, WEIGHTS, true);
    assert_int_equal(usage().host_allocs, 1);
    pause_ok(p, WEIGHTS, XSA_PAUSE_DISCARD);
    assert_int_equal(usage().host_allocs, 0);
    resume_ok(p, WEIGHTS, false);
    release(p, w);
    teardown(p);
}

/* ---- tagging ---- */

static void test_tagging_rules(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, false, NULL);
    const xsa_mempool_id global = {0, 0}, missing = {0, 9};
    assert_int_equal(xsa_pause_set_tag(p, global, KV, "kv", 0, err, sizeof err), XSA_POOL_INVALID);
    assert_int_equal(xsa_pause_set_tag(p, missing, KV, "kv", 0, err, sizeof err), XSA_POOL_INVALID);
    /* A pool with classic segments already cannot be tagged. */
    assert_int_equal(xsa_pool_mempool_create(p, M2, err, sizeof err), XSA_POOL_OK);
    void *c = alloc_in(p, M2, 1000, S1);
    assert_int_equal(xsa_pause_set_tag(p, M2, KV, "kv", 0, err, sizeof err), XSA_POOL_UNSUPPORTED);
    assert_non_null(strstr(err, "classic"));
    /* A tagged pool has expandable segments in classic mode too. */
    tagged_pool(p, M1, KV, 0);
    assert_int_equal(xsa_pause_set_tag(p, M1, WEIGHTS, "weights", 0, err, sizeof err), XSA_POOL_INVALID);
    assert_int_equal(xsa_pause_set_tag(p, M1, KV, "kv", XSA_TAG_CPU_BACKUP, err, sizeof err), XSA_POOL_OK);
    void *t = alloc_in(p, M1, 1000, S1);
    xsa_pool_snapshot snap;
    assert_int_equal(xsa_pool_snapshot_take(p, &snap), XSA_POOL_OK);
    for (size_t i = 0; i < snap.n_segments; i++)
        if (snap.segments[i].pool_id.second == 1) assert_true(snap.segments[i].expandable);
    xsa_pool_snapshot_free(&snap);
    pause_ok(p, KV, 0);
    assert_int_equal(xsa_pool_snapshot_take(p, &snap), XSA_POOL_OK);
    size_t paused = 0;
    for (size_t i = 0; i < snap.n_segments; i++) paused += snap.segments[i].paused;
    assert_int_equal(paused, 1);
    xsa_pool_snapshot_free(&snap);
    assert_int_equal(xsa_pause_set_tag(p, M1, KV, "kv", 0, err, sizeof err), XSA_POOL_INVALID);
    resume_ok(p, KV, false);
    release(p, t);
    release(p, c);
    pool_drop(p, M1);
    pool_drop(p, M2);
    teardown(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_tags_are_separate),
        cmocka_unit_test(test_pause_waits_for_its_streams),
        cmocka_unit_test(test_pause_completes_pending_frees),
        cmocka_unit_test(test_captured_pool_keeps_its_pages),
        cmocka_unit_test(test_empty_cache_releases_tagged_cache),
        cmocka_unit_test(test_pause_beside_a_capture),
        cmocka_unit_test(test_free_while_paused),
        cmocka_unit_test(test_malloc_in_paused_pool_is_refused),
        cmocka_unit_test(test_release_paused_pool),
        cmocka_unit_test(test_resume_out_of_memory_is_recoverable),
        cmocka_unit_test(test_resume_past_the_memory_fraction),
        cmocka_unit_test(test_retained_backup),
        cmocka_unit_test(test_neighbours_copy_in_one_call),
        cmocka_unit_test(test_discard_drops_kept_copy),
        cmocka_unit_test(test_tagging_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
