/*
 * trace_test: the trace loader (benchmarks/trace) on plain and gzip'd files,
 * its error messages (file, line number, expected form) for every kind of
 * malformed or inconsistent line, waits ('w' lines), and the bundled
 * traces.
 *
 * Files are written into $TEST_TMPDIR (Bazel) or a fresh /tmp directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "trace/trace.h"

static char tmpdir[512];

static const char *tmp_path(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

static const char *write_plain(const char *name, const char *text) {
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static const char *write_gzip(const char *name, const char *text) {
    const char *path = tmp_path(name);
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzputs(f, text), (int)strlen(text));
    gzclose(f);
    return path;
}

static const char good[] = "# a comment\n"
                           "a 0 1024 0\n"
                           "a 1 3145728 1\n"
                           "\n"
                           "r 1 2\n"
                           "f 0\n"
                           "a 2 512 0\r\n"
                           "f 1\n"
                           "a 0 7 0"; /* an id may be reused after its free; no final newline */

static void check_good(const xsa_trace *t) {
    assert_int_equal(t->n_events, 7);
    assert_int_equal(t->n_allocs, 4);
    assert_int_equal(t->n_frees, 2);
    assert_int_equal(t->n_records, 1);
    assert_int_equal(t->n_ids, 3);
    assert_int_equal(t->n_streams, 3);
    const xsa_trace_event *e = t->events;
    assert_int_equal(e[0].kind, XSA_TRACE_ALLOC);
    assert_int_equal(e[0].bytes, 1024);
    assert_int_equal(e[0].line, 2);
    assert_int_equal(e[1].bytes, 3145728);
    assert_int_equal(e[1].stream, 1);
    assert_int_equal(e[2].kind, XSA_TRACE_RECORD);
    assert_int_equal(e[2].id, 1);
    assert_int_equal(e[2].stream, 2);
    assert_int_equal(e[2].line, 5);
    assert_int_equal(e[3].kind, XSA_TRACE_FREE);
    assert_int_equal(e[4].bytes, 512);
    assert_int_equal(e[6].line, 9);
    assert_int_equal(e[6].bytes, 7);
}

static void test_plain(void **state) {
    (void)state;
    xsa_trace t;
    char err[256] = "";
    assert_int_equal(xsa_trace_load(write_plain("good.trace", good), &t, err, sizeof err), 0);
    check_good(&t);
    xsa_trace_free(&t);
}

static void test_gzip(void **state) {
    (void)state;
    xsa_trace t;
    char err[256] = "";
    assert_int_equal(xsa_trace_load(write_gzip("good.trace.gz", good), &t, err, sizeof err), 0);
    check_good(&t);
    xsa_trace_free(&t);
}

static void test_missing_file(void **state) {
    (void)state;
    xsa_trace t;
    char err[256] = "";
    assert_int_equal(xsa_trace_load(tmp_path("nope.trace.gz"), &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "nope.trace.gz"));
    assert_null(t.events);
}

/* Two good lines, then `bad` on line 3: the error names file:3 and `want`. */
static void expect_error(const char *bad, const char *want) {
    char text[256], err[512] = "";
    snprintf(text, sizeof text, "a 0 100 0\na 1 200 0\n%s\nf 0\n", bad);
    xsa_trace t;
    const char *path = write_plain("bad.trace", text);
    assert_int_equal(xsa_trace_parse(path, text, strlen(text), &t, err, sizeof err), -1);
    char where[1100];
    snprintf(where, sizeof where, "%s:3: ", path);
    if (strncmp(err, where, strlen(where)) != 0 || !strstr(err, want))
        fail_msg("line '%s': got error '%s', wanted '%s' and '%s'", bad, err, where, want);
    assert_null(t.events);
    assert_int_equal(t.n_events, 0);
}

static void test_malformed(void **state) {
    (void)state;
    expect_error("x 2 100 0", "expected an event 'a', 'f', 'r' or a wait 'w'");
    expect_error("w", "expected 'w <microseconds>'");
    expect_error("w 5 6", "expected 'w <microseconds>'");
    expect_error("w -5", "expected 'w <microseconds>'");
    expect_error("w 99999999999999999999", "expected 'w <microseconds>'");
    expect_error("a 2 100", "expected 'a <id> <bytes> <stream>'");
    expect_error("a 2 100 0 5", "expected 'a <id> <bytes> <stream>'");
    expect_error("a two 100 0", "got 'a two 100 0'");
    expect_error("a -2 100 0", "expected 'a <id>");
    expect_error("a2 100 0", "expected 'a <id>");
    expect_error("a 2 99999999999999999999999 0", "expected 'a <id>");
    expect_error("a 2 100 256", "streams below 256");
    expect_error("a 99999999999 100 0", "ids below");
    expect_error("f", "expected 'f <id>'");
    expect_error("f 1 0", "expected 'f <id>'");
    expect_error("r 1", "expected 'r <id> <stream>'");
    expect_error("r 1 2 3", "expected 'r <id> <stream>'");
}

/* A wait belongs to the event before it; waits add up; one before the
 * first event is dropped; a trace without them has none. */
static void test_waits(void **state) {
    (void)state;
    const char text[] = "w 7\na 0 100 0\nw 1500\nw 500\na 1 200 0\nf 1\n# note\nw 3\nf 0\n";
    char err[256] = "";
    xsa_trace t;
    assert_int_equal(xsa_trace_parse("w", text, strlen(text), &t, err, sizeof err), 0);
    assert_int_equal(t.n_events, 4);
    assert_non_null(t.wait_ns);
    assert_int_equal(t.wait_ns[0], 2000000);
    assert_int_equal(t.wait_ns[1], 0);
    assert_int_equal(t.wait_ns[2], 3000);
    assert_int_equal(t.wait_ns[3], 0);
    assert_int_equal(t.events[3].line, 9);
    xsa_trace_free(&t);
    assert_int_equal(xsa_trace_parse("g", good, strlen(good), &t, err, sizeof err), 0);
    assert_null(t.wait_ns);
    xsa_trace_free(&t);
}

