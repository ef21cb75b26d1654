/*
 * config_test: the XSALLOC_CONF parser (api/config): defaults, every key's
 * valid forms and whitespace, every bad form (the message must name the key
 * and the value and say what is accepted), duplicates, the structural errors,
 * roundup_power2_divisions' list rules checked interval by interval, the
 * PyTorch keys named as not honoured, and which environment variable is read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <locale.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"

#define MIB ((size_t)1 << 20)
#define N XSA_ROUNDUP_INTERVALS

static char err[1024];

static xsa_config parse_ok(const char *text) {
    xsa_config c;
    memset(&c, 0xAB, sizeof c);
    strcpy(err, "not touched");
    int ok = xsa_config_parse(text, &c, err, sizeof err);
    if (!ok) print_error("unexpected failure for \"%s\": %s\n", text ? text : "(null)", err);
    assert_int_equal(ok, 1);
    assert_string_equal(err, "");
    return c;
}

/* Parsing must fail; the message must contain every needle, say what is
 * accepted, be one line, and *out must be left unchanged. */
static void expect_err_(const char *text, const char *const *needles) {
    xsa_config c, before;
    memset(&c, 0xAB, sizeof c);
    memcpy(&before, &c, sizeof c);
    err[0] = '\0';
    int ok = xsa_config_parse(text, &c, err, sizeof err);
    if (ok) print_error("\"%s\" was accepted\n", text);
    assert_int_equal(ok, 0);
    assert_memory_equal(&c, &before, sizeof c);
    for (const char *const *n = needles; *n; n++) {
        if (!strstr(err, *n)) print_error("\"%s\": message lacks \"%s\": %s\n", text, *n, err);
        assert_non_null(strstr(err, *n));
    }
    if (!strstr(err, "accepted")) print_error("\"%s\": message does not say what is accepted: %s\n", text, err);
    assert_non_null(strstr(err, "accepted"));
    assert_null(strchr(err, '\n'));
}
#define EXPECT_ERR(text, ...) expect_err_((text), (const char *const[]){__VA_ARGS__, NULL})

static void assert_default_options(const xsa_pool_options *o) {
    xsa_pool_options d;
    xsa_pool_options_default(&d);
    assert_memory_equal(o, &d, sizeof d);
}

static void assert_default_text(const char *text) {
    xsa_config c = parse_ok(text);
    assert_default_options(&c.pool);
}

static void assert_divs(const xsa_config *c, const size_t want[N]) {
    for (int i = 0; i < N; i++) {
        if (c->pool.roundup_power2_divisions[i] != want[i])
            print_error("interval %d: got %zu, want %zu\n", i, c->pool.roundup_power2_divisions[i], want[i]);
        assert_int_equal(c->pool.roundup_power2_divisions[i], want[i]);
    }
}

/* ---- defaults ---- */

static void test_defaults(void **state) {
    (void)state;
    const char *texts[] = {NULL, "", "   ", " \t\r\n\v\f "};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        xsa_config c = parse_ok(texts[i]);
        assert_default_options(&c.pool);
        assert_true(c.pool.expandable_segments);
        assert_true(c.pool.page_recycling);
        assert_false(c.pool.peer_access);
        assert_false(c.pool.ipc_handles);
        assert_int_equal(c.pool.max_split_size, SIZE_MAX);
        assert_int_equal(c.pool.max_non_split_rounding, 20 * MIB);
        for (int k = 0; k < N; k++) assert_int_equal(c.pool.roundup_power2_divisions[k], 0);
        assert_true(c.pool.garbage_collection_threshold == 0.0);
        assert_true(c.pool.memory_fraction == 1.0);
        /* Both follow one switch (pool/options.h), on since 2026-11-29. */
        assert_int_equal(c.pool.helper_thread, XSA_HELPER_BY_DEFAULT);
        assert_int_equal(c.pool.page_decay_ms, XSA_HELPER_BY_DEFAULT ? XSA_DEFAULT_PAGE_DECAY_MS : 0);
    }
}

static void test_err_buffer_handling(void **state) {
    (void)state;
    xsa_config c;
    assert_int_equal(xsa_config_parse("foo:1", &c, NULL, 0), 0);
    assert_int_equal(xsa_config_parse("foo:1", &c, err, 0), 0);
    char small[8];
    memset(small, 'x', sizeof small);
    assert_int_equal(xsa_config_parse("foo:1", &c, small, sizeof small), 0);
    assert_int_equal(small[7], '\0');
    assert_int_equal(xsa_config_parse("expandable_segments:False", &c, NULL, 0), 1);
    assert_false(c.pool.expandable_segments);
    /* A long value is cut in the message, which still says what is accepted. */
    char text[700];
    strcpy(text, "max_split_size_mb:");
    memset(text + strlen(text), '7', 600);
    text[18 + 600] = 'x';
    text[18 + 601] = '\0';
    EXPECT_ERR(text, "'max_split_size_mb'", "777...", "integer number of MiB >= 20");
}

/* ---- booleans ---- */

static void test_expandable_segments(void **state) {
    (void)state;
    assert_true(parse_ok("expandable_segments:True").pool.expandable_segments);
    xsa_config c = parse_ok("expandable_segments:False");
    assert_false(c.pool.expandable_segments);
    assert_true(c.pool.page_recycling);
    assert_false(parse_ok("  expandable_segments  :  False  ").pool.expandable_segments);
    const char *bad[] = {"true", "false", "TRUE", "1", "0", "yes", "True False", "Truex"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[64];
        snprintf(text, sizeof text, "expandable_segments:%s", bad[i]);
        char quoted[32];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        EXPECT_ERR(text, "'expandable_segments'", quoted, "True or False");
    }
}

