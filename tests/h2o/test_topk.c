/* Exact top-k selection (vkh2o_cmd_topk, shaders/h2o/topk.comp) against the CPU reference
 * (ref_topk_keep: a sort by value desc, index asc). Selection results must match exactly: the
 * same kept indices in ascending order, ties won by the lower index; nothing is written past the
 * kept count (the rest of the output stays poisoned, guard words intact), and the count the
 * device stores equals the reference's. Lengths 1 .. 131072, k = 0, 1, m - 1, m, > m, with the
 * sink/recent ranges of the cache, random and adversarial score distributions, every policy. */
#include "vkh2o_test.h"
#include "ref_h2o.h"
#include "cache_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum dist { D_UNIFORM, D_EQUAL, D_DUPS, D_DENORMAL, D_HUGE, D_ZEROS, D_SIGNED, D_COUNT } dist;
static const char* dist_name[D_COUNT] = { "uniform", "all-equal", "few-values", "denormals", "huge", "zeros", "signed" };

static void fill(vt_rng* r, dist d, float* x, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        switch (d) {
        case D_UNIFORM: x[i] = vt_uniform(r); break;
        case D_EQUAL: x[i] = 0.375f; break;
        case D_DUPS: x[i] = (float)vt_u32_below(r, 5) * 0.25f; break;
        case D_DENORMAL: {
            uint32_t b = vt_u32_below(r, 4) == 0 ? 0u : 1u + vt_u32_below(r, 0x7fffffu);   /* subnormals and zeros */
            memcpy(&x[i], &b, 4);
            break;
        }
        case D_HUGE: x[i] = vt_u32_below(r, 3) == 0 ? FLT_MAX : vt_uniform(r) * 3.0e38f; break;
        case D_ZEROS: x[i] = vt_u32_below(r, 8) == 0 ? vt_uniform(r) : 0.0f; break;
        case D_SIGNED: {
            uint32_t c = vt_u32_below(r, 6);
            x[i] = c == 0 ? -0.0f : c == 1 ? 0.0f : c == 2 ? -vt_uniform(r) * 100.0f : vt_normal(r);
            break;
        }
        default: x[i] = 0; break;
        }
    }
}

typedef struct tcase {
    uint32_t n, begin, end, k;
    dist d;
    uint32_t policy, mode;
} tcase;

static void run_case(vt_rng* r, const tcase* t)
{
    vkh2o_context* ctx = vt_ctx();
    float* x = malloc((t->n ? t->n : 1) * sizeof *x);
    fill(r, t->d, x, t->n);
    uint32_t m = t->end - t->begin;
    uint32_t cur = t->n + 7, seed = vt_u64(r) & 0xffffffffu, layer = 3, pos_base = 5;
    double* val = malloc((t->n ? t->n : 1) * sizeof *val);
    for (uint32_t i = 0; i < t->n; i++)
        val[i] = ref_select_value(t->policy, t->mode, x[i], pos_base + i, cur, seed, layer, true);
    uint32_t* want = malloc((t->n ? t->n : 1) * 4);
    uint32_t nw = ref_topk_keep(val, t->n, t->begin, t->end, t->k, want);

    const uint32_t off = 3;   /* outputs start at an element offset */
    size_t out_bytes = ((size_t)off + t->n + 1) * 4;
    vkh2o_buffer* sb = vt_upload_f32(x, t->n ? t->n : 1);
    vkh2o_buffer* ob = vt_buffer(out_bytes);
    uint64_t wb = vkh2o_topk_work_bytes(m);
    vkh2o_buffer* work = vt_buffer(wb);
    vkh2o_topk_args a = {
        .scores = vkh2o_bind(sb), .n = t->n, .begin = t->begin, .end = t->end, .k = t->k,
        .out = vkh2o_bind_range(ob, 0, out_bytes), .out_off = off, .work = vkh2o_bind_range(work, 0, wb),
        .policy = t->policy, .score_mode = t->mode, .pos_base = pos_base, .cur = cur, .seed = seed, .layer = layer,
    };
    assert_int_equal(vkh2o_topk_count(&a), nw);
    uint32_t* got = malloc(out_bytes);
    /* both paths: scores from the storage binding, and through a texel view (scores_buffer) of
     * a copy that starts 67 floats into its buffer (the view starts on the 256-byte boundary
     * below) */
    const uint32_t soff = 67;
    float* xs = calloc((size_t)soff + t->n + 1, sizeof *xs);
    memcpy(xs + soff, x, (size_t)t->n * sizeof *xs);
    vkh2o_buffer* sb2 = vt_upload_f32(xs, soff + t->n);
    for (int tex = 0; tex < 2; tex++) {
        a.scores = tex ? vkh2o_bind(sb2) : vkh2o_bind(sb);
        a.score_off = tex ? soff : 0;
        a.scores_buffer = tex ? sb2 : NULL;
        vt_poison(ob);
        VkCommandBuffer cb;
        assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
        assert_int_equal(vkh2o_cmd_topk(ctx, cb, &a), VKH2O_OK);
        assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_download(ob, 0, got, out_bytes), VKH2O_OK);
        for (uint32_t i = 0; i < off; i++)
            assert_int_equal(got[i], VT_POISON);
        for (uint32_t i = 0; i < nw; i++)
            if (got[off + i] != want[i])
                fail_msg("n %u [%u,%u) k %u %s policy %u mode %u %s: kept[%u] = %u, reference %u", t->n, t->begin, t->end,
                         t->k, dist_name[t->d], t->policy, t->mode, tex ? "texel" : "storage", i, got[off + i], want[i]);
        for (uint32_t i = off + nw; i < t->n + off + 1; i++)
            assert_int_equal(got[i], VT_POISON);
        vt_check_guard(ob, out_bytes);
        if (t->n) {
            uint32_t count;
            assert_int_equal(vkh2o_buffer_download(work, VKH2O_TOPK_WORK_COUNT * 4, &count, 4), VKH2O_OK);
            assert_int_equal(count, nw);
        }
    }
    free(xs);
    vkh2o_buffer_destroy(sb2);
    free(got);
    free(want);
    free(val);
    free(x);
    vkh2o_buffer_destroy(sb);
    vkh2o_buffer_destroy(ob);
    vkh2o_buffer_destroy(work);
}

