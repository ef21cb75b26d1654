/* pool/info: read-only queries and the memory fraction. */
#include "pool/info.h"

#include "pool/block.h"
#include "pool/free_set.h"
#include "pool/ptr_map.h"
#include "pool/state.h"

void xsa_pool_cache_info(xsa_pool *p, size_t *cached_free, size_t *largest) {
    size_t total = 0, big = 0;
    for (int k = 0; k < XSA_POOL_KINDS; k++) {
        /* The global memory pool's, as PyTorch's cacheInfo. */
        const xsa_free_set *set = &p->global.free[k];
        total += set->bytes;
        for (xsa_block *b = xsa_free_set_first(set); b; b = xsa_free_set_next(set, b))
            if (b->size > big) big = b->size;
    }
    if (cached_free) *cached_free = total;
    if (largest) *largest = big;
}

xsa_pool_status xsa_pool_base_allocation(xsa_pool *p, void *ptr, void **base, size_t *size) {
    xsa_block *b = xsa_ptr_map_get(&p->allocated, (uintptr_t)ptr);
    if (!b) return XSA_POOL_BAD_POINTER;
    /* The mapped run around the block: the whole segment when classic. */
    xsa_block *lo = b, *hi = b;
    while (lo->prev && xsa_block_holds_memory(lo->prev)) lo = lo->prev;
    while (hi->next && xsa_block_holds_memory(hi->next)) hi = hi->next;
    *base = (void *)lo->ptr;
    *size = hi->ptr + hi->size - lo->ptr;
    return XSA_POOL_OK;
}

double xsa_pool_memory_fraction(const xsa_pool *p) { return p->opt.memory_fraction; }

void xsa_pool_set_memory_fraction(xsa_pool *p, double fraction) {
    p->opt.memory_fraction = fraction;
    p->allowed_max = (size_t)(fraction * (double)p->device_total);
}
