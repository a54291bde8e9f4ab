/* The MLA layer config: Kimi K2.6 defaults, HF config.json parsing, validation, and the
 * derived numbers (softmax scale, YaRN RoPE frequencies, parameter count) with the exact
 * semantics of HF transformers' DeepseekV3 (modeling_deepseek_v3 + rope_utils). */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONFIG_MAX_BYTES (16u << 20)
/* Dimension limits: generous for any real MLA model, small enough that every product the
 * library forms (heads x head_dim x rank) fits in 32 bits. */
#define MAX_DIM 65536u
#define MAX_HEADS 1024u

/* The published text-model configs, one source for the library, vkh2o-mkshard and the demo.
 * Every preset shares the DeepSeek-V3 MLA shapes except num_heads; what differs is noted.
 * Sources (see docs/MODELS.md, "Presets"): the models' config.json on Hugging Face as
 * transcribed by vLLM's Kimi-K2.5 kernels and tests, NVIDIA's Megatron configs and the model
 * cards. max_position_embeddings is not stored: each preset's equals
 * original_max_position_embeddings x factor (262144, 131072, 262144, 163840). */
typedef struct preset {
    const char* name;
    const char* title;
    uint32_t heads;
    float theta, factor, beta_fast, beta_slow, eps;
} preset;

static const preset presets[] = {
    /* text_config of KimiK25ForConditionalGeneration (model_type kimi_k25 / kimi_k2) */
    { "kimi-k2.6", "Kimi K2.6", 64, 50000.0f, 64.0f, 32.0f, 1.0f, 1e-5f },
    { "kimi-k2-instruct", "Kimi K2-Instruct", 64, 50000.0f, 32.0f, 1.0f, 1.0f, 1e-6f },
    { "kimi-k2-thinking", "Kimi K2-Thinking", 64, 50000.0f, 64.0f, 1.0f, 1.0f, 1e-6f },
    { "deepseek-v3", "DeepSeek-V3", 128, 10000.0f, 40.0f, 32.0f, 1.0f, 1e-6f },
};
#define NPRESETS (sizeof presets / sizeof presets[0])

static void fill_preset(const preset* p, vkh2o_mla_config* cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->num_layers = 61;
    cfg->hidden_size = 7168;
    cfg->num_heads = p->heads;
    cfg->q_lora_rank = 1536;
    cfg->kv_lora_rank = 512;
    cfg->qk_nope_head_dim = 128;
    cfg->qk_rope_head_dim = 64;
    cfg->v_head_dim = 128;
    cfg->rope_theta = p->theta;
    cfg->rope_scaling = VKH2O_ROPE_YARN;
    cfg->yarn_factor = p->factor;
    cfg->original_max_position_embeddings = 4096;
    cfg->beta_fast = p->beta_fast;
    cfg->beta_slow = p->beta_slow;
    cfg->mscale = 1.0f;
    cfg->mscale_all_dim = 1.0f;
    cfg->rope_interleave = true;
    cfg->rms_norm_eps = p->eps;
    cfg->attention_bias = false;
}

void vkh2o_mla_config_kimi_k26(vkh2o_mla_config* cfg)
{
    fill_preset(&presets[0], cfg);
}

const char* vkh2o_mla_config_preset_name(uint32_t i)
{
    return i < NPRESETS ? presets[i].name : NULL;
}

const char* vkh2o_mla_config_preset_title(uint32_t i)
{
    return i < NPRESETS ? presets[i].title : NULL;
}

vkh2o_result vkh2o_mla_config_preset(const char* name, vkh2o_mla_config* cfg, vkh2o_error* err)
{
    if (!name || !cfg)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_config_preset: NULL argument");
    for (uint32_t i = 0; i < NPRESETS; i++) {
        if (!strcmp(name, presets[i].name)) {
            fill_preset(&presets[i], cfg);
            return VKH2O_OK;
        }
    }
    char list[256] = "";
    for (uint32_t i = 0; i < NPRESETS; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", presets[i].name);
    return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "config preset '%s' is not one of %s", name, list);
}

uint32_t vkh2o_mla_qk_head_dim(const vkh2o_mla_config* cfg)
{
    return cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
}

/* HF yarn_get_mscale / get_mscale */
static double yarn_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

