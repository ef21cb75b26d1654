/*
 * api/device_lock: the per-device lock of the public API.
 *
 * Design: every xsa_malloc and xsa_free takes its device's lock once, so its
 * uncontended cost is part of the hot path: one compare-and-swap to take
 * it and one exchange to give it back, inline. A pool may hold it across
 * driver calls (microseconds to milliseconds), so waiters sleep on a futex
 * instead of spinning. States: 0 free, 1 held, 2 held and maybe awaited
 * (the classic three-state futex mutex).
 */
#ifndef XSA_API_DEVICE_LOCK_H
#define XSA_API_DEVICE_LOCK_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct xsa_device_lock {
    _Atomic int state;
} xsa_device_lock;

static inline void xsa_device_lock_acquire(xsa_device_lock *l) {
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire,
                                                memory_order_relaxed))
        return;
    /* Contended: mark it awaited and sleep while it stays held. */
    while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

static inline void xsa_device_lock_release(xsa_device_lock *l) {
    if (atomic_exchange_explicit(&l->state, 0, memory_order_release) == 2)
        syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#endif
