/* benchmarks/svg_plot: the line chart of svg_plot.h. */
#include "benchmarks/svg_plot.h"

#include <stdint.h>
#include <stdio.h>

#define GB 1e9
#define SVG_W 960
#define SVG_H 540
#define PAD_L 70
#define PAD_R 20
#define PAD_T 40
#define PAD_B 50
#define PLOT_W (SVG_W - PAD_L - PAD_R)
#define PLOT_H (SVG_H - PAD_T - PAD_B)

/* A 1-2-5 step giving about 6 ticks up to max. */
static double tick_step(double max) {
    double step = 1e-3;
    for (int i = 0; step * 6 < max; i++) step *= i % 3 == 1 ? 2.5 : 2;
    return step;
}

static void axes(FILE *f, const char *x_label, double max_x, double max_gb, double gb_step) {
    for (double g = 0; g <= max_gb + 1e-9; g += gb_step) {
        double y = PAD_T + PLOT_H - g / max_gb * PLOT_H;
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>\n", PAD_L, y, SVG_W - PAD_R, y);
        fprintf(f, "<text x='%d' y='%.1f' text-anchor='end' font-size='12'>%g GB</text>\n", PAD_L - 6, y + 4, g);
    }
    double x_step = tick_step(max_x);
    if (x_step < 1) x_step = 1; /* counts */
    for (double v = 0; v <= max_x + 1e-9; v += x_step)
        fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle' font-size='12'>%.0f</text>\n",
                PAD_L + v / max_x * PLOT_W, SVG_H - PAD_B + 18, v);
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#333'/>\n", PAD_L, PAD_T, PLOT_W, PLOT_H);
    fprintf(f, "<text x='%d' y='%d' text-anchor='middle' font-size='13'>%s</text>\n", PAD_L + PLOT_W / 2, SVG_H - 12,
            x_label);
}

static void line(FILE *f, const xsa_svg_line *l, double max_x, double max_gb) {
    const char *style = l->dashed ? "stroke-width='1' stroke-dasharray='4 3' opacity='0.7'" : "stroke-width='1.5'";
    fprintf(f, "<polyline fill='none' stroke='%s' %s points='", l->color, style);
    for (size_t i = 0; i < l->n; i++)
        fprintf(f, "%.1f,%.1f ", PAD_L + l->x[i] / max_x * PLOT_W, PAD_T + PLOT_H - l->y[i] / GB / max_gb * PLOT_H);
    fprintf(f, "'/>\n");
}

static void legend(FILE *f, const xsa_svg_line *l, int row) {
    int y = PAD_T + 18 + row * 18;
    const char *style = l->dashed ? "stroke-dasharray='4 3'" : "stroke-width='2'";
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' %s/>\n", PAD_L + 12, y, PAD_L + 40, y, l->color, style);
    fprintf(f, "<text x='%d' y='%d' font-size='12'>%s</text>\n", PAD_L + 46, y + 4, l->legend);
}

int xsa_svg_plot(const char *path, const char *title, const char *x_label, const xsa_svg_line *lines, size_t n) {
    double max_x = 1, max_bytes = 1;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < lines[k].n; i++) {
            if (lines[k].x[i] > max_x) max_x = lines[k].x[i];
            if (lines[k].y[i] > max_bytes) max_bytes = lines[k].y[i];
        }
    double step = tick_step(max_bytes / GB), max_gb = step * (double)(int64_t)(max_bytes / GB / step + 1);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif'>\n", SVG_W,
            SVG_H);
    fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
    fprintf(f, "<text x='%d' y='24' font-size='16'>%s</text>\n", PAD_L, title);
    axes(f, x_label, max_x, max_gb, step);
    for (size_t k = 0; k < n; k++) line(f, &lines[k], max_x, max_gb);
    for (size_t k = 0; k < n; k++) legend(f, &lines[k], (int)k);
    fprintf(f, "</svg>\n");
    return fclose(f);
}
