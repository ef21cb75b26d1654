/*
 * fragmentation: the benchmark's main job. Replays every bundled trace in
 * three modes and prints one table beside PyTorch's figures, plus one SVG
 * per trace of reserved and allocated memory over the trace.
 *
 *   bazel run //benchmarks:fragmentation -- [--driver sim|cuda] [--out DIR] [--traces DIR] [--gpu-lag N]
 *
 * Modes: classic (cuMemAlloc segments, PyTorch's native allocator),
 * expandable (expandable segments without page recycling: PyTorch's
 * expandable_segments:True) and recycling (xsalloc's page recycling).
 * Each runs at GPU lag 0 and, on the simulated driver, again at lag N
 * (default XSA_REPLAY_DEFAULT_GPU_LAG): the GPU N events behind the CPU,
 * whose peak reserved, ratio and violations stand beside. The plots are
 * lag 0's.
 *
 * Design: traces are found through Bazel's runfiles (they are `data` of this
 * binary) or the workspace (trace_files); each replay is a fresh xsalloc
 * instance (trace/replay), whose series CSV goes to a memory stream and is
 * parsed back for the plot (svg_plot). GB = 1e9 bytes, as in the traces'
 * README.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchmarks/cli.h"
#include "benchmarks/svg_plot.h"
#include "benchmarks/trace_files.h"
#include "trace/replay.h"
#include "trace/trace.h"

#define GB 1e9
#define N_MODES 3
#define PATH_LEN (XSA_TRACE_FILES_DIR_LEN + 512) /* a directory and a file name */

static const struct mode {
    const char *name, *conf;
    const char *color; /* in the SVG */
} modes[N_MODES] = {
    {"classic", "expandable_segments:False", "#d62728"},
    {"expandable", "expandable_segments:True,page_recycling:False", "#1f77b4"},
    {"recycling", "expandable_segments:True,page_recycling:True", "#2ca02c"},
};

/* benchmarks/traces/README.md: PyTorch 2.11 on an H100. */
static const struct pytorch_figures {
    const char *trace;
    double native_gb, native_ratio, expandable_gb, expandable_ratio, async_ratio;
} pytorch[] = {
    {"gpt2_varlen", 36.58, 1.605, 24.57, 1.079, 1.084},
    {"resnet_varbatch", 5.78, 1.417, 4.13, 1.015, 1.014},
};

typedef struct series {
    size_t n;
    double *event, *allocated, *reserved; /* bytes */
} series;

typedef struct run {
    int ok, skipped;
    xsa_replay_result r;
    series s;
    /* At options.lag (sim only): ran, passed, its figures. */
    int lag_ran, lag_ok;
    xsa_replay_result lag_r;
} run;

typedef struct options {
    const char *driver, *out, *traces, *gpu_lag;
    int64_t lag;
} options;

/* ---- replaying ---- */

static int parse_series(const char *csv, series *s) {
    size_t lines = 0;
    for (const char *p = csv; (p = strchr(p, '\n')); p++) lines++;
    s->event = malloc(lines * sizeof *s->event);
    s->allocated = malloc(lines * sizeof *s->allocated);
    s->reserved = malloc(lines * sizeof *s->reserved);
    if (!s->event || !s->allocated || !s->reserved) return -1;
    const char *p = strchr(csv, '\n'); /* skip the header */
    /* event,allocated,reserved,allocated_peak,reserved_peak: plot the peaks
     * between samples, so that short spikes show. */
    for (char *end; p && p[1]; p = strchr(end, '\n'), s->n++) {
        double v[5];
        end = (char *)p;
        for (int i = 0; i < 5; i++) v[i] = (double)strtoll(end + 1, &end, 10);
        s->event[s->n] = v[0];
        s->allocated[s->n] = v[3];
        s->reserved[s->n] = v[4];
    }
    return 0;
}