static void test_page_recycling(void **state) {
    (void)state;
    xsa_config c = parse_ok("page_recycling:False");
    assert_false(c.pool.page_recycling);
    assert_true(c.pool.expandable_segments);
    assert_true(parse_ok("page_recycling:True").pool.page_recycling);
    EXPECT_ERR("page_recycling:off", "'page_recycling'", "'off'", "True or False");
    EXPECT_ERR("page_recycling:False_", "'page_recycling'", "'False_'", "True or False");
    assert_true(c.pool.page_recycling_headroom == 0.01); /* the default */
    assert_true(parse_ok("page_recycling_headroom:0").pool.page_recycling_headroom == 0.0);
    assert_true(parse_ok("page_recycling_headroom:0.25").pool.page_recycling_headroom == 0.25);
    assert_true(parse_ok("page_recycling_headroom:1").pool.page_recycling_headroom == 1.0);
    EXPECT_ERR("page_recycling_headroom:-0.1", "'page_recycling_headroom'", "'-0.1'", "from 0 to 1");
    EXPECT_ERR("page_recycling_headroom:1.5", "'page_recycling_headroom'", "'1.5'", "from 0 to 1");
    EXPECT_ERR("page_recycling_headroom:lots", "'page_recycling_headroom'", "'lots'", "from 0 to 1");
    assert_int_equal(c.pool.handle_size, 20u << 20); /* the default: at most PyTorch's 20 MiB */
    assert_int_equal(parse_ok("expandable_handle_mb:20").pool.handle_size, 20u << 20);
    assert_int_equal(parse_ok("expandable_handle_mb:2").pool.handle_size, 2u << 20);
    EXPECT_ERR("expandable_handle_mb:3", "'expandable_handle_mb'", "'3'", "even number of MiB");
    EXPECT_ERR("expandable_handle_mb:0", "'expandable_handle_mb'", "'0'", "from 2 to 1024");
    EXPECT_ERR("expandable_handle_mb:2048", "'expandable_handle_mb'", "'2048'", "from 2 to 1024");
}

/* peer_access and ipc_handles: booleans that need expandable segments. */
static void test_peer_access_and_ipc_handles(void **state) {
    (void)state;
    xsa_config c = parse_ok("peer_access:True");
    assert_true(c.pool.peer_access);
    assert_false(c.pool.ipc_handles);
    c = parse_ok("ipc_handles:True, peer_access:False");
    assert_true(c.pool.ipc_handles);
    assert_false(c.pool.peer_access);
    c = parse_ok("expandable_segments:True,peer_access:True,ipc_handles:True");
    assert_true(c.pool.peer_access && c.pool.ipc_handles);
    c = parse_ok("expandable_segments:False,peer_access:False,ipc_handles:False");
    assert_false(c.pool.expandable_segments || c.pool.peer_access || c.pool.ipc_handles);
    EXPECT_ERR("peer_access:yes", "'peer_access'", "'yes'", "True or False");
    EXPECT_ERR("ipc_handles:1", "'ipc_handles'", "'1'", "True or False");
    EXPECT_ERR("ipc_handles:True,ipc_handles:True", "'ipc_handles'", "given twice");
    /* Without expandable segments they could not take effect: refused, in
     * either order. */
    EXPECT_ERR("expandable_segments:False,peer_access:True", "'peer_access'", "'True'", "expandable_segments is False");
    EXPECT_ERR("ipc_handles:True,expandable_segments:False", "'ipc_handles'", "'True'", "expandable_segments:True");
}

/* helper_thread and page_decay_ms: decay runs on the helper only. */
static void test_helper_thread_and_page_decay_ms(void **state) {
    (void)state;
    xsa_config c = parse_ok("helper_thread:True, page_decay_ms:250");
    assert_true(c.pool.helper_thread);
    assert_int_equal(c.pool.page_decay_ms, 250);
    c = parse_ok("helper_thread:True");
    assert_true(c.pool.helper_thread);
    assert_int_equal(c.pool.page_decay_ms, XSA_HELPER_BY_DEFAULT ? XSA_DEFAULT_PAGE_DECAY_MS : 0);
    c = parse_ok("helper_thread:True,page_decay_ms:0"); /* the helper without decay */
    assert_true(c.pool.helper_thread);
    assert_int_equal(c.pool.page_decay_ms, 0);
    /* Decay asked for turns the helper on; the helper off turns decay off. */
    c = parse_ok("page_decay_ms:500");
    assert_true(c.pool.helper_thread);
    assert_int_equal(c.pool.page_decay_ms, 500);
    c = parse_ok("helper_thread:False");
    assert_false(c.pool.helper_thread);
    assert_int_equal(c.pool.page_decay_ms, 0);
    assert_int_equal(parse_ok("page_decay_ms:3600000").pool.page_decay_ms, 3600000);
    /* Decay keeps its peak by moving pages at regrowth: page recycling off
     * turns the default decay off (the helper stays), decay asked for runs. */
    c = parse_ok("page_recycling:False");
    assert_int_equal(c.pool.helper_thread, XSA_HELPER_BY_DEFAULT);
    assert_int_equal(c.pool.page_decay_ms, 0);
    c = parse_ok("page_recycling:False,page_decay_ms:500");
    assert_true(c.pool.helper_thread);
    assert_int_equal(c.pool.page_decay_ms, 500);
    c = parse_ok("page_decay_ms:200,page_recycling:False"); /* in either order */
    assert_int_equal(c.pool.page_decay_ms, 200);
    EXPECT_ERR("page_decay_ms:20,helper_thread:False", "'page_decay_ms'", "'20'", "helper_thread is False",
               "helper_thread:True");
    EXPECT_ERR("page_decay_ms:3600001", "'page_decay_ms'", "'3600001'", "too large", "0 (off) to 3600000");
    EXPECT_ERR("page_decay_ms:0.5", "'page_decay_ms'", "'0.5'", "not an integer");
    EXPECT_ERR("page_decay_ms:-1", "'page_decay_ms'", "'-1'", "negative");
    EXPECT_ERR("helper_thread:yes", "'helper_thread'", "'yes'", "True or False");
}

