/* CPU reference of the MLA layer forward (HF DeepseekV3Attention), double precision. */
#include "ref_mla.h"
#include "ref_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_rmsnorm(const float* x, size_t rows, size_t n, size_t x_stride, const float* w, double eps,
                 float* y, size_t y_stride)
{
    for (size_t r = 0; r < rows; r++) {
        const float* xr = x + r * x_stride;
        double ss = 0.0;
        for (size_t c = 0; c < n; c++)
            ss += (double)xr[c] * xr[c];
        double inv = 1.0 / sqrt(ss / (double)n + eps);
        for (size_t c = 0; c < n; c++)
            y[r * y_stride + c] = (float)((double)xr[c] * inv * w[c]);
    }
}

/* ---- the rotary frequencies and the softmax scale (ref_mla.h) ---- */

/* YaRN's magnitude correction, get_mscale(scale, m) */
static double get_mscale(double scale, double m)
{
    if (scale <= 1.0)
        return 1.0;
    return 0.1 * m * log(scale) + 1.0;
}

/* the rotary dimension whose frequency turns `rotations` times over the original context */
static double correction_dim(double rotations, double dim, double theta, double context)
{
    const double pi = 3.14159265358979323846;
    return dim * log(context / (rotations * 2.0 * pi)) / (2.0 * log(theta));
}

void ref_mla_rope_params(const vkh2o_mla_config* cfg, double* inv_freq, double* attention_factor)
{
    const double d = cfg->qk_rope_head_dim, theta = cfg->rope_theta;
    const uint32_t pairs = cfg->qk_rope_head_dim / 2;
    const bool yarn = cfg->rope_scaling == VKH2O_ROPE_YARN;
    double low = 0.0, high = 0.0;
    if (yarn) {
        const double L = cfg->original_max_position_embeddings;
        low = fmax(floor(correction_dim(cfg->beta_fast, d, theta, L)), 0.0);
        high = fmin(ceil(correction_dim(cfg->beta_slow, d, theta, L)), d - 1.0);
        if (low == high)
            high += 0.001;
    }
    for (uint32_t i = 0; i < pairs; i++) {
        const double extrapolated = 1.0 / pow(theta, 2.0 * i / d);   /* the trained frequency */
        if (!yarn) {
            inv_freq[i] = extrapolated;
            continue;
        }
        const double interpolated = extrapolated / cfg->yarn_factor;
        const double ramp = fmin(fmax(((double)i - low) / (high - low), 0.0), 1.0);
        inv_freq[i] = ramp * interpolated + (1.0 - ramp) * extrapolated;
    }
    if (!attention_factor)
        return;
    *attention_factor = 1.0;
    if (yarn) {
        const double s = cfg->yarn_factor;
        *attention_factor = cfg->mscale != 0.0f && cfg->mscale_all_dim != 0.0f
                                ? get_mscale(s, cfg->mscale) / get_mscale(s, cfg->mscale_all_dim)
                                : get_mscale(s, 1.0);
    }
}

double ref_mla_softmax_scale(const vkh2o_mla_config* cfg)
{
    double scale = 1.0 / sqrt((double)cfg->qk_nope_head_dim + cfg->qk_rope_head_dim);
    if (cfg->rope_scaling == VKH2O_ROPE_YARN && cfg->mscale_all_dim != 0.0f) {
        const double m = get_mscale(cfg->yarn_factor, cfg->mscale_all_dim);
        scale *= m * m;
    }
    return scale;
}

/* The HF formula on doubles: de-interleave (optionally), then x*cos + rotate_half(x)*sin. */
static void rope_d(const double* x, uint32_t rope, bool interleave, uint32_t pos, const float* inv_freq,
                   double attention_factor, double* y)
{
    uint32_t half = rope / 2;
    double xs[1024], rot[1024];
    for (uint32_t d = 0; d < rope; d++)
        xs[d] = interleave ? (d < half ? x[2 * d] : x[2 * (d - half) + 1]) : x[d];
    for (uint32_t d = 0; d < rope; d++)
        rot[d] = d < half ? -xs[d + half] : xs[d - half];
    for (uint32_t d = 0; d < rope; d++) {
        double angle = (double)pos * (double)inv_freq[d % half];
        y[d] = xs[d] * cos(angle) * attention_factor + rot[d] * sin(angle) * attention_factor;
    }
}

