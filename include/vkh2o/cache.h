/*
 * vkh2o/cache.h — the KV cache with H2O heavy-hitter eviction, on the device.
 * Included by vkh2o.h; do not include directly.
 *
 * One vkh2o_cache holds the caches of num_layers layers (all with the same shape and
 * policy), so that a mock run can record one decode step for every layer as a single dispatch.
 * A real model calls the step per layer (layer_first/layer_count in vkh2o_cache_step).
 *
 * Per layer and token the cache stores the key/value rows, the accumulated attention-mass
 * score (f32) and the token's original position (u32). Two layouts:
 *   EXPANDED  per head K = [k_nope | k_pe] (qk_nope_dim + qk_rope_dim) and V (v_dim), as HF's
 *             DynamicCache stores them: rows a = K [heads][qk], rows b = V [heads][v].
 *   LATENT    the normalised c_kv (kv_lora_rank) and the roped k_pe (qk_rope_dim), shared by all
 *             heads: rows a = c_kv, rows b = k_pe. Decode attention goes through weight
 *             absorption with kv_b_proj W [heads*(nope+v), kv_lora] (rows h*(nope+v) .. +nope
 *             are W_uk[h], the next v rows W_uv[h]):
 *               q_abs[h] = q_nope[h] . W_uk[h]                 (kv_lora numbers)
 *               s[h,t]   = (q_abs[h] . c_kv[t] + q_pe[h] . k_pe[t]) * scale
 *               out[h]   = (sum_t P[h,t] c_kv[t]) . W_uv[h]^T   (v_dim numbers)
 *             With kv_b_proj given in the desc the cache does both products itself, so a step
 *             takes the same q [heads][nope+rope] and gives the same out [heads][v] as the
 *             expanded layout. Without it, q is already absorbed ([heads][kv_lora + rope]) and
 *             out is the latent output [heads][kv_lora] (the caller applies W_uv).
 *
 * Eviction (policy H2O, the seed documents' policy): cap = n_sink + budget + n_recent. A decode
 * step appends one token (the new query's own key/value), computes the query's attention over
 * the cache, adds its attention mass (summed over heads) to every cached token's score and, when
 * the cache then holds more than cap tokens, keeps the first n_sink, the last n_recent and the
 * `budget` middle tokens of largest score (ties: the lower position wins), preserving order.
 * Scores and positions move with their tokens. Everything runs on the device: steps can be
 * recorded back to back and submitted at once; the host reads statistics when it wants.
 *
 * Threads: a cache belongs to its context (one thread at a time).
 */
#ifndef VKH2O_CACHE_H
#define VKH2O_CACHE_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkh2o_cache vkh2o_cache;

/* vkh2o_kv_layout is in vkh2o/mla.h; vkh2o_evict_policy and vkh2o_score_mode in vkh2o/kvcache.h. */

/*
 * Cache desc. Required: num_heads and the dims of the layout, and budget (except with the
 * streaming policy). Defaults (0):
 *   num_layers     1
 *   capacity       cap + 1 slots per layer (one slot for the token appended before eviction);
 *                  must be >= cap + 1
 *   layout         DEFAULT = EXPANDED
 *   storage        VKH2O_DTYPE_F16 (F16 or F32; rows are stored in this type, scores in f32)
 *   policy         H2O;  score_mode  SUM;  seed  0 (RANDOM policy and mock steps)
 *   decay          SCORE_DECAY's factor in (0, 1); 0 = 0.9 (ignored by the other modes). Every
 *                  mode starts a prefilled token from the prompt's summed mass.
 *   qk_rope_dim    64 for the latent layout (expanded: may be 0, then qk = qk_nope_dim)
 *   kv_lora_rank   required for the latent layout
 *   scale          qk^-0.5 with qk = qk_nope_dim + qk_rope_dim
 *   kv_b_proj      NULL (latent only): host f32 [heads*(qk_nope+v), kv_lora_rank], copied to
 *                  the device at create; see the header comment
 *   max_prefill    capacity: the longest prompt vkh2o_cmd_cache_prefill accepts
 *   history_steps  0: per-step statistics (size, evicted) kept for the last history_steps
 *                  steps (vkh2o_cache_read_history)
 * With F16 storage every row width (heads x dims, kv_lora_rank, qk_rope_dim) must be even.
 */
