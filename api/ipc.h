/*
 * api/ipc: the importing side of IPC and the socket helpers (the exporting
 * side is pool/ipc.c, reached through api/allocator.c), and the byte
 * strings of shared blocks (api/ipc_share.c). Internal.
 */
#ifndef XSA_API_IPC_H
#define XSA_API_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "pool/ipc.h"
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

/* api/ipc_share.c. The bytes of a share made on `device` (malloc'd). */
xsa_status xsa_ipc_share_encode(int device, const xsa_pool_share *share, void **bytes, size_t *len);

/* The exporter's handles of a share, taken into this process. */
typedef struct xsa_ipc_taken {
    int n;              /* handles */
    int *fds;           /* this process's fds of them (xsa_ipc_taken_close closes) */
    uint32_t *pages;    /* pages of each */
    size_t page_size;
} xsa_ipc_taken;

/* Checks the bytes and takes the fds they name from the exporter,
 * refusing a stale handle; on failure *out holds nothing. */
xsa_status xsa_ipc_share_take(const void *bytes, size_t len, xsa_ipc_taken *out);
void xsa_ipc_taken_close(xsa_ipc_taken *t);

#endif
