/*
 * free_set_test: the free set (pool/free_set) against a brute-force oracle,
 * a sorted array of the same blocks. Random insert, erase, rekey (nearby
 * keys, as splits and merges give, and any), lower_bound, next, prev and
 * first over several streams (attached and detached as segments come and
 * go) and sizes from 512 B to 2^40 B: the exact classes,
 * both sides of class boundaries, equal sizes ordered by address, huge
 * blocks. Every result must be the oracle's, and the free set's own checker
 * runs after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "pool/free_set.h"

#define N_BLOCKS 600
#define STEPS 40000

static xsa_stream const streams[] = {NULL, (xsa_stream)0x10, (xsa_stream)0x1001, (xsa_stream)0x7f0000001000,
                                     (xsa_stream)UINTPTR_MAX};
#define N_STREAMS (sizeof streams / sizeof streams[0])

typedef struct state {
    xsa_free_set set;
    xsa_block blocks[N_BLOCKS];
    xsa_block *in[N_BLOCKS]; /* the oracle: the blocks in the set, in key order */
    size_t n_in, bytes;
    size_t segments[N_STREAMS], in_stream[N_STREAMS];
    uint64_t rng, next_ptr;
    char err[512];
} state;

static uint64_t rnd(state *t) {
    t->rng ^= t->rng << 13;
    t->rng ^= t->rng >> 7;
    t->rng ^= t->rng << 17;
    return t->rng;
}

static int cmp_key(xsa_stream s1, size_t z1, uintptr_t p1, const xsa_block *b) {
    if ((uintptr_t)s1 != (uintptr_t)b->stream) return (uintptr_t)s1 < (uintptr_t)b->stream ? -1 : 1;
    if (z1 != b->size) return z1 < b->size ? -1 : 1;
    if (p1 != b->ptr) return p1 < b->ptr ? -1 : 1;
    return 0;
}

/* Position of the first block of the oracle with key >= (stream, size, ptr)
 * (or > with `after`). */
static size_t oracle_pos(const state *t, xsa_stream stream, size_t size, uintptr_t ptr, bool after) {
    size_t i = 0;
    while (i < t->n_in && cmp_key(stream, size, ptr, t->in[i]) > (after ? -1 : 0)) i++;
    return i;
}

static xsa_block *oracle_at(const state *t, size_t i) { return i < t->n_in ? t->in[i] : NULL; }

static size_t stream_index(xsa_stream s) {
    size_t i = 0;
    while (streams[i] != s) i++;
    return i;
}

/* Sizes where the classes are interesting: the exact classes and the
 * first log-linear ones, both sides of class boundaries, powers of two,
 * a few sizes shared by many blocks, anything up to 2^40. */
static size_t draw_size(state *t) {
    static const size_t common[] = {512, 1024, 32 << 10, 1 << 20, 2 << 20, 20 << 20, 33 << 20, (size_t)1 << 40};
    switch (rnd(t) % 6) {
    case 0:
        return 512 * (1 + rnd(t) % 100);
    case 1: {
        unsigned e = 6 + (unsigned)(rnd(t) % 26); /* boundaries of 16 steps between 2^e and 2^(e+1) units */
        size_t size = (((size_t)16 + rnd(t) % 16) << (e - 4)) * 512;
        return size - 512 + 512 * (rnd(t) % 3);
    }
    case 2:
        return 512 * (1 + rnd(t) % 4096);
    case 3:
        return (size_t)1 << (9 + rnd(t) % 32);
    case 4:
        return common[rnd(t) % (sizeof common / sizeof common[0])];
    default:
        return 512 * (1 + rnd(t) % ((uint64_t)1 << 31));
    }
}

/* Query sizes: block sizes, and ones no block has (0, odd, the largest). */
static size_t draw_query(state *t) {
    switch (rnd(t) % 8) {
    case 0:
        return rnd(t) % 3 ? rnd(t) % ((size_t)1 << (rnd(t) % 42)) : 0;
    case 1:
        return rnd(t) % 2 ? SIZE_MAX : ((size_t)1 << 40) + 1;
    default:
        return draw_size(t);
    }
}

static void check_same(const char *op, const xsa_block *got, const xsa_block *want) {
    if (got != want)
        fail_msg("%s: got %p (size %zu), the oracle says %p (size %zu)", op, (void *)got, got ? got->size : 0,
                 (void *)want, want ? want->size : 0);
}

static void check_all(state *t) {
    if (!xsa_free_set_check(&t->set, t->err, sizeof t->err)) fail_msg("%s", t->err);
    assert_int_equal(t->set.count, t->n_in);
    assert_int_equal(t->set.bytes, t->bytes);
    for (size_t s = 0; s < N_STREAMS; s++) assert_int_equal(xsa_free_set_segments(&t->set, streams[s]), t->segments[s]);
}

