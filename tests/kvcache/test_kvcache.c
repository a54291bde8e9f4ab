/* The one KV cache (include/vkh2o/kvcache.h): desc resolution and byte figures without a device;
 * then on the device its contracts beyond one step against the reference: a step recorded once
 * and submitted again and again, bit-identical to steps recorded one by one (over the shapes of
 * the conformance registry, tools/conformance/conf_kvcache_defs.h), overflow, several layers,
 * allocation failures. The step-by-step conformance against ref/ref_kvcache.c (output, tiers,
 * rows, scores, stats over every precision, policy and layout) is the registry's kvcache.step
 * (vkh2o-conformance; ctest conf.kvcache.step). */
#include "vkh2o_test.h"
#include "kvcache_internal.h"
#include "conf_kvcache_defs.h"
#include "ref_kvcache.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vkh2o_kvcache_desc base_desc(uint32_t H, uint32_t kvl, uint32_t rope, uint32_t max_tokens)
{
    return (vkh2o_kvcache_desc){ .num_heads = H, .kv_lora_rank = kvl, .qk_rope_head_dim = rope, .qk_nope_head_dim = 16,
                                 .max_tokens = max_tokens };
}

/* ---- no device ---- */

static void test_resolve(void** state)
{
    (void)state;
    vkh2o_error err = { 0 };
    vkh2o_kvcache_desc d = base_desc(64, 512, 64, 4096), r;
    vkh2o_kvcache_plan p;
    /* all-zero policy fields: the full FP16 cache, no selection */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&d, &r, &p, &err), VKH2O_OK);
    assert_false(p.selects);
    assert_int_equal(p.slots[0], 4097);
    assert_int_equal(r.num_layers, 1);
    /* Kimi's 576-number row: bytes per token per tier, rows + scales + position and score */
    assert_int_equal(p.token_bytes[0], 1152 + 8);
    assert_int_equal(p.token_bytes[1], 576 + 2 * 4 + 8);      /* INT8: c_kv one group, k_pe one */
    assert_int_equal(p.token_bytes[2], 288 + 2 * 4 + 8);
    assert_int_equal(p.token_bytes[3], 144 + 18 * 4 + 8);     /* INT2: groups of 32: 16 + 2 */
    printf("kimi bytes/token: fp16 %u int8 %u int4 %u int2 %u\n", p.token_bytes[0], p.token_bytes[1], p.token_bytes[2],
           p.token_bytes[3]);
    /* uniform INT4 at a byte capacity: sinks + recents + 2 FP16 slots, the rest INT4 */
    d.n_sink = 4;
    d.n_recent = 16;
    d.precision = VKH2O_PRECISION_INT4;
    d.capacity_bytes = 1000000;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&d, &r, &p, &err), VKH2O_OK);
    assert_int_equal(p.slots[0], 22);
    assert_int_equal(p.slots[2], (1000000 - 22 * 1160) / 304);
    /* the arena: each pool in chunks of its own, at most one part-filled chunk per tier */
    assert_true(vkh2o_kvcache_plan_bytes(&p) <= d.capacity_bytes + 2ull * p.chunk_bytes + p.table_bytes);
    /* too small for the sinks and recents: BUDGET with the figure */
    d.capacity_bytes = 22 * 1160;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&d, &r, &p, &err), VKH2O_ERROR_BUDGET);
    assert_non_null(strstr(err.message, "capacity_bytes 25520"));
    /* tiered: fixed counts, then the fill tier */
    d.precision = VKH2O_PRECISION_TIERED;
    d.capacity_bytes = 0;
    d.capacity_tokens = 1000;
    d.tier_tokens[0] = 8;
    d.tier_tokens[1] = 100;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&d, &r, &p, &err), VKH2O_OK);
    assert_int_equal(p.slots[0], 4 + 16 + 1 + 8);
    assert_int_equal(p.slots[1], 100);
    assert_int_equal(p.slots[2], 1000 - (28 + 100));
    assert_int_equal(p.slots[3], 0);
    assert_int_equal(p.kept_tokens, 1000);
    /* refusals */
    vkh2o_kvcache_desc e = d;
    e.capacity_bytes = 5;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    e = d;
    e.precision = VKH2O_PRECISION_INT8;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "tier_tokens"));
    e = d;
    e.group_size[2] = 600;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    e.group_size[2] = 576;   /* the whole row: one group */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, &p, &err), VKH2O_OK);
    assert_int_equal(p.token_bytes[2], 288 + 4 + 8);
    e = d;
    e.capacity_tokens = 5000;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_BUDGET);
    e = d;
    e.decay = 0.5f;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    e = d;
    e.capacity_tokens = 30;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_BUDGET);
    /* n_protect: only with a capacity, above n_recent, below the tokens held after the sinks */
    e = d;
    e.n_protect = 200;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_OK);
    e.n_protect = 16;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "n_protect 16 is not above n_recent 16"));
    e.n_protect = 996;   /* 4 sinks + 996 reach the 1000 tokens held */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_BUDGET);
    assert_non_null(strstr(err.message, "reach the 1000 tokens"));
    e.n_protect = 995;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_OK);
    e.n_protect = 1u << 24;   /* the spec word's 24 bits */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "above the limit 16777215"));
    e = base_desc(64, 512, 64, 4096);   /* the full cache */
    e.n_protect = 32;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "n_protect 32 needs a cache that evicts"));
    e = base_desc(4, 63, 16, 100);   /* odd row */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    e = base_desc(4, 64, 16, 0);
    assert_int_equal(vkh2o_kvcache_desc_resolve(&e, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    /* tiers by bytes: capacity_bytes alone; each tier's virtual slots what the bytes could hold in it (+ 1 moving in) */
    vkh2o_kvcache_desc b = base_desc(64, 512, 64, 4096);
    b.n_sink = 4;
    b.n_recent = 16;
    b.precision = VKH2O_PRECISION_TIERED;
    b.capacity_bytes = 1000000;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&b, &r, &p, &err), VKH2O_OK);
    assert_true(p.by_bytes && p.selects);
    assert_int_equal(r.tier_mask, 0x7u);
    assert_int_equal(p.slots[0], 1000000 / 1160 + 2);
    assert_int_equal(p.slots[2], 1000000 / 304 + 2);
    assert_int_equal(p.slots[3], 0);
    uint32_t m[4];
    vkh2o_kvcache_plan_counts(&r, &p, 4096, m);
    uint64_t held = 20ull * 1160 + (uint64_t)m[0] * 1160 + (uint64_t)m[1] * 592 + (uint64_t)m[2] * 304;
    printf("kimi, 1 MB by bytes at 4096 tokens: middle fp16 %u int8 %u int4 %u, %llu bytes held\n", m[0], m[1], m[2],
           (unsigned long long)held);
    assert_true(held + 1160 <= 1000000 && held + 1160 + 304 > 1000000);   /* full, and not one INT4 more */
    assert_int_equal(m[0], 0);
    assert_int_equal(p.kept_tokens, 20 + m[1] + m[2]);
    vkh2o_kvcache_plan_counts(&r, &p, 100, m);   /* a short prompt fits at FP16 */
    assert_int_equal(m[0], 80);
    b.capacity_bytes = 21 * 1160 + 300;          /* no room for one INT4 middle token */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&b, NULL, NULL, &err), VKH2O_ERROR_BUDGET);
    b.capacity_bytes = 1000000;
    b.tier_mask = 0x10;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&b, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    b.tier_mask = 0x3;
    b.tier_tokens[1] = 5;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&b, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_kv_precision pr;
    assert_true(vkh2o_kv_precision_parse("tiered", &pr) && pr == VKH2O_PRECISION_TIERED);

    /* Kimi K2.6 expanded: 64 heads x (192 + 128) = 20480 numbers per token; one group per segment
     * (k_nope, k_pe, V: 192 per row) at INT8 / INT4, groups of 32 at INT2 (4 + 2 + 4 per head) */
    vkh2o_kvcache_desc x = base_desc(64, 512, 64, 4096);
    x.qk_nope_head_dim = 128;
    x.v_head_dim = 128;
    x.layout = VKH2O_LAYOUT_EXPANDED;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&x, &r, &p, &err), VKH2O_OK);
    assert_int_equal(vkh2o_kvcache_row_numbers(&r), 20480);
    assert_true(fabsf(r.scale - 1.0f / sqrtf(192.0f)) < 1e-7f);
    assert_int_equal(p.token_bytes[0], 40960 + 8);
    assert_int_equal(p.token_bytes[1], 20480 + 192 * 4 + 8);
    assert_int_equal(p.token_bytes[2], 10240 + 192 * 4 + 8);
    assert_int_equal(p.token_bytes[3], 5120 + 640 * 4 + 8);
    assert_int_equal(p.groups[3], 640);
    printf("kimi expanded bytes/token: fp16 %u int8 %u int4 %u int2 %u\n", p.token_bytes[0], p.token_bytes[1], p.token_bytes[2],
           p.token_bytes[3]);
    x.storage = VKH2O_DTYPE_F32;   /* f32 top tier; the integer tiers as before */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&x, &r, &p, &err), VKH2O_OK);
    assert_int_equal(p.token_bytes[0], 81920 + 8);
    assert_int_equal(p.token_bytes[1], 20480 + 192 * 4 + 8);
    vkh2o_kvcache_desc lf = base_desc(64, 512, 64, 4096);
    lf.storage = VKH2O_DTYPE_F32;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&lf, &r, &p, &err), VKH2O_OK);
    assert_int_equal(p.token_bytes[0], 2304 + 8);
    assert_int_equal(r.layout, VKH2O_LAYOUT_LATENT);
    printf("kimi f32 top tier bytes/token: latent %u, expanded %u\n", p.token_bytes[0], 81928u);
    /* a byte capacity in expanded tokens: sinks + recents + 2 FP16 slots, the rest INT4 */
    x.storage = VKH2O_DTYPE_F16;
    x.n_sink = 4;
    x.n_recent = 16;
    x.precision = VKH2O_PRECISION_INT4;
    x.capacity_bytes = 10000000;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&x, &r, &p, &err), VKH2O_OK);
    assert_int_equal(p.slots[0], 22);
    assert_int_equal(p.slots[2], (10000000 - 22 * 40968) / 11016);
    assert_true(vkh2o_kvcache_plan_bytes(&p) <= x.capacity_bytes + 2ull * p.chunk_bytes + p.table_bytes);
    /* groups: up to the longest segment (128), or the whole row */
    vkh2o_kvcache_desc y = x;
    y.group_size[2] = 129;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "group_size[int4] 129"));
    y.group_size[2] = 20480;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, &p, &err), VKH2O_OK);
    assert_int_equal(p.token_bytes[2], 10240 + 4 + 8);
    y.group_size[2] = 48;   /* k_nope 48 + 48 + 32, k_pe 48 + 16, V 48 + 48 + 32: 8 per head */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, &p, &err), VKH2O_OK);
    assert_int_equal(p.groups[2], 64 * 8);
    /* refusals */
    y = x;
    y.v_head_dim = 0;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "v_head_dim (0)"));
    y = x;
    y.num_heads = 200;   /* 64000 numbers per token: a device's loop budget may refuse it at create
                            (test_profile), the desc does not */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, NULL, &err), VKH2O_OK);
    y.num_heads = 1024;
    y.qk_nope_head_dim = 600;
    y.qk_rope_head_dim = 64;
    y.v_head_dim = 600;   /* 1024 x 1264 = 1294336 numbers per token: above 2^20 */
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "1294336"));
    y = x;
    y.storage = VKH2O_DTYPE_BF16;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "storage"));
    y = x;
    y.layout = (vkh2o_kv_layout)7;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, NULL, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "layout 7"));
    /* an odd expanded row: 3 x (12 + 4 + 11) = 81 numbers, 41 words at FP16 */
    y = base_desc(3, 0, 4, 100);
    y.qk_nope_head_dim = 12;
    y.v_head_dim = 11;
    y.layout = VKH2O_LAYOUT_EXPANDED;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&y, &r, &p, &err), VKH2O_OK);
    assert_int_equal(p.token_bytes[0], 41 * 4 + 8);
    assert_false(vkh2o_kv_precision_parse("int3", &pr));
}

