/*
 * vmm/driver_cuda: the real driver behind the xsa_driver table.
 *
 * Design: the library never links libcuda. On first use libcuda.so.1 is
 * dlopen'd, cuGetProcAddress is found with dlsym, and every entry point is
 * resolved through it at the CUDA version whose ABI this file is written
 * against (the version the variant we call appeared in, so an older driver
 * that has it still works), always in the legacy-default-stream flavour so
 * that a NULL stream means what the table says. cuda.h gives the types only;
 * each function pointer has the type of cuda.h's own prototype. Setup runs
 * once (pthread_once) and its outcome, table or sentence, is kept for every
 * later call; the stream-capture entry points alone are optional (graphs
 * need CUDA 12.3, the rest of the library does not). Entry points that
 * name a device make that device's primary context current first; each
 * primary context is retained once, on first use, and kept for the life of
 * the process. Those that name none (pinned host memory, copies, stream
 * destroy) keep the thread's context and give a thread without one the
 * stream's, or that of a device already used (driver.h says which). Under xsa_cuda_ctx_watch the
 * context this replaces is remembered first, for xsa_cuda_ctx_restore.
 */
#include "vmm/driver_cuda.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(CUdeviceptr) == sizeof(xsa_devptr), "CUdeviceptr is 64-bit");
_Static_assert(sizeof(CUmemGenericAllocationHandle) == sizeof(xsa_mem_handle),
               "CUmemGenericAllocationHandle is 64-bit");
_Static_assert(sizeof(CUgraphNode) == sizeof(xsa_graph_node), "a graph node is a pointer");
_Static_assert((int)CU_STREAM_CAPTURE_STATUS_ACTIVE == XSA_CAPTURE_ACTIVE &&
                   (int)CU_STREAM_CAPTURE_STATUS_INVALIDATED == XSA_CAPTURE_INVALIDATED,
               "capture statuses are CUDA's");

/* Entry points with the CUDA version of the variant called. Names that
 * cuda.h maps to _v2 (cuMemGetInfo, cuMemAlloc, ...) are asked for by their
 * plain name at the version the _v2 ABI appeared in (cuStreamDestroy_v2 in
 * 4.0, cuMemHostRegister_v2 in 6.5); the per-thread-stream variants of the
 * copies are never asked for (CU_GET_PROC_ADDRESS_LEGACY_STREAM). */
#define CUDA_ENTRIES(X)                                                        \
    X(cuInit, 2000)                                                            \
    X(cuDeviceGet, 2000)                                                       \
    X(cuDeviceGetCount, 2000)                                                  \
    X(cuDeviceGetAttribute, 2000)                                              \
    X(cuDeviceTotalMem, 3020)                                                  \
    X(cuDeviceCanAccessPeer, 4000)                                             \
    X(cuGetErrorName, 6000)                                                    \
    X(cuGetErrorString, 6000)                                                  \
    X(cuMemGetInfo, 3020)                                                      \
    X(cuDevicePrimaryCtxRetain, 7000)                                          \
    X(cuDevicePrimaryCtxRelease, 11000)                                        \
    X(cuCtxGetCurrent, 4000)                                                   \
    X(cuCtxSetCurrent, 4000)                                                   \
    X(cuPointerGetAttribute, 4000)                                             \
    X(cuMemGetAllocationGranularity, 10020)                                    \
    X(cuMemAddressReserve, 10020)                                              \
    X(cuMemAddressFree, 10020)                                                 \
    X(cuMemCreate, 10020)                                                      \
    X(cuMemRelease, 10020)                                                     \
    X(cuMemMap, 10020)                                                         \
    X(cuMemUnmap, 10020)                                                       \
    X(cuMemSetAccess, 10020)                                                   \
    X(cuMemExportToShareableHandle, 10020)                                     \
    X(cuMemAlloc, 3020)                                                        \
    X(cuMemFree, 3020)                                                         \
    X(cuStreamQuery, 2000)                                                     \
    X(cuStreamSynchronize, 2000)                                               \
    X(cuCtxSynchronize, 2000)                                                  \
    X(cuEventCreate, 2000)                                                     \
    X(cuEventRecord, 2000)                                                     \
    X(cuEventQuery, 2000)                                                      \
    X(cuEventSynchronize, 2000)                                                \
    X(cuEventDestroy, 4000)                                                    \
    X(cuStreamWaitEvent, 3020)                                                 \
    X(cuMemImportFromShareableHandle, 10020)                                   \
    X(cuStreamCreate, 2000)                                                    \
    X(cuStreamDestroy, 4000)                                                   \
    X(cuStreamGetCtx, 9020)                                                    \
    X(cuMemHostAlloc, 2020)                                                    \
    X(cuMemFreeHost, 2000)                                                     \
    X(cuMemHostRegister, 6050)                                                 \
    X(cuMemHostUnregister, 4000)                                               \
    X(cuMemcpyDtoHAsync, 3020)                                                 \
    X(cuMemcpyHtoDAsync, 3020)

