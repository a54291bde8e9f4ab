/* vkh2o-bench: the table's rows, the timing of a run call, and the table's outputs (text, JSON,
 * the scaling plot). */
#include "bench.h"
#include "cli.h"
#include "json.h"
#include "plot.h"
#include "rng.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bench_row* bench_add(bench_env* env, const char* name, double median_ms, double gflops, uint32_t runs, const char* timing)
{
    if (env->nrows >= BENCH_MAX_ROWS) return NULL;
    bench_row* r = &env->rows[env->nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->device, sizeof r->device, "%s", env->caps->device_name);
    r->median_ms = median_ms;
    r->gflops = gflops;
    r->runs = runs;
    r->timing = timing;
    return r;
}

bench_row* row_status(bench_env* env, const char* group, const char* name, const char* status, const char* reason)
{
    bench_row* r = bench_add(env, name, 0.0, 0.0, 0, "none");
    if (!r) return NULL;
    r->group = group;
    r->status = status;
    snprintf(r->reason, sizeof r->reason, "%s", reason);
    return r;
}

bench_row* row_ok(bench_env* env, const char* group, const char* name, double ms, double gflops, bool ts)
{
    bench_row* r = bench_add(env, name, ms, gflops, env->runs, ts ? "gpu-timestamps" : "wall");
    if (!r) return NULL;
    r->group = group;
    r->status = "ok";
    return r;
}

vkh2o_result bench_fail(bench_env* env, vkh2o_result r, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(env->error, sizeof env->error, fmt, ap);
    va_end(ap);
    return r;
}

void note(const bench_env* env, const char* fmt, const char* what)
{
    if (env->progress) fprintf(stderr, fmt, what);
}

static uint64_t rng_state = RNG_GOLDEN;
float rand_normal(void)
{
    /* xorshift64* + Box-Muller: reproducible inputs, quality is irrelevant here */
    double u[2];
    for (int i = 0; i < 2; i++)
        u[i] = (rng_xorshift(&rng_state) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u[0] + 1e-300)) * cos(6.283185307179586 * u[1]));
}

vkh2o_result time_run(bench_env* env, run_work fn, void* user, double* ms, bool* ts)
{
    const double d0 = vkh2o_context_get_device_ms(env->ctx);
    const double w0 = cli_now();
    const vkh2o_result r = fn(user);
    const double wall = (cli_now() - w0) * 1e3;
    const double d1 = vkh2o_context_get_device_ms(env->ctx);
    if (d0 < 0.0 || d1 < 0.0) *ts = false;
    *ms = *ts ? d1 - d0 : wall;
    return r;
}

vkh2o_result time_median(bench_env* env, run_work fn, void* user, const char* name, double* median, bool* ts)
{
    double* t = calloc(env->runs, sizeof *t);
    if (!t)
        return bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: timings%s%s", name ? " of " : "", name ? name : "");
    vkh2o_result r = VKH2O_OK;
    for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
        double ms = 0.0;
        if (name) note(env, "%s\n", name);
        r = time_run(env, fn, user, &ms, ts);
        if (run) t[run - 1] = ms;
    }
    if (r == VKH2O_OK) *median = cli_median(t, env->runs);
    free(t);
    return r;
}

void print_text(const bench_env* env)
{
    printf("%-60s %-34s %12s %10s %s\n", "measurement", "device", "median ms", "GFLOP/s", "");
    for (uint32_t i = 0; i < env->nrows; i++) {
        const bench_row* r = &env->rows[i];
        if (r->status && strcmp(r->status, "ok")) {
            printf("%-60s %-34.34s %12s %10s  %s: %s\n", r->name, r->device, "-", "-", r->status, r->reason);
            continue;
        }
        printf("%-60s %-34.34s %12.3f %10.2f  (%u run%s, %s)", r->name, r->device, r->median_ms, r->gflops, r->runs,
               r->runs == 1 ? "" : "s", r->timing);
        if (r->gbps > 0) printf("  %.2f GB/s", r->gbps);
        if (r->ratio > 0) printf("  %.2fx the fp16 cache's speed", r->ratio);
        if (r->bytes > 0) printf("  %.1f MB moved", r->bytes / 1e6);
        if (r->bytes_min > 0) printf(" (minimum %.1f MB)", r->bytes_min / 1e6);
        if (r->read_fraction > 0) printf(", %.0f%% of the read bandwidth", 100.0 * r->read_fraction);
        if (r->share != 0 && r->group && !strcmp(r->group, "policy")) printf("  the policy %.0f%% of the step", 100.0 * r->share);
        else if (r->share > 0) printf("  attention %.0f%%", 100.0 * r->share);
        if (r->reason[0]) printf("  (%s)", r->reason);
        if (r->dispatches) printf("  %u dispatches, %u barriers", r->dispatches, r->barriers);
        if (r->stages[0]) printf("  [%s]", r->stages);
        printf("\n");
    }
}

