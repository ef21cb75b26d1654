/*
 * snapshot_test: the JSON and pickle writers and the snapshot.
 *
 * Python reads what the C side writes: python3's own json and pickle
 * modules (no torch needed) must load the documents, and
 * tests/gpu/checks/snapshot_viz_check.py --no-torch must accept the snapshots
 * (layout of torch.cuda.memory._snapshot(), blocks tiling segments, the
 * viewer's walk back through the trace, JSON equal to the pickle) and
 * print the expected counts. Cases skip when python3 is absent. The last
 * snapshot is also left in the test's outputs (snapshot.pickle) for the
 * torch check on a GPU machine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/emit.h"
#include "api/pickle.h"
#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)

static const char *tmpdir(void) {
    const char *dir = getenv("TEST_TMPDIR");
    return dir ? dir : "/tmp";
}

static void skip_without_python(void) {
    if (system("python3 -c '' >/dev/null 2>&1") != 0) skip();
}

/* Runs cmd; returns its exit status, its stdout in out. */
static int run(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* ---- the writers ---- */

/* One document with every kind of value and the integer and string sizes
 * whose encodings differ, and containers long enough to be batched. */
static void emit_document(xsa_emitter *e) {
    static const int64_t ints[] = {0, 255, 256, 65535, 65536, -1, -129, INT32_MIN, INT32_MAX, (int64_t)1 << 31,
                                   -((int64_t)1 << 31) - 1, (int64_t)1 << 40, -((int64_t)1 << 40), INT64_MIN, INT64_MAX};
    char long_str[301];
    memset(long_str, 'x', 300);
    long_str[300] = '\0';
    xsa_emit_dict(e);
    xsa_emit_key(e, "ints"), xsa_emit_list(e);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) xsa_emit_int(e, ints[i]);
    xsa_emit_end(e);
    xsa_emit_key(e, "long"), xsa_emit_str(e, long_str);
    xsa_emit_key(e, "escapes"), xsa_emit_str(e, "q\" b\\ n\n t\t");
    xsa_emit_key(e, "many"), xsa_emit_list(e);
    for (int i = 0; i < 2500; i++) xsa_emit_int(e, i);
    xsa_emit_end(e);
    xsa_emit_key(e, "pairs"), xsa_emit_dict(e);
    for (int i = 0; i < 1500; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        xsa_emit_key(e, key), xsa_emit_list(e), xsa_emit_int(e, i), xsa_emit_end(e);
    }
    xsa_emit_end(e);
    xsa_emit_key(e, "tuple"), xsa_emit_tuple(e), xsa_emit_int(e, 1), xsa_emit_str(e, "two"), xsa_emit_end(e);
    xsa_emit_key(e, "misc"), xsa_emit_list(e), xsa_emit_bool(e, true), xsa_emit_bool(e, false), xsa_emit_none(e),
        xsa_emit_real(e, 0.25), xsa_emit_real(e, 3.0), xsa_emit_dict(e), xsa_emit_end(e), xsa_emit_list(e), xsa_emit_end(e),
        xsa_emit_end(e);
    xsa_emit_end(e);
}

static void test_writers_read_back_in_python(void **state) {
    (void)state;
    skip_without_python();
    char json_path[4096], pickle_path[4096], cmd[16384], out[4096];
    snprintf(json_path, sizeof json_path, "%s/doc.json", tmpdir());
    snprintf(pickle_path, sizeof pickle_path, "%s/doc.pickle", tmpdir());
    xsa_emitter e;
    void *data;
    size_t len;
    xsa_emit_json(&e);
    emit_document(&e);
    assert_true(xsa_emit_finish(&e, &data, &len));
    assert_int_equal(strlen(data), len);
    write_file(json_path, data, len);
    free(data);
    xsa_emit_pickle(&e);
    emit_document(&e);
    assert_true(xsa_emit_finish(&e, &data, &len));
    write_file(pickle_path, data, len);
    free(data);
    /* Python builds the same document and compares. */
    snprintf(cmd, sizeof cmd,
             "python3 -c '\n"
             "import json, pickle, sys\n"
             "ints = [0, 255, 256, 65535, 65536, -1, -129, -2**31, 2**31 - 1, 2**31, -2**31 - 1, 2**40, -2**40, -2**63, 2**63 - 1]\n"
             "want = {\"ints\": ints, \"long\": \"x\" * 300, \"escapes\": \"q\\\" b\\\\ n\\n t\\t\",\n"
             "        \"many\": list(range(2500)), \"pairs\": {\"k%%d\" %% i: [i] for i in range(1500)},\n"
             "        \"tuple\": (1, \"two\"), \"misc\": [True, False, None, 0.25, 3.0, {}, []]}\n"
             "p = pickle.load(open(sys.argv[1], \"rb\"))\n"
             "j = json.load(open(sys.argv[2]))\n"
             "assert p == want, p\n"
             "assert j == dict(want, tuple=[1, \"two\"]), j\n"
             "assert type(j[\"misc\"][4]) is float\n"
             "print(\"same\")' %s %s 2>&1",
             pickle_path, json_path);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_string_equal(out, "same\n");
}

