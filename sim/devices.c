/*
 * sim/devices: the simulated devices as the driver describes them: count,
 * attributes, memory, peers, primary contexts and granularity, read from
 * the configuration.
 *
 * Design: a device's primary context is the address of one byte of
 * fake_ctx, so that a context the driver did not hand out is refused.
 */
#include "sim/devices.h"

#include "sim/state.h"

static char fake_ctx[XSA_SIM_MAX_DEVICES];

xsa_cu_result xsa_sim_device_count(int *count) {
    if (!count) return XSA_CU_ERROR_INVALID_VALUE;
    *count = S.cfg.devices;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_device_attribute(int *value, int attribute, int device) {
    if (!value) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    if (attribute == XSA_ATTR_VMM_SUPPORTED) *value = S.cfg.vmm_supported;
    else if (attribute == XSA_ATTR_POSIX_FD_SUPPORTED) *value = S.cfg.fd_handles_supported;
    else return XSA_CU_ERROR_INVALID_VALUE;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_device_total_mem(size_t *bytes, int device) {
    if (!bytes) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *bytes = S.cfg.capacity;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_device_can_access_peer(int *can, int device, int peer) {
    if (!can) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device) || !xsa_sim_device_ok(peer)) return XSA_CU_ERROR_INVALID_DEVICE;
    *can = device != peer && S.cfg.peer[device][peer];
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_device_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    if (!free_bytes || !total_bytes) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *free_bytes = S.cfg.capacity - S.dev[device].used;
    *total_bytes = S.cfg.capacity;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_ctx_retain(void **ctx, int device) {
    if (!ctx) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *ctx = &fake_ctx[device];
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_ctx_release(int device) {
    return xsa_sim_device_ok(device) ? XSA_CU_SUCCESS : XSA_CU_ERROR_INVALID_DEVICE;
}

xsa_cu_result xsa_sim_ctx_set_current(void *ctx) {
    if (!ctx) return XSA_CU_SUCCESS;
    uintptr_t c = (uintptr_t)ctx, first = (uintptr_t)fake_ctx;
    bool ours = c >= first && c < first + (uintptr_t)S.cfg.devices;
    return ours ? XSA_CU_SUCCESS : XSA_CU_ERROR_INVALID_CONTEXT;
}

xsa_cu_result xsa_sim_device_granularity(size_t *granularity, int device, int exportable) {
    (void)exportable;
    if (!granularity) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    *granularity = S.cfg.granularity;
    return XSA_CU_SUCCESS;
}
