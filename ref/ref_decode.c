/* CPU reference of an MLA layer decoding against its cache (ref_decode.h). */
#include "ref_decode.h"

#include "ref_h2o.h"
#include "ref_mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ref_decode_init(ref_decode* r, const vkh2o_mla_config* cfg, const vkh2o_mla_host_weights* hw, bool latent, bool f16,
                    bool evict, uint32_t n_sink, uint32_t budget, uint32_t n_recent, uint32_t room)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->hw = hw;
    r->latent = latent;
    r->f16 = f16;
    r->evict = evict;
    r->n_sink = n_sink;
    r->budget = budget;
    r->n_recent = n_recent;
    r->room = room;
    const uint32_t H = cfg->num_heads, qk = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
    r->a_width = latent ? cfg->kv_lora_rank : H * qk;
    r->b_width = latent ? cfg->qk_rope_head_dim : H * cfg->v_head_dim;
    r->pos = malloc(sizeof *r->pos * room);
    r->score = malloc(sizeof *r->score * room);
    r->a = malloc(sizeof *r->a * room * r->a_width);
    r->b = malloc(sizeof *r->b * room * r->b_width);
    const vkh2o_tensor_view* w = vkh2o_mla_host_weights_get_view(hw, VKH2O_W_KV_B_PROJ);
    size_t nw = (size_t)w->shape[0] * w->shape[1];
    r->kv_b = malloc(sizeof *r->kv_b * nw);
    if (!r->pos || !r->score || !r->a || !r->b || !r->kv_b) {
        ref_decode_free(r);
        return -1;
    }
    for (size_t i = 0; i < nw; i++)
        r->kv_b[i] = (float)vkh2o_mla_host_weights_get_value(hw, VKH2O_W_KV_B_PROJ, i);   /* FP8: byte x scale */
    return 0;
}

void ref_decode_free(ref_decode* r)
{
    free(r->pos);
    free(r->score);
    free(r->a);
    free(r->b);
    free(r->kv_b);
    memset(r, 0, sizeof *r);
}

static float stored(const ref_decode* r, float x) { return r->f16 ? ref_f16_round(x) : x; }

/* The cache rows of token i of the projection parts into slot `slot`. */
static void put_rows(ref_decode* r, uint32_t slot, const ref_mla_parts* p, uint32_t i)
{
    const float* a = r->latent ? p->ckv + (size_t)i * r->a_width : p->k + (size_t)i * r->a_width;
    const float* b = r->latent ? p->kpe + (size_t)i * r->b_width : p->v + (size_t)i * r->b_width;
    for (uint32_t c = 0; c < r->a_width; c++)
        r->a[(size_t)slot * r->a_width + c] = stored(r, a[c]);
    for (uint32_t c = 0; c < r->b_width; c++)
        r->b[(size_t)slot * r->b_width + c] = stored(r, b[c]);
}

/* Keeps [0, n_sink) + the budget middle tokens of largest score (ties: lower slot, which is the
 * lower position) + the last n_recent, in order. */
static void evict(ref_decode* r)
{
    uint32_t cap = r->n_sink + r->budget + r->n_recent;
    if (!r->evict || r->len <= cap)
        return;
    uint32_t n = r->len, begin = r->n_sink < n ? r->n_sink : n, end = n > r->n_recent ? n - r->n_recent : 0;
    if (end < begin)
        end = begin;
    uint32_t* keep = malloc(sizeof *keep * n);
    float* a = malloc(sizeof *a * (size_t)n * r->a_width);
    float* b = malloc(sizeof *b * (size_t)n * r->b_width);
    uint32_t* pos = malloc(sizeof *pos * n);
    double* score = malloc(sizeof *score * n);
    if (!keep || !a || !b || !pos || !score)
        abort();   /* a test helper: out of memory ends the test */
    uint32_t k = ref_topk_keep(r->score, n, begin, end, r->budget, keep);
    for (uint32_t i = 0; i < k; i++) {
        memcpy(a + (size_t)i * r->a_width, r->a + (size_t)keep[i] * r->a_width, sizeof *a * r->a_width);
        memcpy(b + (size_t)i * r->b_width, r->b + (size_t)keep[i] * r->b_width, sizeof *b * r->b_width);
        pos[i] = r->pos[keep[i]];
        score[i] = r->score[keep[i]];
    }
    memcpy(r->a, a, sizeof *a * (size_t)k * r->a_width);
    memcpy(r->b, b, sizeof *b * (size_t)k * r->b_width);
    memcpy(r->pos, pos, sizeof *pos * k);
    memcpy(r->score, score, sizeof *score * k);
    r->len = k;
    free(keep); free(a); free(b); free(pos); free(score);
}

static void parts_free(ref_mla_parts* p)
{
    free(p->q); free(p->k); free(p->v); free(p->ckv); free(p->kpe);
}

