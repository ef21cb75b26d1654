/*
 * api/config: the XSALLOC_CONF parser (PyTorch's PYTORCH_CUDA_ALLOC_CONF
 * syntax and keys; semantics checked against PyTorch's
 * c10/core/AllocatorConfig.cpp and c10/cuda/CUDAAllocatorConfig.cpp).
 *
 * ---- Grammar --------------------------------------------------------------
 *
 *   conf   := ws | ws item { ws ',' ws item } ws [ ',' ws ]
 *   item   := key ws ':' ws value
 *   value  := word | '[' ws entry { ws ',' ws entry } ws [ ',' ws ] ']'
 *   entry  := word ws ':' ws word          (the first word may be '>')
 *   key, word := one or more characters other than  , : [ ]  and NUL,
 *                with surrounding whitespace removed
 *   ws     := any run of space, tab, CR, LF, VT, FF
 *
 * - NULL, "" or whitespace only: every setting keeps its default.
 * - Whitespace is tolerated around keys, values and the separators. Unlike
 *   PyTorch (which deletes every space, even inside a token), whitespace
 *   inside a key or value is kept, so "max split_size_mb" is an unknown key.
 * - Keys are case-sensitive, as in PyTorch.
 * - Trailing comma: ONE comma after the last item, and one before a list's
 *   ']', is tolerated (PyTorch's tokenizer accepts both). Every other empty
 *   item (a leading comma, ",,", a string of only ",") is an error.
 * - Each key may appear once. PyTorch lets the last one win; here a repeat
 *   (also through an alias: release_lock_on_cudamalloc and
 *   release_lock_on_hipmalloc are one key) is an error.
 * - Integers are decimal digits only: a sign, a fraction, an exponent, hex
 *   or trailing characters are errors (PyTorch's stoull would take "20abc"
 *   as 20 and "-1" as 2^64-1). Numbers of the float keys are
 *   [+-] digits [. digits] [(e|E) [+-] digits] (at least one digit before
 *   the exponent), parsed in the C locale; inf, nan and hex are errors.
 * - Booleans are exactly "True" or "False" (PyTorch's toBool).
 * - A list value is accepted only by roundup_power2_divisions; a list for any
 *   other key is an error.
 * - Every error is one sentence naming the key, the value and what the key
 *   accepts. Nothing is silently ignored: the "ignored" keys below are
 *   validated exactly as PyTorch validates them.
 *
 * ---- Keys -----------------------------------------------------------------
 *
 * key                            | values                          | default  | here
 * -------------------------------+---------------------------------+----------+---------------------------------
 * expandable_segments            | True / False                    | True     | pool.expandable_segments (PyTorch default False)
 * page_recycling                 | True / False                    | True     | pool.page_recycling (xsalloc's own key)
 * page_recycling_headroom        | number, 0 <= x <= 1             | 0.01     | pool.page_recycling_headroom (xsalloc's own key)
 * peer_access                    | True / False                    | False    | pool.peer_access (xsalloc's own key) (7)
 * ipc_handles                    | True / False                    | False    | pool.ipc_handles (xsalloc's own key) (7)
 * expandable_handle_mb           | even integer, 2 <= x <= 1024    | 20       | pool.handle_size (bytes; xsalloc's own key; the most, pool/recycle.c)
 * max_split_size_mb              | integer >= 20 (MiB)             | no limit | pool.max_split_size (bytes)
 * max_non_split_rounding_mb      | integer >= 20 (MiB)             | 20       | pool.max_non_split_rounding (bytes)
 * roundup_power2_divisions       | N, or [MB:N,...,>:N] (below)    | all 0    | pool.roundup_power2_divisions[16]
 * garbage_collection_threshold   | number, 0 < x < 1               | 0 (off)  | pool.garbage_collection_threshold
 * per_process_memory_fraction    | number, 0 <= x <= 1             | 1        | pool.memory_fraction
 * backend                        | native                          | native   | accepted, nothing to set
 * large_segment_size_mb          | 20 only                         | 20       | accepted only at xsalloc's fixed 20 MiB
 * release_lock_on_cudamalloc     | True / False                    | False    | accepted and ignored (1)
 *   (alias release_lock_on_hipmalloc)
 * pinned_use_cuda_host_register  | True / False                    | False    | accepted and ignored (2)
 *   (alias pinned_use_hip_host_register)
 * pinned_num_register_threads    | power of two <= 128             | 1        | accepted and ignored (2)
 * pinned_use_background_threads  | True / False                    | False    | accepted and ignored (2)
 * pinned_reserve_segment_size_mb | integer > 0                     | 0        | accepted and ignored (2)
 * pinned_max_round_threshold_mb  | integer >= 0                    |          | accepted and ignored (2)
 * pinned_max_cached_size_mb      | integer >= 0                    |          | accepted and ignored (2)
 * pinned_free_catch_all          | True / False                    | False    | accepted and ignored (2)
 * graph_capture_record_stream_reuse | True / False                 | False    | pool.capture_reuse (3)
 * helper_thread                  | True / False                    | True     | pool.helper_thread (xsalloc's own key) (8)
 * page_decay_ms                  | integer, 0 <= x <= 3600000 (ms) | 500      | pool.page_decay_ms (xsalloc's own key) (8)
 * throw_on_cudamalloc_oom        | True / False                    | False    | accepted and ignored (4)
 * expandable_segments_reserve    | -                               |          | REJECTED (5)
 * expandable_segments_reserve_by_class | -                         |          | REJECTED (5)
 * expandable_segments_handle_type | -                              |          | REJECTED (6)
 * backend:cudaMallocAsync / hipMallocAsync                         |          | REJECTED: xsalloc is itself the allocator
 * any other key                  |                                 |          | REJECTED (unknown key)
 *
 * The keys marked "accepted and ignored" are listed in xsa_config.ignored, so
 * that the allocator can name them (it prints them on stderr, one line at
 * initialisation): a PyTorch setting is never dropped silently.
 *
 * (1) PyTorch drops its allocator mutex around cudaMalloc; xsalloc's locking
 *     is its own. Only lock contention can differ, never results.
 * (2) Settings of PyTorch's pinned host-memory allocator, which xsalloc does
 *     not replace (it allocates device memory only).
 * (3) Capture-time reuse of blocks freed during a CUDA graph capture with
 *     uses on other streams (pool/capture_reuse.c); it may also be set at
 *     run time (xsa_set_allocator_settings, api/settings.c).
 * (4) PyTorch checks free memory before cudaMalloc to fail early; xsalloc
 *     asks the driver, and a failure is reported as the same out-of-memory
 *     error (XSA_ERROR_OUT_OF_MEMORY).
 * (5) Caps on the virtual range an expandable segment reserves. xsalloc sizes
 *     its ranges itself; ignoring a cap would let segments grow past a limit
 *     the user asked for, so the key is refused rather than ignored.
 * (6) Not a PyTorch configuration key (PyTorch picks the handle type
 *     internally); xsalloc has no handle-type choice either.
 * (7) Both need expandable segments: True together with
 *     expandable_segments:False is an error (in either order), rather than
 *     a setting silently without effect.
 * (8) Decay purging runs on the helper thread only (never on the
 *     allocation path): page_decay_ms above 0 turns the helper on unless
 *     helper_thread:False is given too, which is an error;
 *     helper_thread:False without page_decay_ms turns decay off. Both
 *     defaults follow XSA_HELPER_BY_DEFAULT (pool/options.h). Decay keeps
 *     the peak of reserved memory by moving pages where memory regrows, so
 *     page_recycling:False without page_decay_ms turns decay off too.
 *
 * Deviations from PyTorch's ranges: roundup_power2_divisions:0
 * (single-value form, refused by PyTorch) is accepted and means "no
 * rounding", the default. max_split_size_mb / max_non_split_rounding_mb
 * values whose byte count overflows size_t are clamped to SIZE_MAX, i.e. "no
 * limit" (PyTorch clamps too); a number that does not fit 64 bits is an error.
 *
 * ---- roundup_power2_divisions ---------------------------------------------
 *
 * 16 intervals of request sizes: interval i covers [2^i MiB, 2^(i+1) MiB) for
 * i = 0..14; interval 0 also covers everything below 1 MiB and interval 15
 * everything from 32 GiB up (as PyTorch and pool.c's lookup).
 *
 * Single value N (0 or a power of two): every interval gets N.
 *
 * List [S1:N1, S2:N2, ..., >:N]: the rules of PyTorch's
 * parseRoundUpPower2Divisions (current version), starting from all 0:
 *  - a size S (MiB) must be a power of two; its interval is log2(S), clamped
 *    to 15 (so 65536 means interval 15);
 *  - the FIRST size entry also fills every interval below its own: [256:1]
 *    gives intervals 0..8 the value 1;
 *  - every later size entry sets ONLY its own interval. There is no fill
 *    forward between entries: in [64:8,1024:4] the intervals 7, 8 and 9
 *    (128 MiB..1 GiB) stay 0 (no power-of-two rounding), exactly as in
 *    PyTorch;
 *  - '>' sets every interval after the last size entry's interval;
 *  - each N must be 0 (no rounding) or a power of two.
 * Stricter than PyTorch (where these give order-dependent or surprising
 * results): sizes must be in strictly increasing interval order (so no
 * repeats), '>' must come last and after at least one size entry (PyTorch's
 * [>:8] would leave interval 0 at 0; write roundup_power2_divisions:8
 * instead), and an empty list [] is an error.
 */
