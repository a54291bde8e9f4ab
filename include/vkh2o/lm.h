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
    uint32_t max_position_embeddings;    /* the longest sequence the model was made for; 0 when
                                            config.json does not say */
} vkh2o_model_config;

/* Reads config.json (see vkh2o_mla_config_from_json for the attention keys; the defaults of
 * keys absent there are Kimi K2.6's, so a model config should spell its shapes out). Results:
 * OK, IO, FORMAT, INVALID_ARGUMENT (a value out of range or missing: vocab_size,
 * intermediate_size, num_hidden_layers), UNSUPPORTED (MoE layers); err names file and key. */
VKH2O_API vkh2o_result vkh2o_model_config_from_json(const char* path, vkh2o_model_config* cfg, vkh2o_error* err);

/*
 * Model desc; all zero is valid:
 *   max_seq_len  longest window a forward accepts (0 = 512); device scratch is sized for it.
 *   max_obs_window  longest observation window a session's prefill may score prompts with
 *                (vkh2o_model_cache_desc.obs_window); 0 = none
 */
typedef struct vkh2o_model_desc {
    uint32_t max_seq_len;
    uint32_t flags;              /* reserved, 0 */
    uint32_t max_obs_window;
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
VKH2O_API vkh2o_result vkh2o_host_model_forward(vkh2o_model* m, const uint32_t* tokens, uint32_t n, float* logits,
                                               float* next_logprobs);

/* ------------------------------------------------------------------------------------------
 * Decoding with a cache policy: a session holds one KV cache per layer (vkh2o_kvcache,
 * vkh2o/kvcache.h) for one sequence. Tokens go in as a prefill (one causal forward over the
 * prompt; each layer's cache is then set to the prompt's rows with scores = its attention mass,
 * and the middle tokens beyond the cache's pools are evicted) and/or decoded one at a time (each
 * token appended, attending to every cached token including itself, its mass added to the
 * scores, the cache demoting and evicting back to its capacity, in every layer). Teacher-forced
 * decoding of n known tokens runs the n steps layer by layer in one submission (the same result
 * as n single steps: a layer's step t depends only on its own cache and on step t of the layer
 * below).
 *
 * The session's caches are latent (the row [c_kv | k_pe], the query absorbed on the device) with
 * FP16 rows at the top tier. The expanded layout and F32 rows are not offered in a session:
 * they give the latent layout's results up to rounding and only cost memory (the expanded
 * layout is a layer-level choice of vkh2o_kvcache; docs/DESIGN-NOTES.md).
 * ---------------------------------------------------------------------------------------- */
typedef struct vkh2o_model_session vkh2o_model_session;

/* How the middle tokens of the capacity are spread over the layers (the total stays layers x
 * the middle tokens). */
typedef enum vkh2o_budget_schedule {
    VKH2O_BUDGET_UNIFORM = 0,   /* every layer keeps the same capacity */
    VKH2O_BUDGET_PYRAMID = 1,   /* PyramidKV-style: decreasing linearly with depth, from 1.5 x budget
                                   at the first layer to 0.5 x budget at the last (rounded, the
                                   remainder given to the first layers so the total is exact) */
} vkh2o_budget_schedule;
/* Budget of layer l of n under a schedule (the session's; exposed for reports and tests). */
VKH2O_API uint32_t vkh2o_budget_for_layer(vkh2o_budget_schedule schedule, uint32_t budget, uint32_t layer,
                                          uint32_t num_layers);

/*
 * Session desc; all zero = the full cache: one vkh2o_kvcache per layer without a capacity, FP16,
 * which records no score, selection or demotion work at all.
 *   kv          the one cache's desc (vkh2o/kvcache.h): which tokens stay and at what precision
 *               (capacity_tokens or capacity_bytes per layer, n_sink, n_recent, policy,
 *               score_mode, decay, seed, precision, tier_tokens, group_size, tier_mask). Its
 *               shape (num_heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim,
 *               scale) is the model's: leave it 0 (or give the model's own figures); num_layers
 *               and max_tokens are the session's and must be 0.
 *   schedule    UNIFORM, or PYRAMID: layer l keeps n_sink + n_recent + vkh2o_budget_for_layer(
 *               PYRAMID, capacity_tokens - n_sink - n_recent, l, num_layers) tokens (each layer
 *               has its own vkh2o_kvcache). Needs kv.capacity_tokens (a schedule of bytes is not
 *               defined).
 *   obs_window, pool, pool_size   a prefill scores the prompt by the attention of its last
 *               obs_window queries only, pooled (SnapKV; vkh2o_mla_prefill), and compresses it
 *               once; decoding then accumulates as the score mode says. 0 = the whole prompt's
 *               mass. Needs a cache that selects (a capacity or a quantised precision) and the
 *               model's max_obs_window; pool and pool_size need obs_window.
 *   max_tokens  longest sequence the session takes (prefill + decode); 0 = the model's
 *               max_seq_len, which bounds it, except for a cache with a capacity (kv.
 *               capacity_tokens or capacity_bytes; up to 2^24: decode calls of at most
 *               max_seq_len tokens; positions past the model's max_position_embeddings are
 *               beyond its training length)
 * kv.check_finite counts non-finite numbers per layer: vkh2o_model_session_read_kv_stats.
 */
typedef struct vkh2o_model_cache_desc {
    vkh2o_kvcache_desc kv;
    vkh2o_budget_schedule schedule;
    uint32_t obs_window;
    vkh2o_obs_pool pool;
    uint32_t pool_size;
    uint32_t max_tokens;
} vkh2o_model_cache_desc;

/* Results: OK, INVALID_ARGUMENT / BUDGET (the cache desc, as vkh2o_kvcache_desc_resolve says,
 * naming the layer for a schedule; an option for another policy; max_tokens above the model's
 * max_seq_len without a kv capacity), OUT_OF_DEVICE_MEMORY, VULKAN. m must outlive the session;
 * one session of a model may run at a time (they share the model's scratch). */
VKH2O_API vkh2o_result vkh2o_model_session_create(vkh2o_model* m, const vkh2o_model_cache_desc* desc,
                                                  vkh2o_model_session** out);
VKH2O_API void vkh2o_model_session_destroy(vkh2o_model_session* s);
/* Empties every cache (position 0). Blocking. */
VKH2O_API vkh2o_result vkh2o_model_session_reset(vkh2o_model_session* s);
/* Tokens seen so far (the next token's position). */
VKH2O_API uint32_t vkh2o_model_session_get_position(const vkh2o_model_session* s);
/* Tokens held now by layer `layer`'s cache (blocking read). Results: OK, INVALID_ARGUMENT, VULKAN. */
VKH2O_API vkh2o_result vkh2o_model_session_read_cache_len(vkh2o_model_session* s, uint32_t layer, uint32_t* len);
/* Layer `layer`'s vkh2o_kvcache_stats (blocking read): with kv.check_finite its nonfinite count
 * and the first non-finite position and input of that layer (vkh2o/kvcache.h "Non-finite
 * values"). Results: OK, INVALID_ARGUMENT (layer, NULL), VULKAN. */
VKH2O_API vkh2o_result vkh2o_model_session_read_kv_stats(vkh2o_model_session* s, uint32_t layer,
                                                        vkh2o_kvcache_stats* out);
/* Device bytes of every layer's cache summed over the layers: every buffer each cache allocates
 * (vkh2o_kvcache_plan.device_bytes: its arena, tables, workspace and state). */
VKH2O_API uint64_t vkh2o_model_session_get_cache_bytes(const vkh2o_model_session* s);

/*
 * Prefill an empty session with tokens[0 .. n) (n <= max_tokens and <= the model's
 * max_seq_len). logits [n, vocab] and next_logprobs [n - 1] as vkh2o_host_model_forward (any
 * may be NULL): the prompt's own predictions see the whole prompt (a causal forward).
 * Decode n tokens at the session's position (teacher-forced): logits [n, vocab] (row i: the
 * prediction after token i, given the cache it saw) and next_logprobs [n - 1]
 * (log p(tokens[i + 1]) from row i). For generation call it with n = 1 and feed the argmax back.
 * Results: OK, INVALID_ARGUMENT (n 0, too many tokens, a token >= vocab, prefill of a non-empty
 * session), plus what the layers' prefill/decode return; TIMEOUT, VULKAN, DEVICE_LOST.
 */
VKH2O_API vkh2o_result vkh2o_host_model_prefill(vkh2o_model_session* s, const uint32_t* tokens, uint32_t n,
                                               float* logits, float* next_logprobs);
VKH2O_API vkh2o_result vkh2o_host_model_decode(vkh2o_model_session* s, const uint32_t* tokens, uint32_t n,
                                              float* logits, float* next_logprobs);

#ifdef __cplusplus
}
#endif
#endif
