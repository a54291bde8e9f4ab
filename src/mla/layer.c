/* An MLA layer on the device: weights, scratch, and the prefill forward recording. */
#include "mla_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- push constants (same field order as the GLSL blocks) ---- */
struct rmsnorm_push {
    uint32_t rows, n, x_stride, y_stride;
    float eps;
    uint32_t pos0, pe_stride, bc_heads, bc_tok_stride, bc_head_stride, bc_offset, pos_word;
};
_Static_assert(sizeof(struct rmsnorm_push) <= 128, "push constants");

struct rope_push {
    uint32_t tokens, heads, tok_stride, head_stride, offset, pos0, pos_word;
};
_Static_assert(sizeof(struct rope_push) <= 128, "push constants");

struct attn_push {
    uint32_t S, T, H;
    int32_t causal_off;
    uint32_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;
    float scale;
    uint32_t n_hg;
};
_Static_assert(sizeof(struct attn_push) <= 128, "push constants");

struct attn_reduce_push {
    uint32_t S, T;
    int32_t causal_off;
    uint32_t n_hg, accumulate;
};
_Static_assert(sizeof(struct attn_reduce_push) <= 128, "push constants");

/* spec constant ids (mirrors the comments at the top of each shader) */
enum { RMSNORM_SPEC_WG, RMSNORM_SPEC_ROPE, RMSNORM_SPEC_INTERLEAVE, RMSNORM_SPEC_POSBUF, RMSNORM_SPEC_COUNT };
enum { ROPE_SPEC_WG, ROPE_SPEC_ROPE, ROPE_SPEC_INTERLEAVE, ROPE_SPEC_POSBUF, ROPE_SPEC_COUNT };
enum { LSE_SPEC_WG, LSE_SPEC_D, LSE_SPEC_RQ, LSE_SPEC_RK, LSE_SPEC_COUNT };
enum { PV_SPEC_WG, PV_SPEC_D, PV_SPEC_RQ, PV_SPEC_RK, PV_SPEC_DV, PV_SPEC_HG, PV_SPEC_PROBS, PV_SPEC_COUNT };
enum { REDUCE_SPEC_WG, REDUCE_SPEC_RQ, REDUCE_SPEC_COUNT };

/* ------------------------------------------------------------------------------------------
 * RoPE table
 * ---------------------------------------------------------------------------------------- */

void vkh2o_rope_table_fill(const float* inv_freq, uint32_t rope, float attention_factor, float* table)
{
    uint32_t half = rope / 2;
    for (uint32_t level = 0; level < 3; level++)
        for (uint32_t b = 0; b < 256; b++)
            for (uint32_t i = 0; i < half; i++) {
                double angle = (double)b * ldexp(1.0, 8 * (int)level) * (double)inv_freq[i];
                double f = level == 0 ? (double)attention_factor : 1.0;
                float* e = table + 2 * (((size_t)level * 256 + b) * half + i);
                e[0] = (float)(cos(angle) * f);
                e[1] = (float)(sin(angle) * f);
            }
}

/* ------------------------------------------------------------------------------------------
 * Kernel recorders
 * ---------------------------------------------------------------------------------------- */

static const char k_rmsnorm[] = "rmsnorm", k_rope[] = "rope";

vkh2o_result vkh2o_rmsnorm_plan_make(vkh2o_context* ctx, uint32_t rope, bool interleave, vkh2o_rmsnorm_plan* p)
{
    *p = (vkh2o_rmsnorm_plan){ .rope = rope, .interleave = interleave };
    for (uint32_t posbuf = 0; posbuf < (rope ? 2u : 1u); posbuf++) {
        const uint32_t spec[RMSNORM_SPEC_COUNT] = { [RMSNORM_SPEC_WG] = ctx->profile.rmsnorm_workgroup, [RMSNORM_SPEC_ROPE] = rope,
                                                    [RMSNORM_SPEC_INTERLEAVE] = interleave ? 1 : 0, [RMSNORM_SPEC_POSBUF] = posbuf };
        VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &p->k[posbuf], k_rmsnorm, 7, 0, spec, RMSNORM_SPEC_COUNT));
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_rope_plan_make(vkh2o_context* ctx, uint32_t rope, bool interleave, vkh2o_rope_plan* p)
{
    *p = (vkh2o_rope_plan){ .rope = rope, .interleave = interleave };
    for (uint32_t posbuf = 0; posbuf < 2; posbuf++) {
        const uint32_t spec[ROPE_SPEC_COUNT] = { [ROPE_SPEC_WG] = 64, [ROPE_SPEC_ROPE] = rope,
                                                 [ROPE_SPEC_INTERLEAVE] = interleave ? 1 : 0, [ROPE_SPEC_POSBUF] = posbuf };
        VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &p->k[posbuf], k_rope, 3, 0, spec, ROPE_SPEC_COUNT));
    }
    return VKH2O_OK;
}

/* The kernel of an RMSNorm or RoPE call: from the owning object's plan (made for the call's rope
 * and interleave), or from a plan made by `make` for this call alone (tests, which own no object). */
static vkh2o_result pos_kernel(vkh2o_context* ctx, const char* op, vkh2o_pos_plan* plan, uint32_t rope, bool interleave,
                               bool dev_pos, vkh2o_result (*make)(vkh2o_context*, uint32_t, bool, vkh2o_pos_plan*),
                               vkh2o_kernel** k)
{
    vkh2o_pos_plan once;
    if (!plan) {
        VKH2O_CHECK(make(ctx, rope, interleave, &once));
        plan = &once;
    } else if (plan->rope != rope || plan->interleave != interleave) {
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "internal: %s plan for rope %u%s records rope %u%s", op,
                          plan->rope, plan->interleave ? " interleaved" : "", rope, interleave ? " interleaved" : "");
    }
    return vkh2o_kernel_slot_read(ctx, &plan->k[dev_pos ? 1 : 0], k);
}

vkh2o_result vkh2o_cmd_rmsnorm(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_rmsnorm_args* a,
                               vkh2o_binding x, vkh2o_binding w, vkh2o_binding table,
                               vkh2o_binding y, vkh2o_binding pe, vkh2o_binding bc)
{
    if (!a || a->rows == 0 || a->n == 0 || a->x_stride < a->n + a->rope || a->y_stride < a->n)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "rmsnorm: bad shape (rows %u, n %u, rope %u, strides %u/%u)",
                          a ? a->rows : 0, a ? a->n : 0, a ? a->rope : 0, a ? a->x_stride : 0, a ? a->y_stride : 0);
    if ((a->rope & 1u) || a->rope > VKH2O_ROPE_MAX_DIM ||
        (a->rope && (uint64_t)a->pos0 + a->rows > VKH2O_ROPE_MAX_POSITION))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "rmsnorm: rope dim %u / positions %u + %u out of range",
                          a->rope, a->pos0, a->rows);
    const bool dev_pos = a->rope && a->pos_buf;
    if (dev_pos && 4ull * a->pos_word + 4 > a->pos_buf->size)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "rmsnorm: position word %u outside its buffer of %llu bytes",
                          a->pos_word, (unsigned long long)a->pos_buf->size);
    vkh2o_kernel* k;
    VKH2O_CHECK(pos_kernel(ctx, "an rmsnorm", a->plan, a->rope, a->interleave, dev_pos, vkh2o_rmsnorm_plan_make, &k));
    struct rmsnorm_push pc = { a->rows, a->n, a->x_stride, a->y_stride, a->eps, a->pos0, a->pe_stride,
                               a->rope ? a->bc_heads : 0, a->bc_tok_stride, a->bc_head_stride, a->bc_offset,
                               dev_pos ? a->pos_word : 0 };
    vkh2o_binding b[7] = { x, w, table, y, pe, bc, dev_pos ? vkh2o_bind(a->pos_buf) : table };   /* table: unused */
    return vkh2o_dispatch(ctx, cb, k, b, 7, &pc, sizeof pc, a->rows, 1, 1);
}

