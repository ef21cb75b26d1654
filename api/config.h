/*
 * api/config: the XSALLOC_CONF parser.
 *
 * XSALLOC_CONF (or the string given to xsa_init) uses the syntax and keys of
 * PyTorch's PYTORCH_CUDA_ALLOC_CONF: comma-separated `key:value` items, e.g.
 *   "max_split_size_mb:512, roundup_power2_divisions:[256:1,512:2,>:8]"
 * The grammar, every key, and what is accepted, ignored or rejected are
 * documented at the top of config.c and in docs/configuration.md.
 *
 * Without a string, the settings come from the environment: PyTorch's
 * variable, with XSALLOC_CONF layered over it key by key
 * (api/config_env.h), so that settings written for PyTorch apply
 * unchanged and XSALLOC_CONF changes what it names.
 */
#ifndef XSA_API_CONFIG_H
#define XSA_API_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "pool/options.h"

/* Room for the names of every key accepted and ignored, comma-separated. */
#define XSA_CONFIG_IGNORED_MAX 512

typedef struct xsa_config {
    xsa_pool_options pool; /* from pool/options.h */
    /* The PyTorch keys given that xsalloc accepts but cannot honour (the
     * "accepted and ignored" rows of config.c's table), as written, joined
     * by ", "; "" when none. */
    char ignored[XSA_CONFIG_IGNORED_MAX];
    uint64_t given; /* the keys given, one bit each (xsa_config_gave) */
} xsa_config;

/* The first of XSALLOC_CONF, PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF
 * that is set (an empty value counts), with its value in *text; NULL with
 * *text = NULL when none is set: the variable tools name beside their
 * results. xsalloc's own settings layer XSALLOC_CONF over PyTorch's
 * variable (api/config_env.h). */
const char *xsa_config_env(const char **text);

/* Parses `text` (NULL, "" or only whitespace = all defaults). On error
 * returns 0 and writes one sentence to err (when err is not NULL and errlen
 * > 0) naming the key, the value and what is accepted; *out is then left
 * unchanged. Returns 1 on success, with err set to "". Thread-safe and
 * independent of the process locale. */
int xsa_config_parse(const char *text, xsa_config *out, char *err, size_t errlen);

/* The same, starting from *base instead of the defaults: each key `text`
 * gives replaces base's value (a key may repeat across the two, not within
 * text), the ignored keys and the keys given add up, and the rules that
 * join keys (peer_access needs expandable segments) hold for the result. */
int xsa_config_parse_over(const char *text, const xsa_config *base, xsa_config *out, char *err, size_t errlen);

/* Did the text parsed into cfg give `key` (or an alias of it)? For
 * settings changed at run time, where a key not given keeps its value. */
int xsa_config_gave(const xsa_config *cfg, const char *key);

#endif
