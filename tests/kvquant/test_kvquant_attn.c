/* Quantised KV cache: block selection (all / score / quest / random) against the CPU, exactly,
 * and the mixed-precision split decode attention against a CPU reference that dequantises the
 * same bytes (tight) and against the full-precision data (looser). */
#include "vkh2o_test.h"
#include "kvquant_internal.h"
#include "ref_kvquant.h"
#include "test_kvquant_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tq_case cases[] = {
    { "latent H8 d80/64 B16", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 8, .kv_lora_rank = 64, .qk_rope_head_dim = 16,
                                .block_size = 16, .max_tokens = 400, .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 389 },
    { "latent H12 (2 head chunks) d40/32 B16", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 12, .kv_lora_rank = 32, .qk_rope_head_dim = 8,
                                .block_size = 16, .max_tokens = 256, .sink_blocks = 2, .recent_blocks = 1,
                                .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 200 },
    { "latent H5 odd d43/37 B7 per-token G8", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 5, .kv_lora_rank = 37, .qk_rope_head_dim = 6,
                                .block_size = 7, .group_size = 8, .k_grouping = VKH2O_QGROUP_PER_TOKEN, .max_tokens = 160,
                                .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 150 },
    { "expanded H3 K32 V20 B8", { .layout = VKH2O_LAYOUT_EXPANDED, .num_heads = 3, .qk_nope_head_dim = 24, .qk_rope_head_dim = 8,
                                  .v_head_dim = 20, .block_size = 8, .group_size = 16, .max_tokens = 160,
                                  .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 150 },
    { "latent Kimi H64 d576/512 B16", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 64, .max_tokens = 300,
                                    .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 291 },
    /* 8-wide layouts whose scales are per token (keys, and values of the expanded layout): the
     * per-token scale reads of both read paths, 16/32-channel chunks (d_k 64, values 32) */
    { "latent H4 d64/32 B8 K per-token G16 (wide)", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 4, .kv_lora_rank = 32,
                                .qk_rope_head_dim = 32, .block_size = 8, .group_size = 16, .k_grouping = VKH2O_QGROUP_PER_TOKEN,
                                .max_tokens = 200, .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 197 },
    { "expanded H4 K48 V32 B8 G16 (wide)", { .layout = VKH2O_LAYOUT_EXPANDED, .num_heads = 4, .qk_nope_head_dim = 32,
                                .qk_rope_head_dim = 16, .v_head_dim = 32, .block_size = 8, .group_size = 16, .max_tokens = 160,
                                .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 141 },
    { "latent one partial block", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 4, .kv_lora_rank = 16, .qk_rope_head_dim = 4,
                                    .block_size = 16, .max_tokens = 64, .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 11 },
    /* one head (the bench's shape): on CPU devices 16-token score tiles with the key scales
     * folded into the query, 32-channel PV tiles (INT4 rows as one 16-byte load) with the value
     * scales folded out of the token sum, and permuted workgroups / splits */
    { "latent Kimi H1 d576/512 B16 (one head)", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 1, .max_tokens = 1700,
                                    .flags = VKH2O_QCACHE_QUEST_BOUNDS }, 1693 },
};

/* nmse(GPU, CPU on the same dequantised bytes): float accumulation over <= 400 tokens x <= 80
 * channels against double; observed ~1e-13. */
#define TIGHT_NMSE 1e-9
/* nmse against the full-precision data (all blocks attended). The data are multiples of 1/64,
 * exact in fp16, so the FP16 cache is as tight as above; INT8/INT4 blocks: quantisation noise of
 * at most half a step per element (INT4: 1/14 of the group max), averaged by the softmax. */
#define FULL_NMSE_FP16 1e-9
#define FULL_NMSE_QUANT 2e-2

