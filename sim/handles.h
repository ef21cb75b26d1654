/*
 * sim/handles: the physical memory handles of the simulated driver: the
 * entry points the table calls with the lock held (xsa_driver's fields say
 * what they do), and what the mappings need of a handle.
 */
#ifndef XSA_SIM_HANDLES_H
#define XSA_SIM_HANDLES_H

#include <stddef.h>
#include <stdint.h>

#include "sim/state.h"

xsa_cu_result xsa_sim_handle_create(xsa_mem_handle *handle, size_t size, int device, int exportable);
xsa_cu_result xsa_sim_handle_release(xsa_mem_handle handle);
xsa_cu_result xsa_sim_handle_export(int *fd, xsa_mem_handle handle);
/* A handle backed by a dup of an exported memfd (an fd this process got
 * from mem_export_fd, here or in another process). */
xsa_cu_result xsa_sim_handle_import(xsa_mem_handle *handle, int fd, int device);

/* The record of a handle value in state `want`, or NULL. */
sim_handle *xsa_sim_handle_lookup(xsa_mem_handle h, slot_state want);
/* Frees the physical memory of the handle in `slot` (released and no
 * longer mapped). */
void xsa_sim_handle_free(uint32_t slot);

#endif
