/* vmm/segment_job: a segment's driver work done outside its owner's lock
 * (design in segment_job.h). */
#include "vmm/segment_job.h"

#include <stdlib.h>
#include <string.h>

/* Pages [first, first+n) are all unmapped in s's records. */
static bool all_unmapped(const xsa_segment *s, size_t first, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (xsa_segment_page_mapped(s, first + i)) return false;
    return true;
}

/* Pages [first, first+n) are mapped whole chunks of s (the run may end
 * where the next chunk starts or at an unmapped page). */
static bool whole_chunks(const xsa_segment *s, size_t first, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!xsa_segment_page_mapped(s, first + i)) return false;
    size_t end = first + n;
    return s->chunk_pages[first] != 0 &&
           (end == s->max_pages || s->chunk_pages[end] != 0 || !xsa_segment_page_mapped(s, end));
}

xsa_cu_result xsa_segment_job_begin(xsa_segment *s, xsa_seg_job_kind kind, size_t first, size_t n,
                                    size_t chunk_pages, xsa_segment_job *job) {
    memset(job, 0, sizeof *job);
    if (n == 0 || first > s->max_pages || n > s->max_pages - first) return XSA_CU_ERROR_INVALID_VALUE;
    bool ok = kind == XSA_SEG_JOB_MAP_NEW ? all_unmapped(s, first, n) : whole_chunks(s, first, n);
    if (!ok) return XSA_CU_ERROR_INVALID_VALUE;
    size_t per = chunk_pages ? chunk_pages : 1, count = 0;
    if (kind == XSA_SEG_JOB_MAP_NEW)
        count = (n + per - 1) / per;
    else
        for (size_t p = first; p < first + n; p += s->chunk_pages[p]) count++;
    bool unmaps = kind != XSA_SEG_JOB_MAP_NEW;
    job->chunks = calloc(count, sizeof *job->chunks);
    job->released = calloc(count, sizeof *job->released);
    if (unmaps && !s->leaving) s->leaving = calloc(s->max_pages, 1);
    if (!job->chunks || !job->released || (unmaps && !s->leaving)) {
        free(job->chunks);
        free(job->released);
        job->chunks = NULL, job->released = NULL;
        return XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    job->kind = kind;
    job->drv = s->drv;
    job->device = s->device;
    job->exportable = s->exportable;
    memcpy(job->access, s->access, sizeof job->access);
    job->n_access = s->n_access;
    job->first = first;
    job->pages = n;
    job->page_size = s->page_size;
    job->addr = xsa_segment_page_addr(s, first);
    job->chunk_pages = per;
    job->n_chunks = count;
    if (kind == XSA_SEG_JOB_MAP_NEW) {
        for (size_t i = 0, left = n; i < count; i++) {
            job->chunks[i] = (xsa_chunk){XSA_NO_HANDLE, left < per ? left : per};
            left -= job->chunks[i].pages;
        }
    } else {
        size_t i = 0;
        for (size_t p = first; p < first + n; p += s->chunk_pages[p])
            job->chunks[i++] = (xsa_chunk){s->handles[p], s->chunk_pages[p]};
        memset(s->leaving + first, 1, n); /* add_access skips them from now on */
    }
    job->result = XSA_CU_SUCCESS;
    return XSA_CU_SUCCESS;
}

static void failed(xsa_segment_job *job, xsa_cu_result r, const char *call) {
    job->result = r;
    job->call = call;
}

/* Unmaps the first `mapped` bytes and releases the created handles: the
 * undo of a MAP_NEW that failed part-way (as segment.c's undo_map). */
static void undo_new(xsa_segment_job *job, size_t mapped) {
    if (mapped) XSA_DRV(job->drv, mem_unmap, job->addr, mapped);
    for (size_t i = 0; i < job->n_chunks; i++)
        if (job->chunks[i].handle != XSA_NO_HANDLE) {
            XSA_DRV(job->drv, mem_release, job->chunks[i].handle);
            job->chunks[i].handle = XSA_NO_HANDLE;
        }
}

static void run_map_new(xsa_segment_job *job) {
    size_t mapped = 0;
    xsa_cu_result r = XSA_CU_SUCCESS;
    for (size_t i = 0; i < job->n_chunks; i++) {
        size_t bytes = job->chunks[i].pages * job->page_size;
        xsa_mem_handle h = XSA_NO_HANDLE;
        if ((r = XSA_DRV(job->drv, mem_create, &h, bytes, job->device, job->exportable)) != XSA_CU_SUCCESS) {
            failed(job, r, "cuMemCreate");
            break;
        }
        job->chunks[i].handle = h;
        if ((r = XSA_DRV(job->drv, mem_map, job->addr + mapped, bytes, 0, h)) != XSA_CU_SUCCESS) {
            failed(job, r, "cuMemMap");
            break;
        }
        mapped += bytes;
    }
    if (r == XSA_CU_SUCCESS) {
        r = XSA_DRV(job->drv, mem_set_access, job->addr, job->pages * job->page_size, job->access, job->n_access);
        if (r != XSA_CU_SUCCESS) failed(job, r, "cuMemSetAccess");
    }
    if (r != XSA_CU_SUCCESS) undo_new(job, mapped);
}

void xsa_segment_job_run(xsa_segment_job *job) {
    if (job->kind == XSA_SEG_JOB_MAP_NEW) {
        run_map_new(job);
        return;
    }
    xsa_cu_result r = XSA_DRV(job->drv, mem_unmap, job->addr, job->pages * job->page_size);
    if (r != XSA_CU_SUCCESS) {
        failed(job, r, "cuMemUnmap");
        return;
    }
    job->unmapped = true;
    if (job->kind != XSA_SEG_JOB_UNMAP_RELEASE) return;
    for (size_t i = 0; i < job->n_chunks; i++) {
        r = XSA_DRV(job->drv, mem_release, job->chunks[i].handle);
        job->released[i] = r == XSA_CU_SUCCESS;
        if (r != XSA_CU_SUCCESS && job->result == XSA_CU_SUCCESS) failed(job, r, "cuMemRelease");
    }
}

/* Grants the devices added to s's access list since begin on the job's
 * pages. */
static xsa_cu_result grant_added(const xsa_segment *s, const xsa_segment_job *job) {
    for (int i = 0; i < s->n_access; i++) {
        int k = 0;
        while (k < job->n_access && job->access[k] != s->access[i]) k++;
        if (k < job->n_access) continue;
        xsa_cu_result r = XSA_DRV(s->drv, mem_set_access, job->addr, job->pages * job->page_size, &s->access[i], 1);
        if (r != XSA_CU_SUCCESS) return r;
    }
    return XSA_CU_SUCCESS;
}

static void finish_map_new(xsa_segment *s, xsa_segment_job *job) {
    if (job->result != XSA_CU_SUCCESS) return;
    xsa_cu_result r = grant_added(s, job);
    if (r != XSA_CU_SUCCESS) {
        failed(job, r, "cuMemSetAccess");
        undo_new(job, job->pages * job->page_size);
        return;
    }
    xsa_segment_adopt(s, job->first, job->chunks, job->n_chunks);
}

xsa_cu_result xsa_segment_job_drop(xsa_segment_job *job) {
    free(job->chunks);
    free(job->released);
    job->chunks = NULL, job->released = NULL;
    return job->result;
}

xsa_cu_result xsa_segment_job_finish(xsa_segment *s, xsa_segment_job *job) {
    if (job->kind == XSA_SEG_JOB_MAP_NEW) {
        finish_map_new(s, job);
    } else if (job->unmapped) {
        /* Unmapped: the records follow; handles not released are kept. */
        xsa_segment_forget(s, job->first, job->pages);
        for (size_t i = 0; job->kind == XSA_SEG_JOB_UNMAP_RELEASE && i < job->n_chunks; i++)
            if (!job->released[i]) xsa_segment_keep_unreleased(s, job->chunks[i].handle);
    } else {
        /* Still mapped: the pages are the segment's again, granted to the
         * peers added meanwhile (a refused grant is the one reported: the
         * peer cannot use those pages). */
        memset(s->leaving + job->first, 0, job->pages);
        xsa_cu_result r = grant_added(s, job);
        if (r != XSA_CU_SUCCESS) failed(job, r, "cuMemSetAccess");
    }
    return xsa_segment_job_drop(job);
}
