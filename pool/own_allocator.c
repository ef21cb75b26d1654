/*
 * pool/own_allocator: memory pools with an allocator of their own
 * (PyTorch's MemPool(allocator): NCCL's ncclMemAlloc buffers, symmetric
 * memory, registered buffers), PyTorch's two MemPool flags (use_on_oom,
 * no_split), and where a classic segment's memory comes from and goes to.
 * Semantics in include/xsalloc/xsalloc.h (xsa_mempool_create_with_allocator
 * and on).
 *
 * Design: such a pool's segments are classic segments whose memory comes
 * from the pool's alloc and goes back through its free; the pool caches,
 * splits and merges blocks in them as in cuMemAlloc segments. Expandable
 * segments never serve it (the caller's memory cannot be mapped page by
 * page), so page recycling, which moves pages of expandable segments of
 * the global pool only, never touches it, and nothing unmaps it. A
 * classic segment is freed only where release.c frees one: a pool's memory
 * goes back once the pool is released, never while it is in use. The
 * record keeps the caller's context until its last segment went back, and
 * only then calls release(ctx) (mempool.c, as the record goes): a block
 * freed after the caller let go of the allocator still frees through it.
 * use_on_oom is read by the miss path (pool.c), no_split by should_split
 * through each segment's split rule (fixed while the pool holds segments).
 *
 * Core: it calls the driver table, the caller's functions and the memory
 * pool records (mempool.c), nothing above them.
 */
#include "pool/own_allocator.h"

#include <stdio.h>

#include "pool/errors.h"
#include "pool/mempool.h"
#include "pool/state.h"

xsa_cu_result xsa_classic_alloc(xsa_pool *p, xsa_mempool *mp, xsa_stream stream, size_t size, uintptr_t *base) {
    if (!xsa_mempool_owns_allocator(mp)) {
        xsa_devptr ptr = 0;
        xsa_cu_result r = xsa_driver_mem_alloc_relaxed(p->drv, &ptr, size, p->device);
        *base = (uintptr_t)ptr;
        return r;
    }
    const xsa_mempool_allocator *a = &mp->allocator;
    int mode = xsa_driver_relax_capture(p->drv);
    void *ptr = a->alloc(a->ctx, size, p->device, stream);
    xsa_driver_restore_capture(p->drv, mode);
    *base = (uintptr_t)ptr;
    return ptr ? XSA_CU_SUCCESS : XSA_CU_ERROR_OUT_OF_MEMORY;
}

xsa_cu_result xsa_classic_free(xsa_pool *p, const xsa_seg *s) {
    const xsa_mempool_allocator *a = &s->mp->allocator;
    if (!xsa_mempool_owns_allocator(s->mp)) return xsa_driver_mem_free_relaxed(p->drv, s->base);
    int mode = xsa_driver_relax_capture(p->drv);
    a->free(a->ctx, (void *)s->base, s->size, p->device, s->stream);
    xsa_driver_restore_capture(p->drv, mode);
    return XSA_CU_SUCCESS;
}

/* ---- the calls ---- */

xsa_pool_status xsa_pool_mempool_create_with(xsa_pool *p, xsa_mempool_id id, const xsa_mempool_allocator *allocator,
                                             char *err, size_t errlen) {
    const char *what = "xsa_mempool_create_with_allocator";
    if (!id.first && !id.second) return xsa_pool_invalid_pool(p->device, what, id, "(0, 0) is the device's own cache",
        err, errlen);
    if (!allocator || !allocator->alloc || !allocator->free)
        return xsa_pool_invalid_pool(p->device, what, id, "the allocator needs both an alloc and a free function",
                                     err, errlen);
    /* PyTorch asserts the same: the memory of a pool comes from one place. */
    if (xsa_mempool_find(p, id))
        return xsa_pool_invalid_pool(p->device, what, id,
                                     "the pool exists already; its allocator is given when it is created", err,
                      errlen);
    xsa_mempool *mp = xsa_mempool_new(p, id);
    if (!mp) return xsa_pool_host_oom(p->device, err, errlen);
    mp->allocator = *allocator;
    return XSA_POOL_OK;
}

/* Memory pool id if it is private and in use, else NULL with err set. */
static xsa_mempool *pool_in_use(xsa_pool *p, const char *what, xsa_mempool_id id, char *err, size_t errlen) {
    bool private = id.first || id.second;
    xsa_mempool *mp = private ? xsa_mempool_find(p, id) : NULL;
    if (mp && !xsa_mempool_released(mp)) return mp;
    xsa_pool_invalid_pool(p->device, what, id, private ? "no such pool in use" : "(0, 0) is the device's own cache",
                          err, errlen);
    return NULL;
}

xsa_pool_status xsa_pool_mempool_set_use_on_oom(xsa_pool *p, xsa_mempool_id id, bool use_on_oom, char *err,
                                                size_t errlen) {
    xsa_mempool *mp = pool_in_use(p, "xsa_mempool_set_use_on_oom", id, err, errlen);
    if (!mp) return XSA_POOL_INVALID;
    mp->use_on_oom = use_on_oom;
    return XSA_POOL_OK;
}

xsa_pool_status xsa_pool_mempool_set_no_split(xsa_pool *p, xsa_mempool_id id, bool no_split, char *err,
                                              size_t errlen) {
    const char *what = "xsa_mempool_set_no_split";
    xsa_mempool *mp = pool_in_use(p, what, id, err, errlen);
    if (!mp) return XSA_POOL_INVALID;
    /* Its segments' split rules stay right, and no block split before stays. */
    if (mp->segments && mp->no_split != no_split)
        return xsa_pool_invalid_pool(p->device, what, id,
                                     "the pool holds memory already: set no_split before its first allocation", err,
                      errlen);
    mp->no_split = no_split;
    return XSA_POOL_OK;
}
