/* Stable gather of kept rows (shaders/h2o/compact.comp). See cache_internal.h for the contract. */
#include "cache_internal.h"

enum { COMPACT_SPEC_WG = 0, COMPACT_SPEC_MODE, COMPACT_SPEC_COUNT };

struct compact_push {
    uint32_t count, row_words, src_stride, dst_stride, src_off, dst_off, idx_off, base;
};
_Static_assert(sizeof(struct compact_push) <= VKH2O_PUSH_MAX, "compact push constants");

vkh2o_result vkh2o_cmd_compact(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_compact_args* a)
{
    if (!ctx || !cb || !a)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_compact: NULL argument");
    if (a->mode > VKH2O_COMPACT_POSITIONS)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_compact: unknown mode %u", (unsigned)a->mode);
    if (a->count == 0)
        return VKH2O_OK;
    uint32_t row_words = a->mode == VKH2O_COMPACT_POSITIONS ? 1u : a->row_words;
    if (row_words == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_compact: row_words is 0");
    if (((uint64_t)a->idx_off + a->count) * 4 > a->idx.range)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_compact: %u indices from %u do not fit the %llu-byte index binding",
                          a->count, a->idx_off, (unsigned long long)a->idx.range);
    uint64_t dst_end = (uint64_t)a->dst_off + (uint64_t)(a->count - 1) * a->dst_stride + row_words;
    if (dst_end * 4 > a->dst.range || (a->count > 1 && a->dst_stride < row_words))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_compact: %u rows of %u words (stride %u) from word %u do not fit the %llu-byte destination",
                          a->count, row_words, a->dst_stride, a->dst_off, (unsigned long long)a->dst.range);
    if (a->mode != VKH2O_COMPACT_POSITIONS) {
        uint32_t src_row = a->mode == VKH2O_COMPACT_F32_TO_F16 ? 2u * row_words : row_words;
        if (a->src_stride < src_row)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_compact: source stride %u < row of %u words",
                              a->src_stride, src_row);
        /* the source rows read are only known on the device (idx); the caller guarantees
         * idx < src rows. The binding is checked to hold at least one row. */
        if (((uint64_t)a->src_off + src_row) * 4 > a->src.range)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_compact: source binding of %llu bytes holds no row",
                              (unsigned long long)a->src.range);
    }
    bool cpu = vkh2o_cpu_shapes(ctx);
    uint32_t spec[COMPACT_SPEC_COUNT] = { cpu ? 64u : 128u, (uint32_t)a->mode };
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "compact", 3, spec, COMPACT_SPEC_COUNT, &k));
    struct compact_push pc = {
        .count = a->count, .row_words = row_words, .src_stride = a->src_stride, .dst_stride = a->dst_stride,
        .src_off = a->src_off, .dst_off = a->dst_off, .idx_off = a->idx_off, .base = a->base,
    };
    vkh2o_binding b[3] = { a->idx, a->mode == VKH2O_COMPACT_POSITIONS ? a->idx : a->src, a->dst };
    /* one workgroup per row up to a cap; large counts loop inside (rows x, x + groups, ...) */
    uint32_t per_wg = cpu ? 16u : 1u;
    uint32_t groups = vkh2o_div_up(a->count, per_wg);
    if (groups > 65535u)
        groups = 65535u;
    return vkh2o_dispatch(ctx, cb, k, b, 3, &pc, sizeof pc, groups, 1, 1);
}
