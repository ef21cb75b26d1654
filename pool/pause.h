/*
 * pool/pause: tagged memory pools paused and resumed at the same addresses
 * (design in pause.c; the API's side in xsalloc/xsalloc.h, "Pause and
 * resume"). Tags are numbers here (0: none); api/ names them.
 */
#ifndef XSA_POOL_PAUSE_H
#define XSA_POOL_PAUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/state.h"

/* Tags memory pool `id` with `tag` (> 0), named `name` in messages, and
 * XSA_TAG_* flags. */
xsa_pool_status xsa_pause_set_tag(xsa_pool *p, xsa_mempool_id id, uint32_t tag, const char *name, uint32_t flags,
                                  char *err, size_t errlen);

/* Pauses every memory pool tagged `tag` (0: every tagged pool) that is not
 * paused, with XSA_PAUSE_* flags. All or nothing. */
xsa_pool_status xsa_pause_tag(xsa_pool *p, uint32_t tag, unsigned flags, char *err, size_t errlen);
/* Resumes every paused pool tagged `tag` (0: all); their backups are
 * released unless `retain`. All or nothing. */
xsa_pool_status xsa_resume_tag(xsa_pool *p, uint32_t tag, bool retain, char *err, size_t errlen);

/* What the last pause (resume false) or resume that did something did. */
xsa_pause_report xsa_pause_last_report(const xsa_pool *p, bool resume);

/* Page bytes released by the paused pools tagged `tag` (0: all). */
size_t xsa_pause_paused_bytes(const xsa_pool *p, uint32_t tag);

/* malloc's answer for a request routed to paused pool mp. */
xsa_pool_status xsa_pause_refuse(const xsa_pool *p, const xsa_mempool *mp, char *err, size_t errlen);
/* Frees allocated block b of a paused segment (out of the pointer map):
 * its accounting is the pause's, its copy goes, its pages are forgotten
 * once nothing uses them (unless a graph replays over the pool). */
void xsa_pause_free(xsa_pool *p, xsa_block *b);

/* The host copy of [ptr, ptr+size) in the live allocation holding ptr, or
 * NULL; XSA_POOL_BAD_POINTER if no allocation holds it. */
xsa_pool_status xsa_pause_cpu_backup(const xsa_pool *p, uintptr_t ptr, size_t size, void **host, char *err,
                                     size_t errlen);

/* Invariant checker for the paused state: a paused pool's segments are
 * paused and map nothing, a segment is paused only with its pool, tagged
 * pools' segments are expandable. 1 if consistent, else 0 with err. */
int xsa_pause_check(const xsa_pool *p, char *err, size_t errlen);

#endif
