/*
 * api/devices: start-up, the device table, its locks and pools (design in
 * devices.h).
 *
 * Design: start-up has two steps. Configuring parses the settings (the
 * string given, or the environment's: api/config_env.h) and names the
 * PyTorch keys it cannot honour on stderr (one line); it touches no driver.
 * Starting picks the driver, initialises it, counts devices and starts the
 * lag probe if XSALLOC_LAG_PROBE names a file (api/lag_probe.h). xsa_init
 * does both; xsa_configure only the first, and the first call that needs a
 * device starts (so a process may still choose its GPUs, or fork, until
 * then); calls that need only the settings (xsa_get_settings, run-time
 * settings) configure without starting. Start-up and shutdown hold one
 * mutex; they must not run concurrently with other calls. Settings changed
 * at run time (api/settings.c) are applied with that mutex and every
 * device's lock held; the mutex guards what they change.
 *
 * A fork (api/fork.c's handlers) holds the mutex across the fork, so the
 * child gets it free. A child forked after the driver started cannot use
 * it (CUDA cannot be initialised again in a forked child): the child
 * forgets the parent's pools without touching them, every call that needs
 * a device fails saying so, as PyTorch does, and xsa_free of the parent's
 * memory does nothing. A child forked before the start starts its own, as
 * does a forked child that picks the simulated driver (xsa_use_driver),
 * which holds no CUDA state: tests stand for another process so.
 */
#include "api/devices.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "api/config.h"
#include "api/config_env.h"
#include "api/errors.h"
#include "api/lag_probe.h"
#include "api/ranges.h"
#include "pool/jobs.h"
#include "pool/pool.h"
#include "pool/settings.h"
#include "pool/trace.h"
#include "vmm/driver_cuda.h"
#include "xsalloc/sim.h"

xsa_device_table xsa_devices;

/* What only start-up, pool creation and shutdown read. */
static struct {
    pthread_mutex_t init_lock;
    const char *forced_driver; /* xsa_use_driver */
    bool configured;           /* config holds the settings (ready implies it) */
    xsa_config config;
    const char *conf_source;   /* see xsa_api_conf_source */
    char *conf_text;           /* a copy: the environment may change */
    const char *under_source;  /* PyTorch's variable XSALLOC_CONF layers over, or NULL */
    char *under_text;
    pid_t forked_from;         /* in a child forked after the start: the parent */
    xsa_observer_fn observer;  /* what new pools get (xsa_devices_set_observer) */
    void (*helper_wake)(void *ctx, int device); /* what new pools get (xsa_devices_set_helper_wake) */
    /* The strings given at run time (xsa_api_change_options), one copy of
     * each, kept until xsa_shutdown as xsa_settings promises; the last. */
    char **texts;
    size_t n_texts;
    const char *runtime_text;
} g = {.init_lock = PTHREAD_MUTEX_INITIALIZER};

xsa_status xsa_use_driver(const char *name) {
    if (name && strcmp(name, "cuda") != 0 && strcmp(name, "sim") != 0)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_use_driver(\"%s\"): the driver is 'cuda' or 'sim'", name);
    pthread_mutex_lock(&g.init_lock);
    bool ready = atomic_load(&xsa_devices.ready);
    if (!ready) g.forced_driver = name && strcmp(name, "cuda") == 0 ? "cuda" : name ? "sim" : NULL;
    /* The simulator holds no CUDA state: a forked child that picks it
     * starts afresh (tests stand for another process so). */
    if (!ready && g.forced_driver && strcmp(g.forced_driver, "sim") == 0) g.forked_from = 0;
    pthread_mutex_unlock(&g.init_lock);
    if (ready) return xsa_fail(XSA_ERROR_ALREADY_INITIALIZED, "xsa_use_driver: already initialised; call xsa_shutdown first");
    return xsa_ok();
}

