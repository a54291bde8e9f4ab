/* Quantised cache: block selection (all / score / quest / random), the mixed-precision split
 * decode attention with its deterministic combine, and the GPU error metrics. */
#include "kvquant_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QBOUND_WG 64u
#define COMBINE_WG 64u
#define METRICS_WG 64u

static uint64_t div_up64(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static vkh2o_binding bind_or_dummy(const vkh2o_qcache* qc, const vkh2o_buffer* b)
{
    return vkh2o_bind(b ? b : qc->dummy);
}

/* Most blocks a selection can return (sizes the split grid; the list holds the exact count). */
static uint32_t max_selected(const vkh2o_qcache* qc, const vkh2o_qattn_desc* a)
{
    uint32_t live = qc->blocks - qc->count[VKH2O_QPREC_EVICTED];
    if (a->selector == VKH2O_QSELECT_ALL)
        return live;
    uint32_t fixed = qc->blocks - kvq_routable(&qc->d, qc->blocks);
    uint64_t m = (uint64_t)fixed + a->budget_blocks;
    return m < live ? (uint32_t)m : live;
}

static vkh2o_result check_attn(vkh2o_qcache* qc, const vkh2o_buffer* q, const vkh2o_buffer* out, const vkh2o_qattn_desc* a)
{
    vkh2o_context* ctx = qc->ctx;
    if (!q || !a)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: missing query or desc");
    if ((unsigned)a->selector >= VKH2O_QSELECT_COUNT)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: unknown selector %d", (int)a->selector);
    if (a->selector == VKH2O_QSELECT_QUEST && !qc->minmax)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "qcache attend: the quest selector needs a cache created with VKH2O_QCACHE_QUEST_BOUNDS");
    if (vkh2o_buffer_get_size(q) < 4ull * qc->d.num_heads * qc->shape.d_k)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: query buffer smaller than [%u, %u] f32",
                          qc->d.num_heads, qc->shape.d_k);
    if (out && vkh2o_buffer_get_size(out) < 4ull * qc->d.num_heads * qc->shape.d_v)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: output buffer smaller than [%u, %u] f32",
                          qc->d.num_heads, qc->shape.d_v);
    VKH2O_CHECK(kvq_scratch(ctx, &qc->list, 4ull * (1 + qc->max_blocks)));
    VKH2O_CHECK(kvq_scratch(ctx, &qc->rank, 4ull * qc->max_blocks));
    if (qc->blocks > KVQ_MAX_BLOCKS && vkh2o_context_get_caps(ctx)->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "qcache attend: %u blocks exceed the %u a CPU device can rank within its loop budget "
                          "(use a larger block_size)", qc->blocks, KVQ_MAX_BLOCKS);
    if (a->selector == VKH2O_QSELECT_QUEST)   /* keys, then the per-head-group partial keys */
        VKH2O_CHECK(kvq_scratch(ctx, &qc->keys, 4ull * qc->max_blocks * (1 + vkh2o_div_up(qc->d.num_heads, 16))));
    return VKH2O_OK;
}

vkh2o_result kvq_record_select(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, const vkh2o_qattn_desc* a)
{
    vkh2o_context* ctx = qc->ctx;
    VKH2O_CHECK(check_attn(qc, q, NULL, a));
    uint32_t spec[KVQ_SPEC_LAYOUT_COUNT];
    if (a->selector == VKH2O_QSELECT_QUEST) {
        vkh2o_kernel* kq;
        kvq_layout_spec(qc, QBOUND_WG, spec);
        VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_qbound", 3, spec, KVQ_SPEC_LAYOUT_COUNT, &kq));
        /* heads per invocation: HGQ * ceil(DK / 8) loop iterations stay far below the budget */
        uint32_t hgq = 16, groups = vkh2o_div_up(qc->d.num_heads, hgq);
        struct kvq_qbound_push pc = { qc->blocks, qc->d.num_heads, hgq, 0 };
        vkh2o_binding b[3] = { vkh2o_bind(qc->minmax), vkh2o_bind(q), vkh2o_bind(qc->keys) };
        if (qc->blocks) {
            VKH2O_CHECK(vkh2o_dispatch(ctx, cb, kq, b, 3, &pc, sizeof pc, vkh2o_div_up(qc->blocks, QBOUND_WG), groups, 1));
            vkh2o_barrier(ctx, cb);
            pc.phase = 1;
            VKH2O_CHECK(vkh2o_dispatch(ctx, cb, kq, b, 3, &pc, sizeof pc, vkh2o_div_up(qc->blocks, QBOUND_WG), 1, 1));
        }
        vkh2o_barrier(ctx, cb);
    }
    vkh2o_kernel* ks;
    kvq_layout_spec(qc, KVQ_SELECT_WG, spec);
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_select", 4, spec, KVQ_SPEC_LAYOUT_COUNT, &ks));
    struct kvq_select_push pc = {
        qc->blocks, qc->d.sink_blocks, qc->d.recent_blocks, (uint32_t)a->selector, a->budget_blocks,
        (uint32_t)a->seed, (uint32_t)(a->seed >> 32), 0,
    };
    vkh2o_binding b[4] = { vkh2o_bind(qc->meta), bind_or_dummy(qc, a->selector == VKH2O_QSELECT_QUEST ? qc->keys : NULL),
                           vkh2o_bind(qc->rank), vkh2o_bind(qc->list) };
    if (qc->blocks) {
        VKH2O_CHECK(vkh2o_dispatch(ctx, cb, ks, b, 4, &pc, sizeof pc, vkh2o_div_up(qc->blocks, KVQ_SELECT_WG), 1, 1));
        vkh2o_barrier(ctx, cb);
    }
    pc.phase = 1;
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, ks, b, 4, &pc, sizeof pc, 1, 1, 1));
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

