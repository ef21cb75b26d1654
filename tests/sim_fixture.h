/*
 * sim_fixture: what the API-level tests share around each case: start
 * from a shut-down xsalloc on a freshly configured simulated driver, and
 * at the end check that the driver was handed everything back (no handle,
 * mapping, reservation, cuMemAlloc or event left).
 */
#ifndef XSA_TESTS_SIM_FIXTURE_H
#define XSA_TESTS_SIM_FIXTURE_H

#include <stddef.h>

#include "tests/sim_empty.h"

/* xsa_shutdown, then the simulated driver with `devices` devices of
 * `capacity` bytes (other settings default) chosen for the next init, with
 * XSALLOC_CONF, PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF unset. */
void xsa_fixture_use_sim(int devices, size_t capacity);

/* A byte pattern of `seed` over size bytes (one byte every 512 and the
 * last), and whether p holds it: what data written in one place and read
 * through another mapping (IPC) is checked with. */
void xsa_fixture_fill(void *p, size_t size, unsigned char seed);
int xsa_fixture_filled(const void *p, size_t size, unsigned char seed);

/* How many file descriptors this process has open (/proc/self/fd): a test
 * compares it before and after to see that none leaked. */
int xsa_fixture_open_fds(void);

/* xsa_shutdown, then xsa_fixture_expect_sim_empty (tests/sim_empty.h). */
void xsa_fixture_shutdown_and_expect_empty(void);

#endif
