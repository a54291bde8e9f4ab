/* Buffers suballocated from a few large VkDeviceMemory blocks (src/core/memory.c):
 *   - ranges aligned to the buffer's requirements (and nonCoherentAtomSize where host-visible),
 *     never overlapping, each buffer's bytes its own; a freed range is reused without a new
 *     vkAllocateMemory; a large buffer gets an allocation of its own; every block goes with its
 *     last buffer;
 *   - the vkAllocateMemory calls of one Kimi K2.6 attention layer (BF16 weights, decode scratch)
 *     plus its vkh2o_kvcache (measured: 30 buffers in 7 calls on lavapipe), of 61 layers and a
 *     61-layer cache of the small Kimi-shaped test layer (measured), and of a 61-layer Kimi model
 *     (a model's worth of weights, ~12 GB, does not fit lavapipe's 2 GiB heap: computed from
 *     three measured Kimi layers and a measured 61-layer Kimi cache, test_kimi_model), stated next
 *     to the buffers they hold (one vkAllocateMemory each before). */
#include "vkh2o_test.h"
#include "ref_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkh2o/kvcache.h"
#include "vkh2o/model.h"

static void test_ranges(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    const uint32_t calls0 = vkh2o_mem_allocate_calls(ctx), live0 = vkh2o_mem_live_blocks(ctx);
    enum { N = 40 };
    vkh2o_buffer* b[N];
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("test_ranges"));
    for (int i = 0; i < N; i++) {
        uint64_t bytes = 4 + 4 * (uint64_t)vt_u32_below(&rng, 5000);   /* odd sizes, 4 B .. 20 KB */
        assert_int_equal(vkh2o_buffer_create(ctx, bytes, &b[i]), VKH2O_OK);
        VkMemoryRequirements req;
        ctx->vk.vkGetBufferMemoryRequirements(ctx->device, b[i]->buffer, &req);
        if (b[i]->memory_offset % req.alignment)
            fail_msg("buffer %d at offset %llu: not a multiple of its alignment %llu", i,
                     (unsigned long long)b[i]->memory_offset, (unsigned long long)req.alignment);
        if (b[i]->mapped && b[i]->memory_offset % ctx->mem.atom)
            fail_msg("mapped buffer %d at offset %llu: not a multiple of nonCoherentAtomSize %llu", i,
                     (unsigned long long)b[i]->memory_offset, (unsigned long long)ctx->mem.atom);
        for (int j = 0; j < i; j++)
            if (b[j]->memory == b[i]->memory && b[j]->memory_offset < b[i]->memory_offset + req.size &&
                b[i]->memory_offset < b[j]->memory_offset + b[j]->size)
                fail_msg("buffers %d and %d overlap in one block", j, i);
        uint32_t* fill = malloc(bytes);
        for (uint64_t k = 0; k < bytes / 4; k++)
            fill[k] = (uint32_t)(i * 1000003u + k);
        assert_int_equal(vkh2o_buffer_upload(b[i], 0, fill, bytes), VKH2O_OK);
        free(fill);
    }
    /* 40 small buffers: one block (two if the device puts them in different types) */
    uint32_t calls = vkh2o_mem_allocate_calls(ctx) - calls0;
    printf("# %d small buffers: %u vkAllocateMemory calls\n", N, calls);
    assert_true(calls >= 1 && calls <= 2);
    for (int i = 0; i < N; i++) {
        uint64_t bytes = vkh2o_buffer_get_size(b[i]);
        uint32_t* got = malloc(bytes);
        assert_int_equal(vkh2o_buffer_download(b[i], 0, got, bytes), VKH2O_OK);
        for (uint64_t k = 0; k < bytes / 4; k++)
            if (got[k] != (uint32_t)(i * 1000003u + k))
                fail_msg("buffer %d word %llu: %u, not its own %u", i, (unsigned long long)k, got[k], (uint32_t)(i * 1000003u + k));
        free(got);
    }
    /* a freed range is reused: same size again, no new allocation */
    uint64_t off = b[7]->memory_offset, bytes7 = vkh2o_buffer_get_size(b[7]);
    VkDeviceMemory mem = b[7]->memory;
    vkh2o_buffer_destroy(b[7]);
    assert_int_equal(vkh2o_buffer_create(ctx, bytes7, &b[7]), VKH2O_OK);
    assert_true(b[7]->memory == mem && b[7]->memory_offset == off);
    assert_int_equal(vkh2o_mem_allocate_calls(ctx) - calls0, calls);
    /* larger than half a block: its own allocation, freed with it */
    vkh2o_buffer* big = NULL;
    assert_int_equal(vkh2o_buffer_create(ctx, 40ull << 20, &big), VKH2O_OK);
    assert_int_equal(vkh2o_mem_allocate_calls(ctx) - calls0, calls + 1);
    assert_int_equal(big->memory_offset, 0);
    vkh2o_buffer_destroy(big);
    assert_int_equal(vkh2o_mem_live_blocks(ctx), live0 + calls);
    for (int i = 0; i < N; i++)
        vkh2o_buffer_destroy(b[i]);
    /* the blocks went with their last buffers */
    assert_int_equal(vkh2o_mem_live_blocks(ctx), live0);
    vt_check_validation();
}

