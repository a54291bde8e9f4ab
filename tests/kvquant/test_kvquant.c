/* Quantised KV cache: desc validation, policy model, packed layouts and round-trip bounds,
 * routing, byte accounting, appends, metrics. Attention is in test_kvquant_attn.c. */
#include "vkh2o_test.h"
#include "kvquant_internal.h"
#include "ref_kvquant.h"
#include "test_kvquant_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- no device needed */

static void test_desc_errors(void** state)
{
    (void)state;
    vkh2o_qcache_desc out;
    vkh2o_error err = { 0 };
    assert_int_equal(vkh2o_qcache_desc_resolve(&(vkh2o_qcache_desc){ 0 }, &out, &err), VKH2O_OK);
    assert_int_equal(out.block_size, 16);
    assert_int_equal(out.group_size, 32);
    assert_int_equal(out.k_grouping, VKH2O_QGROUP_PER_CHANNEL);
    assert_int_equal(out.v_grouping, VKH2O_QGROUP_PER_TOKEN);
    assert_int_equal(out.max_tokens, 4096);
    vkh2o_qshape s = vkh2o_qcache_shape(&out);
    assert_int_equal(s.d_k, 576);
    assert_int_equal(s.d_v, 512);
    assert_int_equal(s.kv_heads, 1);

    struct { vkh2o_qcache_desc d; const char* needle; } bad[] = {
        { { .block_size = 1 }, "block_size 1" },
        { { .block_size = 513 }, "block_size 513" },
        { { .group_size = 1 }, "group_size 1" },
        { { .group_size = 1025 }, "group_size 1025" },
        { { .block_size = 512, .group_size = 2, .k_grouping = VKH2O_QGROUP_PER_TOKEN }, "scales per block" },
        { { .kv_lora_rank = 4000 }, "exceeds" },
        { { .layout = (vkh2o_kv_layout)7 }, "layout" },
        { { .k_grouping = (vkh2o_qgrouping)9 }, "grouping" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        assert_int_equal(vkh2o_qcache_desc_resolve(&bad[i].d, &out, &err), VKH2O_ERROR_INVALID_ARGUMENT);
        assert_int_equal(err.code, VKH2O_ERROR_INVALID_ARGUMENT);
        printf("# rejected: %s\n", err.message);
        assert_non_null(strstr(err.message, bad[i].needle));
    }
}

static void test_policy_model(void** state)
{
    (void)state;
    vkh2o_qcache_desc d;
    assert_int_equal(vkh2o_qcache_desc_resolve(&(vkh2o_qcache_desc){ .max_tokens = 32768 }, &d, NULL), VKH2O_OK);
    for (int p = 0; p < VKH2O_QPOLICY_COUNT; p++) {
        float f[4];
        vkh2o_qpolicy_fractions((vkh2o_qpolicy)p, f);
        assert_float_equal(f[0] + f[1] + f[2] + f[3], 1.0f, 1e-6f);
        vkh2o_qpolicy back;
        assert_true(vkh2o_qpolicy_parse(vkh2o_qpolicy_name((vkh2o_qpolicy)p), &back));
        assert_int_equal(back, p);
        uint32_t c[4];
        vkh2o_qpolicy_counts(&d, (vkh2o_qpolicy)p, 32768, c);
        assert_int_equal(c[0] + c[1] + c[2] + c[3], 2048);
        /* sinks and recents (3 blocks) are always FP16 */
        assert_true(c[0] >= 3);
    }
    vkh2o_qpolicy bogus;
    assert_false(vkh2o_qpolicy_parse("medium", &bogus));
    uint32_t c[4];
    vkh2o_qpolicy_counts(&d, VKH2O_QPOLICY_AGGRESSIVE, 32768, c);
    assert_true(c[3] > 0);                                   /* aggressive evicts */
    vkh2o_qpolicy_counts(&d, VKH2O_QPOLICY_BALANCED, 32768, c);
    assert_int_equal(c[0], 3 + 2045 / 4);
    assert_int_equal(c[1], 2045 * 75 / 100 - 2045 / 4);
    /* bytes shrink monotonically conservative -> balanced -> aggressive */
    uint64_t prev = UINT64_MAX;
    vkh2o_qpolicy order[] = { VKH2O_QPOLICY_FP16, VKH2O_QPOLICY_CONSERVATIVE, VKH2O_QPOLICY_BALANCED, VKH2O_QPOLICY_AGGRESSIVE };
    for (int i = 0; i < 4; i++) {
        vkh2o_qpolicy_counts(&d, order[i], 32768, c);
        uint64_t b = vkh2o_qcache_bytes_model(&d, c);
        printf("# %-12s %llu bytes\n", vkh2o_qpolicy_name(order[i]), (unsigned long long)b);
        assert_true(b < prev);
        prev = b;
    }
    /* FP16 slot of the Kimi latent row: 16 tokens x 576 halves */
    assert_int_equal(vkh2o_qcache_slot_bytes(&d, VKH2O_QPREC_FP16), 16 * 576 * 2);
    /* INT4 per-channel: 16 x 576 nibbles + 576 fp16 scales */
    assert_int_equal(vkh2o_qcache_slot_bytes(&d, VKH2O_QPREC_INT4), 16 * 576 / 2 + 576 * 2);
    assert_true(vkh2o_qattn_flops(&d, 100) > 0);
}

/* ---------------------------------------------------------------- device tests */

static const tq_case roundtrip_cases[] = {
    /* latent, 48 channels: a last partial group of 16 (G 32), per-channel keys */
    { "latent d48 B16 G32", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 4, .kv_lora_rank = 40, .qk_rope_head_dim = 8,
                              .block_size = 16, .group_size = 32, .max_tokens = 256, .sink_blocks = 1, .recent_blocks = 2 }, 203 },
    /* latent, odd 45 channels, per-token G 7 (last group 3), odd block 5 */
    { "latent d45 B5 G7 per-token", { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 2, .kv_lora_rank = 37, .qk_rope_head_dim = 8,
                                      .block_size = 5, .group_size = 7, .k_grouping = VKH2O_QGROUP_PER_TOKEN,
                                      .max_tokens = 128, .sink_blocks = 2, .recent_blocks = 1 }, 97 },
    /* expanded, K 19 (per-token G 4), V 11 per channel, 3 heads */
    { "expanded K19 V11 B8 G4", { .layout = VKH2O_LAYOUT_EXPANDED, .num_heads = 3, .qk_nope_head_dim = 13, .qk_rope_head_dim = 6,
                                  .v_head_dim = 11, .block_size = 8, .group_size = 4, .k_grouping = VKH2O_QGROUP_PER_TOKEN,
                                  .v_grouping = VKH2O_QGROUP_PER_CHANNEL, .max_tokens = 100, .sink_blocks = 1, .recent_blocks = 1 }, 77 },
};

