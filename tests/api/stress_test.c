/*
 * stress_test: 4 threads of random malloc / free / record_stream /
 * empty_cache / stats through the public API on the simulated driver, with
 * pointers passed between threads, then the invariant checker and a check
 * that everything goes back to the driver. Now and then a thread routes
 * its stream to a memory pool of its own for a while (a "capture"), and
 * releases the pool when the routing ends.
 *
 * Design: allocations live in a shared table of slots; a thread owns an
 * allocation only after taking it out of a slot with an atomic exchange, so
 * frees and record_streams of pointers allocated by other threads (on other
 * streams) are the common case, and no allocation is ever used by two
 * threads at once. Each allocation carries a tag at both ends, checked when
 * it is freed: a block handed out twice or memory unmapped under a live
 * allocation shows up as a changed tag or a fault. Events are not eager:
 * record_stream frees wait until a thread completes the simulated streams.
 *
 * Operations per thread: argv[1], else $XSA_STRESS_OPS, else 50,000
 * (10,000 under sanitizers). The full run:
 *     bazel test //tests:stress_test --test_arg=1000000 [--config=tsan]
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define THREADS 4
#define SLOTS 256
#define STREAMS 4
#define MAX_SIZE_LOG2 24 /* 16 MiB: the table never holds more than 4 GiB */
#define GiB ((size_t)1 << 30)

typedef struct alloc {
    void *p;
    size_t size;
    uint64_t tag;
} alloc;

static _Atomic(alloc *) slots[SLOTS];
static size_t ops_per_thread;

static void *stream_of(unsigned k) { return k == 0 ? NULL : (void *)(uintptr_t)(0x1000u + k); }

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The tag's bytes at the start, and at the end when they do not overlap. */
static void put_tag(const alloc *a) {
    memcpy(a->p, &a->tag, a->size < 8 ? a->size : 8);
    if (a->size >= 16) memcpy((char *)a->p + a->size - 8, &a->tag, 8);
}

static bool tag_ok(const alloc *a) {
    size_t n = a->size < 8 ? a->size : 8;
    return memcmp(a->p, &a->tag, n) == 0 && (a->size < 16 || memcmp((char *)a->p + a->size - 8, &a->tag, 8) == 0);
}

/* Frees an allocation this thread owns; NULL on success, else why. */
static const char *release(alloc *a) {
    if (!a) return NULL;
    if (!tag_ok(a)) return "an allocation's data changed while it was live";
    xsa_status st = xsa_free(a->p);
    free(a);
    return st == XSA_SUCCESS ? NULL : "xsa_free failed";
}

/* Puts a into slot i; frees whatever it displaced. */
static const char *store(size_t i, alloc *a) { return release(atomic_exchange(&slots[i], a)); }

static const char *op_malloc(uint64_t *rng) {
    alloc *a = malloc(sizeof *a);
    if (!a) return "host malloc failed";
    uint64_t r = next_rand(rng);
    a->size = ((size_t)1 << (r % (MAX_SIZE_LOG2 + 1))) + (size_t)(r >> 40) % 4096;
    a->tag = next_rand(rng);
    if (xsa_malloc(&a->p, a->size, 0, stream_of((unsigned)(r >> 8) % STREAMS)) != XSA_SUCCESS) {
        free(a);
        return "xsa_malloc failed";
    }
    put_tag(a);
    return store(next_rand(rng) % SLOTS, a);
}

/* Takes an allocation (maybe another thread's) and frees it or records a
 * stream on it and puts it back. */
static const char *op_take(uint64_t *rng) {
    uint64_t r = next_rand(rng);
    alloc *a = atomic_exchange(&slots[r % SLOTS], NULL);
    if (!a || (r >> 32) % 2) return release(a);
    if (xsa_record_stream(a->p, stream_of((unsigned)(r >> 40) % STREAMS)) != XSA_SUCCESS) {
        release(a);
        return "xsa_record_stream failed";
    }
    return store((r >> 16) % SLOTS, a);
}

