/* vkh2o-conformance, the KV-cache family: the one cache (vkh2o_kvcache) prefilled and stepped
 * through the public calls (vkh2o_run_kvcache_prefill / _step: kvc_prefill, kvc_attend,
 * kvc_combine, kvc_select) against ref/ref_kvcache.c, over the shapes of
 * conf_kvcache_defs.h: every precision (FP16, INT8, INT4, INT2, tiers by tokens and by bytes)
 * and policy (H2O sum, mean, decayed, TOVA, streaming, random), both layouts (LATENT, EXPANDED
 * at odd head counts and dims), fp16 and f32 top tiers.
 *
 * Checks and bounds, against the double reference synced from the device before each step (so
 * one decision is judged at a time):
 *   - the prefill: the same positions in the same tiers; each row within twice its tier's
 *     quantisation bound of the input (ref_kvc_bound), an f32 top tier's rows exactly the input;
 *   - each step's attention output: nmse <= 1e-9 (fp32 softmax and P.V over at most ~100
 *     dequantised rows), the output poisoned before and the guard words after it untouched;
 *   - the stats: position, length, per-tier counts and bytes agree with the snapshot, a byte
 *     budget is kept;
 *   - the kept set after each step: the same positions in the same tiers; then every score within
 *     1e-4 relative, a row that kept its tier bit-identical, a demoted row within its new tier's
 *     bound, the new token's row exactly the reference's. A step whose reference decided between
 *     two keys closer than 1e-4 relative may keep another set (rounding decides such a pair); more
 *     than a tenth of the steps so is a failure, as is any other difference. */
#include "conf.h"
#include "conf_kvcache_defs.h"
#include "ref_kvcache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P_DEF };

typedef struct snap {
    uint32_t len;
    uint32_t* pos;
    float* score;
    uint8_t* tier;
    float* rows;
} snap;

static bool snap_alloc(snap* s, uint32_t slots, uint32_t W)
{
    s->pos = calloc(slots, 4);
    s->score = calloc(slots, 4);
    s->tier = calloc(slots, 1);
    s->rows = calloc((size_t)slots * W, 4);
    return s->pos && s->score && s->tier && s->rows;
}

static void snap_free(snap* s)
{
    free(s->pos);
    free(s->score);
    free(s->tier);
    free(s->rows);
}

static vkh2o_result snap_read(vkh2o_kvcache* c, snap* s)
{
    vkh2o_kvcache_snapshot k = { .positions = s->pos, .scores = s->score, .tiers = s->tier, .rows = s->rows };
    vkh2o_result r = vkh2o_kvcache_read_snapshot(c, 0, &k);
    s->len = k.len;
    return r;
}

/* a step's or prefill's two row inputs: LATENT ckv and kpe, EXPANDED k and v */
static void step_inputs(vkh2o_kvcache_step* s, bool expanded, const vkh2o_buffer* a, const vkh2o_buffer* b)
{
    if (expanded) s->k = a, s->v = b;
    else s->ckv = a, s->kpe = b;
}

static void prefill_inputs(vkh2o_kvcache_prefill* p, bool expanded, const vkh2o_buffer* a, const vkh2o_buffer* b)
{
    if (expanded) p->k = a, p->v = b;
    else p->ckv = a, p->kpe = b;
}

static vkh2o_kvcache_desc def_desc(const conf_kv_def* k, uint32_t max_tokens)
{
    vkh2o_kvcache_desc d = k->d;
    d.num_heads = k->H;
    d.kv_lora_rank = k->kvl;
    d.qk_rope_head_dim = k->rope;
    d.max_tokens = max_tokens;
    d.scale = 0.25f;
    return d;
}

#define FAIL(metric, ...)                                   \
    do {                                                    \
        snprintf(r->note, sizeof r->note, __VA_ARGS__);     \
        conf_judge(r, metric, 1, 0);                        \
        goto done;                                          \
    } while (0)

