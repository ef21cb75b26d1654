/*
 * decay_test: the helper thread's work on one pool (pool/jobs.h), with its
 * rounds run here at chosen times of its clock, so every case is
 * deterministic: decay purging (pages unused for page_decay_ms go, not
 * before, oldest first, never pages a request uses, never below what the
 * window needed; a step spread over more pages than it needs is repacked,
 * ever more seldom if that does not last; steps that swing in size keep
 * their memory once cuts were regretted twice, a single regret or pages
 * that age out later change nothing, a calm horizon halves), its fence
 * against work in flight (no unmap under a kernel, none during a
 * capture), unmapping recycling's old addresses off the allocation
 * path, and each job's driver failure, which leaves the pages as they
 * were and reaches the next malloc (readying pages: ready_test). Both
 * invariant checkers run after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pool/jobs.h"
#include "tests/pool/pool_fixture.h"

#define MS 1000000ull           /* ns */
#define DECAY_MS 100u           /* the cases' page_decay_ms: a tick every 12.5 ms */
#define TICK (DECAY_MS * MS / 8)

static void decay_on(xsa_pool_options *o) {
    o->helper_thread = true;
    o->page_decay_ms = DECAY_MS;
}

static void helper_only(xsa_pool_options *o) {
    o->helper_thread = true;
    o->page_decay_ms = 0;
}

static void helper_off(xsa_pool_options *o) {
    o->helper_thread = false;
    o->page_decay_ms = 0;
}

static void helper_recycling(xsa_pool_options *o) {
    o->helper_thread = true;
    o->page_recycling = true;
}

/* After a step at time t: the round of the helper's next tick if t has
 * reached it, then the stream's work completes. */
static void round_if_due(xsa_pool *p, uint64_t t, uint64_t *next_tick) {
    if (t < *next_tick) return;
    helper_round(p, t);
    *next_tick += TICK;
    xsa_sim_complete_all();
}

/* Rounds at every tick from `from` to `to` (both included). */
static void rounds(xsa_pool *p, uint64_t from, uint64_t to) {
    for (uint64_t t = from; t <= to; t += TICK) helper_round(p, t);
}

/* A 2 MiB block that stays, and 40 MiB used once and freed (an
 * evaluation's burst): 42 MiB reserved, 20 pages free. */
static void *params_and_burst(xsa_pool *p) {
    void *params = alloc(p, 2 * MiB, S0);
    release(p, alloc(p, 40 * MiB, S0));
    assert_int_equal(reserved(p), 42 * MiB);
    return params;
}

static void test_unused_pages_go_after_the_decay_time_not_before(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = params_and_burst(p);
    /* Through page_decay_ms after the burst, the window still holds its
     * peak and the pages are younger: nothing goes. */
    rounds(p, 0, DECAY_MS * MS);
    assert_int_equal(reserved(p), 42 * MiB);
    assert_int_equal(usage().handle_bytes, 42 * MiB);
    /* The next tick takes the old pages out of the cache, oldest first
     * from the high end, while reserved stays above 1.01 x 2 MiB: 19 of
     * the 20 pages. They are out of reserved at once, and released once
     * their fence has completed (the stream's work is queued until told). */
    helper_round(p, DECAY_MS * MS + TICK);
    assert_int_equal(reserved(p), 4 * MiB);
    assert_int_equal(usage().handle_bytes, 42 * MiB);
    helper_round(p, DECAY_MS * MS + 2 * TICK);
    assert_int_equal(usage().handle_bytes, 42 * MiB);
    xsa_sim_complete_all();
    helper_round(p, DECAY_MS * MS + 3 * TICK);
    assert_int_equal(usage().handle_bytes, 4 * MiB);
    xsa_device_stats s = stats(p);
    assert_int_equal(s.num_pages_unmapped, 19);
    assert_int_equal(s.reserved_bytes[XSA_STAT_ALL].peak, 42 * MiB); /* the user's peak stays */
    assert_int_equal(s.allocated_bytes[XSA_STAT_ALL].peak, 42 * MiB);
    /* Memory is there again for the next burst (new pages). */
    void *again = alloc(p, 40 * MiB, S0);
    release(p, again);
    release(p, params);
    teardown(p);
}

