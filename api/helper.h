/*
 * api/helper: the helper thread (helper_thread), which takes driver work
 * off the allocation path and runs decay purging (design in helper.c).
 *
 * Its interface to the rest of the API is small: pools get
 * xsa_helper_wake as their wake callback (api/devices.c), shutdown calls
 * xsa_helper_stop before the pools go, and a run-time settings change
 * that turns the helper on calls xsa_helper_wake. Fork is handled here
 * (pthread_atfork, registered when the thread first starts, so after
 * handlers registered at initialisation: its prepare runs before theirs
 * and stops the thread before anyone takes the device locks). The rest
 * is for tests and the simulated benchmarks: a clock of their own and a
 * manual mode, where no thread runs and xsa_helper_poll does its rounds
 * on the caller's thread, deterministically.
 */
#ifndef XSA_API_HELPER_H
#define XSA_API_HELPER_H

#include <stdbool.h>
#include <stdint.h>

/* The pools' wake callback (pool/jobs.h): work for the helper appeared on
 * `device` (-1: settings changed); starts the thread on first use unless
 * in manual mode. Called with device locks held or not; never blocks on
 * them. */
void xsa_helper_wake(void *ctx, int device);

/* Asks the thread to stop and waits for it (its job in flight commits
 * first). The caller must hold no device lock. The thread starts again
 * at the next wake. */
void xsa_helper_stop(void);

/* The helper's clock, in ns: CLOCK_MONOTONIC unless now is given (NULL
 * puts it back). For tests and replays, which make time deterministic. */
void xsa_helper_set_clock(uint64_t (*now)(void *ctx), void *ctx);
uint64_t xsa_helper_now(void);

/* Manual mode (tests, simulated replays): the thread is stopped and never
 * started; the rounds run in xsa_helper_poll. */
void xsa_helper_set_manual(bool manual);
/* Manual mode: a round's jobs commit at the polls-th xsa_helper_poll
 * after it (or when the helper stops, or this is set to 0), not at once:
 * the caller's allocator calls in between fall between their driver
 * calls and their commit, as they can with the thread. */
void xsa_helper_set_deferred_commit(unsigned polls);

/* The rounds due at the helper's clock's now, on the calling thread, for
 * every device with a pool (the caller holds no device lock); the time
 * the next one is due (UINT64_MAX: only when woken). */
uint64_t xsa_helper_poll(void);

/* Whether the thread is running, and how many times it has started
 * (tests). */
bool xsa_helper_running(void);
uint64_t xsa_helper_starts(void);

#endif
