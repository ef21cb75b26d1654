/*
 * sim/handles: the simulated driver's physical memory handles: created,
 * released, exported as file descriptors and imported from them.
 *
 * Design: non-exportable handles are ranges of one sparse memfd per
 * device (one fd per handle would exhaust the fd limit with >10,000 live
 * handles); a freed range is punched out, so host memory comes back, and is
 * reused by the next handle of the same size. Exportable handles get a memfd
 * of their own so that a forked child can mmap the exported fd; importing
 * such an fd makes a handle backed by a dup of it, whose memory is counted
 * on the device that created it, not again. A handle released while
 * mapped lives on until its last page is unmapped (sim/mappings.c).
 *
 * Handle values encode (generation << 32 | slot + 1): never 0, and a stale
 * or made-up value is detected by a table lookup, never dereferenced.
 */
#include "sim/handles.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static size_class *find_class(sim_device *dv, size_t size) {
    for (size_t i = 0; i < dv->free_ranges.n; i++)
        if (dv->free_ranges.v[i].size == size) return &dv->free_ranges.v[i];
    return NULL;
}

/* A file range of `size` bytes in the device's memfd: a released one of the
 * same size, else a fresh one at the end (the file grows, sparse). */
static bool take_range(sim_device *dv, int device, size_t size, size_t *off) {
    size_class *c = find_class(dv, size);
    if (c && c->offsets.n) {
        *off = c->offsets.v[--c->offsets.n];
        return true;
    }
    if (dv->fd < 0) {
        char name[32];
        snprintf(name, sizeof name, "xsa-sim-device%d", device);
        dv->fd = memfd_create(name, MFD_CLOEXEC);
        if (dv->fd < 0) return false;
    }
    size_t end = dv->next_off + size;
    if (end > dv->file_size) {
        size_t len = dv->file_size ? dv->file_size : 4 * S.cfg.capacity;
        while (len < end) len *= 2;
        if (ftruncate(dv->fd, (off_t)len) != 0) return false;
        dv->file_size = len;
    }
    *off = dv->next_off;
    dv->next_off = end;
    return true;
}

/* Punches the range out (its host memory is returned) and keeps it for reuse. */
static void give_range(sim_device *dv, size_t off, size_t size) {
    fallocate(dv->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size);
    size_class *c = find_class(dv, size);
    if (!c && ARRAY_RESERVE(dv->free_ranges, dv->free_ranges.n + 1)) {
        c = &dv->free_ranges.v[dv->free_ranges.n++];
        *c = (size_class){.size = size};
    }
    /* Without memory for the free list the range is simply not reused. */
    if (c && ARRAY_RESERVE(c->offsets, c->offsets.n + 1)) c->offsets.v[c->offsets.n++] = off;
}

static xsa_mem_handle handle_value(uint32_t slot) {
    return ((uint64_t)S.handles.v[slot].gen << 32) | (slot + 1);
}

sim_handle *xsa_sim_handle_lookup(xsa_mem_handle h, slot_state want) {
    uint64_t slot = (h & 0xffffffffu) - 1;
    if ((h & 0xffffffffu) == 0 || slot >= S.handles.n) return NULL;
    sim_handle *sh = &S.handles.v[slot];
    return sh->gen == (uint32_t)(h >> 32) && sh->state == want ? sh : NULL;
}

static bool new_handle_slot(uint32_t *slot) {
    if (S.free_handle_slots.n) {
        *slot = S.free_handle_slots.v[--S.free_handle_slots.n];
        return true;
    }
    if (!ARRAY_RESERVE(S.handles, S.handles.n + 1) || !ARRAY_RESERVE(S.free_handle_slots, S.handles.n + 1))
        return false;
    *slot = (uint32_t)S.handles.n++;
    S.handles.v[*slot] = (sim_handle){.gen = 1, .state = SLOT_FREE, .own_fd = -1};
    return true;
}