static void test_a_free_block_used_at_its_front_keeps_it_and_loses_the_rest(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = params_and_burst(p);
    /* Training goes on: every 5 ms a step allocates 8 MiB at the front of
     * the burst's free block and frees it; the helper ticks between. */
    uint64_t creates = driver_calls(XSA_DRV_mem_create);
    uint64_t next_tick = 0;
    for (uint64_t t = 0; t <= 3 * DECAY_MS * MS; t += 5 * MS) {
        release(p, alloc(p, 8 * MiB, S0));
        round_if_due(p, t, &next_tick);
    }
    /* The 30 MiB the steps never used went; what they use stayed, and
     * they never missed the cache. */
    assert_int_equal(reserved(p), 12 * MiB);
    assert_int_equal(usage().handle_bytes, 12 * MiB);
    assert_int_equal(driver_calls(XSA_DRV_mem_create), creates);
    release(p, params);
    teardown(p);
}

static void page_handles(xsa_pool_options *o) {
    decay_on(o);
    o->handle_size = 2 * MiB;
}

static void test_a_steps_blocks_freed_between_ticks_keep_only_the_pages_they_used(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, page_handles);
    /* params [0, 2) | a [2, 22) | pin [22, 24) | b [24, 52) | end [52, 54)
     * MiB, a and b free (a burst's). Every step puts 16 MiB in a and 6 in b
     * and frees both before the helper's next tick, which never sees them:
     * 28 MiB at once, 11 MiB used. The window lets 12 of the 13 pages the
     * steps never touch go (28 x 1.01 MiB stays), wherever they are in a
     * and b, though both free blocks were split by every step. */
    void *params = alloc(p, 2 * MiB, S0), *a = alloc(p, 20 * MiB, S0), *pin = alloc(p, 2 * MiB, S0);
    void *b = alloc(p, 28 * MiB, S0), *end = alloc(p, 2 * MiB, S0);
    release(p, a);
    release(p, b);
    uint64_t creates = driver_calls(XSA_DRV_mem_create), next_tick = 0;
    for (uint64_t t = 0; t <= 3 * DECAY_MS * MS; t += 5 * MS) {
        void *x = alloc(p, 16 * MiB, S0), *y = alloc(p, 6 * MiB, S0);
        assert_ptr_equal(x, a);
        assert_ptr_equal(y, b);
        release(p, x);
        release(p, y);
        round_if_due(p, t, &next_tick);
    }
    assert_int_equal(reserved(p), 30 * MiB);
    assert_int_equal(usage().handle_bytes, 30 * MiB);
    assert_int_equal(driver_calls(XSA_DRV_mem_create), creates);
    release(p, end);
    release(p, pin);
    release(p, params);
    teardown(p);
}

/* params 2 MiB on S0, `once` MiB on S1 used once, then 20 MiB steps on S0
 * for `windows` windows, the helper's rounds at its ticks: reserved after. */
static int64_t steps_after_a_side_burst(int64_t once, uint64_t windows) {
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = alloc(p, 2 * MiB, S0);
    release(p, alloc(p, (size_t)once * MiB, S1)); /* another stream's memory, never used again */
    uint64_t next_tick = 0;
    for (uint64_t t = 0; t <= windows * DECAY_MS * MS; t += 5 * MS) {
        release(p, alloc(p, 20 * MiB, S0)); /* a step of 20 MiB on S0 */
        round_if_due(p, t, &next_tick);
    }
    int64_t left = reserved(p);
    release(p, params);
    teardown(p);
    return left;
}

static void test_what_the_window_needed_stays_whatever_the_ages(void **state) {
    (void)state;
    /* S1's 40 MiB pages are old, but the window needed 22 MiB at once:
     * reserved stays at 1.01 x that or more (19 of S1's 20 pages went). */
    assert_int_equal(steps_after_a_side_burst(40, 3), 24 * MiB);
}

