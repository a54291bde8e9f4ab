/*
 * vkh2o/kvquant.h — the quantised KV cache: blocks of tokens stored on the device in FP16,
 * packed INT8 or packed INT4 (or evicted), routed by importance, and read in place by one
 * mixed-precision decode attention (score, softmax and P.V passes, each one dispatch that reads
 * FP16, INT8 and INT4 blocks in place). Included by vkh2o.h; do not include directly.
 *
 * Model
 *   The cache holds tokens in blocks of B tokens (block_size, default 16). Two layouts:
 *     latent    per token one row [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)] shared by
 *               all heads (MLA with the absorbed query); the value of a token is its c_kv part,
 *               so it is stored once: 576 numbers per token for Kimi.
 *     expanded  per token and per head K = [k_nope | k_pe] (nope+rope) and V (v_head_dim).
 *   Each block has device metadata: precision, pool slot, first token, token count, and the
 *   importance (sum and max of its tokens' accumulated attention mass). The first sink_blocks
 *   and the last recent_blocks blocks (the block being appended to is always recent) stay FP16.
 *
 * Storage (what the attention shader reads, as 32-bit words; no 8/16-bit storage features)
 *   Three pools, one device buffer per precision, each a whole number of block slots. A slot
 *   holds, per KV head, the K section then (expanded only) the V section; each section starts
 *   on a word boundary and is [data | fp16 scales]. Element e = t*d + c (token t of the
 *   block, channel c of d) is
 *     FP16  half e&1 of word e>>1 (low half first), IEEE binary16;
 *     INT8  byte e&3 of word e>>2 (little endian), two's complement, range [-127, 127];
 *     INT4  nibble e&7 of word e>>3: byte i holds element 2i in bits 0-3 and element 2i+1 in
 *           bits 4-7; two's complement 4-bit, range [-7, 7].
 *   Symmetric quantisation with one fp16 scale per group: s = fp16(maxabs * (1/qmax)) (the
 *   product rounded to float, then to fp16, nearest even), q = the integer in [-qmax, qmax]
 *   nearest to x/s (ties to even; s == 0 gives q = 0); value = q * s. Groups:
 *     PER_TOKEN    G consecutive channels of one token (the last group of a row may be
 *                  shorter); scale index t*ceil(d/G) + c/G.
 *     PER_CHANNEL  one channel over the valid tokens of the block (KIVI for keys); index c.
 *   Scales are stored after the data, 2 per word (low half first). Default grouping: keys
 *   PER_CHANNEL, values PER_TOKEN (KIVI); the latent row is the key (K grouping).
 *   Quantisation always reads the FP16 (or already quantised) data in the cache: demotion
 *   re-quantises the current, already lossy values, and nothing is ever promoted back.
 *
 * Policies (fractions of the routable blocks, i.e. neither sink nor recent, by importance
 * rank: highest importance sum first, ties to the lower block index)
 *     fp16          100% FP16 (the reference cache)
 *     conservative  top 50% FP16, rest INT8
 *     balanced      top 25% FP16, next 50% INT8, rest INT4
 *     aggressive    top 10% FP16, next 30% INT8, next 40% INT4, bottom 20% evicted
 *     uniform-int8  all routable INT8;  uniform-int4  all routable INT4
 *   Counts are floor(cumulative fraction x routable); a block keeps the lower of its target
 *   precision and the one it already has (FP16 > INT8 > INT4 > evicted).
 *
 * Selectors (which blocks one decode step attends to; sinks and recents always)
 *     all     every non-evicted block
 *     score   the top `budget_blocks` routable blocks by importance sum
 *     quest   the top `budget_blocks` by the query-aware bound of Quest: per block and KV head
 *             the per-channel min m_c and max M_c of the keys; bound_h = sum_c max(q_c m_c,
 *             q_c M_c) for query head h; a block's key is the max over heads (the heads
 *             share the selection, so the cache is read once)
 *     random  `budget_blocks` routable blocks chosen by a seeded hash (the control)
 *   Evicted blocks are never selected. Ties: lower block index first.
 *
 * Recording and submitting (the header's cmd_/run_ rule)
 *   vkh2o_cmd_qcache_* record into the caller's command buffer: append, add_importance, attend.
 *   The cache's host bookkeeping (tokens, blocks, FP16 slots in use) advances when an append is
 *   recorded, so every recorded command buffer must be submitted, once, in recording order,
 *   and nothing else may run on the cache in between. An append needs free FP16 slots reserved
 *   beforehand (vkh2o_run_qcache_reserve), because growing a pool copies it and frees the old
 *   buffer, which a pending command buffer may still use.
 *   Only vkh2o_run_qcache_* exist for what cannot be recorded: prefill (frees and reallocates
 *   the pools), reserve (grows the FP16 pool by a copy), route (reads the per-precision counts
 *   back to size the new pools), metrics (reads its sums back), and the _host variants (they
 *   upload through temporary buffers). Each submits on the context's queue and waits.
 *
 * Threads: a qcache belongs to its context (one thread at a time).
 */
