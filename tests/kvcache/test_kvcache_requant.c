/* The requantisation source of the one KV cache (include/vkh2o/kvcache.h desc.requant_source):
 * FROM_TIER (the default: a demotion quantises the values the token's tier holds) and the
 * measurement mode FROM_ORIGINAL (every token below the top tier keeps its top-tier row in a
 * shadow store on the device; demotions quantise from it). Without a device: what resolve
 * refuses and the shadow's bytes. On the device, in both modes, against ref/ref_kvcache.c over a
 * few hundred steps on odd shapes (both layouts, fp16 and f32 top tiers, tiers by bytes and
 * pools): the attention output, exact tiers and kept sets (near ties aside), each demoted row
 * within its tier's bound of the reference's (quantised from the original or from the tier) and
 * equal to it in all but a rare number (at least 99.9 %),
 * rows that kept their tier unchanged, the statistics (shadow bytes apart from bytes used). And
 * the point of the mode: after FP16 -> INT8 -> INT4, FROM_ORIGINAL's INT4 words (codes and group
 * words) equal a direct FP16 -> INT4 quantisation of the token's original row bit for bit, and
 * its shadow holds that row; FROM_TIER's differ somewhere. */
#include "vkh2o_test.h"
#include "kvcache_internal.h"
#include "ref_kvcache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* mode_name(vkh2o_requant_source m) { return m == VKH2O_REQUANT_FROM_ORIGINAL ? "from-original" : "from-tier"; }

/* ---- no device ---- */

static void test_resolve(void** state)
{
    (void)state;
    vkh2o_error err = { 0 };
    vkh2o_kvcache_desc d = { .num_heads = 3, .kv_lora_rank = 30, .qk_rope_head_dim = 6, .max_tokens = 200,
                             .n_sink = 2, .n_recent = 4, .capacity_bytes = 2600, .precision = VKH2O_PRECISION_TIERED };
    vkh2o_kvcache_desc r;
    vkh2o_kvcache_plan tier, orig;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&d, &r, &tier, &err), VKH2O_OK);
    assert_int_equal(r.requant_source, VKH2O_REQUANT_FROM_TIER);
    assert_int_equal(tier.shadow_bytes, 0);
    d.requant_source = VKH2O_REQUANT_FROM_ORIGINAL;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&d, &r, &orig, &err), VKH2O_OK);
    /* the same pools and budget: the shadow is outside the capacity */
    assert_int_equal(vkh2o_kvcache_plan_bytes(&orig), vkh2o_kvcache_plan_bytes(&tier));
    assert_int_equal(orig.kept_tokens, tier.kept_tokens);
    assert_int_equal(orig.budget_bytes, tier.budget_bytes);
    for (int k = 0; k < 4; k++)
        assert_int_equal(orig.slots[k], tier.slots[k]);
    /* a top-tier row (18 words of fp16) per lower-tier slot */
    assert_int_equal(orig.shadow_bytes, (uint64_t)(orig.slots[1] + orig.slots[2] + orig.slots[3]) * (orig.token_bytes[0] - 8));
    assert_true(orig.shadow_bytes > 0);
    /* f32 top tier: f32 shadow rows */
    vkh2o_kvcache_desc f = d;
    f.storage = VKH2O_DTYPE_F32;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&f, &r, &orig, &err), VKH2O_OK);
    assert_int_equal(orig.shadow_bytes, (uint64_t)(orig.slots[1] + orig.slots[2] + orig.slots[3]) * 36 * 4);
    /* pools and a single integer tier are accepted */
    vkh2o_kvcache_desc p = d;
    p.capacity_bytes = 0;
    p.capacity_tokens = 30;
    p.tier_tokens[0] = 2, p.tier_tokens[1] = 6, p.tier_tokens[2] = 5;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&p, &r, &orig, &err), VKH2O_OK);
    assert_int_equal(orig.shadow_bytes, (uint64_t)(orig.slots[1] + orig.slots[2] + orig.slots[3]) * 18 * 4);
    p = d;
    p.capacity_bytes = 0;
    p.capacity_tokens = 30;
    p.precision = VKH2O_PRECISION_INT8;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&p, &r, &orig, &err), VKH2O_OK);
    /* no integer tier: refused, naming the field */
    p.precision = VKH2O_PRECISION_FP16;
    memset(&err, 0, sizeof err);
    assert_int_equal(vkh2o_kvcache_desc_resolve(&p, &r, &orig, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "requant_source"));
    assert_non_null(strstr(err.message, "fp16"));
    p.capacity_tokens = 0;   /* the full cache */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&p, &r, &orig, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    p = d;
    p.tier_mask = 0x1;   /* tiers by bytes with the fp16 tier only */
    memset(&err, 0, sizeof err);
    assert_int_equal(vkh2o_kvcache_desc_resolve(&p, &r, &orig, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "0x1"));
    p = d;
    p.requant_source = (vkh2o_requant_source)2;
    memset(&err, 0, sizeof err);
    assert_int_equal(vkh2o_kvcache_desc_resolve(&p, &r, &orig, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "requant_source 2"));
}

