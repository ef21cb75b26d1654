/*
 * config_env_test: the environment's settings. XSALLOC_CONF is layered
 * over PyTorch's variable key by key: a key it names takes its value, the
 * others keep PyTorch's (which the allocator then honours: a classic
 * segment where PyTorch's variable turned expandable segments off); the
 * variable PyTorch itself reads (PYTORCH_ALLOC_CONF, else
 * PYTORCH_CUDA_ALLOC_CONF) is the one under it; the summary and the
 * snapshot name both; an error names the variable at fault, and a rule
 * joining keys of the two names both. PyTorch keys xsalloc ignores are
 * named once even when both variables give them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)

static xsa_device_stats stats(void) {
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    return s;
}

static void test_xsalloc_conf_layers_over_pytorchs_key_by_key(void **state) {
    (void)state;
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False,max_split_size_mb:64", 1);
    setenv("XSALLOC_CONF", "max_split_size_mb:40,page_recycling:False", 1);
    assert_int_equal(stats().max_split_size, 40 * MiB); /* XSALLOC_CONF's value for the key both name */
    void *p = NULL;
    OK(xsa_malloc(&p, 64 * MiB, 0, NULL));
    assert_int_equal(stats().segment[XSA_STAT_ALL].current, 1); /* PyTorch's expandable_segments:False kept */
    xsa_settings s;
    OK(xsa_get_settings(&s));
    assert_false(s.expandable_segments);
    assert_false(s.page_recycling);
    assert_string_equal(s.source, "XSALLOC_CONF");
    char *text = NULL;
    OK(xsa_memory_summary(0, 1, &text));
    assert_non_null(strstr(text, "xsalloc settings from XSALLOC_CONF: \"max_split_size_mb:40,page_recycling:False\" "
                                 "over PYTORCH_CUDA_ALLOC_CONF: \"expandable_segments:False,max_split_size_mb:64\"\n"));
    xsa_free_buffer(text);
    OK(xsa_snapshot_json(&text));
    assert_non_null(strstr(text, "\"conf_source\":\"XSALLOC_CONF\",\"conf_layered_over\":\"PYTORCH_CUDA_ALLOC_CONF\","
                                 "\"conf_layered_over_text\":\"expandable_segments:False,max_split_size_mb:64\""));
    xsa_free_buffer(text);
    OK(xsa_free(p));
    INVARIANTS(0);
}

/* PyTorch's precedence: PYTORCH_ALLOC_CONF hides PYTORCH_CUDA_ALLOC_CONF. */
static void test_the_pytorch_variable_under_is_the_one_pytorch_reads(void **state) {
    (void)state;
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    setenv("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.5", 1);
    setenv("XSALLOC_CONF", "page_recycling:False", 1);
    xsa_settings s;
    OK(xsa_get_settings(&s));
    assert_true(s.garbage_collection_threshold == 0.5);
    assert_true(s.max_split_size == SIZE_MAX); /* PYTORCH_CUDA_ALLOC_CONF not read */
    assert_false(s.page_recycling);
}

static void test_errors_name_the_variable_at_fault(void **state) {
    (void)state;
    xsa_device_stats st;
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:x", 1);
    setenv("XSALLOC_CONF", "max_split_size_mb:40", 1);
    FAILS(XSA_ERROR_CONFIG, xsa_get_stats(0, &st), "PYTORCH_CUDA_ALLOC_CONF: key 'max_split_size_mb' value 'x'");
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False", 1);
    setenv("XSALLOC_CONF", "max_split_size_mb:y", 1);
    FAILS(XSA_ERROR_CONFIG, xsa_get_stats(0, &st), "XSALLOC_CONF over PYTORCH_CUDA_ALLOC_CONF: key 'max_split_size_mb'");
    setenv("XSALLOC_CONF", "peer_access:True", 1); /* needs the expandable segments the variable under turned off */
    FAILS(XSA_ERROR_CONFIG, xsa_get_stats(0, &st),
          "XSALLOC_CONF over PYTORCH_CUDA_ALLOC_CONF: key 'peer_access' value 'True' needs expandable segments");
    setenv("XSALLOC_CONF", "peer_access:True,expandable_segments:True", 1);
    OK(xsa_get_stats(0, &st));
}

/* Each ignored key is named once in the process: given by both variables,
 * and given again at run time. */
static void test_ignored_keys_are_named_once(void **state) {
    (void)state;
    setenv("PYTORCH_ALLOC_CONF", "release_lock_on_cudamalloc:True", 1);
    setenv("XSALLOC_CONF", "release_lock_on_cudamalloc:False,pinned_use_background_threads:True", 1);
    fflush(stderr);
    FILE *f = tmpfile();
    assert_non_null(f);
    int fd = fileno(f), saved = dup(2);
    assert_true(saved >= 0);
    dup2(fd, 2);
    xsa_settings s;
    OK(xsa_get_settings(&s));
    OK(xsa_set_allocator_settings("release_lock_on_cudamalloc:True,throw_on_cudamalloc_oom:False"));
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char out[1024] = "";
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    fclose(f);
    assert_true(n > 0);
    assert_string_equal(out,
                        "xsalloc: XSALLOC_CONF over PYTORCH_ALLOC_CONF: ignoring release_lock_on_cudamalloc, "
                        "pinned_use_background_threads (xsalloc cannot honour these PyTorch keys; "
                        "docs/configuration.md says why)\n"
                        "xsalloc: xsa_set_allocator_settings: ignoring throw_on_cudamalloc_oom (xsalloc cannot "
                        "honour these PyTorch keys; docs/configuration.md says why)\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_xsalloc_conf_layers_over_pytorchs_key_by_key, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_the_pytorch_variable_under_is_the_one_pytorch_reads,
                                        xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_errors_name_the_variable_at_fault, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_ignored_keys_are_named_once, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
