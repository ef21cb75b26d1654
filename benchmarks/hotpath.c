/*
 * hotpath: time of xsalloc's malloc/free fast path, in the two patterns of
 * benchmarks/traces/README.md, beside PyTorch's figures from there.
 *
 *   bazel run //benchmarks:hotpath -- [--driver sim|cuda] [--conf STR] [--ops N]
 *                                     [--entry api|torch]
 *
 *   pair:  alloc 1 MiB + free on one stream, repeated (ns per pair)
 *   slots: 64 live slots of log-uniform sizes 512 B - 64 MiB; each op frees
 *          one slot and allocates it again (ns per op)
 *
 * Design: one warm-up run fills the cache, then the median of 7 timed runs.
 * The slots pattern's sizes and slot choices come from a fixed-seed
 * xorshift (benchmarks/timing.h) and are drawn before timing, so only
 * xsalloc calls are timed and every run (and every allocator compared)
 * sees the same sequence. Sizes are log-uniform per binary octave (octave
 * uniform in 2^9..2^25, then uniform within it). --entry torch times the
 * entry points PyTorch's pluggable allocator calls (xsa_torch_malloc/free)
 * instead of the C API.
 * Prints a table, then one JSON line last on stdout ({"driver", "conf",
 * "entry", "ops", "pair_ns", "slots_ns", "pair_misses", "slots_misses",
 * "core_ghz"}) for scripts. A miss is a timed call that
 * went to the driver (new device memory or pages moved by recycling): the
 * patterns measure cache hits, so the counts say how pure they were.
 * core_ghz is the core's clock while timing, from a chain of dependent
 * additions (one a cycle) before and after: on the GPU host the timings of
 * one binary differ up to 2x between processes, and it says whether the
 * clock did.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "benchmarks/timing.h"
#include "xsalloc/pytorch.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define RUNS 7
#define SLOTS 64

typedef struct op {
    uint32_t slot;
    uint32_t size;
} op;

typedef struct bench {
    long ops;
    bool torch;         /* --entry torch */
    op *seq;            /* slots pattern */
    void *slot[SLOTS];
} bench;

static void die(const char *call, xsa_status st) {
    fprintf(stderr, "hotpath: %s failed: %s: %s\n", call, xsa_status_name(st), xsa_last_error());
    exit(1);
}

static void check(const char *call, xsa_status st) {
    if (st != XSA_SUCCESS) die(call, st);
}

/* One allocation or free through the entry points timed: xsalloc's C API
 * (device 0, the legacy default stream), or with torch set the ones
 * PyTorch's CUDAPluggableAllocator calls (xsalloc/pytorch.h), which also keep
 * the thread's current CUDA context. Inlined with torch a constant, so each
 * loop calls its entry points directly. */
static inline __attribute__((always_inline)) void alloc_via(bool torch, void **p, size_t size) {
    if (torch) {
        if (!(*p = xsa_torch_malloc((ssize_t)size, 0, NULL))) die("xsa_torch_malloc", XSA_ERROR_OUT_OF_MEMORY);
        return;
    }
    xsa_status st = xsa_malloc(p, size, 0, NULL);
    if (st != XSA_SUCCESS) die("xsa_malloc", st);
}

static inline __attribute__((always_inline)) void free_via(bool torch, void *p) {
    if (torch) {
        xsa_torch_free(p, 0, 0, NULL);
        return;
    }
    xsa_status st = xsa_free(p);
    if (st != XSA_SUCCESS) die("xsa_free", st);
}

/* ns per alloc+free pair of 1 MiB. */
static inline __attribute__((always_inline)) double pair_via(bool torch, bench *b) {
    double t0 = xsa_bench_now_ns();
    for (long i = 0; i < b->ops; i++) {
        void *p;
        alloc_via(torch, &p, 1 << 20);
        free_via(torch, p);
    }
    return (xsa_bench_now_ns() - t0) / (double)b->ops;
}

/* ns per free+alloc op on the live slots. */
static inline __attribute__((always_inline)) double slots_via(bool torch, bench *b) {
    double t0 = xsa_bench_now_ns();
    for (long i = 0; i < b->ops; i++) {
        void **p = &b->slot[b->seq[i].slot];
        free_via(torch, *p);
        alloc_via(torch, p, b->seq[i].size);
    }
    return (xsa_bench_now_ns() - t0) / (double)b->ops;
}

static double run_pair(bench *b) { return b->torch ? pair_via(true, b) : pair_via(false, b); }

static double run_slots(bench *b) { return b->torch ? slots_via(true, b) : slots_via(false, b); }

/* GHz from 2*10^7 dependent additions. */
static double core_ghz(void) { return xsa_bench_core_ghz(20000000); }

