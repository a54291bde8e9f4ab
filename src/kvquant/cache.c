/* Quantised cache object: buffers, prefill/append into FP16 slots, importance updates, and
 * GPU routing with pool reallocation and re-quantisation. */
#include "kvquant_internal.h"

#include <stdlib.h>
#include <string.h>

#define WRITE_WG 64u
#define REQUANT_WG 128u

static vkh2o_result make_buffer(vkh2o_qcache* qc, uint64_t bytes, const char* what, vkh2o_buffer** out)
{
    vkh2o_context* ctx = qc->ctx;
    if (bytes > vkh2o_context_get_caps(ctx)->max_storage_buffer_range)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "qcache: %s of %llu bytes exceeds maxStorageBufferRange (%llu)", what,
                          (unsigned long long)bytes, (unsigned long long)vkh2o_context_get_caps(ctx)->max_storage_buffer_range);
    return vkh2o_buffer_create(ctx, bytes ? bytes : 4, out);
}

vkh2o_result kvq_scratch(vkh2o_context* ctx, vkh2o_buffer** b, uint64_t bytes)
{
    if (*b && vkh2o_buffer_get_size(*b) >= bytes)
        return VKH2O_OK;
    vkh2o_buffer_destroy(*b);
    *b = NULL;
    return vkh2o_buffer_create(ctx, bytes < 16 ? 16 : bytes, b);
}

void kvq_layout_spec(const vkh2o_qcache* qc, uint32_t wg, uint32_t spec[KVQ_SPEC_LAYOUT_COUNT])
{
    spec[KVQ_SPEC_WG] = wg;
    spec[KVQ_SPEC_B] = qc->d.block_size;
    spec[KVQ_SPEC_DK] = qc->shape.d_k;
    spec[KVQ_SPEC_DV] = qc->shape.d_v;
    spec[KVQ_SPEC_KVH] = qc->shape.kv_heads;
    spec[KVQ_SPEC_G] = qc->d.group_size;
    spec[KVQ_SPEC_KGROUP] = (uint32_t)qc->d.k_grouping;
    spec[KVQ_SPEC_VGROUP] = (uint32_t)qc->d.v_grouping;
    spec[KVQ_SPEC_VINK] = qc->shape.v_in_k ? 1u : 0u;
}

vkh2o_result vkh2o_qcache_create(vkh2o_context* ctx, const vkh2o_qcache_desc* desc, vkh2o_qcache** out)
{
    if (!out)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    *out = NULL;
    if (!ctx)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_error err = { 0 };
    vkh2o_qcache_desc d;
    vkh2o_result r = vkh2o_qcache_desc_resolve(desc, &d, &err);
    if (r != VKH2O_OK)
        return vkh2o_fail(ctx, r, "%s", err.message);
    vkh2o_qcache* qc = vkh2o_calloc(ctx, 1, sizeof *qc);
    if (!qc)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "qcache: out of host memory");
    qc->ctx = ctx;
    qc->last_attend_ms = -1.0;
    for (uint32_t i = 0; i + 1 < KVQ_PROF_MARKS; i++)
        qc->last_pass_ms[i] = -1.0;
    qc->d = d;
    qc->shape = vkh2o_qcache_shape(&d);
    qc->max_blocks = (d.max_tokens + d.block_size - 1) / d.block_size;
    kvq_section_init(&d, qc->shape.d_k, d.k_grouping, &qc->sec_k);
    kvq_section_init(&d, qc->shape.v_in_k ? 0 : qc->shape.d_v, d.v_grouping, &qc->sec_v);
    for (int p = 0; p < 3; p++)
        qc->slot_words[p] = qc->shape.kv_heads * (qc->sec_k.words[p] + qc->sec_v.words[p]);
    r = make_buffer(qc, 4ull * KVQ_META_WORDS * qc->max_blocks, "block metadata", &qc->meta);
    if (r == VKH2O_OK)
        r = make_buffer(qc, 4ull * d.max_tokens, "token importance", &qc->imp);
    if (r == VKH2O_OK && (d.flags & VKH2O_QCACHE_QUEST_BOUNDS))
        r = make_buffer(qc, 4ull * qc->max_blocks * qc->shape.kv_heads * qc->shape.d_k, "quest bounds", &qc->minmax);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_create(ctx, 16, &qc->dummy);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_fill(qc->meta, 0, vkh2o_buffer_get_size(qc->meta), 0);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_fill(qc->imp, 0, vkh2o_buffer_get_size(qc->imp), 0);
    if (r != VKH2O_OK) {
        vkh2o_qcache_destroy(qc);
        return r;
    }
    *out = qc;
    return VKH2O_OK;
}

