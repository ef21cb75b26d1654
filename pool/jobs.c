/*
 * pool/jobs: the helper thread's work on a pool (api/helper.c runs it):
 * the driver calls that would otherwise sit on the allocation path or
 * never happen, made outside the device's lock.
 *
 * Design: three kinds of job, each one segment job (vmm/segment_job.h) on
 * a block the pool holds meanwhile (block->held: never chosen, merged or
 * destroyed with its segment until the job commits):
 *  - RETIRE: the old address of pages page recycling moved, once its
 *    fence completed (pool/recycle.c), unmapped: the growth that moved
 *    them no longer polls and unmaps old addresses itself;
 *  - DECAY: free pages unused for page_decay_ms, unmapped and released
 *    (pool/decay.c);
 *  - READY: new pages mapped where a growth ended (pool/ready.c).
 * A round plans with the device's lock held (event queries, choices, the
 * blocks held: microseconds), runs the jobs without it (cuMemCreate,
 * cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease: tens to hundreds of
 * microseconds each while the GPU is busy, no longer on the caller's
 * thread), and commits with it again. A job that fails leaves its pages
 * as they were (mapped free memory, a drain, unmapped space: nothing is
 * lost) and its error becomes the pool's notice, which the next malloc or
 * empty_cache of the device returns (xsa_pool_attend), once; an
 * out-of-memory readying is a guess gone wrong, not an error. No event is
 * queried during a capture. A round does at most JOBS_PER_ROUND jobs and
 * asks for the next at once when there were more.
 */
#include "pool/jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/block.h"
#include "pool/core.h"
#include "pool/decay.h"
#include "pool/ipc.h"
#include "pool/ready.h"
#include "pool/recycle.h"
#include "pool/state.h"

#define JOBS_PER_ROUND 32
#define DRAIN_POLL_NS 2000000ull /* drains whose fence is not done are looked at again after this */

void xsa_pool_set_helper(xsa_pool *p, void (*wake)(void *ctx, int device), void *ctx) {
    p->helper.wake = wake;
    p->helper.ctx = ctx;
}

/* Drains the helper would look at: some not held, no capture under way. */
static bool drains_to_poll(const xsa_pool *p) {
    if (!p->opt.helper_thread || p->capturing) return false;
    for (const xsa_drain *d = p->drains; d; d = d->next)
        if (!d->held && !d->unmapped) return true;
    return false;
}

uint64_t xsa_pool_jobs_due(const xsa_pool *p) {
    if (p->opt.helper_thread && p->helper.wanted) return 0;
    uint64_t due = xsa_decay_due(p);
    if (drains_to_poll(p) && p->helper.polled + DRAIN_POLL_NS < due) due = p->helper.polled + DRAIN_POLL_NS;
    return due;
}

/* The pool's notice: the first failure not yet reported. */
static void notice(xsa_pool *p, const char *what, xsa_cu_result r) {
    if (p->helper.notice != XSA_POOL_OK) return;
    p->helper.notice = r == XSA_CU_ERROR_OUT_OF_MEMORY ? XSA_POOL_OOM : XSA_POOL_DRIVER_ERROR;
    snprintf(p->helper.notice_msg, sizeof p->helper.notice_msg,
             "device %d: the helper thread's %s failed: %s (CUresult %d); the pages stay as they were", p->device,
             what, p->drv->error_string(r), r);
    xsa_pool_update_attend(p);
}

static xsa_pool_job *add(xsa_pool_jobs *out, xsa_job_kind kind, xsa_block *b) {
    xsa_pool_job *j = &out->v[out->n++];
    memset(j, 0, sizeof *j);
    j->kind = kind;
    j->block = b;
    return j;
}

/* Prepares j's segment job on its block's pages. */
static void begin(xsa_pool *p, xsa_pool_job *j, xsa_seg_job_kind kind, size_t chunk_pages) {
    xsa_block *b = j->block;
    size_t first = (b->ptr - b->seg->base) / p->page_size, n = b->size / p->page_size;
    j->begun = xsa_segment_job_begin(&b->seg->vm, kind, first, n, chunk_pages, &j->seg) == XSA_CU_SUCCESS;
}

