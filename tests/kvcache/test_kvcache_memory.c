/* The KV cache's device memory, through the public API: what vkh2o_kvcache_create takes (the
 * context's memory statistics before and after) is plan.device_bytes (checked on a cache of each
 * kind: full, pools, tiers by bytes; the other rows read the plan), and a cache given a
 * fraction of the FP16 bytes takes that fraction of the full cache's memory within the stated
 * slack, at the Kimi K2.6 shape and at the committed model's; and a long run under tiers by
 * bytes keeps its held bytes within the capacity and its arena within the plan, whatever the
 * demotions and evictions leave behind. And the kernels a cache takes: caches of one shape that
 * differ only in sizes (capacity, pools, precision of a uniform cache, sinks, recents, n_protect,
 * max_tokens) make no pipeline after the first, and one of another shape does. */
#include "vkh2o_test.h"
#include "internal.h"   /* vkh2o_kernel_pipelines */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char* name;
    uint32_t layers, heads, kv_lora_rank, rope, max_tokens;
} shape;

static const shape shapes[] = {
    { "kimi k2.6 latent", 4, 64, 512, 64, 4096 },
    { "tiny-mla", 2, 4, 64, 16, 512 },
};

static vkh2o_kvcache_desc base(const shape* s)
{
    return (vkh2o_kvcache_desc){ .num_layers = s->layers, .num_heads = s->heads, .kv_lora_rank = s->kv_lora_rank,
                                 .qk_rope_head_dim = s->rope, .max_tokens = s->max_tokens, .n_sink = 4, .n_recent = 16 };
}

/* the plan alone (no device): plan.device_bytes, which `taken` checks against the device */
static uint64_t planned(const vkh2o_kvcache_desc* d, vkh2o_kvcache_plan* pl)
{
    vkh2o_error err;
    if (vkh2o_kvcache_desc_resolve(d, NULL, pl, &err) != VKH2O_OK)
        fail_msg("resolve: %s", err.message);
    return pl->device_bytes;
}

/* creates the cache, returns the device bytes it took (the context's statistics) and its plan */
static uint64_t taken(const vkh2o_kvcache_desc* d, vkh2o_kvcache_plan* pl)
{
    vkh2o_context* ctx = vt_ctx();
    const uint64_t before = vkh2o_context_get_memory_stats(ctx).device_bytes;
    vkh2o_kvcache* c = NULL;
    if (vkh2o_kvcache_create(ctx, d, &c) != VKH2O_OK)
        fail_msg("create: %s", vkh2o_last_error(ctx));
    const uint64_t after = vkh2o_context_get_memory_stats(ctx).device_bytes;
    *pl = *vkh2o_kvcache_get_plan(c);
    vkh2o_kvcache_destroy(c);
    assert_int_equal(vkh2o_context_get_memory_stats(ctx).device_bytes, before);
    return after - before;
}

static uint32_t tiers_in_use(const vkh2o_kvcache_plan* pl)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        n += pl->slots[k] > 0;
    return n;
}

/* The stated slack of a layer's arena and tables over what the plan holds (vkh2o/kvcache.h
 * "Memory"): the tables, a part-filled chunk per tier in use, and under tiers by bytes one more
 * chunk and two top-tier tokens (the next append and a demotion in flight). */
static uint64_t slack(const vkh2o_kvcache_plan* pl)
{
    uint64_t s = pl->table_bytes + (uint64_t)tiers_in_use(pl) * pl->chunk_bytes;
    if (pl->by_bytes)
        s += pl->chunk_bytes + 2ull * pl->token_bytes[0];
    return s;
}

/* what a layer was asked to hold: the byte capacity (tiers by bytes), else its pools' slots */
static uint64_t asked(const vkh2o_kvcache_plan* pl)
{
    if (pl->by_bytes)
        return pl->budget_bytes;
    uint64_t b = 0;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        b += (uint64_t)pl->slots[k] * pl->token_bytes[k];
    return b;
}

