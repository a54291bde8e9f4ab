/* vkh2o-bench --scaling: the layer forward, the decode step, the cache step of all layers and
 * the prefill selection over growing sizes, each through the public API and timed by the
 * context's device time (or wall time). A size the device or the library refuses is a row
 * with status "refused" and the library's message; a size above --scaling-max is a "skipped"
 * row. */
#include "bench.h"
#include "cli.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The grids of --scaling (--quick: the small layer and small sizes). */
static const uint32_t SC_S[] = { 256, 512, 1024, 2048, 4096 }, SC_S_Q[] = { 16, 32, 64 };
static const uint32_t SC_N[] = { 512, 1024, 4096, 16384, 65536, 131072 }, SC_N_Q[] = { 64, 256, 131072 };
static const uint32_t SC_B[] = { 64, 256, 1024, 4096 }, SC_B_Q[] = { 16, 64 };
static const uint32_t SC_L[] = { 1, 4, 16, 61 }, SC_L_Q[] = { 1, 4 };
#define NELEM(a) (uint32_t)(sizeof a / sizeof a[0])

static bool skipped(bench_env* env, const char* group, const char* name, uint32_t size, uint32_t layers)
{
    if (!env->scaling_max || size <= env->scaling_max) return false;
    char why[128];
    snprintf(why, sizeof why, "above --scaling-max %u", env->scaling_max);
    bench_row* row = row_status(env, group, name, "skipped", why);
    if (row) { row->size = size; row->layers = layers; }
    return true;
}

static vkh2o_result refused_row(bench_env* env, vkh2o_result r, const char* group, const char* name, uint32_t size,
                                uint32_t layers)
{
    if (!refusal(r)) return r;
    bench_row* row = row_status(env, group, name, "refused", vkh2o_last_error(env->ctx));
    if (row) { row->size = size; row->layers = layers; }
    return VKH2O_OK;
}

/* The prefill of every layer of a kvcache with n tokens (the selection of a prompt's kept
 * tokens), one submission per layer. */
