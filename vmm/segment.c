/* vmm/segment: expandable segment (design in segment.h). */
#include "vmm/segment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

xsa_cu_result xsa_segment_init(xsa_segment *s, xsa_driver *drv, int device, size_t reserve_bytes) {
    memset(s, 0, sizeof *s);
    size_t gran = 0;
    xsa_cu_result r = XSA_DRV(drv, mem_get_granularity, &gran, device, 0);
    if (r != XSA_CU_SUCCESS) return r;
    if (gran == 0) return XSA_CU_ERROR_INVALID_VALUE;
    size_t pages = reserve_bytes / gran + (reserve_bytes % gran != 0);
    if (pages == 0) pages = 1;
    xsa_mem_handle *handles = calloc(pages, sizeof *handles);
    if (!handles) return XSA_CU_ERROR_OUT_OF_MEMORY;
    xsa_devptr base = 0;
    r = XSA_DRV(drv, mem_address_reserve, &base, pages * gran, gran);
    if (r != XSA_CU_SUCCESS) {
        free(handles);
        return r;
    }
    s->drv = drv;
    s->device = device;
    s->base = base;
    s->page_size = gran;
    s->max_pages = pages;
    s->handles = handles;
    s->access[0] = device;
    s->n_access = 1;
    return XSA_CU_SUCCESS;
}

/* Unmaps pages [first, first+n) with one cuMemUnmap: the driver accepts a
 * range of several whole mappings (seen on the H100), and one call costs
 * about what one page's does. The driver checks the range before it
 * unmaps, so a failure leaves every page mapped. */
static xsa_cu_result unmap_run(xsa_segment *s, size_t first, size_t n) {
    if (n == 0) return XSA_CU_SUCCESS;
    return XSA_DRV(s->drv, mem_unmap, xsa_segment_page_addr(s, first), n * s->page_size);
}

/* Page i of a map call gets a new handle (else given[i] is the caller's). */
static bool creates(const xsa_mem_handle *given, size_t i) { return !given || given[i] == XSA_NO_HANDLE; }

void xsa_segment_release_handle(xsa_segment *s, xsa_mem_handle h) {
    if (XSA_DRV(s->drv, mem_release, h) == XSA_CU_SUCCESS) return;
    xsa_mem_handle *grown = realloc(s->unreleased, (s->n_unreleased + 1) * sizeof *grown);
    if (!grown) return; /* out of host memory too: the handle leaks */
    s->unreleased = grown;
    s->unreleased[s->n_unreleased++] = h;
}

/* Tries the releases that failed before; the first error if some still do. */
static xsa_cu_result release_unreleased(xsa_segment *s) {
    xsa_cu_result first = XSA_CU_SUCCESS;
    size_t kept = 0;
    for (size_t i = 0; i < s->n_unreleased; i++) {
        xsa_cu_result r = XSA_DRV(s->drv, mem_release, s->unreleased[i]);
        if (r == XSA_CU_SUCCESS) continue;
        if (first == XSA_CU_SUCCESS) first = r;
        s->unreleased[kept++] = s->unreleased[i];
    }
    s->n_unreleased = kept;
    return first;
}

/* Undo of a map that failed with pages [first, first+mapped) mapped and
 * handles stored for pages [first, first+held). */
static void undo_map(xsa_segment *s, size_t first, size_t mapped, size_t held, const xsa_mem_handle *given) {
    /* If this unmap fails too, releasing still frees the memory once the
     * reservation goes, as the driver allows. */
    unmap_run(s, first, mapped);
    for (size_t i = 0; i < held; i++) {
        if (creates(given, i)) xsa_segment_release_handle(s, s->handles[first + i]);
        s->handles[first + i] = XSA_NO_HANDLE;
    }
}

xsa_cu_result xsa_segment_map(xsa_segment *s, size_t first, size_t n, const xsa_mem_handle *given) {
    if (first > s->max_pages || n > s->max_pages - first) return XSA_CU_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++)
        if (xsa_segment_page_mapped(s, first + i)) return XSA_CU_ERROR_INVALID_VALUE;
    size_t mapped = 0, held = 0;
    xsa_cu_result r = XSA_CU_SUCCESS;
    for (; mapped < n; mapped++) {
        size_t page = first + mapped;
        xsa_mem_handle h = given ? given[mapped] : XSA_NO_HANDLE;
        if (creates(given, mapped)) {
            r = XSA_DRV(s->drv, mem_create, &h, s->page_size, s->device, s->exportable);
            if (r != XSA_CU_SUCCESS) break;
        }
        s->handles[page] = h;
        held++;
        r = XSA_DRV(s->drv, mem_map, xsa_segment_page_addr(s, page), s->page_size, 0, h);
        if (r != XSA_CU_SUCCESS) break;
    }
    if (r == XSA_CU_SUCCESS && n)
        r = XSA_DRV(s->drv, mem_set_access, xsa_segment_page_addr(s, first), n * s->page_size, s->access, s->n_access);
    if (r != XSA_CU_SUCCESS) {
        undo_map(s, first, mapped, held, given);
        return r;
    }
    s->mapped_pages += n;
    return XSA_CU_SUCCESS;
}

