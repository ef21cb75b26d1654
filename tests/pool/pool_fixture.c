/* pool_fixture: the pool-level tests' shared steps (see pool_fixture.h). */
#include "tests/pool/pool_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pool/jobs.h"

#include "tests/sim/sim_empty.h"

xsa_driver *drv;
char err[2048];

void setup_sim(size_t capacity) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = capacity;
    assert_int_equal(xsa_sim_configure(&c), XSA_CU_SUCCESS);
    drv = xsa_driver_sim();
}

xsa_pool *make_pool(size_t capacity, bool expandable, void (*tweak)(xsa_pool_options *)) {
    setup_sim(capacity);
    xsa_pool_options o;
    xsa_pool_options_default(&o);
    o.expandable_segments = expandable;
    o.page_recycling = false;
    o.helper_thread = false; /* no helper runs here: a test that wants its rounds turns it on and polls */
    o.page_decay_ms = 0;
    if (tweak) tweak(&o);
    xsa_pool *p = NULL;
    assert_int_equal(xsa_pool_create(&p, drv, 0, &o, NULL, err, sizeof err), XSA_POOL_OK);
    return p;
}

void check(xsa_pool *p) {
    if (!xsa_pool_check(p, err, sizeof err)) fail_msg("pool: %s", err);
    if (!xsa_sim_check(err, sizeof err)) fail_msg("sim: %s", err);
}

void *alloc(xsa_pool *p, size_t size, void *stream) {
    void *ptr = NULL;
    xsa_pool_status st = xsa_pool_malloc(p, size, stream, &ptr, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("malloc(%zu): %d %s", size, st, err);
    check(p);
    return ptr;
}

void release(xsa_pool *p, void *ptr) {
    assert_int_equal(xsa_pool_free(p, ptr, err, sizeof err), XSA_POOL_OK);
    check(p);
}

xsa_device_stats stats(xsa_pool *p) {
    xsa_device_stats s;
    xsa_pool_get_stats(p, &s);
    return s;
}

int64_t reserved(xsa_pool *p) { return stats(p).reserved_bytes[XSA_STAT_ALL].current; }

void helper_round(xsa_pool *p, uint64_t now) {
    xsa_pool_jobs jobs;
    xsa_pool_jobs_plan(p, now, &jobs);
    check(p);
    xsa_pool_jobs_run(&jobs);
    xsa_pool_jobs_commit(p, &jobs);
    check(p);
}

void expect_helper_notice(xsa_pool *p, const char *call) {
    void *ptr = NULL;
    assert_int_equal(xsa_pool_malloc(p, 1000, S0, &ptr, err, sizeof err), XSA_POOL_DRIVER_ERROR);
    if (!strstr(err, "helper thread") || !strstr(err, call)) fail_msg("the notice says: %s", err);
    check(p);
    release(p, alloc(p, 1000, S0));
}

xsa_sim_usage usage(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    return u;
}

uint64_t driver_calls(xsa_driver_entry e) {
    uint64_t c[XSA_DRV_COUNT];
    xsa_driver_read_calls(drv, c, NULL);
    return c[e];
}

void run_both(void (*body)(bool expandable)) {
    body(true);
    body(false);
}

bool only_stream(void *ctx, void *stream) { return stream == ctx; }

void pool_begin(xsa_pool *p, xsa_mempool_id id, void *stream, bool capture) {
    xsa_pool_status st =
        xsa_pool_begin_allocate_to_pool(p, id, stream ? only_stream : NULL, stream, capture, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("begin_allocate_to_pool: %d %s", st, err);
    check(p);
}

void pool_end(xsa_pool *p, xsa_mempool_id id) {
    xsa_pool_status st = xsa_pool_end_allocate_to_pool(p, id, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("end_allocate_to_pool: %d %s", st, err);
    check(p);
}

void pool_drop(xsa_pool *p, xsa_mempool_id id) {
    xsa_pool_status st = xsa_pool_mempool_release(p, id, err, sizeof err);
    if (st != XSA_POOL_OK) fail_msg("mempool_release: %d %s", st, err);
    check(p);
}

void teardown(xsa_pool *p) {
    xsa_pool_destroy(p);
    xsa_fixture_expect_sim_empty();
}
