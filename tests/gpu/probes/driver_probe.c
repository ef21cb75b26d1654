/*
 * driver_probe: what the real CUDA driver answers, through our own table.
 *
 * Design: a standalone program for a machine with a GPU (run_probe.sh
 * builds it with gcc, no Bazel). It goes through xsa_driver_cuda(), so it
 * also smoke-tests the entry points of vmm/driver_cuda.c (those of the
 * backup path: host_copy_probe.c), then records the
 * error code of each misuse that the simulated driver must reproduce, one
 * line each: `probe <case>: <code> <NAME: description>`. Every case works in
 * its own 64 MiB reservation and cleans up after itself (the cleanup codes
 * are printed too, as they say what state the misuse left behind), so one
 * surprising answer does not change the next. Last come timings, median of
 * 31, for comparison with the driver costs in /work/shared/traces/README.md.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmm/driver_cuda.h"

#define MiB ((size_t)1 << 20)
#define RUN_BYTES (64 * MiB)
#define SAMPLES 31

static xsa_driver *d;
static size_t gran;
static const int dev0[1] = {0};

static void probe(const char *label, xsa_cu_result r) {
    printf("probe %s: %d %s\n", label, r, d->error_string(r));
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void report_median(const char *what, uint64_t *ns, int n) {
    qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
    printf("time %s: median %.2f us (min %.2f, max %.2f, n=%d)\n", what, ns[n / 2] / 1e3,
           ns[0] / 1e3, ns[n - 1] / 1e3, n);
}

static xsa_devptr reserve(void) {
    xsa_devptr p = 0;
    xsa_cu_result r = d->mem_address_reserve(&p, RUN_BYTES, 0);
    if (r) {
        probe("setup.reserve", r);
        exit(1);
    }
    return p;
}

static xsa_mem_handle create(size_t size) {
    xsa_mem_handle h = 0;
    xsa_cu_result r = d->mem_create(&h, size, 0, 0);
    if (r) {
        probe("setup.create", r);
        exit(1);
    }
    return h;
}

static void basics(void) {
    int count = 0, vmm = -1, fd_ok = -1;
    size_t total = 0, free_b = 0, total_info = 0, gran_export = 0;
    probe("basic.device_get_count", d->device_get_count(&count));
    printf("info device_count: %d\n", count);
    probe("basic.device_total_mem", d->device_total_mem(&total, 0));
    probe("basic.mem_get_info", d->mem_get_info(0, &free_b, &total_info));
    printf("info total_mem: %zu (mem_get_info total %zu, free %zu)\n", total, total_info, free_b);
    probe("basic.granularity", d->mem_get_granularity(&gran, 0, 0));
    probe("basic.granularity_exportable", d->mem_get_granularity(&gran_export, 0, 1));
    printf("info granularity: %zu (exportable %zu)\n", gran, gran_export);
    probe("basic.attr_vmm", d->device_get_attribute(&vmm, XSA_ATTR_VMM_SUPPORTED, 0));
    probe("basic.attr_posix_fd", d->device_get_attribute(&fd_ok, XSA_ATTR_POSIX_FD_SUPPORTED, 0));
    printf("info vmm_supported: %d posix_fd_supported: %d\n", vmm, fd_ok);
    for (int p = 1; p < count; p++) {
        int can = -1;
        probe("basic.can_access_peer", d->device_can_access_peer(&can, 0, p));
        printf("info peer 0->%d: %d\n", p, can);
    }
    probe("basic.attr_bad_device", d->device_get_attribute(&vmm, XSA_ATTR_VMM_SUPPORTED, count));
    probe("basic.init_again", d->init());
}

/* The segment's normal life: 4 one-granule handles mapped one by one into
 * a run, access granted once over the run, then torn down. */
static void normal_run(void) {
    xsa_devptr base = reserve();
    xsa_mem_handle h[4];
    printf("info reservation: 0x%llx + %zu\n", (unsigned long long)base, (size_t)RUN_BYTES);
    for (int i = 0; i < 4; i++) {
        probe("run.create", d->mem_create(&h[i], gran, 0, 0));
        probe("run.map", d->mem_map(base + i * gran, gran, 0, h[i]));
    }
    probe("run.set_access_4_mappings_one_call", d->mem_set_access(base, 4 * gran, dev0, 1));
    for (int i = 0; i < 4; i++) {
        probe("run.unmap", d->mem_unmap(base + i * gran, gran));
        probe("run.release", d->mem_release(h[i]));
    }
    probe("run.address_free", d->mem_address_free(base, RUN_BYTES));
}