vkh2o_result vkh2o_cmd_rope(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_rope_args* a,
                            vkh2o_binding table, vkh2o_binding x)
{
    if (!a || a->tokens == 0 || a->heads == 0 || a->rope == 0 || (a->rope & 1u) || a->rope > VKH2O_ROPE_MAX_DIM ||
        (uint64_t)a->pos0 + a->tokens > VKH2O_ROPE_MAX_POSITION)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "rope: bad arguments (tokens %u, heads %u, rope %u, pos0 %u)",
                          a ? a->tokens : 0, a ? a->heads : 0, a ? a->rope : 0, a ? a->pos0 : 0);
    if (a->pos_buf && 4ull * a->pos_word + 4 > a->pos_buf->size)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "rope: position word %u outside its buffer of %llu bytes",
                          a->pos_word, (unsigned long long)a->pos_buf->size);
    vkh2o_kernel* k;
    VKH2O_CHECK(pos_kernel(ctx, "a rope", a->plan, a->rope, a->interleave, a->pos_buf != NULL, vkh2o_rope_plan_make, &k));
    struct rope_push pc = { a->tokens, a->heads, a->tok_stride, a->head_stride, a->offset, a->pos0,
                            a->pos_buf ? a->pos_word : 0 };
    vkh2o_binding b[3] = { table, x, a->pos_buf ? vkh2o_bind(a->pos_buf) : table };   /* table: unused */
    return vkh2o_dispatch(ctx, cb, k, b, 3, &pc, sizeof pc, vkh2o_div_up(a->tokens * a->heads, 64), 1, 1);
}

vkh2o_attn_tuning vkh2o_attn_tuning_default(const vkh2o_context* ctx)
{
    const vkh2o_device_profile* p = &ctx->profile;
    return (vkh2o_attn_tuning){ p->attn_local, p->attn_rq, p->attn_rk, p->attn_hg, p->loop_budget, p->attn_texel ? 1u : 0u };
}

/* Loop iterations one key tile costs an invocation: the score loop over D and the P.V loop over
 * DV, both unrolled by 8 with a scalar tail (shaders/mla/attn_common.glsl, attn_pv.glsl), plus the
 * tile loop. The texel variant (D, DV multiples of 4) runs D / 8 + (D % 8) / 4 and
 * ceil(DV / 8) iterations, never more. */
static uint64_t tile_iterations(uint32_t D, uint32_t DV)
{
    return D / 8 + D % 8 + DV / 8 + DV % 8 + 2;
}

uint32_t vkh2o_attn_hg(const vkh2o_attn_tuning* t, uint32_t T, uint32_t D, uint32_t DV)
{
    if (!t->loop_budget)
        return t->hg;
    uint64_t per_head = (uint64_t)vkh2o_div_up(T, t->rk) * tile_iterations(D, DV) + 1;
    uint64_t hg = t->loop_budget / per_head;
    return hg < 1 ? 1 : hg < t->hg ? (uint32_t)hg : t->hg;
}

uint64_t vkh2o_attn_part_floats(const vkh2o_attn_tuning* t, uint32_t S, uint32_t T, uint32_t H, uint32_t D, uint32_t DV)
{
    return (uint64_t)vkh2o_div_up(H, vkh2o_attn_hg(t, T, D, DV)) * vkh2o_div_up(S, t->rq) * T;
}

double vkh2o_mla_forward_flops(const vkh2o_mla_config* c, uint32_t S)
{
    const double H = c->num_heads, D = c->hidden_size, qk = c->qk_nope_head_dim + c->qk_rope_head_dim,
                 dv = c->v_head_dim, lq = c->q_lora_rank, lkv = c->kv_lora_rank, s = S;
    double proj = lq ? D * lq + lq * H * qk : D * H * qk;
    proj += D * (lkv + c->qk_rope_head_dim) + lkv * H * (c->qk_nope_head_dim + dv) + H * dv * D;
    double pairs = s * (s + 1) / 2;                      /* causal (query, key) pairs */
    return 2.0 * s * proj + 2.0 * H * pairs * (qk + dv);
}

static bool binding_holds(vkh2o_binding b, uint64_t floats)
{
    return b.buffer && b.range != 0 && (b.range == VK_WHOLE_SIZE || b.range >= floats * sizeof(float));
}

/* furthest float index + 1 touched by rows [0, n) x heads [0, H) x dim, with strides */
static uint64_t extent(uint32_t n, uint32_t ts, uint32_t H, uint32_t hs, uint32_t dim)
{
    return (uint64_t)(n - 1) * ts + (uint64_t)(H - 1) * hs + dim;
}

/* The checks of a call under plan p (whose tuning and D, DV the call's must be); *hg: the heads
 * per P.V invocation for its T. */
static vkh2o_result attn_check(vkh2o_context* ctx, const vkh2o_attn_plan* p, const vkh2o_attn_tuning* t,
                               const vkh2o_attn_args* a, const vkh2o_attn_bufs* b, uint32_t* hg)
{
    if (a->S == 0 || a->T == 0 || a->H == 0 || a->D == 0 || a->DV == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "attention: empty shape or tuning");
    if (p->D != a->D || p->DV != a->DV || p->t.local != t->local || p->t.rq != t->rq || p->t.rk != t->rk ||
        p->t.hg != t->hg || p->t.loop_budget != t->loop_budget)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "internal: an attention plan for D %u, DV %u and its tuning records D %u, DV %u or another tuning",
                          p->D, p->DV, a->D, a->DV);
    if (a->T > p->hg_keys[0])
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "attention: %u keys of width %u/%u exceed what one invocation may loop over on this device "
                          "(%u iterations; llvmpipe ends longer loops silently)", a->T, a->D, a->DV, t->loop_budget);
    *hg = vkh2o_attn_plan_hg(p, a->T);
    const uint64_t part = (uint64_t)vkh2o_div_up(a->H, *hg) * vkh2o_div_up(a->S, t->rq) * a->T;
    if (!binding_holds(b->q, extent(a->S, a->q_ts, a->H, a->q_hs, a->D)) ||
        !binding_holds(b->k, extent(a->T, a->k_ts, a->H, a->k_hs, a->D)) ||
        !binding_holds(b->v, extent(a->T, a->v_ts, a->H, a->v_hs, a->DV)) ||
        !binding_holds(b->o, extent(a->S, a->o_ts, a->H, a->o_hs, a->DV)) ||
        !binding_holds(b->lse, (uint64_t)a->H * a->S) ||
        !binding_holds(b->part, part))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "attention: a binding is too small for S=%u T=%u H=%u D=%u DV=%u", a->S, a->T, a->H, a->D, a->DV);
    if ((b->q_buffer && b->q_buffer->buffer != b->q.buffer) || (b->k_buffer && b->k_buffer->buffer != b->k.buffer) ||
        (b->v_buffer && b->v_buffer->buffer != b->v.buffer))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "attention: q/k/v_buffer is not the buffer its binding binds");
    if (b->probs.buffer && !binding_holds(b->probs, (uint64_t)a->H * a->S * a->T))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "attention: probs binding holds less than H*S*T = %llu floats",
                          (unsigned long long)a->H * a->S * a->T);
    return VKH2O_OK;
}

/* The texel view of binding x of buf for a row layout reading `need` floats from x.offset:
 * from x.offset to the end of the buffer (one cached view per buffer and offset, whatever the
 * shape). False (no view) when x.offset, the strides or the width break 16-byte texels or the
 * view would exceed the device's texel limit. */
static bool texel_fits(const vkh2o_context* ctx, const vkh2o_buffer* buf, vkh2o_binding x, uint32_t ts, uint32_t hs,
                       uint32_t dim, uint64_t need, uint64_t* range)
{
    if (!buf || x.offset % 256u || ts % 4u || hs % 4u || dim % 4u || x.offset >= vkh2o_buffer_get_size(buf))
        return false;
    uint64_t r = (vkh2o_buffer_get_size(buf) - x.offset) & ~(uint64_t)15;
    const uint64_t max_range = (uint64_t)vkh2o_context_get_caps(ctx)->max_texel_buffer_elements * 16u;
    if (r > max_range)
        r = max_range;
    *range = r;
    return need * sizeof(float) <= r;
}

/* Whether q, k and v can all be read through texel views; their view ranges if so. */
static bool texel_plan(const vkh2o_context* ctx, const vkh2o_attn_tuning* t, const vkh2o_attn_args* a,
                       const vkh2o_attn_bufs* b, uint64_t range[3])
{
    return t->texel && a->S && a->T && a->H &&
           texel_fits(ctx, b->q_buffer, b->q, a->q_ts, a->q_hs, a->D, extent(a->S, a->q_ts, a->H, a->q_hs, a->D), &range[0]) &&
           texel_fits(ctx, b->k_buffer, b->k, a->k_ts, a->k_hs, a->D, extent(a->T, a->k_ts, a->H, a->k_hs, a->D), &range[1]) &&
           texel_fits(ctx, b->v_buffer, b->v, a->v_ts, a->v_hs, a->DV, extent(a->T, a->v_ts, a->H, a->v_hs, a->DV), &range[2]);
}