/* Stream capture: optional, so that a driver older than CUDA 12.3 (the
 * first with the edge-data variants cuda.h declares) still runs everything
 * but graphs; the table's capture entries say NOT_SUPPORTED there. */
#define CUDA_CAPTURE_ENTRIES(X)                                                \
    X(cuStreamBeginCapture, 10010)                                             \
    X(cuStreamEndCapture, 10000)                                               \
    X(cuStreamGetCaptureInfo, 12030)                                           \
    X(cuGraphNodeGetDependencies, 12030)                                       \
    X(cuGraphInstantiateWithFlags, 11040)                                      \
    X(cuGraphLaunch, 10000)                                                    \
    X(cuGraphExecDestroy, 10000)                                               \
    X(cuGraphDestroy, 10000)                                                   \
    X(cuThreadExchangeStreamCaptureMode, 10010)

/* Member names go through cuda.h's _v2 macros like the prototypes do, so
 * cu.cuMemGetInfo is a pointer of cuMemGetInfo_v2's type. */
static struct {
#define CUDA_MEMBER(name, version) __typeof__(name) *name;
    CUDA_ENTRIES(CUDA_MEMBER)
    CUDA_CAPTURE_ENTRIES(CUDA_MEMBER)
#undef CUDA_MEMBER
} cu;
static bool capture_ok; /* every CUDA_CAPTURE_ENTRIES entry resolved */

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, cuuint64_t);

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static xsa_driver cuda_table;
static xsa_driver *setup_result;
static char setup_error[512];

static int device_count;
static CUdevice *devices;            /* ordinal -> CUdevice */
static _Atomic(CUcontext) *primary;  /* ordinal -> retained primary context */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

/* Resolves one entry point; a failure is explained in setup_error only
 * when `required`. */
static int resolve(void *lib, const char *name, int version, void **fn, bool required) {
    get_proc_v2_fn get_v2 = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
    get_proc_v1_fn get_v1 = get_v2 ? NULL : (get_proc_v1_fn)dlsym(lib, "cuGetProcAddress");
    if (!get_v2 && !get_v1) {
        snprintf(setup_error, sizeof setup_error,
                 "libcuda.so.1 has neither cuGetProcAddress_v2 nor cuGetProcAddress "
                 "(the driver is older than CUDA 11.3).");
        return 0;
    }
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    *fn = NULL;
    CUresult r = get_v2 ? get_v2(name, fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status)
                        : get_v1(name, fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *fn) return 1;
    *fn = NULL;
    if (!required) return 0;
    snprintf(setup_error, sizeof setup_error,
             "libcuda.so.1 has no entry point %s at CUDA version %d.%d (%s).", name,
             version / 1000, version % 1000 / 10,
             status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                 ? "the driver is too old"
                 : "symbol not found");
    return 0;
}

