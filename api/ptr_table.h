/*
 * api/ptr_table: which device owns a pointer. Sharded by address hash, one
 * lock per shard, so threads working on different devices (or different
 * pointers) do not serialize behind one lock.
 */
#ifndef XSA_API_PTR_TABLE_H
#define XSA_API_PTR_TABLE_H

#include <stdbool.h>
#include <stdint.h>

bool xsa_ptr_table_init(void);
void xsa_ptr_table_destroy(void);
/* Returns false if out of host memory. */
bool xsa_ptr_table_insert(uintptr_t ptr, int device);
/* The owning device, or -1. */
int xsa_ptr_table_lookup(uintptr_t ptr);
/* Removes ptr; returns its device, or -1 if absent. */
int xsa_ptr_table_remove(uintptr_t ptr);

#endif
