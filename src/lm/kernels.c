/* Recorders of the whole-model kernels (shaders/lm/ embed, swiglu, logprob; shaders/core/axpby)
 * and their plan (vkh2o_lm_kernels). */
#include "lm_internal.h"

#include <string.h>

struct embed_push {
    uint32_t n_tokens, cols, row_stride, row_first, row_count, out_stride;
};
struct swiglu_push {
    uint32_t rows, cols, g_stride, u_stride, y_stride;
};
struct logprob_push {
    uint32_t rows, vocab, x_stride, full_stride;
};
struct axpby_push {
    uint32_t n;
    float a, b;
};
_Static_assert(sizeof(struct embed_push) <= VKH2O_PUSH_MAX, "embed push constants");
_Static_assert(sizeof(struct swiglu_push) <= VKH2O_PUSH_MAX, "swiglu push constants");
_Static_assert(sizeof(struct logprob_push) <= VKH2O_PUSH_MAX, "logprob push constants");
_Static_assert(sizeof(struct axpby_push) <= VKH2O_PUSH_MAX, "axpby push constants");

enum { EMBED_SPEC_WG = 0, EMBED_SPEC_DT, EMBED_SPEC_COUNT };
enum { LOGPROB_SPEC_WG = 0, LOGPROB_SPEC_TGT, LOGPROB_SPEC_FULL, LOGPROB_SPEC_COUNT };

/* Columns per workgroup along x (the device profile's) */
static uint32_t elem_wg(const vkh2o_context* ctx) { return ctx->profile.elementwise_workgroup; }

/* workgroups along a row of cols (the plan's shape) */
static uint32_t groups_x(const vkh2o_lm_kernels* k, uint32_t cols)
{
    /* a CPU device runs best with one workgroup covering a row in a few iterations */
    uint32_t g = vkh2o_div_up(cols, k->elem_wg);
    return g < k->elem_groups_max ? g : k->elem_groups_max;
}

static const char k_embed[] = "embed", k_swiglu[] = "swiglu", k_logprob[] = "logprob", k_axpby[] = "axpby";

static uint32_t embed_dt(vkh2o_dtype dt)
{
    return dt == VKH2O_DTYPE_F32 ? 1u : dt == VKH2O_DTYPE_F16 ? 2u : dt == VKH2O_DTYPE_BF16 ? 3u : 0u;
}

vkh2o_result vkh2o_lm_kernels_plan(vkh2o_context* ctx, vkh2o_dtype table_dtype, vkh2o_lm_kernels* k)
{
    memset(k, 0, sizeof *k);
    k->embed_dtype = table_dtype;
    k->elem_wg = elem_wg(ctx);
    k->elem_groups_max = ctx->profile.elementwise_groups_max;
    k->axpby_per_group = elem_wg(ctx) * ctx->profile.axpby_per_invocation;
    const uint32_t dt = embed_dt(table_dtype);
    if (!dt)
        return vkh2o_fail(ctx, VKH2O_ERROR_DTYPE, "embed: table dtype %s is not F32/F16/BF16", vkh2o_dtype_name(table_dtype));
    const uint32_t es[EMBED_SPEC_COUNT] = { [EMBED_SPEC_WG] = elem_wg(ctx), [EMBED_SPEC_DT] = dt };
    VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &k->embed, k_embed, 3, 0, es, EMBED_SPEC_COUNT));
    const uint32_t wg[1] = { elem_wg(ctx) };
    VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &k->swiglu, k_swiglu, 3, 0, wg, 1));
    VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &k->axpby, k_axpby, 2, 0, wg, 1));
    for (uint32_t tgt = 0; tgt < 2; tgt++)
        for (uint32_t full = 0; full < 2; full++) {
            const uint32_t ls[LOGPROB_SPEC_COUNT] = { [LOGPROB_SPEC_WG] = ctx->profile.logprob_workgroup,
                                                      [LOGPROB_SPEC_TGT] = tgt, [LOGPROB_SPEC_FULL] = full };
            if (tgt || full)
                VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &k->logprob[tgt][full], k_logprob, 4, 0, ls, LOGPROB_SPEC_COUNT));
        }
    return vkh2o_rmsnorm_plan_make(ctx, 0, false, &k->norm);
}

/* k, or for a call no model owns (tests) *once planned for it alone (its kernel found by name
 * when read) */
static vkh2o_result kernels_of(vkh2o_context* ctx, vkh2o_dtype dt, vkh2o_lm_kernels* k, vkh2o_lm_kernels* once,
                               vkh2o_lm_kernels** out)
{
    *out = k;
    if (k)
        return VKH2O_OK;
    *out = once;
    return vkh2o_lm_kernels_plan(ctx, dt, once);
}