/* ---- the device against the reference ---- */

/* the row's two inputs of a step or prefill: LATENT ckv and kpe, EXPANDED k and v */
static bool is_expanded(const vkh2o_kvcache* c) { return vkh2o_kvcache_get_desc(c)->layout == VKH2O_LAYOUT_EXPANDED; }
static void step_inputs(vkh2o_kvcache_step* s, const vkh2o_kvcache* c, const vkh2o_buffer* a, uint64_t ao, const vkh2o_buffer* b,
                        uint64_t bo)
{
    if (is_expanded(c)) {
        s->k = a, s->k_offset = ao, s->v = b, s->v_offset = bo;
    } else {
        s->ckv = a, s->ckv_offset = ao, s->kpe = b, s->kpe_offset = bo;
    }
}
static void prefill_inputs(vkh2o_kvcache_prefill* p, const vkh2o_kvcache* c, const vkh2o_buffer* a, uint64_t ao,
                           const vkh2o_buffer* b, uint64_t bo)
{
    if (is_expanded(c)) {
        p->k = a, p->k_offset = ao, p->v = b, p->v_offset = bo;
    } else {
        p->ckv = a, p->ckv_offset = ao, p->kpe = b, p->kpe_offset = bo;
    }
}

typedef vt_snap snap;   /* tests/common: vt_snap_read, vt_snap_free */

