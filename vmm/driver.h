/*
 * vmm/driver: the one table of CUDA driver entry points the library uses.
 *
 * Design: every call the library makes into the driver goes through an
 * xsa_driver table, filled either by the real driver (driver_cuda.c: libcuda
 * is dlopen'd and resolved with cuGetProcAddress, never linked) or by the
 * simulated driver (sim/: host memory that really is reserved, mapped
 * and unmapped). The pool cannot tell them apart. Types here are neutral
 * (no cuda.h): results use CUresult's numeric values, pointers are uint64_t
 * device addresses, streams and events are opaque pointers.
 *
 * Calls go through XSA_DRV(d, entry, args...), which counts each call per
 * entry point (replay reports create/map/unmap/release/mem_alloc/mem_free)
 * and, once xsa_driver_time_calls(d, true), adds up the time spent in each:
 * what the real driver costs on a workload is measured, not guessed. Off by
 * default so that the call counters stay the only cost. A thread marks the
 * work it does in the background (the helper's rounds: api/helper.c) with
 * xsa_driver_background, and its calls and time are counted apart too, so
 * that what the allocation path paid is the rest.
 *
 * One entry is not CUDA's: process_get_fds, the system call an importer
 * needs to take an exporter's handles (pidfd_getfd). It sits in the table
 * so that the simulated driver can make it fail like any other call.
 */
#ifndef XSA_VMM_DRIVER_H
#define XSA_VMM_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CUresult values the library produces or checks (same numbers as cuda.h). */
enum {
    XSA_CU_SUCCESS = 0,
    XSA_CU_ERROR_INVALID_VALUE = 1,
    XSA_CU_ERROR_OUT_OF_MEMORY = 2,
    XSA_CU_ERROR_NOT_INITIALIZED = 3,
    XSA_CU_ERROR_NO_DEVICE = 100,
    XSA_CU_ERROR_INVALID_DEVICE = 101,
    XSA_CU_ERROR_INVALID_CONTEXT = 201,
    XSA_CU_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    XSA_CU_ERROR_INVALID_HANDLE = 400,
    XSA_CU_ERROR_ILLEGAL_STATE = 401,
    XSA_CU_ERROR_LOSSY_QUERY = 402,
    XSA_CU_ERROR_NOT_FOUND = 500,
    XSA_CU_ERROR_NOT_READY = 600,
    XSA_CU_ERROR_ILLEGAL_ADDRESS = 700,
    XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    XSA_CU_ERROR_NOT_PERMITTED = 800,
    XSA_CU_ERROR_NOT_SUPPORTED = 801,
    XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    XSA_CU_ERROR_STREAM_CAPTURE_MERGE = 902,
    XSA_CU_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
    XSA_CU_ERROR_STREAM_CAPTURE_UNJOINED = 904,
    XSA_CU_ERROR_STREAM_CAPTURE_ISOLATION = 905,
    XSA_CU_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    XSA_CU_ERROR_CAPTURED_EVENT = 907,
    XSA_CU_ERROR_UNKNOWN = 999,
};

typedef int xsa_cu_result;
typedef uint64_t xsa_devptr;          /* CUdeviceptr */
typedef uint64_t xsa_mem_handle;      /* CUmemGenericAllocationHandle */
typedef void *xsa_stream;             /* CUstream; NULL is the legacy default stream */
typedef void *xsa_event;              /* CUevent */
typedef void *xsa_graph;              /* CUgraph */
typedef void *xsa_graph_exec;         /* CUgraphExec */
typedef void *xsa_graph_node;         /* CUgraphNode */

/* A stream's capture status (CUstreamCaptureStatus). */
enum {
    XSA_CAPTURE_NONE = 0,
    XSA_CAPTURE_ACTIVE = 1,
    XSA_CAPTURE_INVALIDATED = 2,
};

/* A thread's capture interaction mode (CUstreamCaptureMode). */
enum {
    XSA_CAPTURE_MODE_GLOBAL = 0,
    XSA_CAPTURE_MODE_THREAD_LOCAL = 1,
    XSA_CAPTURE_MODE_RELAXED = 2,
};

/* Device attributes the library asks for (CUdevice_attribute numbers). */
enum {
    XSA_ATTR_VMM_SUPPORTED = 102,             /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    XSA_ATTR_POSIX_FD_SUPPORTED = 103,        /* CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED */
};

