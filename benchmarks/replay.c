/*
 * replay: replays one trace through xsalloc and prints one JSON line.
 *
 *   bazel run //benchmarks:replay -- [--driver sim|cuda] [--conf STR] [--series FILE] [--gpu-lag N]
 *                                    [--event-us N] TRACE
 *
 * Design: this command line and the JSON line (the last line of stdout,
 * fields listed in benchmarks/README.md) are a fixed interface that other
 * tooling parses; everything else (progress, errors) goes to stderr.
 * `bazel run` changes the working directory, so relative paths are resolved
 * against $BUILD_WORKING_DIRECTORY when it is set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "benchmarks/cli.h"
#include "benchmarks/timing.h"
#include "trace/replay.h"
#include "trace/trace.h"

#define LONG_TRACE 100000 /* events from which progress is printed */

typedef struct args {
    const char *driver, *conf, *series, *gpu_lag, *event_us, *trace;
    int64_t lag;
    uint64_t event_ns;
} args;

static int usage(const char *why) {
    fprintf(stderr, "replay: %s\nusage: replay [--driver sim|cuda] [--conf 'XSALLOC_CONF string'] "
                    "[--series FILE] [--gpu-lag N] [--event-us N] TRACE\n", why);
    return 2;
}

static int parse_args(int argc, char **argv, args *a) {
    const xsa_cli_option opts[] = {
        {"--driver", &a->driver}, {"--conf", &a->conf}, {"--series", &a->series}, {"--gpu-lag", &a->gpu_lag},
        {"--event-us", &a->event_us},
    };
    int n = 0;
    switch (xsa_cli_parse(argc, argv, opts, 5, &a->trace, 1, &n)) {
    case XSA_CLI_OK: break;
    case XSA_CLI_UNKNOWN: return usage("unknown option");
    case XSA_CLI_NO_VALUE: return usage("an option needs a value");
    case XSA_CLI_EXTRA: return usage("one TRACE only");
    }
    if (!n) return usage("TRACE is missing");
    if (!xsa_cli_driver_ok(a->driver)) return usage("--driver is sim or cuda");
    long long lag = 0;
    if (a->gpu_lag && !xsa_cli_count(a->gpu_lag, 0, INT64_MAX, &lag))
        return usage("--gpu-lag is a number of trace events, 0 or more");
    a->lag = lag;
    long long us = 0;
    if (a->event_us && !xsa_cli_count(a->event_us, 1, 1000000000, &us))
        return usage("--event-us is the trace time of an event in microseconds, 1 or more");
    a->event_ns = (uint64_t)us * 1000u;
    return 0;
}