void vkh2o_qcache_destroy(vkh2o_qcache* qc)
{
    if (!qc)
        return;
    vkh2o_buffer* bufs[] = { qc->meta, qc->imp, qc->minmax, qc->pool[0], qc->pool[1], qc->pool[2],
                             qc->keys, qc->list, qc->part, qc->dummy, qc->mpart, qc->scores, qc->rank,
                             qc->dec_q, qc->dec_o, qc->dec_mass, qc->dec_stat, qc->dec_zero };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        vkh2o_buffer_destroy(bufs[i]);
    free(qc);
}

const vkh2o_qcache_desc* vkh2o_qcache_get_desc(const vkh2o_qcache* qc) { return qc ? &qc->d : NULL; }

static vkh2o_binding bind_or_dummy(const vkh2o_qcache* qc, const vkh2o_buffer* b)
{
    return vkh2o_bind(b ? b : qc->dummy);
}

/* Grows the FP16 pool to hold `slots` slots, keeping the content of the used ones. */
static vkh2o_result grow_fp16(vkh2o_qcache* qc, uint32_t slots)
{
    vkh2o_context* ctx = qc->ctx;
    vkh2o_buffer* nb = NULL;
    VKH2O_CHECK(make_buffer(qc, 4ull * qc->slot_words[0] * slots, "FP16 pool", &nb));
    if (qc->pool[0] && qc->fp16_used) {
        VkCommandBuffer cb;
        vkh2o_result r = vkh2o_begin(ctx, &cb);
        if (r == VKH2O_OK) {
            VkBufferCopy region = { 0, 0, 4ull * qc->slot_words[0] * qc->fp16_used };
            ctx->vk.vkCmdCopyBuffer(cb, qc->pool[0]->buffer, nb->buffer, 1, &region);
            r = vkh2o_submit_wait(ctx, cb);
        }
        if (r != VKH2O_OK) {
            vkh2o_buffer_destroy(nb);
            return r;
        }
    }
    vkh2o_buffer_destroy(qc->pool[0]);
    qc->pool[0] = nb;
    qc->cap[0] = slots;
    return VKH2O_OK;
}

/* float offset of `bytes` bytes of b from byte `offset` (a multiple of 4) */
static bool in_range(const vkh2o_buffer* b, uint64_t offset, uint64_t bytes, uint32_t* off_floats)
{
    if (!b || (offset & 3u) || offset > vkh2o_buffer_get_size(b) || vkh2o_buffer_get_size(b) - offset < bytes ||
        offset / 4 >= (1ull << 32))
        return false;
    *off_floats = (uint32_t)(offset / 4);
    return true;
}

static vkh2o_result check_rows(vkh2o_qcache* qc, const vkh2o_qcache_rows* rows, uint32_t off[3])
{
    vkh2o_context* ctx = qc->ctx;
    if (!rows || rows->n == 0 || !rows->k || !rows->importance || (!qc->shape.v_in_k && !rows->v))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: %s",
                          rows && rows->n == 0 ? "no tokens given" : "missing rows, k, v or importance buffer");
    const uint32_t n = rows->n;
    uint64_t kb = 4ull * n * qc->shape.kv_heads * qc->shape.d_k, vb = 4ull * n * qc->shape.kv_heads * qc->shape.d_v;
    off[1] = 0;
    if (!in_range(rows->k, rows->k_offset, kb, &off[0]) || !in_range(rows->importance, rows->importance_offset, 4ull * n, &off[2]) ||
        (!qc->shape.v_in_k && !in_range(rows->v, rows->v_offset, vb, &off[1])))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "qcache: input buffers too small for %u tokens from their offsets (multiples of 4): k needs %llu "
                          "bytes, v %llu, importance %llu", n, (unsigned long long)kb,
                          (unsigned long long)(qc->shape.v_in_k ? 0 : vb), 4ull * n);
    if ((uint64_t)qc->tokens + n > qc->d.max_tokens)
        return vkh2o_fail(ctx, VKH2O_ERROR_BUDGET, "qcache: %u + %u tokens exceed max_tokens %u", qc->tokens, n,
                          qc->d.max_tokens);
    return VKH2O_OK;
}

