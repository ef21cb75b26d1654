/*
 * helper_test: the helper thread through the public API on the simulated
 * driver: it starts lazily, once, and only with helper_thread on, named
 * xsa-helper (as top and py-spy show it); decay on
 * its own thread brings reserved memory down to live memory; shutdown and
 * fork stop it cleanly (the child starts its own at its first growth, the
 * parent's runs on); settings at run time turn it and decay on and off
 * with config.c's rules; a failure of its driver calls reaches the next
 * xsa_malloc or xsa_empty_cache as an error, once, and nothing is lost;
 * empty_cache leaves no readied pages in the cache, whenever the helper's
 * round falls;
 * and it runs beside threads that allocate (the TSan build checks the
 * locking); a call that slept for the device's lock shows in the
 * statistics (num_device_lock_waits, device_lock_wait_us) until they are
 * reset; the helper's driver calls are counted apart from the callers'.
 * Cases on the thread wait on real time (with generous limits); the
 * failure cases use the helper's manual mode and a clock of their own.
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/devices.h"
#include "api/helper.h"
#include "tests/api/api_fixture.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)
#define MS 1000000ull
#define WAIT_S 20 /* the longest a case waits for the thread (sanitizer builds are slow) */

static int64_t reserved(void) {
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    return s.reserved_bytes[XSA_STAT_ALL].current;
}

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Waits until reserved memory is at most `bytes`; false after WAIT_S. */
static bool reserved_drops_to(int64_t bytes) {
    for (int i = 0; i < WAIT_S * 100; i++) {
        if (reserved() <= bytes) return true;
        nap_ms(10);
    }
    return false;
}

/* 2 MiB that stay and a 40 MiB burst, freed: 42 MiB reserved. */
static void *params_and_burst(void) {
    void *params, *burst;
    OK(xsa_malloc(&params, 2 * MiB, 0, NULL));
    OK(xsa_malloc(&burst, 40 * MiB, 0, NULL));
    OK(xsa_free(burst));
    return params;
}

static int setup(void **state) {
    (void)state;
    xsa_fixture_use_sim(2, (size_t)1 << 30); /* device 1: a peer */
    xsa_sim_set_eager_events(1); /* work completes as queued: fences do on the thread */
    return 0;
}

static int teardown(void **state) {
    (void)state;
    xsa_helper_set_deferred_commit(0);
    xsa_helper_set_manual(false);
    xsa_helper_set_clock(NULL, NULL);
    xsa_sim_clear_faults();
    xsa_fixture_shutdown_and_expect_empty();
    assert_false(xsa_helper_running());
    xsa_sim_set_eager_events(0);
    return 0;
}

/* How many of this process's threads are named `name` (/proc). */
static int threads_named(const char *name) {
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], comm[32] = "";
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* the thread ended */
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

static void test_starts_lazily_once_and_only_when_on(void **state) {
    (void)state;
    uint64_t starts = xsa_helper_starts();
    OK(xsa_init("helper_thread:False"));
    void *params = params_and_burst();
    assert_false(xsa_helper_running());
    OK(xsa_free(params));
    OK(xsa_shutdown());
    OK(xsa_init("helper_thread:True"));
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s)); /* the pool, no growth yet */
    assert_false(xsa_helper_running());
    params = params_and_burst(); /* growths wake it */
    assert_true(xsa_helper_running());
    assert_int_equal(threads_named("xsa-helper"), 1);
    void *more;
    OK(xsa_malloc(&more, 60 * MiB, 0, NULL));
    assert_int_equal(xsa_helper_starts(), starts + 1);
    OK(xsa_free(more));
    OK(xsa_free(params));
    OK(xsa_shutdown());
    assert_false(xsa_helper_running());
    assert_int_equal(threads_named("xsa-helper"), 0);
}

static void test_settings_before_the_first_allocation_wait_for_the_devices(void **state) {
    (void)state;
    /* Settings that turn it on wake it before the devices have a driver
     * (nothing allocated yet): it waits for them (it once made the
     * driver's capture mode relaxed through no driver and crashed). */
    OK(xsa_set_allocator_settings("helper_thread:True"));
    nap_ms(20); /* the thread, if it started, has run by now */
    void *params = params_and_burst();
    OK(xsa_free(params));
    OK(xsa_shutdown());
    assert_false(xsa_helper_running()); /* stopped whatever the devices' phase */
    OK(xsa_set_allocator_settings("helper_thread:True"));
    nap_ms(20);
    OK(xsa_shutdown()); /* never started the devices: the thread stops too */
    assert_false(xsa_helper_running());
}