typedef struct prefill_work {
    vkh2o_kvcache* kv;
    vkh2o_buffer *ckv, *kpe, *mass;
    uint32_t n, layers;
} prefill_work;
static vkh2o_result run_prefill(void* user)
{
    prefill_work* w = user;
    for (uint32_t l = 0; l < w->layers; l++)
        BENCH_CHECK(vkh2o_run_kvcache_prefill(w->kv, &(vkh2o_kvcache_prefill){ .layer = l, .n = w->n, .ckv = w->ckv,
                                                                                .kpe = w->kpe, .mass = w->mass }));
    return VKH2O_OK;
}
static vkh2o_result scaling_forward(bench_env* env, const vkh2o_mla_config* cfg, const char* label)
{
    vkh2o_context* ctx = env->ctx;
    const uint32_t* S = env->quick ? SC_S_Q : SC_S;
    const uint32_t nS = env->quick ? NELEM(SC_S_Q) : NELEM(SC_S);
    uint32_t top = 0;
    for (uint32_t i = 0; i < nS; i++)
        if (!env->scaling_max || S[i] <= env->scaling_max) top = S[i];
    if (!top) {
        for (uint32_t i = 0; i < nS; i++) {
            char name[128];
            snprintf(name, sizeof name, "scaling forward %s S=%u bf16", label, S[i]);
            skipped(env, "scaling-forward", name, S[i], 1);
        }
        return VKH2O_OK;
    }
    ref_mla_weights rw;
    note(env, "%s: scaling: the forward layer\n", label);
    if (ref_mla_random_weights(cfg, VKH2O_DTYPE_BF16, 0x5eed, &rw) != 0)
        return bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: random weights");
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_mla_layer* L = NULL;
    vkh2o_result r = vkh2o_mla_host_weights_wrap(cfg, rw.views, &hw, &err);
    if (r != VKH2O_OK) r = bench_fail(env, r, "bench: %s", err.message);
    /* the scratch for the largest S measured, or the device's longest when that is refused */
    if (r == VKH2O_OK) {
        r = vkh2o_mla_layer_create(ctx, cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = top }, &L);
        if (r == VKH2O_ERROR_INVALID_ARGUMENT) r = vkh2o_mla_layer_create(ctx, cfg, hw, &(vkh2o_mla_layer_desc){ 0 }, &L);
    }
    const uint32_t maxS = L ? vkh2o_mla_layer_get_max_seq_len(L) : 0;
    float *hidden = NULL, *out = NULL;
    if (r == VKH2O_OK) {
        hidden = malloc((size_t)maxS * cfg->hidden_size * 4);
        out = malloc((size_t)maxS * cfg->hidden_size * 4);
        if (!hidden || !out) r = bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: forward rows");
        for (size_t i = 0; r == VKH2O_OK && i < (size_t)maxS * cfg->hidden_size; i++) hidden[i] = rand_normal();
    }
    double* t = calloc(3 * (size_t)env->runs, sizeof *t);
    if (!t && r == VKH2O_OK) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    for (uint32_t i = 0; r == VKH2O_OK && i < nS; i++) {
        char name[128];
        snprintf(name, sizeof name, "scaling forward %s S=%u bf16", label, S[i]);
        if (skipped(env, "scaling-forward", name, S[i], 1)) continue;
        if (S[i] > maxS) {   /* the library's own refusal, with its message */
            vkh2o_mla_layer* big = NULL;
            r = vkh2o_mla_layer_create(ctx, cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S[i] }, &big);
            vkh2o_mla_layer_destroy(big);
            if (r == VKH2O_OK) r = bench_fail(env, VKH2O_ERROR_UNSUPPORTED, "S=%u is above the bench layer's max_seq_len %u", S[i], maxS);
            r = refused_row(env, r, "scaling-forward", name, S[i], 1);
            continue;
        }
        bool ts = env->caps->timestamps;
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            note(env, "%s\n", name);
            vkh2o_mla_timings tm;
            const double w0 = cli_now();
            r = vkh2o_host_mla_forward(L, hidden, S[i], 0, out, NULL, &tm);
            const double wall = (cli_now() - w0) * 1e3;
            if (tm.total_ms < 0.0) ts = false;
            if (run && r == VKH2O_OK) {
                t[run - 1] = ts ? tm.total_ms : wall;
                t[env->runs + run - 1] = tm.attention_ms + tm.mass_ms;
            }
        }
        if (r != VKH2O_OK) break;
        const double ms = cli_median(t, env->runs);
        bench_row* row = row_ok(env, "scaling-forward", name, ms, forward_flops(cfg, S[i]) / (ms * 1e6), ts);
        if (row) {
            row->size = S[i];
            row->layers = 1;
            if (ts) row->share = cli_median(t + env->runs, env->runs) / ms;
        }
    }
    free(t);
    free(hidden);
    free(out);
    vkh2o_mla_layer_destroy(L);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&rw);
    return r;
}

