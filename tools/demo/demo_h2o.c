/* The H2O step of vkh2o-demo on the GPU, through the public kvcache API: the prefill of a cache
 * ranks the middle tokens by their attention mass and keeps the heaviest in the cache's slots;
 * the kept set is read back from the cache. */
#include "demo_h2o.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u32(const void* a, const void* b)
{
    uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
    return x < y ? -1 : x > y;
}

vkh2o_result demo_kv_desc(const vkh2o_mla_config* cfg, const demo_kv* kv, uint32_t S, vkh2o_kvcache_desc* out,
                          vkh2o_kvcache_plan* plan, vkh2o_error* err)
{
    const uint64_t cap = (uint64_t)kv->n_sink + kv->budget + kv->n_recent;
    vkh2o_kvcache_desc d = { 0 };
    vkh2o_kvcache_desc_from_mla(cfg, &d);
    d.layout = kv->layout;
    d.precision = kv->precision;
    d.policy = VKH2O_POLICY_H2O;
    d.score_mode = VKH2O_SCORE_SUM;
    d.max_tokens = S;
    /* a capacity of the whole sequence still scores (capacity 0 would be the full cache, which
     * does no score work); the sinks and recents then leave room for one middle token, which
     * changes nothing the demo reports: every token is kept */
    d.capacity_tokens = cap < S ? (uint32_t)cap : S;
    d.n_sink = kv->n_sink < S ? kv->n_sink : S - 1;
    d.n_recent = kv->n_recent < S - 1 - d.n_sink ? kv->n_recent : S - 1 - d.n_sink;
    *out = d;   /* unresolved: create resolves it again, and refuses a resolved decay without the decayed mode */
    return vkh2o_kvcache_desc_resolve(&d, NULL, plan, err);
}

int demo_cache_finish(vkh2o_context* ctx, vkh2o_kvcache* c, uint32_t S, const demo_kv* kv, demo_category* cat,
                      demo_cache_result* res)
{
    const vkh2o_kvcache_plan* plan = vkh2o_kvcache_get_plan(c);
    const vkh2o_kvcache_desc* d = vkh2o_kvcache_get_desc(c);
    vkh2o_kvcache_stats stats;
    uint32_t* pos = malloc(sizeof *pos * (plan->total_slots ? plan->total_slots : 1));
    vkh2o_kvcache_snapshot snap = { .positions = pos };
    if (!pos) {
        fprintf(stderr, "vkh2o-demo: out of host memory\n");
        return -1;
    }
    if (vkh2o_kvcache_read_stats(c, 0, &stats) != VKH2O_OK || vkh2o_kvcache_read_snapshot(c, 0, &snap) != VKH2O_OK) {
        fprintf(stderr, "vkh2o-demo: reading the cache back failed: %s\n", vkh2o_last_error(ctx));
        free(pos);
        return -1;
    }
    /* the slots are in no order: the kept set is compared as a set, sorted by position */
    qsort(pos, snap.len, sizeof *pos, cmp_u32);
    for (uint32_t i = 0; i < S; i++)
        cat[i] = DEMO_EVICTED;
    for (uint32_t i = 0; i < snap.len; i++) {
        uint32_t p = pos[i];
        if (p >= S || (i && p == pos[i - 1])) {
            fprintf(stderr, "vkh2o-demo: the cache holds position %u %s\n", p, p >= S ? "beyond the sequence" : "twice");
            free(pos);
            return -1;
        }
        cat[p] = p < kv->n_sink ? DEMO_SINK : (uint64_t)p + kv->n_recent >= S ? DEMO_RECENT : DEMO_HEAVY;
    }
    if (snap.len != stats.len) {
        fprintf(stderr, "vkh2o-demo: the cache's snapshot holds %u tokens, its statistics %u\n", snap.len, stats.len);
        free(pos);
        return -1;
    }
    res->kept_pos = pos;
    res->kept = snap.len;
    for (uint32_t t = 0; t < VKH2O_TIER_COUNT; t++) {
        res->by_tier[t] = stats.by_tier[t];
        res->token_bytes[t] = vkh2o_kvcache_token_bytes(d, (vkh2o_kv_tier)t);
    }
    res->bytes_before = (uint64_t)S * res->token_bytes[VKH2O_TIER_FP16];
    res->bytes_after = stats.bytes_used;
    res->device_bytes = plan->device_bytes;
    return 0;
}

#define FAIL(...) do { fprintf(stderr, "vkh2o-demo: " __VA_ARGS__); fprintf(stderr, "\n"); goto done; } while (0)

int demo_h2o_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* score, uint32_t S,
                 const demo_kv* kv, demo_category* cat, demo_cache_result* res)
{
    memset(res, 0, sizeof *res);
    int rc = -1;
    vkh2o_kvcache* cache = NULL;
    vkh2o_buffer *mass = NULL, *a = NULL, *b = NULL;
    vkh2o_kvcache_desc d;
    vkh2o_error err = { 0 };
    if (demo_kv_desc(cfg, kv, S, &d, NULL, &err) != VKH2O_OK)
        FAIL("the KV cache: %s", err.message);
    if (vkh2o_kvcache_create(ctx, &d, &cache) != VKH2O_OK)
        FAIL("cannot create the KV cache: %s", vkh2o_last_error(ctx));
    if (vkh2o_buffer_create(ctx, (uint64_t)S * 4, &mass) || vkh2o_buffer_upload(mass, 0, score, (uint64_t)S * 4))
        FAIL("upload of the attention mass failed: %s", vkh2o_last_error(ctx));
    if (vkh2o_mla_layer_get_kv_rows(layer, d.layout, &a, &b))
        FAIL("%s", vkh2o_last_error(ctx));
    const bool lat = d.layout == VKH2O_LAYOUT_LATENT;
    const vkh2o_kvcache_prefill p = { .n = S, .mass = mass, .ckv = lat ? a : NULL, .kpe = lat ? b : NULL,
                                      .k = lat ? NULL : a, .v = lat ? NULL : b };
    /* twice: lavapipe compiles a pipeline variant inside its first submission, so the first
     * pass is a warm-up and the second is timed (a prefill replaces the layer's contents) */
    for (int pass = 0; pass < 2; pass++) {
        const double w0 = cli_now();
        if (vkh2o_run_kvcache_prefill(cache, &p))
            FAIL("prefill of the KV cache failed: %s", vkh2o_last_error(ctx));
        res->prefill_ms = (cli_now() - w0) * 1e3;
    }
    if (demo_cache_finish(ctx, cache, S, kv, cat, res))
        goto done;
    rc = 0;
done:
    vkh2o_buffer_destroy(mass);
    vkh2o_kvcache_destroy(cache);
    return rc;
}
