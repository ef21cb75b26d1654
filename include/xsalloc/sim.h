/*
 * xsalloc/sim: controls of the simulated driver (the table is xsa_driver_sim()).
 *
 * Design: each simulated device has a capacity of physical bytes. A physical
 * handle is a range of a per-device memfd (sparse: host memory is used only
 * where written) counted against that capacity. A reservation is a PROT_NONE
 * anonymous mapping; cuMemMap puts the handle's file range there with
 * MAP_FIXED|MAP_SHARED but still PROT_NONE; cuMemSetAccess makes it
 * read/write; cuMemUnmap turns it back to PROT_NONE anonymous memory. So a
 * use-after-unmap faults exactly like on the GPU. The real driver's error
 * cases are reproduced (see sim/mappings.c and sim/handles.c).
 *
 * The GPU's timeline (sim/timeline.c). Work queued on a stream (a kernel
 * from xsa_sim_launch, a copy, an event record, a cuStreamWaitEvent)
 * completes in
 * one of two modes:
 *   - manual (gpu lag < 0, the default): only when the test says so
 *     (xsa_sim_complete_*, or a stream/event synchronize);
 *   - timeline (gpu lag >= 0): the CPU has a clock, `now`, in ticks, that
 *     the test advances with xsa_sim_tick. A kernel (or a copy) queued at `now`
 *     on a stream completes at max(now + lag, completion of the stream's earlier
 *     work, completion of the events the stream waits on); an event record
 *     at max(now, completion of the stream's earlier work): it adds no lag.
 *     Queries report completion as of `now`; cuStreamSynchronize and
 *     cuEventSynchronize move `now` to the completion of what they wait for
 *     (the CPU stalls until the GPU gets there). Lag 0 is the eager mode:
 *     everything completes as it is queued.
 * xsa_sim_complete_* force completion in both modes (the clock stays).
 *
 * Kernels and violations. A kernel (a copy too, below) reads and writes a
 * device range; its
 * use is recorded on the physical memory behind it (the handle, or the
 * cuMemAlloc allocation: one handle may be mapped at two addresses), with
 * the mapping it went through, its stream and its sequence number, until
 * it completes. Three things a real GPU punishes are counted, never
 * crashed on (one count per offending call; the first one's sentence is
 * kept):
 *   1. unmapped_in_use: cuMemUnmap of a mapping, or cuMemFree of an
 *      allocation, through which a kernel not yet completed uses memory:
 *      the illegal address an H100 gives (cuMemAddressFree needs every page
 *      unmapped first, so it is covered by the unmap). Unmapping another
 *      mapping of the same handle is fine. (cuMemFree only *may*
 *      synchronize, the driver's documentation says, so relying on it
 *      counts too.)
 *   2. races: a kernel on stream B overlapping (same physical memory,
 *      overlapping bytes) a pending kernel k on stream A != B, where B is
 *      not ordered after k: B is ordered after k once B waited
 *      (cuStreamWaitEvent) on an event recorded on A after k, directly or
 *      through other streams' events (vector clocks: a stream keeps, for
 *      every other stream, the last work it is ordered after; an event
 *      takes its stream's clock when recorded; a wait merges it). Work on
 *      one stream is ordered (FIFO), and completed work races with nothing,
 *      so completion the host has seen (a query that succeeded, a
 *      synchronize) orders too.
 *   3. bad_launches: a kernel on memory that is not mapped with access
 *      granted (or outside every cuMemAlloc allocation): the launch returns
 *      CUDA_ERROR_ILLEGAL_ADDRESS and queues nothing.
 *   4. failed_captures: a capture invalidated, or ended with a fork not
 *      joined back (below).
 *
 * Stream capture (sim/capture.c), global mode, as on the H100 (driver
 * 580) where measured and on the strict side of CUDA's documented rules
 * where not:
 *   - stream_begin_capture starts a capture (a unique id, a new graph) on a
 *     stream; the legacy stream (NULL) cannot capture. While a stream
 *     captures, its work runs nowhere: a kernel (xsa_sim_launch) becomes a
 *     graph node depending on the stream's terminal nodes and becomes the
 *     one terminal; an event record takes the terminals (the event is
 *     "captured"); a wait on a captured event adds the event's terminals to
 *     the stream's, and a stream outside any capture that waits on one
 *     joins the capture with them, as in CUDA. Captured work is not
 *     checked against memory: only a replay is.
 *   - Refused while a capture is under way, each invalidating it: a query
 *     or synchronize of a captured event (CUDA_ERROR_CAPTURED_EVENT) or of
 *     a capturing stream, and any event or stream query or synchronize
 *     and cuMemFree (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: the calls
 *     global mode forbids). A capturing stream waiting on an event recorded
 *     outside it is CUDA_ERROR_STREAM_CAPTURE_ISOLATION (invalidates too).
 *     After the capture, an event last recorded in it stays captured:
 *     querying, synchronizing or waiting on it is CUDA_ERROR_CAPTURED_EVENT
 *     until it is recorded again. Memory calls (create, map, set access,
 *     unmap, release, reserve, cuMemAlloc) work during capture.
 *   - stream_end_capture on the stream that began it ends the capture for
 *     every stream in it: the graph, or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
 *     after an invalidation, or CUDA_ERROR_STREAM_CAPTURE_UNJOINED when a
 *     joined stream's terminals are not ancestors of the origin's (no graph
 *     then). On another stream of the capture: CUDA_ERROR_STREAM_CAPTURE_UNMATCHED.
 *   - graph_launch of an executable graph replays its nodes, in capture
 *     order, as kernels on the launch stream's timeline: a node on memory
 *     not mapped with access is a bad launch (the launch returns
 *     CUDA_ERROR_ILLEGAL_ADDRESS, the other nodes are queued), an unmap
 *     under a queued replay and a race with another stream are counted as
 *     for any kernel, and two nodes of the graph on overlapping addresses,
 *     neither an ancestor of the other, count a race at every launch.
 *     Launched on a capturing stream, its nodes join that capture.
 *   Streams behave as non-blocking ones (PyTorch creates its streams so):
 *   the legacy stream's implicit synchronization with them is not modelled.
 *
 * Streams, pinned host memory and copies (sim/timeline.c, sim/host.c,
 * sim/capture.c):
 *   - any pointer value is a stream (tests make them up). stream_create
 *     gives a value no made-up stream has (not a canonical address);
 *     stream_destroy frees it while its queued work stays on the timeline
 *     and completes as it would (CUDA frees the stream's resources after
 *     its work is done). Using it after that is CUDA_ERROR_INVALID_HANDLE
 *     (undefined in CUDA, strict here), and so is destroying the legacy
 *     stream or a made-up one. Destroying a stream that is in a capture is
 *     refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidates it.
 *   - mem_host_alloc gives real, page-aligned host memory (unmapped at
 *     mem_free_host, so a use after free faults; size 0 is
 *     CUDA_ERROR_INVALID_VALUE); mem_free_host of any other pointer is
 *     CUDA_ERROR_INVALID_VALUE.
 *     mem_host_register records a range, pinning nothing:
 *     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED if it overlaps a
 *     registered or allocated byte, CUDA_ERROR_INVALID_VALUE for memory
 *     not mapped; mem_host_unregister of anything but a registered base is
 *     CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED. The four are refused during
 *     a global-mode capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and
 *     invalidate it, as cuMemAlloc does, unless the calling thread is in
 *     relaxed mode: a registration then is reported to invalidate the
 *     capture on real GPUs; the rest are on the strict side
 *     (tests/gpu/probes/host_copy_probe.c compares all four).
 *   - a copy (memcpy_dtoh_async, memcpy_htod_async) is stream work like a
 *     kernel over its device range: a bad launch (CUDA_ERROR_ILLEGAL_ADDRESS,
 *     counted, nothing queued) if any byte of it is not mapped with access
 *     granted; else queued on the stream's timeline with its use of the
 *     physical memory recorded until it completes, so an unmap under it
 *     counts as unmapped_in_use and an overlapping kernel or copy on an
 *     unordered stream as a race. Its bytes move when it is queued (the
 *     device memory is host memory at the device address); the host side
 *     is not tracked (freeing host memory under a pending copy is not
 *     counted). 0 bytes: success, nothing queued; a NULL host pointer:
 *     CUDA_ERROR_INVALID_VALUE. On a capturing stream a copy with pinned
 *     host memory (all of it in one allocation or registration) becomes a
 *     graph node like a kernel and moves nothing; with pageable memory it
 *     is refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidates
 *     the capture. A replay copies again; a copy node whose host memory is
 *     no longer pinned by then is a bad launch.
 */
