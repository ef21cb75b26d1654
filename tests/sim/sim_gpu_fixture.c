/* sim_gpu_fixture: see sim_gpu_fixture.h. */
#include "tests/sim/sim_gpu_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <string.h>

#include <cmocka.h>

#include "tests/sim/sim_empty.h"

xsa_driver *D;

void check_sim(const char *file, int line) {
    char err[256] = "";
    if (!xsa_sim_check(err, sizeof err)) fail_msg("%s:%d: xsa_sim_check: %s", file, line, err);
}

int setup(void **state) {
    (void)state;
    D = xsa_driver_sim();
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = 64 * MiB;
    assert_int_equal(XSA_CU_SUCCESS, xsa_sim_configure(&c));
    return 0;
}

xsa_sim_usage usage(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    return u;
}

int teardown(void **state) {
    (void)state;
    CHECK();
    xsa_fixture_expect_sim_empty();
    assert_int_equal(0, usage().pending_kernels);
    assert_int_equal(0, usage().pending_copies);
    return 0;
}

xsa_event new_event(void) {
    xsa_event e = NULL;
    OK(XSA_DRV(D, event_create, &e, 0));
    return e;
}

void launch(xsa_stream s, xsa_devptr p, size_t size) { OK(xsa_sim_launch(s, p, size)); }

xsa_devptr reserve(size_t size) {
    xsa_devptr p = 0;
    OK(XSA_DRV(D, mem_address_reserve, &p, size, 0));
    return p;
}

void map_at(xsa_devptr va, size_t size, xsa_mem_handle h) {
    int dev = 0;
    OK(XSA_DRV(D, mem_map, va, size, 0, h));
    OK(XSA_DRV(D, mem_set_access, va, size, &dev, 1));
}

mapping new_mapping(size_t pages) {
    mapping m = {.size = pages * GRAN};
    OK(XSA_DRV(D, mem_create, &m.h, m.size, 0, 0));
    m.va = reserve(m.size);
    map_at(m.va, m.size, m.h);
    return m;
}

void drop_mapping(const mapping *m) {
    OK(XSA_DRV(D, mem_unmap, m->va, m->size));
    OK(XSA_DRV(D, mem_release, m->h));
    OK(XSA_DRV(D, mem_address_free, m->va, m->size));
}

void expect_violations(uint64_t unmapped, uint64_t races, uint64_t bad, uint64_t failed, const char *const *words) {
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use != unmapped || v.races != races || v.bad_launches != bad || v.failed_captures != failed)
        fail_msg("violations %llu/%llu/%llu/%llu, expected %llu/%llu/%llu/%llu (first: %s)",
                 (unsigned long long)v.unmapped_in_use, (unsigned long long)v.races,
                 (unsigned long long)v.bad_launches, (unsigned long long)v.failed_captures,
                 (unsigned long long)unmapped, (unsigned long long)races, (unsigned long long)bad,
                 (unsigned long long)failed, v.first);
    for (; words && *words; words++)
        if (!strstr(v.first, *words)) fail_msg("'%s' not in: %s", *words, v.first);
    xsa_sim_clear_violations();
    CHECK();
}
