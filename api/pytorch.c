/*
 * api/pytorch: the functions PyTorch's CUDAPluggableAllocator and the CuPy
 * binding (python/xsalloc) call, over the public API.
 *
 * Design: PyTorch calls a plain C function pointer and cannot be told why an
 * allocation failed, so each entry point turns a failed status into a line on
 * stderr (the thread's xsa_last_error() keeps it too) and a NULL or no-op,
 * never an abort. Every call keeps the thread's current CUDA context: the
 * real driver makes the primary context of the device it works on current,
 * and PyTorch and CuPy use the CUDA runtime, whose current device is the
 * current context's. The driver remembers the thread's context when it
 * first replaces it during a call (xsa_cuda_ctx_watch) and puts it back at
 * the end (xsa_cuda_ctx_restore), so a cache hit, which never reaches the
 * driver, makes no driver call for it. xsa_torch_malloc and xsa_torch_free
 * also feed the lag probe (api/lag_probe.h), one untaken branch when off.
 */
#include "xsalloc/pytorch.h"

#include <stdio.h>

#include "api/internal.h"
#include "api/lag_probe.h"
#include "vmm/driver_cuda.h"

void xsa_torch_report(const char *what, xsa_status st) {
    const char *detail = xsa_last_error();
    fprintf(stderr, "xsalloc: %s failed (%s): %s\n", what, xsa_status_name(st), *detail ? detail : "no detail");
}

xsa_status xsa_ctx_malloc(void **ptr, size_t size, int device, void *stream) {
    xsa_cuda_ctx_watch();
    xsa_status st = xsa_malloc(ptr, size, device, stream);
    xsa_cuda_ctx_restore();
    return st;
}

xsa_status xsa_ctx_free(void *ptr) {
    xsa_cuda_ctx_watch();
    xsa_status st = xsa_free(ptr);
    xsa_cuda_ctx_restore();
    return st;
}

void *xsa_torch_malloc(ssize_t size, int device, void *stream) {
    void *p = NULL;
    if (size < 0) {
        fprintf(stderr, "xsalloc: xsa_torch_malloc: negative size %zd\n", size);
        return NULL;
    }
    xsa_status st = xsa_ctx_malloc(&p, (size_t)size, device, stream);
    if (st != XSA_SUCCESS) xsa_torch_report("xsa_torch_malloc", st);
    xsa_lag_probe_note(device, stream);
    return p;
}

void xsa_torch_free(void *ptr, ssize_t size, int device, void *stream) {
    (void)size;
    xsa_status st = xsa_ctx_free(ptr);
    if (st != XSA_SUCCESS) xsa_torch_report("xsa_torch_free", st);
    xsa_lag_probe_note(device, stream); /* PyTorch passes the block's device and stream */
}

void xsa_torch_record_stream(void *ptr, void *stream) {
    xsa_cuda_ctx_watch();
    xsa_status st = xsa_record_stream(ptr, stream);
    xsa_cuda_ctx_restore();
    if (st != XSA_SUCCESS) xsa_torch_report("xsa_torch_record_stream", st);
}

xsa_status xsa_ctx_empty_cache(void) {
    xsa_cuda_ctx_watch();
    xsa_status st = xsa_empty_cache();
    xsa_cuda_ctx_restore();
    return st;
}

void xsa_torch_empty_cache(void) {
    xsa_status st = xsa_ctx_empty_cache();
    if (st != XSA_SUCCESS) xsa_torch_report("xsa_torch_empty_cache", st);
}

void xsa_torch_set_memory_fraction(double fraction, int device) {
    xsa_cuda_ctx_watch();
    xsa_status st = xsa_set_memory_fraction(fraction, device);
    xsa_cuda_ctx_restore();
    if (st != XSA_SUCCESS) xsa_torch_report("xsa_torch_set_memory_fraction", st);
}

void *xsa_torch_base_alloc(void *ptr, size_t *size) {
    void *base = NULL;
    size_t bytes = 0;
    xsa_cuda_ctx_watch();
    xsa_status st = xsa_get_base_allocation(ptr, &base, &bytes);
    xsa_cuda_ctx_restore();
    if (st != XSA_SUCCESS) xsa_torch_report("xsa_torch_base_alloc", st);
    if (size) *size = bytes;
    return base;
}
