/*
 * pool/ptr_map: address -> allocated block, O(1). Open addressing with
 * linear probing and backward-shift deletion (no tombstones, so lookups stay
 * short under the alloc/free churn of a training loop). Keys are non-zero.
 *
 * Every malloc and free does a lookup, so lookups and the room check are
 * inline. The home slot is the top bits of key * 2^64/phi (Fibonacci
 * hashing): block addresses are 512-byte aligned and often a power of two
 * apart, and the top bits of the product depend on all the key's bits
 * (lower product bits clustered such keys into long probe runs).
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
    size_t mask;   /* capacity - 1; capacity is a power of two */
    unsigned shift; /* 64 - log2(capacity) */
    size_t count;
} xsa_ptr_map;

bool xsa_ptr_map_init(xsa_ptr_map *m);
void xsa_ptr_map_destroy(xsa_ptr_map *m);
/* Doubles the capacity. Returns false if out of host memory. */
bool xsa_ptr_map_grow(xsa_ptr_map *m);
/* Removes and returns the value, or NULL if absent. */
void *xsa_ptr_map_remove(xsa_ptr_map *m, uintptr_t key);
/* Invariant checker (for tests): every key is found from its home slot
 * before an empty one, and count is right. Returns 0 with err set. */
int xsa_ptr_map_check(const xsa_ptr_map *m, char *err, size_t errlen);

static inline size_t xsa_ptr_map_home(const xsa_ptr_map *m, uintptr_t key) {
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> m->shift);
}

/* Makes room for one more key, so that the next insert cannot fail; the
 * load stays at most 1/4 so that probe runs stay short (at most 64 bytes of
 * slots per live block). Returns false if out of host memory. */
static inline bool xsa_ptr_map_reserve_one(xsa_ptr_map *m) {
    return 4 * (m->count + 1) <= m->mask + 1 || xsa_ptr_map_grow(m);
}

/* Makes room for n more keys at that load (a restore's allocations, made
 * where nothing may fail). Returns false if out of host memory. */
bool xsa_ptr_map_reserve(xsa_ptr_map *m, size_t n);

/* Inserts a new key (must be absent) after reserve_one succeeded. */
static inline void xsa_ptr_map_insert_reserved(xsa_ptr_map *m, uintptr_t key, void *value) {
    size_t i = xsa_ptr_map_home(m, key);
    while (m->slots[i].key) i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].value = value;
    m->count++;
}

static inline void *xsa_ptr_map_get(const xsa_ptr_map *m, uintptr_t key) {
    for (size_t i = xsa_ptr_map_home(m, key);; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key) return m->slots[i].value;
        if (!m->slots[i].key) return NULL;
    }
}

#endif
