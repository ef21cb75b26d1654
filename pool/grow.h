/*
 * pool/grow: room for one more element at the end of a growable array,
 * the one shape of the pool's small arrays (stream uses, event queues,
 * routes, kept pools, deferred frees, free-set streams).
 *
 * Design: the capacity doubles when the array is full, from `first` for an
 * empty one, so appends cost amortised constant time. A macro, so that
 * each array keeps its own element and count types; it evaluates to false
 * when host memory runs out, with the array unchanged.
 */
#ifndef XSA_POOL_GROW_H
#define XSA_POOL_GROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* v: the array (an lvalue pointer), n: the elements held, cap: its
 * capacity (an lvalue), first: the capacity of the first allocation. */
#define XSA_GROW_FOR_ONE(v, n, cap, first)                                     \
    __extension__({                                                            \
        bool ok_ = true;                                                       \
        if ((size_t)(n) == (size_t)(cap)) {                                    \
            size_t cap_ = (cap) ? 2 * (size_t)(cap) : (size_t)(first);         \
            void *grown_ = realloc((v), cap_ * sizeof *(v));                   \
            if (grown_) {                                                      \
                (v) = grown_;                                                  \
                (cap) = cap_;                                                  \
            } else {                                                           \
                ok_ = false;                                                   \
            }                                                                  \
        }                                                                      \
        ok_;                                                                   \
    })

#endif
