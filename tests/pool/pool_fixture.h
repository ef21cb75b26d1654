/*
 * pool_fixture: the pool-level tests' shared steps on the simulated driver
 * (pool_test, recycle_test, graph_test, checkpoint_test, decay_test,
 * ready_test...): a pool on a
 * fresh simulated device, malloc and free and memory-pool routing that fail
 * the test on error, and the pool's and the simulated driver's invariant
 * checkers after every step.
 */
#ifndef XSA_TESTS_POOL_FIXTURE_H
#define XSA_TESTS_POOL_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/capture.h"
#include "pool/check.h"
#include "pool/checkpoint.h"
#include "pool/info.h"
#include "pool/pool.h"
#include "pool/snapshot.h"
#include "pool/stats.h"
#include "xsalloc/sim.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

extern xsa_driver *drv;
extern char err[2048];
#define S0 ((void *)NULL)
#define S1 ((void *)0x1001)

/* A fresh simulated device of `capacity` bytes. */
void setup_sim(size_t capacity);
/* The pool of device 0 on a fresh simulated device: default options, page
 * recycling off, then tweak (if not NULL). */
xsa_pool *make_pool(size_t capacity, bool expandable, void (*tweak)(xsa_pool_options *));
/* Both invariant checkers; fails the test with their sentence. */
void check(xsa_pool *p);
#define CHECK(p) check(p)
void *alloc(xsa_pool *p, size_t size, void *stream);
void release(xsa_pool *p, void *ptr);
xsa_device_stats stats(xsa_pool *p);
/* Reserved bytes now, all pools. */
int64_t reserved(xsa_pool *p);
/* One round of the helper thread at `now` of its clock (plan, the driver
 * calls, commit), as api/helper.c runs it, then both checkers. */
void helper_round(xsa_pool *p, uint64_t now);
/* The next malloc returns the helper's failure, naming `call`, once; the
 * one after works. */
void expect_helper_notice(xsa_pool *p, const char *call);
xsa_sim_usage usage(void);
/* Calls made so far to one driver entry point. */
uint64_t driver_calls(xsa_driver_entry e);
/* The body with an expandable pool, then a classic one. */
void run_both(void (*body)(bool expandable));
/* A routing filter that accepts the stream given as its context. */
bool only_stream(void *ctx, void *stream);
/* Routes the allocations on `stream` (every stream if NULL) to memory pool
 * id (capture: as stream capture does, events are not polled). */
void pool_begin(xsa_pool *p, xsa_mempool_id id, void *stream, bool capture);
void pool_end(xsa_pool *p, xsa_mempool_id id);
/* Drops a use of memory pool id (xsa_pool_mempool_release). */
void pool_drop(xsa_pool *p, xsa_mempool_id id);
/* A call the pool must refuse (XSA_POOL_INVALID) without changing
 * anything: the checkers run after it. Needs a pool `p` in scope. */
#define REFUSED(call)                                  \
    do {                                               \
        assert_int_equal((call), XSA_POOL_INVALID);    \
        CHECK(p);                                      \
    } while (0)
/* Destroys the pool; the simulated driver must then hold nothing. */
void teardown(xsa_pool *p);

#endif