/* ---- the snapshot ---- */

static int setup(void **state) {
    (void)state;
    xsa_fixture_use_sim(2, (size_t)1 << 30);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    xsa_shutdown();
    return 0;
}

/* Writes both snapshots, runs the checker and compares its digest. */
static void check_snapshot(const char *name, const char *digest) {
    char json_path[4096], pickle_path[4096], cmd[16384], out[4096];
    snprintf(json_path, sizeof json_path, "%s/%s.json", tmpdir(), name);
    snprintf(pickle_path, sizeof pickle_path, "%s/%s.pickle", tmpdir(), name);
    char *json = NULL;
    OK(xsa_snapshot_json(&json));
    write_file(json_path, json, strlen(json));
    xsa_free_buffer(json);
    OK(xsa_dump_snapshot(pickle_path));
    const char *outputs = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    if (outputs) {
        snprintf(cmd, sizeof cmd, "%s/%s.pickle", outputs, name);
        OK(xsa_dump_snapshot(cmd));
    }
    snprintf(cmd, sizeof cmd, "python3 tests/gpu/checks/snapshot_viz_check.py --no-torch --digest --json %s %s 2>/dev/null", json_path,
             pickle_path);
    int st = run(cmd, out, sizeof out);
    if (st != 0) fail_msg("snapshot_viz_check (exit %d): %s", st, out);
    assert_string_equal(out, digest);
}

/* Expandable segments on two devices and three streams, a page moved by
 * page recycling, a free completed late, an OOM (its failed growth leaves
 * no empty reservation), then pages unmapped by empty_cache. */
static void test_expandable_snapshot(void **state) {
    (void)state;
    skip_without_python();
    /* The helper off: its thread's unmaps and readied pages would change the history's counts. */
    OK(xsa_init("expandable_segments:True,helper_thread:False"));
    void *s1 = (void *)0x51, *s2 = (void *)0x52;
    OK(xsa_record_history(1, 1000));
    void *a, *b, *c, *d, *big, *big2, *x, *y;
    OK(xsa_malloc(&a, 1000, 0, NULL));
    OK(xsa_malloc(&b, 3 * MiB, 0, NULL));
    OK(xsa_malloc(&c, 5 * MiB, 0, NULL));
    OK(xsa_malloc(&d, 300, 0, s1));
    OK(xsa_record_stream(d, s2));
    OK(xsa_free(d)); /* pending: its event on s2 has not completed */
    OK(xsa_free(b)); /* leaves a whole free page */
    /* b's page moves here, in stream order; still short, d is handed over
     * (s1 waits for s2's event on the GPU) and its page moves too. */
    OK(xsa_malloc(&big, 8 * MiB, 0, NULL));
    xsa_sim_complete_stream(NULL);
    OK(xsa_malloc(&big2, 4 * MiB, 0, NULL)); /* b's old address is unmapped by this growth */
    OK(xsa_free(big));
    OK(xsa_free(big2));
    OK(xsa_free(c));
    xsa_sim_complete_stream(s2);
    OK(xsa_malloc(&x, 700, 1, s1));
    OK(xsa_malloc(&y, 2 * MiB, 0, s2));
    assert_int_equal(xsa_malloc(&x, (size_t)1 << 30, 0, NULL), XSA_ERROR_OUT_OF_MEMORY);
    check_snapshot("expandable",
                   "segments=3 expandable=3 reservations=3 active_allocated=3 active_pending_free=0 inactive=2 "
                   "actions=alloc:8,free_completed:5,free_requested:5,oom:1,segment_map:8,segment_unmap:4\n");
    OK(xsa_free(y));
    OK(xsa_malloc(&d, 300, 0, s1));
    OK(xsa_record_stream(d, s2));
    OK(xsa_free(d));
    OK(xsa_empty_cache()); /* waits for d's event, unmaps, drops empty reservations */
    check_snapshot("expandable_emptied",
                   "segments=2 expandable=2 reservations=2 active_allocated=2 active_pending_free=0 inactive=2 "
                   "actions=alloc:9,free_completed:7,free_requested:7,oom:1,segment_map:9,segment_unmap:6\n");
}

