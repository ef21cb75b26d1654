/*
 * pool/expand: growing an expandable segment for a request (design in
 * expand.c).
 */
#ifndef XSA_POOL_EXPAND_H
#define XSA_POOL_EXPAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* A miss of `size` bytes in memory pool mp: maps pages into the expandable
 * segment of (mp, kind, stream), made if there is none; *out is the block
 * they make, merged with its free neighbours. */
xsa_pool_status xsa_expand_alloc(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size,
                                 xsa_block **out, char *err, size_t errlen);

#endif