uint32_t kvq_wide_layout(const vkh2o_qcache* qc)
{
    const vkh2o_qshape* sh = &qc->shape;
    if (sh->d_k % 8 || sh->d_v % 8)
        return 0;
    const kvq_section* secs[2] = { &qc->sec_k, &qc->sec_v };
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < 3; p++)
            if (secs[i]->data_words[p] % 4 || secs[i]->words[p] % 4)
                return 0;
    bool per_token = qc->d.k_grouping == VKH2O_QGROUP_PER_TOKEN ||
                     (!sh->v_in_k && qc->d.v_grouping == VKH2O_QGROUP_PER_TOKEN);
    return per_token && qc->d.group_size % 8 ? 0 : 1;
}

static uint32_t largest_divisor(uint32_t b, uint32_t most)
{
    for (uint32_t p = most; p > 1; p /= 2)
        if (b % p == 0)
            return p;
    return 1;
}

/* Loop iterations per invocation (worst case) of each pass; see the shaders' budget notes. */
static void plan_iters(const vkh2o_qcache* qc, kvq_attn_plan* pl)
{
    uint32_t B = qc->d.block_size;
    pl->iters_score = pl->wide ? qc->shape.d_k / 8 : qc->shape.d_k;
    pl->iters_softmax = 2 * vkh2o_div_up(pl->bps * B, 4) + 2;
    pl->iters_pv = pl->bps * (1 + vkh2o_div_up(B, pl->pt_pv)) + 1;
    pl->iters_combine = 3 * pl->splits;
}

/* Texels a view of the whole buffer in format bytes fb would have (0 when absent). */
static uint64_t view_texels(const vkh2o_buffer* b, uint32_t fb) { return b ? vkh2o_buffer_get_size(b) / fb : 0; }

/* CPU tile shapes and read path (qc->tiles, else the device type). */
static bool cpu_tiles(const vkh2o_qcache* qc)
{
    if (qc->tiles != KVQ_TILES_AUTO)
        return qc->tiles == KVQ_TILES_CPU;
    return vkh2o_cpu_shapes(qc->ctx);
}

/* Resolves qc->read_path into pl->tex: texel views need the wide layout and every view (query,
 * scores, pools in their formats) within maxTexelBufferElements. */
static vkh2o_result plan_read_path(vkh2o_qcache* qc, kvq_attn_plan* pl)
{
    const vkh2o_device_caps* caps = vkh2o_context_get_caps(qc->ctx);
    uint64_t lim = caps->max_texel_buffer_elements;
    uint64_t q_texels = (uint64_t)qc->d.num_heads * qc->shape.d_k / 4;
    uint64_t p_texels = (uint64_t)qc->d.num_heads * pl->nps / 4;
    bool fits = pl->wide && q_texels <= lim && p_texels <= lim && view_texels(qc->pool[0], 16) <= lim &&
                view_texels(qc->pool[1], 16) <= lim && view_texels(qc->pool[2], 8) <= lim;
    switch (qc->read_path) {
    case KVQ_READ_STORAGE:
        pl->tex = 0;
        break;
    case KVQ_READ_TEXEL:
        if (!fits)
            return vkh2o_fail(qc->ctx, VKH2O_ERROR_UNSUPPORTED,
                              "qcache attend: texel reads need the 8-channel-aligned layout (%s) and every view within "
                              "the device's %u texels", pl->wide ? "present" : "absent", caps->max_texel_buffer_elements);
        pl->tex = 1;
        break;
    default:
        pl->tex = fits && cpu_tiles(qc);
        break;
    }
    return VKH2O_OK;
}

