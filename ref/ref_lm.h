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