int print_json(const bench_env* env)
{
    cJSON* arr = cJSON_CreateArray();
    if (!arr) return 1;
    for (uint32_t i = 0; i < env->nrows; i++) {
        const bench_row* r = &env->rows[i];
        cJSON* o = cJSON_CreateObject();
        if (!o) { cJSON_Delete(arr); return 1; }
        const bool ok = !r->status || !strcmp(r->status, "ok");
        CLI_JSON_STRS(o, { "name", r->name }, { "device", r->device });
        if (r->group) {
            CLI_JSON_STRS(o, { "group", r->group }, { "status", r->status });
            if (r->reason[0]) cJSON_AddStringToObject(o, "reason", r->reason);
            if (r->size > 0) cJSON_AddNumberToObject(o, "size", r->size);
            if (r->layers > 0) cJSON_AddNumberToObject(o, "layers", r->layers);
            if (r->param[0]) cJSON_AddStringToObject(o, "param", r->param);
            if (r->bytes > 0) cJSON_AddNumberToObject(o, "bytes", r->bytes);
            if (r->bytes_min > 0) cJSON_AddNumberToObject(o, "bytes_min", r->bytes_min);
            if (r->stages[0]) cJSON_AddStringToObject(o, "stages", r->stages);
            if (r->dispatches) CLI_JSON_NUMS(o, { "dispatches", r->dispatches }, { "barriers", r->barriers });
            if (r->read_fraction > 0) cJSON_AddNumberToObject(o, "read_fraction", r->read_fraction);
            if (r->share != 0 && !strcmp(r->group, "policy")) cJSON_AddNumberToObject(o, "policy_share", r->share);
            else if (r->share > 0) cJSON_AddNumberToObject(o, "attention_share", r->share);
        }
        if (!ok) {
            cJSON_AddNullToObject(o, "median_ms");
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        CLI_JSON_NUMS(o, { "median_ms", r->median_ms }, { "gflops", r->gflops }, { "runs", r->runs });
        cJSON_AddStringToObject(o, "timing", r->timing);
        if (r->gbps > 0) cJSON_AddNumberToObject(o, "gbps", r->gbps);
        if (r->ratio > 0) cJSON_AddNumberToObject(o, "ratio_vs_fp16", r->ratio);
        cJSON_AddItemToArray(arr, o);
    }
    char* s = cJSON_Print(arr);
    cJSON_Delete(arr);
    if (!s) return 1;
    printf("%s\n", s);
    cJSON_free(s);
    return 0;
}

bool write_scaling_plot(FILE* f, const bench_env* env)
{
    static const char* groups[4] = { "scaling-forward", "scaling-decode", "scaling-h2o", "scaling-prefill" };
    enum { MAXS = 8, MAXP = 32 };
    static double xs[4][MAXS][MAXP], ys[4][MAXS][MAXP];
    static char names[4][MAXS][32];
    plot_series series[4][MAXS];
    uint32_t nser[4] = { 0 };
    for (uint32_t g = 0; g < 4; g++) {
        for (uint32_t i = 0; i < env->nrows; i++) {
            const bench_row* r = &env->rows[i];
            if (!r->group || strcmp(r->group, groups[g]) || strcmp(r->status, "ok")) continue;
            char key[32];
            if (g >= 2) snprintf(key, sizeof key, "%u layer%s", r->layers, r->layers == 1 ? "" : "s");
            else snprintf(key, sizeof key, "%s", g == 0 ? "forward, bf16" : "decode step, bf16");
            uint32_t s = 0;
            while (s < nser[g] && strcmp(names[g][s], key)) s++;
            if (s == nser[g]) {
                if (s == MAXS) continue;
                snprintf(names[g][s], sizeof names[g][s], "%s", key);
                series[g][s] = (plot_series){ names[g][s], 0, xs[g][s], ys[g][s] };
                nser[g]++;
            }
            plot_series* ps = &series[g][s];
            if (ps->n == MAXP) continue;
            xs[g][s][ps->n] = log2(r->size);
            ys[g][s][ps->n] = g == 1 ? r->gbps : r->median_ms;
            ps->n++;
        }
    }
    plot_panel p[4] = {
        { "Kimi layer forward", "log2 S (tokens)", "ms", series[0], nser[0] },
        { "decode step (weights + cache)", "log2 cache tokens", "GB/s read", series[1], nser[1] },
        { "kvcache step (h2o), all layers", "log2 budget", "ms", series[2], nser[2] },
        { "prefill selection (32 x budget tokens), all layers", "log2 budget", "ms", series[3], nser[3] },
    };
    return plot_svg(f, p, 4);
}

