/*
 * pool/peer: peer access to a device's expandable segments.
 *
 * The pool keeps the list of devices granted access. Granting one applies
 * cuMemSetAccess to every mapped run of every expandable segment and adds
 * the peer to each segment's access list, so the runs mapped later (growth,
 * recycled pages) get it with the device itself; new segments start with the
 * whole list. Classic cuMemAlloc segments would need cuCtxEnablePeerAccess,
 * which is a context-wide switch outside the allocator's driver table: they
 * are refused, with a sentence saying so.
 */
#include "pool/peer.h"

#include <stdio.h>

#include "pool/core.h"
#include "pool/state.h"

static bool granted(const xsa_pool *p, int peer) {
    for (int i = 0; i < p->n_peers; i++)
        if (p->peers[i] == peer) return true;
    return false;
}

xsa_pool_status xsa_pool_enable_peer(xsa_pool *p, int peer, char *err, size_t errlen) {
    if (peer == p->device || granted(p, peer)) return XSA_POOL_OK;
    if (!p->expandable) {
        snprintf(err, errlen,
                 "peer access from device %d to device %d: device %d uses classic cuMemAlloc segments "
                 "(expandable_segments:False, or no virtual memory management); xsalloc grants peer access on "
                 "expandable segments only (use cuCtxEnablePeerAccess for classic memory)",
                 peer, p->device, p->device);
        return XSA_POOL_UNSUPPORTED;
    }
    int can = 0;
    xsa_cu_result r = XSA_DRV(p->drv, device_can_access_peer, &can, peer, p->device);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuDeviceCanAccessPeer", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    if (!can) {
        snprintf(err, errlen,
                 "peer access from device %d to device %d is not possible: cuDeviceCanAccessPeer says device %d "
                 "cannot access the memory of device %d",
                 peer, p->device, peer, p->device);
        return XSA_POOL_UNSUPPORTED;
    }
    if (p->n_peers == XSA_SEGMENT_MAX_ACCESS - 1) {
        snprintf(err, errlen, "peer access from device %d to device %d: device %d already has %d peers, the most it can have",
                 peer, p->device, p->device, p->n_peers);
        return XSA_POOL_INVALID;
    }
    for (xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (!s->expandable) continue;
        r = xsa_segment_add_access(&s->vm, peer);
        if (r != XSA_CU_SUCCESS) {
            char call[64];
            snprintf(call, sizeof call, "cuMemSetAccess granting device %d", peer);
            xsa_pool_driver_error(p, call, r, err, errlen);
            return XSA_POOL_DRIVER_ERROR;
        }
    }
    p->peers[p->n_peers++] = peer;
    return XSA_POOL_OK;
}

int xsa_pool_peers(const xsa_pool *p, int *peers) {
    for (int i = 0; i < p->n_peers; i++) peers[i] = p->peers[i];
    return p->n_peers;
}

xsa_pool_status xsa_peer_enable_all(xsa_pool *p, char *err, size_t errlen) {
    int count = 0;
    xsa_cu_result r = XSA_DRV(p->drv, device_get_count, &count);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuDeviceGetCount", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    for (int d = 0; d < count; d++) {
        int can = 0;
        if (d == p->device) continue;
        r = XSA_DRV(p->drv, device_can_access_peer, &can, d, p->device);
        if (r != XSA_CU_SUCCESS) {
            xsa_pool_driver_error(p, "cuDeviceCanAccessPeer", r, err, errlen);
            return XSA_POOL_DRIVER_ERROR;
        }
        if (!can) continue;
        xsa_pool_status st = xsa_pool_enable_peer(p, d, err, errlen);
        if (st != XSA_POOL_OK) return st;
    }
    return XSA_POOL_OK;
}
