/* vkh2o-bench --decode, --kv-decode and --policy-cost: the decode step of a layer and the cache
 * step alone against the one KV cache, each run timed by the context's device time (or wall
 * time), the work of a row alternating round by round with the rows it is compared with (so a
 * busy machine slows them alike). A length the device or the library refuses (memory,
 * maxStorageBufferRange, llvmpipe's loop limit) is a row with status "refused" and the
 * library's message. */
#include "bench.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --decode: one token through the Kimi layer (BF16 and FP8 weights, alternating) against a
 * kvcache of --cache-len tokens (FP16, H2O with summed scores, at its cap so that every step
 * evicts one token, in place), and the cache step alone (append, attention, score, eviction) on
 * a third such cache; each row's bytes by stage beside the minimum. A length the device refuses
 * is a refused row, then the next shorter length (halving, down to 256, 16 with --quick). */
vkh2o_result bench_decode(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    static const vkh2o_dtype dts[2] = { VKH2O_DTYPE_BF16, VKH2O_DTYPE_F8_E4M3 };
    static const char* dtn[2] = { "bf16", "fp8" };
    vkh2o_mla_layer* L[2] = { NULL, NULL };
    vkh2o_kvcache* C[3] = { NULL, NULL, NULL };
    step_work sw = { 0 };
    vkh2o_result r = VKH2O_OK;
    note(env, "%s: decode layers (BF16, FP8) with random weights\n", label);
    for (int i = 0; i < 2 && r == VKH2O_OK; i++) r = make_layer(env, &cfg, dts[i], 16, &L[i]);
    float* h = malloc(4ull * cfg.hidden_size);
    if (!h && r == VKH2O_OK) r = bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: decode inputs");
    for (uint32_t i = 0; h && i < cfg.hidden_size; i++) h[i] = rand_normal();
    uint32_t len = env->cache_len;
    for (; r == VKH2O_OK; len /= 2) {
        kv_spec ks = { .layers = 1, .fill = len, .cap = len, .max_tokens = len + env->runs + 4 };
        kept_split(len, &ks.ns, &(uint32_t){ 0 }, &ks.nr);
        for (int i = 0; i < 3 && r == VKH2O_OK; i++) r = make_kv(env, &cfg, &ks, &C[i]);
        if (r == VKH2O_OK || !refusal(r)) break;
        char name[192];
        snprintf(name, sizeof name, "decode %s layer, kvcache %u tokens", label, len);
        row_status(env, "decode", name, "refused", vkh2o_last_error(ctx));
        for (int i = 0; i < 3; i++) { vkh2o_kvcache_destroy(C[i]); C[i] = NULL; }
        r = VKH2O_OK;
        if (len / 2 < (env->quick ? 16u : 256u)) {
            len = 0;
            break;
        }
    }
    if (r == VKH2O_OK && len) {
        decode_work dw[2] = { { L[0], C[0], h, len }, { L[1], C[1], h, len } };
        r = step_inputs(env, C[2], 1, &sw);
        probe_work pw = { 0 };
        if (r == VKH2O_OK) r = probe_make(env, VKH2O_PROBE_READ_TEXEL, &pw);
        uint32_t disp[3] = { 0 }, bar[3] = { 0 };   /* the dispatches and barriers of one run of each step */
        double* t = calloc(4 * (size_t)env->runs, sizeof *t);
        if (!t && r == VKH2O_OK) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        bool ts = env->caps->timestamps;
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            note(env, run ? "%s: decode steps\n" : "%s: decode warm-up\n", label);
            for (int k = 0; k < 4 && r == VKH2O_OK; k++) {
                double ms = 0.0;
                const uint64_t d0 = cli_dispatches(ctx), b0 = vkh2o_context_get_barriers(ctx);
                r = k < 2    ? time_run(env, run_decode, &dw[k], &ms, &ts)
                    : k == 2 ? time_run(env, run_step, &sw, &ms, &ts)
                             : time_run(env, run_probe, &pw, &ms, &ts);
                if (k < 3) {
                    disp[k] = (uint32_t)(cli_dispatches(ctx) - d0);
                    bar[k] = (uint32_t)(vkh2o_context_get_barriers(ctx) - b0);
                }
                if (run) t[(size_t)k * env->runs + run - 1] = ms;
            }
        }
        /* the read bandwidth of the same rounds is the reference of the fractions below */
        if (r == VKH2O_OK) {
            const double pms = cli_median(t + 3 * (size_t)env->runs, env->runs);
            char name[160];
            snprintf(name, sizeof name, "decode reference: read %llu MiB, uniform texel buffer, in the decode rounds",
                     (unsigned long long)(pw.bytes >> 20));
            bench_row* row = row_ok(env, "decode", name, pms, 0.0, ts);
            if (row) {
                row->gbps = (double)pw.bytes / (pms * 1e6);
                snprintf(row->param, sizeof row->param, "read");
                env->read_gbps = row->gbps;
            }
        }
        probe_free(&pw);
        for (int k = 0; r == VKH2O_OK && k < 2; k++) {
            char name[192];
            snprintf(name, sizeof name, "decode %s layer, kvcache fp16 %u tokens, %s weights", label, len, dtn[k]);
            const double ms = cli_median(t + (size_t)k * env->runs, env->runs);
            bench_row* row = row_ok(env, "decode", name, ms, decode_flops(&cfg, len) / (ms * 1e6), ts);
            if (row) {
                row->size = len;
                snprintf(row->param, sizeof row->param, "%s", dtn[k]);
                if (len != env->cache_len)
                    snprintf(row->reason, sizeof row->reason, "%u tokens refused on this device; the longest accepted cache",
                             env->cache_len);
            }
            fill_stage_bytes(env, row, C[k], (double)vkh2o_mla_layer_get_weight_bytes(L[k]));
            if (row) {
                row->dispatches = disp[k];
                row->barriers = bar[k];
            }
        }
        if (r == VKH2O_OK) {
            char name[192];
            snprintf(name, sizeof name, "decode %s stage: cache step alone (append, attention, score, evict in place), %u tokens",
                     label, len);
            const double ms = cli_median(t + 2 * (size_t)env->runs, env->runs);
            const double att = 2.0 * cfg.num_heads * len * (2.0 * cfg.kv_lora_rank + cfg.qk_rope_head_dim);
            bench_row* row = row_ok(env, "decode", name, ms, att / (ms * 1e6), ts);
            if (row) {
                row->size = len;
                snprintf(row->param, sizeof row->param, "cache step");
            }
            fill_stage_bytes(env, row, C[2], 0.0);
            if (row) {
                row->dispatches = disp[2];
                row->barriers = bar[2];
            }
        }
        free(t);
    }
    step_inputs_free(&sw);
    for (int i = 0; i < 3; i++) vkh2o_kvcache_destroy(C[i]);
    for (int i = 0; i < 2; i++) vkh2o_mla_layer_destroy(L[i]);
    free(h);
    return r;
}

