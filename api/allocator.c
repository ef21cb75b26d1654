/*
 * api/allocator: the public C API over one pool per device.
 *
 * Design: initialisation (explicit, or lazy on the first call from the first
 * of XSALLOC_CONF, PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF that is set)
 * parses the configuration, names the PyTorch keys it cannot honour on
 * stderr (one line), picks the driver, counts devices and
 * starts the lag probe if XSALLOC_LAG_PROBE names a file (api/lag_probe.h). A
 * device's pool is created on its first use. Each device has its own lock.
 * A pointer's pool (lock_owner): with one device, that device's; else the
 * reservation ranges (expandable segments, a lock-free search) name it, or
 * each pool is asked under its lock, the thread's current device first.
 * So no table is kept beside the pools' own maps on every malloc and free.
 * Settings changed at run time (api/settings.c) are applied with init_lock
 * and every device's lock held; init_lock guards what they change.
 * xsa_shutdown must not run concurrently with other calls.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "api/device_lock.h"
#include "api/errors.h"
#include "api/internal.h"
#include "api/ipc.h"
#include "api/lag_probe.h"
#include "api/ranges.h"
#include "pool/pool.h"
#include "vmm/share.h"
#include "vmm/sim.h"

typedef struct device_slot {
    xsa_device_lock lock;
    xsa_pool *pool;          /* created on first use */
    double pending_fraction; /* set before the pool existed; < 0 = none (0 is a fraction) */
} device_slot;

