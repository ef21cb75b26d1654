/*
 * mempool_api_test: memory pools with an allocator of their own and the
 * MemPool flags through the public C API, on the simulated driver: the
 * calls' errors, PyTorch's MemPool life cycle (the pool deleted while a
 * tensor lives, pools deleted in a loop while lending on OOM), two
 * devices, and threads sharing a lending pool (for TSan). The allocator
 * is a fake that hands out host memory and counts its calls; xsalloc
 * calls it under the device's lock, so its counters need no lock of
 * their own. Invariants are checked after each step.
 */
#include <pthread.h>
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

static const xsa_mempool_id M1 = {0, 1}, M2 = {0, 2};

typedef struct fake {
    int allocs, frees, releases, live, device;
    size_t live_bytes;
} fake;

static void *fake_alloc(void *ctx, size_t size, int device, void *stream) {
    (void)stream;
    fake *f = ctx;
    f->allocs++;
    f->device = device;
    void *p = aligned_alloc(4096, size);
    if (p) {
        f->live++;
        f->live_bytes += size;
    }
    return p;
}

static void fake_free(void *ctx, void *ptr, size_t size, int device, void *stream) {
    (void)stream;
    fake *f = ctx;
    f->frees++;
    f->device = device;
    f->live--;
    f->live_bytes -= size;
    free(ptr);
}

static void fake_release(void *ctx) { ((fake *)ctx)->releases++; }

static xsa_mempool_allocator fake_pair(fake *f) { return (xsa_mempool_allocator){fake_alloc, fake_free, fake_release, f}; }

static int uses(int device, xsa_mempool_id id) {
    int n = -1;
    OK(xsa_mempool_use_count(device, id, &n));
    return n;
}

/* use_mem_pool: a routing of every stream, its end and its use dropped. */
static void *malloc_in(int device, xsa_mempool_id id, size_t size) {
    void *p = NULL;
    OK(xsa_begin_allocate_to_pool(device, id, NULL, NULL));
    OK(xsa_malloc(&p, size, device, NULL));
    OK(xsa_end_allocate_to_pool(device, id));
    OK(xsa_mempool_release(device, id));
    INVARIANTS(device);
    return p;
}

static void test_calls_and_errors(void **state) {
    (void)state;
    fake f = {0};
    xsa_mempool_allocator pair = fake_pair(&f), half = {fake_alloc, NULL, NULL, &f};
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_create_with_allocator(0, (xsa_mempool_id){0, 0}, &pair), "(0, 0)");
    FAILS(XSA_ERROR_INVALID_DEVICE, xsa_mempool_create_with_allocator(2, M1, &pair), "device 2");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_create_with_allocator(0, M1, NULL), "alloc and a free");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_create_with_allocator(0, M1, &half), "alloc and a free");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_set_use_on_oom(0, M1, true), "no such pool in use");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_set_no_split(0, M1, true), "no such pool in use");
    FAILS(XSA_ERROR_INVALID_DEVICE, xsa_mempool_set_use_on_oom(-1, M1, true), "device -1");
    OK(xsa_mempool_create_with_allocator(0, M1, &pair));
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_create_with_allocator(0, M1, &pair), "exists already");
    OK(xsa_mempool_set_use_on_oom(0, M1, true));
    OK(xsa_mempool_set_no_split(0, M1, false));
    assert_int_equal(uses(0, M1), 1);
    void *x = malloc_in(0, M1, 1 * MiB), *y = malloc_in(0, M1, 8 * MiB);
    assert_int_equal(f.allocs, 2);
    assert_int_equal(uses(0, M1), 1);
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_mempool_set_no_split(0, M1, true), "before its first allocation");
    void *base = NULL;
    size_t size = 0;
    OK(xsa_get_base_allocation(y, &base, &size));
    assert_ptr_equal(base, y);
    assert_int_equal(size, 20 * MiB);
    /* MemPool deleted, tensors alive: nothing goes back yet. */
    OK(xsa_mempool_release(0, M1));
    OK(xsa_empty_cache());
    INVARIANTS(0);
    assert_int_equal(f.frees, 0);
    assert_int_equal(uses(0, M1), 0);
    OK(xsa_free(y)); /* its segment goes back at the next empty_cache */
    assert_int_equal(f.frees, 0);
    OK(xsa_empty_cache());
    assert_int_equal(f.frees, 1);
    OK(xsa_free(x)); /* the last block: the rest goes back at once */
    assert_int_equal(f.frees, 2);
    assert_int_equal(f.releases, 1);
    INVARIANTS(0);
    /* On device 1 the allocator is told device 1, and a free finds the
     * block's device among two. */
    fake g = {0};
    xsa_mempool_allocator pair1 = fake_pair(&g);
    OK(xsa_mempool_create_with_allocator(1, M2, &pair1));
    void *z = malloc_in(1, M2, 4096);
    assert_int_equal(g.device, 1);
    OK(xsa_set_device(0));
    OK(xsa_free(z));
    OK(xsa_mempool_release(1, M2));
    assert_int_equal(g.frees, 1);
    assert_int_equal(g.releases, 1);
    INVARIANTS(1);
}

