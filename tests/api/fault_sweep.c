/*
 * fault_sweep: the full fault-injection sweep (by hand, not in CI):
 *     bazel run //tests:fault_sweep -- [--check-every K] [--jobs J] [--case SUBSTRING]
 * For every workload of fault_lib.h, a fault-free run counts the driver
 * calls per entry point; then every call N of every entry point F is made
 * to fail in a run of its own, with the invariant checker after every step
 * from the failed one on (K = 1 by default; the fault-free run is checked
 * at every step, and each run is that run until its fault). Each run is a forked child, so a crash or a leak in
 * one cannot hide or cause failures in the others, and J of them run at a
 * time (default: the CPUs). Prints the count of injections per workload and
 * entry point, how many failed requests and how many the allocator
 * absorbed, and every failure; exits 1 if any.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/api/fault_lib.h"

/* Child exit codes. */
enum { CHILD_ERRORED = 0, CHILD_FAILED = 1, CHILD_ABSORBED = 2, CHILD_NOT_FIRED = 3 };

typedef struct totals {
    size_t injections, errored, absorbed, failed;
} totals;

static int child(const fi_workload *w, xsa_driver_entry e, uint64_t n, size_t check_every) {
    char err[2048];
    fi_outcome o;
    if (fi_run(w, e, n, check_every, &o, err, sizeof err)) {
        fprintf(stderr, "FAIL: %s\n", err);
        return CHILD_FAILED;
    }
    if (!o.fired) {
        fprintf(stderr, "FAIL: %s: call %llu of %s never happened (the run is not deterministic)\n", w->c.name,
                (unsigned long long)n, xsa_driver_entry_name(e));
        return CHILD_NOT_FIRED;
    }
    return o.errored ? CHILD_ERRORED : CHILD_ABSORBED;
}

static void account(totals *t, int status) {
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == CHILD_ERRORED) t->errored++;
    else if (code == CHILD_ABSORBED) t->absorbed++;
    else t->failed++;
    if (!WIFEXITED(status)) fprintf(stderr, "FAIL: a child died of signal %d\n", WTERMSIG(status));
}

/* Runs injections 1..count of entry e, `jobs` children at a time. */
static void sweep_entry(const fi_workload *w, xsa_driver_entry e, uint64_t count, size_t check_every, int jobs,
                        totals *t) {
    int running = 0, status;
    for (uint64_t n = 1; n <= count; n++) {
        if (running == jobs) {
            wait(&status);
            account(t, status);
            running--;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) _exit(child(w, e, n, check_every));
        if (pid < 0) {
            perror("fork");
            exit(2);
        }
        running++;
        t->injections++;
    }
    while (running--) {
        wait(&status);
        account(t, status);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int sweep_case(const fi_case *c, size_t check_every, int jobs, totals *all) {
    char err[2048];
    fi_workload w;
    fi_outcome base;
    if (fi_load(&w, c, err, sizeof err) || fi_run(&w, 0, 0, 1, &base, err, sizeof err)) {
        fprintf(stderr, "FAIL: %s\n", err);
        return -1;
    }
    double t0 = now_s();
    totals t = {0};
    printf("%s: %zu steps\n", c->name, base.steps);
    for (int e = 0; e < XSA_DRV_COUNT; e++) {
        if (!base.calls[e]) continue;
        totals te = {0};
        sweep_entry(&w, (xsa_driver_entry)e, base.calls[e], check_every, jobs, &te);
        printf("  %-22s %6zu injections: %6zu failed the request, %6zu absorbed, %zu FAILED\n",
               xsa_driver_entry_name((xsa_driver_entry)e), te.injections, te.errored, te.absorbed, te.failed);
        fflush(stdout);
        t.injections += te.injections, t.errored += te.errored, t.absorbed += te.absorbed, t.failed += te.failed;
    }
    printf("  total %zu injections (%zu failed the request, %zu absorbed), %zu FAILED, %.1f s\n", t.injections,
           t.errored, t.absorbed, t.failed, now_s() - t0);
    fflush(stdout);
    all->injections += t.injections, all->errored += t.errored, all->absorbed += t.absorbed, all->failed += t.failed;
    fi_unload(&w);
    return 0;
}

int main(int argc, char **argv) {
    size_t check_every = 1;
    int jobs = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--check-every") == 0) check_every = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--jobs") == 0) jobs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--case") == 0) only = argv[i + 1];
        else {
            fprintf(stderr, "usage: fault_sweep [--check-every K] [--jobs J] [--case SUBSTRING]\n");
            return 2;
        }
    }
    if (jobs < 1) jobs = 1;
    double t0 = now_s();
    totals all = {0};
    int rc = 0;
    for (size_t i = 0; i < fi_n_cases; i++)
        if (!only || strstr(fi_cases[i].name, only)) rc |= sweep_case(&fi_cases[i], check_every, jobs, &all);
    printf("fault_sweep: %zu injections, %zu failed the request, %zu absorbed, %zu FAILED; invariants every %zu "
           "step(s); %.1f s with %d jobs\n",
           all.injections, all.errored, all.absorbed, all.failed, check_every, now_s() - t0, jobs);
    return rc || all.failed ? 1 : 0;
}
