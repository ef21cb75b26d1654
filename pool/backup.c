/*
 * pool/backup: host copies of a memory pool's live blocks (design of the
 * pause in pool/pause.c).
 *
 * Only allocated blocks are copied, their requested bytes (what the caller
 * asked for: a tensor's storage), never the free cache. The copies run on
 * one non-blocking copy stream per device, DtoH and HtoD: the copy engine
 * reaches a pinned copy's bandwidth on one stream. Neighbouring blocks get
 * copies at the same distance in host memory as on the device, so that a
 * run of them is one call (the bytes between are the blocks' own: the
 * rounding of their requests); per-block calls for a model's hundreds of
 * small tensors cost more than their bytes (measured on the H200: 17-21
 * GiB/s against 49.5 for one pinned copy_ of the same tensors). Host memory is taken in arenas of at least ARENA_BYTES, in the
 * blocks' address order, and each arena's copies are queued as soon as it
 * exists, so that pinning the next arena (cuMemHostAlloc and
 * cuMemHostRegister touch every host page, the slow part of a first backup)
 * overlaps the copies into the ones before. An arena is pinned
 * (cuMemHostAlloc) or, for XSA_TAG_BACKUP_MMAP, anonymous mmap'd memory
 * registered with the driver, which munmap gives back to the system at
 * once. A copy kept after resume (retention) is refreshed in place by the
 * block's next backup, at the same host address. An arena goes back with
 * its last copy.
 */
#include "pool/backup.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/errors.h"
#include "pool/state.h"

#define ARENA_BYTES ((size_t)256 << 20)
#define HOST_PAGE ((size_t)4096)

static xsa_pool_status driver_error(xsa_pool *p, const char *call, xsa_cu_result r, char *err, size_t errlen) {
    xsa_pool_driver_error(p, call, r, err, errlen);
    return r == XSA_CU_ERROR_OUT_OF_MEMORY ? XSA_POOL_HOST_OOM : XSA_POOL_DRIVER_ERROR;
}

/* Gives an arena's memory back; a refusal leaves it to a later try. In
 * relaxed capture mode: a block with a kept copy may be freed while
 * another thread captures in global mode, which cuMemFreeHost would
 * invalidate. */
static xsa_cu_result free_arena_memory(xsa_pool *p, xsa_arena *a) {
    int mode = xsa_driver_relax_capture(p->drv);
    xsa_cu_result r = a->mmapped ? XSA_DRV(p->drv, mem_host_unregister, a->base) : XSA_DRV(p->drv, mem_free_host, a->base);
    xsa_driver_restore_capture(p->drv, mode);
    if (r == XSA_CU_SUCCESS && a->mmapped) munmap(a->base, a->size);
    return r;
}

/* A new arena of at least `size` bytes, listed; NULL with err set. */
static xsa_arena *new_arena(xsa_pool *p, size_t size, bool mmapped, char *err, size_t errlen) {
    xsa_arena *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "device %d: out of host memory for a backup's record", p->device);
        return NULL;
    }
    a->size = (size + HOST_PAGE - 1) / HOST_PAGE * HOST_PAGE;
    a->mmapped = mmapped;
    xsa_cu_result r;
    const char *call;
    if (mmapped) {
        call = "cuMemHostRegister";
        void *m = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        r = m == MAP_FAILED ? XSA_CU_ERROR_OUT_OF_MEMORY : XSA_DRV(p->drv, mem_host_register, m, a->size);
        if (m != MAP_FAILED && r != XSA_CU_SUCCESS) munmap(m, a->size);
        if (r == XSA_CU_SUCCESS) a->base = m;
        if (m == MAP_FAILED) call = "mmap";
    } else {
        call = "cuMemHostAlloc";
        r = XSA_DRV(p->drv, mem_host_alloc, &a->base, a->size);
    }
    if (r != XSA_CU_SUCCESS) {
        free(a);
        char why[256];
        xsa_pool_driver_error(p, call, r, why, sizeof why);
        snprintf(err, errlen, "%s (backing up %zu bytes to host memory)", why, size);
        return NULL;
    }
    a->next = p->arenas;
    p->arenas = a;
    return a;
}

