/* sim_fixture: shared teardown of the API-level tests (see sim_fixture.h). */
#include "tests/sim_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api/xsalloc.h"
#include "vmm/sim.h"

void xsa_fixture_shutdown_and_expect_empty(void) {
    xsa_shutdown();
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    assert_int_equal(u.handles, 0);
    assert_int_equal(u.mapped_bytes, 0);
    assert_int_equal(u.reservations, 0);
    assert_int_equal(u.mem_allocs, 0);
    assert_int_equal(u.events, 0);
}
