/* The reference's own figures against the library's: the rotary frequencies, attention factor
 * and softmax scale of a config (ref_mla_rope_params / ref_mla_softmax_scale, from the HF
 * DeepSeek-V3 definitions, against vkh2o_mla_rope_params / vkh2o_mla_softmax_scale), and the
 * KV cache's plan (ref_kvc_plan_of, from include/vkh2o/kvcache.h, against
 * vkh2o_kvcache_desc_resolve's plan), so that the references share no maths with what they check.
 * CPU only. */
#include "vkh2o_test.h"

#include "ref_kvcache.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The library returns floats; the reference's doubles rounded to float can differ from them by
 * one rounding (2^-24 relative) and the double paths by a few ulps of a double: 2^-23 relative. */
#define FIG_TOL (1.0 / 8388608.0)

static void assert_close(const char* what, const char* cfg, double lib, double ref)
{
    const double err = fabs(lib - ref) / fmax(fabs(ref), 1e-300);
    if (!(err <= FIG_TOL))
        fail_msg("%s: %s library %.17g reference %.17g (relative %.3g > %.3g)", cfg, what, lib, ref, err, FIG_TOL);
}

static void check_rope(const char* name, const vkh2o_mla_config* c)
{
    const uint32_t pairs = c->qk_rope_head_dim / 2;
    float inv[2048], af = -1.0f;
    double rinv[2048], raf = -1.0;
    assert_true(pairs <= 2048);
    vkh2o_mla_rope_params(c, inv, &af);
    ref_mla_rope_params(c, rinv, &raf);
    for (uint32_t i = 0; i < pairs; i++) {
        char what[64];
        snprintf(what, sizeof what, "inv_freq[%u]", i);
        assert_close(what, name, inv[i], rinv[i]);
    }
    assert_close("attention factor", name, af, raf);
    assert_close("softmax scale", name, vkh2o_mla_softmax_scale(c), ref_mla_softmax_scale(c));
    printf("# %-34s scale %.9f  factor %.9f  inv_freq[%u] %.6g\n", name, ref_mla_softmax_scale(c), raf,
           pairs - 1, rinv[pairs - 1]);
}

static void test_rope_and_scale(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    vkh2o_error e = { 0 };
    /* Kimi K2.6 layer 0 and every preset */
    vkh2o_mla_config_kimi_k26(&c);
    check_rope("kimi-k2.6 layer 0", &c);
    for (uint32_t i = 0; vkh2o_mla_config_preset_name(i); i++) {
        assert_int_equal(vkh2o_mla_config_preset(vkh2o_mla_config_preset_name(i), &c, &e), VKH2O_OK);
        check_rope(vkh2o_mla_config_preset_name(i), &c);
    }
    /* the mscale cases HF tells apart: both set, one of them 0, the factor at 1 */
    static const struct { const char* name; float mscale, all_dim, factor, beta_fast, beta_slow; } yarn[] = {
        { "yarn mscale 0.707 / all_dim 1", 0.707f, 1.0f, 40.0f, 32.0f, 1.0f },
        { "yarn mscale 1 / all_dim 0", 1.0f, 0.0f, 32.0f, 32.0f, 1.0f },
        { "yarn mscale 0 / all_dim 0.707", 0.0f, 0.707f, 32.0f, 32.0f, 1.0f },
        { "yarn factor 1", 1.0f, 1.0f, 1.0f, 32.0f, 1.0f },
        { "yarn low == high (0)", 1.0f, 1.0f, 8.0f, 700.0f, 700.0f },   /* both dims in (-1, 0] */
    };
    for (size_t i = 0; i < sizeof yarn / sizeof yarn[0]; i++) {
        vkh2o_mla_config_kimi_k26(&c);
        c.mscale = yarn[i].mscale;
        c.mscale_all_dim = yarn[i].all_dim;
        c.yarn_factor = yarn[i].factor;
        c.beta_fast = yarn[i].beta_fast;
        c.beta_slow = yarn[i].beta_slow;
        assert_int_equal(vkh2o_mla_config_validate(&c, &e), VKH2O_OK);
        check_rope(yarn[i].name, &c);
    }
    /* no rope scaling: the plain frequencies, factor 1, the plain scale */
    vkh2o_mla_config_kimi_k26(&c);
    c.rope_scaling = VKH2O_ROPE_NONE;
    c.rope_theta = 10000.0f;
    check_rope("kimi-k2.6 without rope scaling", &c);
    /* the committed small model (no rope_scaling in its config.json) */
    char path[1200];
    const char* src = getenv("VKH2O_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/tiny-mla/config.json", src && *src ? src : ".");
    vkh2o_mla_config_kimi_k26(&c);
    assert_int_equal(vkh2o_mla_config_from_json(path, &c, &e), VKH2O_OK);
    assert_int_equal(c.rope_scaling, VKH2O_ROPE_NONE);
    check_rope("models/tiny-mla", &c);
    /* the tests' small layer */
    c = vt_small_mla_config(40, 24, 20);
    check_rope("vt_small_mla_config", &c);
}

