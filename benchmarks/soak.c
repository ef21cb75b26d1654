/*
 * soak: replays each bundled trace back to back many times in one xsalloc
 * instance, with the GPU behind the CPU, and shows whether memory creeps
 * up over a long job: peak reserved and allocated bytes per pass, and the
 * process's heap. One table, one SVG per trace.
 *
 *   bazel run //benchmarks:soak -- [--driver sim|cuda] [--conf STR] [--passes N] [--gpu-lag N]
 *                                  [--out DIR] [--traces DIR]
 *
 * Design: one replay session (trace/replay) per trace: xsalloc is
 * initialised once, replays the trace --passes times (default 50; each
 * pass frees what the trace left live) and is shut down at the end. The
 * peak stats are reset between passes, so each pass's peaks are its own.
 * After each pass the heap in use (glibc's mallinfo2 uordblks: xsalloc's
 * records, the loaded trace, the simulated driver's books) and the
 * allocator's segment count are read: a leak shows as growth from the
 * first pass to the last. The GPU lag defaults to the benchmarks' default
 * (XSA_REPLAY_DEFAULT_GPU_LAG) on the simulated driver and to 0 on a real
 * GPU, which has its own. GB = 1e9 bytes, MB = 1e6.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "api/devices.h"
#include "benchmarks/cli.h"
#include "benchmarks/svg_plot.h"
#include "benchmarks/trace_files.h"
#include "trace/replay.h"
#include "trace/trace.h"
#include "vmm/driver.h"
#include "xsalloc/xsalloc.h"

#define GB 1e9
#define MB 1e6
#define DEFAULT_PASSES 50
#define PATH_LEN (XSA_TRACE_FILES_DIR_LEN + 512) /* a directory and a file name */
#define COLOR "#2ca02c"

typedef struct options {
    const char *driver, *conf, *out, *traces, *passes_arg, *lag_arg;
    int passes;
    int64_t lag;
} options;

/* One pass's figures. */
typedef struct pass_stats {
    double pass, peak_reserved, peak_allocated; /* doubles: the plot's arrays */
    size_t heap;
    int64_t segments;
    uint64_t violations;
} pass_stats;

/* ---- arguments ---- */

static int usage(const char *why) {
    fprintf(stderr, "soak: %s\nusage: soak [--driver sim|cuda] [--conf STR] [--passes N] [--gpu-lag N] "
                    "[--out DIR] [--traces DIR]\n", why);
    return 2;
}

/* The lag when none is given: 0 on a real GPU, which has its own. */
static int64_t default_lag(const char *driver) {
    if (driver) return strcmp(driver, "cuda") ? XSA_REPLAY_DEFAULT_GPU_LAG : 0;
    char err[256];
    xsa_driver *d = xsa_driver_default(err, sizeof err);
    return d && strcmp(d->name, "cuda") == 0 ? 0 : XSA_REPLAY_DEFAULT_GPU_LAG;
}

static int parse_args(int argc, char **argv, options *o) {
    const xsa_cli_option opts[] = {
        {"--driver", &o->driver}, {"--conf", &o->conf},         {"--out", &o->out},
        {"--traces", &o->traces}, {"--passes", &o->passes_arg}, {"--gpu-lag", &o->lag_arg},
    };
    switch (xsa_cli_parse(argc, argv, opts, 6, NULL, 0, NULL)) {
    case XSA_CLI_OK: break;
    case XSA_CLI_UNKNOWN: case XSA_CLI_EXTRA: return usage("unknown option");
    case XSA_CLI_NO_VALUE: return usage("an option needs a value");
    }
    if (!xsa_cli_driver_ok(o->driver)) return usage("--driver is sim or cuda");
    long long v = DEFAULT_PASSES;
    if (o->passes_arg && !xsa_cli_count(o->passes_arg, 1, 1000000, &v)) return usage("--passes is a number above 0");
    o->passes = (int)v;
    v = default_lag(o->driver);
    if (o->lag_arg && !xsa_cli_count(o->lag_arg, 0, INT64_MAX, &v)) return usage("--gpu-lag is a number, 0 or more");
    o->lag = v;
    return 0;
}

/* ---- one trace ---- */