static void test_device_bytes(void** state)
{
    (void)state;
    /* the full run creates the full cache, tiers by bytes and uniform INT4 at both shapes and the
     * FP16 H2O cache at the Kimi shape; the default run each of the first three at one shape, the
     * Kimi shape taking the full cache and uniform INT4 or tiers by bytes, turning with the seed,
     * and the FP16 H2O cache (each cache created compiles its kernels; the others read the plan) */
    const uint64_t seed = vt_seed("kvcache device bytes");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape* sh = &shapes[si];
        vkh2o_kvcache_desc full = base(sh);
        full.n_sink = full.n_recent = 0;
        vkh2o_kvcache_plan fp;
        const uint64_t full_bytes = vt_pick(seed, si, 2) ? taken(&full, &fp) : planned(&full, &fp);
        assert_int_equal(full_bytes, fp.device_bytes);
        /* the FP16 bytes of every position */
        const uint64_t fp16 = (uint64_t)sh->max_tokens * fp.token_bytes[0];
        printf("%s, %u layers x %u tokens: the full cache takes %llu device bytes (%llu per layer in the arena, "
               "chunks of %u bytes; workspace %llu)\n",
               sh->name, sh->layers, sh->max_tokens, (unsigned long long)full_bytes, (unsigned long long)fp.arena_bytes,
               fp.chunk_bytes, (unsigned long long)fp.workspace_bytes);
        assert_true(fp.arena_bytes >= ((uint64_t)sh->max_tokens + 1) * fp.token_bytes[0]);
        assert_true(fp.arena_bytes < ((uint64_t)sh->max_tokens + 1) * fp.token_bytes[0] + fp.chunk_bytes);
        struct cfg {
            const char* name;
            vkh2o_kv_precision prec;
            uint32_t mask;
            double frac;          /* capacity_bytes as a fraction of the FP16 bytes; < 0: capacity_tokens */
            bool create;          /* created on the device (else its plan, which the created ones prove) */
            int turn;             /* the default run creates it where vt_pick(seed, si + turn, 2); -1: always */
        } cfgs[] = {
            { "tiers by bytes fp16 > int8 > int4, 25 %", VKH2O_PRECISION_TIERED, 0x7, 0.25, true, 1 },
            { "tiers by bytes fp16 > int4, 25 %", VKH2O_PRECISION_TIERED, 0x5, 0.25, false, 0 },
            { "tiers by bytes, 12.5 %", VKH2O_PRECISION_TIERED, 0x7, 0.125, false, 0 },
            { "tiers by bytes, 50 %", VKH2O_PRECISION_TIERED, 0x7, 0.5, false, 0 },
            { "tiers by bytes with int2, 25 %", VKH2O_PRECISION_TIERED, 0xf, 0.25, false, 0 },
            { "uniform int4, 25 %", VKH2O_PRECISION_INT4, 0, 0.25, true, 0 },
            { "uniform int8, 25 % of the tokens", VKH2O_PRECISION_INT8, 0, -0.25, false, 0 },
            { "fp16 h2o, 25 % of the tokens", VKH2O_PRECISION_FP16, 0, -0.25, si == 0, -1 },
        };
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
            vkh2o_kvcache_desc d = base(sh);
            d.precision = cfgs[i].prec;
            d.tier_mask = cfgs[i].mask;
            if (cfgs[i].frac > 0)
                d.capacity_bytes = (uint64_t)(cfgs[i].frac * (double)fp16);
            else
                d.capacity_tokens = (uint32_t)(-cfgs[i].frac * sh->max_tokens);
            vkh2o_kvcache_plan pl;
            const bool create = cfgs[i].create && (cfgs[i].turn < 0 || vt_pick(seed, si + (uint64_t)cfgs[i].turn, 2));
            const uint64_t got = create ? taken(&d, &pl) : planned(&d, &pl);
            assert_int_equal(got, pl.device_bytes);
            const uint64_t layer = vkh2o_kvcache_plan_bytes(&pl);
            const double ratio = (double)got / (double)full_bytes;
            printf("  %-38s asked %.4f of the fp16 bytes, takes %.4f of the full cache's device memory "
                   "(arena + tables %llu per layer, asked %llu + slack %llu; workspace %llu)\n",
                   cfgs[i].name, (double)asked(&pl) / (double)fp16, ratio, (unsigned long long)layer,
                   (unsigned long long)asked(&pl), (unsigned long long)slack(&pl), (unsigned long long)pl.workspace_bytes);
            if (layer > asked(&pl) + slack(&pl))
                fail_msg("%s, %s: %llu bytes per layer above asked %llu + slack %llu", sh->name, cfgs[i].name,
                         (unsigned long long)layer, (unsigned long long)asked(&pl), (unsigned long long)slack(&pl));
            /* the headline: at the Kimi shape a byte capacity costs what it asks, within 1 % of
             * the full cache (workspace and tables included) */
            if (si == 0 && cfgs[i].frac > 0 && cfgs[i].prec == VKH2O_PRECISION_TIERED)
                assert_true(ratio <= cfgs[i].frac * (double)fp16 * sh->layers / (double)full_bytes + 0.01);
        }
    }
    vt_check_validation();
}

/* A long run of tiers by bytes on a cache that is full from the start: every step appends an FP16
 * token and demotes or evicts until the next one fits. The held bytes stay within the capacity,
 * the arena never asks for a chunk it does not have, and what its chunks hold beyond the held
 * tokens (fragmentation: each tier's part-filled last chunk, the next append's slot) stays inside
 * the stated slack. 100,000 steps in the full run. */
