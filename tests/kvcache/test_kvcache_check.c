/*
 * vkh2o_kvcache_check: no problem after every step of capped caches (FP16, INT4, tiered pools,
 * tiers by bytes, every policy), of the full cache (whose held bytes after each step are
 * vkh2o_kvcache_plan_held_bytes'), after a prefill, a refused step past
 * max_tokens and a reset; each invariant it names broken when the cache's state words are
 * overwritten (the position, the evicted count) or a sink's row is moved; NULL and a bad layer.
 */
#include "vkh2o_test.h"
#include "kvcache_internal.h"   /* the state words and the arena, to break the cache on purpose */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 3, KVL = 30, R = 6, W = KVL + R, STEPS = 30 };

/* random step inputs: q [H][W], ckv [KVL], kpe [R] */
typedef struct inputs {
    vkh2o_buffer *q, *ckv, *kpe;
} inputs;

static void inputs_make(inputs* in, vt_rng* rng)
{
    float q[H * W], ckv[KVL], kpe[R];
    vt_fill_normal(rng, q, H * W, 1.0f);
    vt_fill_normal(rng, ckv, KVL, 1.0f);
    vt_fill_normal(rng, kpe, R, 1.0f);
    in->q = vt_buffer(sizeof q);
    in->ckv = vt_buffer(sizeof ckv);
    in->kpe = vt_buffer(sizeof kpe);
    assert_int_equal(vkh2o_buffer_upload(in->q, 0, q, sizeof q), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(in->ckv, 0, ckv, sizeof ckv), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(in->kpe, 0, kpe, sizeof kpe), VKH2O_OK);
}

static void inputs_free(inputs* in)
{
    vkh2o_buffer_destroy(in->q);
    vkh2o_buffer_destroy(in->ckv);
    vkh2o_buffer_destroy(in->kpe);
}

static void assert_clean(vkh2o_kvcache* c, uint32_t layer, const char* what, uint32_t step)
{
    vkh2o_kvcache_check_result k;
    assert_int_equal(vkh2o_kvcache_check(c, layer, &k), VKH2O_OK);
    if (k.problems)
        fail_msg("%s, step %u: problems 0x%x: %s", what, step, k.problems, k.message);
    assert_string_equal(k.message, "");
    assert_int_equal(k.len, k.stats.len);
}

static vkh2o_kvcache_desc base_desc(void)
{
    return (vkh2o_kvcache_desc){ .num_layers = 2, .num_heads = H, .kv_lora_rank = KVL, .qk_rope_head_dim = R, .max_tokens = STEPS,
                                 .capacity_tokens = 12, .n_sink = 2, .n_recent = 3, .seed = 7 };
}

/* steps one token at a time in both layers (one step of two layers), checking both after each */
static void run_clean(const char* what, const vkh2o_kvcache_desc* d, vt_rng* rng)
{
    vkh2o_kvcache* c;
    vkh2o_kvcache_desc dd = *d;
    dd.step_layers = 2;
    assert_int_equal(vkh2o_kvcache_create(vt_ctx(), &dd, &c), VKH2O_OK);
    inputs in;
    inputs_make(&in, rng);
    for (uint32_t s = 0; s < STEPS; s++) {
        const vkh2o_kvcache_step st = { .q = in.q, .ckv = in.ckv, .kpe = in.kpe, .num_layers = 2 };
        assert_int_equal(vkh2o_run_kvcache_step(c, &st), VKH2O_OK);
        for (uint32_t l = 0; l < 2; l++)
            assert_clean(c, l, what, s);
        /* the plan's bytes after s + 1 tokens are what the cache reports holding */
        vkh2o_kvcache_stats held;
        assert_int_equal(vkh2o_kvcache_read_stats(c, 1, &held), VKH2O_OK);
        if (vkh2o_kvcache_plan_held_bytes(vkh2o_kvcache_get_desc(c), vkh2o_kvcache_get_plan(c), s + 1) != held.bytes_used)
            fail_msg("%s, step %u: vkh2o_kvcache_plan_held_bytes %llu, the cache holds %llu", what, s,
                     (unsigned long long)vkh2o_kvcache_plan_held_bytes(vkh2o_kvcache_get_desc(c), vkh2o_kvcache_get_plan(c), s + 1),
                     (unsigned long long)held.bytes_used);
    }
    vkh2o_kvcache_check_result k;
    assert_int_equal(vkh2o_kvcache_check(c, 1, &k), VKH2O_OK);
    const uint32_t kept = vkh2o_kvcache_get_plan(c)->kept_tokens;
    assert_int_equal(k.stats.position, STEPS);
    if (!vkh2o_kvcache_get_plan(c)->by_bytes)
        assert_int_equal(k.stats.len, kept < STEPS ? kept : STEPS);
    /* a step past max_tokens is refused on the device: still clean */
    assert_int_equal(vkh2o_run_kvcache_step(c, &(vkh2o_kvcache_step){ .q = in.q, .ckv = in.ckv, .kpe = in.kpe }), VKH2O_OK);
    assert_clean(c, 0, what, STEPS);
    assert_int_equal(vkh2o_run_kvcache_reset(c), VKH2O_OK);
    assert_clean(c, 0, what, 0);
    inputs_free(&in);
    vkh2o_kvcache_destroy(c);
}

