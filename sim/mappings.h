/*
 * sim/mappings: the address-space entry points of the simulated driver,
 * each called by the table with the lock held (xsa_driver's fields say
 * what they do).
 */
#ifndef XSA_SIM_MAPPINGS_H
#define XSA_SIM_MAPPINGS_H

#include <stddef.h>

#include "vmm/driver.h"

xsa_cu_result xsa_sim_address_reserve(xsa_devptr *ptr, size_t size, size_t alignment);
xsa_cu_result xsa_sim_address_free(xsa_devptr ptr, size_t size);
xsa_cu_result xsa_sim_map(xsa_devptr ptr, size_t size, size_t offset, xsa_mem_handle handle);
xsa_cu_result xsa_sim_unmap(xsa_devptr ptr, size_t size);
xsa_cu_result xsa_sim_set_access(xsa_devptr ptr, size_t size, const int *devices, int n);
xsa_cu_result xsa_sim_mem_alloc(xsa_devptr *ptr, size_t size, int device);
xsa_cu_result xsa_sim_mem_free(xsa_devptr ptr);

#endif