/* ---- sizes in MiB ---- */

static void test_max_split_size_mb(void **state) {
    (void)state;
    assert_int_equal(parse_ok("max_split_size_mb:20").pool.max_split_size, 20 * MIB);
    assert_int_equal(parse_ok("max_split_size_mb:512").pool.max_split_size, 512 * MIB);
    assert_int_equal(parse_ok("max_split_size_mb:0020").pool.max_split_size, 20 * MIB);
    assert_int_equal(parse_ok("max_split_size_mb: 64 ").pool.max_split_size, 64 * MIB);
    /* Overflow-safe: the largest exact MiB count, then clamped to "no limit". */
    char text[64];
    snprintf(text, sizeof text, "max_split_size_mb:%zu", SIZE_MAX / MIB);
    assert_int_equal(parse_ok(text).pool.max_split_size, (SIZE_MAX / MIB) * MIB);
    snprintf(text, sizeof text, "max_split_size_mb:%zu", SIZE_MAX / MIB + 1);
    assert_int_equal(parse_ok(text).pool.max_split_size, SIZE_MAX);
    assert_int_equal(parse_ok("max_split_size_mb:18446744073709551615").pool.max_split_size, SIZE_MAX);
    /* The other settings keep their defaults. */
    xsa_config c = parse_ok("max_split_size_mb:100");
    assert_int_equal(c.pool.max_non_split_rounding, 20 * MIB);
    assert_true(c.pool.expandable_segments);

    EXPECT_ERR("max_split_size_mb:18446744073709551616", "'max_split_size_mb'", "'18446744073709551616'", "too large");
    EXPECT_ERR("max_split_size_mb:19", "'max_split_size_mb'", "'19'", "too small", ">= 20");
    EXPECT_ERR("max_split_size_mb:0", "'max_split_size_mb'", "'0'", "too small");
    EXPECT_ERR("max_split_size_mb:-1", "'max_split_size_mb'", "'-1'", "negative");
    EXPECT_ERR("max_split_size_mb:20.5", "'max_split_size_mb'", "'20.5'", "not an integer");
    EXPECT_ERR("max_split_size_mb:64.0", "'max_split_size_mb'", "'64.0'", "not an integer");
    EXPECT_ERR("max_split_size_mb:1e3", "'max_split_size_mb'", "'1e3'", "not an integer");
    EXPECT_ERR("max_split_size_mb:20abc", "'max_split_size_mb'", "'20abc'", "after the number");
    EXPECT_ERR("max_split_size_mb:0x20", "'max_split_size_mb'", "'0x20'", "after the number");
    EXPECT_ERR("max_split_size_mb:abc", "'max_split_size_mb'", "'abc'", "not a number");
    EXPECT_ERR("max_split_size_mb:+20", "'max_split_size_mb'", "'+20'", "not a number");
    EXPECT_ERR("max_split_size_mb:2 0", "'max_split_size_mb'", "'2 0'", "after the number");
    EXPECT_ERR("max_split_size_mb:[1:2]", "'max_split_size_mb'", "'[1:2]'", "single value");
}

static void test_max_non_split_rounding_mb(void **state) {
    (void)state;
    xsa_config c = parse_ok("max_non_split_rounding_mb:64");
    assert_int_equal(c.pool.max_non_split_rounding, 64 * MIB);
    assert_int_equal(c.pool.max_split_size, SIZE_MAX);
    assert_int_equal(parse_ok("max_non_split_rounding_mb:20").pool.max_non_split_rounding, 20 * MIB);
    assert_int_equal(parse_ok("max_non_split_rounding_mb:99999999999999999").pool.max_non_split_rounding, SIZE_MAX);
    EXPECT_ERR("max_non_split_rounding_mb:10", "'max_non_split_rounding_mb'", "'10'", "too small", ">= 20");
    EXPECT_ERR("max_non_split_rounding_mb:-64", "'max_non_split_rounding_mb'", "'-64'", "negative");
    EXPECT_ERR("max_non_split_rounding_mb:6.4e1", "'max_non_split_rounding_mb'", "'6.4e1'", "not an integer");
    EXPECT_ERR("max_non_split_rounding_mb:64MB", "'max_non_split_rounding_mb'", "'64MB'", "after the number");
}

/* ---- roundup_power2_divisions ---- */

