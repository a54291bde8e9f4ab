/* CPU references for the core's utility kernels. */
#ifndef REF_CORE_H
#define REF_CORE_H
#include <stddef.h>
/* y[i] = a x[i] + b y[i], in double */
void ref_axpby(size_t n, float a, const float* x, float b, float* y);
#endif
