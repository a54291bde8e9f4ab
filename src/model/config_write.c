/* config.json in HF spelling for a vkh2o_mla_config: the flat DeepseekV3ForCausalLM layout or
 * the Kimi K2.6 multimodal wrapper (text_config), optionally with a quantization_config. The
 * one writer of the format (vkh2o-mkshard uses it); vkh2o_mla_config_from_json reads it back. */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VOCAB 163840.0

/* The shortest decimal that reads back as f (1e-05, not 9.99999974737875e-06). */
static double shortest(float f)
{
    char buf[48];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f)
            return d;
    }
    return (double)f;
}

static void add_text_keys(cJSON* j, const vkh2o_mla_config* c, const char* model_type, const char* torch_dtype)
{
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("DeepseekV3ForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", model_type);
    cJSON_AddNumberToObject(j, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->num_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->num_heads);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->num_layers);
    if (c->q_lora_rank)
        cJSON_AddNumberToObject(j, "q_lora_rank", c->q_lora_rank);
    else
        cJSON_AddNullToObject(j, "q_lora_rank");
    cJSON_AddNumberToObject(j, "kv_lora_rank", c->kv_lora_rank);
    cJSON_AddNumberToObject(j, "qk_nope_head_dim", c->qk_nope_head_dim);
    cJSON_AddNumberToObject(j, "qk_rope_head_dim", c->qk_rope_head_dim);
    cJSON_AddNumberToObject(j, "v_head_dim", c->v_head_dim);
    cJSON_AddNumberToObject(j, "rope_theta", shortest(c->rope_theta));
    cJSON_AddNumberToObject(j, "rms_norm_eps", shortest(c->rms_norm_eps));
    cJSON_AddBoolToObject(j, "attention_bias", c->attention_bias);
    cJSON_AddBoolToObject(j, "rope_interleave", c->rope_interleave);
    const double yarn = c->rope_scaling == VKH2O_ROPE_YARN;
    cJSON_AddNumberToObject(j, "max_position_embeddings",
                            yarn ? (double)c->original_max_position_embeddings * c->yarn_factor
                                 : (double)(c->original_max_position_embeddings ? c->original_max_position_embeddings
                                                                                : 4096));
    cJSON_AddNumberToObject(j, "vocab_size", VOCAB);
    cJSON_AddStringToObject(j, "torch_dtype", torch_dtype);
    if (!yarn) {
        cJSON_AddNullToObject(j, "rope_scaling");
        return;
    }
    cJSON* rs = cJSON_AddObjectToObject(j, "rope_scaling");
    cJSON_AddStringToObject(rs, "type", "yarn");
    cJSON_AddNumberToObject(rs, "factor", shortest(c->yarn_factor));
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->original_max_position_embeddings);
    cJSON_AddNumberToObject(rs, "beta_fast", shortest(c->beta_fast));
    cJSON_AddNumberToObject(rs, "beta_slow", shortest(c->beta_slow));
    cJSON_AddNumberToObject(rs, "mscale", shortest(c->mscale));
    cJSON_AddNumberToObject(rs, "mscale_all_dim", shortest(c->mscale_all_dim));
}

static void add_quant(cJSON* j, vkh2o_config_quant q)
{
    if (q == VKH2O_CONFIG_QUANT_FP8_BLOCK) {
        /* DeepSeek-V3's: F8_E4M3 weights with 128x128 weight_scale_inv blocks */
        cJSON* o = cJSON_AddObjectToObject(j, "quantization_config");
        cJSON_AddStringToObject(o, "quant_method", "fp8");
        cJSON_AddStringToObject(o, "fmt", "e4m3");
        cJSON_AddStringToObject(o, "activation_scheme", "dynamic");
        cJSON* bs = cJSON_AddArrayToObject(o, "weight_block_size");
        cJSON_AddItemToArray(bs, cJSON_CreateNumber(128));
        cJSON_AddItemToArray(bs, cJSON_CreateNumber(128));
    } else if (q == VKH2O_CONFIG_QUANT_INT4_EXPERTS) {
        /* Kimi K2.6's shape: compressed-tensors pack-quantized INT4 (groups of 32) for the
         * routed experts; attention, shared experts, the dense layer, the head and the vision
         * side are in ignore and stay BF16 */
        cJSON* o = cJSON_AddObjectToObject(j, "quantization_config");
        cJSON_AddStringToObject(o, "quant_method", "compressed-tensors");
        cJSON_AddStringToObject(o, "format", "pack-quantized");
        cJSON_AddStringToObject(o, "quantization_status", "compressed");
        cJSON* g = cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "config_groups"), "group_0");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(g, "targets"), cJSON_CreateString("Linear"));
        cJSON* w = cJSON_AddObjectToObject(g, "weights");
        cJSON_AddNumberToObject(w, "num_bits", 4);
        cJSON_AddStringToObject(w, "type", "int");
        cJSON_AddBoolToObject(w, "symmetric", true);
        cJSON_AddNumberToObject(w, "group_size", 32);
        cJSON_AddStringToObject(w, "strategy", "group");
        cJSON_AddBoolToObject(w, "dynamic", false);
        cJSON* ig = cJSON_AddArrayToObject(o, "ignore");
        static const char* const pats[] = { "lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:vision_tower.*",
                                            "re:mm_projector.*" };
        for (size_t i = 0; i < sizeof pats / sizeof *pats; i++)
            cJSON_AddItemToArray(ig, cJSON_CreateString(pats[i]));
    }
}

