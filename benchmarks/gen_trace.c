/*
 * gen_trace: writes a synthetic multi-stream allocation trace with
 * record_stream use, for replays that the real single-stream traces cannot
 * exercise (per-stream caching, deferred frees).
 *
 *   gen_trace --seed N --events N --streams K --out FILE
 *
 * Design: a bounded live set walked by a seeded xorshift generator, in
 * alternating grow and shrink phases (like the forward and backward passes
 * of training) so that reserved memory is stressed by churn, not only by a
 * monotone climb. Sizes are log-uniform over 512 B - 64 MiB with a bias to
 * small ones: the binary exponent is drawn as 9 + floor(17 u^2), the
 * mantissa uniformly, with integer and IEEE arithmetic only (no libm), so a
 * seed gives the same file on every machine. Allocations go to random
 * streams; some live blocks are record_stream'd onto other streams before
 * their free. FILE ending in .gz is gzip'd, else plain text.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MAX_LIVE 512
#define MAX_LIVE_BYTES (8ull << 30)
#define MAX_STREAMS 64 /* one bit per stream in a block's recorded mask */

typedef struct block {
    uint32_t id;
    uint32_t stream;
    uint64_t bytes;
    uint64_t recorded; /* streams this block was recorded on */
} block;

typedef struct gen {
    uint64_t rng;
    int streams;
    block live[MAX_LIVE];
    int n_live;
    uint64_t live_bytes;
    uint32_t next_id;
    int growing;       /* phase: 1 grow, 0 shrink */
    long phase_left;   /* events left in the phase */
    gzFile out;
} gen;

static uint64_t next(gen *g) {
    uint64_t x = g->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t below(gen *g, uint64_t n) { return next(g) % n; }

static uint64_t draw_size(gen *g) {
    double u = (double)(next(g) >> 11) * 0x1.0p-53;
    int e = 9 + (int)(17.0 * u * u);
    return ((uint64_t)1 << e) + below(g, (uint64_t)1 << e);
}

static void emit_alloc(gen *g) {
    block *b = &g->live[g->n_live++];
    b->id = g->next_id++;
    b->stream = (uint32_t)below(g, (uint64_t)g->streams);
    b->bytes = draw_size(g);
    b->recorded = 0;
    g->live_bytes += b->bytes;
    gzprintf(g->out, "a %u %llu %u\n", b->id, (unsigned long long)b->bytes, b->stream);
}

static void emit_free(gen *g) {
    int i = (int)below(g, (uint64_t)g->n_live);
    gzprintf(g->out, "f %u\n", g->live[i].id);
    g->live_bytes -= g->live[i].bytes;
    g->live[i] = g->live[--g->n_live];
}

/* Records a random live block on a stream other than its own it was not yet
 * recorded on; 0 if the chosen block has no such stream left. */
static int emit_record(gen *g) {
    block *b = &g->live[below(g, (uint64_t)g->n_live)];
    uint32_t s = (uint32_t)below(g, (uint64_t)g->streams);
    for (int tries = 0; tries < g->streams; tries++, s = (s + 1) % (uint32_t)g->streams) {
        if (s == b->stream || (b->recorded >> s & 1)) continue;
        b->recorded |= 1ull << s;
        gzprintf(g->out, "r %u %u\n", b->id, s);
        return 1;
    }
    return 0;
}

static void step(gen *g) {
    if (g->phase_left-- <= 0) {
        g->growing = !g->growing;
        g->phase_left = 1000 + (long)below(g, 2000);
    }
    int full = g->n_live == MAX_LIVE || g->live_bytes >= MAX_LIVE_BYTES;
    if (g->n_live == 0 || (!full && below(g, 100) < (g->growing ? 62u : 38u))) {
        emit_alloc(g);
        return;
    }
    /* About one free in five is preceded by a record_stream. */
    if (g->streams > 1 && below(g, 5) == 0 && emit_record(g)) return;
    emit_free(g);
}

static int parse_long(const char *flag, const char *v, long min, long *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || x < min) {
        fprintf(stderr, "gen_trace: %s needs an integer >= %ld, got '%s'\n", flag, min, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    long seed = 1, events = 20000, streams = 3;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "--seed") == 0) bad = parse_long(a, v, 0, &seed), i++;
        else if (strcmp(a, "--events") == 0) bad = parse_long(a, v, 1, &events), i++;
        else if (strcmp(a, "--streams") == 0) bad = parse_long(a, v, 1, &streams), i++;
        else if (strcmp(a, "--out") == 0 && v) out = v, i++;
        else bad = 1, fprintf(stderr, "gen_trace: unknown argument '%s'\n", a);
        if (bad) return 2;
    }
    if (!out || streams > MAX_STREAMS) {
        fprintf(stderr, "usage: gen_trace --seed N --events N --streams K (1..%d) --out FILE\n",
                MAX_STREAMS);
        return 2;
    }
    size_t n = strlen(out);
    gen *g = calloc(1, sizeof *g);
    if (!g) return 1;
    /* Seed 0 would make xorshift stick at zero: mix the seed first. */
    g->rng = ((uint64_t)seed + 1) * 0x9E3779B97F4A7C15ull;
    g->streams = (int)streams;
    g->out = gzopen(out, n > 3 && strcmp(out + n - 3, ".gz") == 0 ? "wb9" : "wbT");
    if (!g->out) {
        fprintf(stderr, "gen_trace: cannot write %s: %s\n", out, strerror(errno));
        return 1;
    }
    gzprintf(g->out, "# gen_trace --seed %ld --events %ld --streams %ld\n", seed, events, streams);
    for (long i = 0; i < events; i++) step(g);
    int rc = gzclose(g->out) == Z_OK ? 0 : 1;
    if (rc) fprintf(stderr, "gen_trace: writing %s failed\n", out);
    free(g);
    return rc;
}
