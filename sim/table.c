/*
 * sim/table: the simulated driver's table of entry points
 * (xsa_driver_sim()), its error strings, and its configuration
 * (xsa_sim_configure, xsalloc/sim.h). The entry points' work is done in the
 * files below: devices.c, handles.c, mappings.c (memory), host.c (pinned
 * host memory), timeline.c (streams, events, kernels, copies), capture.c
 * (stream capture and graphs, and the copies' way in);
 * state.c holds the state they share, faults.c the guard, cost.c the
 * calls' H100 cost, check.c the usage counters and invariant checker.
 *
 * Design: one global mutex guards all state; every entry point passes the
 * guard (sim/faults.h), which takes it, applies the default configuration
 * on first use, counts the call for fault injection and only then lets the
 * call do its work, so an injected fault has no effect.
 */
#include <stdbool.h>

#include "sim/capture.h"
#include "sim/devices.h"
#include "sim/faults.h"
#include "sim/handles.h"
#include "sim/host.h"
#include "sim/mappings.h"
#include "sim/state.h"
#include "sim/timeline.h"

static xsa_driver sim_table;

/* ---- configuration --------------------------------------------------- */

static bool config_valid(const xsa_sim_config *c) {
    size_t g = c->granularity;
    return c->devices >= 1 && c->devices <= XSA_SIM_MAX_DEVICES && g >= 4096 && (g & (g - 1)) == 0 &&
           c->capacity > 0 && c->capacity % g == 0;
}

static bool anything_live(void) {
    return S.live_handles || S.resv.n || S.allocs.n || S.live_events || S.live_streams || xsa_sim_host_live() ||
           xsa_sim_cap_live();
}

xsa_cu_result xsa_sim_configure(const xsa_sim_config *config) {
    if (!config || !config_valid(config)) return XSA_CU_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_cu_result r = XSA_CU_ERROR_NOT_PERMITTED;
    if (!anything_live()) {
        xsa_sim_apply_config(config);
        xsa_driver_reset_calls(&sim_table);
        r = XSA_CU_SUCCESS;
    }
    pthread_mutex_unlock(&xsa_sim_lock);
    return r;
}

/* ---- error strings ------------------------------------------------------ */

static const char *error_string(xsa_cu_result r) {
    switch (r) {
    case XSA_CU_SUCCESS: return "CUDA_SUCCESS: no error";
    case XSA_CU_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE: invalid argument";
    case XSA_CU_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY: out of memory";
    case XSA_CU_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED: initialization error";
    case XSA_CU_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected";
    case XSA_CU_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE: invalid device ordinal";
    case XSA_CU_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT: invalid device context";
    case XSA_CU_ERROR_PEER_ACCESS_UNSUPPORTED: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: peer access is not supported between these two devices";
    case XSA_CU_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE: invalid resource handle";
    case XSA_CU_ERROR_ILLEGAL_STATE: return "CUDA_ERROR_ILLEGAL_STATE: the operation cannot be performed in the present state";
    case XSA_CU_ERROR_LOSSY_QUERY: return "CUDA_ERROR_LOSSY_QUERY: attempted introspection would yield a misleading summary";
    case XSA_CU_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND: named symbol not found";
    case XSA_CU_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY: device not ready";
    case XSA_CU_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered";
    case XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: part or all of the requested memory range is already mapped";
    case XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: pointer does not correspond to a registered memory region";
    case XSA_CU_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED: operation not permitted";
    case XSA_CU_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED: operation not supported";
    case XSA_CU_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: operation not permitted when stream is capturing";
    case XSA_CU_ERROR_STREAM_CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: operation failed due to a previous error during capture";
    case XSA_CU_ERROR_STREAM_CAPTURE_MERGE: return "CUDA_ERROR_STREAM_CAPTURE_MERGE: operation would result in a merge of separate capture sequences";
    case XSA_CU_ERROR_STREAM_CAPTURE_UNMATCHED: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: capture was not ended in the same stream as it began";
    case XSA_CU_ERROR_STREAM_CAPTURE_UNJOINED: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED: capturing stream has unjoined work";
    case XSA_CU_ERROR_STREAM_CAPTURE_ISOLATION: return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION: dependency created on uncaptured work in another stream";
    case XSA_CU_ERROR_STREAM_CAPTURE_IMPLICIT: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: operation would make the legacy stream depend on a capturing blocking stream";
    case XSA_CU_ERROR_CAPTURED_EVENT: return "CUDA_ERROR_CAPTURED_EVENT: operation not permitted on an event last recorded in a capturing stream";
    case XSA_CU_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN: unknown error";
    default: return "unrecognized CUDA error code";
    }
}

