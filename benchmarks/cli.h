/*
 * benchmarks/cli: what the command lines of the trace tools (replay,
 * fragmentation, soak) share: "--name value" options, whole numbers,
 * the driver's name, and loading a trace with its error on stderr. Each
 * tool keeps its own usage line and messages.
 */
#ifndef XSA_BENCHMARKS_CLI_H
#define XSA_BENCHMARKS_CLI_H

#include <stdbool.h>

#include "trace/trace.h"

/* An option "--name value": value is set to the argument after it. */
typedef struct xsa_cli_option {
    const char *name;
    const char **value;
} xsa_cli_option;

typedef enum xsa_cli_result {
    XSA_CLI_OK,
    XSA_CLI_UNKNOWN,   /* an argument starting with '-' that names no option */
    XSA_CLI_NO_VALUE,  /* an option last, without its value */
    XSA_CLI_EXTRA,     /* more other arguments than max_positional */
} xsa_cli_result;

/* Parses argv[1..argc) against opts[0..n_opts): the other arguments (a
 * lone "-" included) go to positional[0..max_positional) in order, and
 * their count to *n_positional (may be NULL when max_positional is 0).
 * The first problem found is returned. */
xsa_cli_result xsa_cli_parse(int argc, char **argv, const xsa_cli_option *opts, int n_opts, const char **positional,
                             int max_positional, int *n_positional);

/* A whole number in [min, max] from s (all of it, base 10). */
bool xsa_cli_count(const char *s, long long min, long long max, long long *v);

/* NULL (the default driver), "sim" or "cuda". */
bool xsa_cli_driver_ok(const char *driver);

/* Loads the trace at path; on failure prints "<prog>: <why>" on stderr
 * and returns -1 (with *t empty). */
int xsa_cli_load_trace(const char *prog, const char *path, xsa_trace *t);

#endif