static void test_nothing_goes_while_the_window_needs_near_the_highest(void **state) {
    (void)state;
    /* S1's 20 MiB were there with params only: the highest allocated is
     * 22 MiB, what every window needs. Old as S1's pages are, they stay. */
    assert_int_equal(steps_after_a_side_burst(20, 3), 42 * MiB);
    /* 24 MiB once: the steps need 22 of 26, near it too (above 0.6). */
    assert_int_equal(steps_after_a_side_burst(24, 3), 46 * MiB);
    /* The steps reach the highest every tick: it stays however long. */
    assert_int_equal(steps_after_a_side_burst(20, 20), 42 * MiB);
}

static void test_memory_near_the_highest_goes_once_the_peak_is_long_past(void **state) {
    (void)state;
    /* 22 MiB of 26 never came back to 0.9 of the highest (23.4 MiB) after
     * the burst: for 16 windows S1's pages stay, then they go (to 1.01 x
     * the 22 MiB the window needs, as without the rule). */
    assert_int_equal(steps_after_a_side_burst(24, 15), 46 * MiB);
    assert_int_equal(steps_after_a_side_burst(24, 18), 24 * MiB);
}

static void test_pages_every_step_uses_stay_though_the_window_needed_less(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    /* params [0, 2) | x [2, 10) | pin [10, 12) | w [12, 16) | end [16, 18)
     * MiB, x and w free. Each step uses x, then w, one at a time: 14 MiB
     * at once at most, 18 reserved. The window would let one page go, but
     * every free page is used at every step: none goes, no step misses. */
    void *params = alloc(p, 2 * MiB, S0), *x = alloc(p, 8 * MiB, S0), *pin = alloc(p, 2 * MiB, S0);
    void *w = alloc(p, 4 * MiB, S0), *end = alloc(p, 2 * MiB, S0);
    release(p, x);
    release(p, w);
    uint64_t creates = driver_calls(XSA_DRV_mem_create), next_tick = 0;
    for (uint64_t t = 0; t <= 3 * DECAY_MS * MS; t += 5 * MS) {
        assert_ptr_equal(x = alloc(p, 8 * MiB, S0), (char *)params + 2 * MiB);
        release(p, x);
        assert_ptr_equal(w = alloc(p, 4 * MiB, S0), (char *)pin + 2 * MiB);
        release(p, w);
        round_if_due(p, t, &next_tick);
    }
    assert_int_equal(reserved(p), 18 * MiB);
    assert_int_equal(driver_calls(XSA_DRV_mem_create), creates);
    release(p, end);
    release(p, pin);
    release(p, params);
    teardown(p);
}

static void page_handles_recycling(xsa_pool_options *o) {
    page_handles(o);
    o->page_recycling = true;
}

/* params [0, 2) | a burst's free 100 MiB [2, 102) | pin [102, 104) MiB,
 * then steps: x 40 MiB at 2, s 2 MiB at 42, x freed, y 48 MiB at 44 (x's
 * hole is too small), s and y freed: 54 MiB at once at most (params and
 * pin in), pages [2, 92) touched. The helper's rounds come between steps
 * (`low`) or while y is live. Reserved memory after the run. */
static int64_t spread_steps(xsa_pool *p, uint64_t until, bool (*low)(uint64_t tick)) {
    void *params = alloc(p, 2 * MiB, S0), *a = alloc(p, 100 * MiB, S0), *pin = alloc(p, 2 * MiB, S0);
    release(p, a);
    uint64_t next_tick = 0, ticks = 0;
    int64_t last = reserved(p);
    for (uint64_t t = 0; t <= until; t += TICK / 2) { /* two steps a tick: every round is a tick */
        bool between = low(ticks), due = t >= next_tick;
        void *x = alloc(p, 40 * MiB, S0), *sm = alloc(p, 2 * MiB, S0);
        release(p, x);
        void *y = alloc(p, 48 * MiB, S0);
        release(p, sm);
        if (!between) round_if_due(p, t, &next_tick);
        release(p, y);
        if (between) round_if_due(p, t, &next_tick);
        if (!due) continue;
        ticks++;
        if (!between) assert_true(reserved(p) >= last - (int64_t)(10 * MiB)); /* no repack mid-step */
        last = reserved(p);
    }
    release(p, pin);
    release(p, params);
    return last;
}

