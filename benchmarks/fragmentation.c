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
 * binary) or the workspace; each replay is a fresh xsalloc instance
 * (replay_lib), whose series CSV goes to a memory stream and is parsed back
 * for the plot. The SVG is written by hand. GB = 1e9 bytes, as in the
 * traces' README.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "benchmarks/replay_lib.h"
#include "benchmarks/trace.h"

#define GB 1e9
#define MAX_TRACES 32
#define N_MODES 3
#define DIR_LEN 2048 /* directories; file paths get room for a name more */
#define PATH_LEN (DIR_LEN + 512)

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

/* ---- finding the traces ---- */

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of dir's *.trace.gz files, sorted; their count (0 if none or no dir). */
static int list_traces(const char *dir, char **names) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; n < MAX_TRACES && (e = readdir(d));)
        if (has_suffix(e->d_name, ".trace.gz")) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    return n;
}

/* The first candidate directory holding traces: runfiles first (the
 * `data` of this binary), then the workspace and the working directory. */
static int find_traces(const options *o, const char *argv0, char *dir, size_t len, char **names) {
    const char *runfiles = getenv("RUNFILES_DIR"), *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
    char cand[4][DIR_LEN];
    int k = 0;
    if (runfiles) snprintf(cand[k++], sizeof cand[0], "%s/xsalloc/benchmarks/traces", runfiles);
    snprintf(cand[k++], sizeof cand[0], "%s.runfiles/xsalloc/benchmarks/traces", argv0);
    snprintf(cand[k++], sizeof cand[0], "benchmarks/traces");
    if (ws) snprintf(cand[k++], sizeof cand[0], "%s/benchmarks/traces", ws);
    for (int i = o->traces ? -1 : 0; i < k; i++) {
        snprintf(dir, len, "%s", i < 0 ? o->traces : cand[i]);
        int n = list_traces(dir, names);
        if (n > 0 || i < 0) return n;
    }
    return 0;
}

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

#define ROW "| %-22s | %-10s | %10s | %10s | %6s | %-26s | %14s | %6s | %5s | %8s | %-30s |\n"

static void print_header(const char *driver, int64_t lag) {
    printf("\nFragmentation on the bundled traces (driver: %s; GB = 1e9 bytes; ratio = peak reserved / peak allocated;\n"
           "lag %" PRId64 ": the simulated GPU runs %" PRId64 " trace events behind the CPU, viol. = its violations)\n\n",
           driver, lag, lag);
    char resv[32];
    snprintf(resv, sizeof resv, "resv, lag %" PRId64, lag);
    printf(ROW, "trace", "mode", "peak alloc", "peak resv", "ratio", "PyTorch (same mode)", resv, "ratio", "viol.",
           "ns/event", "driver calls (*)");
    printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------", "------------", "------------",
           "------------", "--------", "----------------------------", "----------------", "--------", "-------",
           "----------", "--------------------------------");
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
               rn->skipped ? "multi-stream: sim driver only" : "see stderr");
        return;
    }
    const xsa_replay_result *r = &rn->r;
    char calls[96];
    snprintf(calls, sizeof calls, "%llu/%llu/%llu/%llu/%llu; %llu/%llu",
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_create), (unsigned long long)XSA_REPLAY_CALLS(r, mem_map),
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_unmap), (unsigned long long)XSA_REPLAY_CALLS(r, mem_release),
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_set_access),
             (unsigned long long)XSA_REPLAY_CALLS(r, mem_alloc), (unsigned long long)XSA_REPLAY_CALLS(r, mem_free));
    char alloc[32], resv[32], ratio[16], lag_resv[32], lag_ratio[32], viol[32], ns[32];
    snprintf(alloc, sizeof alloc, "%7.2f GB", r->peak_allocated / GB);
    snprintf(resv, sizeof resv, "%7.2f GB", r->peak_reserved / GB);
    snprintf(ratio, sizeof ratio, "%6.3f", r->ratio);
    snprintf(ns, sizeof ns, "%8.0f", r->ns_per_event);
    lag_cells(rn, lag_resv, lag_ratio, viol, sizeof lag_resv);
    printf(ROW, trace, modes[mode].name, alloc, resv, ratio, ref, lag_resv, lag_ratio, viol, ns, calls);
}