static struct {
    pthread_mutex_t init_lock;
    atomic_bool ready;
    xsa_driver *drv;
    const char *forced_driver; /* xsa_use_driver */
    xsa_config config;
    const char *conf_source; /* see xsa_api_conf_source */
    char *conf_text;         /* a copy: the environment may change */
    /* The strings given at run time (xsa_api_set_options), one copy of each,
     * kept until xsa_shutdown as xsa_settings promises; the last. */
    char **texts;
    size_t n_texts;
    const char *runtime_text;
    int devices;
    device_slot slot[XSA_MAX_DEVICES];
} g = {.init_lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int current_device;

xsa_status xsa_use_driver(const char *name) {
    if (name && strcmp(name, "cuda") != 0 && strcmp(name, "sim") != 0)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_use_driver(\"%s\"): the driver is 'cuda' or 'sim'", name);
    pthread_mutex_lock(&g.init_lock);
    bool ready = atomic_load(&g.ready);
    if (!ready) g.forced_driver = name && strcmp(name, "cuda") == 0 ? "cuda" : name ? "sim" : NULL;
    pthread_mutex_unlock(&g.init_lock);
    if (ready) return xsa_fail(XSA_ERROR_ALREADY_INITIALIZED, "xsa_use_driver: already initialised; call xsa_shutdown first");
    return xsa_ok();
}

/* The driver to use, or NULL with the error set. */
static xsa_driver *pick_driver(void) {
    char why[512] = "";
    xsa_driver *d = NULL;
    if (!g.forced_driver)
        d = xsa_driver_default(why, sizeof why);
    else if (strcmp(g.forced_driver, "sim") == 0)
        d = xsa_driver_sim();
    else
        d = xsa_driver_cuda(why, sizeof why);
    if (!d) xsa_fail(XSA_ERROR_NO_DRIVER, "no usable CUDA driver: %s", why);
    return d;
}

/* Called with init_lock held. */
static xsa_status init_locked(const char *conf) {
    const char *text = conf, *source = conf ? "xsa_init" : xsa_config_env(&text);
    char why[1024];
    if (!xsa_config_parse(text, &g.config, why, sizeof why))
        return xsa_fail(XSA_ERROR_CONFIG, "%s: %s", conf ? "configuration" : source, why);
    xsa_driver *d = pick_driver();
    if (!d) return XSA_ERROR_NO_DRIVER;
    xsa_cu_result r = XSA_DRV(d, init);
    int count = 0;
    if (r == XSA_CU_SUCCESS) r = XSA_DRV(d, device_get_count, &count);
    if (r != XSA_CU_SUCCESS)
        return xsa_fail(XSA_ERROR_NO_DRIVER, "%s driver: initialisation failed: %s", d->name, d->error_string(r));
    if (count <= 0) return xsa_fail(XSA_ERROR_NO_DRIVER, "%s driver: no device", d->name);
    char *copy = text ? strdup(text) : NULL;
    if (text && !copy) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_init: out of host memory");
    xsa_status st = xsa_lag_probe_start(getenv("XSALLOC_LAG_PROBE"), d);
    if (st != XSA_SUCCESS) {
        free(copy);
        return st;
    }
    if (g.config.ignored[0])
        fprintf(stderr, "xsalloc: %s: ignoring %s (xsalloc cannot honour these PyTorch keys; api/CONFIG.md says why)\n",
                conf ? "configuration" : source, g.config.ignored);
    g.conf_source = source;
    g.conf_text = copy;
    g.drv = d;
    g.devices = count < XSA_MAX_DEVICES ? count : XSA_MAX_DEVICES;
    for (int i = 0; i < g.devices; i++) {
        atomic_init(&g.slot[i].lock.state, 0);
        atomic_init(&g.slot[i].lock.sleepers, 0);
        g.slot[i].pool = NULL;
        g.slot[i].pending_fraction = -1;
    }
    atomic_store_explicit(&g.ready, true, memory_order_release);
    return XSA_SUCCESS;
}

xsa_status xsa_init(const char *conf) {
    pthread_mutex_lock(&g.init_lock);
    xsa_status st = atomic_load(&g.ready)
                        ? xsa_fail(XSA_ERROR_ALREADY_INITIALIZED, "xsa_init: already initialised; call xsa_shutdown first")
                        : init_locked(conf);
    pthread_mutex_unlock(&g.init_lock);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

static xsa_status init_once(void) {
    pthread_mutex_lock(&g.init_lock);
    xsa_status st = atomic_load(&g.ready) ? XSA_SUCCESS : init_locked(NULL);
    pthread_mutex_unlock(&g.init_lock);
    return st;
}

static inline xsa_status ensure_init(void) {
    if (__builtin_expect(atomic_load_explicit(&g.ready, memory_order_acquire), 1)) return XSA_SUCCESS;
    return init_once();
}

xsa_status xsa_shutdown(void) {
    pthread_mutex_lock(&g.init_lock);
    if (atomic_load(&g.ready)) {
        xsa_lag_probe_stop();
        xsa_ipc_close_all();
        for (int i = 0; i < g.devices; i++) {
            if (g.slot[i].pool) xsa_pool_destroy(g.slot[i].pool);
            g.slot[i].pool = NULL;
        }
        xsa_ranges_clear();
        xsa_observe_shutdown();
        atomic_store(&g.ready, false);
        free(g.conf_text);
        g.conf_text = NULL;
        for (size_t i = 0; i < g.n_texts; i++) free(g.texts[i]);
        free(g.texts);
        g.texts = NULL, g.n_texts = 0, g.runtime_text = NULL;
        g.conf_source = NULL;
        g.drv = NULL;
        g.devices = 0;
    }
    pthread_mutex_unlock(&g.init_lock);
    return xsa_ok();
}

xsa_driver *xsa_active_driver(void) { return ensure_init() == XSA_SUCCESS ? g.drv : NULL; }

const char *xsa_driver_name(void) { return ensure_init() == XSA_SUCCESS ? g.drv->name : "none"; }

xsa_status xsa_device_count(int *count) {
    if (!count) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_device_count: count is NULL");
    xsa_status st = ensure_init();
    if (st != XSA_SUCCESS) return st;
    *count = g.devices;
    return xsa_ok();
}

static xsa_status check_device_slow(const char *fn, int device) {
    xsa_status st = ensure_init();
    if (st != XSA_SUCCESS) return st;
    if (device < 0 || device >= g.devices)
        return xsa_fail(XSA_ERROR_INVALID_DEVICE, "%s: device %d does not exist (%d device%s)", fn, device, g.devices,
                        g.devices == 1 ? "" : "s");
    return XSA_SUCCESS;
}

static inline xsa_status check_device(const char *fn, int device) {
    if (__builtin_expect(atomic_load_explicit(&g.ready, memory_order_acquire) && (unsigned)device < (unsigned)g.devices, 1))
        return XSA_SUCCESS;
    return check_device_slow(fn, device);
}

xsa_status xsa_set_device(int device) {
    xsa_status st = check_device("xsa_set_device", device);
    if (st != XSA_SUCCESS) return st;
    current_device = device;
    return xsa_ok();
}

xsa_status xsa_get_device(int *device) {
    if (!device) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_device: device is NULL");
    *device = current_device;
    return xsa_ok();
}

static xsa_status from_pool(xsa_pool_status ps) {
    switch (ps) {
    case XSA_POOL_OK: return XSA_SUCCESS;
    case XSA_POOL_OOM: return XSA_ERROR_OUT_OF_MEMORY;
    case XSA_POOL_BAD_POINTER: return XSA_ERROR_INVALID_POINTER;
    case XSA_POOL_DRIVER_ERROR: return XSA_ERROR_DRIVER;
    case XSA_POOL_HOST_OOM: return XSA_ERROR_OUT_OF_MEMORY;
    case XSA_POOL_INVALID: return XSA_ERROR_INVALID_VALUE;
    case XSA_POOL_UNSUPPORTED: return XSA_ERROR_NOT_SUPPORTED;
    }
    return XSA_ERROR_DRIVER;
}

static void range_reserved(void *ctx, int device, uintptr_t base, size_t size) {
    (void)ctx;
    xsa_ranges_add(base, size, device);
}

static void range_released(void *ctx, uintptr_t base) {
    (void)ctx;
    xsa_ranges_remove(base);
}

/* Creates the device's pool (its lock held); on failure releases the lock. */
static xsa_status create_pool(int device) {
    device_slot *s = &g.slot[device];
    const char *warning = NULL;
    xsa_pool_options opt = g.config.pool;
    if (s->pending_fraction >= 0) opt.memory_fraction = s->pending_fraction;
    xsa_pool_status ps = xsa_pool_create(&s->pool, g.drv, device, &opt, &warning, xsa_error_buffer(), XSA_ERROR_MAX);
    if (ps != XSA_POOL_OK) {
        s->pool = NULL;
        xsa_device_lock_release(&s->lock);
        return from_pool(ps);
    }
    if (warning) fprintf(stderr, "xsalloc: warning: device %d: %s\n", device, warning);
    xsa_pool_set_listener(s->pool, &(xsa_pool_listener){range_reserved, range_released, NULL});
    xsa_observe_attach(s->pool);
    return XSA_SUCCESS;
}

/* Locks the device and returns its pool, creating it on first use. On
 * failure the lock is not held. */
static inline xsa_status lock_pool(int device, xsa_pool **out) {
    device_slot *s = &g.slot[device];
    xsa_device_lock_acquire(&s->lock);
    if (__builtin_expect(!s->pool, 0)) {
        xsa_status st = create_pool(device);
        if (st != XSA_SUCCESS) return st;
    }
    *out = s->pool;
    return XSA_SUCCESS;
}

static void unlock_pool(int device) { xsa_device_lock_release(&g.slot[device].lock); }

xsa_status xsa_api_check_device(const char *fn, int device) { return check_device(fn, device); }

xsa_status xsa_api_lock(const char *fn, int device, bool create, xsa_pool **pool) {
    xsa_status st = check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    if (create) return lock_pool(device, pool);
    xsa_device_lock_acquire(&g.slot[device].lock);
    *pool = g.slot[device].pool;
    return XSA_SUCCESS;
}

void xsa_api_unlock(int device) { unlock_pool(device); }

void xsa_api_options(xsa_pool_options *out) {
    pthread_mutex_lock(&g.init_lock);
    *out = g.config.pool;
    pthread_mutex_unlock(&g.init_lock);
}

const char *xsa_api_conf_source(const char **text) {
    pthread_mutex_lock(&g.init_lock);
    const char *source = g.conf_source;
    *text = g.conf_text;
    pthread_mutex_unlock(&g.init_lock);
    return source;
}

const char *xsa_api_runtime_settings(void) {
    pthread_mutex_lock(&g.init_lock);
    const char *text = g.runtime_text;
    pthread_mutex_unlock(&g.init_lock);
    return text;
}

/* The kept copy of text (init_lock held): the same string given before, or
 * a new copy; NULL if out of host memory. */
static const char *keep_text(const char *text) {
    for (size_t i = 0; i < g.n_texts; i++)
        if (strcmp(g.texts[i], text) == 0) return g.texts[i];
    char **grown = realloc(g.texts, (g.n_texts + 1) * sizeof *grown);
    if (!grown) return NULL;
    g.texts = grown;
    if (!(g.texts[g.n_texts] = strdup(text))) return NULL;
    return g.texts[g.n_texts++];
}

xsa_status xsa_api_change_options(xsa_options_merge merge, void *ctx, const char *text) {
    xsa_status st = ensure_init();
    if (st != XSA_SUCCESS) return st;
    pthread_mutex_lock(&g.init_lock);
    xsa_pool_options next;
    const char *kept = NULL;
    st = merge(&g.config.pool, &next, ctx);
    if (st == XSA_SUCCESS && !(kept = keep_text(text)))
        st = xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_set_allocator_settings: out of host memory");
    if (st != XSA_SUCCESS) {
        pthread_mutex_unlock(&g.init_lock);
        return st;
    }
    for (int d = 0; d < g.devices; d++) xsa_device_lock_acquire(&g.slot[d].lock);
    /* Whether a device can map virtual memory is the one thing to ask, and
     * the one step that can fail: asked of every pool before any changes. */
    for (int d = 0; d < g.devices && st == XSA_SUCCESS; d++) {
        xsa_pool *p = g.slot[d].pool;
        if (p && next.expandable_segments) {
            xsa_pool_status ps = xsa_pool_probe_vmm(p, xsa_error_buffer(), XSA_ERROR_MAX);
            if (ps != XSA_POOL_OK) st = from_pool(ps);
        }
    }
    for (int d = 0; d < g.devices && st == XSA_SUCCESS; d++) {
        const char *warning = g.slot[d].pool ? xsa_pool_set_options(g.slot[d].pool, &next) : NULL;
        if (warning) fprintf(stderr, "xsalloc: warning: device %d: %s\n", d, warning);
    }
    if (st == XSA_SUCCESS) {
        g.config.pool = next;
        g.runtime_text = kept;
    }
    for (int d = g.devices - 1; d >= 0; d--) xsa_device_lock_release(&g.slot[d].lock);
    pthread_mutex_unlock(&g.init_lock);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_get_settings(xsa_settings *out) {
    if (!out) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_settings: out is NULL");
    xsa_status st = ensure_init();
    if (st != XSA_SUCCESS) return st;
    pthread_mutex_lock(&g.init_lock);
    const xsa_pool_options *o = &g.config.pool;
    _Static_assert(sizeof out->roundup_power2_divisions == sizeof o->roundup_power2_divisions,
                   "xsa_settings carries every roundup interval");
    *out = (xsa_settings){
        .source = g.runtime_text ? "xsa_set_allocator_settings" : g.conf_source,
        .text = g.runtime_text ? g.runtime_text : g.conf_text,
        .expandable_segments = o->expandable_segments,
        .page_recycling = o->page_recycling,
        .max_split_size = o->max_split_size,
        .garbage_collection_threshold = o->garbage_collection_threshold,
    };
    memcpy(out->roundup_power2_divisions, o->roundup_power2_divisions, sizeof out->roundup_power2_divisions);
    pthread_mutex_unlock(&g.init_lock);
    return xsa_ok();
}

xsa_status xsa_malloc(void **ptr, size_t size, int device, void *stream) {
    if (!ptr) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_malloc: ptr is NULL");
    *ptr = NULL;
    xsa_status st = check_device("xsa_malloc", device);
    if (st != XSA_SUCCESS) return st;
    if (size == 0) return xsa_ok();
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    void *out = NULL;
    xsa_pool_status ps = xsa_pool_malloc(p, size, stream, &out, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    if (ps != XSA_POOL_OK) return from_pool(ps);
    *ptr = out;
    return xsa_ok();
}

xsa_status xsa_malloc_current(void **ptr, size_t size, void *stream) {
    return xsa_malloc(ptr, size, current_device, stream);
}

/* Locks device d and returns true with its pool, if it has one and, when
 * must_own, that pool holds ptr; otherwise leaves it unlocked. */
static inline bool lock_if_answers(int d, void *ptr, bool must_own, int *device, xsa_pool **pool) {
    device_slot *s = &g.slot[d];
    xsa_device_lock_acquire(&s->lock);
    if (s->pool && (!must_own || xsa_pool_owns(s->pool, ptr))) {
        *device = d;
        *pool = s->pool;
        return true;
    }
    xsa_device_lock_release(&s->lock);
    return false;
}

/* Finds the pool that answers for ptr and returns it with its device's
 * lock held, or fails naming fn (nothing held). With one device that is
 * its pool, which reports a pointer it does not hold; otherwise pointers in
 * expandable reservations are found by range, others by asking each pool,
 * the current device's first. */
static xsa_status lock_owner(const char *fn, void *ptr, int *device, xsa_pool **pool) {
    xsa_status st = ensure_init();
    if (st != XSA_SUCCESS) return st;
    int d = g.devices == 1 ? 0 : ptr ? xsa_ranges_find((uintptr_t)ptr) : -1;
    if (d >= 0) {
        if (lock_if_answers(d, ptr, false, device, pool)) return XSA_SUCCESS;
    } else {
        d = current_device;
        for (int i = 0; ptr && i < g.devices; i++, d = d + 1 < g.devices ? d + 1 : 0)
            if (lock_if_answers(d, ptr, true, device, pool)) return XSA_SUCCESS;
    }
    return xsa_fail(XSA_ERROR_INVALID_POINTER,
                    "%s(%p): not a live allocation of xsalloc (unknown, interior or already freed pointer)", fn, ptr);
}

xsa_status xsa_free(void *ptr) {
    if (!ptr) return xsa_ok();
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_free", ptr, &device, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_free(p, ptr, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

xsa_status xsa_record_stream(void *ptr, void *stream) {
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_record_stream", ptr, &device, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_record_stream(p, ptr, stream, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

xsa_status xsa_get_base_allocation(void *ptr, void **base, size_t *size) {
    if (!base || !size) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_base_allocation: base or size is NULL");
    int device;
    xsa_pool *p;
    xsa_status st = lock_owner("xsa_get_base_allocation", ptr, &device, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_base_allocation(p, ptr, base, size);
    unlock_pool(device);
    if (ps != XSA_POOL_OK) return xsa_fail(from_pool(ps), "xsa_get_base_allocation(%p): not a live allocation", ptr);
    return xsa_ok();
}

xsa_status xsa_empty_cache(void) {
    xsa_status st = ensure_init();
    if (st != XSA_SUCCESS) return st;
    for (int d = 0; d < g.devices; d++) {
        device_slot *s = &g.slot[d];
        xsa_device_lock_acquire(&s->lock);
        xsa_pool_status ps = s->pool ? xsa_pool_empty_cache(s->pool, xsa_error_buffer(), XSA_ERROR_MAX) : XSA_POOL_OK;
        xsa_device_lock_release(&s->lock);
        if (ps != XSA_POOL_OK) return from_pool(ps);
    }
    return xsa_ok();
}

xsa_status xsa_cache_info(int device, size_t *cached_free, size_t *largest) {
    xsa_status st = check_device("xsa_cache_info", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_cache_info(p, cached_free, largest);
    unlock_pool(device);
    return xsa_ok();
}

xsa_status xsa_set_memory_fraction(double fraction, int device) {
    xsa_status st = check_device("xsa_set_memory_fraction", device);
    if (st != XSA_SUCCESS) return st;
    /* PyTorch's range: 0 leaves no room for new device memory. */
    if (!(fraction >= 0.0 && fraction <= 1.0))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_set_memory_fraction(%g, %d): the fraction must be in [0, 1]", fraction, device);
    device_slot *s = &g.slot[device];
    xsa_device_lock_acquire(&s->lock);
    if (s->pool)
        xsa_pool_set_memory_fraction(s->pool, fraction);
    else
        s->pending_fraction = fraction;
    xsa_device_lock_release(&s->lock);
    return xsa_ok();
}

xsa_status xsa_get_memory_fraction(int device, double *fraction) {
    if (!fraction) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_memory_fraction: fraction is NULL");
    xsa_status st = check_device("xsa_get_memory_fraction", device);
    if (st != XSA_SUCCESS) return st;
    device_slot *s = &g.slot[device];
    xsa_device_lock_acquire(&s->lock);
    *fraction = s->pool                    ? xsa_pool_memory_fraction(s->pool)
                : s->pending_fraction >= 0 ? s->pending_fraction
                                           : g.config.pool.memory_fraction;
    xsa_device_lock_release(&s->lock);
    return xsa_ok();
}

xsa_status xsa_get_stats(int device, xsa_device_stats *stats) {
    if (!stats) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_stats: stats is NULL");
    xsa_status st = check_device("xsa_get_stats", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_get_stats(p, stats);
    unlock_pool(device);
    return xsa_ok();
}

static xsa_status with_pool(const char *fn, int device, void (*action)(xsa_pool *)) {
    xsa_status st = check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    action(p);
    unlock_pool(device);
    return xsa_ok();
}

xsa_status xsa_reset_peak_stats(int device) { return with_pool("xsa_reset_peak_stats", device, xsa_pool_reset_peak_stats); }

xsa_status xsa_reset_accumulated_stats(int device) {
    return with_pool("xsa_reset_accumulated_stats", device, xsa_pool_reset_accumulated_stats);
}

xsa_status xsa_enable_peer_access(int device, int peer) {
    xsa_status st = check_device("xsa_enable_peer_access", device);
    if (st == XSA_SUCCESS) st = check_device("xsa_enable_peer_access (peer)", peer);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_enable_peer(p, peer, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    if (ps != XSA_POOL_OK) return from_pool(ps);
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
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
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
    unlock_pool(device);
    if (ps != XSA_POOL_OK) return from_pool(ps);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_ipc_revoke(const xsa_ipc_handle *handle) {
    if (!handle || handle->magic != XSA_IPC_MAGIC)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_revoke: not an xsalloc IPC handle");
    xsa_status st = check_device("xsa_ipc_revoke", handle->device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(handle->device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_ipc_revoke(p, handle->export_id, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(handle->device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

xsa_status xsa_check_invariants(int device) {
    xsa_status st = check_device("xsa_check_invariants", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    char *err = xsa_error_buffer();
    int ok = xsa_pool_check(p, err, XSA_ERROR_MAX);
    unlock_pool(device);
    if (ok) ok = xsa_ipc_check(err, XSA_ERROR_MAX) && xsa_share_check(err, XSA_ERROR_MAX);
    if (ok && strcmp(g.drv->name, "sim") == 0) ok = xsa_sim_check(err, XSA_ERROR_MAX);
    return ok ? xsa_ok() : XSA_ERROR_INVALID_VALUE;
}

/* ---- memory pools: the pool layer's calls under the device's lock ---- */

typedef xsa_pool_status (*mempool_call)(xsa_pool *p, xsa_mempool_id id, char *err, size_t errlen);

static xsa_status on_mempool(const char *fn, int device, xsa_mempool_id id, mempool_call call) {
    xsa_status st = check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = call(p, id, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
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
    xsa_status st = check_device("xsa_mempool_use_count", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_mempool_exists(p, id, uses);
    unlock_pool(device);
    return xsa_ok();
}

xsa_status xsa_mempool_create_with_allocator(int device, xsa_mempool_id id, const xsa_mempool_allocator *allocator) {
    xsa_status st = check_device("xsa_mempool_create_with_allocator", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_mempool_create_with(p, id, allocator, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

typedef xsa_pool_status (*mempool_flag_call)(xsa_pool *p, xsa_mempool_id id, bool on, char *err, size_t errlen);

static xsa_status on_mempool_flag(const char *fn, int device, xsa_mempool_id id, bool on, mempool_flag_call call) {
    xsa_status st = check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = call(p, id, on, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

xsa_status xsa_mempool_set_use_on_oom(int device, xsa_mempool_id id, bool use_on_oom) {
    return on_mempool_flag("xsa_mempool_set_use_on_oom", device, id, use_on_oom, xsa_pool_mempool_set_use_on_oom);
}

xsa_status xsa_mempool_set_no_split(int device, xsa_mempool_id id, bool no_split) {
    return on_mempool_flag("xsa_mempool_set_no_split", device, id, no_split, xsa_pool_mempool_set_no_split);
}

xsa_status xsa_begin_allocate_to_pool(int device, xsa_mempool_id id, xsa_stream_filter filter, void *ctx) {
    xsa_status st = check_device("xsa_begin_allocate_to_pool", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    /* Every routing counts as a capture, as in PyTorch, until capture
     * status is read from the driver. */
    xsa_pool_status ps = xsa_pool_begin_allocate_to_pool(p, id, filter, ctx, true, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

xsa_status xsa_end_allocate_to_pool(int device, xsa_mempool_id id) {
    return on_mempool("xsa_end_allocate_to_pool", device, id, xsa_pool_end_allocate_to_pool);
}

xsa_status xsa_mempool_checkpoint(int device, xsa_mempool_id id, xsa_live_block **blocks, size_t *n) {
    if (!blocks || !n) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_mempool_checkpoint: blocks or n is NULL");
    *blocks = NULL;
    *n = 0;
    xsa_status st = check_device("xsa_mempool_checkpoint", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_mempool_checkpoint(p, id, blocks, n, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

xsa_status xsa_mempool_restore(int device, xsa_mempool_id id, const xsa_live_block *live, size_t n,
                               xsa_restore_delta *delta) {
    if (!delta || (n && !live))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_mempool_restore: delta is NULL, or live with n = %zu", n);
    *delta = (xsa_restore_delta){0};
    xsa_status st = check_device("xsa_mempool_restore", device);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = lock_pool(device, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pool_mempool_restore(p, id, live, n, delta, xsa_error_buffer(), XSA_ERROR_MAX);
    unlock_pool(device);
    return ps == XSA_POOL_OK ? xsa_ok() : from_pool(ps);
}

void xsa_restore_delta_free(xsa_restore_delta *delta) {
    if (!delta) return;
    free(delta->freed);
    free(delta->allocated);
    *delta = (xsa_restore_delta){0};
}