#include "api/config.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
/* PyTorch's kLargeBuffer / 1 MiB: the smallest max_split_size_mb and
 * max_non_split_rounding_mb, and xsalloc's fixed large segment size. */
#define LARGE_SEGMENT_MB 20u
/* PyTorch's pinned_max_register_threads(). */
#define PINNED_MAX_REGISTER_THREADS 128u
/* The longest page_decay_ms: an hour. */
#define MAX_DECAY_MS 3600000u
/* Longest value echoed in a message. */
#define SHOW_MAX 96

typedef struct span {
    const char *b;
    size_t n;
} span;

typedef struct parser {
    char *err;
    size_t errlen;
} parser;

/* ---- messages ---- */

static int fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser *ps, const char *fmt, ...) {
    if (ps->err && ps->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err, ps->errlen, fmt, ap);
        va_end(ap);
    }
    return 0;
}

/* The span as a NUL-terminated string, cut at SHOW_MAX characters. */
typedef struct shown {
    char s[SHOW_MAX + 4];
} shown;

static shown show(span v) {
    shown out;
    size_t n = v.n > SHOW_MAX ? SHOW_MAX : v.n;
    memcpy(out.s, v.b, n);
    if (v.n > SHOW_MAX) memcpy(out.s + n, "...", 3), n += 3;
    out.s[n] = '\0';
    return out;
}

