/*
 * pool/free_set: the free (cached) blocks of one pool kind, ordered by
 * (stream, size, address) like PyTorch's BlockComparatorSize, so that a
 * lower bound on (stream, size) is the best fit.
 *
 * Every cache hit does a lower bound and changes the key of a block or two
 * (the rest of a split, a block grown by a merge), so the set is a
 * segregated fit as in TLSF, but exact: per stream, sizes map to classes
 * monotone in size (one per 512 B step below 32 KiB, then 16 per
 * power of two); a two-level bitmap of the non-empty classes finds the next
 * one with a ctz; each class is a small treap ordered by (size, address),
 * linked through the blocks. The best fit is the lower bound inside the
 * request's class, else the smallest block of the next non-empty class, so
 * the cost depends on the blocks sharing a class, not on all free blocks.
 * The per-stream indexes are kept in an array sorted by stream value, so
 * that first/next/prev/lower_bound cross into the next stream exactly as one
 * ordered set does; the stream last changed is cached. A rekey keeps the
 * block where it is when its class and rank do not change, else moves it
 * between classes with its treap priority (one lookup, no erase+insert).
 *
 * An index takes a few KiB and the cache-hit path must not allocate: the
 * pool attaches a stream when it creates a segment of (stream, kind) and
 * detaches it when that segment goes (blocks only exist inside segments).
 */
#ifndef XSA_POOL_FREE_SET_H
#define XSA_POOL_FREE_SET_H

#include "pool/block.h"

typedef struct xsa_free_stream xsa_free_stream;

typedef struct xsa_free_set {
    xsa_free_stream **streams; /* sorted by stream value */
    size_t n_streams, cap_streams;
    xsa_free_stream *last;     /* the stream last changed */
    /* count and bytes are not adjacent: GCC would update them with one
     * 16-byte load that cannot be forwarded from insert's 8-byte stores
     * (a stall on every erase after an insert). */
    size_t count;
    size_t segments;           /* attached, all streams */
    size_t bytes;
    uint32_t rng;              /* treap priorities */
} xsa_free_set;

/* One more / one fewer segment of `stream`: its blocks may be inserted
 * while it has any. attach returns false if out of host memory. */
bool xsa_free_set_attach(xsa_free_set *s, xsa_stream stream);
void xsa_free_set_detach(xsa_free_set *s, xsa_stream stream);
/* Segments attached for `stream`. */
size_t xsa_free_set_segments(const xsa_free_set *s, xsa_stream stream);
/* Frees the indexes (the blocks are the caller's). */
void xsa_free_set_destroy(xsa_free_set *s);

void xsa_free_set_insert(xsa_free_set *s, xsa_block *b);
void xsa_free_set_erase(xsa_free_set *s, xsa_block *b);
/* Gives b (in the set) the extent (ptr, size), on the same stream. The
 * split rest of a cache hit and a block that grows by a merge keep their
 * class and rank among its blocks almost always, and then b stays where
 * it is: a descent to b instead of an erase and an insert. */
void xsa_free_set_rekey(xsa_free_set *s, xsa_block *b, uintptr_t ptr, size_t size);
/* Smallest block with key >= (stream, size, 0), or NULL. */
xsa_block *xsa_free_set_lower_bound(const xsa_free_set *s, xsa_stream stream, size_t size);
/* The block after / before b's key, or NULL. */
xsa_block *xsa_free_set_next(const xsa_free_set *s, const xsa_block *b);
xsa_block *xsa_free_set_prev(const xsa_free_set *s, const xsa_block *b);
xsa_block *xsa_free_set_first(const xsa_free_set *s);

/* Invariant checker (slow, for tests): stream order, bitmaps, classes,
 * treap order and heap, count and bytes. Returns 0 with err set on failure. */
int xsa_free_set_check(const xsa_free_set *s, char *err, size_t errlen);

#endif
