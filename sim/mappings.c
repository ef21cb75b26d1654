/*
 * sim/mappings: the simulated driver's address space: reservations, the
 * mapping of handles into them and the access granted, and cuMemAlloc
 * allocations.
 *
 * Design: a reservation is a PROT_NONE anonymous mapping; cuMemMap puts
 * the handle's file range there with MAP_FIXED|MAP_SHARED but still
 * PROT_NONE; cuMemSetAccess makes it read/write; cuMemUnmap turns it back
 * to PROT_NONE anonymous memory, so a use after unmap faults as on the GPU.
 * Reservations sit in an array sorted by base (there are only a handful);
 * each keeps one small record per granule: the handle mapped there, the id
 * of the cuMemMap call that mapped it (unmap must cover whole mappings) and
 * the devices granted access. Unmapping and cuMemFree first tell the
 * timeline, which reports kernels still using the memory.
 */
#include "sim/mappings.h"

#include <string.h>
#include <sys/mman.h>

#include "sim/capture.h"
#include "sim/cost.h"
#include "sim/handles.h"
#include "sim/state.h"
#include "sim/timeline.h"

#define SIM_ALLOC_ROUND ((size_t)2 << 20) /* cuMemAlloc rounds to 2 MiB */

/* ---- reservations ------------------------------------------------------ */

/* Puts back fresh PROT_NONE memory at [p, p+size): reserved, faults on use. */
static bool reset_range(uintptr_t p, size_t size) {
    void *m = mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return m != MAP_FAILED;
}

/* mmaps `size` bytes of PROT_NONE VA aligned to `align` (over-reserve, trim). */
static void *map_aligned(size_t size, size_t align) {
    size_t len = size + align;
    if (len < size) return NULL;
    char *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uintptr_t start = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = start - (uintptr_t)m;
    if (head) munmap(m, head);
    munmap((char *)start + size, len - head - size);
    return (void *)start;
}

