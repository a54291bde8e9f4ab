/* CPU references for the core's utility kernels, and the element formats the references read
 * and write (written from the format definitions, independently of the library's own
 * conversions, so a test of those has something to compare with). */
#ifndef REF_CORE_H
#define REF_CORE_H
#include <stddef.h>
#include <stdint.h>

#include "vkh2o.h"

/* y[i] = a x[i] + b y[i], in double */
void ref_axpby(size_t n, float a, const float* x, float b, float* y);

/* Element i of a float tensor of dtype dt (F32, F16, BF16, F8_E4M3 (OCP E4M3FN), F64), widened
 * exactly; NaN for any other dtype. */
double ref_elem(vkh2o_dtype dt, const void* data, uint64_t i);
/* Stores v as element i in dtype dt (F32, F16, BF16; others are left alone), rounded to the
 * nearest representable value with ties to even; beyond the largest finite value it becomes
 * infinity, NaN stays a NaN. */
void ref_store(vkh2o_dtype dt, void* data, uint64_t i, float v);
/* v rounded to dtype dt and widened back (F32 returns v). */
float ref_round(vkh2o_dtype dt, float v);

/* The device probes of vkh2o_run_probe (shaders/core/read_probe.comp, fma_probe.comp):
 * read: out[g] = the wrapping uint32 sum of words [g * 4 * per_inv, (g + 1) * 4 * per_inv);
 * fma: out[g] = sum over j < 8 of the chain a = a * m + c run iters times from seed[g] + j / 4,
 * in double. */
void ref_read_probe(const uint32_t* words, uint32_t n_inv, uint32_t per_inv, uint32_t* out);
void ref_fma_probe(const float* seed, uint32_t n_inv, uint32_t iters, double m, double c, double* out);
#endif
