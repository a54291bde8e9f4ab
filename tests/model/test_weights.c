/* One layer's host weights: loading from files in each dtype (zero-copy views), FP8 E4M3 with
 * block scales dequantised (hand-computed values on partial edge blocks, and a full check
 * with an FP8 decoder written here), names with the multimodal prefix, shards, and every error
 * path with its exact code and a message naming the file and the tensor. CPU only. */
#include "vkh2o_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int group_setup(void** state)
{
    (void)state;
    return vt_scratch_make("test_weights") ? 0 : -1;
}

static int group_teardown(void** state)
{
    return vt_scratch_teardown(state);
}

#define path_of vt_scratch_path

static void assert_msg_has(const vkh2o_error* e, const char* s)
{
    if (!strstr(e->message, s))
        fail_msg("error message \"%s\" does not contain \"%s\"", e->message, s);
}

/* hidden 64, 2 heads, q_lora 24, kv_lora 16, nope 8, rope 8, v 8 */
static void tiny_config(vkh2o_mla_config* c)
{
    vkh2o_mla_config_kimi_k26(c);
    c->hidden_size = 64;
    c->num_heads = 2;
    c->q_lora_rank = 24;
    c->kv_lora_rank = 16;
    c->qk_nope_head_dim = 8;
    c->qk_rope_head_dim = 8;
    c->v_head_dim = 8;
}

static const char* short_name[VKH2O_W_COUNT] = {
    "q_a_proj", "q_a_layernorm", "q_b_proj", "q_proj", "kv_a_proj_with_mqa",
    "kv_a_layernorm", "kv_b_proj", "o_proj", "input_layernorm",
};

/* Shapes written out from the HF module definitions, independently of weights.c. */
static uint32_t test_shape(const vkh2o_mla_config* c, int w, uint64_t s[2])
{
    uint64_t H = c->num_heads, D = c->hidden_size;
    uint64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    switch (w) {
    case VKH2O_W_Q_A_PROJ: s[0] = c->q_lora_rank; s[1] = D; return c->q_lora_rank ? 2 : 0;
    case VKH2O_W_Q_A_LAYERNORM: s[0] = c->q_lora_rank; return c->q_lora_rank ? 1 : 0;
    case VKH2O_W_Q_B_PROJ: s[0] = H * qk; s[1] = c->q_lora_rank; return c->q_lora_rank ? 2 : 0;
    case VKH2O_W_Q_PROJ: s[0] = H * qk; s[1] = D; return c->q_lora_rank ? 0 : 2;
    case VKH2O_W_KV_A_PROJ: s[0] = c->kv_lora_rank + c->qk_rope_head_dim; s[1] = D; return 2;
    case VKH2O_W_KV_A_LAYERNORM: s[0] = c->kv_lora_rank; return 1;
    case VKH2O_W_KV_B_PROJ: s[0] = H * (c->qk_nope_head_dim + c->v_head_dim); s[1] = c->kv_lora_rank; return 2;
    case VKH2O_W_O_PROJ: s[0] = D; s[1] = H * c->v_head_dim; return 2;
    case VKH2O_W_INPUT_LAYERNORM: s[0] = D; return 1;
    }
    return 0;
}

static bool is_norm_w(int w)
{
    return w == VKH2O_W_Q_A_LAYERNORM || w == VKH2O_W_KV_A_LAYERNORM || w == VKH2O_W_INPUT_LAYERNORM;
}

/* OCP E4M3FN decoded from its definition: bias 7, 3 mantissa bits, subnormals at 2^-6. */
static double f8_decode(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m / 8.0 * pow(2.0, -6) : (1.0 + m / 8.0) * pow(2.0, e - 7);
    return s ? -v : v;
}

/* ---- a generated layer file ---- */
enum {
    GEN_OMIT_O_PROJ = 1,
    GEN_INPUT_LN = 2,
    GEN_FP8_NO_SCALE = 4,
    GEN_FP8_BAD_SCALE = 8,
    GEN_FP8_NORMS = 16,
    GEN_SCALE_I32 = 32,
    GEN_SHARDED = 64,        /* two shards + index; every _scale_inv in the second one */
    GEN_SCALE_NAN = 128,     /* q_b_proj's last block scale NaN */
    GEN_SCALE_ZERO = 256,    /* ... zero */
    GEN_SCALE_NEG = 512,     /* ... negative */
    GEN_FP8_NAN = 1024,      /* kv_b_proj's element [1, 2] the NaN code 0xff */
};