static void test_decay_on_the_thread_follows_live_memory_down(void **state) {
    (void)state;
    OK(xsa_init("helper_thread:True,page_decay_ms:20"));
    void *params = params_and_burst();
    assert_true(reserved_drops_to(4 * MiB));
    INVARIANTS(0);
    /* The next burst gets new pages, and goes again. */
    void *burst;
    OK(xsa_malloc(&burst, 40 * MiB, 0, NULL));
    xsa_fixture_fill(burst, 40 * MiB, 7);
    assert_true(xsa_fixture_filled(burst, 40 * MiB, 7));
    OK(xsa_free(burst));
    assert_true(reserved_drops_to(4 * MiB));
    OK(xsa_free(params));
    INVARIANTS(0);
}

/* With no settings at all, decay runs on the helper (XSA_HELPER_BY_DEFAULT,
 * page_decay_ms 500): a burst's memory goes back by itself. */
static void test_the_defaults_give_a_burst_back(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *params = params_and_burst();
    assert_true(xsa_helper_running());
    assert_true(reserved_drops_to(4 * MiB));
    OK(xsa_free(params));
    INVARIANTS(0);
}

static void test_shutdown_stops_it_mid_work_and_init_starts_over(void **state) {
    (void)state;
    for (int round = 0; round < 3; round++) {
        OK(xsa_init("helper_thread:True,page_decay_ms:1"));
        void *params = params_and_burst();
        for (int i = 0; i < 50; i++) {
            void *p;
            OK(xsa_malloc(&p, (size_t)(1 + i % 7) * 3 * MiB, 0, NULL));
            OK(xsa_free(p));
            if (i % 10 == 0) nap_ms(1);
        }
        OK(xsa_free(params));
        OK(xsa_shutdown()); /* the thread may be between its plan and its commit */
        assert_false(xsa_helper_running());
        xsa_fixture_expect_sim_empty();
    }
}

/* The child of a fork: no helper thread; a child forked after the start
 * cannot use the parent's xsalloc (api/devices.c), but one that picks the
 * simulated driver starts its own, and its helper thread at its first
 * growth, where decay works; exit status 0 when every check held. */
static int in_child(void) {
    if (xsa_helper_running()) return 1;
    if (xsa_shutdown() != XSA_SUCCESS || xsa_use_driver("sim") != XSA_SUCCESS ||
        xsa_init("helper_thread:True,page_decay_ms:20") != XSA_SUCCESS)
        return 7;
    void *burst;
    if (xsa_malloc(&burst, 60 * MiB, 0, NULL) != XSA_SUCCESS) return 2;
    if (!xsa_helper_running()) return 3;
    if (xsa_free(burst) != XSA_SUCCESS) return 4;
    if (!reserved_drops_to(4 * MiB)) return 5;
    if (xsa_check_invariants(0) != XSA_SUCCESS) return 6;
    return 0;
}

