/*
 * decay: decay purging and the helper thread on the simulated driver, on
 * trace time (fragmentation's sibling).
 *
 *   bazel run //benchmarks:decay -- [--event-us N] [--decay-ms N] [--lags 0,500,2000] [--traces DIR]
 *                                   [--no-traces] [--steps N] [--burst-every N] [--sync-ms N]
 *                                   [--trace FILE --burst-above GB] [--series FILE] [--commit-lag N]
 *                                   [--repeat N]
 *
 * Design: every replay is trace/replay's with trace time (event i at i x
 * event_us) and the helper, when on, in manual mode on that clock, so the
 * figures are deterministic (--commit-lag N: its jobs commit N events
 * after their driver calls, those allocator calls in between, as with the
 * thread). Three modes: today's default
 * (helper_thread:False), the helper alone (page_decay_ms:0) and the helper
 * with decay (page_decay_ms:N, default XSA_DEFAULT_PAGE_DECAY_MS). The
 * first table replays the bursty workload (benchmarks/bursty.h: 40 steps
 * of a GPT-2-sized job, an evaluation burst of twice the activations after
 * every 5th; --steps, --burst-every; --sync-ms: the program waits that
 * long for the GPU after each step, as a GPU-bound loop does, its steps
 * queued in a fraction of their time; or --trace, a recorded one with
 * its waits, benchmarks/gpu/bursty.py --record, its bursts where live
 * memory is above --burst-above; --series writes its samples with decay
 * on, at the first lag, as CSV) at each lag: peak reserved / peak
 * allocated, reserved memory integrated over trace time (GB·s), how long
 * after each burst reserved memory took to come within 5% of the live
 * memory that followed (median and longest; "never" when it did not
 * before the next burst), and the H100 estimate of the driver calls on
 * the allocation path and on the helper's thread. The second table
 * replays every bundled trace with decay off and on: peak ratio, GB·s and
 * the allocation path's estimate (--repeat N: each trace played N times
 * over, its weights kept, as a longer run of the same steps: what decay's
 * choices cost once they have settled, xsa_trace_repeat).
 * Exit status 1 if any replay failed (violations included).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchmarks/bursty.h"
#include "benchmarks/cli.h"
#include "benchmarks/trace_files.h"
#include "pool/options.h"
#include "trace/replay.h"
#include "trace/trace.h"

#define MAX_LAGS 8
#define N_MODES 3
#define GB 1e9

typedef struct options {
    const char *event_us, *decay_ms, *lags_arg, *traces, *sync_ms, *steps, *burst_every, *trace, *burst_above, *series;
    uint64_t event_ns;
    unsigned decay;
    xsa_bursty_shape shape;
    uint64_t above;           /* with trace: bursts are live memory above this */
    int64_t lags[MAX_LAGS];
    int n_lags;
    const char *commit_lag_arg, *repeat_arg;
    unsigned commit_lag;      /* --commit-lag: the helper's jobs commit this many events late */
    unsigned repeat;          /* --repeat: each bundled trace this many times over */
    bool no_traces;
} options;

typedef struct samples {
    int64_t *allocated, *reserved; /* after e events, e = 0..n */
} samples;

static void sample(void *ctx, size_t event, int64_t allocated, int64_t reserved) {
    samples *s = ctx;
    s->allocated[event] = allocated;
    s->reserved[event] = reserved;
}

/* The mode's configuration. */
static void conf_of(int mode, unsigned decay, char *out, size_t len) {
    if (mode == 0) snprintf(out, len, "helper_thread:False");
    else if (mode == 1) snprintf(out, len, "helper_thread:True,page_decay_ms:0");
    else snprintf(out, len, "helper_thread:True,page_decay_ms:%u", decay);
}

static const char *mode_name[N_MODES] = {"today", "helper", "helper+decay"};