float vkh2o_mla_softmax_scale(const vkh2o_mla_config* cfg)
{
    double s = 1.0 / sqrt((double)vkh2o_mla_qk_head_dim(cfg));
    if (cfg->rope_scaling == VKH2O_ROPE_YARN && cfg->mscale_all_dim != 0.0f) {
        double m = yarn_mscale(cfg->yarn_factor, cfg->mscale_all_dim);
        s *= m * m;
    }
    return (float)s;
}

/* HF find_correction_range with truncate=True */
static void correction_range(const vkh2o_mla_config* cfg, double* low, double* high)
{
    const double dim = cfg->qk_rope_head_dim, base = cfg->rope_theta;
    const double two_pi = 2.0 * 3.14159265358979323846;
    const double omp = cfg->original_max_position_embeddings;
    double corr_fast = dim * log(omp / (cfg->beta_fast * two_pi)) / (2.0 * log(base));
    double corr_slow = dim * log(omp / (cfg->beta_slow * two_pi)) / (2.0 * log(base));
    double lo = floor(corr_fast), hi = ceil(corr_slow);
    *low = lo < 0.0 ? 0.0 : lo;
    *high = hi > dim - 1.0 ? dim - 1.0 : hi;
}

void vkh2o_mla_yarn_correction_range(const vkh2o_mla_config* cfg, uint32_t* low, uint32_t* high)
{
    double lo = 0.0, hi = 0.0;
    if (cfg->rope_scaling == VKH2O_ROPE_YARN)
        correction_range(cfg, &lo, &hi);
    if (low)
        *low = (uint32_t)lo;
    if (high)
        *high = (uint32_t)hi;
}

void vkh2o_mla_rope_params(const vkh2o_mla_config* cfg, float* inv_freq, float* attention_factor)
{
    const uint32_t dim = cfg->qk_rope_head_dim, half = dim / 2;
    const double base = cfg->rope_theta;
    if (cfg->rope_scaling != VKH2O_ROPE_YARN) {
        for (uint32_t i = 0; i < half; i++)
            inv_freq[i] = (float)(1.0 / pow(base, (2.0 * i) / dim));
        if (attention_factor)
            *attention_factor = 1.0f;
        return;
    }
    const double factor = cfg->yarn_factor;
    double af;
    if (cfg->mscale != 0.0f && cfg->mscale_all_dim != 0.0f)
        af = yarn_mscale(factor, cfg->mscale) / yarn_mscale(factor, cfg->mscale_all_dim);
    else
        af = yarn_mscale(factor, 1.0);
    double low, high;
    correction_range(cfg, &low, &high);
    if (low == high)
        high += 0.001;   /* HF: prevent a division by zero in the ramp */
    for (uint32_t i = 0; i < half; i++) {
        double pos_freq = pow(base, (2.0 * i) / dim);
        double inv_extra = 1.0 / pos_freq;
        double inv_inter = 1.0 / (factor * pos_freq);
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        double extra = 1.0 - ramp;
        inv_freq[i] = (float)(inv_inter * (1.0 - extra) + inv_extra * extra);
    }
    if (attention_factor)
        *attention_factor = (float)af;
}

uint64_t vkh2o_mla_param_count(const vkh2o_mla_config* c)
{
    uint64_t H = c->num_heads, D = c->hidden_size, qk = vkh2o_mla_qk_head_dim(c);
    uint64_t n = 0;
    if (c->q_lora_rank)
        n += (uint64_t)c->q_lora_rank * D + c->q_lora_rank + H * qk * c->q_lora_rank;
    else
        n += H * qk * D;
    n += ((uint64_t)c->kv_lora_rank + c->qk_rope_head_dim) * D + c->kv_lora_rank;
    n += H * ((uint64_t)c->qk_nope_head_dim + c->v_head_dim) * c->kv_lora_rank;
    n += D * H * c->v_head_dim;
    return n;
}

static bool finite_pos(float x)
{
    return isfinite(x) && x > 0.0f;
}

