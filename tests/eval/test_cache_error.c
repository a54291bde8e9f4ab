/* What a cache configuration costs against the full FP16 cache (include/vkh2o/eval.h:
 * vkh2o_eval_ladder_kvcache_desc, vkh2o_eval_bytes_kvcache_desc, vkh2o_eval_cache_error_run) on
 * seeded random rows of a small latent shape: the ladder and bytes descs' figures and refusals
 * (no device); on the device, the FP16 configuration has error 0 and ratio 1, error grows INT8 <
 * INT4 < INT2, every row's bytes are its tiers' counts x token bytes and its device bytes the
 * plan's, the NMSE and largest relative error equal the host's from the outputs of two caches the
 * test feeds itself, the reference's rows are the inputs at FP16, progress counts every cache,
 * and bad inputs are refused with a message naming them. */
#include "vkh2o_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 3, L = 30, R = 6, W = L + R, T0 = 40, D = 4, N = T0 + D, SINKS = 2, RECENTS = 4 };

static vkh2o_kvcache_desc base_desc(void)
{
    return (vkh2o_kvcache_desc){ .num_heads = H, .kv_lora_rank = L, .qk_rope_head_dim = R, .max_tokens = N,
                                 .n_sink = SINKS, .n_recent = RECENTS, .policy = VKH2O_POLICY_H2O };
}

static void test_descs(void** state)
{
    (void)state;
    const vkh2o_kvcache_desc base = base_desc();
    vkh2o_kvcache_desc d;
    vkh2o_error err = { 0 };
    /* balanced over 40 tokens: M = 34, FP16 floor(8.5) = 8, INT8 floor(25.5) - 8 = 17, INT4 the rest */
    assert_int_equal(vkh2o_eval_ladder_kvcache_desc(VKH2O_EVAL_LADDER_BALANCED, &base, 40, &d, &err), VKH2O_OK);
    assert_int_equal(d.precision, VKH2O_PRECISION_TIERED);
    assert_int_equal(d.tier_tokens[0], 8);
    assert_int_equal(d.tier_tokens[1], 17);
    assert_int_equal(d.capacity_tokens, SINKS + RECENTS + 34);
    assert_int_equal(d.num_heads, H);
    assert_int_equal(d.max_tokens, N);
    /* aggressive: FP16 floor(3.4) = 3, INT8 floor(13.6) - 3 = 10, kept floor(27.2) = 27 */
    d = base;
    assert_int_equal(vkh2o_eval_ladder_kvcache_desc(VKH2O_EVAL_LADDER_AGGRESSIVE, &d, 40, &d, &err), VKH2O_OK);
    assert_int_equal(d.tier_tokens[0], 3);
    assert_int_equal(d.tier_tokens[1], 10);
    assert_int_equal(d.capacity_tokens, SINKS + RECENTS + 27);
    /* conservative: INT8 takes the rest (no INT8 count); a uniform ladder sets the precision only */
    assert_int_equal(vkh2o_eval_ladder_kvcache_desc(VKH2O_EVAL_LADDER_CONSERVATIVE, &base, 40, &d, &err), VKH2O_OK);
    assert_int_equal(d.tier_tokens[0], 17);
    assert_int_equal(d.tier_tokens[1], 0);
    assert_int_equal(vkh2o_eval_ladder_kvcache_desc(VKH2O_EVAL_LADDER_UNIFORM_INT4, &d, 40, &d, &err), VKH2O_OK);
    assert_int_equal(d.precision, VKH2O_PRECISION_INT4);
    assert_int_equal(d.tier_tokens[0] | d.capacity_tokens, 0);
    /* refusals */
    assert_int_equal(vkh2o_eval_ladder_kvcache_desc(VKH2O_EVAL_LADDER_BALANCED, &base, SINKS + RECENTS + 9, &d, &err),
                     VKH2O_ERROR_BUDGET);
    assert_non_null(strstr(err.message, "ladder balanced needs n_tokens of at least"));
    assert_int_equal(vkh2o_eval_ladder_kvcache_desc(VKH2O_EVAL_LADDER_NONE, &base, 40, &d, &err),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "unknown ladder 0"));
    assert_int_equal(vkh2o_eval_ladder_kvcache_desc(VKH2O_EVAL_LADDER_BALANCED, NULL, 40, &d, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    /* bytes: a quarter of 44 tokens at FP16's token bytes */
    const uint32_t tb = vkh2o_kvcache_token_bytes(&base, VKH2O_TIER_FP16);
    assert_int_equal(vkh2o_eval_bytes_kvcache_desc(&base, N, 0.25, 0xf, &d, &err), VKH2O_OK);
    assert_int_equal(d.precision, VKH2O_PRECISION_TIERED);
    assert_int_equal(d.capacity_bytes, (uint64_t)(0.25 * N * tb));
    assert_int_equal(d.tier_mask, 0xf);
    assert_int_equal(vkh2o_eval_bytes_kvcache_desc(&base, N, 0, 0, &d, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "frac 0 is not in (0, 1]"));
    assert_int_equal(vkh2o_eval_bytes_kvcache_desc(&base, N, 1.5, 0, &d, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_eval_bytes_kvcache_desc(&base, 0, 0.5, 0, &d, &err), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "n_tokens is 0"));
    assert_int_equal(vkh2o_eval_bytes_kvcache_desc(&base, N, 0.5, 0, NULL, &err), VKH2O_ERROR_INVALID_ARGUMENT);
}

/* The test's data on the device: rows with a few salient tokens, queries towards them, the
 * prompt's mass from the salience. */
typedef struct data {
    float ckv[N * L], kpe[N * R], mass[T0], q[D * H * W];
    vkh2o_buffer *ckv_b, *kpe_b, *mass_b, *q_b, *out_b;
} data;

static data* make_data(void)
{
    data* x = calloc(1, sizeof *x);
    assert_non_null(x);
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("cache error data"));
    vt_fill_normal(&rng, x->ckv, N * L, 1.0f);
    vt_fill_normal(&rng, x->kpe, N * R, 1.0f);
    vt_fill_normal(&rng, x->q, D * H * W, 0.5f);
    for (int t = 0; t < T0; t++)
        x->mass[t] = vt_uniform(&rng);
    x->ckv_b = vt_upload_f32(x->ckv, N * L);
    x->kpe_b = vt_upload_f32(x->kpe, N * R);
    x->mass_b = vt_upload_f32(x->mass, T0);
    x->q_b = vt_upload_f32(x->q, D * H * W);
    x->out_b = vt_buffer(sizeof(float) * D * H * L);
    return x;
}

