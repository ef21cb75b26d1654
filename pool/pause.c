/*
 * pool/pause: tagged memory pools paused and resumed at the same addresses.
 *
 * A tag marks memory pools (a MemPool, a graph's private pool, or the
 * pools xsa_tag_region_begin routes a thread to); a tagged pool always has
 * expandable segments, whose reserved ranges outlive their pages. Pausing
 * a set of pools on one device, all or nothing:
 *   1. waits for the work that may use their pages: each segment's stream
 *      and every stream a block was recorded on (record_stream uses of
 *      live blocks, the events of blocks freed with them) is synchronized,
 *      then those frees complete; a pool a graph was captured into waits
 *      for the whole device (its replays run on any stream), as does
 *      XSA_PAUSE_SYNC_DEVICE;
 *   2. copies the live blocks to host memory when backup is on
 *      (pool/backup.c);
 *   3. unmaps every mapped run of the pools' segments, keeping the handles
 *      until all runs are unmapped (a failure maps them back: nothing is
 *      lost), then releases them;
 *   4. forgets the whole pages of the free blocks (the cache is not mapped
 *      again), except in a pool a graph was captured into, whose graphs
 *      replay over its free blocks; and moves the pools' blocks out of the
 *      current stats (allocation, allocated/active/requested bytes) and
 *      their pages from reserved_bytes to paused_bytes.
 * While paused, the blocks keep their records (mapped == true for the
 * pages a resume maps), the pointer map still holds the allocations so
 * that xsa_free works (pause_free: the block goes back to the paused
 * pool's free set, its pages are forgotten), and malloc refuses requests
 * routed to the pool. Resuming maps each run of the paused segments' mapped
 * blocks again (chunks of up to RESUME_CHUNK pages: tagged pools lend no
 * pages to page recycling, so their handles may be large), copies the
 * backups back, and only then commits; out of memory (the device's, or
 * past the memory fraction) unmaps what it mapped and leaves everything
 * paused, backups kept, for a later retry; before it gives up, the cache
 * goes back to the device once (xsa_release_cached), as for a malloc.
 * Not during a capture or a routing (the waits and copies would break a
 * capture): refused with a sentence saying so.
 */
#include "pool/pause.h"

#include <stdio.h>
#include <stdlib.h>

#include "pool/backup.h"
#include "pool/block.h"
#include "pool/core.h"
#include "pool/errors.h"
#include "pool/events.h"
#include "pool/free_set.h"
#include "pool/grow.h"
#include "pool/mempool.h"
#include "pool/pages.h"
#include "pool/ptr_map.h"
#include "pool/recycle.h"
#include "pool/release.h"
#include "pool/state.h"
#include "pool/trace.h"

#define RESUME_CHUNK ((size_t)512) /* pages of one handle a resume creates (1 GiB of 2 MiB pages) */

static xsa_pool_status invalid(const xsa_pool *p, char *err, size_t errlen, const char *why) {
    snprintf(err, errlen, "device %d: %s", p->device, why);
    return XSA_POOL_INVALID;
}

static bool tagged_as(const xsa_mempool *mp, uint32_t tag) { return mp->tag && (!tag || mp->tag == tag); }

/* ---- tagging ---- */

static bool has_classic_segment(const xsa_pool *p, const xsa_mempool *mp) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        if (s->mp == mp && !s->expandable) return true;
    return false;
}

/* Whether the device can map virtual memory (asked once). */
static bool device_has_vmm(xsa_pool *p) {
    if (p->vmm < 0) {
        int vmm = 0;
        xsa_cu_result r = XSA_DRV(p->drv, device_get_attribute, &vmm, XSA_ATTR_VMM_SUPPORTED, p->device);
        p->vmm = (int8_t)(r == XSA_CU_SUCCESS && vmm);
    }
    return p->vmm == 1;
}

