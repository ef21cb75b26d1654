/*
 * sim_empty: the check every test ends with, at pool or API level: the
 * simulated driver was handed everything back (no handle, mapped byte,
 * reservation, cuMemAlloc, event, capture, graph, created stream, pinned
 * host allocation or registration left).
 */
#ifndef XSA_TESTS_SIM_EMPTY_H
#define XSA_TESTS_SIM_EMPTY_H

/* cmocka assertions on the simulated driver's usage. */
void xsa_fixture_expect_sim_empty(void);

#endif