/* The unmap of xsa_segment_unmap (mode TAKE or RELEASE) and
 * xsa_segment_unmap_moved (FORGET). */
typedef enum { UNMAP_TAKE, UNMAP_RELEASE, UNMAP_FORGET } unmap_mode;

static xsa_cu_result unmap_pages(xsa_segment *s, size_t first, size_t n, unmap_mode mode, xsa_mem_handle *taken) {
    if (first > s->max_pages || n > s->max_pages - first) return XSA_CU_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++)
        if (!xsa_segment_page_mapped(s, first + i)) return XSA_CU_ERROR_INVALID_VALUE;
    xsa_cu_result r = unmap_run(s, first, n);
    if (r != XSA_CU_SUCCESS) return r;
    for (size_t i = 0; i < n; i++) {
        xsa_mem_handle h = s->handles[first + i];
        s->handles[first + i] = XSA_NO_HANDLE;
        if (mode == UNMAP_TAKE)
            taken[i] = h;
        else if (mode == UNMAP_RELEASE)
            xsa_segment_release_handle(s, h);
    }
    s->mapped_pages -= n;
    release_unreleased(s);
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_segment_unmap(xsa_segment *s, size_t first, size_t n, xsa_mem_handle *taken) {
    return unmap_pages(s, first, n, taken ? UNMAP_TAKE : UNMAP_RELEASE, taken);
}

xsa_cu_result xsa_segment_unmap_moved(xsa_segment *s, size_t first, size_t n) {
    return unmap_pages(s, first, n, UNMAP_FORGET, NULL);
}

void xsa_segment_forget(xsa_segment *s, size_t first, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!xsa_segment_page_mapped(s, first + i)) continue;
        s->handles[first + i] = XSA_NO_HANDLE;
        s->mapped_pages--;
    }
}

xsa_cu_result xsa_segment_destroy(xsa_segment *s) {
    if (!s->handles) return XSA_CU_SUCCESS;
    for (size_t p = 0; p < s->max_pages && s->mapped_pages;) {
        size_t end = p;
        while (end < s->max_pages && xsa_segment_page_mapped(s, end)) end++;
        if (end > p) xsa_segment_unmap(s, p, end - p, NULL);
        p = end + 1;
    }
    xsa_cu_result r = release_unreleased(s);
    if (r == XSA_CU_SUCCESS) r = XSA_DRV(s->drv, mem_address_free, s->base, s->max_pages * s->page_size);
    if (r != XSA_CU_SUCCESS) return r;
    free(s->handles);
    free(s->unreleased);
    memset(s, 0, sizeof *s);
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_segment_add_access(xsa_segment *s, int peer) {
    for (int i = 0; i < s->n_access; i++)
        if (s->access[i] == peer) return XSA_CU_SUCCESS;
    if (s->n_access == XSA_SEGMENT_MAX_ACCESS) return XSA_CU_ERROR_INVALID_VALUE;
    /* Grant on each contiguous run of mapped pages. */
    for (size_t p = 0; p < s->max_pages;) {
        if (!xsa_segment_page_mapped(s, p)) {
            p++;
            continue;
        }
        size_t end = p;
        while (end < s->max_pages && xsa_segment_page_mapped(s, end)) end++;
        xsa_cu_result r = XSA_DRV(s->drv, mem_set_access, xsa_segment_page_addr(s, p), (end - p) * s->page_size, &peer, 1);
        if (r != XSA_CU_SUCCESS) return r;
        p = end;
    }
    s->access[s->n_access++] = peer;
    return XSA_CU_SUCCESS;
}

int xsa_segment_check(const xsa_segment *s, char *err, size_t errlen) {
    size_t count = 0;
    for (size_t p = 0; p < s->max_pages; p++) count += xsa_segment_page_mapped(s, p);
    if (count != s->mapped_pages) {
        snprintf(err, errlen, "segment %#llx: %zu pages hold handles but mapped_pages is %zu",
                 (unsigned long long)s->base, count, s->mapped_pages);
        return 0;
    }
    if (s->n_access < 1 || s->access[0] != s->device) {
        snprintf(err, errlen, "segment %#llx: access list does not start with its own device %d",
                 (unsigned long long)s->base, s->device);
        return 0;
    }
    return 1;
}
