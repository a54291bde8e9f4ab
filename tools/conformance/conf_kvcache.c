/* vkh2o-conformance, the KV-cache family: the one cache (vkh2o_kvcache) prefilled and stepped
 * through the public calls (vkh2o_run_kvcache_prefill / _step: kvc_prefill, kvc_append,
 * kvc_logits, kvc_softmax, kvc_pv, kvc_select) against ref/ref_kvcache.c, at every precision
 * (FP16, INT8, INT4, INT2, tiers by tokens and by bytes) and policy (H2O sum, mean, decayed,
 * TOVA, streaming, random).
 *
 * Bounds: each step's attention output nmse <= 1e-9 against the double reference (fp32
 * softmax and P.V over at most ~100 dequantised rows); the kept set exact after every step:
 * the same positions in the same tiers (the reference is synced from the device before each
 * step, so one decision is judged at a time). A step whose reference decided between two keys
 * closer than 1e-4 relative may differ (rounding decides such a pair); more than a tenth of the
 * steps so is a failure, as is any other difference. */
#include "conf.h"
#include "ref_kvcache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_def {
    const char* name;
    uint32_t H, kvl, rope, prefill, steps;
    vkh2o_kvcache_desc d;
} kv_def;

#define H2O(mode) .policy = VKH2O_POLICY_H2O, .score_mode = (mode)
static const kv_def defs[] = {
    { "fp16.full", 3, 30, 6, 7, 24, { 0 } },
    { "fp16.h2o_sum", 3, 30, 6, 9, 30, { .n_sink = 2, .n_recent = 5, .capacity_tokens = 20, H2O(VKH2O_SCORE_SUM) } },
    { "int8.h2o_mean", 5, 50, 14, 30, 30,
      { .n_sink = 3, .n_recent = 4, .capacity_tokens = 24, .precision = VKH2O_PRECISION_INT8, H2O(VKH2O_SCORE_MEAN) } },
    { "int4.decay_bytes", 3, 30, 6, 12, 30,
      { .n_sink = 1, .n_recent = 6, .capacity_bytes = 1500, .precision = VKH2O_PRECISION_INT4, H2O(VKH2O_SCORE_DECAY),
        .decay = 0.8f } },
    { "int2.tova_g8", 3, 30, 6, 5, 30,
      { .n_sink = 2, .n_recent = 3, .capacity_tokens = 25, .precision = VKH2O_PRECISION_INT2, H2O(VKH2O_SCORE_TOVA),
        .group_size = { 0, 0, 0, 8 } } },
    { "tiered.sum", 3, 30, 6, 20, 30,
      { .n_sink = 2, .n_recent = 4, .capacity_tokens = 30, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 2, 6, 5, 0 }, .group_size = { 0, 15, 0, 10 } } },
    { "tiered.streaming", 3, 30, 6, 9, 24,
      { .n_sink = 2, .n_recent = 3, .capacity_tokens = 18, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 1, 4, 4, 0 }, .policy = VKH2O_POLICY_STREAMING } },
    { "tiered.mean_11heads", 11, 40, 8, 15, 20,
      { .n_sink = 3, .n_recent = 4, .capacity_tokens = 26, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 2, 5, 0, 0 }, H2O(VKH2O_SCORE_MEAN) } },
    { "tiered.bytes_int2", 11, 40, 8, 40, 24,
      { .n_sink = 3, .n_recent = 5, .capacity_bytes = 3000, .precision = VKH2O_PRECISION_TIERED, .tier_mask = 0xf,
        H2O(VKH2O_SCORE_DECAY), .group_size = { 0, 0, 48, 16 } } },
    { "int4.random", 3, 30, 6, 9, 24,
      { .n_sink = 2, .n_recent = 3, .capacity_tokens = 18, .precision = VKH2O_PRECISION_INT4,
        .policy = VKH2O_POLICY_RANDOM, .seed = 7 } },
    /* the Kimi K2 row (kv_lora 512, rope 64) with 64 heads, tiers by score */
    { "tiered.kimi", 64, 512, 64, 48, 8,
      { .n_sink = 4, .n_recent = 8, .capacity_tokens = 40, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 8, 8, 8, 0 } } },
};

enum { P_DEF };

typedef struct snap {
    uint32_t len;
    uint32_t* pos;
    float* score;
    uint8_t* tier;
    float* rows;
} snap;

static vkh2o_result snap_read(vkh2o_kvcache* c, snap* s)
{
    vkh2o_kvcache_snapshot k = { .positions = s->pos, .scores = s->score, .tiers = s->tier, .rows = s->rows };
    vkh2o_result r = vkh2o_kvcache_read_snapshot(c, 0, &k);
    s->len = k.len;
    return r;
}

