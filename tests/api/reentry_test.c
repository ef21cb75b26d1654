/*
 * reentry_test: memory hooks and the trace callback run with their
 * device's lock held; a call of theirs back into xsalloc never waits for
 * that lock. Reading the device's statistics works (what PyTorch's
 * trackers do: the figures are those of the call under way), as does any
 * call on another device; every other call on the same device fails at
 * once with XSA_ERROR_NOT_SUPPORTED and a sentence saying why, and the
 * allocation under way completes unharmed. A hang here is a failure by
 * the test's timeout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)

/* What the callbacks did, checked after the call that ran them. */
static struct {
    int calls;
    int64_t allocated_seen;           /* device 0's allocated bytes, read from the callback */
    xsa_status other_device, cache_info;
    xsa_status malloc_st, free_st, empty_st, history_st, settings_st, fraction_st, summary_st, snapshot_st;
    char malloc_msg[512];
} seen;

static void read_and_try_everything(int device) {
    seen.calls++;
    xsa_device_stats s;
    OK(xsa_get_stats(device, &s));
    seen.allocated_seen = s.allocated_bytes[XSA_STAT_ALL].current;
    size_t cached, largest;
    seen.cache_info = xsa_cache_info(device, &cached, &largest);
    seen.other_device = xsa_get_stats(1 - device, &s);
    void *p = NULL;
    seen.malloc_st = xsa_malloc(&p, MiB, device, NULL);
    snprintf(seen.malloc_msg, sizeof seen.malloc_msg, "%s", xsa_last_error());
    seen.free_st = xsa_free((void *)0x1000); /* any pointer: device 0 is the only answer with one range */
    seen.empty_st = xsa_empty_cache();
    seen.history_st = xsa_record_history(1, 16);
    seen.settings_st = xsa_set_allocator_settings("max_split_size_mb:64");
    seen.fraction_st = xsa_set_memory_fraction(0.5, device);
    char *text = NULL;
    seen.summary_st = xsa_memory_summary(device, 0, &text);
    seen.snapshot_st = xsa_snapshot_json(&text);
}

static void expect_refusals(void) {
    assert_int_equal(seen.cache_info, XSA_SUCCESS);
    assert_int_equal(seen.other_device, XSA_SUCCESS);
    assert_int_equal(seen.malloc_st, XSA_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(seen.malloc_msg, "xsa_malloc: called from a memory hook or trace callback"));
    assert_non_null(strstr(seen.malloc_msg, "may read statistics"));
    assert_int_equal(seen.free_st, XSA_ERROR_NOT_SUPPORTED);
    assert_int_equal(seen.empty_st, XSA_ERROR_NOT_SUPPORTED);
    assert_int_equal(seen.history_st, XSA_ERROR_NOT_SUPPORTED);
    assert_int_equal(seen.settings_st, XSA_ERROR_NOT_SUPPORTED);
    assert_int_equal(seen.fraction_st, XSA_ERROR_NOT_SUPPORTED);
    assert_int_equal(seen.summary_st, XSA_ERROR_NOT_SUPPORTED);
    assert_int_equal(seen.snapshot_st, XSA_ERROR_NOT_SUPPORTED);
}

static void on_malloc_post(const xsa_hook_info *info, void *user) {
    (void)user;
    if (info->device == 0 && seen.calls == 0) read_and_try_everything(0);
}

static void on_trace(int device, const xsa_history_entry *e, void *user) {
    (void)user;
    if (device == 0 && e->action == XSA_ACT_ALLOC && seen.calls == 0) read_and_try_everything(0);
}

static void test_hook_reads_stats_and_is_refused_the_rest(void **state) {
    (void)state;
    memset(&seen, 0, sizeof seen);
    xsa_memory_hooks hooks = {.malloc_post = on_malloc_post};
    int id;
    OK(xsa_register_hooks(&hooks, NULL, &id));
    void *p = NULL;
    OK(xsa_malloc(&p, 3 * MiB, 0, NULL)); /* the call under way completes */
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.allocated_seen, 3 * MiB); /* malloc_post: the block counted */
    expect_refusals();
    INVARIANTS(0);
    OK(xsa_unregister_hooks(id));
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].current, 3 * MiB); /* the refused malloc left nothing */
    OK(xsa_free(p));
    void *q = NULL;
    OK(xsa_malloc(&q, MiB, 0, NULL)); /* out of the callback, everything works again */
    OK(xsa_free(q));
}

static void test_trace_callback_reads_stats_and_is_refused_the_rest(void **state) {
    (void)state;
    memset(&seen, 0, sizeof seen);
    OK(xsa_set_trace_callback(on_trace, NULL));
    void *p = NULL;
    OK(xsa_malloc(&p, 2 * MiB, 0, NULL));
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.allocated_seen, 2 * MiB);
    expect_refusals();
    OK(xsa_set_trace_callback(NULL, NULL));
    OK(xsa_free(p));
    INVARIANTS(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hook_reads_stats_and_is_refused_the_rest, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_trace_callback_reads_stats_and_is_refused_the_rest,
                                        xsa_fixture_two_devices, xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
