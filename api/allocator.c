/*
 * api/allocator: the public C API over one pool per device (api/devices.h
 * holds the device table, start-up and the locks).
 *
 * Design: each call checks its device, takes the device's lock (or finds
 * the pointer's pool), calls the pool and turns its status into the API's.
 * A pointer's pool (lock_owner): with one device, that device's; else the
 * reservation ranges (expandable segments, a lock-free search) name it, or
 * each pool is asked under its lock, the thread's current device first.
 * So no table is kept beside the pools' own maps on every malloc and free.
 * xsa_shutdown must not run concurrently with other calls.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/devices.h"
#include "api/errors.h"
#include "api/helper.h"
#include "api/ipc.h"
#include "api/ipc_share.h"
#include "api/lag_probe.h"
#include "api/observe.h"
#include "api/pause.h"
#include "api/ranges.h"
#include "pool/capture.h"
#include "pool/check.h"
#include "pool/checkpoint.h"
#include "pool/info.h"
#include "pool/own_allocator.h"
#include "pool/ipc.h"
#include "pool/peer.h"
#include "pool/pool.h"
#include "pool/stats.h"
#include "vmm/share.h"
#include "xsalloc/sim.h"

static _Thread_local int current_device;

xsa_status xsa_shutdown(void) {
    xsa_devices_phase phase = xsa_devices_hold_startup();
    xsa_helper_stop(); /* it works on the pools; settings can wake it before they start */
    if (phase == XSA_DEVICES_STARTED) {
        xsa_lag_probe_stop();
        xsa_ipc_close_all();
    }
    if (phase != XSA_DEVICES_OFF) {
        xsa_devices_stop();
        xsa_observe_shutdown();
    }
    xsa_devices_release_startup();
    return xsa_ok();
}

xsa_status xsa_set_device(int device) {
    xsa_status st = xsa_api_check_device("xsa_set_device", device);
    if (st != XSA_SUCCESS) return st;
    current_device = device;
    return xsa_ok();
}

xsa_status xsa_get_device(int *device) {
    if (!device) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_device: device is NULL");
    *device = current_device;
    return xsa_ok();
}