/* Records the write kernel for tokens [n_old, n_old + n) (or an importance-only refresh);
 * off: float offsets of k, v and importance in their buffers. */
static vkh2o_result record_write(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* k, const vkh2o_buffer* v,
                                 const vkh2o_buffer* imp, const uint32_t off[3], uint32_t n_old, uint32_t n, bool imp_only)
{
    uint32_t spec[KVQ_SPEC_LAYOUT_COUNT];
    kvq_layout_spec(qc, WRITE_WG, spec);
    vkh2o_kernel* kern;
    VKH2O_CHECK(vkh2o_kernel_get(qc->ctx, "kvq_write", 7, spec, KVQ_SPEC_LAYOUT_COUNT, &kern));
    uint32_t B = qc->d.block_size;
    uint32_t first = n_old / B, last = (n_old + n - 1) / B;
    struct kvq_write_push pc = {
        .n_old = n_old, .n_new = n, .first_block = first, .first_new_block = imp_only ? UINT32_MAX : qc->blocks,
        .next_slot = qc->fp16_used, .quest = qc->minmax ? 1u : 0u, .in_tokens = n, .imp_only = imp_only ? 1u : 0u,
        .k_off = off[0], .v_off = off[1], .imp_off = off[2],
    };
    vkh2o_binding b[7] = {
        bind_or_dummy(qc, k), bind_or_dummy(qc, v), vkh2o_bind(imp), vkh2o_bind(qc->meta), vkh2o_bind(qc->imp),
        bind_or_dummy(qc, qc->pool[0]), bind_or_dummy(qc, qc->minmax),
    };
    return vkh2o_dispatch(qc->ctx, cb, kern, b, 7, &pc, sizeof pc, last - first + 1, imp_only ? 1 : qc->shape.kv_heads, 1);
}

/* new blocks an append of n tokens opens */
static uint32_t fresh_blocks(const vkh2o_qcache* qc, uint32_t n)
{
    uint32_t B = qc->d.block_size;
    return (uint32_t)(((uint64_t)qc->tokens + n + B - 1) / B) - qc->blocks;
}

vkh2o_result vkh2o_run_qcache_reserve(vkh2o_qcache* qc, uint32_t tokens)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if ((uint64_t)qc->tokens + tokens > qc->d.max_tokens)
        return vkh2o_fail(qc->ctx, VKH2O_ERROR_BUDGET, "qcache: reserving %u tokens after %u exceeds max_tokens %u", tokens,
                          qc->tokens, qc->d.max_tokens);
    uint32_t fresh = fresh_blocks(qc, tokens);
    if (qc->fp16_used + fresh <= qc->cap[0])
        return VKH2O_OK;
    return grow_fp16(qc, qc->fp16_used + fresh + qc->d.headroom_blocks);
}

vkh2o_result vkh2o_cmd_qcache_append(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_qcache_rows* rows)
{
    if (!qc || !cb)
        return qc ? vkh2o_fail(qc->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_qcache_append: NULL argument")
                  : VKH2O_ERROR_INVALID_ARGUMENT;
    uint32_t off[3];
    VKH2O_CHECK(check_rows(qc, rows, off));
    uint32_t n = rows->n, fresh = fresh_blocks(qc, n);
    if (qc->fp16_used + fresh > qc->cap[0])
        return vkh2o_fail(qc->ctx, VKH2O_ERROR_BUDGET,
                          "qcache: appending %u tokens needs %u free FP16 slots, %u are reserved (vkh2o_run_qcache_reserve)", n,
                          fresh, qc->cap[0] - qc->fp16_used);
    VKH2O_CHECK(record_write(qc, cb, rows->k, rows->v, rows->importance, off, qc->tokens, n, false));
    vkh2o_barrier(qc->ctx, cb);
    /* the host bookkeeping advances with the recording (the header says why) */
    qc->tokens += n;
    qc->blocks += fresh;
    qc->fp16_used += fresh;
    qc->count[VKH2O_QPREC_FP16] += fresh;
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_qcache_append(vkh2o_qcache* qc, const vkh2o_qcache_rows* rows)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    uint32_t off[3];
    VKH2O_CHECK(check_rows(qc, rows, off));
    VKH2O_CHECK(vkh2o_run_qcache_reserve(qc, rows->n));
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(qc->ctx, &cb));
    /* on a failed submit the bookkeeping has advanced over rows the device may not hold: the
     * cache is then in an unknown state (as after any failed submission) */
    vkh2o_result r = vkh2o_cmd_qcache_append(qc, cb, rows);
    return vkh2o_submit_wait_recorded(qc->ctx, cb, r);
}

