/*
 * capture_probe: stream capture on the real driver against the simulated
 * one, case by case.
 *
 * Design: a standalone program for a machine with a GPU (run_probe.sh
 * builds and runs it after driver_probe). Each case is one function that
 * drives a capture through an xsa_driver table and notes the result of
 * every call; it runs once on the real driver (non-blocking streams from
 * cuStreamCreate, memsets as the captured work) and once on the simulated
 * one (made-up streams, xsa_sim_launch as the work, work completing as
 * queued), and the two lists of results are printed side by side:
 * `capture <case>: cuda <codes> sim <codes>`, with MISMATCH where they
 * differ. The simulator's capture rules are partly CUDA's documentation
 * read strictly (xsalloc/sim.h); a mismatch says which rule to correct. Exits
 * 1 on any mismatch, 0 otherwise; without a GPU only the simulated column
 * is printed. Every case ends its capture and frees what it made.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/driver_cuda.h"
#include "xsalloc/sim.h"

#define MAX_CODES 32

typedef struct {
    xsa_driver *d;
    xsa_stream s1, s2, s3;
    xsa_devptr buf; /* 1 MiB of cuMemAlloc memory, the work's target */
    xsa_cu_result (*work)(xsa_stream s, xsa_devptr p, size_t size);
    int codes[MAX_CODES], n;
} run;

static void note(run *r, xsa_cu_result code) {
    if (r->n < MAX_CODES) r->codes[r->n++] = code;
}

/* ---- the real driver's streams and work ------------------------------- */

typedef int (*stream_create_fn)(void **stream, unsigned flags);
typedef int (*memset_fn)(xsa_devptr p, unsigned char v, size_t n, void *stream);
static stream_create_fn cu_stream_create;
static memset_fn cu_memset;

static xsa_cu_result cuda_work(xsa_stream s, xsa_devptr p, size_t size) { return cu_memset(p, 0, size, s); }

/* The library loaded libcuda.so.1 already; these two are the probe's own
 * (its streams live as long as the process). */
static int load_cuda_extras(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return 0;
    cu_stream_create = (stream_create_fn)dlsym(lib, "cuStreamCreate");
    cu_memset = (memset_fn)dlsym(lib, "cuMemsetD8Async");
    return cu_stream_create && cu_memset;
}

/* ---- helpers every case uses ---------------------------------------- */

static xsa_event event(run *r) {
    xsa_event e = NULL;
    note(r, XSA_DRV(r->d, event_create, &e, 0));
    return e;
}

/* Ends the capture on `s` (noting the result) and destroys any graph. */
static void end(run *r, xsa_stream s) {
    xsa_graph g = NULL;
    note(r, XSA_DRV(r->d, stream_end_capture, s, &g));
    if (g) XSA_DRV(r->d, graph_destroy, g);
}

/* A capture on s1 with one piece of work, recorded into event e. */
static void begin_with_event(run *r, xsa_event e) {
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, r->work(r->s1, r->buf, 4096));
    note(r, XSA_DRV(r->d, event_record, e, r->s1));
}

/* ---- the cases -------------------------------------------------------- */

static void begin_errors(run *r) {
    note(r, XSA_DRV(r->d, stream_begin_capture, NULL));
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    xsa_graph g = NULL;
    note(r, XSA_DRV(r->d, stream_end_capture, r->s2, &g));
    end(r, r->s1);
}

static void captured_event(run *r, int sync) {
    xsa_event e = event(r);
    begin_with_event(r, e);
    note(r, sync ? XSA_DRV(r->d, event_synchronize, e) : XSA_DRV(r->d, event_query, e));
    end(r, r->s1);
    XSA_DRV(r->d, event_destroy, e);
}
static void captured_event_query(run *r) { captured_event(r, 0); }
static void captured_event_sync(run *r) { captured_event(r, 1); }

/* After the capture ended: is the event still "captured"? */
static void captured_event_after_end(run *r) {
    xsa_event e = event(r);
    begin_with_event(r, e);
    end(r, r->s1);
    note(r, XSA_DRV(r->d, event_query, e));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s2, e));
    note(r, XSA_DRV(r->d, stream_synchronize, r->s2));
    XSA_DRV(r->d, event_destroy, e);
}