static void run_kv(const conf_env* env, const conf_case* c, conf_result* r)
{
    const conf_kv_def* k = &conf_kv_defs[c->p[P_DEF]];
    const uint32_t H = k->H, P = k->prefill, steps = k->steps, extra = env->perf ? 1 + env->perf_runs : 0;
    const uint32_t need = P + steps + extra + 1;
    vkh2o_kvcache_desc d = def_desc(k, k->max_tokens > need ? k->max_tokens : need);
    vkh2o_kvcache* kc = NULL;
    vkh2o_buffer *bpa = NULL, *bpb = NULL, *bmass = NULL, *bq = NULL, *ba = NULL, *bb = NULL, *bo = NULL;
    snap s = { 0 }, before = { 0 };
    ref_kvc ref;
    bool ref_made = false;
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    float *pa = NULL, *pb = NULL, *pmass = NULL, *x = NULL, *q = NULL, *ra = NULL, *rb = NULL, *out = NULL, *routf = NULL;
    double* rout = NULL;
    uint32_t* tiers32 = NULL;
    vkh2o_result res = vkh2o_kvcache_create(env->ctx, &d, &kc);
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_kvcache_create");
        goto done;
    }
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(kc);
    const vkh2o_kvcache_desc* rd = vkh2o_kvcache_get_desc(kc);
    const ref_kvc_config rc = ref_kvc_config_of(kc, 0);
    const bool expanded = rc.expanded;
    /* row numbers: the whole row, its first input (ckv / k), per head of the query and output */
    const uint32_t W = ref_kvc_row(&rc), WA = ref_kvc_first(&rc), WB = W - WA, QW = ref_kvc_qw(&rc), OW = ref_kvc_ow(&rc);
    const uint32_t S = pl->total_slots;
    if (W != vkh2o_kvcache_row_numbers(rd))
        FAIL("row", "the reference's row has %u numbers, the cache's %u", W, vkh2o_kvcache_row_numbers(rd));
    pa = malloc(sizeof(float) * P * WA);
    pb = malloc(sizeof(float) * P * WB);
    pmass = malloc(sizeof(float) * P);
    x = malloc(sizeof(float) * W);
    q = malloc(sizeof(float) * H * QW);
    ra = malloc(sizeof(float) * WA);
    rb = malloc(sizeof(float) * WB);
    out = malloc(sizeof(float) * H * OW);
    rout = malloc(sizeof(double) * H * OW);
    routf = malloc(sizeof(float) * H * OW);
    tiers32 = calloc(S + 1, 4);
    if (!pa || !pb || !pmass || !x || !q || !ra || !rb || !out || !rout || !routf || !tiers32 || !snap_alloc(&s, S, W) ||
        !snap_alloc(&before, S, W)) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    ref_kvc_init(&ref, &rc);
    ref_made = true;

    /* the prefill: rows and a mass with distinct values */
    conf_fill_normal(&rng, pa, (size_t)P * WA, 1.0f);
    conf_fill_normal(&rng, pb, (size_t)P * WB, 1.0f);
    for (uint32_t i = 0; i < P; i++)
        pmass[i] = 0.5f + conf_uniform(&rng) * 4.0f;
    if (!(bpa = conf_upload(env, r, pa, 4ull * P * WA)) || !(bpb = conf_upload(env, r, pb, 4ull * P * WB)) ||
        !(bmass = conf_upload(env, r, pmass, 4ull * P)) || !(bq = conf_buffer(env, r, 4ull * H * QW)) ||
        !(ba = conf_buffer(env, r, 4ull * WA)) || !(bb = conf_buffer(env, r, 4ull * WB)) ||
        !(bo = conf_buffer(env, r, 4ull * H * OW)))
        goto done;
    vkh2o_kvcache_prefill kp = { .n = P, .mass = bmass };
    prefill_inputs(&kp, expanded, bpa, bpb);
    if ((res = vkh2o_run_kvcache_prefill(kc, &kp)) != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_run_kvcache_prefill");
        goto done;
    }
    ref_kvc_prefill(&ref, P, pa, pb, pmass);
    if ((res = snap_read(kc, &s)) != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_kvcache_read_snapshot");
        goto done;
    }
    if (!ref_kvc_holds(&ref, s.len, s.pos, s.tier))
        FAIL("kept-set", "prefill: the kept set differs from the reference's (%u tokens held, %u expected)", s.len, ref.n);
    for (uint32_t i = 0; i < s.len; i++) {
        const ref_kvc_token* t = ref_kvc_find(&ref, s.pos[i]);
        memcpy(x, pa + (size_t)s.pos[i] * WA, WA * 4);
        memcpy(x + WA, pb + (size_t)s.pos[i] * WB, WB * 4);
        for (uint32_t e = 0; e < W; e++)
            if (!(fabs(s.rows[(size_t)i * W + e] - t->row[e]) <= 2 * ref_kvc_bound(&rc, t->tier, x, e)))
                FAIL("row-bound", "prefill: token %u (tier %u) number %u is %.6g, the reference %.6g", s.pos[i], t->tier, e,
                     s.rows[(size_t)i * W + e], t->row[e]);
        if (rc.f32 && t->tier == 0 && memcmp(s.rows + (size_t)i * W, x, 4ull * W))
            FAIL("row-exact", "prefill: token %u's f32 top-tier row is not the input", s.pos[i]);
    }

    /* the steps */
    double worst = 0.0;
    uint32_t near = 0, moved = 0;
    vkh2o_kvcache_step ks = { .q = bq, .out = bo };
    step_inputs(&ks, expanded, ba, bb);
    for (uint32_t st = 0; st < steps; st++) {
        conf_fill_normal(&rng, q, (size_t)H * QW, 0.6f);
        conf_fill_normal(&rng, ra, WA, 1.0f);
        conf_fill_normal(&rng, rb, WB, 1.0f);
        if ((res = vkh2o_buffer_upload(bq, 0, q, 4ull * H * QW)) != VKH2O_OK ||
            (res = vkh2o_buffer_upload(ba, 0, ra, 4ull * WA)) != VKH2O_OK ||
            (res = vkh2o_buffer_upload(bb, 0, rb, 4ull * WB)) != VKH2O_OK ||
            (res = vkh2o_buffer_fill(bo, 0, vkh2o_buffer_get_size(bo), CONF_POISON_WORD)) != VKH2O_OK ||
            (res = snap_read(kc, &before)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "the step's inputs");
            goto done;
        }
        for (uint32_t i = 0; i < before.len; i++)
            tiers32[i] = before.tier[i];
        ref_kvc_set(&ref, before.len, before.pos, tiers32, before.score, before.rows, P + st);
        if ((res = vkh2o_run_kvcache_step(kc, &ks)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_run_kvcache_step");
            goto done;
        }
        ref_kvc_step(&ref, q, ra, rb, rout);
        if ((res = vkh2o_buffer_download(bo, 0, out, 4ull * H * OW)) != VKH2O_OK || (res = snap_read(kc, &s)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "reading the step back");
            goto done;
        }
        if (!conf_guard_intact(env, r, bo, 4ull * H * OW)) goto done;
        for (uint32_t i = 0; i < H * OW; i++)
            routf[i] = (float)rout[i];
        if (st == steps - 1) conf_poison_f32(env, out, (size_t)H * OW);
        const double e = conf_nmse(out, routf, (size_t)H * OW);
        worst = e > worst || e != e ? e : worst;
        vkh2o_kvcache_stats stats;
        if ((res = vkh2o_kvcache_read_stats(kc, 0, &stats)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_kvcache_read_stats");
            goto done;
        }
        uint32_t by[4] = { 0 };
        uint64_t bytes = 0;
        for (uint32_t i = 0; i < s.len; i++) {
            if (s.tier[i] >= VKH2O_TIER_COUNT)
                FAIL("stats", "step %u: token %u is in tier %u", st, s.pos[i], s.tier[i]);
            by[s.tier[i]]++;
            bytes += vkh2o_kvcache_token_bytes(rd, (vkh2o_kv_tier)s.tier[i]);
        }
        if (stats.position != P + st + 1 || stats.len != s.len || s.len > pl->kept_tokens || stats.bytes_used != bytes ||
            memcmp(by, stats.by_tier, sizeof by) || (pl->by_bytes && stats.bytes_used + pl->token_bytes[0] > pl->budget_bytes))
            FAIL("stats", "step %u: stats position %u len %u bytes %llu, the snapshot %u tokens of %llu bytes (%u kept at most)",
                 st, stats.position, stats.len, (unsigned long long)stats.bytes_used, s.len, (unsigned long long)bytes,
                 pl->kept_tokens);
        if (!ref_kvc_holds(&ref, s.len, s.pos, s.tier)) {
            if (!(ref.gap < 1e-4))
                FAIL("kept-set", "step %u: the kept set differs from the reference's (%u tokens held, %u expected)", st, s.len,
                     ref.n);
            near++;
            continue;
        }
        for (uint32_t i = 0; i < s.len; i++) {
            const ref_kvc_token* t = ref_kvc_find(&ref, s.pos[i]);
            const float* dev = s.rows + (size_t)i * W;
            if (!(fabs(s.score[i] - t->score) <= 1e-4 * (fabs(t->score) + 1e-3)))
                FAIL("score", "step %u: token %u's score %.7g, the reference %.7g", st, s.pos[i], s.score[i], t->score);
            /* the token's row before the step (or the new token's top-tier row) */
            const float* old = NULL;
            for (uint32_t j = 0; j < before.len && !old; j++) {
                if (before.pos[j] != s.pos[i]) continue;
                old = before.rows + (size_t)j * W;
                if (before.tier[j] != s.tier[i]) {
                    moved++;
                    for (uint32_t y = 0; y < W; y++)
                        if (!(fabs(dev[y] - t->row[y]) <= ref_kvc_bound(&rc, s.tier[i], old, y)))
                            FAIL("row-bound", "step %u: token %u demoted to tier %u: number %u is %.6g, the reference %.6g",
                                 st, s.pos[i], s.tier[i], y, dev[y], t->row[y]);
                } else if (memcmp(dev, old, 4ull * W)) {
                    FAIL("row-exact", "step %u: token %u kept tier %u but its row changed", st, s.pos[i], s.tier[i]);
                }
            }
            if (!old && memcmp(dev, t->row, 4ull * W))
                FAIL("row-exact", "step %u: the new token %u's row differs from the reference's", st, s.pos[i]);
        }
    }
    if (near * 10 > steps)
        FAIL("kept-set", "the kept set differs from the reference at %u of %u steps, each at a near tie (at most a tenth)",
             near, steps);
    conf_judge(r, "nmse", worst, 1e-9);
    if (r->status == CONF_PASS)
        snprintf(r->note, sizeof r->note, "%u rows demoted and checked, %u near-tie steps", moved, near);
    if (env->perf && r->status == CONF_PASS) {
        double t[64];
        for (uint32_t run = 0; run < extra; run++) {
            const double t0 = vkh2o_context_get_device_ms(env->ctx);
            const uint64_t d0 = cli_dispatches(env->ctx);
            if ((res = vkh2o_run_kvcache_step(kc, &ks)) != VKH2O_OK) {
                conf_set_failure(env, r, res, "vkh2o_run_kvcache_step (timed)");
                goto done;
            }
            if (run) t[run - 1] = vkh2o_context_get_device_ms(env->ctx) - t0;
            r->dispatches = (double)(cli_dispatches(env->ctx) - d0);
        }
        r->ms = env->caps->timestamps ? conf_median(t, extra - 1) : -1.0;
        vkh2o_kvcache_stats stats;
        if (vkh2o_kvcache_read_stats(kc, 0, &stats) == VKH2O_OK) {
            r->bytes = (double)stats.bytes_used + 4.0 * H * (QW + OW);
            r->flops = 2.0 * H * stats.len * (QW + OW);
        }
    }
done:
    if (ref_made) ref_kvc_free(&ref);
    vkh2o_kvcache_destroy(kc);
    vkh2o_buffer_destroy(bpa);
    vkh2o_buffer_destroy(bpb);
    vkh2o_buffer_destroy(bmass);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(ba);
    vkh2o_buffer_destroy(bb);
    vkh2o_buffer_destroy(bo);
    snap_free(&s);
    snap_free(&before);
    free(tiers32);
    free(pa);
    free(pb);
    free(pmass);
    free(x);
    free(q);
    free(ra);
    free(rb);
    free(out);
    free(rout);
    free(routf);
}

void conf_register_kvcache(conf_registry* reg)
{
    for (uint32_t sh = CONF_SHAPES_CPU; sh <= CONF_SHAPES_GPU; sh++)
        for (size_t i = 0; i < sizeof conf_kv_defs / sizeof *conf_kv_defs; i++) {
            const conf_kv_def* k = &conf_kv_defs[i];
            /* the declared kernels and the name's row from the resolved desc: a cache that
             * selects (any eviction or demotion), or splits its attention, dispatches kvc_combine
             * too */
            const vkh2o_kvcache_desc d = def_desc(k, k->max_tokens);
            vkh2o_kvcache_desc rd = d;
            vkh2o_kvcache_plan pl = { .selects = true };
            vkh2o_error err;
            if (vkh2o_kvcache_desc_resolve(&d, &rd, &pl, &err) != VKH2O_OK) {   /* vkh2o_kvcache_create fails the run */
                rd = d;
                pl.selects = true;
            }
            char kernels[96];
            snprintf(kernels, sizeof kernels, "kvc_prefill,kvc_attend,%s%s", pl.selects || pl.splits > 1 ? "kvc_combine," : "",
                     vkh2o_kvcache_select_kernel(&pl));
            conf_case* c = conf_add(reg, run_kv, sh, kernels,
                                    "kvcache.step.%s.%s.h%u_r%u_p%u", sh == CONF_SHAPES_CPU ? "cpu" : "gpu", k->name, k->H,
                                    vkh2o_kvcache_row_numbers(&rd), k->prefill);
            if (!c) return;
            c->p[P_DEF] = (int32_t)i;
            snprintf(c->params, sizeof c->params, "%u heads, %s rows of %u numbers%s, prefill %u then %u steps", k->H,
                     vkh2o_kv_layout_name(rd.layout), vkh2o_kvcache_row_numbers(&rd),
                     rd.storage == VKH2O_DTYPE_F32 ? " (f32 top tier)" : "", k->prefill, k->steps);
        }
}
