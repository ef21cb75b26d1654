/*
 * fault_test: the CI share of the fault-injection sweep (fault_lib.h says
 * what each run checks). For every workload, one fault-free run with the
 * invariant checker after every step counts the driver calls; then, for
 * every entry point F it calls, a sample of call indices N (the first, the
 * last and evenly spaced ones between) is made to fail, with the checker
 * every CHECK_EVERY steps, after the failed step and at the end. Fewer
 * samples under sanitizers. fault_sweep runs every N.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tests/api/fault_lib.h"

#define CHECK_EVERY 100

static size_t samples_per_entry(void) { return getenv("XSA_UNDER_SANITIZER") ? 3 : 8; }

/* The k-th of n sample indices in 1..count, first and last included. */
static uint64_t sample(uint64_t count, size_t k, size_t n) { return n < 2 ? 1 : 1 + (count - 1) * k / (n - 1); }

static void run_case(const fi_case *c) {
    char err[2048];
    fi_workload w;
    fi_outcome base, o;
    if (fi_load(&w, c, err, sizeof err)) fail_msg("%s", err);
    if (fi_run(&w, 0, 0, 1, &base, err, sizeof err)) fail_msg("%s", err);
    size_t injections = 0, errored = 0, n = samples_per_entry();
    for (int e = 0; e < XSA_DRV_COUNT; e++) {
        uint64_t last = 0;
        for (size_t k = 0; k < n && base.calls[e]; k++) {
            uint64_t nth = sample(base.calls[e], k, n);
            if (nth == last) continue;
            last = nth;
            if (fi_run(&w, (xsa_driver_entry)e, nth, CHECK_EVERY, &o, err, sizeof err)) fail_msg("%s", err);
            if (!o.fired) fail_msg("%s: call %llu of %s never happened", c->name, (unsigned long long)nth,
                                   xsa_driver_entry_name((xsa_driver_entry)e));
            injections++;
            errored += (size_t)o.errored;
        }
    }
    print_message("%s: %zu steps, %zu injections (%zu failed the request, %zu absorbed)\n", c->name, base.steps,
                  injections, errored, injections - errored);
    fi_unload(&w);
}

static void test_gpt2_expandable(void **state) { (void)state; run_case(&fi_cases[0]); }
static void test_resnet_classic(void **state) { (void)state; run_case(&fi_cases[1]); }
static void test_multistream_expandable(void **state) { (void)state; run_case(&fi_cases[2]); }
static void test_multistream_classic(void **state) { (void)state; run_case(&fi_cases[3]); }
static void test_gpt2_shares(void **state) { (void)state; run_case(&fi_cases[4]); }
static void test_multistream_helper(void **state) { (void)state; run_case(&fi_cases[5]); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_expandable),
        cmocka_unit_test(test_resnet_classic),
        cmocka_unit_test(test_multistream_expandable),
        cmocka_unit_test(test_multistream_classic),
        cmocka_unit_test(test_gpt2_shares),
        cmocka_unit_test(test_multistream_helper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
