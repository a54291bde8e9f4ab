/* Quantised cache: block selection (all / score / quest / random), the mixed-precision split
 * decode attention with its deterministic combine, and the GPU error metrics. */
#include "kvquant_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QBOUND_WG 64u
#define COMBINE_WG 64u
#define METRICS_WG 64u

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
    if (vkh2o_buffer_size(q) < 4ull * qc->d.num_heads * qc->shape.d_k)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: query buffer smaller than [%u, %u] f32",
                          qc->d.num_heads, qc->shape.d_k);
    if (out && vkh2o_buffer_size(out) < 4ull * qc->d.num_heads * qc->shape.d_v)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: output buffer smaller than [%u, %u] f32",
                          qc->d.num_heads, qc->shape.d_v);
    VKH2O_CHECK(kvq_scratch(ctx, &qc->list, 4ull * (1 + qc->max_blocks)));
    if (a->selector == VKH2O_QSELECT_QUEST)
        VKH2O_CHECK(kvq_scratch(ctx, &qc->keys, 4ull * qc->max_blocks));
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
        struct kvq_qbound_push pc = { qc->blocks, qc->d.num_heads };
        vkh2o_binding b[3] = { vkh2o_bind(qc->minmax), vkh2o_bind(q), vkh2o_bind(qc->keys) };
        VKH2O_CHECK(vkh2o_dispatch(ctx, cb, kq, b, 3, &pc, sizeof pc, vkh2o_div_up(qc->blocks, QBOUND_WG), 1, 1));
        vkh2o_barrier(ctx, cb);
    }
    vkh2o_kernel* ks;
    kvq_layout_spec(qc, KVQ_SELECT_WG, spec);
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_select", 3, spec, KVQ_SPEC_LAYOUT_COUNT, &ks));
    struct kvq_select_push pc = {
        qc->blocks, qc->d.sink_blocks, qc->d.recent_blocks, (uint32_t)a->selector, a->budget_blocks,
        (uint32_t)a->seed, (uint32_t)(a->seed >> 32),
    };
    vkh2o_binding b[3] = { vkh2o_bind(qc->meta), bind_or_dummy(qc, a->selector == VKH2O_QSELECT_QUEST ? qc->keys : NULL),
                           vkh2o_bind(qc->list) };
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, ks, b, 3, &pc, sizeof pc, 1, 1, 1));
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

vkh2o_result kvq_record_attend(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, vkh2o_buffer* out,
                               const vkh2o_qattn_desc* a)
{
    vkh2o_context* ctx = qc->ctx;
    VKH2O_CHECK(check_attn(qc, q, out, a));
    if (!out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache attend: missing output buffer");
    const vkh2o_device_caps* caps = vkh2o_context_caps(ctx);
    bool cpu = caps->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    uint32_t H = qc->d.num_heads, kvh = qc->shape.kv_heads, qpk = H / kvh;
    uint32_t wg = cpu ? 64 : 128;
    uint32_t hc = qpk < 8 ? qpk : 8;
    uint32_t chunks = vkh2o_div_up(qpk, hc);
    uint32_t nsel = max_selected(qc, a);
    uint32_t bps = a->blocks_per_split;
    if (bps == 0) {
        /* enough workgroups to fill the device, each split at least a few blocks */
        uint32_t target = cpu ? 64 : 512;
        uint32_t per = kvh * chunks;
        uint32_t splits = per >= target ? 1 : target / per;
        bps = vkh2o_div_up(nsel ? nsel : 1, splits);
        uint32_t min_bps = vkh2o_div_up(64, qc->d.block_size);
        if (bps < min_bps)
            bps = min_bps;
    }
    uint32_t splits = nsel ? vkh2o_div_up(nsel, bps) : 1;
    VKH2O_CHECK(kvq_scratch(ctx, &qc->part, 4ull * splits * H * (qc->shape.d_v + 2)));
    VKH2O_CHECK(kvq_record_select(qc, cb, q, a));

    uint32_t spec[KVQ_SPEC_ATTN_COUNT];
    kvq_layout_spec(qc, wg, spec);
    spec[KVQ_SPEC_HC] = hc;
    spec[KVQ_SPEC_QPK] = qpk;
    bool fast8 = qc->shape.d_k % 8 == 0 && qc->shape.d_v % 8 == 0;
    spec[KVQ_SPEC_NC] = fast8 ? 8 * vkh2o_div_up(qc->shape.d_v, 8 * wg) : vkh2o_div_up(qc->shape.d_v, wg);
    vkh2o_kernel *ka, *kc;
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_attn", 7, spec, KVQ_SPEC_ATTN_COUNT, &ka));
    struct kvq_attn_push pa = { .scale = a->scale > 0 ? a->scale : 1.0f / sqrtf((float)qc->shape.d_k),
                                .splits = splits, .bps = bps, .heads = H };
    for (int p = 0; p < 3; p++) {
        pa.ks_words[p] = qc->sec_k.words[p];
        pa.vs_words[p] = qc->sec_v.words[p];
        pa.slot_words[p] = qc->slot_words[p];
    }
    vkh2o_binding b[7] = {
        vkh2o_bind(qc->meta), vkh2o_bind(qc->list), vkh2o_bind(q), bind_or_dummy(qc, qc->pool[0]),
        bind_or_dummy(qc, qc->pool[1]), bind_or_dummy(qc, qc->pool[2]), vkh2o_bind(qc->part),
    };
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, ka, b, 7, &pa, sizeof pa, chunks, kvh, splits));
    vkh2o_barrier(ctx, cb);

    kvq_layout_spec(qc, COMBINE_WG, spec);
    VKH2O_CHECK(vkh2o_kernel_get(ctx, "kvq_combine", 2, spec, KVQ_SPEC_LAYOUT_COUNT, &kc));
    struct kvq_combine_push pcmb = { splits, H };
    vkh2o_binding bc[2] = { vkh2o_bind(qc->part), vkh2o_bind(out) };
    VKH2O_CHECK(vkh2o_dispatch(ctx, cb, kc, bc, 2, &pcmb, sizeof pcmb, H, 1, 1));
    vkh2o_barrier(ctx, cb);
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
    VKH2O_CHECK(vkh2o_begin(qc->ctx, &cb));
    vkh2o_result r = kvq_record_attend(qc, cb, q, out, desc);
    vkh2o_result r2 = vkh2o_submit_wait(qc->ctx, cb);
    if (r != VKH2O_OK)
        return r;
    VKH2O_CHECK(r2);
    if (selected_tokens) {
        uint32_t n = 0;
        VKH2O_CHECK(vkh2o_buffer_download(qc->list, 0, &n, 4));
        uint32_t* list = malloc(4ull * (n + 1));
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

vkh2o_result vkh2o_qcache_metrics(vkh2o_qcache* qc, const vkh2o_buffer* k_ref, const vkh2o_buffer* v_ref,
                                  vkh2o_qmetrics* k_out, vkh2o_qmetrics* v_out)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_context* ctx = qc->ctx;
    uint64_t kb = 4ull * qc->tokens * qc->shape.kv_heads * qc->shape.d_k;
    uint64_t vb = 4ull * qc->tokens * qc->shape.kv_heads * qc->shape.d_v;
    if (!k_ref || vkh2o_buffer_size(k_ref) < kb || (!qc->shape.v_in_k && (!v_ref || vkh2o_buffer_size(v_ref) < vb)))
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
        vkh2o_result r2 = vkh2o_submit_wait(ctx, cb);
        if (r == VKH2O_OK)
            r = r2;
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
