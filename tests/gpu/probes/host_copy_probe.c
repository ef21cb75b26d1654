/*
 * host_copy_probe: the backup path's entry points (copy streams, pinned
 * host memory, copies; vmm/driver.h) on the real driver, then the
 * simulated driver's answers beside the real one's.
 *
 * Design: a standalone program for a machine with a GPU
 * (tests/gpu/run_host_copy_probe.sh builds it with gcc, no Bazel), in
 * three parts:
 *   1. checks, one line each, `check <name>: ok|FAIL ...`: 64 MiB round
 *      trips through pinned (mem_host_alloc) and registered mmap'd memory
 *      (mem_host_register) into VMM-mapped device memory on a stream from
 *      stream_create, byte-compared, with the bandwidth of each direction
 *      (GiB/s, best and median of REPS timed copies, each followed by a
 *      stream synchronize); pageable memory's for comparison; a copy from
 *      a thread without a context; a stream destroyed with a copy queued.
 *      Then `time` lines: what the host calls and one copy's submission
 *      cost the CPU (for sim/cost.c, should a cost be grounded).
 *   2. comparisons, `compare <case>: cuda <codes> | sim <codes>`, with
 *      MISMATCH where the simulator's rule (xsalloc/sim.h) differs: each
 *      case runs on the real driver, then on the simulated one, through
 *      the same table calls.
 *   3. `host_copy_probe risky CASE`: one case that may poison the context
 *      (an illegal address is sticky) or crash the driver, in a process of
 *      its own (the script runs each; a crash is printed there).
 * Exits 1 on a failed check or a mismatch.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vmm/driver_cuda.h"
#include "xsalloc/sim.h"

#define MiB ((size_t)1 << 20)
#define BYTES (64 * MiB)
#define REPS 10
#define MAX_CODES 32

static xsa_driver *cu;
static int failures;

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* A failed call ends the check's line with its code. */
static bool ok_call(const char *check, xsa_cu_result r) {
    if (r == XSA_CU_SUCCESS) return true;
    printf("check %s: FAIL %d %s\n", check, r, cu->error_string(r));
    failures++;
    return false;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = (i + seed) * 0x9e3779b97f4a7c15ull;
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* ---- part 1: checks on the real driver ------------------------------------------ */

typedef struct {
    xsa_devptr va;
    size_t size;
    xsa_mem_handle h;
} device_mem;

static bool device_alloc(device_mem *m) {
    int dev = 0;
    m->size = BYTES;
    return ok_call("device.reserve", cu->mem_address_reserve(&m->va, m->size, 0)) &&
           ok_call("device.create", cu->mem_create(&m->h, m->size, 0, 0)) &&
           ok_call("device.map", cu->mem_map(m->va, m->size, 0, m->h)) &&
           ok_call("device.set_access", cu->mem_set_access(m->va, m->size, &dev, 1));
}

static void device_free(device_mem *m) {
    ok_call("device.unmap", cu->mem_unmap(m->va, m->size));
    ok_call("device.release", cu->mem_release(m->h));
    ok_call("device.address_free", cu->mem_address_free(m->va, m->size));
}

/* Best and median GiB/s of REPS copies of BYTES in one direction. */
static void bandwidth(const char *name, bool to_host, void *host, xsa_devptr dev, xsa_stream s) {
    uint64_t ns[REPS];
    for (int i = -1; i < REPS; i++) { /* one warm-up */
        uint64_t t0 = xsa_driver_now_ns();
        xsa_cu_result r = to_host ? cu->memcpy_dtoh_async(host, dev, BYTES, s) : cu->memcpy_htod_async(dev, host, BYTES, s);
        if (r == XSA_CU_SUCCESS) r = cu->stream_synchronize(s);
        if (!ok_call(name, r)) return;
        if (i >= 0) ns[i] = xsa_driver_now_ns() - t0;
    }
    qsort(ns, REPS, sizeof *ns, cmp_u64);
    double gib = (double)BYTES / (1u << 30);
    printf("check %s: ok %.1f GiB/s (best of %d; median %.1f)\n", name, gib / (ns[0] / 1e9), REPS,
           gib / (ns[REPS / 2] / 1e9));
}

/* host -> device -> back: the bytes that come back are the ones sent. */
static void round_trip(const char *name, unsigned char *src, unsigned char *dst, xsa_devptr dev, xsa_stream s,
                       unsigned seed) {
    char check[64];
    snprintf(check, sizeof check, "%s.round_trip_64MiB", name);
    fill(src, BYTES, seed);
    memset(dst, 0, BYTES);
    if (!ok_call(check, cu->memcpy_htod_async(dev, src, BYTES, s)) ||
        !ok_call(check, cu->memcpy_dtoh_async(dst, dev, BYTES, s)) || !ok_call(check, cu->stream_synchronize(s)))
        return;
    bool same = memcmp(src, dst, BYTES) == 0;
    printf("check %s: %s\n", check, same ? "ok bytes equal" : "FAIL bytes differ");
    failures += !same;
}

static void timed(const char *what, uint64_t ns) { printf("time %s: %.3f ms\n", what, ns / 1e6); }

static struct {
    unsigned char *dst;
    xsa_devptr dev;
    xsa_stream s;
    xsa_cu_result r;
} fresh_copy;

static void *copy_without_context(void *arg) {
    (void)arg;
    fresh_copy.r = cu->memcpy_dtoh_async(fresh_copy.dst, fresh_copy.dev, BYTES, fresh_copy.s);
    if (fresh_copy.r == XSA_CU_SUCCESS) fresh_copy.r = cu->stream_synchronize(fresh_copy.s);
    return NULL;
}

static void checks(void) {
    device_mem m;
    xsa_stream s = NULL;
    if (!device_alloc(&m) || !ok_call("stream_create", cu->stream_create(&s, 0))) return;
    printf("check stream_create: ok\n");
    unsigned char *pin_a = NULL, *pin_b = NULL;
    uint64_t t0 = xsa_driver_now_ns();
    if (!ok_call("pinned.alloc_64MiB", cu->mem_host_alloc((void **)&pin_a, BYTES))) return;
    timed("mem_host_alloc 64MiB", xsa_driver_now_ns() - t0);
    if (!ok_call("pinned.alloc_64MiB", cu->mem_host_alloc((void **)&pin_b, BYTES))) return;
    printf("check pinned.alloc_64MiB: ok page-aligned %s\n", (uintptr_t)pin_a % 4096 ? "no" : "yes");
    unsigned char *reg_a = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *reg_b = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reg_a == MAP_FAILED || reg_b == MAP_FAILED) {
        printf("check registered.mmap: FAIL\n");
        failures++;
        return;
    }
    memset(reg_a, 1, BYTES); /* touched: registering pins present pages */
    memset(reg_b, 1, BYTES);
    t0 = xsa_driver_now_ns();
    if (!ok_call("registered.register_64MiB", cu->mem_host_register(reg_a, BYTES))) return;
    timed("mem_host_register 64MiB (touched)", xsa_driver_now_ns() - t0);
    if (!ok_call("registered.register_64MiB", cu->mem_host_register(reg_b, BYTES))) return;
    printf("check registered.register_64MiB: ok\n");

    round_trip("pinned", pin_a, pin_b, m.va, s, 1);
    round_trip("registered", reg_a, reg_b, m.va, s, 2);
    round_trip("pinned_to_registered", pin_a, reg_b, m.va, s, 3);
    bandwidth("pinned.htod_64MiB", false, pin_a, m.va, s);
    bandwidth("pinned.dtoh_64MiB", true, pin_b, m.va, s);
    bandwidth("registered.htod_64MiB", false, reg_a, m.va, s);
    bandwidth("registered.dtoh_64MiB", true, reg_b, m.va, s);
    unsigned char *pageable = malloc(BYTES);
    if (pageable) {
        memset(pageable, 1, BYTES);
        bandwidth("pageable.htod_64MiB", false, pageable, m.va, s);
        bandwidth("pageable.dtoh_64MiB", true, pageable, m.va, s);
        free(pageable);
    }

    /* A thread that never made a context current copies on the stream. */
    fill(pin_a, BYTES, 4);
    memset(reg_b, 0, BYTES);
    ok_call("no_context_thread.htod", cu->memcpy_htod_async(m.va, pin_a, BYTES, s));
    fresh_copy.dst = reg_b, fresh_copy.dev = m.va, fresh_copy.s = s;
    pthread_t t;
    pthread_create(&t, NULL, copy_without_context, NULL);
    pthread_join(t, NULL);
    if (ok_call("no_context_thread.dtoh", fresh_copy.r)) {
        bool same = memcmp(pin_a, reg_b, BYTES) == 0;
        printf("check no_context_thread.dtoh: %s\n", same ? "ok bytes equal" : "FAIL bytes differ");
        failures += !same;
    }

    /* One copy's submission, as the CPU pays it (4 KiB, pinned). */
    uint64_t sub[31];
    for (int i = 0; i < 31; i++) {
        uint64_t t1 = xsa_driver_now_ns();
        cu->memcpy_dtoh_async(pin_b, m.va, 4096, s);
        sub[i] = xsa_driver_now_ns() - t1;
    }
    cu->stream_synchronize(s);
    qsort(sub, 31, sizeof *sub, cmp_u64);
    printf("time memcpy_dtoh_async call, 4 KiB pinned: median %.2f us (min %.2f)\n", sub[15] / 1e3, sub[0] / 1e3);

    /* Destroyed with a copy queued: the copy completes (CUDA's rule). */
    xsa_stream doomed = NULL;
    fill(pin_a, BYTES, 5);
    ok_call("destroy_with_queued_copy", cu->memcpy_htod_async(m.va, pin_a, BYTES, s));
    ok_call("destroy_with_queued_copy", cu->stream_synchronize(s));
    memset(pin_b, 0, BYTES);
    if (ok_call("destroy_with_queued_copy", cu->stream_create(&doomed, 0)) &&
        ok_call("destroy_with_queued_copy", cu->memcpy_dtoh_async(pin_b, m.va, BYTES, doomed)) &&
        ok_call("destroy_with_queued_copy", cu->stream_destroy(doomed)) &&
        ok_call("destroy_with_queued_copy", cu->ctx_synchronize(0))) {
        bool same = memcmp(pin_a, pin_b, BYTES) == 0;
        printf("check destroy_with_queued_copy: %s\n", same ? "ok bytes equal" : "FAIL bytes differ");
        failures += !same;
    }

    t0 = xsa_driver_now_ns();
    if (ok_call("registered.unregister", cu->mem_host_unregister(reg_a))) timed("mem_host_unregister 64MiB", xsa_driver_now_ns() - t0);
    if (ok_call("registered.unregister", cu->mem_host_unregister(reg_b))) printf("check registered.unregister: ok\n");
    munmap(reg_a, BYTES);
    munmap(reg_b, BYTES);
    t0 = xsa_driver_now_ns();
    if (ok_call("pinned.free", cu->mem_free_host(pin_a))) timed("mem_free_host 64MiB", xsa_driver_now_ns() - t0);
    if (ok_call("pinned.free", cu->mem_free_host(pin_b))) printf("check pinned.free: ok\n");
    if (ok_call("stream_destroy", cu->stream_destroy(s))) printf("check stream_destroy: ok\n");
    device_free(&m);
}