void ref_rope(const float* x, uint32_t rope, bool interleave, uint32_t pos, const float* inv_freq,
              double attention_factor, float* y)
{
    double xd[1024] = { 0 }, yd[1024];
    if (rope > 1024)
        return;
    for (uint32_t d = 0; d < rope; d++)
        xd[d] = x[d];
    rope_d(xd, rope, interleave, pos, inv_freq, attention_factor, yd);
    for (uint32_t d = 0; d < rope; d++)
        y[d] = (float)yd[d];
}

void ref_attention(const ref_attn_args* a, const float* q, const float* k, const float* v, float* o,
                   float* mass, float* probs)
{
    double* p = malloc((size_t)a->T * sizeof *p);
    double* m = calloc((size_t)a->T, sizeof *m);
    if (!p || !m) {
        free(p);
        free(m);
        return;
    }
    for (uint32_t h = 0; h < a->H; h++) {
        for (uint32_t i = 0; i < a->S; i++) {
            const float* qi = q + (size_t)i * a->q_ts + (size_t)h * a->q_hs;
            int64_t last = (int64_t)i + a->causal_off;          /* last visible key */
            uint32_t n = last < 0 ? 0 : (uint32_t)(last + 1 < (int64_t)a->T ? last + 1 : a->T);
            double mx = -INFINITY;
            for (uint32_t j = 0; j < n; j++) {
                const float* kj = k + (size_t)j * a->k_ts + (size_t)h * a->k_hs;
                double s = 0.0;
                for (uint32_t d = 0; d < a->D; d++)
                    s += (double)qi[d] * kj[d];
                p[j] = s * a->scale;
                if (p[j] > mx)
                    mx = p[j];
            }
            double sum = 0.0;
            for (uint32_t j = 0; j < n; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            for (uint32_t j = 0; j < a->T; j++) {
                p[j] = j < n ? p[j] / sum : 0.0;
                m[j] += p[j];
                if (probs)
                    probs[((size_t)h * a->S + i) * a->T + j] = (float)p[j];
            }
            float* oi = o + (size_t)i * a->o_ts + (size_t)h * a->o_hs;
            for (uint32_t e = 0; e < a->DV; e++) {
                double acc = 0.0;
                for (uint32_t j = 0; j < n; j++)
                    acc += p[j] * v[(size_t)j * a->v_ts + (size_t)h * a->v_hs + e];
                oi[e] = (float)acc;
            }
        }
    }
    if (mass)
        for (uint32_t j = 0; j < a->T; j++)
            mass[j] = (float)m[j];
    free(p);
    free(m);
}

/* y[m, n] = sum_k x[m, k] W[n, k] (nn.Linear), W in its stored dtype widened exactly (FP8:
 * times its block scale, in double). */
static int linear_d(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight wi, const double* x, size_t M, double* y)
{
    const vkh2o_tensor_view* w = vkh2o_mla_host_weights_get_view(hw, wi);
    size_t N = w->shape[0], K = w->shape[1];
    double* row = malloc(K * sizeof *row);
    if (!row)
        return -1;
    for (size_t n = 0; n < N; n++) {
        for (size_t k = 0; k < K; k++)
            row[k] = vkh2o_mla_host_weights_get_value(hw, wi, n * K + k);
        for (size_t m = 0; m < M; m++) {
            const double* xm = x + m * K;
            double acc = 0.0;
            for (size_t k = 0; k < K; k++)
                acc += xm[k] * row[k];
            y[m * N + n] = acc;
        }
    }
    free(row);
    return 0;
}

static void rmsnorm_d(double* x, size_t rows, size_t n, size_t stride, const vkh2o_tensor_view* w, double eps)
{
    for (size_t r = 0; r < rows; r++) {
        double* xr = x + r * stride;
        double ss = 0.0;
        for (size_t c = 0; c < n; c++)
            ss += xr[c] * xr[c];
        double inv = 1.0 / sqrt(ss / (double)n + eps);
        for (size_t c = 0; c < n; c++)
            xr[c] = xr[c] * inv * ref_elem(w->dtype, w->data, c);
    }
}

int ref_mla_forward(const vkh2o_mla_config* cfg, const vkh2o_mla_host_weights* hw, const float* hidden,
                    uint32_t S, uint32_t pos0, float* out, float* mass, float* probs, const ref_mla_parts* parts)
{
    const size_t D = cfg->hidden_size, H = cfg->num_heads, nope = cfg->qk_nope_head_dim,
                 rope = cfg->qk_rope_head_dim, dv = cfg->v_head_dim, qk = nope + rope,
                 lq = cfg->q_lora_rank, lkv = cfg->kv_lora_rank;
    const double eps = 1e-6;
    int rc = -1;
    double* x = malloc(S * D * sizeof *x);
    double* qa = malloc(S * (lq ? lq : 1) * sizeof *qa);
    double* q = malloc(S * H * qk * sizeof *q);
    double* ckv = malloc(S * (lkv + rope) * sizeof *ckv);
    double* ckv_n = calloc(S * lkv, sizeof *ckv_n);
    double* kv = malloc(S * H * (nope + dv) * sizeof *kv);
    double* o = malloc(S * H * dv * sizeof *o);
    double* y = malloc(S * D * sizeof *y);
    float* qf = malloc(S * H * qk * sizeof *qf);
    float* kf = malloc(S * H * qk * sizeof *kf);
    float* vf = malloc(S * H * dv * sizeof *vf);
    float* of = malloc(S * H * dv * sizeof *of);
    float inv_freq[512];
    double inv_freq_d[512], af = 1.0;
    if (!x || !qa || !q || !ckv || !ckv_n || !kv || !o || !y || !qf || !kf || !vf || !of || rope / 2 > 512)
        goto done;
    /* HF keeps inv_freq as a float32 buffer; the angles are taken in double from it */
    ref_mla_rope_params(cfg, inv_freq_d, &af);
    for (size_t i = 0; i < rope / 2; i++)
        inv_freq[i] = (float)inv_freq_d[i];
    for (size_t i = 0; i < S * D; i++)
        x[i] = hidden[i];

    /* q = q_b_proj(q_a_layernorm(q_a_proj(h))) or q_proj(h) */
    if (lq) {
        if (linear_d(hw, VKH2O_W_Q_A_PROJ, x, S, qa))
            goto done;
        rmsnorm_d(qa, S, lq, lq, vkh2o_mla_host_weights_get_view(hw, VKH2O_W_Q_A_LAYERNORM), eps);
        if (linear_d(hw, VKH2O_W_Q_B_PROJ, qa, S, q))
            goto done;
    } else if (linear_d(hw, VKH2O_W_Q_PROJ, x, S, q)) {
        goto done;
    }
    /* compressed kv: [c_kv | k_pe]; c_kv normed then expanded to k_nope, v */
    if (linear_d(hw, VKH2O_W_KV_A_PROJ, x, S, ckv))
        goto done;
    for (size_t s = 0; s < S; s++)
        memcpy(ckv_n + s * lkv, ckv + s * (lkv + rope), lkv * sizeof *ckv_n);
    rmsnorm_d(ckv_n, S, lkv, lkv, vkh2o_mla_host_weights_get_view(hw, VKH2O_W_KV_A_LAYERNORM), eps);
    if (linear_d(hw, VKH2O_W_KV_B_PROJ, ckv_n, S, kv))
        goto done;

    /* RoPE, then query = [q_nope | q_pe], key = [k_nope | k_pe] (k_pe shared by all heads) */
    for (size_t s = 0; s < S; s++) {
        double kpe[1024];
        rope_d(ckv + s * (lkv + rope) + lkv, (uint32_t)rope, cfg->rope_interleave, pos0 + (uint32_t)s, inv_freq, af, kpe);
        for (size_t h = 0; h < H; h++) {
            double* qh = q + (s * H + h) * qk;
            double qpe[1024];
            rope_d(qh + nope, (uint32_t)rope, cfg->rope_interleave, pos0 + (uint32_t)s, inv_freq, af, qpe);
            for (size_t d = 0; d < qk; d++) {
                qf[(s * H + h) * qk + d] = (float)(d < nope ? qh[d] : qpe[d - nope]);
                kf[(s * H + h) * qk + d] = (float)(d < nope ? kv[(s * H + h) * (nope + dv) + d] : kpe[d - nope]);
            }
            for (size_t e = 0; e < dv; e++)
                vf[(s * H + h) * dv + e] = (float)kv[(s * H + h) * (nope + dv) + nope + e];
        }
        if (parts && parts->kpe)
            for (size_t d = 0; d < rope; d++)
                parts->kpe[s * rope + d] = (float)kpe[d];
    }
    if (parts && parts->ckv)
        for (size_t i = 0; i < S * lkv; i++)
            parts->ckv[i] = (float)ckv_n[i];
    if (parts && parts->q)
        memcpy(parts->q, qf, S * H * qk * sizeof *qf);
    if (parts && parts->k)
        memcpy(parts->k, kf, S * H * qk * sizeof *kf);
    if (parts && parts->v)
        memcpy(parts->v, vf, S * H * dv * sizeof *vf);

    /* The attention runs on the float-rounded q, k, v above: that rounding (~6e-8 relative)
     * is far below every bound the tests assert. */
    ref_attn_args a = { .S = S, .T = S, .H = (uint32_t)H, .D = (uint32_t)qk, .DV = (uint32_t)dv, .causal_off = 0,
                        .scale = ref_mla_softmax_scale(cfg),
                        .q_ts = (uint32_t)(H * qk), .q_hs = (uint32_t)qk, .k_ts = (uint32_t)(H * qk), .k_hs = (uint32_t)qk,
                        .v_ts = (uint32_t)(H * dv), .v_hs = (uint32_t)dv, .o_ts = (uint32_t)(H * dv), .o_hs = (uint32_t)dv };
    ref_attention(&a, qf, kf, vf, of, mass, probs);
    if (parts && parts->o)
        memcpy(parts->o, of, S * H * dv * sizeof *of);
    for (size_t i = 0; i < S * H * dv; i++)
        o[i] = of[i];
    if (linear_d(hw, VKH2O_W_O_PROJ, o, S, y))
        goto done;
    for (size_t i = 0; i < S * D; i++)
        out[i] = (float)y[i];
    rc = 0;
done:
    free(x); free(qa); free(q); free(ckv); free(ckv_n); free(kv); free(o); free(y);
    free(qf); free(kf); free(vf); free(of);
    return rc;
}

/* ---- random weights ---- */

static uint64_t splitmix(uint64_t* s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float unit(uint64_t* s) /* [-1, 1) */
{
    return (float)((double)(splitmix(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

int ref_mla_random_weights(const vkh2o_mla_config* cfg, vkh2o_dtype dtype, uint64_t seed, ref_mla_weights* w)
{
    memset(w, 0, sizeof *w);
    const uint64_t D = cfg->hidden_size, H = cfg->num_heads, qk = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
    uint64_t shape[VKH2O_W_COUNT][2] = { { 0 } };
    if (cfg->q_lora_rank) {
        shape[VKH2O_W_Q_A_PROJ][0] = cfg->q_lora_rank, shape[VKH2O_W_Q_A_PROJ][1] = D;
        shape[VKH2O_W_Q_A_LAYERNORM][0] = cfg->q_lora_rank;
        shape[VKH2O_W_Q_B_PROJ][0] = H * qk, shape[VKH2O_W_Q_B_PROJ][1] = cfg->q_lora_rank;
    } else {
        shape[VKH2O_W_Q_PROJ][0] = H * qk, shape[VKH2O_W_Q_PROJ][1] = D;
    }
    shape[VKH2O_W_KV_A_PROJ][0] = cfg->kv_lora_rank + cfg->qk_rope_head_dim, shape[VKH2O_W_KV_A_PROJ][1] = D;
    shape[VKH2O_W_KV_A_LAYERNORM][0] = cfg->kv_lora_rank;
    shape[VKH2O_W_KV_B_PROJ][0] = H * (cfg->qk_nope_head_dim + cfg->v_head_dim), shape[VKH2O_W_KV_B_PROJ][1] = cfg->kv_lora_rank;
    shape[VKH2O_W_O_PROJ][0] = D, shape[VKH2O_W_O_PROJ][1] = H * cfg->v_head_dim;

    uint64_t s = seed ^ 0x5eed0f3a7c1e55ull;
    for (int i = 0; i < VKH2O_W_COUNT; i++) {
        if (!shape[i][0])
            continue;
        bool norm = shape[i][1] == 0;
        uint64_t numel = norm ? shape[i][0] : shape[i][0] * shape[i][1];
        size_t es = vkh2o_dtype_size(dtype);
        w->data[i] = malloc(numel * es);
        if (!w->data[i]) {
            ref_mla_weights_free(w);
            return -1;
        }
        float a = norm ? 0.2f : sqrtf(3.0f / (float)shape[i][1]);   /* U(-a, a) has variance a^2/3 */
        for (uint64_t e = 0; e < numel; e++)
            ref_store(dtype, w->data[i], e, (norm ? 1.0f : 0.0f) + a * unit(&s));
        vkh2o_tensor_view* v = &w->views[i];
        v->name = vkh2o_mla_weight_short_name((vkh2o_mla_weight)i);
        v->file = "(random)";
        v->dtype = dtype;
        v->ndim = norm ? 1 : 2;
        v->shape[0] = shape[i][0];
        v->shape[1] = shape[i][1];
        v->numel = numel;
        v->data = w->data[i];
        v->nbytes = numel * es;
    }
    return 0;
}

void ref_mla_weights_free(ref_mla_weights* w)
{
    for (int i = 0; i < VKH2O_W_COUNT; i++)
        free(w->data[i]);
    memset(w, 0, sizeof *w);
}
