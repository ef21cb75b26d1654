/*
 * api/snapshot: xsa_snapshot_json / xsa_snapshot_pickle / xsa_dump_snapshot.
 *
 * Design: each device is locked in turn just long enough to copy its pool's
 * description (pool/snapshot.c) and its trace ring (api/observe.c); the
 * document is then written once, through api/emit.h, in the layout of
 * PyTorch's torch.cuda.memory._snapshot() so that its viewers read it.
 * Pointers and streams are written as integers (PyTorch writes the stream
 * handle as an integer too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/devices.h"
#include "api/emit.h"
#include "api/errors.h"
#include "api/observe.h"
#include "api/pickle.h"
#include "pool/snapshot.h"

typedef struct device_copy {
    bool has_pool;
    xsa_pool_snapshot pool;
    xsa_history_entry *history;
    size_t n_history;
} device_copy;

static void free_copies(device_copy *c, int n) {
    for (int d = 0; d < n; d++) {
        if (c[d].has_pool) xsa_pool_snapshot_free(&c[d].pool);
        free(c[d].history);
    }
    free(c);
}

/* Copies device d's pool (p, NULL if it has none) and trace ring into *c,
 * with d's lock held. False if host memory runs out. */
static bool copy_device(int d, const xsa_pool *p, device_copy *c) {
    if (p) {
        if (xsa_pool_snapshot_take(p, &c->pool) != XSA_POOL_OK) return false;
        c->has_pool = true;
    }
    return xsa_history_copy(d, &c->history, &c->n_history);
}

/* Copies every device's state into *out (n devices). */
static xsa_status copy_devices(device_copy **out, int *n) {
    xsa_status st = xsa_device_count(n);
    if (st != XSA_SUCCESS) return st;
    device_copy *c = calloc((size_t)*n, sizeof *c);
    bool ok = c != NULL;
    for (int d = 0; d < *n && ok; d++) {
        xsa_pool *p = NULL;
        if ((st = xsa_api_lock("snapshot", d, false, &p)) != XSA_SUCCESS) break;
        ok = copy_device(d, p, &c[d]);
        xsa_api_unlock(d);
    }
    if (st != XSA_SUCCESS) {
        free_copies(c, *n);
        return st;
    }
    if (!ok) {
        if (c) free_copies(c, *n);
        return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "snapshot: out of host memory");
    }
    *out = c;
    return XSA_SUCCESS;
}

static int64_t as_int(uintptr_t v) { return (int64_t)v; }

static void emit_block(xsa_emitter *e, const xsa_snap_block *b) {
    static const char *const state[] = {
        [XSA_SNAP_ALLOCATED] = "active_allocated",
        [XSA_SNAP_PENDING_FREE] = "active_pending_free",
        [XSA_SNAP_INACTIVE] = "inactive",
    };
    xsa_emit_dict(e);
    xsa_emit_key(e, "address"), xsa_emit_int(e, as_int(b->addr));
    xsa_emit_key(e, "size"), xsa_emit_int(e, (int64_t)b->size);
    xsa_emit_key(e, "requested_size"), xsa_emit_int(e, (int64_t)b->requested);
    xsa_emit_key(e, "state"), xsa_emit_str(e, state[b->state]);
    xsa_emit_key(e, "frames"), xsa_emit_list(e), xsa_emit_end(e);
    xsa_emit_end(e);
}

/* PyTorch's segment_pool_id: (0, 0) for the device's own cache. */
static void emit_pool_id(xsa_emitter *e, xsa_mempool_id id) {
    xsa_emit_key(e, "segment_pool_id"), xsa_emit_tuple(e);
    xsa_emit_int(e, (int64_t)id.first), xsa_emit_int(e, (int64_t)id.second), xsa_emit_end(e);
}

static void emit_segment(xsa_emitter *e, int device, const xsa_pool_snapshot *ps, const xsa_snap_segment *s) {
    xsa_emit_dict(e);
    xsa_emit_key(e, "device"), xsa_emit_int(e, device);
    xsa_emit_key(e, "address"), xsa_emit_int(e, as_int(s->addr));
    xsa_emit_key(e, "total_size"), xsa_emit_int(e, (int64_t)s->total_size);
    xsa_emit_key(e, "allocated_size"), xsa_emit_int(e, (int64_t)s->allocated_size);
    xsa_emit_key(e, "active_size"), xsa_emit_int(e, (int64_t)s->active_size);
    xsa_emit_key(e, "requested_size"), xsa_emit_int(e, (int64_t)s->requested_size);
    xsa_emit_key(e, "stream"), xsa_emit_int(e, as_int((uintptr_t)s->stream));
    xsa_emit_key(e, "segment_type"), xsa_emit_str(e, s->large ? "large" : "small");
    emit_pool_id(e, s->pool_id);
    xsa_emit_key(e, "is_expandable"), xsa_emit_bool(e, s->expandable);
    /* xsalloc's own key, only where it says something: a paused pool's
     * segment (xsa_pause), whose pages are released until resumed. */
    if (s->paused) xsa_emit_key(e, "is_paused"), xsa_emit_bool(e, true);
    xsa_emit_key(e, "frames"), xsa_emit_list(e), xsa_emit_end(e);
    xsa_emit_key(e, "blocks"), xsa_emit_list(e);
    for (size_t i = 0; i < s->n_blocks; i++) emit_block(e, &ps->blocks[s->first_block + i]);
    xsa_emit_end(e);
    xsa_emit_end(e);
}

