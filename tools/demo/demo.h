/* vkh2o-demo's modules beside demo_h2o.h (the kept set) and demo_decode.c (--prefill):
 * demo_shard.c (the synthetic shard) and demo_report.c (statistics, CSV and SVG). */
#ifndef VKH2O_DEMO_H
#define VKH2O_DEMO_H

#include "demo_h2o.h"
#include "vkh2o.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The path of the synthetic Kimi-shaped BF16 shard in cache_dir (NULL: VKH2O_CACHE_DIR,
 * XDG_CACHE_HOME/vkh2o, ~/.cache/vkh2o or /tmp/vkh2o-cache), made first with the vkh2o-mkshard
 * beside this program when it is not there. False (message printed) when it cannot be made. */
bool synthetic_shard(const char* cache_dir, bool quiet, char* path, size_t cap);

/* The statistics of the per-token attention mass against the kept set. */
typedef struct stats {
    double min, max, mean, std;
    uint32_t n_sink, n_heavy, n_recent, n_evicted, middle;
    double heavy_mean, evicted_mean, ratio;
    float top[10];
    uint32_t ntop;
    float cutoff;   /* score of the lightest heavy hitter kept */
} stats;
void compute_stats(const float* score, const demo_category* cat, uint32_t S, stats* st);
const char* cat_name(demo_category c);
/* --csv: token,score,kept,category; --plot: the mass per token, coloured by category, with the
 * budget's cut-off. */
void write_csv(FILE* f, const float* score, const demo_category* cat, uint32_t S);
void write_svg(FILE* f, const float* score, const demo_category* cat, uint32_t S, const stats* st, uint32_t budget);

#endif