/* one step recorded once and submitted n times against n steps recorded one by one */
static void test_record_once(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    const uint64_t seed = vt_seed("kvcache record once");
    vt_rng_seed(&rng, seed);
    /* shapes of the conformance registry's table (tools/conformance/conf_kvcache_defs.h); the
     * default run takes one shape, of the eleven latent ones for an even seed and of the six
     * expanded ones (the last six) for an odd one, turning with the seed (each compiles its own
     * kernels), the full run all */
    static const char* const names[] = { "fp16.full", "fp16.h2o_sum", "int4.decay_bytes", "tiered.sum",
                                         "tiered.streaming", "tiered.mean_11heads", "tiered.int4_row_int8_g7",
                                         "tiered.bytes", "tiered.bytes_int2", "tiered.bytes_over", "f32.tiered_bytes_decay",
                                         "exp.fp16.full_odd", "exp.int8.h2o_mean", "exp.tiered.sum_g5_8",
                                         "exp.tiered.bytes_int2_tova_odd", "exp.f32.int4_decay_bytes", "exp.int2.streaming_row" };
    for (size_t ci = 0; ci < sizeof names / sizeof names[0]; ci++) {
        if (!vt_pick(seed, ci >= 11, 2) || !vt_pick(seed / 2, ci < 11 ? ci : ci - 11, ci < 11 ? 11 : 6)) continue;
        const conf_kv_def* kc = NULL;
        for (size_t i = 0; i < sizeof conf_kv_defs / sizeof conf_kv_defs[0]; i++)
            if (!strcmp(conf_kv_defs[i].name, names[ci])) kc = &conf_kv_defs[i];
        if (!kc) fail_msg("no shape %s in conf_kvcache_defs.h", names[ci]);
        vkh2o_kvcache_desc d = kc->d;
        d.num_heads = kc->H;
        d.kv_lora_rank = kc->kvl;
        d.qk_rope_head_dim = kc->rope;
        d.max_tokens = kc->max_tokens;
        vkh2o_kvcache *a, *b;
        assert_int_equal(vkh2o_kvcache_create(ctx, &d, &a), VKH2O_OK);
        assert_int_equal(vkh2o_kvcache_create(ctx, &d, &b), VKH2O_OK);
        const ref_kvc_config rc = ref_kvc_config_of(a, 0);
        const uint32_t H = kc->H, W = ref_kvc_row(&rc), WA = ref_kvc_first(&rc), QW = ref_kvc_qw(&rc), OW = ref_kvc_ow(&rc);
        const uint32_t N = 30;
        float* q = malloc(4ull * H * QW);
        float* row = malloc(4ull * W);
        vt_fill_normal(&rng, q, (size_t)H * QW, 0.6f);
        vt_fill_normal(&rng, row, W, 1.0f);
        vkh2o_buffer* bq = vt_upload_f32(q, (size_t)H * QW);
        vkh2o_buffer* br = vt_upload_f32(row, W);
        vkh2o_buffer* oa = vt_buffer(4ull * H * OW);
        vkh2o_buffer* ob = vt_buffer(4ull * H * OW);
        vkh2o_kvcache_step sa = { .q = bq, .out = oa };
        step_inputs(&sa, a, br, 0, br, 4ull * WA);
        vkh2o_kvcache_step sb = sa;
        sb.out = ob;
        /* a: one recording in the test's own command buffer, submitted N times */
        VkCommandPool pool;
        VkCommandBuffer cb = vt_own_cb(&pool);
        assert_int_equal(vkh2o_cmd_kvcache_step(a, cb, &sa), VKH2O_OK);
        assert_int_equal(ctx->vk.vkEndCommandBuffer(cb), VK_SUCCESS);
        uint64_t mark = vkh2o_context_mark(ctx);
        VkFence fence;
        VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
        assert_int_equal(ctx->vk.vkCreateFence(ctx->device, &fci, NULL, &fence), VK_SUCCESS);
        for (uint32_t i = 0; i < N; i++) {
            VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb };
            assert_int_equal(ctx->vk.vkQueueSubmit(ctx->queue, 1, &si, fence), VK_SUCCESS);
            assert_int_equal(ctx->vk.vkWaitForFences(ctx->device, 1, &fence, VK_TRUE, UINT64_MAX), VK_SUCCESS);
            assert_int_equal(ctx->vk.vkResetFences(ctx->device, 1, &fence), VK_SUCCESS);
        }
        /* b: N recordings */
        for (uint32_t i = 0; i < N; i++)
            assert_int_equal(vkh2o_run_kvcache_step(b, &sb), VKH2O_OK);
        snap x = { 0 }, y = { 0 };
        vt_snap_read(a, 0, &x);
        vt_snap_read(b, 0, &y);
        assert_int_equal(x.len, y.len);
        assert_memory_equal(x.pos, y.pos, 4ull * x.len);
        assert_memory_equal(x.score, y.score, 4ull * x.len);
        assert_memory_equal(x.tier, y.tier, x.len);
        assert_memory_equal(x.rows, y.rows, 4ull * x.len * W);
        float* fa = malloc(4ull * H * OW);
        float* fb = malloc(4ull * H * OW);
        vt_download_f32(oa, fa, (size_t)H * OW);
        vt_download_f32(ob, fb, (size_t)H * OW);
        assert_memory_equal(fa, fb, 4ull * H * OW);
        vkh2o_kvcache_stats st;
        assert_int_equal(vkh2o_kvcache_read_stats(a, 0, &st), VKH2O_OK);
        assert_int_equal(st.position, N);
        printf("%s: %u submissions of one recording = %u recordings (%u tokens held)\n", kc->name, N, N, x.len);
        free(fa);
        free(fb);
        vt_snap_free(&x);
        vt_snap_free(&y);
        ctx->vk.vkDestroyFence(ctx->device, fence, NULL);
        ctx->vk.vkDestroyCommandPool(ctx->device, pool, NULL);
        assert_int_equal(vkh2o_context_retire(ctx, mark), VKH2O_OK);
        free(q);
        free(row);
        vkh2o_buffer_destroy(bq);
        vkh2o_buffer_destroy(br);
        vkh2o_buffer_destroy(oa);
        vkh2o_buffer_destroy(ob);
        vkh2o_kvcache_destroy(a);
        vkh2o_kvcache_destroy(b);
    }
    vt_check_validation();
}