static bool every_third(uint64_t tick) { return tick % 3 == 0; }
static bool never(uint64_t tick) { return (void)tick, false; }

static void test_a_step_spread_over_more_pages_than_it_needs_is_repacked(void **state) {
    (void)state;
    /* The 5 pages above the steps' age out; their own 40 MiB of excess
     * stays young. Once reserved memory has stayed more than 3% above the
     * window's peak for a tick, decay repacks, at a tick where live memory
     * is in the lower half of the span its ticks saw (between steps, one
     * tick in three here, not while y is live): every free page may go,
     * and the steps regrow into pages moved from their free blocks. */
    xsa_pool *p = make_pool(1 * GiB, true, page_handles_recycling);
    int64_t last = spread_steps(p, 3 * DECAY_MS * MS, every_third);
    print_message("at the end %lld MiB\n", (long long)(last / MiB));
    assert_true(last <= (int64_t)(58 * MiB));
    assert_true(stats(p).num_pages_recycled > 0);
    teardown(p);
}

static void test_no_repack_where_no_step_cycle_shows(void **state) {
    (void)state;
    /* Every tick comes while y is live: live memory spans nothing the
     * ticks see (as in LLM decoding, whose live memory drifts), so no
     * repack: only the 5 untouched pages go. */
    xsa_pool *p = make_pool(1 * GiB, true, page_handles_recycling);
    assert_int_equal(spread_steps(p, 4 * DECAY_MS * MS, never), 94 * MiB);
    teardown(p);
}

static void test_repacks_that_do_not_last_come_ever_more_seldom(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, page_handles);
    /* Every step puts 40 MiB on stream S1, frees it, then 48 on S0 (each
     * stream has its own segment): 50 MiB at once at most with 2 MiB of
     * params, 90 reserved, every page touched. Without recycling the
     * steps regrow where they were after each repack, so the excess comes
     * back: each repack doubles the wait for the next (one tick, two,
     * four...). A burst of 200 MiB first, so the steps' need is far
     * below the highest allocated; its pages go at once (not counted). */
    void *params = alloc(p, 2 * MiB, S0);
    release(p, alloc(p, 200 * MiB, S0));
    uint64_t next_tick = 0;
    int64_t before = 0;
    int repacks = 0;
    for (uint64_t t = 0; t <= 8 * DECAY_MS * MS; t += 5 * MS) {
        release(p, alloc(p, 40 * MiB, S1));
        release(p, alloc(p, 48 * MiB, S0));
        round_if_due(p, t, &next_tick);
        int64_t drop = before - reserved(p);
        if (drop >= (int64_t)(32 * MiB) && drop < (int64_t)(100 * MiB)) repacks++;
        before = reserved(p);
    }
    /* 64 ticks: repacks after 1, 2, 4, 8, 16 and 32 ticks over the bound,
     * each followed by a regrowth. */
    print_message("repacks in 8 windows: %d\n", repacks);
    assert_true(repacks >= 3 && repacks <= 7);
    release(p, params);
    teardown(p);
}

/* Steps of `mib` MiB on S0 every 5 ms for `ms` from *t, with the
 * helper's rounds at its ticks. */
static void steps_of(xsa_pool *p, size_t mib, uint64_t ms, uint64_t *t, uint64_t *next_tick) {
    for (uint64_t end = *t + ms * MS; *t < end; *t += 5 * MS) {
        release(p, alloc(p, mib * MiB, S0));
        round_if_due(p, *t, next_tick);
    }
}

/* Steps of 40 MiB for half a window, then of 10 MiB for 1.75 windows:
 * the need falls for longer than one window and comes back within the
 * next, `cycles` times; the cuts' mem_create calls, cycle by cycle. */