static void error_cases(void) {
    xsa_devptr base;
    xsa_mem_handle h1, h2, big;

    /* (a) map over an already mapped range, wholly and partly */
    base = reserve(), h1 = create(gran), h2 = create(gran), big = create(2 * gran);
    probe("a.first_map", d->mem_map(base + gran, gran, 0, h1));
    probe("a.map_over_mapped", d->mem_map(base + gran, gran, 0, h2));
    probe("a.map_overlapping_partly", d->mem_map(base, 2 * gran, 0, big));
    probe("a.cleanup_unmap", d->mem_unmap(base + gran, gran));
    d->mem_release(h1), d->mem_release(h2), d->mem_release(big);
    probe("a.cleanup_free", d->mem_address_free(base, RUN_BYTES));

    /* (b) unmap a never-mapped range */
    base = reserve();
    probe("b.unmap_never_mapped", d->mem_unmap(base, gran));
    probe("b.cleanup_free", d->mem_address_free(base, RUN_BYTES));

    /* (c) unmap a sub-range of one mapping */
    base = reserve(), big = create(2 * gran);
    probe("c.map_2granules", d->mem_map(base, 2 * gran, 0, big));
    xsa_cu_result r = d->mem_unmap(base, gran);
    probe("c.unmap_first_half", r);
    if (r == XSA_CU_SUCCESS)
        probe("c.unmap_second_half", d->mem_unmap(base + gran, gran));
    else
        probe("c.unmap_whole_after", d->mem_unmap(base, 2 * gran));
    probe("c.cleanup_release", d->mem_release(big));
    probe("c.cleanup_free", d->mem_address_free(base, RUN_BYTES));

    /* (d) unmap two adjacent, separately mapped granules in one call; and
     * set access over both in one call */
    base = reserve(), h1 = create(gran), h2 = create(gran);
    d->mem_map(base, gran, 0, h1), d->mem_map(base + gran, gran, 0, h2);
    probe("d.set_access_two_mappings", d->mem_set_access(base, 2 * gran, dev0, 1));
    r = d->mem_unmap(base, 2 * gran);
    probe("d.unmap_two_mappings_one_call", r);
    if (r != XSA_CU_SUCCESS) {
        probe("d.cleanup_unmap1", d->mem_unmap(base, gran));
        probe("d.cleanup_unmap2", d->mem_unmap(base + gran, gran));
    }
    d->mem_release(h1), d->mem_release(h2);
    probe("d.cleanup_free", d->mem_address_free(base, RUN_BYTES));

    /* (e) free a reservation that still has mappings */
    base = reserve(), h1 = create(gran);
    d->mem_map(base, gran, 0, h1);
    r = d->mem_address_free(base, RUN_BYTES);
    probe("e.address_free_with_mapping", r);
    probe("e.unmap_after", d->mem_unmap(base, gran));
    probe("e.release_after", d->mem_release(h1));
    if (r != XSA_CU_SUCCESS) probe("e.cleanup_free", d->mem_address_free(base, RUN_BYTES));

    /* (f) release a handle that is still mapped, then unmap */
    base = reserve(), h1 = create(gran);
    d->mem_map(base, gran, 0, h1);
    probe("f.release_while_mapped", d->mem_release(h1));
    probe("f.set_access_after_release", d->mem_set_access(base, gran, dev0, 1));
    probe("f.unmap_after_release", d->mem_unmap(base, gran));
    probe("f.release_again_after_unmap", d->mem_release(h1));
    probe("f.cleanup_free", d->mem_address_free(base, RUN_BYTES));

    /* (g) set access on an unmapped range, and on a half-mapped one */
    base = reserve(), h1 = create(gran);
    probe("g.set_access_unmapped", d->mem_set_access(base, gran, dev0, 1));
    d->mem_map(base, gran, 0, h1);
    probe("g.set_access_half_mapped", d->mem_set_access(base, 2 * gran, dev0, 1));
    probe("g.unmap_half_mapped_range", d->mem_unmap(base, 2 * gran));
    probe("g.cleanup_unmap", d->mem_unmap(base, gran));
    d->mem_release(h1);
    probe("g.cleanup_free", d->mem_address_free(base, RUN_BYTES));

    /* (h) create sizes that are not multiples of the granularity */
    xsa_mem_handle odd = 0;
    r = d->mem_create(&odd, gran + 4096, 0, 0);
    probe("h.create_gran_plus_4k", r);
    if (r == XSA_CU_SUCCESS) d->mem_release(odd);
    r = d->mem_create(&odd, 0, 0, 0);
    probe("h.create_zero", r);
    if (r == XSA_CU_SUCCESS) d->mem_release(odd);

    /* (i) cuMemFree of an interior pointer */
    xsa_devptr p = 0;
    probe("i.mem_alloc_2MiB", d->mem_alloc(&p, 2 * MiB, 0));
    probe("i.mem_free_interior", d->mem_free(p + 256));
    probe("i.mem_free_base", d->mem_free(p));
    probe("i.mem_free_twice", d->mem_free(p));

    /* (j) free part of a reservation */
    base = reserve();
    r = d->mem_address_free(base, RUN_BYTES / 2);
    probe("j.address_free_first_half", r);
    if (r == XSA_CU_SUCCESS)
        probe("j.address_free_second_half", d->mem_address_free(base + RUN_BYTES / 2, RUN_BYTES / 2));
    else
        probe("j.cleanup_free", d->mem_address_free(base, RUN_BYTES));
    probe("j.address_free_again", d->mem_address_free(base, RUN_BYTES));

    /* (k) create more than the device has */
    size_t total = 0;
    d->device_total_mem(&total, 0);
    size_t too_big = (2 * total + gran - 1) / gran * gran;
    r = d->mem_create(&odd, too_big, 0, 0);
    probe("k.create_2x_total", r);
    if (r == XSA_CU_SUCCESS) d->mem_release(odd);
    r = d->mem_alloc(&p, too_big, 0);
    probe("k.mem_alloc_2x_total", r);
    if (r == XSA_CU_SUCCESS) d->mem_free(p);

    /* More shapes the simulator meets. */
    base = reserve(), big = create(2 * gran), h1 = create(gran);
    probe("m.map_offset_second_half", d->mem_map(base, gran, gran, big));
    probe("m.map_first_half_of_handle", d->mem_map(base + 4 * gran, gran, 0, big));
    probe("m.map_size_not_granular", d->mem_map(base + 8 * gran, gran / 2, 0, h1));
    probe("m.map_past_handle_end", d->mem_map(base + 8 * gran, 2 * gran, 0, h1));
    probe("m.map_misaligned_va", d->mem_map(base + 8 * gran + 4096, gran, 0, h1));
    probe("m.map_outside_reservation", d->mem_map(base + RUN_BYTES, gran, 0, h1));
    probe("m.map_handle_zero", d->mem_map(base + 12 * gran, gran, 0, 0));
    probe("m.cleanup_unmap1", d->mem_unmap(base, gran));
    probe("m.cleanup_unmap2", d->mem_unmap(base + 4 * gran, gran));
    d->mem_release(big), d->mem_release(h1);
    probe("m.cleanup_free", d->mem_address_free(base, RUN_BYTES));
    xsa_devptr odd_va = 0;
    r = d->mem_address_reserve(&odd_va, gran + 4096, 0);
    probe("m.reserve_not_granular", r);
    if (r == XSA_CU_SUCCESS) d->mem_address_free(odd_va, gran + 4096);
    r = d->mem_address_reserve(&odd_va, RUN_BYTES, 3 * gran);
    probe("m.reserve_alignment_not_pow2", r);
    if (r == XSA_CU_SUCCESS) d->mem_address_free(odd_va, RUN_BYTES);
    probe("m.address_free_never_reserved", d->mem_address_free(0x10000000000ull, RUN_BYTES));
}

