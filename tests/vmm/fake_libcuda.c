/*
 * fake_libcuda: a libcuda.so.1 for cuda_resolve_test (soname
 * libcuda.so.1, loaded before the library looks for the real one): enough
 * of the driver for vmm/driver_cuda.c's setup to succeed with two
 * devices, and cuGetProcAddress answering as the real driver does.
 *
 * Design: cuGetProcAddress_v2 logs every request (name, version, flags)
 * and hands out, among the variants it knows of that name, the newest one
 * whose version is at most the one asked, in the flavour asked (legacy or
 * per-thread default stream): as the real driver, so a wrong version gets
 * the wrong ABI, which records its own name. Only the entry points of the
 * backup path (streams, pinned host memory, copies) and what setup and
 * context handling call are real fakes; any other name gets a stub that
 * is never called (setup resolves every entry point, the tests call these
 * only). Each fake records its call in `last` (with the thread's context,
 * kept per thread as the driver does) and returns `next_result` once.
 */
#include "tests/vmm/fake_libcuda.h"

#include <cuda.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static fake_cuda state;
static _Thread_local CUcontext current;

EXPORT fake_cuda *fake_cuda_state(void) { return &state; }

static CUresult record(const char *fn, unsigned flags, void *host, uint64_t dptr, size_t bytes, void *stream) {
    state.last = (fake_call){.flags = flags, .ctx = current, .host = host, .dptr = dptr, .bytes = bytes, .stream = stream};
    snprintf(state.last.fn, sizeof state.last.fn, "%s", fn);
    state.calls++;
    CUresult r = (CUresult)state.next_result;
    state.next_result = 0;
    return r;
}

/* ---- setup and contexts -------------------------------------------------- */