/* A texel view binding of kvq_score / kvq_pv: a view of the whole
 * buffer when reading texels, else a one-texel view of the dummy (bound, unread). */
static vkh2o_result bind_view(vkh2o_qcache* qc, bool tex, vkh2o_buffer* b, VkFormat f, uint32_t fb, vkh2o_binding* out)
{
    if (!tex || !b)
        return vkh2o_bind_texel(qc->dummy, f, 0, fb, out);
    return vkh2o_bind_texel(b, f, 0, vkh2o_buffer_get_size(b) / fb * fb, out);
}

/* Views 7..11 of kvq_score / kvq_pv: the first row_bytes (a multiple of 16) of row (query or P)
 * as vec4 texels, then the pools. */
static vkh2o_result bind_views(vkh2o_qcache* qc, bool tex, vkh2o_buffer* row, uint64_t row_bytes, vkh2o_binding* b)
{
    if (tex)
        VKH2O_CHECK(vkh2o_bind_texel(row, VK_FORMAT_R32G32B32A32_SFLOAT, 0, row_bytes, &b[7]));
    else
        VKH2O_CHECK(bind_view(qc, false, row, VK_FORMAT_R32G32B32A32_SFLOAT, 16, &b[7]));
    VKH2O_CHECK(bind_view(qc, tex, qc->pool[0], VK_FORMAT_R32G32B32A32_UINT, 16, &b[8]));
    VKH2O_CHECK(bind_view(qc, tex, qc->pool[1], VK_FORMAT_R32G32B32A32_UINT, 16, &b[9]));
    VKH2O_CHECK(bind_view(qc, tex, qc->pool[2], VK_FORMAT_R32G32B32A32_UINT, 16, &b[10]));
    return bind_view(qc, tex, qc->pool[2], VK_FORMAT_R32G32_UINT, 8, &b[11]);
}

