/*
 * api/helper: the helper thread, xsa-helper as top and py-spy show it.
 * One per process, started lazily the first time a pool wakes it (a
 * growth that created or moved pages, settings that turn it on), it runs
 * each device's pool rounds (pool/jobs.h:
 * unmapping recycling's old addresses, readying pages where a growth
 * ended, decay purging), so that their driver calls are made on this
 * thread, outside the device's lock, while the caller's thread goes on
 * launching work (the driver lets a second thread's calls overlap the
 * main thread's launches: tests/gpu/probes/vmm_thread_probe.py).
 *
 * Design: the thread sleeps on a condition variable until the earliest
 * time a pool asked for (xsa_pool_jobs_due) or a wake. A round on a
 * device plans with its lock held, drops it for the driver calls, and
 * takes it again to commit: a job once planned always commits, so stop
 * takes effect between rounds and leaves nothing half done. The plan
 * step takes the lock with try-and-nap so that a stop is never held up by
 * a lock someone keeps (a fork handler holding every device's lock); the
 * commit step must have it and waits. The thread works in relaxed capture
 * mode (its calls must not invalidate another thread's global-mode
 * capture; the pools record and query no event during one anyway) with
 * each device's primary context current as it works on it. Errors of its
 * jobs become the pool's notice, reported by the next malloc or
 * empty_cache of that device (pool/jobs.h): nothing is printed here.
 *
 * Shutdown stops it (xsa_shutdown, before the pools go). Fork: the
 * prepare handler stops it (so no driver call or device lock of its is in
 * flight in the child) and keeps it from starting until the fork is over,
 * without holding the helper's mutex across the fork (shutdown takes the
 * start-up lock, then that mutex; api/fork.c's prepare takes the start-up
 * lock after this one's: holding both would order them both ways); the
 * child makes its mutex and condition variable anew; the parent starts the
 * thread again if it ran; the child starts one at its first wake. Manual
 * mode (tests, simulated replays) never starts the thread: xsa_helper_poll
 * does the due rounds on the caller's thread, with the injected clock, so
 * runs are deterministic. With deferred commits, a round's jobs commit N
 * polls later instead, so the caller's next allocator calls fall between
 * a job's driver calls and its commit, as they can with the thread (the
 * window where the readying race lived); stopping the helper or turning
 * the mode off commits what waits.
 */
#include "api/helper.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "api/devices.h"
#include "pool/jobs.h"

#define NAP_NS 50000L          /* between tries of a device lock while planning */
#define FAKE_CLOCK_NAP_NS 1000000ull /* a thread on an injected clock looks at it again after this */

static struct {
    pthread_mutex_t lock;      /* guards everything below but `stop` */
    pthread_cond_t cond;
    pthread_t thread;
    bool running;              /* started and not joined */
    bool woken;                /* a pool asked for a round since the thread last looked */
    bool manual;
    unsigned deferred;         /* manual mode: a round's jobs commit this many polls later */
    bool atfork;               /* handlers registered */
    bool restart;              /* running when a fork began: the parent starts it again */
    bool forking;              /* between the fork's prepare and parent or child handler: no start */
    uint64_t starts;
    uint64_t (*now)(void *ctx);
    void *now_ctx;
    void *ctx[XSA_MAX_DEVICES]; /* primary contexts the thread made current */
    int current;               /* the device whose context is current on the thread; -1 none */
    _Atomic bool stop;
} h = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .current = -1};

/* ---- the clock ---- */

void xsa_helper_set_clock(uint64_t (*now)(void *ctx), void *ctx) {
    pthread_mutex_lock(&h.lock);
    h.now = now;
    h.now_ctx = ctx;
    pthread_mutex_unlock(&h.lock);
}

static uint64_t clock_locked(void) { return h.now ? h.now(h.now_ctx) : xsa_driver_now_ns(); }

uint64_t xsa_helper_now(void) {
    pthread_mutex_lock(&h.lock);
    uint64_t t = clock_locked();
    pthread_mutex_unlock(&h.lock);
    return t;
}

/* ---- rounds ---- */

/* Device d's primary context current on the thread (not in manual mode:
 * the caller's thread keeps its own). */
static xsa_cu_result use_device(int d, bool thread) {
    if (!thread || h.current == d) return XSA_CU_SUCCESS;
    xsa_driver *drv = xsa_devices.drv;
    xsa_cu_result r = XSA_CU_SUCCESS;
    if (!h.ctx[d]) r = XSA_DRV(drv, primary_ctx_retain, &h.ctx[d], d);
    if (r == XSA_CU_SUCCESS) r = XSA_DRV(drv, ctx_set_current, h.ctx[d]);
    h.current = r == XSA_CU_SUCCESS ? d : -1;
    return r;
}

