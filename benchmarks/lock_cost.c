/*
 * lock_cost: ns per uncontended take-and-give of the API's device lock
 * (api/device_lock.h: compare-and-swap, then a plain release store),
 * against the same lock given back with an atomic exchange (the futex
 * mutex it replaced), glibc's mutex, and no lock, around 16 stores like
 * the stats updates of a malloc. Every malloc and free takes the lock
 * once, so twice the difference is what a pair pays.
 *
 *   bazel run -c opt //benchmarks:lock_cost     (or gcc -O2 -I. benchmarks/lock_cost.c -lpthread)
 *
 * Prints the median of 5 runs of 2*10^7 per variant, one JSON line last.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/device_lock.h"
#include "benchmarks/timing.h"

#define N 20000000L
#define RUNS 5

static volatile long sink[16];
static xsa_device_lock device_lock;
static _Atomic int exchange_state;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void work(long i) {
    for (int k = 0; k < 16; k++) sink[k] += i;
}

static void run_device_lock(long i) {
    if (!xsa_device_lock_acquire(&device_lock)) abort(); /* no callback here: never refused */
    work(i);
    xsa_device_lock_release(&device_lock);
}

static void run_exchange(long i) {
    int expected = 0;
    if (!atomic_compare_exchange_strong_explicit(&exchange_state, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        abort(); /* uncontended here */
    work(i);
    if (atomic_exchange_explicit(&exchange_state, 0, memory_order_release) == 2) abort();
}

static void run_mutex(long i) {
    pthread_mutex_lock(&mutex);
    work(i);
    pthread_mutex_unlock(&mutex);
}

static void run_none(long i) { work(i); }

static double measure(void (*fn)(long)) {
    double t[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = xsa_bench_now_ns();
        for (long i = 0; i < N; i++) fn(i);
        t[r] = (xsa_bench_now_ns() - t0) / N;
    }
    return xsa_bench_median(t, RUNS);
}

int main(void) {
    double store = measure(run_device_lock), exchange = measure(run_exchange), mutex_ns = measure(run_mutex),
           none = measure(run_none);
    printf("ns per take-and-give around 16 stores (median of %d runs of %ld):\n", RUNS, N);
    printf("  device lock (release store)  %6.1f\n  release by exchange          %6.1f\n", store, exchange);
    printf("  glibc mutex                  %6.1f\n  no lock                      %6.1f\n", mutex_ns, none);
    printf("{\"store_ns\": %.1f, \"exchange_ns\": %.1f, \"mutex_ns\": %.1f, \"none_ns\": %.1f}\n", store, exchange,
           mutex_ns, none);
    return 0;
}
