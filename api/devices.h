/*
 * api/devices: the device table under the public API: start-up (the
 * configuration, the driver, the devices), one lock and one pool per
 * device, and shutdown's part. The API's other files (allocator.c, ipc.c,
 * observe.c, ...) reach pools only through here; nothing here calls them.
 *
 * Design: the table is read on every malloc and free, so the checks and
 * the locking are inline below (one acquire load, one compare-and-swap);
 * start-up, pool creation and the slow paths are in devices.c. A device's
 * pool is created on its first use, with the range listener (api/ranges.h)
 * and the observer observe.c asked for (xsa_devices_set_observer).
 */
#ifndef XSA_API_DEVICES_H
#define XSA_API_DEVICES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/device_lock.h"
#include "pool/options.h"
#include "pool/types.h"
#include "vmm/driver.h"
#include "xsalloc/xsalloc.h"

#define XSA_MAX_DEVICES 64

typedef struct xsa_device_slot {
    xsa_device_lock lock;
    xsa_pool *pool;          /* created on first use */
    double pending_fraction; /* set before the pool existed; < 0 = none (0 is a fraction) */
} xsa_device_slot;

/* What the fast paths read; devices.c changes it at start-up and shutdown
 * only (slot[d].pool also under device d's lock). */
typedef struct xsa_device_table {
    atomic_bool ready;
    xsa_driver *drv;
    int devices;
    xsa_device_slot slot[XSA_MAX_DEVICES];
} xsa_device_table;

extern xsa_device_table xsa_devices;

/*
 * The driver chosen at run time: XSA_DRIVER=cuda|sim forces one; otherwise
 * cuda when a GPU is usable, else sim. NULL (with err filled) only when
 * cuda was forced and is not usable.
 */
xsa_driver *xsa_driver_default(char *err, size_t errlen);

/* Starts (configuring from the environment first if need be) unless
 * started: the slow path of xsa_api_ensure_init. */
xsa_status xsa_devices_start(void);
static inline xsa_status xsa_api_ensure_init(void) {
    if (__builtin_expect(atomic_load_explicit(&xsa_devices.ready, memory_order_acquire), 1)) return XSA_SUCCESS;
    return xsa_devices_start();
}

/* XSA_SUCCESS if xsalloc is initialised (initialising it if need be) and
 * `device` exists, else the error, naming `fn`. */
xsa_status xsa_devices_check_slow(const char *fn, int device);
static inline xsa_status xsa_api_check_device(const char *fn, int device) {
    if (__builtin_expect(atomic_load_explicit(&xsa_devices.ready, memory_order_acquire) &&
                             (unsigned)device < (unsigned)xsa_devices.devices,
                         1))
        return XSA_SUCCESS;
    return xsa_devices_check_slow(fn, device);
}

/* Creates the pool of `device`, whose lock the caller holds; on failure
 * releases the lock. */
xsa_status xsa_devices_create_pool(int device);

/* Device d's slot. Callers have checked d (xsa_api_check_device): saying
 * so lets the compiler drop the paths it cannot otherwise rule out (with
 * link-time inlining it warned of a write before the table for a device
 * a test passes as -3). */
static inline xsa_device_slot *xsa_api_slot(int device) {
    if ((unsigned)device >= XSA_MAX_DEVICES) __builtin_unreachable();
    return &xsa_devices.slot[device];
}

/* The error of a call `fn` made from a memory hook or trace callback that
 * runs on this thread under device `device`'s lock (api/device_lock.h):
 * XSA_ERROR_NOT_SUPPORTED, the message set. */
xsa_status xsa_api_reentered(const char *fn, int device);
#define XSA_API_REENTERED(fn, device) ((void)xsa_api_reentered(fn, device), XSA_ERROR_NOT_SUPPORTED)

/* Locks an existing device and returns its pool, creating it on first use.
 * On failure the lock is not held (`fn` names the caller in errors). */
static inline xsa_status xsa_api_lock_pool(const char *fn, int device, xsa_pool **out) {
    xsa_device_slot *s = xsa_api_slot(device);
    if (__builtin_expect(!xsa_device_lock_acquire(&s->lock), 0)) return XSA_API_REENTERED(fn, device);
    if (__builtin_expect(!s->pool, 0)) {
        xsa_status st = xsa_devices_create_pool(device);
        if (st != XSA_SUCCESS) return st;
    }
    *out = s->pool;
    return XSA_SUCCESS;
}

