/* api/ranges: lock-free lookup of reservation ranges (design in ranges.h). */
#include "api/ranges.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct range {
    uintptr_t base, end;
    int device;
} range;

typedef struct table {
    size_t n;
    struct table *retired; /* the copy this one replaced */
    range r[];             /* sorted by base */
} table;

static _Atomic(table *) current;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

static table *copy_with_room(const table *t, size_t n) {
    table *c = malloc(sizeof *c + n * sizeof(range));
    if (!c) return NULL;
    c->n = 0;
    c->retired = (table *)t;
    if (t) {
        memcpy(c->r, t->r, t->n * sizeof(range));
        c->n = t->n;
    }
    return c;
}

int xsa_ranges_add(uintptr_t base, size_t size, int device) {
    pthread_mutex_lock(&write_lock);
    table *t = atomic_load(&current);
    table *c = copy_with_room(t, (t ? t->n : 0) + 1);
    if (c) {
        size_t i = c->n;
        while (i > 0 && c->r[i - 1].base > base) {
            c->r[i] = c->r[i - 1];
            i--;
        }
        c->r[i] = (range){base, base + size, device};
        c->n++;
        atomic_store_explicit(&current, c, memory_order_release);
    }
    pthread_mutex_unlock(&write_lock);
    return c != NULL;
}

void xsa_ranges_remove(uintptr_t base) {
    pthread_mutex_lock(&write_lock);
    table *t = atomic_load(&current);
    table *c = t ? copy_with_room(t, t->n) : NULL;
    if (c) {
        size_t k = 0;
        for (size_t i = 0; i < c->n; i++)
            if (c->r[i].base != base) c->r[k++] = c->r[i];
        c->n = k;
        atomic_store_explicit(&current, c, memory_order_release);
    }
    /* Out of host memory: the range stays listed. Its pointers are then
     * looked up in the wrong place only if cuMemAlloc reuses the freed
     * addresses while host memory is exhausted. */
    pthread_mutex_unlock(&write_lock);
}

int xsa_ranges_find(uintptr_t ptr) {
    const table *t = atomic_load_explicit(&current, memory_order_acquire);
    if (!t) return -1;
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->r[mid].end <= ptr)
            lo = mid + 1;
        else if (t->r[mid].base > ptr)
            hi = mid;
        else
            return t->r[mid].device;
    }
    return -1;
}

void xsa_ranges_clear(void) {
    pthread_mutex_lock(&write_lock);
    table *t = atomic_exchange(&current, NULL);
    while (t) {
        table *older = t->retired;
        free(t);
        t = older;
    }
    pthread_mutex_unlock(&write_lock);
}