/* "key 'K' value 'V' PROBLEM; accepted: ACCEPTED" */
static int bad_value(parser *ps, span key, span val, const char *problem, const char *accepted) {
    return fail(ps, "key '%s' value '%s' %s; accepted: %s", show(key).s, show(val).s, problem, accepted);
}

/* ---- lexing ---- */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_sep(char c) { return c == ',' || c == ':' || c == '[' || c == ']'; }

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && is_ws(*p)) p++;
    return p;
}

/* Reads a word starting at *pp (whitespace already skipped): everything up
 * to a separator or `end`, trailing whitespace trimmed. May be empty. */
static span read_word(const char **pp, const char *end) {
    const char *p = *pp;
    while (p < end && !is_sep(*p)) p++;
    span w = {*pp, (size_t)(p - *pp)};
    while (w.n > 0 && is_ws(w.b[w.n - 1])) w.n--;
    *pp = p;
    return w;
}

/* What lies at p, for messages: "the end" or "'c'". */
typedef struct found {
    char s[8];
} found;

static found found_at(const char *p, const char *end) {
    found f;
    if (p >= end) snprintf(f.s, sizeof f.s, "the end");
    else snprintf(f.s, sizeof f.s, "'%c'", *p);
    return f;
}

static bool span_is(span s, const char *lit) { return strlen(lit) == s.n && memcmp(s.b, lit, s.n) == 0; }

/* ---- value parsers ---- */

typedef enum { NUM_OK, NUM_NEGATIVE, NUM_NOT_INTEGER, NUM_JUNK, NUM_NOT_NUMBER, NUM_TOO_LARGE } num_result;

static num_result parse_u64(span v, uint64_t *out) {
    size_t i = 0;
    if (v.n > 0 && v.b[0] == '-') return NUM_NEGATIVE;
    uint64_t x = 0;
    bool overflow = false;
    while (i < v.n && v.b[i] >= '0' && v.b[i] <= '9') {
        unsigned d = (unsigned)(v.b[i] - '0');
        if (x > (UINT64_MAX - d) / 10) overflow = true;
        x = x * 10 + d;
        i++;
    }
    if (i == 0) return NUM_NOT_NUMBER;
    if (i < v.n) return (v.b[i] == '.' || v.b[i] == 'e' || v.b[i] == 'E') ? NUM_NOT_INTEGER : NUM_JUNK;
    if (overflow) return NUM_TOO_LARGE;
    *out = x;
    return NUM_OK;
}

static const char *num_problem(num_result r) {
    switch (r) {
    case NUM_NEGATIVE: return "is negative";
    case NUM_NOT_INTEGER: return "is not an integer";
    case NUM_JUNK: return "has characters after the number";
    case NUM_NOT_NUMBER: return "is not a number";
    case NUM_TOO_LARGE: return "is too large (over 64 bits)";
    default: return "is invalid";
    }
}

static int get_u64(parser *ps, span key, span val, const char *accepted, uint64_t *out) {
    num_result r = parse_u64(val, out);
    return r == NUM_OK ? 1 : bad_value(ps, key, val, num_problem(r), accepted);
}

/* A decimal number: [+-] digits [. digits] [(e|E) [+-] digits], at least
 * one mantissa digit; converted in the C locale whatever the process's. */
static int get_double(parser *ps, span key, span val, const char *accepted, double *out) {
    size_t i = 0, digits = 0;
    if (i < val.n && (val.b[i] == '+' || val.b[i] == '-')) i++;
    while (i < val.n && val.b[i] >= '0' && val.b[i] <= '9') i++, digits++;
    if (i < val.n && val.b[i] == '.') {
        i++;
        while (i < val.n && val.b[i] >= '0' && val.b[i] <= '9') i++, digits++;
    }
    if (digits == 0) return bad_value(ps, key, val, "is not a number", accepted);
    if (i < val.n && (val.b[i] == 'e' || val.b[i] == 'E')) {
        size_t j = i + 1, exp_digits = 0;
        if (j < val.n && (val.b[j] == '+' || val.b[j] == '-')) j++;
        while (j < val.n && val.b[j] >= '0' && val.b[j] <= '9') j++, exp_digits++;
        if (exp_digits == 0) return bad_value(ps, key, val, "has a malformed exponent", accepted);
        i = j;
    }
    if (i < val.n) return bad_value(ps, key, val, "has characters after the number", accepted);

    /* The grammar above is a subset of strtod's, and the character after the
     * span (separator, whitespace or NUL) cannot extend a number, so strtod_l
     * stops exactly at the span's end. */
    locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c == (locale_t)0) return fail(ps, "key '%s' value '%s' could not be converted: no C locale (out of memory)", show(key).s, show(val).s);
    char *endp = NULL;
    errno = 0;
    double x = strtod_l(val.b, &endp, c);
    int e = errno;
    freelocale(c);
    if (endp != val.b + val.n) return bad_value(ps, key, val, "is not a number", accepted);
    if (!isfinite(x) || (e == ERANGE && x != 0.0)) return bad_value(ps, key, val, "is out of range", accepted);
    *out = x;
    return 1;
}

static bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

static unsigned log2_u64(uint64_t x) {
    unsigned l = 0;
    while (x >>= 1) l++;
    return l;
}

