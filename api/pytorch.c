/*
 * api/pytorch: the functions PyTorch's CUDAPluggableAllocator, the torch
 * adapter and the CuPy binding (python/xsalloc) call, over the public API.
 *
 * Design: each entry point keeps the thread's current CUDA context around
 * its call; the xsa_torch_* ones turn a failed status into a line on
 * stderr and a NULL or no-op, never an abort (api/torch_call.h says how
 * and why). Every malloc and free here also feeds the lag probe
 * (api/lag_probe.h), one untaken branch when off: xsa_ctx_malloc and
 * xsa_ctx_free (what the adapter calls) with the call's stream and none,
 * xsa_torch_free with the block's device and stream, which PyTorch passes.
 */
#include "xsalloc/pytorch.h"

#include <stdio.h>

#include "api/lag_probe.h"
#include "api/torch_call.h"

xsa_status xsa_ctx_malloc(void **ptr, size_t size, int device, void *stream) {
    xsa_status st = XSA_KEEPING_CONTEXT(xsa_malloc(ptr, size, device, stream));
    xsa_lag_probe_note(device, stream);
    return st;
}

xsa_status xsa_ctx_free(void *ptr) {
    xsa_status st = XSA_KEEPING_CONTEXT(xsa_free(ptr));
    xsa_lag_probe_note(-1, NULL); /* the block's stream is not known here */
    return st;
}

void *xsa_torch_malloc(ssize_t size, int device, void *stream) {
    void *p = NULL;
    if (size < 0) {
        fprintf(stderr, "xsalloc: xsa_torch_malloc: negative size %zd\n", size);
        return NULL;
    }
    xsa_torch_check("xsa_torch_malloc", xsa_ctx_malloc(&p, (size_t)size, device, stream));
    return p;
}

void xsa_torch_free(void *ptr, ssize_t size, int device, void *stream) {
    (void)size;
    xsa_torch_check("xsa_torch_free", XSA_KEEPING_CONTEXT(xsa_free(ptr)));
    xsa_lag_probe_note(device, stream); /* PyTorch passes the block's device and stream */
}

void xsa_torch_record_stream(void *ptr, void *stream) {
    xsa_torch_check("xsa_torch_record_stream", XSA_KEEPING_CONTEXT(xsa_record_stream(ptr, stream)));
}

xsa_status xsa_ctx_empty_cache(void) { return XSA_KEEPING_CONTEXT(xsa_empty_cache()); }

void xsa_torch_empty_cache(void) { xsa_torch_check("xsa_torch_empty_cache", xsa_ctx_empty_cache()); }

void xsa_torch_set_memory_fraction(double fraction, int device) {
    xsa_torch_check("xsa_torch_set_memory_fraction", XSA_KEEPING_CONTEXT(xsa_set_memory_fraction(fraction, device)));
}

void *xsa_torch_base_alloc(void *ptr, size_t *size) {
    void *base = NULL;
    size_t bytes = 0;
    xsa_torch_check("xsa_torch_base_alloc", XSA_KEEPING_CONTEXT(xsa_get_base_allocation(ptr, &base, &bytes)));
    if (size) *size = bytes;
    return base;
}