static void run_case(const tq_case* tc, uint64_t seed)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    vkh2o_qcache* qc = NULL;
    assert_int_equal(vkh2o_qcache_create(ctx, &tc->d, &qc), VKH2O_OK);
    uint32_t T = tc->tokens, H = qc->d.num_heads, kvh = qc->shape.kv_heads, dk = qc->shape.d_k, dv = qc->shape.d_v;
    uint32_t B = qc->d.block_size;
    tq_data data;
    tq_data_random(&rng, qc, T, true, &data);
    float* q = malloc(sizeof(float) * H * dk);
    for (uint32_t i = 0; i < H * dk; i++) {
        float x = roundf(vt_normal(&rng) * 8.0f) / 8.0f;
        q[i] = x > 2.0f ? 2.0f : (x < -2.0f ? -2.0f : x);
    }
    vkh2o_buffer* qb = vt_upload_f32(q, (size_t)H * dk);
    vkh2o_buffer* out = vt_buffer(sizeof(float) * H * dv);
    float* got = malloc(sizeof(float) * H * dv);
    float* want = malloc(sizeof(float) * H * dv);
    float* full = malloc(sizeof(float) * H * dv);
    uint8_t* use = calloc(T, 1);
    uint8_t* use_all = malloc(T);
    memset(use_all, 1, T);
    double scale = (double)(1.0f / sqrtf((float)dk));
    ref_kvq_attention(q, data.k, data.v, use_all, T, H, kvh, dk, dv, scale, full);

    vkh2o_qpolicy pols[] = { VKH2O_QPOLICY_FP16, VKH2O_QPOLICY_BALANCED, VKH2O_QPOLICY_AGGRESSIVE };
    for (int pi = 0; pi < 3; pi++) {
        assert_int_equal(vkh2o_run_qcache_prefill_host(qc, data.k, data.v, data.imp, T), VKH2O_OK);
        assert_int_equal(vkh2o_run_qcache_route(qc, pols[pi]), VKH2O_OK);
        tq_snap s;
        tq_snapshot(qc, &s);
        float* kd = calloc(data.nk, sizeof(float));
        float* vd = data.v ? calloc(data.nv, sizeof(float)) : NULL;
        tq_dequant_all(&s, kd, vd);
        uint32_t nb = s.blocks, R = kvq_routable(&qc->d, nb);
        float* sums = calloc(nb, sizeof(float));
        assert_int_equal(vkh2o_qcache_read_blocks(qc, NULL, NULL, NULL, NULL, sums, NULL), VKH2O_OK);
        double* fk_score = calloc(nb, sizeof(double));
        double* fk_quest = calloc(nb, sizeof(double));
        uint32_t* uk = calloc(nb, sizeof(uint32_t));
        uint64_t rseed = vt_u64(&rng);
        for (uint32_t b = 0; b < nb; b++) {
            fk_score[b] = sums[b];
            uk[b] = kvq_hash(b, (uint32_t)rseed, (uint32_t)(rseed >> 32));
            /* quest bounds from the FP16 values written (the data, exact in fp16) */
            float* mn = malloc(sizeof(float) * kvh * dk);
            float* mx = malloc(sizeof(float) * kvh * dk);
            for (uint32_t h = 0; h < kvh; h++)
                for (uint32_t c = 0; c < dk; c++) {
                    float lo = INFINITY, hi = -INFINITY;
                    for (uint32_t t = b * B; t < T && t < (b + 1) * B; t++) {
                        float x = data.k[((size_t)t * kvh + h) * dk + c];
                        lo = x < lo ? x : lo;
                        hi = x > hi ? x : hi;
                    }
                    mn[h * dk + c] = lo;
                    mx[h * dk + c] = hi;
                }
            fk_quest[b] = ref_kvq_quest_bound(q, H, kvh, dk, mn, mx);
            free(mn);
            free(mx);
        }
        struct { vkh2o_qselector sel; uint32_t budget, bps; } runs[] = {
            { VKH2O_QSELECT_ALL, 0, 0 }, { VKH2O_QSELECT_ALL, 0, 1 }, { VKH2O_QSELECT_SCORE, R / 3, 0 },
            { VKH2O_QSELECT_QUEST, R / 3, 2 }, { VKH2O_QSELECT_RANDOM, R / 3, 0 }, { VKH2O_QSELECT_SCORE, 0, 0 },
            { VKH2O_QSELECT_QUEST, R + 5, 0 },
        };
        /* every run through both read paths where the layout allows texel reads (8-wide), else
         * storage only, texel refused; then once more with the tile shapes and read path a GPU
         * gets (the device's own choice is the CPU one on lavapipe) */
        bool wide = kvq_wide_layout(qc) != 0;
        {
            vkh2o_qattn_desc ad = { .selector = VKH2O_QSELECT_ALL };
            kvq_attn_plan pl;
            qc->read_path = KVQ_READ_AUTO;
            qc->tiles = KVQ_TILES_AUTO;
            assert_int_equal(kvq_plan_attend(qc, &ad, &pl), VKH2O_OK);
            assert_int_equal(pl.tex, wide && vkh2o_cpu_shapes(ctx));
            /* the public view of the read path agrees with the plan */
            vkh2o_qread rp = VKH2O_QREAD_AUTO;
            assert_int_equal(vkh2o_qcache_get_read_path(qc, &rp), VKH2O_OK);
            assert_int_equal(rp, pl.tex ? VKH2O_QREAD_TEXEL : VKH2O_QREAD_STORAGE);
            assert_int_equal(vkh2o_qcache_set_read_path(qc, (vkh2o_qread)9), VKH2O_ERROR_INVALID_ARGUMENT);
            assert_int_equal(vkh2o_qcache_set_read_path(NULL, VKH2O_QREAD_AUTO), VKH2O_ERROR_INVALID_ARGUMENT);
            assert_int_equal(vkh2o_qcache_set_read_path(qc, VKH2O_QREAD_TEXEL), VKH2O_OK);
            assert_int_equal(qc->read_path, KVQ_READ_TEXEL);
            if (!wide) {
                assert_int_equal(vkh2o_run_qcache_attend(qc, qb, out, &ad, NULL), VKH2O_ERROR_UNSUPPORTED);
            }
        }
        const size_t nruns = sizeof runs / sizeof runs[0];
        for (size_t rr = 0; rr < (wide ? 3u : 2u) * nruns; rr++) {
            /* the default run: a third of the (read mode, selector run) pairs per policy, turning
             * with the policy, so that every pair runs under one policy and every policy meets
             * the ALL selector; the full run every pair under every policy */
            if (!vt_pick(seed, rr + (size_t)pi, 3)) continue;
            size_t ri = rr % nruns, mode = rr / nruns;
            bool gpu_tiles = mode == (wide ? 2u : 1u);
            qc->tiles = gpu_tiles ? KVQ_TILES_GPU : KVQ_TILES_AUTO;
            assert_int_equal(vkh2o_qcache_set_read_path(qc, gpu_tiles ? VKH2O_QREAD_AUTO : mode ? VKH2O_QREAD_TEXEL
                                                                                          : VKH2O_QREAD_STORAGE), VKH2O_OK);
            assert_int_equal(qc->read_path, gpu_tiles ? KVQ_READ_AUTO : mode ? KVQ_READ_TEXEL : KVQ_READ_STORAGE);
            const bool profiled = ri % 2 == 1;
            vkh2o_qcache_set_profile(qc, profiled);
            vkh2o_qattn_desc ad = { .selector = runs[ri].sel, .budget_blocks = runs[ri].budget, .seed = rseed,
                                    .blocks_per_split = runs[ri].bps };
            vt_poison(out);
            uint32_t sel_tokens = 0;
            assert_int_equal(vkh2o_run_qcache_attend(qc, qb, out, &ad, &sel_tokens), VKH2O_OK);
            vt_download_f32(out, got, (size_t)H * dv);
            vt_check_guard(out, sizeof(float) * H * dv);
            /* its GPU times: the whole, and the passes (inside it) only when profiled */
            vkh2o_qattn_timings tm;
            vkh2o_qcache_get_last_attend_timings(qc, &tm);
            if (vkh2o_context_get_caps(ctx)->timestamps) {
                assert_true(tm.total_ms >= 0.0);
                double sum = 0;
                for (uint32_t k = 0; k < VKH2O_QATTN_PASSES; k++) {
                    assert_true(profiled ? tm.pass_ms[k] >= 0.0 : tm.pass_ms[k] < 0.0);
                    sum += profiled ? tm.pass_ms[k] : 0.0;
                }
                assert_true(sum <= tm.total_ms + 1e-3);
            }
            /* the selection, exactly (read through the public vkh2o_qcache_read_selection) */
            uint32_t* gl = malloc(4ull * (nb + 1));
            assert_int_equal(vkh2o_qcache_read_selection(qc, gl + 1, &gl[0]), VKH2O_OK);
            uint32_t only_count = UINT32_MAX;
            assert_int_equal(vkh2o_qcache_read_selection(qc, NULL, &only_count), VKH2O_OK);
            assert_int_equal(only_count, gl[0]);
            uint32_t* wl = malloc(4ull * (nb + 1));
            uint32_t wn = ref_kvq_select(nb, s.prec, qc->d.sink_blocks, qc->d.recent_blocks, (int)ad.selector, ad.budget_blocks,
                                         ad.selector == VKH2O_QSELECT_QUEST ? fk_quest : fk_score, uk, wl);
            /* the device list is ordered by precision (FP16, INT8, INT4), ascending within one */
            uint32_t* wsorted = malloc(4ull * (nb + 1));
            uint32_t ns = 0;
            for (uint32_t p = 0; p < 3; p++)
                for (uint32_t i = 0; i < wn; i++)
                    if (s.prec[wl[i]] == p)
                        wsorted[ns++] = wl[i];
            assert_int_equal(ns, wn);
            assert_int_equal(gl[0], wn);
            for (uint32_t i = 0; i < wn; i++)
                if (gl[1 + i] != wsorted[i])
                    fail_msg("%s %s: selected block #%u is %u, CPU %u", vkh2o_qpolicy_name(pols[pi]),
                             vkh2o_qselector_name(ad.selector), i, gl[1 + i], wsorted[i]);
            free(wsorted);
            /* sinks and recents always attended (never evicted, never skipped) */
            uint32_t fixed = 0;
            for (uint32_t i = 0; i < wn; i++)
                if (wl[i] < qc->d.sink_blocks || wl[i] + qc->d.recent_blocks >= nb)
                    fixed++;
            uint32_t want_fixed = nb - R;
            assert_int_equal(fixed, want_fixed);
            memset(use, 0, T);
            uint32_t ntok = 0;
            for (uint32_t i = 0; i < wn; i++)
                for (uint32_t t = wl[i] * B; t < T && t < (wl[i] + 1) * B; t++, ntok++)
                    use[t] = 1;
            assert_int_equal(sel_tokens, ntok);
            ref_kvq_attention(q, kd, vd, use, T, H, kvh, dk, dv, scale, want);
            char label[160];
            const char* path = gpu_tiles ? "GPU tiles, storage" : qc->read_path == KVQ_READ_TEXEL ? "texel" : "storage";
            if (gpu_tiles) {
                kvq_attn_plan gp;
                assert_int_equal(kvq_plan_attend(qc, &ad, &gp), VKH2O_OK);
                assert_int_equal(gp.tex, 0);
                assert_true(gp.tm <= 4 && gp.pt <= 4 && gp.tc == 8);
            }
            snprintf(label, sizeof label, "%s %s k=%u bps=%u (%u blocks, %u tokens, %s reads) vs CPU same bytes",
                     vkh2o_qpolicy_name(pols[pi]), vkh2o_qselector_name(ad.selector), ad.budget_blocks, ad.blocks_per_split, wn,
                     ntok, path);
            vt_assert_nmse(label, got, want, (size_t)H * dv, TIGHT_NMSE);
            if (ad.selector == VKH2O_QSELECT_ALL) {
                snprintf(label, sizeof label, "%s all vs full precision (%s reads)", vkh2o_qpolicy_name(pols[pi]), path);
                bool evicts = s.blocks > 0 && qc->count[VKH2O_QPREC_EVICTED] > 0;
                if (!evicts)
                    vt_assert_nmse(label, got, full, (size_t)H * dv, pols[pi] == VKH2O_QPOLICY_FP16 ? FULL_NMSE_FP16 : FULL_NMSE_QUANT);
                else
                    printf("# %s: nmse %.3g (evicting policy, no bound)\n", label, vt_nmse_f(got, full, (size_t)H * dv));
            }
            free(gl);
            free(wl);
        }
        free(fk_score); free(fk_quest); free(uk); free(sums);
        free(kd); free(vd);
        tq_snap_free(&s);
    }
    free(q); free(got); free(want); free(full); free(use); free(use_all);
    vkh2o_buffer_destroy(qb);
    vkh2o_buffer_destroy(out);
    tq_data_free(&data);
    vkh2o_qcache_destroy(qc);
}