/* Every quantised section byte for byte against the CPU packing of `src` (the values the
 * cache held before routing), and every element within half a quantisation step. */
static void check_sections(const char* label, tq_snap* s, const float* ksrc, const float* vsrc, int expect_prec)
{
    vkh2o_qcache* qc = s->qc;
    uint32_t B = qc->d.block_size, kvh = qc->shape.kv_heads;
    uint32_t dk = qc->shape.d_k, dv = qc->shape.d_v;
    size_t checked = 0;
    double worst = 0;
    for (uint32_t b = 0; b < s->blocks; b++) {
        uint32_t p = s->prec[b];
        if (expect_prec >= 0 && b >= qc->d.sink_blocks && b + qc->d.recent_blocks < s->blocks)
            assert_int_equal(p, (uint32_t)expect_prec);
        if (p == REF_EVICTED)
            continue;
        for (uint32_t h = 0; h < kvh; h++) {
            for (int z = 0; z < (qc->shape.v_in_k ? 1 : 2); z++) {
                ref_kvq_geom g = tq_geom(qc, z);
                uint32_t d = z ? dv : dk;
                const float* src = z ? vsrc : ksrc;
                float* rows = calloc((size_t)B * d, sizeof(float));
                for (uint32_t t = 0; t < s->count[b]; t++)
                    memcpy(rows + (size_t)t * d, src + ((size_t)(b * B + t) * kvh + h) * d, sizeof(float) * d);
                uint32_t nw = ref_kvq_section_words(&g, (int)p);
                uint32_t* want = malloc(4ull * nw);
                ref_kvq_pack(&g, (int)p, rows, s->count[b], want);
                const uint32_t* got = tq_section(s, b, h, z);
                if (memcmp(want, got, 4ull * nw) != 0) {
                    for (uint32_t w = 0; w < nw; w++)
                        if (want[w] != got[w])
                            fail_msg("%s: block %u head %u %s (%s): word %u is 0x%08x, CPU packs 0x%08x", label, b, h,
                                     z ? "V" : "K", vkh2o_qprec_name((vkh2o_qprec)p), w, got[w], want[w]);
                }
                /* round trip bound: |x - q s| <= s/2 (FP16 sections: exact) */
                float* y = malloc(sizeof(float) * B * d);
                float* sc = malloc(sizeof(float) * B * d);
                ref_kvq_unpack(&g, (int)p, got, s->count[b], y, sc);
                for (size_t e = 0; e < (size_t)s->count[b] * d; e++) {
                    double err = fabs((double)y[e] - rows[e]);
                    double bound = p == REF_FP16 ? 0.0 : 0.5 * sc[e] * (1 + 1e-6);
                    if (!(err <= bound))
                        fail_msg("%s: block %u element %zu: |%g - %g| = %g > half step %g", label, b, e, y[e], rows[e], err, bound);
                    if (sc[e] > 0 && err / sc[e] > worst)
                        worst = err / sc[e];
                    checked++;
                }
                free(y);
                free(sc);
                free(want);
                free(rows);
            }
        }
    }
    printf("#   %s: %zu elements, byte-exact sections, worst error %.4f quantisation steps\n", label, checked, worst);
}

