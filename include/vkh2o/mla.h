/*
 * vkh2o/mla.h — one Multi-head Latent Attention layer on the device (HF DeepseekV3Attention
 * semantics, batch 1): the weights uploaded once, then the prefill forward and the decode step
 * against a KV cache (at the end of this header)
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
/* How the KV cache (vkh2o/kvcache.h) stores a token. 0 = LATENT. */
typedef enum vkh2o_kv_layout {
    VKH2O_LAYOUT_DEFAULT = 0,    /* LATENT */
    VKH2O_LAYOUT_EXPANDED = 1,   /* per head K = [k_nope | k_pe] and V (HF DynamicCache's) */
    VKH2O_LAYOUT_LATENT = 2,     /* per token c_kv (normed) and k_pe, shared by all heads */
} vkh2o_kv_layout;

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
 *   max_decode_tokens  most tokens one decode call (vkh2o_cmd_mla_decode ...) takes: the
 *                scratch for them is allocated at create. 0 = min(16, max_seq_len); at most
 *                max_seq_len.
 *   max_obs_window  longest observation window a prefill may score the prompt with
 *                (vkh2o_mla_prefill.obs_window); 0 = none. Its scratch is heads x window x
 *                max_seq_len floats and must fit one storage binding.
 */
typedef struct vkh2o_mla_layer_desc {
    uint32_t max_seq_len;
    uint32_t flags;
    uint32_t max_decode_tokens;
    uint32_t max_obs_window;
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
/* The max_seq_len and max_decode_tokens in effect (after defaults), and the layer's config. */
VKH2O_API uint32_t vkh2o_mla_layer_get_max_seq_len(const vkh2o_mla_layer* layer);
VKH2O_API uint32_t vkh2o_mla_layer_get_max_decode_tokens(const vkh2o_mla_layer* layer);
VKH2O_API const vkh2o_mla_config* vkh2o_mla_layer_get_config(const vkh2o_mla_layer* layer);
/* Device bytes the layer's weights take (with row padding and FP8 block scales). */
VKH2O_API uint64_t vkh2o_mla_layer_get_weight_bytes(const vkh2o_mla_layer* layer);

/*
 * Buffers of one forward (all f32, row-major, from byte offsets that are multiples of 256, the
 * largest storage-binding alignment Vulkan lets a device require):
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
    uint64_t hidden_offset, out_offset, scores_offset;   /* bytes; multiples of 256 */
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

/* GPU time of the stages of vkh2o_host_mla_forward in milliseconds (negative: no timestamps). */
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
VKH2O_API vkh2o_result vkh2o_host_mla_forward(vkh2o_mla_layer* layer, const float* hidden, uint32_t seq_len,
                                             uint32_t pos0, float* out, float* scores,
                                             vkh2o_mla_timings* timings);

/* ------------------------------------------------------------------------------------------
 * Decode: one layer stepping against its cache
 *
 * For each new token (hidden row at position p), in order:
 *   projections -> the token's cache rows (c_kv after kv_a_layernorm and k_pe after RoPE at p;
 *   expanded: K = [k_nope | k_pe] and V per head through kv_b_proj) and its query (q_pe roped
 *   at p; for the latent layout absorbed through kv_b_proj on the device:
 *   q_abs[h] = q_nope[h] . W_uk[h]) -> append to the cache -> attention of the query over
 *   every cached token, itself included -> the attention mass (summed over heads) added to
 *   every cached token's score -> the cache's policy evicts back to its cap (H2O: sinks, the
 *   budget tokens of largest accumulated score with ties to the lower position, recents; order
 *   kept) -> output (latent: o_lat . W_uv[h]^T) -> o_proj -> out row [hidden_size].
 * A chunk of n tokens (n <= max_decode_tokens) runs these steps for the n consecutive tokens
 * one after another (token i sees the cache token i - 1 left), recorded into one command buffer.
 * The projections of the whole chunk run first (they do not depend on the cache).
 * p is vkh2o_mla_decode.position (+ i), or with VKH2O_POSITION_FROM_CACHE the cache layer's next
 * position (+ i) as the device holds it when the work runs: a call only records, and one recorded
 * call can be submitted again and again (new hidden rows written between submissions), each
 * submission the next tokens, bit for bit what calls recorded with the explicit positions give.
 * Past the cache's max_tokens the cache refuses the step on the device (its stats.overflow);
 * a position at or past 2^24 (only a refused step's) ropes to NaN, never to a wrapped angle.
 *
 * The cache (vkh2o_kvcache, vkh2o/kvcache.h; vkh2o_cmd_mla_decode and vkh2o_host_mla_decode
 * below): both layouts. Its heads and dims must be the layer's (vkh2o_kvcache_desc_from_mla
 * fills them, and its scale with the layer's softmax scale, which a decode requires). The latent
 * layout absorbs the query through the layer's (16-bit) kv_b_proj on the device and applies
 * W_uv after the attention.
 *
 * Buffers: hidden [n, hidden_size] and out [n, hidden_size] f32 from byte offsets that are
 * multiples of 4 (they are copied through the layer's scratch). The layer's scratch is shared
 * by all its calls: do not record two calls of one layer that may execute concurrently.
 * Results: OK, INVALID_ARGUMENT (NULL, n = 0 or above max_decode_tokens, buffers too small,
 * a cache whose shape or scale does not match the layer, layer index out of range, explicit
 * positions reaching 2^24),
 * UNSUPPORTED (shapes beyond the device's limits), VULKAN, OUT_OF_DEVICE_MEMORY; the message is in vkh2o_last_error.
 * ---------------------------------------------------------------------------------------- */
/* vkh2o_mla_decode.position: the first token's position is the next position the cache's layer
 * holds on the device when the step runs (the position its append gives the token), not a
 * number fixed at recording; tokens i of a chunk at that + i. */
#define VKH2O_POSITION_FROM_CACHE 0xffffffffu
/* The cache a decode and a prefill run against: vkh2o_kvcache (vkh2o/kvcache.h, which vkh2o.h
 * includes after this header). */
struct vkh2o_kvcache;
typedef struct vkh2o_mla_decode {
    vkh2o_buffer* hidden;  uint64_t hidden_offset;
    vkh2o_buffer* out;     uint64_t out_offset;
    uint32_t n_tokens;     /* 0 = 1 */
    uint32_t position;     /* of the first token (RoPE), below 2^24 with the chunk; the cache's tokens
                              must be at lower positions. VKH2O_POSITION_FROM_CACHE: the cache's */
    uint32_t layer;        /* which of the cache's num_layers layers (0 for a one-layer cache) */
} vkh2o_mla_decode;

/* The decode against cache c: the projections, LATENT the query absorbed on the device, one
 * cache step per token (d->layer is the cache layer; d->position feeds RoPE and must equal the
 * cache layer's position, which the caller tracks, or is VKH2O_POSITION_FROM_CACHE: that
 * position read on the device when the work runs, so the recording may be submitted again for
 * the next token), W_uv and o_proj; EXPANDED the steps take the projections' per-head q, K
 * (k_nope through kv_b_proj) and V and give the output before o_proj directly (no W_uk /
 * W_uv). d->n_tokens tokens in one recording. Never submits. vkh2o_host_mla_decode: the same on
 * the context's queue, waited for (position as d->position, VKH2O_POSITION_FROM_CACHE
 * included), hidden and out [n, hidden_size] host arrays (out may be NULL). Results: those
 * above. */
VKH2O_API vkh2o_result vkh2o_cmd_mla_decode(vkh2o_mla_layer* layer, VkCommandBuffer cb, struct vkh2o_kvcache* c,
                                            const vkh2o_mla_decode* d);
VKH2O_API vkh2o_result vkh2o_host_mla_decode(vkh2o_mla_layer* layer, struct vkh2o_kvcache* c, uint32_t cache_layer,
                                            const float* hidden, uint32_t n, uint32_t position, float* out);

/* The rows a cache of `layout` stores for the tokens of the layer's last forward (recorded or
 * run), as vkh2o_cmd_kvcache_prefill takes them: in the layer's scratch on the device, f32, row s
 * of the forward's S tokens at float s * (the row's width), S = that forward's seq_len:
 *   LATENT (or DEFAULT)  a = c_kv after kv_a_layernorm [S][kv_lora], b = roped k_pe [S][rope]
 *   EXPANDED             a = K [S][heads][nope + rope] (roped k_pe in every head), b = V [S][heads][v]
 * The buffers belong to the layer: the next forward overwrites them, and they go with the layer.
 * Results: OK, INVALID_ARGUMENT (NULL argument, unknown layout). */
VKH2O_API vkh2o_result vkh2o_mla_layer_get_kv_rows(const vkh2o_mla_layer* layer, vkh2o_kv_layout layout,
                                                   vkh2o_buffer** a, vkh2o_buffer** b);
/* The per-head attention output before o_proj, [S, heads, v] f32 (row s, head h at float
 * (s * heads + h) * v), of the layer's last forward, prefill or decode call (S = that call's
 * token count; latent decode: after W_uv): in the layer's scratch on the device, like
 * vkh2o_mla_layer_get_kv_rows, valid once that call's work has executed. The buffer belongs to
 * the layer; the layer's next call overwrites it (vkh2o_cmd_mla_decode_inputs leaves it alone).
 * Results: OK, INVALID_ARGUMENT (NULL argument). */
VKH2O_API vkh2o_result vkh2o_mla_layer_get_attn_output(const vkh2o_mla_layer* layer, vkh2o_buffer** o);

/*
 * The inputs of a decode step of an MLA layer (vkh2o/mla.h "Decode"), without a cache: the
 * projections of n tokens at positions position.. (the first stage of vkh2o_cmd_mla_decode and
 * vkh2o_cmd_mla_decode), handed out in full precision for an app that drives a cache itself
 * (its own appends and attention, e.g. vkh2o_cmd_kvcache_step with q, ckv and kpe taken from
 * these rows). Per token, f32, row-major:
 *   layout LATENT (or DEFAULT)
 *     rows    [n, kv_lora + rope]          [c_kv after kv_a_layernorm | k_pe roped at its position]:
 *                                          the latent row a cache stores
 *     values  ignored (the latent values are the first kv_lora numbers of rows)
 *     query   [n, heads, kv_lora + rope]   the query absorbed on the device (as the decode step
 *                                          does): [q_nope[h] . W_uk[h] | q_pe[h] roped], so that
 *                                          query[h] . row = q[h] . K[h] of the expanded layout; the
 *                                          q of vkh2o_cmd_kvcache_step
 *   layout EXPANDED
 *     rows    [n, heads, nope + rope]      K = [k_nope (kv_b_proj) | k_pe roped] per head
 *     values  [n, heads, v]                V per head
 *     query   [n, heads, nope + rope]      [q_nope | q_pe roped]
 * Each output buffer may be NULL (not written); offsets in bytes, multiples of 4. hidden
 * [n, hidden_size] as vkh2o_mla_decode.hidden. W_uk is the layer's kv_b_proj as uploaded (16-bit
 * or f32; F8_E4M3 decoded). Nothing but the caller's outputs and the layer's scratch is written:
 * no cache is touched, and the layer's scratch is shared with its other calls (do not record two
 * calls of one layer that may execute concurrently). Threads: as the layer (one thread at a time,
 * as its context).
 */
typedef struct vkh2o_mla_decode_inputs {
    vkh2o_buffer* hidden;  uint64_t hidden_offset;
    uint32_t n_tokens;     /* 0 = 1; at most the layer's max_decode_tokens */
    uint32_t position;     /* of the first token (RoPE); positions below 2^24 */
    vkh2o_kv_layout layout;
    vkh2o_buffer* rows;    uint64_t rows_offset;
    vkh2o_buffer* values;  uint64_t values_offset;
    vkh2o_buffer* query;   uint64_t query_offset;
} vkh2o_mla_decode_inputs;

/* Records the projections (and, latent, the absorption) of d->n_tokens tokens and copies the
 * outputs into the caller's buffers, then a barrier after which compute and transfer work may
 * read them. Never submits. The caller orders writes of hidden before it; the buffers are
 * borrowed until cb has executed.
 * Results: OK, INVALID_ARGUMENT (NULL layer/cb/d/hidden, n above max_decode_tokens, a buffer too
 * small from its offset or an offset not a multiple of 4, unknown layout, positions >= 2^24),
 * and what pipeline creation returns (VULKAN, OUT_OF_HOST_MEMORY); the message is in
 * vkh2o_last_error. */
VKH2O_API vkh2o_result vkh2o_cmd_mla_decode_inputs(vkh2o_mla_layer* layer, VkCommandBuffer cb,
                                                   const vkh2o_mla_decode_inputs* d);
/* Host convenience: hidden [n, hidden_size] (host) at positions position.., the outputs into
 * host arrays of the sizes above (each may be NULL; values is ignored for LATENT). Submits on
 * the context's queue and waits. Results: as the cmd_ form (INVALID_ARGUMENT for NULL hidden or
 * n = 0), plus TIMEOUT, VULKAN, OUT_OF_DEVICE_MEMORY. */
VKH2O_API vkh2o_result vkh2o_host_mla_decode_inputs(vkh2o_mla_layer* layer, const float* hidden, uint32_t n,
                                                   uint32_t position, vkh2o_kv_layout layout, float* rows, float* values,
                                                   float* query);

/*
 * Prefill through the layer: the causal forward of seq_len prompt tokens at positions
 * 0..seq_len-1 (out [seq_len, hidden_size] as vkh2o_cmd_mla_forward; buffer offsets multiples
 * of 256), then the cache is set to the prompt: its rows (latent: c_kv normed, k_pe roped;
 * expanded: K, V per head) with scores = the prompt's attention mass (summed over heads and
 * queries), placed by the cache's policy and precision (vkh2o_cmd_kvcache_prefill; seq_len at
 * most the cache's max_tokens). Results: as vkh2o_cmd_mla_forward and vkh2o_cmd_kvcache_prefill.
 */
/* Pooling of observation-window scores over neighbouring positions. */
typedef enum vkh2o_obs_pool {
    VKH2O_POOL_MAX = 0,    /* max over the kernel (SnapKV's default) */
    VKH2O_POOL_AVG = 1,    /* mean over the kernel's positions inside the prompt */
    VKH2O_POOL_NONE = 2,   /* the window's mass as it is */
} vkh2o_obs_pool;

/* obs_window W > 0 (W <= the layer's max_obs_window): the prompt's tokens are
 * scored by the attention they receive from the last W prompt queries only (summed over heads
 * and those queries, the observation window of SnapKV), smoothed by `pool` over pool_size
 * neighbouring positions (odd, 0 = 7), instead of by the whole prompt's mass. Keep the window
 * itself with n_recent >= W. A window longer than the prompt is the whole prompt. */
typedef struct vkh2o_mla_prefill {
    vkh2o_buffer* hidden;  uint64_t hidden_offset;
    vkh2o_buffer* out;     uint64_t out_offset;
    uint32_t seq_len;
    uint32_t layer;        /* the cache's layer */
    uint32_t obs_window;
    vkh2o_obs_pool pool;
    uint32_t pool_size;
} vkh2o_mla_prefill;

/* The prefill of cache c's layer p->layer through the layer's forward: the prompt's rows and
 * its attention mass (or, with p->obs_window, the observation window's pooled scores) into
 * vkh2o_cmd_kvcache_prefill (LATENT c_kv and k_pe, EXPANDED the forward's per-head K and V
 * rows). Never submits. vkh2o_host_mla_prefill: the same on the context's queue, waited for,
 * hidden and out [seq_len, hidden_size] host arrays (out may be NULL). */
VKH2O_API vkh2o_result vkh2o_cmd_mla_prefill(vkh2o_mla_layer* layer, VkCommandBuffer cb, struct vkh2o_kvcache* c,
                                             const vkh2o_mla_prefill* p);
VKH2O_API vkh2o_result vkh2o_host_mla_prefill(vkh2o_mla_layer* layer, struct vkh2o_kvcache* c, uint32_t cache_layer,
                                             const float* hidden, uint32_t seq_len, float* out);

#ifdef __cplusplus
}
#endif
#endif