/* Entry point indices, used for call counters and fault injection. */
#define XSA_DRIVER_ENTRIES(X)                                                  \
    X(init) X(device_get_count) X(device_get_attribute) X(device_total_mem)   \
    X(device_can_access_peer) X(mem_get_info) X(primary_ctx_retain)           \
    X(primary_ctx_release) X(ctx_set_current) X(mem_get_granularity)          \
    X(mem_address_reserve) X(mem_address_free) X(mem_create) X(mem_release)  \
    X(mem_map) X(mem_unmap) X(mem_set_access) X(mem_export_fd) X(mem_alloc)  \
    X(mem_free) X(stream_query) X(stream_synchronize) X(event_create)        \
    X(event_record) X(event_query) X(event_synchronize) X(event_destroy)     \
    X(stream_wait_event) X(mem_import_fd) X(stream_begin_capture)              \
    X(stream_end_capture) X(stream_get_capture_info)                          \
    X(graph_node_get_dependencies) X(graph_instantiate) X(graph_launch)       \
    X(graph_exec_destroy) X(graph_destroy) X(thread_exchange_capture_mode)   \
    X(process_get_fds) X(ctx_synchronize) X(stream_create) X(stream_destroy) \
    X(mem_host_alloc) X(mem_free_host) X(mem_host_register)                   \
    X(mem_host_unregister) X(memcpy_dtoh_async) X(memcpy_htod_async)

typedef enum {
#define XSA_DRV_ENUM(name) XSA_DRV_##name,
    XSA_DRIVER_ENTRIES(XSA_DRV_ENUM)
#undef XSA_DRV_ENUM
    XSA_DRV_COUNT
} xsa_driver_entry;

/* Name of an entry point ("mem_map"), for reports and fault injection. */
const char *xsa_driver_entry_name(xsa_driver_entry e);
/* Entry index for a name, or -1. */
int xsa_driver_entry_from_name(const char *name);