static vkh2o_result scaling_decode(bench_env* env, const vkh2o_mla_config* cfg, const char* label)
{
    const uint32_t* N = env->quick ? SC_N_Q : SC_N;
    const uint32_t nN = env->quick ? NELEM(SC_N_Q) : NELEM(SC_N);
    vkh2o_mla_layer* L = NULL;
    float* h = NULL;
    vkh2o_result r = VKH2O_OK;
    for (uint32_t i = 0; i < nN && r == VKH2O_OK; i++) {
        char name[128];
        snprintf(name, sizeof name, "scaling decode %s layer bf16, kvcache fp16 %u tokens", label, N[i]);
        if (skipped(env, "scaling-decode", name, N[i], 1)) continue;
        if (!L) {
            note(env, "%s: scaling: the decode layer\n", label);
            r = make_layer(env, cfg, VKH2O_DTYPE_BF16, 16, &L);
            if (r == VKH2O_OK && !(h = malloc(4ull * cfg->hidden_size)))
                r = bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: decode inputs");
            for (uint32_t k = 0; h && k < cfg->hidden_size; k++) h[k] = 0x1p-7f;
            if (r != VKH2O_OK) break;
        }
        kv_spec ks = { .layers = 1, .fill = N[i], .cap = N[i], .max_tokens = N[i] + env->runs + 4 };
        kept_split(N[i], &ks.ns, &(uint32_t){ 0 }, &ks.nr);
        vkh2o_kvcache* c = NULL;
        note(env, "%s: filling the cache\n", name);
        r = make_kv(env, cfg, &ks, &c);
        if (r != VKH2O_OK) {
            r = refused_row(env, r, "scaling-decode", name, N[i], 1);
            continue;
        }
        decode_work w = { L, c, h, N[i] };
        probe_work pw = { 0 };
        double* t = calloc(2 * (size_t)env->runs, sizeof *t);
        bool ts = env->caps->timestamps;
        if (!t) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        if (r == VKH2O_OK) r = probe_make(env, VKH2O_PROBE_READ_TEXEL, &pw);
        /* the texel read probe in the same rounds: each row's fraction has its own reference */
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            double ms = 0.0, pms = 0.0;
            note(env, "%s\n", name);
            r = time_run(env, run_decode, &w, &ms, &ts);
            if (r == VKH2O_OK) r = time_run(env, run_probe, &pw, &pms, &ts);
            if (run) { t[run - 1] = ms; t[env->runs + run - 1] = pms; }
        }
        if (r == VKH2O_OK) {
            const double ms = cli_median(t, env->runs);
            bench_row* row = row_ok(env, "scaling-decode", name, ms, decode_flops(cfg, N[i]) / (ms * 1e6), ts);
            if (row) { row->size = N[i]; row->layers = 1; snprintf(row->param, sizeof row->param, "bf16"); }
            env->read_gbps = (double)pw.bytes / (cli_median(t + env->runs, env->runs) * 1e6);
            fill_stage_bytes(env, row, c, (double)vkh2o_mla_layer_get_weight_bytes(L));
        }
        probe_free(&pw);
        free(t);
        vkh2o_kvcache_destroy(c);
    }
    vkh2o_mla_layer_destroy(L);
    free(h);
    return r;
}

/* The kvcache step (FP16, H2O with summed scores, random inputs from the host) of every layer in
 * one recording, at each budget and layer count, the cache at its cap so that each step evicts
 * one token per layer (group "scaling-h2o"); and the prefill selection (group
 * "scaling-prefill"): n = 32 x budget prompt tokens ranked by their mass into a cache of 4
 * sinks + budget + recents, one submission per layer. */
