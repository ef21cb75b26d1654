/*
 * device_lock_test: the API's per-device lock excludes, wakes its sleepers
 * on release, gets a sleeper through even when a release misses it (the
 * race its naps bound), and never loses an update (run under TSan too).
 *
 * The wake-up test's waiter naps for 10 minutes, past the test's timeout,
 * so a wake-up that did not happen fails the test instead of slowing it.
 * A holder inside a callback that asks for its own lock again is told so
 * at once, while another thread still waits (the re-entry check). An
 * acquire that slept counts one wait and at least the time the holder kept
 * the lock after it fell asleep; acquires that did not wait count nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>

#include "api/device_lock.h"

#define THREADS 4
#define ROUNDS 20000
#define LONG_NAP_NS 600000000000L /* 10 min: past any test timeout */

static xsa_device_lock lock;
static long counter;  /* guarded by lock */
static int inside;    /* guarded by lock: threads inside, must stay <= 1 */
static int max_inside;

static void reset_lock(void) {
    atomic_init(&lock.state, 0);
    atomic_init(&lock.sleepers, 0);
    atomic_init(&lock.callback_thread, 0);
    atomic_init(&lock.waits, 0);
    atomic_init(&lock.wait_ns, 0);
}

/* Takes the lock, which no re-entry can refuse here. */
static void take(void) {
    if (!xsa_device_lock_acquire(&lock)) abort();
}

static void *hammer(void *arg) {
    long id = (long)(intptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        take();
        if (++inside > max_inside) max_inside = inside;
        counter++;
        /* Now and then hold it long enough for the others to sleep on it. */
        if ((i + id) % 2000 == 0) nanosleep(&(struct timespec){0, 200000}, NULL);
        inside--;
        xsa_device_lock_release(&lock);
    }
    return NULL;
}

static void test_excludes_and_counts(void **state) {
    (void)state;
    reset_lock();
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, hammer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(counter, (long)THREADS * ROUNDS);
    assert_int_equal(max_inside, 1);
    assert_int_equal(atomic_load(&lock.state), 0);    /* free */
    assert_int_equal(atomic_load(&lock.sleepers), 0); /* nobody left counted */
}

static long nap_ns;

/* Takes the lock (napping nap_ns) and marks that it did. */
static void *wait_for_it(void *arg) {
    (void)arg;
    if (!xsa_device_lock_acquire_napping(&lock, nap_ns)) abort(); /* not this thread's callback */
    counter = -1;
    xsa_device_lock_release(&lock);
    return NULL;
}

/* Holds the lock until a waiter is asleep on it; returns the waiter. */
static pthread_t hold_until_a_sleeper(void) {
    counter = 0;
    take();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_it, NULL), 0);
    for (int i = 0; i < 10000 && atomic_load(&lock.sleepers) == 0; i++) nanosleep(&(struct timespec){0, 100000}, NULL);
    assert_int_equal(atomic_load(&lock.sleepers), 1);
    assert_int_equal(counter, 0);
    return t;
}

/* The release wakes the sleeper (only a wake gets it through before the
 * test's timeout). */
static void test_release_wakes_the_sleeper(void **state) {
    (void)state;
    reset_lock();
    nap_ns = LONG_NAP_NS;
    pthread_t t = hold_until_a_sleeper();
    xsa_device_lock_release(&lock);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(counter, -1);
    assert_int_equal(atomic_load(&lock.state), 0);
    assert_int_equal(atomic_load(&lock.sleepers), 0);
}

/* A release that misses the sleeper (the store-buffer race, made certain
 * here by freeing the lock without the wake): the sleeper's nap ends and
 * it takes the lock. */
static void test_missed_wake_ends_with_the_nap(void **state) {
    (void)state;
    reset_lock();
    nap_ns = 1000000L;
    pthread_t t = hold_until_a_sleeper();
    atomic_store(&lock.state, 0); /* released, nobody woken */
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(counter, -1);
    assert_int_equal(atomic_load(&lock.sleepers), 0);
}

/* The holder in a callback asking again gets false at once (and still
 * holds the lock); another thread asking meanwhile waits, and gets the
 * lock once it is released; out of the callback, the holder's thread
 * would wait like anyone (checked through the flag: no self-deadlock is
 * run). */
static void test_reentry_from_a_callback_is_refused_not_waited(void **state) {
    (void)state;
    reset_lock();
    nap_ns = LONG_NAP_NS;
    pthread_t t = hold_until_a_sleeper(); /* a waiter from another thread */
    xsa_device_lock_enter_callback(&lock);
    assert_true(xsa_device_lock_reentered(&lock));
    assert_false(xsa_device_lock_acquire(&lock)); /* at once: no spin, no sleep */
    assert_int_equal(atomic_load(&lock.state), 1); /* still held, by this thread */
    assert_int_equal(counter, 0);                  /* and the other thread still waits */
    xsa_device_lock_leave_callback(&lock);
    assert_false(xsa_device_lock_reentered(&lock));
    xsa_device_lock_release(&lock);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(counter, -1);
    assert_int_equal(atomic_load(&lock.state), 0);
}

/* A sleeper's wait is counted with the time it slept; uncontended
 * acquires, and the holder's own, count nothing. */
static void test_a_sleep_counts_one_wait_and_its_time(void **state) {
    (void)state;
    reset_lock();
    for (int i = 0; i < 100; i++) {
        take();
        xsa_device_lock_release(&lock);
    }
    assert_int_equal(atomic_load(&lock.waits), 0);
    assert_int_equal(atomic_load(&lock.wait_ns), 0);
    nap_ns = LONG_NAP_NS;
    pthread_t t = hold_until_a_sleeper();
    struct timespec held = {0, 20000000L}; /* 20 ms with the waiter asleep */
    nanosleep(&held, NULL);
    xsa_device_lock_release(&lock);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(atomic_load(&lock.waits), 1);
    assert_true(atomic_load(&lock.wait_ns) >= 20000000u);
    assert_true(atomic_load(&lock.wait_ns) < 60000000000u); /* not a clock gone wrong */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_excludes_and_counts),
        cmocka_unit_test(test_reentry_from_a_callback_is_refused_not_waited),
        cmocka_unit_test(test_release_wakes_the_sleeper),
        cmocka_unit_test(test_missed_wake_ends_with_the_nap),
        cmocka_unit_test(test_a_sleep_counts_one_wait_and_its_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
