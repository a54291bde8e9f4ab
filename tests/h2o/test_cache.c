/* The H2O KV cache (src/h2o/cache.c, shaders/h2o/h2o_step.comp): desc validation with exact result codes,
 * the decode step against the double-accumulating CPU reference (ref/ref_h2o.c) for both
 * layouts, storage types and all policies / score modes, expanded vs latent equivalence, the seed
 * document's four properties, and multi-step dispatches.
 *
 * Error bounds (fp32 arithmetic on the device vs double on the host, inputs exact in both):
 *   - attention output: max |got - ref| <= 1e-4 x max |ref|   (observed ~1e-6: a softmax and
 *     a dot product of <= 576 terms in fp32; the latent path adds two 128/512-term products);
 *   - scores: relative 1e-4 (each step adds one mass in fp32; observed <= 1e-6 over 100 steps);
 *   - positions, K/V rows and kept sets: exact. The selection is checked bit for bit against the
 *     reference run on the device's own keys (VKH2O_STEP_RECORD_KEYS); against the CPU's own
 *     scores a differing choice is only accepted for near ties (|a - b| <= 1e-4 |a|), counted. */
#include "vkh2o_test.h"
#include "ref_h2o.h"
#include "cache_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vkh2o_cache_desc small_desc(void)
{
    return (vkh2o_cache_desc){ .num_layers = 2, .num_heads = 2, .qk_nope_dim = 32, .qk_rope_dim = 32, .v_dim = 32,
                               .n_sink = 2, .budget = 12, .n_recent = 6 };
}

/* ---- desc validation: no device ---- */

static void expect_code(const vkh2o_cache_desc* d, vkh2o_result want, const char* words)
{
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_cache_desc_validate(d, &e);
    if (r != want)
        fail_msg("expected %s, got %s (%s)", vkh2o_result_string(want), vkh2o_result_string(r), e.message);
    if (words && !strstr(e.message, words))
        fail_msg("message '%s' does not mention '%s'", e.message, words);
}

static void test_desc_validation(void** state)
{
    (void)state;
    vkh2o_cache_desc d = small_desc();
    expect_code(&d, VKH2O_OK, NULL);
    assert_int_equal(vkh2o_cache_desc_cap(&d), 20);
    d.budget = 0;
    expect_code(&d, VKH2O_ERROR_BUDGET, "budget is 0");
    d.policy = VKH2O_POLICY_RANDOM;
    expect_code(&d, VKH2O_ERROR_BUDGET, "budget is 0");
    d.policy = VKH2O_POLICY_STREAMING;             /* sinks + recent only is a valid baseline */
    expect_code(&d, VKH2O_OK, NULL);
    d = small_desc();
    d.capacity = 7;                                /* n_sink 2 + n_recent 6 > 7 */
    expect_code(&d, VKH2O_ERROR_BUDGET, "n_recent");
    d.capacity = 20;                               /* cap 20 needs 21 slots */
    expect_code(&d, VKH2O_ERROR_BUDGET, "capacity");
    d.capacity = 21;
    expect_code(&d, VKH2O_OK, NULL);
    d = small_desc();
    d.n_sink = d.budget = d.n_recent = 0;
    d.policy = VKH2O_POLICY_STREAMING;
    expect_code(&d, VKH2O_ERROR_BUDGET, "is 0");
    d = small_desc();
    d.budget = UINT32_MAX;
    expect_code(&d, VKH2O_ERROR_BUDGET, "too large");
    d = small_desc();
    d.num_heads = 0;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "num_heads");
    d = small_desc();
    d.qk_nope_dim = d.qk_rope_dim = 0;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "qk_nope_dim");
    d = small_desc();
    d.v_dim = 0;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "v_dim");
    d = small_desc();
    d.layout = VKH2O_LAYOUT_LATENT;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "kv_lora_rank");
    d.kv_lora_rank = 64;
    expect_code(&d, VKH2O_OK, NULL);
    d = small_desc();
    d.layout = (vkh2o_kv_layout)7;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "layout");
    d = small_desc();
    d.policy = (vkh2o_evict_policy)9;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "policy");
    d = small_desc();
    d.score_mode = (vkh2o_score_mode)7;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "score mode");
    d = small_desc();
    d.storage = VKH2O_DTYPE_BF16;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "F16 or F32");
    d = small_desc();
    d.qk_rope_dim = 33;                            /* odd per-head qk with fp16 */
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "even");
    d.storage = VKH2O_DTYPE_F32;
    expect_code(&d, VKH2O_OK, NULL);
    d = small_desc();
    float w[4] = { 0 };
    d.kv_b_proj = w;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "latent");
    d = small_desc();
    d.scale = NAN;
    expect_code(&d, VKH2O_ERROR_INVALID_ARGUMENT, "scale");
    assert_int_equal(vkh2o_cache_desc_validate(NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);

    /* memory formula: Kimi at 32K context, expanded fp16 = 61 x 32768 x 64 x 320 x 2 bytes */
    vkh2o_cache_desc k = { .num_layers = 61, .num_heads = 64, .qk_nope_dim = 128, .qk_rope_dim = 64, .v_dim = 128 };
    assert_true(vkh2o_cache_bytes(&k, 32768) == 61ull * 32768 * 64 * 320 * 2);
    k.layout = VKH2O_LAYOUT_LATENT;
    k.kv_lora_rank = 512;
    k.storage = VKH2O_DTYPE_F32;
    assert_true(vkh2o_cache_bytes(&k, 84) == 61ull * 84 * 576 * 4);
}

