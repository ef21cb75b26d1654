/*
 * pool/errors: the sentences the pool's refusals share (at the bottom of
 * the core: every file may call them).
 */
#ifndef XSA_POOL_ERRORS_H
#define XSA_POOL_ERRORS_H

#include <stddef.h>

#include "pool/types.h"
#include "xsalloc/types.h"

/* Writes "<what>(device D, pool (a, b)): <why>" into err: a refused memory
 * pool call's XSA_POOL_INVALID. */
xsa_pool_status xsa_pool_invalid_pool(int device, const char *what, xsa_mempool_id id, const char *why, char *err,
                                      size_t errlen);
/* Writes "device D: out of host memory" into err; XSA_POOL_HOST_OOM. */
xsa_pool_status xsa_pool_host_oom(int device, char *err, size_t errlen);

#endif