static void test_check_clean(void** state)
{
    (void)state;
    const uint64_t seed = vt_seed("test_check_clean");
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    vkh2o_kvcache_desc d = base_desc();
    run_clean("fp16 h2o", &d, &rng);
    /* the default run: two of the other four, turning with the seed (vt_pick); the full run all */
    if (vt_pick(seed, 0, 2)) {
        d.precision = VKH2O_PRECISION_INT4;
        d.policy = VKH2O_POLICY_RANDOM;
        run_clean("int4 random", &d, &rng);
    }
    if (vt_pick(seed, 1, 2)) {
        d = base_desc();
        d.precision = VKH2O_PRECISION_TIERED;
        d.tier_tokens[0] = 3;
        d.tier_tokens[1] = 3;
        d.score_mode = VKH2O_SCORE_MEAN;
        run_clean("tiered pools", &d, &rng);
    }
    if (vt_pick(seed, 1, 2)) {
        d = base_desc();
        d.capacity_tokens = 0;
        run_clean("full cache", &d, &rng);
    }
    if (vt_pick(seed, 0, 2)) {
        d = base_desc();
        d.capacity_tokens = 0;
        d.precision = VKH2O_PRECISION_TIERED;
        d.capacity_bytes = 12ull * vkh2o_kvcache_token_bytes(&d, VKH2O_TIER_FP16);
        run_clean("tiers by bytes", &d, &rng);
    }
}

/* a prefill of more tokens than the capacity keeps kept_tokens and counts the rest evicted */
static void test_check_prefill(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("test_check_prefill"));
    vkh2o_kvcache_desc d = base_desc();
    d.precision = VKH2O_PRECISION_INT8;
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(vt_ctx(), &d, &c), VKH2O_OK);
    const uint32_t n = 20;
    float ckv[20 * KVL], kpe[20 * R], mass[20];
    vt_fill_normal(&rng, ckv, 20 * KVL, 1.0f);
    vt_fill_normal(&rng, kpe, 20 * R, 1.0f);
    for (uint32_t i = 0; i < n; i++)
        mass[i] = vt_uniform(&rng);
    vkh2o_buffer *bc = vt_buffer(sizeof ckv), *bk = vt_buffer(sizeof kpe), *bm = vt_buffer(sizeof mass);
    assert_int_equal(vkh2o_buffer_upload(bc, 0, ckv, sizeof ckv), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bk, 0, kpe, sizeof kpe), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bm, 0, mass, sizeof mass), VKH2O_OK);
    assert_int_equal(vkh2o_run_kvcache_prefill(c, &(vkh2o_kvcache_prefill){ .layer = 1, .n = n, .ckv = bc, .kpe = bk, .mass = bm }),
                     VKH2O_OK);
    assert_clean(c, 1, "prefill", n);
    vkh2o_kvcache_check_result k;
    assert_int_equal(vkh2o_kvcache_check(c, 1, &k), VKH2O_OK);
    assert_int_equal(k.stats.len, vkh2o_kvcache_get_plan(c)->kept_tokens);
    assert_int_equal(k.stats.evicted, n - k.stats.len);
    assert_int_equal(vkh2o_kvcache_plan_held_bytes(vkh2o_kvcache_get_desc(c), vkh2o_kvcache_get_plan(c), n), k.stats.bytes_used);
    assert_int_equal(vkh2o_kvcache_plan_held_bytes(NULL, vkh2o_kvcache_get_plan(c), n), 0);
    assert_clean(c, 0, "the other layer, empty", 0);
    vkh2o_buffer_destroy(bc);
    vkh2o_buffer_destroy(bk);
    vkh2o_buffer_destroy(bm);
    vkh2o_kvcache_destroy(c);
}

