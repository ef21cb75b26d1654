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

typedef enum xsa_action {
    XSA_ACT_ALLOC,
    XSA_ACT_FREE_REQUESTED,
    XSA_ACT_FREE_COMPLETED,
    XSA_ACT_SEGMENT_ALLOC,
    XSA_ACT_SEGMENT_FREE,
    XSA_ACT_SEGMENT_MAP,
    XSA_ACT_SEGMENT_UNMAP,
    XSA_ACT_OOM,
    XSA_ACT_RECORD_STREAM, /* xsalloc's own: not a PyTorch action */
} xsa_action;

typedef struct xsa_history_entry {
    xsa_action action;
    uintptr_t addr;   /* oom: the device's free bytes */
    size_t size;      /* alloc, free_*, record_stream: requested bytes */
    xsa_stream stream;
    uint64_t time_ns; /* CLOCK_MONOTONIC */
} xsa_history_entry;

/* PyTorch's name of an action ("alloc", "segment_map", ...); NULL for
 * record_stream, which PyTorch has not. */
const char *xsa_action_name(xsa_action a);

/* Copies `device`'s ring, oldest first, into a malloc'd array (*out NULL
 * when empty). Call with the device's lock held. False if out of host memory. */
bool xsa_history_copy(int device, xsa_history_entry **out, size_t *n);

#endif