static bool same_kept(const snap* s, const ref_kvc* r)
{
    if (s->len != r->n) return false;
    for (uint32_t i = 0; i < s->len; i++) {
        const ref_kvc_token* t = ref_kvc_find(r, s->pos[i]);
        if (!t || t->tier != s->tier[i]) return false;
    }
    return true;
}

static void run_kv(const conf_env* env, const conf_case* c, conf_result* r)
{
    const kv_def* k = &defs[c->p[P_DEF]];
    const uint32_t H = k->H, KVL = k->kvl, R = k->rope, W = KVL + R, P = k->prefill;
    const uint32_t steps = k->steps, extra = env->perf ? 1 + env->perf_runs : 0;
    vkh2o_kvcache_desc d = k->d;
    d.num_heads = H;
    d.kv_lora_rank = KVL;
    d.qk_rope_head_dim = R;
    d.max_tokens = P + steps + extra + 1;
    d.scale = 0.25f;
    vkh2o_kvcache* kc = NULL;
    vkh2o_buffer *bckv = NULL, *bkpe = NULL, *bmass = NULL, *bq = NULL, *bc = NULL, *bk = NULL, *bo = NULL;
    snap s = { 0 };
    ref_kvc ref;
    bool ref_made = false;
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    float* pckv = malloc(sizeof(float) * P * KVL);
    float* pkpe = malloc(sizeof(float) * P * R);
    float* pmass = malloc(sizeof(float) * P);
    float* q = malloc(sizeof(float) * H * W);
    float* ckv = malloc(sizeof(float) * KVL);
    float* kpe = malloc(sizeof(float) * R);
    float* out = malloc(sizeof(float) * H * KVL);
    double* rout = malloc(sizeof(double) * H * KVL);
    float* routf = malloc(sizeof(float) * H * KVL);
    uint32_t* tiers32 = NULL;
    vkh2o_result res = vkh2o_kvcache_create(env->ctx, &d, &kc);
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_kvcache_create");
        goto done;
    }
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(kc);
    const uint32_t S = pl->total_slots;
    s.pos = calloc(S, 4);
    s.score = calloc(S, 4);
    s.tier = calloc(S, 1);
    s.rows = calloc((size_t)S * W, 4);
    tiers32 = calloc(S + 1, 4);
    if (!pckv || !pkpe || !pmass || !q || !ckv || !kpe || !out || !rout || !routf || !s.pos || !s.score || !s.tier ||
        !s.rows || !tiers32) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    const ref_kvc_config rc = ref_kvc_config_of(kc, 0);
    ref_kvc_init(&ref, &rc);
    ref_made = true;
    conf_fill_normal(&rng, pckv, (size_t)P * KVL, 1.0f);
    conf_fill_normal(&rng, pkpe, (size_t)P * R, 1.0f);
    for (uint32_t i = 0; i < P; i++)
        pmass[i] = 0.5f + conf_uniform(&rng) * 4.0f;
    if (!(bckv = conf_upload(env, r, pckv, 4ull * P * KVL)) || !(bkpe = conf_upload(env, r, pkpe, 4ull * P * R)) ||
        !(bmass = conf_upload(env, r, pmass, 4ull * P)) || !(bq = conf_buffer(env, r, 4ull * H * W)) ||
        !(bc = conf_buffer(env, r, 4ull * KVL)) || !(bk = conf_buffer(env, r, 4ull * R)) ||
        !(bo = conf_buffer(env, r, 4ull * H * KVL)))
        goto done;
    res = vkh2o_run_kvcache_prefill(kc, &(vkh2o_kvcache_prefill){ .n = P, .ckv = bckv, .kpe = bkpe, .mass = bmass });
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_run_kvcache_prefill");
        goto done;
    }
    ref_kvc_prefill(&ref, P, pckv, pkpe, pmass);
    if ((res = snap_read(kc, &s)) != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_kvcache_read_snapshot");
        goto done;
    }
    if (!same_kept(&s, &ref)) {
        snprintf(r->note, sizeof r->note, "prefill: the kept set differs from the reference's (%u tokens held, %u expected)",
                 s.len, ref.n);
        conf_judge(r, "kept-set", 1, 0);
        goto done;
    }
    double worst = 0.0;
    uint32_t near = 0, diff = 0;
    const vkh2o_kvcache_step ks = { .q = bq, .ckv = bc, .kpe = bk, .out = bo };
    for (uint32_t st = 0; st < steps; st++) {
        conf_fill_normal(&rng, q, (size_t)H * W, 0.6f);
        conf_fill_normal(&rng, ckv, KVL, 1.0f);
        conf_fill_normal(&rng, kpe, R, 1.0f);
        if ((res = vkh2o_buffer_upload(bq, 0, q, 4ull * H * W)) != VKH2O_OK ||
            (res = vkh2o_buffer_upload(bc, 0, ckv, 4ull * KVL)) != VKH2O_OK ||
            (res = vkh2o_buffer_upload(bk, 0, kpe, 4ull * R)) != VKH2O_OK ||
            (res = vkh2o_buffer_fill(bo, 0, 4ull * H * KVL, CONF_POISON_WORD)) != VKH2O_OK ||
            (res = snap_read(kc, &s)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "the step's inputs");
            goto done;
        }
        for (uint32_t i = 0; i < s.len; i++)
            tiers32[i] = s.tier[i];
        ref_kvc_set(&ref, s.len, s.pos, tiers32, s.score, s.rows, P + st);
        if ((res = vkh2o_run_kvcache_step(kc, &ks)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_run_kvcache_step");
            goto done;
        }
        ref_kvc_step(&ref, q, ckv, kpe, rout);
        if ((res = vkh2o_buffer_download(bo, 0, out, 4ull * H * KVL)) != VKH2O_OK ||
            (res = snap_read(kc, &s)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "reading the step back");
            goto done;
        }
        for (uint32_t i = 0; i < H * KVL; i++)
            routf[i] = (float)rout[i];
        if (st == steps - 1) conf_poison_f32(env, out, (size_t)H * KVL);
        const double e = conf_nmse(out, routf, (size_t)H * KVL);
        worst = e > worst || e != e ? e : worst;
        if (!same_kept(&s, &ref)) {
            if (ref.gap < 1e-4) near++;
            else diff++;
        }
    }
    if (diff || near * 10 > steps) {
        snprintf(r->note, sizeof r->note, "kept set differs from the reference after %u steps (%u more at near ties)", diff,
                 near);
        conf_judge(r, "kept-set", diff + near, 0);
    } else {
        conf_judge(r, "nmse", worst, 1e-9);
    }
    if (env->perf && r->status == CONF_PASS) {
        double t[64];
        for (uint32_t run = 0; run < extra; run++) {
            const double t0 = vkh2o_context_get_device_ms(env->ctx);
            const uint64_t d0 = conf_dispatches(env->ctx);
            if ((res = vkh2o_run_kvcache_step(kc, &ks)) != VKH2O_OK) {
                conf_set_failure(env, r, res, "vkh2o_run_kvcache_step (timed)");
                goto done;
            }
            if (run) t[run - 1] = vkh2o_context_get_device_ms(env->ctx) - t0;
            r->dispatches = (double)(conf_dispatches(env->ctx) - d0);
        }
        r->ms = env->caps->timestamps ? conf_median(t, extra - 1) : -1.0;
        vkh2o_kvcache_stats stats;
        if (vkh2o_kvcache_read_stats(kc, 0, &stats) == VKH2O_OK) {
            r->bytes = (double)stats.bytes_used + 4.0 * H * (W + KVL);
            r->flops = 2.0 * H * stats.len * (W + KVL);
        }
    }
done:
    if (ref_made) ref_kvc_free(&ref);
    vkh2o_kvcache_destroy(kc);
    vkh2o_buffer_destroy(bckv);
    vkh2o_buffer_destroy(bkpe);
    vkh2o_buffer_destroy(bmass);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(bc);
    vkh2o_buffer_destroy(bk);
    vkh2o_buffer_destroy(bo);
    free(s.pos);
    free(s.score);
    free(s.tier);
    free(s.rows);
    free(tiers32);
    free(pckv);
    free(pkpe);
    free(pmass);
    free(q);
    free(ckv);
    free(kpe);
    free(out);
    free(rout);
    free(routf);
}

void conf_register_kvcache(conf_registry* reg)
{
    for (uint32_t sh = CONF_SHAPES_CPU; sh <= CONF_SHAPES_GPU; sh++)
        for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
            const kv_def* k = &defs[i];
            const bool full = k->d.capacity_tokens == 0 && k->d.capacity_bytes == 0 && k->d.precision == VKH2O_PRECISION_FP16;
            conf_case* c = conf_add(reg, run_kv, sh,
                                    full ? "kvc_prefill,kvc_append,kvc_logits,kvc_softmax,kvc_pv"
                                         : "kvc_prefill,kvc_append,kvc_logits,kvc_softmax,kvc_pv,kvc_select",
                                    "kvcache.step.%s.%s.h%u_r%u_p%u", sh == CONF_SHAPES_CPU ? "cpu" : "gpu", k->name, k->H,
                                    k->kvl + k->rope, k->prefill);
            if (!c) return;
            c->p[P_DEF] = (int32_t)i;
            snprintf(c->params, sizeof c->params, "%u heads, rows of %u + %u, prefill %u then %u steps", k->H, k->kvl,
                     k->rope, k->prefill, k->steps);
        }
}