/* For the calls that only read: as xsa_api_lock_pool, but from a callback
 * of the thread that holds the lock it gives the pool with *held false
 * (nothing to unlock): that thread's own call waits at the callback, so
 * the pool cannot change meanwhile. */
static inline xsa_status xsa_api_lock_pool_to_read(const char *fn, int device, xsa_pool **out, bool *held) {
    xsa_device_slot *s = xsa_api_slot(device);
    *held = true;
    if (__builtin_expect(xsa_device_lock_acquire(&s->lock), 1)) {
        if (__builtin_expect(!s->pool, 0)) {
            xsa_status st = xsa_devices_create_pool(device);
            if (st != XSA_SUCCESS) return st;
        }
    } else if (!s->pool) {
        return XSA_API_REENTERED(fn, device);
    } else {
        *held = false;
    }
    *out = s->pool;
    return XSA_SUCCESS;
}

static inline void xsa_api_unlock(int device) { xsa_device_lock_release(&xsa_api_slot(device)->lock); }

/* Locks `device` (initialising and checking it; `fn` names the caller in
 * errors) and gives its pool: created on first use when `create`, else
 * NULL if it does not exist yet. On success the lock is held until
 * xsa_api_unlock(device). */
xsa_status xsa_api_lock(const char *fn, int device, bool create, xsa_pool **pool);

/* The pool layer's status as the API's. */
xsa_status xsa_api_status(xsa_pool_status ps);

/* The driver table in use (initialises if needed); NULL if none. */
xsa_driver *xsa_active_driver(void);
/* The configuration in use (once configured), copied. */
void xsa_api_options(xsa_pool_options *out);
/* Where it came from: "xsa_init" for the string given to xsa_init or
 * xsa_configure, else the environment variable's name (XSALLOC_CONF when
 * set, else PyTorch's), or NULL when none was set; *text gets the string
 * (NULL with NULL). *under and *under_text: PyTorch's variable and its
 * string when XSALLOC_CONF layers over it, else NULL (api/config_env.h). */
const char *xsa_api_conf_source(const char **text, const char **under, const char **under_text);
/* The last settings string given at run time (xsa_set_allocator_settings),
 * or NULL; valid until xsa_shutdown. */
const char *xsa_api_runtime_settings(void);
/* For api/settings.c. Configures if needed (starts nothing); then, under
 * the lock that guards the configuration, merge() decides the new options
 * from the current ones (or fails, the error set, and nothing changes);
 * with every device locked, each device's pool is asked whether it can
 * take them (can it map virtual memory) and, when `apply`, takes them
 * (xsa_pool_set_options), pools created later get them and `text` becomes
 * the settings string reported (xsa_get_settings, summaries, snapshots).
 * Without `apply` nothing changes: the check alone. */
typedef xsa_status (*xsa_options_merge)(const xsa_pool_options *current, xsa_pool_options *next, void *ctx);
xsa_status xsa_api_change_options(xsa_options_merge merge, void *ctx, const char *text, bool apply);

/* The observer every pool has, from now on and at its creation (NULL:
 * none). Called with every device's lock held (observe.c). */
void xsa_devices_set_observer(xsa_observer_fn fn);

/* Shutdown, in steps around what the layers above close first (imports,
 * the lag probe): hold takes the start-up lock and says how far xsalloc
 * got; stop (with it held) destroys every pool, forgets the address
 * ranges, the observer and the configuration, and marks xsalloc not
 * initialised; release gives the lock back. */
typedef enum { XSA_DEVICES_OFF, XSA_DEVICES_CONFIGURED, XSA_DEVICES_STARTED } xsa_devices_phase;
xsa_devices_phase xsa_devices_hold_startup(void);
void xsa_devices_stop(void);
void xsa_devices_release_startup(void);

/* In a child forked after the driver started (devices.c says what that
 * child may do). */
bool xsa_devices_forked(void);

/* pthread_atfork's three handlers (api/fork.c registers them): prepare
 * holds the start-up lock across the fork; parent gives it back; child
 * gives it back and, if the driver had started, forgets the parent's
 * pools and marks the process a forked child. */
void xsa_devices_fork_prepare(void);
void xsa_devices_fork_parent(void);
void xsa_devices_fork_child(void);

#endif
