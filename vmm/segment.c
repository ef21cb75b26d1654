/* vmm/segment: expandable segment (design in segment.h). */
#include "vmm/segment.h"

#include <stdint.h>
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
    uint32_t *chunk_pages = calloc(pages, sizeof *chunk_pages);
    if (!handles || !chunk_pages) {
        free(handles);
        free(chunk_pages);
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    xsa_devptr base = 0;
    r = XSA_DRV(drv, mem_address_reserve, &base, pages * gran, gran);
    if (r != XSA_CU_SUCCESS) {
        free(handles);
        free(chunk_pages);
        return r;
    }
    s->drv = drv;
    s->device = device;
    s->base = base;
    s->page_size = gran;
    s->max_pages = pages;
    s->handles = handles;
    s->chunk_pages = chunk_pages;
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

void xsa_segment_release_handle(xsa_segment *s, xsa_mem_handle h) {
    if (XSA_DRV(s->drv, mem_release, h) == XSA_CU_SUCCESS) return;
    xsa_segment_keep_unreleased(s, h);
}

void xsa_segment_keep_unreleased(xsa_segment *s, xsa_mem_handle h) {
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

/* Closes the shared fd of the chunk starting at `start`, if it has one. */
static void unshare(xsa_segment *s, size_t start) {
    if (!s->share_fds || s->share_fds[start] < 0) return;
    xsa_share_close(s->share_fds[start]);
    s->share_fds[start] = -1;
}

xsa_cu_result xsa_segment_share(xsa_segment *s, size_t start, int *fd, uint64_t *id) {
    if (start >= s->max_pages || !xsa_segment_page_mapped(s, start) || !s->chunk_pages[start])
        return XSA_CU_ERROR_INVALID_VALUE;
    if (!s->share_fds) {
        s->share_fds = malloc(s->max_pages * sizeof *s->share_fds);
        if (!s->share_fds) return XSA_CU_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0; i < s->max_pages; i++) s->share_fds[i] = -1;
    }
    if (s->share_fds[start] >= 0) {
        *fd = s->share_fds[start];
        *id = xsa_share_id(*fd);
        return XSA_CU_SUCCESS;
    }
    xsa_cu_result r = xsa_share_export(s->drv, s->handles[start], fd, id);
    if (r == XSA_CU_SUCCESS) s->share_fds[start] = *fd;
    return r;
}

size_t xsa_segment_chunk(const xsa_segment *s, size_t page, size_t *start) {
    size_t c = page;
    while (s->chunk_pages[c] == 0) c--; /* a mapped page's chunk starts at or before it */
    *start = c;
    return s->chunk_pages[c];
}

/* Whether pages [first, first+n) are mapped and made of whole chunks. */
static bool whole_chunks(const xsa_segment *s, size_t first, size_t n) {
    if (first > s->max_pages || n > s->max_pages - first || n == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (!xsa_segment_page_mapped(s, first + i)) return false;
    return s->chunk_pages[first] != 0 && (first + n == s->max_pages || s->chunk_pages[first + n] != 0 ||
                                          !xsa_segment_page_mapped(s, first + n));
}

/* Undo of a map that failed with pages [first, first+mapped) mapped and
 * chunks recorded for pages [first, first+held); specs[0..) said which
 * handles were created (and are released here) or given. */
static void undo_map(xsa_segment *s, size_t first, size_t mapped, size_t held, const xsa_chunk *specs) {
    /* If this unmap fails too, releasing still frees the memory once the
     * reservation goes, as the driver allows. */
    unmap_run(s, first, mapped);
    for (size_t at = 0, i = 0; at < held; at += specs[i].pages, i++) {
        if (specs[i].handle == XSA_NO_HANDLE) xsa_segment_release_handle(s, s->handles[first + at]);
        for (size_t k = 0; k < specs[i].pages; k++) s->handles[first + at + k] = XSA_NO_HANDLE;
        s->chunk_pages[first + at] = 0;
    }
}

/* Maps the chunks of specs (pages adding up to n) at pages [first, ...):
 * a spec with XSA_NO_HANDLE gets a new handle of its size. */
static xsa_cu_result map_specs(xsa_segment *s, size_t first, size_t n, const xsa_chunk *specs) {
    if (first > s->max_pages || n > s->max_pages - first) return XSA_CU_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++)
        if (xsa_segment_page_mapped(s, first + i)) return XSA_CU_ERROR_INVALID_VALUE;
    size_t mapped = 0, held = 0;
    xsa_cu_result r = XSA_CU_SUCCESS;
    for (size_t i = 0; mapped < n; i++) {
        size_t page = first + mapped, bytes = specs[i].pages * s->page_size;
        xsa_mem_handle h = specs[i].handle;
        if (h == XSA_NO_HANDLE && (r = XSA_DRV(s->drv, mem_create, &h, bytes, s->device, s->exportable)) != XSA_CU_SUCCESS)
            break;
        for (size_t k = 0; k < specs[i].pages; k++) s->handles[page + k] = h;
        s->chunk_pages[page] = (uint32_t)specs[i].pages;
        held += specs[i].pages;
        r = XSA_DRV(s->drv, mem_map, xsa_segment_page_addr(s, page), bytes, 0, h);
        if (r != XSA_CU_SUCCESS) break;
        mapped += specs[i].pages;
    }
    if (r == XSA_CU_SUCCESS && n)
        r = XSA_DRV(s->drv, mem_set_access, xsa_segment_page_addr(s, first), n * s->page_size, s->access, s->n_access);
    if (r != XSA_CU_SUCCESS) {
        undo_map(s, first, mapped, held, specs);
        return r;
    }
    s->mapped_pages += n;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_segment_map(xsa_segment *s, size_t first, size_t n, const xsa_mem_handle *given) {
    xsa_chunk *specs = malloc((n ? n : 1) * sizeof *specs);
    if (!specs) return XSA_CU_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) specs[i] = (xsa_chunk){given ? given[i] : XSA_NO_HANDLE, 1};
    xsa_cu_result r = map_specs(s, first, n, specs);
    free(specs);
    return r;
}

xsa_cu_result xsa_segment_map_chunks(xsa_segment *s, size_t first, size_t n, const xsa_chunk *given,
                                     size_t n_given, size_t new_pages) {
    size_t moved = 0;
    for (size_t i = 0; i < n_given; i++) moved += given[i].pages;
    if (moved > n) return XSA_CU_ERROR_INVALID_VALUE;
    size_t fresh = n - moved, per = new_pages ? new_pages : 1;
    size_t count = n_given + (fresh + per - 1) / per;
    xsa_chunk *specs = malloc((count ? count : 1) * sizeof *specs);
    if (!specs) return XSA_CU_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n_given; i++) specs[i] = given[i];
    for (size_t i = n_given; fresh; i++) {
        specs[i] = (xsa_chunk){XSA_NO_HANDLE, fresh < per ? fresh : per};
        fresh -= specs[i].pages;
    }
    xsa_cu_result r = map_specs(s, first, n, specs);
    free(specs);
    return r;
}

