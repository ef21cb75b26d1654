/*
 * trace/trace: the trace loader (format in trace.h).
 *
 * Design: read everything (gzread handles gzip'd and plain files alike),
 * then one pass over the lines with a hand-written tokenizer. A per-id table
 * remembers where each id was allocated and freed, both to validate the
 * trace and to make the error messages say where the earlier event was.
 */
#include "trace/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

typedef struct id_state {
    uint32_t alloc_line; /* 0: never allocated */
    uint32_t free_line;  /* 0: live (if allocated) */
} id_state;

typedef struct parser {
    const char *name;
    const char *bol, *p, *eol; /* start, cursor and end of the current line */
    uint32_t line;
    char *err;
    size_t errlen;
    id_state *ids;
    size_t ids_cap;
    size_t events_cap, waits_cap;
    xsa_trace *t;
} parser;

static int fail(parser *ps, const char *fmt, ...) {
    if (!ps->err || ps->errlen == 0) return -1;
    int n = snprintf(ps->err, ps->errlen, "%s:%u: ", ps->name, ps->line);
    if (n < 0 || (size_t)n >= ps->errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Length of the current line, trimmed to what fits an error message. */
static int line_len(const parser *ps) {
    size_t n = (size_t)(ps->eol - ps->bol);
    while (n > 0 && (ps->bol[n - 1] == '\r' || ps->bol[n - 1] == ' ')) n--;
    return n > 60 ? 60 : (int)n;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Reads " <unsigned>" (at least one blank first). */
static int read_uint(parser *ps, uint64_t max, uint64_t *out) {
    const char *p = ps->p;
    if (p == ps->eol || !is_blank(*p)) return -1;
    while (p < ps->eol && is_blank(*p)) p++;
    if (p == ps->eol || *p < '0' || *p > '9') return -1;
    uint64_t v = 0;
    for (; p < ps->eol && *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    ps->p = p;
    *out = v;
    return 0;
}

static int at_line_end(parser *ps) {
    while (ps->p < ps->eol && is_blank(*ps->p)) ps->p++;
    return ps->p == ps->eol;
}

static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    void *b = realloc(*buf, n * elem);
    if (!b) return -1;
    memset((char *)b + *cap * elem, 0, (n - *cap) * elem);
    *buf = b;
    *cap = n;
    return 0;
}

static id_state *id_slot(parser *ps, uint32_t id) {
    if (grow((void **)&ps->ids, &ps->ids_cap, (size_t)id + 1, sizeof *ps->ids)) return NULL;
    if (id >= ps->t->n_ids) ps->t->n_ids = id + 1;
    return &ps->ids[id];
}

/* An id that must be live for a free or a record_stream. */
static int check_live(parser *ps, uint32_t id, const char *what) {
    id_state *s = id < ps->t->n_ids ? &ps->ids[id] : NULL;
    if (!s || s->alloc_line == 0)
        return fail(ps, "%s of id %u, which was never allocated", what, id);
    if (s->free_line)
        return fail(ps, "%s of id %u, which was allocated at line %u and already freed at line %u",
                    what, id, s->alloc_line, s->free_line);
    return 0;
}

static int parse_fields(parser *ps, char kind, xsa_trace_event *ev) {
    static const char *const forms[] = {
        ['a'] = "'a <id> <bytes> <stream>'", ['f'] = "'f <id>'", ['r'] = "'r <id> <stream>'"};
    uint64_t id, v = 0, stream = 0;
    int ok = read_uint(ps, XSA_TRACE_MAX_ID - 1, &id) == 0;
    if (ok && kind == 'a') ok = read_uint(ps, UINT64_MAX, &v) == 0;
    if (ok && kind != 'f') ok = read_uint(ps, XSA_TRACE_MAX_STREAMS - 1, &stream) == 0;
    if (!ok || !at_line_end(ps))
        return fail(ps, "expected %s (ids below %u, streams below %d), got '%.*s'", forms[(int)kind],
                    XSA_TRACE_MAX_ID, XSA_TRACE_MAX_STREAMS, line_len(ps), ps->bol);
    ev->kind = (uint8_t)kind;
    ev->id = (uint32_t)id;
    ev->bytes = v;
    ev->stream = (uint16_t)stream;
    ev->line = ps->line;
    return 0;
}

/* Applies the event to the id table and the trace's counters. */
static int account(parser *ps, const xsa_trace_event *ev) {
    xsa_trace *t = ps->t;
    if (ev->kind == 'a') {
        id_state *s = id_slot(ps, ev->id);
        if (!s) return fail(ps, "out of memory");
        if (s->alloc_line && !s->free_line)
            return fail(ps, "double allocation of id %u (still live from line %u)", ev->id,
                        s->alloc_line);
        s->alloc_line = ps->line; /* reuse after a free is fine */
        s->free_line = 0;
        t->n_allocs++;
    } else if (check_live(ps, ev->id, ev->kind == 'f' ? "free" : "record_stream")) {
        return -1;
    } else if (ev->kind == 'f') {
        ps->ids[ev->id].free_line = ps->line;
        t->n_frees++;
    } else {
        t->n_records++;
    }
    if (ev->kind != 'f' && ev->stream >= t->n_streams) t->n_streams = ev->stream + 1;
    return 0;
}

/* 'w <us>': the wait after the last event grows (before the first event
 * there is no program to wait yet: nothing is kept). */
static int parse_wait(parser *ps) {
    uint64_t us;
    if (read_uint(ps, UINT64_MAX / 1000, &us) || !at_line_end(ps))
        return fail(ps, "expected 'w <microseconds>', got '%.*s'", line_len(ps), ps->bol);
    xsa_trace *t = ps->t;
    if (!t->n_events) return 0;
    if (grow((void **)&t->wait_ns, &ps->waits_cap, ps->events_cap, sizeof *t->wait_ns)) return fail(ps, "out of memory");
    t->wait_ns[t->n_events - 1] += us * 1000;
    return 0;
}

static int parse_line(parser *ps) {
    while (ps->p < ps->eol && is_blank(*ps->p)) ps->p++;
    if (ps->p == ps->eol || *ps->p == '#') return 0;
    char kind = *ps->p++;
    if (kind == 'w') return parse_wait(ps);
    if (kind != 'a' && kind != 'f' && kind != 'r')
        return fail(ps, "expected an event 'a', 'f', 'r' or a wait 'w' at the start of the line, got '%.*s'",
                    line_len(ps), ps->bol);
    xsa_trace *t = ps->t;
    if (grow((void **)&t->events, &ps->events_cap, t->n_events + 1, sizeof *t->events) ||
        (t->wait_ns && grow((void **)&t->wait_ns, &ps->waits_cap, ps->events_cap, sizeof *t->wait_ns)))
        return fail(ps, "out of memory");
    xsa_trace_event *ev = &t->events[t->n_events];
    if (parse_fields(ps, kind, ev) || account(ps, ev)) return -1;
    t->n_events++;
    return 0;
}

/* Sizes the event array (and the id table, for dense ids) once from the
 * line count: growing them by doubling costs more than the parse itself. */
static int presize(parser *ps, const char *p, const char *end) {
    size_t lines = 1;
    for (; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++) lines++;
    return grow((void **)&ps->t->events, &ps->events_cap, lines, sizeof *ps->t->events) ||
           grow((void **)&ps->ids, &ps->ids_cap, lines, sizeof *ps->ids);
}

int xsa_trace_parse(const char *name, const char *text, size_t len, xsa_trace *t, char *err,
                    size_t errlen) {
    memset(t, 0, sizeof *t);
    parser ps = {.name = name, .p = text, .err = err, .errlen = errlen, .t = t};
    const char *end = text + len;
    if (presize(&ps, text, end)) return fail(&ps, "out of memory");
    int rc = 0;
    while (rc == 0 && ps.p < end) {
        ps.line++;
        ps.eol = memchr(ps.p, '\n', (size_t)(end - ps.p));
        if (!ps.eol) ps.eol = end;
        ps.bol = ps.p;
        rc = parse_line(&ps);
        ps.p = ps.eol + 1;
    }
    free(ps.ids);
    if (rc) xsa_trace_free(t);
    return rc;
}

/* Reads the whole (possibly gzip'd) file into a malloc'd buffer. */
static char *read_all(const char *path, size_t *len, char *err, size_t errlen) {
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    gzbuffer(f, 1 << 17);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    int got = 1;
    while (buf && got > 0) {
        if (cap - n < (1 << 16)) {
            char *b = realloc(buf, cap * 2);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        got = gzread(f, buf + n, (unsigned)(cap - n));
        if (got > 0) n += (size_t)got;
    }
    int zerr = 0;
    const char *zmsg = gzerror(f, &zerr);
    if (!buf || got > 0 || got < 0) {
        snprintf(err, errlen, "%s: read failed (%s)", path, !buf || got > 0 ? "out of memory" : zmsg);
        free(buf);
        buf = NULL;
    }
    gzclose(f);
    *len = n;
    return buf;
}

int xsa_trace_load(const char *path, xsa_trace *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    size_t len;
    char *text = read_all(path, &len, err, errlen);
    if (!text) return -1;
    int rc = xsa_trace_parse(path, text, len, t, err, errlen);
    free(text);
    return rc;
}

void xsa_trace_free(xsa_trace *t) {
    free(t->events);
    free(t->wait_ns);
    memset(t, 0, sizeof *t);
}

int xsa_trace_repeat(const xsa_trace *in, unsigned times, xsa_trace *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!times || (uint64_t)in->n_ids * times > XSA_TRACE_MAX_ID) {
        snprintf(err, errlen, "repeating a trace of %u ids %u times: %s", in->n_ids, times,
                 times ? "too many ids" : "no copy");
        return -1;
    }
    bool *kept = calloc(in->n_ids ? in->n_ids : 1, sizeof *kept); /* live at the end */
    out->events = malloc((in->n_events ? in->n_events : 1) * times * sizeof *out->events);
    out->wait_ns = in->wait_ns ? malloc((in->n_events ? in->n_events : 1) * times * sizeof *out->wait_ns) : NULL;
    if (!kept || !out->events || (in->wait_ns && !out->wait_ns)) {
        free(kept);
        xsa_trace_free(out);
        snprintf(err, errlen, "repeating a trace: out of memory");
        return -1;
    }
    for (size_t i = 0; i < in->n_events; i++) {
        const xsa_trace_event *e = &in->events[i];
        if (e->kind == XSA_TRACE_ALLOC) kept[e->id] = true;
        if (e->kind == XSA_TRACE_FREE) kept[e->id] = false;
    }
    for (unsigned k = 0; k < times; k++) {
        for (size_t i = 0; i < in->n_events; i++) {
            xsa_trace_event e = in->events[i];
            if (k && kept[e.id]) continue;
            if (!kept[e.id]) e.id += k * in->n_ids;
            if (out->wait_ns) out->wait_ns[out->n_events] = in->wait_ns[i];
            out->events[out->n_events++] = e;
            out->n_allocs += e.kind == XSA_TRACE_ALLOC;
            out->n_frees += e.kind == XSA_TRACE_FREE;
            out->n_records += e.kind == XSA_TRACE_RECORD;
        }
    }
    free(kept);
    out->n_ids = in->n_ids * times;
    out->n_streams = in->n_streams;
    return 0;
}

void xsa_trace_name(const char *path, char *out, size_t len) {
    const char *base = strrchr(path, '/');
    snprintf(out, len, "%s", base ? base + 1 : path);
    static const char *const exts[] = {".trace.gz", ".trace", ".gz"};
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t n = strlen(out), e = strlen(exts[i]);
        if (n > e && strcmp(out + n - e, exts[i]) == 0) {
            out[n - e] = '\0';
            return;
        }
    }
}
