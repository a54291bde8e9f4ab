/*
 * vkh2o_run_kvcache_steps: n steps (several layers, several tokens) recorded into one command
 * buffer and submitted once give bit-identical caches (positions, scores, tiers, rows) and
 * outputs to the same steps run one vkh2o_run_kvcache_step at a time; a bad step in the list
 * is refused with the steps before it run; NULL and n = 0.
 */
#include "vkh2o_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct held {
    uint32_t len;
    uint32_t* pos;
    float* score;
    uint8_t* tier;
    float* rows;
} held;

static void read_held(vkh2o_kvcache* c, uint32_t layer, held* h)
{
    const uint32_t S = vkh2o_kvcache_get_plan(c)->total_slots;
    const vkh2o_kvcache_desc* d = vkh2o_kvcache_get_desc(c);
    const uint32_t W = d->kv_lora_rank + d->qk_rope_head_dim;
    h->pos = calloc(S, 4);
    h->score = calloc(S, 4);
    h->tier = calloc(S, 1);
    h->rows = calloc((size_t)S * W, 4);
    vkh2o_kvcache_snapshot s = { .positions = h->pos, .scores = h->score, .tiers = h->tier, .rows = h->rows };
    assert_int_equal(vkh2o_kvcache_read_snapshot(c, layer, &s), VKH2O_OK);
    h->len = s.len;
}

static void free_held(held* h)
{
    free(h->pos);
    free(h->score);
    free(h->tier);
    free(h->rows);
}

static void run_case(vkh2o_kv_precision prec, vkh2o_evict_policy pol, vkh2o_score_mode mode, uint64_t seed)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    const uint32_t L = 3, H = 3, KVL = 40, R = 8, W = KVL + R, STEPS = 37;
    vkh2o_kvcache_desc d = { .num_layers = L, .num_heads = H, .kv_lora_rank = KVL, .qk_rope_head_dim = R, .scale = 0.2f,
                             .max_tokens = STEPS, .capacity_tokens = 17, .n_sink = 2, .n_recent = 3, .policy = pol,
                             .score_mode = mode, .seed = 5, .precision = prec };
    if (prec == VKH2O_PRECISION_TIERED) {
        d.tier_tokens[0] = 3;
        d.tier_tokens[1] = 4;
    }
    vkh2o_kvcache *a, *b;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &a), VKH2O_OK);
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &b), VKH2O_OK);
    const uint32_t per = H * W + W, n = STEPS * L;
    float* in = malloc(sizeof(float) * per * n);
    vt_fill_normal(&rng, in, (size_t)per * n, 0.7f);
    vkh2o_buffer* bin = vt_upload_f32(in, (size_t)per * n);
    vkh2o_buffer* oa = vt_buffer(4ull * L * H * KVL);
    vkh2o_buffer* ob = vt_buffer(4ull * L * H * KVL);
    vkh2o_kvcache_step* s = calloc(n, sizeof *s);
    for (uint32_t t = 0; t < STEPS; t++)
        for (uint32_t l = 0; l < L; l++) {
            const uint64_t off = 4ull * per * (t * L + l);
            s[t * L + l] = (vkh2o_kvcache_step){ .layer = l, .q = bin, .q_offset = off, .ckv = bin,
                                                 .ckv_offset = off + 4ull * H * W, .kpe = bin,
                                                 .kpe_offset = off + 4ull * (H * W + KVL), .out = oa,
                                                 .out_offset = 4ull * l * H * KVL };
        }
    /* a: in two calls of many steps (an odd split across layers); b: one step per call */
    assert_int_equal(vkh2o_run_kvcache_steps(a, s, 20), VKH2O_OK);
    assert_int_equal(vkh2o_run_kvcache_steps(a, s + 20, n - 20), VKH2O_OK);
    for (uint32_t i = 0; i < n; i++) {
        vkh2o_kvcache_step one = s[i];
        one.out = ob;
        assert_int_equal(vkh2o_run_kvcache_step(b, &one), VKH2O_OK);
    }
    uint32_t evicted = 0;
    for (uint32_t l = 0; l < L; l++) {
        held ha, hb;
        read_held(a, l, &ha);
        read_held(b, l, &hb);
        assert_int_equal(ha.len, hb.len);
        assert_int_equal(ha.len, 17);
        assert_memory_equal(ha.pos, hb.pos, 4ull * ha.len);
        assert_memory_equal(ha.score, hb.score, 4ull * ha.len);
        assert_memory_equal(ha.tier, hb.tier, ha.len);
        assert_memory_equal(ha.rows, hb.rows, 4ull * ha.len * W);
        vkh2o_kvcache_stats sa, sb;
        assert_int_equal(vkh2o_kvcache_read_stats(a, l, &sa), VKH2O_OK);
        assert_int_equal(vkh2o_kvcache_read_stats(b, l, &sb), VKH2O_OK);
        assert_memory_equal(&sa, &sb, sizeof sa);
        assert_int_equal(sa.position, STEPS);
        evicted += sa.evicted;
        free_held(&ha);
        free_held(&hb);
    }
    assert_int_equal(evicted, L * (STEPS - 17));
    float* xa = malloc(4ull * L * H * KVL);
    float* xb = malloc(4ull * L * H * KVL);
    vt_download_f32(oa, xa, (size_t)L * H * KVL);
    vt_download_f32(ob, xb, (size_t)L * H * KVL);
    assert_memory_equal(xa, xb, 4ull * L * H * KVL);
    printf("%s policy %d mode %d: %u steps in 2 submissions = %u single steps, bit-identical\n",
           vkh2o_kv_precision_name(prec), pol, mode, n, n);
    free(xa);
    free(xb);
    free(s);
    free(in);
    vkh2o_buffer_destroy(bin);
    vkh2o_buffer_destroy(oa);
    vkh2o_buffer_destroy(ob);
    vkh2o_kvcache_destroy(a);
    vkh2o_kvcache_destroy(b);
}

static void test_steps_equal_single(void** state)
{
    (void)state;
    run_case(VKH2O_PRECISION_FP16, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, vt_seed(__func__));
    run_case(VKH2O_PRECISION_INT4, VKH2O_POLICY_RANDOM, VKH2O_SCORE_SUM, vt_seed(__func__) + 1);
    run_case(VKH2O_PRECISION_TIERED, VKH2O_POLICY_H2O, VKH2O_SCORE_DECAY, vt_seed(__func__) + 2);
}

static void test_steps_refused(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_kvcache_desc d = { .num_layers = 1, .num_heads = 2, .kv_lora_rank = 16, .qk_rope_head_dim = 8, .max_tokens = 8 };
    vkh2o_kvcache* c;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
    vkh2o_buffer* bq = vt_buffer(4ull * 2 * 24);
    vkh2o_kvcache_step s[3] = { { .q = bq, .ckv = bq, .kpe = bq }, { .q = bq, .ckv = bq, .kpe = bq },
                                { .layer = 1, .q = bq, .ckv = bq, .kpe = bq } };   /* layer 1 of 1 */
    assert_int_equal(vkh2o_run_kvcache_steps(c, s, 3), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_kvcache_stats st;
    assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
    assert_int_equal(st.position, 2);   /* the two steps before the bad one ran */
    assert_int_equal(vkh2o_run_kvcache_steps(c, NULL, 0), VKH2O_OK);
    assert_int_equal(vkh2o_run_kvcache_steps(c, NULL, 1), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_kvcache_steps(NULL, s, 1), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
    assert_int_equal(st.position, 2);
    vkh2o_buffer_destroy(bq);
    vkh2o_kvcache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_equal_single),
        cmocka_unit_test(test_steps_refused),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
