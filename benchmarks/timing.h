/*
 * benchmarks/timing: the clock, the run statistics and the hot path's
 * random draws that the benchmark programs share (header only: each is one
 * binary with no other shared code; C and C++, for the torch extensions of
 * benchmarks/gpu/).
 */
#ifndef XSA_BENCHMARKS_TIMING_H
#define XSA_BENCHMARKS_TIMING_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double xsa_bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static inline int xsa_bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts n timed runs and returns their median (min and max are t[0] and
 * t[n - 1] afterwards). */
static inline double xsa_bench_median(double *t, size_t n) {
    qsort(t, n, sizeof *t, xsa_bench_cmp_double);
    return t[n / 2];
}

/* The core clock in GHz, from n dependent additions (x86: one a cycle);
 * 0 elsewhere. */
static inline double xsa_bench_core_ghz(long n) {
#if defined(__x86_64__)
    uint64_t x = 0;
    double t0 = xsa_bench_now_ns();
    for (long i = 0; i < n; i++) __asm__ volatile("add $1, %0" : "+r"(x));
    return (double)n / (xsa_bench_now_ns() - t0);
#else
    (void)n;
    return 0;
#endif
}

/* The hot path's fixed-seed sequence (benchmarks/hotpath.c): xorshift64
 * from XSA_BENCH_SEED, and sizes log-uniform per binary octave (octave
 * uniform in 2^9..2^25, then uniform within it). */
#define XSA_BENCH_SEED 0x9E3779B97F4A7C15ull

static inline uint64_t xsa_bench_xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline uint32_t xsa_bench_draw_size(uint64_t *rng) {
    unsigned e = 9 + (unsigned)(xsa_bench_xorshift(rng) % 17);
    return (uint32_t)((1u << e) + xsa_bench_xorshift(rng) % (1u << e));
}

#endif
