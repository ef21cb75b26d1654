/*
 * api/driver_calls: the CUDA driver's call counts and time, for programs
 * that want to know what the allocator spent in the driver (real runs:
 * benchmarks/gpu/real_bench.py).
 *
 * Design: the driver table already counts every call per entry point and,
 * when asked, adds up the time spent in each (vmm/driver.h); this exposes
 * both as one JSON object, so callers need no struct that grows with the
 * table. Timing is off by default: it adds two clock reads per driver call.
 * Each entry point also gives the part of its calls and time that the
 * helper's rounds made, so the allocation path's share is the rest.
 */
#include <stdio.h>

#include "api/devices.h"
#include "api/errors.h"
#include "vmm/driver.h"
#include "xsalloc/xsalloc.h"

/* The initialised library's driver, or initialisation's error. */
static xsa_status driver(xsa_driver **d) {
    int devices;
    xsa_status st = xsa_device_count(&devices);
    if (st != XSA_SUCCESS) return st;
    *d = xsa_active_driver();
    return XSA_SUCCESS;
}

xsa_status xsa_time_driver_calls(int enabled) {
    xsa_driver *d;
    xsa_status st = driver(&d);
    if (st != XSA_SUCCESS) return st;
    xsa_driver_time_calls(d, enabled != 0);
    return xsa_ok();
}

xsa_status xsa_driver_calls_json(char *buf, size_t len, size_t *needed) {
    if (!needed || (!buf && len))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_driver_calls_json: needed is NULL, or buf is NULL with len > 0");
    xsa_driver *d;
    xsa_status st = driver(&d);
    if (st != XSA_SUCCESS) return st;
    uint64_t calls[XSA_DRV_COUNT], ns[XSA_DRV_COUNT], bg_calls[XSA_DRV_COUNT], bg_ns[XSA_DRV_COUNT];
    xsa_driver_read_background_calls(d, bg_calls, bg_ns); /* first: never more than the totals read after */
    xsa_driver_read_calls(d, calls, ns);
    size_t at = 0;
    /* snprintf counts what it would write, so `at` ends as the full length. */
#define PUT(...) at += (size_t)snprintf(at < len ? buf + at : NULL, at < len ? len - at : 0, __VA_ARGS__)
    PUT("{");
    const char *sep = "";
    for (int i = 0; i < XSA_DRV_COUNT; i++) {
        if (!calls[i]) continue;
        PUT("%s\"%s\": [%llu, %.1f, %llu, %.1f]", sep, xsa_driver_entry_name((xsa_driver_entry)i),
            (unsigned long long)calls[i], ns[i] / 1e3, (unsigned long long)bg_calls[i], bg_ns[i] / 1e3);
        sep = ", ";
    }
    PUT("}");
#undef PUT
    *needed = at + 1;
    if (at >= len) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_driver_calls_json: buf too small (see *needed)");
    return xsa_ok();
}