static void print_footer(void) {
    printf("\n(*) cuMemCreate/cuMemMap/cuMemUnmap/cuMemRelease/cuMemSetAccess; cuMemAlloc/cuMemFree, during the event loop at lag 0.\n");
    printf("\nPyTorch figures: PyTorch 2.11's caching allocator replaying the same traces on an H100 "
           "(benchmarks/traces/README.md).\ncudaMallocAsync ran the workloads themselves at ratio");
    for (size_t i = 0; i < sizeof pytorch / sizeof *pytorch; i++)
        printf("%s %.3f (%s)", i ? "," : "", pytorch[i].async_ratio, pytorch[i].trace);
    printf(".\n");
}

/* ---- the plot ---- */

#define SVG_W 960
#define SVG_H 540
#define PAD_L 70
#define PAD_R 20
#define PAD_T 40
#define PAD_B 50

/* A 1-2-5 step giving about 6 ticks up to max. */
static double tick_step(double max) {
    double step = 1e-3;
    for (int i = 0; step * 6 < max; i++) step *= i % 3 == 1 ? 2.5 : 2;
    return step;
}

static void svg_axes(FILE *f, double max_event, double max_gb, double step) {
    double h = SVG_H - PAD_T - PAD_B, w = SVG_W - PAD_L - PAD_R;
    for (double g = 0; g <= max_gb + 1e-9; g += step) {
        double y = PAD_T + h - g / max_gb * h;
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>\n", PAD_L, y, SVG_W - PAD_R, y);
        fprintf(f, "<text x='%d' y='%.1f' text-anchor='end' font-size='12'>%g GB</text>\n", PAD_L - 6, y + 4, g);
    }
    for (int i = 0; i <= 4; i++) {
        double x = PAD_L + w * i / 4;
        fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle' font-size='12'>%.0f</text>\n", x,
                SVG_H - PAD_B + 18, max_event * i / 4);
    }
    fprintf(f, "<rect x='%d' y='%d' width='%.0f' height='%.0f' fill='none' stroke='#333'/>\n", PAD_L, PAD_T, w, h);
    fprintf(f, "<text x='%.0f' y='%d' text-anchor='middle' font-size='13'>event</text>\n",
            PAD_L + w / 2, SVG_H - 12);
}

static void svg_line(FILE *f, const series *s, const double *v, double max_event, double max_gb,
                     const char *color, const char *style) {
    double h = SVG_H - PAD_T - PAD_B, w = SVG_W - PAD_L - PAD_R;
    fprintf(f, "<polyline fill='none' stroke='%s' %s points='", color, style);
    for (size_t i = 0; i < s->n; i++)
        fprintf(f, "%.1f,%.1f ", PAD_L + s->event[i] / max_event * w, PAD_T + h - v[i] / GB / max_gb * h);
    fprintf(f, "'/>\n");
}

static void svg_legend(FILE *f, int mode, int row, const run *rn) {
    int y = PAD_T + 18 + row * 36;
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='2'/>\n", PAD_L + 12, y,
            PAD_L + 40, y, modes[mode].color);
    fprintf(f, "<text x='%d' y='%d' font-size='12'>%s reserved (peak %.2f GB, ratio %.3f)</text>\n",
            PAD_L + 46, y + 4, modes[mode].name, rn->r.peak_reserved / GB, rn->r.ratio);
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-dasharray='4 3'/>\n", PAD_L + 12,
            y + 16, PAD_L + 40, y + 16, modes[mode].color);
    fprintf(f, "<text x='%d' y='%d' font-size='12'>%s allocated (peak %.2f GB)</text>\n", PAD_L + 46,
            y + 20, modes[mode].name, rn->r.peak_allocated / GB);
}