/* ---- the table ---------------------------------------------------------- */
#define GUARDED(entry, call)                                                   \
    do {                                                                       \
        xsa_cu_result r_ = xsa_sim_enter(XSA_DRV_##entry);                             \
        if (r_ == XSA_CU_SUCCESS) r_ = (call);                                 \
        pthread_mutex_unlock(&xsa_sim_lock);                                       \
        return r_;                                                             \
    } while (0)

static xsa_cu_result sim_init(void) { GUARDED(init, XSA_CU_SUCCESS); }
static xsa_cu_result sim_device_get_count(int *c) { GUARDED(device_get_count, xsa_sim_device_count(c)); }
static xsa_cu_result sim_device_get_attribute(int *v, int a, int d) { GUARDED(device_get_attribute, xsa_sim_device_attribute(v, a, d)); }
static xsa_cu_result sim_device_total_mem(size_t *b, int d) { GUARDED(device_total_mem, xsa_sim_device_total_mem(b, d)); }
static xsa_cu_result sim_device_can_access_peer(int *c, int d, int p) { GUARDED(device_can_access_peer, xsa_sim_device_can_access_peer(c, d, p)); }
static xsa_cu_result sim_mem_get_info(int d, size_t *f, size_t *t) { GUARDED(mem_get_info, xsa_sim_device_mem_info(d, f, t)); }
static xsa_cu_result sim_primary_ctx_retain(void **c, int d) { GUARDED(primary_ctx_retain, xsa_sim_ctx_retain(c, d)); }
static xsa_cu_result sim_primary_ctx_release(int d) { GUARDED(primary_ctx_release, xsa_sim_ctx_release(d)); }
static xsa_cu_result sim_ctx_set_current(void *c) { GUARDED(ctx_set_current, xsa_sim_ctx_set_current(c)); }
static xsa_cu_result sim_mem_get_granularity(size_t *g, int d, int e) { GUARDED(mem_get_granularity, xsa_sim_device_granularity(g, d, e)); }
static xsa_cu_result sim_mem_address_reserve(xsa_devptr *p, size_t s, size_t a) { GUARDED(mem_address_reserve, xsa_sim_address_reserve(p, s, a)); }
static xsa_cu_result sim_mem_address_free(xsa_devptr p, size_t s) { GUARDED(mem_address_free, xsa_sim_address_free(p, s)); }
static xsa_cu_result sim_mem_create(xsa_mem_handle *h, size_t s, int d, int e) { GUARDED(mem_create, xsa_sim_handle_create(h, s, d, e)); }
static xsa_cu_result sim_mem_release(xsa_mem_handle h) { GUARDED(mem_release, xsa_sim_handle_release(h)); }
static xsa_cu_result sim_mem_map(xsa_devptr p, size_t s, size_t o, xsa_mem_handle h) { GUARDED(mem_map, xsa_sim_map(p, s, o, h)); }
static xsa_cu_result sim_mem_unmap(xsa_devptr p, size_t s) { GUARDED(mem_unmap, xsa_sim_unmap(p, s)); }
static xsa_cu_result sim_mem_set_access(xsa_devptr p, size_t s, const int *d, int n) { GUARDED(mem_set_access, xsa_sim_set_access(p, s, d, n)); }
static xsa_cu_result sim_mem_export_fd(int *fd, xsa_mem_handle h) { GUARDED(mem_export_fd, xsa_sim_handle_export(fd, h)); }
static xsa_cu_result sim_mem_alloc(xsa_devptr *p, size_t s, int d) { GUARDED(mem_alloc, xsa_sim_mem_alloc(p, s, d)); }
static xsa_cu_result sim_mem_free(xsa_devptr p) { GUARDED(mem_free, xsa_sim_mem_free(p)); }

/* cuCtxSynchronize: a global-mode capture under way refuses it and is
 * invalidated, as cuMemFree; otherwise every stream's work completes (the
 * simulator does not keep streams apart by device: waiting for more work
 * than the device's is harmless to the checks). */
static xsa_cu_result ctx_synchronize(int device) {
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    xsa_cu_result r = xsa_sim_cap_device_sync("cuCtxSynchronize");
    if (r != XSA_CU_SUCCESS) return r;
    xsa_sim_tl_synchronize_all();
    return XSA_CU_SUCCESS;
}
static xsa_cu_result sim_ctx_synchronize(int d) { GUARDED(ctx_synchronize, ctx_synchronize(d)); }
/* A stream that stream_create made and stream_destroy destroyed is refused
 * by every call that takes a stream (CUDA leaves it undefined). */
#define ON_STREAM(s, call) (xsa_sim_tl_stream_valid(s) ? (call) : XSA_CU_ERROR_INVALID_HANDLE)

static xsa_cu_result sim_stream_query(xsa_stream s) { GUARDED(stream_query, ON_STREAM(s, xsa_sim_cap_stream_query(s))); }
static xsa_cu_result sim_stream_synchronize(xsa_stream s) { GUARDED(stream_synchronize, ON_STREAM(s, xsa_sim_cap_stream_synchronize(s))); }
static xsa_cu_result sim_event_create(xsa_event *e, int d) { GUARDED(event_create, xsa_sim_tl_event_create(e, d)); }
static xsa_cu_result sim_event_record(xsa_event e, xsa_stream s) { GUARDED(event_record, ON_STREAM(s, xsa_sim_cap_event_record(e, s))); }
static xsa_cu_result sim_event_query(xsa_event e) { GUARDED(event_query, xsa_sim_cap_event_query(e)); }
static xsa_cu_result sim_event_synchronize(xsa_event e) { GUARDED(event_synchronize, xsa_sim_cap_event_synchronize(e)); }
static xsa_cu_result sim_event_destroy(xsa_event e) { GUARDED(event_destroy, xsa_sim_cap_event_destroy(e)); }
static xsa_cu_result sim_stream_wait_event(xsa_stream s, xsa_event e) { GUARDED(stream_wait_event, ON_STREAM(s, xsa_sim_cap_stream_wait_event(s, e))); }
static xsa_cu_result sim_mem_import_fd(xsa_mem_handle *h, int fd, int d) { GUARDED(mem_import_fd, xsa_sim_handle_import(h, fd, d)); }
static xsa_cu_result sim_stream_begin_capture(xsa_stream s) { GUARDED(stream_begin_capture, ON_STREAM(s, xsa_sim_cap_begin(s))); }
static xsa_cu_result sim_stream_end_capture(xsa_stream s, xsa_graph *g) { GUARDED(stream_end_capture, ON_STREAM(s, xsa_sim_cap_end(s, g))); }
static xsa_cu_result sim_stream_get_capture_info(xsa_stream s, int *st, uint64_t *id, const xsa_graph_node **d, size_t *n) { GUARDED(stream_get_capture_info, ON_STREAM(s, xsa_sim_cap_info(s, st, id, d, n))); }
static xsa_cu_result sim_graph_node_get_dependencies(xsa_graph_node nd, xsa_graph_node *d, size_t *n) { GUARDED(graph_node_get_dependencies, xsa_sim_cap_node_deps(nd, d, n)); }
static xsa_cu_result sim_graph_instantiate(xsa_graph_exec *e, xsa_graph g) { GUARDED(graph_instantiate, xsa_sim_cap_instantiate(e, g)); }
static xsa_cu_result sim_graph_launch(xsa_graph_exec e, xsa_stream s) { GUARDED(graph_launch, ON_STREAM(s, xsa_sim_cap_graph_launch(e, s))); }
static xsa_cu_result sim_graph_exec_destroy(xsa_graph_exec e) { GUARDED(graph_exec_destroy, xsa_sim_cap_exec_destroy(e)); }
static xsa_cu_result sim_graph_destroy(xsa_graph g) { GUARDED(graph_destroy, xsa_sim_cap_graph_destroy(g)); }
static xsa_cu_result sim_thread_exchange_capture_mode(int *m) { GUARDED(thread_exchange_capture_mode, xsa_sim_cap_exchange_mode(m)); }
/* The real system call: exported handles are memfds another process can take. */
static xsa_cu_result sim_process_get_fds(int pid, const int *f, int n, int *o) { GUARDED(process_get_fds, xsa_driver_process_get_fds(pid, f, n, o)); }
static xsa_cu_result sim_stream_create(xsa_stream *s, int d) { GUARDED(stream_create, xsa_sim_tl_stream_create(s, d)); }
static xsa_cu_result sim_stream_destroy(xsa_stream s) { GUARDED(stream_destroy, xsa_sim_cap_stream_destroy(s)); }

/* Pinned host memory calls are refused during a global-mode capture, which
 * they invalidate, as cuMemAlloc and cuMemFree (xsalloc/sim.h says why). */
static xsa_cu_result host_alloc(void **h, size_t s) {
    xsa_cu_result r = xsa_sim_cap_device_sync("cuMemHostAlloc");
    return r ? r : xsa_sim_host_alloc(h, s);
}
static xsa_cu_result host_free(void *h) {
    xsa_cu_result r = xsa_sim_cap_device_sync("cuMemFreeHost");
    return r ? r : xsa_sim_host_free(h);
}
static xsa_cu_result host_register(void *h, size_t s) {
    xsa_cu_result r = xsa_sim_cap_device_sync("cuMemHostRegister");
    return r ? r : xsa_sim_host_register(h, s);
}
static xsa_cu_result host_unregister(void *h) {
    xsa_cu_result r = xsa_sim_cap_device_sync("cuMemHostUnregister");
    return r ? r : xsa_sim_host_unregister(h);
}
static xsa_cu_result sim_mem_host_alloc(void **h, size_t s) { GUARDED(mem_host_alloc, host_alloc(h, s)); }
static xsa_cu_result sim_mem_free_host(void *h) { GUARDED(mem_free_host, host_free(h)); }
static xsa_cu_result sim_mem_host_register(void *h, size_t s) { GUARDED(mem_host_register, host_register(h, s)); }
static xsa_cu_result sim_mem_host_unregister(void *h) { GUARDED(mem_host_unregister, host_unregister(h)); }
static xsa_cu_result sim_memcpy_dtoh_async(void *dst, xsa_devptr src, size_t n, xsa_stream s) { GUARDED(memcpy_dtoh_async, ON_STREAM(s, xsa_sim_cap_copy(true, dst, src, n, s))); }
/* The source is only read: the one copy routine takes a non-const host pointer for both directions. */
static xsa_cu_result sim_memcpy_htod_async(xsa_devptr dst, const void *src, size_t n, xsa_stream s) { GUARDED(memcpy_htod_async, ON_STREAM(s, xsa_sim_cap_copy(false, (void *)(uintptr_t)src, dst, n, s))); }

static xsa_driver sim_table = {
    .name = "sim",
    .init = sim_init,
    .device_get_count = sim_device_get_count,
    .device_get_attribute = sim_device_get_attribute,
    .device_total_mem = sim_device_total_mem,
    .device_can_access_peer = sim_device_can_access_peer,
    .mem_get_info = sim_mem_get_info,
    .primary_ctx_retain = sim_primary_ctx_retain,
    .primary_ctx_release = sim_primary_ctx_release,
    .ctx_set_current = sim_ctx_set_current,
    .mem_get_granularity = sim_mem_get_granularity,
    .mem_address_reserve = sim_mem_address_reserve,
    .mem_address_free = sim_mem_address_free,
    .mem_create = sim_mem_create,
    .mem_release = sim_mem_release,
    .mem_map = sim_mem_map,
    .mem_unmap = sim_mem_unmap,
    .mem_set_access = sim_mem_set_access,
    .mem_export_fd = sim_mem_export_fd,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .stream_query = sim_stream_query,
    .stream_synchronize = sim_stream_synchronize,
    .event_create = sim_event_create,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_synchronize = sim_event_synchronize,
    .event_destroy = sim_event_destroy,
    .stream_wait_event = sim_stream_wait_event,
    .mem_import_fd = sim_mem_import_fd,
    .stream_begin_capture = sim_stream_begin_capture,
    .stream_end_capture = sim_stream_end_capture,
    .stream_get_capture_info = sim_stream_get_capture_info,
    .graph_node_get_dependencies = sim_graph_node_get_dependencies,
    .graph_instantiate = sim_graph_instantiate,
    .graph_launch = sim_graph_launch,
    .graph_exec_destroy = sim_graph_exec_destroy,
    .graph_destroy = sim_graph_destroy,
    .thread_exchange_capture_mode = sim_thread_exchange_capture_mode,
    .process_get_fds = sim_process_get_fds,
    .ctx_synchronize = sim_ctx_synchronize,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .mem_host_alloc = sim_mem_host_alloc,
    .mem_free_host = sim_mem_free_host,
    .mem_host_register = sim_mem_host_register,
    .mem_host_unregister = sim_mem_host_unregister,
    .memcpy_dtoh_async = sim_memcpy_dtoh_async,
    .memcpy_htod_async = sim_memcpy_htod_async,
    .error_string = error_string,
};

xsa_driver *xsa_driver_sim(void) { return &sim_table; }