static void swinging_steps(xsa_pool *p, int cycles, uint64_t *t, uint64_t *next_tick, uint64_t *creates) {
    for (int c = 0; c < cycles; c++) {
        uint64_t before = driver_calls(XSA_DRV_mem_create);
        steps_of(p, 40, DECAY_MS / 2, t, next_tick);
        if (creates) creates[c] = driver_calls(XSA_DRV_mem_create) - before;
        steps_of(p, 10, DECAY_MS * 7 / 4, t, next_tick);
    }
}

/* A burst of 40 MiB, then steps of 10 MiB for `windows` windows: how long
 * after the burst reserved memory came within the steps' need (1.01 x
 * 12 MiB, whole pages), in ms; -1 if it never did. */
static int64_t burst_settles(xsa_pool *p, uint64_t windows, uint64_t *t, uint64_t *next_tick) {
    uint64_t burst = *t, settled = 0;
    release(p, alloc(p, 40 * MiB, S0));
    for (uint64_t end = *t + windows * DECAY_MS * MS; *t < end; *t += 5 * MS) {
        release(p, alloc(p, 10 * MiB, S0));
        round_if_due(p, *t, next_tick);
        if (!settled && reserved(p) <= (int64_t)(14 * MiB)) settled = *t;
    }
    return settled ? (int64_t)((settled - burst) / MS) : -1;
}

static void test_steps_that_swing_in_size_keep_their_memory_after_two_regrets(void **state) {
    (void)state;
    /* Each fall of the need is cut a window later (30 MiB) and created
     * again by the next large step: a regret. At the second the horizon
     * grows to four windows, longer than the small steps last: from then
     * on nothing goes and nothing is created again. */
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = alloc(p, 2 * MiB, S0);
    uint64_t t = 0, next_tick = 0, creates[10];
    swinging_steps(p, 10, &t, &next_tick, creates);
    print_message("mem_create by cycle: %llu %llu %llu %llu ... %llu\n", (unsigned long long)creates[0],
                  (unsigned long long)creates[1], (unsigned long long)creates[2], (unsigned long long)creates[3],
                  (unsigned long long)creates[9]);
    assert_true(creates[1] > 0 && creates[2] > 0); /* the two regrets */
    for (int c = 3; c < 10; c++) assert_int_equal(creates[c], 0);
    assert_true(reserved(p) >= (int64_t)(42 * MiB));
    release(p, params);
    teardown(p);
}

static void test_one_regret_leaves_the_burst_going_within_a_window(void **state) {
    (void)state;
    /* One regret (as a program's first step, slower than a window, makes
     * one), then bursts three windows apart, later than the horizon: each
     * burst's memory goes within page_decay_ms and four ticks, every
     * time (with a longer horizon it would take longer). */
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = alloc(p, 2 * MiB, S0);
    uint64_t t = 0, next_tick = 0, creates[2];
    swinging_steps(p, 2, &t, &next_tick, creates);
    assert_true(creates[1] > 0); /* the regret */
    steps_of(p, 10, 2 * DECAY_MS, &t, &next_tick);
    for (int burst = 0; burst < 6; burst++) {
        int64_t settled = burst_settles(p, 3, &t, &next_tick);
        print_message("burst %d: within the steps' need after %lld ms\n", burst, (long long)settled);
        assert_true(settled >= 0 && settled <= (int64_t)(DECAY_MS + 4 * TICK / MS));
    }
    release(p, params);
    teardown(p);
}

static void test_a_horizon_without_regrets_halves(void **state) {
    (void)state;
    /* Four windows after the swinging steps: a burst ten windows later
     * goes only after them; after 64 windows without a regret the horizon
     * is two windows, after 32 more one, and a burst's memory goes within
     * it. */
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = alloc(p, 2 * MiB, S0);
    uint64_t t = 0, next_tick = 0;
    int64_t settled[11], window = DECAY_MS, ticks = 4 * TICK / MS;
    swinging_steps(p, 4, &t, &next_tick, NULL);
    for (int burst = 0; burst < 11; burst++) settled[burst] = burst_settles(p, 10, &t, &next_tick);
    print_message("bursts ten windows apart settle after %lld, %lld, ... %lld, %lld ms\n", (long long)settled[0],
                  (long long)settled[1], (long long)settled[9], (long long)settled[10]);
    assert_true(settled[0] > 3 * window && settled[0] <= 4 * window + ticks);
    for (int burst = 1; burst < 11; burst++) assert_true(settled[burst] >= 0 && settled[burst] <= settled[burst - 1]);
    assert_true(settled[10] <= window + ticks);
    release(p, params);
    teardown(p);
}

