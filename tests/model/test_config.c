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
#define KIMI_TEXT_KEYS                                                                              \
    "\"hidden_size\": 7168, \"num_attention_heads\": 64, \"num_key_value_heads\": 64,"              \
    "\"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128,"                      \
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_hidden_layers\": 61,"                     \
    "\"rms_norm_eps\": 1e-06, \"attention_bias\": false, \"max_position_embeddings\": 262144,"      \
    "\"vocab_size\": 163840, \"model_type\": \"kimi_k2\""
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
    vkh2o_mla_config c;
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
    assert_true(c.rope_theta == 50000.0f);
    assert_int_equal(c.rope_scaling, VKH2O_ROPE_YARN);
    assert_true(c.yarn_factor == 32.0f);
    assert_int_equal(c.original_max_position_embeddings, 4096);
    assert_true(c.rope_interleave);
    assert_false(c.attention_bias);
    assert_true(c.rms_norm_eps == 1e-6f);
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
    vkh2o_mla_config_kimi_k26(&c);
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

static void test_rope_kimi(void** state)
{
    (void)state;
    vkh2o_mla_config c;
    vkh2o_mla_config_kimi_k26(&c);
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
    vkh2o_mla_config_kimi_k26(&c);
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
    vkh2o_mla_config_kimi_k26(&want);
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
    expect_json_fails("{\"text_config\": {\"hidden_size\": null}}", VKH2O_ERROR_FORMAT, "hidden_size");
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
        cmocka_unit_test(test_softmax_scale),     cmocka_unit_test(test_rope_kimi),
        cmocka_unit_test(test_rope_ramp_and_plain), cmocka_unit_test(test_from_json_kimi),
        cmocka_unit_test(test_from_json_variants), cmocka_unit_test(test_from_json_bad),
        cmocka_unit_test(test_validate),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
