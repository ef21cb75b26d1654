/*
 * pool/ipc: the exporting side of IPC: exports of one importer each, and
 * shares for any number (the protocol and lifetimes: xsalloc/xsalloc.h).
 */
#ifndef XSA_POOL_IPC_H
#define XSA_POOL_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"
#include "vmm/driver.h"
#include "xsalloc/types.h"

/* IPC export of the live allocation at ptr; the protocol and the lifetime
 * of exported pages are in include/xsalloc/xsalloc.h. The block stays pinned (never
 * returned to the cache once freed) until the export is closed or revoked. */
xsa_pool_status xsa_pool_ipc_export(xsa_pool *p, void *ptr, xsa_ipc_handle *out, char *err, size_t errlen);
/* Ends a pending export that was not imported. */
xsa_pool_status xsa_pool_ipc_revoke(xsa_pool *p, uint64_t export_id, char *err, size_t errlen);

/* One physical handle under a shared block: its fd in this process, the
 * fd's registration id (vmm/share.h) and its pages. */
typedef struct xsa_shared_chunk {
    int32_t fd;
    uint32_t pages;
    uint64_t id;
} xsa_shared_chunk;

/* What xsa_pool_ipc_share gives: the handles under the block, whole, in
 * address order (malloc'd; the caller frees chunks), the pages' size, and
 * where the block starts past the first handle's start. */
typedef struct xsa_pool_share {
    xsa_shared_chunk *chunks;
    size_t n_chunks;
    size_t page_size;
    size_t offset;
} xsa_pool_share;

/* Shares the live allocation at ptr with any number of importers (the
 * protocol is in include/xsalloc/xsalloc.h, xsa_ipc_share). Nothing is pinned: each
 * handle's fd stays open while the handle stays mapped. */
xsa_pool_status xsa_pool_ipc_share(xsa_pool *p, void *ptr, xsa_pool_share *out, char *err, size_t errlen);

/* Whether exportable pages work on the device (attribute and a
 * trial cuMemCreate); drops the exports seen closed or revoked, returning
 * freed blocks they pinned to the cache; revokes and forgets them all. */
bool xsa_ipc_probe(xsa_pool *p);
void xsa_ipc_poll(xsa_pool *p);
void xsa_ipc_destroy(xsa_pool *p);

#endif