static void test_pages_that_age_out_later_are_no_regret(void **state) {
    (void)state;
    /* After each burst, steps of 10 MiB on S0 with 8 MiB on S1 between
     * them for 2.5 windows (a side stream that stops; the need stays 12
     * MiB): S1's pages go a window after it stopped, half a window before
     * the next burst. That cut follows no fall of the need: the burst's
     * regrowth is no regret, and every burst goes as fast. */
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = alloc(p, 2 * MiB, S0);
    uint64_t t = 0, next_tick = 0;
    for (int burst = 0; burst < 6; burst++) {
        uint64_t at = t, settled = 0;
        release(p, alloc(p, 40 * MiB, S0));
        for (uint64_t end = t + 4 * DECAY_MS * MS; t < end; t += 5 * MS) {
            if (t - at < 5 * DECAY_MS * MS / 2) release(p, alloc(p, 8 * MiB, S1));
            release(p, alloc(p, 10 * MiB, S0));
            round_if_due(p, t, &next_tick);
            if (!settled && reserved(p) <= (int64_t)(22 * MiB)) settled = t;
        }
        print_message("burst %d: within the steps' need after %lld ms\n", burst,
                      settled ? (long long)((settled - at) / MS) : -1ll);
        assert_true(settled && settled - at <= (DECAY_MS + 4 * TICK / MS) * MS);
        assert_true(reserved(p) <= (int64_t)(14 * MiB)); /* S1's pages went too (but one) */
    }
    release(p, params);
    teardown(p);
}

/* A kernel on [ptr, ptr+size) on stream s, queued now. */
static void kernel(void *s, void *ptr, size_t size) {
    assert_int_equal(xsa_sim_launch(s, (xsa_devptr)(uintptr_t)ptr, size), XSA_CU_SUCCESS);
}

static void test_no_unmap_under_work_in_flight(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    xsa_sim_set_gpu_lag(1000); /* kernels complete 1000 simulated ticks after they are queued */
    void *params = alloc(p, 2 * MiB, S0);
    void *other = alloc(p, 2 * MiB, S1); /* S1 allocates: its work is fenced too */
    void *burst = alloc(p, 40 * MiB, S0);
    /* S1 reads the burst without record_stream, legal as long as the
     * memory is reused on S0 only; its kernel outlives the free. */
    kernel(S1, burst, 40 * MiB);
    release(p, burst);
    rounds(p, 0, DECAY_MS * MS + 4 * TICK);
    /* The pages were taken out of the cache, but S1's kernel still runs:
     * their fence has not completed and nothing is unmapped. */
    assert_int_equal(reserved(p), 6 * MiB);
    assert_int_equal(usage().handle_bytes, 44 * MiB);
    xsa_sim_tick(1000);
    helper_round(p, DECAY_MS * MS + 5 * TICK);
    helper_round(p, DECAY_MS * MS + 6 * TICK);
    assert_int_equal(usage().handle_bytes, 6 * MiB);
    xsa_sim_violations v;
    xsa_sim_get_violations(&v);
    if (v.unmapped_in_use || v.races || v.bad_launches) fail_msg("the simulated GPU saw: %s", v.first);
    release(p, other);
    release(p, params);
    xsa_sim_set_gpu_lag(-1);
    teardown(p);
}

