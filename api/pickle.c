/*
 * api/pickle: the pickle format of api/emit.h, written by hand so that no
 * Python is needed to produce a snapshot.
 *
 * Design: protocol 4 without frames (framing is optional), using only
 * opcodes that PyTorch's memory_viz page decodes as well as Python: dicts
 * are EMPTY_DICT, MARK, key value..., SETITEMS; lists EMPTY_LIST, MARK,
 * items..., APPENDS; tuples MARK ... TUPLE. Long containers are cut into
 * batches of 1000 items as Python's pickler does (the viewer spreads a
 * batch into one call's arguments). Nothing is memoized.
 */
#include "api/pickle.h"

#include <string.h>

enum {
    OP_MARK = '(', OP_STOP = '.', OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_NONE = 'N',
    OP_BINFLOAT = 'G', OP_BINUNICODE = 'X', OP_APPENDS = 'e', OP_TUPLE = 't', OP_SETITEMS = 'u',
    OP_EMPTY_DICT = '}', OP_EMPTY_LIST = ']', OP_PROTO = 0x80, OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a, OP_SHORT_BINUNICODE = 0x8c,
};

#define BATCH 1000

/* Little-endian bytes of v. */
static void put_le(xsa_emitter *e, uint64_t v, int n) {
    for (int i = 0; i < n; i++) xsa_emit_byte(e, (unsigned char)(v >> (8 * i)));
}

static unsigned char batch_op(char container) { return container == 'd' ? OP_SETITEMS : OP_APPENDS; }

/* Counts a finished item (a key, a value or a whole container) of the
 * enclosing container; a full batch is closed and a new one opened. */
static void item_done(xsa_emitter *e) {
    if (e->depth == 0) return;
    char c = e->container[e->depth];
    size_t limit = c == 'd' ? 2 * BATCH : BATCH;
    if (c == 't' || ++e->items[e->depth] < limit) return;
    xsa_emit_byte(e, batch_op(c));
    xsa_emit_byte(e, OP_MARK);
    e->items[e->depth] = 0;
}

static void pk_open(xsa_emitter *e, char container) {
    if (e->depth == XSA_EMIT_MAX_DEPTH) {
        e->failed = true;
        return;
    }
    if (container == 'd') xsa_emit_byte(e, OP_EMPTY_DICT);
    if (container == 'l') xsa_emit_byte(e, OP_EMPTY_LIST);
    xsa_emit_byte(e, OP_MARK);
    e->container[++e->depth] = container;
    e->items[e->depth] = 0;
}

static void pk_close(xsa_emitter *e) {
    char c = e->container[e->depth--];
    xsa_emit_byte(e, c == 't' ? OP_TUPLE : batch_op(c));
    item_done(e);
}

static void pk_str(xsa_emitter *e, const char *s) {
    size_t n = strlen(s);
    if (n < 256) {
        xsa_emit_byte(e, OP_SHORT_BINUNICODE);
        xsa_emit_byte(e, (unsigned char)n);
    } else {
        xsa_emit_byte(e, OP_BINUNICODE);
        put_le(e, n, 4);
    }
    xsa_emit_bytes(e, s, n);
    item_done(e);
}

/* The shortest two's complement little-endian form, as Python's LONG1. */
static void put_long1(xsa_emitter *e, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    int n = 8;
    while (n > 1 && ((b[n - 1] == 0x00 && b[n - 2] < 0x80) || (b[n - 1] == 0xff && b[n - 2] >= 0x80))) n--;
    xsa_emit_byte(e, OP_LONG1);
    xsa_emit_byte(e, (unsigned char)n);
    xsa_emit_bytes(e, b, (size_t)n);
}

static void pk_int(xsa_emitter *e, int64_t v) {
    if (v >= 0 && v < 256) {
        xsa_emit_byte(e, OP_BININT1);
        xsa_emit_byte(e, (unsigned char)v);
    } else if (v >= 0 && v < 65536) {
        xsa_emit_byte(e, OP_BININT2);
        put_le(e, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        xsa_emit_byte(e, OP_BININT);
        put_le(e, (uint64_t)v, 4);
    } else {
        put_long1(e, v);
    }
    item_done(e);
}

static void pk_real(xsa_emitter *e, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    xsa_emit_byte(e, OP_BINFLOAT);
    for (int i = 7; i >= 0; i--) xsa_emit_byte(e, (unsigned char)(bits >> (8 * i))); /* big-endian */
    item_done(e);
}

static void pk_bool(xsa_emitter *e, bool v) {
    xsa_emit_byte(e, v ? OP_NEWTRUE : OP_NEWFALSE);
    item_done(e);
}

static void pk_none(xsa_emitter *e) {
    xsa_emit_byte(e, OP_NONE);
    item_done(e);
}

static void pk_finish(xsa_emitter *e) { xsa_emit_byte(e, OP_STOP); }

void xsa_emit_pickle(xsa_emitter *e) {
    static const xsa_emit_ops ops = {pk_open, pk_close, pk_str, pk_str, pk_int, pk_real, pk_bool, pk_none, pk_finish};
    memset(e, 0, sizeof *e);
    e->ops = &ops;
    xsa_emit_byte(e, OP_PROTO);
    xsa_emit_byte(e, 4);
}