bool vkh2o_attn_uses_texels(const vkh2o_context* ctx, const vkh2o_attn_tuning* t, const vkh2o_attn_args* a,
                            const vkh2o_attn_bufs* b)
{
    uint64_t range[3];
    return ctx && t && a && b && texel_plan(ctx, t, a, b, range);
}

/* The q, k, v bindings of passes 1 and 2: texel views (rgba32ui) when texel_plan allows, else
 * the storage bindings as given. */
static vkh2o_result attn_inputs(vkh2o_context* ctx, const vkh2o_attn_tuning* t, const vkh2o_attn_args* a,
                                const vkh2o_attn_bufs* b, bool* texel, vkh2o_binding in[3])
{
    in[0] = b->q, in[1] = b->k, in[2] = b->v;
    uint64_t range[3];
    *texel = texel_plan(ctx, t, a, b, range);
    if (*texel) {
        vkh2o_buffer* bufs[3] = { b->q_buffer, b->k_buffer, b->v_buffer };
        for (int i = 0; i < 3; i++)
            VKH2O_CHECK(vkh2o_bind_texel(bufs[i], VK_FORMAT_R32G32B32A32_UINT, in[i].offset, range[i], &in[i]));
    }
    return VKH2O_OK;
}

static struct attn_push attn_push_of(const vkh2o_attn_args* a, uint32_t hg)
{
    struct attn_push pc = { a->S, a->T, a->H, a->causal_off, a->q_ts, a->q_hs, a->k_ts, a->k_hs,
                            a->v_ts, a->v_hs, a->o_ts, a->o_hs, a->scale, vkh2o_div_up(a->H, hg) };
    return pc;
}

static const char k_attn_lse[] = "attn_lse", k_attn_lse_texel[] = "attn_lse_texel", k_attn_pv[] = "attn_pv",
                  k_attn_pv_texel[] = "attn_pv_texel", k_attn_reduce[] = "attn_reduce";

vkh2o_result vkh2o_attn_plan_make(vkh2o_context* ctx, const vkh2o_attn_tuning* t, uint32_t D, uint32_t DV, vkh2o_attn_plan* p)
{
    if (!t || !t->local || !t->rq || !t->rk || !t->hg || !D || !DV)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "attention: empty shape or tuning");
    if (t->hg > VKH2O_ATTN_MAX_HG)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "attention: %u heads per P.V invocation, at most %u", t->hg,
                          VKH2O_ATTN_MAX_HG);
    memset(p, 0, sizeof *p);
    p->t = *t;
    p->t.texel = 0;
    p->D = D;
    p->DV = DV;
    /* h heads fit T keys while h * (ceil(T / rk) * tile + 1) <= budget (vkh2o_attn_hg), that is
     * while ceil(T / rk) <= (budget / h - 1) / tile */
    const uint64_t tile = tile_iterations(D, DV);
    for (uint32_t h = 1; h <= t->hg; h++) {
        uint64_t keys = UINT32_MAX;
        if (t->loop_budget) {
            const uint64_t per = t->loop_budget / h;
            keys = per < 1 ? 0 : (per - 1) / tile * t->rk;
        }
        p->hg_keys[h - 1] = keys < UINT32_MAX ? (uint32_t)keys : UINT32_MAX;
    }
    for (uint32_t texel = 0; texel < 2; texel++) {
        const uint32_t lspec[LSE_SPEC_COUNT] = { [LSE_SPEC_WG] = t->local, [LSE_SPEC_D] = D, [LSE_SPEC_RQ] = t->rq,
                                                 [LSE_SPEC_RK] = t->rk };
        VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &p->lse[texel], texel ? k_attn_lse_texel : k_attn_lse, 3, texel ? 0x3u : 0u,
                                              lspec, LSE_SPEC_COUNT));
        for (uint32_t probs = 0; probs < 2; probs++)
            for (uint32_t h = 1; h <= t->hg; h++) {
                const uint32_t pspec[PV_SPEC_COUNT] = { [PV_SPEC_WG] = t->local, [PV_SPEC_D] = D, [PV_SPEC_RQ] = t->rq,
                                                        [PV_SPEC_RK] = t->rk, [PV_SPEC_DV] = DV, [PV_SPEC_HG] = h,
                                                        [PV_SPEC_PROBS] = probs };
                VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &p->pv[texel][probs][h - 1], texel ? k_attn_pv_texel : k_attn_pv, 7,
                                                      texel ? 0x7u : 0u, pspec, PV_SPEC_COUNT));
            }
    }
    const uint32_t rspec[REDUCE_SPEC_COUNT] = { [REDUCE_SPEC_WG] = t->local, [REDUCE_SPEC_RQ] = t->rq };
    return vkh2o_kernel_slot_prepare(ctx, &p->reduce, k_attn_reduce, 2, 0, rspec, REDUCE_SPEC_COUNT);
}

/* b's plan, or for a call no object owns (tests) *once made for it alone, its kernels found by
 * name when read */
static vkh2o_result attn_plan_of(vkh2o_context* ctx, const vkh2o_attn_tuning* t, const vkh2o_attn_args* a,
                                 const vkh2o_attn_bufs* b, vkh2o_attn_plan* once, vkh2o_attn_plan** out)
{
    if (!t || !a || !b)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "attention: empty shape or tuning");
    *out = b->plan;
    if (b->plan)
        return VKH2O_OK;
    *out = once;
    return vkh2o_attn_plan_make(ctx, t, a->D, a->DV, once);
}

vkh2o_result vkh2o_cmd_attention(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_attn_tuning* t,
                                 const vkh2o_attn_args* a, const vkh2o_attn_bufs* b)
{
    vkh2o_attn_plan once, *p;
    VKH2O_CHECK(attn_plan_of(ctx, t, a, b, &once, &p));
    uint32_t hg;
    VKH2O_CHECK(attn_check(ctx, p, t, a, b, &hg));
    struct attn_push pc = attn_push_of(a, hg);
    uint32_t nqb = vkh2o_div_up(a->S, t->rq);
    bool texel;
    vkh2o_binding in[3];
    VKH2O_CHECK(attn_inputs(ctx, t, a, b, &texel, in));

    vkh2o_kernel* klse;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &p->lse[texel], &klse));
    vkh2o_binding lb[3] = { in[0], in[1], b->lse };
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, klse, lb, 3, &pc, sizeof pc, vkh2o_div_up(a->H * nqb, t->local), 1, 1));
    vkh2o_barrier(ctx, cb);

    vkh2o_kernel* kpv;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &p->pv[texel][b->probs.buffer ? 1 : 0][hg - 1], &kpv));
    vkh2o_binding pb[7] = { in[0], in[1], in[2], b->lse, b->o, b->part, b->probs.buffer ? b->probs : b->part };
    return vkh2o_dispatch(ctx, cb, kpv, pb, 7, &pc, sizeof pc, vkh2o_div_up(pc.n_hg * nqb, t->local), 1, 1);
}

vkh2o_result vkh2o_cmd_attention_mass(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_attn_tuning* t,
                                      const vkh2o_attn_args* a, const vkh2o_attn_bufs* b)
{
    vkh2o_attn_plan once, *p;
    VKH2O_CHECK(attn_plan_of(ctx, t, a, b, &once, &p));
    uint32_t hg;
    VKH2O_CHECK(attn_check(ctx, p, t, a, b, &hg));
    if (!binding_holds(b->scores, a->T))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "attention mass: scores binding holds less than T = %u floats", a->T);
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &p->reduce, &k));
    struct attn_reduce_push pc = { a->S, a->T, a->causal_off, vkh2o_div_up(a->H, hg), a->accumulate_scores ? 1u : 0u };
    vkh2o_binding bb[2] = { b->part, b->scores };
    return vkh2o_dispatch(ctx, cb, k, bb, 2, &pc, sizeof pc, vkh2o_div_up(a->T, t->local), 1, 1);
}

/* ------------------------------------------------------------------------------------------
 * The layer
 * ---------------------------------------------------------------------------------------- */