/* The weights (0, live at the end) once, the step (1 with a record, and
 * 2) again in every copy under new ids, their waits with them; every
 * copy's ids are as consistent as the loader asks. */
static void test_repeat(void **state) {
    (void)state;
    const char text[] = "a 0 100 0\na 1 200 1\nr 1 2\nw 5\nf 1\na 2 300 0\nf 2\n";
    char err[256] = "";
    xsa_trace t, r;
    assert_int_equal(xsa_trace_parse("s", text, strlen(text), &t, err, sizeof err), 0);
    assert_int_equal(xsa_trace_repeat(&t, 3, &r, err, sizeof err), 0);
    assert_int_equal(r.n_events, 6 + 2 * 5);
    assert_int_equal(r.n_allocs, 1 + 3 * 2);
    assert_int_equal(r.n_frees, 3 * 2);
    assert_int_equal(r.n_records, 3);
    assert_int_equal(r.n_ids, 9);
    assert_int_equal(r.n_streams, 3);
    const uint32_t ids[] = {0, 1, 1, 1, 2, 2, 4, 4, 4, 5, 5, 7, 7, 7, 8, 8};
    for (size_t i = 0; i < r.n_events; i++) {
        assert_int_equal(r.events[i].id, ids[i]);
        assert_int_equal(r.events[i].kind, t.events[i < 6 ? i : 1 + (i - 6) % 5].kind);
        assert_int_equal(r.wait_ns[i], r.events[i].kind == XSA_TRACE_RECORD ? 5000 : 0);
    }
    /* Printed back and parsed, the copies pass the loader's id checks. */
    char back[1024] = "";
    for (size_t i = 0; i < r.n_events; i++) {
        const xsa_trace_event *e = &r.events[i];
        size_t n = strlen(back);
        if (e->kind == XSA_TRACE_ALLOC)
            snprintf(back + n, sizeof back - n, "a %u %llu %u\n", e->id, (unsigned long long)e->bytes, e->stream);
        else if (e->kind == XSA_TRACE_RECORD)
            snprintf(back + n, sizeof back - n, "r %u %u\n", e->id, e->stream);
        else
            snprintf(back + n, sizeof back - n, "f %u\n", e->id);
    }
    xsa_trace again;
    assert_int_equal(xsa_trace_parse("back", back, strlen(back), &again, err, sizeof err), 0);
    xsa_trace_free(&again);
    xsa_trace_free(&r);
    assert_int_equal(xsa_trace_repeat(&t, 0, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "no copy"));
    assert_null(r.events);
    assert_int_equal(xsa_trace_repeat(&t, XSA_TRACE_MAX_ID, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "too many ids"));
    xsa_trace_free(&t);
}

static void test_inconsistent(void **state) {
    (void)state;
    expect_error("f 7", "free of id 7, which was never allocated");
    expect_error("a 1 300 0", "double allocation of id 1 (still live from line 2)");
    expect_error("r 9 1", "record_stream of id 9, which was never allocated");

    const char text[] = "a 0 1 0\nf 0\nf 0\n";
    char err[256] = "";
    xsa_trace t;
    assert_int_equal(xsa_trace_parse("x", text, strlen(text), &t, err, sizeof err), -1);
    assert_string_equal(err, "x:3: free of id 0, which was allocated at line 1 and already freed at line 2");
    const char rec[] = "a 0 1 0\nf 0\nr 0 1\n";
    assert_int_equal(xsa_trace_parse("y", rec, strlen(rec), &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "y:3: record_stream of id 0"));
}

/* Event counts from benchmarks/traces/README.md; every allocation is on stream 0. */
static void check_bundled(const char *name, size_t events) {
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "benchmarks/traces/%s.trace.gz", name);
    xsa_trace t;
    if (xsa_trace_load(path, &t, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(t.n_events, events);
    assert_int_equal(t.n_allocs + t.n_frees, events);
    assert_int_equal(t.n_records, 0);
    assert_int_equal(t.n_streams, 1);
    assert_true(t.n_frees < t.n_allocs); /* a handful stay live */
    xsa_trace_free(&t);
}

static void test_bundled(void **state) {
    (void)state;
    check_bundled("gpt2_varlen", 75851);
    check_bundled("resnet_varbatch", 54267);
}

/* benchmarks/traces/synthetic_multistream.trace.gz: gen_trace --seed 1
 * --events 20000 --streams 3. */
static void test_synthetic(void **state) {
    (void)state;
    xsa_trace t;
    char err[512] = "";
    if (xsa_trace_load("benchmarks/traces/synthetic_multistream.trace.gz", &t, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(t.n_events, 20000);
    assert_int_equal(t.n_streams, 3);
    assert_true(t.n_records > 1000);
    assert_true(t.n_frees > 1000);
    xsa_trace_free(&t);
}

int main(void) {
    const char *base = getenv("TEST_TMPDIR");
    if (base) {
        snprintf(tmpdir, sizeof tmpdir, "%s", base);
    } else {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/trace_test.XXXXXX");
        if (!mkdtemp(tmpdir)) return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),        cmocka_unit_test(test_gzip),
        cmocka_unit_test(test_missing_file), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_inconsistent), cmocka_unit_test(test_bundled),
        cmocka_unit_test(test_synthetic),    cmocka_unit_test(test_waits),
        cmocka_unit_test(test_repeat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