/* ---- the device ---- */

static void test_create_refused(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_kvcache_desc d = { .num_heads = 3, .kv_lora_rank = 30, .qk_rope_head_dim = 6, .max_tokens = 100,
                             .capacity_tokens = 20, .n_sink = 1, .n_recent = 2,
                             .requant_source = VKH2O_REQUANT_FROM_ORIGINAL };
    vkh2o_kvcache* c = (vkh2o_kvcache*)1;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(c);
    assert_non_null(strstr(vkh2o_last_error(ctx), "requant_source"));
    vt_check_validation();
}

typedef struct rcase {
    const char* name;
    uint32_t H, kvl, rope, max_tokens, prefill, steps;
    vkh2o_kvcache_desc d;    /* policy, precision, layout and storage fields (EXPANDED: nope and v too) */
} rcase;

static bool is_expanded(const vkh2o_kvcache* c) { return vkh2o_kvcache_get_desc(c)->layout == VKH2O_LAYOUT_EXPANDED; }

typedef vt_snap snap;   /* tests/common: vt_snap_read, vt_snap_free */

/* the reference from the device's state; each token's original row from the inputs of its position
 * (in [pos][W]), as the top tier holds it */
static void sync_ref(ref_kvc* r, const snap* s, uint32_t next_pos, const float* in)
{
    const uint32_t W = ref_kvc_row(&r->c);
    uint32_t* t = malloc(s->len * 4 + 4);
    for (uint32_t i = 0; i < s->len; i++)
        t[i] = s->tier[i];
    ref_kvc_set(r, s->len, s->pos, t, s->score, s->rows, next_pos);
    for (uint32_t i = 0; i < r->n; i++)
        ref_kvc_quantise(&r->c, 0, in + (size_t)r->tok[i].pos * W, r->tok[i].orig);
    free(t);
}

/* [a | b] of one token into x [W] */
static void join(float* x, const float* a, uint32_t wa, const float* b, uint32_t wb)
{
    memcpy(x, a, wa * 4);
    memcpy(x + wa, b, wb * 4);
}

