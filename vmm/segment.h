/*
 * vmm/segment: an expandable segment, one reserved virtual range whose
 * granularity-sized pages are mapped and unmapped on demand.
 *
 * Design: the range is reserved once, as large as the device's memory, so a
 * segment never moves and can grow to any size the device allows. Pages
 * are backed by chunks: one physical handle (cuMemCreate) of one or more
 * granules, mapped with one cuMemMap, since the driver maps and unmaps
 * whole handles only. Every call costs tens to hundreds of microseconds
 * while the GPU is busy, so a growth may create its new pages as few
 * chunks (the caller says how many pages at most each: the pool's rule is
 * in pool/recycle.c), while one-page chunks keep every page free to move
 * on its own. Access is granted once per contiguous run of
 * newly mapped pages, and a run of whole chunks is unmapped with one
 * cuMemUnmap. A map or unmap that fails part-way undoes what it did and
 * leaves the segment as it was. Handles can also be passed in and taken
 * out (page recycling moves chunks from one segment to another), or be
 * mapped in two segments at once while a chunk moves in stream order: the
 * old mapping is then unmapped without releasing the handle. A handle the
 * driver refuses to release stays with the segment and is released again
 * by the next unmap or by destroy, so a failed cuMemRelease never leaks
 * device memory.
 * Pages created while `exportable` is set can be exported as POSIX file
 * descriptors (IPC); a chunk shared with other processes by fd number
 * (vmm/share.h) keeps its fd while it stays mapped here, and any unmap of
 * the chunk closes it. Access goes to the segment's device and to every
 * peer added with xsa_segment_add_access, on each newly mapped run.
 * Not thread safe: the owning pool serializes calls.
 */
#ifndef XSA_VMM_SEGMENT_H
#define XSA_VMM_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/driver.h"
#include "vmm/share.h"

#define XSA_SEGMENT_MAX_ACCESS 16 /* the device and up to 15 peers: a 16-GPU node */
#define XSA_NO_HANDLE ((xsa_mem_handle)0)

/* Pages backed by one physical handle, mapped with one cuMemMap (the
 * driver maps and unmaps whole handles only). */
typedef struct xsa_chunk {
    xsa_mem_handle handle;
    size_t pages;
} xsa_chunk;

typedef struct xsa_segment {
    xsa_driver *drv;
    int device;
    xsa_devptr base;
    size_t page_size;
    size_t max_pages;        /* reserved size / page_size */
    size_t mapped_pages;     /* pages with a handle */
    xsa_mem_handle *handles; /* [max_pages]; XSA_NO_HANDLE where unmapped */
    uint32_t *chunk_pages;   /* [max_pages]: pages of the chunk starting there; 0 elsewhere */
    int access[XSA_SEGMENT_MAX_ACCESS]; /* devices granted read/write; access[0] == device */
    int n_access;
    bool exportable;         /* new pages are created exportable (set after init) */
    int *share_fds;          /* [max_pages] once a chunk is shared: its fd at its first page, else -1 */
    xsa_mem_handle *unreleased; /* unmapped handles whose cuMemRelease failed */
    size_t n_unreleased;
    uint8_t *leaving;        /* [max_pages] once a job unmapped outside the owner's lock (vmm/segment_job.h):
                              * 1 on mapped pages it may have unmapped, until their records go */
} xsa_segment;

/* Reserves max(reserve_bytes, one page) rounded up to pages of the device's
 * granularity. */
xsa_cu_result xsa_segment_init(xsa_segment *s, xsa_driver *drv, int device, size_t reserve_bytes);

/* Unmaps and releases every mapped page and frees the reservation. If a
 * handle cannot be released or the reservation freed, returns the driver's
 * error and leaves the segment to be destroyed again. */
xsa_cu_result xsa_segment_destroy(xsa_segment *s);

/* Releases a handle the caller owns (not mapped); if the driver refuses,
 * the segment keeps it for its next unmap or destroy. */
void xsa_segment_release_handle(xsa_segment *s, xsa_mem_handle h);

