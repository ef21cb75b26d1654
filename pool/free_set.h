/*
 * pool/free_set: the free (cached) blocks of one pool kind, ordered by
 * (stream, size, address) like PyTorch's BlockComparatorSize, so that a
 * lower bound on (stream, size) is the best fit. A treap with intrusive
 * links in the blocks: O(log n) insert, erase and search, no allocation.
 */
#ifndef XSA_POOL_FREE_SET_H
#define XSA_POOL_FREE_SET_H

#include "pool/block.h"

typedef struct xsa_free_set {
    xsa_block *root;
    size_t count;
    size_t bytes;
    uint32_t rng; /* priorities */
} xsa_free_set;

void xsa_free_set_insert(xsa_free_set *s, xsa_block *b);
void xsa_free_set_erase(xsa_free_set *s, xsa_block *b);
/* Smallest block with key >= (stream, size, 0), or NULL. */
xsa_block *xsa_free_set_lower_bound(const xsa_free_set *s, xsa_stream stream, size_t size);
/* The block after / before b in key order, or NULL. */
xsa_block *xsa_free_set_next(const xsa_free_set *s, const xsa_block *b);
xsa_block *xsa_free_set_prev(const xsa_free_set *s, const xsa_block *b);
xsa_block *xsa_free_set_first(const xsa_free_set *s);

#endif