static void setup(void) {
    dlerror();
    /* The handle is never closed: after cuInit the driver may own threads
     * and handlers that point into it, and a failed setup is kept anyway. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(setup_error, sizeof setup_error, "libcuda.so.1 could not be loaded: %s.",
                 why ? why : "unknown dlopen error");
        return;
    }
#define CUDA_RESOLVE(name, version)                                            \
    if (!resolve(lib, #name, version, (void **)&cu.name, true)) return;
    CUDA_ENTRIES(CUDA_RESOLVE)
#undef CUDA_RESOLVE
    capture_ok = true;
#define CUDA_RESOLVE_CAPTURE(name, version)                                    \
    capture_ok &= resolve(lib, #name, version, (void **)&cu.name, false);
    CUDA_CAPTURE_ENTRIES(CUDA_RESOLVE_CAPTURE)
#undef CUDA_RESOLVE_CAPTURE

    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL, *text = NULL;
        if (cu.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
        if (cu.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
        snprintf(setup_error, sizeof setup_error, "cuInit failed with %s (%d): %s.",
                 name ? name : "an unknown error", (int)r, text ? text : "no description");
        return;
    }
    int n = 0;
    r = cu.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
        snprintf(setup_error, sizeof setup_error, "no CUDA device (cuDeviceGetCount gave %d, error %d).",
                 n, (int)r);
        return;
    }
    devices = calloc((size_t)n, sizeof *devices);
    primary = calloc((size_t)n, sizeof *primary);
    if (!devices || !primary) {
        free(devices);
        free(primary);
        snprintf(setup_error, sizeof setup_error, "out of host memory setting up the CUDA driver.");
        return;
    }
    for (int i = 0; i < n; i++) {
        r = cu.cuDeviceGet(&devices[i], i);
        if (r != CUDA_SUCCESS) {
            free(devices);
            free(primary);
            snprintf(setup_error, sizeof setup_error, "cuDeviceGet(%d) failed with error %d.", i, (int)r);
            return;
        }
    }
    device_count = n;
    setup_result = &cuda_table;
}

xsa_driver *xsa_driver_cuda(char *err, size_t errlen) {
    pthread_once(&setup_once, setup);
    if (!setup_result && err && errlen) snprintf(err, errlen, "%s", setup_error);
    return setup_result;
}

/* ---- helpers ------------------------------------------------------------ */

static CUresult device_of(int ordinal, CUdevice *dev) {
    if (ordinal < 0 || ordinal >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    *dev = devices[ordinal];
    return CUDA_SUCCESS;
}

/* The thread's own context, kept while a call is watched (driver.h). */
static _Thread_local struct {
    bool watching, saved;
    CUcontext ctx;
} caller_ctx;

void xsa_cuda_ctx_watch(void) {
    caller_ctx.watching = true;
    caller_ctx.saved = false;
}

static void put_back(CUcontext ctx) {
    CUcontext now = NULL;
    if (cu.cuCtxGetCurrent(&now) == CUDA_SUCCESS && now != ctx) cu.cuCtxSetCurrent(ctx);
}

void xsa_cuda_ctx_restore(void) {
    /* Every access before the call: in the shared library each thread-local
     * access after a call is another __tls_get_addr. */
    bool saved = caller_ctx.saved;
    CUcontext ctx = caller_ctx.ctx;
    caller_ctx.watching = caller_ctx.saved = false;
    if (saved) put_back(ctx);
}

/* Makes ctx current, remembering the caller's first under a watch. */
static CUresult make_current(CUcontext ctx) {
    if (caller_ctx.watching && !caller_ctx.saved)
        caller_ctx.saved = cu.cuCtxGetCurrent(&caller_ctx.ctx) == CUDA_SUCCESS;
    return cu.cuCtxSetCurrent(ctx);
}

/* Makes the device's primary context current, retaining it on first use. */
static CUresult use_primary(int ordinal) {
    if (ordinal < 0 || ordinal >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    CUcontext ctx = atomic_load_explicit(&primary[ordinal], memory_order_acquire);
    if (!ctx) {
        pthread_mutex_lock(&primary_lock);
        ctx = atomic_load_explicit(&primary[ordinal], memory_order_relaxed);
        if (!ctx) {
            CUresult r = cu.cuDevicePrimaryCtxRetain(&ctx, devices[ordinal]);
            if (r != CUDA_SUCCESS) {
                pthread_mutex_unlock(&primary_lock);
                return r;
            }
            atomic_store_explicit(&primary[ordinal], ctx, memory_order_release);
        }
        pthread_mutex_unlock(&primary_lock);
    }
    return make_current(ctx);
}

static bool has_context(void) {
    CUcontext cur = NULL;
    return cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur;
}

/* A thread without a context gets one for a call that names no device:
 * the primary context of the first device already used (pinned host
 * memory is portable, so any of them serves), else device 0's. A thread
 * that has a context keeps it. */
static CUresult any_context(void) {
    if (has_context()) return CUDA_SUCCESS;
    for (int i = 0; i < device_count; i++)
        if (atomic_load_explicit(&primary[i], memory_order_acquire)) return use_primary(i);
    return use_primary(0);
}

/* Makes the stream's context current for a call on it: the driver refuses
 * a copy on another context's stream (CUDA_ERROR_INVALID_VALUE on two
 * H200s, resuming device 1's backup from a thread on device 0), and a
 * helper thread may have none. The legacy stream is the current
 * context's. Under a watch the caller's context comes back (driver.h). */
static CUresult stream_context(xsa_stream stream) {
    CUcontext ctx = NULL, now = NULL;
    if (!stream) return CUDA_SUCCESS;
    CUresult r = cu.cuStreamGetCtx((CUstream)stream, &ctx);
    if (r) return r;
    if (cu.cuCtxGetCurrent(&now) == CUDA_SUCCESS && now == ctx) return CUDA_SUCCESS;
    return make_current(ctx);
}

static CUmemAllocationProp pinned_prop(int ordinal, int exportable) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    prop.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                           : CU_MEM_HANDLE_TYPE_NONE;
    return prop;
}

/* ---- the table ---------------------------------------------------------- */

static xsa_cu_result cuda_init(void) { return cu.cuInit(0); }

static xsa_cu_result cuda_device_get_count(int *count) { return cu.cuDeviceGetCount(count); }

static xsa_cu_result cuda_device_get_attribute(int *value, int attribute, int device) {
    CUdevice dev;
    CUresult r = device_of(device, &dev);
    return r ? r : cu.cuDeviceGetAttribute(value, (CUdevice_attribute)attribute, dev);
}

static xsa_cu_result cuda_device_total_mem(size_t *bytes, int device) {
    CUdevice dev;
    CUresult r = device_of(device, &dev);
    return r ? r : cu.cuDeviceTotalMem(bytes, dev);
}

static xsa_cu_result cuda_device_can_access_peer(int *can, int device, int peer) {
    CUdevice dev, peer_dev;
    CUresult r = device_of(device, &dev);
    if (!r) r = device_of(peer, &peer_dev);
    return r ? r : cu.cuDeviceCanAccessPeer(can, dev, peer_dev);
}

static xsa_cu_result cuda_mem_get_info(int device, size_t *free_bytes, size_t *total_bytes) {
    CUresult r = use_primary(device);
    return r ? r : cu.cuMemGetInfo(free_bytes, total_bytes);
}

static xsa_cu_result cuda_primary_ctx_retain(void **ctx, int device) {
    CUdevice dev;
    CUcontext c = NULL;
    CUresult r = device_of(device, &dev);
    if (!r) r = cu.cuDevicePrimaryCtxRetain(&c, dev);
    if (!r) *ctx = c;
    return r;
}

static xsa_cu_result cuda_primary_ctx_release(int device) {
    CUdevice dev;
    CUresult r = device_of(device, &dev);
    return r ? r : cu.cuDevicePrimaryCtxRelease(dev);
}

static xsa_cu_result cuda_ctx_set_current(void *ctx) { return cu.cuCtxSetCurrent((CUcontext)ctx); }

static xsa_cu_result cuda_mem_get_granularity(size_t *granularity, int device, int exportable) {
    CUmemAllocationProp prop = pinned_prop(device, exportable);
    return cu.cuMemGetAllocationGranularity(granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

static xsa_cu_result cuda_mem_address_reserve(xsa_devptr *ptr, size_t size, size_t alignment) {
    CUdeviceptr p = 0;
    CUresult r = cu.cuMemAddressReserve(&p, size, alignment, 0, 0);
    if (!r) *ptr = p;
    return r;
}

static xsa_cu_result cuda_mem_address_free(xsa_devptr ptr, size_t size) {
    return cu.cuMemAddressFree(ptr, size);
}

static xsa_cu_result cuda_mem_create(xsa_mem_handle *handle, size_t size, int device, int exportable) {
    CUmemAllocationProp prop = pinned_prop(device, exportable);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cu.cuMemCreate(&h, size, &prop, 0);
    if (!r) *handle = h;
    return r;
}

static xsa_cu_result cuda_mem_release(xsa_mem_handle handle) { return cu.cuMemRelease(handle); }

static xsa_cu_result cuda_mem_map(xsa_devptr ptr, size_t size, size_t offset, xsa_mem_handle handle) {
    return cu.cuMemMap(ptr, size, offset, handle, 0);
}

static xsa_cu_result cuda_mem_unmap(xsa_devptr ptr, size_t size) { return cu.cuMemUnmap(ptr, size); }

static xsa_cu_result cuda_mem_set_access(xsa_devptr ptr, size_t size, const int *devs, int n) {
    enum { ON_STACK = 16 };
    CUmemAccessDesc stack_desc[ON_STACK];
    if (n <= 0 || !devs) return CUDA_ERROR_INVALID_VALUE;
    CUmemAccessDesc *desc = n <= ON_STACK ? stack_desc : calloc((size_t)n, sizeof *desc);
    if (!desc) return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < n; i++) {
        memset(&desc[i], 0, sizeof desc[i]);
        desc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc[i].location.id = devs[i];
        desc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    CUresult r = cu.cuMemSetAccess(ptr, size, desc, (size_t)n);
    if (desc != stack_desc) free(desc);
    return r;
}

static xsa_cu_result cuda_mem_export_fd(int *fd, xsa_mem_handle handle) {
    return cu.cuMemExportToShareableHandle(fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

static xsa_cu_result cuda_mem_alloc(xsa_devptr *ptr, size_t size, int device) {
    CUdeviceptr p = 0;
    CUresult r = use_primary(device);
    if (!r) r = cu.cuMemAlloc(&p, size);
    if (!r) *ptr = p;
    return r;
}

static xsa_cu_result cuda_mem_free(xsa_devptr ptr) {
    /* cuMemFree needs some current context; a thread that has never made
     * one current (a deferred free on a helper thread) gets the owner's. */
    CUcontext cur = NULL;
    int owner;
    if (cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && !cur &&
        cu.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) == CUDA_SUCCESS)
        use_primary(owner);
    return cu.cuMemFree(ptr);
}

static xsa_cu_result cuda_stream_query(xsa_stream stream) { return cu.cuStreamQuery((CUstream)stream); }

static xsa_cu_result cuda_stream_synchronize(xsa_stream stream) {
    return cu.cuStreamSynchronize((CUstream)stream);
}

static xsa_cu_result cuda_ctx_synchronize(int device) {
    CUresult r = use_primary(device);
    return r ? r : cu.cuCtxSynchronize();
}

static xsa_cu_result cuda_event_create(xsa_event *event, int device) {
    CUevent e = NULL;
    CUresult r = use_primary(device);
    if (!r) r = cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (!r) *event = e;
    return r;
}

static xsa_cu_result cuda_event_record(xsa_event event, xsa_stream stream) {
    return cu.cuEventRecord((CUevent)event, (CUstream)stream);
}

static xsa_cu_result cuda_event_query(xsa_event event) { return cu.cuEventQuery((CUevent)event); }

static xsa_cu_result cuda_event_synchronize(xsa_event event) {
    return cu.cuEventSynchronize((CUevent)event);
}

static xsa_cu_result cuda_event_destroy(xsa_event event) { return cu.cuEventDestroy((CUevent)event); }

static xsa_cu_result cuda_stream_wait_event(xsa_stream stream, xsa_event event) {
    return cu.cuStreamWaitEvent((CUstream)stream, (CUevent)event, 0);
}

/* The primary context is made current first: an importing process may have
 * made no CUDA call before. */
static xsa_cu_result cuda_mem_import_fd(xsa_mem_handle *handle, int fd, int device) {
    CUmemGenericAllocationHandle h = 0;
    CUresult r = use_primary(device);
    if (!r)
        r = cu.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (!r) *handle = h;
    return r;
}

/* ---- copy streams, pinned host memory, copies ----------------------------- */

static xsa_cu_result cuda_stream_create(xsa_stream *stream, int device) {
    CUstream s = NULL;
    if (!stream) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = use_primary(device);
    if (!r) r = cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (!r) *stream = s;
    return r;
}

static xsa_cu_result cuda_stream_destroy(xsa_stream stream) {
    CUresult r = stream_context(stream);
    return r ? r : cu.cuStreamDestroy((CUstream)stream);
}

static xsa_cu_result cuda_mem_host_alloc(void **host, size_t size) {
    void *p = NULL;
    if (!host) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = any_context();
    if (!r) r = cu.cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
    if (!r) *host = p;
    return r;
}

static xsa_cu_result cuda_mem_free_host(void *host) {
    CUresult r = any_context();
    return r ? r : cu.cuMemFreeHost(host);
}

static xsa_cu_result cuda_mem_host_register(void *host, size_t size) {
    CUresult r = any_context();
    return r ? r : cu.cuMemHostRegister(host, size, CU_MEMHOSTREGISTER_PORTABLE);
}

static xsa_cu_result cuda_mem_host_unregister(void *host) {
    CUresult r = any_context();
    return r ? r : cu.cuMemHostUnregister(host);
}

static xsa_cu_result cuda_memcpy_dtoh_async(void *dst, xsa_devptr src, size_t n, xsa_stream stream) {
    CUresult r = stream_context(stream);
    return r ? r : cu.cuMemcpyDtoHAsync(dst, src, n, (CUstream)stream);
}

static xsa_cu_result cuda_memcpy_htod_async(xsa_devptr dst, const void *src, size_t n, xsa_stream stream) {
    CUresult r = stream_context(stream);
    return r ? r : cu.cuMemcpyHtoDAsync(dst, src, n, (CUstream)stream);
}

/* ---- stream capture ----------------------------------------------------- */

static xsa_cu_result cuda_stream_begin_capture(xsa_stream stream) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    return cu.cuStreamBeginCapture((CUstream)stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

static xsa_cu_result cuda_stream_end_capture(xsa_stream stream, xsa_graph *graph) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    CUgraph g = NULL;
    CUresult r = cu.cuStreamEndCapture((CUstream)stream, &g);
    *graph = g;
    return r;
}

/* No edge-data out-parameter: the driver then refuses (LOSSY_QUERY) rather
 * than hand over edges whose ordering the caller would misread. */
static xsa_cu_result cuda_stream_get_capture_info(xsa_stream stream, int *status, uint64_t *id,
                                                  const xsa_graph_node **deps, size_t *n) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    const CUgraphNode *nodes = NULL;
    size_t count = 0;
    CUresult r = cu.cuStreamGetCaptureInfo((CUstream)stream, &st, &cid, NULL, deps ? &nodes : NULL, NULL, &count);
    if (r != CUDA_SUCCESS) return r;
    *status = (int)st;
    if (id) *id = cid;
    if (deps) *deps = (const xsa_graph_node *)nodes;
    if (n) *n = count;
    return CUDA_SUCCESS;
}

static xsa_cu_result cuda_graph_node_get_dependencies(xsa_graph_node node, xsa_graph_node *deps, size_t *n) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    return cu.cuGraphNodeGetDependencies((CUgraphNode)node, (CUgraphNode *)deps, NULL, n);
}

static xsa_cu_result cuda_graph_instantiate(xsa_graph_exec *exec, xsa_graph graph) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    if (!exec) return CUDA_ERROR_INVALID_VALUE;
    CUgraphExec e = NULL;
    CUresult r = cu.cuGraphInstantiateWithFlags(&e, (CUgraph)graph, 0);
    if (!r) *exec = e;
    return r;
}

static xsa_cu_result cuda_graph_launch(xsa_graph_exec exec, xsa_stream stream) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    return cu.cuGraphLaunch((CUgraphExec)exec, (CUstream)stream);
}

static xsa_cu_result cuda_graph_exec_destroy(xsa_graph_exec exec) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    return cu.cuGraphExecDestroy((CUgraphExec)exec);
}