#ifndef VKH2O_KVQUANT_H
#define VKH2O_KVQUANT_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkh2o_qcache vkh2o_qcache;

typedef enum vkh2o_qprec {
    VKH2O_QPREC_FP16 = 0,
    VKH2O_QPREC_INT8 = 1,
    VKH2O_QPREC_INT4 = 2,
    VKH2O_QPREC_EVICTED = 3,
} vkh2o_qprec;

typedef enum vkh2o_qgrouping {
    VKH2O_QGROUP_DEFAULT = 0,      /* keys PER_CHANNEL, values PER_TOKEN */
    VKH2O_QGROUP_PER_TOKEN = 1,
    VKH2O_QGROUP_PER_CHANNEL = 2,
} vkh2o_qgrouping;

typedef enum vkh2o_qpolicy {
    VKH2O_QPOLICY_FP16 = 0,
    VKH2O_QPOLICY_CONSERVATIVE,
    VKH2O_QPOLICY_BALANCED,
    VKH2O_QPOLICY_AGGRESSIVE,
    VKH2O_QPOLICY_UNIFORM_INT8,
    VKH2O_QPOLICY_UNIFORM_INT4,
    VKH2O_QPOLICY_COUNT
} vkh2o_qpolicy;

typedef enum vkh2o_qselector {
    VKH2O_QSELECT_ALL = 0,
    VKH2O_QSELECT_SCORE,
    VKH2O_QSELECT_QUEST,
    VKH2O_QSELECT_RANDOM,
    VKH2O_QSELECT_COUNT
} vkh2o_qselector;

typedef enum vkh2o_qcache_flags {
    /* keep per-block per-channel key min/max (needed by the quest selector; costs one word
     * per key channel per block) */
    VKH2O_QCACHE_QUEST_BOUNDS = 1u << 0,
} vkh2o_qcache_flags;

/*
 * Desc; all zero is valid (Kimi K2 latent cache of 4096 tokens):
 *   layout            DEFAULT = LATENT
 *   num_heads         64 query heads (expanded: also the KV heads)
 *   kv_lora_rank      512          qk_rope_head_dim  64
 *   qk_nope_head_dim  128          v_head_dim        128   (expanded only)
 *   max_tokens        4096         capacity in tokens (append beyond it: BUDGET)
 *   block_size        16           B, 2..512
 *   group_size        32           G, 2..1024 (PER_TOKEN groups)
 *   k_grouping, v_grouping  DEFAULT (K per channel, V per token)
 *   sink_blocks       1            recent_blocks  2 (at least 1: the open block)
 *   headroom_blocks   0 = ceil(64/B)+1: FP16 slots kept free after routing for decode appends
 *   flags             vkh2o_qcache_flags
 * Limits (INVALID_ARGUMENT): B * ceil(d/G) <= 2048 scales per section for PER_TOKEN, d <= 2048
 * for PER_CHANNEL, key dim <= 2048; num_heads <= 1024.
 */
typedef struct vkh2o_qcache_desc {
    vkh2o_kv_layout layout;
    uint32_t num_heads;
    uint32_t kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim;
    uint32_t max_tokens;
    uint32_t block_size;
    uint32_t group_size;
    vkh2o_qgrouping k_grouping, v_grouping;
    uint32_t sink_blocks, recent_blocks;
    uint32_t headroom_blocks;
    uint32_t flags;
} vkh2o_qcache_desc;

/* Fills the head dims of desc from an MLA config (other fields untouched). */
VKH2O_API void vkh2o_qcache_desc_from_mla(const vkh2o_mla_config* cfg, vkh2o_kv_layout layout, vkh2o_qcache_desc* desc);
/* Validates desc and writes the defaults into *out (all fields resolved).
 * Results: OK, INVALID_ARGUMENT (message in err). */
VKH2O_API vkh2o_result vkh2o_qcache_desc_resolve(const vkh2o_qcache_desc* desc, vkh2o_qcache_desc* out, vkh2o_error* err);