/* Calls on work outside the capture, while it is under way (global mode). */
static void outside_call(run *r, int how) {
    xsa_event e = event(r), mine = event(r);
    note(r, XSA_DRV(r->d, event_record, e, r->s2));
    note(r, XSA_DRV(r->d, stream_synchronize, r->s2));
    begin_with_event(r, mine);
    note(r, how == 0 ? XSA_DRV(r->d, event_query, e)
          : how == 1 ? XSA_DRV(r->d, event_synchronize, e)
          : how == 2 ? XSA_DRV(r->d, stream_query, r->s2)
          : how == 3 ? XSA_DRV(r->d, stream_synchronize, r->s2)
          : how == 4 ? XSA_DRV(r->d, stream_query, r->s1)
                     : XSA_DRV(r->d, stream_wait_event, r->s1, e));
    end(r, r->s1);
    XSA_DRV(r->d, event_destroy, e);
    XSA_DRV(r->d, event_destroy, mine);
}
static void other_event_query(run *r) { outside_call(r, 0); }
static void other_event_sync(run *r) { outside_call(r, 1); }
static void other_stream_query(run *r) { outside_call(r, 2); }
static void other_stream_sync(run *r) { outside_call(r, 3); }
static void capturing_stream_query(run *r) { outside_call(r, 4); }
static void wait_outside_event(run *r) { outside_call(r, 5); }

static void wait_never_recorded(run *r) {
    xsa_event e = event(r);
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s1, e));
    end(r, r->s1);
    XSA_DRV(r->d, event_destroy, e);
}

/* Frees what the capture refused to free. */
static void memory_calls(run *r) {
    xsa_devptr before = 0, during = 0, va = 0;
    xsa_mem_handle h = 0;
    size_t g = 0;
    int dev = 0;
    note(r, XSA_DRV(r->d, mem_get_granularity, &g, 0, 0));
    note(r, XSA_DRV(r->d, mem_alloc, &before, 1 << 20, 0));
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, mem_alloc, &during, 1 << 20, 0));
    xsa_cu_result freed_during = XSA_DRV(r->d, mem_free, during);
    note(r, freed_during);
    note(r, XSA_DRV(r->d, mem_create, &h, g, 0, 0));
    note(r, XSA_DRV(r->d, mem_address_reserve, &va, g, 0));
    note(r, XSA_DRV(r->d, mem_map, va, g, 0, h));
    note(r, XSA_DRV(r->d, mem_set_access, va, g, &dev, 1));
    note(r, XSA_DRV(r->d, mem_unmap, va, g));
    note(r, XSA_DRV(r->d, mem_release, h));
    note(r, XSA_DRV(r->d, mem_address_free, va, g));
    xsa_cu_result freed_before = XSA_DRV(r->d, mem_free, before);
    note(r, freed_before);
    end(r, r->s1);
    if (freed_during) XSA_DRV(r->d, mem_free, during);
    if (freed_before) XSA_DRV(r->d, mem_free, before);
}

/* The same calls from a thread in relaxed mode (as PyTorch makes
 * cudaMalloc during capture): allowed, and the capture ends fine; a
 * captured event's query is refused still. */
static void relaxed_memory_calls(run *r) {
    xsa_devptr before = 0, during = 0;
    xsa_event e = event(r);
    note(r, XSA_DRV(r->d, mem_alloc, &before, 1 << 20, 0));
    begin_with_event(r, e);
    int mode = XSA_CAPTURE_MODE_RELAXED;
    note(r, XSA_DRV(r->d, thread_exchange_capture_mode, &mode));
    note(r, mode);
    note(r, XSA_DRV(r->d, mem_alloc, &during, 1 << 20, 0));
    note(r, XSA_DRV(r->d, mem_free, before));
    note(r, XSA_DRV(r->d, event_query, e));
    note(r, XSA_DRV(r->d, thread_exchange_capture_mode, &mode));
    note(r, mode);
    end(r, r->s1);
    if (during) note(r, XSA_DRV(r->d, mem_free, during));
    XSA_DRV(r->d, event_destroy, e);
}

