/* pool/ipc_state: the exporter/importer state word (design in ipc_state.h). */
#include "pool/ipc_state.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the shared state word needs lock-free (address-free) atomics");

static xsa_ipc_state *map_state(int fd) {
    void *m = mmap(NULL, sizeof(xsa_ipc_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return m == MAP_FAILED ? NULL : m;
}

xsa_ipc_state *xsa_ipc_state_create(uint64_t export_id, int *fd) {
    *fd = memfd_create("xsa-ipc-state", MFD_CLOEXEC);
    if (*fd < 0) return NULL;
    xsa_ipc_state *s = ftruncate(*fd, sizeof *s) == 0 ? map_state(*fd) : NULL;
    if (!s) {
        int e = errno;
        close(*fd);
        *fd = -1;
        errno = e;
        return NULL;
    }
    s->export_id = export_id;
    atomic_store(&s->state, XSA_IPC_EXPORTED);
    return s;
}

xsa_ipc_state *xsa_ipc_state_open(int fd) {
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return NULL;
    /* Mapping a shorter file would fault on first use, not fail here. */
    if (!S_ISREG(st.st_mode) || st.st_size != (off_t)sizeof(xsa_ipc_state)) {
        errno = EINVAL;
        return NULL;
    }
    return map_state(fd);
}

void xsa_ipc_state_unmap(xsa_ipc_state *s) { munmap(s, sizeof *s); }

uint32_t xsa_ipc_state_move(xsa_ipc_state *s, uint32_t from, uint32_t to) {
    uint32_t found = from;
    atomic_compare_exchange_strong(&s->state, &found, to);
    return found;
}

const char *xsa_ipc_state_name(uint32_t state) {
    switch (state) {
    case XSA_IPC_EXPORTED: return "exported";
    case XSA_IPC_IMPORTED: return "imported";
    case XSA_IPC_CLOSED: return "closed";
    case XSA_IPC_REVOKED: return "revoked";
    }
    return "invalid";
}