#ifndef XSALLOC_SIM_H
#define XSALLOC_SIM_H

#include "vmm/driver.h"

#define XSA_SIM_MAX_DEVICES 8

/* Exported by the shared library like the API (xsalloc/xsalloc.h): tests
 * drive the simulated driver through it. */
#ifndef XSA_API
#define XSA_API __attribute__((visibility("default")))
#endif

typedef struct xsa_sim_config {
    int devices;                 /* 1..XSA_SIM_MAX_DEVICES, default 1 */
    size_t capacity;             /* physical bytes per device, default 80 GiB */
    size_t granularity;          /* default 2 MiB */
    int eager_events;            /* 1: gpu lag 0 (work completes when queued); 0: manual (default) */
    int vmm_supported;           /* device attribute 102, default 1 */
    int fd_handles_supported;    /* device attribute 103, default 1 */
    /* peer[a][b]: device a can access memory of device b (default all 1). */
    unsigned char peer[XSA_SIM_MAX_DEVICES][XSA_SIM_MAX_DEVICES];
} xsa_sim_config;

/* The simulated driver's table. Not exported by libxsalloc.so: for
 * programs linked with the library's objects (tests, benchmarks). */
xsa_driver *xsa_driver_sim(void);

XSA_API void xsa_sim_default_config(xsa_sim_config *config);