/* past max_tokens a step is refused on the device and leaves the cache as it was */
static void test_overflow(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_kvcache_desc d = base_desc(2, 6, 4, 5);
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
    float q[20] = { 0.5f }, row[10] = { 1.0f };
    vkh2o_buffer* bq = vt_upload_f32(q, 20);
    vkh2o_buffer* br = vt_upload_f32(row, 10);
    vkh2o_kvcache_step s = { .q = bq, .ckv = br, .kpe = br, .kpe_offset = 24 };
    for (int i = 0; i < 7; i++)
        assert_int_equal(vkh2o_run_kvcache_step(c, &s), VKH2O_OK);
    vkh2o_kvcache_stats st;
    assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
    assert_int_equal(st.position, 5);
    assert_int_equal(st.len, 5);
    assert_int_equal(st.overflow, 2);
    /* the full cache does no score work */
    float sc[8];
    uint32_t pos[8];
    vkh2o_kvcache_snapshot ks = { .positions = pos, .scores = sc };
    assert_int_equal(vkh2o_kvcache_read_snapshot(c, 0, &ks), VKH2O_OK);
    for (uint32_t i = 0; i < ks.len; i++) {
        assert_int_equal(pos[i], i);
        assert_true(sc[i] == 0.0f);
    }
    assert_false(vkh2o_kvcache_get_plan(c)->selects);
    /* a bad buffer is refused before anything is recorded */
    s.q_offset = 2;
    assert_int_equal(vkh2o_run_kvcache_step(c, &s), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(br);
    vkh2o_kvcache_destroy(c);
    vt_check_validation();
}

/* The arena's bookkeeping after every prefill and step: each tier is dense (its count of
 * tokens with distinct positions, the live range a step reads is the count, stats.live says the
 * same), and under tiers by bytes every chunk is either mapped to exactly the chunks a tier's
 * tokens need (the top tier's and the next append's) or on the free stack, none twice, none
 * asked for while none was free: the full cache, pools of INT4 by a token capacity, and tiers
 * by bytes. */
static void live_case(vkh2o_kvcache_desc d, uint32_t prefill, uint32_t steps, const char* what)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed(what));
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(c);
    const uint32_t H = d.num_heads, W = d.kv_lora_rank + d.qk_rope_head_dim, S = pl->total_slots;
    float* rows = malloc(sizeof(float) * prefill * W);
    float* q = malloc(sizeof(float) * H * W);
    float* mass = malloc(sizeof(float) * prefill);
    uint32_t* pos = malloc(4ull * (S + 1));
    assert_non_null(rows);
    assert_non_null(q);
    assert_non_null(mass);
    assert_non_null(pos);
    vt_fill_normal(&rng, rows, (size_t)prefill * W, 1.0f);
    for (uint32_t i = 0; i < prefill; i++) mass[i] = vt_uniform(&rng) * 2.0f;
    vkh2o_buffer* br = vt_upload_f32(rows, (size_t)prefill * W);
    vkh2o_buffer* bm = vt_upload_f32(mass, prefill);
    vkh2o_kvcache_prefill pf = { .n = prefill, .mass = bm };
    prefill_inputs(&pf, c, br, 0, br, 4ull * prefill * d.kv_lora_rank);
    assert_int_equal(vkh2o_run_kvcache_prefill(c, &pf), VKH2O_OK);
    vkh2o_buffer_destroy(br);
    uint32_t shrunk = 0, live_sum = 0, held = 0;
    for (uint32_t t = 0; t <= steps; t++) {
        if (t > 0) {
            vt_fill_normal(&rng, q, (size_t)H * W, 0.7f);
            vt_fill_normal(&rng, rows, W, 1.0f);
            vkh2o_buffer* bq = vt_upload_f32(q, (size_t)H * W);
            vkh2o_buffer* bs = vt_upload_f32(rows, W);
            vkh2o_kvcache_step s = { .q = bq };
            step_inputs(&s, c, bs, 0, bs, 4ull * d.kv_lora_rank);
            assert_int_equal(vkh2o_run_kvcache_step(c, &s), VKH2O_OK);
            vkh2o_buffer_destroy(bq);
            vkh2o_buffer_destroy(bs);
        }
        kvc_layer_copy lc;
        assert_int_equal(vkh2o_kvcache_copy_layer(c, 0, &lc), VKH2O_OK);
        vkh2o_kvcache_stats ks;
        assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &ks), VKH2O_OK);
        live_sum = 0;
        uint32_t n = 0, mapped = 0;
        for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
            if (lc.st[KVC_ST_EXT + k] != lc.count[k] || ks.live[k] != ks.by_tier[k] || ks.by_tier[k] != lc.count[k])
                fail_msg("%s, %s %u: tier %u's live range %u, stats %u / %u, count %u", what, t ? "step" : "prefill", t, k,
                         lc.st[KVC_ST_EXT + k], ks.live[k], ks.by_tier[k], lc.count[k]);
            for (uint32_t j = 0; j < lc.count[k]; j++)
                pos[n++] = lc.tok[k][(size_t)j * c->tw[k] + c->row_words[k]];
            live_sum += lc.count[k];
            if (pl->by_bytes) {
                const uint64_t need = (((uint64_t)lc.count[k] + (k == 0)) * c->tw[k] + (1u << c->cs) - 1) >> c->cs;
                if (pl->slots[k] && lc.st[KVC_ST_MAPPED + k] != need)
                    fail_msg("%s, %s %u: tier %u maps %u chunks for %u tokens, needs %llu", what, t ? "step" : "prefill", t, k,
                             lc.st[KVC_ST_MAPPED + k], lc.count[k], (unsigned long long)need);
                mapped += lc.st[KVC_ST_MAPPED + k];
            }
        }
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = i + 1; j < n; j++)
                if (pos[i] == pos[j])
                    fail_msg("%s, %s %u: position %u held twice", what, t ? "step" : "prefill", t, pos[i]);
        if (pl->by_bytes) {
            assert_int_equal(lc.st[KVC_ST_FAULT], 0);
            assert_int_equal(mapped + lc.st[KVC_ST_FREE], pl->chunks);
            assert_int_equal(ks.chunks_used, mapped);
            /* every chunk once: the tables' mapped entries and the free stack */
            uint32_t* tab = malloc(4ull * c->tab_words);
            char* seen = calloc(pl->chunks, 1);
            assert_non_null(tab);
            assert_non_null(seen);
            assert_int_equal(vkh2o_buffer_download(c->tabs, 0, tab, 4ull * c->tab_words), VKH2O_OK);
            uint32_t off = 0;
            for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
                for (uint32_t i = 0; i < lc.st[KVC_ST_MAPPED + k]; i++) {
                    assert_true(tab[off + i] < pl->chunks && !seen[tab[off + i]]);
                    seen[tab[off + i]] = 1;
                }
                off += c->vchunks[k];
            }
            for (uint32_t i = 0; i < lc.st[KVC_ST_FREE]; i++) {
                assert_true(tab[off + i] < pl->chunks && !seen[tab[off + i]]);
                seen[tab[off + i]] = 1;
            }
            free(tab);
            free(seen);
        }
        vkh2o_kvcache_copy_free(&lc);
        shrunk += live_sum < S - 1;   /* (a count for the log) */
        held = ks.len;
    }
    printf("%s: %u slots; after %u steps %u live, %u held; %u chunks of %u bytes\n", what, S, steps, live_sum, held,
           pl->chunks, pl->chunk_bytes);
    fflush(stdout);
    assert_int_equal(live_sum, held);
    free(rows);
    free(q);
    free(mass);
    free(pos);
    vkh2o_buffer_destroy(bm);
    vkh2o_kvcache_destroy(c);
    vt_check_validation();
}

