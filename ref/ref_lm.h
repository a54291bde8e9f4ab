/* CPU references for the whole-model kernels (shaders/lm/) and the whole model (src/lm/), in
 * double, written from the HF DeepseekV3ForCausalLM formulas for clarity. */
#ifndef REF_LM_H
#define REF_LM_H

#include <stddef.h>
#include <stdint.h>

/* y[r * ys + c] = silu(g[r * gs + c]) * u[r * us + c], silu(x) = x / (1 + e^-x). */
void ref_swiglu(size_t rows, size_t cols, const float* g, size_t gs, const float* u, size_t us, float* y, size_t ys);

/* Log-softmax of row r of x (stride xs, vocab entries) in double: lse[r] (may be NULL),
 * lp[r] = x[r, tgt[r]] - lse (tgt and lp may be NULL), full[r * fs + c] = x - lse (may be NULL). */
void ref_log_softmax(size_t rows, size_t vocab, const float* x, size_t xs, const uint32_t* tgt, double* lp,
                     double* full, size_t fs, double* lse);

#endif

#include "vkh2o.h"

/* One decoder layer's weights for ref_lm_forward (f32 arrays, nn.Linear layout [out, in]). */
typedef struct ref_lm_layer {
    const vkh2o_mla_host_weights* attn;     /* self_attn (ref_mla_forward) */
    const float* input_ln;                  /* [hidden] */
    const float* post_ln;                   /* [hidden] */
    const float* gate;                      /* [I, hidden] */
    const float* up;                        /* [I, hidden] */
    const float* down;                      /* [hidden, I] */
} ref_lm_layer;

/* The whole model (HF DeepseekV3ForCausalLM, dense MLPs) on tokens[0 .. n) at positions 0 .. n-1:
 * logits [n, vocab]. lm_head is [vocab, hidden] (the embedding when tied). Each stage in double,
 * rounded to float between stages. Returns 0, or -1 when out of memory. */
int ref_lm_forward(const vkh2o_model_config* cfg, const float* embed, const ref_lm_layer* layers, const float* norm,
                   const float* lm_head, const uint32_t* tokens, uint32_t n, float* logits);

#include "ref_decode.h"

/* The whole model decoding one token at a time against per-layer caches (ref_decode), for
 * comparison with vkh2o_model_session: eviction as the one KV cache's H2O (sum scores). */
typedef struct ref_lm_session {
    const vkh2o_model_config* cfg;
    const float* embed;
    const ref_lm_layer* layers;
    const float* norm;
    const float* lm_head;
    ref_decode* dec;               /* [num_layers] */
    uint32_t pos;
} ref_lm_session;

/* evict false: the full cache. Returns 0, -1 when out of memory. */
int ref_lm_session_init(ref_lm_session* s, const vkh2o_model_config* cfg, const float* embed, const ref_lm_layer* layers,
                        const float* norm, const float* lm_head, bool latent, bool f16, bool evict, uint32_t n_sink,
                        uint32_t budget, uint32_t n_recent, uint32_t room);
void ref_lm_session_free(ref_lm_session* s);
/* Prefill of n tokens (logits [n, vocab]) on an empty session, or one decode step (logits [vocab]). */
int ref_lm_session_prefill(ref_lm_session* s, const uint32_t* tokens, uint32_t n, float* logits);
int ref_lm_session_step(ref_lm_session* s, uint32_t token, float* logits);
