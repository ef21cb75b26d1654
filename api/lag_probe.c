/*
 * api/lag_probe: how many allocator calls pass between recording a fence on
 * a stream and seeing it complete, in a real PyTorch program.
 *
 * Design: while the probe is on, the PyTorch entry points (api/pytorch.c:
 * the pluggable allocator's and the torch adapter's) call
 * xsa_lag_probe_call after every malloc and free; while it is off they
 * pay one untaken branch on xsa_lag_probe_on. Every XSA_LAG_PROBE_EVERY-th
 * call (or the next one with a known stream: the adapter's frees pass
 * none) records an event on that call's stream with the call's number; at
 * every call the oldest pending probe of each stream is queried, and each
 * completed one adds (calls now - calls at record) to a histogram, exact
 * below XSA_LAG_PROBE_EXACT and in log2 buckets throughout. Work on one
 * stream completes in order, so each (device, stream) pair is its own FIFO
 * lane: a fast stream's probes are not seen late behind a slow stream's.
 * The lanes share XSA_LAG_PROBE_SLOTS slots, whose events are created on a
 * slot's first use and reused, so the path allocates nothing after warm-up.
 * A probe call finding no free slot, or a stream beyond the first
 * XSA_LAG_PROBE_LANES pairs, records nothing and is counted as skipped. It
 * is a measurement tool: one mutex of its own guards all of it. The first
 * driver failure stops probing and is written into the file.
 */
#include "api/lag_probe.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "vmm/driver_cuda.h"

#define NONE (-1)
#define BUCKETS 65 /* bucket 0: distance 0; bucket k: [2^(k-1), 2^k) */

typedef struct slot {
    xsa_event event; /* NULL until the slot's first use */
    int device;      /* the event's device */
    uint64_t at;     /* the call number it was recorded at */
    int next;        /* the next slot of its lane, or of the free list */
} slot;

typedef struct lane {
    bool used;
    int device;
    xsa_stream stream;
    int head, tail; /* pending probes, oldest first; NONE when empty */
} lane;

atomic_bool xsa_lag_probe_on;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool exit_hook_set;

static struct {
    bool armed; /* a file is to be written */
    char path[4096];
    xsa_driver *drv;
    char error[256]; /* the driver failure that stopped probing */
    slot slots[XSA_LAG_PROBE_SLOTS];
    int free_head;
    lane lanes[XSA_LAG_PROBE_LANES];
    uint64_t calls, probes, pending, skipped, sum, max;
    bool due; /* a probe is to be recorded at the next call with a stream */
    uint64_t buckets[BUCKETS];
    uint32_t exact[XSA_LAG_PROBE_EXACT];
} P;

static void fail_locked(const char *what, xsa_cu_result r) {
    snprintf(P.error, sizeof P.error, "%s failed: %s", what, P.drv->error_string(r));
    fprintf(stderr, "xsalloc: lag probe: %s; probing stops\n", P.error);
    atomic_store_explicit(&xsa_lag_probe_on, false, memory_order_relaxed);
}

static int bucket_of(uint64_t d) { return d ? 64 - __builtin_clzll(d) : 0; }

static uint64_t bucket_low(int k) { return k ? (uint64_t)1 << (k - 1) : 0; }

static void add_distance(uint64_t d) {
    P.probes++;
    P.sum += d;
    if (d > P.max) P.max = d;
    if (d < XSA_LAG_PROBE_EXACT) P.exact[d]++;
    P.buckets[bucket_of(d)]++;
}

/* Adds every lane's completed probes, oldest first; false on a driver failure. */
static bool poll_locked(void) {
    for (int i = 0; i < XSA_LAG_PROBE_LANES && P.lanes[i].used; i++) {
        lane *l = &P.lanes[i];
        while (l->head != NONE) {
            slot *s = &P.slots[l->head];
            xsa_cu_result r = XSA_DRV(P.drv, event_query, s->event);
            if (r == XSA_CU_ERROR_NOT_READY) break;
            if (r != XSA_CU_SUCCESS) {
                fail_locked("cuEventQuery", r);
                return false;
            }
            add_distance(P.calls - s->at);
            P.pending--;
            int done = l->head;
            l->head = s->next;
            if (l->head == NONE) l->tail = NONE;
            s->next = P.free_head;
            P.free_head = done;
        }
    }
    return true;
}

