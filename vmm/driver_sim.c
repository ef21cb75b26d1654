/*
 * vmm/driver_sim: the simulated driver's table, configuration, fault
 * injection, physical handles, reservations, mappings and cuMemAlloc
 * allocations (controls in sim.h; streams, events and kernels are in
 * sim_timeline.c, stream capture and graphs in sim_capture.c, usage and
 * the invariant checker in sim_check.c, the calls' H100 cost in
 * sim_cost.c).
 *
 * Design: one global mutex guards all state; every entry point takes it,
 * applies the default configuration on first use, counts the call for fault
 * injection and only then does its work, so an injected fault has no effect.
 *
 * Physical memory: non-exportable handles are ranges of one sparse memfd per
 * device (one fd per handle would exhaust the fd limit with >10,000 live
 * handles); a freed range is punched out, so host memory comes back, and is
 * reused by the next handle of the same size. Exportable handles get a memfd
 * of their own so that a forked child can mmap the exported fd; importing
 * such an fd makes a handle backed by a dup of it, whose memory is counted
 * on the device that created it, not again.
 *
 * Handle and event values encode (generation << 32 | slot + 1): never 0, and
 * a stale or made-up value is detected by a table lookup, never dereferenced.
 *
 * Reservations sit in an array sorted by base (there are only a handful);
 * each keeps one small record per granule: the handle mapped there, the id of
 * the cuMemMap call that mapped it (unmap must cover whole mappings) and the
 * devices granted access. Unmapping and cuMemFree first tell the timeline,
 * which reports kernels still using the memory.
 */
#include "vmm/sim_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_ALLOC_ROUND ((size_t)2 << 20) /* cuMemAlloc rounds to 2 MiB */

bool xsa_sim_grow(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need) cap2 *= 2;
    void *nv = realloc(*v, cap2 * elem);
    if (!nv) return false;
    *v = nv;
    *cap = cap2;
    return true;
}

sim_state xsa_sim_state;
pthread_mutex_t xsa_sim_lock = PTHREAD_MUTEX_INITIALIZER;
static char fake_ctx[XSA_SIM_MAX_DEVICES];
static xsa_driver sim_table;

/* ---- configuration --------------------------------------------------- */

void xsa_sim_default_config(xsa_sim_config *c) {
    memset(c, 0, sizeof *c);
    c->devices = 1;
    c->capacity = (size_t)80 << 30;
    c->granularity = (size_t)2 << 20;
    c->vmm_supported = 1;
    c->fd_handles_supported = 1;
    memset(c->peer, 1, sizeof c->peer);
}

static bool config_valid(const xsa_sim_config *c) {
    size_t g = c->granularity;
    return c->devices >= 1 && c->devices <= XSA_SIM_MAX_DEVICES && g >= 4096 && (g & (g - 1)) == 0 &&
           c->capacity > 0 && c->capacity % g == 0;
}

static bool anything_live(void) {
    return S.live_handles || S.resv.n || S.allocs.n || S.live_events || xsa_sim_cap_live();
}

/* Forgets the device files (nothing lives in them). */
static void reset_devices(void) {
    for (int d = 0; d < XSA_SIM_MAX_DEVICES; d++) {
        sim_device *dv = &S.dev[d];
        /* Before the first configuration the fds are zero-initialized, not open. */
        if (dv->fd >= 0 && S.configured) close(dv->fd);
        for (size_t i = 0; i < dv->free_ranges.n; i++) ARRAY_FREE(dv->free_ranges.v[i].offsets);
        ARRAY_FREE(dv->free_ranges);
        memset(dv, 0, sizeof *dv);
        dv->fd = -1;
    }
}

static void apply_config(const xsa_sim_config *c) {
    reset_devices();
    S.cfg = *c;
    xsa_sim_tl_reset(); /* reads cfg.eager_events */
    S.n_faults = 0;
    memset(S.entry_calls, 0, sizeof S.entry_calls);
    S.h100_est_ns = 0;
    S.configured = true;
}