static void test_live_ranges(void** state)
{
    (void)state;
    /* the full run every case; the default run the full cache or the INT4 pools, and one of the
     * two cases of tiers by bytes (the full cache with the protected window), turning with the
     * seed (each compiles its cache's kernels) */
    const uint64_t seed = vt_seed("live ranges, which cases");
    vkh2o_kvcache_desc d = base_desc(2, 30, 6, 300);
    if (vt_pick(seed, 1, 2))
        live_case(d, 20, 60, "live ranges, the full cache");
    d.n_sink = 2;
    d.n_recent = 5;
    d.precision = VKH2O_PRECISION_INT4;
    d.capacity_tokens = 40;
    if (vt_pick(seed, 0, 2))
        live_case(d, 20, 120, "live ranges, int4 pools");
    d.capacity_tokens = 0;
    d.precision = VKH2O_PRECISION_TIERED;
    d.capacity_bytes = 3000;
    if (vt_pick(seed, 0, 2))
        live_case(d, 30, 200, "live ranges, tiers by bytes");
    d.tier_mask = 0x5;   /* FP16 and INT4 */
    d.n_protect = 20;
    if (vt_pick(seed, 1, 2))
        live_case(d, 30, 200, "live ranges, tiers by bytes to int4, a protected window");
}

/* A cache of three layers: steps and prefills of layers 0 and 2 leave layer 1 empty and give each
 * layer what a one-layer cache given the same inputs holds, bit for bit. LATENT rows of 30 + 6, or
 * EXPANDED 3 x (12 + 4 + 10) with an f32 top tier. */
