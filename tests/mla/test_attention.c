/* Conformance of the three attention passes (shaders/attn_lse, attn_pv, attn_reduce via
 * vkh2o_cmd_attention / vkh2o_cmd_attention_mass) against ref_attention (double, P
 * materialised), over odd S, T, H, D, DV, strided and shared-key layouts, causal offsets, and
 * several tilings (the CPU default and the GPU-style one-query-per-invocation tiling). Every
 * case whose layout allows texel reads (attn_lse_texel / attn_pv_texel: D, DV and strides
 * multiples of 4 floats, inputs bound at 256-byte offsets) runs with them and with storage
 * reads, which must agree bit for bit; layouts that do not (odd D or DV, odd strides, a 64-byte
 * offset) must fall back (vkh2o_attn_uses_texels, checked against the rule here).
 *
 * Error bounds (inputs ~ N(0,1) scaled so scores are O(1..8); u = 2^-24):
 *  - a score is an fp32 dot of D terms: error ~ sqrt(D) u |q||k| scale, i.e. a relative error
 *    of P of a few 1e-6 at most for D = 192 with sharp softmax; P.V adds T more fp32 terms.
 *    Asserted: nmse(o) <= 1e-10 and nmse(P) <= 1e-10 (observed 1e-14 .. 6e-13).
 *  - the mass sums up to H * S probabilities in fp32: nmse(scores) <= 1e-11 (observed <= 1e-13), and
 *    |sum scores - H * S| <= 1e-4 H * S (every visible row sums to 1).
 *  - Determinism: a second run (storage reads, after texel reads where possible) gives the
 *    same bits for o, scores and P.
 * Outputs are poisoned, guard words checked, masked probabilities must be exactly 0. */
#include "vkh2o_test.h"
#include "mla_internal.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Input layouts (q, k, v strides and binding offsets). */
enum attn_layout {
    GAPPY,     /* odd gaps: q [S][H][D + 1] + 2 per token, v rows DV + 2 (storage reads only) */
    ALIGNED,   /* gaps of 4 floats, q/k/v bound at byte offset 256: texel reads when D, DV % 4 == 0 */
    OFF64,     /* as ALIGNED but bound at byte offset 64: storage reads (texel views need 256) */
    LATENT,    /* k and v in one buffer: key row [c_kv | k_pe] of D, value c_kv = its first DV */
};

typedef struct attn_case {
    uint32_t S, T, H, D, DV;
    int32_t causal_off;        /* INT32_MIN: T - S (prefill after T - S cached keys) */
    bool shared_kv;            /* k_hs = v_hs = 0: one key / value row for all heads */
    bool probs, accumulate;
    float qscale;              /* sharpness */
    vkh2o_attn_tuning tune;    /* all zero: the device default */
    enum attn_layout layout;
} attn_case;

/* a buffer holding n floats of x at byte offset off (poisoned before it, guard after) */
static vkh2o_buffer* upload_at(const float* x, size_t n, uint32_t off)
{
    vkh2o_buffer* b = vt_buffer(off + n * 4);
    assert_int_equal(vkh2o_buffer_upload(b, off, x, n * 4), VKH2O_OK);
    return b;
}

/* Which reads a wide case (D >= 128: the Kimi shapes) or a loop-budget case runs with in the
 * default run: texel reads (storage where the layout allows none) or storage reads, turning with
 * the seed; set by each test from its seed. -1: both, as every case in the full run. */
static int g_wide_reads = -1;

/* Runs the case twice: with texel reads and with storage reads when the layout allows texels
 * (both must give the same bits), else twice with storage reads (the same bits again). In the
 * default run a wide or loop-budget case runs once, with the reads g_wide_reads says (each read
 * path's kernels are a compile; texel = storage is asserted by the narrower aligned cases, which
 * the seed picks in at least one of two successive runs). */