/* ---- part 2: the real driver's answers against the simulator's ------------------------ */

typedef struct {
    xsa_driver *d;
    xsa_stream s1, s2;
    xsa_devptr buf;       /* 1 MiB of cuMemAlloc memory */
    unsigned char *pinned; /* 1 MiB from mem_host_alloc */
    unsigned char *pageable;
    int codes[MAX_CODES], n;
} run;

static void note(run *r, xsa_cu_result code) {
    if (r->n < MAX_CODES) r->codes[r->n++] = code;
}

static long page(void) { return sysconf(_SC_PAGESIZE); }

static unsigned char *pages(int n) {
    unsigned char *m = mmap(NULL, (size_t)n * (size_t)page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) exit(2);
    memset(m, 1, (size_t)n * (size_t)page());
    return m;
}

/* Ends the capture on s (noting the result), destroys any graph. */
static void end(run *r, xsa_stream s) {
    xsa_graph g = NULL;
    note(r, XSA_DRV(r->d, stream_end_capture, s, &g));
    if (g) XSA_DRV(r->d, graph_destroy, g);
}

static void host_alloc_zero(run *r) {
    void *p = NULL;
    note(r, XSA_DRV(r->d, mem_host_alloc, &p, 0));
    note(r, p != NULL);
    if (p) XSA_DRV(r->d, mem_free_host, p);
}