typedef struct counted {
    uint32_t buffers;   /* vkh2o_buffers made: one vkAllocateMemory each without suballocation */
    uint32_t calls;     /* vkAllocateMemory calls made */
    uint32_t own;       /* blocks alive that are one large buffer's own allocation */
    uint32_t shared;    /* blocks alive shared by smaller buffers */
    uint64_t block;     /* the largest shared block's size */
} counted;

static counted count_since(vkh2o_context* ctx, uint32_t buffers0, uint32_t calls0)
{
    counted c = { vkh2o_context_get_memory_stats(ctx).device_allocations - buffers0, vkh2o_mem_allocate_calls(ctx) - calls0, 0, 0, 0 };
    for (const struct vkh2o_mem_block* k = ctx->mem.blocks; k; k = vkh2o_mem_block_next(k)) {
        if (vkh2o_mem_block_is_own(k)) {
            c.own++;
        } else {
            c.shared++;
            c.block = vkh2o_mem_block_size(k) > c.block ? vkh2o_mem_block_size(k) : c.block;
        }
    }
    return c;
}

/* Bytes the ranges of the shared blocks take (with their alignment padding). */
static uint64_t shared_used(const vkh2o_context* ctx)
{
    uint64_t n = 0;
    for (const struct vkh2o_mem_block* k = ctx->mem.blocks; k; k = vkh2o_mem_block_next(k))
        n += vkh2o_mem_block_is_own(k) ? 0 : vkh2o_mem_block_used(k);
    return n;
}

/* Random BF16 Kimi K2.6 weights, made once for the two tests that need them (~100 M elements). */
static ref_mla_weights kimi_w;
static bool kimi_made;
/* Kimi K2.6's config into *cfg and host weights wrapping its random BF16 weights (made once) */
static vkh2o_mla_host_weights* kimi_host_weights(vkh2o_mla_config* cfg)
{
    vkh2o_mla_config_kimi_k26(cfg);
    if (!kimi_made)
        assert_int_equal(ref_mla_random_weights(cfg, VKH2O_DTYPE_BF16, 7, &kimi_w), 0);
    kimi_made = true;
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    if (vkh2o_mla_host_weights_wrap(cfg, kimi_w.views, &hw, &err) != VKH2O_OK)
        fail_msg("wrap: %s", err.message);
    return hw;
}

static int teardown(void** state)
{
    if (kimi_made)
        ref_mla_weights_free(&kimi_w);
    kimi_made = false;
    return vt_group_teardown(state);
}

