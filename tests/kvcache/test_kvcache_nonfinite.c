/* Non-finite values in the one KV cache (include/vkh2o/kvcache.h "Non-finite values"):
 *   - prefills whose mass mixes NaN (both signs, several payloads), -Inf, +Inf, +-0 and finite
 *     values (with ties), then steps with finite inputs, then steps whose q, c_kv or k_pe holds a
 *     NaN or an Inf, then finite steps again: after every prefill and step the held positions and
 *     tiers equal ref/ref_kvcache.c's exactly (NaN < -Inf < finite < +Inf, ties to the lower
 *     position; only decisions between near-equal finite keys may differ), and the slot
 *     invariants hold (len <= kept tokens, the per-tier counts are the snapshot's, positions
 *     unique, sinks and recents at the top tier); a poisoned cache recovers (the NaN-scored middle
 *     tokens leave first);
 *   - check_finite: the count, the first position and what was non-finite, for steps (q, c_kv,
 *     k_pe, the scores) and prefills (rows, mass), per layer; off: nothing counted; on the
 *     EXPANDED layout (f16 and f32 rows) each input read to its last number and not past it.
 * Shapes are no multiple of the workgroup. */
#include "vkh2o_test.h"
#include "ref_h2o.h"
#include "ref_kvcache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float nan_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

typedef struct ncase {
    const char* name;
    uint32_t H, kvl, rope, prefill;
    vkh2o_kvcache_desc d;
} ncase;

#define H2O(mode) .policy = VKH2O_POLICY_H2O, .score_mode = (mode)
static const ncase cases[] = {
    { "fp16 h2o sum", 3, 30, 6, 40, { .n_sink = 2, .n_recent = 4, .capacity_tokens = 20, H2O(VKH2O_SCORE_SUM) } },
    { "int4 h2o mean", 5, 50, 14, 48,
      { .n_sink = 3, .n_recent = 4, .capacity_tokens = 24, .precision = VKH2O_PRECISION_INT4, H2O(VKH2O_SCORE_MEAN) } },
    { "tiered decayed", 3, 30, 6, 50,
      { .n_sink = 2, .n_recent = 4, .capacity_tokens = 30, .precision = VKH2O_PRECISION_TIERED, .tier_tokens = { 2, 6, 5, 0 },
        H2O(VKH2O_SCORE_DECAY), .decay = 0.8f } },
    { "tiered by bytes, tova", 3, 30, 6, 60,
      { .n_sink = 2, .n_recent = 4, .capacity_bytes = 2600, .precision = VKH2O_PRECISION_TIERED, H2O(VKH2O_SCORE_TOVA) } },
};

typedef vt_snap snap;   /* tests/common: vt_snap_read, vt_snap_free */

/* the slot invariants after a prefill of / a step to `position` tokens */
static void check_invariants(vkh2o_kvcache* c, const snap* s, uint32_t position, const char* when)
{
    const vkh2o_kvcache_desc* d = vkh2o_kvcache_get_desc(c);
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(c);
    vkh2o_kvcache_stats st;
    assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
    if (st.position != position || st.len != s->len || s->len > pl->kept_tokens || s->len > position)
        fail_msg("%s: position %u (want %u), len %u, snapshot %u, kept tokens %u", when, st.position, position, st.len, s->len,
                 pl->kept_tokens);
    if (pl->by_bytes && st.bytes_used + pl->token_bytes[0] > pl->budget_bytes && st.len > d->n_sink + d->n_recent)
        fail_msg("%s: %llu bytes held + one FP16 token above the budget %llu", when, (unsigned long long)st.bytes_used,
                 (unsigned long long)pl->budget_bytes);
    uint32_t by[4] = { 0 };
    for (uint32_t i = 0; i < s->len; i++) {
        if (s->tier[i] > 3 || !pl->slots[s->tier[i]])
            fail_msg("%s: position %u in tier %u", when, s->pos[i], s->tier[i]);
        by[s->tier[i]]++;
        if (i && s->pos[i] <= s->pos[i - 1])
            fail_msg("%s: positions %u then %u (not unique)", when, s->pos[i - 1], s->pos[i]);
        if (s->pos[i] >= position)
            fail_msg("%s: position %u not seen yet", when, s->pos[i]);
        bool top = s->pos[i] < d->n_sink || s->pos[i] + d->n_recent >= position;
        if (top && s->tier[i] != 0)
            fail_msg("%s: sink / recent %u in tier %u", when, s->pos[i], s->tier[i]);
    }
    for (int k = 0; k < 4; k++) {
        if (by[k] != st.by_tier[k])
            fail_msg("%s: tier %d holds %u, stats say %u", when, k, by[k], st.by_tier[k]);
        if (by[k] > pl->slots[k])
            fail_msg("%s: tier %d holds %u of %u slots", when, k, by[k], pl->slots[k]);
    }
    /* sinks and recents that were seen are all held */
    for (uint32_t p = 0; p < position; p++)
        if (p < d->n_sink || p + d->n_recent >= position) {
            bool held = false;
            for (uint32_t i = 0; i < s->len && !held; i++)
                held = s->pos[i] == p;
            if (!held)
                fail_msg("%s: sink / recent %u not held", when, p);
        }
}