typedef struct gen_layer {
    uint32_t ndim[VKH2O_W_COUNT];
    uint64_t shape[VKH2O_W_COUNT][2];
    uint64_t numel[VKH2O_W_COUNT];
    vkh2o_dtype dtype[VKH2O_W_COUNT];
    void* raw[VKH2O_W_COUNT];
    float* scale[VKH2O_W_COUNT];     /* fp8 block scales */
    char name[VKH2O_W_COUNT][160];
    char sname[VKH2O_W_COUNT][180];
} gen_layer;

static void gen_free(gen_layer* g)
{
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        free(g->raw[w]);
        free(g->scale[w]);
    }
    memset(g, 0, sizeof *g);
}

static double raw_value(const gen_layer* g, int w, uint64_t i)
{
    return vkh2o_load_elem(g->dtype[w], g->raw[w], i);
}

/* Expected element i of weight w after loading (fp8: dequantised, before BF16 rounding). */
static double expected_value(const gen_layer* g, int w, uint64_t i)
{
    if (g->dtype[w] != VKH2O_DTYPE_F8_E4M3)
        return raw_value(g, w, i);
    uint64_t cols = g->shape[w][1], r = i / cols, c = i % cols;
    uint64_t sc = (cols + 127) / 128;
    return f8_decode(((const uint8_t*)g->raw[w])[i]) * g->scale[w][(r / 128) * sc + c / 128];
}

