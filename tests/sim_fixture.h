/*
 * sim_fixture: what the API-level tests share around each case: shut
 * xsalloc down and check that the simulated driver was handed everything
 * back (no handle, mapping, reservation, cuMemAlloc or event left).
 */
#ifndef XSA_TESTS_SIM_FIXTURE_H
#define XSA_TESTS_SIM_FIXTURE_H

/* xsa_shutdown, then cmocka assertions on the simulated driver's usage. */
void xsa_fixture_shutdown_and_expect_empty(void);

#endif