static void free_host_errors(run *r) {
    void *p = NULL;
    note(r, XSA_DRV(r->d, mem_host_alloc, &p, 4096));
    note(r, XSA_DRV(r->d, mem_free_host, (char *)p + 64));
    note(r, XSA_DRV(r->d, mem_free_host, r->pageable));
    note(r, XSA_DRV(r->d, mem_free_host, p));
    note(r, XSA_DRV(r->d, mem_free_host, p));
}

static void register_errors(run *r) {
    unsigned char *m = pages(4);
    long p = page();
    note(r, XSA_DRV(r->d, mem_host_register, m, 2 * (size_t)p));
    note(r, XSA_DRV(r->d, mem_host_register, m, 2 * (size_t)p));
    note(r, XSA_DRV(r->d, mem_host_register, m + p, (size_t)p));
    note(r, XSA_DRV(r->d, mem_host_register, m + p, 2 * (size_t)p)); /* half over it */
    note(r, XSA_DRV(r->d, mem_host_register, r->pinned, 4096));      /* cuMemHostAlloc memory */
    note(r, XSA_DRV(r->d, mem_host_unregister, m + p));
    note(r, XSA_DRV(r->d, mem_host_unregister, r->pinned));
    note(r, XSA_DRV(r->d, mem_free_host, m));
    note(r, XSA_DRV(r->d, mem_host_unregister, m));
    note(r, XSA_DRV(r->d, mem_host_unregister, m));
    munmap(m, 4 * (size_t)p);
}