vkh2o_result vkh2o_mla_config_validate(const vkh2o_mla_config* c, vkh2o_error* err)
{
#define BAD(...) return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, __VA_ARGS__)
    if (!c)
        BAD("mla config: NULL");
    if (c->hidden_size == 0 || c->hidden_size > MAX_DIM)
        BAD("mla config: hidden_size %u out of range [1, %u]", c->hidden_size, MAX_DIM);
    if (c->num_heads == 0 || c->num_heads > MAX_HEADS)
        BAD("mla config: num_heads %u out of range [1, %u]", c->num_heads, MAX_HEADS);
    if (c->q_lora_rank > MAX_DIM)
        BAD("mla config: q_lora_rank %u out of range [0, %u]", c->q_lora_rank, MAX_DIM);
    if (c->kv_lora_rank == 0 || c->kv_lora_rank > MAX_DIM)
        BAD("mla config: kv_lora_rank %u out of range [1, %u]", c->kv_lora_rank, MAX_DIM);
    if (c->qk_nope_head_dim == 0 || c->qk_nope_head_dim > 4096)
        BAD("mla config: qk_nope_head_dim %u out of range [1, 4096]", c->qk_nope_head_dim);
    if (c->qk_rope_head_dim == 0 || c->qk_rope_head_dim > 4096 || c->qk_rope_head_dim % 2)
        BAD("mla config: qk_rope_head_dim %u must be even and in [2, 4096]", c->qk_rope_head_dim);
    if (c->v_head_dim == 0 || c->v_head_dim > 4096)
        BAD("mla config: v_head_dim %u out of range [1, 4096]", c->v_head_dim);
    if (!finite_pos(c->rope_theta) || c->rope_theta <= 1.0f)
        BAD("mla config: rope_theta %g must be finite and > 1", (double)c->rope_theta);
    if (!finite_pos(c->rms_norm_eps) || c->rms_norm_eps >= 1.0f)
        BAD("mla config: rms_norm_eps %g must be in (0, 1)", (double)c->rms_norm_eps);
    if (c->attention_bias)
        BAD("mla config: attention_bias = true is not supported (DeepSeek-V3/Kimi have none)");
    if (c->rope_scaling != VKH2O_ROPE_NONE && c->rope_scaling != VKH2O_ROPE_YARN)
        BAD("mla config: unknown rope_scaling %d", (int)c->rope_scaling);
    if (c->rope_scaling == VKH2O_ROPE_YARN) {
        if (!isfinite(c->yarn_factor) || c->yarn_factor < 1.0f)
            BAD("mla config: yarn factor %g must be finite and >= 1", (double)c->yarn_factor);
        if (c->original_max_position_embeddings == 0)
            BAD("mla config: original_max_position_embeddings must be > 0 with yarn");
        if (!finite_pos(c->beta_fast) || !finite_pos(c->beta_slow))
            BAD("mla config: yarn beta_fast %g and beta_slow %g must be finite and > 0", (double)c->beta_fast,
                (double)c->beta_slow);
        if (!isfinite(c->mscale) || c->mscale < 0.0f || !isfinite(c->mscale_all_dim) || c->mscale_all_dim < 0.0f)
            BAD("mla config: yarn mscale %g and mscale_all_dim %g must be finite and >= 0", (double)c->mscale,
                (double)c->mscale_all_dim);
        /* and what they give must be too: huge mscales overflow the softmax scale (found by
         * fuzz_config: mscale_all_dim 3e38 validated, then the scale was inf) */
        double af = c->mscale != 0.0f && c->mscale_all_dim != 0.0f
                        ? yarn_mscale(c->yarn_factor, c->mscale) / yarn_mscale(c->yarn_factor, c->mscale_all_dim)
                        : yarn_mscale(c->yarn_factor, 1.0);
        float scale = vkh2o_mla_softmax_scale(c);
        if (!isfinite(scale) || !(scale > 0.0f) || !isfinite((float)af))
            BAD("mla config: yarn factor %g with mscale %g / mscale_all_dim %g gives a softmax scale of %g and an "
                "attention factor of %g (not finite)", (double)c->yarn_factor, (double)c->mscale,
                (double)c->mscale_all_dim, (double)scale, af);
    }
#undef BAD
    return VKH2O_OK;
}

/* ------------------------------------------------------------------------------------------
 * config.json
 * ---------------------------------------------------------------------------------------- */

typedef struct json_src {
    const char* path;
    const cJSON* text;      /* "text_config" when present (looked at first) */
    const cJSON* root;
} json_src;

static const cJSON* get(const json_src* s, const char* key)
{
    const cJSON* v = s->text ? cJSON_GetObjectItemCaseSensitive(s->text, key) : NULL;
    return v ? v : cJSON_GetObjectItemCaseSensitive(s->root, key);
}