static lane *lane_of(int device, xsa_stream stream) {
    for (int i = 0; i < XSA_LAG_PROBE_LANES; i++) {
        lane *l = &P.lanes[i];
        if (!l->used) *l = (lane){.used = true, .device = device, .stream = stream, .head = NONE, .tail = NONE};
        if (l->device == device && l->stream == stream) return l;
    }
    return NULL;
}

static void record_locked(int device, xsa_stream stream) {
    lane *l = lane_of(device, stream);
    int i = P.free_head;
    if (!l || i == NONE) {
        P.skipped++;
        return;
    }
    slot *s = &P.slots[i];
    if (s->event && s->device != device) { /* last used on another device */
        XSA_DRV(P.drv, event_destroy, s->event);
        s->event = NULL;
    }
    if (!s->event) {
        xsa_cu_result r = XSA_DRV(P.drv, event_create, &s->event, device);
        if (r != XSA_CU_SUCCESS) {
            s->event = NULL;
            fail_locked("cuEventCreate", r);
            return;
        }
        s->device = device;
    }
    xsa_cu_result r = XSA_DRV(P.drv, event_record, s->event, stream);
    if (r != XSA_CU_SUCCESS) {
        fail_locked("cuEventRecord", r);
        return;
    }
    P.free_head = s->next;
    s->at = P.calls;
    s->next = NONE;
    if (l->tail == NONE)
        l->head = i;
    else
        P.slots[l->tail].next = i;
    l->tail = i;
    P.pending++;
}

void xsa_lag_probe_call(int device, void *stream) {
    pthread_mutex_lock(&lock);
    if (atomic_load_explicit(&xsa_lag_probe_on, memory_order_relaxed)) {
        xsa_cuda_ctx_watch(); /* event_create makes the device's context current */
        P.calls++;
        P.due = P.due || P.calls % XSA_LAG_PROBE_EVERY == 0;
        if (poll_locked() && P.due && device >= 0) {
            P.due = false;
            record_locked(device, stream);
        }
        xsa_cuda_ctx_restore();
    }
    pthread_mutex_unlock(&lock);
}

/* Nearest rank: the smallest distance with at least pct% of the probes at
 * or below it; beyond the exact range, its log2 bucket's lower bound. */
static uint64_t percentile(unsigned pct) {
    uint64_t rank = (P.probes * pct + 99) / 100, seen = 0;
    if (rank == 0) rank = 1;
    for (uint64_t d = 0; d < XSA_LAG_PROBE_EXACT; d++)
        if ((seen += P.exact[d]) >= rank) return d;
    for (int k = bucket_of(XSA_LAG_PROBE_EXACT); k < BUCKETS; k++)
        if ((seen += P.buckets[k]) >= rank) return bucket_low(k);
    return P.max;
}

static void write_json(FILE *f) {
    fprintf(f, "{\"probes\": %llu", (unsigned long long)P.probes);
    static const unsigned pcts[] = {10, 50, 90, 99};
    for (size_t i = 0; i < sizeof pcts / sizeof *pcts; i++) {
        if (P.probes)
            fprintf(f, ", \"p%u\": %llu", pcts[i], (unsigned long long)percentile(pcts[i]));
        else
            fprintf(f, ", \"p%u\": null", pcts[i]);
    }
    if (P.probes)
        fprintf(f, ", \"max\": %llu, \"mean\": %.3f", (unsigned long long)P.max, (double)P.sum / (double)P.probes);
    else
        fprintf(f, ", \"max\": null, \"mean\": null");
    fprintf(f, ", \"hist\": {");
    const char *sep = "";
    for (int k = 0; k < BUCKETS; k++) {
        if (!P.buckets[k]) continue;
        fprintf(f, "%s\"%llu\": %llu", sep, (unsigned long long)bucket_low(k), (unsigned long long)P.buckets[k]);
        sep = ", ";
    }
    fprintf(f, "}, \"calls\": %llu, \"every\": %d, \"pending\": %llu, \"skipped\": %llu, \"error\": ",
            (unsigned long long)P.calls, XSA_LAG_PROBE_EVERY, (unsigned long long)P.pending,
            (unsigned long long)P.skipped);
    if (P.error[0]) {
        fputc('"', f);
        for (const char *c = P.error; *c; c++)
            if (*c == '"' || *c == '\\')
                fprintf(f, "\\%c", *c);
            else if ((unsigned char)*c >= 0x20)
                fputc(*c, f);
        fputs("\"}\n", f);
    } else {
        fputs("null}\n", f);
    }
}