/* Draws the slots sequence and fills the slots with their first blocks. */
static void setup_slots(bench *b) {
    uint64_t rng = XSA_BENCH_SEED;
    b->seq = malloc((size_t)b->ops * sizeof *b->seq);
    if (!b->seq) {
        fprintf(stderr, "hotpath: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < b->ops; i++) {
        b->seq[i].slot = (uint32_t)(xsa_bench_xorshift(&rng) % SLOTS);
        b->seq[i].size = xsa_bench_draw_size(&rng);
    }
    for (int i = 0; i < SLOTS; i++)
        check("xsa_malloc", xsa_malloc(&b->slot[i], xsa_bench_draw_size(&rng), 0, NULL));
}

/* Device allocations and recycled pages so far. */
static int64_t driver_work(void) {
    xsa_device_stats s;
    check("xsa_get_stats", xsa_get_stats(0, &s));
    return s.num_device_alloc + s.num_pages_recycled;
}

/* Warm-up, then RUNS timed runs: median, with min and max; *misses counts
 * the driver work of the timed runs. */
static void measure(double (*fn)(bench *), bench *b, double out[3], int64_t *misses) {
    double t[RUNS];
    fn(b);
    int64_t before = driver_work();
    for (int i = 0; i < RUNS; i++) t[i] = fn(b);
    *misses = driver_work() - before;
    out[0] = xsa_bench_median(t, RUNS);
    out[1] = t[0];
    out[2] = t[RUNS - 1];
}

static int usage(void) {
    fprintf(stderr, "usage: hotpath [--driver sim|cuda] [--conf 'XSALLOC_CONF string'] [--ops N] [--entry api|torch]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *driver = NULL, *conf = NULL;
    bench b = {.ops = 200000};
    for (int i = 1; i < argc; i++) {
        if (i + 1 == argc) return usage();
        if (strcmp(argv[i], "--driver") == 0) driver = argv[++i];
        else if (strcmp(argv[i], "--conf") == 0) conf = argv[++i];
        else if (strcmp(argv[i], "--ops") == 0 && (b.ops = atol(argv[++i])) > 0) continue;
        else if (strcmp(argv[i], "--entry") == 0 && (strcmp(argv[i + 1], "api") == 0 || strcmp(argv[i + 1], "torch") == 0))
            b.torch = strcmp(argv[++i], "torch") == 0;
        else return usage();
    }
    check("xsa_use_driver", xsa_use_driver(driver));
    check("xsa_init", xsa_init(conf));
    /* As on a GPU with nothing queued, events complete at once (replay does
     * the same): page recycling's fences then let pages move as they would
     * there, so the simulator shows the same driver calls. */
    bool sim = strcmp(xsa_driver_name(), "sim") == 0;
    if (sim) xsa_sim_set_eager_events(1);
    const char *env;
    xsa_config_env(&env); /* the variable xsalloc read its settings from */
    const char *shown = conf ? conf : env ? env : "";
    double pair[3], slots[3], ghz = core_ghz();
    int64_t pair_misses, slots_misses;
    measure(run_pair, &b, pair, &pair_misses);
    setup_slots(&b);
    measure(run_slots, &b, slots, &slots_misses);
    ghz = (ghz + core_ghz()) / 2;
    const char *entry = b.torch ? "torch" : "api";
    printf("Hot path (driver %s, conf '%s', entry points %s, %ld ops a run, median of %d runs after a warm-up)\n\n",
           xsa_driver_name(), shown, entry, b.ops, RUNS);
    printf("| %-40s | %9s | %13s | %7s | %10s | %15s |\n", "pattern", "xsalloc", "(min-max)",
           "native", "expandable", "cudaMallocAsync");
    printf("|%s|%s|%s|%s|%s|%s|\n", "------------------------------------------", "-----------",
           "---------------", "---------", "------------", "-----------------");
    printf("| %-40s | %9.0f | %5.0f - %5.0f | %7d | %10d | %15d |\n", "alloc 1 MiB + free (ns a pair)",
           pair[0], pair[1], pair[2], 531, 788, 1658);
    printf("| %-40s | %9.0f | %5.0f - %5.0f | %7d | %10d | %15d |\n",
           "64 live slots, 512 B-64 MiB (ns an op)", slots[0], slots[1], slots[2], 947, 1239, 2854);
    printf("\nPyTorch 2.11 figures on an H100 from benchmarks/traces/README.md.\n");
    printf("\nTimed calls that went to the driver: %lld (pair), %lld (slots). Core clock: %.2f GHz.\n",
           (long long)pair_misses, (long long)slots_misses, ghz);
    printf("{\"driver\": \"%s\", \"conf\": \"%s\", \"entry\": \"%s\", \"ops\": %ld, \"pair_ns\": %.1f, \"slots_ns\": %.1f"
           ", \"pair_misses\": %lld, \"slots_misses\": %lld, \"core_ghz\": %.2f}\n",
           xsa_driver_name(), shown, entry, b.ops, pair[0], slots[0], (long long)pair_misses, (long long)slots_misses, ghz);
    for (int i = 0; i < SLOTS; i++) check("xsa_free", xsa_free(b.slot[i]));
    free(b.seq);
    check("xsa_shutdown", xsa_shutdown());
    if (sim) xsa_sim_set_eager_events(0);
    return 0;
}
