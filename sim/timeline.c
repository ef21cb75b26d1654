/*
 * sim/timeline: the simulated GPU's timeline: streams (those made by
 * stream_create too), events, the CPU's clock, kernels and copies, their
 * uses of memory and the violations (the rules are in xsalloc/sim.h).
 *
 * Design: every piece of work queued on a stream (kernel, event record,
 * stream wait) gets a global sequence number and a completion time, fixed
 * when it is queued: in timeline mode max(its base, the completion of the
 * stream's previous work), so each queue is sorted by both; in manual mode
 * SIM_NEVER. A stream keeps its pending work in a FIFO and `done`, the
 * number of its last completed work. Whatever is due is retired as soon as
 * the clock moves or work is queued, so `done` is always current: a query
 * is O(1), and "pending" means seq > done everywhere.
 *
 * Ordering between streams is a vector clock per stream (clock[j]: the last
 * work of stream j it is ordered after), copied into an event at its record
 * and merged into a stream at a wait. A kernel's uses are kept on the
 * physical memory they touch (state.h): a launch checks the other
 * streams' pending uses of the same bytes (a race unless ordered), an unmap
 * or cuMemFree checks the pending uses that went through that mapping.
 * Completed uses are dropped whenever a list is walked. A copy is a kernel
 * whose op says OP_COPY (for the sentences and the usage counters), plus
 * a memmove when it is queued.
 *
 * Streams made by stream_create live in a slot table like events, their
 * value tagged so that it is never a canonical address: tests' made-up
 * streams (small numbers) and traces' (real addresses) stay what they
 * were, and a destroyed stream's value is known as one. Its record in the
 * queues stays (its work completes as it would; indices in vector clocks
 * stay valid) until the next configuration, as every stream's does.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/timeline.h"

/* ---- streams and their queues ------------------------------------------ */

/* Index of a stream's record, or S.streams.n if it never had work. */
static size_t stream_index(xsa_stream s) {
    size_t i = 0;
    while (i < S.streams.n && S.streams.v[i].stream != s) i++;
    return i;
}

/* Index of a stream's record, made if needed; false without memory. */
static bool stream_get(xsa_stream s, size_t *i) {
    *i = stream_index(s);
    if (*i < S.streams.n) return true;
    if (!ARRAY_RESERVE(S.streams, *i + 1)) return false;
    S.streams.v[S.streams.n++] = (sim_stream){.stream = s};
    return true;
}

static bool has_pending(const sim_stream *st) { return st->head < st->ops.n; }

/* Completion time of the stream's last queued work (0 when none is pending). */
static uint64_t tail_time(const sim_stream *st) { return has_pending(st) ? st->ops.v[st->ops.n - 1].time : 0; }

/* Completes pending work while it is due (time <= now) or, when forced, up
 * to sequence number `through`. */
static void retire(sim_stream *st, uint64_t through) {
    while (has_pending(st) && (st->ops.v[st->head].time <= S.now || st->ops.v[st->head].seq <= through))
        st->done = st->ops.v[st->head++].seq;
    if (!has_pending(st)) {
        st->head = st->ops.n = 0;
    } else if (st->head >= 64 && st->head * 2 >= st->ops.n) {
        memmove(st->ops.v, st->ops.v + st->head, (st->ops.n - st->head) * sizeof *st->ops.v);
        st->ops.n -= st->head;
        st->head = 0;
    }
}

static void retire_all(void) {
    for (size_t i = 0; i < S.streams.n; i++) retire(&S.streams.v[i], 0);
}

static void complete_stream(sim_stream *st) { retire(st, st->last); }

/* The CPU waits until `t`. */
static void advance_to(uint64_t t) {
    if (t <= S.now) return;
    S.now = t;
    retire_all();
}

static bool timeline(void) { return S.lag >= 0; }

/* now + n, short of SIM_NEVER. */
static uint64_t later(uint64_t n) { return n < SIM_NEVER - 1 - S.now ? S.now + n : SIM_NEVER - 1; }

/* Queues work on stream i that cannot complete before `base` (SIM_NEVER:
 * manual); room for it was reserved. Returns its sequence number. */
static uint64_t queue_op(size_t i, sim_op_kind kind, uint64_t base) {
    sim_stream *st = &S.streams.v[i];
    uint64_t tail = tail_time(st);
    sim_op op = {.seq = ++S.next_seq, .time = base > tail ? base : tail, .kind = kind};
    st->ops.v[st->ops.n++] = op;
    st->last = op.seq;
    retire(st, 0);
    return op.seq;
}