xsa_cu_result xsa_sim_address_reserve(xsa_devptr *ptr, size_t size, size_t alignment) {
    size_t g = S.cfg.granularity;
    if (!ptr || size == 0 || size % g || (alignment & (alignment - 1))) return XSA_CU_ERROR_INVALID_VALUE;
    size_t pages = size / g;
    sim_page *pg = calloc(pages, sizeof *pg); /* untouched pages cost no memory */
    if (!pg || !ARRAY_RESERVE(S.resv, S.resv.n + 1)) {
        free(pg);
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    void *base = map_aligned(size, alignment > g ? alignment : g);
    if (!base) {
        free(pg);
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    size_t i;
    FIND_BELOW(S.resv, (uintptr_t)base, i);
    i = i == S.resv.n ? 0 : i + 1;
    memmove(&S.resv.v[i + 1], &S.resv.v[i], (S.resv.n - i) * sizeof *S.resv.v);
    S.resv.v[i] = (sim_reservation){.base = (uintptr_t)base, .size = size, .pages = pg};
    S.resv.n++;
    S.reserved_bytes += size;
    *ptr = (xsa_devptr)(uintptr_t)base;
    return XSA_CU_SUCCESS;
}

/* Every page must be unmapped first, so kernels still using the range were
 * reported by the unmap. */
xsa_cu_result xsa_sim_address_free(xsa_devptr ptr, size_t size) {
    sim_reservation *r = xsa_sim_resv_holding((uintptr_t)ptr, size);
    if (!r || r->base != ptr || r->size != size || r->mapped_pages) return XSA_CU_ERROR_INVALID_VALUE;
    munmap((void *)r->base, r->size);
    free(r->pages);
    S.reserved_bytes -= size;
    size_t i = (size_t)(r - S.resv.v);
    memmove(r, r + 1, (S.resv.n - i - 1) * sizeof *r);
    S.resv.n--;
    return XSA_CU_SUCCESS;
}

/* ---- mapping ----------------------------------------------------------- */

/* The reservation and first page of a granularity-aligned range, or NULL. */
static sim_reservation *range_pages(xsa_devptr ptr, size_t size, size_t *first, size_t *n) {
    size_t g = S.cfg.granularity;
    if (size == 0 || ptr % g || size % g) return NULL;
    sim_reservation *r = xsa_sim_resv_holding((uintptr_t)ptr, size);
    if (!r) return NULL;
    *first = ((uintptr_t)ptr - r->base) / g;
    *n = size / g;
    return r;
}

xsa_cu_result xsa_sim_map(xsa_devptr ptr, size_t size, size_t offset, xsa_mem_handle handle) {
    size_t first = 0, n = 0;
    sim_handle *h = xsa_sim_handle_lookup(handle, SLOT_LIVE);
    if (!h) return XSA_CU_ERROR_INVALID_VALUE;
    /* The H100's driver (580) maps whole handles only, and says so before
     * it looks at the address. */
    if (offset != 0 || size != h->size) return XSA_CU_ERROR_NOT_SUPPORTED;
    sim_reservation *r = range_pages(ptr, size, &first, &n);
    if (!r) return XSA_CU_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++)
        if (r->pages[first + i].map_id) return XSA_CU_ERROR_INVALID_VALUE;
    int fd = h->own_fd >= 0 ? h->own_fd : S.dev[h->device].fd;
    void *m = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, (off_t)(h->file_off + offset));
    if (m == MAP_FAILED) {
        reset_range((uintptr_t)ptr, size);
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    uint64_t id = ++S.next_map_id;
    uint32_t slot = (uint32_t)(h - S.handles.v);
    for (size_t i = 0; i < n; i++) r->pages[first + i] = (sim_page){.map_id = id, .handle = slot};
    h->mapped_pages += n;
    r->mapped_pages += n;
    S.mapped_bytes += size;
    return XSA_CU_SUCCESS;
}

/* No mapping crosses the ends of pages [first, first+n). Unmapped pages
 * inside are allowed: the H100's driver unmaps such a range without error. */
static bool whole_mappings(const sim_reservation *r, size_t first, size_t n) {
    size_t total = r->size / S.cfg.granularity, last = first + n - 1;
    uint64_t head = r->pages[first].map_id, tail = r->pages[last].map_id;
    if (head && first > 0 && r->pages[first - 1].map_id == head) return false;
    return !tail || last + 1 == total || r->pages[last + 1].map_id != tail;
}

xsa_cu_result xsa_sim_unmap(xsa_devptr ptr, size_t size) {
    size_t first = 0, n = 0;
    sim_reservation *r = range_pages(ptr, size, &first, &n);
    if (!r || !whole_mappings(r, first, n)) return XSA_CU_ERROR_INVALID_VALUE;
    if (!reset_range((uintptr_t)ptr, size)) return XSA_CU_ERROR_UNKNOWN;
    xsa_sim_cost_unmap(r, first, n);
    xsa_sim_tl_unmapping(r, first, n);
    size_t unmapped = 0;
    for (size_t i = 0; i < n; i++) {
        sim_page *pg = &r->pages[first + i];
        if (!pg->map_id) continue;
        sim_handle *h = &S.handles.v[pg->handle];
        if (--h->mapped_pages == 0 && h->state == SLOT_RELEASED) xsa_sim_handle_free(pg->handle);
        *pg = (sim_page){0};
        unmapped++;
    }
    r->mapped_pages -= unmapped;
    S.mapped_bytes -= unmapped * S.cfg.granularity;
    return XSA_CU_SUCCESS;
}

/* Every page mapped (else INVALID_VALUE), devices valid and each allowed to
 * access the memory of every page's owner (else INVALID_DEVICE). */
static xsa_cu_result access_allowed(const sim_reservation *r, size_t first, size_t n, const int *devices, int nd) {
    for (size_t i = 0; i < n; i++)
        if (!r->pages[first + i].map_id) return XSA_CU_ERROR_INVALID_VALUE;
    for (int k = 0; k < nd; k++)
        if (!xsa_sim_device_ok(devices[k])) return XSA_CU_ERROR_INVALID_DEVICE;
    for (size_t i = 0; i < n; i++) {
        int owner = S.handles.v[r->pages[first + i].handle].device;
        for (int k = 0; k < nd; k++)
            if (devices[k] != owner && !S.cfg.peer[devices[k]][owner]) return XSA_CU_ERROR_INVALID_DEVICE;
    }
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_set_access(xsa_devptr ptr, size_t size, const int *devices, int nd) {
    size_t first = 0, n = 0;
    sim_reservation *r = range_pages(ptr, size, &first, &n);
    if (!r || !devices || nd <= 0) return XSA_CU_ERROR_INVALID_VALUE;
    xsa_cu_result res = access_allowed(r, first, n, devices, nd);
    if (res != XSA_CU_SUCCESS) return res;
    if (mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) != 0) return XSA_CU_ERROR_OUT_OF_MEMORY;
    uint8_t mask = 0;
    for (int k = 0; k < nd; k++) mask |= (uint8_t)(1u << devices[k]);
    xsa_sim_cost_set_access(r, first, n, mask);
    for (size_t i = 0; i < n; i++) r->pages[first + i].access |= mask;
    return XSA_CU_SUCCESS;
}

/* ---- classic allocations ----------------------------------------------- */

xsa_cu_result xsa_sim_mem_alloc(xsa_devptr *ptr, size_t size, int device) {
    /* Refused during a global-mode capture, which it invalidates (H100). */
    xsa_cu_result r = xsa_sim_cap_device_sync("cuMemAlloc");
    if (r != XSA_CU_SUCCESS) return r;
    if (!ptr || size == 0) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    size_t rounded = (size + SIM_ALLOC_ROUND - 1) & ~(SIM_ALLOC_ROUND - 1);
    sim_device *dv = &S.dev[device];
    if (rounded < size || rounded > S.cfg.capacity - dv->used) return XSA_CU_ERROR_OUT_OF_MEMORY;
    if (!ARRAY_RESERVE(S.allocs, S.allocs.n + 1)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    void *m = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return XSA_CU_ERROR_OUT_OF_MEMORY;
    size_t i;
    FIND_BELOW(S.allocs, (uintptr_t)m, i);
    i = i == S.allocs.n ? 0 : i + 1;
    memmove(&S.allocs.v[i + 1], &S.allocs.v[i], (S.allocs.n - i) * sizeof *S.allocs.v);
    S.allocs.v[i] = (sim_alloc){.base = (uintptr_t)m, .size = rounded, .device = device, .id = ++S.next_map_id};
    S.allocs.n++;
    dv->used += rounded;
    S.alloc_bytes += rounded;
    *ptr = (xsa_devptr)(uintptr_t)m;
    return XSA_CU_SUCCESS;
}


xsa_cu_result xsa_sim_mem_free(xsa_devptr ptr) {
    xsa_cu_result r = xsa_sim_cap_device_sync("cuMemFree"); /* it may synchronize the device */
    if (r != XSA_CU_SUCCESS) return r;
    size_t i;
    FIND_BELOW(S.allocs, (uintptr_t)ptr, i);
    if (i == S.allocs.n || S.allocs.v[i].base != ptr) return XSA_CU_ERROR_INVALID_VALUE;
    xsa_sim_tl_freeing_alloc(&S.allocs.v[i]);
    sim_alloc a = S.allocs.v[i];
    ARRAY_FREE(a.uses);
    munmap((void *)a.base, a.size);
    S.dev[a.device].used -= a.size;
    S.alloc_bytes -= a.size;
    memmove(&S.allocs.v[i], &S.allocs.v[i + 1], (S.allocs.n - i - 1) * sizeof *S.allocs.v);
    S.allocs.n--;
    return XSA_CU_SUCCESS;
}
