/* pool/free_set: size-class index of free blocks (design in free_set.h). */
#include "pool/free_set.h"

#include <stdlib.h>
#include <string.h>

#include "pool/grow.h"

/* Classes of sizes in 512-byte units u: u itself below 2^EXACT_LOG, then
 * 2^SUB_LOG classes per power of two, up to the largest size_t. */
#define UNIT_LOG 9
#define EXACT_LOG 6
#define SUB_LOG 4
#define N_CLASSES ((1u << EXACT_LOG) + ((8 * sizeof(size_t) - UNIT_LOG - EXACT_LOG) << SUB_LOG))
#define N_WORDS ((N_CLASSES + 63) / 64)
_Static_assert(N_CLASSES <= 1u + UINT16_MAX, "a class fits xsa_block.size_class");

struct xsa_free_stream {
    xsa_stream stream;
    size_t segments;
    uint64_t top;              /* bit w: words[w] != 0 */
    uint64_t words[N_WORDS];   /* bit c % 64 of word c / 64: class c is non-empty */
    xsa_block *root[N_CLASSES]; /* treaps ordered by (size, address) */
};

static inline unsigned class_of(size_t size) {
    size_t u = size >> UNIT_LOG;
    if (u < (1u << EXACT_LOG)) return (unsigned)u;
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)u);
    unsigned sub = (unsigned)(u >> (e - SUB_LOG)) & ((1u << SUB_LOG) - 1);
    return (1u << EXACT_LOG) + ((e - EXACT_LOG) << SUB_LOG) + sub;
}

/* Smallest non-empty class >= c, or -1. */
static inline int next_class(const xsa_free_stream *x, unsigned c) {
    if (c >= N_CLASSES) return -1;
    unsigned w = c / 64;
    uint64_t m = x->words[w] & (~0ull << (c % 64));
    if (!m) {
        uint64_t t = x->top & (~1ull << w);
        if (!t) return -1;
        w = (unsigned)__builtin_ctzll(t);
        m = x->words[w];
    }
    return (int)(w * 64 + (unsigned)__builtin_ctzll(m));
}

/* Largest non-empty class <= c, or -1. */
static int prev_class(const xsa_free_stream *x, unsigned c) {
    unsigned w = c / 64;
    uint64_t m = x->words[w] & (~0ull >> (63 - c % 64));
    if (!m) {
        uint64_t t = x->top & ((1ull << w) - 1);
        if (!t) return -1;
        w = 63u - (unsigned)__builtin_clzll(t);
        m = x->words[w];
    }
    return (int)(w * 64 + 63u - (unsigned)__builtin_clzll(m));
}

/* ---- one class: a treap on (size, address) ---- */

static inline bool key_before(size_t size_a, uintptr_t ptr_a, size_t size_b, uintptr_t ptr_b) {
    return size_a != size_b ? size_a < size_b : ptr_a < ptr_b;
}

static inline bool before(const xsa_block *a, const xsa_block *b) { return key_before(a->size, a->ptr, b->size, b->ptr); }