/* ---- device tests ---- */

static void test_create_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_cache* c = (vkh2o_cache*)&c;
    vkh2o_cache_desc d = small_desc();
    d.budget = 0;
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_ERROR_BUDGET);
    assert_null(c);
    assert_non_null(strstr(vkh2o_last_error(ctx), "budget"));
    d = small_desc();
    d.num_heads = 0;
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(c);
    d = small_desc();
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_OK);
    vkh2o_buffer* tiny = vt_buffer(16);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_cache_step s = { .layer_first = 2 };
    assert_int_equal(vkh2o_cmd_cache_step(c, cb, &s), VKH2O_ERROR_INVALID_ARGUMENT);
    s = (vkh2o_cache_step){ .layer_first = 1, .layer_count = 2, .flags = VKH2O_STEP_MOCK };
    assert_int_equal(vkh2o_cmd_cache_step(c, cb, &s), VKH2O_ERROR_INVALID_ARGUMENT);
    s = (vkh2o_cache_step){ .nsteps = 3 };                       /* several steps need mock data */
    assert_int_equal(vkh2o_cmd_cache_step(c, cb, &s), VKH2O_ERROR_INVALID_ARGUMENT);
    s = (vkh2o_cache_step){ 0 };                                 /* q / a / b missing */
    assert_int_equal(vkh2o_cmd_cache_step(c, cb, &s), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "NULL"));
    s = (vkh2o_cache_step){ .q = tiny, .a = tiny, .b = tiny };   /* too small */
    assert_int_equal(vkh2o_cmd_cache_step(c, cb, &s), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_cache_prefill p = { .seq_len = 0, .a = tiny, .b = tiny, .mass = tiny };
    assert_int_equal(vkh2o_cmd_cache_prefill(c, cb, &p), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vkh2o_cache_stats st[2];
    assert_int_equal(vkh2o_cache_read_stats(c, st, 3), VKH2O_ERROR_INVALID_ARGUMENT);
    uint32_t h1[1], h2[1];
    assert_int_equal(vkh2o_cache_read_history(c, 0, 1, h1, h2), VKH2O_ERROR_INVALID_ARGUMENT);   /* no history kept */
    vkh2o_buffer_destroy(tiny);
    vkh2o_cache_destroy(c);
    vkh2o_cache_destroy(NULL);
    vt_check_validation();
}

typedef struct run_cfg {
    const char* name;
    vkh2o_kv_layout layout;
    vkh2o_dtype storage;
    vkh2o_evict_policy policy;
    vkh2o_score_mode mode;
    uint32_t heads, dn, dr, dv, kvl;
    uint32_t n_sink, budget, n_recent, layers, steps;
    bool absorb;
    bool split;              /* mock steps through the split path (h2o_attn.comp + h2o_step SPLIT) */
    uint32_t tt, hg;         /* its tiles: tokens (multiple of 4), heads per workgroup; 0: the device's */
} run_cfg;

/* A mock run checked after every step against ref_h2o_sim. */
static void run_checked(const run_cfg* rc, uint64_t seed)
{
    vkh2o_context* ctx = vt_ctx();
    bool lat = rc->layout == VKH2O_LAYOUT_LATENT;
    float* kvb = NULL;
    if (lat && rc->absorb) {
        size_t n = (size_t)rc->heads * (rc->dn + rc->dv) * rc->kvl;
        kvb = malloc(n * sizeof *kvb);
        vt_rng rng;
        vt_rng_seed(&rng, seed ^ 0x5a5a);
        vt_fill_normal(&rng, kvb, n, 1.0f / sqrtf((float)rc->kvl));
    }
    vkh2o_cache_desc d = {
        .num_layers = rc->layers, .num_heads = rc->heads, .qk_nope_dim = rc->dn, .qk_rope_dim = rc->dr, .v_dim = rc->dv,
        .kv_lora_rank = lat ? rc->kvl : 0, .layout = rc->layout, .storage = rc->storage, .n_sink = rc->n_sink,
        .budget = rc->budget, .n_recent = rc->n_recent, .policy = rc->policy, .score_mode = rc->mode,
        .seed = (uint32_t)seed, .kv_b_proj = kvb, .history_steps = 4,
    };
    /* the default run: half the steps past the cache's capacity (every case still evicts, at
     * least 5 times per layer); the full run all of them */
    const uint32_t kept = rc->n_sink + rc->budget + rc->n_recent;
    const uint32_t steps = vt_full() || rc->steps <= kept + 10 ? rc->steps : kept + (rc->steps - kept + 1) / 2;
    print_message("  %s: layers %u heads %u dims %u+%u/%u kvl %u, sink %u budget %u recent %u, %u steps%s\n", rc->name,
                  rc->layers, rc->heads, rc->dn, rc->dr, rc->dv, rc->kvl, rc->n_sink, rc->budget, rc->n_recent, steps,
                  rc->split ? ", split" : "");
    vkh2o_cache* c;
    if (rc->split) {
        assert_int_equal(vkh2o_cache_create_split(ctx, &d, rc->tt, rc->hg, &c), VKH2O_OK);
        print_message("    tiles of %u tokens x %u heads (%u tiles), step workgroup %u\n", c->tt, c->hg, c->ntiles, c->split_wg);
    } else {
        assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_OK);
    }
    const vkh2o_cache_desc* cd = vkh2o_cache_get_desc(c);
    vkh2o_cache_widths w = vkh2o_cache_get_widths(c);
    ref_h2o_config cfg = {
        .layers = rc->layers, .heads = rc->heads, .dn = rc->dn, .dr = rc->dr, .dv = rc->dv, .kvl = rc->kvl,
        .latent = lat, .kv_b = kvb, .n_sink = rc->n_sink, .budget = rc->budget, .n_recent = rc->n_recent,
        .capacity = cd->capacity, .policy = rc->policy, .mode = rc->mode, .seed = (uint32_t)seed, .decay = cd->decay,
        .scale = 1.0f / sqrtf((float)(rc->dn + rc->dr)), .f16 = rc->storage != VKH2O_DTYPE_F32,
    };
    ref_h2o_sim sim;
    assert_true(ref_h2o_sim_init(&sim, &cfg));
    size_t out_n = (size_t)rc->layers * rc->heads * w.out_width;
    vkh2o_buffer* out = vt_buffer(out_n * 4);
    uint32_t cap = cd->capacity;
    uint32_t* pos = malloc(cap * 4);
    uint32_t* keys = malloc(cap * 4);
    float* sc = malloc(cap * 4);
    float* a = malloc((size_t)cap * w.a_width * 4);
    float* b = malloc((size_t)cap * w.b_width * 4);
    float* o = malloc(out_n * 4);
    uint32_t evictions = 0;
    for (uint32_t step = 0; step < steps; step++) {
        vt_poison(out);
        if (rc->split)
            vt_poison(c->scratch);   /* probabilities, partials and the map are all rewritten by a step */
        vkh2o_cache_step s = { .position = step, .step = step, .out = out,
                               .flags = VKH2O_STEP_MOCK | VKH2O_STEP_RECORD_KEYS };
        assert_int_equal(vkh2o_run_cache_steps(c, &s, 1), VKH2O_OK);
        vt_download_f32(out, o, out_n);
        vt_check_guard(out, out_n * 4);
        for (uint32_t l = 0; l < rc->layers; l++) {
            vkh2o_cache_snapshot snap = { .positions = pos, .scores = sc, .a = a, .b = b, .keys = keys };
            assert_int_equal(vkh2o_cache_read_snapshot(c, l, &snap), VKH2O_OK);
            bool tie_ok;
            ref_h2o_sim_step(&sim, step, l, pos, snap.len, 1e-4, &tie_ok);
            char msg[512] = "";
            if (sim.layer[l].evicted) {
                evictions++;
                if (!ref_h2o_check_selection(keys, sim.pre_pos, snap.keys_len, rc->n_sink, rc->budget, rc->n_recent, pos,
                                             snap.len, msg, sizeof msg))
                    fail_msg("%s step %u layer %u: %s", rc->name, step, l, msg);
            }
            if (!tie_ok)
                fail_msg("%s step %u layer %u: kept set differs from the reference beyond near ties", rc->name, step, l);
            vt_assert_finite("output", o + (size_t)l * rc->heads * w.out_width, (size_t)rc->heads * w.out_width);
            if (!ref_h2o_compare_layer(&sim, l, snap.len, pos, sc, a, b, o + (size_t)l * rc->heads * w.out_width, 1e-4,
                                       1e-4, msg, sizeof msg))
                fail_msg("%s step %u: %s", rc->name, step, msg);
        }
    }
    assert_true(evictions >= (steps - kept) * rc->layers);
    print_message("    ok: %u evictions, max score rel err %.2e, output rel err %.2e, %u near ties\n", evictions,
                  sim.max_score_rel_err, sim.max_out_err, sim.near_ties);
    ref_h2o_sim_free(&sim);
    free(pos);
    free(keys);
    free(sc);
    free(a);
    free(b);
    free(o);
    free(kvb);
    vkh2o_buffer_destroy(out);
    vkh2o_cache_destroy(c);
}