static void sync_ref(ref_kvc* r, const snap* s, uint32_t next_pos)
{
    uint32_t* t = malloc(s->len * 4 + 4);
    for (uint32_t i = 0; i < s->len; i++)
        t[i] = s->tier[i];
    ref_kvc_set(r, s->len, s->pos, t, s->score, s->rows, next_pos);
    free(t);
}

/* the mass of prefill token i: a mix of every class, with ties */
static float odd_mass(vt_rng* rng, uint32_t i)
{
    switch (vt_u32_below(rng, 9)) {
    case 0: return nan_bits(0x7fc00000u);                          /* +qNaN */
    case 1: return nan_bits(0xffc00001u + (i & 7u));               /* -NaN, payloads */
    case 2: return nan_bits(0x7f800001u + i);                      /* sNaN bits */
    case 3: return -INFINITY;
    case 4: return INFINITY;
    case 5: return (i & 1) ? 0.0f : -0.0f;
    case 6: return 1.5f;                                           /* ties */
    case 7: return -2.0f;
    default: return (vt_uniform(rng) - 0.5f) * 8.0f;
    }
}

typedef enum { IN_FINITE, IN_CKV_NAN, IN_KPE_INF, IN_Q_NAN, IN_Q_NEGINF, IN_CKV_BIG } input_kind;

