/* tests/api/api_fixture: shared set-up, teardown and data checks of the API-level tests (see api_fixture.h). */
#include "tests/api/api_fixture.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

void xsa_fixture_use_sim(int devices, size_t capacity) {
    xsa_shutdown();
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.devices = devices;
    c.capacity = capacity;
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
    assert_int_equal(xsa_use_driver("sim"), XSA_SUCCESS);
    /* Lazy initialisation reads the first of these that is set. */
    unsetenv("XSALLOC_CONF");
    unsetenv("PYTORCH_ALLOC_CONF");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
}

void xsa_fixture_fill(void *p, size_t size, unsigned char seed) {
    unsigned char *b = p;
    for (size_t i = 0; i < size; i += 512) b[i] = (unsigned char)(seed + i / 512);
    b[size - 1] = seed;
}

int xsa_fixture_filled(const void *p, size_t size, unsigned char seed) {
    const unsigned char *b = p;
    for (size_t i = 0; i < size; i += 512)
        if (b[i] != (unsigned char)(seed + i / 512)) return 0;
    return b[size - 1] == seed;
}

int xsa_fixture_open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

void xsa_fixture_shutdown_and_expect_empty(void) {
    xsa_shutdown();
    xsa_fixture_expect_sim_empty();
}

int xsa_fixture_two_devices(void **state) {
    (void)state;
    xsa_fixture_use_sim(2, (size_t)1 << 30);
    return 0;
}

int xsa_fixture_teardown(void **state) {
    (void)state;
    xsa_fixture_shutdown_and_expect_empty();
    return 0;
}