/* MiB to bytes, clamped to SIZE_MAX when the product overflows. */
static size_t mib_to_bytes(uint64_t mb) { return mb > SIZE_MAX / MIB ? SIZE_MAX : (size_t)mb * MIB; }

/* ---- keys ---- */

typedef enum key_id {
    K_EXPANDABLE_SEGMENTS,
    K_PAGE_RECYCLING,
    K_PAGE_RECYCLING_HEADROOM,
    K_PEER_ACCESS,
    K_IPC_HANDLES,
    K_MAX_SPLIT_SIZE_MB,
    K_MAX_NON_SPLIT_ROUNDING_MB,
    K_ROUNDUP_POWER2_DIVISIONS,
    K_GARBAGE_COLLECTION_THRESHOLD,
    K_PER_PROCESS_MEMORY_FRACTION,
    K_BACKEND,
    K_LARGE_SEGMENT_SIZE_MB,
    K_RELEASE_LOCK_ON_CUDAMALLOC,
    K_PINNED_USE_CUDA_HOST_REGISTER,
    K_PINNED_NUM_REGISTER_THREADS,
    K_PINNED_USE_BACKGROUND_THREADS,
    K_PINNED_RESERVE_SEGMENT_SIZE_MB,
    K_PINNED_MAX_ROUND_THRESHOLD_MB,
    K_PINNED_MAX_CACHED_SIZE_MB,
    K_PINNED_FREE_CATCH_ALL,
    K_GRAPH_CAPTURE_RECORD_STREAM_REUSE,
    K_THROW_ON_CUDAMALLOC_OOM,
    K_EXPANDABLE_SEGMENTS_RESERVE,
    K_EXPANDABLE_SEGMENTS_RESERVE_BY_CLASS,
    K_EXPANDABLE_SEGMENTS_HANDLE_TYPE,
    K_EXPANDABLE_HANDLE_MB,
    K_HELPER_THREAD,
    K_PAGE_DECAY_MS,
    K_COUNT
} key_id;

#define ACCEPT_BOOL "True or False (exactly)"
#define ACCEPT_SPLIT_MB "an integer number of MiB >= 20"
#define ACCEPT_ROUNDUP                                                                                          \
    "0 or a power of two (divisions for every size), or a list [SIZE_MB:DIV,...,>:DIV] of power-of-two sizes " \
    "in increasing order, each DIV 0 or a power of two, '>' last"
#define ACCEPT_LARGE_SEGMENT "20 (xsalloc's large segment size is fixed at 20 MiB)"
#define ACCEPT_NOTHING "nothing (remove the key)"

/* Every key: its name, what it takes (for messages), and whether the
 * unknown-key message lists it (the keys that act, not the PyTorch keys
 * accepted and ignored, aliases or keys refused). */
static const struct {
    const char *name;
    key_id id;
    const char *accepts;
    bool listed;
} keys[] = {
    {"expandable_segments", K_EXPANDABLE_SEGMENTS, ACCEPT_BOOL, true},
    {"page_recycling", K_PAGE_RECYCLING, ACCEPT_BOOL, true},
    {"page_recycling_headroom", K_PAGE_RECYCLING_HEADROOM, "a number from 0 to 1, e.g. 0.01", true},
    {"peer_access", K_PEER_ACCESS, ACCEPT_BOOL, true},
    {"ipc_handles", K_IPC_HANDLES, ACCEPT_BOOL, true},
    {"expandable_handle_mb", K_EXPANDABLE_HANDLE_MB,
     "an even number of MiB from 2 to 1024 (2: one page a handle), e.g. 20", true},
    {"helper_thread", K_HELPER_THREAD, ACCEPT_BOOL, true},
    {"page_decay_ms", K_PAGE_DECAY_MS, "an integer number of milliseconds from 0 (off) to 3600000, e.g. 500", true},
    {"max_split_size_mb", K_MAX_SPLIT_SIZE_MB, ACCEPT_SPLIT_MB, true},
    {"max_non_split_rounding_mb", K_MAX_NON_SPLIT_ROUNDING_MB, ACCEPT_SPLIT_MB, true},
    {"roundup_power2_divisions", K_ROUNDUP_POWER2_DIVISIONS, ACCEPT_ROUNDUP, true},
    {"garbage_collection_threshold", K_GARBAGE_COLLECTION_THRESHOLD,
     "a number greater than 0 and less than 1, e.g. 0.8", true},
    {"per_process_memory_fraction", K_PER_PROCESS_MEMORY_FRACTION,
     "a number from 0 to 1, e.g. 0.5 (0: no device memory at all)", true},
    {"graph_capture_record_stream_reuse", K_GRAPH_CAPTURE_RECORD_STREAM_REUSE, ACCEPT_BOOL, true},
    {"backend", K_BACKEND, "native", true},
    {"large_segment_size_mb", K_LARGE_SEGMENT_SIZE_MB, ACCEPT_LARGE_SEGMENT, true},
    {"release_lock_on_cudamalloc", K_RELEASE_LOCK_ON_CUDAMALLOC, ACCEPT_BOOL, false},
    {"release_lock_on_hipmalloc", K_RELEASE_LOCK_ON_CUDAMALLOC, ACCEPT_BOOL, false},
    {"pinned_use_cuda_host_register", K_PINNED_USE_CUDA_HOST_REGISTER, ACCEPT_BOOL, false},
    {"pinned_use_hip_host_register", K_PINNED_USE_CUDA_HOST_REGISTER, ACCEPT_BOOL, false},
    {"pinned_num_register_threads", K_PINNED_NUM_REGISTER_THREADS, "a power of two from 1 to 128", false},
    {"pinned_use_background_threads", K_PINNED_USE_BACKGROUND_THREADS, ACCEPT_BOOL, false},
    {"pinned_reserve_segment_size_mb", K_PINNED_RESERVE_SEGMENT_SIZE_MB, "an integer number of MiB > 0", false},
    {"pinned_max_round_threshold_mb", K_PINNED_MAX_ROUND_THRESHOLD_MB, "an integer number of MiB", false},
    {"pinned_max_cached_size_mb", K_PINNED_MAX_CACHED_SIZE_MB, "an integer number of MiB", false},
    {"pinned_free_catch_all", K_PINNED_FREE_CATCH_ALL, ACCEPT_BOOL, false},
    {"throw_on_cudamalloc_oom", K_THROW_ON_CUDAMALLOC_OOM, ACCEPT_BOOL, false},
    {"expandable_segments_reserve", K_EXPANDABLE_SEGMENTS_RESERVE, ACCEPT_NOTHING, false},
    {"expandable_segments_reserve_by_class", K_EXPANDABLE_SEGMENTS_RESERVE_BY_CLASS, ACCEPT_NOTHING, false},
    {"expandable_segments_handle_type", K_EXPANDABLE_SEGMENTS_HANDLE_TYPE, ACCEPT_NOTHING, false},
};