static int parts_alloc(const vkh2o_mla_config* c, uint32_t S, ref_mla_parts* p)
{
    size_t H = c->num_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    *p = (ref_mla_parts){ malloc(4 * S * H * qk), malloc(4 * S * H * qk), malloc(4 * S * H * c->v_head_dim),
                          malloc(4 * S * c->kv_lora_rank), malloc(4 * S * c->qk_rope_head_dim), NULL };
    if (!p->q || !p->k || !p->v || !p->ckv || !p->kpe) {
        parts_free(p);
        return -1;
    }
    return 0;
}

int ref_decode_prefill(ref_decode* r, const float* hidden, uint32_t P, float* out)
{
    if (P > r->room + (r->evict ? P : 0))
        return -1;
    const size_t D = r->cfg->hidden_size;
    ref_mla_parts p;
    float* mass = malloc(sizeof *mass * P);
    float* o = malloc(sizeof *o * P * D);
    double* ms = malloc(sizeof *ms * P);
    uint32_t* keep = malloc(sizeof *keep * P);
    int rc = -1;
    if (!mass || !o || !ms || !keep || parts_alloc(r->cfg, P, &p)) {
        free(mass); free(o); free(ms); free(keep);
        return -1;
    }
    if (ref_mla_forward(r->cfg, r->hw, hidden, P, 0, o, mass, NULL, &p) == 0) {
        if (out)
            memcpy(out, o, sizeof *o * P * D);
        /* the kept prompt tokens: everything, or one eviction to the cap */
        uint32_t cap = r->n_sink + r->budget + r->n_recent, k = P;
        for (uint32_t t = 0; t < P; t++)
            keep[t] = t, ms[t] = mass[t];
        if (r->evict && P > cap) {
            uint32_t begin = r->n_sink < P ? r->n_sink : P, end = P > r->n_recent ? P - r->n_recent : 0;
            if (end < begin)
                end = begin;
            k = ref_topk_keep(ms, P, begin, end, r->budget, keep);
        }
        if (k <= r->room) {
            for (uint32_t i = 0; i < k; i++) {
                put_rows(r, i, &p, keep[i]);
                r->pos[i] = keep[i];
                r->score[i] = mass[keep[i]];
            }
            r->len = k;
            rc = 0;
        }
    }
    parts_free(&p);
    free(mass); free(o); free(ms); free(keep);
    return rc;
}

int ref_decode_step(ref_decode* r, const float* hidden, uint32_t pos, float* out)
{
    const vkh2o_mla_config* c = r->cfg;
    const uint32_t H = c->num_heads, dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim, dv = c->v_head_dim,
                   kvl = c->kv_lora_rank, qk = dn + dr, D = c->hidden_size;
    if (r->len >= r->room)
        return -1;
    ref_mla_parts p;
    if (parts_alloc(c, 1, &p))
        return -1;
    float* o1 = malloc(sizeof *o1 * D);
    int rc = -1;
    if (!o1 || ref_mla_forward(c, r->hw, hidden, 1, pos, o1, NULL, NULL, &p) != 0)
        goto done;
    /* append, then attend over every cached token (the new one included) */
    put_rows(r, r->len, &p, 0);
    r->pos[r->len] = pos;
    r->score[r->len] = 0.0;
    uint32_t n = ++r->len;
    float* k = malloc(sizeof *k * (size_t)n * H * qk);
    float* v = malloc(sizeof *v * (size_t)n * H * dv);
    double* o = malloc(sizeof *o * H * dv);
    double* mass = malloc(sizeof *mass * n);
    if (!k || !v || !o || !mass) {
        free(k); free(v); free(o); free(mass);
        goto done;
    }
    if (r->latent) {
        ref_expand_kv(H, dn, dr, dv, kvl, r->kv_b, n, r->a, r->b, k, v);
    } else {
        memcpy(k, r->a, sizeof *k * (size_t)n * H * qk);
        memcpy(v, r->b, sizeof *v * (size_t)n * H * dv);
    }
    ref_attn_expanded(H, qk, dv, n, p.q, k, v, ref_mla_softmax_scale(c), o, mass);
    for (uint32_t t = 0; t < n; t++)
        r->score[t] += mass[t];
    evict(r);
    /* o_proj */
    if (out)
        for (uint32_t d = 0; d < D; d++) {
            double s = 0;
            for (uint32_t j = 0; j < H * dv; j++)
                s += o[j] * vkh2o_mla_host_weights_get_value(r->hw, VKH2O_W_O_PROJ, (uint64_t)d * H * dv + j);
            out[d] = (float)s;
        }
    free(k); free(v); free(o); free(mass);
    rc = 0;
done:
    parts_free(&p);
    free(o1);
    return rc;
}