static void test_roundtrip(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    uint64_t seed = vt_seed("kvquant_roundtrip");
    for (size_t ci = 0; ci < sizeof roundtrip_cases / sizeof roundtrip_cases[0]; ci++) {
        const tq_case* tc = &roundtrip_cases[ci];
        printf("# case %s, %u tokens\n", tc->name, tc->tokens);
        vt_rng rng;
        vt_rng_seed(&rng, seed + ci);
        vkh2o_qcache* qc = NULL;
        assert_int_equal(vkh2o_qcache_create(ctx, &tc->d, &qc), VKH2O_OK);
        tq_data data;
        tq_data_random(&rng, qc, tc->tokens, false, &data);
        /* the layout sizes agree with the CPU's */
        for (int p = 0; p < 3; p++) {
            ref_kvq_geom gk = tq_geom(qc, 0);
            assert_int_equal(qc->sec_k.words[p], ref_kvq_section_words(&gk, p));
        }
        float* kf16 = tq_f16_copy(data.k, data.nk);
        float* vf16 = data.v ? tq_f16_copy(data.v, data.nv) : NULL;

        vkh2o_qpolicy pols[] = { VKH2O_QPOLICY_FP16, VKH2O_QPOLICY_UNIFORM_INT8, VKH2O_QPOLICY_UNIFORM_INT4 };
        int precs[] = { REF_FP16, REF_INT8, REF_INT4 };
        for (int i = 0; i < 3; i++) {
            assert_int_equal(vkh2o_run_qcache_prefill_host(qc, data.k, data.v, data.imp, tc->tokens), VKH2O_OK);
            assert_int_equal(vkh2o_run_qcache_route(qc, pols[i]), VKH2O_OK);
            tq_snap s;
            tq_snapshot(qc, &s);
            check_sections(vkh2o_qpolicy_name(pols[i]), &s, kf16, vf16, precs[i]);
            tq_snap_free(&s);
        }

        /* demotion re-quantises the current lossy values: balanced, then uniform-int4 */
        assert_int_equal(vkh2o_run_qcache_prefill_host(qc, data.k, data.v, data.imp, tc->tokens), VKH2O_OK);
        assert_int_equal(vkh2o_run_qcache_route(qc, VKH2O_QPOLICY_BALANCED), VKH2O_OK);
        tq_snap s1;
        tq_snapshot(qc, &s1);
        float* kcur = calloc(data.nk, sizeof(float));
        float* vcur = data.v ? calloc(data.nv, sizeof(float)) : NULL;
        tq_dequant_all(&s1, kcur, vcur);
        assert_int_equal(vkh2o_run_qcache_route(qc, VKH2O_QPOLICY_UNIFORM_INT4), VKH2O_OK);
        tq_snap s2;
        tq_snapshot(qc, &s2);
        check_sections("balanced -> uniform-int4", &s2, kcur, vcur, REF_INT4);
        /* never promoted back: routing FP16 keeps every block's precision and bytes */
        assert_int_equal(vkh2o_run_qcache_route(qc, VKH2O_QPOLICY_FP16), VKH2O_OK);
        tq_snap s3;
        tq_snapshot(qc, &s3);
        for (uint32_t b = 0; b < s3.blocks; b++)
            assert_int_equal(s3.prec[b], s2.prec[b]);
        check_sections("int4 -> fp16 (no promotion)", &s3, kcur, vcur, REF_INT4);
        tq_snap_free(&s1);
        tq_snap_free(&s2);
        tq_snap_free(&s3);
        free(kcur);
        free(vcur);
        free(kf16);
        free(vf16);
        tq_data_free(&data);
        vkh2o_qcache_destroy(qc);
    }
    vt_check_validation();
}

