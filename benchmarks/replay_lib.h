/*
 * benchmarks/replay_lib: replays a loaded trace through xsalloc's public API
 * and measures what fragmentation and hot-path reports need.
 *
 * Design: one replay owns xsalloc for its duration (use_driver, init, ...,
 * shutdown), so successive replays in one process start from nothing, as
 * PyTorch's one-process-per-configuration figures do. Trace stream k is
 * NULL (the legacy default stream) for k == 0 and the opaque handle
 * 0x1000 + k otherwise, which only the simulated driver accepts: the cuda
 * driver refuses multi-stream traces. The simulated driver runs with eager
 * events (a record_stream'd block is reusable at once after its free), as
 * on a real GPU with no kernels queued: both drivers then replay the same
 * allocator decisions.
 */
#ifndef XSA_BENCHMARKS_REPLAY_LIB_H
#define XSA_BENCHMARKS_REPLAY_LIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "benchmarks/trace.h"
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
    int64_t pages_recycled;
    int64_t num_alloc_retries;
    int64_t num_ooms;
} xsa_replay_result;

/* Calls of one entry point during the loop, e.g. XSA_REPLAY_CALLS(r, mem_create). */
#define XSA_REPLAY_CALLS(r, entry) ((r)->driver_calls[XSA_DRV_##entry])

/*
 * Replays `t` on device 0 with driver `driver` ("cuda", "sim" or NULL for
 * the default) and configuration `conf` (XSALLOC_CONF syntax; NULL reads
 * the environment). If `series` is not NULL, writes the CSV
 * "event,allocated_bytes,reserved_bytes,allocated_peak,reserved_peak" with
 * about 2000 samples: current values after `event` events, and the peaks
 * since the previous sample (sampling is inside the timed loop). Returns 0, or -1 with a sentence in err (for a
 * failing event: its line number, the call and xsalloc's message).
 * xsalloc must not be initialised on entry; it is shut down on return.
 */
int xsa_replay(const xsa_trace *t, const char *conf, const char *driver, xsa_replay_result *r,
               FILE *series, char *err, size_t errlen);

#endif
