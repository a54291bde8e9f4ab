/*
 * The MLA layer's private API (mla.c; shaders rmsnorm, rope, attn_lse, attn_pv, attn_reduce):
 * generic recorders of its kernels, and access to a layer's device state for the KV-cache
 * work (expanded and latent layouts, weight absorption), tests and tools.
 *
 * Recorders (vkh2o_cmd_*) put no barrier before their first dispatch or after their last;
 * callers order them with vkh2o_barrier. All tensors are f32 unless said otherwise.
 */
#ifndef VKH2O_MLA_INTERNAL_H
#define VKH2O_MLA_INTERNAL_H

#include "internal.h"
#include "matmul_internal.h"

/* Positions handed to RoPE must stay below this (the table splits them into three bytes). */
#define VKH2O_ROPE_MAX_POSITION (1u << 24)
/* The longest rope part the shaders take (the reference holds rows on the stack). */
#define VKH2O_ROPE_MAX_DIM 512u

/* ---- RoPE table ----
 * cos/sin of p * inv_freq[i] for p = a + 256 b + 65536 c, as three levels of 256 entries:
 * table[2 * ((level * 256 + byte) * (rope/2) + i) + {0, 1}] = {cos, sin}(byte * 256^level * f_i),
 * computed in double; level 0 is scaled by attention_factor. The shaders combine the three by
 * complex products, so any position < 2^24 costs float rounding only. */
static inline uint64_t vkh2o_rope_table_floats(uint32_t rope) { return 3ull * 256ull * rope; }
void vkh2o_rope_table_fill(const float* inv_freq, uint32_t rope, float attention_factor, float* table);

/* ---- RMSNorm (+ RoPE tail) : shaders/mla/rmsnorm.comp ----
 * y[r * y_stride + c] = x[r * x_stride + c] / sqrt(mean x^2 + eps) * w[c], c < n, r < rows;
 * when rope > 0 also pe[r * pe_stride + :] = RoPE_{pos0 + r}(x[r * x_stride + n + 0 .. rope-1])
 * and, for h < bc_heads, bc[r * bc_tok_stride + h * bc_head_stride + bc_offset + :] = the same.
 * Unused bindings (table/pe/bc without rope, bc without bc_heads) may be any valid binding.
 * With pos_buf (and rope > 0) the positions are base + pos0 + r, base the u32 at word pos_word of
 * pos_buf read on the device when the dispatch runs (a KV cache layer's next position,
 * vkh2o_kvcache_position_word); a position at or past 2^24 gives NaN rope values.
 * Results: OK, INVALID_ARGUMENT (zero sizes, odd rope, pos0 + rows > 2^24, pos_word outside
 * pos_buf), kernel errors. */
typedef struct vkh2o_rmsnorm_args {
    uint32_t rows, n, x_stride, y_stride;
    float eps;
    uint32_t rope;            /* 0: plain RMSNorm */
    bool interleave;
    uint32_t pos0, pe_stride;
    uint32_t bc_heads, bc_tok_stride, bc_head_stride, bc_offset;
    const vkh2o_buffer* pos_buf;   /* NULL: positions pos0 + r */
    uint32_t pos_word;
    /* the owning object's plan (vkh2o_rmsnorm_plan_make for this rope and interleave); NULL: a
     * plan for this call alone, its kernel found by name (tests, which own no object) */
    struct vkh2o_pos_plan* plan;
} vkh2o_rmsnorm_args;
vkh2o_result vkh2o_cmd_rmsnorm(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_rmsnorm_args* a,
                               vkh2o_binding x, vkh2o_binding w, vkh2o_binding table,
                               vkh2o_binding y, vkh2o_binding pe, vkh2o_binding bc);
/* The kernels of one RMSNorm call site (its rope and interleave fixed): [0] positions pos0 + r,
 * [1] positions from pos_buf (rope > 0 only). vkh2o_rmsnorm_plan_make prepares them (nothing is
 * made until a slot is read: vkh2o_kernel_slot_read at create for the variants a decode step
 * records). Results: OK, INVALID_ARGUMENT. */