struct vkh2o_mla_layer {
    vkh2o_context* ctx;
    vkh2o_mla_config cfg;
    uint32_t flags;
    vkh2o_mla_state st;
    vkh2o_dev_weight w[VKH2O_W_COUNT];
    vkh2o_buffer* qa;        /* [S, q_lora] q_a_proj output */
    vkh2o_buffer* qa_n;      /* [S, q_lora] normed */
    vkh2o_buffer* ckv_full;  /* [S, kv_lora + rope] kv_a_proj_with_mqa output */
    vkh2o_buffer* lse;       /* [H, S] */
    vkh2o_buffer* part;      /* partial attention mass */
    /* host round trips of vkh2o_host_mla_forward, grown on demand */
    vkh2o_buffer *io_hidden, *io_out, *io_scores;
    uint32_t io_rows;
    uint32_t matmul_path;    /* vkh2o_matmul_path of the projections (0: automatic) */
    /* decode (src/mla/decode.c): absorbed queries and attention outputs of max_decode tokens,
     * the prefill's attention mass */
    uint32_t max_decode;
    vkh2o_buffer *dec_q, *dec_o, *dec_mass, *dec_hidden, *dec_out;
    uint32_t max_obs;        /* observation windows (decode.c): P [H][W][S], pooled scores [S] */
    vkh2o_buffer *obs_p, *obs_mass, *obs_score;
    /* the plans of its kernels, made at create (layer_plan): every variant a recording may take
     * has a slot, those of the one-token decode step made then, the others at their first read */
    vkh2o_matmul_plan mm[VKH2O_MM_COUNT];
    vkh2o_rmsnorm_plan norm_q, norm_kv;   /* [1]: positions from the cache (VKH2O_POSITION_FROM_CACHE) */
    vkh2o_rope_plan rope;
    vkh2o_attn_plan attn;           /* the forward's attention passes */
    vkh2o_kernel_slot obs[3][3];    /* the prefill's observation window: [phase][pooling] */
};

static vkh2o_result alloc_f32(vkh2o_context* ctx, uint64_t floats, vkh2o_buffer** out)
{
    return vkh2o_buffer_create(ctx, (floats ? floats : 1) * sizeof(float), out);
}

/* Largest S whose scratch buffers each fit one binding (and 4096 at most), rounded down to a
 * multiple of 64 when the binding limit is what bounds it. */
static uint32_t seq_limit(const vkh2o_mla_config* c, const vkh2o_attn_tuning* t, uint64_t range, uint32_t cap)
{
    uint64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    uint64_t per_tok[] = { c->hidden_size, c->q_lora_rank, c->kv_lora_rank + c->qk_rope_head_dim,
                           (uint64_t)c->num_heads * qk, (uint64_t)c->num_heads * c->v_head_dim };
    uint64_t s = cap;
    for (size_t i = 0; i < sizeof per_tok / sizeof per_tok[0]; i++)
        if (per_tok[i] && range / (per_tok[i] * 4) < s)
            s = range / (per_tok[i] * 4);
    uint32_t dqk = (uint32_t)qk, dv = c->v_head_dim;
    while (s > 0 && (vkh2o_attn_part_floats(t, (uint32_t)s, (uint32_t)s, c->num_heads, dqk, dv) * 4 > range ||
                     (t->loop_budget && (uint64_t)vkh2o_div_up((uint32_t)s, t->rk) * tile_iterations(dqk, dv) + 1 > t->loop_budget)))
        s--;
    return (uint32_t)s;
}

static const vkh2o_mla_weight needed_lora[] = { VKH2O_W_Q_A_PROJ, VKH2O_W_Q_A_LAYERNORM, VKH2O_W_Q_B_PROJ,
                                                VKH2O_W_KV_A_PROJ, VKH2O_W_KV_A_LAYERNORM, VKH2O_W_KV_B_PROJ,
                                                VKH2O_W_O_PROJ };
static const vkh2o_mla_weight needed_plain[] = { VKH2O_W_Q_PROJ, VKH2O_W_KV_A_PROJ, VKH2O_W_KV_A_LAYERNORM,
                                                 VKH2O_W_KV_B_PROJ, VKH2O_W_O_PROJ };

static vkh2o_result check_weight(vkh2o_context* ctx, const vkh2o_tensor_view* v, const vkh2o_tensor_view* scale,
                                 vkh2o_mla_weight w, uint64_t r, uint64_t c)
{
    const char* name = vkh2o_mla_weight_short_name(w);
    if (!v || !v->data)
        return vkh2o_fail(ctx, VKH2O_ERROR_MISSING_TENSOR, "mla layer: weight %s is missing", name);
    bool ok = c ? (v->ndim == 2 && v->shape[0] == r && v->shape[1] == c) : (v->ndim == 1 && v->shape[0] == r);
    if (!ok)
        return vkh2o_fail(ctx, VKH2O_ERROR_SHAPE, "mla layer: weight %s (%s) has the wrong shape for the config", name,
                          v->file ? v->file : "?");
    if (v->dtype != VKH2O_DTYPE_F32 && v->dtype != VKH2O_DTYPE_F16 && v->dtype != VKH2O_DTYPE_BF16 &&
        !(v->dtype == VKH2O_DTYPE_F8_E4M3 && c && scale && scale->data))
        return vkh2o_fail(ctx, VKH2O_ERROR_DTYPE,
                          "mla layer: weight %s has dtype %s (F32, F16, BF16, or F8_E4M3 projections with block scales)",
                          name, vkh2o_dtype_name(v->dtype));
    return VKH2O_OK;
}

static vkh2o_result layer_plan(vkh2o_mla_layer* L);