static void free_data(data* x)
{
    vkh2o_buffer_destroy(x->ckv_b);
    vkh2o_buffer_destroy(x->kpe_b);
    vkh2o_buffer_destroy(x->mass_b);
    vkh2o_buffer_destroy(x->q_b);
    vkh2o_buffer_destroy(x->out_b);
    free(x);
}

static vkh2o_eval_cache_error_desc run_desc(const data* x, const vkh2o_kvcache_desc* configs, uint32_t n)
{
    return (vkh2o_eval_cache_error_desc){ .configs = configs, .n_configs = n, .n_prompt = T0, .n_steps = D, .ckv = x->ckv_b,
                                          .kpe = x->kpe_b, .mass = x->mass_b, .q = x->q_b, .out = x->out_b };
}

/* One cache fed by the test itself: its step outputs [D][H][L]. */
static void own_outputs(vkh2o_context* ctx, const data* x, const vkh2o_kvcache_desc* desc, float* out)
{
    vkh2o_kvcache* c = NULL;
    assert_int_equal(vkh2o_kvcache_create(ctx, desc, &c), VKH2O_OK);
    assert_int_equal(vkh2o_run_kvcache_prefill(c, &(vkh2o_kvcache_prefill){ .n = T0, .ckv = x->ckv_b, .kpe = x->kpe_b,
                                                                             .mass = x->mass_b }),
                     VKH2O_OK);
    for (uint64_t i = 0; i < D; i++) {
        const uint64_t t = T0 + i;
        const vkh2o_kvcache_step s = { .q = x->q_b, .q_offset = 4 * i * H * W, .ckv = x->ckv_b, .ckv_offset = 4 * t * L,
                                       .kpe = x->kpe_b, .kpe_offset = 4 * t * R, .out = x->out_b,
                                       .out_offset = 4 * i * H * L };
        assert_int_equal(vkh2o_run_kvcache_step(c, &s), VKH2O_OK);
    }
    vt_download_f32(x->out_b, out, D * H * L);
    vkh2o_kvcache_destroy(c);
}

static void count_progress(uint64_t done, uint64_t total, void* user_data)
{
    uint64_t* seen = user_data;
    assert_int_equal(done, seen[0] + 1);
    seen[0] = done;
    seen[1] = total;
}

