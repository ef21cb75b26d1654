/*
 * api/ipc: importing exported blocks and opening shares, and sending
 * handles over Unix sockets (protocol and lifetime rules in xsalloc/xsalloc.h).
 *
 * Design: an import claims the handle first (state EXPORTED -> IMPORTED on
 * the shared word, so a handle imports once and a stale one is refused
 * before any driver call), then reserves a range of its own as a vmm
 * segment, imports each physical handle's fd (cuMemImportFromShareableHandle)
 * and maps them there, whole, with access for the importing device: the
 * segment code does the mapping, access and undo. A failed import ends the
 * export (CLOSED), so the exporter does not keep the block pinned for an
 * importer that has nothing. The devices granted access to the importing
 * device's memory (xsa_enable_peer_access, before or after) are granted
 * the imported pages too, as they are its own pool's. Opening a share's bytes takes the exporter's
 * fds (api/ipc_share.c) and maps them the same way; the bytes are the
 * record's key, so the same bytes on the same device map once and count
 * their opens. Imports are kept in a list under one mutex, held while a
 * share maps so that concurrent opens of it map once; they are few and not
 * on any hot path. They are not memory of a device's pool (nothing is
 * cached or split), so they use a vmm segment directly, not a pool. A close
 * that fails part-way keeps its record, set apart, for a close again.
 *
 * Sending: the struct goes as bytes, its n_handles + 1 fds (state first) as
 * SCM_RIGHTS ancillary data, in chunks of FDS_PER_MSG: the first with the
 * struct, each further one with one byte. The receiver reads exactly the
 * struct's bytes and then one byte per chunk, so it never reads into the
 * next chunk's data on a stream socket, and it replaces the fd fields.
 */
#include "api/ipc.h"
#include "api/ipc_share.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/devices.h"
#include "api/errors.h"
#include "pool/ipc_state.h"
#include "pool/peer.h"
#include "vmm/segment.h"
#include "xsalloc/xsalloc.h"

#define FDS_PER_MSG 250 /* below the kernel's SCM_MAX_FD (253) */
#define ALL_FDS (XSA_IPC_MAX_PAGES + 1)

/* An import: of a handle (xsa_ipc_import, with the state word it shares
 * with its exporter), or of a share's bytes (xsa_ipc_open, opened `opens`
 * times on `device`). */
typedef struct import {
    uintptr_t ptr;          /* what xsa_ipc_import or xsa_ipc_open returned */
    xsa_segment seg;
    xsa_ipc_state *state;   /* xsa_ipc_import's; NULL for a share */
    void *key;              /* xsa_ipc_open's: a copy of the bytes; NULL for a handle */
    size_t key_len;
    int device, opens;
    bool closing;           /* a close failed part-way: only closing again is allowed */
    struct import *next;
} import;

static pthread_mutex_t imports_lock = PTHREAD_MUTEX_INITIALIZER;
static import *imports;

/* ---- handle checks ---- */

/* Why the handle's fields are unusable, or NULL. */
static const char *malformed(const xsa_ipc_handle *h) {
    if (h->magic != XSA_IPC_MAGIC || h->version != XSA_IPC_VERSION)
        return "not an xsalloc IPC handle (magic or version differ)";
    if (h->n_pages < 1 || h->n_pages > XSA_IPC_MAX_PAGES) return "its page count is out of range";
    if (h->n_handles < 1 || h->n_handles > h->n_pages) return "its count of physical handles is out of range";
    int64_t pages = 0;
    for (int i = 0; i < h->n_handles; i++) {
        if (h->pages[i] == 0 || h->pages[i] > XSA_IPC_MAX_PAGES) return "a physical handle's page count is out of range";
        pages += h->pages[i];
    }
    if (pages != h->n_pages) return "its physical handles' pages do not add up to its page count";
    if (h->page_size == 0 || (h->page_size & (h->page_size - 1))) return "its page size is not a power of two";
    if (h->offset >= h->pages[0] * h->page_size || h->size == 0 ||
        h->size > (uint64_t)h->n_pages * h->page_size - h->offset)
        return "its offset and size do not fit its pages";
    return NULL;
}

