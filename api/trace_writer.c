/*
 * api/trace_writer: xsa_write_trace, the trace ring written as a trace file
 * the benchmarks replay ('a <id> <bytes> <stream>', 'f <id>',
 * 'r <id> <stream>'; benchmarks/README.md), so any program run under
 * xsalloc with recording on yields a replayable trace.
 *
 * Design: allocations get ids in order (never reused); live ones are found
 * by address in an open-addressing table whose entries are never removed,
 * only marked dead, which keeps lookups simple. Streams are numbered in
 * order of first use. A free or record_stream of an address with no
 * recorded allocation (made before the oldest event of the ring) is left
 * out, so the file always loads and replays.
 */
#include <stdio.h>
#include <stdlib.h>

#include "api/devices.h"
#include "api/errors.h"
#include "api/observe.h"

/* The loader's bounds (trace/trace.h). */
#define MAX_IDS ((uint32_t)1 << 26)
#define MAX_STREAMS 256
#define DEAD UINT32_MAX

typedef struct live_map {
    uintptr_t *addr;
    uint32_t *id;  /* DEAD: freed */
    size_t mask;   /* capacity - 1 */
} live_map;

static bool map_init(live_map *m, size_t events) {
    size_t cap = 16;
    while (cap < 2 * events) cap *= 2;
    m->addr = calloc(cap, sizeof *m->addr);
    m->id = malloc(cap * sizeof *m->id);
    m->mask = cap - 1;
    if (!m->addr || !m->id) return false;
    for (size_t i = 0; i < cap; i++) m->id[i] = DEAD;
    return true;
}

/* The slot of addr (address 0 is never a device pointer: it marks empty). */
static size_t map_slot(const live_map *m, uintptr_t addr) {
    size_t i = (addr >> 9) * 0x9e3779b97f4a7c15u & m->mask;
    while (m->addr[i] && m->addr[i] != addr) i = (i + 1) & m->mask;
    return i;
}

typedef struct writer {
    FILE *f;
    live_map live;
    uint32_t next_id;
    xsa_stream streams[MAX_STREAMS];
    int n_streams;
} writer;

/* The stream's number, or -1 if there are too many. */
static int stream_number(writer *w, xsa_stream s) {
    for (int i = 0; i < w->n_streams; i++)
        if (w->streams[i] == s) return i;
    if (w->n_streams == MAX_STREAMS) return -1;
    w->streams[w->n_streams] = s;
    return w->n_streams++;
}

/* Writes one event's line, if it has one. False when a bound is exceeded. */
static bool write_event(writer *w, const xsa_history_entry *h) {
    size_t slot = map_slot(&w->live, h->addr);
    uint32_t id = w->live.id[slot];
    int stream;
    switch (h->action) {
    case XSA_ACT_ALLOC:
        if (w->next_id == MAX_IDS || (stream = stream_number(w, h->stream)) < 0) return false;
        w->live.addr[slot] = h->addr;
        w->live.id[slot] = w->next_id;
        fprintf(w->f, "a %u %zu %d\n", w->next_id++, h->size, stream);
        return true;
    case XSA_ACT_FREE_REQUESTED:
        if (id == DEAD) return true;
        w->live.id[slot] = DEAD;
        fprintf(w->f, "f %u\n", id);
        return true;
    case XSA_ACT_RECORD_STREAM:
        if (id == DEAD) return true;
        if ((stream = stream_number(w, h->stream)) < 0) return false;
        fprintf(w->f, "r %u %d\n", id, stream);
        return true;
    default:
        return true;
    }
}

static xsa_status write_file(const char *path, int device, const xsa_history_entry *h, size_t n) {
    writer w = {.f = fopen(path, "w")};
    if (!w.f) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_write_trace: cannot open %s for writing", path);
    bool ok = map_init(&w.live, n);
    if (ok) fprintf(w.f, "# xsalloc trace recorder: device %d, %zu recorded events\n", device, n);
    size_t i = 0;
    while (ok && i < n && write_event(&w, &h[i])) i++;
    bool written = fclose(w.f) == 0;
    free(w.live.addr);
    free(w.live.id);
    if (!ok) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_write_trace: out of host memory");
    if (i < n)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_write_trace: more than %u allocations or %d streams: a trace cannot hold them",
                        MAX_IDS, MAX_STREAMS);
    if (!written) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_write_trace: cannot write %s", path);
    return xsa_ok();
}

xsa_status xsa_write_trace(int device, const char *path) {
    if (!path) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_write_trace: path is NULL");
    xsa_pool *p;
    xsa_status st = xsa_api_lock("xsa_write_trace", device, false, &p);
    if (st != XSA_SUCCESS) return st;
    xsa_history_entry *h = NULL;
    size_t n = 0;
    bool copied = xsa_history_copy(device, &h, &n);
    xsa_api_unlock(device);
    if (!copied) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_write_trace: out of host memory");
    st = write_file(path, device, h, n);
    free(h);
    return st;
}