static void replay_mode(const xsa_trace *t, const char *path, const options *o, const struct mode *m, run *out) {
    char err[1024], *csv = NULL;
    size_t csv_len = 0;
    FILE *mem = open_memstream(&csv, &csv_len);
    if (!mem) {
        fprintf(stderr, "fragmentation: out of memory\n");
        return;
    }
    xsa_replay_options ro = {.driver = o->driver, .conf = m->conf, .series = mem};
    int rc = xsa_replay(t, &ro, &out->r, err, sizeof err);
    fclose(mem);
    if (rc) fprintf(stderr, "fragmentation: %s, %s: %s\n", path, m->name, err);
    else if (parse_series(csv, &out->s)) fprintf(stderr, "fragmentation: out of memory\n");
    else out->ok = 1;
    free(csv);
    if (!out->ok || strcmp(out->r.driver, "sim")) return; /* a real GPU has its own lag */
    ro = (xsa_replay_options){.driver = o->driver, .conf = m->conf, .gpu_lag = o->lag};
    out->lag_ran = 1;
    out->lag_ok = xsa_replay(t, &ro, &out->lag_r, err, sizeof err) == 0;
    if (!out->lag_ok) fprintf(stderr, "fragmentation: %s, %s, lag %" PRId64 ": %s\n", path, m->name, o->lag, err);
}

/* ---- the table ---- */

static const struct pytorch_figures *pytorch_for(const char *trace) {
    for (size_t i = 0; i < sizeof pytorch / sizeof *pytorch; i++)
        if (strcmp(pytorch[i].trace, trace) == 0) return &pytorch[i];
    return NULL;
}

#define ROW "| %-22s | %-10s | %10s | %10s | %6s | %-26s | %14s | %6s | %5s | %8s | %-30s | %13s |\n"

static void print_header(const char *driver, int64_t lag) {
    printf("\nFragmentation on the bundled traces (driver: %s; GB = 1e9 bytes; ratio = peak reserved / peak allocated;\n"
           "lag %" PRId64 ": the simulated GPU runs %" PRId64 " trace events behind the CPU, viol. = its violations)\n\n",
           driver, lag, lag);
    char resv[32];
    snprintf(resv, sizeof resv, "resv, lag %" PRId64, lag);
    printf(ROW, "trace", "mode", "peak alloc", "peak resv", "ratio", "PyTorch (same mode)", resv, "ratio", "viol.",
           "ns/event", "driver calls (*)", "H100 ms (**)");
    printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------", "------------", "------------",
           "------------", "--------", "----------------------------", "----------------", "--------", "-------",
           "----------", "--------------------------------", "--------------");
}

/* The lag columns: figures of a pass failed by violations are still shown. */
static void lag_cells(const run *rn, char *resv, char *ratio, char *viol, size_t len) {
    const xsa_replay_result *r = &rn->lag_r;
    if (!rn->lag_ran) {
        snprintf(resv, len, "%s", rn->ok ? "sim only" : "");
        ratio[0] = viol[0] = '\0';
    } else if (!rn->lag_ok && !r->violations) {
        snprintf(resv, len, "failed");
        ratio[0] = viol[0] = '\0';
    } else {
        snprintf(resv, len, "%8.2f GB", r->peak_reserved / GB);
        snprintf(ratio, len, "%6.3f", r->ratio);
        snprintf(viol, len, "%" PRIu64, r->violations);
    }
}

