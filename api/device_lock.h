/*
 * api/device_lock: the per-device lock of the public API.
 *
 * Design: every xsa_malloc and xsa_free takes its device's lock once, so its
 * uncontended cost is part of the hot path: one compare-and-swap to take it
 * and a plain release store to give it back (an atomic exchange there cost
 * about 7 ns a call on the H100 host, docs/results-log.md). A pool may
 * hold it across driver calls (microseconds to milliseconds), so a waiter
 * spins briefly, then counts itself in `sleepers` and sleeps on a futex; a
 * release that sees a sleeper wakes one. With no fence between the release
 * store and the read of `sleepers` (the fence is what the exchange cost),
 * a release can miss a sleeper arriving at that instant, so sleepers nap
 * at most XSA_DEVICE_LOCK_NAP_NS and look again: that bounds the delay of
 * the race. Mutual exclusion never depends on it.
 *
 * Re-entry: xsalloc calls user code (memory hooks, the trace callback)
 * with a device's lock held; a callback that calls back into xsalloc on
 * that device would wait for itself forever. Around such a call the lock
 * names the calling thread (xsa_device_lock_enter_callback), and an
 * acquire that finds the lock taken checks, before it spins, whether that
 * thread is itself: then it returns false at once instead of waiting, and
 * the caller fails with a clear error or, for a call that only reads
 * (xsa_get_stats), reads without the lock its own thread holds. The check
 * is on the contended path only: the uncontended acquire stays one
 * compare-and-swap.
 *
 * Waits: an acquire that sleeps counts itself and the time it slept, under
 * the lock it then holds (xsa_get_stats' num_device_lock_waits and
 * device_lock_wait_us): what the helper thread's rounds, or the program's
 * other threads, cost a caller. Spins are not counted (under a
 * microsecond).
 */
#ifndef XSA_API_DEVICE_LOCK_H
#define XSA_API_DEVICE_LOCK_H

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define XSA_DEVICE_LOCK_NAP_NS 1000000L /* 1 ms */
#define XSA_DEVICE_LOCK_SPINS 100

#if defined(__x86_64__) || defined(__i386__)
#define XSA_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define XSA_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define XSA_CPU_RELAX() ((void)0)
#endif

typedef struct xsa_device_lock {
    _Atomic int state;    /* 0 free, 1 held */
    _Atomic int sleepers; /* threads asleep on state, or about to be */
    /* The holder while it runs a user callback under the lock, else 0. */
    _Atomic uintptr_t callback_thread;
    /* Acquires that slept for the lock (spinning was not enough), and the
     * nanoseconds they slept: how much the device's callers waited for each
     * other (the helper thread's rounds, other threads); xsa_get_stats. */
    _Atomic uint64_t waits, wait_ns;
} xsa_device_lock;

/* The holder (the calling thread) is about to call user code with the lock
 * held, and is back from it. */
static inline void xsa_device_lock_enter_callback(xsa_device_lock *l) {
    atomic_store_explicit(&l->callback_thread, (uintptr_t)pthread_self(), memory_order_relaxed);
}
static inline void xsa_device_lock_leave_callback(xsa_device_lock *l) {
    atomic_store_explicit(&l->callback_thread, 0, memory_order_relaxed);
}

/* Whether the calling thread holds l and is inside a callback under it. */
static inline bool xsa_device_lock_reentered(xsa_device_lock *l) {
    return atomic_load_explicit(&l->callback_thread, memory_order_relaxed) == (uintptr_t)pthread_self();
}

static inline int xsa_device_lock_try(xsa_device_lock *l) {
    int expected = 0;
    return atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

/* The contended path; naps of nap_ns at most (tests pass other values).
 * False, without waiting, on a re-entry from a callback (above). */
static inline bool xsa_device_lock_acquire_napping(xsa_device_lock *l, long nap_ns) {
    if (xsa_device_lock_try(l)) return true;
    if (xsa_device_lock_reentered(l)) return false;
    for (int i = 0; i < XSA_DEVICE_LOCK_SPINS; i++) {
        XSA_CPU_RELAX();
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 && xsa_device_lock_try(l)) return true;
    }
    atomic_fetch_add_explicit(&l->sleepers, 1, memory_order_seq_cst);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!xsa_device_lock_try(l)) {
        struct timespec nap = {nap_ns / 1000000000L, nap_ns % 1000000000L};
        syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 1, &nap, NULL, 0);
    }
    atomic_fetch_sub_explicit(&l->sleepers, 1, memory_order_relaxed);
    clock_gettime(CLOCK_MONOTONIC, &t1); /* held: the counts below change under the lock only */
    int64_t slept = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    atomic_store_explicit(&l->waits, atomic_load_explicit(&l->waits, memory_order_relaxed) + 1, memory_order_relaxed);
    atomic_store_explicit(&l->wait_ns, atomic_load_explicit(&l->wait_ns, memory_order_relaxed) + (uint64_t)(slept > 0 ? slept : 0),
                          memory_order_relaxed);
    return true;
}

/* True once the lock is held; false (not held) when the calling thread
 * already holds it inside a callback. */
__attribute__((warn_unused_result)) static inline bool xsa_device_lock_acquire(xsa_device_lock *l) {
    if (__builtin_expect(xsa_device_lock_try(l), 1)) return true;
    return xsa_device_lock_acquire_napping(l, XSA_DEVICE_LOCK_NAP_NS);
}

/* Zeroes the wait counts (the holder: a new pool's statistics, or
 * xsa_reset_accumulated_stats). */
static inline void xsa_device_lock_clear_waits(xsa_device_lock *l) {
    atomic_store_explicit(&l->waits, 0, memory_order_relaxed);
    atomic_store_explicit(&l->wait_ns, 0, memory_order_relaxed);
}

static inline void xsa_device_lock_release(xsa_device_lock *l) {
    atomic_store_explicit(&l->state, 0, memory_order_release);
    /* Keep the compiler from reading before the store (ARM's load-acquire
     * after a store-release keeps the CPU from it too; x86 may still, for
     * the instant its store buffer takes: the race the naps bound). */
    atomic_signal_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&l->sleepers, memory_order_acquire))
        syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#endif
