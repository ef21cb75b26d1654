/*
 * sim/check: the simulated driver's usage counters and invariant
 * checker (xsa_sim_check, xsalloc/sim.h).
 *
 * Design: the checker recomputes every counter from the tables and
 * compares; it walks pages, handles, allocations, streams (those made by
 * stream_create too), events and pinned host memory once each, under the
 * driver's lock. The mappings found on the pages (map id
 * -> handle) are collected, sorted, so that each recorded kernel use can
 * be checked against a live mapping of its own memory by binary search.
 * Each failed check names what should hold.
 */
#include <stdio.h>
#include <string.h>

#include "sim/capture.h"
#include "sim/host.h"
#include "sim/state.h"
#include "sim/timeline.h"

void xsa_sim_get_usage(xsa_sim_usage *u) {
    memset(u, 0, sizeof *u);
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    u->handles = S.live_handles;
    u->handle_bytes = S.handle_bytes;
    u->mapped_bytes = S.mapped_bytes;
    u->reservations = S.resv.n;
    u->reserved_bytes = S.reserved_bytes;
    u->mem_allocs = S.allocs.n;
    u->mem_alloc_bytes = S.alloc_bytes;
    u->events = S.live_events;
    for (size_t i = 0; i < S.events.n; i++)
        if (S.events.v[i].live && xsa_sim_tl_event_pending(&S.events.v[i])) u->pending_events++;
    for (size_t i = 0; i < S.streams.n; i++) {
        const sim_stream *st = &S.streams.v[i];
        for (size_t k = st->head; k < st->ops.n; k++) {
            u->pending_kernels += st->ops.v[k].kind == OP_KERNEL;
            u->pending_copies += st->ops.v[k].kind == OP_COPY;
        }
    }
    u->streams = S.live_streams;
    xsa_sim_host_usage(u);
    for (int d = 0; d < S.cfg.devices; d++) u->device_used[d] = S.dev[d].used;
    xsa_sim_cap_usage(u);
    pthread_mutex_unlock(&xsa_sim_lock);
}

unsigned xsa_sim_page_access(xsa_devptr ptr) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    const sim_reservation *r = xsa_sim_resv_holding((uintptr_t)ptr, 1);
    unsigned bits = r ? r->pages[((uintptr_t)ptr - r->base) / S.cfg.granularity].access : 0;
    pthread_mutex_unlock(&xsa_sim_lock);
    return bits;
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), 0)

/* A live mapping, found on the pages. */
typedef struct {
    uint64_t map_id;
    uint32_t handle;
} map_ref;

typedef ARRAY(map_ref) map_refs;

static int cmp_map_ref(const void *a, const void *b) {
    uint64_t x = ((const map_ref *)a)->map_id, y = ((const map_ref *)b)->map_id;
    return x < y ? -1 : x > y;
}

static const map_ref *find_map(const map_refs *maps, uint64_t map_id) {
    map_ref key = {.map_id = map_id};
    if (!maps->n) return NULL; /* bsearch may not be given NULL */
    return bsearch(&key, maps->v, maps->n, sizeof key, cmp_map_ref);
}

/* Pages: mapped ones name a handle still holding memory, access only where
 * mapped and allowed; counts per handle go to refs[], each mapping to maps
 * (at its first page); totals are checked. */