static void emit_trace(xsa_emitter *e, const xsa_history_entry *h, size_t n) {
    xsa_emit_list(e);
    for (size_t i = 0; i < n; i++) {
        const char *name = xsa_action_name(h[i].action);
        if (!name) continue;
        xsa_emit_dict(e);
        xsa_emit_key(e, "action"), xsa_emit_str(e, name);
        xsa_emit_key(e, h[i].action == XSA_ACT_OOM ? "device_free" : "addr"), xsa_emit_int(e, as_int(h[i].addr));
        xsa_emit_key(e, "size"), xsa_emit_int(e, (int64_t)h[i].size);
        xsa_emit_key(e, "stream"), xsa_emit_int(e, as_int((uintptr_t)h[i].stream));
        xsa_emit_key(e, "time_us"), xsa_emit_int(e, (int64_t)(h[i].time_ns / 1000));
        /* PyTorch's values when nothing was attached or compiled. */
        xsa_emit_key(e, "compile_context"), xsa_emit_str(e, "N/A");
        xsa_emit_key(e, "user_metadata"), xsa_emit_str(e, "");
        xsa_emit_key(e, "frames"), xsa_emit_list(e), xsa_emit_end(e);
        xsa_emit_end(e);
    }
    xsa_emit_end(e);
}

/* Each reservation with its mapped ranges (the segments cut from it). */
static void emit_reservations(xsa_emitter *e, int device, const xsa_pool_snapshot *ps) {
    for (size_t r = 0; r < ps->n_reservations; r++) {
        const xsa_snap_reservation *v = &ps->reservations[r];
        xsa_emit_dict(e);
        xsa_emit_key(e, "device"), xsa_emit_int(e, device);
        xsa_emit_key(e, "address"), xsa_emit_int(e, as_int(v->addr));
        xsa_emit_key(e, "reserved_size"), xsa_emit_int(e, (int64_t)v->size);
        xsa_emit_key(e, "mapped_size"), xsa_emit_int(e, (int64_t)v->mapped);
        xsa_emit_key(e, "stream"), xsa_emit_int(e, as_int((uintptr_t)v->stream));
        xsa_emit_key(e, "segment_type"), xsa_emit_str(e, v->large ? "large" : "small");
        emit_pool_id(e, v->pool_id);
        xsa_emit_key(e, "mapped_ranges"), xsa_emit_list(e);
        for (size_t i = 0; i < ps->n_segments; i++) {
            const xsa_snap_segment *s = &ps->segments[i];
            if (!s->expandable || s->reservation != v->addr) continue;
            xsa_emit_list(e), xsa_emit_int(e, as_int(s->addr)), xsa_emit_int(e, (int64_t)s->total_size), xsa_emit_end(e);
        }
        xsa_emit_end(e);
        xsa_emit_end(e);
    }
}

static void emit_settings(xsa_emitter *e) {
    xsa_pool_options opts;
    xsa_api_options(&opts);
    const xsa_pool_options *o = &opts;
    const char *conf, *under, *under_conf, *source = xsa_api_conf_source(&conf, &under, &under_conf);
    const char *changed = xsa_api_runtime_settings();
    if (changed) conf = changed, source = "xsa_set_allocator_settings"; /* PyTorch's: the last string given */
    xsa_emit_dict(e);
    /* PyTorch's key for the settings string in use, whichever variable
     * gave it; then xsalloc's: which one ("none" when none was set). */
    xsa_emit_key(e, "PYTORCH_CUDA_ALLOC_CONF"), xsa_emit_str(e, conf ? conf : "");
    xsa_emit_key(e, "conf_source"), xsa_emit_str(e, source ? source : "none");
    if (under) { /* XSALLOC_CONF layered over PyTorch's variable */
        xsa_emit_key(e, "conf_layered_over"), xsa_emit_str(e, under);
        xsa_emit_key(e, "conf_layered_over_text"), xsa_emit_str(e, under_conf);
    }
    xsa_emit_key(e, "expandable_segments"), xsa_emit_bool(e, o->expandable_segments);
    xsa_emit_key(e, "page_recycling"), xsa_emit_bool(e, o->page_recycling);
    xsa_emit_key(e, "max_split_size"), xsa_emit_int(e, o->max_split_size == SIZE_MAX ? -1 : (int64_t)o->max_split_size);
    xsa_emit_key(e, "garbage_collection_threshold"), xsa_emit_real(e, o->garbage_collection_threshold);
    xsa_emit_key(e, "per_process_memory_fraction"), xsa_emit_real(e, o->memory_fraction);
    /* PyTorch's keys: the interval's lower bound in MiB (1, 2, 4, ...). */
    xsa_emit_key(e, "roundup_power2_divisions"), xsa_emit_dict(e);
    for (int i = 0; i < XSA_ROUNDUP_INTERVALS; i++) {
        char mib[16];
        snprintf(mib, sizeof mib, "%d", 1 << i);
        xsa_emit_key(e, mib), xsa_emit_int(e, (int64_t)o->roundup_power2_divisions[i]);
    }
    xsa_emit_end(e);
    xsa_emit_end(e);
}

