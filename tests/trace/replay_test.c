/*
 * replay_test: trace replay through xsalloc on the simulated driver
 * (trace/replay) and the replay command's JSON line.
 *
 * The synthetic multi-stream trace exercises per-stream caching and
 * record_stream; the replay itself checks xsalloc's invariants at the end,
 * and at a GPU lag the simulated GPU's violations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/replay.h"
#include "trace/trace.h"
#include "xsalloc/sim.h"

#define SYNTHETIC "benchmarks/traces/synthetic_multistream.trace.gz"
#define SMALL "benchmarks/traces/unet_varres.trace.gz" /* the smallest real trace */

static xsa_trace synthetic;

static int load(void **state) {
    (void)state;
    char err[512];
    if (xsa_trace_load(SYNTHETIC, &synthetic, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

static int unload(void **state) {
    (void)state;
    xsa_trace_free(&synthetic);
    return 0;
}

static void replay_ok(const char *conf, xsa_replay_result *r, FILE *series) {
    char err[1024] = "";
    xsa_replay_options o = {.driver = "sim", .conf = conf, .series = series};
    if (xsa_replay(&synthetic, &o, r, err, sizeof err)) fail_msg("%s: %s", conf, err);
    assert_string_equal(r->driver, "sim");
    assert_int_equal(r->events, synthetic.n_events);
    assert_true(r->peak_allocated > 2000000000); /* the trace's live peak is 2.08 GB */
    assert_true(r->peak_reserved >= r->peak_allocated);
    assert_true(r->ratio >= 1.0 && r->ratio < 3.0);
    assert_true(r->ns_per_event > 0);
    assert_int_equal(r->num_ooms, 0);
}

static void test_classic(void **state) {
    (void)state;
    xsa_replay_result r;
    replay_ok("expandable_segments:False", &r, NULL);
    assert_true(XSA_REPLAY_CALLS(&r, mem_alloc) > 0);
    assert_int_equal(XSA_REPLAY_CALLS(&r, mem_create), 0);
    assert_int_equal(XSA_REPLAY_CALLS(&r, mem_map), 0);
}

static void test_expandable(void **state) {
    (void)state;
    xsa_replay_result r;
    replay_ok("expandable_segments:True,page_recycling:False", &r, NULL);
    assert_int_equal(XSA_REPLAY_CALLS(&r, mem_alloc), 0);
    assert_true(XSA_REPLAY_CALLS(&r, mem_create) > 0);
    assert_true(XSA_REPLAY_CALLS(&r, mem_map) > 0);
    assert_int_equal(r.pages_recycled, 0);
    assert_true(r.est_h100_driver_ns > 0); /* the simulated driver's estimate of those calls */
}

static void test_recycling(void **state) {
    (void)state;
    xsa_replay_result r;
    replay_ok("expandable_segments:True,page_recycling:True", &r, NULL);
    assert_int_equal(XSA_REPLAY_CALLS(&r, mem_alloc), 0);
    assert_true(XSA_REPLAY_CALLS(&r, mem_create) > 0);
    /* Pages move between the three streams' segments instead of new ones
     * being created, so less is reserved than without recycling. */
    xsa_replay_result plain;
    replay_ok("expandable_segments:True,page_recycling:False", &plain, NULL);
    assert_true(r.pages_recycled > 0);
    assert_true(r.peak_reserved < plain.peak_reserved);
}

static void test_series(void **state) {
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    xsa_replay_result r;
    replay_ok("expandable_segments:True", &r, f);
    rewind(f);
    char line[256];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "event,allocated_bytes,reserved_bytes,allocated_peak,reserved_peak\n");
    long n = 0, last = 0, ev;
    long long alloc, resv, alloc_peak, resv_peak, max_alloc = 0, max_resv = 0;
    while (fscanf(f, "%ld,%lld,%lld,%lld,%lld\n", &ev, &alloc, &resv, &alloc_peak, &resv_peak) == 5) {
        assert_true(ev > last);
        assert_true(alloc <= resv);
        assert_true(alloc <= alloc_peak && resv <= resv_peak);
        if (alloc_peak > max_alloc) max_alloc = alloc_peak;
        if (resv_peak > max_resv) max_resv = resv_peak;
        last = ev;
        n++;
    }
    fclose(f);
    assert_true(n >= 1900 && n <= 2100);
    assert_int_equal(last, (long)synthetic.n_events);
    /* The windows' peaks make up the whole replay's peaks. */
    assert_int_equal(max_alloc, r.peak_allocated);
    assert_int_equal(max_resv, r.peak_reserved);
}

/* An allocation the simulated device (80 GiB) cannot hold: the error names
 * the line, and the next replay starts clean. */
static void test_error_names_line(void **state) {
    (void)state;
    const char text[] = "a 0 1000 0\nf 0\na 1 1099511627776 0\n";
    xsa_trace t;
    char err[2048] = "";
    assert_int_equal(xsa_trace_parse("oom", text, strlen(text), &t, err, sizeof err), 0);
    xsa_replay_result r;
    assert_int_equal(xsa_replay(&t, &(xsa_replay_options){.driver = "sim", .conf = ""}, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "line 3: xsa_malloc(1099511627776 bytes, stream 0) failed"));
    xsa_trace_free(&t);
    replay_ok("", &r, NULL);
}

/* ---- at a GPU lag ---- */

/* Replays t at `lag` from a fresh simulated driver (clock 0); returns the
 * clock at the end. */
static uint64_t replay_at(const xsa_trace *t, const char *conf, int64_t lag, xsa_replay_result *r) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
    char err[1024] = "";
    xsa_replay_options o = {.driver = "sim", .conf = conf, .gpu_lag = lag};
    if (xsa_replay(t, &o, r, err, sizeof err)) fail_msg("%s at lag %lld: %s", conf, (long long)lag, err);
    assert_int_equal(r->gpu_lag, lag);
    assert_int_equal(r->violations, 0);
    return xsa_sim_now();
}

/* The GPU 500 events behind: no violation. Without page recycling the
 * allocator's decisions do not depend on the GPU (one stream, no events),
 * so the figures are lag 0's; one tick an event, and the program's final
 * synchronize waits for the last kernel, at most 500 ticks on. */
static void test_lag_single_stream(void **state) {
    (void)state;
    xsa_trace t;
    char err[512];
    if (xsa_trace_load(SMALL, &t, err, sizeof err)) fail_msg("%s", err);
    const char *conf = "page_recycling:False,helper_thread:False"; /* decay's fence would depend on it */
    xsa_replay_result at0, at500;
    assert_int_equal(replay_at(&t, conf, 0, &at0), 0); /* eager: no clock */
    uint64_t now = replay_at(&t, conf, 500, &at500);
    assert_true(now > t.n_events && now <= t.n_events + 500);
    assert_int_equal(at500.peak_allocated, at0.peak_allocated);
    assert_int_equal(at500.peak_reserved, at0.peak_reserved);
    assert_int_equal(XSA_REPLAY_CALLS(&at500, mem_create), XSA_REPLAY_CALLS(&at0, mem_create));
    /* The default configuration (page recycling) too. */
    replay_at(&t, "", 500, &at500);
    assert_true(at500.peak_reserved >= at500.peak_allocated);
    /* Nothing left running: the program synchronized at its end. */
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    assert_int_equal(u.pending_kernels, 0);
    xsa_trace_free(&t);
}

/* Three streams with record_stream: the program orders each use on another
 * stream after the tensor's last use, and the allocator must not hand a
 * block to other work while a stream that used it may still run. */
static void test_lag_multistream(void **state) {
    (void)state;
    static const char *const confs[] = {"expandable_segments:False", "page_recycling:False", ""};
    for (size_t i = 0; i < sizeof confs / sizeof *confs; i++) {
        xsa_replay_result r;
        replay_at(&synthetic, confs[i], XSA_REPLAY_DEFAULT_GPU_LAG, &r);
        assert_true(r.peak_allocated > 2000000000);
        assert_true(XSA_REPLAY_CALLS(&r, stream_wait_event) > 0); /* the program's waits */
    }
}

static void test_lag_refused(void **state) {
    (void)state;
    char err[512] = "";
    xsa_replay_result r;
    xsa_replay_options o = {.driver = "sim", .conf = "", .gpu_lag = -1};
    assert_int_equal(xsa_replay(&synthetic, &o, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "0 or more"));
    assert_int_equal(system("benchmarks/replay --driver sim --gpu-lag x " SYNTHETIC " 2>/dev/null >/dev/null") != 0, 1);
    replay_ok("", &r, NULL); /* the next replay starts clean */
}

/* The fixed command-line interface: one JSON line last on stdout. */
static void test_replay_command(void **state) {
    (void)state;
    FILE *p = popen("XSALLOC_CONF= benchmarks/replay --driver sim --conf expandable_segments:True --gpu-lag 500 "
                    SYNTHETIC, "r");
    assert_non_null(p);
    char line[4096] = "", last[4096] = "";
    while (fgets(line, sizeof line, p)) strcpy(last, line);
    assert_int_equal(pclose(p), 0);
    static const char *const keys[] = {
        ("{\"trace\": \"synthetic_multistream\", \"driver\": \"sim\", \"conf\": \"expandable_segments:True\", "
         "\"events\": 20000, "),
        "\"peak_allocated\": ", "\"peak_reserved\": ", "\"ratio\": ", "\"ns_per_event\": ",
        "\"create\": ", "\"map\": ", "\"unmap\": ", "\"release\": ", "\"mem_alloc\": 0, ",
        "\"mem_free\": 0, ", "\"set_access\": ", "\"pages_recycled\": ", "\"num_alloc_retries\": ",
        "\"num_ooms\": 0, ", "\"gpu_lag\": 500, \"violations\": 0, ", "\"est_h100_driver_ms\": ",
        "\"driver_calls_us\": {",
        "\"mem_create\": [", "\"event_record\": [",
        "]}}\n"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strstr(last, keys[i])) fail_msg("'%s' not in %s", keys[i], last);
}

static void test_replay_command_error(void **state) {
    (void)state;
    int rc = system("benchmarks/replay --driver sim /nonexistent.trace.gz 2>/dev/null >/dev/null");
    assert_int_not_equal(rc, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classic),           cmocka_unit_test(test_expandable),
        cmocka_unit_test(test_recycling),         cmocka_unit_test(test_series),
        cmocka_unit_test(test_error_names_line),  cmocka_unit_test(test_lag_single_stream),
        cmocka_unit_test(test_lag_multistream),   cmocka_unit_test(test_lag_refused),
        cmocka_unit_test(test_replay_command),    cmocka_unit_test(test_replay_command_error),
    };
    return cmocka_run_group_tests(tests, load, unload);
}