xsa_pool_status xsa_pause_set_tag(xsa_pool *p, xsa_mempool_id id, uint32_t tag, const char *name, uint32_t flags,
                                  char *err, size_t errlen) {
    xsa_mempool *mp = xsa_mempool_find(p, id);
    if (!mp || xsa_mempool_is_global(p, mp) || xsa_mempool_released(mp))
        return invalid(p, err, errlen, "no such memory pool in use (tags go on MemPools and graph pools)");
    if (mp->tag && mp->tag != tag) return invalid(p, err, errlen, "the memory pool has another tag already");
    if (mp->paused) return invalid(p, err, errlen, "the memory pool is paused: resume it before tagging it again");
    if (xsa_mempool_owns_allocator(mp) || has_classic_segment(p, mp) || !device_has_vmm(p)) {
        snprintf(err, errlen,
                 "device %d: a tagged memory pool needs expandable segments, and this one %s", p->device,
                 xsa_mempool_owns_allocator(mp) ? "has an allocator of its own"
                 : has_classic_segment(p, mp)  ? "holds classic segments already (tag it before its first allocation)"
                                               : "is on a device without virtual memory management");
        return XSA_POOL_UNSUPPORTED;
    }
    mp->tag = tag;
    mp->tag_flags = flags;
    snprintf(mp->tag_name, sizeof mp->tag_name, "%s", name);
    return XSA_POOL_OK;
}

/* ---- the pools a call works on ---- */

typedef struct pool_set {
    xsa_mempool **mp;
    size_t n;
} pool_set;

static bool in_set(const pool_set *set, const xsa_mempool *mp) {
    for (size_t i = 0; i < set->n; i++)
        if (set->mp[i] == mp) return true;
    return false;
}

/* The pools tagged `tag` that are (paused) or are not (!paused) paused. */
static bool collect(xsa_pool *p, uint32_t tag, bool paused, pool_set *set) {
    size_t n = 0;
    for (xsa_mempool *mp = p->mempools; mp; mp = mp->next) n += tagged_as(mp, tag) && mp->paused == paused;
    set->n = 0;
    set->mp = malloc((n ? n : 1) * sizeof *set->mp);
    if (!set->mp) return false;
    for (xsa_mempool *mp = p->mempools; mp; mp = mp->next)
        if (tagged_as(mp, tag) && mp->paused == paused) set->mp[set->n++] = mp;
    return true;
}

#define FOR_SEGMENTS(p, set, s)                              \
    for (xsa_seg *s = (p)->segments; s; s = s->next_seg)    \
        if (in_set((set), s->mp))

/* ---- accounting ---- */

/* Moves a stat's current value (ALL and the kind's) by amount; the peak
 * follows only with `peak`. */
static void shift_stat(xsa_stat *by_type, xsa_pool_kind kind, int64_t amount, bool peak) {
    xsa_stat *both[2] = {&by_type[XSA_STAT_ALL], &by_type[1 + kind]};
    for (int i = 0; i < 2; i++) {
        both[i]->current += amount;
        if (peak && both[i]->current > both[i]->peak) both[i]->peak = both[i]->current;
    }
}

/* Adds (sign +1) or takes away (-1) block b's share of the current stats
 * (the ones the checker recounts from live blocks); the peaks move only
 * with `peak`. */
static void shift_block(xsa_pool *p, const xsa_block *b, int sign, bool peak) {
    xsa_pool_kind kind = b->seg->kind;
    if (b->allocated) {
        shift_stat(p->stats.allocation, kind, sign, peak);
        shift_stat(p->stats.allocated_bytes, kind, sign * (int64_t)b->size, peak);
        shift_stat(p->stats.requested_bytes, kind, sign * (int64_t)b->requested, peak);
        if (b->size >= p->opt.max_split_size) {
            xsa_stat *o = &p->stats.oversize_allocations;
            o->current += sign;
            if (peak && o->current > o->peak) o->peak = o->current;
        }
    }
    if (xsa_block_in_use(b)) {
        shift_stat(p->stats.active, kind, sign, peak);
        shift_stat(p->stats.active_bytes, kind, sign * (int64_t)b->size, peak);
    }
}

/* The pages a resume of paused segment s maps: those its mapped blocks cover. */
static size_t paused_pages(const xsa_pool *p, const xsa_seg *s) {
    size_t bytes = 0;
    for (const xsa_block *b = s->first; b; b = b->next)
        if (b->mapped) bytes += b->size; /* mapped runs are whole pages */
    return bytes / p->page_size;
}

size_t xsa_pause_paused_bytes(const xsa_pool *p, uint32_t tag) {
    size_t pages = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        if (s->paused && tagged_as(s->mp, tag)) pages += paused_pages(p, s);
    return pages * p->page_size;
}

/* ---- pausing ---- */