static vkh2o_result scaling_h2o(bench_env* env, const vkh2o_mla_config* cfg, const char* label)
{
    vkh2o_context* ctx = env->ctx;
    const uint32_t* B = env->quick ? SC_B_Q : SC_B;
    const uint32_t* Ls = env->quick ? SC_L_Q : SC_L;
    const uint32_t nB = env->quick ? NELEM(SC_B_Q) : NELEM(SC_B), nL = env->quick ? NELEM(SC_L_Q) : NELEM(SC_L);
    vkh2o_result r = VKH2O_OK;
    for (uint32_t bi = 0; bi < nB && r == VKH2O_OK; bi++)
        for (uint32_t li = 0; li < nL && r == VKH2O_OK; li++) {
            char name[160];
            const uint32_t ns = 4, nr = env->quick ? 8 : 64, cap = ns + B[bi] + nr;
            snprintf(name, sizeof name, "scaling h2o step %s kvcache fp16, budget %u (cap %u), %u layers", label, B[bi], cap,
                     Ls[li]);
            if (skipped(env, "scaling-h2o", name, B[bi], Ls[li])) continue;
            vkh2o_kvcache* c = NULL;
            note(env, "%s: filling the cache\n", name);
            const kv_spec ks = { .layers = Ls[li], .fill = cap, .cap = cap, .ns = ns, .nr = nr, .max_tokens = cap + env->runs + 4 };
            r = make_kv(env, cfg, &ks, &c);
            if (r != VKH2O_OK) {
                r = refused_row(env, r, "scaling-h2o", name, B[bi], Ls[li]);
                continue;
            }
            step_work w = { 0 };
            r = step_inputs(env, c, Ls[li], &w);
            bool ts = env->caps->timestamps;
            double ms = 0.0;
            if (r == VKH2O_OK) r = time_median(env, run_step, &w, name, &ms, &ts);
            if (r == VKH2O_OK) {
                bench_row* row = row_ok(env, "scaling-h2o", name, ms, 0.0, ts);
                if (row) { row->size = B[bi]; row->layers = Ls[li]; snprintf(row->param, sizeof row->param, "h2o sum"); }
            }
            step_inputs_free(&w);
            vkh2o_kvcache_destroy(c);
        }
    /* the prefill selection */
    for (uint32_t bi = 0; bi < nB && r == VKH2O_OK; bi++) {
        const uint32_t k = B[bi], n = 32 * k, ns = 4, nr = 64 < n / 4 ? 64 : n / 4;
        const uint64_t nc = (uint64_t)n * cfg->kv_lora_rank, nk = (uint64_t)n * cfg->qk_rope_head_dim;
        prefill_work w = { .n = n };
        bool made = false;
        for (uint32_t li = 0; li < nL && r == VKH2O_OK; li++) {
            char name[160];
            snprintf(name, sizeof name, "scaling prefill selection %s kvcache, %u of %u tokens kept, %u layers", label,
                     ns + k + nr, n, Ls[li]);
            if (skipped(env, "scaling-prefill", name, k, Ls[li])) continue;
            if (!made) {
                made = true;
                float* x = malloc(4 * (nc > n ? nc : n));
                if (!x) return bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: prefill rows");
                if ((r = vkh2o_buffer_create(ctx, 4 * nc, &w.ckv)) == VKH2O_OK &&
                    (r = vkh2o_buffer_create(ctx, 4 * nk, &w.kpe)) == VKH2O_OK &&
                    (r = vkh2o_buffer_create(ctx, 4ull * n, &w.mass)) == VKH2O_OK) {
                    for (uint64_t i = 0; i < nc; i++) x[i] = rand_normal();
                    r = vkh2o_buffer_upload(w.ckv, 0, x, 4 * nc);
                    for (uint64_t i = 0; r == VKH2O_OK && i < nk; i++) x[i] = rand_normal();
                    if (r == VKH2O_OK) r = vkh2o_buffer_upload(w.kpe, 0, x, 4 * nk);
                    for (uint32_t i = 0; r == VKH2O_OK && i < n; i++) x[i] = fabsf(rand_normal());
                    if (r == VKH2O_OK) r = vkh2o_buffer_upload(w.mass, 0, x, 4ull * n);
                }
                free(x);
                if (r != VKH2O_OK) { r = refused_row(env, r, "scaling-prefill", name, k, Ls[li]); break; }
            }
            vkh2o_kvcache_desc d = { .num_layers = Ls[li], .max_tokens = n, .capacity_tokens = ns + k + nr, .n_sink = ns,
                                     .n_recent = nr };
            vkh2o_kvcache_desc_from_mla(cfg, &d);
            r = vkh2o_kvcache_create(ctx, &d, &w.kv);
            if (r != VKH2O_OK) { r = refused_row(env, r, "scaling-prefill", name, k, Ls[li]); continue; }
            w.layers = Ls[li];
            bool ts = env->caps->timestamps;
            double ms = 0.0;
            r = time_median(env, run_prefill, &w, name, &ms, &ts);
            if (r == VKH2O_OK) {
                bench_row* row = row_ok(env, "scaling-prefill", name, ms, 0.0, ts);
                if (row) { row->size = k; row->layers = Ls[li]; snprintf(row->param, sizeof row->param, "h2o sum"); }
            }
            vkh2o_kvcache_destroy(w.kv);
            w.kv = NULL;
        }
        vkh2o_buffer_destroy(w.ckv);
        vkh2o_buffer_destroy(w.kpe);
        vkh2o_buffer_destroy(w.mass);
    }
    return r;
}
vkh2o_result bench_scaling(bench_env* env)
{
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    BENCH_CHECK(scaling_forward(env, &cfg, label));
    BENCH_CHECK(scaling_decode(env, &cfg, label));
    return scaling_h2o(env, &cfg, label);
}