static void test_nothing_goes_during_a_capture(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = params_and_burst(p);
    xsa_mempool_id graph = {1, 0};
    pool_begin(p, graph, S1, true);
    uint64_t queries = driver_calls(XSA_DRV_event_query), records = driver_calls(XSA_DRV_event_record);
    rounds(p, 0, 3 * DECAY_MS * MS);
    xsa_sim_complete_all();
    helper_round(p, 3 * DECAY_MS * MS + TICK);
    /* No event was recorded or queried, nothing was taken or released. */
    assert_int_equal(driver_calls(XSA_DRV_event_query), queries);
    assert_int_equal(driver_calls(XSA_DRV_event_record), records);
    assert_int_equal(reserved(p), 42 * MiB);
    pool_end(p, graph);
    pool_drop(p, graph);
    helper_round(p, 3 * DECAY_MS * MS + 2 * TICK);
    xsa_sim_complete_all();
    helper_round(p, 3 * DECAY_MS * MS + 3 * TICK);
    assert_int_equal(usage().handle_bytes, 4 * MiB);
    release(p, params);
    teardown(p);
}

static void test_empty_cache_releases_what_waits_for_its_fence(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = params_and_burst(p);
    rounds(p, 0, DECAY_MS * MS + TICK); /* taken, fence pending */
    assert_int_equal(usage().handle_bytes, 42 * MiB);
    assert_int_equal(xsa_pool_empty_cache(p, err, sizeof err), XSA_POOL_OK);
    check(p);
    assert_int_equal(usage().handle_bytes, 2 * MiB);
    release(p, params);
    teardown(p);
}

static void test_decay_off_or_helper_off_does_nothing(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, helper_only);
    void *params = params_and_burst(p);
    assert_true(xsa_pool_jobs_due(p) == UINT64_MAX || xsa_pool_jobs_due(p) == 0);
    rounds(p, 0, 3 * DECAY_MS * MS);
    assert_int_equal(reserved(p), 42 * MiB);
    release(p, params);
    teardown(p);
    p = make_pool(1 * GiB, true, helper_off);
    params = params_and_burst(p);
    assert_true(xsa_pool_jobs_due(p) == UINT64_MAX);
    release(p, params);
    teardown(p);
}

static void test_stats_peaks_stay_the_users(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = params_and_burst(p);
    helper_round(p, 0); /* the tick reads the interval's peak and starts it again */
    assert_int_equal(stats(p).allocated_bytes[XSA_STAT_ALL].peak, 42 * MiB);
    xsa_pool_reset_peak_stats(p);
    assert_int_equal(stats(p).allocated_bytes[XSA_STAT_ALL].peak, 2 * MiB);
    helper_round(p, TICK);
    assert_int_equal(stats(p).allocated_bytes[XSA_STAT_ALL].peak, 2 * MiB);
    release(p, params);
    teardown(p);
}

static void test_old_addresses_are_unmapped_off_the_allocation_path(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, helper_recycling);
    /* Large segment of S0: a [0, 6), b [6, 10), c [10, 12) MiB; b freed,
     * then the small pool grows by one of b's pages (moved, the old address
     * draining). */
    void *a = alloc(p, 6 * MiB, S0), *b = alloc(p, 4 * MiB, S0), *c = alloc(p, 2 * MiB, S0);
    release(p, b);
    uint64_t unmaps = driver_calls(XSA_DRV_mem_unmap);
    void *d = alloc(p, 1000, S0);
    assert_int_equal(stats(p).num_pages_recycled, 1);
    assert_int_equal(driver_calls(XSA_DRV_mem_unmap), unmaps);
    /* The helper unmaps the old address once its fence completed... */
    helper_round(p, 0);
    assert_int_equal(driver_calls(XSA_DRV_mem_unmap), unmaps);
    xsa_sim_complete_all();
    helper_round(p, TICK);
    assert_int_equal(driver_calls(XSA_DRV_mem_unmap), unmaps + 1);
    assert_int_equal(usage().mapped_bytes, 12 * MiB);
    /* ... and the next growth takes the range back without a driver call
     * of its own. */
    void *e = alloc(p, 8 * MiB, S1);
    assert_int_equal(driver_calls(XSA_DRV_mem_unmap), unmaps + 1);
    release(p, e);
    release(p, d);
    release(p, a);
    release(p, c);
    teardown(p);
}

