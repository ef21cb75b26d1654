/*
 * tests/api/api_fixture: what the API-level tests share around each case: start
 * from a shut-down xsalloc on a freshly configured simulated driver, and
 * at the end check that the driver was handed everything back (no handle,
 * mapping, reservation, cuMemAlloc or event left).
 */
#ifndef XSA_TESTS_SIM_FIXTURE_H
#define XSA_TESTS_SIM_FIXTURE_H

#include <stddef.h>
#include <string.h>

#include "tests/sim/sim_empty.h"
#include "xsalloc/xsalloc.h"

/* The checks of the API-level tests (cmocka's fail_msg: include cmocka.h
 * first). A call that must succeed; one that must fail with `status` and a
 * last error containing `needle`; the invariant checker of device dev. Each
 * failure names the call and xsalloc's last error. */
#define OK(call)                                                             \
    do {                                                                     \
        xsa_status st_ = (call);                                             \
        if (st_ != XSA_SUCCESS) fail_msg("%s: %s", #call, xsa_last_error()); \
    } while (0)
#define FAILS(status, call, needle)                                                         \
    do {                                                                                    \
        xsa_status st_ = (call);                                                            \
        if (st_ != (status) || !strstr(xsa_last_error(), needle))                          \
            fail_msg("%s gave %s \"%s\", want %s with \"%s\"", #call, xsa_status_name(st_), \
                     xsa_last_error(), #status, needle);                                    \
    } while (0)
#define INVARIANTS(dev)                                                                             \
    do {                                                                                            \
        if (xsa_check_invariants(dev) != XSA_SUCCESS) fail_msg("device %d: %s", dev, xsa_last_error()); \
    } while (0)

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

/* xsa_shutdown, then xsa_fixture_expect_sim_empty (tests/sim/sim_empty.h). */
void xsa_fixture_shutdown_and_expect_empty(void);

/* The cases' usual cmocka setup and teardown: two simulated devices of
 * 1 GiB; xsa_fixture_shutdown_and_expect_empty. */
int xsa_fixture_two_devices(void **state);
int xsa_fixture_teardown(void **state);

#endif