/* An arena with no copy left goes; one whose memory the driver refused
 * to free stays listed, empty, until a later try (retry_empty) succeeds. */
static void drop_arena(xsa_pool *p, xsa_arena *a) {
    if (free_arena_memory(p, a) != XSA_CU_SUCCESS) return;
    for (xsa_arena **at = &p->arenas; *at; at = &(*at)->next)
        if (*at == a) {
            *at = a->next;
            break;
        }
    free(a);
}

static void retry_empty(xsa_pool *p) {
    for (xsa_arena *a = p->arenas, *next; a; a = next) {
        next = a->next;
        if (a->copies == 0) drop_arena(p, a);
    }
}

void xsa_backup_drop(xsa_pool *p, xsa_block *b) {
    xsa_backup *k = b->backup;
    if (!k) return;
    b->backup = NULL;
    if (--k->arena->copies == 0) drop_arena(p, k->arena);
    free(k);
}

/* Loops over the allocated blocks b of mp's segments, in address order
 * within each segment. */
#define FOR_ALLOCATED(p, mp, b)                                                     \
    for (xsa_seg *s_ = (p)->segments; s_; s_ = s_->next_seg)                          \
        if (s_->mp == (mp))                                                          \
            for (xsa_block *b = s_->first; b; b = b->next)                            \
                if (b->allocated)

void xsa_backup_drop_all(xsa_pool *p, xsa_mempool *mp) {
    FOR_ALLOCATED(p, mp, b) xsa_backup_drop(p, b);
}

static xsa_cu_result ensure_copy_stream(xsa_pool *p) {
    if (p->copy_stream) return XSA_CU_SUCCESS;
    return XSA_DRV(p->drv, stream_create, &p->copy_stream, p->device);
}

static void *host_of(const xsa_backup *k) { return (char *)k->arena->base + k->offset; }

/* Blocks a and b (b right after a in their segment) whose copies lie as far
 * apart in one arena as the blocks on the device: one copy serves both
 * (with a's few bytes past its request, which are a's too). */
static bool joined(const xsa_block *a, const xsa_block *b) {
    const xsa_backup *x = a->backup, *y = b->backup;
    return a->next == b && x && y && x->arena == y->arena && y->offset >= x->offset &&
           y->offset - x->offset == b->ptr - a->ptr;
}

/* Queues the copies of blocks[0, n) (each has a backup), to host memory or
 * back, one call per run of joined blocks: a model's tensors are mostly
 * neighbours, and one call per tensor would cost more than the bytes. */
static xsa_cu_result copy_runs(xsa_pool *p, xsa_block *const *blocks, size_t n, bool to_host, const char **call) {
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && joined(blocks[j], blocks[j + 1])) j++;
        const xsa_block *first = blocks[i], *last = blocks[j];
        size_t bytes = last->ptr + last->requested - first->ptr;
        xsa_cu_result r =
            to_host ? XSA_DRV(p->drv, memcpy_dtoh_async, host_of(first->backup), first->ptr, bytes, p->copy_stream)
                    : XSA_DRV(p->drv, memcpy_htod_async, first->ptr, host_of(first->backup), bytes, p->copy_stream);
        if (r != XSA_CU_SUCCESS) {
            *call = to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync";
            return r;
        }
        i = j + 1;
    }
    return XSA_CU_SUCCESS;
}

/* The blocks of a take: those that keep a copy from before, and those
 * that get a new one. */
typedef struct taking {
    xsa_block **kept, **fresh;
    size_t n_kept, n_fresh, given; /* fresh[0, given) have their copy by now */
} taking;

/* Undo of a failed take: the copies in flight finish first (their host
 * memory is about to go), then the new copies are dropped. */
static void undo_take(xsa_pool *p, const taking *t) {
    XSA_DRV(p->drv, stream_synchronize, p->copy_stream);
    for (size_t i = 0; i < t->given; i++) xsa_backup_drop(p, t->fresh[i]);
}