static void print_row(const char *trace, int mode, const run *rn) {
    const struct pytorch_figures *pt = pytorch_for(trace);
    char ref[64] = "-";
    if (pt && mode == 0) snprintf(ref, sizeof ref, "native %.2f GB, %.3f", pt->native_gb, pt->native_ratio);
    if (pt && mode > 0)
        snprintf(ref, sizeof ref, "expandable %.2f GB, %.3f", pt->expandable_gb, pt->expandable_ratio);
    if (!rn->ok) {
        printf(ROW, trace, modes[mode].name, rn->skipped ? "skipped" : "failed", "", "", ref, "", "", "", "",
               rn->skipped ? "multi-stream: sim driver only" : "see stderr", "");
        return;
    }
    const xsa_replay_result *r = &rn->r;
    char calls[96];
    snprintf(calls, sizeof calls, "%llu/%llu/%llu/%llu/%llu; %llu/%llu",
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_create), (unsigned long long)XSA_REPLAY_CALLS(r, mem_map),
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_unmap), (unsigned long long)XSA_REPLAY_CALLS(r, mem_release),
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_set_access),
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_alloc), (unsigned long long)XSA_REPLAY_CALLS(r, mem_free));
    char alloc[32], resv[32], ratio[16], lag_resv[32], lag_ratio[32], viol[32], ns[32], est[32] = "-";
    snprintf(alloc, sizeof alloc, "%7.2f GB", r->peak_allocated / GB);
    snprintf(resv, sizeof resv, "%7.2f GB", r->peak_reserved / GB);
    snprintf(ratio, sizeof ratio, "%6.3f", r->ratio);
    snprintf(ns, sizeof ns, "%8.0f", r->ns_per_event);
    /* cuMemAlloc and cuMemFree are not in the estimate's model. */
    if (strcmp(r->driver, "sim") == 0 && !XSA_REPLAY_CALLS(r, mem_alloc) && !XSA_REPLAY_CALLS(r, mem_free))
        snprintf(est, sizeof est, r->helper_est_h100_ns ? "%.1f+%.1f" : "%.1f",
                 (r->est_h100_driver_ns - r->helper_est_h100_ns) / 1e6, r->helper_est_h100_ns / 1e6);
    lag_cells(rn, lag_resv, lag_ratio, viol, sizeof lag_resv);
    printf(ROW, trace, modes[mode].name, alloc, resv, ratio, ref, lag_resv, lag_ratio, viol, ns, calls, est);
}

static void print_footer(void) {
    printf("\n(*) cuMemCreate/cuMemMap/cuMemUnmap/cuMemRelease/cuMemSetAccess; cuMemAlloc/cuMemFree, during the event loop at lag 0,\n"
           "the helper thread's included.\n");
    printf("(**) The simulated driver's estimate of the CPU time the loop's driver calls would take on an H100 with kernels\n"
           "queued (sim/cost.c: by call, and by handle mapping for cuMemSetAccess and cuMemUnmap), at lag 0; A+B: A on the\n"
           "allocation path, B on the helper thread (decay purging, on by default with page recycling, on the trace's time);\n"
           "'-' where cuMemAlloc/cuMemFree were called (not in the model) or on the cuda driver.\n");
    printf("\nPyTorch figures: PyTorch 2.11's caching allocator replaying the same traces on an H100 "
           "(benchmarks/traces/README.md).\ncudaMallocAsync ran the workloads themselves at ratio");
    for (size_t i = 0; i < sizeof pytorch / sizeof *pytorch; i++)
        printf("%s %.3f (%s)", i ? "," : "", pytorch[i].async_ratio, pytorch[i].trace);
    printf(".\n");
}

/* ---- the plot ---- */

static int write_svg(const char *path, const char *trace, const run *runs) {
    xsa_svg_line lines[2 * N_MODES];
    size_t n = 0;
    for (int m = 0; m < N_MODES; m++) {
        const run *rn = &runs[m];
        if (!rn->ok) continue;
        xsa_svg_line *l = &lines[n++];
        *l = (xsa_svg_line){rn->s.event, rn->s.reserved, rn->s.n, modes[m].color, 0, ""};
        snprintf(l->legend, sizeof l->legend, "%s reserved (peak %.2f GB, ratio %.3f)", modes[m].name,
                 rn->r.peak_reserved / GB, rn->r.ratio);
        l = &lines[n++];
        *l = (xsa_svg_line){rn->s.event, rn->s.allocated, rn->s.n, modes[m].color, 1, ""};
        snprintf(l->legend, sizeof l->legend, "%s allocated (peak %.2f GB)", modes[m].name, rn->r.peak_allocated / GB);
    }
    char title[320];
    snprintf(title, sizeof title, "%s: reserved and allocated memory over the trace", trace);
    return xsa_svg_plot(path, title, "event", lines, n);
}

