/*
 * sim/state: the state the simulated driver's files share, and the
 * configuration and lookups over it (state.c). Not an API: the simulator's
 * own files include it.
 *
 * Design: one global state `S` guarded by xsa_sim_lock, in layers, each
 * file calling only those below it: state.c (the state, a configuration
 * applied to it, lookups); cost.c (what the calls would cost on an H100);
 * host.c (pinned host memory: cuMemHostAlloc allocations and
 * cuMemHostRegister'd ranges); timeline.c (the streams, events, clock,
 * kernels and copies and their uses of physical memory); capture.c, in
 * front of the timeline's stream and event calls and of the copies, with
 * its own state under the same lock (captures, graphs and executable
 * graphs); faults.c (fault injection and the guard of every
 * entry point); devices.c, handles.c and mappings.c (the devices, the
 * physical handles, and the address space with cuMemAlloc allocations);
 * check.c (usage counters and the invariant checker, reading them all);
 * table.c (the driver table over all of them, and xsa_sim_configure). A
 * kernel's uses hang off the physical memory they touch (a handle, or a
 * cuMemAlloc allocation), so that unmapping or freeing memory finds them
 * without a search.
 */
#ifndef XSA_SIM_STATE_H
#define XSA_SIM_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "xsalloc/sim.h"

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

/* A copy (memcpy_*_async) is stream work on device memory like a kernel. */
typedef enum { OP_KERNEL, OP_RECORD, OP_WAIT, OP_COPY } sim_op_kind;

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

typedef ARRAY(uint32_t) sim_node_list; /* graph node indices (capture.c) */

typedef struct {
    uint32_t gen;
    bool live;
    int device;
    size_t stream;     /* index in streams, valid when seq != 0 */
    uint64_t seq;      /* 0: never recorded */
    sim_clock clock;   /* its stream's clock at the record, [stream] = seq */
    /* Last recorded in a capture (capture.c): that capture's id, else
     * 0 (seq is then 0: the record is no timeline work); cap_deps: the
     * nodes of its graph that a wait on it depends on. */
    uint64_t capture;
    sim_node_list cap_deps;
} sim_event;

/* A stream made by stream_create (timeline.c); its value encodes the slot
 * and generation (a destroyed one is never confused with a new one). */
typedef struct {
    uint32_t gen;
    bool live;
    int device;
} sim_created_stream;

/* Pinned host memory (host.c): [base, base+size) as the caller gave it. */
typedef struct {
    uintptr_t base;
    size_t size;
} sim_host_range;

typedef ARRAY(sim_host_range) sim_host_ranges; /* sorted by base, disjoint */

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
    ARRAY(sim_created_stream) created;  /* stream_create's streams, by slot */
    ARRAY(uint32_t) free_stream_slots;
    size_t live_streams;
    sim_host_ranges host_allocs;        /* mem_host_alloc (page-aligned mmaps) */
    sim_host_ranges host_regs;          /* mem_host_register */
    size_t host_alloc_bytes, host_registered_bytes;
    uint64_t next_map_id, next_seq;
    size_t live_handles, handle_bytes, mapped_bytes, reserved_bytes;
    size_t alloc_bytes, live_events;
    uint64_t entry_calls[XSA_DRV_COUNT];
    uint64_t h100_est_ns;        /* cost.c: the calls' estimated CPU time on an H100 */
    sim_fault faults[SIM_MAX_FAULTS];
    int n_faults;
    /* The timeline (timeline.c). */
    uint64_t now;                /* the CPU's clock, in ticks */
    int64_t lag;                 /* < 0: manual mode */
    xsa_sim_violations violations;
} sim_state;

extern sim_state xsa_sim_state;
extern pthread_mutex_t xsa_sim_lock;
#define S xsa_sim_state /* short, in the simulator's own files */

/* The default configuration, applied on first use (the lock held). */
void xsa_sim_ensure_configured(void);
/* Applies a valid configuration (the lock held; nothing may be live):
 * resets the devices, the streams, the clock, the gpu lag, the
 * violations, the faults and the call counters. */
void xsa_sim_apply_config(const xsa_sim_config *c);
/* The reservation holding all of [p, p+size), or NULL. */
sim_reservation *xsa_sim_resv_holding(uintptr_t p, size_t size);
/* The cuMemAlloc allocation holding all of [p, p+size), or NULL. */
sim_alloc *xsa_sim_alloc_holding(uintptr_t p, size_t size);

static inline bool xsa_sim_device_ok(int d) { return d >= 0 && d < S.cfg.devices; }

#endif
