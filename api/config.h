/*
 * api/config: the XSALLOC_CONF parser.
 *
 * XSALLOC_CONF (or the string given to xsa_init) uses the syntax and keys of
 * PyTorch's PYTORCH_CUDA_ALLOC_CONF: comma-separated `key:value` items, e.g.
 *   "max_split_size_mb:512, roundup_power2_divisions:[256:1,512:2,>:8]"
 * The grammar, every key, and what is accepted, ignored or rejected are
 * documented at the top of config.c and in api/CONFIG.md.
 */
#ifndef XSA_API_CONFIG_H
#define XSA_API_CONFIG_H

#include <stddef.h>

#include "pool/options.h"

typedef struct xsa_config {
    xsa_pool_options pool; /* from pool/options.h */
} xsa_config;

/* Parses `text` (NULL, "" or only whitespace = all defaults). On error
 * returns 0 and writes one sentence to err (when err is not NULL and errlen
 * > 0) naming the key, the value and what is accepted; *out is then left
 * unchanged. Returns 1 on success, with err set to "". Thread-safe and
 * independent of the process locale. */
int xsa_config_parse(const char *text, xsa_config *out, char *err, size_t errlen);

#endif
