/*
 * api/torch_graphs: torch.cuda.graph's pool routing through PyTorch's
 * CUDAPluggableAllocator (set_begin_allocate_to_pool,
 * set_end_allocate_to_pool_fn, set_release_pool).
 *
 * Design: torch hands its stream filter over as a C++ std::function,
 * which C can neither call nor keep past the call. The filter torch builds
 * accepts the streams capturing into the graph's capture, so xsalloc's
 * does the same with the driver: a stream is routed while
 * cuStreamGetCaptureInfo says it is capturing, and the first capturing
 * stream seen binds the routing to its capture id (torch begins the
 * routing before it begins the capture), so a capture on another thread
 * into another graph is not taken for this one. Routes live in a list under
 * a mutex: begin and end are rare; the filter itself runs under the
 * device's lock (pool/), which serializes the binding.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "api/devices.h"
#include "api/torch_call.h"
#include "xsalloc/pytorch.h"

typedef struct torch_route {
    int device;
    xsa_mempool_id id;
    uint64_t capture; /* 0 until the first capturing stream is seen */
    struct torch_route *next;
} torch_route;

static pthread_mutex_t routes_lock = PTHREAD_MUTEX_INITIALIZER;
static torch_route *routes;

static bool capturing_into(void *ctx, void *stream) {
    torch_route *r = ctx;
    int status = XSA_CAPTURE_NONE;
    uint64_t id = 0;
    xsa_driver *drv = xsa_active_driver();
    if (!drv || XSA_DRV(drv, stream_get_capture_info, stream, &status, &id, NULL, NULL) != XSA_CU_SUCCESS ||
        status != XSA_CAPTURE_ACTIVE)
        return false;
    if (!r->capture) r->capture = id;
    return r->capture == id;
}

/* Unlinks and returns the route of (device, id), or NULL. */
static torch_route *take_route(int device, xsa_mempool_id id) {
    for (torch_route **at = &routes; *at; at = &(*at)->next) {
        torch_route *r = *at;
        if (r->device == device && r->id.first == id.first && r->id.second == id.second) {
            *at = r->next;
            return r;
        }
    }
    return NULL;
}

void xsa_torch_begin_allocate_to_pool(int device, xsa_mempool_id id, const void *torch_filter) {
    (void)torch_filter; /* a std::function: see the design comment */
    torch_route *r = calloc(1, sizeof *r);
    if (!r) {
        xsa_torch_report("xsa_torch_begin_allocate_to_pool", XSA_ERROR_OUT_OF_MEMORY);
        return;
    }
    *r = (torch_route){.device = device, .id = id};
    pthread_mutex_lock(&routes_lock);
    xsa_status st = XSA_KEEPING_CONTEXT(xsa_begin_allocate_to_pool(device, id, capturing_into, r));
    if (st == XSA_SUCCESS) {
        r->next = routes;
        routes = r;
    }
    pthread_mutex_unlock(&routes_lock);
    if (xsa_torch_check("xsa_torch_begin_allocate_to_pool", st) != XSA_SUCCESS) free(r);
}

void xsa_torch_end_allocate_to_pool(int device, xsa_mempool_id id) {
    pthread_mutex_lock(&routes_lock);
    xsa_status st = XSA_KEEPING_CONTEXT(xsa_end_allocate_to_pool(device, id));
    /* The routing is over even when ending reported an error (xsalloc.h). */
    free(take_route(device, id));
    pthread_mutex_unlock(&routes_lock);
    xsa_torch_check("xsa_torch_end_allocate_to_pool", st);
}

void xsa_torch_release_pool(int device, xsa_mempool_id id) {
    xsa_torch_check("xsa_torch_release_pool", XSA_KEEPING_CONTEXT(xsa_mempool_release(device, id)));
}
