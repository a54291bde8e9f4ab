/* vkh2o-demo --prefill P: a prompt prefill through the layer into an H2O cache, then one decode
 * step per remaining token, through the public decode API (include/vkh2o/mla.h). */
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

/* each cached token's current score into score[position] */
static int note_scores(vkh2o_context* ctx, vkh2o_cache* c, uint32_t* pos, float* sc, float* score, uint32_t* len)
{
    vkh2o_cache_snapshot snap = { .positions = pos, .scores = sc };
    if (vkh2o_cache_read_snapshot(c, 0, &snap) != VKH2O_OK) {
        fprintf(stderr, "vkh2o-demo: reading the cache failed: %s\n", vkh2o_last_error(ctx));
        return -1;
    }
    for (uint32_t i = 0; i < snap.len; i++)
        score[pos[i]] = sc[i];
    *len = snap.len;
    return 0;
}

int demo_decode_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* hidden, uint32_t S,
                    uint32_t P, uint32_t n_sink, uint32_t budget, uint32_t n_recent, demo_layout layout, float* out,
                    float* score, demo_category* cat, demo_decode_result* res)
{
    memset(res, 0, sizeof *res);
    int rc = -1;
    const size_t D = cfg->hidden_size;
    vkh2o_cache_desc cd = { .n_sink = n_sink, .budget = budget, .n_recent = n_recent, .storage = VKH2O_DTYPE_F16,
                            .max_prefill = P };
    vkh2o_cache_desc_from_mla(cfg, layout == DEMO_LAYOUT_LATENT ? VKH2O_LAYOUT_LATENT : VKH2O_LAYOUT_EXPANDED, &cd);
    vkh2o_cache* c = NULL;
    uint32_t cap = n_sink + budget + n_recent;
    uint32_t* pos = malloc(sizeof *pos * (cap + 1));
    float* sc = malloc(sizeof *sc * (cap + 1));
    double* t_dec = malloc(sizeof *t_dec * (S - P + 1));
    if (!pos || !sc || !t_dec)
        FAIL("out of host memory");
    if (vkh2o_cache_create(ctx, &cd, &c) != VKH2O_OK)
        FAIL("cannot create the KV cache: %s", vkh2o_last_error(ctx));
    for (uint32_t i = P; i < S; i++)
        score[i] = 0.0f;
    double t0 = cli_now();
    if (vkh2o_run_mla_prefill(layer, c, 0, hidden, P, out) != VKH2O_OK)
        FAIL("prefill of %u tokens failed: %s", P, vkh2o_last_error(ctx));
    res->prefill_ms = (cli_now() - t0) * 1e3;
    /* a prompt token the prefill evicts keeps the prompt mass the caller put in score */
    uint32_t len = 0;
    if (note_scores(ctx, c, pos, sc, score, &len))
        goto done;
    cli_progress prog;
    cli_progress_begin(&prog, "decode tokens", S - P, false);
    for (uint32_t t = P; t < S; t++) {
        double w0 = cli_now();
        if (vkh2o_run_mla_decode(layer, c, 0, hidden + (size_t)t * D, 1, t, out + (size_t)t * D) != VKH2O_OK) {
            cli_progress_end(&prog);
            FAIL("decode of token %u failed: %s", t, vkh2o_last_error(ctx));
        }
        t_dec[t - P] = (cli_now() - w0) * 1e3;
        if (note_scores(ctx, c, pos, sc, score, &len)) {
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
    for (uint32_t i = 0; i < S; i++)
        cat[i] = DEMO_EVICTED;
    for (uint32_t i = 0; i < len; i++) {
        uint32_t p = pos[i];
        if (p >= S || (i && p <= pos[i - 1]))
            FAIL("the cache holds positions out of order (%u after %u)", p, i ? pos[i - 1] : 0);
        cat[p] = p < n_sink ? DEMO_SINK : p + n_recent >= S ? DEMO_RECENT : DEMO_HEAVY;
    }
    res->kept_pos = malloc(sizeof *res->kept_pos * (len ? len : 1));
    if (!res->kept_pos)
        FAIL("out of host memory");
    memcpy(res->kept_pos, pos, sizeof *pos * len);
    res->kept = len;
    res->bytes_before = vkh2o_cache_bytes(&cd, S);
    res->bytes_after = vkh2o_cache_bytes(&cd, len);
    rc = 0;
done:
    vkh2o_cache_destroy(c);
    free(pos);
    free(sc);
    free(t_dec);
    return rc;
}
