/* pool/ptr_map: open-addressing pointer map (design in ptr_map.h). */
#include "pool/ptr_map.h"

#include <stdlib.h>

static size_t slot_of(uintptr_t key, size_t mask) {
    /* Block addresses are 512-aligned: mix the bits before masking. */
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & mask;
}

bool xsa_ptr_map_init(xsa_ptr_map *m) {
    m->mask = 255;
    m->count = 0;
    m->slots = calloc(m->mask + 1, sizeof *m->slots);
    return m->slots != NULL;
}

void xsa_ptr_map_destroy(xsa_ptr_map *m) {
    free(m->slots);
    m->slots = NULL;
    m->count = 0;
}

static void put(xsa_ptr_map_slot *slots, size_t mask, uintptr_t key, void *value) {
    size_t i = slot_of(key, mask);
    while (slots[i].key) i = (i + 1) & mask;
    slots[i].key = key;
    slots[i].value = value;
}

static bool grow(xsa_ptr_map *m) {
    size_t mask = m->mask * 2 + 1;
    xsa_ptr_map_slot *slots = calloc(mask + 1, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].key) put(slots, mask, m->slots[i].key, m->slots[i].value);
    free(m->slots);
    m->slots = slots;
    m->mask = mask;
    return true;
}

bool xsa_ptr_map_reserve_one(xsa_ptr_map *m) {
    /* Keep the load under 1/2 so that probes stay short. */
    return 2 * (m->count + 1) <= m->mask + 1 || grow(m);
}

bool xsa_ptr_map_insert(xsa_ptr_map *m, uintptr_t key, void *value) {
    if (!xsa_ptr_map_reserve_one(m)) return false;
    put(m->slots, m->mask, key, value);
    m->count++;
    return true;
}

void *xsa_ptr_map_get(const xsa_ptr_map *m, uintptr_t key) {
    for (size_t i = slot_of(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key) return m->slots[i].value;
        if (!m->slots[i].key) return NULL;
    }
}

void *xsa_ptr_map_remove(xsa_ptr_map *m, uintptr_t key) {
    size_t i = slot_of(key, m->mask);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key) return NULL;
        i = (i + 1) & m->mask;
    }
    void *value = m->slots[i].value;
    /* Backward shift: move later entries of the probe run into the hole when
     * their home slot does not lie cyclically in (hole, j]. */
    size_t hole = i;
    for (size_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
        size_t home = slot_of(m->slots[j].key, m->mask);
        bool home_in_range = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!home_in_range) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].key = 0;
    m->slots[hole].value = NULL;
    m->count--;
    return value;
}