/* Takes device d's lock to plan; on the thread, gives up when asked to
 * stop. False too when the caller (manual mode) is inside a callback that
 * holds it already. */
static bool lock_to_plan(xsa_device_slot *s, bool thread) {
    if (!thread) return xsa_device_lock_acquire(&s->lock);
    while (!xsa_device_lock_try(&s->lock)) {
        if (atomic_load(&h.stop)) return false;
        struct timespec nap = {0, NAP_NS};
        nanosleep(&nap, NULL);
    }
    return true;
}

/* Deferred commits (manual mode): device d's jobs, run, waiting `polls`
 * more polls to commit. Touched by the polling thread only. */
static struct {
    xsa_pool *pool;
    xsa_pool_jobs jobs;
    bool waiting;
    unsigned polls;            /* polls still to wait */
} pending[XSA_MAX_DEVICES];

/* Commits device d's waiting jobs (`now`: only once their polls are
 * over); false while they wait, or if the device's lock is the caller's
 * own (inside a callback). */
static bool commit_pending(int d, bool now) {
    if (!pending[d].waiting) return true;
    if (!now && pending[d].polls && pending[d].polls--) return false;
    xsa_device_slot *s = &xsa_devices.slot[d];
    if (!xsa_device_lock_acquire(&s->lock)) return false;
    xsa_pool_jobs_commit(pending[d].pool, &pending[d].jobs);
    pending[d].waiting = false;
    xsa_device_lock_release(&s->lock);
    return true;
}

static void commit_all_pending(void) {
    bool was = xsa_driver_background(true);
    for (int d = 0; d < XSA_MAX_DEVICES; d++) commit_pending(d, true);
    xsa_driver_background(was);
}

/* The rounds due on device d at `now`; when the next one is due. */
static uint64_t rounds_on(int d, uint64_t now, bool thread) {
    xsa_device_slot *s = &xsa_devices.slot[d];
    if (!thread && !commit_pending(d, false)) return now + 1;
    for (;;) {
        if (!lock_to_plan(s, thread)) return UINT64_MAX;
        xsa_pool *p = s->pool;
        uint64_t due = p ? xsa_pool_jobs_due(p) : UINT64_MAX;
        if (due > now || (thread && atomic_load(&h.stop))) {
            xsa_device_lock_release(&s->lock);
            return due;
        }
        xsa_cu_result r = use_device(d, thread);
        if (r != XSA_CU_SUCCESS) {
            xsa_pool_jobs_failed(p, "making the device's context current", r);
            xsa_device_lock_release(&s->lock);
            return UINT64_MAX;
        }
        xsa_pool_jobs jobs;
        xsa_pool_jobs_plan(p, now, &jobs);
        xsa_device_lock_release(&s->lock);
        xsa_pool_jobs_run(&jobs);
        if (!thread && h.deferred) { /* the caller goes on before the commit, as with the thread */
            pending[d].pool = p;
            pending[d].jobs = jobs;
            pending[d].waiting = true;
            pending[d].polls = h.deferred - 1;
            return now + 1;
        }
        /* A planned job always commits: this thread took the lock to plan,
         * so it is in no callback that holds it, and the acquire succeeds. */
        bool held = xsa_device_lock_acquire(&s->lock);
        (void)held;
        xsa_pool_jobs_commit(p, &jobs);
        xsa_device_lock_release(&s->lock);
    }
}

/* The rounds due on every device; their driver calls count as background
 * work (vmm/driver.h), on the thread or polled. */
static uint64_t rounds(uint64_t now, bool thread) {
    bool was = xsa_driver_background(true);
    uint64_t next = UINT64_MAX;
    for (int d = 0; d < xsa_devices.devices; d++) {
        uint64_t due = rounds_on(d, now, thread);
        if (due < next) next = due;
    }
    xsa_driver_background(was);
    return next;
}

uint64_t xsa_helper_poll(void) {
    if (!atomic_load_explicit(&xsa_devices.ready, memory_order_acquire)) return UINT64_MAX;
    return rounds(xsa_helper_now(), false);
}

/* ---- the thread ---- */

