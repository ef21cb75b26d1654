/*
 * xsalloc/pytorch: entry points for frameworks that load an allocator from a
 * shared library by function name.
 *
 * The xsa_torch_* functions have exactly the C signatures that
 * torch.cuda.memory.CUDAPluggableAllocator (alloc/free) and its
 * set_record_stream_fn / set_reset_fn / set_memory_fraction_fn /
 * set_base_alloc_fn hooks call through. They never abort: a failure prints
 * "xsalloc: <sentence>" on stderr and leaves xsa_last_error() set on the
 * calling thread; xsa_torch_malloc then returns NULL.
 *
 * Every function here leaves the calling thread's current CUDA context as it
 * found it (the driver makes a device's primary context current for the
 * calls that name a device, which would otherwise change the CUDA runtime's
 * current device under PyTorch or CuPy).
 */
#ifndef XSALLOC_PYTORCH_H
#define XSALLOC_PYTORCH_H

#include <stddef.h>
#include <sys/types.h>

#include "xsalloc/xsalloc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* xsa_malloc / xsa_free / xsa_empty_cache that keep the thread's current
 * CUDA context. */
XSA_API xsa_status xsa_ctx_malloc(void **ptr, size_t size, int device, void *stream);
XSA_API xsa_status xsa_ctx_free(void *ptr);
XSA_API xsa_status xsa_ctx_empty_cache(void);

/* CUDAPluggableAllocator(path, "xsa_torch_malloc", "xsa_torch_free").
 * size 0 or a failure returns NULL; free ignores size (xsalloc knows it)
 * and frees on the block's own stream; device and stream only feed the lag
 * probe (XSALLOC_LAG_PROBE, docs/configuration.md). */
XSA_API void *xsa_torch_malloc(ssize_t size, int device, void *stream);
XSA_API void xsa_torch_free(void *ptr, ssize_t size, int device, void *stream);

/* Hooks: set_record_stream_fn, set_reset_fn (torch.cuda.empty_cache),
 * set_memory_fraction_fn, set_base_alloc_fn. base_alloc returns NULL and
 * *size 0 for a pointer xsalloc does not own. */
XSA_API void xsa_torch_record_stream(void *ptr, void *stream);
XSA_API void xsa_torch_empty_cache(void);
XSA_API void xsa_torch_set_memory_fraction(double fraction, int device);
XSA_API void *xsa_torch_base_alloc(void *ptr, size_t *size);

/* CUDA graphs: set_begin_allocate_to_pool, set_end_allocate_to_pool_fn,
 * set_release_pool (api/torch_graphs.c). torch passes its stream filter as
 * a std::function (by reference in the C ABI), which is not called:
 * allocations are routed to pool `id` from the streams capturing into the
 * first capture seen after begin, which is what torch's filter accepts.
 * The id is PyTorch's MempoolId_t, a pair of integers passed by value. */
XSA_API void xsa_torch_begin_allocate_to_pool(int device, xsa_mempool_id id, const void *torch_filter);
XSA_API void xsa_torch_end_allocate_to_pool(int device, xsa_mempool_id id);
XSA_API void xsa_torch_release_pool(int device, xsa_mempool_id id);

#ifdef __cplusplus
}
#endif
#endif
