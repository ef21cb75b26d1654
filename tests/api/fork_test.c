/*
 * fork_test: what a fork does (api/fork.c, api/devices.c). A child forked
 * before the driver started starts its own and allocates. A child forked
 * after the start, while another thread is inside a memory hook holding
 * device 0's lock, neither hangs nor touches the parent's pools: every
 * call that needs a device fails at once saying "Cannot re-initialize
 * CUDA in forked subprocess", as PyTorch's guard does, xsa_free of the
 * parent's memory does nothing, the settings can still be read, and the
 * parent carries on. Forks racing a thread that keeps taking the start-up
 * lock never leave a child holding it (without the atfork handlers some
 * of the 200 children deadlock, and their alarm fails the test). Each
 * child reports through its exit status: 0 when all its checks held, else
 * the number of the check that failed; an alarm bounds it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/api/api_fixture.h"
#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)
#define CHECK(n, cond) \
    do {               \
        if (!(cond)) _exit(n); \
    } while (0)

/* Waits for the child; its exit status (a signal fails). */
static int child_status(pid_t pid) {
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status)) fail_msg("child ended by signal %d (a hang ended by its alarm?)", WTERMSIG(status));
    return WEXITSTATUS(status);
}

static void test_child_forked_before_the_start_starts_its_own(void **state) {
    (void)state;
    OK(xsa_configure("max_split_size_mb:64"));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(5);
        void *p = NULL;
        CHECK(1, xsa_malloc(&p, 3 * MiB, 0, NULL) == XSA_SUCCESS && p);
        xsa_device_stats s;
        CHECK(2, xsa_get_stats(0, &s) == XSA_SUCCESS && s.max_split_size == 64 * MiB);
        CHECK(3, xsa_free(p) == XSA_SUCCESS);
        CHECK(4, xsa_check_invariants(0) == XSA_SUCCESS);
        _exit(0);
    }
    assert_int_equal(child_status(pid), 0);
    void *p = NULL; /* the parent starts its own as well */
    OK(xsa_malloc(&p, MiB, 0, NULL));
    OK(xsa_free(p));
}

static sem_t in_hook, leave_hook;

static void blocking_hook(const xsa_hook_info *info, void *user) {
    (void)info, (void)user;
    sem_post(&in_hook);
    while (sem_wait(&leave_hook) != 0) {
    }
}

static void *malloc_in_hook(void *arg) {
    void **p = arg;
    OK(xsa_malloc(p, 2 * MiB, 0, NULL));
    return NULL;
}

static void test_child_forked_after_the_start_is_refused_and_never_hangs(void **state) {
    (void)state;
    OK(xsa_init(NULL));
    void *mine = NULL;
    OK(xsa_malloc(&mine, 4 * MiB, 0, NULL));
    sem_init(&in_hook, 0, 0);
    sem_init(&leave_hook, 0, 0);
    xsa_memory_hooks hooks = {.malloc_post = blocking_hook};
    int id;
    OK(xsa_register_hooks(&hooks, NULL, &id));
    void *theirs = NULL;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, malloc_in_hook, &theirs), 0);
    while (sem_wait(&in_hook) != 0) {
    } /* the other thread holds device 0's lock from here */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(5);
        void *p = NULL;
        CHECK(1, xsa_malloc(&p, MiB, 0, NULL) == XSA_ERROR_NO_DRIVER);
        CHECK(2, strstr(xsa_last_error(), "Cannot re-initialize CUDA in forked subprocess") != NULL);
        CHECK(3, strstr(xsa_last_error(), "'spawn' start method") != NULL);
        xsa_device_stats s;
        CHECK(4, xsa_get_stats(0, &s) == XSA_ERROR_NO_DRIVER);
        CHECK(5, xsa_free(mine) == XSA_SUCCESS); /* the parent's memory: nothing done */
        xsa_settings set;
        CHECK(6, xsa_get_settings(&set) == XSA_SUCCESS);
        int n = 0;
        CHECK(7, xsa_device_count(&n) == XSA_ERROR_NO_DRIVER);
        CHECK(8, xsa_shutdown() == XSA_SUCCESS);                 /* forgets, touches nothing */
        CHECK(9, xsa_malloc(&p, MiB, 0, NULL) == XSA_ERROR_NO_DRIVER); /* and never starts again */
        /* ... unless it picks the simulator, which holds no CUDA state: afresh, as another process. */
        CHECK(10, xsa_use_driver("sim") == XSA_SUCCESS);
        /* Without the helper: a thread started after a multi-threaded fork
         * (the hook's thread runs in the parent) is what TSan refuses. */
        CHECK(11, xsa_init("helper_thread:False") == XSA_SUCCESS);
        CHECK(12, xsa_malloc(&p, MiB, 0, NULL) == XSA_SUCCESS && xsa_free(p) == XSA_SUCCESS);
        _exit(0);
    }
    int status = child_status(pid);
    sem_post(&leave_hook);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(status, 0);
    OK(xsa_unregister_hooks(id));
    OK(xsa_free(theirs)); /* the parent carries on */
    OK(xsa_free(mine));
    INVARIANTS(0);
    sem_destroy(&in_hook);
    sem_destroy(&leave_hook);
}

static atomic_int stop;

static void *read_settings(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        xsa_settings s;
        OK(xsa_get_settings(&s)); /* takes the start-up lock, again and again */
    }
    return NULL;
}

static void test_forks_racing_the_start_up_lock(void **state) {
    (void)state;
    OK(xsa_configure(NULL));
    atomic_store(&stop, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_settings, NULL), 0);
    for (int i = 0; i < 200; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(5);
            xsa_settings s;
            CHECK(1, xsa_get_settings(&s) == XSA_SUCCESS);
            _exit(0);
        }
        assert_int_equal(child_status(pid), 0);
    }
    atomic_store(&stop, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_child_forked_before_the_start_starts_its_own, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_child_forked_after_the_start_is_refused_and_never_hangs,
                                        xsa_fixture_two_devices, xsa_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_forks_racing_the_start_up_lock, xsa_fixture_two_devices,
                                        xsa_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