static xsa_cu_result cuda_thread_exchange_capture_mode(int *mode) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    if (!mode) return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
    CUresult r = cu.cuThreadExchangeStreamCaptureMode(&m);
    *mode = (int)m;
    return r;
}

static xsa_cu_result cuda_graph_destroy(xsa_graph graph) {
    if (!capture_ok) return CUDA_ERROR_NOT_SUPPORTED;
    return cu.cuGraphDestroy((CUgraph)graph);
}

/* "NAME: description", built once per code and kept (codes are < 1000);
 * a code out of that range is formatted into a per-thread buffer. */
enum { ERROR_CACHE = 1024 };
static _Atomic(char *) error_cache[ERROR_CACHE];

static const char *cuda_error_string(xsa_cu_result result) {
    static _Thread_local char scratch[160];
    int cacheable = result >= 0 && result < ERROR_CACHE;
    if (cacheable) {
        char *s = atomic_load_explicit(&error_cache[result], memory_order_acquire);
        if (s) return s;
    }
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName((CUresult)result, &name) != CUDA_SUCCESS || !name ||
        cu.cuGetErrorString((CUresult)result, &text) != CUDA_SUCCESS || !text)
        snprintf(scratch, sizeof scratch, "CUDA error %d: unrecognized CUDA error code", result);
    else
        snprintf(scratch, sizeof scratch, "%s: %s", name, text);
    char *copy = cacheable ? strdup(scratch) : NULL;
    if (!copy) return scratch;
    char *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&error_cache[result], &expected, copy,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        free(copy);
        return expected;
    }
    return copy;
}