/* Row sizes: key row d_k (latent: kv_lora + rope; expanded: nope + rope), value row d_v
 * (latent: kv_lora, the first d_v numbers of the key row), KV heads (latent 1). */
typedef struct vkh2o_qshape {
    uint32_t kv_heads, d_k, d_v;
    bool v_in_k;                   /* latent: values are the first d_v key channels */
} vkh2o_qshape;
VKH2O_API vkh2o_qshape vkh2o_qcache_shape(const vkh2o_qcache_desc* resolved);

/* Creates an empty cache (metadata and importance buffers; pools grow on prefill).
 * Results: OK, INVALID_ARGUMENT, OUT_OF_DEVICE_MEMORY, VULKAN, UNSUPPORTED (a pool would exceed
 * the device's maxStorageBufferRange). */
VKH2O_API vkh2o_result vkh2o_qcache_create(vkh2o_context* ctx, const vkh2o_qcache_desc* desc, vkh2o_qcache** out);
VKH2O_API void vkh2o_qcache_destroy(vkh2o_qcache* qc);
VKH2O_API const vkh2o_qcache_desc* vkh2o_qcache_get_desc(const vkh2o_qcache* qc);

/*
 * Rows of n tokens (f32, from byte offsets that are multiples of 4): k [n, kv_heads, d_k],
 * v [n, kv_heads, d_v] (expanded; ignored for latent, may be NULL), importance [n]
 * (accumulated attention mass per token). Device buffers are borrowed until the work using
 * them has executed.
 */
typedef struct vkh2o_qcache_rows {
    const vkh2o_buffer* k;           uint64_t k_offset;
    const vkh2o_buffer* v;           uint64_t v_offset;
    const vkh2o_buffer* importance;  uint64_t importance_offset;
    uint32_t n;
} vkh2o_qcache_rows;

/* Prefill: replaces the content with the rows' tokens, all FP16 (the pools are reallocated to
 * fit them plus headroom). Append (decode): adds the tokens after the current ones, FP16
 * (recent). The run_ forms reserve what the append needs first.
 * Results: OK, INVALID_ARGUMENT (buffer too small from its offset, n = 0), BUDGET (beyond
 * max_tokens; cmd_append: fewer free FP16 slots reserved than the tokens need),
 * OUT_OF_DEVICE_MEMORY, VULKAN. */
VKH2O_API vkh2o_result vkh2o_run_qcache_prefill(vkh2o_qcache* qc, const vkh2o_qcache_rows* rows);
VKH2O_API vkh2o_result vkh2o_run_qcache_append(vkh2o_qcache* qc, const vkh2o_qcache_rows* rows);
/* Records the append (one dispatch and a barrier) and advances the host bookkeeping. */
VKH2O_API vkh2o_result vkh2o_cmd_qcache_append(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_qcache_rows* rows);
/* Makes sure `tokens` more tokens can be appended by recorded appends without growing the FP16
 * pool (grows it by a copy now if needed; the device must be done with the cache).
 * Results: OK, BUDGET (beyond max_tokens), OUT_OF_DEVICE_MEMORY, UNSUPPORTED, VULKAN. */
VKH2O_API vkh2o_result vkh2o_run_qcache_reserve(vkh2o_qcache* qc, uint32_t tokens);
/* Host-array variants (upload through temporary buffers). */
VKH2O_API vkh2o_result vkh2o_run_qcache_prefill_host(vkh2o_qcache* qc, const float* k, const float* v,
                                                     const float* importance, uint32_t n);
VKH2O_API vkh2o_result vkh2o_run_qcache_append_host(vkh2o_qcache* qc, const float* k, const float* v,
                                                    const float* importance, uint32_t n);
/* Adds mass[i] (f32 from byte mass_offset, a multiple of 4) to the importance of token first+i
 * (i < n) and refreshes the block sums/maxima. The cmd_ form records one dispatch and a barrier.
 * Results: OK, INVALID_ARGUMENT (range outside the tokens held, buffer too small). */
VKH2O_API vkh2o_result vkh2o_cmd_qcache_add_importance(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* mass,
                                                       uint64_t mass_offset, uint32_t first, uint32_t n);
VKH2O_API vkh2o_result vkh2o_run_qcache_add_importance(vkh2o_qcache* qc, const vkh2o_buffer* mass, uint64_t mass_offset,
                                                       uint32_t first, uint32_t n);

