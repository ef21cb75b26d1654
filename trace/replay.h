/*
 * trace/replay: replays a loaded trace through xsalloc's public API
 * and measures what fragmentation and hot-path reports need.
 *
 * Design: a replay is a session (use_driver, init, ..., shutdown) holding
 * one or more passes over traces; xsa_replay is one session of one pass, so
 * successive replays in one process start from nothing, as PyTorch's
 * one-process-per-configuration figures do, and the soak benchmark runs many
 * passes in one allocator. Trace stream k is NULL (the legacy default
 * stream) for k == 0 and the opaque handle 0x1000 + k otherwise, which only
 * the simulated driver accepts: the cuda driver refuses multi-stream traces.
 *
 * GPU lag. At lag 0 the simulated driver runs with eager events (a
 * record_stream'd block is reusable at once after its free), as on a real
 * GPU with no kernels queued: both drivers then replay the same allocator
 * decisions. At lag N > 0 (simulated driver only) the GPU runs N trace
 * events behind the CPU (xsalloc/sim.h), and the replay plays the program's
 * kernels: each event is one tick; an allocation is written by a kernel on
 * its stream; a record_stream line orders the other stream after the
 * tensor's last use (an event recorded where it was last used, a
 * cuStreamWaitEvent) and runs a kernel on it there; a free is preceded by
 * the tensor's last use, a kernel on the stream that used it last (its own
 * stream unless record_stream moved it: the free does not wait for the
 * other stream, which is what record_stream is for). At the end of a pass
 * the program synchronizes its streams, then the replay frees what the
 * trace left live. Any violation the simulated GPU counted (memory unmapped
 * or freed under a kernel, a race, a kernel on unmapped memory) fails the
 * pass with the first one's sentence.
 *
 * Trace time and the helper thread. With event_ns (or with helper_thread
 * on in the configuration), each event takes event_ns of the helper's
 * clock, and a wait of the trace ('w' lines) after an event that long
 * more: the program waits for the GPU (at a lag, its streams synchronize)
 * while the helper's rounds due in it run at their time. The helper runs
 * in manual mode (its rounds after every event, on the replay's thread,
 * so a replay is deterministic) and its driver calls
 * are counted apart from the allocation path's; reserved memory is
 * integrated over that time (GB·s: what decay purging saves).
 */
#ifndef XSA_TRACE_REPLAY_H
#define XSA_TRACE_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace/trace.h"
#include "vmm/driver.h"

typedef struct xsa_replay_result {
    char driver[16];          /* "cuda" or "sim" */
    size_t events;
    int64_t peak_allocated;   /* allocated_bytes[ALL].peak */
    int64_t peak_reserved;    /* reserved_bytes[ALL].peak */
    double ratio;             /* peak_reserved / peak_allocated (0 if nothing allocated) */
    double ns_per_event;      /* wall time of the event loop only */
    /* Every entry point's calls and time in the driver during the loop,
     * indexed by XSA_DRV_<entry> (XSA_REPLAY_CALLS names one). */
    uint64_t driver_calls[XSA_DRV_COUNT];
    uint64_t driver_ns[XSA_DRV_COUNT];
    /* The simulated driver's estimate of what those calls would cost the
     * CPU on an H100, in nanoseconds (xsa_sim_h100_est_ns; 0 on the cuda
     * driver). */
    uint64_t est_h100_driver_ns;
    int64_t pages_recycled;
    int64_t num_alloc_retries;
    int64_t num_ooms;
    int64_t gpu_lag;          /* the lag it ran at */
    uint64_t violations;      /* the simulated GPU's, over the pass (0 on the cuda driver) */
    /* With the helper thread on (helper_thread): its rounds' share of the
     * driver calls and of the H100 estimate above (the rest is the
     * allocation path's), and the trace time the replay ran at. */
    uint64_t helper_calls[XSA_DRV_COUNT];
    uint64_t helper_est_h100_ns;
    uint64_t event_ns;        /* trace time an event (0: none) */
    double reserved_gb_s;     /* reserved memory integrated over trace time (1e9 bytes x s; 0 without it) */
} xsa_replay_result;

