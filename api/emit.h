/*
 * api/emit: writes one tree of dicts, lists, tuples, strings, integers,
 * floats, booleans and None either as JSON or as a pickle, through the same
 * calls, so that the snapshot is described once (api/snapshot.c) for both.
 *
 * Design: an emitter appends to a growable byte buffer; a failed allocation
 * sets `failed` and later calls do nothing. Inside a dict, each value is
 * preceded by xsa_emit_key. Nesting depth is bounded (XSA_EMIT_MAX_DEPTH).
 */
#ifndef XSA_API_EMIT_H
#define XSA_API_EMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XSA_EMIT_MAX_DEPTH 16

typedef struct xsa_emitter xsa_emitter;

typedef struct xsa_emit_ops {
    void (*open)(xsa_emitter *e, char container); /* 'd' dict, 'l' list, 't' tuple */
    void (*close)(xsa_emitter *e);
    void (*key)(xsa_emitter *e, const char *key);
    void (*str)(xsa_emitter *e, const char *s);
    void (*integer)(xsa_emitter *e, int64_t v);
    void (*real)(xsa_emitter *e, double v);
    void (*boolean)(xsa_emitter *e, bool v);
    void (*none)(xsa_emitter *e);
    void (*finish)(xsa_emitter *e);
} xsa_emit_ops;

struct xsa_emitter {
    const xsa_emit_ops *ops;
    unsigned char *data;
    size_t len, cap;
    bool failed;
    int depth;                               /* open containers */
    char container[XSA_EMIT_MAX_DEPTH + 1];  /* [1..depth] */
    size_t items[XSA_EMIT_MAX_DEPTH + 1];    /* values (and keys) so far at each depth */
    bool after_key;                          /* JSON: the next value follows a key */
};

/* The JSON format; the pickle one is api/pickle.h's. */
void xsa_emit_json(xsa_emitter *e);

/* Appends bytes (used by the formats). */
void xsa_emit_bytes(xsa_emitter *e, const void *bytes, size_t n);
static inline void xsa_emit_byte(xsa_emitter *e, unsigned char c) { xsa_emit_bytes(e, &c, 1); }

static inline void xsa_emit_dict(xsa_emitter *e) { e->ops->open(e, 'd'); }
static inline void xsa_emit_list(xsa_emitter *e) { e->ops->open(e, 'l'); }
static inline void xsa_emit_tuple(xsa_emitter *e) { e->ops->open(e, 't'); }
static inline void xsa_emit_end(xsa_emitter *e) { e->ops->close(e); }
static inline void xsa_emit_key(xsa_emitter *e, const char *k) { e->ops->key(e, k); }
static inline void xsa_emit_str(xsa_emitter *e, const char *s) { e->ops->str(e, s); }
static inline void xsa_emit_int(xsa_emitter *e, int64_t v) { e->ops->integer(e, v); }
static inline void xsa_emit_real(xsa_emitter *e, double v) { e->ops->real(e, v); }
static inline void xsa_emit_bool(xsa_emitter *e, bool v) { e->ops->boolean(e, v); }
static inline void xsa_emit_none(xsa_emitter *e) { e->ops->none(e); }

/* Ends the document and hands over the buffer (NUL-terminated for JSON's
 * sake; *len excludes the NUL). False if host memory ran out (nothing to
 * free then). */
bool xsa_emit_finish(xsa_emitter *e, void **data, size_t *len);

#endif