static CUresult fake_init(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
static CUresult fake_device_get_count(int *n) { return *n = FAKE_DEVICES, CUDA_SUCCESS; }
static CUresult fake_device_get(CUdevice *d, int ordinal) { return *d = ordinal, CUDA_SUCCESS; }

static CUresult fake_primary_ctx_retain(CUcontext *ctx, CUdevice d) {
    if (d < 0 || d >= FAKE_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    state.retained[d]++;
    *ctx = (CUcontext)FAKE_CTX(d);
    return CUDA_SUCCESS;
}

static CUresult fake_ctx_get_current(CUcontext *ctx) { return *ctx = current, CUDA_SUCCESS; }
static CUresult fake_ctx_set_current(CUcontext ctx) { return current = ctx, CUDA_SUCCESS; }

static CUresult fake_get_error_name(CUresult r, const char **s) {
    *s = r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ? "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED" : "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
}

static CUresult fake_get_error_string(CUresult r, const char **s) {
    (void)r;
    *s = "as the fake driver says";
    return CUDA_SUCCESS;
}

static CUresult fake_never_called(void) { return CUDA_ERROR_NOT_SUPPORTED; }

/* ---- the backup path's entry points, in each variant ---------------------- */

/* A stream is its context, plus one. */
static CUresult fake_stream_create(CUstream *s, unsigned flags) {
    CUresult r = record("cuStreamCreate", flags, NULL, 0, 0, NULL);
    if (!r) *s = (CUstream)((char *)current + 1);
    return r;
}
static CUresult fake_stream_destroy_v1(CUstream s) { return record("cuStreamDestroy(v1)", 0, NULL, 0, 0, s); }
static CUresult fake_stream_destroy_v2(CUstream s) { return record("cuStreamDestroy_v2", 0, NULL, 0, 0, s); }

static CUresult fake_stream_get_ctx(CUstream s, CUcontext *ctx) {
    *ctx = s ? (CUcontext)((char *)s - 1) : current;
    return CUDA_SUCCESS;
}
static CUresult fake_stream_get_ctx_ptsz(CUstream s, CUcontext *ctx) {
    (void)s;
    *ctx = NULL; /* the wrong flavour: no context at all */
    return CUDA_SUCCESS;
}

static CUresult fake_mem_host_alloc(void **p, size_t n, unsigned flags) {
    static char pinned[4096];
    CUresult r = record("cuMemHostAlloc", flags, NULL, 0, n, NULL);
    if (!r) *p = pinned;
    return r;
}
static CUresult fake_mem_free_host(void *p) { return record("cuMemFreeHost", 0, p, 0, 0, NULL); }
static CUresult fake_host_register_v1(void *p, size_t n, unsigned flags) {
    return record("cuMemHostRegister(v1)", flags, p, 0, n, NULL);
}
static CUresult fake_host_register_v2(void *p, size_t n, unsigned flags) {
    return record("cuMemHostRegister_v2", flags, p, 0, n, NULL);
}
static CUresult fake_host_unregister(void *p) { return record("cuMemHostUnregister", 0, p, 0, 0, NULL); }

/* A copy on a stream of another context than the thread's is refused, as
 * the driver refuses it (CUDA_ERROR_INVALID_VALUE, seen on 2 H200s: a
 * resume of two devices' backups from device 0's thread). */
static CUresult copy_record(const char *fn, void *host, uint64_t dptr, size_t bytes, CUstream s) {
    if (s && (CUcontext)((char *)s - 1) != current) return CUDA_ERROR_INVALID_VALUE;
    return record(fn, 0, host, dptr, bytes, s);
}

/* v1 took 32-bit device pointers (unsigned int). */
static CUresult fake_dtoh_v1(void *h, unsigned d, unsigned n, CUstream s) { return copy_record("cuMemcpyDtoHAsync(v1)", h, d, n, s); }
static CUresult fake_dtoh_v2(void *h, CUdeviceptr d, size_t n, CUstream s) { return copy_record("cuMemcpyDtoHAsync_v2", h, d, n, s); }
static CUresult fake_dtoh_ptsz(void *h, CUdeviceptr d, size_t n, CUstream s) { return copy_record("cuMemcpyDtoHAsync_v2_ptsz", h, d, n, s); }
static CUresult fake_htod_v1(unsigned d, const void *h, unsigned n, CUstream s) { return copy_record("cuMemcpyHtoDAsync(v1)", (void *)h, d, n, s); }
static CUresult fake_htod_v2(CUdeviceptr d, const void *h, size_t n, CUstream s) { return copy_record("cuMemcpyHtoDAsync_v2", (void *)h, d, n, s); }
static CUresult fake_htod_ptsz(CUdeviceptr d, const void *h, size_t n, CUstream s) { return copy_record("cuMemcpyHtoDAsync_v2_ptsz", (void *)h, d, n, s); }

/* ---- cuGetProcAddress ------------------------------------------------------- */

enum { ANY, LEGACY, PTSZ };

static const struct {
    const char *name;
    int version; /* the CUDA version the variant appeared in */
    int flavour;
    void *fn;
} variants[] = {
    {"cuInit", 2000, ANY, (void *)fake_init},
    {"cuDeviceGetCount", 2000, ANY, (void *)fake_device_get_count},
    {"cuDeviceGet", 2000, ANY, (void *)fake_device_get},
    {"cuDevicePrimaryCtxRetain", 7000, ANY, (void *)fake_primary_ctx_retain},
    {"cuCtxGetCurrent", 4000, ANY, (void *)fake_ctx_get_current},
    {"cuCtxSetCurrent", 4000, ANY, (void *)fake_ctx_set_current},
    {"cuGetErrorName", 6000, ANY, (void *)fake_get_error_name},
    {"cuGetErrorString", 6000, ANY, (void *)fake_get_error_string},
    {"cuStreamCreate", 2000, ANY, (void *)fake_stream_create},
    {"cuStreamDestroy", 2000, ANY, (void *)fake_stream_destroy_v1},
    {"cuStreamDestroy", 4000, ANY, (void *)fake_stream_destroy_v2},
    {"cuStreamGetCtx", 9020, LEGACY, (void *)fake_stream_get_ctx},
    {"cuStreamGetCtx", 9020, PTSZ, (void *)fake_stream_get_ctx_ptsz},
    {"cuMemHostAlloc", 2020, ANY, (void *)fake_mem_host_alloc},
    {"cuMemFreeHost", 2000, ANY, (void *)fake_mem_free_host},
    {"cuMemHostRegister", 4000, ANY, (void *)fake_host_register_v1},
    {"cuMemHostRegister", 6050, ANY, (void *)fake_host_register_v2},
    {"cuMemHostUnregister", 4000, ANY, (void *)fake_host_unregister},
    {"cuMemcpyDtoHAsync", 2000, ANY, (void *)fake_dtoh_v1},
    {"cuMemcpyDtoHAsync", 3020, LEGACY, (void *)fake_dtoh_v2},
    {"cuMemcpyDtoHAsync", 7000, PTSZ, (void *)fake_dtoh_ptsz},
    {"cuMemcpyHtoDAsync", 2000, ANY, (void *)fake_htod_v1},
    {"cuMemcpyHtoDAsync", 3020, LEGACY, (void *)fake_htod_v2},
    {"cuMemcpyHtoDAsync", 7000, PTSZ, (void *)fake_htod_ptsz},
};

EXPORT CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    if (state.n_asked < FAKE_MAX_ASKED) {
        fake_asked *a = &state.asked[state.n_asked++];
        snprintf(a->name, sizeof a->name, "%s", name);
        a->version = version;
        a->flags = flags;
    }
    int flavour = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? PTSZ : LEGACY;
    int best = -1;
    bool known = false;
    for (int i = 0; i < (int)(sizeof variants / sizeof *variants); i++) {
        if (strcmp(variants[i].name, name) != 0) continue;
        known = true;
        if ((variants[i].flavour == ANY || variants[i].flavour == flavour) && variants[i].version <= version &&
            (best < 0 || variants[i].version > variants[best].version))
            best = i;
    }
    *fn = best >= 0 ? variants[best].fn : known ? NULL : (void *)fake_never_called;
    if (status) *status = *fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return *fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
