/*
 * api/ipc: the importing side of IPC and the socket helpers (the exporting
 * side is pool/ipc.c, reached through api/allocator.c). Internal.
 */
#ifndef XSA_API_IPC_H
#define XSA_API_IPC_H

/* Closes every import of this process (xsa_shutdown). */
void xsa_ipc_close_all(void);

#endif
