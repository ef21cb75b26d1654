/*
 * sim_gpu_fixture: what the driver-level tests of the simulated GPU
 * (sim_timeline_test, sim_capture_test) share: a freshly configured
 * simulated driver per case, the driver's invariant check after each step,
 * kernels, events, mappings, and exact violation counts. At the end of a
 * case the driver holds nothing and no kernel or copy is pending.
 */
#ifndef XSA_TESTS_SIM_GPU_FIXTURE_H
#define XSA_TESTS_SIM_GPU_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/driver.h"
#include "xsalloc/sim.h"

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)
#define S1 ((xsa_stream)0x1001)
#define S2 ((xsa_stream)0x1002)
#define S3 ((xsa_stream)0x1003)
#define LAG 100

extern xsa_driver *D; /* the simulated driver */

/* xsa_sim_check, failing the case with its sentence and the caller's line. */
void check_sim(const char *file, int line);
#define CHECK() check_sim(__FILE__, __LINE__)
/* A driver call with the expected result, then the invariants. */
#define EXPECT(want, call)                                                     \
    do {                                                                       \
        assert_int_equal((want), (call));                                      \
        CHECK();                                                               \
    } while (0)
#define OK(call) EXPECT(XSA_CU_SUCCESS, call)

/* cmocka setup and teardown: a 64 MiB simulated device; at the end the
 * invariants, nothing left with the driver, no kernel or copy pending. */
int setup(void **state);
int teardown(void **state);

xsa_sim_usage usage(void);
xsa_event new_event(void);
void launch(xsa_stream s, xsa_devptr p, size_t size);

/* `pages` pages of one handle, mapped at a fresh reservation with access. */
typedef struct {
    xsa_devptr va;
    size_t size;
    xsa_mem_handle h;
} mapping;
xsa_devptr reserve(size_t size);
void map_at(xsa_devptr va, size_t size, xsa_mem_handle h);
mapping new_mapping(size_t pages);
void drop_mapping(const mapping *m);

/* Exactly these counts; the first sentence contains each of `words`
 * (NULL-terminated, may be NULL) when anything was counted. Then clears
 * them. */
void expect_violations(uint64_t unmapped, uint64_t races, uint64_t bad, uint64_t failed, const char *const *words);
#define NO_VIOLATION() expect_violations(0, 0, 0, 0, NULL)

#endif