static void test_attention(void** state)
{
    (void)state;
    uint64_t seed = vt_seed("kvquant_attention");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        printf("# case %s, %u tokens\n", cases[i].name, cases[i].tokens);
        run_case(&cases[i], seed + i);
    }
    vt_check_validation();
}

/* Long contexts: llvmpipe silently ends an invocation's loops after 65535 iterations, so every
 * pass must split its work. 32768 tokens, mixed precision, the fewest splits the planner allows
 * (the longest per-invocation loops) and the automatic split: routing exactly as the CPU, the
 * output against the CPU on the same bytes, and the probabilities summing to 1 per head (channel 0
 * of every key row is 1, so out[h][0] = sum_t p_t up to that constant's quantisation, <= 2.5e-4
 * relative for INT4). Block size 2 gives 16384 blocks (the rank loops) and 2-token PV steps. */
static void test_long_context(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    uint64_t seed = vt_seed("kvquant_long");
    static const tq_case longs[] = {
        { "latent H2 d80/64 B16 (8-wide loads)", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 2, .kv_lora_rank = 64,
                                                    .qk_rope_head_dim = 16, .block_size = 16, .max_tokens = 32768 }, 32768 },
        { "latent H3 d43/37 B2 (scalar loads)", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 3, .kv_lora_rank = 37,
                                                  .qk_rope_head_dim = 6, .block_size = 2, .max_tokens = 32768 }, 32767 },
    };
    for (size_t ci = 0; ci < sizeof longs / sizeof longs[0]; ci++) {
        const tq_case* tc = &longs[ci];
        printf("# case %s, %u tokens\n", tc->name, tc->tokens);
        vt_rng rng;
        vt_rng_seed(&rng, seed + ci);
        vkh2o_qcache* qc = NULL;
        assert_int_equal(vkh2o_qcache_create(ctx, &tc->d, &qc), VKH2O_OK);
        uint32_t T = tc->tokens, H = qc->d.num_heads, dk = qc->shape.d_k, dv = qc->shape.d_v, B = qc->d.block_size;
        tq_data data;
        tq_data_random(&rng, qc, T, true, &data);
        for (uint32_t t = 0; t < T; t++)
            data.k[(size_t)t * dk] = 1.0f;
        float* q = malloc(sizeof(float) * H * dk);
        for (uint32_t i = 0; i < H * dk; i++)
            q[i] = roundf(vt_normal(&rng) * 4.0f) / 32.0f;
        vkh2o_buffer* qb = vt_upload_f32(q, (size_t)H * dk);
        vkh2o_buffer* out = vt_buffer(sizeof(float) * H * dv);
        float* got = malloc(sizeof(float) * H * dv);
        float* want = malloc(sizeof(float) * H * dv);
        uint8_t* use = malloc(T);
        memset(use, 1, T);
        assert_int_equal(vkh2o_run_qcache_prefill_host(qc, data.k, NULL, data.imp, T), VKH2O_OK);
        assert_int_equal(vkh2o_run_qcache_route(qc, VKH2O_QPOLICY_BALANCED), VKH2O_OK);
        tq_snap s;
        tq_snapshot(qc, &s);
        /* routing of all blocks exactly as the CPU */
        uint32_t nb = s.blocks, th[3];
        float* sums = calloc(nb, sizeof(float));
        uint32_t* fp16 = calloc(nb, sizeof(uint32_t));
        uint32_t* want_prec = calloc(nb, sizeof(uint32_t));
        assert_int_equal(vkh2o_qcache_read_blocks(qc, NULL, NULL, NULL, NULL, sums, NULL), VKH2O_OK);
        kvq_policy_thresholds(VKH2O_QPOLICY_BALANCED, kvq_routable(&qc->d, nb), th);
        ref_kvq_route(nb, sums, fp16, qc->d.sink_blocks, qc->d.recent_blocks, th, want_prec);
        for (uint32_t b = 0; b < nb; b++)
            if (s.prec[b] != want_prec[b])
                fail_msg("block %u of %u routed to %u, CPU %u", b, nb, s.prec[b], want_prec[b]);
        float* kd = calloc(data.nk, sizeof(float));
        tq_dequant_all(&s, kd, NULL);
        double scale = (double)(1.0f / sqrtf((float)dk));
        ref_kvq_attention(q, kd, NULL, use, T, H, 1, dk, dv, scale, want);
        /* the automatic split, the fewest splits, and (first case) the GPU tiles' automatic split */
        uint32_t bps_list[3] = { 0, 1u << 30, 0 };
        for (int bi = 0; bi < (ci == 0 ? 3 : 2); bi++) {
            qc->tiles = bi == 2 ? KVQ_TILES_GPU : KVQ_TILES_AUTO;
            vkh2o_qattn_desc ad = { .selector = VKH2O_QSELECT_ALL, .blocks_per_split = bps_list[bi] };
            kvq_attn_plan pl;
            assert_int_equal(kvq_plan_attend(qc, &ad, &pl), VKH2O_OK);
            printf("#   bps %u%s: %u splits of %u blocks; loop iterations per invocation: score %u, softmax %u, pv %u, "
                   "combine %u\n", ad.blocks_per_split, bi == 2 ? " (GPU tiles)" : "", pl.splits, pl.bps, pl.iters_score,
                   pl.iters_softmax, pl.iters_pv, pl.iters_combine);
            assert_true(pl.iters_score <= KVQ_LOOP_BUDGET && pl.iters_softmax <= KVQ_LOOP_BUDGET &&
                        pl.iters_pv <= KVQ_LOOP_BUDGET && pl.iters_combine <= KVQ_LOOP_BUDGET);
            vt_poison(out);
            uint32_t sel = 0;
            assert_int_equal(vkh2o_run_qcache_attend(qc, qb, out, &ad, &sel), VKH2O_OK);
            assert_int_equal(sel, T);
            vt_download_f32(out, got, (size_t)H * dv);
            vt_check_guard(out, sizeof(float) * H * dv);
            vt_assert_nmse("long context vs CPU same bytes", got, want, (size_t)H * dv, TIGHT_NMSE);
            for (uint32_t h = 0; h < H; h++)
                if (!(fabsf(got[h * dv] - 1.0f) <= 1e-3f))
                    fail_msg("head %u: probabilities sum to %.6f, not 1", h, (double)got[h * dv]);
            /* a selection over the 16K-block range: top half by importance */
            ad.selector = VKH2O_QSELECT_SCORE;
            ad.budget_blocks = kvq_routable(&qc->d, nb) / 2;
            assert_int_equal(vkh2o_run_qcache_attend(qc, qb, out, &ad, &sel), VKH2O_OK);
            uint32_t n_list = 0;
            assert_int_equal(vkh2o_buffer_download(qc->list, 0, &n_list, 4), VKH2O_OK);
            assert_int_equal(n_list, nb - kvq_routable(&qc->d, nb) + ad.budget_blocks);
        }
        (void)B;
        free(sums); free(fp16); free(want_prec); free(kd);
        tq_snap_free(&s);
        free(q); free(got); free(want); free(use);
        vkh2o_buffer_destroy(qb);
        vkh2o_buffer_destroy(out);
        tq_data_free(&data);
        vkh2o_qcache_destroy(qc);
    }
    vt_check_validation();
}

