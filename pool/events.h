/*
 * pool/events: deferred frees of blocks used on other streams.
 *
 * Design: freeing a block with stream uses records one event on each of
 * those streams; the block returns to the cache when all have completed.
 * Pending events are queued per stream in record order, so a stream with
 * long-running work does not hold up the others (only the head of each
 * queue is polled). Event objects and queue nodes are recycled.
 */
#ifndef XSA_POOL_EVENTS_H
#define XSA_POOL_EVENTS_H

#include "pool/block.h"
#include "vmm/driver.h"

typedef struct xsa_pending {
    xsa_event event;
    xsa_block *block;
    struct xsa_pending *next;
} xsa_pending;

typedef struct xsa_stream_queue {
    xsa_stream stream;
    xsa_pending *head, *tail;
} xsa_stream_queue;

typedef struct xsa_events {
    xsa_driver *drv;
    int device;
    xsa_stream_queue *queues;
    int n_queues, cap_queues;
    xsa_event *spare;
    size_t n_spare, cap_spare;
    xsa_pending *free_nodes;
    size_t outstanding;  /* events recorded and not yet seen complete */
} xsa_events;

typedef void (*xsa_block_done_fn)(void *ctx, xsa_block *b);

void xsa_events_init(xsa_events *e, xsa_driver *drv, int device);
/* Destroys every event, pending ones included; their blocks are left alone. */
void xsa_events_destroy(xsa_events *e);

/* Records an event on each of b's stream uses and sets b->event_count; the
 * uses are cleared. On failure nothing is queued, b is unchanged and the
 * failing call's result is returned (*failed_call names it). */
xsa_cu_result xsa_events_record_uses(xsa_events *e, xsa_block *b, const char **failed_call);

/* Without blocking: for every completed event, decrements its block's
 * event_count and calls done() when it reaches zero. */
void xsa_events_poll(xsa_events *e, xsa_block_done_fn done, void *ctx);

/* An event object from the spares (or a new one), and its return; events
 * of other pool modules share the spares. */
xsa_cu_result xsa_events_take_event(xsa_events *e, xsa_event *ev);
void xsa_events_put_event(xsa_events *e, xsa_event ev);

/* Ends the CPU-side wait of pending block b (event_count > 0) on the GPU
 * instead: each of its events not yet complete is waited for by `stream`
 * (cuStreamWaitEvent), so that work queued there from now on runs after
 * b's uses, and leaves its queue. Stops at the first refused call, b
 * waiting for the events left. Returns true once b has none left (the
 * caller then returns it to the cache, as poll's done() would). Never
 * during a capture (it queries events). */
bool xsa_events_hand_over(xsa_events *e, xsa_block *b, xsa_stream stream);

/* Waits for every pending event, with the same effect as poll. */
xsa_cu_result xsa_events_synchronize(xsa_events *e, xsa_block_done_fn done, void *ctx);

#endif
