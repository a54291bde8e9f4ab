#include "ref_lm.h"

#include <math.h>

void ref_swiglu(size_t rows, size_t cols, const float* g, size_t gs, const float* u, size_t us, float* y, size_t ys)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double x = g[r * gs + c];
            double silu = x / (1.0 + exp(-x));
            y[r * ys + c] = (float)(silu * (double)u[r * us + c]);
        }
}

void ref_log_softmax(size_t rows, size_t vocab, const float* x, size_t xs, const uint32_t* tgt, double* lp,
                     double* full, size_t fs, double* lse_out)
{
    for (size_t r = 0; r < rows; r++) {
        const float* row = x + r * xs;
        double m = -INFINITY;
        for (size_t c = 0; c < vocab; c++)
            if (row[c] > m)
                m = row[c];
        double s = 0.0;
        for (size_t c = 0; c < vocab; c++)
            s += exp((double)row[c] - m);
        double lse = m + log(s);
        if (lse_out)
            lse_out[r] = lse;
        if (tgt && lp)
            lp[r] = tgt[r] < vocab ? (double)row[tgt[r]] - lse : NAN;
        if (full)
            for (size_t c = 0; c < vocab; c++)
                full[r * fs + c] = (double)row[c] - lse;
    }
}
