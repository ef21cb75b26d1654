/*
 * soak_test: a smoke test of //benchmarks:soak (2 passes of the smallest
 * bundled trace, not the 50 of a real soak): its table row, its SVG and
 * its argument checks.
 *
 * Design: the command runs as a user runs it, on a directory holding one
 * trace (a symlink), with its plots in a temporary directory; the row is
 * found by the trace's name and split on '|'.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "trace/replay.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TRACE "unet_varres"

static char dir[PATH_MAX];

static int make_dir(void **state) {
    (void)state;
    char cwd[PATH_MAX], src[PATH_MAX + 64], dst[PATH_MAX + 64];
    const char *tmp = getenv("TEST_TMPDIR");
    snprintf(dir, sizeof dir, "%s/soakXXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || !getcwd(cwd, sizeof cwd)) return -1;
    snprintf(src, sizeof src, "%s/benchmarks/traces/" TRACE ".trace.gz", cwd);
    snprintf(dst, sizeof dst, "%s/" TRACE ".trace.gz", dir);
    return symlink(src, dst);
}

/* Runs soak with `args`; returns its exit status and its stdout in out. */
static int run_soak(const char *args, char *out, size_t len) {
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "benchmarks/soak --driver sim --traces %s --out %s/out %s 2>/dev/null", dir, dir, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    return pclose(p);
}

/* The cells of the table row of TRACE: cells[0] is the trace name. */
static int row_cells(const char *out, char cells[][32], int max) {
    const char *row = strstr(out, "| " TRACE " ");
    assert_non_null(row);
    int n = 0;
    for (const char *p = row + 1; *p && *p != '\n' && n < max; n++) {
        const char *end = strchr(p, '|');
        assert_non_null(end);
        const char *a = p, *b = end;
        while (a < b && *a == ' ') a++;
        while (b > a && b[-1] == ' ') b--;
        snprintf(cells[n], sizeof cells[n], "%.*s", (int)(b - a), a);
        p = end + 1;
    }
    return n;
}

static void test_two_passes(void **state) {
    (void)state;
    static char out[16384];
    assert_int_equal(run_soak("--passes 2 --conf page_recycling:False", out, sizeof out), 0);
    assert_non_null(strstr(out, "replayed 2 times"));
    char lag[32];
    snprintf(lag, sizeof lag, "GPU lag %d", XSA_REPLAY_DEFAULT_GPU_LAG);
    assert_non_null(strstr(out, lag)); /* the default on the simulated driver */
    char cells[16][32];
    /* trace, passes, peak alloc, resv 1st, resv last, resv max 2nd+, heap 1st, heap last, segments, viol. */
    assert_int_equal(row_cells(out, cells, 16), 10);
    assert_string_equal(cells[1], "2");
    assert_string_equal(cells[2], "12.33 GB"); /* the trace's live peak, every pass */
    /* Expandable segments without recycling cache what the first pass
     * mapped: the second pass's peak (peaks reset between passes) is the
     * same, not lower, and not higher. */
    assert_string_equal(cells[3], cells[4]);
    assert_string_equal(cells[4], cells[5]);
    assert_string_equal(cells[9], "0");
    char svg_path[PATH_MAX + 64], svg[65536];
    snprintf(svg_path, sizeof svg_path, "%s/out/" TRACE ".soak.svg", dir);
    FILE *f = fopen(svg_path, "r");
    assert_non_null(f);
    svg[fread(svg, 1, sizeof svg - 1, f)] = '\0';
    fclose(f);
    int polylines = 0;
    for (const char *p = svg; (p = strstr(p, "<polyline")); p++) {
        polylines++;
        const char *pts = strstr(p, "points='");
        assert_non_null(pts);
        int points = 0;
        for (const char *q = pts + 8; *q != '\''; q++) points += *q == ',';
        assert_int_equal(points, 2); /* one a pass */
    }
    assert_int_equal(polylines, 2); /* peak reserved and peak allocated */
}

static void test_bad_arguments(void **state) {
    (void)state;
    static char out[4096];
    static const char *const bad[] = {"--passes 0", "--passes x", "--gpu-lag -1", "--bogus 1", "--passes"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int st = run_soak(bad[i], out, sizeof out);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 2) fail_msg("soak %s: status %#x, expected exit 2", bad[i], st);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_passes),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, make_dir, NULL);
}