const sim_op *xsa_sim_tl_find_op(const sim_stream *st, uint64_t seq) {
    size_t lo = st->head, hi = st->ops.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->ops.v[mid].seq < seq) lo = mid + 1;
        else hi = mid;
    }
    return lo < st->ops.n && st->ops.v[lo].seq == seq ? &st->ops.v[lo] : NULL;
}

/* ---- vector clocks ------------------------------------------------------- */

static uint64_t clock_at(const sim_clock *c, size_t j) { return j < c->n ? c->v[j] : 0; }

/* Gives c an entry (0) for each known stream. */
static bool clock_fit(sim_clock *c) {
    if (!ARRAY_RESERVE(*c, S.streams.n)) return false;
    while (c->n < S.streams.n) c->v[c->n++] = 0;
    return true;
}

/* ---- streams made by stream_create ---------------------------------------------- */

#define STREAM_TAG 0x5354u /* "ST", the value's top 16 bits */
#define STREAM_SLOT_BITS 24

static xsa_stream created_value(uint32_t slot) {
    uint64_t gen = S.created.v[slot].gen & ((1u << STREAM_SLOT_BITS) - 1);
    return (xsa_stream)(uintptr_t)((uint64_t)STREAM_TAG << 48 | gen << STREAM_SLOT_BITS | (slot + 1));
}

static bool tagged(xsa_stream s) { return (uint64_t)(uintptr_t)s >> 48 == STREAM_TAG; }

static sim_created_stream *created_lookup(xsa_stream s) {
    if (!tagged(s)) return NULL;
    uint64_t v = (uint64_t)(uintptr_t)s, low = v & ((1u << STREAM_SLOT_BITS) - 1);
    if (!low || low - 1 >= S.created.n) return NULL;
    sim_created_stream *cs = &S.created.v[low - 1];
    return cs->live && created_value((uint32_t)(low - 1)) == s ? cs : NULL;
}

bool xsa_sim_tl_stream_valid(xsa_stream s) { return !tagged(s) || created_lookup(s); }

