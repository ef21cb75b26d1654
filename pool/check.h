/*
 * pool/check: the pool's invariant checker.
 */
#ifndef XSA_POOL_CHECK_H
#define XSA_POOL_CHECK_H

#include <stddef.h>

#include "pool/types.h"

/* Invariant checker: blocks tile every segment, the free sets hold exactly
 * the free mapped blocks, the pointer map holds exactly the allocated ones,
 * stats equal a recount, segment pages agree with block mapping. Returns 1,
 * or 0 with the first disagreement in err. */
int xsa_pool_check(const xsa_pool *p, char *err, size_t errlen);

#endif