static void layers_case(bool expanded)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed(expanded ? "kvcache layers, expanded" : "kvcache layers"));
    vkh2o_kvcache_desc d = base_desc(3, 30, 6, 60);
    d.n_sink = 2;
    d.n_recent = 3;
    d.capacity_bytes = 1400;
    d.precision = VKH2O_PRECISION_TIERED;
    if (expanded) {
        d.layout = VKH2O_LAYOUT_EXPANDED;
        d.qk_rope_head_dim = 4;
        d.qk_nope_head_dim = 12;
        d.v_head_dim = 10;
        d.storage = VKH2O_DTYPE_F32;
        d.capacity_bytes = 3000;
    }
    vkh2o_kvcache *multi, *one[2];
    vkh2o_kvcache_desc dm = d;
    dm.num_layers = 3;
    assert_int_equal(vkh2o_kvcache_create(ctx, &dm, &multi), VKH2O_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(vkh2o_kvcache_create(ctx, &d, &one[i]), VKH2O_OK);
    const ref_kvc_config rc = ref_kvc_config_of(multi, 0);
    const uint32_t H = 3, W = ref_kvc_row(&rc), WA = ref_kvc_first(&rc), QW = ref_kvc_qw(&rc), OW = ref_kvc_ow(&rc);
    float rows[8 * 78], q[3 * 36];
    vkh2o_buffer* bo = vt_buffer(4ull * H * OW);
    vkh2o_buffer* bo2 = vt_buffer(4ull * H * OW);
    for (int step = 0; step < 24; step++) {
        const uint32_t li = step % 2, layer = li ? 2 : 0;
        vt_fill_normal(&rng, q, H * QW, 0.7f);
        vt_fill_normal(&rng, rows, 8 * W, 1.0f);
        vkh2o_buffer* bq = vt_upload_f32(q, H * QW);
        vkh2o_buffer* br = vt_upload_f32(rows, 8 * W);
        if (step < 2) {   /* a prefill of 8 tokens into each layer first */
            float mass[8];
            for (int i = 0; i < 8; i++) mass[i] = vt_uniform(&rng) * 3.0f;
            vkh2o_buffer* bm = vt_upload_f32(mass, 8);
            vkh2o_kvcache_prefill p = { .layer = layer, .n = 8, .mass = bm };
            prefill_inputs(&p, multi, br, 0, br, 4ull * 8 * WA);
            assert_int_equal(vkh2o_run_kvcache_prefill(multi, &p), VKH2O_OK);
            p.layer = 0;
            assert_int_equal(vkh2o_run_kvcache_prefill(one[li], &p), VKH2O_OK);
            vkh2o_buffer_destroy(bm);
        } else {
            vkh2o_kvcache_step s = { .layer = layer, .q = bq, .out = bo };
            step_inputs(&s, multi, br, 0, br, 4ull * WA);
            assert_int_equal(vkh2o_run_kvcache_step(multi, &s), VKH2O_OK);
            s.layer = 0;
            s.out = bo2;
            assert_int_equal(vkh2o_run_kvcache_step(one[li], &s), VKH2O_OK);
            float a[90], b[90];
            vt_download_f32(bo, a, H * OW);
            vt_download_f32(bo2, b, H * OW);
            assert_memory_equal(a, b, 4ull * H * OW);
        }
        vkh2o_buffer_destroy(bq);
        vkh2o_buffer_destroy(br);
    }
    for (uint32_t li = 0; li < 2; li++) {
        snap x = { 0 }, y = { 0 };
        vt_snap_read(multi, li ? 2 : 0, &x);
        vt_snap_read(one[li], 0, &y);
        assert_int_equal(x.len, y.len);
        assert_memory_equal(x.pos, y.pos, 4ull * x.len);
        assert_memory_equal(x.score, y.score, 4ull * x.len);
        assert_memory_equal(x.tier, y.tier, x.len);
        assert_memory_equal(x.rows, y.rows, 4ull * W * x.len);
        vt_snap_free(&x);
        vt_snap_free(&y);
    }
    vkh2o_kvcache_stats st;
    assert_int_equal(vkh2o_kvcache_read_stats(multi, 1, &st), VKH2O_OK);
    assert_int_equal(st.len, 0);
    assert_int_equal(st.position, 0);
    assert_int_equal(vkh2o_kvcache_read_stats(multi, 3, &st), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer_destroy(bo);
    vkh2o_buffer_destroy(bo2);
    vkh2o_kvcache_destroy(multi);
    vkh2o_kvcache_destroy(one[0]);
    vkh2o_kvcache_destroy(one[1]);
    vt_check_validation();
}

static void test_layers(void** state)
{
    (void)state;
    /* the full run both layouts; the default run one, turning with the seed (each compiles its
     * cache's kernels; both layouts run in the default run's other tests) */
    const uint64_t seed = vt_seed("kvcache layers, which layout");
    if (vt_pick(seed, 0, 2))
        layers_case(false);
    if (vt_pick(seed, 1, 2))
        layers_case(true);
}

/* Every host allocation and Vulkan create / allocate of a cache's life (create, prefill, steps,
 * statistics, snapshot, destroy) failed in turn (the full run; the default run a part: the first,
 * the last and one in sixteen): each call reports out of memory and hands back
 * nothing, or succeeds with the fault-free numbers; device memory returns to where it was; the
 * context then runs the scenario again with the fault-free result. */
typedef struct fault_out {
    uint32_t len, pos[40];
    float score[40];
    float out[3 * 30];
    uint32_t nout;           /* numbers of out written: heads x (LATENT kv_lora_rank, EXPANDED v_head_dim) */
} fault_out;

/* LATENT: 3 heads, rows of 30 + 6; EXPANDED (f32 top tier): 3 heads x (12 + 4 + 10) */
static vkh2o_result fault_run(vkh2o_context* ctx, fault_out* o, bool expanded)
{
    vkh2o_kvcache_desc d = base_desc(3, 30, 6, 40);
    d.n_sink = 1;
    d.n_recent = 2;
    d.capacity_bytes = 600;   /* 3 FP16 top tokens, room for one more, about 7 INT4: the 11 positions do not all fit */
    d.precision = VKH2O_PRECISION_TIERED;
    /* the row's inputs: a [n][WA] from the front of one buffer, b [n][WB] from byte boff */
    uint32_t WA = 30, WB = 6;
    uint64_t boff = 4 * 150;
    if (expanded) {
        d.layout = VKH2O_LAYOUT_EXPANDED;
        d.qk_rope_head_dim = 4;
        d.qk_nope_head_dim = 12;
        d.v_head_dim = 10;
        d.storage = VKH2O_DTYPE_F32;
        d.capacity_bytes = 1870;   /* 3 f32 top tokens (320 bytes each), room for one more, 7 INT4 (84) */
        WA = 48, WB = 30, boff = 4 * 240;
    }
    float rows[6 * 78], q[3 * 36], mass[6];
    for (int i = 0; i < 6 * 78; i++) rows[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < 3 * 36; i++) q[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 6; i++) mass[i] = 1.0f + (float)((i * 3) % 5);
    vkh2o_kvcache* c = NULL;
    vkh2o_buffer *br = NULL, *bq = NULL, *bm = NULL, *bo = NULL;
    vkh2o_result r = vkh2o_kvcache_create(ctx, &d, &c);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, sizeof rows, &br);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, sizeof q, &bq);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, sizeof mass, &bm);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, sizeof o->out, &bo);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(br, 0, rows, sizeof rows);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(bq, 0, q, sizeof q);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(bm, 0, mass, sizeof mass);
    if (r == VKH2O_OK) {
        vkh2o_kvcache_prefill p = { .n = 5, .mass = bm };
        prefill_inputs(&p, c, br, 0, br, boff);
        r = vkh2o_run_kvcache_prefill(c, &p);
    }
    for (int i = 0; r == VKH2O_OK && i < 6; i++) {
        vkh2o_kvcache_step s = { .q = bq, .out = bo };
        step_inputs(&s, c, br, 4ull * WA * (i % 5), br, boff + 4ull * WB * (i % 3));
        r = vkh2o_run_kvcache_step(c, &s);
    }
    o->nout = expanded ? 3 * 10 : 3 * 30;
    if (r == VKH2O_OK) r = vkh2o_buffer_download(bo, 0, o->out, 4ull * o->nout);
    vkh2o_kvcache_snapshot sn = { .positions = o->pos, .scores = o->score };
    if (r == VKH2O_OK) r = vkh2o_kvcache_read_snapshot(c, 0, &sn);
    o->len = sn.len;
    vkh2o_buffer_destroy(br);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(bm);
    vkh2o_buffer_destroy(bo);
    vkh2o_kvcache_destroy(c);
    return r;
}