/* Byte ranges that share a page, and one not page-aligned across pages. */
static void register_unaligned(run *r) {
    unsigned char *m = pages(4);
    note(r, XSA_DRV(r->d, mem_host_register, m + 100, 100));
    note(r, XSA_DRV(r->d, mem_host_register, m + 300, 100));
    note(r, XSA_DRV(r->d, mem_host_register, m + page() + 100, 2 * (size_t)page()));
    note(r, XSA_DRV(r->d, mem_host_unregister, m + 100));
    note(r, XSA_DRV(r->d, mem_host_unregister, m + 300));
    note(r, XSA_DRV(r->d, mem_host_unregister, m + page() + 100));
    munmap(m, 4 * (size_t)page());
}

static void register_unmapped(run *r) {
    unsigned char *m = pages(2);
    munmap(m, 2 * (size_t)page());
    note(r, XSA_DRV(r->d, mem_host_register, m, (size_t)page()));
    note(r, XSA_DRV(r->d, mem_host_register, NULL, (size_t)page()));
    note(r, XSA_DRV(r->d, mem_host_register, r->pageable, 0));
}

static void copy_shapes(run *r) {
    memset(r->pageable, 7, 4096);
    note(r, XSA_DRV(r->d, memcpy_dtoh_async, r->pinned, r->buf, 0, r->s1));
    note(r, XSA_DRV(r->d, memcpy_htod_async, r->buf, r->pageable, 4096, r->s1));
    note(r, XSA_DRV(r->d, stream_synchronize, r->s1)); /* s1 is non-blocking: the legacy stream would not wait */
    note(r, XSA_DRV(r->d, memcpy_dtoh_async, r->pinned, r->buf, 4096, NULL));
    note(r, XSA_DRV(r->d, stream_synchronize, NULL));
    note(r, r->pinned[4095] == 7);
}

/* Captured with pinned and registered memory; a replay copies. */
static void capture_pinned(run *r) {
    unsigned char *m = pages(1);
    xsa_graph g = NULL;
    xsa_graph_exec x = NULL;
    note(r, XSA_DRV(r->d, mem_host_register, m, (size_t)page()));
    memset(r->pinned, 9, 4096);
    memset(m, 0, (size_t)page());
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, memcpy_htod_async, r->buf, r->pinned, 4096, r->s1));
    note(r, XSA_DRV(r->d, memcpy_dtoh_async, m, r->buf, 4096, r->s1));
    note(r, m[100] == 9);
    note(r, XSA_DRV(r->d, stream_end_capture, r->s1, &g));
    note(r, XSA_DRV(r->d, graph_instantiate, &x, g));
    note(r, XSA_DRV(r->d, graph_launch, x, r->s2));
    note(r, XSA_DRV(r->d, stream_synchronize, r->s2));
    note(r, m[100] == 9);
    if (x) XSA_DRV(r->d, graph_exec_destroy, x);
    if (g) XSA_DRV(r->d, graph_destroy, g);
    note(r, XSA_DRV(r->d, mem_host_unregister, m));
    munmap(m, (size_t)page());
}