/* ---- main ---- */

static int usage(void) {
    fprintf(stderr, "usage: fragmentation [--driver sim|cuda] [--out DIR] [--traces DIR] [--gpu-lag N]\n");
    return 2;
}

static int parse_args(int argc, char **argv, options *o) {
    const xsa_cli_option opts[] = {
        {"--driver", &o->driver}, {"--out", &o->out}, {"--traces", &o->traces}, {"--gpu-lag", &o->gpu_lag},
    };
    if (xsa_cli_parse(argc, argv, opts, 4, NULL, 0, NULL) != XSA_CLI_OK) return usage();
    long long lag = XSA_REPLAY_DEFAULT_GPU_LAG;
    if (o->gpu_lag && !xsa_cli_count(o->gpu_lag, 1, INT64_MAX, &lag)) {
        fprintf(stderr, "fragmentation: --gpu-lag is a number of trace events above 0 (lag 0 is always run)\n");
        return usage();
    }
    o->lag = lag;
    return 0;
}

static void free_series(series *s) {
    free(s->event);
    free(s->allocated);
    free(s->reserved);
}

/* Replays one trace in every mode, prints its rows and writes its SVG.
 * 0, or -1 if anything failed. */
static int do_trace(const options *o, const char *dir, const char *file, const char *out_dir, int *header) {
    char path[PATH_LEN], name[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    xsa_trace_name(file, name, sizeof name);
    xsa_trace t;
    if (xsa_cli_load_trace("fragmentation", path, &t)) return -1;
    run runs[N_MODES] = {0};
    int failed = 0;
    for (int m = 0; m < N_MODES; m++) {
        fprintf(stderr, "fragmentation: %s, %s (%zu events)...\n", name, modes[m].name, t.n_events);
        replay_mode(&t, path, o, &modes[m], &runs[m]);
        /* The cuda driver refuses multi-stream traces: a skip, not a failure. */
        runs[m].skipped = !runs[m].ok && t.n_streams > 1 && strcmp(runs[m].r.driver, "cuda") == 0;
        failed |= (!runs[m].ok && !runs[m].skipped) || (runs[m].lag_ran && !runs[m].lag_ok);
    }
    xsa_trace_free(&t);
    if (!*header) print_header(runs[0].ok ? runs[0].r.driver : o->driver ? o->driver : "default", o->lag);
    *header = 1;
    for (int m = 0; m < N_MODES; m++) print_row(name, m, &runs[m]);
    fflush(stdout);
    char svg[PATH_LEN];
    snprintf(svg, sizeof svg, "%s/%s.svg", out_dir, name);
    if (write_svg(svg, name, runs)) {
        fprintf(stderr, "fragmentation: cannot write %s\n", svg);
        failed = 1;
    }
    for (int m = 0; m < N_MODES; m++) free_series(&runs[m].s);
    return failed ? -1 : 0;
}

int main(int argc, char **argv) {
    options o = {0};
    if (parse_args(argc, argv, &o)) return 2;
    char dir[XSA_TRACE_FILES_DIR_LEN], out_dir[XSA_TRACE_FILES_DIR_LEN];
    char *names[XSA_TRACE_FILES_MAX];
    int n = xsa_trace_files_find(o.traces, argv[0], dir, sizeof dir, names, XSA_TRACE_FILES_MAX);
    if (n == 0) {
        fprintf(stderr, "fragmentation: no *.trace.gz found (run it with bazel run, or pass --traces DIR)\n");
        return 1;
    }
    if (xsa_trace_files_out_dir("fragmentation", o.out, out_dir, sizeof out_dir)) return 1;
    int failed = 0, header = 0;
    for (int i = 0; i < n; i++) {
        failed |= do_trace(&o, dir, names[i], out_dir, &header) != 0;
        free(names[i]);
    }
    print_footer();
    printf("Plots: %s/<trace>.svg\n", out_dir);
    return failed;
}
