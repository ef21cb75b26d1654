/*
 * pool/ipc: the exporting side of IPC (protocol and lifetime rules in
 * xsalloc/xsalloc.h).
 *
 * Design: an export fills the public handle with one fd per physical handle
 * (chunk) under the block, whole (cuMemExportToShareableHandle), and a
 * fresh shared state word (ipc_state.h), and records {block, state} on the
 * pool's export list; the block's ipc_exports counts its records. A block
 * with ipc_exports > 0 is in use: once freed it waits, like a block waiting
 * for record_stream events, outside the free set. Recycling and releasing
 * only take whole chunks of free-set blocks, and a chunk under a waiting
 * block is never whole inside one, so the pinned chunks stay mapped and
 * unmoved with no check of their own. Polling (on malloc, free of an exported block, export, empty_cache)
 * drops the records whose state reads closed or revoked; a freed block
 * whose last record goes returns to the cache.
 *
 * A share (xsa_pool_ipc_share, for any number of importers) keeps no record:
 * it names the whole handles under the block, whose segment keeps one fd
 * open for each while it stays mapped (vmm/share.h), and the caller keeps
 * the block allocated for as long as importers may open it.
 */
#include "pool/ipc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/ipc_state.h"
#include "pool/mempool.h"
#include "pool/ptr_map.h"
#include "pool/state.h"

bool xsa_ipc_probe(xsa_pool *p) {
    int fd_handles = 0;
    xsa_cu_result r = XSA_DRV(p->drv, device_get_attribute, &fd_handles, XSA_ATTR_POSIX_FD_SUPPORTED, p->device);
    if (r != XSA_CU_SUCCESS || !fd_handles) return false;
    xsa_mem_handle h = 0;
    r = XSA_DRV(p->drv, mem_create, &h, p->page_size, p->device, 1);
    if (r == XSA_CU_SUCCESS && XSA_DRV(p->drv, mem_release, h) != XSA_CU_SUCCESS) p->probe_left = h;
    /* Only a refusal means "unsupported"; out of memory says nothing. */
    return r != XSA_CU_ERROR_NOT_SUPPORTED && r != XSA_CU_ERROR_INVALID_VALUE;
}

/* Forgets export e (already unlinked); a freed block it was the last to pin
 * returns to the cache. */
static void drop(xsa_pool *p, xsa_export *e) {
    xsa_block *b = e->block;
    xsa_ipc_state_unmap(e->state);
    free(e);
    if (--b->ipc_exports == 0 && !xsa_block_in_use(b)) xsa_pool_free_block(p, b);
}

void xsa_ipc_poll(xsa_pool *p) {
    for (xsa_export **link = &p->exports; *link;) {
        xsa_export *e = *link;
        uint32_t st = atomic_load(&e->state->state);
        if (st != XSA_IPC_CLOSED && st != XSA_IPC_REVOKED) {
            link = &e->next;
            continue;
        }
        *link = e->next;
        drop(p, e);
    }
    xsa_pool_update_attend(p);
}

void xsa_ipc_destroy(xsa_pool *p) {
    if (p->probe_left) XSA_DRV(p->drv, mem_release, p->probe_left);
    p->probe_left = XSA_NO_HANDLE;
    while (p->exports) {
        xsa_export *e = p->exports;
        p->exports = e->next;
        /* Not yet imported: the handle becomes stale. */
        xsa_ipc_state_move(e->state, XSA_IPC_EXPORTED, XSA_IPC_REVOKED);
        xsa_ipc_state_unmap(e->state);
        free(e);
    }
}

static uint64_t new_export_id(void) {
    static _Atomic uint32_t counter;
    return (uint64_t)(uint32_t)getpid() << 32 | (atomic_fetch_add(&counter, 1) + 1);
}