static void test_fork_stops_it_and_each_side_goes_on(void **state) {
    (void)state;
    OK(xsa_init("helper_thread:True,page_decay_ms:20"));
    void *params = params_and_burst();
    assert_true(xsa_helper_running());
    uint64_t starts = xsa_helper_starts();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(in_child());
    /* The parent's thread was stopped around the fork and runs again. */
    assert_true(xsa_helper_running());
    assert_int_equal(xsa_helper_starts(), starts + 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(reserved_drops_to(4 * MiB));
    OK(xsa_free(params));
    INVARIANTS(0);
}

static void test_settings_turn_it_and_decay_on_and_off(void **state) {
    (void)state;
    OK(xsa_init(NULL)); /* the defaults: XSA_HELPER_BY_DEFAULT */
    void *params = params_and_burst();
    FAILS(XSA_ERROR_CONFIG, xsa_set_allocator_settings("page_decay_ms:20,helper_thread:False"), "helper thread");
    OK(xsa_set_allocator_settings("helper_thread:False"));
    /* Decay asked for at run time turns the helper on: the memory freed
     * before goes. */
    OK(xsa_set_allocator_settings("page_decay_ms:20"));
    assert_true(reserved_drops_to(4 * MiB));
    /* The helper off takes decay with it: a burst then stays. */
    OK(xsa_set_allocator_settings("helper_thread:False"));
    void *burst;
    OK(xsa_malloc(&burst, 40 * MiB, 0, NULL));
    OK(xsa_free(burst));
    nap_ms(200);
    assert_true(reserved() >= 42 * (int64_t)MiB);
    OK(xsa_free(params));
    INVARIANTS(0);
}

/* ---- failures, in manual mode on a clock of the test's ---- */

static uint64_t fake_now;
static uint64_t fake_clock(void *ctx) {
    (void)ctx;
    return fake_now;
}

/* Decay of 100 ms (a tick every 12.5 ms) in manual mode: rounds until the
 * burst's pages were taken and their fence completed. */
static void *manual_decay_until_taken(void) {
    xsa_helper_set_manual(true);
    xsa_helper_set_clock(fake_clock, NULL);
    fake_now = 0;
    OK(xsa_init("helper_thread:True,page_decay_ms:100"));
    void *params = params_and_burst(); /* freed by the shutdown unless the test frees it */
    for (fake_now = 0; fake_now <= 150 * MS && reserved() > (int64_t)(4 * MiB); fake_now += MS) xsa_helper_poll();
    assert_int_equal(reserved(), 4 * MiB);
    return params;
}

/* The helper's next rounds, the taken pages' job among them. */
static void next_rounds(void) {
    for (int i = 0; i < 5; i++) {
        fake_now += MS;
        xsa_helper_poll();
    }
}

static size_t handle_bytes(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    return u.handle_bytes;
}

static int64_t pages_unmapped(void) {
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    return s.num_pages_unmapped;
}

/* Decay takes the burst's pages; with commits `polls` late, the job
 * releasing them runs (the driver has them back) and waits to commit. */
static void *release_job_runs_deferred(unsigned polls) {
    void *params = manual_decay_until_taken();
    xsa_helper_set_deferred_commit(polls);
    for (int i = 0; i < 20 && handle_bytes() > 4 * MiB; i++) {
        fake_now += MS;
        xsa_helper_poll();
    }
    assert_int_equal(handle_bytes(), 4 * MiB);
    assert_int_equal(pages_unmapped(), 0);
    return params;
}

static void test_deferred_commits_wait_their_polls(void **state) {
    (void)state;
    release_job_runs_deferred(3);
    /* It commits at the third poll after its round, not before. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pages_unmapped(), 0);
        fake_now += MS;
        xsa_helper_poll();
        INVARIANTS(0);
    }
    assert_int_equal(pages_unmapped(), 0);
    fake_now += MS;
    xsa_helper_poll();
    assert_int_equal(pages_unmapped(), 19);
}

/* ---- peers granted while the helper's jobs unmap pages ---- */

/* Driver calls of entry point e so far, all and the helper's rounds' part. */
static uint64_t calls_of(xsa_driver_entry e, bool background) {
    uint64_t c[XSA_DRV_COUNT];
    if (background)
        xsa_driver_read_background_calls(xsa_active_driver(), c, NULL);
    else
        xsa_driver_read_calls(xsa_active_driver(), c, NULL);
    return c[e];
}

/* Device 1 may read and write every page under [p, p+size). */
static void assert_peer_granted(const void *p, size_t size) {
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)(2 * MiB - 1); a < (uintptr_t)p + size; a += 2 * MiB)
        if (!(xsa_sim_page_access(a) & 2u)) fail_msg("page %#lx not granted to device 1", (unsigned long)a);
}

/* A job has unmapped pages the pool still records until it commits: a
 * peer granted in between skips them (the driver would refuse the run),
 * and reaches every page a block lives on. */
static void test_a_peer_granted_while_a_release_waits_to_commit(void **state) {
    (void)state;
    void *params = release_job_runs_deferred(1);
    OK(xsa_enable_peer_access(0, 1));
    INVARIANTS(0);
    assert_peer_granted(params, 2 * MiB);
    fake_now += MS;
    xsa_helper_poll();
    assert_int_equal(pages_unmapped(), 19);
    void *more;
    OK(xsa_malloc(&more, 8 * MiB, 0, NULL));
    assert_peer_granted(more, 8 * MiB);
    OK(xsa_free(more));
    OK(xsa_free(params));
    INVARIANTS(0);
}

