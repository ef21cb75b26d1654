/*
 * vmm/segment_job: driver work on an expandable segment's pages made by
 * another thread than the segment's owner, outside the owner's lock (the
 * API's helper thread, api/helper.h).
 *
 * Design: a job has three steps. begin, under the owner's lock, copies
 * what the driver calls need (addresses, handles, the access list) while
 * the owner keeps the pages out of everyone's reach (pool/jobs.c: a block
 * held by the helper); run makes the driver calls on those copies only,
 * reading and writing no record of the segment, so the owner keeps using
 * the segment meanwhile (the driver serializes its calls, and one page's
 * mapping does not touch another's); finish, under the owner's lock
 * again, records the outcome. Three kinds:
 *  - MAP_NEW: new chunks at unmapped pages, created, mapped and granted
 *    (one cuMemSetAccess over the run), as xsa_segment_map_chunks does;
 *    a failure undoes what run did, so the pages stay unmapped;
 *  - UNMAP_RELEASE: mapped whole chunks unmapped (one cuMemUnmap) and
 *    their handles released; a refused unmap changes nothing, a refused
 *    release keeps the handle for the segment's next unmap or destroy;
 *  - UNMAP_MOVED: the old mapping of chunks that another segment maps now
 *    (page recycling's drains): unmapped, handles forgotten.
 * A peer granted access to the segment between begin and finish is
 * granted on a MAP_NEW's pages at finish (a driver call under the lock;
 * xsa_segment_add_access sees only recorded pages). An UNMAP_* job marks
 * its pages leaving at begin, so such a grant skips them (the driver may
 * have unmapped them already); they stay so until their records go
 * (forget, or the owner's own unmap of a drain it takes back later), or,
 * if the unmap failed, until finish, which grants them then.
 */
#ifndef XSA_VMM_SEGMENT_JOB_H
#define XSA_VMM_SEGMENT_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/driver.h"
#include "vmm/segment.h"

typedef enum { XSA_SEG_JOB_MAP_NEW, XSA_SEG_JOB_UNMAP_RELEASE, XSA_SEG_JOB_UNMAP_MOVED } xsa_seg_job_kind;

typedef struct xsa_segment_job {
    xsa_seg_job_kind kind;
    xsa_driver *drv;
    int device;
    bool exportable;
    int access[XSA_SEGMENT_MAX_ACCESS];
    int n_access;
    size_t first, pages, page_size;
    xsa_devptr addr;          /* page `first`'s address */
    xsa_chunk *chunks;        /* MAP_NEW: made by run; UNMAP_*: the chunks there, copied by begin */
    size_t n_chunks, chunk_pages;
    bool *released;           /* UNMAP_RELEASE: chunk i's handle was released */
    bool unmapped;            /* UNMAP_*: run's cuMemUnmap succeeded */
    xsa_cu_result result;     /* run's first failure, or success */
    const char *call;         /* the failed call ("cuMemUnmap", ...) */
} xsa_segment_job;

/* Prepares a job on pages [first, first+n) of s: MAP_NEW needs them
 * unmapped (chunks of chunk_pages pages, the last one smaller), the
 * others mapped whole chunks. INVALID_VALUE if they are not, OUT_OF_MEMORY
 * without host memory; nothing is held then. */
xsa_cu_result xsa_segment_job_begin(xsa_segment *s, xsa_seg_job_kind kind, size_t first, size_t n,
                                    size_t chunk_pages, xsa_segment_job *job);
/* The driver calls, on the job's copies only: any thread, no lock. */
void xsa_segment_job_run(xsa_segment_job *job);
/* Records run's outcome in s (design above) and frees the job's arrays;
 * returns the job's result (a grant to a peer added meanwhile may fail
 * it: the pages are then unmapped again, as run's own failure leaves them). */
xsa_cu_result xsa_segment_job_finish(xsa_segment *s, xsa_segment_job *job);
/* Frees the job's arrays only: the caller records the outcome itself,
 * later (an UNMAP_MOVED whose pages the owner forgets when it takes the
 * range back: xsa_segment_forget). Returns the job's result. */
xsa_cu_result xsa_segment_job_drop(xsa_segment_job *job);

#endif