static void run_case(const ncase* nc, uint64_t seed)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    vkh2o_kvcache_desc d = nc->d;
    d.num_heads = nc->H;
    d.kv_lora_rank = nc->kvl;
    d.qk_rope_head_dim = nc->rope;
    d.max_tokens = 400;
    d.scale = 0.25f;
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(c);
    const uint32_t H = nc->H, KVL = nc->kvl, R = nc->rope, W = KVL + R, P = nc->prefill;
    ref_kvc_config rc = ref_kvc_config_of(c, 0);
    ref_kvc ref;
    ref_kvc_init(&ref, &rc);
    snap s = { 0 };
    uint32_t near = 0, decisions = 0, nonfinite_keys = 0;

    /* prefills: three mass patterns; each replaces the contents */
    float* pckv = malloc(sizeof(float) * P * KVL);
    float* pkpe = malloc(sizeof(float) * P * R);
    float* pmass = malloc(sizeof(float) * P);
    for (int rep = 0; rep < 3; rep++) {
        vt_fill_normal(&rng, pckv, (size_t)P * KVL, 1.0f);
        vt_fill_normal(&rng, pkpe, (size_t)P * R, 1.0f);
        for (uint32_t i = 0; i < P; i++)
            pmass[i] = rep == 2 ? nan_bits(0x7fc00000u) : odd_mass(&rng, i);   /* rep 2: every mass NaN */
        vkh2o_buffer* bckv = vt_upload_f32(pckv, (size_t)P * KVL);
        vkh2o_buffer* bkpe = vt_upload_f32(pkpe, (size_t)P * R);
        vkh2o_buffer* bmass = vt_upload_f32(pmass, P);
        vkh2o_kvcache_prefill kp = { .n = P, .ckv = bckv, .kpe = bkpe, .mass = bmass };
        assert_int_equal(vkh2o_run_kvcache_prefill(c, &kp), VKH2O_OK);
        ref_kvc_free(&ref);   /* a prefill replaces the contents: a fresh reference */
        ref_kvc_init(&ref, &rc);
        ref_kvc_prefill(&ref, P, pckv, pkpe, pmass);
        vt_snap_read(c, 0, &s);
        check_invariants(c, &s, P, "prefill");
        if (!ref_kvc_holds(&ref, s.len, s.pos, s.tier))
            fail_msg("%s: prefill %d: kept set differs from the reference", nc->name, rep);
        vkh2o_buffer_destroy(bckv);
        vkh2o_buffer_destroy(bkpe);
        vkh2o_buffer_destroy(bmass);
    }
    /* back to the mixed mass for the steps */
    for (uint32_t i = 0; i < P; i++)
        pmass[i] = odd_mass(&rng, i);
    {
        vkh2o_buffer* bckv = vt_upload_f32(pckv, (size_t)P * KVL);
        vkh2o_buffer* bkpe = vt_upload_f32(pkpe, (size_t)P * R);
        vkh2o_buffer* bmass = vt_upload_f32(pmass, P);
        vkh2o_kvcache_prefill kp = { .n = P, .ckv = bckv, .kpe = bkpe, .mass = bmass };
        assert_int_equal(vkh2o_run_kvcache_prefill(c, &kp), VKH2O_OK);
        vkh2o_buffer_destroy(bckv);
        vkh2o_buffer_destroy(bkpe);
        vkh2o_buffer_destroy(bmass);
    }

    /* steps: finite, then one of each non-finite input, then finite until it recovers */
    static const input_kind plan_kinds[] = { IN_CKV_NAN, IN_KPE_INF, IN_Q_NAN, IN_Q_NEGINF, IN_CKV_BIG };
    const uint32_t n_plan = sizeof plan_kinds / sizeof plan_kinds[0];
    const uint32_t first_odd = 12, recover = pl->kept_tokens + d.n_recent + 4;
    const uint32_t steps = first_odd + 2 * n_plan + recover;
    float* q = malloc(sizeof(float) * H * W);
    float* ckv = malloc(sizeof(float) * KVL);
    float* kpe = malloc(sizeof(float) * R);
    double* rout = malloc(sizeof(double) * H * KVL);
    vkh2o_buffer* bq = vt_buffer(sizeof(float) * H * W);
    vkh2o_buffer* bc = vt_buffer(sizeof(float) * KVL);
    vkh2o_buffer* bk = vt_buffer(sizeof(float) * R);
    vkh2o_buffer* bo = vt_buffer(sizeof(float) * H * KVL);
    for (uint32_t st = 0; st < steps; st++) {
        vt_fill_normal(&rng, q, (size_t)H * W, 0.6f);
        vt_fill_normal(&rng, ckv, KVL, 1.0f);
        vt_fill_normal(&rng, kpe, R, 1.0f);
        input_kind kind = IN_FINITE;
        /* the odd inputs on every other step from first_odd, so finite steps sit between them */
        if (st >= first_odd && st < first_odd + 2 * n_plan && (st - first_odd) % 2 == 0)
            kind = plan_kinds[(st - first_odd) / 2];
        switch (kind) {
        case IN_CKV_NAN: ckv[vt_u32_below(&rng, KVL)] = NAN; break;
        case IN_KPE_INF: kpe[vt_u32_below(&rng, R)] = INFINITY; break;
        case IN_Q_NAN: q[vt_u32_below(&rng, H * W)] = NAN; break;
        case IN_Q_NEGINF: q[vt_u32_below(&rng, H * W)] = -INFINITY; break;
        case IN_CKV_BIG: ckv[vt_u32_below(&rng, KVL)] = 1e6f; break;   /* finite, +Inf at fp16 */
        default: break;
        }
        assert_int_equal(vkh2o_buffer_upload(bq, 0, q, 4ull * H * W), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(bc, 0, ckv, 4ull * KVL), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(bk, 0, kpe, 4ull * R), VKH2O_OK);
        vt_snap_read(c, 0, &s);
        sync_ref(&ref, &s, P + st);
        vkh2o_kvcache_step ks = { .q = bq, .ckv = bc, .kpe = bk, .out = bo };
        assert_int_equal(vkh2o_run_kvcache_step(c, &ks), VKH2O_OK);
        ref_kvc_step(&ref, q, ckv, kpe, rout);
        vt_snap_read(c, 0, &s);
        char when[96];
        snprintf(when, sizeof when, "%s: step %u (input kind %d)", nc->name, st, (int)kind);
        check_invariants(c, &s, P + st + 1, when);
        decisions++;
        for (uint32_t i = 0; i < s.len; i++)
            nonfinite_keys += !isfinite(s.score[i]);
        if (!ref_kvc_holds(&ref, s.len, s.pos, s.tier)) {
            /* only a decision between near-equal finite keys may differ (gap: finite pairs only) */
            if (!(ref.gap < 1e-4))
                fail_msg("%s: kept set differs from the reference (gap %g)", when, ref.gap);
            near++;
        }
    }
    /* recovered: no middle token keeps a non-finite score (TOVA replaces scores each step; the
     * others evict the NaN-scored first) */
    for (uint32_t i = 0; i < s.len; i++) {
        bool middle = s.pos[i] >= d.n_sink && s.pos[i] + d.n_recent < P + steps;
        if (middle && !isfinite(s.score[i]))
            fail_msg("%s: position %u still scores %g after %u finite steps", nc->name, s.pos[i], s.score[i], recover);
    }
    printf("%s: H %u kvl %u rope %u, slots %u/%u/%u/%u, %u steps, %u non-finite scores seen, %u near-tie steps\n", nc->name,
           H, KVL, R, pl->slots[0], pl->slots[1], pl->slots[2], pl->slots[3], decisions, nonfinite_keys, near);
    assert_true(nonfinite_keys > 0);
    assert_true(near * 10 <= decisions);
    vkh2o_kvcache_stats stt;
    assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &stt), VKH2O_OK);
    assert_int_equal(stt.nonfinite, 0);   /* check_finite off: nothing counted */
    assert_int_equal(stt.nonfinite_what, 0);
    ref_kvc_free(&ref);
    vt_snap_free(&s);
    free(pckv);
    free(pkpe);
    free(pmass);
    free(q);
    free(ckv);
    free(kpe);
    free(rout);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(bc);
    vkh2o_buffer_destroy(bk);
    vkh2o_buffer_destroy(bo);
    vkh2o_kvcache_destroy(c);
    vt_check_validation();
}