typedef struct vkh2o_cache_desc {
    uint32_t num_layers;
    uint32_t num_heads;
    uint32_t qk_nope_dim, qk_rope_dim, v_dim;
    uint32_t kv_lora_rank;
    vkh2o_kv_layout layout;
    vkh2o_dtype storage;
    uint32_t n_sink, budget, n_recent;
    uint32_t capacity;
    vkh2o_evict_policy policy;
    vkh2o_score_mode score_mode;
    uint32_t seed;
    float decay;
    float scale;
    const float* kv_b_proj;
    uint32_t max_prefill;
    uint32_t history_steps;
} vkh2o_cache_desc;

/* Fills num_heads, qk_nope_dim, qk_rope_dim, v_dim, kv_lora_rank, layout and scale (the layer's
 * softmax scale, YaRN mscale included) of desc from an MLA config, for a cache the layer's decode
 * steps (vkh2o_cmd_mla_decode) use. Other fields are untouched. */
VKH2O_API void vkh2o_cache_desc_from_mla(const vkh2o_mla_config* cfg, vkh2o_kv_layout layout, vkh2o_cache_desc* desc);
/* Checks a desc without a device. Results: OK, INVALID_ARGUMENT (zero heads or dims, unknown
 * layout/policy/mode/storage, odd widths with F16, sizes that overflow), BUDGET (budget 0 with
 * the H2O or RANDOM policy, cap 0, n_sink + n_recent or cap + 1 above the capacity). err names
 * the field. */
VKH2O_API vkh2o_result vkh2o_cache_desc_validate(const vkh2o_cache_desc* desc, vkh2o_error* err);
/* n_sink + budget + n_recent of a (valid) desc. */
VKH2O_API uint32_t vkh2o_cache_desc_cap(const vkh2o_cache_desc* desc);
/* Bytes of the K/V (or c_kv/k_pe) rows for `tokens` tokens per layer, all layers, in the
 * storage dtype (the memory table of vkh2o-validate --memory). */
VKH2O_API uint64_t vkh2o_cache_bytes(const vkh2o_cache_desc* desc, uint64_t tokens);

/* Creates an empty cache (all layers at length 0). Results: those of validate, plus
 * UNSUPPORTED (a tensor of all layers over the device's maxStorageBufferRange; on CPU devices,
 * a shape whose decode step cannot stay inside llvmpipe's loop limit even split over
 * workgroups, e.g. a capacity near 60,000), OUT_OF_DEVICE_MEMORY, VULKAN. The message is in
 * vkh2o_last_error(ctx). */
VKH2O_API vkh2o_result vkh2o_cache_create(vkh2o_context* ctx, const vkh2o_cache_desc* desc, vkh2o_cache** out);
VKH2O_API void vkh2o_cache_destroy(vkh2o_cache* c);
VKH2O_API const vkh2o_cache_desc* vkh2o_cache_get_desc(const vkh2o_cache* c);
/* Empties every layer and zeroes the statistics (blocking; the device must be idle). */
VKH2O_API vkh2o_result vkh2o_cache_reset(vkh2o_cache* c);

/* Floats per token and head of the step's inputs/outputs for this cache:
 *   q_width    expanded, or latent with kv_b_proj: qk_nope + qk_rope; latent without: kv_lora + rope
 *   out_width  expanded, or latent with kv_b_proj: v_dim;             latent without: kv_lora
 *   a_width, b_width  floats of rows a and b per token (heads x qk and heads x v expanded;
 *                     kv_lora and qk_rope latent) */
typedef struct vkh2o_cache_widths {
    uint32_t q_width, out_width, a_width, b_width;
} vkh2o_cache_widths;
VKH2O_API vkh2o_cache_widths vkh2o_cache_get_widths(const vkh2o_cache* c);

typedef enum vkh2o_step_flags {
    /* generate q and the new token's rows on the device from a counter-based hash of
     * (seed, layer, position) (vkh2o_mock_value), instead of reading q/a/b: no uploads per step */
    VKH2O_STEP_MOCK = 1u << 0,
    /* keep the selection keys of the step's candidates (before eviction) for
     * vkh2o_cache_read_snapshot (checks of the selection against a reference) */
    VKH2O_STEP_RECORD_KEYS = 1u << 1,
} vkh2o_step_flags;