static void run_case(const attn_case* c, vt_rng* rng)
{
    vkh2o_context* ctx = vt_ctx();
    vkh2o_attn_tuning t = c->tune.local ? c->tune : vkh2o_attn_tuning_default(ctx);
    const uint32_t S = c->S, T = c->T, H = c->H, D = c->D, DV = c->DV;
    vkh2o_attn_args a = { .S = S, .T = T, .H = H, .D = D, .DV = DV,
                          .causal_off = c->causal_off == INT32_MIN ? (int32_t)(T - S) : c->causal_off,
                          .scale = 1.0f / sqrtf((float)D), .accumulate_scores = c->accumulate };
    const bool latent = c->layout == LATENT, gappy = c->layout == GAPPY;
    const uint32_t off = c->layout == OFF64 ? 64 : gappy ? 0 : 256;
    if (gappy) {
        a.q_hs = D + 1, a.q_ts = H * a.q_hs + 2;
        a.k_hs = c->shared_kv ? 0 : D, a.k_ts = c->shared_kv ? D + 3 : H * D;
        a.v_hs = c->shared_kv ? 0 : DV + 2, a.v_ts = c->shared_kv ? DV : H * (DV + 2);
    } else if (latent) {
        /* the latent cache: one row per key, shared by all heads; the value is its head */
        assert_true(DV <= D);
        a.q_hs = D, a.q_ts = H * D + 4;
        a.k_hs = a.v_hs = 0, a.k_ts = a.v_ts = D + 4;
    } else {
        a.q_hs = D + 4, a.q_ts = H * a.q_hs + 4;
        a.k_hs = c->shared_kv ? 0 : D, a.k_ts = c->shared_kv ? D + 4 : H * D;
        a.v_hs = c->shared_kv ? 0 : DV + 4, a.v_ts = c->shared_kv ? DV : H * (DV + 4);
    }
    a.o_hs = DV, a.o_ts = H * DV + 1;
    /* texel reads need 4-float rows, strides and 256-byte offsets (independent of the library) */
    const bool expect_texel = !gappy && off % 256 == 0 && D % 4 == 0 && DV % 4 == 0;
    const size_t nq = (size_t)S * a.q_ts, nk = (size_t)T * a.k_ts, nv = latent ? 0 : (size_t)T * a.v_ts,
                 no = (size_t)S * a.o_ts;
    const size_t np = (size_t)H * S * T;
    float* q = malloc(nq * 4);
    float* k = malloc(nk * 4);
    float* v = latent ? NULL : malloc(nv * 4);
    float* o_ref = calloc(no, 4);
    float* m_ref = malloc(T * 4);
    float* p_ref = malloc(np * 4);
    float* o_got = malloc(no * 4);
    float* m_got = malloc(T * 4);
    float* p_got = malloc(np * 4);
    float* m0 = malloc(T * 4);
    assert_true(q && k && (v || latent) && o_ref && m_ref && p_ref && o_got && m_got && p_got && m0);
    vt_fill_normal(rng, q, nq, c->qscale);
    vt_fill_normal(rng, k, nk, 1.0f);
    if (!latent)
        vt_fill_normal(rng, v, nv, 1.0f);
    for (uint32_t j = 0; j < T; j++)
        m0[j] = (float)vt_u32_below(rng, 100);

    ref_attn_args ra = { .S = S, .T = T, .H = H, .D = D, .DV = DV, .causal_off = a.causal_off, .scale = a.scale,
                         .q_ts = a.q_ts, .q_hs = a.q_hs, .k_ts = a.k_ts, .k_hs = a.k_hs, .v_ts = a.v_ts,
                         .v_hs = a.v_hs, .o_ts = a.o_ts, .o_hs = a.o_hs };
    ref_attention(&ra, q, k, latent ? k : v, o_ref, m_ref, p_ref);
    if (c->accumulate)
        for (uint32_t j = 0; j < T; j++)
            m_ref[j] += m0[j];

    vkh2o_buffer* bq = upload_at(q, nq, off);
    vkh2o_buffer* bk = upload_at(k, nk, off);
    vkh2o_buffer* bv = latent ? NULL : upload_at(v, nv, off);
    vkh2o_buffer* bo = vt_buffer(no * 4);
    vkh2o_buffer* bm = vt_buffer(T * 4);
    vkh2o_buffer* bl = vt_buffer((size_t)H * S * 4);
    const uint64_t npart = vkh2o_attn_part_floats(&t, S, T, H, D, DV);
    vkh2o_buffer* bpart = vt_buffer(npart * 4);
    vkh2o_buffer* bp = c->probs ? vt_buffer(np * 4) : NULL;
    vkh2o_attn_bufs b = { .q = vkh2o_bind_range(bq, off, nq * 4), .k = vkh2o_bind_range(bk, off, nk * 4),
                          .v = latent ? vkh2o_bind_range(bk, off, nk * 4) : vkh2o_bind_range(bv, off, nv * 4),
                          .o = vkh2o_bind_range(bo, 0, no * 4), .lse = vkh2o_bind_range(bl, 0, (uint64_t)H * S * 4),
                          .part = vkh2o_bind_range(bpart, 0, npart * 4), .scores = vkh2o_bind_range(bm, 0, T * 4),
                          .q_buffer = bq, .k_buffer = bk, .v_buffer = latent ? bk : bv };
    if (bp)
        b.probs = vkh2o_bind_range(bp, 0, np * 4);
    vkh2o_attn_tuning tt = t, ts = t;
    tt.texel = 1, ts.texel = 0;
    assert_int_equal(vkh2o_attn_uses_texels(ctx, &tt, &a, &b), expect_texel);
    assert_false(vkh2o_attn_uses_texels(ctx, &ts, &a, &b));

    const int only = vt_full() || (c->D < 128 && !c->tune.loop_budget) ? -1 : g_wide_reads;
    static const char* const layout_name[] = { "gappy", "aligned", "offset 64", "latent" };
    char label[200];
    snprintf(label, sizeof label, "S=%u T=%u H=%u D=%u DV=%u off=%d%s%s tile %u/%u/%u/%u %s%s", S, T, H, D, DV,
             a.causal_off, c->shared_kv ? " shared" : "", c->accumulate ? " acc" : "", t.local, t.rq, t.rk,
             vkh2o_attn_hg(&t, T, D, DV), layout_name[c->layout], expect_texel && only < 0 ? ", texel = storage" : "");
    printf("# attention %s%s\n", label, only == 0 ? ", texel reads only" : only == 1 ? ", storage reads only" : "");
    for (int run = 0, first = 1; run < 2; run++) {
        /* run 0 with texel reads where possible, run 1 with storage reads */
        if (only >= 0 && run != only)
            continue;
        const vkh2o_attn_tuning* tr = run == 0 ? &tt : &ts;
        vt_poison(bo);
        if (bp)
            vt_poison(bp);
        if (c->accumulate)
            assert_int_equal(vkh2o_buffer_upload(bm, 0, m0, T * 4), VKH2O_OK);
        else
            vt_poison(bm);
        VkCommandBuffer cb;
        assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
        assert_int_equal(vkh2o_cmd_attention(ctx, cb, tr, &a, &b), VKH2O_OK);
        vkh2o_barrier(ctx, cb);
        assert_int_equal(vkh2o_cmd_attention_mass(ctx, cb, tr, &a, &b), VKH2O_OK);
        assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
        if (first) {
            first = 0;
            vt_download_f32(bo, o_got, no);
            vt_download_f32(bm, m_got, T);
            if (bp)
                vt_download_f32(bp, p_got, np);
        } else {
            /* bit-for-bit the same as the first run (texel and storage reads sum in one order) */
            float* again = malloc((no > np ? no : np) * 4 + T * 4);
            vt_download_f32(bo, again, no);
            assert_memory_equal(again, o_got, no * 4);
            vt_download_f32(bm, again, T);
            assert_memory_equal(again, m_got, T * 4);
            if (bp) {
                vt_download_f32(bp, again, np);
                assert_memory_equal(again, p_got, np * 4);
            }
            free(again);
        }
    }
    vt_check_guard(bq, off + nq * 4);
    vt_check_guard(bk, off + nk * 4);
    if (bv)
        vt_check_guard(bv, off + nv * 4);
    vt_check_guard(bo, no * 4);
    vt_check_guard(bm, T * 4);
    vt_check_guard(bpart, npart * 4);
    if (bp)
        vt_check_guard(bp, np * 4);

    /* o: the gap after each token row is never written */
    for (uint32_t i = 0; i < S; i++) {
        uint32_t w;
        memcpy(&w, &o_got[(size_t)i * a.o_ts + H * DV], 4);
        assert_int_equal(w, VT_POISON);
        o_got[(size_t)i * a.o_ts + H * DV] = 0.0f;
    }
    vt_assert_nmse("  o", o_got, o_ref, no, 1e-10);
    vt_assert_nmse("  scores", m_got, m_ref, T, 1e-11);
    double sum = 0.0, expect = 0.0;
    for (uint32_t j = 0; j < T; j++)
        sum += m_got[j] - (c->accumulate ? m0[j] : 0.0f);
    for (uint32_t i = 0; i < S; i++)
        expect += (int64_t)i + a.causal_off >= 0 ? H : 0;   /* rows that see at least one key */
    printf("#   sum of scores %.6f, expected %.0f\n", sum, expect);
    assert_true(fabs(sum - expect) <= 1e-4 * (expect > 1 ? expect : 1));
    if (bp) {
        vt_assert_nmse("  probs", p_got, p_ref, np, 1e-10);
        for (size_t e = 0; e < np; e++)
            if (p_ref[e] == 0.0f)
                assert_true(p_got[e] == 0.0f);
    }
    vkh2o_buffer* bufs[] = { bq, bk, bv, bo, bm, bl, bpart, bp };
    for (size_t i = 0; i < 8; i++)
        vkh2o_buffer_destroy(bufs[i]);
    free(q); free(k); free(v); free(o_ref); free(m_ref); free(p_ref); free(o_got); free(m_got); free(p_got); free(m0);
}

