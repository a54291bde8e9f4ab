/* vkh2o-demo: the statistics of the attention mass and the kept set, and its CSV and SVG. */
#include "demo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_desc(const void* a, const void* b)
{
    float x = *(const float*)a, y = *(const float*)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

const char* cat_name(demo_category c)
{
    switch (c) {
    case DEMO_SINK: return "sink";
    case DEMO_RECENT: return "recent";
    case DEMO_HEAVY: return "heavy";
    default: return "evicted";
    }
}


void compute_stats(const float* score, const demo_category* cat, uint32_t S, stats* st)
{
    memset(st, 0, sizeof *st);
    st->min = INFINITY;
    st->max = -INFINITY;
    double sum = 0, hs = 0, es = 0;
    for (uint32_t i = 0; i < S; i++) {
        sum += score[i];
        if (score[i] < st->min) st->min = score[i];
        if (score[i] > st->max) st->max = score[i];
    }
    st->mean = sum / S;
    double var = 0;
    for (uint32_t i = 0; i < S; i++)
        var += (score[i] - st->mean) * (score[i] - st->mean);
    st->std = S > 1 ? sqrt(var / (S - 1)) : 0;   /* unbiased, as torch.std */
    float* heavy = malloc(S * sizeof *heavy);
    uint32_t nh = 0;
    st->cutoff = INFINITY;
    for (uint32_t i = 0; i < S; i++) {
        switch (cat[i]) {
        case DEMO_SINK: st->n_sink++; break;
        case DEMO_RECENT: st->n_recent++; break;
        case DEMO_HEAVY:
            st->n_heavy++;
            hs += score[i];
            if (heavy) heavy[nh++] = score[i];
            if (score[i] < st->cutoff) st->cutoff = score[i];
            break;
        default: st->n_evicted++; es += score[i]; break;
        }
    }
    st->middle = S - st->n_sink - st->n_recent;
    st->heavy_mean = st->n_heavy ? hs / st->n_heavy : 0;
    st->evicted_mean = st->n_evicted ? es / st->n_evicted : 0;
    st->ratio = st->evicted_mean > 0 ? st->heavy_mean / st->evicted_mean : 0;
    if (heavy) {
        qsort(heavy, nh, sizeof *heavy, cmp_desc);
        st->ntop = nh < 10 ? nh : 10;
        memcpy(st->top, heavy, st->ntop * sizeof *heavy);
        free(heavy);
    }
}

void write_csv(FILE* f, const float* score, const demo_category* cat, uint32_t S)
{
    fprintf(f, "token_idx,attention_score,kept,category\n");
    for (uint32_t i = 0; i < S; i++)
        fprintf(f, "%u,%.6f,%s,%s\n", i, score[i], cat[i] == DEMO_EVICTED ? "False" : "True", cat_name(cat[i]));
}

void write_svg(FILE* f, const float* score, const demo_category* cat, uint32_t S, const stats* st, uint32_t budget)
{
    const double W = 960, H = 420, L = 70, R = 20, T = 40, B = 50;
    double ymax = st->max > 0 ? st->max * 1.05 : 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">Attention mass per token (sum over heads and queries), H2O: %u sink + %u heavy + %u recent kept of %u</text>\n",
            L, st->n_sink, st->n_heavy, st->n_recent, S);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, H - B);
    for (int k = 0; k <= 4; k++) {
        double v = ymax * k / 4, y = H - B - (H - B - T) * k / 4;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", L - 6, y + 4, v);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, W - R, y);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">token index (0..%u)</text>\n", (L + W - R) / 2, H - 12, S - 1);
    const char* colour[4] = { "#1f77b4", "#2ca02c", "#d62728", "#bbbbbb" };   /* sink recent heavy evicted */
    double bw = (W - L - R) / S;
    for (uint32_t i = 0; i < S; i++) {
        double h = (H - B - T) * (score[i] / ymax);
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>%u: %.3f %s</title></rect>\n",
                L + i * bw, H - B - h, bw > 1.5 ? bw - 0.5 : bw, h, colour[cat[i]], i, score[i], cat_name(cat[i]));
    }
    if (isfinite(st->cutoff) && st->n_evicted) {
        double y = H - B - (H - B - T) * (st->cutoff / ymax);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#d62728\" stroke-dasharray=\"6,4\"/>\n", L, y, W - R, y);
        fprintf(f, "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\" fill=\"#d62728\">budget %u cut-off %.2f</text>\n", W - R - 4, y - 4,
                budget, st->cutoff);
    }
    const char* names[4] = { "sink", "recent", "heavy", "evicted" };
    for (int c = 0; c < 4; c++) {
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>", W - R - 330 + 85 * c, T - 2.0, colour[c]);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", W - R - 314 + 85 * c, T + 9.0, names[c]);
    }
    fprintf(f, "</svg>\n");
}