vkh2o_result vkh2o_mla_layer_create(vkh2o_context* ctx, const vkh2o_mla_config* cfg, const vkh2o_mla_host_weights* hw,
                                    const vkh2o_mla_layer_desc* desc, vkh2o_mla_layer** out)
{
    if (out)
        *out = NULL;
    if (!ctx || !cfg || !hw || !out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_layer_create: NULL argument");
    vkh2o_mla_layer_desc d = desc ? *desc : (vkh2o_mla_layer_desc){ 0 };
    vkh2o_error err = { 0 };
    if (vkh2o_mla_config_validate(cfg, &err) != VKH2O_OK)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla layer: %s", err.message);
    if (cfg->attention_bias)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla layer: attention_bias is not supported");
    if ((cfg->qk_rope_head_dim & 1u) || cfg->qk_rope_head_dim == 0 || cfg->qk_rope_head_dim > VKH2O_ROPE_MAX_DIM)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla layer: qk_rope_head_dim %u must be even, 2..%u",
                          cfg->qk_rope_head_dim, VKH2O_ROPE_MAX_DIM);
    if (d.max_decode_tokens > d.max_seq_len && d.max_seq_len)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla layer: max_decode_tokens %u exceeds max_seq_len %u",
                          d.max_decode_tokens, d.max_seq_len);
    if (d.flags & ~(uint32_t)VKH2O_MLA_WRITE_PROBS)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla layer: unknown flags 0x%x", d.flags);

    const uint64_t H = cfg->num_heads, D = cfg->hidden_size, nope = cfg->qk_nope_head_dim,
                   rope = cfg->qk_rope_head_dim, dv = cfg->v_head_dim, qk = nope + rope, lq = cfg->q_lora_rank,
                   lkv = cfg->kv_lora_rank;
    uint64_t shapes[VKH2O_W_COUNT][2] = {
        [VKH2O_W_Q_A_PROJ] = { lq, D },          [VKH2O_W_Q_A_LAYERNORM] = { lq, 0 },
        [VKH2O_W_Q_B_PROJ] = { H * qk, lq },     [VKH2O_W_Q_PROJ] = { H * qk, D },
        [VKH2O_W_KV_A_PROJ] = { lkv + rope, D }, [VKH2O_W_KV_A_LAYERNORM] = { lkv, 0 },
        [VKH2O_W_KV_B_PROJ] = { H * (nope + dv), lkv }, [VKH2O_W_O_PROJ] = { D, H * dv },
    };
    const vkh2o_mla_weight* need = lq ? needed_lora : needed_plain;
    size_t nneed = lq ? sizeof needed_lora / sizeof *needed_lora : sizeof needed_plain / sizeof *needed_plain;
    for (size_t i = 0; i < nneed; i++)
        VKH2O_CHECK(check_weight(ctx, vkh2o_mla_host_weights_get_view(hw, need[i]), vkh2o_mla_host_weights_get_scale(hw, need[i]),
                                 need[i], shapes[need[i]][0], shapes[need[i]][1]));

    vkh2o_attn_tuning tune = vkh2o_attn_tuning_default(ctx);
    uint64_t range = vkh2o_context_get_caps(ctx)->max_storage_buffer_range;
    uint32_t limit = seq_limit(cfg, &tune, range, UINT32_MAX / 2);
    uint32_t max_seq = d.max_seq_len;
    if (max_seq == 0) {
        max_seq = limit < 4096 ? limit / 64 * 64 : 4096;
        if (max_seq == 0)
            max_seq = limit;
    }
    if (max_seq == 0 || max_seq > limit)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla layer: max_seq_len %u exceeds %u, the longest sequence whose scratch fits one storage "
                          "binding of %llu bytes on this device", d.max_seq_len, limit, (unsigned long long)range);

    vkh2o_mla_layer* L = vkh2o_calloc(ctx, 1, sizeof *L);
    if (!L)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "mla layer: out of host memory");
    L->ctx = ctx;
    L->cfg = *cfg;
    L->flags = d.flags;
    vkh2o_mla_state* st = &L->st;
    st->max_seq_len = max_seq;
    st->heads = (uint32_t)H, st->nope = (uint32_t)nope, st->rope = (uint32_t)rope, st->v_dim = (uint32_t)dv;
    st->kv_lora = (uint32_t)lkv, st->q_lora = (uint32_t)lq, st->hidden = (uint32_t)D;
    st->scale = vkh2o_mla_softmax_scale(cfg);
    st->interleave = cfg->rope_interleave;
    st->tuning = tune;

    vkh2o_result r = VKH2O_OK;
    for (size_t i = 0; i < nneed && r == VKH2O_OK; i++) {
        const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(hw, need[i]);
        bool norm = need[i] == VKH2O_W_Q_A_LAYERNORM || need[i] == VKH2O_W_KV_A_LAYERNORM;
        /* FP8 stays FP8 on the device: bytes and block scales, dequantised inside the matmul */
        if (v->dtype == VKH2O_DTYPE_F8_E4M3)
            r = vkh2o_weight_upload_fp8(ctx, v, vkh2o_mla_host_weights_get_scale(hw, need[i]), 0, &L->w[need[i]]);
        else
            r = norm ? vkh2o_weight_upload_f32(ctx, v, &L->w[need[i]]) : vkh2o_weight_upload(ctx, v, &L->w[need[i]]);
    }
    const uint64_t S = max_seq;
    if (r == VKH2O_OK && lq)
        r = alloc_f32(ctx, S * lq, &L->qa);
    if (r == VKH2O_OK && lq)
        r = alloc_f32(ctx, S * lq, &L->qa_n);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * (lkv + rope), &L->ckv_full);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * lkv, &st->ckv);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * rope, &st->kpe);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * H * qk, &st->q);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * H * qk, &st->k);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * H * dv, &st->v);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * H * dv, &st->o);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S * H, &L->lse);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, vkh2o_attn_part_floats(&tune, max_seq, max_seq, (uint32_t)H, (uint32_t)qk, (uint32_t)dv), &L->part);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, vkh2o_rope_table_floats((uint32_t)rope), &st->rope_table);
    L->max_decode = d.max_decode_tokens ? d.max_decode_tokens : (max_seq < 16 ? max_seq : 16);
    if (L->max_decode > max_seq)
        L->max_decode = max_seq;
    const uint64_t nd = L->max_decode, qw = qk > lkv + rope ? qk : lkv + rope, ow = dv > lkv ? dv : lkv;
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, nd * H * qw, &L->dec_q);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, nd * H * ow, &L->dec_o);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, S, &L->dec_mass);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, nd * D, &L->dec_hidden);
    if (r == VKH2O_OK)
        r = alloc_f32(ctx, nd * D, &L->dec_out);
    L->max_obs = d.max_obs_window < max_seq ? d.max_obs_window : max_seq;
    if (r == VKH2O_OK && L->max_obs) {
        uint64_t pb = (uint64_t)H * L->max_obs * S * 4;
        if (pb > ctx->caps.max_storage_buffer_range)
            r = vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                           "mla layer: an observation window of %u queries needs %llu bytes of scratch, over one storage "
                           "binding (%llu)", L->max_obs, (unsigned long long)pb,
                           (unsigned long long)ctx->caps.max_storage_buffer_range);
        if (r == VKH2O_OK)
            r = alloc_f32(ctx, (uint64_t)H * L->max_obs * S, &L->obs_p);
        if (r == VKH2O_OK)
            r = alloc_f32(ctx, S, &L->obs_mass);
        if (r == VKH2O_OK)
            r = alloc_f32(ctx, S, &L->obs_score);
    }
    if (r == VKH2O_OK) {
        float inv_freq[VKH2O_ROPE_MAX_DIM / 2];
        float af = 1.0f;
        vkh2o_mla_rope_params(cfg, inv_freq, &af);
        float* tab = vkh2o_malloc(ctx, vkh2o_rope_table_floats((uint32_t)rope) * sizeof *tab);
        if (!tab) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "mla layer: out of host memory");
        } else {
            vkh2o_rope_table_fill(inv_freq, (uint32_t)rope, af, tab);
            r = vkh2o_buffer_upload(st->rope_table, 0, tab, vkh2o_rope_table_floats((uint32_t)rope) * sizeof *tab);
            free(tab);
        }
    }
    /* the kernels' plans, and the one-token decode step's kernels made, so that recording looks
     * none up */
    if (r == VKH2O_OK)
        r = layer_plan(L);
    if (r != VKH2O_OK) {
        vkh2o_mla_layer_destroy(L);
        return r;
    }
    *out = L;
    return VKH2O_OK;
}

void vkh2o_mla_layer_destroy(vkh2o_mla_layer* L)
{
    if (!L)
        return;
    for (int i = 0; i < VKH2O_W_COUNT; i++)
        vkh2o_weight_free(&L->w[i]);
    vkh2o_buffer* bufs[] = { L->qa, L->qa_n, L->ckv_full, L->lse, L->part, L->io_hidden, L->io_out, L->io_scores,
                             L->dec_q, L->dec_o, L->dec_mass, L->dec_hidden, L->dec_out,
                             L->obs_p, L->obs_mass, L->obs_score,
                             L->st.q, L->st.k, L->st.v, L->st.ckv, L->st.kpe, L->st.o, L->st.rope_table };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        vkh2o_buffer_destroy(bufs[i]);
    free(L);
}

uint32_t vkh2o_mla_layer_get_max_seq_len(const vkh2o_mla_layer* L) { return L ? L->st.max_seq_len : 0; }
uint32_t vkh2o_mla_layer_get_max_decode_tokens(const vkh2o_mla_layer* L) { return L ? L->max_decode : 0; }
const vkh2o_mla_config* vkh2o_mla_layer_get_config(const vkh2o_mla_layer* L) { return L ? &L->cfg : NULL; }
vkh2o_context* vkh2o_mla_layer_context(const vkh2o_mla_layer* L) { return L->ctx; }

vkh2o_mla_decode_bufs vkh2o_mla_layer_decode_bufs(vkh2o_mla_layer* L)
{
    return (vkh2o_mla_decode_bufs){ .q = L->dec_q, .o = L->dec_o, .mass = L->dec_mass, .rows = L->ckv_full,
                                    .obs_p = L->obs_p, .obs_mass = L->obs_mass, .obs_score = L->obs_score,
                                    .max_obs = L->max_obs,
                                    .hidden = L->dec_hidden, .out = L->dec_out,
                                    .max_decode = L->max_decode,
                                    .obs_slots = L->obs };
}

uint64_t vkh2o_mla_layer_get_weight_bytes(const vkh2o_mla_layer* L)
{
    uint64_t b = 0;
    for (int i = 0; L && i < VKH2O_W_COUNT; i++) b += vkh2o_weight_get_device_bytes(&L->w[i]);
    return b;
}
const vkh2o_mla_state* vkh2o_mla_layer_state(const vkh2o_mla_layer* L) { return &L->st; }

