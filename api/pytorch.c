/*
 * api/pytorch: the functions PyTorch's CUDAPluggableAllocator and the CuPy
 * binding (python/xsalloc) call, over the public API.
 *
 * Design: PyTorch calls a plain C function pointer and cannot be told why an
 * allocation failed, so each entry point turns a failed status into a line on
 * stderr (the thread's xsa_last_error() keeps it too) and a NULL or no-op,
 * never an abort. Around every call the thread's current CUDA context is
 * saved and put back: the real driver makes the primary context of the
 * device it works on current, and PyTorch and CuPy use the CUDA runtime,
 * whose current device is the current context's. cuCtxGetCurrent and
 * cuCtxSetCurrent are found with dlsym in the libcuda.so.1 the driver
 * already loaded (RTLD_NOLOAD: never loaded here) once the library is
 * initialised, so on the simulated driver without libcuda there is nothing
 * to save.
 */
#include "api/pytorch.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef int (*ctx_get_fn)(void **ctx); /* CUresult cuCtxGetCurrent(CUcontext *) */
typedef int (*ctx_set_fn)(void *ctx);  /* CUresult cuCtxSetCurrent(CUcontext) */

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool ctx_resolved;
static ctx_get_fn ctx_get;
static ctx_set_fn ctx_set;

/* Once the library is initialised (which loads libcuda when the real driver
 * is picked), looks the two functions up; until then, tries on every call. */
static void ctx_resolve(void) {
    if (atomic_load_explicit(&ctx_resolved, memory_order_acquire)) return;
    pthread_mutex_lock(&ctx_lock);
    if (!atomic_load_explicit(&ctx_resolved, memory_order_relaxed) && strcmp(xsa_driver_name(), "none") != 0) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        ctx_get_fn get = lib ? (ctx_get_fn)dlsym(lib, "cuCtxGetCurrent") : NULL;
        ctx_set_fn set = lib ? (ctx_set_fn)dlsym(lib, "cuCtxSetCurrent") : NULL;
        if (get && set) ctx_get = get, ctx_set = set;
        atomic_store_explicit(&ctx_resolved, true, memory_order_release);
    }
    pthread_mutex_unlock(&ctx_lock);
}

typedef struct saved_ctx {
    int valid;
    void *ctx;
} saved_ctx;

static saved_ctx ctx_save(void) {
    ctx_resolve();
    saved_ctx s = {0, NULL};
    if (ctx_get && ctx_get(&s.ctx) == 0) s.valid = 1;
    return s;
}

static void ctx_restore(saved_ctx s) {
    void *now = NULL;
    if (s.valid && ctx_get(&now) == 0 && now != s.ctx) ctx_set(s.ctx);
}

static void report(const char *what, xsa_status st) {
    const char *detail = xsa_last_error();
    fprintf(stderr, "xsalloc: %s failed (%s): %s\n", what, xsa_status_name(st), *detail ? detail : "no detail");
}

xsa_status xsa_ctx_malloc(void **ptr, size_t size, int device, void *stream) {
    saved_ctx s = ctx_save();
    xsa_status st = xsa_malloc(ptr, size, device, stream);
    ctx_restore(s);
    return st;
}

xsa_status xsa_ctx_free(void *ptr) {
    saved_ctx s = ctx_save();
    xsa_status st = xsa_free(ptr);
    ctx_restore(s);
    return st;
}

void *xsa_torch_malloc(ssize_t size, int device, void *stream) {
    void *p = NULL;
    if (size < 0) {
        fprintf(stderr, "xsalloc: xsa_torch_malloc: negative size %zd\n", size);
        return NULL;
    }
    xsa_status st = xsa_ctx_malloc(&p, (size_t)size, device, stream);
    if (st != XSA_SUCCESS) report("xsa_torch_malloc", st);
    return p;
}

void xsa_torch_free(void *ptr, ssize_t size, int device, void *stream) {
    (void)size, (void)device, (void)stream;
    xsa_status st = xsa_ctx_free(ptr);
    if (st != XSA_SUCCESS) report("xsa_torch_free", st);
}

void xsa_torch_record_stream(void *ptr, void *stream) {
    saved_ctx s = ctx_save();
    xsa_status st = xsa_record_stream(ptr, stream);
    ctx_restore(s);
    if (st != XSA_SUCCESS) report("xsa_torch_record_stream", st);
}

xsa_status xsa_ctx_empty_cache(void) {
    saved_ctx s = ctx_save();
    xsa_status st = xsa_empty_cache();
    ctx_restore(s);
    return st;
}

void xsa_torch_empty_cache(void) {
    xsa_status st = xsa_ctx_empty_cache();
    if (st != XSA_SUCCESS) report("xsa_torch_empty_cache", st);
}

void xsa_torch_set_memory_fraction(double fraction, int device) {
    saved_ctx s = ctx_save();
    xsa_status st = xsa_set_memory_fraction(fraction, device);
    ctx_restore(s);
    if (st != XSA_SUCCESS) report("xsa_torch_set_memory_fraction", st);
}

void *xsa_torch_base_alloc(void *ptr, size_t *size) {
    void *base = NULL;
    size_t bytes = 0;
    saved_ctx s = ctx_save();
    xsa_status st = xsa_get_base_allocation(ptr, &base, &bytes);
    ctx_restore(s);
    if (st != XSA_SUCCESS) report("xsa_torch_base_alloc", st);
    if (size) *size = bytes;
    return base;
}