/* where: "" or "rope_scaling." for messages */
static vkh2o_result read_u32(const json_src* s, const cJSON* v, const char* where, const char* key, uint32_t min,
                             uint32_t* out, vkh2o_error* err)
{
    if (!v)
        return VKH2O_OK;
    if (!cJSON_IsNumber(v))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"%s%s\" is not a number", s->path, where, key);
    double d = v->valuedouble;
    if (d != floor(d) || d < (double)min || d > (double)UINT32_MAX)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: \"%s%s\" = %g is not an integer in [%u, %u]",
                               s->path, where, key, d, min, UINT32_MAX);
    *out = (uint32_t)d;
    return VKH2O_OK;
}

static vkh2o_result read_f32(const json_src* s, const cJSON* v, const char* where, const char* key, float* out,
                             vkh2o_error* err)
{
    if (!v)
        return VKH2O_OK;
    if (!cJSON_IsNumber(v))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"%s%s\" is not a number", s->path, where, key);
    double d = v->valuedouble;
    if (!isfinite(d) || fabs(d) > 3.0e38)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: \"%s%s\" = %g is out of float range", s->path,
                               where, key, d);
    *out = (float)d;
    return VKH2O_OK;
}

static vkh2o_result read_bool(const json_src* s, const cJSON* v, const char* key, bool* out, vkh2o_error* err)
{
    if (!v)
        return VKH2O_OK;
    if (!cJSON_IsBool(v))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"%s\" is not true/false", s->path, key);
    *out = cJSON_IsTrue(v);
    return VKH2O_OK;
}

/* One rope_scaling / rope_parameters object. Inside a yarn object, absent keys take HF's
 * defaults (rope_utils._compute_yarn_parameters), not the values already in cfg. */
static vkh2o_result read_rope(const json_src* s, const cJSON* rs, const char* where, uint32_t max_pos,
                              vkh2o_mla_config* cfg, vkh2o_error* err)
{
    char w[64];
    snprintf(w, sizeof w, "%s.", where);
    if (cJSON_IsNull(rs))
        return VKH2O_OK;
    if (!cJSON_IsObject(rs))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"%s\" is not an object or null", s->path, where);
    VKH2O_CHECK(read_f32(s, cJSON_GetObjectItemCaseSensitive(rs, "rope_theta"), w, "rope_theta", &cfg->rope_theta, err));
    const cJSON* ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    const char* tkey = "rope_type";
    if (!ty) {
        ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
        tkey = "type";
    }
    if (ty && !cJSON_IsString(ty))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"%s%s\" is not a string", s->path, w, tkey);
    const char* type = ty ? ty->valuestring : "default";
    if (!strcmp(type, "default")) {
        cfg->rope_scaling = VKH2O_ROPE_NONE;
        return VKH2O_OK;
    }
    if (strcmp(type, "yarn") != 0)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "%s: \"%s%s\" = '%s' is not supported (yarn or default)", s->path, w, tkey, type);
    const cJSON* fac = cJSON_GetObjectItemCaseSensitive(rs, "factor");
    if (!fac)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"%sfactor\" is required with yarn", s->path, w);
    if (cJSON_GetObjectItemCaseSensitive(rs, "attention_factor"))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "%s: \"%sattention_factor\" (an explicit override) is not supported", s->path, w);
    const cJSON* tr = cJSON_GetObjectItemCaseSensitive(rs, "truncate");
    if (tr && !cJSON_IsTrue(tr))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: \"%struncate\" other than true is not supported",
                               s->path, w);
    cfg->rope_scaling = VKH2O_ROPE_YARN;
    cfg->beta_fast = 32.0f;
    cfg->beta_slow = 1.0f;
    cfg->mscale = 0.0f;
    cfg->mscale_all_dim = 0.0f;
    if (max_pos)
        cfg->original_max_position_embeddings = max_pos;
    VKH2O_CHECK(read_f32(s, fac, w, "factor", &cfg->yarn_factor, err));
    VKH2O_CHECK(read_u32(s, cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings"), w,
                         "original_max_position_embeddings", 1, &cfg->original_max_position_embeddings, err));
    static const char* fkeys[] = { "beta_fast", "beta_slow", "mscale", "mscale_all_dim" };
    float* fdst[] = { &cfg->beta_fast, &cfg->beta_slow, &cfg->mscale, &cfg->mscale_all_dim };
    for (int i = 0; i < 4; i++) {
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(rs, fkeys[i]);
        if (cJSON_IsNull(v))
            continue;   /* HF: None -> default */
        VKH2O_CHECK(read_f32(s, v, w, fkeys[i], fdst[i], err));
    }
    return VKH2O_OK;
}

