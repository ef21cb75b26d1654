/*
 * api/ipc_share: the byte string of a shared block (xsa_ipc_share), and
 * taking the exporter's fds for one (xsa_ipc_open); design in ipc_share.c.
 */
#ifndef XSA_API_IPC_SHARE_H
#define XSA_API_IPC_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "pool/ipc.h"
#include "xsalloc/xsalloc.h"

/* The bytes of a share made on `device` (malloc'd). */
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