typedef struct xsa_driver {
    const char *name; /* "cuda" or "sim" */

    xsa_cu_result (*init)(void);
    xsa_cu_result (*device_get_count)(int *count);
    xsa_cu_result (*device_get_attribute)(int *value, int attribute, int device);
    xsa_cu_result (*device_total_mem)(size_t *bytes, int device);
    xsa_cu_result (*device_can_access_peer)(int *can, int device, int peer);
    /* cuMemGetInfo on the device's primary context. */
    xsa_cu_result (*mem_get_info)(int device, size_t *free_bytes, size_t *total_bytes);
    xsa_cu_result (*primary_ctx_retain)(void **ctx, int device);
    xsa_cu_result (*primary_ctx_release)(int device);
    xsa_cu_result (*ctx_set_current)(void *ctx);
    /* Minimum granularity of pinned device memory on `device`
     * (exportable: handles requested as POSIX file descriptors). */
    xsa_cu_result (*mem_get_granularity)(size_t *granularity, int device, int exportable);
    xsa_cu_result (*mem_address_reserve)(xsa_devptr *ptr, size_t size, size_t alignment);
    xsa_cu_result (*mem_address_free)(xsa_devptr ptr, size_t size);
    xsa_cu_result (*mem_create)(xsa_mem_handle *handle, size_t size, int device, int exportable);
    xsa_cu_result (*mem_release)(xsa_mem_handle handle);
    xsa_cu_result (*mem_map)(xsa_devptr ptr, size_t size, size_t offset, xsa_mem_handle handle);
    xsa_cu_result (*mem_unmap)(xsa_devptr ptr, size_t size);
    /* Grants read/write on [ptr, ptr+size) to each of devices[0..n). */
    xsa_cu_result (*mem_set_access)(xsa_devptr ptr, size_t size, const int *devices, int n);
    xsa_cu_result (*mem_export_fd)(int *fd, xsa_mem_handle handle);
    /* Classic segments: cuMemAlloc/cuMemFree on the device's primary context. */
    xsa_cu_result (*mem_alloc)(xsa_devptr *ptr, size_t size, int device);
    xsa_cu_result (*mem_free)(xsa_devptr ptr);
    xsa_cu_result (*stream_query)(xsa_stream stream);
    xsa_cu_result (*stream_synchronize)(xsa_stream stream);
    /* Events are created on the device's primary context, timing disabled. */
    xsa_cu_result (*event_create)(xsa_event *event, int device);
    xsa_cu_result (*event_record)(xsa_event event, xsa_stream stream);
    xsa_cu_result (*event_query)(xsa_event event);
    xsa_cu_result (*event_synchronize)(xsa_event event);
    xsa_cu_result (*event_destroy)(xsa_event event);
    xsa_cu_result (*stream_wait_event)(xsa_stream stream, xsa_event event);
    /* cuMemImportFromShareableHandle of a POSIX file descriptor exported by
     * mem_export_fd (possibly in another process). `device` is the device
     * the memory is on, in this process's numbering. The fd stays the
     * caller's; the handle is released with mem_release. */
    xsa_cu_result (*mem_import_fd)(xsa_mem_handle *handle, int fd, int device);
    /*
     * Stream capture (CUDA graphs). The real driver has these from CUDA
     * 12.3 on; an older one gives CUDA_ERROR_NOT_SUPPORTED from each.
     * begin_capture captures in global mode (CU_STREAM_CAPTURE_MODE_GLOBAL,
     * what torch.cuda.graph uses by default).
     */
    xsa_cu_result (*stream_begin_capture)(xsa_stream stream);
    /* Ends the capture begun on `stream`; *graph is the graph, or NULL
     * when the capture failed (invalidated, unjoined fork). */
    xsa_cu_result (*stream_end_capture)(xsa_stream stream, xsa_graph *graph);
    /* cuStreamGetCaptureInfo: *status (XSA_CAPTURE_*, required); when
     * ACTIVE, *id (unique in the process) and the nodes the next work
     * captured on the stream will depend on, its terminal nodes: *deps
     * points to *n nodes (a driver-owned array, valid until the next call
     * on the stream). id, deps and n may be NULL. A dependency with edge
     * data (programmatic edges) gives CUDA_ERROR_LOSSY_QUERY: no ordering
     * can be read from it. */
    xsa_cu_result (*stream_get_capture_info)(xsa_stream stream, int *status, uint64_t *id,
                                             const xsa_graph_node **deps, size_t *n);
    /* cuGraphNodeGetDependencies: deps NULL: *n = the count; else fills up
     * to *n entries (the rest NULL) and sets *n to the number written.
     * Valid on the graph of a capture under way too. As above, an edge
     * with data into the node gives CUDA_ERROR_LOSSY_QUERY (the simulated
     * driver's graphs have none). */
    xsa_cu_result (*graph_node_get_dependencies)(xsa_graph_node node, xsa_graph_node *deps, size_t *n);
    xsa_cu_result (*graph_instantiate)(xsa_graph_exec *exec, xsa_graph graph);
    xsa_cu_result (*graph_launch)(xsa_graph_exec exec, xsa_stream stream);
    xsa_cu_result (*graph_exec_destroy)(xsa_graph_exec exec);
    xsa_cu_result (*graph_destroy)(xsa_graph graph);
    /* cuThreadExchangeStreamCaptureMode: the calling thread's mode becomes
     * *mode (XSA_CAPTURE_MODE_*), and *mode the one it had. In relaxed
     * mode the thread may make calls that a global-mode capture would
     * otherwise refuse (cuMemAlloc, cuMemFree, queries of work outside it). */
    xsa_cu_result (*thread_exchange_capture_mode)(int *mode);
    /* Not a CUDA call: duplicates file descriptors fds[0..n) of process
     * `pid` into this one (pidfd_open + pidfd_getfd, Linux 5.6), as out[i],
     * close-on-exec and the caller's; all or none (on failure none is
     * left open). The system's error comes back as a CUresult value:
     * NOT_PERMITTED (EPERM: the kernel's ptrace rules refuse it),
     * NOT_FOUND (ESRCH: no such process), INVALID_HANDLE (EBADF: the
     * process has no such fd), NOT_SUPPORTED (ENOSYS: the kernel is older),
     * OUT_OF_MEMORY (no fd left, EMFILE/ENFILE/ENOMEM), UNKNOWN otherwise. */
    xsa_cu_result (*process_get_fds)(int pid, const int *fds, int n, int *out);
    /* cuCtxSynchronize on the device's primary context: waits for all of
     * the device's work, on every stream (a graph's replays run on streams
     * the allocator never sees). Refused during a global-mode capture. */
    xsa_cu_result (*ctx_synchronize)(int device);
    /*
     * Copies between device and host memory (the backup of paused memory).
     * stream_create: cuStreamCreate with CU_STREAM_NON_BLOCKING on the
     * device's primary context (a copy stream: no implicit synchronization
     * with the legacy stream). stream_destroy: cuStreamDestroy; work still
     * queued on the stream completes, its resources are freed after.
     */
    xsa_cu_result (*stream_create)(xsa_stream *stream, int device);
    xsa_cu_result (*stream_destroy)(xsa_stream stream);
    /* cuMemHostAlloc with CU_MEMHOSTALLOC_PORTABLE: pinned host memory,
     * pinned for every context; mem_free_host (cuMemFreeHost) frees it
     * (CUDA_ERROR_INVALID_VALUE for a pointer it did not return). These
     * and the two below name no device: they use the calling thread's
     * context, or, where it has none, the primary context of the first
     * device the library has used (device 0 before any). */
    xsa_cu_result (*mem_host_alloc)(void **host, size_t size);
    xsa_cu_result (*mem_free_host)(void *host);
    /* cuMemHostRegister with CU_MEMHOSTREGISTER_PORTABLE: pins existing
     * host memory (mmap'd, page-aligned ranges) for every context.
     * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED if any of it is pinned
     * already. mem_host_unregister (cuMemHostUnregister) takes the base
     * registered; any other pointer is CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED. */
    xsa_cu_result (*mem_host_register)(void *host, size_t size);
    xsa_cu_result (*mem_host_unregister)(void *host);
    /* cuMemcpyDtoHAsync / cuMemcpyHtoDAsync of n bytes on `stream`
     * (asynchronous with pinned host memory: the host bytes must stay
     * until the stream has done the copy). A copy may go to a stream of
     * another context than the current one; a thread without a context
     * gets the stream's. */
    xsa_cu_result (*memcpy_dtoh_async)(void *dst, xsa_devptr src, size_t n, xsa_stream stream);
    xsa_cu_result (*memcpy_htod_async)(xsa_devptr dst, const void *src, size_t n, xsa_stream stream);
    /* Never fails: unknown codes give a generic text. */
    const char *(*error_string)(xsa_cu_result result);

    /* Calls made through XSA_DRV, per entry point, and nanoseconds spent in
     * them while `timed`; bg_: the part of both made in background work. */
    _Atomic uint64_t calls[XSA_DRV_COUNT];
    _Atomic uint64_t ns[XSA_DRV_COUNT];
    _Atomic uint64_t bg_calls[XSA_DRV_COUNT];
    _Atomic uint64_t bg_ns[XSA_DRV_COUNT];
    _Atomic bool timed;
} xsa_driver;

