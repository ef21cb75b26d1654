/*
 * settings_test: settings changed at run time (xsa_set_allocator_settings,
 * what torch.cuda.memory._set_allocator_settings reaches through the torch
 * adapter) on the simulated driver: PyTorch's reset and keep rules, each
 * honoured key taking effect from the next request on every device,
 * expandable segments turned off and on with memory of both kinds live
 * (PyTorch's test_max_split_expandable), the keys fixed at initialisation
 * refused by name with nothing changed, a driver failure changing nothing,
 * what is reported, and changes racing allocations on other threads.
 * xsa_check_allocator_settings answers as the change would and changes
 * nothing. Invariants are checked after each step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pool/options.h"
#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static xsa_settings settings(void) {
    xsa_settings s;
    OK(xsa_get_settings(&s));
    return s;
}

static xsa_device_stats stats(int device) {
    xsa_device_stats s;
    OK(xsa_get_stats(device, &s));
    return s;
}

static void *alloc(size_t size, int device) {
    void *p = NULL;
    OK(xsa_malloc(&p, size, device, NULL));
    INVARIANTS(device);
    return p;
}

static void release(void *p, int device) {
    OK(xsa_free(p));
    INVARIANTS(device);
}

/* Is ptr in an expandable segment? (A snapshot's segment holding it.) */
static bool expandable_at(void *ptr, int device) {
    xsa_device_snapshot s;
    OK(xsa_device_snapshot_take(device, &s));
    int found = -1;
    for (size_t i = 0; i < s.n_segments; i++)
        if ((uintptr_t)ptr >= s.segments[i].addr && (uintptr_t)ptr < s.segments[i].addr + s.segments[i].total_size)
            found = s.segments[i].expandable;
    xsa_device_snapshot_free(&s);
    if (found < 0) fail_msg("%p is in no segment", ptr);
    return found;
}

/* PyTorch's rules: three keys return to their defaults when not given,
 * the others keep their values. */
static void test_reset_and_kept_keys(void **state) {
    (void)state;
    OK(xsa_init("max_split_size_mb:64,garbage_collection_threshold:0.5,roundup_power2_divisions:4,"
                "page_recycling:False,page_recycling_headroom:0.5"));
    OK(xsa_set_allocator_settings("expandable_segments:False"));
    xsa_settings s = settings();
    assert_false(s.expandable_segments);
    assert_false(s.page_recycling); /* kept */
    assert_true(s.max_split_size == SIZE_MAX);
    assert_true(s.garbage_collection_threshold == 0.0);
    for (int i = 0; i < 16; i++) assert_int_equal(s.roundup_power2_divisions[i], 0);
    assert_int_equal(stats(0).max_split_size, -1);
    OK(xsa_set_allocator_settings("page_recycling:True, max_split_size_mb:40"));
    s = settings();
    assert_false(s.expandable_segments); /* kept from the call before */
    assert_true(s.page_recycling);
    assert_true(s.max_split_size == 40 * MiB);
    assert_int_equal(stats(1).max_split_size, 40 * MiB);
    OK(xsa_set_allocator_settings("")); /* PyTorch's tests do this: back to the defaults of the reset keys */
    assert_true(settings().max_split_size == SIZE_MAX);
    assert_false(settings().expandable_segments);
}

/* helper_thread and page_decay_ms are kept keys; decay needs the helper,
 * so asking for decay turns it on and turning it off turns decay off. */
static void test_helper_and_decay_kept_and_tied(void **state) {
    (void)state;
    OK(xsa_init("helper_thread:False"));
    assert_false(settings().helper_thread);
    OK(xsa_set_allocator_settings("page_decay_ms:300"));
    assert_true(settings().helper_thread);
    assert_int_equal(settings().page_decay_ms, 300);
    OK(xsa_set_allocator_settings("max_split_size_mb:40")); /* both kept */
    assert_true(settings().helper_thread);
    assert_int_equal(settings().page_decay_ms, 300);
    OK(xsa_set_allocator_settings("helper_thread:False"));
    assert_false(settings().helper_thread);
    assert_int_equal(settings().page_decay_ms, 0);
    FAILS(XSA_ERROR_CONFIG, xsa_set_allocator_settings("helper_thread:False,page_decay_ms:20"), "helper_thread is False");
    OK(xsa_set_allocator_settings("helper_thread:True"));
    assert_true(settings().helper_thread);
    assert_int_equal(settings().page_decay_ms, 0); /* kept: the helper alone */
}