char* vkh2o_tmp_path(const char* path)
{
    const size_t n = strlen(path) + 32;
    char* tmp = malloc(n);
    if (tmp)
        snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    return tmp;
}

vkh2o_result vkh2o_write_text_tmp(const char* path, const char* tmp, const char* text, bool newline, vkh2o_error* err)
{
    FILE* f = fopen(tmp, "wx");
    bool created = f != NULL;
    bool ok = f && fputs(text, f) >= 0 && (!newline || fputc('\n', f) != EOF);
    ok = f && fclose(f) == 0 && ok;
    if (ok)
        return VKH2O_OK;
    vkh2o_result r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
    if (created)
        unlink(tmp);   /* only ever our own exclusively created file */
    return r;
}

vkh2o_result vkh2o_mla_config_write_json(const char* path, const vkh2o_mla_config* cfg,
                                         const vkh2o_config_json_desc* desc, vkh2o_error* err)
{
    if (!path || !cfg)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_config_write_json: NULL argument");
    char* tmp = vkh2o_tmp_path(path);
    if (!tmp)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    vkh2o_result r = vkh2o_mla_config_write_json_tmp(path, tmp, cfg, desc, err);
    if (r == VKH2O_OK && rename(tmp, path) != 0) {
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return r;
}

vkh2o_result vkh2o_mla_config_write_json_tmp(const char* path, const char* tmp, const vkh2o_mla_config* cfg,
                                             const vkh2o_config_json_desc* desc, vkh2o_error* err)
{
    if (!path || !tmp || !cfg)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_config_write_json: NULL argument");
    vkh2o_config_json_desc d = desc ? *desc : (vkh2o_config_json_desc){ 0 };
    if ((unsigned)d.layout > VKH2O_CONFIG_LAYOUT_KIMI_K25 || (unsigned)d.quant > VKH2O_CONFIG_QUANT_INT4_EXPERTS)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_config_write_json: unknown layout %d or "
                               "quantization %d", (int)d.layout, (int)d.quant);
    VKH2O_CHECK(vkh2o_mla_config_validate(cfg, err));
    const char* dt = d.torch_dtype ? d.torch_dtype : "bfloat16";
    cJSON* j = cJSON_CreateObject();
    if (!j)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    for (const char* const* kv = d.extra; kv && kv[0] && kv[1]; kv += 2)
        cJSON_AddStringToObject(j, kv[0], kv[1]);
    if (d.layout == VKH2O_CONFIG_LAYOUT_KIMI_K25) {
        cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("KimiK25ForConditionalGeneration"));
        cJSON_AddStringToObject(j, "model_type", "kimi_k25");
        cJSON_AddStringToObject(j, "torch_dtype", dt);
        cJSON* text = cJSON_AddObjectToObject(j, "text_config");
        add_text_keys(text, cfg, "kimi_k2", dt);
        add_quant(text, d.quant);
        /* the vision side's own settings, which the text model must never pick up */
        cJSON* vc = cJSON_AddObjectToObject(j, "vision_config");
        cJSON_AddNumberToObject(vc, "hidden_size", 1152);
        cJSON_AddNumberToObject(vc, "num_attention_heads", 16);
        cJSON_AddNumberToObject(vc, "num_hidden_layers", 27);
    } else {
        add_text_keys(j, cfg, "deepseek_v3", dt);
        add_quant(j, d.quant);
    }
    char* text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    vkh2o_result r = vkh2o_write_text_tmp(path, tmp, text, true, err);
    free(text);
    return r;
}