/*
 * Applies a configuration. Only legal while the simulated driver holds no
 * handle, mapping, reservation, allocation, event, created stream, pinned
 * host allocation or registration, graph or executable graph (returns
 * XSA_CU_ERROR_NOT_PERMITTED otherwise). Resets call counters, faults, the
 * streams, the clock (to 0), the gpu lag and the violations.
 */
XSA_API xsa_cu_result xsa_sim_configure(const xsa_sim_config *config);

/* Fault injection: the nth call (1 = the next one) of `entry` from now on
 * fails with `error` and has no effect. Several faults may be armed. */
XSA_API void xsa_sim_fail_call(xsa_driver_entry entry, uint64_t nth, xsa_cu_result error);
XSA_API void xsa_sim_clear_faults(void);

/* Everything queued so far on `stream` (or on every stream) has completed,
 * in either mode. */
XSA_API void xsa_sim_complete_stream(xsa_stream stream);
XSA_API void xsa_sim_complete_all(void);
/* 1: xsa_sim_set_gpu_lag(0); 0: xsa_sim_set_gpu_lag(-1) (manual). */
XSA_API void xsa_sim_set_eager_events(int eager);

/*
 * The GPU's lag behind the CPU, in ticks: >= 0 turns the timeline on, < 0
 * is manual mode (see above; xsa_sim_configure sets 0 or -1 from
 * eager_events). Work queued in manual mode has no completion time: when a
 * lag >= 0 is set it completes once the work ahead of it on its stream has
 * (at once if there is none). A changed lag applies to work queued after.
 */
XSA_API void xsa_sim_set_gpu_lag(int64_t lag);
/* Advances the CPU's clock by n ticks (work due by then completes). */
XSA_API void xsa_sim_tick(uint64_t n);
/* The CPU's clock. */
XSA_API uint64_t xsa_sim_now(void);

/*
 * Queues a simulated kernel on `stream` that reads and writes
 * [ptr, ptr+size). CUDA_ERROR_ILLEGAL_ADDRESS (a bad launch, counted) if
 * any of it is not mapped with access granted to some device, or lies
 * outside every cuMemAlloc allocation; CUDA_ERROR_INVALID_VALUE for size
 * 0; CUDA_ERROR_OUT_OF_MEMORY without host memory for the bookkeeping. A
 * test control, not a driver entry point: not counted, never faulted. A
 * race with another stream's kernel is counted, and the kernel queued. On
 * a capturing stream: a graph node, unchecked (see stream capture above);
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if the capture was invalidated.
 */
