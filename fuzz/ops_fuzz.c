/*
 * ops_fuzz: libFuzzer target turning a byte string into a sequence of
 * public API calls on the simulated driver, with the invariant checker
 * after every call.
 *
 * The first byte picks the configuration (expandable with or without page
 * recycling, the latter with capture-time reuse on, classic, classic with
 * oversize blocks and garbage collection, expandable with IPC handles; its
 * value / 5 sets flags: memory pool 1 gets an allocator of its own (a fake
 * over host memory), pool 1 lends on OOM (use_on_oom), pool 0 splits no
 * block (no_split); its value / 40 % 3 is how many of the helper's polls
 * a round's jobs wait before they commit); then each operation is an opcode byte followed by argument bytes: malloc (size on a log scale, stream, slot),
 * free, record_stream, sharing a block as bytes and opening them here
 * (and granting device 1 access to device 0's memory while it is open),
 * empty_cache, a round of the helper thread after a step of its clock
 * (decay, readying, retiring: the helper is on by default and runs in its
 * manual mode here, on the fuzzer's thread and clock, so an input replays
 * the same), completing simulated streams, a memory fraction or
 * settings changed at run time (expandable segments off and on, ...), arming
 * a driver fault (entry point, which of its next calls; the first such
 * operation of an input only; or the own allocator's failure at one of
 * its next calls), beginning or ending the routing of a
 * stream to one of two memory pools (a capture), dropping a use of one,
 * and checkpointing one or restoring it to its last checkpoint (the
 * blocks the restore allocates take empty slots). A call may fail
 * (out of memory, or the armed fault) but must leave the invariants true,
 * every live allocation's data intact, and, after the faults are cleared,
 * everything freed, the cache emptied (a fault the helper met is reported
 * once, by the first empty_cache; the next succeeds) and xsa_shutdown, a simulated driver
 * holding nothing and the own allocator every segment back and told it is
 * done once per pool. Any violation aborts, which libFuzzer reports.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/helper.h"
#include "xsalloc/sim.h"
#include "xsalloc/xsalloc.h"

#define SLOTS 16
#define STREAMS 3
#define CAPACITY ((size_t)256 << 20) /* small: the checker walks every page */

typedef struct {
    const uint8_t *p, *end;
} input;

typedef struct {
    void *ptr;
    size_t size;
    uint8_t fill;
} slot;

#define MEMPOOLS 2

static slot slots[SLOTS];
static bool fault_armed;
/* The configuration byte's flags (see above). */
static bool own_allocator, lends, no_split;
/* The helper's clock (ns), moved on by the helper-round operation. */
static uint64_t clock_ns;
/* Per memory pool {1 + i, 0}: uses held (creates and begins less
 * releases), the routed stream, or -1. */
static int mempool_uses[MEMPOOLS], routed[MEMPOOLS];
/* Per memory pool: its last checkpoint. */
static xsa_live_block *saved[MEMPOOLS];
static size_t n_saved[MEMPOOLS];

static void check(int ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "ops_fuzz: %s (%s)\n", what, xsa_last_error());
    abort();
}

static uint8_t next(input *in) { return in->p < in->end ? *in->p++ : 0; }

static uint64_t fuzz_clock(void *ctx) {
    (void)ctx;
    return clock_ns;
}

static void *stream_of(unsigned k) { return k % STREAMS == 0 ? NULL : (void *)(uintptr_t)(0x1000u + k % STREAMS); }

/* The first and last byte carry the slot's fill byte. */
static int data_intact(const slot *s) {
    const uint8_t *b = s->ptr;
    return b[0] == s->fill && b[s->size - 1] == s->fill;
}

static void do_free(slot *s) {
    if (!s->ptr) return;
    check(data_intact(s), "a live allocation's data changed");
    if (xsa_free(s->ptr) == XSA_SUCCESS) s->ptr = NULL; /* an armed fault may refuse it */
}

static void do_malloc(input *in) {
    uint8_t a = next(in), b = next(in), c = next(in);
    size_t size = ((size_t)1 << (a % 29)) + (size_t)b * 37;
    slot *s = &slots[c % SLOTS];
    do_free(s);
    if (s->ptr) return;
    void *p = NULL;
    xsa_status st = xsa_malloc(&p, size, 0, stream_of(c >> 4));
    check(st == XSA_SUCCESS || st == XSA_ERROR_OUT_OF_MEMORY || st == XSA_ERROR_DRIVER, "unexpected malloc status");
    if (!p) return;
    *s = (slot){p, size, (uint8_t)(a ^ c)};
    ((uint8_t *)p)[0] = s->fill;
    ((uint8_t *)p)[size - 1] = s->fill;
}

