/* ranges_test: the lock-free reservation range table (api/ranges). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api/ranges.h"

static void test_find_add_remove(void **state) {
    (void)state;
    assert_int_equal(xsa_ranges_find(0x1000), -1);
    assert_true(xsa_ranges_add(0x300000, 0x100000, 2));
    assert_true(xsa_ranges_add(0x100000, 0x100000, 0));
    assert_true(xsa_ranges_add(0x200000, 0x100000, 1));
    assert_int_equal(xsa_ranges_find(0x100000), 0);
    assert_int_equal(xsa_ranges_find(0x1fffff), 0);
    assert_int_equal(xsa_ranges_find(0x200000), 1);
    assert_int_equal(xsa_ranges_find(0x3fffff), 2);
    assert_int_equal(xsa_ranges_find(0x400000), -1);
    assert_int_equal(xsa_ranges_find(0xfffff), -1);
    xsa_ranges_remove(0x200000);
    assert_int_equal(xsa_ranges_find(0x200000), -1);
    assert_int_equal(xsa_ranges_find(0x300000), 2);
    assert_int_equal(xsa_ranges_find(0x100000), 0);
    xsa_ranges_clear();
    assert_int_equal(xsa_ranges_find(0x100000), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_find_add_remove)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