static void fault_same(const fault_out* a, const fault_out* b, uint64_t n)
{
    if (a->len != b->len || memcmp(a->pos, b->pos, 4 * a->len) || memcmp(a->score, b->score, 4 * a->len) ||
        a->nout != b->nout || memcmp(a->out, b->out, 4ull * a->nout))
        fail_msg("point %llu: a result differs from the fault-free run", (unsigned long long)n);
}

static void fault_sweep(bool expanded)
{
    vkh2o_context* ctx = vt_ctx_new(0);
    const vkh2o_memory_stats mem0 = vkh2o_context_get_memory_stats(ctx);
    fault_out want, got;
    memset(&want, 0, sizeof want);
    /* once unarmed first: what the context keeps between runs (without push descriptors, the
     * descriptor arena's pools) then exists for the counted run as for every later one */
    assert_int_equal(fault_run(ctx, &want, expanded), VKH2O_OK);
    vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
    assert_int_equal(fault_run(ctx, &want, expanded), VKH2O_OK);
    const uint64_t total = vkh2o_fault_points(ctx, VKH2O_FAULT_ALL);
    assert_true(want.len > 0 && want.len < 11);
    uint32_t failed = 0, succeeded = 0, swept = 0;
    /* every point compiles the cache's kernels again: the default run takes the first, the last
     * and one in sixteen between (a part that changes with the seed), the full run every point */
    const uint64_t seed = vt_seed(expanded ? "kvcache fault sweep, expanded" : "kvcache fault sweep");
    for (uint64_t n = 1; n <= total; n++) {
        if (n != 1 && n != total && !vt_pick(seed, n, 16))
            continue;
        swept++;
        vkh2o_kernels_destroy(ctx);
        vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, n);
        memset(&got, 0, sizeof got);
        vkh2o_result r = fault_run(ctx, &got, expanded);
        if (!vkh2o_fault_fired(ctx))
            fail_msg("point %llu of %llu did not fire", (unsigned long long)n, (unsigned long long)total);
        if (r == VKH2O_OK) {
            fault_same(&want, &got, n);
            succeeded++;
        } else {
            if (r != VKH2O_ERROR_OUT_OF_HOST_MEMORY && r != VKH2O_ERROR_OUT_OF_DEVICE_MEMORY)
                fail_msg("point %llu (%s): %s: %s", (unsigned long long)n, ctx->fault.what, vkh2o_result_string(r),
                         vkh2o_last_error(ctx));
            failed++;
        }
        vkh2o_memory_stats m = vkh2o_context_get_memory_stats(ctx);
        if (m.device_bytes != mem0.device_bytes || m.device_allocations != mem0.device_allocations)
            fail_msg("point %llu: %llu device bytes left (before: %llu)", (unsigned long long)n,
                     (unsigned long long)m.device_bytes, (unsigned long long)mem0.device_bytes);
        vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
        memset(&got, 0, sizeof got);
        assert_int_equal(fault_run(ctx, &got, expanded), VKH2O_OK);
        fault_same(&want, &got, n);
    }
    printf("kvcache fault sweep (%s): %u of %llu points, %u failed with out of memory, %u succeeded anyway\n",
           expanded ? "expanded, f32 top tier" : "latent", swept, (unsigned long long)total, failed, succeeded);
    assert_int_equal(failed + succeeded, swept);
    assert_true(vt_full() ? swept == total : swept >= 2);
    vkh2o_context_destroy(ctx);
}

static void test_faults(void** state)
{
    (void)state;
    vt_ctx();
    fault_sweep(false);
    if (vt_full())   /* the same create / record / read paths with the expanded kernels' spec constants */
        fault_sweep(true);
}

/* An MLA layer's decode (vkh2o_cmd_mla_decode) and prefill (vkh2o_cmd_mla_prefill) against an
 * expanded kvcache and against a latent one with the same policy: the same layer output up to
 * rounding, and the same tokens kept. The latent path absorbs the query through W_uk and applies
 * W_uv after attention; the expanded one attends over k_nope = kv_b_proj . c_kv and V per head:
 * with f32 top-tier rows the two differ only by the f32 order of the products (nmse <= 1e-9,
 * observed ~1e-13); with fp16 rows each rounds a different row (c_kv vs K, V: nmse <= 1e-5,
 * observed ~1e-7). The layer: Kimi's config cut to 3 heads, nope 16, rope 8, v 12, kv_lora 24. */
