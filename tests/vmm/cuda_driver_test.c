/*
 * cuda_driver_test: the real driver's behaviour where it cannot load, and
 * the run-time driver choice (xsa_driver_default, XSA_DRIVER: api/'s).
 *
 * Design: CI has no GPU and no libcuda.so.1, so this checks the failure
 * path: NULL plus a sentence naming libcuda, the same outcome on every call
 * (setup runs once, also when first reached from several threads at the
 * same moment), and the fall-back to the simulated driver. On a machine
 * with a usable GPU those assertions do not hold and are skipped; the real
 * driver is exercised there by tests/gpu/probes/driver_probe.c.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/devices.h"
#include "vmm/driver_cuda.h"
#include "xsalloc/sim.h"

enum { THREADS = 8 };

static pthread_barrier_t start_line;

static void *first_call(void *arg) {
    char *err = arg;
    pthread_barrier_wait(&start_line);
    return xsa_driver_cuda(err, 256);
}

/* Runs first, so the racing threads are the ones that trigger setup. */
static void test_concurrent_first_call_agrees(void **state) {
    (void)state;
    static char errs[THREADS][256];
    pthread_t threads[THREADS];
    void *results[THREADS];
    pthread_barrier_init(&start_line, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, first_call, errs[i]), 0);
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(threads[i], &results[i]), 0);
    pthread_barrier_destroy(&start_line);
    for (int i = 1; i < THREADS; i++) {
        assert_ptr_equal(results[i], results[0]);
        assert_string_equal(errs[i], errs[0]);
    }
}

static int gpu_usable(void) { return xsa_driver_cuda(NULL, 0) != NULL; }

static void test_cuda_unavailable_says_why(void **state) {
    (void)state;
    if (gpu_usable()) skip();
    char first[256] = "", second[256] = "";
    assert_null(xsa_driver_cuda(first, sizeof first));
    assert_true(strlen(first) > 0);
    assert_non_null(strstr(first, "libcuda"));
    /* Idempotent: the same answer, not a second attempt with a new story. */
    assert_null(xsa_driver_cuda(second, sizeof second));
    assert_string_equal(first, second);
}

static void test_cuda_unavailable_respects_errlen(void **state) {
    (void)state;
    if (gpu_usable()) skip();
    char err[8];
    memset(err, 'x', sizeof err);
    assert_null(xsa_driver_cuda(err, sizeof err));
    assert_int_equal(strlen(err), sizeof err - 1);
    /* No buffer at all is allowed too. */
    assert_null(xsa_driver_cuda(NULL, 0));
    assert_null(xsa_driver_cuda(err, 0));
}

static void test_forced_cuda_without_gpu_fails(void **state) {
    (void)state;
    if (gpu_usable()) skip();
    char err[256] = "";
    setenv("XSA_DRIVER", "cuda", 1);
    assert_null(xsa_driver_default(err, sizeof err));
    assert_non_null(strstr(err, "libcuda"));
}

static void test_bogus_driver_named_in_message(void **state) {
    (void)state;
    char err[256] = "";
    setenv("XSA_DRIVER", "bogus", 1);
    assert_null(xsa_driver_default(err, sizeof err));
    assert_non_null(strstr(err, "bogus"));
}

static void test_forced_sim(void **state) {
    (void)state;
    setenv("XSA_DRIVER", "sim", 1);
    xsa_driver *d = xsa_driver_default(NULL, 0);
    assert_non_null(d);
    assert_string_equal(d->name, "sim");
}

static void test_default_falls_back_to_sim(void **state) {
    (void)state;
    if (gpu_usable()) skip();
    char err[256] = "";
    xsa_driver *d = xsa_driver_default(err, sizeof err);
    assert_non_null(d);
    assert_ptr_equal(d, xsa_driver_sim());
    assert_string_equal(d->name, "sim");
}

static int clear_env(void **state) {
    (void)state;
    unsetenv("XSA_DRIVER");
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_first_call_agrees, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_cuda_unavailable_says_why, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_cuda_unavailable_respects_errlen, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_forced_cuda_without_gpu_fails, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_bogus_driver_named_in_message, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_forced_sim, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_default_falls_back_to_sim, clear_env, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
