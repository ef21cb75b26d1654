/*
 * mempool_allocator_test: memory pools with an allocator of their own
 * (PyTorch's MemPool(allocator)) and PyTorch's MemPool flags use_on_oom and
 * no_split, on the simulated driver, in expandable and classic mode, with
 * the pool's and the simulated driver's invariant checkers after every
 * step. The allocator is a fake in C that hands out host memory and
 * records every call: which segments came from it, what went back
 * through its free and when it was told it is done.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pool/ipc.h"
#include "pool/own_allocator.h"
#include "tests/pool/pool_fixture.h"

#define S2 ((void *)0x2002)
static const xsa_mempool_id GLOBAL = {0, 0};
static const xsa_mempool_id M1 = {0, 1}, M2 = {0, 2}, M3 = {0, 3};

/* ---- the fake allocator ---- */

#define FAKE_SEGMENTS 64

typedef struct fake_segment {
    void *ptr, *stream;
    size_t size;
} fake_segment;

typedef struct fake {
    int allocs, frees, releases;
    int fail_from, fail_count; /* calls fail_from .. fail_from + fail_count - 1 return NULL */
    int device;                /* as the last call gave it */
    int mode;                  /* the thread's capture mode in the last call */
    fake_segment live[FAKE_SEGMENTS];
    int n_live;
} fake;

/* The calling thread's capture mode, left as it was. */
static int capture_mode(void) {
    int mode = XSA_CAPTURE_MODE_GLOBAL;
    assert_int_equal(XSA_DRV(drv, thread_exchange_capture_mode, &mode), XSA_CU_SUCCESS);
    int back = mode;
    assert_int_equal(XSA_DRV(drv, thread_exchange_capture_mode, &back), XSA_CU_SUCCESS);
    return mode;
}

static void *fake_alloc(void *ctx, size_t size, int device, void *stream) {
    fake *f = ctx;
    int call = ++f->allocs;
    f->device = device;
    f->mode = capture_mode();
    if (call >= f->fail_from && call < f->fail_from + f->fail_count) return NULL;
    assert_true(f->n_live < FAKE_SEGMENTS);
    void *ptr = aligned_alloc(4096, size);
    assert_non_null(ptr);
    f->live[f->n_live++] = (fake_segment){ptr, stream, size};
    return ptr;
}

static void fake_free(void *ctx, void *ptr, size_t size, int device, void *stream) {
    fake *f = ctx;
    f->frees++;
    f->device = device;
    f->mode = capture_mode();
    for (int i = 0; i < f->n_live; i++) {
        if (f->live[i].ptr != ptr) continue;
        if (f->live[i].size != size || f->live[i].stream != stream)
            fail_msg("free(%p): size %zu stream %p, allocated with %zu and %p", ptr, size, stream, f->live[i].size,
                     f->live[i].stream);
        f->live[i] = f->live[--f->n_live];
        free(ptr);
        return;
    }
    fail_msg("free(%p): not allocated by this allocator (or freed twice)", ptr);
}

/* The pool is done with the allocator: every segment must be back. */
static void fake_release(void *ctx) {
    fake *f = ctx;
    f->releases++;
    if (f->n_live) fail_msg("release with %d segments not freed", f->n_live);
}