/* Classic segments, a free of an allocation made before recording, and a
 * free still waiting for its record_stream event. */
static void test_classic_snapshot_with_pending_free(void **state) {
    (void)state;
    skip_without_python();
    OK(xsa_init("expandable_segments:False"));
    void *a, *b, *c, *e;
    OK(xsa_malloc(&a, 1000, 0, NULL));
    OK(xsa_record_history(1, 1000));
    OK(xsa_malloc(&b, 12 * MiB, 0, NULL));
    OK(xsa_malloc(&e, 100, 1, NULL));
    OK(xsa_free(e));
    OK(xsa_empty_cache()); /* device 1's segment goes back */
    OK(xsa_malloc(&c, 4 * MiB, 0, NULL));
    OK(xsa_record_stream(c, (void *)0x77));
    OK(xsa_free(c));
    OK(xsa_free(a));
    check_snapshot("classic",
                   "segments=3 expandable=0 reservations=0 active_allocated=1 active_pending_free=1 inactive=2 "
                   "actions=alloc:3,free_completed:2,free_requested:3,segment_alloc:3,segment_free:1\n");
}

static bool on_stream_51(void *ctx, void *stream) {
    (void)ctx;
    return stream == (void *)0x51;
}

static int occurrences(const char *text, const char *needle) {
    int n = 0;
    for (const char *at = text; (at = strstr(at, needle)); at++) n++;
    return n;
}

/* Memory pools through the API: snapshots name each segment's and each
 * reservation's pool (PyTorch's segment_pool_id), the summary lists the
 * pools that hold memory, and the pool's memory goes back once released
 * and empty. */
static void test_memory_pool_ids(void **state) {
    (void)state;
    OK(xsa_init("expandable_segments:True"));
    const xsa_mempool_id g = {3, 0};
    void *s1 = (void *)0x51, *a, *b, *c;
    OK(xsa_begin_allocate_to_pool(0, g, on_stream_51, NULL));
    OK(xsa_malloc(&a, 1000, 0, s1));
    OK(xsa_malloc(&b, 4 * MiB, 0, s1));
    OK(xsa_malloc(&c, 1000, 0, NULL));
    OK(xsa_end_allocate_to_pool(0, g));
    OK(xsa_check_invariants(0));
    char *json = NULL, *summary = NULL;
    OK(xsa_snapshot_json(&json));
    assert_int_equal(occurrences(json, "\"segment_pool_id\":[3,0]"), 4); /* 2 segments, 2 reservations */
    assert_int_equal(occurrences(json, "\"segment_pool_id\":[0,0]"), 2);
    xsa_free_buffer(json);
    OK(xsa_memory_summary(0, 0, &summary));
    assert_non_null(strstr(summary, "| (3, 0)                |       2    |   6144 KiB |   4097 KiB |   4097 KiB |"));
    xsa_free_buffer(summary);
    if (system("python3 -c '' >/dev/null 2>&1") == 0)
        check_snapshot("mempool", "segments=3 expandable=3 reservations=3 active_allocated=3 active_pending_free=0 "
                                  "inactive=2 actions=\n");
    assert_int_equal(xsa_begin_allocate_to_pool(0, (xsa_mempool_id){0, 0}, NULL, NULL), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_end_allocate_to_pool(0, g), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_mempool_create(7, g), XSA_ERROR_INVALID_DEVICE);
    OK(xsa_mempool_release(0, g)); /* released: its memory goes with its last block */
    assert_int_equal(xsa_mempool_release(0, g), XSA_ERROR_INVALID_VALUE);
    OK(xsa_free(a));
    OK(xsa_free(b));
    OK(xsa_check_invariants(0));
    OK(xsa_memory_summary(0, 0, &summary));
    assert_null(strstr(summary, "Memory pool"));
    xsa_free_buffer(summary);
    OK(xsa_free(c));
}

static void test_empty_snapshot(void **state) {
    (void)state;
    skip_without_python();
    check_snapshot("empty", "segments=0 expandable=0 reservations=0 active_allocated=0 active_pending_free=0 inactive=0 "
                            "actions=\n");
    assert_int_equal(xsa_snapshot_json(NULL), XSA_ERROR_INVALID_VALUE);
    assert_int_equal(xsa_dump_snapshot("/nonexistent/dir/s.pickle"), XSA_ERROR_INVALID_VALUE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writers_read_back_in_python),
        cmocka_unit_test_setup_teardown(test_expandable_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_classic_snapshot_with_pending_free, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_pool_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_snapshot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
