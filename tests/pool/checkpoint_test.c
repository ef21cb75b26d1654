/*
 * checkpoint_test: a memory pool's checkpoint and its restore (PyTorch's
 * getCheckpointState / setCheckpointPoolState, pool/checkpoint.c) on the
 * simulated driver, expandable and classic: blocks freed and allocated
 * again at their addresses (split out of free memory), allocations not in
 * the checkpoint freed, refusals that change nothing, waiting for other
 * streams, and random histories restored to random earlier checkpoints.
 * The pool's and the simulated driver's invariant checkers (stats equal a
 * recount, free sets, pointer map, pages) run after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/pool/pool_fixture.h"

#define S2 ((void *)0x2002)
static const xsa_mempool_id G1 = {1, 0}, G2 = {2, 0};

/* Pool id, with one use (MemPool()). */
static void open_pool(xsa_pool *p, xsa_mempool_id id) {
    assert_int_equal(xsa_pool_mempool_create(p, id, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
}

/* `size` bytes of open pool id on stream S1 (the routing's use dropped). */
static void *pool_alloc(xsa_pool *p, xsa_mempool_id id, size_t size) {
    pool_begin(p, id, S1, false);
    void *ptr = alloc(p, size, S1);
    pool_end(p, id);
    pool_drop(p, id);
    return ptr;
}

typedef struct ckpt {
    xsa_live_block *blocks;
    size_t n;
} ckpt;

static ckpt take(xsa_pool *p, xsa_mempool_id id) {
    ckpt c;
    xsa_pool_status st = xsa_pool_mempool_checkpoint(p, id, &c.blocks, &c.n, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("checkpoint: %d %s", st, err);
    CHECK(p);
    return c;
}

static bool same_blocks(ckpt a, ckpt b) {
    return a.n == b.n && (a.n == 0 || memcmp(a.blocks, b.blocks, a.n * sizeof *a.blocks) == 0);
}

/* Restores pool id to c; afterwards its checkpoint is exactly c. */
static xsa_restore_delta restore(xsa_pool *p, xsa_mempool_id id, ckpt c) {
    xsa_restore_delta d;
    xsa_pool_status st = xsa_pool_mempool_restore(p, id, c.blocks, c.n, &d, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("restore: %d %s", st, err);
    CHECK(p);
    ckpt now = take(p, id);
    assert_true(same_blocks(now, c));
    free(now.blocks);
    for (size_t i = 0; i < c.n; i++) assert_true(xsa_pool_owns(p, c.blocks[i].ptr));
    return d;
}

/* The pool's delta arrays (xsa_restore_delta_free is the API's). */
static void free_delta(xsa_restore_delta *d) {
    free(d->freed);
    free(d->allocated);
}

static bool listed(void *const *ptrs, size_t n, const void *ptr) {
    for (size_t i = 0; i < n; i++)
        if (ptrs[i] == ptr) return true;
    return false;
}

/* A refused restore: XSA_POOL_INVALID, `why` in the message, nothing changed. */
static void refused(xsa_pool *p, xsa_mempool_id id, const xsa_live_block *set, size_t n, const char *why) {
    xsa_device_stats before = stats(p), after;
    xsa_restore_delta d = {0};
    assert_int_equal(xsa_pool_mempool_restore(p, id, set, n, &d, err, sizeof err), XSA_POOL_INVALID);
    if (!strstr(err, why)) fail_msg("refusal says \"%s\", not \"%s\"", err, why);
    assert_null(d.freed);
    CHECK(p);
    after = stats(p);
    assert_memory_equal(&before, &after, sizeof before);
}

static int64_t current(const xsa_stat *by_type) { return by_type[XSA_STAT_ALL].current; }

/* ---- restores ---- */

/* Outputs freed after the checkpoint come back at their addresses (their
 * memory had merged with free neighbours: it is split again); a block
 * allocated since is freed; the stats are the checkpoint's. */
static void restore_splits_and_frees(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    open_pool(p, G1);
    void *a = pool_alloc(p, G1, 1000), *b = pool_alloc(p, G1, 3000), *c = pool_alloc(p, G1, 700);
    void *d = pool_alloc(p, G1, 3 * MiB), *e = pool_alloc(p, G1, 5 * MiB), *f = pool_alloc(p, G1, 2 * MiB);
    void *g = alloc(p, 4 * MiB, S1); /* the global pool: untouched throughout */
    ckpt c1 = take(p, G1);
    assert_int_equal(c1.n, 6);
    xsa_device_stats at_c1 = stats(p);
    release(p, b);
    release(p, a);
    release(p, e);
    release(p, d);
    void *h = pool_alloc(p, G1, 6 * MiB); /* reuses d and e's memory */
    void *k = pool_alloc(p, G1, 100);
    xsa_restore_delta delta = restore(p, G1, c1);
    assert_int_equal(delta.n_freed, 2);
    assert_true(listed(delta.freed, 2, h) && listed(delta.freed, 2, k));
    assert_int_equal(delta.n_allocated, 4);
    void *back[] = {a, b, d, e};
    for (int i = 0; i < 4; i++) assert_true(listed(delta.allocated, 4, back[i]));
    free_delta(&delta);
    xsa_device_stats now = stats(p);
    assert_int_equal(current(now.allocation), current(at_c1.allocation));
    assert_int_equal(current(now.allocated_bytes), current(at_c1.allocated_bytes));
    assert_int_equal(current(now.requested_bytes), current(at_c1.requested_bytes));
    assert_int_equal(current(now.active_bytes), current(at_c1.active_bytes));
    /* Restoring the state the pool is in changes nothing. */
    delta = restore(p, G1, c1);
    assert_int_equal(delta.n_freed + delta.n_allocated, 0);
    free_delta(&delta);
    /* The restored blocks are ordinary allocations: freed, reused. */
    void *all[] = {a, b, c, d, e, f, g};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(p, all[i]);
    free(c1.blocks);
    assert_int_equal(current(stats(p).allocation), 0);
    teardown(p);
}

static void test_restore_splits_and_frees(void **state) {
    (void)state;
    run_both(restore_splits_and_frees);
}

/* An empty checkpoint frees every allocation of the pool; restoring a
 * fuller one later brings them back in the middle of free memory. */
static void restore_empty_and_back(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    open_pool(p, G1);
    void *a = pool_alloc(p, G1, 8 * MiB);
    release(p, a);
    ckpt empty = take(p, G1);
    assert_int_equal(empty.n, 0);
    void *x = pool_alloc(p, G1, 512), *y = pool_alloc(p, G1, 2 * MiB), *z = pool_alloc(p, G1, 4096);
    ckpt full = take(p, G1);
    xsa_restore_delta d = restore(p, G1, empty);
    assert_int_equal(d.n_freed, 3);
    assert_int_equal(d.n_allocated, 0);
    free_delta(&d);
    assert_int_equal(current(stats(p).allocation), 0);
    d = restore(p, G1, full);
    assert_int_equal(d.n_allocated, 3);
    free_delta(&d);
    release(p, x);
    release(p, y);
    release(p, z);
    free(full.blocks);
    teardown(p);
}

static void test_restore_to_empty_and_back(void **state) {
    (void)state;
    run_both(restore_empty_and_back);
}

/* ---- refusals ---- */

static void refusals(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    open_pool(p, G1);
    open_pool(p, G2);
    void *a = pool_alloc(p, G1, 4096), *b = pool_alloc(p, G1, 3 * MiB);
    void *other = pool_alloc(p, G2, 4096), *global = alloc(p, 4096, S1);
    ckpt c = take(p, G1);
    uintptr_t pa = (uintptr_t)a;
    xsa_live_block set[2] = {{a, 4096, 4096, S1}};
    set[0].ptr = global;
    refused(p, G1, set, 1, "not inside one of the pool's segments");
    set[0].ptr = other;
    refused(p, G1, set, 1, "not inside one of the pool's segments");
    set[0] = (xsa_live_block){(void *)(pa + 100), 4096, 4096, S1};
    refused(p, G1, set, 1, "not a block");
    set[0] = (xsa_live_block){a, 4096, 8192, S1};
    refused(p, G1, set, 1, "not a block");
    set[0] = (xsa_live_block){a, 4096, 4096, S2};
    refused(p, G1, set, 1, "its stream is not its segment's");
    set[0] = (xsa_live_block){a, 8192, 8192, S1};
    set[1] = (xsa_live_block){(void *)(pa + 4096), 4096, 4096, S1};
    refused(p, G1, set, 2, "overlaps the block before it");
    refused(p, (xsa_mempool_id){0, 0}, c.blocks, c.n, "the device's own cache");
    refused(p, (xsa_mempool_id){7, 7}, c.blocks, c.n, "no such pool");
    pool_begin(p, G1, S1, false);
    refused(p, G1, c.blocks, c.n, "being routed to");
    pool_end(p, G1);
    pool_drop(p, G2); /* released, `other` still allocated in it */
    refused(p, G2, NULL, 0, "the pool is released");
    xsa_live_block *none = NULL;
    size_t n = 1;
    assert_int_equal(xsa_pool_mempool_checkpoint(p, (xsa_mempool_id){0, 0}, &none, &n, err, sizeof err),
                     XSA_POOL_INVALID);
    assert_true(!none && !n);
    free(c.blocks);
    release(p, other);
    release(p, global);
    release(p, a);
    release(p, b);
    teardown(p);
}

static void test_refusals_change_nothing(void **state) {
    (void)state;
    run_both(refusals);
}

/* Memory the pool gave back (released, then in use again) is no place
 * for a block. */
static void test_unmapped_memory_refused(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, NULL);
    open_pool(p, G1);
    void *a = pool_alloc(p, G1, 8 * MiB), *b = pool_alloc(p, G1, 2 * MiB); /* b's pages after a's */
    ckpt c = take(p, G1);
    release(p, a);
    pool_drop(p, G1);      /* released: a's pages are unmapped, b's segment stays */
    open_pool(p, G1); /* in use again */
    refused(p, G1, c.blocks, c.n, "not mapped");
    release(p, b);
    free(c.blocks);
    pool_drop(p, G1);
    teardown(p);
}

/* ---- other streams ---- */

/* A block of the checkpoint freed with a use on S2 waits for its event:
 * the restore synchronizes it. An allocation freed by the restore that was
 * used on S2 waits for S2's work: the restore synchronizes S2. During a
 * capture neither wait may happen: refused. */
static void waits_for_streams(bool expandable) {
    xsa_pool *p = make_pool(1 * GiB, expandable, NULL);
    open_pool(p, G1);
    void *a = pool_alloc(p, G1, 2 * MiB);
    ckpt with_a = take(p, G1);
    assert_int_equal(xsa_pool_record_stream(p, a, S2, err, sizeof err), XSA_POOL_OK);
    release(p, a); /* waits for S2's event */
    /* A capture into another pool on S0. */
    assert_int_equal(xsa_pool_begin_allocate_to_pool(p, G2, only_stream, S0, true, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    refused(p, G1, with_a.blocks, with_a.n, "while a capture is under way");
    pool_end(p, G2);
    uint64_t syncs = driver_calls(XSA_DRV_event_synchronize);
    xsa_restore_delta d = restore(p, G1, with_a);
    assert_true(driver_calls(XSA_DRV_event_synchronize) > syncs);
    assert_int_equal(d.n_allocated, 1);
    free_delta(&d);
    /* Now a, used on S2, is freed by restoring an empty set. */
    assert_int_equal(xsa_pool_record_stream(p, a, S2, err, sizeof err), XSA_POOL_OK);
    CHECK(p);
    syncs = driver_calls(XSA_DRV_stream_synchronize);
    ckpt none = {NULL, 0};
    d = restore(p, G1, none);
    assert_int_equal(driver_calls(XSA_DRV_stream_synchronize), syncs + 1);
    assert_int_equal(d.n_freed, 1);
    free_delta(&d);
    assert_int_equal(current(stats(p).active), 0); /* freed at once, no event */
    free(with_a.blocks);
    teardown(p);
}

static void test_restore_waits_for_other_streams(void **state) {
    (void)state;
    run_both(waits_for_streams);
}

/* ---- random histories ---- */

/* Random allocations and frees in pool G1 (and the global pool), with
 * checkpoints taken and restored at random: after each restore the pool's
 * checkpoint is exactly the one restored. */
static void random_history(bool expandable) {
    enum { LIVE = 24, CKPTS = 6, STEPS = 600 };
    static const size_t sizes[] = {512, 3000, 65536, 1 << 20, (1 << 20) + 512, 3 << 20, 7 << 20, 12 << 20};
    xsa_pool *p = make_pool(4 * GiB, expandable, NULL);
    open_pool(p, G1);
    void *live[LIVE] = {0}, *global[4] = {0};
    ckpt saved[CKPTS] = {{0}};
    uint32_t rng = expandable ? 7 : 11;
    size_t freed = 0, allocated = 0; /* by restores */
    for (int step = 0; step < STEPS; step++) {
        rng = rng * 1103515245u + 12345u;
        uint32_t r = rng >> 8;
        unsigned slot = r % LIVE, k = (r >> 8) % CKPTS;
        switch ((r >> 16) % 8) {
        case 0: case 1: case 2:
            if (live[slot]) release(p, live[slot]);
            live[slot] = pool_alloc(p, G1, sizes[(r >> 20) % 8] - (size_t)(step % 3) * 100);
            break;
        case 3: case 4:
            if (live[slot]) release(p, live[slot]);
            live[slot] = NULL;
            break;
        case 5:
            free(saved[k].blocks);
            saved[k] = take(p, G1);
            break;
        case 6: { /* a checkpoint never taken is the empty one */
            xsa_restore_delta d = restore(p, G1, saved[k]);
            freed += d.n_freed;
            allocated += d.n_allocated;
            free_delta(&d);
            memset(live, 0, sizeof live); /* the pool's allocations are the checkpoint's, at most LIVE */
            for (size_t i = 0; i < saved[k].n; i++) live[i] = saved[k].blocks[i].ptr;
            break;
        }
        case 7:
            if (global[slot % 4]) release(p, global[slot % 4]);
            global[slot % 4] = alloc(p, sizes[(r >> 20) % 8], S1);
            break;
        }
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i]) release(p, live[i]);
    for (int i = 0; i < 4; i++)
        if (global[i]) release(p, global[i]);
    for (int i = 0; i < CKPTS; i++) free(saved[i].blocks);
    assert_int_equal(current(stats(p).allocation), 0);
    assert_true(freed > 50 && allocated > 50); /* the restores did work */
    teardown(p);
}

static void test_random_histories(void **state) {
    (void)state;
    run_both(random_history);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restore_splits_and_frees),
        cmocka_unit_test(test_restore_to_empty_and_back),
        cmocka_unit_test(test_refusals_change_nothing),
        cmocka_unit_test(test_unmapped_memory_refused),
        cmocka_unit_test(test_restore_waits_for_other_streams),
        cmocka_unit_test(test_random_histories),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
