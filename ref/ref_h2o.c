/* CPU references of the H2O cache; see ref_h2o.h. */
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

double ref_select_value(uint32_t policy, uint32_t mode, double score, uint32_t pos, uint32_t cur, uint32_t seed,
                        uint32_t layer, bool f32_mean)
{
    if (policy == VKH2O_POLICY_STREAMING)
        return pos;
    if (policy == VKH2O_POLICY_RANDOM)
        return vkh2o_hash32(vkh2o_mock_base(seed, layer, cur, 3) + pos * 0x9e3779b9u);
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

/* ---- simulation ---- */

bool ref_h2o_sim_init(ref_h2o_sim* s, const ref_h2o_config* cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    const ref_h2o_config* c = &s->cfg;
    uint32_t H = c->heads;
    s->cap = c->n_sink + c->budget + c->n_recent;
    bool absorb = c->latent && c->kv_b;
    s->a_width = c->latent ? c->kvl : H * (c->dn + c->dr);
    s->b_width = c->latent ? c->dr : H * c->dv;
    s->q_width = (c->latent && !absorb) ? c->kvl + c->dr : c->dn + c->dr;
    s->out_width = (c->latent && !absorb) ? c->kvl : c->dv;
    s->layer = calloc(c->layers, sizeof *s->layer);
    s->pre_value = calloc(c->capacity, sizeof *s->pre_value);
    s->pre_pos = calloc(c->capacity, sizeof *s->pre_pos);
    if (!s->layer || !s->pre_value || !s->pre_pos)
        return false;
    for (uint32_t l = 0; l < c->layers; l++) {
        ref_h2o_layer* L = &s->layer[l];
        L->pos = calloc(c->capacity, sizeof *L->pos);
        L->score = calloc(c->capacity, sizeof *L->score);
        L->a = calloc((size_t)c->capacity * s->a_width, sizeof *L->a);
        L->b = calloc((size_t)c->capacity * s->b_width, sizeof *L->b);
        L->out = calloc((size_t)H * s->out_width, sizeof *L->out);
        if (!L->pos || !L->score || !L->a || !L->b || !L->out)
            return false;
    }
    return true;
}

void ref_h2o_sim_free(ref_h2o_sim* s)
{
    if (s->layer)
        for (uint32_t l = 0; l < s->cfg.layers; l++) {
            free(s->layer[l].pos);
            free(s->layer[l].score);
            free(s->layer[l].a);
            free(s->layer[l].b);
            free(s->layer[l].out);
        }
    free(s->layer);
    free(s->pre_value);
    free(s->pre_pos);
    memset(s, 0, sizeof *s);
}

void ref_h2o_mock(const ref_h2o_sim* s, uint32_t layer, uint32_t pos, float* q, float* a, float* b)
{
    uint32_t seed = s->cfg.seed;
    uint32_t bq = vkh2o_mock_base(seed, layer, pos, 0), ba = vkh2o_mock_base(seed, layer, pos, 1),
             bb = vkh2o_mock_base(seed, layer, pos, 2);
    for (uint32_t i = 0; q && i < s->cfg.heads * s->q_width; i++)
        q[i] = vkh2o_mock_value(bq, i);
    for (uint32_t i = 0; a && i < s->a_width; i++)
        a[i] = vkh2o_mock_value(ba, i);
    for (uint32_t i = 0; b && i < s->b_width; i++)
        b[i] = vkh2o_mock_value(bb, i);
}

static void layer_attention(ref_h2o_sim* s, uint32_t l, const float* q, double* mass)
{
    const ref_h2o_config* c = &s->cfg;
    ref_h2o_layer* L = &s->layer[l];
    uint32_t H = c->heads, n = L->len;
    if (!c->latent) {
        ref_attn_expanded(H, c->dn + c->dr, c->dv, n, q, L->a, L->b, c->scale, L->out, mass);
        return;
    }
    double* qa = calloc((size_t)H * c->kvl, sizeof *qa);
    double* qp = calloc((size_t)H * (c->dr ? c->dr : 1), sizeof *qp);
    uint32_t pe0 = c->kv_b ? c->dn : c->kvl;
    if (c->kv_b) {
        ref_absorb_q(H, c->dn, c->dv, c->kvl, c->kv_b, q, s->q_width, qa);
    } else {
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t j = 0; j < c->kvl; j++)
                qa[h * c->kvl + j] = q[h * s->q_width + j];
    }
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t j = 0; j < c->dr; j++)
            qp[h * c->dr + j] = q[h * s->q_width + pe0 + j];
    if (c->kv_b) {
        double* ol = malloc((size_t)H * c->kvl * sizeof *ol);
        ref_attn_latent(H, c->kvl, c->dr, n, qa, qp, L->a, L->b, c->scale, ol, mass);
        ref_absorb_out(H, c->dn, c->dv, c->kvl, c->kv_b, ol, L->out);
        free(ol);
    } else {
        ref_attn_latent(H, c->kvl, c->dr, n, qa, qp, L->a, L->b, c->scale, L->out, mass);
    }
    free(qa);
    free(qp);
}