/* Where fresh block i's copy goes in an arena whose first copy is fresh
 * block `from`'s: a neighbour of the one before at the same distance as
 * on the device, else at the next 64 bytes. */
static size_t offset_after(const taking *t, size_t from, size_t i, size_t prev_offset) {
    if (i == from) return 0;
    const xsa_block *prev = t->fresh[i - 1], *b = t->fresh[i];
    if (prev->next == b) return prev_offset + (b->ptr - prev->ptr);
    return (prev_offset + prev->requested + 63) / 64 * 64;
}

/* Gives fresh[from, to) copies in one new arena of `bytes` and queues them. */
static xsa_pool_status fill_arena(xsa_pool *p, taking *t, size_t from, size_t to, size_t bytes, bool mmapped,
                                  char *err, size_t errlen) {
    xsa_arena *a = new_arena(p, bytes, mmapped, err, errlen);
    if (!a) return XSA_POOL_HOST_OOM;
    size_t offset = 0;
    for (size_t i = from; i < to; i++) {
        offset = offset_after(t, from, i, offset);
        xsa_backup *k = malloc(sizeof *k);
        if (!k) {
            if (a->copies == 0) drop_arena(p, a);
            return xsa_pool_host_oom(p->device, err, errlen);
        }
        *k = (xsa_backup){a, offset, t->fresh[i]->requested};
        a->copies++;
        t->fresh[i]->backup = k;
        t->given = i + 1;
    }
    const char *call = "";
    xsa_cu_result r = copy_runs(p, t->fresh + from, to - from, true, &call);
    return r == XSA_CU_SUCCESS ? XSA_POOL_OK : driver_error(p, call, r, err, errlen);
}

/* Queues every copy of t: the kept ones first, in place; then the new ones
 * arena by arena, each arena's as soon as it exists, so that pinning the
 * next one overlaps them. */
static xsa_pool_status queue_copies(xsa_pool *p, taking *t, bool mmapped, char *err, size_t errlen) {
    const char *call = "";
    xsa_cu_result r = copy_runs(p, t->kept, t->n_kept, true, &call);
    if (r != XSA_CU_SUCCESS) return driver_error(p, call, r, err, errlen);
    for (size_t from = 0, i = 0, offset = 0; i < t->n_fresh; i++) {
        offset = offset_after(t, from, i, offset);
        size_t bytes = offset + t->fresh[i]->requested;
        if (bytes < ARENA_BYTES && i + 1 < t->n_fresh) continue;
        xsa_pool_status st = fill_arena(p, t, from, i + 1, bytes, mmapped, err, errlen);
        if (st != XSA_POOL_OK) return st;
        from = i + 1;
    }
    return XSA_POOL_OK;
}

xsa_pool_status xsa_backup_take(xsa_pool *p, xsa_mempool *mp, bool mmapped, char *err, size_t errlen) {
    retry_empty(p);
    taking t = {0};
    size_t n = 0;
    FOR_ALLOCATED(p, mp, b) n++;
    if (n == 0) return XSA_POOL_OK;
    xsa_cu_result r = ensure_copy_stream(p);
    if (r != XSA_CU_SUCCESS) return driver_error(p, "cuStreamCreate (the copy stream)", r, err, errlen);
    t.kept = malloc(n * sizeof *t.kept);
    t.fresh = malloc(n * sizeof *t.fresh);
    if (!t.kept || !t.fresh) {
        free(t.kept);
        free(t.fresh);
        return xsa_pool_host_oom(p->device, err, errlen);
    }
    FOR_ALLOCATED(p, mp, b) {
        if (b->backup)
            t.kept[t.n_kept++] = b;
        else
            t.fresh[t.n_fresh++] = b;
    }
    xsa_pool_status st = queue_copies(p, &t, mmapped, err, errlen);
    if (st == XSA_POOL_OK && (r = XSA_DRV(p->drv, stream_synchronize, p->copy_stream)) != XSA_CU_SUCCESS)
        st = driver_error(p, "cuStreamSynchronize (the copy stream)", r, err, errlen);
    if (st != XSA_POOL_OK) undo_take(p, &t);
    free(t.kept);
    free(t.fresh);
    return st;
}