/* max_split_size_mb set after a classic segment was split: its free
 * remainder is oversize now, but a live block shares its segment, so the
 * out-of-memory path's release of oversize blocks must not free that
 * segment (it once did: the block's memory went and the stats kept it). */
static void test_oversize_release_spares_a_split_segment(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, (size_t)256 << 20);
    OK(xsa_init("expandable_segments:False"));
    void *a, *b, *c;
    OK(xsa_malloc(&a, 32 * MiB, 0, NULL));
    OK(xsa_free(a));
    OK(xsa_malloc(&b, 4 * MiB, 0, NULL)); /* splits the cached 32 MiB segment */
    OK(xsa_set_allocator_settings("max_split_size_mb:20"));
    FAILS(XSA_ERROR_OUT_OF_MEMORY, xsa_malloc(&c, 256 * MiB, 0, NULL), "out of memory");
    INVARIANTS(0);
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].current, 32 * MiB);
    OK(xsa_free(b));
}

/* Page recycling turned off at run time takes the decay it did not ask for
 * with it (decay keeps its peak by moving pages); decay asked for then, or
 * in the same string, runs, and stays through later settings. */
static void test_recycling_off_turns_default_decay_off(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    assert_int_equal(settings().page_decay_ms, XSA_HELPER_BY_DEFAULT ? XSA_DEFAULT_PAGE_DECAY_MS : 0);
    OK(xsa_set_allocator_settings("page_recycling:False"));
    assert_int_equal(settings().page_decay_ms, 0);
    assert_int_equal(settings().helper_thread, XSA_HELPER_BY_DEFAULT); /* the helper stays */
    OK(xsa_set_allocator_settings("page_decay_ms:300"));
    assert_int_equal(settings().page_decay_ms, 300);
    OK(xsa_set_allocator_settings("max_split_size_mb:40"));
    assert_int_equal(settings().page_decay_ms, 300);
    OK(xsa_set_allocator_settings("page_recycling:True"));
    assert_int_equal(settings().page_decay_ms, 300);
    OK(xsa_set_allocator_settings("page_recycling:False,page_decay_ms:200"));
    assert_int_equal(settings().page_decay_ms, 200);
}

/* roundup_power2_divisions changes the size of the next request, as in
 * PyTorch's test_allocator_settings; max_split_size_mb the oversize rules,
 * and the oversize counts follow (the checker recounts them). */
static void test_honoured_keys_take_effect(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    size_t bytes = 84 * MiB; /* 21 Mi floats */
    int64_t before = stats(0).active_bytes[XSA_STAT_ALL].allocated;
    void *x = alloc(bytes, 0);
    assert_int_equal(stats(0).active_bytes[XSA_STAT_ALL].allocated - before, bytes);
    OK(xsa_set_allocator_settings("roundup_power2_divisions:4"));
    before = stats(0).active_bytes[XSA_STAT_ALL].allocated;
    void *y = alloc(bytes, 0);
    assert_int_equal(stats(0).active_bytes[XSA_STAT_ALL].allocated - before, 96 * MiB);
    OK(xsa_set_allocator_settings("max_split_size_mb:90"));
    before = stats(0).active_bytes[XSA_STAT_ALL].allocated;
    void *z = alloc(bytes, 0); /* the divisions are back to 0 */
    assert_int_equal(stats(0).active_bytes[XSA_STAT_ALL].allocated - before, bytes);
    assert_int_equal(stats(0).oversize_allocations.current, 1); /* y, 96 MiB */
    OK(xsa_set_allocator_settings("max_split_size_mb:80"));
    assert_int_equal(stats(0).oversize_allocations.current, 3);
    INVARIANTS(0);
    release(y, 0);
    OK(xsa_set_allocator_settings(""));
    assert_int_equal(stats(0).oversize_allocations.current, 0);
    release(x, 0), release(z, 0);
}

/* PyTorch's test_max_split_expandable: with 120 MiB allowed, 40 MiB in a
 * classic segment, 40 in an expandable one, 40 classic again; a fourth
 * fails; all freed, 120 MiB fit (the cache of both kinds released). With
 * expandable segments off, a free expandable block takes no request. */