/* ---- the cache's plan ---- */

static uint32_t g_planned, g_refused;

static void check_plan(const char* what, const vkh2o_kvcache_desc* given)
{
    vkh2o_kvcache_desc r;
    vkh2o_kvcache_plan pl;
    if (vkh2o_kvcache_desc_resolve(given, &r, &pl, NULL) != VKH2O_OK) {
        g_refused++;
        return;
    }
    g_planned++;
    const ref_kvc_plan rp = ref_kvc_plan_of(&r);
    bool same = pl.selects == rp.selects && pl.by_bytes == rp.by_bytes && pl.budget_bytes == rp.budget &&
                pl.kept_tokens == rp.kept_tokens;
    for (int k = 0; k < 4; k++)
        same = same && pl.token_bytes[k] == rp.token_bytes[k] && pl.slots[k] == rp.slots[k];
    uint32_t m[4], rm[4];
    const uint32_t n = r.max_tokens / 2 + 1;
    vkh2o_kvcache_plan_counts(&r, &pl, n, m);
    ref_kvc_plan_counts(&r, &rp, n, rm);
    same = same && !memcmp(m, rm, sizeof m);
    if (!same)
        fail_msg("%s (layout %d, storage %d, precision %d, capacity %u tokens / %llu bytes, sink %u recent %u, max %u, "
                 "tier_tokens %u %u %u %u, mask 0x%x, groups %u %u %u):\n"
                 "  library   slots %u %u %u %u  token_bytes %u %u %u %u  kept %u  selects %d by_bytes %d budget %llu  "
                 "prefill(%u) %u %u %u %u\n"
                 "  reference slots %u %u %u %u  token_bytes %u %u %u %u  kept %u  selects %d by_bytes %d budget %llu  "
                 "prefill(%u) %u %u %u %u",
                 what, (int)r.layout, (int)r.storage, (int)r.precision, r.capacity_tokens,
                 (unsigned long long)r.capacity_bytes, r.n_sink, r.n_recent, r.max_tokens, r.tier_tokens[0],
                 r.tier_tokens[1], r.tier_tokens[2], r.tier_tokens[3], r.tier_mask, r.group_size[1], r.group_size[2],
                 r.group_size[3], pl.slots[0], pl.slots[1], pl.slots[2], pl.slots[3], pl.token_bytes[0],
                 pl.token_bytes[1], pl.token_bytes[2], pl.token_bytes[3], pl.kept_tokens, pl.selects, pl.by_bytes,
                 (unsigned long long)pl.budget_bytes, n, m[0], m[1], m[2], m[3], rp.slots[0], rp.slots[1],
                 rp.slots[2], rp.slots[3], rp.token_bytes[0], rp.token_bytes[1], rp.token_bytes[2], rp.token_bytes[3],
                 rp.kept_tokens, rp.selects, rp.by_bytes, (unsigned long long)rp.budget, n, rm[0], rm[1], rm[2], rm[3]);
}

