/*
 * api/ipc: the importing side of IPC and the socket helpers (the exporting
 * side is pool/ipc.c, reached through api/allocator.c; the byte strings of
 * shared blocks are api/ipc_share.h's). Internal.
 */
#ifndef XSA_API_IPC_H
#define XSA_API_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "xsalloc/xsalloc.h"

/* Grants `peer` read/write on every import mapped for `device`
 * (xsa_enable_peer_access, after the device's pool granted it). */
xsa_status xsa_ipc_grant_peer(int device, int peer);
/* Closes every import of this process (xsa_shutdown). */
void xsa_ipc_close_all(void);
/* Invariant checker of the imports: each record agrees with its mapping
 * (all pages mapped, the pointer in the first page, a share's at its
 * start, a handle's open once). 1, or 0 with the first disagreement. */
int xsa_ipc_check(char *err, size_t errlen);

#endif
