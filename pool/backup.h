/*
 * pool/backup: host copies of a memory pool's live blocks, for pausing
 * (design in backup.c).
 */
#ifndef XSA_POOL_BACKUP_H
#define XSA_POOL_BACKUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* Host memory holding the copies of several blocks: pinned (cuMemHostAlloc),
 * or mmap'd and registered with the driver (munmap gives it back to the
 * system at once). Freed when its last copy is dropped (an arena the
 * driver refused to free stays listed with no copy, tried again later). */
typedef struct xsa_arena {
    void *base;
    size_t size;
    int copies;                /* backups inside it */
    bool mmapped;
    struct xsa_arena *next;
} xsa_arena;

/* A block's host copy: its requested bytes at arena->base + offset. */
typedef struct xsa_backup {
    xsa_arena *arena;
    size_t offset;
    size_t size;
} xsa_backup;

/* Copies the requested bytes of every allocated block of mp's segments to
 * host memory and waits for the copies. A block that kept its copy
 * (retention) reuses it, at the same address, if it is large enough; the
 * others get room in new arenas (mmap'd ones when `mmapped`). The work that
 * used the blocks must be over (the caller waited). On an error the copies
 * made for it are dropped, err says why, and the blocks are as they were. */
xsa_pool_status xsa_backup_take(xsa_pool *p, xsa_mempool *mp, bool mmapped, char *err, size_t errlen);

/* Copies every backup of mp's allocated blocks back to the device (the
 * pages are mapped again) and waits for the copies. */
xsa_pool_status xsa_backup_restore(xsa_pool *p, xsa_mempool *mp, char *err, size_t errlen);

/* Drops b's copy (its arena goes with its last copy). */
void xsa_backup_drop(xsa_pool *p, xsa_block *b);
/* Drops the copies of every block of mp's segments. */
void xsa_backup_drop_all(xsa_pool *p, xsa_mempool *mp);

/* The host address of [ptr, ptr+size) inside allocated block b's copy, or
 * NULL if b has none; XSA_POOL_INVALID if the range passes the copy's end. */
xsa_pool_status xsa_backup_find(const xsa_pool *p, const xsa_block *b, uintptr_t ptr, size_t size, void **host,
                                char *err, size_t errlen);

/* Pool teardown: every arena and the copy stream. */
void xsa_backup_destroy(xsa_pool *p);

/* Invariant checker: each arena counts the backups inside it, each backup
 * lies inside its listed arena, belongs to an allocated block and holds
 * its requested bytes. Returns 1 if consistent, else 0 with err. */
int xsa_backup_check(const xsa_pool *p, char *err, size_t errlen);

#endif
