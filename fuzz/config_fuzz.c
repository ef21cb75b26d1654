/*
 * config_fuzz: libFuzzer target for the XSALLOC_CONF parser (api/config).
 *
 * Any byte string (cut at its first NUL, as a C string would be) must
 * parse or be rejected without a crash or undefined behaviour, and the
 * parser's contract must hold: on success the message is empty and the
 * settings are in their documented ranges; on failure there is a message
 * and the output is untouched; parsing is deterministic.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"

static void check(int ok) {
    if (!ok) abort();
}

static void check_ranges(const xsa_pool_options *o) {
    check(o->memory_fraction >= 0.0 && o->memory_fraction <= 1.0);
    check(o->garbage_collection_threshold >= 0.0 && o->garbage_collection_threshold < 1.0);
    check(o->max_split_size >= ((size_t)20 << 20));
    check(o->max_non_split_rounding >= ((size_t)20 << 20));
    for (int i = 0; i < XSA_ROUNDUP_INTERVALS; i++) {
        size_t d = o->roundup_power2_divisions[i];
        check((d & (d - 1)) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    xsa_config a, b;
    memset(&a, 0xA5, sizeof a);
    memcpy(&b, &a, sizeof b);
    char err_a[512], err_b[512];
    int ok = xsa_config_parse(text, &a, err_a, sizeof err_a);
    check(ok == 0 || ok == 1);
    check(xsa_config_parse(text, &b, err_b, sizeof err_b) == ok);
    check(strcmp(err_a, err_b) == 0 && memcmp(&a, &b, sizeof a) == 0);
    if (ok) {
        check(err_a[0] == '\0');
        check_ranges(&a.pool);
    } else {
        xsa_config untouched;
        memset(&untouched, 0xA5, sizeof untouched);
        check(err_a[0] != '\0' && memcmp(&a, &untouched, sizeof a) == 0);
    }
    /* A tiny error buffer is always terminated. */
    char tiny[4];
    memset(tiny, 'x', sizeof tiny);
    xsa_config_parse(text, &b, tiny, sizeof tiny);
    check(memchr(tiny, '\0', sizeof tiny) != NULL);
    free(text);
    return 0;
}
