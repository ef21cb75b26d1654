/*
 * vmm/share: physical handles exported to any number of processes by fd
 * number (xsa_ipc_share), and the registry with which an importer checks
 * that the fds it took are those handles.
 *
 * Design: an importer takes the exporter's fds with pidfd_getfd, naming
 * them by number, so an exported handle keeps one fd open in the exporter
 * for as long as it stays mapped there (vmm/segment.c closes it when it
 * unmaps the handle). Fd numbers are reused once closed, so each such fd
 * gets an id never given before (random start, then counted), published in
 * this process's registry: a memfd of 64-bit words, [0] a magic, [1] the
 * registry's own id, [2 + fd] the id of the export open at fd, 0 for none.
 * The exporter clears a word before it closes the fd. An importer takes
 * the registry too, and reads each handle's word before and after it takes
 * the fd: the same id both times means that the fd it holds is that export,
 * whatever ran in between, so a handle unmapped meanwhile (its block freed,
 * the cache emptied) is refused, never taken for another. The registry is
 * created with the first export and closed with the last; a new one has a
 * new id. A forked child lets go of the registry it inherited (the mapping
 * is shared with its parent) without touching it. Thread safe (one mutex);
 * words are atomics, read by importers through mappings of their own.
 */
#ifndef XSA_VMM_SHARE_H
#define XSA_VMM_SHARE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/driver.h"

/* Exports handle h as an fd (cuMemExportToShareableHandle) and registers
 * it: *fd stays open until xsa_share_close, *id names it. A registry that
 * cannot be created or grown is XSA_CU_ERROR_OUT_OF_MEMORY. */
xsa_cu_result xsa_share_export(xsa_driver *d, xsa_mem_handle h, int *fd, uint64_t *id);
/* Clears fd's registration, then closes it (and the registry with the last). */
void xsa_share_close(int fd);
/* The id registered at fd, 0 if none (for invariant checkers). */
uint64_t xsa_share_id(int fd);
/* The registry's fd and id while an export is open; false when none is. */
bool xsa_share_registry(int *fd, uint64_t *id);

/* Invariant checker: the registry is open exactly while exports are, its
 * header is whole and it counts its nonzero words. 1, or 0 with err. */
int xsa_share_check(char *err, size_t errlen);

/* Importer side: a registry taken from another process (or this one). */
typedef struct xsa_share_view {
    const _Atomic uint64_t *words;
    size_t n_words;
} xsa_share_view;

/* Maps the registry at `fd` read-only; false (and nothing mapped) unless it
 * is one and its id is `id`. */
bool xsa_share_view_open(xsa_share_view *v, int fd, uint64_t id);
/* Does the registry say that the export `id` is open at `fd`? */
bool xsa_share_view_has(const xsa_share_view *v, int fd, uint64_t id);
void xsa_share_view_close(xsa_share_view *v);

#endif