static int check_pages(size_t *refs, map_refs *maps, char *err, size_t errlen) {
    size_t g = S.cfg.granularity, total = 0, resv_bytes = 0;
    for (size_t k = 0; k < S.resv.n; k++) {
        const sim_reservation *r = &S.resv.v[k];
        if (k && S.resv.v[k - 1].base + S.resv.v[k - 1].size > r->base) return FAIL("reservations overlap or are unsorted");
        size_t mapped = 0;
        for (size_t i = 0; i < r->size / g; i++) {
            const sim_page *pg = &r->pages[i];
            if (!pg->map_id) {
                if (pg->access) return FAIL("unmapped page %zu of reservation %zu has access bits", i, k);
                continue;
            }
            if (pg->handle >= S.handles.n || S.handles.v[pg->handle].state == SLOT_FREE)
                return FAIL("page %zu of reservation %zu maps a freed handle", i, k);
            int owner = S.handles.v[pg->handle].device;
            for (int d = 0; d < XSA_SIM_MAX_DEVICES; d++)
                if ((pg->access >> d & 1) && (d >= S.cfg.devices || (d != owner && !S.cfg.peer[d][owner])))
                    return FAIL("page %zu of reservation %zu grants access to device %d", i, k, d);
            if (i == 0 || r->pages[i - 1].map_id != pg->map_id) {
                if (!ARRAY_RESERVE(*maps, maps->n + 1)) return FAIL("out of memory");
                maps->v[maps->n++] = (map_ref){pg->map_id, pg->handle};
            }
            refs[pg->handle]++;
            mapped++;
        }
        if (mapped != r->mapped_pages) return FAIL("reservation %zu counts %zu mapped pages, has %zu", k, r->mapped_pages, mapped);
        total += mapped;
        resv_bytes += r->size;
    }
    if (total * g != S.mapped_bytes) return FAIL("mapped_bytes %zu, pages say %zu", S.mapped_bytes, total * g);
    if (resv_bytes != S.reserved_bytes) return FAIL("reserved_bytes %zu, reservations say %zu", S.reserved_bytes, resv_bytes);
    if (maps->n) qsort(maps->v, maps->n, sizeof *maps->v, cmp_map_ref);
    for (size_t i = 1; i < maps->n; i++)
        if (maps->v[i].map_id == maps->v[i - 1].map_id) return FAIL("map id %llu is on two ranges", (unsigned long long)maps->v[i].map_id);
    return 1;
}

/* A kernel's or copy's use of memory of `size` bytes: inside it, on a
 * known stream, launched by now, and if pending, a kernel or copy still
 * queued there. */
static int check_use(const sim_use *u, size_t size, const char *what, size_t idx, char *err, size_t errlen) {
    if (u->len == 0 || u->off > size || u->len > size - u->off) return FAIL("a use of %s %zu is outside it", what, idx);
    if (u->stream >= S.streams.n || u->seq > S.streams.v[u->stream].last)
        return FAIL("a use of %s %zu names work its stream never queued", what, idx);
    if (u->queued > S.now) return FAIL("a use of %s %zu was launched after now", what, idx);
    if (xsa_sim_tl_use_pending(u)) {
        const sim_op *op = xsa_sim_tl_find_op(&S.streams.v[u->stream], u->seq);
        if (!op || (op->kind != OP_KERNEL && op->kind != OP_COPY))
            return FAIL("a pending use of %s %zu has no kernel or copy queued", what, idx);
    }
    return 1;
}

/* Handles: mapping refcounts match refs[], released ones are still mapped,
 * uses go through live mappings of their own handle; adds their bytes to
 * used[]. */
static int check_handles(const size_t *refs, const map_refs *maps, size_t *used, char *err, size_t errlen) {
    size_t live = 0, bytes = 0, free_slots = 0;
    for (size_t i = 0; i < S.handles.n; i++) {
        const sim_handle *h = &S.handles.v[i];
        if (h->state == SLOT_FREE) {
            free_slots++;
            if (refs[i]) return FAIL("freed handle slot %zu is mapped", i);
            if (h->uses.n) return FAIL("freed handle slot %zu has kernel uses", i);
            continue;
        }
        if (h->mapped_pages != refs[i]) return FAIL("handle slot %zu counts %zu mapped pages, has %zu", i, h->mapped_pages, refs[i]);
        if (h->state == SLOT_RELEASED && !h->mapped_pages) return FAIL("released handle slot %zu is unmapped but not freed", i);
        if (h->size == 0 || h->size % S.cfg.granularity) return FAIL("handle slot %zu has size %zu", i, h->size);
        for (size_t k = 0; k < h->uses.n; k++) {
            const map_ref *m = find_map(maps, h->uses.v[k].map_id);
            if (!m || m->handle != i) return FAIL("a use of handle slot %zu names no live mapping of it", i);
            if (!check_use(&h->uses.v[k], h->size, "handle slot", i, err, errlen)) return 0;
        }
        live++;
        if (!h->imported) {
            bytes += h->size;
            used[h->device] += h->size;
        }
    }
    if (live != S.live_handles || bytes != S.handle_bytes) return FAIL("handle counters %zu/%zu, table says %zu/%zu", S.live_handles, S.handle_bytes, live, bytes);
    if (free_slots != S.free_handle_slots.n) return FAIL("%zu free handle slots, free list holds %zu", free_slots, S.free_handle_slots.n);
    return 1;
}

