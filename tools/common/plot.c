#include "plot.h"

#include <math.h>
#include <string.h>

#define MAX_TICKS 16

/* Round tick positions covering [lo, hi] (at most max_ticks of them, at least 2): the step is
 * 1, 2, 2.5 or 5 times a power of ten and every tick a multiple of it. Returns the count;
 * *step_out receives the step. */
static uint32_t plot_nice_ticks(double lo, double hi, uint32_t max_ticks, double* ticks, double* step_out)
{
    if (max_ticks < 2)
        max_ticks = 2;
    if (max_ticks > MAX_TICKS)
        max_ticks = MAX_TICKS;
    if (!(hi > lo)) {
        double pad = lo != 0.0 ? fabs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / (double)(max_ticks - 1);
    double p = pow(10.0, floor(log10(raw)));
    static const double mult[] = { 1.0, 2.0, 2.5, 5.0, 10.0 };
    double step = 10.0 * p;
    for (int i = 0; i < 5; i++)
        if (mult[i] * p >= raw) {
            step = mult[i] * p;
            break;
        }
    double first = floor(lo / step) * step, last = ceil(hi / step) * step;
    uint32_t n = 0;
    for (double t = first; t <= last + step * 1e-9 && n < MAX_TICKS; t += step)
        ticks[n++] = fabs(t) < step * 1e-9 ? 0.0 : t;
    if (step_out)
        *step_out = step;
    return n;
}

static void fmt_tick(char* buf, size_t cap, double v, double step)
{
    int decimals = step >= 1.0 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(step * pow(10.0, decimals) - round(step * pow(10.0, decimals))) > 1e-9)
        decimals++;   /* 2.5 x 10^-k needs one more digit */
    snprintf(buf, cap, "%.*f", decimals, v);
}

static const char* const COLORS[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                                      "#000000", "#bcbd22", "#7f7f7f", "#aec7e8" };
#define NCOLORS (sizeof COLORS / sizeof COLORS[0])

bool plot_svg(FILE* f, const plot_panel* panels, uint32_t np)
{
    const double PW = 420, PH = 300, ML = 64, MR = 16, MT = 32, MB = 48;
    const double W = np * (PW + ML + MR), LEG = 24;
    uint32_t maxs = 0;
    for (uint32_t p = 0; p < np; p++)
        maxs = panels[p].nseries > maxs ? panels[p].nseries : maxs;
    const double H = MT + PH + MB + LEG * ((maxs + 3) / 4) + 8;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    for (uint32_t p = 0; p < np; p++) {
        const plot_panel* pn = &panels[p];
        double x0 = p * (PW + ML + MR) + ML, y0 = MT;
        double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
        for (uint32_t s = 0; s < pn->nseries; s++)
            for (uint32_t i = 0; i < pn->series[s].n; i++) {
                double x = pn->series[s].x[i], y = pn->series[s].y[i];
                if (!isfinite(x) || !isfinite(y))
                    continue;
                xmin = fmin(xmin, x); xmax = fmax(xmax, x);
                ymin = fmin(ymin, y); ymax = fmax(ymax, y);
            }
        if (!isfinite(xmin)) {
            xmin = 0; xmax = 1; ymin = 0; ymax = 1;
        }
        double xt[MAX_TICKS], yt[MAX_TICKS], xs, ys;
        uint32_t nx = plot_nice_ticks(xmin, xmax, 6, xt, &xs), ny = plot_nice_ticks(ymin, ymax, 6, yt, &ys);
        double ax0 = xt[0], ax1 = xt[nx - 1], ay0 = yt[0], ay1 = yt[ny - 1];
#define PX(x) (x0 + ((x) - ax0) / (ax1 - ax0) * PW)
#define PY(y) (y0 + PH - ((y) - ay0) / (ay1 - ay0) * PH)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", x0 + PW / 2, y0 - 12,
                pn->title ? pn->title : "");
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", x0, y0, PW, PH);
        char b[32];
        for (uint32_t i = 0; i < nx; i++) {
            fmt_tick(b, sizeof b, xt[i], xs);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                    PX(xt[i]), y0, PX(xt[i]), y0 + PH, PX(xt[i]), y0 + PH + 16, b);
        }
        for (uint32_t i = 0; i < ny; i++) {
            fmt_tick(b, sizeof b, yt[i], ys);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                    x0, PY(yt[i]), x0 + PW, PY(yt[i]), x0 - 6, PY(yt[i]) + 4, b);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x0 + PW / 2, y0 + PH + 36,
                pn->xlabel ? pn->xlabel : "");
        fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", x0 - 48,
                y0 + PH / 2, pn->ylabel ? pn->ylabel : "");
        for (uint32_t s = 0; s < pn->nseries; s++) {
            const plot_series* se = &pn->series[s];
            const char* col = COLORS[s % NCOLORS];
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
            for (uint32_t i = 0; i < se->n; i++)
                if (isfinite(se->x[i]) && isfinite(se->y[i]))
                    fprintf(f, "%.1f,%.1f ", PX(se->x[i]), PY(se->y[i]));
            fprintf(f, "\"/>\n");
            for (uint32_t i = 0; i < se->n; i++)
                if (isfinite(se->x[i]) && isfinite(se->y[i]))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", PX(se->x[i]), PY(se->y[i]), col);
        }
#undef PX
#undef PY
    }
    /* legend: the series of the panel with the most (the panels share their first series) */
    if (np) {
        const plot_panel* pn = &panels[0];
        for (uint32_t p = 1; p < np; p++)
            if (panels[p].nseries > pn->nseries)
                pn = &panels[p];
        for (uint32_t s = 0; s < pn->nseries; s++) {
            double lx = ML + (s % 4) * 200, ly = MT + PH + MB + 8 + (s / 4) * LEG;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                    lx, ly, lx + 24, ly, COLORS[s % NCOLORS], lx + 30, ly + 4, pn->series[s].name);
        }
    }
    fprintf(f, "</svg>\n");
    return !ferror(f);
}
