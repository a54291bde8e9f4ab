/* CPU reference of the weight matmul (shaders/mla/matmul.comp), double accumulation. */
#ifndef REF_MATMUL_H
#define REF_MATMUL_H

#include <stdbool.h>
#include <stdint.h>

#include "vkh2o.h"

/* The shape of one product, with the meaning of the same fields of the library's matmul
 * arguments (src/mla/matmul_internal.h): Y[M,N] = alpha X[M,K] W^T (W is [N,K], or [K,N] when
 * w_transposed), batch > 1 z-batched with the per-batch strides (elements), row strides of X
 * and Y in floats (0 = K / N), w_row_offset the first weight row used, alpha 0 = 1. */
typedef struct ref_matmul_args {
    uint32_t M, N, K;
    uint32_t batch;
    uint32_t x_stride, y_stride;
    uint32_t x_batch_stride, y_batch_stride, w_batch_stride;
    uint32_t w_row_offset;
    bool w_transposed;
    bool accumulate;
    float alpha;
} ref_matmul_args;

/*
 * Y = alpha X W^T (+ Y) with the semantics of the library's matmul: W is the host matrix of w_rows x w_cols elements of dtype wdt (F32, F16 or
 * BF16, unpadded, row-major), widened exactly to double; every output is one double sum over
 * k in order, times alpha, plus the old Y when accumulating, rounded once to float.
 * x and y index floats exactly as the device bindings do.
 */
void ref_matmul(vkh2o_dtype wdt, const void* w, uint32_t w_rows, uint32_t w_cols,
                const float* x, float* y, const ref_matmul_args* a);

/* The same for an F8_E4M3 weight with 128x128 block scales (scale[ceil(rows/128)][ceil(cols/128)]):
 * each element is decoded and multiplied by its block's scale exactly in double. */
void ref_matmul_fp8(const uint8_t* w, const float* scale, uint32_t w_rows, uint32_t w_cols,
                    const float* x, float* y, const ref_matmul_args* a);

/* The same product with fp32 accumulation, blocked for cache reuse: a fair single-thread CPU
 * baseline for benchmarks (not a reference). W must be BF16 [N,K], untransposed, batch 1. */
void ref_matmul_bf16_fast(const uint16_t* w, uint32_t N, uint32_t K, const float* x, float* y, uint32_t M);

#endif