/* PyTorch's test_deleted_mempool_not_used_on_oom: 40 MiB allowed; ten
 * lending pools filled and deleted in turn give their memory back, and
 * the eleventh lends its 40 MiB to two 20 MiB global requests. */
static void test_deleted_pools_lend_nothing(void **state) {
    (void)state;
    OK(xsa_set_memory_fraction((double)(40 * MiB) / (double)GiB, 0));
    fake f = {0};
    xsa_mempool_allocator pair = fake_pair(&f);
    for (uint64_t i = 0; i < 11; i++) {
        xsa_mempool_id id = {0, 10 + i};
        OK(xsa_mempool_create_with_allocator(0, id, &pair));
        OK(xsa_mempool_set_use_on_oom(0, id, true));
        OK(xsa_free(malloc_in(0, id, 40 * MiB)));
        if (i == 10) break;
        OK(xsa_mempool_release(0, id)); /* del pool */
        OK(xsa_empty_cache());
        assert_int_equal(f.live, 0);
        assert_int_equal(f.releases, (int)i + 1);
    }
    void *b = NULL, *c = NULL, *d = NULL;
    OK(xsa_malloc(&b, 20 * MiB, 0, NULL));
    OK(xsa_malloc(&c, 20 * MiB, 0, NULL));
    assert_int_equal(f.live, 1);
    FAILS(XSA_ERROR_OUT_OF_MEMORY, xsa_malloc(&d, 20 * MiB, 0, NULL), "out of memory");
    INVARIANTS(0);
    OK(xsa_free(b));
    OK(xsa_free(c));
    OK(xsa_mempool_release(0, (xsa_mempool_id){0, 20}));
    assert_int_equal(f.live, 0);
    assert_int_equal(f.releases, 11);
}

/* ---- threads ---- */

#define THREADS 4
#define OPS 2000
#define SLOTS 8

static _Thread_local int thread_no; /* 1 + the thread's index */

/* use_mem_pool's filter: the first thread's allocations go to the pool. */
static bool first_thread(void *ctx, void *stream) {
    (void)ctx;
    (void)stream;
    return thread_no == 1;
}

typedef struct slot {
    unsigned char *p;
    size_t size;
    unsigned char tag;
} slot;

static void *worker(void *arg) {
    thread_no = (int)(uintptr_t)arg;
    unsigned seed = (unsigned)thread_no * 2654435761u;
    slot live[SLOTS] = {{0}};
    for (int i = 0; i < OPS; i++) {
        seed = seed * 1103515245u + 12345u;
        slot *s = &live[(seed >> 8) % SLOTS];
        if (s->p) {
            if (s->p[0] != s->tag || s->p[s->size - 1] != s->tag) return (void *)"a block's data changed";
            if (xsa_free(s->p) != XSA_SUCCESS) return (void *)"free failed";
            s->p = NULL;
        } else {
            size_t size = (size_t)512 << (seed >> 12) % 15; /* 512 B .. 8 MiB */
            xsa_status st = xsa_malloc((void **)&s->p, size, 0, NULL);
            if (st == XSA_ERROR_OUT_OF_MEMORY) continue; /* the fraction is small on purpose */
            if (st != XSA_SUCCESS) return (void *)"malloc failed";
            s->size = size;
            s->tag = (unsigned char)(seed >> 24);
            s->p[0] = s->p[size - 1] = s->tag;
        }
        if (i % 500 == 0 && xsa_check_invariants(0) != XSA_SUCCESS) return (void *)"invariants";
    }
    for (int k = 0; k < SLOTS; k++)
        if (live[k].p && xsa_free(live[k].p) != XSA_SUCCESS) return (void *)"final free failed";
    return NULL;
}

/* One thread allocates in a lending pool of its own allocator, three
 * allocate outside it under a small memory fraction and borrow its free
 * blocks when the device's memory runs out. */
static void test_threads_share_a_lending_pool(void **state) {
    (void)state;
    xsa_sim_set_eager_events(1);
    OK(xsa_set_memory_fraction((double)(48 * MiB) / (double)GiB, 0));
    fake f = {0};
    xsa_mempool_allocator pair = fake_pair(&f);
    OK(xsa_mempool_create_with_allocator(0, M1, &pair));
    OK(xsa_mempool_set_use_on_oom(0, M1, true));
    OK(xsa_begin_allocate_to_pool(0, M1, first_thread, NULL));
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < THREADS; i++) {
        void *result = NULL;
        pthread_join(t[i], &result);
        if (result) fail_msg("thread %d: %s: %s", i + 1, (const char *)result, xsa_last_error());
    }
    INVARIANTS(0);
    assert_true(f.allocs > 0);
    OK(xsa_end_allocate_to_pool(0, M1));
    OK(xsa_mempool_release(0, M1));
    OK(xsa_mempool_release(0, M1));
    OK(xsa_empty_cache());
    INVARIANTS(0);
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.allocation[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 0);
    assert_int_equal(f.live, 0);
    assert_int_equal(f.frees, f.allocs); /* every segment handed out came back */
    assert_int_equal(f.releases, 1);
    xsa_sim_set_eager_events(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_calls_and_errors, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_deleted_pools_lend_nothing, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_threads_share_a_lending_pool, xsa_fixture_two_devices, xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