void xsa_pool_jobs_plan(xsa_pool *p, uint64_t now, xsa_pool_jobs *out) {
    out->n = 0;
    out->v = malloc(JOBS_PER_ROUND * sizeof *out->v);
    if (!out->v) return;
    bool helper = p->opt.helper_thread;
    p->helper.wanted = false;
    p->helper.polled = now;
    xsa_cu_result failure = XSA_CU_SUCCESS;
    xsa_drain *drains[JOBS_PER_ROUND];
    size_t n = helper && !p->capturing ? xsa_recycle_hold_done(p, drains, JOBS_PER_ROUND, &failure) : 0;
    for (size_t i = 0; i < n; i++) {
        xsa_pool_job *j = add(out, XSA_JOB_RETIRE, drains[i]->block);
        j->drain = drains[i];
        begin(p, j, XSA_SEG_JOB_UNMAP_MOVED, 0);
    }
    xsa_block *blocks[JOBS_PER_ROUND];
    n = xsa_decay_round(p, now, blocks, JOBS_PER_ROUND - out->n, &failure);
    for (size_t i = 0; i < n; i++) begin(p, add(out, XSA_JOB_DECAY, blocks[i]), XSA_SEG_JOB_UNMAP_RELEASE, 0);
    size_t chunk_pages[JOBS_PER_ROUND];
    n = helper ? xsa_ready_hold(p, blocks, chunk_pages, JOBS_PER_ROUND - out->n) : 0;
    for (size_t i = 0; i < n; i++) {
        xsa_pool_job *j = add(out, XSA_JOB_READY, blocks[i]);
        j->emptied = p->helper.emptied;
        begin(p, j, XSA_SEG_JOB_MAP_NEW, chunk_pages[i]);
    }
    if (failure != XSA_CU_SUCCESS) notice(p, "cuEventQuery/cuEventRecord (a fence of old pages)", failure);
    if (out->n == JOBS_PER_ROUND) p->helper.wanted = true; /* more may wait */
    p->helper.jobs += out->n;
}

void xsa_pool_jobs_run(xsa_pool_jobs *jobs) {
    for (size_t i = 0; i < jobs->n; i++)
        if (jobs->v[i].begun) xsa_segment_job_run(&jobs->v[i].seg);
}

void xsa_pool_jobs_commit(xsa_pool *p, xsa_pool_jobs *jobs) {
    for (size_t i = 0; i < jobs->n; i++) {
        xsa_pool_job *j = &jobs->v[i];
        /* A retired drain's pages are forgotten when the pool takes the
         * range back (pool/recycle.c). */
        xsa_cu_result r = !j->begun                     ? XSA_CU_ERROR_OUT_OF_MEMORY
                          : j->kind == XSA_JOB_RETIRE ? xsa_segment_job_drop(&j->seg)
                                                        : xsa_segment_job_finish(&j->block->seg->vm, &j->seg);
        switch (j->kind) {
        case XSA_JOB_RETIRE: xsa_recycle_retired(j->drain, j->seg.unmapped); break;
        case XSA_JOB_DECAY: xsa_decay_released(p, j->block, j->seg.unmapped); break;
        case XSA_JOB_READY: xsa_ready_done(p, j->block, r == XSA_CU_SUCCESS, j->emptied != p->helper.emptied); break;
        }
        bool guess = j->kind == XSA_JOB_READY && r == XSA_CU_ERROR_OUT_OF_MEMORY;
        if (j->begun && r != XSA_CU_SUCCESS && !guess) notice(p, j->seg.call, r);
    }
    p->helper.jobs -= jobs->n;
    free(jobs->v);
    jobs->v = NULL;
    jobs->n = 0;
}

void xsa_pool_jobs_failed(xsa_pool *p, const char *what, xsa_cu_result r) { notice(p, what, r); }

xsa_pool_status xsa_pool_attend(xsa_pool *p, char *err, size_t errlen) {
    if (p->exports) xsa_ipc_poll(p);
    xsa_pool_status st = p->helper.notice;
    if (st != XSA_POOL_OK) {
        snprintf(err, errlen, "%s", p->helper.notice_msg);
        p->helper.notice = XSA_POOL_OK;
    }
    xsa_pool_update_attend(p);
    return st;
}
