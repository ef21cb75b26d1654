/*
 * pool/checkpoint: a memory pool's live blocks, and the pool brought back
 * to such a set (design in checkpoint.c).
 */
#ifndef XSA_POOL_CHECKPOINT_H
#define XSA_POOL_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"
#include "vmm/driver.h"
#include "xsalloc/types.h"

/* Checkpoints (semantics in include/xsalloc/xsalloc.h,
 * xsa_mempool_checkpoint and xsa_mempool_restore): the live blocks of
 * memory pool id (*out malloc'd, NULL when *n is 0), and bringing the pool
 * back to such a set, all or nothing (*delta's arrays malloc'd). */
xsa_pool_status xsa_pool_mempool_checkpoint(xsa_pool *p, xsa_mempool_id id, xsa_live_block **out, size_t *n,
                                            char *err, size_t errlen);
xsa_pool_status xsa_pool_mempool_restore(xsa_pool *p, xsa_mempool_id id, const xsa_live_block *live, size_t n,
                                         xsa_restore_delta *delta, char *err, size_t errlen);

#endif