vkh2o_result vkh2o_mla_layer_get_kv_rows(const vkh2o_mla_layer* L, vkh2o_kv_layout layout, vkh2o_buffer** a,
                                         vkh2o_buffer** b)
{
    if (!L || !a || !b)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    switch (layout) {
    case VKH2O_LAYOUT_EXPANDED: *a = L->st.k; *b = L->st.v; return VKH2O_OK;
    case VKH2O_LAYOUT_DEFAULT:
    case VKH2O_LAYOUT_LATENT: *a = L->st.ckv; *b = L->st.kpe; return VKH2O_OK;
    default: return vkh2o_fail(L->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_layer_get_kv_rows: unknown layout %d", (int)layout);
    }
}

vkh2o_result vkh2o_mla_layer_get_attn_output(const vkh2o_mla_layer* L, vkh2o_buffer** o)
{
    if (!L || !o)
        return vkh2o_fail(L ? L->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_layer_get_attn_output: NULL argument");
    *o = L->st.o;
    return VKH2O_OK;
}

const vkh2o_dev_weight* vkh2o_mla_layer_weight(const vkh2o_mla_layer* L, vkh2o_mla_weight w)
{
    if (!L || (int)w < 0 || w >= VKH2O_W_COUNT || L->w[w].nchunks == 0)
        return NULL;
    return &L->w[w];
}

static vkh2o_binding rows(const vkh2o_buffer* b, uint64_t floats)
{
    return vkh2o_bind_range(b, 0, floats * sizeof(float));
}

static vkh2o_result check_seq(vkh2o_mla_layer* L, uint32_t S, uint32_t pos0)
{
    if (S == 0 || S > L->st.max_seq_len)
        return vkh2o_fail(L->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla forward: seq_len %u outside 1..%u (the layer's max_seq_len)",
                          S, L->st.max_seq_len);
    if ((uint64_t)pos0 + S > VKH2O_ROPE_MAX_POSITION)
        return vkh2o_fail(L->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla forward: positions %u..%llu reach 2^24", pos0,
                          (unsigned long long)pos0 + S - 1);
    return VKH2O_OK;
}

/* The layer's own buffer that binding b binds, or NULL (a caller's buffer). */
static vkh2o_buffer* own_buffer(const vkh2o_mla_layer* L, vkh2o_binding b)
{
    vkh2o_buffer* const own[] = { L->qa_n, L->st.ckv, L->st.o, L->io_hidden, L->dec_hidden, L->dec_o };
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (own[i] && own[i]->buffer == b.buffer)
            return own[i];
    return NULL;
}

/* The weight each matmul site multiplies by (VKH2O_MM_ABSORB: transposed). */
static vkh2o_mla_weight site_weight(const vkh2o_mla_layer* L, vkh2o_mla_mm_site s)
{
    switch (s) {
    case VKH2O_MM_Q_A: return VKH2O_W_Q_A_PROJ;
    case VKH2O_MM_KV_A: return VKH2O_W_KV_A_PROJ;
    case VKH2O_MM_Q_B: return L->st.q_lora ? VKH2O_W_Q_B_PROJ : VKH2O_W_Q_PROJ;
    case VKH2O_MM_O_PROJ: return VKH2O_W_O_PROJ;
    default: return VKH2O_W_KV_B_PROJ;   /* KV_B_K, KV_B_V, ABSORB, W_UV */
    }
}

/* One matmul of the projections: its weight, X (x_buf: the buffer X binds when known, so that
 * CPU devices may read X as texels, matmul.c), Y and shape. */
typedef struct mm_call {
    vkh2o_mla_weight w;
    vkh2o_binding x, y;
    vkh2o_buffer* x_buf;
    vkh2o_matmul_args a;
} mm_call;

/* The matmul of site over S tokens; hidden (and its buffer when known) is the down projections'
 * input. o_proj's X and Y here are the state's o and the decode scratch (its callers give theirs). */
static mm_call proj_call(const vkh2o_mla_layer* L, vkh2o_mla_mm_site site, uint32_t S, vkh2o_binding hidden,
                         vkh2o_buffer* hidden_buf)
{
    const vkh2o_mla_state* st = &L->st;
    const uint32_t H = st->heads, nope = st->nope, rope = st->rope, dv = st->v_dim, qk = nope + rope, lq = st->q_lora,
                   lkv = st->kv_lora, D = st->hidden;
    mm_call c = { .w = site_weight(L, site), .x = hidden, .x_buf = hidden_buf };
    switch (site) {
    case VKH2O_MM_Q_A:
        c.y = rows(L->qa, (uint64_t)S * lq);
        c.a = (vkh2o_matmul_args){ .M = S, .N = lq, .K = D };
        break;
    case VKH2O_MM_KV_A:
        c.y = rows(L->ckv_full, (uint64_t)S * (lkv + rope));
        c.a = (vkh2o_matmul_args){ .M = S, .N = lkv + rope, .K = D };
        break;
    case VKH2O_MM_Q_B:
        /* q_b_proj of the normed q_a, or q_proj of hidden without a q LoRA */
        c.y = rows(st->q, (uint64_t)S * H * qk);
        c.a = (vkh2o_matmul_args){ .M = S, .N = H * qk, .K = lq ? lq : D };
        if (lq) {
            c.x = rows(L->qa_n, (uint64_t)S * lq);
            c.x_buf = L->qa_n;
        }
        break;
    case VKH2O_MM_KV_B_K:
    case VKH2O_MM_KV_B_V: {
        /* kv_b_proj rows are [k_nope | v] per head: K's nope part and V are two head-batched matmuls */
        const bool v = site == VKH2O_MM_KV_B_V;
        c.x = rows(st->ckv, (uint64_t)S * lkv);
        c.x_buf = st->ckv;
        c.y = v ? rows(st->v, (uint64_t)S * H * dv) : rows(st->k, (uint64_t)S * H * qk);
        c.a = (vkh2o_matmul_args){ .M = S, .N = v ? dv : nope, .K = lkv, .batch = H, .y_stride = H * (v ? dv : qk),
                                   .y_batch_stride = v ? dv : qk, .w_batch_stride = (nope + dv) * lkv,
                                   .w_row_offset = v ? nope : 0 };
        break;
    }
    default:   /* VKH2O_MM_O_PROJ */
        c.x = rows(st->o, (uint64_t)S * H * dv);
        c.x_buf = st->o;
        c.y = rows(L->dec_out, (uint64_t)S * D);
        c.a = (vkh2o_matmul_args){ .M = S, .N = D, .K = H * dv };
        break;
    }
    return c;
}

/* Records the call through the site's plan, or with cb VK_NULL_HANDLE makes its kernel. */
static vkh2o_result mm_record(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_mla_mm_site site, mm_call c)
{
    c.a.x_buffer = c.x_buf;
    c.a.plan = &L->mm[site];
    if (cb == VK_NULL_HANDLE)
        return vkh2o_matmul_resolve(L->ctx, &L->w[c.w], c.x, c.y, &c.a);
    return vkh2o_cmd_matmul(L->ctx, cb, &L->w[c.w], c.x, c.y, &c.a);
}

/* The decode step's matmuls through kv_b_proj over n tokens, on the automatic matmul path
 * (their plans are made so: matmul_plans): the query absorption (VKH2O_MM_ABSORB: the state's
 * roped q into the scratch's q_abs [n, H, kvl + rope], q_nope[h] . W_uk[h]) or W_uv
 * (VKH2O_MM_W_UV: the scratch's latent outputs o_lat [n, H, kvl] into the state's o [n, H, v],
 * o_lat[h] . W_uv[h]^T). Recorded, or with cb VK_NULL_HANDLE its kernel made (the variant's slot
 * of the site's plan read). */
static vkh2o_result decode_mm(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_mla_mm_site site, uint32_t n)
{
    const vkh2o_mla_state* st = &L->st;
    const uint32_t H = st->heads, nope = st->nope, rope = st->rope, dv = st->v_dim, kvl = st->kv_lora, qk = nope + rope;
    const bool absorb = site == VKH2O_MM_ABSORB;
    vkh2o_matmul_args a;
    if (absorb)
        a = (vkh2o_matmul_args){ .M = n, .N = kvl, .K = nope, .batch = H, .x_stride = H * qk, .x_batch_stride = qk,
                                 .y_stride = H * (kvl + rope), .y_batch_stride = kvl + rope,
                                 .w_batch_stride = (nope + dv) * kvl, .w_transposed = true };
    else
        a = (vkh2o_matmul_args){ .M = n, .N = dv, .K = kvl, .batch = H, .x_stride = H * kvl, .x_batch_stride = kvl,
                                 .y_stride = H * dv, .y_batch_stride = dv, .w_batch_stride = (nope + dv) * kvl,
                                 .w_row_offset = nope, .x_buffer = L->dec_o };
    a.plan = &L->mm[site];
    const vkh2o_binding x = vkh2o_bind(absorb ? st->q : L->dec_o), y = vkh2o_bind(absorb ? L->dec_q : st->o);
    if (cb == VK_NULL_HANDLE)
        return vkh2o_matmul_resolve(L->ctx, &L->w[VKH2O_W_KV_B_PROJ], x, y, &a);
    return vkh2o_cmd_matmul(L->ctx, cb, &L->w[VKH2O_W_KV_B_PROJ], x, y, &a);
}

vkh2o_result vkh2o_cmd_mla_decode_mm(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_mla_mm_site site, uint32_t n)
{
    return decode_mm(L, cb, site, n);
}

/* The matmul plans on the layer's path (the projections; the decode step's kv_b_proj matmuls on
 * the automatic one) with their one-token kernels made (create; set_matmul_path). */
static vkh2o_result matmul_plans(vkh2o_mla_layer* L)
{
    const vkh2o_mla_state* st = &L->st;
    for (int s = 0; s < VKH2O_MM_COUNT; s++) {
        if (s == VKH2O_MM_Q_A && !st->q_lora)
            continue;
        const bool decode_site = s == VKH2O_MM_ABSORB || s == VKH2O_MM_W_UV;
        VKH2O_CHECK(vkh2o_matmul_plan_make(L->ctx, &L->w[site_weight(L, (vkh2o_mla_mm_site)s)], s == VKH2O_MM_ABSORB,
                                           decode_site ? VKH2O_MATMUL_PATH_AUTO : L->matmul_path, &L->mm[s]));
    }
    for (int s = VKH2O_MM_Q_A; s <= VKH2O_MM_O_PROJ; s++)
        if (s != VKH2O_MM_Q_A || st->q_lora)
            VKH2O_CHECK(mm_record(L, VK_NULL_HANDLE, (vkh2o_mla_mm_site)s,
                                  proj_call(L, (vkh2o_mla_mm_site)s, 1, rows(L->dec_hidden, st->hidden), L->dec_hidden)));
    VKH2O_CHECK(decode_mm(L, VK_NULL_HANDLE, VKH2O_MM_ABSORB, 1));
    return decode_mm(L, VK_NULL_HANDLE, VKH2O_MM_W_UV, 1);
}

/* Every kernel plan of the layer (create). The one-token decode step's kernels are made now (its
 * matmuls, the norms and RoPE with positions given or from the cache); the forward's attention
 * and the observation window's, and the matmuls of longer inputs, at their first recording. */
static vkh2o_result layer_plan(vkh2o_mla_layer* L)
{
    vkh2o_context* ctx = L->ctx;
    const vkh2o_mla_state* st = &L->st;
    vkh2o_kernel* k;
    VKH2O_CHECK(matmul_plans(L));
    if (st->q_lora) {
        VKH2O_CHECK(vkh2o_rmsnorm_plan_make(ctx, 0, false, &L->norm_q));
        VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &L->norm_q.k[0], &k));
    }
    VKH2O_CHECK(vkh2o_rmsnorm_plan_make(ctx, st->rope, st->interleave, &L->norm_kv));
    VKH2O_CHECK(vkh2o_rope_plan_make(ctx, st->rope, st->interleave, &L->rope));
    for (int dev_pos = 0; dev_pos < 2; dev_pos++) {
        VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &L->norm_kv.k[dev_pos], &k));
        VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &L->rope.k[dev_pos], &k));
    }
    VKH2O_CHECK(vkh2o_attn_plan_make(ctx, &st->tuning, st->nope + st->rope, st->v_dim, &L->attn));
    for (uint32_t phase = 0; L->max_obs && phase < 3; phase++)
        for (uint32_t pool = 0; pool < 3; pool++) {
            const uint32_t spec[3] = { 64, phase, pool };   /* shaders/mla/obs_window.comp: workgroup, phase, pooling */
            VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &L->obs[phase][pool], "obs_window", 5, 0, spec, 3));
        }
    return VKH2O_OK;
}

