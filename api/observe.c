/*
 * api/observe: trace recording (one ring per device) and memory hooks, fed
 * by the pools' observation points (pool/trace.h).
 *
 * Design: the state here is read by the observer with the device's lock
 * held and changed only with every device's lock held (in index order), so
 * the observer never takes a lock of its own. A pool has the observer
 * attached only while recording is on or a hook set is registered; that
 * keeps the hot path at one untaken branch otherwise. A ring's memory is
 * taken at its device's first recorded event, so devices never used cost
 * nothing.
 */
#include "api/observe.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/devices.h"
#include "api/errors.h"
#include "pool/trace.h"

typedef struct ring {
    xsa_history_entry *entries; /* [cap], taken at the first event */
    size_t next;                /* where the next event goes */
    size_t count;               /* min(events recorded, cap) */
    bool dropped;               /* the array could not be allocated: no retry per event */
} ring;

typedef struct hook_slot {
    bool used;
    xsa_memory_hooks hooks;
    void *user;
} hook_slot;

static struct {
    bool recording;
    size_t cap;
    ring rings[XSA_MAX_DEVICES];
    hook_slot hooks[XSA_MAX_HOOKS];
    int n_hooks;
    xsa_trace_fn trace_fn; /* the adapter's tracker, or NULL */
    void *trace_user;
} obs;

/* The thread's tag (xsa_set_trace_tag), read only while an event is
 * observed: the hot path never touches it. */
static __thread uint64_t trace_tag;

void xsa_set_trace_tag(uint64_t tag) { trace_tag = tag; }

const char *xsa_action_name(xsa_action a) {
    static const char *const names[] = {
        [XSA_ACT_ALLOC] = "alloc",
        [XSA_ACT_FREE_REQUESTED] = "free_requested",
        [XSA_ACT_FREE_COMPLETED] = "free_completed",
        [XSA_ACT_SEGMENT_ALLOC] = "segment_alloc",
        [XSA_ACT_SEGMENT_FREE] = "segment_free",
        [XSA_ACT_SEGMENT_MAP] = "segment_map",
        [XSA_ACT_SEGMENT_UNMAP] = "segment_unmap",
        [XSA_ACT_OOM] = "oom",
        [XSA_ACT_RECORD_STREAM] = NULL,
    };
    return names[a];
}

/* ---- the ring ---- */