typedef struct vkh2o_pos_plan {   /* RMSNorm's and RoPE's alike */
    uint32_t rope;
    bool interleave;
    vkh2o_kernel_slot k[2];
} vkh2o_pos_plan;
typedef vkh2o_pos_plan vkh2o_rmsnorm_plan;
vkh2o_result vkh2o_rmsnorm_plan_make(vkh2o_context* ctx, uint32_t rope, bool interleave, vkh2o_rmsnorm_plan* p);

/* ---- RoPE in place : shaders/mla/rope.comp ----
 * x[s * tok_stride + h * head_stride + offset + 0 .. rope-1] rotated for position pos0 + s,
 * s < tokens, h < heads; with pos_buf at base + pos0 + s as vkh2o_rmsnorm_args says (NaN rope
 * values at or past 2^24). Results: OK, INVALID_ARGUMENT, kernel errors. */
typedef struct vkh2o_rope_args {
    uint32_t tokens, heads, tok_stride, head_stride, offset, pos0, rope;
    bool interleave;
    const vkh2o_buffer* pos_buf;   /* NULL: positions pos0 + s */
    uint32_t pos_word;
    struct vkh2o_pos_plan* plan;   /* as vkh2o_rmsnorm_args' (vkh2o_rope_plan_make); NULL: a lookup */
} vkh2o_rope_args;
vkh2o_result vkh2o_cmd_rope(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_rope_args* a,
                            vkh2o_binding table, vkh2o_binding x);
/* RoPE's kernels of one call site, as vkh2o_rmsnorm_plan: [0] positions pos0 + s, [1] from pos_buf. */
typedef vkh2o_pos_plan vkh2o_rope_plan;
vkh2o_result vkh2o_rope_plan_make(vkh2o_context* ctx, uint32_t rope, bool interleave, vkh2o_rope_plan* p);

/* ---- attention with the attention mass : shaders/attn_lse, attn_pv, attn_reduce ----
 * S queries, T keys, H heads; query i sees key j iff j <= i + causal_off (and j < T):
 * causal_off = T - S when the queries are the last S of the T keys (prefill of S new tokens
 * after T - S cached ones), >= T - 1 for no mask. Layouts in floats:
 *   q[i * q_ts + h * q_hs + 0..D-1], k[j * k_ts + h * k_hs + ...], v[j * v_ts + h * v_hs + 0..DV-1],
 *   o[i * o_ts + h * o_hs + ...]; k_hs = 0 / v_hs = 0 share one key / value row across heads
 * (the latent layout: keys [c_kv | k_pe], values c_kv, D = kv_lora + rope, DV = kv_lora).
 * Outputs: o (written), scores[j] = sum_h sum_i P[h, i, j] (T floats; written, or added when
 * accumulate_scores), probs[(h * S + i) * T + j] (optional, masked entries 0).
 * Scratch: lse (H * S floats), part (vkh2o_attn_part_floats floats). */
/* vkh2o_attn_tuning: internal.h (the device profile holds the default) */
/* Heads per P.V invocation in effect for T keys of width D / DV: t->hg, lowered to stay within
 * t->loop_budget. */
uint32_t vkh2o_attn_hg(const vkh2o_attn_tuning* t, uint32_t T, uint32_t D, uint32_t DV);
/* The device profile's (ctx->profile, attn_*): register blocking and texel reads in the CPU shapes,
 * small tiles elsewhere; VKH2O_ATTN_TUNING and VKH2O_ATTN_TEXEL override (src/core/profile.c). */
vkh2o_attn_tuning vkh2o_attn_tuning_default(const vkh2o_context* ctx);

typedef struct vkh2o_attn_args {
    uint32_t S, T, H, D, DV;
    int32_t causal_off;
    float scale;
    uint32_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;
    bool accumulate_scores;
} vkh2o_attn_args;