/* (texel is set per run by run_case) */
static const vkh2o_attn_tuning DEF = { 0, 0, 0, 0, 0, 0 };
static const vkh2o_attn_tuning LOOPY = { 32, 8, 8, 8, 1000, 0 };
static const vkh2o_attn_tuning GPU = { 64, 1, 8, 8, 0, 0 };
static const vkh2o_attn_tuning ODD = { 16, 3, 5, 2, 0, 0 };
static const vkh2o_attn_tuning ONE = { 8, 1, 1, 1, 0, 0 };

static void test_causal(void** state)
{
    (void)state;
    vt_rng rng;
    const uint64_t seed = vt_seed("attention causal");
    vt_rng_seed(&rng, seed);
    g_wide_reads = (int)(seed % 2);
    const attn_case cases[] = {
        { 1, 1, 1, 16, 12, INT32_MIN, false, true, false, 1.0f, DEF, ALIGNED },
        { 3, 3, 3, 24, 12, INT32_MIN, false, true, false, 1.0f, DEF, GAPPY },
        { 17, 17, 3, 24, 12, INT32_MIN, false, true, false, 4.0f, DEF, ALIGNED },
        { 17, 17, 5, 7, 5, INT32_MIN, false, true, true, 1.0f, ODD, ALIGNED },      /* odd D: storage */
        { 17, 17, 5, 12, 20, INT32_MIN, false, true, true, 1.0f, ODD, ALIGNED },    /* odd tiles, texels */
        { 17, 17, 3, 16, 13, INT32_MIN, false, true, false, 1.0f, DEF, ALIGNED },   /* odd DV: storage */
        { 100, 100, 2, 192, 128, INT32_MIN, false, false, false, 1.0f, DEF, ALIGNED },
        { 100, 100, 3, 40, 33, INT32_MIN, false, true, false, 8.0f, GPU, GAPPY },
        { 100, 100, 3, 44, 36, INT32_MIN, false, true, false, 8.0f, GPU, ALIGNED },
        { 33, 33, 9, 16, 8, INT32_MIN, false, true, false, 1.0f, ONE, OFF64 },
        { 3, 3, 64, 192, 128, INT32_MIN, false, false, false, 1.0f, DEF, GAPPY },   /* Kimi heads and dims */
        /* the Kimi demo's shape, and a row longer than llvmpipe's per-invocation loop limit
         * would allow without the per-device head grouping (rows past ~1500 keys) */
        { 256, 256, 64, 192, 128, INT32_MIN, false, false, false, 1.0f, DEF, ALIGNED },
        { 1600, 1600, 1, 192, 128, INT32_MIN, false, false, false, 1.0f, DEF, ALIGNED },
        /* a small loop budget forces fewer heads per P.V invocation than asked (hg 8 -> 2) */
        { 300, 300, 6, 40, 24, INT32_MIN, false, true, false, 1.0f, LOOPY, ALIGNED },
    };
    /* the default run: the Kimi demo's shape (the largest) always, one of the two loop-limit
     * cases (the device's budget at 1600 keys, the small budget) turning with the seed, and one
     * in four of the others, Kimi's heads and dims among them (each case compiles its own
     * kernels); the full run every case */
    const size_t n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++)
        if (i + 3 == n || (i + 3 > n ? vt_pick(seed, i, 2) : vt_pick(seed, i, 4)))
            run_case(&cases[i], &rng);
    vt_check_validation();
}