/* The action recorded for a pool event, or -1 for events only hooks see. */
static int action_of(xsa_obs_kind k) {
    switch (k) {
    case XSA_OBS_ALLOC: return XSA_ACT_ALLOC;
    case XSA_OBS_FREE_REQUESTED: return XSA_ACT_FREE_REQUESTED;
    case XSA_OBS_FREE_COMPLETED: return XSA_ACT_FREE_COMPLETED;
    case XSA_OBS_RECORD_STREAM: return XSA_ACT_RECORD_STREAM;
    case XSA_OBS_SEGMENT_ALLOC: return XSA_ACT_SEGMENT_ALLOC;
    case XSA_OBS_SEGMENT_FREE: return XSA_ACT_SEGMENT_FREE;
    case XSA_OBS_SEGMENT_MAP: return XSA_ACT_SEGMENT_MAP;
    case XSA_OBS_SEGMENT_UNMAP: return XSA_ACT_SEGMENT_UNMAP;
    case XSA_OBS_OOM: return XSA_ACT_OOM;
    default: return -1;
    }
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record(int device, const xsa_history_entry *entry) {
    ring *r = &obs.rings[device];
    if (!r->entries && !r->dropped) {
        r->entries = malloc(obs.cap * sizeof *r->entries);
        r->dropped = !r->entries; /* out of host memory: this device records nothing */
    }
    if (!r->entries) return;
    r->entries[r->next] = *entry;
    r->next = (r->next + 1) % obs.cap;
    if (r->count < obs.cap) r->count++;
}

bool xsa_history_copy(int device, xsa_history_entry **out, size_t *n) {
    const ring *r = &obs.rings[device];
    *out = NULL;
    *n = 0;
    if (r->count == 0) return true;
    if (!(*out = malloc(r->count * sizeof **out))) return false;
    size_t oldest = r->count < obs.cap ? 0 : r->next;
    for (size_t i = 0; i < r->count; i++) (*out)[i] = r->entries[(oldest + i) % obs.cap];
    *n = r->count;
    return true;
}

static void clear_rings(void) {
    for (int d = 0; d < XSA_MAX_DEVICES; d++) {
        free(obs.rings[d].entries);
        memset(&obs.rings[d], 0, sizeof obs.rings[d]);
    }
}

/* ---- hooks ---- */

static xsa_hook_fn hook_of(const xsa_memory_hooks *h, xsa_obs_kind k) {
    switch (k) {
    case XSA_OBS_MALLOC_BEGIN: return h->malloc_pre;
    case XSA_OBS_MEMORY_BEGIN: return h->alloc_pre;
    case XSA_OBS_MEMORY_END: return h->alloc_post;
    case XSA_OBS_ALLOC: return h->malloc_post;
    case XSA_OBS_FREE_REQUESTED: return h->free_pre;
    case XSA_OBS_FREE_END: return h->free_post;
    default: return NULL;
    }
}

static void call_hooks(const xsa_obs_event *e) {
    bool before = e->kind == XSA_OBS_MALLOC_BEGIN || e->kind == XSA_OBS_MEMORY_BEGIN;
    xsa_hook_info info = {
        .device = e->device,
        .size = e->size,
        .mem_size = e->block_size,
        .ptr = before ? NULL : (void *)e->addr,
        .pool_id = e->pool == XSA_POOL_SMALL ? XSA_STAT_SMALL_POOL : XSA_STAT_LARGE_POOL,
        .stream = e->stream,
    };
    for (int i = 0; i < XSA_MAX_HOOKS; i++) {
        if (!obs.hooks[i].used) continue;
        xsa_hook_fn fn = hook_of(&obs.hooks[i].hooks, e->kind);
        if (fn) fn(&info, obs.hooks[i].user);
    }
}

/* ---- the observer ---- */

/* Called with device e->device's lock held. The user's callbacks run
 * marked as such on the lock, so that a call of theirs back into xsalloc
 * on this device fails at once or only reads (api/device_lock.h) instead
 * of waiting for itself. */
static void on_event(void *ctx, const xsa_obs_event *e) {
    (void)ctx;
    int action = action_of(e->kind);
    bool user = obs.trace_fn || obs.n_hooks > 0;
    xsa_device_lock *lock = &xsa_api_slot(e->device)->lock;
    if (user) xsa_device_lock_enter_callback(lock);
    if (action >= 0 && (obs.recording || obs.trace_fn)) {
        xsa_history_entry entry = {
            .action = (xsa_action)action, .addr = e->addr, .size = e->size, .stream = e->stream,
            .time_ns = now_ns(), .tag = trace_tag,
        };
        if (obs.recording) record(e->device, &entry);
        if (obs.trace_fn) obs.trace_fn(e->device, &entry, obs.trace_user);
    }
    if (obs.n_hooks > 0) call_hooks(e);
    if (user) xsa_device_lock_leave_callback(lock);
}

void xsa_observe_shutdown(void) {
    clear_rings();
    memset(&obs, 0, sizeof obs);
}

/* Locks every device in index order (creating no pool); on a failure
 * (a call from a callback of a device's own) none stays locked. */
static xsa_status lock_all(const char *fn, xsa_pool **pools, int *n) {
    xsa_status st = xsa_device_count(n);
    for (int d = 0; st == XSA_SUCCESS && d < *n; d++) {
        if ((st = xsa_api_lock(fn, d, false, &pools[d])) == XSA_SUCCESS) continue;
        while (d-- > 0) xsa_api_unlock(d);
    }
    return st;
}

/* Gives every pool the observer the settings now call for (none when
 * nothing is recorded or hooked) and unlocks every device. */
static void unlock_all(int n) {
    bool on = obs.recording || obs.n_hooks > 0 || obs.trace_fn;
    xsa_devices_set_observer(on ? on_event : NULL);
    for (int d = 0; d < n; d++) xsa_api_unlock(d);
}

xsa_status xsa_record_history(int enabled, size_t max_entries) {
    if (enabled && max_entries == 0)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_record_history: max_entries must be at least 1");
    if (enabled && max_entries > SIZE_MAX / sizeof(xsa_history_entry))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_record_history: max_entries %zu is too large", max_entries);
    xsa_pool *pools[XSA_MAX_DEVICES];
    int n = 0;
    xsa_status st = lock_all("xsa_record_history", pools, &n);
    if (st != XSA_SUCCESS) return st;
    if (enabled) {
        clear_rings();
        obs.cap = max_entries;
    }
    obs.recording = enabled != 0;
    unlock_all(n);
    return xsa_ok();
}

xsa_status xsa_register_hooks(const xsa_memory_hooks *hooks, void *user, int *id) {
    if (!hooks || !id) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_register_hooks: hooks or id is NULL");
    xsa_pool *pools[XSA_MAX_DEVICES];
    int n = 0;
    xsa_status st = lock_all("xsa_register_hooks", pools, &n);
    if (st != XSA_SUCCESS) return st;
    int slot = 0;
    while (slot < XSA_MAX_HOOKS && obs.hooks[slot].used) slot++;
    if (slot < XSA_MAX_HOOKS) {
        obs.hooks[slot] = (hook_slot){.used = true, .hooks = *hooks, .user = user};
        obs.n_hooks++;
    }
    unlock_all(n);
    if (slot == XSA_MAX_HOOKS)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_register_hooks: %d hook sets are registered already", XSA_MAX_HOOKS);
    *id = slot;
    return xsa_ok();
}

xsa_status xsa_unregister_hooks(int id) {
    xsa_pool *pools[XSA_MAX_DEVICES];
    int n = 0;
    xsa_status st = lock_all("xsa_unregister_hooks", pools, &n);
    if (st != XSA_SUCCESS) return st;
    bool known = id >= 0 && id < XSA_MAX_HOOKS && obs.hooks[id].used;
    if (known) {
        obs.hooks[id].used = false;
        obs.n_hooks--;
    }
    unlock_all(n);
    if (!known) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_unregister_hooks(%d): no such hook set", id);
    return xsa_ok();
}

xsa_status xsa_set_trace_callback(xsa_trace_fn fn, void *user) {
    xsa_pool *pools[XSA_MAX_DEVICES];
    int n = 0;
    xsa_status st = lock_all("xsa_set_trace_callback", pools, &n);
    if (st != XSA_SUCCESS) return st;
    obs.trace_fn = fn;
    obs.trace_user = fn ? user : NULL;
    unlock_all(n);
    return xsa_ok();
}