static void test_plan(void** state)
{
    (void)state;
    /* shapes: Kimi K2.6's, and small odd ones, in both layouts */
    static const struct { const char* name; uint32_t heads, kvl, rope, nope, v; vkh2o_kv_layout layout; } shapes[] = {
        { "kimi latent", 64, 512, 64, 128, 128, VKH2O_LAYOUT_LATENT },
        { "kimi expanded", 64, 512, 64, 128, 128, VKH2O_LAYOUT_EXPANDED },
        { "small latent", 3, 20, 8, 16, 12, VKH2O_LAYOUT_LATENT },
        { "small expanded", 3, 20, 8, 16, 12, VKH2O_LAYOUT_EXPANDED },
        { "odd expanded", 5, 0, 6, 7, 9, VKH2O_LAYOUT_EXPANDED },
        { "tiny-mla latent", 4, 64, 16, 32, 32, VKH2O_LAYOUT_LATENT },
    };
    static const vkh2o_kv_precision precisions[] = { VKH2O_PRECISION_FP16, VKH2O_PRECISION_INT8, VKH2O_PRECISION_INT4,
                                                     VKH2O_PRECISION_INT2, VKH2O_PRECISION_TIERED };
    static const uint32_t tier_tokens[][4] = { { 0, 0, 0, 0 }, { 8, 16, 0, 0 }, { 0, 4, 4, 0 }, { 4, 8, 8, 8 },
                                               { 2, 0, 6, 0 }, { 3, 0, 0, 0 } };
    static const uint32_t masks[] = { 0, 0x3, 0x5, 0x9, 0xf };
    static const uint32_t max_tokens[] = { 64, 1000, 4096 };
    static const uint32_t sink_recent[][2] = { { 0, 0 }, { 4, 8 }, { 1, 30 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int storage = 0; storage < 2; storage++)
            for (size_t p = 0; p < sizeof precisions / sizeof precisions[0]; p++)
                for (size_t mt = 0; mt < sizeof max_tokens / sizeof max_tokens[0]; mt++)
                    for (size_t sr = 0; sr < sizeof sink_recent / sizeof sink_recent[0]; sr++)
                        for (int groups = 0; groups < 3; groups++) {
                            vkh2o_kvcache_desc d = { .num_layers = 2, .num_heads = shapes[s].heads,
                                                     .kv_lora_rank = shapes[s].kvl, .qk_rope_head_dim = shapes[s].rope,
                                                     .qk_nope_head_dim = shapes[s].nope, .v_head_dim = shapes[s].v,
                                                     .layout = shapes[s].layout, .max_tokens = max_tokens[mt],
                                                     .n_sink = sink_recent[sr][0], .n_recent = sink_recent[sr][1],
                                                     .precision = precisions[p],
                                                     .storage = storage ? VKH2O_DTYPE_F32 : VKH2O_DTYPE_F16 };
                            if (groups == 1)   /* small groups, INT8 at 4, INT4 at 6, INT2 at 2 */
                                d.group_size[1] = 4, d.group_size[2] = 6, d.group_size[3] = 2;
                            if (groups == 2) {  /* the whole row, one group */
                                vkh2o_kvcache_desc r;
                                vkh2o_kvcache_desc tmp = d;
                                tmp.precision = VKH2O_PRECISION_FP16;
                                if (vkh2o_kvcache_desc_resolve(&tmp, &r, NULL, NULL) == VKH2O_OK)
                                    d.group_size[1] = d.group_size[2] = d.group_size[3] = vkh2o_kvcache_row_numbers(&r);
                            }
                            const uint32_t tb0 = 4 * (shapes[s].layout == VKH2O_LAYOUT_EXPANDED
                                                          ? shapes[s].heads * (shapes[s].nope + shapes[s].rope + shapes[s].v)
                                                          : shapes[s].kvl + shapes[s].rope);
                            const uint32_t caps[] = { 0, 16, 40, max_tokens[mt] / 2, max_tokens[mt] };
                            for (size_t ct = 0; ct < sizeof caps / sizeof caps[0]; ct++) {
                                for (size_t tt = 0; tt < sizeof tier_tokens / sizeof tier_tokens[0]; tt++) {
                                    if (tt && precisions[p] != VKH2O_PRECISION_TIERED)
                                        break;
                                    vkh2o_kvcache_desc x = d;
                                    memcpy(x.tier_tokens, tier_tokens[tt], sizeof x.tier_tokens);
                                    x.capacity_tokens = caps[ct];
                                    check_plan(shapes[s].name, &x);
                                    /* the same capacity in bytes (about caps FP16-sized tokens),
                                     * and for TIERED without tier_tokens, tiers by bytes over masks */
                                    x.capacity_tokens = 0;
                                    x.capacity_bytes = (uint64_t)caps[ct] * tb0 + 100;
                                    if (!caps[ct])
                                        continue;
                                    if (precisions[p] == VKH2O_PRECISION_TIERED && !tt) {
                                        for (size_t mk = 0; mk < sizeof masks / sizeof masks[0]; mk++) {
                                            x.tier_mask = masks[mk];
                                            check_plan(shapes[s].name, &x);
                                        }
                                    } else {
                                        check_plan(shapes[s].name, &x);
                                    }
                                }
                            }
                        }
    printf("# %u descs planned alike by the library and the reference (%u refused by resolve, skipped)\n", g_planned,
           g_refused);
    assert_true(g_planned > 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_and_scale),
        cmocka_unit_test(test_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