/* The planner keeps every pass inside the loop budget at the largest shapes, or refuses. */
static void test_plan_budget(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    struct { vkh2o_qcache_desc d; uint32_t blocks; vkh2o_result want; } shapes[] = {
        { { .num_heads = 64, .max_tokens = 131072 }, 8192, VKH2O_OK },
        { { .num_heads = 1, .block_size = 2, .max_tokens = 262144 }, 131072, VKH2O_OK },
        { { .num_heads = 1024, .kv_lora_rank = 1024, .qk_rope_head_dim = 1024, .block_size = 512, .max_tokens = 16384 }, 32,
          VKH2O_OK },
        { { .layout = VKH2O_LAYOUT_EXPANDED, .num_heads = 128, .block_size = 3, .max_tokens = 60000 }, 20000, VKH2O_OK },
        /* 1024 heads x 40000 positions of scores: more than one storage buffer may hold */
        { { .num_heads = 1024, .kv_lora_rank = 64, .qk_rope_head_dim = 8, .max_tokens = 40000 }, 2500,
          VKH2O_ERROR_UNSUPPORTED },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        vkh2o_qcache* qc = NULL;
        assert_int_equal(vkh2o_qcache_create(ctx, &shapes[i].d, &qc), VKH2O_OK);
        qc->blocks = shapes[i].blocks;   /* planning only reads the block count */
        uint32_t bps_list[3] = { 0, 1, 1u << 30 };
        for (int bi = 0; bi < 3; bi++) {
            vkh2o_qattn_desc ad = { .blocks_per_split = bps_list[bi] };
            kvq_attn_plan pl;
            vkh2o_result r = kvq_plan_attend(qc, &ad, &pl);
            printf("# shape %zu bps %u: %s, %u splits x %u blocks, iterations score %u softmax %u pv %u combine %u\n", i,
                   bps_list[bi], vkh2o_result_string(r), pl.splits, pl.bps, pl.iters_score, pl.iters_softmax, pl.iters_pv,
                   pl.iters_combine);
            assert_int_equal(r, shapes[i].want);
            if (r == VKH2O_OK) {
                assert_true(pl.iters_score <= KVQ_LOOP_BUDGET && pl.iters_softmax <= KVQ_LOOP_BUDGET &&
                            pl.iters_pv <= KVQ_LOOP_BUDGET && pl.iters_combine <= KVQ_LOOP_BUDGET);
                assert_true((uint64_t)pl.splits * pl.bps >= shapes[i].blocks);
                assert_true(pl.splits <= KVQ_MAX_SPLITS);
            }
        }
        qc->blocks = 0;
        vkh2o_qcache_destroy(qc);
    }
    vt_check_validation();
}

