#include "ref_matmul.h"
#include "ref_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Element (r, c) of the host weight, widened without rounding. */
static double weight_at(vkh2o_dtype dt, const void* w, uint32_t cols, uint64_t r, uint64_t c)
{
    return ref_elem(dt, w, r * cols + c);
}

/* FP8 E4M3 (OCP E4M3FN) decoded from its fields, independently of the library's table:
 * sign, exponent e (bias 7), mantissa m; e = 0 is subnormal. */
static double e4m3_d(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    const double mag = e == 0 ? ldexp((double)m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return (b & 0x80) ? -mag : mag;
}

static const float* g_scale;   /* ref_matmul_fp8's scales while it runs */

static double weight_at_any(vkh2o_dtype dt, const void* w, uint32_t cols, uint64_t r, uint64_t c)
{
    if (dt != VKH2O_DTYPE_F8_E4M3) return weight_at(dt, w, cols, r, c);
    const uint64_t sc = (cols + 127u) / 128u;
    return e4m3_d(((const uint8_t*)w)[r * cols + c]) * (double)g_scale[(r / 128u) * sc + c / 128u];
}

static void matmul_any(vkh2o_dtype wdt, const void* w, uint32_t w_cols, const float* x, float* y,
                       const ref_matmul_args* a);

void ref_matmul(vkh2o_dtype wdt, const void* w, uint32_t w_rows, uint32_t w_cols,
                const float* x, float* y, const ref_matmul_args* a)
{
    (void)w_rows;
    matmul_any(wdt, w, w_cols, x, y, a);
}

void ref_matmul_fp8(const uint8_t* w, const float* scale, uint32_t w_rows, uint32_t w_cols,
                    const float* x, float* y, const ref_matmul_args* a)
{
    (void)w_rows;
    g_scale = scale;
    matmul_any(VKH2O_DTYPE_F8_E4M3, w, w_cols, x, y, a);
    g_scale = NULL;
}

static void matmul_any(vkh2o_dtype wdt, const void* w, uint32_t w_cols, const float* x, float* y,
                       const ref_matmul_args* a)
{
    const uint32_t batch = a->batch ? a->batch : 1;
    const uint32_t xs = a->x_stride ? a->x_stride : a->K, ys = a->y_stride ? a->y_stride : a->N;
    const uint64_t batch_rows = batch > 1 ? a->w_batch_stride / w_cols : 0;
    const double alpha = a->alpha != 0.0f ? a->alpha : 1.0;
    for (uint32_t b = 0; b < batch; b++) {
        const uint64_t row0 = a->w_row_offset + b * batch_rows;
        for (uint32_t m = 0; m < a->M; m++) {
            const float* xr = x + (uint64_t)b * a->x_batch_stride + (uint64_t)m * xs;
            float* yr = y + (uint64_t)b * a->y_batch_stride + (uint64_t)m * ys;
            for (uint32_t n = 0; n < a->N; n++) {
                double sum = 0.0;
                for (uint32_t k = 0; k < a->K; k++) {
                    /* W^T[k][n]: W[n][k], or the stored [K,N] matrix's row k when transposed */
                    const double wv = a->w_transposed ? weight_at_any(wdt, w, w_cols, row0 + k, n)
                                                      : weight_at_any(wdt, w, w_cols, row0 + n, k);
                    sum += (double)xr[k] * wv;
                }
                double v = alpha * sum;
                if (a->accumulate) v += (double)yr[n];
                yr[n] = (float)v;
            }
        }
    }
}

void ref_matmul_bf16_fast(const uint16_t* w, uint32_t N, uint32_t K, const float* x, float* y, uint32_t M)
{
    enum { NB = 64, KB = 256 };
    float* wf = malloc((size_t)NB * KB * sizeof(float));
    if (!wf) return;
    memset(y, 0, (size_t)M * N * sizeof(float));
    for (uint32_t n0 = 0; n0 < N; n0 += NB) {
        const uint32_t nb = N - n0 < NB ? N - n0 : NB;
        for (uint32_t k0 = 0; k0 < K; k0 += KB) {
            const uint32_t kb = K - k0 < KB ? K - k0 : KB;
            for (uint32_t n = 0; n < nb; n++)
                for (uint32_t k = 0; k < kb; k++)
                    wf[n * KB + k] = (float)ref_elem(VKH2O_DTYPE_BF16, w, (uint64_t)(n0 + n) * K + k0 + k);
            for (uint32_t m = 0; m < M; m++) {
                const float* xr = x + (uint64_t)m * K + k0;
                float* yr = y + (uint64_t)m * N + n0;
                for (uint32_t n = 0; n < nb; n++) {
                    const float* wr = wf + n * KB;
                    float s = 0.0f;
                    for (uint32_t k = 0; k < kb; k++) s += xr[k] * wr[k];
                    yr[n] += s;
                }
            }
        }
    }
    free(wf);
}
