/*
 * pool/settings: the pool's options changed at run time (design in
 * settings.c).
 */
#ifndef XSA_POOL_SETTINGS_H
#define XSA_POOL_SETTINGS_H

#include <stddef.h>

#include "pool/options.h"
#include "pool/types.h"

/* New options at run time (the API decides which may change: not
 * peer_access, ipc_handles nor handle_size; the memory fraction stays the
 * pool's own). Each applies from the next request on, as in PyTorch;
 * expandable_segments decides where new memory goes (segments of the other
 * kind keep their blocks until released; with it off no request is placed
 * in an expandable segment). Asks the device nothing: with
 * expandable_segments set, call xsa_pool_probe_vmm first. Returns a
 * sentence to print when the device cannot do what was asked (no virtual
 * memory management: classic segments), else NULL. */
const char *xsa_pool_set_options(xsa_pool *p, const xsa_pool_options *opt);
/* Asks the device, once, whether it can map virtual memory (for
 * xsa_pool_set_options); XSA_POOL_DRIVER_ERROR if the driver fails. */
xsa_pool_status xsa_pool_probe_vmm(xsa_pool *p, char *err, size_t errlen);

#endif