static void gen_layer_file(gen_layer* g, const char* path, const vkh2o_mla_config* c, const char* prefix,
                           uint32_t layer, vkh2o_dtype dt, uint32_t flags, vt_rng* rng)
{
    memset(g, 0, sizeof *g);
    vkh2o_tensor_write t[2 * VKH2O_W_COUNT];
    uint32_t n = 0, nfirst = 0;
    vkh2o_tensor_write scales[VKH2O_W_COUNT];
    uint32_t ns = 0;
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        uint64_t s[2];
        uint32_t nd = test_shape(c, w, s);
        if (!nd || (w == VKH2O_W_O_PROJ && (flags & GEN_OMIT_O_PROJ)) ||
            (w == VKH2O_W_INPUT_LAYERNORM && !(flags & GEN_INPUT_LN)))
            continue;
        vkh2o_dtype wdt = dt;
        if (dt == VKH2O_DTYPE_F8_E4M3 && is_norm_w(w) && !(flags & GEN_FP8_NORMS))
            wdt = VKH2O_DTYPE_F32;
        g->ndim[w] = nd;
        g->shape[w][0] = s[0];
        g->shape[w][1] = nd == 2 ? s[1] : 1;
        g->numel[w] = g->shape[w][0] * g->shape[w][1];
        g->dtype[w] = wdt;
        if (w == VKH2O_W_INPUT_LAYERNORM)
            snprintf(g->name[w], sizeof g->name[w], "%s.%u.input_layernorm.weight", prefix, layer);
        else
            snprintf(g->name[w], sizeof g->name[w], "%s.%u.self_attn.%s.weight", prefix, layer, short_name[w]);
        size_t es = vkh2o_dtype_size(wdt);
        g->raw[w] = malloc(g->numel[w] * es);
        assert_non_null(g->raw[w]);
        for (uint64_t i = 0; i < g->numel[w]; i++) {
            float v = (is_norm_w(w) ? 1.0f : 0.0f) + vt_normal(rng) * 0.5f;
            if (wdt == VKH2O_DTYPE_F32)
                ((float*)g->raw[w])[i] = v;
            else if (wdt == VKH2O_DTYPE_BF16)
                ((uint16_t*)g->raw[w])[i] = vkh2o_f32_to_bf16(v);
            else if (wdt == VKH2O_DTYPE_F16)
                ((uint16_t*)g->raw[w])[i] = vkh2o_f32_to_f16(v);
            else {
                uint8_t b;
                do
                    b = (uint8_t)vt_u32_below(rng, 256);
                while ((b & 0x7f) == 0x7f);   /* no NaN codes */
                ((uint8_t*)g->raw[w])[i] = b;
            }
        }
        t[n++] = (vkh2o_tensor_write){ .name = g->name[w], .dtype = wdt, .ndim = nd,
                                       .shape = { g->shape[w][0], g->shape[w][1] }, .data = g->raw[w] };
        if (wdt == VKH2O_DTYPE_F8_E4M3 && !(flags & GEN_FP8_NO_SCALE)) {
            uint64_t sr = (g->shape[w][0] + 127) / 128, sc = (g->shape[w][1] + 127) / 128;
            g->scale[w] = malloc(sr * sc * sizeof(float));
            for (uint64_t i = 0; i < sr * sc; i++)
                g->scale[w][i] = 0.5f + 1.5f * vt_uniform(rng);
            if (w == VKH2O_W_Q_B_PROJ && (flags & (GEN_SCALE_NAN | GEN_SCALE_ZERO | GEN_SCALE_NEG)))
                g->scale[w][sr * sc - 1] = (flags & GEN_SCALE_NAN) ? NAN : (flags & GEN_SCALE_ZERO) ? 0.0f : -1.0f;
            if (w == VKH2O_W_KV_B_PROJ && (flags & GEN_FP8_NAN))
                ((uint8_t*)g->raw[w])[1 * g->shape[w][1] + 2] = 0xff;
            snprintf(g->sname[w], sizeof g->sname[w], "%s_scale_inv", g->name[w]);
            scales[ns++] = (vkh2o_tensor_write){ .name = g->sname[w],
                                                 .dtype = (flags & GEN_SCALE_I32) ? VKH2O_DTYPE_I32 : VKH2O_DTYPE_F32,
                                                 .ndim = 2, .shape = { sr + ((flags & GEN_FP8_BAD_SCALE) ? 1 : 0), sc },
                                                 .data = g->scale[w] };
            if (flags & GEN_FP8_BAD_SCALE) {   /* one more row of scales than the weight needs */
                g->scale[w] = realloc(g->scale[w], (sr + 1) * sc * sizeof(float));
                assert_non_null(g->scale[w]);
                for (uint64_t i = sr * sc; i < (sr + 1) * sc; i++)
                    g->scale[w][i] = 1.0f;
                scales[ns - 1].data = g->scale[w];
            }
        }
    }
    vkh2o_error e = { 0 };
    if (!(flags & GEN_SHARDED)) {
        for (uint32_t i = 0; i < ns; i++)
            t[n++] = scales[i];
        assert_int_equal(vkh2o_safetensors_write(path, t, n, NULL, &e), VKH2O_OK);
        return;
    }
    /* path is a directory: weights in shard 1, the scales (and o_proj) in shard 2 */
    assert_int_equal(mkdir(path, 0755), 0);
    vkh2o_tensor_write t2[2 * VKH2O_W_COUNT];
    uint32_t n2 = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (strstr(t[i].name, "o_proj"))
            t2[n2++] = t[i];
        else
            t[nfirst++] = t[i];
    }
    for (uint32_t i = 0; i < ns; i++)
        t2[n2++] = scales[i];
    char p1[1300], p2[1300], pi[1300];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", path);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", path);
    snprintf(pi, sizeof pi, "%s/model.safetensors.index.json", path);
    assert_int_equal(vkh2o_safetensors_write(p1, t, nfirst, NULL, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_write(p2, t2, n2, NULL, &e), VKH2O_OK);
    FILE* f = fopen(pi, "w");
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (uint32_t i = 0; i < nfirst; i++)
        fprintf(f, "\"%s\": \"model-00001-of-00002.safetensors\", ", t[i].name);
    for (uint32_t i = 0; i < n2; i++)
        fprintf(f, "%s\"%s\": \"model-00002-of-00002.safetensors\"", i ? ", " : "", t2[i].name);
    fprintf(f, "}}");
    fclose(f);
}

/* Every weight the config uses matches the generated values: exactly for BF16/F16/F32 (kept
 * as views, no conversion) and FP8 (kept as a view with its scales; its value decoded x scale
 * exactly), within BF16 rounding (relative 2^-8) for FP8 dequantised on load (flag). */