/* The job's unmap refused: its pages are the cache's again at the commit,
 * granted to the peer added while it ran, and a block placed there is
 * the peer's to use. */
static void test_a_peer_granted_while_a_refused_release_waits_to_commit(void **state) {
    (void)state;
    void *params = manual_decay_until_taken();
    xsa_helper_set_deferred_commit(1);
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_UNKNOWN);
    uint64_t tries = calls_of(XSA_DRV_mem_unmap, true);
    for (int i = 0; i < 20 && calls_of(XSA_DRV_mem_unmap, true) == tries; i++) {
        fake_now += MS;
        xsa_helper_poll();
    }
    assert_int_equal(calls_of(XSA_DRV_mem_unmap, true), tries + 1);
    OK(xsa_enable_peer_access(0, 1));
    fake_now += MS;
    xsa_helper_poll(); /* the commit: the pages are cached memory again */
    assert_int_equal(reserved(), 42 * MiB);
    INVARIANTS(0);
    void *burst;
    FAILS(XSA_ERROR_DRIVER, xsa_malloc(&burst, 40 * MiB, 0, NULL), "cuMemUnmap"); /* the helper's failure, once */
    OK(xsa_malloc(&burst, 40 * MiB, 0, NULL)); /* a cache hit on those pages */
    assert_int_equal(reserved(), 42 * MiB);
    assert_peer_granted(burst, 40 * MiB);
    OK(xsa_free(burst));
    OK(xsa_free(params));
    xsa_sim_clear_faults();
    INVARIANTS(0);
}

/* Page recycling moved a page; the helper unmapped its old address, which
 * the pool takes back at its next growth: a peer granted before that
 * reaches every block (it once met the unmapped old address: INVALID_VALUE). */
static void test_a_peer_granted_while_an_old_address_waits_to_be_taken_back(void **state) {
    (void)state;
    xsa_helper_set_manual(true);
    xsa_helper_set_clock(fake_clock, NULL);
    OK(xsa_init("page_decay_ms:0,page_recycling:True"));
    void *a, *b, *c, *d;
    OK(xsa_malloc(&a, 6 * MiB, 0, NULL));
    OK(xsa_malloc(&b, 4 * MiB, 0, NULL));
    OK(xsa_malloc(&c, 2 * MiB, 0, NULL));
    OK(xsa_free(b));
    OK(xsa_malloc(&d, 1000, 0, NULL)); /* the small pool grows by one of b's pages, moved */
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.num_pages_recycled, 1);
    uint64_t unmaps = calls_of(XSA_DRV_mem_unmap, true);
    next_rounds(); /* the old address unmapped by the helper */
    assert_int_equal(calls_of(XSA_DRV_mem_unmap, true), unmaps + 1);
    OK(xsa_enable_peer_access(0, 1));
    INVARIANTS(0);
    assert_peer_granted(a, 6 * MiB);
    assert_peer_granted(c, 2 * MiB);
    assert_peer_granted(d, 1000);
    void *e;
    OK(xsa_malloc(&e, 8 * MiB, 0, NULL)); /* takes the old range back */
    assert_peer_granted(e, 8 * MiB);
    INVARIANTS(0);
    for (void **q = (void *[]){a, c, d, e}, **end = q + 4; q < end; q++) OK(xsa_free(*q));
}

static void test_shutdown_commits_a_deferred_job(void **state) {
    (void)state;
    release_job_runs_deferred(1000);
    /* Shutdown commits it before the pools go: they release the rest, and
     * nothing twice (the teardown finds the driver empty). */
    OK(xsa_shutdown());
    assert_int_equal(handle_bytes(), 0);
}

/* PyTorch's test_memory_stats' steps (allocate, free, empty_cache, then
 * reserved memory read back) with the helper's round falling before,
 * across and after empty_cache: the readying of the allocation's growth
 * never leaves pages in the cache after it. */
