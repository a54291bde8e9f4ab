/* The reference's own figures against the library's: the rotary frequencies, attention factor
 * and softmax scale of a config (ref_mla_rope_params / ref_mla_softmax_scale, from the HF
 * DeepSeek-V3 definitions, against vkh2o_mla_rope_params / vkh2o_mla_softmax_scale), so that
 * the references share no maths with what they check. CPU only. */
#include "vkh2o_test.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_and_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