static int check_allocs_and_devices(const map_refs *maps, size_t *used, char *err, size_t errlen) {
    size_t bytes = 0;
    for (size_t i = 0; i < S.allocs.n; i++) {
        const sim_alloc *a = &S.allocs.v[i];
        if (i && S.allocs.v[i - 1].base >= a->base) return FAIL("allocations are unsorted");
        if (!a->id || a->id > S.next_map_id || find_map(maps, a->id)) return FAIL("allocation %zu has id %llu", i, (unsigned long long)a->id);
        for (size_t k = 0; k < a->uses.n; k++) {
            if (a->uses.v[k].map_id != a->id) return FAIL("a use of allocation %zu names another mapping", i);
            if (!check_use(&a->uses.v[k], a->size, "allocation", i, err, errlen)) return 0;
        }
        used[a->device] += a->size;
        bytes += a->size;
    }
    if (bytes != S.alloc_bytes) return FAIL("mem_alloc bytes %zu, allocations say %zu", S.alloc_bytes, bytes);
    for (int d = 0; d < XSA_SIM_MAX_DEVICES; d++) {
        if (used[d] != S.dev[d].used) return FAIL("device %d uses %zu bytes, handles and allocations say %zu", d, S.dev[d].used, used[d]);
        if (used[d] > S.cfg.capacity) return FAIL("device %d over capacity", d);
    }
    return 1;
}

/* A vector clock names only work its streams have queued. */
static int check_clock(const sim_clock *c, const char *what, size_t idx, char *err, size_t errlen) {
    if (c->n > S.streams.n) return FAIL("%s %zu has a clock for unknown streams", what, idx);
    for (size_t j = 0; j < c->n; j++)
        if (c->v[j] > S.streams.v[j].last) return FAIL("%s %zu is ordered after work stream %zu never queued", what, idx, j);
    return 1;
}

/* Streams: pending work sorted by sequence and by time, after `done`, not
 * yet due (due work is retired at once), ending at `last`. */
static int check_streams(char *err, size_t errlen) {
    for (size_t i = 0; i < S.streams.n; i++) {
        const sim_stream *st = &S.streams.v[i];
        for (size_t j = 0; j < i; j++)
            if (S.streams.v[j].stream == st->stream) return FAIL("streams %zu and %zu are one stream", j, i);
        if (st->head > st->ops.n) return FAIL("stream %zu's queue head is past its end", i);
        bool empty = st->head == st->ops.n;
        if (empty != (st->done == st->last)) return FAIL("stream %zu: done %llu, last %llu, %zu pending", i,
                                                         (unsigned long long)st->done, (unsigned long long)st->last, st->ops.n - st->head);
        if (!empty && st->ops.v[st->ops.n - 1].seq != st->last) return FAIL("stream %zu's last work is not queued last", i);
        for (size_t k = st->head; k < st->ops.n; k++) {
            const sim_op *op = &st->ops.v[k];
            if (op->time <= S.now) return FAIL("stream %zu holds work due at tick %llu, now is %llu", i,
                                               (unsigned long long)op->time, (unsigned long long)S.now);
            uint64_t prev_seq = k > st->head ? st->ops.v[k - 1].seq : st->done;
            if (op->seq <= prev_seq) return FAIL("stream %zu's queue is out of sequence", i);
            if (k > st->head && op->time < st->ops.v[k - 1].time) return FAIL("stream %zu's work completes out of order", i);
        }
        if (!check_clock(&st->clock, "stream", i, err, errlen)) return 0;
    }
    return 1;
}

