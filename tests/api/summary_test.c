/*
 * summary_test: xsa_memory_summary's text. Synthetic statistics chosen to hit
 * every unit rule (testdata/summary_stats.txt, PyTorch's memory_stats names)
 * must print exactly testdata/summary_synthetic.txt, which
 * tests/gpu/checks/summary_format_check.py checks against PyTorch's own
 * memory_summary; a scripted sequence on the simulated driver must print
 * testdata/summary_scripted.txt. The line after the table names where the
 * settings came from, which the snapshot's allocator_settings say too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/devices.h"
#include "api/summary.h"
#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

/* The xsa_stat named by a memory_stats key ("allocated_bytes.large_pool.peak"). */
static int64_t *stat_field(xsa_device_stats *s, const char *key) {
    static const struct {
        const char *name;
        size_t offset;
    } arrays[] = {
        {"allocation", offsetof(xsa_device_stats, allocation)},
        {"segment", offsetof(xsa_device_stats, segment)},
        {"active", offsetof(xsa_device_stats, active)},
        {"inactive_split", offsetof(xsa_device_stats, inactive_split)},
        {"allocated_bytes", offsetof(xsa_device_stats, allocated_bytes)},
        {"reserved_bytes", offsetof(xsa_device_stats, reserved_bytes)},
        {"active_bytes", offsetof(xsa_device_stats, active_bytes)},
        {"inactive_split_bytes", offsetof(xsa_device_stats, inactive_split_bytes)},
        {"requested_bytes", offsetof(xsa_device_stats, requested_bytes)},
    };
    static const char *const pools[] = {"all", "small_pool", "large_pool"}; /* XSA_STAT_* order */
    static const char *const cols[] = {"current", "peak", "allocated", "freed"};
    char name[64], pool[32], col[32];
    if (strcmp(key, "num_ooms") == 0) return &s->num_ooms;
    if (strcmp(key, "num_alloc_retries") == 0) return &s->num_alloc_retries;
    xsa_stat *stat = NULL;
    if (sscanf(key, "%63[a-z_].%31[a-z_].%31[a-z]", name, pool, col) == 3) {
        for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++)
            for (int t = 0; t < XSA_STAT_TYPES; t++)
                if (strcmp(name, arrays[a].name) == 0 && strcmp(pool, pools[t]) == 0)
                    stat = (xsa_stat *)((char *)s + arrays[a].offset) + t;
    } else if (sscanf(key, "%63[a-z_].%31[a-z]", name, col) == 2) {
        if (strcmp(name, "oversize_allocations") == 0) stat = &s->oversize_allocations;
        if (strcmp(name, "oversize_segments") == 0) stat = &s->oversize_segments;
    }
    if (!stat) fail_msg("unknown statistic %s", key);
    int64_t *fields[] = {&stat->current, &stat->peak, &stat->allocated, &stat->freed};
    for (int c = 0; c < 4; c++)
        if (strcmp(col, cols[c]) == 0) return fields[c];
    fail_msg("unknown column in %s", key);
    return NULL;
}

static void load_stats(const char *path, xsa_device_stats *s) {
    memset(s, 0, sizeof *s);
    char *text = read_file(path);
    int fields = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char key[128];
        long long value;
        if (line[0] == '#') continue;
        assert_int_equal(sscanf(line, "%127s %lld", key, &value), 2);
        *stat_field(s, key) = value;
        fields++;
    }
    free(text);
    assert_int_equal(fields, 9 * 3 * 4 + 2 * 4 + 2); /* every statistic the summary shows */
}

/* `text` without the lines containing either of the pool row labels. */
static char *without_pool_rows(const char *text) {
    char *out = calloc(1, strlen(text) + 1);
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) + 1 : strlen(line);
        char row[256] = "";
        memcpy(row, line, n < sizeof row - 1 ? n : sizeof row - 1);
        if (!strstr(row, "from large pool") && !strstr(row, "from small pool")) strncat(out, line, n);
        line += n;
    }
    return out;
}

static void test_synthetic_stats_match_golden(void **state) {
    (void)state;
    xsa_device_stats s;
    load_stats("tests/api/testdata/summary_stats.txt", &s);
    char *golden = read_file("tests/api/testdata/summary_synthetic.txt");
    char *text = xsa_format_summary(&s, 0, 0);
    assert_string_equal(text, golden);
    free(text);
    char *abbreviated = without_pool_rows(golden);
    text = xsa_format_summary(&s, 0, 1);
    assert_string_equal(text, abbreviated);
    free(text);
    free(abbreviated);
    free(golden);
}

