/*
 * api/pause: the public calls of pause and resume (xsalloc/xsalloc.h).
 *
 * Design: a tag is a name at the API and a number (1, 2, ...) in the pool
 * (pool/pause.h); the names live in one table that only grows, under a
 * mutex (a process has a handful). A tag region is a per-thread stack of
 * (tag, flags); while a thread has one open, its allocations through
 * xsa_malloc that no routing takes go to the region's memory pool on that
 * device, id {XSA_REGION_POOL, flags << 32 | tag} (PyTorch's ids never
 * have both halves set), created and tagged on first use. Pause and resume
 * go over the devices in order, each under its lock; the first device that
 * fails stops the call (the devices before it stay done: the message says
 * which). The driver makes each device's context current for its calls:
 * the caller's own comes back at the end (api/torch_call.h), so the
 * current device of torch or CuPy stays. Backup retention is one
 * process-wide switch, as in torch_memory_saver, read at resume.
 */
#include "api/pause.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/devices.h"
#include "api/errors.h"
#include "api/torch_call.h"
#include "pool/pause.h"
#include "pool/pool.h"

#define TAG_MAX 63              /* bytes of a tag's name */
#define REGION_DEPTH 16
#define XSA_REGION_POOL (UINT64_MAX - 1)
#define KNOWN_TAG_FLAGS (XSA_TAG_CPU_BACKUP | XSA_TAG_BACKUP_MMAP)
#define KNOWN_PAUSE_FLAGS (XSA_PAUSE_BACKUP | XSA_PAUSE_DISCARD | XSA_PAUSE_SYNC_DEVICE)

atomic_int xsa_regions_open;
static atomic_int retain_backups;

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char (*names)[TAG_MAX + 1]; /* names[i] is tag i + 1 */
static uint32_t n_names, cap_names;

typedef struct region {
    uint32_t tag, flags;
    char name[TAG_MAX + 1];
} region;

static _Thread_local region regions[REGION_DEPTH];
static _Thread_local int depth;

/* The tag number of `name` (added when `add`), 0 if unknown or out of memory. */
static uint32_t tag_number(const char *name, bool add) {
    pthread_mutex_lock(&names_lock);
    uint32_t tag = 0;
    for (uint32_t i = 0; i < n_names && !tag; i++)
        if (strcmp(names[i], name) == 0) tag = i + 1;
    if (!tag && add) {
        if (n_names == cap_names) {
            uint32_t cap = cap_names ? 2 * cap_names : 8;
            char(*grown)[TAG_MAX + 1] = realloc(names, cap * sizeof *grown);
            if (grown) {
                names = grown;
                cap_names = cap;
            }
        }
        if (n_names < cap_names) {
            snprintf(names[n_names], TAG_MAX + 1, "%s", name);
            tag = ++n_names;
        }
    }
    pthread_mutex_unlock(&names_lock);
    return tag;
}

static xsa_status check_name(const char *fn, const char *tag) {
    if (!tag || !tag[0] || strlen(tag) > TAG_MAX)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "%s: the tag must be a name of 1 to %d bytes", fn, TAG_MAX);
    return XSA_SUCCESS;
}

/* A new tag's number, or the error. */
static xsa_status new_tag(const char *fn, const char *tag, unsigned flags, uint32_t *number) {
    xsa_status st = check_name(fn, tag);
    if (st != XSA_SUCCESS) return st;
    if (flags & ~KNOWN_TAG_FLAGS) return xsa_fail(XSA_ERROR_INVALID_VALUE, "%s: unknown flags %#x", fn, flags);
    if (!(*number = tag_number(tag, true))) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    return XSA_SUCCESS;
}

xsa_status xsa_mempool_set_tag(int device, xsa_mempool_id id, const char *tag, unsigned flags) {
    uint32_t number;
    xsa_status st = new_tag("xsa_mempool_set_tag", tag, flags, &number);
    if (st != XSA_SUCCESS) return st;
    xsa_pool *p;
    if ((st = xsa_api_lock("xsa_mempool_set_tag", device, true, &p)) != XSA_SUCCESS) return st;
    xsa_pool_status ps = xsa_pause_set_tag(p, id, number, tag, flags, xsa_error_buffer(), XSA_ERROR_MAX);
    xsa_api_unlock(device);
    return ps == XSA_POOL_OK ? xsa_ok() : xsa_api_status(ps);
}

xsa_status xsa_tag_region_begin(const char *tag, unsigned flags) {
    uint32_t number;
    xsa_status st = new_tag("xsa_tag_region_begin", tag, flags, &number);
    if (st != XSA_SUCCESS) return st;
    if (depth == REGION_DEPTH)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_tag_region_begin: regions nest %d deep at most", REGION_DEPTH);
    region *r = &regions[depth++];
    *r = (region){number, flags, ""};
    snprintf(r->name, sizeof r->name, "%s", tag);
    if (depth == 1) atomic_fetch_add(&xsa_regions_open, 1);
    return xsa_ok();
}

xsa_status xsa_tag_region_end(void) {
    if (depth == 0) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_tag_region_end: no tag region is open on this thread");
    if (--depth == 0) atomic_fetch_sub(&xsa_regions_open, 1);
    return xsa_ok();
}

xsa_pool_status xsa_region_malloc(xsa_pool *p, size_t size, void *stream, void **out, char *err, size_t errlen) {
    if (depth == 0) return xsa_pool_malloc(p, size, stream, out, err, errlen);
    const region *r = &regions[depth - 1];
    xsa_mempool_id id = {XSA_REGION_POOL, (uint64_t)r->flags << 32 | r->tag};
    return xsa_pool_malloc_in_region(p, id, r->tag, r->name, r->flags, size, stream, out, err, errlen);
}

