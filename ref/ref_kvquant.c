/* CPU references of the quantised KV cache. Clear, not fast: byte arrays for packing, sorting
 * for ranks, double accumulation for attention and metrics. */
#include "ref_kvquant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float ref_kvq_f16(float x)
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

static uint16_t f16_bits(float x)
{
    float r = ref_kvq_f16(x);
    uint16_t sign = signbit(r) ? 0x8000u : 0;
    double a = fabs((double)r);
    if (isinf(r))
        return sign | 0x7c00u;
    if (a < ldexp(1.0, -14))
        return sign | (uint16_t)ldexp(a, 24);
    int e;
    double m = frexp(a, &e);            /* a = m 2^e, m in [0.5, 1) */
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((m * 2.0 - 1.0) * 1024.0);
}

static float f16_value(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? ldexp(man, -24) : (exp == 31 ? INFINITY : ldexp(1024 + man, exp - 25));
    return (float)((h & 0x8000u) ? -v : v);
}

uint32_t ref_kvq_scale_count(const ref_kvq_geom* g)
{
    return g->grouping == REF_PER_TOKEN ? g->block * ((g->dim + g->group - 1) / g->group) : g->dim;
}

static uint32_t data_bytes(const ref_kvq_geom* g, int prec)
{
    uint64_t n = (uint64_t)g->block * g->dim;
    return (uint32_t)(prec == REF_FP16 ? 2 * n : prec == REF_INT8 ? n : (n + 1) / 2);
}

uint32_t ref_kvq_section_words(const ref_kvq_geom* g, int prec)
{
    uint32_t w = (data_bytes(g, prec) + 3) / 4;
    if (prec != REF_FP16)
        w += (ref_kvq_scale_count(g) + 1) / 2;
    return w;
}

/* group of element (t, c) */
static uint32_t group_of(const ref_kvq_geom* g, uint32_t t, uint32_t c)
{
    uint32_t ng = (g->dim + g->group - 1) / g->group;
    return g->grouping == REF_PER_TOKEN ? t * ng + c / g->group : c;
}

void ref_kvq_pack(const ref_kvq_geom* g, int prec, const float* x, uint32_t count, uint32_t* words)
{
    uint32_t nw = ref_kvq_section_words(g, prec);
    uint8_t* bytes = calloc((size_t)nw * 4, 1);
    uint32_t n = g->block * g->dim;
    if (prec == REF_FP16) {
        for (uint32_t t = 0; t < count; t++)
            for (uint32_t c = 0; c < g->dim; c++) {
                uint32_t e = t * g->dim + c;
                uint16_t h = f16_bits(x[e]);
                bytes[2 * e] = (uint8_t)h;
                bytes[2 * e + 1] = (uint8_t)(h >> 8);
            }
    } else {
        int qmax = prec == REF_INT8 ? 127 : 7;
        uint32_t ns = ref_kvq_scale_count(g);
        float* maxabs = calloc(ns, sizeof(float));
        float* scale = calloc(ns, sizeof(float));
        for (uint32_t t = 0; t < count; t++)
            for (uint32_t c = 0; c < g->dim; c++) {
                uint32_t gi = group_of(g, t, c);
                float a = fabsf(x[t * g->dim + c]);
                if (a > maxabs[gi])
                    maxabs[gi] = a;
            }
        float inv = prec == REF_INT8 ? 1.0f / 127.0f : 1.0f / 7.0f;
        for (uint32_t i = 0; i < ns; i++)
            scale[i] = ref_kvq_f16(maxabs[i] * inv);
        uint8_t* q = calloc(n, 1);       /* two's complement codes, one per element */
        for (uint32_t t = 0; t < count; t++)
            for (uint32_t c = 0; c < g->dim; c++) {
                uint32_t e = t * g->dim + c;
                float s = scale[group_of(g, t, c)];
                double r = s == 0.0f ? 0.0 : nearbyint((double)x[e] / (double)s);
                if (r > qmax) r = qmax;
                if (r < -qmax) r = -qmax;
                q[e] = (uint8_t)(int8_t)r;
            }
        if (prec == REF_INT8) {
            memcpy(bytes, q, n);
        } else {
            for (uint32_t e = 0; e < n; e++)
                bytes[e / 2] |= (uint8_t)((q[e] & 0xf) << (e % 2 ? 4 : 0));
        }
        uint32_t off = ((data_bytes(g, prec) + 3) / 4) * 4;
        for (uint32_t i = 0; i < ns; i++) {
            uint16_t h = f16_bits(scale[i]);
            bytes[off + 2 * i] = (uint8_t)h;
            bytes[off + 2 * i + 1] = (uint8_t)(h >> 8);
        }
        free(q);
        free(maxabs);
        free(scale);
    }
    for (uint32_t w = 0; w < nw; w++)
        words[w] = (uint32_t)bytes[4 * w] | (uint32_t)bytes[4 * w + 1] << 8 | (uint32_t)bytes[4 * w + 2] << 16 |
                   (uint32_t)bytes[4 * w + 3] << 24;
    free(bytes);
}

