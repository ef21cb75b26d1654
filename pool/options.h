/*
 * pool/options: the settings of one device's block pool, filled by the
 * configuration parser (api/config) from XSALLOC_CONF. Defaults are
 * PyTorch's, except expandable_segments and page_recycling (xsalloc's own).
 */
#ifndef XSA_POOL_OPTIONS_H
#define XSA_POOL_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* roundup_power2_divisions intervals: [1 MiB, 2 MiB), [2, 4), ... the last
 * one also covers everything larger (PyTorch: 16 intervals from 1 MiB). */
#define XSA_ROUNDUP_INTERVALS 16

typedef struct xsa_pool_options {
    bool expandable_segments;      /* default true */
    bool page_recycling;           /* default true */
    /* Reserved memory may run this fraction above the highest allocated
     * bytes seen before a growth recycles pages (default 0.01). */
    double page_recycling_headroom;
    size_t max_split_size;         /* bytes; SIZE_MAX = no limit (default) */
    size_t max_non_split_rounding; /* an oversize request may take a block this much larger (default 20 MiB) */
    /* divisions per interval; 0 = no power-of-two rounding (default) */
    size_t roundup_power2_divisions[XSA_ROUNDUP_INTERVALS];
    double garbage_collection_threshold; /* 0 = off; else in (0, 1) */
    double memory_fraction;        /* per_process_memory_fraction; 1.0 = whole device */
    bool peer_access;              /* grant every peer that can access the device (default false) */
    bool ipc_handles;              /* exportable pages for IPC (default false) */
    /* Most bytes of one physical handle a growth creates (expandable_handle_mb,
     * default 20 MiB; below a page: one page): fewer driver calls, coarser
     * recycling. With page recycling, a handle is also at most 1/8 of the
     * headroom (pool/recycle.c). */
    size_t handle_size;
    /* graph_capture_record_stream_reuse (default false): a block freed
     * during a capture with uses on other streams may be reused on its
     * stream once the captured graph orders those uses before new work
     * (pool/capture_reuse.c). May change at run time
     * (xsa_pool_set_capture_reuse). */
    bool capture_reuse;
    /* The helper thread (helper_thread): a thread of the API's that takes
     * driver work off the allocation path (pool/jobs.c says which) and runs
     * decay purging. Off: the pool behaves as without it. */
    bool helper_thread;
    /* page_decay_ms: free pages of expandable segments unused for this many
     * milliseconds are unmapped and released by the helper thread (pool/
     * decay.c); 0: off. Needs helper_thread. */
    uint32_t page_decay_ms;
} xsa_pool_options;

/* Issue 33's decay purging and helper thread are on by default (the GPU
 * figures in docs/results.md); this one line turns both off by default
 * (page_decay_ms then defaults to 0). */
#define XSA_HELPER_BY_DEFAULT true
#define XSA_DEFAULT_PAGE_DECAY_MS 500u

void xsa_pool_options_default(xsa_pool_options *o);

#endif
