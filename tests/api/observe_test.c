/*
 * observe_test: memory hooks (order, counts, arguments, registration
 * limits), the trace ring (events and their fields, overflow keeping the
 * newest, stop and restart) and the trace recorder (exact file, skipped
 * events of allocations older than the ring, and a replay of the written
 * file through the benchmarks' replay), the adapters' calls (trace tags,
 * the trace callback, one device's snapshot as structs, settings), on the
 * simulated driver.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/observe.h"
#include "tests/api/api_fixture.h"
#include "trace/replay.h"
#include "trace/trace.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define S1 ((void *)0x1001) /* stream 1 of a replay on the simulated driver */
#define S2 ((void *)0x1002)

static int setup(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, 1 * GiB);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    xsa_shutdown();
    return 0;
}

/* ---- hooks ---- */

typedef struct call {
    char set;           /* 'A' or 'B' */
    const char *hook;
    xsa_hook_info info;
} call;

static call calls[64];
static int n_calls;

#define HOOK(name)                                                            \
    static void name(const xsa_hook_info *info, void *user) {                 \
        if (n_calls < 64) calls[n_calls++] = (call){*(char *)user, #name, *info}; \
    }
HOOK(malloc_pre)
HOOK(malloc_post)
HOOK(alloc_pre)
HOOK(alloc_post)
HOOK(free_pre)
HOOK(free_post)

static const xsa_memory_hooks all_hooks = {malloc_pre, malloc_post, alloc_pre, alloc_post, free_pre, free_post};

/* Checks the calls logged since the last check: "A:malloc_pre B:malloc_pre ...". */
static void expect_calls(const char *want) {
    char got[1024] = "";
    for (int i = 0; i < n_calls; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%c:%s", i ? " " : "", calls[i].set, calls[i].hook);
    assert_string_equal(got, want);
}

static void expect_info(int i, size_t size, size_t mem_size, void *ptr, int pool) {
    assert_int_equal(calls[i].info.device, 0);
    assert_int_equal(calls[i].info.size, size);
    assert_int_equal(calls[i].info.mem_size, mem_size);
    assert_ptr_equal(calls[i].info.ptr, ptr);
    assert_int_equal(calls[i].info.pool_id, pool);
    assert_ptr_equal(calls[i].info.stream, S1);
}

static void test_hooks_order_counts_and_arguments(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:False"));
    static char a = 'A', b = 'B';
    int ida = -1, idb = -1;
    OK(xsa_register_hooks(&all_hooks, &a, &ida));
    OK(xsa_register_hooks(&all_hooks, &b, &idb));
    assert_int_equal(ida, 0);
    assert_int_equal(idb, 1);

    /* A miss: new memory (a 2 MiB small segment) between malloc_pre and malloc_post. */
    n_calls = 0;
    void *p = NULL, *q = NULL;
    OK(xsa_malloc(&p, 1000, 0, S1));
    expect_calls("A:malloc_pre B:malloc_pre A:alloc_pre B:alloc_pre A:alloc_post B:alloc_post A:malloc_post B:malloc_post");
    expect_info(0, 1000, 1024, NULL, XSA_STAT_SMALL_POOL);
    expect_info(2, 1000, 1024, NULL, XSA_STAT_SMALL_POOL);
    expect_info(4, 1000, 2 * MiB, p, XSA_STAT_SMALL_POOL);
    expect_info(6, 1000, 1024, p, XSA_STAT_SMALL_POOL);

    /* A hit: no alloc_* (CuPy's rule). */
    n_calls = 0;
    OK(xsa_malloc(&q, 3 * MiB, 0, S1));
    OK(xsa_free(q));
    n_calls = 0;
    OK(xsa_malloc(&q, 3 * MiB, 0, S1));
    expect_calls("A:malloc_pre B:malloc_pre A:malloc_post B:malloc_post");
    expect_info(2, 3 * MiB, 3 * MiB, q, XSA_STAT_LARGE_POOL);

    n_calls = 0;
    OK(xsa_free(p));
    expect_calls("A:free_pre B:free_pre A:free_post B:free_post");
    expect_info(0, 1000, 1024, p, XSA_STAT_SMALL_POOL);
    expect_info(3, 1000, 1024, p, XSA_STAT_SMALL_POOL);

    /* Unregistered sets are not called; a failed malloc gets no *_post. */
    OK(xsa_unregister_hooks(idb));
    assert_int_equal(xsa_unregister_hooks(idb), XSA_ERROR_INVALID_VALUE);
    n_calls = 0;
    assert_int_equal(xsa_malloc(&p, 1023 * MiB + 1, 0, S1), XSA_ERROR_OUT_OF_MEMORY); /* q holds 20 MiB */
    expect_calls("A:malloc_pre A:alloc_pre");
    n_calls = 0;
    OK(xsa_free(q));
    expect_calls("A:free_pre A:free_post");

    /* Bad calls change nothing. */
    n_calls = 0;
    assert_int_equal(xsa_free((void *)0x1234), XSA_ERROR_INVALID_POINTER);
    expect_calls("");
    OK(xsa_unregister_hooks(ida));
    OK(xsa_malloc(&p, 1000, 0, S1));
    OK(xsa_free(p));
    expect_calls("");
    assert_int_equal(xsa_check_invariants(0), XSA_SUCCESS);
}

static void test_hook_registration_limits(void **state) {
    (void)state;
    int id = -1;
    assert_int_equal(xsa_register_hooks(NULL, NULL, &id), XSA_ERROR_INVALID_VALUE);
    for (int i = 0; i < XSA_MAX_HOOKS; i++) {
        OK(xsa_register_hooks(&all_hooks, "x", &id));
        assert_int_equal(id, i);
    }
    assert_int_equal(xsa_register_hooks(&all_hooks, "x", &id), XSA_ERROR_INVALID_VALUE);
    OK(xsa_unregister_hooks(3));
    OK(xsa_register_hooks(&all_hooks, "x", &id));
    assert_int_equal(id, 3); /* the free slot is reused */
    xsa_shutdown();          /* unregisters every set */
    OK(xsa_init(NULL));
    n_calls = 0;
    void *p = NULL;
    OK(xsa_malloc(&p, 100, 0, NULL));
    OK(xsa_free(p));
    assert_int_equal(n_calls, 0);
    assert_int_equal(xsa_unregister_hooks(3), XSA_ERROR_INVALID_VALUE);
}

/* ---- the ring ---- */

static xsa_history_entry *history(size_t *n) {
    xsa_history_entry *h = NULL;
    assert_true(xsa_history_copy(0, &h, n));
    return h;
}

static void test_ring_records_pool_events(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:True"));
    OK(xsa_record_history(1, 100));
    void *p = NULL;
    OK(xsa_malloc(&p, 3 * MiB + 5, 0, S1));
    OK(xsa_record_stream(p, S2));
    OK(xsa_free(p)); /* waits for an event on S2 */
    OK(xsa_empty_cache());
    assert_int_equal(xsa_malloc(&p, 2 * GiB, 0, S1), XSA_ERROR_OUT_OF_MEMORY);
    size_t n = 0;
    xsa_history_entry *h = history(&n);
    static const xsa_action want[] = {
        XSA_ACT_SEGMENT_MAP, XSA_ACT_ALLOC, XSA_ACT_RECORD_STREAM, XSA_ACT_FREE_REQUESTED,
        XSA_ACT_FREE_COMPLETED, XSA_ACT_SEGMENT_UNMAP, XSA_ACT_OOM,
    };
    assert_int_equal(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(h[i].action, want[i]);
        if (i) assert_true(h[i].time_ns >= h[i - 1].time_ns);
    }
    assert_int_equal(h[0].size, 4 * MiB); /* two pages mapped */
    assert_int_equal(h[1].size, 3 * MiB + 5);
    assert_int_equal(h[1].addr, h[0].addr);
    assert_ptr_equal(h[1].stream, S1);
    assert_ptr_equal(h[2].stream, S2);
    assert_int_equal(h[3].size, 3 * MiB + 5);
    assert_int_equal(h[4].addr, h[1].addr);
    assert_int_equal(h[5].addr, h[0].addr);
    assert_int_equal(h[5].size, 4 * MiB);
    assert_int_equal(h[6].size, 2 * GiB);
    assert_true(h[6].addr > 0 && h[6].addr <= GiB); /* the device's free bytes */
    free(h);

    /* Classic segments: segment_alloc / segment_free. */
    xsa_shutdown();
    OK(xsa_init("expandable_segments:False"));
    OK(xsa_record_history(1, 100));
    OK(xsa_malloc(&p, 100, 0, NULL));
    OK(xsa_free(p));
    OK(xsa_empty_cache());
    h = history(&n);
    assert_int_equal(n, 5);
    assert_int_equal(h[0].action, XSA_ACT_SEGMENT_ALLOC);
    assert_int_equal(h[0].size, 2 * MiB);
    assert_int_equal(h[4].action, XSA_ACT_SEGMENT_FREE);
    assert_int_equal(h[4].addr, h[0].addr);
    free(h);
}

static void test_ring_overflow_keeps_the_newest(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:False"));
    assert_int_equal(xsa_record_history(1, 0), XSA_ERROR_INVALID_VALUE);
    OK(xsa_record_history(1, 8));
    /* segment_alloc, then alloc/free_requested/free_completed per round. */
    uintptr_t ptrs[6];
    for (size_t i = 0; i < 6; i++) {
        void *p = NULL;
        OK(xsa_malloc(&p, 4096 + i, 0, NULL));
        ptrs[i] = (uintptr_t)p;
        OK(xsa_free(p));
    }
    size_t n = 0;
    xsa_history_entry *h = history(&n);
    assert_int_equal(n, 8);
    /* 19 events: the last 8 are free_completed of round 3, then rounds 4 and 5... */
    for (size_t i = 0; i < 8; i++) {
        size_t event = 19 - 8 + i, round = (event - 1) / 3;
        assert_int_equal(h[i].action, (xsa_action)(XSA_ACT_ALLOC + (event - 1) % 3));
        assert_int_equal(h[i].addr, ptrs[round]);
        assert_int_equal(h[i].size, 4096 + round);
    }
    free(h);

    /* Stopped: nothing more is recorded, the ring stays for snapshots. */
    OK(xsa_record_history(0, 0));
    void *p = NULL;
    OK(xsa_malloc(&p, 100, 0, NULL));
    OK(xsa_free(p));
    h = history(&n);
    assert_int_equal(n, 8);
    assert_int_equal(h[7].size, 4096 + 5);
    free(h);
    /* Restarted: a fresh ring. */
    OK(xsa_record_history(1, 2));
    h = history(&n);
    assert_int_equal(n, 0);
    OK(xsa_malloc(&p, 100, 0, NULL));
    OK(xsa_free(p));
    h = history(&n);
    assert_int_equal(n, 2);
    assert_int_equal(h[0].action, XSA_ACT_FREE_REQUESTED);
    free(h);
}

/* ---- the recorder ---- */

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

/* The file without its first line (the comment naming the recorder). */
static const char *body(const char *text) {
    assert_true(text[0] == '#');
    return strchr(text, '\n') + 1;
}

static void temp_path(char *path, size_t n, const char *name) {
    const char *dir = getenv("TEST_TMPDIR");
    snprintf(path, n, "%s/%s", dir ? dir : "/tmp", name);
}

static void test_recorder_writes_a_replayable_trace(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    OK(xsa_record_history(1, 1000));
    void *a, *b, *c, *d;
    OK(xsa_malloc(&a, 1000, 0, S1));
    OK(xsa_malloc(&b, 3 * MiB, 0, NULL));
    OK(xsa_record_stream(b, S2));
    OK(xsa_free(a));
    OK(xsa_malloc(&c, 5000, 0, S2));
    OK(xsa_free(b));
    OK(xsa_free(c));
    OK(xsa_malloc(&d, 7, 0, S1)); /* left live */
    char path[4096];
    temp_path(path, sizeof path, "recorded.trace");
    OK(xsa_write_trace(0, path));
    assert_string_equal(body(read_text(path)),
                        "a 0 1000 0\n"
                        "a 1 3145728 1\n"
                        "r 1 2\n"
                        "f 0\n"
                        "a 2 5000 2\n"
                        "f 1\n"
                        "f 2\n"
                        "a 3 7 0\n");
    assert_int_equal(xsa_write_trace(0, "/nonexistent/dir/x.trace"), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_write_trace(1, path), XSA_ERROR_INVALID_DEVICE);
    xsa_shutdown();

    /* It loads and replays (3 streams: simulated driver). */
    xsa_trace t;
    char err[512];
    if (xsa_trace_load(path, &t, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(t.n_events, 8);
    assert_int_equal(t.n_streams, 3);
    xsa_replay_result r;
    if (xsa_replay(&t, &(xsa_replay_options){.driver = "sim", .conf = ""}, &r, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(r.events, 8);
    xsa_trace_free(&t);
}

static void test_recorder_leaves_out_allocations_older_than_the_ring(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    OK(xsa_record_history(1, 5));
    void *p, *q;
    OK(xsa_malloc(&p, 100, 0, NULL)); /* segment_map, alloc: both overwritten */
    OK(xsa_malloc(&q, 200, 0, NULL)); /* alloc: the oldest event kept */
    OK(xsa_free(p));                  /* its free is left out */
    OK(xsa_free(q));
    char path[4096];
    temp_path(path, sizeof path, "overflowed.trace");
    OK(xsa_write_trace(0, path));
    assert_string_equal(body(read_text(path)), "a 0 200 0\nf 0\n");
}

/* ---- what framework adapters read ---- */

typedef struct seen {
    int n;
    xsa_history_entry last;
    int device;
} seen;

static void on_trace(int device, const xsa_history_entry *e, void *user) {
    seen *s = user;
    s->n++;
    s->last = *e;
    s->device = device;
}

static void test_tags_mark_a_threads_events(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:True"));
    OK(xsa_record_history(1, 100));
    void *p = NULL, *q = NULL;
    xsa_set_trace_tag(41);
    OK(xsa_malloc(&p, 3 * MiB, 0, S1)); /* segment_map + alloc, tagged 41 */
    xsa_set_trace_tag(0);
    OK(xsa_malloc(&q, 1 * MiB, 0, S1)); /* the small pool's segment_map + alloc, untagged */
    xsa_set_trace_tag(42);
    OK(xsa_free(p));
    xsa_set_trace_tag(0);
    size_t n = 0;
    xsa_history_entry *h = history(&n);
    assert_int_equal(n, 6);
    static const uint64_t want[] = {41, 41, 0, 0, 42, 42};
    for (size_t i = 0; i < n; i++) assert_int_equal(h[i].tag, want[i]);
    free(h);
    OK(xsa_free(q));
}

static void test_trace_callback_sees_events_unrecorded(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:True"));
    seen s = {0};
    OK(xsa_set_trace_callback(on_trace, &s));
    void *p = NULL;
    xsa_set_trace_tag(7);
    OK(xsa_malloc(&p, 1 * MiB, 0, S1));
    xsa_set_trace_tag(0);
    assert_int_equal(s.n, 2); /* segment_map, alloc */
    assert_int_equal(s.last.action, XSA_ACT_ALLOC);
    assert_int_equal(s.last.addr, (uintptr_t)p);
    assert_int_equal(s.last.size, 1 * MiB);
    assert_int_equal(s.last.tag, 7);
    assert_int_equal(s.device, 0);
    size_t n = 0;
    free(history(&n));
    assert_int_equal(n, 0); /* recording is off: the ring holds nothing */
    OK(xsa_set_trace_callback(NULL, NULL));
    OK(xsa_free(p));
    assert_int_equal(s.n, 2); /* removed */
}

static void test_device_snapshot_structs(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:True"));
    xsa_device_snapshot snap;
    OK(xsa_device_snapshot_take(0, &snap)); /* before any allocation: empty */
    assert_int_equal(snap.n_segments + snap.n_blocks + snap.n_history, 0);
    xsa_device_snapshot_free(&snap);
    OK(xsa_record_history(1, 10));
    void *p = NULL, *q = NULL;
    OK(xsa_malloc(&p, 3 * MiB, 0, S1));
    OK(xsa_malloc(&q, 100, 0, S1)); /* the small pool's own segment */
    OK(xsa_mempool_create(0, (xsa_mempool_id){0, 9}));
    int uses = 0;
    OK(xsa_mempool_use_count(0, (xsa_mempool_id){0, 9}, &uses));
    assert_int_equal(uses, 1);
    OK(xsa_mempool_use_count(0, (xsa_mempool_id){0, 8}, &uses));
    assert_int_equal(uses, 0);
    OK(xsa_device_snapshot_take(0, &snap));
    assert_int_equal(snap.n_segments, 2);
    size_t allocated = 0;
    for (size_t i = 0; i < snap.n_segments; i++) {
        const xsa_snap_segment *g = &snap.segments[i];
        assert_true(g->expandable);
        assert_true(g->first_block + g->n_blocks <= snap.n_blocks);
        for (size_t b = 0; b < g->n_blocks; b++)
            if (snap.blocks[g->first_block + b].state == XSA_SNAP_ALLOCATED) {
                uintptr_t a = snap.blocks[g->first_block + b].addr;
                assert_true(a == (uintptr_t)p || a == (uintptr_t)q);
                allocated++;
            }
    }
    assert_int_equal(allocated, 2);
    assert_int_equal(snap.n_history, 4); /* two maps, two allocs */
    xsa_device_snapshot_free(&snap);
    assert_null(snap.segments);
    assert_int_equal(xsa_device_snapshot_take(0, NULL), XSA_ERROR_INVALID_VALUE);
    OK(xsa_mempool_release(0, (xsa_mempool_id){0, 9}));
    OK(xsa_free(p));
    OK(xsa_free(q));
}

static void test_settings_say_where_they_came_from(void **state) {
    (void)state;
    OK(xsa_init("max_split_size_mb:64,page_recycling:False"));
    xsa_settings s;
    OK(xsa_get_settings(&s));
    assert_string_equal(s.source, "xsa_init");
    assert_string_equal(s.text, "max_split_size_mb:64,page_recycling:False");
    assert_true(s.expandable_segments);
    assert_false(s.page_recycling);
    assert_int_equal(s.max_split_size, 64 * MiB);
    assert_int_equal(xsa_get_settings(NULL), XSA_ERROR_INVALID_VALUE);
}

/* The driver's call counts, and times once timing is on, as JSON. */
static void test_driver_calls_as_json(void **state) {
    (void)state;
    OK(xsa_init("page_recycling:False"));
    size_t needed = 0;
    char small[4], buf[2048];
    void *p;
    OK(xsa_time_driver_calls(1));
    OK(xsa_malloc(&p, 6 * MiB, 0, NULL)); /* a growth: 3 pages created and mapped */
    assert_int_equal(xsa_driver_calls_json(NULL, 0, &needed), XSA_ERROR_INVALID_VALUE);
    assert_true(needed > sizeof small);
    assert_int_equal(xsa_driver_calls_json(small, sizeof small, &needed), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_driver_calls_json(buf, sizeof buf, NULL), XSA_ERROR_INVALID_VALUE);
    OK(xsa_driver_calls_json(buf, sizeof buf, &needed));
    assert_int_equal(strlen(buf) + 1, needed);
    assert_non_null(strstr(buf, "\"mem_create\": [3, "));
    assert_non_null(strstr(buf, "\"mem_map\": [3, "));
    assert_null(strstr(buf, "mem_unmap")); /* never called: left out */
    assert_int_equal(buf[0], '{');
    assert_int_equal(buf[needed - 2], '}');
    /* Timed: the microseconds of some entry point are not 0.0 (the
     * simulated driver's calls take a little time). */
    assert_non_null(strstr(buf, "."));
    double us = 0;
    const char *c = strstr(buf, "\"mem_map\": [3, ");
    assert_int_equal(sscanf(c + strlen("\"mem_map\": [3, "), "%lf", &us), 1);
    assert_true(us > 0);
    /* Then the helper thread's part: none here (it is off). */
    unsigned long long helper_calls = 1;
    double helper_us = 1;
    assert_int_equal(sscanf(strchr(c, ',') + 1, "%*f, %llu, %lf]", &helper_calls, &helper_us), 2);
    assert_int_equal(helper_calls, 0);
    assert_true(helper_us == 0);
    OK(xsa_time_driver_calls(0));
    OK(xsa_free(p));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hooks_order_counts_and_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hook_registration_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_records_pool_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_overflow_keeps_the_newest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recorder_writes_a_replayable_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recorder_leaves_out_allocations_older_than_the_ring, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tags_mark_a_threads_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trace_callback_sees_events_unrecorded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_snapshot_structs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settings_say_where_they_came_from, setup, teardown),
        cmocka_unit_test_setup_teardown(test_driver_calls_as_json, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