static void check_loaded(const gen_layer* g, const vkh2o_mla_config* c, const vkh2o_mla_host_weights* hw,
                         vkh2o_checkpoint* ck, uint32_t flags)
{
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(hw, (vkh2o_mla_weight)w);
        assert_non_null(v);
        uint64_t s[2];
        if (!test_shape(c, w, s) || !g->raw[w]) {
            assert_null(v->data);
            continue;
        }
        assert_non_null(v->data);
        assert_string_equal(v->name, g->name[w]);
        assert_int_equal(v->ndim, g->ndim[w]);
        assert_int_equal(v->shape[0], g->shape[w][0]);
        if (v->ndim == 2)
            assert_int_equal(v->shape[1], g->shape[w][1]);
        assert_int_equal(v->numel, g->numel[w]);
        if (g->dtype[w] != VKH2O_DTYPE_F8_E4M3) {
            assert_int_equal(v->dtype, g->dtype[w]);
            assert_int_equal(v->nbytes, g->numel[w] * vkh2o_dtype_size(g->dtype[w]));
            assert_memory_equal(v->data, g->raw[w], v->nbytes);
            if (ck) {   /* a view into the checkpoint's mapping, not a copy */
                vkh2o_tensor_view cv;
                assert_int_equal(vkh2o_checkpoint_find(ck, g->name[w], &cv, NULL), VKH2O_OK);
                assert_ptr_equal(cv.data, v->data);
            }
            continue;
        }
        const vkh2o_tensor_view* sv = vkh2o_mla_host_weights_get_scale(hw, (vkh2o_mla_weight)w);
        if (!(flags & VKH2O_LOAD_FP8_TO_BF16)) {
            assert_int_equal(v->dtype, VKH2O_DTYPE_F8_E4M3);
            assert_memory_equal(v->data, g->raw[w], g->numel[w]);
            assert_non_null(sv->data);
            assert_string_equal(sv->name, g->sname[w]);
            assert_int_equal(sv->shape[0], (g->shape[w][0] + 127) / 128);
            assert_int_equal(sv->shape[1], (g->shape[w][1] + 127) / 128);
            for (uint64_t i = 0; i < g->numel[w]; i++) {
                double want = expected_value(g, w, i), got = vkh2o_mla_host_weights_get_value(hw, (vkh2o_mla_weight)w, i);
                if (!(got == want))
                    fail_msg("%s[%llu]: value %.17g want %.17g", g->name[w], (unsigned long long)i, got, want);
            }
            continue;
        }
        assert_null(sv->data);
        assert_int_equal(v->dtype, VKH2O_DTYPE_BF16);
        assert_int_equal(v->nbytes, g->numel[w] * 2);
        for (uint64_t i = 0; i < g->numel[w]; i++) {
            double want = expected_value(g, w, i);
            double got = vkh2o_load_elem(VKH2O_DTYPE_BF16, v->data, i);
            if (!(fabs(got - want) <= fabs(want) * (1.0 / 256.0)))
                fail_msg("%s[%llu]: got %.9g want %.9g", g->name[w], (unsigned long long)i, got, want);
        }
    }
}

static void load_and_check(const char* path, const vkh2o_mla_config* c, uint32_t layer, uint32_t flags,
                           const gen_layer* g)
{
    vkh2o_checkpoint* ck = NULL;
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_checkpoint_open(path, &ck, &e), VKH2O_OK);
    vkh2o_result r = vkh2o_mla_host_weights_load(ck, c, layer, flags, &hw, &e);
    if (r != VKH2O_OK)
        fail_msg("load: %s: %s", vkh2o_result_string(r), e.message);
    check_loaded(g, c, hw, ck, flags);
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
}

/* Expects the layer load to fail with `want` and a message holding each of the strings. */
static void expect_load_fails(const char* path, const vkh2o_mla_config* c, uint32_t layer, uint32_t flags,
                              vkh2o_result want, const char* s1, const char* s2)
{
    vkh2o_checkpoint* ck = NULL;
    vkh2o_mla_host_weights* hw = (vkh2o_mla_host_weights*)(uintptr_t)1;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_checkpoint_open(path, &ck, &e), VKH2O_OK);
    vkh2o_result r = vkh2o_mla_host_weights_load(ck, c, layer, flags, &hw, &e);
    printf("# -> %s: %s\n", vkh2o_result_string(r), e.message);
    assert_int_equal(r, want);
    assert_int_equal(e.code, want);
    assert_null(hw);
    if (s1)
        assert_msg_has(&e, s1);
    if (s2)
        assert_msg_has(&e, s2);
    vkh2o_checkpoint_destroy(ck);
}

