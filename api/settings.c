/*
 * api/settings: settings changed at run time (xsa_set_allocator_settings;
 * torch.cuda.memory._set_allocator_settings through the torch adapter).
 *
 * Design: the string is parsed as at initialisation (api/config.c: same
 * syntax, keys and errors), then merged into the settings in use with
 * PyTorch's run-time rules, under the configuration's lock
 * (xsa_api_change_options), and every device's pool takes the result
 * (pool/settings.c). A key's class says how (the table below):
 *  - RESET: PyTorch resets it to its default whenever settings are given
 *    (AcceleratorAllocatorConfig::parseArgs): max_split_size_mb,
 *    roundup_power2_divisions, garbage_collection_threshold;
 *  - KEPT: a key not given keeps its value; given, it applies from the
 *    next request on (expandable_segments, as in PyTorch, decides where
 *    new memory goes; graph_capture_record_stream_reuse from the next
 *    free or malloc, blocks already waiting keep waiting; helper_thread
 *    and page_decay_ms from the helper thread's next round);
 *  - FIXED: set once, when the pools are made (peer grants, exportable
 *    pages, handle sizes, the memory fraction of each device): given with
 *    another value than the one in use, the call fails naming the key and
 *    what to do instead; the same value is accepted.
 * Nothing changes unless everything is accepted. The PyTorch keys xsalloc
 * accepts and ignores are validated as at initialisation and named on
 * stderr the first time each is given in the process
 * (xsa_config_name_ignored). xsa_check_allocator_settings runs every check
 * and changes nothing: the torch adapter asks it before torch's own setter
 * runs, so that a string xsalloc refuses changes neither side.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "api/config.h"
#include "api/config_env.h"
#include "api/errors.h"
#include "api/devices.h"
#include "api/helper.h"

typedef enum { RESET, KEPT, FIXED } change_rule;

#define FIELD(f) offsetof(xsa_pool_options, f), sizeof(((xsa_pool_options *)0)->f)

/* Every honoured key and its field in xsa_pool_options. */
static const struct {
    const char *key;
    size_t offset, size;
    change_rule rule;
    const char *instead; /* FIXED: what changes it after initialisation */
} keys[] = {
    {"max_split_size_mb", FIELD(max_split_size), RESET, NULL},
    {"roundup_power2_divisions", FIELD(roundup_power2_divisions), RESET, NULL},
    {"garbage_collection_threshold", FIELD(garbage_collection_threshold), RESET, NULL},
    {"expandable_segments", FIELD(expandable_segments), KEPT, NULL},
    {"page_recycling", FIELD(page_recycling), KEPT, NULL},
    {"page_recycling_headroom", FIELD(page_recycling_headroom), KEPT, NULL},
    {"max_non_split_rounding_mb", FIELD(max_non_split_rounding), KEPT, NULL},
    {"graph_capture_record_stream_reuse", FIELD(capture_reuse), KEPT, NULL},
    {"helper_thread", FIELD(helper_thread), KEPT, NULL},
    {"page_decay_ms", FIELD(page_decay_ms), KEPT, NULL},
    {"peer_access", FIELD(peer_access), FIXED, "xsa_enable_peer_access grants a device at run time"},
    {"ipc_handles", FIELD(ipc_handles), FIXED, "set it in XSALLOC_CONF before the process starts"},
    {"expandable_handle_mb", FIELD(handle_size), FIXED, "set it in XSALLOC_CONF before the process starts"},
    {"per_process_memory_fraction", FIELD(memory_fraction), FIXED,
     "xsa_set_memory_fraction (torch.cuda.set_per_process_memory_fraction) sets a device's at run time"},
};

/* A new pool option must be given a rule above: this fails to compile
 * until the table and the size agree. */
_Static_assert(sizeof(xsa_pool_options) == 200, "a pool option without a run-time rule in api/settings.c");

typedef struct merge_ctx {
    const xsa_config *given;
    const char *fn;
} merge_ctx;

static xsa_status merge(const xsa_pool_options *current, xsa_pool_options *next, void *ctxp) {
    const merge_ctx *ctx = ctxp;
    *next = ctx->given->pool; /* given keys' values, defaults elsewhere */
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char *to = (char *)next + keys[i].offset;
        const char *from = (const char *)current + keys[i].offset;
        bool gave = xsa_config_gave(ctx->given, keys[i].key);
        if (keys[i].rule == FIXED && gave && memcmp(to, from, keys[i].size) != 0)
            return xsa_fail(XSA_ERROR_NOT_SUPPORTED,
                            "%s: key '%s' cannot change after initialisation (the pools are made with it); %s",
                            ctx->fn, keys[i].key, keys[i].instead);
        if (keys[i].rule != RESET && !gave) memcpy(to, from, keys[i].size);
    }
    /* The rules config.c applies to one string, across old and new: decay
     * runs on the helper thread only, so asking for it turns the helper on
     * and turning the helper off turns it off (both given at odds fail to
     * parse). */
    if (!next->helper_thread && next->page_decay_ms) {
        if (xsa_config_gave(ctx->given, "page_decay_ms"))
            next->helper_thread = true;
        else
            next->page_decay_ms = 0;
    }
    /* Page recycling turned off takes the decay not asked for with it
     * (decay keeps its peak by moving pages; config.c). */
    if (xsa_config_gave(ctx->given, "page_recycling") && !next->page_recycling &&
        !xsa_config_gave(ctx->given, "page_decay_ms"))
        next->page_decay_ms = 0;
    const char *needs = next->peer_access ? "peer_access" : next->ipc_handles ? "ipc_handles" : NULL;
    if (needs && !next->expandable_segments)
        return xsa_fail(XSA_ERROR_NOT_SUPPORTED,
                        "%s: key 'expandable_segments' cannot be False while %s is True (it needs expandable "
                        "segments)", ctx->fn, needs);
    return XSA_SUCCESS;
}

/* Parses conf and checks it against the settings in use; applies it when
 * `apply`. */
static xsa_status change(const char *fn, const char *conf, bool apply) {
    if (!conf) return xsa_fail(XSA_ERROR_INVALID_VALUE, "%s: conf is NULL", fn);
    xsa_config given;
    char why[1024];
    if (!xsa_config_parse(conf, &given, why, sizeof why)) return xsa_fail(XSA_ERROR_CONFIG, "%s: %s", fn, why);
    merge_ctx ctx = {&given, fn};
    xsa_status st = xsa_api_change_options(merge, &ctx, conf, apply);
    if (st == XSA_SUCCESS && apply && given.ignored[0]) xsa_config_name_ignored(fn, given.ignored);
    /* With the helper on, it looks at the pools' new settings (decay). */
    xsa_pool_options now;
    if (st == XSA_SUCCESS && apply && (xsa_api_options(&now), now.helper_thread)) xsa_helper_wake(NULL, -1);
    return st;
}

xsa_status xsa_set_allocator_settings(const char *conf) { return change("xsa_set_allocator_settings", conf, true); }

xsa_status xsa_check_allocator_settings(const char *conf) {
    return change("xsa_check_allocator_settings", conf, false);
}