static void set_word(vkh2o_kvcache* c, uint32_t layer, uint32_t word, uint32_t v)
{
    assert_int_equal(vkh2o_buffer_upload(c->state, 4ull * (layer * KVC_ST_WORDS + word), &v, 4), VKH2O_OK);
}

/* each invariant broken on purpose is named, with its figures and the first problem's words */
static void test_check_broken(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("test_check_broken"));
    vkh2o_kvcache_desc d = base_desc();
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(vt_ctx(), &d, &c), VKH2O_OK);
    inputs in;
    inputs_make(&in, &rng);
    for (uint32_t s = 0; s < 8; s++)   /* 8 tokens: below the capacity of 12 */
        assert_int_equal(vkh2o_run_kvcache_step(c, &(vkh2o_kvcache_step){ .q = in.q, .ckv = in.ckv, .kpe = in.kpe }), VKH2O_OK);
    assert_clean(c, 0, "before", 8);
    vkh2o_kvcache_check_result k;

    /* one more token seen than held: the size, the evicted count and the newest recent are off */
    set_word(c, 0, KVC_ST_POS, 9);
    assert_int_equal(vkh2o_kvcache_check(c, 0, &k), VKH2O_OK);
    assert_int_equal(k.problems, VKH2O_KV_PROBLEM_SIZE | VKH2O_KV_PROBLEM_EVICTED | VKH2O_KV_PROBLEM_RECENT);
    assert_int_equal(k.recent, 0);
    assert_int_equal(k.recent_held, 7);
    assert_string_equal(k.message, "layer 0 holds 8 tokens after 9 seen (at most 12 kept)");
    /* fewer seen than held: positions not yet seen */
    set_word(c, 0, KVC_ST_POS, 6);
    assert_int_equal(vkh2o_kvcache_check(c, 0, &k), VKH2O_OK);
    assert_true(k.problems & VKH2O_KV_PROBLEM_POSITION);
    set_word(c, 0, KVC_ST_POS, 8);
    /* a token counted evicted that is held */
    set_word(c, 0, KVC_ST_EVICTED, 1);
    assert_int_equal(vkh2o_kvcache_check(c, 0, &k), VKH2O_OK);
    assert_int_equal(k.problems, VKH2O_KV_PROBLEM_EVICTED);
    assert_string_equal(k.message, "layer 0: 8 held + 1 evicted tokens, 8 seen");
    set_word(c, 0, KVC_ST_EVICTED, 0);
    assert_clean(c, 0, "repaired", 8);
    assert_clean(c, 1, "the other layer", 0);

    /* slot 0 of the top tier holds position 0 (the first token appended): give it position 5,
     * so that sink 0 is missing and position 5 is held twice */
    const uint32_t pw = c->row_words[0];   /* the slot's position word, after its row words */
    kvc_layer_copy lc;
    assert_int_equal(vkh2o_kvcache_copy_layer(c, 0, &lc), VKH2O_OK);
    assert_int_equal(lc.tok[0][pw], 0);
    vkh2o_kvcache_copy_free(&lc);
    const uint32_t five = 5;
    assert_int_equal(vkh2o_buffer_upload(c->arena, 4ull * pw, &five, 4), VKH2O_OK);
    assert_int_equal(vkh2o_kvcache_check(c, 0, &k), VKH2O_OK);
    assert_int_equal(k.problems, VKH2O_KV_PROBLEM_SINK | VKH2O_KV_PROBLEM_POSITION);
    assert_int_equal(k.sink, 0);
    assert_int_equal(k.sink_held, 1);
    assert_int_equal(k.recent, UINT32_MAX);

    /* the bad arguments */
    assert_int_equal(vkh2o_kvcache_check(NULL, 0, &k), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_kvcache_check(c, 2, &k), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_kvcache_check(c, 0, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    inputs_free(&in);
    vkh2o_kvcache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_clean),
        cmocka_unit_test(test_check_prefill),
        cmocka_unit_test(test_check_broken),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