static void run_case(const rcase* rc_, vkh2o_requant_source mode, uint64_t seed)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    vkh2o_kvcache_desc d = rc_->d;
    d.num_heads = rc_->H;
    d.kv_lora_rank = rc_->kvl;
    d.qk_rope_head_dim = rc_->rope;
    d.max_tokens = rc_->max_tokens;
    d.scale = 0.25f;
    d.requant_source = mode;
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(c);
    ref_kvc_config rc = ref_kvc_config_of(c, 0);
    assert_int_equal(rc.from_original, mode == VKH2O_REQUANT_FROM_ORIGINAL);
    const uint32_t H = rc_->H, W = ref_kvc_row(&rc), WA = ref_kvc_first(&rc), WB = W - WA, QW = ref_kvc_qw(&rc), OW = ref_kvc_ow(&rc);
    const uint32_t P = rc_->prefill, steps = rc_->steps, N = P + steps;
    printf("%s, %s: slots %u/%u/%u/%u, shadow %llu bytes, prefill %u, %u steps\n", rc_->name, mode_name(mode), pl->slots[0],
           pl->slots[1], pl->slots[2], pl->slots[3], (unsigned long long)pl->shadow_bytes, P, steps);
    ref_kvc ref;
    ref_kvc_init(&ref, &rc);
    /* every token's input row [a | b] by position */
    float* in = malloc(sizeof(float) * N * W);
    float* pa = malloc(sizeof(float) * P * WA);
    float* pb = malloc(sizeof(float) * P * WB);
    float* pmass = malloc(sizeof(float) * P);
    vt_fill_normal(&rng, pa, (size_t)P * WA, 1.0f);
    vt_fill_normal(&rng, pb, (size_t)P * WB, 1.0f);
    for (uint32_t i = 0; i < P; i++) {
        pmass[i] = 0.5f + vt_uniform(&rng) * 4.0f;
        join(in + (size_t)i * W, pa + (size_t)i * WA, WA, pb + (size_t)i * WB, WB);
    }
    vkh2o_buffer* bpa = vt_upload_f32(pa, (size_t)P * WA);
    vkh2o_buffer* bpb = vt_upload_f32(pb, (size_t)P * WB);
    vkh2o_buffer* bmass = vt_upload_f32(pmass, P);
    vkh2o_kvcache_prefill kp = { .n = P, .mass = bmass };
    if (is_expanded(c))
        kp.k = bpa, kp.v = bpb;
    else
        kp.ckv = bpa, kp.kpe = bpb;
    assert_int_equal(vkh2o_run_kvcache_prefill(c, &kp), VKH2O_OK);
    ref_kvc_prefill(&ref, P, pa, pb, pmass);
    snap s = { 0 }, before = { 0 };
    vt_snap_read(c, 0, &s);
    assert_true(ref_kvc_holds(&ref, s.len, s.pos, s.tier));
    vkh2o_buffer_destroy(bpa);
    vkh2o_buffer_destroy(bpb);
    vkh2o_buffer_destroy(bmass);

    float* q = malloc(sizeof(float) * H * QW);
    float* out = malloc(sizeof(float) * H * OW);
    double* rout = malloc(sizeof(double) * H * OW);
    float* routf = malloc(sizeof(float) * H * OW);
    vkh2o_buffer* bq = vt_buffer(sizeof(float) * H * QW);
    vkh2o_buffer* ba = vt_buffer(sizeof(float) * WA);
    vkh2o_buffer* bb = vt_buffer(sizeof(float) * WB);
    vkh2o_buffer* bo = vt_buffer(sizeof(float) * H * OW);
    uint32_t near = 0, moved[4] = { 0 }, exact = 0, numbers = 0;
    double worst = 0.0;
    for (uint32_t st = 0; st < steps; st++) {
        float* x = in + (size_t)(P + st) * W;
        vt_fill_normal(&rng, q, (size_t)H * QW, 0.6f);
        vt_fill_normal(&rng, x, W, 1.0f);
        assert_int_equal(vkh2o_buffer_upload(bq, 0, q, 4ull * H * QW), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(ba, 0, x, 4ull * WA), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(bb, 0, x + WA, 4ull * WB), VKH2O_OK);
        vt_poison(bo);
        vt_snap_read(c, 0, &before);
        sync_ref(&ref, &before, P + st, in);
        vkh2o_kvcache_step ks = { .q = bq, .out = bo };
        if (is_expanded(c))
            ks.k = ba, ks.v = bb;
        else
            ks.ckv = ba, ks.kpe = bb;
        assert_int_equal(vkh2o_run_kvcache_step(c, &ks), VKH2O_OK);
        ref_kvc_step(&ref, q, x, x + WA, rout);
        vt_download_f32(bo, out, (size_t)H * OW);
        vt_check_guard(bo, sizeof(float) * H * OW);
        for (uint32_t i = 0; i < H * OW; i++)
            routf[i] = (float)rout[i];
        double e = vt_nmse_f(out, routf, (size_t)H * OW);
        worst = e > worst ? e : worst;
        assert_true(e < 1e-9);
        vt_snap_read(c, 0, &s);
        vkh2o_kvcache_stats stats;
        assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &stats), VKH2O_OK);
        assert_int_equal(stats.len, s.len);
        uint32_t by[4] = { 0 };
        uint64_t bytes = 0;
        for (uint32_t i = 0; i < s.len; i++) {
            by[s.tier[i]]++;
            bytes += pl->token_bytes[s.tier[i]];
        }
        for (int k = 0; k < 4; k++)
            assert_int_equal(by[k], stats.by_tier[k]);
        assert_int_equal(stats.bytes_used, bytes);
        /* the shadow: a top-tier row (token bytes less position and score) per held lower-tier token */
        assert_int_equal(stats.shadow_bytes,
                         mode == VKH2O_REQUANT_FROM_ORIGINAL ? (uint64_t)(by[1] + by[2] + by[3]) * (pl->token_bytes[0] - 8) : 0);
        if (pl->by_bytes)
            assert_true(stats.bytes_used + pl->token_bytes[0] <= pl->budget_bytes);
        if (!ref_kvc_holds(&ref, s.len, s.pos, s.tier)) {
            assert_true(ref.gap < 1e-4);   /* only where the reference decided between near-equal keys */
            near++;
            continue;
        }
        for (uint32_t i = 0; i < s.len; i++) {
            const ref_kvc_token* t = ref_kvc_find(&ref, s.pos[i]);
            const float* dev = s.rows + (size_t)i * W;
            assert_true(fabs(s.score[i] - t->score) <= 1e-4 * (fabs(t->score) + 1e-3));
            uint32_t j = 0;
            while (j < before.len && before.pos[j] != s.pos[i])
                j++;
            if (j == before.len) {   /* the new token */
                assert_memory_equal(dev, t->row, W * 4);
                continue;
            }
            const float* old = before.rows + (size_t)j * W;
            if (before.tier[j] == s.tier[i]) {
                assert_memory_equal(dev, old, W * 4);
                continue;
            }
            /* moved: within one code step of the reference's, which quantised the same source */
            moved[before.tier[j]]++;
            const float* src = mode == VKH2O_REQUANT_FROM_ORIGINAL ? t->orig : old;
            for (uint32_t y = 0; y < W; y++) {
                assert_true(fabs(dev[y] - t->row[y]) <= ref_kvc_bound(&rc, s.tier[i], src, y));
                exact += dev[y] == t->row[y];
                numbers++;
            }
        }
    }
    printf("  worst output nmse %.2e, rows moved out of fp16 / int8 / int4 %u / %u / %u (%.4f of their numbers equal to "
           "the reference's), %u near-tie steps\n",
           worst, moved[0], moved[1], moved[2], numbers ? (double)exact / numbers : 1.0, near);
    assert_true(near * 10 <= steps);
    /* the same source gives the same codes: a division an ulp off may flip a rare tie */
    assert_true((uint64_t)exact * 1000 >= (uint64_t)numbers * 999);
    assert_true(moved[0] > 0);
    if (pl->slots[2] || pl->slots[3])
        assert_true(moved[1] > 0);   /* two-step demotions were checked */
    ref_kvc_free(&ref);
    vt_snap_free(&s);
    vt_snap_free(&before);
    free(in);
    free(pa);
    free(pb);
    free(pmass);
    free(q);
    free(out);
    free(rout);
    free(routf);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(ba);
    vkh2o_buffer_destroy(bb);
    vkh2o_buffer_destroy(bo);
    vkh2o_kvcache_destroy(c);
    vt_check_validation();
}

