/* Exact top-k selection on the device: a three-pass radix select on order-preserving u32 keys
 * (shaders/h2o/topk.comp). See cache_internal.h for the contract. */
#include "cache_internal.h"

enum { TOPK_SPEC_WG = 0, TOPK_SPEC_PER, TOPK_SPEC_PHASE, TOPK_SPEC_POLICY, TOPK_SPEC_MODE, TOPK_SPEC_COUNT };

#define TOPK_HEADER_WORDS 6160u   /* 3 histograms of 2048 bins + resolved state (topk.comp) */

struct topk_push {
    uint32_t n, begin, end, k;
    uint32_t score_off, out_off, pos_base, cur, seed, layer;
};
_Static_assert(sizeof(struct topk_push) <= VKH2O_PUSH_MAX, "topk push constants");

static void topk_shape(const vkh2o_context* ctx, uint32_t* wg, uint32_t* per)
{
    /* CPU devices run a workgroup as one thread with SIMD lanes: few invocations, several
     * elements each; GPUs want wide workgroups. */
    bool cpu = ctx && vkh2o_cpu_shapes(ctx);
    *wg = cpu ? 64u : 256u;
    *per = cpu ? 256u : 8u;   /* CPU: few workgroups, so few 2048-bin histogram flushes */
}

static uint32_t topk_chunks(const vkh2o_context* ctx, uint32_t candidates)
{
    uint32_t wg, per;
    topk_shape(ctx, &wg, &per);
    uint32_t n = vkh2o_div_up(candidates, wg * per);
    return n ? n : 1u;
}

uint64_t vkh2o_topk_work_bytes(uint32_t candidates)
{
    /* sized for the smallest chunk of any device shape (64 x 8), so a size computed without a
     * context is always enough */
    uint32_t chunks = vkh2o_div_up(candidates ? candidates : 1u, 64u * 8u);
    return 4ull * (TOPK_HEADER_WORDS + 2ull * chunks);
}

uint32_t vkh2o_topk_count(const vkh2o_topk_args* a)
{
    uint32_t m = a->end - a->begin;
    return a->begin + (a->k < m ? a->k : m) + (a->n - a->end);
}

vkh2o_result vkh2o_cmd_topk(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_topk_args* a)
{
    if (!ctx || !cb || !a)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_topk: NULL argument");
    if (a->begin > a->end || a->end > a->n)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_topk: range [%u, %u) is not inside [0, %u)",
                          a->begin, a->end, a->n);
    if (a->policy > VKH2O_POLICY_RANDOM || a->score_mode > VKH2O_SCORE_TOVA)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_topk: unknown policy %u / score mode %u",
                          a->policy, a->score_mode);
    uint32_t m = a->end - a->begin;
    uint64_t count = vkh2o_topk_count(a);
    if (a->n && (uint64_t)a->score_off * 4 + (uint64_t)a->n * 4 > a->scores.range)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_topk: %u scores from %u do not fit the %llu-byte binding",
                          a->n, a->score_off, (unsigned long long)a->scores.range);
    if (count && ((uint64_t)a->out_off + count) * 4 > a->out.range)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_topk: %llu kept indices from %u do not fit the %llu-byte output",
                          (unsigned long long)count, a->out_off, (unsigned long long)a->out.range);
    uint32_t chunks = topk_chunks(ctx, m);
    if (4ull * (TOPK_HEADER_WORDS + 2ull * chunks) > a->work.range)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_topk: workspace of %llu bytes < %llu needed",
                          (unsigned long long)a->work.range, (unsigned long long)vkh2o_topk_work_bytes(m));
    if (a->n == 0)
        return VKH2O_OK;

    uint32_t wg, per;
    topk_shape(ctx, &wg, &per);
    /* texel path: an R32_UINT view from the 256-byte boundary below the first score */
    vkh2o_binding tex = { 0 };
    uint32_t score_off = a->score_off;
    if (a->scores_buffer) {
        if (a->scores_buffer->buffer != a->scores.buffer)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_topk: scores_buffer is not the buffer of scores");
        uint64_t first = a->scores.offset + (uint64_t)a->score_off * 4;
        uint64_t view_off = first & ~255ull;
        VKH2O_CHECK(vkh2o_bind_texel(a->scores_buffer, VK_FORMAT_R32_UINT, view_off, first - view_off + (uint64_t)a->n * 4, &tex));
        score_off = (uint32_t)((first - view_off) / 4);
    }
    struct topk_push pc = {
        .n = a->n, .begin = a->begin, .end = a->end, .k = a->k,
        .score_off = score_off, .out_off = a->out_off, .pos_base = a->pos_base,
        .cur = a->cur, .seed = a->seed, .layer = a->layer,
    };
    vkh2o_binding b[3] = { a->scores_buffer ? tex : a->scores, a->work, a->out };
    ctx->vk.vkCmdFillBuffer(cb, a->work.buffer, a->work.offset, 4ull * TOPK_HEADER_WORDS, 0u);
    vkh2o_barrier(ctx, cb);
    /* histogram p, resolve p (p = 0, 1, 2), count, scatter */
    static const uint32_t order[8] = { 0, 3, 1, 4, 2, 5, 6, 7 };
    for (uint32_t i = 0; i < 8; i++) {
        uint32_t phase = order[i];
        uint32_t spec[TOPK_SPEC_COUNT] = { wg, per, phase, a->policy, a->score_mode };
        vkh2o_kernel* k;
        if (a->scores_buffer)
            VKH2O_CHECK(vkh2o_kernel_get_texel(ctx, "topk_tex", 3, 1u, spec, TOPK_SPEC_COUNT, &k));
        else
            VKH2O_CHECK(vkh2o_kernel_get(ctx, "topk", 3, spec, TOPK_SPEC_COUNT, &k));
        uint32_t groups = (phase >= 3 && phase <= 5) ? 1u : chunks;
        VKH2O_CHECK(vkh2o_dispatch(ctx, cb, k, b, 3, &pc, sizeof pc, groups, 1, 1));
        if (i + 1 < 8)
            vkh2o_barrier(ctx, cb);
    }
    return VKH2O_OK;
}