typedef struct layer_pair_case {
    const char* name;
    vkh2o_dtype storage;
    uint32_t capacity, n_sink, n_recent;
    double bound;
} layer_pair_case;

static void layer_pair(const layer_pair_case* lc, uint64_t seed)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    vkh2o_mla_config cfg = vt_small_mla_config(200, 20, 24);
    ref_mla_weights w;
    assert_int_equal(ref_mla_random_weights(&cfg, VKH2O_DTYPE_BF16, vt_u64(&rng), &w), 0);
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw;
    if (vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err) != VKH2O_OK)
        fail_msg("wrap: %s", err.message);
    vkh2o_mla_layer* layer;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = 32, .max_decode_tokens = 4 },
                                            &layer),
                     VKH2O_OK);
    vkh2o_kvcache* c[2];   /* latent, expanded */
    for (int i = 0; i < 2; i++) {
        vkh2o_kvcache_desc d = { .max_tokens = 32, .storage = lc->storage, .capacity_tokens = lc->capacity, .n_sink = lc->n_sink,
                                 .n_recent = lc->n_recent };
        vkh2o_kvcache_desc_from_mla(&cfg, &d);
        d.layout = i ? VKH2O_LAYOUT_EXPANDED : VKH2O_LAYOUT_LATENT;
        assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c[i]), VKH2O_OK);
    }
    const uint32_t P = 13, hid = cfg.hidden_size;
    const uint32_t chunks[] = { 1, 3, 1, 2, 4 };
    float* hidden = malloc(4ull * P * hid);
    float* out[2] = { malloc(4ull * P * hid), malloc(4ull * P * hid) };
    vt_fill_normal(&rng, hidden, (size_t)P * hid, 1.0f);
    for (int i = 0; i < 2; i++)
        assert_int_equal(vkh2o_host_mla_prefill(layer, c[i], 0, hidden, P, out[i]), VKH2O_OK);
    assert_memory_equal(out[0], out[1], 4ull * P * hid);   /* the forward does not depend on the cache */
    uint32_t pos = P;
    double worst = 0.0;
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        const uint32_t n = chunks[k];
        vt_fill_normal(&rng, hidden, (size_t)n * hid, 1.0f);
        for (int i = 0; i < 2; i++)
            assert_int_equal(vkh2o_host_mla_decode(layer, c[i], 0, hidden, n, pos, out[i]), VKH2O_OK);
        vt_assert_finite("expanded decode", out[1], (size_t)n * hid);
        const double e = vt_nmse_f(out[1], out[0], (size_t)n * hid);
        worst = e > worst ? e : worst;
        if (!(e <= lc->bound))
            fail_msg("%s, tokens %u..%u: expanded vs latent output nmse %.3g above %.3g", lc->name, pos, pos + n - 1, e, lc->bound);
        pos += n;
        /* the same tokens held */
        snap x = { 0 }, y = { 0 };
        vt_snap_read(c[0], 0, &x);
        vt_snap_read(c[1], 0, &y);
        assert_int_equal(x.len, y.len);
        assert_memory_equal(x.pos, y.pos, 4ull * x.len);
        for (uint32_t j = 0; j < x.len; j++)
            assert_true(fabsf(x.score[j] - y.score[j]) <= 1e-3f * (fabsf(x.score[j]) + 1e-3f));
        vt_snap_free(&x);
        vt_snap_free(&y);
    }
    vkh2o_kvcache_stats st;
    assert_int_equal(vkh2o_kvcache_read_stats(c[1], 0, &st), VKH2O_OK);
    assert_int_equal(st.position, pos);
    printf("%s: layer output, expanded vs latent kvcache: worst nmse %.2e over %u decode tokens, %u held, %u evicted\n", lc->name,
           worst, pos - P, st.len, st.evicted);
    /* a cache of another shape is refused with both shapes named */
    vkh2o_kvcache_desc bad = { .max_tokens = 32, .layout = VKH2O_LAYOUT_EXPANDED };
    vkh2o_kvcache_desc_from_mla(&cfg, &bad);
    bad.v_head_dim = 10;
    vkh2o_kvcache* cb;
    assert_int_equal(vkh2o_kvcache_create(ctx, &bad, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_host_mla_decode(layer, cb, 0, hidden, 1, 0, out[1]), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "v_head_dim 10"));
    vkh2o_kvcache_destroy(cb);
    for (int i = 0; i < 2; i++) {
        vkh2o_kvcache_destroy(c[i]);
        free(out[i]);
    }
    free(hidden);
    vkh2o_mla_layer_destroy(layer);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    vt_check_validation();
}

static void test_layer_expanded(void** state)
{
    (void)state;
    static const layer_pair_case lcs[] = {
        { "full cache, f32 rows", VKH2O_DTYPE_F32, 0, 0, 0, 1e-9 },
        { "h2o, 14 tokens, f32 rows", VKH2O_DTYPE_F32, 14, 2, 3, 1e-9 },
        { "full cache, fp16 rows", VKH2O_DTYPE_F16, 0, 0, 0, 1e-5 },
    };
    /* the default run one of h2o with f32 rows and the full cache with fp16 rows, turning with
     * the seed (each case compiles its two caches' kernels; two successive seeds run both
     * storages and both kinds of cache); the full run also the full cache with f32 rows */
    uint64_t seed = vt_seed("kvcache layer expanded");
    for (size_t i = 0; i < sizeof lcs / sizeof lcs[0]; i++)
        if (vt_full() || (i != 0 && vt_pick(seed, i, 2)))
            layer_pair(&lcs[i], seed + i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_live_ranges),
        cmocka_unit_test(test_record_once),
        cmocka_unit_test(test_layers),
        cmocka_unit_test(test_layer_expanded),
        cmocka_unit_test(test_faults),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