/*
 * One decode step of layers [layer_first, layer_first + layer_count) (layer_count 0 = all from
 * layer_first). The new token has position `position` (also the query's position); every
 * layer's cache must hold fewer than `capacity` tokens. Buffers are f32, layer i of the range at
 * [offset + i * heads * width floats] (a/b: i * a_width / b_width floats). Without
 * VKH2O_STEP_MOCK, q, a and b are required; out is optional (NULL: not written).
 * `step` indexes the statistics history (any counter the caller likes, e.g. the step number).
 * nsteps (0 = 1): with VKH2O_STEP_MOCK, run that many consecutive steps (positions position,
 * position + 1, ...; history entries step, step + 1, ...) inside the one dispatch: each layer's
 * workgroup loops over them, so the per-dispatch cost is paid once. Real decoding feeds each
 * step's inputs from the previous one and uses nsteps = 1; such a step records its attention
 * split over token tiles and heads (several dispatches), then the per-layer score update and
 * eviction.
 */
typedef struct vkh2o_cache_step {
    uint32_t layer_first, layer_count;
    uint32_t position;
    uint32_t step;
    uint32_t flags;
    uint32_t nsteps;
    vkh2o_buffer* q;    uint64_t q_offset;
    vkh2o_buffer* a;    uint64_t a_offset;
    vkh2o_buffer* b;    uint64_t b_offset;
    vkh2o_buffer* out;  uint64_t out_offset;
} vkh2o_cache_step;

/* Records one step (a single dispatch for all layers of the range) followed by a barrier. Never
 * submits. The buffers and the cache must outlive the command buffer's execution.
 * Results: OK, INVALID_ARGUMENT (layer range, missing or too small buffers), VULKAN. */
VKH2O_API vkh2o_result vkh2o_cmd_cache_step(vkh2o_cache* c, VkCommandBuffer cb, const vkh2o_cache_step* s);

/*
 * Prefill one layer: sets the layer to the seq_len prompt tokens (positions 0..seq_len-1) with
 * scores = mass (the prefill attention mass, summed over heads and queries: f32 [seq_len]),
 * evicting once to cap with the cache's policy when seq_len > cap (top-k on the device, then
 * a gather of the kept rows, scores and positions, order preserved). a/b are f32 [seq_len]
 * rows of a_width/b_width floats. The layer's previous contents are discarded.
 * Records several dispatches with barriers. Results: OK, INVALID_ARGUMENT (seq_len 0 or over
 * max_prefill, layer out of range, buffers too small), VULKAN.
 */
typedef struct vkh2o_cache_prefill {
    uint32_t layer;
    uint32_t seq_len;
    vkh2o_buffer* a;     uint64_t a_offset;
    vkh2o_buffer* b;     uint64_t b_offset;
    vkh2o_buffer* mass;  uint64_t mass_offset;
} vkh2o_cache_prefill;
VKH2O_API vkh2o_result vkh2o_cmd_cache_prefill(vkh2o_cache* c, VkCommandBuffer cb, const vkh2o_cache_prefill* p);

/* The rows a cache of `layout` stores for the tokens of the layer's last forward (recorded or
 * run), as vkh2o_cache_prefill takes them: in the layer's scratch on the device, f32, row s of
 * the forward's S tokens at float s * a_width (b_width), S = that forward's seq_len:
 *   EXPANDED (or DEFAULT)  a = K [S][heads][nope + rope] (roped k_pe in every head), b = V [S][heads][v]
 *   LATENT                 a = c_kv after kv_a_layernorm [S][kv_lora], b = roped k_pe [S][rope]
 * The buffers belong to the layer: the next forward overwrites them, and they go with the layer.
 * Results: OK, INVALID_ARGUMENT (NULL argument, unknown layout). */
VKH2O_API vkh2o_result vkh2o_mla_layer_get_kv_rows(const vkh2o_mla_layer* layer, vkh2o_kv_layout layout,
                                                   vkh2o_buffer** a, vkh2o_buffer** b);

/* Submit-and-wait conveniences on the context's queue (CLI, tests). run_cache_steps records
 * nsteps steps from *first (positions and step counters advancing), as dispatches of
 * first->nsteps steps each with VKH2O_STEP_MOCK, else one dispatch per step (same inputs). */
