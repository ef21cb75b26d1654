/*
 * api/summary: xsa_memory_summary, the table of torch.cuda.memory_summary()
 * with the same lines, widths and unit rules, so that eyes and scripts used
 * to PyTorch's read it unchanged. Only the title says xsalloc (same width),
 * and one line after the table says where the settings came from
 * (XSALLOC_CONF, PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF or xsa_init).
 *
 * PyTorch's unit rules: a byte column steps to the next unit (B, KiB, MiB,
 * ...) while the reference value is >= 768 units, dividing with floor; a
 * count column steps (K, M) while the reference is >= 750,000. The
 * reference is the row's own value, except in the "from large/small pool"
 * rows, which use the all-pools row's value so that a metric's rows share
 * one unit.
 *
 * xsalloc adds, only when memory pools (PyTorch's private pools) hold
 * segments, a table of them below: per pool id, its segments (as the
 * snapshot counts them), reserved, allocated and active bytes.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/devices.h"
#include "api/errors.h"
#include "api/summary.h"
#include "pool/snapshot.h"
#include "pool/stats.h"

#define WIDTH 75

typedef void (*format_fn)(char *buf, size_t n, int64_t value, double reference);

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* PyTorch's unit choice (see above): divide by `base` while the reference
 * is at least `threshold`; returns the unit index. */
static size_t scale(int64_t *value, double reference, double threshold, int64_t base, size_t n_units) {
    size_t u = 0;
    while (u + 1 < n_units && reference >= threshold) {
        *value = floor_div(*value, base);
        reference /= (double)base;
        u++;
    }
    return u;
}

static void format_size(char *buf, size_t n, int64_t value, double reference) {
    static const char *const units[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
    size_t u = scale(&value, reference, 768 * 1024, 1024, sizeof units / sizeof units[0]);
    snprintf(buf, n, "%6lld %s", (long long)value, units[u]);
}

static void format_count(char *buf, size_t n, int64_t value, double reference) {
    static const char *const units[] = {" ", "K", "M"};
    size_t u = scale(&value, reference, 750 * 1000, 1000, sizeof units / sizeof units[0]);
    snprintf(buf, n, "%7lld %s ", (long long)value, units[u]);
}

static void rule(FILE *f, char c) {
    fputc('|', f);
    for (int i = 0; i < WIDTH; i++) fputc(c, f);
    fputs("|\n", f);
}

static void row(FILE *f, const char *name, const xsa_stat *s, const xsa_stat *ref, format_fn fmt) {
    const int64_t v[4] = {s->current, s->peak, s->allocated, s->freed};
    const int64_t r[4] = {ref->current, ref->peak, ref->allocated, ref->freed};
    fprintf(f, "| %-21s ", name);
    for (int i = 0; i < 4; i++) {
        char cell[64];
        fmt(cell, sizeof cell, v[i], (double)r[i]);
        fprintf(f, "| %s ", cell);
    }
    fputs("|\n", f);
}

static const struct metric {
    size_t offset; /* of the xsa_stat[XSA_STAT_TYPES] in xsa_device_stats */
    const char *name;
    format_fn fmt;
} metrics[] = {
    {offsetof(xsa_device_stats, allocated_bytes), "Allocated memory", format_size},
    {offsetof(xsa_device_stats, active_bytes), "Active memory", format_size},
    {offsetof(xsa_device_stats, requested_bytes), "Requested memory", format_size},
    {offsetof(xsa_device_stats, reserved_bytes), "GPU reserved memory", format_size},
    {offsetof(xsa_device_stats, inactive_split_bytes), "Non-releasable memory", format_size},
    {offsetof(xsa_device_stats, allocation), "Allocations", format_count},
    {offsetof(xsa_device_stats, active), "Active allocs", format_count},
    {offsetof(xsa_device_stats, segment), "GPU reserved segments", format_count},
    {offsetof(xsa_device_stats, inactive_split), "Non-releasable allocs", format_count},
};

static void metric_rows(FILE *f, const xsa_device_stats *s, const struct metric *m, int abbreviated) {
    const xsa_stat *by_type = (const xsa_stat *)((const char *)s + m->offset);
    const xsa_stat *all = &by_type[XSA_STAT_ALL];
    rule(f, '-');
    row(f, m->name, all, all, m->fmt);
    if (abbreviated) return;
    row(f, "      from large pool", &by_type[XSA_STAT_LARGE_POOL], all, m->fmt);
    row(f, "      from small pool", &by_type[XSA_STAT_SMALL_POOL], all, m->fmt);
}

/* The memory pools' table: one row per pool id but (0, 0), in order of
 * first appearance in the snapshot; nothing if no pool holds a segment. */
static void pool_rows(FILE *f, const xsa_pool_snapshot *snap) {
    bool header = false;
    for (size_t i = 0; i < snap->n_segments; i++) {
        xsa_mempool_id id = snap->segments[i].pool_id;
        bool seen = !id.first && !id.second;
        for (size_t j = 0; j < i && !seen; j++)
            seen = snap->segments[j].pool_id.first == id.first && snap->segments[j].pool_id.second == id.second;
        if (seen) continue;
        int64_t segments = 0, reserved = 0, allocated = 0, active = 0;
        for (size_t j = i; j < snap->n_segments; j++) {
            const xsa_snap_segment *g = &snap->segments[j];
            if (g->pool_id.first != id.first || g->pool_id.second != id.second) continue;
            segments++;
            reserved += (int64_t)g->total_size;
            allocated += (int64_t)g->allocated_size;
            active += (int64_t)g->active_size;
        }
        if (!header) {
            fputs("| Memory pool           |  Segments  |  Reserved  | Allocated  |   Active   |\n", f);
            rule(f, '-');
            header = true;
        }
        char name[32], cells[4][64];
        snprintf(name, sizeof name, "(%llu, %llu)", (unsigned long long)id.first, (unsigned long long)id.second);
        format_count(cells[0], sizeof cells[0], segments, (double)segments);
        format_size(cells[1], sizeof cells[1], reserved, (double)reserved);
        format_size(cells[2], sizeof cells[2], allocated, (double)allocated);
        format_size(cells[3], sizeof cells[3], active, (double)active);
        fprintf(f, "| %-21s | %s | %s | %s | %s |\n", name, cells[0], cells[1], cells[2], cells[3]);
    }
    if (header) rule(f, '=');
}

/* The summary, with the memory pools' table when snap is not NULL. */
static char *format(const xsa_device_stats *s, const xsa_pool_snapshot *snap, int device, int abbreviated) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    rule(f, '=');
    fprintf(f, "| %16s xsalloc CUDA memory summary, device ID %-17d |\n", "", device);
    rule(f, '-');
    fprintf(f, "|  %9s CUDA OOMs: %-12lld | %6s cudaMalloc retries: %-8lld  |\n", "", (long long)s->num_ooms, "",
            (long long)s->num_alloc_retries);
    rule(f, '=');
    fputs("|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n", f);
    for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++) metric_rows(f, s, &metrics[i], abbreviated);
    rule(f, '-');
    row(f, "Oversize allocations", &s->oversize_allocations, &s->oversize_allocations, format_count);
    rule(f, '-');
    row(f, "Oversize GPU segments", &s->oversize_segments, &s->oversize_segments, format_count);
    rule(f, '=');
    if (snap) pool_rows(f, snap);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

