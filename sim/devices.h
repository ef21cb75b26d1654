/*
 * sim/devices: the device entry points of the simulated driver (each
 * called by the table with the lock held; xsa_driver's fields say what
 * they do).
 */
#ifndef XSA_SIM_DEVICES_H
#define XSA_SIM_DEVICES_H

#include <stddef.h>

#include "vmm/driver.h"

xsa_cu_result xsa_sim_device_count(int *count);
xsa_cu_result xsa_sim_device_attribute(int *value, int attribute, int device);
xsa_cu_result xsa_sim_device_total_mem(size_t *bytes, int device);
xsa_cu_result xsa_sim_device_can_access_peer(int *can, int device, int peer);
xsa_cu_result xsa_sim_device_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
xsa_cu_result xsa_sim_ctx_retain(void **ctx, int device);
xsa_cu_result xsa_sim_ctx_release(int device);
xsa_cu_result xsa_sim_ctx_set_current(void *ctx);
xsa_cu_result xsa_sim_device_granularity(size_t *granularity, int device, int exportable);

#endif
