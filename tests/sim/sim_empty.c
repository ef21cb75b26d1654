/* sim_empty: see sim_empty.h. */
#include "tests/sim/sim_empty.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "xsalloc/sim.h"

void xsa_fixture_expect_sim_empty(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    assert_int_equal(u.handles, 0);
    assert_int_equal(u.mapped_bytes, 0);
    assert_int_equal(u.reservations, 0);
    assert_int_equal(u.mem_allocs, 0);
    assert_int_equal(u.events, 0);
    assert_int_equal(u.captures, 0);
    assert_int_equal(u.graphs, 0);
    assert_int_equal(u.graph_execs, 0);
    assert_int_equal(u.streams, 0);
    assert_int_equal(u.host_allocs, 0);
    assert_int_equal(u.host_registrations, 0);
}
