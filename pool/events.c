/* pool/events: per-stream queues of record_stream events (design in
 * events.h). Besides completion (poll, synchronize), a pending block can be
 * handed over to a stream: page recycling does it when memory is short,
 * and the events' nodes then leave the middle of their queues. */
#include "pool/events.h"

#include <stdlib.h>
#include <string.h>

#include "pool/grow.h"

void xsa_events_init(xsa_events *e, xsa_driver *drv, int device) {
    memset(e, 0, sizeof *e);
    e->drv = drv;
    e->device = device;
}

static void free_nodes(xsa_pending *n) {
    while (n) {
        xsa_pending *next = n->next;
        free(n);
        n = next;
    }
}

void xsa_events_destroy(xsa_events *e) {
    for (int q = 0; q < e->n_queues; q++) {
        for (xsa_pending *n = e->queues[q].head; n; n = n->next) XSA_DRV(e->drv, event_destroy, n->event);
        free_nodes(e->queues[q].head);
    }
    for (size_t i = 0; i < e->n_spare; i++) XSA_DRV(e->drv, event_destroy, e->spare[i]);
    free_nodes(e->free_nodes);
    free(e->queues);
    free(e->spare);
    memset(e, 0, sizeof *e);
}

static xsa_stream_queue *queue_for(xsa_events *e, xsa_stream stream) {
    for (int q = 0; q < e->n_queues; q++)
        if (e->queues[q].stream == stream) return &e->queues[q];
    if (!XSA_GROW_FOR_ONE(e->queues, e->n_queues, e->cap_queues, 4)) return NULL;
    xsa_stream_queue *q = &e->queues[e->n_queues++];
    memset(q, 0, sizeof *q);
    q->stream = stream;
    return q;
}

static bool keep_spare(xsa_events *e, xsa_event ev) {
    if (!XSA_GROW_FOR_ONE(e->spare, e->n_spare, e->cap_spare, 8)) return false;
    e->spare[e->n_spare++] = ev;
    return true;
}

void xsa_events_put_event(xsa_events *e, xsa_event ev) {
    if (!keep_spare(e, ev)) XSA_DRV(e->drv, event_destroy, ev);
}

xsa_cu_result xsa_events_take_event(xsa_events *e, xsa_event *ev) {
    if (e->n_spare) {
        *ev = e->spare[--e->n_spare];
        return XSA_CU_SUCCESS;
    }
    return XSA_DRV(e->drv, event_create, ev, e->device);
}

static xsa_pending *take_node(xsa_events *e) {
    xsa_pending *n = e->free_nodes;
    if (n) {
        e->free_nodes = n->next;
        return n;
    }
    return malloc(sizeof *n);
}

xsa_cu_result xsa_events_record_uses(xsa_events *e, xsa_block *b, const char **failed_call) {
    int n = b->n_stream_uses;
    /* Everything that can fail happens before anything is queued. */
    xsa_pending *nodes[n > 0 ? n : 1];
    xsa_stream_queue *queues[n > 0 ? n : 1];
    int ready = 0;
    xsa_cu_result r = XSA_CU_SUCCESS;
    for (; ready < n; ready++) {
        queues[ready] = queue_for(e, b->stream_uses[ready]);
        nodes[ready] = queues[ready] ? take_node(e) : NULL;
        if (!nodes[ready]) {
            r = XSA_CU_ERROR_OUT_OF_MEMORY;
            *failed_call = "host malloc";
            break;
        }
        r = xsa_events_take_event(e, &nodes[ready]->event);
        if (r != XSA_CU_SUCCESS) {
            *failed_call = "cuEventCreate";
        } else {
            r = XSA_DRV(e->drv, event_record, nodes[ready]->event, b->stream_uses[ready]);
            if (r != XSA_CU_SUCCESS) {
                *failed_call = "cuEventRecord";
                xsa_events_put_event(e, nodes[ready]->event);
            }
        }
        if (r != XSA_CU_SUCCESS) {
            nodes[ready]->next = e->free_nodes;
            e->free_nodes = nodes[ready];
            break;
        }
    }
    if (r != XSA_CU_SUCCESS) {
        /* A recorded but unqueued event is harmless: it is re-recorded when reused. */
        for (int i = 0; i < ready; i++) {
            xsa_events_put_event(e, nodes[i]->event);
            nodes[i]->next = e->free_nodes;
            e->free_nodes = nodes[i];
        }
        return r;
    }
    for (int i = 0; i < n; i++) {
        nodes[i]->block = b;
        nodes[i]->next = NULL;
        if (queues[i]->tail)
            queues[i]->tail->next = nodes[i];
        else
            queues[i]->head = nodes[i];
        queues[i]->tail = nodes[i];
    }
    b->event_count = n;
    b->n_stream_uses = 0;
    e->outstanding += (size_t)n;
    return XSA_CU_SUCCESS;
}

/* Pops the head of q, whose event has completed. */
static void complete_head(xsa_events *e, xsa_stream_queue *q, xsa_block_done_fn done, void *ctx) {
    xsa_pending *n = q->head;
    q->head = n->next;
    if (!q->head) q->tail = NULL;
    e->outstanding--;
    xsa_events_put_event(e, n->event);
    xsa_block *b = n->block;
    n->next = e->free_nodes;
    e->free_nodes = n;
    if (--b->event_count == 0) done(ctx, b);
}

void xsa_events_poll(xsa_events *e, xsa_block_done_fn done, void *ctx) {
    if (!e->outstanding) return;
    for (int q = 0; q < e->n_queues; q++) {
        xsa_stream_queue *queue = &e->queues[q];
        /* Any result but success (not ready, or an error) keeps the block
         * waiting: memory is never reused early. */
        while (queue->head && XSA_DRV(e->drv, event_query, queue->head->event) == XSA_CU_SUCCESS)
            complete_head(e, queue, done, ctx);
    }
}

bool xsa_events_hand_over(xsa_events *e, xsa_block *b, xsa_stream stream) {
    for (int q = 0; q < e->n_queues && b->event_count > 0; q++) {
        xsa_stream_queue *queue = &e->queues[q];
        xsa_pending *prev = NULL;
        for (xsa_pending *n = queue->head, *next; n; n = next) {
            next = n->next;
            if (n->block != b) {
                prev = n;
                continue;
            }
            if (XSA_DRV(e->drv, event_query, n->event) != XSA_CU_SUCCESS &&
                XSA_DRV(e->drv, stream_wait_event, stream, n->event) != XSA_CU_SUCCESS)
                return false; /* b keeps waiting for this event and the rest */
            if (prev)
                prev->next = next;
            else
                queue->head = next;
            if (queue->tail == n) queue->tail = prev;
            e->outstanding--;
            xsa_events_put_event(e, n->event);
            n->next = e->free_nodes;
            e->free_nodes = n;
            b->event_count--;
        }
    }
    return b->event_count == 0;
}

xsa_cu_result xsa_events_synchronize(xsa_events *e, xsa_block_done_fn done, void *ctx) {
    for (int q = 0; q < e->n_queues; q++) {
        xsa_stream_queue *queue = &e->queues[q];
        while (queue->head) {
            xsa_cu_result r = XSA_DRV(e->drv, event_synchronize, queue->head->event);
            if (r != XSA_CU_SUCCESS) return r;
            complete_head(e, queue, done, ctx);
        }
    }
    return XSA_CU_SUCCESS;
}