/* ---- tests ---- */

static void test_load_dtypes(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("load_dtypes"));
    vkh2o_mla_config c;
    tiny_config(&c);
    const vkh2o_dtype dts[] = { VKH2O_DTYPE_BF16, VKH2O_DTYPE_F16, VKH2O_DTYPE_F32 };
    for (int i = 0; i < 3; i++) {
        gen_layer g;
        const char* p = path_of("dtypes.safetensors");
        /* layer 3 (a name with the right layer index) with input_layernorm, found without the flag */
        gen_layer_file(&g, p, &c, "model.layers", 3, dts[i], GEN_INPUT_LN, &rng);
        printf("# dtype %s\n", vkh2o_dtype_name(dts[i]));
        load_and_check(p, &c, 3, 0, &g);
        load_and_check(p, &c, 3, VKH2O_LOAD_INPUT_LAYERNORM, &g);
        gen_free(&g);
    }
    /* without the input_layernorm: fine unless asked for */
    gen_layer g;
    const char* p = path_of("no_ln.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_BF16, 0, &rng);
    load_and_check(p, &c, 0, 0, &g);
    expect_load_fails(p, &c, 0, VKH2O_LOAD_INPUT_LAYERNORM, VKH2O_ERROR_MISSING_TENSOR,
                      "'model.layers.0.input_layernorm.weight'", p);
    gen_free(&g);
}

static void test_no_q_lora_and_prefix(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("no_q_lora_and_prefix"));
    vkh2o_mla_config c;
    tiny_config(&c);
    c.q_lora_rank = 0;   /* a plain q_proj */
    gen_layer g;
    const char* p = path_of("qproj.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_BF16, 0, &rng);
    assert_non_null(g.raw[VKH2O_W_Q_PROJ]);
    load_and_check(p, &c, 0, 0, &g);
    gen_free(&g);

    /* the Kimi K2.6 multimodal wrapper's names */
    tiny_config(&c);
    p = path_of("multimodal.safetensors");
    gen_layer_file(&g, p, &c, "language_model.model.layers", 1, VKH2O_DTYPE_BF16, GEN_INPUT_LN, &rng);
    load_and_check(p, &c, 1, VKH2O_LOAD_INPUT_LAYERNORM, &g);
    /* a layer that is in neither spelling: the message names the layer and both names tried */
    expect_load_fails(p, &c, 2, 0, VKH2O_ERROR_MISSING_TENSOR, "layer 2",
                      "'language_model.model.layers.2.self_attn.kv_a_proj_with_mqa.weight'");
    expect_load_fails(p, &c, 2, 0, VKH2O_ERROR_MISSING_TENSOR, "'model.layers.2.self_attn.kv_a_proj_with_mqa.weight'",
                      p);
    gen_free(&g);
}