static void test_scripted_sequence_matches_golden(void **state) {
    (void)state;
    xsa_fixture_use_sim(2, (size_t)1 << 30);
    OK(xsa_init("expandable_segments:False,max_split_size_mb:40"));
    /* Small blocks split a 2 MiB segment; 12 MiB gets a segment of its own;
     * 50 MiB is oversize; 1020 MiB fails (one OOM, one retry). */
    void *small[3], *mid, *big, *none;
    for (int i = 0; i < 3; i++) OK(xsa_malloc(&small[i], 1000 * (size_t)(i + 1), 1, NULL));
    OK(xsa_malloc(&mid, 12 * MiB + 1, 1, NULL));
    OK(xsa_malloc(&big, 50 * MiB, 1, NULL));
    OK(xsa_free(small[1]));
    OK(xsa_free(big));
    assert_int_equal(xsa_malloc(&none, 1020 * MiB, 1, NULL), XSA_ERROR_OUT_OF_MEMORY);
    char *text = NULL;
    OK(xsa_memory_summary(1, 0, &text));
    char *golden = read_file("tests/api/testdata/summary_scripted.txt");
    if (strcmp(text, golden) != 0) {
        /* Left for a look (or a new golden) under bazel-testlogs/.../test.outputs. */
        const char *dir = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/summary_scripted.txt", dir ? dir : ".");
        FILE *f = fopen(path, "w");
        if (f) fputs(text, f), fclose(f);
        fail_msg("the summary differs from testdata/summary_scripted.txt; it is in %s", path);
    }
    xsa_free_buffer(text);
    free(golden);
    assert_int_equal(xsa_memory_summary(2, 0, &text), XSA_ERROR_INVALID_DEVICE);
    assert_int_equal(xsa_memory_summary(0, 0, NULL), XSA_ERROR_INVALID_VALUE);
    xsa_shutdown();
}

/* The summary's last line, and the snapshot's allocator_settings, after a
 * lazy initialisation from the environment as it stands. */
static void expect_source(const char *line, const char *json_source, const char *json_conf) {
    char *text = NULL, *json = NULL;
    OK(xsa_memory_summary(0, 1, &text));
    const char *last = text + strlen(text) - 1; /* the final '\n' */
    while (last > text && last[-1] != '\n') last--;
    assert_string_equal(last, line);
    assert_non_null(strstr(text, "|===")); /* the table is still there */
    OK(xsa_snapshot_json(&json));
    char want[512];
    snprintf(want, sizeof want, "\"PYTORCH_CUDA_ALLOC_CONF\":\"%s\",\"conf_source\":\"%s\"", json_conf, json_source);
    if (!strstr(json, want)) fail_msg("the snapshot lacks %s: %s", want, json);
    xsa_free_buffer(text);
    xsa_free_buffer(json);
    xsa_shutdown();
}

static void test_settings_source(void **state) {
    (void)state;
    xsa_fixture_use_sim(1, (size_t)1 << 30);
    expect_source("xsalloc settings: all defaults (XSALLOC_CONF, PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF "
                  "are unset)\n",
                  "none", "");
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    expect_source("xsalloc settings from PYTORCH_CUDA_ALLOC_CONF: \"max_split_size_mb:64\"\n",
                  "PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64");
    setenv("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.5", 1);
    expect_source("xsalloc settings from PYTORCH_ALLOC_CONF: \"garbage_collection_threshold:0.5\"\n",
                  "PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.5");
    setenv("XSALLOC_CONF", "", 1); /* layered over PyTorch's variable: nothing changed */
    expect_source("xsalloc settings from XSALLOC_CONF: \"\" over PYTORCH_ALLOC_CONF: "
                  "\"garbage_collection_threshold:0.5\"\n",
                  "XSALLOC_CONF", "");
    unsetenv("PYTORCH_ALLOC_CONF");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    expect_source("xsalloc settings from XSALLOC_CONF: \"\" (all defaults)\n", "XSALLOC_CONF", "");
    /* The settings really are the variable's. */
    setenv("XSALLOC_CONF", "max_split_size_mb:40", 1);
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.max_split_size, 40 * MiB);
    /* A bad value is reported under the variable's name. */
    xsa_shutdown();
    setenv("XSALLOC_CONF", "max_split_size_mb:x", 1);
    assert_int_equal(xsa_get_stats(0, &s), XSA_ERROR_CONFIG);
    assert_non_null(strstr(xsa_last_error(), "XSALLOC_CONF: key 'max_split_size_mb'"));
    unsetenv("XSALLOC_CONF");
    setenv("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync", 1);
    assert_int_equal(xsa_get_stats(0, &s), XSA_ERROR_CONFIG);
    assert_non_null(strstr(xsa_last_error(), "PYTORCH_ALLOC_CONF: key 'backend'"));
    xsa_fixture_use_sim(1, (size_t)1 << 30); /* unsets them */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_stats_match_golden),
        cmocka_unit_test(test_scripted_sequence_matches_golden),
        cmocka_unit_test(test_settings_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