static vkh2o_result parse_config(const json_src* s, vkh2o_mla_config* cfg, vkh2o_error* err)
{
    static const struct {
        const char* key;
        size_t off;
        uint32_t min;
    } u32_keys[] = {
        { "hidden_size", offsetof(vkh2o_mla_config, hidden_size), 1 },
        { "num_attention_heads", offsetof(vkh2o_mla_config, num_heads), 1 },
        { "kv_lora_rank", offsetof(vkh2o_mla_config, kv_lora_rank), 1 },
        { "qk_nope_head_dim", offsetof(vkh2o_mla_config, qk_nope_head_dim), 1 },
        { "qk_rope_head_dim", offsetof(vkh2o_mla_config, qk_rope_head_dim), 2 },
        { "v_head_dim", offsetof(vkh2o_mla_config, v_head_dim), 1 },
        { "num_hidden_layers", offsetof(vkh2o_mla_config, num_layers), 1 },
    };
    for (size_t i = 0; i < sizeof u32_keys / sizeof u32_keys[0]; i++)
        VKH2O_CHECK(read_u32(s, get(s, u32_keys[i].key), "", u32_keys[i].key, u32_keys[i].min,
                             (uint32_t*)((char*)cfg + u32_keys[i].off), err));
    const cJSON* ql = get(s, "q_lora_rank");
    if (cJSON_IsNull(ql))
        cfg->q_lora_rank = 0;   /* a plain q_proj (DeepSeek-V2-Lite style) */
    else
        VKH2O_CHECK(read_u32(s, ql, "", "q_lora_rank", 1, &cfg->q_lora_rank, err));
    VKH2O_CHECK(read_f32(s, get(s, "rope_theta"), "", "rope_theta", &cfg->rope_theta, err));
    VKH2O_CHECK(read_f32(s, get(s, "rms_norm_eps"), "", "rms_norm_eps", &cfg->rms_norm_eps, err));
    VKH2O_CHECK(read_bool(s, get(s, "attention_bias"), "attention_bias", &cfg->attention_bias, err));
    cfg->rope_interleave = true;   /* HF DeepseekV3Config's default */
    VKH2O_CHECK(read_bool(s, get(s, "rope_interleave"), "rope_interleave", &cfg->rope_interleave, err));

    uint32_t max_pos = 0;
    VKH2O_CHECK(read_u32(s, get(s, "max_position_embeddings"), "", "max_position_embeddings", 1, &max_pos, err));
    /* The file decides the scaling: no rope_scaling/rope_parameters (or null) means plain RoPE. */
    const cJSON* rs = get(s, "rope_scaling");
    const cJSON* rp = get(s, "rope_parameters");
    cfg->rope_scaling = VKH2O_ROPE_NONE;
    if (rs)
        VKH2O_CHECK(read_rope(s, rs, "rope_scaling", max_pos, cfg, err));
    if (rp)   /* transformers v5 spelling; wins when both are present */
        VKH2O_CHECK(read_rope(s, rp, "rope_parameters", max_pos, cfg, err));
    return VKH2O_OK;
}

/* The multimodal wrapper (model_type kimi_k25) keeps the text model under text_config; with
 * a text_config every MLA shape key must be in it, so that none silently comes from the top
 * level (the vision tower's) or from the preset. */
static vkh2o_result check_nesting_err(const json_src* s, vkh2o_error* err)
{
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(s->root, "model_type");
    if (cJSON_IsString(mt) && !strcmp(mt->valuestring, "kimi_k25") && !s->text)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                               "%s: model_type 'kimi_k25' (KimiK25ForConditionalGeneration) needs a \"text_config\" "
                               "holding the text model's settings", s->path);
    if (!s->text)
        return VKH2O_OK;
    static const char* const required[] = { "hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
                                            "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim" };
    for (size_t i = 0; i < sizeof required / sizeof *required; i++)
        if (!cJSON_GetObjectItemCaseSensitive(s->text, required[i]))
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"text_config\" lacks the required key \"%s\"",
                                   s->path, required[i]);
    return VKH2O_OK;
}

