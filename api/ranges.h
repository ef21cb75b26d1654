/*
 * api/ranges: which device owns an address inside an expandable segment's
 * reservation, found without a lock. Reservations are few and change
 * rarely, so readers search an immutable sorted array published through an
 * atomic pointer; writers (under a mutex) publish a new copy. Replaced
 * copies are kept until xsa_ranges_clear, since a reader may still be
 * searching one. Pointers in these ranges need no pointer-table entry.
 */
#ifndef XSA_API_RANGES_H
#define XSA_API_RANGES_H

#include <stddef.h>
#include <stdint.h>

/* Returns 0 if out of host memory. */
int xsa_ranges_add(uintptr_t base, size_t size, int device);
void xsa_ranges_remove(uintptr_t base);
/* The device whose reservation holds ptr, or -1. */
int xsa_ranges_find(uintptr_t ptr);
/* Forgets every range and frees every copy (no reader may be running). */
void xsa_ranges_clear(void);

#endif
