/*
 * pool/ptr_map: address -> allocated block, O(1). Open addressing with
 * linear probing and backward-shift deletion (no tombstones, so lookups stay
 * short under the alloc/free churn of a training loop). Keys are non-zero.
 */
#ifndef XSA_POOL_PTR_MAP_H
#define XSA_POOL_PTR_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct xsa_ptr_map_slot {
    uintptr_t key;
    void *value;
} xsa_ptr_map_slot;

typedef struct xsa_ptr_map {
    xsa_ptr_map_slot *slots;
    size_t mask;  /* capacity - 1; capacity is a power of two */
    size_t count;
} xsa_ptr_map;

bool xsa_ptr_map_init(xsa_ptr_map *m);
void xsa_ptr_map_destroy(xsa_ptr_map *m);
/* Makes room for one more key, so that the next insert cannot fail.
 * Returns false if out of host memory. */
bool xsa_ptr_map_reserve_one(xsa_ptr_map *m);
/* Inserts a new key (must be absent). Returns false if out of host memory. */
bool xsa_ptr_map_insert(xsa_ptr_map *m, uintptr_t key, void *value);
void *xsa_ptr_map_get(const xsa_ptr_map *m, uintptr_t key);
/* Removes and returns the value, or NULL if absent. */
void *xsa_ptr_map_remove(xsa_ptr_map *m, uintptr_t key);

#endif