/* Mapped page `page`'s records go: its chunk's share (at the chunk's
 * start), its handle, its leaving mark. */
static void drop_record(xsa_segment *s, size_t page) {
    if (s->chunk_pages[page]) unshare(s, page);
    s->handles[page] = XSA_NO_HANDLE;
    s->chunk_pages[page] = 0;
    if (s->leaving) s->leaving[page] = 0;
}

/* The unmap of xsa_segment_unmap (mode TAKE or RELEASE) and
 * xsa_segment_unmap_moved (FORGET). */
typedef enum { UNMAP_TAKE, UNMAP_RELEASE, UNMAP_FORGET } unmap_mode;

static xsa_cu_result unmap_pages(xsa_segment *s, size_t first, size_t n, unmap_mode mode, xsa_mem_handle *taken) {
    if (!whole_chunks(s, first, n)) return XSA_CU_ERROR_INVALID_VALUE;
    xsa_cu_result r = unmap_run(s, first, n);
    if (r != XSA_CU_SUCCESS) return r;
    for (size_t i = 0; i < n; i++) {
        xsa_mem_handle h = s->handles[first + i];
        bool starts = s->chunk_pages[first + i] != 0;
        drop_record(s, first + i);
        if (mode == UNMAP_TAKE)
            taken[i] = h;
        else if (mode == UNMAP_RELEASE && starts)
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
        drop_record(s, first + i);
        s->mapped_pages--;
    }
}

