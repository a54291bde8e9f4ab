#include "ref_core.h"

void ref_axpby(size_t n, float a, const float* x, float b, float* y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)a * x[i] + (double)b * y[i]);
}