static void test_steps_vs_reference(void** state)
{
    (void)state;
    uint64_t seed = vt_seed("test_steps_vs_reference");
    const run_cfg cases[] = {
        { "expanded fp16 h2o sum", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 2, 32, 32, 32, 0, 2, 12, 6, 2, 48, false, false, 0, 0 },
        { "expanded fp32 h2o mean", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN, 2, 32, 32, 32, 0, 2, 12, 6, 1, 40, false, false, 0, 0 },
        { "expanded fp16 streaming", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_STREAMING, VKH2O_SCORE_SUM, 2, 32, 32, 32, 0, 2, 12, 6, 1, 40, false, false, 0, 0 },
        { "expanded fp16 random", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_RANDOM, VKH2O_SCORE_SUM, 2, 32, 32, 32, 0, 2, 12, 6, 1, 40, false, false, 0, 0 },
        /* odd dims: the shader's word-wise path (dims not multiples of 8), 3 heads */
        { "expanded fp32 odd dims", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 3, 13, 6, 11, 0, 3, 9, 5, 1, 36, false, false, 0, 0 },
        { "expanded fp16 odd dims", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 3, 12, 6, 10, 0, 0, 9, 0, 1, 30, false, false, 0, 0 },
        { "latent fp16 absorbed h2o", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 2, 32, 16, 24, 64, 2, 12, 6, 2, 40, true, false, 0, 0 },
        { "latent fp32 q_abs random", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F32, VKH2O_POLICY_RANDOM, VKH2O_SCORE_MEAN, 2, 32, 16, 24, 64, 2, 12, 6, 1, 36, false, false, 0, 0 },
        { "latent fp16 streaming", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_POLICY_STREAMING, VKH2O_SCORE_SUM, 2, 32, 16, 24, 64, 1, 10, 3, 1, 30, true, false, 0, 0 },
        { "latent fp32 odd kv_lora", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN, 3, 20, 6, 10, 37, 2, 9, 4, 1, 30, true, false, 0, 0 },
        /* decayed scores (the default factor 0.9) and TOVA (the current query's mass only) */
        { "expanded fp32 h2o decay", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_DECAY, 2, 32, 32, 32, 0, 2, 12, 6, 2, 40, false, false, 0, 0 },
        { "latent fp32 tova", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_TOVA, 3, 20, 6, 10, 37, 1, 11, 3, 1, 36, true, false, 0, 0 },
        { "expanded fp16 tova", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_TOVA, 3, 12, 6, 10, 0, 2, 9, 5, 1, 36, false, false, 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_checked(&cases[i], seed + i);
    vt_check_validation();
}

/* The split step (real steps always take it; here mock ones through vkh2o_cache_create_split)
 * against the same reference: tiles that do not divide the cache (the last one partial, one
 * holding only the appended token), head groups that do not divide the heads, word-wise dims,
 * both layouts and storage types. */
static void test_split_vs_reference(void** state)
{
    (void)state;
    uint64_t seed = vt_seed("test_split_vs_reference");
    const run_cfg cases[] = {
        { "split expanded fp16 h2o sum", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 2, 32, 32, 32, 0, 2, 12, 6, 2, 48, false, true, 4, 1 },
        { "split expanded fp32 odd dims", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 3, 13, 6, 11, 0, 3, 9, 5, 1, 36, false, true, 8, 2 },
        { "split expanded fp16 tova", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_TOVA, 5, 12, 6, 10, 0, 2, 9, 5, 1, 36, false, true, 12, 2 },
        { "split latent fp16 absorbed h2o", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 3, 32, 16, 24, 64, 2, 12, 6, 2, 40, true, true, 8, 2 },
        { "split latent fp32 q_abs mean", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN, 2, 32, 16, 24, 64, 2, 12, 6, 1, 36, false, true, 4, 2 },
        { "split latent fp32 odd kv_lora decay", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, VKH2O_SCORE_DECAY, 3, 20, 6, 10, 37, 2, 9, 4, 1, 30, true, true, 4, 3 },
        { "split latent fp16 random", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_POLICY_RANDOM, VKH2O_SCORE_SUM, 7, 32, 16, 24, 64, 1, 10, 3, 1, 30, true, true, 12, 4 },
        /* the device's tiles, a cache of several of them with the last one partial */
        { "split latent fp16 absorbed 16 heads", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, 16, 128, 64, 128, 512, 4, 290, 16, 1, 330, true, true, 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_checked(&cases[i], seed + i);
    vt_check_validation();
}

/* A shape the single-workgroup step could not run on llvmpipe (Kimi: 64 heads, latent c_kv 512
 * + k_pe 64, fp16, absorbed, 4096 kept tokens): accepted now, filled by a prefill, then one
 * real step against the double reference over the rows as stored: output, every score
 * (prefill mass + the step's mass) and the exact kept set (the lowest middle score goes). */
static void test_split_kimi_shape(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("test_split_kimi_shape"));
    const uint32_t H = 64, DN = 128, DR = 64, DV = 128, KVL = 512, NS = 4, NR = 64, S = 4096;
    size_t wn = (size_t)H * (DN + DV) * KVL;
    float* W = malloc(wn * 4);
    float* ckv = malloc((size_t)(S + 1) * KVL * 4);
    float* kpe = malloc((size_t)(S + 1) * DR * 4);
    float* q = malloc((size_t)H * (DN + DR) * 4);
    float* mass = malloc((size_t)S * 4);
    vt_fill_normal(&rng, W, wn, 1.0f / sqrtf((float)KVL));
    vt_fill_normal(&rng, ckv, (size_t)(S + 1) * KVL, 1.0f);
    vt_fill_normal(&rng, kpe, (size_t)(S + 1) * DR, 1.0f);
    vt_fill_normal(&rng, q, (size_t)H * (DN + DR), 1.0f);
    for (uint32_t t = 0; t < S; t++)
        mass[t] = 1.0f + (float)t * 0.25f + (float)(vkh2o_hash32(t) % 1024u);   /* distinct, exact */
    vkh2o_cache_desc d = { .num_heads = H, .qk_nope_dim = DN, .qk_rope_dim = DR, .v_dim = DV, .kv_lora_rank = KVL,
                           .layout = VKH2O_LAYOUT_LATENT, .storage = VKH2O_DTYPE_F16, .kv_b_proj = W, .n_sink = NS,
                           .budget = S - NS - NR, .n_recent = NR };
    vkh2o_cache* c;
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_OK);
    print_message("  %u heads, capacity %u: tiles of %u tokens x %u heads (%u), attention workgroup %u, step workgroup %u\n",
                  H, vkh2o_cache_get_desc(c)->capacity, c->tt, c->hg, c->ntiles, c->attn_wg, c->split_wg);
    vkh2o_buffer* ba = vt_upload_f32(ckv, (size_t)(S + 1) * KVL);
    vkh2o_buffer* bb = vt_upload_f32(kpe, (size_t)(S + 1) * DR);
    vkh2o_buffer* bm = vt_upload_f32(mass, S);
    vkh2o_buffer* bq = vt_upload_f32(q, (size_t)H * (DN + DR));
    vkh2o_buffer* bo = vt_buffer((size_t)H * DV * 4);
    vkh2o_cache_prefill pf = { .seq_len = S, .a = ba, .b = bb, .mass = bm };
    assert_int_equal(vkh2o_run_cache_prefill(c, &pf), VKH2O_OK);
    /* the rows as stored (fp16), and the new token's rounded as the step stores it */
    float* a = malloc((size_t)(S + 1) * KVL * 4);
    float* b = malloc((size_t)(S + 1) * DR * 4);
    float* sc0 = malloc((size_t)(S + 1) * 4);
    uint32_t* pos = malloc((size_t)(S + 1) * 4);
    vkh2o_cache_snapshot snap = { .scores = sc0, .a = a, .b = b };
    assert_int_equal(vkh2o_cache_read_snapshot(c, 0, &snap), VKH2O_OK);
    assert_int_equal(snap.len, S);
    for (uint32_t i = 0; i < KVL; i++)
        a[(size_t)S * KVL + i] = vkh2o_f16_to_f32(vkh2o_f32_to_f16(ckv[(size_t)S * KVL + i]));
    for (uint32_t i = 0; i < DR; i++)
        b[(size_t)S * DR + i] = vkh2o_f16_to_f32(vkh2o_f32_to_f16(kpe[(size_t)S * DR + i]));
    vkh2o_cache_step st = { .position = S, .step = 0, .q = bq, .a = ba, .a_offset = (uint64_t)S * KVL * 4, .b = bb,
                            .b_offset = (uint64_t)S * DR * 4, .out = bo };
    assert_int_equal(vkh2o_run_cache_steps(c, &st, 1), VKH2O_OK);
    float* got = malloc((size_t)H * DV * 4);
    vt_download_f32(bo, got, (size_t)H * DV);
    vt_check_guard(bo, (size_t)H * DV * 4);
    vt_assert_finite("output", got, (size_t)H * DV);

    const uint32_t n = S + 1;
    double* qa = malloc((size_t)H * KVL * sizeof(double));
    double* qp = malloc((size_t)H * DR * sizeof(double));
    double* ol = malloc((size_t)H * KVL * sizeof(double));
    double* ref = malloc((size_t)H * DV * sizeof(double));
    double* m = malloc((size_t)n * sizeof(double));
    ref_absorb_q(H, DN, DV, KVL, W, q, DN + DR, qa);
    for (uint32_t h = 0; h < H; h++)
        for (uint32_t i = 0; i < DR; i++)
            qp[h * DR + i] = q[h * (DN + DR) + DN + i];
    ref_attn_latent(H, KVL, DR, n, qa, qp, a, b, 1.0f / sqrtf((float)(DN + DR)), ol, m);
    ref_absorb_out(H, DN, DV, KVL, W, ol, ref);
    double mx = 0, err = 0;
    for (size_t i = 0; i < (size_t)H * DV; i++) {
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
        err = fabs(got[i] - ref[i]) > err ? fabs(got[i] - ref[i]) : err;
    }
    if (!(err <= 1e-4 * mx))
        fail_msg("output max error %.3g vs max |ref| %.3g", err, mx);
    /* expected scores, and the token evicted: the lowest middle score (ties: higher position) */
    double* want = malloc((size_t)n * sizeof(double));
    for (uint32_t t = 0; t < n; t++)
        want[t] = (t < S ? sc0[t] : 0.0) + m[t];
    uint32_t ev = NS;
    for (uint32_t t = NS; t < n - NR; t++)
        if ((float)want[t] <= (float)want[ev])
            ev = t;
    float* sc = malloc((size_t)n * 4);
    vkh2o_cache_snapshot after = { .scores = sc, .positions = pos };
    assert_int_equal(vkh2o_cache_read_snapshot(c, 0, &after), VKH2O_OK);
    assert_int_equal(after.len, S);
    double worst = 0;
    for (uint32_t i = 0, t = 0; t < n; t++) {
        if (t == ev)
            continue;
        if (pos[i] != t)
            fail_msg("slot %u holds position %u, expected %u (evicted %u)", i, pos[i], t, ev);
        double e = fabs(sc[i] - want[t]) / fabs(want[t]);
        worst = e > worst ? e : worst;
        if (!(e <= 1e-5))
            fail_msg("position %u: score %.9g, expected %.9g", t, sc[i], want[t]);
        i++;
    }
    print_message("  one step over %u tokens: output max error %.2e of max |out| %.3g, score rel err %.2e, evicted %u\n", n,
                  err / mx, mx, worst, ev);
    vkh2o_buffer* bufs[] = { ba, bb, bm, bq, bo };
    for (size_t i = 0; i < 5; i++)
        vkh2o_buffer_destroy(bufs[i]);
    vkh2o_cache_destroy(c);
    free(W); free(ckv); free(kpe); free(q); free(mass); free(a); free(b); free(sc0); free(pos); free(got);
    free(qa); free(qp); free(ol); free(ref); free(m); free(want); free(sc);
    vt_check_validation();
}

/* Several steps in one dispatch (nsteps) leave exactly the state of one dispatch per step. */
static void test_multi_step_dispatch(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    uint32_t seed = (uint32_t)vt_seed("test_multi_step_dispatch");
    vkh2o_cache_desc d = small_desc();
    d.seed = seed;
    vkh2o_cache *c1, *c2;
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c1), VKH2O_OK);
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c2), VKH2O_OK);
    /* the public views of a run (vkh2o-validate): no time before one, the split in effect, the
     * pipelines built ahead */
    assert_true(vkh2o_cache_get_last_run_ms(c1) < 0.0);
    assert_true(vkh2o_cache_get_last_run_ms(NULL) < 0.0);
    assert_int_equal(vkh2o_cache_get_steps_per_dispatch(c1), c1->max_steps_per_dispatch);
    assert_true(vkh2o_cache_get_steps_per_dispatch(c1) >= 1);
    assert_int_equal(vkh2o_cache_get_steps_per_dispatch(NULL), 0);
    assert_int_equal(vkh2o_cache_prepare(c2, VKH2O_STEP_MOCK), VKH2O_OK);
    assert_non_null(c2->step_kernel[1]);
    assert_int_equal(vkh2o_cache_prepare(NULL, 0), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_cache_step s = { .flags = VKH2O_STEP_MOCK };
    assert_int_equal(vkh2o_run_cache_steps(c1, &s, 57), VKH2O_OK);
    if (vkh2o_context_get_caps(ctx)->timestamps)
        assert_true(vkh2o_cache_get_last_run_ms(c1) >= 0.0);
    else
        assert_true(vkh2o_cache_get_last_run_ms(c1) < 0.0);
    s.nsteps = 10;
    assert_int_equal(vkh2o_run_cache_steps(c2, &s, 57), VKH2O_OK);
    /* a failing run leaves no time behind */
    vkh2o_cache_step bad = { .layer_first = 9, .flags = VKH2O_STEP_MOCK };
    assert_int_equal(vkh2o_run_cache_steps(c2, &bad, 1), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_true(vkh2o_cache_get_last_run_ms(c2) < 0.0);
    vkh2o_cache_widths w = vkh2o_cache_get_widths(c1);
    uint32_t cap = vkh2o_cache_get_desc(c1)->capacity;
    for (uint32_t l = 0; l < d.num_layers; l++) {
        uint32_t p1[64], p2[64];
        float s1[64], s2[64];
        float* a1 = calloc((size_t)cap * w.a_width, 4);
        float* a2 = calloc((size_t)cap * w.a_width, 4);
        vkh2o_cache_snapshot x = { .positions = p1, .scores = s1, .a = a1 }, y = { .positions = p2, .scores = s2, .a = a2 };
        assert_int_equal(vkh2o_cache_read_snapshot(c1, l, &x), VKH2O_OK);
        assert_int_equal(vkh2o_cache_read_snapshot(c2, l, &y), VKH2O_OK);
        assert_int_equal(x.len, 20);
        assert_int_equal(y.len, 20);
        assert_memory_equal(p1, p2, x.len * 4);
        assert_memory_equal(s1, s2, x.len * 4);
        assert_memory_equal(a1, a2, (size_t)x.len * w.a_width * 4);
        free(a1);
        free(a2);
    }
    vkh2o_cache_stats st;
    assert_int_equal(vkh2o_cache_read_stats(c2, &st, 1), VKH2O_OK);
    assert_int_equal(st.steps, 57);
    assert_int_equal(st.evict_events, 57 - 20);
    assert_int_equal(st.evicted_tokens, 57 - 20);
    vkh2o_cache_destroy(c1);
    vkh2o_cache_destroy(c2);
    vt_check_validation();
}

/* The seed's four properties on a short run: linear growth, size exactly cap after it,
 * one eviction per layer and step past the cap, sinks and recents preserved. */
static void test_seed_properties(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    const uint32_t L = 3, steps = 200;
    vkh2o_cache_desc d = { .num_layers = L, .num_heads = 4, .qk_nope_dim = 128, .qk_rope_dim = 64, .v_dim = 128,
                           .n_sink = 4, .budget = 24, .n_recent = 8, .history_steps = steps,
                           .seed = (uint32_t)vt_seed("test_seed_properties") };
    uint32_t cap = 36;
    vkh2o_cache* c;
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_OK);
    vkh2o_cache_step s = { .flags = VKH2O_STEP_MOCK, .nsteps = 25 };
    assert_int_equal(vkh2o_run_cache_steps(c, &s, steps), VKH2O_OK);
    uint32_t* len = malloc(steps * L * 4);
    uint32_t* ev = malloc(steps * L * 4);
    assert_int_equal(vkh2o_cache_read_history(c, 0, steps, len, ev), VKH2O_OK);
    for (uint32_t t = 0; t < steps; t++)
        for (uint32_t l = 0; l < L; l++) {
            uint32_t want = t + 1 < cap ? t + 1 : cap;
            if (len[t * L + l] != want || ev[t * L + l] != (t + 1 > cap ? 1u : 0u))
                fail_msg("step %u layer %u: size %u evicted %u, expected %u and %u", t, l, len[t * L + l], ev[t * L + l], want,
                         t + 1 > cap);
        }
    vkh2o_cache_stats st[3];
    assert_int_equal(vkh2o_cache_read_stats(c, st, L), VKH2O_OK);
    for (uint32_t l = 0; l < L; l++) {
        assert_int_equal(st[l].len, cap);
        assert_int_equal(st[l].max_len, cap);
        assert_int_equal(st[l].evict_events, steps - cap);
        assert_int_equal(st[l].evicted_tokens, steps - cap);
        uint32_t pos[64];
        vkh2o_cache_snapshot snap = { .positions = pos };
        assert_int_equal(vkh2o_cache_read_snapshot(c, l, &snap), VKH2O_OK);
        for (uint32_t i = 0; i < 4; i++)
            assert_int_equal(pos[i], i);
        for (uint32_t j = 0; j < 8; j++)
            assert_int_equal(pos[cap - 1 - j], steps - 1 - j);
        for (uint32_t i = 1; i < cap; i++)
            assert_true(pos[i] > pos[i - 1]);
    }
    free(len);
    free(ev);
    vkh2o_cache_destroy(c);
    vt_check_validation();
}

