/*
 * sim_driver_fixture: what the simulated driver's tests share (see
 * sim_driver_fixture.h): a fresh configuration per case, reservations,
 * handles and events made with the checks after each step, and children
 * fork()ed to see a fault happen.
 */
#include "tests/sim/sim_driver_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

xsa_driver *D;

void check_sim(const char *file, int line) {
    char err[256] = "";
    if (!xsa_sim_check(err, sizeof err)) fail_msg("%s:%d: xsa_sim_check: %s", file, line, err);
}

void configure(int devices, size_t capacity) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.devices = devices;
    c.capacity = capacity;
    OK(xsa_sim_configure(&c));
}

int setup(void **state) {
    (void)state;
    D = xsa_driver_sim();
    configure(1, 64 * MiB);
    return 0;
}

void assert_usage_zero(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    assert_int_equal(0, u.handles);
    assert_int_equal(0, u.handle_bytes);
    assert_int_equal(0, u.mapped_bytes);
    assert_int_equal(0, u.reservations);
    assert_int_equal(0, u.reserved_bytes);
    assert_int_equal(0, u.mem_allocs);
    assert_int_equal(0, u.mem_alloc_bytes);
    assert_int_equal(0, u.events);
    assert_int_equal(0, u.pending_events);
    assert_int_equal(0, u.streams);
    assert_int_equal(0, u.host_allocs);
    assert_int_equal(0, u.host_alloc_bytes);
    assert_int_equal(0, u.host_registrations);
    assert_int_equal(0, u.host_registered_bytes);
    for (int d = 0; d < XSA_SIM_MAX_DEVICES; d++) assert_int_equal(0, u.device_used[d]);
}

int teardown(void **state) {
    (void)state;
    CHECK();
    assert_usage_zero();
    xsa_sim_clear_faults();
    return 0;
}

xsa_sim_usage usage(void) {
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    return u;
}

size_t free_mem(int device) {
    size_t f = 0, t = 0;
    OK(XSA_DRV(D, mem_get_info, device, &f, &t));
    return f;
}

xsa_devptr reserve(size_t size) {
    xsa_devptr p = 0;
    OK(XSA_DRV(D, mem_address_reserve, &p, size, 0));
    CHECK();
    return p;
}

xsa_mem_handle create(size_t size, int device) {
    xsa_mem_handle h = 0;
    OK(XSA_DRV(D, mem_create, &h, size, device, 0));
    assert_true(h != 0);
    CHECK();
    return h;
}

/* Maps the handle at p and grants `device` access. */
void map_rw(xsa_devptr p, size_t size, xsa_mem_handle h, int device) {
    OK(XSA_DRV(D, mem_map, p, size, 0, h));
    CHECK();
    OK(XSA_DRV(D, mem_set_access, p, size, &device, 1));
    CHECK();
}

void fill(xsa_devptr p, size_t size, unsigned char seed) {
    unsigned char *b = (unsigned char *)(uintptr_t)p;
    for (size_t i = 0; i < size; i += 4096) b[i] = (unsigned char)(seed + i / 4096);
}

void assert_filled(xsa_devptr p, size_t size, unsigned char seed) {
    const unsigned char *b = (const unsigned char *)(uintptr_t)p;
    for (size_t i = 0; i < size; i += 4096) assert_int_equal((unsigned char)(seed + i / 4096), b[i]);
}

/* ---- forked children ------------------------------------------------------ */

/* Runs fn(arg) in a child with the default SIGSEGV action (sanitizers install
 * their own) and returns its wait status. */
int in_child(int (*fn)(void *), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        _exit(fn(arg));
    }
    int status = 0;
    assert_int_equal(pid, waitpid(pid, &status, 0));
    return status;
}

int read_byte(void *arg) {
    volatile unsigned char *b = arg;
    return b[0] == 0xEE ? 3 : 0; /* any value: reaching here means no fault */
}

void assert_faults(xsa_devptr p) {
    int st = in_child(read_byte, (void *)(uintptr_t)p);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
        fail_msg("reading %#llx did not fault (status %#x)", (unsigned long long)p, st);
}

void assert_readable(xsa_devptr p) {
    int st = in_child(read_byte, (void *)(uintptr_t)p);
    if (!WIFEXITED(st)) fail_msg("reading %#llx killed the child (status %#x)", (unsigned long long)p, st);
}

/* Whether any host mapping covers address p. */
bool host_mapped(xsa_devptr p) {
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long lo = 0, hi = 0;
        found = sscanf(line, "%llx-%llx", &lo, &hi) == 2 && p >= lo && p < hi;
    }
    fclose(f);
    return found;
}

xsa_event new_event(void) {
    xsa_event e = NULL;
    OK(XSA_DRV(D, event_create, &e, 0));
    assert_non_null(e);
    CHECK();
    return e;
}