static void test_empty_cache_leaves_no_readied_pages(void **state) {
    (void)state;
    xsa_helper_set_manual(true);
    xsa_helper_set_clock(fake_clock, NULL);
    OK(xsa_init("helper_thread:True"));
    void *burst, *t;
    OK(xsa_malloc(&burst, 40 * MiB, 0, NULL)); /* the peak: later growths are below it */
    OK(xsa_free(burst));
    OK(xsa_empty_cache());
    for (unsigned polls_before = 0; polls_before < 3; polls_before++) {
        xsa_helper_set_deferred_commit(1); /* a round planned before empty_cache commits after it */
        OK(xsa_malloc(&t, 4 * MiB, 0, NULL));
        for (unsigned i = 0; i < polls_before; i++) {
            fake_now += MS;
            xsa_helper_poll();
        }
        OK(xsa_free(t));
        OK(xsa_empty_cache());
        xsa_helper_set_deferred_commit(0); /* commits what waited */
        next_rounds();
        assert_int_equal(reserved(), 0);
        assert_int_equal(handle_bytes(), 0);
        INVARIANTS(0);
    }
}

static void test_a_failure_reaches_the_next_malloc_once(void **state) {
    (void)state;
    manual_decay_until_taken();
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_UNKNOWN);
    next_rounds();
    assert_int_equal(reserved(), 42 * MiB); /* the pages are cached again */
    INVARIANTS(0);
    void *p = NULL;
    FAILS(XSA_ERROR_DRIVER, xsa_malloc(&p, 1 * MiB, 0, NULL), "helper thread's cuMemUnmap failed");
    assert_null(p);
    OK(xsa_malloc(&p, 1 * MiB, 0, NULL));
    OK(xsa_free(p));
    INVARIANTS(0);
}

static void test_a_failure_reaches_empty_cache_too(void **state) {
    (void)state;
    manual_decay_until_taken();
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_UNKNOWN);
    next_rounds();
    FAILS(XSA_ERROR_DRIVER, xsa_empty_cache(), "helper thread's cuMemUnmap failed");
    OK(xsa_empty_cache());
    assert_int_equal(reserved(), 2 * MiB);
    INVARIANTS(0);
}

/* ---- beside threads that allocate ---- */

#define THREADS 4

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    int ops = getenv("XSA_UNDER_SANITIZER") ? 1500 : 6000;
    void *live[8] = {0};
    for (int i = 0; i < ops; i++) {
        seed = seed * 1103515245u + 12345u;
        int slot = (seed >> 8) % 8;
        if (live[slot]) {
            if (xsa_free(live[slot]) != XSA_SUCCESS) return (void *)"free failed";
            live[slot] = NULL;
        } else {
            size_t size = (size_t)1 << (12 + (seed >> 12) % 13); /* 4 KiB - 16 MiB */
            if (xsa_malloc(&live[slot], size, 0, (void *)(uintptr_t)(seed % 2)) != XSA_SUCCESS)
                return (void *)"malloc failed";
        }
    }
    for (int s = 0; s < 8; s++)
        if (live[s] && xsa_free(live[s]) != XSA_SUCCESS) return (void *)"final free failed";
    return NULL;
}

static void test_beside_threads_that_allocate(void **state) {
    (void)state;
    OK(xsa_init("helper_thread:True,page_decay_ms:1,page_recycling_headroom:0"));
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < THREADS; i++) {
        void *result = NULL;
        pthread_join(t[i], &result);
        if (result) fail_msg("thread %d: %s: %s", i, (const char *)result, xsa_last_error());
    }
    INVARIANTS(0);
    assert_true(reserved_drops_to(0));
    INVARIANTS(0);
}

static void *malloc_and_free(void *arg) {
    (void)arg;
    void *ptr;
    if (xsa_malloc(&ptr, MiB, 0, NULL) != XSA_SUCCESS || xsa_free(ptr) != XSA_SUCCESS) return (void *)"failed";
    return NULL;
}

/* The helper's rounds count their driver calls apart, polled on the
 * caller's thread too, and the caller's own calls stay outside them. */