/* One replay; s (may be NULL) gets the per-event samples. */
static int replay(const xsa_trace *t, const options *o, int mode, int64_t lag, samples *s, xsa_replay_result *r) {
    char conf[96], err[1024];
    conf_of(mode, o->decay, conf, sizeof conf);
    xsa_replay_options ro = {.driver = "sim", .conf = conf, .gpu_lag = lag, .event_ns = o->event_ns,
                             .sample = s ? sample : NULL, .sample_ctx = s, .helper_deferred = o->commit_lag};
    if (xsa_replay(t, &ro, r, err, sizeof err) == 0) return 0;
    fprintf(stderr, "decay: %s, lag %" PRId64 ": %s\n", conf, lag, err);
    return -1;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* "median / longest" in seconds, or "never" if a burst never settled. */
static void settle_cell(const xsa_bursty *b, const samples *s, uint64_t event_ns, char *out, size_t len) {
    int64_t *settle = malloc((b->n_bursts ? b->n_bursts : 1) * sizeof *settle);
    if (!settle) {
        snprintf(out, len, "?");
        return;
    }
    xsa_bursty_settle(b, event_ns, s->allocated, s->reserved, settle);
    size_t never = 0;
    for (size_t i = 0; i < b->n_bursts; i++) never += settle[i] < 0;
    qsort(settle, b->n_bursts, sizeof *settle, cmp_i64);
    if (never) snprintf(out, len, "never (%zu of %zu)", never, b->n_bursts);
    else snprintf(out, len, "%.3f / %.3f s", settle[b->n_bursts / 2] * 1e-9, settle[b->n_bursts - 1] * 1e-9);
    free(settle);
}

/* --series: "t_s,allocated,reserved" after every event of the decay mode's
 * first lag (trace time: events and the trace's waits). */
static int write_series(const char *path, const xsa_bursty *b, uint64_t event_ns, const samples *s) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "decay: cannot write %s\n", path);
        return -1;
    }
    fputs("t_s,allocated,reserved\n", f);
    uint64_t t = 0;
    for (size_t e = 0; e <= b->trace.n_events; e++) {
        if (e) t += xsa_bursty_event_time(b, event_ns, e);
        fprintf(f, "%.6f,%" PRId64 ",%" PRId64 "\n", t * 1e-9, s->allocated[e], s->reserved[e]);
    }
    return fclose(f) ? -1 : 0;
}

#define ROW1 "| %-13s | %5s | %9s | %9s | %6s | %9s | %-22s | %7s | %10s | %10s | %5s |\n"

static int bursty_table(const options *o) {
    const xsa_bursty_shape shape = o->shape;
    xsa_bursty b;
    char err[512];
    if (o->trace ? xsa_bursty_load(o->trace, o->above, &b, err, sizeof err) : xsa_bursty_make(&shape, &b, err, sizeof err)) {
        fprintf(stderr, "decay: %s\n", err);
        return -1;
    }
    size_t n = b.trace.n_events;
    samples s = {calloc(n + 1, sizeof *s.allocated), calloc(n + 1, sizeof *s.reserved)};
    if (!s.allocated || !s.reserved) {
        fprintf(stderr, "decay: out of host memory\n");
        return -1;
    }
    if (o->trace)
        printf("\nThe recorded trace %s (%zu bursts above %.2f GB live; %zu events, %.0f us an event and the trace's "
               "waits, page_decay_ms %u)\n\n", o->trace, b.n_bursts, o->above / GB, n, o->event_ns / 1e3, o->decay);
    else
        printf("\nThe bursty workload (%u steps, an evaluation of twice the activations after every %u; %zu events, "
               "%.0f us an event, a wait of %.0f ms for the GPU after each step, page_decay_ms %u)\n\n", shape.steps,
               shape.burst_every, n, o->event_ns / 1e3, shape.sync_ns / 1e6, o->decay);
    printf(ROW1, "mode", "lag", "peak alloc", "peak resv", "ratio", "resv GB·s", "within 5% after a burst", "settled",
           "path ms", "helper ms", "viol.");
    printf("|---------------|-------|-----------|-----------|--------|-----------|------------------------|---------|------------|------------|-------|\n");
    int failed = 0;
    for (int m = 0; m < N_MODES; m++)
        for (int l = 0; l < o->n_lags; l++) {
            xsa_replay_result r;
            fprintf(stderr, "decay: bursty, %s, lag %" PRId64 "...\n", mode_name[m], o->lags[l]);
            if (replay(&b.trace, o, m, o->lags[l], &s, &r)) {
                failed = 1;
                continue;
            }
            if (o->series && m == N_MODES - 1 && l == 0 && write_series(o->series, &b, o->event_ns, &s)) failed = 1;
            char alloc[16], resv[16], ratio[16], gbs[16], settle[48], path[16], helper[16], viol[16], lag[16];
            snprintf(lag, sizeof lag, "%" PRId64, o->lags[l]);
            snprintf(alloc, sizeof alloc, "%.2f GB", r.peak_allocated / GB);
            snprintf(resv, sizeof resv, "%.2f GB", r.peak_reserved / GB);
            snprintf(ratio, sizeof ratio, "%.4f", r.ratio);
            snprintf(gbs, sizeof gbs, "%.1f", r.reserved_gb_s);
            settle_cell(&b, &s, o->event_ns, settle, sizeof settle);
            char settled[16];
            snprintf(settled, sizeof settled, "%.3f", xsa_bursty_settled(&b, s.allocated, s.reserved));
            snprintf(path, sizeof path, "%.1f", (r.est_h100_driver_ns - r.helper_est_h100_ns) / 1e6);
            snprintf(helper, sizeof helper, "%.1f", r.helper_est_h100_ns / 1e6);
            snprintf(viol, sizeof viol, "%" PRIu64, r.violations);
            printf(ROW1, mode_name[m], lag, alloc, resv, ratio, gbs, settle, settled, path, helper, viol);
        }
    free(s.allocated);
    free(s.reserved);
    xsa_bursty_free(&b);
    return failed ? -1 : 0;
}

