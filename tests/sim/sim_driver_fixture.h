/*
 * sim_driver_fixture: the harness of the simulated driver's tests
 * (sim_driver_test, sim_cost_test, sim_driver_system_test). Every case
 * starts from a fresh configuration (small capacities so that out-of-memory
 * is cheap to reach), calls xsa_sim_check after each step and ends with
 * every usage counter back at zero (sim_teardown).
 */
#ifndef XSA_TESTS_SIM_DRIVER_FIXTURE_H
#define XSA_TESTS_SIM_DRIVER_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "xsalloc/sim.h"

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)
#define S1 ((xsa_stream)0x1000)
#define S2 ((xsa_stream)0x2000)

extern xsa_driver *D;

void check_sim(const char *file, int line);
#define CHECK() check_sim(__FILE__, __LINE__)
#define OK(call) assert_int_equal(XSA_CU_SUCCESS, (call))
/* A call that must fail with `err`, leaving the simulator consistent. */
#define FAILS(err, call)                                                       \
    do {                                                                       \
        assert_int_equal((err), (call));                                       \
        CHECK();                                                               \
    } while (0)

void configure(int devices, size_t capacity);
int setup(void **state);    /* one device of 64 MiB */
int teardown(void **state); /* checks, every usage counter zero, faults cleared */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
void assert_usage_zero(void);
xsa_sim_usage usage(void);
size_t free_mem(int device);
xsa_devptr reserve(size_t size);
xsa_mem_handle create(size_t size, int device);
/* Maps the handle at p and grants `device` access. */
void map_rw(xsa_devptr p, size_t size, xsa_mem_handle h, int device);
void fill(xsa_devptr p, size_t size, unsigned char seed);
void assert_filled(xsa_devptr p, size_t size, unsigned char seed);
xsa_event new_event(void);

/* Runs fn(arg) in a child with the default SIGSEGV action (sanitizers
 * install their own) and returns its wait status. */
int in_child(int (*fn)(void *), void *arg);
void assert_faults(xsa_devptr p);   /* reading p kills a child with SIGSEGV */
void assert_readable(xsa_devptr p); /* reading p does not */
/* Whether any host mapping covers address p. */
bool host_mapped(xsa_devptr p);

#endif