/* Writes the file; with the driver, polls once more first and destroys the
 * events after (not at process exit, where the driver may be gone). */
static void finish_locked(bool use_driver) {
    if (!P.armed) return;
    if (use_driver && atomic_load_explicit(&xsa_lag_probe_on, memory_order_relaxed)) poll_locked();
    atomic_store_explicit(&xsa_lag_probe_on, false, memory_order_relaxed);
    FILE *f = fopen(P.path, "w");
    if (f) write_json(f);
    if (!f || fclose(f) != 0)
        fprintf(stderr, "xsalloc: lag probe: cannot write %s: %s\n", P.path, strerror(errno));
    for (int i = 0; use_driver && i < XSA_LAG_PROBE_SLOTS; i++)
        if (P.slots[i].event) XSA_DRV(P.drv, event_destroy, P.slots[i].event);
    P.armed = false;
}

static void at_exit(void) {
    pthread_mutex_lock(&lock);
    finish_locked(false);
    pthread_mutex_unlock(&lock);
}

xsa_status xsa_lag_probe_start(const char *path, xsa_driver *drv) {
    if (!path || !*path) return XSA_SUCCESS;
    if (strlen(path) >= sizeof P.path)
        return xsa_fail(XSA_ERROR_CONFIG, "XSALLOC_LAG_PROBE: the path is longer than %zu bytes", sizeof P.path - 1);
    FILE *f = fopen(path, "w");
    if (!f || fclose(f) != 0)
        return xsa_fail(XSA_ERROR_CONFIG, "XSALLOC_LAG_PROBE: cannot write '%s': %s", path, strerror(errno));
    pthread_mutex_lock(&lock);
    memset(&P, 0, sizeof P);
    snprintf(P.path, sizeof P.path, "%s", path);
    P.drv = drv;
    for (int i = 0; i < XSA_LAG_PROBE_SLOTS; i++) P.slots[i].next = i + 1 < XSA_LAG_PROBE_SLOTS ? i + 1 : NONE;
    P.armed = true;
    if (!exit_hook_set) {
        exit_hook_set = atexit(at_exit) == 0;
        if (!exit_hook_set) fprintf(stderr, "xsalloc: lag probe: atexit failed; only xsa_shutdown writes %s\n", path);
    }
    atomic_store_explicit(&xsa_lag_probe_on, true, memory_order_relaxed);
    pthread_mutex_unlock(&lock);
    return XSA_SUCCESS;
}

void xsa_lag_probe_stop(void) {
    pthread_mutex_lock(&lock);
    xsa_cuda_ctx_watch();
    finish_locked(true);
    xsa_cuda_ctx_restore();
    pthread_mutex_unlock(&lock);
}

void xsa_lag_probe_forget(void) {
    pthread_mutex_init(&lock, NULL);
    atomic_store_explicit(&xsa_lag_probe_on, false, memory_order_relaxed);
    P.armed = false;
}

void xsa_lag_probe_read(xsa_lag_probe_stats *out) {
    pthread_mutex_lock(&lock);
    *out = (xsa_lag_probe_stats){P.calls, P.probes, P.pending, P.skipped, P.sum, P.max};
    pthread_mutex_unlock(&lock);
}

uint64_t xsa_lag_probe_count(uint64_t distance) {
    pthread_mutex_lock(&lock);
    uint64_t n = distance < XSA_LAG_PROBE_EXACT ? P.exact[distance] : 0;
    pthread_mutex_unlock(&lock);
    return n;
}