#define ROW2 "| %-22s | %5s | %8s | %8s | %9s | %9s | %9s | %9s |\n"

static int traces_table(const options *o, const char *argv0) {
    char dir[XSA_TRACE_FILES_DIR_LEN], *names[XSA_TRACE_FILES_MAX];
    int count = xsa_trace_files_find(o->traces, argv0, dir, sizeof dir, names, XSA_TRACE_FILES_MAX);
    if (count == 0) {
        fprintf(stderr, "decay: no bundled traces found (use --traces DIR)\n");
        return -1;
    }
    printf("\nThe bundled traces%s, today's default against the helper with decay (page_decay_ms %u, %.0f us an event)\n\n",
           o->repeat > 1 ? ", each played --repeat times over" : "", o->decay, o->event_ns / 1e3);
    printf(ROW2, "trace", "lag", "ratio", "decay", "GB·s", "decay", "path ms", "decay");
    printf("|------------------------|-------|----------|----------|-----------|-----------|-----------|-----------|\n");
    int failed = 0;
    for (int i = 0; i < count; i++) {
        char path[XSA_TRACE_FILES_DIR_LEN + 256], name[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        xsa_trace_name(names[i], name, sizeof name);
        xsa_trace t;
        free(names[i]);
        if (xsa_cli_load_trace("decay", path, &t)) {
            failed = 1;
            continue;
        }
        if (o->repeat > 1) {
            xsa_trace longer;
            char err[256];
            int bad = xsa_trace_repeat(&t, o->repeat, &longer, err, sizeof err);
            xsa_trace_free(&t);
            if (bad) {
                fprintf(stderr, "decay: %s: %s\n", name, err);
                failed = 1;
                continue;
            }
            t = longer;
            size_t len = strlen(name);
            snprintf(name + len, sizeof name - len, " x%u", o->repeat);
        }
        for (int l = 0; l < o->n_lags; l++) {
            xsa_replay_result off, on;
            fprintf(stderr, "decay: %s, lag %" PRId64 "...\n", name, o->lags[l]);
            if (replay(&t, o, 0, o->lags[l], NULL, &off) || replay(&t, o, 2, o->lags[l], NULL, &on)) {
                failed = 1;
                continue;
            }
            char lag[16], c[6][16];
            snprintf(lag, sizeof lag, "%" PRId64, o->lags[l]);
            snprintf(c[0], 16, "%.4f", off.ratio);
            snprintf(c[1], 16, "%.4f", on.ratio);
            snprintf(c[2], 16, "%.2f", off.reserved_gb_s);
            snprintf(c[3], 16, "%.2f", on.reserved_gb_s);
            snprintf(c[4], 16, "%.1f", off.est_h100_driver_ns / 1e6);
            snprintf(c[5], 16, "%.1f", (on.est_h100_driver_ns - on.helper_est_h100_ns) / 1e6);
            printf(ROW2, name, lag, c[0], c[1], c[2], c[3], c[4], c[5]);
        }
        xsa_trace_free(&t);
    }
    return failed ? -1 : 0;
}

static int usage(void) {
    fprintf(stderr, "usage: decay [--event-us N] [--decay-ms N] [--lags 0,500,2000] [--traces DIR] [--no-traces]\n"
                    "             [--steps N] [--burst-every N] [--sync-ms N] [--trace FILE --burst-above GB]\n"
                    "             [--series FILE] [--commit-lag N] [--repeat N]\n");
    return 2;
}

static int parse_lags(const char *s, options *o) {
    o->n_lags = 0;
    for (const char *p = s; *p && o->n_lags < MAX_LAGS;) {
        char num[32];
        size_t len = strcspn(p, ",");
        long long v;
        if (len == 0 || len >= sizeof num) return -1;
        memcpy(num, p, len);
        num[len] = '\0';
        if (!xsa_cli_count(num, 0, 1000000, &v)) return -1;
        o->lags[o->n_lags++] = v;
        p += len + (p[len] == ',');
    }
    return o->n_lags ? 0 : -1;
}

int main(int argc, char **argv) {
    options o = {.event_ns = XSA_REPLAY_DEFAULT_EVENT_NS, .decay = XSA_DEFAULT_PAGE_DECAY_MS};
    xsa_bursty_default(&o.shape);
    const char *no_traces = NULL;
    /* --no-traces takes no value: it is taken out before the options are parsed. */
    char *args[64];
    int n = 0;
    for (int i = 0; i < argc && n < 64; i++) {
        if (strcmp(argv[i], "--no-traces") == 0) no_traces = argv[i];
        else args[n++] = argv[i];
    }
    o.no_traces = no_traces != NULL;
    const xsa_cli_option opts[] = {
        {"--event-us", &o.event_us}, {"--decay-ms", &o.decay_ms}, {"--lags", &o.lags_arg}, {"--traces", &o.traces},
        {"--sync-ms", &o.sync_ms},   {"--steps", &o.steps},       {"--burst-every", &o.burst_every},
        {"--trace", &o.trace},       {"--burst-above", &o.burst_above}, {"--series", &o.series},
        {"--commit-lag", &o.commit_lag_arg}, {"--repeat", &o.repeat_arg},
    };
    if (xsa_cli_parse(n, args, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0, NULL) != XSA_CLI_OK) return usage();
    long long v;
    if (o.commit_lag_arg) {
        if (!xsa_cli_count(o.commit_lag_arg, 0, 1000000, &v)) return usage();
        o.commit_lag = (unsigned)v;
    }
    if (o.repeat_arg) {
        if (!xsa_cli_count(o.repeat_arg, 1, 100, &v)) return usage();
        o.repeat = (unsigned)v;
    }
    if (!o.trace != !o.burst_above) return usage();
    if (o.burst_above) {
        char *end;
        double gb = strtod(o.burst_above, &end);
        if (*end || !(gb > 0)) return usage();
        o.above = (uint64_t)(gb * GB);
    }
    if (o.sync_ms) {
        if (!xsa_cli_count(o.sync_ms, 0, 60000, &v)) return usage();
        o.shape.sync_ns = (uint64_t)v * 1000000u;
    }
    if (o.steps) {
        if (!xsa_cli_count(o.steps, 1, 100000, &v)) return usage();
        o.shape.steps = (unsigned)v;
    }
    if (o.burst_every) {
        if (!xsa_cli_count(o.burst_every, 1, 100000, &v)) return usage();
        o.shape.burst_every = (unsigned)v;
    }
    if (o.event_us) {
        if (!xsa_cli_count(o.event_us, 1, 1000000000, &v)) return usage();
        o.event_ns = (uint64_t)v * 1000u;
    }
    if (o.decay_ms) {
        if (!xsa_cli_count(o.decay_ms, 1, 3600000, &v)) return usage();
        o.decay = (unsigned)v;
    }
    if (parse_lags(o.lags_arg ? o.lags_arg : "0,500,2000", &o)) return usage();
    int rc = bursty_table(&o);
    if (!o.no_traces && traces_table(&o, argv[0])) rc = -1;
    printf("\nratio: peak reserved / peak allocated. GB·s: reserved memory over trace time. Within 5%%: from a\n"
           "burst's end to reserved <= 1.05 x the live peak until the next burst (median / longest). settled: the\n"
           "highest reserved / that live peak just before a burst (the last: the trace's end). path ms and\n"
           "helper ms: the simulated driver's H100 estimate of the driver calls on the allocation path and on the\n"
           "helper's thread (sim/cost.c).\n");
    return rc ? 1 : 0;
}