static void test_roundup_single(void **state) {
    (void)state;
    size_t want[N];
    const struct {
        const char *text;
        size_t v;
    } ok[] = {{"roundup_power2_divisions:4", 4},
              {"roundup_power2_divisions:1", 1},
              {"roundup_power2_divisions: 16 ", 16},
              {"roundup_power2_divisions:0", 0},
              {"roundup_power2_divisions:1073741824", (size_t)1 << 30}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        for (int k = 0; k < N; k++) want[k] = ok[i].v;
        xsa_config c = parse_ok(ok[i].text);
        assert_divs(&c, want);
    }
    EXPECT_ERR("roundup_power2_divisions:3", "'roundup_power2_divisions'", "'3'", "not 0 or a power of two");
    EXPECT_ERR("roundup_power2_divisions:12", "'roundup_power2_divisions'", "'12'", "power of two");
    EXPECT_ERR("roundup_power2_divisions:-4", "'roundup_power2_divisions'", "'-4'", "negative");
    EXPECT_ERR("roundup_power2_divisions:4.0", "'roundup_power2_divisions'", "'4.0'", "not an integer");
    EXPECT_ERR("roundup_power2_divisions:four", "'roundup_power2_divisions'", "'four'", "not a number");
    EXPECT_ERR("roundup_power2_divisions:4x", "'roundup_power2_divisions'", "'4x'", "after the number");
}

/* The example of the brief and PyTorch's docs, interval by interval:
 * 256 is interval 8 and, being first, fills 0..7; 512 sets only 9; '>' fills
 * 10..15. */
static void test_roundup_list_basic(void **state) {
    (void)state;
    const size_t want[N] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[256:1,512:2,>:8]").pool}, want);
    /* Whitespace everywhere, and one trailing comma inside the list. */
    assert_divs(&(xsa_config){.pool = parse_ok(" roundup_power2_divisions : [ 256 : 1 ,\t512:2 , > : 8 ] ").pool}, want);
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[256:1,512:2,>:8,]").pool}, want);
}

static void test_roundup_list_fill_rules(void **state) {
    (void)state;
    /* No fill forward between entries (PyTorch): 7, 8, 9 stay 0. */
    const size_t gap[N] = {8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 4, 0, 0, 0, 0, 0};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[64:8,1024:4]").pool}, gap);
    /* PyTorch's own header example. */
    const size_t hdr[N] = {8, 8, 8, 8, 8, 8, 8, 0, 4, 0, 4, 1, 1, 1, 1, 1};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[64:8,256:4,1024:4,>:1]").pool}, hdr);
    /* Size 1 MiB is interval 0: nothing before it to fill. */
    const size_t one[N] = {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[1:2]").pool}, one);
    /* '>' right after interval 0 fills 1..15. */
    const size_t one_gt[N] = {2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[1:2,>:4]").pool}, one_gt);
    /* The last interval (32768 MiB = 2^15); '>' after it sets nothing. */
    const size_t last[N] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[32768:4,>:2]").pool}, last);
    /* A size past 32768 MiB is clamped to interval 15. */
    const size_t clamp[N] = {16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 1};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[2:16,4:16,8:16,16:16,32:16,64:16,128:16,256:16,"
                                       "512:16,1024:16,2048:16,4096:16,8192:16,16384:16,65536:1]")
                                  .pool},
                clamp);
    /* 0 switches rounding off in an interval. */
    const size_t zero[N] = {0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[2:0,4:16]").pool}, zero);
    const size_t gt0[N] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[256:8,>:0]").pool}, gt0);
    /* Every interval set explicitly. */
    const size_t all[N] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
    assert_divs(&(xsa_config){.pool = parse_ok("roundup_power2_divisions:[1:1,2:2,4:4,8:8,16:16,32:32,64:64,128:128,"
                                       "256:256,512:512,1024:1024,2048:2048,4096:4096,8192:8192,16384:16384,"
                                       "32768:32768]")
                                  .pool},
                all);
    /* Other keys around a list. */
    xsa_config c = parse_ok("max_split_size_mb:64,roundup_power2_divisions:[256:1,>:2],page_recycling:False");
    const size_t mix[N] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2};
    assert_divs(&c, mix);
    assert_int_equal(c.pool.max_split_size, 64 * MIB);
    assert_false(c.pool.page_recycling);
}

static void test_roundup_list_errors(void **state) {
    (void)state;
    const char *k = "'roundup_power2_divisions'";
    EXPECT_ERR("roundup_power2_divisions:[256:1,512:2", k, "'[256:1,512:2'", "missing its closing ']'");
    EXPECT_ERR("roundup_power2_divisions:[256:1,512:2,expandable_segments:True", k, "closing ']'");
    EXPECT_ERR("roundup_power2_divisions:[256:[1]]", k, "'[256:[1]]'", "nested");
    EXPECT_ERR("roundup_power2_divisions:[]", k, "'[]'", "empty list");
    EXPECT_ERR("roundup_power2_divisions:[ , ]", k, "'[ , ]'", "empty entry");
    EXPECT_ERR("roundup_power2_divisions:[,256:1]", k, "'[,256:1]'", "empty entry");
    EXPECT_ERR("roundup_power2_divisions:[256:1,,512:2]", k, "'[256:1,,512:2]'", "empty entry");
    EXPECT_ERR("roundup_power2_divisions:[256]", k, "'[256]'", "entry '256' has no ':DIV'");
    EXPECT_ERR("roundup_power2_divisions:[256:]", k, "'[256:]'", "no divisions");
    EXPECT_ERR("roundup_power2_divisions:[256:1:2]", k, "'[256:1:2]'", "unexpected ':'");
    EXPECT_ERR("roundup_power2_divisions:[300:1]", k, "'[300:1]'", "'300' MiB", "not a power of two");
    EXPECT_ERR("roundup_power2_divisions:[0:1]", k, "'[0:1]'", "'0' MiB", "not a power of two");
    EXPECT_ERR("roundup_power2_divisions:[256:3]", k, "'[256:3]'", "divisions '3'", "not 0 or a power of two");
    EXPECT_ERR("roundup_power2_divisions:[256:-1]", k, "'[256:-1]'", "divisions '-1'", "negative");
    EXPECT_ERR("roundup_power2_divisions:[256:1.5]", k, "'[256:1.5]'", "not an integer");
    EXPECT_ERR("roundup_power2_divisions:[abc:1]", k, "'[abc:1]'", "size 'abc'", "not a number");
    EXPECT_ERR("roundup_power2_divisions:[256MB:1]", k, "'[256MB:1]'", "size '256MB'", "after the number");
    EXPECT_ERR("roundup_power2_divisions:[512:1,256:2]", k, "'[512:1,256:2]'", "'256' MiB", "later interval");
    EXPECT_ERR("roundup_power2_divisions:[256:1,256:2]", k, "'[256:1,256:2]'", "later interval");
    EXPECT_ERR("roundup_power2_divisions:[32768:1,65536:2]", k, "'65536' MiB", "later interval");
    EXPECT_ERR("roundup_power2_divisions:[>:8]", k, "'[>:8]'", "needs a size entry before it");
    EXPECT_ERR("roundup_power2_divisions:[256:1,>:8,1024:2]", k, "'1024:2'", "must be last");
    EXPECT_ERR("roundup_power2_divisions:[256:1,>:8,>:4]", k, "'>:4'", "must be last");
    EXPECT_ERR("roundup_power2_divisions:[256:1]x", k, "'[256:1]'", "unexpected 'x'");
    EXPECT_ERR("roundup_power2_divisions:[256:1] [512:2]", k, "unexpected '['");
}