/* --kv-decode: one token through the Kimi layer (BF16 weights) against the kvcache at each
 * precision (FP16, INT8, INT4, INT2 and FP16 -> INT8 -> INT4 tiers; --cache-len tokens kept, at
 * the cap so that every step demotes or evicts), tiers by bytes at 25 % of the FP16 bytes, the
 * full cache, and an FP16 H2O cache that keeps a quarter of the --cache-len tokens it was given
 * (the context compressed by tokens), side by side in the same rounds; the ratio is each row's
 * speed against the FP16 row's; bytes by stage beside the minimum. */
vkh2o_result bench_kv_decode(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    const uint32_t len = env->cache_len;
    enum { NKV = 8 };
    static const char* names[NKV] = { "fp16", "int8", "int4", "int2", "tiered fp16>int8>int4",
                                      "tiers by bytes fp16>int8>int4 at 25 %", "the full cache (no eviction)",
                                      "fp16 h2o keeping 25 % of the tokens" };
    const uint32_t quarter = len / 4 > 2 ? len / 4 : 2;
    vkh2o_mla_layer* L = NULL;
    vkh2o_kvcache* kv[NKV] = { NULL };
    uint32_t kept[NKV];   /* the tokens each cache holds of the len given */
    note(env, "%s: kv-decode layer (BF16) with random weights\n", label);
    vkh2o_result r = make_layer(env, &cfg, VKH2O_DTYPE_BF16, 16, &L);
    float* h = malloc(4ull * cfg.hidden_size);
    if (!h && r == VKH2O_OK) r = bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: kv-decode inputs");
    for (uint32_t i = 0; h && i < cfg.hidden_size; i++) h[i] = rand_normal();
    for (int k = 0; r == VKH2O_OK && k < NKV; k++) {
        kv_spec ks = { .layers = 1, .fill = len, .cap = len, .max_tokens = len + env->runs + 4,
                       .prec = k < 4 ? (vkh2o_kv_precision)k : k == 6 ? VKH2O_PRECISION_FP16 : VKH2O_PRECISION_TIERED,
                       .bytes_frac = k == 5 ? 0.25 : 0.0 };
        kept_split(len, &ks.ns, &(uint32_t){ 0 }, &ks.nr);
        if (k == 6)   /* no capacity: every token, no score or selection work */
            ks.cap = ks.ns = ks.nr = 0;
        if (k == 7) {   /* len tokens given, a quarter kept */
            ks.cap = quarter;
            kept_split(quarter, &ks.ns, &(uint32_t){ 0 }, &ks.nr);
        }
        kept[k] = k == 7 ? quarter : len;
        r = make_kv(env, &cfg, &ks, &kv[k]);
    }
    if (r != VKH2O_OK && refusal(r)) {
        char name[192];
        snprintf(name, sizeof name, "kv-decode %s layer, %u tokens", label, len);
        row_status(env, "kv-decode", name, "refused", vkh2o_last_error(ctx));
        r = VKH2O_OK;
        goto done;
    }
    if (r == VKH2O_OK) {
        decode_work kw[NKV];
        for (int k = 0; k < NKV; k++) kw[k] = (decode_work){ L, kv[k], h, len };
        double* t = calloc((size_t)NKV * env->runs, sizeof *t);
        if (!t) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        bool ts = env->caps->timestamps;
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            note(env, run ? "%s: kv-decode steps\n" : "%s: kv-decode warm-up\n", label);
            for (int k = 0; k < NKV && r == VKH2O_OK; k++) {
                double ms = 0.0;
                r = time_run(env, run_decode, &kw[k], &ms, &ts);
                if (run) t[(size_t)k * env->runs + run - 1] = ms;
            }
        }
        const double weights = (double)vkh2o_mla_layer_get_weight_bytes(L);
        const double base = r == VKH2O_OK ? cli_median(t, env->runs) : 0.0;
        for (int k = 0; r == VKH2O_OK && k < NKV; k++) {
            char name[192];
            if (kept[k] != len)
                snprintf(name, sizeof name, "kv-decode %s layer, %u tokens given, %u kept, %s", label, len, kept[k], names[k]);
            else
                snprintf(name, sizeof name, "kv-decode %s layer, %u tokens kept, %s", label, len, names[k]);
            const double ms = cli_median(t + (size_t)k * env->runs, env->runs);
            bench_row* row = row_ok(env, "kv-decode", name, ms, decode_flops(&cfg, kept[k]) / (ms * 1e6), ts);
            if (!row) continue;
            row->size = len;
            row->ratio = base / ms;
            snprintf(row->param, sizeof row->param, "%s", names[k]);
            fill_stage_bytes(env, row, kv[k], weights);
        }
        free(t);
    }