vkh2o_result vkh2o_run_qcache_prefill(vkh2o_qcache* qc, const vkh2o_qcache_rows* rows)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    for (int p = 0; p < 3; p++) {
        vkh2o_buffer_destroy(qc->pool[p]);
        qc->pool[p] = NULL;
        qc->cap[p] = 0;
    }
    qc->tokens = qc->blocks = qc->fp16_used = 0;
    memset(qc->count, 0, sizeof qc->count);
    uint32_t off[3];
    VKH2O_CHECK(check_rows(qc, rows, off));
    uint32_t nb = (rows->n + qc->d.block_size - 1) / qc->d.block_size;
    VKH2O_CHECK(grow_fp16(qc, nb + qc->d.headroom_blocks));
    return vkh2o_run_qcache_append(qc, rows);
}

typedef vkh2o_result (*dev_fn)(vkh2o_qcache*, const vkh2o_qcache_rows*);

static vkh2o_result via_host(vkh2o_qcache* qc, const float* k, const float* v, const float* imp, uint32_t n, dev_fn fn)
{
    if (!qc || !k || !imp || n == 0 || (!qc->shape.v_in_k && !v))
        return qc ? vkh2o_fail(qc->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: missing host data or n = 0")
                  : VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_context* ctx = qc->ctx;
    uint64_t held = fn == vkh2o_run_qcache_prefill ? 0 : qc->tokens;
    if (held + n > qc->d.max_tokens)
        return vkh2o_fail(ctx, VKH2O_ERROR_BUDGET, "qcache: %llu + %u tokens exceed max_tokens %u", (unsigned long long)held, n,
                          qc->d.max_tokens);
    uint64_t kb = 4ull * n * qc->shape.kv_heads * qc->shape.d_k, vb = 4ull * n * qc->shape.kv_heads * qc->shape.d_v;
    vkh2o_buffer *kd = NULL, *vd = NULL, *id = NULL;
    vkh2o_result r = vkh2o_buffer_create(ctx, kb, &kd);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_create(ctx, 4ull * n, &id);
    if (r == VKH2O_OK && !qc->shape.v_in_k)
        r = vkh2o_buffer_create(ctx, vb, &vd);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_upload(kd, 0, k, kb);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_upload(id, 0, imp, 4ull * n);
    if (r == VKH2O_OK && vd)
        r = vkh2o_buffer_upload(vd, 0, v, vb);
    if (r == VKH2O_OK)
        r = fn(qc, &(vkh2o_qcache_rows){ .k = kd, .v = vd, .importance = id, .n = n });
    vkh2o_buffer_destroy(kd);
    vkh2o_buffer_destroy(vd);
    vkh2o_buffer_destroy(id);
    return r;
}

vkh2o_result vkh2o_run_qcache_prefill_host(vkh2o_qcache* qc, const float* k, const float* v, const float* imp, uint32_t n)
{
    return via_host(qc, k, v, imp, n, vkh2o_run_qcache_prefill);
}

vkh2o_result vkh2o_run_qcache_append_host(vkh2o_qcache* qc, const float* k, const float* v, const float* imp, uint32_t n)
{
    return via_host(qc, k, v, imp, n, vkh2o_run_qcache_append);
}

vkh2o_result vkh2o_cmd_qcache_add_importance(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* mass,
                                             uint64_t mass_offset, uint32_t first, uint32_t n)
{
    if (!qc || !cb)
        return qc ? vkh2o_fail(qc->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_qcache_add_importance: NULL argument")
                  : VKH2O_ERROR_INVALID_ARGUMENT;
    uint32_t off[3] = { 0, 0, 0 };
    if (n == 0 || (uint64_t)first + n > qc->tokens || !in_range(mass, mass_offset, 4ull * n, &off[2]))
        return vkh2o_fail(qc->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "qcache: add_importance range [%u, %llu) outside the %u tokens held (or mass buffer too small from "
                          "its offset, or the offset not a multiple of 4)", first, (unsigned long long)first + n, qc->tokens);
    VKH2O_CHECK(record_write(qc, cb, NULL, NULL, mass, off, first, n, true));
    vkh2o_barrier(qc->ctx, cb);
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_qcache_add_importance(vkh2o_qcache* qc, const vkh2o_buffer* mass, uint64_t mass_offset, uint32_t first,
                                             uint32_t n)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(qc->ctx, &cb));
    vkh2o_result r = vkh2o_cmd_qcache_add_importance(qc, cb, mass, mass_offset, first, n);
    return vkh2o_submit_wait_recorded(qc->ctx, cb, r);
}

vkh2o_result vkh2o_run_qcache_route(vkh2o_qcache* qc, vkh2o_qpolicy policy)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_context* ctx = qc->ctx;
    if ((unsigned)policy >= VKH2O_QPOLICY_COUNT)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: unknown policy %d", (int)policy);
    if (qc->blocks == 0)
        return VKH2O_OK;
    uint32_t nb = qc->blocks, th[3];
    if (nb > KVQ_MAX_BLOCKS && vkh2o_context_get_caps(ctx)->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "qcache route: %u blocks exceed the %u a CPU device can rank within its loop budget "
                          "(use a larger block_size)", nb, KVQ_MAX_BLOCKS);
    kvq_policy_thresholds(policy, kvq_routable(&qc->d, nb), th);

    /* 1. ranks, precisions and slots on the GPU; only the four counts come back */
    vkh2o_buffer *meta_new = NULL, *counts = NULL, *pools[3] = { NULL, NULL, NULL };
    vkh2o_kernel *k_route, *k_req;
    uint32_t spec[KVQ_SPEC_LAYOUT_COUNT];
    uint32_t cnt[4] = { 0 };
    VkCommandBuffer cb;
    vkh2o_result r = make_buffer(qc, vkh2o_buffer_get_size(qc->meta), "block metadata", &meta_new);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_create(ctx, 16, &counts);
    kvq_layout_spec(qc, KVQ_ROUTE_WG, spec);
    if (r == VKH2O_OK)
        r = vkh2o_kernel_get(ctx, "kvq_route", 3, spec, KVQ_SPEC_LAYOUT_COUNT, &k_route);
    kvq_layout_spec(qc, REQUANT_WG, spec);
    if (r == VKH2O_OK)
        r = vkh2o_kernel_get(ctx, "kvq_requant", 8, spec, KVQ_SPEC_LAYOUT_COUNT, &k_req);
    if (r == VKH2O_OK && (r = vkh2o_begin(ctx, &cb)) == VKH2O_OK) {
        struct kvq_route_push pc = { nb, qc->d.sink_blocks, qc->d.recent_blocks, th[0], th[1], th[2], 0 };
        vkh2o_binding b[3] = { vkh2o_bind(qc->meta), vkh2o_bind(meta_new), vkh2o_bind(counts) };
        r = vkh2o_dispatch(ctx, cb, k_route, b, 3, &pc, sizeof pc, vkh2o_div_up(nb, KVQ_ROUTE_WG), 1, 1);
        vkh2o_barrier(ctx, cb);
        pc.phase = 1;
        if (r == VKH2O_OK)
            r = vkh2o_dispatch(ctx, cb, k_route, b, 3, &pc, sizeof pc, 1, 1, 1);
        r = vkh2o_submit_wait_recorded(ctx, cb, r);
    }
    if (r == VKH2O_OK)
        r = vkh2o_buffer_download(counts, 0, cnt, sizeof cnt);
    if (r == VKH2O_OK && cnt[0] + cnt[1] + cnt[2] + cnt[3] != nb)
        r = vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "qcache: routing returned counts %u+%u+%u+%u for %u blocks", cnt[0],
                       cnt[1], cnt[2], cnt[3], nb);

    /* 2. pools sized to the counts (+ headroom for appends), re-quantise into them */
    uint32_t cap[3] = { cnt[0] + qc->d.headroom_blocks, cnt[1], cnt[2] };
    static const char* const pool_names[3] = { "FP16 pool", "INT8 pool", "INT4 pool" };
    for (int p = 0; p < 3 && r == VKH2O_OK; p++)
        if (cap[p])
            r = make_buffer(qc, 4ull * qc->slot_words[p] * cap[p], pool_names[p], &pools[p]);
    if (r == VKH2O_OK && (r = vkh2o_begin(ctx, &cb)) == VKH2O_OK) {
        struct kvq_requant_push pc = { .n_blocks = nb };
        for (int p = 0; p < 3; p++) {
            (&pc.ks_words[0])[p] = qc->sec_k.words[p];
            (&pc.vs_words[0])[p] = qc->sec_v.words[p];
            (&pc.slot_words_old[0])[p] = qc->slot_words[p];
            (&pc.slot_words_new[0])[p] = qc->slot_words[p];
        }
        vkh2o_binding b[8] = {
            vkh2o_bind(qc->meta), vkh2o_bind(meta_new),
            bind_or_dummy(qc, qc->pool[0]), bind_or_dummy(qc, qc->pool[1]), bind_or_dummy(qc, qc->pool[2]),
            bind_or_dummy(qc, pools[0]), bind_or_dummy(qc, pools[1]), bind_or_dummy(qc, pools[2]),
        };
        r = vkh2o_dispatch(ctx, cb, k_req, b, 8, &pc, sizeof pc, nb, qc->shape.kv_heads, 1);
        r = vkh2o_submit_wait_recorded(ctx, cb, r);
    }
    vkh2o_buffer_destroy(counts);
    if (r != VKH2O_OK) {
        vkh2o_buffer_destroy(meta_new);
        for (int p = 0; p < 3; p++)
            vkh2o_buffer_destroy(pools[p]);
        return r;
    }
    vkh2o_buffer_destroy(qc->meta);
    qc->meta = meta_new;
    for (int p = 0; p < 3; p++) {
        vkh2o_buffer_destroy(qc->pool[p]);
        qc->pool[p] = pools[p];
        qc->cap[p] = cap[p];
    }
    qc->fp16_used = cnt[0];
    memcpy(qc->count, cnt, sizeof cnt);
    return VKH2O_OK;
}