static xsa_mempool_id mempool(int i) { return (xsa_mempool_id){(uint64_t)i + 1, 0}; }

static bool routes(void *ctx, void *stream) { return stream == ctx; }

/* Memory pool 1's own allocator: host memory, counted; fails its
 * fail_at-th call from the arming on. Called under the device's lock. */
static struct {
    int live, created, released, calls, fail_at;
} own;

static void *own_alloc(void *ctx, size_t size, int device, void *stream) {
    (void)ctx, (void)device, (void)stream;
    if (own.fail_at && ++own.calls == own.fail_at) return NULL;
    void *p = aligned_alloc(4096, size);
    own.live += p != NULL;
    return p;
}

static void own_free(void *ctx, void *ptr, size_t size, int device, void *stream) {
    (void)ctx, (void)size, (void)device, (void)stream;
    check(own.live > 0, "the own allocator freed more than it handed out");
    own.live--;
    free(ptr);
}

static void own_release(void *ctx) {
    (void)ctx;
    check(own.live == 0, "the own allocator was released with segments out");
    own.released++;
}

/* Before pool i's first use: its allocator and flags (a pool released but
 * still holding memory keeps them: INVALID). */
static void make_mempool(int i) {
    xsa_status st = XSA_SUCCESS;
    if (i == 1 && own_allocator) {
        xsa_mempool_allocator a = {own_alloc, own_free, own_release, NULL};
        st = xsa_mempool_create_with_allocator(0, mempool(i), &a);
        own.created += st == XSA_SUCCESS;
    } else if (i == 1 ? lends : no_split) {
        st = xsa_mempool_create(0, mempool(i));
    } else {
        return;
    }
    /* DRIVER: creating the device's pool under a fault */
    check(st == XSA_SUCCESS || st == XSA_ERROR_INVALID_VALUE || st == XSA_ERROR_DRIVER, "mempool create");
    if (st != XSA_SUCCESS) return;
    mempool_uses[i]++;
    if (i == 1 && lends) check(xsa_mempool_set_use_on_oom(0, mempool(i), true) == XSA_SUCCESS, "set_use_on_oom");
    if (i == 0 && no_split) check(xsa_mempool_set_no_split(0, mempool(i), true) == XSA_SUCCESS, "set_no_split");
}

/* Begins routing a stream to memory pool i, or ends its routing. */
static void toggle_routing(int i, unsigned stream) {
    if (routed[i] >= 0) {
        /* The routing is over even when a driver error (an armed fault)
         * kept memory from going back. */
        xsa_status st = xsa_end_allocate_to_pool(0, mempool(i));
        check(st == XSA_SUCCESS || st == XSA_ERROR_DRIVER, "end_allocate_to_pool");
        routed[i] = -1;
        return;
    }
    if (!mempool_uses[i]) make_mempool(i);
    xsa_status st = xsa_begin_allocate_to_pool(0, mempool(i), routes, stream_of(stream));
    check(st == XSA_SUCCESS || st == XSA_ERROR_DRIVER, "begin_allocate_to_pool"); /* DRIVER: creating the device's pool */
    if (st != XSA_SUCCESS) return;
    routed[i] = (int)(stream % STREAMS);
    mempool_uses[i]++;
}

/* Drops a use of memory pool i (refused while its last use is a routing). */
static void release_mempool(int i) {
    if (!mempool_uses[i]) return;
    xsa_status st = xsa_mempool_release(0, mempool(i));
    if (st == XSA_ERROR_INVALID_VALUE) {
        check(routed[i] >= 0 && mempool_uses[i] == 1, "mempool_release refused");
        return;
    }
    check(st == XSA_SUCCESS || st == XSA_ERROR_DRIVER, "mempool_release"); /* the use is dropped either way */
    mempool_uses[i]--;
}

/* A restored block becomes a slot's allocation (freed at once if no slot
 * is empty: a free without stream uses makes no driver call). */
static void adopt(void *ptr, size_t size) {
    for (int i = 0; i < SLOTS; i++)
        if (!slots[i].ptr) {
            slots[i] = (slot){ptr, size, (uint8_t)i};
            ((uint8_t *)ptr)[0] = slots[i].fill;
            ((uint8_t *)ptr)[size - 1] = slots[i].fill;
            return;
        }
    check(xsa_free(ptr) == XSA_SUCCESS, "freeing a restored block");
}