vkh2o_result kvq_plan_attend(vkh2o_qcache* qc, const vkh2o_qattn_desc* a, kvq_attn_plan* pl)
{
    vkh2o_context* ctx = qc->ctx;
    const vkh2o_device_caps* caps = vkh2o_context_get_caps(ctx);
    bool cpu = cpu_tiles(qc);
    uint32_t H = qc->d.num_heads, kvh = qc->shape.kv_heads, qpk = H / kvh, B = qc->d.block_size;
    uint32_t dv = qc->shape.d_v;
    memset(pl, 0, sizeof *pl);
    /* CPU devices: big register tiles (every load is a per-lane loop there, so each loaded element
     * should feed many FMAs; 16 heads x 8 channels measured 8% faster than 8 x 16 at 64 heads);
     * GPUs: small tiles, many invocations. */
    pl->wide = kvq_wide_layout(qc);
    pl->tm = qpk < (cpu ? 16u : 4u) ? qpk : (cpu ? 16u : 4u);
    /* kvq_score with one head per invocation: a whole block of 16 tokens per invocation, so
     * each query and scale load feeds twice the tokens; kvq_pv steps 8 (CPU) or 4 tokens */
    pl->pt = largest_divisor(B, cpu ? (pl->tm == 1 ? 16 : 8) : 4);
    pl->pt_pv = largest_divisor(B, cpu ? 8 : 4);
    /* 32 channels when one or two heads share an invocation: an INT4 row chunk is then one
     * 16-byte load (the loads, not the arithmetic, dominate at few heads per element) */
    pl->tc = pl->wide && cpu ? (pl->tm <= 2 ? 32 : pl->tm >= 16 ? 8 : 16) : 8;   /* TM x TC accumulators */
    pl->ht = vkh2o_div_up(qpk, pl->tm);
    pl->ct = vkh2o_div_up(dv, pl->tc);
    pl->wg_score = 64;
    pl->wg_softmax = 64;
    uint32_t per_split = pl->ct * pl->ht;
    pl->wg_pv = per_split >= 64 ? 64 : (uint32_t)vkh2o_div_up(per_split, 8) * 8;
    pl->wg_combine = cpu ? 64 : 128;
    pl->ncc = vkh2o_div_up(dv, pl->wg_combine);
    pl->max_sel = max_selected(qc, a);
    uint32_t nsel = pl->max_sel ? pl->max_sel : 1;
    uint64_t npos = (uint64_t)nsel * B;
    pl->nps = (uint32_t)((npos + 3) / 4 * 4);

    /* splits: enough workgroups to fill the device, within the loop budget of every pass, a
     * multiple of 4 positions each (kvq_softmax reads vec4) */
    uint32_t align = 4 / (B % 4 == 0 ? 4 : B % 2 == 0 ? 2 : 1);
    uint32_t bps_max = (KVQ_LOOP_BUDGET - 2) / (1 + vkh2o_div_up(B, pl->pt_pv));
    uint32_t soft_max = (KVQ_LOOP_BUDGET / 2 - 2) * 4 / B;
    if (soft_max < bps_max)
        bps_max = soft_max;
    bps_max = bps_max / align * align;
    /* at most KVQ_MAX_SPLITS splits, and as many as the partials buffer can hold */
    uint64_t split_cap = caps->max_storage_buffer_range / (4ull * H * (dv + 2));
    if (split_cap > KVQ_MAX_SPLITS)
        split_cap = KVQ_MAX_SPLITS;
    uint32_t bps_min = split_cap ? (uint32_t)div_up64(nsel, split_cap) : UINT32_MAX / 2;
    bps_min = vkh2o_div_up(bps_min, align) * align;
    uint32_t bps = a->blocks_per_split;
    if (bps == 0) {
        uint32_t target = cpu ? 32 : 512;
        uint32_t wgs = vkh2o_div_up(per_split, pl->wg_pv) * kvh;
        uint32_t splits = wgs >= target ? 1 : target / wgs;
        bps = vkh2o_div_up(nsel, splits);
    }
    bps = vkh2o_div_up(bps, align) * align;
    if (bps < bps_min)
        bps = bps_min;
    if (bps > bps_max)
        bps = bps_max;
    if (bps_max == 0 || bps < bps_min)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "qcache attend: %u selected blocks of %u tokens cannot be split within the device's loop "
                          "budget (at most %u splits of at most %u blocks)", nsel, B, KVQ_MAX_SPLITS, bps_max);
    pl->bps = bps;
    pl->splits = vkh2o_div_up(nsel, bps);
    plan_iters(qc, pl);
    VKH2O_CHECK(plan_read_path(qc, pl));

    uint64_t score_bytes = 4ull * H * pl->nps;
    if (score_bytes > caps->max_storage_buffer_range)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "qcache attend: scores of %u heads x %llu positions (%llu bytes) exceed maxStorageBufferRange",
                          H, (unsigned long long)npos, (unsigned long long)score_bytes);
    uint64_t part_bytes = 4ull * pl->splits * H * (dv + 2);
    if (part_bytes > caps->max_storage_buffer_range)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "qcache attend: split partials of %llu bytes exceed maxStorageBufferRange",
                          (unsigned long long)part_bytes);
    uint64_t score_groups = div_up64((uint64_t)pl->ht * (npos / pl->pt), pl->wg_score);
    uint64_t soft_groups = div_up64((uint64_t)H * pl->splits, pl->wg_softmax);
    if (score_groups > caps->max_workgroup_count[0] || soft_groups > caps->max_workgroup_count[0] ||
        pl->splits > caps->max_workgroup_count[2] || H > caps->max_workgroup_count[0])
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "qcache attend: %llu score workgroups exceed the device's dispatch limit",
                          (unsigned long long)score_groups);
    return VKH2O_OK;
}