void vkh2o_qcache_get_stats(const vkh2o_qcache* qc, vkh2o_qcache_stats* out)
{
    memset(out, 0, sizeof *out);
    if (!qc)
        return;
    out->tokens = qc->tokens;
    out->blocks = qc->blocks;
    memcpy(out->blocks_by_prec, qc->count, sizeof qc->count);
    for (int p = 0; p < 3; p++) {
        out->slots_by_prec[p] = qc->cap[p];
        out->pool_bytes[p] = vkh2o_buffer_get_size(qc->pool[p]);
    }
    out->meta_bytes = vkh2o_buffer_get_size(qc->meta) + vkh2o_buffer_get_size(qc->imp) + vkh2o_buffer_get_size(qc->minmax);
    out->allocated_bytes = out->meta_bytes + out->pool_bytes[0] + out->pool_bytes[1] + out->pool_bytes[2];
    out->scratch_bytes = vkh2o_buffer_get_size(qc->keys) + vkh2o_buffer_get_size(qc->list) + vkh2o_buffer_get_size(qc->part) +
                         vkh2o_buffer_get_size(qc->dummy) + vkh2o_buffer_get_size(qc->mpart) +
                         vkh2o_buffer_get_size(qc->scores) + vkh2o_buffer_get_size(qc->rank);
}