/* Streams made by stream_create: the live ones counted, on a configured
 * device; the free list holds exactly the others. */
static int check_created_streams(char *err, size_t errlen) {
    size_t live = 0;
    for (size_t i = 0; i < S.created.n; i++) {
        const sim_created_stream *cs = &S.created.v[i];
        if (!cs->gen) return FAIL("created stream slot %zu has generation 0", i);
        if (!cs->live) continue;
        if (!xsa_sim_device_ok(cs->device)) return FAIL("created stream slot %zu is on device %d", i, cs->device);
        live++;
    }
    if (live != S.live_streams) return FAIL("%zu live streams counted, table has %zu", S.live_streams, live);
    if (S.created.n - live != S.free_stream_slots.n) return FAIL("stream free list out of step");
    for (size_t k = 0; k < S.free_stream_slots.n; k++) {
        uint32_t slot = S.free_stream_slots.v[k];
        if (slot >= S.created.n || S.created.v[slot].live) return FAIL("the stream free list names a live slot");
    }
    return 1;
}

static int check_events(char *err, size_t errlen) {
    size_t live = 0;
    for (size_t i = 0; i < S.events.n; i++) {
        const sim_event *ev = &S.events.v[i];
        if (!ev->live) {
            if (ev->clock.n) return FAIL("destroyed event slot %zu keeps a clock", i);
            continue;
        }
        live++;
        if (!ev->seq) continue;
        if (ev->stream >= S.streams.n || ev->seq > S.streams.v[ev->stream].last)
            return FAIL("event slot %zu recorded on an unknown stream", i);
        if (ev->clock.n <= ev->stream || ev->clock.v[ev->stream] != ev->seq)
            return FAIL("event slot %zu's clock does not hold its record", i);
        if (!check_clock(&ev->clock, "event slot", i, err, errlen)) return 0;
    }
    if (live != S.live_events) return FAIL("%zu live events counted, table has %zu", S.live_events, live);
    if (S.events.n - live != S.free_event_slots.n) return FAIL("event free list out of step");
    return 1;
}

static int check_violations(char *err, size_t errlen) {
    const xsa_sim_violations *v = &S.violations;
    bool any = v->unmapped_in_use || v->races || v->bad_launches || v->failed_captures;
    if (any != (v->first[0] != 0)) return FAIL("violations counted and the first one's sentence disagree");
    return 1;
}

int xsa_sim_check(char *err, size_t errlen) {
    char dummy[1];
    if (!err) err = dummy, errlen = sizeof dummy;
    size_t used[XSA_SIM_MAX_DEVICES] = {0};
    map_refs maps = {0};
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    size_t *refs = calloc(S.handles.n + 1, sizeof *refs);
    int ok = refs ? 1 : FAIL("out of memory");
    ok = ok && check_pages(refs, &maps, err, errlen);
    ok = ok && check_handles(refs, &maps, used, err, errlen);
    ok = ok && check_allocs_and_devices(&maps, used, err, errlen);
    ok = ok && check_streams(err, errlen);
    ok = ok && check_created_streams(err, errlen);
    ok = ok && check_events(err, errlen);
    ok = ok && xsa_sim_host_check(err, errlen);
    ok = ok && check_violations(err, errlen);
    ok = ok && xsa_sim_cap_check(err, errlen);
    pthread_mutex_unlock(&xsa_sim_lock);
    free(refs);
    ARRAY_FREE(maps);
    return ok;
}