#define N_KEYS (sizeof keys / sizeof keys[0])

/* The index in keys[] of the key named `key`, or -1. */
static int key_of(span key) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (span_is(key, keys[i].name)) return (int)i;
    return -1;
}

static const char *accepts_of(key_id id) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].id == id) return keys[i].accepts;
    return "";
}

static int get_bool(parser *ps, span key, span val, bool *out) {
    if (span_is(val, "True")) *out = true;
    else if (span_is(val, "False")) *out = false;
    else return bad_value(ps, key, val, "is not a boolean", ACCEPT_BOOL);
    return 1;
}

/* The list form of roundup_power2_divisions; `raw` is "[...]" and `in` what
 * lies between the brackets. Rules in the header comment. */
static int parse_roundup_list(parser *ps, span key, span raw, span in, size_t div[XSA_ROUNDUP_INTERVALS]) {
    const char *accepted = ACCEPT_ROUNDUP;
    const char *p = in.b, *end = in.b + in.n;
    int last_index = -1; /* interval of the last size entry; -1 = none yet */
    bool saw_gt = false;
    int entries = 0;
    for (size_t i = 0; i < XSA_ROUNDUP_INTERVALS; i++) div[i] = 0;

    for (;;) {
        p = skip_ws(p, end);
        if (p == end) {
            if (entries == 0) return bad_value(ps, key, raw, "is an empty list", accepted);
            break; /* after a trailing comma */
        }
        const char *entry_start = p;
        span size_s = read_word(&p, end);
        if (size_s.n == 0)
            return fail(ps, "key '%s' value '%s' has an empty entry (a stray ',' or '%c'); accepted: %s", show(key).s,
                        show(raw).s, *p, accepted);
        p = skip_ws(p, end);
        if (p == end || *p != ':')
            return fail(ps, "key '%s' value '%s': entry '%s' has no ':DIV'; accepted: %s", show(key).s, show(raw).s,
                        show(size_s).s, accepted);
        p = skip_ws(p + 1, end);
        span div_s = read_word(&p, end);
        span entry = {entry_start, (size_t)(p - entry_start)};
        while (entry.n > 0 && is_ws(entry.b[entry.n - 1])) entry.n--;
        if (div_s.n == 0)
            return fail(ps, "key '%s' value '%s': entry '%s' has no divisions after ':'; accepted: %s", show(key).s,
                        show(raw).s, show(entry).s, accepted);

        uint64_t d;
        num_result r = parse_u64(div_s, &d);
        if (r != NUM_OK)
            return fail(ps, "key '%s' value '%s': the divisions '%s' of entry '%s' %s; accepted: %s", show(key).s,
                        show(raw).s, show(div_s).s, show(entry).s, num_problem(r), accepted);
        if (d != 0 && !is_pow2(d))
            return fail(ps, "key '%s' value '%s': the divisions '%s' of entry '%s' are not 0 or a power of two; accepted: %s",
                        show(key).s, show(raw).s, show(div_s).s, show(entry).s, accepted);
        if (d > SIZE_MAX)
            return fail(ps, "key '%s' value '%s': the divisions '%s' of entry '%s' are too large; accepted: %s",
                        show(key).s, show(raw).s, show(div_s).s, show(entry).s, accepted);
        if (saw_gt)
            return fail(ps, "key '%s' value '%s': entry '%s' follows the '>' entry, which must be last; accepted: %s",
                        show(key).s, show(raw).s, show(entry).s, accepted);

        if (span_is(size_s, ">")) {
            if (last_index < 0)
                return fail(ps,
                            "key '%s' value '%s': the '>' entry needs a size entry before it (to set every interval, "
                            "give a single value instead); accepted: %s",
                            show(key).s, show(raw).s, accepted);
            for (int i = last_index + 1; i < XSA_ROUNDUP_INTERVALS; i++) div[i] = (size_t)d;
            saw_gt = true;
        } else {
            uint64_t mb;
            r = parse_u64(size_s, &mb);
            if (r != NUM_OK)
                return fail(ps, "key '%s' value '%s': the size '%s' of entry '%s' %s; accepted: %s", show(key).s,
                            show(raw).s, show(size_s).s, show(entry).s, num_problem(r), accepted);
            if (!is_pow2(mb))
                return fail(ps, "key '%s' value '%s': the size '%s' MiB of entry '%s' is not a power of two; accepted: %s",
                            show(key).s, show(raw).s, show(size_s).s, show(entry).s, accepted);
            unsigned l = log2_u64(mb);
            int index = l > XSA_ROUNDUP_INTERVALS - 1 ? XSA_ROUNDUP_INTERVALS - 1 : (int)l;
            if (index <= last_index)
                return fail(ps,
                            "key '%s' value '%s': the size '%s' MiB of entry '%s' is not in a later interval than the "
                            "entry before it (sizes must increase; intervals end at 32768 MiB); accepted: %s",
                            show(key).s, show(raw).s, show(size_s).s, show(entry).s, accepted);
            if (last_index < 0)
                for (int i = 0; i < index; i++) div[i] = (size_t)d;
            div[index] = (size_t)d;
            last_index = index;
        }
        entries++;

        p = skip_ws(p, end);
        if (p == end) break;
        if (*p != ',')
            return fail(ps, "key '%s' value '%s': unexpected '%c' after entry '%s'; accepted: %s", show(key).s,
                        show(raw).s, *p, show(entry).s, accepted);
        p++;
    }
    return 1;
}