/* One Kimi K2.6 attention layer (BF16, decode scratch for 1024 tokens) and its FP16 one-layer cache. */
static void test_kimi_layer(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_mla_config cfg;
    vkh2o_mla_host_weights* hw = kimi_host_weights(&cfg);
    const uint32_t buffers0 = vkh2o_context_get_memory_stats(ctx).device_allocations;
    const uint32_t calls0 = vkh2o_mem_allocate_calls(ctx);
    vkh2o_mla_layer* layer = NULL;
    if (vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = 1024, .max_decode_tokens = 1 }, &layer) !=
        VKH2O_OK)
        fail_msg("layer: %s", vkh2o_last_error(ctx));
    vkh2o_kvcache_desc d = { 0 };
    vkh2o_kvcache_desc_from_mla(&cfg, &d);
    d.max_tokens = 1024;
    vkh2o_kvcache* c = NULL;
    if (vkh2o_kvcache_create(ctx, &d, &c) != VKH2O_OK)
        fail_msg("kvcache: %s", vkh2o_last_error(ctx));
    counted n = count_since(ctx, buffers0, calls0);
    printf("# one Kimi K2.6 layer + its kvcache: %u buffers, %u vkAllocateMemory calls (%u for large buffers alone)\n",
           n.buffers, n.calls, n.own);
    /* The large weights have allocations of their own; the rest share blocks, each but the last
     * more than half full (first fit, no shared buffer above half a block). Lavapipe (64 MiB
     * blocks): 30 buffers in 7 allocations, 4 of them weights of their own. */
    uint64_t small = shared_used(ctx);
    printf("#   %u shared blocks of %llu bytes for %llu bytes of smaller buffers\n", n.shared, (unsigned long long)n.block,
           (unsigned long long)small);
    assert_int_equal(n.calls, n.own + n.shared);
    assert_true(n.shared <= 2 * small / n.block + 1);
    assert_true(n.calls * 4 <= n.buffers);
    vkh2o_kvcache_destroy(c);
    vkh2o_mla_layer_destroy(layer);
    vkh2o_mla_host_weights_destroy(hw);
    assert_int_equal(vkh2o_mem_allocate_calls(ctx) - calls0, n.calls);
    vt_check_validation();
}

/* 61 small Kimi-shaped layers and one 61-layer cache: a model's worth of buffers in a few blocks. */
static void test_model_layers(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    enum { L = 61 };
    vkh2o_mla_config cfg = vt_small_mla_config(200, 20, 24);
    ref_mla_weights w;
    assert_int_equal(ref_mla_random_weights(&cfg, VKH2O_DTYPE_BF16, 11, &w), 0);
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    if (vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err) != VKH2O_OK)
        fail_msg("wrap: %s", err.message);
    const uint32_t buffers0 = vkh2o_context_get_memory_stats(ctx).device_allocations;
    const uint32_t calls0 = vkh2o_mem_allocate_calls(ctx);
    vkh2o_mla_layer* layer[L];
    for (int i = 0; i < L; i++)
        if (vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = 256, .max_decode_tokens = 1 },
                                   &layer[i]) != VKH2O_OK)
            fail_msg("layer %d: %s", i, vkh2o_last_error(ctx));
    vkh2o_kvcache_desc d = { 0 };
    vkh2o_kvcache_desc_from_mla(&cfg, &d);
    d.num_layers = L;
    d.max_tokens = 256;
    vkh2o_kvcache* c = NULL;
    if (vkh2o_kvcache_create(ctx, &d, &c) != VKH2O_OK)
        fail_msg("kvcache: %s", vkh2o_last_error(ctx));
    counted n = count_since(ctx, buffers0, calls0);
    uint64_t bytes = vkh2o_context_get_memory_stats(ctx).device_bytes;
    printf("# %d small Kimi-shaped layers + a %d-layer kvcache: %u buffers (%llu bytes held in all), %u vkAllocateMemory calls\n",
           L, L, n.buffers, (unsigned long long)bytes, n.calls);
    /* every buffer here is far below half a block: the blocks hold them all, at most two more
     * than their bytes need (first fit leaves gaps only at block ends) */
    uint64_t small = shared_used(ctx);
    assert_int_equal(n.own, 0);
    assert_int_equal(n.calls, n.shared);
    assert_true(n.shared <= 2 * small / n.block + 1);
    assert_true(n.buffers >= (uint32_t)L * 4 && n.calls * 100 <= n.buffers);
    vkh2o_kvcache_destroy(c);
    for (int i = 0; i < L; i++)
        vkh2o_mla_layer_destroy(layer[i]);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    vt_check_validation();
}

/* A 61-layer Kimi K2.6 model's attention layers do not fit lavapipe's 2 GiB heap (~200 MB of BF16
 * weights each): measured here are a 61-layer Kimi cache (1024 tokens, FP16) and the first three
 * Kimi layers (BF16, scratch for 256 tokens) one by one, each the same (its large buffers' own
 * allocations, its smaller buffers' bytes in the shared blocks); the 61-layer figure is computed
 * from that step. Lavapipe (64 MiB blocks): the cache 6 buffers in 2 calls; a layer 24 buffers, 2
 * of them own allocations, 94 MB in shared blocks (3 or 4 calls); 61 layers + the cache: 1,470
 * buffers (one vkAllocateMemory each before suballocation) in 2 + 122 + 86..172 = 210..296 calls. */