static void emit_snapshot(xsa_emitter *e, const device_copy *c, int n) {
    xsa_emit_dict(e);
    xsa_emit_key(e, "segments"), xsa_emit_list(e);
    for (int d = 0; d < n; d++)
        for (size_t i = 0; c[d].has_pool && i < c[d].pool.n_segments; i++)
            emit_segment(e, d, &c[d].pool, &c[d].pool.segments[i]);
    xsa_emit_end(e);
    xsa_emit_key(e, "device_traces"), xsa_emit_list(e);
    for (int d = 0; d < n; d++) emit_trace(e, c[d].history, c[d].n_history);
    xsa_emit_end(e);
    xsa_emit_key(e, "allocator_settings"), emit_settings(e);
    xsa_emit_key(e, "external_annotations"), xsa_emit_list(e), xsa_emit_end(e);
    xsa_emit_key(e, "expandable_segments"), xsa_emit_list(e);
    for (int d = 0; d < n; d++)
        if (c[d].has_pool) emit_reservations(e, d, &c[d].pool);
    xsa_emit_end(e);
    xsa_emit_end(e);
}

static xsa_status snapshot(xsa_emitter *e, void **data, size_t *len) {
    int n = 0;
    device_copy *c = NULL;
    xsa_status st = copy_devices(&c, &n);
    if (st != XSA_SUCCESS) {
        free(e->data);
        return st;
    }
    emit_snapshot(e, c, n);
    free_copies(c, n);
    if (!xsa_emit_finish(e, data, len)) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "snapshot: out of host memory");
    return xsa_ok();
}

xsa_status xsa_snapshot_json(char **out) {
    if (!out) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_snapshot_json: out is NULL");
    xsa_emitter e;
    xsa_emit_json(&e);
    size_t len;
    return snapshot(&e, (void **)out, &len);
}

xsa_status xsa_snapshot_pickle(void **bytes, size_t *len) {
    if (!bytes || !len) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_snapshot_pickle: bytes or len is NULL");
    xsa_emitter e;
    xsa_emit_pickle(&e);
    return snapshot(&e, bytes, len);
}

xsa_status xsa_dump_snapshot(const char *path) {
    if (!path) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_dump_snapshot: path is NULL");
    void *bytes;
    size_t len;
    xsa_status st = xsa_snapshot_pickle(&bytes, &len);
    if (st != XSA_SUCCESS) return st;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(bytes, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = false;
    free(bytes);
    if (!ok) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_dump_snapshot: cannot write %s", path);
    return xsa_ok();
}

void xsa_free_buffer(void *buffer) { free(buffer); }

xsa_status xsa_device_snapshot_take(int device, xsa_device_snapshot *out) {
    if (!out) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_device_snapshot_take: out is NULL");
    *out = (xsa_device_snapshot){0};
    xsa_pool *p = NULL;
    xsa_status st = xsa_api_lock("xsa_device_snapshot_take", device, false, &p);
    if (st != XSA_SUCCESS) return st;
    device_copy c = {0};
    bool ok = copy_device(device, p, &c);
    xsa_api_unlock(device);
    if (!ok) {
        xsa_pool_snapshot_free(&c.pool);
        free(c.history);
        return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_device_snapshot_take: out of host memory");
    }
    /* The reservations are the JSON snapshot's alone. */
    *out = (xsa_device_snapshot){
        .segments = c.pool.segments, .n_segments = c.pool.n_segments,
        .blocks = c.pool.blocks, .n_blocks = c.pool.n_blocks,
        .history = c.history, .n_history = c.n_history,
    };
    free(c.pool.reservations);
    return xsa_ok();
}

void xsa_device_snapshot_free(xsa_device_snapshot *snap) {
    if (!snap) return;
    free(snap->segments);
    free(snap->blocks);
    free(snap->history);
    *snap = (xsa_device_snapshot){0};
}
