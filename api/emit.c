/* api/emit: the buffer and the JSON format (design in emit.h). */
#include "api/emit.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void xsa_emit_bytes(xsa_emitter *e, const void *bytes, size_t n) {
    if (e->failed) return;
    if (e->len + n + 1 > e->cap) {
        size_t cap = e->cap ? e->cap : 4096;
        while (e->len + n + 1 > cap) cap *= 2;
        unsigned char *grown = realloc(e->data, cap);
        if (!grown) {
            e->failed = true;
            return;
        }
        e->data = grown;
        e->cap = cap;
    }
    memcpy(e->data + e->len, bytes, n);
    e->len += n;
}

bool xsa_emit_finish(xsa_emitter *e, void **data, size_t *len) {
    e->ops->finish(e);
    xsa_emit_bytes(e, "", 1); /* the NUL, not counted */
    if (e->failed) {
        free(e->data);
        return false;
    }
    *data = e->data;
    *len = e->len - 1;
    return true;
}

/* ---- JSON ---- */

static void put(xsa_emitter *e, const char *s) { xsa_emit_bytes(e, s, strlen(s)); }

/* A comma before every value of a container but the first; none after a key. */
static void json_value(xsa_emitter *e) {
    if (e->after_key) {
        e->after_key = false;
        return;
    }
    if (e->depth > 0 && e->items[e->depth]++ > 0) xsa_emit_byte(e, ',');
}

static void json_string(xsa_emitter *e, const char *s) {
    xsa_emit_byte(e, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            xsa_emit_byte(e, '\\');
            xsa_emit_byte(e, c);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(e, esc);
        } else {
            xsa_emit_byte(e, c);
        }
    }
    xsa_emit_byte(e, '"');
}

static void json_open(xsa_emitter *e, char container) {
    if (e->depth == XSA_EMIT_MAX_DEPTH) {
        e->failed = true;
        return;
    }
    json_value(e);
    xsa_emit_byte(e, container == 'd' ? '{' : '[');
    e->container[++e->depth] = container;
    e->items[e->depth] = 0;
}

static void json_close(xsa_emitter *e) { xsa_emit_byte(e, e->container[e->depth--] == 'd' ? '}' : ']'); }

static void json_key(xsa_emitter *e, const char *key) {
    if (e->items[e->depth]++ > 0) xsa_emit_byte(e, ',');
    json_string(e, key);
    xsa_emit_byte(e, ':');
    e->after_key = true;
}

static void json_str(xsa_emitter *e, const char *s) {
    json_value(e);
    json_string(e, s);
}

static void json_int(xsa_emitter *e, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    json_value(e);
    put(e, buf);
}

static void json_real(xsa_emitter *e, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    json_value(e);
    put(e, buf);
    /* JSON readers would take "1" for an integer. */
    if (!strpbrk(buf, ".eE")) put(e, ".0");
}

static void json_bool(xsa_emitter *e, bool v) {
    json_value(e);
    put(e, v ? "true" : "false");
}

static void json_none(xsa_emitter *e) {
    json_value(e);
    put(e, "null");
}

static void json_finish(xsa_emitter *e) { xsa_emit_byte(e, '\n'); }

void xsa_emit_json(xsa_emitter *e) {
    static const xsa_emit_ops ops = {json_open, json_close, json_key, json_str, json_int,
                                     json_real, json_bool,  json_none, json_finish};
    memset(e, 0, sizeof *e);
    e->ops = &ops;
}