/* Adds `stream` to the set if it is not there yet. */
static bool add_stream(xsa_stream **streams, size_t *n, size_t *cap, xsa_stream stream) {
    for (size_t i = 0; i < *n; i++)
        if ((*streams)[i] == stream) return true;
    if (*n == *cap) {
        size_t next = *cap ? 2 * *cap : 8;
        xsa_stream *grown = realloc(*streams, next * sizeof *grown);
        if (!grown) return false;
        *streams = grown;
        *cap = next;
    }
    (*streams)[(*n)++] = stream;
    return true;
}

/* The streams whose queued work may use the set's pages. */
static bool streams_of(xsa_pool *p, const pool_set *set, xsa_stream **streams, size_t *n) {
    size_t cap = 0;
    *streams = NULL;
    *n = 0;
    bool ok = true;
    FOR_SEGMENTS(p, set, s) {
        ok = ok && add_stream(streams, n, &cap, s->stream);
        for (const xsa_block *b = s->first; b && ok; b = b->next)
            for (int i = 0; i < b->n_stream_uses && ok; i++) ok = add_stream(streams, n, &cap, b->stream_uses[i]);
    }
    const xsa_events *e = &p->events;
    for (int q = 0; q < e->n_queues && ok; q++)
        for (const xsa_pending *node = e->queues[q].head; node && ok; node = node->next)
            if (in_set(set, node->block->seg->mp)) ok = add_stream(streams, n, &cap, e->queues[q].stream);
    return ok;
}

/* Step 1: the work that may use the set's pages is over, and the blocks
 * freed with record_stream are back in the cache. */
static xsa_pool_status wait_for_work(xsa_pool *p, const pool_set *set, unsigned flags, char *err, size_t errlen) {
    bool device = flags & XSA_PAUSE_SYNC_DEVICE;
    for (size_t i = 0; i < set->n; i++) device |= set->mp[i]->captured;
    xsa_cu_result r;
    if (device) {
        r = XSA_DRV(p->drv, ctx_synchronize, p->device);
        if (r != XSA_CU_SUCCESS) {
            xsa_pool_driver_error(p, "cuCtxSynchronize", r, err, errlen);
            return XSA_POOL_DRIVER_ERROR;
        }
        p->stats.num_sync_all_streams++;
    } else {
        xsa_stream *streams;
        size_t n;
        if (!streams_of(p, set, &streams, &n)) {
            free(streams);
            return xsa_pool_host_oom(p->device, err, errlen);
        }
        for (size_t i = 0; i < n; i++)
            if ((r = XSA_DRV(p->drv, stream_synchronize, streams[i])) != XSA_CU_SUCCESS) {
                free(streams);
                xsa_pool_driver_error(p, "cuStreamSynchronize", r, err, errlen);
                return XSA_POOL_DRIVER_ERROR;
            }
        free(streams);
    }
    if (p->events.outstanding) xsa_events_poll(&p->events, xsa_pool_block_done, p);
    if (p->drains) xsa_recycle_drain(p, false);
    FOR_SEGMENTS(p, set, s) {
        for (const xsa_block *b = s->first; b; b = b->next) {
            if (b->ipc_exports) return invalid(p, err, errlen, "a block of the memory pool is exported to another process (IPC)");
            if (!b->allocated && xsa_block_in_use(b))
                return invalid(p, err, errlen, "a block of the memory pool still waits for other streams' work");
        }
        if (s->draining_pages) return invalid(p, err, errlen, "pages moved out of the memory pool are still in use");
    }
    return XSA_POOL_OK;
}

/* The requested bytes of mp's allocations (with a backup only, if `backed_up`). */
static uint64_t live_bytes(const xsa_pool *p, const xsa_mempool *mp, bool backed_up) {
    uint64_t bytes = 0;
    for (const xsa_seg *s = p->segments; s; s = s->next_seg)
        for (const xsa_block *b = s->first; b && s->mp == mp; b = b->next)
            if (b->allocated && (!backed_up || b->backup)) bytes += b->requested;
    return bytes;
}

static bool wants_backup(const xsa_mempool *mp, unsigned flags) {
    if (flags & XSA_PAUSE_DISCARD) return false;
    return (flags & XSA_PAUSE_BACKUP) || (mp->tag_flags & XSA_TAG_CPU_BACKUP);
}

/* Step 2: the backups; none is kept on an error (nor stale ones of pools
 * paused without backup). */