/* ---- quantization_config: does it cover an attention projection? ---- */

static const char* const attn_modules[] = { "q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj",
                                            "o_proj" };
/* The spellings a layer's modules have in the checkpoints we read (weights.c's prefixes). */
static const char* const module_prefixes[] = { "model.layers", "language_model.model.layers", "language_model.layers" };

/* compressed-tensors' matching of a target / ignore entry: "re:<regex>" matched from the start
 * of the module name (Python re.match), "Linear" the layer class (every projection here is
 * one), anything else the exact module name. -1: a pattern POSIX regex cannot compile. */
static int module_matches(const char* pat, const char* module)
{
    if (!strcmp(pat, "Linear"))
        return 1;
    if (strncmp(pat, "re:", 3) != 0)
        return !strcmp(pat, module);
    char anchored[512];
    if (snprintf(anchored, sizeof anchored, "^(%s)", pat + 3) >= (int)sizeof anchored)
        return -1;
    regex_t re;
    if (regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB) != 0)
        return -1;
    int m = regexec(&re, module, 0, NULL, 0) == 0;
    regfree(&re);
    return m;
}

/* 1 when some string of the array matches, 0 when none, -1 (with *bad set) on a bad pattern */
static int any_matches(const cJSON* arr, const char* module, const char** bad)
{
    const cJSON* it;
    cJSON_ArrayForEach(it, arr)
    {
        if (!cJSON_IsString(it))
            continue;
        int m = module_matches(it->valuestring, module);
        if (m < 0) {
            *bad = it->valuestring;
            return -1;
        }
        if (m)
            return 1;
    }
    return 0;
}

static vkh2o_result read_compressed_tensors(const char* path, const cJSON* q, uint32_t layers, vkh2o_error* err)
{
    const cJSON* groups = cJSON_GetObjectItemCaseSensitive(q, "config_groups");
    const cJSON* ignore = cJSON_GetObjectItemCaseSensitive(q, "ignore");
    const cJSON* fmt = cJSON_GetObjectItemCaseSensitive(q, "format");
    const char* fmt_s = cJSON_IsString(fmt) ? fmt->valuestring : "?";
    if (groups && !cJSON_IsObject(groups))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"quantization_config.config_groups\" is not an object",
                               path);
    if (ignore && !cJSON_IsArray(ignore) && !cJSON_IsNull(ignore))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"quantization_config.ignore\" is not a list", path);
    const cJSON* g;
    cJSON_ArrayForEach(g, groups)
    {
        const cJSON* targets = cJSON_IsObject(g) ? cJSON_GetObjectItemCaseSensitive(g, "targets") : NULL;
        if (!cJSON_IsArray(targets))
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                                   "%s: \"quantization_config.config_groups.%s.targets\" is not a list", path,
                                   g->string);
        const cJSON* gf = cJSON_GetObjectItemCaseSensitive(g, "format");
        const char* gfmt = cJSON_IsString(gf) ? gf->valuestring : fmt_s;
        /* A module counts as quantised when a target names it in any of its spellings and no
         * ignore entry does: an ignore list speaks in the checkpoint's own names. */
        for (uint32_t L = 0; L < layers; L++)
            for (size_t m = 0; m < sizeof attn_modules / sizeof *attn_modules; m++) {
                char first[160] = "";
                bool ignored = false;
                for (size_t p = 0; p < sizeof module_prefixes / sizeof *module_prefixes && !ignored; p++) {
                    char mod[160];
                    snprintf(mod, sizeof mod, "%s.%u.self_attn.%s", module_prefixes[p], L, attn_modules[m]);
                    const char* bad = NULL;
                    int t = any_matches(targets, mod, &bad);
                    int ig = t >= 0 ? any_matches(ignore, mod, &bad) : 0;
                    if (t < 0 || ig < 0)
                        return vkh2o_error_set(err, VKH2O_ERROR_UNSUPPORTED,
                                               "%s: quantization_config pattern '%s' is not a regex vkh2o can read, "
                                               "so it cannot tell whether the attention weights are quantised",
                                               path, bad);
                    ignored = ig > 0;
                    if (t > 0 && !first[0])
                        snprintf(first, sizeof first, "%s", mod);
                }
                if (first[0] && !ignored)
                    return vkh2o_error_set(err, VKH2O_ERROR_UNSUPPORTED,
                                           "%s: quantization_config (compressed-tensors, format '%s') quantises "
                                           "attention weight '%s' (config_groups.%s targets it and 'ignore' "
                                           "does not exclude it); vkh2o reads attention weights only as BF16, "
                                           "F16, F32 or F8_E4M3 with 128x128 weight_scale_inv blocks",
                                           path, gfmt, first, g->string);
            }
    }
    return VKH2O_OK;
}