#define H2O(mode) .policy = VKH2O_POLICY_H2O, .score_mode = (mode)
#define TIERED .precision = VKH2O_PRECISION_TIERED
#define EXP12V11 .layout = VKH2O_LAYOUT_EXPANDED, .qk_nope_head_dim = 12, .v_head_dim = 11   /* an odd row */
#define FIRST_FULL 4
static const rcase cases[] = {
    { "latent by bytes fp16 > int8 > int4, int4 groups of 9", 3, 30, 6, 260, 20, 220,
      { .n_sink = 2, .n_recent = 4, .capacity_bytes = 2600, TIERED, .group_size = { 0, 0, 9, 0 } } },
    { "latent by bytes to int2, 5 heads, decayed, groups 13 / 10 / 14", 5, 42, 8, 200, 30, 150,
      { .n_sink = 3, .n_recent = 5, .capacity_bytes = 3000, TIERED, .tier_mask = 0xf, H2O(VKH2O_SCORE_DECAY),
        .group_size = { 0, 13, 10, 14 } } },
    { "latent pools 2 / 6 / 5 / rest int2, mean", 3, 30, 6, 200, 20, 150,
      { .n_sink = 2, .n_recent = 4, .capacity_tokens = 30, TIERED, .tier_tokens = { 2, 6, 5, 0 }, H2O(VKH2O_SCORE_MEAN),
        .group_size = { 0, 15, 0, 10 } } },
    { "expanded by bytes to int2, 3 heads, odd row", 3, 0, 4, 160, 20, 120,
      { EXP12V11, .n_sink = 2, .n_recent = 3, .capacity_bytes = 3600, TIERED, .tier_mask = 0xf } },
    /* the full run */
    { "latent f32 top, by bytes fp16 > int8 > int4", 3, 30, 6, 200, 20, 150,
      { .n_sink = 2, .n_recent = 4, .capacity_bytes = 4200, TIERED, .storage = VKH2O_DTYPE_F32 } },
    { "expanded pools 2 / 5 / rest int4, 5 heads, tova", 5, 0, 4, 160, 20, 120,
      { EXP12V11, .n_sink = 2, .n_recent = 3, .capacity_tokens = 24, TIERED, .tier_tokens = { 2, 5, 0, 0 },
        H2O(VKH2O_SCORE_TOVA) } },
};

