/*
 * api/lag_probe: how far the GPU runs behind the CPU in a real program,
 * counted in allocator calls: XSALLOC_LAG_PROBE=FILE (docs/configuration.md).
 * Internal to api/ (and tests); the file is the interface.
 */
#ifndef XSA_API_LAG_PROBE_H
#define XSA_API_LAG_PROBE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/driver.h"
#include "xsalloc/xsalloc.h"

#define XSA_LAG_PROBE_EVERY 16     /* every 16th call records a probe */
#define XSA_LAG_PROBE_SLOTS 64     /* pending probes (events) at most */
#define XSA_LAG_PROBE_LANES 8      /* (device, stream) pairs probed */
#define XSA_LAG_PROBE_EXACT 65536  /* distances below this are counted exactly */

/* True while probing; the entry points test it before anything else. */
extern atomic_bool xsa_lag_probe_on;

/* Called by xsa_init (init lock held) with $XSALLOC_LAG_PROBE: NULL or ""
 * does nothing. Truncates the file to check that it can be written, else
 * fails with XSA_ERROR_CONFIG naming the variable and the path. */
xsa_status xsa_lag_probe_start(const char *path, xsa_driver *drv);
/* Called by xsa_shutdown: polls the pending probes once more, writes the
 * file and destroys the events. At process exit the file is written
 * without driver calls if this never ran. */
void xsa_lag_probe_stop(void);

/* One allocator call on (device, stream): counts it, adds the probes that
 * completed, and records a probe on the first call with a stream at or
 * after every XSA_LAG_PROBE_EVERY-th. device < 0: a call whose stream is
 * not known (a free through xsa_ctx_free), counted but never recorded on. */
void xsa_lag_probe_call(int device, void *stream);

/* In a child forked from a probing process: stops probing, writes
 * nothing (the file is the parent's) and frees the mutex a parent thread
 * may have held. */
void xsa_lag_probe_forget(void);

/* What the PyTorch entry points call: one untaken branch while off. */
static inline void xsa_lag_probe_note(int device, void *stream) {
    if (__builtin_expect(atomic_load_explicit(&xsa_lag_probe_on, memory_order_relaxed), 0))
        xsa_lag_probe_call(device, stream);
}

typedef struct xsa_lag_probe_stats {
    uint64_t calls;   /* allocator calls counted */
    uint64_t probes;  /* probes seen complete: the histogram's count */
    uint64_t pending; /* recorded, not yet seen complete */
    uint64_t skipped; /* probe calls that recorded nothing: no free slot or lane */
    uint64_t sum, max;
} xsa_lag_probe_stats;

/* For tests: the counters, and the probes completed `distance` calls after
 * they were recorded (distance < XSA_LAG_PROBE_EXACT). */
void xsa_lag_probe_read(xsa_lag_probe_stats *out);
uint64_t xsa_lag_probe_count(uint64_t distance);

#endif