/* Routes every block with the policy on the GPU (ranks, precisions, slots), reads back only
 * the per-precision counts, reallocates the pools to exactly those counts (+ headroom for
 * FP16), and re-quantises the demoted blocks on the GPU. Results: OK, INVALID_ARGUMENT,
 * OUT_OF_DEVICE_MEMORY, VULKAN, UNSUPPORTED (on a CPU device, more than 262144 blocks: use a
 * larger block_size). */
VKH2O_API vkh2o_result vkh2o_run_qcache_route(vkh2o_qcache* qc, vkh2o_qpolicy policy);

typedef struct vkh2o_qcache_stats {
    uint32_t tokens, blocks;
    uint32_t blocks_by_prec[4];    /* indexed by vkh2o_qprec */
    uint32_t slots_by_prec[3];     /* allocated pool slots (FP16 includes headroom) */
    uint64_t pool_bytes[3];        /* device bytes of each pool */
    uint64_t meta_bytes;           /* block metadata + token importance + quest bounds */
    uint64_t allocated_bytes;      /* pools + meta_bytes: the sizes of the cache's device buffers */
    uint64_t scratch_bytes;        /* attention/metrics work buffers (not cache storage) */
} vkh2o_qcache_stats;
VKH2O_API void vkh2o_qcache_get_stats(const vkh2o_qcache* qc, vkh2o_qcache_stats* out);

/* Analytical model. Bytes of one block slot of precision p (all KV heads, K and V sections). */
VKH2O_API uint64_t vkh2o_qcache_slot_bytes(const vkh2o_qcache_desc* resolved, vkh2o_qprec p);
/* Block counts a policy gives right after routing a fresh prefill of n tokens. */
VKH2O_API void vkh2o_qpolicy_counts(const vkh2o_qcache_desc* resolved, vkh2o_qpolicy policy, uint32_t n,
                                    uint32_t counts[4]);
/* Device bytes of a cache with the given block counts: slots (FP16 + headroom) + metadata. */
VKH2O_API uint64_t vkh2o_qcache_bytes_model(const vkh2o_qcache_desc* resolved, const uint32_t counts[4]);
/* Attention FLOPs of one decode step (one layer) attending to `tokens` tokens:
 * 2*H*(d_k + d_v) multiply-adds counted as 2 FLOPs each, plus 5*H per token for the softmax. */
VKH2O_API double vkh2o_qattn_flops(const vkh2o_qcache_desc* resolved, uint64_t tokens);

VKH2O_API const char* vkh2o_qpolicy_name(vkh2o_qpolicy p);        /* "balanced" */
VKH2O_API const char* vkh2o_qselector_name(vkh2o_qselector s);    /* "score" */
VKH2O_API const char* vkh2o_qprec_name(vkh2o_qprec p);            /* "int4" */
/* Fractions of routable blocks: [fp16, int8, int4, evicted], summing to 1. */
VKH2O_API void vkh2o_qpolicy_fractions(vkh2o_qpolicy p, float out[4]);
/* Parses a name; returns false if unknown. */
VKH2O_API bool vkh2o_qpolicy_parse(const char* name, vkh2o_qpolicy* out);
VKH2O_API bool vkh2o_qselector_parse(const char* name, vkh2o_qselector* out);

/*
 * Decode attention of one query per head over the selected blocks, reading each block in its
 * precision in place. q: [num_heads, d_k] f32 (latent: the absorbed query q_nope*W_uk then
 * q_pe); out: [num_heads, d_v] f32 (latent: the attention-weighted c_kv, before W_uv).
 *   scale          softmax scale (0 = d_k^-0.5)
 *   selector       which blocks; budget_blocks for score/quest/random (routable blocks, on top
 *                  of sinks and recents); seed for random
 *   blocks_per_split  0 = automatic (flash-decoding split size; the combine is deterministic).
 *                  A given value is rounded up so a split holds a multiple of 4 token positions,
 *                  and clamped so no shader invocation exceeds the loop budget of CPU devices
 *                  (llvmpipe ends an invocation's loops after 65535 iterations) and there are at
 *                  most 4096 splits.
 */
typedef struct vkh2o_qattn_desc {
    float scale;
    vkh2o_qselector selector;
    uint32_t budget_blocks;
    uint64_t seed;
    uint32_t blocks_per_split;
} vkh2o_qattn_desc;

/* Records select + split attention + combine into cb (no submit). Buffers must stay alive
 * until cb has executed. Results: OK, INVALID_ARGUMENT, VULKAN, OUT_OF_DEVICE_MEMORY,
 * UNSUPPORTED (the scores [num_heads, selected tokens] or the split partials exceed
 * maxStorageBufferRange, or on a CPU device more than 262144 blocks to rank). */