static const char *missing_fd(const xsa_ipc_handle *h) {
    if (h->state_fd < 0) return "its state fd is closed (-1)";
    for (int i = 0; i < h->n_handles; i++)
        if (h->fds[i] < 0) return "a physical handle's fd is closed (-1)";
    return NULL;
}

/* Opens and claims the handle's shared state (EXPORTED -> IMPORTED). */
static xsa_status claim(const xsa_ipc_handle *h, xsa_ipc_state **out) {
    xsa_ipc_state *s = xsa_ipc_state_open(h->state_fd);
    if (!s)
        return xsa_fail(XSA_ERROR_INVALID_VALUE,
                        "xsa_ipc_import: the handle's state fd %d is not an export's state (%s); was the handle "
                        "received with xsa_ipc_recv, and its fds not closed?",
                        h->state_fd, strerror(errno));
    if (s->export_id != h->export_id) {
        xsa_ipc_state_unmap(s);
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_import: the handle's state fd belongs to another export");
    }
    uint32_t found = xsa_ipc_state_move(s, XSA_IPC_EXPORTED, XSA_IPC_IMPORTED);
    if (found != XSA_IPC_EXPORTED) {
        xsa_ipc_state_unmap(s);
        return xsa_fail(XSA_ERROR_INVALID_VALUE,
                        "xsa_ipc_import: stale handle: export %#llx is already %s (a handle imports once; the "
                        "exporter revokes it on xsa_ipc_revoke or xsa_shutdown)",
                        (unsigned long long)h->export_id, xsa_ipc_state_name(found));
    }
    *out = s;
    return XSA_SUCCESS;
}

/* ---- import / close ---- */

static xsa_status driver_fail(const char *fn, xsa_driver *d, const char *call, xsa_cu_result r) {
    return xsa_fail(r == XSA_CU_ERROR_OUT_OF_MEMORY ? XSA_ERROR_OUT_OF_MEMORY : XSA_ERROR_DRIVER,
                    "%s: %s failed: %s (CUresult %d)", fn, call, d->error_string(r), r);
}

/* Imports fds[0..n) (handles of pages[i] pages) and maps them in order
 * into seg (initialised, nothing mapped). The fds stay the caller's. */
static xsa_status map_handles(const char *fn, xsa_driver *d, xsa_segment *seg, const int *fds, const uint32_t *pages,
                              size_t n, int device) {
    xsa_chunk *chunks = calloc(n, sizeof *chunks);
    if (!chunks) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    size_t got = 0, total = 0;
    xsa_cu_result r = XSA_CU_SUCCESS;
    while (got < n && (r = XSA_DRV(d, mem_import_fd, &chunks[got].handle, fds[got], device)) == XSA_CU_SUCCESS) {
        chunks[got].pages = pages[got];
        total += chunks[got++].pages;
    }
    const char *call = "cuMemImportFromShareableHandle";
    if (r == XSA_CU_SUCCESS) {
        call = "mapping the pages (cuMemMap/cuMemSetAccess)";
        r = xsa_segment_map_chunks(seg, 0, total, chunks, n, 0);
    }
    if (r != XSA_CU_SUCCESS) /* else the segment owns the handles */
        for (size_t i = 0; i < got; i++) XSA_DRV(d, mem_release, chunks[i].handle);
    free(chunks);
    return r == XSA_CU_SUCCESS ? XSA_SUCCESS : driver_fail(fn, d, call, r);
}

/* Adds the devices granted access to `device`'s memory so far
 * (xsa_enable_peer_access, peer_access:True; its pool is made if need be)
 * to seg's access list, before anything is mapped: the import's pages are
 * mapped with access for them too. */