static void test_expandable_segments_off_and_on(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    OK(xsa_set_memory_fraction(120.0 / 1024, 0));
    OK(xsa_set_allocator_settings("expandable_segments:False,max_split_size_mb:40"));
    void *a = alloc(40 * MiB, 0);
    OK(xsa_set_allocator_settings("expandable_segments:True,max_split_size_mb:40"));
    void *b = alloc(40 * MiB, 0);
    OK(xsa_set_allocator_settings("expandable_segments:False,max_split_size_mb:40"));
    void *c = alloc(40 * MiB, 0);
    assert_false(expandable_at(a, 0));
    assert_true(expandable_at(b, 0));
    assert_false(expandable_at(c, 0));
    assert_int_equal(stats(0).segment[XSA_STAT_ALL].current, 2); /* the classic ones */
    void *d = NULL;
    FAILS(XSA_ERROR_OUT_OF_MEMORY, xsa_malloc(&d, 40 * MiB, 0, NULL), "CUDA out of memory.");
    INVARIANTS(0);
    release(b, 0);
    OK(xsa_set_allocator_settings("expandable_segments:False")); /* no oversize rule keeps e out of b's block */
    void *e = alloc(4 * MiB, 0); /* not in b's free expandable block */
    assert_false(expandable_at(e, 0));
    release(a, 0), release(c, 0), release(e, 0);
    void *f = alloc(120 * MiB, 0);
    assert_false(expandable_at(f, 0));
    release(f, 0);
    OK(xsa_empty_cache()); /* else f's cached classic block would serve g, as in PyTorch */
    OK(xsa_set_allocator_settings("expandable_segments:True"));
    void *g = alloc(120 * MiB, 0);
    assert_true(expandable_at(g, 0));
    /* Device 1's pool, made after the changes, has them. */
    void *h = alloc(MiB, 1);
    assert_true(expandable_at(h, 1));
    release(g, 0), release(h, 1);
    OK(xsa_empty_cache());
    assert_int_equal(stats(0).reserved_bytes[XSA_STAT_ALL].current, 0);
}

/* Keys set when the pools are made: another value fails naming the key,
 * and nothing of the call applies; the value in use is accepted. */
static void test_fixed_keys_refused_by_name(void **state) {
    (void)state;
    OK(xsa_init("max_split_size_mb:64"));
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_set_allocator_settings("max_split_size_mb:100,peer_access:True"),
          "key 'peer_access' cannot change after initialisation");
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_set_allocator_settings("ipc_handles:True"), "'ipc_handles'");
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_set_allocator_settings("expandable_handle_mb:4"), "'expandable_handle_mb'");
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_set_allocator_settings("per_process_memory_fraction:0.5"),
          "xsa_set_memory_fraction");
    assert_true(settings().max_split_size == 64 * MiB); /* nothing changed */
    assert_string_equal(settings().source, "xsa_init");
    OK(xsa_set_allocator_settings("peer_access:False,ipc_handles:False,expandable_handle_mb:20,"
                                  "per_process_memory_fraction:1"));
    /* Malformed: the parser's sentence, nothing changed. */
    FAILS(XSA_ERROR_CONFIG, xsa_set_allocator_settings("max_split_size_mb:abc"), "'max_split_size_mb' value 'abc'");
    FAILS(XSA_ERROR_CONFIG, xsa_set_allocator_settings("foo:1,bar:2"), "unknown key 'foo'");
    FAILS(XSA_ERROR_INVALID_VALUE, xsa_set_allocator_settings(NULL), "NULL");
    assert_true(settings().max_split_size == SIZE_MAX); /* the accepted call's reset */
}

static void test_expandable_off_refused_while_peer_access(void **state) {
    (void)state;
    OK(xsa_init("peer_access:True"));
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_set_allocator_settings("expandable_segments:False"),
          "'expandable_segments' cannot be False while peer_access is True");
    assert_true(settings().expandable_segments);
}

/* Asking a classic device whether it can map virtual memory is the one
 * step that can fail: it fails the call, nothing changed. */
static void test_driver_failure_changes_nothing(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:False"));
    void *a = alloc(MiB, 0);
    xsa_sim_fail_call(XSA_DRV_device_get_attribute, 1, XSA_CU_ERROR_UNKNOWN);
    FAILS(XSA_ERROR_DRIVER, xsa_set_allocator_settings("expandable_segments:True,max_split_size_mb:64"),
          "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED");
    assert_false(settings().expandable_segments);
    assert_true(settings().max_split_size == SIZE_MAX);
    void *b = alloc(MiB, 0);
    assert_false(expandable_at(b, 0));
    OK(xsa_set_allocator_settings("expandable_segments:True"));
    void *c = alloc(4 * MiB, 0);
    assert_true(expandable_at(c, 0));
    release(a, 0), release(b, 0), release(c, 0);
}