/* The attention passes' kernels of one call site, planned for a tuning and D, DV when its object
 * is created (vkh2o_attn_plan_make: keys only, each made at the first recording that reads it).
 * The heads per P.V invocation, which vkh2o_attn_hg estimates from T, come from breakpoints
 * made here: hg_keys[h - 1] is the most keys at which h heads fit the loop budget, so a call
 * steps down from t.hg while T exceeds the breakpoint (a few compares, no division).
 * Results: OK, INVALID_ARGUMENT (an empty tuning or shape, hg above VKH2O_ATTN_MAX_HG). */
typedef struct vkh2o_attn_plan {
    vkh2o_attn_tuning t;      /* less texel: both reads are planned */
    uint32_t D, DV;
    uint32_t hg_keys[VKH2O_ATTN_MAX_HG];   /* UINT32_MAX: no budget; [0] is the most keys a row may have */
    vkh2o_kernel_slot lse[2];                      /* [texel] */
    vkh2o_kernel_slot pv[2][2][VKH2O_ATTN_MAX_HG];  /* [texel][probs][hg - 1] */
    vkh2o_kernel_slot reduce;
} vkh2o_attn_plan;
vkh2o_result vkh2o_attn_plan_make(vkh2o_context* ctx, const vkh2o_attn_tuning* t, uint32_t D, uint32_t DV, vkh2o_attn_plan* p);
/* The heads per P.V invocation for T keys under plan p (vkh2o_attn_hg's value, from the plan's
 * breakpoints). */
static inline uint32_t vkh2o_attn_plan_hg(const vkh2o_attn_plan* p, uint32_t T)
{
    uint32_t h = p->t.hg;
    while (h > 1 && T > p->hg_keys[h - 1])
        h--;
    return h;
}

typedef struct vkh2o_attn_bufs {
    vkh2o_binding q, k, v, o, lse, part;
    vkh2o_binding scores;     /* .buffer VK_NULL_HANDLE: vkh2o_cmd_attention_mass not used */
    vkh2o_binding probs;      /* .buffer VK_NULL_HANDLE: not written */
    /* Optional: the buffers q, k and v bind (each NULL or the buffer of its binding). With all
     * three and t->texel, the passes read them through texel views (one cached per buffer and
     * offset) when every row starts on a 16-byte texel: D, DV, q_ts, q_hs, k_ts, k_hs, v_ts,
     * v_hs multiples of 4 and the binding offsets multiples of 256 bytes, and the views fit the
     * device's texel limit; otherwise they fall back to storage reads. */
    vkh2o_buffer *q_buffer, *k_buffer, *v_buffer;
    /* the owning object's plan (vkh2o_attn_plan_make for the call's tuning, D and DV); NULL: a
     * plan for this call alone, its kernels found by name (tests, which own no object) */
    vkh2o_attn_plan* plan;
} vkh2o_attn_bufs;

uint64_t vkh2o_attn_part_floats(const vkh2o_attn_tuning* t, uint32_t S, uint32_t T, uint32_t H, uint32_t D, uint32_t DV);
/* Passes 1 and 2 (lse, barrier, P.V + partial mass). No barrier after. Results: OK,
 * INVALID_ARGUMENT (empty shape or tuning, a binding too small, q/k/v_buffer not the buffer
 * of its binding), UNSUPPORTED (rows beyond the loop budget), kernel and dispatch errors. */
/* Whether vkh2o_cmd_attention would read through texel views (tests, benchmarks). */
bool vkh2o_attn_uses_texels(const vkh2o_context* ctx, const vkh2o_attn_tuning* t, const vkh2o_attn_args* a,
                            const vkh2o_attn_bufs* b);
vkh2o_result vkh2o_cmd_attention(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_attn_tuning* t,
                                 const vkh2o_attn_args* a, const vkh2o_attn_bufs* b);
/* Pass 3: scores from the partials (after a barrier that follows vkh2o_cmd_attention). */
vkh2o_result vkh2o_cmd_attention_mass(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_attn_tuning* t,
                                      const vkh2o_attn_args* a, const vkh2o_attn_bufs* b);

/* ---- a layer's device state ---- */

