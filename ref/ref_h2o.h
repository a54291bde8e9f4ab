/*
 * CPU references of H2O selection and decode attention (double accumulation, written for
 * clarity), shared by ref_kvcache.c (the one KV cache) and ref_decode.c (a layer's decode):
 *   - selection: the kept indices of [0, begin) + top-k([begin, end)) + [end, n) by sorting
 *     the candidates by (value desc, index asc) -- no radix, no float-bit tricks; the selection
 *     value of a token under each policy and score mode;
 *   - a row gather;
 *   - decode attention over a cache (expanded and latent with weight absorption), giving the
 *     output and the attention mass per token;
 *   - fp16 rounding.
 */
#ifndef REF_H2O_H
#define REF_H2O_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Kept indices, ascending, into out (room for n); returns their number. Candidates
 * [begin, end) compete by value[i] (larger kept; equal values: the lower index). */
uint32_t ref_topk_keep(const double* value, uint32_t n, uint32_t begin, uint32_t end, uint32_t k, uint32_t* out);

/* The value a token competes with under a policy (what select_key orders):
 * H2O/SUM: score; H2O/MEAN: score / (cur - pos + 1) (in f32 when f32_mean, as the device
 * computes it from an f32 score; in double otherwise); STREAMING: pos; RANDOM: the hash key. */
double ref_select_value(uint32_t policy, uint32_t mode, double score, uint32_t pos, uint32_t cur, uint32_t seed,
                        uint32_t layer, bool f32_mean);
/* The u32 key of the device for an f32 score (order-preserving float bits, -0 -> +0, NaN -> 0:
 * NaN < -Inf < finite < +Inf). */
uint32_t ref_float_key(float f);

/* dst row r = src row idx[r], rows of `width` u32 words. */
void ref_gather_u32(const uint32_t* src, const uint32_t* idx, uint32_t count, uint32_t width, uint32_t* dst);

/* Decode attention of one query per head over n cached tokens (expanded layout):
 * q [H][dqk], k [n][H][dqk], v [n][H][dv] -> out [H][dv], mass[n] = sum_h P[h, t]. */
void ref_attn_expanded(uint32_t H, uint32_t dqk, uint32_t dv, uint32_t n, const float* q, const float* k,
                       const float* v, float scale, double* out, double* mass);
/* Latent layout: q_abs [H][kvl], q_pe [H][dr] (row strides q_stride), c_kv [n][kvl],
 * k_pe [n][dr] -> out_lat [H][kvl], mass[n]. */
void ref_attn_latent(uint32_t H, uint32_t kvl, uint32_t dr, uint32_t n, const double* q_abs, const double* q_pe,
                     const float* ckv, const float* kpe, float scale, double* out_lat, double* mass);
/* Weight absorption with kv_b_proj W [H*(dn+dv)][kvl]:
 *   q_abs[h][j] = sum_i q_nope[h][i] W[h*(dn+dv) + i][j]   (q_nope row h at q + h * q_stride)
 *   out[h][d]   = sum_j out_lat[h][j] W[h*(dn+dv) + dn + d][j] */
void ref_absorb_q(uint32_t H, uint32_t dn, uint32_t dv, uint32_t kvl, const float* W, const float* q, uint32_t q_stride,
                  double* q_abs);
void ref_absorb_out(uint32_t H, uint32_t dn, uint32_t dv, uint32_t kvl, const float* W, const double* out_lat,
                    double* out);
/* Expanded K/V of tokens from c_kv/k_pe through kv_b_proj: k [n][H][dn+dr] = [c_kv W_uk[h]^T | k_pe],
 * v [n][H][dv] = c_kv W_uv[h]^T (rounded to f32). */
void ref_expand_kv(uint32_t H, uint32_t dn, uint32_t dr, uint32_t dv, uint32_t kvl, const float* W, uint32_t n,
                   const float* ckv, const float* kpe, float* k, float* v);

/* x rounded to the nearest fp16 value (ties to even), as an f32 (overflow to +-inf). */
float ref_f16_round(float x);

#endif