static void test_order_and_invariants(void** state)
{
    (void)state;
    uint64_t seed = vt_seed("kvcache non-finite");
    /* the full run every case; the default run two of the four, turning with the seed (fp16 sum
     * and tiers by token pools, decayed; or int4 mean and tiers by bytes, tova: each case
     * compiles its cache's kernels, and two successive seeds run all four) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (vt_pick(seed, i, 2))
            run_case(&cases[i], seed + i);
}

/* the u32 keys of the reference: the documented order, bit by bit */
static void test_key_order(void** state)
{
    (void)state;
    const float order[] = { -INFINITY, -3.0e38f, -1.0f, -1e-40f, 0.0f, 1e-40f, 1.0f, 3.0e38f, INFINITY };
    const uint32_t nans[] = { 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu, 0x7fffffffu };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        assert_int_equal(ref_float_key(nan_bits(nans[i])), 0u);
        assert_true(ref_float_key(nan_bits(nans[i])) < ref_float_key(-INFINITY));
    }
    for (size_t i = 1; i < sizeof order / sizeof order[0]; i++)
        assert_true(ref_float_key(order[i - 1]) < ref_float_key(order[i]));
    assert_int_equal(ref_float_key(-0.0f), ref_float_key(0.0f));
}

/* check_finite: counts, first position and what, per layer, for steps and prefills */
static void test_check_finite(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    const uint64_t seed = vt_seed("kvcache check_finite");
    vt_rng_seed(&rng, seed);
    /* the full run both caches (INT8 H2O, the full cache); the default run one, turning with the
     * seed (each compiles its cache's kernels) */
    for (int full = 0; full < 2; full++) {
        if (!vt_pick(seed, (uint64_t)full, 2))
            continue;
        const uint32_t H = 3, KVL = 30, R = 6, W = KVL + R, L = 2, P = 9;
        vkh2o_kvcache_desc d = { .num_heads = H, .kv_lora_rank = KVL, .qk_rope_head_dim = R, .qk_nope_head_dim = 16,
                                 .max_tokens = 100, .num_layers = L, .scale = 0.25f, .check_finite = true };
        if (!full) {
            d.n_sink = 2;
            d.n_recent = 3;
            d.capacity_tokens = 16;
            d.precision = VKH2O_PRECISION_INT8;
        }
        vkh2o_kvcache* c;
        assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
        /* prefill of layer 1 with a non-finite k_pe at 6 and c_kv at 4 (and the mass at 7 when
         * the cache selects); layer 0 finite */
        float pckv[9 * 30], pkpe[9 * 6], pmass[9];
        vt_fill_normal(&rng, pckv, 9 * 30, 1.0f);
        vt_fill_normal(&rng, pkpe, 9 * 6, 1.0f);
        for (uint32_t i = 0; i < P; i++)
            pmass[i] = 1.0f + (float)i;
        vkh2o_buffer* b0c = vt_upload_f32(pckv, 9 * 30);
        vkh2o_buffer* b0k = vt_upload_f32(pkpe, 9 * 6);
        vkh2o_buffer* b0m = vt_upload_f32(pmass, 9);
        pkpe[6 * R + 5] = INFINITY;
        pckv[4 * KVL + 29] = NAN;
        pmass[7] = -INFINITY;
        vkh2o_buffer* b1c = vt_upload_f32(pckv, 9 * 30);
        vkh2o_buffer* b1k = vt_upload_f32(pkpe, 9 * 6);
        vkh2o_buffer* b1m = vt_upload_f32(pmass, 9);
        vkh2o_kvcache_prefill p0 = { .layer = 0, .n = P, .ckv = b0c, .kpe = b0k, .mass = full ? NULL : b0m };
        vkh2o_kvcache_prefill p1 = { .layer = 1, .n = P, .ckv = b1c, .kpe = b1k, .mass = full ? NULL : b1m };
        assert_int_equal(vkh2o_run_kvcache_prefill(c, &p0), VKH2O_OK);
        assert_int_equal(vkh2o_run_kvcache_prefill(c, &p1), VKH2O_OK);
        vkh2o_kvcache_stats st;
        assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
        assert_int_equal(st.nonfinite, 0);
        assert_int_equal(st.nonfinite_what, 0);
        assert_int_equal(vkh2o_kvcache_read_stats(c, 1, &st), VKH2O_OK);
        assert_int_equal(st.nonfinite, full ? 2 : 3);
        assert_int_equal(st.nonfinite_position, 4);
        assert_int_equal(st.nonfinite_what, VKH2O_NONFINITE_CKV);
        /* layer 1 holds a NaN row (full cache: at fp16) or a -Inf score: every step counts */
        /* steps on layer 0: finite, finite, q NaN at step 11, finite (a poisoned score or not),
         * k_pe Inf at 13 */
        float q[3 * 36], ckv[30], kpe[6];
        vkh2o_buffer* bq = vt_buffer(sizeof q);
        vkh2o_buffer* bc = vt_buffer(sizeof ckv);
        vkh2o_buffer* bk = vt_buffer(sizeof kpe);
        for (uint32_t t = P; t < P + 6; t++) {
            vt_fill_normal(&rng, q, H * W, 0.5f);
            vt_fill_normal(&rng, ckv, KVL, 1.0f);
            vt_fill_normal(&rng, kpe, R, 1.0f);
            if (t == 11)
                q[H * W - 1] = NAN;
            if (t == 13)
                kpe[0] = -INFINITY;
            assert_int_equal(vkh2o_buffer_upload(bq, 0, q, sizeof q), VKH2O_OK);
            assert_int_equal(vkh2o_buffer_upload(bc, 0, ckv, sizeof ckv), VKH2O_OK);
            assert_int_equal(vkh2o_buffer_upload(bk, 0, kpe, sizeof kpe), VKH2O_OK);
            for (uint32_t l = 0; l < L; l++) {
                vkh2o_kvcache_step ks = { .layer = l, .q = bq, .ckv = bc, .kpe = bk };
                assert_int_equal(vkh2o_run_kvcache_step(c, &ks), VKH2O_OK);
            }
            assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
            if (t < 11) {
                assert_int_equal(st.nonfinite, 0);
                continue;
            }
            assert_int_equal(st.nonfinite_position, 11);
            /* the NaN query: its weights are NaN too */
            assert_int_equal(st.nonfinite_what, VKH2O_NONFINITE_Q | VKH2O_NONFINITE_SCORE);
            if (t == 11)
                assert_int_equal(st.nonfinite, 1);
            /* later steps: without selection nothing carries the NaN (12 finite); 13 counts its
             * -Inf k_pe; at 14 that row's logit is +Inf (a NaN weight, counted) for a head whose
             * query number there is negative, -Inf (weight 0) otherwise. With sums the NaN
             * scores count every step until they leave */
            if (full && t == 12)
                assert_int_equal(st.nonfinite, 1);
            if (full && t == 13)
                assert_int_equal(st.nonfinite, 2);
            if (full && t == 14) {
                bool neg = false;
                for (uint32_t h = 0; h < H; h++)
                    neg |= !(q[h * W + KVL] > 0.0f);
                assert_int_equal(st.nonfinite, neg ? 3 : 2);
            }
            if (!full)
                assert_int_equal(st.nonfinite, t - 10);
            /* layer 1 (a NaN row held since the prefill): every step counts */
            vkh2o_kvcache_stats s1;
            assert_int_equal(vkh2o_kvcache_read_stats(c, 1, &s1), VKH2O_OK);
            assert_int_equal(s1.nonfinite_position, 4);
        }
        vkh2o_kvcache_stats s1;
        assert_int_equal(vkh2o_kvcache_read_stats(c, 1, &s1), VKH2O_OK);
        printf("check_finite, %s: layer 0 %u counted from %u (what 0x%x), layer 1 %u from %u (what 0x%x)\n",
               full ? "full cache" : "int8 h2o", st.nonfinite, st.nonfinite_position, st.nonfinite_what, s1.nonfinite,
               s1.nonfinite_position, s1.nonfinite_what);
        assert_int_equal(s1.nonfinite, (full ? 2 : 3) + 6);
        /* reset clears it */
        assert_int_equal(vkh2o_run_kvcache_reset(c), VKH2O_OK);
        assert_int_equal(vkh2o_kvcache_read_stats(c, 1, &s1), VKH2O_OK);
        assert_int_equal(s1.nonfinite, 0);
        assert_int_equal(s1.nonfinite_what, 0);
        vkh2o_buffer_destroy(b0c);
        vkh2o_buffer_destroy(b0k);
        vkh2o_buffer_destroy(b0m);
        vkh2o_buffer_destroy(b1c);
        vkh2o_buffer_destroy(b1k);
        vkh2o_buffer_destroy(b1m);
        vkh2o_buffer_destroy(bq);
        vkh2o_buffer_destroy(bc);
        vkh2o_buffer_destroy(bk);
        vkh2o_kvcache_destroy(c);
    }
    vt_check_validation();
}