/* Both walks, whole. */
static void check_walks(state *t) {
    const xsa_block *b = xsa_free_set_first(&t->set);
    for (size_t i = 0; i < t->n_in; i++, b = xsa_free_set_next(&t->set, b)) check_same("walk next", b, t->in[i]);
    check_same("walk end", b, NULL);
    b = t->n_in ? t->in[t->n_in - 1] : NULL;
    for (size_t i = t->n_in; i-- > 0; b = xsa_free_set_prev(&t->set, b)) check_same("walk prev", b, t->in[i]);
    check_same("walk start", b, NULL);
}

/* The oracle's array: b put at its key's place, the block at i taken out. */
static void oracle_add(state *t, xsa_block *b) {
    size_t i = oracle_pos(t, b->stream, b->size, b->ptr, false);
    memmove(&t->in[i + 1], &t->in[i], (t->n_in - i) * sizeof *t->in);
    t->in[i] = b;
    t->n_in++;
}

static void oracle_remove(state *t, size_t i) {
    memmove(&t->in[i], &t->in[i + 1], (t->n_in - i - 1) * sizeof *t->in);
    t->n_in--;
}

static void do_insert(state *t) {
    size_t s = rnd(t) % N_STREAMS;
    if (!t->segments[s]) return;
    xsa_block *b = &t->blocks[rnd(t) % N_BLOCKS];
    if (b->in_free_set) return;
    b->stream = streams[s];
    b->size = draw_size(t);
    b->ptr = (uintptr_t)(rnd(t) % 1000) << 32 | ++t->next_ptr; /* unique, random order */
    xsa_free_set_insert(&t->set, b);
    oracle_add(t, b);
    t->bytes += b->size;
    t->in_stream[s]++;
}

static void do_erase(state *t) {
    if (!t->n_in) return;
    size_t i = rnd(t) % t->n_in;
    xsa_block *b = t->in[i];
    xsa_free_set_erase(&t->set, b);
    assert_false(b->in_free_set);
    oracle_remove(t, i);
    t->bytes -= b->size;
    t->in_stream[stream_index(b->stream)]--;
}

/* A member takes a new key on its stream: mostly a nearby one (as a split
 * rest or a merge gives, often keeping its place), else any size. */
static void do_rekey(state *t) {
    if (!t->n_in) return;
    size_t i = rnd(t) % t->n_in;
    xsa_block *b = t->in[i];
    size_t size = b->size;
    uintptr_t ptr = b->ptr;
    switch (rnd(t) % 4) {
    case 0: /* the rest of a split: smaller, from a higher address */
        if (size > 512) size -= 512 * (1 + rnd(t) % (size / 512 - 1 < 8 ? size / 512 - 1 : 8));
        ptr = (ptr & ~(uintptr_t)0xffffffff) | ++t->next_ptr;
        break;
    case 1: /* grown by a merge with the block after it */
        size += 512 * (1 + rnd(t) % 8);
        break;
    case 2: /* grown by a merge with the block before it */
        size += 512 * (1 + rnd(t) % 8);
        ptr = (uintptr_t)(rnd(t) % 1000) << 32 | ++t->next_ptr;
        break;
    default:
        size = draw_size(t);
    }
    oracle_remove(t, i);
    t->bytes += size - b->size;
    xsa_free_set_rekey(&t->set, b, ptr, size);
    assert_true(b->in_free_set);
    assert_true(b->size == size && b->ptr == ptr);
    oracle_add(t, b);
}

/* A member, or (half the time) a key that need not be in the set. */
static xsa_block draw_probe(state *t) {
    xsa_block probe;
    memset(&probe, 0, sizeof probe);
    if (t->n_in && rnd(t) % 2) return *t->in[rnd(t) % t->n_in];
    probe.stream = streams[rnd(t) % N_STREAMS];
    probe.size = draw_query(t);
    probe.ptr = (uintptr_t)(rnd(t) % 1001) << 32 | rnd(t) % (t->next_ptr + 2);
    return probe;
}