/* Checkpoints memory pool i (take), or restores it to its last checkpoint. */
static void checkpoint_op(int i, bool take) {
    xsa_status st;
    if (take) {
        xsa_free_buffer(saved[i]);
        st = xsa_mempool_checkpoint(0, mempool(i), &saved[i], &n_saved[i]);
        /* INVALID: no such pool; DRIVER: creating the device's pool */
        check(st == XSA_SUCCESS || st == XSA_ERROR_INVALID_VALUE || st == XSA_ERROR_DRIVER, "mempool_checkpoint");
        return;
    }
    xsa_restore_delta d;
    st = xsa_mempool_restore(0, mempool(i), saved[i], n_saved[i], &d);
    check(st == XSA_SUCCESS || st == XSA_ERROR_INVALID_VALUE || st == XSA_ERROR_DRIVER, "mempool_restore");
    if (st != XSA_SUCCESS) return;
    for (size_t k = 0; k < d.n_freed; k++)
        for (int j = 0; j < SLOTS; j++)
            if (slots[j].ptr == d.freed[k]) slots[j].ptr = NULL;
    for (size_t k = 0; k < d.n_allocated; k++)
        for (size_t j = 0; j < n_saved[i]; j++)
            if (saved[i][j].ptr == d.allocated[k]) adopt(d.allocated[k], saved[i][j].size);
    xsa_restore_delta_free(&d);
}

/* Shares a slot's block as bytes, opens them in this process (as another
 * process would), checks the data through the opened mapping and closes it;
 * with `peer`, grants device 1 access to device 0's memory while it is open,
 * which must reach the opened mapping too. */
static void share_and_open(const slot *s, bool peer) {
    if (!s->ptr) return;
    void *bytes = NULL, *base = NULL;
    size_t len = 0, offset = 0;
    xsa_status st = xsa_ipc_share(s->ptr, &bytes, &len, &offset);
    /* NOT_SUPPORTED: IPC off or a classic block; DRIVER: an armed fault */
    check(st == XSA_SUCCESS || st == XSA_ERROR_NOT_SUPPORTED || st == XSA_ERROR_DRIVER ||
              st == XSA_ERROR_OUT_OF_MEMORY, "ipc_share");
    if (st != XSA_SUCCESS) return;
    st = xsa_ipc_open(bytes, len, 0, &base);
    check(st == XSA_SUCCESS || (fault_armed && (st == XSA_ERROR_DRIVER || st == XSA_ERROR_OUT_OF_MEMORY)), "ipc_open");
    xsa_free_buffer(bytes);
    if (st != XSA_SUCCESS) return;
    const uint8_t *b = (const uint8_t *)base + offset;
    check(b[0] == s->fill && b[s->size - 1] == s->fill, "the opened share shows other data");
    if (peer) {
        st = xsa_enable_peer_access(0, 1);
        check(st == XSA_SUCCESS || (fault_armed && st == XSA_ERROR_DRIVER), "enable_peer_access");
        check(st != XSA_SUCCESS || (xsa_sim_page_access((uintptr_t)base) & 2u), "an open share not granted to a peer");
    }
    st = xsa_ipc_close(base);
    check(st == XSA_SUCCESS || (fault_armed && st == XSA_ERROR_DRIVER), "ipc_close");
}

/* Settings changed at run time: refused only where a key set at
 * initialisation is in the way (IPC handles need expandable segments), or
 * for the armed fault (asking the device about virtual memory). */
static void change_settings(uint8_t pick) {
    static const char *const confs[] = {
        "expandable_segments:False", "expandable_segments:True", "max_split_size_mb:20",
        "roundup_power2_divisions:[64:8,>:2]", "garbage_collection_threshold:0.5", "",
        "page_recycling:False,max_non_split_rounding_mb:40", "page_recycling:True,expandable_segments:True",
        "helper_thread:False", "page_decay_ms:20",
    };
    xsa_status st = xsa_set_allocator_settings(confs[pick % (sizeof confs / sizeof confs[0])]);
    check(st == XSA_SUCCESS || st == XSA_ERROR_NOT_SUPPORTED || (fault_armed && st == XSA_ERROR_DRIVER),
          "set_allocator_settings");
}

