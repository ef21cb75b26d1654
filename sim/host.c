/*
 * sim/host: pinned host memory on the simulated driver: mem_host_alloc's
 * allocations and mem_host_register's ranges, and the lookup the copies
 * make (is a host range pinned: a copy during capture needs it).
 *
 * Design: two arrays sorted by base, each of disjoint ranges kept as the
 * caller gave them (a handful live at once). An allocation is a fresh
 * anonymous mmap rounded up to whole pages (page-aligned, as
 * cuMemHostAlloc's memory is) and unmapped at free, so a use after free
 * faults. A registration pins nothing (the simulator's device memory is
 * host memory already): it is recorded, with the real driver's errors. A
 * registration may not overlap a pinned byte, an allocation's included
 * (CUDA keeps both in one table): CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
 * memory not mapped at all is CUDA_ERROR_INVALID_VALUE. An allocation is
 * checked against allocations only: a fresh mmap overlaps no live memory,
 * but it may land where a registration's owner unmapped its memory without
 * unregistering it, which the tables then show as it is.
 */
#include "sim/host.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static size_t page_round(size_t n) { return (n + page_size() - 1) & ~(page_size() - 1); }

/* Index of the range of `a` holding byte p, or a->n. */
static size_t holding(const sim_host_ranges *a, uintptr_t p) {
    size_t i;
    FIND_BELOW(*a, p, i);
    return i < a->n && p - a->v[i].base < a->v[i].size ? i : a->n;
}

/* Whether [p, p+n) (n > 0) overlaps a range of `a`: ranges are disjoint,
 * so their ends grow with their bases and the last one starting before
 * the end is the only candidate. */
static bool overlaps(const sim_host_ranges *a, uintptr_t p, size_t n) {
    size_t i;
    FIND_BELOW(*a, p + (n - 1), i);
    return i < a->n && a->v[i].base + a->v[i].size > p;
}

/* Inserts [p, p+n) in order (room reserved). */
static void insert(sim_host_ranges *a, uintptr_t p, size_t n) {
    size_t i;
    FIND_BELOW(*a, p, i);
    i = i == a->n ? 0 : i + 1;
    memmove(&a->v[i + 1], &a->v[i], (a->n - i) * sizeof *a->v);
    a->v[i] = (sim_host_range){p, n};
    a->n++;
}

static void remove_at(sim_host_ranges *a, size_t i) {
    memmove(&a->v[i], &a->v[i + 1], (a->n - i - 1) * sizeof *a->v);
    a->n--;
}

xsa_cu_result xsa_sim_host_alloc(void **host, size_t size) {
    if (!host || size == 0) return XSA_CU_ERROR_INVALID_VALUE;
    size_t len = page_round(size);
    if (len < size || !ARRAY_RESERVE(S.host_allocs, S.host_allocs.n + 1)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return XSA_CU_ERROR_OUT_OF_MEMORY;
    insert(&S.host_allocs, (uintptr_t)m, size);
    S.host_alloc_bytes += size;
    *host = m;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_host_free(void *host) {
    size_t i = holding(&S.host_allocs, (uintptr_t)host);
    if (i == S.host_allocs.n || S.host_allocs.v[i].base != (uintptr_t)host) return XSA_CU_ERROR_INVALID_VALUE;
    sim_host_range r = S.host_allocs.v[i];
    munmap((void *)r.base, page_round(r.size));
    remove_at(&S.host_allocs, i);
    S.host_alloc_bytes -= r.size;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_host_register(void *host, size_t size) {
    uintptr_t p = (uintptr_t)host;
    if (!host || size == 0 || p + size < p) return XSA_CU_ERROR_INVALID_VALUE;
    if (overlaps(&S.host_regs, p, size) || overlaps(&S.host_allocs, p, size))
        return XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    /* msync checks the range is mapped (ENOMEM where it is not) and writes nothing back with MS_ASYNC. */
    uintptr_t first = p & ~(uintptr_t)(page_size() - 1);
    if (msync((void *)first, page_round(p + size - first), MS_ASYNC) != 0) return XSA_CU_ERROR_INVALID_VALUE;
    if (!ARRAY_RESERVE(S.host_regs, S.host_regs.n + 1)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    insert(&S.host_regs, p, size);
    S.host_registered_bytes += size;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_host_unregister(void *host) {
    size_t i = holding(&S.host_regs, (uintptr_t)host);
    if (i == S.host_regs.n || S.host_regs.v[i].base != (uintptr_t)host) return XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED;
    S.host_registered_bytes -= S.host_regs.v[i].size;
    remove_at(&S.host_regs, i);
    return XSA_CU_SUCCESS;
}

static bool within(const sim_host_ranges *a, uintptr_t p, size_t n) {
    size_t i = holding(a, p);
    return i < a->n && n <= a->v[i].size - (p - a->v[i].base);
}

bool xsa_sim_host_pinned(const void *p, size_t n) {
    return within(&S.host_allocs, (uintptr_t)p, n) || within(&S.host_regs, (uintptr_t)p, n);
}

bool xsa_sim_host_live(void) { return S.host_allocs.n || S.host_regs.n; }

void xsa_sim_host_usage(xsa_sim_usage *u) {
    u->host_allocs = S.host_allocs.n;
    u->host_alloc_bytes = S.host_alloc_bytes;
    u->host_registrations = S.host_regs.n;
    u->host_registered_bytes = S.host_registered_bytes;
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), 0)

static int check_table(const sim_host_ranges *a, const char *what, size_t bytes, bool aligned, char *err,
                       size_t errlen) {
    size_t sum = 0;
    for (size_t i = 0; i < a->n; i++) {
        const sim_host_range *r = &a->v[i];
        if (!r->base || !r->size || r->base + r->size < r->base) return FAIL("host %s %zu is empty or wraps", what, i);
        if (aligned && r->base % page_size()) return FAIL("host %s %zu is not page-aligned", what, i);
        if (i && a->v[i - 1].base + a->v[i - 1].size > r->base) return FAIL("host %ss overlap or are unsorted", what);
        sum += r->size;
    }
    if (sum != bytes) return FAIL("host %s bytes %zu, table says %zu", what, bytes, sum);
    return 1;
}

int xsa_sim_host_check(char *err, size_t errlen) {
    return check_table(&S.host_allocs, "allocation", S.host_alloc_bytes, true, err, errlen) &&
           check_table(&S.host_regs, "registration", S.host_registered_bytes, false, err, errlen);
}