static uint32_t gcd_u32(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

uint32_t kvq_wg_perm_multiplier(uint32_t n)
{
    if (n <= 2 || n >= 65536)
        return 1;
    for (uint32_t k = (uint32_t)(0.6180339887 * n); k > 1; k--)
        if (gcd_u32(k, n) == 1)
            return k;
    return 1;
}

static void attn_tile_spec(const vkh2o_qcache* qc, const kvq_attn_plan* pl, uint32_t wg, uint32_t pt, uint32_t* spec)
{
    kvq_layout_spec(qc, wg, spec);
    spec[KVQ_SPEC_TM] = pl->tm;
    spec[KVQ_SPEC_PT] = pt;
    spec[KVQ_SPEC_QPK] = qc->d.num_heads / qc->shape.kv_heads;
    spec[KVQ_SPEC_WIDE] = pl->wide ? (pl->tex ? 2 : 1) : 0;
    spec[KVQ_SPEC_HT] = pl->ht;
    spec[KVQ_SPEC_TC] = pl->tc;
    spec[KVQ_SPEC_CT] = pl->ct;
}

vkh2o_result kvq_record_attend(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, vkh2o_buffer* out,
                               const vkh2o_qattn_desc* a)
{
    vkh2o_context* ctx = qc->ctx;
    VKH2O_CHECK(check_attn(qc, q, out, a));
    if (!out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: missing output buffer");
    kvq_attn_plan pl;
    VKH2O_CHECK(kvq_plan_attend(qc, a, &pl));
    uint32_t H = qc->d.num_heads, kvh = qc->shape.kv_heads, B = qc->d.block_size;
    VKH2O_CHECK(kvq_scratch(ctx, &qc->part, 4ull * pl.splits * H * (qc->shape.d_v + 2)));
    VKH2O_CHECK(kvq_scratch(ctx, &qc->scores, 4ull * H * pl.nps));
    uint32_t nts = 0;
#define MARK() (void)(qc->profile ? (qc->prof_ts[nts++] = vkh2o_timestamp(ctx, cb)) : 0)
    MARK();
    VKH2O_CHECK(kvq_record_select(qc, cb, q, a));
    MARK();

    uint32_t spec[KVQ_SPEC_PV_COUNT];
    vkh2o_kernel *ks, *ksm, *kp, *kc;
    attn_tile_spec(qc, &pl, pl.wg_score, pl.pt, spec);
    VKH2O_CHECK(vkh2o_kernel_get_texel(ctx, "kvq_score", KVQ_ATTN_BINDINGS, KVQ_ATTN_TEXEL_MASK, spec,
                                       KVQ_SPEC_SCORE_COUNT, &ks));
    attn_tile_spec(qc, &pl, pl.wg_pv, pl.pt_pv, spec);
    VKH2O_CHECK(vkh2o_kernel_get_texel(ctx, "kvq_pv", KVQ_ATTN_BINDINGS, KVQ_ATTN_TEXEL_MASK, spec, KVQ_SPEC_PV_COUNT, &kp));
    kvq_layout_spec(qc, pl.wg_softmax, spec);
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_softmax", 3, spec, KVQ_SPEC_LAYOUT_COUNT, &ksm));
    kvq_layout_spec(qc, pl.wg_combine, spec);
    spec[KVQ_SPEC_NCC] = pl.ncc;
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_combine", 2, spec, KVQ_SPEC_COMBINE_COUNT, &kc));

    vkh2o_binding pools[3];
    for (int p = 0; p < 3; p++)
        pools[p] = bind_or_dummy(qc, qc->pool[p]);

    struct kvq_score_push ps = { .scale = a->scale > 0 ? a->scale : 1.0f / sqrtf((float)qc->shape.d_k), .nps = pl.nps,
                                 .heads = H };
    struct kvq_pv_push pp = { .nps = pl.nps, .heads = H, .bps = pl.bps };
    for (int p = 0; p < 3; p++) {
        ps.ks_words[p] = pp.ks_words[p] = qc->sec_k.words[p];
        ps.vs_words[p] = pp.vs_words[p] = qc->sec_v.words[p];
        ps.slot_words[p] = pp.slot_words[p] = qc->slot_words[p];
    }
    uint64_t ntiles = (uint64_t)pl.max_sel * B / pl.pt;
    vkh2o_binding bs[KVQ_ATTN_BINDINGS] = { vkh2o_bind(qc->meta), vkh2o_bind(qc->list), vkh2o_bind(q), pools[0], pools[1],
                                            pools[2], vkh2o_bind(qc->scores) };
    /* the view is cached in the query buffer (its contents are only read) */
    VKH2O_CHECK(bind_views(qc, pl.tex, (vkh2o_buffer*)q, 4ull * H * qc->shape.d_k, bs));
    uint32_t score_groups = (uint32_t)div_up64(ntiles * pl.ht, pl.wg_score);
    ps.wperm = kvq_wg_perm_multiplier(score_groups);
    pp.wperm = kvq_wg_perm_multiplier(pl.splits);
    if (ntiles)
        VKH2O_CHECK(vkh2o_dispatch(ctx, cb, ks, bs, KVQ_ATTN_BINDINGS, &ps, sizeof ps, score_groups, kvh, 1));
    vkh2o_barrier(ctx, cb);
    MARK();

    struct kvq_softmax_push psm = { pl.nps, H, pl.splits, pl.bps * B };
    vkh2o_binding bsm[3] = { vkh2o_bind(qc->list), vkh2o_bind(qc->scores), vkh2o_bind(qc->part) };
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, ksm, bsm, 3, &psm, sizeof psm, vkh2o_div_up(H * pl.splits, pl.wg_softmax), 1, 1));
    vkh2o_barrier(ctx, cb);
    MARK();

    vkh2o_binding bp[KVQ_ATTN_BINDINGS] = { vkh2o_bind(qc->meta), vkh2o_bind(qc->list), vkh2o_bind(qc->scores), pools[0],
                                            pools[1], pools[2], vkh2o_bind(qc->part) };
    VKH2O_CHECK(bind_views(qc, pl.tex, qc->scores, 4ull * H * pl.nps, bp));
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, kp, bp, KVQ_ATTN_BINDINGS, &pp, sizeof pp, vkh2o_div_up(pl.ct * pl.ht, pl.wg_pv), kvh, pl.splits));
    vkh2o_barrier(ctx, cb);
    MARK();

    struct kvq_combine_push pcmb = { pl.splits, H };
    vkh2o_binding bc[2] = { vkh2o_bind(qc->part), vkh2o_bind(out) };
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, kc, bc, 2, &pcmb, sizeof pcmb, H, 1, 1));
    vkh2o_barrier(ctx, cb);
    MARK();
