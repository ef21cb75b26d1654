/*
 * inproc_ab: two builds of libxsalloc.so timed in one process, in
 * alternating batches, for before/after comparisons on a host whose clock
 * changes under a running process.
 *
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -I. benchmarks/gpu/inproc_ab.c -ldl -o inproc_ab
 *   inproc_ab LIB_A LIB_B [--driver cuda|sim] [--conf STR] [--entry api|torch]
 *             [--rounds N] [--batch N]
 *
 * Design: on the GPU host the core clock moves between about 1.2 and 3 GHz
 * over seconds (benchmarks/clock_probe.c), so separate processes, even
 * interleaved, differ by more than most changes. Here both libraries are
 * dlopen'ed (RTLD_LOCAL: each keeps its own state and pool), and each round
 * times a batch of the pair pattern (alloc 1 MiB + free) and of the 64-slot
 * window (hotpath.c's patterns and size law) in each library, A first in
 * odd rounds and B first in even ones: both see the same clock to within a
 * batch (a few ms). Prints the median ns of each library and the median
 * and range of the per-round ratio B/A, then one JSON line.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "benchmarks/timing.h"

#define SLOTS 64
#define MAX_ROUNDS 10000

typedef struct lib {
    const char *path;
    int (*use_driver)(const char *);
    int (*init)(const char *);
    int (*malloc_)(void **, size_t, int, void *);
    int (*free_)(void *);
    void *(*torch_malloc)(ssize_t, int, void *);
    void (*torch_free)(void *, ssize_t, int, void *);
    const char *(*last_error)(void);
    void *slot[SLOTS];
} lib;

static int torch_entry;
static uint32_t *seq; /* window: slot << 26 | size */
static long batch = 20000;

static void die(const lib *l, const char *what) {
    fprintf(stderr, "inproc_ab: %s: %s%s%s\n", l->path, what, l->last_error ? ": " : "", l->last_error ? l->last_error() : "");
    exit(1);
}

static void *sym(lib *l, void *h, const char *name) {
    void *f = dlsym(h, name);
    if (!f) die(l, name);
    return f;
}

static void open_lib(lib *l, const char *driver, const char *conf) {
    void *h = dlopen(l->path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "inproc_ab: %s\n", dlerror());
        exit(1);
    }
    l->last_error = sym(l, h, "xsa_last_error");
    l->use_driver = sym(l, h, "xsa_use_driver");
    l->init = sym(l, h, "xsa_init");
    l->malloc_ = sym(l, h, "xsa_malloc");
    l->free_ = sym(l, h, "xsa_free");
    l->torch_malloc = sym(l, h, "xsa_torch_malloc");
    l->torch_free = sym(l, h, "xsa_torch_free");
    if (l->use_driver(driver) || l->init(conf)) die(l, "initialisation");
}

static void *alloc(lib *l, size_t size) {
    void *p = NULL;
    if (torch_entry ? !(p = l->torch_malloc((ssize_t)size, 0, NULL)) : l->malloc_(&p, size, 0, NULL) != 0) die(l, "malloc");
    return p;
}

static void release(lib *l, void *p) {
    if (torch_entry)
        l->torch_free(p, 0, 0, NULL);
    else if (l->free_(p) != 0)
        die(l, "free");
}

/* ns a pair over one batch. */
static double pairs(lib *l) {
    double t0 = xsa_bench_now_ns();
    for (long i = 0; i < batch; i++) release(l, alloc(l, (size_t)1 << 20));
    return (xsa_bench_now_ns() - t0) / batch;
}

/* ns a window op over one batch (the batch's part of the sequence). */
static double window(lib *l, long round) {
    const uint32_t *s = seq + (size_t)(round % 8) * batch;
    double t0 = xsa_bench_now_ns();
    for (long i = 0; i < batch; i++) {
        void **p = &l->slot[s[i] >> 26];
        release(l, *p);
        *p = alloc(l, s[i] & ((1u << 26) - 1));
    }
    return (xsa_bench_now_ns() - t0) / batch;
}

static void report(const char *name, double *a, double *b, long n, char *json, size_t len) {
    double ratio[MAX_ROUNDS];
    for (long i = 0; i < n; i++) ratio[i] = b[i] / a[i];
    double ma = xsa_bench_median(a, (size_t)n), mb = xsa_bench_median(b, (size_t)n), mr = xsa_bench_median(ratio, (size_t)n);
    printf("%-6s A %7.1f ns  B %7.1f ns  B/A median %.3f (range %.3f-%.3f, %ld rounds)\n", name, ma, mb, mr, ratio[0],
           ratio[n - 1], n);
    snprintf(json, len, "\"%s_a_ns\": %.1f, \"%s_b_ns\": %.1f, \"%s_ratio\": %.4f", name, ma, name, mb, name, mr);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: inproc_ab LIB_A LIB_B [--driver cuda|sim] [--conf STR] [--entry api|torch] [--rounds N] [--batch N]\n");
        return 2;
    }
    const char *driver = "cuda", *conf = "expandable_segments:True,page_recycling:False";
    long rounds = 200;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--driver")) driver = argv[i + 1];
        else if (!strcmp(argv[i], "--conf")) conf = argv[i + 1];
        else if (!strcmp(argv[i], "--entry")) torch_entry = !strcmp(argv[i + 1], "torch");
        else if (!strcmp(argv[i], "--rounds")) rounds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atol(argv[i + 1]);
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || batch < 1) return 2;
    lib libs[2] = {{.path = argv[1]}, {.path = argv[2]}};
    seq = malloc((size_t)8 * batch * sizeof *seq);
    if (!seq) return 1;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (long i = 0; i < 8 * batch; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned e = 9 + (unsigned)(rng % 17);
        uint32_t size = (1u << e) + (uint32_t)((rng >> 20) % (1u << e));
        seq[i] = (uint32_t)((rng >> 40) % SLOTS) << 26 | size;
    }
    for (int k = 0; k < 2; k++) {
        open_lib(&libs[k], driver, conf);
        for (int s = 0; s < SLOTS; s++) libs[k].slot[s] = alloc(&libs[k], 4096);
        pairs(&libs[k]), window(&libs[k], 0); /* warm-up */
    }
    static double pa[MAX_ROUNDS], pb[MAX_ROUNDS], wa[MAX_ROUNDS], wb[MAX_ROUNDS];
    for (long r = 0; r < rounds; r++) {
        int first = (int)(r % 2);
        for (int k = first, n = 0; n < 2; k ^= 1, n++) {
            double p = pairs(&libs[k]), w = window(&libs[k], r);
            *(k ? &pb[r] : &pa[r]) = p;
            *(k ? &wb[r] : &wa[r]) = w;
        }
    }
    char pj[200], wj[200];
    printf("A = %s\nB = %s\ndriver %s, conf '%s', entry points %s, %ld rounds of %ld\n", argv[1], argv[2], driver, conf,
           torch_entry ? "torch" : "api", rounds, batch);
    report("pair", pa, pb, rounds, pj, sizeof pj);
    report("window", wa, wb, rounds, wj, sizeof wj);
    printf("{\"conf\": \"%s\", \"entry\": \"%s\", \"rounds\": %ld, \"batch\": %ld, %s, %s}\n", conf,
           torch_entry ? "torch" : "api", rounds, batch, pj, wj);
    return 0;
}
