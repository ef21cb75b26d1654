/*
 * api/observe: the observer attached to every pool while trace recording is
 * on or memory hooks are registered: it keeps one ring of recent events per
 * device and calls the hooks. Internal to api/ (and tests).
 */
#ifndef XSA_API_OBSERVE_H
#define XSA_API_OBSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/driver.h"
#include "xsalloc/xsalloc.h"

/* xsa_action and xsa_history_entry are public (xsalloc/xsalloc.h). */

/* PyTorch's name of an action ("alloc", "segment_map", ...); NULL for
 * record_stream, which PyTorch has not. */
const char *xsa_action_name(xsa_action a);

/* Copies `device`'s ring, oldest first, into a malloc'd array (*out NULL
 * when empty). Call with the device's lock held. False if out of host memory. */
bool xsa_history_copy(int device, xsa_history_entry **out, size_t *n);

/* Forgets the rings, the hooks and the trace callback (xsa_shutdown, with
 * no other call running). */
void xsa_observe_shutdown(void);

#endif