static void test_missing_and_shape(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("missing_and_shape"));
    vkh2o_mla_config c;
    tiny_config(&c);
    gen_layer g;
    const char* p = path_of("no_o.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_BF16, GEN_OMIT_O_PROJ, &rng);
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_MISSING_TENSOR, "'model.layers.0.self_attn.o_proj.weight'", p);
    gen_free(&g);

    p = path_of("shape.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_BF16, 0, &rng);
    vkh2o_mla_config wrong = c;
    wrong.kv_lora_rank = 32;   /* the file has 16 */
    expect_load_fails(p, &wrong, 0, 0, VKH2O_ERROR_SHAPE, "'model.layers.0.self_attn.kv_a_proj_with_mqa.weight'",
                      "shape [24, 64] but the config needs [40, 64]");
    expect_load_fails(p, &wrong, 0, 0, VKH2O_ERROR_SHAPE, p, NULL);
    wrong = c;
    wrong.num_heads = 4;
    expect_load_fails(p, &wrong, 0, 0, VKH2O_ERROR_SHAPE, "'model.layers.0.self_attn.q_b_proj.weight'",
                      "shape [32, 24] but the config needs [64, 24]");
    wrong = c;
    wrong.q_lora_rank = 0;     /* wants q_proj, the file has the LoRA pair */
    expect_load_fails(p, &wrong, 0, 0, VKH2O_ERROR_MISSING_TENSOR, "'model.layers.0.self_attn.q_proj.weight'", NULL);
    wrong = c;
    wrong.qk_rope_head_dim = 7;   /* an invalid config is refused before any lookup */
    expect_load_fails(p, &wrong, 0, 0, VKH2O_ERROR_INVALID_ARGUMENT, "qk_rope_head_dim", NULL);
    gen_free(&g);

    /* an unsupported dtype */
    p = path_of("i8.safetensors");
    int8_t q[24 * 64] = { 0 };
    char name[] = "model.layers.0.self_attn.q_a_proj.weight";
    vkh2o_tensor_write t = { .name = name, .dtype = VKH2O_DTYPE_I8, .ndim = 2, .shape = { 24, 64 }, .data = q };
    gen_layer_file(&g, path_of("tmp_i8.safetensors"), &c, "model.layers", 0, VKH2O_DTYPE_BF16, 0, &rng);
    vkh2o_tensor_write all[VKH2O_W_COUNT];
    uint32_t n = 0;
    for (int w = 0; w < VKH2O_W_COUNT; w++)
        if (g.raw[w])
            all[n++] = w == VKH2O_W_Q_A_PROJ ? t
                                              : (vkh2o_tensor_write){ .name = g.name[w], .dtype = g.dtype[w],
                                                                      .ndim = g.ndim[w],
                                                                      .shape = { g.shape[w][0], g.shape[w][1] },
                                                                      .data = g.raw[w] };
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_write(p, all, n, NULL, &e), VKH2O_OK);
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_DTYPE, "'model.layers.0.self_attn.q_a_proj.weight'", "I8");
    gen_free(&g);
}

static void test_fp8_edge_blocks(void** state)
{
    (void)state;
    /* hidden 200 and kv_lora + rope = 136: kv_a_proj_with_mqa is [136, 200], four 128x128
     * blocks of which three are partial (128x72, 8x128, 8x72) */
    vkh2o_mla_config c;
    tiny_config(&c);
    c.hidden_size = 200;
    c.kv_lora_rank = 128;
    const uint64_t R = 136, C = 200;
    vt_rng rng;
    vt_rng_seed(&rng, 1);
    gen_layer g;
    const char* tmp = path_of("edge_src.safetensors");
    gen_layer_file(&g, tmp, &c, "model.layers", 0, VKH2O_DTYPE_BF16, 0, &rng);
    uint8_t* q = malloc(R * C);
    memset(q, 0x38, R * C);          /* 0x38 = +1.0 (exponent 7 = bias, mantissa 0) */
    q[0 * C + 1] = 0x7e;             /* 448, the largest finite value */
    q[5 * C + 140] = 0xb8;           /* -1.0 */
    q[130 * C + 150] = 0x3c;         /* 1.5 */
    q[129 * C + 3] = 0x01;           /* smallest subnormal 2^-9 */
    q[135 * C + 199] = 0x44;         /* 3.0 */
    float s[4] = { 0.5f, 2.0f, 0.25f, 8.0f };   /* [2, 2] block scales */
    vkh2o_tensor_write all[VKH2O_W_COUNT + 1];
    uint32_t n = 0;
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        if (!g.raw[w])
            continue;
        if (w == VKH2O_W_KV_A_PROJ) {
            all[n++] = (vkh2o_tensor_write){ .name = g.name[w], .dtype = VKH2O_DTYPE_F8_E4M3, .ndim = 2,
                                             .shape = { R, C }, .data = q };
            all[n++] = (vkh2o_tensor_write){ .name = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv",
                                             .dtype = VKH2O_DTYPE_F32, .ndim = 2, .shape = { 2, 2 }, .data = s };
        } else {
            all[n++] = (vkh2o_tensor_write){ .name = g.name[w], .dtype = g.dtype[w], .ndim = g.ndim[w],
                                             .shape = { g.shape[w][0], g.shape[w][1] }, .data = g.raw[w] };
        }
    }
    const char* p = path_of("edge.safetensors");
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_write(p, all, n, NULL, &e), VKH2O_OK);
    vkh2o_checkpoint* ck = NULL;
    vkh2o_mla_host_weights* hw = NULL;
    assert_int_equal(vkh2o_checkpoint_open(p, &ck, &e), VKH2O_OK);
    for (int pass = 0; pass < 2; pass++) {
    /* pass 0: kept FP8 (values through get_value); pass 1: dequantised to BF16 on load */
    assert_int_equal(vkh2o_mla_host_weights_load(ck, &c, 0, pass ? VKH2O_LOAD_FP8_TO_BF16 : 0, &hw, &e), VKH2O_OK);
    const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(hw, VKH2O_W_KV_A_PROJ);
    assert_int_equal(v->dtype, pass ? VKH2O_DTYPE_BF16 : VKH2O_DTYPE_F8_E4M3);
    assert_int_equal(v->shape[0], R);
    assert_int_equal(v->shape[1], C);
#define AT(r, col) (pass ? vkh2o_load_elem(VKH2O_DTYPE_BF16, v->data, (uint64_t)(r) * C + (col)) \
                         : vkh2o_mla_host_weights_get_value(hw, VKH2O_W_KV_A_PROJ, (uint64_t)(r) * C + (col)))
    /* every value below is exact in BF16, so equality is the right check */
    assert_true(AT(0, 0) == 0.5f);         /* block (0,0) */
    assert_true(AT(0, 1) == 224.0f);       /* 448 x 0.5 */
    assert_true(AT(127, 127) == 0.5f);
    assert_true(AT(0, 128) == 2.0f);       /* block (0,1): the partial 72-column block */
    assert_true(AT(5, 140) == -2.0f);
    assert_true(AT(127, 199) == 2.0f);
    assert_true(AT(128, 0) == 0.25f);      /* block (1,0): the partial 8-row block */
    assert_true(AT(129, 3) == 0.00048828125f);   /* 2^-9 x 0.25 = 2^-11 */
    assert_true(AT(135, 127) == 0.25f);
    assert_true(AT(128, 128) == 8.0f);     /* block (1,1): 8x72 */
    assert_true(AT(130, 150) == 12.0f);
    assert_true(AT(135, 199) == 24.0f);