static void test_lengths_and_k(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("test_lengths_and_k"));
    const uint32_t lens[] = { 1, 2, 3, 63, 64, 65, 84, 85, 100, 257, 1000, 2049, 4117 };
    uint32_t cases = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        uint32_t n = lens[li];
        /* the cache's ranges: everything, and sinks 4 / recent 16 when they fit */
        uint32_t ranges[2][2] = { { 0, n }, { n > 20 ? 4 : 0, n > 20 ? n - 16 : n } };
        for (int ri = 0; ri < 2; ri++) {
            uint32_t b = ranges[ri][0], e = ranges[ri][1], m = e - b;
            uint32_t ks[] = { 0, 1, m > 1 ? m / 2 : 1, m ? m - 1 : 0, m, m + 5, 64 };
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                tcase t = { n, b, e, ks[ki], (dist)((li + ki) % D_COUNT), 0, 0 };
                run_case(&r, &t);
                cases++;
            }
        }
    }
    print_message("  %u cases (n up to 4117) match the reference exactly\n", cases);
    vt_check_validation();
}

static void test_distributions(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("test_distributions"));
    for (int d = 0; d < D_COUNT; d++) {
        const uint32_t ns[] = { 77, 3001 };
        for (int i = 0; i < 2; i++) {
            uint32_t n = ns[i];
            tcase t = { n, 4, n - 16, n / 3, (dist)d, 0, 0 };
            print_message("  %-10s n=%u k=%u\n", dist_name[d], n, t.k);
            run_case(&r, &t);
            t.k = 1;
            run_case(&r, &t);
        }
    }
    vt_check_validation();
}

static void test_policies(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("test_policies"));
    const uint32_t ns[] = { 9, 256, 1500 };
    for (int i = 0; i < 3; i++) {
        uint32_t n = ns[i];
        tcase t = { n, 4, n - 4, n / 4 + 1, D_UNIFORM, VKH2O_POLICY_STREAMING, 0 };
        run_case(&r, &t);
        t.policy = VKH2O_POLICY_RANDOM;
        run_case(&r, &t);
        /* mean mode: score / (cur - pos + 1) in f32, as the device computes it */
        t.policy = VKH2O_POLICY_H2O;
        t.mode = VKH2O_SCORE_MEAN;
        run_case(&r, &t);
        t.d = D_DUPS;
        run_case(&r, &t);
        print_message("  n=%u: streaming, random, mean (uniform, duplicates) exact\n", n);
    }
    vt_check_validation();
}

static void test_large(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("test_large"));
    tcase t = { 131072, 0, 131072, 4096, D_UNIFORM, 0, 0 };
    run_case(&r, &t);
    t = (tcase){ 131072, 4, 131072 - 32, 64, D_DUPS, 0, 0 };
    run_case(&r, &t);
    t = (tcase){ 131071, 1, 131070, 65535, D_EQUAL, 0, 0 };
    run_case(&r, &t);
    print_message("  131072 candidates: k = 4096 uniform, 64 of few values, 65535 all equal: exact\n");
    vt_check_validation();
}

static void test_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_buffer* b = vt_buffer(64);
    vkh2o_buffer* w = vt_buffer(vkh2o_topk_work_bytes(8));
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_topk_args a = { .scores = vkh2o_bind(b), .n = 8, .begin = 5, .end = 3, .k = 1, .out = vkh2o_bind(b),
                          .work = vkh2o_bind(w) };
    assert_int_equal(vkh2o_cmd_topk(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a.begin = 0;
    a.end = 9;
    assert_int_equal(vkh2o_cmd_topk(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a.end = 8;
    a.n = 100;   /* 100 scores do not fit 64 + guard bytes */
    a.end = 100;
    assert_int_equal(vkh2o_cmd_topk(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a.n = a.end = 8;
    a.work = vkh2o_bind_range(w, 0, 64);
    assert_int_equal(vkh2o_cmd_topk(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "workspace"));
    a.work = vkh2o_bind(w);
    a.policy = 7;
    assert_int_equal(vkh2o_cmd_topk(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_cmd_topk(ctx, cb, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vkh2o_buffer_destroy(b);
    vkh2o_buffer_destroy(w);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_lengths_and_k),
        cmocka_unit_test(test_distributions),
        cmocka_unit_test(test_policies),
        cmocka_unit_test(test_large),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