static void capture_pageable(run *r) {
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, memcpy_dtoh_async, r->pageable, r->buf, 4096, r->s1));
    note(r, XSA_DRV(r->d, memcpy_htod_async, r->buf, r->pinned, 4096, r->s1));
    end(r, r->s1);
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, memcpy_htod_async, r->buf, r->pinned + 4096 * 256 - 8, 16, r->s1)); /* past its end */
    end(r, r->s1);
}

/* Copies on a stream outside a global-mode capture under way. */
static void copy_beside_capture(run *r) {
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, memcpy_dtoh_async, r->pinned, r->buf, 4096, r->s2));
    note(r, XSA_DRV(r->d, memcpy_dtoh_async, r->pageable, r->buf, 4096, r->s2));
    end(r, r->s1);
    note(r, XSA_DRV(r->d, stream_synchronize, r->s2));
}

static const struct {
    const char *name;
    void (*fn)(run *r);
} cases[] = {
    {"host_alloc_zero", host_alloc_zero},
    {"free_host_errors", free_host_errors},
    {"register_errors", register_errors},
    {"register_unaligned", register_unaligned},
    {"register_unmapped", register_unmapped},
    {"copy_shapes", copy_shapes},
    {"capture_pinned", capture_pinned},
    {"capture_pageable", capture_pageable},
    {"copy_beside_capture", copy_beside_capture},
};

/* ---- part 3: cases in a process of their own ------------------------------------------- */

/* A copy over device memory not mapped, or mapped without access: the
 * simulator says ILLEGAL_ADDRESS at the call; the GPU may say it later,
 * sticky, at the synchronize. */
static void copy_unmapped(run *r, bool mapped) {
    xsa_devptr va = 0;
    xsa_mem_handle h = 0;
    size_t g = 2 * MiB;
    note(r, XSA_DRV(r->d, mem_address_reserve, &va, g, 0));
    if (mapped) {
        note(r, XSA_DRV(r->d, mem_create, &h, g, 0, 0));
        note(r, XSA_DRV(r->d, mem_map, va, g, 0, h));
    }
    note(r, XSA_DRV(r->d, memcpy_dtoh_async, r->pinned, va, 4096, r->s1));
    note(r, XSA_DRV(r->d, stream_synchronize, r->s1));
    if (mapped) {
        XSA_DRV(r->d, mem_unmap, va, g);
        XSA_DRV(r->d, mem_release, h);
    }
    XSA_DRV(r->d, mem_address_free, va, g);
}
static void copy_unmapped_va(run *r) { copy_unmapped(r, false); }
static void copy_without_access(run *r) { copy_unmapped(r, true); }

/* The host calls while a global-mode capture is under way on another
 * stream (reported elsewhere: a registration invalidates it, and once
 * crashed the driver). */
static void host_call_during_capture(run *r, int call) {
    unsigned char *m = pages(1);
    void *p = NULL;
    if (call == 1) XSA_DRV(r->d, mem_host_alloc, &p, 4096);
    if (call == 3) XSA_DRV(r->d, mem_host_register, m, (size_t)page());
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, call == 0   ? XSA_DRV(r->d, mem_host_alloc, &p, 4096)
          : call == 1 ? XSA_DRV(r->d, mem_free_host, p)
          : call == 2 ? XSA_DRV(r->d, mem_host_register, m, (size_t)page())
                      : XSA_DRV(r->d, mem_host_unregister, m));
    end(r, r->s1);
    /* Whatever the call did: undone now, the answers ignored. */
    if (p) XSA_DRV(r->d, mem_free_host, p);
    XSA_DRV(r->d, mem_host_unregister, m);
    munmap(m, (size_t)page());
}
static void alloc_during_capture(run *r) { host_call_during_capture(r, 0); }
static void free_during_capture(run *r) { host_call_during_capture(r, 1); }
static void register_during_capture(run *r) { host_call_during_capture(r, 2); }
static void unregister_during_capture(run *r) { host_call_during_capture(r, 3); }

