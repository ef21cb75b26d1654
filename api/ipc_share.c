/*
 * api/ipc_share: the byte string of a shared block (xsa_ipc_share), and
 * taking the exporter's fds for one (xsa_ipc_open); api/ipc.c maps them.
 *
 * Design: the bytes name the exporter's process, its fd registry (fd and
 * id, vmm/share.h) and, per physical handle under the block, in address
 * order, the fd that the exporter keeps open for it, its registration id
 * and its pages. They hold no pointer and no padding, so the same handles
 * give the same bytes every time, which is what lets an importer (and
 * torch's caches) recognise a block it has open already. An importer takes
 * the registry with process_get_fds (pidfd_getfd), checks that each fd is
 * registered with its id, takes the fds and checks again: unchanged ids
 * mean the fds taken are the handles exported, else the handle is stale.
 * The kernel's refusals are named: EPERM comes from its ptrace rules.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/devices.h"
#include "api/errors.h"
#include "api/ipc_share.h"
#include "vmm/share.h"

#define SHARE_MAGIC 0x73617378u /* "xsas" */
#define SHARE_VERSION 1u

typedef struct share_header {
    uint32_t magic, version;
    int32_t pid;          /* the exporter */
    int32_t device;       /* the exporter's device, in its numbering (for messages) */
    int32_t registry_fd;  /* in the exporter */
    uint32_t n_chunks;
    uint64_t registry_id;
    uint64_t page_size;
} share_header;

_Static_assert(sizeof(share_header) == 40 && sizeof(xsa_shared_chunk) == 16,
               "the bytes have no padding: equal handles give equal bytes");

xsa_status xsa_ipc_share_encode(int device, const xsa_pool_share *s, void **bytes, size_t *len) {
    share_header h = {.magic = SHARE_MAGIC, .version = SHARE_VERSION, .pid = (int32_t)getpid(),
                      .device = device, .n_chunks = (uint32_t)s->n_chunks, .page_size = s->page_size};
    if (!xsa_share_registry(&h.registry_fd, &h.registry_id))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_share: no export is open after sharing (a bug)");
    size_t n = sizeof h + s->n_chunks * sizeof(xsa_shared_chunk);
    char *out = malloc(n);
    if (!out) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_ipc_share: out of host memory");
    memcpy(out, &h, sizeof h);
    memcpy(out + sizeof h, s->chunks, s->n_chunks * sizeof(xsa_shared_chunk));
    *bytes = out;
    *len = n;
    return XSA_SUCCESS;
}

/* Handle i of the bytes' chunks (which may lie at any alignment). */
static xsa_shared_chunk chunk_at(const char *chunks, uint32_t i) {
    xsa_shared_chunk c;
    memcpy(&c, chunks + (size_t)i * sizeof c, sizeof c);
    return c;
}

/* Why the bytes are not a share, or NULL; *h is their header and *chunks
 * where their handles start. */
static const char *malformed(const void *bytes, size_t len, share_header *h, const char **chunks) {
    if (len < sizeof *h) return "too short for an xsalloc share";
    memcpy(h, bytes, sizeof *h);
    if (h->magic != SHARE_MAGIC || h->version != SHARE_VERSION)
        return "not the bytes of xsa_ipc_share (magic or version differ)";
    if (h->n_chunks == 0 || h->n_chunks > (1u << 24) || (len - sizeof *h) / sizeof(xsa_shared_chunk) != h->n_chunks ||
        (len - sizeof *h) % sizeof(xsa_shared_chunk))
        return "its length does not match its count of handles";
    if (h->pid <= 0 || h->registry_fd < 0 || !h->registry_id) return "it names no exporting process";
    if (h->page_size == 0 || (h->page_size & (h->page_size - 1))) return "its page size is not a power of two";
    *chunks = (const char *)bytes + sizeof *h;
    uint64_t pages = 0;
    for (uint32_t i = 0; i < h->n_chunks; i++) {
        xsa_shared_chunk c = chunk_at(*chunks, i);
        if (c.fd < 0 || !c.id || c.pages == 0) return "a handle has no fd, id or pages";
        pages += c.pages;
    }
    if (pages > ((uint64_t)1 << 46) / h->page_size) return "its handles add up to more than 64 TiB";
    return NULL;
}

static const char *ptrace_scope(char *buf, size_t n) {
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, buf, n - 1) : -1;
    if (fd >= 0) close(fd);
    if (got <= 0) return "not set (no Yama)";
    buf[got] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