/* ---- failures ---- */

static void test_a_failed_unmap_keeps_the_pages_and_reaches_the_next_malloc(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = params_and_burst(p);
    rounds(p, 0, DECAY_MS * MS + TICK);
    xsa_sim_complete_all();
    xsa_sim_fail_call(XSA_DRV_mem_unmap, 1, XSA_CU_ERROR_UNKNOWN);
    helper_round(p, DECAY_MS * MS + 2 * TICK);
    /* The pages are cached memory again, reserved and mapped. */
    assert_int_equal(reserved(p), 42 * MiB);
    assert_int_equal(usage().handle_bytes, 42 * MiB);
    expect_helper_notice(p, "cuMemUnmap");
    /* Later rounds release them as usual (the stream's work completes
     * between them): first the burst's page that stayed, free and unused
     * the longest, then the rest once it has aged again. */
    for (uint64_t t = DECAY_MS * MS + 3 * TICK; t <= 3 * DECAY_MS * MS; t += TICK) {
        helper_round(p, t);
        xsa_sim_complete_all();
    }
    assert_true(usage().handle_bytes <= 6 * MiB);
    release(p, params);
    teardown(p);
}

static void test_a_failed_release_keeps_the_handle_for_later(void **state) {
    (void)state;
    xsa_pool *p = make_pool(1 * GiB, true, decay_on);
    void *params = params_and_burst(p);
    rounds(p, 0, DECAY_MS * MS + TICK);
    xsa_sim_complete_all();
    xsa_sim_fail_call(XSA_DRV_mem_release, 1, XSA_CU_ERROR_UNKNOWN);
    helper_round(p, DECAY_MS * MS + 2 * TICK);
    /* Unmapped; one handle was kept, released by the segment later (the
     * teardown finds the driver empty). */
    assert_int_equal(usage().handle_bytes, 6 * MiB);
    expect_helper_notice(p, "cuMemRelease");
    release(p, params);
    teardown(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unused_pages_go_after_the_decay_time_not_before),
        cmocka_unit_test(test_a_free_block_used_at_its_front_keeps_it_and_loses_the_rest),
        cmocka_unit_test(test_a_steps_blocks_freed_between_ticks_keep_only_the_pages_they_used),
        cmocka_unit_test(test_what_the_window_needed_stays_whatever_the_ages),
        cmocka_unit_test(test_nothing_goes_while_the_window_needs_near_the_highest),
        cmocka_unit_test(test_memory_near_the_highest_goes_once_the_peak_is_long_past),
        cmocka_unit_test(test_pages_every_step_uses_stay_though_the_window_needed_less),
        cmocka_unit_test(test_a_step_spread_over_more_pages_than_it_needs_is_repacked),
        cmocka_unit_test(test_no_repack_where_no_step_cycle_shows),
        cmocka_unit_test(test_repacks_that_do_not_last_come_ever_more_seldom),
        cmocka_unit_test(test_steps_that_swing_in_size_keep_their_memory_after_two_regrets),
        cmocka_unit_test(test_one_regret_leaves_the_burst_going_within_a_window),
        cmocka_unit_test(test_a_horizon_without_regrets_halves),
        cmocka_unit_test(test_pages_that_age_out_later_are_no_regret),
        cmocka_unit_test(test_no_unmap_under_work_in_flight),
        cmocka_unit_test(test_nothing_goes_during_a_capture),
        cmocka_unit_test(test_empty_cache_releases_what_waits_for_its_fence),
        cmocka_unit_test(test_decay_off_or_helper_off_does_nothing),
        cmocka_unit_test(test_stats_peaks_stay_the_users),
        cmocka_unit_test(test_old_addresses_are_unmapped_off_the_allocation_path),
        cmocka_unit_test(test_a_failed_unmap_keeps_the_pages_and_reaches_the_next_malloc),
        cmocka_unit_test(test_a_failed_release_keeps_the_handle_for_later),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