/* Expanded and latent layouts give the same outputs and attention mass: the expanded K/V are
 * built from the same c_kv / k_pe through kv_b_proj (rounded to f32), fp32 storage, inputs given
 * directly (not mock). */
static void test_expanded_vs_latent(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    uint64_t seed = vt_seed("test_expanded_vs_latent");
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    const uint32_t H = 4, DN = 32, DR = 16, DV = 24, KVL = 64, S = 40;
    size_t wn = (size_t)H * (DN + DV) * KVL;
    float* W = malloc(wn * 4);
    float* ckv = malloc((size_t)S * KVL * 4);
    float* kpe = malloc((size_t)S * DR * 4);
    float* q = malloc((size_t)S * H * (DN + DR) * 4);
    float* K = malloc((size_t)S * H * (DN + DR) * 4);
    float* V = malloc((size_t)S * H * DV * 4);
    vt_fill_normal(&rng, W, wn, 1.0f / sqrtf((float)KVL));
    vt_fill_normal(&rng, ckv, (size_t)S * KVL, 1.0f);
    vt_fill_normal(&rng, kpe, (size_t)S * DR, 1.0f);
    vt_fill_normal(&rng, q, (size_t)S * H * (DN + DR), 1.0f);
    ref_expand_kv(H, DN, DR, DV, KVL, W, S, ckv, kpe, K, V);

    vkh2o_cache_desc de = { .num_heads = H, .qk_nope_dim = DN, .qk_rope_dim = DR, .v_dim = DV, .storage = VKH2O_DTYPE_F32,
                            .n_sink = 2, .budget = 10, .n_recent = 4 };
    vkh2o_cache_desc dl = de;
    dl.layout = VKH2O_LAYOUT_LATENT;
    dl.kv_lora_rank = KVL;
    dl.kv_b_proj = W;
    vkh2o_cache *ce, *cl;
    assert_int_equal(vkh2o_cache_create(ctx, &de, &ce), VKH2O_OK);
    assert_int_equal(vkh2o_cache_create(ctx, &dl, &cl), VKH2O_OK);
    assert_int_equal(vkh2o_cache_get_widths(cl).q_width, DN + DR);
    assert_int_equal(vkh2o_cache_get_widths(cl).out_width, DV);
    vkh2o_buffer* bq = vt_upload_f32(q, (size_t)S * H * (DN + DR));
    vkh2o_buffer* bK = vt_upload_f32(K, (size_t)S * H * (DN + DR));
    vkh2o_buffer* bV = vt_upload_f32(V, (size_t)S * H * DV);
    vkh2o_buffer* bc = vt_upload_f32(ckv, (size_t)S * KVL);
    vkh2o_buffer* bp = vt_upload_f32(kpe, (size_t)S * DR);
    vkh2o_buffer* oe = vt_buffer((size_t)H * DV * 4);
    vkh2o_buffer* ol = vt_buffer((size_t)H * DV * 4);
    float ge[128], gl[128];
    double worst_out = 0, worst_score = 0;
    for (uint32_t t = 0; t < S; t++) {
        vt_poison(oe);
        vt_poison(ol);
        uint64_t qo = (uint64_t)t * H * (DN + DR) * 4;
        vkh2o_cache_step se = { .position = t, .step = t, .q = bq, .q_offset = qo, .a = bK, .a_offset = qo, .b = bV,
                                .b_offset = (uint64_t)t * H * DV * 4, .out = oe };
        vkh2o_cache_step sl = { .position = t, .step = t, .q = bq, .q_offset = qo, .a = bc, .a_offset = (uint64_t)t * KVL * 4,
                                .b = bp, .b_offset = (uint64_t)t * DR * 4, .out = ol, .flags = VKH2O_STEP_RECORD_KEYS };
        assert_int_equal(vkh2o_run_cache_steps(ce, &se, 1), VKH2O_OK);
        assert_int_equal(vkh2o_run_cache_steps(cl, &sl, 1), VKH2O_OK);
        vt_download_f32(oe, ge, H * DV);
        vt_download_f32(ol, gl, H * DV);
        vt_check_guard(oe, (size_t)H * DV * 4);
        vt_check_guard(ol, (size_t)H * DV * 4);
        vt_assert_finite("expanded out", ge, H * DV);
        vt_assert_finite("latent out", gl, H * DV);
        double r = vt_max_rel(gl, ge, H * DV);
        worst_out = r > worst_out ? r : worst_out;
        /* fp32 through different products: bound 1e-4 of max |out| */
        if (!(r <= 1e-4))
            fail_msg("step %u: latent vs expanded output rel error %.3g", t, r);
        uint32_t pe[32], pl[32];
        float se_[32], sl_[32];
        vkh2o_cache_snapshot xe = { .positions = pe, .scores = se_ }, xl = { .positions = pl, .scores = sl_ };
        assert_int_equal(vkh2o_cache_read_snapshot(ce, 0, &xe), VKH2O_OK);
        assert_int_equal(vkh2o_cache_read_snapshot(cl, 0, &xl), VKH2O_OK);
        assert_int_equal(xe.len, xl.len);
        /* the kept sets may only differ at near ties of the scores */
        bool same = !memcmp(pe, pl, xe.len * 4);
        if (same) {
            for (uint32_t i = 0; i < xe.len; i++) {
                double e = fabs((double)se_[i] - sl_[i]) / fabs((double)se_[i]);
                worst_score = e > worst_score ? e : worst_score;
                if (!(e <= 1e-4))
                    fail_msg("step %u slot %u: scores %.9g vs %.9g", t, i, se_[i], sl_[i]);
            }
        } else {
            fail_msg("step %u: expanded and latent kept different positions", t);
        }
    }
    print_message("  %u steps: latent vs expanded output max rel error %.2e, score max rel error %.2e\n", S, worst_out,
                  worst_score);
    vkh2o_buffer* bufs[] = { bq, bK, bV, bc, bp, oe, ol };
    for (size_t i = 0; i < 7; i++)
        vkh2o_buffer_destroy(bufs[i]);
    vkh2o_cache_destroy(ce);
    vkh2o_cache_destroy(cl);
    free(W);
    free(ckv);
    free(kpe);
    free(q);
    free(K);
    free(V);
    vt_check_validation();
}

