/*
 * vkh2o/lm.h — a whole DeepSeek-V3-architecture language model on the device (batch 1):
 *
 *   tokens -> model.embed_tokens -> per layer: input_layernorm -> MLA attention (vkh2o/mla.h)
 *   -> residual -> post_attention_layernorm -> SwiGLU MLP (gate_proj, up_proj, down_proj)
 *   -> residual;  then model.norm -> lm_head -> logits, log-probabilities.
 *
 * Loaded from an HF-style directory: config.json (DeepseekV3 keys, possibly nested under
 * "text_config") and safetensors with the DeepseekV3ForCausalLM tensor names (one file, an
 * index, or shards). Dense MLP layers only: a config with routed experts in any layer
 * (n_routed_experts > 0 and first_k_dense_replace < num_hidden_layers) is refused, naming
 * first_k_dense_replace.
 *
 * This header has the full-cache forward (a plain causal forward over a window: the baseline
 * every cache policy is compared with). Included by vkh2o.h; do not include directly.
 *
 * Threads: a model belongs to its context (one thread at a time, as the context).
 */
#ifndef VKH2O_LM_H
#define VKH2O_LM_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkh2o_model vkh2o_model;

/* The whole-model settings beyond one attention layer's (attn: vkh2o_mla_config, whose
 * num_layers is num_hidden_layers and whose rms_norm_eps is the decoder norms'). */
typedef struct vkh2o_model_config {
    vkh2o_mla_config attn;
    uint32_t vocab_size;
    uint32_t intermediate_size;          /* the dense MLP's */
    uint32_t first_k_dense_replace;      /* layers below it are dense; = num_layers when no MoE */
    uint32_t n_routed_experts;           /* 0 when the config has none (null or absent) */
    bool tie_word_embeddings;            /* lm_head shares model.embed_tokens */
} vkh2o_model_config;

/* Reads config.json (see vkh2o_mla_config_from_json for the attention keys; the defaults of
 * keys absent there are Kimi K2.6's, so a model config should spell its shapes out). Results:
 * OK, IO, FORMAT, INVALID_ARGUMENT (a value out of range or missing: vocab_size,
 * intermediate_size, num_hidden_layers), UNSUPPORTED (MoE layers); err names file and key. */
VKH2O_API vkh2o_result vkh2o_model_config_from_json(const char* path, vkh2o_model_config* cfg, vkh2o_error* err);

/*
 * Model desc; all zero is valid:
 *   max_seq_len  longest window a forward accepts (0 = 512); device scratch is sized for it.
 */
typedef struct vkh2o_model_desc {
    uint32_t max_seq_len;
    uint32_t flags;              /* reserved, 0 */
} vkh2o_model_desc;

/* Opens dir (a directory with config.json and its weights: model.safetensors.index.json and
 * shards, else model.safetensors, else its one .safetensors file; or a .safetensors file with
 * config.json beside it), checks every tensor against the config and uploads the weights.
 * ctx must outlive the model. Results: OK, IO, FORMAT, MISSING_TENSOR, SHAPE, DTYPE,
 * INVALID_ARGUMENT, UNSUPPORTED, OUT_OF_DEVICE_MEMORY, OUT_OF_HOST_MEMORY, VULKAN; the message
 * (file, tensor, problem) is in vkh2o_last_error(ctx). *out is NULL on failure. */
VKH2O_API vkh2o_result vkh2o_model_create(vkh2o_context* ctx, const char* dir, const vkh2o_model_desc* desc,
                                          vkh2o_model** out);
/* Frees the device memory; the device must be done with the model. Accepts NULL. */
VKH2O_API void vkh2o_model_destroy(vkh2o_model* m);
VKH2O_API const vkh2o_model_config* vkh2o_model_get_config(const vkh2o_model* m);
/* Device bytes of the weights: their elements in the stored dtypes (norm weights as f32),
 * without the row padding of the upload (under 16 bytes a row). */
VKH2O_API uint64_t vkh2o_model_get_weight_bytes(const vkh2o_model* m);

/*
 * Host convenience: one causal forward over tokens[0 .. n) at positions 0 .. n-1 with the full
 * cache; waits. logits [n, vocab] (may be NULL); next_logprobs [n - 1] (may be NULL):
 * next_logprobs[i] = log p(tokens[i + 1] | tokens[0 .. i]). Results: OK, INVALID_ARGUMENT
 * (n 0 or above max_seq_len, a token id >= vocab_size), OUT_OF_DEVICE_MEMORY, TIMEOUT, VULKAN.
 */
VKH2O_API vkh2o_result vkh2o_run_model_forward(vkh2o_model* m, const uint32_t* tokens, uint32_t n, float* logits,
                                               float* next_logprobs);

#ifdef __cplusplus
}
#endif
#endif