static int parse_roundup(parser *ps, span key, span val, bool is_list, span inner, size_t div[XSA_ROUNDUP_INTERVALS]) {
    if (is_list) return parse_roundup_list(ps, key, val, inner, div);
    uint64_t d;
    if (!get_u64(ps, key, val, ACCEPT_ROUNDUP, &d)) return 0;
    if (d != 0 && !is_pow2(d)) return bad_value(ps, key, val, "is not 0 or a power of two", ACCEPT_ROUNDUP);
    if (d > SIZE_MAX) return bad_value(ps, key, val, "is too large", ACCEPT_ROUNDUP);
    for (size_t i = 0; i < XSA_ROUNDUP_INTERVALS; i++) div[i] = (size_t)d;
    return 1;
}

/* Appends `key` to cfg->ignored unless it is there (a layer below gave
 * it); returns 1. The ignored keys' names are short and few, so the room
 * is always enough. */
static int note_ignored(xsa_config *cfg, span key) {
    for (const char *p = cfg->ignored; *p; p += strspn(p, ", ")) {
        size_t n = strcspn(p, ",");
        if (n == key.n && memcmp(p, key.b, n) == 0) return 1;
        p += n;
    }
    size_t len = strlen(cfg->ignored), sep = len ? 2 : 0;
    if (len + sep + key.n + 1 > sizeof cfg->ignored) return 1;
    memcpy(cfg->ignored + len, ", ", sep);
    memcpy(cfg->ignored + len + sep, key.b, key.n);
    cfg->ignored[len + sep + key.n] = '\0';
    return 1;
}