/* A path as the user meant it from the directory `bazel run` was called in. */
static const char *resolve(const char *path, char *buf, size_t len) {
    const char *wd = getenv("BUILD_WORKING_DIRECTORY");
    if (!path || path[0] == '/' || !wd || !*wd) return path;
    snprintf(buf, len, "%s/%s", wd, path);
    return buf;
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_json(const char *name, const char *conf, const xsa_replay_result *r) {
    printf("{\"trace\": ");
    json_string(name);
    printf(", \"driver\": ");
    json_string(r->driver);
    printf(", \"conf\": ");
    json_string(conf);
    printf(", \"events\": %zu, \"peak_allocated\": %lld, \"peak_reserved\": %lld, \"ratio\": %.4f"
           ", \"ns_per_event\": %.1f, \"create\": %llu, \"map\": %llu, \"unmap\": %llu"
           ", \"release\": %llu, \"mem_alloc\": %llu, \"mem_free\": %llu, \"set_access\": %llu"
           ", \"pages_recycled\": %lld, \"num_alloc_retries\": %lld, \"num_ooms\": %lld"
           ", \"gpu_lag\": %lld, \"violations\": %llu",
           r->events, (long long)r->peak_allocated, (long long)r->peak_reserved, r->ratio,
           r->ns_per_event, (unsigned long long)XSA_REPLAY_CALLS(r, mem_create),
           (unsigned long long)XSA_REPLAY_CALLS(r, mem_map), (unsigned long long)XSA_REPLAY_CALLS(r, mem_unmap),
           (unsigned long long)XSA_REPLAY_CALLS(r, mem_release), (unsigned long long)XSA_REPLAY_CALLS(r, mem_alloc),
           (unsigned long long)XSA_REPLAY_CALLS(r, mem_free), (unsigned long long)XSA_REPLAY_CALLS(r, mem_set_access),
           (long long)r->pages_recycled,
           (long long)r->num_alloc_retries, (long long)r->num_ooms, (long long)r->gpu_lag,
           (unsigned long long)r->violations);
    /* The simulated driver's H100 estimate of the calls; none from a real driver. */
    if (strcmp(r->driver, "sim") == 0) printf(", \"est_h100_driver_ms\": %.3f", r->est_h100_driver_ns / 1e6);
    else printf(", \"est_h100_driver_ms\": null");
    /* Trace time and the helper thread's share of the calls (0 without it). */
    printf(", \"event_us\": %.1f, \"reserved_gb_s\": %.4f, \"helper_calls\": [%llu, %llu, %llu, %llu, %llu]",
           r->event_ns / 1e3, r->reserved_gb_s, (unsigned long long)r->helper_calls[XSA_DRV_mem_create],
           (unsigned long long)r->helper_calls[XSA_DRV_mem_map], (unsigned long long)r->helper_calls[XSA_DRV_mem_unmap],
           (unsigned long long)r->helper_calls[XSA_DRV_mem_release],
           (unsigned long long)r->helper_calls[XSA_DRV_mem_set_access]);
    if (strcmp(r->driver, "sim") == 0) printf(", \"helper_est_h100_ms\": %.3f", r->helper_est_h100_ns / 1e6);
    else printf(", \"helper_est_h100_ms\": null");
    /* Every entry point called in the loop: {"name": [calls, microseconds]}. */
    printf(", \"driver_calls_us\": {");
    const char *sep = "";
    for (int i = 0; i < XSA_DRV_COUNT; i++) {
        if (!r->driver_calls[i]) continue;
        printf("%s\"%s\": [%llu, %.1f]", sep, xsa_driver_entry_name((xsa_driver_entry)i),
               (unsigned long long)r->driver_calls[i], r->driver_ns[i] / 1e3);
        sep = ", ";
    }
    printf("}}\n");
}

static double now_s(void) { return xsa_bench_now_ns() * 1e-9; }

static int run(const args *a, const char *trace_path, FILE *series) {
    char err[1024], name[256];
    xsa_trace t;
    double t0 = now_s();
    if (xsa_cli_load_trace("replay", trace_path, &t)) return 1;
    int chatty = t.n_events >= LONG_TRACE;
    if (chatty)
        fprintf(stderr, "replay: %s: %zu events loaded in %.2f s, replaying...\n", trace_path,
                t.n_events, now_s() - t0);
    xsa_replay_result r;
    xsa_replay_options o = {
        .driver = a->driver, .conf = a->conf, .series = series, .gpu_lag = a->lag, .event_ns = a->event_ns};
    int rc = xsa_replay(&t, &o, &r, err, sizeof err);
    xsa_trace_free(&t);
    if (rc) {
        fprintf(stderr, "replay: %s: %s\n", trace_path, err);
        return 1;
    }
    if (chatty) fprintf(stderr, "replay: done in %.2f s\n", now_s() - t0);
    const char *env_conf;
    xsa_config_env(&env_conf); /* the variable xsalloc read its settings from */
    xsa_trace_name(trace_path, name, sizeof name);
    print_json(name, a->conf ? a->conf : env_conf ? env_conf : "", &r);
    return 0;
}

int main(int argc, char **argv) {
    args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    char trace_buf[4096], series_buf[4096];
    const char *trace_path = resolve(a.trace, trace_buf, sizeof trace_buf);
    const char *series_path = resolve(a.series, series_buf, sizeof series_buf);
    FILE *series = NULL;
    if (series_path && !(series = fopen(series_path, "w"))) {
        perror(series_path);
        return 1;
    }
    rc = run(&a, trace_path, series);
    if (series && fclose(series) != 0 && rc == 0) {
        perror(series_path);
        rc = 1;
    }
    return rc;
}