/* The checkpoint's quantization_config (top level or in text_config), checked against what the
 * weight loader reads. None, or one that leaves every attention projection alone: fine. */
static vkh2o_result read_quant(const json_src* s, uint32_t layers, vkh2o_error* err)
{
    const cJSON* q = get(s, "quantization_config");
    if (!q || cJSON_IsNull(q))
        return VKH2O_OK;
    if (!cJSON_IsObject(q))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"quantization_config\" is not an object", s->path);
    const cJSON* m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    if (!cJSON_IsString(m))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"quantization_config.quant_method\" is not a string",
                               s->path);
    if (!strcmp(m->valuestring, "fp8")) {
        const cJSON* fmt = cJSON_GetObjectItemCaseSensitive(q, "fmt");
        if (fmt && (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "e4m3") != 0))
            return vkh2o_error_set(err, VKH2O_ERROR_UNSUPPORTED,
                                   "%s: \"quantization_config.fmt\" must be \"e4m3\" (F8_E4M3 weights)", s->path);
        const cJSON* bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
        if (bs && !(cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 &&
                    cJSON_IsNumber(cJSON_GetArrayItem(bs, 0)) && cJSON_GetArrayItem(bs, 0)->valuedouble == 128.0 &&
                    cJSON_IsNumber(cJSON_GetArrayItem(bs, 1)) && cJSON_GetArrayItem(bs, 1)->valuedouble == 128.0))
            return vkh2o_error_set(err, VKH2O_ERROR_UNSUPPORTED,
                                   "%s: \"quantization_config.weight_block_size\" must be [128, 128] (the blocks of "
                                   "weight_scale_inv that vkh2o reads)", s->path);
        return VKH2O_OK;
    }
    if (!strcmp(m->valuestring, "compressed-tensors"))
        return read_compressed_tensors(s->path, q, layers, err);
    return vkh2o_error_set(err, VKH2O_ERROR_UNSUPPORTED,
                           "%s: \"quantization_config.quant_method\" = '%s' is not read (fp8 with 128x128 blocks, or "
                           "compressed-tensors leaving self_attn unquantised)", s->path, m->valuestring);
}

vkh2o_result vkh2o_mla_config_from_json(const char* path, vkh2o_mla_config* cfg, vkh2o_error* err)
{
    if (!path || !cfg)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_config_from_json: NULL argument");
    cJSON* root;
    VKH2O_CHECK(vkh2o_read_json_file(NULL, path, CONFIG_MAX_BYTES, &root, err));
    vkh2o_result r;
    if (!cJSON_IsObject(root)) {
        r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: not a JSON object", path);
    } else {
        json_src s = { path, NULL, root };
        const cJSON* tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (tc && !cJSON_IsObject(tc)) {
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"text_config\" is not an object", path);
        } else {
            s.text = tc;
            r = check_nesting_err(&s, err);
        }
        if (r == VKH2O_OK) {
            vkh2o_mla_config tmp = *cfg;   /* *cfg untouched on failure */
            r = parse_config(&s, &tmp, err);
            if (r == VKH2O_OK)
                r = read_quant(&s, tmp.num_layers ? tmp.num_layers : 1, err);
            if (r == VKH2O_OK) {
                vkh2o_error inner = { 0 };
                r = vkh2o_mla_config_validate(&tmp, &inner);
                if (r != VKH2O_OK)
                    vkh2o_error_set(err, r, "%s: %s", path, inner.message);
            }
            if (r == VKH2O_OK)
                *cfg = tmp;
        }
    }
    cJSON_Delete(root);
    return r;
}