xsa_status xsa_malloc(void **ptr, size_t size, int device, void *stream) {
    if (!ptr) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_malloc: ptr is NULL");
    *ptr = NULL;
    xsa_status st = xsa_api_check_device("xsa_malloc", device);
    if (st != XSA_SUCCESS) return st;
    if (size == 0) return xsa_ok();
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_malloc", device, &p)) != XSA_SUCCESS) return st;
    void *out = NULL;
    /* A thread inside a tag region allocates in its memory pool (api/pause.h). */
    xsa_pool_status ps = __builtin_expect(atomic_load_explicit(&xsa_regions_open, memory_order_relaxed) == 0, 1)
                             ? xsa_pool_malloc(p, size, stream, &out, xsa_error_buffer(), XSA_ERROR_MAX)
                             : xsa_region_malloc(p, size, stream, &out, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    if (ps != XSA_POOL_OK) return xsa_api_status(ps);
    *ptr = out;
    return xsa_ok();
}

xsa_status xsa_malloc_current(void **ptr, size_t size, void *stream) {
    return xsa_malloc(ptr, size, current_device, stream);
}

/* Locks device d and returns XSA_SUCCESS with its pool, if it has one
 * and, when must_own, that pool holds ptr; otherwise leaves it unlocked
 * and returns XSA_ERROR_INVALID_POINTER, or the re-entry's error (from a
 * callback of this thread under d's lock). */
static inline xsa_status lock_if_answers(const char *fn, int d, void *ptr, bool must_own, int *device,
                                         xsa_pool **pool) {
    xsa_device_slot *s = xsa_api_slot(d);
    if (!xsa_device_lock_acquire(&s->lock)) return XSA_API_REENTERED(fn, d);
    if (s->pool && (!must_own || xsa_pool_owns(s->pool, ptr))) {
        *device = d;
        *pool = s->pool;
        return XSA_SUCCESS;
    }
    xsa_device_lock_release(&s->lock);
    return XSA_ERROR_INVALID_POINTER;
}

/* Finds the pool that answers for ptr and returns it with its device's
 * lock held, or fails naming fn (nothing held). With one device that is
 * its pool, which reports a pointer it does not hold; otherwise pointers in
 * expandable reservations are found by range, others by asking each pool,
 * the current device's first. */
static xsa_status lock_owner(const char *fn, void *ptr, int *device, xsa_pool **pool) {
    xsa_status st = xsa_api_ensure_init();
    if (st != XSA_SUCCESS) return st;
    int d = xsa_devices.devices == 1 ? 0 : ptr ? xsa_ranges_find((uintptr_t)ptr) : -1;
    if (d >= 0) {
        if ((st = lock_if_answers(fn, d, ptr, false, device, pool)) != XSA_ERROR_INVALID_POINTER) return st;
    } else {
        d = current_device;
        for (int i = 0; ptr && i < xsa_devices.devices; i++, d = d + 1 < xsa_devices.devices ? d + 1 : 0)
            if ((st = lock_if_answers(fn, d, ptr, true, device, pool)) != XSA_ERROR_INVALID_POINTER) return st;
    }
    return xsa_fail(XSA_ERROR_INVALID_POINTER,
                    "%s(%p): not a live allocation of xsalloc (unknown, interior or already freed pointer)", fn, ptr);
}

xsa_status xsa_free(void *ptr) {
    if (!ptr) return xsa_ok();
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_free", ptr, &device, &p);
    if (st == XSA_ERROR_NO_DRIVER && xsa_devices_forked()) return xsa_ok(); /* the parent's memory: not ours */
    if (st != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_free(p, ptr, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_record_stream(void *ptr, void *stream) {
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_record_stream", ptr, &device, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_record_stream(p, ptr, stream, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_get_base_allocation(void *ptr, void **base, size_t *size) {
    if (!base || !size) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_base_allocation: base or size is NULL");
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_get_base_allocation", ptr, &device, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_base_allocation(p, ptr, base, size);
    xsa_api_unlock(device);
    if (ps != XSA_POOL_OK) return xsa_fail(xsa_api_status(ps), "xsa_get_base_allocation(%p): not a live allocation", ptr);
    return xsa_ok();
}

xsa_status xsa_empty_cache(void) {
    xsa_status st = xsa_api_ensure_init();
    if (st != XSA_SUCCESS) return st;
    for (int d = 0; d < xsa_devices.devices; d++) {
        xsa_device_slot *s = xsa_api_slot(d);
        if (!xsa_device_lock_acquire(&s->lock)) return xsa_api_reentered("xsa_empty_cache", d);
        xsa_pool_status ps = s->pool ? xsa_pool_empty_cache(s->pool, xsa_error_buffer(), XSA_ERROR_MAX) : XSA_POOL_OK;
        xsa_device_lock_release(&s->lock);
        if (ps != XSA_POOL_OK) return xsa_api_status(ps);
    }
    return xsa_ok();
}

xsa_status xsa_cache_info(int device, size_t *cached_free, size_t *largest) {
    xsa_status st = xsa_api_check_device("xsa_cache_info", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    bool held;
    if ((st = xsa_api_lock_pool_to_read("xsa_cache_info", device, &p, &held)) != XSA_SUCCESS) return st;
    xsa_pool_cache_info(p, cached_free, largest);
    if (held) xsa_api_unlock(device);
    return xsa_ok();
}

xsa_status xsa_set_memory_fraction(double fraction, int device) {
    xsa_status st = xsa_api_check_device("xsa_set_memory_fraction", device);
    if (st != XSA_SUCCESS) return st;
    /* PyTorch's range: 0 leaves no room for new device memory. */
    if (!(fraction >= 0.0 && fraction <= 1.0))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_set_memory_fraction(%g, %d): the fraction must be in [0, 1]", fraction, device);
    xsa_device_slot *s = xsa_api_slot(device);
    if (!xsa_device_lock_acquire(&s->lock)) return xsa_api_reentered("xsa_set_memory_fraction", device);
    if (s->pool)
        xsa_pool_set_memory_fraction(s->pool, fraction);
    else
        s->pending_fraction = fraction;
    xsa_device_lock_release(&s->lock);
    return xsa_ok();
}

xsa_status xsa_get_memory_fraction(int device, double *fraction) {
    if (!fraction) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_memory_fraction: fraction is NULL");
    xsa_status st = xsa_api_check_device("xsa_get_memory_fraction", device);
    if (st != XSA_SUCCESS) return st;
    /* Read before the device's lock: the configuration's lock is taken
     * before the devices' (api/devices.c), never after. */
    xsa_pool_options conf;
    xsa_api_options(&conf);
    xsa_device_slot *s = xsa_api_slot(device);
    if (!xsa_device_lock_acquire(&s->lock)) return xsa_api_reentered("xsa_get_memory_fraction", device);
    *fraction = s->pool                    ? xsa_pool_memory_fraction(s->pool)
                : s->pending_fraction >= 0 ? s->pending_fraction
                                           : conf.memory_fraction;
    xsa_device_lock_release(&s->lock);
    return xsa_ok();
}

xsa_status xsa_get_stats(int device, xsa_device_stats *stats) {
    if (!stats) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_stats: stats is NULL");
    xsa_status st = xsa_api_check_device("xsa_get_stats", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    bool held; /* false from a hook or trace callback of this device, which may read the stats */
    if ((st = xsa_api_lock_pool_to_read("xsa_get_stats", device, &p, &held)) != XSA_SUCCESS) return st;
    xsa_pool_get_stats(p, stats);
    const xsa_device_lock *l = &xsa_api_slot(device)->lock;
    stats->num_device_lock_waits = (int64_t)atomic_load_explicit(&l->waits, memory_order_relaxed);
    stats->device_lock_wait_us = (int64_t)(atomic_load_explicit(&l->wait_ns, memory_order_relaxed) / 1000);
    if (held) xsa_api_unlock(device);
    return xsa_ok();
}

/* Runs action on device's pool with its lock held, and clears the lock's
 * wait counts too when asked (they are accumulated statistics). */
static xsa_status with_pool(const char *fn, int device, void (*action)(xsa_pool *), bool lock_waits) {
    xsa_status st = xsa_api_check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool(fn, device, &p)) != XSA_SUCCESS) return st;
    action(p);
    if (lock_waits) xsa_device_lock_clear_waits(&xsa_api_slot(device)->lock);
    xsa_api_unlock(device);
    return xsa_ok();
}

xsa_status xsa_reset_peak_stats(int device) {
    return with_pool("xsa_reset_peak_stats", device, xsa_pool_reset_peak_stats, false);
}

xsa_status xsa_reset_accumulated_stats(int device) {
    return with_pool("xsa_reset_accumulated_stats", device, xsa_pool_reset_accumulated_stats, true);
}

xsa_status xsa_enable_peer_access(int device, int peer) {
    xsa_status st = xsa_api_check_device("xsa_enable_peer_access", device);
    if (st == XSA_SUCCESS) st = xsa_api_check_device("xsa_enable_peer_access (peer)", peer);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_enable_peer_access", device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_enable_peer(p, peer, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    if (ps != XSA_POOL_OK) return xsa_api_status(ps);
    st = xsa_ipc_grant_peer(device, peer); /* imported memory mapped for `device` too */
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_ipc_export(void *ptr, xsa_ipc_handle *handle) {
    if (!handle) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_export: handle is NULL");
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_ipc_export", ptr, &device, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_ipc_export(p, ptr, handle, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_ipc_share(void *ptr, void **bytes, size_t *len, size_t *offset) {
    if (!bytes || !len || !offset) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_share: bytes, len or offset is NULL");
    *bytes = NULL, *len = 0, *offset = 0;
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_ipc_share", ptr, &device, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_pool_share share;
    xsa_pool_status ps = xsa_pool_ipc_share(p, ptr, &share, xsa_error_buffer(), XSA_ERROR_MAX);
    /* Encoded under the lock: the handles stay mapped while it is held. */
    if (ps == XSA_POOL_OK) {
        st = xsa_ipc_share_encode(device, &share, bytes, len);
        *offset = st == XSA_SUCCESS ? share.offset : 0;
        free(share.chunks);
    }
    xsa_api_unlock(device);
    if (ps != XSA_POOL_OK) return xsa_api_status(ps);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_ipc_revoke(const xsa_ipc_handle *handle) {
    if (!handle || handle->magic != XSA_IPC_MAGIC)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_revoke: not an xsalloc IPC handle");
    xsa_status st = xsa_api_check_device("xsa_ipc_revoke", handle->device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_ipc_revoke", handle->device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_ipc_revoke(p, handle->export_id, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(handle->device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_check_invariants(int device) {
    xsa_status st = xsa_api_check_device("xsa_check_invariants", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_check_invariants", device, &p)) != XSA_SUCCESS) return st;
    char *err = xsa_error_buffer();
    int ok = xsa_pool_check(p, err, XSA_ERROR_MAX);
    xsa_api_unlock(device);
    if (ok) ok = xsa_ipc_check(err, XSA_ERROR_MAX) && xsa_share_check(err, XSA_ERROR_MAX);
    if (ok && strcmp(xsa_devices.drv->name, "sim") == 0) ok = xsa_sim_check(err, XSA_ERROR_MAX);
    return ok ? xsa_ok() : XSA_ERROR_INVALID_VALUE;
}

/* ---- memory pools: the pool layer's calls under the device's lock ---- */

typedef xsa_pool_status (*mempool_call)(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);

static xsa_status on_mempool(const char *fn, int device, xsa_mempool_id id, mempool_call call) {
    xsa_status st = xsa_api_check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool(fn, device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = call(p, id, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_mempool_create(int device, xsa_mempool_id id) {
    return on_mempool("xsa_mempool_create", device, id, xsa_pool_mempool_create);
}

xsa_status xsa_mempool_release(int device, xsa_mempool_id id) {
    return on_mempool("xsa_mempool_release", device, id, xsa_pool_mempool_release);
}

xsa_status xsa_mempool_use_count(int device, xsa_mempool_id id, int *uses) {
    if (!uses) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_mempool_use_count: uses is NULL");
    *uses = 0;
    xsa_status st = xsa_api_check_device("xsa_mempool_use_count", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_mempool_use_count", device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_mempool_exists(p, id, uses);
    xsa_api_unlock(device);
    return xsa_ok();
}

xsa_status xsa_mempool_create_with_allocator(int device, xsa_mempool_id id, const xsa_mempool_allocator *allocator) {
    xsa_status st = xsa_api_check_device("xsa_mempool_create_with_allocator", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_mempool_create_with_allocator", device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_mempool_create_with(p, id, allocator, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

typedef xsa_pool_status (*mempool_flag_call)(xsa_pool *p, xsa_mempool_id id, bool on, char *err, size_t errlen);

static xsa_status on_mempool_flag(const char *fn, int device, xsa_mempool_id id, bool on, mempool_flag_call call) {
    xsa_status st = xsa_api_check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool(fn, device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = call(p, id, on, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_mempool_set_use_on_oom(int device, xsa_mempool_id id, bool use_on_oom) {
    return on_mempool_flag("xsa_mempool_set_use_on_oom", device, id, use_on_oom, xsa_pool_mempool_set_use_on_oom);
}

xsa_status xsa_mempool_set_no_split(int device, xsa_mempool_id id, bool no_split) {
    return on_mempool_flag("xsa_mempool_set_no_split", device, id, no_split, xsa_pool_mempool_set_no_split);
}

xsa_status xsa_begin_allocate_to_pool(int device, xsa_mempool_id id, xsa_stream_filter filter, void *ctx) {
    xsa_status st = xsa_api_check_device("xsa_begin_allocate_to_pool", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_begin_allocate_to_pool", device, &p)) != XSA_SUCCESS) return st;
    /* Every routing counts as a capture, as in PyTorch, until capture
     * status is read from the driver. */
    xsa_pool_status ps = xsa_pool_begin_allocate_to_pool(p, id, filter, ctx, true, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_end_allocate_to_pool(int device, xsa_mempool_id id) {
    return on_mempool("xsa_end_allocate_to_pool", device, id, xsa_pool_end_allocate_to_pool);
}

xsa_status xsa_mempool_checkpoint(int device, xsa_mempool_id id, xsa_live_block **blocks, size_t *n) {
    if (!blocks || !n) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_mempool_checkpoint: blocks or n is NULL");
    *blocks = NULL;
    *n = 0;
    xsa_status st = xsa_api_check_device("xsa_mempool_checkpoint", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_mempool_checkpoint", device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_mempool_checkpoint(p, id, blocks, n, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_mempool_restore(int device, xsa_mempool_id id, const xsa_live_block *live, size_t n,
                               xsa_restore_delta *delta) {
    if (!delta || (n && !live))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_mempool_restore: delta is NULL, or live with n = %zu", n);
    *delta = (xsa_restore_delta){0};
    xsa_status st = xsa_api_check_device("xsa_mempool_restore", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock_pool("xsa_mempool_restore", device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_mempool_restore(p, id, live, n, delta, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

void xsa_restore_delta_free(xsa_restore_delta *delta) {
    if (!delta) return;
    free(delta->freed);
    free(delta->allocated);
    *delta = (xsa_restore_delta){0};
}