/* The pool-level tag of `tag` (0: every tag); false for a name never used
 * (nothing carries it: the call has nothing to do). */
static bool existing_tag(const char *tag, uint32_t *number) {
    *number = tag ? tag_number(tag, false) : 0;
    return !tag || *number;
}

typedef xsa_pool_status (*device_call)(xsa_pool *p, uint32_t tag, unsigned arg, char *err, size_t errlen);

/* Calls fn on every device's pool, stopping at the first error, which
 * names the device and the devices already done. */
static xsa_status each_device(const char *what, const char *tag, uint32_t number, unsigned arg, device_call fn) {
    xsa_status st = xsa_api_ensure_init();
    if (st != XSA_SUCCESS) return st;
    for (int d = 0; d < xsa_devices.devices; d++) {
        xsa_pool *p;
        if ((st = xsa_api_lock(what, d, false, &p)) != XSA_SUCCESS) return st;
        xsa_pool_status ps = p ? fn(p, number, arg, xsa_error_buffer(), XSA_ERROR_MAX) : XSA_POOL_OK;
        xsa_api_unlock(d);
        if (ps == XSA_POOL_OK) continue;
        char detail[XSA_ERROR_MAX];
        snprintf(detail, sizeof detail, "%s", xsa_error_buffer());
        st = xsa_api_status(ps);
        return xsa_fail(st, "%s(%s%s%s): %s%s", what, tag ? "'" : "", tag ? tag : "NULL", tag ? "'" : "", detail,
                        d ? " (the devices before this one are done)" : "");
    }
    return xsa_ok();
}

static xsa_pool_status pause_on(xsa_pool *p, uint32_t tag, unsigned flags, char *err, size_t errlen) {
    return xsa_pause_tag(p, tag, flags, err, errlen);
}

static xsa_pool_status resume_on(xsa_pool *p, uint32_t tag, unsigned retain, char *err, size_t errlen) {
    return xsa_resume_tag(p, tag, retain != 0, err, errlen);
}

xsa_status xsa_pause(const char *tag, unsigned flags) {
    uint32_t number;
    if (tag && check_name("xsa_pause", tag) != XSA_SUCCESS) return XSA_ERROR_INVALID_VALUE;
    if (flags & ~KNOWN_PAUSE_FLAGS) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_pause: unknown flags %#x", flags);
    if ((flags & XSA_PAUSE_BACKUP) && (flags & XSA_PAUSE_DISCARD))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_pause: XSA_PAUSE_BACKUP and XSA_PAUSE_DISCARD together");
    if (!existing_tag(tag, &number)) return xsa_ok();
    return XSA_KEEPING_CONTEXT(each_device("xsa_pause", tag, number, flags, pause_on));
}

xsa_status xsa_resume(const char *tag) {
    uint32_t number;
    if (tag && check_name("xsa_resume", tag) != XSA_SUCCESS) return XSA_ERROR_INVALID_VALUE;
    if (!existing_tag(tag, &number)) return xsa_ok();
    return XSA_KEEPING_CONTEXT(each_device("xsa_resume", tag, number, (unsigned)atomic_load(&retain_backups), resume_on));
}

xsa_status xsa_paused_bytes(int device, const char *tag, size_t *bytes) {
    if (!bytes) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_paused_bytes: bytes is NULL");
    *bytes = 0;
    uint32_t number;
    if (tag && check_name("xsa_paused_bytes", tag) != XSA_SUCCESS) return XSA_ERROR_INVALID_VALUE;
    xsa_pool *p;
    xsa_status st = xsa_api_lock("xsa_paused_bytes", device, false, &p);
    if (st != XSA_SUCCESS) return st;
    if (p && existing_tag(tag, &number)) *bytes = xsa_pause_paused_bytes(p, number);
    xsa_api_unlock(device);
    return xsa_ok();
}

xsa_status xsa_cpu_backup(const void *ptr, size_t size, void **host) {
    if (!host) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_cpu_backup: host is NULL");
    *host = NULL;
    xsa_status st = xsa_api_ensure_init();
    if (st != XSA_SUCCESS) return st;
    for (int d = 0; d < xsa_devices.devices; d++) {
        xsa_pool *p;
        if ((st = xsa_api_lock("xsa_cpu_backup", d, false, &p)) != XSA_SUCCESS) return st;
        xsa_pool_status ps = p ? xsa_pause_cpu_backup(p, (uintptr_t)ptr, size, host, xsa_error_buffer(), XSA_ERROR_MAX)
                               : XSA_POOL_BAD_POINTER;
        xsa_api_unlock(d);
        if (ps == XSA_POOL_OK) return xsa_ok();
        if (ps != XSA_POOL_BAD_POINTER) return xsa_api_status(ps);
    }
    return xsa_fail(XSA_ERROR_INVALID_POINTER, "xsa_cpu_backup(%p): not in a live allocation of xsalloc", ptr);
}

xsa_status xsa_last_pause_report(int device, int resume, xsa_pause_report *out) {
    if (!out) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_last_pause_report: out is NULL");
    *out = (xsa_pause_report){0};
    xsa_pool *p;
    xsa_status st = xsa_api_lock("xsa_last_pause_report", device, false, &p);
    if (st != XSA_SUCCESS) return st;
    if (p) *out = xsa_pause_last_report(p, resume != 0);
    xsa_api_unlock(device);
    return xsa_ok();
}

xsa_status xsa_set_backup_retention(int retain) {
    atomic_store(&retain_backups, retain != 0);
    return xsa_ok();
}

xsa_status xsa_get_backup_retention(int *retain) {
    if (!retain) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_get_backup_retention: retain is NULL");
    *retain = atomic_load(&retain_backups);
    return xsa_ok();
}
