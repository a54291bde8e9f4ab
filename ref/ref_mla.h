/*
 * CPU references for the MLA layer forward (src/mla/layer.c and its shaders), in double, written
 * from the HF DeepseekV3Attention formulas for clarity (they materialise the probability
 * matrix). Also random layer weights for tests and the benchmark tool.
 */
#ifndef REF_MLA_H
#define REF_MLA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vkh2o.h"

/* y[r, c] = x[r, c] / sqrt(mean_c x[r, c]^2 + eps) * w[c] for r < rows, c < n. */
void ref_rmsnorm(const float* x, size_t rows, size_t n, size_t x_stride, const float* w, double eps,
                 float* y, size_t y_stride);

/*
 * HF rotary embedding of one rope-sized vector at position pos:
 *   interleave: x' = [x0, x2, x4, ..., x1, x3, ...], else x' = x
 *   y = x' * cat(cos, cos) + rotate_half(x') * cat(sin, sin),  rotate_half(z) = cat(-z2, z1)
 * with cos/sin of pos * inv_freq[i] (double) times attention_factor.
 */
void ref_rope(const float* x, uint32_t rope, bool interleave, uint32_t pos, const float* inv_freq,
              double attention_factor, float* y);

/*
 * The rotary and softmax figures of a config, computed here from the Hugging Face DeepSeek-V3
 * definitions (transformers' _compute_yarn_parameters and DeepseekV3Attention) in double, so
 * that the library's vkh2o_mla_rope_params / vkh2o_mla_softmax_scale have something to be
 * checked against (tests/ref/test_ref_figures.c):
 *   plain RoPE     inv_freq[i] = theta^(-2i / d), d = qk_rope_head_dim, i < d/2; factor 1
 *   YaRN (factor s, original context L, beta_fast, beta_slow, mscale, mscale_all_dim)
 *     the dimension at which a frequency turns r times over L: d ln(L / (2 pi r)) / (2 ln theta);
 *     low = max(floor(that for r = beta_fast), 0), high = min(ceil(that for r = beta_slow), d - 1)
 *     (high + 0.001 when equal); ramp[i] = clamp((i - low) / (high - low), 0, 1);
 *     inv_freq[i] = ramp[i] x theta^(-2i/d) / s + (1 - ramp[i]) x theta^(-2i/d)
 *     get_mscale(s, m) = 1 when s <= 1, else 0.1 m ln(s) + 1;
 *     attention factor = get_mscale(s, mscale) / get_mscale(s, mscale_all_dim) when both are
 *     non-zero, else get_mscale(s, 1)
 *   softmax scale  qk_head_dim^-0.5, times get_mscale(s, mscale_all_dim)^2 with YaRN and a
 *                  non-zero mscale_all_dim
 * inv_freq has qk_rope_head_dim / 2 entries; attention_factor may be NULL.
 */
void ref_mla_rope_params(const vkh2o_mla_config* cfg, double* inv_freq, double* attention_factor);
double ref_mla_softmax_scale(const vkh2o_mla_config* cfg);

/* Softmax attention with strided layouts (floats):
 *   q[i * q_ts + h * q_hs + d], k[j * k_ts + h * k_hs + d] (d < D), v[j * v_ts + h * v_hs + e],
 *   o[i * o_ts + h * o_hs + e] (e < DV); query i sees key j iff j <= i + causal_off, j < T. */
typedef struct ref_attn_args {
    uint32_t S, T, H, D, DV;
    int32_t causal_off;
    double scale;
    uint32_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;
} ref_attn_args;

/* o as above; mass[j] = sum_h sum_i P[h, i, j] (T entries, may be NULL); probs[(h S + i) T + j]
 * (may be NULL; masked entries 0). A query that sees no key gets o = 0 and P = 0. */
void ref_attention(const ref_attn_args* a, const float* q, const float* k, const float* v, float* o,
                   float* mass, float* probs);

/* Intermediates of ref_mla_forward (each may be NULL): q roped [S, H, nope+rope],
 * k [S, H, nope+rope], v [S, H, v], normed c_kv [S, kv_lora], roped k_pe [S, rope], the
 * attention output before o_proj o [S, H, v]. */
typedef struct ref_mla_parts {
    float* q;
    float* k;
    float* v;
    float* ckv;
    float* kpe;
    float* o;
} ref_mla_parts;

/* The whole layer for hidden [S, hidden] at positions pos0..pos0+S-1: out [S, hidden],
 * mass [S] (may be NULL), probs [H, S, S] (may be NULL), parts (may be NULL).
 * Returns 0, or -1 when out of memory. */
int ref_mla_forward(const vkh2o_mla_config* cfg, const vkh2o_mla_host_weights* hw, const float* hidden,
                    uint32_t S, uint32_t pos0, float* out, float* mass, float* probs, const ref_mla_parts* parts);

/*
 * Random layer weights (owned arrays + the views vkh2o_mla_host_weights_wrap takes):
 * projections uniform with variance 1/in_features (the scale of N(0, 1/in), much cheaper to
 * draw for the 100 M parameters of a Kimi layer), rounded to dtype (BF16, F16 or F32); norm
 * weights 1 + U(-0.2, 0.2) in the same dtype. q_a_proj/q_a_layernorm/q_b_proj when
 * cfg->q_lora_rank > 0, q_proj otherwise; no input_layernorm. Deterministic per seed.
 */
typedef struct ref_mla_weights {
    void* data[VKH2O_W_COUNT];
    vkh2o_tensor_view views[VKH2O_W_COUNT];
} ref_mla_weights;

/* Returns 0, or -1 when out of memory (nothing to free then). */
int ref_mla_random_weights(const vkh2o_mla_config* cfg, vkh2o_dtype dtype, uint64_t seed, ref_mla_weights* w);
void ref_mla_weights_free(ref_mla_weights* w);

#endif
