/*
 * sim_cost_test: the simulated driver's H100 estimate of its calls' CPU
 * cost (sim/cost.c) goes by handle mapping where the real driver's does.
 */
#include "tests/sim/sim_driver_fixture.h"

/* ---- the H100 cost estimate ------------------------------------------------------ */

#define US 1000u /* the estimate counts nanoseconds */

/* The estimate added since *mark, which moves to now. */
static uint64_t est_since(uint64_t *mark) {
    uint64_t now = xsa_sim_h100_est_ns(), added = now - *mark;
    *mark = now;
    return added;
}

/* The driver's cost goes by handle mapping: a grant or an unmap over ten
 * one-page handles costs ten times one over a ten-page handle. */
static void test_h100_estimate(void **state) {
    (void)state;
    int dev = 0;
    xsa_devptr p = reserve(20 * GRAN);
    uint64_t mark = 0;
    assert_int_equal(0, est_since(&mark)); /* a reservation is not in the model */
    xsa_mem_handle one[10];
    for (int i = 0; i < 10; i++) {
        one[i] = create(GRAN, 0);
        OK(XSA_DRV(D, mem_map, p + i * GRAN, GRAN, 0, one[i]));
    }
    OK(XSA_DRV(D, mem_set_access, p, 10 * GRAN, &dev, 1));
    assert_int_equal(10 * 15 * US + 10 * 2 * US + 10 * 34 * US, est_since(&mark));
    xsa_mem_handle ten = create(10 * GRAN, 0);
    map_rw(p + 10 * GRAN, 10 * GRAN, ten, 0);
    assert_int_equal(15 * US + 2 * US + 34 * US, est_since(&mark));
    /* Granted again: 0.5 us a mapping, over one or both layouts. */
    OK(XSA_DRV(D, mem_set_access, p, 10 * GRAN, &dev, 1));
    assert_int_equal(10 * US / 2, est_since(&mark));
    OK(XSA_DRV(D, mem_set_access, p + 10 * GRAN, 10 * GRAN, &dev, 1));
    assert_int_equal(US / 2, est_since(&mark));
    OK(XSA_DRV(D, mem_set_access, p + 8 * GRAN, 4 * GRAN, &dev, 1));
    assert_int_equal(3 * US / 2, est_since(&mark));
    /* A refused call pays its cost a call, not by mapping; an injected
     * fault pays nothing. */
    FAILS(XSA_CU_ERROR_NOT_SUPPORTED, XSA_DRV(D, mem_map, p, GRAN, GRAN, ten));
    FAILS(XSA_CU_ERROR_INVALID_VALUE, XSA_DRV(D, mem_unmap, p + 10 * GRAN, GRAN));
    assert_int_equal(2 * US, est_since(&mark));
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_UNKNOWN);
    FAILS(XSA_CU_ERROR_UNKNOWN, XSA_DRV(D, mem_unmap, p, 10 * GRAN));
    assert_int_equal(0, est_since(&mark));
    /* One unmap over the ten one-page mappings costs as ten unmaps. */
    OK(XSA_DRV(D, mem_unmap, p, 10 * GRAN));
    assert_int_equal(10 * 25 * US, est_since(&mark));
    OK(XSA_DRV(D, mem_unmap, p + 10 * GRAN, 10 * GRAN));
    assert_int_equal(25 * US, est_since(&mark));
    for (int i = 0; i < 10; i++) OK(XSA_DRV(D, mem_release, one[i]));
    OK(XSA_DRV(D, mem_release, ten));
    OK(XSA_DRV(D, mem_address_free, p, 20 * GRAN));
    assert_int_equal(11 * US, est_since(&mark));
    /* Events: 1 us a record, a query (ready or not) and a stream wait. */
    xsa_event e = new_event();
    OK(XSA_DRV(D, event_record, e, S1));
    FAILS(XSA_CU_ERROR_NOT_READY, XSA_DRV(D, event_query, e));
    OK(XSA_DRV(D, stream_wait_event, S2, e));
    xsa_sim_complete_all();
    OK(XSA_DRV(D, event_destroy, e));
    assert_int_equal(3 * US, est_since(&mark));
    /* Another device granted on mappings the first has: not yet accessible. */
    configure(2, 64 * MiB);
    assert_int_equal(0, xsa_sim_h100_est_ns());
    p = reserve(2 * GRAN);
    one[0] = create(GRAN, 0);
    one[1] = create(GRAN, 0);
    OK(XSA_DRV(D, mem_map, p, GRAN, 0, one[0]));
    OK(XSA_DRV(D, mem_map, p + GRAN, GRAN, 0, one[1]));
    OK(XSA_DRV(D, mem_set_access, p, 2 * GRAN, &dev, 1));
    mark = xsa_sim_h100_est_ns();
    int both[2] = {0, 1};
    OK(XSA_DRV(D, mem_set_access, p, 2 * GRAN, both, 2));
    OK(XSA_DRV(D, mem_set_access, p, 2 * GRAN, &both[1], 1));
    assert_int_equal(2 * 34 * US + 2 * US / 2, est_since(&mark));
    OK(XSA_DRV(D, mem_unmap, p, 2 * GRAN));
    OK(XSA_DRV(D, mem_release, one[0]));
    OK(XSA_DRV(D, mem_release, one[1]));
    OK(XSA_DRV(D, mem_address_free, p, 2 * GRAN));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_h100_estimate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