xsa_cu_result xsa_sim_tl_stream_create(xsa_stream *stream, int device) {
    if (!stream) return XSA_CU_ERROR_INVALID_VALUE;
    if (!xsa_sim_device_ok(device)) return XSA_CU_ERROR_INVALID_DEVICE;
    uint32_t slot;
    if (S.free_stream_slots.n) {
        slot = S.free_stream_slots.v[--S.free_stream_slots.n];
    } else {
        if (S.created.n + 1 >= (1u << STREAM_SLOT_BITS) || !ARRAY_RESERVE(S.created, S.created.n + 1) ||
            !ARRAY_RESERVE(S.free_stream_slots, S.created.n + 1))
            return XSA_CU_ERROR_OUT_OF_MEMORY;
        slot = (uint32_t)S.created.n++;
        S.created.v[slot].gen = 1;
    }
    sim_created_stream *cs = &S.created.v[slot];
    *cs = (sim_created_stream){.gen = cs->gen, .live = true, .device = device};
    S.live_streams++;
    *stream = created_value(slot);
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_tl_stream_destroy(xsa_stream stream) {
    sim_created_stream *cs = created_lookup(stream);
    if (!cs) return XSA_CU_ERROR_INVALID_HANDLE;
    *cs = (sim_created_stream){.gen = cs->gen + 1};
    S.free_stream_slots.v[S.free_stream_slots.n++] = (uint32_t)(cs - S.created.v); /* room reserved at creation */
    S.live_streams--;
    return XSA_CU_SUCCESS;
}

/* ---- events ---------------------------------------------------------------- */

static xsa_event event_value(uint32_t slot) {
    return (xsa_event)(uintptr_t)(((uint64_t)S.events.v[slot].gen << 32) | (slot + 1));
}

sim_event *xsa_sim_tl_event_lookup(xsa_event e) {
    uint64_t v = (uint64_t)(uintptr_t)e, slot = (v & 0xffffffffu) - 1;
    if ((v & 0xffffffffu) == 0 || slot >= S.events.n) return NULL;
    sim_event *ev = &S.events.v[slot];
    return ev->live && ev->gen == (uint32_t)(v >> 32) ? ev : NULL;
}

bool xsa_sim_tl_event_pending(const sim_event *ev) { return ev->seq && ev->seq > S.streams.v[ev->stream].done; }

bool xsa_sim_tl_use_pending(const sim_use *u) { return u->seq > S.streams.v[u->stream].done; }

xsa_cu_result xsa_sim_tl_stream_query(xsa_stream stream) {
    size_t i = stream_index(stream);
    return i < S.streams.n && has_pending(&S.streams.v[i]) ? XSA_CU_ERROR_NOT_READY : XSA_CU_SUCCESS;
}

/* Timeline: the CPU waits for the stream's last work. Work without a time
 * (manual mode) is completed, as the tests always had it. */
static void wait_for(sim_stream *st) {
    if (!has_pending(st)) return;
    uint64_t t = tail_time(st);
    if (t == SIM_NEVER) complete_stream(st);
    else advance_to(t);
}

xsa_cu_result xsa_sim_tl_stream_synchronize(xsa_stream stream) {
    size_t i = stream_index(stream);
    if (i < S.streams.n) wait_for(&S.streams.v[i]);
    return XSA_CU_SUCCESS;
}

/* Timeline: the CPU waits for every stream's last work (manual mode:
 * completed at once). */
void xsa_sim_tl_synchronize_all(void) {
    for (size_t i = 0; i < S.streams.n; i++) wait_for(&S.streams.v[i]);
}

xsa_cu_result xsa_sim_tl_event_create(xsa_event *event, int device) {
    if (!event) return XSA_CU_ERROR_INVALID_VALUE;
    if (device < 0 || device >= S.cfg.devices) return XSA_CU_ERROR_INVALID_DEVICE;
    uint32_t slot;
    if (S.free_event_slots.n) {
        slot = S.free_event_slots.v[--S.free_event_slots.n];
    } else {
        if (!ARRAY_RESERVE(S.events, S.events.n + 1) || !ARRAY_RESERVE(S.free_event_slots, S.events.n + 1))
            return XSA_CU_ERROR_OUT_OF_MEMORY;
        slot = (uint32_t)S.events.n++;
        S.events.v[slot].gen = 1;
    }
    sim_event *ev = &S.events.v[slot];
    *ev = (sim_event){.gen = ev->gen, .live = true, .device = device};
    S.live_events++;
    *event = event_value(slot);
    return XSA_CU_SUCCESS;
}

/* The record completes with the stream's earlier work; the event takes the
 * stream's clock, plus the record itself. */
xsa_cu_result xsa_sim_tl_event_record(xsa_event event, xsa_stream stream) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    if (!ev) return XSA_CU_ERROR_INVALID_HANDLE;
    size_t i;
    if (!stream_get(stream, &i)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    sim_stream *st = &S.streams.v[i];
    if (!ARRAY_RESERVE(st->ops, st->ops.n + 1) || !clock_fit(&ev->clock)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    for (size_t j = 0; j < ev->clock.n; j++) ev->clock.v[j] = clock_at(&st->clock, j);
    ev->stream = i;
    ev->seq = queue_op(i, OP_RECORD, timeline() ? S.now : SIM_NEVER);
    ev->clock.v[i] = ev->seq;
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_tl_event_query(xsa_event event) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    if (!ev) return XSA_CU_ERROR_INVALID_HANDLE;
    return xsa_sim_tl_event_pending(ev) ? XSA_CU_ERROR_NOT_READY : XSA_CU_SUCCESS;
}

/* Timeline: the CPU waits for the record; without a time (manual mode) the
 * record and everything before it on its stream are completed. */
xsa_cu_result xsa_sim_tl_event_synchronize(xsa_event event) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    if (!ev) return XSA_CU_ERROR_INVALID_HANDLE;
    if (!xsa_sim_tl_event_pending(ev)) return XSA_CU_SUCCESS;
    sim_stream *st = &S.streams.v[ev->stream];
    uint64_t t = xsa_sim_tl_find_op(st, ev->seq)->time; /* pending work is queued */
    if (t == SIM_NEVER) retire(st, ev->seq);
    else advance_to(t);
    return XSA_CU_SUCCESS;
}

/* Its record, if pending, stays queued on its stream. */
xsa_cu_result xsa_sim_tl_event_destroy(xsa_event event) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    if (!ev) return XSA_CU_ERROR_INVALID_HANDLE;
    uint32_t slot = (uint32_t)(ev - S.events.v);
    ARRAY_FREE(ev->clock);
    *ev = (sim_event){.gen = ev->gen + 1};
    S.free_event_slots.v[S.free_event_slots.n++] = slot; /* room reserved at creation */
    S.live_events--;
    return XSA_CU_SUCCESS;
}