static void other_entries(void) {
    xsa_event e = NULL;
    probe("s.event_create", d->event_create(&e, 0));
    probe("s.event_query_unrecorded", d->event_query(e));
    probe("s.event_record_default_stream", d->event_record(e, NULL));
    probe("s.event_synchronize", d->event_synchronize(e));
    probe("s.event_query_done", d->event_query(e));
    probe("s.stream_wait_event", d->stream_wait_event(NULL, e));
    probe("s.stream_query", d->stream_query(NULL));
    probe("s.stream_synchronize", d->stream_synchronize(NULL));
    probe("s.event_destroy", d->event_destroy(e));
    probe("s.event_create_bad_device", d->event_create(&e, 1000));

    xsa_mem_handle h = 0;
    int fd = -1;
    probe("x.create_exportable", d->mem_create(&h, gran, 0, 1));
    probe("x.export_fd", d->mem_export_fd(&fd, h));
    printf("info exported fd: %d\n", fd);
    if (fd >= 0) close(fd);
    d->mem_release(h);
    h = create(gran);
    probe("x.export_fd_not_exportable", d->mem_export_fd(&fd, h));
    d->mem_release(h);

    void *ctx = NULL;
    probe("c2.primary_ctx_retain", d->primary_ctx_retain(&ctx, 0));
    probe("c2.ctx_set_current", d->ctx_set_current(ctx));
    probe("c2.primary_ctx_release", d->primary_ctx_release(0));
    printf("info error_string(0): %s\n", d->error_string(0));
    printf("info error_string(2): %s\n", d->error_string(2));
    printf("info error_string(12345): %s\n", d->error_string(12345));
}