void ref_h2o_sim_step(ref_h2o_sim* s, uint32_t position, uint32_t l, const uint32_t* forced_keep, uint32_t forced_len,
                      double tie_tol, bool* tie_ok)
{
    const ref_h2o_config* c = &s->cfg;
    ref_h2o_layer* L = &s->layer[l];
    if (tie_ok)
        *tie_ok = true;
    float* q = malloc((size_t)c->heads * s->q_width * sizeof *q);
    uint32_t t = L->len;
    ref_h2o_mock(s, l, position, q, L->a + (size_t)t * s->a_width, L->b + (size_t)t * s->b_width);
    L->pos[t] = position;
    L->score[t] = 0;
    L->len = ++t;
    double* mass = malloc((size_t)t * sizeof *mass);
    layer_attention(s, l, q, mass);
    double factor = c->mode == VKH2O_SCORE_DECAY ? (double)c->decay : c->mode == VKH2O_SCORE_TOVA ? 0.0 : 1.0;
    for (uint32_t i = 0; i < t; i++)
        L->score[i] = factor * L->score[i] + mass[i];
    free(mass);
    free(q);

    uint32_t n = L->len;
    s->pre_len = n;
    for (uint32_t i = 0; i < n; i++) {
        s->pre_pos[i] = L->pos[i];
        s->pre_value[i] = ref_select_value(c->policy, c->mode, L->score[i], L->pos[i], position, c->seed, l, false);
    }
    L->evicted = 0;
    if (n <= s->cap)
        return;
    uint32_t begin = c->n_sink, end = n - c->n_recent;
    uint32_t* keep = malloc(n * sizeof *keep);
    uint32_t kept = ref_topk_keep(s->pre_value, n, begin, end, c->budget, keep);
    if (forced_keep) {
        /* map the device's kept positions to slots; accept them when they differ from ours only
         * by near ties */
        uint32_t* fk = malloc(n * sizeof *fk);
        bool ok = forced_len == kept;
        for (uint32_t i = 0, j = 0; ok && i < forced_len; i++) {
            while (j < n && L->pos[j] != forced_keep[i])
                j++;
            if (j == n)
                ok = false;
            else
                fk[i] = j++;
        }
        bool same = ok && !memcmp(fk, keep, kept * sizeof *keep);
        if (ok && !same) {
            /* every token only we keep must tie (within tol) with every token only the device
             * keeps */
            for (uint32_t i = 0; ok && i < kept; i++) {
                bool ours_only = true;
                for (uint32_t j = 0; j < kept; j++)
                    ours_only &= fk[j] != keep[i];
                for (uint32_t j = 0; ours_only && ok && j < kept; j++) {
                    bool dev_only = true;
                    for (uint32_t m = 0; m < kept; m++)
                        dev_only &= keep[m] != fk[j];
                    if (!dev_only)
                        continue;
                    double x = s->pre_value[keep[i]], y = s->pre_value[fk[j]];
                    double mag = fabs(x) > fabs(y) ? fabs(x) : fabs(y);
                    if (fabs(x - y) > tie_tol * mag + 1e-30)
                        ok = false;
                }
            }
            if (ok) {
                memcpy(keep, fk, kept * sizeof *keep);
                s->near_ties++;
            }
        }
        if (!ok && tie_ok)
            *tie_ok = false;
        free(fk);
    }
    for (uint32_t r = 0; r < kept; r++) {
        uint32_t i = keep[r];
        if (i == r)
            continue;
        L->pos[r] = L->pos[i];
        L->score[r] = L->score[i];
        memmove(L->a + (size_t)r * s->a_width, L->a + (size_t)i * s->a_width, s->a_width * sizeof *L->a);
        memmove(L->b + (size_t)r * s->b_width, L->b + (size_t)i * s->b_width, s->b_width * sizeof *L->b);
    }
    L->evicted = n - kept;
    L->events++;
    L->evicted_total += n - kept;
    L->len = kept;
    free(keep);
}

