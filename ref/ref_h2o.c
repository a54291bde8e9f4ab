/* CPU references of H2O selection and attention; see ref_h2o.h. */
#include "ref_h2o.h"

#include "vkh2o.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- selection ---- */

typedef struct cand {
    double v;
    uint32_t i;
} cand;

static int cand_cmp(const void* a, const void* b)
{
    const cand* x = a;
    const cand* y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;         /* larger first */
    return x->i < y->i ? -1 : (x->i > y->i); /* then the lower index */
}

static int u32_cmp(const void* a, const void* b)
{
    uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
    return x < y ? -1 : (x > y);
}

uint32_t ref_topk_keep(const double* value, uint32_t n, uint32_t begin, uint32_t end, uint32_t k, uint32_t* out)
{
    uint32_t m = end - begin, c = 0;
    for (uint32_t i = 0; i < begin; i++)
        out[c++] = i;
    cand* v = malloc((m ? m : 1) * sizeof *v);
    for (uint32_t i = 0; i < m; i++)
        v[i] = (cand){ value[begin + i], begin + i };
    qsort(v, m, sizeof *v, cand_cmp);
    uint32_t kk = k < m ? k : m;
    for (uint32_t i = 0; i < kk; i++)
        out[c + i] = v[i].i;
    qsort(out + c, kk, sizeof *out, u32_cmp);
    c += kk;
    free(v);
    for (uint32_t i = end; i < n; i++)
        out[c++] = i;
    return c;
}

uint32_t ref_float_key(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u)   /* NaN: below -Inf */
        return 0;
    if (b == 0x80000000u)
        b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* The random policy's counter-based hash, as shaders/kvcache/kvc_keys.glsl computes it. */
static uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static uint32_t hash_base(uint32_t seed, uint32_t layer, uint32_t pos, uint32_t stream)
{
    uint32_t h = hash32(seed + 0x68e31da4u);
    h = hash32(h ^ (layer * 0x85ebca6bu + 0x1b873593u));
    h = hash32(h ^ pos);
    return hash32(h ^ ((stream + 1u) * 0x27d4eb2fu));
}

double ref_select_value(uint32_t policy, uint32_t mode, double score, uint32_t pos, uint32_t cur, uint32_t seed,
                        uint32_t layer, bool f32_mean)
{
    if (policy == VKH2O_POLICY_STREAMING)
        return pos;
    if (policy == VKH2O_POLICY_RANDOM)
        return hash32(hash_base(seed, layer, cur, 3) + pos * 0x9e3779b9u);
    if (mode == VKH2O_SCORE_MEAN) {
        if (f32_mean)
            return (float)score / (float)(cur - pos + 1);
        return score / (double)(cur - pos + 1);
    }
    return score;
}

void ref_gather_u32(const uint32_t* src, const uint32_t* idx, uint32_t count, uint32_t width, uint32_t* dst)
{
    for (uint32_t r = 0; r < count; r++)
        memcpy(dst + (size_t)r * width, src + (size_t)idx[r] * width, (size_t)width * 4);
}

/* ---- attention ---- */

static void softmax_rows(uint32_t H, uint32_t n, double* s /* [H][n] in: logits, out: P */)
{
    for (uint32_t h = 0; h < H; h++) {
        double* r = s + (size_t)h * n;
        double m = -INFINITY, z = 0;
        for (uint32_t t = 0; t < n; t++)
            m = r[t] > m ? r[t] : m;
        for (uint32_t t = 0; t < n; t++)
            z += (r[t] = exp(r[t] - m));
        for (uint32_t t = 0; t < n; t++)
            r[t] /= z;
    }
}

/* mass[t] = sum over the H rows of p[h][t] (the attention mass of token t) */
static void column_sums(uint32_t H, uint32_t n, const double* p, double* mass)
{
    for (uint32_t t = 0; t < n; t++) {
        mass[t] = 0;
        for (uint32_t h = 0; h < H; h++)
            mass[t] += p[(size_t)h * n + t];
    }
}