static void test_run(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    data* x = make_data();
    const vkh2o_kvcache_desc base = base_desc();
    enum { NC = 5 };
    vkh2o_kvcache_desc configs[NC];
    for (int p = 0; p < 4; p++) {
        configs[p] = base;
        configs[p].precision = (vkh2o_kv_precision)p;   /* fp16, int8, int4, int2 */
    }
    assert_int_equal(vkh2o_eval_bytes_kvcache_desc(&base, N, 0.5, 0, &configs[4], NULL), VKH2O_OK);
    static float ref_rows[N * W];
    uint32_t ref_len = 0;
    uint64_t seen[2] = { 0, 0 };
    vkh2o_eval_cache_error_desc ed = run_desc(x, configs, NC);
    ed.ref_rows = ref_rows;
    ed.ref_len = &ref_len;
    ed.progress = count_progress;
    ed.progress_user_data = seen;
    vkh2o_eval_cache_error out[NC];
    assert_int_equal(vkh2o_eval_cache_error_run(ctx, &ed, out), VKH2O_OK);
    assert_int_equal(seen[0], NC + 1);
    assert_int_equal(seen[1], NC + 1);
    vt_check_guard(x->out_b, sizeof(float) * D * H * L);
    const uint32_t tb16 = vkh2o_kvcache_token_bytes(&base, VKH2O_TIER_FP16);
    for (int i = 0; i < NC; i++) {
        const vkh2o_eval_cache_error* e = &out[i];
        printf("  %-8s held %u (fp16 %u int8 %u int4 %u int2 %u, evicted %u) bytes %llu ratio %.4f device %llu nmse %.3e "
               "max_rel %.3e\n", i < 4 ? vkh2o_kv_precision_name((vkh2o_kv_precision)i) : "bytes-50%", e->stats.len,
               e->stats.by_tier[0], e->stats.by_tier[1], e->stats.by_tier[2], e->stats.by_tier[3], e->stats.evicted,
               (unsigned long long)e->stats.bytes_used, e->ratio, (unsigned long long)e->device_bytes, e->nmse, e->max_rel);
        vkh2o_kvcache_desc rd;
        vkh2o_kvcache_plan plan;
        assert_int_equal(vkh2o_kvcache_desc_resolve(&configs[i], &rd, &plan, NULL), VKH2O_OK);
        assert_int_equal(e->device_bytes, vkh2o_kvcache_plan_bytes(&plan));
        assert_int_equal(e->device_bytes, vkh2o_kvcache_plan_bytes(&e->plan));
        assert_int_equal(e->desc.precision, configs[i].precision);
        uint64_t counted = 0;
        uint32_t held = 0;
        for (int k = 0; k < VKH2O_TIER_COUNT; k++) {
            counted += (uint64_t)e->stats.by_tier[k] * vkh2o_kvcache_token_bytes(&e->desc, (vkh2o_kv_tier)k);
            held += e->stats.by_tier[k];
        }
        assert_int_equal(e->stats.bytes_used, counted);
        assert_int_equal(held, e->stats.len);
        assert_int_equal(e->stats.len + e->stats.evicted, N);
        assert_int_equal(e->ref_bytes, (uint64_t)N * tb16);
        assert_true(fabs(e->ratio - (double)e->stats.bytes_used / (double)e->ref_bytes) < 1e-12);
        assert_true(isfinite(e->nmse) && isfinite(e->max_rel));
    }
    /* the full FP16 configuration is the reference: no error */
    assert_true(out[0].nmse == 0 && out[0].max_rel == 0 && out[0].ratio == 1);
    /* fewer bits, more error, fewer bytes */
    assert_true(0 < out[1].nmse && out[1].nmse < out[2].nmse && out[2].nmse < out[3].nmse);
    assert_true(out[1].max_rel < out[3].max_rel);
    assert_true(out[0].stats.bytes_used > out[1].stats.bytes_used && out[1].stats.bytes_used > out[2].stats.bytes_used &&
                out[2].stats.bytes_used > out[3].stats.bytes_used);
    assert_true(out[4].stats.bytes_used + tb16 <= configs[4].capacity_bytes);
    /* the reference's rows: the inputs at FP16, by position */
    assert_int_equal(ref_len, N);
    for (int t = 0; t < N; t++)
        for (int c = 0; c < W; c++) {
            const float want = c < L ? x->ckv[t * L + c] : x->kpe[t * R + c - L];
            assert_true(fabsf(ref_rows[t * W + c] - want) <= 1e-3f * fabsf(want) + 1e-6f);
        }
    /* NMSE and max_rel from the outputs of the FP16 and INT4 caches, fed here */
    static float ref[D * H * L], o4[D * H * L];
    vkh2o_kvcache_desc rdesc = base;
    own_outputs(ctx, x, &rdesc, ref);
    own_outputs(ctx, x, &configs[2], o4);
    double e_all = 0, r_all = 0, max_rel = 0;
    for (int i = 0; i < D; i++) {
        double e = 0, r2 = 0;
        for (int j = 0; j < H * L; j++) {
            const double dx = (double)o4[i * H * L + j] - (double)ref[i * H * L + j];
            e += dx * dx;
            r2 += (double)ref[i * H * L + j] * ref[i * H * L + j];
        }
        e_all += e;
        r_all += r2;
        max_rel = fmax(max_rel, sqrt(e / r2));
    }
    printf("  int4 from the test's own caches: nmse %.6e (the call's %.6e), max_rel %.6e (%.6e)\n", e_all / r_all,
           out[2].nmse, max_rel, out[2].max_rel);
    assert_true(fabs(e_all / r_all - out[2].nmse) <= 1e-9 * out[2].nmse);
    assert_true(fabs(max_rel - out[2].max_rel) <= 1e-9 * out[2].max_rel);
    free_data(x);
    vt_check_validation();
}