/* The full run: every case in both modes. The default run: of the first FIRST_FULL cases one of
 * the two latent cases by bytes (INT4 groups of 9; to INT2, decayed) and one of the pools and
 * the expanded layout (the INT2 case with the pools, the groups of 9 with the expanded layout:
 * each case compiles its cache's kernels), each in one mode, the mode by the parity of the
 * case's index (the two modes of a case share most of the kernels each case compiles): which
 * cases and which mode turn with the seed, so that the next seed runs the other two cases. */
static void test_against_ref(void** state)
{
    (void)state;
    uint64_t seed = vt_seed("kvcache requant");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (i < FIRST_FULL ? !vt_pick(seed, i < 2 ? i : i - 1, 2) : !vt_full())
            continue;
        if (vt_pick(seed >> 1, i, 2))
            run_case(&cases[i], VKH2O_REQUANT_FROM_TIER, seed + i);
        if (vt_pick(seed >> 1, i + 1, 2))
            run_case(&cases[i], VKH2O_REQUANT_FROM_ORIGINAL, seed + i);
    }
}

/* The tier-k words of row x (W numbers, already as the top tier holds them) by the documented
 * format, quantised directly: data words, then one group word per group. */
static void direct_words(const vkh2o_kvcache* c, uint32_t k, const float* x, uint32_t* w)
{
    const uint32_t W = vkh2o_kvcache_row_numbers(&c->d), b = 16u >> k, per = 32 / b, dw = c->data_words[k];
    const uint32_t ng = c->plan.groups[k], qmax = (1u << b) - 1;
    memset(w, 0, 4ull * c->row_words[k]);
    for (uint32_t g = 0; g < ng; g++) {
        float lo = INFINITY, hi = -INFINITY;
        for (uint32_t e = 0; e < W; e++)
            if (vkh2o_kvcache_group_of(&c->d, k, e) == g) {
                lo = x[e] < lo ? x[e] : lo;
                hi = x[e] > hi ? x[e] : hi;
            }
        const uint16_t z = vkh2o_f32_to_f16(lo);
        const float d = hi - vkh2o_f16_to_f32(z);
        const uint16_t s = vkh2o_f32_to_f16((d > 0.0f ? d : 0.0f) / (float)qmax);
        w[dw + g] = (uint32_t)s | ((uint32_t)z << 16);
    }
    for (uint32_t e = 0; e < W; e++) {
        const uint32_t gw = w[dw + vkh2o_kvcache_group_of(&c->d, k, e)];
        const float scale = vkh2o_f16_to_f32((uint16_t)gw), zero = vkh2o_f16_to_f32((uint16_t)(gw >> 16));
        uint32_t q = 0;
        if (scale != 0.0f) {
            float f = nearbyintf((x[e] - zero) / scale);
            q = f < 0.0f ? 0 : f > (float)qmax ? qmax : (uint32_t)f;
        }
        w[e / per] |= q << ((e % per) * b);
    }
}

