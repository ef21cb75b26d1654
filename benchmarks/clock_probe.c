/*
 * clock_probe: how steadily the core clock runs, for reading hot-path
 * timings on a shared host.
 *
 *   bazel run -c opt //benchmarks:clock_probe -- [SECONDS]   (default 1)
 *   gcc -O2 -I. benchmarks/clock_probe.c -o clock_probe      (GPU host)
 *
 * Design: times back-to-back chunks of 20,000 dependent additions (one a
 * cycle; about 7-20 us each) for SECONDS and prints the clock of the best,
 * 10th-percentile, median and 90th-percentile chunk, the chunks slower than
 * 1.5x the best, and the pauses (chunks over 10x the best: the thread was
 * not running). On the GPU host the hot path's ns vary up to 2x between
 * processes; this tells a slower clock (many slow chunks, few pauses) from
 * a descheduled thread (pauses).
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchmarks/timing.h"

#define CHUNK 20000
#define MAX_CHUNKS 4000000

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    if (!(seconds > 0 && seconds <= 60)) {
        fprintf(stderr, "usage: clock_probe [SECONDS, at most 60]\n");
        return 2;
    }
    if (xsa_bench_core_ghz(CHUNK) == 0) {
        fprintf(stderr, "clock_probe: x86-64 only\n");
        return 1;
    }
    double *ns = malloc(MAX_CHUNKS * sizeof *ns);
    if (!ns) return 1;
    size_t n = 0;
    double total = 0, end = xsa_bench_now_ns() + seconds * 1e9;
    while (n < MAX_CHUNKS && xsa_bench_now_ns() < end) {
        ns[n] = CHUNK / xsa_bench_core_ghz(CHUNK);
        total += ns[n++];
    }
    xsa_bench_median(ns, n);
    size_t slow = 0, pauses = 0;
    double paused = 0;
    for (size_t i = 0; i < n; i++) {
        slow += ns[i] > 1.5 * ns[0];
        if (ns[i] > 10 * ns[0]) {
            pauses++;
            paused += ns[i];
        }
    }
    printf("%zu chunks: GHz best %.2f, p10 %.2f, median %.2f, p90 %.2f, mean %.2f; %.1f%% of chunks under 1/1.5 "
           "of the best; %zu pauses (%.1f%% of the time)\n",
           n, CHUNK / ns[0], CHUNK / ns[n / 10], CHUNK / ns[n / 2], CHUNK / ns[n * 9 / 10], CHUNK * n / total,
           100.0 * slow / n, pauses, 100 * paused / total);
    free(ns);
    return 0;
}