static xsa_pool_status back_up(xsa_pool *p, const pool_set *set, unsigned flags, uint64_t *bytes, char *err,
                               size_t errlen) {
    for (size_t i = 0; i < set->n; i++) {
        xsa_mempool *mp = set->mp[i];
        if (!wants_backup(mp, flags)) {
            xsa_backup_drop_all(p, mp);
            continue;
        }
        *bytes += live_bytes(p, mp, false);
        xsa_pool_status st = xsa_backup_take(p, mp, mp->tag_flags & XSA_TAG_BACKUP_MMAP, err, errlen);
        if (st != XSA_POOL_OK) {
            for (size_t j = 0; j <= i; j++) xsa_backup_drop_all(p, set->mp[j]);
            return st;
        }
    }
    return XSA_POOL_OK;
}

/* A run of pages unmapped by a pause, with the handles it held (one per
 * page; a chunk's pages repeat its handle). */
typedef struct unmapped_run {
    xsa_seg *seg;
    size_t first, n;
    xsa_mem_handle *handles;
} unmapped_run;

typedef struct runs {
    unmapped_run *run;
    size_t n, cap;
} runs;

/* Maps run r's handles back where they were (the undo of a failed pause). */
static xsa_cu_result map_back(const unmapped_run *r) {
    xsa_chunk *chunks = malloc(r->n * sizeof *chunks);
    if (!chunks) return XSA_CU_ERROR_OUT_OF_MEMORY;
    size_t n = 0;
    for (size_t i = 0; i < r->n; n++) {
        size_t k = 1;
        while (i + k < r->n && r->handles[i + k] == r->handles[i]) k++;
        chunks[n] = (xsa_chunk){r->handles[i], k};
        i += k;
    }
    xsa_cu_result res = xsa_segment_map_chunks(&r->seg->vm, r->first, r->n, chunks, n, 1);
    free(chunks);
    return res;
}

static void free_runs(runs *rs) {
    for (size_t i = 0; i < rs->n; i++) free(rs->run[i].handles);
    free(rs->run);
}

/* Step 3's first half: every mapped run of the set's segments unmapped, its
 * handles kept in rs. On an error the runs are mapped back. */
static xsa_pool_status unmap_runs(xsa_pool *p, const pool_set *set, runs *rs, char *err, size_t errlen) {
    xsa_cu_result r = XSA_CU_SUCCESS;
    FOR_SEGMENTS(p, set, s) {
        xsa_segment *vm = &s->vm;
        for (size_t pg = 0; pg < vm->max_pages && vm->mapped_pages && r == XSA_CU_SUCCESS;) {
            if (!xsa_segment_page_mapped(vm, pg)) {
                pg++;
                continue;
            }
            size_t end = pg;
            while (end < vm->max_pages && xsa_segment_page_mapped(vm, end)) end++;
            unmapped_run run = {s, pg, end - pg, malloc((end - pg) * sizeof(xsa_mem_handle))};
            if (!run.handles || !XSA_GROW_FOR_ONE(rs->run, rs->n, rs->cap, 8)) {
                free(run.handles);
                r = XSA_CU_ERROR_OUT_OF_MEMORY;
                break;
            }
            if ((r = xsa_segment_unmap(vm, pg, end - pg, run.handles)) != XSA_CU_SUCCESS) {
                free(run.handles);
                break;
            }
            rs->run[rs->n++] = run;
            pg = end;
        }
        if (r != XSA_CU_SUCCESS) break;
    }
    if (r == XSA_CU_SUCCESS) return XSA_POOL_OK;
    for (size_t i = rs->n; i-- > 0;) map_back(&rs->run[i]);
    if (r == XSA_CU_ERROR_OUT_OF_MEMORY) return xsa_pool_host_oom(p->device, err, errlen);
    xsa_pool_driver_error(p, "cuMemUnmap", r, err, errlen);
    return XSA_POOL_DRIVER_ERROR;
}

/* Step 3's second half: the handles go (once per chunk). */
static void release_runs(const runs *rs) {
    for (size_t i = 0; i < rs->n; i++) {
        const unmapped_run *r = &rs->run[i];
        for (size_t k = 0; k < r->n; k++)
            if (k == 0 || r->handles[k] != r->handles[k - 1]) xsa_segment_release_handle(&r->seg->vm, r->handles[k]);
    }
}