/* The cache uses: new queries after cached keys, no mask, shared (latent) keys and values. */
static void test_offsets_and_shared(void** state)
{
    (void)state;
    vt_rng rng;
    const uint64_t seed = vt_seed("attention offsets");
    vt_rng_seed(&rng, seed);
    g_wide_reads = (int)(seed % 2);
    const attn_case cases[] = {
        { 5, 23, 3, 24, 12, INT32_MIN, false, true, true, 1.0f, DEF, ALIGNED },   /* prefill after 18 cached */
        { 1, 50, 4, 16, 16, INT32_MIN, false, true, false, 2.0f, DEF, ALIGNED },  /* decode */
        { 7, 7, 2, 16, 8, 100, false, true, false, 1.0f, ODD, ALIGNED },          /* no mask */
        { 9, 9, 3, 16, 8, -3, false, true, false, 1.0f, ODD, GAPPY },             /* first rows see nothing */
        { 9, 9, 3, 16, 8, -3, false, true, false, 1.0f, ODD, ALIGNED },
        { 6, 31, 5, 40, 24, INT32_MIN, true, true, false, 1.0f, DEF, GAPPY },     /* shared K/V rows */
        { 6, 31, 5, 40, 24, INT32_MIN, true, true, false, 1.0f, DEF, ALIGNED },
        { 6, 31, 5, 40, 24, INT32_MIN, true, true, false, 1.0f, GPU, OFF64 },
        /* the latent layout: keys [c_kv | k_pe], values c_kv read from the same rows */
        { 6, 31, 5, 40, 32, INT32_MIN, true, true, false, 1.0f, DEF, LATENT },
        { 6, 31, 5, 40, 32, INT32_MIN, true, true, false, 1.0f, GPU, LATENT },
        { 4, 41, 16, 576, 512, INT32_MIN, true, false, true, 1.0f, DEF, LATENT },  /* Kimi's latent widths */
    };
    /* the default run: Kimi's latent widths always, one in four of the others; the full run
     * every case */
    const size_t n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++)
        if (i + 1 == n || vt_pick(seed, i, 4))
            run_case(&cases[i], &rng);
    vt_check_validation();
}