VKH2O_API vkh2o_result vkh2o_run_cache_steps(vkh2o_cache* c, const vkh2o_cache_step* first, uint32_t nsteps);
VKH2O_API vkh2o_result vkh2o_run_cache_prefill(vkh2o_cache* c, const vkh2o_cache_prefill* p);
/* GPU time in milliseconds of the work of the last vkh2o_run_cache_steps or
 * vkh2o_run_cache_prefill on this cache (timestamps around it; negative when the device has no
 * timestamps or that call failed). */
VKH2O_API double vkh2o_cache_get_last_run_ms(const vkh2o_cache* c);
/* The most mock steps one dispatch runs (a larger nsteps is split into several dispatches):
 * unlimited (UINT32_MAX) on GPUs, lowered on CPU devices so one invocation stays inside
 * llvmpipe's loop limit; 1 where even one fused step would not fit (the steps then run split,
 * as real ones do). */
VKH2O_API uint32_t vkh2o_cache_get_steps_per_dispatch(const vkh2o_cache* c);
/* Builds the pipelines of the steps recorded with step_flags (VKH2O_STEP_MOCK or real inputs)
 * now instead of inside the first one (benchmarks call it before timing). Blocking.
 * Results: OK, INVALID_ARGUMENT, VULKAN, OUT_OF_HOST_MEMORY. */
VKH2O_API vkh2o_result vkh2o_cache_prepare(vkh2o_cache* c, uint32_t step_flags);

/* Statistics of one layer, kept on the device by the steps. */
typedef struct vkh2o_cache_stats {
    uint32_t len;            /* tokens in the cache now */
    uint32_t max_len;        /* largest length seen after a step or prefill */
    uint32_t steps;          /* decode steps run since the last reset */
    uint32_t evict_events;   /* steps (and prefills) that evicted at least one token */
    uint32_t evicted_tokens; /* tokens evicted in total */
    uint32_t last_evicted;   /* tokens evicted by the last step */
} vkh2o_cache_stats;
/* Reads the statistics of layers [0, count) into out[count] (blocking; the device must have
 * finished the recorded work). Results: OK, INVALID_ARGUMENT, VULKAN. */
VKH2O_API vkh2o_result vkh2o_cache_read_stats(vkh2o_cache* c, vkh2o_cache_stats* out, uint32_t count);
/* Per-step history (desc.history_steps > 0): for steps [first, first + n) (by the step field of
 * vkh2o_cache_step, modulo history_steps), len_out[s * num_layers + l] and
 * evicted_out[s * num_layers + l]. Blocking. Results: OK, INVALID_ARGUMENT. */
VKH2O_API vkh2o_result vkh2o_cache_read_history(vkh2o_cache* c, uint32_t first, uint32_t n,
                                              uint32_t* len_out, uint32_t* evicted_out);

/* A copy of one layer's contents (blocking). The caller provides arrays of at least
 * `capacity` entries (rows: capacity x a_width / b_width floats); NULL pointers are skipped.
 * keys: the selection keys of the last step recorded with VKH2O_STEP_RECORD_KEYS, by slot of
 * the cache before that step's eviction (keys_len of them). Results: OK, INVALID_ARGUMENT, VULKAN. */
typedef struct vkh2o_cache_snapshot {
    uint32_t len;
    uint32_t* positions;
    float* scores;
    float* a;
    float* b;
    uint32_t* keys;
    uint32_t keys_len;
} vkh2o_cache_snapshot;
VKH2O_API vkh2o_result vkh2o_cache_read_snapshot(vkh2o_cache* c, uint32_t layer, vkh2o_cache_snapshot* snap);

/* The mock data of VKH2O_STEP_MOCK (so that a CPU simulation reproduces it bit for bit):
 * element i of stream s (0: q, 1: rows a, 2: rows b) of layer `layer` at position `pos` is
 * (hash >> 21) / 1024 - 1, a multiple of 1/1024 in [-1, 1) (exact in fp16), with
 * hash = vkh2o_hash32(vkh2o_mock_base(seed, layer, pos, s) + i * 0x9e3779b9). */
VKH2O_API uint32_t vkh2o_hash32(uint32_t x);
VKH2O_API uint32_t vkh2o_mock_base(uint32_t seed, uint32_t layer, uint32_t pos, uint32_t stream);
VKH2O_API float vkh2o_mock_value(uint32_t base, uint32_t i);

#ifdef __cplusplus
}
#endif
#endif