/* Given (not mock) inputs: the output and mass of one step against ref_attn_expanded. */
static void test_given_inputs(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("test_given_inputs"));
    const uint32_t H = 3, DQK = 40, DV = 24, S = 23;
    vkh2o_cache_desc d = { .num_heads = H, .qk_nope_dim = 24, .qk_rope_dim = 16, .v_dim = DV, .storage = VKH2O_DTYPE_F32,
                           .budget = 64 };
    vkh2o_cache* c;
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_OK);
    float* K = malloc((size_t)S * H * DQK * 4);
    float* V = malloc((size_t)S * H * DV * 4);
    float* q = malloc((size_t)H * DQK * 4);
    vt_fill_normal(&rng, K, (size_t)S * H * DQK, 1.0f);
    vt_fill_normal(&rng, V, (size_t)S * H * DV, 1.0f);
    vt_fill_normal(&rng, q, (size_t)H * DQK, 1.0f);
    vkh2o_buffer* bK = vt_upload_f32(K, (size_t)S * H * DQK);
    vkh2o_buffer* bV = vt_upload_f32(V, (size_t)S * H * DV);
    vkh2o_buffer* bq = vt_upload_f32(q, (size_t)H * DQK);
    vkh2o_buffer* bo = vt_buffer((size_t)H * DV * 4);
    for (uint32_t t = 0; t < S; t++) {
        vkh2o_cache_step s = { .position = t, .q = bq, .a = bK, .a_offset = (uint64_t)t * H * DQK * 4, .b = bV,
                               .b_offset = (uint64_t)t * H * DV * 4, .out = t + 1 == S ? bo : NULL };
        assert_int_equal(vkh2o_run_cache_steps(c, &s, 1), VKH2O_OK);
    }
    double out[128], mass[64];
    ref_attn_expanded(H, DQK, DV, S, q, K, V, 1.0f / sqrtf((float)DQK), out, mass);
    float got[128], ref[128];
    vt_download_f32(bo, got, H * DV);
    vt_check_guard(bo, (size_t)H * DV * 4);
    for (uint32_t i = 0; i < H * DV; i++)
        ref[i] = (float)out[i];
    vt_assert_nmse("given-input output", got, ref, H * DV, 1e-10);
    /* the last query's mass is the only one: scores equal the sum over the S steps of masses
     * of the same q, checked for the last token (seen by one query) */
    float sc[64];
    vkh2o_cache_snapshot snap = { .scores = sc };
    assert_int_equal(vkh2o_cache_read_snapshot(c, 0, &snap), VKH2O_OK);
    assert_int_equal(snap.len, S);
    assert_true(fabs(sc[S - 1] - mass[S - 1]) <= 1e-5 * mass[S - 1] + 1e-7);
    vkh2o_buffer_destroy(bK);
    vkh2o_buffer_destroy(bV);
    vkh2o_buffer_destroy(bq);
    vkh2o_buffer_destroy(bo);
    free(K);
    free(V);
    free(q);
    vkh2o_cache_destroy(c);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_desc_validation),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_given_inputs),
        cmocka_unit_test(test_steps_vs_reference),
        cmocka_unit_test(test_split_vs_reference),
        cmocka_unit_test(test_split_kimi_shape),
        cmocka_unit_test(test_multi_step_dispatch),
        cmocka_unit_test(test_seed_properties),
        cmocka_unit_test(test_expanded_vs_latent),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
