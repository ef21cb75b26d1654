/*
 * trace/trace: loads an allocation trace (gzip'd or plain text) into an
 * array of events.
 *
 * Design: the whole file is read through zlib's gzread (which passes plain
 * files through unchanged) into one buffer, then parsed by hand without
 * sscanf, so a 75k-line trace loads in a few milliseconds. Every event keeps
 * its line number so that a replay error can point at the line. The loader
 * validates the id discipline (no double allocation, no free or record of an
 * id that is not live) so replays never see an inconsistent trace.
 *
 * Lines (blank lines and lines starting with '#' are ignored):
 *     a <id> <bytes> <stream>   allocate
 *     f <id>                    free
 *     r <id> <stream>           record_stream of live allocation <id> on <stream>
 *     w <us>                    the program waits: <us> microseconds pass after the last event
 *                               (replays on trace time only: trace/replay.h)
 */
#ifndef XSA_TRACE_TRACE_H
#define XSA_TRACE_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* Bounds that keep the per-id and per-stream tables small. */
#define XSA_TRACE_MAX_ID ((uint32_t)1 << 26)
#define XSA_TRACE_MAX_STREAMS 256

typedef enum xsa_trace_kind {
    XSA_TRACE_ALLOC = 'a',
    XSA_TRACE_FREE = 'f',
    XSA_TRACE_RECORD = 'r',
} xsa_trace_kind;

typedef struct xsa_trace_event {
    uint64_t bytes;  /* XSA_TRACE_ALLOC only */
    uint32_t id;
    uint32_t line;   /* 1-based line in the file */
    uint16_t stream; /* ALLOC: the allocation's stream; RECORD: the recorded stream */
    uint8_t kind;    /* xsa_trace_kind */
} xsa_trace_event;

typedef struct xsa_trace {
    xsa_trace_event *events;
    size_t n_events;
    size_t n_allocs, n_frees, n_records;
    uint32_t n_ids;   /* highest id + 1: size of an id-indexed table */
    int n_streams;    /* highest stream number + 1 */
    uint64_t *wait_ns; /* NULL without 'w' lines, else [n_events]: the wait after each event, in ns */
} xsa_trace;

/* Loads `path`. 0 on success; -1 with a sentence in err ("FILE:LINE: ...")
 * otherwise, and *t left empty. */
int xsa_trace_load(const char *path, xsa_trace *t, char *err, size_t errlen);
/* Parses an in-memory trace; `name` is used in error messages. */
int xsa_trace_parse(const char *name, const char *text, size_t len, xsa_trace *t,
                    char *err, size_t errlen);
void xsa_trace_free(xsa_trace *t);

/* `in` played `times` times over into *out, as a longer run of the same
 * program: the ids still live at its end (the weights) are allocated once
 * and kept, every other event comes again in each copy with its id moved
 * past the copies before; waits come again with their events. 0 on
 * success; -1 with a sentence in err (times 0, ids beyond
 * XSA_TRACE_MAX_ID, out of memory) and *out left empty. */
int xsa_trace_repeat(const xsa_trace *in, unsigned times, xsa_trace *out, char *err, size_t errlen);

/* A trace's name from its path: "dir/gpt2_varlen.trace.gz" -> "gpt2_varlen"
 * (".trace.gz", ".trace" or ".gz" taken off). */
void xsa_trace_name(const char *path, char *out, size_t len);

#endif
