/*
 * benchmarks/trace_files: where the benchmarks over every bundled trace
 * (fragmentation, soak) find the traces and put their plots.
 *
 * Design: the traces are `data` of those binaries, so under `bazel run`
 * they are in the runfiles; otherwise the workspace or the working
 * directory holds them. Plots go to the workspace's benchmarks/out/ under
 * `bazel run`, else ./benchmarks-out, unless a directory is given.
 */
#ifndef XSA_BENCHMARKS_TRACE_FILES_H
#define XSA_BENCHMARKS_TRACE_FILES_H

#include <stddef.h>

#define XSA_TRACE_FILES_MAX 32
#define XSA_TRACE_FILES_DIR_LEN 2048

/*
 * The names of the *.trace.gz files (malloc'd, sorted; at most `max`) of
 * `dir_arg` if not NULL, else of the first candidate directory holding
 * any; the directory goes to dir. Returns their count (0: none found).
 */
int xsa_trace_files_find(const char *dir_arg, const char *argv0, char *dir, size_t len, char **names, int max);

/* Makes the output directory (out_arg if not NULL) and writes its path to
 * dir. 0, or -1 with a line on stderr starting with `prog`. */
int xsa_trace_files_out_dir(const char *prog, const char *out_arg, char *dir, size_t len);

#endif
