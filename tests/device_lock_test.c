/*
 * device_lock_test: the API's per-device futex lock excludes, wakes its
 * sleepers and never loses an update (run under TSan too).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>

#include "api/device_lock.h"

#define THREADS 4
#define ROUNDS 20000

static xsa_device_lock lock;
static long counter;  /* guarded by lock */
static int inside;    /* guarded by lock: threads inside, must stay <= 1 */
static int max_inside;

static void *hammer(void *arg) {
    long id = (long)(intptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        xsa_device_lock_acquire(&lock);
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
    atomic_init(&lock.state, 0);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, hammer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(counter, (long)THREADS * ROUNDS);
    assert_int_equal(max_inside, 1);
    assert_int_equal(atomic_load(&lock.state), 0); /* free, no sleeper left marked */
}

/* A holder that sleeps: the waiter must block, then get the lock once it
 * is given back (the wake-up path). */
static void *wait_for_it(void *arg) {
    (void)arg;
    xsa_device_lock_acquire(&lock);
    counter = -1;
    xsa_device_lock_release(&lock);
    return NULL;
}

static void test_waiter_is_woken(void **state) {
    (void)state;
    atomic_init(&lock.state, 0);
    counter = 0;
    xsa_device_lock_acquire(&lock);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_it, NULL), 0);
    /* Give the waiter time to mark the lock awaited and sleep. */
    for (int i = 0; i < 1000 && atomic_load(&lock.state) != 2; i++) nanosleep(&(struct timespec){0, 100000}, NULL);
    assert_int_equal(atomic_load(&lock.state), 2);
    assert_int_equal(counter, 0);
    xsa_device_lock_release(&lock);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(counter, -1);
    assert_int_equal(atomic_load(&lock.state), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_excludes_and_counts),
        cmocka_unit_test(test_waiter_is_woken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
