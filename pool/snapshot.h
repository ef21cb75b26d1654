/*
 * pool/snapshot: one pool's segments and blocks as PyTorch reports them.
 */
#ifndef XSA_POOL_SNAPSHOT_H
#define XSA_POOL_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"
#include "vmm/driver.h"
#include "xsalloc/types.h"

/* Snapshot: the segments as PyTorch reports them (a cuMemAlloc'd segment, or
 * one mapped run of an expandable segment), in address order, each with its
 * blocks in address order; and the reservation of each expandable segment. */
/* xsa_snap_block and xsa_snap_segment are xsalloc/types.h's. */
typedef struct xsa_snap_reservation {
    uintptr_t addr;
    size_t size, mapped;
    xsa_stream stream;
    xsa_mempool_id pool_id;
    bool large;
} xsa_snap_reservation;

typedef struct xsa_pool_snapshot {
    xsa_snap_segment *segments;
    size_t n_segments;
    xsa_snap_block *blocks;
    size_t n_blocks;
    xsa_snap_reservation *reservations;
    size_t n_reservations;
} xsa_pool_snapshot;

/* Fills *out (free with xsa_pool_snapshot_free); XSA_POOL_HOST_OOM if host
 * memory runs out, with *out empty. */
xsa_pool_status xsa_pool_snapshot_take(const xsa_pool *p, xsa_pool_snapshot *out);
void xsa_pool_snapshot_free(xsa_pool_snapshot *s);

#endif