/* The workgroup permutation (kvq_wg_perm): (w * k) mod n visits every w of n exactly once, and k
 * stays where n * k fits in 32 bits. */
static void test_wg_perm(void** state)
{
    (void)state;
    uint8_t* seen = malloc(70000);
    for (uint32_t n = 1; n < 70000; n = n < 600 ? n + 1 : n * 3 / 2) {
        uint32_t k = kvq_wg_perm_multiplier(n);
        assert_true(k >= 1 && (k < n || n <= 2));
        assert_true((uint64_t)n * k < (1ull << 32));
        memset(seen, 0, n);
        for (uint32_t w = 0; w < n; w++) {
            uint32_t m = (uint32_t)(((uint64_t)w * k) % n);
            if (seen[m]++)
                fail_msg("n %u k %u: workgroups map to %u twice", n, k, m);
        }
        /* spread: the first half of the workgroups covers both halves of the work (n >= 8) */
        if (n >= 8) {
            uint32_t lo = 0;
            for (uint32_t w = 0; w < n / 2; w++)
                lo += ((uint64_t)w * k) % n < n / 2;
            assert_true(lo >= n / 8 && lo <= n / 2 - n / 8);
        }
    }
    free(seen);
}

/* The cmd_ path records into the caller's command buffer and gives the same result. */
static void test_cmd_recording(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    uint64_t seed = vt_seed("kvquant_cmd");
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    vkh2o_qcache* qc = NULL;
    assert_int_equal(vkh2o_qcache_create(ctx, &(vkh2o_qcache_desc){ .num_heads = 4, .kv_lora_rank = 32, .qk_rope_head_dim = 8,
                                                                    .max_tokens = 100 }, &qc), VKH2O_OK);
    tq_data data;
    tq_data_random(&rng, qc, 99, false, &data);
    assert_int_equal(vkh2o_run_qcache_prefill_host(qc, data.k, NULL, data.imp, 99), VKH2O_OK);
    assert_int_equal(vkh2o_run_qcache_route(qc, VKH2O_QPOLICY_BALANCED), VKH2O_OK);
    float q[4 * 40];
    vt_fill_normal(&rng, q, 4 * 40, 1.0f);
    vkh2o_buffer* qb = vt_upload_f32(q, 4 * 40);
    vkh2o_buffer* o1 = vt_buffer(4 * 32 * 4);
    vkh2o_buffer* o2 = vt_buffer(4 * 32 * 4);
    vkh2o_qattn_desc ad = { .selector = VKH2O_QSELECT_SCORE, .budget_blocks = 1 };
    assert_int_equal(vkh2o_run_qcache_attend(qc, qb, o1, &ad, NULL), VKH2O_OK);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_qcache_attend(qc, cb, qb, o2, &ad), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    float a[128], b[128];
    vt_download_f32(o1, a, 128);
    vt_download_f32(o2, b, 128);
    vt_assert_finite("run", a, 128);
    /* the same dispatches: bit-identical (deterministic combine, no atomics) */
    assert_memory_equal(a, b, sizeof a);
    vt_check_guard(o1, 4 * 32 * 4);
    vt_check_guard(o2, 4 * 32 * 4);
    vkh2o_buffer_destroy(qb);
    vkh2o_buffer_destroy(o1);
    vkh2o_buffer_destroy(o2);
    tq_data_free(&data);
    vkh2o_qcache_destroy(qc);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_cmd_recording),
        cmocka_unit_test(test_long_context),
        cmocka_unit_test(test_plan_budget),
        cmocka_unit_test(test_wg_perm),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