/* The stream is ordered after what the event's clock holds. Timeline: its
 * later work waits for the record to complete (a queued wait). Manual mode
 * queues nothing: work there completes only by hand anyway. An event never
 * recorded is no wait at all, as in CUDA. */
xsa_cu_result xsa_sim_tl_stream_wait_event(xsa_stream stream, xsa_event event) {
    sim_event *ev = xsa_sim_tl_event_lookup(event);
    if (!ev) return XSA_CU_ERROR_INVALID_HANDLE;
    if (!ev->seq) return XSA_CU_SUCCESS;
    size_t i;
    if (!stream_get(stream, &i)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    sim_stream *st = &S.streams.v[i];
    if (!clock_fit(&st->clock) || !ARRAY_RESERVE(st->ops, st->ops.n + 1)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    for (size_t j = 0; j < ev->clock.n; j++)
        if (j != i && ev->clock.v[j] > st->clock.v[j]) st->clock.v[j] = ev->clock.v[j];
    if (!timeline()) return XSA_CU_SUCCESS;
    uint64_t base = S.now;
    if (xsa_sim_tl_event_pending(ev)) {
        uint64_t t = xsa_sim_tl_find_op(&S.streams.v[ev->stream], ev->seq)->time;
        if (t > base) base = t;
    }
    queue_op(i, OP_WAIT, base);
    return XSA_CU_SUCCESS;
}

/* ---- violations ------------------------------------------------------------ */

void xsa_sim_tl_violation(uint64_t *count, const char *fmt, ...) {
    (*count)++;
    if (S.violations.first[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.violations.first, sizeof S.violations.first, fmt, ap);
    va_end(ap);
}

static const char *stream_name(size_t i, char *buf, size_t len) {
    xsa_stream s = S.streams.v[i].stream;
    if (!s) return "the default stream";
    snprintf(buf, len, "stream %p", s);
    return buf;
}

static const char *op_name(sim_op_kind kind) { return kind == OP_COPY ? "a copy" : "a kernel"; }

/* What a pending use's work is ("a kernel", "a copy"). */
static const char *use_name(const sim_use *u) {
    const sim_op *op = xsa_sim_tl_find_op(&S.streams.v[u->stream], u->seq);
    return op_name(op ? op->kind : OP_KERNEL);
}

/* Drops the uses of `list` that went through mapping `map_id` (mapped at
 * `va`), counting one violation for `call` if any is pending. */
static void drop_mapping_uses(sim_uses *list, uint64_t map_id, uintptr_t va, const char *call, bool *reported) {
    for (size_t k = 0; k < list->n;) {
        sim_use u = list->v[k];
        if (u.map_id != map_id) {
            k++;
            continue;
        }
        if (!*reported && xsa_sim_tl_use_pending(&u)) {
            char name[48];
            xsa_sim_tl_violation(&S.violations.unmapped_in_use,
                      "%s while %s queued at tick %llu on %s still uses %#llx (%zu bytes) through it: "
                      "the illegal address an H100 gives",
                      call, use_name(&u), (unsigned long long)u.queued, stream_name(u.stream, name, sizeof name),
                      (unsigned long long)(va + u.off), u.len);
            *reported = true;
        }
        list->v[k] = list->v[--list->n];
    }
}

void xsa_sim_tl_unmapping(sim_reservation *r, size_t first, size_t n) {
    size_t g = S.cfg.granularity;
    char call[80];
    snprintf(call, sizeof call, "cuMemUnmap(%#llx, %zu)", (unsigned long long)(r->base + first * g), n * g);
    bool reported = false;
    for (size_t i = first; i < first + n; i++) {
        const sim_page *pg = &r->pages[i];
        /* Once per mapping, at its first page: the range holds whole mappings. */
        if (!pg->map_id || (i > first && r->pages[i - 1].map_id == pg->map_id)) continue;
        drop_mapping_uses(&S.handles.v[pg->handle].uses, pg->map_id, r->base + i * g, call, &reported);
    }
}

void xsa_sim_tl_freeing_alloc(sim_alloc *a) {
    char call[48];
    snprintf(call, sizeof call, "cuMemFree(%#llx)", (unsigned long long)a->base);
    bool reported = false;
    drop_mapping_uses(&a->uses, a->id, a->base, call, &reported);
}

void xsa_sim_get_violations(xsa_sim_violations *v) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    *v = S.violations;
    pthread_mutex_unlock(&xsa_sim_lock);
}

void xsa_sim_clear_violations(void) {
    pthread_mutex_lock(&xsa_sim_lock);
    memset(&S.violations, 0, sizeof S.violations);
    pthread_mutex_unlock(&xsa_sim_lock);
}

/* ---- kernels ------------------------------------------------------------------ */

/* The bytes of one physical memory a launch touches through one mapping. */
typedef struct {
    sim_uses *uses;    /* that memory's list */
    uint64_t map_id;
    size_t off, len;   /* in that memory */
    uintptr_t va;      /* where off is mapped */
} sim_piece;

/* The piece of [va, end) starting at va in reservation r (mapped there). */
static sim_piece piece_at(sim_reservation *r, uintptr_t va, uintptr_t end) {
    size_t g = S.cfg.granularity, page = (va - r->base) / g, start = page, last = page;
    uint64_t id = r->pages[page].map_id;
    while (start > 0 && r->pages[start - 1].map_id == id) start--; /* the mapping's first page */
    while (r->base + (last + 1) * g < end && r->pages[last + 1].map_id == id) last++;
    uintptr_t stop = r->base + (last + 1) * g;
    if (stop > end) stop = end;
    return (sim_piece){&S.handles.v[r->pages[page].handle].uses, id, va - (r->base + start * g), stop - va, va};
}

/* The first address of [va, end) in r without a mapping granting access, or 0. */
static uintptr_t first_inaccessible(const sim_reservation *r, uintptr_t va, uintptr_t end) {
    size_t g = S.cfg.granularity;
    for (size_t p = (va - r->base) / g; r->base + p * g < end; p++)
        if (!r->pages[p].map_id || !r->pages[p].access) return r->base + p * g > va ? r->base + p * g : va;
    return 0;
}

/* Drops the completed uses of the piece's memory; counts a race (once a
 * launch) of the new work of `kind` with a pending use of another stream
 * that stream si is not ordered after, on overlapping bytes. */
static void check_races(const sim_piece *pc, size_t si, sim_op_kind kind, uint64_t queued, bool *raced) {
    sim_uses *list = pc->uses;
    for (size_t k = 0; k < list->n;) {
        const sim_use *u = &list->v[k];
        if (!xsa_sim_tl_use_pending(u)) {
            list->v[k] = list->v[--list->n];
            continue;
        }
        size_t lo = u->off > pc->off ? u->off : pc->off;
        size_t hi = u->off + u->len < pc->off + pc->len ? u->off + u->len : pc->off + pc->len;
        if (!*raced && u->stream != si && lo < hi && clock_at(&S.streams.v[si].clock, u->stream) < u->seq) {
            char a[48], b[48];
            xsa_sim_tl_violation(&S.violations.races,
                      "race: %s queued at tick %llu on %s uses %#llx (%zu bytes) while %s queued at "
                      "tick %llu on %s, which it is not ordered after, still uses the same memory",
                      op_name(kind), (unsigned long long)queued, stream_name(si, a, sizeof a),
                      (unsigned long long)(pc->va + (lo - pc->off)), hi - lo, use_name(u),
                      (unsigned long long)u->queued, stream_name(u->stream, b, sizeof b));
            *raced = true;
        }
        k++;
    }
}

/* The pieces of [ptr, end): one for an allocation, one per mapping in a
 * reservation. Returns their count (at most `max` are stored). */
static size_t pieces(sim_reservation *r, sim_alloc *a, uintptr_t ptr, uintptr_t end, sim_piece *out, size_t max) {
    if (a) {
        if (max) out[0] = (sim_piece){&a->uses, a->id, ptr - a->base, end - ptr, ptr};
        return 1;
    }
    size_t n = 0;
    for (uintptr_t va = ptr; va < end; n++) {
        sim_piece pc = piece_at(r, va, end);
        if (n < max) out[n] = pc;
        va += pc.len;
    }
    return n;
}

/* A kernel or a copy over [ptr, ptr+size) on `stream`. */
static xsa_cu_result queue_work(xsa_stream stream, xsa_devptr ptr, size_t size, sim_op_kind kind, const char *what) {
    uintptr_t p = (uintptr_t)ptr, end = p + size;
    if (size == 0 || end < p) return XSA_CU_ERROR_INVALID_VALUE;
    size_t si;
    if (!stream_get(stream, &si)) return XSA_CU_ERROR_OUT_OF_MEMORY;
    sim_reservation *r = xsa_sim_resv_holding(p, size);
    sim_alloc *a = r ? NULL : xsa_sim_alloc_holding(p, size);
    uintptr_t bad = r ? first_inaccessible(r, p, end) : a ? 0 : p;
    if (bad) {
        char name[48];
        xsa_sim_tl_violation(&S.violations.bad_launches,
                  "%s on %s over [%#llx, %#llx) touches %#llx, which is not mapped with access "
                  "granted: CUDA_ERROR_ILLEGAL_ADDRESS",
                  what, stream_name(si, name, sizeof name), (unsigned long long)p, (unsigned long long)end,
                  (unsigned long long)bad);
        return XSA_CU_ERROR_ILLEGAL_ADDRESS;
    }
    size_t n = pieces(r, a, p, end, NULL, 0);
    sim_piece *pcs = malloc(n * sizeof *pcs);
    sim_stream *st = &S.streams.v[si];
    bool room = pcs && clock_fit(&st->clock) && ARRAY_RESERVE(st->ops, st->ops.n + 1);
    if (room) pieces(r, a, p, end, pcs, n);
    for (size_t k = 0; room && k < n; k++) room = ARRAY_RESERVE(*pcs[k].uses, pcs[k].uses->n + 1);
    if (!room) {
        free(pcs);
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    uint64_t seq = queue_op(si, kind, timeline() ? later((uint64_t)S.lag) : SIM_NEVER);
    bool raced = false;
    for (size_t k = 0; k < n; k++) {
        check_races(&pcs[k], si, kind, S.now, &raced);
        if (seq > st->done) /* a completed kernel needs no record */
            pcs[k].uses->v[pcs[k].uses->n++] = (sim_use){pcs[k].map_id, pcs[k].off, pcs[k].len, (uint32_t)si, seq, S.now};
    }
    free(pcs);
    return XSA_CU_SUCCESS;
}

xsa_cu_result xsa_sim_tl_launch(xsa_stream stream, xsa_devptr ptr, size_t size, const char *what) {
    return queue_work(stream, ptr, size, OP_KERNEL, what);
}

/* The device memory is host memory at the device address, read/write
 * wherever access is granted: once queued, the bytes can move. */
xsa_cu_result xsa_sim_tl_copy(bool to_host, void *host, xsa_devptr dev, size_t n, xsa_stream stream,
                              const char *what) {
    xsa_cu_result r = queue_work(stream, dev, n, OP_COPY, what);
    if (r != XSA_CU_SUCCESS) return r;
    if (to_host) memmove(host, (const void *)(uintptr_t)dev, n);
    else memmove((void *)(uintptr_t)dev, host, n);
    return XSA_CU_SUCCESS;
}

/* ---- the clock and the mode ------------------------------------------------------ */

void xsa_sim_tick(uint64_t n) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    advance_to(later(n));
    pthread_mutex_unlock(&xsa_sim_lock);
}

uint64_t xsa_sim_now(void) {
    pthread_mutex_lock(&xsa_sim_lock);
    uint64_t now = S.now;
    pthread_mutex_unlock(&xsa_sim_lock);
    return now;
}

/* Manual work gets a time: it completes once the work ahead of it has. */
static void time_manual_work(void) {
    for (size_t i = 0; i < S.streams.n; i++) {
        sim_stream *st = &S.streams.v[i];
        uint64_t prev = S.now;
        for (size_t k = st->head; k < st->ops.n; k++) {
            if (st->ops.v[k].time == SIM_NEVER) st->ops.v[k].time = prev;
            prev = st->ops.v[k].time;
        }
        retire(st, 0);
    }
}

static void set_lag(int64_t lag) {
    if (lag >= 0) time_manual_work();
    S.lag = lag;
}

void xsa_sim_set_gpu_lag(int64_t lag) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    set_lag(lag);
    pthread_mutex_unlock(&xsa_sim_lock);
}

void xsa_sim_set_eager_events(int eager) {
    pthread_mutex_lock(&xsa_sim_lock);
    xsa_sim_ensure_configured();
    set_lag(eager ? 0 : -1);
    pthread_mutex_unlock(&xsa_sim_lock);
}

void xsa_sim_complete_stream(xsa_stream stream) {
    pthread_mutex_lock(&xsa_sim_lock);
    size_t i = stream_index(stream);
    if (i < S.streams.n) complete_stream(&S.streams.v[i]);
    pthread_mutex_unlock(&xsa_sim_lock);
}

void xsa_sim_complete_all(void) {
    pthread_mutex_lock(&xsa_sim_lock);
    for (size_t i = 0; i < S.streams.n; i++) complete_stream(&S.streams.v[i]);
    pthread_mutex_unlock(&xsa_sim_lock);
}