/* The figures read after a pass. */
static void read_after_pass(pass_stats *ps, const xsa_replay_result *r) {
    ps->peak_reserved = (double)r->peak_reserved;
    ps->peak_allocated = (double)r->peak_allocated;
    ps->violations = r->violations;
    ps->heap = mallinfo2().uordblks;
    xsa_device_stats s;
    ps->segments = xsa_get_stats(0, &s) == XSA_SUCCESS ? s.segment[XSA_STAT_ALL].current : -1;
}

/* Runs the passes of one trace into ps[]; returns how many ran, and sets
 * *failed if any failed. A pass failed by violations has its figures and
 * the next one runs; any other failure ends the trace. A multi-stream
 * trace on the cuda driver is *skipped. */
static int soak_trace(const options *o, const xsa_trace *t, const char *name, pass_stats *ps, int *failed,
                      int *skipped) {
    char err[1024];
    xsa_replay_options ro = {.driver = o->driver, .conf = o->conf, .gpu_lag = o->lag};
    xsa_replay_session *s = xsa_replay_open(&ro, err, sizeof err);
    if (!s) {
        fprintf(stderr, "soak: %s: %s\n", name, err);
        *failed = 1;
        return 0;
    }
    int n = 0;
    for (; n < o->passes; n++) {
        xsa_status st = n ? xsa_reset_peak_stats(0) : XSA_SUCCESS;
        if (st != XSA_SUCCESS) {
            fprintf(stderr, "soak: %s: xsa_reset_peak_stats: %s\n", name, xsa_last_error());
            *failed = 1;
            break;
        }
        xsa_replay_result r;
        int rc = xsa_replay_pass(s, t, &r, err, sizeof err);
        if (rc && t->n_streams > 1 && strcmp(r.driver, "cuda") == 0) {
            *skipped = 1;
            break;
        }
        if (rc) {
            fprintf(stderr, "soak: %s, pass %d: %s\n", name, n + 1, err);
            *failed = 1;
            if (!r.violations) break;
        }
        ps[n].pass = n + 1;
        read_after_pass(&ps[n], &r);
    }
    if (xsa_replay_close(s, err, sizeof err)) {
        fprintf(stderr, "soak: %s: %s\n", name, err);
        *failed = 1;
    }
    return n;
}

/* ---- the table and the plot ---- */

#define ROW "| %-22s | %6s | %10s | %10s | %10s | %13s | %9s | %9s | %12s | %5s |\n"

static void print_header(const options *o) {
    const char *env, *source = xsa_config_env(&env);
    char conf[512];
    if (o->conf) snprintf(conf, sizeof conf, "conf \"%s\"", o->conf);
    else if (source) snprintf(conf, sizeof conf, "%s \"%s\"", source, env);
    else snprintf(conf, sizeof conf, "default conf");
    printf("\nSoak: each trace replayed %d times back to back in one xsalloc instance (driver: %s, GPU lag %" PRId64
           ", %s)\nGB = 1e9 bytes; peaks per pass (reset between passes); host heap = glibc mallinfo2 "
           "uordblks after the pass, MB = 1e6 bytes\n\n",
           o->passes, o->driver ? o->driver : "default", o->lag, conf);
    printf(ROW, "trace", "passes", "peak alloc", "resv 1st", "resv last", "resv max 2nd+", "heap 1st", "heap last",
           "segments 1/N", "viol.");
    printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------", "--------", "------------",
           "------------", "------------", "---------------", "-----------", "-----------", "--------------",
           "-------");
}

static void print_row(const char *name, const pass_stats *ps, int n, int skipped) {
    if (n == 0) {
        printf(ROW, name, "0", skipped ? "skipped" : "failed", skipped ? "multi-stream:" : "", skipped ? "sim only" : "",
               "", "", "", "", "");
        return;
    }
    double max_later = 0;
    uint64_t violations = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && ps[i].peak_reserved > max_later) max_later = ps[i].peak_reserved;
        violations += ps[i].violations;
    }
    const pass_stats *first = &ps[0], *last = &ps[n - 1];
    char passes[16], alloc[32], r1[32], rn[32], rmax[32], h1[32], hn[32], segs[32], viol[32];
    snprintf(passes, sizeof passes, "%d", n);
    snprintf(alloc, sizeof alloc, "%7.2f GB", first->peak_allocated / GB);
    snprintf(r1, sizeof r1, "%7.2f GB", first->peak_reserved / GB);
    snprintf(rn, sizeof rn, "%7.2f GB", last->peak_reserved / GB);
    if (n > 1) snprintf(rmax, sizeof rmax, "%7.2f GB", max_later / GB);
    else snprintf(rmax, sizeof rmax, "-");
    snprintf(h1, sizeof h1, "%6.1f MB", (double)first->heap / MB);
    snprintf(hn, sizeof hn, "%6.1f MB", (double)last->heap / MB);
    snprintf(segs, sizeof segs, "%" PRId64 "/%" PRId64, first->segments, last->segments);
    snprintf(viol, sizeof viol, "%" PRIu64, violations);
    printf(ROW, name, passes, alloc, r1, rn, rmax, h1, hn, segs, viol);
}