/* Routing against the CPU (exact, dyadic importance), monotonic in importance, sinks and
 * recents untouched, counts = the policy model, bytes counted = bytes allocated = formula. */
static void test_routing_and_bytes(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    uint64_t seed = vt_seed("kvquant_routing");
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    const vkh2o_qcache_desc descs[] = {
        { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 4, .kv_lora_rank = 24, .qk_rope_head_dim = 8, .block_size = 16,
          .max_tokens = 800, .sink_blocks = 2, .recent_blocks = 3, .flags = VKH2O_QCACHE_QUEST_BOUNDS },
        { .layout = VKH2O_LAYOUT_EXPANDED, .num_heads = 2, .qk_nope_head_dim = 8, .qk_rope_head_dim = 4, .v_head_dim = 6,
          .block_size = 4, .group_size = 5, .max_tokens = 300, .sink_blocks = 1, .recent_blocks = 1 },
    };
    const uint32_t tokens[] = { 16 * 40 + 5, 4 * 57 + 3 };
    for (int di = 0; di < 2; di++) {
        vkh2o_qcache* qc = NULL;
        assert_int_equal(vkh2o_qcache_create(ctx, &descs[di], &qc), VKH2O_OK);
        tq_data data;
        tq_data_random(&rng, qc, tokens[di], true, &data);
        uint32_t nb = vkh2o_div_up(tokens[di], qc->d.block_size);
        for (int p = 0; p < VKH2O_QPOLICY_COUNT; p++) {
            assert_int_equal(vkh2o_run_qcache_prefill_host(qc, data.k, data.v, data.imp, tokens[di]), VKH2O_OK);
            assert_int_equal(vkh2o_run_qcache_route(qc, (vkh2o_qpolicy)p), VKH2O_OK);
            uint32_t* prec = calloc(nb, 4);
            float* sums = calloc(nb, sizeof(float));
            float* maxs = calloc(nb, sizeof(float));
            uint32_t* first = calloc(nb, 4);
            uint32_t* count = calloc(nb, 4);
            assert_int_equal(vkh2o_qcache_read_blocks(qc, prec, NULL, first, count, sums, maxs), VKH2O_OK);
            /* block sums/maxima: exact (dyadic importance) */
            float* want_sum = calloc(nb, sizeof(float));
            for (uint32_t b = 0; b < nb; b++) {
                double s = 0, m = -1;
                for (uint32_t t = b * qc->d.block_size; t < tokens[di] && t < (b + 1) * qc->d.block_size; t++) {
                    s += data.imp[t];
                    m = data.imp[t] > m ? data.imp[t] : m;
                }
                want_sum[b] = (float)s;
                assert_float_equal(sums[b], s, 0.0);
                assert_float_equal(maxs[b], m, 0.0);
                assert_int_equal(first[b], b * qc->d.block_size);
                assert_int_equal(count[b], (b + 1 < nb) ? qc->d.block_size : tokens[di] - b * qc->d.block_size);
            }
            uint32_t th[3], *old = calloc(nb, 4), *want = calloc(nb, 4);
            assert_int_equal(vkh2o_qcache_routable_blocks(&qc->d, nb), kvq_routable(&qc->d, nb));
            assert_int_equal(vkh2o_qcache_routable_blocks(&qc->d, nb),
                             nb > qc->d.sink_blocks + qc->d.recent_blocks ? nb - qc->d.sink_blocks - qc->d.recent_blocks : 0);
            kvq_policy_thresholds((vkh2o_qpolicy)p, kvq_routable(&qc->d, nb), th);
            ref_kvq_route(nb, want_sum, old, qc->d.sink_blocks, qc->d.recent_blocks, th, want);
            for (uint32_t b = 0; b < nb; b++)
                if (prec[b] != want[b])
                    fail_msg("%s: block %u routed %s, CPU %s", vkh2o_qpolicy_name((vkh2o_qpolicy)p), b,
                             vkh2o_qprec_name((vkh2o_qprec)prec[b]), vkh2o_qprec_name((vkh2o_qprec)want[b]));
            /* monotonic: more important never gets a lower precision; sinks/recents FP16 */
            for (uint32_t a = 0; a < nb; a++) {
                bool ra = a >= qc->d.sink_blocks && a + qc->d.recent_blocks < nb;
                if (!ra) {
                    assert_int_equal(prec[a], VKH2O_QPREC_FP16);
                    continue;
                }
                for (uint32_t b = 0; b < nb; b++) {
                    bool rb = b >= qc->d.sink_blocks && b + qc->d.recent_blocks < nb;
                    if (rb && sums[a] > sums[b])
                        assert_true(prec[a] <= prec[b]);
                }
            }
            uint32_t model[4];
            vkh2o_qpolicy_counts(&qc->d, (vkh2o_qpolicy)p, tokens[di], model);
            vkh2o_qcache_stats st;
            vkh2o_qcache_get_stats(qc, &st);
            for (int i = 0; i < 4; i++)
                assert_int_equal(st.blocks_by_prec[i], model[i]);
            uint64_t sum_sizes = vkh2o_buffer_get_size(qc->meta) + vkh2o_buffer_get_size(qc->imp) + vkh2o_buffer_get_size(qc->minmax) +
                                 vkh2o_buffer_get_size(qc->pool[0]) + vkh2o_buffer_get_size(qc->pool[1]) + vkh2o_buffer_get_size(qc->pool[2]);
            uint64_t formula = vkh2o_qcache_bytes_model(&qc->d, model);
            printf("# %s %-12s fp16/int8/int4/evicted %u/%u/%u/%u  bytes allocated %llu, formula %llu\n",
                   di ? "expanded" : "latent", vkh2o_qpolicy_name((vkh2o_qpolicy)p), model[0], model[1], model[2], model[3],
                   (unsigned long long)st.allocated_bytes, (unsigned long long)formula);
            assert_int_equal(st.allocated_bytes, sum_sizes);
            assert_int_equal(st.allocated_bytes, formula);
            free(prec); free(sums); free(maxs); free(first); free(count); free(want_sum); free(old); free(want);
        }
        tq_data_free(&data);
        vkh2o_qcache_destroy(qc);
    }
    vt_check_validation();
}