bool ref_h2o_compare_layer(ref_h2o_sim* s, uint32_t l, uint32_t len, const uint32_t* pos, const float* score,
                           const float* a, const float* b, const float* out, double score_tol, double out_tol,
                           char* msg, size_t msg_size)
{
    ref_h2o_layer* L = &s->layer[l];
    if (len != L->len) {
        snprintf(msg, msg_size, "layer %u: length %u, reference %u", l, len, L->len);
        return false;
    }
    for (uint32_t i = 0; i < len; i++) {
        if (pos[i] != L->pos[i]) {
            snprintf(msg, msg_size, "layer %u slot %u: position %u, reference %u", l, i, pos[i], L->pos[i]);
            return false;
        }
        double ref = L->score[i], err = fabs((double)score[i] - ref);
        double rel = err / (fabs(ref) > 1e-30 ? fabs(ref) : 1e-30);
        if (!(score[i] == score[i]) || rel > score_tol) {
            snprintf(msg, msg_size, "layer %u slot %u (position %u): score %.9g, reference %.9g (relative error %.3g > %.3g)",
                     l, i, pos[i], score[i], ref, rel, score_tol);
            return false;
        }
        if (rel > s->max_score_rel_err)
            s->max_score_rel_err = rel;
    }
    if (a && memcmp(a, L->a, (size_t)len * s->a_width * sizeof *a)) {
        snprintf(msg, msg_size, "layer %u: K/c_kv rows differ from the reference", l);
        return false;
    }
    if (b && memcmp(b, L->b, (size_t)len * s->b_width * sizeof *b)) {
        snprintf(msg, msg_size, "layer %u: V/k_pe rows differ from the reference", l);
        return false;
    }
    if (out) {
        size_t n = (size_t)s->cfg.heads * s->out_width;
        double mx = 0, err = 0;
        for (size_t i = 0; i < n; i++) {
            mx = fabs(L->out[i]) > mx ? fabs(L->out[i]) : mx;
            double e = fabs((double)out[i] - L->out[i]);
            if (!(e == e))
                e = INFINITY;
            err = e > err ? e : err;
        }
        double rel = err / (mx > 1e-30 ? mx : 1e-30);
        if (rel > s->max_out_err)
            s->max_out_err = rel;
        if (!(rel <= out_tol)) {
            snprintf(msg, msg_size, "layer %u: attention output max error %.3g relative to max |out| %.3g (> %.3g)", l, rel,
                     mx, out_tol);
            return false;
        }
    }
    return true;
}

bool ref_h2o_check_selection(const uint32_t* keys, const uint32_t* pre_pos, uint32_t keys_len, uint32_t n_sink,
                             uint32_t budget, uint32_t n_recent, const uint32_t* kept_pos, uint32_t kept_len,
                             char* msg, size_t msg_size)
{
    uint32_t n = keys_len;
    uint32_t begin = n_sink < n ? n_sink : n;
    uint32_t end = n > n_recent ? n - n_recent : 0;
    if (end < begin)
        end = begin;
    double* v = malloc((n ? n : 1) * sizeof *v);
    uint32_t* keep = malloc((n ? n : 1) * sizeof *keep);
    for (uint32_t i = 0; i < n; i++)
        v[i] = keys[i];
    uint32_t kept = ref_topk_keep(v, n, begin, end, budget, keep);
    bool ok = kept == kept_len;
    if (!ok)
        snprintf(msg, msg_size, "selection: device kept %u tokens, the reference on its keys %u", kept_len, kept);
    for (uint32_t i = 0; ok && i < kept; i++)
        if (pre_pos[keep[i]] != kept_pos[i]) {
            snprintf(msg, msg_size, "selection: kept token %u is position %u, the reference on the device's keys says %u", i,
                     kept_pos[i], pre_pos[keep[i]]);
            ok = false;
        }
    free(v);
    free(keep);
    return ok;
}
