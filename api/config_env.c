/*
 * api/config_env: the environment's settings, PyTorch's variable with
 * XSALLOC_CONF layered over it, and the ignored keys named once (design in
 * config_env.h).
 *
 * Design: the layering is the parser's own (xsa_config_parse_over): the
 * PyTorch variable is parsed from the defaults, XSALLOC_CONF from its
 * result, so every rule of one string holds for the two, and a key named
 * in both takes XSALLOC_CONF's value. The keys already named are kept in a
 * small table under a mutex of its own: start-up (api/devices.c) and
 * run-time settings (api/settings.c) both name through it.
 */
#include "api/config_env.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int xsa_config_from_env(xsa_config *out, xsa_config_var *xsalloc, xsa_config_var *torch, char *err, size_t errlen) {
    *xsalloc = (xsa_config_var){"XSALLOC_CONF", getenv("XSALLOC_CONF")};
    *torch = (xsa_config_var){"PYTORCH_ALLOC_CONF", getenv("PYTORCH_ALLOC_CONF")};
    if (!torch->text) *torch = (xsa_config_var){"PYTORCH_CUDA_ALLOC_CONF", getenv("PYTORCH_CUDA_ALLOC_CONF")};
    char why[1024];
    xsa_config under;
    if (!xsa_config_parse(torch->text, &under, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", torch->name, why);
        return 0;
    }
    if (!xsa_config_parse_over(xsalloc->text, &under, out, why, sizeof why)) {
        if (torch->text && xsalloc->text)
            snprintf(err, errlen, "%s over %s: %s", xsalloc->name, torch->name, why);
        else
            snprintf(err, errlen, "%s: %s", xsalloc->name, why);
        return 0;
    }
    return 1;
}

void xsa_config_name_ignored(const char *who, const char *ignored) {
    static char named[32][64];
    static size_t n_named;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    char fresh[XSA_CONFIG_IGNORED_MAX] = "";
    pthread_mutex_lock(&lock);
    for (const char *p = ignored; *p; p += strspn(p, ", ")) {
        size_t n = strcspn(p, ",");
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        p += n;
        bool seen = false;
        for (size_t i = 0; i < n_named && !seen; i++) seen = strcmp(named[i], key) == 0;
        if (seen) continue;
        if (n_named < sizeof named / sizeof named[0]) strcpy(named[n_named++], key);
        size_t len = strlen(fresh);
        snprintf(fresh + len, sizeof fresh - len, "%s%s", len ? ", " : "", key);
    }
    pthread_mutex_unlock(&lock);
    if (fresh[0])
        fprintf(stderr, "xsalloc: %s: ignoring %s (xsalloc cannot honour these PyTorch keys; docs/configuration.md "
                        "says why)\n", who, fresh);
}