static xsa_status add_device_peers(const char *fn, int device, xsa_segment *seg) {
    int peers[XSA_SEGMENT_MAX_ACCESS - 1], n;
    xsa_pool *p;
    xsa_status st = xsa_api_lock(fn, device, true, &p);
    if (st != XSA_SUCCESS) return st;
    n = xsa_pool_peers(p, peers);
    xsa_api_unlock(device);
    for (int i = 0; i < n; i++) {
        xsa_cu_result r = xsa_segment_add_access(seg, peers[i]); /* nothing mapped: no driver call */
        if (r != XSA_CU_SUCCESS) return driver_fail(fn, seg->drv, "cuMemSetAccess", r);
    }
    return XSA_SUCCESS;
}

/* Reserves a range of `pages` pages of page_size bytes and maps the
 * handles of fds there for `device` and its peers (see map_handles). */
static xsa_status map_import(const char *fn, size_t pages, size_t page_size, const int *fds,
                             const uint32_t *chunk_pages, size_t n, int device, xsa_segment *seg) {
    xsa_driver *d = xsa_active_driver();
    xsa_cu_result r = xsa_segment_init(seg, d, device, pages * page_size);
    if (r != XSA_CU_SUCCESS) return driver_fail(fn, d, "cuMemAddressReserve", r);
    xsa_status st = XSA_SUCCESS;
    if (seg->page_size != page_size || seg->max_pages != pages)
        st = xsa_fail(XSA_ERROR_INVALID_VALUE, "%s: the handle's pages are %zu bytes but device %d maps pages of %zu bytes",
                      fn, page_size, device, seg->page_size);
    if (st == XSA_SUCCESS) st = add_device_peers(fn, device, seg);
    if (st == XSA_SUCCESS) st = map_handles(fn, d, seg, fds, chunk_pages, n, device);
    if (st != XSA_SUCCESS) xsa_segment_destroy(seg);
    return st;
}

static void link_import(import *im) {
    im->next = imports;
    imports = im;
}

xsa_status xsa_ipc_import(const xsa_ipc_handle *handle, int device, void **ptr) {
    if (!handle || !ptr) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_import: handle or ptr is NULL");
    *ptr = NULL;
    const char *why = malformed(handle);
    if (!why) why = missing_fd(handle);
    if (why) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_import: bad handle: %s", why);
    xsa_status st = xsa_api_check_device("xsa_ipc_import", device);
    if (st != XSA_SUCCESS) return st;
    import *im = calloc(1, sizeof *im);
    if (!im) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_ipc_import: out of host memory");
    if ((st = claim(handle, &im->state)) == XSA_SUCCESS &&
        (st = map_import("xsa_ipc_import", (size_t)handle->n_pages, handle->page_size, handle->fds, handle->pages,
                         (size_t)handle->n_handles, device, &im->seg)) != XSA_SUCCESS) {
        /* The importer has nothing: the export is over for the exporter. */
        xsa_ipc_state_move(im->state, XSA_IPC_IMPORTED, XSA_IPC_CLOSED);
        xsa_ipc_state_unmap(im->state);
    }
    if (st != XSA_SUCCESS) {
        free(im);
        return st;
    }
    im->ptr = (uintptr_t)im->seg.base + handle->offset;
    im->device = device;
    im->opens = 1;
    pthread_mutex_lock(&imports_lock);
    link_import(im);
    pthread_mutex_unlock(&imports_lock);
    *ptr = (void *)im->ptr;
    return xsa_ok();
}

/* The open share of these bytes on `device`, or NULL. */
static import *find_share(const void *bytes, size_t len, int device) {
    for (import *im = imports; im; im = im->next)
        if (im->key && !im->closing && im->device == device && im->key_len == len && memcmp(im->key, bytes, len) == 0)
            return im;
    return NULL;
}

