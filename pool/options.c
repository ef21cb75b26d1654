/* pool/options: defaults of the pool settings. */
#include "pool/options.h"

#include <string.h>

void xsa_pool_options_default(xsa_pool_options *o) {
    memset(o, 0, sizeof *o);
    o->expandable_segments = true;
    o->page_recycling = true;
    o->page_recycling_headroom = 0.01;
    o->max_split_size = SIZE_MAX;
    o->max_non_split_rounding = 20u << 20;
    o->garbage_collection_threshold = 0.0;
    o->memory_fraction = 1.0;
    o->handle_size = 20u << 20;
    o->helper_thread = XSA_HELPER_BY_DEFAULT;
    o->page_decay_ms = XSA_HELPER_BY_DEFAULT ? XSA_DEFAULT_PAGE_DECAY_MS : 0;
}
