/*
 * vkh2o/mla.h — one Multi-head Latent Attention layer on the device (HF DeepseekV3Attention
 * semantics, batch 1): the weights uploaded once, then the prefill forward
 *
 *   hidden [S, hidden] -> q, k, v projections (LoRA + RMSNorm, YaRN RoPE on the rope part)
 *   -> causal softmax attention -> o_proj -> out [S, hidden]
 *
 * plus the H2O attention mass of every key: score[j] = sum over heads h and queries i of
 * P[h, i, j] (the probabilities sum to 1 per (h, i), so the scores sum to heads x S).
 *
 * The probability matrix (heads x S x S) is never materialised: the attention runs in three
 * passes (per-row log-sum-exp; P recomputed tile by tile for P.V and partial column sums;
 * a reduction of the partials in a fixed order). There are no float atomics, so a forward
 * gives the same bits every time on the same device.
 *
 * Included by vkh2o.h; do not include directly.
 *
 * Threads: a layer belongs to its context (one thread at a time, as the context).
 */
#ifndef VKH2O_MLA_H
#define VKH2O_MLA_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkh2o_mla_layer vkh2o_mla_layer;

typedef enum vkh2o_mla_flags {
    /* Allow vkh2o_mla_io.probs: the full probability tensor [heads, S, S] is written (only for
     * small S: heads x S x S floats must fit one storage binding). Compiles the pass that
     * writes it; without the flag a forward never touches a probs buffer. */
    VKH2O_MLA_WRITE_PROBS = 1u << 0,
} vkh2o_mla_flags;

/*
 * Layer desc. All zero is valid:
 *   max_seq_len  longest S a forward accepts; device scratch is sized for it.
 *                0 = 4096, lowered to the largest S for which every scratch buffer fits one
 *                storage-buffer binding (maxStorageBufferRange; for Kimi K2 shapes on a
 *                128 MiB device that is 2688). An explicit value beyond that limit is refused
 *                (INVALID_ARGUMENT).
 *   flags        vkh2o_mla_flags (0: none).
 */
typedef struct vkh2o_mla_layer_desc {
    uint32_t max_seq_len;
    uint32_t flags;
} vkh2o_mla_layer_desc;

/*
 * Uploads the layer's weights (q_a_proj, q_a_layernorm, q_b_proj or q_proj, kv_a_proj_with_mqa,
 * kv_a_layernorm, kv_b_proj, o_proj) and allocates the scratch for desc->max_seq_len tokens.
 * Projection weights stay in their 16-bit form (BF16/F16 words widened in the shaders), F32, or
 * F8_E4M3 bytes with their 128x128 block scales (decoded and scaled inside the matmul; no
 * hardware FP8 needed); the two norm weights are widened to F32. cfg and hw are only read during the call (hw may be
 * freed afterwards). ctx must outlive the layer.
 * Results: OK, INVALID_ARGUMENT (NULL argument, config invalid, attention_bias, unknown flags,
 * max_seq_len beyond the binding limit), MISSING_TENSOR (hw lacks a weight the config needs,
 * e.g. q_proj when q_lora_rank is 0), SHAPE (a weight's shape disagrees with cfg), DTYPE,
 * UNSUPPORTED (a weight too large to bind even in row chunks), OUT_OF_DEVICE_MEMORY,
 * OUT_OF_HOST_MEMORY, VULKAN.
 * *out is NULL on failure; vkh2o_last_error(ctx) names the problem.
 */
VKH2O_API vkh2o_result vkh2o_mla_layer_create(vkh2o_context* ctx, const vkh2o_mla_config* cfg,
                                              const vkh2o_mla_host_weights* hw,
                                              const vkh2o_mla_layer_desc* desc, vkh2o_mla_layer** out);
/* Frees device memory. The device must be done with any command buffer that used the layer.
 * Accepts NULL. */
VKH2O_API void vkh2o_mla_layer_destroy(vkh2o_mla_layer* layer);
/* The max_seq_len in effect (after defaults). */
VKH2O_API uint32_t vkh2o_mla_layer_get_max_seq_len(const vkh2o_mla_layer* layer);
/* Device bytes the layer's weights take (with row padding and FP8 block scales). */
VKH2O_API uint64_t vkh2o_mla_layer_get_weight_bytes(const vkh2o_mla_layer* layer);

/*
 * Buffers of one forward (all f32, row-major, offset 0):
 *   hidden   [seq_len, hidden_size]  input (read)
 *   out      [seq_len, hidden_size]  output (written)
 *   scores   [seq_len] or NULL       attention mass per key position (written, or added to
 *                                    what is there when accumulate_scores is true)
 *   probs    [heads, seq_len, seq_len] or NULL; needs VKH2O_MLA_WRITE_PROBS. Masked entries
 *                                    (key after query) are written as 0.
 *   pos0     position of the first token (RoPE); positions pos0 .. pos0+seq_len-1 < 2^24.
 * The buffers are borrowed for the recording and must stay alive until the command buffer has
 * finished executing.
 */
typedef struct vkh2o_mla_io {
    vkh2o_buffer* hidden;
    vkh2o_buffer* out;
    vkh2o_buffer* scores;
    vkh2o_buffer* probs;
    uint32_t seq_len;
    uint32_t pos0;
    bool accumulate_scores;
} vkh2o_mla_io;

/*
 * Records the whole forward into cb (a primary command buffer in the recording state, from
 * the context's device, used on a compute queue). Never submits. Inserts the barriers it needs
 * between its own dispatches and one at the end (so later compute/transfer work may read out,
 * scores, probs); the caller orders writes of hidden before it. The layer's scratch is reused
 * by every forward: do not record two forwards of one layer that may execute concurrently.
 * Results: OK, INVALID_ARGUMENT (NULL buffer, seq_len 0 or above max_seq_len, a buffer too
 * small, probs without VKH2O_MLA_WRITE_PROBS or larger than one binding, positions >= 2^24),
 * and what pipeline creation returns (VULKAN, OUT_OF_HOST_MEMORY).
 */
VKH2O_API vkh2o_result vkh2o_cmd_mla_forward(vkh2o_mla_layer* layer, VkCommandBuffer cb, const vkh2o_mla_io* io);

/* GPU time of the stages of vkh2o_run_mla_forward in milliseconds (negative: no timestamps). */
typedef struct vkh2o_mla_timings {
    double project_ms;     /* q/kv projections, norms, RoPE */
    double attention_ms;   /* log-sum-exp and P.V passes */
    double mass_ms;        /* reduction of the attention mass */
    double o_proj_ms;      /* output projection */
    double total_ms;
} vkh2o_mla_timings;

/*
 * Host convenience: uploads hidden [seq_len, hidden_size], runs the forward on the context's
 * queue, waits and downloads out [seq_len, hidden_size] and, when scores is not NULL, the
 * attention mass [seq_len]. timings may be NULL. Buffers for the host copies are kept in the
 * layer and grown on demand.
 * Results: as vkh2o_cmd_mla_forward (INVALID_ARGUMENT for NULL hidden/out), plus
 * OUT_OF_DEVICE_MEMORY, TIMEOUT, VULKAN.
 */
VKH2O_API vkh2o_result vkh2o_run_mla_forward(vkh2o_mla_layer* layer, const float* hidden, uint32_t seq_len,
                                             uint32_t pos0, float* out, float* scores,
                                             vkh2o_mla_timings* timings);

#ifdef __cplusplus
}
#endif
#endif
