/*
 * ptr_map_test: the pool's pointer map (pool/ptr_map) against an oracle
 * array. Random inserts and removes of 512-byte-aligned keys, dense (one
 * segment's blocks a power of two apart) and sparse (far apart, high bits
 * set), through several doublings; every key's value and every absent key
 * must be the oracle's, and the map's checker (each key reachable from its
 * home slot, count right) runs after every step, so that a wrong backward
 * shift is caught at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "pool/ptr_map.h"

#define KEYS 5000

typedef struct oracle {
    uintptr_t key[KEYS];
    bool in[KEYS];
    size_t n_in;
} oracle;

static uint64_t next_rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void check_all(const xsa_ptr_map *m, const oracle *o) {
    char err[256];
    if (!xsa_ptr_map_check(m, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(m->count, o->n_in);
    for (size_t i = 0; i < KEYS; i++)
        assert_ptr_equal(xsa_ptr_map_get(m, o->key[i]), o->in[i] ? (void *)&o->key[i] : NULL);
}

/* Churn over KEYS keys made by key_of; the map grows as the live set does. */
static void churn(uintptr_t (*key_of)(size_t i, uint64_t *rng)) {
    static oracle o;
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < KEYS; i++) {
        o.key[i] = key_of(i, &rng);
        o.in[i] = false;
    }
    o.n_in = 0;
    xsa_ptr_map m;
    assert_true(xsa_ptr_map_init(&m));
    for (int step = 0; step < 40000; step++) {
        /* Mostly inserts early, balanced later: the live set climbs, then churns. */
        size_t i = next_rnd(&rng) % (step < 10000 ? KEYS : KEYS / 2);
        if (o.in[i]) {
            assert_ptr_equal(xsa_ptr_map_remove(&m, o.key[i]), &o.key[i]);
            o.in[i] = false;
            o.n_in--;
        } else {
            assert_null(xsa_ptr_map_remove(&m, o.key[i])); /* absent: nothing changes */
            assert_true(xsa_ptr_map_reserve_one(&m));
            xsa_ptr_map_insert_reserved(&m, o.key[i], &o.key[i]);
            o.in[i] = true;
            o.n_in++;
        }
        if (step % 97 == 0 || step < 2000) check_all(&m, &o);
        else {
            char err[256];
            if (!xsa_ptr_map_check(&m, err, sizeof err)) fail_msg("step %d: %s", step, err);
        }
    }
    assert_true(m.mask + 1 >= 4 * m.count);
    check_all(&m, &o);
    xsa_ptr_map_destroy(&m);
}

static uintptr_t dense_key(size_t i, uint64_t *rng) {
    (void)rng;
    return (uintptr_t)0x7f0000000000ull + i * 512; /* neighbours in one segment */
}

static uintptr_t pow2_key(size_t i, uint64_t *rng) {
    (void)rng;
    return (uintptr_t)0x200000000ull + (uintptr_t)(i % 64) * ((uintptr_t)2 << 20) + (uintptr_t)(i / 64) * ((uintptr_t)1 << 30);
}

static uintptr_t sparse_key(size_t i, uint64_t *rng) {
    (void)i;
    return (uintptr_t)((next_rnd(rng) | 1ull << 63) & ~(uint64_t)511);
}

static void test_dense_keys(void **state) {
    (void)state;
    churn(dense_key);
}

static void test_power_of_two_strides(void **state) {
    (void)state;
    churn(pow2_key);
}

static void test_sparse_keys(void **state) {
    (void)state;
    churn(sparse_key);
}

/* The checker itself fails on a key cut off from its home slot. */
static void test_checker_catches_cut_off_key(void **state) {
    (void)state;
    xsa_ptr_map m;
    assert_true(xsa_ptr_map_init(&m));
    uintptr_t key = 0x7f0000001000;
    assert_true(xsa_ptr_map_reserve_one(&m));
    xsa_ptr_map_insert_reserved(&m, key, &key);
    size_t home = xsa_ptr_map_home(&m, key);
    /* Move it two slots on, leaving an empty slot in its probe run. */
    m.slots[(home + 2) & m.mask] = m.slots[home];
    m.slots[home].key = 0;
    char err[256];
    assert_int_equal(xsa_ptr_map_check(&m, err, sizeof err), 0);
    m.slots[home] = m.slots[(home + 2) & m.mask];
    m.slots[(home + 2) & m.mask].key = 0;
    assert_int_equal(xsa_ptr_map_check(&m, err, sizeof err), 1);
    m.count++;
    assert_int_equal(xsa_ptr_map_check(&m, err, sizeof err), 0);
    xsa_ptr_map_destroy(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_keys),
        cmocka_unit_test(test_power_of_two_strides),
        cmocka_unit_test(test_sparse_keys),
        cmocka_unit_test(test_checker_catches_cut_off_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