#undef MARK
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_qcache_attend(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, vkh2o_buffer* out,
                                     const vkh2o_qattn_desc* desc)
{
    if (!qc || !cb)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_note_foreign_cb(qc->ctx, cb);
    return kvq_record_attend(qc, cb, q, out, desc);
}

vkh2o_result vkh2o_run_qcache_attend(vkh2o_qcache* qc, const vkh2o_buffer* q, vkh2o_buffer* out,
                                     const vkh2o_qattn_desc* desc, uint32_t* selected_tokens)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VkCommandBuffer cb;
    qc->last_attend_ms = -1.0;
    for (uint32_t k = 0; k + 1 < KVQ_PROF_MARKS; k++)
        qc->last_pass_ms[k] = -1.0;
    VKH2O_CHECK(vkh2o_begin(qc->ctx, &cb));
    const uint32_t t0 = vkh2o_timestamp(qc->ctx, cb);
    vkh2o_result r = kvq_record_attend(qc, cb, q, out, desc);
    const uint32_t t1 = vkh2o_timestamp(qc->ctx, cb);
    VKH2O_CHECK(vkh2o_submit_wait_recorded(qc->ctx, cb, r));
    if (t0 != UINT32_MAX && t1 != UINT32_MAX)
        qc->last_attend_ms = vkh2o_timestamp_ms(qc->ctx, t0, t1);
    for (uint32_t k = 0; qc->profile && k + 1 < KVQ_PROF_MARKS; k++)
        qc->last_pass_ms[k] = vkh2o_timestamp_ms(qc->ctx, qc->prof_ts[k], qc->prof_ts[k + 1]);
    if (selected_tokens) {
        uint32_t n = 0;
        VKH2O_CHECK(vkh2o_buffer_download(qc->list, 0, &n, 4));
        uint32_t* list = vkh2o_malloc(qc->ctx, 4ull * (n + 1));
        if (!list)
            return vkh2o_fail(qc->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "qcache: out of host memory");
        vkh2o_result r3 = vkh2o_buffer_download(qc->list, 0, list, 4ull * (n + 1));
        /* all blocks are full except the last one */
        uint64_t t = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t b = list[1 + i];
            uint64_t end = (uint64_t)(b + 1) * qc->d.block_size;
            t += (end > qc->tokens ? qc->tokens : end) - (uint64_t)b * qc->d.block_size;
        }
        free(list);
        VKH2O_CHECK(r3);
        *selected_tokens = (uint32_t)t;
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_qcache_metrics(vkh2o_qcache* qc, const vkh2o_buffer* k_ref, const vkh2o_buffer* v_ref,
                                  vkh2o_qmetrics* k_out, vkh2o_qmetrics* v_out)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_context* ctx = qc->ctx;
    uint64_t kb = 4ull * qc->tokens * qc->shape.kv_heads * qc->shape.d_k;
    uint64_t vb = 4ull * qc->tokens * qc->shape.kv_heads * qc->shape.d_v;
    if (!k_ref || vkh2o_buffer_get_size(k_ref) < kb || (!qc->shape.v_in_k && (!v_ref || vkh2o_buffer_get_size(v_ref) < vb)))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache metrics: reference buffers smaller than the %u tokens held",
                          qc->tokens);
    if (qc->blocks == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache metrics: the cache is empty");
    VKH2O_CHECK(kvq_scratch(ctx, &qc->mpart, 4ull * 8 * 2 * qc->max_blocks * qc->shape.kv_heads));
    vkh2o_buffer* res = NULL;
    VKH2O_CHECK(vkh2o_buffer_create(ctx, 64, &res));
    uint32_t spec[KVQ_SPEC_LAYOUT_COUNT];
    kvq_layout_spec(qc, METRICS_WG, spec);
    vkh2o_kernel* km;
    VkCommandBuffer cb;
    vkh2o_result r = vkh2o_kernel_get(ctx, "kvq_metrics", 8, spec, KVQ_SPEC_LAYOUT_COUNT, &km);
    if (r == VKH2O_OK && (r = vkh2o_begin(ctx, &cb)) == VKH2O_OK) {
        struct kvq_metrics_push pc = { .phase = 0, .n_blocks = qc->blocks };
        for (int p = 0; p < 3; p++) {
            pc.ks_words[p] = qc->sec_k.words[p];
            pc.vs_words[p] = qc->sec_v.words[p];
            pc.slot_words[p] = qc->slot_words[p];
        }
        vkh2o_binding b[8] = {
            vkh2o_bind(qc->meta), bind_or_dummy(qc, qc->pool[0]), bind_or_dummy(qc, qc->pool[1]),
            bind_or_dummy(qc, qc->pool[2]), vkh2o_bind(k_ref), bind_or_dummy(qc, qc->shape.v_in_k ? NULL : v_ref),
            vkh2o_bind(qc->mpart), vkh2o_bind(qc->mpart),
        };
        r = vkh2o_dispatch(ctx, cb, km, b, 8, &pc, sizeof pc, qc->blocks, qc->shape.kv_heads, 2);
        vkh2o_barrier(ctx, cb);
        pc.phase = 1;
        b[7] = vkh2o_bind(res);
        if (r == VKH2O_OK)
            r = vkh2o_dispatch(ctx, cb, km, b, 8, &pc, sizeof pc, 2, 1, 1);
        r = vkh2o_submit_wait_recorded(ctx, cb, r);
    }
    uint32_t w[16];
    if (r == VKH2O_OK)
        r = vkh2o_buffer_download(res, 0, w, sizeof w);
    vkh2o_buffer_destroy(res);
    VKH2O_CHECK(r);
    vkh2o_qmetrics* outs[2] = { k_out, v_out };
    for (int z = 0; z < 2; z++) {
        if (!outs[z])
            continue;
        float f[5];
        memcpy(f, &w[z * 8], sizeof f);
        uint32_t n = w[z * 8 + 5];
        outs[z]->count = n;
        outs[z]->mse = n ? (double)f[0] / n : 0.0;
        outs[z]->max_abs = f[1];
        double den = sqrt((double)f[3] * (double)f[4]);
        outs[z]->cosine = den > 0 ? (double)f[2] / den : (f[3] == f[4] ? 1.0 : 0.0);
    }
    return VKH2O_OK;
}