/* Step 4 for segment s: paused in the stats, its free pages forgotten. */
static void commit_pause(xsa_pool *p, xsa_seg *s, size_t pages) {
    for (const xsa_block *b = s->first; b; b = b->next) shift_block(p, b, -1, false);
    xsa_pages_account(p, s, 0, pages, -1);
    xsa_stat_update(&p->stats.paused_bytes, (int64_t)(pages * p->page_size));
    s->paused = true;
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_UNMAP, s->kind, s->base, pages * p->page_size, pages * p->page_size, s->stream);
    if (s->mp->captured) return;
    for (xsa_block *b = s->first, *next; b; b = next) {
        next = b->next;
        if (b->in_free_set && xsa_pages_forget_free(p, b)) next = s->first; /* records changed around b */
    }
}

static xsa_pool_status pause_tag(xsa_pool *p, uint32_t tag, unsigned flags, char *err, size_t errlen) {
    pool_set set;
    if (!collect(p, tag, false, &set)) return xsa_pool_host_oom(p->device, err, errlen);
    xsa_pool_status st = XSA_POOL_OK;
    if (set.n && p->capturing)
        st = invalid(p, err, errlen,
                     "cannot pause while a graph capture or a memory pool routing (torch.cuda.use_mem_pool) is "
                     "under way: pause after it ends");
    xsa_pause_report report = {.pools = (uint32_t)set.n};
    uint64_t t0 = xsa_driver_now_ns();
    if (set.n && st == XSA_POOL_OK) st = wait_for_work(p, &set, flags, err, errlen);
    uint64_t t1 = xsa_driver_now_ns();
    if (set.n && st == XSA_POOL_OK) st = back_up(p, &set, flags, &report.copied_bytes, err, errlen);
    uint64_t t2 = xsa_driver_now_ns();
    runs rs = {0};
    if (set.n && st == XSA_POOL_OK) {
        st = unmap_runs(p, &set, &rs, err, errlen);
        if (st != XSA_POOL_OK)
            for (size_t i = 0; i < set.n; i++) xsa_backup_drop_all(p, set.mp[i]);
    }
    if (set.n && st == XSA_POOL_OK) {
        release_runs(&rs);
        FOR_SEGMENTS(p, &set, s) {
            size_t pages = 0;
            for (size_t i = 0; i < rs.n; i++) pages += rs.run[i].seg == s ? rs.run[i].n : 0;
            commit_pause(p, s, pages);
        }
        for (size_t i = 0; i < set.n; i++) set.mp[i]->paused = true;
        for (size_t i = 0; i < rs.n; i++) report.pages += rs.run[i].n;
        report.wait_ns = t1 - t0;
        report.copy_ns = t2 - t1;
        report.map_ns = xsa_driver_now_ns() - t2;
        p->reports[0] = report;
    }
    free_runs(&rs);
    free(set.mp);
    return st;
}

/* ---- resuming ---- */

/* Unmaps (and releases) what a failed resume mapped in segment s. */
static void unmap_resumed(xsa_seg *s) {
    xsa_segment *vm = &s->vm;
    for (size_t pg = 0; pg < vm->max_pages && vm->mapped_pages;) {
        if (!xsa_segment_page_mapped(vm, pg)) {
            pg++;
            continue;
        }
        size_t end = pg;
        while (end < vm->max_pages && xsa_segment_page_mapped(vm, end)) end++;
        xsa_segment_unmap(vm, pg, end - pg, NULL);
        pg = end;
    }
}

/* Maps every run of segment s's mapped blocks. */
static xsa_cu_result map_segment(xsa_pool *p, xsa_seg *s) {
    for (const xsa_block *b = s->first; b;) {
        if (!b->mapped) {
            b = b->next;
            continue;
        }
        uintptr_t lo = b->ptr;
        while (b && b->mapped) b = b->next;
        uintptr_t hi = b ? b->ptr : s->base + s->size;
        size_t first = xsa_seg_page_of(p, s, lo), n = (hi - lo) / p->page_size;
        xsa_cu_result r = xsa_segment_map_chunks(&s->vm, first, n, NULL, 0, n < RESUME_CHUNK ? n : RESUME_CHUNK);
        if (r != XSA_CU_SUCCESS) return r;
    }
    return XSA_CU_SUCCESS;
}