/* Sleeps until `next` (the helper's clock), a wake or a stop. */
static void sleep_until(uint64_t next) {
    pthread_mutex_lock(&h.lock);
    while (!h.woken && !atomic_load(&h.stop)) {
        uint64_t now = clock_locked();
        if (now >= next) break;
        if (next == UINT64_MAX && !h.now) {
            pthread_cond_wait(&h.cond, &h.lock);
            continue;
        }
        /* The condition variable waits on CLOCK_REALTIME: a relative wait
         * from it, at most a nap on an injected clock. */
        uint64_t wait = h.now ? FAKE_CLOCK_NAP_NS : next - now;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + wait % 1000000000ull;
        ts.tv_sec += (time_t)(wait / 1000000000ull + ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&h.cond, &h.lock, &ts);
    }
    h.woken = false;
    pthread_mutex_unlock(&h.lock);
}

static void *loop(void *arg) {
    (void)arg;
    bool relaxed = false;
    while (!atomic_load(&h.stop)) {
        /* Settings can wake it before the devices start: until they have
         * a driver there is nothing to do but wait for a wake. */
        bool ready = atomic_load_explicit(&xsa_devices.ready, memory_order_acquire);
        if (ready && !relaxed) {
            xsa_driver_relax_capture(xsa_devices.drv);
            relaxed = true;
        }
        uint64_t next = ready ? rounds(xsa_helper_now(), true) : UINT64_MAX;
        sleep_until(next);
    }
    return NULL;
}

static void at_fork_prepare(void);
static void at_fork_parent(void);
static void at_fork_child(void);

/* Starts the thread (h.lock held). */
static void start_locked(void) {
    if (h.running || h.manual || h.forking) return;
    if (!h.atfork) h.atfork = pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child) == 0;
    atomic_store(&h.stop, false);
    h.current = -1;
    h.running = pthread_create(&h.thread, NULL, loop, NULL) == 0;
    if (h.running) pthread_setname_np(h.thread, "xsa-helper"); /* as top and py-spy show it */
    h.starts += h.running;
}

/* Stops the thread and waits for it (h.lock held; released while waiting). */
static void stop_locked(void) {
    if (!h.running) return;
    atomic_store(&h.stop, true);
    pthread_cond_broadcast(&h.cond);
    pthread_t t = h.thread;
    pthread_mutex_unlock(&h.lock);
    pthread_join(t, NULL);
    pthread_mutex_lock(&h.lock);
    h.running = false;
    atomic_store(&h.stop, false);
    memset(h.ctx, 0, sizeof h.ctx); /* the driver may differ at the next start */
}

void xsa_helper_wake(void *ctx, int device) {
    (void)ctx, (void)device;
    pthread_mutex_lock(&h.lock);
    h.woken = true;
    start_locked();
    pthread_cond_signal(&h.cond);
    pthread_mutex_unlock(&h.lock);
}

void xsa_helper_stop(void) {
    pthread_mutex_lock(&h.lock);
    stop_locked();
    pthread_mutex_unlock(&h.lock);
    commit_all_pending();
}

void xsa_helper_set_manual(bool manual) {
    pthread_mutex_lock(&h.lock);
    if (manual) stop_locked();
    h.manual = manual;
    pthread_mutex_unlock(&h.lock);
    if (!manual) commit_all_pending();
}

void xsa_helper_set_deferred_commit(unsigned polls) {
    pthread_mutex_lock(&h.lock);
    h.deferred = polls;
    pthread_mutex_unlock(&h.lock);
    if (!polls) commit_all_pending();
}

bool xsa_helper_running(void) {
    pthread_mutex_lock(&h.lock);
    bool running = h.running;
    pthread_mutex_unlock(&h.lock);
    return running;
}

uint64_t xsa_helper_starts(void) {
    pthread_mutex_lock(&h.lock);
    uint64_t n = h.starts;
    pthread_mutex_unlock(&h.lock);
    return n;
}

/* ---- fork ---- */

static void at_fork_prepare(void) {
    pthread_mutex_lock(&h.lock);
    h.restart = h.running;
    h.forking = true;
    stop_locked();
    pthread_mutex_unlock(&h.lock);
}

static void at_fork_parent(void) {
    pthread_mutex_lock(&h.lock);
    h.forking = false;
    if (h.restart) start_locked();
    h.restart = false;
    pthread_mutex_unlock(&h.lock);
}

static void at_fork_child(void) {
    /* Another thread may have held the mutex at the fork: made anew. No
     * thread here: the child's first wake starts one. */
    pthread_mutex_init(&h.lock, NULL);
    pthread_cond_init(&h.cond, NULL);
    h.forking = h.restart = h.running = h.woken = false;
}

/* Every pool gets the wake callback (api/devices.c), from load time on. */
__attribute__((constructor)) static void register_wake(void) { xsa_devices_set_helper_wake(xsa_helper_wake); }
