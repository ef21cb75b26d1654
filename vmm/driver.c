/*
 * vmm/driver: entry-point names, call counters, calls in relaxed capture
 * mode, and the one system call in the table (process_get_fds).
 */
#include "vmm/driver.h"

#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Older C libraries lack the numbers; the kernel may have the calls. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

static const char *const entry_names[XSA_DRV_COUNT] = {
#define XSA_DRV_NAME(name) #name,
    XSA_DRIVER_ENTRIES(XSA_DRV_NAME)
#undef XSA_DRV_NAME
};

const char *xsa_driver_entry_name(xsa_driver_entry e) {
    return (unsigned)e < XSA_DRV_COUNT ? entry_names[e] : "?";
}

int xsa_driver_entry_from_name(const char *name) {
    for (int i = 0; i < XSA_DRV_COUNT; i++)
        if (strcmp(entry_names[i], name) == 0) return i;
    return -1;
}

void xsa_driver_read_calls(const xsa_driver *d, uint64_t out[XSA_DRV_COUNT], uint64_t ns[XSA_DRV_COUNT]) {
    for (int i = 0; i < XSA_DRV_COUNT; i++) {
        out[i] = atomic_load_explicit(&d->calls[i], memory_order_relaxed);
        if (ns) ns[i] = atomic_load_explicit(&d->ns[i], memory_order_relaxed);
    }
}

static _Thread_local bool in_background;

bool xsa_driver_background(bool on) {
    bool was = in_background;
    in_background = on;
    return was;
}

bool xsa_driver_in_background(void) { return in_background; }

void xsa_driver_read_background_calls(const xsa_driver *d, uint64_t out[XSA_DRV_COUNT], uint64_t ns[XSA_DRV_COUNT]) {
    for (int i = 0; i < XSA_DRV_COUNT; i++) {
        out[i] = atomic_load_explicit(&d->bg_calls[i], memory_order_relaxed);
        if (ns) ns[i] = atomic_load_explicit(&d->bg_ns[i], memory_order_relaxed);
    }
}

void xsa_driver_reset_calls(xsa_driver *d) {
    for (int i = 0; i < XSA_DRV_COUNT; i++) {
        atomic_store_explicit(&d->calls[i], 0, memory_order_relaxed);
        atomic_store_explicit(&d->ns[i], 0, memory_order_relaxed);
        atomic_store_explicit(&d->bg_calls[i], 0, memory_order_relaxed);
        atomic_store_explicit(&d->bg_ns[i], 0, memory_order_relaxed);
    }
}

void xsa_driver_time_calls(xsa_driver *d, bool on) { atomic_store_explicit(&d->timed, on, memory_order_relaxed); }

uint64_t xsa_driver_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int xsa_driver_relax_capture(xsa_driver *d) {
    int mode = XSA_CAPTURE_MODE_RELAXED;
    return XSA_DRV(d, thread_exchange_capture_mode, &mode) == XSA_CU_SUCCESS ? mode : -1;
}

void xsa_driver_restore_capture(xsa_driver *d, int mode) {
    if (mode >= 0) XSA_DRV(d, thread_exchange_capture_mode, &mode);
}

xsa_cu_result xsa_driver_mem_alloc_relaxed(xsa_driver *d, xsa_devptr *ptr, size_t size, int device) {
    int mode = xsa_driver_relax_capture(d);
    xsa_cu_result r = XSA_DRV(d, mem_alloc, ptr, size, device);
    xsa_driver_restore_capture(d, mode);
    return r;
}

xsa_cu_result xsa_driver_mem_free_relaxed(xsa_driver *d, xsa_devptr ptr) {
    int mode = xsa_driver_relax_capture(d);
    xsa_cu_result r = XSA_DRV(d, mem_free, ptr);
    xsa_driver_restore_capture(d, mode);
    return r;
}

static xsa_cu_result from_errno(int e) {
    switch (e) {
    case EPERM: return XSA_CU_ERROR_NOT_PERMITTED;
    case ESRCH: return XSA_CU_ERROR_NOT_FOUND;
    case EBADF: return XSA_CU_ERROR_INVALID_HANDLE;
    case ENOSYS: return XSA_CU_ERROR_NOT_SUPPORTED;
    case EMFILE: case ENFILE: case ENOMEM: return XSA_CU_ERROR_OUT_OF_MEMORY;
    default: return XSA_CU_ERROR_UNKNOWN;
    }
}

xsa_cu_result xsa_driver_process_get_fds(int pid, const int *fds, int n, int *out) {
    if (pid <= 0 || n < 0 || (n && (!fds || !out))) return XSA_CU_ERROR_INVALID_VALUE;
    long pidfd = syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) return from_errno(errno);
    int got = 0, e = 0;
    for (; got < n; got++) {
        long fd = syscall(SYS_pidfd_getfd, (int)pidfd, fds[got], 0); /* the new fd is close-on-exec */
        if (fd < 0) {
            e = errno;
            break;
        }
        out[got] = (int)fd;
    }
    close((int)pidfd);
    if (got == n) return XSA_CU_SUCCESS;
    while (got > 0) close(out[--got]);
    return from_errno(e);
}