static void test_the_helpers_driver_calls_are_counted_apart(void **state) {
    (void)state;
    manual_decay_until_taken(); /* its growths were the caller's, its rounds polled */
    assert_int_equal(calls_of(XSA_DRV_mem_create, true), 0);
    assert_true(calls_of(XSA_DRV_mem_create, false) >= 21);
    assert_false(xsa_driver_in_background()); /* a poll gives the thread back as it was */
    uint64_t unmaps = calls_of(XSA_DRV_mem_unmap, false), bg_unmaps = calls_of(XSA_DRV_mem_unmap, true);
    next_rounds(); /* the taken pages' job: unmapped and released in a round */
    assert_int_equal(pages_unmapped(), 19);
    assert_true(calls_of(XSA_DRV_mem_unmap, false) > unmaps);
    assert_int_equal(calls_of(XSA_DRV_mem_unmap, true) - bg_unmaps, calls_of(XSA_DRV_mem_unmap, false) - unmaps);
    assert_int_equal(calls_of(XSA_DRV_mem_release, true), calls_of(XSA_DRV_mem_release, false));
    assert_false(xsa_driver_in_background());
    uint64_t creates = calls_of(XSA_DRV_mem_create, false);
    void *p;
    OK(xsa_malloc(&p, 20 * MiB, 0, NULL)); /* a growth on the caller's path */
    assert_true(calls_of(XSA_DRV_mem_create, false) > creates);
    assert_int_equal(calls_of(XSA_DRV_mem_create, true), 0);
    OK(xsa_free(p));
    INVARIANTS(0);
}

/* On the thread too: decay's releases are all the helper's. */
static void test_the_threads_driver_calls_are_counted_apart(void **state) {
    (void)state;
    OK(xsa_init("helper_thread:True,page_decay_ms:20"));
    void *params = params_and_burst();
    /* Reserved memory drops when decay picks the pages (they drain); the
     * releases come a round later, and their commit counts the pages. */
    assert_true(reserved_drops_to(4 * MiB));
    for (int i = 0; i < WAIT_S * 100 && pages_unmapped() < 19; i++) nap_ms(10);
    assert_int_equal(pages_unmapped(), 19);
    OK(xsa_free(params));
    assert_true(calls_of(XSA_DRV_mem_release, true) >= 19);
    assert_int_equal(calls_of(XSA_DRV_mem_release, true), calls_of(XSA_DRV_mem_release, false));
    INVARIANTS(0);
}

/* The device's lock held (as a helper round holds it) while another thread
 * allocates: that call's sleep is counted, with its time, until reset. */
static void test_a_wait_for_the_lock_shows_in_the_stats(void **state) {
    (void)state;
    OK(xsa_init("helper_thread:False"));
    void *ptr;
    OK(xsa_malloc(&ptr, MiB, 0, NULL)); /* the device's pool exists */
    OK(xsa_free(ptr));
    xsa_device_stats s;
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.num_device_lock_waits, 0);
    assert_int_equal(s.device_lock_wait_us, 0);
    xsa_device_lock *lock = &xsa_api_slot(0)->lock;
    assert_true(xsa_device_lock_acquire(lock));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, malloc_and_free, NULL), 0);
    for (int i = 0; i < WAIT_S * 1000 && atomic_load(&lock->sleepers) == 0; i++) nap_ms(1);
    assert_int_equal(atomic_load(&lock->sleepers), 1);
    nap_ms(20);
    xsa_device_lock_release(lock);
    void *result = NULL;
    pthread_join(t, &result);
    assert_null(result);
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.num_device_lock_waits, 1);
    assert_true(s.device_lock_wait_us >= 20000);
    OK(xsa_reset_accumulated_stats(0));
    OK(xsa_get_stats(0, &s));
    assert_int_equal(s.num_device_lock_waits, 0);
    assert_int_equal(s.device_lock_wait_us, 0);
    INVARIANTS(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_starts_lazily_once_and_only_when_on, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settings_before_the_first_allocation_wait_for_the_devices, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_decay_on_the_thread_follows_live_memory_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_defaults_give_a_burst_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_stops_it_mid_work_and_init_starts_over, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_stops_it_and_each_side_goes_on, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settings_turn_it_and_decay_on_and_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_commits_wait_their_polls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_commits_a_deferred_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_peer_granted_while_a_release_waits_to_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_peer_granted_while_a_refused_release_waits_to_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_peer_granted_while_an_old_address_waits_to_be_taken_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_empty_cache_leaves_no_readied_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failure_reaches_the_next_malloc_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failure_reaches_empty_cache_too, setup, teardown),
        cmocka_unit_test_setup_teardown(test_beside_threads_that_allocate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_wait_for_the_lock_shows_in_the_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_helpers_driver_calls_are_counted_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_threads_driver_calls_are_counted_apart, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
