/*
 * decay_replay_test: decay purging's figures on the bursty workload
 * (benchmarks/bursty.h, a smaller shape than the benchmark's), replayed
 * on trace time on the simulated driver, so that CI sees a regression:
 * with decay on, reserved memory comes within 5% of the live memory
 * after every burst within page_decay_ms plus three ticks plus the GPU's
 * lag, reserved memory over time falls by at least a fifth, peak reserved
 * / peak allocated rises by 0.004 at most, and the simulated GPU sees no violation
 * at lag 0 or 500; without decay reserved memory never comes down; the
 * helper alone makes exactly the choices the pool makes without it.
 *
 * Two recorded runs (testdata/gpt2_bursty.trace.gz and
 * gpt2_bursty_h100.trace.gz: GPT-2 small training on an H200 and on an
 * H100 with an evaluation burst every 30 steps, benchmarks/gpu/bursty.py
 * --record native, 2026-11-27, the H200's cut before its third burst;
 * the host's waits for the GPU are their 'w' lines): reserved memory
 * comes back from 1.79 times the steps' peak to within 5% of it in 1 s
 * after every burst, at GPU lags 0 and 500. There a step's activations
 * come and go between two ticks all over a cache the burst left in
 * pieces: an earlier rule that guessed what a step used (a changed free
 * block's front, up to the interval's peak) kept every page young, and
 * reserved memory never came down on the GPU; and without repacking
 * (pool/decay.c) the H100 run's steps stayed at 1.07 times their peak
 * after its second burst, the pages they touch in every window.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "benchmarks/bursty.h"
#include "trace/replay.h"
#include "trace/trace.h"

#define EVENT_NS 400000ull /* 0.4 ms an event: a step of this shape takes about 0.25 s */
#define DECAY_MS 500u
#define TICK_NS (DECAY_MS * 1000000ull / 8)
#define RECORDED "tests/trace/testdata/gpt2_bursty.trace.gz"
#define RECORDED_H100 "tests/trace/testdata/gpt2_bursty_h100.trace.gz"
#define RECORDED_ABOVE 18000000000ull /* its steps peak at 13.6 GB live, its bursts at 23.3 */
#define RECORDED_EVENT_NS 12000ull    /* the run's host time between two calls, its waits aside */
#define LOADER "benchmarks/traces/sidestream_loader_200.trace.gz"

static xsa_bursty b, recorded[2];
static int64_t *allocated, *reserved;

static int make(void **state) {
    (void)state;
    xsa_bursty_shape s;
    xsa_bursty_default(&s);
    s.steps = 20;
    s.layers = 12;
    s.tensors = 24;
    s.params_bytes = 500000000ull;
    s.act_bytes = 2000000000ull;
    char err[512];
    if (xsa_bursty_make(&s, &b, err, sizeof err)) return -1;
    const char *paths[2] = {RECORDED, RECORDED_H100};
    size_t n = b.trace.n_events;
    for (int i = 0; i < 2; i++) {
        if (xsa_bursty_load(paths[i], RECORDED_ABOVE, &recorded[i], err, sizeof err)) {
            print_error("%s\n", err);
            return -1;
        }
        if (recorded[i].trace.n_events > n) n = recorded[i].trace.n_events;
    }
    allocated = calloc(n + 1, sizeof *allocated);
    reserved = calloc(n + 1, sizeof *reserved);
    return allocated && reserved ? 0 : -1;
}

static int unmake(void **state) {
    (void)state;
    xsa_bursty_free(&b);
    xsa_bursty_free(&recorded[0]);
    xsa_bursty_free(&recorded[1]);
    free(allocated);
    free(reserved);
    return 0;
}

static void sample(void *ctx, size_t event, int64_t a, int64_t r) {
    (void)ctx;
    allocated[event] = a;
    reserved[event] = r;
}

static xsa_replay_result replay_of(const xsa_bursty *w, uint64_t event_ns, const char *conf, int64_t lag) {
    xsa_replay_options o = {.driver = "sim", .conf = conf, .gpu_lag = lag, .event_ns = event_ns, .sample = sample};
    xsa_replay_result r;
    char err[1024];
    if (xsa_replay(&w->trace, &o, &r, err, sizeof err)) fail_msg("%s, lag %lld: %s", conf, (long long)lag, err);
    assert_int_equal(r.violations, 0);
    return r;
}

static xsa_replay_result replay(const char *conf, int64_t lag) { return replay_of(&b, EVENT_NS, conf, lag); }

/* The longest settling time after a burst of w, in ns; -1 if one never settled. */
static int64_t longest_settle_of(const xsa_bursty *w, uint64_t event_ns) {
    int64_t settle[16], longest = 0;
    assert_true(w->n_bursts <= 16);
    xsa_bursty_settle(w, event_ns, allocated, reserved, settle);
    for (size_t i = 0; i < w->n_bursts; i++) {
        if (settle[i] < 0) return -1;
        if (settle[i] > longest) longest = settle[i];
    }
    return longest;
}

static int64_t longest_settle(void) {
    assert_true(b.n_bursts >= 3);
    return longest_settle_of(&b, EVENT_NS);
}