XSA_API xsa_cu_result xsa_sim_launch(xsa_stream stream, xsa_devptr ptr, size_t size);

typedef struct xsa_sim_violations {
    uint64_t unmapped_in_use, races, bad_launches, failed_captures;
    char first[512];             /* the first violation's sentence; "" if none */
} xsa_sim_violations;

/* Violations since the last configuration or clear. */
XSA_API void xsa_sim_get_violations(xsa_sim_violations *v);
XSA_API void xsa_sim_clear_violations(void);

typedef struct xsa_sim_usage {
    size_t handles;             /* created or imported and not yet freed (released-but-mapped count) */
    size_t handle_bytes;        /* physical bytes counted against capacity, all devices (not imported handles) */
    size_t mapped_bytes;        /* bytes of VA currently mapped */
    size_t reservations;
    size_t reserved_bytes;
    size_t mem_allocs;          /* live cuMemAlloc allocations */
    size_t mem_alloc_bytes;
    size_t events;              /* created and not destroyed */
    size_t pending_events;      /* recorded and not completed */
    size_t pending_kernels;     /* launched and not completed */
    size_t device_used[XSA_SIM_MAX_DEVICES]; /* physical bytes per device */
    size_t captures;            /* under way (invalidated ones too) */
    size_t graphs;              /* being captured, or ended and not destroyed */
    size_t graph_execs;         /* instantiated and not destroyed */
    size_t streams;             /* made by stream_create and not destroyed */
    size_t pending_copies;      /* memcpy_*_async queued and not completed */
    size_t host_allocs;         /* mem_host_alloc allocations not freed */
    size_t host_alloc_bytes;    /* their sizes, as asked */
    size_t host_registrations;  /* mem_host_register ranges not unregistered */
    size_t host_registered_bytes;
} xsa_sim_usage;

XSA_API void xsa_sim_get_usage(xsa_sim_usage *usage);

/* A device range a graph node reads and writes. */
typedef struct xsa_sim_range {
    xsa_devptr ptr;
    size_t size;
} xsa_sim_range;

/*
 * The ranges every launch of the executable graph `exec` reads and writes,
 * one per node in replay order: out[0..min(count, max)). Returns the count
 * (0 for an unknown or empty graph). For tests: that a replay touches only
 * memory its pool still owns is checked against the live blocks.
 */
XSA_API size_t xsa_sim_graph_exec_ranges(xsa_graph_exec exec, xsa_sim_range *out, size_t max);

/*
 * The CPU time, in nanoseconds, that the driver calls made since the last
 * configuration would have taken on an H100 (driver 580) with kernels
 * queued, estimated from costs measured there: by call, and for
 * cuMemSetAccess and cuMemUnmap by handle mapping in the range (the model
 * and its constants: sim/cost.c). Entry points not measured, such as
 * cuMemAlloc and cuMemFree, count nothing.
 */
XSA_API uint64_t xsa_sim_h100_est_ns(void);

/* Devices granted read/write on the page holding ptr (bit d: device d);
 * 0 where nothing is mapped or ptr is in no reservation. */
XSA_API unsigned xsa_sim_page_access(xsa_devptr ptr);

/* Invariant checker: handle table, mappings and counters agree; stream
 * queues are ordered by sequence and time and due work has completed;
 * vector clocks name only queued work; kernels' and copies' uses name live
 * mappings of live (or released but mapped) handles and allocations;
 * created streams and their counters agree; pinned host allocations and
 * registrations are sorted, disjoint and counted; every capturing
 * stream is in a capture under way whose graph it names, terminals and
 * node dependencies name earlier nodes of their graph, captured events
 * have no timeline record. Returns 1 if
 * consistent, else 0 with a sentence in err. */
XSA_API int xsa_sim_check(char *err, size_t errlen);

#endif