/* Device buffers of the last projection (vkh2o_cmd_mla_project / vkh2o_cmd_mla_forward) of
 * S tokens, each [max_seq_len, ...] of which the first S rows are valid, row-major f32:
 *   q    [S, H, nope+rope]  roped query (q_pe rotated), head h at (s * H + h) * (nope+rope)
 *   k    [S, H, nope+rope]  key: k_nope from kv_b_proj, roped k_pe copied into every head
 *   v    [S, H, v]
 *   ckv  [S, kv_lora]       c_kv after kv_a_layernorm (the latent cache entry)
 *   kpe  [S, rope]          roped k_pe (the latent cache's rope part)
 *   o    [S, H, v]          attention output before o_proj (after a forward)
 * The buffers are overwritten by the next projection of the layer. */
typedef struct vkh2o_mla_state {
    vkh2o_buffer *q, *k, *v, *ckv, *kpe, *o;
    vkh2o_buffer* rope_table;         /* the layer's RoPE table (vkh2o_rope_table_fill) */
    uint32_t max_seq_len;
    uint32_t heads, nope, rope, v_dim, kv_lora, q_lora, hidden;
    float scale;                      /* softmax scale */
    bool interleave;
    vkh2o_attn_tuning tuning;
} vkh2o_mla_state;
const vkh2o_mla_state* vkh2o_mla_layer_state(const vkh2o_mla_layer* layer);

/* The device weights (as uploaded: 16-bit or f32 nn.Linear [out, in], see matmul_internal.h):
 * VKH2O_W_KV_B_PROJ [H * (nope + v), kv_lora] (head h: rows h*(nope+v) + [0, nope) are W_uk,
 * + [nope, nope+v) W_uv), VKH2O_W_O_PROJ [hidden, H * v], the others likewise; the norm
 * weights as f32 rows. NULL for an absent weight (q_proj with LoRA, ...). */
const vkh2o_dev_weight* vkh2o_mla_layer_weight(const vkh2o_mla_layer* layer, vkh2o_mla_weight w);

/* Records the projections of S tokens at positions pos0..: hidden [S, hidden_size] ->
 * state q, k, v, ckv, kpe. Ends with a barrier. Results: as vkh2o_cmd_mla_forward. */
vkh2o_result vkh2o_cmd_mla_project(vkh2o_mla_layer* layer, VkCommandBuffer cb, vkh2o_binding hidden,
                                   uint32_t S, uint32_t pos0);
/* The same at positions base + 0 .. S-1, base the u32 at word pos_word of pos_buf read on the
 * device (a KV cache layer's next position: vkh2o_kvcache_position_word), so the recording
 * does not fix the positions; NaN rope values at or past 2^24. */
vkh2o_result vkh2o_cmd_mla_project_dev(vkh2o_mla_layer* layer, VkCommandBuffer cb, vkh2o_binding hidden,
                                       uint32_t S, const vkh2o_buffer* pos_buf, uint32_t pos_word);

/* Records out [S, hidden] = o_proj(o) for o [S, H * v] (e.g. the state's o, or the cache
 * attention's output). No barriers. */
vkh2o_result vkh2o_cmd_mla_o_proj(vkh2o_mla_layer* layer, VkCommandBuffer cb, vkh2o_binding o,
                                  vkh2o_binding out, uint32_t S);

/* ---- decode (src/mla/decode.c) ---- */
/* The layer's decode scratch (allocated at create for desc.max_decode_tokens tokens):
 *   q       [max_decode, H, max(nope+rope, kv_lora+rope)] queries absorbed through kv_b_proj
 *   o       [max_decode, H, max(v, kv_lora)] attention outputs (latent: before W_uv)
 *   hidden, out  [max_decode, hidden] copies of the caller's rows (any 4-byte offset)
 *   mass    [max_seq_len] the prefill's attention mass
 *   rows    [max_seq_len, kv_lora + rope] kv_a_proj's output buffer, free after the norms of a
 *           projection: joined latent rows [c_kv | k_pe] for the quantised cache */