void ref_attn_expanded(uint32_t H, uint32_t dqk, uint32_t dv, uint32_t n, const float* q, const float* k,
                       const float* v, float scale, double* out, double* mass)
{
    double* p = malloc((size_t)H * n * sizeof *p);
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t t = 0; t < n; t++) {
            double s = 0;
            for (uint32_t d = 0; d < dqk; d++)
                s += (double)q[h * dqk + d] * k[((size_t)t * H + h) * dqk + d];
            p[(size_t)h * n + t] = s * scale;
        }
    softmax_rows(H, n, p);
    column_sums(H, n, p, mass);
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t d = 0; d < dv; d++) {
            double o = 0;
            for (uint32_t t = 0; t < n; t++)
                o += p[(size_t)h * n + t] * v[((size_t)t * H + h) * dv + d];
            out[h * dv + d] = o;
        }
    free(p);
}

void ref_attn_latent(uint32_t H, uint32_t kvl, uint32_t dr, uint32_t n, const double* q_abs, const double* q_pe,
                     const float* ckv, const float* kpe, float scale, double* out_lat, double* mass)
{
    double* p = malloc((size_t)H * n * sizeof *p);
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t t = 0; t < n; t++) {
            double s = 0;
            for (uint32_t j = 0; j < kvl; j++)
                s += q_abs[h * kvl + j] * ckv[(size_t)t * kvl + j];
            for (uint32_t j = 0; j < dr; j++)
                s += q_pe[h * dr + j] * kpe[(size_t)t * dr + j];
            p[(size_t)h * n + t] = s * scale;
        }
    softmax_rows(H, n, p);
    column_sums(H, n, p, mass);
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t j = 0; j < kvl; j++) {
            double o = 0;
            for (uint32_t t = 0; t < n; t++)
                o += p[(size_t)h * n + t] * ckv[(size_t)t * kvl + j];
            out_lat[h * kvl + j] = o;
        }
    free(p);
}

void ref_absorb_q(uint32_t H, uint32_t dn, uint32_t dv, uint32_t kvl, const float* W, const float* q, uint32_t q_stride,
                  double* q_abs)
{
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t j = 0; j < kvl; j++) {
            double s = 0;
            for (uint32_t i = 0; i < dn; i++)
                s += (double)q[h * q_stride + i] * W[((size_t)h * (dn + dv) + i) * kvl + j];
            q_abs[h * kvl + j] = s;
        }
}

void ref_absorb_out(uint32_t H, uint32_t dn, uint32_t dv, uint32_t kvl, const float* W, const double* out_lat,
                    double* out)
{
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t d = 0; d < dv; d++) {
            double s = 0;
            for (uint32_t j = 0; j < kvl; j++)
                s += out_lat[h * kvl + j] * W[((size_t)h * (dn + dv) + dn + d) * kvl + j];
            out[h * dv + d] = s;
        }
}

void ref_expand_kv(uint32_t H, uint32_t dn, uint32_t dr, uint32_t dv, uint32_t kvl, const float* W, uint32_t n,
                   const float* ckv, const float* kpe, float* k, float* v)
{
    uint32_t dqk = dn + dr;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t h = 0; h < H; h++) {
            for (uint32_t i = 0; i < dn + dv; i++) {
                double s = 0;
                for (uint32_t j = 0; j < kvl; j++)
                    s += (double)ckv[(size_t)t * kvl + j] * W[((size_t)h * (dn + dv) + i) * kvl + j];
                if (i < dn)
                    k[((size_t)t * H + h) * dqk + i] = (float)s;
                else
                    v[((size_t)t * H + h) * dv + (i - dn)] = (float)s;
            }
            for (uint32_t j = 0; j < dr; j++)
                k[((size_t)t * H + h) * dqk + dn + j] = kpe[(size_t)t * dr + j];
        }
}

/* ---- fp16 ---- */

float ref_f16_round(float x)
{
    if (x == 0.0f || !isfinite(x))
        return x;
    double a = fabs((double)x);
    if (a >= 65520.0)
        return x < 0 ? -INFINITY : INFINITY;
    int e;
    frexp(a, &e);                       /* a in [2^(e-1), 2^e): fp16 spacing 2^(e-11) */
    int ex = e - 11 < -24 ? -24 : e - 11;
    double r = ldexp(nearbyint(ldexp(a, -ex)), ex);
    return (float)(x < 0 ? -r : r);
}