#undef AT
    /* the other weights are still views */
    vkh2o_tensor_view cv;
    assert_int_equal(vkh2o_checkpoint_find(ck, g.name[VKH2O_W_O_PROJ], &cv, NULL), VKH2O_OK);
    assert_ptr_equal(cv.data, vkh2o_mla_host_weights_get_view(hw, VKH2O_W_O_PROJ)->data);
    vkh2o_mla_host_weights_destroy(hw);
    }
    vkh2o_checkpoint_destroy(ck);
    free(q);
    gen_free(&g);
}

static void test_fp8_random_sharded(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("fp8_random_sharded"));
    vkh2o_mla_config c;
    tiny_config(&c);
    c.hidden_size = 300;   /* three column blocks, the last partial */
    c.num_heads = 9;       /* q_b_proj [144, 24]: two row blocks */
    gen_layer g;
    const char* p = path_of("fp8.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, GEN_INPUT_LN, &rng);
    load_and_check(p, &c, 0, VKH2O_LOAD_INPUT_LAYERNORM, &g);
    load_and_check(p, &c, 0, VKH2O_LOAD_FP8_TO_BF16, &g);
    gen_free(&g);
    /* weights in one shard, their scales in the other */
    p = path_of("fp8_sharded");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, GEN_SHARDED, &rng);
    load_and_check(p, &c, 0, 0, &g);
    gen_free(&g);
}