/* Steps only (every token starts FP16), tiers by bytes FP16 > INT8 > INT4 with the given groups:
 * every INT4 token came down through INT8. Returns the INT4 tokens whose words differ from a
 * direct quantisation of their original row (*n_int4: how many were compared). */
static uint32_t two_step(const vkh2o_kvcache_desc* base, vkh2o_requant_source mode, uint64_t seed, uint32_t* n_int4)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    vkh2o_kvcache_desc d = *base;
    d.requant_source = mode;
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(c);
    const uint32_t W = vkh2o_kvcache_row_numbers(&c->d), H = d.num_heads;
    const uint32_t WA = is_expanded(c) ? H * (d.qk_nope_head_dim + d.qk_rope_head_dim) : d.kv_lora_rank;
    const uint32_t QW = is_expanded(c) ? d.qk_nope_head_dim + d.qk_rope_head_dim : W;
    const uint32_t steps = d.max_tokens;
    float* in = malloc(sizeof(float) * steps * W);
    float* q = malloc(sizeof(float) * H * QW);
    vkh2o_buffer* bq = vt_buffer(sizeof(float) * H * QW);
    vkh2o_buffer* ba = vt_buffer(sizeof(float) * WA);
    vkh2o_buffer* bb = vt_buffer(sizeof(float) * (W - WA));
    for (uint32_t st = 0; st < steps; st++) {
        float* x = in + (size_t)st * W;
        vt_fill_normal(&rng, q, (size_t)H * QW, 0.6f);
        vt_fill_normal(&rng, x, W, 1.0f);
        for (uint32_t e = 0; e < W; e++)   /* some spread between groups */
            x[e] = x[e] * (1.0f + 0.1f * (float)(e % 5)) + 0.3f * (float)(e % 3);
        assert_int_equal(vkh2o_buffer_upload(bq, 0, q, 4ull * H * QW), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(ba, 0, x, 4ull * WA), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(bb, 0, x + WA, 4ull * (W - WA)), VKH2O_OK);
        vkh2o_kvcache_step ks = { .q = bq };
        if (is_expanded(c))
            ks.k = ba, ks.v = bb;
        else
            ks.ckv = ba, ks.kpe = bb;
        assert_int_equal(vkh2o_run_kvcache_step(c, &ks), VKH2O_OK);
    }
    vkh2o_kvcache_stats stats;
    assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &stats), VKH2O_OK);
    assert_true(stats.demoted[1] >= 4);   /* tokens went FP16 -> INT8 -> INT4 */
    assert_true(stats.by_tier[2] >= 4);
    /* the raw tokens of layer 0 (rows, positions) and their shadows */
    kvc_layer_copy lc;
    assert_int_equal(vkh2o_kvcache_copy_layer(c, 0, &lc), VKH2O_OK);
    uint32_t* want = malloc(4ull * c->row_words[2]);
    float* orig = malloc(sizeof(float) * W);
    if (mode == VKH2O_REQUANT_FROM_ORIGINAL)
        assert_int_equal(pl->shadow_bytes, 4ull * (pl->slots[1] + pl->slots[2] + pl->slots[3]) * c->row_words[0]);
    else
        assert_int_equal(pl->shadow_bytes, 0);
    uint32_t differ = 0;
    *n_int4 = 0;
    for (uint32_t g = 0; g < lc.count[2]; g++) {
        const uint32_t* tok = lc.tok[2] + (size_t)g * c->tw[2];
        const float* x = in + (size_t)tok[c->row_words[2]] * W;
        for (uint32_t e = 0; e < W; e++)   /* the original row as the fp16 top tier holds it */
            orig[e] = vkh2o_f16_to_f32(vkh2o_f32_to_f16(x[e]));
        direct_words(c, 2, orig, want);
        (*n_int4)++;
        differ += memcmp(tok, want, 4ull * c->row_words[2]) != 0;
        if (lc.shadow[2]) {   /* the shadow holds the original fp16 row */
            const uint32_t* sh = lc.shadow[2] + (size_t)g * c->row_words[0];
            for (uint32_t e = 0; e < W; e++)
                assert_int_equal((sh[e >> 1] >> (16 * (e & 1))) & 0xffffu, vkh2o_f32_to_f16(x[e]));
        }
    }
    assert_true(mode != VKH2O_REQUANT_FROM_ORIGINAL || lc.shadow[2] || !lc.count[2]);
    vkh2o_kvcache_copy_free(&lc);
    free(want);
    free(orig);
    free(in);
    free(q);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(ba);
    vkh2o_buffer_destroy(bb);
    vkh2o_kvcache_destroy(c);
    vt_check_validation();
    return differ;
}

