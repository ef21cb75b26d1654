/* pool/block: block records and their recycler (design in block.h). */
#include "pool/block.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "pool/grow.h"

xsa_block *xsa_block_new(xsa_block_cache *c) {
    xsa_block *b = c->free_list;
    if (b)
        c->free_list = b->next;
    else if (!(b = malloc(sizeof *b)))
        return NULL;
    *b = (xsa_block){.mapped = true}; /* inline stores, not a memset call */
    c->live++;
    return b;
}

void xsa_block_delete(xsa_block_cache *c, xsa_block *b) {
    if (b->stream_uses) { /* a call to free(NULL) on every merge otherwise */
        free(b->stream_uses);
        b->stream_uses = NULL;
    }
    b->next = c->free_list;
    c->free_list = b;
    c->live--;
}

void xsa_block_cache_clear(xsa_block_cache *c) {
    while (c->free_list) {
        xsa_block *b = c->free_list;
        c->free_list = b->next;
        free(b);
    }
}

bool xsa_block_cache_reserve(xsa_block_cache *c, size_t n) {
    /* n records taken (recycled or new) and given back: the free list then
     * holds at least n. */
    xsa_block *taken = NULL;
    size_t got = 0;
    for (xsa_block *b; got < n && (b = xsa_block_new(c)); got++) {
        b->next = taken;
        taken = b;
    }
    while (taken) {
        xsa_block *next = taken->next;
        xsa_block_delete(c, taken);
        taken = next;
    }
    return got == n;
}

bool xsa_block_add_stream_use(xsa_block *b, xsa_stream stream) {
    for (int i = 0; i < b->n_stream_uses; i++)
        if (b->stream_uses[i] == stream) return true;
    if (!XSA_GROW_FOR_ONE(b->stream_uses, b->n_stream_uses, b->cap_stream_uses, 4)) return false;
    b->stream_uses[b->n_stream_uses++] = stream;
    return true;
}

int xsa_check_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 0;
}