static xsa_pool_status resume_oom(xsa_pool *p, size_t bytes, const char *why, char *err, size_t errlen) {
    size_t free_bytes = 0, total = 0;
    XSA_DRV(p->drv, mem_get_info, p->device, &free_bytes, &total);
    snprintf(err, errlen,
             "CUDA out of memory. Resuming needs %.2f GiB on GPU %d (%s; %.2f GiB free of %.2f GiB). Nothing was "
             "resumed: the memory stays paused with its backups, and a later resume can succeed once memory is "
             "freed.",
             (double)bytes / (1 << 30), p->device, why, (double)free_bytes / (1 << 30), (double)total / (1 << 30));
    return XSA_POOL_OOM;
}

/* Maps every page the set's paused segments need; on an error what was
 * mapped is undone. Out of memory (past the memory fraction, or the
 * device's) is XSA_POOL_OOM with the report in err. */
static xsa_pool_status map_all(xsa_pool *p, const pool_set *set, size_t pages, char *err, size_t errlen) {
    if (p->reserved + pages * p->page_size > p->allowed_max)
        return resume_oom(p, pages * p->page_size,
                          p->opt.memory_fraction < 1.0 ? "past the memory fraction" : "more than the device holds", err,
                          errlen);
    xsa_cu_result r = XSA_CU_SUCCESS;
    FOR_SEGMENTS(p, set, s) if (r == XSA_CU_SUCCESS) r = map_segment(p, s);
    if (r == XSA_CU_SUCCESS) return XSA_POOL_OK;
    FOR_SEGMENTS(p, set, s) unmap_resumed(s);
    if (r == XSA_CU_ERROR_OUT_OF_MEMORY) return resume_oom(p, pages * p->page_size, "the device is full", err, errlen);
    xsa_pool_driver_error(p, "mapping pages (cuMemCreate/cuMemMap/cuMemSetAccess)", r, err, errlen);
    return XSA_POOL_DRIVER_ERROR;
}

static xsa_pool_status resume_tag(xsa_pool *p, uint32_t tag, bool retain, char *err, size_t errlen) {
    pool_set set;
    if (!collect(p, tag, true, &set)) return xsa_pool_host_oom(p->device, err, errlen);
    if (!set.n) {
        free(set.mp);
        return XSA_POOL_OK;
    }
    xsa_pool_status st = XSA_POOL_OK;
    size_t pages = 0;
    FOR_SEGMENTS(p, &set, s) pages += paused_pages(p, s);
    if (p->capturing)
        st = invalid(p, err, errlen,
                     "cannot resume while a graph capture or a memory pool routing (torch.cuda.use_mem_pool) is "
                     "under way: resume after it ends");
    xsa_pause_report report = {.pools = (uint32_t)set.n, .pages = pages};
    uint64_t t0 = xsa_driver_now_ns();
    if (st == XSA_POOL_OK) st = map_all(p, &set, pages, err, errlen);
    if (st == XSA_POOL_OOM) {
        /* As a malloc would: the cache goes back to the device, then once more. */
        char ignored[256];
        if (xsa_release_cached(p, ignored, sizeof ignored) == XSA_POOL_OK) st = map_all(p, &set, pages, err, errlen);
    }
    uint64_t t1 = xsa_driver_now_ns();
    for (size_t i = 0; i < set.n && st == XSA_POOL_OK; i++) st = xsa_backup_restore(p, set.mp[i], err, errlen);
    report.map_ns = t1 - t0;
    report.copy_ns = xsa_driver_now_ns() - t1;
    if (st != XSA_POOL_OK) {
        FOR_SEGMENTS(p, &set, s) unmap_resumed(s);
        free(set.mp);
        return st;
    }
    FOR_SEGMENTS(p, &set, s) {
        size_t n = s->vm.mapped_pages;
        s->paused = false;
        xsa_stat_update(&p->stats.paused_bytes, -(int64_t)(n * p->page_size));
        xsa_pages_account(p, s, 0, n, +1);
        for (const xsa_block *b = s->first; b; b = b->next) shift_block(p, b, +1, true);
        XSA_OBSERVE(p, XSA_OBS_SEGMENT_MAP, s->kind, s->base, n * p->page_size, n * p->page_size, s->stream);
    }
    for (size_t i = 0; i < set.n; i++) report.copied_bytes += live_bytes(p, set.mp[i], true);
    for (size_t i = 0; i < set.n; i++) {
        set.mp[i]->paused = false;
        if (!retain) xsa_backup_drop_all(p, set.mp[i]);
    }
    p->reports[1] = report;
    free(set.mp);
    return XSA_POOL_OK;
}