/* Calls of one entry point during the loop, e.g. XSA_REPLAY_CALLS(r, mem_create). */
#define XSA_REPLAY_CALLS(r, entry) ((r)->driver_calls[XSA_DRV_##entry])

/* The GPU lag the benchmarks run at beside lag 0, in trace events (one
 * tick each). Calibrated on an H100 (2026-11-23, XSALLOC_LAG_PROBE in the
 * real workloads of benchmarks/gpu/real_bench.sh: allocator calls between
 * recording an event and seeing it complete): GPT-2 training p50 10, p90
 * 264, p99 618, max 852; ResNet-50 p99 26, max 85; Llama generation p99
 * 49, max 415. 500 is about GPT-2's p99, the longest lag of the three. */
#define XSA_REPLAY_DEFAULT_GPU_LAG 500

typedef struct xsa_replay_options {
    const char *driver;       /* "cuda", "sim" or NULL for the default */
    const char *conf;         /* XSALLOC_CONF syntax; NULL reads the environment */
    /* If not NULL, receives the CSV
     * "event,allocated_bytes,reserved_bytes,allocated_peak,reserved_peak"
     * with about 2000 samples: current values after `event` events, and
     * the peaks since the previous sample (sampling is inside the timed
     * loop, and resets the peak stats). */
    FILE *series;
    int64_t gpu_lag;          /* 0, or > 0 on the simulated driver only */
    /* Trace time: an event takes this many ns of the helper's clock
     * (api/helper.h), and reserved memory is integrated over it. With the
     * helper thread on, the helper runs in manual mode: its due rounds
     * after every event, on the replay's thread (deterministic), at
     * XSA_REPLAY_DEFAULT_EVENT_NS an event when this is 0. */
    uint64_t event_ns;
    /* With trace time: called after every event with the current allocated
     * and reserved bytes (no peak is reset, unlike `series`). */
    void (*sample)(void *ctx, size_t event, int64_t allocated, int64_t reserved);
    void *sample_ctx;
    /* With the helper on: its jobs commit this many events after their
     * driver calls (xsa_helper_set_deferred_commit; 0: at once), the
     * allocator calls in between, as with the thread. */
    unsigned helper_deferred;
} xsa_replay_options;

/* The trace time of an event the replays use by default with the helper
 * thread on: 100 us, a round figure between what the real runs spent per
 * allocator call on an H100 (GPT-2's 24 steps: 75,851 calls in about
 * 5.5 s, 73 us; the side-stream loader: 9,553 in about 2 s, 210 us). */
#define XSA_REPLAY_DEFAULT_EVENT_NS 100000ull

/*
 * Replays `t` on device 0 in a fresh xsalloc instance. Returns 0, or -1
 * with a sentence in err (for a failing event: its line number, the call
 * and xsalloc's message; for violations: the first one's). r is filled as
 * far as the replay got (a pass failed by violations is filled entirely).
 * xsalloc must not be initialised on entry; it is shut down on return.
 */
int xsa_replay(const xsa_trace *t, const xsa_replay_options *o, xsa_replay_result *r, char *err, size_t errlen);

/* A session: xsalloc initialised once for several passes. */
typedef struct xsa_replay_session xsa_replay_session;

/* Initialises xsalloc for a session (NULL, with a sentence in err, on
 * failure: a bad driver, configuration or lag). */
xsa_replay_session *xsa_replay_open(const xsa_replay_options *o, char *err, size_t errlen);
/* One pass over `t`; returns as xsa_replay does. The peaks reported are
 * the allocator's since the session began or its last
 * xsa_reset_peak_stats. The session stays usable after a failed pass. */
int xsa_replay_pass(xsa_replay_session *s, const xsa_trace *t, xsa_replay_result *r, char *err, size_t errlen);
/* Shuts xsalloc down and frees the session; 0, or -1 with a sentence. */
int xsa_replay_close(xsa_replay_session *s, char *err, size_t errlen);

#endif