static void test_two_step_exact(void** state)
{
    (void)state;
    uint64_t seed = vt_seed("kvcache requant two-step");
    const vkh2o_kvcache_desc shapes[] = {
        { .num_heads = 3, .kv_lora_rank = 30, .qk_rope_head_dim = 6, .max_tokens = 120, .n_sink = 2, .n_recent = 3,
          .capacity_bytes = 2000, TIERED, .group_size = { 0, 11, 9, 0 } },
        { .num_heads = 3, .qk_rope_head_dim = 4, .max_tokens = 120, EXP12V11, .n_sink = 2, .n_recent = 3, .capacity_bytes = 4000,
          TIERED, .group_size = { 0, 0, 7, 0 } },
    };
    /* the full run both layouts; the default run one, turning with the seed (each shape compiles
     * its caches' kernels in both modes; test_against_ref runs both layouts in the default run) */
    for (uint32_t i = 0; i < 2; i++) {
        if (!vt_pick(seed, i, 2))
            continue;
        uint32_t n_orig, n_tier;
        uint32_t d_orig = two_step(&shapes[i], VKH2O_REQUANT_FROM_ORIGINAL, seed + i, &n_orig);
        uint32_t d_tier = two_step(&shapes[i], VKH2O_REQUANT_FROM_TIER, seed + i, &n_tier);
        printf("%s: int4 rows equal to a direct fp16 -> int4 quantisation: from-original %u of %u, from-tier %u of %u\n",
               i ? "expanded" : "latent", n_orig - d_orig, n_orig, n_tier - d_tier, n_tier);
        assert_true(n_orig > 0 && n_tier > 0);
        assert_int_equal(d_orig, 0);
        assert_true(d_tier > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_create_refused),
        cmocka_unit_test(test_against_ref),
        cmocka_unit_test(test_two_step_exact),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
