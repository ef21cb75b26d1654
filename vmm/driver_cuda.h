/*
 * vmm/driver_cuda: the real CUDA driver's table (libcuda.so.1 is dlopen'd,
 * never linked), and the calling thread's context kept across a call.
 */
#ifndef XSA_VMM_DRIVER_CUDA_H
#define XSA_VMM_DRIVER_CUDA_H

#include <stddef.h>

#include "vmm/driver.h"

/*
 * The real driver. Returns NULL and fills err (if not NULL, at most errlen
 * bytes) with a sentence when libcuda.so.1 cannot be loaded, an entry point
 * is missing, cuInit fails or there is no device. Idempotent.
 */
xsa_driver *xsa_driver_cuda(char *err, size_t errlen);

/*
 * The calling thread's CUDA context across a call (xsalloc/pytorch.h
 * keeps it): after watch, the first time the real driver makes a device's
 * primary context current it remembers the context the thread had, and
 * restore makes that one current again and ends the watch. A call that
 * never reached the driver (a cache hit) costs no driver call.
 */
void xsa_cuda_ctx_watch(void);
void xsa_cuda_ctx_restore(void);

#endif