/* Maps pages [first, first+n), all currently unmapped, as one-page chunks.
 * Page first+i gets a new handle when given is NULL or given[i] is
 * XSA_NO_HANDLE, else given[i] (which stays the caller's if the call
 * fails). One cuMemSetAccess covers the whole run. */
xsa_cu_result xsa_segment_map(xsa_segment *s, size_t first, size_t n, const xsa_mem_handle *given);

/* Maps pages [first, first+n), all unmapped: first the given chunks in
 * order (their handles stay the caller's if the call fails), then new
 * chunks of new_pages pages (0 counts as 1) for the rest, the last one
 * smaller if they do not divide it. */
xsa_cu_result xsa_segment_map_chunks(xsa_segment *s, size_t first, size_t n, const xsa_chunk *given,
                                     size_t n_given, size_t new_pages);

/* The chunk holding mapped page `page`: its first page in *start, its size. */
size_t xsa_segment_chunk(const xsa_segment *s, size_t page, size_t *start);

/* Unmaps pages [first, first+n), whole mapped chunks, with one cuMemUnmap.
 * With taken == NULL each chunk's handle is released; otherwise page i's
 * handle is stored in taken[i] and the caller owns them. Pages that are not
 * whole chunks are refused. On failure nothing changes. */
xsa_cu_result xsa_segment_unmap(xsa_segment *s, size_t first, size_t n, xsa_mem_handle *taken);

/* Unmaps pages [first, first+n), whole chunks, whose handles were given to
 * another segment that maps them too (a page moved in stream order): the
 * handles are forgotten, not released. On failure nothing changes. */
xsa_cu_result xsa_segment_unmap_moved(xsa_segment *s, size_t first, size_t n);

/* Drops the handles of pages [first, first+n) without a driver call: for a
 * teardown after xsa_segment_unmap_moved was refused, and for pages
 * another thread unmapped (vmm/segment_job.h). */
void xsa_segment_forget(xsa_segment *s, size_t first, size_t n);

/* Records chunks[0..n) as mapped at pages [first, ...), all unmapped in
 * the records, without a driver call: pages another thread mapped and
 * granted (vmm/segment_job.h). */
void xsa_segment_adopt(xsa_segment *s, size_t first, const xsa_chunk *chunks, size_t n);

/* Keeps handle h, unmapped, whose cuMemRelease failed: released again by
 * the next unmap or by destroy. */
void xsa_segment_keep_unreleased(xsa_segment *s, xsa_mem_handle h);

/* The fd and id of the shared export of the chunk that starts at mapped
 * page `start` (xsa_share_export on first use, then the same until the
 * chunk is unmapped). */
xsa_cu_result xsa_segment_share(xsa_segment *s, size_t start, int *fd, uint64_t *id);

/* Grants `peer` read/write on every mapped page now and on pages mapped
 * later; pages a job is unmapping or has unmapped (leaving) are skipped:
 * the driver may have them no more, and the job grants the peer if its
 * unmap fails. */
xsa_cu_result xsa_segment_add_access(xsa_segment *s, int peer);

static inline bool xsa_segment_page_mapped(const xsa_segment *s, size_t page) {
    return s->handles[page] != XSA_NO_HANDLE;
}
static inline bool xsa_segment_page_leaving(const xsa_segment *s, size_t page) {
    return s->leaving && s->leaving[page];
}
static inline xsa_devptr xsa_segment_page_addr(const xsa_segment *s, size_t page) {
    return s->base + page * s->page_size;
}
static inline size_t xsa_segment_mapped_bytes(const xsa_segment *s) {
    return s->mapped_pages * s->page_size;
}

/* Invariant checker: mapped_pages equals the count of handles, chunks are
 * whole, shared fds sit at mapped chunk starts and are registered, only
 * mapped pages are leaving, the access list is sane. Returns 1 if consistent, else 0 with a sentence in err. */
int xsa_segment_check(const xsa_segment *s, char *err, size_t errlen);

#endif
