/*
 * pool/info: what the cache holds, the allocation unit around a pointer,
 * and the memory fraction.
 */
#ifndef XSA_POOL_INFO_H
#define XSA_POOL_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"

void xsa_pool_cache_info(xsa_pool *p, size_t *cached_free, size_t *largest);
/* Base and size of the allocation unit holding ptr: a cuMemAlloc segment, or
 * the mapped run of an expandable segment around ptr. */
xsa_pool_status xsa_pool_base_allocation(xsa_pool *p, void *ptr, void **base, size_t *size);
void xsa_pool_set_memory_fraction(xsa_pool *p, double fraction);
double xsa_pool_memory_fraction(const xsa_pool *p);

#endif