uint64_t xsa_driver_now_ns(void);

/* Marks the calling thread's work from now on as background (on) or not
 * (its driver calls count in bg_calls and bg_ns too); returns what it
 * was, to put back. */
bool xsa_driver_background(bool on);
/* Whether the calling thread's work is background now. */
bool xsa_driver_in_background(void);

/* A GNU statement expression (gcc and clang): the call's result is kept
 * while its duration is added. */
#define XSA_DRV(d, entry, ...)                                                                   \
    __extension__({                                                                              \
        xsa_driver *drv_ = (d);                                                                  \
        bool bg_ = xsa_driver_in_background();                                                   \
        atomic_fetch_add_explicit(&drv_->calls[XSA_DRV_##entry], 1, memory_order_relaxed);      \
        if (bg_) atomic_fetch_add_explicit(&drv_->bg_calls[XSA_DRV_##entry], 1, memory_order_relaxed); \
        bool timed_ = atomic_load_explicit(&drv_->timed, memory_order_relaxed);                 \
        uint64_t t0_ = timed_ ? xsa_driver_now_ns() : 0;                                         \
        xsa_cu_result r_ = drv_->entry(__VA_ARGS__);                                            \
        if (timed_) {                                                                            \
            uint64_t dt_ = xsa_driver_now_ns() - t0_;                                            \
            atomic_fetch_add_explicit(&drv_->ns[XSA_DRV_##entry], dt_, memory_order_relaxed);   \
            if (bg_) atomic_fetch_add_explicit(&drv_->bg_ns[XSA_DRV_##entry], dt_, memory_order_relaxed); \
        }                                                                                        \
        r_;                                                                                      \
    })

/* cuMemAlloc and cuMemFree with the calling thread in relaxed capture mode,
 * as PyTorch makes them: a global-mode capture under way refuses both and
 * is invalidated (measured on the H100), while the memory of a capture's
 * blocks is the allocator's to keep alive. Where the mode cannot be
 * changed, the call is made as it is. */
xsa_cu_result xsa_driver_mem_alloc_relaxed(xsa_driver *d, xsa_devptr *ptr, size_t size, int device);
xsa_cu_result xsa_driver_mem_free_relaxed(xsa_driver *d, xsa_devptr ptr);
/* The calling thread in relaxed capture mode, for other calls that may
 * allocate or free (a memory pool's own allocator): the mode it had, or -1
 * where the mode cannot be changed; restore puts that mode back. */
int xsa_driver_relax_capture(xsa_driver *d);
void xsa_driver_restore_capture(xsa_driver *d, int mode);

/* process_get_fds as the kernel does it (both tables' entry). */
xsa_cu_result xsa_driver_process_get_fds(int pid, const int *fds, int n, int *out);

/* Copies the call counters (and the time spent, if ns is not NULL) into
 * out[XSA_DRV_COUNT]. */
void xsa_driver_read_calls(const xsa_driver *d, uint64_t out[XSA_DRV_COUNT], uint64_t ns[XSA_DRV_COUNT]);
/* The same for the part made in background work. */
void xsa_driver_read_background_calls(const xsa_driver *d, uint64_t out[XSA_DRV_COUNT], uint64_t ns[XSA_DRV_COUNT]);
void xsa_driver_reset_calls(xsa_driver *d);
/* Starts or stops adding up the time spent in each entry point. */
void xsa_driver_time_calls(xsa_driver *d, bool on);

#endif
