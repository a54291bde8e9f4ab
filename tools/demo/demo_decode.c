/* vkh2o-demo --prefill P: a prompt prefill through the layer into the one KV cache, then one
 * decode step per remaining token, through the public layer calls of include/vkh2o/kvcache.h
 * (vkh2o_host_mla_prefill, vkh2o_host_mla_decode). */
#include "demo_h2o.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf(stderr, "vkh2o-demo: " __VA_ARGS__); fprintf(stderr, "\n"); goto done; } while (0)

static int cmp_double(const void* a, const void* b)
{
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* each held token's current score into score[position] */
static int note_scores(vkh2o_context* ctx, vkh2o_kvcache* c, uint32_t S, uint32_t* pos, float* sc, float* score)
{
    vkh2o_kvcache_snapshot snap = { .positions = pos, .scores = sc };
    if (vkh2o_kvcache_read_snapshot(c, 0, &snap) != VKH2O_OK) {
        fprintf(stderr, "vkh2o-demo: reading the cache failed: %s\n", vkh2o_last_error(ctx));
        return -1;
    }
    for (uint32_t i = 0; i < snap.len; i++) {
        if (pos[i] >= S) {
            fprintf(stderr, "vkh2o-demo: the cache holds position %u beyond the %u tokens\n", pos[i], S);
            return -1;
        }
        score[pos[i]] = sc[i];
    }
    return 0;
}

int demo_decode_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* hidden, uint32_t S,
                    uint32_t P, const demo_kv* kv, float* out, float* score, demo_category* cat, demo_cache_result* res)
{
    memset(res, 0, sizeof *res);
    int rc = -1;
    const size_t D = cfg->hidden_size;
    vkh2o_kvcache_desc d;
    vkh2o_kvcache_plan plan;
    vkh2o_error err = { 0 };
    vkh2o_kvcache* c = NULL;
    uint32_t* pos = NULL;
    float* sc = NULL;
    double* t_dec = malloc(sizeof *t_dec * (S - P + 1));
    if (demo_kv_desc(cfg, kv, S, &d, &plan, &err) != VKH2O_OK)
        FAIL("the KV cache: %s", err.message);
    pos = malloc(sizeof *pos * plan.total_slots);
    sc = malloc(sizeof *sc * plan.total_slots);
    if (!pos || !sc || !t_dec)
        FAIL("out of host memory");
    if (vkh2o_kvcache_create(ctx, &d, &c) != VKH2O_OK)
        FAIL("cannot create the KV cache: %s", vkh2o_last_error(ctx));
    for (uint32_t i = P; i < S; i++)
        score[i] = 0.0f;
    double t0 = cli_now();
    if (vkh2o_host_mla_prefill(layer, c, 0, hidden, P, out) != VKH2O_OK)
        FAIL("prefill of %u tokens failed: %s", P, vkh2o_last_error(ctx));
    res->prefill_ms = (cli_now() - t0) * 1e3;
    /* a prompt token the prefill evicts keeps the prompt mass the caller put in score */
    if (note_scores(ctx, c, S, pos, sc, score))
        goto done;
    cli_progress prog;
    cli_progress_begin(&prog, "decode tokens", S - P, false);
    for (uint32_t t = P; t < S; t++) {
        double w0 = cli_now();
        /* the position feeds RoPE and is the cache's own counter: t tokens seen so far */
        if (vkh2o_host_mla_decode(layer, c, 0, hidden + (size_t)t * D, 1, t, out + (size_t)t * D) != VKH2O_OK) {
            cli_progress_end(&prog);
            FAIL("decode of token %u failed: %s", t, vkh2o_last_error(ctx));
        }
        t_dec[t - P] = (cli_now() - w0) * 1e3;
        if (note_scores(ctx, c, S, pos, sc, score)) {
            cli_progress_end(&prog);
            goto done;
        }
        cli_progress_update(&prog, t - P + 1);
    }
    cli_progress_end(&prog);
    /* the first decode token also builds the step's pipelines: the median leaves it out */
    if (S > P) {
        uint32_t n = S - P > 1 ? S - P - 1 : 1;
        double* v = S - P > 1 ? t_dec + 1 : t_dec;
        qsort(v, n, sizeof *v, cmp_double);
        res->decode_ms = n & 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    }
    vkh2o_kvcache_stats stats;
    if (vkh2o_kvcache_read_stats(c, 0, &stats) != VKH2O_OK)
        FAIL("reading the cache's statistics failed: %s", vkh2o_last_error(ctx));
    if (stats.position != S || stats.overflow)
        FAIL("the cache saw %u positions (%u refused), not the %u tokens", stats.position, stats.overflow, S);
    if (demo_cache_finish(ctx, c, S, kv, cat, res))
        goto done;
    rc = 0;
done:
    vkh2o_kvcache_destroy(c);
    free(pos);
    free(sc);
    free(t_dec);
    return rc;
}
