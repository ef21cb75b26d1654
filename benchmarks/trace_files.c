/* benchmarks/trace_files: the bundled traces and the plots' directory (trace_files.h). */
#include "benchmarks/trace_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SUFFIX ".trace.gz"

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Names of dir's *.trace.gz files, sorted; their count (0 if none or no dir). */
static int list_traces(const char *dir, char **names, int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; n < max && (e = readdir(d));)
        if (has_suffix(e->d_name, SUFFIX) && (names[n] = strdup(e->d_name))) n++;
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    return n;
}

int xsa_trace_files_find(const char *dir_arg, const char *argv0, char *dir, size_t len, char **names, int max) {
    const char *runfiles = getenv("RUNFILES_DIR"), *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
    char cand[4][XSA_TRACE_FILES_DIR_LEN];
    int k = 0;
    if (runfiles) snprintf(cand[k++], sizeof cand[0], "%s/xsalloc/benchmarks/traces", runfiles);
    snprintf(cand[k++], sizeof cand[0], "%s.runfiles/xsalloc/benchmarks/traces", argv0);
    snprintf(cand[k++], sizeof cand[0], "benchmarks/traces");
    if (ws) snprintf(cand[k++], sizeof cand[0], "%s/benchmarks/traces", ws);
    for (int i = dir_arg ? -1 : 0; i < k; i++) {
        snprintf(dir, len, "%s", i < 0 ? dir_arg : cand[i]);
        int n = list_traces(dir, names, max);
        if (n > 0 || i < 0) return n;
    }
    return 0;
}

int xsa_trace_files_out_dir(const char *prog, const char *out_arg, char *dir, size_t len) {
    const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
    if (out_arg) snprintf(dir, len, "%s", out_arg);
    else if (ws) snprintf(dir, len, "%s/benchmarks/out", ws);
    else snprintf(dir, len, "benchmarks-out");
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "%s: cannot create %s: %s\n", prog, dir, strerror(errno));
        return -1;
    }
    return 0;
}