/* ---- decode steps ---- */

#define MASS_WG 64u

vkh2o_result kvq_decode_reserve(vkh2o_qcache* qc, const vkh2o_qattn_desc* a, uint32_t tokens)
{
    vkh2o_context* ctx = qc->ctx;
    const uint32_t H = qc->d.num_heads;
    VKH2O_CHECK(kvq_scratch(ctx, &qc->dec_q, 4ull * H * qc->shape.kv_heads * qc->shape.d_k));
    VKH2O_CHECK(kvq_scratch(ctx, &qc->dec_o, 4ull * H * qc->shape.d_v));
    VKH2O_CHECK(kvq_scratch(ctx, &qc->dec_mass, 4ull * qc->d.max_tokens));
    VKH2O_CHECK(kvq_scratch(ctx, &qc->dec_stat, 8ull * H));
    VKH2O_CHECK(kvq_scratch(ctx, &qc->dec_zero, 16));
    VKH2O_CHECK(check_attn(qc, qc->dec_q, qc->dec_o, a));
    /* plan the attention after each of the appends (the split count is not monotonic in the
     * number of blocks) with the host counters as they will be, and keep the largest sizes */
    const uint32_t B = qc->d.block_size, tokens0 = qc->tokens, blocks0 = qc->blocks, fp16_0 = qc->count[VKH2O_QPREC_FP16];
    uint64_t part = 0, scores = 0;
    vkh2o_result r = VKH2O_OK;
    for (uint32_t i = 1; i <= tokens && r == VKH2O_OK; i++) {
        qc->tokens = tokens0 + i;
        qc->blocks = (qc->tokens + B - 1) / B;
        qc->count[VKH2O_QPREC_FP16] = fp16_0 + (qc->blocks - blocks0);
        kvq_attn_plan pl;
        r = kvq_plan_attend(qc, a, &pl);
        uint64_t pb = 4ull * pl.splits * H * (qc->shape.d_v + 2), sb = 4ull * H * pl.nps;
        part = pb > part ? pb : part;
        scores = sb > scores ? sb : scores;
    }
    qc->tokens = tokens0;
    qc->blocks = blocks0;
    qc->count[VKH2O_QPREC_FP16] = fp16_0;
    VKH2O_CHECK(r);
    VKH2O_CHECK(kvq_scratch(ctx, &qc->part, part));
    return kvq_scratch(ctx, &qc->scores, scores);
}

