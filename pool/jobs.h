/*
 * pool/jobs: the helper thread's work on a pool (design in jobs.c).
 */
#ifndef XSA_POOL_JOBS_H
#define XSA_POOL_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"
#include "vmm/segment_job.h"

typedef enum { XSA_JOB_RETIRE, XSA_JOB_DECAY, XSA_JOB_READY } xsa_job_kind;

typedef struct xsa_pool_job {
    xsa_job_kind kind;
    struct xsa_block *block;  /* the held block */
    struct xsa_drain *drain;  /* RETIRE: its drain */
    bool begun;               /* the segment job was prepared (else it failed to be, out of host memory) */
    uint64_t emptied;         /* READY: the pool's count of caches given back when it was planned */
    xsa_segment_job seg;
} xsa_pool_job;

typedef struct xsa_pool_jobs {
    xsa_pool_job *v;
    size_t n;
} xsa_pool_jobs;

/* The pool calls wake(ctx, device), with the device's lock held, when
 * work for the helper thread appears (it must not block or call
 * xsalloc). */
void xsa_pool_set_helper(xsa_pool *p, void (*wake)(void *ctx, int device), void *ctx);

/* When the pool wants the helper's next round, in ns of the helper's
 * clock (0: now; UINT64_MAX: only when woken). */
uint64_t xsa_pool_jobs_due(const xsa_pool *p);

/* A round of the helper at `now`, in three steps: plan with the device's
 * lock held (bookkeeping, and the driver work to do, its blocks held),
 * run without it (the driver calls), commit with it again (the outcome;
 * a failure becomes the pool's notice). Plan fills out (nothing if out
 * of host memory); commit frees it. */
void xsa_pool_jobs_plan(xsa_pool *p, uint64_t now, xsa_pool_jobs *out);
void xsa_pool_jobs_run(xsa_pool_jobs *jobs);
void xsa_pool_jobs_commit(xsa_pool *p, xsa_pool_jobs *jobs);

/* A failure of the helper's own around the jobs (making the device's
 * context current): the pool's notice, as a job's failure is. */
void xsa_pool_jobs_failed(xsa_pool *p, const char *what, xsa_cu_result r);

/* For malloc and empty_cache when p->attend is set: polls IPC exports,
 * then returns a helper job's failure not yet reported (err set, the
 * notice cleared) or XSA_POOL_OK. */
xsa_pool_status xsa_pool_attend(xsa_pool *p, char *err, size_t errlen);

#endif