static void do_step(state *t, unsigned grow) {
    unsigned op = (unsigned)(rnd(t) % 100);
    if (op < grow) {
        do_insert(t);
    } else if (op < 60) {
        do_erase(t);
    } else if (op < 67) {
        do_rekey(t);
    } else if (op < 75) {
        xsa_stream stream = streams[rnd(t) % N_STREAMS];
        size_t size = draw_query(t);
        check_same("lower_bound", xsa_free_set_lower_bound(&t->set, stream, size),
                   oracle_at(t, oracle_pos(t, stream, size, 0, false)));
    } else if (op < 84) {
        xsa_block probe = draw_probe(t);
        check_same("next", xsa_free_set_next(&t->set, &probe),
                   oracle_at(t, oracle_pos(t, probe.stream, probe.size, probe.ptr, true)));
    } else if (op < 93) {
        xsa_block probe = draw_probe(t);
        size_t i = oracle_pos(t, probe.stream, probe.size, probe.ptr, false);
        check_same("prev", xsa_free_set_prev(&t->set, &probe), i ? t->in[i - 1] : NULL);
    } else if (op < 95) {
        check_same("first", xsa_free_set_first(&t->set), oracle_at(t, 0));
    } else if (op < 98) {
        size_t s = rnd(t) % N_STREAMS;
        assert_true(xsa_free_set_attach(&t->set, streams[s]));
        t->segments[s]++;
    } else {
        /* A stream's last segment goes only once its blocks have. */
        size_t s = rnd(t) % N_STREAMS;
        if (!t->segments[s] || (t->segments[s] == 1 && t->in_stream[s])) return;
        xsa_free_set_detach(&t->set, streams[s]);
        t->segments[s]--;
    }
}

static void test_random_against_oracle(void **unused) {
    (void)unused;
    state *t = calloc(1, sizeof *t);
    assert_non_null(t);
    t->rng = 0x9E3779B97F4A7C15ull;
    check_all(t);
    check_walks(t);
    for (int step = 0; step < STEPS; step++) {
        /* Phases fill the set up and drain it again. */
        do_step(t, (step / 4000) % 2 ? 25 : 50);
        check_all(t);
        if (step % 200 == 0) check_walks(t);
    }
    check_walks(t);
    while (t->n_in) do_erase(t);
    for (size_t s = 0; s < N_STREAMS; s++)
        for (; t->segments[s]; t->segments[s]--) xsa_free_set_detach(&t->set, streams[s]);
    assert_int_equal(t->set.n_streams, 0);
    xsa_free_set_destroy(&t->set);
    free(t);
}

/* Lookups on streams with no index: the first block of a later stream. */
static void test_streams_without_index(void **unused) {
    (void)unused;
    xsa_free_set set;
    memset(&set, 0, sizeof set);
    assert_null(xsa_free_set_first(&set));
    assert_null(xsa_free_set_lower_bound(&set, NULL, 512));
    assert_true(xsa_free_set_attach(&set, (xsa_stream)0x2000));
    xsa_block b;
    memset(&b, 0, sizeof b);
    b.stream = (xsa_stream)0x2000;
    b.size = 1 << 20;
    b.ptr = 0x10000;
    xsa_free_set_insert(&set, &b);
    assert_ptr_equal(xsa_free_set_lower_bound(&set, (xsa_stream)0x1000, SIZE_MAX), &b);
    assert_null(xsa_free_set_lower_bound(&set, (xsa_stream)0x3000, 0));
    assert_null(xsa_free_set_lower_bound(&set, (xsa_stream)0x2000, (1 << 20) + 1));
    xsa_block probe = b;
    probe.stream = (xsa_stream)0x1000;
    assert_ptr_equal(xsa_free_set_next(&set, &probe), &b);
    assert_null(xsa_free_set_prev(&set, &probe));
    probe.stream = (xsa_stream)0x3000;
    assert_ptr_equal(xsa_free_set_prev(&set, &probe), &b);
    char err[256];
    assert_true(xsa_free_set_check(&set, err, sizeof err));
    xsa_free_set_erase(&set, &b);
    xsa_free_set_detach(&set, (xsa_stream)0x2000);
    assert_int_equal(set.n_streams, 0);
    assert_true(xsa_free_set_check(&set, err, sizeof err));
    xsa_free_set_destroy(&set);
}

/* The checker sees a block whose size changed while in the set. */
static void test_checker_catches_a_moved_size(void **unused) {
    (void)unused;
    xsa_free_set set;
    memset(&set, 0, sizeof set);
    assert_true(xsa_free_set_attach(&set, NULL));
    xsa_block b;
    memset(&b, 0, sizeof b);
    b.size = 4 << 20;
    b.ptr = 0x10000;
    xsa_free_set_insert(&set, &b);
    char err[256];
    assert_true(xsa_free_set_check(&set, err, sizeof err));
    b.size = 8 << 20;
    assert_false(xsa_free_set_check(&set, err, sizeof err));
    assert_non_null(strstr(err, "class"));
    b.size = 4 << 20;
    xsa_free_set_erase(&set, &b);
    xsa_free_set_destroy(&set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_against_oracle),
        cmocka_unit_test(test_streams_without_index),
        cmocka_unit_test(test_checker_catches_a_moved_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
