/*
 * tests/fault_lib: replays a workload through the public API on the
 * simulated driver with one driver call made to fail, and checks that the
 * allocator survives it. Shared by fault_test (a sample of the injection
 * points, in CI) and fault_sweep (every point, run by hand).
 *
 * Workload: the first `events` events of a bundled trace, sizes divided by
 * `divisor`, on a simulated device of `capacity` bytes (an expandable
 * segment reserves the whole capacity, so a small one keeps the page walk
 * of the invariant checker cheap), with xsa_empty_cache every
 * FI_EMPTY_EVERY events and simulated streams completing every
 * FI_COMPLETE_EVERY events (so record_stream frees wait on real events).
 * With `graph_window` set, the trace alternates windows of that many
 * events without and with a "graph capture": a window with one begins a
 * routing of trace stream 1 to memory pool {g, 0} (xsa_begin_allocate_to_
 * pool, which counts as a capture) and ends it, and releases graph g - 1's
 * pool (PyTorch's graph reset), so that deferred frees, pools' own
 * segments and their release at the last free run under every fault.
 * Halfway through a capture window graph g's pool is checkpointed
 * (xsa_mempool_checkpoint), and halfway through the window after it
 * restored to that checkpoint (xsa_mempool_restore, as cudagraph trees do
 * before recording after replays): the trace's allocations it frees are
 * dropped from the workload, the blocks it allocates are freed at once.
 * After a fault has fired a restore may be refused (memory held back by a
 * capture whose deferred frees could not record their events).
 * The helper thread runs in manual mode on a clock of trace time, never
 * as a thread (its faults must fire at a step): with `event_us` set, its
 * due rounds after every event (xsa_helper_poll, api/helper.h), so that
 * its jobs (decay, readying, old addresses unmapped) meet every fault too;
 * without, it never runs.
 * After the trace every live allocation is freed (a free that failed is
 * retried), the last pool released and the cache emptied.
 * Injection points: every call, N = 1..count, of every driver entry point F
 * that the fault-free run makes from xsa_init to the end of the workload
 * (xsa_shutdown excluded: it has no error to return). mem_create and
 * mem_alloc fail with out-of-memory, every other entry with a generic error.
 *
 * A run passes when:
 * - no request fails except the one whose driver call failed; that one
 *   returns XSA_ERROR_OUT_OF_MEMORY (out-of-memory injected) or
 *   XSA_ERROR_DRIVER / XSA_ERROR_NO_DRIVER at init (generic error) with a
 *   message, or succeeds when the allocator absorbed the fault (the retry
 *   path after an out-of-memory, a poll that keeps a block waiting, a page
 *   recycling attempt given up); a fault in the helper's round fails no
 *   request there: the next xsa_malloc or xsa_empty_cache returns it
 *   (the helper's failure named in the message), once, or nothing does
 *   when the helper absorbed it (a readying out of memory, a fence
 *   not ready), and that request is held to the same checks;
 * - across the failed request, "nothing else changed": the current values
 *   of allocation, allocated_bytes and requested_bytes (all, small, large)
 *   are equal; active and active_bytes may go down (every malloc first
 *   completes the record_stream frees whose events are done), never up;
 *   reserved_bytes and segment, and the simulated driver's handles, handle bytes, mapped
 *   bytes, reservations, reserved bytes and cuMemAlloc count and bytes, may
 *   go down (cached memory released by the out-of-memory fallback or page
 *   recycling) but never up; events are not compared (the pool keeps spare
 *   and fence events as a cache; they are counted at shutdown);
 * - every live allocation keeps its data: each allocation carries a tag
 *   at both ends, checked when it is freed, through each import of a
 *   share of it, and after the failed request;
 * - the invariant checker (pool + simulated driver) passes every
 *   `check_every` steps from the failed step on, and at the end (until
 *   the fault fires the run is the fault-free run, which both callers
 *   check at every step; `fired` confirms the call was reached);
 * - afterwards the workload completes, xsa_empty_cache leaves nothing
 *   reserved, and after xsa_shutdown the simulated driver holds zero
 *   handles, mappings, reservations, cuMemAlloc allocations and events.
 */
#ifndef XSA_TESTS_FAULT_LIB_H
#define XSA_TESTS_FAULT_LIB_H

#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h"
#include "vmm/driver.h"

#define FI_EMPTY_EVERY 1000
#define FI_COMPLETE_EVERY 16

typedef struct fi_case {
    const char *name;
    const char *trace;    /* path of a trace file */
    const char *conf;     /* XSALLOC_CONF */
    size_t events;        /* replay the first `events` events */
    unsigned divisor;     /* allocation sizes are divided by this */
    size_t capacity;      /* simulated device bytes */
    size_t graph_window;  /* events per window of graph capture windows; 0: none */
    size_t share_every;   /* share and open every share_every-th allocation event; 0: none */
    unsigned event_us;    /* trace time of an event for the helper thread's rounds; 0: no helper */
} fi_case;

typedef struct fi_workload {
    fi_case c;
    xsa_trace t;
} fi_workload;

typedef struct fi_outcome {
    uint64_t calls[XSA_DRV_COUNT]; /* driver calls made, per entry point */
    size_t steps;
    int fired;                     /* the injected call happened */
    int errored;                   /* and its request returned an error */
} fi_outcome;

/* The workloads both fault_test and fault_sweep run (paths relative to
 * the workspace root). */
extern const fi_case fi_cases[];
extern const size_t fi_n_cases;

/* 0, or -1 with a sentence in err. */
int fi_load(fi_workload *w, const fi_case *c, char *err, size_t errlen);
void fi_unload(fi_workload *w);

/* The error an injection into `entry` returns. */
xsa_cu_result fi_error_for(xsa_driver_entry entry);

/* Runs the workload with call `nth` (1-based) of `entry` failing; nth == 0
 * injects nothing. Returns 0 if every check above passed, else -1 with
 * the first failure in err. */
int fi_run(const fi_workload *w, xsa_driver_entry entry, uint64_t nth, size_t check_every, fi_outcome *o,
           char *err, size_t errlen);

#endif