done:
    for (int k = 0; k < NKV; k++) vkh2o_kvcache_destroy(kv[k]);
    vkh2o_mla_layer_destroy(L);
    free(h);
    return r;
}

/* --policy-cost: the cache step (random inputs: append, attention, score, selection, eviction
 * in place) of every eviction policy / score mode side by side at the Kimi latent shape, each
 * at its cap of --cache-len tokens (one token evicted per step), next to the full cache of the
 * same length (FP16, no capacity: append and attention only, no score and no selection work):
 * the difference is the policy's cost. Same length refusal and halving as --decode. */
static vkh2o_result policy_cost_at(bench_env* env, const vkh2o_mla_config* cfgp, const char* label);
vkh2o_result bench_policy_cost(bench_env* env)
{
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    BENCH_CHECK(policy_cost_at(env, &cfg, label));
    /* one head: the same caches and policies with a 64x cheaper attention, where the policy's
     * part stands out of the noise */
    char l1[64];
    snprintf(l1, sizeof l1, "%s 1 head", label);
    cfg.num_heads = 1;
    return policy_cost_at(env, &cfg, l1);
}

static vkh2o_result policy_cost_at(bench_env* env, const vkh2o_mla_config* cfgp, const char* label)
{
    vkh2o_context* ctx = env->ctx;
    const vkh2o_mla_config cfg = *cfgp;
    static const struct { const char* name; vkh2o_evict_policy pol; vkh2o_score_mode mode; } pols[] = {
        { "full cache (append + attention, no selection)", VKH2O_POLICY_H2O, VKH2O_SCORE_SUM },
        { "h2o sum", VKH2O_POLICY_H2O, VKH2O_SCORE_SUM },
        { "h2o mean", VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN },
        { "h2o decay", VKH2O_POLICY_H2O, VKH2O_SCORE_DECAY },
        { "tova", VKH2O_POLICY_H2O, VKH2O_SCORE_TOVA },
        { "streaming", VKH2O_POLICY_STREAMING, VKH2O_SCORE_SUM },
        { "random", VKH2O_POLICY_RANDOM, VKH2O_SCORE_SUM },
    };
    enum { NP = sizeof pols / sizeof pols[0] };
    vkh2o_kvcache* C[NP] = { NULL };
    step_work sw[NP];
    memset(sw, 0, sizeof sw);
    vkh2o_result r = VKH2O_OK;
    uint32_t len = env->cache_len;
    for (;; len /= 2) {
        for (uint32_t i = 0; i < NP && r == VKH2O_OK; i++) {
            kv_spec ks = { .layers = 1, .fill = len, .cap = i ? len : 0, .max_tokens = len + env->runs + 4,
                           .pol = pols[i].pol, .mode = pols[i].mode };
            if (i) kept_split(len, &ks.ns, &(uint32_t){ 0 }, &ks.nr);
            r = make_kv(env, &cfg, &ks, &C[i]);
        }
        if (r == VKH2O_OK || !refusal(r)) break;
        char name[192];
        snprintf(name, sizeof name, "policy cost %s, kvcache %u tokens", label, len);
        row_status(env, "policy", name, "refused", vkh2o_last_error(ctx));
        for (uint32_t i = 0; i < NP; i++) { vkh2o_kvcache_destroy(C[i]); C[i] = NULL; }
        r = VKH2O_OK;
        if (len / 2 < (env->quick ? 16u : 256u)) { len = 0; break; }
    }
    double* t = calloc(NP * (size_t)env->runs, sizeof *t);
    if (!t && r == VKH2O_OK) r = bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: policy timings");
    for (uint32_t i = 0; r == VKH2O_OK && len && i < NP; i++) r = step_inputs(env, C[i], 1, &sw[i]);
    bool ts = env->caps->timestamps;
    for (uint32_t run = 0; r == VKH2O_OK && len && run <= env->runs; run++) {
        note(env, "%s: policy steps\n", label);
        for (uint32_t j = 0; j < NP && r == VKH2O_OK; j++) {
            const uint32_t i = (j + run) % NP;   /* each round starts elsewhere: no position bias */
            double ms = 0.0;
            r = time_run(env, run_step, &sw[i], &ms, &ts);
            if (run) t[(size_t)i * env->runs + run - 1] = ms;
        }
    }
    double ref = 0.0;
    for (uint32_t i = 0; r == VKH2O_OK && len && i < NP; i++) {
        char name[192];
        snprintf(name, sizeof name, "policy cost %s, kvcache %u tokens: %s", label, len, pols[i].name);
        const double ms = cli_median(t + (size_t)i * env->runs, env->runs);
        if (i == 0) ref = ms;
        bench_row* row = row_ok(env, "policy", name, ms, 0.0, ts);
        if (!row) continue;
        row->size = len;
        snprintf(row->param, sizeof row->param, "%s", i ? pols[i].name : "none");
        row->share = i ? (ms - ref) / ms : 0.0;   /* the policy's share of the step */
        if (len != env->cache_len)
            snprintf(row->reason, sizeof row->reason, "%u tokens refused on this device; the longest accepted cache", env->cache_len);
    }
    free(t);
    for (uint32_t i = 0; i < NP; i++) {
        step_inputs_free(&sw[i]);
        vkh2o_kvcache_destroy(C[i]);
    }
    return r;
}
