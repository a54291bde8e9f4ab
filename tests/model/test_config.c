/* MLA config: Kimi K2.6 defaults, HF config.json parsing (both rope spellings, text_config
 * nesting, q_lora_rank null, wrong types), validation, softmax scale, YaRN RoPE frequencies
 * (checked against values worked out here from the formulas with double math) and the layer
 * parameter count. CPU only. */
#include "vkh2o_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_path[1200];

static int group_setup(void** state)
{
    (void)state;
    if (!vt_scratch_make("test_config"))
        return -1;
    snprintf(g_path, sizeof g_path, "%s", vt_scratch_path("config.json"));
    return 0;
}

static int group_teardown(void** state)
{
    return vt_scratch_teardown(state);
}

static const char* write_json(const char* text)
{
    FILE* f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return g_path;
}

static void assert_msg_has(const vkh2o_error* e, const char* s)
{
    if (!strstr(e->message, s))
        fail_msg("error message \"%s\" does not contain \"%s\"", e->message, s);
}

static void assert_rel(double got, double want, double tol)
{
    double d = fabs(got - want) / fmax(fabs(want), 1e-300);
    if (!(d <= tol))
        fail_msg("got %.9g, want %.9g (rel err %.3g > %.3g)", got, want, d, tol);
}

/* The real Kimi K2 config.json text-model keys (DeepseekV3 spelling). */
#define KIMI_SHAPE_KEYS                                                                             \
    "\"hidden_size\": 7168, \"num_attention_heads\": 64, \"num_key_value_heads\": 64,"              \
    "\"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128,"                      \
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_hidden_layers\": 61,"                     \
    "\"attention_bias\": false, \"max_position_embeddings\": 262144,"                               \
    "\"vocab_size\": 163840, \"model_type\": \"kimi_k2\""
#define KIMI_TEXT_KEYS KIMI_SHAPE_KEYS ", \"rms_norm_eps\": 1e-06"
#define KIMI_ROPE                                                                                   \
    "{\"beta_fast\": 1.0, \"beta_slow\": 1.0, \"factor\": 32.0, \"mscale\": 1.0,"                   \
    " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}"

static void assert_cfg_equal(const vkh2o_mla_config* a, const vkh2o_mla_config* b)
{
    assert_int_equal(a->num_layers, b->num_layers);
    assert_int_equal(a->hidden_size, b->hidden_size);
    assert_int_equal(a->num_heads, b->num_heads);
    assert_int_equal(a->q_lora_rank, b->q_lora_rank);
    assert_int_equal(a->kv_lora_rank, b->kv_lora_rank);
    assert_int_equal(a->qk_nope_head_dim, b->qk_nope_head_dim);
    assert_int_equal(a->qk_rope_head_dim, b->qk_rope_head_dim);
    assert_int_equal(a->v_head_dim, b->v_head_dim);
    assert_true(a->rope_theta == b->rope_theta);
    assert_int_equal(a->rope_scaling, b->rope_scaling);
    assert_true(a->yarn_factor == b->yarn_factor);
    assert_int_equal(a->original_max_position_embeddings, b->original_max_position_embeddings);
    assert_true(a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow);
    assert_true(a->mscale == b->mscale && a->mscale_all_dim == b->mscale_all_dim);
    assert_int_equal(a->rope_interleave, b->rope_interleave);
    assert_true(a->rms_norm_eps == b->rms_norm_eps);
    assert_int_equal(a->attention_bias, b->attention_bias);
}

static void test_kimi_defaults(void** state)
{
    (void)state;
    vkh2o_mla_config c, p;
    vkh2o_mla_config_kimi_k26(&c);
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_mla_config_validate(&c, &e), VKH2O_OK);
    assert_int_equal(c.hidden_size, 7168);
    assert_int_equal(c.num_heads, 64);
    assert_int_equal(c.q_lora_rank, 1536);
    assert_int_equal(c.kv_lora_rank, 512);
    assert_int_equal(vkh2o_mla_qk_head_dim(&c), 192);
    assert_int_equal(c.v_head_dim, 128);
    assert_int_equal(c.num_layers, 61);
    /* Kimi K2.6's published text_config */
    assert_true(c.rope_theta == 50000.0f);
    assert_int_equal(c.rope_scaling, VKH2O_ROPE_YARN);
    assert_true(c.yarn_factor == 64.0f);
    assert_true(c.beta_fast == 32.0f && c.beta_slow == 1.0f);
    assert_true(c.mscale == 1.0f && c.mscale_all_dim == 1.0f);
    assert_int_equal(c.original_max_position_embeddings, 4096);
    assert_true(c.rope_interleave);
    assert_false(c.attention_bias);
    assert_true(c.rms_norm_eps == 1e-5f);
    /* the default is preset 0 */
    assert_string_equal(vkh2o_mla_config_preset_name(0), "kimi-k2.6");
    assert_int_equal(vkh2o_mla_config_preset("kimi-k2.6", &p, &e), VKH2O_OK);
    assert_memory_equal(&c, &p, sizeof c);
}

