/*
 * pool/expand: the pool's side of expandable segments.
 *
 * Each (memory pool, stream, pool kind) has one segment: a reserved range as large as the
 * device, tiled by blocks. Unmapped ranges are blocks too (mapped == false,
 * page aligned, kept in no free set); a miss maps just the pages needed at
 * the start of an unmapped block, merged with the free block before it.
 * Releasing memory unmaps the whole pages inside a free block and splits the
 * block around them; adjacent unmapped blocks merge.
 */
#include "pool/pool_internal.h"

#include <stdio.h>
#include <stdlib.h>

static xsa_seg *find_segment(xsa_pool *p, const xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream) {
    for (xsa_seg *s = p->segments; s; s = s->next_seg)
        if (s->expandable && s->kind == kind && s->stream == stream && s->mp == mp) return s;
    return NULL;
}

static xsa_pool_status create_segment(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream,
                                      xsa_seg **out, char *err, size_t errlen) {
    xsa_block *b;
    xsa_seg *s = xsa_pool_new_records(p, mp, kind, stream, &b, err, errlen);
    if (!s) return XSA_POOL_HOST_OOM;
    xsa_cu_result r = xsa_segment_init(&s->vm, p->drv, p->device, p->device_total);
    if (r != XSA_CU_SUCCESS) return xsa_pool_segment_failed(p, s, b, "cuMemAddressReserve", r, err, errlen);
    s->vm.exportable = p->ipc;
    /* IPC exports a block's pages one handle each: chunks of one page. */
    size_t handle_pages = p->opt.handle_size / p->page_size;
    s->vm.new_chunk_pages = p->ipc || handle_pages < 1 ? 1 : handle_pages;
    /* Cannot fail: nothing is mapped yet, and the pool keeps fewer peers
     * than a segment's access list holds. */
    for (int i = 0; i < p->n_peers; i++) xsa_segment_add_access(&s->vm, p->peers[i]);
    s->expandable = true;
    b->mapped = false;
    xsa_pool_link_new_segment(p, s, b, (uintptr_t)s->vm.base, s->vm.max_pages * s->vm.page_size);
    if (p->listener.reserved) p->listener.reserved(p->listener.ctx, p->device, s->base, s->size);
    *out = s;
    return XSA_POOL_OK;
}

static bool is_free_mapped(const xsa_block *b) { return b && xsa_block_is_free(b); }

/* Bytes a request could get from unmapped block u: u plus the free blocks
 * on both sides (the one after only once u is mapped whole). */
static size_t room(const xsa_block *u) {
    return u->size + (is_free_mapped(u->prev) ? u->prev->size : 0) + (is_free_mapped(u->next) ? u->next->size : 0);
}

/* Best fit among the segment's unmapped blocks, ties to the lowest address. */
static xsa_block *find_unmapped(const xsa_seg *s, size_t size) {
    xsa_block *best = NULL;
    for (xsa_block *b = s->first; b; b = b->next)
        if (!b->mapped && room(b) >= size && (!best || room(b) < room(best))) best = b;
    return best;
}

void xsa_expand_account(xsa_pool *p, xsa_seg *s, size_t moved, size_t created, int sign) {
    size_t pages = moved + created, bytes = pages * p->page_size;
    /* Moved pages are not device allocations or frees. */
    bool crossed_empty = xsa_seg_owned_pages(s) == (sign > 0 ? pages : 0);
    p->reserved = sign > 0 ? p->reserved + bytes : p->reserved - bytes;
    xsa_stats_update(p->stats.reserved_bytes, s->kind, sign * (int64_t)bytes);
    /* A segment counts while it has mapped memory. */
    if (crossed_empty) xsa_stats_update(p->stats.segment, s->kind, sign);
    if (!created) return;
    if (sign > 0) {
        p->stats.num_device_alloc++;
        p->stats.num_pages_mapped += (int64_t)created;
    } else {
        p->stats.num_device_free++;
        p->stats.num_pages_unmapped += (int64_t)created;
    }
}

