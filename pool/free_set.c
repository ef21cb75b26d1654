/* pool/free_set: treap of free blocks (design in free_set.h). */
#include "pool/free_set.h"

/* Key order: stream, then size, then address. */
static int cmp_key(xsa_stream s1, size_t z1, uintptr_t p1, const xsa_block *b) {
    if ((uintptr_t)s1 != (uintptr_t)b->stream) return (uintptr_t)s1 < (uintptr_t)b->stream ? -1 : 1;
    if (z1 != b->size) return z1 < b->size ? -1 : 1;
    if (p1 != b->ptr) return p1 < b->ptr ? -1 : 1;
    return 0;
}

static int cmp_blocks(const xsa_block *a, const xsa_block *b) { return cmp_key(a->stream, a->size, a->ptr, b); }

/* Splits t into keys < b (*lo) and keys > b (*hi). */
static void split(xsa_block *t, const xsa_block *b, xsa_block **lo, xsa_block **hi) {
    while (t) {
        if (cmp_blocks(t, b) < 0) {
            *lo = t;
            lo = &t->right;
            t = t->right;
        } else {
            *hi = t;
            hi = &t->left;
            t = t->left;
        }
    }
    *lo = *hi = NULL;
}

static xsa_block *merge(xsa_block *a, xsa_block *b) {
    xsa_block *root = NULL, **link = &root;
    while (a && b) {
        if (a->priority > b->priority) {
            *link = a;
            link = &a->right;
            a = a->right;
        } else {
            *link = b;
            link = &b->left;
            b = b->left;
        }
    }
    *link = a ? a : b;
    return root;
}

static uint32_t next_priority(xsa_free_set *s) {
    uint32_t x = s->rng ? s->rng : 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return s->rng = x;
}

void xsa_free_set_insert(xsa_free_set *s, xsa_block *b) {
    b->priority = next_priority(s);
    b->left = b->right = NULL;
    xsa_block **link = &s->root;
    /* Descend while the existing nodes outrank the new one, then split. */
    while (*link && (*link)->priority > b->priority)
        link = cmp_blocks(b, *link) < 0 ? &(*link)->left : &(*link)->right;
    split(*link, b, &b->left, &b->right);
    *link = b;
    b->in_free_set = true;
    s->count++;
    s->bytes += b->size;
}

void xsa_free_set_erase(xsa_free_set *s, xsa_block *b) {
    xsa_block **link = &s->root;
    while (*link != b) link = cmp_blocks(b, *link) < 0 ? &(*link)->left : &(*link)->right;
    *link = merge(b->left, b->right);
    b->left = b->right = NULL;
    b->in_free_set = false;
    s->count--;
    s->bytes -= b->size;
}

xsa_block *xsa_free_set_lower_bound(const xsa_free_set *s, xsa_stream stream, size_t size) {
    xsa_block *best = NULL;
    for (xsa_block *t = s->root; t;) {
        if (cmp_key(stream, size, 0, t) <= 0) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

xsa_block *xsa_free_set_next(const xsa_free_set *s, const xsa_block *b) {
    xsa_block *best = NULL;
    for (xsa_block *t = s->root; t;) {
        if (cmp_blocks(b, t) < 0) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

xsa_block *xsa_free_set_prev(const xsa_free_set *s, const xsa_block *b) {
    xsa_block *best = NULL;
    for (xsa_block *t = s->root; t;) {
        if (cmp_blocks(b, t) > 0) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return best;
}

xsa_block *xsa_free_set_first(const xsa_free_set *s) {
    xsa_block *t = s->root;
    while (t && t->left) t = t->left;
    return t;
}
