/* CPU reference of the weight matmul (shaders/mla/matmul.comp), double accumulation. */
#ifndef REF_MATMUL_H
#define REF_MATMUL_H

#include "matmul_internal.h"

/*
 * Y = alpha X W^T (+ Y) with the semantics of vkh2o_cmd_matmul (see matmul_internal.h for the
 * fields of a): W is the host matrix of w_rows x w_cols elements of dtype wdt (F32, F16 or
 * BF16, unpadded, row-major), widened exactly to double; every output is one double sum over
 * k in order, times alpha, plus the old Y when accumulating, rounded once to float.
 * x and y index floats exactly as the device bindings do.
 */
void ref_matmul(vkh2o_dtype wdt, const void* w, uint32_t w_rows, uint32_t w_cols,
                const float* x, float* y, const vkh2o_matmul_args* a);

/* The same for an F8_E4M3 weight with 128x128 block scales (scale[ceil(rows/128)][ceil(cols/128)]):
 * each element is decoded and multiplied by its block's scale exactly in double. */
void ref_matmul_fp8(const uint8_t* w, const float* scale, uint32_t w_rows, uint32_t w_cols,
                    const float* x, float* y, const vkh2o_matmul_args* a);

/* The same product with fp32 accumulation, blocked for cache reuse: a fair single-thread CPU
 * baseline for benchmarks (not a reference). W must be BF16 [N,K], untransposed, batch 1. */
void ref_matmul_bf16_fast(const uint16_t* w, uint32_t N, uint32_t K, const float* x, float* y, uint32_t M);

#endif