/* Decode appends (crossing blocks, growing the FP16 pool), importance updates, re-routing from
 * lossy blocks (never promoted), and the GPU error metrics against the CPU. */
static void test_append_reroute_metrics(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    uint64_t seed = vt_seed("kvquant_append");
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    const vkh2o_qcache_desc descs[] = {
        { .layout = VKH2O_LAYOUT_LATENT, .num_heads = 2, .kv_lora_rank = 33, .qk_rope_head_dim = 6, .block_size = 8,
          .group_size = 16, .max_tokens = 200, .headroom_blocks = 1 },
        { .layout = VKH2O_LAYOUT_EXPANDED, .num_heads = 2, .qk_nope_head_dim = 7, .qk_rope_head_dim = 4, .v_head_dim = 9,
          .block_size = 6, .group_size = 4, .max_tokens = 150, .headroom_blocks = 1 },
    };
    for (int di = 0; di < 2; di++) {
        vkh2o_qcache* qc = NULL;
        assert_int_equal(vkh2o_qcache_create(ctx, &descs[di], &qc), VKH2O_OK);
        uint32_t total = di ? 140 : 190, t0 = di ? 41 : 37;
        tq_data data;
        tq_data_random(&rng, qc, total, true, &data);
        uint32_t kvh = qc->shape.kv_heads, dk = qc->shape.d_k, dv = qc->shape.d_v;
        assert_int_equal(vkh2o_run_qcache_prefill_host(qc, data.k, data.v, data.imp, t0), VKH2O_OK);
        assert_int_equal(vkh2o_run_qcache_route(qc, VKH2O_QPOLICY_BALANCED), VKH2O_OK);
        tq_snap s0;
        tq_snapshot(qc, &s0);
        float* kcur = calloc(data.nk, sizeof(float));
        float* vcur = data.v ? calloc(data.nv, sizeof(float)) : NULL;
        tq_dequant_all(&s0, kcur, vcur);
        tq_snap_free(&s0);
        /* one token at a time, then a chunk */
        uint32_t n = t0;
        while (n < total) {
            uint32_t step = n < t0 + 20 ? 1 : total - n;
            assert_int_equal(vkh2o_run_qcache_append_host(qc, data.k + (size_t)n * kvh * dk, data.v ? data.v + (size_t)n * kvh * dv : NULL,
                                                      data.imp + n, step), VKH2O_OK);
            n += step;
        }
        assert_int_equal(vkh2o_run_qcache_append_host(qc, data.k, data.v, data.imp, qc->d.max_tokens - total + 1), VKH2O_ERROR_BUDGET);
        for (size_t i = (size_t)t0 * kvh * dk; i < data.nk; i++)
            kcur[i] = ref_kvq_f16(data.k[i]);
        for (size_t i = (size_t)t0 * kvh * dv; vcur && i < data.nv; i++)
            vcur[i] = ref_kvq_f16(data.v[i]);
        tq_snap s1;
        tq_snapshot(qc, &s1);
        assert_int_equal(s1.blocks, vkh2o_div_up(total, qc->d.block_size));
        check_sections("after appends", &s1, kcur, vcur, -1);

        /* importance: add mass to a range, then re-route; compare with the CPU from the old precisions */
        uint32_t first = 5, cnt = total - 30;
        float* mass = malloc(sizeof(float) * cnt);
        for (uint32_t i = 0; i < cnt; i++) {
            mass[i] = (float)vt_u32_below(&rng, 4096) / 256.0f;
            data.imp[first + i] += mass[i];
        }
        vkh2o_buffer* mb = NULL;
        assert_int_equal(vkh2o_buffer_create(ctx, 4ull * cnt, &mb), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(mb, 0, mass, 4ull * cnt), VKH2O_OK);
        assert_int_equal(vkh2o_run_qcache_add_importance(qc, mb, 0, first, cnt), VKH2O_OK);
        assert_int_equal(vkh2o_run_qcache_add_importance(qc, mb, 0, total - 2, cnt), VKH2O_ERROR_INVALID_ARGUMENT);
        uint32_t nb = s1.blocks, th[3];
        float* sums = calloc(nb, sizeof(float));
        assert_int_equal(vkh2o_qcache_read_blocks(qc, NULL, NULL, NULL, NULL, sums, NULL), VKH2O_OK);
        for (uint32_t b = 0; b < nb; b++) {
            double s = 0;
            for (uint32_t t = b * qc->d.block_size; t < total && t < (b + 1) * qc->d.block_size; t++)
                s += data.imp[t];
            assert_float_equal(sums[b], s, 0.0);
        }
        uint32_t* want = calloc(nb, 4);
        kvq_policy_thresholds(VKH2O_QPOLICY_AGGRESSIVE, kvq_routable(&qc->d, nb), th);
        ref_kvq_route(nb, sums, s1.prec, qc->d.sink_blocks, qc->d.recent_blocks, th, want);
        tq_dequant_all(&s1, kcur, vcur);
        assert_int_equal(vkh2o_run_qcache_route(qc, VKH2O_QPOLICY_AGGRESSIVE), VKH2O_OK);
        tq_snap s2;
        tq_snapshot(qc, &s2);
        for (uint32_t b = 0; b < nb; b++) {
            assert_int_equal(s2.prec[b], want[b]);
            assert_true(s2.prec[b] >= s1.prec[b]);
        }
        check_sections("re-routed aggressive", &s2, kcur, vcur, -1);

        /* GPU metrics against the CPU over the non-evicted tokens, reference = the fp32 input */
        vkh2o_buffer* kref = vt_upload_f32(data.k, data.nk);
        vkh2o_buffer* vref = data.v ? vt_upload_f32(data.v, data.nv) : NULL;
        vkh2o_qmetrics km, vm;
        assert_int_equal(vkh2o_run_qcache_metrics(qc, kref, vref, &km, &vm), VKH2O_OK);
        float* kd = calloc(data.nk, sizeof(float));
        float* vd = data.v ? calloc(data.nv, sizeof(float)) : NULL;
        tq_dequant_all(&s2, kd, vd);
        for (int z = 0; z < 2; z++) {
            /* gather the non-evicted elements */
            uint32_t d = z ? dv : dk, rowd = (z && !vd) ? dk : d;
            const float* got_all = (z && vd) ? vd : kd;
            const float* ref_all = (z && data.v) ? data.v : data.k;
            float* g = malloc(sizeof(float) * (size_t)total * kvh * d);
            float* r = malloc(sizeof(float) * (size_t)total * kvh * d);
            size_t m = 0;
            for (uint32_t t = 0; t < total; t++) {
                if (s2.prec[t / qc->d.block_size] == REF_EVICTED)
                    continue;
                for (uint32_t h = 0; h < kvh; h++)
                    for (uint32_t c = 0; c < d; c++, m++) {
                        g[m] = got_all[((size_t)t * kvh + h) * rowd + c];
                        r[m] = ref_all[((size_t)t * kvh + h) * rowd + c];
                    }
            }
            double mse, mx, cs;
            ref_kvq_metrics(g, r, m, &mse, &mx, &cs);
            const vkh2o_qmetrics* gm = z ? &vm : &km;
            printf("#   %s metrics GPU mse %.6g max %.6g cos %.8f | CPU %.6g %.6g %.8f (%zu elements)\n", z ? "V" : "K", gm->mse,
                   gm->max_abs, gm->cosine, mse, mx, cs, m);
            assert_int_equal(gm->count, m);
            /* float partial sums on the GPU vs double here */
            assert_true(fabs(gm->mse - mse) <= 1e-4 * mse + 1e-12);
            assert_true(fabs(gm->max_abs - mx) <= 1e-6 * mx);
            assert_true(fabs(gm->cosine - cs) <= 1e-5);
            free(g);
            free(r);
        }
        free(kd); free(vd);
        vkh2o_buffer_destroy(kref);
        vkh2o_buffer_destroy(vref);
        tq_snap_free(&s1);
        tq_snap_free(&s2);
        vkh2o_buffer_destroy(mb);
        free(mass); free(sums); free(want); free(kcur); free(vcur);
        tq_data_free(&data);
        vkh2o_qcache_destroy(qc);
    }
    vt_check_validation();
}

