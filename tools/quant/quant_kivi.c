/* vkh2o-quant --kivi: the one cache's grouping against KIVI's per-channel one, host side. */
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x rounded to the nearest fp16 value (ties to even), as a float */
static float fp16_round(float x)
{
    const float a = fabsf(x);
    if (!isfinite(x) || a == 0.0f)
        return x;
    if (a >= 65520.0f)
        return copysignf(INFINITY, x);
    if (a < 6.103515625e-05f)   /* subnormal: steps of 2^-24 */
        return copysignf(nearbyintf(a * 16777216.0f) / 16777216.0f, x);
    int e;
    frexpf(a, &e);   /* a in [2^(e-1), 2^e): 10 fraction bits, steps of 2^(e-11) */
    const float step = ldexpf(1.0f, e - 11);
    return copysignf(nearbyintf(a / step) * step, x);
}

/* The cache's quantiser (kvcache.h "Row formats") on n numbers x[i * stride]: zero = fp16(min),
 * scale = fp16((max - zero) / (2^b - 1)), q = clamp(round((x - zero) / scale)); the squared error
 * of zero + q scale against x added to *e2. */
static void quant_group(const float* x, size_t stride, uint32_t n, uint32_t bits, double* e2)
{
    float mn = INFINITY, mx = -INFINITY;
    for (uint32_t i = 0; i < n; i++) {
        const float v = x[i * stride];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    const float top = (float)((1u << bits) - 1);
    const float zero = fp16_round(mn), scale = fp16_round((mx - zero) / top);
    for (uint32_t i = 0; i < n; i++) {
        const float v = x[i * stride];
        float q = scale > 0 ? nearbyintf((v - zero) / scale) : 0.0f;
        q = q < 0 ? 0 : q > top ? top : q;
        const double dv = (double)(zero + q * scale) - v;
        *e2 += dv * dv;
    }
}

/* The scale-only (symmetric) alternative on the same group: scale = fp16(max |x| / (2^(b-1) - 1)),
 * q = clamp(round(x / scale), -(2^(b-1) - 1), 2^(b-1) - 1), one fp16 per group instead of two;
 * the squared error of q scale against x added to *e2. */
static void quant_group_sym(const float* x, size_t stride, uint32_t n, uint32_t bits, double* e2)
{
    float amax = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        amax = fabsf(x[i * stride]) > amax ? fabsf(x[i * stride]) : amax;
    const float top = (float)((1u << (bits - 1)) - 1);
    const float scale = fp16_round(amax / top);
    for (uint32_t i = 0; i < n; i++) {
        const float v = x[i * stride];
        float q = scale > 0 ? nearbyintf(v / scale) : 0.0f;
        q = q < -top ? -top : q > top ? top : q;
        const double dv = (double)(q * scale) - v;
        *e2 += dv * dv;
    }
}

enum kivi_grouping { PER_TOKEN, PER_CHANNEL, PER_TOKEN_SCALE_ONLY };

/* rows [n][W] (c_kv L then k_pe): NMSE of c_kv and of k_pe quantised with b bits in groups of g,
 * along the row (per token: c_kv in groups of g, k_pe in groups of min(g, R), as the one cache;
 * with the cache's scale and zero, or scale only) or per channel over blocks of g consecutive
 * tokens (KIVI's keys). */
static void kivi_nmse(const float* rows, uint32_t n, uint32_t L, uint32_t R, uint32_t bits, uint32_t g,
                      enum kivi_grouping grouping, double* nmse_c, double* nmse_k)
{
    const bool per_channel = grouping == PER_CHANNEL;
    void (*quant)(const float*, size_t, uint32_t, uint32_t, double*) =
        grouping == PER_TOKEN_SCALE_ONLY ? quant_group_sym : quant_group;
    const uint32_t W = L + R;
    double e[2] = { 0, 0 }, s[2] = { 0, 0 };
    for (size_t i = 0; i < (size_t)n * W; i++)
        s[i % W >= L] += (double)rows[i] * rows[i];
    if (per_channel) {
        for (uint32_t t0 = 0; t0 < n; t0 += g)
            for (uint32_t c = 0; c < W; c++)
                quant(rows + (size_t)t0 * W + c, W, n - t0 < g ? n - t0 : g, bits, &e[c >= L]);
    } else {
        const uint32_t gk = g < R ? g : R;
        for (uint32_t t = 0; t < n; t++) {
            const float* r = rows + (size_t)t * W;
            for (uint32_t c = 0; c < L; c += g)
                quant(r + c, 1, L - c < g ? L - c : g, bits, &e[0]);
            for (uint32_t c = 0; c < R; c += gk)
                quant(r + L + c, 1, R - c < gk ? R - c : gk, bits, &e[1]);
        }
    }
    *nmse_c = s[0] > 0 ? e[0] / s[0] : e[0];
    *nmse_k = s[1] > 0 ? e[1] / s[1] : e[1];
}

void report_kivi(const runner* R)
{
    const data* d = &R->d;
    printf("\nhost-side measurement (--kivi): the FP16 cache's %u rows quantised on the host with the cache's quantiser\n"
           "(fp16 scale and zero per group of g numbers), grouped along the row per token (the one cache: c_kv in\n"
           "groups of g, k_pe in groups of min(g, %u)) or per channel over blocks of g tokens (KIVI's keys); both\n"
           "keep one scale/zero word per g numbers of c_kv (k_pe per token: per min(g, %u)). NMSE of c_kv and of\n"
           "k_pe against the unquantised rows; and the scale-only (symmetric) quantiser per token, one fp16\n"
           "scale per group and no zero (half the metadata):\n",
           R->nrows, d->R, d->R);
    printf("  %-4s %5s %14s %14s %14s %14s %14s %14s\n", "bits", "g", "c_kv per-token", "c_kv per-chan", "k_pe per-token",
           "k_pe per-chan", "c_kv sym", "k_pe sym");
    const uint32_t bits[3] = { 8, 4, 2 }, gs[3] = { 32, 64, 128 };
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < 3; j++) {
            if (gs[j] > d->L || gs[j] > R->nrows)   /* a group no longer than c_kv and the rows */
                continue;
            double tc, tk, cc, ck;
            double sc, sk;
            kivi_nmse(R->rows, R->nrows, d->L, d->R, bits[b], gs[j], PER_TOKEN, &tc, &tk);
            kivi_nmse(R->rows, R->nrows, d->L, d->R, bits[b], gs[j], PER_CHANNEL, &cc, &ck);
            kivi_nmse(R->rows, R->nrows, d->L, d->R, bits[b], gs[j], PER_TOKEN_SCALE_ONLY, &sc, &sk);
            printf("  %-4u %5u %14.3e %14.3e %14.3e %14.3e %14.3e %14.3e\n", bits[b], gs[j], tc, cc, tk, ck, sc, sk);
        }
}