vkh2o_result vkh2o_cmd_embed(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_dev_weight* table,
                             vkh2o_binding ids, uint32_t n, vkh2o_binding out, uint32_t out_stride, vkh2o_lm_kernels* kp)
{
    if (!table || !table->nchunks || n == 0 || out_stride < table->cols)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "embed: bad arguments (tokens %u, out stride %u, cols %u)", n,
                          out_stride, table ? table->cols : 0);
    if (n > ctx->caps.max_workgroup_count[1])
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "embed: %u tokens exceed the device's %u workgroups along y", n,
                          ctx->caps.max_workgroup_count[1]);
    uint32_t dt = embed_dt(table->dtype);
    if (!dt)
        return vkh2o_fail(ctx, VKH2O_ERROR_DTYPE, "embed: table dtype %s is not F32/F16/BF16", vkh2o_dtype_name(table->dtype));
    vkh2o_lm_kernels once, *ks;
    VKH2O_CHECK(kernels_of(ctx, table->dtype, kp, &once, &ks));
    if (ks->embed_dtype != table->dtype)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "internal: the embed kernel planned for %s records a %s table",
                          vkh2o_dtype_name(ks->embed_dtype), vkh2o_dtype_name(table->dtype));
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &ks->embed, &k));
    for (uint32_t c = 0; c < table->nchunks; c++) {
        uint32_t first = c * table->rows_per_chunk;
        uint32_t count = table->rows - first < table->rows_per_chunk ? table->rows - first : table->rows_per_chunk;
        struct embed_push pc = { n, table->cols, table->row_stride, first, count, out_stride };
        vkh2o_binding b[3] = { ids, vkh2o_weight_binding(table, c), out };
        VKH2O_CHECK(vkh2o_dispatch(ctx, cb, k, b, 3, &pc, sizeof pc, groups_x(ks, table->cols), n, 1));
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_swiglu(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_swiglu_args* a,
                              vkh2o_binding g, vkh2o_binding u, vkh2o_binding y, vkh2o_lm_kernels* kp)
{
    if (!a || a->rows == 0 || a->cols == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "swiglu: empty shape");
    struct swiglu_push pc = { a->rows, a->cols, a->g_stride ? a->g_stride : a->cols, a->u_stride ? a->u_stride : a->cols,
                              a->y_stride ? a->y_stride : a->cols };
    if (pc.g_stride < a->cols || pc.u_stride < a->cols || pc.y_stride < a->cols)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "swiglu: a row stride is below %u columns", a->cols);
    if (a->rows > ctx->caps.max_workgroup_count[1])
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "swiglu: %u rows exceed the device's workgroup limit", a->rows);
    vkh2o_lm_kernels once, *ks;
    VKH2O_CHECK(kernels_of(ctx, VKH2O_DTYPE_F32, kp, &once, &ks));
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &ks->swiglu, &k));
    vkh2o_binding b[3] = { g, u, y };
    return vkh2o_dispatch(ctx, cb, k, b, 3, &pc, sizeof pc, groups_x(ks, a->cols), a->rows, 1);
}

vkh2o_result vkh2o_cmd_logprob(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_logprob_args* a,
                               vkh2o_binding x, vkh2o_binding tgt, vkh2o_binding lp, vkh2o_binding full, vkh2o_lm_kernels* kp)
{
    if (!a || a->rows == 0 || a->vocab == 0 || (!a->targets && !a->full))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "logprob: empty shape or nothing to write");
    struct logprob_push pc = { a->rows, a->vocab, a->x_stride ? a->x_stride : a->vocab,
                               a->full_stride ? a->full_stride : a->vocab };
    if (pc.x_stride < a->vocab || pc.full_stride < a->vocab)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "logprob: a row stride is below the vocabulary (%u)", a->vocab);
    if (a->rows > ctx->caps.max_workgroup_count[0])
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "logprob: %u rows exceed the device's workgroup limit", a->rows);
    vkh2o_lm_kernels once, *ks;
    VKH2O_CHECK(kernels_of(ctx, VKH2O_DTYPE_F32, kp, &once, &ks));
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &ks->logprob[a->targets ? 1 : 0][a->full ? 1 : 0], &k));
    vkh2o_binding b[4] = { x, tgt, lp, full };
    return vkh2o_dispatch(ctx, cb, k, b, 4, &pc, sizeof pc, a->rows, 1, 1);
}

vkh2o_result vkh2o_cmd_axpby(vkh2o_context* ctx, VkCommandBuffer cb, uint32_t n, float a, vkh2o_binding x,
                             float b, vkh2o_binding y, vkh2o_lm_kernels* kp)
{
    if (n == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "axpby: n is 0");
    vkh2o_lm_kernels once, *ks;
    VKH2O_CHECK(kernels_of(ctx, VKH2O_DTYPE_F32, kp, &once, &ks));
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &ks->axpby, &k));
    struct axpby_push pc = { n, a, b };
    vkh2o_binding bb[2] = { x, y };
    uint32_t groups = vkh2o_div_up(n, ks->axpby_per_group);
    if (groups > 65535u)
        groups = 65535u;
    return vkh2o_dispatch(ctx, cb, k, bb, 2, &pc, sizeof pc, groups, 1, 1);
}