/* Why block b cannot be exported, or NULL. */
static const char *refusal(const xsa_pool *p, const xsa_block *b) {
    if (!b->seg->expandable)
        return xsa_mempool_owns_allocator(b->seg->mp)
                   ? "it is memory of its memory pool's own allocator; IPC export needs expandable segments"
                   : "it is in a classic cuMemAlloc segment; IPC export needs expandable segments";
    if (!p->opt.ipc_handles) return "IPC is off: set ipc_handles:True in XSALLOC_CONF";
    if (!p->ipc)
        return "IPC is off: the driver refused exportable (POSIX file descriptor) memory handles, so ipc_handles "
               "fell back to ordinary pages";
    return NULL;
}

/* The live block at ptr if it can be exported, else NULL with the reason
 * in err (named after `call`) and *st set. */
static xsa_block *exportable(xsa_pool *p, void *ptr, const char *call, xsa_pool_status *st, char *err, size_t errlen) {
    xsa_block *b = xsa_ptr_map_get(&p->allocated, (uintptr_t)ptr);
    if (!b) {
        snprintf(err, errlen, "%s(%p): not a live allocation on device %d", call, ptr, p->device);
        *st = XSA_POOL_BAD_POINTER;
        return NULL;
    }
    const char *why = refusal(p, b);
    if (why) {
        snprintf(err, errlen, "%s(%p) on device %d: %s", call, ptr, p->device, why);
        *st = XSA_POOL_UNSUPPORTED;
        return NULL;
    }
    return b;
}

/* The physical handles under block b, whole: pages [*first, *end) of its
 * segment; returns how many. */
static size_t handles_under(const xsa_pool *p, const xsa_block *b, size_t *first, size_t *end) {
    const xsa_segment *vm = &b->seg->vm;
    size_t last = (b->ptr + b->size - 1 - b->seg->base) / p->page_size, n = 0;
    xsa_segment_chunk(vm, (b->ptr - b->seg->base) / p->page_size, first);
    for (*end = *first; *end <= last; *end += vm->chunk_pages[*end]) n++;
    return n;
}

/* Exports the n handles from page `first` of vm into fds[] and pages[]; on
 * failure closes those made and returns the driver's result. */
static xsa_cu_result export_handles(xsa_pool *p, const xsa_segment *vm, size_t first, size_t n, int32_t *fds,
                                    uint32_t *pages) {
    size_t c = first;
    for (size_t i = 0; i < n; c += vm->chunk_pages[c], i++) {
        int fd = -1;
        xsa_cu_result r = XSA_DRV(p->drv, mem_export_fd, &fd, vm->handles[c]);
        if (r != XSA_CU_SUCCESS) {
            while (i > 0) close(fds[--i]);
            return r;
        }
        fds[i] = fd;
        pages[i] = vm->chunk_pages[c];
    }
    return XSA_CU_SUCCESS;
}