static void run_op(input *in) {
    uint8_t op = next(in);
    switch (op % 10) {
    case 0:
    case 1: do_malloc(in); break;
    case 2: do_free(&slots[next(in) % SLOTS]); break;
    case 3: {
        slot *s = &slots[next(in) % SLOTS];
        if (op & 0x80)
            share_and_open(s, op & 0x40);
        else if (s->ptr)
            check(xsa_record_stream(s->ptr, stream_of(next(in))) == XSA_SUCCESS, "record_stream failed");
        break;
    }
    case 4:
        if (op & 0x80) { /* a helper round up to a second on */
            clock_ns += (uint64_t)next(in) * 4000000u;
            xsa_helper_poll();
        } else {
            xsa_empty_cache(); /* may fail on an armed fault */
        }
        break;
    case 5: if (op & 8) xsa_sim_complete_all(); else xsa_sim_complete_stream(stream_of(op >> 4)); break;
    case 6:
        if (op & 0x80)
            change_settings(next(in));
        else
            check(xsa_set_memory_fraction((next(in) % 17) / 16.0, 0) == XSA_SUCCESS, "set_memory_fraction");
        break;
    case 7: {
        uint8_t e = next(in), n = next(in);
        xsa_driver_entry entry = (xsa_driver_entry)(e % XSA_DRV_COUNT);
        /* One fault per input: the allocator undoes a failed step, it does
         * not claim to survive the undo failing too. */
        if (!fault_armed && (e & 0x40) && own_allocator)
            own.calls = 0, own.fail_at = n % 4 + 1;
        else if (!fault_armed)
            xsa_sim_fail_call(entry, n % 4 + 1, e & 0x80 ? XSA_CU_ERROR_OUT_OF_MEMORY : XSA_CU_ERROR_UNKNOWN);
        fault_armed = true;
        break;
    }
    case 8: toggle_routing(op >> 7, next(in)); break;
    case 9:
        if (op & 0x20)
            checkpoint_op(op >> 7, op & 0x40);
        else
            release_mempool(op >> 7);
        break;
    }
    /* The checker creates the device's pool if no call has yet: an armed
     * fault may fail that (XSA_ERROR_DRIVER), never an invariant. */
    xsa_status st = xsa_check_invariants(0);
    check(st == XSA_SUCCESS || st == XSA_ERROR_DRIVER, "invariants");
}

static void finish(void) {
    xsa_sim_clear_faults();
    own.fail_at = 0;
    for (int i = 0; i < MEMPOOLS; i++)
        if (routed[i] >= 0) toggle_routing(i, 0);
    for (int i = 0; i < SLOTS; i++) {
        do_free(&slots[i]);
        check(slots[i].ptr == NULL, "a free failed with no fault armed");
    }
    for (int i = 0; i < MEMPOOLS; i++) {
        while (mempool_uses[i]) release_mempool(i);
        xsa_free_buffer(saved[i]);
        saved[i] = NULL;
        n_saved[i] = 0;
    }
    xsa_helper_set_deferred_commit(0); /* the helper's jobs waiting for polls commit */
    xsa_status st = xsa_empty_cache();
    /* The helper's fault, reported once (an armed out-of-memory reads as one) */
    if (fault_armed && (st == XSA_ERROR_DRIVER || st == XSA_ERROR_OUT_OF_MEMORY)) st = xsa_empty_cache();
    check(st == XSA_SUCCESS, "final empty_cache");
    xsa_device_stats s;
    check(xsa_get_stats(0, &s) == XSA_SUCCESS, "get_stats");
    check(s.allocation[XSA_STAT_ALL].current == 0 && s.reserved_bytes[XSA_STAT_ALL].current == 0,
          "memory left after freeing everything");
    check(xsa_check_invariants(0) == XSA_SUCCESS, "final invariants");
    xsa_shutdown();
    xsa_sim_usage u;
    xsa_sim_get_usage(&u);
    check(u.handles + u.mapped_bytes + u.reservations + u.mem_allocs + u.events == 0, "driver resources leaked");
    check(own.live == 0 && own.released == own.created, "the own allocator's segments or releases are missing");
}

static const char *const confs[] = {
    "", "page_recycling:False,graph_capture_record_stream_reuse:True", "expandable_segments:False",
    "expandable_segments:False,max_split_size_mb:20,garbage_collection_threshold:0.5", "ipc_handles:True",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = {data, data + size};
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.capacity = CAPACITY;
    c.devices = 2; /* device 1 may be granted access to device 0's memory */
    check(xsa_sim_configure(&c) == XSA_CU_SUCCESS, "the simulated driver still holds resources");
    check(xsa_use_driver("sim") == XSA_SUCCESS, "use_driver");
    uint8_t conf = next(&in);
    clock_ns = 0;
    xsa_helper_set_manual(true);
    xsa_helper_set_clock(fuzz_clock, NULL);
    xsa_helper_set_deferred_commit(conf / 40 % 3);
    check(xsa_init(confs[conf % 5]) == XSA_SUCCESS, "init");
    own_allocator = conf / 5 & 1, lends = conf / 5 & 2, no_split = conf / 5 & 4;
    memset(&own, 0, sizeof own);
    memset(slots, 0, sizeof slots);
    fault_armed = false;
    for (int i = 0; i < MEMPOOLS; i++) {
        mempool_uses[i] = 0;
        routed[i] = -1;
    }
    while (in.p < in.end) run_op(&in);
    finish();
    return 0;
}