/* Takes and maps the share of `bytes` on `device`: a new import record. */
static xsa_status open_share(const void *bytes, size_t len, int device, import **out) {
    import *im = calloc(1, sizeof *im);
    void *key = malloc(len);
    if (!im || !key) {
        free(im);
        free(key);
        return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_ipc_open: out of host memory");
    }
    xsa_ipc_taken t;
    xsa_status st = xsa_ipc_share_take(bytes, len, &t);
    if (st == XSA_SUCCESS) {
        size_t pages = 0;
        for (int i = 0; i < t.n; i++) pages += t.pages[i];
        st = map_import("xsa_ipc_open", pages, t.page_size, t.fds, t.pages, (size_t)t.n, device, &im->seg);
        xsa_ipc_taken_close(&t); /* the driver holds the handles now */
    }
    if (st != XSA_SUCCESS) {
        free(im);
        free(key);
        return st;
    }
    memcpy(key, bytes, len);
    *im = (import){.ptr = (uintptr_t)im->seg.base, .seg = im->seg, .key = key, .key_len = len, .device = device,
                   .opens = 1};
    *out = im;
    return XSA_SUCCESS;
}

xsa_status xsa_ipc_open(const void *bytes, size_t len, int device, void **base) {
    if (!bytes || !base) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_open: bytes or base is NULL");
    *base = NULL;
    xsa_status st = xsa_api_check_device("xsa_ipc_open", device);
    if (st != XSA_SUCCESS) return st;
    /* Held while mapping, so that two threads opening one share map it once. */
    pthread_mutex_lock(&imports_lock);
    import *im = find_share(bytes, len, device);
    if (im)
        im->opens++;
    else if ((st = open_share(bytes, len, device, &im)) == XSA_SUCCESS)
        link_import(im);
    if (im) *base = (void *)im->ptr;
    pthread_mutex_unlock(&imports_lock);
    return st == XSA_SUCCESS ? xsa_ok() : st;
}

xsa_status xsa_ipc_grant_peer(int device, int peer) {
    xsa_status st = XSA_SUCCESS;
    pthread_mutex_lock(&imports_lock);
    for (import *im = imports; im && st == XSA_SUCCESS; im = im->next) {
        if (im->device != device || im->closing) continue;
        xsa_cu_result r = xsa_segment_add_access(&im->seg, peer);
        if (r != XSA_CU_SUCCESS) st = driver_fail("xsa_enable_peer_access", im->seg.drv, "cuMemSetAccess on imported memory", r);
    }
    pthread_mutex_unlock(&imports_lock);
    return st;
}

/* Frees an import's record (its mapping is gone or left to the driver). */
static void forget_import(import *im) {
    if (im->state) xsa_ipc_state_unmap(im->state);
    free(im->key);
    free(im);
}

/* Unmaps an import and frees its record; on a driver error nothing but
 * some of its mapping is gone, and it can be closed again. */
static xsa_cu_result close_import(import *im) {
    xsa_cu_result r = xsa_segment_destroy(&im->seg);
    if (r != XSA_CU_SUCCESS) return r;
    /* After the unmap: the exporter may reuse the pages once it reads this. */
    if (im->state) xsa_ipc_state_move(im->state, XSA_IPC_IMPORTED, XSA_IPC_CLOSED);
    forget_import(im);
    return XSA_CU_SUCCESS;
}