xsa_cu_result xsa_sim_configure(const xsa_sim_config *config) {
    if (!config || !config_valid(config)) return XSA_CU_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_cu_result r = XSA_CU_ERROR_NOT_PERMITTED;
    if (!anything_live()) {
        apply_config(config);
        xsa_driver_reset_calls(&sim_table);
        r = XSA_CU_SUCCESS;
    }
    pthread_mutex_unlock(&xsa_sim_lock);
    return r;
}

void xsa_sim_ensure_configured(void) {
    if (S.configured) return;
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    apply_config(&c);
}

/* ---- fault injection and the entry guard ------------------------------ */

void xsa_sim_fail_call(xsa_driver_entry entry, uint64_t nth, xsa_cu_result error) {
    if ((unsigned)entry >= XSA_DRV_COUNT || nth == 0) return;
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    if (S.n_faults < SIM_MAX_FAULTS)
        S.faults[S.n_faults++] = (sim_fault){entry, S.entry_calls[entry] + nth, error};
    pthread_mutex_unlock(&xsa_sim_lock);
}

void xsa_sim_clear_faults(void) {
    pthread_mutex_lock(&xsa_sim_lock);
    S.n_faults = 0;
    pthread_mutex_unlock(&xsa_sim_lock);
}

/* Takes the lock and counts the call; returns the injected error, if any
 * (the lock is held either way), else adds the call's H100 cost. */
static xsa_cu_result enter(xsa_driver_entry e) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    uint64_t n = ++S.entry_calls[e];
    for (int i = 0; i < S.n_faults; i++) {
        if (S.faults[i].entry != e || S.faults[i].at != n) continue;
        xsa_cu_result err = S.faults[i].error;
        S.faults[i] = S.faults[--S.n_faults];
        return err;
    }
    xsa_sim_cost_call(e);
    return XSA_CU_SUCCESS;
}

#define GUARDED(entry, call)                                                   \
    do {                                                                       \
        xsa_cu_result r_ = enter(XSA_DRV_##entry);                             \
        if (r_ == XSA_CU_SUCCESS) r_ = (call);                                 \
        pthread_mutex_unlock(&xsa_sim_lock);                                       \
        return r_;                                                             \
    } while (0)

/* ---- devices ----------------------------------------------------------- */

static bool device_ok(int d) { return d >= 0 && d < S.cfg.devices; }

static xsa_cu_result get_count(int *count) {
    if (!count) return XSA_CU_ERROR_INVALID_VALUE;
    *count = S.cfg.devices;
    return XSA_CU_SUCCESS;
}

static xsa_cu_result get_attribute(int *value, int attribute, int device) {
    if (!value) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    if (attribute == XSA_ATTR_VMM_SUPPORTED) *value = S.cfg.vmm_supported;
    else if (attribute == XSA_ATTR_POSIX_FD_SUPPORTED) *value = S.cfg.fd_handles_supported;
    else return XSA_CU_ERROR_INVALID_VALUE;
    return XSA_CU_SUCCESS;
}

static xsa_cu_result total_mem(size_t *bytes, int device) {
    if (!bytes) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *bytes = S.cfg.capacity;
    return XSA_CU_SUCCESS;
}

static xsa_cu_result can_access_peer(int *can, int device, int peer) {
    if (!can) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device) || !device_ok(peer)) return XSA_CU_ERROR_INVALID_DEVICE;
    *can = device != peer && S.cfg.peer[device][peer];
    return XSA_CU_SUCCESS;
}

static xsa_cu_result get_info(int device, size_t *free_bytes, size_t *total_bytes) {
    if (!free_bytes || !total_bytes) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *free_bytes = S.cfg.capacity - S.dev[device].used;
    *total_bytes = S.cfg.capacity;
    return XSA_CU_SUCCESS;
}

static xsa_cu_result ctx_retain(void **ctx, int device) {
    if (!ctx) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *ctx = &fake_ctx[device];
    return XSA_CU_SUCCESS;
}

static xsa_cu_result ctx_release(int device) {
    return device_ok(device) ? XSA_CU_SUCCESS : XSA_CU_ERROR_INVALID_DEVICE;
}