/* If CUDA lets it go, the stream is gone: nothing more is asked of it. */
static void destroy_capturing_stream(run *r) {
    xsa_stream s = NULL;
    note(r, XSA_DRV(r->d, stream_create, &s, 0));
    note(r, XSA_DRV(r->d, stream_begin_capture, s));
    xsa_cu_result destroyed = XSA_DRV(r->d, stream_destroy, s);
    note(r, destroyed);
    if (destroyed) {
        end(r, s);
        note(r, XSA_DRV(r->d, stream_destroy, s));
    }
}

static const struct {
    const char *name;
    void (*fn)(run *r);
} risky[] = {
    {"copy_unmapped_va", copy_unmapped_va},
    {"copy_without_access", copy_without_access},
    {"alloc_during_capture", alloc_during_capture},
    {"free_during_capture", free_during_capture},
    {"register_during_capture", register_during_capture},
    {"unregister_during_capture", unregister_during_capture},
    {"destroy_capturing_stream", destroy_capturing_stream},
};

/* ---- the two drivers ------------------------------------------------------------------- */

static void run_setup(run *r, xsa_driver *d) {
    memset(r, 0, sizeof *r);
    r->d = d;
    r->pageable = malloc(MiB);
    if (!r->pageable || XSA_DRV(d, stream_create, &r->s1, 0) || XSA_DRV(d, stream_create, &r->s2, 0) ||
        XSA_DRV(d, mem_alloc, &r->buf, MiB, 0) || XSA_DRV(d, mem_host_alloc, (void **)&r->pinned, MiB)) {
        printf("host copy probe: cannot set up the %s driver\n", d->name);
        exit(2);
    }
}

static void run_teardown(run *r) {
    XSA_DRV(r->d, ctx_synchronize, 0);
    XSA_DRV(r->d, stream_destroy, r->s1);
    XSA_DRV(r->d, stream_destroy, r->s2);
    XSA_DRV(r->d, mem_free, r->buf);
    XSA_DRV(r->d, mem_free_host, r->pinned);
    free(r->pageable);
}

/* Runs the case on both drivers (cuda may be NULL) and prints the codes;
 * returns whether they differ. */
static bool compare(const char *name, void (*fn)(run *r)) {
    run c, s;
    if (cu) {
        run_setup(&c, cu);
        fn(&c);
        run_teardown(&c);
    }
    run_setup(&s, xsa_driver_sim());
    fn(&s);
    run_teardown(&s);
    printf("compare %s:", name);
    if (cu) {
        printf(" cuda");
        for (int i = 0; i < c.n; i++) printf(" %d", c.codes[i]);
        printf(" |");
    }
    printf(" sim");
    for (int i = 0; i < s.n; i++) printf(" %d", s.codes[i]);
    bool differ = cu && (c.n != s.n || memcmp(c.codes, s.codes, (size_t)s.n * sizeof *s.codes));
    printf("%s\n", differ ? "  MISMATCH" : "");
    return differ;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "risky-list") == 0) {
        for (size_t i = 0; i < sizeof risky / sizeof *risky; i++) printf("%s\n", risky[i].name);
        return 0;
    }
    char err[512] = "";
    cu = xsa_driver_cuda(err, sizeof err);
    if (!cu) printf("host copy probe: no real driver (%s): simulated answers only\n", err);
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.eager_events = 1; /* the GPU is done with the probe's work before the next call */
    if (xsa_sim_configure(&c)) return 2;
    if (argc == 3 && strcmp(argv[1], "risky") == 0) {
        for (size_t i = 0; i < sizeof risky / sizeof *risky; i++)
            if (strcmp(argv[2], risky[i].name) == 0) return compare(risky[i].name, risky[i].fn) ? 1 : 0;
        printf("host copy probe: no risky case %s\n", argv[2]);
        return 2;
    }
    if (cu) checks();
    int mismatches = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) mismatches += compare(cases[i].name, cases[i].fn);
    if (!xsa_sim_check(err, sizeof err)) {
        printf("host copy probe: xsa_sim_check: %s\n", err);
        failures++;
    }
    printf("host copy probe: %d failed checks, %d mismatches\n", failures, mismatches);
    return failures || mismatches ? 1 : 0;
}