void ref_kvq_unpack(const ref_kvq_geom* g, int prec, const uint32_t* words, uint32_t count, float* y, float* scale_of)
{
    const uint32_t nw = ref_kvq_section_words(g, prec);
    uint8_t* bytes = malloc((size_t)nw * 4);
    for (uint32_t w = 0; w < nw; w++)
        for (int i = 0; i < 4; i++)
            bytes[4 * w + i] = (uint8_t)(words[w] >> (8 * i));
    uint32_t off = ((data_bytes(g, prec) + 3) / 4) * 4;
    for (uint32_t t = 0; t < count; t++)
        for (uint32_t c = 0; c < g->dim; c++) {
            uint32_t e = t * g->dim + c;
            if (prec == REF_FP16) {
                y[e] = f16_value((uint16_t)(bytes[2 * e] | bytes[2 * e + 1] << 8));
                if (scale_of)
                    scale_of[e] = 0.0f;
                continue;
            }
            uint32_t gi = group_of(g, t, c);
            float s = f16_value((uint16_t)(bytes[off + 2 * gi] | bytes[off + 2 * gi + 1] << 8));
            int q;
            if (prec == REF_INT8) {
                q = (int8_t)bytes[e];
            } else {
                int nib = (bytes[e / 2] >> (e % 2 ? 4 : 0)) & 0xf;
                q = nib >= 8 ? nib - 16 : nib;
            }
            y[e] = (float)q * s;
            if (scale_of)
                scale_of[e] = s;
        }
    free(bytes);
}

typedef struct ranked {
    double key;
    uint32_t ukey;
    uint32_t idx;
} ranked;

static int by_key_desc(const void* a, const void* b)
{
    const ranked *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    if (x->ukey != y->ukey)
        return x->ukey > y->ukey ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

void ref_kvq_route(uint32_t n, const float* sums, const uint32_t* old, uint32_t n_sink, uint32_t n_recent,
                   const uint32_t th[3], uint32_t* out)
{
    uint32_t rec_start = n > n_recent ? n - n_recent : 0;
    ranked* r = malloc(sizeof(ranked) * (n ? n : 1));
    uint32_t m = 0;
    for (uint32_t b = 0; b < n; b++) {
        out[b] = old[b];                /* sinks and recents: FP16 target, keep what they have */
        if (b >= n_sink && b < rec_start)
            r[m++] = (ranked){ sums[b], 0, b };
    }
    qsort(r, m, sizeof *r, by_key_desc);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t target = i < th[0] ? REF_FP16 : i < th[1] ? REF_INT8 : i < th[2] ? REF_INT4 : REF_EVICTED;
        uint32_t b = r[i].idx;
        out[b] = target > old[b] ? target : old[b];
    }
    free(r);
}