VKH2O_API vkh2o_result vkh2o_cmd_qcache_attend(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q,
                                               vkh2o_buffer* out, const vkh2o_qattn_desc* desc);
/* Submits and waits. *selected_tokens (may be NULL) receives the number of tokens attended. */
VKH2O_API vkh2o_result vkh2o_run_qcache_attend(vkh2o_qcache* qc, const vkh2o_buffer* q, vkh2o_buffer* out,
                                               const vkh2o_qattn_desc* desc, uint32_t* selected_tokens);

/* ---- measuring the decode attention (tools, benchmarks) ---- */

/* How the attention reads the query, probabilities and pools: AUTO is the device's choice
 * (texel views on CPU devices when the layout is wide and every view fits the texel limit,
 * storage buffers elsewhere); TEXEL where it cannot be used makes the attention UNSUPPORTED. */
typedef enum vkh2o_qread {
    VKH2O_QREAD_AUTO = 0,
    VKH2O_QREAD_STORAGE = 1,
    VKH2O_QREAD_TEXEL = 2,
} vkh2o_qread;
/* Sets the read path of this cache's later attentions (both give the same results up to
 * rounding order). Results: OK, INVALID_ARGUMENT (unknown path). */
VKH2O_API vkh2o_result vkh2o_qcache_set_read_path(vkh2o_qcache* qc, vkh2o_qread path);
/* The path an attention over every block would take now (AUTO resolved: STORAGE or TEXEL).
 * Results: OK, INVALID_ARGUMENT, UNSUPPORTED (no attention plan fits this cache). */
VKH2O_API vkh2o_result vkh2o_qcache_get_read_path(vkh2o_qcache* qc, vkh2o_qread* out);

/* GPU times of one attention: the whole, and with profiling on its passes in the order they
 * run: select, score, softmax, pv, combine (negative: not measured). */
#define VKH2O_QATTN_PASSES 5
typedef struct vkh2o_qattn_timings {
    double total_ms;
    double pass_ms[VKH2O_QATTN_PASSES];
} vkh2o_qattn_timings;
/* With profiling on, every attention also writes a timestamp between its passes (a little
 * slower; for benchmarks). Off by default. */
VKH2O_API void vkh2o_qcache_set_profile(vkh2o_qcache* qc, bool on);
/* The times of the last vkh2o_run_qcache_attend on this cache (GPU timestamps; negative when
 * the device has none or that call failed). */
VKH2O_API void vkh2o_qcache_get_last_attend_timings(const vkh2o_qcache* qc, vkh2o_qattn_timings* out);
/* The blocks the last attention attended (its selection), ordered by (precision, index): their
 * number in *count and, when blocks is not NULL, their indices (room for stats.blocks). Blocking;
 * the device must have finished the attention. Results: OK, INVALID_ARGUMENT, VULKAN. */
VKH2O_API vkh2o_result vkh2o_qcache_read_selection(vkh2o_qcache* qc, uint32_t* blocks, uint32_t* count);
/* How many of n_blocks blocks the router may demote or evict (neither sink nor recent) for a
 * resolved desc: the budget_blocks of the score/quest/random selectors counts these. */
VKH2O_API uint32_t vkh2o_qcache_routable_blocks(const vkh2o_qcache_desc* resolved, uint32_t n_blocks);

/* Error of the cache's stored (dequantised) values against reference tensors, on the GPU,
 * over the non-evicted tokens. k_ref: [tokens, kv_heads, d_k] f32; v_ref: [tokens, kv_heads, d_v]
 * (expanded; for latent v is the first d_v channels of k_ref and v_ref is ignored). */
typedef struct vkh2o_qmetrics {
    double mse, max_abs, cosine;
    uint64_t count;                /* elements compared */
} vkh2o_qmetrics;
VKH2O_API vkh2o_result vkh2o_run_qcache_metrics(vkh2o_qcache* qc, const vkh2o_buffer* k_ref, const vkh2o_buffer* v_ref,
                                            vkh2o_qmetrics* k_out, vkh2o_qmetrics* v_out);

/* Downloads the block metadata (tests, tools): per block precision, pool slot, first token,
 * token count, importance sum and max. Arrays of at least stats.blocks entries; any may be NULL. */
VKH2O_API vkh2o_result vkh2o_qcache_read_blocks(vkh2o_qcache* qc, uint32_t* prec, uint32_t* slot, uint32_t* first,
                                                uint32_t* count, float* imp_sum, float* imp_max);

#ifdef __cplusplus
}
#endif
#endif
