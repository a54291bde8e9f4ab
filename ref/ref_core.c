#include "ref_core.h"

#include <math.h>
#include <string.h>

void ref_axpby(size_t n, float a, const float* x, float b, float* y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)a * x[i] + (double)b * y[i]);
}

/* A binary float with E exponent bits, M mantissa bits and bias 2^(E-1) - 1, given as its bits:
 * (-1)^s 2^(e - bias) 1.m for 0 < e < 2^E - 1, (-1)^s 2^(1 - bias) 0.m for e = 0. ieee: the top
 * exponent means inf/NaN; otherwise (E4M3FN) only the all-ones pattern is NaN. */
static double decode(uint32_t bits, int E, int M, int ieee)
{
    const int bias = (1 << (E - 1)) - 1;
    const uint32_t man = bits & ((1u << M) - 1), exp = (bits >> M) & ((1u << E) - 1);
    const double sign = (bits >> (E + M)) & 1u ? -1.0 : 1.0;
    if (exp == (1u << E) - 1 && (ieee || man == (1u << M) - 1))
        return ieee && man == 0 ? sign * INFINITY : NAN;
    if (exp == 0)
        return sign * ldexp((double)man, 1 - bias - M);
    return sign * ldexp((double)(man | (1u << M)), (int)exp - bias - M);
}

/* The bits of the IEEE-style format (E, M) nearest to v, ties to even; inf beyond the range. */
static uint32_t encode(double v, int E, int M)
{
    const int bias = (1 << (E - 1)) - 1;
    const uint32_t sign = signbit(v) ? 1u << (E + M) : 0, inf = ((1u << E) - 1) << M;
    if (isnan(v))
        return sign | inf | (1u << (M - 1));
    double a = fabs(v);
    if (isinf(a))
        return sign | inf;
    if (a == 0.0)
        return sign;
    int e;
    frexp(a, &e);                 /* a in [2^(e-1), 2^e) */
    int x = e - 1;                /* exponent of the 1.m form */
    if (x < 1 - bias)
        x = 1 - bias;             /* subnormals: the smallest normal exponent's spacing */
    double q = nearbyint(ldexp(a, M - x));   /* units of 2^(x - M); default rounding: ties to even */
    if (q >= ldexp(1.0, M + 1)) { /* rounded up to the next binade */
        q = ldexp(q, -1);
        x++;
    }
    if (q < ldexp(1.0, M))        /* subnormal (or rounded to zero) */
        return sign | (uint32_t)q;
    if (x + bias >= (1 << E) - 1)
        return sign | inf;
    return sign | ((uint32_t)(x + bias) << M) | ((uint32_t)q - (1u << M));
}

double ref_elem(vkh2o_dtype dt, const void* data, uint64_t i)
{
    const unsigned char* p = data;
    switch (dt) {
    case VKH2O_DTYPE_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case VKH2O_DTYPE_F64: { double d; memcpy(&d, p + 8 * i, 8); return d; }
    case VKH2O_DTYPE_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return decode(h, 5, 10, 1); }
    case VKH2O_DTYPE_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return decode(h, 8, 7, 1); }
    case VKH2O_DTYPE_F8_E4M3: return decode(p[i], 4, 3, 0);
    default: return NAN;
    }
}

void ref_store(vkh2o_dtype dt, void* data, uint64_t i, float v)
{
    unsigned char* p = data;
    uint16_t h;
    switch (dt) {
    case VKH2O_DTYPE_F32: memcpy(p + 4 * i, &v, 4); break;
    case VKH2O_DTYPE_F16: h = (uint16_t)encode(v, 5, 10); memcpy(p + 2 * i, &h, 2); break;
    case VKH2O_DTYPE_BF16: h = (uint16_t)encode(v, 8, 7); memcpy(p + 2 * i, &h, 2); break;
    default: break;
    }
}

float ref_round(vkh2o_dtype dt, float v)
{
    if (dt != VKH2O_DTYPE_F16 && dt != VKH2O_DTYPE_BF16)
        return v;
    uint16_t h;
    ref_store(dt, &h, 0, v);
    return (float)ref_elem(dt, &h, 0);
}

void ref_read_probe(const uint32_t* words, uint32_t n_inv, uint32_t per_inv, uint32_t* out)
{
    for (uint32_t g = 0; g < n_inv; g++) {
        uint32_t s = 0;
        for (uint64_t w = 0; w < 4ull * per_inv; w++)
            s += words[(uint64_t)g * 4u * per_inv + w];
        out[g] = s;
    }
}

void ref_fma_probe(const float* seed, uint32_t n_inv, uint32_t iters, double m, double c, double* out)
{
    for (uint32_t g = 0; g < n_inv; g++) {
        double sum = 0.0;
        for (uint32_t j = 0; j < 8; j++) {
            double a = (double)seed[g] + j * 0.25;
            for (uint32_t i = 0; i < iters; i++)
                a = a * m + c;
            sum += a;
        }
        out[g] = sum;
    }
}