static void expect_refusal(vkh2o_context* ctx, const vkh2o_eval_cache_error_desc* d, vkh2o_eval_cache_error* out,
                           vkh2o_result want, const char* text)
{
    const vkh2o_result r = vkh2o_eval_cache_error_run(ctx, d, out);
    printf("  refused (%s): %s\n", vkh2o_result_string(r), vkh2o_last_error(ctx));
    assert_int_equal(r, want);
    assert_non_null(strstr(vkh2o_last_error(ctx), text));
}

static void test_refusals(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    data* x = make_data();
    vkh2o_kvcache_desc configs[2] = { base_desc(), base_desc() };
    configs[1].precision = VKH2O_PRECISION_INT8;
    vkh2o_eval_cache_error out[2];
    vkh2o_eval_cache_error_desc d = run_desc(x, configs, 2);
    const vkh2o_memory_stats m0 = vkh2o_context_get_memory_stats(ctx);
    assert_int_equal(vkh2o_eval_cache_error_run(NULL, &d, out), VKH2O_ERROR_INVALID_ARGUMENT);
    expect_refusal(ctx, NULL, out, VKH2O_ERROR_INVALID_ARGUMENT, "cache error: NULL desc");
    expect_refusal(ctx, &d, NULL, VKH2O_ERROR_INVALID_ARGUMENT, "cache error: NULL out");
    d.n_configs = 0;
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "no configuration");
    d = run_desc(x, configs, 2);
    d.n_steps = 0;
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "n_steps is 0");
    d = run_desc(x, configs, 2);
    d.n_steps = D + 1;   /* one more token than max_tokens */
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "reference: max_tokens 44 is below n_prompt 40 + n_steps 5");
    d = run_desc(x, configs, 2);
    configs[1].num_heads = 4;
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "configuration 1: its shape (heads 4");
    configs[1].num_heads = H;
    configs[1].group_size[VKH2O_TIER_INT8] = 1000;
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "configuration 1: kvcache: group_size[int8] 1000");
    configs[1].group_size[VKH2O_TIER_INT8] = 0;
    d.q = x->mass_b;   /* far too small for the queries */
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "cache error: q needs");
    d = run_desc(x, configs, 2);
    d.out = NULL;
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "cache error: out buffer is NULL");
    configs[0].layout = configs[1].layout = VKH2O_LAYOUT_EXPANDED;
    configs[0].qk_nope_head_dim = configs[1].qk_nope_head_dim = 8;
    configs[0].v_head_dim = configs[1].v_head_dim = 8;
    d = run_desc(x, configs, 2);
    expect_refusal(ctx, &d, out, VKH2O_ERROR_INVALID_ARGUMENT, "rows are LATENT");
    /* a refusal makes nothing on the device */
    const vkh2o_memory_stats m1 = vkh2o_context_get_memory_stats(ctx);
    assert_int_equal(m1.device_allocations, m0.device_allocations);
    assert_int_equal(m1.device_bytes, m0.device_bytes);
    free_data(x);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descs),
        cmocka_unit_test(test_run),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
