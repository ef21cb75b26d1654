/*
 * vmm/sim_internal: the state the simulated driver's files share (not an
 * API: only driver_sim.c, sim_timeline.c, sim_capture.c, sim_check.c and
 * sim_cost.c include it).
 *
 * Design: one global state `S` guarded by xsa_sim_lock. driver_sim.c owns
 * configuration, fault injection, handles, reservations, mappings and
 * classic allocations; sim_timeline.c owns the streams, events, clock,
 * kernels and their uses of physical memory; sim_capture.c sits in front
 * of the timeline's stream and event calls and keeps its own state (under
 * the same lock): captures, graphs and executable graphs; sim_check.c reads
 * them all for the usage counters and the invariant checker; sim_cost.c
 * adds up what the calls would cost on an H100. A kernel's uses hang off
 * the physical memory they touch (a handle, or a cuMemAlloc allocation),
 * so that unmapping or freeing memory finds them without a search.
 */
#ifndef XSA_VMM_SIM_INTERNAL_H
#define XSA_VMM_SIM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "vmm/sim.h"

#define SIM_MAX_FAULTS 16 /* armed at once; more are ignored */
#define SIM_NEVER UINT64_MAX /* completion time of work queued in manual mode */

/* A growable array: v[0..n) of `cap`. */
#define ARRAY(T) struct { T *v; size_t n, cap; }
bool xsa_sim_grow(void **v, size_t *cap, size_t need, size_t elem);
#define ARRAY_RESERVE(a, need) xsa_sim_grow((void **)&(a).v, &(a).cap, (need), sizeof *(a).v)
#define ARRAY_FREE(a) (free((a).v), (a).v = NULL, (a).n = (a).cap = 0)

/* Index of the last entry with base <= p in an array sorted by base, or n. */
#define FIND_BELOW(a, p, out)                                                  \
    do {                                                                       \
        size_t lo_ = 0, hi_ = (a).n;                                           \
        while (lo_ < hi_) {                                                    \
            size_t mid_ = (lo_ + hi_) / 2;                                     \
            if ((a).v[mid_].base <= (p)) lo_ = mid_ + 1;                       \
            else hi_ = mid_;                                                   \
        }                                                                      \
        (out) = lo_ ? lo_ - 1 : (a).n;                                         \
    } while (0)

typedef ARRAY(size_t) offset_stack;

/* Released file ranges of one size, reused last in first out. */
typedef struct {
    size_t size;
    offset_stack offsets;
} size_class;

typedef struct {
    int fd;           /* shared memfd of non-exportable handles, -1 until needed */
    size_t file_size; /* ftruncate'd length */
    size_t next_off;  /* file offsets below this have been handed out */
    ARRAY(size_class) free_ranges;
    size_t used;      /* physical bytes: live handles + mem_alloc */
} sim_device;

/* A kernel's use of bytes [off, off+len) of one piece of physical memory
 * (the handle or allocation whose list holds it). */
typedef struct {
    uint64_t map_id;   /* the mapping (or cuMemAlloc allocation) it went through */
    size_t off, len;
    uint32_t stream;   /* index in S.streams */
    uint64_t seq;      /* the kernel's sequence number */
    uint64_t queued;   /* S.now when it was launched */
} sim_use;

typedef ARRAY(sim_use) sim_uses;

typedef enum { SLOT_FREE, SLOT_LIVE, SLOT_RELEASED } slot_state;

typedef struct {
    uint32_t gen;
    slot_state state;  /* SLOT_RELEASED: released, freed when unmapped */
    int device;
    int own_fd;        /* exportable or imported: its own memfd; else -1 */
    bool imported;     /* mem_import_fd: its bytes count where they were created */
    size_t size;
    size_t file_off;   /* in own_fd or the device's fd */
    size_t mapped_pages;
    sim_uses uses;
} sim_handle;

typedef struct {
    uint64_t map_id;   /* 0: unmapped */
    uint32_t handle;   /* slot of the mapped handle */
    uint8_t access;    /* bit d: device d has read/write */
} sim_page;

typedef struct {
    uintptr_t base;
    size_t size;
    sim_page *pages;   /* [size / granularity] */
    size_t mapped_pages;
} sim_reservation;