static void fork_join(run *r) {
    xsa_event fork = event(r), back = event(r);
    int status = -1;
    uint64_t id1 = 0, id2 = 0;
    const xsa_graph_node *deps = NULL;
    size_t n = 99, m = 99;
    begin_with_event(r, fork);
    note(r, XSA_DRV(r->d, stream_wait_event, r->s2, fork));
    note(r, XSA_DRV(r->d, stream_get_capture_info, r->s2, &status, &id2, &deps, &n));
    note(r, status);
    note(r, (int)n);
    note(r, XSA_DRV(r->d, graph_node_get_dependencies, n ? deps[0] : NULL, NULL, &m));
    note(r, (int)m);
    note(r, r->work(r->s2, r->buf + 8192, 4096));
    note(r, r->work(r->s1, r->buf + 16384, 4096));
    note(r, XSA_DRV(r->d, event_record, back, r->s2));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s1, back));
    note(r, XSA_DRV(r->d, stream_get_capture_info, r->s1, &status, &id1, &deps, &n));
    note(r, (int)n);
    note(r, id1 == id2);
    xsa_graph g = NULL;
    xsa_graph_exec e = NULL;
    note(r, XSA_DRV(r->d, stream_end_capture, r->s1, &g));
    note(r, XSA_DRV(r->d, graph_instantiate, &e, g));
    note(r, XSA_DRV(r->d, graph_launch, e, r->s3));
    note(r, XSA_DRV(r->d, stream_synchronize, r->s3));
    XSA_DRV(r->d, graph_exec_destroy, e);
    XSA_DRV(r->d, graph_destroy, g);
    XSA_DRV(r->d, event_destroy, fork);
    XSA_DRV(r->d, event_destroy, back);
}

/* What capture-time reuse reads (pool/capture_reuse.c): the terminal
 * counts of a fork made before any node (and waited on twice), of the
 * origin after joining two streams (one of them twice), the join node's
 * dependency count, and a one-entry buffer for its two dependencies. */
static void fork_join_terminals(run *r) {
    xsa_event fork = event(r), back2 = event(r), back3 = event(r);
    int status = -1;
    const xsa_graph_node *deps = NULL;
    size_t n = 99, m = 99;
    note(r, XSA_DRV(r->d, stream_begin_capture, r->s1));
    note(r, XSA_DRV(r->d, event_record, fork, r->s1)); /* no node on s1 yet */
    note(r, XSA_DRV(r->d, stream_wait_event, r->s2, fork));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s2, fork));
    note(r, XSA_DRV(r->d, stream_get_capture_info, r->s2, &status, NULL, &deps, &n));
    note(r, status);
    note(r, (int)n);
    note(r, r->work(r->s2, r->buf + 8192, 4096));
    note(r, XSA_DRV(r->d, stream_get_capture_info, r->s2, &status, NULL, &deps, &n));
    note(r, (int)n);
    note(r, XSA_DRV(r->d, graph_node_get_dependencies, n ? deps[0] : NULL, NULL, &m));
    note(r, (int)m); /* a root */
    note(r, XSA_DRV(r->d, event_record, back2, r->s2));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s3, fork));
    note(r, r->work(r->s3, r->buf + 16384, 4096));
    note(r, XSA_DRV(r->d, event_record, back3, r->s3));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s1, back2));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s1, back3));
    note(r, XSA_DRV(r->d, stream_wait_event, r->s1, back2)); /* again */
    note(r, XSA_DRV(r->d, stream_get_capture_info, r->s1, &status, NULL, &deps, &n));
    note(r, (int)n);
    note(r, r->work(r->s1, r->buf, 4096));
    note(r, XSA_DRV(r->d, stream_get_capture_info, r->s1, &status, NULL, &deps, &n));
    xsa_graph_node join = n ? deps[0] : NULL, one = NULL;
    note(r, XSA_DRV(r->d, graph_node_get_dependencies, join, NULL, &m));
    note(r, (int)m);
    m = 1;
    note(r, XSA_DRV(r->d, graph_node_get_dependencies, join, &one, &m));
    note(r, (int)m);
    end(r, r->s1);
    XSA_DRV(r->d, event_destroy, fork);
    XSA_DRV(r->d, event_destroy, back2);
    XSA_DRV(r->d, event_destroy, back3);
}