/* ---- floats ---- */

static void test_garbage_collection_threshold(void **state) {
    (void)state;
    assert_true(parse_ok("garbage_collection_threshold:0.8").pool.garbage_collection_threshold == 0.8);
    assert_true(parse_ok("garbage_collection_threshold:.5").pool.garbage_collection_threshold == 0.5);
    assert_true(parse_ok("garbage_collection_threshold:5e-1").pool.garbage_collection_threshold == 0.5);
    assert_true(parse_ok("garbage_collection_threshold:+0.25").pool.garbage_collection_threshold == 0.25);
    assert_true(parse_ok(" garbage_collection_threshold : 0.999 ").pool.garbage_collection_threshold == 0.999);
    assert_true(parse_ok("garbage_collection_threshold:1e-9").pool.garbage_collection_threshold == 1e-9);
    const char *k = "'garbage_collection_threshold'";
    EXPECT_ERR("garbage_collection_threshold:0", k, "'0'", "out of range", "greater than 0 and less than 1");
    EXPECT_ERR("garbage_collection_threshold:0.0", k, "'0.0'", "out of range");
    EXPECT_ERR("garbage_collection_threshold:1", k, "'1'", "out of range");
    EXPECT_ERR("garbage_collection_threshold:1.0", k, "'1.0'", "out of range");
    EXPECT_ERR("garbage_collection_threshold:-0.5", k, "'-0.5'", "out of range");
    EXPECT_ERR("garbage_collection_threshold:1.5", k, "'1.5'", "out of range");
    EXPECT_ERR("garbage_collection_threshold:1e999", k, "'1e999'", "out of range");
    EXPECT_ERR("garbage_collection_threshold:abc", k, "'abc'", "not a number");
    EXPECT_ERR("garbage_collection_threshold:.", k, "'.'", "not a number");
    EXPECT_ERR("garbage_collection_threshold:nan", k, "'nan'", "not a number");
    EXPECT_ERR("garbage_collection_threshold:inf", k, "'inf'", "not a number");
    EXPECT_ERR("garbage_collection_threshold:0x0.8p0", k, "'0x0.8p0'", "after the number");
    EXPECT_ERR("garbage_collection_threshold:0.5x", k, "'0.5x'", "after the number");
    EXPECT_ERR("garbage_collection_threshold:0.5.1", k, "'0.5.1'", "after the number");
    EXPECT_ERR("garbage_collection_threshold:5e", k, "'5e'", "malformed exponent");
    EXPECT_ERR("garbage_collection_threshold:0.5 0.6", k, "'0.5 0.6'", "after the number");
}

static void test_per_process_memory_fraction(void **state) {
    (void)state;
    assert_true(parse_ok("per_process_memory_fraction:0.5").pool.memory_fraction == 0.5);
    assert_true(parse_ok("per_process_memory_fraction:1").pool.memory_fraction == 1.0);
    assert_true(parse_ok("per_process_memory_fraction:1.0").pool.memory_fraction == 1.0);
    assert_true(parse_ok("per_process_memory_fraction:1e-3").pool.memory_fraction == 1e-3);
    assert_true(parse_ok("per_process_memory_fraction: 0.25 ").pool.memory_fraction == 0.25);
    const char *k = "'per_process_memory_fraction'";
    /* PyTorch's range includes 0 (no device memory at all). */
    assert_true(parse_ok("per_process_memory_fraction:0").pool.memory_fraction == 0.0);
    assert_true(parse_ok("per_process_memory_fraction:0.0").pool.memory_fraction == 0.0);
    EXPECT_ERR("per_process_memory_fraction:-0.1", k, "'-0.1'", "out of range", "from 0 to 1");
    EXPECT_ERR("per_process_memory_fraction:1.01", k, "'1.01'", "out of range");
    EXPECT_ERR("per_process_memory_fraction:-1", k, "'-1'", "out of range");
    EXPECT_ERR("per_process_memory_fraction:half", k, "'half'", "not a number");
    EXPECT_ERR("per_process_memory_fraction:50%", k, "'50%'", "after the number");
}