vkh2o_result vkh2o_qcache_read_blocks(vkh2o_qcache* qc, uint32_t* prec, uint32_t* slot, uint32_t* first,
                                      uint32_t* count, float* imp_sum, float* imp_max)
{
    if (!qc)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (qc->blocks == 0)
        return VKH2O_OK;
    uint32_t* m = vkh2o_malloc(qc->ctx, 4ull * KVQ_META_WORDS * qc->blocks);
    if (!m)
        return vkh2o_fail(qc->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "qcache: out of host memory");
    vkh2o_result r = vkh2o_buffer_download(qc->meta, 0, m, 4ull * KVQ_META_WORDS * qc->blocks);
    for (uint32_t b = 0; r == VKH2O_OK && b < qc->blocks; b++) {
        const uint32_t* w = m + (size_t)b * KVQ_META_WORDS;
        if (prec) prec[b] = w[KVQ_META_PREC];
        if (slot) slot[b] = w[KVQ_META_SLOT];
        if (first) first[b] = w[KVQ_META_FIRST];
        if (count) count[b] = w[KVQ_META_COUNT];
        if (imp_sum) memcpy(&imp_sum[b], &w[KVQ_META_SUM], 4);
        if (imp_max) memcpy(&imp_max[b], &w[KVQ_META_MAX], 4);
    }
    free(m);
    return r;
}