/* Splits t into the keys before b (*lo) and after it (*hi). */
static void split(xsa_block *t, const xsa_block *b, xsa_block **lo, xsa_block **hi) {
    while (t) {
        if (before(t, b)) {
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

static void tree_insert(xsa_block **link, xsa_block *b) {
    /* Descend while the existing nodes outrank the new one, then split. */
    while (*link && (*link)->priority > b->priority) link = before(b, *link) ? &(*link)->left : &(*link)->right;
    split(*link, b, &b->left, &b->right);
    *link = b;
}

static void tree_erase(xsa_block **link, xsa_block *b) {
    while (*link != b) link = before(b, *link) ? &(*link)->left : &(*link)->right;
    *link = !b->left ? b->right : !b->right ? b->left : merge(b->left, b->right);
    b->left = b->right = NULL;
}

static inline xsa_block *leftmost(xsa_block *t) {
    while (t->left) t = t->left;
    return t;
}

static inline xsa_block *rightmost(xsa_block *t) {
    while (t->right) t = t->right;
    return t;
}

/* ---- streams ---- */

/* Position of the first index whose stream is not below `stream`. */
static size_t stream_pos(const xsa_free_set *s, xsa_stream stream) {
    size_t lo = 0, hi = s->n_streams;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)s->streams[mid]->stream < (uintptr_t)stream)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether position i (from stream_pos) holds `stream`'s index. */
static bool holds(const xsa_free_set *s, size_t i, xsa_stream stream) {
    return i < s->n_streams && s->streams[i]->stream == stream;
}

static xsa_free_stream *search(const xsa_free_set *s, xsa_stream stream) {
    size_t i = stream_pos(s, stream);
    return holds(s, i, stream) ? s->streams[i] : NULL;
}

/* The cached stream first: most programs allocate on one stream. */
static inline xsa_free_stream *lookup(const xsa_free_set *s, xsa_stream stream) {
    return s->last && s->last->stream == stream ? s->last : search(s, stream);
}

/* Position of the first index whose stream is above `stream`. */
static size_t pos_after(const xsa_free_set *s, xsa_stream stream) {
    size_t i = stream_pos(s, stream);
    return holds(s, i, stream) ? i + 1 : i;
}

/* Smallest block of x in class c or above, or NULL. */
static inline xsa_block *first_from(const xsa_free_stream *x, unsigned c) {
    int k = next_class(x, c);
    return k < 0 ? NULL : leftmost(x->root[k]);
}

/* Largest block of x in class c or below, or NULL. */
static xsa_block *last_upto(const xsa_free_stream *x, unsigned c) {
    int k = prev_class(x, c);
    return k < 0 ? NULL : rightmost(x->root[k]);
}

/* Smallest block of the streams at positions >= i. */
static xsa_block *first_at(const xsa_free_set *s, size_t i) {
    for (; i < s->n_streams; i++)
        if (s->streams[i]->top) return first_from(s->streams[i], 0);
    return NULL;
}

/* Largest block of the streams at positions < i. */
static xsa_block *last_before(const xsa_free_set *s, size_t i) {
    while (i-- > 0)
        if (s->streams[i]->top) return last_upto(s->streams[i], N_CLASSES - 1);
    return NULL;
}

bool xsa_free_set_attach(xsa_free_set *s, xsa_stream stream) {
    size_t i = stream_pos(s, stream);
    if (holds(s, i, stream)) {
        s->streams[i]->segments++;
        s->segments++;
        return true;
    }
    if (!XSA_GROW_FOR_ONE(s->streams, s->n_streams, s->cap_streams, 4)) return false;
    xsa_free_stream *x = calloc(1, sizeof *x);
    if (!x) return false;
    x->stream = stream;
    x->segments = 1;
    memmove(&s->streams[i + 1], &s->streams[i], (s->n_streams - i) * sizeof *s->streams);
    s->streams[i] = x;
    s->n_streams++;
    s->segments++;
    return true;
}

void xsa_free_set_detach(xsa_free_set *s, xsa_stream stream) {
    size_t i = stream_pos(s, stream);
    xsa_free_stream *x = s->streams[i];
    s->segments--;
    if (--x->segments) return;
    s->n_streams--;
    memmove(&s->streams[i], &s->streams[i + 1], (s->n_streams - i) * sizeof *s->streams);
    if (s->last == x) s->last = NULL;
    free(x);
}

size_t xsa_free_set_segments(const xsa_free_set *s, xsa_stream stream) {
    const xsa_free_stream *x = lookup(s, stream);
    return x ? x->segments : 0;
}

void xsa_free_set_destroy(xsa_free_set *s) {
    for (size_t i = 0; i < s->n_streams; i++) free(s->streams[i]);
    free(s->streams);
    memset(s, 0, sizeof *s);
}

/* ---- the ordered set ---- */

static uint32_t next_priority(xsa_free_set *s) {
    uint32_t x = s->rng ? s->rng : 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return s->rng = x;
}

/* Links b into its class's treap (b->size_class) and marks the class. */
static inline void class_add(xsa_free_stream *x, xsa_block *b) {
    unsigned c = b->size_class;
    tree_insert(&x->root[c], b);
    x->words[c / 64] |= 1ull << (c % 64);
    x->top |= 1ull << (c / 64);
}

/* Unlinks b from its class's treap, unmarking the class if it empties. */
static inline void class_remove(xsa_free_stream *x, xsa_block *b) {
    unsigned c = b->size_class;
    tree_erase(&x->root[c], b);
    if (!x->root[c] && !(x->words[c / 64] &= ~(1ull << (c % 64)))) x->top &= ~(1ull << (c / 64));
}

void xsa_free_set_insert(xsa_free_set *s, xsa_block *b) {
    xsa_free_stream *x = s->last = lookup(s, b->stream);
    b->size_class = (uint16_t)class_of(b->size);
    b->priority = next_priority(s);
    b->left = b->right = NULL;
    class_add(x, b);
    b->in_free_set = true;
    s->count++;
    s->bytes += b->size;
}

void xsa_free_set_erase(xsa_free_set *s, xsa_block *b) {
    xsa_free_stream *x = s->last = lookup(s, b->stream);
    class_remove(x, b);
    b->in_free_set = false;
    s->count--;
    s->bytes -= b->size;
}

/* Whether key (size, ptr) still falls between b's neighbours in treap t,
 * b's class: then b can take it where it is. */
static inline bool fits_in_place(const xsa_block *t, const xsa_block *b, size_t size, uintptr_t ptr) {
    const xsa_block *lo = NULL, *hi = NULL; /* the nearest ancestors below and above b */
    while (t != b) {
        if (before(b, t)) {
            hi = t;
            t = t->left;
        } else {
            lo = t;
            t = t->right;
        }
    }
    if (b->left) lo = rightmost(b->left);
    if (b->right) hi = leftmost(b->right);
    return (!lo || key_before(lo->size, lo->ptr, size, ptr)) && (!hi || key_before(size, ptr, hi->size, hi->ptr));
}

void xsa_free_set_rekey(xsa_free_set *s, xsa_block *b, uintptr_t ptr, size_t size) {
    xsa_free_stream *x = s->last = lookup(s, b->stream);
    unsigned c = b->size_class, to = class_of(size);
    s->bytes = s->bytes - b->size + size;
    if (to == c && fits_in_place(x->root[c], b, size, ptr)) {
        b->ptr = ptr;
        b->size = size;
        return;
    }
    /* Out of its class's treap and into the new place; its priority may
     * stay, being independent of its key. */
    class_remove(x, b);
    b->ptr = ptr;
    b->size = size;
    b->size_class = (uint16_t)to;
    class_add(x, b);
}

xsa_block *xsa_free_set_lower_bound(const xsa_free_set *s, xsa_stream stream, size_t size) {
    const xsa_free_stream *x = lookup(s, stream);
    if (x && x->top) {
        unsigned c = class_of(size);
        xsa_block *best = NULL;
        for (xsa_block *t = x->root[c]; t;) {
            if (t->size >= size) {
                best = t;
                t = t->left;
            } else {
                t = t->right;
            }
        }
        if (best || (best = first_from(x, c + 1))) return best;
    }
    return first_at(s, pos_after(s, stream));
}

xsa_block *xsa_free_set_next(const xsa_free_set *s, const xsa_block *b) {
    const xsa_free_stream *x = lookup(s, b->stream);
    if (x) {
        unsigned c = class_of(b->size);
        xsa_block *best = NULL;
        for (xsa_block *t = x->root[c]; t;) {
            if (before(b, t)) {
                best = t;
                t = t->left;
            } else {
                t = t->right;
            }
        }
        if (best || (best = first_from(x, c + 1)) || x == s->streams[s->n_streams - 1]) return best;
    }
    return first_at(s, pos_after(s, b->stream));
}

xsa_block *xsa_free_set_prev(const xsa_free_set *s, const xsa_block *b) {
    const xsa_free_stream *x = lookup(s, b->stream);
    if (x) {
        unsigned c = class_of(b->size);
        xsa_block *best = NULL;
        for (xsa_block *t = x->root[c]; t;) {
            if (before(t, b)) {
                best = t;
                t = t->right;
            } else {
                t = t->left;
            }
        }
        if (best || (c > 0 && (best = last_upto(x, c - 1))) || x == s->streams[0]) return best;
    }
    return last_before(s, stream_pos(s, b->stream));
}

xsa_block *xsa_free_set_first(const xsa_free_set *s) { return first_at(s, 0); }

/* ---- checker ---- */

typedef struct walk {
    const xsa_free_stream *x;
    unsigned c;
    const xsa_block *prev; /* in-order predecessor in the class */
    size_t count, bytes;
    char *err;
    size_t errlen;
} walk;

static int check_tree(walk *w, const xsa_block *t) {
    if (!t) return 1;
    unsigned long ptr = (unsigned long)t->ptr;
    if ((t->left && t->left->priority > t->priority) || (t->right && t->right->priority > t->priority))
        return xsa_check_fail(w->err, w->errlen, "free set: block %#lx breaks the heap order", ptr);
    if (!check_tree(w, t->left)) return 0;
    if (!t->in_free_set || t->stream != w->x->stream)
        return xsa_check_fail(w->err, w->errlen, "free set: block %#lx is not marked free or has another stream", ptr);
    if (class_of(t->size) != w->c || t->size_class != w->c)
        return xsa_check_fail(w->err, w->errlen, "free set: block %#lx of size %zu is in class %u, not %u", ptr, t->size, w->c,
                    class_of(t->size));
    if (w->prev && !before(w->prev, t)) return xsa_check_fail(w->err, w->errlen, "free set: out of order at %#lx", ptr);
    w->prev = t;
    w->count++;
    w->bytes += t->size;
    return check_tree(w, t->right);
}

static int check_stream(walk *w) {
    const xsa_free_stream *x = w->x;
    if (!x->segments) return xsa_check_fail(w->err, w->errlen, "free set: stream %p has no segment", x->stream);
    for (unsigned i = 0; i < N_WORDS; i++)
        if (!(x->top >> i & 1) != !x->words[i]) return xsa_check_fail(w->err, w->errlen, "free set: top bit %u is wrong", i);
    if (x->top >> N_WORDS || (N_CLASSES % 64 && x->words[N_WORDS - 1] >> (N_CLASSES % 64)))
        return xsa_check_fail(w->err, w->errlen, "free set: bits past the last class");
    for (w->c = 0; w->c < N_CLASSES; w->c++) {
        if (!(x->words[w->c / 64] >> (w->c % 64) & 1) != !x->root[w->c])
            return xsa_check_fail(w->err, w->errlen, "free set: class %u: bitmap and tree disagree", w->c);
        w->prev = NULL;
        if (!check_tree(w, x->root[w->c])) return 0;
    }
    return 1;
}

int xsa_free_set_check(const xsa_free_set *s, char *err, size_t errlen) {
    walk w = {.err = err, .errlen = errlen};
    bool last_found = !s->last;
    size_t segments = 0;
    for (size_t i = 0; i < s->n_streams; i++) {
        w.x = s->streams[i];
        if (i && (uintptr_t)s->streams[i - 1]->stream >= (uintptr_t)w.x->stream)
            return xsa_check_fail(err, errlen, "free set: streams out of order at %p", w.x->stream);
        last_found |= w.x == s->last;
        segments += w.x->segments;
        if (!check_stream(&w)) return 0;
    }
    if (!last_found) return xsa_check_fail(err, errlen, "free set: the cached stream is not in the set");
    if (segments != s->segments)
        return xsa_check_fail(err, errlen, "free set: %zu segments attached, %zu counted", segments, s->segments);
    if (w.count != s->count || w.bytes != s->bytes)
        return xsa_check_fail(err, errlen, "free set: %zu blocks/%zu bytes in the classes, %zu/%zu counted", w.count, w.bytes,
                    s->count, s->bytes);
    return 1;
}