/* Numbers are read in the C locale whatever the process's. */
static void test_locale_independent(void **state) {
    (void)state;
    const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
    const char *got = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !got; i++) got = setlocale(LC_NUMERIC, names[i]);
    if (!got) skip();
    double x = parse_ok("garbage_collection_threshold:0.75").pool.garbage_collection_threshold;
    setlocale(LC_NUMERIC, "C");
    assert_true(x == 0.75);
}

/* ---- backend and large_segment_size_mb ---- */

static void test_backend(void **state) {
    (void)state;
    assert_default_text("backend:native");
    assert_default_text(" backend : native ");
    EXPECT_ERR("backend:cudaMallocAsync", "'backend'", "'cudaMallocAsync'", "itself the caching allocator",
               "accepted: native");
    EXPECT_ERR("backend:hipMallocAsync", "'backend'", "'hipMallocAsync'", "itself the caching allocator");
    EXPECT_ERR("backend:Native", "'backend'", "'Native'", "not a known backend", "accepted: native");
    EXPECT_ERR("backend:xsalloc", "'backend'", "'xsalloc'", "not a known backend");
}

static void test_large_segment_size_mb(void **state) {
    (void)state;
    assert_default_text("large_segment_size_mb:20");
    EXPECT_ERR("large_segment_size_mb:40", "'large_segment_size_mb'", "'40'", "not supported", "fixed at 20 MiB");
    EXPECT_ERR("large_segment_size_mb:abc", "'large_segment_size_mb'", "'abc'", "not a number");
}

/* ---- PyTorch keys accepted, validated and ignored ---- */

static void test_ignored_keys_accept(void **state) {
    (void)state;
    const char *ok[] = {
        "release_lock_on_cudamalloc:True",
        "release_lock_on_cudamalloc:False",
        "release_lock_on_hipmalloc:True",
        "pinned_use_cuda_host_register:True",
        "pinned_use_hip_host_register:False",
        "pinned_num_register_threads:1",
        "pinned_num_register_threads:8",
        "pinned_num_register_threads:128",
        "pinned_use_background_threads:True",
        "pinned_reserve_segment_size_mb:64",
        "pinned_max_round_threshold_mb:0",
        "pinned_max_round_threshold_mb:256",
        "pinned_max_cached_size_mb:1024",
        "pinned_free_catch_all:True",
        "throw_on_cudamalloc_oom:False",
        "throw_on_cudamalloc_oom:True",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_default_text(ok[i]);
        /* Named, as written (aliases too), so that none is dropped silently. */
        xsa_config c = parse_ok(ok[i]);
        size_t key_len = (size_t)(strchr(ok[i], ':') - ok[i]);
        assert_int_equal(strlen(c.ignored), key_len);
        assert_memory_equal(c.ignored, ok[i], key_len);
    }
    /* All together, with a real setting among them: only the ignored ones are
     * named, in the order given. */
    xsa_config c = parse_ok("release_lock_on_cudamalloc:True, pinned_use_cuda_host_register:True, "
                            "pinned_num_register_threads:8, max_split_size_mb:40, pinned_use_background_threads:True");
    assert_int_equal(c.pool.max_split_size, 40 * MIB);
    assert_string_equal(c.ignored, "release_lock_on_cudamalloc, pinned_use_cuda_host_register, "
                                   "pinned_num_register_threads, pinned_use_background_threads");
}

/* Every ignored key at once, aliases first: the list has room for all. */
static void test_ignored_keys_all_named(void **state) {
    (void)state;
    xsa_config c = parse_ok("release_lock_on_hipmalloc:True, pinned_use_hip_host_register:True, "
                            "pinned_num_register_threads:8, pinned_use_background_threads:True, "
                            "pinned_reserve_segment_size_mb:64, pinned_max_round_threshold_mb:0, "
                            "pinned_max_cached_size_mb:1, pinned_free_catch_all:False, "
                            "throw_on_cudamalloc_oom:True");
    assert_string_equal(c.ignored, "release_lock_on_hipmalloc, pinned_use_hip_host_register, "
                                   "pinned_num_register_threads, pinned_use_background_threads, "
                                   "pinned_reserve_segment_size_mb, pinned_max_round_threshold_mb, "
                                   "pinned_max_cached_size_mb, pinned_free_catch_all, "
                                   "throw_on_cudamalloc_oom");
}

/* Keys xsalloc honours (or that match what it does) are not named. */
static void test_honoured_keys_not_named(void **state) {
    (void)state;
    xsa_config c = parse_ok("expandable_segments:False, max_split_size_mb:64, max_non_split_rounding_mb:40, "
                            "roundup_power2_divisions:4, garbage_collection_threshold:0.6, "
                            "per_process_memory_fraction:0.5, backend:native, large_segment_size_mb:20, "
                            "graph_capture_record_stream_reuse:True");
    assert_string_equal(c.ignored, "");
    assert_true(c.pool.capture_reuse);
    /* Off by default and when given False, as in PyTorch. */
    assert_false(parse_ok("").pool.capture_reuse);
    assert_false(parse_ok("graph_capture_record_stream_reuse:False").pool.capture_reuse);
}

/* ---- where the settings come from ---- */

static const char *const conf_vars[] = {"XSALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"};

static void unset_conf_vars(void) {
    for (int i = 0; i < 3; i++) unsetenv(conf_vars[i]);
}

static void expect_env(const char *name, const char *value) {
    const char *text = "not touched";
    const char *got = xsa_config_env(&text);
    if (!name) {
        assert_null(got);
        assert_null(text);
        return;
    }
    assert_non_null(got);
    assert_string_equal(got, name);
    assert_string_equal(text, value);
}