static void create_own(xsa_pool *p, xsa_mempool_id id, fake *f) {
    memset(f, 0, sizeof *f);
    xsa_mempool_allocator a = {fake_alloc, fake_free, fake_release, f};
    assert_int_equal(xsa_pool_mempool_create_with(p, id, &a, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
}

/* Is ptr inside a segment the fake handed out? */
static bool from_fake(const fake *f, const void *ptr) {
    for (int i = 0; i < f->n_live; i++)
        if ((uintptr_t)ptr >= (uintptr_t)f->live[i].ptr && (uintptr_t)ptr < (uintptr_t)f->live[i].ptr + f->live[i].size)
            return true;
    return false;
}

/* ---- reading the pool ---- */

static bool same(xsa_mempool_id a, xsa_mempool_id b) { return a.first == b.first && a.second == b.second; }

/* Memory pool id's segments in a snapshot: how many, how many of them
 * expandable, and the most blocks one has. */
typedef struct seg_count {
    size_t segments, expandable, most_blocks;
} seg_count;

static seg_count segments_of(xsa_pool *p, xsa_mempool_id id) {
    xsa_pool_snapshot s;
    assert_int_equal(xsa_pool_snapshot_take(p, &s), XSA_POOL_OK);
    seg_count c = {0, 0, 0};
    for (size_t i = 0; i < s.n_segments; i++) {
        if (!same(s.segments[i].pool_id, id)) continue;
        c.segments++;
        c.expandable += s.segments[i].expandable;
        if (s.segments[i].n_blocks > c.most_blocks) c.most_blocks = s.segments[i].n_blocks;
    }
    xsa_pool_snapshot_free(&s);
    return c;
}

/* The memory pool whose segment holds ptr. */
static xsa_mempool_id pool_of(xsa_pool *p, const void *ptr) {
    xsa_pool_snapshot s;
    assert_int_equal(xsa_pool_snapshot_take(p, &s), XSA_POOL_OK);
    xsa_mempool_id id = {99, 99};
    for (size_t i = 0; i < s.n_segments; i++)
        if ((uintptr_t)ptr >= s.segments[i].addr && (uintptr_t)ptr < s.segments[i].addr + s.segments[i].total_size)
            id = s.segments[i].pool_id;
    xsa_pool_snapshot_free(&s);
    return id;
}

static int64_t allocated(xsa_pool *p) { return stats(p).allocated_bytes[XSA_STAT_ALL].current; }

static void use_on(xsa_pool *p, void *ptr, void *stream) {
    assert_int_equal(xsa_pool_record_stream(p, ptr, stream, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
}

/* A malloc that must run out of memory, changing nothing it reports. */
static void oom(xsa_pool *p, size_t size, void *stream) {
    xsa_device_stats before = stats(p);
    void *ptr = NULL;
    xsa_pool_status st = xsa_pool_malloc(p, size, stream, &ptr, err, sizeof err);
    if (st != XSA_POOL_OOM) fail_msg("malloc(%zu) gave %d (%p), not out of memory", size, st, ptr);
    CHECK(p);
    xsa_device_stats after = stats(p);
    assert_int_equal(after.allocated_bytes[XSA_STAT_ALL].current, before.allocated_bytes[XSA_STAT_ALL].current);
    assert_int_equal(after.num_ooms, before.num_ooms + 1);
}

/* PyTorch's use_mem_pool: a routing (which adds a use), then its end and
 * the use dropped. */
static void route(xsa_pool *p, xsa_mempool_id id, void *stream) { pool_begin(p, id, stream, false); }
static void unroute(xsa_pool *p, xsa_mempool_id id) {
    pool_end(p, id);
    pool_drop(p, id);
}

/* ---- segments from the allocator ---- */

static void segments_from_allocator(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    fake f;
    create_own(p, M1, &f);
    uint64_t mem_allocs = driver_calls(XSA_DRV_mem_alloc), creates = driver_calls(XSA_DRV_mem_create);
    route(p, M1, S1);
    void *a = alloc(p, 1 * MiB, S1);
    /* A classic segment's size, for the request's stream, on device 0. */
    assert_int_equal(f.allocs, 1);
    assert_int_equal(f.live[0].size, 2 * MiB);
    assert_ptr_equal(f.live[0].stream, S1);
    assert_int_equal(f.device, 0);
    assert_ptr_equal(a, f.live[0].ptr);
    void *b = alloc(p, 1 * MiB, S1); /* split off the same segment */
    assert_int_equal(f.allocs, 1);
    assert_ptr_equal(b, (char *)a + MiB);
    void *c = alloc(p, 1 * MiB, S1);
    assert_int_equal(f.allocs, 2);
    void *d = alloc(p, 4 * MiB, S1), *e = alloc(p, 4 * MiB, S1); /* one 20 MiB segment, split */
    assert_int_equal(f.allocs, 3);
    assert_int_equal(f.live[2].size, 20 * MiB);
    assert_ptr_equal(e, (char *)d + 4 * MiB);
    /* PyTorch's classic split rule, in expandable mode too: a rest of
     * 1 MiB or less stays with the block. */
    int64_t before = allocated(p);
    void *h = alloc(p, 23 * MiB / 2, S1);
    assert_int_equal(allocated(p) - before, 12 * MiB);
    release(p, h);
    /* None of it is the device's memory. */
    assert_int_equal(driver_calls(XSA_DRV_mem_alloc), mem_allocs);
    assert_int_equal(driver_calls(XSA_DRV_mem_create), creates);
    void *blocks[] = {a, b, c, d, e};
    for (int i = 0; i < 5; i++) {
        assert_true(from_fake(&f, blocks[i]));
        memset(blocks[i], i, MiB); /* host memory in the fake: writable */
    }
    seg_count sc = segments_of(p, M1);
    assert_int_equal(sc.segments, 3);
    assert_int_equal(sc.expandable, 0);
    /* PyTorch counts the memory as reserved segments. */
    xsa_device_stats s = stats(p);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 24 * MiB);
    assert_int_equal(s.segment[XSA_STAT_SMALL_POOL].current, 2);
    assert_int_equal(s.segment[XSA_STAT_LARGE_POOL].current, 1);
    assert_int_equal(s.num_device_alloc, 3);
    /* Freed blocks are cached in the pool and handed out again (b's
     * memory or the free half of c's segment: best fit, then address). */
    release(p, b);
    void *b2 = alloc(p, 1 * MiB, S1);
    assert_true(b2 == b || b2 == (char *)c + MiB);
    blocks[1] = b2;
    assert_int_equal(f.allocs, 3);
    assert_int_equal(f.frees, 0);
    /* The global pool keeps its own memory. */
    void *g = alloc(p, 1 * MiB, S0);
    assert_true(same(pool_of(p, g), GLOBAL));
    assert_false(from_fake(&f, g));
    release(p, g);
    for (int i = 0; i < 5; i++) release(p, blocks[i]);
    unroute(p, M1);
    pool_drop(p, M1);
    assert_int_equal(f.frees, 3);
    assert_int_equal(f.releases, 1);
    assert_false(xsa_pool_mempool_exists(p, M1, NULL));
    assert_int_equal(reserved(p), 2 * MiB); /* g's memory, cached in the global pool */
    assert_int_equal(stats(p).num_device_free, 3);
    teardown(p);
}

static void test_segments_come_from_the_allocator(void **state) {
    (void)state;
    run_both(segments_from_allocator);
}

/* ---- giving the memory back ---- */

static void empty_cache_gives_back(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    fake f;
    create_own(p, M1, &f);
    route(p, M1, S1);
    void *a = alloc(p, 1 * MiB, S1), *b = alloc(p, 8 * MiB, S1);
    release(p, a);
    release(p, b);
    unroute(p, M1);
    /* In use, the pool keeps its memory. */
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(f.frees, 0);
    assert_int_equal(reserved(p), 22 * MiB);
    /* Released with nothing live, it all goes back through free at once. */
    pool_drop(p, M1);
    assert_int_equal(f.frees, 2);
    assert_int_equal(f.n_live, 0);
    assert_int_equal(f.releases, 1);
    assert_int_equal(reserved(p), 0);
    assert_int_equal(stats(p).num_device_free, 2);

    /* A block whose free waits for record_stream events when the pool is
     * released returns at the next empty_cache, and so does the segment. */
    fake g;
    create_own(p, M2, &g);
    route(p, M2, S1);
    void *c = alloc(p, 1 * MiB, S1);
    use_on(p, c, S2);
    release(p, c);
    unroute(p, M2);
    pool_drop(p, M2);
    assert_int_equal(g.frees, 0);
    assert_true(xsa_pool_mempool_exists(p, M2, NULL));
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(g.frees, 1);
    assert_int_equal(g.releases, 1);
    assert_false(xsa_pool_mempool_exists(p, M2, NULL));
    teardown(p);
}

static void test_empty_cache_gives_segments_back(void **state) {
    (void)state;
    run_both(empty_cache_gives_back);
}

/* PyTorch's test_tensor_delete_after_allocator_delete: the pool is
 * released and the caller drops its allocator while a block lives; the
 * block's free still returns its segment through free, and only then is
 * the allocator told it is done. */
static void block_outlives(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    fake f;
    create_own(p, M1, &f);
    route(p, M1, S1);
    void *a = alloc(p, 16, S1), *x = alloc(p, 8 * MiB, S1);
    release(p, x);
    unroute(p, M1);
    pool_drop(p, M1);
    /* The free segment went back at once, the one holding a stays. */
    assert_int_equal(f.frees, 1);
    assert_int_equal(f.releases, 0);
    assert_true(xsa_pool_mempool_exists(p, M1, NULL));
    assert_int_equal(reserved(p), 2 * MiB);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(f.frees, 1);
    memset(a, 7, 16);
    release(p, a);
    assert_int_equal(f.frees, 2);
    assert_int_equal(f.releases, 1);
    assert_false(xsa_pool_mempool_exists(p, M1, NULL));
    assert_int_equal(reserved(p), 0);
    teardown(p);
}

static void test_block_outlives_the_pool_and_its_allocator(void **state) {
    (void)state;
    run_both(block_outlives);
}

/* Pool teardown returns live memory through free too. */
static void test_destroy_returns_memory_through_free(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    fake f;
    create_own(p, M1, &f);
    route(p, M1, S1);
    alloc(p, 1 * MiB, S1);
    alloc(p, 30 * MiB, S1);
    unroute(p, M1);
    teardown(p);
    assert_int_equal(f.allocs, 2);
    assert_int_equal(f.frees, 2);
    assert_int_equal(f.releases, 1);
}

/* ---- use_on_oom ---- */

/* PyTorch's test_mempool_limited_memory_with_allocator and
 * test_deleted_mempool_not_used_on_oom, with 80 MiB allowed. */
static void use_on_oom(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    xsa_pool_set_memory_fraction(p, (double)(80 * MiB) / (double)GiB);
    fake keep, lend;
    create_own(p, M1, &keep);
    create_own(p, M2, &lend);
    assert_int_equal(xsa_pool_mempool_set_use_on_oom(p, M2, true, err, sizeof err), XSA_POOL_OK);
    route(p, M1, S0);
    void *a = alloc(p, 40 * MiB, S0);
    unroute(p, M1);
    route(p, M2, S0);
    void *b = alloc(p, 40 * MiB, S0);
    unroute(p, M2);
    oom(p, 40 * MiB, S0); /* nothing free anywhere */
    release(p, a);
    release(p, b);
    /* A global miss takes M2's free block, split as in its own pool. */
    void *c = alloc(p, 30 * MiB, S0);
    assert_ptr_equal(c, b);
    assert_true(same(pool_of(p, c), M2));
    assert_int_equal(allocated(p), 30 * MiB);
    oom(p, 30 * MiB, S0); /* M1 lends nothing, M2 has 10 MiB left */
    oom(p, 8 * MiB, S1);  /* M2's 10 MiB are S0's */
    /* Only the global pool borrows: a request routed to another pool does not. */
    route(p, M3, S0);
    oom(p, 8 * MiB, S0);
    unroute(p, M3);
    void *t = alloc(p, 8 * MiB, S0); /* the global miss does */
    assert_true(same(pool_of(p, t), M2));
    release(p, t);
    release(p, c); /* back to M2, merged */
    route(p, M2, S0);
    void *e = alloc(p, 20 * MiB, S0);
    assert_ptr_equal(e, b);
    release(p, e);
    /* A released pool lends nothing: M2 keeps 10 MiB free beside k. */
    void *k = alloc(p, 30 * MiB, S0);
    unroute(p, M2);
    pool_drop(p, M2);
    assert_int_equal(lend.frees, 0);
    oom(p, 8 * MiB, S0);
    release(p, k);
    assert_int_equal(lend.frees, 1);
    assert_int_equal(lend.releases, 1);
    pool_drop(p, M1);
    assert_int_equal(keep.frees, 1);
    /* With the memory back, the global pool has room again. */
    release(p, alloc(p, 40 * MiB, S0));
    teardown(p);
}

static void test_use_on_oom_lends_free_blocks(void **state) {
    (void)state;
    run_both(use_on_oom);
}

/* ---- no_split ---- */

static void no_split(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    fake f;
    create_own(p, M1, &f);
    assert_int_equal(xsa_pool_mempool_set_no_split(p, M1, true, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    route(p, M1, S0);
    void *a = alloc(p, 4 * MiB, S0); /* a whole 20 MiB segment */
    assert_int_equal(allocated(p), 20 * MiB);
    void *b = alloc(p, 4 * MiB, S0); /* another */
    assert_int_equal(f.allocs, 2);
    seg_count sc = segments_of(p, M1);
    assert_int_equal(sc.segments, 2);
    assert_int_equal(sc.most_blocks, 1);
    release(p, a);
    assert_ptr_equal(alloc(p, 1 * MiB + 1, S0), a); /* the cached block, whole */
    assert_int_equal(allocated(p), 40 * MiB);
    assert_int_equal(segments_of(p, M1).most_blocks, 1);
    /* Set before the first allocation, or not at all. */
    assert_int_equal(xsa_pool_mempool_set_no_split(p, M1, false, err, sizeof err), XSA_POOL_INVALID);
    CHECK(p);
    assert_int_equal(xsa_pool_mempool_set_no_split(p, M1, true, err, sizeof err), XSA_POOL_OK);
    unroute(p, M1);
    /* A restore that would split a block is refused; a whole one is not. */
    xsa_restore_delta d;
    xsa_live_block part = {b, 4 * MiB, 4 * MiB, S0}, whole = {b, 20 * MiB, 4 * MiB, S0};
    assert_int_equal(xsa_pool_mempool_restore(p, M1, &part, 1, &d, err, sizeof err), XSA_POOL_INVALID);
    assert_non_null(strstr(err, "no_split"));
    CHECK(p);
    assert_int_equal(xsa_pool_mempool_restore(p, M1, &whole, 1, &d, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    assert_int_equal(d.n_freed, 1); /* a */
    free(d.freed);
    free(d.allocated);
    release(p, b);
    /* A pool of the device's memory with no_split: 1 MiB takes a whole
     * 2 MiB segment (classic) or page (expandable); the split pool M3
     * hands out 1 MiB of its 2 MiB. */
    assert_int_equal(xsa_pool_mempool_create(p, M2, err, sizeof err), XSA_POOL_OK);
    assert_int_equal(xsa_pool_mempool_set_no_split(p, M2, true, err, sizeof err), XSA_POOL_OK);
    route(p, M2, S1);
    int64_t before = allocated(p);
    void *c = alloc(p, 1 * MiB, S1), *c2 = alloc(p, 1 * MiB, S1);
    assert_int_equal(allocated(p) - before, 4 * MiB);
    unroute(p, M2);
    route(p, M3, S1);
    void *s1 = alloc(p, 1 * MiB, S1), *s2 = alloc(p, 1 * MiB, S1);
    assert_int_equal(allocated(p) - before, 6 * MiB);
    assert_ptr_equal(s2, (char *)s1 + MiB);
    unroute(p, M3);
    void *all[] = {c, c2, s1, s2};
    for (int i = 0; i < 4; i++) release(p, all[i]);
    pool_drop(p, M1);
    pool_drop(p, M2); /* M3 went with its last block */
    assert_int_equal(f.frees, 2);
    teardown(p);
}

static void test_no_split_hands_out_whole_blocks(void **state) {
    (void)state;
    run_both(no_split);
}

/* ---- the memory fraction ---- */

static void fraction(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    xsa_pool_set_memory_fraction(p, (double)(30 * MiB) / (double)GiB);
    fake f;
    create_own(p, M1, &f);
    route(p, M1, S0);
    void *a = alloc(p, 20 * MiB, S0);
    assert_int_equal(reserved(p), 20 * MiB);
    /* Past the fraction the allocator is not even asked. */
    oom(p, 20 * MiB, S0);
    assert_int_equal(f.allocs, 1);
    unroute(p, M1);
    oom(p, 12 * MiB, S0); /* the global pool: the pool's memory counts */
    release(p, alloc(p, 1 * MiB, S0));
    release(p, a);
    pool_drop(p, M1);
    teardown(p);
}

static void test_fraction_counts_the_allocator_memory(void **state) {
    (void)state;
    run_both(fraction);
}

/* ---- the allocator failing ---- */

/* A workload in the pool; with calls fail_from .. fail_from + count - 1
 * of the allocator failing, each step that fails must report out of memory
 * and change nothing; the step is then made again, with the failure over.
 * Returns how many steps failed. */
static int workload(bool expandable, bool capture, int fail_from, int count, int *allocs) {
    static const size_t sizes[] = {1 * MiB, 1 * MiB, 1 * MiB, 4 * MiB, 30 * MiB, 4 * MiB, 4 * MiB, 12 * MiB};
    enum { N = sizeof sizes / sizeof *sizes };
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    fake f;
    create_own(p, M1, &f);
    f.fail_from = fail_from;
    f.fail_count = count;
    pool_begin(p, M1, S1, capture);
    void *ptrs[N];
    int failed = 0;
    for (int i = 0; i < N; i++) {
        xsa_device_stats before = stats(p);
        xsa_pool_status st = xsa_pool_malloc(p, sizes[i], S1, &ptrs[i], err, sizeof err);
        CHECK(p);
        if (st != XSA_POOL_OK) {
            assert_int_equal(st, XSA_POOL_OOM);
            xsa_device_stats after = stats(p);
            assert_int_equal(after.allocated_bytes[XSA_STAT_ALL].current, before.allocated_bytes[XSA_STAT_ALL].current);
            assert_int_equal(after.reserved_bytes[XSA_STAT_ALL].current, before.reserved_bytes[XSA_STAT_ALL].current);
            assert_int_equal(after.segment[XSA_STAT_ALL].current, before.segment[XSA_STAT_ALL].current);
            assert_int_equal(f.n_live, (int)after.segment[XSA_STAT_ALL].current);
            failed++;
            f.fail_count = 0;
            ptrs[i] = alloc(p, sizes[i], S1);
        }
        memset(ptrs[i], i, 64);
        ((char *)ptrs[i])[sizes[i] - 1] = (char)i;
        if (i % 3 == 2) release(p, ptrs[i - 1]), ptrs[i - 1] = NULL;
    }
    for (int i = 0; i < N; i++)
        if (ptrs[i]) release(p, ptrs[i]);
    unroute(p, M1);
    pool_drop(p, M1);
    assert_int_equal(f.n_live, 0);
    assert_int_equal(f.releases, 1);
    *allocs = f.allocs;
    teardown(p);
    return failed;
}

static void alloc_failures(bool expandable) {
    int clean = 0, allocs;
    assert_int_equal(workload(expandable, false, 0, 0, &clean), 0);
    for (int k = 1; k <= clean; k++) {
        /* One failure: outside a capture the retry after releasing the
         * cache asks again, and the step succeeds (PyTorch's order). */
        assert_int_equal(workload(expandable, false, k, 1, &allocs), 0);
        assert_int_equal(allocs, clean + 1);
        /* Two in a row, or one during a capture (which releases nothing):
         * that step runs out of memory, cleanly. */
        assert_int_equal(workload(expandable, false, k, 2, &allocs), 1);
        assert_int_equal(workload(expandable, true, k, 1, &allocs), 1);
    }
}

static void test_allocator_failures(void **state) {
    (void)state;
    run_both(alloc_failures);
}

/* ---- capture ---- */

/* During a global capture the allocator is called with the thread in
 * relaxed mode, as PyTorch calls it (a cudaMalloc inside it would be
 * refused and invalidate the capture otherwise). */
static void relaxed_in_capture(bool expandable) {
    xsa_pool *p = make_pool(256 * MiB, expandable, NULL);
    fake f;
    create_own(p, M1, &f);
    assert_int_equal(XSA_DRV(drv, stream_begin_capture, S1), XSA_CU_SUCCESS);
    pool_begin(p, M1, S1, true);
    void *a = alloc(p, 1 * MiB, S1);
    assert_int_equal(f.mode, XSA_CAPTURE_MODE_RELAXED);
    assert_int_equal(capture_mode(), XSA_CAPTURE_MODE_GLOBAL); /* put back */
    release(p, a);
    unroute(p, M1);
    xsa_graph graph = NULL;
    assert_int_equal(XSA_DRV(drv, stream_end_capture, S1, &graph), XSA_CU_SUCCESS);
    assert_int_equal(XSA_DRV(drv, graph_destroy, graph), XSA_CU_SUCCESS);
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.failed_captures) fail_msg("capture: %s", v.first);
    pool_drop(p, M1);
    assert_int_equal(f.frees, 1);
    teardown(p);
}

static void test_allocator_called_relaxed_during_capture(void **state) {
    (void)state;
    run_both(relaxed_in_capture);
}

/* ---- refused calls ---- */

static void test_bad_calls(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    fake f = {0};
    xsa_mempool_allocator a = {fake_alloc, fake_free, fake_release, &f}, half = {fake_alloc, NULL, NULL, &f};
    REFUSED(xsa_pool_mempool_create_with(p, GLOBAL, &a, err, sizeof err));
    REFUSED(xsa_pool_mempool_create_with(p, M1, NULL, err, sizeof err));
    REFUSED(xsa_pool_mempool_create_with(p, M1, &half, err, sizeof err));
    assert_int_equal(xsa_pool_mempool_create(p, M1, err, sizeof err), XSA_POOL_OK);
    REFUSED(xsa_pool_mempool_create_with(p, M1, &a, err, sizeof err));
    assert_non_null(strstr(err, "exists already"));
    assert_int_equal(f.releases, 0); /* a refused allocator is not kept */
    for (int on = 0; on < 2; on++) {
        REFUSED(xsa_pool_mempool_set_use_on_oom(p, GLOBAL, on, err, sizeof err));
        REFUSED(xsa_pool_mempool_set_no_split(p, GLOBAL, on, err, sizeof err));
        REFUSED(xsa_pool_mempool_set_use_on_oom(p, M2, on, err, sizeof err));
        REFUSED(xsa_pool_mempool_set_no_split(p, M2, on, err, sizeof err));
    }
    /* A released pool (kept alive by a block) takes no flag. */
    create_own(p, M2, &f);
    route(p, M2, S0);
    void *x = alloc(p, 4096, S0);
    unroute(p, M2);
    pool_drop(p, M2);
    REFUSED(xsa_pool_mempool_set_use_on_oom(p, M2, true, err, sizeof err));
    REFUSED(xsa_pool_mempool_set_no_split(p, M2, true, err, sizeof err));
    /* The allocator's memory cannot be exported (IPC needs expandable segments). */
    xsa_ipc_handle h;
    assert_int_equal(xsa_pool_ipc_export(p, x, &h, err, sizeof err), XSA_POOL_UNSUPPORTED);
    assert_non_null(strstr(err, "own allocator"));
    release(p, x);
    assert_int_equal(f.releases, 1);
    pool_drop(p, M1);
    teardown(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_come_from_the_allocator),
        cmocka_unit_test(test_empty_cache_gives_segments_back),
        cmocka_unit_test(test_block_outlives_the_pool_and_its_allocator),
        cmocka_unit_test(test_destroy_returns_memory_through_free),
        cmocka_unit_test(test_use_on_oom_lends_free_blocks),
        cmocka_unit_test(test_no_split_hands_out_whole_blocks),
        cmocka_unit_test(test_fraction_counts_the_allocator_memory),
        cmocka_unit_test(test_allocator_failures),
        cmocka_unit_test(test_allocator_called_relaxed_during_capture),
        cmocka_unit_test(test_bad_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