static void test_decay_follows_live_memory_down_after_every_burst(void **state) {
    (void)state;
    for (int64_t lag = 0; lag <= 500; lag += 500) {
        xsa_replay_result off = replay("helper_thread:False", lag);
        assert_int_equal(longest_settle(), -1); /* the burst's memory stays without decay */
        xsa_replay_result on = replay("helper_thread:True,page_decay_ms:500", lag);
        int64_t longest = longest_settle(), bound = DECAY_MS * 1000000ll + 3 * (int64_t)TICK_NS + lag * (int64_t)EVENT_NS;
        print_message("lag %lld: GB·s %.2f -> %.2f, ratio %.4f -> %.4f, longest settling %.3f s (bound %.3f), "
                      "H100 ms on the allocation path %.1f -> %.1f, on the helper %.1f\n", (long long)lag,
                      off.reserved_gb_s, on.reserved_gb_s, off.ratio, on.ratio, longest / 1e9, bound / 1e9,
                      off.est_h100_driver_ns / 1e6, (on.est_h100_driver_ns - on.helper_est_h100_ns) / 1e6,
                      on.helper_est_h100_ns / 1e6);
        assert_true(longest >= 0 && longest <= bound);
        assert_true(on.reserved_gb_s <= 0.8 * off.reserved_gb_s);
        /* Measured 2026-11-28: 1.0002 -> 1.0002 at lag 0, 1.0016 at lag 500
         * (1.0030 before decay's regrowth was held to the peak of reserved
         * memory; re-grown memory is made of larger handles, pool/recycle.c's
         * rule); the bundled traces' are in docs/results-log.md. */
        assert_true(on.ratio <= off.ratio + 0.002);
        assert_true(on.helper_calls[XSA_DRV_mem_release] > 0);
    }
}

static void test_decay_takes_a_recorded_runs_bursts_back(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) {
        const xsa_bursty *w = &recorded[i];
        assert_int_equal(w->n_bursts, i ? 3 : 2);
        for (int64_t lag = 0; lag <= 500; lag += 500) {
            xsa_replay_result off = replay_of(w, RECORDED_EVENT_NS, "helper_thread:False", lag);
            assert_int_equal(longest_settle_of(w, RECORDED_EVENT_NS), -1);
            double kept = xsa_bursty_settled(w, allocated, reserved);
            xsa_replay_result on = replay_of(w, RECORDED_EVENT_NS, "helper_thread:True,page_decay_ms:500", lag);
            int64_t longest = longest_settle_of(w, RECORDED_EVENT_NS);
            print_message("recorded %s, lag %lld: GB·s %.2f -> %.2f, ratio %.4f -> %.4f, reserved / the steps' peak "
                          "kept %.3f, within 5%% after %.3f s at most\n", i ? "H100" : "H200", (long long)lag,
                          off.reserved_gb_s, on.reserved_gb_s, off.ratio, on.ratio, kept, longest / 1e9);
            /* Measured 2026-11-28: 0.526-0.583 s (H200), 0.571-0.736 s
             * (H100; never without repacking at lag 0). Each burst
             * regrows what decay gave back within the peak of reserved
             * memory so far (pool/recycle.c): peak reserved / peak
             * allocated 1.0023-1.0047 against 1.0058-1.0071 off (1.0071-
             * 1.0099 when the regrowth could take the whole headroom). */
            assert_true(kept > 1.5);
            assert_true(longest >= 0 && longest <= 1000000000);
            assert_true(on.reserved_gb_s <= 0.85 * off.reserved_gb_s);
            assert_true(on.ratio <= off.ratio);
        }
    }
}

/* The helper's jobs commit 100 events after their driver calls, the
 * allocator calls in between, as they can with the thread: readied pages
 * a growth overtook meanwhile must not raise the peak (on the GPU they
 * did: the side-stream loader at 1.02-1.06 instead of 1.010; here 1.0601
 * with the check in pool/ready.c taken out). */
static void test_late_commits_of_the_helper_never_raise_the_peak(void **state) {
    (void)state;
    xsa_trace t;
    char err[512];
    if (xsa_trace_load(LOADER, &t, err, sizeof err)) fail_msg("%s", err);
    for (int64_t lag = 0; lag <= 500; lag += 500) {
        xsa_replay_result off, on;
        xsa_replay_options o = {.driver = "sim", .conf = "helper_thread:False", .gpu_lag = lag, .event_ns = 100000};
        if (xsa_replay(&t, &o, &off, err, sizeof err)) fail_msg("%s", err);
        o.conf = "helper_thread:True,page_decay_ms:500";
        o.helper_deferred = 100;
        if (xsa_replay(&t, &o, &on, err, sizeof err)) fail_msg("%s", err);
        print_message("late commits, lag %lld: ratio %.4f -> %.4f\n", (long long)lag, off.ratio, on.ratio);
        assert_int_equal(on.violations, 0);
        assert_true(on.ratio <= off.ratio + 0.004);
        assert_true(on.helper_calls[XSA_DRV_mem_create] > 0); /* the helper readied pages */
    }
    xsa_trace_free(&t);
}

static void test_the_helper_alone_changes_no_choice(void **state) {
    (void)state;
    for (int64_t lag = 0; lag <= 500; lag += 500) {
        xsa_replay_result off = replay("helper_thread:False,page_recycling_headroom:0", lag);
        xsa_replay_result on = replay("helper_thread:True,page_decay_ms:0,page_recycling_headroom:0", lag);
        assert_int_equal(on.peak_reserved, off.peak_reserved);
        assert_true(on.reserved_gb_s == off.reserved_gb_s);
        assert_int_equal(on.pages_recycled, off.pages_recycled);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decay_follows_live_memory_down_after_every_burst),
        cmocka_unit_test(test_decay_takes_a_recorded_runs_bursts_back),
        cmocka_unit_test(test_late_commits_of_the_helper_never_raise_the_peak),
        cmocka_unit_test(test_the_helper_alone_changes_no_choice),
    };
    return cmocka_run_group_tests(tests, make, unmake);
}