static void test_config_env_order(void **state) {
    (void)state;
    unset_conf_vars();
    expect_env(NULL, NULL);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    expect_env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64");
    setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:128", 1);
    expect_env("PYTORCH_ALLOC_CONF", "max_split_size_mb:128"); /* the newer name wins, as in PyTorch */
    setenv("XSALLOC_CONF", "page_recycling:False", 1);
    expect_env("XSALLOC_CONF", "page_recycling:False");
    /* Set but empty counts (all defaults), as PyTorch treats its own. */
    setenv("XSALLOC_CONF", "", 1);
    expect_env("XSALLOC_CONF", "");
    unsetenv("XSALLOC_CONF");
    setenv("PYTORCH_ALLOC_CONF", "", 1);
    expect_env("PYTORCH_ALLOC_CONF", "");
    unset_conf_vars();
}

static void test_ignored_keys_validate(void **state) {
    (void)state;
    EXPECT_ERR("release_lock_on_cudamalloc:1", "'release_lock_on_cudamalloc'", "'1'", "True or False");
    EXPECT_ERR("release_lock_on_hipmalloc:true", "'release_lock_on_hipmalloc'", "'true'", "True or False");
    EXPECT_ERR("pinned_use_cuda_host_register:yes", "'pinned_use_cuda_host_register'", "'yes'", "True or False");
    EXPECT_ERR("pinned_num_register_threads:3", "'pinned_num_register_threads'", "'3'", "not a power of two",
               "from 1 to 128");
    EXPECT_ERR("pinned_num_register_threads:0", "'pinned_num_register_threads'", "'0'", "not a power of two");
    EXPECT_ERR("pinned_num_register_threads:256", "'pinned_num_register_threads'", "'256'", "too large");
    EXPECT_ERR("pinned_num_register_threads:-8", "'pinned_num_register_threads'", "'-8'", "negative");
    EXPECT_ERR("pinned_use_background_threads:False!", "'pinned_use_background_threads'", "'False!'");
    EXPECT_ERR("pinned_reserve_segment_size_mb:0", "'pinned_reserve_segment_size_mb'", "'0'", "too small");
    EXPECT_ERR("pinned_reserve_segment_size_mb:1.5", "'pinned_reserve_segment_size_mb'", "'1.5'", "not an integer");
    EXPECT_ERR("pinned_max_round_threshold_mb:x", "'pinned_max_round_threshold_mb'", "'x'", "not a number");
    EXPECT_ERR("pinned_max_cached_size_mb:-1", "'pinned_max_cached_size_mb'", "'-1'", "negative");
    EXPECT_ERR("pinned_free_catch_all:0", "'pinned_free_catch_all'", "'0'", "True or False");
    EXPECT_ERR("graph_capture_record_stream_reuse:on", "'graph_capture_record_stream_reuse'", "'on'");
    EXPECT_ERR("throw_on_cudamalloc_oom:true", "'throw_on_cudamalloc_oom'", "'true'", "True or False");
    EXPECT_ERR("pinned_use_background_threads:[True]", "'pinned_use_background_threads'", "'[True]'", "single value");
}

/* ---- PyTorch keys refused ---- */

static void test_rejected_keys(void **state) {
    (void)state;
    EXPECT_ERR("expandable_segments_reserve:0.5", "'expandable_segments_reserve'", "'0.5'", "not supported");
    EXPECT_ERR("expandable_segments_reserve_by_class:[serving:0.25]", "'expandable_segments_reserve_by_class'",
               "'[serving:0.25]'", "not supported");
    EXPECT_ERR("expandable_segments_handle_type:2", "'expandable_segments_handle_type'", "'2'", "not supported");
}

/* ---- keys and structure ---- */

static void test_unknown_keys(void **state) {
    (void)state;
    EXPECT_ERR("foo:1", "unknown key 'foo'", "'1'", "expandable_segments");
    EXPECT_ERR("Expandable_segments:True", "unknown key 'Expandable_segments'", "'True'");
    EXPECT_ERR("max split_size_mb:64", "unknown key 'max split_size_mb'", "'64'");
    EXPECT_ERR("expandable_segments:True,use_linear_memory:True", "unknown key 'use_linear_memory'", "'True'");
    EXPECT_ERR("foo:[1:2]", "unknown key 'foo'", "'[1:2]'");
    /* The list names every key that acts, from the parser's own table. */
    EXPECT_ERR("foo:1", "graph_capture_record_stream_reuse", "large_segment_size_mb", "expandable_handle_mb",
               "backend", "per_process_memory_fraction", "or a PyTorch compatibility key");
}

static void test_duplicates(void **state) {
    (void)state;
    EXPECT_ERR("expandable_segments:True,expandable_segments:False", "'expandable_segments'", "given twice", "'True'",
               "'False'");
    EXPECT_ERR("max_split_size_mb:64, max_split_size_mb:64", "'max_split_size_mb'", "given twice", "'64'");
    EXPECT_ERR("roundup_power2_divisions:4,roundup_power2_divisions:[256:1]", "'roundup_power2_divisions'",
               "given twice", "'4'", "'[256:1]'");
    EXPECT_ERR("release_lock_on_cudamalloc:True,release_lock_on_hipmalloc:False", "'release_lock_on_hipmalloc'",
               "'False'", "alias 'release_lock_on_cudamalloc'", "'True'");
    EXPECT_ERR("pinned_use_hip_host_register:True,pinned_use_cuda_host_register:True", "'pinned_use_cuda_host_register'",
               "alias 'pinned_use_hip_host_register'");
}