char *xsa_format_summary(const xsa_device_stats *s, int device, int abbreviated) {
    return format(s, NULL, device, abbreviated);
}

/* The table (with the memory pools' table), then one line saying where the
 * settings came from. */
xsa_status xsa_memory_summary(int device, int abbreviated, char **out) {
    if (!out) return xsa_fail(XSA_ERROR_INVALID_VALUE, "xsa_memory_summary: out is NULL");
    xsa_pool *p;
    xsa_status st = xsa_api_lock("xsa_memory_summary", device, true, &p);
    if (st != XSA_SUCCESS) return st;
    /* Stats and segments under one lock: the pools' table agrees with them. */
    xsa_device_stats stats;
    xsa_pool_snapshot snap;
    xsa_pool_get_stats(p, &stats);
    bool ok = xsa_pool_snapshot_take(p, &snap) == XSA_POOL_OK;
    xsa_api_unlock(device);
    char *table = ok ? format(&stats, &snap, device, abbreviated) : NULL, *text = NULL;
    if (ok) xsa_pool_snapshot_free(&snap);
    const char *conf, *under, *under_conf, *source = xsa_api_conf_source(&conf, &under, &under_conf);
    const char *changed = xsa_api_runtime_settings();
    char *then = NULL, *over = NULL;
    if (changed && asprintf(&then, "; changed at run time by xsa_set_allocator_settings: \"%s\"", changed) < 0)
        then = NULL;
    if (under && asprintf(&over, " over %s: \"%s\"", under, under_conf) < 0) over = NULL;
    int n = -1;
    if (table && !source)
        n = asprintf(&text, "%sxsalloc settings: all defaults (XSALLOC_CONF, PYTORCH_ALLOC_CONF and "
                            "PYTORCH_CUDA_ALLOC_CONF are unset)%s\n", table, then ? then : "");
    else if (table)
        n = asprintf(&text, "%sxsalloc settings from %s: \"%s\"%s%s%s\n", table, source, conf,
                     conf[0] || under ? "" : " (all defaults)", over ? over : "", then ? then : "");
    free(then);
    free(over);
    free(table);
    if (n < 0) return xsa_fail(XSA_ERROR_OUT_OF_MEMORY, "xsa_memory_summary: out of host memory");
    *out = text;
    return xsa_ok();
}
