/*
 * pool/own_allocator: memory pools with an allocator of their own,
 * PyTorch's MemPool flags, and where a classic segment's memory comes from
 * and goes to (design in own_allocator.c).
 */
#ifndef XSA_POOL_OWN_ALLOCATOR_H
#define XSA_POOL_OWN_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* Semantics in include/xsalloc/xsalloc.h (xsa_mempool_create_with_allocator,
 * xsa_mempool_set_use_on_oom and xsa_mempool_set_no_split). */
xsa_pool_status xsa_pool_mempool_create_with(xsa_pool *p, xsa_mempool_id id, const xsa_mempool_allocator *allocator,
                                             char *err, size_t errlen);
xsa_pool_status xsa_pool_mempool_set_use_on_oom(xsa_pool *p, xsa_mempool_id id, bool use_on_oom, char *err,
                                                size_t errlen);
xsa_pool_status xsa_pool_mempool_set_no_split(xsa_pool *p, xsa_mempool_id id, bool no_split, char *err,
                                              size_t errlen);

/* The memory of a classic segment of memory pool mp, of `size` bytes for
 * `stream`: cuMemAlloc, or mp's own allocator (NULL from it is out of
 * memory); and its return (cuMemFree, or the allocator's free, which
 * cannot fail). The thread is in relaxed capture mode for both, as
 * PyTorch makes these calls. */
xsa_cu_result xsa_classic_alloc(xsa_pool *p, xsa_mempool *mp, xsa_stream stream, size_t size, uintptr_t *base);
xsa_cu_result xsa_classic_free(xsa_pool *p, const xsa_seg *s);

#endif