/* An object's attention plan (vkh2o_attn_plan_make) takes the heads per P.V invocation from
 * breakpoints it made: the same as vkh2o_attn_hg for every T, and the same longest row, without
 * making a kernel (a plan holds keys only). */
static void test_plan_hg(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    const vkh2o_attn_tuning tunings[] = { vkh2o_attn_tuning_default(ctx), LOOPY, GPU, ODD, ONE,
                                          { 32, 8, 8, 8, 60000, 0 }, { 16, 3, 5, 7, 5000, 0 }, { 8, 1, 1, 16, 777, 0 } };
    static const uint32_t dims[][2] = { { 192, 128 }, { 576, 512 }, { 40, 24 }, { 7, 5 }, { 16, 8 } };
    const uint64_t l0 = vkh2o_kernel_lookups(ctx);
    vkh2o_attn_plan* p = malloc(sizeof *p);
    assert_non_null(p);
    uint64_t checked = 0;
    for (size_t ti = 0; ti < sizeof tunings / sizeof tunings[0]; ti++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            const vkh2o_attn_tuning* t = &tunings[ti];
            const uint32_t D = dims[di][0], DV = dims[di][1];
            assert_int_equal(vkh2o_attn_plan_make(ctx, t, D, DV, p), VKH2O_OK);
            for (uint32_t T = 1; T <= 20000; T += T < 2000 ? 1 : 7) {
                /* the longest row: as attention's check (refused past it) */
                const bool fits = !t->loop_budget ||
                                  (uint64_t)((T + t->rk - 1) / t->rk) * (D / 8 + D % 8 + DV / 8 + DV % 8 + 2) + 1 <= t->loop_budget;
                if ((T <= p->hg_keys[0]) != fits)
                    fail_msg("tuning %zu D %u DV %u T %u: the plan's longest row is %u keys", ti, D, DV, T, p->hg_keys[0]);
                if (vkh2o_attn_plan_hg(p, T) != vkh2o_attn_hg(t, T, D, DV))
                    fail_msg("tuning %zu D %u DV %u T %u: the plan gives %u heads per invocation, vkh2o_attn_hg %u", ti, D, DV, T,
                             vkh2o_attn_plan_hg(p, T), vkh2o_attn_hg(t, T, D, DV));
                checked++;
            }
        }
    printf("#   %llu (tuning, D, DV, T) agree; no kernel made\n", (unsigned long long)checked);
    assert_int_equal(vkh2o_kernel_lookups(ctx) - l0, 0);
    /* more heads per invocation than a plan keeps variants for */
    vkh2o_attn_tuning big = GPU;
    big.hg = VKH2O_ATTN_MAX_HG + 1;
    assert_int_equal(vkh2o_attn_plan_make(ctx, &big, 16, 8, p), VKH2O_ERROR_INVALID_ARGUMENT);
    free(p);
    vt_check_validation();
}

