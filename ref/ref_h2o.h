/*
 * CPU references of the H2O cache (double accumulation, written for clarity):
 *   - selection: the kept indices of [0, begin) + top-k([begin, end)) + [end, n) by sorting
 *     the candidates by (value desc, index asc) -- no radix, no float-bit tricks;
 *   - compaction: a row gather;
 *   - decode attention over a cache (expanded and latent with weight absorption), giving the
 *     output and the attention mass per token;
 *   - a whole-cache simulation of N decode steps with the mock data of VKH2O_STEP_MOCK, and a
 *     checker comparing a device cache with it step by step (used by tests and vkh2o-validate).
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

/* ---- whole-cache simulation ---- */
typedef struct ref_h2o_config {
    uint32_t layers, heads;
    uint32_t dn, dr, dv, kvl;      /* expanded: qk = dn + dr */
    bool latent;
    const float* kv_b;             /* latent: absorb through it (NULL: q/out are latent) */
    uint32_t n_sink, budget, n_recent, capacity;
    uint32_t policy, mode, seed;
    float decay;                   /* VKH2O_SCORE_DECAY's factor (the cache's resolved value) */
    float scale;
    bool f16;                      /* storage (mock rows are exact in both) */
} ref_h2o_config;

typedef struct ref_h2o_layer {
    uint32_t len;
    uint32_t* pos;         /* [capacity] */
    double* score;         /* [capacity] */
    float* a;              /* [capacity][a_width] */
    float* b;              /* [capacity][b_width] */
    double* out;           /* [H][out_width] of the last step */
    uint32_t evicted;      /* by the last step */
    uint32_t events, evicted_total;
} ref_h2o_layer;

typedef struct ref_h2o_sim {
    ref_h2o_config cfg;
    uint32_t cap, a_width, b_width, q_width, out_width;
    ref_h2o_layer* layer;
    /* last step, per layer, before eviction: values the tokens competed with ([capacity]) */
    double* pre_value;
    uint32_t* pre_pos;
    uint32_t pre_len;
    uint32_t steps;
    uint32_t near_ties;    /* selections that differed from the device's within tolerance */
    double max_score_rel_err, max_out_err;
} ref_h2o_sim;

bool ref_h2o_sim_init(ref_h2o_sim* s, const ref_h2o_config* cfg);
void ref_h2o_sim_free(ref_h2o_sim* s);
/* The mock q / rows of (layer, pos) as the device generates them (q_width*H, a_width, b_width). */
void ref_h2o_mock(const ref_h2o_sim* s, uint32_t layer, uint32_t pos, float* q, float* a, float* b);
/* One decode step of every layer at `position`, evicting with the sim's own selection, unless
 * forced_keep (per layer: the positions the device kept, or NULL) says otherwise; then the
 * forced set is accepted only if it differs from the sim's selection by near ties (values
 * within tie_tol relative): *tie_ok is false otherwise. */
void ref_h2o_sim_step(ref_h2o_sim* s, uint32_t position, uint32_t layer_only, const uint32_t* forced_keep,
                      uint32_t forced_len, double tie_tol, bool* tie_ok);

/* Compare a device layer (after a step) with the sim; messages (up to msg_size) name the first
 * mismatch. score_tol: relative tolerance on scores; out_tol: relative (to max |out|) on outputs
 * (out may be NULL). Rows must match exactly. */
bool ref_h2o_compare_layer(ref_h2o_sim* s, uint32_t layer, uint32_t len, const uint32_t* pos, const float* score,
                           const float* a, const float* b, const float* out, double score_tol, double out_tol,
                           char* msg, size_t msg_size);
/* Exact selection check: the device's kept positions must be what ref_topk_keep gives on the
 * device's own pre-eviction keys (keys_len of them, positions pre_pos). */
bool ref_h2o_check_selection(const uint32_t* keys, const uint32_t* pre_pos, uint32_t keys_len, uint32_t n_sink,
                             uint32_t budget, uint32_t n_recent, const uint32_t* kept_pos, uint32_t kept_len,
                             char* msg, size_t msg_size);

#endif