static const char *op_misc(uint64_t *rng) {
    uint64_t r = next_rand(rng) % 100;
    if (r < 10) return xsa_empty_cache() == XSA_SUCCESS ? NULL : "xsa_empty_cache failed";
    if (r < 60) {
        xsa_sim_complete_stream(stream_of((unsigned)(r % STREAMS)));
        return NULL;
    }
    xsa_device_stats s;
    size_t cached, largest;
    if (xsa_get_stats(0, &s) != XSA_SUCCESS || xsa_cache_info(0, &cached, &largest) != XSA_SUCCESS)
        return "xsa_get_stats failed";
    return s.allocation[XSA_STAT_ALL].current >= 0 ? NULL : "negative allocation count";
}

static bool on_stream(void *ctx, void *stream) { return stream == ctx; }

/* Thread t routes stream t to memory pool {t + 1, 0}, or ends that routing
 * and drops the pool's use (its memory goes back once its blocks, which
 * other threads may hold, are freed). Short routings: the device counts as
 * capturing while any lasts, and then no cached memory is released. */
static const char *op_route(uintptr_t t, bool *routed) {
    xsa_mempool_id id = {t + 1, 0};
    if (!*routed) {
        *routed = xsa_begin_allocate_to_pool(0, id, on_stream, stream_of((unsigned)t)) == XSA_SUCCESS;
        return *routed ? NULL : "xsa_begin_allocate_to_pool failed";
    }
    *routed = false;
    if (xsa_end_allocate_to_pool(0, id) != XSA_SUCCESS) return "xsa_end_allocate_to_pool failed";
    return xsa_mempool_release(0, id) == XSA_SUCCESS ? NULL : "xsa_mempool_release failed";
}

static void *worker(void *arg) {
    uintptr_t t = (uintptr_t)arg;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (t + 1);
    bool routed = false;
    for (size_t i = 0; i < ops_per_thread; i++) {
        uint64_t r = next_rand(&rng) % 1000;
        if (r < (routed ? 50u : 5u)) {
            const char *why = op_route(t, &routed);
            if (why) return (void *)why;
            continue;
        }
        r = next_rand(&rng) % 100;
        const char *why = r < 45 ? op_malloc(&rng) : r < 95 ? op_take(&rng) : op_misc(&rng);
        if (why) return (void *)why;
    }
    return routed ? (void *)op_route(t, &routed) : NULL;
}

static size_t ops_from(int argc, char **argv) {
    const char *s = argc > 1 ? argv[1] : getenv("XSA_STRESS_OPS");
    if (s) return strtoul(s, NULL, 10);
    return getenv("XSA_UNDER_SANITIZER") ? 10000 : 50000;
}

static void test_threads(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, 8 * GiB);
    assert_int_equal(xsa_init(NULL), XSA_SUCCESS);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < THREADS; i++) {
        void *why = NULL;
        pthread_join(t[i], &why);
        if (why) fail_msg("thread %d: %s: %s", i, (const char *)why, xsa_last_error());
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (xsa_check_invariants(0) != XSA_SUCCESS) fail_msg("%s", xsa_last_error());
    for (size_t i = 0; i < SLOTS; i++) {
        const char *why = store(i, NULL);
        if (why) fail_msg("final free: %s", why);
    }
    assert_int_equal(xsa_empty_cache(), XSA_SUCCESS);
    if (xsa_check_invariants(0) != XSA_SUCCESS) fail_msg("%s", xsa_last_error());
    xsa_device_stats s;
    assert_int_equal(xsa_get_stats(0, &s), XSA_SUCCESS);
    assert_int_equal(s.allocation[XSA_STAT_ALL].current, 0);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 0);
    print_message("%d threads x %zu operations in %.2f s (%lld allocations, the cache released %lld times)\n",
                  THREADS, ops_per_thread, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
                  (long long)s.allocation[XSA_STAT_ALL].allocated, (long long)s.num_sync_all_streams);
    assert_int_equal(xsa_shutdown(), XSA_SUCCESS);
    xsa_fixture_expect_sim_empty();
}

int main(int argc, char **argv) {
    ops_per_thread = ops_from(argc, argv);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