uint32_t ref_kvq_select(uint32_t n, const uint32_t* prec, uint32_t n_sink, uint32_t n_recent, int mode, uint32_t k,
                        const double* fkeys, const uint32_t* ukeys, uint32_t* list)
{
    uint32_t rec_start = n > n_recent ? n - n_recent : 0;
    uint8_t* take = calloc(n ? n : 1, 1);
    ranked* r = malloc(sizeof(ranked) * (n ? n : 1));
    uint32_t m = 0;
    for (uint32_t b = 0; b < n; b++) {
        if (prec[b] == REF_EVICTED)
            continue;
        if (b < n_sink || b >= rec_start || mode == 0)
            take[b] = 1;
        else
            r[m++] = (ranked){ mode == 3 ? 0.0 : fkeys[b], mode == 3 ? ukeys[b] : 0, b };
    }
    qsort(r, m, sizeof *r, by_key_desc);
    for (uint32_t i = 0; i < m && i < k; i++)
        take[r[i].idx] = 1;
    uint32_t cnt = 0;
    for (uint32_t b = 0; b < n; b++)
        if (take[b])
            list[cnt++] = b;
    free(take);
    free(r);
    return cnt;
}

double ref_kvq_quest_bound(const float* q, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* mn, const float* mx)
{
    double best = -INFINITY;
    for (uint32_t h = 0; h < heads; h++) {
        uint32_t kh = h / (heads / kv_heads);
        double s = 0;
        for (uint32_t c = 0; c < d; c++) {
            double a = (double)q[h * d + c] * mn[kh * d + c], b = (double)q[h * d + c] * mx[kh * d + c];
            s += a > b ? a : b;
        }
        if (s > best)
            best = s;
    }
    return best;
}

void ref_kvq_attention(const float* q, const float* k, const float* v, const uint8_t* use, uint32_t T, uint32_t heads,
                       uint32_t kv_heads, uint32_t dk, uint32_t dv, double scale, float* out)
{
    double* s = malloc(sizeof(double) * (T ? T : 1));
    for (uint32_t h = 0; h < heads; h++) {
        uint32_t kh = h / (heads / kv_heads);
        double mx = -INFINITY;
        for (uint32_t t = 0; t < T; t++) {
            if (!use[t])
                continue;
            const float* kr = k + ((size_t)t * kv_heads + kh) * dk;
            double dot = 0;
            for (uint32_t c = 0; c < dk; c++)
                dot += (double)q[h * dk + c] * kr[c];
            s[t] = dot * scale;
            if (s[t] > mx)
                mx = s[t];
        }
        double sum = 0;
        for (uint32_t t = 0; t < T; t++)
            if (use[t]) {
                s[t] = exp(s[t] - mx);
                sum += s[t];
            }
        for (uint32_t c = 0; c < dv; c++) {
            double acc = 0;
            for (uint32_t t = 0; t < T; t++) {
                if (!use[t])
                    continue;
                double val = v ? v[((size_t)t * kv_heads + kh) * dv + c] : k[((size_t)t * kv_heads + kh) * dk + c];
                acc += s[t] * val;
            }
            out[h * dv + c] = sum > 0 ? (float)(acc / sum) : 0.0f;
        }
    }
    free(s);
}

void ref_kvq_metrics(const float* got, const float* ref, size_t n, double* mse, double* max_abs, double* cosine)
{
    double se = 0, mx = 0, dot = 0, n1 = 0, n2 = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - ref[i];
        se += e * e;
        if (fabs(e) > mx)
            mx = fabs(e);
        dot += (double)got[i] * ref[i];
        n1 += (double)ref[i] * ref[i];
        n2 += (double)got[i] * got[i];
    }
    *mse = n ? se / (double)n : 0;
    *max_abs = mx;
    *cosine = n1 > 0 && n2 > 0 ? dot / sqrt(n1 * n2) : (n1 == n2 ? 1.0 : 0.0);
}