/* check_finite on the EXPANDED layout (f16 and f32 rows): a step reads q over H x (nope + rope),
 * k over H x (nope + rope) and v over H x v_head_dim (the last number of each counts, a NaN just
 * past each does not); a prefill reads each token's k and v rows at their own strides */
static void test_check_finite_expanded(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    const uint64_t seed = vt_seed("kvcache check_finite expanded");
    vt_rng_seed(&rng, seed);
    enum { H = 3, NOPE = 10, R = 6, SV = 7, DK = NOPE + R, QW = H * DK, KW = H * DK, VW = H * SV, P = 5 };
    /* the full run both storages; the default run one (f16 or f32 rows), turning with the seed */
    for (int f32 = 0; f32 < 2; f32++) {
        if (!vt_pick(seed, (uint64_t)f32, 2))
            continue;
        vkh2o_kvcache_desc d = { .num_heads = H, .kv_lora_rank = 30, .qk_rope_head_dim = R, .qk_nope_head_dim = NOPE,
                                 .v_head_dim = SV, .max_tokens = 32, .num_layers = 1, .scale = 0.25f,
                                 .layout = VKH2O_LAYOUT_EXPANDED, .storage = f32 ? VKH2O_DTYPE_F32 : VKH2O_DTYPE_F16,
                                 .check_finite = true };
        vkh2o_kvcache* c;
        assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
        float q[QW + 1], k[KW + 1], v[VW + 1];
        vkh2o_buffer* bq = vt_buffer(sizeof q);
        vkh2o_buffer* bk = vt_buffer(sizeof k);
        vkh2o_buffer* bv = vt_buffer(sizeof v);
        vkh2o_kvcache_stats st;
        /* 0: finite inputs, a NaN one past each; 1: q's last number; 2: k's; 3: v's */
        for (int where = 0; where < 4; where++) {
            assert_int_equal(vkh2o_run_kvcache_reset(c), VKH2O_OK);
            vt_fill_normal(&rng, q, QW, 0.5f);
            vt_fill_normal(&rng, k, KW, 1.0f);
            vt_fill_normal(&rng, v, VW, 1.0f);
            q[QW] = k[KW] = v[VW] = NAN;
            if (where == 1)
                q[QW - 1] = NAN;
            if (where == 2)
                k[KW - 1] = INFINITY;
            if (where == 3)
                v[VW - 1] = NAN;
            assert_int_equal(vkh2o_buffer_upload(bq, 0, q, sizeof q), VKH2O_OK);
            assert_int_equal(vkh2o_buffer_upload(bk, 0, k, sizeof k), VKH2O_OK);
            assert_int_equal(vkh2o_buffer_upload(bv, 0, v, sizeof v), VKH2O_OK);
            vkh2o_kvcache_step ks = { .layer = 0, .q = bq, .k = bk, .v = bv };
            assert_int_equal(vkh2o_run_kvcache_step(c, &ks), VKH2O_OK);
            assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
            printf("check_finite, expanded %s, step with %s: %u counted (what 0x%x)\n", f32 ? "f32" : "f16",
                   (const char*[]){ "a NaN past each input", "q NaN", "k Inf", "v NaN" }[where], st.nonfinite,
                   st.nonfinite_what);
            if (where == 0) {
                assert_int_equal(st.nonfinite, 0);
                assert_int_equal(st.nonfinite_what, 0);
                continue;
            }
            assert_int_equal(st.nonfinite, 1);
            assert_int_equal(st.nonfinite_position, 0);
            /* a non-finite q or k makes the head's logit, hence its weight, non-finite; v does not */
            if (where == 1)
                assert_int_equal(st.nonfinite_what, VKH2O_NONFINITE_Q | VKH2O_NONFINITE_SCORE);
            if (where == 2)
                assert_int_equal(st.nonfinite_what, VKH2O_NONFINITE_CKV | VKH2O_NONFINITE_SCORE);
            if (where == 3)
                assert_int_equal(st.nonfinite_what, VKH2O_NONFINITE_KPE);
        }
        /* prefills: token 2's last k number and token 3's last v number; then token 3's v alone */
        float pk[P * KW], pv[P * VW];
        for (int both = 1; both >= 0; both--) {
            assert_int_equal(vkh2o_run_kvcache_reset(c), VKH2O_OK);
            vt_fill_normal(&rng, pk, P * KW, 1.0f);
            vt_fill_normal(&rng, pv, P * VW, 1.0f);
            if (both)
                pk[2 * KW + KW - 1] = -INFINITY;
            pv[3 * VW + VW - 1] = NAN;
            vkh2o_buffer* bpk = vt_upload_f32(pk, P * KW);
            vkh2o_buffer* bpv = vt_upload_f32(pv, P * VW);
            vkh2o_kvcache_prefill pf = { .layer = 0, .n = P, .k = bpk, .v = bpv };
            assert_int_equal(vkh2o_run_kvcache_prefill(c, &pf), VKH2O_OK);
            assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
            assert_int_equal(st.nonfinite, both ? 2 : 1);
            assert_int_equal(st.nonfinite_position, both ? 2 : 3);
            assert_int_equal(st.nonfinite_what, both ? VKH2O_NONFINITE_CKV : VKH2O_NONFINITE_KPE);
            vkh2o_buffer_destroy(bpk);
            vkh2o_buffer_destroy(bpv);
        }
        vkh2o_buffer_destroy(bq);
        vkh2o_buffer_destroy(bk);
        vkh2o_buffer_destroy(bv);
        vkh2o_kvcache_destroy(c);
    }
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_order),
        cmocka_unit_test(test_order_and_invariants),
        cmocka_unit_test(test_check_finite),
        cmocka_unit_test(test_check_finite_expanded),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
