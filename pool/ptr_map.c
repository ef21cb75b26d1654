/* pool/ptr_map: open-addressing pointer map (design in ptr_map.h). */
#include "pool/ptr_map.h"

#include <stdlib.h>

#include "pool/block.h"

#define INITIAL_LOG 8

bool xsa_ptr_map_init(xsa_ptr_map *m) {
    m->mask = ((size_t)1 << INITIAL_LOG) - 1;
    m->shift = 64 - INITIAL_LOG;
    m->count = 0;
    m->slots = calloc(m->mask + 1, sizeof *m->slots);
    return m->slots != NULL;
}

void xsa_ptr_map_destroy(xsa_ptr_map *m) {
    free(m->slots);
    m->slots = NULL;
    m->count = 0;
}

bool xsa_ptr_map_grow(xsa_ptr_map *m) {
    xsa_ptr_map bigger = {.mask = m->mask * 2 + 1, .shift = m->shift - 1};
    bigger.slots = calloc(bigger.mask + 1, sizeof *bigger.slots);
    if (!bigger.slots) return false;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].key) xsa_ptr_map_insert_reserved(&bigger, m->slots[i].key, m->slots[i].value);
    free(m->slots);
    *m = bigger;
    return true;
}

bool xsa_ptr_map_reserve(xsa_ptr_map *m, size_t n) {
    while (4 * (m->count + n) > m->mask + 1)
        if (!xsa_ptr_map_grow(m)) return false;
    return true;
}

void *xsa_ptr_map_remove(xsa_ptr_map *m, uintptr_t key) {
    size_t i = xsa_ptr_map_home(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key) return NULL;
        i = (i + 1) & m->mask;
    }
    void *value = m->slots[i].value;
    /* Backward shift: an entry later in the probe run moves into the hole
     * when the hole lies cyclically in [its home, its slot), i.e. it stays
     * reachable from its home there. */
    size_t hole = i;
    for (size_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
        size_t home = xsa_ptr_map_home(m, m->slots[j].key);
        if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].key = 0;
    m->slots[hole].value = NULL;
    m->count--;
    return value;
}

int xsa_ptr_map_check(const xsa_ptr_map *m, char *err, size_t errlen) {
    size_t count = 0;
    for (size_t i = 0; i <= m->mask; i++) {
        uintptr_t key = m->slots[i].key;
        if (!key) continue;
        count++;
        for (size_t j = xsa_ptr_map_home(m, key); j != i; j = (j + 1) & m->mask)
            if (!m->slots[j].key)
                return xsa_check_fail(err, errlen, "pointer map: key %#lx at slot %zu is cut off from its home slot",
                                      (unsigned long)key, i);
    }
    if (count != m->count) return xsa_check_fail(err, errlen, "pointer map: %zu keys, %zu counted", count, m->count);
    return 1;
}