static int write_svg(const char *path, const char *trace, const run *runs) {
    double max_event = 1, max_bytes = 1;
    for (int m = 0; m < N_MODES; m++)
        for (size_t i = 0; runs[m].ok && i < runs[m].s.n; i++) {
            if (runs[m].s.event[i] > max_event) max_event = runs[m].s.event[i];
            if (runs[m].s.reserved[i] > max_bytes) max_bytes = runs[m].s.reserved[i];
            if (runs[m].s.allocated[i] > max_bytes) max_bytes = runs[m].s.allocated[i];
        }
    double step = tick_step(max_bytes / GB), max_gb = step * (double)(int64_t)(max_bytes / GB / step + 1);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif'>\n",
            SVG_W, SVG_H);
    fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
    fprintf(f, "<text x='%d' y='24' font-size='16'>%s: reserved and allocated memory over the trace</text>\n",
            PAD_L, trace);
    svg_axes(f, max_event, max_gb, step);
    for (int m = 0, row = 0; m < N_MODES; m++) {
        if (!runs[m].ok) continue;
        svg_line(f, &runs[m].s, runs[m].s.reserved, max_event, max_gb, modes[m].color, "stroke-width='1.5'");
        svg_line(f, &runs[m].s, runs[m].s.allocated, max_event, max_gb, modes[m].color,
                 "stroke-width='1' stroke-dasharray='4 3' opacity='0.7'");
        svg_legend(f, m, row++, &runs[m]);
    }
    fprintf(f, "</svg>\n");
    return fclose(f);
}

/* ---- main ---- */

static int usage(void) {
    fprintf(stderr, "usage: fragmentation [--driver sim|cuda] [--out DIR] [--traces DIR] [--gpu-lag N]\n");
    return 2;
}

static int parse_args(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; i++) {
        const char **dst = strcmp(argv[i], "--driver") == 0    ? &o->driver
                           : strcmp(argv[i], "--out") == 0     ? &o->out
                           : strcmp(argv[i], "--traces") == 0  ? &o->traces
                           : strcmp(argv[i], "--gpu-lag") == 0 ? &o->gpu_lag
                                                               : NULL;
        if (!dst || i + 1 == argc) return usage();
        *dst = argv[++i];
    }
    o->lag = XSA_REPLAY_DEFAULT_GPU_LAG;
    if (o->gpu_lag) {
        char *end;
        errno = 0;
        long long lag = strtoll(o->gpu_lag, &end, 10);
        if (errno || end == o->gpu_lag || *end || lag <= 0) {
            fprintf(stderr, "fragmentation: --gpu-lag is a number of trace events above 0 (lag 0 is always run)\n");
            return usage();
        }
        o->lag = lag;
    }
    return 0;
}

static int make_out_dir(const options *o, char *dir, size_t len) {
    const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
    if (o->out) snprintf(dir, len, "%s", o->out);
    else if (ws) snprintf(dir, len, "%s/benchmarks/out", ws);
    else snprintf(dir, len, "benchmarks-out");
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "fragmentation: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
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
    char path[PATH_LEN], name[256], err[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(name, sizeof name, "%.*s", (int)(strlen(file) - strlen(".trace.gz")), file);
    xsa_trace t;
    if (xsa_trace_load(path, &t, err, sizeof err)) {
        fprintf(stderr, "fragmentation: %s\n", err);
        return -1;
    }
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
    char dir[DIR_LEN], out_dir[DIR_LEN];
    char *names[MAX_TRACES];
    int n = find_traces(&o, argv[0], dir, sizeof dir, names);
    if (n == 0) {
        fprintf(stderr, "fragmentation: no *.trace.gz found (run it with bazel run, or pass --traces DIR)\n");
        return 1;
    }
    if (make_out_dir(&o, out_dir, sizeof out_dir)) return 1;
    int failed = 0, header = 0;
    for (int i = 0; i < n; i++) {
        failed |= do_trace(&o, dir, names[i], out_dir, &header) != 0;
        free(names[i]);
    }
    print_footer();
    printf("Plots: %s/<trace>.svg\n", out_dir);
    return failed;
}