xsa_status xsa_ipc_close(void *ptr) {
    pthread_mutex_lock(&imports_lock);
    import **link = &imports;
    while (*link && (*link)->ptr != (uintptr_t)ptr) link = &(*link)->next;
    import *im = *link;
    bool last = im && --im->opens == 0;
    if (last) *link = im->next;
    pthread_mutex_unlock(&imports_lock);
    if (!im)
        return xsa_fail(XSA_ERROR_INVALID_POINTER,
                        "xsa_ipc_close(%p): not a pointer returned by xsa_ipc_import or xsa_ipc_open (or already closed)", ptr);
    xsa_cu_result r = last ? close_import(im) : XSA_CU_SUCCESS;
    if (r == XSA_CU_SUCCESS) return xsa_ok();
    pthread_mutex_lock(&imports_lock);
    im->opens = 1;
    im->closing = true;
    link_import(im);
    pthread_mutex_unlock(&imports_lock);
    /* Always a driver error, the driver's out of memory too: closing frees,
     * and the caller's remedy is to close again, not to free memory. */
    return xsa_fail(XSA_ERROR_DRIVER, "xsa_ipc_close: unmapping (cuMemUnmap/cuMemRelease/cuMemAddressFree; close again) "
                    "failed: %s (CUresult %d)", im->seg.drv->error_string(r), r);
}

void xsa_ipc_close_all(void) {
    pthread_mutex_lock(&imports_lock);
    import *all = imports;
    imports = NULL;
    pthread_mutex_unlock(&imports_lock);
    while (all) {
        import *next = all->next;
        if (close_import(all) != XSA_CU_SUCCESS) forget_import(all); /* the driver keeps it */
        all = next;
    }
}

/* One import's record against its mapping; 1, or 0 with err filled. A
 * close that failed part-way may have unmapped some of it. */
static int check_import(const import *im, char *err, size_t errlen) {
    uintptr_t base = (uintptr_t)im->seg.base;
    bool whole = !im->closing;
    const char *why = im->opens < 1                    ? "it is open no time"
                      : !im->state == !im->key         ? "it has both or neither of a state word and bytes"
                      : im->state && im->opens != 1    ? "a handle's import is open more than once"
                      : im->key && im->ptr != base     ? "a share's pointer is not its range's start"
                      : whole && im->seg.mapped_pages != im->seg.max_pages ? "some of its pages are not mapped"
                      : whole && im->ptr - base >= im->seg.chunk_pages[0] * im->seg.page_size
                          ? "its pointer is past its first physical handle"
                          : NULL;
    if (!why) return xsa_segment_check(&im->seg, err, errlen);
    snprintf(err, errlen, "import %#lx (open %d times): %s", (unsigned long)im->ptr, im->opens, why);
    return 0;
}

int xsa_ipc_check(char *err, size_t errlen) {
    pthread_mutex_lock(&imports_lock);
    int ok = 1;
    for (const import *im = imports; im && ok; im = im->next) ok = check_import(im, err, errlen);
    pthread_mutex_unlock(&imports_lock);
    return ok;
}

void xsa_ipc_handle_close(xsa_ipc_handle *h) {
    if (!h) return;
    if (h->state_fd >= 0) close(h->state_fd);
    h->state_fd = -1;
    for (int i = 0; i < XSA_IPC_MAX_PAGES; i++) {
        if (h->fds[i] >= 0) close(h->fds[i]);
        h->fds[i] = -1;
    }
}

/* ---- sockets ---- */

static xsa_status socket_fail(const char *fn, const char *what) {
    return xsa_fail(XSA_ERROR_INVALID_VALUE, "%s: %s: %s", fn, what, strerror(errno));
}