typedef struct vkh2o_mla_decode_bufs {
    vkh2o_buffer *q, *o, *hidden, *out, *mass, *rows;
    uint32_t max_decode;
    vkh2o_buffer *obs_p, *obs_mass, *obs_score;   /* observation-window scratch (max_obs > 0) */
    uint32_t max_obs;
    vkh2o_kernel_slot (*obs_slots)[3];   /* [phase][pooling] the observation window's, prepared at create */
} vkh2o_mla_decode_bufs;
vkh2o_mla_decode_bufs vkh2o_mla_layer_decode_bufs(vkh2o_mla_layer* layer);   /* non-const: its kernel slots */
vkh2o_context* vkh2o_mla_layer_context(const vkh2o_mla_layer* layer);
/* The layer's matmul call sites. Each has a plan (vkh2o_matmul_plan) made when the layer is
 * created, with one token's kernels (the decode step's) made then and the other variants (the
 * forward, a multi-token decode: their kernel depends on the token count) at their first
 * recording. */
typedef enum vkh2o_mla_mm_site {
    VKH2O_MM_Q_A, VKH2O_MM_KV_A, VKH2O_MM_Q_B, VKH2O_MM_KV_B_K, VKH2O_MM_KV_B_V, VKH2O_MM_O_PROJ,
    VKH2O_MM_ABSORB, VKH2O_MM_W_UV,   /* the decode step's query absorption and W_uv through kv_b_proj */
    VKH2O_MM_COUNT
} vkh2o_mla_mm_site;
/* Records the decode step's VKH2O_MM_ABSORB (the state's roped q [n, H, nope + rope] into the
 * decode scratch's q [n, H, kv_lora + rope]: q_nope[h] . W_uk[h]; the rope part is not written)
 * or VKH2O_MM_W_UV (the scratch's o [n, H, kv_lora] into the state's o [n, H, v]: . W_uv[h]^T)
 * over n tokens (at most max_decode_tokens), through the site's plan (the one-token kernels
 * made when the layer is created). No barriers. Results: as vkh2o_cmd_matmul. */
vkh2o_result vkh2o_cmd_mla_decode_mm(vkh2o_mla_layer* layer, VkCommandBuffer cb, vkh2o_mla_mm_site site, uint32_t n);
/* The buffers of the host conveniences (hidden, out: [S, hidden]), grown on demand. */
vkh2o_result vkh2o_mla_layer_host_io(vkh2o_mla_layer* layer, uint32_t S, vkh2o_buffer** hidden, vkh2o_buffer** out);

/* The matmul kernel of the layer's projections (vkh2o_matmul_path; 0 = automatic, the
 * default): tests run the forward on each, benchmarks compare them in one process. */
void vkh2o_mla_layer_set_matmul_path(vkh2o_mla_layer* layer, uint32_t path);
/* Whether the layer's attention reads q, k, v through texel views (vkh2o_attn_tuning.texel; the
 * default is the device's): both give the same bits, tests compare them. */
void vkh2o_mla_layer_set_attn_texel(vkh2o_mla_layer* layer, bool texel);

/* ---- benchmarks (tools/vkh2o-bench "forward" row) ----
 * A Kimi-shaped layer from random weights needs only the public API plus the test reference's
 * generator (ref/ref_mla.h, linked into every tool):
 *
 *   vkh2o_mla_config cfg; vkh2o_mla_config_kimi_k26(&cfg);
 *   ref_mla_weights w; ref_mla_random_weights(&cfg, VKH2O_DTYPE_BF16, seed, &w);   (~200 MB)
 *   vkh2o_mla_host_weights* hw; vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err);
 *   vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S }, &layer);
 *   vkh2o_host_mla_forward(layer, hidden, S, 0, out, scores, &timings);   (per-stage GPU ms)
 *   vkh2o_mla_layer_destroy(layer); vkh2o_mla_host_weights_destroy(hw); ref_mla_weights_free(&w);
 *
 * Work of one forward (multiply-adds x 2): vkh2o_mla_forward_flops(). Environment
 * VKH2O_ATTN_TUNING="local,rq,rk,hg" tries other attention tilings. */
double vkh2o_mla_forward_flops(const vkh2o_mla_config* cfg, uint32_t S);

#endif