static void test_kimi_model(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    enum { L = 61, MEASURED = 3 };
    vkh2o_mla_config cfg;
    vkh2o_mla_host_weights* hw = kimi_host_weights(&cfg);
    const uint32_t buffers0 = vkh2o_context_get_memory_stats(ctx).device_allocations;
    const uint32_t calls0 = vkh2o_mem_allocate_calls(ctx);
    vkh2o_kvcache_desc d = { 0 };
    vkh2o_kvcache_desc_from_mla(&cfg, &d);
    d.num_layers = L;
    d.max_tokens = 1024;
    vkh2o_kvcache* c = NULL;
    if (vkh2o_kvcache_create(ctx, &d, &c) != VKH2O_OK)
        fail_msg("kvcache: %s", vkh2o_last_error(ctx));
    const counted kc = count_since(ctx, buffers0, calls0);
    vkh2o_mla_layer* layer[MEASURED];
    counted step[MEASURED];
    uint32_t own[MEASURED];
    uint64_t small[MEASURED];
    for (int i = 0; i < MEASURED; i++) {
        const uint32_t b0 = vkh2o_context_get_memory_stats(ctx).device_allocations, c0 = vkh2o_mem_allocate_calls(ctx);
        const uint32_t own0 = count_since(ctx, 0, 0).own;
        const uint64_t small0 = shared_used(ctx);
        if (vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = 256, .max_decode_tokens = 1 },
                                   &layer[i]) != VKH2O_OK)
            fail_msg("layer %d: %s", i, vkh2o_last_error(ctx));
        step[i] = count_since(ctx, b0, c0);
        own[i] = step[i].own - own0;
        small[i] = shared_used(ctx) - small0;
        printf("#   Kimi layer %d: %u buffers, %u vkAllocateMemory calls (%u own, %llu bytes in shared blocks)\n", i,
               step[i].buffers, step[i].calls, own[i], (unsigned long long)small[i]);
    }
    const counted all = count_since(ctx, buffers0, calls0);
    assert_int_equal(all.calls, kc.calls + step[0].calls + step[1].calls + step[2].calls);
    /* every layer the same: its large buffers' own allocations, its smaller ones' bytes in the
     * shared blocks (a new block only when the last is full) */
    for (int i = 1; i < MEASURED; i++) {
        assert_int_equal(step[i].buffers, step[0].buffers);
        assert_int_equal(own[i], own[0]);
        assert_true(small[i] == small[0]);
        assert_true(step[i].calls >= own[i] && step[i].calls <= own[i] + 2);
    }
    /* computed for the model: the cache's, each layer's own, and the shared blocks for all the
     * layers' smaller bytes (first fit of buffers at most half a block: at most 2 x bytes / block + 1) */
    const uint64_t block = all.block ? all.block : 1, bytes = (uint64_t)L * small[0];
    const uint32_t blocks_min = (uint32_t)((bytes + block - 1) / block), blocks_max = (uint32_t)(2 * bytes / block + 1);
    const uint32_t model_buffers = kc.buffers + L * step[0].buffers;
    printf("# a %d-layer Kimi cache + %d Kimi K2.6 layers: measured %u buffers in %u vkAllocateMemory calls (the cache %u in "
           "%u); computed for %d layers: %u buffers in %u..%u calls (%u own + %u..%u blocks of %llu bytes)\n",
           L, MEASURED, all.buffers, all.calls, kc.buffers, kc.calls, L, model_buffers, kc.calls + L * own[0] + blocks_min,
           kc.calls + L * own[0] + blocks_max, kc.calls + L * own[0], blocks_min, blocks_max, (unsigned long long)block);
    assert_true((kc.calls + L * own[0] + blocks_max) * 4 <= model_buffers);
    for (int i = 0; i < MEASURED; i++)
        vkh2o_mla_layer_destroy(layer[i]);
    vkh2o_kvcache_destroy(c);
    vkh2o_mla_host_weights_destroy(hw);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_kimi_layer),
        cmocka_unit_test(test_model_layers),
        cmocka_unit_test(test_kimi_model),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