static void test_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_attn_tuning t = vkh2o_attn_tuning_default(ctx);
    vkh2o_buffer* small = vt_buffer(64);
    vkh2o_buffer* big = vt_buffer(1 << 16);
    vkh2o_binding s = vkh2o_bind_range(small, 0, 64), g = vkh2o_bind_range(big, 0, 1 << 16);
    vkh2o_attn_args a = { .S = 4, .T = 4, .H = 2, .D = 8, .DV = 8, .scale = 1.0f, .q_ts = 16, .q_hs = 8, .k_ts = 16,
                          .k_hs = 8, .v_ts = 16, .v_hs = 8, .o_ts = 16, .o_hs = 8 };
    vkh2o_attn_bufs b = { g, g, g, g, g, g, g, { 0 }, NULL, NULL, NULL, NULL };
    b.q = s;   /* 16 floats for 4 x 2 x 8 */
    assert_int_equal(vkh2o_cmd_attention(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    b.q = g;
    b.probs = s;   /* 16 floats for H S T = 32 */
    assert_int_equal(vkh2o_cmd_attention(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    b.probs = (vkh2o_binding){ 0 };
    b.scores = (vkh2o_binding){ 0 };
    assert_int_equal(vkh2o_cmd_attention_mass(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    /* a q/k/v_buffer that is not the buffer of its binding */
    b.k_buffer = small;
    assert_int_equal(vkh2o_cmd_attention(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "k/v_buffer"));
    b.k_buffer = big;
    b.v_buffer = small;
    b.scores = g;
    assert_int_equal(vkh2o_cmd_attention_mass(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "k/v_buffer"));
    b.v_buffer = NULL;
    /* texel reads need every buffer: without q's, storage reads */
    t.texel = 1;
    b.k_buffer = big;
    assert_false(vkh2o_attn_uses_texels(ctx, &t, &a, &b));
    b.q_buffer = b.v_buffer = big;
    assert_true(vkh2o_attn_uses_texels(ctx, &t, &a, &b));
    b.q_buffer = b.k_buffer = b.v_buffer = NULL;
    a.S = 0;
    assert_int_equal(vkh2o_cmd_attention(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    a.S = 4;
    t.rq = 0;
    assert_int_equal(vkh2o_cmd_attention(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    /* rows too long for the per-invocation loop budget even at one head per invocation are
     * refused rather than silently cut short */
    t = vkh2o_attn_tuning_default(ctx);
    t.loop_budget = 3;
    assert_int_equal(vkh2o_cmd_attention(ctx, VK_NULL_HANDLE, &t, &a, &b), VKH2O_ERROR_UNSUPPORTED);
    assert_non_null(strstr(vkh2o_last_error(ctx), "loop"));
    vkh2o_buffer_destroy(small);
    vkh2o_buffer_destroy(big);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_offsets_and_shared),
        cmocka_unit_test(test_plan_hg),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