static void unjoined_and_unmatched(run *r) {
    xsa_event fork = event(r);
    for (int unmatched = 0; unmatched < 2; unmatched++) {
        begin_with_event(r, fork);
        note(r, XSA_DRV(r->d, stream_wait_event, r->s2, fork));
        note(r, r->work(r->s2, r->buf + 8192, 4096));
        if (unmatched) end(r, r->s2);
        end(r, r->s1);
    }
    XSA_DRV(r->d, event_destroy, fork);
}

static void legacy_stream_joins(run *r) {
    xsa_event fork = event(r);
    begin_with_event(r, fork);
    note(r, XSA_DRV(r->d, stream_wait_event, NULL, fork));
    end(r, r->s1);
    XSA_DRV(r->d, event_destroy, fork);
}

static const struct {
    const char *name;
    void (*fn)(run *r);
} cases[] = {
    {"begin_errors", begin_errors},
    {"captured_event_query", captured_event_query},
    {"captured_event_sync", captured_event_sync},
    {"captured_event_after_end", captured_event_after_end},
    {"other_event_query", other_event_query},
    {"other_event_sync", other_event_sync},
    {"other_stream_query", other_stream_query},
    {"other_stream_sync", other_stream_sync},
    {"capturing_stream_query", capturing_stream_query},
    {"wait_outside_event", wait_outside_event},
    {"wait_never_recorded", wait_never_recorded},
    {"memory_calls", memory_calls},
    {"relaxed_memory_calls", relaxed_memory_calls},
    {"fork_join", fork_join},
    {"fork_join_terminals", fork_join_terminals},
    {"unjoined_and_unmatched", unjoined_and_unmatched},
    {"legacy_stream_joins", legacy_stream_joins},
};

/* ---- the two drivers ---------------------------------------------------- */

static int setup_cuda(run *r) {
    char err[256] = "";
    r->d = xsa_driver_cuda(err, sizeof err);
    if (!r->d) {
        printf("capture probe: no real driver (%s): simulated column only\n", err);
        return 0;
    }
    size_t f, t;
    if (XSA_DRV(r->d, mem_get_info, 0, &f, &t) || !load_cuda_extras()) { /* the primary context is current after */
        printf("capture probe: cannot set up streams on the real driver\n");
        exit(2);
    }
    xsa_stream *s[3] = {&r->s1, &r->s2, &r->s3};
    for (int i = 0; i < 3; i++)
        if (cu_stream_create(s[i], 1 /* CU_STREAM_NON_BLOCKING */)) exit(2);
    if (XSA_DRV(r->d, mem_alloc, &r->buf, 1 << 20, 0)) exit(2);
    r->work = cuda_work;
    return 1;
}

static void setup_sim(run *r) {
    xsa_sim_config c;
    xsa_sim_default_config(&c);
    c.eager_events = 1; /* the GPU is done with the probe's work before the next call */
    if (xsa_sim_configure(&c)) exit(2);
    r->d = xsa_driver_sim();
    r->s1 = (xsa_stream)0x1001;
    r->s2 = (xsa_stream)0x1002;
    r->s3 = (xsa_stream)0x1003;
    if (XSA_DRV(r->d, mem_alloc, &r->buf, 1 << 20, 0)) exit(2);
    r->work = xsa_sim_launch;
}

static void print_codes(const run *r) {
    for (int i = 0; i < r->n; i++) printf(" %d", r->codes[i]);
}

int main(void) {
    run cuda = {0}, sim = {0};
    int have_gpu = setup_cuda(&cuda), mismatches = 0;
    setup_sim(&sim);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sim.n = cuda.n = 0;
        cases[i].fn(&sim);
        printf("capture %s: sim", cases[i].name);
        print_codes(&sim);
        if (have_gpu) {
            cases[i].fn(&cuda);
            bool same = cuda.n == sim.n && !memcmp(cuda.codes, sim.codes, (size_t)sim.n * sizeof *sim.codes);
            printf(" | cuda");
            print_codes(&cuda);
            if (!same) printf("  MISMATCH");
            mismatches += !same;
        }
        printf("\n");
    }
    char err[256];
    if (!xsa_sim_check(err, sizeof err)) {
        printf("capture probe: xsa_sim_check: %s\n", err);
        return 1;
    }
    printf("capture probe: %d mismatches\n", mismatches);
    return mismatches ? 1 : 0;
}