/* A thread that never made a context current: do the VMM calls need one,
 * and does mem_free find the owner's context? */
static xsa_devptr alloc_from_main;

static void *fresh_thread(void *arg) {
    (void)arg;
    xsa_devptr base = 0;
    xsa_mem_handle h = 0;
    probe("q.reserve_no_ctx", d->mem_address_reserve(&base, RUN_BYTES, 0));
    probe("q.create_no_ctx", d->mem_create(&h, gran, 0, 0));
    probe("q.map_no_ctx", d->mem_map(base, gran, 0, h));
    probe("q.set_access_no_ctx", d->mem_set_access(base, gran, dev0, 1));
    probe("q.unmap_no_ctx", d->mem_unmap(base, gran));
    probe("q.release_no_ctx", d->mem_release(h));
    probe("q.address_free_no_ctx", d->mem_address_free(base, RUN_BYTES));
    probe("q.mem_free_no_ctx", d->mem_free(alloc_from_main));
    return NULL;
}

static void no_context_thread(void) {
    probe("q.mem_alloc_main", d->mem_alloc(&alloc_from_main, 2 * MiB, 0));
    pthread_t t;
    pthread_create(&t, NULL, fresh_thread, NULL);
    pthread_join(t, NULL);
}

#define TIMED(slot, call)                                                      \
    do {                                                                       \
        uint64_t t0_ = xsa_driver_now_ns();                                               \
        xsa_cu_result r_ = (call);                                             \
        (slot) = xsa_driver_now_ns() - t0_;                                               \
        if (r_) probe("timing." #call, r_);                                    \
    } while (0)

static void timings(void) {
    uint64_t t_create[SAMPLES], t_map[SAMPLES], t_access[SAMPLES], t_unmap[SAMPLES],
        t_release[SAMPLES], t_alloc[SAMPLES], t_free[SAMPLES], t_reserve[SAMPLES],
        t_info[SAMPLES], t_ev_cd[SAMPLES], t_rec[SAMPLES], t_query[SAMPLES];
    xsa_devptr base = reserve();
    for (int i = 0; i < SAMPLES; i++) {
        xsa_mem_handle h = 0;
        TIMED(t_create[i], d->mem_create(&h, 2 * MiB, 0, 0));
        TIMED(t_map[i], d->mem_map(base, 2 * MiB, 0, h));
        TIMED(t_access[i], d->mem_set_access(base, 2 * MiB, dev0, 1));
        TIMED(t_unmap[i], d->mem_unmap(base, 2 * MiB));
        TIMED(t_release[i], d->mem_release(h));
    }
    d->mem_address_free(base, RUN_BYTES);
    report_median("cuMemCreate 2MiB", t_create, SAMPLES);
    report_median("cuMemMap 2MiB", t_map, SAMPLES);
    report_median("cuMemSetAccess 2MiB", t_access, SAMPLES);
    report_median("cuMemUnmap 2MiB", t_unmap, SAMPLES);
    report_median("cuMemRelease 2MiB", t_release, SAMPLES);

    for (int i = 0; i < SAMPLES; i++) {
        xsa_devptr p = 0;
        TIMED(t_alloc[i], d->mem_alloc(&p, 2 * MiB, 0));
        TIMED(t_free[i], d->mem_free(p));
        TIMED(t_reserve[i], d->mem_address_reserve(&p, (size_t)1 << 40, 0));
        d->mem_address_free(p, (size_t)1 << 40);
        size_t f, t;
        TIMED(t_info[i], d->mem_get_info(0, &f, &t));
    }
    report_median("cuMemAlloc 2MiB (with ctx set)", t_alloc, SAMPLES);
    report_median("cuMemFree 2MiB", t_free, SAMPLES);
    report_median("cuMemAddressReserve 1TiB", t_reserve, SAMPLES);
    report_median("mem_get_info (ctx set + cuMemGetInfo)", t_info, SAMPLES);

    for (int i = 0; i < SAMPLES; i++) {
        xsa_event e = NULL;
        uint64_t t0 = xsa_driver_now_ns();
        d->event_create(&e, 0);
        d->event_destroy(e);
        t_ev_cd[i] = xsa_driver_now_ns() - t0;
    }
    xsa_event e = NULL;
    d->event_create(&e, 0);
    for (int i = 0; i < SAMPLES; i++) {
        TIMED(t_rec[i], d->event_record(e, NULL));
        uint64_t t0 = xsa_driver_now_ns();
        d->event_query(e);
        t_query[i] = xsa_driver_now_ns() - t0;
    }
    d->event_destroy(e);
    report_median("event create+destroy (with ctx set)", t_ev_cd, SAMPLES);
    report_median("event record", t_rec, SAMPLES);
    report_median("event query", t_query, SAMPLES);

    /* Growing a range by 1 GiB in 2 MiB chunks: access per chunk vs once. */
    enum { CHUNKS = 512 };
    static xsa_mem_handle hs[CHUNKS];
    xsa_devptr grow = 0;
    d->mem_address_reserve(&grow, CHUNKS * 2 * MiB, 0);
    for (int once = 0; once < 2; once++) {
        uint64_t t0 = xsa_driver_now_ns();
        for (int i = 0; i < CHUNKS; i++) {
            d->mem_create(&hs[i], 2 * MiB, 0, 0);
            d->mem_map(grow + i * 2 * MiB, 2 * MiB, 0, hs[i]);
            if (!once) d->mem_set_access(grow + i * 2 * MiB, 2 * MiB, dev0, 1);
        }
        if (once) probe("grow.set_access_1GiB_once", d->mem_set_access(grow, CHUNKS * 2 * MiB, dev0, 1));
        uint64_t t1 = xsa_driver_now_ns();
        for (int i = 0; i < CHUNKS; i++) {
            d->mem_unmap(grow + i * 2 * MiB, 2 * MiB);
            d->mem_release(hs[i]);
        }
        uint64_t t2 = xsa_driver_now_ns();
        printf("time grow 1GiB in 2MiB chunks, %s: %.2f ms; unmap+release all: %.2f ms\n",
               once ? "one set_access" : "set_access per chunk", (t1 - t0) / 1e6, (t2 - t1) / 1e6);
    }
    d->mem_address_free(grow, CHUNKS * 2 * MiB);
}

/* Last: misuse that could, on a bad driver, leave state we do not trust. */
static void risky_cases(void) {
    xsa_mem_handle h = create(gran);
    probe("o.release", d->mem_release(h));
    probe("o.release_twice", d->mem_release(h));
    probe("o.release_zero_handle", d->mem_release(0));
    probe("o.unmap_null", d->mem_unmap(0, gran));
}

int main(void) {
    char err[512] = "";
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint64_t t0 = xsa_driver_now_ns();
    d = xsa_driver_cuda(err, sizeof err);
    printf("time xsa_driver_cuda first call: %.2f ms\n", (xsa_driver_now_ns() - t0) / 1e6);
    if (!d) {
        printf("probe setup: no driver: %s\n", err);
        return 1;
    }
    printf("info driver: %s\n", d->name);
    basics();
    if (gran == 0) {
        printf("probe setup: no granularity, nothing more to probe\n");
        return 1;
    }
    normal_run();
    error_cases();
    other_entries();
    no_context_thread();
    timings();
    risky_cases();
    printf("probe done\n");
    return 0;
}