/* What reports the settings names the change: xsa_get_settings (PyTorch's
 * last_allocator_settings), the summary's line, the snapshot. */
static void test_change_is_reported(void **state) {
    (void)state;
    OK(xsa_init("page_recycling:False"));
    OK(xsa_set_allocator_settings("garbage_collection_threshold:0.5"));
    OK(xsa_set_allocator_settings("expandable_segments:False"));
    xsa_settings s = settings();
    assert_string_equal(s.source, "xsa_set_allocator_settings");
    assert_string_equal(s.text, "expandable_segments:False");
    char *text = NULL;
    OK(xsa_memory_summary(0, 0, &text));
    assert_non_null(strstr(text, "xsalloc settings from xsa_init: \"page_recycling:False\"; changed at run time by "
                                 "xsa_set_allocator_settings: \"expandable_segments:False\""));
    xsa_free_buffer(text);
    OK(xsa_snapshot_json(&text));
    assert_non_null(strstr(text, "\"PYTORCH_CUDA_ALLOC_CONF\":\"expandable_segments:False\""));
    assert_non_null(strstr(text, "\"conf_source\":\"xsa_set_allocator_settings\""));
    xsa_free_buffer(text);
}

/* The check (what the torch adapter asks before torch's own setter)
 * answers as the change would, for every kind of refusal and for a string
 * that would be taken, and changes nothing either way. */
static void test_check_answers_as_the_change_and_changes_nothing(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:False,max_split_size_mb:64"));
    void *a = alloc(MiB, 0);
    FAILS(XSA_ERROR_CONFIG, xsa_check_allocator_settings("max_split_size_mb:abc"),
          "xsa_check_allocator_settings: key 'max_split_size_mb' value 'abc'");
    FAILS(XSA_ERROR_CONFIG, xsa_check_allocator_settings("roundup_power2_divisions:[>:8]"), "'>' entry needs");
    FAILS(XSA_ERROR_NOT_SUPPORTED, xsa_check_allocator_settings("per_process_memory_fraction:0.5"),
          "'per_process_memory_fraction' cannot change");
    xsa_sim_fail_call(XSA_DRV_device_get_attribute, 1, XSA_CU_ERROR_UNKNOWN);
    FAILS(XSA_ERROR_DRIVER, xsa_check_allocator_settings("expandable_segments:True"),
          "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED");
    OK(xsa_check_allocator_settings("expandable_segments:True,garbage_collection_threshold:0.5"));
    xsa_settings s = settings();
    assert_false(s.expandable_segments); /* nothing of any of them applied */
    assert_true(s.max_split_size == 64 * MiB);
    assert_true(s.garbage_collection_threshold == 0.0);
    assert_string_equal(s.source, "xsa_init");
    void *b = alloc(MiB, 0);
    assert_false(expandable_at(b, 0));
    release(a, 0), release(b, 0);
}

/* Changes race allocations on other threads (TSan runs this): each
 * request sees one set of settings, the invariants hold throughout. */
static atomic_int stop;

static void *churn(void *arg) {
    int device = (int)(intptr_t)arg;
    while (!atomic_load(&stop)) {
        void *p[8];
        for (int i = 0; i < 8; i++) OK(xsa_malloc(&p[i], (size_t)(i + 1) * 700 * 1024, device, NULL));
        for (int i = 0; i < 8; i++) OK(xsa_free(p[i]));
    }
    return NULL;
}

static void test_changes_race_allocations(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    pthread_t t[2];
    atomic_store(&stop, 0);
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn, (void *)(intptr_t)i);
    const char *confs[] = {"expandable_segments:False,roundup_power2_divisions:4", "max_split_size_mb:20",
                           "expandable_segments:True,garbage_collection_threshold:0.9"};
    for (int i = 0; i < 60; i++) {
        OK(xsa_set_allocator_settings(confs[i % 3]));
        xsa_settings s = settings();
        (void)s;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    INVARIANTS(0);
    INVARIANTS(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reset_and_kept_keys, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_helper_and_decay_kept_and_tied, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_recycling_off_turns_default_decay_off, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_oversize_release_spares_a_split_segment, NULL, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_honoured_keys_take_effect, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_expandable_segments_off_and_on, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_fixed_keys_refused_by_name, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_expandable_off_refused_while_peer_access, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_driver_failure_changes_nothing, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_change_is_reported, xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_check_answers_as_the_change_and_changes_nothing, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_changes_race_allocations, xsa_fixture_two_devices, xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