static xsa_cu_result set_current(void *ctx) {
    if (!ctx) return XSA_CU_SUCCESS;
    uintptr_t c = (uintptr_t)ctx, first = (uintptr_t)fake_ctx;
    bool ours = c >= first && c < first + (uintptr_t)S.cfg.devices;
    return ours ? XSA_CU_SUCCESS : XSA_CU_ERROR_INVALID_CONTEXT;
}

static xsa_cu_result get_granularity(size_t *granularity, int device, int exportable) {
    (void)exportable;
    if (!granularity) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *granularity = S.cfg.granularity;
    return XSA_CU_SUCCESS;
}

/* ---- physical handles -------------------------------------------------- */

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

/* The slot of a handle value in state `want`, or NULL. */
static sim_handle *handle_lookup(xsa_mem_handle h, slot_state want) {
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

static xsa_cu_result mem_create(xsa_mem_handle *handle, size_t size, int device, int exportable) {
    if (!handle) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
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

/* Frees the physical memory of a handle (released and no longer mapped). */
static void free_handle(uint32_t slot) {
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

static xsa_cu_result mem_release(xsa_mem_handle handle) {
    sim_handle *h = handle_lookup(handle, SLOT_LIVE);
    if (!h) return XSA_CU_ERROR_INVALID_VALUE;
    if (h->mapped_pages) h->state = SLOT_RELEASED; /* freed by the last unmap */
    else free_handle((uint32_t)(h - S.handles.v));
    return XSA_CU_SUCCESS;
}

static xsa_cu_result export_fd(int *fd, xsa_mem_handle handle) {
    if (!fd) return XSA_CU_ERROR_INVALID_VALUE;
    sim_handle *h = handle_lookup(handle, SLOT_LIVE);
    if (!h || h->own_fd < 0) return XSA_CU_ERROR_INVALID_VALUE;
    int dup_fd = fcntl(h->own_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return XSA_CU_ERROR_OUT_OF_MEMORY;
    *fd = dup_fd;
    return XSA_CU_SUCCESS;
}

/* A handle backed by a dup of an exported memfd (an fd this process got
 * from mem_export_fd, here or in another process). */
static xsa_cu_result import_fd(xsa_mem_handle *handle, int fd, int device) {
    if (!handle) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
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

/* ---- reservations ------------------------------------------------------ */

sim_reservation *xsa_sim_resv_holding(uintptr_t p, size_t size) {
    size_t i;
    FIND_BELOW(S.resv, p, i);
    if (i == S.resv.n) return NULL;
    sim_reservation *r = &S.resv.v[i];
    return p - r->base < r->size && size <= r->size - (p - r->base) ? r : NULL;
}

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

static xsa_cu_result address_reserve(xsa_devptr *ptr, size_t size, size_t alignment) {
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
static xsa_cu_result address_free(xsa_devptr ptr, size_t size) {
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

static xsa_cu_result mem_map(xsa_devptr ptr, size_t size, size_t offset, xsa_mem_handle handle) {
    size_t first = 0, n = 0;
    sim_handle *h = handle_lookup(handle, SLOT_LIVE);
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

static xsa_cu_result mem_unmap(xsa_devptr ptr, size_t size) {
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
        if (--h->mapped_pages == 0 && h->state == SLOT_RELEASED) free_handle(pg->handle);
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
        if (!device_ok(devices[k])) return XSA_CU_ERROR_INVALID_DEVICE;
    for (size_t i = 0; i < n; i++) {
        int owner = S.handles.v[r->pages[first + i].handle].device;
        for (int k = 0; k < nd; k++)
            if (devices[k] != owner && !S.cfg.peer[devices[k]][owner]) return XSA_CU_ERROR_INVALID_DEVICE;
    }
    return XSA_CU_SUCCESS;
}

static xsa_cu_result set_access(xsa_devptr ptr, size_t size, const int *devices, int nd) {
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

static xsa_cu_result mem_alloc(xsa_devptr *ptr, size_t size, int device) {
    /* Refused during a global-mode capture, which it invalidates (H100). */
    xsa_cu_result r = xsa_sim_cap_device_sync("cuMemAlloc");
    if (r != XSA_CU_SUCCESS) return r;
    if (!ptr || size == 0) return XSA_CU_ERROR_INVALID_VALUE;
    if (!device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
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

sim_alloc *xsa_sim_alloc_holding(uintptr_t p, size_t size) {
    size_t i;
    FIND_BELOW(S.allocs, p, i);
    if (i == S.allocs.n) return NULL;
    sim_alloc *a = &S.allocs.v[i];
    return p - a->base < a->size && size <= a->size - (p - a->base) ? a : NULL;
}

static xsa_cu_result mem_free(xsa_devptr ptr) {
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

/* cuCtxSynchronize: a global-mode capture under way refuses it and is
 * invalidated, as cuMemFree; otherwise every stream's work completes (the
 * simulator does not keep streams apart by device: waiting for more work
 * than the device's is harmless to the checks). */
static xsa_cu_result ctx_synchronize(int device) {
    if (device < 0 || device >= S.cfg.devices) return XSA_CU_ERROR_INVALID_DEVICE;
    xsa_cu_result r = xsa_sim_cap_device_sync("cuCtxSynchronize");
    if (r != XSA_CU_SUCCESS) return r;
    xsa_sim_tl_synchronize_all();
    return XSA_CU_SUCCESS;
}

/* ---- error strings ------------------------------------------------------ */

static const char *error_string(xsa_cu_result r) {
    switch (r) {
    case XSA_CU_SUCCESS: return "CUDA_SUCCESS: no error";
    case XSA_CU_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE: invalid argument";
    case XSA_CU_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY: out of memory";
    case XSA_CU_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED: initialization error";
    case XSA_CU_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected";
    case XSA_CU_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE: invalid device ordinal";
    case XSA_CU_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT: invalid device context";
    case XSA_CU_ERROR_PEER_ACCESS_UNSUPPORTED: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: peer access is not supported between these two devices";
    case XSA_CU_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE: invalid resource handle";
    case XSA_CU_ERROR_ILLEGAL_STATE: return "CUDA_ERROR_ILLEGAL_STATE: the operation cannot be performed in the present state";
    case XSA_CU_ERROR_LOSSY_QUERY: return "CUDA_ERROR_LOSSY_QUERY: attempted introspection would yield a misleading summary";
    case XSA_CU_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND: named symbol not found";
    case XSA_CU_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY: device not ready";
    case XSA_CU_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered";
    case XSA_CU_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED: operation not permitted";
    case XSA_CU_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED: operation not supported";
    case XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: operation not permitted when stream is capturing";
    case XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: operation failed due to a previous error during capture";
    case XSA_CU_ERROR_STREAM_CAPTURE_MERGE: return "CUDA_ERROR_STREAM_CAPTURE_MERGE: operation would result in a merge of separate capture sequences";
    case XSA_CU_ERROR_STREAM_CAPTURE_UNMATCHED: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: capture was not ended in the same stream as it began";
    case XSA_CU_ERROR_STREAM_CAPTURE_UNJOINED: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED: capturing stream has unjoined work";
    case XSA_CU_ERROR_STREAM_CAPTURE_ISOLATION: return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION: dependency created on uncaptured work in another stream";
    case XSA_CU_ERROR_STREAM_CAPTURE_IMPLICIT: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: operation would make the legacy stream depend on a capturing blocking stream";
    case XSA_CU_ERROR_CAPTURED_EVENT: return "CUDA_ERROR_CAPTURED_EVENT: operation not permitted on an event last recorded in a capturing stream";
    case XSA_CU_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN: unknown error";
    default: return "unrecognized CUDA error code";
    }
}

/* ---- the table ---------------------------------------------------------- */

static xsa_cu_result sim_init(void) { GUARDED(init, XSA_CU_SUCCESS); }
static xsa_cu_result sim_device_get_count(int *c) { GUARDED(device_get_count, get_count(c)); }
static xsa_cu_result sim_device_get_attribute(int *v, int a, int d) { GUARDED(device_get_attribute, get_attribute(v, a, d)); }
static xsa_cu_result sim_device_total_mem(size_t *b, int d) { GUARDED(device_total_mem, total_mem(b, d)); }
static xsa_cu_result sim_device_can_access_peer(int *c, int d, int p) { GUARDED(device_can_access_peer, can_access_peer(c, d, p)); }
static xsa_cu_result sim_mem_get_info(int d, size_t *f, size_t *t) { GUARDED(mem_get_info, get_info(d, f, t)); }
static xsa_cu_result sim_primary_ctx_retain(void **c, int d) { GUARDED(primary_ctx_retain, ctx_retain(c, d)); }
static xsa_cu_result sim_primary_ctx_release(int d) { GUARDED(primary_ctx_release, ctx_release(d)); }
static xsa_cu_result sim_ctx_set_current(void *c) { GUARDED(ctx_set_current, set_current(c)); }
static xsa_cu_result sim_mem_get_granularity(size_t *g, int d, int e) { GUARDED(mem_get_granularity, get_granularity(g, d, e)); }
static xsa_cu_result sim_mem_address_reserve(xsa_devptr *p, size_t s, size_t a) { GUARDED(mem_address_reserve, address_reserve(p, s, a)); }
static xsa_cu_result sim_mem_address_free(xsa_devptr p, size_t s) { GUARDED(mem_address_free, address_free(p, s)); }
static xsa_cu_result sim_mem_create(xsa_mem_handle *h, size_t s, int d, int e) { GUARDED(mem_create, mem_create(h, s, d, e)); }
static xsa_cu_result sim_mem_release(xsa_mem_handle h) { GUARDED(mem_release, mem_release(h)); }
static xsa_cu_result sim_mem_map(xsa_devptr p, size_t s, size_t o, xsa_mem_handle h) { GUARDED(mem_map, mem_map(p, s, o, h)); }
static xsa_cu_result sim_mem_unmap(xsa_devptr p, size_t s) { GUARDED(mem_unmap, mem_unmap(p, s)); }
static xsa_cu_result sim_mem_set_access(xsa_devptr p, size_t s, const int *d, int n) { GUARDED(mem_set_access, set_access(p, s, d, n)); }
static xsa_cu_result sim_mem_export_fd(int *fd, xsa_mem_handle h) { GUARDED(mem_export_fd, export_fd(fd, h)); }
static xsa_cu_result sim_mem_alloc(xsa_devptr *p, size_t s, int d) { GUARDED(mem_alloc, mem_alloc(p, s, d)); }
static xsa_cu_result sim_mem_free(xsa_devptr p) { GUARDED(mem_free, mem_free(p)); }
static xsa_cu_result sim_stream_query(xsa_stream s) { GUARDED(stream_query, xsa_sim_cap_stream_query(s)); }
static xsa_cu_result sim_stream_synchronize(xsa_stream s) { GUARDED(stream_synchronize, xsa_sim_cap_stream_synchronize(s)); }
static xsa_cu_result sim_event_create(xsa_event *e, int d) { GUARDED(event_create, xsa_sim_tl_event_create(e, d)); }
static xsa_cu_result sim_event_record(xsa_event e, xsa_stream s) { GUARDED(event_record, xsa_sim_cap_event_record(e, s)); }
static xsa_cu_result sim_event_query(xsa_event e) { GUARDED(event_query, xsa_sim_cap_event_query(e)); }
static xsa_cu_result sim_event_synchronize(xsa_event e) { GUARDED(event_synchronize, xsa_sim_cap_event_synchronize(e)); }
static xsa_cu_result sim_event_destroy(xsa_event e) { GUARDED(event_destroy, xsa_sim_cap_event_destroy(e)); }
static xsa_cu_result sim_stream_wait_event(xsa_stream s, xsa_event e) { GUARDED(stream_wait_event, xsa_sim_cap_stream_wait_event(s, e)); }
static xsa_cu_result sim_mem_import_fd(xsa_mem_handle *h, int fd, int d) { GUARDED(mem_import_fd, import_fd(h, fd, d)); }
static xsa_cu_result sim_stream_begin_capture(xsa_stream s) { GUARDED(stream_begin_capture, xsa_sim_cap_begin(s)); }
static xsa_cu_result sim_stream_end_capture(xsa_stream s, xsa_graph *g) { GUARDED(stream_end_capture, xsa_sim_cap_end(s, g)); }
static xsa_cu_result sim_stream_get_capture_info(xsa_stream s, int *st, uint64_t *id, const xsa_graph_node **d, size_t *n) { GUARDED(stream_get_capture_info, xsa_sim_cap_info(s, st, id, d, n)); }
static xsa_cu_result sim_graph_node_get_dependencies(xsa_graph_node nd, xsa_graph_node *d, size_t *n) { GUARDED(graph_node_get_dependencies, xsa_sim_cap_node_deps(nd, d, n)); }
static xsa_cu_result sim_graph_instantiate(xsa_graph_exec *e, xsa_graph g) { GUARDED(graph_instantiate, xsa_sim_cap_instantiate(e, g)); }
static xsa_cu_result sim_graph_launch(xsa_graph_exec e, xsa_stream s) { GUARDED(graph_launch, xsa_sim_cap_graph_launch(e, s)); }
static xsa_cu_result sim_graph_exec_destroy(xsa_graph_exec e) { GUARDED(graph_exec_destroy, xsa_sim_cap_exec_destroy(e)); }
static xsa_cu_result sim_graph_destroy(xsa_graph g) { GUARDED(graph_destroy, xsa_sim_cap_graph_destroy(g)); }
static xsa_cu_result sim_thread_exchange_capture_mode(int *m) { GUARDED(thread_exchange_capture_mode, xsa_sim_cap_exchange_mode(m)); }
/* The real system call: exported handles are memfds another process can take. */
static xsa_cu_result sim_ctx_synchronize(int d) { GUARDED(ctx_synchronize, ctx_synchronize(d)); }
static xsa_cu_result sim_process_get_fds(int pid, const int *f, int n, int *o) { GUARDED(process_get_fds, xsa_driver_process_get_fds(pid, f, n, o)); }

static xsa_driver sim_table = {
    .name = "sim",
    .init = sim_init,
    .device_get_count = sim_device_get_count,
    .device_get_attribute = sim_device_get_attribute,
    .device_total_mem = sim_device_total_mem,
    .device_can_access_peer = sim_device_can_access_peer,
    .mem_get_info = sim_mem_get_info,
    .primary_ctx_retain = sim_primary_ctx_retain,
    .primary_ctx_release = sim_primary_ctx_release,
    .ctx_set_current = sim_ctx_set_current,
    .mem_get_granularity = sim_mem_get_granularity,
    .mem_address_reserve = sim_mem_address_reserve,
    .mem_address_free = sim_mem_address_free,
    .mem_create = sim_mem_create,
    .mem_release = sim_mem_release,
    .mem_map = sim_mem_map,
    .mem_unmap = sim_mem_unmap,
    .mem_set_access = sim_mem_set_access,
    .mem_export_fd = sim_mem_export_fd,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .stream_query = sim_stream_query,
    .stream_synchronize = sim_stream_synchronize,
    .event_create = sim_event_create,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_synchronize = sim_event_synchronize,
    .event_destroy = sim_event_destroy,
    .stream_wait_event = sim_stream_wait_event,
    .mem_import_fd = sim_mem_import_fd,
    .stream_begin_capture = sim_stream_begin_capture,
    .stream_end_capture = sim_stream_end_capture,
    .stream_get_capture_info = sim_stream_get_capture_info,
    .graph_node_get_dependencies = sim_graph_node_get_dependencies,
    .graph_instantiate = sim_graph_instantiate,
    .graph_launch = sim_graph_launch,
    .graph_exec_destroy = sim_graph_exec_destroy,
    .graph_destroy = sim_graph_destroy,
    .thread_exchange_capture_mode = sim_thread_exchange_capture_mode,
    .process_get_fds = sim_process_get_fds,
    .ctx_synchronize = sim_ctx_synchronize,
    .error_string = error_string,
};

xsa_driver *xsa_driver_sim(void) { return &sim_table; }

