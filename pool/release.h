/*
 * pool/release: giving memory back to the device (design in release.c).
 */
#ifndef XSA_POOL_RELEASE_H
#define XSA_POOL_RELEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

xsa_pool_status xsa_release_cached(xsa_pool *p, char *err, size_t errlen);
bool xsa_release_available(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size);
/* Released memory pool mp gives its free memory back, and its record once
 * it has no segment (not while a capture is under way). */
xsa_pool_status xsa_release_mempool(xsa_pool *p, xsa_mempool *mp, char *err, size_t errlen);
void xsa_garbage_collect(xsa_pool *p);
/* Frees free unsplit classic block b's segment; on a driver error nothing changes. */
xsa_cu_result xsa_release_classic_block(xsa_pool *p, xsa_block *b);

#endif