/* Worked out here in double from the HF formulas (modeling_deepseek_v3 / rope_utils), not from
 * the library: get_mscale, find_correction_range (truncate), the linear ramp. */
static double ref_mscale(double f, double m) { return f <= 1.0 ? 1.0 : 0.1 * m * log(f) + 1.0; }

static void ref_range(double dim, double theta, double omp, double bf, double bs, double* lo, double* hi)
{
    *lo = fmax(floor(dim * log(omp / (bf * 2.0 * M_PI)) / (2.0 * log(theta))), 0.0);
    *hi = fmin(ceil(dim * log(omp / (bs * 2.0 * M_PI)) / (2.0 * log(theta))), dim - 1.0);
}

static void test_presets(void** state)
{
    (void)state;
    /* name, heads, theta, factor, beta_fast, beta_slow, eps; correction range worked out by
     * hand: 64 ln(4096 / (2 pi b)) / (2 ln theta) = 8.91 (b 32) and 19.16 (b 1) for theta 5e4,
     * 10.47 and 22.51 for theta 1e4 */
    static const struct {
        const char* name;
        uint32_t heads;
        double theta, factor, bf, bs, eps;
        uint32_t lo, hi;
    } want[] = {
        { "kimi-k2.6", 64, 50000, 64, 32, 1, 1e-5, 8, 20 },
        { "kimi-k2-instruct", 64, 50000, 32, 1, 1, 1e-6, 19, 20 },
        { "kimi-k2-thinking", 64, 50000, 64, 1, 1, 1e-6, 19, 20 },
        { "deepseek-v3", 128, 10000, 40, 32, 1, 1e-6, 10, 23 },
    };
    const size_t n = sizeof want / sizeof want[0];
    assert_null(vkh2o_mla_config_preset_name((uint32_t)n));
    double scale[4];
    for (size_t i = 0; i < n; i++) {
        vkh2o_mla_config c;
        vkh2o_error e = { 0 };
        assert_string_equal(vkh2o_mla_config_preset_name((uint32_t)i), want[i].name);
        assert_non_null(vkh2o_mla_config_preset_title((uint32_t)i));
        assert_int_equal(vkh2o_mla_config_preset(want[i].name, &c, &e), VKH2O_OK);
        assert_int_equal(vkh2o_mla_config_validate(&c, &e), VKH2O_OK);
        assert_int_equal(c.num_heads, want[i].heads);
        assert_true(c.rope_theta == (float)want[i].theta && c.yarn_factor == (float)want[i].factor);
        assert_true(c.beta_fast == (float)want[i].bf && c.beta_slow == (float)want[i].bs);
        assert_true(c.rms_norm_eps == (float)want[i].eps);
        assert_true(c.mscale == 1.0f && c.mscale_all_dim == 1.0f);
        assert_int_equal(c.original_max_position_embeddings, 4096);
        /* softmax scale with yarn's mscale_all_dim */
        double m = ref_mscale(want[i].factor, 1.0);
        scale[i] = pow(192.0, -0.5) * m * m;
        assert_rel(vkh2o_mla_softmax_scale(&c), scale[i], 1e-6);
        /* correction range */
        double lo, hi;
        ref_range(64, want[i].theta, 4096, want[i].bf, want[i].bs, &lo, &hi);
        assert_true(lo == want[i].lo && hi == want[i].hi);
        uint32_t glo = 99, ghi = 99;
        vkh2o_mla_yarn_correction_range(&c, &glo, &ghi);
        assert_int_equal(glo, want[i].lo);
        assert_int_equal(ghi, want[i].hi);
        /* every inverse frequency */
        float inv[32], af = -1.0f;
        vkh2o_mla_rope_params(&c, inv, &af);
        for (int k = 0; k < 32; k++) {
            double extra = pow(want[i].theta, -2.0 * k / 64.0), inter = extra / want[i].factor;
            double ramp = fmin(fmax((k - lo) / (hi - lo), 0.0), 1.0);
            assert_rel(inv[k], inter * ramp + extra * (1.0 - ramp), 2e-7);
        }
        assert_true(af == 1.0f);   /* mscale == mscale_all_dim */
        printf("# %-17s scale %.9f  range [%u, %u]  inv_freq[31] %.6g\n", want[i].name, scale[i], glo, ghi,
               (double)inv[31]);
    }
    /* factor 64 vs 32: the softmax scale is about 10 %% larger (1.1056) */
    assert_rel(scale[0] / scale[1], pow((0.1 * log(64.0) + 1.0) / (0.1 * log(32.0) + 1.0), 2.0), 1e-12);
    assert_true(scale[0] / scale[1] > 1.10 && scale[0] / scale[1] < 1.11);
    vkh2o_mla_config c;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_mla_config_preset("kimi", &c, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_msg_has(&e, "kimi-k2-thinking");
    assert_int_equal(vkh2o_mla_config_preset(NULL, &c, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    /* no yarn: no range */
    vkh2o_mla_config_kimi_k26(&c);
    c.rope_scaling = VKH2O_ROPE_NONE;
    uint32_t lo = 9, hi = 9;
    vkh2o_mla_yarn_correction_range(&c, &lo, &hi);
    assert_true(lo == 0 && hi == 0);
}

static void test_param_count(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    vkh2o_mla_config_kimi_k26(&c);
    /* the seed document's "layer params: 101,124,096" */
    assert_int_equal(vkh2o_mla_param_count(&c), 101124096ull);
    /* plain q_proj: 64*192*7168 replaces q_a (1536*7168 + 1536) and q_b (64*192*1536) */
    c.q_lora_rank = 0;
    assert_int_equal(vkh2o_mla_param_count(&c), 101124096ull - (11010048ull + 1536 + 18874368ull) + 88080384ull);
}

static void test_softmax_scale(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    assert_int_equal(vkh2o_mla_config_preset("kimi-k2-instruct", &c, NULL), VKH2O_OK);   /* factor 32 */
    double m = 0.1 * log(32.0) + 1.0;
    assert_rel(vkh2o_mla_softmax_scale(&c), pow(192.0, -0.5) * m * m, 1e-6);
    c.mscale_all_dim = 0.0f;   /* HF: no mscale_all_dim -> no extra factor */
    assert_rel(vkh2o_mla_softmax_scale(&c), pow(192.0, -0.5), 1e-6);
    c.mscale_all_dim = 0.707f;
    m = 0.1 * 0.707 * log(32.0) + 1.0;
    assert_rel(vkh2o_mla_softmax_scale(&c), pow(192.0, -0.5) * m * m, 1e-6);
    c.rope_scaling = VKH2O_ROPE_NONE;
    assert_rel(vkh2o_mla_softmax_scale(&c), pow(192.0, -0.5), 1e-6);
    c.rope_scaling = VKH2O_ROPE_YARN;
    c.yarn_factor = 1.0f;      /* factor <= 1: get_mscale is 1 */
    assert_rel(vkh2o_mla_softmax_scale(&c), pow(192.0, -0.5), 1e-6);
}

static void test_rope_kimi_k2_instruct(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    assert_int_equal(vkh2o_mla_config_preset("kimi-k2-instruct", &c, NULL), VKH2O_OK);   /* factor 32 */
    float inv[32], af = -1.0f;
    vkh2o_mla_rope_params(&c, inv, &af);
    /* Worked out by hand for dim 64, base 5e4, original context 4096, beta_fast = beta_slow = 1:
     * the correction dimension for r rotations is 64 ln(4096 / (2 pi r)) / (2 ln 5e4); for r = 1
     * that is 19.165, so low = floor = 19 and high = ceil = 20. Pairs 0..19 keep the original
     * frequency 5e4^(-2i/64), pairs 20..31 are interpolated: divided by factor 32. */
    double corr = 64.0 * log(4096.0 / (2.0 * M_PI)) / (2.0 * log(50000.0));
    assert_rel(corr, 19.1649, 1e-4);
    assert_rel(inv[0], 1.0, 1e-6);
    assert_rel(inv[1], pow(50000.0, -2.0 / 64.0), 1e-6);
    assert_rel(inv[16], 1.0 / sqrt(50000.0), 1e-6);
    assert_rel(inv[19], pow(50000.0, -38.0 / 64.0), 1e-6);
    assert_rel(inv[20], pow(50000.0, -40.0 / 64.0) / 32.0, 1e-6);
    assert_rel(inv[31], pow(50000.0, -62.0 / 64.0) / 32.0, 1e-6);
    assert_true(af == 1.0f);   /* mscale == mscale_all_dim */
    for (int i = 1; i < 32; i++)
        assert_true(inv[i] < inv[i - 1]);
}

static void test_rope_ramp_and_plain(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    assert_int_equal(vkh2o_mla_config_preset("kimi-k2-instruct", &c, NULL), VKH2O_OK);   /* factor 32 */
    /* HF's yarn defaults beta_fast 32, beta_slow 1: low = floor(8.91) = 8, high = 20, so pair i
     * blends with weight (i - 8) / 12 on the interpolated frequency */
    c.beta_fast = 32.0f;
    c.mscale = 1.0f;
    c.mscale_all_dim = 0.0f;
    float inv[32], af;
    vkh2o_mla_rope_params(&c, inv, &af);
    for (int i = 0; i < 32; i++) {
        double extra = pow(50000.0, -2.0 * i / 64.0), inter = extra / 32.0;
        double w = i <= 8 ? 0.0 : i >= 20 ? 1.0 : (i - 8) / 12.0;
        assert_rel(inv[i], inter * w + extra * (1.0 - w), 1e-6);
    }
    /* one of mscale / mscale_all_dim zero: attention factor is get_mscale(factor, 1) */
    assert_rel(af, 0.1 * log(32.0) + 1.0, 1e-6);
    c.mscale = 0.707f;
    c.mscale_all_dim = 1.0f;
    vkh2o_mla_rope_params(&c, inv, &af);
    assert_rel(af, (0.1 * 0.707 * log(32.0) + 1.0) / (0.1 * log(32.0) + 1.0), 1e-6);

    /* no scaling: the plain RoPE frequencies, factor 1 */
    c.rope_scaling = VKH2O_ROPE_NONE;
    c.rope_theta = 10000.0f;
    c.qk_rope_head_dim = 16;
    vkh2o_mla_rope_params(&c, inv, &af);
    for (int i = 0; i < 8; i++)
        assert_rel(inv[i], pow(10000.0, -2.0 * i / 16.0), 1e-6);
    assert_true(af == 1.0f);
    vkh2o_mla_rope_params(&c, inv, NULL);   /* attention_factor is optional */
}

static void test_from_json_kimi(void** state)
{
    (void)state;
    vkh2o_mla_config want, got;
    assert_int_equal(vkh2o_mla_config_preset("kimi-k2-instruct", &want, NULL), VKH2O_OK);
    vkh2o_error e = { 0 };
    /* from a zeroed config: every field comes from the file */
    memset(&got, 0, sizeof got);
    const char* p = write_json("{" KIMI_TEXT_KEYS ", \"rope_theta\": 50000.0, \"rope_scaling\": " KIMI_ROPE "}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &got, &e), VKH2O_OK);
    assert_cfg_equal(&got, &want);

    /* transformers v5: rope_parameters with rope_type, rope_theta inside */
    memset(&got, 0, sizeof got);
    p = write_json("{" KIMI_TEXT_KEYS ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 50000,"
                   " \"factor\": 32, \"original_max_position_embeddings\": 4096, \"beta_fast\": 1,"
                   " \"beta_slow\": 1, \"mscale\": 1, \"mscale_all_dim\": 1}}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &got, &e), VKH2O_OK);
    assert_cfg_equal(&got, &want);

    /* the Kimi K2.6 multimodal wrapper: the text model's keys under text_config */
    memset(&got, 0, sizeof got);
    p = write_json("{\"architectures\": [\"KimiK25ForConditionalGeneration\"], \"model_type\": \"kimi_k25\","
                   " \"vision_config\": {\"hidden_size\": 1152, \"num_attention_heads\": 16},"
                   " \"hidden_size\": 1,"
                   " \"text_config\": {" KIMI_TEXT_KEYS ", \"rope_theta\": 50000.0, \"rope_scaling\": " KIMI_ROPE "}}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &got, &e), VKH2O_OK);
    assert_cfg_equal(&got, &want);

    /* Kimi K2.6 as published: the built-in default */
    vkh2o_mla_config_kimi_k26(&want);
    memset(&got, 0, sizeof got);
    p = write_json("{\"architectures\": [\"KimiK25ForConditionalGeneration\"], \"model_type\": \"kimi_k25\","
                   " \"text_config\": {" KIMI_SHAPE_KEYS ", \"rms_norm_eps\": 1e-05, \"rope_theta\": 50000.0,"
                   " \"rope_scaling\": {\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"factor\": 64.0, \"mscale\": 1.0,"
                   " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}}}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &got, &e), VKH2O_OK);
    assert_cfg_equal(&got, &want);
}

static void test_from_json_variants(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    vkh2o_error e = { 0 };
    /* DeepSeek-V2-Lite style: q_lora_rank null, no rope scaling, rope_interleave false */
    vkh2o_mla_config_kimi_k26(&c);
    const char* p = write_json("{\"hidden_size\": 2048, \"num_attention_heads\": 16, \"q_lora_rank\": null,"
                               " \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
                               " \"v_head_dim\": 128, \"rope_theta\": 10000, \"rms_norm_eps\": 1e-5,"
                               " \"rope_scaling\": null, \"rope_interleave\": false, \"num_hidden_layers\": 27}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &c, &e), VKH2O_OK);
    assert_int_equal(c.q_lora_rank, 0);
    assert_int_equal(c.hidden_size, 2048);
    assert_int_equal(c.num_layers, 27);
    assert_int_equal(c.rope_scaling, VKH2O_ROPE_NONE);
    assert_false(c.rope_interleave);
    assert_true(c.rms_norm_eps == 1e-5f);
    assert_true(c.rope_theta == 10000.0f);

    /* a yarn block with only the factor: HF's defaults for the rest, and the original context
     * from max_position_embeddings; missing top-level keys keep what was in cfg */
    vkh2o_mla_config_kimi_k26(&c);
    p = write_json("{\"max_position_embeddings\": 8192, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4}}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &c, &e), VKH2O_OK);
    assert_int_equal(c.rope_scaling, VKH2O_ROPE_YARN);
    assert_true(c.yarn_factor == 4.0f);
    assert_true(c.beta_fast == 32.0f && c.beta_slow == 1.0f);
    assert_true(c.mscale == 0.0f && c.mscale_all_dim == 0.0f);
    assert_int_equal(c.original_max_position_embeddings, 8192);
    assert_int_equal(c.hidden_size, 7168);
    assert_true(c.rope_interleave);   /* absent -> HF default true */

    /* rope_type default, and no rope keys at all: plain RoPE */
    vkh2o_mla_config_kimi_k26(&c);
    p = write_json("{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000}}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &c, &e), VKH2O_OK);
    assert_int_equal(c.rope_scaling, VKH2O_ROPE_NONE);
    assert_true(c.rope_theta == 1000000.0f);
    vkh2o_mla_config_kimi_k26(&c);
    p = write_json("{\"hidden_size\": 7168}");
    assert_int_equal(vkh2o_mla_config_from_json(p, &c, &e), VKH2O_OK);
    assert_int_equal(c.rope_scaling, VKH2O_ROPE_NONE);
}

/* A config.json that must fail with `want`, naming the file and `key`, leaving cfg untouched. */
static void expect_json_fails(const char* json, vkh2o_result want, const char* key)
{
    vkh2o_mla_config c, orig;
    vkh2o_mla_config_kimi_k26(&c);
    orig = c;
    vkh2o_error e = { 0 };
    const char* p = write_json(json);
    vkh2o_result r = vkh2o_mla_config_from_json(p, &c, &e);
    printf("# %s -> %s: %s\n", key, vkh2o_result_string(r), e.message);
    assert_int_equal(r, want);
    assert_int_equal(e.code, want);
    assert_msg_has(&e, p);
    assert_msg_has(&e, key);
    assert_memory_equal(&c, &orig, sizeof c);
}

static void test_from_json_bad(void** state)
{
    (void)state;
    expect_json_fails("{\"hidden_size\": \"7168\"}", VKH2O_ERROR_FORMAT, "hidden_size");
    expect_json_fails("{\"hidden_size\": -1}", VKH2O_ERROR_INVALID_ARGUMENT, "hidden_size");
    expect_json_fails("{\"num_attention_heads\": 1.5}", VKH2O_ERROR_INVALID_ARGUMENT, "num_attention_heads");
    expect_json_fails("{\"kv_lora_rank\": 0}", VKH2O_ERROR_INVALID_ARGUMENT, "kv_lora_rank");
    expect_json_fails("{\"v_head_dim\": 1e12}", VKH2O_ERROR_INVALID_ARGUMENT, "v_head_dim");
    expect_json_fails("{\"q_lora_rank\": \"none\"}", VKH2O_ERROR_FORMAT, "q_lora_rank");
    expect_json_fails("{\"rope_interleave\": \"yes\"}", VKH2O_ERROR_FORMAT, "rope_interleave");
    expect_json_fails("{\"attention_bias\": 0}", VKH2O_ERROR_FORMAT, "attention_bias");
    expect_json_fails("{\"rms_norm_eps\": [1e-6]}", VKH2O_ERROR_FORMAT, "rms_norm_eps");
    expect_json_fails("{\"rope_scaling\": \"yarn\"}", VKH2O_ERROR_FORMAT, "rope_scaling");
    expect_json_fails("{\"rope_scaling\": {\"type\": 3, \"factor\": 32}}", VKH2O_ERROR_FORMAT, "rope_scaling.type");
    expect_json_fails("{\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}", VKH2O_ERROR_INVALID_ARGUMENT,
                      "linear");
    expect_json_fails("{\"rope_scaling\": {\"type\": \"yarn\"}}", VKH2O_ERROR_FORMAT, "factor");
    expect_json_fails("{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": \"32\"}}", VKH2O_ERROR_FORMAT,
                      "rope_scaling.factor");
    expect_json_fails("{\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 32, \"beta_fast\": true}}",
                      VKH2O_ERROR_FORMAT, "rope_parameters.beta_fast");
    expect_json_fails("{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 32, \"attention_factor\": 1.2}}",
                      VKH2O_ERROR_INVALID_ARGUMENT, "attention_factor");
    expect_json_fails("{\"text_config\": 5}", VKH2O_ERROR_FORMAT, "text_config");
    expect_json_fails("{\"text_config\": {\"hidden_size\": null, \"num_attention_heads\": 64, \"q_lora_rank\": 1536,"
                      " \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128}}",
                      VKH2O_ERROR_FORMAT, "hidden_size");
    /* the wrapper: the text model must be nested, and completely */
    /* the text keys at the top level, no text_config (and the top level's model_type the only one:
     * a key twice in one object is refused by the strict JSON check first) */
    expect_json_fails("{\"hidden_size\": 7168, \"num_attention_heads\": 64, \"q_lora_rank\": 1536, \"kv_lora_rank\": 512, "
                      "\"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"model_type\": \"kimi_k25\"}",
                      VKH2O_ERROR_FORMAT, "text_config");
    expect_json_fails("{\"model_type\": \"kimi_k25\", \"hidden_size\": 7168, \"text_config\": {\"num_attention_heads\": 64,"
                      " \"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
                      " \"v_head_dim\": 128}}", VKH2O_ERROR_FORMAT, "text_config\" lacks the required key \"hidden_size");
    expect_json_fails("{\"text_config\": {\"hidden_size\": 7168, \"num_attention_heads\": 64, \"q_lora_rank\": 1536,"
                      " \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64}}",
                      VKH2O_ERROR_FORMAT, "v_head_dim");
    /* values of the right type that fail validation */
    expect_json_fails("{\"qk_rope_head_dim\": 63}", VKH2O_ERROR_INVALID_ARGUMENT, "qk_rope_head_dim");
    expect_json_fails("{\"attention_bias\": true}", VKH2O_ERROR_INVALID_ARGUMENT, "attention_bias");
    expect_json_fails("{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 0.5}}", VKH2O_ERROR_INVALID_ARGUMENT,
                      "factor");
    expect_json_fails("{\"rms_norm_eps\": 0}", VKH2O_ERROR_INVALID_ARGUMENT, "rms_norm_eps");
    /* found by fuzz_config: finite but huge mscales validated, then the softmax scale (or the
     * attention factor) was infinite */
    expect_json_fails("{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 32, \"mscale\": 3e38, \"mscale_all_dim\": 3e38}}",
                      VKH2O_ERROR_INVALID_ARGUMENT, "softmax scale of inf");
    expect_json_fails("{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 3e38, \"mscale\": 3e38, \"mscale_all_dim\": 1e-30}}",
                      VKH2O_ERROR_INVALID_ARGUMENT, "attention factor");
    /* not JSON, not an object, no file */
    expect_json_fails("{\"hidden_size\": 7168,", VKH2O_ERROR_FORMAT, "JSON");
    expect_json_fails("[1, 2]", VKH2O_ERROR_FORMAT, "object");
    vkh2o_mla_config c;
    vkh2o_error e = { 0 };
    char missing[1300];
    snprintf(missing, sizeof missing, "%s/absent.json", vt_scratch_dir());
    assert_int_equal(vkh2o_mla_config_from_json(missing, &c, &e), VKH2O_ERROR_IO);
    assert_msg_has(&e, missing);
}

/* quantization_config: honoured where it leaves attention alone, refused where it does not */
static void test_quantization_config(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    vkh2o_error e = { 0 };
    /* Kimi K2.6's: INT4 routed experts, self_attn in ignore (nested in text_config) */
#define CT_GROUP(targets)                                                                                   \
    "\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"group_0\":" \
    " {\"targets\": " targets ", \"weights\": {\"num_bits\": 4, \"type\": \"int\", \"group_size\": 32}}}"
    const char* ok[] = {
        "{\"model_type\": \"kimi_k25\", \"text_config\": {" KIMI_TEXT_KEYS ", \"quantization_config\": {" CT_GROUP("[\"Linear\"]")
        ", \"ignore\": [\"lm_head\", \"re:.*self_attn.*\", \"re:vision_tower.*\"]}}}",
        /* targets that never reach attention */
        "{\"quantization_config\": {" CT_GROUP("[\"re:.*mlp\\\\.experts.*\"]") ", \"ignore\": []}}",
        /* every attention module of the (one) layer listed by name */
        "{\"num_hidden_layers\": 1, \"quantization_config\": {" CT_GROUP("[\"Linear\"]") ", \"ignore\": ["
        "\"model.layers.0.self_attn.q_a_proj\", \"model.layers.0.self_attn.q_b_proj\", \"model.layers.0.self_attn.q_proj\","
        "\"model.layers.0.self_attn.kv_a_proj_with_mqa\", \"model.layers.0.self_attn.kv_b_proj\","
        "\"model.layers.0.self_attn.o_proj\", \"language_model.model.layers.0.self_attn.q_a_proj\","
        "\"re:language_model\\\\..*\"]}}",
        /* the ignore list in the wrapper's own spelling only */
        "{\"num_hidden_layers\": 2, \"quantization_config\": {" CT_GROUP("[\"Linear\"]") ", \"ignore\": ["
        "\"re:language_model\\\\.model\\\\.layers\\\\.[0-9]+\\\\.self_attn\\\\..*\"]}}",
        /* DeepSeek-V3's FP8 */
        "{\"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\","
        " \"weight_block_size\": [128, 128]}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        vkh2o_mla_config_kimi_k26(&c);
        vkh2o_result r = vkh2o_mla_config_from_json(write_json(ok[i]), &c, &e);
        if (r != VKH2O_OK)
            fail_msg("config %zu: %s", i, e.message);
    }
    /* attention covered: by class, by regex, one layer forgotten in the ignore list */
    expect_json_fails("{\"quantization_config\": {" CT_GROUP("[\"Linear\"]") ", \"ignore\": [\"lm_head\"]}}",
                      VKH2O_ERROR_UNSUPPORTED, "model.layers.0.self_attn.q_a_proj");
    expect_json_fails("{\"text_config\": {" KIMI_TEXT_KEYS ", \"quantization_config\": {"
                      CT_GROUP("[\"re:.*self_attn\\\\.kv_b_proj$\"]") "}}}", VKH2O_ERROR_UNSUPPORTED,
                      "self_attn.kv_b_proj");
    expect_json_fails("{\"num_hidden_layers\": 2, \"quantization_config\": {" CT_GROUP("[\"Linear\"]")
                      ", \"ignore\": [\"re:model\\\\.layers\\\\.0\\\\..*\"]}}",
                      VKH2O_ERROR_UNSUPPORTED, "model.layers.1.self_attn.q_a_proj");
    expect_json_fails("{\"quantization_config\": {" CT_GROUP("[\"re:(unclosed\"]") "}}", VKH2O_ERROR_UNSUPPORTED,
                      "(unclosed");
    expect_json_fails("{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}}",
                      VKH2O_ERROR_UNSUPPORTED, "weight_block_size");
    expect_json_fails("{\"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e5m2\"}}",
                      VKH2O_ERROR_UNSUPPORTED, "fmt");
    expect_json_fails("{\"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4}}", VKH2O_ERROR_UNSUPPORTED,
                      "awq");
    expect_json_fails("{\"quantization_config\": {\"bits\": 4}}", VKH2O_ERROR_FORMAT, "quant_method");
    expect_json_fails("{\"quantization_config\": 4}", VKH2O_ERROR_FORMAT, "quantization_config");
#undef CT_GROUP
}

/* The writer's output reads back as the config written, for every preset and layout. */
static void test_write_json(void** state)
{
    (void)state;
    for (uint32_t i = 0; vkh2o_mla_config_preset_name(i); i++) {
        for (int lay = 0; lay < 2; lay++) {
            for (int q = 0; q < 3; q++) {
                vkh2o_mla_config want, got;
                vkh2o_error e = { 0 };
                assert_int_equal(vkh2o_mla_config_preset(vkh2o_mla_config_preset_name(i), &want, &e), VKH2O_OK);
                if (q == 1)
                    want.q_lora_rank = 0;
                const char* extra[] = { "vkh2o_test", "1", NULL };
                vkh2o_config_json_desc d = { .layout = (vkh2o_config_layout)lay, .quant = (vkh2o_config_quant)q,
                                             .extra = extra };
                unlink(g_path);
                assert_int_equal(vkh2o_mla_config_write_json(g_path, &want, &d, &e), VKH2O_OK);
                memset(&got, 0, sizeof got);
                if (vkh2o_mla_config_from_json(g_path, &got, &e) != VKH2O_OK)
                    fail_msg("%s layout %d quant %d: %s", vkh2o_mla_config_preset_name(i), lay, q, e.message);
                assert_cfg_equal(&got, &want);
            }
        }
    }
    vkh2o_mla_config c;
    vkh2o_error e = { 0 };
    vkh2o_mla_config_kimi_k26(&c);
    c.hidden_size = 0;
    assert_int_equal(vkh2o_mla_config_write_json(g_path, &c, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_mla_config_kimi_k26(&c);
    char bad[1300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/config.json", vt_scratch_dir());
    assert_int_equal(vkh2o_mla_config_write_json(bad, &c, NULL, &e), VKH2O_ERROR_IO);
    assert_msg_has(&e, bad);
}

static void test_validate(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    vkh2o_error e = { 0 };
    /* each mutation of a valid config must be refused, naming the field */
    static const char* keys[] = { "hidden_size", "num_heads", "kv_lora_rank", "qk_nope_head_dim",
                                  "qk_rope_head_dim", "v_head_dim", "rope_theta", "rms_norm_eps",
                                  "yarn factor", "original_max_position_embeddings", "beta_fast", "mscale" };
    for (int i = 0; i < 12; i++) {
        vkh2o_mla_config_kimi_k26(&c);
        switch (i) {
        case 0: c.hidden_size = 0; break;
        case 1: c.num_heads = 0; break;
        case 2: c.kv_lora_rank = 0; break;
        case 3: c.qk_nope_head_dim = 0; break;
        case 4: c.qk_rope_head_dim = 7; break;
        case 5: c.v_head_dim = 100000; break;
        case 6: c.rope_theta = NAN; break;
        case 7: c.rms_norm_eps = -1e-6f; break;
        case 8: c.yarn_factor = 0.5f; break;
        case 9: c.original_max_position_embeddings = 0; break;
        case 10: c.beta_fast = 0.0f; break;
        case 11: c.mscale = -1.0f; break;
        }
        assert_int_equal(vkh2o_mla_config_validate(&c, &e), VKH2O_ERROR_INVALID_ARGUMENT);
        assert_msg_has(&e, keys[i]);
    }
    /* yarn-only fields do not matter without yarn; q_lora_rank 0 is a plain q_proj */
    vkh2o_mla_config_kimi_k26(&c);
    c.rope_scaling = VKH2O_ROPE_NONE;
    c.yarn_factor = 0.0f;
    c.q_lora_rank = 0;
    assert_int_equal(vkh2o_mla_config_validate(&c, &e), VKH2O_OK);
    assert_int_equal(vkh2o_mla_config_validate(NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kimi_defaults),     cmocka_unit_test(test_param_count),
        cmocka_unit_test(test_softmax_scale),     cmocka_unit_test(test_rope_kimi_k2_instruct),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_rope_ramp_and_plain), cmocka_unit_test(test_from_json_kimi),
        cmocka_unit_test(test_from_json_variants), cmocka_unit_test(test_from_json_bad),
        cmocka_unit_test(test_quantization_config), cmocka_unit_test(test_write_json),
        cmocka_unit_test(test_validate),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