/* Backing for an exportable handle: a memfd of its own. */
static bool own_file(size_t size, int *fd) {
    *fd = memfd_create("xsa-sim-exportable", MFD_CLOEXEC);
    if (*fd < 0) return false;
    if (ftruncate(*fd, (off_t)size) == 0) return true;
    close(*fd);
    return false;
}

xsa_cu_result xsa_sim_handle_create(xsa_mem_handle *handle, size_t size, int device, int exportable) {
    if (!handle) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    if (size == 0 || size % S.cfg.granularity) return XSA_CU_ERROR_INVALID_VALUE;
    if (!S.cfg.vmm_supported || (exportable && !S.cfg.fd_handles_supported)) return XSA_CU_ERROR_NOT_SUPPORTED;
    sim_device *dv = &S.dev[device];
    if (size > S.cfg.capacity - dv->used) return XSA_CU_ERROR_OUT_OF_MEMORY;
    uint32_t slot;
    if (!new_handle_slot(&slot)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    sim_handle *h = &S.handles.v[slot];
    bool backed = exportable ? own_file(size, &h->own_fd) : take_range(dv, device, size, &h->file_off);
    if (!backed) {
        h->own_fd = -1;
        S.free_handle_slots.v[S.free_handle_slots.n++] = slot;
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    if (exportable) h->file_off = 0;
    h->state = SLOT_LIVE;
    h->device = device;
    h->size = size;
    h->mapped_pages = 0;
    dv->used += size;
    S.live_handles++;
    S.handle_bytes += size;
    *handle = handle_value(slot);
    return XSA_CU_SUCCESS;
}

void xsa_sim_handle_free(uint32_t slot) {
    sim_handle *h = &S.handles.v[slot];
    sim_device *dv = &S.dev[h->device];
    if (h->own_fd >= 0) close(h->own_fd);
    else give_range(dv, h->file_off, h->size);
    if (!h->imported) {
        dv->used -= h->size;
        S.handle_bytes -= h->size;
    }
    S.live_handles--;
    ARRAY_FREE(h->uses); /* empty: unmapping its last mapping dropped them */
    *h = (sim_handle){.gen = h->gen + 1, .state = SLOT_FREE, .own_fd = -1};
    S.free_handle_slots.v[S.free_handle_slots.n++] = slot; /* room reserved at creation */
}

xsa_cu_result xsa_sim_handle_release(xsa_mem_handle handle) {
    sim_handle *h = xsa_sim_handle_lookup(handle, SLOT_LIVE);
    if (!h) return XSA_CU_ERROR_INVALID_VALUE;
    if (h->mapped_pages) h->state = SLOT_RELEASED; /* freed by the last unmap */
    else xsa_sim_handle_free((uint32_t)(h - S.handles.v));
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_handle_export(int *fd, xsa_mem_handle handle) {
    if (!fd) return XSA_CU_ERROR_INVALID_VALUE;
    sim_handle *h = xsa_sim_handle_lookup(handle, SLOT_LIVE);
    if (!h || h->own_fd < 0) return XSA_CU_ERROR_INVALID_VALUE;
    int dup_fd = fcntl(h->own_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return XSA_CU_ERROR_OUT_OF_MEMORY;
    *fd = dup_fd;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_handle_import(xsa_mem_handle *handle, int fd, int device) {
    if (!handle) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    if (!S.cfg.fd_handles_supported) return XSA_CU_ERROR_NOT_SUPPORTED;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (size_t)st.st_size % S.cfg.granularity)
        return XSA_CU_ERROR_INVALID_VALUE;
    uint32_t slot;
    if (!new_handle_slot(&slot)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    sim_handle *h = &S.handles.v[slot];
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
        S.free_handle_slots.v[S.free_handle_slots.n++] = slot;
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    *h = (sim_handle){.gen = h->gen, .state = SLOT_LIVE, .device = device, .own_fd = own,
                      .size = (size_t)st.st_size, .imported = true};
    S.live_handles++;
    *handle = handle_value(slot);
    return XSA_CU_SUCCESS;
}
