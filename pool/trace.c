/* pool/trace: the observer of a pool (design in trace.h). */
#include "pool/trace.h"

#include "pool/state.h"

void xsa_pool_set_observer(xsa_pool *p, xsa_observer_fn fn, void *ctx) {
    p->observer = fn;
    p->observer_ctx = ctx;
}

void xsa_observe_emit(xsa_pool *p, xsa_obs_kind kind, int pool, uintptr_t addr, size_t size, size_t block_size,
                      xsa_stream stream) {
    xsa_obs_event e = {
        .kind = kind, .device = p->device, .pool = pool, .addr = addr,
        .size = size, .block_size = block_size, .stream = stream,
    };
    p->observer(p->observer_ctx, &e);
}
