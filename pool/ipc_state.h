/*
 * pool/ipc_state: the state word an exporter and its importer share.
 *
 * Design: each IPC export gets its own small memfd holding one
 * xsa_ipc_state; its fd travels with the handle. The importer moves the
 * state from EXPORTED to IMPORTED (compare-and-swap, so a handle imports at
 * most once) and to CLOSED when it unmaps; the exporter may move it from
 * EXPORTED to REVOKED (a handle never sent or never imported). The exporter
 * polls the word, never blocking: an export is over once it reads CLOSED or
 * REVOKED. Lock-free atomics are address-free, so they work across
 * processes on the shared mapping.
 */
#ifndef XSA_POOL_IPC_STATE_H
#define XSA_POOL_IPC_STATE_H

#include <stdatomic.h>
#include <stdint.h>

enum { XSA_IPC_EXPORTED = 1, XSA_IPC_IMPORTED = 2, XSA_IPC_CLOSED = 3, XSA_IPC_REVOKED = 4 };

typedef struct xsa_ipc_state {
    _Atomic uint32_t state;
    uint32_t reserved;
    uint64_t export_id;   /* must match the handle's: a mismatched fd is refused */
} xsa_ipc_state;

/* A new state (EXPORTED, id) in a memfd; *fd is the caller's. NULL with errno
 * set on failure. */
xsa_ipc_state *xsa_ipc_state_create(uint64_t export_id, int *fd);
/* Maps the state behind a received fd; NULL (errno set) if fd is not one. */
xsa_ipc_state *xsa_ipc_state_open(int fd);
void xsa_ipc_state_unmap(xsa_ipc_state *s);
/* Moves the state from `from` to `to`; returns the state found (== from on
 * success). */
uint32_t xsa_ipc_state_move(xsa_ipc_state *s, uint32_t from, uint32_t to);
/* "exported", "imported", "closed", "revoked" or "invalid". */
const char *xsa_ipc_state_name(uint32_t state);

#endif
