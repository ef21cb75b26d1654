/*
 * api/torch_call: what every PyTorch entry point (api/pytorch.c,
 * api/torch_graphs.c) does around its call: keep the calling thread's
 * CUDA context, and turn a failure into a line on stderr.
 *
 * Design: PyTorch calls plain C function pointers and cannot be told why a
 * call failed, so a failed status becomes "xsalloc: <what> failed
 * (<status>): <sentence>" on stderr (xsa_last_error() keeps the sentence
 * too), never an abort. The real driver makes the primary context of the
 * device it works on current, and PyTorch and CuPy use the CUDA runtime,
 * whose current device is the current context's: the driver remembers the
 * thread's context when it first replaces it during a call
 * (xsa_cuda_ctx_watch) and puts it back at the end (xsa_cuda_ctx_restore),
 * so a cache hit, which never reaches the driver, makes no driver call.
 */
#ifndef XSA_API_TORCH_CALL_H
#define XSA_API_TORCH_CALL_H

#include "vmm/driver_cuda.h"
#include "xsalloc/xsalloc.h"

/* The status of `call` (an expression giving an xsa_status), made with
 * the calling thread's current CUDA context kept. */
#define XSA_KEEPING_CONTEXT(call)                                              \
    __extension__({                                                            \
        xsa_cuda_ctx_watch();                                                  \
        xsa_status st_ = (call);                                               \
        xsa_cuda_ctx_restore();                                                \
        st_;                                                                   \
    })

/* The line on stderr for a failed call of entry point `what`. */
void xsa_torch_report(const char *what, xsa_status st);

/* st, reported if it is a failure. */
static inline xsa_status xsa_torch_check(const char *what, xsa_status st) {
    if (st != XSA_SUCCESS) xsa_torch_report(what, st);
    return st;
}

#endif
