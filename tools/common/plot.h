/* Small SVG line plots for the tools (vkh2o-eval --plot): panels side by side, one polyline and
 * marker set per series, axes with round ticks (1, 2, 2.5 or 5 times a power of ten). */
#ifndef VKH2O_PLOT_H
#define VKH2O_PLOT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct plot_series {
    const char* name;
    uint32_t n;
    const double* x;
    const double* y;
} plot_series;

typedef struct plot_panel {
    const char* title;
    const char* xlabel;
    const char* ylabel;
    const plot_series* series;
    uint32_t nseries;
} plot_panel;

/* Writes the panels as one SVG document (a shared legend below). False on a write error. */
bool plot_svg(FILE* f, const plot_panel* panels, uint32_t npanels);

#endif