static int apply(parser *ps, key_id id, span key, span val, bool is_list, span inner, xsa_config *cfg) {
    xsa_pool_options *o = &cfg->pool;
    const char *acc = accepts_of(id);
    bool ignored_bool;
    uint64_t u;
    double x;

    if (is_list && id != K_ROUNDUP_POWER2_DIVISIONS && id != K_EXPANDABLE_SEGMENTS_RESERVE_BY_CLASS)
        return fail(ps, "key '%s' value '%s' is a list, but the key takes a single value; accepted: one value, not [...]",
                    show(key).s, show(val).s);

    switch (id) {
    case K_EXPANDABLE_SEGMENTS: return get_bool(ps, key, val, &o->expandable_segments);
    case K_PAGE_RECYCLING: return get_bool(ps, key, val, &o->page_recycling);
    case K_PEER_ACCESS: return get_bool(ps, key, val, &o->peer_access);
    case K_IPC_HANDLES: return get_bool(ps, key, val, &o->ipc_handles);
    case K_GRAPH_CAPTURE_RECORD_STREAM_REUSE: return get_bool(ps, key, val, &o->capture_reuse);
    case K_HELPER_THREAD: return get_bool(ps, key, val, &o->helper_thread);

    case K_PAGE_DECAY_MS:
        if (!get_u64(ps, key, val, acc, &u)) return 0;
        if (u > MAX_DECAY_MS) return bad_value(ps, key, val, "is too large", acc);
        o->page_decay_ms = (uint32_t)u;
        return 1;

    case K_MAX_SPLIT_SIZE_MB:
    case K_MAX_NON_SPLIT_ROUNDING_MB:
        if (!get_u64(ps, key, val, acc, &u)) return 0;
        if (u < LARGE_SEGMENT_MB) return bad_value(ps, key, val, "is too small", acc);
        if (id == K_MAX_SPLIT_SIZE_MB) o->max_split_size = mib_to_bytes(u);
        else o->max_non_split_rounding = mib_to_bytes(u);
        return 1;

    case K_ROUNDUP_POWER2_DIVISIONS: return parse_roundup(ps, key, val, is_list, inner, o->roundup_power2_divisions);

    case K_EXPANDABLE_HANDLE_MB: {
        if (!get_u64(ps, key, val, acc, &u)) return 0;
        if (u < 2 || u > 1024 || u % 2) return bad_value(ps, key, val, "is out of range or odd", acc);
        o->handle_size = mib_to_bytes(u);
        return 1;
    }

    case K_GARBAGE_COLLECTION_THRESHOLD: {
        if (!get_double(ps, key, val, acc, &x)) return 0;
        if (!(x > 0.0 && x < 1.0)) return bad_value(ps, key, val, "is out of range", acc);
        o->garbage_collection_threshold = x;
        return 1;
    }
    case K_PAGE_RECYCLING_HEADROOM: {
        if (!get_double(ps, key, val, acc, &x)) return 0;
        if (!(x >= 0.0 && x <= 1.0)) return bad_value(ps, key, val, "is out of range", acc);
        o->page_recycling_headroom = x;
        return 1;
    }
    case K_PER_PROCESS_MEMORY_FRACTION: {
        if (!get_double(ps, key, val, acc, &x)) return 0;
        if (!(x >= 0.0 && x <= 1.0)) return bad_value(ps, key, val, "is out of range", acc);
        o->memory_fraction = x;
        return 1;
    }

    case K_BACKEND:
        if (span_is(val, "native")) return 1;
        if (span_is(val, "cudaMallocAsync") || span_is(val, "hipMallocAsync"))
            return bad_value(ps, key, val,
                             "cannot be used: xsalloc is itself the caching allocator and does not forward to the "
                             "driver's stream-ordered allocator",
                             acc);
        return bad_value(ps, key, val, "is not a known backend", acc);

    case K_LARGE_SEGMENT_SIZE_MB:
        if (!get_u64(ps, key, val, acc, &u)) return 0;
        if (u != LARGE_SEGMENT_MB) return bad_value(ps, key, val, "is not supported", acc);
        return 1;

    /* Accepted, validated as PyTorch does, ignored (see the table) and named. */
    case K_RELEASE_LOCK_ON_CUDAMALLOC:
    case K_PINNED_USE_CUDA_HOST_REGISTER:
    case K_PINNED_USE_BACKGROUND_THREADS:
    case K_PINNED_FREE_CATCH_ALL:
    case K_THROW_ON_CUDAMALLOC_OOM: return get_bool(ps, key, val, &ignored_bool) && note_ignored(cfg, key);

    case K_PINNED_NUM_REGISTER_THREADS: {
        if (!get_u64(ps, key, val, acc, &u)) return 0;
        if (!is_pow2(u)) return bad_value(ps, key, val, "is not a power of two", acc);
        if (u > PINNED_MAX_REGISTER_THREADS) return bad_value(ps, key, val, "is too large", acc);
        return note_ignored(cfg, key);
    }
    case K_PINNED_RESERVE_SEGMENT_SIZE_MB:
        if (!get_u64(ps, key, val, acc, &u)) return 0;
        if (u == 0) return bad_value(ps, key, val, "is too small", acc);
        return note_ignored(cfg, key);
    case K_PINNED_MAX_ROUND_THRESHOLD_MB:
    case K_PINNED_MAX_CACHED_SIZE_MB:
        return get_u64(ps, key, val, acc, &u) && note_ignored(cfg, key);

    case K_EXPANDABLE_SEGMENTS_RESERVE:
    case K_EXPANDABLE_SEGMENTS_RESERVE_BY_CLASS:
        return bad_value(ps, key, val,
                         "is not supported: xsalloc sizes expandable segments' virtual ranges itself and cannot honour "
                         "a reserve cap",
                         acc);
    case K_EXPANDABLE_SEGMENTS_HANDLE_TYPE:
        return bad_value(ps, key, val,
                         "is not supported: this is not a PyTorch configuration key, and xsalloc has no handle-type "
                         "choice",
                         acc);
    case K_COUNT: break;
    }
    return fail(ps, "key '%s': internal error (no parser)", show(key).s);
}

const char *xsa_config_env(const char **text) {
    static const char *const names[] = {"XSALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*text = getenv(names[i])) != NULL) return names[i];
    return NULL;
}

/* The unknown-key message: every listed key from the table, so that no
 * key is left out of it. */
static int unknown_key(parser *ps, span key, span val) {
    char list[600] = "";
    size_t len = 0;
    for (size_t i = 0; i < N_KEYS && len < sizeof list; i++)
        if (keys[i].listed) len += (size_t)snprintf(list + len, sizeof list - len, "%s, ", keys[i].name);
    return fail(ps, "unknown key '%s' (value '%s'); accepted keys: %sor a PyTorch compatibility key listed in "
                    "docs/configuration.md",
                show(key).s, show(val).s, list);
}

/* A key without its ':' or value: what the key takes when it is known. */
static int no_value(parser *ps, span key, const char *problem, const char *p, const char *end) {
    int k = key_of(key);
    if (k < 0)
        return fail(ps, "key '%s' %s (found %s); accepted: key:value with a known key", show(key).s, problem,
                    found_at(p, end).s);
    return fail(ps, "key '%s' %s (found %s); accepted: %s:VALUE, VALUE %s", show(key).s, problem, found_at(p, end).s,
                keys[k].name, keys[k].accepts);
}

_Static_assert(K_COUNT <= 64, "xsa_config.given has a bit per key");

int xsa_config_gave(const xsa_config *cfg, const char *key) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].name, key) == 0) return (cfg->given >> keys[i].id) & 1;
    return 0;
}

