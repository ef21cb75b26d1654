/*
 * pool/peer: peer access to a pool's expandable segments.
 */
#ifndef XSA_POOL_PEER_H
#define XSA_POOL_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"

/* Grants device `peer` read/write on every page of the pool's expandable
 * segments, now and later (see xsa_enable_peer_access). */
xsa_pool_status xsa_pool_enable_peer(xsa_pool *p, int peer, char *err, size_t errlen);
/* The devices granted so far, into peers[] (room for
 * XSA_SEGMENT_MAX_ACCESS - 1); how many. */
int xsa_pool_peers(const xsa_pool *p, int *peers);
/* Grants every device that can access p's device (peer_access). */
xsa_pool_status xsa_peer_enable_all(xsa_pool *p, char *err, size_t errlen);

#endif