static void test_long_run(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("kvcache long run"));
    /* the 100,000 steps once per CI (test-full): the sanitizer and GPU-shape runs, which CI also
     * makes full, repeat the same device work (the cache's kernels have no GPU-shape variant) */
#if defined(__SANITIZE_ADDRESS__)
    const bool once = false;
#else
    const bool once = !getenv("VKH2O_GPU_SHAPES") || !strcmp(getenv("VKH2O_GPU_SHAPES"), "0");
#endif
    if (vt_full() && !once)
        printf("the long run at 3,000 steps: the full run's 100,000 are left to the plain build\n");
    /* the default run: 1,000 steps, checked every 250 (the full run checks every 1,000) */
    const uint32_t steps = vt_full() ? (once ? 100000 : 3000) : 1000, H = 4, KV = 64, R = 16, W = KV + R;
    const uint32_t BATCH = vt_full() ? 1000 : 250;
    vkh2o_kvcache_desc d = { .num_heads = H, .kv_lora_rank = KV, .qk_rope_head_dim = R, .max_tokens = steps + 64,
                             .n_sink = 2, .n_recent = 8, .precision = VKH2O_PRECISION_TIERED, .tier_mask = 0xf,
                             .capacity_bytes = 48 * 168 };
    vkh2o_kvcache* c = NULL;
    if (vkh2o_kvcache_create(ctx, &d, &c) != VKH2O_OK)
        fail_msg("create: %s", vkh2o_last_error(ctx));
    const vkh2o_kvcache_plan* pl = vkh2o_kvcache_get_plan(c);
    /* 64 token variants, each q and row, stepped through in batches of one submission */
    enum { VARIANTS = 64 };
    float* in = malloc(sizeof(float) * VARIANTS * (H * W + W));
    assert_non_null(in);
    vt_fill_normal(&rng, in, (size_t)VARIANTS * (H * W + W), 1.0f);
    vkh2o_buffer* b = vt_upload_f32(in, (size_t)VARIANTS * (H * W + W));
    vkh2o_kvcache_step* s = calloc(BATCH, sizeof *s);
    assert_non_null(s);
    uint32_t done = 0, worst_chunks = 0, checks = 0;
    uint64_t worst_waste = 0, worst_held = 0;
    while (done < steps) {
        const uint32_t n = steps - done < BATCH ? steps - done : BATCH;
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t v = vt_u32_below(&rng, VARIANTS), o = 4ull * v * (H * W + W);
            s[i] = (vkh2o_kvcache_step){ .q = b, .q_offset = o, .ckv = b, .ckv_offset = o + 4ull * H * W, .kpe = b,
                                         .kpe_offset = o + 4ull * (H * W + KV) };
        }
        assert_int_equal(vkh2o_run_kvcache_steps(c, s, n), VKH2O_OK);
        done += n;
        vkh2o_kvcache_stats st;
        assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
        assert_int_equal(st.position, done);
        assert_int_equal(st.chunk_faults, 0);
        assert_true(st.bytes_used + pl->token_bytes[0] <= pl->budget_bytes);
        assert_true(st.chunks_used <= pl->chunks);
        const uint64_t inuse = (uint64_t)st.chunks_used * pl->chunk_bytes;
        const uint64_t waste = inuse > st.bytes_used ? inuse - st.bytes_used : 0;
        if (waste > slack(pl))
            fail_msg("after %u steps: %u chunks (%llu bytes) hold %llu bytes: %llu beyond them, above the slack %llu", done,
                     st.chunks_used, (unsigned long long)inuse, (unsigned long long)st.bytes_used, (unsigned long long)waste,
                     (unsigned long long)slack(pl));
        worst_waste = waste > worst_waste ? waste : worst_waste;
        worst_chunks = st.chunks_used > worst_chunks ? st.chunks_used : worst_chunks;
        worst_held = st.bytes_used > worst_held ? st.bytes_used : worst_held;
        checks++;
        if (done == steps)
            printf("tiers by bytes, %llu bytes: %u steps, %u held (fp16 %u int8 %u int4 %u int2 %u), %u evicted, %u whole-tier "
                   "scans; at most %u of %u chunks of %u bytes in use, %llu bytes held, %llu in chunks beyond them (slack %llu), "
                   "over %u checks\n",
                   (unsigned long long)pl->budget_bytes, done, st.len, st.by_tier[0], st.by_tier[1], st.by_tier[2], st.by_tier[3],
                   st.evicted, st.scans, worst_chunks, pl->chunks, pl->chunk_bytes, (unsigned long long)worst_held,
                   (unsigned long long)worst_waste, (unsigned long long)slack(pl), checks);
    }
    free(in);
    free(s);
    vkh2o_buffer_destroy(b);
    vkh2o_kvcache_destroy(c);
    vt_check_validation();
}