typedef struct {
    uintptr_t base;
    size_t size;       /* rounded, as counted against capacity */
    int device;
    uint64_t id;       /* from the map ids' counter: what its uses went through */
    sim_uses uses;
} sim_alloc;

typedef enum { OP_KERNEL, OP_RECORD, OP_WAIT } sim_op_kind;

/* Queued work, completing at `time` (SIM_NEVER: when completed by hand). */
typedef struct {
    uint64_t seq, time;
    sim_op_kind kind;
} sim_op;

typedef ARRAY(uint64_t) sim_clock; /* [stream index]: a sequence number */

typedef struct {
    xsa_stream stream;
    uint64_t last;     /* sequence number of the last work queued on it */
    uint64_t done;     /* work up to this number has completed */
    ARRAY(sim_op) ops; /* pending work: ops.v[head..n), by seq and by time */
    size_t head;
    sim_clock clock;   /* [j]: the last work of stream j this one is ordered after */
} sim_stream;

typedef ARRAY(uint32_t) sim_node_list; /* graph node indices (sim_capture.c) */

typedef struct {
    uint32_t gen;
    bool live;
    int device;
    size_t stream;     /* index in streams, valid when seq != 0 */
    uint64_t seq;      /* 0: never recorded */
    sim_clock clock;   /* its stream's clock at the record, [stream] = seq */
    /* Last recorded in a capture (sim_capture.c): that capture's id, else
     * 0 (seq is then 0: the record is no timeline work); cap_deps: the
     * nodes of its graph that a wait on it depends on. */
    uint64_t capture;
    sim_node_list cap_deps;
} sim_event;

typedef struct {
    xsa_driver_entry entry;
    uint64_t at;       /* fails when the entry's call count reaches this */
    xsa_cu_result error;
} sim_fault;

typedef struct {
    bool configured;
    xsa_sim_config cfg;
    sim_device dev[XSA_SIM_MAX_DEVICES];
    ARRAY(sim_handle) handles;
    ARRAY(uint32_t) free_handle_slots;
    ARRAY(sim_reservation) resv; /* sorted by base */
    ARRAY(sim_alloc) allocs;     /* sorted by base */
    ARRAY(sim_stream) streams;
    ARRAY(sim_event) events;
    ARRAY(uint32_t) free_event_slots;
    uint64_t next_map_id, next_seq;
    size_t live_handles, handle_bytes, mapped_bytes, reserved_bytes;
    size_t alloc_bytes, live_events;
    uint64_t entry_calls[XSA_DRV_COUNT];
    uint64_t h100_est_ns;        /* sim_cost.c: the calls' estimated CPU time on an H100 */
    sim_fault faults[SIM_MAX_FAULTS];
    int n_faults;
    /* The timeline (sim_timeline.c). */
    uint64_t now;                /* the CPU's clock, in ticks */
    int64_t lag;                 /* < 0: manual mode */
    xsa_sim_violations violations;
} sim_state;

extern sim_state xsa_sim_state;
extern pthread_mutex_t xsa_sim_lock;
#define S xsa_sim_state /* short, in the simulator's own files */

/* driver_sim.c */
void xsa_sim_ensure_configured(void);
/* The reservation holding all of [p, p+size), or NULL. */
sim_reservation *xsa_sim_resv_holding(uintptr_t p, size_t size);
/* The cuMemAlloc allocation holding all of [p, p+size), or NULL. */
sim_alloc *xsa_sim_alloc_holding(uintptr_t p, size_t size);

/* sim_timeline.c: the stream and event entry points ... */
xsa_cu_result xsa_sim_tl_stream_query(xsa_stream stream);
xsa_cu_result xsa_sim_tl_stream_synchronize(xsa_stream stream);
void xsa_sim_tl_synchronize_all(void);
xsa_cu_result xsa_sim_tl_event_create(xsa_event *event, int device);
xsa_cu_result xsa_sim_tl_event_record(xsa_event event, xsa_stream stream);
xsa_cu_result xsa_sim_tl_event_query(xsa_event event);
xsa_cu_result xsa_sim_tl_event_synchronize(xsa_event event);
xsa_cu_result xsa_sim_tl_event_destroy(xsa_event event);
xsa_cu_result xsa_sim_tl_stream_wait_event(xsa_stream stream, xsa_event event);
/* ... what memory calls tell it: pages [first, first+n) of r are about to
 * be unmapped (violations for kernels still using them; their uses go), a
 * cuMemAlloc allocation is about to be freed, a configuration applied ... */
