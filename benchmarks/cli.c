/* benchmarks/cli: the trace tools' shared command-line steps (cli.h). */
#include "benchmarks/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

xsa_cli_result xsa_cli_parse(int argc, char **argv, const xsa_cli_option *opts, int n_opts, const char **positional,
                             int max_positional, int *n_positional) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const xsa_cli_option *o = NULL;
        for (int k = 0; k < n_opts && !o; k++)
            if (strcmp(s, opts[k].name) == 0) o = &opts[k];
        if (o) {
            if (++i >= argc) return XSA_CLI_NO_VALUE;
            *o->value = argv[i];
        } else if (s[0] == '-' && s[1]) {
            return XSA_CLI_UNKNOWN;
        } else if (n == max_positional) {
            return XSA_CLI_EXTRA;
        } else {
            positional[n++] = s;
        }
    }
    if (n_positional) *n_positional = n;
    return XSA_CLI_OK;
}

bool xsa_cli_count(const char *s, long long min, long long max, long long *v) {
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return !(errno || end == s || *end || *v < min || *v > max);
}

bool xsa_cli_driver_ok(const char *driver) { return !driver || !strcmp(driver, "sim") || !strcmp(driver, "cuda"); }

int xsa_cli_load_trace(const char *prog, const char *path, xsa_trace *t) {
    char err[1024];
    if (xsa_trace_load(path, t, err, sizeof err) == 0) return 0;
    fprintf(stderr, "%s: %s\n", prog, err);
    return -1;
}