xsa_pool_status xsa_backup_restore(xsa_pool *p, xsa_mempool *mp, char *err, size_t errlen) {
    size_t n = 0;
    FOR_ALLOCATED(p, mp, b) n += b->backup != NULL;
    if (n == 0) return XSA_POOL_OK;
    xsa_block **blocks = malloc(n * sizeof *blocks);
    if (!blocks) return xsa_pool_host_oom(p->device, err, errlen);
    n = 0;
    FOR_ALLOCATED(p, mp, b) if (b->backup) blocks[n++] = b;
    const char *call = "";
    xsa_cu_result r = copy_runs(p, blocks, n, false, &call);
    free(blocks);
    if (r == XSA_CU_SUCCESS) {
        call = "cuStreamSynchronize (the copy stream)";
        r = XSA_DRV(p->drv, stream_synchronize, p->copy_stream);
    } else {
        XSA_DRV(p->drv, stream_synchronize, p->copy_stream);
    }
    return r == XSA_CU_SUCCESS ? XSA_POOL_OK : driver_error(p, call, r, err, errlen);
}

xsa_pool_status xsa_backup_find(const xsa_pool *p, const xsa_block *b, uintptr_t ptr, size_t size, void **host,
                                char *err, size_t errlen) {
    *host = NULL;
    if (!b->backup) return XSA_POOL_OK;
    size_t at = ptr - b->ptr;
    if (at > b->backup->size || size > b->backup->size - at) {
        snprintf(err, errlen,
                 "device %d: [%#lx, +%zu) passes the end of the backup of the allocation at %#lx (%zu bytes)",
                 p->device, (unsigned long)ptr, size, (unsigned long)b->ptr, b->backup->size);
        return XSA_POOL_INVALID;
    }
    *host = (char *)host_of(b->backup) + at;
    return XSA_POOL_OK;
}

void xsa_backup_destroy(xsa_pool *p) {
    if (p->copy_stream) {
        XSA_DRV(p->drv, stream_synchronize, p->copy_stream);
        XSA_DRV(p->drv, stream_destroy, p->copy_stream);
        p->copy_stream = NULL;
    }
    for (xsa_seg *s = p->segments; s; s = s->next_seg)
        for (xsa_block *b = s->first; b; b = b->next)
            if (b->backup) {
                free(b->backup);
                b->backup = NULL;
            }
    while (p->arenas) {
        xsa_arena *a = p->arenas;
        p->arenas = a->next;
        free_arena_memory(p, a); /* refused at teardown too: the memory leaks, as a failed cuMemRelease's would */
        free(a);
    }
}

int xsa_backup_check(const xsa_pool *p, char *err, size_t errlen) {
    for (const xsa_arena *a = p->arenas; a; a = a->next) {
        int copies = 0;
        for (const xsa_seg *s = p->segments; s; s = s->next_seg)
            for (const xsa_block *b = s->first; b; b = b->next) copies += b->backup && b->backup->arena == a;
        if (copies != a->copies)
            return xsa_check_fail(err, errlen, "backup arena %p: %d copies counted, %d found", a->base, a->copies,
                                  copies);
    }
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        for (const xsa_block *b = s->first; b; b = b->next) {
            const xsa_backup *k = b->backup;
            if (!k) continue;
            bool listed = false;
            for (const xsa_arena *a = p->arenas; a; a = a->next) listed |= a == k->arena;
            if (!listed || !b->allocated || k->size != b->requested || k->offset > k->arena->size ||
                k->size > k->arena->size - k->offset)
                return xsa_check_fail(err, errlen,
                                      "block %#lx: its backup is in no arena, outside it, of another size than "
                                      "requested, or the block is not allocated",
                                      (unsigned long)b->ptr);
        }
    return 1;
}
