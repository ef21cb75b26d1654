/*
 * oom_test: out-of-memory recovery on a whole bundled trace (resnet_varbatch)
 * on simulated devices sized from the trace itself.
 *
 * A fault-free classic replay (PyTorch's native semantics, which classic
 * mode reproduces) gives the native peak reserved R and the live peak A.
 * With a device just above A but below R, the native allocator must give
 * cached memory back (release cached blocks, retry) to finish: the replay
 * succeeds, with retries and no out-of-memory. Expandable segments with
 * page recycling need no more than the live peak, so a device just above A
 * is enough for them too. With a device below A no allocator can finish:
 * the replay fails with the out-of-memory report, and afterwards the
 * simulated driver holds nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/sim/sim_empty.h"
#include "trace/replay.h"
#include "trace/trace.h"
#include "xsalloc/sim.h"

#define MiB ((size_t)1 << 20)
#define TRACE "benchmarks/traces/resnet_varbatch.trace.gz"
#define CLASSIC "expandable_segments:False"

static xsa_trace trace;
static char err[4096];

static size_t round_up(size_t bytes) { return (bytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB); }

static void device(size_t capacity) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = capacity;
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
}

static int replay(size_t capacity, const char *conf, xsa_replay_result *r) {
    device(capacity);
    int rc = xsa_replay(&trace, &(xsa_replay_options){.driver = "sim", .conf = conf}, r, err, sizeof err);
    xsa_fixture_expect_sim_empty();
    return rc;
}

static void test_recovery_and_clean_failure(void **state) {
    (void)state;
    if (xsa_trace_load(TRACE, &trace, err, sizeof err)) fail_msg("%s", err);
    xsa_replay_result base, r;
    if (replay((size_t)80 << 30, CLASSIC, &base)) fail_msg("%s", err);
    size_t live = (size_t)base.peak_allocated, native = (size_t)base.peak_reserved;
    assert_true(base.num_alloc_retries == 0 && native > live + live / 8);
    /* Just above the live peak: 2% (and whole 2 MiB pages) more. */
    size_t tight = round_up(live + live / 50);
    assert_true(tight < native);
    if (replay(tight, CLASSIC, &r)) fail_msg("classic on %zu MiB: %s", tight / MiB, err);
    assert_true(r.num_alloc_retries > 0);
    assert_int_equal(r.num_ooms, 0);
    assert_true((size_t)r.peak_reserved <= tight);
    print_message("live peak %zu MiB, native reserved %zu MiB; on %zu MiB classic retried %lld times\n", live / MiB,
                  native / MiB, tight / MiB, (long long)r.num_alloc_retries);
    if (replay(tight, "", &r)) fail_msg("expandable on %zu MiB: %s", tight / MiB, err);
    assert_int_equal(r.num_ooms, 0);
    /* Below the live peak: a clean failure with the report, for both modes. */
    size_t small = round_up(live - live / 10);
    const char *confs[] = {CLASSIC, ""};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(replay(small, confs[i], &r), -1);
        if (!strstr(err, "XSA_ERROR_OUT_OF_MEMORY") || !strstr(err, "CUDA out of memory. Tried to allocate") ||
            !strstr(err, "has a total capacity of"))
            fail_msg("'%s': %s", confs[i], err);
    }
    xsa_trace_free(&trace);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_recovery_and_clean_failure)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