/* Maps pages for a request of `size` bytes in segment s. */
static xsa_pool_status grow(xsa_pool *p, xsa_seg *s, size_t size, xsa_block **out, char *err, size_t errlen) {
    /* Old addresses of moved pages whose work is done give their range back
     * (before choosing where to map: they merge with unmapped blocks); not
     * during a capture, which an event query would invalidate. */
    if (p->drains && !p->capturing) xsa_recycle_drain(p, false);
    xsa_block *u = find_unmapped(s, size);
    if (!u) return XSA_POOL_OOM; /* the reservation is as large as the device */
    xsa_block *before = is_free_mapped(u->prev) ? u->prev : NULL;
    size_t have = before ? before->size : 0;
    /* have >= size only when the oversize rules refused `before`: still map a page. */
    size_t need = size > have ? size - have : 1;
    size_t bytes = (need + p->page_size - 1) / p->page_size * p->page_size;
    if (bytes > u->size) bytes = u->size; /* the free block after u makes up the rest */
    size_t pages = bytes / p->page_size;
    /* Recycled chunks are mapped elsewhere in this pool: no new memory. The
     * rest are new chunks. */
    size_t moved = 0, n_moved = 0, wanted = xsa_recycle_pages_wanted(p, size, pages);
    xsa_chunk *chunks = wanted ? malloc(wanted * sizeof *chunks) : NULL;
    const xsa_drain *mark = p->drains;
    if (chunks) moved = xsa_recycle_take(p, s, before, u->next, wanted, chunks, &n_moved);
    if (p->reserved + (pages - moved) * p->page_size > p->allowed_max) {
        xsa_recycle_undo(p, mark);
        free(chunks);
        return XSA_POOL_OOM;
    }
    /* Take the block record before mapping, so nothing can fail after. */
    xsa_block *m = bytes < u->size ? xsa_pool_carve_front(p, u, bytes) : u;
    xsa_cu_result r = XSA_CU_ERROR_OUT_OF_MEMORY;
    if (m) r = xsa_segment_map_chunks(&s->vm, (m->ptr - s->base) / p->page_size, pages, chunks, n_moved);
    free(chunks);
    if (r != XSA_CU_SUCCESS) {
        xsa_recycle_undo(p, mark);
        if (!m) {
            snprintf(err, errlen, "device %d: out of host memory", p->device);
            return XSA_POOL_HOST_OOM;
        }
        if (m != u) xsa_pool_absorb(p, u, m); /* give the carved range back to u */
        if (r == XSA_CU_ERROR_OUT_OF_MEMORY) return XSA_POOL_OOM;
        xsa_pool_driver_error(p, "mapping pages (cuMemCreate/cuMemMap/cuMemSetAccess)", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    m->mapped = true;
    xsa_expand_account(p, s, moved, pages - moved, +1);
    p->stats.num_pages_recycled += (int64_t)moved;
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_MAP, s->kind, m->ptr, bytes, bytes, s->stream);
    if (before) xsa_pool_absorb(p, m, before);
    if (is_free_mapped(m->next)) xsa_pool_absorb(p, m, m->next);
    *out = m;
    return XSA_POOL_OK;
}

xsa_pool_status xsa_expand_alloc(xsa_pool *p, xsa_mempool *mp, xsa_pool_kind kind, xsa_stream stream, size_t size,
                                 xsa_block **out, char *err, size_t errlen) {
    xsa_seg *s = find_segment(p, mp, kind, stream);
    if (!s) {
        xsa_pool_status st = create_segment(p, mp, kind, stream, &s, err, errlen);
        if (st != XSA_POOL_OK) return st;
    }
    xsa_pool_status st = grow(p, s, size, out, err, errlen);
    /* A failed request leaves no empty reservation behind (one made for it
     * for a new stream, or one whose pages recycling took). */
    if (st != XSA_POOL_OK && s->vm.mapped_pages == 0) xsa_expand_destroy_segment(p, s);
    return st;
}

void xsa_expand_merge_unmapped(xsa_pool *p, xsa_block *u) {
    if (u->prev && !u->prev->mapped) xsa_pool_absorb(p, u, u->prev);
    if (u->next && !u->next->mapped) xsa_pool_absorb(p, u, u->next);
}

void xsa_expand_return_free(xsa_pool *p, xsa_block *b) {
    if (is_free_mapped(b->prev)) xsa_pool_absorb(p, b, b->prev);
    if (is_free_mapped(b->next)) xsa_pool_absorb(p, b, b->next);
    xsa_pool_insert_free(p, b);
}

/* Fills in piece as the free block [lo, hi) of b's segment between prev and next. */
static void link_piece(xsa_block *piece, const xsa_block *b, uintptr_t lo, uintptr_t hi, xsa_block *prev,
                       xsa_block *next) {
    piece->ptr = lo;
    piece->size = hi - lo;
    piece->stream = b->stream;
    piece->seg = b->seg;
    piece->mapped = true;
    piece->prev = prev;
    piece->next = next;
    if (prev) prev->next = piece;
    if (next) next->prev = piece;
    xsa_fix_first(piece);
}

xsa_pool_status xsa_expand_isolate(xsa_pool *p, xsa_block *b, uintptr_t lo, uintptr_t hi, char *err, size_t errlen) {
    /* Records for the pieces around [lo, hi), taken before anything changes. */
    xsa_block *head = NULL, *tail = NULL;
    if ((lo > b->ptr && !(head = xsa_block_new(&p->blocks))) ||
        (hi < b->ptr + b->size && !(tail = xsa_block_new(&p->blocks)))) {
        if (head) xsa_block_delete(&p->blocks, head);
        snprintf(err, errlen, "device %d: out of host memory", p->device);
        return XSA_POOL_HOST_OOM;
    }
    xsa_pool_erase_free(p, b);
    uintptr_t b_end = b->ptr + b->size;
    if (head) link_piece(head, b, b->ptr, lo, b->prev, b);
    if (tail) link_piece(tail, b, hi, b_end, b, b->next);
    b->ptr = lo;
    b->size = hi - lo;
    /* The pieces are inserted once their neighbours are final, so that the
     * inactive_split accounting sees them as they stay. */
    if (head) xsa_pool_insert_free(p, head);
    if (tail) xsa_pool_insert_free(p, tail);
    return XSA_POOL_OK;
}

bool xsa_expand_whole_chunks(const xsa_pool *p, const xsa_block *b, size_t *first, size_t *end) {
    const xsa_segment *vm = &b->seg->vm;
    size_t page = p->page_size, start;
    size_t lo = (b->ptr - b->seg->base + page - 1) / page, hi = (b->ptr + b->size - b->seg->base) / page;
    if (hi <= lo) return false;
    size_t len = xsa_segment_chunk(vm, lo, &start);
    if (start < lo) lo = start + len; /* the first chunk starts before b */
    if (hi <= lo) return false;
    len = xsa_segment_chunk(vm, hi - 1, &start);
    if (start + len > hi) hi = start; /* the last one ends after it */
    if (hi <= lo) return false;
    *first = lo;
    *end = hi;
    return true;
}

xsa_pool_status xsa_expand_unmap_block(xsa_pool *p, xsa_block *b, char *err, size_t errlen) {
    xsa_seg *s = b->seg;
    size_t page = p->page_size, first, end;
    if (!xsa_expand_whole_chunks(p, b, &first, &end)) return XSA_POOL_OK;
    /* cuMemUnmap is not stream ordered: kernels still queued on the stream
     * may use these pages. Releasing memory may block (PyTorch does too). */
    xsa_cu_result r = XSA_DRV(p->drv, stream_synchronize, s->stream);
    if (r != XSA_CU_SUCCESS) {
        xsa_pool_driver_error(p, "cuStreamSynchronize", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    uintptr_t lo = s->base + first * page, hi = s->base + end * page;
    xsa_pool_status st = xsa_expand_isolate(p, b, lo, hi, err, errlen);
    if (st != XSA_POOL_OK) return st;
    r = xsa_segment_unmap(&s->vm, first, end - first, NULL);
    if (r != XSA_CU_SUCCESS) {
        xsa_expand_return_free(p, b);
        xsa_pool_driver_error(p, "cuMemUnmap", r, err, errlen);
        return XSA_POOL_DRIVER_ERROR;
    }
    b->mapped = false;
    xsa_expand_account(p, s, 0, end - first, -1);
    XSA_OBSERVE(p, XSA_OBS_SEGMENT_UNMAP, s->kind, lo, hi - lo, hi - lo, s->stream);
    xsa_expand_merge_unmapped(p, b);
    return XSA_POOL_OK;
}

bool xsa_expand_destroy_segment(xsa_pool *p, xsa_seg *s) {
    if (p->listener.released) p->listener.released(p->listener.ctx, s->base);
    if (xsa_segment_destroy(&s->vm) != XSA_CU_SUCCESS) {
        /* The range stays: it is found again, as a segment of this device. */
        if (p->listener.reserved) p->listener.reserved(p->listener.ctx, p->device, s->base, s->size);
        return false;
    }
    for (xsa_block *b = s->first; b;) {
        xsa_block *next = b->next;
        if (b->in_free_set) xsa_pool_erase_free(p, b);
        xsa_block_delete(&p->blocks, b);
        b = next;
    }
    xsa_pool_drop_segment(p, s);
    return true;
}
