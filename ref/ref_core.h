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
#endif