void xsa_sim_tl_unmapping(sim_reservation *r, size_t first, size_t n);
void xsa_sim_tl_freeing_alloc(sim_alloc *a);
void xsa_sim_tl_reset(void);
/* ... kernels (xsa_sim_launch's work outside capture), events by value,
 * violations (the first one's sentence is kept) ... */
/* `what` names the work in a bad launch's sentence ("a kernel launched"). */
xsa_cu_result xsa_sim_tl_launch(xsa_stream stream, xsa_devptr ptr, size_t size, const char *what);
sim_event *xsa_sim_tl_event_lookup(xsa_event event);
__attribute__((format(printf, 2, 3))) void xsa_sim_tl_violation(uint64_t *count, const char *fmt, ...);
/* ... and what the checker and the usage counters read. */
bool xsa_sim_tl_event_pending(const sim_event *ev);
bool xsa_sim_tl_use_pending(const sim_use *u);
/* The op of stream st with sequence number seq, or NULL. */
const sim_op *xsa_sim_tl_find_op(const sim_stream *st, uint64_t seq);

/* sim_cost.c: the H100 estimate. A call made (not an injected fault) adds
 * its entry point's cost a call; a cuMemSetAccess about to grant `mask`
 * on pages [first, first+n) of r, and a cuMemUnmap about to unmap them,
 * add their cost per mapping there (called after every check passed,
 * before the pages change). */
void xsa_sim_cost_call(xsa_driver_entry e);
void xsa_sim_cost_set_access(const sim_reservation *r, size_t first, size_t n, uint8_t mask);
void xsa_sim_cost_unmap(const sim_reservation *r, size_t first, size_t n);

/* sim_capture.c: stream capture. The stream and event entry points go
 * through it (work on a capturing stream becomes graph nodes; the rest
 * goes on to the timeline) ... */
xsa_cu_result xsa_sim_cap_stream_query(xsa_stream stream);
xsa_cu_result xsa_sim_cap_stream_synchronize(xsa_stream stream);
xsa_cu_result xsa_sim_cap_event_record(xsa_event event, xsa_stream stream);
xsa_cu_result xsa_sim_cap_event_query(xsa_event event);
xsa_cu_result xsa_sim_cap_event_synchronize(xsa_event event);
xsa_cu_result xsa_sim_cap_event_destroy(xsa_event event);
xsa_cu_result xsa_sim_cap_stream_wait_event(xsa_stream stream, xsa_event event);
/* ... a call that synchronizes the device (cuMemFree) is refused while a
 * capture is under way, and invalidates it ... */
xsa_cu_result xsa_sim_cap_device_sync(const char *call);
/* ... its own entry points ... */
xsa_cu_result xsa_sim_cap_begin(xsa_stream stream);
xsa_cu_result xsa_sim_cap_end(xsa_stream stream, xsa_graph *graph);
xsa_cu_result xsa_sim_cap_info(xsa_stream stream, int *status, uint64_t *id, const xsa_graph_node **deps, size_t *n);
xsa_cu_result xsa_sim_cap_node_deps(xsa_graph_node node, xsa_graph_node *deps, size_t *n);
xsa_cu_result xsa_sim_cap_instantiate(xsa_graph_exec *exec, xsa_graph graph);
xsa_cu_result xsa_sim_cap_graph_launch(xsa_graph_exec exec, xsa_stream stream);
xsa_cu_result xsa_sim_cap_exec_destroy(xsa_graph_exec exec);
xsa_cu_result xsa_sim_cap_graph_destroy(xsa_graph graph);
xsa_cu_result xsa_sim_cap_exchange_mode(int *mode);
/* ... what configuration and the usage counters read, and its checker. */
bool xsa_sim_cap_live(void);
void xsa_sim_cap_usage(xsa_sim_usage *u);
int xsa_sim_cap_check(char *err, size_t errlen);

#endif