/* The status and sentence for a failed process_get_fds. */
static xsa_status take_failed(xsa_driver *d, xsa_cu_result r, int pid) {
    char scope[16];
    switch (r) {
    case XSA_CU_ERROR_NOT_PERMITTED:
        return xsa_fail(XSA_ERROR_NOT_SUPPORTED,
                        "xsa_ipc_open: the kernel refused pidfd_getfd(2) on process %d (EPERM): taking another "
                        "process's file descriptors needs ptrace access to it, and ptrace restrictions deny it here "
                        "(allowed: the same user with Yama ptrace_scope 0, the exporter naming this process with "
                        "prctl(PR_SET_PTRACER), or CAP_SYS_PTRACE; kernel.yama.ptrace_scope is %s)",
                        pid, ptrace_scope(scope, sizeof scope));
    case XSA_CU_ERROR_NOT_SUPPORTED:
        return xsa_fail(XSA_ERROR_NOT_SUPPORTED,
                        "xsa_ipc_open: this kernel has no pidfd_getfd(2) (ENOSYS; Linux 5.6 or later is needed)");
    case XSA_CU_ERROR_NOT_FOUND:
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_open: stale handle: process %d, which shared it, has exited", pid);
    case XSA_CU_ERROR_INVALID_HANDLE:
        return xsa_fail(XSA_ERROR_INVALID_VALUE,
                        "xsa_ipc_open: stale handle: process %d no longer holds its fds (the memory was unmapped there)",
                        pid);
    case XSA_CU_ERROR_OUT_OF_MEMORY:
        return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_ipc_open: no file descriptor left to take process %d's", pid);
    default:
        return xsa_fail(XSA_ERROR_DRIVER, "xsa_ipc_open: taking process %d's fds (pidfd_getfd) failed: %s", pid,
                        d->error_string(r));
    }
}

/* Does the exporter's registry still name every handle with its id? */
static bool all_registered(const xsa_share_view *v, const char *chunks, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        xsa_shared_chunk c = chunk_at(chunks, i);
        if (!xsa_share_view_has(v, c.fd, c.id)) return false;
    }
    return true;
}

static xsa_status stale(int pid) {
    return xsa_fail(XSA_ERROR_INVALID_VALUE,
                    "xsa_ipc_open: stale handle: process %d no longer shares this memory (the block's pages were "
                    "unmapped there: freed and released, or the process shut xsalloc down)",
                    pid);
}

/* Takes the fds of the handles from the exporter, registry-checked. */
static xsa_status take_checked(xsa_driver *d, const share_header *h, const char *chunks, int *fds) {
    int reg = -1;
    xsa_cu_result r = XSA_DRV(d, process_get_fds, h->pid, &h->registry_fd, 1, &reg);
    if (r != XSA_CU_SUCCESS) return take_failed(d, r, h->pid);
    xsa_share_view v;
    bool ok = xsa_share_view_open(&v, reg, h->registry_id);
    close(reg);
    if (!ok || !all_registered(&v, chunks, h->n_chunks)) {
        if (ok) xsa_share_view_close(&v);
        return stale(h->pid);
    }
    int *want = malloc(h->n_chunks * sizeof *want);
    if (!want) {
        xsa_share_view_close(&v);
        return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_ipc_open: out of host memory");
    }
    for (uint32_t i = 0; i < h->n_chunks; i++) want[i] = chunk_at(chunks, i).fd;
    r = XSA_DRV(d, process_get_fds, h->pid, want, (int)h->n_chunks, fds);
    free(want);
    xsa_status st = r == XSA_CU_SUCCESS ? XSA_SUCCESS : take_failed(d, r, h->pid);
    if (st == XSA_SUCCESS && !all_registered(&v, chunks, h->n_chunks)) {
        for (uint32_t i = 0; i < h->n_chunks; i++) close(fds[i]);
        st = stale(h->pid);
    }
    xsa_share_view_close(&v);
    return st;
}

xsa_status xsa_ipc_share_take(const void *bytes, size_t len, xsa_ipc_taken *out) {
    share_header h;
    const char *chunks = NULL;
    const char *why = malformed(bytes, len, &h, &chunks);
    if (why) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_open: bad handle: %s", why);
    xsa_driver *d = xsa_active_driver(); /* initialised: the caller checked the device */
    *out = (xsa_ipc_taken){.n = (int)h.n_chunks, .page_size = h.page_size};
    out->fds = malloc(h.n_chunks * sizeof *out->fds);
    out->pages = malloc(h.n_chunks * sizeof *out->pages);
    xsa_status st = out->fds && out->pages ? take_checked(d, &h, chunks, out->fds)
                                           : xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_ipc_open: out of host memory");
    if (st != XSA_SUCCESS) {
        free(out->fds);
        free(out->pages);
        *out = (xsa_ipc_taken){0};
        return st;
    }
    for (uint32_t i = 0; i < h.n_chunks; i++) out->pages[i] = chunk_at(chunks, i).pages;
    return XSA_SUCCESS;
}

void xsa_ipc_taken_close(xsa_ipc_taken *t) {
    for (int i = 0; i < t->n; i++) close(t->fds[i]);
    free(t->fds);
    free(t->pages);
    *t = (xsa_ipc_taken){0};
}