vkh2o_result kvq_record_mass(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_qattn_desc* a)
{
    vkh2o_context* ctx = qc->ctx;
    kvq_attn_plan pl;
    VKH2O_CHECK(kvq_plan_attend(qc, a, &pl));
    uint32_t spec[KVQ_SPEC_LAYOUT_COUNT];
    kvq_layout_spec(qc, MASS_WG, spec);
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_mass", 6, spec, KVQ_SPEC_LAYOUT_COUNT, &k));
    ctx->vk.vkCmdFillBuffer(cb, qc->dec_mass->buffer, 0, 4ull * qc->tokens, 0);
    vkh2o_barrier(ctx, cb);
    const uint32_t H = qc->d.num_heads, B = qc->d.block_size;
    struct kvq_mass_push pc = { .nps = pl.nps, .heads = H, .splits = pl.splits, .spp = pl.bps * B, .phase = 0,
                                .npos = pl.max_sel * B };
    vkh2o_binding b[6] = { vkh2o_bind(qc->list), vkh2o_bind(qc->meta), vkh2o_bind(qc->scores), vkh2o_bind(qc->part),
                           vkh2o_bind(qc->dec_stat), vkh2o_bind(qc->dec_mass) };
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, k, b, 6, &pc, sizeof pc, vkh2o_div_up(H, MASS_WG), 1, 1));
    vkh2o_barrier(ctx, cb);
    pc.phase = 1;
    if (pc.npos)
        VKH2O_CHECK(vkh2o_dispatch(ctx, cb, k, b, 6, &pc, sizeof pc, vkh2o_div_up(pc.npos, MASS_WG), 1, 1));
    vkh2o_barrier(ctx, cb);
    return vkh2o_cmd_qcache_add_importance(qc, cb, qc->dec_mass, 0, 0, qc->tokens);
}

/* ---- measuring (public knobs for tools and benchmarks) ---- */

vkh2o_result vkh2o_qcache_set_read_path(vkh2o_qcache* qc, vkh2o_qread path)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    switch (path) {
    case VKH2O_QREAD_AUTO: qc->read_path = KVQ_READ_AUTO; return VKH2O_OK;
    case VKH2O_QREAD_STORAGE: qc->read_path = KVQ_READ_STORAGE; return VKH2O_OK;
    case VKH2O_QREAD_TEXEL: qc->read_path = KVQ_READ_TEXEL; return VKH2O_OK;
    default: return vkh2o_fail(qc->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_qcache_set_read_path: unknown path %d", (int)path);
    }
}

vkh2o_result vkh2o_qcache_get_read_path(vkh2o_qcache* qc, vkh2o_qread* out)
{
    if (!qc || !out)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    kvq_attn_plan pl;
    VKH2O_CHECK(kvq_plan_attend(qc, &(vkh2o_qattn_desc){ .selector = VKH2O_QSELECT_ALL }, &pl));
    *out = pl.tex ? VKH2O_QREAD_TEXEL : VKH2O_QREAD_STORAGE;
    return VKH2O_OK;
}

void vkh2o_qcache_set_profile(vkh2o_qcache* qc, bool on)
{
    if (qc)
        qc->profile = on;
}

void vkh2o_qcache_get_last_attend_timings(const vkh2o_qcache* qc, vkh2o_qattn_timings* out)
{
    if (!out)
        return;
    out->total_ms = qc ? qc->last_attend_ms : -1.0;
    for (uint32_t k = 0; k < VKH2O_QATTN_PASSES; k++)
        out->pass_ms[k] = qc ? qc->last_pass_ms[k] : -1.0;
}

vkh2o_result vkh2o_qcache_read_selection(vkh2o_qcache* qc, uint32_t* blocks, uint32_t* count)
{
    if (!qc || !count)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    *count = 0;
    if (!qc->list)
        return VKH2O_OK;
    uint32_t n = 0;
    VKH2O_CHECK(vkh2o_buffer_download(qc->list, 0, &n, 4));
    if (n > qc->blocks)
        return vkh2o_fail(qc->ctx, VKH2O_ERROR_VULKAN, "qcache: the selection holds %u blocks of %u", n, qc->blocks);
    if (blocks && n)
        VKH2O_CHECK(vkh2o_buffer_download(qc->list, 4, blocks, 4ull * n));
    *count = n;
    return VKH2O_OK;
}

uint32_t vkh2o_qcache_routable_blocks(const vkh2o_qcache_desc* resolved, uint32_t n_blocks)
{
    return resolved ? kvq_routable(resolved, n_blocks) : 0;
}