int xsa_config_parse(const char *text, xsa_config *out, char *err, size_t errlen) {
    xsa_config defaults;
    memset(&defaults, 0, sizeof defaults);
    xsa_pool_options_default(&defaults.pool);
    return xsa_config_parse_over(text, &defaults, out, err, errlen);
}

int xsa_config_parse_over(const char *text, const xsa_config *base, xsa_config *out, char *err, size_t errlen) {
    parser ps = {err, errlen};
    if (err && errlen > 0) err[0] = '\0';

    xsa_config cfg = *base;

    span seen_key[K_COUNT], seen_val[K_COUNT];
    bool seen[K_COUNT] = {false};

    const char *p = text ? text : "";
    const char *end = p + strlen(p);
    p = skip_ws(p, end);
    while (p < end) {
        span key = read_word(&p, end);
        if (key.n == 0) {
            if (*p == ',')
                return fail(&ps, "an item is empty (a leading ',' or ',,' before '%s'); accepted: key:value items "
                                 "separated by single commas",
                            show((span){p, (size_t)(end - p)}).s);
            if (*p == ':') {
                const char *q = skip_ws(p + 1, end);
                span v = read_word(&q, end);
                return fail(&ps, "an item has an empty key before ':' (value '%s'); accepted: key:value with a known key",
                            show(v).s);
            }
            return fail(&ps, "unexpected '%c' where a key was expected (at '%s'); accepted: key:value items", *p,
                        show((span){p, (size_t)(end - p)}).s);
        }
        p = skip_ws(p, end);
        if (p == end || *p != ':') return no_value(&ps, key, "has no ':' and value after it", p, end);
        p = skip_ws(p + 1, end);

        span val, inner = {NULL, 0};
        bool is_list = false;
        if (p < end && *p == '[') {
            const char *q = p + 1;
            while (q < end && *q != ']' && *q != '[') q++;
            if (q == end || *q == '[') {
                val = (span){p, (size_t)(end - p)};
                while (val.n > 0 && is_ws(val.b[val.n - 1])) val.n--;
                return fail(&ps, "key '%s' value '%s' is a list %s; accepted: [ENTRY,...,ENTRY] with one closing ']'",
                            show(key).s, show(val).s, q == end ? "missing its closing ']'" : "with a nested '['");
            }
            val = (span){p, (size_t)(q + 1 - p)};
            inner = (span){p + 1, (size_t)(q - p - 1)};
            is_list = true;
            p = q + 1;
        } else {
            val = read_word(&p, end);
            if (val.n == 0) return no_value(&ps, key, "has an empty value after ':'", p, end);
        }

        int k = key_of(key);
        if (k < 0) return unknown_key(&ps, key, val);
        int id = (int)keys[k].id;
        if (seen[id]) {
            if (seen_key[id].n == key.n && memcmp(seen_key[id].b, key.b, key.n) == 0)
                return fail(&ps, "key '%s' is given twice (values '%s' and '%s'); accepted: each key at most once",
                            show(key).s, show(seen_val[id]).s, show(val).s);
            return fail(&ps, "key '%s' (value '%s') repeats its alias '%s' (value '%s'); accepted: each key at most once",
                        show(key).s, show(val).s, show(seen_key[id]).s, show(seen_val[id]).s);
        }
        seen[id] = true;
        cfg.given |= (uint64_t)1 << id;
        seen_key[id] = key;
        seen_val[id] = val;

        if (!apply(&ps, (key_id)id, key, val, is_list, inner, &cfg)) return 0;

        p = skip_ws(p, end);
        if (p == end) break;
        if (*p != ',')
            return fail(&ps, "unexpected '%c' after key '%s' value '%s'; accepted: key:value items separated by ','",
                        *p, show(key).s, show(val).s);
        p = skip_ws(p + 1, end); /* a single trailing comma ends the loop here */
    }

    /* Decay and the helper thread: note (8) above. */
    if (!cfg.pool.helper_thread && cfg.pool.page_decay_ms) {
        if (seen[K_PAGE_DECAY_MS] && seen[K_HELPER_THREAD])
            return fail(&ps, "key 'page_decay_ms' value '%.*s' needs the helper thread, but helper_thread is False; "
                             "accepted: page_decay_ms:0, or helper_thread:True",
                        (int)seen_val[K_PAGE_DECAY_MS].n, seen_val[K_PAGE_DECAY_MS].b);
        if (seen[K_PAGE_DECAY_MS])
            cfg.pool.helper_thread = true;
        else
            cfg.pool.page_decay_ms = 0;
    }
    if (!cfg.pool.page_recycling && !seen[K_PAGE_DECAY_MS]) cfg.pool.page_decay_ms = 0;
    const char *needs_expandable = cfg.pool.peer_access ? "peer_access" : cfg.pool.ipc_handles ? "ipc_handles" : NULL;
    if (!cfg.pool.expandable_segments && needs_expandable)
        return fail(&ps, "key '%s' value 'True' needs expandable segments, but expandable_segments is False; "
                         "accepted: %s:False, or expandable_segments:True",
                    needs_expandable, needs_expandable);

    *out = cfg;
    return 1;
}