static void test_create_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_qcache* qc = (vkh2o_qcache*)1;
    assert_int_equal(vkh2o_qcache_create(ctx, &(vkh2o_qcache_desc){ .block_size = 1 }, &qc), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(qc);
    assert_non_null(strstr(vkh2o_last_error(ctx), "block_size"));
    assert_int_equal(vkh2o_qcache_create(ctx, &(vkh2o_qcache_desc){ .group_size = 4096 }, &qc), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "group_size"));
    assert_int_equal(vkh2o_qcache_create(ctx, &(vkh2o_qcache_desc){ .max_tokens = 64, .kv_lora_rank = 8, .qk_rope_head_dim = 4 }, &qc),
                     VKH2O_OK);
    float k[12 * 65] = { 0 }, imp[65] = { 0 };
    assert_int_equal(vkh2o_run_qcache_prefill_host(qc, k, NULL, imp, 65), VKH2O_ERROR_BUDGET);
    assert_int_equal(vkh2o_run_qcache_prefill_host(qc, k, NULL, imp, 0), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_qcache_route(qc, (vkh2o_qpolicy)42), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer* small = vt_buffer(16);
    assert_int_equal(vkh2o_run_qcache_prefill(qc, &(vkh2o_qcache_rows){ .k = small, .importance = small, .n = 10 }),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_qcache_prefill_host(qc, k, NULL, imp, 20), VKH2O_OK);
    vkh2o_buffer* q = vt_buffer(4 * 64 * 12);
    vkh2o_buffer* out = vt_buffer(4 * 64 * 8);
    /* quest needs the bounds flag */
    assert_int_equal(vkh2o_run_qcache_attend(qc, q, out, &(vkh2o_qattn_desc){ .selector = VKH2O_QSELECT_QUEST, .budget_blocks = 1 }, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_qcache_attend(qc, small, out, &(vkh2o_qattn_desc){ 0 }, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer_destroy(small);
    vkh2o_buffer_destroy(q);
    vkh2o_buffer_destroy(out);
    vkh2o_qcache_destroy(qc);
    vkh2o_qcache_destroy(NULL);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_desc_errors),
        cmocka_unit_test(test_policy_model),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_routing_and_bytes),
        cmocka_unit_test(test_append_reroute_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