void vkh2o_mla_layer_set_matmul_path(vkh2o_mla_layer* L, uint32_t path)
{
    if (!L || L->matmul_path == path)
        return;
    L->matmul_path = path;
    /* the plans again for this path (a failure here is the first recording's to report) */
    memset(L->mm, 0, sizeof L->mm);
    (void)matmul_plans(L);
}

void vkh2o_mla_layer_set_attn_texel(vkh2o_mla_layer* L, bool texel)
{
    if (L) L->st.tuning.texel = texel ? 1u : 0u;
}

/* pos_buf: positions pos_buf[pos_word] + pos0 + s read on the device (NULL: pos0 + s) */
static vkh2o_result project(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_binding hidden, vkh2o_buffer* hidden_buf,
                            uint32_t S, uint32_t pos0, const vkh2o_buffer* pos_buf, uint32_t pos_word)
{
    VKH2O_CHECK(check_seq(L, S, pos0));
    vkh2o_context* ctx = L->ctx;
    const vkh2o_mla_state* st = &L->st;
    const uint32_t H = st->heads, nope = st->nope, rope = st->rope, qk = nope + rope, lq = st->q_lora, lkv = st->kv_lora,
                   D = st->hidden;
    if (!binding_holds(hidden, (uint64_t)S * D))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla forward: hidden holds less than %u x %u floats", S, D);
    vkh2o_binding q = rows(st->q, (uint64_t)S * H * qk), k = rows(st->k, (uint64_t)S * H * qk), ckv_full = rows(L->ckv_full, (uint64_t)S * (lkv + rope)),
                  ckv = rows(st->ckv, (uint64_t)S * lkv), kpe = rows(st->kpe, (uint64_t)S * rope),
                  tab = vkh2o_bind(st->rope_table);

    /* stage 1: the two down projections of hidden */
    if (lq)
        VKH2O_CHECK(mm_record(L, cb, VKH2O_MM_Q_A, proj_call(L, VKH2O_MM_Q_A, S, hidden, hidden_buf)));
    VKH2O_CHECK(mm_record(L, cb, VKH2O_MM_KV_A, proj_call(L, VKH2O_MM_KV_A, S, hidden, hidden_buf)));
    vkh2o_barrier(ctx, cb);

    /* stage 2: norms; kv's also ropes k_pe and broadcasts it into the rope part of every head of K */
    if (lq) {
        vkh2o_rmsnorm_args na = { .rows = S, .n = lq, .x_stride = lq, .y_stride = lq, .eps = 1e-6f, .plan = &L->norm_q };
        vkh2o_binding qa_n = rows(L->qa_n, (uint64_t)S * lq);
        VKH2O_CHECK(vkh2o_cmd_rmsnorm(ctx, cb, &na, rows(L->qa, (uint64_t)S * lq), vkh2o_weight_binding(&L->w[VKH2O_W_Q_A_LAYERNORM], 0),
                                      tab, qa_n, qa_n, qa_n));
    }
    vkh2o_rmsnorm_args ka = { .rows = S, .n = lkv, .x_stride = lkv + rope, .y_stride = lkv, .eps = 1e-6f, .rope = rope,
                              .interleave = st->interleave, .pos0 = pos0, .pe_stride = rope, .bc_heads = H,
                              .bc_tok_stride = H * qk, .bc_head_stride = qk, .bc_offset = nope,
                              .pos_buf = pos_buf, .pos_word = pos_word, .plan = &L->norm_kv };
    VKH2O_CHECK(vkh2o_cmd_rmsnorm(ctx, cb, &ka, ckv_full, vkh2o_weight_binding(&L->w[VKH2O_W_KV_A_LAYERNORM], 0), tab,
                                  ckv, kpe, k));
    vkh2o_barrier(ctx, cb);

    /* stage 3: up projections straight into the [S, H, .] layouts */
    VKH2O_CHECK(mm_record(L, cb, VKH2O_MM_Q_B, proj_call(L, VKH2O_MM_Q_B, S, hidden, hidden_buf)));
    VKH2O_CHECK(mm_record(L, cb, VKH2O_MM_KV_B_K, proj_call(L, VKH2O_MM_KV_B_K, S, hidden, hidden_buf)));
    VKH2O_CHECK(mm_record(L, cb, VKH2O_MM_KV_B_V, proj_call(L, VKH2O_MM_KV_B_V, S, hidden, hidden_buf)));
    vkh2o_barrier(ctx, cb);

    /* stage 4: RoPE of q_pe in place */
    vkh2o_rope_args ra = { .tokens = S, .heads = H, .tok_stride = H * qk, .head_stride = qk, .offset = nope,
                           .pos0 = pos0, .rope = rope, .interleave = st->interleave, .pos_buf = pos_buf,
                           .pos_word = pos_word, .plan = &L->rope };
    VKH2O_CHECK(vkh2o_cmd_rope(ctx, cb, &ra, tab, q));
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_mla_project(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_binding hidden, uint32_t S, uint32_t pos0)
{
    if (!L || !cb)
        return vkh2o_fail(L ? L->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_mla_project: NULL argument");
    return project(L, cb, hidden, own_buffer(L, hidden), S, pos0, NULL, 0);
}

vkh2o_result vkh2o_cmd_mla_project_dev(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_binding hidden, uint32_t S,
                                       const vkh2o_buffer* pos_buf, uint32_t pos_word)
{
    if (!L || !cb || !pos_buf)
        return vkh2o_fail(L ? L->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_mla_project_dev: NULL argument");
    return project(L, cb, hidden, own_buffer(L, hidden), S, 0, pos_buf, pos_word);
}

vkh2o_result vkh2o_cmd_mla_o_proj(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_binding o, vkh2o_binding out, uint32_t S)
{
    if (!L || !cb || S == 0)
        return vkh2o_fail(L ? L->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_mla_o_proj: bad argument");
    mm_call c = proj_call(L, VKH2O_MM_O_PROJ, S, o, NULL);
    c.x = o;
    c.x_buf = own_buffer(L, o);
    c.y = out;
    return mm_record(L, cb, VKH2O_MM_O_PROJ, c);
}

/* ts: 5 timestamp slots (start, after projections, after attention, after mass, end) or NULL */
static vkh2o_result record_forward(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_mla_io* io, uint32_t* ts)
{
    vkh2o_context* ctx = L->ctx;
    if (!io || !io->hidden || !io->out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla forward: hidden and out buffers are required");
    const uint32_t S = io->seq_len;
    VKH2O_CHECK(check_seq(L, S, io->pos0));
    const vkh2o_mla_state* st = &L->st;
    const uint32_t H = st->heads, qk = st->nope + st->rope, dv = st->v_dim, D = st->hidden;
    const uint64_t act = (uint64_t)S * D * sizeof(float);
    if ((io->hidden_offset | io->out_offset | io->scores_offset) % 256u)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla forward: buffer offsets %llu/%llu/%llu are not multiples of 256 bytes (the largest storage "
                          "binding alignment Vulkan allows a device to require)", (unsigned long long)io->hidden_offset,
                          (unsigned long long)io->out_offset, (unsigned long long)io->scores_offset);
    if (
        io->hidden_offset > vkh2o_buffer_get_size(io->hidden) || vkh2o_buffer_get_size(io->hidden) - io->hidden_offset < act ||
        io->out_offset > vkh2o_buffer_get_size(io->out) || vkh2o_buffer_get_size(io->out) - io->out_offset < act)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla forward: hidden/out buffers hold less than %u x %u floats from their offsets", S, D);
    if (io->scores && (io->scores_offset > vkh2o_buffer_get_size(io->scores) ||
                       vkh2o_buffer_get_size(io->scores) - io->scores_offset < (uint64_t)S * sizeof(float)))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla forward: scores buffer holds less than %u floats from its offset", S);
    uint64_t pbytes = (uint64_t)H * S * S * sizeof(float);
    if (io->probs && !(L->flags & VKH2O_MLA_WRITE_PROBS))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla forward: probs needs a layer created with VKH2O_MLA_WRITE_PROBS");
    if (io->probs && (vkh2o_buffer_get_size(io->probs) < pbytes || pbytes > vkh2o_context_get_caps(ctx)->max_storage_buffer_range))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla forward: probs needs %llu bytes in one binding (buffer %llu, device limit %llu)",
                          (unsigned long long)pbytes, (unsigned long long)vkh2o_buffer_get_size(io->probs),
                          (unsigned long long)vkh2o_context_get_caps(ctx)->max_storage_buffer_range);

    if (ts)
        ts[0] = vkh2o_timestamp(ctx, cb);
    VKH2O_CHECK(project(L, cb, vkh2o_bind_range(io->hidden, io->hidden_offset, act), io->hidden_offset ? NULL : io->hidden,
                        S, io->pos0, NULL, 0));
    if (ts)
        ts[1] = vkh2o_timestamp(ctx, cb);

    vkh2o_attn_args a = { .S = S, .T = S, .H = H, .D = qk, .DV = dv, .causal_off = 0, .scale = st->scale,
                          .q_ts = H * qk, .q_hs = qk, .k_ts = H * qk, .k_hs = qk, .v_ts = H * dv, .v_hs = dv,
                          .o_ts = H * dv, .o_hs = dv, .accumulate_scores = io->accumulate_scores };
    vkh2o_attn_bufs b = { .q = rows(st->q, (uint64_t)S * H * qk), .k = rows(st->k, (uint64_t)S * H * qk),
                          .v = rows(st->v, (uint64_t)S * H * dv), .o = rows(st->o, (uint64_t)S * H * dv),
                          .lse = rows(L->lse, (uint64_t)H * S),
                          .part = vkh2o_bind(L->part),   /* sized for max_seq_len at create */
                          .q_buffer = st->q, .k_buffer = st->k, .v_buffer = st->v, .plan = &L->attn };
    if (io->scores)
        b.scores = vkh2o_bind_range(io->scores, io->scores_offset, (uint64_t)S * sizeof(float));
    if (io->probs)
        b.probs = vkh2o_bind_range(io->probs, 0, pbytes);
    VKH2O_CHECK(vkh2o_cmd_attention(ctx, cb, &st->tuning, &a, &b));
    vkh2o_barrier(ctx, cb);
    if (ts)
        ts[2] = vkh2o_timestamp(ctx, cb);
    if (io->scores)
        VKH2O_CHECK(vkh2o_cmd_attention_mass(ctx, cb, &st->tuning, &a, &b));
    if (ts)
        ts[3] = vkh2o_timestamp(ctx, cb);
    VKH2O_CHECK(vkh2o_cmd_mla_o_proj(L, cb, b.o, vkh2o_bind_range(io->out, io->out_offset, act), S));
    vkh2o_barrier(ctx, cb);
    if (ts)
        ts[4] = vkh2o_timestamp(ctx, cb);
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_mla_forward(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_mla_io* io)
{
    if (!L || !cb)
        return vkh2o_fail(L ? L->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_mla_forward: NULL argument");
    return record_forward(L, cb, io, NULL);
}

static vkh2o_result ensure_io(vkh2o_mla_layer* L, uint32_t S)
{
    if (L->io_rows >= S)
        return VKH2O_OK;
    vkh2o_buffer_destroy(L->io_hidden);
    vkh2o_buffer_destroy(L->io_out);
    vkh2o_buffer_destroy(L->io_scores);
    L->io_hidden = L->io_out = L->io_scores = NULL;
    L->io_rows = 0;
    VKH2O_CHECK(alloc_f32(L->ctx, (uint64_t)S * L->st.hidden, &L->io_hidden));
    VKH2O_CHECK(alloc_f32(L->ctx, (uint64_t)S * L->st.hidden, &L->io_out));
    VKH2O_CHECK(alloc_f32(L->ctx, S, &L->io_scores));
    L->io_rows = S;
    return VKH2O_OK;
}

vkh2o_result vkh2o_mla_layer_host_io(vkh2o_mla_layer* L, uint32_t S, vkh2o_buffer** hidden, vkh2o_buffer** out)
{
    VKH2O_CHECK(ensure_io(L, S));
    *hidden = L->io_hidden;
    *out = L->io_out;
    return VKH2O_OK;
}

vkh2o_result vkh2o_host_mla_forward(vkh2o_mla_layer* L, const float* hidden, uint32_t S, uint32_t pos0, float* out,
                                   float* scores, vkh2o_mla_timings* t)
{
    if (!L || !hidden || !out)
        return vkh2o_fail(L ? L->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_host_mla_forward: NULL argument");
    VKH2O_CHECK(check_seq(L, S, pos0));
    vkh2o_context* ctx = L->ctx;
    VKH2O_CHECK(ensure_io(L, S));
    const uint64_t act = (uint64_t)S * L->st.hidden * sizeof(float);
    VKH2O_CHECK(vkh2o_buffer_upload(L->io_hidden, 0, hidden, act));
    vkh2o_mla_io io = { .hidden = L->io_hidden, .out = L->io_out, .scores = scores ? L->io_scores : NULL,
                        .seq_len = S, .pos0 = pos0 };
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(ctx, &cb));
    uint32_t ts[5];
    vkh2o_result r = record_forward(L, cb, &io, ts);
    if (r != VKH2O_OK) {
        /* end the one-shot buffer cleanly; the recorded part is harmless */
        vkh2o_submit_wait(ctx, cb);
        return r;
    }
    VKH2O_CHECK(vkh2o_submit_wait(ctx, cb));
    if (t) {
        t->project_ms = vkh2o_timestamp_ms(ctx, ts[0], ts[1]);
        t->attention_ms = vkh2o_timestamp_ms(ctx, ts[1], ts[2]);
        t->mass_ms = vkh2o_timestamp_ms(ctx, ts[2], ts[3]);
        t->o_proj_ms = vkh2o_timestamp_ms(ctx, ts[3], ts[4]);
        t->total_ms = vkh2o_timestamp_ms(ctx, ts[0], ts[4]);
    }
    VKH2O_CHECK(vkh2o_buffer_download(L->io_out, 0, out, act));
    if (scores)
        VKH2O_CHECK(vkh2o_buffer_download(L->io_scores, 0, scores, (uint64_t)S * sizeof(float)));
    return VKH2O_OK;
}