/* creates the cache; the context's pipelines once it is made (it resolves its kernels at create) */
static uint32_t pipelines_with(const vkh2o_kvcache_desc* d, vkh2o_kvcache_plan* pl)
{
    vkh2o_context* ctx = vt_ctx();
    vkh2o_kvcache* c = NULL;
    if (vkh2o_kvcache_create(ctx, d, &c) != VKH2O_OK)
        fail_msg("create: %s", vkh2o_last_error(ctx));
    const uint32_t n = vkh2o_kernel_pipelines(ctx);
    *pl = *vkh2o_kvcache_get_plan(c);
    vkh2o_kvcache_destroy(c);
    return n;
}

static void test_shared_kernels(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    /* a shape no other case of this file uses, so its first cache must make pipelines */
    const shape sh = { "3 heads", 2, 3, 40, 8, 512 };
    struct cfg {
        const char* name;
        vkh2o_kv_precision prec;
        uint32_t mask, cap, sink, recent, protect, max_tokens;
        double frac;   /* tiers by bytes: capacity_bytes as a fraction of the FP16 bytes */
    } pools[] = {
        { "fp16 h2o, 300 tokens", VKH2O_PRECISION_FP16, 0, 300, 4, 16, 0, 512, 0 },
        { "fp16 h2o, 200 tokens, 2 sinks, 4 recents, max 1000", VKH2O_PRECISION_FP16, 0, 200, 2, 4, 0, 1000, 0 },
        { "uniform int4, 450 tokens, 32 recents, n_protect 40", VKH2O_PRECISION_INT4, 0, 450, 4, 32, 40, 512, 0 },
        { "uniform int8, 256 tokens, 8 sinks, max 700", VKH2O_PRECISION_INT8, 0, 256, 8, 16, 0, 700, 0 },
        { "tiered pools fp16 > int8 > int4, 384 tokens", VKH2O_PRECISION_TIERED, 0, 384, 4, 16, 0, 512, 0 },
    }, bytes[] = {
        { "tiers by bytes fp16 > int8 > int4, 25 %", VKH2O_PRECISION_TIERED, 0x7, 0, 4, 16, 0, 512, 0.25 },
        { "tiers by bytes fp16 > int4, 40 %, 2 sinks", VKH2O_PRECISION_TIERED, 0x5, 0, 2, 16, 0, 512, 0.40 },
        { "tiers by bytes with int2, 12.5 %, max 900", VKH2O_PRECISION_TIERED, 0xf, 0, 4, 8, 0, 900, 0.125 },
    };
    struct { struct cfg* c; size_t n; } groups[] = { { pools, sizeof pools / sizeof pools[0] },
                                                    { bytes, sizeof bytes / sizeof bytes[0] } };
    vkh2o_kvcache_desc d0 = base(&sh);
    vkh2o_kvcache_plan pl;
    (void)planned(&d0, &pl);
    const uint64_t fp16 = (uint64_t)sh.max_tokens * pl.token_bytes[0];
    for (size_t g = 0; g < 2; g++) {
        uint32_t first = 0;
        for (size_t i = 0; i < groups[g].n; i++) {
            const struct cfg* c = &groups[g].c[i];
            vkh2o_kvcache_desc d = base(&sh);
            d.precision = c->prec;
            d.tier_mask = c->mask;
            d.max_tokens = c->max_tokens;
            d.n_sink = c->sink;
            d.n_recent = c->recent;
            d.n_protect = c->protect;
            if (c->frac > 0)
                d.capacity_bytes = (uint64_t)(c->frac * (double)fp16);
            else
                d.capacity_tokens = c->cap;
            /* tiered pools: a quarter FP16, a quarter INT8, the rest INT4 */
            if (c->prec == VKH2O_PRECISION_TIERED && c->frac <= 0)
                d.tier_tokens[0] = d.tier_tokens[1] = c->cap / 4;
            const uint32_t before = vkh2o_kernel_pipelines(ctx), n = pipelines_with(&d, &pl);
            printf("%s: %u pipelines in the context (%+d), %u splits, %u score workgroups\n", c->name, n,
                   (int)n - (int)before, pl.splits, pl.score_groups);
            /* every cache here has several splits (one split or several is a constant) */
            assert_true(pl.splits > 1);
            if (i == 0) {
                assert_true(n > before);   /* the group's first cache compiles its kernels */
                first = n;
            } else {
                assert_int_equal(n, first);   /* and the others reuse them */
            }
        }
    }
    /* another shape (4 heads) makes its own */
    vkh2o_kvcache_desc d = base(&sh);
    d.num_heads = 4;
    d.capacity_tokens = 300;
    const uint32_t before = vkh2o_kernel_pipelines(ctx);
    assert_true(pipelines_with(&d, &pl) > before);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_bytes),
        cmocka_unit_test(test_long_run),
        cmocka_unit_test(test_shared_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
