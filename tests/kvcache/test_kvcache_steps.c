/*
 * vkh2o_run_kvcache_steps: n steps (several layers, several tokens) recorded into one command
 * buffer and submitted once give bit-identical caches (positions, scores, tiers, rows) and
 * outputs to the same steps run one vkh2o_run_kvcache_step at a time; a bad step in the list
 * is refused with the steps before it run; NULL and n = 0. Steps over several layers at once
 * (vkh2o_kvcache_step.num_layers, strides between the layers' inputs and outputs) give the same,
 * bit for bit; their bad strides, layer ranges and step_layers are refused.
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
    vkh2o_kvcache *a, *b, *m;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &a), VKH2O_OK);
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &b), VKH2O_OK);
    vkh2o_kvcache_desc dm = d;
    dm.step_layers = L;
    assert_int_equal(vkh2o_kvcache_create(ctx, &dm, &m), VKH2O_OK);
    assert_int_equal(vkh2o_kvcache_get_plan(m)->workspace_bytes, L * vkh2o_kvcache_get_plan(a)->workspace_bytes);
    const uint32_t per = H * W + W, n = STEPS * L;
    float* in = malloc(sizeof(float) * per * n);
    vt_fill_normal(&rng, in, (size_t)per * n, 0.7f);
    vkh2o_buffer* bin = vt_upload_f32(in, (size_t)per * n);
    vkh2o_buffer* oa = vt_buffer(4ull * L * H * KVL);
    vkh2o_buffer* ob = vt_buffer(4ull * L * H * KVL);
    vkh2o_buffer* om = vt_buffer(4ull * L * H * KVL);
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
    /* m: the layers of a step in one step (even steps all three; odd steps layer 0 alone, then
     * layers 1 and 2 together), each layer's inputs per floats after the one before */
    for (uint32_t t = 0; t < STEPS; t++) {
        vkh2o_kvcache_step st[2];
        uint32_t ns = 0;
        for (uint32_t l = 0; l < L;) {
            const uint32_t nl = t % 2 ? (l == 0 ? 1 : L - 1) : L;
            st[ns] = s[t * L + l];
            st[ns].out = om;
            st[ns].num_layers = nl;
            st[ns].in_stride = 4ull * per;
            st[ns].out_stride = 4ull * H * KVL;
            ns++;
            l += nl;
        }
        assert_int_equal(vkh2o_run_kvcache_steps(m, st, ns), VKH2O_OK);
    }
    uint32_t evicted = 0;
    for (uint32_t l = 0; l < L; l++) {
        held ha, hb, hm;
        read_held(a, l, &ha);
        read_held(b, l, &hb);
        read_held(m, l, &hm);
        assert_int_equal(hm.len, hb.len);
        assert_memory_equal(hm.pos, hb.pos, 4ull * hb.len);
        assert_memory_equal(hm.score, hb.score, 4ull * hb.len);
        assert_memory_equal(hm.tier, hb.tier, hb.len);
        assert_memory_equal(hm.rows, hb.rows, 4ull * hb.len * W);
        vkh2o_kvcache_stats sm;
        assert_int_equal(vkh2o_kvcache_read_stats(m, l, &sm), VKH2O_OK);
        free_held(&hm);
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
        assert_memory_equal(&sm, &sb, sizeof sm);
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
    vt_download_f32(om, xa, (size_t)L * H * KVL);
    assert_memory_equal(xa, xb, 4ull * L * H * KVL);
    printf("%s policy %d mode %d: %u steps in 2 submissions = %u single steps = %u steps of several layers, "
           "bit-identical\n", vkh2o_kv_precision_name(prec), pol, mode, n, n, STEPS + STEPS / 2);
    free(xa);
    free(xb);
    free(s);
    free(in);
    vkh2o_buffer_destroy(bin);
    vkh2o_buffer_destroy(oa);
    vkh2o_buffer_destroy(ob);
    vkh2o_buffer_destroy(om);
    vkh2o_kvcache_destroy(a);
    vkh2o_kvcache_destroy(b);
    vkh2o_kvcache_destroy(m);
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
    vkh2o_kvcache_destroy(c);
    /* several layers in one step: step_layers above num_layers; more layers than step_layers or
     * than the cache has from the step's first; strides off 4 bytes; outputs that would overlap;
     * inputs past the buffer for the last layer. Each refused, the cache untouched */
    d.num_layers = 2;
    d.step_layers = 3;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_ERROR_INVALID_ARGUMENT);
    d.step_layers = 1;
    vkh2o_kvcache* c1;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c1), VKH2O_OK);
    d.step_layers = 2;
    assert_int_equal(vkh2o_kvcache_create(ctx, &d, &c), VKH2O_OK);
    vkh2o_buffer* big = vt_buffer(4ull * 2 * 48);
    vkh2o_buffer* out = vt_buffer(4ull * 2 * 2 * 16);
    const vkh2o_kvcache_step ok = { .q = big, .ckv = big, .ckv_offset = 4 * 24, .kpe = big, .kpe_offset = 4 * 40, .out = out,
                                    .num_layers = 2, .in_stride = 4 * 48, .out_stride = 4 * 32 };
    vkh2o_kvcache_step bad = ok;
    assert_int_equal(vkh2o_run_kvcache_step(c1, &bad), VKH2O_ERROR_INVALID_ARGUMENT);   /* step_layers 1 */
    bad.layer = 1;
    assert_int_equal(vkh2o_run_kvcache_step(c, &bad), VKH2O_ERROR_INVALID_ARGUMENT);    /* layers 1 .. 2 of 2 */
    bad = ok;
    bad.in_stride = 4 * 48 + 2;
    assert_int_equal(vkh2o_run_kvcache_step(c, &bad), VKH2O_ERROR_INVALID_ARGUMENT);
    bad = ok;
    bad.out_stride = 4 * 31;
    assert_int_equal(vkh2o_run_kvcache_step(c, &bad), VKH2O_ERROR_INVALID_ARGUMENT);
    bad = ok;
    bad.in_stride = vkh2o_buffer_get_size(big);   /* the second layer's inputs past the buffer's end */
    assert_int_equal(vkh2o_run_kvcache_step(c, &bad), VKH2O_ERROR_INVALID_ARGUMENT);
    for (uint32_t l = 0; l < 2; l++) {
        assert_int_equal(vkh2o_kvcache_read_stats(c, l, &st), VKH2O_OK);
        assert_int_equal(st.position, 0);
    }
    assert_int_equal(vkh2o_run_kvcache_step(c, &ok), VKH2O_OK);
    for (uint32_t l = 0; l < 2; l++) {
        assert_int_equal(vkh2o_kvcache_read_stats(c, l, &st), VKH2O_OK);
        assert_int_equal(st.position, 1);
    }
    vkh2o_buffer_destroy(big);
    vkh2o_buffer_destroy(out);
    vkh2o_buffer_destroy(bq);
    vkh2o_kvcache_destroy(c);
    vkh2o_kvcache_destroy(c1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_equal_single),
        cmocka_unit_test(test_steps_refused),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