static void test_structure_errors(void **state) {
    (void)state;
    EXPECT_ERR("expandable_segments", "'expandable_segments'", "no ':'", "the end");
    EXPECT_ERR("expandable_segments,page_recycling:False", "'expandable_segments'", "no ':'", "','");
    EXPECT_ERR("expandable_segments:", "'expandable_segments'", "empty value", "the end");
    EXPECT_ERR("expandable_segments:  ,page_recycling:False", "'expandable_segments'", "empty value", "','");
    EXPECT_ERR("expandable_segments::True", "'expandable_segments'", "empty value", "':'");
    /* A known key without its value says what that key takes; an unknown one, that it is unknown. */
    EXPECT_ERR("max_split_size_mb:", "accepted: max_split_size_mb:VALUE, VALUE an integer number of MiB >= 20");
    EXPECT_ERR("garbage_collection_threshold", "no ':'",
               "accepted: garbage_collection_threshold:VALUE, VALUE a number greater than 0 and less than 1");
    EXPECT_ERR("expandable_segments", "accepted: expandable_segments:VALUE, VALUE True or False");
    EXPECT_ERR("no_such_key:", "'no_such_key'", "empty value", "accepted: key:value with a known key");
    EXPECT_ERR(":True", "empty key", "'True'");
    EXPECT_ERR("  : 5 ", "empty key", "'5'");
    EXPECT_ERR(",expandable_segments:True", "empty", "leading ','", "expandable_segments:True");
    EXPECT_ERR("expandable_segments:True,,page_recycling:True", "empty", "',,'", "page_recycling:True");
    EXPECT_ERR(",", "empty", "','");
    EXPECT_ERR("expandable_segments:True,,", "empty");
    EXPECT_ERR("expandable_segments:True:False", "'expandable_segments'", "'True'", "unexpected ':'");
    /* A missing comma: the value runs to the next ':' and is not a boolean. */
    EXPECT_ERR("expandable_segments:True page_recycling:False", "'expandable_segments'", "'True page_recycling'",
               "not a boolean");
    EXPECT_ERR("max_split_size_mb:64:128", "'max_split_size_mb'", "'64'", "unexpected ':'");
    EXPECT_ERR("expandable_segments:True]", "'expandable_segments'", "'True'", "unexpected ']'");
    EXPECT_ERR("[", "unexpected '['");
    EXPECT_ERR("]expandable_segments:True", "unexpected ']'");
}

static void test_trailing_comma(void **state) {
    (void)state;
    assert_false(parse_ok("expandable_segments:False,").pool.expandable_segments);
    assert_false(parse_ok("expandable_segments:False , ").pool.expandable_segments);
    xsa_config c = parse_ok("page_recycling:False,max_split_size_mb:32,\n");
    assert_false(c.pool.page_recycling);
    assert_int_equal(c.pool.max_split_size, 32 * MIB);
}

static void test_everything(void **state) {
    (void)state;
    xsa_config c = parse_ok("\texpandable_segments : False ,\n page_recycling:False, max_split_size_mb :\n 64 ,"
                            "max_non_split_rounding_mb:40, roundup_power2_divisions:[ 128:2 , > : 4 ],"
                            "garbage_collection_threshold:0.6,per_process_memory_fraction:0.75,backend:native,"
                            "large_segment_size_mb:20,release_lock_on_cudamalloc:True,"
                            "pinned_use_cuda_host_register:True,pinned_num_register_threads:8 ");
    assert_false(c.pool.expandable_segments);
    assert_false(c.pool.page_recycling);
    assert_int_equal(c.pool.max_split_size, 64 * MIB);
    assert_int_equal(c.pool.max_non_split_rounding, 40 * MIB);
    const size_t want[N] = {2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4, 4};
    assert_divs(&c, want);
    assert_true(c.pool.garbage_collection_threshold == 0.6);
    assert_true(c.pool.memory_fraction == 0.75);
    assert_string_equal(c.ignored, "release_lock_on_cudamalloc, pinned_use_cuda_host_register, pinned_num_register_threads");
    /* A later parse starts from the defaults again. */
    assert_default_text("");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_err_buffer_handling),
        cmocka_unit_test(test_expandable_segments),
        cmocka_unit_test(test_page_recycling),
        cmocka_unit_test(test_peer_access_and_ipc_handles),
        cmocka_unit_test(test_helper_thread_and_page_decay_ms),
        cmocka_unit_test(test_max_split_size_mb),
        cmocka_unit_test(test_max_non_split_rounding_mb),
        cmocka_unit_test(test_roundup_single),
        cmocka_unit_test(test_roundup_list_basic),
        cmocka_unit_test(test_roundup_list_fill_rules),
        cmocka_unit_test(test_roundup_list_errors),
        cmocka_unit_test(test_garbage_collection_threshold),
        cmocka_unit_test(test_per_process_memory_fraction),
        cmocka_unit_test(test_locale_independent),
        cmocka_unit_test(test_backend),
        cmocka_unit_test(test_large_segment_size_mb),
        cmocka_unit_test(test_ignored_keys_accept),
        cmocka_unit_test(test_ignored_keys_validate),
        cmocka_unit_test(test_ignored_keys_all_named),
        cmocka_unit_test(test_honoured_keys_not_named),
        cmocka_unit_test(test_config_env_order),
        cmocka_unit_test(test_rejected_keys),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_structure_errors),
        cmocka_unit_test(test_trailing_comma),
        cmocka_unit_test(test_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