static xsa_driver cuda_table = {
    .name = "cuda",
    .init = cuda_init,
    .device_get_count = cuda_device_get_count,
    .device_get_attribute = cuda_device_get_attribute,
    .device_total_mem = cuda_device_total_mem,
    .device_can_access_peer = cuda_device_can_access_peer,
    .mem_get_info = cuda_mem_get_info,
    .primary_ctx_retain = cuda_primary_ctx_retain,
    .primary_ctx_release = cuda_primary_ctx_release,
    .ctx_set_current = cuda_ctx_set_current,
    .mem_get_granularity = cuda_mem_get_granularity,
    .mem_address_reserve = cuda_mem_address_reserve,
    .mem_address_free = cuda_mem_address_free,
    .mem_create = cuda_mem_create,
    .mem_release = cuda_mem_release,
    .mem_map = cuda_mem_map,
    .mem_unmap = cuda_mem_unmap,
    .mem_set_access = cuda_mem_set_access,
    .mem_export_fd = cuda_mem_export_fd,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .stream_query = cuda_stream_query,
    .stream_synchronize = cuda_stream_synchronize,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .event_destroy = cuda_event_destroy,
    .stream_wait_event = cuda_stream_wait_event,
    .mem_import_fd = cuda_mem_import_fd,
    .stream_begin_capture = cuda_stream_begin_capture,
    .stream_end_capture = cuda_stream_end_capture,
    .stream_get_capture_info = cuda_stream_get_capture_info,
    .graph_node_get_dependencies = cuda_graph_node_get_dependencies,
    .graph_instantiate = cuda_graph_instantiate,
    .graph_launch = cuda_graph_launch,
    .graph_exec_destroy = cuda_graph_exec_destroy,
    .graph_destroy = cuda_graph_destroy,
    .thread_exchange_capture_mode = cuda_thread_exchange_capture_mode,
    .process_get_fds = xsa_driver_process_get_fds,
    .ctx_synchronize = cuda_ctx_synchronize,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .mem_host_alloc = cuda_mem_host_alloc,
    .mem_free_host = cuda_mem_free_host,
    .mem_host_register = cuda_mem_host_register,
    .mem_host_unregister = cuda_mem_host_unregister,
    .memcpy_dtoh_async = cuda_memcpy_dtoh_async,
    .memcpy_htod_async = cuda_memcpy_htod_async,
    .error_string = cuda_error_string,
};
