/*
 * pool/capture: the memory pool calls and graph capture (design in
 * capture.c), and releasing the cache, which a capture holds back.
 */
#ifndef XSA_POOL_CAPTURE_H
#define XSA_POOL_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"
#include "vmm/driver.h"
#include "xsalloc/types.h"

/* Releases every cached block's memory (synchronizing pending events). */
xsa_pool_status xsa_pool_empty_cache(xsa_pool *p, char *err, size_t errlen);

/* Memory pools (semantics in include/xsalloc/xsalloc.h, xsa_mempool_create and on).
 * Id {0, 0} (the global pool) is XSA_POOL_INVALID, and so are releasing
 * a pool that does not exist or is released, routing twice to one pool and
 * ending a routing that does not exist. begin's `capture` says that a
 * graph capture is under way while the routing lasts (no event queries,
 * cross-stream frees deferred, no cache release on a miss); the API sets
 * it for every routing, as PyTorch does, until capture status is read
 * from the driver (cuStreamGetCaptureInfo). end flushes the deferred
 * frees once no capture is left (a driver error leaves them deferred, to
 * be tried again at the next end or empty_cache). */
xsa_pool_status xsa_pool_mempool_create(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);
xsa_pool_status xsa_pool_mempool_release(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);
xsa_pool_status xsa_pool_begin_allocate_to_pool(xsa_pool *p, xsa_mempool_id id, xsa_stream_filter filter, void *ctx,
                                                bool capture, char *err, size_t errlen);
xsa_pool_status xsa_pool_end_allocate_to_pool(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);
/* Is a capture under way on the device? */
bool xsa_pool_capturing(const xsa_pool *p);
/* Does memory pool id exist (released or not)? Its use count in *uses. */
bool xsa_pool_mempool_exists(const xsa_pool *p, xsa_mempool_id id, int *uses);

#endif