static int write_svg(const char *path, const char *name, const options *o, const pass_stats *ps, int n) {
    double *x = malloc((size_t)n * sizeof *x), *resv = malloc((size_t)n * sizeof *resv),
           *alloc = malloc((size_t)n * sizeof *alloc);
    int rc = -1;
    if (x && resv && alloc) {
        for (int i = 0; i < n; i++) {
            x[i] = ps[i].pass;
            resv[i] = ps[i].peak_reserved;
            alloc[i] = ps[i].peak_allocated;
        }
        xsa_svg_line lines[2] = {{x, resv, (size_t)n, COLOR, 0, ""}, {x, alloc, (size_t)n, COLOR, 1, ""}};
        snprintf(lines[0].legend, sizeof lines[0].legend, "peak reserved of the pass (first %.2f GB, last %.2f GB)",
                 resv[0] / GB, resv[n - 1] / GB);
        snprintf(lines[1].legend, sizeof lines[1].legend, "peak allocated of the pass (first %.2f GB)", alloc[0] / GB);
        char title[320];
        snprintf(title, sizeof title, "%s: %d passes in one xsalloc instance, GPU lag %" PRId64, name, n, o->lag);
        rc = xsa_svg_plot(path, title, "pass", lines, 2);
    }
    free(x);
    free(resv);
    free(alloc);
    return rc;
}

/* Soaks one trace file: its row and its SVG. 0, or -1 if anything failed. */
static int do_trace(const options *o, const char *dir, const char *file, const char *out_dir, pass_stats *ps) {
    char path[PATH_LEN], name[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    xsa_trace_name(file, name, sizeof name);
    xsa_trace t;
    if (xsa_cli_load_trace("soak", path, &t)) return -1;
    fprintf(stderr, "soak: %s, %d passes of %zu events...\n", name, o->passes, t.n_events);
    int failed = 0, skipped = 0, n = soak_trace(o, &t, name, ps, &failed, &skipped);
    xsa_trace_free(&t);
    print_row(name, ps, n, skipped);
    fflush(stdout);
    char svg[PATH_LEN];
    snprintf(svg, sizeof svg, "%s/%s.soak.svg", out_dir, name);
    if (n > 0 && write_svg(svg, name, o, ps, n)) {
        fprintf(stderr, "soak: cannot write %s\n", svg);
        failed = 1;
    }
    return failed ? -1 : 0;
}

int main(int argc, char **argv) {
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    char dir[XSA_TRACE_FILES_DIR_LEN], out_dir[XSA_TRACE_FILES_DIR_LEN];
    char *names[XSA_TRACE_FILES_MAX];
    int n = xsa_trace_files_find(o.traces, argv[0], dir, sizeof dir, names, XSA_TRACE_FILES_MAX);
    if (n == 0) {
        fprintf(stderr, "soak: no *.trace.gz found (run it with bazel run, or pass --traces DIR)\n");
        return 1;
    }
    pass_stats *ps = calloc((size_t)o.passes, sizeof *ps);
    if (!ps || xsa_trace_files_out_dir("soak", o.out, out_dir, sizeof out_dir)) {
        if (!ps) fprintf(stderr, "soak: out of memory\n");
        free(ps);
        return 1;
    }
    print_header(&o);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        failed |= do_trace(&o, dir, names[i], out_dir, ps) != 0;
        free(names[i]);
    }
    free(ps);
    printf("\nPlots: %s/<trace>.soak.svg\n", out_dir);
    return failed;
}