static void test_fp8_errors(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("fp8_errors"));
    vkh2o_mla_config c;
    tiny_config(&c);
    gen_layer g;
    const char* p = path_of("fp8_noscale.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, GEN_FP8_NO_SCALE, &rng);
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_MISSING_TENSOR, "'model.layers.0.self_attn.q_a_proj.weight_scale_inv'",
                      p);
    gen_free(&g);

    p = path_of("fp8_badscale.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, GEN_FP8_BAD_SCALE, &rng);
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_SHAPE, "'model.layers.0.self_attn.q_a_proj.weight_scale_inv'",
                      "shape [2, 1]");
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_SHAPE, "needs [1, 1]", p);
    gen_free(&g);

    p = path_of("fp8_i32scale.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, GEN_SCALE_I32, &rng);
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_DTYPE, "'model.layers.0.self_attn.q_a_proj.weight_scale_inv'", "I32");
    gen_free(&g);

    /* scale values that would silently zero or poison a block, and a NaN weight byte */
    static const struct { uint32_t flag; const char* what; } bad[] = {
        { GEN_SCALE_NAN, "is nan" }, { GEN_SCALE_ZERO, "is 0;" }, { GEN_SCALE_NEG, "is -1;" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = path_of("fp8_badvalue.safetensors");
        unlink(p);
        gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, bad[i].flag, &rng);
        expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_FORMAT, "'model.layers.0.self_attn.q_b_proj.weight_scale_inv'",
                          bad[i].what);
        expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_FORMAT, p, "must be finite and > 0");
        gen_free(&g);
    }
    p = path_of("fp8_nan.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, GEN_FP8_NAN, &rng);
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_FORMAT, "'model.layers.0.self_attn.kv_b_proj.weight': element [1, 2] is NaN",
                      p);
    gen_free(&g);

    p = path_of("fp8_norms.safetensors");
    gen_layer_file(&g, p, &c, "model.layers", 0, VKH2O_DTYPE_F8_E4M3, GEN_FP8_NORMS, &rng);
    expect_load_fails(p, &c, 0, 0, VKH2O_ERROR_DTYPE, "'model.layers.0.self_attn.q_a_layernorm.weight'", "F8_E4M3");
    gen_free(&g);
}

static void test_wrap(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("wrap"));
    vkh2o_mla_config c;
    tiny_config(&c);
    gen_layer g;
    gen_layer_file(&g, path_of("wrap.safetensors"), &c, "model.layers", 0, VKH2O_DTYPE_F32, 0, &rng);
    vkh2o_tensor_view views[VKH2O_W_COUNT];
    memset(views, 0, sizeof views);
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        if (!g.raw[w])
            continue;
        views[w] = (vkh2o_tensor_view){ .name = g.name[w], .dtype = VKH2O_DTYPE_F32, .ndim = g.ndim[w],
                                        .shape = { g.shape[w][0], g.shape[w][1] }, .data = g.raw[w] };
    }
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_mla_host_weights_wrap(&c, views, &hw, &e), VKH2O_OK);
    check_loaded(&g, &c, hw, NULL, 0);
    assert_ptr_equal(vkh2o_mla_host_weights_get_view(hw, VKH2O_W_KV_B_PROJ)->data, g.raw[VKH2O_W_KV_B_PROJ]);
    assert_null(vkh2o_mla_host_weights_get_view(hw, VKH2O_W_COUNT));
    vkh2o_mla_host_weights_destroy(hw);

    vkh2o_tensor_view bad[VKH2O_W_COUNT];
    memcpy(bad, views, sizeof bad);
    bad[VKH2O_W_O_PROJ].data = NULL;
    hw = (vkh2o_mla_host_weights*)(uintptr_t)1;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&c, bad, &hw, &e), VKH2O_ERROR_MISSING_TENSOR);
    assert_null(hw);
    assert_msg_has(&e, "o_proj");
    memcpy(bad, views, sizeof bad);
    bad[VKH2O_W_KV_B_PROJ].shape[1] = 17;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&c, bad, &hw, &e), VKH2O_ERROR_SHAPE);
    assert_msg_has(&e, "kv_b_proj");
    memcpy(bad, views, sizeof bad);
    bad[VKH2O_W_O_PROJ].dtype = VKH2O_DTYPE_F8_E4M3;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&c, bad, &hw, &e), VKH2O_ERROR_DTYPE);
    memcpy(bad, views, sizeof bad);
    bad[VKH2O_W_Q_PROJ] = views[VKH2O_W_Q_B_PROJ];   /* q_proj given with a LoRA config */
    assert_int_equal(vkh2o_mla_host_weights_wrap(&c, bad, &hw, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_msg_has(&e, "q_proj");
    gen_free(&g);
    assert_string_equal(vkh2o_mla_weight_short_name(VKH2O_W_KV_A_PROJ), "kv_a_proj_with_mqa");
    assert_string_equal(vkh2o_mla_weight_short_name(VKH2O_W_COUNT), "?");
    vkh2o_mla_host_weights_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_dtypes),      cmocka_unit_test(test_no_q_lora_and_prefix),
        cmocka_unit_test(test_missing_and_shape), cmocka_unit_test(test_fp8_edge_blocks),
        cmocka_unit_test(test_fp8_random_sharded), cmocka_unit_test(test_fp8_errors),
        cmocka_unit_test(test_wrap),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
