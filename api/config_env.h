/*
 * api/config_env: the settings the environment gives, and the one line
 * that names the PyTorch keys xsalloc accepts but ignores.
 *
 * PyTorch reads PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF; xsalloc
 * reads the same variable, then XSALLOC_CONF over it key by key, so a job
 * tuned for PyTorch keeps its settings and XSALLOC_CONF changes only the
 * keys it names (docs/configuration.md).
 */
#ifndef XSA_API_CONFIG_ENV_H
#define XSA_API_CONFIG_ENV_H

#include <stddef.h>

#include "api/config.h"

/* One environment variable: its name, and its value (NULL when unset). */
typedef struct xsa_config_var {
    const char *name;
    const char *text;
} xsa_config_var;

/* Parses the environment's settings into *out: PyTorch's variable
 * (*torch: the one PyTorch reads, text NULL when neither is set), then
 * XSALLOC_CONF (*xsalloc) over it. Returns 1, or 0 with one sentence in
 * err naming the variable at fault (both, for a rule that joins keys of
 * the two) and *out unchanged. */
int xsa_config_from_env(xsa_config *out, xsa_config_var *xsalloc, xsa_config_var *torch, char *err, size_t errlen);

/* Names on stderr, in one line beginning "xsalloc: WHO: ignoring", the
 * keys of `ignored` (xsa_config.ignored: names joined by ", ") that no
 * earlier call named in this process, so that each is said once, whether
 * it came at start-up or at run time. */
void xsa_config_name_ignored(const char *who, const char *ignored);

#endif
