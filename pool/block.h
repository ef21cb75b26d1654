/*
 * pool/block: a block is a contiguous piece of a segment: allocated, free
 * (cached, in its pool's free set), or, in an expandable segment, unmapped
 * or draining (mapped, but its pages were moved to another address while
 * queued work may still use this one, so it belongs to nobody until
 * pool/recycle unmaps it). The blocks of a segment tile it exactly and are
 * linked by prev/next in address order. Block records are recycled through
 * a free list so that the cache-hit path never calls malloc.
 */
#ifndef XSA_POOL_BLOCK_H
#define XSA_POOL_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"
#include "vmm/driver.h"

struct xsa_seg;
struct xsa_backup;

typedef struct xsa_block {
    uintptr_t ptr;
    size_t size;
    size_t requested;        /* the size asked for, while allocated */
    xsa_stream stream;       /* the stream it was allocated on; never handed to another */
    struct xsa_seg *seg;
    struct xsa_block *prev, *next; /* neighbours in the segment */
    /* Free set links: the treap of its size class (pool/free_set). */
    struct xsa_block *left, *right;
    uint32_t priority;
    uint16_t size_class;     /* its class while in the free set */
    bool allocated;          /* handed out (also true while its free waits for events) */
    bool mapped;             /* false only for unmapped ranges of expandable segments */
    bool in_free_set;
    bool draining;           /* mapped, but its pages moved on (pool/recycle): not the pool's memory */
    bool capture_deferred;   /* freed during capture with other stream uses: waits for the capture's end */
    uint64_t capture_id;     /* the capture it was handed out in (capture_reuse on), else 0 */
    int event_count;         /* record_stream events still outstanding after free */
    int ipc_exports;         /* IPC exports not yet seen closed or revoked: the block is pinned */
    uint64_t gc_base;        /* pool's free-block lookup count when it became free */
    struct xsa_backup *backup; /* its bytes' host copy (pool/backup.c), or NULL */
    /* Streams that used the block besides its own (record_stream). */
    xsa_stream *stream_uses;
    int n_stream_uses, cap_stream_uses;
} xsa_block;

static inline bool xsa_block_is_split(const xsa_block *b) { return b->prev || b->next; }

/* Allocated, or freed but held by record_stream events (or a capture
 * that defers them) or IPC exports. */
static inline bool xsa_block_in_use(const xsa_block *b) {
    return b->allocated || b->event_count > 0 || b->ipc_exports > 0 || b->capture_deferred;
}

/* Memory the pool holds: mapped here and not draining. */
static inline bool xsa_block_holds_memory(const xsa_block *b) { return b->mapped && !b->draining; }

/* A cached block: memory the pool holds that nothing uses. */
static inline bool xsa_block_is_free(const xsa_block *b) { return xsa_block_holds_memory(b) && !xsa_block_in_use(b); }

/* A neighbour (b->prev or b->next, NULL at a segment's ends) that is a
 * cached block: what a block merges with, or a growth or move counts. */
static inline bool xsa_block_free_neighbour(const xsa_block *n) { return n && xsa_block_is_free(n); }

/* Recycler of block records. */
typedef struct xsa_block_cache {
    xsa_block *free_list; /* linked through ->next */
    size_t live;          /* records handed out */
} xsa_block_cache;

xsa_block *xsa_block_new(xsa_block_cache *c);
void xsa_block_delete(xsa_block_cache *c, xsa_block *b);
void xsa_block_cache_clear(xsa_block_cache *c);
/* Makes sure the next n xsa_block_new calls take recycled records (no
 * malloc, so they cannot fail). Returns false if out of host memory. */
bool xsa_block_cache_reserve(xsa_block_cache *c, size_t n);

/* Adds `stream` to the block's stream uses (no duplicates). Returns false if
 * out of host memory. */
bool xsa_block_add_stream_use(xsa_block *b, xsa_stream stream);

/* The invariant checkers' failure: writes the sentence into err, returns 0. */
int xsa_check_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
