/*
 * benchmarks/svg_plot: a line chart of memory against a count (trace
 * events, passes), written by hand as SVG: the plots of fragmentation and
 * soak.
 *
 * Design: the caller gives the lines (x and y arrays, a colour, solid or
 * dashed, a legend); both axes run from 0 to the largest value, with about
 * six 1-2-5 ticks, and the legends are listed top left in the caller's
 * order. Memory is in bytes and shown in GB (1e9 bytes).
 */
#ifndef XSA_BENCHMARKS_SVG_PLOT_H
#define XSA_BENCHMARKS_SVG_PLOT_H

#include <stddef.h>

typedef struct xsa_svg_line {
    const double *x, *y; /* [n]; y in bytes */
    size_t n;
    const char *color;   /* an SVG colour, "#2ca02c" */
    int dashed;          /* 0: solid (reserved memory, by convention), 1: dashed (allocated) */
    char legend[160];
} xsa_svg_line;

/* Writes the chart to `path`; 0, or -1 if the file cannot be written. */
int xsa_svg_plot(const char *path, const char *title, const char *x_label, const xsa_svg_line *lines, size_t n);

#endif