xsa_driver *xsa_driver_default(char *err, size_t errlen) {
    const char *forced = getenv("XSA_DRIVER");
    if (forced && strcmp(forced, "sim") == 0) return xsa_driver_sim();
    if (forced && strcmp(forced, "cuda") == 0) return xsa_driver_cuda(err, errlen);
    if (forced && *forced) {
        if (err) snprintf(err, errlen, "XSA_DRIVER='%s' is not a driver: use 'cuda' or 'sim'", forced);
        return NULL;
    }
    xsa_driver *cuda = xsa_driver_cuda(NULL, 0);
    return cuda ? cuda : xsa_driver_sim();
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

/* Forgets the configuration (init_lock held). */
static void unconfigure_locked(void) {
    free(g.conf_text);
    free(g.under_text);
    g.conf_text = g.under_text = NULL;
    g.conf_source = g.under_source = NULL;
    g.configured = false;
}

/* Parses the settings: `conf`, or the environment's when NULL (init_lock
 * held, not configured). */
static xsa_status configure_locked(const char *conf) {
    char why[2048];
    xsa_config cfg;
    const char *source = "xsa_init", *text = conf, *under = NULL, *under_text = NULL, *who = "configuration";
    if (conf) {
        if (!xsa_config_parse(conf, &cfg, why, sizeof why)) return xsa_fail(XSA_ERROR_CONFIG, "configuration: %s", why);
    } else {
        xsa_config_var over, torch;
        if (!xsa_config_from_env(&cfg, &over, &torch, why, sizeof why)) return xsa_fail(XSA_ERROR_CONFIG, "%s", why);
        source = over.text ? over.name : torch.text ? torch.name : NULL;
        text = over.text ? over.text : torch.text;
        if (over.text && torch.text) under = torch.name, under_text = torch.text;
        who = source;
        if (under && snprintf(why, sizeof why, "%s over %s", source, under) > 0) who = why;
    }
    char *copy = text ? strdup(text) : NULL, *under_copy = under_text ? strdup(under_text) : NULL;
    if ((text && !copy) || (under_text && !under_copy)) {
        free(copy);
        free(under_copy);
        return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_init: out of host memory");
    }
    if (cfg.ignored[0]) xsa_config_name_ignored(who, cfg.ignored);
    g.config = cfg;
    g.conf_source = source, g.conf_text = copy;
    g.under_source = under, g.under_text = under_copy;
    g.configured = true;
    return XSA_SUCCESS;
}

/* Picks and initialises the driver and counts the devices (init_lock
 * held, configured, not started). */
static xsa_status start_locked(void) {
    if (g.forked_from)
        return xsa_fail(XSA_ERROR_NO_DRIVER,
                        "Cannot re-initialize CUDA in forked subprocess: xsalloc started the CUDA driver in the "
                        "parent process (pid %d) before this process was forked from it, and a forked child cannot "
                        "use it. To use CUDA with multiprocessing, use the 'spawn' start method, or fork before the "
                        "first CUDA allocation",
                        (int)g.forked_from);
    xsa_driver *d = pick_driver();
    if (!d) return XSA_ERROR_NO_DRIVER;
    xsa_cu_result r = XSA_DRV(d, init);
    int count = 0;
    if (r == XSA_CU_SUCCESS) r = XSA_DRV(d, device_get_count, &count);
    if (r != XSA_CU_SUCCESS)
        return xsa_fail(XSA_ERROR_NO_DRIVER, "%s driver: initialisation failed: %s", d->name, d->error_string(r));
    if (count <= 0) return xsa_fail(XSA_ERROR_NO_DRIVER, "%s driver: no device", d->name);
    xsa_status st = xsa_lag_probe_start(getenv("XSALLOC_LAG_PROBE"), d);
    if (st != XSA_SUCCESS) return st;
    xsa_devices.drv = d;
    xsa_devices.devices = count < XSA_MAX_DEVICES ? count : XSA_MAX_DEVICES;
    for (int i = 0; i < xsa_devices.devices; i++) {
        atomic_init(&xsa_devices.slot[i].lock.state, 0);
        atomic_init(&xsa_devices.slot[i].lock.sleepers, 0);
        atomic_init(&xsa_devices.slot[i].lock.callback_thread, 0);
        xsa_devices.slot[i].pool = NULL;
        xsa_devices.slot[i].pending_fraction = -1;
    }
    atomic_store_explicit(&xsa_devices.ready, true, memory_order_release);
    return XSA_SUCCESS;
}

/* Configures (from `conf`, or the environment) if need be, then starts
 * (init_lock held). On a failure, a configuration made here is forgotten,
 * as if the call had not happened. */
static xsa_status start_configuring_locked(const char *conf) {
    bool here = !g.configured;
    xsa_status st = here ? configure_locked(conf) : XSA_SUCCESS;
    if (st == XSA_SUCCESS) st = start_locked();
    if (st != XSA_SUCCESS && here && g.configured) unconfigure_locked();
    return st;
}

xsa_status xsa_init(const char *conf) {
    pthread_mutex_lock(&g.init_lock);
    xsa_status st = g.configured ? xsa_fail(XSA_ERROR_ALREADY_INITIALIZED,
                                            "xsa_init: already initialised; call xsa_shutdown first")
                                 : start_configuring_locked(conf);
    pthread_mutex_unlock(&g.init_lock);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_configure(const char *conf) {
    pthread_mutex_lock(&g.init_lock);
    xsa_status st = g.configured ? xsa_fail(XSA_ERROR_ALREADY_INITIALIZED,
                                            "xsa_configure: already initialised; call xsa_shutdown first")
                                 : configure_locked(conf);
    pthread_mutex_unlock(&g.init_lock);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_devices_start(void) {
    pthread_mutex_lock(&g.init_lock);
    xsa_status st = atomic_load(&xsa_devices.ready) ? XSA_SUCCESS : start_configuring_locked(NULL);
    pthread_mutex_unlock(&g.init_lock);
    return st;
}

/* Configures from the environment unless configured: what the calls that
 * need only the settings do. With init_lock held on success. */
static xsa_status lock_configured(void) {
    pthread_mutex_lock(&g.init_lock);
    xsa_status st = g.configured ? XSA_SUCCESS : configure_locked(NULL);
    if (st != XSA_SUCCESS) pthread_mutex_unlock(&g.init_lock);
    return st;
}

bool xsa_devices_forked(void) { return g.forked_from != 0; }

xsa_driver *xsa_active_driver(void) { return xsa_api_ensure_init() == XSA_SUCCESS ? xsa_devices.drv : NULL; }

const char *xsa_driver_name(void) { return xsa_api_ensure_init() == XSA_SUCCESS ? xsa_devices.drv->name : "none"; }

xsa_status xsa_device_count(int *count) {
    if (!count) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_device_count: count is NULL");
    xsa_status st = xsa_api_ensure_init();
    if (st != XSA_SUCCESS) return st;
    *count = xsa_devices.devices;
    return xsa_ok();
}

xsa_status xsa_devices_check_slow(const char *fn, int device) {
    xsa_status st = xsa_api_ensure_init();
    if (st != XSA_SUCCESS) return st;
    int n = xsa_devices.devices;
    if (device < 0 || device >= n)
        return xsa_fail(XSA_ERROR_INVALID_DEVICE, "%s: device %d does not exist (%d device%s)", fn, device, n,
                        n == 1 ? "" : "s");
    return XSA_SUCCESS;
}

xsa_status xsa_api_status(xsa_pool_status ps) {
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

xsa_status xsa_devices_create_pool(int device) {
    xsa_device_slot *s = xsa_api_slot(device);
    const char *warning = NULL;
    xsa_pool_options opt = g.config.pool;
    if (s->pending_fraction >= 0) opt.memory_fraction = s->pending_fraction;
    xsa_pool_status ps =
        xsa_pool_create(&s->pool, xsa_devices.drv, device, &opt, &warning, xsa_error_buffer(), XSA_ERROR_MAX);
    if (ps != XSA_POOL_OK) {
        s->pool = NULL;
        xsa_device_lock_release(&s->lock);
        return xsa_api_status(ps);
    }
    if (warning) fprintf(stderr, "xsalloc: warning: device %d: %s\n", device, warning);
    xsa_device_lock_clear_waits(&s->lock); /* statistics start with the pool: none of an earlier one's */
    xsa_pool_set_listener(s->pool, &(xsa_pool_listener){range_reserved, range_released, NULL});
    xsa_pool_set_observer(s->pool, g.observer, NULL);
    xsa_pool_set_helper(s->pool, g.helper_wake, NULL);
    return XSA_SUCCESS;
}

xsa_status xsa_api_reentered(const char *fn, int device) {
    return xsa_fail(XSA_ERROR_NOT_SUPPORTED,
                    "%s: called from a memory hook or trace callback that device %d's allocator runs on this thread, "
                    "in the middle of a call that holds the device: a callback may read statistics (xsa_get_stats, "
                    "xsa_cache_info) but not call anything else of xsalloc on that device",
                    fn, device);
}

xsa_status xsa_api_lock(const char *fn, int device, bool create, xsa_pool **pool) {
    xsa_status st = xsa_api_check_device(fn, device);
    if (st != XSA_SUCCESS) return st;
    if (create) return xsa_api_lock_pool(fn, device, pool);
    xsa_device_slot *s = xsa_api_slot(device);
    if (!xsa_device_lock_acquire(&s->lock)) return XSA_API_REENTERED(fn, device);
    *pool = s->pool;
    return XSA_SUCCESS;
}

void xsa_api_options(xsa_pool_options *out) {
    pthread_mutex_lock(&g.init_lock);
    *out = g.config.pool;
    pthread_mutex_unlock(&g.init_lock);
}

const char *xsa_api_conf_source(const char **text, const char **under, const char **under_text) {
    pthread_mutex_lock(&g.init_lock);
    const char *source = g.conf_source;
    *text = g.conf_text;
    *under = g.under_source;
    *under_text = g.under_text;
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

xsa_status xsa_api_change_options(xsa_options_merge merge, void *ctx, const char *text, bool apply) {
    xsa_status st = lock_configured();
    if (st != XSA_SUCCESS) return st;
    xsa_pool_options next;
    const char *kept = NULL;
    st = merge(&g.config.pool, &next, ctx);
    if (st == XSA_SUCCESS && apply && !(kept = keep_text(text)))
        st = xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_set_allocator_settings: out of host memory");
    if (st != XSA_SUCCESS) {
        pthread_mutex_unlock(&g.init_lock);
        return st;
    }
    /* Not started: no pool yet, the pools made at the start take them. */
    int n = atomic_load(&xsa_devices.ready) ? xsa_devices.devices : 0, locked = 0;
    while (locked < n && xsa_device_lock_acquire(&xsa_api_slot(locked)->lock)) locked++;
    if (locked < n) st = xsa_api_reentered("xsa_set_allocator_settings", locked);
    /* Whether a device can map virtual memory is the one thing to ask, and
     * the one step that can fail: asked of every pool before any changes. */
    for (int d = 0; d < n && st == XSA_SUCCESS; d++) {
        xsa_pool *p = xsa_devices.slot[d].pool;
        if (p && next.expandable_segments) {
            xsa_pool_status ps = xsa_pool_probe_vmm(p, xsa_error_buffer(), XSA_ERROR_MAX);
            if (ps != XSA_POOL_OK) st = xsa_api_status(ps);
        }
    }
    for (int d = 0; d < n && st == XSA_SUCCESS && apply; d++) {
        xsa_pool *p = xsa_devices.slot[d].pool;
        const char *warning = p ? xsa_pool_set_options(p, &next) : NULL;
        if (warning) fprintf(stderr, "xsalloc: warning: device %d: %s\n", d, warning);
    }
    if (st == XSA_SUCCESS && apply) {
        g.config.pool = next;
        g.runtime_text = kept;
    }
    for (int d = locked - 1; d >= 0; d--) xsa_device_lock_release(&xsa_devices.slot[d].lock);
    pthread_mutex_unlock(&g.init_lock);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_get_settings(xsa_settings *out) {
    if (!out) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_settings: out is NULL");
    xsa_status st = lock_configured();
    if (st != XSA_SUCCESS) return st;
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
        .helper_thread = o->helper_thread,
        .page_decay_ms = o->page_decay_ms,
    };
    memcpy(out->roundup_power2_divisions, o->roundup_power2_divisions, sizeof out->roundup_power2_divisions);
    pthread_mutex_unlock(&g.init_lock);
    return xsa_ok();
}

void xsa_devices_set_observer(xsa_observer_fn fn) {
    g.observer = fn;
    for (int d = 0; d < xsa_devices.devices; d++)
        if (xsa_devices.slot[d].pool) xsa_pool_set_observer(xsa_devices.slot[d].pool, fn, NULL);
}

void xsa_devices_set_helper_wake(void (*wake)(void *ctx, int device)) {
    g.helper_wake = wake;
    for (int d = 0; d < xsa_devices.devices; d++)
        if (xsa_devices.slot[d].pool) xsa_pool_set_helper(xsa_devices.slot[d].pool, wake, NULL);
}

xsa_devices_phase xsa_devices_hold_startup(void) {    pthread_mutex_lock(&g.init_lock);
    return atomic_load(&xsa_devices.ready) ? XSA_DEVICES_STARTED
           : g.configured                  ? XSA_DEVICES_CONFIGURED
                                           : XSA_DEVICES_OFF;
}

void xsa_devices_stop(void) {
    for (int i = 0; i < xsa_devices.devices; i++) {
        if (xsa_devices.slot[i].pool) xsa_pool_destroy(xsa_devices.slot[i].pool);
        xsa_devices.slot[i].pool = NULL;
    }
    if (!g.forked_from) xsa_ranges_clear(); /* a forked child's may be mid-change: left */
    g.observer = NULL;
    atomic_store(&xsa_devices.ready, false);
    unconfigure_locked();
    for (size_t i = 0; i < g.n_texts; i++) free(g.texts[i]);
    free(g.texts);
    g.texts = NULL, g.n_texts = 0, g.runtime_text = NULL;
    xsa_devices.drv = NULL;
    xsa_devices.devices = 0;
}

void xsa_devices_release_startup(void) { pthread_mutex_unlock(&g.init_lock); }

/* ---- fork (api/fork.c registers these with pthread_atfork) ---- */

void xsa_devices_fork_prepare(void) { pthread_mutex_lock(&g.init_lock); }

void xsa_devices_fork_parent(void) { pthread_mutex_unlock(&g.init_lock); }

void xsa_devices_fork_child(void) {
    if (atomic_load(&xsa_devices.ready)) {
        /* The parent's pools, driver handles and locks are the parent's:
         * forgotten, never touched (their memory is the parent's copy). */
        for (int i = 0; i < xsa_devices.devices; i++) {
            xsa_device_slot *s = &xsa_devices.slot[i];
            s->pool = NULL;
            atomic_store(&s->lock.state, 0);
            atomic_store(&s->lock.sleepers, 0);
            atomic_store(&s->lock.callback_thread, 0);
        }
        xsa_lag_probe_forget();
        g.observer = NULL;
        g.forked_from = getppid();
        xsa_devices.devices = 0;
        atomic_store(&xsa_devices.ready, false);
    }
    pthread_mutex_unlock(&g.init_lock);
}