void xsa_segment_adopt(xsa_segment *s, size_t first, const xsa_chunk *chunks, size_t n) {
    for (size_t i = 0, page = first; i < n; page += chunks[i].pages, i++) {
        for (size_t k = 0; k < chunks[i].pages; k++) s->handles[page + k] = chunks[i].handle;
        s->chunk_pages[page] = (uint32_t)chunks[i].pages;
        s->mapped_pages += chunks[i].pages;
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
    free(s->chunk_pages);
    free(s->share_fds);
    free(s->unreleased);
    free(s->leaving);
    memset(s, 0, sizeof *s);
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_segment_add_access(xsa_segment *s, int peer) {
    for (int i = 0; i < s->n_access; i++)
        if (s->access[i] == peer) return XSA_CU_SUCCESS;
    if (s->n_access == XSA_SEGMENT_MAX_ACCESS) return XSA_CU_ERROR_INVALID_VALUE;
    /* Grant on each contiguous run of mapped pages no job is taking away. */
    for (size_t p = 0; p < s->max_pages;) {
        if (!xsa_segment_page_mapped(s, p) || xsa_segment_page_leaving(s, p)) {
            p++;
            continue;
        }
        size_t end = p;
        while (end < s->max_pages && xsa_segment_page_mapped(s, end) && !xsa_segment_page_leaving(s, end)) end++;
        xsa_cu_result r = XSA_DRV(s->drv, mem_set_access, xsa_segment_page_addr(s, p), (end - p) * s->page_size, &peer, 1);
        if (r != XSA_CU_SUCCESS) return r;
        p = end;
    }
    s->access[s->n_access++] = peer;
    return XSA_CU_SUCCESS;
}

int xsa_segment_check(const xsa_segment *s, char *err, size_t errlen) {
    size_t count = 0;
    for (size_t p = 0; p < s->max_pages;) {
        if (!xsa_segment_page_mapped(s, p)) {
            if (s->chunk_pages[p] || xsa_segment_page_leaving(s, p)) {
                snprintf(err, errlen, "segment %#llx: unmapped page %zu %s", (unsigned long long)s->base, p,
                         s->chunk_pages[p] ? "starts a chunk" : "is marked leaving");
                return 0;
            }
            p++;
            continue;
        }
        size_t n = s->chunk_pages[p];
        if (n == 0 || n > s->max_pages - p) {
            snprintf(err, errlen, "segment %#llx: mapped page %zu is in no chunk", (unsigned long long)s->base, p);
            return 0;
        }
        for (size_t k = 1; k < n; k++)
            if (s->handles[p + k] != s->handles[p] || s->chunk_pages[p + k]) {
                snprintf(err, errlen, "segment %#llx: chunk at page %zu (%zu pages) breaks at page %zu",
                         (unsigned long long)s->base, p, n, p + k);
                return 0;
            }
        count += n;
        p += n;
    }
    for (size_t p = 0; s->share_fds && p < s->max_pages; p++) {
        int fd = s->share_fds[p];
        if (fd < 0) continue;
        if (!xsa_segment_page_mapped(s, p) || !s->chunk_pages[p] || !xsa_share_id(fd)) {
            snprintf(err, errlen, "segment %#llx: page %zu keeps shared fd %d but %s", (unsigned long long)s->base, p,
                     fd, !xsa_segment_page_mapped(s, p) ? "is unmapped" : !s->chunk_pages[p] ? "starts no chunk"
                                                                                            : "the fd is not registered");
            return 0;
        }
    }
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