xsa_pause_report xsa_pause_last_report(const xsa_pool *p, bool resume) { return p->reports[resume]; }

/* The calling thread in relaxed capture mode for a pause or resume: a
 * global-mode capture on another thread (another device's: this one's is
 * refused above) would be invalidated by its waits and its pinned host
 * memory calls otherwise. */
xsa_pool_status xsa_pause_tag(xsa_pool *p, uint32_t tag, unsigned flags, char *err, size_t errlen) {
    int mode = xsa_driver_relax_capture(p->drv);
    xsa_pool_status st = pause_tag(p, tag, flags, err, errlen);
    xsa_driver_restore_capture(p->drv, mode);
    return st;
}

xsa_pool_status xsa_resume_tag(xsa_pool *p, uint32_t tag, bool retain, char *err, size_t errlen) {
    int mode = xsa_driver_relax_capture(p->drv);
    xsa_pool_status st = resume_tag(p, tag, retain, err, errlen);
    xsa_driver_restore_capture(p->drv, mode);
    return st;
}

/* ---- while paused ---- */

xsa_pool_status xsa_pause_refuse(const xsa_pool *p, const xsa_mempool *mp, char *err, size_t errlen) {
    snprintf(err, errlen,
             "device %d: memory pool (%llu, %llu), tagged '%s', is paused: resume it before allocating in it",
             p->device, (unsigned long long)mp->id.first, (unsigned long long)mp->id.second, mp->tag_name);
    return XSA_POOL_INVALID;
}

void xsa_pause_free(xsa_pool *p, xsa_block *b) {
    xsa_backup_drop(p, b);
    b->n_stream_uses = 0; /* nothing maps its pages: no work can use them */
    /* Its share of the stats was taken out by the pause: put back (without
     * moving the peaks) for the usual accounting of a free to take out. */
    shift_block(p, b, +1, false);
    xsa_pool_give_back(p, b);
    xsa_block *prev = b->prev, *next = b->next;
    bool prev_free = xsa_block_free_neighbour(prev), next_free = xsa_block_free_neighbour(next);
    xsa_pool_free_block(p, b); /* b may merge away */
    /* The merged free block: the free neighbour kept, else b. */
    xsa_block *merged = prev_free ? prev : next_free ? next : b;
    if (!b->seg->mp->captured) xsa_pages_forget_free(p, merged);
}

xsa_pool_status xsa_pause_cpu_backup(const xsa_pool *p, uintptr_t ptr, size_t size, void **host, char *err,
                                     size_t errlen) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        if (ptr < s->base || ptr >= s->base + s->size) continue;
        for (const xsa_block *b = s->first; b; b = b->next)
            if (ptr >= b->ptr && ptr < b->ptr + b->size) {
                if (!b->allocated) break;
                return xsa_backup_find(p, b, ptr, size, host, err, errlen);
            }
        break;
    }
    snprintf(err, errlen, "device %d: %#lx is in no live allocation of xsalloc's", p->device, (unsigned long)ptr);
    return XSA_POOL_BAD_POINTER;
}

int xsa_pause_check(const xsa_pool *p, char *err, size_t errlen) {
    for (const xsa_seg *s = p->segments; s; s = s->next_seg) {
        const xsa_mempool *mp = s->mp;
        if (mp->tag && !s->expandable)
            return xsa_check_fail(err, errlen, "segment %#lx of a tagged memory pool is classic", (unsigned long)s->base);
        if (s->paused != mp->paused)
            return xsa_check_fail(err, errlen, "segment %#lx: paused=%d, its memory pool's paused=%d",
                                  (unsigned long)s->base, s->paused, mp->paused);
        if (s->paused && (s->vm.mapped_pages || s->draining_pages))
            return xsa_check_fail(err, errlen, "paused segment %#lx maps %zu pages (%zu draining)",
                                  (unsigned long)s->base, s->vm.mapped_pages, s->draining_pages);
    }
    for (const xsa_mempool *mp = p->mempools; mp; mp = mp->next)
        if (mp->paused && !mp->tag)
            return xsa_check_fail(err, errlen, "memory pool (%llu, %llu) is paused without a tag",
                                  (unsigned long long)mp->id.first, (unsigned long long)mp->id.second);
    if (p->global.tag || p->global.paused) return xsa_check_fail(err, errlen, "the global memory pool is tagged or paused");
    return xsa_backup_check(p, err, errlen);
}
