/*
 * api/internal: what the benchmarks and tests may ask of the allocator
 * beyond the public header.
 */
#ifndef XSA_API_INTERNAL_H
#define XSA_API_INTERNAL_H

#include <stdbool.h>

#include "api/xsalloc.h"
#include "pool/pool.h"
#include "vmm/driver.h"

#define XSA_MAX_DEVICES 64

/* The driver table in use (initialises if needed); NULL if none. */
xsa_driver *xsa_active_driver(void);

/* For the api/ files beside allocator.c. XSA_SUCCESS if xsalloc is
 * initialised (initialising it if need be) and `device` exists, else the
 * error, naming `fn`. */
xsa_status xsa_api_check_device(const char *fn, int device);
/* Locks `device` (initialising and checking it; `fn` names the caller in
 * errors) and gives its pool: created on first use when `create`, else
 * NULL if it does not exist yet. On success the lock is held until
 * xsa_api_unlock(device). */
xsa_status xsa_api_lock(const char *fn, int device, bool create, xsa_pool **pool);
void xsa_api_unlock(int device);
/* The configuration in use (initialised), copied. */
void xsa_api_options(xsa_pool_options *out);
/* Where it came from at initialisation: "xsa_init" for the string given to
 * xsa_init, else the environment variable's name (api/config.h's
 * xsa_config_env), or NULL when none was set; *text gets the string (NULL
 * with NULL). */
const char *xsa_api_conf_source(const char **text);
/* The last settings string given at run time (xsa_set_allocator_settings),
 * or NULL; valid until xsa_shutdown. */
const char *xsa_api_runtime_settings(void);
/* For api/settings.c. Initialises if needed; then, under the lock that
 * guards the configuration, merge() decides the new options from the
 * current ones (or fails, the error set, and nothing changes); with every
 * device locked, each device's pool takes them (xsa_pool_set_options) and
 * pools created later get them; `text` becomes the settings string
 * reported (xsa_get_settings, summaries, snapshots). */
typedef xsa_status (*xsa_options_merge)(const xsa_pool_options *current, xsa_pool_options *next, void *ctx);
xsa_status xsa_api_change_options(xsa_options_merge merge, void *ctx, const char *text);

/* api/summary.c: the summary text of `stats` (malloc'd; NULL if out of
 * host memory). */
char *xsa_format_summary(const xsa_device_stats *stats, int device, int abbreviated);

/* api/observe.c: called by allocator.c with the device's lock held when a
 * pool is created, and at shutdown (no other call running). */
void xsa_observe_attach(xsa_pool *pool);
void xsa_observe_shutdown(void);

/* A failed PyTorch entry point's line on stderr (api/pytorch.c): PyTorch
 * cannot be told why otherwise. */
void xsa_torch_report(const char *what, xsa_status st);

#endif