xsa_pool_status xsa_pool_ipc_export(xsa_pool *p, void *ptr, xsa_ipc_handle *out, char *err, size_t errlen) {
    if (p->exports) xsa_ipc_poll(p);
    xsa_pool_status st;
    xsa_block *b = exportable(p, ptr, "xsa_ipc_export", &st, err, errlen);
    if (!b) return st;
    size_t first, end, n = handles_under(p, b, &first, &end);
    if (end - first > XSA_IPC_MAX_PAGES) {
        snprintf(err, errlen, "xsa_ipc_export(%p): the block of %zu bytes lies in %zu pages; a handle carries at most %d",
                 ptr, b->size, end - first, XSA_IPC_MAX_PAGES);
        return XSA_POOL_INVALID;
    }
    xsa_export *e = malloc(sizeof *e);
    uint64_t id = new_export_id();
    int state_fd = -1;
    xsa_ipc_state *state = e ? xsa_ipc_state_create(id, &state_fd) : NULL;
    if (!state) {
        snprintf(err, errlen, "xsa_ipc_export(%p): cannot create the shared state (memfd): %s", ptr,
                 e ? strerror(errno) : "out of host memory");
        free(e);
        return XSA_POOL_HOST_OOM;
    }
    memset(out, 0, sizeof *out);
    const xsa_segment *vm = &b->seg->vm;
    xsa_cu_result r = export_handles(p, vm, first, n, out->fds, out->pages);
    if (r != XSA_CU_SUCCESS) {
        close(state_fd);
        xsa_ipc_state_unmap(state);
        free(e);
        xsa_pool_driver_error(p, "cuMemExportToShareableHandle", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    for (size_t i = n; i < XSA_IPC_MAX_PAGES; i++) out->fds[i] = -1;
    out->magic = XSA_IPC_MAGIC;
    out->version = XSA_IPC_VERSION;
    out->export_id = id;
    out->device = p->device;
    out->n_pages = (int32_t)(end - first);
    out->n_handles = (int32_t)n;
    out->page_size = p->page_size;
    out->offset = b->ptr - xsa_segment_page_addr(vm, first);
    out->size = b->size;
    out->state_fd = state_fd;
    *e = (xsa_export){.block = b, .state = state, .id = id, .next = p->exports};
    p->exports = e;
    p->attend = true;
    b->ipc_exports++;
    return XSA_POOL_OK;
}

xsa_pool_status xsa_pool_ipc_revoke(xsa_pool *p, uint64_t export_id, char *err, size_t errlen) {
    xsa_export **link = &p->exports;
    while (*link && (*link)->id != export_id) link = &(*link)->next;
    xsa_export *e = *link;
    uint32_t found = e ? xsa_ipc_state_move(e->state, XSA_IPC_EXPORTED, XSA_IPC_REVOKED) : 0;
    if (found == XSA_IPC_IMPORTED) {
        snprintf(err, errlen, "xsa_ipc_revoke: export %#llx of device %d is imported; it ends when the importer calls xsa_ipc_close",
                 (unsigned long long)export_id, p->device);
        return XSA_POOL_INVALID;
    }
    if (!e || (found != XSA_IPC_EXPORTED && found != XSA_IPC_CLOSED)) {
        snprintf(err, errlen, "xsa_ipc_revoke: export %#llx is not pending on device %d (closed, revoked, or not exported by this process)",
                 (unsigned long long)export_id, p->device);
        return XSA_POOL_INVALID;
    }
    *link = e->next;
    drop(p, e);
    xsa_pool_update_attend(p);
    return XSA_POOL_OK;
}

xsa_pool_status xsa_pool_ipc_share(xsa_pool *p, void *ptr, xsa_pool_share *out, char *err, size_t errlen) {
    xsa_pool_status st;
    xsa_block *b = exportable(p, ptr, "xsa_ipc_share", &st, err, errlen);
    if (!b) return st;
    xsa_segment *vm = &b->seg->vm;
    size_t first, end, count = handles_under(p, b, &first, &end);
    xsa_shared_chunk *chunks = malloc(count * sizeof *chunks);
    if (!chunks) {
        snprintf(err, errlen, "xsa_ipc_share(%p): out of host memory", ptr);
        return XSA_POOL_HOST_OOM;
    }
    size_t i = 0;
    for (size_t c = first; c < end; c += vm->chunk_pages[c], i++) {
        int fd = -1;
        xsa_cu_result r = xsa_segment_share(vm, c, &fd, &chunks[i].id);
        if (r != XSA_CU_SUCCESS) {
            free(chunks); /* the fds exported so far stay with their chunks */
            xsa_pool_driver_error(p, "exporting the block's handles (cuMemExportToShareableHandle)", r, err, errlen);
            return XSA_POOL_DRIVER_ERROR;
        }
        chunks[i].fd = fd;
        chunks[i].pages = (uint32_t)vm->chunk_pages[c];
    }
    *out = (xsa_pool_share){.chunks = chunks, .n_chunks = count, .page_size = p->page_size,
                            .offset = b->ptr - xsa_segment_page_addr(vm, first)};
    return XSA_POOL_OK;
}