/* One sendmsg of up to len bytes with nfds fds; returns bytes sent or -1. */
static ssize_t send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds) {
    char control[CMSG_SPACE(FDS_PER_MSG * sizeof(int))];
    struct iovec iov = {(void *)buf, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        memset(control, 0, sizeof control);
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    ssize_t n;
    do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

xsa_status xsa_ipc_send(int sock, const xsa_ipc_handle *h) {
    if (!h || malformed(h) || missing_fd(h))
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_send: bad handle: %s",
                        !h ? "NULL" : malformed(h) ? malformed(h) : missing_fd(h));
    int all[ALL_FDS];
    int total = h->n_handles + 1;
    all[0] = h->state_fd;
    memcpy(all + 1, h->fds, (size_t)h->n_handles * sizeof(int));
    const char *bytes = (const char *)h;
    size_t sent = 0;
    int fds_sent = total < FDS_PER_MSG ? total : FDS_PER_MSG;
    /* The fds go with the first bytes; a short send continues without. */
    for (int nfds = fds_sent; sent < sizeof *h; nfds = 0) {
        ssize_t n = send_with_fds(sock, bytes + sent, sizeof *h - sent, all, nfds);
        if (n <= 0) return socket_fail("xsa_ipc_send", "sendmsg");
        sent += (size_t)n;
    }
    for (; fds_sent < total; fds_sent += FDS_PER_MSG) {
        int nfds = total - fds_sent < FDS_PER_MSG ? total - fds_sent : FDS_PER_MSG;
        if (send_with_fds(sock, "F", 1, all + fds_sent, nfds) != 1) return socket_fail("xsa_ipc_send", "sendmsg");
    }
    return xsa_ok();
}

/* One recvmsg of up to len bytes; appends the fds it carries to fds[*nfds]
 * (closing those beyond ALL_FDS). Returns bytes read, 0 at end, -1 on error
 * (errno EMSGSIZE if fds were cut off). */
static ssize_t recv_with_fds(int sock, void *buf, size_t len, int *fds, int *nfds) {
    char control[CMSG_SPACE(FDS_PER_MSG * sizeof(int))];
    struct iovec iov = {buf, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    ssize_t n;
    do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int got[FDS_PER_MSG];
        memcpy(got, CMSG_DATA(c), k * sizeof(int));
        for (size_t i = 0; i < k; i++) {
            if (*nfds < ALL_FDS) fds[(*nfds)++] = got[i];
            else close(got[i]);
        }
    }
    if (msg.msg_flags & MSG_CTRUNC) {
        errno = EMSGSIZE;
        return -1;
    }
    return n;
}

/* Reads the struct and its fds into h and fds[]; XSA_SUCCESS or an error
 * (the fds received so far are in fds[0..*nfds) either way). */
static xsa_status recv_all(int sock, xsa_ipc_handle *h, int *fds, int *nfds) {
    char *bytes = (char *)h;
    for (size_t got = 0; got < sizeof *h;) {
        ssize_t n = recv_with_fds(sock, bytes + got, sizeof *h - got, fds, nfds);
        if (n <= 0) return n == 0 ? xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_recv: the socket closed mid-handle")
                                  : socket_fail("xsa_ipc_recv", "recvmsg");
        got += (size_t)n;
    }
    const char *why = malformed(h);
    if (why) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_recv: bad handle: %s", why);
    while (*nfds < h->n_handles + 1) {
        char byte;
        ssize_t n = recv_with_fds(sock, &byte, 1, fds, nfds);
        if (n <= 0) return n == 0 ? xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_recv: the socket closed before all fds came")
                                  : socket_fail("xsa_ipc_recv", "recvmsg");
    }
    if (*nfds != h->n_handles + 1)
        return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_recv: %d fds came for a handle of %d physical handles", *nfds,
                        h->n_handles);
    return XSA_SUCCESS;
}

xsa_status xsa_ipc_recv(int sock, xsa_ipc_handle *h) {
    if (!h) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_ipc_recv: handle is NULL");
    int fds[ALL_FDS], nfds = 0;
    xsa_status st = recv_all(sock, h, fds, &nfds);
    if (st != XSA_SUCCESS) {
        while (nfds > 0) close(fds[--nfds]);
        /* The fd fields hold the sender's numbers: never close those. */
        h->state_fd = -1;
        for (int i = 0; i < XSA_IPC_MAX_PAGES; i++) h->fds[i] = -1;
        return st;
    }
    h->state_fd = fds[0];
    for (int i = 0; i < XSA_IPC_MAX_PAGES; i++) h->fds[i] = i < h->n_handles ? fds[i + 1] : -1;
    return xsa_ok();
}
