/*
 * ctx_check: the PyTorch entry points (xsalloc/pytorch.h) leave the calling
 * thread's current CUDA context as they found it, on the real driver.
 * Built with gcc on the GPU machine by run_ctx_check.sh (no Bazel there).
 *
 * A thread with no current context, and one with a context of its own
 * (cuCtxCreate, when the driver still exports the call), calls
 * xsa_torch_malloc and xsa_torch_free for a size that needs new device
 * memory (the driver makes the primary context current) and for one the
 * cache holds (no driver call); after each the thread's context must be its
 * own again. A plain xsa_malloc in between (which may leave the primary
 * context current) must not make a later entry point put back a stale one.
 * Prints PASS/FAIL/SKIP lines; exits non-zero if anything failed.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "xsalloc/pytorch.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)

typedef CUresult (*ctx_create_fn)(CUcontext *ctx, unsigned flags, CUdevice dev);

static struct {
    __typeof__(cuInit) *init;
    __typeof__(cuDeviceGet) *device_get;
    __typeof__(cuCtxGetCurrent) *ctx_get;
    __typeof__(cuCtxSetCurrent) *ctx_set;
    ctx_create_fn ctx_create; /* cuCtxCreate_v2; NULL where the driver dropped it */
} cu;

static int failures;

static void report(int ok, const char *what) {
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    fflush(stdout);
    if (!ok) failures++;
}

static int load_cuda(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    cu.init = (__typeof__(cu.init))dlsym(lib, "cuInit");
    cu.device_get = (__typeof__(cu.device_get))dlsym(lib, "cuDeviceGet");
    cu.ctx_get = (__typeof__(cu.ctx_get))dlsym(lib, "cuCtxGetCurrent");
    cu.ctx_set = (__typeof__(cu.ctx_set))dlsym(lib, "cuCtxSetCurrent");
    cu.ctx_create = (ctx_create_fn)dlsym(lib, "cuCtxCreate_v2");
    return cu.init && cu.device_get && cu.ctx_get && cu.ctx_set && cu.init(0) == CUDA_SUCCESS;
}

static CUcontext current(void) {
    CUcontext c = (CUcontext)1;
    return cu.ctx_get(&c) == CUDA_SUCCESS ? c : (CUcontext)1;
}

/* The entry points, a miss then a hit, each followed by the context check. */
static void entry_points_keep(CUcontext own, size_t miss_size, const char *who) {
    char what[160];
    void *p = xsa_torch_malloc((ssize_t)miss_size, 0, NULL);
    snprintf(what, sizeof what, "%s: xsa_torch_malloc(%zu MiB, new memory) keeps the context", who, miss_size / MiB);
    report(p && current() == own, what);
    xsa_torch_free(p, (ssize_t)miss_size, 0, NULL);
    snprintf(what, sizeof what, "%s: xsa_torch_free keeps the context", who);
    report(current() == own, what);
    p = xsa_torch_malloc((ssize_t)miss_size, 0, NULL);
    snprintf(what, sizeof what, "%s: xsa_torch_malloc(%zu MiB, cached) keeps the context", who, miss_size / MiB);
    report(p && current() == own, what);
    xsa_torch_free(p, (ssize_t)miss_size, 0, NULL);
}

static void *no_context_thread(void *unused) {
    (void)unused;
    report(current() == NULL, "fresh thread: no current context to begin with");
    entry_points_keep(NULL, 40 * MiB, "no context");
    /* The C API may leave the primary context current; a later entry point
     * must still keep the context the thread has then. */
    void *p = NULL;
    report(xsa_malloc(&p, 80 * MiB, 0, NULL) == XSA_SUCCESS, "xsa_malloc(80 MiB) on the C API");
    cu.ctx_set(NULL);
    entry_points_keep(NULL, 120 * MiB, "no context after a C API call");
    xsa_free(p);
    return NULL;
}

int main(void) {
    if (!load_cuda()) {
        printf("SKIP ctx_check: no usable libcuda.so.1\n");
        return 0;
    }
    if (xsa_use_driver("cuda") != XSA_SUCCESS || xsa_init("expandable_segments:True") != XSA_SUCCESS) {
        printf("FAIL xsa_init on the real driver: %s\n", xsa_last_error());
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, no_context_thread, NULL);
    pthread_join(t, NULL);
    CUdevice dev;
    CUcontext own = NULL;
    if (cu.ctx_create && cu.device_get(&dev, 0) == CUDA_SUCCESS && cu.ctx_create(&own, 0, dev) == CUDA_SUCCESS) {
        report(current() == own, "cuCtxCreate: the thread's own context is current");
        entry_points_keep(own, 200 * MiB, "own context");
    } else {
        printf("SKIP own context: the driver does not export cuCtxCreate_v2\n");
    }
    cu.ctx_set(NULL);
    xsa_shutdown();
    printf("%s ctx_check (%d failed)\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
