/* The H2O step of vkh2o-demo on the GPU, through the public cache API: the prefill of a cache
 * runs the exact top-k of the attention mass over the middle tokens, then a stable gather of
 * the kept rows of the chosen layout into fp16 cache storage. */
#include "demo_h2o.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_sel(const void* a, const void* b, void* ctx)
{
    const float* s = ctx;
    uint32_t i = *(const uint32_t*)a, j = *(const uint32_t*)b;
    if (s[i] != s[j])
        return s[i] > s[j] ? -1 : 1;
    return i < j ? -1 : i > j ? 1 : 0;
}

void demo_h2o_select_cpu(const float* score, uint32_t S, uint32_t n_sink, uint32_t budget, uint32_t n_recent,
                         demo_category* cat)
{
    uint32_t begin = n_sink < S ? n_sink : S;
    uint32_t end = S > n_recent ? S - n_recent : 0;
    if (end < begin)
        end = begin;
    for (uint32_t i = 0; i < S; i++)
        cat[i] = i < begin ? DEMO_SINK : i >= end ? DEMO_RECENT : DEMO_EVICTED;
    uint32_t m = end - begin;
    uint32_t* idx = malloc((m ? m : 1) * sizeof *idx);
    if (!idx)
        return;
    for (uint32_t i = 0; i < m; i++)
        idx[i] = begin + i;
    qsort_r(idx, m, sizeof *idx, cmp_sel, (void*)score);
    for (uint32_t i = 0; i < m && i < budget; i++)
        cat[idx[i]] = DEMO_HEAVY;
    free(idx);
}

#define FAIL(...) do { fprintf(stderr, "vkh2o-demo: " __VA_ARGS__); fprintf(stderr, "\n"); goto done; } while (0)

int demo_h2o_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* score, uint32_t S,
                 uint32_t n_sink, uint32_t budget, uint32_t n_recent, demo_layout layout, demo_category* cat,
                 demo_h2o_result* res)
{
    memset(res, 0, sizeof *res);
    int rc = -1;
    vkh2o_cache* cache = NULL;
    vkh2o_buffer *mass = NULL, *a = NULL, *b = NULL;
    uint32_t* kept = NULL;
    const uint32_t begin = n_sink < S ? n_sink : S;
    uint32_t end = S > n_recent ? S - n_recent : 0;
    if (end < begin)
        end = begin;
    const bool latent = layout == DEMO_LAYOUT_LATENT;
    const uint64_t cap = (uint64_t)n_sink + budget + n_recent;
    if (cap + 1 > UINT32_MAX)
        FAIL("--n-sink + --budget + --n-recent = %llu: too large", (unsigned long long)cap);
    vkh2o_cache_desc d = {
        .num_heads = cfg->num_heads, .qk_nope_dim = cfg->qk_nope_head_dim, .qk_rope_dim = cfg->qk_rope_head_dim,
        .v_dim = cfg->v_head_dim, .kv_lora_rank = cfg->kv_lora_rank,
        .layout = latent ? VKH2O_LAYOUT_LATENT : VKH2O_LAYOUT_EXPANDED, .storage = VKH2O_DTYPE_F16,
        .n_sink = n_sink, .budget = budget, .n_recent = n_recent,
        .capacity = cap + 1 > S ? (uint32_t)cap + 1 : S, .max_prefill = S,
    };
    vkh2o_result r;
    if ((r = vkh2o_cache_create(ctx, &d, &cache)) != VKH2O_OK)
        FAIL("cannot create the KV cache: %s", vkh2o_last_error(ctx));
    if (vkh2o_buffer_create(ctx, (uint64_t)S * 4, &mass) || vkh2o_buffer_upload(mass, 0, score, (uint64_t)S * 4))
        FAIL("upload of the attention mass failed: %s", vkh2o_last_error(ctx));
    if (vkh2o_mla_layer_get_kv_rows(layer, d.layout, &a, &b))
        FAIL("%s", vkh2o_last_error(ctx));
    const vkh2o_cache_prefill p = { .seq_len = S, .a = a, .b = b, .mass = mass };
    /* twice: lavapipe compiles a pipeline variant inside its first submission, so the first
     * pass is a warm-up and the second is timed */
    for (int pass = 0; pass < 2; pass++) {
        const double w0 = cli_now();
        if (vkh2o_run_cache_prefill(cache, &p))
            FAIL("H2O prefill of the KV cache failed: %s", vkh2o_last_error(ctx));
        res->prefill_ms = vkh2o_cache_get_last_run_ms(cache);
        if (res->prefill_ms < 0)
            res->prefill_ms = (cli_now() - w0) * 1e3;
    }
    kept = malloc((size_t)d.capacity * sizeof *kept);
    vkh2o_cache_snapshot snap = { .positions = kept };
    if (!kept || vkh2o_cache_read_snapshot(cache, 0, &snap))
        FAIL("reading the kept positions back failed: %s", kept ? vkh2o_last_error(ctx) : "out of host memory");
    for (uint32_t i = 0; i < S; i++)
        cat[i] = DEMO_EVICTED;
    for (uint32_t i = 0; i < snap.len; i++) {
        uint32_t q = kept[i];
        if (q >= S || (i && q <= kept[i - 1]))
            FAIL("the device returned kept positions out of order (%u after %u)", q, i ? kept[i - 1] : 0);
        cat[q] = q < begin ? DEMO_SINK : q >= end ? DEMO_RECENT : DEMO_HEAVY;
    }
    const vkh2o_cache_widths w = vkh2o_cache_get_widths(cache);
    res->bytes_before = (uint64_t)S * (w.a_width + w.b_width) * 2;
    res->bytes_after = (uint64_t)snap.len * (w.a_width + w.b_width) * 2;
    rc = 0;
done:
    free(kept);
    vkh2o_buffer_destroy(mass);
    vkh2o_cache_destroy(cache);
    return rc;
}
